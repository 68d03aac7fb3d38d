"""The shared pool: order, progress, worker start methods, errors, early stop, CPU count."""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path

import pytest

from datakit import parallel
from datakit.errors import SampleError
from datakit.parallel import map_ordered, resolve_workers, start_method, usable_cpus


def _square_plus(ds, i: int, offset: int = 0) -> tuple[int, int, int]:
    if ds[i] < 0:
        raise SampleError(f"sample {i}: negative")
    return i, ds[i] * ds[i] + offset, os.getpid()


def _plain(i: int) -> int:
    return i * 10


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_ordered_results_from_several_processes(monkeypatch, method: str):
    monkeypatch.setattr(parallel, "start_method", lambda: method)
    data = list(range(200, 0, -1))
    calls: list[tuple[int, int]] = []
    out = list(map_ordered(partial(_square_plus, offset=1), range(200), workers=2, dataset=data,
                           progress=lambda d, t: calls.append((d, t))))  # fmt: skip
    assert [r[:2] for r in out] == [(i, data[i] * data[i] + 1) for i in range(200)]
    assert os.getpid() not in {r[2] for r in out}  # computed in the workers
    assert calls == [(k, 200) for k in range(1, 201)]


def test_in_process_without_dataset_and_per_worker():
    assert list(map_ordered(_plain, [3, 1, 2], workers=0)) == [30, 10, 20]
    # 10 items, at most one worker per 64: no pool is started
    out = list(map_ordered(_square_plus, range(10), workers=4, dataset=list(range(10)), per_worker=64))
    assert {r[2] for r in out} == {os.getpid()}


def test_worker_error_raised_in_order_and_early_stop():
    data = [1, 2, 3, -4] + [1] * 100
    got = []
    with pytest.raises(SampleError, match=r"^sample 3: negative$"):
        for r in map_ordered(_square_plus, range(len(data)), workers=2, dataset=data):
            got.append(r[0])
    assert got == [0, 1, 2]
    it = map_ordered(_square_plus, range(100), workers=2, dataset=[1] * 100)
    first = next(it)
    pids = {first[2]}
    it.close()  # stops and joins the pool: its workers are gone
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_threads_ordered_errors_in_order_and_early_stop():
    import threading

    data = list(range(300, 0, -1))
    calls: list[tuple[int, int]] = []
    names: set[str] = set()

    def square(ds, i):
        names.add(threading.current_thread().name)
        return _square_plus(ds, i)

    out = list(map_ordered(square, range(300), workers=2, dataset=data, threads=True,
                           progress=lambda d, t: calls.append((d, t))))  # fmt: skip
    assert [r[:2] for r in out] == [(i, data[i] * data[i]) for i in range(300)]
    # in this process, on the pool's threads (which of the two takes which part is the scheduler's choice)
    assert {r[2] for r in out} == {os.getpid()} and names and names <= {"datakit-map_0", "datakit-map_1"}
    assert calls == [(k, 300) for k in range(1, 301)]
    got = []
    with pytest.raises(SampleError, match=r"^sample 3: negative$"):
        for r in map_ordered(_square_plus, range(104), workers=2, dataset=[1, 2, 3, -4] + [1] * 100, threads=True):
            got.append(r[0])
    assert got == [0, 1, 2]
    done: list[int] = []
    it = map_ordered(lambda i: done.append(i) or i, range(10_000), workers=2, threads=True)
    assert next(it) == 0
    it.close()  # the parts not started are dropped: at most 8 were queued ahead, and one more for the first
    assert 1 <= len(done) <= 9 * 8 and not any(t.name.startswith("datakit-map") for t in threading.enumerate())


def test_resolve_workers():
    assert resolve_workers(3, 1000) == 3
    assert resolve_workers(8, 100, per_worker=16) == 6
    assert resolve_workers(None, 10**6) == usable_cpus()
    with pytest.raises(ValueError, match=r"^workers must be >= 0, got -1$"):
        resolve_workers(-1, 10)


def test_usable_cpus_without_sched_getaffinity(monkeypatch):
    import datakit.parallel as par

    monkeypatch.setattr(par, "cgroup_cpu_quota", lambda: None)
    if hasattr(os, "sched_getaffinity"):
        assert usable_cpus() == len(os.sched_getaffinity(0))
        # the attack: docker --cpus=2 on a 64-CPU host: 64 workers by default, which doctor itself warned of
        monkeypatch.setattr(par, "cgroup_cpu_quota", lambda: 1.5)
        assert usable_cpus() == 1
        monkeypatch.setattr(par, "cgroup_cpu_quota", lambda: None)
        monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "process_cpu_count", lambda: 3, raising=False)
    assert usable_cpus() == 3
    monkeypatch.delattr(os, "process_cpu_count")
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert usable_cpus() == 1


def test_start_method(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert start_method() == "spawn"
    monkeypatch.setattr(sys, "platform", "linux")
    import torch

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert start_method() == "fork"
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert start_method() == "spawn"


def _large(i: int) -> bytes:
    return b"x" * 3_000_000


def test_stopping_early_while_workers_send_large_results_never_hangs(monkeypatch):
    # the attack: pack-lmdb stopped by a full disk while its worker processes sent images back hung for ever in
    # Pool.terminate() (a worker holding the result pipe's lock, writing into the pipe nobody read any more),
    # holding the pack's lock; reproduced here in one trial of two to six
    import time

    monkeypatch.setattr(parallel, "_POOL_END_WAIT", 1.0)
    start = time.monotonic()
    for _ in range(6):
        results = map_ordered(_large, list(range(400)), workers=2, chunksize=4)
        for k, _r in enumerate(results):
            if k == 3:
                break
        results.close()
    assert time.monotonic() - start < 6 * 1.0 + 20


def _children() -> set[int]:
    me = os.getpid()
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                out.add(int(entry))
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_ctrl_c_inside_the_pools_start_ends_its_workers_and_reaches_the_caller(monkeypatch, method: str):
    # The attack: Ctrl-C while multiprocessing starts the pool's workers. Raised inside Pool(), it left the workers
    # it had started running (Pool's own clean-up catches Exception only) and, while a worker was forking, printed
    # "Exception ignored in: <Finalize object, dead>" beside the command's one line. Held until the pool exists,
    # it is raised where the pool is ended, and the workers never see it.
    import multiprocessing.pool
    import signal

    monkeypatch.setattr(parallel, "start_method", lambda: method)
    start = multiprocessing.pool.Pool._repopulate_pool_static
    sent = []

    def repopulate(*args, **kwargs):
        if not sent:
            sent.append(os.kill(os.getpid(), signal.SIGINT))  # as the workers start
        return start(*args, **kwargs)

    monkeypatch.setattr(multiprocessing.pool.Pool, "_repopulate_pool_static", staticmethod(repopulate))
    before = _children()
    with pytest.raises(KeyboardInterrupt):
        list(map_ordered(_plain, list(range(400)), workers=2, chunksize=4))
    assert sent == [None]
    left = {p: Path(f"/proc/{p}/cmdline").read_bytes() for p in _children() - before}
    # multiprocessing's resource tracker (started with the first spawn pool) outlives every pool by design
    assert [p for p, cmd in left.items() if b"resource_tracker" not in cmd] == []


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups")
def test_handlers_outside_python_and_an_ignored_sigterm_are_left_as_they_were(tmp_path):
    # the attacks on the held start: faulthandler.register(SIGTERM) (a handler outside Python) was replaced and
    # not put back, so the next SIGTERM killed the process without a word; a caller that ignores SIGTERM got
    # WorkerDied when the group was sent one, its workers reset to the default
    import subprocess
    import textwrap

    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(f"""
        import faulthandler, os, signal, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from datakit.parallel import map_ordered
        from test_helpers import sigterm_self
        if sys.argv[1] == "faulthandler":
            faulthandler.register(signal.SIGTERM, chain=False)
            assert list(map_ordered(abs, range(200), workers=2, chunksize=4)) == list(range(200))
            os.kill(os.getpid(), signal.SIGTERM)  # faulthandler prints the stack, and the program goes on
            print("went on")
        else:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            print("finished", len(list(map_ordered(sigterm_self, range(200), workers=2, chunksize=4))))
    """)
    )
    # a SIGTERM to the whole group, the workers included, from a worker halfway
    (tmp_path / "test_helpers.py").write_text("import os\n\n\ndef sigterm_self(i):\n    if i == 50:\n"
                                              "        os.killpg(os.getpgrp(), 15)\n    return i\n")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.dirname(__file__))])}
    for case, want in (("faulthandler", "went on\n"), ("ignored", "finished 200\n")):
        proc = subprocess.run([sys.executable, str(script), case], capture_output=True, text=True, env=env,
                              timeout=120, start_new_session=True)  # fmt: skip
        assert (proc.returncode, proc.stdout) == (0, want), (case, proc.stderr[-2000:])
