"""Choosing ``num_workers`` by measurement, not by rule of thumb.

More workers help until the CPUs, the disk or memory run out, then they hurt (each one also
takes memory and start-up time). :func:`tune_num_workers` measures real loading throughput for
increasing worker counts, stops when adding workers stops helping, and caches the answer per
dataset and machine so the measurement is paid once. It measures the loader
:func:`~datakit.loader.create_loader` builds (pin_memory, worker seeding, collate, persistent
workers, prefetch), and ``datakit bench`` shares its one rule, :func:`recommend`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import statistics
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from torch.utils.data import Dataset

from datakit.errors import UsageError
from datakit.parallel import usable_cpus

__all__ = [
    "Measurement",
    "Recommendation",
    "TuneResult",
    "benchmark_workers",
    "measure_throughput",
    "recommend",
    "tune_num_workers",
]

_PER_WORKER_BYTES = 600 << 20  # a worker with torch imported and a few batches in flight


@dataclass
class Measurement:
    num_workers: int
    images_per_s: float
    batches_per_s: float
    first_batch_s: float
    images: int


@dataclass
class Recommendation:
    """What :func:`recommend` concludes: ``num_workers`` (the rule's pick on the medians), ``noisy``
    (the passes' spreads overlap where the rule draws its line, so the pick is not trustworthy),
    ``candidates`` (the counts the passes picked) and why."""

    num_workers: int
    noisy: bool
    reason: str
    rates: dict[int, list[float]] = field(default_factory=dict)
    candidates: list[int] = field(default_factory=list)


@dataclass
class TuneResult:
    best: int
    measurements: list[Measurement] = field(default_factory=list)
    cached: bool = False
    seconds: float = 0.0
    noisy: bool = False
    reason: str = ""


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
                       tolerance: float = 0.05, device=None, seed: int = 0) -> Measurement:  # fmt: skip
    """Load real batches from the loader :func:`~datakit.loader.create_loader` builds (same
    ``collate_fn``, :func:`~datakit.collate.stack_collate` by default, pin_memory for a CUDA
    ``device``, worker seeding, persistent workers and prefetch) and report images/s in the
    steady state.

    The first batch pays the workers' start-up and is reported separately; the next
    ``num_workers - 1`` were built alongside it, so the clock starts after them. Measuring stops
    after ``budget_s`` seconds, after ``max_batches``, or as soon as at least ``2 * min_batches``
    batches show the same rate (within ``tolerance``) in both halves.
    """
    from datakit.loader import create_loader

    env = os.environ.get("DATAKIT_NUM_WORKERS") or None  # empty: unset, as create_loader takes it
    if env is not None and env.strip() != str(num_workers):
        raise UsageError(f"DATAKIT_NUM_WORKERS={env} is set, so create_loader would ignore num_workers={num_workers}; "
                         "unset it to measure")  # fmt: skip
    if len(dataset):
        dataset[0]  # pay lazy imports (decoders) here, before forking workers and starting the clock
    warmup = max(1, num_workers)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create")  # trying more is the point
        loader = create_loader(dataset, batch_size, train=True, num_workers=num_workers, device=device, seed=seed,
                               collate_fn=collate_fn, distributed=False)  # fmt: skip
        inner = getattr(loader, "loader", loader)  # the loader under create_loader(device=...)'s
        for each in {id(loader): loader, id(inner): inner}.values():
            each.measuring = True  # its passes are measurements: no "epoch N: ..." lines before training
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
        loader.close()  # its workers stopped in order, now, rather than whenever it is collected
        del loader
    if len(times) < 2:  # fewer batches than workers: time the whole thing
        elapsed = max(1e-9, time.perf_counter() - t0)
        return Measurement(num_workers, len(dataset) / elapsed, seen / elapsed, first or 0.0, len(dataset))
    elapsed = max(1e-9, times[-1] - times[0])
    images = sum(counts)
    return Measurement(num_workers, images / elapsed, (len(times) - 1) / elapsed, first or 0.0, images)


def worker_room(value: int) -> str | None:
    """Why ``value`` worker processes are refused here (``at most N here (...)``), or None: more than 4 per
    usable CPU (beyond the CPUs only readers waiting on a slow disk gain) and more than the available memory
    holds at about 600 MiB a worker. 1000 workers on 2 CPUs filled 24 GiB, and the kernel ended the training
    process, not them."""
    from datakit.parallel import usable_cpus

    cpus = usable_cpus()
    if value <= 4 * cpus:
        return None
    mem = _available_memory()
    room = mem // _PER_WORKER_BYTES if mem is not None else 0
    if value <= room:
        return None
    held = f" and {mem / (1 << 30):.1f} GiB of available memory" if mem is not None else ""
    have = f"{cpus} usable CPU{'s' * (cpus > 1)}{held}"
    return f"at most {max(4 * cpus, room)} here ({have}; 4 a CPU, or one per 600 MiB available)"


def _available_memory() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def local_ranks() -> int:
    """The ranks a launcher starts on this machine (torchrun's ``LOCAL_WORLD_SIZE``) that share the CPUs this process
    may use; 1 without one, and 1 where the launcher bound this rank to CPUs of its own (``torchrun --numa-binding``:
    its affinity a part of the launcher's, which started it), so that the usable CPUs are its share already."""
    from datakit.devices import launched_world_size

    value = os.environ.get("LOCAL_WORLD_SIZE", "").strip()
    if launched_world_size() <= 1 or not (value.isascii() and value.isdigit()) or _bound_apart():
        return 1
    return max(1, int(value))


def _bound_apart() -> bool:
    """Whether this process runs on fewer CPUs than the process that started it (a launcher binding each rank)."""
    try:
        return os.sched_getaffinity(0) < os.sched_getaffinity(os.getppid())
    except (AttributeError, OSError):  # no affinity here (macOS, Windows), or the parent's not to be read
        return False


def default_candidates() -> list[int]:
    """0, 1, 2, 4, ... up to the usable CPUs (each rank's share of them, where a launcher starts several on this
    machine: each tunes its own loader), and no more workers than memory allows."""
    top = max(1, usable_cpus() // local_ranks())
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
    if local_ranks() > 1:  # a rank's answer, measured beside the others: not one process's alone
        parts.append(f"ranks={local_ranks()}")
    for attr in ("root", "path", "paths"):
        if hasattr(dataset, attr):
            value = getattr(dataset, attr)
            parts.append(os.path.abspath(value) if isinstance(value, (str, os.PathLike)) else str(value))
    readers = getattr(dataset, "readers", None)
    if readers:
        parts += [os.path.abspath(r.path) for r in readers]
    # a transform without a repr of its own is '<Aug object at 0x7f...>', another address each run: the key
    # would never match again (measured at every start, the file growing)
    parts.append(_ADDRESS.sub("", repr(getattr(dataset, "transform", None))))
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()[:16]


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


@contextlib.contextmanager
def _cache_lock(path: Path):
    """The cache file's writers one at a time (an advisory lock on a file beside it, held while one reads,
    adds its answer and replaces the file); where the filesystem has no locks, without."""
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # (the lock goes with it)


def _read_cache(path: Path) -> dict:
    """The cache file's entries; {} where it is missing, unreadable or not a JSON object of whole numbers."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if type(v) is int and v >= 0}


def _cache_file() -> Path:
    # '~/cache' as an env file, `docker -e` or systemd's Environment= pass it, unexpanded: the home folder's, not './~'
    base = os.path.expanduser(os.environ.get("DATAKIT_CACHE") or os.path.join("~", ".cache", "datakit"))
    return Path(base) / "num_workers.json"


def _pick(rates: dict[int, float], tolerance: float) -> int:
    best = max(rates.values())
    return min(w for w, r in rates.items() if r >= (1 - tolerance) * best)


def recommend(rates: Mapping[int, Sequence[float]], tolerance: float = 0.05) -> Recommendation:
    """The one rule for choosing ``num_workers`` from measured images/s (one list of passes per count).

    The pick is the fewest workers whose median rate is within ``tolerance`` of the best median:
    more workers cost memory and start-up, so they must earn their place. With two or more passes,
    the rule is also applied to each pass on its own; if the passes pick differently, the spreads
    of the candidates overlap across the line the rule draws and the machine is too noisy for the
    pick to mean anything: ``noisy`` is set and ``reason`` says so.
    """
    if not rates or any(len(r) == 0 for r in rates.values()):
        raise ValueError("recommend needs at least one measured pass for each worker count")
    med = {w: float(statistics.median(r)) for w, r in sorted(rates.items())}
    pick = _pick(med, tolerance)
    passes = min(len(r) for r in rates.values())
    per_pass = sorted({_pick({w: r[k] for w, r in rates.items()}, tolerance) for k in range(passes)})
    if len(per_pass) > 1:
        return Recommendation(pick, True, (
            f"too noisy to choose between num_workers {', '.join(map(str, per_pass))}: the {passes} passes pick "
            "differently, their spreads overlap; measure again on a quieter machine or with more passes and "
            "seconds"), {w: list(r) for w, r in rates.items()}, per_pass)  # fmt: skip
    how = f"the fewest workers within {tolerance:.0%} of the best median"
    if passes > 1:
        how += f"; all {passes} passes agree"
    return Recommendation(pick, False, how, {w: list(r) for w, r in rates.items()}, [pick])


def benchmark_workers(dataset: Dataset, batch_size: int, candidates: Sequence[int] | None = None, *,
                      repeats: int = 3, budget_s: float = 2.0, collate_fn=None, device=None,
                      tolerance: float = 0.05,
                      on_measure: Callable[[Measurement], None] | None = None,
                      ) -> tuple[dict[int, list[Measurement]], Recommendation]:  # fmt: skip
    """Measure every candidate ``repeats`` times (each pass a full sweep, so slow drifts of the
    machine's load touch every candidate alike) and :func:`recommend` one."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    cands = sorted(set(candidates if candidates is not None else default_candidates()))
    runs: dict[int, list[Measurement]] = {w: [] for w in cands}
    for _ in range(repeats):
        for w in cands:
            m = measure_throughput(dataset, batch_size, w, budget_s=budget_s, collate_fn=collate_fn, device=device,
                                   tolerance=0.0)  # fmt: skip
            runs[w].append(m)
            if on_measure is not None:
                on_measure(m)
    return runs, recommend({w: [m.images_per_s for m in ms] for w, ms in runs.items()}, tolerance)


def tune_num_workers(dataset: Dataset, batch_size: int, candidates: list[int] | None = None, *,
                     budget_s: float = 2.0, collate_fn=None, cache: bool = True,
                     tolerance: float = 0.05, device=None, repeats: int = 1) -> TuneResult:  # fmt: skip
    """Measure loading throughput for increasing worker counts and choose by :func:`recommend`.

    Stops trying more workers as soon as a step up is not at least ``tolerance`` better than the
    best so far (the rule would not pick it). ``budget_s`` is the measuring time per candidate
    and pass. With ``cache``, a clear answer is stored per dataset (type, size, source,
    transform), batch size and machine, and reused; a noisy one is used but not stored.
    """
    t0 = time.perf_counter()
    key = _cache_key(dataset, batch_size)
    path = _cache_file()
    if cache and candidates is None:
        hit = _read_cache(path).get(key)
        if hit is not None and hit <= max(default_candidates()):  # (a value past this machine's: measured again)
            return TuneResult(hit, cached=True)
    cands = sorted(set(candidates if candidates is not None else default_candidates()))
    results: list[Measurement] = []
    rates: dict[int, list[float]] = {}
    best = 0.0
    for w in cands:
        runs = [measure_throughput(dataset, batch_size, w, budget_s=budget_s, collate_fn=collate_fn, device=device)
                for _ in range(max(1, repeats))]  # fmt: skip
        results += runs
        rates[w] = [m.images_per_s for m in runs]
        rate = float(statistics.median(rates[w]))
        if rate > best * (1 + tolerance):
            best = rate
        elif w >= 2:
            # more workers stopped helping (one worker only moves the work off the main process,
            # so 0 -> 1 is never a reason to stop)
            break
    rec = recommend(rates, tolerance)
    if cache and candidates is None and not rec.noisy:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with _cache_lock(path):  # read, add, replace: two processes at once each kept only its own answer
                data = _read_cache(path)
                data[key] = rec.num_workers
                tmp = path.with_suffix(f".{os.getpid()}.{os.urandom(4).hex()}.tmp")  # (a home folder shared by hosts)
                tmp.write_text(json.dumps(data))
                os.replace(tmp, path)
        except (OSError, ValueError):
            pass
    return TuneResult(rec.num_workers, results, seconds=time.perf_counter() - t0, noisy=rec.noisy, reason=rec.reason)
