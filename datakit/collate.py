"""Batching: stacking with errors that name the samples, padding mixed sizes, detection batches.

uint8 images stay uint8: they are stacked into one tensor with a single copy, and the
DataLoader's pin-memory thread pins that one buffer.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch.utils.data import default_collate

__all__ = ["detection_collate", "host_empty", "pad_collate", "stack_collate"]


_NUMPY_DTYPES = {torch.uint8: np.uint8, torch.float32: np.float32, torch.float16: np.float16,
                 torch.int64: np.int64, torch.int32: np.int32, torch.float64: np.float64}  # fmt: skip


def host_empty(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised CPU tensor for a whole batch, allocated by NumPy.

    NumPy asks the kernel for transparent huge pages for large arrays, so filling a fresh
    batch-sized buffer takes a fraction of the time of 4 KiB page faults (3-4x faster for a
    float32 batch of 64 x 3 x 224 x 224 on a virtualised machine).
    """
    np_dtype = _NUMPY_DTYPES.get(dtype)
    if np_dtype is None:
        return torch.empty(tuple(shape), dtype=dtype)
    return torch.from_numpy(np.empty(tuple(shape), dtype=np_dtype))


_MADV_POPULATE_WRITE = 23  # Linux 5.14+
_madvise = None  # libc's madvise once looked up; False where there is none


def _prefault(t: torch.Tensor) -> None:
    """Back a fresh shared-memory batch with pages in one call (``MADV_POPULATE_WRITE``) instead
    of one fault per 4 KiB page while it is filled: filling a 64 x 3 x 224 x 224 batch takes half
    the time. Contents are not touched; where the kernel refuses (older than 5.14, or /dev/shm
    full) nothing changes and the pages fault in as before."""
    global _madvise
    if _madvise is None:
        _madvise = False
        if sys.platform.startswith("linux"):
            import ctypes

            try:
                fn = ctypes.CDLL(None, use_errno=True).madvise
                fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
                _madvise = fn
            except (OSError, AttributeError):
                pass
    if _madvise:
        import mmap

        addr = t.data_ptr()
        start = addr - addr % mmap.PAGESIZE
        _madvise(start, addr + t.numel() * t.element_size() - start, _MADV_POPULATE_WRITE)


def _as_chw(img) -> torch.Tensor:
    if isinstance(img, torch.Tensor):
        return img if img.ndim == 3 else img.unsqueeze(0)
    arr = np.asarray(img)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))


def _stack_images(images: Sequence) -> torch.Tensor:
    """Stack into one buffer with one copy; inside a DataLoader worker that buffer is allocated in
    shared memory (as default_collate does), so sending it to the main process copies nothing."""
    first = images[0]
    tensors = [torch.from_numpy(x) for x in images] if isinstance(first, np.ndarray) else list(images)
    shape = (len(tensors), *tensors[0].shape)
    if torch.utils.data.get_worker_info() is not None:
        numel = int(np.prod(shape))
        storage = tensors[0]._typed_storage()._new_shared(numel, device=tensors[0].device)
        out = tensors[0].new(storage).resize_(*shape)
        _prefault(out)
    elif tensors[0].device.type == "cpu":
        out = host_empty(shape, tensors[0].dtype)
    else:
        out = torch.empty(shape, dtype=tensors[0].dtype, device=tensors[0].device)
    if all(_hwc_view(t) for t in tensors):
        # CHW views of HWC pixels (what the pipelines return): split the channels straight into
        # the batch's planes, 8-10x faster than a strided copy of the transposition.
        import cv2

        planes = out.numpy()
        for k, t in enumerate(tensors):
            cv2.split(t.permute(1, 2, 0).numpy(), list(planes[k]))
        return out
    return torch.stack(tensors, 0, out=out)


_SPLIT_DTYPES = (torch.uint8, torch.int8, torch.uint16, torch.int16, torch.float32, torch.float64)


def _hwc_view(t: torch.Tensor) -> bool:
    """Whether a 3-D CPU tensor is a CHW view of contiguous HWC memory with 2-4 channels."""
    if t.ndim != 3 or t.device.type != "cpu" or t.dtype not in _SPLIT_DTYPES or not 2 <= t.shape[0] <= 4:
        return False
    c, h, w = t.shape
    return t.stride() == (1, w * c, c) and not t.requires_grad


def stack_collate(batch: Sequence):
    """``default_collate``, except that images of different sizes give an error naming the samples
    (their positions in the batch and shapes) and pointing at :func:`pad_collate`."""
    if batch and isinstance(batch[0], (tuple, list)) and len(batch[0]) >= 1:
        images = [b[0] for b in batch]
        if isinstance(images[0], (np.ndarray, torch.Tensor)):
            shapes = [tuple(x.shape) for x in images]
            if len(set(shapes)) > 1:
                groups: dict[tuple, list[int]] = {}
                for i, s in enumerate(shapes):
                    groups.setdefault(s, []).append(i)
                shown = "; ".join(f"samples {_ranges(ix)}: {s}" for s, ix in list(groups.items())[:4])
                raise ValueError(
                    f"cannot stack images of different sizes into one batch ({shown}); resize them to one size in "
                    "the transform, or batch them with datakit.collate.pad_collate()"
                )
            rest = default_collate([tuple(b[1:]) for b in batch])
            return [_stack_images(images), *rest]
    return default_collate(batch)


def _ranges(ix: list[int]) -> str:
    return ", ".join(map(str, ix[:6])) + (", ..." if len(ix) > 6 else "")


def _pad_images(images: Sequence, size_divisor: int, pad_value: float):
    chw = [_as_chw(x) for x in images]
    channels = {t.shape[0] for t in chw}
    if len(channels) > 1:
        raise ValueError(f"cannot pad images with different channel counts into one batch: {sorted(channels)}")
    h = max(t.shape[1] for t in chw)
    w = max(t.shape[2] for t in chw)
    if size_divisor > 1:
        h, w = -(-h // size_divisor) * size_divisor, -(-w // size_divisor) * size_divisor
    out = torch.full((len(chw), chw[0].shape[0], h, w), pad_value, dtype=chw[0].dtype)
    mask = torch.zeros((len(chw), h, w), dtype=torch.bool)
    sizes = torch.empty((len(chw), 2), dtype=torch.int64)
    for i, t in enumerate(chw):
        out[i, :, : t.shape[1], : t.shape[2]] = t  # top-left: pixel coordinates are unchanged
        mask[i, : t.shape[1], : t.shape[2]] = True
        sizes[i, 0], sizes[i, 1] = t.shape[1], t.shape[2]
    return out, sizes, mask


def pad_collate(size_divisor: int = 32, pad_value: float = 0) -> Callable:
    """A collate function that pads images (HWC arrays or CHW tensors) at the bottom and right to
    the batch's largest size, rounded up to ``size_divisor``.

    The batch is ``(images NCHW, targets, sizes N x 2 (h, w), mask N x H x W)``, the mask True
    on real pixels.
    """
    if size_divisor < 1:
        raise ValueError(f"size_divisor must be at least 1, got {size_divisor}")

    def collate(batch: Sequence):
        images, sizes, mask = _pad_images([b[0] for b in batch], size_divisor, pad_value)
        targets = default_collate([b[1] for b in batch]) if len(batch[0]) > 1 else None
        return images, targets, sizes, mask

    return collate


def detection_collate(size_divisor: int = 32, pad_value: float = 0) -> Callable:
    """A collate function for detection: samples are ``(image, target dict)`` with ``boxes``
    (N x 4, pixel coordinates) and ``labels``; returns ``(images NCHW, list of target dicts)``.

    Images are padded at the bottom and right, so boxes stay valid; each target gains
    ``img_size`` (h, w before padding) and ``pad_size`` (h, w of the batch) and keeps its
    extras (``scale``, ``orig_size``, ...).
    """

    def collate(batch: Sequence):
        images, sizes, _ = _pad_images([b[0] for b in batch], size_divisor, pad_value)
        targets = []
        for i, (_, t) in enumerate(batch):
            if not isinstance(t, dict) or "boxes" not in t:
                raise ValueError(f"detection_collate: sample {i} target must be a dict with 'boxes', got {type(t)}")
            t = dict(t)
            t["boxes"] = torch.as_tensor(t["boxes"], dtype=torch.float32).reshape(-1, 4)
            if "labels" in t:
                t["labels"] = torch.as_tensor(t["labels"], dtype=torch.int64)
            t["img_size"] = sizes[i].clone()
            t["pad_size"] = torch.tensor(images.shape[-2:], dtype=torch.int64)
            targets.append(t)
        return images, targets

    return collate
