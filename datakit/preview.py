"""Contact sheets (``datakit preview``): a picture of what the model will see, captioned in any script.

Captions need a font that holds every character of the class names. The font is found the way
the platform finds one: fontconfig (``fc-list`` asked for fonts covering exactly those
characters), then matplotlib's font list when matplotlib is installed, then the fonts that
macOS and Windows ship; each candidate's glyphs are checked before it is used. When no font
can draw a class name, its captions show the class number and :attr:`Preview.hint` says which
package to install.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import types
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from datakit.errors import DataError, UsageError
from datakit.io import WRITE_EXTENSIONS
from datakit.sources import ImageDataset, refuse_output_in_source

__all__ = ["PREVIEW_EXTENSIONS", "CaptionFont", "Preview", "find_font", "font_hint", "preview"]

PREVIEW_EXTENSIONS = WRITE_EXTENSIONS

# Fonts macOS and Windows ship (no fontconfig there by default); tried after fontconfig and
# matplotlib, and only used when they hold the characters.
PLATFORM_FONTS = (
    "/System/Library/Fonts/PingFang.ttc",
    "/System/Library/Fonts/Hiragino Sans GB.ttc",
    "/System/Library/Fonts/STHeiti Light.ttc",
    "/System/Library/Fonts/AppleSDGothicNeo.ttc",
    "/Library/Fonts/Arial Unicode.ttf",
    "/System/Library/Fonts/Helvetica.ttc",
    "C:/Windows/Fonts/msyh.ttc",
    "C:/Windows/Fonts/simhei.ttf",
    "C:/Windows/Fonts/meiryo.ttc",
    "C:/Windows/Fonts/malgun.ttf",
    "C:/Windows/Fonts/segoeui.ttf",
    "C:/Windows/Fonts/arial.ttf",
)
_NOTDEF = "\ufdd0"  # a noncharacter: no font maps it, so it renders as the font's missing-glyph box
# fonts that map every character to a placeholder (matplotlib ships LastResortHE): they
# "cover" everything and draw nothing readable
_PLACEHOLDER_FONTS = re.compile(r"last\s*resort|notdef", re.I)
_CJK_BLOCKS = ("CJK", "HIRAGANA", "KATAKANA", "HANGUL", "BOPOMOFO", "IDEOGRAPHIC", "FULLWIDTH")


@dataclass(frozen=True)
class CaptionFont:
    """The font chosen for captions: its file (``None`` for Pillow's built-in font), the face index
    in a collection, and the characters of the captions it cannot draw (empty when it draws all)."""

    path: str | None
    index: int = 0
    missing: str = ""


@dataclass(frozen=True)
class Preview:
    """What :func:`preview` wrote: the picture, how many samples it shows, the caption font, and
    when class names could not be drawn, those names and a one-line hint (which package to install)."""

    path: Path
    samples: int
    font: CaptionFont
    undrawn: tuple[str, ...] = ()
    hint: str | None = None

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def __str__(self) -> str:
        return str(self.path)


# ---------------------------------------------------------------------------------------------
# fonts


def _load(path: str | None, index: int, size: int):
    from PIL import ImageFont

    if path is None:
        return ImageFont.load_default(size)
    return ImageFont.truetype(path, size, index=index)


def _missing(font, chars: Iterable[str]) -> str:
    """The characters of ``chars`` that ``font`` has no glyph for (it would draw its missing-glyph box)."""
    notdef = _render(font, _NOTDEF)
    return "".join(c for c in chars if not c.isspace() and _render(font, c) == notdef)


def _render(font, char: str) -> tuple:
    mask = font.getmask(char)
    return mask.size, bytes(mask)


def _fontconfig(chars: str) -> Iterator[tuple[str, int]]:
    """Font files fontconfig knows that cover every character of ``chars`` (regular sans faces first)."""
    fc_list = shutil.which("fc-list")
    if fc_list is None:
        return
    charset = " ".join(f"{ord(c):x}" for c in sorted(set(chars)) if not c.isspace())
    pattern = f":charset={charset}" if charset else ":"
    try:
        out = subprocess.run([fc_list, "--format=%{file}\t%{index}\t%{family}\t%{style}\n", pattern],
                             capture_output=True, text=True, timeout=20, check=False).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return
    found = []
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) != 4 or not parts[0]:
            continue
        path, index, family, style = parts
        # a plain regular sans face reads best at caption size; bold, italic, serif and mono after it
        rank = (("Sans" not in family) + ("Mono" in family) + ("Serif" in family)
                + (style.split(",")[0] not in ("Regular", "Book", "Medium", "Normal")))  # fmt: skip
        found.append((rank, family, path, int(index or 0)))
    for _, _, path, index in sorted(found):
        yield path, index


def _matplotlib() -> Iterator[tuple[str, int]]:
    """The fonts in matplotlib's font list, when matplotlib is installed (it scans the system's fonts)."""
    try:
        from matplotlib import font_manager
    except ImportError:
        return
    entries = sorted(font_manager.fontManager.ttflist, key=lambda f: (f.style != "normal", f.weight != 400, f.fname))
    for entry in entries:
        yield entry.fname, 0


def _candidates(explicit: str | os.PathLike | None, chars: str) -> Iterator[tuple[str, int]]:
    if explicit is not None:
        yield os.fspath(explicit), 0
        return
    yield from _fontconfig(chars)
    yield from _matplotlib()
    for path in PLATFORM_FONTS:
        if os.path.exists(path):
            yield path, 0


@lru_cache(maxsize=256)
def _find(chars: str, explicit: str | None) -> CaptionFont | None:
    """The first candidate that draws every character of ``chars`` (or ``explicit``, with what it misses)."""
    seen = set()
    for path, index in _candidates(explicit, chars):
        if (path, index) in seen or _PLACEHOLDER_FONTS.search(os.path.basename(path)):
            continue
        seen.add((path, index))
        try:
            font = _load(path, index, 16)
        except OSError:
            if explicit is not None:
                raise UsageError(f"{path}: not a font Pillow can open (TrueType, OpenType, a collection)") from None
            continue
        missing = _missing(font, chars)
        if not missing or explicit is not None:
            return CaptionFont(path, index, missing)
    return None


def find_font(texts: Sequence[str], font: str | os.PathLike | None = None, *, tries: int = 32) -> CaptionFont:
    """The font to caption ``texts`` with: the first found that draws every character; else the one
    that draws ``texts[0]`` and as many of the others as one font can (up to ``tries`` more
    searches), with :attr:`CaptionFont.missing` saying which characters it cannot draw.
    ``font`` forces a file."""

    def chars_of(items: Iterable[str]) -> str:
        return "".join(sorted({c for t in items for c in t if not c.isspace()}))

    found = _find(chars_of(texts), None if font is None else os.fspath(font))
    if found is not None:
        return found
    # no font draws every name: keep the names one font can draw together, in order
    kept = [texts[0]] if texts else []
    for text in texts[1:]:
        if tries <= 0:
            break
        if set(chars_of([text])) <= set(chars_of(kept)):
            kept.append(text)
            continue
        tries -= 1
        if _find(chars_of([*kept, text]), None) is not None:
            kept.append(text)
    best = _find(chars_of(kept), None)
    path, index = (best.path, best.index) if best is not None else (None, 0)
    return CaptionFont(path, index, _missing(_load(path, index, 16), chars_of(texts)))


def font_hint(missing: str, platform: str | None = None, font: str | os.PathLike | None = None) -> str:
    """One line on what to install (or pass) so that the characters ``missing`` can be drawn; ``font``: the
    file the caller gave (``--font``), which lacks them."""
    platform = platform or sys.platform
    chars = "".join(dict.fromkeys(missing))
    shown = chars if len(chars) <= 12 else chars[:12] + "..."
    cjk = any(any(b in unicodedata.name(c, "") for b in _CJK_BLOCKS) for c in chars)
    if platform.startswith("linux"):
        package = "fonts-noto-cjk" if cjk else "fonts-noto-core"
        install = f"install a font that has them (on Debian/Ubuntu: sudo apt install {package})"
    else:
        install = "install a font that has them"
    if font is not None:
        return f"{font} cannot draw {shown!r}: captions show class numbers; pass --font FILE of a font that has them"
    return f"no installed font can draw {shown!r}: captions show class numbers; {install}, or pass --font FILE"


# ---------------------------------------------------------------------------------------------
# the contact sheet


def _keeps_channel_order(transform) -> bool:
    """Whether ``transform`` gives tensors in the dataset's channel order: one of datakit's pipelines (BGR from a
    mode="bgr" dataset, for a model trained on BGR input), alone or the last step of a Compose."""
    from datakit.transforms import Compose, _Pipeline

    while isinstance(transform, Compose) and not isinstance(transform, _Pipeline) and transform.transforms:
        transform = transform.transforms[-1]
    return isinstance(transform, _Pipeline)


def _to_hwc_uint8(img) -> np.ndarray:
    import torch

    if isinstance(img, torch.Tensor):
        t = img.detach().cpu()
        if t.dtype.is_floating_point:
            t = (t.clamp(0, 1) * 255).round().to(torch.uint8) if t.max() <= 1.0 and t.min() >= 0 else (
                ((t - t.min()) / (t.max() - t.min() + 1e-8)) * 255).to(torch.uint8)  # fmt: skip
        img = t.permute(1, 2, 0).numpy() if t.ndim == 3 and t.shape[0] in (1, 3) else t.numpy()
    img = np.asarray(img)
    if img.dtype.kind == "f" and img.size:  # as a float tensor is read: 0-1 scaled up, out of 0-255 stretched
        lo, hi = float(np.nanmin(img)), float(np.nanmax(img))
        if lo >= 0 and hi <= 1.0:  # (img / 255, a common transform's output: all black before, cast as 0-255)
            img = np.round(img * 255)
        elif lo < 0 or hi > 255:
            img = (img - lo) / (hi - lo + 1e-8) * 255
    if img.dtype == np.uint16:  # 16-bit (mode="unchanged"): shown on the 8-bit scale
        img = (img >> 8).astype(np.uint8)
    elif img.dtype != np.uint8:
        img = np.clip(img, 0, 255).astype(np.uint8)
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    if img.shape[2] == 1:
        img = np.repeat(img, 3, axis=2)
    return np.ascontiguousarray(img[..., :3])


def _fit(text: str, font, width: int) -> str:
    """``text`` cut with an ellipsis to fit ``width`` pixels, so a long name does not run into the next tile."""
    if font.getlength(text) <= width:
        return text
    while text and font.getlength(text + "…") > width:
        text = text[:-1]
    return text + "…"


def preview(
    ds: ImageDataset,
    out: str | os.PathLike,
    *,
    n: int = 32,
    cols: int = 8,
    tile: int = 160,
    seed: int = 0,
    overwrite: bool = False,
    font: str | os.PathLike | None = None,
) -> Preview:
    """A contact sheet of ``n`` random samples as the model sees them (after the dataset's transform),
    each captioned with its index and class, written atomically to ``out`` (``PREVIEW_EXTENSIONS``).

    Captions use the first installed font that draws every class name (``font`` forces a file);
    classes whose names no font can draw are captioned ``class <index>``, and the result's ``hint``
    says what to install.

    Raises:
        UsageError: ``n``, ``cols`` or ``tile`` below 1, an unknown extension, an existing ``out``
            without ``overwrite``, a ``font`` that is no font.
        DataError: an empty dataset.
    """
    from datakit.io import output_run

    with output_run():
        return _preview(ds, out, n=n, cols=cols, tile=tile, seed=seed, overwrite=overwrite, font=font)


def _preview(ds: ImageDataset, out: str | os.PathLike, *, n: int, cols: int, tile: int, seed: int, overwrite: bool,
             font: str | os.PathLike | None) -> Preview:  # fmt: skip
    import cv2
    from PIL import Image, ImageDraw

    from datakit.io import check_output, file_path, imwrite

    out = file_path(out)
    refuse_output_in_source(out, ds, "contact sheet")  # (the CLI's check too, for a dataset handed over)
    for name, value in (("n", n), ("cols", cols), ("tile", tile)):
        if value < 1:
            raise UsageError(f"{name} must be at least 1, got {value}")
    if out.suffix.lower() not in PREVIEW_EXTENSIONS:
        raise UsageError(f"{out}: cannot tell the picture format; end the name in {', '.join(PREVIEW_EXTENSIONS)}")
    check_output(out, overwrite=overwrite, probe=True)
    if font is not None and not os.path.isfile(font):
        raise UsageError(f"{font}: {'a folder, not a font file' if os.path.isdir(font) else 'no such font file'}")
    if len(ds) == 0:
        raise DataError("the dataset is empty: nothing to preview")
    shown_n = min(n, len(ds))
    rows_needed, cap_needed = -(-shown_n // cols), max(14, tile // 9)
    wide, high = min(cols, shown_n) * tile, rows_needed * (tile + cap_needed + 6)
    side = {".webp": 16383, ".jpg": 65535, ".jpeg": 65535}.get(out.suffix.lower())
    from datakit.io import DEFAULT_MAX_PIXELS

    if (side is not None and max(wide, high) > side) or wide * high > DEFAULT_MAX_PIXELS:  # refused now, not after
        # every sample is read: a side its format cannot hold, or a picture datakit itself would refuse to read
        why = (f"over the {side} px a {out.suffix.lower()} side can hold" if side is not None and max(wide, high) > side
               else f"over the {DEFAULT_MAX_PIXELS} pixels datakit reads in a picture")  # fmt: skip
        raise UsageError(f"{out}: {shown_n} samples of {tile} px in {cols} columns make a {wide} x {high} picture, "
                         f"{why}; show fewer samples (n=, --n)")  # fmt: skip
    named, mode, transform = _what_it_shows(ds)
    classes = ["".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(c)) for c in named]  # one line
    chosen = find_font(["0123456789: class", *classes], font)
    drawable = [not any(ch in chosen.missing for ch in c) for c in classes]
    rng = np.random.default_rng(seed)
    picks = np.sort(rng.choice(len(ds), size=min(n, len(ds)), replace=False))
    rows = -(-len(picks) // cols)
    cap = max(14, tile // 9)
    sheet = Image.new("RGB", (cols * tile, rows * (tile + cap + 6)), (32, 32, 32))
    draw = ImageDraw.Draw(sheet)
    face = _load(chosen.path, chosen.index, cap)
    keeps_order = _keeps_channel_order(transform)
    for k, i in enumerate(picks):
        img, target = ds[int(i)]
        rgb = _to_hwc_uint8(img)
        if mode in ("bgr", "unchanged") and (isinstance(img, np.ndarray) or keeps_order) and rgb.shape[2] >= 3:
            # an OpenCV image left as read is BGR (BGRA unchanged: its alpha not drawn), and so is what datakit's
            # pipelines make of it (their statistics reversed to match); any other tensor is shown as RGB, torch's
            # order, so one still in BGR (ToTensor() without bgr=True) shows its swap
            rgb = rgb[..., 2::-1]
        h, w = rgb.shape[:2]
        s = tile / max(h, w)
        rgb = cv2.resize(rgb, (max(1, round(w * s)), max(1, round(h * s))), interpolation=cv2.INTER_AREA)
        x, y = (k % cols) * tile, (k // cols) * (tile + cap + 6)
        sheet.paste(Image.fromarray(np.ascontiguousarray(rgb)), (x + (tile - rgb.shape[1]) // 2, y))
        if _is_index(target):  # (an int, a NumPy one, or a 0-d integer tensor: target_transform=torch.tensor)
            t = int(target)
            label = classes[t] if 0 <= t < len(classes) and drawable[t] else f"class {t}"
        else:
            label = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(target))
        draw.text((x + 4, y + tile + 2), _fit(f"{int(i)}: {label}", face, tile - 8), fill=(255, 255, 255), font=face)
    path = imwrite(out, np.asarray(sheet), mode="rgb", overwrite=overwrite, tidy=True)
    undrawn = tuple(c for c, ok in zip(classes, drawable) if not ok)
    hint = font_hint("".join(ch for c in undrawn for ch in c if ch in chosen.missing), font=font) if undrawn else None
    return Preview(path, len(picks), chosen, undrawn, hint)


def _is_index(target) -> bool:
    if isinstance(target, (bool, np.bool_)):
        return False
    if isinstance(target, (int, np.integer)):
        return True
    import torch

    return (
        isinstance(target, torch.Tensor)
        and target.ndim == 0
        and not target.is_floating_point()
        and not target.is_complex()
        and target.dtype != torch.bool
    )


def _what_it_shows(ds) -> tuple[list, str | None, object]:
    """(class names, channel mode, transform) of ``ds``; for a Subset or a ConcatDataset, those of the datakit
    datasets it reads from where they agree. A dataset of the caller's around them may map the targets and turn
    the images: its own ``classes`` and ``mode`` (one of datakit's) if it has them, else no names (captions
    ``class N``) and the channel order of the datasets it holds where they agree."""
    if isinstance(ds, ImageDataset):
        return list(ds.classes), ds.mode, ds.transform
    from datakit.loader import _leaves

    plain = _leaves(ds)  # through Subsets and ConcatDatasets alone
    leaves = [d for d in _leaves(ds, through="all") if isinstance(d, ImageDataset)]
    try:
        own, own_mode = getattr(ds, "classes", None), getattr(ds, "mode", None)
    except Exception:  # noqa: BLE001 - a property of the caller's that raises: as if it had none
        own, own_mode = None, None
    if isinstance(own, (list, tuple)):
        classes = list(own)
    elif all(isinstance(d, ImageDataset) for d in plain) and leaves:
        classes = list(leaves[0].classes) if all(d.classes == leaves[0].classes for d in leaves) else []
    else:
        classes = []
    one = leaves[0] if leaves and len({(d.mode, id(d.transform)) for d in leaves}) == 1 else None
    mode = own_mode if own_mode in ("rgb", "bgr", "gray", "unchanged") else (one.mode if one is not None else None)
    transform = one.transform if one is not None else None
    return classes, mode, transform


class _CallableModule(types.ModuleType):
    """``datakit.preview`` is both this module and its function: importing the module sets the
    package attribute to the module, so the module calls the function to keep ``datakit.preview(...)``
    and ``from datakit import preview`` working in any import order."""

    def __call__(self, *args, **kwargs) -> Preview:
        return preview(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
