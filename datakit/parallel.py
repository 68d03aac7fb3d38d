"""The one process pool of the offline jobs (pack, stats, check): an ordered map over sample indices.

Every job does the same thing: open a dataset once per worker, call a function on each sample
index, and consume the results in index order in the main process (which writes, sums or
reports them). :func:`map_ordered` does exactly that, with one progress signature,
``progress(done, total)``, and one rule for starting workers: fork where it is safe (Linux,
and CUDA not initialised in this process), spawn elsewhere (macOS, Windows, or after CUDA).
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any, TypeVar

from datakit.errors import DataError

__all__ = ["WorkerDied", "map_ordered", "resolve_workers", "start_method", "usable_cpus"]

T = TypeVar("T")

_FN: Callable[..., Any] | None = None
_DATASET: Any = None
_HAS_DATASET = False


def usable_cpus() -> int:
    """CPUs this process may run on: the affinity mask where the OS has one (Linux), else the
    process's or machine's CPU count (macOS and Windows have no ``os.sched_getaffinity``), and no
    more than a cgroup CPU quota allows (``docker --cpus=2`` on a 64-CPU host: 2, where the
    affinity says 64 and that many workers would take turns on two CPUs' time)."""
    count = None
    if hasattr(os, "sched_getaffinity"):
        try:
            count = len(os.sched_getaffinity(0))
        except OSError:
            pass
    if count is None:
        count = getattr(os, "process_cpu_count", os.cpu_count)()  # Python 3.13+ honours affinity
    quota = cgroup_cpu_quota()
    count = max(1, count or 1)
    return count if quota is None else max(1, min(count, int(quota)))


def cgroup_cpu_quota() -> float | None:
    """The CPUs' time a cgroup (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``) allows this process, in CPUs; None for
    no limit, or where there is none to read."""
    from pathlib import Path

    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return None if quota <= 0 else quota / period
    except (OSError, ValueError, ZeroDivisionError):
        return None


def start_method() -> str:
    """``"fork"`` on Linux while CUDA is not initialised in this process, else ``"spawn"``.

    A forked child of a process that has touched CUDA cannot use it and may hang; macOS forks
    are unsafe with its system frameworks (and spawn is Python's default there).
    """
    if not sys.platform.startswith("linux"):
        return "spawn"
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                return "spawn"
        except Exception:  # a torch without CUDA support, or a partial import: fork is fine
            pass
    return "fork"


def resolve_workers(workers: int | None, items: int, *, per_worker: int = 1) -> int:
    """How many processes to start for ``items`` work items: ``workers`` (default: usable CPUs),
    but no more than one per ``per_worker`` items (starting a process costs more than a few items).

    Raises:
        ValueError: ``workers`` is negative.
    """
    if workers is not None and workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    wanted = usable_cpus() if workers is None else workers
    return max(0, min(wanted, items // max(1, per_worker)))


def _die_with_parent(parent: int) -> None:
    """End this worker when the process that started it ends, however it ends.

    A pool's workers outlive a parent killed with SIGKILL: they go on decoding, then print a
    BrokenPipeError traceback per result into the terminal. Linux sends them SIGTERM instead
    (``PR_SET_PDEATHSIG``); a parent gone before that was set is caught by its changed PID.
    """
    if os.getppid() != parent:  # started by a fork server, or the parent is already gone
        try:
            os.kill(parent, 0)
        except ProcessLookupError:
            os._exit(1)
        return
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # gone between the two checks
            os._exit(1)


_HELD = (signal.SIGINT, signal.SIGTERM)  # the commands end on SIGTERM as on Ctrl-C


def hold_interrupts() -> object:
    """SIGINT and SIGTERM held back from this moment to :func:`release_interrupts`: blocked in this thread (the
    main one, where Python raises KeyboardInterrupt), so that processes forked or spawned meanwhile start with
    them blocked, and, where Python runs a handler for them (Ctrl-C's KeyboardInterrupt, the commands' SIGTERM),
    caught by one that only notes them, since the kernel gives a signal sent to the process to any thread that
    does not block it, and Python then runs the handler in the main thread. A signal at its default, ignored, or
    left to a handler outside Python (faulthandler's) is not touched. Returns what to restore (None outside the
    main thread, where nothing is held)."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        return None
    came: list[int] = []
    handlers = {}
    for sig in _HELD:
        if callable(signal.getsignal(sig)):
            handlers[sig] = signal.signal(sig, lambda signum, frame: came.append(signum))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, set(_HELD))
    return mask, handlers, came


def release_interrupts(held: object) -> None:
    """Undo :func:`hold_interrupts`: a signal that came meanwhile goes to the handler that was there before
    (Ctrl-C: KeyboardInterrupt, raised here)."""
    if held is None:
        return
    mask, handlers, came = held
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one pending in this thread reaches the noting handler now
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
    if came:
        # its first arrival already woke a set_wakeup_fd reader (asyncio's signal handlers): not a second time
        wakeup = signal.set_wakeup_fd(-1)
        try:
            for sig in dict.fromkeys(came):
                signal.raise_signal(sig)
        finally:
            signal.set_wakeup_fd(wakeup)


def _init(fn: Callable[..., Any], has_dataset: bool, dataset: Any, initializer, initargs, parent: int,
          ignore_term: bool = False) -> None:  # fmt: skip
    global _FN, _DATASET, _HAS_DATASET
    # Ctrl-C reaches the whole process group: the parent stops the pool and says so in one line; a worker
    # would print its own KeyboardInterrupt traceback ("Process ForkPoolWorker-1: ...") beside it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # a SIGTERM (Pool.terminate(), the parent's death) ends a worker at once, whatever handler the parent had when
    # it forked (hold_interrupts' would note it and go on)
    signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore_term else signal.SIG_DFL)  # a caller's SIG_IGN stays
    if hasattr(signal, "pthread_sigmask"):  # started with both held (see _pooled): a SIGTERM is obeyed from here
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    _die_with_parent(parent)
    _FN, _DATASET, _HAS_DATASET = fn, dataset, has_dataset
    if initializer is not None:
        initializer(*initargs)


def _call(i: Any) -> tuple[bool, Any]:
    # an exception travels back as a value, so the results before it in the same chunk still arrive
    assert _FN is not None
    try:
        return True, (_FN(_DATASET, i) if _HAS_DATASET else _FN(i))
    except Exception as exc:
        return False, exc


def _call_many(chunk: list) -> list[tuple[bool, Any]]:
    out = []
    for i in chunk:
        out.append(_call(i))
        if not out[-1][0]:
            break  # the error ends the map: the rest of the chunk is not needed
    return out


_NO_DATASET = object()


def map_ordered(
    fn: Callable[..., T],
    indices: Iterable[Any],
    *,
    workers: int | None = None,
    dataset: Any = _NO_DATASET,
    initializer: Callable[..., None] | None = None,
    initargs: Sequence[Any] = (),
    chunksize: int | None = None,
    per_worker: int = 1,
    progress: Callable[[int, int], None] | None = None,
    threads: bool = False,
) -> Iterator[T]:
    """Yield ``fn(i)`` (or ``fn(dataset, i)`` when ``dataset`` is given) for each index, in order.

    With more than one worker, ``fn``, ``dataset`` and ``initializer`` travel to each worker
    once (pickled under spawn, inherited under fork), so ``fn`` must be a module-level function
    (``functools.partial`` of one is fine). With ``workers`` 0 or 1, or too few indices to be
    worth a process (``per_worker``), everything runs in this process. Results are consumed
    lazily: the pool is stopped as soon as the caller stops iterating or an exception escapes
    (a worker's exception is raised here, in order).

    Args:
        workers: processes to use (default: usable CPUs; 0 or 1: in this process).
        dataset: passed to ``fn`` as its first argument; opened lazily in each worker.
        initializer: called with ``initargs`` once in each worker (and once here when in-process).
        chunksize: indices sent to a worker at a time (default: balance about 4 chunks per worker).
        per_worker: start no more than one worker per this many indices.
        progress: called as ``progress(done, total)`` after each result.
        threads: run ``fn`` in ``workers`` threads of this process instead of processes: for work
            spent in code that releases the GIL (file reads, OpenCV and zlib calls), where a
            result's bytes then need no pipe, and the dataset is shared (it must be thread-safe).
    """
    todo = list(indices)
    total = len(todo)
    n = resolve_workers(workers, total, per_worker=per_worker)
    has_dataset = dataset is not _NO_DATASET
    ds = dataset if has_dataset else None
    if threads and n > 1:
        return _threaded(fn, todo, n, has_dataset, ds, initializer, initargs, progress)
    if n <= 1:
        return _serial(fn, todo, has_dataset, ds, initializer, initargs, progress)
    return _pooled(fn, todo, n, has_dataset, ds, initializer, initargs, chunksize, progress)


def _serial(fn, todo, has_dataset, ds, initializer, initargs, progress) -> Iterator[Any]:
    if initializer is not None:
        initializer(*initargs)
    total = len(todo)
    for k, i in enumerate(todo, 1):
        yield fn(ds, i) if has_dataset else fn(i)
        if progress is not None:
            progress(k, total)


class _Part:
    """Indices handed to a thread, and their results once ``done`` is set."""

    __slots__ = ("indices", "results", "done")

    def __init__(self, indices: list) -> None:
        self.indices, self.results, self.done = indices, [], threading.Event()


def _threaded(fn, todo, n, has_dataset, ds, initializer, initargs, progress) -> Iterator[Any]:
    import queue
    from collections import deque

    if initializer is not None:
        initializer(*initargs)
    total = len(todo)
    call = partial(fn, ds) if has_dataset else fn
    chunk = 8  # indices per part: a part's hand-over costs as much as a small sample's work
    tasks: queue.SimpleQueue = queue.SimpleQueue()
    stopped = threading.Event()

    def work() -> None:
        while (part := tasks.get()) is not None:
            if stopped.is_set():
                continue  # the caller went away: the parts still queued are dropped
            for i in part.indices:
                try:
                    part.results.append((True, call(i)))
                except Exception as exc:  # raised in order, after the results before it
                    part.results.append((False, exc))
                    break
            part.done.set()

    # daemon threads: one stuck in a read (a named pipe nobody writes, a hung network mount) keeps
    # neither Ctrl-C nor the interpreter's exit waiting for it
    threads = [threading.Thread(target=work, name=f"datakit-map_{k}", daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    parts = (_Part(todo[k : k + chunk]) for k in range(0, total, chunk))
    pending: deque = deque()
    try:
        for part in itertools.islice(parts, 4 * n):  # read ahead of the caller: bounded
            tasks.put(part)
            pending.append(part)
        k = 0
        while pending:
            part = pending.popleft()
            part.done.wait()
            for nxt in itertools.islice(parts, 1):
                tasks.put(nxt)
                pending.append(nxt)
            for ok, result in part.results:
                if not ok:
                    raise result
                yield result
                k += 1
                if progress is not None:
                    progress(k, total)
    finally:
        stopped.set()
        for _ in threads:
            tasks.put(None)
        deadline = time.monotonic() + 2.0  # the parts running end within it; a stuck read is left behind
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))


class WorkerDied(DataError):
    """A worker process of :func:`map_ordered` ended without finishing its work (killed by a signal)."""


def _death(pid: int, exitcode: int, at: int) -> str:
    how = f"exit status {exitcode}"
    if exitcode < 0:
        try:
            how = f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"killed by signal {-exitcode}"
    hint = " (out of memory? the kernel's OOM killer sends SIGKILL; use fewer workers)" if exitcode == -9 else ""
    return f"a worker process (pid {pid}) died, {how}{hint}, while reading item {at} or one after it"


def _pooled(fn, todo, n, has_dataset, ds, initializer, initargs, chunksize, progress) -> Iterator[Any]:
    import multiprocessing as mp

    total = len(todo)
    if chunksize is None:
        chunksize = max(1, min(64, total // (4 * n)))
    ctx = mp.get_context(start_method())
    # A Ctrl-C while the pool starts (inside multiprocessing's own bookkeeping, or in a child before _init ignores
    # it) printed "Exception ignored in: <Finalize object, dead>" beside the one line: held until the pool exists,
    # and the workers start with it held until they ignore it
    held = hold_interrupts()
    try:
        ignore_term = signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        args = (fn, has_dataset, ds, initializer, tuple(initargs), os.getpid(), ignore_term)
        pool = ctx.Pool(n, initializer=_init, initargs=args)
    except BaseException:
        release_interrupts(held)
        raise
    try:
        release_interrupts(held)  # one that came meanwhile is raised here, where the pool is ended
        chunks = [todo[j : j + chunksize] for j in range(0, total, chunksize)]
        # chunks of one task each: imap's own chunking returns a generator, which cannot wait with a timeout
        results = pool.imap(_call_many, chunks, chunksize=1)
        workers = set(pool._pool)
        k = 0
        while k < total:
            try:
                chunk = results.next(timeout=0.5)
            except mp.TimeoutError:  # a worker killed (the OOM killer): the pool replaces it, its work is lost
                workers |= set(pool._pool)
                dead = next((p for p in workers if p.exitcode is not None), None)
                if dead is not None:
                    raise WorkerDied(_death(dead.pid, dead.exitcode, k)) from None
                continue
            for ok, result in chunk:
                if not ok:
                    raise result
                k += 1
                yield result
                if progress is not None:
                    progress(k, total)
        pool.close()
    finally:
        # stopped early (break, an exception, Ctrl-C): do not wait for the rest of the work
        _end_pool(pool)


_POOL_END_WAIT = 5.0  # seconds a pool's terminate() is given before its workers are killed


def _end_pool(pool) -> None:
    """``pool.terminate()`` and ``join()``, which can wait for ever: a worker that was writing a large result into
    the full result pipe holds the pipe's lock, and once terminate() stops the thread reading it, terminate()'s own
    write waits for that lock. After ``_POOL_END_WAIT`` seconds the workers are killed and the pool left behind
    (its threads are daemons), so the caller's error or Ctrl-C goes on."""
    import threading

    ender = threading.Thread(target=lambda: (pool.terminate(), pool.join()), name="datakit-pool-end", daemon=True)
    ender.start()
    ender.join(_POOL_END_WAIT)
    if not ender.is_alive():
        return
    for proc in list(getattr(pool, "_pool", ())):
        try:
            proc.kill()
            proc.join(1.0)
        except (OSError, ValueError, AssertionError):
            pass
