"""``datakit stats`` against the loop people write by hand, in one run on the same images.

    python tools/bench_stats.py [--n 2000] [--workers 2] [--json]

The hand-written loop: torchvision ImageFolder with PIL and ToTensor, a DataLoader with the same
number of workers, and per-image mean/std averaged (which is also the wrong std).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from benchutil import dump_json, machine, make_photo_set, print_table
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

from datakit.stats import compute_stats


def hand_written(root: Path, workers: int) -> tuple[list[float], list[float]]:
    ds = datasets.ImageFolder(str(root), transform=transforms.ToTensor())
    loader = DataLoader(ds, batch_size=1, num_workers=workers)
    mean, std, n = torch.zeros(3), torch.zeros(3), 0
    for img, _ in loader:
        mean += img.mean(dim=(0, 2, 3))
        std += img.std(dim=(0, 2, 3))
        n += 1
    return (mean / n).tolist(), (std / n).tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "datakit-bench")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    src = make_photo_set(args.data / "zip-src", args.n, 320, 640)
    times = {}
    for _ in range(2):  # the second round runs warm (page cache), and the best of both is kept
        t = time.perf_counter()
        ours = compute_stats(src, workers=args.workers)
        times["ours"] = min(times.get("ours", 1e9), time.perf_counter() - t)
        t = time.perf_counter()
        peer_mean, peer_std = hand_written(src, args.workers)
        times["peer"] = min(times.get("peer", 1e9), time.perf_counter() - t)
    n = ours.count
    rows = [
        [f"datakit stats ({args.workers} workers)", round(n / times["ours"]), f"{times['peer'] / times['ours']:.2f}x",
         ", ".join(f"{v:.4f}" for v in ours.std)],
        [f"ImageFolder + ToTensor + per-image mean/std ({args.workers} workers)", round(n / times["peer"]), "1.00x",
         ", ".join(f"{v:.4f}" for v in peer_std)],
    ]  # fmt: skip
    if args.json:
        dump_json({"machine": machine(), "images": n, "datakit_s": times["ours"], "hand_written_s": times["peer"],
                   "datakit": ours.to_json(), "hand_written": {"mean": peer_mean, "std": peer_std}})  # fmt: skip
        return
    print_table(f"mean/std over {n} photo JPEGs", ["method", "images/s", "vs hand-written", "std (R, G, B)"], rows)
    print("\nThe hand-written std averages per-image stds, which leaves out the spread between images.")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
