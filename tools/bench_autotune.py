"""Live re-tuning of ``num_workers`` from the loop's wait, and the cost of the bad-sample policy.

    python tools/bench_autotune.py [--n 1200] [--batch-size 16] [--epochs 4] [--json]

Part 1: a simulated training step of known duration (a sleep: the GPU's time, no CPU) on top of
the loader, starting from a poor ``num_workers=0`` with ``autotune=True``. Two loads: JPEG
decoding with datakit's train pipeline (CPU-bound: the cores cap the workers), and loading that
waits on I/O (a sleep per sample: more workers than cores help). The ideal step is
``max(compute, loading / parallelism)``; target: from the second epoch on, within 10% of it.

Part 2: ``on_error="substitute"`` (with a bad-samples file) against ``on_error="raise"`` on
clean data, interleaved; target: under 2% slower.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchutil import dump_json, machine, make_photo_set, print_table
from torch.utils.data import Dataset

from datakit.datasets import open_dataset
from datakit.loader import create_loader
from datakit.parallel import usable_cpus
from datakit.transforms import train_pipeline


class WaitingSource(Dataset):
    """Samples that take ``delay`` seconds to arrive and no CPU (a network disk)."""

    def __init__(self, n: int, delay: float) -> None:
        self.n, self.delay = n, delay

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(self.delay)
        return i


def per_batch_load(ds, batch_size: int, batches: int = 8) -> float:
    """Seconds one process takes to load a batch (decode + transform + collate), measured."""
    loader = create_loader(ds, batch_size, num_workers=0, train=True, seed=1, autotune=False)
    it = iter(loader)
    next(it)  # lazy imports
    t = time.perf_counter()
    for _ in range(batches):
        next(it)
    return (time.perf_counter() - t) / batches


def run_autotune(ds, batch_size: int, compute: float, epochs: int) -> list[dict]:
    loader = create_loader(ds, batch_size, num_workers=0, autotune=True, seed=0, train=True)
    for _ in range(epochs):
        for _batch in loader:
            time.sleep(compute)
    return [{"epoch": t.epoch, "num_workers": t.num_workers, "step_s": t.total_s / (t.batches - 1),
             "wait_fraction": t.wait_fraction} for t in loader.history]  # fmt: skip


def policy_overhead(src: Path, batch_size: int, workers: int, repeat: int, bad_file: Path) -> dict[str, float]:
    """Best epoch time of each policy on clean data, run in turn ``repeat`` times."""
    pipeline = train_pipeline(224, normalize=False)
    loaders = {
        "raise": create_loader(open_dataset(src, transform=pipeline), batch_size, num_workers=workers, seed=0),
        "substitute": create_loader(
            open_dataset(src, transform=pipeline, on_error="substitute", bad_samples=bad_file),
            batch_size, num_workers=workers, seed=0,
        ),
    }  # fmt: skip
    best = {k: float("inf") for k in loaders}
    for loader in loaders.values():  # untimed first epoch: workers start, pages cached
        for _ in loader:
            pass
    for _ in range(repeat):
        for k, loader in loaders.items():
            t = time.perf_counter()
            for _ in loader:
                pass
            best[k] = min(best[k], time.perf_counter() - t)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1200, help="JPEGs in the CPU-bound set")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="epochs per policy in part 2")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "datakit-bench")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cpus = usable_cpus()
    src = make_photo_set(args.data / "autotune", args.n, 256, 400)
    jpeg = open_dataset(src, transform=train_pipeline(224, normalize=False))
    load = per_batch_load(jpeg, args.batch_size)
    cases = {
        # the step takes 60% of one process's loading: a second worker makes the loop compute-bound
        "JPEG decode (CPU-bound)": (jpeg, 0.6 * load, load, min(cpus, 2)),
        # a batch waits 16 x 4 ms = 64 ms; the step takes 16 ms: 4+ workers keep up, whatever the cores
        "waiting source (I/O-bound)": (WaitingSource(len(jpeg) // 2, 0.004), 0.016, args.batch_size * 0.004, 8),
    }
    results = {}
    for name, (ds, compute, loading, parallel) in cases.items():
        epochs = run_autotune(ds, args.batch_size, compute, args.epochs)
        ideal = max(compute, loading / parallel)
        after = [e["step_s"] for e in epochs[1:]]
        results[name] = {"compute_s": compute, "load_per_batch_s": loading, "ideal_step_s": ideal,
                         "epochs": epochs, "after_first_vs_ideal": (sum(after) / len(after)) / ideal}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        overhead = {w: policy_overhead(src, args.batch_size, w, args.repeat, Path(tmp) / f"bad{w}.json")
                    for w in (0, 2)}  # fmt: skip
    summary = {"machine": machine(), "batch_size": args.batch_size, "autotune": results,
               "policy": {w: {**b, "ratio": b["substitute"] / b["raise"]} for w, b in overhead.items()}}  # fmt: skip
    if args.json:
        dump_json(summary)
        return
    for name, r in results.items():
        rows = [[e["epoch"], e["num_workers"], f"{1000 * e['step_s']:.1f}", f"{e['wait_fraction']:.0%}",
                 f"{e['step_s'] / r['ideal_step_s']:.2f}"] for e in r["epochs"]]  # fmt: skip
        print_table(f"{name}: step {1000 * r['compute_s']:.1f} ms, loading {1000 * r['load_per_batch_s']:.1f} ms "
                    f"per batch in one process; ideal step {1000 * r['ideal_step_s']:.1f} ms",
                    ["epoch", "num_workers", "step ms", "loop waits", "vs ideal"], rows)  # fmt: skip
        print(f"after the first epoch: {r['after_first_vs_ideal']:.2f} x the ideal step")
    rows = [[w, f"{b['raise']:.2f}", f"{b['substitute']:.2f}", f"{b['substitute'] / b['raise']:.3f}"]
            for w, b in overhead.items()]  # fmt: skip
    print_table(f"clean data, {len(jpeg)} JPEGs, train pipeline 224, batch {args.batch_size}: best epoch of "
                f"{args.repeat}", ["num_workers", "raise s", "substitute s", "ratio"], rows)  # fmt: skip
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
