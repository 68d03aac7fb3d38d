from __future__ import annotations

import re
import sys

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from datakit.collate import CollateError, detection_collate, pad_collate, stack_collate
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


@pytest.mark.parametrize("workers", [0, 2])
def test_stack_collate_views_mixed_with_chw_tensors(workers):
    # what train_pipeline gives: most crops CHW views of HWC pixels, those shrunk 2x or more plain
    # CHW tensors (contiguous, or flipped), and a user's own strided tensor among them
    rng = np.random.default_rng(1)
    hwc = [rng.integers(0, 256, (6, 9, 3), dtype=np.uint8) for _ in range(5)]
    samples = [
        torch.from_numpy(hwc[0]).permute(2, 0, 1),
        torch.from_numpy(np.ascontiguousarray(hwc[1].transpose(2, 0, 1))),
        torch.flip(torch.from_numpy(hwc[2]).permute(2, 0, 1).contiguous(), [2]),
        torch.from_numpy(hwc[3]).permute(2, 0, 1),
        torch.from_numpy(np.ascontiguousarray(hwc[4].transpose(2, 1, 0))).transpose(1, 2),  # C x W x H, transposed
    ]
    expected = torch.stack([s.contiguous() for s in samples])

    class Mixed(torch.utils.data.Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return samples[i], i

    images, targets = next(iter(DataLoader(Mixed(), batch_size=5, num_workers=workers, collate_fn=stack_collate)))
    assert images.shape == (5, 3, 6, 9) and images.is_contiguous() and targets.tolist() == [0, 1, 2, 3, 4]
    assert torch.equal(images, expected)


def test_stack_collate_names_mismatched_samples():
    # called by a plain DataLoader, the collate function knows positions in the batch only, and says so
    batch = [(np.zeros((4, 5, 3), np.uint8), 0), (np.zeros((4, 5, 3), np.uint8), 1), (np.zeros((6, 5, 3), np.uint8), 2)]
    want = (
        "cannot stack images of different sizes into one batch (batch positions 0, 1: (4, 5, 3); batch position 2: "
        "(6, 5, 3)); resize them to one size in the transform, or batch them with datakit.collate.pad_collate()"
    )
    with pytest.raises(CollateError) as e:
        stack_collate(batch)
    assert str(e.value) == want and isinstance(e.value, ValueError)

    class Mixed(torch.utils.data.Dataset):
        def __len__(self):
            return 6

        def __getitem__(self, i):
            return batch[i - 3] if i >= 3 else (np.zeros((1, 1, 3), np.uint8), i)

    for workers in (0, 2):
        loader = DataLoader(Mixed(), batch_size=3, num_workers=workers, collate_fn=stack_collate)
        with pytest.raises(CollateError) as e:
            list(loader)
        if workers:  # torch's DataLoader: behind the worker's traceback
            assert str(e.value).endswith(f"CollateError: {want}\n")
        else:
            assert str(e.value) == want
    many = [(np.zeros((2, 2, 3), np.uint8), i) for i in range(8)] + [(np.zeros((3, 2, 3), np.uint8), 8)]
    with pytest.raises(
        CollateError, match=r"\(batch positions 0, 1, 2, 3, 4, 5, \.\.\.: \(2, 2, 3\); batch position 8: "
    ):
        stack_collate(many)


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
    with pytest.raises(CollateError, match="batch position 0 target must be a dict with 'boxes', got int$"):
        detection_collate()([(a, 1)])


@pytest.mark.parametrize(
    "target, why",
    [
        ({"boxes": [[0, 0, 1, 1]], "labels": ["cat"]}, "labels must be class indices (whole numbers), got ['cat']"),
        (
            {"boxes": [[0, 0, 1, 1]], "labels": [True]},
            "labels must be class indices (whole numbers, 0 or more), got [True]",
        ),  # fmt: skip
        (
            {"boxes": [[0, 0, 1, 1]], "labels": [-1]},
            "labels must be class indices (whole numbers, 0 or more), got [-1]",
        ),  # fmt: skip
        ({"labels": [1]}, "target has no 'boxes' (its keys: 'labels')"),
        # inf and 2.0**70 cast to int64 came out -9223372036854775808: a negative class, without a word
        ({"boxes": [[0, 0, 1, 1]], "labels": [float("inf")]}, "labels must be class indices (whole numbers), got [inf]"),
        ({"boxes": [[0, 0, 1, 1]], "labels": [2.0**70]},
         "labels must be class indices (whole numbers), got [1.1805916207174113e+21]"),
        ({"boxes": "abc"}, "boxes must be N x 4 numbers (x1, y1, x2, y2), got 'abc'"),  # torch's bare TypeError
        # NaN and inf boxes passed, while such labels were refused: a NaN loss some steps later
        ({"boxes": [[0, 0, float("nan"), float("inf")]]},
         "boxes must be finite numbers (x1, y1, x2, y2), got [[0.0, 0.0, nan, inf]]"),
    ],
)  # fmt: skip
def test_detection_collate_names_labels_that_are_no_class_indices(target, why):
    # The attacks: labels=['cat'] gave numpy's bare "too many dimensions 'str'", True became class 1 and -1 a class,
    # a dict without boxes was "a dict with 'boxes', got <class 'dict'>".
    img = torch.zeros(3, 8, 8, dtype=torch.uint8)
    with pytest.raises(CollateError) as e:
        detection_collate()([(img, {"boxes": [], "labels": []}), (img, target)])
    assert str(e.value) == f"detection_collate: batch position 1 {why}"


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


class _Numbered(torch.utils.data.Dataset):
    """Sample i: a CHW view of HWC pixels all equal to i % 251 (what the pipelines return)."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        return torch.from_numpy(np.full((8, 6, 3), i % 251, np.uint8)).permute(2, 0, 1), i


def _expected(targets: torch.Tensor) -> torch.Tensor:
    return (targets % 251).to(torch.uint8)[:, None, None, None].expand(-1, 3, 8, 6)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_batch_slots_are_used_again_and_never_under_a_batch_still_held(context):
    import datakit.collate as collate
    from datakit.loader import create_loader

    loader = create_loader(_Numbered(), 4, num_workers=2, seed=0, multiprocessing_context=context)
    held, arrays, views, addresses = [], [], [], set()
    for epoch in range(3):
        for k, (images, targets) in enumerate(loader):
            assert torch.equal(images, _expected(targets))
            addresses.add(images.data_ptr())
            if epoch == 1 and k < 3:
                held.append((images, targets))  # the tensor itself
            elif epoch == 1 and k < 6:
                arrays.append((images.numpy(), targets))  # an array over it, the tensor dropped
            elif epoch == 1 and k < 8:
                views.append((images[1:3, 2], targets[1:3]))  # a view of part of it
    # 30 batches through at most 2 x (4 + 2) slots, 8 of them kept: the rest went round again
    assert len(addresses) <= 12 + 8 and len(collate._SLOT_FLAGS) == 2
    for images, targets in held:
        assert torch.equal(images, _expected(targets))
    for array, targets in arrays:
        assert np.array_equal(array, _expected(targets).numpy())
    for view, targets in views:
        assert torch.equal(view, _expected(targets)[:, 2])
    pids = {pid for _, pid in collate._SLOT_FLAGS.values()}
    loader.close()  # its workers stop: their slots are mapped here no longer
    assert len(pids) == 2 and not any(pid in pids for _, pid in collate._SLOT_FLAGS.values())
    assert not collate._SLOT_STORAGES
    for images, targets in held:  # the batches still held keep their memory
        assert torch.equal(images, _expected(targets))


def test_batch_slots_left_alone_when_the_collate_also_returns_a_view_of_the_batch():
    from datakit.loader import create_loader

    def with_first(batch):
        images, targets = stack_collate(batch)
        return images, targets, images[0]  # a second way to reach the slot's memory

    loader = create_loader(_Numbered(), 4, num_workers=2, seed=0, collate_fn=with_first)
    kept = []
    for _ in range(3):
        for _images, targets, first in loader:
            kept.append((first, targets))  # the view kept, the batch dropped
    assert len(kept) == 30
    for first, targets in kept:
        assert torch.equal(first, _expected(targets)[0])
    loader.close()


def test_stack_collate_promotes_mixed_dtypes_instead_of_casting_into_the_first():
    # The attack: a uint8 sample first, then an int32 one holding 1000: the batch took the first's
    # dtype and the 1000 came out as 232; float64 after float32 lost its digits.
    ints = stack_collate([(np.zeros((1, 2, 2), np.uint8), 0), (torch.full((1, 2, 2), 1000, dtype=torch.int32), 1)])
    assert ints[0].dtype == torch.int32 and ints[0][:, 0, 0, 0].tolist() == [0, 1000]
    floats = stack_collate([(torch.ones(1, 2, 2), 0), (np.full((1, 2, 2), 1 + 1e-9), 1)])
    assert floats[0].dtype == torch.float64 and floats[0][1, 0, 0, 0].item() == 1 + 1e-9
    mixed = stack_collate([(torch.ones(1, 2, 2), 0), (np.zeros((1, 2, 2), np.uint8), 1)])  # a tensor, then an array
    assert mixed[0].dtype == torch.float32 and mixed[0][:, 0, 0, 0].tolist() == [1.0, 0.0]
    with pytest.raises(ValueError) as e:
        stack_collate(
            [(np.zeros((2, 2), np.uint8), 0), (np.zeros((2, 2), np.uint16), 1), (np.zeros((2, 2), np.uint8), 2)]
        )
    assert str(e.value) == ("cannot stack images of dtypes torch does not promote into one batch (batch positions 0, 2: "
                            "uint8; batch position 1: uint16); convert them to one dtype in the transform")  # fmt: skip


def test_pad_collate_never_changes_values_silently():
    # The attack: a uint8 image then a float one of 0.5s gave a uint8 batch of zeros; pad_value=-1
    # padded uint8 with 255; bare (3, 4, 5) tensors were split into image channel 0 and "targets".
    collate = pad_collate(size_divisor=4)
    images, targets, sizes, mask = collate([(np.zeros((2, 2, 1), np.uint8), 0), (torch.full((1, 3, 3), 0.5), 1)])
    assert images.dtype == torch.float32 and images[1, 0, :3, :3].flatten().tolist() == [0.5] * 9
    assert targets.tolist() == [0, 1] and sizes.tolist() == [[2, 2], [3, 3]] and images.shape == (2, 1, 4, 4)
    with pytest.raises(ValueError) as e:
        pad_collate(pad_value=-1)([(np.zeros((2, 2, 3), np.uint8), 0)])
    assert (
        str(e.value)
        == "pad_value=-1 does not fit uint8 images (0..255, whole numbers): it would be written as another value"
    )
    bare = pad_collate(size_divisor=1)([torch.ones(3, 4, 5), torch.ones(3, 2, 2)])
    assert bare[0].shape == (2, 3, 4, 5) and bare[1] is None and bare[2].tolist() == [[4, 5], [2, 2]]
    with pytest.raises(ValueError) as e:
        pad_collate()([])
    assert str(e.value) == "cannot pad an empty batch: the dataset or sampler gave no samples"


def test_pad_collate_names_the_samples_of_each_channel_count_and_kind():
    # before: "different channel counts: [1, 3]", naming no sample; bare images among pairs, none either
    collate = pad_collate(size_divisor=1)
    with pytest.raises(CollateError) as e:
        collate([(np.zeros((2, 2, 3), np.uint8), 0), (np.zeros((2, 2), np.uint8), 1), (torch.zeros(3, 2, 2), 2)])
    assert str(e.value) == ("cannot pad images with different channel counts into one batch (batch positions 0, 2: "
                            "3 channels; batch position 1: 1 channel; arrays are read H x W x C, tensors C x H x W)")  # fmt: skip
    with pytest.raises(CollateError) as e:
        collate([(torch.zeros(3, 2, 2), 0), torch.zeros(3, 2, 2)])
    assert str(e.value) == ("pad_collate: samples mix bare images and (image, target) pairs (batch position 0: a pair; "
                            "batch position 1: a bare image)")  # fmt: skip


def test_detection_collate_refuses_boxes_and_labels_it_would_reshape():
    # The attack: 4 boxes with a score column became 5 wrong boxes, 2x2 corner points one box, a label 1.7 class 1.
    img = torch.zeros(3, 8, 8, dtype=torch.uint8)
    collate = detection_collate()
    for boxes, shape in ((torch.ones(4, 5), (4, 5)), (torch.ones(2, 2), (2, 2))):
        with pytest.raises(ValueError) as e:
            collate([(img, {"boxes": boxes})])
        assert (
            str(e.value)
            == f"detection_collate: batch position 0 boxes must be N x 4 (x1, y1, x2, y2), got shape {shape}"
        )
    with pytest.raises(ValueError) as e:
        collate(
            [(img, {"boxes": torch.ones(2, 4), "labels": [1, 2]}), (img, {"boxes": [[0, 0, 1, 1]], "labels": [1.7]})]
        )
    assert (
        str(e.value)
        == "detection_collate: batch position 1 labels must be class indices (whole numbers), got [1.7000000476837158]"
    )
    with pytest.raises(ValueError, match=r"^detection_collate: batch position 0 has 2 boxes and 1 labels$"):
        collate([(img, {"boxes": torch.ones(2, 4), "labels": [1]})])
    _, targets = collate([(img, {"boxes": [], "labels": []}), (img, {"boxes": [[0, 0, 1, 1]], "labels": [3.0]})])
    assert targets[0]["boxes"].shape == (0, 4) and targets[1]["labels"].tolist() == [3]


def _pad_batch(kind: str, images: list) -> list:
    if kind == "bare":
        return images
    if kind == "detection":
        return [(x, {"boxes": [[0, 0, 1, 1]], "labels": [i]}) for i, x in enumerate(images)]
    return [(x, i) for i, x in enumerate(images)]


PADDERS = {"pad": pad_collate(size_divisor=4), "bare": pad_collate(size_divisor=4), "detection": detection_collate(4)}


@pytest.mark.parametrize("kind", PADDERS)
def test_pad_and_detection_collate_refuse_dtypes_torch_does_not_promote_naming_the_samples(kind):
    # before: torch's own "RuntimeError: Promotion for uint16, uint32, uint64 types is not supported,
    # attempted to promote Byte and UInt16", naming no sample
    images = [np.zeros((2, 2, 3), np.uint16), np.zeros((3, 3, 3), np.uint8), torch.zeros(3, 2, 3, dtype=torch.uint16)]
    with pytest.raises(ValueError) as e:
        PADDERS[kind](_pad_batch(kind, images))
    assert str(e.value) == ("cannot pad images of dtypes torch does not promote into one batch (batch positions 0, 2: "
                            "uint16; batch position 1: uint8); convert them to one dtype in the transform")  # fmt: skip


@pytest.mark.parametrize("kind", PADDERS)
def test_pad_and_detection_collate_promote_mixed_dtypes_as_stack_collate_does(kind):
    cases = [  # (first, second, the batch's dtype): torch's promotion, never the first sample's dtype
        (np.full((2, 2, 1), 200, np.uint8), torch.full((1, 3, 3), 0.5), torch.float32),
        (np.full((2, 2, 1), 200, np.uint8), np.full((3, 3, 1), 1000, np.int32), torch.int32),
        (np.full((2, 2, 1), 60000, np.uint16), np.full((3, 3, 1), 0.5, np.float32), torch.float32),
    ]
    for first, second, dtype in cases:
        out = PADDERS[kind](_pad_batch(kind, [first, second]))
        images = out[0]
        want = [float(np.asarray(first).flat[0]), float(np.asarray(second).flat[0])]
        assert images.dtype == dtype and images.shape == (2, 1, 4, 4)
        assert [images[0, 0, 0, 0].item(), images[1, 0, 2, 2].item()] == want
        assert images[0, 0, 2:, :].eq(0).all()  # the padding
    # whatever the samples' order (torch.stack promotes pairwise: uint16 then uint8 fails before the float comes)
    three = [np.full((2, 2, 1), v, t) for v, t in ((60000, np.uint16), (7, np.uint8), (0.5, np.float32))]
    for order in ([0, 1, 2], [2, 0, 1], [1, 2, 0]):
        padded = PADDERS[kind](_pad_batch(kind, [three[k] for k in order]))[0]
        stacked = stack_collate([(three[k], k) for k in order])[0]
        assert padded.dtype == stacked.dtype == torch.float32
        assert padded[:, 0, 0, 0].tolist() == stacked[:, 0, 0, 0].tolist() == [[60000.0, 7.0, 0.5][k] for k in order]
    # stack_collate and the padders say the same of the same dtypes
    with pytest.raises(ValueError, match=r"^cannot stack images of dtypes torch does not promote into one batch \("):
        stack_collate([(np.zeros((2, 2), np.uint16), 0), (np.zeros((2, 2), np.uint8), 1)])


def test_more_than_four_sizes_in_a_batch_are_counted_not_dropped_from_the_message():
    # the attack: a batch of five sizes named four and said nothing of the fifth
    batch = [(torch.zeros(3, s, s, dtype=torch.uint8), 0) for s in (10, 20, 30, 40, 50, 60, 60)]
    with pytest.raises(CollateError) as e:
        stack_collate(batch)
    assert str(e.value) == (
        "cannot stack images of different sizes into one batch (batch position 0: (3, 10, 10); batch position 1: "
        "(3, 20, 20); batch position 2: (3, 30, 30); batch position 3: (3, 40, 40); and 3 more samples of 2 other "
        "sizes); resize them to one size in the transform, or batch them with datakit.collate.pad_collate()"
    )
    with pytest.raises(CollateError, match=r"; and 1 more sample of 1 other size\); resize them"):
        stack_collate(batch[:5])


def test_images_of_different_channel_counts_are_said_to_differ_in_channels():
    # the attack: gray, RGB and RGBA files read with mode="unchanged": "resize them to one size ..., or batch them
    # with pad_collate()", two fixes of which neither helps (pad_collate refuses other channel counts too)
    batch = [(torch.zeros(c, 8, 8, dtype=torch.uint8), 0) for c in (3, 3, 1, 4)]
    with pytest.raises(CollateError) as e:
        stack_collate(batch)
    assert str(e.value) == (
        "cannot stack images of 1, 3 and 4 channels into one batch (batch positions 0, 1: (3, 8, 8); batch position "
        "2: (1, 8, 8); batch position 3: (4, 8, 8)); open the dataset with mode='rgb' (or 'gray') so that every image "
        "has the same channels, or convert them in the transform"
    )
    with pytest.raises(CollateError, match=r"^cannot stack images of 3 and 4 channels into one batch \(batch "):
        stack_collate([(np.zeros((5, 5, c), np.uint8), 0) for c in (3, 4)])  # H x W x C arrays: the last dimension
    # a C x H x W tensor beside an H x W x C array, both of 3 channels: "of 3 and 4 channels" named a count neither
    # has, and its advice (mode='rgb') could not help
    with pytest.raises(CollateError) as e:
        stack_collate([(torch.zeros(3, 4, 4, dtype=torch.uint8), 1), (np.zeros((4, 4, 3), np.uint8), 2)])
    assert str(e.value) == (
        "cannot stack images given as tensors beside NumPy arrays into one batch (batch position 0: tensor (3, 4, 4); "
        "batch position 1: NumPy array (4, 4, 3)); a tensor is read as C x H x W and an array as H x W x C: give "
        "every sample the same transform"
    )
    # sizes that differ without a channel axis (gray), or an H x W x C tensor: the sizes are what differ
    with pytest.raises(CollateError, match=r"^cannot stack images of different sizes into one batch \(batch position 0: "
                       r"\(8, 8\); batch position 1: \(9, 9\)\); resize"):  # fmt: skip
        stack_collate([(torch.zeros(8, 8, dtype=torch.uint8), 1), (np.zeros((9, 9), np.uint8), 2)])
    with pytest.raises(CollateError, match=r"^cannot stack images of different sizes into one batch"):
        stack_collate([(torch.zeros(8, 8, 3, dtype=torch.uint8), 1), (np.zeros((9, 9, 3), np.uint8), 2)])


def test_bare_and_dict_samples_of_different_sizes_are_refused_naming_them():
    # the attack: samples that are an image alone, or a dict, fell through to default_collate's RuntimeError
    # ("stack expects each tensor to be equal size ... at entry 0 and ... at entry 5")
    images = [torch.zeros(3, 8, 8, dtype=torch.uint8) for _ in range(6)]
    images[5] = torch.zeros(3, 9, 8, dtype=torch.uint8)
    with pytest.raises(CollateError) as e:
        stack_collate(images)
    assert str(e.value) == (
        "cannot stack images of different sizes into one batch (batch positions 0, 1, 2, 3, 4: (3, 8, 8); batch "
        "position 5: (3, 9, 8)); resize them to one size in the transform, or batch them with "
        "datakit.collate.pad_collate()"
    )
    with pytest.raises(CollateError) as e:
        stack_collate([{"image": x, "label": i} for i, x in enumerate(images)])
    assert str(e.value).startswith(
        "cannot stack 'image' of different sizes into one batch (batch positions 0, 1, 2, 3, 4: (3, 8, 8); batch "
        "position 5: (3, 9, 8)); "
    )
    same = [torch.full((3, 2, 2), i, dtype=torch.uint8) for i in range(3)]
    assert torch.equal(stack_collate(same), torch.stack(same))
    got = stack_collate([{"image": x, "label": i} for i, x in enumerate(same)])
    assert torch.equal(got["image"], torch.stack(same)) and got["label"].tolist() == [0, 1, 2]


def test_the_padding_collate_factories_given_uncalled_say_so():
    # the attack: collate_fn=pad_collate, as stack_collate is passed; the batch arrived as size_divisor and a
    # worker raised "'<' not supported between instances of 'list' and 'int'"
    from datakit.loader import create_loader

    data = [(torch.zeros(3, 4, 4), 0)] * 4
    for factory in (pad_collate, detection_collate):
        name = factory.__name__
        with pytest.raises(TypeError) as e:
            next(iter(DataLoader(data, batch_size=2, collate_fn=factory)))
        assert (
            str(e.value) == f"{name} makes a collate function: pass collate_fn={name}() (with its options), not {name}"
        )
        with pytest.raises(ValueError) as e:
            create_loader(data, 2, num_workers=0, collate_fn=factory)
        assert (
            str(e.value) == f"collate_fn={name} makes a collate function: pass collate_fn={name}() (with its options)"
        )
        with pytest.raises(ValueError) as e:
            factory(0)
        assert str(e.value) == "size_divisor must be a whole number of at least 1, got 0"
    assert repr(pad_collate(16)) == "pad_collate(size_divisor=16, pad_value=0)"


def test_targets_default_collate_refuses_are_named_by_sample():
    # the attack: masks (or lists, or a third field) of different sizes: torch's RuntimeError named "entry 0"
    # and "entry 2" of something, with no word of which field
    img = torch.zeros(3, 4, 4)
    masks = [(img, torch.zeros(4, 4)), (img, torch.zeros(4, 4)), (img, torch.zeros(5, 4))]
    with pytest.raises(CollateError) as e:
        stack_collate(masks)
    assert str(e.value).startswith(
        "cannot stack target of different sizes into one batch (batch positions 0, 1: (4, 4); batch position 2: (5, 4))"
    )
    dicts = [(img, {"mask": torch.zeros(4, 4), "label": 1}), (img, {"mask": torch.zeros(4, 5), "label": 2})]
    with pytest.raises(CollateError) as e:
        stack_collate(dicts)
    assert str(e.value).startswith("cannot stack target['mask'] of different sizes into one batch (batch position 0: "
                                   "(4, 4); batch position 1: (4, 5))")  # fmt: skip
    lists = [(img, [1, 2]), (img, [1, 2, 3])]
    with pytest.raises(CollateError) as e:
        stack_collate(lists)
    assert str(e.value) == ("cannot batch targets of different lengths (batch position 0: 2; batch position 1: 3); "
                            "a collate function of your own can keep them as lists")  # fmt: skip
    with pytest.raises(CollateError, match="^cannot batch None: batch position 1 "):  # torch's bare dtype error before
        stack_collate([(img, 1), (img, None)])
    from datakit.loader import create_loader

    with pytest.raises(CollateError) as e:
        list(create_loader(masks * 2, 6, num_workers=0, train=False))
    assert str(e.value).startswith("cannot stack target of different sizes into one batch (samples 0, 1, 3, 4: (4, 4); "
                                   "samples 2, 5: (5, 4))")  # fmt: skip


def test_pad_collate_names_the_targets_it_cannot_batch_and_refuses_a_nan_pad():
    # The attacks: targets of different lengths gave torch's bare "each element in list of batch should be of equal
    # size"; pad_value=nan on uint8 images gave "cannot convert float NaN to integer".
    small, tall = torch.zeros(3, 4, 5, dtype=torch.uint8), torch.zeros(3, 6, 5, dtype=torch.uint8)
    with pytest.raises(CollateError) as e:
        pad_collate()([(small, torch.tensor([1, 2])), (tall, torch.tensor([1]))])
    assert str(e.value) == ("cannot stack target of different sizes into one batch (batch position 0: (2,); batch "
                            "position 1: (1,)); a collate function of your own can pad them or keep them as lists")  # fmt: skip
    with pytest.raises(CollateError) as e:
        pad_collate()([(small, [1, 2]), (tall, [1])])
    assert str(e.value) == ("cannot batch targets of different lengths (batch position 0: 2; batch position 1: 1); "
                            "a collate function of your own can keep them as lists")  # fmt: skip
    images, targets, sizes, _ = pad_collate()([(small, 3), (tall, 4)])
    assert images.shape == (2, 3, 32, 32) and targets.tolist() == [3, 4] and sizes.tolist() == [[4, 5], [6, 5]]
    with pytest.raises(ValueError) as e:
        pad_collate(pad_value=float("nan"))([(small, 3), (tall, 4)])
    assert str(e.value) == ("pad_value=nan does not fit uint8 images (0..255, whole numbers): it would be written as "
                            "another value")  # fmt: skip


@pytest.mark.parametrize("make", [pad_collate, detection_collate])
def test_dict_samples_are_named_not_a_key_error(make):
    # The attack: pad_collate() on {"image": ..., "label": ...} samples raised a bare KeyError: 0.
    name = make.__name__
    takes = "(image, target) pairs or bare images" if make is pad_collate else "(image, target) pairs"
    batch = [{"image": torch.zeros(3, 4, 4, dtype=torch.uint8), "label": 0},
             {"image": torch.zeros(3, 5, 5, dtype=torch.uint8), "label": 1}]  # fmt: skip
    with pytest.raises(CollateError) as e:
        make()(batch)
    assert str(e.value) == (f"{name}: batch position 0 is a dict; {name} takes {takes}: return them from the "
                            "dataset (for a dict, (sample['image'], sample['label']))")  # fmt: skip


def test_detection_collate_refuses_boxes_of_another_format_and_pad_collate_chw_arrays():
    # the attacks: torchvision BoundingBoxes in CXCYWH came out a plain tensor, read as (x1, y1, x2, y2) from then
    # on; two (3, 8, 9) arrays (C x H x W already) went through pad_collate as 9-channel images
    from torchvision import tv_tensors

    img = torch.zeros(3, 8, 8, dtype=torch.uint8)
    boxes = tv_tensors.BoundingBoxes([[4, 4, 2, 2]], format="CXCYWH", canvas_size=(8, 8))
    with pytest.raises(CollateError) as e:
        detection_collate()([(img, {"boxes": boxes, "labels": [1]})])
    assert str(e.value) == ("detection_collate: batch position 0 boxes are CXCYWH, and the batch gives (x1, y1, x2, "
                            "y2) with no format: convert them first (v2.ConvertBoundingBoxFormat('XYXY'))")  # fmt: skip
    xyxy = tv_tensors.BoundingBoxes([[2, 2, 6, 6]], format="XYXY", canvas_size=(8, 8))
    assert detection_collate()([(img, {"boxes": xyxy, "labels": [1]})])[1][0]["boxes"].tolist() == [[2, 2, 6, 6]]
    with pytest.raises(ValueError) as e:
        pad_collate()([(np.zeros((3, 8, 9), np.uint8), 0), (np.zeros((3, 8, 9), np.uint8), 1)])
    assert str(e.value) == ("pad_collate expects an H x W x C array, and (3, 8, 9) looks C x H x W already; pass it on "
                            "as it is (torch.from_numpy)")  # fmt: skip


def test_a_none_sample_or_target_is_named():
    # the attack: a dataset returning None for a sample it could not read: "'NoneType' object is not subscriptable"
    # from inside stack_collate, or torch's default_collate TypeError, naming no sample
    img = torch.zeros(3, 2, 2)
    for batch, where in (([(img, 1), None], "batch position 1"), ([(img, None), (img, 1)], "batch position 0")):
        with pytest.raises(CollateError) as e:
            stack_collate(batch)
        assert str(e.value) == (f"cannot batch None: {where} (a dataset that returns None for a sample it cannot "
                                "read? datakit's datasets take on_error=; or leave them out in a collate function "
                                "of your own)")  # fmt: skip


def test_integer_labels_of_any_type_come_out_int64_and_masks_keep_theirs():
    # the attack: a dataset returning NumPy int32 or uint8 labels gave int32 or uint8 label batches, and a uint8
    # target is no class index for cross_entropy; floats (regression targets) and arrays (masks) keep their type
    img = np.zeros((2, 2, 3), np.uint8)
    pad = pad_collate()
    for label in (np.int32(1), np.uint8(2), torch.tensor(3, dtype=torch.int16)):
        assert stack_collate([(img, label), (img, label)])[1].dtype == torch.int64
        assert pad([(img, label), (img, label)])[1].dtype == torch.int64  # before: pad_collate kept int32, uint8
    assert stack_collate([(img, np.float32(0.5))] * 2)[1].dtype == torch.float32
    assert pad([(img, np.float32(0.5))] * 2)[1].dtype == torch.float32
    assert stack_collate([(img, np.zeros((2, 2), np.uint8))] * 2)[1].dtype == torch.uint8
    assert pad([(img, np.zeros((2, 2), np.uint8))] * 2)[1].dtype == torch.uint8


class _Mixed(torch.utils.data.Dataset):
    """Two samples whose second fields differ in dtype: a uint8 mask, then an int64 one holding 300."""

    def __init__(self, as_dict: bool) -> None:
        self.as_dict = as_dict

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int):
        image = torch.zeros(3, 4, 4, dtype=torch.uint8)
        mask = torch.full((4, 4), 7, dtype=torch.uint8) if i == 0 else torch.full((4, 4), 300, dtype=torch.int64)
        label = np.int32(i + 1)
        return {"image": image, "mask": mask, "label": label} if self.as_dict else (image, mask, label)


@pytest.mark.parametrize("as_dict", [False, True])
@pytest.mark.parametrize("workers", [0, 1])
def test_fields_of_other_dtypes_are_promoted_in_workers_as_in_the_main_process(as_dict: bool, workers: int):
    # the attack: in a DataLoader worker default_collate stacks into shared memory of the first sample's dtype: a
    # uint8 mask then an int64 one of 300 came out uint8 44 with workers and int64 300 without; a dict's NumPy
    # int32 labels stayed int32, where cross_entropy wants int64
    batch = next(iter(DataLoader(_Mixed(as_dict), batch_size=2, num_workers=workers, collate_fn=stack_collate)))
    mask, label = (batch["mask"], batch["label"]) if as_dict else (batch[1], batch[2])
    assert mask.dtype == torch.int64 and mask[:, 0, 0].tolist() == [7, 300]
    assert label.dtype == torch.int64 and label.tolist() == [1, 2]


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_detection_labels_of_unsigned_dtypes_are_class_indices(dtype):
    # the attack: uint16/32/64 labels raised NotImplementedError ("lt_cpu" not implemented for 'UInt32')
    batch = [(torch.zeros(3, 4, 4, dtype=torch.uint8),
              {"boxes": torch.tensor([[0.0, 0.0, 1.0, 1.0]]), "labels": torch.tensor([3], dtype=dtype)})]  # fmt: skip
    labels = detection_collate()(batch)[1][0]["labels"]
    assert labels.dtype == torch.int64 and labels.tolist() == [3]


def test_arrays_viewed_backwards_batch_as_their_copies_do():
    # the attack: img[..., ::-1] (OpenCV's BGR-to-RGB idiom) or img[:, ::-1] (a mirror) in a transform: stack_collate,
    # create_loader's default, failed with torch's bare "At least one stride in the given numpy array is negative"
    a = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    mask = np.arange(20, dtype=np.int64).reshape(4, 5)
    images, labels, masks = stack_collate([(a[..., ::-1], 0, mask[:, ::-1]), (a[:, ::-1], 1, mask)])
    assert images.tolist() == [a[..., ::-1].tolist(), a[:, ::-1].tolist()]
    assert masks.tolist() == [mask[:, ::-1].tolist(), mask.tolist()] and labels.tolist() == [0, 1]
    bare = stack_collate([a[::-1], a])
    assert bare.tolist() == [a[::-1].tolist(), a.tolist()]
    padded = pad_collate()([(a[..., ::-1], 0), (a, 1)])[0]
    assert padded[0, :, :4, :5].tolist() == a[..., ::-1].transpose(2, 0, 1).tolist()


def test_uint64_labels_come_out_int64_and_one_past_its_range_is_refused():
    # the attack: NumPy uint64 labels gave a bare "TypeError: an integer is required" (uint32 worked)
    img = torch.zeros(3, 2, 2, dtype=torch.uint8)
    for collate in (stack_collate, pad_collate()):
        labels = collate([(img, np.uint64(1)), (img, np.uint64(2))])[1]
        assert labels.dtype == torch.int64 and labels.tolist() == [1, 2]
    with pytest.raises(CollateError) as e:
        stack_collate([(img, np.uint64(2**63)), (img, np.uint64(2))])
    assert str(e.value) == "cannot batch the label 9223372036854775808: past int64's range (class indices are int64)"


def test_an_empty_batch_and_none_are_named_by_every_collate_function():
    # the attacks: stack_collate([]) raised a bare IndexError; pad_collate and detection_collate given None (a
    # dataset that returns None for a sample it cannot read) raised "axes don't match array", naming nothing
    with pytest.raises(CollateError) as e:
        stack_collate([])
    assert str(e.value) == "cannot batch an empty list of samples: the dataset or sampler gave none"
    img = torch.zeros(3, 4, 4, dtype=torch.uint8)
    for collate in (stack_collate, pad_collate(), detection_collate()):
        for batch in ([(img, {"boxes": []}), (img, None)], [(img, {"boxes": []}), (None, 1)], [(img, 1), None]):
            with pytest.raises(CollateError) as e:
                collate(batch)
            assert str(e.value).startswith("cannot batch None: batch position 1 (a dataset that returns None"), e.value


def test_namedtuple_samples_stay_namedtuples_and_detection_targets_may_be_viewed_backwards():
    # the attacks: namedtuple samples came out of stack_collate as a list (default_collate keeps the type); boxes
    # given as an array viewed backwards (boxes[::-1]) were refused as "must be N x 4 numbers"
    import collections

    Sample = collections.namedtuple("Sample", "image label")
    img = torch.zeros(3, 2, 2, dtype=torch.uint8)
    out = stack_collate([Sample(img, 1), Sample(img, 2)])
    assert type(out) is Sample and out.label.tolist() == [1, 2] and tuple(out.image.shape) == (2, 3, 2, 2)
    boxes = np.array([[0, 0, 1, 1], [1, 1, 2, 2]], dtype=np.float32)
    labels = np.array([3, 4])
    _, targets = detection_collate()([(img, {"boxes": boxes[::-1], "labels": labels[::-1]})])
    assert targets[0]["boxes"].tolist() == [[1, 1, 2, 2], [0, 0, 1, 1]] and targets[0]["labels"].tolist() == [4, 3]


def test_stack_collate_names_a_dict_sample_without_a_key_the_others_have():
    # the attack: a dict sample without 'label' beside one with it: torch's bare KeyError 'label', no sample named
    img = torch.zeros(3, 2, 2)
    with pytest.raises(CollateError) as e:
        stack_collate([{"image": img, "label": 1}, {"image": img}])
    assert str(e.value) == ("stack_collate: batch position 1 is a sample of keys 'image', where batch position 0 has "
                            "'image', 'label': every sample needs the same keys")  # fmt: skip
    assert stack_collate([{"image": img, "label": 1}, {"label": 2, "image": img}])["label"].tolist() == [1, 2]
