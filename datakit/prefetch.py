"""Overlapping the host-to-device copy with compute: :class:`CUDAPrefetcher`.

While the model works on batch k, batch k+1 is copied on a side CUDA stream from pinned memory
(``non_blocking=True``). Images travel as uint8, a quarter of float32's bytes, and are converted
and normalised on the GPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["CUDAPrefetcher"]


class CUDAPrefetcher:
    """Wraps a loader; yields its batches already on ``device``, images normalised there.

    The first tensor of a batch whose dtype is uint8 and which has 4 dimensions is taken as the
    images: converted to float, scaled by 1/255 when ``mean``/``std`` are on the 0-1 scale,
    normalised, and made ``channels_last`` when asked. Every other tensor (nested in tuples,
    lists or dicts) is moved as it is. Memory stays safe across streams: each tensor is marked
    with ``record_stream`` for the stream that uses it.

    It drops in for the loader (``len``, ``sampler``, ``dataset``, ``batch_size`` are forwarded),
    and without CUDA it passes batches through unchanged.
    """

    def __init__(self, loader, device: str | torch.device = "cuda", mean: Sequence[float] | None = None,
                 std: Sequence[float] | None = None, channels_last: bool = False) -> None:  # fmt: skip
        self.loader = loader
        self.device = torch.device(device)
        self.enabled = self.device.type == "cuda" and torch.cuda.is_available()
        self.channels_last = channels_last
        self.mean = self.std = None
        if (mean is None) != (std is None):
            raise ValueError("give both mean and std, or neither")
        if mean is not None:
            m = torch.as_tensor(mean, dtype=torch.float32)
            s = torch.as_tensor(std, dtype=torch.float32)
            if m.max() <= 1.0:  # 0-1 statistics: compare with uint8 pixels on their own scale
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
                if obj.shape[-1] in (1, 3) and obj.shape[1] not in (1, 3):
                    t = t.permute(0, 3, 1, 2)  # NHWC uint8 batches (stacked numpy images) to NCHW
                t = t.float()
                if self.mean is not None:
                    t = t.sub_(self.mean).div_(self.std)
                else:
                    t = t.div_(255)
                if self.channels_last:
                    t = t.contiguous(memory_format=torch.channels_last)
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
