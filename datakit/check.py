"""Dataset health checks (``datakit check``) and contact sheets (``datakit preview``).

A check reads every sample in parallel and reports, one line each with file and sheet/row:
unreadable or empty images, files the table names but the disk lacks, files on disk the table
does not name, duplicate rows, integer labels outside ``0..C-1``; then class counts per split
and the range of image sizes.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from datakit.datasets import ImageDataset, TableDataset, open_dataset
from datakit.errors import DataError, UsageError
from datakit.io import IMAGE_EXTENSIONS, WRITE_EXTENSIONS, probe_image
from datakit.labels import LabelError, LabelTable, read_labels
from datakit.parallel import map_ordered

__all__ = ["PREVIEW_EXTENSIONS", "CheckReport", "check_dataset", "preview"]


@dataclass
class CheckReport:
    """The outcome of :func:`check_dataset`: problems (one line each), counts and size ranges."""

    samples: int = 0
    problems: list[str] = field(default_factory=list)
    class_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    height_range: tuple[int, int] | None = None
    width_range: tuple[int, int] | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {"samples": self.samples, "problems": self.problems, "class_counts": self.class_counts,
                "height_range": self.height_range, "width_range": self.width_range}  # fmt: skip


def _probe(ds: ImageDataset, i: int) -> tuple[int, int, str | None]:
    """``(height, width, None)`` of sample ``i`` from its header, or ``(0, 0, reason)``."""
    try:
        h, w = probe_image(ds.read(i), ds.name(i))
        return h, w, None
    except (ValueError, OSError, KeyError) as exc:
        text = str(exc)
        return 0, 0, text if ds.name(i) in text else f"{ds.name(i)}: {text}"


def check_dataset(
    src: str | os.PathLike,
    *,
    labels: str | os.PathLike | None = None,
    split: str | None = None,
    workers: int | None = None,
    distributed: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> CheckReport:
    """Read every sample of ``src`` (anything :func:`open_dataset` takes) and report what is wrong.

    With an initialised ``torch.distributed`` process group (and ``distributed``), each rank reads
    its share of the samples and every rank gets the whole report.
    """
    report = CheckReport()
    table: LabelTable | None = read_labels(labels) if labels is not None else None
    try:
        ds = open_dataset(src, labels=table, split=split)
    except LabelError as exc:
        # a table that opens once integer labels are remapped has only that problem: report it and go on
        try:
            ds = open_dataset(src, labels=table, split=split, remap_labels=True)
        except LabelError:
            raise exc from None
        report.problems.append(str(exc))
    if isinstance(ds, TableDataset):
        _check_table(ds, src, labels is not None and split is None, report)
    missing = {i for i in range(len(ds)) if isinstance(ds, TableDataset) and ds.zip is None
               and not os.path.isfile(ds.files[i])}  # fmt: skip
    todo = [i for i in range(len(ds)) if i not in missing]
    sizes = np.zeros((len(ds), 2), dtype=np.int64)
    ok = np.zeros(len(ds), dtype=bool)
    rank, world = _process_group() if distributed else (0, 1)
    mine = todo[rank::world]
    probes = list(zip(mine, map_ordered(_probe, mine, workers=workers, dataset=ds, per_worker=64, progress=progress)))
    if world > 1:  # every rank read its share; every rank gets the whole report
        import torch.distributed as dist

        parts: list = [None] * world
        dist.all_gather_object(parts, probes)
        probes = sorted(p for part in parts for p in part)
    for i, (h, w, err) in probes:
        if err is not None:
            where = f" ({ds.where(i)})" if isinstance(ds, TableDataset) else ""
            report.problems.append(f"unreadable: {err}{where}")
        else:
            sizes[i], ok[i] = (h, w), True
    report.samples = len(ds)
    splits = ds.table.splits if isinstance(ds, TableDataset) else [""] * len(ds)
    counts: dict[str, Counter] = defaultdict(Counter)
    for i in range(len(ds)):
        counts[splits[i] or "all"][ds.classes[int(ds.targets[i])]] += 1
    report.class_counts = {s: dict(sorted(c.items())) for s, c in counts.items()}
    for s, c in report.class_counts.items():
        empty = [k for k in ds.classes if k not in c]
        if empty and s != "all":
            report.problems.append(f"split {s!r} has no samples of class {', '.join(map(repr, empty))}")
    if ok.any():
        report.height_range = (int(sizes[ok, 0].min()), int(sizes[ok, 0].max()))
        report.width_range = (int(sizes[ok, 1].min()), int(sizes[ok, 1].max()))
    return report


def _process_group() -> tuple[int, int]:
    """(rank, world size) of an initialised ``torch.distributed`` group, else (0, 1)."""
    import sys

    dist = sys.modules.get("torch.distributed")  # no group can exist if torch.distributed was never imported
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _check_table(ds: TableDataset, src: str | os.PathLike, whole_folder: bool, report: CheckReport) -> None:
    seen: dict[str, int] = {}
    for i in range(len(ds)):
        f = ds.files[i]
        key = os.path.normcase(os.path.normpath(f))
        if key in seen:
            report.problems.append(
                f"duplicate: {ds.table.files[i]!r} at {ds.where(i)} is also at {ds.where(seen[key])}"
            )
        else:
            seen[key] = i
        if ds.zip is None and not os.path.isfile(f):
            report.problems.append(f"missing: {ds.table.files[i]!r} ({ds.where(i)}) not found at {f}")
    if whole_folder and os.path.isdir(src):  # with one split asked for, the others' files are expected
        on_disk = set()
        for dirpath, _, names in os.walk(src):
            for n in names:
                if n.lower().endswith(IMAGE_EXTENSIONS):
                    on_disk.add(os.path.normcase(os.path.normpath(os.path.join(dirpath, n))))
        named = {os.path.normcase(os.path.normpath(ds.files[i])) for i in range(len(ds))}
        for extra in sorted(on_disk - named):
            report.problems.append(f"not in the table: {extra}")


# ---------------------------------------------------------------------------------------------
# preview

_FONT_CANDIDATES = (
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/noto-cjk/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",
    "/System/Library/Fonts/PingFang.ttc",
    "C:/Windows/Fonts/msyh.ttc",
    "C:/Windows/Fonts/simhei.ttf",
)
_LATIN_FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"


def _font(size: int):
    from PIL import ImageFont

    for path in _FONT_CANDIDATES:
        if os.path.exists(path):
            try:
                return ImageFont.truetype(path, size), True
            except OSError:
                continue
    if os.path.exists(_LATIN_FONT):
        return ImageFont.truetype(_LATIN_FONT, size), False
    return ImageFont.load_default(size), False


def _to_hwc_uint8(img) -> np.ndarray:
    import torch

    if isinstance(img, torch.Tensor):
        t = img.detach().cpu()
        if t.dtype.is_floating_point:
            t = (t.clamp(0, 1) * 255).round().to(torch.uint8) if t.max() <= 1.0 and t.min() >= 0 else (
                ((t - t.min()) / (t.max() - t.min() + 1e-8)) * 255).to(torch.uint8)  # fmt: skip
        img = t.permute(1, 2, 0).numpy() if t.ndim == 3 and t.shape[0] in (1, 3) else t.numpy()
    img = np.asarray(img)
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    if img.shape[2] == 1:
        img = np.repeat(img, 3, axis=2)
    return np.ascontiguousarray(img[..., :3])


PREVIEW_EXTENSIONS = WRITE_EXTENSIONS


def preview(
    ds: ImageDataset,
    out: str | os.PathLike,
    *,
    n: int = 32,
    cols: int = 8,
    tile: int = 160,
    seed: int = 0,
    overwrite: bool = False,
) -> Path:
    """A contact sheet of ``n`` random samples as the model sees them (after the dataset's transform),
    each captioned with its index and class, written atomically to ``out`` (``PREVIEW_EXTENSIONS``).

    Raises:
        UsageError: ``n``, ``cols`` or ``tile`` below 1, an unknown extension, an existing ``out``
            without ``overwrite``, an empty dataset.
    """
    import cv2
    from PIL import Image, ImageDraw

    from datakit.io import check_output, imwrite

    out = Path(out)
    for name, value in (("n", n), ("cols", cols), ("tile", tile)):
        if value < 1:
            raise UsageError(f"{name} must be at least 1, got {value}")
    if out.suffix.lower() not in PREVIEW_EXTENSIONS:
        raise UsageError(f"{out}: cannot tell the picture format; end the name in {', '.join(PREVIEW_EXTENSIONS)}")
    check_output(out, overwrite=overwrite)
    if len(ds) == 0:
        raise DataError("the dataset is empty: nothing to preview")
    rng = np.random.default_rng(seed)
    picks = np.sort(rng.choice(len(ds), size=min(n, len(ds)), replace=False))
    rows = -(-len(picks) // cols)
    cap = max(14, tile // 9)
    sheet = Image.new("RGB", (cols * tile, rows * (tile + cap + 6)), (32, 32, 32))
    draw = ImageDraw.Draw(sheet)
    font, unicode_font = _font(cap)
    for k, i in enumerate(picks):
        img, target = ds[int(i)]
        rgb = _to_hwc_uint8(img)
        if ds.mode == "bgr":
            rgb = rgb[..., ::-1]
        h, w = rgb.shape[:2]
        s = tile / max(h, w)
        rgb = cv2.resize(rgb, (max(1, round(w * s)), max(1, round(h * s))), interpolation=cv2.INTER_AREA)
        x, y = (k % cols) * tile, (k // cols) * (tile + cap + 6)
        sheet.paste(Image.fromarray(np.ascontiguousarray(rgb)), (x + (tile - rgb.shape[1]) // 2, y))
        label = ds.classes[int(target)] if isinstance(target, (int, np.integer)) else str(target)
        text = f"{int(i)}: {label}"
        if not unicode_font and not label.isascii():
            text = f"{int(i)}: class {int(target)}"  # no CJK font here: the caller prints the legend
        draw.text((x + 4, y + tile + 2), text, fill=(255, 255, 255), font=font)
    return imwrite(out, np.asarray(sheet), mode="rgb", overwrite=overwrite)
