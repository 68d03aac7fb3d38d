"""Model-ready batches on the device: :class:`DeviceLoader` (what ``create_loader(...,
device=...)`` returns) and :class:`CUDAPrefetcher`, which overlaps the host-to-device copy with
compute.

While the model works on batch k, batch k+1 is copied on a side CUDA stream from pinned memory
(``non_blocking=True``). Images travel as uint8, a quarter of float32's bytes, and are converted
and normalised on the GPU; on the CPU, a uint8 batch is normalised in one table-lookup pass.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
import weakref
from collections.abc import Callable, Sequence

import numpy as np
import torch

from datakit.transforms import _mixed_message, mixed_scales, on_255_scale

__all__ = ["CUDAPrefetcher", "DeviceLoader", "channels_first", "check_device", "resolve_normalize"]


class CUDAPrefetcher:
    """Wraps a loader; yields its batches already on ``device``, images normalised there.

    The first tensor of a batch whose dtype is uint8 and which has 4 dimensions is taken as the
    images: converted to float, scaled by 1/255 when ``mean``/``std`` are on the 0-1 scale,
    normalised, and made ``channels_last`` when asked. Every other tensor (nested in tuples,
    lists or dicts) is moved as it is. ``convert=False`` moves the images as uint8 too (what
    ``create_loader(..., device="cuda", normalize=False)`` asks for). Memory stays safe across
    streams: each tensor is marked with ``record_stream`` for the stream that uses it.

    It drops in for the loader (``len``, ``sampler``, ``dataset``, ``batch_size`` are forwarded),
    and without CUDA it passes batches through unchanged.
    """

    def __init__(self, loader, device: str | torch.device = "cuda", mean: Sequence[float] | None = None,
                 std: Sequence[float] | None = None, channels_last: bool = False,
                 convert: bool = True) -> None:  # fmt: skip
        self.loader = loader
        self.device = torch.device(device)
        self.enabled = self.device.type == "cuda" and torch.cuda.is_available()
        self.channels_last = channels_last
        self.convert = convert
        if not convert and mean is not None:
            raise ValueError("convert=False keeps uint8 images, which cannot be normalised: drop mean and std")
        self.mean = self.std = None
        if (mean is None) != (std is None):
            raise ValueError("give both mean and std, or neither")
        if mean is not None:
            m = torch.as_tensor(mean, dtype=torch.float32)
            s = torch.as_tensor(std, dtype=torch.float32)
            if not on_255_scale(m, s):  # 0-1 statistics: compare with uint8 pixels on their own scale
                m, s = m * 255, s * 255
            self.mean, self.std = m.view(1, -1, 1, 1), s.view(1, -1, 1, 1)
            if self.enabled:
                self.mean, self.std = self.mean.to(self.device), self.std.to(self.device)
        self.stream = torch.cuda.Stream(device=self.device) if self.enabled else None

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str):
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def _move(self, obj, state: dict):
        if isinstance(obj, torch.Tensor):
            t = obj.to(self.device, non_blocking=True)
            if not state["images_done"] and obj.dtype == torch.uint8 and obj.ndim == 4:
                state["images_done"] = True
                if not self.convert:
                    return t.contiguous(memory_format=torch.channels_last) if self.channels_last else t
                if channels_first(obj, None if self.mean is None else self.mean.shape[1]) is not obj:
                    t = t.permute(0, 3, 1, 2)  # NHWC uint8 batches (stacked numpy images) to NCHW
                t = t.float()
                if self.mean is not None:
                    t = t.sub_(self.mean).div_(self.std)
                else:
                    t = t.div_(255)
                if self.channels_last:
                    t = t.contiguous(memory_format=torch.channels_last)
                if self.mean is not None:
                    t._datakit_normalized = True  # Normalize leaves such a batch alone
            return t
        if isinstance(obj, dict):
            return {k: self._move(v, state) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            moved = [self._move(v, state) for v in obj]
            if hasattr(obj, "_fields"):  # a namedtuple keeps its type and field names
                return type(obj)(*moved)
            return tuple(moved) if isinstance(obj, tuple) else moved
        return obj

    def _preload(self, it):
        try:
            batch = next(it)
        except StopIteration:
            return None
        with torch.cuda.stream(self.stream):
            return self._move(batch, {"images_done": False})

    def _record(self, obj, stream) -> None:
        if isinstance(obj, torch.Tensor):
            if obj.is_cuda:
                obj.record_stream(stream)
        elif isinstance(obj, dict):
            for v in obj.values():
                self._record(v, stream)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                self._record(v, stream)

    def __iter__(self):
        if not self.enabled:
            yield from self.loader
            return
        it = iter(self.loader)
        nxt = self._preload(it)
        while nxt is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(self.stream)
            batch = nxt
            self._record(batch, current)
            nxt = self._preload(it)
            yield batch


def check_device(device: str | torch.device) -> torch.device:
    """``device`` as a torch.device that batches can be loaded onto here; a UsageError naming
    what is wrong otherwise (a malformed name, no CUDA, a GPU index this machine lacks)."""
    from datakit.errors import UsageError

    if isinstance(device, bool) or not isinstance(device, (str, int, torch.device)):
        raise UsageError(f"device must be 'cpu', 'cuda', 'cuda:N' or a torch.device, got {device!r}")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError, OverflowError) as exc:
        raise UsageError(f"device={device!r}: {str(exc).splitlines()[0]}") from None
    if dev.type not in ("cpu", "cuda"):
        raise UsageError(f"device={str(device)!r}: datakit loads onto 'cpu' or 'cuda' devices")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"device={str(dev)!r} but CUDA is not available here; pass device='cpu' (--device cpu)")
        count = torch.cuda.device_count()  # does not start CUDA
        if dev.index is not None and dev.index >= count:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            seen = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
            raise UsageError(f"device={str(dev)!r} but CUDA sees {count} GPU{'s' if count != 1 else ''}{seen}: "
                             f"use cuda:0 to cuda:{count - 1}")  # fmt: skip
    return dev


def _outside_datakit() -> int:
    """The ``stacklevel`` of a warning warned here that names the first caller outside datakit (the user's line)."""
    here = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == here:
        frame, level = frame.f_back, level + 1
    return level


def stats_file(normalize):
    """``normalize`` given as the path of a JSON file of statistics (what ``datakit stats --json`` writes: its
    ``mean``, ``std`` and ``order``) as that file's object; anything else as it is."""
    from datakit.errors import UsageError
    from datakit.stats import PRESETS

    if not isinstance(normalize, (str, os.PathLike)) or (isinstance(normalize, str) and normalize in PRESETS):
        return normalize
    path = os.fspath(normalize)
    if not path.lower().endswith(".json") and not os.path.isfile(path):
        return normalize  # an unknown preset's name, said as such
    try:
        with open(path, encoding="utf-8-sig") as f:
            obj = json.load(f)
    except FileNotFoundError:
        raise UsageError(f"normalize={path!r}: no such file (a preset name, (mean, std), or the JSON file "
                         "'datakit stats --json' writes)") from None  # fmt: skip
    except (OSError, ValueError) as exc:
        raise UsageError(f"normalize={path!r}: cannot be read as JSON ({exc})") from None
    if not isinstance(obj, dict) or not {"mean", "std"} <= obj.keys():
        raise UsageError(f"normalize={path!r}: no 'mean' and 'std' in it (the file 'datakit stats --json' writes "
                         "has both)")  # fmt: skip
    return obj


def resolve_normalize(normalize) -> tuple[list[float], list[float]] | None:
    """``normalize`` as (mean, std), or None for no normalisation.

    Accepts True or ``"imagenet"`` (torchvision's ImageNet statistics), a name in
    :data:`datakit.stats.PRESETS`, a ``(mean, std)`` pair on the 0-1 or the 0-255 scale, an
    object with ``mean`` and ``std`` (a :class:`~datakit.stats.Stats`), or False/None.
    """
    from datakit.errors import UsageError

    if normalize is None or normalize is False:
        return None
    if normalize is True:
        normalize = "imagenet"
    normalize = stats_file(normalize)
    if isinstance(normalize, str):
        from datakit.stats import PRESETS

        if normalize not in PRESETS:
            raise UsageError(f"normalize={normalize!r}: unknown preset; known: {', '.join(PRESETS)} (or the path "
                             "of the JSON file 'datakit stats --json' writes)")  # fmt: skip
        return list(PRESETS[normalize]["mean"]), list(PRESETS[normalize]["std"])
    if isinstance(normalize, dict) and {"mean", "std"} <= normalize.keys():  # a PRESETS entry, JSON of stats
        mean, std = normalize["mean"], normalize["std"]
    elif isinstance(normalize, (np.ndarray, torch.Tensor)):  # one 2 x C array: its rows (its .mean is a method)
        if normalize.ndim != 2 or normalize.shape[0] != 2:
            raise UsageError(f"normalize as one array must be 2 x C (the mean's row, then the std's), got shape "
                             f"{tuple(normalize.shape)}")  # fmt: skip
        mean, std = normalize[0].tolist(), normalize[1].tolist()
    elif hasattr(normalize, "mean") and hasattr(normalize, "std"):
        mean, std = normalize.mean, normalize.std
    else:
        try:
            mean, std = normalize
        except (TypeError, ValueError):
            raise UsageError(
                f"normalize must be True, a preset name, (mean, std) or Stats, got {normalize!r}"
            ) from None
    try:
        mean, std = [float(m) for m in mean], [float(s) for s in std]
    except (TypeError, ValueError):  # (0.5, 0.5): two numbers, not two lists of one per channel
        raise UsageError(f"normalize must be True, a preset name, (mean, std) with one value per channel in each, "
                         f"or Stats; got {normalize!r}") from None  # fmt: skip
    if len(mean) != len(std) or not mean:
        raise UsageError(f"normalize: mean and std need one value per channel, got {mean} and {std}")
    if min(std) <= 0 or not all(map(math.isfinite, std)):
        raise UsageError(f"normalize: std must be positive and finite, got {std}")
    if not all(map(math.isfinite, mean)):
        raise UsageError(f"normalize: mean must be finite, got {mean}")
    if (why := mixed_scales(mean, std)) is not None:  # a warning: data in its own units may be so
        said = _mixed_message(why, "normalize=False and datakit.transforms.Normalize(mean, std, scale=...) in the "
                              "loop take them without a word")  # fmt: skip
        warnings.warn("normalize: " + said, stacklevel=_outside_datakit())
    return mean, std


def channels_first(images: torch.Tensor, channels: int | None = None) -> torch.Tensor:
    """A 4-D batch of images as N x C x H x W: one stacked from HWC arrays (N x H x W x C, what
    ``default_collate`` makes of them) is permuted (a view). ``channels``: how many there are
    (the statistics'), else 1, 3 or 4. Where dimension 1 and dimension 3 could both be the
    channels (a 3-pixel-high crop of an RGB image), it refuses rather than guess."""
    from datakit.errors import UsageError

    known = (channels,) if channels else (1, 3, 4)
    first, last = images.shape[1] in known, images.shape[3] in known
    if first and last:
        raise UsageError(f"a batch of images of shape {tuple(images.shape)}: its channels could be dimension 1 "
                         "or 3; make the images C x H x W in the transform (datakit.transforms.HWCToCHW), so "
                         "that batches are N x C x H x W")  # fmt: skip
    if channels and channels > 1 and last and not first and images.shape[1] == 1:
        # (4, 1, 40, 3): gray images 3 pixels wide (what a gray pipeline gives), or RGB images 1 pixel high?
        # Read either way, the statistics apply; the second is all but never meant
        raise UsageError(
            f"a batch of images of shape {tuple(images.shape)}: 1-channel images (C x H x W) {images.shape[3]} "
            f"pixels wide, or {channels}-channel images (H x W x C) 1 pixel high? The {channels} channels of the "
            "statistics fit only the second; make the images C x H x W in the transform "
            "(datakit.transforms.HWCToCHW), and pass statistics for their channels"
        )
    if channels and not first and not last:  # gray or RGBA images against RGB statistics
        raise UsageError(
            f"a batch of images of shape {tuple(images.shape)}: neither dimension 1 (C x H x W) nor dimension 3 "
            f"(H x W x C) is {channels}, the channels the statistics are for; give the images {channels} channels in "
            "the transform (gray or RGBA?), or pass statistics for theirs"
        )
    return images.permute(0, 3, 1, 2) if last else images


_IMAGE_KEYS = ("image", "images", "img", "imgs", "pixel_values")


def _find_images(obj):
    """The first uint8 tensor with 4 dimensions (the batch's images), depth first, or None. Where the batch
    names its images (a dict's ``"image"``) or leads with them (a tuple's first field) and they are no uint8
    batch (float already), None: a uint8 tensor further on is another field (a mask, a target), never to be
    normalised in their place."""
    if isinstance(obj, torch.Tensor):
        return obj if obj.dtype == torch.uint8 and obj.ndim == 4 else None
    if isinstance(obj, dict):
        named = next((obj[k] for k in _IMAGE_KEYS if isinstance(obj.get(k), torch.Tensor)), None)
        if named is not None:
            return _find_images(named)
        obj = obj.values()
    elif not isinstance(obj, (list, tuple)) or _leads_with_float_images(obj):
        return None
    for v in obj:
        found = _find_images(v)
        if found is not None:
            return found
    return None


def _leads_with_float_images(fields) -> bool:
    first = fields[0] if fields else None
    return isinstance(first, torch.Tensor) and first.ndim == 4 and first.dtype != torch.uint8


def _replace(obj, old: torch.Tensor, new: torch.Tensor):
    """``obj`` with the tensor ``old`` swapped for ``new`` (tuples, lists, dicts, namedtuples kept)."""
    if obj is old:
        return new
    if isinstance(obj, dict):
        return {k: _replace(v, old, new) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [_replace(v, old, new) for v in obj]
        if hasattr(obj, "_fields"):
            return type(obj)(*items)
        return tuple(items) if isinstance(obj, tuple) else items
    return obj


def _source(loader, infinite: bool):
    # each batch travels with the loader's state right after it, so the state handed out
    # is that of the last batch the caller got, whatever is held ahead
    if infinite:
        while True:
            batch = next(loader)
            yield {"state": loader.state_dict()}, batch
    else:
        for batch in loader:
            yield None, batch


def _first_tensor(obj, want: Callable[[torch.Tensor], bool]) -> torch.Tensor | None:
    if isinstance(obj, torch.Tensor):
        return obj if want(obj) else None
    if isinstance(obj, dict):
        obj = obj.values()
    elif not isinstance(obj, (list, tuple)):
        return None
    return next((t for t in (_first_tensor(v, want) for v in obj) if t is not None), None)


def check_images(batch, explicit: bool) -> None:
    """Before a loader's first batch is normalised: images ``normalize=`` cannot apply to are
    refused (when it was asked for) or named in a warning (the default statistics), never passed
    on as they are without a word. Float images (a transform made them float) are moved as they
    are; uint8 images without a channel dimension cannot be normalised per channel."""
    from datakit.errors import UsageError

    if _find_images(batch) is not None:
        return
    images = _first_tensor(batch, lambda t: t.ndim == 4 and t.dtype not in (torch.uint8, torch.bool))
    if images is not None:
        dtype = str(images.dtype).removeprefix("torch.")
        if images.dtype == torch.uint16:  # 16 bits: a PNG or TIFF read as stored
            what = "the images are uint16 (16-bit PNG or TIFF read with mode='unchanged'?)"
        values = (
            images if images.is_floating_point() or images.is_signed() else images.to(torch.int64)
        )  # uint16: no min
        lo, hi = (float(values.min()), float(values.max())) if images.numel() else (0.0, 0.0)
        if images.dtype != torch.uint16 and images.is_floating_point() and lo < 0:  # normalised once already
            what = (f"the images are {dtype} and normalised already (values {lo:.3g} to {hi:.3g}: the pipeline's "
                    "normalize=True, or a Normalize step in the transform?)")  # fmt: skip
        elif images.dtype != torch.uint16:
            kind = "float" if images.is_floating_point() else dtype
            what = f"the images are {dtype} already (a transform made them {kind}: an augment step's ToDtype?)"
        if explicit:
            raise UsageError(f"{what}; normalize= normalises uint8 images: return uint8 from the transform "
                             "(train_pipeline and eval_pipeline do) or pass normalize=False")  # fmt: skip
        if not images.is_floating_point() or (lo >= 0 and hi <= 255):  # pixel values, not normalised ones
            scale = "0..1" if hi <= 1 else "0..255" if hi <= 255 else f"{lo:g}..{hi:g}"
            warnings.warn(f"{what}, in {scale}: they reach the model as they are, not normalised; return uint8 from "
                          "the transform to have them normalised, or normalise them there", stacklevel=3)  # fmt: skip
        return
    flat = _first_tensor(batch, lambda t: t.ndim == 3 and t.dtype == torch.uint8)
    if flat is not None:
        raise UsageError(f"a batch of uint8 images of shape {tuple(flat.shape)} has no channel dimension, so "
                         "normalize= cannot apply per channel: make each image C x H x W in the transform "
                         "(datakit.transforms.HWCToCHW), or pass normalize=False")  # fmt: skip


def _checked(source, explicit: bool):
    """``source`` with the first batch of each epoch checked (:func:`check_images`): a finite loader's pass is one
    epoch; an infinite one's batches carry the epoch they belong to (a transform set between epochs is checked)."""
    seen = object()
    for item in source:
        epoch = item[0]["state"].get("epoch") if item[0] else None
        if epoch != seen:
            check_images(item[1], explicit)
            seen = epoch
        yield item


def _device_batches(owner, loader, infinite, device, mean, std, channels_last, explicit=False):
    """The batches of a :class:`DeviceLoader` (``owner()``), holding no reference to it across a
    yield: an infinite one keeps this generator, and the two would otherwise live until a garbage
    collection, its workers with them."""
    source = _source(loader, infinite)
    if mean is not None:
        source = _checked(source, explicit)
    if device.type == "cuda":
        pre = CUDAPrefetcher(source, device, mean, std, channels_last, convert=mean is not None)
        for state, batch in pre:  # normalize=False: uint8, as on the CPU
            dl = owner()
            if dl is None:
                return
            dl._state = state["state"] if state else None
            del dl
            yield batch
    else:
        source = iter(source)
        while True:
            start = time.perf_counter()
            try:
                state, batch = next(source)
            except StopIteration:
                return
            waited = time.perf_counter() - start  # how long the loop waited for the workers
            dl = owner()
            if dl is None:
                return
            dl._state = state["state"] if state else None
            out = dl._cpu(batch, waited)
            del dl
            yield out


_FINITE = "a finite loader's epoch is chosen with loader.epoch = e"


class DeviceLoader:
    """Wraps a loader (finite, or an :class:`~datakit.loader.InfiniteLoader`) and yields its
    batches on ``device``, the images (the first uint8 NCHW tensor of a batch) converted to
    float32 and normalised with ``mean``/``std`` there. Images that are already float (a
    pipeline that normalises per sample) are moved as they are: nothing is normalised twice.

    On CUDA it is a :class:`CUDAPrefetcher` (uint8 copy on a side stream, normalised on the
    GPU). On the CPU a uint8 batch is normalised by :class:`~datakit.transforms.Normalize`: one
    256-entry table per channel, one pass, in the calling process, which measured fastest on
    the CPU (see docs/benchmarks.md), on the threads :meth:`_norm_threads` gives. ``len``,
    ``dataset``, ``sampler``, ``batch_size`` and an infinite loader's ``epoch``, ``step``,
    ``state_dict()`` and ``load_state_dict()`` are forwarded; the state counts the batches this
    wrapper has handed out, not the one it holds ahead, so a job resumed from it continues with
    the exact next batch.
    """

    def __new__(cls, loader, *args, **kwargs):
        # state_dict and load_state_dict are on an infinite loader's class only: a finite one has none (hasattr(),
        # and a Protocol's isinstance(), which looks at the class: Lightning saved the state of any loader whose class
        # had state_dict, and a finite one's raised at the first checkpoint)
        if hasattr(loader, "state_dict") and not issubclass(cls, _ResumableDeviceLoader):
            if cls not in _RESUMABLE:  # a caller's subclass: the same, with the state methods
                _RESUMABLE[cls] = type(cls.__name__, (cls, _ResumableDeviceLoader), {"__module__": cls.__module__})
            cls = _RESUMABLE[cls]
        return super().__new__(cls)

    def __init__(self, loader, device: str | torch.device = "cpu", mean: Sequence[float] | None = None,
                 std: Sequence[float] | None = None, channels_last: bool = False,
                 explicit: bool = False) -> None:  # fmt: skip
        self.loader = loader
        self.explicit = explicit  # the statistics were asked for (normalize=), not the default
        self.device = check_device(device)
        if (mean is None) != (std is None):
            raise ValueError("give both mean and std, or neither")
        self.mean, self.std, self.channels_last = mean, std, channels_last
        self.infinite = hasattr(loader, "state_dict")
        self._cpu_norm = None
        if self.device.type == "cpu" and mean is not None:
            from datakit.transforms import Normalize

            self._cpu_norm = Normalize(mean, std, scale=255 if on_255_scale(mean, std) else 1)  # (judged once)
        self._cpus: int | None = None
        self._threads = 0  # normalising threads used for the last batch (0: none yet)
        self._norm_s: float | None = None  # the time the last batch's normalisation took
        self._state = loader.state_dict() if self.infinite else None
        self._gen = None

    def _spare_threads(self) -> int:
        """Threads for normalising a batch: 1, plus the CPUs that neither the loop nor the
        workers use (none on a machine the workers fill), at most 4."""
        if self._cpus is None:
            from datakit.parallel import usable_cpus

            self._cpus = usable_cpus()
        workers = getattr(self.loader, "num_workers", 0) or 0  # re-read: re-tuning changes it
        return max(1, min(4, self._cpus - workers))

    def _norm_threads(self, waited: float) -> int:
        """Threads for normalising the next batch: the spare CPUs (:meth:`_spare_threads`) while the
        loop waits for the workers; while batches are ready before the loop asks for them (it waited
        under a tenth of a normalisation), the workers are ahead and idle in part, and the loop is what
        limits: one thread more each batch, up to half the CPUs (at most 4); back down, not under the
        spare ones, when the loop waits longer than a normalisation takes."""
        base = self._spare_threads()
        cap = max(base, min(4, self._cpus // 2))
        if not self._threads or self._norm_s is None:
            return base
        if waited < 0.1 * self._norm_s:
            return min(cap, max(base, self._threads + 1))
        if waited > self._norm_s:
            return max(base, min(cap, self._threads - 1))
        return min(cap, max(base, self._threads))

    def _cpu(self, batch, waited: float | None = None):
        images = _find_images(batch)
        if images is not None:
            out = images
            if self._cpu_norm is not None:
                start = time.perf_counter()
                self._threads = self._spare_threads() if waited is None else self._norm_threads(waited)
                self._cpu_norm.threads = self._threads
                out = self._cpu_norm(channels_first(images, len(self.mean)).contiguous())
                self._norm_s = time.perf_counter() - start
            if self.channels_last:
                out = out.contiguous(memory_format=torch.channels_last)
            if self._cpu_norm is not None:
                out._datakit_normalized = True  # Normalize leaves such a batch alone
            batch = _replace(batch, images, out)
        return batch

    def _generate(self, owner=None):
        return _device_batches(owner or (lambda: self), self.loader, self.infinite, self.device, self.mean, self.std,
                               self.channels_last, self.explicit)  # fmt: skip

    def __iter__(self):
        if self.infinite:
            return self
        return self._generate()

    def __next__(self):
        if not self.infinite:
            raise TypeError("iterate a finite DeviceLoader with for or iter()")
        if self._gen is None:
            # held here and referring back only weakly: dropping this loader ends it and its workers at
            # once, not at the next garbage collection
            self._gen = self._generate(weakref.ref(self))
        try:
            return next(self._gen)
        except BaseException:
            # the generator ended with the error (a dead worker, a bad sample, Ctrl-C) and would
            # only stop from now on: the next call starts again after the last batch handed out,
            # which the loader then reads again from the one that failed
            self._gen = None
            if self._state is not None:
                self.loader.load_state_dict(self._state)
            raise

    def __len__(self) -> int:
        return len(self.loader)

    def __reduce_ex__(self, protocol):
        from datakit.loader import _UNPICKLABLE

        raise TypeError(_UNPICKLABLE.format(type(self).__name__.lstrip("_").removeprefix("Resumable")))

    @property
    def epoch(self) -> int:
        return self._state["epoch"] if self.infinite else self.loader.epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        """The epoch the next pass serves (``loader.epoch = 3``, a job resumed), as on the loader it wraps."""
        if self.infinite:
            self.load_state_dict({"epoch": int(value), "step": 0})
        else:
            self.loader.epoch = int(value)

    @property
    def step(self) -> int:
        return self._state["step"] if self.infinite else self.loader.step

    def __getattr__(self, name: str):
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __repr__(self) -> str:
        norm = f"mean={self.mean}, std={self.std}" if self.mean is not None else "no normalisation"
        return f"DeviceLoader(device={str(self.device)!r}, {norm})"


_RESUMABLE: dict[type, type] = {}  # each DeviceLoader class -> the same over an infinite loader


class _ResumableDeviceLoader(DeviceLoader):
    """A :class:`DeviceLoader` over an infinite loader: its state is the batches handed out, not those held ahead."""

    def state_dict(self) -> dict:
        return dict(self._state)

    def load_state_dict(self, state: dict) -> None:
        self._gen = None  # drop what was held ahead; the loader restarts from the state
        self.loader.load_state_dict(state)
        self._state = self.loader.state_dict()


_RESUMABLE[DeviceLoader] = _ResumableDeviceLoader
