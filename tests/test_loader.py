from __future__ import annotations

import collections
import json
import logging
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from datakit.cli import main
from datakit.loader import EpochSampler, InfiniteLoader, create_loader, seed_everything
from datakit.prefetch import CUDAPrefetcher
from datakit.transforms import train_pipeline
from datakit.tuning import measure_throughput, tune_num_workers


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


def test_prefetcher_passes_through_without_cuda():
    loader = create_loader(Indexed(6), 2, num_workers=0, train=False)
    pre = CUDAPrefetcher(loader, "cuda" if not torch.cuda.is_available() else "cpu", mean=[0.5], std=[0.5])
    assert len(pre) == 3 and pre.dataset is loader.dataset and pre.sampler is loader.sampler
    assert [b[0].tolist() for b in pre] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match="give both mean and std"):
        CUDAPrefetcher(loader, "cpu", mean=[0.5])


def test_prefetcher_conversion_keeps_structure():
    # the conversion the prefetcher runs on the side stream, here on CPU tensors
    Batch = collections.namedtuple("Batch", "images targets")
    images = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
    expected = (images.float() / 255 - 0.5) / 0.25
    pre = CUDAPrefetcher([], "cpu", mean=[0.5] * 3, std=[0.25] * 3, channels_last=True)
    out = pre._move(Batch(images, {"label": torch.tensor([1, 2]), "extra": (images[0],)}), {"images_done": False})
    assert type(out) is Batch and out.images.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(out.images, expected)
    # only the first uint8 NCHW tensor is the images; the rest moves unchanged
    assert out.targets["label"].tolist() == [1, 2] and out.targets["extra"][0].dtype == torch.uint8
    assert type(out.targets["extra"]) is tuple
    # NHWC batches (stacked numpy images) come out NCHW; 0-255 statistics are used as given
    nhwc = images.permute(0, 2, 3, 1).contiguous()
    pre255 = CUDAPrefetcher([], "cpu", mean=[127.5] * 3, std=[63.75] * 3)
    torch.testing.assert_close(pre255._move([nhwc, 0], {"images_done": False})[0], (images.float() - 127.5) / 63.75)


@pytest.mark.gpu
def test_prefetcher_on_gpu_normalises_uint8():
    images = torch.randint(0, 256, (8, 3, 4, 4), dtype=torch.uint8)
    data = [(images[i], {"label": i}) for i in range(8)]
    loader = torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True)
    pre = CUDAPrefetcher(loader, "cuda", mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25], channels_last=True)
    out = list(pre)
    assert len(out) == 2 and out[0][0].is_cuda and out[0][0].dtype == torch.float32
    expected = (images[:4].float() / 255 - 0.5) / 0.25
    torch.testing.assert_close(out[0][0].cpu(), expected)
    assert out[0][1]["label"].is_cuda and out[0][0].is_contiguous(memory_format=torch.channels_last)


def test_num_workers_env_override(monkeypatch):
    monkeypatch.setenv("DATAKIT_NUM_WORKERS", "0")
    assert create_loader(Indexed(4), 2, num_workers=3).num_workers == 0


class _Sized(Dataset):
    def __init__(self, sizes):
        self.sizes = sizes

    def __len__(self):
        return len(self.sizes)

    def __getitem__(self, i):
        return np.zeros((self.sizes[i], 8, 3), np.uint8), i


@pytest.mark.parametrize("workers", [0, 2])
def test_measure_throughput_builds_real_batches(workers):
    m = measure_throughput(_Sized([8] * 40), 8, workers, max_batches=3)
    # warm-up batches (one per worker) are not timed; then exactly 3 batches of 8
    assert (m.num_workers, m.images) == (workers, 24) and m.images_per_s > 0 and m.batches_per_s > 0
    # the batches are really stacked, so a dataset the loader could not batch fails here too
    with pytest.raises(ValueError, match=r"^cannot stack images of different sizes into one batch \(samples "):
        measure_throughput(_Sized([8, 9] * 20), 8, 0, max_batches=3)


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


@pytest.mark.parametrize("size", ["32", "0"])  # 0: raw decodes of mixed sizes, counted rather than stacked
def test_cli_bench(class_folder: Path, capsys, size: str):
    assert (
        main(
            [
                "bench",
                str(class_folder),
                "--workers",
                "0,1",
                "--batch-size",
                "4",
                "--seconds",
                "0.3",
                "--json",
                "--size",
                size,
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert [r["num_workers"] for r in out["results"]] == [0, 1] and out["recommended"] in (0, 1)


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
