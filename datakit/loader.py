"""The DataLoader factory: defaults that avoid the usual pitfalls, reproducible seeding, DDP
sharding, and an infinite loader that resumes mid-epoch with the exact next batch."""

from __future__ import annotations

import logging
import math
import os
import random
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

if TYPE_CHECKING:
    from datakit.prefetch import DeviceLoader

__all__ = ["EpochSampler", "InfiniteLoader", "Loader", "create_loader", "seed_everything", "seed_worker"]

log = logging.getLogger("datakit")


def seed_everything(seed: int, deterministic: bool = False) -> None:
    """Seed ``random``, NumPy, torch (CPU and CUDA) and ``PYTHONHASHSEED`` (for subprocesses).

    ``deterministic=True`` also makes cuDNN deterministic and asks torch for deterministic
    algorithms (warning, not failing, where none exists).
    """
    os.environ["PYTHONHASHSEED"] = str(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    if deterministic:
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.use_deterministic_algorithms(True, warn_only=True)


def seed_worker(worker_id: int) -> None:
    """``worker_init_fn`` that seeds ``random`` and NumPy's global state from the worker's torch seed.

    DataLoader gives each worker a distinct torch seed (base seed + worker id, the base drawn
    from the loader's generator), but leaves ``random`` and NumPy alone: forked workers then
    share NumPy's state and produce the same "random" augmentations. Seeding both from the
    torch seed makes them distinct per worker and reproducible for a seeded loader.
    """
    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    np.random.seed(seed)


class EpochSampler(Sampler[int]):
    """Sample order that depends only on (seed, epoch): shuffled or not, optionally one shard of
    ``world`` (rank ``rank``) padded to equal length like ``DistributedSampler``, and able to
    start an epoch part-way (``skip``) so a restarted job continues with the exact next batch."""

    def __init__(self, n: int, *, shuffle: bool = True, seed: int = 0, rank: int = 0, world: int = 1) -> None:
        if not 0 <= rank < world:
            raise ValueError(f"rank must be in 0..{world - 1}, got {rank}")
        self.n, self.shuffle, self.seed, self.rank, self.world = n, shuffle, seed, rank, world
        self.epoch = 0
        self.skip = 0
        self.per_rank = math.ceil(n / world) if world > 1 else n

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def indices(self) -> list[int]:
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.n, generator=g).tolist()
        else:
            order = list(range(self.n))
        if self.world > 1:
            total = self.per_rank * self.world
            order = (order * math.ceil(total / max(1, len(order))))[:total]
            order = order[self.rank :: self.world]
        return order

    def __iter__(self) -> Iterator[int]:
        order = self.indices()
        skip, self.skip = self.skip, 0
        return iter(order[skip:])

    def __len__(self) -> int:
        return self.per_rank


class Loader:
    """A DataLoader that calls ``sampler.set_epoch`` at every pass and forwards everything else
    (``len``, ``dataset``, ``sampler``, ``batch_size`` ...) to the DataLoader inside."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader
        self.epoch = 0

    def __iter__(self):
        sampler = self.loader.sampler
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self.epoch)
        self.epoch += 1
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str):
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)


class InfiniteLoader:
    """Iterates forever over a loader made by :func:`create_loader`, one epoch after another,
    reshuffling each epoch; ``epoch`` and ``step`` say where it is, and ``state_dict()`` /
    ``load_state_dict()`` resume mid-epoch after a restart with the exact next batch.

    This replaces the "catch StopIteration and re-create the iterator" trick, which loses the
    epoch count, re-seeds nothing and cannot resume.
    """

    def __init__(self, loader: Loader | DataLoader) -> None:
        self.loader = loader if isinstance(loader, Loader) else Loader(loader)
        self.epoch = 0
        self.step = 0
        self._it = None

    def _start_epoch(self) -> None:
        sampler = self.loader.loader.sampler
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self.epoch)
        if self.step:
            if not isinstance(sampler, EpochSampler):
                raise ValueError("resuming mid-epoch needs the EpochSampler that create_loader sets up")
            sampler.skip = self.step * self.loader.loader.batch_size
        self._it = iter(self.loader.loader)

    def __iter__(self):
        return self

    def __next__(self):
        if self._it is None:
            self._start_epoch()
        while True:
            try:
                batch = next(self._it)
                self.step += 1
                return batch
            except StopIteration:
                self.epoch += 1
                self.step = 0
                self._start_epoch()

    def __len__(self) -> int:
        return len(self.loader)

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
        self._it = None

    def __getattr__(self, name: str):
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)


def _is_cuda(device) -> bool:
    if device is None:
        return False
    dev = torch.device(device) if not isinstance(device, torch.device) else device
    return dev.type == "cuda" and torch.cuda.is_available()


def create_loader(
    dataset: Dataset,
    batch_size: int,
    *,
    train: bool = True,
    num_workers: int | str = "auto",
    device: str | torch.device | None = None,
    infinite: bool = False,
    seed: int | None = None,
    collate_fn: Callable | None = None,
    distributed: str | bool = "auto",
    drop_last: bool | None = None,
    normalize=None,
    **dataloader_kwargs,
) -> Loader | InfiniteLoader | DeviceLoader:
    """A DataLoader with the defaults that avoid the usual pitfalls.

    - ``shuffle=train``; ``pin_memory`` when ``device`` is a CUDA device; ``persistent_workers``
      and ``prefetch_factor=4`` when there are workers.
    - Training drops a last batch of a single sample (BatchNorm's "Expected more than 1 value per
      channel when training") and says so; evaluation never drops data.
    - ``seed``: the sample order and every worker's ``random``/NumPy/torch seeds follow from it
      (:func:`seed_worker`), distinct per worker, the same on every run.
    - ``distributed="auto"``: with a ``torch.distributed`` process group, training loaders shard
      the data per rank (``set_epoch`` called every epoch); evaluation loaders stay whole unless
      ``distributed=True``.
    - ``num_workers="auto"`` measures and picks (:func:`datakit.tuning.tune_num_workers`, cached);
      the environment variable ``DATAKIT_NUM_WORKERS=0`` forces a value, for debugging
      ``__getitem__`` with a breakpoint.
    - ``infinite=True`` returns an :class:`InfiniteLoader`.
    - ``device``: batches arrive there ready for the model (a :class:`~datakit.prefetch.DeviceLoader`):
      uint8 images (what ``train_pipeline``/``eval_pipeline`` give) become float32 normalised
      with ``normalize`` (default: ImageNet statistics; a preset name, ``(mean, std)``, a
      :class:`~datakit.stats.Stats`, or False to keep uint8). On CUDA the uint8 batch is copied
      from pinned memory on a side stream and normalised on the GPU; on the CPU it is normalised
      in one table-lookup pass. Float images are moved as they are. ``normalize`` without
      ``device`` means the CPU. Without either, batches are what the collate function builds.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    on_device = _device_plan(device, normalize)  # checked before any worker is measured or started
    if collate_fn is None:
        from datakit.collate import stack_collate

        collate_fn = stack_collate
    env = os.environ.get("DATAKIT_NUM_WORKERS")
    if env is not None:
        num_workers = int(env)
    elif num_workers == "auto":
        from datakit.tuning import tune_num_workers

        num_workers = tune_num_workers(dataset, batch_size, collate_fn=collate_fn, device=device).best
    if not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(f"num_workers must be 'auto' or an int >= 0, got {num_workers!r}")
    rank, world = 0, 1
    shard = False
    if distributed:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            shard = train if distributed == "auto" else True
            if shard:
                rank, world = dist.get_rank(), dist.get_world_size()
        elif distributed is True:
            raise ValueError("distributed=True but no torch.distributed process group is initialised")
    base = 0 if seed is None else seed
    sampler = dataloader_kwargs.pop("sampler", None)
    shuffle = dataloader_kwargs.pop("shuffle", train)
    if sampler is None:
        if seed is None and not shard and not infinite:
            sampler = None
        else:
            sampler = EpochSampler(len(dataset), shuffle=shuffle, seed=base, rank=rank, world=world)
    per_rank = len(sampler) if sampler is not None else len(dataset)
    if drop_last is None:
        drop_last = train and per_rank % batch_size == 1 and per_rank > 1
        if drop_last:
            log.info("drop_last=True: the last training batch would hold 1 sample, which breaks BatchNorm")
    generator = None
    if seed is not None:
        generator = torch.Generator().manual_seed(seed + 1_000_003 * rank)  # distinct worker seeds per rank
    kwargs = dict(
        batch_size=batch_size, collate_fn=collate_fn, num_workers=num_workers, drop_last=drop_last,
        pin_memory=_is_cuda(device), worker_init_fn=seed_worker, generator=generator,
    )  # fmt: skip
    if sampler is not None:
        kwargs["sampler"] = sampler
    else:
        kwargs["shuffle"] = shuffle
    if num_workers > 0:
        kwargs.update(persistent_workers=True, prefetch_factor=4)
    kwargs.update(dataloader_kwargs)
    loader = Loader(DataLoader(dataset, **kwargs))
    out = InfiniteLoader(loader) if infinite else loader
    return on_device(out) if on_device is not None else out


def _device_plan(device, normalize) -> Callable | None:
    """None when batches stay as collated; otherwise the function that wraps the loader so that
    they arrive on ``device`` (the CPU by default), normalised. Bad values raise here."""
    if device is None and normalize is None:
        return None
    from datakit.errors import UsageError
    from datakit.prefetch import DeviceLoader, resolve_normalize

    stats = resolve_normalize(True if normalize is None else normalize)
    mean, std = stats if stats is not None else (None, None)
    try:
        dev = torch.device("cpu" if device is None else device)
    except (RuntimeError, TypeError) as exc:
        raise UsageError(f"device={device!r}: {exc}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"device={str(device)!r} but CUDA is not available here; pass device='cpu'")
    return lambda loader: DeviceLoader(loader, dev, mean, std)
