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

from datakit.parallel import usable_cpus

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


def _images(batch) -> int:
    if isinstance(batch, int):
        return batch
    first = batch[0] if isinstance(batch, (tuple, list)) else batch
    return len(first) if hasattr(first, "__len__") else 1


def _settled(times: list[float], tolerance: float) -> bool:
    """Whether the batch rate over the second half of ``times`` matches the first half's."""
    half = len(times) // 2
    first, second = times[half] - times[0], times[-1] - times[half]
    if first <= 0 or second <= 0:
        return False
    r1, r2 = half / first, (len(times) - 1 - half) / second
    return abs(r1 - r2) <= tolerance * max(r1, r2)


def measure_throughput(dataset: Dataset, batch_size: int, num_workers: int, *, budget_s: float = 5.0,
                       collate_fn=None, max_batches: int | None = None, min_batches: int = 8,
                       tolerance: float = 0.05) -> Measurement:  # fmt: skip
    """Load real batches (``collate_fn``, :func:`~datakit.collate.stack_collate` by default, so
    building and handing over the batch is counted) and report images/s in the steady state.

    The first batch pays the workers' start-up and is reported separately; the next
    ``num_workers - 1`` were built alongside it, so the clock starts after them. Measuring stops
    after ``budget_s`` seconds, after ``max_batches``, or as soon as at least ``2 * min_batches``
    batches show the same rate (within ``tolerance``) in both halves.
    """
    import torch

    from datakit.collate import stack_collate

    if len(dataset):
        dataset[0]  # pay lazy imports (decoders) here, before forking workers and starting the clock
    g = torch.Generator().manual_seed(0)
    kwargs = {"prefetch_factor": 4, "persistent_workers": True} if num_workers else {}
    warmup = max(1, num_workers)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create")  # trying more is the point
        loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=num_workers,
                            collate_fn=collate_fn or stack_collate, generator=g, **kwargs)  # fmt: skip
        t0 = time.perf_counter()
        first = None
        seen = 0
        times: list[float] = []  # arrival of each batch after the warm-up ones
        counts: list[int] = []
        done = False
        while not done:  # as many epochs as the budget takes (small datasets)
            for batch in loader:
                now = time.perf_counter()
                seen += 1
                if first is None:
                    first = now - t0
                if seen <= warmup:
                    times, counts = [now], [0]
                    continue
                times.append(now)
                counts.append(_images(batch))
                del batch
                n = len(times) - 1
                if (now - times[0] >= budget_s or (max_batches and n >= max_batches)
                        or (n >= 2 * min_batches and _settled(times, tolerance))):  # fmt: skip
                    done = True
                    break
            if first is None:
                break  # an empty dataset
        del loader
    if len(times) < 2:  # fewer batches than workers: time the whole thing
        elapsed = max(1e-9, time.perf_counter() - t0)
        return Measurement(num_workers, len(dataset) / elapsed, seen / elapsed, first or 0.0, len(dataset))
    elapsed = max(1e-9, times[-1] - times[0])
    images = sum(counts)
    return Measurement(num_workers, images / elapsed, (len(times) - 1) / elapsed, first or 0.0, images)


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
