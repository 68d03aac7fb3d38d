"""Batching: stacking with errors that name the samples, padding mixed sizes, detection batches.

uint8 images stay uint8: they are stacked into one tensor with a single copy, and the
DataLoader's pin-memory thread pins that one buffer.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import threading
import weakref
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch.utils.data import default_collate

from datakit.errors import DataError

__all__ = ["CollateError", "detection_collate", "host_empty", "pad_collate", "stack_collate"]


class CollateError(DataError):
    """A batch a collate function refuses, in one line naming the samples at fault.

    Raised as ``CollateError("text ", [positions], " more text", ..., batch=batch)``: the lists are
    positions in ``batch``, which the message names as such ("batch positions 0, 2"); under
    :func:`~datakit.loader.create_loader` the loader, which knows what it read, names them by dataset
    index and file instead ("samples 17, 40"; "sample 5 (cat/x.jpg)"), where ``batch`` holds the
    samples it read in their order (a collate function that reorders or drops samples before
    refusing keeps its positions). A plain string works too.
    """

    def __init__(self, *parts: str | list[int], batch: Sequence | None = None) -> None:
        self.parts = parts
        self.batch = batch  # the samples the positions count in; None: the batch the collate function was given
        super().__init__(self.naming(_positions))

    def naming(self, label: Callable[[list[int], bool], str]) -> str:
        """The message with each list of positions written by ``label(positions, odd)``; ``odd`` is False
        for the one group larger than all others (the batch's common case, not a sample to look at)."""
        sizes = sorted(len(p) for p in self.parts if not isinstance(p, str))
        common = sizes[-1] if len(sizes) > 1 and sizes[-1] > sizes[-2] else None
        return "".join(p if isinstance(p, str) else label(p, len(p) != common) for p in self.parts)


def _positions(positions: list[int], odd: bool = True) -> str:
    """Positions in the batch, as a collate function called by a plain DataLoader can name them."""
    return ("batch positions " if len(positions) > 1 else "batch position ") + _ranges(positions)


def _refusing(collate: Callable) -> Callable:
    """``collate``, whose :class:`CollateError` names the batch it was given as the one its positions count in."""

    @functools.wraps(collate)
    def refusing(batch: Sequence):
        return _collated(collate, batch)

    return refusing


def _collated(collate: Callable, batch: Sequence):
    """``collate(batch)``; a :class:`CollateError` it raises counts its positions in ``batch``."""
    try:
        return collate(batch)
    except CollateError as exc:
        if exc.batch is None:
            exc.batch = batch
        raise


def _grouped(keys: Sequence, what: Callable[[object], str], kinds: str = "kinds") -> list[str | list[int]]:
    """Message parts naming the positions of each distinct key (at most 4 keys, then how many more samples
    there are of how many more keys): ``positions: what(key)``."""
    groups: dict = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    parts: list[str | list[int]] = []
    items = list(groups.items())
    for n, (k, ix) in enumerate(items[:4]):
        parts += ["; " if n else "", ix, f": {what(k)}"]
    if len(items) > 4:
        left = sum(len(ix) for _, ix in items[4:])
        parts.append(f"; and {left} more sample{'s' if left > 1 else ''} of {len(items) - 4} other "
                     f"{kinds if len(items) > 5 else kinds[:-1]}")  # fmt: skip
    return parts


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
    from datakit.transforms import _refuse_chw

    _refuse_chw(arr, "pad_collate")  # (3, 8, 9) read as H x W x C would come out 9 channels, without a word
    return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))


def _stack_images(images: Sequence) -> torch.Tensor:
    """Stack into one buffer with one copy; inside a DataLoader worker that buffer is allocated in
    shared memory (as default_collate does), so sending it to the main process copies nothing."""
    tensors = _promoted([torch.from_numpy(x) if isinstance(x, np.ndarray) else x for x in images], "stack")
    shape = (len(tensors), *tensors[0].shape)
    out = None
    if torch.utils.data.get_worker_info() is not None:
        if _SLOTS is not None and tensors[0].device.type == "cpu":
            out = _SLOTS.take(shape, tensors[0].dtype)
        if out is None:
            numel = int(np.prod(shape))
            storage = tensors[0]._typed_storage()._new_shared(numel, device=tensors[0].device)
            out = tensors[0].new(storage).resize_(*shape)
            _prefault(out)
    elif tensors[0].device.type == "cpu":
        out = host_empty(shape, tensors[0].dtype)
    else:
        out = torch.empty(shape, dtype=tensors[0].dtype, device=tensors[0].device)
    views = [_hwc_view(t) for t in tensors]
    if any(views) and all(t.dtype == out.dtype and t.device.type == "cpu" for t in tensors):
        # CHW views of HWC pixels (what the pipelines return): split the channels straight into
        # the batch's planes, 8-10x faster than a strided copy of the transposition. Crops the
        # pipeline shrank 2x or more come CHW already and are copied as they are.
        import cv2

        planes = out.numpy()
        for k, (t, view) in enumerate(zip(tensors, views)):
            if view:
                cv2.split(t.permute(1, 2, 0).numpy(), list(planes[k]))
            else:
                out[k].copy_(t)
        return out
    return torch.stack(tensors, 0, out=out)


_SPLIT_DTYPES = (torch.uint8, torch.int8, torch.uint16, torch.int16, torch.float32, torch.float64)


def _hwc_view(t: torch.Tensor) -> bool:
    """Whether a 3-D CPU tensor is a CHW view of contiguous HWC memory with 2-4 channels."""
    if t.ndim != 3 or t.device.type != "cpu" or t.dtype not in _SPLIT_DTYPES or not 2 <= t.shape[0] <= 4:
        return False
    c, h, w = t.shape
    return t.stride() == (1, w * c, c) and not t.requires_grad


@_refusing
def stack_collate(batch: Sequence):
    """``default_collate``, except that images of different sizes give a :class:`CollateError` naming
    the samples (by position in the batch; by dataset index and file under create_loader) and their
    shapes, and pointing at :func:`pad_collate`."""
    _refuse_nones(batch)
    if not batch:  # torch's own words: "list index out of range"
        raise CollateError("cannot batch an empty list of samples: the dataset or sampler gave none")
    batch = [_plain(b) for b in batch]
    if isinstance(batch[0], (np.ndarray, torch.Tensor)):  # bare images
        _same_sizes(batch, "images")
        return _stack_images(list(batch))
    if batch and isinstance(batch[0], dict):  # {"image": ..., "label": ...}
        for i, b in enumerate(batch[1:], 1):  # torch's own words: a bare KeyError 'label'
            if not isinstance(b, dict) or b.keys() != batch[0].keys():
                what = f"keys {', '.join(map(repr, b)) or 'none'}" if isinstance(b, dict) else type(b).__name__
                raise CollateError("stack_collate: ", [i], f" is a sample of {what}, where batch position 0 has "
                                   f"{', '.join(map(repr, batch[0])) or 'none'}: every sample needs the same "
                                   "keys")  # fmt: skip
        for key in batch[0]:
            values = [b.get(key) if isinstance(b, dict) else None for b in batch]
            if all(isinstance(v, (np.ndarray, torch.Tensor)) for v in values):
                _same_sizes(values, repr(key))
    if batch and isinstance(batch[0], (tuple, list)) and len(batch[0]) >= 1:
        images = [b[0] for b in batch]
        if isinstance(images[0], (np.ndarray, torch.Tensor)):
            _same_sizes(images, "images")
            rest = _unified([tuple(b[1:]) for b in batch])
            try:
                rest = default_collate(rest)
            except (RuntimeError, TypeError, ValueError):  # torch's own words name "entry N" of what
                _explain(rest, "target" if len(batch[0]) == 2 else "element", 1)
                raise
            out = [_stack_images(images), *(_long_labels(r, [b[k] for b in batch]) for k, r in enumerate(rest, 1))]
            if isinstance(batch[0], tuple) and hasattr(batch[0], "_fields"):  # a namedtuple, as default_collate keeps
                return type(batch[0])(*out)
            return out
    try:
        out = default_collate(_unified(list(batch)))
    except (RuntimeError, TypeError, ValueError):
        _explain(list(batch), "sample", None)
        raise
    if isinstance(out, dict) and all(isinstance(b, dict) for b in batch):  # {"label": np.int32(3)}: int64, as in tuples
        return {k: _long_labels(v, [b.get(k) for b in batch]) for k, v in out.items()}
    return out


def _refuse_nones(batch: Sequence) -> None:
    """A sample that is None, or holds None, named: torch's own words ("'NoneType' object is not subscriptable",
    "axes don't match array") name no sample."""
    nones = [
        i for i, b in enumerate(batch) if b is None or (isinstance(b, (tuple, list)) and any(x is None for x in b))
    ]
    if nones:
        raise CollateError("cannot batch None: ", nones, " (a dataset that returns None for a sample it cannot "
                           "read? datakit's datasets take on_error=; or leave them out in a collate function of "
                           "your own)")  # fmt: skip


def _plain_value(x):
    """An array viewed backwards (``img[..., ::-1]``, OpenCV's BGR-to-RGB idiom, or a mirror) copied forwards,
    which torch cannot wrap ("At least one stride in the given numpy array is negative"); a NumPy uint64
    scalar label as the int it is (torch takes no uint64 scalar: "an integer is required")."""
    if isinstance(x, np.ndarray) and any(st < 0 for st in x.strides):
        return np.ascontiguousarray(x)
    if isinstance(x, np.unsignedinteger) and x.dtype.itemsize == 8:
        if int(x) >= 2**63:
            raise CollateError(f"cannot batch the label {int(x)}: past int64's range (class indices are int64)")
        return int(x)
    return x


def _plain(sample):
    """A sample with :func:`_plain_value` applied to it and to its fields (a tuple, list or dict one level deep)."""
    if type(sample) in (tuple, list):
        return type(sample)(_plain_value(x) for x in sample)
    if type(sample) is dict:
        return {k: _plain_value(v) for k, v in sample.items()}
    return _plain_value(sample)


def _unified(values: list) -> list:
    """``values`` (one per sample, alike in structure: tuples, lists, dicts, tensors, arrays) with the tensors
    and arrays at each place promoted to one dtype. In a DataLoader worker ``default_collate`` stacks into a
    shared-memory tensor of the first sample's dtype, so a uint8 mask then an int64 one of 300 came out 44 there
    and 300 in the main process; promoted first, both give what ``torch.stack`` gives."""
    if not values:
        return values
    first = values[0]
    if all(isinstance(v, (np.ndarray, torch.Tensor)) for v in values):
        if len({str(v.dtype) for v in values}) <= 1:
            return values
        tensors = [torch.as_tensor(v) if isinstance(v, np.ndarray) else v for v in values]
        return _promoted(tensors, "batch") if len({t.dtype for t in tensors}) > 1 else tensors
    if type(first) in (tuple, list) and all(type(v) is type(first) and len(v) == len(first) for v in values):
        given = [[v[k] for v in values] for k in range(len(first))]
        columns = [_unified(c) for c in given]
        if all(a is b for a, b in zip(columns, given)):  # nothing promoted (labels as ints): the samples as they are
            return values
        return [type(first)(row) for row in zip(*columns)]
    if isinstance(first, dict) and all(isinstance(v, dict) and v.keys() == first.keys() for v in values):
        given_by_key = {k: [v[k] for v in values] for k in first}
        columns_by_key = {k: _unified(c) for k, c in given_by_key.items()}
        if all(columns_by_key[k] is given_by_key[k] for k in first):
            return values
        return [type(v)({k: columns_by_key[k][i] for k in first}) if type(v) is dict else v
                for i, v in enumerate(values)]  # fmt: skip
    return values


def _long_labels(collated, values: list):
    """Class indices as int64, what ``cross_entropy`` takes: a field whose values are integer scalars of another
    type (NumPy's int32 or uint8, from a dataset of the caller's) came out as that type. Arrays (masks) keep theirs."""
    if not isinstance(collated, torch.Tensor) or collated.ndim != 1 or collated.dtype in (torch.int64, torch.bool):
        return collated
    scalars = all(isinstance(v, np.integer) or (isinstance(v, torch.Tensor) and v.ndim == 0) for v in values)
    return collated.to(torch.int64) if scalars and not collated.is_floating_point() else collated


def _explain(values: list, what: str, first: int | None) -> None:
    """Raise a :class:`CollateError` naming the samples where ``values`` (one per sample: tuples of
    fields numbered from ``first``, dicts, arrays) differ in shape or length, field by field, once
    default_collate has refused them; nothing when no such difference is found."""
    if all(isinstance(v, (np.ndarray, torch.Tensor)) for v in values):
        _same_sizes(values, what)
    elif all(isinstance(v, dict) for v in values) and values:
        for key in values[0]:
            if all(key in v for v in values):
                _explain([v[key] for v in values], f"{what}[{key!r}]", None)
    elif all(isinstance(v, (tuple, list)) for v in values) and values:
        lengths = [len(v) for v in values]
        if len(set(lengths)) > 1:
            raise CollateError(f"cannot batch {what}s of different lengths (", *_grouped(lengths, str, "lengths"),
                               "); a collate function of your own can keep them as lists")  # fmt: skip
        for k in range(lengths[0]):
            if first is None:
                field = f"{what}[{k}]"
            else:  # a sample's fields after the image: "target" for (image, target), else numbered
                field = what if lengths[0] == 1 else f"{what} {k + first}"
            _explain([v[k] for v in values], field, None)


def _same_sizes(arrays: Sequence, what: str) -> None:
    shapes = [tuple(x.shape) if isinstance(x, (np.ndarray, torch.Tensor)) else type(x).__name__ for x in arrays]
    if len(set(shapes)) > 1:
        advice = ("resize them to one size in the transform, or batch them with datakit.collate.pad_collate()"
                  if what in ("images", "'image'") else  # pad_collate pads images, not targets
                  "a collate function of your own can pad them or keep them as lists")  # fmt: skip
        kinds = ["NumPy array" if isinstance(x, np.ndarray) else "tensor" for x in arrays]
        layouts = all(  # C x H x W tensors beside H x W x C arrays: a tensor's channels lead, an array's trail
            isinstance(x, (np.ndarray, torch.Tensor)) and x.ndim == 3 and x.shape[-1 if k[0] == "N" else 0] <= 4
            for x, k in zip(arrays, kinds)
        )
        if what in ("images", "'image'") and len(set(kinds)) > 1 and layouts:
            raise CollateError(f"cannot stack {what} given as tensors beside NumPy arrays into one batch (",
                               *_grouped([f"{k} {sh}" for k, sh in zip(kinds, shapes)], str, "sizes"), "); a tensor "
                               "is read as C x H x W and an array as H x W x C: give every sample the same "
                               "transform")  # fmt: skip
        channels = _channel_counts(arrays, shapes) if what in ("images", "'image'") else None
        if channels is not None:  # gray, RGB and RGBA files read as they are: no resize or padding makes them one
            counts = ", ".join(map(str, channels[:-1])) + f" and {channels[-1]}"
            raise CollateError(f"cannot stack {what} of {counts} channels into one batch (",
                               *_grouped(shapes, str, "sizes"), "); open the dataset with mode='rgb' (or "
                               "'gray') so that every image has the same channels, or convert them in the "
                               "transform")  # fmt: skip
        raise CollateError(f"cannot stack {what} of different sizes into one batch (", *_grouped(shapes, str, "sizes"),
                           f"); {advice}")  # fmt: skip


def _channel_counts(arrays: Sequence, shapes: list) -> list[int] | None:
    """The channel counts, sorted, where images of one number of dimensions differ in their channels (a tensor's
    first dimension, an array's last: C x H x W, H x W x C); None where they do not."""
    if any(isinstance(x, str) for x in shapes) or len({len(x) for x in shapes}) != 1 or len(shapes[0]) != 3:
        return None
    dim = 0 if isinstance(arrays[0], torch.Tensor) else 2
    counts = sorted({x[dim] for x in shapes})
    return counts if len(counts) > 1 and counts[-1] <= 4 else None


def _ranges(ix: list[int]) -> str:
    return ", ".join(map(str, ix[:6])) + (", ..." if len(ix) > 6 else "")


def _promoted(tensors: list[torch.Tensor], verb: str) -> list[torch.Tensor]:
    """``tensors`` in one dtype, promoted as ``torch.stack`` and ``default_collate`` promote them, never
    cast into the first's; where torch promotes no pair (uint16 and uint8, for one: it promotes no
    unsigned type but uint8), a ``ValueError`` naming the samples of each dtype (``verb``: stack, pad).
    Floating dtypes are promoted first, so the outcome does not depend on the samples' order: uint16,
    uint8 and float32 give float32 in any order (torch promotes them pairwise, and fails on the first
    two when they come first)."""
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) <= 1:
        return tensors
    try:
        common = functools.reduce(torch.promote_types, sorted(dtypes, key=lambda d: not d.is_floating_point))
    except RuntimeError:
        names = [str(t.dtype).removeprefix("torch.") for t in tensors]
        raise CollateError(f"cannot {verb} images of dtypes torch does not promote into one batch (",
                           *_grouped(names, str), "); convert them to one dtype in the transform",
                           ) from None  # fmt: skip
    return [t.to(common) for t in tensors]


def _pad_images(images: Sequence, size_divisor: int, pad_value: float):
    if not images:
        raise ValueError("cannot pad an empty batch: the dataset or sampler gave no samples")
    chw = [_as_chw(x) for x in images]
    channels = [t.shape[0] for t in chw]
    if len(set(channels)) > 1:
        raise CollateError("cannot pad images with different channel counts into one batch (",
                           *_grouped(channels, lambda c: f"{c} channel{'s' if c != 1 else ''}"),
                           "; arrays are read H x W x C, tensors C x H x W)")  # fmt: skip
    chw = _promoted(chw, "pad")
    dtype = chw[0].dtype
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        if not math.isfinite(pad_value) or pad_value != int(pad_value) or not info.min <= pad_value <= info.max:
            name = str(dtype).removeprefix("torch.")
            raise ValueError(f"pad_value={pad_value} does not fit {name} images ({info.min}..{info.max}, whole "
                             "numbers): it would be written as another value")  # fmt: skip
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


def _divisor(factory: str, size_divisor) -> int:
    if isinstance(size_divisor, (list, tuple)):  # the batch: the factory itself given as collate_fn
        raise TypeError(f"{factory} makes a collate function: pass collate_fn={factory}() (with its options), "
                        f"not {factory}")  # fmt: skip
    if isinstance(size_divisor, bool) or not isinstance(size_divisor, int) or size_divisor < 1:
        raise ValueError(f"size_divisor must be a whole number of at least 1, got {size_divisor!r}")
    return size_divisor


class _Collate:
    """A collate function with options that pickles (spawn workers pickle the collate function),
    whose :class:`CollateError` names the batch it was given as the one its positions count in."""

    def __init__(self, factory: str, size_divisor: int, pad_value: float) -> None:
        self.size_divisor, self.pad_value = _divisor(factory, size_divisor), pad_value

    def __call__(self, batch: Sequence):
        return _collated(self._collate, batch)

    def _collate(self, batch: Sequence):
        _refuse_nones(batch)
        return self.collate([_plain(b) for b in batch])

    def collate(self, batch: Sequence):
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{self.name}(size_divisor={self.size_divisor}, pad_value={self.pad_value})"


def _check_pairs(name: str, batch: Sequence, bare_ok: bool) -> None:
    """Refuse samples that are not (image, target) pairs (nor bare images, where ``bare_ok``), naming them."""
    for i, b in enumerate(batch):
        if bare_ok and isinstance(b, (torch.Tensor, np.ndarray)):
            continue
        if not isinstance(b, (tuple, list)) or len(b) < (1 if bare_ok else 2):
            what = f"a {type(b).__name__}" if not isinstance(b, (tuple, list)) else f"a {type(b).__name__} of {len(b)}"
            takes = "(image, target) pairs or bare images" if bare_ok else "(image, target) pairs"
            raise CollateError(f"{name}: ", [i], f" is {what}; {name} takes {takes}: return them from the dataset "
                               "(for a dict, (sample['image'], sample['label']))")  # fmt: skip


class _PadCollate(_Collate):
    name = "pad_collate"

    def collate(self, batch: Sequence):
        _check_pairs(self.name, batch, bare_ok=True)
        bare = [isinstance(b, (torch.Tensor, np.ndarray)) for b in batch]
        if any(bare) and not all(bare):
            raise CollateError("pad_collate: samples mix bare images and (image, target) pairs (",
                               *_grouped(["a bare image" if b else "a pair" for b in bare], str), ")")  # fmt: skip
        if any(bare):  # images without targets: an image is not a sequence of (image, target)
            images, sizes, mask = _pad_images(list(batch), self.size_divisor, self.pad_value)
            return images, None, sizes, mask
        images, sizes, mask = _pad_images([b[0] for b in batch], self.size_divisor, self.pad_value)
        targets = None
        if batch and len(batch[0]) > 1:
            rest = [(b[1],) for b in batch]
            try:
                targets = default_collate(_unified(rest))[0]
            except (RuntimeError, TypeError, ValueError):  # torch's own words name "entry N" of what
                _explain(rest, "target", 1)
                raise
            targets = _long_labels(targets, [b[1] for b in batch])  # int64, as stack_collate gives them
        return images, targets, sizes, mask


class _DetectionCollate(_Collate):
    name = "detection_collate"

    def collate(self, batch: Sequence):
        _check_pairs(self.name, batch, bare_ok=False)
        images, sizes, _ = _pad_images([b[0] for b in batch], self.size_divisor, self.pad_value)
        targets = []
        for i, (_, t) in enumerate(batch):
            if not isinstance(t, dict):
                raise CollateError("detection_collate: ", [i], " target must be a dict with 'boxes', got "
                                   f"{type(t).__name__}")  # fmt: skip
            if "boxes" not in t:
                raise CollateError("detection_collate: ", [i], " target has no 'boxes' (its keys: "
                                   f"{', '.join(map(repr, t)) or 'none'})")  # fmt: skip
            t = dict(t)
            # torchvision's BoundingBoxes: a tensor whose format (an enum) goes with it
            fmt = getattr(t["boxes"], "format", None) if isinstance(t["boxes"], torch.Tensor) else None
            if fmt is not None and getattr(fmt, "name", str(fmt)) != "XYXY":
                raise CollateError("detection_collate: ", [i], f" boxes are {getattr(fmt, 'name', fmt)}, and the "
                                   "batch gives (x1, y1, x2, y2) with no format: convert them first "
                                   "(v2.ConvertBoundingBoxFormat('XYXY'))")  # fmt: skip
            try:
                boxes = torch.as_tensor(_plain_value(t["boxes"]), dtype=torch.float32)
            except (TypeError, ValueError, RuntimeError):
                raise CollateError("detection_collate: ", [i], " boxes must be N x 4 numbers (x1, y1, x2, y2), got "
                                   f"{t['boxes']!r}") from None  # fmt: skip
            if boxes.numel() == 0:
                boxes = boxes.reshape(0, 4)  # no object in the image: [] or an empty array of any shape
            elif boxes.ndim != 2 or boxes.shape[1] != 4:  # (N, 5) with scores, corner points: never reshaped into boxes
                raise CollateError("detection_collate: ", [i], " boxes must be N x 4 (x1, y1, x2, y2), got shape "
                                   f"{tuple(boxes.shape)}")  # fmt: skip
            if boxes.numel() and not bool(torch.isfinite(boxes).all()):  # a NaN box makes a NaN loss, steps later
                raise CollateError("detection_collate: ", [i], " boxes must be finite numbers (x1, y1, x2, y2), got "
                                   f"{boxes.tolist()}")  # fmt: skip
            t["boxes"] = boxes
            if "labels" in t:
                try:
                    labels = torch.as_tensor(_plain_value(t["labels"]))
                except (TypeError, ValueError, RuntimeError):  # names ('cat'), nested lists of other lengths
                    raise CollateError("detection_collate: ", [i], " labels must be class indices (whole numbers), "
                                       f"got {t['labels']!r}") from None  # fmt: skip
                if labels.dtype in (torch.uint16, torch.uint32, torch.uint64):  # torch compares none of them
                    if labels.dtype == torch.uint64 and labels.numel() and bool((labels.view(torch.int64) < 0).any()):
                        raise CollateError("detection_collate: ", [i], " labels must be class indices, got one past "
                                           "int64's range")  # fmt: skip
                    labels = labels.to(torch.int64)
                if labels.dtype == torch.bool or labels.is_complex() or (labels.numel() and bool((labels < 0).any())):
                    raise CollateError("detection_collate: ", [i], " labels must be class indices (whole numbers, 0 "
                                       f"or more), got {labels.tolist()}")  # fmt: skip
                if labels.is_floating_point() and not (bool(torch.isfinite(labels).all()) and torch.equal(
                        labels, labels.round()) and (labels.numel() == 0 or float(labels.max()) < 2**62)):  # fmt: skip
                    # inf or 2.0**70 cast to int64 came out -9223372036854775808, a negative class
                    raise CollateError("detection_collate: ", [i], " labels must be class indices (whole numbers), got "
                                       f"{labels.tolist()}")  # fmt: skip
                if labels.reshape(-1).shape[0] != boxes.shape[0]:
                    raise CollateError("detection_collate: ", [i], f" has {boxes.shape[0]} boxes and "
                                       f"{labels.reshape(-1).shape[0]} labels")  # fmt: skip
                t["labels"] = labels.reshape(-1).to(torch.int64)
            t["img_size"] = sizes[i].clone()
            t["pad_size"] = torch.tensor(images.shape[-2:], dtype=torch.int64)
            targets.append(t)
        return images, targets


def pad_collate(size_divisor: int = 32, pad_value: float = 0) -> Callable:
    """A collate function that pads images (HWC arrays or CHW tensors) at the bottom and right to
    the batch's largest size, rounded up to ``size_divisor``.

    The batch is ``(images NCHW, targets, sizes N x 2 (h, w), mask N x H x W)``, the mask True
    on real pixels. Call it to make the function (``collate_fn=pad_collate()``); it pickles, so
    spawn workers take it too.
    """
    return _PadCollate("pad_collate", size_divisor, pad_value)


def detection_collate(size_divisor: int = 32, pad_value: float = 0) -> Callable:
    """A collate function for detection: samples are ``(image, target dict)`` with ``boxes``
    (N x 4, pixel coordinates) and ``labels``; returns ``(images NCHW, list of target dicts)``.

    Images are padded at the bottom and right, so boxes stay valid; each target gains
    ``img_size`` (h, w before padding) and ``pad_size`` (h, w of the batch) and keeps its
    extras (``scale``, ``orig_size``, ...). Call it to make the function
    (``collate_fn=detection_collate()``); it pickles, so spawn workers take it too.
    """
    return _DetectionCollate("detection_collate", size_divisor, pad_value)


# ---------------------------------------------------------------------------------------------
# batch slots: a worker's shared-memory batches used again once the main process lets go of them


class _BatchSlots:
    """A worker's shared-memory batch buffers (at most ``capacity``), filled again once the main
    process has let go of the batch that was in them, instead of a fresh segment per batch
    (created, its pages zeroed, its descriptor passed through a socket, mapped and freed again).

    One shared ``flags`` array says which slot is free (0) or holds the batch with that sequence
    number. Only this worker turns 0 into a number (:meth:`take`), only the main process turns its
    batch's number back into 0 (when the last tensor over the batch is gone), so no slot is
    written while anything in the main process can still read it. A batch the main process
    keeps simply keeps its slot; with every slot kept, a fresh segment is used as before.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.token = int.from_bytes(os.urandom(8), "little") >> 1  # this worker's slots, told apart from any other's
        self.flags = torch.zeros(capacity, dtype=torch.int64).share_memory_()
        self.storages: list[torch.UntypedStorage | None] = [None] * capacity
        self.told = [False] * capacity  # the main process has the slot's storage already
        self.flags_told = False
        self.seq = 0
        self.pending: list[tuple[torch.Tensor, int, int]] = []  # (batch tensor, slot, seq) of this collate call

    def take(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
        """An uninitialised tensor of ``shape`` in a free slot, or None (none free, none left)."""
        nbytes = int(np.prod(shape)) * torch.empty((), dtype=dtype).element_size()
        if nbytes == 0:
            return None
        flags = self.flags.numpy()
        fits = (k for k, st in enumerate(self.storages) if st is not None and flags[k] == 0 and st.nbytes() >= nbytes)
        k = next(fits, None)
        if k is None:
            k = next((k for k, st in enumerate(self.storages) if st is None), None)
            if k is None:
                return None
            st = torch.UntypedStorage._new_shared(nbytes)
            self.storages[k], self.told[k] = st, False
            out = torch.empty(0, dtype=torch.uint8).set_(st, 0, (nbytes,))
            _prefault(out)
        self.seq += 1
        flags[k] = self.seq
        out = torch.empty(0, dtype=dtype).set_(self.storages[k], 0, shape)
        self.pending.append((out, k, self.seq))
        return out

    def begin(self) -> None:
        """A collate call starts: slots taken by one that failed were never sent, so they are free."""
        flags = self.flags.numpy()
        for _, k, seq in self.pending:
            if flags[k] == seq:
                flags[k] = 0
        self.pending.clear()

    def wrap(self, batch):
        """The collated ``batch`` with each slot's tensor replaced by a :class:`_SlotBatch`, which the
        main process unpickles as a tensor over its mapping of the slot. A slot's tensor is sent so
        only where it is in the batch once, as itself, beside nothing else that could reach its
        memory (a view, an array over it, an object this cannot see into); otherwise the batch goes
        through torch's own sharing as before and the slot is left to it for good."""
        pending, self.pending = self.pending, []
        if not pending:
            return batch
        found: list = []
        seen_ok = _scan(batch, found)
        out = batch
        for t, k, seq in pending:
            lo, hi = t.untyped_storage().data_ptr(), t.untyped_storage().data_ptr() + t.untyped_storage().nbytes()
            hits = [x for x in found if lo <= _address(x) < hi]
            if seen_ok and len(hits) == 1 and hits[0] is t:
                flags = None
                if not self.flags_told:
                    flags, self.flags_told = self.flags, True
                storage = None
                if not self.told[k]:
                    storage, self.told[k] = self.storages[k], True
                out = _replace_once(out, t, _SlotBatch(self.token, k, seq, storage, flags, tuple(t.shape), t.dtype))
            else:
                self.storages[k] = None  # the batch keeps this memory; the slot gets a new one when needed
        return out


_SLOTS: _BatchSlots | None = None  # set in a worker of create_loader (use_batch_slots)


def use_batch_slots(capacity: int) -> None:
    """In a DataLoader worker: batch stacks by :func:`stack_collate` reuse up to ``capacity``
    shared-memory buffers (0: a fresh one per batch). Only for loaders whose collate function is
    wrapped in :class:`SlotCollate` (create_loader's), which sends them."""
    global _SLOTS
    _SLOTS = _BatchSlots(capacity) if capacity > 0 else None
    if _SLOTS is not None:
        import multiprocessing.util

        # the worker ends with os._exit: let go of the slots first, or under the file_system
        # sharing strategy their files in /dev/shm outlive it
        multiprocessing.util.Finalize(None, use_batch_slots, (0,), exitpriority=0)


class SlotCollate:
    """``collate_fn`` whose stacked batches travel in the worker's batch slots (see
    :class:`_BatchSlots`); everywhere else, and for what it does not stack, ``collate_fn`` as it is."""

    def __init__(self, collate_fn: Callable) -> None:
        self.collate_fn = collate_fn

    def __call__(self, batch):
        slots = _SLOTS
        if slots is None:
            return self.collate_fn(batch)
        slots.begin()
        return slots.wrap(self.collate_fn(batch))

    def __getattr__(self, name: str):
        if name == "collate_fn":
            raise AttributeError(name)
        return getattr(self.collate_fn, name)

    def __repr__(self) -> str:
        return f"SlotCollate({self.collate_fn!r})"


_LEAVES = (int, float, bool, str, bytes, type(None), np.generic)


def _scan(obj, found: list) -> bool:
    """Collect every tensor and array in ``obj`` (lists, tuples, dicts); False where something
    else could hold one."""
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        found.append(obj)
        return not (isinstance(obj, np.ndarray) and obj.dtype == object)
    if isinstance(obj, (list, tuple)):
        return all([_scan(x, found) for x in obj])
    if isinstance(obj, dict):
        return all([_scan(k, found) and _scan(v, found) for k, v in obj.items()])
    return isinstance(obj, _LEAVES)


def _address(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.untyped_storage().data_ptr() if x.device.type == "cpu" else -1
    return x.__array_interface__["data"][0] if x.size else -1


def _replace_once(obj, old: torch.Tensor, new):
    if obj is old:
        return new
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple
        return type(obj)._make(_replace_once(x, old, new) for x in obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_replace_once(x, old, new) for x in obj)
    if isinstance(obj, dict):
        return type(obj)((k, _replace_once(v, old, new)) for k, v in obj.items())
    return obj


class _SlotBatch:
    """A batch in a worker's slot, as sent: the slot's storage and the flags only the first time."""

    def __init__(self, token, slot, seq, storage, flags, shape, dtype) -> None:
        self.args = (token, slot, seq, storage, flags, shape, dtype, os.getpid())

    def __reduce__(self):
        return _rebuild_slot, self.args


_SLOT_STORAGES: dict[tuple[int, int], torch.UntypedStorage] = {}  # main process: (token, slot) -> mapping
_SLOT_FLAGS: dict[int, tuple[torch.Tensor, int]] = {}  # token -> (the worker's flags, its pid)
_REGISTRY_LOCK = threading.Lock()


def _rebuild_slot(token, slot, seq, storage, flags, shape, dtype, pid) -> torch.Tensor:
    """In the main process: the batch as a tensor over this process's mapping of the slot, kept
    between batches. Its memory is owned by an array made for this batch alone; when the last
    tensor or view over it goes, the slot is marked free for the worker."""
    with _REGISTRY_LOCK:
        if flags is not None:
            _forget([t for t, (_, p) in _SLOT_FLAGS.items() if not _alive(p)])
            _SLOT_FLAGS[token] = (flags, pid)
        if storage is not None:
            _SLOT_STORAGES[(token, slot)] = storage
        st, flags = _SLOT_STORAGES[(token, slot)], _SLOT_FLAGS[token][0]
    nbytes = int(np.prod(shape)) * torch.empty((), dtype=dtype).element_size()
    owner = torch.empty(0, dtype=torch.uint8).set_(st, 0, (st.nbytes(),)).numpy()[:nbytes]
    weakref.finalize(owner, _free_slot, flags.numpy(), slot, seq)
    return torch.from_numpy(owner).view(dtype).view(shape)


def _free_slot(flags: np.ndarray, slot: int, seq: int) -> None:
    if flags[slot] == seq:
        flags[slot] = 0


def _forget(tokens) -> None:
    """Drop the main process's mappings of these workers' slots (batches still held keep theirs)."""
    for token in tokens:
        _SLOT_FLAGS.pop(token, None)
        for key in [key for key in _SLOT_STORAGES if key[0] == token]:
            del _SLOT_STORAGES[key]


def forget_slots(pids) -> None:
    """The loader has shut these workers down: drop the mappings of their slots."""
    pids = set(pids)
    with _REGISTRY_LOCK:
        _forget([t for t, (_, p) in _SLOT_FLAGS.items() if p in pids])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
