"""A simulated training step with and without CUDAPrefetcher, and uint8 against float32 transfer.

    python tools/bench_prefetch.py [--batches 200] [--batch-size 256] [--json]      (needs CUDA)

Loading is simulated by a DataLoader over in-memory uint8 batches that sleeps ``--load-ms`` per
batch in its workers; compute by a matmul loop taking about ``--compute-ms``. With the prefetcher
the loop should take about max(compute, loading) per step, not their sum.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from benchutil import dump_json, machine, print_table
from torch.utils.data import DataLoader, Dataset

from datakit.prefetch import CUDAPrefetcher


class Slow(Dataset):
    def __init__(self, n: int, size: int, load_ms: float, dtype) -> None:
        self.n, self.size, self.load_ms, self.dtype = n, size, load_ms, dtype
        self.img = torch.randint(0, 256, (3, size, size), dtype=torch.uint8)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        time.sleep(self.load_ms / 1000)
        img = self.img if self.dtype == torch.uint8 else self.img.float().div(255)
        return img, i % 1000


def step(x: torch.Tensor, w: torch.Tensor, iters: int) -> None:
    y = x.flatten(1)[:, : w.shape[0]]
    for _ in range(iters):
        y = torch.tanh(y @ w)


def run(loader, prefetch: bool, w, iters, mean, std) -> float:
    it = CUDAPrefetcher(loader, "cuda", mean=mean, std=std) if prefetch else loader
    torch.cuda.synchronize()
    t = time.perf_counter()
    for batch in it:
        x = batch[0]
        if not prefetch:
            x = x.cuda(non_blocking=False).float()
        step(x, w, iters)
    torch.cuda.synchronize()
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--load-ms", type=float, default=2.0, help="per sample, in each worker")
    parser.add_argument("--iters", type=int, default=60, help="matmuls per step (sets the compute time)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_prefetch needs a CUDA device; none is visible here", file=sys.stderr)
        sys.exit(2)
    w = torch.randn(4096, 4096, device="cuda") / 64
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    n = args.batches * args.batch_size
    x = torch.randint(0, 256, (args.batch_size, 3, args.size, args.size), dtype=torch.uint8, device="cuda").float()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(args.batches):
        step(x, w, args.iters)
    torch.cuda.synchronize()
    compute = time.perf_counter() - t
    results = {"compute only": compute}
    for dtype in (torch.uint8, torch.float32):
        ds = Slow(n, args.size, args.load_ms, dtype)
        loader = DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers, pin_memory=True,
                            persistent_workers=True, prefetch_factor=4)  # fmt: skip
        t = time.perf_counter()
        for _ in loader:
            pass
        results[f"loading only ({dtype})"] = time.perf_counter() - t
        name = "uint8" if dtype == torch.uint8 else "float32"
        results[f"{name}: plain loop"] = run(loader, False, w, args.iters, mean, std)
        results[f"{name}: CUDAPrefetcher"] = run(loader, True, w, args.iters, mean, std)
    if args.json:
        dump_json({"machine": machine(), "gpu": torch.cuda.get_device_name(), "seconds": results})
        return
    load = results["loading only (torch.uint8)"]
    rows = [[k, round(v, 2), f"{v / max(compute, load):.2f}"] for k, v in results.items()]
    print_table(f"{args.batches} batches of {args.batch_size}x3x{args.size}x{args.size} on {torch.cuda.get_device_name()}",
                ["loop", "seconds", "vs max(compute, loading)"], rows)  # fmt: skip
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
