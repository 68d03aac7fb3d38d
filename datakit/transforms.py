"""Layout, colour and dtype conversions, and uint8 geometric transforms.

OpenCV gives BGR HWC uint8; PyTorch models want RGB CHW float. The conversions here say which
is which, and the geometric transforms work on uint8 HWC arrays so pixels stay uint8 (a quarter
of float32's memory traffic) until the last step, ideally on the GPU. Random choices draw from
torch's generator, which DataLoader seeds differently in every worker.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

__all__ = [
    "BGRToRGB",
    "CenterCrop",
    "Compose",
    "EvalPipeline",
    "HWCToCHW",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "INTERPOLATIONS",
    "Normalize",
    "OneHot",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
    "ToDtype",
    "ToTensor",
    "TrainPipeline",
    "cv2_to_tensor",
    "eval_pipeline",
    "pil_to_numpy",
    "tensor_to_cv2",
    "tensor_to_pil",
    "to_batch",
    "train_pipeline",
]

_POOL_LOCK = threading.Lock()  # Normalize's batch buffers: one handed out to one caller at a time
_POOL_BUFFERS, _POOL_BYTES = 3, 512 * 2**20  # kept per Normalize: three 64 x 3 x 224 x 224 batches are 115 MB
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _plain_size(size):
    """``size`` with NumPy's integers as Python's (np.int64(224) from a config array: an int, not a pair)."""
    if isinstance(size, np.integer):
        return int(size)
    if isinstance(size, (tuple, list)) and all(isinstance(x, np.integer) for x in size):
        return type(size)(int(x) for x in size)
    return size


def _crop_in_budget(size: int | Sequence[int], who: str) -> None:
    """Refuse a crop larger than a decoded image may be (train_pipeline(10**9) died in torch's allocator)."""
    from datakit.io import _default_budget

    h, w = _size2(size)
    if h * w > _default_budget():
        raise ValueError(
            f"{who}: size {h}x{w} = {h * w} pixels a crop, over the limit of {_default_budget()} a "
            "decoded image may have (DATAKIT_MAX_PIXELS); a crop is a side of a few hundred pixels"
        )


def _size2(size: int | Sequence[int]) -> tuple[int, int]:
    """``size`` as (height, width)."""
    whole = lambda x: isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))  # noqa: E731
    if whole(size):  # (NumPy's integers too: np.int64(224) from a config array)
        size = (size, size)
    if isinstance(size, (str, bytes)) or not hasattr(size, "__len__") or len(size) != 2:
        raise ValueError(f"size must be an int or (height, width), got {size!r}")
    if not all(map(whole, size)):
        raise ValueError(f"size must be whole numbers of pixels, got {tuple(size)!r}")
    if not all(x >= 1 for x in size):
        raise ValueError(f"size must be at least 1 pixel a side, got {tuple(size)!r}")
    return int(size[0]), int(size[1])


def _check_hwc(img: np.ndarray, who: str) -> None:
    if not isinstance(img, np.ndarray) or img.ndim not in (2, 3):
        got = tuple(img.shape) if hasattr(img, "shape") else type(img).__name__
        raise TypeError(f"{who} expects an HxW or HxWxC numpy array (as datakit datasets give), got {got}")


class Compose:
    """Apply transforms in order (works with datakit and torchvision transforms mixed)."""

    def __init__(self, transforms: Sequence[Callable]) -> None:
        self.transforms = list(transforms)

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x

    def __repr__(self) -> str:
        return "Compose(" + ", ".join(repr(t) for t in self.transforms) + ")"


class BGRToRGB:
    """Swap BGR and RGB: HWC numpy arrays (OpenCV) or CHW / NCHW tensors."""

    def __call__(self, img):
        if isinstance(img, torch.Tensor):
            if img.ndim < 3 or img.shape[-3] != 3:
                raise ValueError(f"BGRToRGB expects 3 channels in dim -3 of a tensor, got shape {tuple(img.shape)}")
            return img.flip(-3)
        _check_hwc(img, "BGRToRGB")
        if img.ndim != 3 or img.shape[2] not in (3, 4):
            raise ValueError(f"BGRToRGB expects HxWx3 (or x4), got shape {img.shape}")
        return np.ascontiguousarray(img[..., [2, 1, 0] + ([3] if img.shape[2] == 4 else [])])

    def __repr__(self) -> str:
        return "BGRToRGB()"


def _refuse_chw(img: np.ndarray, who: str, takes_chw: bool = True) -> None:
    """An array laid out C x H x W already (1-4 first, more than 4 last) would be transposed into
    nonsense (224 x 3 x 224) without a word, or read as an image of 300 channels. ``takes_chw``: what
    comes after ``who`` takes the CHW tensor (so it is passed on as it is); else it must be HWC."""
    if img.ndim == 3 and img.shape[0] <= 4 and img.shape[2] > 4:
        if takes_chw:
            raise ValueError(f"{who} expects an H x W x C array, and {tuple(img.shape)} looks C x H x W already; pass "
                             "it on as it is (torch.from_numpy)")  # fmt: skip
        raise ValueError(f"{who} expects an H x W x C array of 1-4 channels, and {tuple(img.shape)} looks C x H x W; "
                         "give it as H x W x C (img.transpose(1, 2, 0))")  # fmt: skip


def _bgr_to_rgb(t: torch.Tensor) -> torch.Tensor:
    """BGR(A) CHW to RGB(A): the colour channels reversed, alpha (a fourth) left last."""
    if t.shape[0] == 3:
        return t.flip(0)
    if t.shape[0] == 4:
        return t[[2, 1, 0, 3]]
    return t


class HWCToCHW:
    """uint8 HWC numpy to a uint8 CHW tensor: layout only, no dtype change, no scaling."""

    def __call__(self, img: np.ndarray) -> torch.Tensor:
        _check_hwc(img, "HWCToCHW")
        if img.ndim == 2:
            img = img[:, :, None]
        _refuse_chw(img, "HWCToCHW")
        chw = np.ascontiguousarray(img.transpose(2, 0, 1))
        if any(st < 0 for st in chw.strides):  # a 1-wide mirrored view counts as contiguous; torch takes none
            chw = chw.copy()
        return torch.from_numpy(chw)

    def __repr__(self) -> str:
        return "HWCToCHW()"


class ToTensor:
    """uint8 HWC numpy (RGB, or BGR with ``bgr=True``) to a float32 CHW tensor in 0-1,
    as torchvision's ``ToTensor`` does for PIL images."""

    def __init__(self, bgr: bool = False) -> None:
        self.bgr = bgr

    def __call__(self, img) -> torch.Tensor:
        if isinstance(img, torch.Tensor):
            raise TypeError("ToTensor expects a numpy HWC image; for a tensor use ToDtype(torch.float32)")
        if not isinstance(img, np.ndarray):
            img = pil_to_numpy(img)
        _check_hwc(img, "ToTensor")
        _refuse_chw(img, "ToTensor")  # named as what the caller called
        t = HWCToCHW()(img)
        if self.bgr:
            t = _bgr_to_rgb(t)
        if img.dtype == np.uint8:
            return t.to(torch.float32).div_(255)
        if img.dtype == np.uint16:
            return t.to(torch.float32).div_(65535)
        return t.to(torch.float32)

    def __repr__(self) -> str:
        return f"ToTensor(bgr={self.bgr})"


def on_255_scale(mean, std) -> bool:
    """Whether statistics are on the 0-255 scale: a mean above 1, or a std above 1 (no std of
    0-1 data reaches 1; ``([0, 0, 0], [255, 255, 255])`` is pixels / 255)."""
    return bool(torch.as_tensor(mean).max() > 1.0 or torch.as_tensor(std).max() > 1.0)


def mixed_scales(mean, std) -> str | None:
    """Why three channels' ``mean`` and ``std`` look like two scales (one on 0-255, the other on 0-1: a copy of
    ImageNet's mean times 255 beside its 0-1 std), or None. Every mean above 1 with every std under 1 is 0-255 data
    that hardly varies; means at most 1 (not all 0) with every std of 8 or more, 0-1 data varying past its range:
    neither is an RGB image set's. Other channel counts (depth, flux, CT in their own units) are not judged."""
    m, s = torch.as_tensor(mean, dtype=torch.float64), torch.as_tensor(std, dtype=torch.float64)
    if m.numel() != 3 or s.numel() != 3:
        return None
    shown = [[float(f"{v:.6g}") for v in t.tolist()] for t in (m, s)]
    if bool(m.min() > 1.0) and bool(s.max() < 1.0):
        return f"the mean {shown[0]} is on the 0-255 scale but the std {shown[1]} on the 0-1 scale"
    if 0.0 < float(m.max()) <= 1.0 and bool(s.min() >= 8.0):  # (not [0, 0, 0] and [255, 255, 255]: pixels / 255)
        return f"the mean {shown[0]} is on the 0-1 scale but the std {shown[1]} on the 0-255 scale"
    return None


def _mixed_message(why: str, escape: str) -> str:
    return (f"{why} (statistics copied from two places?); give both on one scale (ImageNet's: mean [0.485, 0.456, "
            f"0.406], std [0.229, 0.224, 0.225], or both times 255), or, if they are right, {escape}")  # fmt: skip


class Normalize:
    """``(x - mean) / std`` per channel on CHW or NCHW tensors.

    The statistics may be on the 0-1 scale (torchvision) or 0-255 (caffe/mmdetection): uint8
    input is converted to float on the statistics' scale, and float input whose scale does not
    match the statistics (0-1 data with 0-255 means, or the reverse) gives a warning, since the
    result would be silently wrong. ``scale="auto"`` reads the scale off the values (a mean or std
    above 1: 0-255); 0-255 statistics of data so dark that every mean and std is at most 1 say so
    with ``scale=255`` (``scale=1`` for 0-1).
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float], inplace: bool = False,
                 scale: str | float = "auto") -> None:  # fmt: skip
        try:
            self.mean = torch.as_tensor(mean, dtype=torch.float32)
            self.std = torch.as_tensor(std, dtype=torch.float32)
        except (TypeError, ValueError, RuntimeError):  # a preset's name, None: torch's "new(): invalid data type"
            raise ValueError(f"mean and std must be lists of numbers, one per channel, got mean {mean!r} and std "
                             f"{std!r} (a preset's statistics: datakit.stats.PRESETS['imagenet']['mean'] and "
                             "['std'])") from None  # fmt: skip
        if self.mean.ndim != 1 or self.std.ndim != 1 or len(self.mean) != len(self.std) or not len(self.mean):
            # one value per channel in each: a bare 0.25, or 3 means with 1 std, broadcast on float input and
            # failed on uint8 (a table per channel), so the same object worked on one and not the other
            raise ValueError(f"mean and std must be lists of one value per channel, as many in each, got mean "
                             f"{mean!r} and std {std!r}")  # fmt: skip
        if not (torch.isfinite(self.mean).all() and torch.isfinite(self.std).all()) or (self.std <= 0).any():
            raise ValueError(
                f"mean must be finite and std positive and finite, got mean {list(mean)} and std {list(std)}"
            )
        if isinstance(scale, str) and scale == "auto":
            if (why := mixed_scales(mean, std)) is not None:  # a warning: data in its own units may be so
                warnings.warn(_mixed_message(why, "scale=1 or scale=255 says which (and this goes)"), stacklevel=2)
            self.scale255 = on_255_scale(self.mean, self.std)
        elif not isinstance(scale, bool) and isinstance(scale, (int, float)) and scale in (1, 255):
            self.scale255 = scale == 255
        else:
            raise ValueError(f"scale must be 'auto', 1 or 255, got {scale!r}")
        self.inplace = inplace
        self._warned = False
        self._luts: list[np.ndarray] | None = None
        self._pool: list[np.ndarray] = []  # batch buffers handed out, reused once nobody holds them
        self.threads = 1  # for uint8 CPU batches: DeviceLoader raises it where cores are idle
        self._executor = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.ndim < 3:
            raise TypeError(f"Normalize expects a CHW or NCHW tensor, got {getattr(x, 'shape', type(x).__name__)}")
        if getattr(x, "_datakit_normalized", False):
            # a batch that create_loader(..., device=...) already normalised: a second pass would be
            # silently wrong, so it is left as it is (code written before the loader normalised)
            if not self._warned:
                warnings.warn("Normalize: this batch was already normalised by create_loader(..., device=...); "
                              "it is left unchanged (drop this Normalize step)", stacklevel=2)  # fmt: skip
                self._warned = True
            return x
        c = x.shape[-3]
        if c != len(self.mean):
            raise ValueError(f"Normalize has {len(self.mean)} channel statistics but the input has {c} channels")
        if not (x.dtype == torch.uint8 or x.is_floating_point()):
            raise TypeError(f"Normalize expects uint8 or float images, got {str(x.dtype).removeprefix('torch.')}: "
                            "convert them first (ToDtype)")  # fmt: skip
        if x.dtype == torch.uint8:
            # (x / 255 - mean) / std as one multiply-add over the converted pixels
            if x.device.type == "cpu" and x.is_contiguous():
                return self._lookup(x)
            scale = 1.0 / self.std if self.scale255 else 1.0 / (255.0 * self.std)
            shape = (-1, 1, 1)
            out = x.to(torch.float32)
            return out.mul_(scale.to(x.device).view(shape)).sub_((self.mean / self.std).to(x.device).view(shape))
        else:
            if not self._warned:
                self._check_scale(x)
            if not self.inplace:
                x = x.clone()
        shape = (-1, 1, 1)
        mean = self.mean.to(x.device).view(shape)
        std = self.std.to(x.device).view(shape)
        return x.sub_(mean).div_(std)

    def _lookup(self, x: torch.Tensor) -> torch.Tensor:
        """uint8 CPU pixels through one 256-entry table per channel: conversion, scaling and
        normalisation in a single pass, on the calling thread (a main process that normalises
        batches must not compete with its loader's workers for the cores). A whole batch goes
        into a buffer this Normalize handed out before and nobody holds any more, when there is
        one: the page faults of a fresh 38 MB batch cost more than the lookups."""
        import cv2

        if self._luts is None:
            values = np.arange(256, dtype=np.float64) / (1.0 if self.scale255 else 255.0)
            self._luts = [((values - m) / s).astype(np.float32) for m, s in zip(self.mean.tolist(), self.std.tolist())]
        out = self._buffer(tuple(x.shape)) if x.ndim == 4 else torch.empty(x.shape, dtype=torch.float32)
        c, h, w = x.shape[-3:]
        src, dst = x.numpy().reshape(-1, c, h, w), out.numpy().reshape(-1, c, h, w)
        luts = self._luts

        def planes(lo: int, hi: int) -> None:
            for k in range(lo, hi):
                for j in range(c):
                    cv2.LUT(src[k, j], luts[j], dst=dst[k, j])  # releases the GIL

        n, threads = src.shape[0], min(self.threads, src.shape[0])
        if threads <= 1:
            planes(0, n)
            return out
        if self._executor is None or self._executor._max_workers != threads:
            from concurrent.futures import ThreadPoolExecutor

            if self._executor is not None:
                self._executor.shutdown(wait=False)  # the count changed (re-tuning): its threads end
            self._executor = ThreadPoolExecutor(threads, thread_name_prefix="datakit-normalize")
        cuts = [n * t // threads for t in range(threads + 1)]
        for f in [self._executor.submit(planes, cuts[t], cuts[t + 1]) for t in range(threads)]:
            f.result()
        return out

    def _buffer(self, shape: tuple[int, ...]) -> torch.Tensor:
        with _POOL_LOCK:
            pool = self._pool
            for k in range(len(pool)):
                # two references: the pool's and getrefcount's argument; a tensor made from it (or a
                # view of that tensor, or an array of its memory) holds a third
                if pool[k].shape == shape and sys.getrefcount(pool[k]) == 2:
                    return torch.from_numpy(pool[k])
            arr = np.empty(shape, np.float32)  # NumPy's allocation: huge pages (see collate.host_empty)
            if len(pool) < _POOL_BUFFERS and sum(a.nbytes for a in pool) + arr.nbytes <= _POOL_BYTES:
                pool.append(arr)
            return torch.from_numpy(arr)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_pool": [], "_executor": None}  # buffers and threads stay in this process

    def __setstate__(self, state: dict) -> None:
        # a Normalize saved by an earlier version (in a pickled pipeline) lacks the newer attributes
        defaults = {"_warned": False, "_luts": None, "_pool": [], "threads": 1, "_executor": None}
        self.__dict__.update({**defaults, **state})

    def _check_scale(self, x: torch.Tensor) -> None:
        hi = float(x.max()) if x.numel() else 0.0
        if self.scale255 and hi <= 1.0 + 1e-6 and x.numel() > 16:
            warnings.warn("Normalize: 0-255 statistics applied to 0-1 data; use 0-1 statistics "
                          "(datakit.stats.PRESETS['imagenet'])", stacklevel=3)  # fmt: skip
            self._warned = True
        elif not self.scale255 and hi > 1.0 + 1e-6 and x.dtype.is_floating_point:
            warnings.warn("Normalize: 0-1 statistics applied to data above 1 (0-255 scale?); divide by 255 first "
                          "or use 0-255 statistics", stacklevel=3)  # fmt: skip
            self._warned = True

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean.tolist()}, std={self.std.tolist()})"


class ToDtype:
    """Images to ``image_dtype`` (float32 by default, scaled to 0-1 from uint8 or uint16 when ``scale``) and
    targets to ``target_dtype`` (int64: what ``CrossEntropyLoss`` wants; "expected scalar type Long").

    Call it on an image tensor, on a target, or on an ``(image, target)`` pair.
    """

    def __init__(self, image_dtype: torch.dtype = torch.float32, target_dtype: torch.dtype = torch.int64,
                 scale: bool = True) -> None:  # fmt: skip
        self.image_dtype, self.target_dtype, self.scale = image_dtype, target_dtype, scale

    def image(self, x) -> torch.Tensor:
        t = x if isinstance(x, torch.Tensor) else HWCToCHW()(x)
        if self.scale and t.dtype in (torch.uint8, torch.uint16) and self.image_dtype.is_floating_point:
            return t.to(self.image_dtype).div_(255 if t.dtype == torch.uint8 else 65535)  # as v2.ToDtype(scale=True)
        return t.to(self.image_dtype)

    def target(self, y) -> torch.Tensor:
        if isinstance(y, (int, np.integer)) and not isinstance(y, (bool, np.bool_)):
            y = int(y)  # a NumPy uint64 scalar torch cannot take; past int64 (2**63) torch's own overflow message
            if not -(2**63) <= y < 2**63 and not self.target_dtype.is_floating_point:
                info = torch.iinfo(self.target_dtype)
                dtype = str(self.target_dtype).removeprefix("torch.")
                raise ValueError(f"ToDtype: label {y} is outside {dtype}'s range {info.min}..{info.max}; it would "
                                 "wrap around, silently")  # fmt: skip
        t = torch.as_tensor(y, dtype=torch.float64) if isinstance(y, (float, np.floating)) else torch.as_tensor(y)
        if t.is_floating_point() and not self.target_dtype.is_floating_point:
            whole = torch.isfinite(t) & (t == t.round())
            if not bool(whole.all()):
                bad = t[~whole].flatten()[0].item()
                dtype = str(self.target_dtype).removeprefix("torch.")
                raise ValueError(f"ToDtype: label {bad} is not a whole number, not a class index; as {dtype} it "
                                 "would be cut, silently")  # fmt: skip
        if not self.target_dtype.is_floating_point and self.target_dtype != torch.bool and t.numel():
            info = torch.iinfo(self.target_dtype)
            if t.is_floating_point():  # 2.0**63 is int64's max + 1 as a double: outside, though not '>' it
                wide = t.to(torch.float64)
                outside = (wide < float(info.min)) | (wide >= float(info.max) + 1.0)
            else:
                wide = t.to(torch.int64)
                outside = (wide < info.min) | (wide > info.max)
            if t.dtype == torch.uint64:  # past int64's range it reads negative: compare as unsigned
                outside |= t.view(torch.int64) < 0
            if bool(outside.any()):
                bad = t[outside].flatten()[0].item()
                dtype = str(self.target_dtype).removeprefix("torch.")
                raise ValueError(f"ToDtype: label {bad} is outside {dtype}'s range {info.min}..{info.max}; it would "
                                 "wrap around, silently")  # fmt: skip
        return t.to(self.target_dtype)

    def __call__(self, x):
        if isinstance(x, tuple) and len(x) == 2:
            return self.image(x[0]), self.target(x[1])
        if isinstance(x, (int, float, np.integer, np.floating)) or (isinstance(x, torch.Tensor) and x.ndim <= 1):
            return self.target(x)
        if (isinstance(x, np.ndarray) and x.ndim <= 1) or isinstance(x, list):  # labels: no image is 1-D
            return self.target(x)
        return self.image(x)


class OneHot:
    """A class index (or a batch of them) to a one-hot float vector, for MSE-style losses."""

    def __init__(self, num_classes: int, dtype: torch.dtype = torch.float32) -> None:
        if num_classes < 1:
            raise ValueError(f"num_classes must be at least 1, got {num_classes}")
        self.num_classes, self.dtype = num_classes, dtype

    def __call__(self, y) -> torch.Tensor:
        # Python numbers through NumPy: float64, where torch would round 2.9999999 to the float32 3.0
        if isinstance(y, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in y):
            y = torch.as_tensor(y)  # a list of one-element tensors: the labels they hold, as torch reads them
        if not isinstance(y, torch.Tensor):
            values = np.asarray(y)
            if values.dtype.kind in "iu" and bool(((values < 0) | (values >= self.num_classes)).any()):
                # compared as NumPy holds them: a uint64 past int64's range would read negative in torch
                raise ValueError(f"OneHot({self.num_classes}): label {values.tolist()} outside "
                                 f"0..{self.num_classes - 1}")  # fmt: skip
        raw = y if isinstance(y, torch.Tensor) else torch.as_tensor(values)
        if raw.is_floating_point() and bool(((raw.double() < 0) | (raw.double() >= self.num_classes)).any()):
            shown = raw.tolist()  # inf, 1e19: outside before any cast to int64 turns them into -2**63
            raise ValueError(f"OneHot({self.num_classes}): label {shown} outside 0..{self.num_classes - 1}")
        if raw.dtype == torch.bool or (raw.is_floating_point() and not bool((raw == raw.round()).all())):
            shown = str(raw.numpy()) if raw.is_floating_point() and raw.dtype != torch.bfloat16 else raw.tolist()
            raise ValueError(f"OneHot({self.num_classes}): labels must be class indices (integers), got "
                             f"{shown} ({str(raw.dtype).removeprefix('torch.')})")  # fmt: skip
        t = raw.to(torch.int64)
        if (t < 0).any() or (t >= self.num_classes).any():
            raise ValueError(f"OneHot({self.num_classes}): label {t.tolist()} outside 0..{self.num_classes - 1}")
        return torch.nn.functional.one_hot(t, self.num_classes).to(self.dtype)


def to_batch(img) -> torch.Tensor:
    """One image to a batch of one (NCHW tensor): HWC or HW numpy, CHW or HW tensor, or PIL."""
    if not isinstance(img, (np.ndarray, torch.Tensor)):
        img = pil_to_numpy(img)
    if isinstance(img, np.ndarray):
        return HWCToCHW()(img).unsqueeze(0)
    if img.ndim == 2:
        return img[None, None]
    if img.ndim == 3:
        return img.unsqueeze(0)
    raise ValueError(f"to_batch expects one image (2 or 3 dims), got shape {tuple(img.shape)}")


def pil_to_numpy(img) -> np.ndarray:
    """A PIL image to a uint8 RGB (or L) HWC array."""
    if img.mode not in ("RGB", "L"):
        img = img.convert("RGB")
    return np.asarray(img).copy()


def tensor_to_pil(t: torch.Tensor):
    """A CHW tensor (uint8, or float in 0-1) to a PIL image."""
    from PIL import Image

    return Image.fromarray(_tensor_to_hwc(t, "tensor_to_pil"))


def _tensor_to_hwc(t: torch.Tensor, who: str) -> np.ndarray:
    t = t.detach().cpu()
    if t.dtype.is_floating_point:
        low, high = (float(t.min()), float(t.max())) if t.numel() else (0.0, 0.0)
        if not (low >= -0.25 and high <= 1.25):  # a resize's overshoot is clipped; another scale is no image
            # (a 0-255 float image went white, a normalised batch to false colours: clipped without a word)
            raise ValueError(
                f"{who}: a float tensor's values are {low:.4g}..{high:.4g}, not on the 0-1 scale: for a normalised "
                "batch undo the normalisation first (x * std + mean, the 0-1 stats), for 0-255 floats divide by 255"
            )
        t = (t.clamp(0, 1) * 255).round().to(torch.uint8)
    if t.ndim == 3:
        t = t.permute(1, 2, 0)
        if t.shape[2] == 1:
            t = t[..., 0]
    return np.ascontiguousarray(t.numpy())


def tensor_to_cv2(t: torch.Tensor) -> np.ndarray:
    """An RGB (or RGBA) CHW tensor (uint8, or float in 0-1) to an OpenCV BGR (or BGRA) HWC uint8
    array: the inverse of :func:`cv2_to_tensor`, alpha staying last."""
    hwc = _tensor_to_hwc(t, "tensor_to_cv2")
    if hwc.ndim == 3 and hwc.shape[2] == 4:  # reversing all four would give ABGR
        return np.ascontiguousarray(hwc[..., [2, 1, 0, 3]])
    return np.ascontiguousarray(hwc[..., ::-1]) if hwc.ndim == 3 else hwc


def cv2_to_tensor(img: np.ndarray) -> torch.Tensor:
    """An OpenCV BGR (or BGRA) HWC uint8 array to an RGB (or RGBA) CHW uint8 tensor."""
    _check_hwc(img, "cv2_to_tensor")
    return _bgr_to_rgb(HWCToCHW()(img)).contiguous()


# ---------------------------------------------------------------------------------------------
# geometric transforms on uint8 HWC arrays


INTERPOLATIONS = ("bilinear", "bicubic", "nearest", "nearest-exact", "area", "box", "lanczos")


def _interpolation(mode) -> str:
    """A torchvision ``InterpolationMode`` or its name, checked, as one of :data:`INTERPOLATIONS`."""
    name = str(getattr(mode, "value", mode)).lower()
    if name not in INTERPOLATIONS:
        raise ValueError(f"interpolation must be one of {', '.join(INTERPOLATIONS)} (or a torchvision "
                         f"InterpolationMode of those), got {mode!r}")  # fmt: skip
    return name


def _cv2_flag(interpolation: str, shrink: float) -> int:
    import cv2

    if interpolation == "nearest":
        return cv2.INTER_NEAREST
    if interpolation == "nearest-exact":
        return cv2.INTER_NEAREST_EXACT
    if interpolation in ("area", "box") or shrink >= 2:
        # Shrinking 2x or more (uint8 bilinear and bicubic go through _antialiased before this): the
        # area (box) filter, antialiased like torchvision's antialias=True.
        return cv2.INTER_AREA
    # Less than 2x (or enlarging): the filter's own support still covers every source pixel, at a
    # seventh of the area filter's cost for such fractional factors.
    return {"bilinear": cv2.INTER_LINEAR, "bicubic": cv2.INTER_CUBIC, "lanczos": cv2.INTER_LANCZOS4}[interpolation]


class _Steps:
    """Marks an error of a pipeline's steps after the image is decoded (an ``augment=`` step, the normalisation, a
    crop of the whole image) as the transform's, not the image's: a dataset reading the bytes through
    ``from_bytes`` then raises it as the transform's error, naming the sample, never as an unreadable image (which
    ``on_error="skip"`` would replace and ``bad_samples=`` would record)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        if isinstance(exc, Exception):
            exc._datakit_step = True  # type: ignore[union-attr]
        return False


_STEPS = _Steps()


def _antialiased(img: np.ndarray, h: int, w: int, interpolation: str, always: bool = False) -> torch.Tensor | None:
    """A uint8 (or uint16) HWC (or 2-D) image shrunk 2x or more (``always``: resized at all) with torchvision's own
    antialiased filter, as a contiguous CHW tensor: the same pixels as ``v2.Resize(antialias=True)``, at a
    third of the cost of OpenCV's area filter. None where the OpenCV path applies (less than 2x, other filters)."""
    if interpolation not in ("bilinear", "bicubic") or img.dtype not in (np.uint8, np.uint16):
        return None
    if max(img.shape[0] / h, img.shape[1] / w) < 2 and not (always and img.shape[:2] != (h, w)):
        return None
    if any(st < 0 for st in img.strides):  # a flipped view (img[..., ::-1]): torch takes none
        img = np.ascontiguousarray(img)
    x = torch.from_numpy(img if img.ndim == 3 else img[:, :, None]).permute(2, 0, 1)[None]
    if img.dtype == np.uint16:  # (16-bit PNG, mode="unchanged"): in float, rounded back, as torchvision does it
        out = torch.nn.functional.interpolate(x.float(), size=(h, w), mode=interpolation, antialias=True)[0]
        return out.round_().clamp_(0, 65535).to(torch.uint16)
    return torch.nn.functional.interpolate(x, size=(h, w), mode=interpolation, antialias=True)[0]


_RESIZE = None  # datakit._jpegregion.resize_planes; False where not built or the CPU lacks AVX2


def _resize_kernel():
    global _RESIZE
    if _RESIZE is None:
        try:
            from datakit._jpegregion import RESIZE_SIMD, resize_planes
        except ImportError:  # not built, or built before it had the resize
            RESIZE_SIMD = 0
        # without AVX2 its plain C path (the same pixels) is slower than OpenCV's: OpenCV then
        _RESIZE = resize_planes if RESIZE_SIMD else False
    return _RESIZE


def _plain_bilinear(rh: int, rw: int, h: int, w: int, interpolation: str) -> bool:
    """Whether an ``rh`` x ``rw`` region goes to ``h`` x ``w`` by the compiled bilinear resize."""
    return interpolation == "bilinear" and (rh, rw) != (h, w) and rh < 2 * h and rw < 2 * w and bool(_resize_kernel())


def _planes(img: np.ndarray, h: int, w: int, interpolation: str, flip: bool = False) -> torch.Tensor | None:
    """A uint8 HWC (or 2-D) image shrunk under 2x or enlarged, bilinear, by the compiled resize
    (``datakit._jpegregion.resize_planes``, AVX2): a contiguous CHW tensor, mirrored left to right
    when ``flip``, in about half of OpenCV's time for its resize and the split into planes together,
    and less than 0.52 of a level from the exact bilinear values (OpenCV's: up to 0.81). None where
    it does not apply (another filter, the same size, 2x or more, a turned view, not built, no AVX2)."""
    if img.dtype != np.uint8 or not _plain_bilinear(img.shape[0], img.shape[1], h, w, interpolation):
        return None
    try:
        planes = _resize_kernel()(img, h, w, flip)
    except (ValueError, OverflowError):  # a layout or size it does not take (a turned view, 4 channels)
        return None
    return torch.frombuffer(planes, dtype=torch.uint8).view(img.shape[2] if img.ndim == 3 else 1, h, w)


def _nearest_index(n_in: int, n_out: int, exact: bool) -> np.ndarray:
    """The source row (or column) of each of ``n_out`` outputs, as torch's nearest and nearest-exact
    kernels pick it: a float32 scale, the same roundings (OpenCV's fixed point picks the pixel before
    where the position falls on a pixel's edge, as 100 * 21 / 300 does)."""
    if n_out == n_in:
        return np.arange(n_out)
    if n_out == 2 * n_in:
        return np.arange(n_out) >> 1
    scale = np.float32(n_in) / np.float32(n_out)
    if exact:
        src = np.floor(((np.arange(n_out, dtype=np.float64) + 0.5) * np.float64(scale)).astype(np.float32))
    else:
        src = np.floor(np.arange(n_out, dtype=np.float32) * scale)
    return np.minimum(src.astype(np.int64), n_in - 1)


def _resize(img: np.ndarray, h: int, w: int, interpolation: str = "bilinear", antialias: bool = False) -> np.ndarray:
    import cv2

    if img.shape[0] == h and img.shape[1] == w:
        return img
    if interpolation in _NEAREST:  # pixels picked, none blended: torch's picks
        exact = interpolation == "nearest-exact"
        rows, cols = _nearest_index(img.shape[0], h, exact), _nearest_index(img.shape[1], w, exact)
        return np.ascontiguousarray(img.take(rows, axis=0).take(cols, axis=1))
    chw = _antialiased(img, h, w, interpolation, antialias)
    if chw is not None:
        out = chw.permute(1, 2, 0).contiguous().numpy()  # HWC in memory too, as OpenCV's drawing wants it
        return out if img.ndim == 3 else out[:, :, 0]
    chw = _planes(img, h, w, interpolation)  # the same pixels as the pipelines' from_bytes
    if chw is not None:
        if img.ndim == 2:
            return chw[0].numpy()
        return cv2.merge(list(chw.numpy())) if chw.shape[0] > 1 else chw[0].numpy()[:, :, None]
    shrink = max(img.shape[0] / h, img.shape[1] / w)
    out = cv2.resize(img, (w, h), interpolation=_cv2_flag(interpolation, shrink))
    return out if out.ndim == img.ndim else out[:, :, None]


class Resize:
    """Resize a uint8 HWC array: an int sets the shorter side (aspect kept), a pair sets (h, w).

    ``antialias=True``: bilinear and bicubic resizes of any factor through torchvision's own kernel,
    ``v2.Resize``'s pixels (its default); False (the pipelines' crops, for speed): shrinks from 2x on only."""

    def __init__(self, size: int | Sequence[int], interpolation="bilinear", antialias: bool = False) -> None:
        size = _plain_size(size)
        _size2(size)  # refused now, not at the first image
        self.size = size
        self.interpolation = _interpolation(interpolation)
        self.antialias = bool(antialias)

    def output_size(self, h: int, w: int, name=None) -> tuple[int, int]:
        if isinstance(self.size, int):
            out = (self.size, max(1, int(self.size * w / h))) if h <= w else (max(1, int(self.size * h / w)), self.size)
            from datakit.errors import ImageDecodeError
            from datakit.io import _default_budget

            limit = _default_budget()
            if out[0] * out[1] > limit:  # (an 8000x1 image to 256 on its shorter side: 2048000x256, gigabytes)
                named = f"{name}: " if name is not None else ""
                raise ImageDecodeError(
                    f"{named}{w}x{h} resized to {self.size} on its shorter side is {out[1]}x{out[0]} = "
                    f"{out[0] * out[1]} pixels, over the limit of {limit} (an image this narrow: leave it out or crop "
                    "it first; raise the limit with the DATAKIT_MAX_PIXELS environment variable)"
                )
            return out
        return _size2(self.size)

    def __call__(self, img: np.ndarray) -> np.ndarray:
        _check_hwc(img, "Resize")
        return _resize(img, *self.output_size(*img.shape[:2]), self.interpolation, self.antialias)

    def __repr__(self) -> str:
        return f"Resize({self.size}, interpolation={self.interpolation!r}, antialias={self.antialias})"


class CenterCrop:
    """The central (h, w) region of a uint8 HWC array (padded with zeros when smaller, as torchvision)."""

    def __init__(self, size: int | Sequence[int]) -> None:
        size = _plain_size(size)
        self.size = _size2(size)

    def __call__(self, img: np.ndarray) -> np.ndarray:
        _check_hwc(img, "CenterCrop")
        th, tw = self.size
        h, w = img.shape[:2]
        if h < th or w < tw:
            pad = [(max(0, (th - h) // 2), max(0, th - h - (th - h) // 2)),
                   (max(0, (tw - w) // 2), max(0, tw - w - (tw - w) // 2))] + [(0, 0)] * (img.ndim - 2)  # fmt: skip
            img = np.pad(img, pad)
            h, w = img.shape[:2]
        top, left = self.corner(h, w)
        return img[top : top + th, left : left + tw]

    def corner(self, h: int, w: int) -> tuple[int, int]:
        """(top, left) of the centre crop of an image of ``h`` x ``w`` at least the crop's size."""
        th, tw = self.size
        return int(round((h - th) / 2.0)), int(round((w - tw) / 2.0))

    def __repr__(self) -> str:
        return f"CenterCrop({self.size})"


_SCRATCH = threading.local()


def _scratch() -> tuple[torch.Tensor, torch.Tensor]:
    """This thread's two one-element CPU tensors (default float dtype, int64) that the crop and flip
    draws are written into: the numbers torchvision's freshly made ones get from torch's CPU
    generator (``torch.empty(1).uniform_``, ``torch.randint``, ``torch.rand``), which the loader
    seeds per sample, without making a tensor per draw."""
    pair = getattr(_SCRATCH, "pair", None)
    if pair is None or pair[0].dtype != torch.get_default_dtype():
        pair = _SCRATCH.pair = (torch.empty(1, device="cpu"), torch.empty(1, dtype=torch.int64, device="cpu"))
    return pair


def _coin() -> float:
    """``torch.rand(1).item()``: a uniform draw in [0, 1) from torch's generator."""
    return _scratch()[0].uniform_(0.0, 1.0).item()


class RandomResizedCrop:
    """torchvision's RandomResizedCrop (same crop distribution) on uint8 HWC arrays: the crop is
    cut first and only the crop is resized, with ``interpolation`` (see :data:`INTERPOLATIONS`)."""

    def __init__(self, size: int | Sequence[int], scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3 / 4, 4 / 3), interpolation="bilinear") -> None:  # fmt: skip
        size = _plain_size(size)
        self.size = _size2(size)
        self.interpolation = _interpolation(interpolation)
        for name, pair in (("scale", scale), ("ratio", ratio)):
            if (
                isinstance(pair, (str, bytes))
                or not hasattr(pair, "__len__")
                or len(pair) != 2
                or not all(
                    isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in pair
                )
            ):
                raise ValueError(f"{name} must be (min, max), two numbers, got {pair!r}")
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise ValueError(f"scale and ratio must be (min, max), got {scale} and {ratio}")
        if not (scale[0] > 0 and ratio[0] > 0 and math.isfinite(scale[1]) and math.isfinite(ratio[1])):
            raise ValueError(f"scale and ratio must be positive and finite, got {scale} and {ratio}")
        self.scale, self.ratio = scale, ratio
        self._log_ratio = torch.log(torch.tensor(ratio))  # float32, as torchvision has it: the same draws
        self._log_bounds = tuple(self._log_ratio.tolist())

    def __setstate__(self, state: dict) -> None:
        # a crop pickled by an earlier version (in a saved pipeline) has the tensor only
        self.__dict__.update(state)
        if "_log_bounds" not in state:
            self._log_bounds = tuple(self._log_ratio.tolist())

    def get_params(self, height: int, width: int) -> tuple[int, int, int, int]:
        """(top, left, h, w) of the crop, drawn exactly as torchvision draws it."""
        area = height * width
        real, whole = _scratch()
        lo, hi = self._log_bounds
        for _ in range(10):
            target_area = area * real.uniform_(self.scale[0], self.scale[1]).item()
            aspect = real.uniform_(lo, hi).exp_().item()
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                i = whole.random_(0, height - h + 1).item()  # what torch.randint(0, n, (1,)) draws
                j = whole.random_(0, width - w + 1).item()
                return i, j, h, w
        in_ratio = width / height
        if in_ratio < min(self.ratio):
            w, h = width, int(round(width / min(self.ratio)))
        elif in_ratio > max(self.ratio):
            h, w = height, int(round(height * max(self.ratio)))
        else:
            w, h = width, height
        # a ratio far from a thin image's rounds a side to 0 (torchvision then fails to resize nothing): one pixel
        h, w = max(1, h), max(1, w)
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, img: np.ndarray) -> np.ndarray:
        _check_hwc(img, "RandomResizedCrop")
        i, j, h, w = self.get_params(*img.shape[:2])
        return _resize(img[i : i + h, j : j + w], *self.size, self.interpolation)

    def __repr__(self) -> str:
        return (f"RandomResizedCrop(size={self.size}, scale={self.scale}, ratio={self.ratio}, "
                f"interpolation={self.interpolation!r})")  # fmt: skip


class RandomHorizontalFlip:
    """Mirror a uint8 HWC array (or a CHW tensor) left-right with probability ``p``."""

    def __init__(self, p: float = 0.5) -> None:
        number = isinstance(p, (int, float, np.integer, np.floating)) and not isinstance(p, (bool, np.bool_))
        if not number or not 0 <= p <= 1:
            raise ValueError(f"the flip's probability (hflip=, p=) must be a number in 0..1 (0.5: half the images "
                             f"mirrored, 0: none), got {p!r}")  # fmt: skip
        self.p = float(p)

    def __call__(self, img):
        if _coin() >= self.p:
            return img
        if isinstance(img, torch.Tensor):
            return img.flip(-1)
        return img[:, ::-1].copy()  # a fresh layout: ascontiguousarray keeps a 1-wide view's negative stride

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p})"


_NEAREST = ("nearest", "nearest-exact")  # never blend pixels: not even by decoding at a reduced DCT scale


_EVAL_MARGIN = 2  # eval_pipeline decodes a JPEG at a DCT scale that keeps this many times the resized side


def _factor(need_h: float, need_w: float, th: int, tw: int) -> int:
    """The largest JPEG DCT scale (8, 4, 2) at which a region still holds the target's pixels."""
    for f in (8, 4, 2):
        if need_h / f >= th and need_w / f >= tw:
            return f
    return 1


def _chroma_kept(f: int, data: bytes, mode: str) -> int:
    """The DCT scale ``f`` (:func:`_factor`) made finer for a colour decode of a JPEG whose chroma libjpeg would
    give coarser than the luma at that scale (4:2:2, 4:1:1: :func:`datakit.io._jpeg_chroma_lag`), so that the
    chroma keeps the target's resolution too: 1/2 in place of 1/4 for 4:2:2."""
    if f == 1 or mode == "gray":
        return f
    from datakit.io import _jpeg_chroma_lag

    return max(1, f // _jpeg_chroma_lag(data))


def _scaled_box(i: int, j: int, ch: int, cw: int, sh: int, sw: int, f: int) -> tuple[int, int, int, int]:
    """The crop (top ``i``, left ``j``, ``ch`` x ``cw`` full-size pixels) in an image decoded at
    1/``f`` whose sides are ``sh`` x ``sw``: (top, left, bottom, right), never empty."""
    y0, x0 = min(sh - 1, i // f), min(sw - 1, j // f)
    return y0, x0, max(y0 + 1, min(sh, round((i + ch) / f))), max(x0 + 1, min(sw, round((j + cw) / f)))


def _stored_box(i: int, j: int, ch: int, cw: int, h: int, w: int, orientation: int) -> tuple[int, int, int, int]:
    """The crop (top ``i``, left ``j``, ``ch`` x ``cw``) of the upright image as the same pixels of
    the ``h`` x ``w`` image stored under EXIF ``orientation``: (top, left, height, width) there.
    Turning that crop of the stored pixels upright gives the crop of the upright image."""
    return {
        1: (i, j, ch, cw),
        2: (i, w - j - cw, ch, cw),
        3: (h - i - ch, w - j - cw, ch, cw),
        4: (h - i - ch, j, ch, cw),
        5: (j, i, cw, ch),
        6: (h - j - cw, i, cw, ch),
        7: (h - j - cw, w - i - ch, cw, ch),
        8: (j, w - i - ch, cw, ch),
    }[orientation]


def _jpeg_header(data: bytes, mode: str) -> tuple[int, int] | None:
    from datakit.io import _jpeg_size, image_format

    if mode == "unchanged" or image_format(data) != "JPEG":
        return None
    info = _jpeg_size(data)
    return (info[0], info[1]) if info and info[0] and info[1] else None  # 0: the decoders refuse it, naming it


def _decode_scaled(data: bytes, mode: str, name: str, h: int, w: int, f: int) -> np.ndarray:
    """The pixels of a JPEG whose frame header says ``h`` x ``w`` decoded at 1/f scale, as stored
    (not turned by its EXIF orientation)."""
    from datakit.io import _decode_image

    return _decode_image(data, mode, -(-max(h, w) // f) if f > 1 else None, name)[0]


def _leaves(t) -> Iterator[Callable]:
    """Every step inside ``t`` (RandomApply, RandomChoice, Compose, ...), or ``t`` itself."""
    inner = _tv_steps(t)
    if inner is None:
        yield t
    else:
        for s in inner:
            yield from _leaves(s)


def _check_augment(augment, size: tuple[int, int], channels: int = 3, draws: int = 1,
                   advice: str = "put float steps after the loader, or use normalize=True and a transform of your "
                   "own") -> list[Callable]:  # fmt: skip
    """The augmentations as a list, each tried on a uint8 CHW tensor of the crop's size (``channels``
    of it, ``draws`` times, each from its own seed), so that one refusing uint8 input fails here with
    its name, not in a worker at the first batch."""
    if augment is None:
        return []
    if callable(augment):
        augment = [augment]
    if isinstance(augment, (str, bytes)) or not hasattr(augment, "__iter__"):  # 'flip' is no list of steps
        raise TypeError(f"augment must be a list of callables (torchvision v2 transforms), got {augment!r}")
    steps = list(augment)
    for t in steps:
        if not callable(t):
            raise TypeError(f"augment must be a list of callables (torchvision v2 transforms), got {t!r}")
    probe = torch.full((channels, *size), 255, dtype=torch.uint8)  # white: 1.0 where a float step makes it 0-1

    def refused(t, exc: Exception) -> ValueError:
        return ValueError(f"augment step {t!r} does not accept the uint8 CHW tensor the pipeline gives it "
                          f"({type(exc).__name__}: {exc}); {advice}")  # fmt: skip

    def tensor(t, out):
        if not isinstance(out, torch.Tensor):
            raise ValueError(f"augment step {t!r} returned {type(out).__name__}, not a tensor")
        return out

    def applied(t, x):
        if x.dtype == torch.uint8:  # (inside a float round trip a fill on the 0-1 scale is the right one)
            _check_fill(t)
        elif x.is_floating_point() and x.numel():
            white = float(x.max())  # the probe's white: near 1 on the 0-1 scale (blurred, noised: 1.0000002, 1.3),
            if white <= 2.0:  # near 255 on a float crop of 0-255 levels (ToDtype without scale=True); between them,
                _check_fill(t, unit=True)  # a normalised crop, whose fill no rule here knows
            elif white >= 128:
                _check_fill(t, crop="float crop of 0-255 levels")
        try:
            return t(x)
        except Exception as exc:
            raise refused(t, exc) from None

    def mixed(t, dtype) -> None:
        """Refuse step ``t``, which leaves uint8 (for ``dtype``) on some draws only: a float step under RandomApply
        gave batches of crops on two scales (0-1 and 0-255), which the loader's normalisation cannot tell apart. A
        float round trip (ToDtype float, a float step, ToDtype uint8) is taken, and so are steps that make every crop
        float (the loader says it is float already)."""
        raise ValueError(f"augment step {' '.join(repr(t).split())} turns the uint8 crop into "
                         f"{str(dtype).removeprefix('torch.')} on some draws only, its batches then of two scales: "
                         "augment takes steps that keep uint8 (the loader's device= and normalize= convert and "
                         "normalise the batches); put float steps after the loader")  # fmt: skip

    def taken(t, x):
        """``t(x)`` with every random branch taken in turn: a RandomApply's steps applied (its p may skip them
        now, and not in a worker later), each of a RandomChoice's options; a Compose's steps in order."""
        inner = _tv_steps(t)
        kind = type(t).__name__
        if inner is None:
            return applied(t, x)
        if kind == "RandomChoice":
            outs = [tensor(s, taken(s, x)) for s in inner]
            if len({o.dtype for o in outs}) > 1:  # one option keeps uint8, another not: batches of two scales
                mixed(t, next(o.dtype for o in outs if o.dtype != torch.uint8))
            return outs[0]
        for s in inner:  # Compose, nn.Sequential, a RandomApply that applies, a RandomOrder in its listed order
            x = taken(s, x)
        return x

    def skipped(t, x):
        """``t(x)`` with every RandomApply skipped (each RandomChoice's first option): the other end of the draws."""
        inner = _tv_steps(t)
        kind = type(t).__name__
        if inner is None:
            return applied(t, x)
        if kind == "RandomApply":
            return x
        for s in inner[:1] if kind == "RandomChoice" else inner:
            x = skipped(s, x)
        return x

    for t in steps:
        for leaf in _leaves(t):
            if type(leaf).__name__ == "RandomErasing" and getattr(leaf, "value", 0) in (None, "random"):
                # on uint8, torchvision casts N(0, 1) noise to bytes: black and white specks, not noise
                raise ValueError(f"augment step {leaf!r} with value='random' paints uint8 crops with 0-3 and 253-255 "
                                 "(torchvision casts N(0, 1) noise to uint8); give value= a colour, or erase the "
                                 "normalised float batch after the loader")  # fmt: skip
    py_state, np_state = random.getstate(), np.random.get_state()  # (a step of the caller's may draw from them)
    with torch.random.fork_rng(devices=[]), _restored(py_state, np_state):  # trying them moves no caller's state
        for draw in range(draws):
            if draws > 1:
                torch.manual_seed(draw)
            x = every = none = probe  # as drawn now, with every random branch taken, and with none
            last = None  # the step after which the three last parted in dtype
            for t in steps:
                every = tensor(t, taken(t, every))  # each branch, on what the steps before give
                none = tensor(t, skipped(t, none))
                x = tensor(t, applied(t, x))
                if len({every.dtype, none.dtype, x.dtype}) > 1:
                    last = last or t
                else:
                    last = None  # together again: a float round trip on some draws ends here
            if last is not None:
                mixed(last, next(o.dtype for o in (every, none, x) if o.dtype != torch.uint8))
    return steps


def _fill_levels(step) -> tuple[str, list] | None:
    """The fill colour a torchvision step (or a subclass of one) paints an image with, as (the argument's name, its
    numbers): RandomErasing's ``value``, the geometric and auto-augment steps' ``fill`` (a dict's entry for images;
    not a mask's). None where there is none, or where it is not used (a padding mode other than constant)."""
    if not any(c.__module__.startswith("torchvision.") for c in type(step).__mro__[:-1]):
        return None  # a caller's own step may mean something else by fill
    name = "value" if isinstance(getattr(step, "value", None), (list, tuple, int, float)) else "fill"
    fill = getattr(step, name, None)
    if fill is None or isinstance(fill, str) or getattr(step, "padding_mode", "constant") != "constant":
        return None
    if isinstance(fill, dict):  # {tv_tensors.Image: 0, tv_tensors.Mask: 255}: the image's entry, else "others"
        keys = [k for k in fill if getattr(k, "__name__", k) in ("Image", "Tensor")] or [
            k for k in fill if k == "others"
        ]
        fill = [fill[k] for k in keys]
    found: list = []

    def numbers(v) -> None:
        if isinstance(v, (list, tuple)):
            for x in v:
                numbers(x)
        elif isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
            found.append(float(v))

    numbers(fill)
    return (name, found) if found else None


def _check_gray_fills(augment: list) -> None:
    """Refuse, at a gray image's first crop, a step whose fill has more levels than its one channel: torchvision
    refuses it whenever the step paints (RandomErasing when it erases, TrivialAugmentWide when it draws a rotation or
    a shear), so samples failed at random mid-epoch. Its other steps take one channel."""
    for t in augment:
        for leaf in _leaves(t):
            levels = _fill_levels(leaf)
            if levels is not None and len(levels[1]) > 1:
                name = levels[0]
                raise ValueError(f"augment step {' '.join(repr(leaf).split())} fills with {len(levels[1])} levels, "
                                 f"and this crop has 1 channel (a gray image): give the step's {name} one level "
                                 f"({name}=116), or read the images in mode 'rgb'")  # fmt: skip


def _check_fill(step, unit: bool = False, crop: str = "uint8 crop") -> None:
    """Refuse a step that paints the uint8 crop with a colour on the 0-1 scale of float images (ImageNet's mean,
    0.485, 0.456, 0.406, as float pipelines write it): torchvision casts it to 0, black. ``unit``: the step paints a
    float crop on the 0-1 scale (inside a float round trip), where a 0-255 level is painted as it is, far out of range:
    white once the crop is uint8 again."""
    levels = _fill_levels(step)
    if levels is None:
        return
    name, found = levels
    if unit:
        if any(v > 1 for v in found):
            first = next(v for v in found if v > 1)
            raise ValueError(f"augment step {' '.join(repr(step).split())} fills with {first:g}, a 0-255 level, the "
                             "float crop it paints having its white at 1 (as ToDtype(torch.float32, scale=True) makes "
                             "it): it is painted out of range, white once the crop is uint8 again: give the colour on "
                             f"the crop's own scale ({name}=[0.485, 0.456, 0.406] is ImageNet's mean on the 0-1 "
                             "scale)")  # fmt: skip
        return
    if all(0 <= v <= 1 for v in found) and any(not v.is_integer() for v in found):
        first = next(v for v in found if not v.is_integer())
        raise ValueError(f"augment step {' '.join(repr(step).split())} fills with {first:g}, a level on the 0-1 scale "
                         f"of float images, which the {crop} it paints takes as 0, black: give the colour in 0-255 "
                         f"({name}=[124, 116, 104] is ImageNet's mean)")  # fmt: skip


@contextlib.contextmanager
def _restored(py_state, np_state):
    """``random``'s and NumPy's global states put back as they were, however the block ends."""
    try:
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


_TV_CONVERTERS = ("ToImage", "ToPILImage", "ToTensor")  # torchvision steps that take a NumPy array in
_TV_CONTAINERS = ("Compose", "RandomApply", "RandomChoice", "RandomOrder")


def _tv_steps(t) -> list | None:
    """The steps inside a container transform (torchvision's or datakit's Compose, RandomApply,
    RandomChoice, RandomOrder, an ``nn.Sequential``), in order; None for a single step."""
    if isinstance(t, torch.nn.Sequential):
        return list(t)
    if type(t).__name__ in _TV_CONTAINERS or isinstance(t, Compose):
        steps = getattr(t, "transforms", None)
        if isinstance(steps, (list, tuple, torch.nn.ModuleList)):
            return list(steps)
    return None


def check_numpy_transform(transform) -> None:
    """Refuse a transform that gives a datakit dataset's uint8 HWC NumPy array to a torchvision
    step before any ``ToImage()``: v2 steps pass NumPy arrays through untouched (a crop, resize or
    colour jitter that silently does nothing), v1 steps fail on them at the first sample. A step of
    the user's own (a function, a ``Lambda``) may convert the array: nothing after it is judged."""
    from datakit.errors import UsageError

    def walk(t) -> bool:  # True: the array is converted from here on (or may be): stop looking
        steps = _tv_steps(t)
        kind = type(t).__name__
        if steps is not None:
            if kind == "RandomApply":  # its steps in order, and maybe none of them
                converts = any(walk(s) for s in steps)
                return converts and getattr(t, "p", 0.5) >= 1
            if kind in ("RandomChoice", "RandomOrder"):  # any one of them may come first
                converted = [walk(s) for s in steps]
                return all(converted) if kind == "RandomChoice" else any(converted)
            return any(walk(s) for s in steps)  # a Compose: in order (any() stops at the first converter)
        module = type(t).__module__ or ""
        if module.startswith("datakit."):  # datakit's NumPy steps keep the array; the rest give tensors
            return not isinstance(t, (Resize, CenterCrop, RandomResizedCrop, RandomHorizontalFlip, BGRToRGB))
        if kind == "Lambda" and module.startswith("torchvision.transforms.v2"):
            # v2.Lambda(f, torch.Tensor) passes anything not of its types through untouched
            return any(issubclass(np.ndarray, k) for k in getattr(t, "types", (object,)) if isinstance(k, type))
        if not module.startswith("torchvision.transforms") or kind in _TV_CONVERTERS or kind == "Lambda":
            return True
        if kind == "Identity":
            return False
        v2 = ".v2" in module
        first = "ToImage()" if v2 else "ToPILImage() or ToTensor()"
        raise UsageError(
            f"transform: torchvision's {'v2.' if v2 else 'transforms.'}{kind} comes before any {first}: a datakit "
            "dataset gives its transform "
            "a uint8 H x W x 3 NumPy array, which torchvision's v2 transforms pass through untouched (v1 ones refuse "
            "it); put v2.ToImage() first (transforms.ToPILImage() for v1), or use "
            "datakit.transforms.train_pipeline(224, augment=[...])"
        )

    if transform is not None and not hasattr(transform, "from_bytes"):
        walk(transform)


def _index_cache(where):
    if where is None:
        return None
    from datakit.indexcache import IndexCache

    if not isinstance(where, (IndexCache, str, os.PathLike)):
        raise ValueError(f"index_cache must be a folder's path (or None), got {where!r}")
    return where if isinstance(where, IndexCache) else IndexCache(where)


def _flag(name: str, value) -> bool:
    """A True/False option; a string is true to Python (normalize="no" normalised), so anything else is refused."""
    if not (isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and value in (0, 1))):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


class _Pipeline(Compose):
    """What the two pipelines share: per-sample normalisation that follows the dataset's channel order."""

    def __call__(self, x):
        if isinstance(x, np.ndarray):  # a C x H x W array (another loader's) read as H x W x C: 300 'channels'
            _refuse_chw(x, "train_pipeline" if isinstance(self, TrainPipeline) else "eval_pipeline", takes_chw=False)
        return super().__call__(x)

    def _set_norm(self, mean, std, normalize: bool, order: str | None) -> None:
        for name, value in (("mean", mean), ("std", std)):
            if isinstance(value, (str, bytes)):  # a preset's name is create_loader's normalize=, not the pipeline's
                raise ValueError(f"{name} must be one number per channel, got {value!r} (a preset such as "
                                 "'imagenet' goes to create_loader(..., normalize=...))")  # fmt: skip
        normalize = _flag("normalize", normalize)
        self.norm = Normalize(mean, std) if normalize else None
        # statistics the caller gave (order None) with uint8 output: the ones create_loader(device=...) normalises
        # the batches with, instead of its default (ImageNet's)
        self.batch_stats = None
        if not normalize and order is None:
            Normalize(mean, std)  # refused now, as normalize=True would refuse them
            as_list = lambda v: torch.as_tensor(v, dtype=torch.float64).flatten().tolist()  # noqa: E731
            self.batch_stats = (as_list(mean), as_list(std))
        # statistics of a known channel order (the ImageNet defaults: RGB) are reversed for a mode="bgr"
        # dataset, as create_loader does with the presets; statistics given as plain numbers are taken as given
        self.stats_order = order
        bgr = normalize and order == "RGB" and len(self.norm.mean) == 3
        self._norm_bgr = Normalize(self.norm.mean.flip(0).tolist(), self.norm.std.flip(0).tolist()) if bgr else None
        self._norm_rgb = self.norm  # what _norm_bgr reverses: a norm set later by hand is applied as given

    @property
    def transforms(self) -> list:
        """The steps, made from the pipeline's parts as they are now: ``pipe.augment = []`` (augmentations
        switched off for the last epochs) or ``pipe.norm = None`` holds for every image, JPEG or not."""
        return self._steps() + ([self.norm] if self.norm is not None else [])

    @transforms.setter
    def transforms(self, value) -> None:
        raise AttributeError(f"{type(self).__name__}'s steps are its parts: set crop, flip, augment or norm")

    def _norm_for(self, mode: str):
        """The normalisation for images of ``mode`` (the dataset's, which :meth:`from_bytes` is given)."""
        bgr = getattr(self, "_norm_bgr", None)  # None in a pipeline pickled by an earlier version
        # "unchanged" gives colour images as OpenCV stores them: BGR (BGRA)
        if mode in ("bgr", "unchanged") and bgr is not None and self.norm is getattr(self, "_norm_rgb", None):
            return bgr
        return self.norm

    def _whole(self, img, mode: str):
        """``self(img)`` for an image decoded whole, normalised for ``mode``."""
        norm = self._norm_for(mode)
        with _STEPS:
            for t in self.transforms:
                img = norm(img) if t is self.norm else t(img)
        return img


_CHANNELS_TRIED: set[tuple] = set()  # (pipeline, channels, steps) whose augmentations took such crops, in this process


class TrainPipeline(_Pipeline):
    """Random resized crop, flip, augmentations, CHW (and normalisation): see :func:`train_pipeline`.

    Given the encoded bytes (:meth:`from_bytes`, which datasets call when a transform has it),
    it draws the crop from the JPEG header's size first and decodes at the smallest DCT scale
    that still holds the crop's pixels at the output size: a 224 crop of a 4000 px photo is
    decoded at 1/8. The crop distribution is unchanged.
    """

    def __init__(self, size, scale, ratio, hflip, mean, std, normalize, interpolation="bilinear",
                 augment=None, index_cache=None, stats_order=None) -> None:  # fmt: skip
        self.crop = RandomResizedCrop(size, scale, ratio, interpolation)
        self.index_cache = _index_cache(index_cache)
        self.flip = RandomHorizontalFlip(hflip)
        self.augment = _check_augment(augment, self.crop.size)
        self._set_norm(mean, std, normalize, stats_order)

    @property
    def augment(self) -> list[Callable]:
        """The augmentations, a list; set at any time (``pipe.augment = []`` or ``None``: off for the last epochs),
        each new one tried as :func:`train_pipeline` tries them."""
        return self.__dict__["augment"]

    @augment.setter
    def augment(self, value) -> None:
        self.__dict__["augment"] = _check_augment(value, self.crop.size)

    def _steps(self) -> list:
        return [self.crop, self.flip, HWCToCHW(), *self.augment]

    def _check_channels(self, channels: int) -> None:
        """The augmentations tried on crops of ``channels`` (an RGBA image read in mode "unchanged") at the first
        such crop, 32 draws of each: torchvision's colour steps (ColorJitter, the auto-augment policies' colour
        operations) take 1 or 3 channels, and the crops they are drawn for failed at random, sample after sample."""
        key = (id(self), channels, tuple(id(t) for t in self.augment))  # (not in the pipeline: its state unchanged)
        if key in _CHANNELS_TRIED:
            return
        if channels == 1:  # torchvision's steps take one channel, but not a fill of three (the docs' ImageNet mean)
            _check_gray_fills(self.augment)
        else:
            _check_augment(self.augment, self.crop.size, channels, draws=32,
                           advice=f"this crop has {channels} channels (mode 'unchanged' keeps alpha), which "
                           "torchvision's colour steps refuse: read the images in mode 'rgb' for these "
                           "augmentations")  # fmt: skip
        _CHANNELS_TRIED.add(key)

    def _factor(self, ch: int, cw: int) -> int:
        """The DCT scale a crop of ``ch`` x ``cw`` is decoded at (1 for the nearest modes)."""
        th, tw = self.crop.size
        return _factor(ch, cw, th, tw) if self.crop.interpolation not in _NEAREST else 1

    def _finish(self, chw: torch.Tensor, mode: str) -> torch.Tensor:
        with _STEPS:
            return self._augmented(chw, mode)

    def _augmented(self, chw: torch.Tensor, mode: str) -> torch.Tensor:
        if self.augment and chw.shape[0] != 3:
            self._check_channels(chw.shape[0])
        if self.augment:
            # torchvision's colour steps (Grayscale, ColorJitter's hue and saturation, AutoAugment's, ...) take
            # the channels as RGB: a mode="bgr" (or "unchanged") image is augmented in RGB order, then put back
            swap = [2, 1, 0, 3][: chw.shape[0]] if mode in ("bgr", "unchanged") and chw.shape[0] in (3, 4) else None
            if swap is not None:
                chw = chw[swap]
            for t in self.augment:
                chw = t(chw)
            if swap is not None and chw.shape[0] == len(swap):  # Grayscale(1) leaves one channel: nothing to put back
                chw = chw[swap]
        norm = self._norm_for(mode)
        return norm(chw) if norm else chw

    def _whole(self, img, mode: str):
        """``self(img)`` for an image decoded whole, augmented and normalised for ``mode``."""
        with _STEPS:
            for t in self._steps()[: -len(self.augment) or None]:
                img = t(img)
        return self._finish(img, mode)

    def from_bytes(self, data: bytes, mode: str = "rgb", name: str | None = None):
        from datakit import io as dio

        if not isinstance(data, bytes):
            data = bytes(data)
        header = _jpeg_header(data, mode)
        if header is None:
            return self._whole(dio.decode_image(data, mode, name=name), mode)
        h, w = header
        orientation = dio._exif_orientation(data)
        th, tw = self.crop.size
        # the crop is drawn on the upright sides (orientations 5-8 swap them) and cut from the pixels as
        # stored, on the grid of the scale they are decoded at, where its last row and column may be short:
        # turned upright first, that short row or column would move to the top or left and the crop with it
        i, j, ch, cw = self.crop.get_params(*((w, h) if orientation >= 5 else (h, w)))
        f = _chroma_kept(self._factor(ch, cw), data, mode)
        sh, sw = -(-h // f), -(-w // f)
        y0, x0, y1, x1 = _scaled_box(*_stored_box(i, j, ch, cw, h, w, orientation), sh, sw, f)
        region = None
        if mode in dio._REGION_ORDER and dio.region_decoder_available():
            # the region decoder: only the crop's pixels, as stored, turned upright below
            index = self.index_cache.index(data, name) if self.index_cache is not None else None
            box = (y0, x0, y1, x1)
            try:
                region = dio._decode_region(data, h, w, mode, f, box, name, index, orientation != 1)
            except dio.ForeignIndex:  # a cached index of another file with this name, length and CRC-32 (forged)
                region = dio._decode_region(data, h, w, mode, f, box, name, None, orientation != 1)
            if region is not None:
                region = dio._orient(region, orientation)
        if region is None:  # not built, or an image it leaves to the whole-image decoders
            img = _decode_scaled(data, mode, name, h, w, f)
            if img.shape[:2] != (sh, sw):  # a decoder that reads another frame size than the header's
                return self._whole(dio.decode_image(data, mode, name=name), mode)
            region = dio._orient(img[y0:y1, x0:x1], orientation)
        flip = _coin() < self.flip.p
        chw = _antialiased(region, th, tw, self.crop.interpolation)
        if chw is not None:  # shrunk 2x or more: CHW already, flipped as such
            return self._finish(torch.flip(chw, [2]) if flip else chw, mode)
        chw = _planes(region, th, tw, self.crop.interpolation, flip)
        if chw is not None:  # bilinear: resized, mirrored and split into planes in one pass
            return self._finish(chw, mode)
        out = _resize(region, th, tw, self.crop.interpolation)
        if flip:
            import cv2

            if out is region:  # not resized: the decoder's pixels, maybe a view into a wider band
                out = cv2.flip(out, 1)
            else:  # the resize's own array: mirrored where it is
                out = cv2.flip(out, 1, dst=out)
        if out.ndim == 2:
            out = out[:, :, None]
        # a CHW view of the HWC pixels: the batch's stack does the one copy (and the transposition)
        return self._finish(torch.from_numpy(out).permute(2, 0, 1), mode)


class EvalPipeline(_Pipeline):
    """Resize the shorter side, centre crop, CHW (and normalisation): see :func:`eval_pipeline`;
    :meth:`from_bytes` decodes a JPEG at the smallest DCT scale that keeps twice the resized shorter side."""

    def __init__(self, size, resize, mean, std, normalize, interpolation="bilinear", antialias=True,
                 stats_order=None) -> None:  # fmt: skip
        self.resize, self.center = Resize(resize, interpolation, _flag("antialias", antialias)), CenterCrop(size)
        self._set_norm(mean, std, normalize, stats_order)

    def _steps(self) -> list:
        return [self.resize, self.center, HWCToCHW()]

    def from_bytes(self, data: bytes, mode: str = "rgb", name: str | None = None):
        from datakit.io import UNNAMED, decode_image

        shown = name if name is not None else UNNAMED  # (the dataset puts the file's name in for it)
        header = _jpeg_header(data, mode)
        if header is None or not isinstance(self.resize.size, int):
            img = decode_image(data, mode, name=name)
            if isinstance(self.resize.size, int):  # an image too narrow to resize: the image's fault, not a step's
                self.resize.output_size(*img.shape[:2], shown)
            return self._whole(img, mode)
        h, w = header
        short = self.resize.size
        # decoded at a DCT scale that keeps twice the resized side: the scaled decode (an 8 x 8 block's mean at
        # 1/8) is not torchvision's antialiased filter, and kept at 1-2x the side it was up to 66 levels off on
        # fine texture (mean 12); with twice the side, 4 (mean under 1)
        m = _EVAL_MARGIN * short
        f = (
            _chroma_kept(_factor(min(h, w), min(h, w), m, m), data, mode)
            if self.resize.interpolation not in _NEAREST
            else 1
        )
        th, tw = self.center.size
        from datakit.io import _exif_orientation

        orientation = _exif_orientation(data)
        if orientation >= 5:  # decoded upright: the sides the header gives, swapped
            h, w = w, h
        # the sizes torchvision resizes the whole image to, from its full sides; a decode at 1/f covers
        # ceil(side / f) * f full pixels (its last row and column partly past the edge), so it is resized
        # in proportion, to a little more than that, and the centre cut taken where the full image has it
        rh, rw = self.resize.output_size(h, w, shown)
        if rh < th or rw < tw:  # padded by the centre crop, as torchvision pads it: the whole image
            return self._whole(decode_image(data, mode, name=name), mode)
        if f > 1 and (h % f or w % f):
            out = self._scaled_partial(data, mode, name, f, h, w, rh, rw, orientation)
            if out is not None:
                return out
            return self._whole(decode_image(data, mode, name=name), mode)
        img = decode_image(data, mode, -(-max(h, w) // f) if f > 1 else None, name=name)
        sh, sw = img.shape[:2]
        rh2, rw2 = (round(sh * f * rh / h), round(sw * f * rw / w)) if f > 1 else (rh, rw)
        top, left = self.center.corner(rh, rw)
        if f > 1:  # the part past the edge is at the stored bottom and right: turned upright, maybe top or left
            top += rh2 - rh if orientation in (3, 4, 7, 8) else 0
            left += rw2 - rw if orientation in (2, 3, 6, 7) else 0
        chw = _antialiased(img, rh2, rw2, self.resize.interpolation, True) if self.resize.antialias else None
        if chw is None:
            chw = _planes(img, rh2, rw2, self.resize.interpolation)
        if chw is None:
            chw = HWCToCHW()(np.ascontiguousarray(_resize(img, rh2, rw2, self.resize.interpolation)))
        # resized straight into planes where it can be, then the centre cut: the pixels self(img) gives when
        # the image is decoded whole, without the round trip through HWC
        out = chw[:, top : top + th, left : left + tw].contiguous()
        norm = self._norm_for(mode)
        with _STEPS:
            return norm(out) if norm else out

    def _scaled_partial(self, data: bytes, mode: str, name, f: int, h: int, w: int, rh: int, rw: int,
                        orientation: int) -> torch.Tensor | None:  # fmt: skip
        """:meth:`from_bytes` for a JPEG decoded at 1/``f`` whose upright sides ``h`` x ``w`` are not both multiples
        of ``f``: the last row and column of the decode stand for ``f`` full pixels, part of them past the edge, so
        no whole number of output pixels matches the full image's resize to ``rh`` x ``rw``. Resized by the exact
        factors ``f * rh / h`` and ``f * rw / w`` instead (a size rounded to whole pixels shifted the centre cut by
        up to half an output pixel: 28 levels off on texture), with the part past the edge kept at the bottom and
        right, where those factors put it: the decode as stored, turned by its transposition only, resized, the
        centre cut taken where the flips put it and flipped. None where the filter is not torch's antialiased
        bilinear or bicubic, or the decode has other sides than the scale gives (the caller decodes it whole)."""
        from datakit.io import _decode_image

        interp = self.resize.interpolation
        if interp not in ("bilinear", "bicubic") or not self.resize.antialias:
            return None
        hs, ws = (w, h) if orientation >= 5 else (h, w)  # the sides as stored
        img, _ = _decode_image(data, mode, -(-max(hs, ws) // f), name)
        if img.dtype != np.uint8 or img.shape[:2] != (-(-hs // f), -(-ws // f)):
            return None
        if img.ndim == 2:
            img = img[:, :, None]
        if orientation >= 5:  # transposed to the upright axes: the part past the edge moves to the right or bottom
            img = img.swapaxes(0, 1)
        x = torch.from_numpy(img).permute(2, 0, 1)[None]
        scales = []
        for n, side, r in ((img.shape[0], h, rh), (img.shape[1], w, rw)):
            s = f * r / side
            while math.floor(n * s) < r:  # torch sizes its output floor(n * s): at least the full resize's
                s = math.nextafter(s, math.inf)
            scales.append(s)
        big = torch.nn.functional.interpolate(x, scale_factor=tuple(scales), mode=interp, antialias=True,
                                              recompute_scale_factor=False)[0]  # fmt: skip
        th, tw = self.center.size
        top, left = self.center.corner(rh, rw)
        vflip, hflip = orientation in (3, 4, 7, 8), orientation in (2, 3, 6, 7)
        y0, x0 = (rh - top - th if vflip else top), (rw - left - tw if hflip else left)
        out = big[:, y0 : y0 + th, x0 : x0 + tw]
        flips = [d for d, on in ((1, vflip), (2, hflip)) if on]
        out = torch.flip(out, flips) if flips else out.contiguous()
        norm = self._norm_for(mode)
        with _STEPS:
            return norm(out) if norm else out


def _defaults_order(mean, std) -> str | None:
    """ "RGB" for the default statistics (ImageNet's, in RGB order); None for statistics the caller gave."""
    return "RGB" if mean is IMAGENET_MEAN and std is IMAGENET_STD else None


def train_pipeline(size: int | Sequence[int] = 224, *, scale: tuple[float, float] = (0.08, 1.0),
                   ratio: tuple[float, float] = (3 / 4, 4 / 3), hflip: float = 0.5,
                   interpolation="bilinear", augment: Sequence[Callable] | Callable | None = None,
                   mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD,
                   normalize: bool = False, index_cache: str | os.PathLike | None = None) -> TrainPipeline:  # fmt: skip
    """ImageNet-style training input: random resized crop, horizontal flip, ``augment``, uint8 CHW.

    Used as a dataset's transform it decodes JPEGs only at the resolution the crop needs. The
    output stays uint8 (a quarter of float32's bytes through the workers); ``create_loader(...,
    device=...)`` normalises whole batches, on the GPU or on the CPU. ``normalize=True`` gives
    float32 normalised with ``mean``/``std`` (0-1 scale) per sample, as before. The default
    statistics (ImageNet's, in RGB order) are reversed for a ``mode="bgr"`` dataset's images, as
    ``create_loader`` does; statistics you give are applied in the order of the dataset's channels.

    Args:
        interpolation: ``"bilinear"`` (default), ``"bicubic"``, ``"nearest"``, ``"nearest-exact"``,
            ``"area"``/``"box"``, ``"lanczos"``, or a torchvision ``InterpolationMode``. Shrinking by
            2x or more is antialiased: bilinear and bicubic with torchvision's own antialiased kernels,
            lanczos with OpenCV's area filter; the nearest modes pick pixels as torch picks them.
        augment: transforms applied, in order, to each flipped crop as a uint8 CHW tensor:
            torchvision v2 transforms that accept uint8 (``TrivialAugmentWide``, ``RandAugment``,
            ``AutoAugment``, ``AugMix``, ``ColorJitter``, ``RandomErasing``, ...). Each is tried once
            here, so one that refuses uint8 fails now, naming itself.
        index_cache: a folder (created if missing) where each JPEG's entropy index is kept, built
            the first time the image is read: from the second epoch on, each crop is decoded from
            the MCUs around it alone (:mod:`datakit.indexcache`). The same pixels; the first epoch
            is slower, the later ones faster (docs/benchmarks.md). Shared by all workers and runs.
    """
    size = _plain_size(size)
    _crop_in_budget(size, "train_pipeline")
    order = _defaults_order(mean, std)
    return TrainPipeline(size, scale, ratio, hflip, mean, std, normalize, interpolation, augment, index_cache, order)


def eval_pipeline(size: int | Sequence[int] = 224, resize: int | None = None, *, interpolation="bilinear",
                  mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD,
                  normalize: bool = False, antialias: bool = True) -> EvalPipeline:  # fmt: skip
    """ImageNet-style evaluation input: shorter side to ``resize``, centre crop ``size``, uint8 CHW
    (float32 normalised with ``normalize=True``, the statistics' order as in :func:`train_pipeline`);
    ``interpolation`` as in :func:`train_pipeline`.

    ``antialias=True`` (default) resizes with torchvision's own kernel at any factor: the pixels of
    ``v2.Compose([v2.Resize(resize), v2.CenterCrop(size)])`` on the decoded image (a JPEG of 1024 px or more
    on its shorter side, for 256, is decoded at a reduced DCT scale first, which is not: a few levels off on
    average, more at the sharpest edges). ``False``: plain bilinear under
    a 2x shrink, as the training crops, about 0.8x the time a sample and up to 8 levels from torchvision's pixels.

    ``resize`` defaults to ``size * 256 / 224`` (rounded down; the longer side of a ``(h, w)``
    crop), the ratio of torchvision's reference recipe: 256 for 224, 146 for 128, so the crop
    keeps 87.5% of the shorter side at any size instead of zooming in on the centre.
    """
    size, resize = _plain_size(size), _plain_size(resize)
    _crop_in_budget(size, "eval_pipeline")  # the crop, said as given (not as the resize computed from it)
    whole = lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and v >= 1  # noqa: E731
    pair = isinstance(resize, (tuple, list)) and len(resize) == 2 and all(whole(v) for v in resize)
    if resize is not None and not whole(resize) and not pair:  # (h, w) too, as v2.Resize takes it
        raise ValueError(f"resize must be the shorter side in whole pixels >= 1, or (height, width) (None: size * "
                         f"256 / 224), got {resize!r}")  # fmt: skip
    resize = int(resize) if whole(resize) else resize
    if resize is None:
        side = size if isinstance(size, int) else max(size)
        resize = int(side * 256 / 224)
    crop = (size, size) if isinstance(size, int) else tuple(size)
    if isinstance(resize, int) and not isinstance(resize, bool) and crop and 1 <= resize < min(crop):
        warnings.warn(f"eval_pipeline(size={size!r}, resize={resize}): the shorter side resized to {resize} is less "
                      f"than the crop, so the centre crop pads every image with black borders (as torchvision's "
                      f"CenterCrop does); size and resize swapped? (eval_pipeline(224, 256): resize to 256, crop "
                      "224)", stacklevel=2)  # fmt: skip
    return EvalPipeline(size, resize, mean, std, normalize, interpolation, antialias, _defaults_order(mean, std))
