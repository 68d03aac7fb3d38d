"""The pipelines' bilinear resize of a crop: datakit's compiled pass against OpenCV's, head to head.

    python tools/bench_resize.py [--n 2000] [--rounds 4] [--data DIR] [--json]

1. Per crop, one core: ``resize_planes`` (resized, split into CHW planes, in one pass) against
   ``cv2.resize`` (INTER_LINEAR) followed by ``cv2.split`` into the planes, the work it replaces,
   on uint8 crops of 250x250 to 420x380 resized to 224x224; and how far each is from exact bilinear
   values (half-pixel centres), in levels, on pixel noise.
2. In the loader: ``train_pipeline(224)`` uint8 batches from a folder of generated photos
   (benchutil.leaves_photo, 320-640 px), batch 64, 2 workers, the same loader with the compiled
   resize and with OpenCV's (``datakit.transforms._RESIZE`` switched, which forked workers
   inherit), alternating passes in one process, two epochs a pass.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
from benchutil import dump_json, interleaved_best, machine, make_leaves_set, print_table

import datakit.transforms as T
from datakit.datasets import open_dataset
from datakit.loader import create_loader
from datakit.testing import bilinear_exact
from datakit.transforms import train_pipeline

SHAPES = [(250, 250), (300, 300), (420, 380)]


def per_crop(kernel) -> list[list[object]]:
    cv2.setNumThreads(1)
    rng = np.random.default_rng(0)
    rows = []
    for h, w in SHAPES:
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        hwc = np.empty((224, 224, 3), np.uint8)
        planes = np.empty((3, 224, 224), np.uint8)

        def opencv(img=img, hwc=hwc, planes=planes):
            cv2.split(cv2.resize(img, (224, 224), dst=hwc, interpolation=cv2.INTER_LINEAR), list(planes))

        def compiled(img=img):
            kernel(img, 224, 224, False)

        best = interleaved_best({"opencv": lambda: [opencv() for _ in range(200)],
                                 "compiled": lambda: [compiled() for _ in range(200)]})  # fmt: skip
        ref = bilinear_exact(img, 224, 224)
        ours = np.frombuffer(kernel(img, 224, 224, False), np.uint8).reshape(3, 224, 224)
        theirs = cv2.resize(img, (224, 224), interpolation=cv2.INTER_LINEAR).transpose(2, 0, 1)
        us_o, us_c = best["opencv"] / 200 * 1e6, best["compiled"] / 200 * 1e6
        rows.append([f"{h}x{w} -> 224x224", round(us_c, 1), round(us_o, 1), f"{us_o / us_c:.2f}x",
                     round(float(np.abs(ours - ref).max()), 3), round(float(np.abs(theirs - ref).max()), 3)])  # fmt: skip
    return rows


def loader_rate(root: Path, kernel, compiled: bool) -> float:
    T._RESIZE = kernel if compiled else False
    loader = create_loader(open_dataset(root, transform=train_pipeline(224)), 64, num_workers=2, seed=0)
    it = iter(loader)
    next(it)  # from the second batch on, as tools/bench_loader.py measures
    start, n = time.perf_counter(), 0
    for batch in it:
        n += len(batch[0])
    for batch in loader:
        n += len(batch[0])
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="photo-sized JPEGs for the loader comparison")
    parser.add_argument("--rounds", type=int, default=4, help="passes of each loader, alternating")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "datakit-bench")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    kernel = T._resize_kernel()
    if not kernel:
        raise SystemExit("the compiled resize is not in use here (datakit._jpegregion not built, or no AVX2)")
    report = {"machine": machine(), "per_crop": per_crop(kernel)}
    root = make_leaves_set(args.data / "leaves-small", args.n, 320, 640)
    rates: dict[bool, list[float]] = {True: [], False: []}
    for r in range(args.rounds):
        for compiled in (True, False) if r % 2 == 0 else (False, True):
            rates[compiled].append(loader_rate(root, kernel, compiled))
    T._RESIZE = kernel
    med = {k: float(np.median(v)) for k, v in rates.items()}
    report["loader"] = {"compiled": rates[True], "opencv": rates[False], "ratio_of_medians": med[True] / med[False]}
    if args.json:
        dump_json(report)
        return
    print_table("per 224x224 crop, one core (us; max error against exact bilinear, in levels)",
                ["crop", "compiled", "OpenCV resize + split", "vs OpenCV", "error: compiled", "error: OpenCV"],
                report["per_crop"])  # fmt: skip
    print_table(f"train_pipeline(224) uint8 batches, {args.n} leaves photos, batch 64, 2 workers, "
                f"{args.rounds} alternating passes of two epochs",
                ["resize", "images/s (each pass)", "median", "vs OpenCV"],
                [["compiled", " ".join(f"{x:.0f}" for x in rates[True]), round(med[True]), f"{med[True] / med[False]:.3f}x"],
                 ["OpenCV", " ".join(f"{x:.0f}" for x in rates[False]), round(med[False]), "1.000x"]])  # fmt: skip
    print(f"\nmachine: {report['machine']}")


if __name__ == "__main__":
    main()
