"""Live re-tuning of ``num_workers`` from the loop's wait, and the cost of the bad-sample policy.

    python tools/bench_autotune.py [--n 2400] [--batch-size 64] [--epochs 4] [--json]

Part 1: a simulated training step of known duration (a sleep: the GPU's time, no CPU) on top of
the loader, starting from a poor ``num_workers=0`` with ``autotune=True``. Two loads: JPEG
decoding with datakit's train pipeline (CPU-bound: the cores cap the workers), and loading that
waits on I/O (a sleep per sample: more workers than cores help). The ideal step is
``max(compute, loading)``, where loading is the fastest the loader delivers batches with no step
at any fixed ``num_workers`` (measured for the JPEG load, 1 to cpus + 1 workers; for the waiting
source, its delay over 8 workers); target: from the second epoch on, within 10% of it. The best
fixed ``num_workers`` with the same step is shown beside it: what tuning by hand would reach.

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


def epoch_step(ds, batch_size: int, workers: int, compute: float, epochs: int = 2) -> float:
    """Best seconds per batch (after the first) over ``epochs`` epochs at a fixed worker count,
    with a training step of ``compute`` seconds (0: the loader's own delivery rate)."""
    loader = create_loader(ds, batch_size, num_workers=workers, seed=0, train=True)
    best = float("inf")
    for _ in range(epochs):
        it = iter(loader)
        next(it)
        t, n = time.perf_counter(), 0
        for _batch in it:
            n += 1
            if compute:
                time.sleep(compute)
        best = min(best, (time.perf_counter() - t) / n)
    loader.close()  # its workers stop now, not while the next measurement runs
    return best


def run_autotune(ds, batch_size: int, compute: float, epochs: int) -> list[dict]:
    loader = create_loader(ds, batch_size, num_workers=0, autotune=True, seed=0, train=True)
    for _ in range(epochs):
        for _batch in loader:
            time.sleep(compute)
    loader.close()
    return [{"epoch": t.epoch, "num_workers": t.num_workers, "step_s": t.total_s / (t.batches - 1),
             "wait_fraction": t.wait_fraction} for t in loader.history]  # fmt: skip


def timed_epoch(loader) -> float:
    """Seconds of one epoch after its first batch; the loader is then closed, so that its
    workers reading on into the next epoch do not run beside another loader's timed epoch."""
    it = iter(loader)
    next(it)
    t = time.perf_counter()
    for _ in it:
        pass
    took = time.perf_counter() - t
    loader.close()
    return took


def policy_overhead(src: Path, batch_size: int, workers: int, repeat: int, bad_file: Path) -> dict[str, float]:
    """Best epoch time (after its first batch) of each policy on clean data, run in turn
    ``repeat`` times."""
    pipeline = train_pipeline(224, normalize=False)
    loaders = {
        "raise": create_loader(open_dataset(src, transform=pipeline), batch_size, num_workers=workers, seed=0),
        "substitute": create_loader(
            open_dataset(src, transform=pipeline, on_error="substitute", bad_samples=bad_file),
            batch_size, num_workers=workers, seed=0,
        ),
    }  # fmt: skip
    best = {k: float("inf") for k in loaders}
    for loader in loaders.values():  # untimed first epoch: pages cached
        timed_epoch(loader)
    for _ in range(repeat):
        for k, loader in loaders.items():
            best[k] = min(best[k], timed_epoch(loader))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2400, help="JPEGs in the CPU-bound set")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5, help="epochs per policy in part 2")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "datakit-bench")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cpus = usable_cpus()
    src = make_photo_set(args.data / "autotune", args.n, 256, 400)
    jpeg = open_dataset(src, transform=train_pipeline(224, normalize=False))
    load = per_batch_load(jpeg, args.batch_size)
    counts = range(1, cpus + 2)
    capacity = {w: epoch_step(jpeg, args.batch_size, w, 0.0) for w in counts}
    loading = min(capacity.values())
    cases = {
        # the step is half the best loading time: input-bound whatever the count, ideal = loading
        "JPEG decode (CPU-bound), step 0.5 x loading": (jpeg, 0.5 * loading, loading, counts),
        # the step meets the best loading time: the worst case for the hand-over between processes
        "JPEG decode (CPU-bound), step 1.0 x loading": (jpeg, loading, loading, counts),
        # the step is 1.5x the best loading: one worker cannot keep up, two can; ideal = the step
        "JPEG decode (CPU-bound), step 1.5 x loading": (jpeg, 1.5 * loading, loading, counts),
        # a batch waits 16 x 4 ms per sample; the step takes 1/4 of that: 4+ workers keep up, whatever the cores
        "waiting source (I/O-bound)": (WaitingSource(len(jpeg) // 2, 0.004), args.batch_size * 0.001,
                                       args.batch_size * 0.004 / 8, (4, 5, 8)),
    }  # fmt: skip
    results = {}
    for name, (ds, compute, fastest, fixed) in cases.items():
        epochs = run_autotune(ds, args.batch_size, compute, args.epochs)
        ideal = max(compute, fastest)
        by_hand = {w: epoch_step(ds, args.batch_size, w, compute) for w in fixed}
        after = [e["step_s"] for e in epochs[1:]]
        results[name] = {"compute_s": compute, "load_in_process_s": load if ds is jpeg else args.batch_size * 0.004,
                         "loading_s": fastest, "ideal_step_s": ideal, "epochs": epochs, "by_hand_step_s": by_hand,
                         "after_first_vs_ideal": (sum(after) / len(after)) / ideal,
                         "after_first_vs_by_hand": (sum(after) / len(after)) / min(by_hand.values())}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        overhead = {w: policy_overhead(src, args.batch_size, w, args.repeat, Path(tmp) / f"bad{w}.json")
                    for w in (0, 2)}  # fmt: skip
    summary = {"machine": machine(), "batch_size": args.batch_size, "autotune": results,
               "jpeg_capacity_s": capacity,
               "policy": {w: {**b, "ratio": b["substitute"] / b["raise"]} for w, b in overhead.items()}}  # fmt: skip
    if args.json:
        dump_json(summary)
        return
    print_table(f"JPEG loader alone (no step), batch {args.batch_size}: one process {1000 * load:.1f} ms per batch",
                ["num_workers", "ms per batch"], [[w, f"{1000 * s:.1f}"] for w, s in capacity.items()])  # fmt: skip
    for name, r in results.items():
        rows = [[e["epoch"], e["num_workers"], f"{1000 * e['step_s']:.1f}", f"{e['wait_fraction']:.0%}",
                 f"{e['step_s'] / r['ideal_step_s']:.2f}"] for e in r["epochs"]]  # fmt: skip
        print_table(f"{name}: step {1000 * r['compute_s']:.1f} ms; loading {1000 * r['load_in_process_s']:.1f} ms per "
                    f"batch in one process, {1000 * r['loading_s']:.1f} ms at best; ideal step "
                    f"{1000 * r['ideal_step_s']:.1f} ms",
                    ["epoch", "num_workers", "step ms", "loop waits", "vs ideal"], rows)  # fmt: skip
        hand = ", ".join(f"{w} workers {1000 * s:.1f} ms" for w, s in r["by_hand_step_s"].items())
        print(f"fixed by hand, same step: {hand}")
        print(f"after the first epoch: {r['after_first_vs_ideal']:.2f} x the ideal step, "
              f"{r['after_first_vs_by_hand']:.2f} x the best fixed count")  # fmt: skip
    rows = [[w, f"{b['raise']:.2f}", f"{b['substitute']:.2f}", f"{b['substitute'] / b['raise']:.3f}"]
            for w, b in overhead.items()]  # fmt: skip
    print_table(f"clean data, {len(jpeg)} JPEGs, train pipeline 224, batch {args.batch_size}: best epoch (after its first batch) of "
                f"{args.repeat}", ["num_workers", "raise s", "substitute s", "ratio"], rows)  # fmt: skip
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
