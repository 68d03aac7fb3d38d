"""Choosing GPUs before CUDA starts: ``CUDA_VISIBLE_DEVICES`` only counts if set before then.

CUDA reads ``CUDA_VISIBLE_DEVICES`` once, when the driver initialises in the process (the
first ``torch.cuda`` call that touches a device, not ``import torch``). Setting it later is
silently ignored and the job lands on the wrong card. The default device order is "fastest
first", which need not match ``nvidia-smi``; ``PCI_BUS_ID`` makes the numbers agree.
"""

from __future__ import annotations

import ctypes
import numbers
import os
import re
import sys
import warnings
from collections.abc import Iterable

__all__ = ["select_gpus"]

_UUID = re.compile(r"^(GPU-[0-9A-Za-z-]+|MIG-[0-9A-Za-z-]+(/[0-9]+/[0-9]+)?)$")  # MIG-GPU-<uuid>/<gi>/<ci>: before R470


def _parse(spec: str | int | Iterable[int | str]) -> list[str]:
    if isinstance(spec, bool):
        raise ValueError(f"GPU selection must be indices like '0,2' or [0, 2], got {spec!r}")
    if isinstance(spec, numbers.Integral):  # np.int64(1) too
        items: list[str] = [str(int(spec))]
    elif isinstance(spec, str):
        items = [s.strip() for s in spec.split(",")] if spec.strip() else []
    elif isinstance(spec, Iterable) and not isinstance(spec, (bytes, set, frozenset, dict)):
        # (np.int64 items as ints: an array's items, a bool stays 'True' and is refused)
        items = [str(int(s) if isinstance(s, numbers.Integral) and not isinstance(s, bool) else s).strip()
                 for s in spec]  # fmt: skip
    else:  # None, 1.0, a set (no order)
        raise ValueError(f"GPU selection must be indices like '0,2' or [0, 2], got {spec!r}")
    out: list[str] = []
    for item in items:
        digits = item.isascii() and item.isdigit()  # CUDA reads ASCII digits only: '１' (full-width) hides every GPU
        if not (digits or _UUID.match(item)):
            raise ValueError(f"invalid GPU {item!r} in {spec!r}: use indices as nvidia-smi shows them (ASCII digits), "
                             "or UUIDs")  # fmt: skip
        if digits:
            item = str(int(item))  # '01' is GPU 1: listed twice as '1,01' is caught below
        if item in out:
            raise ValueError(f"GPU {item} is listed twice in {spec!r}")
        out.append(item)
    return out


def _cuda_started() -> bool:
    """Whether the CUDA driver has started in this process, having read ``CUDA_VISIBLE_DEVICES``: torch's own flag
    (``torch.cuda.is_initialized()``) or, since ``torch.cuda.is_available()`` and ``device_count()`` start the driver
    without setting it (``cudaGetDeviceCount`` calls ``cuInit`` where NVML does not count the GPUs), the driver
    library loaded in this process answering ``cuDeviceGetCount``, which before ``cuInit`` returns
    ``CUDA_ERROR_NOT_INITIALIZED``. A process where no driver library is loaded has not started CUDA."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                return True
        except Exception:
            pass
    path = _loaded_driver()
    if path is None:
        return False
    try:
        count = ctypes.c_int(0)
        return ctypes.CDLL(path).cuDeviceGetCount(ctypes.byref(count)) != _CUDA_ERROR_NOT_INITIALIZED
    except (OSError, AttributeError):  # not the driver after all
        return False


_CUDA_ERROR_NOT_INITIALIZED = 3


def _loaded_driver() -> str | None:
    """The path of the CUDA driver library (``libcuda.so*``) loaded in this process (Linux: /proc/self/maps), or
    None."""
    try:
        with open("/proc/self/maps", "rb") as f:
            maps = f.read()
    except OSError:
        return None
    for line in maps.split(b"\n"):
        at = line.find(b"/")
        if at >= 0 and line.rsplit(b"/", 1)[-1].startswith(b"libcuda.so"):
            return os.fsdecode(line[at:].rstrip().removesuffix(b" (deleted)"))
    return None


def select_gpus(spec: str | int | Iterable[int | str]) -> list[str]:
    """Make only the given GPUs visible to this process, numbered as ``nvidia-smi`` numbers them.

    Call it first thing, before any CUDA call (importing torch beforehand is fine). Inside the
    process the chosen GPUs are then ``cuda:0``, ``cuda:1``, ... in the order given.

    Args:
        spec: ``"1"``, ``"0,2"``, ``[0, 2]``, a GPU UUID, or ``""``/``[]`` to hide every GPU.

    Returns:
        The device list written to ``CUDA_VISIBLE_DEVICES``.

    Raises:
        RuntimeError: CUDA is already initialised in this process, so the choice could not apply.
        ValueError: the specification is malformed.
    """
    devices = _parse(spec)
    value = ",".join(devices)
    if _cuda_started():
        current = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise RuntimeError(
            f"select_gpus({spec!r}) must run before the first CUDA call: CUDA is already initialised "
            f"in this process (CUDA_VISIBLE_DEVICES={current!r}), so the new value would be ignored. "
            "Call it at the top of your script, or set CUDA_VISIBLE_DEVICES in the shell."
        )
    before = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if before and before != value:  # a scheduler's allocation (SLURM, Kubernetes): its GPUs, not nvidia-smi's all
        warnings.warn(f"select_gpus({spec!r}): CUDA_VISIBLE_DEVICES was {before!r} (the GPUs a scheduler gave this "
                      f"job?) and is now {value!r}, numbered as nvidia-smi numbers every GPU of the machine, which "
                      "may be outside what was given; to use some of the GPUs given, leave CUDA_VISIBLE_DEVICES as "
                      "it is and pick cuda:0, cuda:1, ... among them", stacklevel=2)  # fmt: skip
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    os.environ["CUDA_VISIBLE_DEVICES"] = value
    return devices


def launched_world_size() -> int:
    """WORLD_SIZE as a launcher gives it (torchrun sets MASTER_ADDR too); 1 without one (a RANK or WORLD_SIZE
    left over in a shell is no job of several ranks)."""
    if "MASTER_ADDR" not in os.environ:
        return 1
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1
