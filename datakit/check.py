"""Dataset health checks (``datakit check``) and contact sheets (``datakit preview``).

A check reports every problem of the label table at once (labels.py finds them: blank cells,
duplicate files, mixed or out-of-range integer labels, missing columns, each with its sheet and
row), then reads every sample in parallel and adds, one line each, what needs the images:
unreadable or empty images, files the table names but the disk lacks, files on disk the table
does not name; then class counts per split and the range of image sizes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from datakit.datasets import ImageDataset, TableDataset, open_dataset
from datakit.errors import DataError, UsageError
from datakit.io import IMAGE_EXTENSIONS, WRITE_EXTENSIONS, probe_image
from datakit.labels import EXCEL_SUFFIXES, TEXT_SUFFIXES, LabelTable, read_labels
from datakit.parallel import map_ordered

__all__ = ["PREVIEW_EXTENSIONS", "CheckReport", "check_dataset", "preview"]

TABLE_SUFFIXES = EXCEL_SUFFIXES + TEXT_SUFFIXES


@dataclass
class CheckReport:
    """The outcome of :func:`check_dataset`: problems (one line each), notes, counts and size ranges."""

    samples: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    class_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    height_range: tuple[int, int] | None = None
    width_range: tuple[int, int] | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {"samples": self.samples, "problems": self.problems, "notes": self.notes,
                "class_counts": self.class_counts, "height_range": self.height_range,
                "width_range": self.width_range}  # fmt: skip


def _probe(ds: ImageDataset, i: int) -> tuple[int, int, str | None]:
    """``(height, width, None)`` of sample ``i`` from its header, or ``(0, 0, reason)``.

    Strict: data the decoders only warn about (``Corrupt JPEG data``, a bad CRC) is reported as
    damaged, with the C library's message attached to the file instead of printed bare.
    """
    try:
        h, w = probe_image(ds.read(i), ds.name(i), strict=True)
        return h, w, None
    except (ValueError, OSError, KeyError) as exc:
        text = str(exc)
        return 0, 0, text if ds.name(i) in text else f"{ds.name(i)}: {text}"


def _open_checked(src, labels, split: str | None, remap_labels: bool, root, options: dict,
                  report: CheckReport) -> ImageDataset:  # fmt: skip
    """The dataset to read; a table's every problem goes into the report (labels.py finds them)."""
    path = Path(src) if isinstance(src, (str, os.PathLike)) else None
    alone = labels is None and path is not None and path.is_file() and path.suffix.lower() in TABLE_SUFFIXES
    if labels is None and not alone:
        return open_dataset(src, split=split)
    table = (
        labels
        if isinstance(labels, LabelTable)
        else read_labels(labels if labels is not None else src, split=split, validate=False, **options)
    )
    report.notes += table.notes
    report.problems += table.problems(remap=remap_labels)
    class_map = table.class_map(remap=remap_labels, strict=False)  # go on reading images whatever the labels
    return TableDataset(table, root if alone else src, split=split, class_map=class_map, probe=False)


def check_dataset(
    src: str | os.PathLike,
    *,
    labels: str | os.PathLike | LabelTable | None = None,
    split: str | None = None,
    workers: int | None = None,
    distributed: bool = False,
    progress: Callable[[int, int], None] | None = None,
    remap_labels: bool = False,
    root: str | os.PathLike | None = None,
    file_column: str | None = None,
    label_column: str | None = None,
    split_column: str | None = None,
    encoding: str | None = None,
    include_hidden: bool = False,
    bad_samples: str | os.PathLike | None = None,
) -> CheckReport:
    """Read every sample of ``src`` (anything :func:`open_dataset` takes) and report what is wrong.

    With ``distributed`` and an initialised ``torch.distributed`` process group, each rank reads its
    share of the samples and every rank gets the whole report; every rank must then call it (off
    by default, so a check run on rank 0 alone does not wait for the others).

    The table's problems come from :meth:`LabelTable.problems` (all of them, each with its sheet
    and row); this adds what needs the images: files missing, unreadable, or not in the table.
    ``bad_samples``: a bad-samples file written while training; the samples it lists are
    reported as unreadable (with the reason recorded then) without being read again.
    """
    report = CheckReport()
    options = dict(file_column=file_column, label_column=label_column, split_column=split_column,
                   encoding=encoding, include_hidden=include_hidden)  # fmt: skip
    ds = _open_checked(src, labels, split, remap_labels, root, options, report)
    table_ds = ds if isinstance(ds, TableDataset) else None
    missing = set()
    if table_ds is not None:
        for i in range(len(ds)):
            if not table_ds.exists(i):
                missing.add(i)
                report.problems.append(f"missing: {table_ds.files[i]!r} ({table_ds.where(i)}) not found at "
                                       f"{table_ds.name(i)}")  # fmt: skip
        if labels is not None and split is None and os.path.isdir(src):
            _not_in_table(table_ds, src, report)  # with one split asked for, the others' files are expected
    listed = _listed_bad(ds, bad_samples, report) if bad_samples is not None else {}
    todo = [i for i in range(len(ds)) if i not in missing and i not in listed]
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
    probes = sorted(probes + [(i, (0, 0, reason)) for i, reason in listed.items()])
    for i, (h, w, err) in probes:
        if err is not None:
            where = f" ({table_ds.where(i)})" if table_ds is not None else ""
            report.problems.append(f"unreadable: {err}{where}")
        else:
            sizes[i], ok[i] = (h, w), True
    report.samples = len(ds)
    targets = np.asarray(ds.targets, dtype=np.int64)
    if table_ds is not None and table_ds.table.split_names:
        splits = table_ds.table.splits
        groups = [(name, splits.codes == code) for code, name in enumerate(splits.values)]
        groups = [(name, rows) for name, rows in groups if rows.any()]
        if (splits.codes < 0).any():
            groups.append(("all", splits.codes < 0))
    else:
        groups = [("all", np.ones(len(ds), dtype=bool))]
    for name, rows in groups:
        counts = np.bincount(targets[rows], minlength=len(ds.classes))
        report.class_counts[name] = dict(sorted((ds.classes[k], int(c)) for k, c in enumerate(counts) if c))
    if table_ds is not None and split is None:
        report.problems += table_ds.table.missing_classes(table_ds.class_map)
    if ok.any():
        report.height_range = (int(sizes[ok, 0].min()), int(sizes[ok, 0].max()))
        report.width_range = (int(sizes[ok, 1].min()), int(sizes[ok, 1].max()))
    return report


def _listed_bad(ds: ImageDataset, path: str | os.PathLike, report: CheckReport) -> dict[int, str]:
    """The samples of ``ds`` a bad-samples file lists, as problem texts; entries naming another
    file at that index (the data changed since) are problems of their own."""
    from datakit.datasets import read_bad_samples

    data = read_bad_samples(path)
    listed = {}
    for e in data["bad"]:
        i = e["index"]
        if 0 <= i < len(ds) and ds.name(i) == e["name"]:
            listed[i] = f"{e['name']}: {e['reason']} (listed in {path})"
        else:
            report.problems.append(f"{path}: sample {i} is {e['name']!r} there, not in this dataset")
    return listed


def _process_group() -> tuple[int, int]:
    """(rank, world size) of an initialised ``torch.distributed`` group, else (0, 1)."""
    import sys

    dist = sys.modules.get("torch.distributed")  # no group can exist if torch.distributed was never imported
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _not_in_table(ds: TableDataset, src: str | os.PathLike, report: CheckReport) -> None:
    on_disk = set()
    for dirpath, _, names in os.walk(src):
        for n in names:
            if n.lower().endswith(IMAGE_EXTENSIONS):
                on_disk.add(os.path.normcase(os.path.normpath(os.path.join(dirpath, n))))
    named = {os.path.normcase(os.path.normpath(ds.path(i))) for i in range(len(ds))}
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
