"""CUDAPrefetcher: drops in for the loader it wraps, passes batches through without CUDA, and
converts uint8 images (checked here on CPU tensors; the GPU path is marked ``gpu``)."""

from __future__ import annotations

import collections

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from datakit.loader import create_loader
from datakit.prefetch import CUDAPrefetcher


class Indexed(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return torch.full((3, 2, 2), i, dtype=torch.uint8), i


def test_forwards_the_loader_attributes():
    loader = create_loader(Indexed(7), 2, num_workers=0, train=False)
    pre = CUDAPrefetcher(loader, "cpu")
    assert len(pre) == 4 == len(loader)
    assert pre.dataset is loader.dataset and pre.sampler is loader.sampler and pre.batch_size == 2
    # a plain DataLoader too, and a missing attribute names itself
    plain = DataLoader(Indexed(5), batch_size=5)
    pre = CUDAPrefetcher(plain, "cpu")
    assert (len(pre), pre.batch_size, pre.dataset) == (1, 5, plain.dataset)
    with pytest.raises(AttributeError, match="no_such_thing"):
        pre.no_such_thing  # noqa: B018


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_without_cuda_batches_pass_through_unchanged(device: str):
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the pass-through is what happens without it")
    loader = create_loader(Indexed(6), 2, num_workers=0, train=False)
    pre = CUDAPrefetcher(loader, device, mean=[0.5] * 3, std=[0.5] * 3)
    assert not pre.enabled and pre.stream is None
    got = list(pre)
    assert [b[1].tolist() for b in got] == [[0, 1], [2, 3], [4, 5]]
    assert got[0][0].dtype == torch.uint8 and got[0][0].device.type == "cpu"  # not converted: passed through
    assert [b[1].tolist() for b in pre] == [[0, 1], [2, 3], [4, 5]]  # iterable again, like a loader


def test_with_workers_without_cuda():
    loader = create_loader(Indexed(8), 4, num_workers=2, train=False)
    assert [b[1].tolist() for b in CUDAPrefetcher(loader, "cpu")] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_mean_and_std_go_together():
    with pytest.raises(ValueError, match=r"^give both mean and std, or neither$"):
        CUDAPrefetcher([], "cpu", mean=[0.5])
    with pytest.raises(ValueError, match=r"^give both mean and std, or neither$"):
        CUDAPrefetcher([], "cpu", std=[0.5])


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
