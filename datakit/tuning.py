"""Choosing ``num_workers`` by measurement, not by rule of thumb.

More workers help until the CPUs, the disk or memory run out, then they hurt (each one also
takes memory and start-up time). :func:`tune_num_workers` measures real loading throughput for
increasing worker counts, stops when adding workers stops helping, and caches the answer per
dataset and machine so the measurement is paid once.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from torch.utils.data import DataLoader, Dataset

__all__ = ["Measurement", "TuneResult", "measure_throughput", "tune_num_workers"]

_PER_WORKER_BYTES = 600 << 20  # a worker with torch imported and a few batches in flight


@dataclass
class Measurement:
    num_workers: int
    images_per_s: float
    batches_per_s: float
    first_batch_s: float
    images: int


@dataclass
class TuneResult:
    best: int
    measurements: list[Measurement] = field(default_factory=list)
    cached: bool = False
    seconds: float = 0.0


def _count(batch: list) -> int:
    return len(batch)


def measure_throughput(dataset: Dataset, batch_size: int, num_workers: int, *, budget_s: float = 5.0,
                       collate_fn=None, max_batches: int | None = None) -> Measurement:  # fmt: skip
    """Load batches for about ``budget_s`` seconds and report images/s (after the first batch,
    which pays the workers' start-up and is reported separately)."""
    import torch

    if len(dataset):
        dataset[0]  # pay lazy imports (decoders) here, before forking workers and starting the clock
    g = torch.Generator().manual_seed(0)
    kwargs = {"prefetch_factor": 4, "persistent_workers": True} if num_workers else {}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create")  # trying more is the point
        loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=num_workers,
                            collate_fn=collate_fn or _count, generator=g, **kwargs)  # fmt: skip
        t0 = time.perf_counter()
        images = batches = 0
        first = None
        start = t0
        done = False
        while not done:  # as many epochs as the budget takes (small datasets)
            for batch in loader:
                now = time.perf_counter()
                if first is None:
                    first, start = now - t0, now
                    continue
                images += batch if isinstance(batch, int) else batch_size
                batches += 1
                if now - start >= budget_s or (max_batches and batches >= max_batches):
                    done = True
                    break
            if first is None:
                break  # an empty dataset
        del loader
    elapsed = max(1e-9, time.perf_counter() - start)
    return Measurement(num_workers, images / elapsed, batches / elapsed, first or 0.0, images)


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _available_memory() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def default_candidates() -> list[int]:
    """0, 1, 2, 4, ... up to the usable CPUs, and no more workers than memory allows."""
    top = usable_cpus()
    mem = _available_memory()
    if mem is not None:
        top = max(1, min(top, mem // _PER_WORKER_BYTES))
    out, w = [0, 1], 2
    while w < top:
        out.append(w)
        w *= 2
    if top not in out:
        out.append(top)
    return sorted(set(out))


def _cache_key(dataset: Dataset, batch_size: int) -> str:
    parts = [type(dataset).__name__, str(len(dataset)), str(batch_size), platform.node(), str(usable_cpus())]
    for attr in ("root", "path", "paths"):
        if hasattr(dataset, attr):
            parts.append(str(getattr(dataset, attr)))
    readers = getattr(dataset, "readers", None)
    if readers:
        parts += [str(r.path) for r in readers]
    parts.append(repr(getattr(dataset, "transform", None)))
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()[:16]


def _cache_file() -> Path:
    base = os.environ.get("DATAKIT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "datakit")
    return Path(base) / "num_workers.json"


def tune_num_workers(dataset: Dataset, batch_size: int, candidates: list[int] | None = None, *,
                     budget_s: float = 2.0, collate_fn=None, cache: bool = True,
                     tolerance: float = 0.05) -> TuneResult:  # fmt: skip
    """Measure loading throughput for increasing worker counts and return the best.

    Stops as soon as a step up is not at least ``tolerance`` better than the best so far.
    ``budget_s`` is the measuring time per candidate. With ``cache``, the answer is stored per
    dataset (type, size, source, transform), batch size and machine, and reused.
    """
    t0 = time.perf_counter()
    key = _cache_key(dataset, batch_size)
    path = _cache_file()
    if cache and candidates is None:
        try:
            hit = json.loads(path.read_text()).get(key)
        except (OSError, ValueError):
            hit = None
        if hit is not None:
            return TuneResult(int(hit), cached=True)
    cands = sorted(set(candidates if candidates is not None else default_candidates()))
    results: list[Measurement] = []
    best: Measurement | None = None
    for w in cands:
        m = measure_throughput(dataset, batch_size, w, budget_s=budget_s, collate_fn=collate_fn)
        results.append(m)
        if best is None or m.images_per_s > best.images_per_s * (1 + tolerance):
            best = m
        elif w >= 2 and w > best.num_workers:
            # more workers stopped helping (one worker only moves the work off the main process,
            # so 0 -> 1 is never a reason to stop)
            break
    assert best is not None
    if cache and candidates is None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            data = json.loads(path.read_text()) if path.exists() else {}
            data[key] = best.num_workers
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data))
            os.replace(tmp, path)
        except (OSError, ValueError):
            pass
    return TuneResult(best.num_workers, results, seconds=time.perf_counter() - t0)
