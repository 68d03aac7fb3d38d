"""Exact per-channel mean and std over every pixel of a dataset, and the presets the field uses.

Per-channel histograms of the uint8 values are accumulated in integers, so the sums, and the
mean and std computed from them in float64, are exact whatever the order, the number of
workers or ranks. Averaging per-image (or per-batch) stds instead is a common mistake: it
leaves out the spread between images, which is why the widely quoted CIFAR-10 std
(0.2023, 0.1994, 0.2010) is too small; the pixel-weighted value is (0.2470, 0.2435, 0.2616).
"""

from __future__ import annotations

import io
import logging
import math
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from datakit.errors import DataError, UsageError, as_flag
from datakit.io import atomic_output, check_output, file_path, output_run
from datakit.parallel import map_ordered

log = logging.getLogger("datakit")

__all__ = ["PLOT_EXTENSIONS", "PRESETS", "Stats", "compute_stats", "plot_histogram"]

PRESETS: dict[str, dict] = {
    "imagenet": {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225), "scale": "0-1", "order": "RGB",
                 "note": "torchvision's ImageNet statistics, for ToTensor + Normalize"},
    "imagenet_caffe": {"mean": (123.675, 116.28, 103.53), "std": (1.0, 1.0, 1.0), "scale": "0-255", "order": "RGB",
                       "note": "mmdetection/caffe style: 0-255 pixels, mean subtracted, std 1 (RGB order)"},
    "cifar10": {"mean": (0.4914, 0.4822, 0.4465), "std": (0.2470, 0.2435, 0.2616), "scale": "0-1", "order": "RGB",
                "note": "pixel-weighted; the often quoted std (0.2023, 0.1994, 0.2010) averages per-image stds"},
    "cifar100": {"mean": (0.5071, 0.4865, 0.4409), "std": (0.2673, 0.2564, 0.2762), "scale": "0-1", "order": "RGB",
                 "note": "pixel-weighted; the often quoted std (0.2009, 0.1984, 0.2023) averages per-image stds"},
}  # fmt: skip


def shown(v: float, places: int) -> str:
    """``v`` with ``places`` decimals, or with three significant digits where those decimals would keep fewer
    than two of them (a std of 1.3e-06 is no 0.0000, which a normalisation would divide by; 0.00236 no 0.002)."""
    return f"{v:.{places}f}" if v == 0 or abs(v) >= 10 ** (1 - places) else f"{v:.3g}"


@dataclass
class Stats:
    """Per-channel statistics in RGB order (``order``: also ``"BGR"``, or ``"L"`` for a gray
    dataset's one channel), on the 0-1 and 0-255 scales."""

    count: int
    pixels: int
    mean: list[float]
    std: list[float]
    order: str = "RGB"
    stderr_mean: list[float] | None = None
    stderr_std: list[float] | None = None
    histogram: np.ndarray | None = field(default=None, repr=False)

    @property
    def mean_255(self) -> list[float]:
        return [m * 255 for m in self.mean]

    @property
    def std_255(self) -> list[float]:
        return [s * 255 for s in self.std]

    def to_json(self) -> dict:
        out = {"count": self.count, "pixels": self.pixels, "mean": self.mean, "std": self.std,
               "mean_255": self.mean_255, "std_255": self.std_255, "order": self.order}  # fmt: skip
        if self.stderr_mean is not None:
            out["stderr_mean"], out["stderr_std"] = self.stderr_mean, self.stderr_std
        return out

    def mmdet_args(self) -> str:
        """``mean=[...], std=[...]`` on the 0-255 scale, three decimals (a value under 0.01 with three digits)."""
        return (f"mean=[{', '.join(shown(v, 3) for v in self.mean_255)}], "
                f"std=[{', '.join(shown(v, 3) for v in self.std_255)}]")  # fmt: skip

    def normalize_args(self) -> str:
        """``mean=[...], std=[...]`` on the 0-1 scale, four decimals (a value under 0.001 with three digits, not
        as 0.0000, which Normalize would divide by)."""

        return f"mean=[{', '.join(shown(v, 4) for v in self.mean)}], std=[{', '.join(shown(v, 4) for v in self.std)}]"

    def code(self) -> str:
        """Paste-ready normalisation code."""
        return f"Normalize({self.normalize_args()})  # 0-1 scale, {self.order}, after ToTensor"

    def flat_channels(self) -> list[str]:
        """The channels whose std is 0 (every pixel the same value): normalising them divides by zero."""
        return [self.order[c] if c < len(self.order) else str(c) for c, v in enumerate(self.std) if v == 0]

    @classmethod
    def from_histogram(cls, hist: np.ndarray, count: int, order: str = "RGB") -> Stats:
        """Exact statistics from per-channel histograms of uint8 values (C x 256 integer counts)."""
        hist = np.asarray(hist, dtype=np.int64)
        v = np.arange(256, dtype=object)
        means, stds = [], []
        pixels = int(hist[0].sum())
        for c in range(hist.shape[0]):
            h = hist[c].astype(object)
            n = int(hist[c].sum())
            s1, s2 = int((h * v).sum()), int((h * v * v).sum())  # exact Python integers
            mean = s1 / n
            var = (s2 * n - s1 * s1) / (n * n)
            means.append(mean / 255)
            stds.append(float(np.sqrt(max(var, 0.0))) / 255)
        return cls(count, pixels, means, stds, order, histogram=hist)


def _hist_one(ds, i: int, size: tuple[int, int] | None = None) -> np.ndarray:
    """C x 256 histogram of sample ``i`` (after resizing to ``size``, width x height)."""
    import cv2

    # strict: a JPEG cut short, its end marker put back, decodes with grey filled in (libjpeg's warning on
    # stderr, naming nothing); counted, that grey moves the mean. Refused as check and pack-lmdb refuse it
    from datakit.sources import ImageDataset

    if isinstance(ds, ImageDataset):
        img = ds.decode(int(i), strict=True)
    else:
        img = ds.decode(int(i)) if hasattr(ds, "decode") else np.asarray(ds[int(i)][0])
    if img.ndim == 2:  # a gray dataset's one channel; elsewhere a gray image counts as R = G = B
        img = img[:, :, None] if getattr(ds, "mode", "rgb") == "gray" else np.stack([img] * 3, axis=-1)
    if size is not None:
        w, h = size
        interp = cv2.INTER_AREA if h < img.shape[0] or w < img.shape[1] else cv2.INTER_LINEAR
        img = cv2.resize(img, (w, h), interpolation=interp)
        if img.ndim == 2:  # OpenCV drops a one-channel image's channel axis
            img = img[:, :, None]
    out = np.empty((img.shape[2], 256), dtype=np.int64)
    # calcHist counts in float32: exact below 2**24 a bin, so at most 2**23 pixels a call (one row of more too: a
    # column of pixels, the image's rows laid end to end)
    flat = np.ascontiguousarray(img).reshape(-1, 1, img.shape[2])
    step = 1 << 23
    for c in range(img.shape[2]):
        out[c] = sum(cv2.calcHist([flat[r : r + step]], [c], None, [256], [0, 256]).ravel().astype(np.int64)
                     for r in range(0, len(flat), step))  # fmt: skip
    return out


def _ignore_sigint_in_workers(main: int) -> None:
    """A worker's initializer (also called in the main process when the work runs there): a spawned worker
    ignores Ctrl-C, which the main process answers for all (see :func:`_ctrl_c_to_main_only`)."""
    if os.getpid() != main:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class _CtrlC:
    """Where Ctrl-C stands while :func:`_ctrl_c_to_main_only` is in force (one process, its main thread)."""

    active = False  # the handler is installed
    forking = False  # between this process's at-fork hooks, before and after a worker is forked
    pressed = False  # Ctrl-C came; raised when it came, or at the next result when it came during a fork
    hooked = False


def _fork_begins() -> None:
    _CtrlC.forking = _CtrlC.active


def _fork_ends() -> None:
    _CtrlC.forking = False


@contextmanager
def _ctrl_c_to_main_only() -> Iterator[None]:
    """While workers run: Ctrl-C raises KeyboardInterrupt in this process alone; call :func:`_check_ctrl_c`
    after each result.

    A terminal sends SIGINT to its whole process group, the workers included, and each would print its own
    traceback ("Process ForkPoolWorker-1: ... KeyboardInterrupt") around the one line the CLI prints; this
    process stops them when the exception leaves the map. A forked worker inherits this handler from the
    first instant, so no moment of its start (the pool's initializer included) raises there. In this process,
    an exception raised inside an at-fork hook (logging's) is printed as "Exception ignored" and dropped, and
    the work went on to the end: a Ctrl-C during a fork is kept for the next result instead.
    """
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous) or _CtrlC.active:
        yield  # signals are handled in the main thread alone; SIG_IGN and SIG_DFL print nothing anyway
        return
    main = os.getpid()

    def handler(signum, frame) -> None:
        if os.getpid() != main:
            return  # a forked worker: the main process stops it
        _CtrlC.pressed = True
        if not _CtrlC.forking:
            previous(signum, frame)  # Python's own handler raises KeyboardInterrupt

    if not _CtrlC.hooked and hasattr(os, "register_at_fork"):
        # once per process, when first needed: after the hooks of the modules imported by then (logging's), so
        # those run inside the window (before-fork hooks run last registered first, the others first first)
        os.register_at_fork(before=_fork_begins, after_in_parent=_fork_ends, after_in_child=_fork_ends)
        _CtrlC.hooked = True
    _CtrlC.active, _CtrlC.forking, _CtrlC.pressed = True, False, False
    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _CtrlC.active = _CtrlC.forking = False
    if _CtrlC.pressed:
        raise KeyboardInterrupt  # pressed during the last fork, after the last result


def _check_ctrl_c() -> None:
    """Raise the Ctrl-C that came while a worker was being forked (see :func:`_ctrl_c_to_main_only`)."""
    if _CtrlC.pressed:
        raise KeyboardInterrupt


def _all_reduce(hist: np.ndarray, count: int) -> tuple[np.ndarray, int]:
    import torch
    import torch.distributed as dist

    t = torch.from_numpy(np.concatenate([hist.ravel(), [count]]).astype(np.int64))
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    t = t.cpu().numpy()
    return t[:-1].reshape(hist.shape), int(t[-1])


def compute_stats(
    dataset_or_src,
    *,
    workers: int | None = None,
    sample: int | None = None,
    size: tuple[int, int] | None = None,
    seed: int = 0,
    distributed: str | bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Stats:
    """Per-channel mean and std over all pixels of a dataset, exact to float64 rounding.

    Args:
        dataset_or_src: a datakit dataset, or anything :func:`~datakit.datasets.open_dataset` takes
            (decoded as RGB).
        workers: decoding processes (default: usable CPUs).
        sample: estimate from this many randomly chosen images and report the standard error.
        size: ``(width, height)``: compute after resizing every image to it.
        distributed: ``"auto"`` (or ``True``, which requires one): when a ``torch.distributed``
            process group is initialised, each rank reads its share and the sums are all-reduced
            (every rank gets the single-process result); every rank must then call it. ``False``
            (the default): this process reads every image, so a call on rank 0 alone (the usual
            ``if rank == 0:``) does not wait for ranks that never come.
    """
    from datakit.sources import ImageDataset, open_source

    if not isinstance(dataset_or_src, (str, os.PathLike, list, tuple, ImageDataset)):
        kind = type(dataset_or_src).__name__
        raise UsageError(f"compute_stats takes a path or a datakit dataset (open_dataset), got {kind}; "
                         "give the dataset it is made of (sample= reads a part)")  # fmt: skip
    ds = dataset_or_src if isinstance(dataset_or_src, ImageDataset) else open_source(dataset_or_src)
    if getattr(ds, "transform", None) is not None:  # the images as decoded are counted, not what it makes of them
        log.warning("compute_stats reads the images as decoded (resized with size= where given); the dataset's "
                    "transform (%s) is not applied: statistics are of the data, before augmentation",
                    type(ds.transform).__name__)  # fmt: skip
    if getattr(ds, "mode", "rgb") == "unchanged":  # channels in the file's order, 16-bit values: not 0-255 RGB
        raise UsageError(
            "compute_stats counts 8-bit pixels in RGB (or BGR, gray) order; this dataset was opened "
            "with mode='unchanged' (channels and bit depth as stored): open it with mode='rgb'"
        )
    if not (isinstance(distributed, str) and distributed == "auto"):
        # (any string was true: distributed="no" waited in an all-reduce for ranks that never came)
        try:
            distributed = as_flag("distributed", distributed)
        except UsageError:
            raise UsageError(f"distributed must be 'auto', True or False, got {distributed!r}") from None
    if workers is not None and (not _integral(workers) or workers < 0):
        raise UsageError(f"workers must be a whole number >= 0 (decoding processes; None: the usable CPUs), got "
                         f"{workers!r}")  # fmt: skip
    if progress is not None and not callable(progress):
        raise UsageError(f"progress must be a function called with (done, total), or None, got {progress!r}")
    if size is not None:
        from datakit.io import pixel_budget

        whole = lambda v: _integral(v) and v >= 1  # noqa: E731
        if (
            isinstance(size, (str, bytes))
            or not hasattr(size, "__len__")
            or len(size) != 2
            or not all(map(whole, size))
        ):
            raise UsageError(f"size must be (width, height), two whole numbers of pixels >= 1, got {size!r}")
        if size[0] * size[1] > pixel_budget():
            raise UsageError(f"size {size[0]}x{size[1]} = {size[0] * size[1]} pixels, over the limit of "
                             f"{pixel_budget()} a decoded image may have (DATAKIT_MAX_PIXELS)")  # fmt: skip
    if sample is not None and not _integral(sample):
        raise UsageError(f"sample must be a whole number of images (or None: every image), got {sample!r}")
    if not _integral(seed) or seed < 0:  # (drawn before any image is read: the bootstrap's seed follows from it)
        raise UsageError(f"seed must be a whole number >= 0, got {seed!r}")
    seed, sample = int(seed), None if sample is None else int(sample)  # NumPy's fixed widths would wrap at seed + 1
    n = len(ds)
    order = {"bgr": "BGR", "gray": "L"}.get(getattr(ds, "mode", "rgb"), "RGB")  # L: one gray channel
    idx = np.arange(n)
    if sample is not None and sample < n:
        if sample < 2:
            raise UsageError(f"sample must be at least 2 to estimate an error, got {sample}")
        idx = np.sort(np.random.default_rng(seed).choice(n, size=sample, replace=False))
    rank, world = 0, 1
    if distributed:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            rank, world = dist.get_rank(), dist.get_world_size()
        elif distributed is True:
            raise UsageError("distributed=True but no torch.distributed process group is initialised")
    if sample is not None and sample >= n and rank == 0:  # said once, not by every rank under torchrun
        log.warning("sample=%d (--sample) is not fewer than the %d images: every image is read, the statistics are "
                    "exact (no standard errors)", sample, n)  # fmt: skip
    mine = idx[rank::world]
    hists = map_ordered(partial(_hist_one, size=size), mine.tolist(), workers=workers, dataset=ds, per_worker=16,
                        progress=progress, initializer=_ignore_sigint_in_workers, initargs=(os.getpid(),))  # fmt: skip
    sampled = sample is not None and sample < n
    channels = 1 if order == "L" else 3  # known before any image: a rank that gets none sums as many as the others
    hist = np.zeros((channels, 256), dtype=np.int64)
    count = 0
    per_image: dict[int, np.ndarray] = {}  # kept only for the bootstrap: 6 KiB an image, 8 GB for ImageNet
    with _ctrl_c_to_main_only(), closing(hists):  # closed at once on Ctrl-C: its workers stop then, not when collected
        for i, h in zip(mine.tolist(), hists):
            _check_ctrl_c()
            hist += h
            count += 1
            if sampled:
                per_image[i] = h
    if not count and world == 1:
        raise DataError("the dataset is empty: no pixels to compute statistics from")
    if world > 1:
        hist, count = _all_reduce(hist, count)
    stats = Stats.from_histogram(hist, count, order)
    if sampled:
        if world > 1:  # every rank's images, in the order one process reads them: the same errors as one process
            import torch.distributed as dist

            parts: list = [None] * world
            dist.all_gather_object(parts, per_image)
            per_image = dict(sorted((i, h) for part in parts for i, h in part.items()))
        mean_err, std_err = _bootstrap(per_image, seed)
        # drawn without replacement from n images: the finite-population correction (23 of 24 read are nearly all
        # of them; the bootstrap alone said +-0.040 where the error was 0.0012)
        fpc = math.sqrt((n - len(idx)) / (n - 1)) if n > 1 else 0.0
        stats.stderr_mean, stats.stderr_std = [e * fpc for e in mean_err], [e * fpc for e in std_err]
    return stats


def _bootstrap(per_image: dict[int, np.ndarray], seed: int, rounds: int = 200) -> tuple[list[float], list[float]]:
    """Standard errors of the sampled mean and std, by resampling whole images."""
    v = np.arange(256, dtype=np.float64)
    hists = np.stack(list(per_image.values())).astype(np.float64)  # images x C x 256
    n = hists.sum(axis=2)
    s1 = (hists * v).sum(axis=2)
    s2 = (hists * v * v).sum(axis=2)
    rng = np.random.default_rng(seed + 1)
    means, stds = [], []
    for _ in range(rounds):
        pick = rng.integers(0, len(hists), len(hists))
        nn, a, b = n[pick].sum(0), s1[pick].sum(0), s2[pick].sum(0)
        m = a / nn
        means.append(m / 255)
        stds.append(np.sqrt(np.maximum(b / nn - m * m, 0)) / 255)
    return np.std(means, axis=0, ddof=1).tolist(), np.std(stds, axis=0, ddof=1).tolist()


def _integral(v) -> bool:
    """A whole number, Python's or NumPy's (not a bool)."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


PLOT_EXTENSIONS = (".png", ".jpg", ".jpeg", ".pdf", ".svg")


def plot_histogram(stats: Stats, out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Per-channel histograms of the pixel values, as a picture (``PLOT_EXTENSIONS``), written
    atomically; an existing ``out`` is refused (``UsageError``) unless ``overwrite``."""
    with output_run():
        return _plot_histogram(stats, out, overwrite=overwrite)


def _plot_histogram(stats: Stats, out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    out = file_path(out)
    if out.suffix.lower() not in PLOT_EXTENSIONS:
        raise UsageError(f"{out}: cannot tell the picture format; end the name in {', '.join(PLOT_EXTENSIONS)}")
    check_output(out, overwrite=overwrite, probe=True)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install matplotlib") from None
    if stats.histogram is None:
        raise UsageError("these statistics carry no histogram to plot (compute them with compute_stats)")
    fig, ax = plt.subplots(figsize=(8, 4), dpi=100)
    colours = {"RGB": ("tab:red", "tab:green", "tab:blue"), "L": ("tab:gray",)}.get(
        stats.order, ("tab:blue", "tab:green", "tab:red"))  # fmt: skip
    for c, name in enumerate(stats.order[: stats.histogram.shape[0]]):
        ax.plot(np.arange(256), stats.histogram[c] / stats.pixels, color=colours[c],
                label=f"{name}: mean {stats.mean[c]:.4f}, std {stats.std[c]:.4f}")  # fmt: skip
    ax.set_xlabel("pixel value (0-255)")
    ax.set_ylabel("fraction of pixels")
    ax.set_title(f"{stats.count} images, {stats.pixels} pixels per channel")
    ax.legend()
    fig.tight_layout()
    try:
        buf = io.BytesIO()  # drawn in memory, then written: matplotlib's PDF writer on a full disk died of an
        fig.savefig(buf, format=out.suffix.lower().lstrip(".").replace("jpg", "jpeg"))  # AttributeError
        with atomic_output(out, overwrite=overwrite, tidy=True) as tmp:
            Path(tmp).write_bytes(buf.getvalue())
    finally:
        plt.close(fig)
    return out
