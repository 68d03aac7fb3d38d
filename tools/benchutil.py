"""Shared pieces of the benchmarks in tools/: photo sets made from samples/, timing, tables."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples" / "images"


def machine() -> str:
    """One line describing the machine the numbers were taken on."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    versions = f"Python {platform.python_version()}, torch {torch.__version__}, cv2 {cv2.__version__}"
    return f"{cpus} usable CPUs ({model}), {versions}"


def sample_photos() -> list[np.ndarray]:
    """The real photos committed in samples/, as RGB arrays."""
    from datakit.io import imread

    return [imread(p, "rgb") for p in sorted(SAMPLES.rglob("*")) if p.is_file()]


def make_photo_set(
    out: Path, n: int, min_side: int, max_side: int, *, classes: int = 4, quality: int = 90, seed: int = 0
) -> Path:
    """``n`` JPEGs in ``classes`` folders, each a random crop of a real sample photo resized so
    its longer side is in ``[min_side, max_side]``. Reuses ``out`` when it already holds them."""
    from datakit.io import imwrite

    stamp = out / f".complete-{n}-{min_side}-{max_side}-{classes}-{quality}-{seed}"
    if stamp.exists():
        return out
    rng = np.random.default_rng(seed)
    photos = sample_photos()
    for c in range(classes):
        (out / f"class_{c}").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        src = photos[i % len(photos)]
        h, w = src.shape[:2]
        ch, cw = int(rng.integers(h * 2 // 3, h + 1)), int(rng.integers(w * 2 // 3, w + 1))
        y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        side = int(rng.integers(min_side, max_side + 1))
        scale = side / max(ch, cw)
        img = cv2.resize(
            src[y : y + ch, x : x + cw], (round(cw * scale), round(ch * scale)), interpolation=cv2.INTER_CUBIC
        )
        imwrite(out / f"class_{i % classes}" / f"图片_{i:06d}.jpg", img, quality=quality, mode="rgb")
    stamp.touch()
    return out


def best_time(fn: Callable[[], object], repeat: int = 3) -> float:
    """The best wall time of ``repeat`` calls, in seconds (the least disturbed run)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def interleaved_best(fns: dict[str, Callable[[], object]], repeat: int = 5) -> dict[str, float]:
    """Best wall time of each function, running them in turn ``repeat`` times so that a slow
    spell of a shared machine (disk, CPU) hits every contender alike."""
    best = {k: float("inf") for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t)
    return best


def print_table(title: str, header: list[str], rows: list[list[object]]) -> None:
    cells = [[str(c) for c in header]] + [[f"{c:.3g}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n{title}")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(cells[0], widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in cells[1:]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")


def dump_json(obj: object) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False))


def leaves_photo(height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """A photo-like RGB image that owes nothing to samples/: a "dead leaves" scene (opaque discs
    with power-law radii, front ones hiding back ones: the classic model of natural-image
    statistics, scale invariant with a 1/f^2 spectrum), shaded, slightly blurred like a lens,
    with textured surfaces and sensor noise, so it compresses like a camera JPEG."""
    small = max(height, width) > 1200
    # large scenes are drawn at half size (the disc count stays bounded), then upscaled; the
    # texture and noise added at full size give them a real photo's entropy
    f = 2 if small else 1
    h, w = -(-height // f), -(-width // f)
    img = np.empty((h, w, 3), np.uint8)
    img[:] = rng.integers(0, 256, 3, dtype=np.uint8)
    rmin, rmax = max(2.0, min(h, w) / 200), min(h, w) / 3
    # enough discs to cover the scene about five times over (E[pi r^2] = 2 pi rmin^2 ln(rmax/rmin))
    n = int(5 * h * w / (2 * np.pi * rmin**2 * np.log(rmax / rmin))) + 50
    # radii with density ~ r^-3 between rmin and rmax (inverse CDF), in random depth order
    u = rng.random(n)
    radii = 1 / np.sqrt(1 / rmin**2 - u * (1 / rmin**2 - 1 / rmax**2))
    centres = rng.random((n, 2)) * (w, h)
    # natural colours: mostly a brightness, with a moderate tint
    colours = np.clip(rng.uniform(20, 235, (n, 1)) + rng.normal(0, 28, (n, 3)), 0, 255)
    for (x, y), r, c in zip(centres, radii, colours):
        cv2.circle(img, (int(x), int(y)), int(r), tuple(int(v) for v in c), -1, lineType=cv2.LINE_AA)
    if f > 1:
        img = cv2.resize(img, (width, height), interpolation=cv2.INTER_CUBIC)
    img = cv2.GaussianBlur(img, (0, 0), 0.8)
    out = img.astype(np.int16)
    yy = np.linspace(-1, 1, height, dtype=np.float32)[:, None]
    xx = np.linspace(-1, 1, width, dtype=np.float32)[None, :]
    a, b = rng.uniform(-25, 25, 2)
    out += (a * yy + b * xx).astype(np.int16)[:, :, None]  # light falling across the scene
    texture = cv2.resize(rng.normal(0, 6, (height // 3 + 1, width // 3 + 1)).astype(np.float32), (width, height))
    out += texture.astype(np.int16)[:, :, None]
    out += rng.normal(0, 3, (height, width, 3)).astype(np.int16)
    return np.clip(out, 0, 255).astype(np.uint8)


def make_leaves_set(
    out: Path, n: int, min_side: int, max_side: int, *, classes: int = 4, quality: int = 90, seed: int = 0
) -> Path:
    """``n`` JPEGs in ``classes`` folders, generated scenes (:func:`leaves_photo`, nothing from
    samples/) whose longer side is in ``[min_side, max_side]``, aspect 3:4 to 1:1. Reuses ``out``
    when it already holds them."""
    from datakit.io import imwrite

    stamp = out / f".complete-leaves-{n}-{min_side}-{max_side}-{classes}-{quality}-{seed}"
    if stamp.exists():
        return out
    rng = np.random.default_rng(seed)
    for c in range(classes):
        (out / f"class_{c}").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        long = int(rng.integers(min_side, max_side + 1))
        short = int(long * rng.uniform(0.75, 1.0))
        h, w = (short, long) if rng.random() < 0.7 else (long, short)
        imwrite(
            out / f"class_{i % classes}" / f"场景_{i:06d}.jpg", leaves_photo(h, w, rng), quality=quality, mode="rgb"
        )
    stamp.touch()
    return out
