"""num_workers by measurement: the loader create_loader builds, one recommendation rule, noise."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
from torch.utils.data import Dataset

import datakit.loader
from datakit import tuning
from datakit.errors import UsageError
from datakit.transforms import train_pipeline
from datakit.tuning import Measurement, benchmark_workers, measure_throughput, recommend, tune_num_workers


class _Sized(Dataset):
    def __init__(self, sizes):
        self.sizes = sizes

    def __len__(self):
        return len(self.sizes)

    def __getitem__(self, i):
        return np.zeros((self.sizes[i], 8, 3), np.uint8), i


class _Draws(Dataset):
    """Each sample: a NumPy and a ``random`` draw made in the worker that loads it."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return np.full((2, 2, 3), i % 256, np.uint8), (float(np.random.rand()), random.random())


@pytest.mark.parametrize("workers", [0, 2])
def test_measure_throughput_builds_real_batches(workers):
    m = measure_throughput(_Sized([8] * 40), 8, workers, max_batches=3)
    # warm-up batches (one per worker) are not timed; then exactly 3 batches of 8
    assert (m.num_workers, m.images) == (workers, 24) and m.images_per_s > 0 and m.batches_per_s > 0
    # the batches are really stacked, so a dataset the loader could not batch fails here too
    with pytest.raises(ValueError, match=r"^cannot stack images of different sizes into one batch \(samples "):
        measure_throughput(_Sized([8, 9] * 20), 8, 0, max_batches=3)


def test_measures_the_loader_create_loader_builds(monkeypatch):
    seen = []
    real = datakit.loader.create_loader

    def spy(dataset, batch_size, **kwargs):
        loader = real(dataset, batch_size, **kwargs)
        seen.append((kwargs, loader.loader))
        return loader

    monkeypatch.setattr(datakit.loader, "create_loader", spy)
    draws = []

    def collect(batch):
        draws.extend(batch[1])
        return len(batch[1])

    measure_throughput(_Draws(), 8, 2, max_batches=4, collate_fn=lambda b: collect(list(zip(*b))))
    kwargs, dl = seen[0]
    assert kwargs["num_workers"] == 2 and kwargs["seed"] == 0 and kwargs["train"] is True
    assert (
        dl.persistent_workers and dl.prefetch_factor == 4 and isinstance(dl.worker_init_fn, datakit.loader.WorkerInit)
    )
    assert dl.pin_memory is False  # CPU: nothing to pin for
    # seeded workers: two forked workers do not repeat each other's NumPy or random draws
    assert len({d[0] for d in draws}) == len(draws) and len({d[1] for d in draws}) == len(draws)


def test_measuring_refuses_when_the_environment_overrides_num_workers(monkeypatch):
    monkeypatch.setenv("DATAKIT_NUM_WORKERS", "0")
    assert measure_throughput(_Sized([8] * 16), 8, 0, max_batches=1).num_workers == 0
    with pytest.raises(UsageError, match=r"^DATAKIT_NUM_WORKERS=0 is set, so create_loader would ignore num_workers=2"):
        measure_throughput(_Sized([8] * 16), 8, 2, max_batches=1)


def test_recommend_fewest_workers_within_tolerance():
    rec = recommend({0: [100.0], 1: [300.0], 2: [590.0], 4: [600.0]})
    assert (rec.num_workers, rec.noisy) == (2, False)
    assert rec.reason == "the fewest workers within 5% of the best median"
    rec = recommend({0: [100, 104, 98], 1: [300, 310, 305], 2: [400, 405, 398]})
    assert (rec.num_workers, rec.noisy) == (2, False)
    assert rec.reason == "the fewest workers within 5% of the best median; all 3 passes agree"
    # equal rates: the fewer workers win
    assert recommend({0: [500.0, 501.0], 1: [500.0, 499.0]}).num_workers == 0


def test_recommend_says_when_too_noisy():
    # the busy-machine case: three passes would each pick a different count
    rates = {0: [900.0, 400.0, 300.0], 1: [500.0, 850.0, 450.0], 2: [400.0, 420.0, 800.0]}
    rec = recommend(rates)
    assert rec.noisy and rec.num_workers == 1 and rec.candidates == [0, 1, 2]  # the medians' pick, flagged
    assert rec.reason == (
        "too noisy to choose between num_workers 0, 1, 2: the 3 passes pick differently, their spreads overlap; "
        "measure again on a quieter machine or with more passes and seconds"
    )
    with pytest.raises(ValueError, match="at least one measured pass"):
        recommend({0: []})


def _fake_measure(rates: dict[int, list[float]]):
    calls: dict[int, int] = {}

    def measure(dataset, batch_size, num_workers, **kwargs):
        k = calls.get(num_workers, 0)
        calls[num_workers] = k + 1
        r = rates[num_workers][k % len(rates[num_workers])]
        return Measurement(num_workers, r, r / batch_size, 0.01, 100)

    return measure, calls


def test_bench_and_tune_share_the_rule(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("DATAKIT_CACHE", str(tmp_path))
    rates = {0: [100.0, 110.0, 105.0], 1: [380.0, 390.0, 385.0], 2: [400.0, 395.0, 398.0], 4: [300.0] * 3}
    measure, calls = _fake_measure(rates)
    monkeypatch.setattr(tuning, "measure_throughput", measure)
    runs, rec = benchmark_workers(_Sized([8] * 8), 4, [0, 1, 2, 4], repeats=3)
    assert [len(v) for v in runs.values()] == [3, 3, 3, 3] and (rec.num_workers, rec.noisy) == (1, False)
    calls.clear()
    tuned = tune_num_workers(_Sized([8] * 8), 4, [0, 1, 2, 4], repeats=3)
    # the same pick; 4 workers never measured (2 was not 5% better than 1, so the rule would not pick more)
    assert tuned.best == rec.num_workers == 1 and not tuned.noisy and calls == {0: 3, 1: 3, 2: 3}


def test_the_cache_folder_given_with_a_tilde_is_the_home_folders(monkeypatch, tmp_path: Path):
    # the attack: DATAKIT_CACHE='~/dkcache' (an env file, `docker -e`, systemd pass it unexpanded) wrote the tuning's
    # answers into a folder named '~' in the working directory
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DATAKIT_CACHE", "~/dkcache")
    assert tuning._cache_file() == tmp_path / "home" / "dkcache" / "num_workers.json"
    monkeypatch.delenv("DATAKIT_CACHE")
    assert tuning._cache_file() == tmp_path / "home" / ".cache" / "datakit" / "num_workers.json"


def test_tune_does_not_cache_a_noisy_answer(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("DATAKIT_CACHE", str(tmp_path))
    measure, _ = _fake_measure({0: [900.0, 400.0], 1: [500.0, 850.0], 2: [400.0, 420.0]})
    monkeypatch.setattr(tuning, "measure_throughput", measure)
    monkeypatch.setattr(tuning, "default_candidates", lambda: [0, 1, 2])
    res = tune_num_workers(_Sized([8] * 8), 4, repeats=2)
    assert res.noisy and res.reason.startswith("too noisy to choose between num_workers 0, 1: the 2 passes")
    assert not (tmp_path / "num_workers.json").exists()


class _NoRepr:
    def __call__(self, x):
        return x


def test_the_cache_key_outlives_a_transforms_address_and_a_damaged_file_is_measured_again(monkeypatch, tmp_path):
    # the attacks: a transform without a repr of its own ('<_NoRepr object at 0x...>') gave a new key every run (1, 2,
    # 3 entries, measured at every start); a cache file holding [] or {"k": "x"} killed create_loader(num_workers=
    # "auto") with AttributeError or ValueError naming no file
    monkeypatch.setenv("DATAKIT_CACHE", str(tmp_path))
    monkeypatch.setattr(tuning, "default_candidates", lambda: [0, 1, 2])
    measure, calls = _fake_measure({0: [100.0], 1: [300.0], 2: [310.0]})
    monkeypatch.setattr(tuning, "measure_throughput", measure)

    def dataset():
        ds = _Sized([8] * 8)
        ds.transform = _NoRepr()
        return ds

    assert tune_num_workers(dataset(), 4).best == 1
    assert tune_num_workers(dataset(), 4).cached
    assert len(json.loads((tmp_path / "num_workers.json").read_text())) == 1
    for damaged in ("[]", "null", '{"k": "x"}', "{"):
        (tmp_path / "num_workers.json").write_text(damaged)
        res = tune_num_workers(dataset(), 4)
        assert (res.best, res.cached) == (1, False)
    assert tune_num_workers(dataset(), 4).cached  # the file written again, whole


def test_processes_tuning_at_once_each_keep_their_answer_in_the_cache(monkeypatch, tmp_path: Path):
    # the attack: 8 processes tuning 8 datasets at once (torchrun ranks, jobs sharing a home folder) left 4-6 answers:
    # each read the file, added its own and replaced it, dropping what the others wrote in between
    import fcntl
    import multiprocessing

    monkeypatch.setenv("DATAKIT_CACHE", str(tmp_path))
    monkeypatch.setattr(tuning, "default_candidates", lambda: [0, 1, 2])
    measure, _ = _fake_measure({0: [100.0], 1: [300.0], 2: [310.0]})
    monkeypatch.setattr(tuning, "measure_throughput", measure)
    lock = os.open(tmp_path / "num_workers.json.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)  # another process's write under way

    def tune():
        os.close(lock)  # the holder's descriptor, inherited by the fork: the holder's lock, not this process's
        tune_num_workers(_Sized([8] * 9), 4)

    other = multiprocessing.get_context("fork").Process(target=tune)
    other.start()
    other.join(1.0)
    assert other.is_alive()  # it waits for the lock, not writing over what the holder writes
    (tmp_path / "num_workers.json").write_text(json.dumps({"the holder's": 2}))
    os.close(lock)
    other.join(30)
    assert other.exitcode == 0
    data = json.loads((tmp_path / "num_workers.json").read_text())
    assert len(data) == 2 and data["the holder's"] == 2 and sorted(data.values()) == [1, 2]


def test_tuning_measures_and_caches(tmp_path: Path, monkeypatch, class_folder: Path):
    from datakit.datasets import open_dataset

    monkeypatch.setenv("DATAKIT_CACHE", str(tmp_path))
    ds = open_dataset(class_folder, transform=train_pipeline(32, normalize=False))
    m = measure_throughput(ds, 4, 0, budget_s=0.3)
    assert m.images_per_s > 0 and m.images > 0
    res = tune_num_workers(ds, 4, budget_s=0.3)
    assert res.best in {x.num_workers for x in res.measurements} and not res.cached
    again = tune_num_workers(ds, 4, budget_s=0.3)
    assert again.cached and again.best == res.best
    assert list(json.loads((tmp_path / "num_workers.json").read_text()).values()) == [res.best]


@pytest.mark.parametrize("device", [None, "cpu"])
def test_the_measuring_passes_report_no_epochs(caplog, device):
    # the attack: num_workers="auto" logged "epoch 0 ... epoch 11 ...: input-bound" for its measuring loaders before
    # training had started, lines that read like the training's own epochs
    import logging

    with caplog.at_level(logging.INFO, logger="datakit"):
        m = measure_throughput(_Sized([8] * 8), 4, 0, max_batches=30, device=device)
    assert m.images > 8  # passes of 2 batches: more than one ended while measuring
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch ")] == []
    loader = datakit.loader.create_loader(_Sized([8] * 8), 4, num_workers=0, seed=0)
    with caplog.at_level(logging.INFO, logger="datakit"):
        for _ in range(2):
            list(loader)
    assert [r.getMessage().split(":")[0] for r in caplog.records if r.getMessage().startswith("epoch ")] == [
        "epoch 0",
        "epoch 1",
    ]


def test_ranks_started_on_one_machine_tune_within_their_share_of_its_cpus(monkeypatch):
    # the attack: two torchrun ranks on one machine each tuned num_workers="auto" among counts up to every CPU, and
    # reused an answer one process alone had measured there
    import datakit.tuning as t

    monkeypatch.setattr(t, "usable_cpus", lambda: 8)
    for name in ("MASTER_ADDR", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    alone = (t.default_candidates(), t._cache_key(_Sized([8] * 8), 4))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert t.local_ranks() == 2
    assert alone[0][-1] == 8 and t.default_candidates() == [0, 1, 2, 4]
    assert t._cache_key(_Sized([8] * 8), 4) != alone[1]
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "x")  # not a count: as without it
    assert t.local_ranks() == 1 and t.default_candidates() == alone[0]


def test_a_rank_bound_to_cpus_of_its_own_tunes_on_them_undivided(monkeypatch):
    # the regression round: torchrun --numa-binding gives each rank an affinity of its own share, which usable_cpus()
    # reads; dividing that by LOCAL_WORLD_SIZE again left 8 ranks of a 64-CPU machine candidates [0, 1]
    import datakit.tuning as t

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    monkeypatch.setattr(t, "usable_cpus", lambda: 8)
    machine, mine = set(range(64)), set(range(24, 32))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: mine if pid == 0 else machine)
    assert t.local_ranks() == 1 and t.default_candidates() == [0, 1, 2, 4, 8]
    mine = machine  # unbound: the 8 ranks share what this one may use
    monkeypatch.setattr(t, "usable_cpus", lambda: 64)
    assert t.local_ranks() == 8 and t.default_candidates() == [0, 1, 2, 4, 8]
