from __future__ import annotations

import collections
import functools
import gc
import json
import logging
import multiprocessing
import operator
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import warnings
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SAMPLES, PassThrough
from torch.utils.data import Dataset

from datakit.errors import SampleError, UsageError
from datakit.loader import EpochSampler, EpochTiming, InfiniteLoader, create_loader, next_num_workers, seed_everything
from datakit.parallel import usable_cpus


class Indexed(Dataset):
    """Returns its index and three random draws (random, NumPy, torch) made in the worker."""

    epoch_independent = True  # its samples depend on nothing the loop changes: read on into the next epoch

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return i, random.random(), float(np.random.rand()), float(torch.rand(1))


def batches(loader, k=None):
    out = []
    for b in loader:
        out.append(b[0].tolist())
        if k is not None and len(out) == k:
            break
    return out


def test_defaults_and_drop_last_single_sample(caplog):
    with caplog.at_level(logging.INFO, logger="datakit"):
        train = create_loader(Indexed(9), 4, num_workers=0, seed=0)
    assert train.drop_last and len(train) == 2
    assert [r.getMessage() for r in caplog.records] == ["the last training batch of each epoch would hold 1 sample, "
                                                        "which breaks BatchNorm: it is left out (drop_last=False "
                                                        "keeps it)"]  # fmt: skip
    kept = create_loader(Indexed(9), 4, num_workers=0, seed=0, drop_last=False)
    assert not kept.drop_last and sum(len(b) for b in batches(kept)) == 9
    evaluation = create_loader(Indexed(9), 4, train=False, num_workers=0)
    assert not evaluation.drop_last and sum(len(b) for b in batches(evaluation)) == 9
    assert batches(evaluation)[0] == [0, 1, 2, 3]  # no shuffling in evaluation
    keep = create_loader(Indexed(10), 4, num_workers=0)
    assert not keep.drop_last
    two = create_loader(Indexed(10), 4, num_workers=2)
    assert two.persistent_workers and two.prefetch_factor == 4 and not two.pin_memory


def test_an_unshuffled_training_loader_says_it_leaves_the_same_sample_out_every_epoch(caplog):
    # the attack: shuffle=False, 25 samples, batch 8: sample 24 was never served in 10 epochs, said only at INFO
    with pytest.warns(UserWarning) as said:
        loader = create_loader(Indexed(25), 8, num_workers=0, seed=0, shuffle=False)
    assert [str(w.message) for w in said] == [
        "the last training batch of each epoch would hold 1 sample, which breaks BatchNorm, and with shuffle=False it "
        "is the same one every epoch (the last of the 25), never served; drop_last=False keeps it, drop_last=True "
        "says it is meant"
    ]
    assert sorted(sum(batches(loader), [])) == list(range(24))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(create_loader(Indexed(25), 8, num_workers=0, seed=0, shuffle=False, drop_last=True)) == 3
        assert len(create_loader(Indexed(25), 8, num_workers=0, seed=0)) == 3  # shuffled: a new one each epoch


class _OwnRng:
    def __init__(self) -> None:
        self.rng = np.random.default_rng(5)

    def __call__(self, x):
        return int(self.rng.integers(1 << 30))


class _Drawn(torch.utils.data.Dataset):
    def __init__(self, transform) -> None:
        self.transform = transform

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        return self.transform(i), i


def test_a_transform_with_its_own_generator_is_warned_of_where_workers_copy_it():
    # the attack: a transform keeping np.random.default_rng() (NumPy's advice; MONAI's self.R) drew the same numbers
    # in both workers, seed= or not: 4 distinct draws of 8, without a word
    with pytest.warns(UserWarning) as said:
        loader = create_loader(_Drawn(_OwnRng()), 2, num_workers=2, seed=0, train=False)
    assert [str(w.message) for w in said] == [
        "the dataset's transform holds a random generator of its own (numpy.random.Generator): every worker starts "
        "with a copy of it in the same state and draws the same numbers as the others (the same augmentations), and "
        "seed= does not reach it; draw from random, numpy.random or torch (seeded per sample and worker), or reseed "
        "it in worker_init_fn"
    ]
    assert len({d for b in loader for d in b[0].tolist()}) < 8  # what it warns of: draws repeated across workers
    rng, gen = random.Random(3), torch.Generator()  # the same, held by a closure, a default or a method's object
    for transform, kind in ((lambda i: i + rng.randrange(9), "random.Random"),
                            (lambda i, g=gen: i, "torch.Generator"),
                            (_OwnRng().__call__, "numpy.random.Generator")):  # fmt: skip
        with pytest.warns(UserWarning, match=re.escape(f"holds a random generator of its own ({kind})")):
            create_loader(_Drawn(transform), 2, num_workers=2, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # in one process, or drawing from the global generators: nothing to say
        create_loader(_Drawn(_OwnRng()), 2, num_workers=0, seed=0)
        create_loader(_Drawn(lambda i: i), 2, num_workers=2, seed=0)


class _Aug(torch.utils.data.Dataset):  # a wrapper holding its transform under a name of its own
    def __init__(self, inner, aug) -> None:
        self.inner, self.aug = inner, aug
        self.names, self.weights = [f"{i}.jpg" for i in range(20_000)], np.zeros(20_000)

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int):
        return self.aug(self.inner[i][0]), i


class _SelfRng(Indexed):  # the generator on the dataset itself
    def __init__(self) -> None:
        super().__init__(8)
        self.rng = random.Random(1)

    def __getitem__(self, i: int):
        return self.rng.random(), i


class _BaseRng(Indexed):
    rng = np.random.RandomState(2)  # made once, for the class (and its subclasses)

    def __getitem__(self, i: int):
        return self.rng.rand(), i


class _ClassRng(_BaseRng):
    pass


_MODULE_RNG = torch.Generator()


class _ModuleRng(Indexed):
    def __getitem__(self, i: int):
        return self._draw(), i

    def _draw(self) -> int:  # a helper __getitem__ calls
        return int(torch.randint(9, (1,), generator=_MODULE_RNG))


class _Slotted(Indexed):
    __slots__ = ("gen",)

    def __init__(self) -> None:
        super().__init__(8)
        self.gen = torch.Generator()

    def __getitem__(self, i: int):
        return float(torch.rand(1, generator=self.gen)), i


class _GlobalOnes(Indexed):  # random's, NumPy's and torch's own generators: seeded in every worker
    def __init__(self) -> None:
        super().__init__(8)
        self.pick, self.g = random.choice, torch.default_generator
        self.jitter = functools.partial(random.uniform, 0, 1)
        self.np_draw = np.random.rand

    def __getitem__(self, i: int):
        return self.pick([1, 2]) + float(torch.rand(1, generator=self.g)) + self.jitter() + self.np_draw(), i


class _Decorated(Indexed):  # __getitem__ under a decorator, the generator named as a string
    def __init__(self) -> None:
        super().__init__(8)
        self.rng = np.random.default_rng()

    @torch.no_grad()
    def __getitem__(self, i: int):
        return float(getattr(self, "rng").random()), i  # noqa: B009 - the name as a string, as callers write it


class _MainSide(Indexed):  # generators used by methods the main process runs: a sampler's factory, set_epoch
    def __init__(self) -> None:
        super().__init__(8)
        self.g, self.rng = torch.Generator(), np.random.default_rng(0)
        self._split()

    def _split(self) -> None:  # called from __init__ only
        self.order = self.rng.permutation(8).tolist()

    def sampler(self):
        return torch.utils.data.RandomSampler(self, generator=self.g)


class _Reseeded(Indexed):  # reseeded in worker_init_fn through the dataset the worker is handed
    def __init__(self) -> None:
        super().__init__(64)
        self.rng = np.random.default_rng(0)

    def __getitem__(self, i: int):
        return float(self.rng.random()), i


class _Null:  # a null object: any attribute is itself (a null logger, an addict-style dict)
    def __getattr__(self, name: str):
        return self

    def __call__(self, *args, **kwargs):
        return self


class _Proxy:  # a context-bound proxy whose __dict__ raises outside its context
    @property
    def __dict__(self):
        raise RuntimeError("working outside of a context")


class _NullHolder(Indexed):
    log = _Null()

    def __init__(self) -> None:
        super().__init__(8)
        self.proxy, self.rng = _Proxy(), np.random.default_rng()

    def __getitem__(self, i: int):
        self.log.debug(self.proxy)
        return i, i

    def collate(self, batch):  # its collate function, run in the workers: it draws from self.rng
        return torch.tensor([b[0] for b in batch]) * float(self.rng.random())


def _reseed(worker_id: int) -> None:
    info = torch.utils.data.get_worker_info()
    info.dataset.rng = np.random.default_rng(info.seed)


class _SplitOnce(Indexed):  # a generator used in __init__ only (a subset drawn once), before any worker
    def __init__(self) -> None:
        super().__init__(8)
        self.rng = np.random.default_rng(0)
        self.order = self.rng.permutation(8).tolist()
        self.rows = [[f"{i}.jpg", i % 2] for i in range(50_000)]  # json.load's lists: not walked through


def test_a_generator_anywhere_in_the_callers_dataset_is_warned_of(tmp_path: Path):
    # the attack: the warning looked at attributes named transform only; a wrapper's self.aug, a dataset's own
    # self.rng (random crop offsets) and torchvision's joint transforms drew alike in both workers without a word
    from torchvision.datasets import ImageFolder

    from datakit.datasets import FolderDataset

    def said(dataset) -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            create_loader(dataset, 2, num_workers=2, seed=0, train=False)
        found = [re.match(r"(.*) holds a random generator of its own \((.*?)\): every", str(w.message)) for w in caught]
        return [f"{m[1]}: {m[2]}" for m in found]

    class Folder(FolderDataset):  # a subclass of datakit's, with a generator of its own
        def __init__(self, root) -> None:
            super().__init__(root)
            self.rng = np.random.default_rng()

        def __getitem__(self, i: int):
            return super().__getitem__(i)[0], int(self.rng.integers(2))

    assert said(_Aug(Indexed(8), _OwnRng())) == ["the dataset's _Aug.aug: numpy.random.Generator"]
    assert said(_SelfRng()) == ["the dataset's _SelfRng.rng: random.Random"]
    assert said(_ClassRng(8)) == ["the dataset's _ClassRng.rng: numpy.random.RandomState"]
    assert said(_ModuleRng(8)) == ["the dataset's _ModuleRng (a module's generator): torch.Generator"]
    assert said(_Slotted()) == ["the dataset's _Slotted.gen: torch.Generator"]
    assert said(_Decorated()) == ["the dataset's _Decorated.rng: numpy.random.Generator"]
    assert said(_MainSide()) == []
    assert said(_NullHolder()) == []  # looked through, neither hanging nor raising
    with pytest.warns(
        UserWarning, match=re.escape("the dataset's _NullHolder.rng holds a random generator of its own")
    ):
        odd = _NullHolder()
        create_loader(odd, 2, num_workers=2, seed=0, collate_fn=odd.collate)
    assert said(Folder(SAMPLES / "images")) == ["the dataset's Folder.rng: numpy.random.Generator"]
    assert said(torch.utils.data.Subset(_Aug(_SelfRng(), lambda x: x), [0, 1])) == [
        "the dataset's _SelfRng.rng: random.Random"
    ]
    assert said(ImageFolder(str(SAMPLES / "images"), transform=_OwnRng())) == [
        "the dataset's transform: numpy.random.Generator"
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # data, arrays, functions and the global generators: nothing to say
        create_loader(_Aug(Indexed(8), lambda x: x), 2, num_workers=2, seed=0)
        create_loader(ImageFolder(str(SAMPLES / "images")), 2, num_workers=2, seed=0)
        create_loader(_GlobalOnes(), 2, num_workers=2, seed=0)
        create_loader(_SplitOnce(), 2, num_workers=2, seed=0)
    # torch's remedy, the dataset a worker is handed reseeded in worker_init_fn, reaches the caller's dataset
    with pytest.warns(UserWarning, match="_Reseeded.rng holds a random generator of its own"):
        loader = create_loader(_Reseeded(), 8, num_workers=2, seed=0, worker_init_fn=_reseed, train=False)
    assert len({float(d) for b in loader for d in b[0]}) == 64  # 32 before: both workers drew the same


def test_same_seed_same_batches_and_reshuffles_each_epoch():
    a = create_loader(Indexed(20), 5, num_workers=2, seed=7)
    b = create_loader(Indexed(20), 5, num_workers=2, seed=7)
    ea1, ea2 = batches(a), batches(a)
    assert ea1 == batches(b) and ea2 == batches(b)
    assert ea1 != ea2 and sorted(sum(ea1, [])) == list(range(20))


@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes")
def test_worker_seeds_distinct_and_reproducible():
    def draws(seed):
        loader = create_loader(Indexed(16), 1, num_workers=4, seed=seed, train=False)
        return [(float(r), float(n), float(t)) for _, r, n, t in loader]

    first = draws(3)
    assert first == draws(3)
    assert len({d[1] for d in first[:4]}) == 4  # NumPy draws differ across the 4 workers' first samples
    assert len({d[0] for d in first[:4]}) == 4
    assert first != draws(4)


class StopsAt(Dataset):
    """Its index; reading sample ``at`` raises StopIteration (a transform's ``next()`` on an empty iterator)."""

    def __init__(self, n: int, at: int) -> None:
        self.n, self.at = n, at

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if int(i) == self.at:
            next(iter([]))
        return int(i)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("seed", [None, 0])
def test_a_stop_iteration_from_a_sample_is_an_error_not_the_end_of_the_epoch(workers: int, seed):
    # the attack: a transform's StopIteration at sample 5 of 8 ended each epoch after 4 samples without a word,
    # and an infinite loader served the first two batches for ever
    want = "sample 5: StopIteration raised while reading it (by the dataset or its transform); passed on, it would " \
           "end the epoch there without a word"  # fmt: skip
    loader = create_loader(StopsAt(8, 5), 2, num_workers=workers, seed=seed, train=False)
    with pytest.raises(RuntimeError) as e:
        batches(loader)
    assert str(e.value) == want
    infinite = create_loader(StopsAt(8, 5), 2, num_workers=workers, seed=seed, train=False, infinite=True)
    assert [next(infinite).tolist() for _ in range(2)] == [[0, 1], [2, 3]]
    with pytest.raises(RuntimeError) as e:
        next(infinite)
    assert str(e.value) == want
    collate = create_loader(
        Indexed(4), 2, num_workers=workers, seed=seed, train=False, collate_fn=lambda b: next(iter([]))
    )
    with pytest.raises(RuntimeError) as e:
        batches(collate)
    assert str(e.value) == "the collate function raised StopIteration on the batch of samples 0, 1; passed on, it " \
                           "would end the epoch there without a word"  # fmt: skip


class Refuses:
    """A transform of the user's that raises ValueError on images 63 rows high."""

    def __call__(self, img):
        if img.shape[0] == 63:
            raise ValueError("unexpected image")
        return torch.from_numpy(np.ascontiguousarray(img[:8, :8]))


class RaisesOne:
    """A transform that raises the same ValueError instance, with no message, every time."""

    error = ValueError()

    def __call__(self, img):
        raise self.error


def _marked(img, v: int) -> torch.Tensor:
    """An image's 8 x 8 corner as a CHW tensor, its third plane set to ``v`` (what a test reads back)."""
    out = torch.from_numpy(img[:8, :8].copy()).permute(2, 0, 1).contiguous()
    out[2] = v
    return out


class Strength:
    """A curriculum: the strength the loop sets in an mp.Value before each epoch, written into every image."""

    def __init__(self, value) -> None:
        self.value = value

    def __call__(self, img):
        return _marked(img, self.value.value)


class Switched:
    """An augmentation switched off in place for the last epochs, holding an object pickle cannot store."""

    def __init__(self) -> None:
        import cv2

        self.clahe = cv2.createCLAHE()
        self.enabled = True

    def __call__(self, img):
        return _marked(img, int(self.enabled))


def _solid_folder(root: Path) -> None:
    from datakit.io import imwrite

    for i in range(24):
        (root / f"类{i % 3}").mkdir(parents=True, exist_ok=True)
        imwrite(root / f"类{i % 3}" / f"{i:02d}.png", np.full((10, 12, 3), i, np.uint8))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_shared_value_in_a_transform_is_not_read_ahead(tmp_path: Path, method: str):
    # the attack: a datakit dataset whose transform reads an mp.Value the loop sets before each epoch (a curriculum):
    # 7 of 9 batches of each epoch, read ahead by the persistent workers, carried the epoch before's value
    import multiprocessing as mp

    from datakit import open_dataset

    _solid_folder(tmp_path)
    value = mp.get_context(method).Value("i", 0)
    loader = create_loader(open_dataset(tmp_path, transform=Strength(value)), 4, num_workers=2, seed=0,
                           multiprocessing_context=method)  # fmt: skip
    seen = []
    for e in range(3):
        value.value = 10 * e
        seen.append(sorted({int(v) for x, _ in loader for v in x[:, 2, 0, 0]}))
    assert seen == [[0], [10], [20]]
    assert type(loader.loader).__name__ == "_BalancedDataLoader"
    del loader
    gc.collect()


def test_a_transform_changed_in_place_is_seen_beside_an_object_pickle_cannot_store(tmp_path: Path):
    # the attack: a transform holding an OpenCV CLAHE (which pickle cannot store) was fingerprinted by its identity
    # alone: switched off in place before an epoch, it went on augmenting every batch of that epoch
    from datakit import open_dataset

    _solid_folder(tmp_path)
    aug = Switched()
    loader = create_loader(open_dataset(tmp_path, transform=aug), 4, num_workers=2, seed=0,
                           multiprocessing_context="fork")  # fmt: skip
    seen = []
    for e in range(2):
        aug.enabled = e == 0
        seen.append(sorted({int(v) for x, _ in loader for v in x[:, 2, 0, 0]}))
    assert seen == [[1], [0]]
    assert type(loader.loader).__name__ == "_StreamingDataLoader"  # nothing shared: read on as before
    del loader
    gc.collect()


def test_pipelines_giving_two_scales_are_refused(tmp_path: Path):
    # the attack: a ConcatDataset of a normalize=True pipeline and a uint8 one: batches held normalised floats beside
    # uint8 images promoted to 0-255 floats, without a word
    from datakit import open_dataset
    from datakit.transforms import train_pipeline

    _solid_folder(tmp_path)
    a = open_dataset(tmp_path, transform=train_pipeline(8, normalize=True))
    b = open_dataset(tmp_path, transform=train_pipeline(8))
    for device in ("cpu", None):
        with pytest.raises(UsageError) as e:
            create_loader(torch.utils.data.ConcatDataset([a, b]), 4, num_workers=0, seed=0, device=device)
        assert str(e.value) == two_scales(f"part 0, {tmp_path}", f"part 1, {tmp_path}")
    nested = torch.utils.data.Subset(a, [0, 1, 2, 3])
    for _ in range(5):  # five Subsets deep: found all the same
        nested = torch.utils.data.Subset(nested, [0, 1, 2, 3])
    with pytest.raises(UsageError, match="two scales"):
        create_loader(torch.utils.data.ConcatDataset([b, nested]), 4, num_workers=0, seed=0)
    # a dataset of the caller's holding both, each given as its own tensor (two views): its own affair
    views = next(iter(create_loader(TwoViews(a, b), 4, num_workers=0, seed=0)))
    assert (views[0].dtype, views[1].dtype) == (torch.float32, torch.uint8)
    # the same through a Compose with a step after the pipeline, and a dataset of the caller's holding the part
    from torchvision.transforms import v2

    a.transform = v2.Compose([train_pipeline(8, normalize=True), v2.RandomErasing()])
    with pytest.raises(UsageError, match="two scales"):
        create_loader(torch.utils.data.ConcatDataset([b, a]), 4, num_workers=0, seed=0)
    with pytest.raises(UsageError, match="two scales"):
        create_loader(torch.utils.data.ConcatDataset([b, Wrapper(a)]), 4, num_workers=0, seed=0)
    # and a part switched to normalize=True between epochs: refused when the epoch starts
    c = open_dataset(tmp_path, transform=train_pipeline(8))
    loader = create_loader(torch.utils.data.ConcatDataset([b, c]), 4, num_workers=0, seed=0)
    assert next(iter(loader))[0].dtype == torch.uint8
    c.transform = train_pipeline(8, normalize=True)
    with pytest.raises(UsageError) as e:
        next(iter(loader))
    assert str(e.value) == "epoch 1: " + two_scales(f"part 1, {tmp_path}", f"part 0, {tmp_path}")


def two_scales(normalised: str, uint8: str) -> str:
    return (
        f"the datasets' pipelines give images on two scales, float32 normalised in the workers (normalize=True: "
        f"{normalised}) and uint8 ({uint8}), which one batch would hold side by side, the uint8 ones as 0-255 floats; "
        "make them alike: the default (uint8) in each, normalised by the loader, or normalize=True in each"
    )


class TwoViews(torch.utils.data.Dataset):
    """Two views of each sample, from two datasets of one folder, each its own tensor."""

    def __init__(self, a, b) -> None:
        self.a, self.b = a, b

    def __len__(self) -> int:
        return len(self.a)

    def __getitem__(self, i: int):
        return self.a[i][0], self.b[i][0], self.a[i][1]


class Wrapper(torch.utils.data.Dataset):
    """A dataset of the caller's around a datakit one (a relabelling wrapper)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int):
        return self.inner[i]


class Reads(Strength):
    """A transform that reads a shared value through one of its methods (a bound method given as the transform)."""

    def strength(self, img):
        return _marked(img, self.value.value)


_STRENGTH = None  # a module-level shared value, read by ReadsGlobal


class ReadsGlobal:
    """A transform whose __call__ reads a module-level mp.Value (the loop sets it before each epoch)."""

    def __call__(self, img):
        return _marked(img, _STRENGTH.value)


@pytest.mark.parametrize("how", ["set-later", "bound-method", "raw-value", "module-global"])
def test_a_shared_value_reached_otherwise_is_not_read_ahead_either(tmp_path: Path, how: str, caplog):
    # the attacks on the mend above: a transform holding an mp.Value set after the loader was made (read ahead from
    # its second epoch on); one reached through a bound method; an mp.RawValue (the workers restarted every epoch)
    import multiprocessing as mp

    from datakit import open_dataset

    _solid_folder(tmp_path)
    global _STRENGTH
    ctx = mp.get_context("fork")
    value = _STRENGTH = ctx.RawValue("i", 0) if how == "raw-value" else ctx.Value("i", 0)
    first = {"set-later": None, "bound-method": Reads(value).strength, "module-global": ReadsGlobal()}.get(
        how, Strength(value)
    )
    ds = open_dataset(tmp_path, transform=first)
    loader = create_loader(ds, 4, num_workers=2, seed=0, multiprocessing_context="fork")
    seen = []
    with caplog.at_level(logging.INFO, logger="datakit"):
        for e in range(4):
            if e == 1 and how == "set-later":
                ds.transform = Strength(value)
            value.value = 10 * e
            if e == 0 and how == "set-later":  # an epoch with the transform the loader was made with
                seen.append([0])
                next(iter(loader))  # its workers started, reading on
                continue
            seen.append(sorted({int(v) for x, _ in loader for v in x[:, 2, 0, 0]}))
    assert seen == [[0], [10], [20], [30]]
    assert type(loader.loader).__name__ == "_BalancedDataLoader"
    changed = [r for r in caplog.records if "transform changed" in r.getMessage()]
    assert len(changed) == (how == "set-later")  # the change itself; no restart every epoch (the raw value's)
    del loader
    gc.collect()


@pytest.mark.skipif(sys.version_info < (3, 11), reason="notes (add_note) came with Python 3.11")
@pytest.mark.parametrize("workers, method", [(0, None), (2, "fork"), (2, "spawn")])
def test_an_error_of_the_users_transform_names_the_sample_and_file(tmp_path: Path, workers: int, method):
    # the attack: a transform= of the user's raising ValueError reached the loop as a bare 'unexpected image', with
    # no sample index and no file (ds[i], 0 workers, and workers alike)
    from datakit import open_dataset
    from datakit.io import imwrite

    for i in range(8):
        (tmp_path / f"c{i % 2}").mkdir(exist_ok=True)
        imwrite(tmp_path / f"c{i % 2}" / f"图{i}.png", np.full((60 + i, 70, 3), 100, np.uint8))
    ds = open_dataset(tmp_path, transform=Refuses())
    note = f"(raised by the dataset's transform on sample 5: {tmp_path / 'c1' / '图3.png'})"
    with pytest.raises(ValueError) as e:
        ds[5]
    assert (type(e.value), str(e.value), e.value.__notes__) == (ValueError, "unexpected image", [note])
    loader = create_loader(ds, 4, num_workers=workers, seed=0, multiprocessing_context=method)
    with pytest.raises(ValueError) as e:
        batches(loader)
    assert (type(e.value), str(e.value), e.value.__notes__) == (ValueError, "unexpected image", [note])
    del loader, e  # its workers go now, not at some later test's garbage collection
    gc.collect()
    ds.transform = RaisesOne()  # one instance raised again, with an empty message: one note, the latest sample's
    for i in (0, 1):
        with pytest.raises(ValueError) as e:
            ds[i]
    assert (str(e.value), e.value.__notes__) == ("", [f"(raised by the dataset's transform on sample 1: "
                                                      f"{tmp_path / 'c0' / '图2.png'})"])  # fmt: skip
    if workers:
        with pytest.raises(ValueError) as e:
            batches(create_loader(ds, 4, num_workers=workers, seed=0, multiprocessing_context=method, train=False))
        assert (type(e.value), str(e.value)) == (ValueError, "")
        assert len(e.value.__notes__) == 1 and e.value.__notes__[0].startswith("(raised by the dataset's transform")
        del e
        gc.collect()
    ds.transform = None
    ds.target_transform = lambda t: 1 / 0
    with pytest.raises(ZeroDivisionError) as e:
        ds[0]
    assert e.value.__notes__ == [
        f"(raised by the dataset's target_transform on sample 0: {tmp_path / 'c0' / '图0.png'})"
    ]


def test_a_timeout_means_nothing_without_workers(monkeypatch):
    # the attack: timeout=60 with set_num_workers(0), or DATAKIT_NUM_WORKERS=0 (the debugging switch), gave torch's
    # "AssertionError: _SingleProcessDataLoaderIter requires timeout == 0"
    loader = create_loader(Indexed(8), 2, num_workers=2, seed=0, timeout=60)
    assert loader.loader.timeout == 60 and len(sum(batches(loader), [])) == 8
    loader.set_num_workers(0)
    assert loader.loader.timeout == 0 and sorted(sum(batches(loader), [])) == list(range(8))
    monkeypatch.setenv("DATAKIT_NUM_WORKERS", "0")
    alone = create_loader(Indexed(8), 2, num_workers=2, seed=0, timeout=60)
    assert alone.num_workers == 0 and sorted(sum(batches(alone), [])) == list(range(8))
    for bad in (-1, "x", float("nan"), True):  # checked though dropped: re-tuning may start workers later
        with pytest.raises(UsageError) as e:
            create_loader(Indexed(8), 2, num_workers=0, timeout=bad)
        assert (
            str(e.value) == f"timeout must be a number of seconds >= 0 (0: wait as long as a batch takes), got {bad!r}"
        )


def test_more_workers_than_cpus_are_warned_about_once():
    # the attack: torch's "This DataLoader will create N worker processes" came twice for one loader
    n = len(os.sched_getaffinity(0)) + 1
    with pytest.warns(UserWarning) as record:
        loader = create_loader(Indexed(8), 2, num_workers=n, seed=1)
        assert len(batches(loader)) == 4
    told = [str(w.message) for w in record if "worker processes in total" in str(w.message)]
    assert len(told) == 1 and told[0].startswith(f"This DataLoader will create {n} worker processes in total.")


def test_infinite_loader_resumes_with_exact_next_batch():
    ref = create_loader(Indexed(10), 3, num_workers=0, seed=1, infinite=True)
    expected = [next(ref)[0].tolist() for _ in range(9)]  # crosses an epoch boundary (3 batches/epoch + drop)
    run = create_loader(Indexed(10), 3, num_workers=0, seed=1, infinite=True)
    got = [next(run)[0].tolist() for _ in range(5)]
    state = run.state_dict()
    assert _at(state) == (1, 2)
    resumed = create_loader(Indexed(10), 3, num_workers=0, seed=1, infinite=True)
    resumed.load_state_dict(state)
    got += [next(resumed)[0].tolist() for _ in range(4)]
    assert got == expected
    assert isinstance(resumed, InfiniteLoader) and _at(resumed.state_dict()) == (2, 3) and len(resumed) == 3


def test_a_resume_with_another_batch_size_goes_on_at_the_same_sample():
    # The attack: the state was {epoch, step} and a resume skipped step x the new batch size: resumed with batch
    # size 8 instead of 4, 8 samples of the epoch were never served; with 2, 4 were served twice.
    whole = next(create_loader(Indexed(12), 12, num_workers=0, seed=1, infinite=True))[0].tolist()  # epoch 0
    run = create_loader(Indexed(12), 4, num_workers=0, seed=1, infinite=True)
    seen = [i for _ in range(2) for i in next(run)[0].tolist()]
    state = run.state_dict()
    assert state == {
        "epoch": 0,
        "step": 2,
        "sample": 8,
        "batch_size": 4,
        "samples": 12,
        "world": 1,
        "seed": 1,
        "shuffle": True,
        "order": 2,
    }
    for bs in (2, 8):
        resumed = create_loader(Indexed(12), bs, num_workers=0, seed=1, infinite=True, drop_last=False)
        resumed.load_state_dict(state)
        rest = next(resumed)[0].tolist()
        assert seen + rest[: 12 - len(seen)] == whole[: len(seen) + min(bs, 4)]
    other = create_loader(Indexed(13), 4, num_workers=0, seed=1, infinite=True)
    with pytest.raises(UsageError) as e:
        other.load_state_dict(state)
    assert str(e.value) == ("the state was saved mid-epoch for 12 samples, this loader has 13: that epoch's order is "
                            "another here, so resuming would serve some samples twice and skip others; load "
                            "{'epoch': 1, 'step': 0} to go on from the next epoch")  # fmt: skip


class Plain(Indexed):
    epoch_independent = False  # read one epoch at a time, as torch reads it


@pytest.mark.parametrize("persistent", [True, False])
def test_a_resume_with_workers_read_one_epoch_at_a_time_goes_on_where_it_stopped(persistent: bool):
    # the attack: a training loader resumed at sample 20 with workers that read one epoch at a time (persistent_
    # workers=False) served the epoch again from its first sample: torch's iterator asks its batch sampler for
    # an iterator twice, and the first, thrown away, had taken the resumed epoch's skip
    whole = next(create_loader(Plain(24), 24, num_workers=0, seed=1, infinite=True))[0].tolist()
    state = {"epoch": 0, "step": 5, "sample": 20, "batch_size": 4, "samples": 24, "world": 1}
    three = create_loader(Plain(24), 3, num_workers=2, seed=1, infinite=True, persistent_workers=persistent)
    three.load_state_dict(state)
    assert next(three)[0].tolist() == whole[20:23]


def test_a_dataset_of_the_callers_is_read_one_epoch_at_a_time():
    # the attack: an epoch kept in an mp.Value, set by the loop before each epoch (torch's way to reach persistent
    # workers): the batches read on into the next epoch carried the epoch before's value, 36 of 64 samples
    import multiprocessing as mp

    class Shared(Dataset):
        def __init__(self) -> None:
            self.epoch = mp.Value("i", 0)

        def __len__(self) -> int:
            return 32

        def __getitem__(self, i: int):
            return self.epoch.value, i

    ds = Shared()
    loader = create_loader(ds, 4, num_workers=2, seed=0)
    seen = []
    for e in range(3):
        ds.epoch.value = e
        seen.append(sorted({int(v) for b in loader for v in b[0]}))
    assert seen == [[0], [1], [2]]
    assert type(loader.loader).__name__ == "_BalancedDataLoader"
    from datakit.loader import _reads_on

    assert _reads_on(torch.utils.data.Subset(Indexed(4), [0, 1])) and not _reads_on(torch.utils.data.Subset(ds, [0]))
    assert not _reads_on(torch.utils.data.ConcatDataset([Indexed(4), ds]))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_resume_with_another_batch_size_drops_a_batch_of_one_and_nothing_else(workers: int):
    # The attack: 24 samples saved at sample 20 in batches of 4, resumed in batches of 3: the 4 left came as 3 + 1,
    # a training batch of one (BatchNorm's "Expected more than 1 value per channel"); in batches of 23 (24 % 23 == 1,
    # so drop_last for the whole loader) the 4 left were dropped without a word.
    ref = create_loader(Indexed(24), 24, num_workers=0, seed=1, infinite=True)
    whole, second = next(ref)[0].tolist(), next(ref)[0].tolist()  # epochs 0 and 1
    run = create_loader(Indexed(24), 4, num_workers=0, seed=1, infinite=True)
    for _ in range(5):
        next(run)
    state = run.state_dict()
    assert state == {
        "epoch": 0,
        "step": 5,
        "sample": 20,
        "batch_size": 4,
        "samples": 24,
        "world": 1,
        "seed": 1,
        "shuffle": True,
        "order": 2,
    }
    three = create_loader(Indexed(24), 3, num_workers=workers, seed=1, infinite=True)
    three.load_state_dict(state)
    assert [next(three)[0].tolist() for _ in range(2)] == [whole[20:23], second[:3]]  # whole[23:24] dropped
    many = create_loader(Indexed(24), 23, num_workers=workers, seed=1, infinite=True)
    many.load_state_dict(state)
    assert next(many)[0].tolist() == whole[20:24]  # the 4 left: served, not dropped
    assert many.state_dict() == {
        "epoch": 0,
        "step": 2,
        "sample": 24,
        "batch_size": 23,
        "samples": 24,
        "world": 1,
        "seed": 1,
        "shuffle": True,
        "order": 2,
    }
    alone = create_loader(Indexed(24), 23, num_workers=workers, seed=1, infinite=True)
    alone.load_state_dict({"epoch": 0, "step": 2})  # the steps alone: the next epoch, not sample 23 again
    assert alone.state_dict()["epoch"] == 1 and next(alone)[0].tolist() == second[:23]
    assert next(many)[0].tolist() == second[:23]  # a whole epoch of 24 in 23s: its last batch of one dropped
    assert next(many)[0].tolist()[:23] != second[:23]


@pytest.mark.parametrize("how", ["attribute", "set_epoch"])
def test_an_infinite_loader_told_an_epoch_serves_it_from_its_start(how: str):
    # The attack: loader.epoch = 3 mid-epoch was ignored for the batches (epoch 0 went on, then epoch 4) while
    # state_dict() said epoch 3, so a resume from that state diverged from the run; sampler.set_epoch(3) was ignored.
    ref = create_loader(Indexed(10), 3, num_workers=0, seed=1, infinite=True)
    ref.load_state_dict({"epoch": 3, "step": 0})
    expected = [next(ref)[0].tolist() for _ in range(4)]
    run = create_loader(Indexed(10), 3, num_workers=0, seed=1, infinite=True)
    next(run)
    if how == "attribute":
        run.epoch = 3
    else:
        run.sampler.set_epoch(3)
    assert [next(run)[0].tolist() for _ in range(4)] == expected
    assert _at(run.state_dict()) == (4, 1)
    with pytest.raises(UsageError, match=r"^epoch must be a whole number >= 0, got -1$"):
        run.epoch = -1


def _draws(loader, epochs=1):
    """{(epoch, index): (random, NumPy, torch) draws made while reading that sample}"""
    out = {}
    for epoch in range(epochs):
        for idx, r, n, t in loader:
            for k, i in enumerate(idx.tolist()):
                out[epoch, i] = (float(r[k]), float(n[k]), float(t[k]))
    return out


def test_a_seeded_loader_augments_each_sample_the_same_whatever_the_workers():
    ref = _draws(create_loader(Indexed(12), 4, num_workers=0, seed=5), epochs=2)
    assert len(ref) == 24 and len(set(ref.values())) == 24  # every sample and epoch draws differently
    assert ref[0, 3] != ref[1, 3]
    for kw in ({"num_workers": 1}, {"num_workers": 2}, {"num_workers": 2, "multiprocessing_context": "spawn"}):
        assert _draws(create_loader(Indexed(12), 4, seed=5, **kw), epochs=2) == ref, kw
    assert _draws(create_loader(Indexed(12), 4, num_workers=0, seed=6)) != {k: v for k, v in ref.items() if k[0] == 0}
    # torch's Subset reads batches through __getitems__: the seeding must not be bypassed
    sub = torch.utils.data.Subset(Indexed(12), list(range(12)))
    assert _draws(create_loader(sub, 4, num_workers=0, seed=5), epochs=2) == ref
    assert create_loader(sub, 4, num_workers=0, seed=5).dataset is sub


def mixup(batch):
    """A collate function that draws, as MixUp and CutMix do."""
    idx = torch.tensor([int(b[0]) for b in batch])
    return idx, float(np.random.beta(1.0, 1.0)), float(torch.rand(1)), random.random()


def test_a_seeded_loader_seeds_the_collate_functions_draws_too():
    def run(**kw):
        return [(b[0].tolist(), b[1:]) for b in create_loader(Indexed(12), 4, seed=3, collate_fn=mixup, **kw)]

    ref = run(num_workers=0)
    assert len({d for _, d in ref}) == 3  # different draws for every batch
    for kw in ({"num_workers": 1}, {"num_workers": 2}, {"num_workers": 2, "multiprocessing_context": "spawn"}):
        assert run(**kw) == ref, kw


def test_loading_in_the_main_process_leaves_the_loops_random_state_alone():
    def loop_draws(load: bool):
        seed_everything(11)
        if load:
            for _ in create_loader(Indexed(8), 4, num_workers=0, seed=1):
                pass
            for _ in create_loader(Indexed(8), 4, num_workers=0, seed=1, collate_fn=mixup):
                pass
        return random.random(), float(np.random.rand()), float(torch.rand(1))

    assert loop_draws(True) == loop_draws(False)


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_gives_the_same_augmentations_as_an_uninterrupted_run(workers: int):
    def make():
        return create_loader(Indexed(10), 3, num_workers=workers, seed=1, infinite=True)

    def draws(b):
        return [b[0].tolist(), b[1].tolist(), b[2].tolist(), b[3].tolist()]

    ref = make()
    expected = [draws(next(ref)) for _ in range(8)]
    run = make()
    got = [draws(next(run)) for _ in range(4)]
    resumed = make()
    resumed.load_state_dict(run.state_dict())
    got += [draws(next(resumed)) for _ in range(4)]
    assert got == expected


class Canary:
    """Writes its process id to ``path`` when freed in a process other than the one that made it;
    it refers to itself, so only the garbage collector frees it."""

    def __init__(self, path: Path) -> None:
        self.path, self.pid, self.me = path, os.getpid(), self

    def __del__(self) -> None:
        if os.getpid() != self.pid:
            with open(self.path, "a") as f:
                f.write(f"{os.getpid()}\n")


class CollectsInWorkers(Dataset):
    epoch_independent = True

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        if torch.utils.data.get_worker_info() is not None:
            gc.collect()  # what any allocation in a worker may set off
        return i


def test_forked_workers_never_free_the_garbage_they_inherit(tmp_path: Path):
    # freeing a CUDA tensor caught in a cycle there kills the worker ("CUDA error: initialization error")
    freed = tmp_path / "freed-in-a-worker"
    frozen = gc.get_freeze_count()
    gc.disable()  # keep this process from collecting the canary before the workers fork
    try:
        canary = weakref.ref(Canary(freed))
        loader = create_loader(CollectsInWorkers(), 2, num_workers=2, multiprocessing_context="fork")
        assert sorted(sum((b.tolist() for b in loader), [])) == [0, 1, 2, 3]
    finally:
        gc.enable()
    gc.collect()
    assert canary() is None and not freed.exists()  # freed here, where it was made, and nowhere else
    assert gc.get_freeze_count() == frozen


def _receivers() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "datakit-receive"]


def _receivers_end(timeout: float = 20.0) -> list[str]:
    """The receiving threads left once those that are ending (letting go of a loader's workers,
    this test's or an earlier test's) have ended."""
    gc.collect()  # loaders caught in reference cycles (a traceback held by pytest.raises, say)
    deadline = time.monotonic() + timeout
    while _receivers() and time.monotonic() < deadline:
        time.sleep(0.02)
    return _receivers()


class Marking(Dataset):
    """Leaves a file named epoch-index for each sample read (a seeded loader's indices carry the epoch)."""

    epoch_independent = True

    def __init__(self, root: Path, n: int = 40) -> None:
        self.root, self.n = root, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        (self.root / f"{i.epoch}-{int(i)}").touch()
        return int(i)


def _read(root: Path, epoch: int, settle: float = 0.5, timeout: float = 20.0) -> list[int]:
    """The samples of ``epoch`` read so far, once no more have been read for ``settle`` seconds."""
    seen, since, deadline = None, time.monotonic(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = sorted(int(p.name.split("-")[1]) for p in root.glob(f"{epoch}-*"))
        if now != seen:
            seen, since = now, time.monotonic()
        elif time.monotonic() - since > settle:
            break
        time.sleep(0.05)
    return seen


def test_workers_read_on_into_the_next_epoch_while_the_loop_finishes_this_one(tmp_path: Path):
    assert _receivers_end() == []
    loader = create_loader(Marking(tmp_path), 4, num_workers=2, seed=0, shuffle=False)
    assert [b.tolist() for b in loader] == [list(range(k, k + 4)) for k in range(0, 40, 4)]
    # the next epoch's first batches are read with no one asking: 2 workers x 4 batches in
    # flight, plus the one the receiving thread holds for the loop
    assert _read(tmp_path, 1) == list(range(36)) and _receivers() == ["datakit-receive"]
    assert _read(tmp_path, 2) == []
    assert [b.tolist() for b in loader] == [list(range(k, k + 4)) for k in range(0, 40, 4)]
    assert _read(tmp_path, 2) == list(range(36))
    # closing stops the reading ahead and the workers; the next epoch starts them again, whole
    pids = [w.pid for w in loader.loader._iterator._workers]
    loader.close()
    assert _receivers_end() == [] and loader.loader._iterator is None
    assert not any(os.path.exists(f"/proc/{pid}") and "zombie" not in Path(f"/proc/{pid}/status").read_text()
                   for pid in pids)  # fmt: skip
    assert sum((b.tolist() for b in loader), []) == list(range(40))
    # leaving an epoch early drops what was read for what would have followed it; a loader
    # that is dropped lets its thread and workers go
    it = iter(loader)
    assert next(it).tolist() == [0, 1, 2, 3]
    it.close()
    assert _receivers_end() == []
    assert [b.tolist() for b in loader][0] == [0, 1, 2, 3] and _receivers() == ["datakit-receive"]
    del loader, it
    assert _receivers_end() == []


@pytest.mark.parametrize("workers", [0, 2])
def test_a_resume_or_a_new_epoch_number_restarts_the_stream_where_asked(workers: int):
    def run(loader, skip_to: tuple[int, int] | None = None, n: int = 7):
        inf = InfiniteLoader(loader)
        if skip_to is not None:
            inf.load_state_dict({"epoch": skip_to[0], "step": skip_to[1]})
        return [next(inf)[0].tolist() for _ in range(n)], inf.state_dict()

    # 4 batches an epoch (the last holding 2 samples): 7 batches cross into the next epoch
    straight, state = run(create_loader(Indexed(14), 4, num_workers=workers, seed=3, drop_last=False))
    assert _at(state) == (1, 3) and [len(b) for b in straight] == [4, 4, 4, 2, 4, 4, 4]
    resumed, _ = run(create_loader(Indexed(14), 4, num_workers=workers, seed=3, drop_last=False), (1, 1), 2)
    assert resumed == straight[4 + 1 : 4 + 3]
    # a Loader told to start another epoch than the one it read on into
    loader = create_loader(Indexed(14), 4, num_workers=workers, seed=3, drop_last=False)
    first = batches(loader)
    loader.epoch = 0
    assert batches(loader) == first == straight[:4]
    second = batches(loader)
    assert second[:3] == straight[4:] and sorted(sum(second, [])) == list(range(14))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("persistent", [True, False])
def test_a_newer_iteration_supersedes_an_unfinished_one_which_then_refuses(workers: int, persistent: bool):
    kw = dict(num_workers=workers, seed=0, shuffle=False, **({"persistent_workers": persistent} if workers else {}))
    loader = create_loader(Indexed(40), 4, **kw)
    whole = [list(range(k, k + 4)) for k in range(0, 40, 4)]
    assert batches(loader) == whole  # epoch 0; with workers, they read on into epoch 1
    held = iter(loader)
    assert [next(held)[0].tolist() for _ in range(2)] == whole[:2]
    loader.epoch = 1  # epoch 1 again, from its start, while `held` is half-way through it
    assert batches(loader) == whole
    msg = ("the iterator of epoch 1 was superseded by a newer iter(loader): a loader serves one epoch at a time; "
           "finish or close the first, or make a second loader")  # fmt: skip
    with pytest.raises(UsageError) as err:
        next(held)
    assert str(err.value) == msg
    # two iterators at once (zip(loader, loader)): the first refuses at once, from the second iter(), rather than
    # share batches (it went on serving its epoch until the second's first next())
    a, b = iter(loader), iter(loader)
    with pytest.raises(UsageError, match="the iterator of epoch 2 was superseded"):
        next(a)
    assert [x[0].tolist() for x in b] == whole and batches(loader) == whole
    # an iteration that handed out its last batch but was never told the epoch ended (`a`, refused before its first
    # batch, served none: epochs 2 (b), 3 (batches), 4 (zip), 5)
    last = [x[0].tolist() for _, x in zip(range(10), loader)]
    assert last == whole and batches(loader) == whole and [h.epoch for h in loader.history][-4:] == [2, 3, 4, 5]
    loader.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_an_iter_never_asked_for_a_batch_is_no_pass_and_set_epoch_before_the_first_batch_is_heard(workers):
    # The attack: Lightning calls iter(loader) once to check that it iterates and drops it, then each epoch calls
    # iter(loader), then loader.sampler.set_epoch(e), then takes the batches. The dropped iter() counted as epoch 0's
    # pass and set_epoch(0) came too late: epoch 0 was served epoch 1's order and crops, and epoch 1 repeated them.
    loader = create_loader(Indexed(24), 4, num_workers=workers, seed=0)
    iter(loader)  # a framework's check: no batch asked for
    served = []
    for epoch in range(3):
        it = iter(loader)
        loader.sampler.set_epoch(epoch)
        served.append([i for b in it for i in b[0].tolist()])
    assert served == [loader.sampler.indices(e) for e in range(3)]
    assert len({tuple(s) for s in served}) == 3 and [h.epoch for h in loader.history] == [0, 1, 2]
    plain = create_loader(Indexed(24), 4, num_workers=workers, seed=0)
    iter(plain)
    assert [[i for b in plain for i in b[0].tolist()] for _ in range(2)] == served[:2]  # no set_epoch: the same


@pytest.mark.parametrize("workers", [0, 2])
def test_an_epoch_of_len_batches_taken_ends_at_the_next_iter(tmp_path: Path, workers: int):
    # The attack: a loop that takes len(loader) batches and asks for none past them (Lightning's fetcher,
    # zip(range(n), loader)): the epoch never ended, so its bad samples were never merged into bad_samples.json,
    # loader.history stayed empty and autotune never re-tuned. (Ended at its last batch, before handing it out, the
    # review round found workers kept alive, a re-tune's empty epoch and an error in the merge costing that batch.)
    from datakit.datasets import open_dataset, read_bad_samples

    report = tmp_path / "bad_samples.json"
    ds = open_dataset(bad_folder(tmp_path), on_error="skip", max_bad_fraction=0.1, bad_samples=report)
    loader = create_loader(ds, 4, num_workers=workers, seed=0, train=False)
    it = iter(loader)
    for epoch in range(2):
        got = [next(it) for _ in range(len(loader))]
        assert len(loader.history) == epoch  # the pass has not ended: no batch was asked past its last
        assert [len(t) for _, t in got] == [4] * 10
        it = iter(loader)  # the next epoch's: the last one ends here
        assert [h.epoch for h in loader.history] == list(range(epoch + 1))
        assert [h.batches for h in loader.history] == [10] * (epoch + 1)
        assert [e["index"] for e in read_bad_samples(report)["bad"]] == [3, 17, 30]
    assert [len(t) for _, t in it] == [4] * 10  # asked past the last batch, as a for loop does: it ends there
    assert [h.epoch for h in loader.history] == [0, 1, 2]


def test_bad_samples_that_cannot_be_recorded_are_still_replaced_and_training_goes_on(tmp_path: Path, caplog):
    # the attack: bad_samples= on a disk that fills (or turns read-only) during training: the first bad image's
    # record failed with a bare OSError and the epoch ended; a report that could not be merged at an epoch's end
    # (a size limit, a full disk) ended the loop with a UsageError after the last batch, exit 2 for a full disk
    from datakit.datasets import open_dataset, read_bad_samples

    report = tmp_path / "bad_samples.json"
    ds = open_dataset(bad_folder(tmp_path), on_error="skip", max_bad_fraction=0.1, bad_samples=report)
    parts = tmp_path / "bad_samples.json.parts"
    parts.write_text("in the way")  # its folder cannot be made: as a full or read-only disk refuses it
    loader = create_loader(ds, 4, num_workers=0, seed=0, train=False)
    with caplog.at_level(logging.WARNING, logger="datakit"):
        assert [len(t) for _, t in loader] == [4] * 10
    said = [r.getMessage() for r in caplog.records if "cannot be recorded" in r.getMessage()]
    assert said == [f"bad samples cannot be recorded in {parts} (File exists): they are still replaced, but {report} "
                    "will not list them; free space there"]  # fmt: skip
    assert [e["index"] for e in read_bad_samples(report)["bad"]] == [3, 17, 30]  # (this process knew them)
    caplog.clear()
    report.unlink()
    report.mkdir()  # the report cannot be written now
    with caplog.at_level(logging.WARNING, logger="datakit"):
        assert [len(t) for _, t in loader] == [4] * 10
    assert [r.getMessage() for r in caplog.records] == [
        f"epoch 1: the bad samples were not merged into their report: {report}: not a datakit bad-samples file "
        f"([Errno 21] Is a directory: {str(report)!r})"
    ]
    assert [h.epoch for h in loader.history] == [0, 1]


def test_a_report_shared_by_two_datasets_or_read_again_keeps_each_ones_and_its_limit(tmp_path: Path, monkeypatch):
    # the bad-sample round's attacks: a train and a val set given one bad_samples= merged and counted each other's
    # records (val stopped at "4 of 10 unreadable" with 1 bad, its report listing train's indices); a report read
    # again by a run with a lower max_bad_fraction never applied it (known samples are never read); a report's
    # relative names recorded from another folder matched files of the same spelling here
    from datakit.datasets import open_dataset, read_bad_samples
    from datakit.errors import SampleError
    from datakit.sources import same_sample_name

    report = tmp_path / "bad.json"
    train = open_dataset(bad_folder(tmp_path / "train"), on_error="skip", max_bad_fraction=0.1, bad_samples=report)
    assert [len(t) for _, t in create_loader(train, 4, num_workers=2, seed=0, train=False)] == [4] * 10
    val_root = bad_folder(tmp_path / "val", n=20)
    for i in (3, 17):  # val's only bad sample: 30 of 40 is past its 20
        shutil.copy(val_root / "类" / "000_图.png", val_root / "类" / f"{i:03d}_图{'.jpg' if i == 17 else '.png'}")
    (val_root / "类" / "030_图.png").unlink()
    (val_root / "类" / "005_图.png").write_bytes(b"")
    val = open_dataset(val_root, on_error="skip", max_bad_fraction=0.1, bad_samples=report)
    assert [len(t) for _, t in create_loader(val, 4, num_workers=2, seed=0, train=False)] == [4] * 5
    assert [e["index"] for e in read_bad_samples(report)["bad"]] == [5] and read_bad_samples(report)["samples"] == 20
    again = tmp_path / "again.json"
    first = open_dataset(bad_folder(tmp_path / "third"), on_error="skip", max_bad_fraction=0.1, bad_samples=again)
    assert sum(len(t) for _, t in create_loader(first, 4, num_workers=0, seed=0, train=False)) == 40
    with pytest.raises(SampleError) as e:
        open_dataset(tmp_path / "third" / "坏 数据", on_error="skip", max_bad_fraction=0.05, bad_samples=again)
    assert str(e.value) == (f"3 of 40 samples are listed as unreadable in {again} (7.5%), more than "
                            "max_bad_fraction=0.05: the source looks broken, not a few bad files; repair them (and "
                            "delete the file), or raise max_bad_fraction")  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert same_sample_name("data/dog/05.jpg", "data/dog/05.jpg", str(tmp_path)) is True
    (tmp_path / "elsewhere").mkdir()
    assert same_sample_name("data/dog/05.jpg", "data/dog/05.jpg", str(tmp_path / "elsewhere")) is False
    assert same_sample_name("data/dog/05.jpg", "../data/dog/05.jpg", str(tmp_path / "elsewhere")) is True
    # the recording folder no longer there (the project moved, mounted elsewhere): the names as they are spelled
    assert same_sample_name("data/dog/05.jpg", "data/dog/05.jpg", str(tmp_path / "moved away")) is True
    # and a refusal of a report's entry names the folder its name is relative to, where that is not this one
    from datakit.sources import recorded_name

    entry = {"index": 5, "name": "data/dog/05.jpg", "cwd": str(tmp_path / "elsewhere")}
    assert recorded_name(entry) == f"'data/dog/05.jpg' (relative to {tmp_path / 'elsewhere'})"
    assert recorded_name({**entry, "cwd": str(tmp_path)}) == "'data/dog/05.jpg'"
    assert recorded_name({"index": 5, "name": "/abs/05.jpg", "cwd": "/x"}) == "'/abs/05.jpg'"


_FILE_LIMIT = """
import torch
from datakit.loader import create_loader

class Images(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.full((3, 64, 64), i, dtype=torch.uint8), i

loader = create_loader(Images(), 16, num_workers=2, seed=0, train=False)
print(loader.num_workers, [int(x[:, 0, 0, 0].sum()) for x, _ in loader], flush=True)
"""


def test_a_file_size_limit_under_a_batch_loads_in_the_main_process_and_says_why(tmp_path: Path):
    # the attack: `ulimit -f 300` under a batch's size: every batch of every epoch failed in torch ("unable to resize
    # file </torch_...> to the right size: File too large"), a worker's batch being a file in /dev/shm
    import resource

    script = tmp_path / "train.py"
    script.write_text(_FILE_LIMIT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (65536, hard)))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "0 [120, 376, 632, 888]\n"
    assert proc.stderr == ("this process may write files of 65536 bytes at most (ulimit -f), and a worker's batch of "
                           "0.2 MiB travels through a file in /dev/shm: loading in the main process instead; raise the "
                           "limit (ulimit -f unlimited)\n")  # fmt: skip


_FORKED = """
import os, sys
import torch
from datakit.loader import create_loader

class Indexed(torch.utils.data.Dataset):
    epoch_independent = True

    def __len__(self):
        return 24

    def __getitem__(self, i):
        return i

loader = create_loader(Indexed(), 4, num_workers=2, seed=0, persistent_workers=True)
first = [int(i) for b in loader for i in b]
pid = os.fork()
if pid == 0:  # the loader iterated in a child forked after the parent used it: epoch 1, in workers of its own
    print([int(i) for b in loader for i in b], flush=True)
    sys.exit(0)  # (its exit handlers run: multiprocessing's terminated the parent's workers)
os.waitpid(pid, 0)
print([int(i) for b in loader for i in b], flush=True)
print(first, flush=True)
"""


def test_a_loader_iterated_in_a_process_forked_after_it_was_used_starts_workers_of_its_own(tmp_path: Path):
    # the attack: a loader iterated, then os.fork(), then iterated in the child: the child waited forever on the
    # thread that received the parent's batches, which did not survive the fork; and (the review round) a child
    # that then exits as programs do terminated the parent's persistent workers, killing its next epoch
    script = tmp_path / "train.py"
    script.write_text(_FORKED)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    child, parent, first = (json.loads(line) for line in proc.stdout.splitlines())
    assert child == parent and sorted(child) == list(range(24)) and child != first


_SPAWNED = """#!/usr/bin/env python
import torch
from datakit.loader import create_loader


class Keep(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return i


if __name__ == "__main__":
    loader = create_loader(Keep(), 4, num_workers=1, multiprocessing_context="spawn", seed=0, train=False)
    print([b.tolist() for b in loader], flush=True)
"""


def test_spawned_workers_of_a_script_without_py_run_and_code_from_stdin_is_refused(tmp_path: Path):
    # the attacks: a script in bin/ named without .py was refused as "no script file they could import", where
    # spawn runs it as well; code read from stdin (python - < train.py) under spawn had every worker fail to open
    # '<stdin>', each with a traceback, then "worker exited unexpectedly"
    script = tmp_path / "train"
    script.write_text(_SPAWNED)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120,
                          cwd=tmp_path)  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, "[[0, 1, 2, 3], [4, 5, 6, 7]]\n"), proc.stderr[-2000:]
    plain = _SPAWNED.replace("class Keep", "from torch.utils.data import TensorDataset\n\n\nclass Keep")
    plain = plain.replace("create_loader(Keep(), ", "create_loader(list(range(8)), ")
    proc = subprocess.run([sys.executable, "-"], input=plain, capture_output=True, text=True, env=env, timeout=120,
                          cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines()[-1] == (
        "datakit.errors.UsageError: spawn-started workers run the main program's file again, and this program has "
        "none (its __file__ is '<stdin>': code read from stdin?); save the code as a .py file and run that, or use "
        "num_workers=0"
    )


_LAST_EPOCH = """
import os, sys
from datakit.datasets import open_dataset
from datakit.loader import create_loader



def main():  # (the loader dropped before the exit, as the README's main() drops it)
    ds = open_dataset(sys.argv[1], on_error="skip", max_bad_fraction=0.1, bad_samples=sys.argv[2])
    loader = create_loader(ds, 4, num_workers=int(sys.argv[3]), seed=0, train=False)
    it = iter(loader)
    if sys.argv[4:] == ["left"]:  # the only pass left after two batches (a break, an infinite loader's last step)
        next(it), next(it)
        print(len(loader.history), flush=True)
        return
    batches = [next(it) for _ in range(len(loader))]  # the run's last (here only) epoch: none asked past its last
    print(len(loader.history), flush=True)
    if sys.argv[4:] == ["removed"]:  # the report's folder removed before the program ends (a temporary one)
        import shutil

        shutil.rmtree(os.path.dirname(sys.argv[2]))


main()
import gc

gc.collect()
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_the_last_epoch_of_len_batches_taken_has_its_bad_samples_merged_at_exit(tmp_path: Path, workers: int):
    # The attack: under a loop that takes len(loader) batches and never asks past them (Lightning's), the run's last
    # epoch ended only at a further iter(), which never came: its bad samples were never merged into the report.
    from datakit.datasets import read_bad_samples

    script, report = tmp_path / "train.py", tmp_path / "bad_samples.json"
    script.write_text(_LAST_EPOCH)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, str(script), str(bad_folder(tmp_path)), str(report), str(workers)],
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout == "0\n", proc.stderr[-2000:]  # not ended before the exit
    assert [e["index"] for e in read_bad_samples(report)["bad"]] == [3, 17, 30]
    # (the review round's) a report whose folder the program removed before it ended is not made again at exit
    report = tmp_path / "run" / "bad_samples.json"
    report.parent.mkdir()
    proc = subprocess.run([sys.executable, str(script), str(bad_folder(tmp_path / "again")), str(report), str(workers),
                           "removed"], capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, "0\n") and not report.parent.exists()
    assert proc.stderr.count("bad sample ") == 3 and "exit" not in proc.stderr  # (its 3 warnings, and nothing else)
    # (the bad-sample round's) a pass left before its last batch has what it found merged too
    report = tmp_path / "left" / "bad_samples.json"
    proc = subprocess.run([sys.executable, str(script), str(bad_folder(tmp_path / "third")), str(report),
                           str(workers), "left"], capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, "0\n"), proc.stderr[-2000:]
    assert 3 in [e["index"] for e in read_bad_samples(report)["bad"]]  # (workers may have read on past the two)


def test_close_ends_a_pass_that_handed_out_its_last_batch(tmp_path: Path):
    from datakit.datasets import open_dataset, read_bad_samples

    report = tmp_path / "bad_samples.json"
    ds = open_dataset(bad_folder(tmp_path), on_error="skip", max_bad_fraction=0.1, bad_samples=report)
    loader = create_loader(ds, 4, num_workers=2, seed=0, train=False)
    it = iter(loader)
    assert [len(next(it)[1]) for _ in range(len(loader))] == [4] * 10
    assert loader.history == [] and read_bad_samples(report)["bad"] == []
    loader.close()
    assert [(h.epoch, h.batches) for h in loader.history] == [(0, 10)]
    assert [e["index"] for e in read_bad_samples(report)["bad"]] == [3, 17, 30]
    assert [len(t) for _, t in loader] == [4] * 10  # the next epoch, as after any close()
    assert [(h.epoch, h.batches) for h in loader.history] == [(0, 10), (1, 10)]
    # the merge a dropped loader leaves to its finaliser runs only in the process that ran the pass: a worker forked
    # meanwhile holds a copy of it (the review round's: plain torch workers merged the report from their copies)
    from datakit.loader import _merge_unended

    report.unlink()
    _merge_unended(ds, os.getpid() + 1)
    assert not report.exists()
    _merge_unended(ds, os.getpid())
    assert [e["index"] for e in read_bad_samples(report)["bad"]] == [3, 17, 30]


def test_a_finite_device_loader_has_no_state_dict_an_infinite_one_has(class_folder: Path):
    # The attack: Lightning saves the state of a loader whose class has state_dict (a runtime Protocol's isinstance):
    # create_loader(..., device="cpu"), the README's, had one that raised, and the first checkpoint ended the run.
    from typing import Protocol, runtime_checkable

    from datakit.datasets import open_dataset
    from datakit.transforms import train_pipeline

    @runtime_checkable
    class Stateful(Protocol):
        def state_dict(self) -> dict: ...

        def load_state_dict(self, state: dict) -> None: ...

    ds = open_dataset(class_folder, transform=train_pipeline(32))
    finite, infinite = create_loader(ds, 4, device="cpu"), create_loader(ds, 4, device="cpu", infinite=True)
    assert not hasattr(finite, "state_dict") and not isinstance(finite, Stateful)
    assert hasattr(infinite, "state_dict") and isinstance(infinite, Stateful)
    with pytest.raises(AttributeError) as e:
        finite.state_dict()
    assert str(e.value) == ("state_dict() needs create_loader(..., infinite=True): a finite loader's epoch is chosen "
                            "with loader.epoch = e")  # fmt: skip
    next(infinite)
    assert (infinite.state_dict()["epoch"], infinite.state_dict()["step"]) == (0, 1)


def test_a_loader_refuses_pickling_with_what_to_do():
    # The attack: a LightningDataModule that made its loader in __init__, under ddp_spawn (the module is pickled to
    # the ranks): "Can't pickle local object 'create_loader.<locals>.build'", naming neither the loader nor the way out
    import copy
    import pickle

    for kw, name in (({}, "Loader"), ({"device": "cpu"}, "DeviceLoader"), ({"infinite": True}, "InfiniteLoader"),
                     ({"infinite": True, "device": "cpu"}, "DeviceLoader")):  # fmt: skip
        loader = create_loader(Indexed(8), 4, num_workers=0, seed=0, **kw)
        for copies in (pickle.dumps, copy.deepcopy):
            with pytest.raises(TypeError) as e:
                copies(loader)
            assert str(e.value) == (
                f"cannot pickle or copy a datakit {name} (it holds its workers and threads): make the loader in the "
                "process that iterates it (a LightningDataModule's train_dataloader() or setup(), not its __init__, under "
                "ddp_spawn); its dataset pickles"
            )
        assert len(pickle.loads(pickle.dumps(loader.dataset))) == 8


class WhichWorker(Dataset):
    """Returns its index and the id of the worker that loaded it."""

    epoch_independent = True

    def __len__(self) -> int:
        return 200

    def __getitem__(self, i):
        return int(i), torch.utils.data.get_worker_info().id


def _workers_of(loader, k: int) -> list[list[int]]:
    """[worker, samples] of the first ``k`` batches (a batch is made by one worker)."""
    out = []
    for _, (idx, worker) in zip(range(k), loader):
        assert set(worker.tolist()) == {worker[0].item()}
        out.append([worker[0].item(), len(idx)])
    return out


def test_batches_go_to_the_worker_with_the_fewest_samples_outstanding_not_in_turn():
    # 200 samples in batches of 64: 64, 64, 64, 8 each epoch. torch hands batches to its workers
    # in turn, so the short one lands on the same worker every epoch
    torch_dl = torch.utils.data.DataLoader(WhichWorker(), 64, num_workers=2, prefetch_factor=4,
                                           persistent_workers=True)  # fmt: skip
    assert _workers_of(torch_dl, 4) + _workers_of(torch_dl, 4) == [[0, 64], [1, 64], [0, 64], [1, 8]] * 2
    # datakit's workers read on across the epoch boundary: 8 batches handed out at once (2 workers
    # x prefetch_factor 4), each to the worker with the fewest samples not yet received, 200 each
    # where in turn would give 256 and 144
    loader = create_loader(WhichWorker(), 64, num_workers=2, seed=0, shuffle=False)
    got = _workers_of(InfiniteLoader(loader), 8)
    assert got == [[0, 64], [1, 64], [0, 64], [1, 8], [1, 64], [0, 64], [1, 64], [0, 8]]
    # the batches themselves, and their order, are what they were
    loader.epoch = 0
    assert [b[0].tolist() for b in loader] == [list(range(k, min(k + 64, 200))) for k in range(0, 200, 64)]
    loader.close()


class SlowFifth(Dataset):
    """Returns its index and the id of the worker that loaded it; sample 5 is slow."""

    epoch_independent = True

    def __len__(self) -> int:
        return 80

    def __getitem__(self, i):
        if int(i) == 5:
            time.sleep(0.3)
        return int(i), torch.utils.data.get_worker_info().id


@pytest.mark.parametrize("how", ["own sampler", "no seed"])
def test_without_per_sample_seeds_batches_are_handed_out_in_turn_so_runs_repeat(how: str):
    # a worker's draws then go on from its own seed: which worker makes a batch decides its
    # augmentations, and only handing out in turn makes that independent of timing
    kw = {"sampler": torch.utils.data.SequentialSampler(range(80)), "seed": 0} if how == "own sampler" else {}
    loader = create_loader(SlowFifth(), 4, num_workers=2, shuffle=False, **kw)
    for _ in range(2):
        assert [b[1][0].item() for b in loader] == [0, 1] * 10
    loader.close()


def test_a_training_loader_out_of_order_keeps_each_epoch_whole():
    # in_order=False: batches come as they are made, so reading on into the next epoch would mix them
    # (sample 5 is slow: the batches after it come first)
    loader = create_loader(SlowFifth(), 4, num_workers=2, seed=0, shuffle=False, in_order=False)
    for _ in range(3):
        got = sum(batches(loader), [])
        assert sorted(got) == list(range(80)) and got != list(range(80))
    loader.close()


@pytest.mark.parametrize(
    ("kw", "msg"),
    [({"batch_size": None}, "batch_size must be an int of at least 1, got None"),
     ({"batch_size": 0}, "batch_size must be an int of at least 1, got 0"),
     ({"batch_size": 4, "batch_sampler": [[0, 1]]},
      "create_loader makes the batches itself (order, sharding, resuming): give sampler= and batch_size instead of "
      "batch_sampler=")],
)  # fmt: skip
def test_bad_batch_arguments_are_refused_in_one_line(kw: dict, msg: str):
    with pytest.raises(ValueError) as err:
        create_loader(Indexed(8), num_workers=0, **kw)
    assert str(err.value) == msg


class SlowDraws(Dataset):
    """Its index and a draw made in the worker, a little slowly."""

    epoch_independent = True

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i):
        time.sleep(0.02)
        return int(i), float(torch.rand(()))


@pytest.mark.parametrize("device", [None, "cpu"])
def test_an_infinite_loader_goes_on_at_the_batch_a_killed_worker_took_down(device: str | None):
    import signal

    ref = create_loader(SlowDraws(), 4, num_workers=0, seed=0, infinite=True)
    want = [next(ref)[1].tolist() for _ in range(14)]
    inf = create_loader(SlowDraws(), 4, num_workers=2, seed=0, infinite=True, device=device)
    got, errors = [], []
    while len(got) < 14 and len(errors) < 5:
        try:
            got.append(next(inf)[1].tolist())
        except RuntimeError as exc:
            errors.append(str(exc))
        if len(got) == 4 and not errors:
            os.kill(inf.loader.loader._iterator._workers[1].pid, signal.SIGKILL)  # a worker this test started
    # the error is raised once, then the same epoch goes on from the batch it took down with new
    # workers: nothing skipped
    assert len(errors) == 1 and errors[0].startswith("DataLoader worker (pid"), errors
    assert got == want
    inf.loader.close()


def test_an_infinite_loader_goes_on_after_a_worker_death_caught_in_the_training_step():
    # the attack: the death raised by torch's SIGCHLD handler in the step, caught there (as loader.md says it may
    # be), was raised again by the next next() ("exited unexpectedly"): a loop catching it once died of the second
    import signal

    ref = create_loader(SlowDraws(), 4, num_workers=0, seed=0, infinite=True)
    want = [next(ref)[1].tolist() for _ in range(14)]
    inf = create_loader(SlowDraws(), 4, num_workers=2, seed=0, infinite=True)
    got, errors = [], []
    while len(got) < 14:
        if len(got) == 4 and not errors:
            try:  # the training step, during which a worker dies
                os.kill(inf.loader.loader._iterator._workers[1].pid, signal.SIGKILL)  # a worker this test started
                time.sleep(2.0)
            except RuntimeError as exc:
                errors.append(str(exc))
        got.append(next(inf)[1].tolist())  # no error here: the epoch goes on with new workers
    assert len(errors) == 1 and " is killed by signal: Killed" in errors[0], errors
    assert got == want
    inf.loader.close()


def test_a_worker_killed_while_handing_a_batch_over_is_named_not_a_bare_connection_reset():
    # the attack: a worker SIGKILLed while a batch's shared memory came through its socket reached the loop as a
    # bare "ConnectionResetError: [Errno 104] Connection reset by peer" (the socket is reset before the process
    # can be seen to have ended); the race is made certain here by resetting the receive the moment it is killed
    import signal

    loader = create_loader(SlowDraws(), 4, num_workers=2, seed=0)
    it = iter(loader.loader)
    next(it)
    victim = it._workers[0].pid  # a worker this test started
    get = it._data_queue.get

    def reset(*args, **kwargs):
        it._data_queue.get = get
        os.kill(victim, signal.SIGKILL)
        raise ConnectionResetError(104, "Connection reset by peer")

    it._data_queue.get = reset
    with pytest.raises(RuntimeError) as e:
        for _ in range(len(loader)):  # batches received ahead are served first
            next(it)
    assert re.fullmatch(rf"DataLoader worker \(pid(\(s\))? {victim}\) (exited unexpectedly|is killed by signal: "
                        r"Killed\. )", str(e.value)), str(e.value)  # fmt: skip
    it._shutdown_workers()


def test_an_evaluation_loader_does_not_read_its_next_pass_ahead(tmp_path: Path):
    loader = create_loader(Marking(tmp_path), 4, num_workers=2, seed=0, train=False)
    assert sum((b.tolist() for b in loader), []) == list(range(40))
    assert _read(tmp_path, 1) == [] and _read(tmp_path, 0) == list(range(40))
    loader.close()


class Stuck(Dataset):
    """``n`` samples; sample ``index`` of epoch ``epoch`` hangs for ``seconds`` (a hung network read)."""

    epoch_independent = True

    def __init__(self, n: int, index: int, epoch: int, seconds: float) -> None:
        self.n, self.index, self.epoch, self.seconds = n, index, epoch, seconds

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if int(i) == self.index and i.epoch == self.epoch:
            time.sleep(self.seconds)
        return int(i)


@pytest.mark.parametrize("how", ["close", "set_num_workers", "another epoch"])
def test_a_stuck_batch_read_ahead_does_not_hold_up_close_retuning_or_a_restart(how: str):
    loader = create_loader(Stuck(16, 0, 1, 600), 4, num_workers=2, seed=0, shuffle=False)  # sample 0 of epoch 1
    assert sum((b.tolist() for b in loader), []) == list(range(16))  # epoch 1 is being read ahead
    time.sleep(0.3)
    t = time.perf_counter()
    if how == "close":
        loader.close()
        assert loader.loader._iterator is None
    elif how == "set_num_workers":
        loader.set_num_workers(1)
    else:
        loader.epoch = 2  # epoch 1 is skipped: its stuck batch is not needed
        assert next(iter(loader)).tolist() == [0, 1, 2, 3]
    assert time.perf_counter() - t < 15  # 2.5-5 s of patience, then its workers are stopped
    loader.epoch = 3
    assert sum((b.tolist() for b in loader), []) == list(range(16))
    loader.close()
    assert _receivers_end() == []


def test_the_next_epoch_after_one_left_early_does_not_wait_for_its_stuck_batch():
    # The attack: a loop left epoch 0 after one batch while a worker was stuck in a later batch of it; torch's
    # reset of its persistent workers waited for that read, so the next epoch began 30-60 s later.
    loader = create_loader(Stuck(32, 9, 0, 60), 4, num_workers=2, seed=0, shuffle=False)  # sample 9 of epoch 0
    for batch in loader:
        assert batch.tolist() == [0, 1, 2, 3]
        break
    time.sleep(0.3)
    t = time.perf_counter()
    assert sum((b.tolist() for b in loader), []) == list(range(32))  # epoch 1, whole
    assert time.perf_counter() - t < 20  # 5 s of patience, then new workers, against 60 s
    loader.close()
    assert _receivers_end() == []


def test_closing_or_retuning_mid_epoch_ends_the_epoch_and_an_infinite_loader_goes_on_exactly():
    def make():
        return create_loader(Indexed(40), 4, num_workers=2, seed=0, infinite=True)

    ref = make()
    expected = [next(ref)[0].tolist() for _ in range(24)]
    inf = make()
    got = [next(inf)[0].tolist() for _ in range(3)]
    inf.loader.close()  # free the workers during a long evaluation, say
    got += [next(inf)[0].tolist() for _ in range(9)]  # across the epoch boundary
    inf.loader.set_num_workers(1)
    got += [next(inf)[0].tolist() for _ in range(12)]
    assert got == expected and _at(inf.state_dict()) == (2, 4)
    # a finite loader's epoch left suspended and then closed refuses to go on, in one line
    loader = create_loader(Indexed(40), 4, num_workers=2, seed=0)
    it = iter(loader)
    next(it)
    loader.close()
    with pytest.raises(UsageError) as err:
        next(it)
    assert (
        str(err.value) == "the iterator of epoch 0 was ended by loader.close(); start the epoch again with iter(loader)"
    )
    del err
    ref.loader.close()
    loader.close()


_FILE_SYSTEM = r"""
import os
import sys
import torch
import torch.multiprocessing as tmp
from torch.utils.data import Dataset
from datakit.loader import create_loader

class Big(Dataset):
    epoch_independent = True

    def __len__(self):
        return 40

    def __getitem__(self, i):
        return torch.full((64, 64, 16), float(i))

def shm():
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith("torch_"))

if __name__ == "__main__":
    tmp.set_sharing_strategy("file_system")  # what create_loader chooses under a low open-file limit
    before = shm()
    for k in range(3):
        loader = create_loader(Big(), 4, num_workers=2, seed=k, multiprocessing_context=sys.argv[1])
        for epoch in range(2):
            for batch in loader:
                pass
        del batch
        if k == 1:
            loader.set_num_workers(1)  # what re-tuning does between epochs
            for batch in loader:
                pass
            del batch
        loader.close()
    print(len(set(shm()) - set(before)))
"""


@pytest.mark.parametrize("context", ["fork", "spawn"])  # spawned workers end by os._exit too
def test_batches_read_ahead_leave_nothing_in_dev_shm_with_the_file_system_strategy(tmp_path: Path, context: str):
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    script = tmp_path / "fs.py"
    script.write_text(_FILE_SYSTEM)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, str(script), context], capture_output=True, text=True, env=env, timeout=300)
    assert (proc.returncode, proc.stdout) == (0, "0\n"), proc.stderr[-2000:]


_CTRL_C_RESTART = r"""
import os, signal, sys, threading, time
import torch
from torch.utils.data import Dataset
from datakit.loader import create_loader

class Slow(Dataset):
    epoch_independent = True

    def __len__(self):
        return 16

    def __getitem__(self, i):
        if torch.utils.data.get_worker_info() is not None:
            time.sleep(0.05)  # 0.2 s a batch in the workers
        return int(i)

if __name__ == "__main__":
    ref = create_loader(Slow(), 4, num_workers=0, seed=0)
    expected = {}
    for e in (0, 2, 3):
        ref.epoch = e
        expected[e] = [b.tolist() for b in ref]
    for after in sys.argv[1:]:  # one notebook session, Ctrl-C at each moment in turn (a loader each)
        loader = create_loader(Slow(), 4, num_workers=2, seed=0)
        for b in loader:  # epoch 0; the workers read on into epoch 1
            pass
        loader.epoch = 3  # another epoch: the stream restarts, and Ctrl-C comes while it does
        threading.Timer(float(after), os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            for b in loader:
                pass
            print("not interrupted")
        except KeyboardInterrupt:
            pass
        for e in (2, 3, 0):
            loader.epoch = e
            print(after, e, [b.tolist() for b in loader] == expected[e], flush=True)
        loader.close()
"""


def test_ctrl_c_while_the_stream_restarts_leaves_the_loader_exact(tmp_path: Path):
    script = tmp_path / "notebook.py"
    script.write_text(_CTRL_C_RESTART)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    moments = ["0.02", "0.1", "0.27"]  # the restart's start, its workers starting, its first batches
    proc = subprocess.run([sys.executable, str(script), *moments], capture_output=True, text=True, env=env,
                          timeout=300)  # fmt: skip
    want = "".join(f"{after} {e} True\n" for after in moments for e in (2, 3, 0))
    assert (proc.returncode, proc.stdout) == (0, want), proc.stderr[-2000:]


def test_the_dataloader_inside_iterated_directly_gives_one_epoch_and_the_loader_stays_exact():
    def make():
        return create_loader(Indexed(14), 4, num_workers=2, seed=1)

    ref = make()
    epochs = [batches(ref) for _ in range(3)]
    loader = make()
    assert batches(loader) == epochs[0]  # the workers read on into epoch 1
    direct = [b[0].tolist() for b in loader.loader]  # what code expecting a DataLoader does
    assert len(direct) == len(loader.loader) == 4 and sorted(sum(direct, [])) == list(range(14))
    assert batches(loader) == epochs[1] and batches(loader) == epochs[2]
    loader.close()
    ref.close()


def test_an_iterable_dataset_is_loaded_without_a_sampler():
    class Stream(torch.utils.data.IterableDataset):
        def __len__(self) -> int:
            return 8

        def __iter__(self):
            return iter(range(8))

    assert [b.tolist() for b in create_loader(Stream(), 4, train=False, num_workers=0)] == [[0, 1, 2, 3], [4, 5, 6, 7]]


class SlowSecondWorker(torch.utils.data.IterableDataset):
    """Each worker streams its own samples (worker w: 100 * w + k); worker 1 is slow."""

    def __iter__(self):
        w = torch.utils.data.get_worker_info().id
        for k in range(40):
            if w == 1:
                time.sleep(0.01)
            yield 100 * w + k


def test_an_iterable_datasets_batches_come_from_its_workers_in_turn_whatever_their_speed():
    # each worker's stream decides what its batches hold: handed out by load, the fast worker
    # would take more batches and the order would depend on timing
    got = [b.tolist() for b in create_loader(SlowSecondWorker(), 4, train=False, num_workers=2)]
    assert got == [[100 * w + k for k in range(b, b + 4)] for b in range(0, 40, 4) for w in (0, 1)]


def test_an_iterable_dataset_without_a_len_loads_but_cannot_be_measured_for_num_workers():
    loader = create_loader(SlowSecondWorker(), 20, num_workers=1)  # training: no last batch to foresee
    assert [b.tolist() for b in loader] == [list(range(20)), list(range(20, 40))]
    with pytest.raises(ValueError) as err:
        create_loader(SlowSecondWorker(), 4)
    assert str(err.value) == ("num_workers='auto' measures loading over the dataset, and this SlowSecondWorker "
                              "has no len(); give num_workers=N")  # fmt: skip


def test_an_infinite_loader_without_a_batch_in_an_epoch_says_so():
    inf = create_loader(Indexed(0), 4, num_workers=0, seed=0, infinite=True, drop_last=False)
    with pytest.raises(UsageError) as err:
        next(inf)
    assert str(err.value) == ("an epoch holds no batch (0 samples, batch_size 4, drop_last=False): an infinite loader "
                              "would wait for ever")  # fmt: skip


@pytest.mark.parametrize("infinite", [False, True])
def test_drop_last_leaving_no_batch_is_refused_when_the_loader_is_made(infinite: bool):
    # the attack: 7 samples, batch 8, drop_last=True: each epoch trained on nothing, without a word (torch's too)
    with pytest.raises(UsageError) as err:
        create_loader(Indexed(7), 8, num_workers=0, seed=0, infinite=infinite, drop_last=True)
    assert str(err.value) == ("drop_last=True with batch_size=8 and 7 samples: every epoch would hold no batch; give "
                              "a smaller batch_size, or drop_last=False")  # fmt: skip
    assert batches(create_loader(Indexed(7), 7, num_workers=0, seed=0, drop_last=True, shuffle=False)) == [
        list(range(7))]  # fmt: skip


def test_batches_from_workers_are_received_on_a_thread():
    assert _receivers_end() == []
    loader = create_loader(Indexed(40), 4, num_workers=2, seed=0)
    it = iter(loader)
    got = [next(it)[0].tolist() for _ in range(3)]
    assert _receivers() == ["datakit-receive"]
    it.close()  # the loop leaves the epoch early: the thread ends once its batch is in
    assert _receivers_end() == [] and len(got) == 3
    assert sorted(sum(batches(loader), [])) == list(range(40))  # the next epoch is whole
    # a batch the loop let go of is freed by that thread once the loop takes the next one; a batch
    # the loop keeps stays whole
    it = iter(create_loader(Indexed(40), 4, num_workers=2, seed=0, train=False))
    first = next(it)
    gone, kept = weakref.ref(first[0]), next(it)
    del first
    next(it)
    assert gone() is None and kept[0].tolist() == [4, 5, 6, 7]
    it.close()
    del loader
    assert _receivers_end() == []
    # without workers there is none
    assert next(iter(create_loader(Indexed(8), 4, num_workers=0))) is not None and _receivers() == []


class SlowOnce(Dataset):
    """Sample 13 takes 4 s the first time it is read (a stuck network read)."""

    epoch_independent = True

    def __init__(self, flag: Path) -> None:
        self.flag = flag

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> int:
        if int(i) == 13 and not self.flag.exists():
            self.flag.touch()
            time.sleep(4)
        return int(i)


def test_leaving_an_epoch_early_does_not_wait_for_a_slow_batch(tmp_path: Path):
    loader = create_loader(SlowOnce(tmp_path / "slept"), 4, num_workers=1, seed=0, train=False)
    it = iter(loader)
    assert [next(it).tolist() for _ in range(3)][-1] == [8, 9, 10, 11]
    time.sleep(0.5)  # the receiving thread is now waiting for samples 12-15
    t = time.perf_counter()
    it.close()  # what break (or Ctrl-C) does to the loop's generator
    assert time.perf_counter() - t < 2.5  # the slow batch needs 3.5 s more
    assert sorted(sum((b.tolist() for b in loader), [])) == list(range(40))  # the next epoch is whole
    loader.close()
    assert _receivers_end() == []


_CTRL_C = r"""
import os, signal, threading, time
from torch.utils.data import Dataset
from datakit.loader import create_loader

class Stuck(Dataset):
    epoch_independent = True

    def __len__(self):
        return 40

    def __getitem__(self, i):
        if int(i) == 13:
            time.sleep(60)  # a read that hangs
        return int(i)

if __name__ == "__main__":
    loader = create_loader(Stuck(), 4, num_workers=1, seed=0, train=False)
    for k, batch in enumerate(loader):
        if k == 1:
            break
    threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    t = time.perf_counter()
    try:
        for batch in loader:
            pass
    except KeyboardInterrupt:
        print(f"interrupted after {time.perf_counter() - t:.0f} s", flush=True)
"""


def test_ctrl_c_while_a_batch_hangs_stops_and_the_program_exits_cleanly(tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text(_CTRL_C)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    took = time.perf_counter() - t
    # no "terminate called without an active exception" abort from the receiving thread at exit
    # the interrupt comes 1 s in; the loop must end then, not when the stuck read would (60 s)
    assert proc.returncode == 0 and re.fullmatch(r"interrupted after [1-4] s\n", proc.stdout), proc.stderr[-2000:]
    assert took < 30


_CTRL_C_SPAWN = """
import sys, time
import torch
from datakit.loader import create_loader

class Slow(torch.utils.data.Dataset):
    epoch_independent = True

    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(0.05)
        return torch.zeros(3, 8, 8, dtype=torch.uint8), i

if __name__ == "__main__":
    torch.multiprocessing.set_start_method(sys.argv[1])
    loader = create_loader(Slow(), 4, num_workers=2, seed=0, train=False)
    print("ready", flush=True)
    for batch in loader:
        time.sleep(0.05)
"""


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_ctrl_c_to_the_whole_group_while_workers_start_ends_cleanly(tmp_path: Path, method: str):
    # The attack: Ctrl-C in a terminal (SIGINT to the whole process group) while spawn workers were starting:
    # datakit's exit hook failed with torch's "DataLoader worker (pid N) is killed by signal: Interrupt" and left
    # the workers to torch's own hook.
    import signal

    script = tmp_path / "train.py"
    script.write_text(_CTRL_C_SPAWN)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, str(script), method], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    assert proc.stdout.readline() == "ready\n"
    time.sleep(0.5)  # workers starting (spawn: importing torch), or the first batches (fork)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (1, -signal.SIGINT), err
    assert "Exception ignored" not in err, err  # the exit hook ends what is left, whatever torch says of the workers
    if method == "fork":  # workers never see it: the loop's one KeyboardInterrupt
        assert err.count("Traceback") == 1 and err.rstrip().endswith("KeyboardInterrupt"), err
    else:  # the main process's, and maybe each spawned worker's own while it imports the script
        assert err.count("KeyboardInterrupt") >= 1 and "train.py" in err, err


_CTRL_C_AT_START = """
import os, signal, torch
from datakit.loader import create_loader

MAIN = os.getpid()

class Data(torch.utils.data.Dataset):
    epoch_independent = True

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.zeros(3), 0

    def __getstate__(self):  # pickled in the main process while each spawned worker starts: Ctrl-C comes now
        if os.getpid() == MAIN:
            os.kill(MAIN, signal.SIGINT)
        return self.__dict__

if __name__ == "__main__":
    loader = create_loader(Data(), 4, num_workers=2, multiprocessing_context="spawn", seed=0)
    try:
        for epoch in range(2):
            for batch in loader:
                pass
        print("lost")
    except KeyboardInterrupt:
        print("interrupted")
"""


def test_ctrl_c_while_spawned_workers_start_is_never_lost(tmp_path: Path):
    # The attack on the first fix for the test above: SIGINT ignored process-wide while spawn workers started;
    # the kernel gave the Ctrl-C to another thread of the process, which dropped it, and training went on.
    script = tmp_path / "train.py"
    script.write_text(_CTRL_C_AT_START)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.stdout == "interrupted\n", proc.stderr[-2000:]


def test_epoch_sampler_shards_cover_everything():
    parts = [list(EpochSampler(10, seed=3, rank=r, world=3)) for r in range(3)]
    assert all(len(p) == 4 for p in parts)
    assert set(sum(parts, [])) == set(range(10))


def test_num_workers_env_override(monkeypatch):
    monkeypatch.setenv("DATAKIT_NUM_WORKERS", "0")
    assert create_loader(Indexed(4), 2, num_workers=3).num_workers == 0
    # the attack: with num_workers="auto" the forced 0 held for the first epoch only; re-tuning after it gave 5
    # workers on 2 CPUs, and a breakpoint in __getitem__ (the documented use) stopped working from epoch 1
    auto = create_loader(Indexed(4), 2, num_workers="auto")
    assert auto.num_workers == 0 and auto.autotune is False
    with pytest.raises(UsageError) as e:
        create_loader(Indexed(4), 2, num_workers=True)
    assert str(e.value) == "num_workers must be 'auto' or an int >= 0, got True"


def test_more_workers_than_the_machine_holds_are_refused_as_the_cli_refuses_them(monkeypatch):
    # the attack: create_loader(ds, 4, num_workers=1000) was taken (the CLI refuses --workers 1000): iterating it on
    # 2 CPUs filled 24 GiB and the kernel ended the training process
    import datakit.parallel
    import datakit.tuning

    monkeypatch.setattr(datakit.parallel, "usable_cpus", lambda: 2)
    monkeypatch.setattr(datakit.tuning, "_available_memory", lambda: 6 << 30)  # room for 10 at 600 MiB
    tail = "at most 10 here (2 usable CPUs and 6.0 GiB of available memory; 4 a CPU, or one per 600 MiB available)"
    with pytest.raises(UsageError) as e:
        create_loader(Indexed(4), 2, num_workers=1000)
    assert str(e.value) == f"num_workers=1000: {tail}"
    loader = create_loader(Indexed(4), 2, num_workers=0)
    with pytest.raises(UsageError) as e:
        loader.set_num_workers(11)
    assert str(e.value) == f"set_num_workers(11): {tail}"
    monkeypatch.setenv("DATAKIT_NUM_WORKERS", "500")
    with pytest.raises(UsageError) as e:
        create_loader(Indexed(4), 2)
    assert str(e.value) == f"DATAKIT_NUM_WORKERS=500: {tail}"
    monkeypatch.delenv("DATAKIT_NUM_WORKERS")
    assert create_loader(Indexed(4), 2, num_workers=10).num_workers == 10
    with pytest.raises(UsageError) as e:  # a ValueError before, where True was a UsageError
        create_loader(Indexed(4), 2, num_workers=-1)
    assert str(e.value) == "num_workers must be 'auto' or an int >= 0, got -1"


DDP = r"""
import json, os, sys
import torch.distributed as dist
from torch.utils.data import Dataset
from datakit.loader import create_loader

import numpy as np, torch
from datakit.errors import UsageError
from datakit.loader import seed_everything

class Idx(Dataset):
    epoch_independent = True

    def __len__(self): return 11
    def __getitem__(self, i): return i

class Draw(Dataset):
    epoch_independent = True

    def __len__(self): return 8
    def __getitem__(self, i): return int(np.random.randint(1 << 30))

class Stream(torch.utils.data.IterableDataset):
    def __iter__(self): return iter(range(4))

rank = int(os.environ["RANK"])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["PORT"], rank=rank, world_size=2)
train = create_loader(Idx(), 2, num_workers=0, seed=5)
epochs = [[int(i) for b in train for i in b] for _ in range(2)]
evaluation = create_loader(Idx(), 4, train=False, num_workers=0)
peeked = create_loader(Idx(), 2, num_workers=0, seed=5)
if rank == 0:
    next(iter(peeked))  # a rank-0 look at one batch
again = []
for e in range(2):
    peeked.sampler.set_epoch(e)
    again.append([int(i) for b in peeked for i in b])
seed_everything(0)  # the documented unseeded set-up, on every rank
draws = sorted(int(d) for b in create_loader(Draw(), 2, num_workers=2, shuffle=False) for d in b)
seed_everything(0)  # read in the main process (DATAKIT_NUM_WORKERS=0, "auto" choosing 0): apart too
main_draws = sorted(int(d) for b in create_loader(Draw(), 2, num_workers=0, shuffle=False) for d in b)
caller = int(np.random.randint(1 << 30))  # the loop's own draws: as seeded, untouched by the loading
# a generator seeded per rank (a common recipe): it must not give each rank its own permutation to shard
per_rank_g = [int(i) for b in create_loader(Idx(), 2, num_workers=0, generator=torch.Generator().manual_seed(100 + rank))
              for i in b]
try:
    create_loader(Stream(), 2, num_workers=0, distributed=True)
    stream = "accepted"
except UsageError as exc:
    stream = str(exc)
import logging
warned = []
handler = logging.Handler()
handler.emit = lambda record: warned.append(record.getMessage())
logging.getLogger("datakit").addHandler(handler)
unset = create_loader(Idx(), 2, num_workers=0, seed=5)
if rank == 0:
    next(iter(unset))  # a rank-0 look, and no set_epoch in the loop: the ranks' epochs part
unset_epochs = [[int(i) for b in unset for i in b] for _ in range(2)]
own = torch.utils.data.RandomSampler(Idx())
try:
    create_loader(Idx(), 2, num_workers=0, sampler=own, distributed=True)
    sampler = "accepted"
except UsageError as exc:
    sampler = str(exc)
create_loader(Idx(), 2, num_workers=0, sampler=own)  # "auto": said, not refused
sharded = [int(i) for b in create_loader(Idx(), 4, train=False, num_workers=0, distributed=True) for i in b]
print(json.dumps({"epochs": epochs, "eval": [int(i) for b in evaluation for i in b], "again": again,
                  "draws": draws, "main_draws": main_draws, "caller": caller, "per_rank_g": per_rank_g,
                  "stream": stream, "unset": unset_epochs, "warned": warned, "sampler": sampler,
                  "sharded": sharded}))
dist.destroy_process_group()
import os as _os, sys as _sys  # (gloo's threads, freed in the interpreter's teardown, abort it now and then)
_sys.stdout.flush(), _sys.stderr.flush()
_os._exit(0)
"""


def _two_ranks(script: str) -> list[str]:
    """What ``script`` printed on each of two gloo ranks (RANK, and PORT for its tcp:// rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PORT=str(port))
    procs = [subprocess.Popen([sys.executable, "-c", script], env=dict(env, RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(2)]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    return [o for o, _ in outs]


def test_two_gloo_ranks_get_disjoint_shards():
    r0, r1 = (json.loads(o) for o in _two_ranks(DDP))
    for e in range(2):
        a, b = r0["epochs"][e], r1["epochs"][e]
        assert len(a) == len(b) == 6
        assert set(a) | set(b) == set(range(11))
        assert len(set(a) & set(b)) <= 1  # 11 samples on 2 ranks: one padded repeat, as DistributedSampler
    assert r0["epochs"][0] != r0["epochs"][1]  # set_epoch reshuffles
    assert r0["eval"] == r1["eval"] == list(range(11))  # evaluation stays whole
    # a rank that looked at a batch first and one that did not serve one permutation's shards after set_epoch
    assert r0["again"] == r0["epochs"] and r1["again"] == r1["epochs"]
    # unseeded: torch gave worker k the same seed on every rank, so the k-th samples drew the same augmentations
    assert len(set(r0["draws"]) & set(r1["draws"])) == 0
    # the attack: with no workers, every rank drew from its global state, seeded alike on all: the same crops
    assert len(r0["main_draws"]) == len(r1["main_draws"]) == 4 and not set(r0["main_draws"]) & set(r1["main_draws"])
    assert r0["caller"] == r1["caller"] == int(np.random.RandomState(0).randint(1 << 30))
    assert set(r0["per_rank_g"]) | set(r1["per_rank_g"]) == set(range(11))  # shards of one order, not overlapping
    assert r0["stream"] == (
        "distributed=True: Stream (an IterableDataset) orders itself: the loader cannot give each of the 2 ranks "
        "its share; its __iter__ must split the stream by torch.distributed.get_rank(), or every rank reads all "
        "of it; or pass distributed=False once it does"
    )
    # the attack: a rank-0 look and no set_epoch: rank 0 served epoch e + 1 while rank 1 served epoch e, for the
    # rest of the run (samples never served, others twice), without a word; now said once, on the rank that looked
    assert r0["unset"][0] == r0["epochs"][1] and r1["unset"] == r1["epochs"]
    sampler = ("sampler=RandomSampler is iterated as it is on each of the 2 ranks, so every rank reads all of its "
               "samples; give a DistributedSampler (or no sampler: the loader shards its own)")  # fmt: skip
    assert r0["sampler"] == r1["sampler"] == f"distributed=True: {sampler}"
    assert r0["warned"] == [
        "the loader's pass over epoch 0 ended before its last batch, and this one serves epoch 1: under "
        "torch.distributed each of the 2 ranks counts its own passes, so a pass that only some ranks began (a look "
        "at one batch on rank 0) puts their epochs, and so their shards, out of step; call "
        "loader.sampler.set_epoch(epoch) at the start of each epoch",
        sampler,
        # the attack: an evaluation loader with distributed=True read sample 0 twice (11 samples, 2 ranks), unsaid
        "an evaluation loader sharded over 2 ranks reads 1 sample beyond its 11, a repeat that makes the shards "
        "equal (as DistributedSampler pads them): the last sample of rank 1; metrics summed over the ranks count it "
        "again (leave it out, or evaluate on one rank)",
    ]
    assert r1["warned"] == [sampler]
    assert (r0["sharded"], r1["sharded"]) == ([0, 2, 4, 6, 8, 10], [1, 3, 5, 7, 9, 0])


def _pool_loader(_):
    loader = create_loader(list(range(6)), 2, seed=0)  # num_workers="auto" in a daemonic process
    return loader.num_workers, sorted(int(i) for b in loader for i in b)


def test_loader_choices_the_caller_could_get_wrong():
    # The attacks: distributed="false" sharded an evaluation loader, distributed=1 was ignored; num_workers="auto"
    # in a multiprocessing.Pool worker died on torch's bare AssertionError; create_loader(seed=None) moved the
    # caller's generator, so the model made next had other weights.
    for bad in ("false", 1, "yes", None):
        with pytest.raises(UsageError) as e:
            create_loader(Indexed(4), 2, num_workers=0, distributed=bad)
        assert str(e.value) == f"distributed must be 'auto', True or False, got {bad!r}"
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.map(_pool_loader, [0]) == [(0, list(range(6)))]
    torch.manual_seed(3)
    want = torch.rand(3).tolist()
    torch.manual_seed(3)
    create_loader(list(range(6)), 2, num_workers=0)
    assert torch.rand(3).tolist() == want


def test_seed_everything():
    seed_everything(11)
    a = (random.random(), np.random.rand(), torch.rand(1).item(), os.environ["PYTHONHASHSEED"])
    seed_everything(11)
    assert a == (random.random(), np.random.rand(), torch.rand(1).item(), "11")


# ---------------------------------------------------------------------------------------------
# bad samples during training


BAD = {3: "empty file (0 bytes)", 17: "truncated JPEG (no end-of-image marker)", 30: "not a recognised image format"}


def bad_folder(tmp_path: Path, n: int = 40) -> Path:
    """n images in one class folder, sample i filled with the value 5*i; samples 3, 17, 30 broken."""
    from datakit.io import encode_image, imwrite

    root = tmp_path / "坏 数据"
    (root / "类").mkdir(parents=True)
    for i in range(n):
        ext = ".jpg" if i == 17 else ".png"
        imwrite(root / "类" / f"{i:03d}_图{ext}", np.full((8, 8, 3), 5 * i, np.uint8), mode="rgb")
    (root / "类" / "003_图.png").write_bytes(b"")
    (root / "类" / "017_图.jpg").write_bytes(encode_image(np.full((8, 8, 3), 85, np.uint8), ".jpg")[:-40])
    (root / "类" / "030_图.png").write_bytes(b"not an image at all")
    return root


def ids(batch) -> list[int]:
    return (batch[0].flatten(1)[:, 0].long() // 5).tolist()


@pytest.mark.parametrize("policy", ["substitute", "skip"])
def test_bad_samples_resume_exactly_with_0_and_2_workers(tmp_path: Path, policy: str):
    from datakit.datasets import open_dataset, read_bad_samples

    root = bad_folder(tmp_path)
    runs = {}
    for workers in (0, 2):
        report = tmp_path / f"bad_{workers}.json"

        def make(report=report, workers=workers):
            ds = open_dataset(root, on_error=policy, max_bad_fraction=0.1, bad_samples=report)
            return create_loader(ds, 4, num_workers=workers, seed=3, infinite=True)

        ref = make()
        expected = [ids(next(ref)) for _ in range(25)]  # 10 batches per epoch: crosses two epoch boundaries
        del ref
        report.unlink()  # the interrupted run starts without knowing the bad samples
        run = make()
        got = [ids(next(run)) for _ in range(13)]
        state = run.state_dict()
        assert _at(state) == (1, 3)
        del run
        resumed = make()  # knows the bad samples found before the interruption: substitutes them unread
        resumed.load_state_dict(state)
        got += [ids(next(resumed)) for _ in range(12)]
        assert got == expected
        runs[workers] = expected
        data = read_bad_samples(report)
        assert (data["samples"], data["count"], [e["index"] for e in data["bad"]]) == (40, 3, [3, 17, 30])
        for e in data["bad"]:
            assert e["name"] == str(next((root / "类").glob(f"{e['index']:03d}_*")))
            assert e["reason"].startswith(BAD[e["index"]])
    assert runs[0] == runs[2]  # the substitute does not depend on the number of workers
    flat = [i for b in runs[0] for i in b]
    assert not set(flat) & set(BAD) and len(flat) == 100
    epoch0, epoch1 = runs[0][:10], runs[0][10:20]
    assert sorted(i for b in epoch0 for i in b) != sorted(range(40))  # three served twice
    if policy == "skip":  # the next readable index stands in: 3 -> 4, 17 -> 18, 30 -> 31
        assert collections.Counter(i for b in epoch0 for i in b) == collections.Counter(
            [i for i in range(40) if i not in BAD] + [4, 18, 31]
        )
    else:  # drawn from (seed, epoch, index): other stand-ins in another epoch
        extra0 = collections.Counter(i for b in epoch0 for i in b) - collections.Counter(range(40))
        extra1 = collections.Counter(i for b in epoch1 for i in b) - collections.Counter(range(40))
        assert sum(extra0.values()) == sum(extra1.values()) == 3 and extra0 != extra1


def test_bad_samples_merged_are_not_read_again_each_epoch(tmp_path: Path):
    # the attack: with workers started afresh each epoch, a bad sample merged into bad_samples= was read, logged and
    # recorded again every epoch, one more <file>.parts/<host>-<pid>.jsonl each time
    from datakit.datasets import open_dataset, read_bad_samples

    root = bad_folder(tmp_path)
    report = tmp_path / "bad.json"
    ds = open_dataset(root, on_error="skip", max_bad_fraction=0.1, bad_samples=report)
    loader = create_loader(ds, 8, num_workers=2, seed=0, persistent_workers=False)
    log = logging.FileHandler(tmp_path / "log.txt", encoding="utf-8")  # the forked workers' records too
    logging.getLogger("datakit").addHandler(log)
    try:
        for _ in range(3):
            assert sum(len(b[1]) for b in loader) == 40
    finally:
        logging.getLogger("datakit").removeHandler(log)
        log.close()
    said = [line.split(":")[0] for line in (tmp_path / "log.txt").read_text(encoding="utf-8").splitlines()]
    assert sorted(said) == ["bad sample 17", "bad sample 3", "bad sample 30"]  # in the first epoch only
    assert sorted(ds.bad) == [3, 17, 30]
    assert [e["index"] for e in read_bad_samples(report)["bad"]] == [3, 17, 30]
    parts = [line for f in (tmp_path / "bad.json.parts").glob("*.jsonl") for line in f.read_text().splitlines()]
    assert len(parts) == 3  # each recorded once, in the first epoch (then a parts file more each epoch)
    # and a bad sample of another dataset sharing the file (val's index 3), or named otherwise now (a file
    # removed after a killed run, the indices shifted), is not taken for this dataset's
    report.unlink()
    shutil.rmtree(tmp_path / "bad.json.parts")
    again = open_dataset(root, on_error="skip", max_bad_fraction=0.1, bad_samples=report)
    (tmp_path / "bad.json.parts").mkdir()
    (tmp_path / "bad.json.parts" / "other-1.jsonl").write_text(
        json.dumps({"index": 5, "name": "val/5.png", "reason": "damaged"}) + "\n", encoding="utf-8"
    )
    assert again.merge_bad_samples() == report and again.bad == {}


def test_too_many_bad_samples_stop_training(tmp_path: Path):
    from datakit.datasets import open_dataset

    root = bad_folder(tmp_path)
    ds = open_dataset(root, on_error="substitute", max_bad_fraction=0.05, bad_samples=tmp_path / "bad.json")
    loader = create_loader(ds, 4, num_workers=2, seed=0, train=False)
    with pytest.raises(
        SampleError,
        match=r"^3 of 40 samples are unreadable \(7\.5%\), more than max_bad_fraction=0\.05: the source looks broken",
    ) as e:
        list(loader)
    # the file the message names holds the three (before: an empty list; they were in its .parts only)
    assert str(e.value).endswith(f"; listed in {tmp_path / 'bad.json'}")
    listed = json.loads((tmp_path / "bad.json").read_text(encoding="utf-8"))
    assert (listed["count"], [b["index"] for b in listed["bad"]]) == (3, [3, 17, 30])
    # without a report the count is per process; a lone process still sees all three
    ds = open_dataset(root, on_error="skip", max_bad_fraction=0.05)
    with pytest.raises(
        SampleError,
        match=rf"^3 of 40 samples are unreadable \(7\.5%\).*\(the latest: sample 30: {re.escape(str(root))}/类/030_图\.png: not a recognised image format",
    ):
        [ds[i] for i in range(40)]
    with pytest.raises(UsageError, match="max_bad_fraction must be between 0 and 1, got 2"):
        open_dataset(root, on_error="skip", max_bad_fraction=2)


def test_bad_samples_of_two_machines_sharing_the_folder_under_one_pid_are_kept_apart(tmp_path: Path, monkeypatch):
    # The attack: two nodes of one job (containers, whose trainers often have the same PID) writing bad_samples= on
    # a shared folder. Both appended to .parts/<pid>.jsonl (appends from two NFS clients overwrite each other), and
    # two merges at once wrote one temporary file: the second renamed it into place, and the first, its file gone,
    # stopped training with "bad_samples='bad.json': cannot be written".
    import socket

    from datakit.datasets import open_dataset

    root = bad_folder(tmp_path)
    report = tmp_path / "bad.json"
    monkeypatch.setattr(os, "getpid", lambda: 4242)
    host = ["node-a"]
    monkeypatch.setattr(socket, "gethostname", lambda: host[0])
    on_a = open_dataset(root, on_error="skip", max_bad_fraction=0.1, bad_samples=report)
    on_b = open_dataset(root, on_error="skip", max_bad_fraction=0.1, bad_samples=report)
    on_a[3]
    host[0] = "node-b"
    on_b[17]
    assert sorted(p.name for p in (tmp_path / "bad.json.parts").iterdir()) == ["node-a-4242.jsonl", "node-b-4242.jsonl"]
    real = Path.write_text
    written = []

    def meanwhile(self, *args, **kw):  # node b merges while node a's merge has written its temporary file
        written.append(self.name)
        out = real(self, *args, **kw)
        if len(written) == 1:
            host[0] = "node-b"
            on_b.merge_bad_samples()
            host[0] = "node-a"
        return out

    host[0] = "node-a"
    monkeypatch.setattr(Path, "write_text", meanwhile)
    assert on_a.merge_bad_samples() == report
    monkeypatch.setattr(Path, "write_text", real)
    assert [b["index"] for b in json.loads(report.read_text(encoding="utf-8"))["bad"]] == [3, 17]
    assert len(written) == 2 and all(re.fullmatch(r"\.bad\.json\.node-[ab]-4242\.[0-9a-f]{8}\.tmp", w) for w in written)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_an_augment_steps_error_is_the_transforms_not_a_bad_image(tmp_path: Path):
    # The attack: train_pipeline(augment=[v2.RandomGrayscale(p=1)]) on a valid RGBA PNG (mode="unchanged"): the
    # augment's ValueError became "sample 8: ...", counted as an unreadable image: on_error="skip" replaced it,
    # bad_samples= recorded it, and check and pack-lmdb --skip-bad then treated a good file as bad. A TypeError from
    # an augment named neither the sample nor the file.
    from PIL import Image
    from torchvision.transforms import v2

    from datakit.datasets import open_dataset
    from datakit.transforms import train_pipeline

    rng = np.random.default_rng(0)
    for k in range(4):
        (tmp_path / "img" / "a").mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(tmp_path / "img" / "a" / f"{k}.png")
    Image.fromarray(rng.integers(0, 256, (64, 64, 4), dtype=np.uint8), "RGBA").save(tmp_path / "img" / "a" / "rgba.png")
    report = tmp_path / "bad.json"
    ds = open_dataset(tmp_path / "img", mode="unchanged", transform=train_pipeline(32, augment=[v2.RandomGrayscale(p=1)]),
                      on_error="skip", max_bad_fraction=0.5, bad_samples=report)  # fmt: skip
    assert ds.name(4).endswith("rgba.png")
    with pytest.raises(ValueError) as e:
        ds[4]
    # (the augmentations are tried on 4 channels at the first such crop: refused there, every time, with advice)
    assert type(e.value) is ValueError and str(e.value) == (
        "augment step RandomGrayscale(p=1) does not accept the uint8 CHW tensor the pipeline gives it (ValueError: "
        "num_output_channels must be 1 or 3, got 4.); this crop has 4 channels (mode 'unchanged' keeps alpha), which "
        "torchvision's colour steps refuse: read the images in mode 'rgb' for these augmentations"
    )
    assert e.value.__notes__ == [f"(raised by the dataset's transform on sample 4: {ds.name(4)})"]
    assert ds.bad == {} and ds.merge_bad_samples() == report
    assert json.loads(report.read_text(encoding="utf-8"))["bad"] == []
    jitter = open_dataset(
        tmp_path / "img", mode="unchanged", transform=train_pipeline(32, augment=[v2.ColorJitter(0.5)])
    )
    for workers in (0, 2):
        with pytest.raises(ValueError) as e:
            list(create_loader(jitter, 5, num_workers=workers, train=False))
        assert "(TypeError: Input image tensor permitted channel values are 1 or 3, but found 4)" in str(e.value)
        assert f"(raised by the dataset's transform on sample 4: {ds.name(4)})" in e.value.__notes__


def test_handler_policy_in_webdataset_style(tmp_path: Path):
    from datakit.datasets import open_dataset

    root = bad_folder(tmp_path)
    seen = []

    def warn_and_continue(exc):
        seen.append(str(exc))
        return True

    ds = open_dataset(root, on_error=warn_and_continue, max_bad_fraction=0.1)
    img, _ = ds[3]
    assert seen == [f"sample 3: {root}/类/003_图.png: empty file (0 bytes)"] and img[0, 0, 0] != 15
    subst = open_dataset(root, on_error="substitute", max_bad_fraction=0.1)
    np.testing.assert_array_equal(img, subst[3][0])  # continuing substitutes as "substitute" does
    calls = []
    stop = open_dataset(root, on_error=lambda exc: calls.append(str(exc)) and False, max_bad_fraction=0.1)
    for _ in range(2):  # the attack: read again (a loop that catches the error, a later epoch), it was substituted
        with pytest.raises(SampleError, match=r"^sample 17: .*017_图\.jpg: truncated JPEG \(no end-of-image marker\)$"):
            stop[17]
    assert len(calls) == 1  # the handler asked once per sample and process
    listed = tmp_path / "bad.json"  # a sample an earlier run listed: the handler decides it too, not substituted
    open_dataset(root, on_error="skip", bad_samples=listed, max_bad_fraction=0.1)[17]
    again = open_dataset(root, on_error=lambda exc: False, bad_samples=listed, max_bad_fraction=0.1)
    with pytest.raises(SampleError, match=r"^sample 17: .*017_图\.jpg: truncated JPEG"):
        again[17]

    def reraise(exc):
        raise RuntimeError("stop here") from exc

    with pytest.raises(RuntimeError, match="stop here"):
        open_dataset(root, on_error=reraise, max_bad_fraction=0.1)[30]


def test_bad_samples_file_refuses_foreign_files(tmp_path: Path):
    from datakit.datasets import read_bad_samples

    (tmp_path / "x.json").write_text('{"format": "other", "version": 1}')
    with pytest.raises(UsageError, match=r"x\.json: not a datakit bad-samples file \(format 'other'\)$"):
        read_bad_samples(tmp_path / "x.json")
    (tmp_path / "y.json").write_text('{"format": "datakit-bad-samples", "version": 7}')
    with pytest.raises(UsageError, match=r"y\.json: bad-samples version 7; this datakit reads version 1$"):
        read_bad_samples(tmp_path / "y.json")
    with pytest.raises(UsageError, match=r"z\.json: no such bad-samples file$"):
        read_bad_samples(tmp_path / "z.json")


CV2_WORKERS = r"""
import sys, time
import cv2, numpy as np
from torch.utils.data import Dataset
from datakit.loader import create_loader

class Threads(Dataset):
    epoch_independent = True

    def __len__(self): return 4
    def __getitem__(self, i):
        cv2.GaussianBlur(np.zeros((512, 512, 3), np.uint8), (9, 9), 0)
        return cv2.getNumThreads()

if __name__ == "__main__":
    img = np.random.default_rng(0).integers(0, 255, (2000, 2000, 3), dtype=np.uint8)
    cv2.GaussianBlur(img, (15, 15), 0)  # the parent's thread pool exists...
    time.sleep(1)  # ...and its threads sleep on a condition variable when the workers fork
    loader = create_loader(Threads(), 2, num_workers=2, train=False, multiprocessing_context=sys.argv[1])
    print([int(t) for b in loader for t in b], cv2.getNumThreads())
"""


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_opencv_one_thread_in_workers_without_fork_deadlock(tmp_path: Path, context: str):
    script = tmp_path / "cv2_workers.py"
    script.write_text(CV2_WORKERS)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    out = subprocess.run([sys.executable, str(script), context], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    parent = max(1, len(os.sched_getaffinity(0)))
    assert (
        out.stdout.split("]")[0] == "[1, 1, 1, 1" and int(out.stdout.split()[-1]) == parent
    )  # the main process keeps its threads


BUSY_WORKERS = """
import multiprocessing, sys, threading, torch
from torch.utils.data import Dataset
from datakit.loader import create_loader

def busy():
    a = torch.ones(128, 128)
    while True:
        a @ a  # C++ that lets go of the GIL and takes it back

def start_busy(worker_id):
    threading.Thread(target=busy, daemon=True).start()

class Numbers(Dataset):
    epoch_independent = True

    def __len__(self): return 8
    def __getitem__(self, i): return torch.full((3, 4, 4), i, dtype=torch.uint8)

if __name__ == "__main__":
    context = {"spawn-context": multiprocessing.get_context("spawn")}.get(sys.argv[1], sys.argv[1])
    loader = create_loader(Numbers(), 2, num_workers=2, train=False, multiprocessing_context=context,
                           worker_init_fn=start_busy)
    for _ in range(3):
        print(sum(int(b[:, 0, 0, 0].sum()) for b in loader))
    loader.close()
    print("closed")
"""


def _at(state: dict) -> tuple[int, int]:
    """(epoch, step) of a loader state."""
    return state["epoch"], state["step"]


@pytest.mark.parametrize("context", ["fork", "spawn", "spawn-context"])
def test_workers_with_a_thread_inside_cpp_end_without_abort(tmp_path: Path, context: str):
    # The attack: a spawned worker tears its interpreter down at exit, which unwinds any thread
    # still in C++ (here the user's; in the wild the queue's feeder thread sharing a batch) and
    # C++ aborts: "terminate called without an active exception", the loop then raises
    # "DataLoader worker (pid ...) is killed by signal: Aborted".
    script = tmp_path / "busy_workers.py"
    script.write_text(BUSY_WORKERS)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    # Python's resource tracker now and then reports a spawned worker's queue semaphore as leaked at shutdown,
    # then finds it unlinked already ("No such file or directory"): its own bookkeeping race, not an abort
    env["PYTHONWARNINGS"] = "ignore::UserWarning:multiprocessing.resource_tracker"
    out = subprocess.run([sys.executable, str(script), context], env=env, capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout, out.stderr) == (0, "28\n28\n28\nclosed\n", "")


@pytest.mark.parametrize("path", ["data/train", Path("data/train")])
def test_a_path_instead_of_a_dataset_is_refused(path):
    # a str is a sequence: without the check, its characters were the samples
    with pytest.raises(UsageError) as e:
        create_loader(path, 4, num_workers=0)
    assert str(e.value) == ("create_loader takes a dataset, not a path: "
                            "create_loader(open_dataset('data/train', transform=train_pipeline(224)), ...)")  # fmt: skip


def test_a_start_method_without_workers_is_ignored():
    data = [torch.full((3, 2, 2), k, dtype=torch.uint8) for k in range(6)]
    loader = create_loader(data, 4, num_workers=0, train=False, multiprocessing_context="spawn")
    assert [b[:, 0, 0, 0].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5]]


# ---------------------------------------------------------------------------------------------
# how long the loop waits for data, and re-tuning num_workers from it


def timing(workers, wait_ms, interval_ms, *, busy=None, own=None, loop=None, queued=0.0, wait_cpu=None, batches=11):
    n = batches - 1
    cores = lambda x: None if x is None else x * interval_ms * n / 1000  # noqa: E731
    return EpochTiming(0, workers, batches, wait_ms * n / 1000, interval_ms * n / 1000, 0.5, cores(busy), cores(own),
                       cores(loop), cores(queued), cores(wait_cpu))  # fmt: skip


def test_next_num_workers_decisions():
    # no workers: the loop loads 60 ms, computes 20 ms; loading keeps one core busy 75% of the time
    assert timing(0, 60, 80, busy=0.75).wait_fraction == pytest.approx(0.75)
    assert next_num_workers(timing(0, 60, 80, busy=0.75), cpus=2, max_workers=8) == 2  # CPU-bound: the cores cap it
    assert next_num_workers(timing(0, 60, 80, busy=0.75), cpus=8, max_workers=8) == 4  # ceil(1.1 * 60 / 20)
    # the same times, but loading waits on I/O (5% of a core): as many as keep up
    assert next_num_workers(timing(0, 60, 80, busy=0.04), cpus=2, max_workers=8) == 4
    # 2 workers each deliver a batch per 2 x 50 ms; the step is 20 ms: ceil(1.1 * 100 / 20) = 6
    assert next_num_workers(timing(2, 30, 50, busy=0.1), cpus=2, max_workers=8) == 6
    assert next_num_workers(timing(2, 30, 50, busy=0.1), cpus=2, max_workers=5) == 5
    # our two decoding workers fill both cores: unchanged
    assert next_num_workers(timing(2, 30, 50, busy=2.0, own=1.9), cpus=2, max_workers=8) == 2
    # no workers, and the step itself computes on the CPU (0.88 core): the loading inside next() took 0.32 core
    # while the loop waited 32% of the time, so one worker gets a whole core (all 1.2 as loading would give none)
    assert next_num_workers(timing(0, 32, 100, busy=1.2, own=1.2, wait_cpu=0.32), cpus=2, max_workers=8) == 1
    assert next_num_workers(timing(0, 32, 100, busy=1.2, own=1.2), cpus=2, max_workers=8) == 0
    # one decoding worker uses a core, the loop's process a fifth of the other: a second worker still
    # gets 80% of a core (counting the loop's share as loading would stop at one)
    assert next_num_workers(timing(1, 40, 50, busy=1.2, own=1.2, loop=0.2), cpus=2, max_workers=8) == 2
    # the loop itself computes on a core (training on the CPU): the other core is the worker's, unchanged
    assert next_num_workers(timing(1, 40, 50, busy=2.0, own=2.0, loop=1.0), cpus=2, max_workers=8) == 1
    # two decoders got 0.6 core each and waited 0.4 each in the run queue (another job holds 0.8 core):
    # they want whole cores, so unchanged (without the queue they would look like loading that waits on I/O)
    assert next_num_workers(timing(2, 30, 50, busy=2.0, own=1.2, loop=0.0, queued=0.8), cpus=2, max_workers=8) == 2
    assert next_num_workers(timing(2, 30, 50, busy=2.0, own=1.2, loop=0.0), cpus=2, max_workers=8) == 3
    # other processes hold one core, and one decoding worker the other: unchanged
    assert next_num_workers(timing(1, 40, 50, busy=2.0, own=0.9), cpus=2, max_workers=8) == 1
    # other processes fill the machine, but loading waits on I/O (2.5% of a core each): it still grows
    assert next_num_workers(timing(2, 30, 50, busy=2.0, own=0.05), cpus=2, max_workers=8) == 6
    # compute-bound (waits 2% of the time), too few batches, already at the ceiling: unchanged
    assert next_num_workers(timing(2, 1, 50, busy=0.1), cpus=2, max_workers=8) == 2
    assert next_num_workers(timing(0, 60, 80, busy=0.1, batches=1), cpus=2, max_workers=8) == 0
    assert next_num_workers(timing(8, 30, 50, busy=0.1), cpus=16, max_workers=8) == 8
    # without CPU figures (no /proc): only the wait decides
    assert next_num_workers(timing(1, 40, 50), cpus=2, max_workers=8) == 6


class Slow(Dataset):
    """Loading that waits (5 ms a sample, like a network disk) and uses no CPU."""

    epoch_independent = True

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int):
        time.sleep(0.005)
        return i


def test_wait_fraction_and_autotune_for_real(caplog):
    loader = create_loader(Slow(), 4, num_workers=0, autotune=True, seed=0)
    assert loader.wait_fraction is None
    with caplog.at_level(logging.INFO, logger="datakit"):
        for _ in loader:
            time.sleep(0.01)  # the training step: 10 ms against 20 ms of loading per batch
        first = loader.history[0]
        assert (first.epoch, first.num_workers, first.batches) == (0, 0, 10)
        assert first.wait_fraction > 0.5 and loader.wait_fraction == first.wait_fraction
        assert 0 <= first.loop_cpu_s <= first.own_cpu_s and first.queued_s >= 0  # no workers: the loop's process alone
        assert 0 <= first.wait_cpu_s <= first.loop_cpu_s + 0.01  # loading inside next(): sleeps, little CPU
        expected = next_num_workers(first, usable_cpus(), loader.max_workers)
        assert loader.num_workers == expected
        for _ in loader:
            time.sleep(0.01)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("epoch 0: 10 batches; the loop waited for data ") and lines[0].endswith(
        "num_workers=0): input-bound"
    )
    second = loader.history[1]
    # loading waits (no CPU), so more workers help however busy the machine is: 20 ms against a 10 ms step
    assert second.num_workers == expected and expected >= 2
    assert lines[1].startswith(f"num_workers 0 -> {expected} for the next epoch (the loop waited ")
    assert second.wait_fraction < first.wait_fraction / 2
    # a fixed num_workers is not re-tuned
    fixed = create_loader(Slow(), 4, num_workers=0, seed=0)
    for _ in fixed:
        time.sleep(0.01)
    assert fixed.num_workers == 0 and fixed.wait_fraction > 0.5


def test_check_and_pack_read_the_bad_samples_file(tmp_path: Path, capsys):
    from datakit.cli import main
    from datakit.datasets import open_dataset, read_bad_samples
    from datakit.io import imwrite

    root = bad_folder(tmp_path)
    report = tmp_path / "bad_samples.json"
    ds = open_dataset(root, on_error="skip", max_bad_fraction=0.1, bad_samples=report)
    assert len([b for b in create_loader(ds, 4, num_workers=2, seed=0, train=False)]) == 10  # one epoch, merged
    assert [e["index"] for e in read_bad_samples(report)["bad"]] == [3, 17, 30]
    # sample 30 was fixed since: check and pack go by the file and do not read it again
    imwrite(root / "类" / "030_图.png", np.full((8, 8, 3), 150, np.uint8), mode="rgb")
    name = {i: str(next((root / "类").glob(f"{i:03d}_*"))) for i in BAD}
    assert main(["check", str(root), "--bad-samples", str(report), "--json", "--workers", "0"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert [p for p in problems if p.startswith("unreadable")] == [
        f"unreadable: {name[3]}: empty file (0 bytes) (listed in {report})",
        f"unreadable: {name[17]}: truncated JPEG (no end-of-image marker) (listed in {report})",
        f"unreadable: {name[30]}: {read_bad_samples(report)['bad'][2]['reason']} (listed in {report})",
    ]
    out = tmp_path / "packed.lmdb"
    assert main(["pack-lmdb", str(root), str(out), "--skip-bad", "--bad-samples", str(report), "--json", "-q",
                 "--workers", "1"]) == 0  # fmt: skip
    summary = json.loads(capsys.readouterr().out)
    assert summary["count"] == 37 and [s.split(": ")[0] for s in summary["skipped"]] == [name[3], name[17], name[30]]
    assert all(s.endswith(f"(listed in {report})") for s in summary["skipped"])
    assert sorted(open_dataset(out)[i][0][0, 0, 0] // 5 for i in range(37)) == [i for i in range(40) if i not in BAD]
    # without the file, the fixed sample is packed
    assert main(["pack-lmdb", str(root), str(tmp_path / "again.lmdb"), "--skip-bad", "--json", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["count"] == 38
    # the file of another dataset is refused, naming it
    assert main(["pack-lmdb", str(root), str(tmp_path / "x.lmdb"), "--bad-samples", str(report), "-q"]) == 2
    assert "--bad-samples lists samples to skip: pass --skip-bad with it" in capsys.readouterr().err
    other = tmp_path / "other"
    shutil.copytree(root, other)
    (other / "类" / "000_图.png").unlink()
    assert (
        main(["pack-lmdb", str(other), str(tmp_path / "y.lmdb"), "--skip-bad", "--bad-samples", str(report), "-q"]) == 2
    )
    assert f"{report}: lists samples of a dataset of 40, this one has 39" in capsys.readouterr().err


def test_a_bad_samples_file_matches_its_source_however_spelled_and_a_hand_edited_one_is_one_line(
    tmp_path: Path, capsys, monkeypatch
):
    # the attacks: a file written while training on /abs/path/data, used with `pack-lmdb data ...` from its parent,
    # was "another source?" (exit 2); a hand-edited file ('bad' missing, an index "3" or 3.0, a string for the
    # list) ended pack-lmdb and check in a KeyError/TypeError/IndexError traceback
    from datakit.cli import main
    from datakit.datasets import open_dataset

    root = bad_folder(tmp_path)
    report = tmp_path / "bad_samples.json"
    ds = open_dataset(root, on_error="skip", max_bad_fraction=0.1, bad_samples=report)
    assert len([b for b in create_loader(ds, 4, num_workers=0, seed=0, train=False)]) == 10
    monkeypatch.chdir(tmp_path)
    rel = os.path.relpath(root, tmp_path)
    (tmp_path / "link").symlink_to(root, target_is_directory=True)
    for src in (rel, "link"):
        assert main(["pack-lmdb", src, f"{src}.lmdb", "--skip-bad", "--bad-samples", str(report), "--json", "-q",
                     "--workers", "1"]) == 0  # fmt: skip
        assert json.loads(capsys.readouterr().out)["count"] == 37
        assert main(["check", src, "--bad-samples", str(report), "--json", "--workers", "0"]) == 1
        assert not [p for p in json.loads(capsys.readouterr().out)["problems"] if "not in this dataset" in p]
    # the attack: a file written while training on a relative path (open_dataset('data', ...) from the project's
    # folder), used from the file's own folder (`check ../data`): its relative names were read against the folder
    # check ran in, "not in this dataset", the bad files decoded again, pack-lmdb --skip-bad refused (exit 2)
    (tmp_path / "runs").mkdir()
    ds = open_dataset(rel, on_error="skip", max_bad_fraction=0.1, bad_samples="runs/bad.json")
    assert len([b for b in create_loader(ds, 4, num_workers=2, seed=0, train=False)]) == 10
    assert json.loads((tmp_path / "runs" / "bad.json").read_text(encoding="utf-8"))["bad"][0]["cwd"] == str(tmp_path)
    monkeypatch.chdir(tmp_path / "runs")
    assert main(["check", f"../{rel}", "--bad-samples", "bad.json", "--json", "--workers", "0"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert len([p for p in problems if p.startswith("unreadable")]) == 3
    assert not [p for p in problems if "not in this dataset" in p]
    assert main(["pack-lmdb", f"../{rel}", "r.lmdb", "--skip-bad", "--bad-samples", "bad.json", "--json", "-q",
                 "--workers", "1"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["count"] == 37
    monkeypatch.chdir(tmp_path)
    good = json.loads(report.read_text(encoding="utf-8"))
    edits = [
        ({"bad": None}, "'bad' must be a list of samples, got None"),
        ({"bad": "all"}, "'bad' must be a list of samples, got 'all'"),
        ({"bad": [3]}, "entry 0 of 'bad' must be an object with 'index', 'name' and 'reason', got 3"),
        ({"bad": [{**good["bad"][0], "index": "3"}]}, "entry 0 of 'bad': 'index' must be a whole number >= 0, got '3'"),
        ({"bad": [{**good["bad"][0], "index": 3.0}]}, "entry 0 of 'bad': 'index' must be a whole number >= 0, got 3.0"),
        (
            {"bad": [{**good["bad"][0], "index": True}]},
            "entry 0 of 'bad': 'index' must be a whole number >= 0, got True",
        ),
        ({"bad": [{"name": "x"}]}, "entry 0 of 'bad' has no 'index'"),
        ({"samples": "40"}, "'samples' must be a whole number >= 0, got '40'"),
        (
            {"bad": [{**good["bad"][0], "name": "a\x00.jpg"}]},
            "entry 0 of 'bad': 'name' holds a NUL character, which no file name holds: 'a\\x00.jpg'",
        ),
    ]
    edited = tmp_path / "edited.json"
    for change, why in edits:
        edited.write_text(json.dumps({**good, **change}), encoding="utf-8")
        want = f"{edited}: not a datakit bad-samples file ({why}); write it again by training with bad_samples=, or fix it by hand\n"
        assert main(["pack-lmdb", rel, "e.lmdb", "--skip-bad", "--bad-samples", str(edited), "-q"]) == 2
        assert capsys.readouterr().err == f"datakit pack-lmdb: error: {want}"
        assert main(["check", rel, "--bad-samples", str(edited), "--workers", "0", "-q"]) == 2
        assert capsys.readouterr().err == f"datakit check: error: {want}"
    assert not (tmp_path / "e.lmdb").exists()
    del good["bad"]
    edited.write_text(json.dumps(good), encoding="utf-8")
    assert main(["check", rel, "--bad-samples", str(edited), "--workers", "0", "-q"]) == 2
    assert "(no 'bad' list)" in capsys.readouterr().err


class _Raises(Dataset):
    epoch_independent = True

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            raise self.exc
        return torch.zeros(3, 4, 4), i


@pytest.mark.parametrize("workers", [0, 2])
def test_errors_from_a_worker_reach_the_loop_with_their_own_type_and_one_line(workers):
    for exc in (ValueError("sample 5 is odd"), SampleError("sample 5: 'x.jpg' is truncated"), OSError("disk gone")):
        loader = create_loader(_Raises(exc), 4, num_workers=workers, train=False)
        with pytest.raises(type(exc)) as e:
            list(loader)
        assert type(e.value) is type(exc) and str(e.value) == str(exc)
        if workers and not isinstance(exc, SampleError):  # the user's own: the worker's file and line stay shown
            cause = str(e.value.__cause__)
            assert cause.startswith("Caught ") and "in __getitem__\n    raise self.exc" in cause, cause
        loader.close()  # dropped instead, its workers take 5 s each to end when collected, in a later test
    # a KeyError's message is its key's repr: the same key again, the worker's traceback as its cause
    loader = create_loader(_Raises(KeyError("k")), 4, num_workers=2, train=False)
    with pytest.raises(KeyError) as e:
        list(loader)
    assert e.value.args == ("k",) and "Caught KeyError in DataLoader worker process" in str(e.value.__cause__)
    loader.close()


def _two_sizes(tmp_path: Path) -> Path:
    """A class folder of 8 images, 32 x 24 but for index 5 (图_5.png), 40 x 24; JPEGs and PNGs."""
    from datakit.io import imwrite
    from datakit.testing import synthetic_image

    root = tmp_path / "数据 集"
    (root / "类").mkdir(parents=True)
    for i in range(8):
        imwrite(root / "类" / f"图_{i}{'.png' if i % 2 else '.jpg'}", synthetic_image(40 if i == 5 else 32, 24, i),
                mode="rgb")  # fmt: skip
    return root


def _one_line(exc: BaseException) -> None:
    """``exc`` is one error of one line: no worker traceback, no chain for the user to read through."""
    import traceback

    shown = "".join(traceback.format_exception(exc))
    assert "\n" not in str(exc) and "Caught" not in shown, shown
    assert "direct cause" not in shown and "During handling" not in shown, shown


@pytest.mark.parametrize(("workers", "context"), [(0, None), (2, "fork"), (2, "spawn")])
def test_a_batch_of_mixed_sizes_names_the_dataset_index_and_file_of_the_odd_sample(tmp_path: Path, workers, context):
    # The attack: stack_collate named positions in the batch ("samples 0, 2, 3: ...; samples 1: ..."),
    # which find no file among a million; and from a worker behind DataLoader's traceback, as a chain.
    from datakit.collate import CollateError
    from datakit.datasets import open_dataset

    root = _two_sizes(tmp_path)
    kw = {"multiprocessing_context": context} if context else {}
    loader = create_loader(open_dataset(root), 4, num_workers=workers, train=False, **kw)
    with pytest.raises(CollateError) as e:
        list(loader)
    assert str(e.value) == (
        f"cannot stack images of different sizes into one batch (samples 4, 6, 7: (32, 24, 3); sample 5 "
        f"({root / '类' / '图_5.png'}): (40, 24, 3)); resize them to one size in the transform, or batch them "
        "with datakit.collate.pad_collate()"
    )
    _one_line(e.value)
    loader.close()


def test_a_subsets_collate_error_names_its_own_indices_and_the_files_behind_them(tmp_path: Path):
    # random_split's Subset has no name(): the file comes from the dataset inside it
    from datakit.datasets import open_dataset

    root = _two_sizes(tmp_path)
    subset = torch.utils.data.Subset(open_dataset(root), [7, 6, 5, 4, 3, 2, 1, 0])
    with pytest.raises(ValueError) as e:
        list(create_loader(subset, 4, num_workers=0, train=False))
    assert f"(samples 0, 1, 3: (32, 24, 3); sample 2 ({root / '类' / '图_5.png'}): (40, 24, 3))" in str(e.value)


class _Odd(Dataset):
    """16 samples for ``collate``: uint8 3 x 8 x 8 tensors but at index 13 (3 x 9 x 8 for stack, uint16 for pad,
    one channel for pad's channel count, boxes with a score column for detection)."""

    epoch_independent = True

    def __init__(self, collate: str) -> None:
        self.collate = collate

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int):
        odd = i == 13
        img = torch.zeros(3, 9 if odd and self.collate == "stack" else 8, 8, dtype=torch.uint8)
        if odd and self.collate == "dtype":
            img = img.to(torch.uint16)
        if odd and self.collate == "channels":
            img = img[:1]
        if self.collate == "detection":
            return img, {"boxes": torch.ones(1, 5 if odd else 4)}
        return img, i


@pytest.mark.parametrize("workers", [0, 2])
def test_every_collate_error_names_the_dataset_index_of_a_shuffled_sample(workers: int):
    # a tensor dataset without names: the index alone, found through a shuffled, seeded order
    from datakit.collate import CollateError, detection_collate, pad_collate

    for collate, fn, odd, rest in [
        ("stack", None, "sample 13: (3, 9, 8)", ": (3, 8, 8)"),
        ("dtype", pad_collate(), "sample 13: uint16", ": uint8"),
        ("channels", pad_collate(), "sample 13: 1 channel", ": 3 channels"),
        ("detection", detection_collate(), "", ""),
    ]:
        loader = create_loader(_Odd(collate), 4, num_workers=workers, seed=3, collate_fn=fn)
        order = loader.sampler.indices(0)
        k = order.index(13) // 4 * 4
        batch = order[k : k + 4]
        assert batch != sorted(batch)  # positions in the batch are not the indices
        others = "samples " + ", ".join(str(i) for i in batch if i != 13) + rest
        shown = "; ".join([odd, others] if batch[0] == 13 else [others, odd])
        with pytest.raises(CollateError) as e:
            list(loader)
        want = {
            "stack": f"cannot stack images of different sizes into one batch ({shown}); resize them to one size in "
            "the transform, or batch them with datakit.collate.pad_collate()",
            "dtype": f"cannot pad images of dtypes torch does not promote into one batch ({shown}); convert them to "
            "one dtype in the transform",
            "channels": f"cannot pad images with different channel counts into one batch ({shown}; arrays are read "
            "H x W x C, tensors C x H x W)",
            "detection": "detection_collate: sample 13 boxes must be N x 4 (x1, y1, x2, y2), got shape (1, 5)",
        }[collate]
        assert str(e.value) == want
        _one_line(e.value)
        loader.close()


def test_a_collate_error_of_ones_own_collate_fn_names_the_samples_too():
    # CollateError is how a collate function of one's own names samples: by position when called by hand
    from datakit.collate import CollateError, stack_collate

    def collate(batch):
        raise CollateError("my_collate: ", [1], " has no caption")

    with pytest.raises(CollateError, match=r"^my_collate: batch position 1 has no caption$"):
        collate([0, 1])
    with pytest.raises(CollateError, match=r"^my_collate: sample 5 has no caption$"):
        list(create_loader(list(range(8)), 4, num_workers=0, train=False, sampler=[6, 5, 4, 3], collate_fn=collate))
    # the batch [6, 5, 0, 4], sample 0 the odd one
    data = [(torch.zeros(2 if i == 0 else 1, 2), i) for i in range(8)]
    loader = create_loader(data, 4, num_workers=0, train=False, sampler=[6, 5, 0, 4])
    with pytest.raises(CollateError, match=r"\(samples 6, 5, 4: \(1, 2\); sample 0: \(2, 2\)\)"):
        list(loader)
    # reordered or rebuilt before stack_collate refuses it: positions in that list, never indices it does not hold
    for reordered, shown in [
        (lambda b: stack_collate(b[::-1]), "batch positions 0, 2, 3: (1, 2); batch position 1: (2, 2)"),
        (lambda b: stack_collate([(x, y) for x, y in b]), "batch positions 0, 1, 3: (1, 2); batch position 2: (2, 2)"),
    ]:
        loader = create_loader(data, 4, num_workers=0, train=False, sampler=[6, 5, 0, 4], collate_fn=reordered)
        with pytest.raises(CollateError) as e:
            list(loader)
        assert f"into one batch ({shown}); resize" in str(e.value)


@pytest.mark.parametrize("policy", ["substitute", "skip"])
def test_a_bad_jpeg_s_substitute_is_augmented_alike_however_the_run_met_it(tmp_path: Path, policy: str):
    # the crop is drawn from the JPEG header before the truncated data fails to decode: a process
    # meeting the file for the first time must not augment the substitute with shifted draws
    from datakit.datasets import open_dataset
    from datakit.io import encode_image, imwrite
    from datakit.testing import synthetic_image
    from datakit.transforms import train_pipeline

    (tmp_path / "c").mkdir()
    for i in range(12):
        imwrite(tmp_path / "c" / f"{i:02d}.jpg", synthetic_image(40, 48, seed=i), mode="rgb")
    (tmp_path / "c" / "05.jpg").write_bytes(encode_image(synthetic_image(40, 48), ".jpg")[:-300])

    def make(workers=0):
        ds = open_dataset(tmp_path, transform=train_pipeline(16), on_error=policy, max_bad_fraction=0.2)
        return create_loader(ds, 4, num_workers=workers, seed=1, infinite=True)

    ref = make()
    expected = [next(ref)[0] for _ in range(9)]  # three epochs of three batches, in one process
    for workers in (0, 2):
        for step in (1, 3, 4, 7):
            resumed = make(workers)  # a fresh process's view: the bad file not yet met
            resumed.load_state_dict({"epoch": step // 3, "step": step % 3})
            got = [next(resumed)[0] for _ in range(9 - step)]
            assert all(torch.equal(a, b) for a, b in zip(got, expected[step:])), (workers, step)


class _Stream(torch.utils.data.IterableDataset):
    """A stream that draws from NumPy in its workers (a shard reader with augmentations)."""

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        k, m = (info.id, info.num_workers) if info else (0, 1)
        for i in range(k, 10, m):
            yield int(np.random.randint(1 << 30)), i


@pytest.mark.parametrize("workers", [0, 2])
def test_an_iterable_dataset_loads_with_seed(workers: int):
    # seed= wrapped every dataset for per-sample seeds, and an iterable one has no indices:
    # "object of type '_Stream' has no len()"
    runs = [list(create_loader(_Stream(), 4, num_workers=workers, seed=3)) for _ in range(2)]
    assert sorted(i for _, y in runs[0] for i in y.tolist()) == list(range(10))
    if workers:  # the workers are seeded from seed= (in the main process the stream draws as the caller does)
        assert [x.tolist() for x, _ in runs[0]] == [x.tolist() for x, _ in runs[1]]


class _Drawing(Dataset):
    epoch_independent = True

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.rand(3, 2, 2), random.random()


@pytest.mark.parametrize("workers", [0, 2, "auto"])
def test_making_a_loader_leaves_the_callers_random_state_alone(workers, monkeypatch):
    # The attack: with workers, create_loader read sample 0 in the process (to size /dev/shm
    # batches) and its random crop drew from torch's generator: a model built after it got other
    # weights than with num_workers=0, on machines with less than 64 GiB of /dev/shm.
    import datakit.loader as dl

    monkeypatch.setattr(dl, "shm_free_bytes", lambda: 1 << 30)  # under 64 GiB: a sample is read to size batches
    seed_everything(0)
    want = (torch.rand(2).tolist(), random.random(), np.random.rand())
    seed_everything(0)
    loader = create_loader(_Drawing(), 4, num_workers=workers, seed=0)
    assert (torch.rand(2).tolist(), random.random(), np.random.rand()) == want
    loader.close()


def test_sampler_set_epoch_called_by_the_loop_is_the_epoch_served():
    # The attack: a job resumed at epoch 3 with DDP's idiom (loader.sampler.set_epoch(epoch)) got
    # epoch 0's order and draws, silently, since the loader told the sampler its own count.
    data = list(range(12))
    ref = create_loader(data, 4, num_workers=0, seed=5)
    orders = {}
    for e in range(6):
        orders[e] = [b.tolist() for b in ref]
    loader = create_loader(data, 4, num_workers=0, seed=5)
    for epoch in (3, 4):
        loader.sampler.set_epoch(epoch)
        assert [b.tolist() for b in loader] == orders[epoch]
    assert [b.tolist() for b in loader] == orders[5]  # and on from there without set_epoch
    loader.epoch = 1
    assert [b.tolist() for b in loader] == orders[1]
    # The attack: one look at a batch (next(iter(loader)), as a rank-0 sanity check does) and set_epoch(0) served
    # epoch 1, since 0 was what the loader had told the sampler: ranks that looked and ranks that did not
    # sharded different permutations, and samples went missing or twice per epoch.
    for device in (None, "cpu"):
        peeked = create_loader(data, 4, num_workers=0, seed=5, device=device)
        next(iter(peeked))
        for epoch in (0, 1, 1, 2):
            peeked.sampler.set_epoch(epoch)
            assert [b.tolist() for b in peeked] == orders[epoch]
        peeked.epoch = 4  # also through the device loader: it had no setter
        assert [b.tolist() for b in peeked] == orders[4]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_an_error_class_of_the_script_itself_reaches_the_loop_as_itself(tmp_path: Path, method: str):
    # The attack: an exception class defined in the training script (__main__) came as DataLoader's 14-line
    # "Caught BadRecord in DataLoader worker process 1", where one imported from a module came as itself.
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "from datakit import create_loader\n"
        "class BadRecord(Exception):\n    pass\n"
        "class Data(torch.utils.data.Dataset):\n"
        "    def __len__(self):\n        return 8\n"
        "    def __getitem__(self, i):\n"
        "        if i == 5:\n            raise BadRecord('record 5 has no label')\n"
        "        return torch.zeros(2), 0\n"
        "if __name__ == '__main__':\n"
        "    try:\n"
        f"        for _ in create_loader(Data(), 2, num_workers=2, seed=0, multiprocessing_context={method!r}):\n"
        "            pass\n"
        "    except BadRecord as exc:\n"
        "        print(repr(str(exc)))\n",
        encoding="utf-8",
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.stdout == "'record 5 has no label'\n", proc.stderr[-2000:]


def test_a_seed_or_worker_count_of_the_wrong_kind_is_named(monkeypatch):
    # The attack: seed='0' gave "can only concatenate str (not "int") to str", seed=1.5 "manual_seed expected a long",
    # DATAKIT_NUM_WORKERS=two "invalid literal for int()".
    for seed in ("0", 1.5, True):
        with pytest.raises(UsageError) as e:
            create_loader(Indexed(4), 2, num_workers=0, seed=seed)
        assert str(e.value) == f"seed must be a whole number (or None), got {seed!r}"
    monkeypatch.setenv("DATAKIT_NUM_WORKERS", "two")
    with pytest.raises(UsageError, match=r"^DATAKIT_NUM_WORKERS='two': must be a whole number >= 0 \(0: load in this "
                                         r"process\)$"):  # fmt: skip
        create_loader(Indexed(4), 2)
    monkeypatch.setenv("DATAKIT_NUM_WORKERS", "")  # `DATAKIT_NUM_WORKERS= python train.py`: unset, not refused
    assert create_loader(Indexed(4), 2, num_workers=1, seed=0).num_workers == 1


def test_a_receiver_interrupted_while_joined_is_still_known_to_run():
    # Thread.join() interrupted by Ctrl-C marks the thread ended while it runs on (CPython releases
    # its state lock on the way out): the loader then reset the DataLoader's iterator beside the
    # receiving thread, which took one worker's acknowledgement, and the reset waited forever
    import signal

    from datakit.loader import _Receiver

    gate = threading.Event()

    def blocked():
        gate.wait(30)
        yield 1

    r = _Receiver(blocked())
    r.close(wait=False)
    signal.signal(signal.SIGALRM, signal.default_int_handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(KeyboardInterrupt):
            r.join(5.0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
    assert r.join(0.1) is False  # still inside the iterator
    gate.set()
    assert r.join(5.0) is True


class FailsAtNine(Dataset):
    epoch_independent = True

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i):
        if i == 9:
            raise ValueError("sample 9 is bad")
        return torch.zeros(3), i


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_loader_dropped_after_a_worker_error_ends_its_workers_without_waiting_for_them(context, monkeypatch):
    # The attack: a data error caught in a notebook cell. The traceback holds the iterator in a reference cycle,
    # so the garbage collector finalizes it, after multiprocessing's finalizers have stopped the index queues'
    # feeder threads: the None that tells each worker to exit never left the main process, and torch's join
    # waited its 5 s timeout for each worker before terminating it (10 s of a frozen notebook for 2 workers).
    joined = []
    join = multiprocessing.process.BaseProcess.join

    def spy(self, timeout=None):
        join(self, timeout)
        joined.append((timeout, self.is_alive()))

    loader = create_loader(FailsAtNine(), 4, num_workers=2, seed=0, multiprocessing_context=context)
    with pytest.raises(ValueError, match="sample 9 is bad"):
        for _ in loader:
            pass
    workers = list(loader.loader._iterator._workers)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "join", spy)
    del loader, _
    gc.collect()
    assert joined and all(not alive for _, alive in joined), joined  # no join left a worker running at its timeout
    assert [w.exitcode is not None for w in workers] == [True, True]  # ended, and reaped


class Sized(Dataset):
    epoch_independent = True

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i):
        return torch.full((3, 30 + i, 40), i, dtype=torch.uint8), {"boxes": [[0, 0, 4, 4]], "labels": [i % 3]}


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_the_padding_collate_functions_go_to_spawn_workers(context):
    # the attack: pad_collate() and detection_collate() returned functions defined inside them, which do not
    # pickle: every spawn loader (the default start method on macOS and Windows) died before its first batch
    from datakit.collate import detection_collate, pad_collate

    kw = dict(num_workers=2, train=False, multiprocessing_context=context)
    batches = list(create_loader(Sized(), 4, collate_fn=pad_collate(size_divisor=8), **kw))
    assert [tuple(b[0].shape) for b in batches] == [(4, 3, 40, 40), (4, 3, 40, 40)]
    assert batches[1][2].tolist() == [[34, 40], [35, 40], [36, 40], [37, 40]]
    assert int(batches[1][0][3, 0, 37:].sum()) == 0 and int(batches[1][0][3, 0, :37].float().mean()) == 7
    images, targets = next(iter(create_loader(Sized(), 4, collate_fn=detection_collate(), **kw)))
    assert tuple(images.shape) == (4, 3, 64, 64)
    assert [t["labels"].tolist() for t in targets] == [[0], [1], [2], [0]]
    assert targets[3]["img_size"].tolist() == [33, 40] and targets[3]["pad_size"].tolist() == [64, 64]


def test_a_collate_error_names_the_file_read_in_place_of_an_unreadable_one(tmp_path):
    # the attack: on_error="skip" reads the next file in place of a corrupt one; the error named the corrupt
    # file as holding the other one's pixels (sample 10 (dog/02.jpg): (33, 32, 3), where dog/02.jpg is garbage)
    from datakit.collate import CollateError
    from datakit.datasets import open_dataset
    from datakit.io import imwrite

    for c in ("cat", "dog"):
        (tmp_path / c).mkdir()
        for k in range(8):
            imwrite(tmp_path / c / f"{k:02d}.jpg", np.full((33 if (c, k) == ("dog", 3) else 32, 32, 3), 100, np.uint8))
    (tmp_path / "dog" / "02.jpg").write_bytes(b"\xff\xd8\xff garbage")
    ds = open_dataset(tmp_path, on_error="skip", max_bad_fraction=0.5)
    loader = create_loader(ds, 16, num_workers=2, train=False)
    with pytest.raises(CollateError) as e:
        list(loader)
    loader.close()
    bad, odd = tmp_path / "dog" / "02.jpg", tmp_path / "dog" / "03.jpg"
    assert str(e.value) == (
        "cannot stack images of different sizes into one batch (samples 0, 1, 2, 3, 4, 5, ...: (32, 32, 3); "
        f"samples 10 ({odd}, read in place of unreadable {bad}), 11 ({odd}): (33, 32, 3)); resize them to one "
        "size in the transform, or batch them with datakit.collate.pad_collate()"
    )


def test_seeds_of_every_integer_type_and_size_torch_takes():
    # the attacks: seed=np.int64(3) passed the check and failed in torch.Generator().manual_seed (TypeError);
    # seed=2**64 - 1 ran epoch 0 and failed at epoch 1 (seed + epoch overflowed); 2**70 failed with torch's overflow
    plain = create_loader(Indexed(6), 3, num_workers=0, seed=3)
    ref = [int(i) for _ in range(2) for b in plain for i in b[0]]
    loader = create_loader(Indexed(6), 3, num_workers=0, seed=np.int64(3))
    assert [int(i) for _ in range(2) for b in loader for i in b[0]] == ref
    big = create_loader(Indexed(6), 3, num_workers=0, seed=2**64 - 1)
    epochs = [sorted(int(i) for b in big for i in b[0]) for _ in range(3)]
    assert epochs == [list(range(6))] * 3
    for bad in (2**64, 2**70, -(2**63) - 1):
        with pytest.raises(UsageError) as e:
            create_loader(Indexed(6), 3, num_workers=0, seed=bad)
        assert (
            str(e.value) == f"seed must fit in 64 bits (-2**63 to 2**64 - 1, what torch.manual_seed takes), got {bad}"
        )


def test_shuffle_with_a_sampler_is_refused():
    # the attack: shuffle=True beside sampler=SequentialSampler came out in order, the shuffle dropped silently
    ds = Indexed(6)
    with pytest.raises(UsageError) as e:
        create_loader(ds, 2, num_workers=0, sampler=torch.utils.data.SequentialSampler(ds), shuffle=True)
    assert str(e.value) == ("shuffle=True with sampler=SequentialSampler: the sampler orders the samples itself, so the "
                            "shuffle would be ignored; give one or the other")  # fmt: skip
    loader = create_loader(ds, 2, num_workers=0, sampler=torch.utils.data.SequentialSampler(ds), shuffle=False)
    assert [b[0].tolist() for b in loader] == [[0, 1], [2, 3], [4, 5]]


@pytest.mark.parametrize(
    "state",
    [
        {},
        {"step": 2},
        "epoch 1",
        {"epoch": "1", "step": 0},
        {"epoch": 1.5, "step": 0},
        {"epoch": True, "step": 0},
        {"epoch": -1, "step": 0},
    ],  # fmt: skip
)
def test_what_is_no_loader_state_is_refused_in_one_line(state):
    # the attack: {} and {"step": 2} gave a bare KeyError 'epoch', a string a TypeError about string indices
    loader = create_loader(Indexed(12), 4, num_workers=0, seed=1, infinite=True)
    with pytest.raises(UsageError) as e:
        loader.load_state_dict(state)
    if isinstance(state, dict):
        assert str(e.value) == ("not a loader state (it needs 'epoch' and 'step', whole numbers >= 0, as state_dict() "
                                f"gives them): {state!r}")  # fmt: skip
    else:
        assert str(e.value) == f"not a loader state (a dict as state_dict() gives, with 'epoch' and 'step'): {state!r}"


@pytest.mark.parametrize("key", ["world", "batch_size"])
def test_a_state_of_no_ranks_or_no_batch_size_is_refused_in_one_line(key: str):
    # the attack: an edited state with world 0 raised a bare ZeroDivisionError; with batch_size 0 it was taken, and
    # the next batch was the epoch's first instead of its fourth (three batches served twice)
    loader = create_loader(Indexed(12), 4, num_workers=0, seed=1, infinite=True)
    state = {"epoch": 0, "step": 3, "sample": 12 if key == "world" else 0, key: 0}
    with pytest.raises(UsageError) as e:
        loader.load_state_dict(state)
    assert str(e.value) == f"not a loader state: '{key}' must be a whole number >= 1, got 0"
    assert next(loader)[0].tolist() == create_loader(Indexed(12), 4, num_workers=0, seed=1).sampler.indices(0)[:4]


class SlowFirst(Dataset):
    """Samples whose indices are ``slow`` take a second: their batch comes back after the ones behind it."""

    epoch_independent = True

    def __init__(self, n: int, slow: set[int]) -> None:
        self.n, self.slow = n, slow

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if int(i) in self.slow:
            time.sleep(1.0)
        return int(i)


def test_a_mid_epoch_state_of_a_loader_out_of_order_is_refused_and_one_at_an_epochs_end_is_given():
    # the attack: in_order=False, the first batch's sample slow: batches 1, 3 and 5 of the epoch's order came first,
    # and the state said "12 samples served", so the resumed loop served batches 3 and 5 twice and 0 and 2 never
    order = create_loader(Indexed(40), 4, num_workers=0, seed=0).sampler.indices(0)
    loader = create_loader(SlowFirst(40, {order[0]}), 4, num_workers=2, seed=0, infinite=True, in_order=False,
                           multiprocessing_context="fork")  # fmt: skip
    try:
        assert loader.state_dict()["step"] == 0  # nothing served yet: the epoch's start is a state
        served = [next(loader).tolist() for _ in range(3)]
        assert served[0] != order[:4]  # out of order: the slow batch is not the first
        with pytest.raises(UsageError) as e:
            loader.state_dict()
        assert str(e.value) == (
            "state_dict(): this loader was made with in_order=False, so its batches arrive as the workers finish "
            "them and the 3 served of epoch 0 are not its first ones; a state saved mid-epoch cannot say which were "
            "served. Make it with in_order=True (the default) to resume mid-epoch, or save at an epoch's end"
        )
        for _ in range(7):
            served.append(next(loader).tolist())
        assert sorted(i for b in served for i in b) == list(range(40))
        assert loader.state_dict()["sample"] == 40  # the whole epoch: the next one begins, in any shape
    finally:
        loader.close()
    for workers in (0, 1):  # in order whatever in_order says: the state is given, and exact
        one = create_loader(Indexed(40), 4, num_workers=workers, seed=0, infinite=True, in_order=False)
        try:
            assert [next(one)[0].tolist() for _ in range(3)] == [order[k : k + 4] for k in (0, 4, 8)]
            assert one.state_dict()["sample"] == 12
        finally:
            one.close()


def test_a_state_past_its_epoch_is_refused_and_one_at_its_end_goes_on_from_the_next():
    # the attacks: {"epoch": 0, "step": 50} for an epoch of 3 batches went on from epoch 1 without a word; a state
    # saved after a whole epoch, loaded for a dataset one image larger, was refused as "saved mid-epoch"
    loader = create_loader(Indexed(12), 4, num_workers=0, seed=1, infinite=True)
    with pytest.raises(UsageError) as e:
        loader.load_state_dict({"epoch": 0, "step": 50})
    assert str(e.value) == ("not a loader state: it says 200 samples of epoch 0 were served, and an epoch of 12 "
                            "samples over 1 rank(s) holds 12 per rank")  # fmt: skip
    run = create_loader(Indexed(12), 4, num_workers=0, seed=1, infinite=True)
    for _ in range(3):
        next(run)
    state = run.state_dict()
    assert state == {
        "epoch": 0,
        "step": 3,
        "sample": 12,
        "batch_size": 4,
        "samples": 12,
        "world": 1,
        "seed": 1,
        "shuffle": True,
        "order": 2,
    }
    larger = create_loader(Indexed(13), 4, num_workers=0, seed=1, infinite=True)
    larger.load_state_dict(state)
    fresh = create_loader(Indexed(13), 4, num_workers=0, seed=1, infinite=True)
    fresh.load_state_dict({"epoch": 1, "step": 0})
    assert [next(larger)[0].tolist() for _ in range(2)] == [next(fresh)[0].tolist() for _ in range(2)]
    assert larger.epoch == 1


def test_a_short_last_batch_counts_as_a_step_and_its_steps_alone_resume_at_the_next_epoch():
    # the attack: 11 samples in batches of 2, all 6 batches served (the last one of 1): state_dict() said step 5;
    # {"epoch": 0, "step": 6}, the steps the loop counted, was refused as 12 samples of an epoch of 11
    run = create_loader(Indexed(11), 2, num_workers=0, seed=1, infinite=True, drop_last=False)
    served = [next(run)[0].tolist() for _ in range(6)]
    assert [len(b) for b in served] == [2, 2, 2, 2, 2, 1]
    assert run.state_dict() == {
        "epoch": 0,
        "step": 6,
        "sample": 11,
        "batch_size": 2,
        "samples": 11,
        "world": 1,
        "seed": 1,
        "shuffle": True,
        "order": 2,
    }
    expected = next(run)[0].tolist()
    for state in ({"epoch": 0, "step": 6}, {"epoch": 0, "step": 6, "sample": 11}):
        resumed = create_loader(Indexed(11), 2, num_workers=0, seed=1, infinite=True, drop_last=False)
        resumed.load_state_dict(state)
        assert next(resumed)[0].tolist() == expected
        assert resumed.state_dict() == {"epoch": 1, "step": 1, "sample": 2, "batch_size": 2, "samples": 11,
                                        "world": 1, "seed": 1, "shuffle": True, "order": 2}  # fmt: skip
    with pytest.raises(UsageError) as e:
        resumed.load_state_dict({"epoch": 0, "step": 7})
    assert str(e.value) == ("not a loader state: it says 14 samples of epoch 0 were served, and an epoch of 11 "
                            "samples over 1 rank(s) holds 11 per rank")  # fmt: skip


@pytest.mark.parametrize(("n", "drop_last"), [(21, None), (23, True)])
def test_a_whole_epoch_whose_last_batch_was_dropped_goes_on_with_the_next_in_any_shape(n: int, drop_last):
    # the attack: 21 samples in batches of 4 (the batch of one dropped), or 23 with drop_last=True: after the whole
    # epoch the state said sample 20 of 21, and a loader of 25 samples refused it as "saved mid-epoch"
    kw = {} if drop_last is None else {"drop_last": drop_last}
    run = create_loader(Indexed(n), 4, num_workers=0, seed=1, infinite=True, **kw)
    for _ in range(len(run)):
        next(run)
    state = run.state_dict()
    assert state == {
        "epoch": 0,
        "step": 5,
        "sample": n,
        "batch_size": 4,
        "samples": n,
        "world": 1,
        "seed": 1,
        "shuffle": True,
        "order": 2,
    }
    larger = create_loader(Indexed(25), 4, num_workers=0, seed=1, infinite=True)
    larger.load_state_dict(state)
    fresh = create_loader(Indexed(25), 4, num_workers=0, seed=1, infinite=True)
    fresh.load_state_dict({"epoch": 1, "step": 0})
    assert next(larger)[0].tolist() == next(fresh)[0].tolist() and larger.epoch == 1
    same = create_loader(Indexed(n), 4, num_workers=0, seed=1, infinite=True, **kw)
    same.load_state_dict(state)
    assert next(same)[0].tolist() == next(run)[0].tolist()  # the next epoch's first batch, as the run goes on


@pytest.mark.parametrize("device", [None, "cpu"])
def test_the_state_of_a_finite_loader_names_the_loader_that_has_one(device):
    # the attack: create_loader(...).state_dict() gave "'DataLoader' object has no attribute 'state_dict'"
    loader = create_loader(Indexed(4), 2, num_workers=0, device=device)
    for name in ("state_dict", "load_state_dict"):
        with pytest.raises(AttributeError) as e:
            getattr(loader, name)() if name == "state_dict" else loader.load_state_dict({"epoch": 1, "step": 0})
        assert str(e.value) == (f"{name}() needs create_loader(..., infinite=True): a finite loader's epoch is "
                                "chosen with loader.epoch = e")  # fmt: skip


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_a_prefetch_factor_that_reads_nothing_ahead_is_refused(bad):
    # the attack: prefetch_factor=0 with workers was turned into 4 without a word
    with pytest.raises(UsageError) as e:
        create_loader(Indexed(4), 2, num_workers=1, prefetch_factor=bad)
    assert str(e.value) == f"prefetch_factor must be a whole number >= 1 (batches each worker reads ahead), got {bad!r}"


def test_the_workers_of_a_failed_epoch_go_with_it(tmp_path: Path):
    # before: with persistent_workers=False each failed epoch left its two workers alive until a garbage collection:
    # 2, 4, 6, ... 16 processes after 8 epochs (60 after 30)
    from datakit.datasets import open_dataset
    from datakit.transforms import eval_pipeline

    root = bad_folder(tmp_path, n=12)
    ds = open_dataset(root, transform=eval_pipeline(8, 8))
    loader = create_loader(ds, 4, num_workers=2, seed=0, train=False, persistent_workers=False)
    before = {p.pid for p in multiprocessing.active_children()}  # an earlier test's, which may end meanwhile
    for _ in range(4):
        with pytest.raises(SampleError, match=r"^sample 3: "):
            for _batch in loader:
                pass
        assert {p.pid for p in multiprocessing.active_children()} - before == set()  # none of this epoch's left


UNEVEN = r"""
import os, sys, time
import torch.distributed as dist
from torch.utils.data import Dataset
import datakit.loader as L
from datakit.errors import DataError
from datakit.loader import create_loader

class Sized(Dataset):
    def __init__(self, n, source): self.n, self.source = n, source
    def __len__(self): return self.n
    def __getitem__(self, i): return i

L._source_of = lambda ds: ds.source  # as two nodes' copies of one folder, at one path
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['PORT']}", rank=rank, world_size=2)
start = time.monotonic()
if rank == 0:
    create_loader(Sized(64, "calibration"), 2, num_workers=0, seed=0)  # made on rank 0 alone
order = [Sized(10, "a"), Sized(50, "b")]
for ds in order if rank == 0 else order[::-1]:  # made in another order on each rank
    create_loader(ds, 2, num_workers=0, seed=0)
dist.barrier()
waited = time.monotonic() - start
try:
    create_loader(Sized(100 + rank, "train"), 4, num_workers=0, seed=0)  # rank 1's copy holds one more file
    print("accepted")
except DataError as exc:
    print(exc)
dist.barrier()
print("waited", "under 10 s" if waited < 10 else f"{waited:.0f} s")
dist.destroy_process_group()
import os as _os, sys as _sys  # (gloo's threads, freed in the interpreter's teardown, abort it now and then)
_sys.stdout.flush(), _sys.stderr.flush()
_os._exit(0)
"""


def test_ranks_whose_datasets_differ_in_length_are_refused():
    # the attack: rank 1's folder held one file more (a copy still running on its node): each rank sharded its own
    # list, and a quarter of the samples were read twice, a quarter never, silently (or DDP waited for ever)
    want = ("the ranks' datasets differ in length (rank 0: 100, rank 1: 101): each rank shards its own list, so "
            "samples would be read twice or never; give every rank the same data (the same files and labels)\n")  # fmt: skip
    outs = _two_ranks(UNEVEN)
    assert f"{want}waited under 10 s\n" in outs  # the rank that wrote its length second sees the other's (or both)
    assert all(o in (f"{want}waited under 10 s\n", "accepted\nwaited under 10 s\n") for o in outs), outs


def test_a_training_loader_made_before_the_ranks_join_says_it_is_not_sharded(monkeypatch, caplog):
    # the attack: under torchrun, a loader made before init_process_group gave every rank every sample, silently
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    with caplog.at_level(logging.WARNING, logger="datakit"):
        create_loader(Indexed(4), 2, num_workers=0)
    assert caplog.messages == [
        "WORLD_SIZE=2 (torchrun) but no torch.distributed process group is initialised yet: this loader is not "
        "sharded, every rank reads every sample; make it after "
        "torch.distributed.init_process_group (or pass distributed=False to mean it)"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="datakit"):
        create_loader(Indexed(4), 2, num_workers=0, distributed=False)
        create_loader(Indexed(4), 2, num_workers=0, train=False)
    assert caplog.messages == []


@pytest.mark.filterwarnings("ignore:sampler=WeightedRandomSampler has no generator")  # (its own test: said)
@pytest.mark.parametrize("sampler", ["sequential", "weighted"])
def test_seed_with_a_sampler_of_ones_own_in_the_main_process_draws_on_from_batch_to_batch(sampler: str):
    # the attack: seed=0, sampler= of the user's, num_workers=0 (or DATAKIT_NUM_WORKERS=0 to debug): the caller's
    # random states were put back after every batch, and the user's sampler gives plain ints, which seed nothing,
    # so every batch drew the same numbers at the same positions, in every epoch: the same crops and flips
    from torch.utils.data import SequentialSampler, WeightedRandomSampler

    own = SequentialSampler(range(12)) if sampler == "sequential" else WeightedRandomSampler([1.0] * 12, 12)
    loader = create_loader(Indexed(12), 4, num_workers=0, seed=0, sampler=own)
    draws = []
    for _ in range(2):
        for idx, a, b, c in loader:
            assert len(idx) == 4
            draws += [*a.tolist(), *b.tolist(), *c.tolist()]
    assert len(draws) == 72 and len(set(draws)) == 72


def test_seed_with_a_sampler_without_a_generator_says_its_order_is_not_seeded():
    # the attack: seed=0 with WeightedRandomSampler(...) made without generator=: a new order every run (torch seeds
    # its global generator at random at start-up, and seed= does not seed it), without a word
    from torch.utils.data import WeightedRandomSampler

    with pytest.warns(UserWarning) as said:
        create_loader(Indexed(8), 4, num_workers=0, seed=3, sampler=WeightedRandomSampler([1.0] * 8, 8))
    assert [str(w.message) for w in said] == [
        "sampler=WeightedRandomSampler has no generator of its own: it draws its order from torch's global generator, "
        "which seed= does not seed, so the order (and each sample's draws with it) differs from run to run; make it "
        "with generator=torch.Generator().manual_seed(3)"
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        seeded = WeightedRandomSampler([1.0] * 8, 8, generator=torch.Generator().manual_seed(3))
        create_loader(Indexed(8), 4, num_workers=0, seed=3, sampler=seeded)
        create_loader(Indexed(8), 4, num_workers=0, sampler=WeightedRandomSampler([1.0] * 8, 8))  # no seed asked


def test_seed_and_generator_together_and_a_train_that_is_no_bool_are_refused():
    # the attack: seed=0 with generator= gave seed=0's order and draws, the generator silently unused; train="no"
    # made a training loader (a non-empty string is true)
    with pytest.raises(UsageError) as e:
        create_loader(Indexed(8), 4, num_workers=0, seed=0, generator=torch.Generator().manual_seed(5))
    assert str(e.value) == ("give seed= or generator=, not both: with seed= the order and every sample's random draws "
                            "come from the seed, and the generator would change nothing")  # fmt: skip
    with pytest.raises(UsageError) as e:
        create_loader(Indexed(8), 4, num_workers=0, train="no")
    assert str(e.value) == "train must be True or False, got 'no'"
    assert len(create_loader(Indexed(8), 4, num_workers=0, train=1)) == 2  # 0 and 1 as torch scripts write them
    order = [b[0].tolist() for b in create_loader(Indexed(8), 4, num_workers=0, generator=torch.Generator())]
    assert sorted(sum(order, [])) == list(range(8))  # a generator alone is torch's own argument, as before


def test_a_bad_samples_report_that_cannot_be_written_is_one_line_naming_it(tmp_path: Path):
    # the attack: bad_samples= under a file, or on /proc: FileExistsError from mkdir, or a FileNotFoundError naming
    # '/proc/.bad.json.15827.tmp', a temporary name the user never gave
    from datakit.datasets import open_dataset

    root = bad_folder(tmp_path)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UsageError) as e:
        open_dataset(root, on_error="skip", bad_samples=tmp_path / "afile" / "bad.json")
    assert str(e.value) == (f"bad_samples={str(tmp_path / 'afile' / 'bad.json')!r}: cannot be written (its folder "
                            f"{str(tmp_path / 'afile')!r} is a file)")  # fmt: skip
    with pytest.raises(UsageError) as e:
        open_dataset(root, on_error="skip", bad_samples="/proc/bad.json")
    assert str(e.value) == "bad_samples='/proc/bad.json': cannot be written (No such file or directory)"
    # a folder not made yet is made, as index_cache= makes its own (the documented runs/exp1/bad_samples.json); one
    # under a file, however deep, is still refused
    ds = open_dataset(root, on_error="skip", bad_samples=tmp_path / "runs" / "exp1" / "bad.json")
    assert (tmp_path / "runs" / "exp1" / "bad.json").is_file() and len(ds) == 40
    with pytest.raises(UsageError) as e:
        open_dataset(root, on_error="skip", bad_samples=tmp_path / "afile" / "sub" / "bad.json")
    assert str(e.value) == (f"bad_samples={str(tmp_path / 'afile' / 'sub' / 'bad.json')!r}: cannot be written (its "
                            f"folder {str(tmp_path / 'afile')!r} is a file)")  # fmt: skip


def test_a_bad_samples_path_that_is_a_pipe_or_a_folder_is_refused_not_waited_on(tmp_path: Path):
    # the attack: --bad-samples on a FIFO with no writer: reading it blocked forever (check, pack-lmdb), and a
    # dataset given one as its report waited on it too; a folder failed later, in a worker
    from datakit.datasets import open_dataset, read_bad_samples

    root = bad_folder(tmp_path)
    fifo = tmp_path / "bad.json"
    os.mkfifo(fifo)
    with pytest.raises(UsageError) as e:
        read_bad_samples(fifo)
    assert str(e.value) == f"{fifo}: a pipe, not a bad-samples file (the JSON file training wrote)"
    with pytest.raises(UsageError) as e:
        open_dataset(root, on_error="skip", bad_samples=fifo)
    assert str(e.value) == (f"bad_samples={str(fifo)!r}: a pipe, not a file: the bad samples are written to a JSON "
                            "file of that name")  # fmt: skip
    (tmp_path / "runs").mkdir()
    with pytest.raises(UsageError) as e:
        open_dataset(root, on_error="skip", bad_samples=tmp_path / "runs")
    assert str(e.value) == (f"bad_samples={str(tmp_path / 'runs')!r}: a folder, not a file: the bad samples are "
                            "written to a JSON file of that name")  # fmt: skip
    for command in (["check", str(root)], ["pack-lmdb", str(root), str(tmp_path / "out.lmdb"), "--skip-bad"]):
        run = subprocess.run([sys.executable, "-m", "datakit.cli", *command, "--bad-samples", str(fifo)],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert run.returncode == 2, run.stderr
        assert run.stderr == (f"datakit {command[0]}: error: {fifo}: a pipe, not a bad-samples file (the JSON file "
                              "training wrote)\n")  # fmt: skip
    assert not (tmp_path / "out.lmdb").exists()


def test_a_mid_epoch_state_of_another_seed_or_order_is_refused():
    # the attack: a state saved mid-epoch with seed=0, loaded into a loader with seed=1 (or unshuffled): accepted,
    # and the rest of the epoch served some samples twice and others never
    run = create_loader(Indexed(12), 4, num_workers=0, seed=0, infinite=True)
    next(run)
    state = run.state_dict()
    assert (state["seed"], state["shuffle"]) == (0, True)
    other = create_loader(Indexed(12), 4, num_workers=0, seed=1, infinite=True)
    with pytest.raises(UsageError) as e:
        other.load_state_dict(state)
    assert str(e.value) == (
        "the state was saved mid-epoch with seed=0, this loader has seed=1: that epoch's order is another here, so "
        "resuming would serve some samples twice and skip others; give the loader seed= as before (an unseeded "
        "loader draws its order anew each run), or load {'epoch': 1, 'step': 0} to go on from the next epoch"
    )
    plain = create_loader(Indexed(12), 4, num_workers=0, seed=0, infinite=True, train=False)
    with pytest.raises(UsageError, match=r"^the state was saved mid-epoch with shuffle=True, this loader has "
                                         r"shuffle=False"):  # fmt: skip
        plain.load_state_dict(state)
    other.load_state_dict({"epoch": 1, "step": 0})  # the next epoch: any order
    same = create_loader(Indexed(12), 4, num_workers=0, seed=0, infinite=True)
    same.load_state_dict(state)
    assert next(same)[0].tolist() == next(run)[0].tolist()


def test_datasets_of_other_classes_joined_through_a_dataset_of_the_callers_are_said(tmp_path: Path, caplog):
    # the attack: ConcatDataset([A, Wrap(B)]) and Wrap(A + B), Wrap passing __getitem__ on, ran silently with 猫 and
    # 鸟 as one class 1, where A + B is refused; a wrapper may map the targets itself, so it is said, not refused
    import logging

    from datakit.datasets import open_dataset
    from datakit.io import imwrite
    from datakit.testing import synthetic_image
    from datakit.transforms import eval_pipeline

    Wrap = PassThrough

    for part, classes in (("A", ["狗", "猫"]), ("B", ["狗", "鸟"])):
        for c, name in enumerate(classes):
            (tmp_path / part / name).mkdir(parents=True)
            imwrite(tmp_path / part / name / f"{c}.png", synthetic_image(16, 16, seed=c), mode="rgb")
    a, b = (open_dataset(tmp_path / p, transform=eval_pipeline(8, 8)) for p in "AB")
    said = ("the ConcatDataset's datasets number their classes differently: class 1 is '猫' in the first and '鸟' in "
            "dataset 1 (2 and 2 classes), so one index would be two classes, unless a dataset of yours around them "
            "maps the targets; open each with the same classes=[...] (all of their classes, in one order)")  # fmt: skip
    for joined in (
        torch.utils.data.ConcatDataset([a, Wrap(b)]),
        Wrap(a + b),
        torch.utils.data.Subset(Wrap(a + b), [0]),
    ):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="datakit"):
            create_loader(joined, 2, train=False, num_workers=0)
        assert [r.getMessage() for r in caplog.records] == [said]
    caplog.clear()
    onto = Wrap(b)
    onto.classes = ["狗", "猫"]  # a wrapper that numbers b's targets as a's (its own classes): nothing said
    with caplog.at_level(logging.WARNING, logger="datakit"):
        create_loader(Wrap(a + a), 2, train=False, num_workers=0)  # the same classes: nothing said
        create_loader(torch.utils.data.ConcatDataset([a, onto]), 2, train=False, num_workers=0)
    assert caplog.records == []


def test_datasets_joined_with_other_classes_are_refused(tmp_path: Path):
    # the attack: part A has classes 狗, 猫 and part B 狗, 鸟; joined, 猫 and 鸟 trained as one class 1, silently
    from datakit.datasets import open_dataset
    from datakit.io import imwrite
    from datakit.testing import synthetic_image
    from datakit.transforms import eval_pipeline

    for part, classes in (("A", ["狗", "猫"]), ("B", ["狗", "鸟"])):
        for c, name in enumerate(classes):
            (tmp_path / part / name).mkdir(parents=True)
            imwrite(tmp_path / part / name / f"{c}.png", synthetic_image(16, 16, seed=c), mode="rgb")
    a, b = (open_dataset(tmp_path / p, transform=eval_pipeline(8, 8)) for p in "AB")
    with pytest.raises(UsageError) as e:
        create_loader(a + b, 2, train=False, num_workers=0)
    assert str(e.value) == (
        "the ConcatDataset's datasets number their classes differently: class 1 is '猫' in the first and '鸟' in "
        "dataset 1 (2 and 2 classes), so one index would be two classes; open each with the same classes=[...] "
        "(all of their classes, in one order), or map their targets with target_transform="
    )
    with pytest.raises(UsageError, match=r"^the ConcatDataset's datasets number their classes differently: class 1 "):
        create_loader(torch.utils.data.ConcatDataset([a, torch.utils.data.Subset(b, [0, 1])]), 2, num_workers=0)
    with pytest.raises(UsageError, match=r"^the ConcatDataset's datasets number their classes differently: class 1 "):
        create_loader(torch.utils.data.Subset(a + b, [0, 1, 2, 3]), 2, num_workers=0)  # random_split(a + b)
    from datakit.transforms import ToDtype

    a.target_transform = ToDtype()  # keeps each index's class: still checked
    with pytest.raises(UsageError, match=r"^the ConcatDataset's datasets number their classes differently: class 1 "):
        create_loader(a + b, 2, num_workers=0)
    every = ["狗", "猫", "鸟"]
    a, b = (open_dataset(tmp_path / p, transform=eval_pipeline(8, 8), classes=every) for p in "AB")
    labels = torch.cat([t for _, t in create_loader(a + b, 2, train=False, num_workers=0)])
    assert labels.tolist() == [0, 1, 0, 2]
    a = open_dataset(tmp_path / "A", transform=eval_pipeline(8, 8))
    b = open_dataset(tmp_path / "B", transform=eval_pipeline(8, 8), target_transform=functools.partial(operator.add, 2))
    labels = torch.cat([t for _, t in create_loader(a + b, 2, train=False, num_workers=0)])
    assert labels.tolist() == [0, 1, 2, 3]  # a mapping of the caller's own on a part: theirs


def _shapes_and_workers(loader) -> tuple[set, list]:
    """One epoch of ``loader``: the image shapes its batches held, and the PIDs of the workers that read them."""
    shapes = {tuple(images.shape[1:]) for images, _ in loader}
    return shapes, sorted(w.pid for w in loader.loader._iterator._workers)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_transform_changed_between_epochs_reaches_the_persistent_workers(class_folder: Path, context: str):
    # the attack: progressive resizing (ds.transform = train_pipeline(32) from epoch 1) worked with torch's
    # DataLoader and was silently ignored by create_loader's persistent workers, which kept the old transform
    from datakit.datasets import open_dataset
    from datakit.transforms import train_pipeline

    ds = open_dataset(class_folder, transform=train_pipeline(16))
    loader = create_loader(ds, 4, num_workers=2, seed=0, multiprocessing_context=context)
    epoch = functools.partial(_shapes_and_workers, loader)

    shapes, pids = epoch()
    assert shapes == {(3, 16, 16)}
    shapes, same = epoch()
    assert shapes == {(3, 16, 16)} and same == pids  # unchanged: the same workers go on
    ds.transform = train_pipeline(16)  # built again from a schedule, the same: no restart
    assert epoch() == ({(3, 16, 16)}, pids)
    ds.transform = train_pipeline(8)
    shapes, new = epoch()
    assert shapes == {(3, 8, 8)} and set(new).isdisjoint(pids)
    ds.transform.crop.size = (12, 12)  # changed in place
    assert epoch()[0] == {(3, 12, 12)}
    ds.target_transform = functools.partial(operator.add, 100)  # picklable: spawn pickles it
    assert {int(t) for _, labels in loader for t in labels} == {100, 101, 102}
    loader.close()


class _OwnTransform:
    """A transform of the caller's own holding a random generator, a lock and a lambda: pickle stores none of the
    last two, and the main process drawing from the generator between epochs changes nothing the workers hold."""

    def __init__(self, size: int) -> None:
        self.size, self.rng, self.lock, self.to_chw = size, np.random.default_rng(0), threading.Lock(), lambda a: a

    def __call__(self, img):
        return torch.from_numpy(np.ascontiguousarray(img[: self.size, : self.size])).permute(2, 0, 1)


@pytest.mark.filterwarnings("ignore:the dataset's transform holds a random generator")  # (its own test: said)
def test_transforms_that_do_not_pickle_or_draw_in_the_main_process_restart_workers_only_when_changed(class_folder):
    from datakit.datasets import open_dataset

    ds = open_dataset(class_folder, transform=_OwnTransform(12))
    loader = create_loader(ds, 4, num_workers=2, seed=0, train=False)
    epoch = functools.partial(_shapes_and_workers, loader)

    shapes, pids = epoch()
    assert shapes == {(3, 12, 12)}
    ds.transform.rng.random(5)  # the loop draws from it between epochs
    assert epoch() == ({(3, 12, 12)}, pids)
    ds.transform.size = 8  # changed in place, in a transform pickle cannot store (the lock, the lambda)
    shapes, new = epoch()
    assert shapes == {(3, 8, 8)} and set(new).isdisjoint(pids)
    loader.close()


def test_a_dataset_option_given_to_create_loader_says_where_it_belongs():
    # the attack: create_loader(ds, 16, on_error="skip") (the README's table lists both on one row): torch's bare
    # "DataLoader.__init__() got an unexpected keyword argument 'on_error'"; a typo (shufle=) the same
    with pytest.raises(UsageError) as e:
        create_loader(Indexed(4), 2, num_workers=0, on_error="skip")
    assert str(e.value) == ("create_loader got on_error=, an option of the dataset: give it where the dataset is "
                            "opened, open_dataset(..., on_error=...), and the loader's workers read it from there")  # fmt: skip
    with pytest.raises(TypeError) as e:  # a UsageError, and the TypeError Python gives an unknown keyword
        create_loader(Indexed(4), 2, num_workers=0, shufle=True)
    assert isinstance(e.value, UsageError)
    assert str(e.value) == (
        "create_loader got an unknown argument shufle= (besides its own, it passes on what torch's DataLoader takes: "
        "batch_sampler, batch_size, collate_fn, drop_last, generator, in_order, multiprocessing_context, num_workers, "
        "persistent_workers, pin_memory, pin_memory_device, prefetch_factor, sampler, shuffle, timeout, "
        "worker_init_fn)"
    )
    assert [b[0].tolist() for b in create_loader(Indexed(4), 2, num_workers=0, train=False, in_order=True)] == [
        [0, 1], [2, 3]
    ]  # fmt: skip


def test_the_pipelines_own_statistics_normalise_the_batches(class_folder: Path, caplog, monkeypatch):
    # the attack: train_pipeline(32, mean=(0.5,)*3, std=(0.25,)*3) (a port of Normalize(mean, std)) with the uint8
    # default: create_loader(device="cpu") normalised with ImageNet's statistics, without a word
    import datakit.loader
    from datakit import open_dataset
    from datakit.transforms import eval_pipeline, train_pipeline

    monkeypatch.setattr(datakit.loader, "_SAID", set())
    ds = open_dataset(class_folder, transform=train_pipeline(32, mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25]))
    with caplog.at_level(logging.WARNING, logger="datakit"):
        raw, _ = next(iter(create_loader(ds, 12, num_workers=0, seed=0)))
        create_loader(ds, 12, num_workers=0, seed=0)  # said once (a tuning run makes a loader per candidate)
    assert raw.dtype == torch.uint8 and [r.getMessage() for r in caplog.records] == [
        "the pipeline's mean= and std= are not applied to its uint8 batches here: create_loader(..., device=...) "
        "applies them (or a normalisation of your own)"
    ]
    x, _ = next(iter(create_loader(ds, 12, num_workers=0, seed=0, device="cpu")))
    torch.testing.assert_close(x, (raw.float() / 255 - 0.5) / 0.25, rtol=0, atol=1e-5)
    same, _ = next(iter(create_loader(ds, 12, num_workers=0, seed=0, device="cpu", normalize=([0.5] * 3, [0.25] * 3))))
    assert torch.equal(same, x)
    with pytest.raises(UsageError) as e:
        create_loader(ds, 12, num_workers=0, device="cpu", normalize="imagenet")
    assert str(e.value) == (
        "the pipeline's mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25] and create_loader's normalize='imagenet' "
        "differ; give the statistics in one place"
    )
    moved, _ = next(iter(create_loader(ds, 12, num_workers=0, seed=0, device="cpu", normalize=False)))
    assert torch.equal(moved, raw)
    other = open_dataset(class_folder, transform=eval_pipeline(32, mean=[127.5] * 3, std=[64.0] * 3))
    y, _ = next(iter(create_loader(other, 12, num_workers=0, train=False, device="cpu")))
    y8, _ = next(iter(create_loader(other, 12, num_workers=0, train=False)))
    torch.testing.assert_close(y, (y8.float() - 127.5) / 64, rtol=0, atol=1e-5)
    with pytest.raises(UsageError) as e:
        create_loader(torch.utils.data.ConcatDataset([ds, other]), 12, num_workers=0, device="cpu")
    message = ("the datasets' pipelines give 2 sets of statistics (mean=, std=; the default counts as ImageNet's, in "
               "each dataset's channel order); one loader normalises every batch with one: give the same to each")  # fmt: skip
    assert str(e.value) == message
    # the regression round: a pipeline of the default statistics beside one of its own was not refused (the default
    # half normalised with the other's); the same statistics on the 0-255 scale were called different; a float step
    # in augment= with the pipeline's statistics was refused as if normalize= had been given
    plain = open_dataset(class_folder, transform=eval_pipeline(32))
    with pytest.raises(UsageError) as e:
        create_loader(torch.utils.data.ConcatDataset([other, plain]), 12, num_workers=0, device="cpu")
    assert str(e.value) == message
    scaled, _ = next(iter(create_loader(ds, 12, num_workers=0, seed=0, device="cpu",
                                        normalize=([127.5] * 3, [63.75] * 3))))  # fmt: skip
    torch.testing.assert_close(scaled, x, rtol=0, atol=1e-5)
    from torchvision.transforms import v2

    floats = open_dataset(class_folder, transform=train_pipeline(
        32, mean=[0.5] * 3, std=[0.25] * 3, augment=[v2.ToDtype(torch.float32, scale=True)]))  # fmt: skip
    with pytest.warns(UserWarning, match=r"^the images are float32 already \(a transform made them float"):
        f, _ = next(iter(create_loader(floats, 12, num_workers=0, seed=0, device="cpu")))
    assert f.dtype == torch.float32
    # the second round: the same statistics written otherwise (float32, the 0-255 scale, ImageNet's numbers beside
    # the default) were "2 sets of statistics"; normalize=True beside the pipeline's was refused
    same = [
        train_pipeline(32, mean=np.float32([0.5] * 3), std=np.float32([0.25] * 3)),
        eval_pipeline(32, mean=[127.5] * 3, std=[63.75] * 3),
    ]
    both = torch.utils.data.ConcatDataset([open_dataset(class_folder, transform=p) for p in same])
    assert len(list(create_loader(both, 12, num_workers=0, device="cpu"))) == 2
    imagenet = eval_pipeline(32, mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    pair = torch.utils.data.ConcatDataset([plain, open_dataset(class_folder, transform=imagenet)])
    assert len(list(create_loader(pair, 12, num_workers=0, train=False, device="cpu"))) == 2
    yes, _ = next(iter(create_loader(ds, 12, num_workers=0, seed=0, device="cpu", normalize=True)))
    assert torch.equal(yes, x)
    # a pipeline pickled by an earlier datakit kept no statistics it was given: said, not silent
    old = eval_pipeline(32, mean=[0.5] * 3, std=[0.25] * 3)
    del old.batch_stats
    with caplog.at_level(logging.WARNING, logger="datakit"):
        caplog.clear()
        create_loader(open_dataset(class_folder, transform=old), 12, num_workers=0, train=False, device="cpu")
    assert [r.getMessage() for r in caplog.records] == [
        "a pipeline (EvalPipeline) made by an earlier datakit was given mean= and std= it does not keep; its batches are "
        "normalised with ImageNet's statistics: make the pipeline again (or pass normalize=)"
    ]
    default = open_dataset(class_folder, transform=train_pipeline(32))  # ImageNet's, as before
    z, _ = next(iter(create_loader(default, 12, num_workers=0, seed=0, device="cpu")))
    z8, _ = next(iter(create_loader(default, 12, num_workers=0, seed=0)))
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    torch.testing.assert_close(z, (z8.float() / 255 - mean) / std, rtol=0, atol=1e-5)


def test_flags_given_as_words_and_functions_that_are_none_are_refused_by_name():
    # the attack: shuffle="no" shuffled, infinite="no" gave a loader a for loop never ends (a string is true), and
    # collate_fn=5 failed at the first batch with "'int' object is not callable" from inside the loader
    data = [(torch.zeros(3, 4, 4, dtype=torch.uint8), 0)] * 8
    said = {}
    for kw in ({"shuffle": "no"}, {"infinite": "no"}, {"autotune": "yes"}, {"in_order": "no"}, {"drop_last": "false"},
               {"collate_fn": 5}, {"worker_init_fn": 5}):  # fmt: skip
        with pytest.raises(UsageError) as e:
            create_loader(data, 4, num_workers=0, **kw)
        said.update({next(iter(kw)): str(e.value)})
    assert said == {
        "shuffle": "shuffle must be True, False or None, got 'no'",
        "infinite": "infinite must be True or False, got 'no'",
        "autotune": "autotune must be True, False or None, got 'yes'",
        "in_order": "in_order must be True, False or None, got 'no'",
        "drop_last": "drop_last must be True, False or None, got 'false'",
        "collate_fn": "collate_fn must be a function (or None), got 5",
        "worker_init_fn": "worker_init_fn must be a function (or None), got 5",
    }
    assert [
        len(create_loader(data, 4, num_workers=0, **kw)) for kw in ({"shuffle": 0}, {"infinite": np.bool_(False)})
    ] == [2, 2]
    # None is DataLoader's own default for its flags (shuffle=None: no shuffling), and a NumPy integer 0 or 1 a flag
    order = [int(y) for _, ys in create_loader(list(zip(range(8), range(8))), 4, num_workers=0, shuffle=None,
                                                 pin_memory=None, persistent_workers=None, in_order=None) for y in ys]  # fmt: skip
    assert order == list(range(8))
    assert len(create_loader(data, 4, num_workers=0, train=np.int64(1), seed=0)) == 2


class _Relabel(torch.utils.data.Dataset):
    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        x, y = self.inner[i]
        return x, y % 2


class _Sources(torch.utils.data.Dataset):
    def __init__(self, sources):
        self.sources = sources

    def _all(self):
        return list(self.sources.values()) if isinstance(self.sources, dict) else self.sources

    def __len__(self):
        return sum(map(len, self._all()))

    def __getitem__(self, i):
        for d in self._all():
            if i < len(d):
                return d[i]
            i -= len(d)
        raise IndexError(i)


def test_the_pipelines_statistics_are_found_inside_a_dataset_of_the_callers_and_a_compose(class_folder: Path):
    # the attack: train_pipeline(mean=, std=) inside a relabelling Dataset of the caller's, or inside v2.Compose([...]):
    # the batches were normalised with ImageNet's statistics, without a word
    from torchvision.transforms import v2

    from datakit import open_dataset
    from datakit.transforms import eval_pipeline

    m, s = [0.3, 0.4, 0.5], [0.2, 0.25, 0.3]
    raw, _ = next(iter(create_loader(open_dataset(class_folder, transform=eval_pipeline(16, mean=m, std=s)), 12,
                                     num_workers=0, train=False)))  # fmt: skip
    want = v2.Normalize(m, s)(raw.float() / 255)
    for ds in (_Relabel(open_dataset(class_folder, transform=eval_pipeline(16, mean=m, std=s))),
               open_dataset(class_folder, transform=v2.Compose([eval_pipeline(16, mean=m, std=s)]))):  # fmt: skip
        got, _ = next(iter(create_loader(ds, 12, num_workers=0, train=False, device="cpu")))
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    wrapped = _Relabel(open_dataset(class_folder, transform=eval_pipeline(16, mean=m, std=s)))
    with pytest.raises(UsageError, match=r"^the pipeline's mean=\[0\.3, 0\.4, 0\.5\], std=\[0\.2, 0\.25, 0\.3\] and "):
        create_loader(wrapped, 12, num_workers=0, train=False, device="cpu", normalize="imagenet")
    # a mode="bgr" dataset inside the caller's: its channel order is not known there (the wrapper may turn them), so
    # the default is ImageNet's as written, as the loader applies it, not refused at the epoch's start
    bgr = _Relabel(open_dataset(class_folder, mode="bgr", transform=eval_pipeline(16)))
    assert len(list(create_loader(bgr, 4, num_workers=0, train=False, device="cpu"))) == 3
    # a wrapper of several sources keeps them in a list (or a dict): found there too
    several = _Sources([open_dataset(class_folder, transform=eval_pipeline(16, mean=m, std=s))])
    got, _ = next(iter(create_loader(several, 12, num_workers=0, train=False, device="cpu")))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    named = _Sources({"a": open_dataset(class_folder, transform=eval_pipeline(16, mean=m, std=s))})
    got, _ = next(iter(create_loader(named, 12, num_workers=0, train=False, device="cpu")))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_plain_statistics_on_a_bgr_dataset_are_named_with_the_order_they_are_applied_in(class_folder: Path, caplog):
    # the attack: the line `datakit stats` prints (R, G, B numbers), pasted as normalize= for a mode="bgr" dataset, put
    # the red statistics on the blue plane: per-channel means -0.95 and 1.25 out, without a word
    from datakit import open_dataset
    from datakit.transforms import eval_pipeline

    mean, std = [0.52, 0.35, 0.27], [0.27, 0.22, 0.21]
    bgr = open_dataset(class_folder, mode="bgr", transform=eval_pipeline(16))
    rgb = open_dataset(class_folder, transform=eval_pipeline(16))
    with caplog.at_level(logging.WARNING, logger="datakit"):
        pasted, _ = next(iter(create_loader(bgr, 12, num_workers=0, train=False, device="cpu", normalize=(mean, std))))
    assert [r.getMessage() for r in caplog.records] == [
        "normalize= is plain numbers, applied in the images' own channel order: B, G, R (a mode='bgr' dataset), so mean "
        "0.52 goes to blue; if they are R, G, B numbers (as datakit stats and torchvision's Normalize lines give them), "
        "pass normalize={'mean': [0.52, 0.35, 0.27], 'std': [0.27, 0.22, 0.21], 'order': 'RGB'} (or the Stats "
        "compute_stats returns); 'order': 'BGR' says they are B, G, R and quiets this"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="datakit"):
        told = {"mean": mean, "std": std, "order": "RGB"}
        a, _ = next(iter(create_loader(bgr, 12, num_workers=0, train=False, device="cpu", normalize=told)))
        b, _ = next(iter(create_loader(rgb, 12, num_workers=0, train=False, device="cpu", normalize=(mean, std))))
        same = {"mean": mean[::-1], "std": std[::-1], "order": "BGR"}
        c, _ = next(iter(create_loader(bgr, 12, num_workers=0, train=False, device="cpu", normalize=same)))
    assert caplog.records == []
    assert torch.allclose(a, b.flip(1)) and torch.equal(a, c)  # the same pixels, their planes in BGR order
    assert not torch.allclose(pasted, b.flip(1))


def test_the_default_statistics_over_a_bgr_dataset_of_a_transform_of_yours_are_said(class_folder: Path, caplog,
                                                                                       monkeypatch):  # fmt: skip
    # the attack: mode="bgr" with v2.Compose([v2.ToImage(), v2.Resize(...)]): ImageNet's R, G, B statistics went to
    # the B, G, R planes, red's mean on blue, without a word (plain numbers given there are said; the default was not)
    import cv2

    import datakit.loader
    from datakit import open_dataset

    monkeypatch.setattr(datakit.loader, "_SAID", set())

    def resize(img):
        return torch.from_numpy(cv2.resize(img, (16, 16))).permute(2, 0, 1).contiguous()

    bgr = open_dataset(class_folder, mode="bgr", transform=resize)
    with caplog.at_level(logging.WARNING, logger="datakit"):
        got, _ = next(iter(create_loader(bgr, 12, num_workers=0, train=False, device="cpu")))
    assert [r.getMessage() for r in caplog.records] == [
        "the dataset reads B, G, R images (mode='bgr') through a transform of yours, which may or may not turn them to "
        "R, G, B: the statistics, R, G, B ones, are applied as written, red's to the first plane; if the batches are "
        "B, G, R, pass normalize=([0.406, 0.456, 0.485], [0.225, 0.224, 0.229]) (plain numbers are applied as given), "
        "or read the images with mode='rgb'"
    ]
    raw = torch.stack([bgr[i][0] for i in range(12)]).float() / 255
    mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
    torch.testing.assert_close(got, (raw - mean[:, None, None]) / std[:, None, None], rtol=0, atol=1e-5)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="datakit"):  # numbers given: applied as given, as documented
        next(iter(create_loader(bgr, 12, num_workers=0, train=False, device="cpu",
                                normalize=([0.406, 0.456, 0.485], [0.225, 0.224, 0.229]))))  # fmt: skip
        rgb = open_dataset(class_folder, transform=resize)
        next(iter(create_loader(rgb, 12, num_workers=0, train=False, device="cpu")))
    assert caplog.records == []


def test_statistics_are_compared_in_the_channel_order_they_are_applied_in(class_folder: Path):
    # the attack: on a mode="bgr" dataset the default (ImageNet's RGB numbers) is reversed and numbers written out are
    # applied as given, yet the two were called the same: a ConcatDataset of both, normalize='imagenet' beside the
    # written-out numbers and a swap between them between epochs all normalised one part 0.38 off, without a word
    from datakit import open_dataset
    from datakit.transforms import eval_pipeline

    im, is_ = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    bgr = lambda **kw: open_dataset(class_folder, mode="bgr", transform=eval_pipeline(16, **kw))  # noqa: E731
    message = ("the datasets' pipelines give 2 sets of statistics (mean=, std=; the default counts as ImageNet's, in "
               "each dataset's channel order); one loader normalises every batch with one: give the same to each")  # fmt: skip
    with pytest.raises(UsageError) as e:
        create_loader(torch.utils.data.ConcatDataset([bgr(), bgr(mean=im, std=is_)]), 4, num_workers=0, train=False,
                      device="cpu")  # fmt: skip
    assert str(e.value) == message
    # the attack: a BGR dataset beside an RGB one: with normalize="cifar10" (or none, without device=) every batch
    # held both orders, red in one sample where blue is in the next, without a word
    both = torch.utils.data.ConcatDataset([bgr(), open_dataset(class_folder, transform=eval_pipeline(16))])
    for kw in ({"device": "cpu"}, {"device": "cpu", "normalize": "cifar10"}, {}):
        with pytest.raises(UsageError) as e:
            create_loader(both, 12, num_workers=0, train=False, **kw)
        assert str(e.value) == ("the datasets joined give images in two channel orders (RGB and BGR: mode='rgb' "
                                "beside mode='bgr'), so one batch would hold both, normalised alike; open them with "
                                "one mode")  # fmt: skip
    with pytest.raises(UsageError) as e:
        create_loader(bgr(mean=im, std=is_), 4, num_workers=0, train=False, device="cpu", normalize="imagenet")
    assert str(e.value) == ("the pipeline's mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225] and create_loader's "
                            "normalize='imagenet' differ; give the statistics in one place")  # fmt: skip
    reversed_ = bgr(mean=im[::-1], std=is_[::-1])  # ImageNet's in the BGR order: what 'imagenet' applies there
    a, _ = next(iter(create_loader(reversed_, 12, num_workers=0, train=False, device="cpu", normalize="imagenet")))
    b, _ = next(iter(create_loader(bgr(), 12, num_workers=0, train=False, device="cpu")))
    assert torch.equal(a, b)
    ds = bgr()
    loader = create_loader(ds, 4, num_workers=0, train=False, device="cpu")
    assert len(list(loader)) == 3
    ds.transform = eval_pipeline(16, mean=im, std=is_)
    with pytest.raises(UsageError) as e:
        list(loader)
    assert str(e.value) == (
        "epoch 1: the dataset's pipeline now gives mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225], but the "
        "loader normalises with mean=[0.406, 0.456, 0.485], std=[0.225, 0.224, 0.229], those it was made with: make "
        "the loader again for the new statistics, or keep them"
    )
    # the two lines `datakit stats` prints for one set of statistics (4 decimals on 0-1, 3 on 0-255) are one set
    m01, s01 = [0.4989, 0.5014, 0.4985], [0.2247, 0.2263, 0.2228]
    m255, s255 = [127.216, 127.869, 127.106], [57.307, 57.718, 56.809]
    rgb = open_dataset(class_folder, transform=eval_pipeline(16, mean=m01, std=s01))
    assert len(list(create_loader(rgb, 4, num_workers=0, train=False, device="cpu", normalize=(m255, s255)))) == 3
    # ImageNet's rounded to one decimal on 0-255 beside the default: one set (under a thousandth of a std apart)
    rounded = open_dataset(
        class_folder, transform=eval_pipeline(16, mean=[123.7, 116.3, 103.5], std=[58.4, 57.1, 57.4])
    )
    assert len(list(create_loader(rounded, 4, num_workers=0, train=False, device="cpu", normalize="imagenet"))) == 3
    # a Compose holding only datakit's pipeline does what the pipeline does: the same channel order, the same batches
    from torchvision import transforms as T

    plain = next(iter(create_loader(bgr(), 12, num_workers=0, train=False, device="cpu")))[0]
    composed = open_dataset(class_folder, mode="bgr", transform=T.Compose([eval_pipeline(16)]))
    assert torch.equal(next(iter(create_loader(composed, 12, num_workers=0, train=False, device="cpu")))[0], plain)
    ds = bgr()
    loader = create_loader(ds, 4, num_workers=0, train=False, device="cpu")
    ds.transform = T.Compose([eval_pipeline(16)])
    assert len(list(loader)) == 3


@pytest.mark.parametrize("workers", [0, 2])
def test_a_pipeline_set_between_epochs_with_other_statistics_is_refused_at_the_epoch(class_folder: Path, workers):
    # the attack: progressive resizing on the README's path, the later pipeline made without the first one's mean= and
    # std= (or with others): the loader went on normalising with those it was made with, without a word
    from datakit import open_dataset
    from datakit.transforms import train_pipeline

    ds = open_dataset(class_folder, transform=train_pipeline(16, mean=[0.5] * 3, std=[0.25] * 3))
    loader = create_loader(ds, 4, num_workers=workers, seed=0, device="cpu")
    assert [b.shape for b, _ in loader] == [(4, 3, 16, 16)] * 3
    ds.transform = train_pipeline(8, mean=[127.5] * 3, std=[63.75] * 3)  # the same statistics, on the 0-255 scale
    assert [b.shape for b, _ in loader] == [(4, 3, 8, 8)] * 3
    ds.transform = train_pipeline(8)
    with pytest.raises(UsageError) as e:
        list(loader)
    assert str(e.value) == (
        "epoch 2: the dataset's pipeline now gives mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225] (the "
        "default, ImageNet's), but the loader normalises with mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25], those it "
        "was made with: make the loader again for the new statistics, or keep them"
    )
    ds.transform = train_pipeline(8, mean=[0.5] * 3, std=[0.25] * 3)  # kept: the refused epoch is served, not skipped
    assert loader.epoch == 2 and len(list(loader)) == 3 and loader.epoch == 3
    # normalize= given: a pipeline of the default beside it is the user's choice, as at the start; one of its own
    # statistics is not
    ds.transform = train_pipeline(16)
    given = create_loader(ds, 4, num_workers=workers, seed=0, device="cpu", normalize=([0.5] * 3, [0.25] * 3))
    assert len(list(given)) == 3
    ds.transform = train_pipeline(8)
    assert len(list(given)) == 3
    ds.transform = train_pipeline(8, mean=[0.4] * 3, std=[0.2] * 3)
    with pytest.raises(UsageError) as e:
        list(given)
    assert str(e.value).startswith("epoch 2: the dataset's pipeline now gives mean=[0.4, 0.4, 0.4], std=[0.2, 0.2, "
                                   "0.2], but the loader normalises with mean=[0.5, 0.5, 0.5]")  # fmt: skip
    # an infinite loader crossing into the next epoch
    ds.transform = train_pipeline(16)
    endless = create_loader(ds, 4, num_workers=workers, seed=0, device="cpu", infinite=True)
    for _ in range(3):
        next(endless)
    ds.transform = train_pipeline(16, mean=[0.4] * 3, std=[0.2] * 3)
    with pytest.raises(UsageError, match=r"^epoch 1: the dataset's pipeline now gives mean=\[0\.4, 0\.4, 0\.4\]"):
        next(endless)
    # batches moved as they are (normalize=False) are normalised by the loop: nothing to check
    raw = create_loader(ds, 4, num_workers=workers, seed=0, device="cpu", normalize=False)
    assert len(list(raw)) == 3
    ds.transform = train_pipeline(16, mean=[0.3] * 3, std=[0.2] * 3)
    assert len(list(raw)) == 3


def test_a_transform_defined_under_the_main_guard_is_named_before_spawned_workers_die_of_it(class_folder, tmp_path):
    # the attack: a training script that defines its transform inside `if __name__ == "__main__":`; spawned workers
    # import the script without running that block, and each died unpickling the dataset: "DataLoader worker (pid
    # ...) exited unexpectedly", the cause on the workers' stderr only
    body = """
from datakit import create_loader, open_dataset
from datakit.transforms import train_pipeline
{top}
if __name__ == "__main__":
{guarded}
    ds = open_dataset(r"{root}", transform=train_pipeline(16), target_transform=Keep())
    print([tuple(x.shape) for x, _ in create_loader(ds, 4, num_workers=1, seed=0, multiprocessing_context="spawn")])
"""
    keep = "class Keep:\n    def __call__(self, t):\n        return t\n"
    indented = "".join("    " + line + "\n" for line in keep.splitlines())
    script = tmp_path / "训练.py"
    script.write_text(body.format(top="", guarded=indented, root=class_folder), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and proc.stderr.splitlines()[-1] == (
        "datakit.errors.UsageError: spawn-started workers cannot find Keep: 训练.py defines it inside "
        '`if __name__ == "__main__":` (line 6), a block they skip when they import 训练.py; define Keep at the top '
        "level of 训练.py (or in a module of its own)"
    )
    script.write_text(body.format(top=keep, guarded="    pass", root=class_folder), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert (proc.returncode, proc.stdout) == (0, "[(4, 3, 16, 16), (4, 3, 16, 16), (4, 3, 16, 16)]\n"), proc.stderr


def test_a_script_that_runs_its_loader_outside_the_main_guard_is_told_before_spawned_workers_die_of_it(
    class_folder, tmp_path
):
    # the attack: the README's loop in a script of its own, with spawn workers (macOS's and Windows' default) and no
    # `if __name__ == "__main__":`: each worker ran the script's top level again, started workers while it was still
    # starting, and died; 172 lines of three tracebacks, ending in "exited unexpectedly ... num_workers=0"
    script = tmp_path / "train.py"
    script.write_text(f"""from datakit import create_loader, open_dataset
from datakit.transforms import train_pipeline

ds = open_dataset(r"{class_folder}", transform=train_pipeline(16))
loader = create_loader(ds, 4, num_workers=2, seed=0, multiprocessing_context="spawn")
print(sum(len(y) for _, y in loader))
""", encoding="utf-8")  # fmt: skip
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and proc.stderr.splitlines()[-1] == (
        "datakit.errors.UsageError: spawn-started workers import train.py and run its top level again, which would "
        'start this loader again in each of them (line 6, outside any `if __name__ == "__main__":`); put the code '
        'that runs the loader under `if __name__ == "__main__":` at the end of train.py'
    ), proc.stderr
    assert "bootstrapping" not in proc.stderr
    # a function called under the guard, the way it is meant: read
    guarded = script.read_text(encoding="utf-8").replace("ds = ", "def main():\n    ds = ")
    guarded = guarded.replace("\nloader", "\n    loader").replace("\nprint", "\n    print")
    script.write_text(guarded + '\n\nif __name__ == "__main__":\n    main()\n', encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert (proc.returncode, proc.stdout) == (0, "12\n"), proc.stderr
    # a guard of another form, inside a try: any `if` around the line may keep it from the workers, so it is read
    script.write_text(guarded + '\n\ntry:\n    if "__main__" == __name__ and len(sys.argv) > 0:\n        main()\n'
                      "except KeyboardInterrupt:\n    pass\n", encoding="utf-8")  # fmt: skip
    script.write_text("import sys\n" + script.read_text(encoding="utf-8"), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert (proc.returncode, proc.stdout) == (0, "12\n"), proc.stderr
    # the next attack: `if True: main()` hid the line (a condition that always holds, in a spawned worker too)
    script.write_text(guarded + "\n\nif True:\n    main()\n", encoding="utf-8")
    script.write_text("import sys\n" + script.read_text(encoding="utf-8"), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and proc.stderr.splitlines()[-1].startswith(
        "datakit.errors.UsageError: spawn-started workers import train.py and run its top level again"
    ), proc.stderr
    assert "bootstrapping" not in proc.stderr


def test_a_transform_in_a_packages_main_module_is_named_before_spawned_workers_die_of_it(class_folder, tmp_path):
    # the regression round: `python -m pkg` runs pkg/__main__.py, which spawned processes do not import: a transform
    # class there, at its top level or not, killed every worker ("exited unexpectedly")
    pkg = tmp_path / "trainer"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(f"""
from datakit import create_loader, open_dataset
from datakit.transforms import train_pipeline


class Keep:
    def __call__(self, t):
        return t


ds = open_dataset(r"{class_folder}", transform=train_pipeline(16), target_transform=Keep())
print(len(list(create_loader(ds, 4, num_workers=1, seed=0, multiprocessing_context="spawn"))))
""", encoding="utf-8")  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "trainer"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.splitlines()[-1] == (
        "datakit.errors.UsageError: spawn-started workers cannot find Keep: trainer/__main__.py defines it, and "
        "spawned processes do not import a package's __main__.py (python -m trainer); define Keep in another module "
        "of trainer and import it from there"
    ), proc.stderr


def test_a_transform_of_python_c_or_a_notebook_is_named_before_spawned_workers_die_of_it(class_folder, tmp_path):
    # the attack: a transform class defined in `python -c` code (or a notebook's, or stdin's: __main__ with no .py
    # file) with spawn-started workers: every worker died unpickling it, three tracebacks and "exited unexpectedly"
    code = f"""
from datakit import create_loader, open_dataset
from datakit.transforms import train_pipeline
class Keep:
    def __call__(self, t):
        return t
ds = open_dataset(r"{class_folder}", transform=train_pipeline(16), target_transform=Keep())
print(len(list(create_loader(ds, 4, num_workers=1, seed=0, multiprocessing_context="spawn"))))
"""
    said = ("datakit.errors.UsageError: spawn-started workers cannot find Keep: it is defined in __main__, which here "
            "is no script file they could import (python -c, a notebook, code read from stdin); define Keep in a "
            "module (a .py file) and import it from there, or use num_workers=0")  # fmt: skip
    stdin_said = ("datakit.errors.UsageError: spawn-started workers run the main program's file again, and this "
                  "program has none (its __file__ is '<stdin>': code read from stdin?); save the code as a .py file "
                  "and run that, or use num_workers=0")  # fmt: skip
    for args, stdin, words in (([sys.executable, "-c", code], None, said), ([sys.executable, "-"], code, stdin_said)):
        proc = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert proc.returncode == 1 and proc.stderr.splitlines()[-1] == words, proc.stderr
        assert proc.stderr.count("Traceback") == 1
    # forked workers inherit __main__: the same code runs
    forked = code.replace('"spawn"', '"fork"')
    proc = subprocess.run([sys.executable, "-c", forked], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    from datakit import open_dataset

    assert proc.returncode == 0 and proc.stdout.strip() == str(-(-len(open_dataset(class_folder)) // 4)), proc.stderr


def test_a_lambda_in_the_dataset_is_one_line_for_spawned_workers(class_folder: Path):
    # the attack: target_transform=lambda t: t with spawn-started workers: 16 frames of multiprocessing, ending in
    # "AttributeError: Can't pickle local object"
    from datakit import open_dataset
    from datakit.transforms import train_pipeline

    ds = open_dataset(class_folder, transform=train_pipeline(32), target_transform=lambda t: t)
    loader = create_loader(ds, 4, num_workers=1, multiprocessing_context="spawn", seed=0)
    with pytest.raises(UsageError) as e:
        next(iter(loader))
    assert str(e.value) == (
        "the loader cannot send the dataset and its functions to spawn-started workers (Can't pickle local object "
        "'test_a_lambda_in_the_dataset_is_one_line_for_spawned_workers.<locals>.<lambda>'): what they get must "
        "pickle: functions (transform=, target_transform=, on_error=, collate_fn=, worker_init_fn=) defined at module "
        "level, not lambdas nor inside a function, and no open file in the dataset; or use num_workers=0"
    )
    assert [int(y) for _, ys in create_loader(ds, 12, num_workers=0, seed=0) for y in ys] != []


def test_a_lambda_under_datakit_num_workers_names_the_variable(class_folder: Path, monkeypatch):
    # the attack: num_workers=0 in the code, DATAKIT_NUM_WORKERS=2 in the shell: the message's fix was
    # "use num_workers=0", which the code already did
    from datakit import open_dataset

    monkeypatch.setenv("DATAKIT_NUM_WORKERS", " 2")
    ds = open_dataset(class_folder, transform=lambda im: im[:8, :8].copy())
    loader = create_loader(ds, 4, num_workers=0, multiprocessing_context="spawn", seed=0)
    with pytest.raises(UsageError) as e:
        next(iter(loader))
    assert str(e.value).endswith(
        "and no open file in the dataset; or use num_workers=0 (DATAKIT_NUM_WORKERS=2 is set, and decides: set it "
        "to 0 or unset it)"
    )
    monkeypatch.setenv("DATAKIT_NUM_WORKERS", "0")  # the fix it names: no worker, whatever num_workers says
    got = [int(y) for _, ys in create_loader(ds, 4, num_workers=2, multiprocessing_context="spawn", seed=0) for y in ys]
    monkeypatch.delenv("DATAKIT_NUM_WORKERS")
    assert got == [int(y) for _, ys in create_loader(ds, 4, num_workers=0, seed=0) for y in ys] and len(got) >= 4


def _three_epochs(split, batch_size: int, workers: int) -> list[int]:
    """The ids (ids()) a shuffled loader over ``split`` serves in three epochs, each of a loader made anew."""
    served = []
    for _ in range(3):
        loader = create_loader(split, batch_size=batch_size, num_workers=workers, seed=0, device="cpu",
                               normalize=False, shuffle=True, drop_last=False)  # fmt: skip
        served += [i for batch in loader for i in ids(batch)]
        assert loader.dataset is split
    return served


@pytest.mark.parametrize("policy", ["substitute", "skip"])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_bad_sample_of_a_split_is_replaced_from_its_own_split(tmp_path: Path, policy: str, workers: int):
    # the attack: random_split(ds, [0.8, 0.2]) over on_error="substitute": a training image that cannot be read was
    # replaced by one of the validation split's, its label included (a Subset passed plain indices, and the
    # dataset drew from all of its samples); "skip" took the next index, outside the Subset too
    from torch.utils.data import Subset

    from datakit.datasets import open_dataset

    ds = open_dataset(bad_folder(tmp_path), on_error=policy, max_bad_fraction=0.2)
    bad = {3, 17, 30}
    train = Subset(ds, [30, 0, 3, 4, 8, 12, 17, 16, 20, 24, 28, 32, 36])  # as random_split makes it, in any order
    own = set(train.indices) - bad
    for split in (train, Subset(Subset(ds, list(range(40))), list(train.indices))):  # a chain of them too
        served = _three_epochs(split, 5, workers)
        assert len(served) == 3 * len(train) and set(served) <= own
    if policy == "skip":  # the next readable sample of the split, in its order
        first = train.indices.index(3)
        after = next(i for i in (train.indices * 2)[first + 1 :] if i not in bad)
        reader = create_loader(Subset(ds, train.indices), batch_size=len(train), num_workers=0, seed=0, device="cpu",
                               normalize=False, shuffle=False, drop_last=False)  # fmt: skip
        assert ids(next(iter(reader)))[first] == after


def _two_bad_folders(tmp_path: Path, policy: str):
    """Two datasets of 20 one-class images each, sample i of the second filled with 5 * (20 + i) (ids() tells the
    parts apart); samples 3 of the first and 7 of the second (27 of a + b) broken."""
    from datakit.datasets import open_dataset
    from datakit.io import imwrite

    parts = []
    for p, bad in ((0, 3), (1, 7)):
        root = tmp_path / f"part{p}" / "类"
        root.mkdir(parents=True)
        for i in range(20):
            imwrite(root / f"{i:03d}.png", np.full((8, 8, 3), 5 * (20 * p + i), np.uint8), mode="rgb")
        (root / f"{bad:03d}.png").write_bytes(b"not an image at all")
        parts.append(open_dataset(root.parent, on_error=policy, max_bad_fraction=0.2))
    return parts


@pytest.mark.parametrize("policy", ["substitute", "skip"])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_bad_sample_of_a_split_of_joined_datasets_is_replaced_from_its_own_split(tmp_path: Path, policy: str,
                                                                                    workers: int):  # fmt: skip
    # the attack: random_split(a + b) and ConcatDataset([Subset(a, ...), Subset(b, ...)]) over on_error="substitute"
    # (or "skip"): a bad training image was replaced by a validation image and its label (the split's samples were
    # kept for a Subset straight over one datakit dataset only)
    from torch.utils.data import ConcatDataset, Subset

    a, b = _two_bad_folders(tmp_path, policy)
    train = [3, 0, 5, 9, 12, 27, 21, 30, 33, 39, 16]  # of a + b, as random_split makes it: 3 and 27 broken
    own = set(train) - {3, 27}
    split_a, split_b = [i for i in train if i < 20], [i - 20 for i in train if i >= 20]
    for split in (Subset(a + b, train), ConcatDataset([Subset(a, split_a), Subset(b, split_b)]),
                  Subset(ConcatDataset([Subset(a, list(range(20))), b]), train)):  # fmt: skip
        served = _three_epochs(split, 4, workers)
        assert len(served) == 3 * len(train) and set(served) <= own
    if policy == "skip":  # the next readable sample of the split in the broken one's part, in the split's order
        reader = create_loader(Subset(a + b, train), batch_size=len(train), num_workers=0, seed=0, device="cpu",
                               normalize=False, shuffle=False, drop_last=False)  # fmt: skip
        assert ids(next(iter(reader))) == [0, 0, 5, 9, 12, 21, 21, 30, 33, 39, 16]


def test_a_later_datasets_substitute_in_a_concat_changes_with_the_epoch_and_seed(tmp_path: Path):
    # the attack: ConcatDataset([a, b]) with on_error="substitute": b's bad sample got the same substitute every epoch
    # and for every seed= (ConcatDataset passed b a plain int, its index less a's length), a's a new one each epoch
    a, b = _two_bad_folders(tmp_path, "substitute")
    alone, joined = {}, {}
    for seed in (0, 5):
        for ds, into, at in ((b, alone, 7), (a + b, joined, 27)):
            loader = create_loader(ds, len(ds), num_workers=0, seed=seed, device="cpu", normalize=False, shuffle=False)
            into[seed] = [ids(next(iter(loader)))[at] for _ in range(6)]  # an epoch each
    assert joined == alone  # drawn from (seed, epoch, index in b), as b alone draws it
    assert len(set(joined[0])) > 1 and joined[0] != joined[5] and set(joined[0] + joined[5]) <= set(range(20, 40))


def test_a_shards_padding_repeat_draws_augmentations_of_its_own():
    # the attack: 23 samples on 2 ranks: the one served twice (the padding that evens out the ranks' shares) got the
    # same crop and flip on both ranks: its gradient doubled, with no variety
    from datakit.loader import PerSampleSeed, SampleIndex

    ranks = [list(EpochSampler(23, seed=0, rank=r, world=2, tag=True)) for r in range(2)]
    served = [int(i) for order in ranks for i in order]
    copies = [(r, int(i), i.copy) for r, order in enumerate(ranks) for i in order if i.copy]
    assert len(served) == 24 and sorted(set(served)) == list(range(23)) and len(copies) == 1
    _, again, copy = copies[0]
    assert [i.copy for i in ranks[0] if int(i) == again] + [i.copy for i in ranks[1] if int(i) == again] in (
        [0, 1],
        [1, 0],
    )
    seeded = PerSampleSeed(Indexed(23))
    first, second = seeded[SampleIndex(again, 0, 0)], seeded[SampleIndex(again, 0, 0, copy)]
    assert first[0] == second[0] == again and first[1:] != second[1:]
    assert seeded[SampleIndex(again, 0, 0)] == first  # each the same on every run
    # a resumed epoch tags the same places alike
    batches = list(EpochSampler(23, seed=0, rank=1, world=2, tag=True).tagged(ranks[1][8:], 0, 8))
    assert [(int(i), i.copy) for i in batches] == [(int(i), i.copy) for i in ranks[1][8:]]


def test_a_subset_read_with_bad_sample_replacement_reads_its_indices_as_they_are_now(tmp_path: Path):
    # the regression round: the loader copied the Subset's indices when made (a subset changed in place, curriculum
    # or active learning, was read as it had been), wrapped an index past its end instead of raising IndexError, and a
    # subset of one bad sample said "no readable substitute among samples []"
    from torch.utils.data import Subset

    from datakit.datasets import open_dataset
    from datakit.errors import SampleError

    ds = open_dataset(bad_folder(tmp_path), on_error="skip", max_bad_fraction=0.2)
    sub = Subset(ds, list(range(10)))
    loader = create_loader(sub, 10, num_workers=0, train=False, device="cpu", normalize=False)
    assert ids(next(iter(loader))) == [0, 1, 2, 4, 4, 5, 6, 7, 8, 9]  # 3 is bad: the next of the subset's
    sub.indices[:] = list(range(20, 30))
    assert ids(next(iter(loader))) == list(range(20, 30))
    with pytest.raises(IndexError) as e:
        list(create_loader(sub, 2, num_workers=0, train=False, device="cpu", normalize=False, sampler=[0, 15]))
    assert str(e.value) == "sample index 15 out of range for a Subset of 10"
    # negative indices count from the dataset's end, as Subset reads them: -36 is sample 4, the replacement of 3
    assert ids(next(iter(create_loader(Subset(ds, [3, -36]), 2, num_workers=0, train=False, device="cpu",
                                       normalize=False, drop_last=False)))) == [4, 4]  # fmt: skip
    with pytest.raises(SampleError) as e:
        list(create_loader(Subset(ds, [3]), 1, num_workers=0, train=False, device="cpu", normalize=False))
    assert str(e.value).endswith("; and the Subset it is read through holds no other readable sample to take its "
                                 "place (1 in all)")  # fmt: skip


def test_a_state_saved_mid_epoch_before_the_order_scheme_changed_goes_on_in_its_order():
    # the regression round: the epoch's order became a mix of seed and epoch (seed + epoch before); a state saved
    # mid-epoch by the earlier state_dict() (its seed and shuffle, no "order") went on in another order, serving
    # some samples twice and skipping others
    run = create_loader(Indexed(10), 2, num_workers=0, seed=0, infinite=True)
    old = torch.randperm(10, generator=torch.Generator().manual_seed(0 + 1)).tolist()  # epoch 1, seed + epoch
    state = {"epoch": 1, "step": 2, "sample": 4, "batch_size": 2, "samples": 10, "world": 1, "seed": 0,
             "shuffle": True}  # fmt: skip
    run.load_state_dict(state)
    assert [i for _ in range(3) for i in next(run)[0].tolist()] == old[4:]
    assert next(run)[0].tolist() == EpochSampler(10, seed=0).indices(2)[:2]  # the next epoch: the new scheme
    new = create_loader(Indexed(10), 2, num_workers=0, seed=0, infinite=True)
    new.load_state_dict({**state, "order": 2})
    assert [i for _ in range(3) for i in next(new)[0].tolist()] == EpochSampler(10, seed=0).indices(1)[4:]
    by_hand = create_loader(Indexed(10), 2, num_workers=0, seed=0, infinite=True)
    by_hand.load_state_dict({"epoch": 1, "step": 2})  # steps a loop counted itself: the scheme of this datakit
    assert next(by_hand)[0].tolist() == EpochSampler(10, seed=0).indices(1)[4:6]
    # the second regression round: saved again inside that epoch, the state says the old scheme (a job stopped twice
    # in one epoch); a later load of a new state, or a refused one, leaves the old order behind; an unknown scheme
    # is refused
    again = create_loader(Indexed(10), 2, num_workers=0, seed=0, infinite=True)
    again.load_state_dict({**state, "step": 1, "sample": 2})
    next(again)
    saved = again.state_dict()
    assert (saved["sample"], saved["order"]) == (4, 1)
    once_more = create_loader(Indexed(10), 2, num_workers=0, seed=0, infinite=True)
    once_more.load_state_dict(saved)
    assert [i for _ in range(3) for i in next(once_more)[0].tolist()] == old[4:]
    once_more.load_state_dict({**state, "order": 2})
    assert next(once_more)[0].tolist() == EpochSampler(10, seed=0).indices(1)[4:6]
    with pytest.raises(UsageError):
        once_more.load_state_dict({**state, "seed": 5})
    once_more.load_state_dict({"epoch": 1, "step": 0})
    assert next(once_more)[0].tolist() == EpochSampler(10, seed=0).indices(1)[:2]
    # a state round-tripped through NumPy or torch (np.int64(2), tensor(4)): the same numbers, not "another scheme"
    once_more.load_state_dict({k: np.int64(v) if type(v) is int else v for k, v in saved.items()})
    assert [i for _ in range(3) for i in next(once_more)[0].tolist()] == old[4:]
    once_more.load_state_dict({**saved, "epoch": torch.tensor(saved["epoch"]), "sample": torch.tensor(4)})
    assert [i for _ in range(3) for i in next(once_more)[0].tolist()] == old[4:]
    for scheme in (3, "2"):
        with pytest.raises(UsageError) as e:
            once_more.load_state_dict({**state, "order": scheme})
        assert str(e.value) == (f"not a loader state this datakit reads: 'order' {scheme!r} (it draws epochs' orders "
                                "by scheme 2, and by scheme 1 for states saved before)")  # fmt: skip


def test_a_flag_beside_what_pickle_cannot_store_changes_the_fingerprint():
    # the attack: a transform holding an instance of a class made inside a function (or an mp.RawArray) could not
    # be pickled at all, so it counted by its identity: a flag set on it between epochs went unseen
    import multiprocessing as mp

    from datakit.loader import _fingerprint

    class Local:
        pass

    for held in (Local(), mp.get_context("fork").RawArray("i", 3)):
        aug = Switched()
        aug.held = held
        before = _fingerprint(aug)
        aug.enabled = False
        assert _fingerprint(aug) != before
        aug.enabled = True
        assert _fingerprint(aug) == before


def test_an_unassigned_closure_cell_leaves_a_change_seen():
    # the attack on the closure walk: a hook whose closure holds a variable never assigned raised ValueError, and the
    # whole transform counted by its identity: a pipeline replaced in it between epochs went unseen
    from datakit.loader import _fingerprint
    from datakit.transforms import train_pipeline

    def make_hook(dump: bool):
        if dump:
            path = "x"

        def hook(img):
            return path if dump else img

        return hook

    class Holder:
        def __init__(self) -> None:
            self.hook = make_hook(False)
            self.pipe = train_pipeline(16)

    tf = Holder()
    before = _fingerprint(tf)
    tf.pipe = train_pipeline(24)
    assert _fingerprint(tf) != before


def test_an_unseeded_loader_orders_by_its_generator_or_the_callers_seed_infinite_too():
    # the attacks: create_loader(..., generator=g) without seed= ignored g for the order (torch's DataLoader follows
    # it); an unseeded infinite loader always served seed 0's order, whatever seed_everything was given
    def order(**kw) -> list[int]:
        loader = create_loader(Indexed(12), 12, num_workers=0, **kw)
        return (next(loader) if kw.get("infinite") else next(iter(loader)))[0].tolist()

    by_g = [order(generator=torch.Generator().manual_seed(g)) for g in (1, 1, 2)]
    assert by_g[0] == by_g[1] != by_g[2]
    torch.manual_seed(5)
    assert order(generator=torch.Generator().manual_seed(1)) == by_g[0]  # the caller's seed does not matter then
    runs = []
    for s in (1, 1, 2):
        seed_everything(s)
        runs.append(order(infinite=True))
    assert runs[0] == runs[1] != runs[2]
    assert sorted(runs[2]) == list(range(12))


def test_set_num_workers_refuses_what_is_no_count_of_workers():
    # the attacks: set_num_workers('auto') gave a raw TypeError; 2.5 was taken, and the next epoch failed with
    # "'float' object cannot be interpreted as an integer"
    loader = create_loader(Indexed(8), 4, num_workers=0, seed=0)
    for bad in ("auto", 2.5, -1, True):
        with pytest.raises(UsageError) as e:
            loader.set_num_workers(bad)
        assert str(e.value) == ("set_num_workers takes a whole number of workers >= 0 (create_loader measures 'auto' "
                                f"itself, and re-tunes with autotune=True), got {bad!r}")  # fmt: skip
    loader.set_num_workers(np.int64(0))
    assert sorted(sum(batches(loader), [])) == list(range(8))


def test_an_unseeded_infinite_loader_resumes_mid_epoch_in_the_order_its_state_names():
    # the attack: once an unseeded infinite loader drew its order from the caller's seed, a job restarted from its
    # saved state (another process, another draw) was refused: "saved mid-epoch with seed=..."
    torch.manual_seed(1)
    first = create_loader(Indexed(12), 4, num_workers=0, infinite=True)
    served = [next(first)[0].tolist() for _ in range(2)]
    state = first.state_dict()
    rest = [next(first)[0].tolist() for _ in range(2)]
    torch.manual_seed(2)  # the restarted job: another draw
    again = create_loader(Indexed(12), 4, num_workers=0, infinite=True)
    again.load_state_dict(state)
    assert [next(again)[0].tolist() for _ in range(2)] == rest
    assert sorted(sum(served, []) + rest[0]) == list(range(12))
