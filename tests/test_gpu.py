"""The CUDA path on a real GPU: the prefetcher, create_loader(device="cuda") with fork and spawn
workers, device names, and what doctor and select_gpus say once CUDA has started.

Every test here is marked ``gpu`` and skips without CUDA, except the ones that need none."""

from __future__ import annotations

import collections
import gc
import json
import os
import subprocess
import sys

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from datakit.datasets import open_dataset
from datakit.errors import UsageError
from datakit.loader import create_loader
from datakit.pack import pack_lmdb
from datakit.prefetch import CUDAPrefetcher, check_device
from datakit.transforms import eval_pipeline, train_pipeline

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
Pair = collections.namedtuple("Pair", "boxes names")


def _expected(images: torch.Tensor) -> torch.Tensor:
    m = torch.tensor(MEAN).view(1, 3, 1, 1) * 255
    s = torch.tensor(STD).view(1, 3, 1, 1) * 255
    return (images.float() - m) / s


def test_a_gpu_index_the_machine_lacks_is_refused_with_the_count(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    with pytest.raises(
        UsageError, match=r"^device='cuda:2' but CUDA sees 2 GPUs \(CUDA_VISIBLE_DEVICES='1,3'\): use cuda:0 to cuda:1$"
    ):
        check_device("cuda:2")
    assert check_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(UsageError, match=r"^device='mps': datakit loads onto 'cpu' or 'cuda' devices$"):
        check_device("mps")
    assert check_device(1) == torch.device("cuda", 1)
    with pytest.raises(UsageError, match=r"^device='cuda:5' but CUDA sees 2 GPUs"):
        check_device(5)  # an int is a GPU index, named as such
    for bad in (True, 1.5, ["cpu"]):
        with pytest.raises(UsageError) as err:
            check_device(bad)
        assert str(err.value) == f"device must be 'cpu', 'cuda', 'cuda:N' or a torch.device, got {bad!r}"
    with pytest.raises(UsageError, match=r"^device=1180591620717411303424: Overflow when unpacking long long$"):
        check_device(2**70)


@pytest.mark.gpu
def test_create_loader_refuses_a_gpu_this_machine_lacks(class_folder):
    ds = open_dataset(class_folder, transform=train_pipeline(32))
    n = torch.cuda.device_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    seen = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
    plural = "s" if n != 1 else ""
    with pytest.raises(UsageError) as err:
        create_loader(ds, 4, num_workers=0, device=f"cuda:{n}")
    assert str(err.value) == f"device='cuda:{n}' but CUDA sees {n} GPU{plural}{seen}: use cuda:0 to cuda:{n - 1}"


@pytest.mark.gpu
def test_prefetcher_keeps_nested_batches_on_an_explicit_device_and_a_side_stream():
    g = torch.Generator().manual_seed(0)
    batches = []
    for k in range(3):
        images = torch.randint(0, 256, (4, 3, 8, 6), dtype=torch.uint8, generator=g)
        masks = torch.randint(0, 2, (4, 1, 8, 6), dtype=torch.uint8, generator=g)  # a second uint8 NCHW: moved as is
        batches.append({"image": images, "target": {"mask": masks, "pair": Pair(torch.full((4, 2), float(k)), ["a", "b"])},
                        "ids": [torch.arange(4) + 4 * k, "batch", k]})  # fmt: skip
    user_stream = torch.cuda.Stream()
    with torch.cuda.stream(user_stream):  # the training loop runs on a stream of its own
        pre = CUDAPrefetcher(batches, torch.device("cuda", 0), mean=MEAN, std=STD, channels_last=True)
        out = list(pre)
    torch.cuda.synchronize()
    assert len(out) == 3
    for k, (got, src) in enumerate(zip(out, batches)):
        assert set(got) == {"image", "target", "ids"} and got["image"].device == torch.device("cuda", 0)
        assert got["image"].dtype == torch.float32 and got["image"].is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(got["image"].cpu(), _expected(src["image"]))
        mask = got["target"]["mask"]
        assert mask.is_cuda and mask.dtype == torch.uint8 and torch.equal(mask.cpu(), src["target"]["mask"])
        pair = got["target"]["pair"]
        assert type(pair) is Pair and pair.names == ["a", "b"] and pair.boxes.is_cuda
        assert pair.boxes.cpu().tolist() == [[float(k)] * 2] * 4
        assert type(got["ids"]) is list and got["ids"][1:] == ["batch", k]
        assert got["ids"][0].cpu().tolist() == [4 * k, 4 * k + 1, 4 * k + 2, 4 * k + 3]


class Distinct(Dataset):
    """Sample i is an image filled with i % 251: every batch's content is known."""

    def __len__(self) -> int:
        return 48 * 8

    def __getitem__(self, i: int):
        return torch.full((3, 256, 256), i % 251, dtype=torch.uint8), i


@pytest.mark.gpu
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_batches_are_intact_while_the_next_is_copied_behind_slow_compute(context):
    # the loop holds each batch through seconds' worth of GPU work while the side stream copies
    # the next one from pinned memory into memory the allocator could hand out again: a missing
    # wait_stream or record_stream shows up as a batch holding another batch's pixels
    loader = DataLoader(Distinct(), batch_size=48, num_workers=2, pin_memory=True, multiprocessing_context=context)
    w = torch.randn(2048, 2048, device="cuda") / 45
    seen = []
    for images, idx in CUDAPrefetcher(loader, "cuda", mean=[0.0] * 3, std=[1 / 255] * 3):
        y = images.flatten(1)[:, :2048]
        for _ in range(20):  # long enough that the next copy is issued and lands meanwhile
            y = torch.tanh(y @ w)
        per_sample = images.flatten(1)
        lo, hi = per_sample.amin(1), per_sample.amax(1)
        seen.append((idx.tolist(), lo.cpu().tolist(), hi.cpu().tolist(), bool(torch.isfinite(y).all())))
    assert len(seen) == 8
    for ids, lo, hi, finite in seen:
        assert lo == hi == [float(i % 251) for i in ids] and finite


@pytest.mark.gpu
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_cuda_path_from_a_pack_read_first_in_the_parent(class_folder, tmp_path, context):
    # the README's path on a pack: the parent reads a sample, CUDA starts, then workers start
    pack = tmp_path / "train.lmdb"
    pack_lmdb(class_folder, pack, workers=1)
    ds = open_dataset(pack, transform=train_pipeline(32))
    ds[0]
    torch.zeros(1, device="cuda")  # CUDA initialised before the workers fork
    kw = dict(num_workers=2, seed=3, multiprocessing_context=context)
    gpu = list(create_loader(ds, 4, device="cuda", **kw))
    cpu = list(create_loader(ds, 4, device="cpu", **kw))
    assert len(gpu) == len(cpu) == 3
    for (g, gl), (c, cl) in zip(gpu, cpu):
        assert g.is_cuda and g.dtype == torch.float32 and g.shape == (4, 3, 32, 32)
        torch.testing.assert_close(g.cpu(), c, atol=1e-5, rtol=1e-5)
        assert torch.equal(gl.cpu(), cl)
    raw = list(create_loader(ds, 4, device="cuda", normalize=False, **kw))
    assert raw[0][0].is_cuda and raw[0][0].dtype == torch.uint8


@pytest.mark.gpu
def test_eval_loader_on_cuda_gives_every_sample_once(class_folder):
    ds = open_dataset(class_folder, transform=eval_pipeline(24, 28))
    got = list(create_loader(ds, 5, train=False, num_workers=2, device="cuda"))
    assert [len(t) for _, t in got] == [5, 5, 2]
    assert torch.cat([t for _, t in got]).cpu().tolist() == [ds.targets[i] for i in range(12)]
    want = torch.stack([ds[i][0] for i in range(12)])
    torch.testing.assert_close(torch.cat([x for x, _ in got]).cpu(), _expected(want))


_AFTER_START = r"""
import json, os, torch
from datakit.devices import select_gpus
from datakit.doctor import doctor
torch.zeros(1, device="cuda")  # CUDA starts with what the shell gave it
n = torch.cuda.device_count()
os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(n + 1))  # too late to count
try:
    select_gpus("0")
    refused = ""
except RuntimeError as exc:
    refused = str(exc)
report = doctor(num_workers=1)
found = {f.check: [f.status, f.detail] for f in report.findings if f.check.startswith("cuda")}
print(json.dumps({"n": n, "found": found, "refused": refused, "ok": report.ok}))
"""


def _in_a_fresh_process(script: str) -> dict:
    """What ``script`` prints last, as JSON, run where CUDA has not started and no GPU is chosen."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.gpu
def test_doctor_and_select_gpus_on_a_started_cuda():
    out = _in_a_fresh_process(_AFTER_START)
    n = out["n"]
    listed = ",".join(str(i) for i in range(n + 1))
    assert out["found"]["cuda-fork"] == ["fail", "CUDA is initialised in this process and workers start by fork: a worker "
                                         "that touches CUDA dies with 'Cannot re-initialize CUDA in forked subprocess'"]  # fmt: skip
    assert out["found"]["cuda-visible-devices"] == [
        "fail", f"CUDA_VISIBLE_DEVICES={listed!r} lists {n + 1} GPUs but CUDA sees {n}: it names GPUs this machine lacks "
        "(nvidia-smi -L lists those it has), or it was set after CUDA started and is ignored"]  # fmt: skip
    assert out["refused"].startswith(
        "select_gpus('0') must run before the first CUDA call: CUDA is already initialised"
    )
    assert out["ok"] is False


_BEFORE_START = r"""
import json, torch
from datakit.devices import select_gpus
from datakit.doctor import doctor
chosen = select_gpus("0")
torch.zeros(1, device="cuda")
found = {f.check: [f.status, f.detail] for f in doctor(num_workers=1).findings if f.check == "cuda-visible-devices"}
print(json.dumps({"chosen": chosen, "n": torch.cuda.device_count(), "found": found}))
"""


@pytest.mark.gpu
def test_select_gpus_before_cuda_starts_takes_effect():
    out = _in_a_fresh_process(_BEFORE_START)
    assert out == {"chosen": ["0"], "n": 1, "found": {"cuda-visible-devices": ["ok", "CUDA_VISIBLE_DEVICES '0'"]}}


class CollectingImages(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        if torch.utils.data.get_worker_info() is not None:
            gc.collect()  # what any allocation in a worker may set off
        return torch.full((3, 8, 8), i, dtype=torch.uint8), i


@pytest.mark.gpu
def test_workers_fork_safely_while_cuda_batches_wait_in_garbage_cycles():
    gc.disable()  # the cycle below stays uncollected until the workers have forked
    try:
        source = DataLoader(Distinct(), batch_size=8, pin_memory=True)
        batch = next(iter(CUDAPrefetcher(source, "cuda", mean=MEAN, std=STD)))  # record_stream'ed tensors
        cycle = [batch]
        cycle.append(cycle)
        del cycle, batch
        got = list(create_loader(CollectingImages(), 4, train=False, num_workers=2, device="cuda",
                                 multiprocessing_context="fork"))  # fmt: skip
    finally:
        gc.enable()
    assert [t.cpu().tolist() for _, t in got] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    torch.testing.assert_close(got[1][0][0].cpu(), _expected(torch.full((1, 3, 8, 8), 4, dtype=torch.uint8))[0])


@pytest.mark.gpu
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_transform_changed_between_epochs_reaches_the_workers_on_the_cuda_path(class_folder, context):
    # progressive resizing with the batches normalised on the GPU: the persistent workers restart
    # with the new transform, and each epoch's batches equal the CPU path's for the same seed
    ds = open_dataset(class_folder, transform=train_pipeline(16))
    kw = dict(num_workers=2, seed=0, multiprocessing_context=context)
    gpu, cpu = create_loader(ds, 4, device="cuda", **kw), create_loader(ds, 4, device="cpu", **kw)
    for size in (16, 8, 12):
        if size != 16:
            ds.transform = train_pipeline(size)
        got, want = list(gpu), list(cpu)
        assert len(got) == len(want) == 3
        for (g, gl), (c, cl) in zip(got, want):
            assert g.is_cuda and g.dtype == torch.float32 and g.shape == (4, 3, size, size)
            torch.testing.assert_close(g.cpu(), c, atol=1e-5, rtol=1e-5)
            assert torch.equal(gl.cpu(), cl)
    gpu.close()
    cpu.close()


@pytest.mark.gpu
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_the_pipelines_own_statistics_normalise_on_the_gpu_as_on_the_cpu(class_folder, context):
    # train_pipeline(mean=, std=) with the uint8 default: the prefetcher normalises with the pipeline's statistics
    # (not ImageNet's), equal to the CPU path's batches; a pipeline of other statistics set between epochs is refused
    ds = open_dataset(class_folder, transform=train_pipeline(16, mean=[0.5] * 3, std=[0.25] * 3))
    kw = dict(num_workers=2, seed=0, multiprocessing_context=context)
    gpu, cpu = create_loader(ds, 4, device="cuda", **kw), create_loader(ds, 4, device="cpu", **kw)
    raw = list(create_loader(ds, 4, **kw))
    got, want = list(gpu), list(cpu)
    assert len(got) == len(want) == len(raw) == 3
    for (g, gl), (c, cl), (r, _) in zip(got, want, raw):
        assert g.is_cuda and g.dtype == torch.float32 and g.shape == (4, 3, 16, 16)
        torch.testing.assert_close(g.cpu(), c, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(g.cpu(), (r.float() / 255 - 0.5) / 0.25, atol=1e-5, rtol=1e-5)
        assert torch.equal(gl.cpu(), cl)
    ds.transform = train_pipeline(16)
    with pytest.raises(UsageError, match=r"^epoch 1: the dataset's pipeline now gives mean=\[0\.485, 0\.456, 0\.406\]"):
        list(gpu)
    gpu.close()
    cpu.close()
