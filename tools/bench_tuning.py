"""``tune_num_workers`` against an exhaustive sweep, on the same dataset in one run.

    python tools/bench_tuning.py [--n 4000] [--batch-size 64] [--sweep 0,1,2,3,4] [--json]

The dataset: photo JPEGs (320-640 px) with datakit's train pipeline (crop 224, flip, uint8).
Targets: the tuned choice within 10% of the sweep's best throughput, found in under 10% of the
time one epoch takes.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchutil import dump_json, machine, make_photo_set, print_table

from datakit.datasets import open_dataset
from datakit.transforms import train_pipeline
from datakit.tuning import measure_throughput, tune_num_workers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--sweep", default="0,1,2,3,4")
    parser.add_argument("--seconds", type=float, default=6.0, help="measuring time per sweep point")
    parser.add_argument("--tune-seconds", type=float, default=1.0, help="tune_num_workers' budget per candidate")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "datakit-bench")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    src = make_photo_set(args.data / "loader-small", args.n, 320, 640)
    ds = open_dataset(src, transform=train_pipeline(224, normalize=False))
    sweep = {w: measure_throughput(ds, args.batch_size, w, budget_s=args.seconds, tolerance=0.0)
             for w in (int(x) for x in args.sweep.split(","))}  # fmt: skip
    tuned = tune_num_workers(ds, args.batch_size, cache=False, budget_s=args.tune_seconds)
    best = max(sweep.values(), key=lambda m: m.images_per_s)
    chosen = sweep.get(tuned.best) or measure_throughput(
        ds, args.batch_size, tuned.best, budget_s=args.seconds, tolerance=0.0
    )
    epoch_s = len(ds) / best.images_per_s
    rows = [[w, round(m.images_per_s), f"{m.images_per_s / best.images_per_s:.2f}", round(m.first_batch_s, 2),
             "<- tuned" if w == tuned.best else ("<- best" if w == best.num_workers else "")] for w, m in sweep.items()]  # fmt: skip
    summary = {
        "machine": machine(), "images": len(ds), "batch_size": args.batch_size,
        "sweep": {w: m.images_per_s for w, m in sweep.items()}, "tuned": tuned.best,
        "tuned_fraction_of_best": chosen.images_per_s / best.images_per_s, "tuning_s": tuned.seconds,
        "epoch_s": epoch_s, "tuning_fraction_of_epoch": tuned.seconds / epoch_s,
        "tried": [m.num_workers for m in tuned.measurements],
        "tuning_fraction_of_imagenet_epoch": tuned.seconds / (1_281_167 / best.images_per_s),
    }  # fmt: skip
    if args.json:
        dump_json(summary)
        return
    print_table(f"sweep: {len(ds)} JPEGs, train pipeline 224, batch {args.batch_size}",
                ["num_workers", "images/s", "vs best", "first batch s", ""], rows)  # fmt: skip
    print(f"\ntuned: num_workers={tuned.best} (tried {summary['tried']}) in {tuned.seconds:.1f} s; "
          f"{summary['tuned_fraction_of_best']:.0%} of the sweep's best; an epoch takes {epoch_s:.1f} s, "
          f"so tuning cost {summary['tuning_fraction_of_epoch']:.0%} of one epoch of this small set; "
          f"{summary['tuning_fraction_of_imagenet_epoch']:.2%} "
          "of an ImageNet-sized epoch (1.28M images) at this speed")  # fmt: skip
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
