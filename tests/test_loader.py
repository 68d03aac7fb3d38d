from __future__ import annotations

import json
import logging
import os
import random
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from datakit.loader import EpochSampler, InfiniteLoader, create_loader, seed_everything


class Indexed(Dataset):
    """Returns its index and three random draws (random, NumPy, torch) made in the worker."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return i, random.random(), float(np.random.rand()), float(torch.rand(1))


def batches(loader, k=None):
    out = []
    for b in loader:
        out.append(b[0].tolist())
        if k is not None and len(out) == k:
            break
    return out


def test_defaults_and_drop_last_single_sample(caplog):
    with caplog.at_level(logging.INFO, logger="datakit"):
        train = create_loader(Indexed(9), 4, num_workers=0, seed=0)
    assert train.drop_last and len(train) == 2
    assert "the last training batch would hold 1 sample" in caplog.text
    evaluation = create_loader(Indexed(9), 4, train=False, num_workers=0)
    assert not evaluation.drop_last and sum(len(b) for b in batches(evaluation)) == 9
    assert batches(evaluation)[0] == [0, 1, 2, 3]  # no shuffling in evaluation
    keep = create_loader(Indexed(10), 4, num_workers=0)
    assert not keep.drop_last
    two = create_loader(Indexed(10), 4, num_workers=2)
    assert two.persistent_workers and two.prefetch_factor == 4 and not two.pin_memory


def test_same_seed_same_batches_and_reshuffles_each_epoch():
    a = create_loader(Indexed(20), 5, num_workers=2, seed=7)
    b = create_loader(Indexed(20), 5, num_workers=2, seed=7)
    ea1, ea2 = batches(a), batches(a)
    assert ea1 == batches(b) and ea2 == batches(b)
    assert ea1 != ea2 and sorted(sum(ea1, [])) == list(range(20))


@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes")
def test_worker_seeds_distinct_and_reproducible():
    def draws(seed):
        loader = create_loader(Indexed(16), 1, num_workers=4, seed=seed, train=False)
        return [(float(r), float(n), float(t)) for _, r, n, t in loader]

    first = draws(3)
    assert first == draws(3)
    assert len({d[1] for d in first[:4]}) == 4  # NumPy draws differ across the 4 workers' first samples
    assert len({d[0] for d in first[:4]}) == 4
    assert first != draws(4)


def test_infinite_loader_resumes_with_exact_next_batch():
    ref = create_loader(Indexed(10), 3, num_workers=0, seed=1, infinite=True)
    expected = [next(ref)[0].tolist() for _ in range(9)]  # crosses an epoch boundary (3 batches/epoch + drop)
    run = create_loader(Indexed(10), 3, num_workers=0, seed=1, infinite=True)
    got = [next(run)[0].tolist() for _ in range(5)]
    state = run.state_dict()
    assert state == {"epoch": 1, "step": 2}
    resumed = create_loader(Indexed(10), 3, num_workers=0, seed=1, infinite=True)
    resumed.load_state_dict(state)
    got += [next(resumed)[0].tolist() for _ in range(4)]
    assert got == expected
    assert isinstance(resumed, InfiniteLoader) and resumed.state_dict() == {"epoch": 2, "step": 3} and len(resumed) == 3


def test_epoch_sampler_shards_cover_everything():
    parts = [list(EpochSampler(10, seed=3, rank=r, world=3)) for r in range(3)]
    assert all(len(p) == 4 for p in parts)
    assert set(sum(parts, [])) == set(range(10))


def test_num_workers_env_override(monkeypatch):
    monkeypatch.setenv("DATAKIT_NUM_WORKERS", "0")
    assert create_loader(Indexed(4), 2, num_workers=3).num_workers == 0


DDP = r"""
import json, os, sys
import torch.distributed as dist
from torch.utils.data import Dataset
from datakit.loader import create_loader

class Idx(Dataset):
    def __len__(self): return 11
    def __getitem__(self, i): return i

dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["PORT"],
                        rank=int(os.environ["RANK"]), world_size=2)
train = create_loader(Idx(), 2, num_workers=0, seed=5)
epochs = [[int(i) for b in train for i in b] for _ in range(2)]
evaluation = create_loader(Idx(), 4, train=False, num_workers=0)
print(json.dumps({"epochs": epochs, "eval": [int(i) for b in evaluation for i in b]}))
dist.destroy_process_group()
"""


def test_two_gloo_ranks_get_disjoint_shards():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PORT=str(port))
    procs = [subprocess.Popen([sys.executable, "-c", DDP], env=dict(env, RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(2)]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    r0, r1 = (json.loads(o) for o, _ in outs)
    for e in range(2):
        a, b = r0["epochs"][e], r1["epochs"][e]
        assert len(a) == len(b) == 6
        assert set(a) | set(b) == set(range(11))
        assert len(set(a) & set(b)) <= 1  # 11 samples on 2 ranks: one padded repeat, as DistributedSampler
    assert r0["epochs"][0] != r0["epochs"][1]  # set_epoch reshuffles
    assert r0["eval"] == r1["eval"] == list(range(11))  # evaluation stays whole


def test_seed_everything():
    seed_everything(11)
    a = (random.random(), np.random.rand(), torch.rand(1).item(), os.environ["PYTHONHASHSEED"])
    seed_everything(11)
    assert a == (random.random(), np.random.rand(), torch.rand(1).item(), "11")
