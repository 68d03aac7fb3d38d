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
