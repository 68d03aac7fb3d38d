from __future__ import annotations

import re
import sys

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from datakit.collate import detection_collate, pad_collate, stack_collate
from datakit.datasets import open_dataset


def test_stack_collate_same_size_uint8():
    batch = [(np.full((4, 5, 3), i, np.uint8), i) for i in range(3)]
    images, targets = stack_collate(batch)
    assert images.dtype == torch.uint8 and images.shape == (3, 4, 5, 3) and targets.tolist() == [0, 1, 2]


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("workers", [0, 2])
def test_stack_collate_chw_views_of_hwc_pixels(dtype, workers):
    rng = np.random.default_rng(0)
    hwc = [rng.integers(0, 256, (7, 5, c)).astype(dtype) for c in (3, 3, 3)]
    views = [torch.from_numpy(x).permute(2, 0, 1) for x in hwc]  # what the pipelines return
    expected = torch.stack([v.contiguous() for v in views])

    class Views(torch.utils.data.Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return views[i], i

    images, targets = next(iter(DataLoader(Views(), batch_size=3, num_workers=workers, collate_fn=stack_collate)))
    assert images.is_contiguous() and images.shape == (3, 3, 7, 5) and images.dtype == expected.dtype
    assert torch.equal(images, expected) and targets.tolist() == [0, 1, 2]
    # a 4-channel view and a plain CHW tensor in one batch still stack exactly
    mixed = [torch.from_numpy(np.ones((7, 5, 4), dtype)).permute(2, 0, 1), torch.zeros(4, 7, 5, dtype=expected.dtype)]
    out, _ = stack_collate([(mixed[0], 0), (mixed[1], 1)])
    assert out[0].sum().item() == 4 * 7 * 5 and out[1].sum().item() == 0


def test_stack_collate_names_mismatched_samples():
    batch = [(np.zeros((4, 5, 3), np.uint8), 0), (np.zeros((4, 5, 3), np.uint8), 1), (np.zeros((6, 5, 3), np.uint8), 2)]
    with pytest.raises(ValueError) as e:
        stack_collate(batch)
    assert str(e.value) == (
        "cannot stack images of different sizes into one batch (samples 0, 1: (4, 5, 3); samples 2: (6, 5, 3)); "
        "resize them to one size in the transform, or batch them with datakit.collate.pad_collate()"
    )


def test_pad_collate_mixed_sizes(class_folder):
    ds = open_dataset(class_folder)
    loader = DataLoader(ds, batch_size=4, collate_fn=pad_collate(size_divisor=32))
    images, targets, sizes, mask = next(iter(loader))
    assert images.shape == (4, 3, 64, 96) and images.dtype == torch.uint8
    assert sizes.tolist() == [[40, 60], [50, 50], [64, 48], [30, 70]]
    for i, (h, w) in enumerate(sizes.tolist()):
        assert torch.equal(images[i, :, :h, :w], torch.from_numpy(ds[i][0]).permute(2, 0, 1))
        assert mask[i].sum() == h * w and mask[i, :h, :w].all()
        assert (images[i, :, h:, :] == 0).all()
    assert targets.tolist() == [0, 0, 0, 0]


def test_detection_collate_boxes_stay_valid():
    a = torch.zeros(3, 20, 30, dtype=torch.uint8)
    a[:, 5:10, 6:12] = 200
    b = torch.zeros(3, 40, 10, dtype=torch.uint8)
    batch = [
        (a, {"boxes": [[6, 5, 12, 10]], "labels": [3], "scale": 0.5}),
        (b, {"boxes": torch.zeros(0, 4), "labels": []}),
    ]
    images, targets = detection_collate(size_divisor=16)(batch)
    assert images.shape == (2, 3, 48, 32)
    x1, y1, x2, y2 = targets[0]["boxes"][0].int().tolist()
    assert (images[0, :, y1:y2, x1:x2] == 200).all()
    assert targets[0]["img_size"].tolist() == [20, 30] and targets[0]["pad_size"].tolist() == [48, 32]
    assert targets[0]["scale"] == 0.5 and targets[0]["labels"].dtype == torch.int64
    assert targets[1]["boxes"].shape == (0, 4)
    with pytest.raises(ValueError, match="sample 0 target must be a dict with 'boxes'"):
        detection_collate()([(a, 1)])


def _resident_pages(t: torch.Tensor) -> tuple[int, int]:
    """(resident, total) pages of a tensor's memory, from mincore(2)."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    addr, n = t.data_ptr(), t.numel() * t.element_size()
    pages = -(-n // mmap.PAGESIZE)
    vec = (ctypes.c_ubyte * pages)()
    assert libc.mincore(addr, pages * mmap.PAGESIZE, vec) == 0, ctypes.get_errno()
    return sum(v & 1 for v in vec), pages


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_POPULATE_WRITE is Linux's")
def test_a_fresh_shared_batch_is_populated_in_one_call_and_left_as_it_was(monkeypatch):
    import platform

    from datakit import collate

    if tuple(int(x) for x in re.findall(r"\d+", platform.release())[:2]) < (5, 14):
        pytest.skip("MADV_POPULATE_WRITE needs Linux 5.14")
    fresh = torch.empty(0, dtype=torch.uint8)
    out = fresh.new(fresh._typed_storage()._new_shared(8 * 3 * 224 * 224, device=fresh.device)).resize_(8, 3, 224, 224)
    resident, pages = _resident_pages(out)
    assert resident <= 1 and pages == 294  # nothing backs it until it is written (but a page the allocator touched)
    collate._prefault(out)
    assert _resident_pages(out) == (294, 294)
    assert int(out.sum()) == 0  # backed, not written
    monkeypatch.setattr(collate, "_madvise", False)  # no madvise (another OS): nothing happens, nothing breaks
    other = fresh.new(fresh._typed_storage()._new_shared(out.numel(), device=fresh.device))
    collate._prefault(other)
    assert _resident_pages(other)[0] <= 1
