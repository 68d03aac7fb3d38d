"""The DataLoader factory: defaults that avoid the usual pitfalls, reproducible seeding, DDP
sharding, and an infinite loader that resumes mid-epoch with the exact next batch."""

from __future__ import annotations

import ast
import atexit
import bisect
import collections
import contextlib
import ctypes
import functools
import hashlib
import io
import itertools
import logging
import math
import multiprocessing
import multiprocessing.context
import multiprocessing.managers
import multiprocessing.shared_memory
import multiprocessing.sharedctypes
import multiprocessing.synchronize
import operator
import os
import pickle
import random
import signal
import sys
import threading
import time
import types
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data import _utils as _torch_data_utils
from torch.utils.data.dataloader import _DatasetKind, _MultiProcessingDataLoaderIter

from datakit.collate import CollateError, SlotCollate, forget_slots
from datakit.devices import launched_world_size
from datakit.errors import DataError, UsageError, as_flag
from datakit.io import raise_open_file_limit

if TYPE_CHECKING:
    from datakit.prefetch import DeviceLoader

__all__ = [
    "EpochBatches",
    "EpochSampler",
    "EpochTiming",
    "InfiniteLoader",
    "Loader",
    "PerSampleSeed",
    "SampleIndex",
    "WorkerInit",
    "create_loader",
    "next_num_workers",
    "plan_shared_memory",
    "sample_seed",
    "raise_open_file_limit",
    "seed_everything",
    "seed_worker",
    "shm_free_bytes",
]

log = logging.getLogger("datakit")


def seed_everything(seed: int, deterministic: bool = False) -> None:
    """Seed ``random``, NumPy, torch (CPU and CUDA) and ``PYTHONHASHSEED`` (for subprocesses).

    ``deterministic=True`` also makes cuDNN deterministic and asks torch for deterministic
    algorithms (warning, not failing, where none exists).
    """
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**32:
        # (-1 or 2**40 set a PYTHONHASHSEED every later Python process, spawned workers too, dies of; "0" and 1.5
        # failed half-way, the environment already changed)
        raise UsageError(f"seed must be a whole number in 0..{2**32 - 1} (PYTHONHASHSEED's range), got {seed!r}")
    seed = int(seed)
    as_flag("deterministic", deterministic)
    os.environ["PYTHONHASHSEED"] = str(seed)
    random.seed(seed)
    np.random.seed(seed)
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


class SampleIndex(int):
    """A sample index that carries the sampler's ``seed`` and ``epoch`` to the dataset.

    A dataset substituting a bad sample draws the replacement from (seed, epoch, index), and
    :class:`PerSampleSeed` seeds the sample's augmentations from them; the worker reading it
    cannot know the epoch otherwise (persistent workers hold a copy of the
    dataset made before the first epoch). It is an ``int`` everywhere else.
    """

    seed: int
    epoch: int
    copy: int  # a shard's padding: the sample served again in the epoch (1), on another rank; 0 the first time

    def __new__(cls, value: int, seed: int = 0, epoch: int = 0, copy: int = 0) -> SampleIndex:
        obj = super().__new__(cls, value)
        obj.seed, obj.epoch, obj.copy = seed, epoch, copy
        return obj

    def __reduce__(self):
        return SampleIndex, (int(self), self.seed, self.epoch, self.copy)


class _PoolIndex(SampleIndex):
    """A :class:`SampleIndex` read through a ``Subset``: ``pool`` holds the subset's samples of the dataset
    underneath and ``pos`` this one's place among them, so that a bad sample's replacement (``on_error="skip"``,
    ``"substitute"``) is one of the subset's own, never a sample of another split. Made in the process that
    reads it; pickled, it is a plain :class:`SampleIndex`. ``pos`` None: the pool's own ``position`` (a
    :class:`_PartPool`'s, worked out only when a bad sample needs it)."""

    pool: Sequence[int]

    def __new__(cls, value: int, seed: int, epoch: int, pool: Sequence[int], pos: int | None,
                copy: int = 0) -> _PoolIndex:  # fmt: skip
        obj = super().__new__(cls, value, seed, epoch, copy)
        obj.pool, obj._pos = pool, pos
        return obj

    @property
    def pos(self) -> int:
        return self._pos if self._pos is not None else self.pool.position  # type: ignore[attr-defined]


class _ChainIndices:
    """The samples of the dataset under a chain of Subsets (outermost first), read through their ``indices`` at
    each look: a subset whose indices the caller changes in place (curriculum, active learning) is read as it is
    now."""

    def __init__(self, chain: list) -> None:
        self.chain = chain

    def __len__(self) -> int:
        return len(self.chain[0].indices)

    def __getitem__(self, k: int) -> int:
        for sub in self.chain:
            k = int(sub.indices[k])
            if k < 0:  # counted from the end of the dataset under it, as Subset reads it
                k += len(sub.dataset)
        return k


class _ThroughPool:
    """A pool of samples from above (a Subset over a ConcatDataset over this Subset: the outer split's samples in
    this part) read through this Subset's own indices, as the dataset under it numbers them; ``position`` the
    sample's place, as above."""

    def __init__(self, pool: Sequence[int], indices: _ChainIndices, above: _PoolIndex) -> None:
        self.pool, self.indices, self.above = pool, indices, above

    def __len__(self) -> int:
        return len(self.pool)

    def __getitem__(self, k: int) -> int:
        return self.indices[int(self.pool[k])]

    @property
    def position(self) -> int:
        return self.above.pos


class _PartPool:
    """The samples of a Subset read through a ConcatDataset (``pool``, its indices) that lie in one of its parts
    (``lo`` to ``hi``), numbered as that part numbers them, and ``position`` the sample's place among them (it is
    ``above``'s sample): made only when a bad sample's replacement is drawn from them."""

    def __init__(self, pool: Sequence[int], lo: int, hi: int, above: SampleIndex) -> None:
        self.pool, self.lo, self.hi, self.above = pool, lo, hi, above
        self._made: tuple[list[int], int] | None = None

    def _make(self) -> tuple[list[int], int]:
        if self._made is None:
            at = getattr(self.above, "pos", 0)
            mine, position = [], 0
            for k in range(len(self.pool)):
                j = int(self.pool[k])
                if self.lo <= j < self.hi:
                    if k < at:
                        position += 1
                    mine.append(j - self.lo)
            self._made = (mine, position)
        return self._made

    def __len__(self) -> int:
        return len(self._make()[0])

    def __getitem__(self, k: int) -> int:
        return self._make()[0][k]

    @property
    def position(self) -> int:
        return self._make()[1]


class _PooledSubset(torch.utils.data.Subset):
    """A ``Subset`` (or a chain of them) of a datakit dataset that replaces bad samples: each index it passes on
    carries the subset's samples, from which the replacement is drawn (torch's Subset passes a plain int: a
    training split's bad image replaced by one of the validation split's, its label included), and the sampler's
    seed and epoch."""

    def __init__(self, dataset, chain: list) -> None:
        super().__init__(dataset, _ChainIndices(chain))
        self.given = chain[0]  # the Subset the caller gave: loader.dataset

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return [self[i] for i in idx]
        n = len(self.indices)
        pos = operator.index(idx)
        if not -n <= pos < n:
            raise IndexError(f"sample index {pos} out of range for a Subset of {n}")
        pos %= n
        seed, epoch, copy = getattr(idx, "seed", 0), getattr(idx, "epoch", 0), getattr(idx, "copy", 0)
        if isinstance(idx, _PoolIndex):  # read through a Subset of a ConcatDataset holding this one: its samples
            return self.dataset[_PoolIndex(self.indices[pos], seed, epoch, _ThroughPool(idx.pool, self.indices, idx),
                                           None, copy)]  # fmt: skip
        return self.dataset[_PoolIndex(self.indices[pos], seed, epoch, self.indices, pos, copy)]

    def __getitems__(self, indices: list) -> list:
        return [self[i] for i in indices]


class _PooledConcat(torch.utils.data.ConcatDataset):
    """A ``ConcatDataset`` whose parts replace bad samples: each part is given the sampler's seed and epoch with
    its own index (torch's passes a plain int there, the index less the part's offset: a later part's substitute
    for a bad sample was the same every epoch, whatever the seed), and, read through a Subset (``random_split(a +
    b)``), that subset's samples in the part, from which the replacement is drawn; Subsets among the parts are
    pooled themselves (``ConcatDataset([Subset(a, train_a), Subset(b, train_b)])``)."""

    def __init__(self, given, parts: list) -> None:
        super().__init__(parts)
        self.given = given  # the ConcatDataset the caller gave

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return [self[i] for i in idx]
        if not isinstance(idx, SampleIndex):  # a plain int (a loader of torch's own): read as torch reads it
            return super().__getitem__(idx)
        n = len(self)
        pos = operator.index(idx)
        if not -n <= pos < n:
            raise IndexError(f"sample index {pos} out of range for a ConcatDataset of {n}")
        pos %= n
        part = bisect.bisect_right(self.cumulative_sizes, pos)
        lo = self.cumulative_sizes[part - 1] if part else 0
        hi = self.cumulative_sizes[part]
        if isinstance(idx, _PoolIndex):
            sub: SampleIndex = _PoolIndex(pos - lo, idx.seed, idx.epoch, _PartPool(idx.pool, lo, hi, idx), None,
                                          idx.copy)  # fmt: skip
        else:
            sub = SampleIndex(pos - lo, idx.seed, idx.epoch, idx.copy)
        return self.datasets[part][sub]

    def __getitems__(self, indices: list) -> list:
        return [self[i] for i in indices]


def _pooled(dataset):
    """``dataset`` as read: a Subset chain over a datakit dataset that replaces bad samples, as one
    :class:`_PooledSubset`; a ConcatDataset of such datasets (or chains), as a :class:`_PooledConcat` (under a
    Subset chain too); anything else as it is."""
    from datakit.sources import ImageDataset

    chain = []
    leaf = dataset
    while type(leaf) is torch.utils.data.Subset:  # (a subclass of the caller's may read otherwise)
        chain.append(leaf)
        leaf = leaf.dataset
    if type(leaf) is torch.utils.data.ConcatDataset:
        parts = [_pooled(d) for d in leaf.datasets]
        if all(p is d for p, d in zip(parts, leaf.datasets)) and not any(
            isinstance(d, ImageDataset) and d.on_error != "raise" for d in leaf.datasets
        ):
            return dataset  # nothing under it replaces a bad sample
        leaf = _PooledConcat(leaf, parts)
        return _PooledSubset(leaf, chain) if chain else leaf
    if not chain or not isinstance(leaf, ImageDataset) or leaf.on_error == "raise":
        return dataset
    return _PooledSubset(leaf, chain)


_MASK64 = (1 << 64) - 1
ORDER_SCHEME = 2  # how an epoch's order is drawn from (seed, epoch), in state_dict(): 1 was seed + epoch


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """A 64-bit seed for one sample of one epoch (splitmix64 of the three): what
    :class:`PerSampleSeed` seeds ``random``, NumPy and torch with before reading the sample."""
    x = (seed * 0x9E3779B97F4A7C15 + (epoch + 1) * 0xBF58476D1CE4E5B9 + (index + 1) * 0x94D049BB133111EB) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _seed_sample(index, salt: int = 0) -> None:
    s = sample_seed(index.seed, index.epoch, int(index)) ^ salt
    if getattr(index, "copy", 0):  # the padding's repeat of a sample on another rank: augmented otherwise
        s = sample_seed(s, index.copy, -1)
    torch.default_generator.manual_seed(s)  # the CPU generator only: nothing here touches CUDA
    random.seed(s)
    np.random.seed(s & 0xFFFFFFFF)


_SEEDED: list = [None]  # the index PerSampleSeed seeded for last, in this process


def reseed(index) -> None:
    """Seed again as :class:`PerSampleSeed` did before ``index`` was read, if it did: a dataset
    that replaces a bad sample then augments the replacement with the draws an uninterrupted
    read would make (not shifted by those the bad sample took before it failed, which a worker
    that already knows it as bad does not take)."""
    if _SEEDED[0] is index:
        _seed_sample(index)


_COLLATE_SALT = 0x5EED_C011_A7E0_0001  # a batch's collate draws: apart from its first sample's


def _rng_state() -> tuple:
    return torch.default_generator.get_state(), random.getstate(), np.random.get_state()


def _set_rng_state(state: tuple) -> None:
    torch.default_generator.set_state(state[0])
    random.setstate(state[1])
    np.random.set_state(state[2])


def _untouched_rng(fn: Callable, *args):
    """``fn(*args)`` with torch's, NumPy's and ``random``'s global states as they were before: a
    sample read for the loader's own sake (an estimate of its size) leaves the caller's draws
    alone, so that a model built after create_loader gets the same weights whatever the workers."""
    state = _rng_state()
    try:
        return fn(*args)
    finally:
        _set_rng_state(state)


_NOTED = threading.local()  # batch: (dataset, indices) of the batch being read in this thread, until collated


class _NotedBatches(Dataset):
    """``dataset`` read a batch at a time through ``__getitems__``, which notes the batch's indices (in
    this process and thread) for :class:`_NamingCollate`: an error of the collate function then names
    the samples by dataset index and file, not by their position in the batch. :func:`create_loader`
    puts it around every dataset with indices."""

    def __init__(self, dataset: Dataset) -> None:
        self.inner = dataset

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index):
        try:
            return self.inner[index]
        except StopIteration as exc:
            raise _stopped(self.inner, [index]) from exc

    def __getitems__(self, indices: list) -> list:
        _NOTED.batch = (self.inner, indices)
        try:
            own = getattr(self.inner, "__getitems__", None)  # torch's Subset reads its dataset's way
            if own is None:
                return [self[i] for i in indices]
            try:
                return own(indices)
            except StopIteration as exc:
                raise _stopped(self.inner, indices) from exc
        except BaseException:
            _NOTED.batch = None  # no collate call follows to let go of the dataset
            raise

    def __getattr__(self, name: str):
        if name.startswith("__") or name == "inner":  # never the inner __getitems__, nor during unpickling
            raise AttributeError(name)
        return getattr(self.inner, name)

    _OWN = frozenset({"inner", "_saved", "rank", "_own"})  # this wrapper's attributes (and its subclasses')

    def __setattr__(self, name: str, value) -> None:
        # an attribute set on the dataset a worker is handed (torch's idiom in worker_init_fn:
        # get_worker_info().dataset.rng = np.random.default_rng(info.seed)) is the caller's dataset's
        if name in self._OWN or name.startswith("__") or "inner" not in self.__dict__:
            object.__setattr__(self, name, value)
        else:
            setattr(self.inner, name, value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"


def _stopped(dataset: Dataset, indices: list) -> RuntimeError:
    """The error for a StopIteration that reading ``indices`` raised (a transform calling ``next()`` on an
    empty iterator): passed on, the DataLoader would take it for the end of the epoch and end it early
    without a word, and an infinite loader would serve the epoch's first batches for ever."""
    if len(indices) == 1:
        name = _sample_name(dataset, indices[0])
        what = f"sample {int(indices[0])}" + (f" ({name})" if name is not None else "")
    else:
        what = "a sample of " + _sample_labels(dataset, indices)(list(range(len(indices))), False)
    return RuntimeError(f"{what}: StopIteration raised while reading it (by the dataset or its transform); "
                        "passed on, it would end the epoch there without a word")  # fmt: skip


class _NamingCollate:
    """``collate_fn`` whose :class:`~datakit.collate.CollateError` names the samples by dataset index,
    and by file where the dataset has ``name(index)`` (datakit's datasets, also inside torch's
    ``Subset``), from what :class:`_NotedBatches` noted of the batch; otherwise, or for any other
    error, ``collate_fn`` as it is."""

    def __init__(self, collate_fn: Callable) -> None:
        self.collate_fn = collate_fn

    def __call__(self, batch):
        noted, _NOTED.batch = getattr(_NOTED, "batch", None), None
        try:
            return self.collate_fn(batch)
        except StopIteration as exc:  # as from a sample: the epoch would end there without a word
            which = ""
            if noted is not None and len(noted[1]) == len(batch):
                which = " on the batch of " + _sample_labels(*noted)(list(range(len(batch))), False)
            raise RuntimeError(f"the collate function raised StopIteration{which}; passed on, it would end the "
                               "epoch there without a word") from exc  # fmt: skip
        except CollateError as exc:
            if noted is None or len(noted[1]) != len(batch) or not _same_samples(exc.batch, batch):
                raise  # not the batch noted (a collate_fn called by hand), or positions in another list
            raise type(exc)(exc.naming(_sample_labels(*noted))) from None  # one line, whatever the process

    def __getattr__(self, name: str):
        if name == "collate_fn":
            raise AttributeError(name)
        return getattr(self.collate_fn, name)

    def __repr__(self) -> str:
        return f"_NamingCollate({self.collate_fn!r})"


def _same_samples(refused, batch) -> bool:
    """Whether the positions of an error about ``refused`` count in ``batch`` (None: the error says nothing
    else): the same samples in the same order, not a copy the collate function sorted or filtered."""
    if refused is None or refused is batch:
        return True
    return len(refused) == len(batch) and all(a is b for a, b in zip(refused, batch))


def _sample_labels(dataset: Dataset, indices: list) -> Callable[[list[int], bool], str]:
    """What :meth:`CollateError.naming` writes for positions in the batch read from ``indices``: the
    indices, with the files of the samples that stand out (``odd``)."""

    def label(positions: list[int], odd: bool) -> str:
        shown = []
        for p in positions[:6]:
            name = _sample_name(dataset, indices[p]) if odd else None
            shown.append(f"{indices[p]}" + (f" ({name})" if name is not None else ""))
        more = ", ..." if len(positions) > 6 else ""
        return ("samples " if len(positions) > 1 else "sample ") + ", ".join(shown) + more

    return label


def _sample_name(dataset: Dataset, index) -> str | None:
    """The file, member or key of sample ``index`` where the dataset says (``name(index)``, through
    torch's ``Subset``); None where it does not."""
    try:
        while isinstance(dataset, torch.utils.data.Subset):
            dataset, index = dataset.dataset, dataset.indices[index]
        name = getattr(dataset, "name", None)
        if not callable(name):
            return None
        j = getattr(dataset, "replaced", {}).get(index)  # on_error skip/substitute: another sample was read
        return f"{name(j)}, read in place of unreadable {name(index)}" if j is not None else str(name(index))
    except Exception:  # a name() of another meaning, or none for this index: the index alone
        return None


class PerSampleSeed(_NotedBatches):
    """``dataset`` with ``random``, NumPy's global state and torch's CPU generator seeded from
    (seed, epoch, index) before each sample is read, so random augmentations depend on the sample
    and the epoch alone: the same whatever ``num_workers`` (and when re-tuning changes it), and
    the same after ``InfiniteLoader.load_state_dict()`` as in an uninterrupted run.
    ``create_loader(..., seed=...)`` wraps the dataset in it; the seed and epoch come with each
    index from :class:`EpochSampler` (a :class:`SampleIndex`; a plain ``int`` is read as it is).

    Batches are read through ``__getitems__``, which then seeds the collate function's draws
    (MixUp, CutMix) from the batch's first sample. In the main process (``num_workers=0``) the
    caller's random states are saved once per batch and put back by :class:`SeededCollate` once
    the batch is collated, so the training loop's own random numbers are not changed by loading.
    """

    def __init__(self, dataset: Dataset) -> None:
        super().__init__(dataset)
        self._saved: tuple | None = None  # the caller's random states while a batch is read here

    def __getitem__(self, index):
        if isinstance(index, SampleIndex):
            _SEEDED[0] = index
            _seed_sample(index)
        try:
            return self.inner[index]
        except StopIteration as exc:
            raise _stopped(self.inner, [index]) from exc

    def __getitems__(self, indices: list) -> list:
        main = torch.utils.data.get_worker_info() is None
        seeded = bool(indices) and isinstance(indices[0], SampleIndex)  # a sampler of the user's gives ints
        # only draws seeded here are undone: a user's sampler's batches draw on from the caller's states
        saved = _rng_state() if main and seeded else None
        _NOTED.batch = (self.inner, indices)
        try:
            out = [self[i] for i in indices]
            if seeded:
                _seed_sample(indices[0], _COLLATE_SALT)
        except BaseException:
            _NOTED.batch = None
            if saved is not None:
                _set_rng_state(saved)
            raise
        self._saved = saved
        return out

    def restore(self) -> None:
        """Put back the caller's random states saved by the last ``__getitems__`` in this process."""
        saved, self._saved = self._saved, None
        if saved is not None:
            _set_rng_state(saved)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_saved": None}


class _RankDraws(_NotedBatches):
    """``dataset`` read in the main process (``num_workers=0``) of rank ``rank`` of an unseeded loader over several
    ranks: its random draws come from random states of this rank's own, not from the caller's, which every rank
    has seeded alike (``seed_everything(0)`` on each, as usual), so the k-th sample of every rank would draw the
    same crop, flip and augmentation. Workers are apart already (:class:`WorkerInit`); there it reads as it is.
    The caller's states are put back by :class:`SeededCollate` once the batch is collated."""

    def __init__(self, dataset: Dataset, rank: int) -> None:
        super().__init__(dataset)
        self.rank = rank
        self._own: tuple | None = None  # this rank's states between batches
        self._saved: tuple | None = None  # the caller's, while a batch is read

    def __getitems__(self, indices: list) -> list:
        if torch.utils.data.get_worker_info() is not None:
            return super().__getitems__(indices)
        saved = _rng_state()
        if self._own is None:  # from the caller's seed, apart by rank: seeded runs repeat, ranks differ
            base = (torch.initial_seed() + 1_000_003 * (self.rank + 1)) % 2**63  # not the caller's own seed
            torch.default_generator.manual_seed(base)  # the CPU generator alone: CUDA's stays the caller's
            random.seed(base)
            np.random.seed(base % 2**32)
        else:
            _set_rng_state(self._own)
        self._saved = saved
        try:
            return super().__getitems__(indices)
        except BaseException:
            self.restore()
            raise

    def restore(self) -> None:
        saved, self._saved = self._saved, None
        if saved is not None:
            self._own = _rng_state()
            _set_rng_state(saved)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_saved": None, "_own": None}


class SeededCollate:
    """``collate_fn`` after which the random states :class:`PerSampleSeed` saved in the main
    process are put back (``num_workers=0``); in workers it is ``collate_fn`` as it is."""

    def __init__(self, collate_fn: Callable, dataset: PerSampleSeed) -> None:
        self.collate_fn, self.dataset = collate_fn, dataset

    def __call__(self, batch):
        try:
            return self.collate_fn(batch)
        finally:
            self.dataset.restore()


class EpochSampler(Sampler[int]):
    """Sample order that depends only on (seed, epoch): shuffled or not, optionally one shard of
    ``world`` (rank ``rank``) padded to equal length like ``DistributedSampler``, and able to
    start an epoch part-way (``skip``) so a restarted job continues with the exact next batch.
    With ``tag``, indices are :class:`SampleIndex` (for datasets that substitute bad samples, and
    for :class:`PerSampleSeed`)."""

    def __init__(self, n: int, *, shuffle: bool = True, seed: int = 0, rank: int = 0, world: int = 1,
                 tag: bool = False) -> None:  # fmt: skip
        if not 0 <= rank < world:
            raise ValueError(f"rank must be in 0..{world - 1}, got {rank}")
        self.n, self.shuffle, self.seed, self.rank, self.world = n, shuffle, seed, rank, world
        self.tag = tag
        self.legacy_epoch: int | None = None  # an epoch resumed from a state of the seed + epoch scheme
        self.epoch = 0
        self.asked: int | None = None  # the epoch a caller of set_epoch asked for, until the loader serves it
        self.skip = 0
        self.per_rank = math.ceil(n / world) if world > 1 else n

    def set_epoch(self, epoch: int) -> None:
        """Serve ``epoch`` next: what a loop calling it itself (DDP's idiom) asks for, whatever came before."""
        self.epoch = self.asked = epoch

    def indices(self, epoch: int | None = None) -> list[int]:
        """This rank's sample order in ``epoch`` (default: the epoch set)."""
        epoch = self.epoch if epoch is None else epoch
        if self.shuffle:
            # seed and epoch mixed (splitmix64): with seed + epoch, as DistributedSampler has it, seed 1's epoch 0
            # was seed 0's epoch 1, and a sweep over seeds shared its orders an epoch apart. An epoch resumed from a
            # state saved mid-epoch under that scheme goes on in its order
            legacy = epoch == self.legacy_epoch
            g = torch.Generator().manual_seed(
                (self.seed + epoch) % 2**64 if legacy else sample_seed(self.seed, epoch, -1)
            )
            order = torch.randperm(self.n, generator=g).tolist()
        else:
            order = list(range(self.n))
        if self.world > 1:
            total = self.per_rank * self.world
            order = (order * math.ceil(total / max(1, len(order))))[:total]
            order = order[self.rank :: self.world]
        return order

    def _copy(self, q: int) -> int:
        """How many times the sample at place ``q`` of this rank's order was served before in the epoch's padded
        order (0; 1 for the padding that evens out the ranks' shares)."""
        return (self.rank + q * self.world) // self.n if self.world > 1 and self.n else 0

    def tagged(self, indices: list[int], epoch: int, start: int = 0) -> list[int]:
        """``indices`` of ``epoch`` as :meth:`__iter__` gives them (:class:`SampleIndex` with ``tag``); ``start``:
        the place of the first in this rank's order."""
        if not self.tag:
            return indices
        return [SampleIndex(i, self.seed, epoch, self._copy(start + k)) for k, i in enumerate(indices)]

    def __iter__(self) -> Iterator[int]:
        skip, self.skip = self.skip, 0
        order = self.indices()[skip:]
        if self.tag:
            return (SampleIndex(i, self.seed, self.epoch, self._copy(skip + k)) for k, i in enumerate(order))
        return iter(order)

    def __len__(self) -> int:
        return self.per_rank


class EpochBatches(Sampler[list]):
    """The batches of one epoch after another, without end: what the workers of a loader made by
    :func:`create_loader` read, so that they go on to the next epoch's first batches while the
    training loop finishes this one (torch's DataLoader prefetches within an epoch only, and
    each epoch would start with empty queues). Each epoch's order comes from ``sampler``
    (:meth:`EpochSampler.indices`), cut into batches of ``batch_size``, the last one kept or
    dropped per epoch as ``drop_last`` says, or with ``drop_one`` dropped only where it would hold
    one sample, in a whole epoch and in one resumed part-way alike (a batch of one breaks BatchNorm).
    An iteration starts at ``start`` (epoch, samples to skip); ``len`` is the batches of one whole
    epoch, what :class:`Loader` hands out per epoch."""

    def __init__(self, sampler: EpochSampler, batch_size: int, drop_last: bool, drop_one: bool = False) -> None:
        self.sampler, self.batch_size, self.drop_last, self.drop_one = sampler, batch_size, drop_last, drop_one
        self.start = (0, 0)
        self.endless = False  # set by Loader while it starts its iterator

    def _served(self, left: int) -> int:
        """How many of the ``left`` samples of an epoch's order its batches hold."""
        if self.drop_last:
            return left - left % self.batch_size
        if self.drop_one and left % self.batch_size == 1 and len(self.sampler) > 1:
            return left - 1  # the last batch would hold one sample (an epoch of one sample keeps it)
        return left

    def count(self, skip: int = 0) -> int:
        """Batches in an epoch started ``skip`` samples in."""
        return -(-self._served(max(0, len(self.sampler) - skip)) // self.batch_size)

    def __len__(self) -> int:
        return self.count()

    def __iter__(self) -> Iterator[list]:
        # a generator: nothing is read (the sampler's skip above all) until the first batch is asked for. torch's
        # worker iterator calls iter() on it twice as it starts and keeps the second: taken at the first call, the
        # skip of a resumed epoch went with the iterator thrown away, and the epoch started again from its first
        # sample (persistent_workers=False, or a dataset read one epoch at a time)
        if self.endless:
            yield from self._batches(*self.start, endless=True)
            return
        # the DataLoader iterated directly (handed to code that expects one): one epoch, the
        # sampler's, as torch's own batch sampler would give
        skip, self.sampler.skip = self.sampler.skip, 0
        yield from self._batches(self.sampler.epoch, skip, endless=False)

    def _batches(self, epoch: int, skip: int, endless: bool) -> Iterator[list]:
        bs = self.batch_size
        while True:
            order = self.sampler.indices(epoch)[skip:]
            end = self._served(len(order))
            for k in range(0, end, bs):
                yield self.sampler.tagged(order[k : k + bs], epoch, skip + k)  # a batch at a time: no epoch of objects
            if not endless or self.count() == 0:
                return  # one epoch asked for, or no epoch holds a batch: nothing to go on to
            epoch, skip = epoch + 1, 0


class _BalancedIter(_MultiProcessingDataLoaderIter):
    """torch's iterator over worker processes, except that each batch goes to the worker with the
    fewest samples handed out and not yet received, where torch hands batches out in turn (as
    here for an iterable dataset, whose batches are what each worker's stream holds). In
    turn, an epoch of 200 samples in batches of 64 gives one of two workers 128 samples and the
    other 72, every epoch (the short last batch always lands on the same one), and a worker that
    drew cheap samples waits for the other; the batches still come back in order, and with the
    same samples in each."""

    def __init__(self, loader) -> None:
        self._balance = loader.balance
        super().__init__(loader)

    def _shutdown_workers(self) -> None:
        pids = [w.pid for w in getattr(self, "_workers", [])]
        try:
            if not getattr(self, "_shutdown", True) and _feeders_stopped(self):
                # collected in a reference cycle (a caught error's traceback holds the iterator, as in a
                # notebook): the garbage collector stopped the index queues' feeder threads first, so the
                # None that tells each worker to exit would never leave this process, and torch would wait
                # 5 s for each worker before terminating it. They are terminated now instead.
                _terminate_workers(self)
            super()._shutdown_workers()
        finally:
            forget_slots(pids)  # their batch slots: mapped here no longer (batches still held keep theirs)

    def _reset(self, loader, first_iter: bool = False) -> None:
        self._pending = [0] * self._num_workers  # samples handed to each worker, not yet received
        self._sizes: dict[int, tuple[int, int]] = {}  # task index -> (worker, samples)
        super()._reset(loader, first_iter)

    def _try_get_data(self, timeout=_torch_data_utils.MP_STATUS_CHECK_INTERVAL):
        try:
            return super()._try_get_data(timeout)
        except (ConnectionError, EOFError) as e:
            # a worker killed while it handed a batch over: the socket that batch's shared memory
            # comes through is reset before the process can be seen to have ended, so torch passes
            # the bare reset on; once it has ended, torch's own message names it
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                dead = [i for i, w in enumerate(self._workers) if self._workers_status[i] and not w.is_alive()]
                if dead:
                    for i in dead:
                        self._mark_worker_as_unavailable(i)
                    pids = ", ".join(str(self._workers[i].pid) for i in dead)
                    raise RuntimeError(f"DataLoader worker (pid(s) {pids}) exited unexpectedly") from e
                time.sleep(0.005)
            raise

    def _get_data(self):
        idx, data = super()._get_data()
        if isinstance(idx, int) and idx in self._sizes:  # not the acknowledgement of a reset
            worker, n = self._sizes.pop(idx)
            self._pending[worker] -= n
        return idx, data

    def _try_put_index(self) -> None:
        if not self._balance or not getattr(self, "_in_order", True) or self._dataset_kind == _DatasetKind.Iterable:
            # out of order, torch already hands out by free capacity; an iterable dataset's batch
            # is whatever the worker's own stream holds next, so in turn keeps the order fixed
            return super()._try_put_index()
        if self._tasks_outstanding >= self._prefetch_factor * self._num_workers:
            raise AssertionError("Number of outstanding tasks exceeded maximum allowed tasks")
        try:
            index = self._next_index()
        except StopIteration:
            return
        active = [w for w in range(self._num_workers) if self._workers_status[w]]
        if not active:
            return
        worker = min(active, key=lambda w: (self._pending[w], w))
        n = len(index) if isinstance(index, (list, tuple)) else 1
        self._index_queues[worker].put((self._send_idx, index))
        self._task_info[self._send_idx] = (worker,)
        self._sizes[self._send_idx] = (worker, n)
        self._pending[worker] += n
        if hasattr(self, "_workers_num_tasks"):
            self._workers_num_tasks[worker] += 1
        self._tasks_outstanding += 1
        self._send_idx += 1


class _BalancedDataLoader(DataLoader):
    """A DataLoader whose workers are given batches by :class:`_BalancedIter` when ``balance``:
    only where every sample is seeded from (seed, epoch, index) (:class:`PerSampleSeed`), so that
    which worker makes a batch changes nothing in it. Without that, a worker's draws go on from
    its own seed, and handing out in turn is what keeps a run repeatable."""

    balance = True
    epoch_batches: EpochBatches | None = None  # set by create_loader: its batches, one epoch at a time

    @property
    def _index_sampler(self):
        if self.epoch_batches is not None:
            return self.epoch_batches
        return super()._index_sampler

    def _get_iterator(self):
        if self.num_workers == 0:
            return super()._get_iterator()
        return _BalancedIter(self)  # torch's warning of more workers than CPUs was given once, at __init__


class _StreamingDataLoader(_BalancedDataLoader):
    """A DataLoader whose workers read :class:`EpochBatches` (``stream``): its one iterator runs
    on from epoch to epoch, and :class:`Loader` takes ``len(stream)`` batches from it per epoch.
    Everything else (``sampler``, ``batch_size``, ``drop_last``, ``len``) reads as usual."""

    def __init__(self, *args, drop_one: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.stream = EpochBatches(self.sampler, self.batch_size, self.drop_last and not drop_one, drop_one)
        self.owner: weakref.ref | None = None  # the Loader reading the stream, told before a direct iteration

    @property
    def _index_sampler(self):
        return self.stream

    def __iter__(self):
        loader = self.owner() if self.owner is not None and not self.stream.endless else None
        if loader is not None:
            loader._release("iterating loader.loader directly")  # its thread must be out of the iterator first
        return super().__iter__()


# ---------------------------------------------------------------------------------------------
# how long the training loop waits for data, and re-tuning num_workers from it


@dataclass
class EpochTiming:
    """One epoch as the training loop saw it. ``wait_s`` and ``total_s`` cover the batches after
    the first (whose wait is worker start-up, in ``first_batch_s``); ``cpu_busy_s`` is CPU time
    used on the machine (all processes) over the same span, ``own_cpu_s`` the part the loop's
    process and its workers used, ``loop_cpu_s`` the part the loop's process used alone;
    ``queued_s`` is how long the loading processes were ready to run but waited for a CPU (a
    decoder starved by other processes wants a whole core though it got less); ``wait_cpu_s``
    the CPU the loop's process used inside ``next()`` (without workers, the loading itself)."""

    epoch: int
    num_workers: int
    batches: int = 0
    wait_s: float = 0.0
    total_s: float = 0.0
    first_batch_s: float = 0.0
    cpu_busy_s: float | None = None
    own_cpu_s: float | None = None
    loop_cpu_s: float | None = None
    queued_s: float = 0.0
    wait_cpu_s: float | None = None

    @property
    def wait_fraction(self) -> float | None:
        """Share of the time between batches the loop spent waiting for the next one."""
        return self.wait_s / self.total_s if self.batches >= 2 and self.total_s > 0 else None


def _cpu_busy_seconds() -> float | None:
    """CPU-seconds the machine has spent not idle since boot (``/proc/stat``); None elsewhere."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _queued_seconds(pid: int | str) -> float:
    """Seconds a process's main thread has been ready to run but waiting for a CPU (the run
    queue, ``/proc/PID/schedstat``); 0 where the kernel does not say."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def _own_cpu_seconds(loader: DataLoader) -> tuple[float, float, float]:
    """CPU-seconds used so far by this process and the loader's live workers, by this process
    alone, and the seconds the loading processes (the workers, or this process without them)
    waited for a CPU."""
    loop = total = time.process_time()
    workers = getattr(getattr(loader, "_iterator", None), "_workers", None) or []
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    queued = 0.0 if workers else _queued_seconds("self")
    for w in workers:
        try:
            with open(f"/proc/{w.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        except (OSError, ValueError, IndexError, TypeError):
            continue
        queued += _queued_seconds(w.pid)
    return total, loop, queued


def next_num_workers(t: EpochTiming, cpus: int, max_workers: int, *, threshold: float = 0.05) -> int:
    """The worker count for the next epoch, from the epoch just measured (tf.data AUTOTUNE's idea).

    Unchanged unless the loop waited more than ``threshold`` of the time (input-bound). One
    loading process spends ``load`` seconds per batch (the wait itself without workers;
    ``num_workers`` times the batch interval with them, as each worker delivers one batch per
    round); the loop's own step is ``interval - wait``; so ``1.1 * load / step`` workers keep up.
    That is capped by ``max_workers`` and by the loading processes the CPUs can feed: the cores
    that other processes and the loop's own process leave free (at least what the workers use
    now plus half a core), divided by the CPU one loading process used or waited for while
    loading; the last worker may get three quarters of a core's share (on 2 cores, a loop using
    a fifth of one must not hold decoding to one worker). Loading that waits on a disk or
    network uses little CPU and may grow past the cores; decoding is held to them, also when
    other processes starve it (its time in the run queue counts as wanted CPU).
    """
    w = t.num_workers
    intervals = t.batches - 1
    f = t.wait_fraction
    if f is None or f <= threshold or w >= max_workers:
        return w
    interval = t.total_s / intervals
    wait = t.wait_s / intervals
    step = max(interval - wait, 0.02 * interval)
    load = wait if w == 0 else w * interval
    need = math.ceil(1.1 * load / step)  # 10% for handing batches over between processes
    cap = max_workers
    if t.cpu_busy_s is not None:
        busy = t.cpu_busy_s / t.total_s  # cores busy on average, whoever uses them
        own = (t.own_cpu_s if t.own_cpu_s is not None else t.cpu_busy_s) / t.total_s
        if w == 0 and t.wait_cpu_s is not None:
            loading = t.wait_cpu_s / t.total_s  # the loop's process loads inside next(); its step is the rest
            loop = max(own - loading, 0.0)
        else:
            # without a measure of the loading inside next(), all of the process's CPU counts as loading
            loop = t.loop_cpu_s / t.total_s if w > 0 and t.loop_cpu_s is not None else 0.0
            loading = max(own - loop, 0.0)
        free = max(cpus - max(0.0, busy - own) - loop, loading + 0.5)
        # cores one loading process would keep busy while loading: what it used, and what it waited for
        wanted = loading + t.queued_s / t.total_s
        per_loader = max(wanted / f if w == 0 else wanted / w, 1e-3)
        cap = min(cap, math.floor(free / per_loader + 0.25))
        if cap <= w:
            return w  # the CPUs are taken: more workers would only compete for them
    return max(w + 1, min(need, cap))


@contextlib.contextmanager
def _chosen_workers():
    """Without torch's warning about more workers than CPUs: loading that waits on I/O is helped
    by more, and the count was measured, not guessed."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        yield


class _Receiver:
    """Takes batches from a worker DataLoader's iterator on a thread of its own, one ahead of the
    loop: receiving one (unpickling it, fetching each shared-memory file descriptor from its
    worker, mapping it) then overlaps with the training step instead of adding to it. At most
    one batch waits here (the one arriving, in :func:`plan_shared_memory`'s count), and the batch
    the loop let go of is freed on the thread too, right after the loop takes the next (until
    then the two overlap for a moment: one batch more than the count, within its 10% margin of
    free space for batches under a tenth of it). Errors, worker failures and timeouts reach the
    loop from ``next()`` as they would have directly."""

    def __init__(self, it: Iterator) -> None:
        import queue
        import threading

        self._it = it
        self._slot = threading.Semaphore(1)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = False
        # set when _run has returned: Thread.join() interrupted by Ctrl-C marks the thread ended while it
        # still runs (CPython releases its state lock on the way out), so the end is told by this instead
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="datakit-receive", daemon=True)
        _RECEIVERS.add(self)
        _THREADS.add(self._thread)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._receive()
        finally:
            self._done.set()

    def _receive(self) -> None:
        # references to the batch handed out last and the one before it: when the loop takes the
        # next, it has let go of the one before, whose shared memory is then unmapped and freed
        # here rather than in the loop (unless the loop kept it)
        kept: list = [None, None]
        while True:
            self._slot.acquire()  # the loop took the last batch
            kept[0] = None
            if self._stop:
                self._let_go()
                return
            try:
                item = (True, next(self._it))
            except StopIteration:
                item = (False, None)
            except BaseException as exc:  # handed to the loop, raised there
                item = (False, exc)
            ok = item[0]
            kept[0], kept[1] = kept[1], item[1] if ok else None
            self._queue.put(item)
            del item
            if not ok:
                return

    def _let_go(self, patience: float = 2.0) -> None:
        """With the ``file_system`` sharing strategy, receive and free the batches still in flight
        before letting go of the iterator: each is a file in /dev/shm that nothing else would
        remove until the process ends (with file descriptors, the kernel frees them)."""
        import torch.multiprocessing as tmp

        it = self._it
        if tmp.get_sharing_strategy() != "file_system" or not getattr(it, "_tasks_outstanding", 0):
            return
        it._sampler_iter = iter(())  # no new batches are asked for; the next iteration resets it
        deadline = time.monotonic() + patience
        while it._tasks_outstanding and time.monotonic() < deadline:
            try:
                it._next_data()
            except Exception:  # StopIteration, or a worker's error: nothing more will come
                return

    def __iter__(self) -> _Receiver:
        return self

    def __next__(self):
        ok, value = self._queue.get()
        self._slot.release()
        if ok:
            return value
        if value is None:
            raise StopIteration
        raise value

    def close(self, wait: bool = True) -> None:
        """Stop after the batch being received, if any; with ``wait``, return once the thread has
        ended (the DataLoader's iterator is then free for the next epoch)."""
        self._stop = True
        self._slot.release()
        if wait:
            self.join()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; whether it has."""
        return self._done.wait(timeout)


_RECEIVERS: weakref.WeakSet[_Receiver] = weakref.WeakSet()
_THREADS: weakref.WeakSet = weakref.WeakSet()  # a thread outlives its receiver while it lets go of the iterator
# in a process forked (os.fork) from one that iterated loaders: its receivers and DataLoader iterators, whose
# threads did not survive the fork and whose workers are the parent's, kept from garbage collection (torch's
# shutdown would wait on workers that are not this process's children) and never used
_INHERITED: list = []


def _forked_child() -> None:
    _INHERITED.extend(_RECEIVERS)
    _RECEIVERS.clear()
    _THREADS.clear()
    # the parent's worker processes: multiprocessing's exit handler in this child would terminate them (and fail to
    # join them), killing the parent's next epoch; Process objects its own start resets likewise
    children = multiprocessing.process._children  # type: ignore[attr-defined]
    _INHERITED.extend(children)
    children.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked_child)


def _stop_receivers() -> None:
    """At exit, before the interpreter tears down: a receiving thread still inside torch's
    iterator (the loop left an epoch early, or Ctrl-C), or still shutting the iterator's workers
    down as it lets go of it, would be stopped in the middle of C++ code and abort the process
    ("terminate called without an active exception"). Each is stopped and waited for; one held by
    a slow or stuck batch gets its workers shut down, which ends it."""
    for r in list(_RECEIVERS):
        try:
            r.close(wait=False)
            if not r.join(2.0):
                _abandon(r._it, r)
        except Exception:  # noqa: BLE001 - torch's SIGCHLD handler raises here for a worker Ctrl-C ended first
            with contextlib.suppress(Exception):
                _abandon(r._it, r)
    for thread in list(_THREADS):  # ended receivers whose thread is still freeing the iterator
        with contextlib.suppress(Exception):
            thread.join(10.0)


atexit.register(_stop_receivers)  # registered after torch's own exit hook (imported above): runs before it


def _merge_unended(ds, pid: int) -> None:
    """The bad samples of a pass that handed out its last batch, none asked past it, merged when its loader goes
    (a run's last epoch under a loop that takes len(loader) batches and never asks past them, PyTorch Lightning's,
    with the loader made in a function) or at the interpreter's exit, as the next ``iter()`` would have. Only in the
    process that ran the pass (``pid``): a worker forked meanwhile holds a copy of the finaliser too."""
    if os.getpid() != pid:
        return
    try:
        _merge_recorded(ds)
    except Exception as exc:  # noqa: BLE001 - at exit or in a collection: said, not raised
        log.warning("the last epoch's bad samples were not merged into their report: %s", exc)


def _merge_recorded(ds) -> None:
    merge, report = getattr(ds, "merge_bad_samples", None), getattr(ds, "bad_samples", None)
    if not callable(merge) or not isinstance(report, os.PathLike) or not os.path.isdir(os.path.dirname(report)):
        return  # (a report in a folder removed since, a temporary one: nothing is made again at exit)
    parts = getattr(ds, "_parts_dir", None)
    if getattr(ds, "bad", None) or (callable(parts) and parts().is_dir()):  # something recorded to merge
        merge()


@contextlib.contextmanager
def _heap_frozen(starting_workers: bool):
    """While workers fork, every object of this process is moved out of the garbage collector's
    reach (``gc.freeze``) and put back afterwards. Otherwise a forked worker's first collection
    frees the garbage it inherited, and when that holds a CUDA tensor (a batch caught in a
    reference cycle) the worker calls into CUDA, which cannot work after fork: it dies with
    "CUDA error: initialization error" before reading a sample. It also spares the workers
    copying the parent's pages to update reference counts. Where the program froze objects
    itself, the garbage is collected here instead, and its frozen objects stay frozen."""
    if not starting_workers:
        yield
        return
    import gc

    if gc.get_freeze_count():
        gc.collect()
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _script_tree(path: str):
    import ast

    try:
        with open(path, "rb") as f:
            return ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None


def _is_guard(node) -> bool:
    """Whether ``node`` is ``if __name__ == "__main__":`` (either way round)."""
    import ast

    t = node.test if isinstance(node, ast.If) else None
    if not isinstance(t, ast.Compare) or len(t.ops) != 1 or not isinstance(t.ops[0], ast.Eq):
        return False
    sides = [t.left, t.comparators[0]]
    return any(isinstance(x, ast.Name) and x.id == "__name__" for x in sides) and any(
        isinstance(x, ast.Constant) and x.value == "__main__" for x in sides
    )


def _asks_which_process(node) -> bool:
    """Whether an ``if``/``while``/``match`` may keep a statement from a spawned worker: any condition may (a flag
    set from ``__name__``, a helper that asks it, an environment variable), except one that is always true."""
    import ast

    test = node.subject if isinstance(node, ast.Match) else node.test
    return not (isinstance(test, ast.Constant) and bool(test.value))


def _unguarded_line(path: str) -> int | None:
    """The line of the script at ``path`` running now at its top level outside any ``if`` (``if __name__ ==
    "__main__":`` above all): the statement that led here; None when it runs inside one (or not at the top level).
    A spawned worker imports the script and so runs that statement again, starting workers of its own while
    it is still starting: each dies with Python's "bootstrapping phase" error."""
    frame = sys._getframe(1)
    where = os.path.abspath(path)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__":
            if os.path.abspath(code.co_filename) != where:
                return None
            line = frame.f_lineno
            tree = _script_tree(path)
            if tree is None:
                return None
            # inside an `if` (or `match`, `while`) at any depth: a guard of some form (`__name__ == "__main__" and
            # ...`, `!= "__mp_main__"`, in an else branch, a flag set from one), or a condition that may be false in
            # a spawned worker; `if True:` is none
            blocks = (ast.If, ast.Match, ast.While)
            inside = any(isinstance(n, blocks) and n.lineno <= line <= (n.end_lineno or n.lineno)
                         and _asks_which_process(n) for n in ast.walk(tree))  # fmt: skip
            return None if inside else line
        frame = frame.f_back
    return None


def _guarded_names(path: str) -> dict[str, int]:
    """The classes and functions the script at ``path`` defines only inside ``if __name__ == "__main__":``
    (by name, with the line), which a spawned process importing the script as ``__mp_main__`` never defines."""
    import ast

    tree = _script_tree(path)
    if tree is None:
        return {}
    is_guard = _is_guard

    def defined(nodes, out: dict, skip_guard: bool) -> None:
        for node in nodes:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                out.setdefault(node.name, node.lineno)
            elif skip_guard and is_guard(node):
                defined(node.orelse, out, skip_guard)
            else:  # the blocks of if, with, for and try at this level define names at this level too
                for field in ("body", "orelse", "finalbody", "handlers"):
                    defined([n for n in getattr(node, field, None) or () if isinstance(n, ast.AST)], out, skip_guard)

    everywhere: dict[str, int] = {}
    outside: dict[str, int] = {}
    defined(tree.body, everywhere, skip_guard=False)
    defined(tree.body, outside, skip_guard=True)
    return {name: line for name, line in everywhere.items() if name not in outside}


def _no_workers_fix() -> str:
    """How to load without workers: num_workers=0, or (where DATAKIT_NUM_WORKERS forced the count, whatever
    num_workers says) that variable."""
    env = os.environ.get("DATAKIT_NUM_WORKERS") or None
    if env is None:
        return "num_workers=0"
    return f"num_workers=0 (DATAKIT_NUM_WORKERS={env.strip()} is set, and decides: set it to 0 or unset it)"


def _check_main_guard(dl: DataLoader, method: str) -> None:
    """Spawned workers import the training script as ``__mp_main__``, without running its ``if __name__ ==
    "__main__":`` block: a transform class (or function) defined in that block is not there, and each worker
    dies unpickling the dataset ("worker exited unexpectedly", the cause on its stderr only). Said before."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if method not in ("spawn", "forkserver"):
        return
    spec = getattr(getattr(main, "__spec__", None), "name", None)
    if path and not spec:  # (the spawned workers run the file at this path again, as multiprocessing finds it)
        full = path if os.path.isabs(path) else os.path.join(multiprocessing.process.ORIGINAL_DIR or "", path)
        if not os.path.isfile(full):  # python - < script.py: '<stdin>', which every worker failed to open
            raise UsageError(f"{method}-started workers run the main program's file again, and this program has none "
                             f"(its __file__ is {path!r}: code read from stdin?); save the code as a .py file and "
                             "run that, or use num_workers=0")  # fmt: skip
    if not path:  # python -c, a notebook: no script to import
        _check_no_script(dl, method)
        return
    # `python -m pkg` runs pkg/__main__.py, which spawned processes do not import at all
    package_main = os.path.basename(path) == "__main__.py"
    line = None if package_main else _unguarded_line(path)
    if line is not None:
        script = os.path.basename(path)
        raise UsageError(f"{method}-started workers import {script} and run its top level again, which would start "
                         f"this loader again in each of them (line {line}, outside any `if __name__ == "
                         f"\"__main__\":`); put the code that runs the loader under `if __name__ == \"__main__\":` "
                         f"at the end of {script}")  # fmt: skip
    guarded = {} if package_main else _guarded_names(path)
    if not guarded and not package_main:
        return
    found = [top for top in _main_objects(dl) if package_main or top in guarded]
    if found and package_main:
        package = os.path.basename(os.path.dirname(path))
        raise UsageError(f"{method}-started workers cannot find {found[0]}: {package}/__main__.py defines it, and "
                         f"spawned processes do not import a package's __main__.py (python -m {package}); define "
                         f"{found[0]} in another module of {package} and import it from there")  # fmt: skip
    if found:
        name, script = found[0], os.path.basename(path)
        raise UsageError(f"{method}-started workers cannot find {name}: {script} defines it inside "
                         f"`if __name__ == \"__main__\":` (line {guarded[name]}), a block they skip when they "
                         f"import {script}; define {name} at the top level of {script} (or in a module of its "
                         "own)")  # fmt: skip


def _main_objects(dl: DataLoader) -> list[str]:
    """The top-level names of the classes and functions of ``__main__`` that the workers of ``dl`` unpickle, in the
    order met; [] where what they get does not pickle (said by the start itself)."""
    found: list[str] = []

    class Scan(pickle.Pickler):
        def reducer_override(self, obj):
            if isinstance(obj, (type, types.FunctionType)) and getattr(obj, "__module__", None) == "__main__":
                top = getattr(obj, "__qualname__", "").split(".")[0]
                if top not in found:
                    found.append(top)
            return NotImplemented

    try:
        Scan(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL).dump((dl.dataset, dl.collate_fn, dl.worker_init_fn))
    except Exception:
        return []
    return found


def _check_no_script(dl: DataLoader, method: str) -> None:
    """A class or function of ``__main__`` where ``__main__`` is no script file (``python -c``, a notebook,
    ``exec``): spawned workers have nothing to import it from, and each one dies unpickling the dataset."""
    found = _main_objects(dl)
    if found:
        name = found[0]
        raise UsageError(f"{method}-started workers cannot find {name}: it is defined in __main__, which here is no "
                         "script file they could import (python -c, a notebook, code read from stdin); define "
                         f"{name} in a module (a .py file) and import it from there, or use num_workers=0")  # fmt: skip


def _start_method(dl: DataLoader) -> str:
    ctx = dl.multiprocessing_context
    if isinstance(ctx, str):
        return ctx
    return ctx.get_start_method() if ctx is not None else multiprocessing.get_start_method()


@contextlib.contextmanager
def _sigint_held(method: str | None):
    """SIGINT blocked in this thread while workers fork: they inherit the mask and never get Ctrl-C, which is
    the main process's to handle (it ends them). A Ctrl-C meanwhile is not lost: another thread takes it,
    and Python runs its handler in the main thread. Spawned workers start a fresh program, which resets
    the mask; keeping Ctrl-C from them would take an ignored SIGINT, process-wide, which another thread
    would then discard."""
    block = getattr(signal, "pthread_sigmask", None)
    if method != "fork" or block is None:
        yield
        return
    old_mask = block(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        block(signal.SIG_SETMASK, old_mask)


def _unwrap_worker_error(exc: Exception) -> Exception:
    """An error raised in a worker, with the message it had there: DataLoader re-raises it with
    the worker's whole traceback in the message, which buries the one line that matters. The
    traceback stays, as the cause of an error not datakit's own (the user's file and line). Left
    as it is where the type cannot be made again from its message (KeyError quotes it, others
    take other arguments)."""
    from datakit.errors import DatakitError

    msg = str(exc)
    cls = type(exc)
    # the traceback's last line names the type as traceback prints it: without the module for builtins and
    # for the script's own classes (__main__)
    # for the script's own classes (__main__; a spawned worker imports the script as __mp_main__)
    if cls.__module__ in ("builtins", "__main__"):
        names = [cls.__qualname__, f"__mp_main__.{cls.__qualname__}"]
    else:
        names = [f"{cls.__module__}.{cls.__qualname__}"]
    # "ValueError: message", or "ValueError" alone for an empty message (its notes, if any, on the next lines)
    marks = [m for n in names for m in (f"\n{n}: ", f"\n{n}\n")] + [f"\n{n}" for n in names if msg.endswith(f"\n{n}")]
    marker, k = max(((m, msg.rfind(m)) for m in marks), key=lambda mk: mk[1])
    if not msg.startswith("Caught ") or k < 0:
        return exc
    text = msg[k + len(marker) :].rstrip("\n")
    from datakit.sources import SAMPLE_NOTE

    lines = ([""] if marker.endswith("\n") else []) + text.split("\n")  # "ValueError\n(note)": no message
    notes = []
    while len(lines) > 1 and SAMPLE_NOTE.fullmatch(lines[-1]):  # the sample it met (name_sample), printed after it
        notes.insert(0, lines.pop())
    text = "\n".join(lines)
    try:
        if issubclass(cls, KeyError):  # its message is its key's repr: the key itself again
            import ast

            out = cls(ast.literal_eval(text))
        else:
            out = cls(text)
    except Exception:
        return exc
    if not issubclass(cls, DatakitError):  # the user's own error: where it was raised, shown above it
        out.__cause__ = WorkerTraceback(msg.rstrip("\n"))
    for note in notes:
        out.add_note(note)
    return out


class WorkerTraceback(Exception):
    """The traceback of an error raised in a DataLoader worker, as the cause of the one-line error the
    loop gets: a traceback printed shows the worker's file and line first."""


class Loader:
    """A DataLoader that calls ``sampler.set_epoch`` at every pass, measures how long the loop
    waits for each batch (``wait_fraction``, ``timing``, one log line per epoch), merges the
    dataset's bad-sample records after each epoch, re-tunes ``num_workers`` between epochs when
    ``autotune``, and forwards everything else (``len``, ``dataset``, ``sampler``, ``batch_size``
    ...) to the DataLoader inside."""

    def __init__(
        self,
        loader: DataLoader,
        *,
        autotune: bool = False,
        rebuild: Callable[[int], DataLoader] | None = None,
        max_workers: int | None = None,
    ) -> None:
        self.loader = loader
        self.epoch = 0
        self.autotune = autotune and rebuild is not None
        self._rebuild = rebuild
        self.max_workers = max_workers if max_workers is not None else _max_workers()
        self.timing: EpochTiming | None = None
        self.history: list[EpochTiming] = []
        self._tuned = False
        self._pending: list[_Receiver] = []  # receiving threads of epochs left, to be joined
        self._generation = 0  # of the epoch iteration now running: a newer one supersedes it
        self._told_epoch: int | None = None  # the epoch last given to sampler.set_epoch
        self._ended_by = "iter"  # what superseded the last: a newer iteration, close() or set_num_workers()
        self._started: int | None = None  # the epoch the last pass begun by iter(loader) served
        self._unended: tuple | None = None  # a pass that handed out its last batch, whose end no request past it ran
        self._warned_steps = False
        # the iterator over a _StreamingDataLoader's batches that reads on into the next epoch,
        # and the (epoch, skip) its next batch belongs to
        self._feed: Iterator | None = None
        self._feed_at: tuple[int, int] | None = None
        self._live: Iterator | None = None  # the iterator of the epoch in progress (see _worker_lost)
        self._workers_saw: tuple | None = None  # the transforms the running workers were started with
        # the statistics a device plan normalises the batches with, and whether they are the pipeline's (or the
        # default) rather than normalize='s: a pipeline set between epochs is checked against them
        self.normalises_with: tuple | None = None
        self._pid = os.getpid()  # the process whose workers and threads serve it (see _after_fork)

    def _after_fork(self) -> None:
        """In a process forked (``os.fork``) from the one that iterated this loader: its workers, their iterator and
        the thread receiving from them are the parent's (the thread did not survive the fork, and the next epoch
        waited on it forever). They are left as they are, and the next epoch starts workers of this process's own."""
        if self.__dict__.get("_pid", os.getpid()) == os.getpid():
            return
        self._pid = os.getpid()
        held = [self._feed, self._live, *self._pending, getattr(self.loader, "_iterator", None)]
        _INHERITED.extend(x for x in held if x is not None)
        if getattr(self.loader, "_iterator", None) is not None:
            self.loader._iterator = None
        self._feed = self._feed_at = self._live = self._unended = self._workers_saw = None
        self._pending = []

    def _end_receiver(self, r: _Receiver, patience: float) -> None:
        """Stop ``r`` and wait for its thread. A batch in transit that has not come within
        ``patience`` seconds (a stuck read, perhaps of a batch no one will ask for) ends with the
        workers of its iterator; the next iteration starts new ones."""
        r.close(wait=False)
        if r.join(patience):
            return
        _abandon(r._it, r)
        if getattr(self.loader, "_iterator", None) is r._it:
            self.loader._iterator = None

    def _join_pending(self, patience: float = 5.0) -> None:
        """Stop and wait for the receiving threads of earlier epochs (an epoch left early, or one
        superseded by a newer iteration): the DataLoader's iterator is then free."""
        while self._pending:
            self._end_receiver(self._pending[-1], patience)
            self._pending.pop()  # only once ended: a Ctrl-C while waiting leaves it to the next call

    @property
    def dataset(self) -> Dataset:
        """The dataset as given to :func:`create_loader` (not the wrapper around it, :class:`PerSampleSeed`)."""
        ds = self.loader.dataset
        ds = ds.inner if isinstance(ds, _NotedBatches) else ds
        return ds.given if isinstance(ds, (_PooledSubset, _PooledConcat)) else ds

    @property
    def wait_fraction(self) -> float | None:
        """Share of the time the loop waited for data, over the current (or last) epoch so far."""
        return self.timing.wait_fraction if self.timing is not None else None

    def _open(self, dl: DataLoader) -> Iterator:
        """The DataLoader's iterator; with workers, batches are received (unpickled, their shared
        memory fetched from the worker and mapped: 1-3 ms each) on a thread while the step runs
        (a pinning loader's own thread does this already)."""
        old = getattr(dl, "_iterator", None)
        if old is not None:
            # a receiving thread still inside the iterator that nothing here holds (a Ctrl-C came between
            # its start and its hand-over): the reset below would race it for the workers' answers, and
            # wait forever for the one it took; it is stopped first
            for r in [r for r in list(_RECEIVERS) if r._it is old and not r._done.is_set()]:
                self._end_receiver(r, 5.0)
            old = getattr(dl, "_iterator", None)
        if old is not None and any(not w.is_alive() for w in getattr(old, "_workers", ())):
            # a worker died (killed, out of memory) and was reported: torch's persistent iterator
            # would only report it again at every start; new workers instead
            _abandon(old)
            dl._iterator = None
        elif old is not None and getattr(old, "_tasks_outstanding", 0) > 0 and not _drain(old, 5.0):
            # batches of an epoch left early still being read: torch's reset would wait for each, however long
            # a stuck one takes; past 5 s those workers end and new ones start
            _abandon(old)
            dl._iterator = None
        try:
            starting = dl.num_workers > 0 and getattr(dl, "_iterator", None) is None
            if starting:
                _check_main_guard(dl, _start_method(dl))
                self._workers_saw = _transforms_of(self.dataset)
            with (
                _chosen_workers() if self._tuned else contextlib.nullcontext(),
                _heap_frozen(dl.num_workers > 0),
                _sigint_held(_start_method(dl) if starting else None),
            ):
                try:
                    with warnings.catch_warnings():  # torch's own words on it, before the error below says it in one
                        warnings.filterwarnings("ignore", "Got pickle error when attempting to start a worker")
                        it = iter(dl)
                except (AttributeError, TypeError, pickle.PicklingError) as exc:
                    if not starting or "pickle" not in str(exc):
                        raise
                    # a spawn- or forkserver-started worker gets the dataset pickled: a lambda or a local function
                    # in it cannot be (torch's error is 16 frames of multiprocessing)
                    raise UsageError(f"the loader cannot send the dataset and its functions to {_start_method(dl)}-"
                                     f"started workers ({exc}): what they get must pickle: functions (transform=, "
                                     "target_transform=, on_error=, collate_fn=, worker_init_fn=) defined at module "
                                     "level, not "
                                     "lambdas nor inside a function, and no open file in the dataset; or use "
                                     f"{_no_workers_fix()}") from None  # fmt: skip
        except BaseException:
            # interrupted (Ctrl-C) while torch reset its iterator for the epoch: that iterator's
            # bookkeeping is half done and would give the wrong batches; the next epoch starts anew
            broken = getattr(dl, "_iterator", None)
            if broken is not None:
                _abandon(broken)
                dl._iterator = None
            raise
        return _Receiver(it) if dl.num_workers > 0 and not dl.pin_memory else it

    def _drop_feed(self, wait: bool, patience: float = 5.0) -> None:
        """Stop reading ahead from the batch stream (see :meth:`_feed_from`); with ``wait``, until
        its thread and those of earlier epochs have ended (:meth:`_end_receiver`)."""
        feed, self._feed, self._feed_at = self._feed, None, None
        if isinstance(feed, _Receiver):
            feed.close(wait=False)
            self._pending.append(feed)  # joined before the DataLoader's iterator is used again
        if wait:
            self._join_pending(patience)

    def _release(self, cause: str) -> None:
        """Someone else iterates the DataLoader inside: the epoch in progress ends, and the feed
        stops reading (its thread leaves the DataLoader's iterator before that resets it)."""
        self._supersede(cause)
        self._drop_feed(wait=True)

    def _supersede(self, cause: str) -> None:
        """An iteration in progress, if any, is over: resumed, it refuses (``cause`` says why)."""
        self._generation += 1
        self._ended_by = cause

    def _feed_from(self, dl: _StreamingDataLoader, epoch: int, skip: int) -> Iterator:
        """The iterator over the loader's batch stream, standing at (``epoch``, ``skip``): the one
        that went on from the last epoch when that is where it stands (its workers have been
        reading this epoch's first batches already), else restarted there."""
        if self._feed is None or self._feed_at != (epoch, skip):
            self._drop_feed(wait=True)
            dl.stream.start, dl.stream.endless = (epoch, skip), True
            dl.owner = weakref.ref(self)
            try:
                self._feed = self._open(dl)
            finally:
                dl.stream.endless = False
        self._feed_at = None  # in use: where it stands is known again when the epoch ends
        return self._feed

    def _worker_lost(self) -> bool:
        """Whether a worker of the epoch in progress has died unreported: torch's handler for its death raised the
        error wherever the main process was (in the loop's step, where it was caught), and the iterator would
        only report it again at the next batch."""
        it = self._live._it if isinstance(self._live, _Receiver) else self._live
        if not isinstance(it, _MultiProcessingDataLoaderIter) or getattr(it, "_shutdown", True):
            return False
        return any(up and not w.is_alive() for w, up in zip(it._workers, it._workers_status))

    def _ended(self, epoch: int) -> UsageError:
        """What a superseded epoch iterator raises when resumed."""
        if self._ended_by != "iter":
            return UsageError(f"the iterator of epoch {epoch} was ended by {self._ended_by}; start the epoch again "
                              "with iter(loader)")  # fmt: skip
        return UsageError(f"the iterator of epoch {epoch} was superseded by a newer iter(loader): a loader serves "
                          "one epoch at a time; finish or close the first, or make a second loader")  # fmt: skip

    def _iterate(self, epoch: int, skip: int = 0) -> Iterator:
        # the epoch in progress ends here, at iter(loader), not at the new iterator's first batch
        self._after_fork()
        self._supersede("iter")
        return self._run(epoch, skip, self._generation)

    def _tell_epoch(self, dl, epoch: int) -> None:
        sampler = dl.sampler
        if isinstance(sampler, EpochSampler):
            sampler.epoch, sampler.asked = epoch, None  # the loader's own telling: not a caller's request
            self._told_epoch = epoch
        elif hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
            self._told_epoch = epoch

    def _run(self, epoch: int, skip: int, gen: int) -> Iterator:
        dl = self.loader
        sampler = dl.sampler
        self._tell_epoch(dl, epoch)
        if skip and not isinstance(sampler, EpochSampler):
            raise ValueError("resuming mid-epoch needs the EpochSampler that create_loader sets up")
        try:
            self._check_statistics(epoch)
        except UsageError:
            if self.epoch == epoch + 1:  # refused before its first batch: the next pass serves this epoch again
                self.epoch = epoch
            raise
        self._restart_if_changed(epoch)
        if isinstance(dl, _StreamingDataLoader) and self._rebuild is not None and _live_values(self.dataset):
            # a transform set since holds a value the loop sets between epochs: what is read ahead would take the
            # epoch before's; made again, to read one epoch at a time
            self._drop_feed(wait=True, patience=2.5)
            _stop_workers(dl)
            self._workers_saw = None
            with _chosen_workers() if self._tuned else contextlib.nullcontext():
                self.loader = self._rebuild(dl.num_workers)
        if self.loader is not dl:
            dl = self.loader
            self._tell_epoch(dl, epoch)
        t = self.timing = EpochTiming(epoch, dl.num_workers)
        clock = time.perf_counter
        stream = isinstance(dl, _StreamingDataLoader)
        if stream:
            left = dl.stream.count(skip)
            it = self._feed_from(dl, epoch, skip) if left else iter(())
            own = None
        else:
            left = -1  # until the iterator ends
            if skip:
                sampler.skip = skip
            self._join_pending()  # the last epoch's thread may still be inside the iterator
            it = self._open(dl)
            own = it if isinstance(it, _Receiver) else None
            if own is not None:
                self._pending.append(own)  # a newer iteration stops it before resetting the iterator
        self._live = it  # (whose workers :meth:`_worker_lost` looks at)
        first = cpu0 = own0 = None
        failed = False
        # the batches this pass gives, where known: a loop that takes len(loader) of them and asks for none past
        # (Lightning's fetcher, zip(range(n), loader)) has its epoch ended at the next iter(loader)
        expected = None if stream or skip or isinstance(dl.dataset, torch.utils.data.IterableDataset) else _length(dl)
        cpu = time.process_time
        try:
            while left != 0:
                t0, c0 = clock(), cpu()
                if gen != self._generation:
                    raise self._ended(epoch)
                try:
                    batch = next(it)
                except StopIteration:
                    break
                except Exception as exc:
                    failed = True
                    unwrapped = _unwrap_worker_error(exc)
                    if unwrapped is exc:
                        raise
                    raise unwrapped from unwrapped.__cause__  # the worker's traceback, or nothing
                t1 = clock()
                left -= 1
                if left == 0 and stream:
                    self._feed_at = (epoch + 1, 0)  # the last batch: the feed reads on into the next epoch
                t.batches += 1
                if first is None:
                    first, t.first_batch_s, cpu0, own0 = t1, t1 - t0, _cpu_busy_seconds(), _own_cpu_seconds(dl)
                    t.wait_cpu_s = 0.0
                    self._unended_merge(True)  # (a pass left before its end: its bad samples merged when it goes)
                else:
                    t.wait_s += t1 - t0
                    t.wait_cpu_s += cpu() - c0
                    t.total_s = t1 - first
                if left == 0 if stream else t.batches == expected:
                    self._unended = (gen, t, dl, first, cpu0, own0)  # its end, should no batch be asked past it
                yield batch
        finally:
            if self._live is it:
                self._live = None  # (held no longer: the iterator, its workers and batches go with the last holder)
            # leaving early (break, an error, Ctrl-C) does not wait for the batch being received,
            # which may be a slow one: the next epoch waits for it instead; a superseded iteration
            # leaves everything to the one that superseded it
            if own is not None:
                own.close(wait=False)
                if failed and not dl.persistent_workers and own.join(1.0):
                    # an epoch that failed: its workers go now, not when a garbage collection finds the iterator
                    # (the error's traceback holds it in a cycle), or each failed epoch would leave its workers
                    shutdown = getattr(own._it, "_shutdown_workers", None)
                    if shutdown is not None:
                        shutdown()
            elif stream and it is self._feed and gen == self._generation and left != 0:
                self._drop_feed(wait=False)
        if gen != self._generation:
            return
        self._unended = None
        self._unended_merge(False)
        self._epoch_done(t, dl, first, cpu0, own0)

    def _epoch_done(self, t: EpochTiming, dl, first, cpu0, own0) -> None:
        if first is not None:
            own1, loop1, queued1 = _own_cpu_seconds(dl)
            t.own_cpu_s, t.loop_cpu_s, t.queued_s = own1 - own0[0], loop1 - own0[1], queued1 - own0[2]
            cpu1 = _cpu_busy_seconds()
            t.cpu_busy_s = cpu1 - cpu0 if cpu1 is not None and cpu0 is not None else None
        self._end_epoch(t)

    def _check_statistics(self, epoch: int) -> None:
        """A pipeline set since the loader was made (``ds.transform = train_pipeline(160, mean=...)``) whose
        statistics differ from the ones the batches are normalised with would train on wrongly normalised
        input, without a word: refused at the epoch's start, as create_loader refuses it."""
        _check_same_scale(self.dataset, epoch)  # (a part switched to normalize=True meanwhile)
        if self.normalises_with is None:
            return
        applied, from_pipeline = self.normalises_with
        for kind, stats in _pipeline_stats(self.dataset):
            if kind == "default" and not from_pipeline:
                continue  # normalize= given beside a pipeline of the default: those given apply, as at the start
            if not _same_stats(stats, applied):
                now = f"mean={stats[0]}, std={stats[1]}" + (" (the default, ImageNet's)" if kind == "default" else "")
                raise UsageError(f"epoch {epoch}: the dataset's pipeline now gives {now}, but the loader normalises "
                                 f"with mean={applied[0]}, std={applied[1]}, those it was made with: make the loader "
                                 "again for the new statistics, or keep them")  # fmt: skip

    def _restart_if_changed(self, epoch: int) -> None:
        """Persistent workers hold the dataset as it was when they started: a transform set or changed
        since (``ds.transform = train_pipeline(32)``, progressive resizing; augmentations switched off
        for the last epochs) would be ignored by them, silently. They stop, with what they read ahead,
        and the epoch starts new ones."""
        dl = self.loader
        if self._workers_saw is None or getattr(dl, "_iterator", None) is None and self._feed is None:
            return
        if _transforms_of(self.dataset) == self._workers_saw:
            return
        log.info("epoch %d: the dataset's transform changed since its workers started; new workers read it", epoch)
        self._drop_feed(wait=True, patience=2.5)
        self._join_pending()
        _stop_workers(dl)
        self._workers_saw = None

    def _end_epoch(self, t: EpochTiming) -> None:
        self.history.append(t)
        f = t.wait_fraction
        if f is not None and not getattr(self, "measuring", False):  # a tuning run's passes are no epochs to report
            per = t.total_s / (t.batches - 1)
            log.info("epoch %d: %d batches; the loop waited for data %.0f%% of the time (%.1f of %.1f ms per batch, "
                     "num_workers=%d)%s", t.epoch, t.batches, 100 * f, 1000 * t.wait_s / (t.batches - 1), 1000 * per,
                     t.num_workers, ": input-bound" if f > 0.1 else "")  # fmt: skip
        merge = getattr(self.dataset, "merge_bad_samples", None)
        if callable(merge):
            try:
                merge()
            except (UsageError, OSError) as exc:  # a full disk: training goes on, the parts keep what was recorded
                log.warning("epoch %d: the bad samples were not merged into their report: %s", t.epoch, exc)
        if self.autotune and f is not None:
            from datakit.parallel import usable_cpus

            new = next_num_workers(t, usable_cpus(), self.max_workers)
            if new != t.num_workers:
                log.info("num_workers %d -> %d for the next epoch (the loop waited %.0f%% of the time, CPUs to spare)",
                         t.num_workers, new, 100 * f)  # fmt: skip
                self.set_num_workers(new)
                if self.loader.num_workers < new:  # what the machine allows (/dev/shm, ulimit -f) said so: no more
                    self.max_workers = self.loader.num_workers  # asked for every epoch

    def set_num_workers(self, num_workers: int) -> None:
        """Rebuild the DataLoader with ``num_workers`` (between epochs); the old workers stop."""
        if self._rebuild is None:
            raise ValueError("set_num_workers needs a loader made by create_loader")
        if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < 0:
            raise UsageError(f"set_num_workers takes a whole number of workers >= 0 (create_loader measures 'auto' "
                             f"itself, and re-tunes with autotune=True), got {num_workers!r}")  # fmt: skip
        num_workers = int(num_workers)
        from datakit.tuning import worker_room

        if (why := worker_room(num_workers)) is not None:
            raise UsageError(f"set_num_workers({num_workers}): {why}")
        self._supersede("set_num_workers()")  # an epoch in progress ends here (autotune calls it after one)
        self._drop_feed(wait=True, patience=2.5)  # out of the old iterator before its workers stop
        old = self.loader
        with _chosen_workers():
            self.loader = self._rebuild(num_workers)
        self._tuned = True
        _stop_workers(old)  # persistent workers would otherwise live until garbage collection

    def close(self) -> None:
        """Stop reading ahead into the next epoch and stop the workers (the next epoch starts
        them again). Dropping the loader does the same. A pass that handed out its last batch, with
        none asked past it, ends here."""
        self._after_fork()
        self._end_unended()
        self._supersede("loader.close()")
        self._drop_feed(wait=True, patience=2.5)  # its workers stop: a stuck batch is not waited for
        _stop_workers(self.loader)

    def __del__(self) -> None:
        feed = getattr(self, "_feed", None)
        if isinstance(feed, _Receiver) and self.__dict__.get("_pid") == os.getpid():
            feed.close(wait=False)  # its thread ends, letting go of the DataLoader's iterator

    def __iter__(self):
        # the pass in progress ends here, at iter(loader); which epoch this one serves is settled at its first
        # batch: an iter() never asked for one (a framework's check that the loader iterates: Lightning's) is no
        # pass, and a sampler.set_epoch(e) made between iter() and the first batch (Lightning's order) is heard
        self._after_fork()
        self._end_unended()
        self._supersede("iter")
        return self._pass(self._generation)

    def _end_unended(self) -> None:
        """End a pass that handed out every batch and was asked for none past them (at the interpreter's exit, a
        run's last epoch under a framework that never asks past it has its bad samples merged: _unended_merge)."""
        unended, self._unended = self._unended, None
        self._unended_merge(False)
        if unended is not None and unended[0] == self._generation:
            self._epoch_done(*unended[1:])

    def _unended_merge(self, on: bool) -> None:
        """Have this pass's bad samples merged when the loader goes (garbage collected, or at exit), or not: a
        finaliser holding the dataset (only one with a report to merge into), which the loader holds anyway."""
        fin = self.__dict__.pop("_merge_fin", None)
        if fin is not None:
            fin.detach()
        ds = self.dataset
        if on and getattr(ds, "bad_samples", None) is not None and callable(getattr(ds, "merge_bad_samples", None)):
            self._merge_fin = weakref.finalize(self, _merge_unended, ds, os.getpid())

    def _pass(self, gen: int) -> Iterator:
        if gen != self._generation:  # superseded before its first batch
            raise self._ended(self.epoch)
        epoch = self._next_epoch()
        self._started = epoch
        self.epoch = epoch + 1
        yield from self._run(epoch, 0, gen)

    def _next_epoch(self) -> int:
        """The epoch the pass starting now serves: the one after the last, or one a sampler was told."""
        sampler = self.loader.sampler
        if isinstance(sampler, EpochSampler):
            if sampler.asked is not None:  # the loop called sampler.set_epoch(e) itself (DDP's idiom): as asked
                self.epoch = sampler.asked
            elif (
                sampler.world > 1
                and self._started is not None
                and not self._warned_steps
                and not (self.history and self.history[-1].epoch == self._started)
            ):  # the last pass was left early: if only some ranks left one (a look at a batch), their counts differ
                self._warned_steps = True
                log.warning("the loader's pass over epoch %d ended before its last batch, and this one serves epoch "
                            "%d: under torch.distributed each of the %d ranks counts its own passes, so a pass that "
                            "only some ranks began (a look at one batch on rank 0) puts their epochs, and so their "
                            "shards, out of step; call loader.sampler.set_epoch(epoch) at the start of each epoch",
                            self._started, self.epoch, sampler.world)  # fmt: skip
        else:
            told = getattr(sampler, "epoch", None)
            if type(told) is int and told != self._told_epoch and (self._told_epoch is not None or told != 0):
                self.epoch = told  # a sampler of the caller's own, whose set_epoch was called
        return self.epoch

    def __len__(self) -> int:
        return len(self.loader)

    def __reduce_ex__(self, protocol):
        raise TypeError(_UNPICKLABLE.format(type(self).__name__))

    def __getattr__(self, name: str):
        if name == "loader":
            raise AttributeError(name)
        if name in ("state_dict", "load_state_dict"):
            # an AttributeError still (hasattr() tells an infinite loader by it), with the way to one that resumes
            from datakit.prefetch import _FINITE

            raise AttributeError(f"{name}() needs create_loader(..., infinite=True): {_FINITE}")
        return getattr(self.loader, name)


_UNPICKLABLE = (
    "cannot pickle or copy a datakit {} (it holds its workers and threads): make the loader in the process that "
    "iterates it "
    "(a LightningDataModule's train_dataloader() or setup(), not its __init__, under ddp_spawn); its dataset pickles"
)


def _length(dl) -> int | None:
    """The batches a DataLoader gives an epoch, None where it cannot tell."""
    try:
        return len(dl)
    except TypeError:
        return None


class _Digest(pickle.Pickler):
    """Pickles a transform for its fingerprint only: functions (lambdas included, which pickle cannot
    store) and locks count by identity, random generators not at all (the main process drawing from
    one between epochs changes nothing the workers were given). A value shared with the workers (an
    ``mp.Value``, an ``mp.Array``, a manager's proxy), which they read as it is when they use it, counts by
    identity and is noted in ``live``; any other object pickle cannot store (an OpenCV CLAHE) counts by
    identity alone, the rest of the transform by its state."""

    def __init__(self, *args, seen: set[int] | None = None, live: list[str] | None = None, **kw) -> None:
        super().__init__(*args, **kw)
        self.live: list[str] = [] if live is None else live
        self.seen: set[int] = set() if seen is None else seen  # the functions looked into: a cycle ends there

    def _look_into(self, fn) -> None:
        """Note the shared values a function holds (in its closure, defaults, the module globals it or a
        comprehension in it names, a function of the caller's it calls by name) or a bound method's object:
        ``lambda img: img * v.value`` reads ``v`` as the loop sets it."""
        if id(fn) in self.seen:
            return
        self.seen.add(id(fn))
        if isinstance(fn, types.MethodType):
            held = [fn.__self__]
        else:
            held = []
            for cell in fn.__closure__ or ():
                try:
                    held.append(cell.cell_contents)
                except ValueError:  # a cell never assigned
                    pass
            held += list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
            codes, names = [fn.__code__], set()
            while codes:  # the function's code and the comprehensions' and inner functions' in it
                code = codes.pop()
                names.update(code.co_names)
                codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
            for n in names:
                value = fn.__globals__.get(n)
                if isinstance(value, type):
                    self._look_into_class(value)
                    continue
                settings = isinstance(value, (dict, types.SimpleNamespace)) and len(_entries(value)) <= 64
                theirs = isinstance(value, types.FunctionType) and _theirs(value)
                if isinstance(value, _LIVE_TYPES) or settings or theirs:
                    held.append(value)  # (settings: a dict or namespace of a few entries, CFG.v, not a table)
        for value in held:
            if value is None:
                continue
            if isinstance(value, types.FunctionType):
                self._look_into(value)
                continue
            try:
                _Digest(io.BytesIO(), protocol=5, seen=self.seen, live=self.live).dump(value)
            except Exception:  # what cannot be pickled is looked through no further
                pass

    def _look_into_class(self, cls: type) -> None:
        """A class of the caller's: the shared values its attributes hold and its methods read."""
        if id(cls) in self.seen or not _theirs(cls):
            return
        self.seen.add(id(cls))
        for value in vars(cls).values():
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if isinstance(value, types.FunctionType):
                self._look_into(value)
            elif isinstance(value, _LIVE_TYPES) and type(value).__name__ not in self.live:
                self.live.append(type(value).__name__)

    def reducer_override(self, obj):
        if isinstance(obj, (types.FunctionType, types.MethodType)):
            self._look_into(obj)
            return int, (id(obj),)
        if isinstance(obj, (types.BuiltinFunctionType, _LOCK_TYPES)):
            return int, (id(obj),)
        if isinstance(obj, _LIVE_TYPES):
            if type(obj).__name__ not in self.live:
                self.live.append(type(obj).__name__)
            return int, (id(obj),)
        if isinstance(obj, (random.Random, np.random.Generator, np.random.RandomState, np.random.BitGenerator,
                            torch.Generator)):  # fmt: skip
            return int, (0,)
        if isinstance(obj, torch.Tensor):  # by value: torch pickles a storage under a key of its address
            t = obj.detach().cpu().contiguous()
            data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
            return tuple, ((str(t.dtype), tuple(t.shape), data),)
        if isinstance(obj, type):
            self._look_into_class(obj)
            if not _importable(obj):  # a class made inside a function: its instances' state still counts
                return int, (id(obj),)
        else:
            try:
                obj.__reduce_ex__(5)
            except Exception:  # no state pickle can reach: the object itself
                return int, (id(obj),)
        return NotImplemented


_NOT_THEIRS = frozenset({"torch", "torchvision", "numpy", "datakit", "cv2", "PIL", "builtins", "collections",
                         "functools", "typing", "abc", "multiprocessing", "enum", "random", "math"})  # fmt: skip


def _entries(value) -> dict:
    return value if isinstance(value, dict) else vars(value)


def _theirs(obj) -> bool:
    """Whether a function or class is the caller's own (not a library's, whose code reads no value of theirs)."""
    return (getattr(obj, "__module__", None) or "builtins").split(".")[0] not in _NOT_THEIRS


def _importable(cls: type) -> bool:
    """Whether pickle can store ``cls`` by reference: found by its module and qualified name."""
    found = sys.modules.get(cls.__module__)
    try:
        for part in cls.__qualname__.split("."):
            found = getattr(found, part)
    except AttributeError:
        return False
    return found is cls


_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))
# values the workers read as they are when they use them: shared ctypes (mp.Value, mp.Array, with a lock or without,
# RawValue, RawArray), an mp.Event, shared memory, a manager's proxy
_LIVE_TYPES = (multiprocessing.sharedctypes.SynchronizedBase, multiprocessing.managers.BaseProxy, ctypes._SimpleCData,
               ctypes.Array, ctypes.Structure, multiprocessing.synchronize.Event,
               multiprocessing.shared_memory.SharedMemory, multiprocessing.shared_memory.ShareableList)  # fmt: skip


def _live_values(dataset) -> list[str]:
    """The values shared with the workers (``mp.Value``, ``mp.Array``, a manager's proxy) that the transforms of
    ``dataset`` hold: a sample read ahead, before the loop sets one for the next epoch, would take the old."""
    found: list[str] = []
    for d in _leaves(dataset):
        for t in (getattr(d, "transform", None), getattr(d, "target_transform", None)):
            if t is None:
                continue
            digest = _Digest(io.BytesIO(), protocol=5)
            try:
                digest.dump(t)
            except Exception:
                pass
            found += [n for n in digest.live if n not in found]
    return found


def _fingerprint(obj) -> tuple:
    """What ``obj`` holds, by its pickled state: the same transform built again, or changed back, is
    the same; one changed in place is another. Its identity where it cannot be pickled."""
    if obj is None:
        return (None,)
    buf = io.BytesIO()
    try:
        _Digest(buf, protocol=5).dump(obj)
    except Exception:  # a handle, a generator of values: the object itself
        return (id(obj),)
    return (hashlib.blake2b(buf.getbuffer(), digest_size=16).digest(),)


_GENERATORS = {
    random.Random: "random.Random",
    np.random.Generator: "numpy.random.Generator",
    np.random.RandomState: "numpy.random.RandomState",
    torch.Generator: "torch.Generator",
}


_PLAIN = (str, bytes, bytearray, int, float, complex, type(None), os.PathLike, np.ndarray, np.generic, torch.Tensor,
          type, types.ModuleType, memoryview, *_LOCK_TYPES)  # fmt: skip
_LOOKED_AT = 1000  # items of a long list, tuple, set or dict looked at for a generator: the first ones
_DEPTH = 8  # objects inside objects followed this deep


def _generators_held(value, found: list[str], seen: set[int], depth: int = 0) -> None:
    """Note in ``found`` the kinds of the random generators ``value`` holds, its own (not random's, NumPy's or
    torch's global ones): in its attributes, items (the first of a long container), and through the functions in
    it, in their closures, defaults and the module globals they name (``lambda x: x + rng.integers(9)``), a bound
    method's object and a ``functools.partial``'s arguments. Arrays, tensors, text and images are looked into no
    further, nor objects past ``_DEPTH``."""
    if depth > _DEPTH or isinstance(value, _PLAIN) or id(value) in seen:
        return
    seen.add(id(value))
    kind = next((n for k, n in _GENERATORS.items() if isinstance(value, k)), None)
    if kind is not None:
        if kind not in found and not _global_generator(value):
            found.append(kind)
        return
    try:
        held = _held_by(value)
    except Exception:  # noqa: BLE001 - an object that cannot be looked into (a __dict__ that raises): no further
        return
    for item in held:
        _generators_held(item, found, seen, depth + 1)


def _held_by(value) -> list:
    """What ``value`` holds, for :func:`_generators_held`."""
    if type(value).__module__.startswith("PIL."):
        return []
    held: list = []
    if isinstance(value, dict):
        held = list(itertools.islice(value.values(), _LOOKED_AT))
    elif isinstance(value, (list, tuple, set, frozenset, collections.deque)):
        held = list(itertools.islice(value, _LOOKED_AT))
    elif isinstance(value, types.MethodType):
        held = [value.__self__, value.__func__]
    elif isinstance(value, types.BuiltinMethodType):  # rng.integers: its object (a module, for a function)
        held = [value.__self__]
    elif isinstance(value, types.FunctionType):
        held = [c.cell_contents for c in value.__closure__ or () if c.cell_contents is not None]
        held += list(value.__defaults__ or ()) + list((value.__kwdefaults__ or {}).values())
        held += [value.__globals__[n] for n in _code_names(value.__code__)
                 if isinstance(value.__globals__.get(n), tuple(_GENERATORS))]  # fmt: skip
    elif isinstance(value, functools.partial):
        held = [value.func, *value.args, *value.keywords.values()]
    else:
        attrs = vars(value) if hasattr(value, "__dict__") else {}
        held = list(attrs.values()) if isinstance(attrs, dict) else []
        held += [getattr(value, slot) for k in type(value).__mro__ for slot in _slots(k) if hasattr(value, slot)]
    return held


def _slots(k: type) -> tuple:
    slots = vars(k).get("__slots__", ())
    slots = (slots,) if isinstance(slots, str) else slots
    return tuple(n for n in slots if isinstance(n, str)) if isinstance(slots, (tuple, list)) else ()


def _code_names(code: types.CodeType) -> set[str]:
    """The names a function's code uses (attributes, globals), in its nested functions too, and the strings it
    holds that could be names (``getattr(self, "rng")``)."""
    names: set[str] = set()
    todo = [code]
    while todo:
        c = todo.pop()
        names.update(c.co_names)
        names.update(k for k in c.co_consts if isinstance(k, str) and k.isidentifier())
        todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return names


def _callers_classes(d) -> list[type]:
    """The classes of ``d`` that are the caller's (not torch's, datakit's or Python's own)."""
    return [k for k in type(d).__mro__ if k.__module__.partition(".")[0] not in _NOT_THE_CALLERS]


_NOT_THE_CALLERS = {"torch", "datakit", "builtins", "typing", "abc", "collections"}
_WORKER_SIDE = ("__getitem__", "__getitems__", "__iter__", "__next__")  # what a DataLoader worker calls


def _names_used(classes: list[type], also: tuple[str, ...] = ()) -> tuple[set[str], list]:
    """The names the methods a worker runs use: ``__getitem__`` (and ``__getitems__``, ``__iter__``) and the
    methods of the class they name, through decorators (``functools.wraps``); not ``__init__``, a sampler's
    factory or ``set_epoch``, which run in the main process. With the module globals those names are, for the
    generators among them."""
    methods: dict[str, types.FunctionType] = {}
    for k in reversed(classes):
        for attr, value in vars(k).items():
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            elif isinstance(value, property):
                value = value.fget
            for _ in range(16):  # a decorated method (functools.wraps): the code it wraps
                inner = value.__dict__.get("__wrapped__") if isinstance(value, types.FunctionType) else None
                if not isinstance(inner, types.FunctionType):
                    break
                value = inner
            if isinstance(value, types.FunctionType):
                methods[attr] = value
    names: set[str] = set()
    held = []
    todo = [m for m in (*_WORKER_SIDE, *also) if m in methods]
    done: set[str] = set()
    while todo:
        name = todo.pop()
        if name in done:
            continue
        done.add(name)
        fn = methods[name]
        used = _code_names(fn.__code__)
        names |= used
        todo += [n for n in used if n in methods and n not in done and n != "__init__"]
        held += [fn.__globals__[n] for n in used if isinstance(fn.__globals__.get(n), tuple(_GENERATORS))]
    return names, held


def _own_generators(dataset, collate_fn: Callable | None = None) -> list[tuple[str, str]]:
    """Where the datasets in ``dataset`` keep a random generator of their own, as (place, kind): in their
    transforms; in a dataset of the caller's (a class of its own, a subclass of datakit's too), also in an attribute
    the methods a worker runs use (``self.rng``, a transform as ``self.aug``, torchvision's joint ``transforms``),
    in its class's, and in the module globals they draw from. The global generators, reseeded per worker, are
    none."""
    from datakit.sources import ImageDataset

    places: list[tuple[str, str]] = []
    seen: set[int] = set()
    walked: set[int] = set()

    def note(where: str, value) -> None:
        found: list[str] = []
        _generators_held(value, found, seen)
        places.extend((where, kind) for kind in found if (where, kind) not in places)

    def visit(d, depth: int) -> None:
        if id(d) in walked or depth > 8:
            return
        walked.add(id(d))
        if isinstance(d, torch.utils.data.Subset):
            return visit(d.dataset, depth + 1)
        if isinstance(d, torch.utils.data.ConcatDataset):
            for part in d.datasets:
                visit(part, depth + 1)
            return
        for name in ("transform", "target_transform"):
            if isinstance(d, ImageDataset) and getattr(d, name, None) is not None:
                note(f"the dataset's {name}", getattr(d, name))
        classes = _callers_classes(d)
        if not classes:  # datakit's own dataset, or torch's: nothing more of the caller's in it
            return
        owner = type(d).__name__
        # its own method as the collate function: run in the workers too
        own_collate = getattr(collate_fn, "__self__", None) is d and isinstance(collate_fn, types.MethodType)
        used, drawn = _names_used(classes, (collate_fn.__name__,) if own_collate else ())
        try:
            attrs = dict(vars(d)) if hasattr(d, "__dict__") else {}
        except Exception:  # noqa: BLE001 - a __dict__ that raises: nothing to look at
            attrs = {}
        for k in classes:
            for slot in _slots(k):
                if hasattr(d, slot):
                    attrs.setdefault(slot, getattr(d, slot))
        for name, value in attrs.items():
            if isinstance(value, torch.utils.data.Dataset):
                visit(value, depth + 1)
                continue
            if isinstance(d, ImageDataset) and name in ("_transform", "transform", "target_transform"):
                continue  # said above
            if name not in used and name not in ("transform", "target_transform", "transforms"):
                continue  # held, never drawn from in a worker (made and used in __init__, or in the main process)
            if isinstance(value, (list, tuple, dict)):
                for v in itertools.islice(value.values() if isinstance(value, dict) else value, _LOOKED_AT):
                    if isinstance(v, torch.utils.data.Dataset):
                        visit(v, depth + 1)
            transform = name in ("transform", "target_transform")
            note(f"the dataset's {name}" if transform else f"the dataset's {owner}.{name}", value)
        for k in classes:  # a generator made once for the class
            for name, value in vars(k).items():
                if isinstance(value, tuple(_GENERATORS)) and name in used:
                    note(f"the dataset's {owner}.{name}", value)
        for value in drawn:  # a module's generator its methods draw from
            note(f"the dataset's {owner} (a module's generator)", value)

    visit(dataset, 0)
    if collate_fn is not None and not (isinstance(collate_fn, types.MethodType) and id(collate_fn.__self__) in walked):
        seen |= walked  # the datasets it reaches (a lambda calling ds.collate) are looked at above, as datasets
        note("the collate function", collate_fn)  # (MixUp of the caller's drawing from a generator of its own)
    return places


def _global_generator(obj) -> bool:
    """``random``'s, NumPy's and torch's own generators, which seed_worker (and torch) seed in every worker."""
    return obj is random._inst or obj is np.random.mtrand._rand or obj is torch.default_generator


def _warn_own_generators(dataset, collate_fn: Callable | None = None) -> None:
    """Warn of a dataset or transform holding a random generator of its own (``self.rng =
    np.random.default_rng()``, MONAI's ``self.R``): each worker starts with a copy in the same state and draws what
    the others draw, and ``seed=``, which seeds the global generators per sample, does not reach it."""
    places = _own_generators(dataset, collate_fn)
    if places:
        kinds = list(dict.fromkeys(kind for _, kind in places))
        warnings.warn(f"{places[0][0]} holds a random generator of its own ({', '.join(kinds)}): every "
                      "worker starts with a copy of it in the same state and draws the same numbers as the others "
                      "(the same augmentations), and seed= does not reach it; draw from random, numpy.random or "
                      "torch (seeded per sample and worker), or reseed it in worker_init_fn", stacklevel=3)  # fmt: skip


def _transforms_of(dataset) -> tuple:
    """What the workers' copies of ``dataset`` apply: each dataset's transform and target_transform (through
    Subset and ConcatDataset)."""
    return tuple(
        (_fingerprint(getattr(d, "transform", None)), _fingerprint(getattr(d, "target_transform", None)))
        for d in _leaves(dataset)
    )


def _drain(it, patience: float) -> bool:
    """Receive and drop the batches still outstanding in a persistent DataLoader iterator (those of an
    epoch left early, which its reset would drop too), for ``patience`` seconds at most; True when none
    is left, so the reset that follows does not wait."""
    deadline = time.monotonic() + patience
    try:
        while it._tasks_outstanding > 0:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ok, _ = it._try_get_data(timeout=min(left, 1.0))
            if ok:
                it._tasks_outstanding -= 1
        return True
    except Exception:  # a worker gone: the caller starts new ones
        return False


def _feeders_stopped(it) -> bool:
    """Whether the feeder thread of any of the iterator's index queues has been told to stop (its
    ``multiprocessing`` finalizer has run): what a queue put there no longer reaches its worker."""
    for q in getattr(it, "_index_queues", ()):
        close = getattr(q, "_close", None)
        if close is not None and hasattr(close, "still_active") and not close.still_active():
            return True
    return False


def _terminate_workers(it) -> None:
    """Terminate the iterator's worker processes at once, without its SIGCHLD handler taking that
    for a failure in the main thread."""
    if getattr(it, "_worker_pids_set", False):  # (imported at the top: this also runs as Python shuts down)
        _torch_data_utils.signal_handling._remove_worker_pids(id(it))
        it._worker_pids_set = False
    for w in getattr(it, "_workers", []):
        if w.is_alive():
            w.terminate()


def _abandon(it, receiver: _Receiver | None = None) -> None:
    """Stop the workers of a DataLoader iterator whose batch in transit will not be waited for:
    terminated at once (torch's own shutdown would wait 5 s for a stuck one), without its
    SIGCHLD handler taking that for a failure in the main thread. A ``receiver`` waiting in the
    iterator sees the workers gone within torch's status check (5 s), passes that on as an
    error no one takes, and ends; then the iterator is shut down."""
    _terminate_workers(it)
    if receiver is not None:
        receiver.join(15.0)
    shutdown = getattr(it, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def _stop_workers(dl: DataLoader) -> None:
    """Shut down the persistent workers of ``dl``, if it has any running."""
    it = getattr(dl, "_iterator", None)
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()
        dl._iterator = None


class InfiniteLoader:
    """Iterates forever over a loader made by :func:`create_loader`, one epoch after another,
    reshuffling each epoch; ``epoch`` and ``step`` say where it is, and ``state_dict()`` /
    ``load_state_dict()`` resume mid-epoch after a restart with the exact next batch.

    This replaces the "catch StopIteration and re-create the iterator" trick, which loses the
    epoch count, re-seeds nothing and cannot resume.
    """

    def __init__(self, loader: Loader | DataLoader) -> None:
        self.loader = loader if isinstance(loader, Loader) else Loader(loader)
        self._epoch = 0
        self.step = 0
        self._offset = 0  # samples of this epoch served before ``step`` counted (a state of another batch size)
        self._it = None
        self._gen: int | None = None

    @property
    def epoch(self) -> int:
        return self._epoch

    @epoch.setter
    def epoch(self, epoch: int) -> None:
        """``loader.epoch = e``: the next batch is the first of epoch ``e`` (what ``state_dict()`` says)."""
        if type(epoch) is not int and not isinstance(epoch, np.integer) or epoch < 0:
            raise UsageError(f"epoch must be a whole number >= 0, got {epoch!r}")
        if (int(epoch), 0, 0) != (self._epoch, self.step, self._offset):
            self._epoch, self.step, self._offset, self._it = int(epoch), 0, 0, None

    def _start_epoch(self) -> None:
        sampler = self.loader.loader.sampler
        if isinstance(sampler, EpochSampler) and sampler.asked is not None and sampler.asked != self._epoch:
            self._epoch, self.step, self._offset = sampler.asked, 0, 0  # the loop's set_epoch(e): e from its start
        self._it = self.loader._iterate(self._epoch, self._offset + self.step * self.loader.loader.batch_size)
        self._gen = None  # the Loader's generation once the epoch has started (on the first next())

    def __iter__(self):
        return self

    def __next__(self):
        if (
            self.loader.__dict__.get("_pid", os.getpid()) != os.getpid()
        ):  # forked: the step goes on, in workers of its own
            self.loader._after_fork()
            self._it = None
        sampler = self.loader.loader.sampler
        if isinstance(sampler, EpochSampler) and sampler.asked is not None:
            self._it = None  # sampler.set_epoch(e) since the last batch: _start_epoch serves epoch e
        if self._it is not None and self.loader._worker_lost():
            self._it = None  # a worker's death raised in the step and caught there: as an error of next() (below)
        if self._it is None or (self._gen is not None and self._gen != self.loader._generation):
            # not started, or its epoch was ended from outside (loader.close() to free the workers
            # during an evaluation, set_num_workers(), another iteration): go on from where it is
            self._start_epoch()
        while True:
            try:
                batch = next(self._it)
                self.step += 1
                if self._gen is None:
                    self._gen = self.loader._generation
                return batch
            except StopIteration:
                if self.step == 0 and len(self.loader) == 0:
                    dl = self.loader.loader
                    raise UsageError(f"an epoch holds no batch ({len(dl.sampler or dl.dataset)} samples, batch_size "
                                     f"{dl.batch_size}, drop_last={dl.drop_last}): an infinite loader would wait "
                                     "for ever") from None  # fmt: skip
                self._epoch += 1
                self.step = self._offset = 0
                self._start_epoch()
            except BaseException:
                # the epoch's iterator ended with the error (a dead worker, a bad sample, Ctrl-C):
                # the next call starts it again at this step, rather than taking that end for the
                # end of the epoch and skipping the rest
                self._it = None
                raise

    def __reduce_ex__(self, protocol):
        raise TypeError(_UNPICKLABLE.format(type(self).__name__))

    def __len__(self) -> int:
        return len(self.loader)

    def _shape(self) -> dict:
        dl = self.loader.loader
        sampler = dl.sampler
        world = sampler.world if isinstance(sampler, EpochSampler) else 1
        shape = {"batch_size": dl.batch_size, "samples": len(dl.dataset), "world": world}
        if isinstance(sampler, EpochSampler):  # what makes an epoch's order: another seed, another order
            # (an epoch resumed in the seed + epoch order is saved so, to go on in it once more)
            scheme = 1 if sampler.legacy_epoch is not None and sampler.legacy_epoch == self.epoch else ORDER_SCHEME
            shape.update(seed=int(sampler.seed), shuffle=bool(sampler.shuffle), order=scheme)
        return shape

    def state_dict(self) -> dict:
        """Where the loop is: ``epoch`` and ``step`` (batches served of it), and ``sample`` (its samples served),
        with the batch size, dataset length and world size they count in."""
        bs = self.loader.loader.batch_size
        sample = self._offset + self.step * bs
        sampler = self.loader.loader.sampler
        step = sample // bs
        whole = isinstance(sampler, EpochSampler) and self._served_all(sample)
        dl = self.loader.loader
        if sample and not whole and getattr(dl, "in_order", True) is False and dl.num_workers > 1:
            # batches come as the workers finish them: the count says how many, not which (the resumed loop
            # would serve some samples twice and skip others); one worker, or none, gives them in order
            raise UsageError(f"state_dict(): this loader was made with in_order=False, so its batches arrive as "
                             f"the workers finish them and the {self.step} served of epoch {self.epoch} are not its "
                             "first ones; a state saved mid-epoch cannot say which were served. Make it with "
                             "in_order=True (the default) to resume mid-epoch, or save at an epoch's end")  # fmt: skip
        if whole:
            # the whole epoch: its last batch may be short (counted as a step) or dropped (its samples count as
            # served, so that the state goes on with the next epoch in any shape), never past its samples
            sample = len(sampler)
            # resumed in another batch size: the batches of this one that cover the epoch, so that the
            # step alone ({"epoch", "step"}) also goes on with the next epoch
            step = self.step if not self._offset else -(-sample // bs)
        return {"epoch": self.epoch, "step": step, "sample": sample, **self._shape()}

    def _served_all(self, sample: int) -> bool:
        """Whether no batch of the epoch is left after ``sample`` of its samples."""
        dl = self.loader.loader
        left = len(dl.sampler) - sample
        if left <= 0:
            return True
        batches = getattr(dl, "stream", None) or getattr(dl, "epoch_batches", None)
        if batches is not None:
            return batches.count(sample) == 0
        return bool(dl.drop_last) and left < dl.batch_size

    def load_state_dict(self, state: dict) -> None:
        """Resume at ``state``: at the same sample of the same epoch, also with another batch size. A state
        saved for another dataset length or world size is refused (its epoch's order is another)."""
        shape = self._shape()

        def plain(value):  # a state round-tripped through NumPy or torch: np.int64(2), tensor(3) are the numbers
            if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.dtype.is_floating_point:
                value = value.item()
            return int(value) if isinstance(value, np.integer) else value

        def number(key: str, default: int | None = None, least: int = 0) -> int:
            value = plain(state.get(key, default))
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise UsageError(f"not a loader state (it needs 'epoch' and 'step', whole numbers >= 0, as "
                                 f"state_dict() gives them): {state!r}")  # fmt: skip
            if value < least:  # a batch size or a world of 0 counts nothing (it divided by zero, or replayed)
                raise UsageError(f"not a loader state: {key!r} must be a whole number >= {least}, got {value!r}")
            return int(value)

        if not isinstance(state, dict):
            raise UsageError(f"not a loader state (a dict as state_dict() gives, with 'epoch' and 'step'): {state!r}")
        epoch, step = number("epoch"), number("step")
        saved_bs = number("batch_size", shape["batch_size"], least=1)
        sample = number("sample", step * saved_bs)
        saved = {key: number(key, shape[key], least=int(key == "world")) for key in ("samples", "world")}
        if isinstance(self.loader.loader.sampler, EpochSampler):
            saved_len = math.ceil(saved["samples"] / saved["world"])  # the samples of one rank's epoch, padded
            if "sample" not in state and saved_len < sample < saved_len + saved_bs:
                sample = saved_len  # the steps of a whole epoch whose last batch was short
            if sample > saved_len:  # state_dict() never counts past them
                raise UsageError(f"not a loader state: it says {sample} samples of epoch {epoch} were served, and an "
                                 f"epoch of {saved['samples']} samples over {saved['world']} rank(s) holds {saved_len} "
                                 "per rank")  # fmt: skip
            if saved_len and sample == saved_len:  # the whole epoch was served: the next one begins, in any shape
                epoch, step, sample = epoch + 1, 0, 0
        scheme = plain(state.get("order", 1 if "seed" in state else ORDER_SCHEME))
        if type(scheme) is not int or scheme not in (1, ORDER_SCHEME):  # a later datakit's: not read as another
            raise UsageError(f"not a loader state this datakit reads: 'order' {scheme!r} (it draws epochs' orders by "
                             f"scheme {ORDER_SCHEME}, and by scheme 1 for states saved before)")  # fmt: skip
        sampler = self.loader.loader.sampler
        if "seed" in state and getattr(sampler, "drawn", False) and isinstance(sampler, EpochSampler):
            # an unseeded loader's order was drawn for this run; the state names the one the saved run drew: taken
            # over, so a job restarted from its state goes on with the same order
            saved_seed = plain(state["seed"])
            if isinstance(saved_seed, int) and not isinstance(saved_seed, bool) and saved_seed >= 0:
                sampler.seed = saved_seed
                shape["seed"] = saved_seed
        for key in ("seed", "shuffle"):  # states saved before these were kept: as they were read
            if key in state and key in shape and state[key] != shape[key] and sample:
                raise UsageError(f"the state was saved mid-epoch with {key}={state[key]!r}, this loader has "
                                 f"{key}={shape[key]!r}: that epoch's order is another here, so resuming would serve "
                                 f"some samples twice and skip others; give the loader seed= as before (an unseeded "
                                 f"loader draws its order anew each run), or load {{'epoch': {epoch + 1}, 'step': 0}} "
                                 "to go on from the next epoch")  # fmt: skip
        for key, what in (("samples", "samples"), ("world", "ranks")):
            if saved[key] != shape[key] and sample:
                raise UsageError(f"the state was saved mid-epoch for {saved[key]} {what}, this loader has "
                                 f"{shape[key]}: that epoch's order is another here, so resuming would serve some "
                                 f"samples twice and skip others; load {{'epoch': {epoch + 1}, "
                                 "'step': 0} to go on from the next epoch")  # fmt: skip
        sampler = self.loader.loader.sampler
        if isinstance(sampler, EpochSampler):
            # saved mid-epoch by a datakit that drew orders from seed + epoch (its state_dict() gave the seed, not
            # the scheme; a state written by hand gives neither): that epoch goes on in its order
            sampler.legacy_epoch = epoch if sample and scheme == 1 else None
        bs = shape["batch_size"]
        aligned = sample == step * bs
        self._epoch, self.step, self._offset = epoch, step if aligned else 0, 0 if aligned else sample
        self._it = None

    def __getattr__(self, name: str):
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)


# ---------------------------------------------------------------------------------------------
# the environment: OpenCV threads in workers, open files, /dev/shm


class WorkerInit:
    """The ``worker_init_fn`` create_loader installs: :func:`seed_worker`, the worker's batch
    slots (``slots`` shared-memory batches used again, :func:`datakit.collate.use_batch_slots`),
    OpenCV to one thread (its thread pool, inherited across fork or multiplied by the workers,
    deadlocks or oversubscribes the CPUs), then the user's own ``worker_init_fn``."""

    def __init__(self, user: Callable[[int], None] | None = None, slots: int = 0, rank_salt: int = 0) -> None:
        self.user, self.slots, self.rank_salt = user, slots, rank_salt

    def __call__(self, worker_id: int) -> None:
        from datakit.collate import use_batch_slots

        if self.rank_salt:  # this rank's workers apart from the other ranks' (torch gave them the same seeds)
            torch.manual_seed((torch.initial_seed() + 1_000_003 * self.rank_salt) % 2**63)
        seed_worker(worker_id)
        use_batch_slots(self.slots)
        os.environ["OPENCV_FOR_THREADS_NUM"] = "1"  # read when cv2 is first imported (spawned workers)
        cv2 = sys.modules.get("cv2")
        if cv2 is not None:
            # 0, not 1: after fork, resizing the inherited pool to 1 waits forever on a condition
            # variable the parent's (now absent) idle threads were waiting on; 0 leaves it alone
            cv2.setNumThreads(0)
        if self.user is not None:
            self.user(worker_id)


class _SpawnedWorker(multiprocessing.context.SpawnProcess):
    """A spawned DataLoader worker that ends as a forked one does: once its loop is over and the
    ``multiprocessing`` finalizers have run, by ``os._exit``. Otherwise a spawned process tears
    its interpreter down, which stops every thread still inside C++ by unwinding it (the queue's
    feeder thread sharing a batch's memory, a thread the user's ``worker_init_fn`` started), and
    C++ answers that with "terminate called without an active exception": the worker dies by
    SIGABRT after its last batch and the loop raises "DataLoader worker (pid ...) is killed by
    signal: Aborted"."""

    def _bootstrap(self, parent_sentinel=None):
        code = super()._bootstrap(parent_sentinel)
        os._exit(code)


class _SpawnContext(multiprocessing.context.SpawnContext):
    Process = _SpawnedWorker


def worker_context(context):
    """The ``multiprocessing_context`` create_loader gives its DataLoader for the one asked for:
    spawn (by name, as a context, or the default start method) starts :class:`_SpawnedWorker`
    processes; anything else is passed on as it is."""
    name = context
    if context is None:
        name = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    elif type(context) is multiprocessing.context.SpawnContext:
        name = "spawn"
    return _SpawnContext() if name == "spawn" else context


def shm_free_bytes(path: str = "/dev/shm") -> int | None:
    """Free bytes in the shared-memory filesystem worker batches travel through; None without one."""
    try:
        st = os.statvfs(path)
    except (OSError, AttributeError):
        return None
    return st.f_bavail * st.f_frsize


def plan_shared_memory(batch_bytes: int, num_workers: int, prefetch_factor: int,
                       shm_free: int | None) -> tuple[int, int, str | None]:  # fmt: skip
    """``(num_workers, prefetch_factor, message)`` whose batches in flight fit in ``shm_free``.

    Every worker keeps ``prefetch_factor`` batches in shared memory, and the loop holds two more
    (the one it works on stays alive while the next arrives); a tenth of the space is left for
    the small tensors (labels) and whatever else uses it.
    Past the free space the kernel kills the process with "Bus error" (or it hangs); rather,
    prefetch less, then use fewer workers, then load in the main process, and say so in one line.
    """
    if num_workers == 0 or shm_free is None or batch_bytes <= 0:
        return num_workers, prefetch_factor, None

    def need(w: int, p: int) -> int:
        return batch_bytes * (w * p + 2)

    room = 0.9 * shm_free
    if need(num_workers, prefetch_factor) <= room:
        return num_workers, prefetch_factor, None
    # the largest prefetch factor that fits, then the most workers (in closed form: a billion workers asked for
    # is one division, not a billion steps)
    slots = room / batch_bytes - 2  # batches the room holds beside the two the loop keeps
    w, p = num_workers, max(1, min(prefetch_factor, int(slots // num_workers) if slots > 0 else 1))
    if need(w, p) > room:
        w = max(1, min(num_workers, int(slots // p) if slots > 0 else 1))
    mib = 2**20
    head = (
        f"/dev/shm has {shm_free / mib:.0f} MiB free, {num_workers} workers x prefetch_factor {prefetch_factor} "
        f"batches of {batch_bytes / mib:.1f} MiB, and 2 more the training loop holds, need "
        f"{need(num_workers, prefetch_factor) / mib:.0f} MiB"
    )
    fix = "give it more (docker run --shm-size=8g, or a larger tmpfs)"
    if need(w, p) > room:
        return 0, prefetch_factor, f"{head}: loading in the main process instead; {fix}"
    return w, p, f"{head}: using num_workers={w}, prefetch_factor={p}; {fix}"


def _sample_bytes(sample) -> int:
    if isinstance(sample, (tuple, list)):
        return sum(_sample_bytes(s) for s in sample)
    if isinstance(sample, dict):
        return sum(_sample_bytes(s) for s in sample.values())
    if isinstance(sample, torch.Tensor):
        return sample.numel() * sample.element_size()
    return int(getattr(sample, "nbytes", 0) or 0)


def _max_workers() -> int:
    from datakit.parallel import usable_cpus
    from datakit.tuning import _PER_WORKER_BYTES, _available_memory

    top = 4 * usable_cpus()  # beyond the CPUs only for loading that waits on I/O, which the CPU cap tells
    mem = _available_memory()
    return max(1, min(top, mem // _PER_WORKER_BYTES)) if mem is not None else top


def _fit_environment(dataset: Dataset, batch_size: int, num_workers: int,
                     prefetch_factor: int) -> tuple[int, int, int]:  # fmt: skip
    """The safe fixes create_loader applies before starting workers; returns what fits /dev/shm:
    ``(num_workers, prefetch_factor, batch slots per worker)``. A worker keeps two slots more than
    it has batches in flight (the loop holds one or two while they come), where that fits too."""
    if num_workers == 0:
        return num_workers, prefetch_factor, 0
    limits = raise_open_file_limit()
    if limits is not None and limits[0] < 4096:
        import torch.multiprocessing as tmp

        if tmp.get_sharing_strategy() == "file_descriptor" and "file_system" in tmp.get_all_sharing_strategies():
            # batches in flight would run out of descriptors ("received 0 items of ancdata")
            tmp.set_sharing_strategy("file_system")
            log.warning("open-file limit %d (hard %d) is low for worker batches: using the file_system "
                        "sharing strategy; raise it with `ulimit -n 65536`", limits[0], limits[1])  # fmt: skip
    from datakit.lmdb import _file_size_limit

    free, limit = shm_free_bytes(), _file_size_limit()
    plenty = free is None or free > 64 << 30
    if plenty and limit is None:  # not worth reading a sample to find out
        return num_workers, prefetch_factor, prefetch_factor + 2
    try:
        per_sample = _sample_bytes(_untouched_rng(dataset.__getitem__, 0)) if len(dataset) else 0
    except Exception:  # the workers will name the problem with its sample; this is only an estimate
        return num_workers, prefetch_factor, prefetch_factor
    if limit is not None and per_sample * batch_size > limit:
        # a worker's batch is a file in /dev/shm: past the limit torch fails every batch ("unable to resize file
        # ... File too large")
        log.warning("this process may write files of %d bytes at most (ulimit -f), and a worker's batch of %.1f "
                    "MiB travels through a file in /dev/shm: loading in the main process instead; raise the limit "
                    "(ulimit -f unlimited)", limit, per_sample * batch_size / 2**20)  # fmt: skip
        return 0, prefetch_factor, 0
    if plenty:
        return num_workers, prefetch_factor, prefetch_factor + 2
    w, p, msg = plan_shared_memory(per_sample * batch_size, num_workers, prefetch_factor, free)
    if msg:
        log.warning(msg)
    roomy = per_sample * batch_size * w * (p + 2) <= 0.9 * free
    return w, p, (p + 2 if roomy else p)


def _is_cuda(device) -> bool:
    if device is None:
        return False
    dev = torch.device(device) if not isinstance(device, torch.device) else device
    return dev.type == "cuda" and torch.cuda.is_available()


_SHARDED_SOURCES: dict[str, int] = {}  # sharded loaders made in this process per dataset source


def _source_of(dataset) -> str | None:
    """What a datakit dataset reads (its kind, folder, table, archive or packs, split): the same string on
    every rank that reads the same data by the same path; None for other datasets."""
    from datakit.sources import ImageDataset

    if not isinstance(dataset, ImageDataset):
        return None
    table = getattr(getattr(dataset, "table", None), "path", None)
    packs = [r.path for r in getattr(dataset, "readers", ())]
    where = getattr(dataset, "root", None) or getattr(dataset, "path", None) or packs
    return f"{type(dataset).__name__}|{where}|{table}|{getattr(dataset, 'split', None)}"


def _same_length_on_every_rank(dataset, rank: int, world: int) -> None:
    """Refuse ranks whose datasets from one source differ in length (a folder still being copied on one node,
    another copy of the data at the same path): each rank shards its own list, so samples would be read twice or
    never, or the ranks would run different numbers of batches and wait for each other in DDP for ever.

    Each rank writes its length into the process group's store under the dataset's source (and how many loaders
    of that source it made), then compares with the ranks that wrote theirs already, without waiting: of two
    ranks, the later sees the other's. So a loader made on some ranks only, or loaders made in another order,
    wait for nothing and compare only like with like. Other datasets than datakit's are not compared."""
    import hashlib

    import torch.distributed as dist

    source = _source_of(dataset)
    if source is None:
        return
    try:
        store = dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 (no store to compare through: a backend without one)
        return
    nth = _SHARDED_SOURCES[source] = _SHARDED_SOURCES.get(source, -1) + 1
    # torchrun's restarts keep its store: the attempt's number keeps an earlier attempt's lengths out
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    prefix = f"datakit/length/{attempt}/{hashlib.sha1(source.encode()).hexdigest()[:16]}/{nth}/"
    n = len(dataset)
    try:
        store.set(f"{prefix}{rank}", str(n))
        sizes = {r: int(store.get(f"{prefix}{r}")) for r in range(world) if store.check([f"{prefix}{r}"])}
    except Exception:  # noqa: BLE001 (a store that cannot say: the training itself will)
        return
    if len(set(sizes.values())) > 1:
        shown = ", ".join(f"rank {r}: {v}" for r, v in sorted(sizes.items()))
        raise DataError(
            f"the ranks' datasets differ in length ({shown}): each rank shards its own list, so samples "
            "would be read twice or never; give every rank the same data (the same files and labels)"
        )


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
    autotune: bool | None = None,
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
      in one table-lookup pass. Float images are moved as they are (refused when ``normalize`` was
      given; a warning when in 0..1). ``normalize`` without
      ``device`` means the CPU. Without either, batches are what the collate function builds.
    - ``autotune`` (default: when ``num_workers="auto"``): after each epoch, more workers when the
      loop waited for data and CPUs were idle (:func:`next_num_workers`); ``loader.wait_fraction``.
    - Before workers start: OpenCV at one thread in each (:class:`WorkerInit`), the open-file
      limit raised, and fewer batches in flight when /dev/shm cannot hold them (:func:`plan_shared_memory`).
    """
    if isinstance(dataset, (str, bytes, os.PathLike)):  # a str is a sequence too: of its characters
        raise UsageError(f"create_loader takes a dataset, not a path: create_loader(open_dataset({str(dataset)!r}, "
                         "transform=train_pipeline(224)), ...)")  # fmt: skip
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int of at least 1, got {batch_size!r}")
    _check_loader_kwargs(dataloader_kwargs)
    prefetch = dataloader_kwargs.get("prefetch_factor")
    if prefetch is not None and (isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1):
        raise UsageError(f"prefetch_factor must be a whole number >= 1 (batches each worker reads ahead), got "
                         f"{prefetch!r}")  # fmt: skip
    timeout = dataloader_kwargs.get("timeout", 0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
        # checked here even where it is dropped (0 workers): re-tuning may start workers mid-training
        raise UsageError(f"timeout must be a number of seconds >= 0 (0: wait as long as a batch takes), got "
                         f"{timeout!r}")  # fmt: skip
    if "batch_sampler" in dataloader_kwargs:
        raise ValueError("create_loader makes the batches itself (order, sharding, resuming): give sampler= and "
                         "batch_size instead of batch_sampler=")  # fmt: skip
    flags = {"train": train, "infinite": infinite, "autotune": autotune, "drop_last": drop_last,
             **{k: dataloader_kwargs[k] for k in ("shuffle", "in_order", "pin_memory", "persistent_workers")
                if k in dataloader_kwargs}}  # fmt: skip
    for name, value in flags.items():  # a string is true: shuffle='no' shuffled, infinite='no' never ended
        if value is None and name not in ("train", "infinite"):  # DataLoader's own default (shuffle=None: none)
            continue
        if not (isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and value in (0, 1))):
            either = "True or False" if name in ("train", "infinite") else "True, False or None"
            raise UsageError(f"{name} must be {either}, got {value!r}")
    train, infinite = bool(train), bool(infinite)
    drop_last = None if drop_last is None else bool(drop_last)  # (torch takes a bool alone: 1 was refused there)
    for k in ("shuffle", "in_order", "pin_memory", "persistent_workers"):
        if dataloader_kwargs.get(k) is not None:
            dataloader_kwargs[k] = bool(dataloader_kwargs[k])
    for name in ("collate_fn", "worker_init_fn"):
        value = collate_fn if name == "collate_fn" else dataloader_kwargs.get(name)
        if value is not None and not callable(value):
            raise UsageError(f"{name} must be a function (or None), got {value!r}")
    if seed is not None and dataloader_kwargs.get("generator") is not None:
        raise UsageError("give seed= or generator=, not both: with seed= the order and every sample's random draws "
                         "come from the seed, and the generator would change nothing")  # fmt: skip
    _check_same_classes(dataset)
    _check_same_scale(dataset)
    from datakit.prefetch import stats_file

    normalize = stats_file(normalize)  # the JSON file of datakit stats --json: its statistics and their order
    orders = sorted({o for leaf in _leaves(dataset) for o in [_channel_order(leaf)] if o in ("RGB", "BGR")})
    if len(orders) > 1:  # a ConcatDataset of a mode="bgr" dataset and an RGB one: red is blue in half the batch
        raise UsageError(
            "the datasets joined give images in two channel orders (RGB and BGR: mode='rgb' beside "
            "mode='bgr'), so one batch would hold both, normalised alike; open them with one mode"
        )
    on_device = _device_plan(device, normalize, dataset, own_collate=collate_fn is not None)  # before any worker
    from datakit.collate import detection_collate, pad_collate, stack_collate

    if collate_fn is None:
        collate_fn = stack_collate
    elif collate_fn is pad_collate or collate_fn is detection_collate:  # the factory, not what it makes
        raise ValueError(f"collate_fn={collate_fn.__name__} makes a collate function: pass "
                         f"collate_fn={collate_fn.__name__}() (with its options)")  # fmt: skip
    env = os.environ.get("DATAKIT_NUM_WORKERS") or None  # empty (`DATAKIT_NUM_WORKERS= python train.py`): unset
    if autotune is None:  # a number forced by DATAKIT_NUM_WORKERS stays (re-tuning would undo it from epoch 1)
        autotune = num_workers == "auto" and env is None
    if isinstance(num_workers, bool):
        raise UsageError(f"num_workers must be 'auto' or an int >= 0, got {num_workers!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise UsageError(f"seed must be a whole number (or None), got {seed!r}")
    if seed is not None:
        seed = int(seed)  # a NumPy integer as the int it is: torch's manual_seed takes no np.int64
        if not -(2**63) <= seed < 2**64:
            raise UsageError(
                f"seed must fit in 64 bits (-2**63 to 2**64 - 1, what torch.manual_seed takes), got {seed}"
            )
    import multiprocessing

    if multiprocessing.current_process().daemon and env is None:  # a multiprocessing.Pool worker, for one
        if num_workers == "auto":
            num_workers, autotune = 0, False  # the only number that can run here
            log.info("num_workers='auto' in a daemonic process, which cannot start workers: 0")
        elif isinstance(num_workers, int) and num_workers > 0:
            raise UsageError(f"num_workers={num_workers}: this process is daemonic (a multiprocessing.Pool "
                             "worker, for one), and a daemonic process cannot start DataLoader workers; use "
                             "num_workers=0 here")  # fmt: skip
    if env is not None:
        if not env.strip().isascii() or not env.strip().isdigit():
            raise UsageError(f"DATAKIT_NUM_WORKERS={env!r}: must be a whole number >= 0 (0: load in this process)")
        num_workers = int(env)
    elif num_workers == "auto":
        from datakit.tuning import tune_num_workers

        if not hasattr(dataset, "__len__"):
            raise ValueError(f"num_workers='auto' measures loading over the dataset, and this "
                             f"{type(dataset).__name__} has no len(); give num_workers=N")  # fmt: skip

        tuned = _untouched_rng(lambda: tune_num_workers(dataset, batch_size, collate_fn=collate_fn, device=device))
        num_workers = tuned.best
    if not isinstance(num_workers, int) or num_workers < 0:
        raise UsageError(f"num_workers must be 'auto' or an int >= 0, got {num_workers!r}")
    from datakit.tuning import worker_room

    if (why := worker_room(num_workers)) is not None:  # 1000 asked on 2 CPUs: the kernel ended the training process
        raise UsageError(f"{'num_workers' if env is None else 'DATAKIT_NUM_WORKERS'}={num_workers}: {why}")
    if num_workers > 0 or autotune:
        _warn_own_generators(dataset, collate_fn)
    if distributed not in ("auto", True, False) or not isinstance(distributed, (str, bool)):
        raise UsageError(f"distributed must be 'auto', True or False, got {distributed!r}")
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
        elif train and launched_world_size() > 1:  # torchrun started the ranks, the script has not joined them yet
            log.warning("WORLD_SIZE=%d (torchrun) but no torch.distributed process group is initialised yet: this "
                        "loader is not sharded, every rank reads every sample; make it after "
                        "torch.distributed.init_process_group (or pass distributed=False to mean it)",
                        launched_world_size())  # fmt: skip
    if shard and hasattr(dataset, "__len__") and not isinstance(dataset, torch.utils.data.IterableDataset):
        _same_length_on_every_rank(dataset, rank, world)
    base = 0 if seed is None else seed
    if shard and isinstance(dataset, torch.utils.data.IterableDataset):
        what = (f"{type(dataset).__name__} (an IterableDataset) orders itself: the loader cannot give each of "
                f"the {world} ranks its share; its __iter__ must split the stream by torch.distributed.get_rank(), "
                "or every rank reads all of it")  # fmt: skip
        if distributed is True:
            raise UsageError(f"distributed=True: {what}; or pass distributed=False once it does")
        log.warning("%s", what)
    sampler = dataloader_kwargs.pop("sampler", None)
    own_sampler = sampler is not None  # iterated as it is: never read on into the next epoch
    if own_sampler and dataloader_kwargs.get("shuffle"):
        raise UsageError(f"shuffle=True with sampler={type(sampler).__name__}: the sampler orders the samples itself, "
                         "so the shuffle would be ignored; give one or the other")  # fmt: skip
    shuffle = dataloader_kwargs.pop("shuffle", train)
    if own_sampler and seed is not None and getattr(sampler, "generator", False) is None:
        # WeightedRandomSampler, RandomSampler, SubsetRandomSampler made without generator=: torch's global one, which
        # torch seeds at random in each process and seed= leaves alone (it seeds the workers and each sample)
        warnings.warn(f"sampler={type(sampler).__name__} has no generator of its own: it draws its order from torch's "
                      "global generator, which seed= does not seed, so the order (and each sample's draws with it) "
                      f"differs from run to run; make it with generator=torch.Generator().manual_seed({seed})",
                      stacklevel=2)  # fmt: skip
    if own_sampler and shard and not isinstance(sampler, torch.utils.data.DistributedSampler):
        what = (f"sampler={type(sampler).__name__} is iterated as it is on each of the {world} ranks, so every "
                "rank reads all of its samples; give a DistributedSampler (or no sampler: the loader shards "
                "its own)")  # fmt: skip
        if distributed is True:
            raise UsageError(f"distributed=True: {what}")
        log.warning("%s", what)
    # a dataset that substitutes bad samples draws the replacement from (seed, epoch, index)
    tag = callable(getattr(dataset, "on_error", "raise")) or getattr(dataset, "on_error", "raise") != "raise"
    tag = tag or seed is not None  # a seeded loader seeds each sample: PerSampleSeed below
    iterable = isinstance(dataset, torch.utils.data.IterableDataset)  # it orders itself: no sampler
    if sampler is None and not iterable:
        given = dataloader_kwargs.get("generator")
        if seed is None and isinstance(given, torch.Generator) and not shard:  # the order from it, as
            # DataLoader(generator=g); sharded, every rank needs one order (a generator seeded per rank would
            # give each its own permutation: shards overlapping), so there it orders nothing, as in DistributedSampler
            base = int(torch.randint(2**31 - 1, (), generator=given))
        elif seed is None and not shard:  # unseeded: a fresh order every run (one under seed_everything; an
            # infinite loader's too, its state naming it), read off the caller's generator without moving it: a
            # model made next is the same
            base = _untouched_rng(lambda: int(torch.randint(2**31 - 1, ())))
        sampler = EpochSampler(len(dataset), shuffle=shuffle, seed=base, rank=rank, world=world, tag=tag)
        sampler.drawn = seed is None  # no seed given: a saved state's order is taken over (load_state_dict)
        extra = sampler.per_rank * world - len(dataset)
        if not train and world > 1 and extra and rank == 0:
            ranks = f"rank {world - 1}" if extra == 1 else f"ranks {world - extra}-{world - 1}"
            one = extra == 1
            log.warning("an evaluation loader sharded over %d ranks reads %s beyond its %d, %s the shards equal (as "
                        "DistributedSampler pads them): the last sample of %s; metrics summed over the ranks count %s "
                        "again (leave %s out, or evaluate on one rank)", world,
                        "1 sample" if one else f"{extra} samples", len(dataset),
                        "a repeat that makes" if one else "repeats that make", ranks,
                        *(("it", "it") if one else ("them", "them")))  # fmt: skip
    if isinstance(sampler, EpochSampler) and getattr(dataset, "complete", True) is False:  # a pack still written
        where = ", ".join(str(r.path) for r in getattr(dataset, "readers", ())) or type(dataset).__name__
        log.warning("%s: a pack still being written, %d samples so far: this loader serves those %d each epoch, not "
                    "the ones committed later (a pack is written in the source's order: maybe some classes alone); "
                    "make the loader again once the pack is complete", where, sampler.n, sampler.n)  # fmt: skip
    per_rank = len(sampler) if sampler is not None else (len(dataset) if hasattr(dataset, "__len__") else None)
    drop_one = False  # training drops a last batch of one sample only: decided for each epoch's rest (resumed too)
    if drop_last is None:  # a stream of unknown length: its last batch cannot be known ahead
        drop_one = train and per_rank is not None
        drop_last = drop_one and per_rank % batch_size == 1 and per_rank > 1
        if drop_last and not shuffle and not own_sampler:
            # unshuffled, the one left out is the same sample every epoch: never trained on, which a note at INFO
            # (hidden by default) would not tell
            warnings.warn(f"the last training batch of each epoch would hold 1 sample, which breaks BatchNorm, and "
                          "with shuffle=False it is the same one every epoch (the last of the "
                          f"{per_rank}), never served; drop_last=False keeps it, drop_last=True says it is meant",
                          stacklevel=2)  # fmt: skip
        elif drop_last:
            log.info(
                "the last training batch of each epoch would hold 1 sample, which breaks BatchNorm: it is left "
                "out (drop_last=False keeps it)"
            )
    if drop_last and per_rank is not None and 0 < per_rank < batch_size:  # no batch at all: a loop of no steps
        # (an infinite loader's would never yield one)
        where = f" on each of the {world} ranks" if world > 1 else ""
        raise UsageError(f"drop_last=True with batch_size={batch_size} and {per_rank} samples{where}: every epoch "
                         "would hold no batch; give a smaller batch_size, or drop_last=False")  # fmt: skip
    generator = None
    if seed is not None:
        generator = torch.Generator().manual_seed((seed + 1_000_003 * rank) % 2**64)  # distinct worker seeds per rank
    user_init = dataloader_kwargs.pop("worker_init_fn", None)
    # unseeded on several ranks: torch gives worker k the same seed on every rank (it shares the base seed
    # across the process group), so the k-th samples of all ranks would draw the same augmentations
    salt = rank if seed is None and world > 1 else 0
    # per sample where there are indices; an iterable dataset orders and draws itself, its workers seeded (WorkerInit)
    pooled = dataset if iterable else _pooled(dataset)  # a split's bad samples replaced from the split alone
    seeded = PerSampleSeed(pooled) if seed is not None else _RankDraws(pooled, rank) if world > 1 else None
    seeded = None if iterable else seeded
    if seeded is not None:  # the caller's random states put back after each batch read in this process
        collate_fn = SeededCollate(collate_fn, seeded)
    # a collate error names the samples by dataset index and file, which only the dataset's side knows
    read = seeded if seeded is not None else dataset if iterable else _NotedBatches(pooled)
    kwargs = dict(
        batch_size=batch_size, collate_fn=SlotCollate(_NamingCollate(collate_fn)), num_workers=num_workers,
        drop_last=drop_last, pin_memory=_is_cuda(device), worker_init_fn=WorkerInit(user_init, rank_salt=salt),
        generator=generator,
    )  # fmt: skip
    if sampler is not None:
        kwargs["sampler"] = sampler
    kwargs.update(dataloader_kwargs)

    def build(workers: int) -> DataLoader:  # also called between epochs when re-tuning
        kw = dict(kwargs, num_workers=workers)
        kw.pop("persistent_workers", None)
        kw.pop("prefetch_factor", None)
        if workers > 0:
            prefetch = dataloader_kwargs.get("prefetch_factor") or 4
            workers, prefetch, slots = _fit_environment(dataset, batch_size, workers, prefetch)
            kw.update(num_workers=workers, worker_init_fn=WorkerInit(user_init, slots, rank_salt=salt))
        persistent = workers > 0 and dataloader_kwargs.get("persistent_workers", True)
        if workers > 0:
            kw.update(persistent_workers=persistent, prefetch_factor=prefetch)
            kw["multiprocessing_context"] = worker_context(kw.get("multiprocessing_context"))
        else:  # how workers start, and how long one may take for a batch, mean nothing without them (DataLoader
            # refuses both: DATAKIT_NUM_WORKERS=0, set_num_workers(0) or "auto" choosing 0 would fail)
            kw.pop("multiprocessing_context", None)
            kw.pop("timeout", None)
        # workers that stay read on into the next epoch (EpochBatches) from the sampler set up here
        # (training only: an evaluation loader's next pass comes a training epoch later, and reading
        # it ahead would take CPU from the training workers)
        # (and in order: out of order, one epoch's batches would mix with the next one's)
        ours = not own_sampler and isinstance(kw.get("sampler"), EpochSampler)
        # (and datakit's own datasets only: one of the caller's may read state the loop changes between
        # epochs, an epoch in an mp.Value, which batches read ahead would take from the epoch before)
        # (nor where a transform holds a value shared with the workers, which they read as the loop sets it)
        stream = (train and persistent and ours and kw.get("in_order", True) and _reads_on(dataset)
                  and not _live_values(dataset))  # fmt: skip
        if stream:
            dl = _StreamingDataLoader(read, drop_one=drop_one, **kw)
        else:
            dl = _BalancedDataLoader(read, **kw)
            if ours and drop_one:  # the batches of one epoch, a resumed one's too, cut as the stream cuts them
                dl.epoch_batches = EpochBatches(dl.sampler, dl.batch_size, False, drop_one=True)
        dl.balance = isinstance(seeded, PerSampleSeed) and ours  # every index tagged, every sample seeded from it
        return dl

    loader = Loader(build(num_workers), autotune=autotune, rebuild=build)
    out = InfiniteLoader(loader) if infinite else loader
    return on_device(out) if on_device is not None else out


# what a dataset is opened with: given to create_loader, a slip for open_dataset's (the README's table lists both)
_DATASET_OPTIONS = ("on_error", "bad_samples", "max_bad_fraction", "transform", "target_transform", "mode", "labels",
                    "split", "classes", "cache", "cache_limit", "remap_labels", "file_column", "label_column",
                    "split_column", "encoding", "include_hidden", "index_cache")  # fmt: skip


class _UnknownArgument(UsageError, TypeError):
    """A keyword create_loader does not take: a usage error, and the TypeError Python gives for one."""


def _check_loader_kwargs(kwargs: dict) -> None:
    """Refuse, naming it, a keyword that neither create_loader nor torch's DataLoader takes: DataLoader's own
    TypeError says nothing of where it belongs (``on_error=`` is the dataset's)."""
    import inspect

    known = set(inspect.signature(DataLoader.__init__).parameters) - {"self", "dataset"}
    for name in kwargs:
        if name in known:
            continue
        if name in _DATASET_OPTIONS:
            raise _UnknownArgument(f"create_loader got {name}=, an option of the dataset: give it where the dataset "
                             f"is opened, open_dataset(..., {name}=...), and the loader's workers read it from "
                             "there")  # fmt: skip
        raise _UnknownArgument(f"create_loader got an unknown argument {name}= (besides its own, it passes on what "
                               f"torch's DataLoader takes: {', '.join(sorted(known))})")  # fmt: skip


def _reads_on(dataset) -> bool:
    """Whether a training loader may read ``dataset`` on into the next epoch: datakit's own datasets, whose
    samples depend on the index, the seed and the epoch the sampler hands over, not on anything the loop changes
    between epochs, and a dataset of the caller's that says the same of itself (``epoch_independent = True``)."""
    from datakit.sources import ImageDataset

    if isinstance(dataset, torch.utils.data.Subset):  # a split of one (random_split): as the one
        return _reads_on(dataset.dataset)
    if isinstance(dataset, torch.utils.data.ConcatDataset):
        return all(_reads_on(d) for d in dataset.datasets)
    return isinstance(dataset, ImageDataset) or getattr(dataset, "epoch_independent", False) is True


def held_dataset(dataset):
    """The one dataset a dataset of the caller's holds (a wrapper that passes ``__getitem__`` on), or None: for a
    Subset, a ConcatDataset, a datakit dataset, and one holding none or several."""
    from datakit.sources import ImageDataset

    if isinstance(dataset, (torch.utils.data.Subset, torch.utils.data.ConcatDataset, ImageDataset)):
        return None
    inner = [v for v in getattr(dataset, "__dict__", {}).values() if isinstance(v, torch.utils.data.Dataset)]
    return inner[0] if len(inner) == 1 else None


def _leaves(dataset, through: bool | str = False, depth: int = 0) -> list:
    """The datasets a Subset or ConcatDataset reads from, in order; ``through``: also those a dataset of the
    caller's holds alone (:func:`held_dataset`), four deep at most, but one with ``classes`` of its own, a part as
    it numbers them (``"all"``: that one's too)."""
    if isinstance(dataset, torch.utils.data.Subset):
        return _leaves(dataset.dataset, through, depth)
    if isinstance(dataset, torch.utils.data.ConcatDataset):
        return [leaf for d in dataset.datasets for leaf in _leaves(d, through, depth)]
    if (through and depth < 4 and (through == "all" or _own_classes(dataset) is None)
            and (inner := held_dataset(dataset)) is not None):  # fmt: skip
        return _leaves(inner, through, depth + 1)
    return [dataset]


def _own_classes(dataset) -> list | None:
    """The ``classes`` a dataset of the caller's gives itself (a list or tuple), or None."""
    from datakit.sources import ImageDataset

    if isinstance(dataset, ImageDataset):
        return None
    try:
        classes = getattr(dataset, "classes", None)
    except Exception:  # noqa: BLE001 - a property of the caller's that raises: as if it had none
        return None
    return list(classes) if isinstance(classes, (list, tuple)) else None


def _concats(dataset, through: bool = False, depth: int = 0) -> list:
    """The ConcatDatasets in ``dataset``: itself, or under Subsets (``random_split(a + b)``) and inside others;
    ``through``: also inside datasets of the caller's that hold one (:func:`held_dataset`)."""
    if isinstance(dataset, torch.utils.data.Subset):
        return _concats(dataset.dataset, through, depth)
    if isinstance(dataset, torch.utils.data.ConcatDataset):
        return [dataset] + [c for d in dataset.datasets for c in _concats(d, through, depth)]
    if through and depth < 4 and (inner := held_dataset(dataset)) is not None:
        return _concats(inner, through, depth + 1)
    return []


def _maps_targets(d) -> bool:
    """Whether a dataset's target_transform may map its class indices onto others (a caller's own function);
    int, datakit's ToDtype and OneHot keep each index's class."""
    from datakit.transforms import OneHot, ToDtype

    t = d.target_transform
    return t is not None and t is not int and not isinstance(t, (OneHot, ToDtype))


def _check_same_classes(dataset) -> None:
    """Refuse datakit datasets joined in a ConcatDataset (``a + b``, also under a Subset) that number their
    classes differently: one index would be two classes in the batches. A target_transform of the caller's own
    on a part is taken as that part's mapping."""
    from datakit.sources import ImageDataset

    for through in (False, True):
        for concat in _concats(dataset, through):
            named = [(d.classes if isinstance(d, ImageDataset) else _own_classes(d)) for d in _leaves(concat, through)
                     if not (isinstance(d, ImageDataset) and _maps_targets(d))]  # fmt: skip
            parts = [list(c) for c in named if c is not None]
            first = parts[0] if parts else None
            for k, theirs in enumerate(parts[1:], 1):
                if theirs != first:
                    i = next(i for i in range(max(len(first), len(theirs)))
                             if i >= len(first) or i >= len(theirs) or first[i] != theirs[i])  # fmt: skip
                    a = repr(first[i]) if i < len(first) else "missing"
                    b = repr(theirs[i]) if i < len(theirs) else "missing"
                    clash = (f"the ConcatDataset's datasets number their classes differently: class {i} is {a} in the "
                             f"first and {b} in dataset {k} ({len(first)} and {len(theirs)} classes), so one index "
                             "would be two classes")  # fmt: skip
                    if not through:
                        raise UsageError(f"{clash}; open each with the same classes=[...] (all of their classes, in "
                                         "one order), or map their targets with target_transform=")  # fmt: skip
                    # seen through a dataset of the caller's, which may map the targets itself: said, not refused
                    log.warning(
                        "%s, unless a dataset of yours around them maps the targets; open each with the "
                        "same classes=[...] (all of their classes, in one order)",
                        clash,
                    )
                    return


def _channel_order(dataset) -> str | None:
    """The channel order of the images a dataset gives ("RGB", "BGR", "L"), through Subset and
    ConcatDataset; None when unknown (a dataset of the caller's) or mixed."""
    if isinstance(dataset, torch.utils.data.Subset):
        return _channel_order(dataset.dataset)
    if isinstance(dataset, torch.utils.data.ConcatDataset):
        orders = {_channel_order(d) for d in dataset.datasets}
        return orders.pop() if len(orders) == 1 else None
    from datakit.sources import ImageDataset

    if isinstance(dataset, ImageDataset):
        from datakit.transforms import EvalPipeline, TrainPipeline

        pipe = _only_pipeline(dataset.transform)
        if pipe is not None and not isinstance(pipe, (TrainPipeline, EvalPipeline)):
            return None  # a transform of the caller's may reorder the channels (BGRToRGB, cv2.cvtColor)
        return {"rgb": "RGB", "bgr": "BGR", "unchanged": "BGR", "gray": "L"}.get(dataset.mode)  # unchanged: BGR(A)
    return None


def _keeps_channels(dataset) -> bool:
    """Whether every ``augment=`` step of the datasets' pipelines is one of torchvision's that keeps the images'
    channels (not ``v2.Grayscale(3)``, ``v2.RGB()``, a ``Lambda`` or a class of the caller's, which may turn gray
    images to three channels)."""

    def keeps(step) -> bool:
        kind = type(step)
        inner = getattr(step, "transforms", None)
        if isinstance(inner, (list, tuple)):  # Compose, RandomApply, RandomChoice, RandomOrder: their steps
            return all(keeps(t) for t in inner)
        return (kind.__module__.startswith("torchvision.") and kind.__name__ not in ("Grayscale", "RGB", "Lambda")
                and getattr(step, "num_output_channels", 1) == 1)  # fmt: skip

    for leaf in _leaves(dataset):
        pipe = _only_pipeline(getattr(leaf, "transform", None))
        augment = getattr(pipe, "augment", None) or ()
        if not all(keeps(step) for step in (augment if isinstance(augment, (list, tuple)) else [augment])):
            return False
    return True


def _check_same_scale(dataset, epoch: int | None = None) -> None:
    """Refuse datasets (joined in a ConcatDataset, under Subsets and wrappers) whose datakit pipelines give images
    on two scales: float32 normalised per sample (``normalize=True``) and uint8 (the default, the loader
    normalises): one batch would hold both, the uint8 images promoted to floats of 0-255 beside normalised ones."""
    # (not through a dataset of the caller's holding several: it may give two views, each its own tensor)
    found = _found_pipelines(dataset, wrappers="one")
    kinds: dict[bool, str] = {}
    for k, (leaf, pipe, _) in enumerate(found):
        src = next((os.fspath(v) for v in (getattr(leaf, "root", None), getattr(leaf, "path", None))
                    if isinstance(v, (str, os.PathLike))), None)  # fmt: skip
        kinds.setdefault(pipe.norm is None, f"part {k}" + (f", {src}" if src else ""))
    if len(kinds) > 1:
        raise UsageError(f"{f'epoch {epoch}: ' if epoch is not None else ''}the datasets' pipelines give images on "
                         f"two scales, float32 normalised in the workers (normalize=True: {kinds[False]}) and uint8 "
                         f"({kinds[True]}), which one batch would hold side by side, the uint8 ones as 0-255 floats; "
                         "make them alike: the default (uint8) in each, normalised by the loader, or normalize=True "
                         "in each")  # fmt: skip


def _only_pipeline(transform):
    """``transform``, or the datakit pipeline a Compose (in Composes) holds as its only step: it does what the
    pipeline does."""
    for _ in range(4):
        steps = getattr(transform, "transforms", None)
        if type(transform).__name__ != "Compose" or not isinstance(steps, (list, tuple)) or len(steps) != 1:
            break
        transform = steps[0]
    return transform


def _stats_order(normalize) -> str | None:
    """The channel order statistics are given in: RGB for the presets, a Stats' (or its JSON's)
    ``order``; None for plain (mean, std), taken in the images' own order."""
    if normalize is None or normalize is True or isinstance(normalize, str):
        return "RGB"
    order = normalize.get("order") if isinstance(normalize, dict) else getattr(normalize, "order", None)
    return order if order in ("RGB", "BGR") else None


def _found_pipelines(dataset, depth: int = 0, order_known: bool = True,
                     wrappers: bool | str = True) -> list[tuple[object, object, bool]]:  # fmt: skip
    """The datakit pipelines of ``dataset``: ``(dataset, pipeline, order_known)`` for each dataset that has one as its
    transform, through Subset, ConcatDataset, a Compose around the pipeline, and where ``wrappers``, a dataset of
    the caller's that holds one, four deep at most (``"one"``: one that holds a single dataset). Inside a dataset
    of the caller's, or a Compose, the channel order is not known (it may turn them)."""
    if depth > 4:
        return []
    inner = None
    if isinstance(dataset, torch.utils.data.Subset):
        inner = [dataset.dataset]
    elif isinstance(dataset, torch.utils.data.ConcatDataset):
        inner = list(dataset.datasets)
    from datakit.sources import ImageDataset
    from datakit.transforms import EvalPipeline, TrainPipeline

    pipe = _only_pipeline(getattr(dataset, "transform", None))
    for _ in range(4):  # Compose([train_pipeline(...), more]): the pipeline inside, the channel order not known
        steps = [t for t in getattr(pipe, "transforms", ()) if isinstance(t, (TrainPipeline, EvalPipeline))]
        if isinstance(pipe, (TrainPipeline, EvalPipeline)) or len(steps) != 1:
            break
        pipe, order_known = steps[0], False
    deeper = depth  # Subset and ConcatDataset: as deep as they nest
    if (wrappers and inner is None and not isinstance(pipe, (TrainPipeline, EvalPipeline))
            and not isinstance(dataset, ImageDataset)):  # fmt: skip
        # a dataset of the caller's around datakit's (a relabelling wrapper, one of several sources): those it holds
        held = list(vars(dataset).values()) if hasattr(dataset, "__dict__") else []
        # (a few sources, not the samples: a list or dict of a million names is no list of datasets)
        held += [v for h in held if isinstance(h, (list, tuple)) and len(h) <= 64 for v in h]
        held += [v for h in held if isinstance(h, dict) and len(h) <= 64 for v in h.values()]
        inner = [v for v in held if isinstance(v, torch.utils.data.Dataset)]
        if wrappers == "one" and len(inner) > 1:  # two views, or two sources mixed as it likes: its own affair
            inner = []
        order_known, deeper = False, depth + 1
    if inner is not None:
        return [f for d in inner for f in _found_pipelines(d, deeper, order_known, wrappers)]
    return [(dataset, pipe, order_known)] if isinstance(pipe, (TrainPipeline, EvalPipeline)) else []


def _pipeline_stats(dataset) -> list[tuple[str, tuple]]:
    """What the uint8 pipelines of ``dataset`` (:func:`_found_pipelines`) say of the statistics to normalise their
    batches with, each once: ``("given", (mean, std))`` given to ``train_pipeline(mean=, std=)`` (in the images'
    channel order, as they are applied), or ``("default", (mean, std))``: ImageNet's, reversed for a ``mode="bgr"``
    dataset where its channel order is known (as written inside a dataset of the caller's, as for the loader's
    normalisation); empty for none (``normalize=True``, other transforms)."""
    from datakit.transforms import IMAGENET_MEAN, IMAGENET_STD

    found: list[tuple[str, tuple]] = []
    for leaf, pipe, order_known in _found_pipelines(dataset):
        if pipe.norm is not None:
            continue
        stats = getattr(pipe, "batch_stats", None)
        if stats is None and not hasattr(pipe, "batch_stats") and getattr(pipe, "stats_order", "RGB") is None:
            _say_once(
                f"a pipeline ({type(pipe).__name__}) made by an earlier datakit was given mean= and std= it does not "
                "keep; its batches are normalised with ImageNet's statistics: make the pipeline again (or pass "
                "normalize=)"
            )
        if stats is not None:
            said = ("given", (list(stats[0]), list(stats[1])))
        else:
            mean, std = list(IMAGENET_MEAN), list(IMAGENET_STD)
            if order_known and _channel_order(leaf) == "BGR":
                mean, std = mean[::-1], std[::-1]
            said = ("default", (mean, std))
        if not any(_same_stats(said[1], t[1]) for t in found):
            found.append(said)
    return found


_SAID: set[str] = set()


def _say_once(message: str) -> None:
    """A warning logged once a process (a tuning run makes a loader for each candidate; each would say it)."""
    if message not in _SAID:
        _SAID.add(message)
        log.warning("%s", message)


def _same_stats(a, b) -> bool:
    """Whether two (mean, std) pairs normalise alike, each on its own scale (0-1 or 0-255; float32 values as the
    float64 ones they round; the 4 decimals `datakit stats` prints beside its 3 on the 0-255 scale, ImageNet's
    rounded to one decimal there: 0.1% apart at most, under a thousandth of a standard deviation)."""
    from datakit.transforms import on_255_scale

    def unit(pair):
        mean, std = (np.asarray(v, np.float64).ravel() for v in pair)
        return (mean / 255, std / 255) if on_255_scale(mean, std) else (mean, std)

    (ma, sa), (mb, sb) = unit(a), unit(b)
    return (
        ma.shape == mb.shape
        and sa.shape == sb.shape
        and np.allclose(ma, mb, rtol=1e-3, atol=1e-6)
        and np.allclose(sa, sb, rtol=1e-3, atol=1e-6)
    )


def _device_plan(device, normalize, dataset=None, own_collate: bool = False) -> Callable | None:
    """None when batches stay as collated; otherwise the function that wraps the loader so that
    they arrive on ``device`` (the CPU by default), normalised. Bad values raise here. Statistics
    of a known channel order (the presets: RGB) are put in the order of ``dataset``'s images: a
    ``mode="bgr"`` dataset's blue plane is normalised with the blue statistics. Statistics given
    to the dataset's pipeline (``train_pipeline(mean=..., std=...)``) are the default."""
    from datakit.prefetch import resolve_normalize

    said = _pipeline_stats(dataset)
    given = [pair for kind, pair in said if kind == "given"]
    explicit = normalize is not None and normalize is not True  # asked for here, not the default nor the pipeline's
    if len(said) > 1 and (given or (device is not None and not explicit)):
        # (pipelines of the default alone differ by their datasets' channel order: RGB and mode="bgr" ones)
        raise UsageError(f"the datasets' pipelines give {len(said)} sets of statistics (mean=, std=; the default "
                         "counts as ImageNet's, in each dataset's channel order); one loader normalises every batch "
                         "with one: give the same to each")  # fmt: skip
    if given and normalize is True:  # "normalise them": with the pipeline's statistics, the default here
        normalize, explicit = None, False
    images = _channel_order(dataset)
    from datakit.sources import ImageDataset

    leaves = [leaf for leaf in _leaves(dataset) if isinstance(leaf, ImageDataset)]
    bgr = [leaf.mode for leaf in leaves if leaf.mode in ("bgr", "unchanged")]
    if (images is None and bgr and not given and normalize is not False and _stats_order(normalize) == "RGB"
            and (device is not None or explicit)):  # fmt: skip
        rgb = resolve_normalize(True if normalize is None else normalize)
        if rgb is not None and len(rgb[0]) == 3:
            # a transform of the caller's over BGR images: whether the planes it gives are B, G, R is not known here
            flipped = ([round(v, 4) for v in rgb[0][::-1]], [round(v, 4) for v in rgb[1][::-1]])
            _say_once(f"the dataset reads B, G, R images (mode={bgr[0]!r}) through a transform of yours, which may "
                      "or may not turn them to R, G, B: the statistics, R, G, B ones, are applied as written, red's "
                      f"to the first plane; if the batches are B, G, R, pass normalize={flipped} (plain numbers are "
                      "applied as given), or read the images with mode='rgb'")  # fmt: skip
    if images == "BGR" and explicit and normalize is not False and _stats_order(normalize) is None:
        plain = resolve_normalize(normalize)
        if plain is not None and len(plain[0]) == 3 and (plain[0][0], plain[1][0]) != (plain[0][2], plain[1][2]):
            # the trap: datakit stats (and torchvision's Normalize lines) print R, G, B; pasted here they would put
            # the red statistics on the blue plane, without a word
            shown = f"{{'mean': {plain[0]}, 'std': {plain[1]}, 'order': 'RGB'}}"
            _say_once(f"normalize= is plain numbers, applied in the images' own channel order: B, G, R (a "
                      f"mode='bgr' dataset), so mean {plain[0][0]:g} goes to blue; if they are R, G, B numbers (as "
                      f"datakit stats and torchvision's Normalize lines give them), pass normalize={shown} (or the "
                      "Stats compute_stats returns); 'order': 'BGR' says they are B, G, R and quiets this")  # fmt: skip

    def as_applied(norm):  # normalize= in the images' channel order, as the batches would be normalised with it
        pair = resolve_normalize(True if norm is None else norm)
        if pair is not None and len(pair[0]) == 3 and {_stats_order(norm), images} == {"RGB", "BGR"}:
            pair = (pair[0][::-1], pair[1][::-1])
        return pair

    # (normalize=False: batches moved as they are, asked for)
    if given and normalize is not None and normalize is not False and not _same_stats(as_applied(normalize), given[0]):
        raise UsageError(f"the pipeline's mean={given[0][0]}, std={given[0][1]} and create_loader's "
                         f"normalize={normalize!r} differ; give the statistics in one place")  # fmt: skip
    if given and normalize is None:
        if device is None:
            _say_once(
                "the pipeline's mean= and std= are not applied to its uint8 batches here: "
                "create_loader(..., device=...) applies them (or a normalisation of your own)"
            )
            return None
        normalize = tuple(given[0])
    if device is None and normalize is None:
        return None
    from datakit.prefetch import DeviceLoader, check_device

    stats = as_applied(normalize)
    if images == "L" and stats is not None and len(stats[0]) != 1 and not own_collate and _keeps_channels(dataset):
        # gray images through datakit's pipeline: 1 channel, known now, where the first batch would refuse them
        which = "ImageNet's, the default" if normalize is None or normalize is True else "given"
        raise UsageError(f"the dataset reads gray images (mode='gray'): 1 channel, and the statistics ({which}) are "
                         f"for {len(stats[0])}; pass normalize= with one mean and one std (compute_stats of the gray "
                         "dataset gives them), or read the images with mode='rgb'")  # fmt: skip
    mean, std = stats if stats is not None else (None, None)
    dev = check_device("cpu" if device is None else device)

    def plan(loader):
        if stats is not None:  # the batches are normalised: with these, as the pipelines' statistics are compared
            inner = loader.loader if isinstance(loader, InfiniteLoader) else loader
            inner.normalises_with = (tuple(np.asarray(v, np.float64).tolist() for v in stats), not explicit)
        return DeviceLoader(loader, dev, mean, std, explicit=explicit)

    return plan
