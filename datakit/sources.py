"""The samples of every source, read lazily, without torch: what :mod:`datakit.datasets` makes
into ``torch.utils.data.Dataset`` classes, and what the command-line tools (pack-lmdb, stats,
check, preview) use as they are, so that they start without importing torch (over a second).
A full-size JPEG decode (stats, preview, ``pack-lmdb --max-size``) still loads torchvision's
decoder, the fastest here, when it first runs; validation and reading bytes never do.

A dataset holds only what indexes its samples, in numpy arrays (file names as one UTF-8 blob
plus offsets), never lists of Python objects: with fork-started DataLoader workers, touching
a Python object writes its reference count, which copies the page it lives on into every
worker ("copy-on-read"), and worker memory grows without bound. Files, zip handles and LMDB
environments open lazily in the process that reads them, so datasets pickle cleanly and work
with workers started by fork or spawn.
"""

from __future__ import annotations

import codecs
import contextvars
import copy
import errno
import functools
import glob
import json
import logging
import operator
import os
import re
import shutil
import sys
import time
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from datakit.errors import (
    PackChangedError,
    PackError,
    SampleError,
    UsageError,
    as_flag,
    names_sample,
    refuse_empty,
)
from datakit.filenames import decodes, json_text, undecoded_names
from datakit.io import (
    IMAGE_EXTENSIONS,
    UNNAMED,
    ImageDecodeError,
    decode_image,
    discard,
    image_format,
    raise_open_file_limit,
    read_bytes,
    refuse_unreadable_names,
)
from datakit.labels import (
    _INVISIBLE_RUN,
    _RIVAL_COLUMNS,
    EXCEL_SUFFIXES,
    LABEL_COLUMNS,
    TEXT_SUFFIXES,
    ClassMap,
    LabelError,
    LabelTable,
    NotADataset,
    StringArray,
    WrongRoot,
    _look_alike_keys,
    _norm,
    _unicode_form,
    _with_unseen,
    markers_as_classes,
    not_a_file,
    read_labels,
    resolve_path,
    spelled_twice,
    split_index,
    zip_spelled_twice,
)
from datakit.lmdb import LmdbReader

__all__ = [
    "IMG_EXTENSIONS",
    "FolderDataset",
    "ImageDataset",
    "LmdbDataset",
    "SampleError",
    "StringArray",
    "TableDataset",
    "ZipDataset",
    "open_source",
    "read_bad_samples",
]

log = logging.getLogger("datakit")
ON_ERROR = ("raise", "skip", "substitute")
BAD_SAMPLES_FORMAT = "datakit-bad-samples"
BAD_SAMPLES_VERSION = 1
MAX_SUBSTITUTES = 20
DEFAULT_CACHE_LIMIT = 2 * 2**30


def _size_text(n: float) -> str:
    """Bytes as a message gives them: MiB from 1 MiB up, else KiB, else bytes (never "0 MiB over 0 MiB")."""
    if n >= 2**20:
        return f"{n / 2**20:.0f} MiB"
    return f"{n / 2**10:.0f} KiB" if n >= 2**10 else f"{int(n)} bytes"


class SampleList(Sequence):
    """A dataset's ``(file, class index)`` pairs, made one at a time from its compact index; equal to a
    list of the same pairs."""

    def __init__(self, dataset: ImageDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = operator.index(index)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"sample index {index} out of range for {len(self)} samples")
        return self.dataset.name(i), int(self.dataset.targets[i])

    def __eq__(self, other) -> bool:
        if isinstance(other, (SampleList, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return f"SampleList({len(self)} samples)"


class ImageDataset:
    """Base of every datakit dataset: ``(image, target)`` samples, decoded lazily.

    The image is uint8 HWC numpy (RGB by default, ``mode="bgr"`` for OpenCV code), passed to
    ``transform``; the target is the class index (int) passed to ``target_transform``.

    ``on_error`` says what an unreadable sample does (see docs/loader.md, "Bad samples"):

    - ``"raise"`` (default): :class:`SampleError` naming the index and file.
    - ``"skip"``: the sample is replaced by the next readable index (``i+1``, ``i+2``, ...), so
      every index still yields a sample and batches keep their size.
    - ``"substitute"``: replaced by a readable sample drawn from ``(seed, epoch, index)`` (the
      seed and epoch come with the index from :func:`~datakit.loader.create_loader`'s sampler),
      the same whatever the number of workers, and the same after a resume.
    - a callable ``handler(exc)`` in the style of webdataset's handlers: it may raise, return
      true to substitute as above, or return false to raise the sample's error.

    Each bad sample is logged once per process and recorded in ``bad_samples`` (a JSON file;
    workers append to ``<file>.parts/<host>-<pid>.jsonl``, merged by :meth:`merge_bad_samples`, which
    the loader calls after every epoch). Samples listed there from an earlier run, or merged after an
    epoch, are known bad and substituted without being read again. When more than ``max_bad_fraction`` of the
    dataset is bad, reading raises: a lost mount must not train on substitutes.
    """

    def __init__(
        self,
        targets: np.ndarray,
        classes: Sequence[str],
        *,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        mode: str = "rgb",
        on_error: str | Callable[[SampleError], bool] = "raise",
        bad_samples: str | os.PathLike | None = None,
        max_bad_fraction: float = 0.01,
        cache: str | None = None,
        cache_limit: int = DEFAULT_CACHE_LIMIT,
    ) -> None:
        if not callable(on_error) and on_error not in ON_ERROR:
            raise UsageError(f"on_error must be one of {', '.join(ON_ERROR)} or a handler function, got {on_error!r}")
        if not 0 <= max_bad_fraction <= 1:
            raise UsageError(f"max_bad_fraction must be between 0 and 1, got {max_bad_fraction!r}")
        if mode not in ("rgb", "bgr", "gray", "unchanged"):
            raise ValueError(f"mode must be one of rgb, bgr, gray, unchanged, got {mode!r}")
        if cache not in (None, "memory"):
            raise ValueError(f"cache must be None or 'memory', got {cache!r}")
        self.targets = np.asarray(targets, dtype=np.int64)
        self.classes = list(classes)
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.transform = transform
        self.target_transform = target_transform
        self.mode = mode
        self.on_error = on_error
        self.max_bad_fraction = float(max_bad_fraction)
        self.skipped = 0  # substitutions served by this process
        self.bad: dict[int, tuple[str, str]] = {}  # index -> (name, reason), known in this process
        self.replaced: dict[int, int] = {}  # bad index -> the index last read in its place, in this process
        self._allowed: dict[int, bool] = {}  # bad index -> what a callable on_error said of it, in this process
        # the file as given, for messages; written where it is now: a later os.chdir (a notebook's %cd) moved a
        # relative one, and the record of this run went to another folder than the one read at the start
        self._bad_shown = os.fspath(bad_samples) if bad_samples is not None else None
        self.bad_samples = Path(os.path.abspath(bad_samples)) if bad_samples is not None else None
        self._cache: dict[int, bytes] | None = None
        if cache == "memory":
            need = self.encoded_size()
            if need > cache_limit:
                raise ValueError(
                    f"cache='memory' needs {_size_text(need)} for {len(self)} encoded images, over the limit of "
                    f"{_size_text(cache_limit)}; raise cache_limit=, or pack the data with `datakit pack-lmdb`"
                )
            self._cache = {}
        if self.bad_samples is not None and on_error != "raise":
            root = getattr(self, "root", None)  # a class folder's: the file and its .parts folder among the classes
            if isinstance(root, (str, os.PathLike)) and os.path.isdir(root) and getattr(self, "table", None) is None:
                inside = os.path.realpath(self.bad_samples.parent) + os.sep
                if inside.startswith(os.path.realpath(root).rstrip(os.sep) + os.sep):
                    raise UsageError(f"bad_samples={self._bad_shown!r}: inside the dataset's folder "
                                     f"{os.fspath(root)!r}, where the next scan would take the file and its .parts "
                                     "folder for data (a class folder); give a path outside it")  # fmt: skip
            # a dataset is built in the main process (workers get a copy): fold what an earlier
            # run left behind into the file, start the parts afresh, and know those samples as bad
            where = self.bad_samples.parent
            existing = next(a for a in (where, *where.parents) if a.exists() or a == a.parent)  # made when written
            is_file = existing.exists() and not existing.is_dir()
            if is_file or not os.access(existing, os.W_OK):
                # its folder a file, or not writable: said now, not at the first bad sample in a worker
                why = "a file" if is_file else "not writable"
                where = existing
                raise UsageError(f"bad_samples={self._bad_shown!r}: cannot be written (its folder "
                                 f"{os.fspath(where)!r} is {why})")  # fmt: skip
            if self.bad_samples.exists() and not self.bad_samples.is_file():  # a folder, a pipe, a device
                what = "a folder" if self.bad_samples.is_dir() else not_a_file(self.bad_samples)
                raise UsageError(f"bad_samples={self._bad_shown!r}: {what}, not a file: the bad samples "
                                 "are written to a JSON file of that name")  # fmt: skip
            self.merge_bad_samples()
            shutil.rmtree(self._parts_dir(), ignore_errors=True)
            for entry in self._read_report(self.bad_samples):
                self.bad[entry["index"]] = (entry["name"], entry["reason"])
            n = len(self)
            if len(self.bad) > self.max_bad_fraction * n:  # known bad from the start: the limit holds for them too
                raise SampleError(
                    f"{len(self.bad)} of {n} samples are listed as unreadable in {self._bad_shown} "
                    f"({len(self.bad) / n:.1%}), more than max_bad_fraction={self.max_bad_fraction:g}: the source "
                    "looks broken, not a few bad files; repair them (and delete the file), or raise max_bad_fraction"
                )

    def use_classes(self, classes: Sequence[str], where: str = "") -> None:
        """Index the targets by ``classes`` (a training split's), not by this source's own classes: a
        split read from a file of its own (a val table lacking a class) then keeps the same indices."""
        given = [str(c) for c in classes]
        if len(set(given)) != len(given):
            raise UsageError(f"classes= names a class twice: {given!r}")
        index = {c: i for i, c in enumerate(given)}
        table = getattr(self, "table", None)
        mine = as_given(self.classes, given) if table is not None and table.kind == "int" else self.classes
        unknown = unknown_classes(mine, given, where or type(self).__name__, "classes=", table)
        if unknown:
            raise LabelError(unknown)
        to = np.asarray([index[c] for c in mine] + [-1], dtype=np.int64)
        self.targets = to[self.targets]
        self.classes, self.class_to_idx = given, index
        self._given = True  # another split's classes, of which this one may lack some (a pack records it)
        if getattr(self, "class_map", None) is not None:  # a table's: what a pack of it records
            self.class_map = ClassMap(tuple(given))

    @property
    def samples(self) -> SampleList:
        """``(file, class index)`` pairs, as ImageFolder's ``samples`` (the file as :meth:`name` gives it:
        a path, a zip's member, a pack's key): a sequence over the compact index, each pair made when
        it is read (``ds.samples[i]`` costs one pair, not the whole list)."""
        return SampleList(self)

    @samples.setter
    def samples(self, value) -> None:
        raise AttributeError(
            "a datakit dataset's samples are read from its compact index and cannot be set; to keep some of "
            "them, use torch.utils.data.Subset(ds, indices) (create_loader takes it)"
        )

    imgs = samples  # ImageFolder's older name

    # what subclasses provide
    def __len__(self) -> int:
        return len(self.targets)

    def name(self, index: int) -> str:
        """The file, member or key of sample ``index``, as shown in messages."""
        raise NotImplementedError

    def read(self, index: int) -> bytes:
        """The encoded bytes of sample ``index``."""
        raise NotImplementedError

    def encoded_size(self) -> int:
        """Total encoded bytes (for the memory cache's limit)."""
        raise NotImplementedError

    # shared behaviour
    def load_bytes(self, index: int) -> bytes:
        if self._cache is not None:
            loaded = getattr(self, "_loaded", None)
            if loaded is not None:  # preload()'s: one buffer, no object per image
                blob, ends = loaded
                return blob[ends[index] : ends[index + 1]].tobytes()
            data = self._cache.get(index)
            if data is None:
                data = self._cache[index] = self.read(index)
            return data
        return self.read(index)

    def preload(self) -> None:
        """Fill the memory cache now, in the main process, so that forked workers share it: one NumPy buffer of
        every image's bytes, which reading never writes to (a ``bytes`` object per image would have each worker
        copy the memory pages it reads, its reference counts changing: a copy of the cache per worker)."""
        if self._cache is None or getattr(self, "_loaded", None) is not None:
            return
        n = len(self)
        ends = np.zeros(n + 1, np.int64)
        blob = np.empty(self.encoded_size(), np.uint8)  # each image copied in as it is read: no second copy at once
        if len(blob):
            import torch

            from datakit.collate import _prefault

            _prefault(torch.from_numpy(blob))  # its pages in one call, not a fault per 4 KiB as it is filled
        for i in range(n):
            data = self._cache.pop(i, None) or self.read(i)
            end = int(ends[i]) + len(data)
            if end > len(blob):  # a file grown since its size was taken
                blob = np.concatenate([blob, np.empty(max(end - len(blob), len(blob) // 8), np.uint8)])
            blob[ends[i] : end] = np.frombuffer(data, np.uint8)
            ends[i + 1] = end
        self._loaded = (blob[: int(ends[-1])], ends)

    def decode(self, index: int, max_size: int | None = None, fused: Callable | None = None, *,
               strict: bool = False) -> np.ndarray:  # fmt: skip
        """Sample ``index``'s image, without transform (or through ``fused``, a transform that
        decodes the bytes itself); :class:`SampleError` when unreadable (with ``strict``, also when
        the decoder warns of damaged data it filled in, as :func:`~datakit.io.decode_image`)."""
        try:
            data = self.load_bytes(index)
            # no name on the hot path (an LMDB name is a lookup): it is put in only when decoding fails
            if fused is not None:
                return fused(data, self.mode, None)
            return decode_image(data, self.mode, max_size, strict=strict)
        except Exception as exc:
            if getattr(exc, "_datakit_step", False):  # a pipeline's augment or normalisation step: not the image's
                name_sample(exc, "transform", index, self.name(index))  # error, never a bad sample to skip or record
                raise
            if isinstance(exc, PackChangedError):  # the pack's file changed under the dataset: no image's fault
                raise
            if isinstance(exc, ImageDecodeError):
                msg = str(exc)
                if msg.startswith(UNNAMED):
                    msg = self.name(index) + msg[len(UNNAMED) :]
                raise SampleError(f"sample {index}: {msg}") from exc
            if isinstance(exc, (OSError, LabelError, KeyError, ValueError)):
                text = str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc)  # KeyError's str: its repr
                raise SampleError(text if names_sample(text, index) else f"sample {index}: {text}") from exc
            raise

    def _image(self, index: int) -> tuple[int, np.ndarray]:
        if not isinstance(index, (int, np.integer)):
            try:  # a 0-d integer tensor, anything with __index__; never a float (1.7 read sample 1)
                index = operator.index(index)
            except TypeError:
                raise TypeError(f"sample index must be an integer, got {type(index).__name__} {index!r}") from None
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"sample index {index} out of range for a dataset of {n}")
        i = int(index) % n
        # a transform that can decode the bytes itself decodes only what it needs (reduced JPEG scale)
        fused = getattr(self.transform, "from_bytes", None)
        if self.on_error == "raise":
            return i, self.decode(i, None, fused)
        if i not in self.bad:
            try:
                return i, self.decode(i, None, fused)
            except SampleError as exc:
                self._record_bad(i, exc)
                if callable(self.on_error):
                    self._allowed[i] = bool(self.on_error(exc))
                    if not self._allowed[i]:
                        raise
        elif callable(self.on_error):  # known bad (read before, or listed by bad_samples=): the handler decides too
            error = SampleError(f"sample {i}: {self.bad[i][0]}: {self.bad[i][1]}")
            if i not in self._allowed:
                self._allowed[i] = bool(self.on_error(error))
            if not self._allowed[i]:
                raise error
        # the seed and epoch travel with the index (create_loader's sampler), so the choice
        # does not depend on which worker reads it, nor on an interruption in between
        from datakit.loader import reseed

        tried = []
        for j in self._substitutes(i, getattr(index, "seed", 0), getattr(index, "epoch", 0),
                                   getattr(index, "pool", None), getattr(index, "pos", 0)):  # fmt: skip
            if j in self.bad:
                continue
            tried.append(j)
            reseed(index)  # a seeded loader: the draws of a read that never met the bad one
            try:
                img = self.decode(j, None, fused)
            except SampleError as exc:
                self._record_bad(j, exc)
                continue
            self.skipped += 1
            self.replaced[i] = j
            return j, img
        pool = getattr(index, "pool", None)
        if pool is not None and not tried:  # (a Subset of one sample, or of bad ones alone)
            raise SampleError(f"sample {i}: {self.bad[i][0]}: {self.bad[i][1]}; and the Subset it is read through "
                              f"holds no other readable sample to take its place ({len(pool)} in all)")  # fmt: skip
        raise SampleError(
            f"sample {i}: {self.bad[i][0]}: {self.bad[i][1]}; and no readable substitute among samples {tried}"
        )

    def _substitutes(self, i: int, seed: int, epoch: int, pool: Sequence[int] | None = None, pos: int = 0):
        """The samples to try in place of bad sample ``i``; ``pool``: the samples of the Subset it was read
        through (``pos``: its place there), which the replacement is one of (create_loader passes them)."""
        if pool is not None:
            m = len(pool)
            if self.on_error == "skip":
                return (j for k in range(1, m) if (j := int(pool[(pos + k) % m])) != i)
            rng = np.random.default_rng([seed & 0xFFFFFFFF, epoch, i])
            return (j for p in rng.integers(0, m, MAX_SUBSTITUTES) if (j := int(pool[p])) != i)
        n = len(self)
        if self.on_error == "skip":
            return ((i + k) % n for k in range(1, n))
        # like timm, a bounded number of draws: past that the data is broken, not unlucky
        rng = np.random.default_rng([seed & 0xFFFFFFFF, epoch, i])
        return (int(j) for j in rng.integers(0, n, MAX_SUBSTITUTES) if j != i)

    # bad-sample records
    def _parts_dir(self) -> Path:
        assert self.bad_samples is not None
        return self.bad_samples.with_name(self.bad_samples.name + ".parts")

    def _record_bad(self, i: int, exc: SampleError) -> None:
        if i in self.bad:
            return
        msg = str(exc)
        name = self.name(i)
        reason = msg.removeprefix(f"sample {i}: ").removeprefix(f"{name}: ")
        self.bad[i] = (name, reason)
        log.warning("bad sample %d: %s: %s", i, name, reason)
        known = set(self.bad)
        if self.bad_samples is not None:
            # one append-only file per process: a line is written whole, and no process waits on another
            parts = self._parts_dir()
            line = json_text({"index": i, "name": name, "reason": reason}) + "\n"
            try:
                parts.mkdir(parents=True, exist_ok=True)
                with open(parts / f"{_process_name()}.jsonl", "a", encoding="utf-8") as f:
                    f.write(line)
            except OSError as err:  # a full disk, a read-only one: the sample is still replaced, the record said lost
                if str(parts) not in _SAID_UNRECORDED:
                    _SAID_UNRECORDED.add(str(parts))
                    fix = ("give bad_samples= a file on a writable disk" if err.errno in (errno.EROFS, errno.EACCES,
                           errno.EPERM) else "free space there")  # fmt: skip
                    log.warning("bad samples cannot be recorded in %s (%s): they are still replaced, but %s will "
                                "not list them; %s", parts, err.strerror or type(err).__name__, self._bad_shown,
                                fix)  # fmt: skip
            known |= {e["index"] for e in self._own_parts()}
        n = len(self)
        if len(known) > self.max_bad_fraction * n:
            where = ""
            if self.bad_samples is not None:
                try:  # the file this names holds them now, not only the parts an epoch's end would merge
                    where = f"; listed in {self.merge_bad_samples()}"
                except (OSError, UsageError) as err:
                    where = f"; recorded in {self._parts_dir()} (merging them into {self.bad_samples} failed: {err})"
            raise SampleError(
                f"{len(known)} of {n} samples are unreadable ({len(known) / n:.1%}), more than "
                f"max_bad_fraction={self.max_bad_fraction:g}: the source looks broken, not a few bad files "
                f"(the latest: sample {i}: {name}: {reason}){where}"
            )

    def _read_parts(self) -> list[dict]:
        out = []
        parts = self._parts_dir()
        for path in sorted(parts.glob("*.jsonl")) if parts.is_dir() else ():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # a line a worker is writing right now; it is read at the next merge
        return out

    def _own_parts(self) -> list[dict]:
        """The recorded parts that are this dataset's (its index, its name there): another dataset given the same
        ``bad_samples=`` (a train and a val set) records its own beside them, which are not merged nor counted here."""
        out = []
        for e in self._read_parts():
            i = e.get("index")
            if isinstance(i, int) and 0 <= i < len(self) and same_sample_name(self.name(i), str(e.get("name"))):
                out.append(e)
        return out

    def _read_report(self, path: Path) -> list[dict]:
        """The entries of an existing report that belong to this dataset (same size, same names)."""
        if not path.exists():
            return []
        data = read_bad_samples(path)
        if data.get("samples") != len(self):
            log.warning("%s: written for a dataset of %s samples, this one has %d; ignored", path,
                        data.get("samples"), len(self))  # fmt: skip
            return []
        return [
            e
            for e in data["bad"]
            if 0 <= e["index"] < len(self) and same_sample_name(self.name(e["index"]), e["name"], e.get("cwd"))
        ]

    def merge_bad_samples(self) -> Path | None:
        """Merge what every process recorded into the ``bad_samples`` JSON file (atomically) and
        return its path; ``None`` without one. Safe to call while workers are still appending."""
        if self.bad_samples is None:
            return None
        entries = {e["index"]: e for e in self._read_report(self.bad_samples)}
        found = self._own_parts() + [{"index": i, "name": nm, "reason": r} for i, (nm, r) in self.bad.items()]
        new = [e for e in found if e["index"] not in entries]
        if not new and self.bad_samples.exists():
            self._merged(entries)
            return self.bad_samples
        here = os.getcwd()
        for e in new:
            entries[e["index"]] = {"index": e["index"], "name": e["name"], "reason": e["reason"]}
            if not os.path.isabs(e["name"]):  # what a relative name is relative to: check or pack-lmdb run from
                entries[e["index"]]["cwd"] = here  # another folder read the same file as another (refused)
        data = {"format": BAD_SAMPLES_FORMAT, "version": BAD_SAMPLES_VERSION, "dataset": repr(self),
                "samples": len(self), "count": len(entries), "bad": [entries[k] for k in sorted(entries)]}  # fmt: skip
        # a name no other process has, on this machine or another sharing the folder (containers on two nodes
        # often run their trainers under the same PID): two merges at once each write a file of their own
        tmp = self.bad_samples.with_name(f".{self.bad_samples.name}.{_process_name()}.{os.urandom(4).hex()}.tmp")
        try:
            self.bad_samples.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json_text(data, indent=1), encoding="utf-8")
            os.replace(tmp, self.bad_samples)
        except OSError as exc:  # its folder a file, /proc, a full disk: the report's path, not a temporary name
            raise UsageError(f"bad_samples={self._bad_shown!r}: cannot be written "
                             f"({exc.strerror or type(exc).__name__})") from None  # fmt: skip
        finally:
            discard(tmp)
        self._merged(entries)
        return self.bad_samples

    def _merged(self, entries: dict) -> None:
        """After a merge: the samples in the file that are this dataset's (its name at that index) known as bad
        here, so that the next epoch's workers, forked from this process, skip them without reading, logging and
        recording them again (a parts file more each epoch otherwise). The parts stay until the dataset is made
        again: another process sharing the file may be merging them now."""
        for i, e in entries.items():
            if i not in self.bad and 0 <= i < len(self) and same_sample_name(self.name(i), e["name"], e.get("cwd")):
                self.bad[i] = (e["name"], e["reason"])

    def __setstate__(self, state: dict) -> None:
        if "transform" in state and "_transform" not in state:  # pickled before transform became a property
            state["_transform"] = state.pop("transform")
        self.__dict__.update(state)

    @property
    def transform(self) -> Callable | None:
        """What each sample's image goes through (set at any time; torchvision steps are checked,
        see :func:`datakit.transforms.check_numpy_transform`)."""
        return self._transform

    @transform.setter
    def transform(self, value: Callable | None) -> None:
        if value is not None:
            from datakit.transforms import check_numpy_transform

            check_numpy_transform(value)
        self._transform = value

    def __getitem__(self, index: int):
        index, img = self._image(index)
        target = int(self.targets[index])
        what = "transform"
        try:
            if self.transform is not None and not hasattr(self.transform, "from_bytes"):
                img = self.transform(img)
            what = "target_transform"
            if self.target_transform is not None:
                target = self.target_transform(target)
        except Exception as exc:  # the user's own error, kept as it is, with the sample it met
            name_sample(exc, what, index, self.name(index))
            raise
        return img, target

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} samples, {len(self.classes)} classes)"


SAMPLE_NOTE = re.compile(r"\(raised by the dataset's (?:target_)?transform on sample \d+: .*\)")


def name_sample(exc: BaseException, what: str, index: int, name: str) -> None:
    """Add to an error a transform raised a note naming the sample and its file (traceback prints it below the
    message; a worker's error keeps it, see loader._unwrap_worker_error). Python 3.11 and later."""
    from datakit.errors import DatakitError

    add = getattr(exc, "add_note", None)
    if add is not None and not isinstance(exc, DatakitError):
        notes = getattr(exc, "__notes__", None)
        if notes:  # one exception raised again (a transform's own): the sample it met this time, not every one
            notes[:] = [n for n in notes if not (isinstance(n, str) and SAMPLE_NOTE.fullmatch(n))]
        add(f"(raised by the dataset's {what} on sample {index}: {name})")


def _process_name() -> str:
    """This process's name among all that may share a folder: host and PID (the PID alone repeats across
    machines: containers on two nodes often run their trainers under the same one)."""
    import socket

    host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "host"
    return f"{host}-{os.getpid()}"


def read_bad_samples(path: str | os.PathLike) -> dict:
    """Read a bad-samples file written while training (``on_error`` with ``bad_samples=``).

    Returns ``{"format", "version", "dataset", "samples", "count", "bad": [{"index", "name",
    "reason"}, ...]}``; :class:`UsageError` when the file is missing or is not one.
    """
    path = Path(path)
    if path.exists() and not path.is_file() and not path.is_dir():  # a pipe would block until something writes
        raise UsageError(f"{path}: {not_a_file(path)}, not a bad-samples file (the JSON file training wrote)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such bad-samples file") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not a datakit bad-samples file ({exc})") from None
    fmt = data.get("format") if isinstance(data, dict) else None
    if fmt != BAD_SAMPLES_FORMAT:
        raise UsageError(f"{path}: not a datakit bad-samples file (format {fmt!r})")
    if data.get("version") != BAD_SAMPLES_VERSION:
        raise UsageError(
            f"{path}: bad-samples version {data.get('version')!r}; this datakit reads version {BAD_SAMPLES_VERSION}"
        )
    problem = _bad_samples_problem(data)
    if problem is not None:
        raise UsageError(f"{path}: not a datakit bad-samples file ({problem}); write it again by training with "
                         "bad_samples=, or fix it by hand")  # fmt: skip
    return data


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _bad_samples_problem(data: dict) -> str | None:
    """What in a bad-samples file is not as it is written (a file edited by hand), or None."""
    if "samples" in data and not _whole(data["samples"]):
        return f"'samples' must be a whole number >= 0, got {data['samples']!r}"
    bad = data.get("bad")
    if not isinstance(bad, list):
        return f"'bad' must be a list of samples, got {bad!r}" if "bad" in data else "no 'bad' list"
    for k, entry in enumerate(bad):
        if not isinstance(entry, dict):
            return f"entry {k} of 'bad' must be an object with 'index', 'name' and 'reason', got {entry!r}"
        for key, ok, what in (("index", _whole, "a whole number >= 0"), ("name", _is_str, "a string"),
                              ("reason", _is_str, "a string")):  # fmt: skip
            if key not in entry:
                return f"entry {k} of 'bad' has no {key!r}"
            if not ok(entry[key]):
                return f"entry {k} of 'bad': {key!r} must be {what}, got {entry[key]!r}"
        if "\x00" in entry["name"]:
            return f"entry {k} of 'bad': 'name' holds a NUL character, which no file name holds: {entry['name']!r}"
        if "cwd" in entry and not (isinstance(entry["cwd"], str) and os.path.isabs(entry["cwd"])):
            return f"entry {k} of 'bad': 'cwd' must be an absolute folder, got {entry['cwd']!r}"
    return None


def _is_str(value: object) -> bool:
    return isinstance(value, str)


def recorded_name(entry: dict) -> str:
    """A bad-samples report entry's name for a message: with the folder it is relative to, where that is not this
    process's (a report of a copy of the project, or read from another folder)."""
    name, cwd = str(entry.get("name")), entry.get("cwd")
    try:
        elsewhere = isinstance(cwd, str) and not os.path.isabs(name) and os.path.realpath(cwd) != os.getcwd()
    except (OSError, ValueError):
        elsewhere = False
    return f"{name!r} (relative to {cwd})" if elsewhere else repr(name)


def same_sample_name(a: str, b: str, cwd: str | None = None) -> bool:
    """Whether two names of a sample (``name(i)`` now, and as a bad-samples file recorded it), or of a
    source, name one file: the same spelling, or the path given another way (relative or absolute,
    through a link); ``cwd``: the folder a relative ``b`` is relative to (the recording process's)."""
    try:
        if cwd is not None and not os.path.isabs(b) and os.path.isdir(cwd):
            # relative to the recording process's folder, which is there: not this one's, where the same spelling
            # may name another file (a copy of the data beside it); a folder no longer there (the project moved,
            # mounted elsewhere) leaves the names as they are spelled
            return os.path.realpath(a) == os.path.realpath(os.path.join(cwd, b))
        if a == b:
            return True
        return os.path.realpath(a) == os.path.realpath(b)
    except ValueError:  # a NUL in a name written by hand: no path
        return a == b


# ---------------------------------------------------------------------------------------------
# folders


# torchvision.datasets.folder.IMG_EXTENSIONS, in its order: a folder yields the same files,
# hence the same indices and targets, as ImageFolder. datakit decodes more (io.IMAGE_EXTENSIONS:
# .gif, .jpe, .pbm); counting those by default would shift every target after such a file.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def _extensions(extensions: Sequence[str] | str | None) -> tuple[str, ...]:
    """``extensions`` as lower-case suffixes with their dot; ``None`` is :data:`IMG_EXTENSIONS`."""
    if extensions is None:
        return IMG_EXTENSIONS
    if isinstance(extensions, str):
        extensions = (extensions,)
    out = tuple(e.lower() if e.startswith(".") else "." + e.lower() for e in extensions)
    if not out or any(len(e) < 2 for e in out):
        raise ValueError(f"extensions must be suffixes like '.jpg' or '.gif', got {tuple(extensions)!r}")
    return out


def _is_image(name: str, extensions: tuple[str, ...] = IMG_EXTENSIONS) -> bool:
    return name.lower().endswith(extensions)


_SAID_NUMBERED: set[str] = set()  # folders whose numbered classes this process has warned of
_SAID_UNRECORDED: set[str] = set()  # bad-sample parts folders this process could not write to, warned of once


def _warn_numbered(root: str, classes: list[str]) -> None:
    """Warn, once per folder or archive, where class folders named by numbers ('0'..'10') are indexed in text
    order (ImageFolder's: '10' is class 2) otherwise than a label table of the same numbers would index them."""
    numbered = sorted(classes, key=int) if all(c.isascii() and c.isdigit() for c in classes) else classes
    if numbered == classes or root in _SAID_NUMBERED or _OPENED_WITH_CLASSES.get():  # (classes= is the fix it names)
        return
    _SAID_NUMBERED.add(root)
    k = next(k for k, (a, b) in enumerate(zip(classes, numbered)) if a != b)
    # a table's index is the number's place by value: a table of 1..10 is read as 0..9 (remap_labels)
    log.warning("%s: the class folders are numbers, indexed in text order as ImageFolder indexes them (folder %r is "
                "class %d); a label table of the same numbers indexes them by value (%r would be %d): to read one "
                "with the other's indices, pass classes=", root, classes[k], k, classes[k],
                numbered.index(classes[k]))  # fmt: skip


def _without_caches(where: str, classes: list[str], is_cache) -> list[str]:
    """``classes`` but for datakit's own index caches (``train_pipeline(index_cache="data/.cache")``, a folder
    marked by its INDEX_CACHE file), which hold no images and are no class: said once, in a warning."""
    caches = [c for c in classes if is_cache(c)]
    if caches:
        log.warning("%s: %s skipped: datakit's index cache, not a class folder (keep it outside the dataset)", where,
                    ", ".join(map(repr, caches)))  # fmt: skip
    return [c for c in classes if c not in caches]


class _Walks:
    """Folders walked in one class: a folder reached by two paths (two links to one pool) is walked
    by each, as ImageFolder walks it, but links that reach the same folders by ever more paths (each
    folder linking twice to the next) would be walked without end in practice: refused."""

    LIMIT = 10_000  # walks beyond one per real folder, in one class, before the ratio below is looked at
    RATIO = 100  # walks per real folder: links to one pool from a few places are far under it, lattices pass it

    def __init__(self, root: str, cls: str) -> None:
        self.root, self.cls, self.walks, self.real = root, cls, 0, set()

    def count(self, real: str) -> None:
        self.walks += 1
        self.real.add(real)
        if self.walks - len(self.real) > self.LIMIT and self.walks > self.RATIO * len(self.real):
            raise LabelError(f"{self.root}: class folder {self.cls!r}: links reach the same folders by more than "
                             f"{self.RATIO} paths each (each would be walked, as ImageFolder walks them); remove the "
                             "links that lead to folders reached already")  # fmt: skip


def scan_class_folders(
    root: str | os.PathLike, extensions: Sequence[str] | str | None = None
) -> tuple[list[str], list[str], list[int]]:
    """(classes, relative file paths, class indices) as torchvision's ImageFolder finds them:
    every sub-folder is a class (sorted by name), files whose name ends in one of ``extensions``
    (any case; default :data:`IMG_EXTENSIONS`, ImageFolder's list) found recursively, in the same order.

    Links are followed wherever they lead, as ImageFolder follows them (``train/cat -> /pool/cats``),
    and a link back to a folder the path is inside (``x -> .``) is not walked again, so a scan always
    ends; a folder reached by two paths (``cat/a -> pool``, ``cat/b -> pool``) is walked by both, as in
    ImageFolder. A link to nothing (or through a file) that ends in an image extension is a sample, as in
    ImageFolder, so the indices stay ImageFolder's; reading it fails, naming it.
    """
    root = os.fspath(root)
    extensions = _extensions(extensions)

    def is_dir(entry: os.DirEntry) -> bool:
        try:
            return entry.is_dir()
        except OSError:  # a link through a file ('a.png/'): not a folder
            return False

    entries = list(os.scandir(root))
    classes = sorted(e.name for e in entries if is_dir(e))
    # images beside the class folders are in no class: left out, as ImageFolder leaves them, but said
    beside = sorted(e.name for e in entries if not is_dir(e) and _is_image(e.name, extensions))
    classes = _without_caches(root, classes, lambda c: os.path.isfile(os.path.join(root, c, "INDEX_CACHE")))
    if not classes:
        raise NotADataset(
            f"{root}: no class sub-folders (expected {root}/<class>/<image>, or pass labels=, --labels TABLE)"
        )
    _refuse_unicode_twins(root, classes)
    files, targets, empty = [], [], []
    # images datakit decodes that ImageFolder's list leaves out (.gif, .jpe, .pbm): left out too, said
    others = tuple(e for e in IMAGE_EXTENSIONS if e not in extensions) if extensions == IMG_EXTENSIONS else ()
    left_out: list[str] = []
    unlisted: list[str] = []  # image files by their look that no image suffix names (HEIC, no suffix, 'a.jpg ')
    for idx, cls in enumerate(classes):
        found: list[tuple[str, list[str]]] = []  # (folder, image names), sorted as os.walk's tuples are
        walks = _Walks(root, cls)
        todo: list[tuple[str, frozenset]] = [(os.path.join(root, cls), frozenset())]
        while todo:
            folder, above = todo.pop()
            real = os.path.realpath(folder)
            if real in above:  # a link back to a folder this path is inside: a loop
                continue
            walks.count(real)
            names = []
            for e in os.scandir(folder):
                if is_dir(e):
                    todo.append((e.path, above | {real}))
                elif _is_image(e.name, extensions):  # a broken link too, as ImageFolder lists it
                    names.append(e.name)
                elif others and e.name.lower().endswith(others):
                    left_out.append(os.path.relpath(e.path, root))
                elif extensions == IMG_EXTENSIONS and _image_by_another_name(e.name, e.path):
                    unlisted.append(os.path.relpath(e.path, root))
            found.append((folder, sorted(names)))
        n = 0
        for folder, names in sorted(found):
            for fname in names:
                files.append(os.path.relpath(os.path.join(folder, fname), root))
                targets.append(idx)
                n += 1
        if not n:
            empty.append(cls)
    # (before any warning: one of names not UTF-8 on the disk would advise renaming names the locale misread)
    refuse_unreadable_names(root, "".join(classes).isascii() and all(f.isascii() for f in files))
    if empty:  # every one named, as ImageFolder names them
        hint = _OTHER_FILES if extensions == IMG_EXTENSIONS else ""
        which = (f"class folder {empty[0]!r} holds" if len(empty) == 1
                 else f"class folders {', '.join(map(repr, empty))} hold")  # fmt: skip
        raise LabelError(f"{root}: {which} no images (no file ending in {' '.join(extensions)}{hint})")
    _warn_left_out(root, left_out)
    _warn_unlisted(root, unlisted)
    if beside:
        n = len(beside)
        # (said, with no advice to move them: a contact sheet or a plot written there is meant to be no sample)
        log.warning("%s: %d image%s beside the class folders, in none of them (%s%s): not read, as torchvision's "
                    "ImageFolder does not read them; a sample is read from its class folder", root, n, "s" * (n > 1),
                    beside[0], f" and {n - 1} more" if n > 1 else "")  # fmt: skip
    hidden = [c for c in classes if c.startswith(".")]
    if hidden:
        log.warning(
            "%s: hidden folders %s count as classes (as in ImageFolder); remove them if unintended", root, hidden
        )
    _warn_numbered(root, classes)
    _warn_wrapped(root, classes, files)
    legacy = undecoded_names(root, files)
    if legacy:
        log.warning("%s", legacy)
    return classes, files, targets


def _warn_left_out(where: str, left_out: list[str]) -> None:
    """Warn of the images ImageFolder's list of suffixes leaves out (.gif, .jpe, .pbm), which datakit decodes."""
    if not left_out:
        return
    left_out = sorted(left_out)
    n = len(left_out)
    kinds = " ".join(sorted({os.path.splitext(f)[1].lower() for f in left_out}))
    them = "them" if n > 1 else "it"
    more = f" and {n - 1} more" if n > 1 else ""
    log.warning("%s: %d image%s left out (%s: %s%s), as torchvision's ImageFolder leaves %s out, so that the indices "
                "stay its; to read %s, convert %s to PNG, or pass extensions=datakit.io.IMAGE_EXTENSIONS (Python)",
                where, n, "s" * (n > 1), kinds, left_out[0], more, them, them, them)  # fmt: skip


# image formats neither datakit nor ImageFolder reads: phones' HEIC/HEIF, AVIF, JPEG XL and 2000, cameras' raw files
_UNREAD_IMAGES = (".heic", ".heif", ".avif", ".jxl", ".jp2", ".j2k", ".dng", ".cr2", ".cr3", ".nef", ".arw", ".orf",
                  ".rw2", ".raf", ".psd")  # fmt: skip


def _image_by_another_name(name: str, path: str | None = None) -> bool:
    """Whether a file that no image suffix names is an image all the same: a format read by neither datakit nor
    ImageFolder (``IMG_0001.HEIC``), an image suffix with spaces or dots after it (``a.jpg ``), or (with ``path``,
    a file on disk) a name without a suffix whose first bytes are an image's (a JPEG saved as ``IMG_0002``)."""
    lower = name.lower()
    if name.startswith("._"):  # macOS's AppleDouble companions
        return False
    if lower.endswith(_UNREAD_IMAGES) or lower.rstrip(" .").endswith(IMAGE_EXTENSIONS) and lower != lower.rstrip(" ."):
        return True
    if path is None or "." in name or not os.path.isfile(path):  # (a pipe would block the scan: never opened)
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return False
    return image_format(head) in ("JPEG", "PNG", "GIF", "TIFF", "WEBP")  # (not BMP's 'BM', PNM's 'P1': a text's start)


def _warn_unlisted(where: str, files: list[str]) -> None:
    """Warn of image files left out because no image suffix names them (:func:`_image_by_another_name`)."""
    if not files:
        return
    files = sorted(files)
    n = len(files)

    def kind(f: str) -> str:
        base = os.path.basename(f)
        if base.lower().endswith(_UNREAD_IMAGES):
            return os.path.splitext(base)[1].lower()
        return "spaces or dots after the suffix" if base != base.rstrip(" .") else "no suffix"

    kinds = ", ".join(sorted({kind(f) for f in files}))
    more = f" and {n - 1} more" if n > 1 else ""
    log.warning("%s: %d image file%s left out (%s: %r%s), as ImageFolder leaves %s out: HEIC, AVIF, JPEG XL and "
                "camera raw files are read by neither (convert them to JPEG or PNG), and a file is taken as an image "
                "by its suffix (rename it to end in .jpg, .png ...)", where, n, "s" * (n > 1), kinds, files[0], more,
                "them" if n > 1 else "it")  # fmt: skip


def _warn_wrapped(root: str, classes: list[str], files: list[str]) -> None:
    """Warn of one class whose images all sit in sub-folders of it, two or more: a wrapping folder (a zipped folder
    extracted, 数据集/cat/1.jpg), whose sub-folders are the classes meant; the zip read in place skips it."""
    if len(classes) != 1:
        return
    parts = [f.replace(os.sep, "/").split("/") for f in files]
    depth = 1  # down a chain of single folders (datasets/flowers/cat/1.png: `zip -r` of a folder two deep)
    while all(len(p) >= depth + 3 for p in parts) and len({p[depth] for p in parts}) == 1:
        depth += 1
    inner = sorted({p[depth] for p in parts if len(p) >= depth + 2})
    if len(inner) >= 2 and all(len(p) >= depth + 2 for p in parts):
        shown = ", ".join(map(repr, inner[:3])) + (f" and {len(inner) - 3} more" if len(inner) > 3 else "")
        meant = os.path.join(root, *parts[0][:depth])
        of = "its" if depth == 1 else f"the {'/'.join(parts[0][1:depth])!r} folder in it, in its"
        log.warning("%s: one class folder, %r, whose images all sit in %s %d sub-folders (%s): a wrapping folder "
                    "(a zipped folder, extracted)? the dataset is then %s, whose sub-folders are the classes; read "
                    "as it is, its images are all one class", root, classes[0], of, len(inner), shown,
                    meant)  # fmt: skip


def _other_forms(name: str) -> list[str]:
    return [o for o in (unicodedata.normalize(f, name) for f in ("NFC", "NFD")) if o != name]


_KEYS: dict[str, Callable[[str], str]] = {"form": lambda n: unicodedata.normalize("NFC", n), "case": str.lower,
                                          "spaces": str.strip}  # fmt: skip


@functools.lru_cache(maxsize=4096)  # a table's rows in no folder order (shuffled) visit many folders in turn
def _folder_keys(folder: str, stamp: tuple, kind: str) -> dict[str, list[str]]:
    """A folder's entries by their NFC form (``kind`` "form") or lower-case name ("case"); ``stamp`` (its device,
    inode, modification and status times) makes a changed folder read again."""
    key = _KEYS[kind]
    names: dict[str, list[str]] = {}
    for n in os.listdir(folder or "."):
        names.setdefault(key(n), []).append(n)
    return names


def twin_path(path: str, kind: str) -> str | None:
    """The file a missing ``path`` names otherwise, part by part from the deepest folder that is there: in
    another Unicode form (``kind`` "form": a folder named on macOS, NFD, holding files named on Windows, NFC) or
    letter case ("case": C3.PNG in the table, c3.png on disk). None when there is none, or more than one."""
    parts = []
    top = path
    while top and not os.path.isdir(top):  # the deepest folder that is there
        top, part = os.path.split(top)
        if not part:
            return None
        parts.append(part)
    if not parts:
        return None
    real = top
    for part in reversed(parts):
        try:
            st = os.stat(real or ".")
            stamp = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)  # (a folder swapped in keeps no ctime)
            found = _folder_keys(real, stamp, kind).get(_KEYS[kind](part), [])
        except OSError:
            return None
        if len(found) != 1:
            return None
        real = os.path.join(real, found[0])
    return real if os.path.isfile(real) else None


_DRAWN_OTHERWISE = frozenset("\u200c\u200d\ufe0e\ufe0f")  # joiners and variation selectors: they change the glyph


def _a_word(name: str) -> bool:
    """Whether a class name is a word of two characters or more, none of them a joiner or a variation selector."""
    return len(_INVISIBLE_RUN.sub("", name).strip()) >= 2 and not _DRAWN_OTHERWISE.intersection(name)


def _refuse_unicode_twins(root: str, classes: list[str]) -> None:
    """Two class folders whose names differ only in Unicode form (``café`` typed on Windows is
    NFC, the same name copied from macOS is NFD) look the same but would be two classes; so would two
    that differ only in what does not show (``cat`` and ``cat `` or ``cat\u200b``, full-width ``ｃａｔ``),
    which a label table's labels are refused for too. And a ``__MACOSX`` folder (Finder's metadata that
    ``unzip`` extracts) would be class 0, every other class's index one further on."""
    if "__MACOSX" in classes:
        raise LabelError(f"{root}: a class folder '__MACOSX': macOS Finder's metadata (its ._ files are no images), "
                         "left by unzip; as a class it would move every other class's index: delete it, or extract "
                         "the zip with unzip-gbk, which leaves it out")  # fmt: skip
    forms: dict[str, list[str]] = {}
    for name in classes:
        forms.setdefault(unicodedata.normalize("NFC", name), []).append(name)
    for same in forms.values():
        if len(same) > 1:
            named = " and ".join(f"{n!r} ({_unicode_form(n)}: {ascii(n)})" for n in same)
            raise LabelError(f"{root}: class folders {named} are one name in two Unicode forms and would be "
                             "two classes; rename one to the other's form")  # fmt: skip
    keys = _look_alike_keys(classes)
    if keys is None:
        return
    alike: dict[str, list[str]] = {}
    for name, key in zip(classes, keys):
        alike.setdefault(key, []).append(name)
    for same in alike.values():
        # words only: a character or a symbol alone is a class of an OCR or symbol set (',' and '，', 'カ' and 'ｶ',
        # '1' and '①', 'Ⅳ' and 'IV'), and a joiner or a variation selector changes how a name is drawn (Sinhala
        # 'ක්‍ය', '❤️'): ImageFolder's classes apart, as they were
        if len(same) > 1 and all(_a_word(n) for n in same):
            shown = [_with_unseen(n) for n in same]
            count = "two" if len(same) == 2 else str(len(same))
            raise LabelError(f"{root}: class folders {', '.join(shown[:-1])} and {shown[-1]} differ only in invisible "
                             "characters, spaces, character width or look-alike letters and marks and would be "
                             f"{count} classes; move their images into one folder")  # fmt: skip


class FolderDataset(ImageDataset):
    """Images in class sub-folders: ``root/<class>/**/<image>``, ImageFolder's layout and class order.

    The files, their order and their targets are ImageFolder's: ``extensions`` defaults to
    torchvision's list (:data:`IMG_EXTENSIONS`). Pass ``extensions=`` to count more, for example
    ``IMG_EXTENSIONS + (".gif",)`` or every format datakit decodes, ``datakit.io.IMAGE_EXTENSIONS``.
    """

    def __init__(self, root: str | os.PathLike, *, extensions: Sequence[str] | str | None = None, **kwargs) -> None:
        self.root = os.fspath(root)
        self.extensions = _extensions(extensions)
        classes, files, targets = scan_class_folders(self.root, self.extensions)
        self.files = StringArray(files)
        super().__init__(np.asarray(targets), classes, **kwargs)

    def name(self, index: int) -> str:
        return os.path.join(self.root, self.files[index])

    def read(self, index: int) -> bytes:
        # (a pipe the scan came upon, not one a table names: waiting for its writer would hang the run)
        return read_bytes(self.name(index), pipes=False)

    def encoded_size(self) -> int:
        return sum(os.path.getsize(self.name(i)) for i in range(len(self)))


def _listed(twice: list[str]) -> str:
    return twice[0] if len(twice) == 1 else f"{len(twice)} files listed twice:\n  " + "\n  ".join(twice)


class TableDataset(ImageDataset):
    """Images named by the rows of a label table, found under a folder or inside a zip.

    Names are relative to ``root``: the folder (or zip) given with the table, else the table's
    own folder. The table's columns stay in numpy arrays; a path is joined only when read.
    """

    def __init__(
        self,
        table: LabelTable,
        root: str | os.PathLike | None = None,
        *,
        split: str | None = None,
        remap_labels: bool = False,
        class_map: ClassMap | None = None,
        probe: bool = True,
        zip_encoding: str | None = None,
        **kwargs,
    ) -> None:
        root = table.path.parent if root is None else root
        twice = spelled_twice(table, root) if probe else []  # probe=False: `check` reports them itself
        if twice:
            raise LabelError(_listed(twice))
        whole = table
        table = table.select(split)
        if table.whole is not None:  # checked: the rest of the table need not travel to the workers
            table = copy.copy(table)
            table.whole = None
        self.table = table
        self.split = split  # its rows are this split alone (a pack of it records no splits)
        self.class_map = class_map or table.class_map(remap=remap_labels)
        self.root = os.fspath(root)
        self.zip = None
        self.prefix = ""  # a zip's one wrapping folder, when the table's names leave it out
        self._nfc_members: dict[str, str] | None = None
        if os.path.isfile(root) and self.root.lower().endswith(".zip"):
            from datakit.archive import ZipReader

            # its member names' encoding: zip_encoding= (--zip-encoding), encoding= being the table's
            self.zip = ZipReader(root, zip_encoding or "auto", hint="zip_encoding= (--zip-encoding)")
        elif zip_encoding:
            raise UsageError(f"zip_encoding= (--zip-encoding) names the encoding of a zip's member names; {root} is "
                             "no zip: leave it out")  # fmt: skip
        if self.zip is None:  # names looked for on the disk: in the encoding the process names files in
            refuse_unreadable_names(root, int(table.files.data.max(initial=0)) < 0x80)
        self.files = table.files  # as the table names them, ``/``-separated
        super().__init__(table.targets(self.class_map), self.class_map.classes, **kwargs)
        self.linked_twice: list[str] = []  # members listed twice through a folder link of the zip
        if self.zip is not None:
            self._wrapping_folder()
            self.linked_twice = zip_spelled_twice(whole, self.zip, self.prefix)
            if self.linked_twice and probe:
                raise LabelError(_listed(self.linked_twice))
        if probe:
            self._probe_root()
            self._lone_missing()
            if split is not None:
                self._lone_elsewhere(whole.whole if whole.whole is not None else whole)

    def _lone_elsewhere(self, whole: LabelTable) -> None:
        """:meth:`_lone_missing` for a class this split has no row of (an index of the whole table's class map):
        its one row, in another split, names a file that is not there (a type row ``string,string,string`` under
        the header, an example row): one output more for this split's model, and no word of it otherwise."""
        counts = np.bincount(np.asarray(self.targets, np.int64), minlength=len(self.classes))
        absent = np.flatnonzero(counts == 0)
        if not len(absent) or len(absent) > 100:  # (many: classes given for another split's samples)
            return
        every = whole.targets(self.class_map)
        per_class = np.bincount(every[every >= 0], minlength=len(self.classes))
        lone = []
        for c in absent.tolist():
            if per_class[c] != 1:
                continue
            r = int(np.flatnonzero(every == c)[0])
            name = str(whole.files[r])
            if not self._name_exists(name):
                lone.append((c, r, name))
        if lone:
            c, r, name = lone[0]
            more = f" ({len(lone) - 1} more such classes)" if len(lone) > 1 else ""
            log.warning("%s: class %r is this row's alone, in split %r, and its file %r is not there: a class with no "
                        "image (a type or example row under the header?) that split %r counts as one output more%s; "
                        "datakit check lists every missing file", whole.where(r), self.classes[c],
                        str(whole.splits[r]), name, self.split, more)  # fmt: skip

    def _lone_missing(self) -> None:
        """Warn of a class whose one row names a file that is not there: an example or type row under the header
        (``example.png, example``) is a class of its own, one output more, with no image to learn it from."""
        targets = np.asarray(self.targets, np.int64)
        if not len(targets):
            return
        counts = np.bincount(targets, minlength=len(self.classes))
        lone = [i for i in np.flatnonzero(counts[targets] == 1)[:100].tolist() if not self.exists(i)]
        if lone:
            i = lone[0]
            more = f" ({len(lone) - 1} more such classes)" if len(lone) > 1 else ""
            log.warning("%s: class %r is this row's alone, and its file %r is not there: a class with no image (an "
                        "example row under the header?)%s; datakit check lists every missing file", self.where(i),
                        self.classes[targets[i]], self.files[i], more)  # fmt: skip

    def _name_exists(self, name: str) -> bool:
        """Whether the file a table row names is there, found as :meth:`path` finds it (either Unicode form)."""
        found = self._path_of(name)
        return found in self.zip if self.zip is not None else os.path.exists(found)

    def path(self, index: int) -> str:
        """Where sample ``index`` lives: a path on disk, or the member name inside the zip. A name
        the table writes in one Unicode form (NFC, as typed on Windows) finds the file or member
        named in the other (NFD, as macOS writes names), when only that one is there."""
        return self._path_of(self.files[index])

    def _path_of(self, name: str) -> str:
        if self.zip is not None:
            from datakit.archive import _names_folder, member_path

            if _names_folder(name):  # 'cat/1.png/.': no file, as on the extracted folder (ENOTDIR)
                return self.prefix + name
            name = member_path(self.prefix + name)
            if not name.isascii() and name not in self.zip:
                name = next((o for o in _other_forms(name) if o in self.zip), None) or self._zip_forms().get(
                    unicodedata.normalize("NFC", name), name
                )
            return name
        path = resolve_path(name, self.root)
        if not name.isascii() and not os.path.exists(path):
            others = (resolve_path(o, self.root) for o in _other_forms(name))
            path = next((o for o in others if os.path.exists(o)), None) or twin_path(path, "form") or path
        return path

    def _zip_forms(self) -> dict[str, str]:
        """The archive's file names by their NFC form (those spelled in one form alone), made once: a member
        whose folders and name are in different Unicode forms."""
        if self._nfc_members is None:
            count: dict[str, list[str]] = {}
            from datakit.archive import member_path

            for n in self.zip.names():
                count.setdefault(unicodedata.normalize("NFC", member_path(n)), []).append(member_path(n))
            self._nfc_members = {k: v[0] for k, v in count.items() if len(v) == 1}
        return self._nfc_members

    def name(self, index: int) -> str:
        path = self.path(index)
        return f"{self.root}:{path}" if self.zip is not None else path

    def read(self, index: int) -> bytes:
        if self.zip is not None:
            return self.zip.read(self.path(index))
        name = self.files[index]
        try:  # the name as written first: no lookup of its other Unicode form on every read
            return read_bytes(resolve_path(name, self.root))
        except FileNotFoundError:
            if name.isascii():
                raise
        return read_bytes(self.path(index))

    def exists(self, index: int) -> bool:
        """Whether sample ``index``'s file (or zip member) is there."""
        if self.zip is not None:
            return self.path(index) in self.zip
        return os.path.isfile(self.path(index))

    def where(self, index: int) -> str:
        """The sheet and row of sample ``index`` in the label table."""
        return self.table.where(index)

    def decode(self, index: int, max_size: int | None = None, fused: Callable | None = None, *,
               strict: bool = False) -> np.ndarray:  # fmt: skip
        try:
            return super().decode(index, max_size, fused, strict=strict)
        except SampleError as exc:
            twin = None
            if self.zip is None and isinstance(exc.__cause__, FileNotFoundError):
                from datakit.check import _case_twin

                twin = _case_twin(self.name(index))
            elif self.zip is not None and isinstance(exc.__cause__, KeyError):
                twin = self.zip.case_twin(self.path(index))
            case = f"; there is {twin!r}: the names differ in letter case" if twin is not None else ""
            raise SampleError(f"{exc} ({self.where(index)}){case}") from exc.__cause__

    def encoded_size(self) -> int:
        if self.zip is not None:
            from datakit.archive import member_path

            sizes = {member_path(m.name): m.file_size for m in self.zip.members}
            return sum(sizes.get(self.path(i), 0) for i in range(len(self)))
        return sum(os.path.getsize(p) for p in map(self.path, range(len(self))) if os.path.exists(p))

    def _picks(self) -> list[int]:
        n = len(self)
        return sorted({round(k * (n - 1) / 7) for k in range(8)}) if n > 8 else list(range(n))

    def _wrapping_folder(self) -> None:
        """A zip whose members sit in one wrapping folder (数据集/cat/1.jpg, a zipped folder) while the
        table names cat/1.jpg: that folder is the root, as :class:`ZipDataset` takes it."""
        from datakit.archive import member_path

        picks = self._picks()
        if not picks or any(self.exists(i) for i in picks):
            return
        tops = {member_path(m.name).split("/")[0] for m in self.zip.members if "/" in member_path(m.name)}
        tops.discard("__MACOSX")  # macOS Finder's metadata beside the zipped folder
        if len(tops) == 1:
            self.prefix = tops.pop() + "/"
            if not any(self.exists(i) for i in picks):
                self.prefix = ""

    def _probe_root(self, found_only: bool = False) -> None:
        """Refuse at once, with the likely fix, when none of a spread of the table's files is under the root
        (a table alone naming files relative to another folder), instead of failing at the first sample.
        ``found_only``: only when another folder holds them (``check`` lists the missing files otherwise)."""
        picks = self._picks()
        if not picks or any(self.exists(i) for i in picks):
            return
        first = self.files[picks[0]]
        hint = ""
        if self.zip is None:
            base = Path(self.root)
            dirs = [base.parent, *(d for d in sorted(base.iterdir()) if d.is_dir())] if base.is_dir() else []
            found = next((d for d in dirs if _is_file(d / first)), None)
            if found is not None:
                at = os.fspath(found)
                hint = (f"; they are under {found}: give that folder (open_dataset({at!r}, labels=TABLE), or "
                        f"root={at!r} with the table alone; CLI: {found} --labels TABLE)")  # fmt: skip
        if found_only and not hint:
            return
        if self.zip is None:
            from datakit.check import _case_twin

            twin = _case_twin(os.path.join(self.root, first))
            if twin is not None:  # A.PNG in a table made on Windows or macOS, a.png on disk
                raise LabelError(f"{self.table.path}: none of the files the table names ({len(picks)} looked for, "
                                 f"first {first!r}) is under {self.root}, but there is {twin!r}: the names differ in "
                                 "letter case, which this file system keeps apart (Windows and macOS do not): write "
                                 "the table's names as the files are named")  # fmt: skip
        elif (twin := self.zip.case_twin(self._path_of(first))) is not None:  # the same, read in place
            raise LabelError(f"{self.table.path}: none of the files the table names ({len(picks)} looked for, first "
                             f"{first!r}) is inside {self.root}, but there is the member {twin!r}: the names differ in "
                             "letter case, which a zip keeps apart (Windows and macOS folders do not): write the "
                             "table's names as the members are named")  # fmt: skip
        where = f"inside {self.root}" if self.zip is not None else f"under {self.root}"
        if not hint and re.match(r"(?:[A-Za-z]:)?/", first):  # D:/data/img/0.jpg: another machine's paths
            parts = first.split("/")
            tail = next((k for k in range(len(parts) - 1, 0, -1) if self.zip is None
                         and _is_file(Path(self.root, *parts[k:]))), None)  # fmt: skip
            there = (f"; {self.root} holds {'/'.join(parts[tail:])!r}: write the names without "
                     f"{'/'.join(parts[:tail]) + '/'!r}, relative to the folder"
                     if tail is not None else "; write them relative to the folder of the images")  # fmt: skip
            machine = "paths on a Windows drive" if re.match(r"[A-Za-z]:", first) else "absolute paths"
            raise LabelError(f"{self.table.path}: none of the files the table names ({len(picks)} looked for, first "
                             f"{first!r}) is {where}: the table names {machine}, another machine's{there}")  # fmt: skip
        if not hint and not os.path.splitext(first)[1]:  # '0001' for 0001.jpg: the names lack their extension
            ext = next((e for e in GUESSED_EXTENSIONS
                        if (self.zip is None and _is_file(Path(self.root, first + e))) or
                        (self.zip is not None and first + e in self.zip)), None)  # fmt: skip
            if ext is not None:
                raise LabelError(f"{self.table.path}: none of the files the table names ({len(picks)} looked for, "
                                 f"first {first!r}) is {where}, but {first + ext!r} is: the names lack their "
                                 f"extension; write them whole ({first + ext!r})")  # fmt: skip
        raise (WrongRoot if hint else LabelError)(
            f"{self.table.path}: none of the files the table names ({len(picks)} looked for, first {first!r}) is "
            f"{where}; names are relative to the table's folder, or to the folder given with it{hint}"
        )


def _is_file(path: Path) -> bool:
    """``path.is_file()`` that says no, as Python 3.12 does, to a name too long for the file system (3.11 raises)."""
    try:
        return path.is_file()
    except OSError:
        return False


class ZipDataset(ImageDataset):
    """Images in class folders inside a zip archive, read in place (no extraction).

    Same rules as a folder (``extensions`` included); when every image sits under one top folder
    (``data/cat/1.jpg``), that folder is the root. Member names are decoded as
    :mod:`datakit.archive` decodes them; an image member named with ``..`` is refused, as ``unzip`` refuses
    it (an absolute path or a drive letter is read as the relative path ``unzip`` writes). Each read is held to
    the per-member budget of :class:`~datakit.archive.ZipReader` (``max_member_size``, ``max_ratio``).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        encoding: str = "auto",
        extensions: Sequence[str] | str | None = None,
        max_member_size: int | None = None,
        max_ratio: float | None = None,
        **kwargs,
    ) -> None:
        from datakit.archive import (
            DEFAULT_MAX_MEMBER,
            DEFAULT_MAX_RATIO,
            ArchiveError,
            ZipMember,
            ZipReader,
            _member_problem,
            safe_relpath,
            same_stored_bytes,
        )

        self.path = os.fspath(path)
        self.zip = ZipReader(
            self.path,
            encoding,
            max_member_size=DEFAULT_MAX_MEMBER if max_member_size is None else max_member_size,
            max_ratio=DEFAULT_MAX_RATIO if max_ratio is None else max_ratio,
        )
        self.extensions = _extensions(extensions)
        images = []
        seen: dict[str, ZipMember] = {}
        unreadable: dict[int, str] = {}  # member index: why it can never be read
        for m in self.zip._all:  # a folder or link named with '..' or a NUL: refused as unzip refuses it
            refused = safe_relpath(m.name)[0] is None and m.name.rstrip("/") not in ("", ".")
            if refused and (m.is_dir or m.is_symlink):
                raise ArchiveError(f"{self.path}: member {m.name!r}: {safe_relpath(m.name)[1]} (as unzip "
                                   "refuses it)")  # fmt: skip
        for m in self.zip.members:  # the regular members: refusals, and where the top folder is
            if not _is_image(m.name, self.extensions) or m.is_dir:
                continue
            parts = [p for p in m.name.split("/") if p not in ("", ".")]
            if parts and (parts[0] == "__MACOSX" or parts[-1].startswith("._")):
                continue  # macOS's AppleDouble metadata beside each file, never an image
            rel, why = safe_relpath(m.name)  # what unzip-gbk writes it as ('/cat/1.jpg', 'C:cat/1.jpg': cat/1.jpg)
            if rel is None:
                raise ArchiveError(f"{self.path}: member {m.name!r}: {why} (as unzip refuses it)")
            if m.name_source not in ("utf-8 flag", "unicode path field") and not decodes(m.raw_name, m.name_source):
                # encoding= that does not fit (as unzip-gbk --encoding refuses the member): its U+FFFD name a class
                shown = m.raw_name.hex(" ")[:96]
                raise ArchiveError(f"{self.path}: member {m.name!r}: its name (bytes {shown}) is not {m.name_source} "
                                   "text (as unzip-gbk refuses it); give the archive's encoding with encoding= "
                                   "(--encoding), or leave it to auto")  # fmt: skip
            # never readable: a bad sample when read, unless it is all its class has
            problem = _member_problem(m) or self.zip.local_name_problem(m)
            if problem:
                unreadable[m.index] = f"{self.path}: member {m.name!r}: {problem}"
            if rel in seen:
                if same_stored_bytes(self.path, seen[rel], m):  # the same bytes twice: one image, as unzip-gbk writes
                    continue
                raise ArchiveError(f"{self.path}: member {m.name!r} is in the archive twice: which copy is the "
                                   "image cannot be told")  # fmt: skip
            seen[rel] = m
            images.append(rel.split("/"))
        top, depth = "", 0
        # a wrapping folder, as when a folder is zipped, or a chain of them (`zip -r ds.zip datasets/flowers/`:
        # datasets/flowers/cat/1.png): every image under one folder at each level, down to where they part
        while images and all(len(p) >= depth + 3 for p in images) and len({p[depth] for p in images}) == 1:
            # unless another folder beside it holds images too, through a link (a/x.png -> ../dog/1.png): the
            # extracted folder's classes are then the top's own, and so are these
            whole, found = self._scan(top)
            if any(whole[t] != images[0][depth] for _, _, t in found):
                break
            top = "/".join(images[0][: depth + 1])
            depth += 1
        classes, keep = self._scan(top)
        if not classes or not keep:
            raise NotADataset(f"{self.path}: no class folders with images inside the archive")
        _warn_numbered(self.path, classes)
        if self.extensions == IMG_EXTENSIONS:
            others = tuple(e for e in IMAGE_EXTENSIONS if e not in IMG_EXTENSIONS)
            _warn_left_out(f"{self.path}", [
                m.name for m in self.zip.members if not m.is_dir and m.name.lower().endswith(others)
                and not any(p == "__MACOSX" or p.startswith("._") for p in m.name.split("/"))
            ])  # fmt: skip
            _warn_unlisted(f"{self.path}", [
                m.name for m in self.zip.members if not m.is_dir and _image_by_another_name(m.name.split("/")[-1])
                and not any(p == "__MACOSX" or p.startswith("._") for p in m.name.split("/"))
            ])  # fmt: skip
        if unreadable:  # unzip-gbk writes neither such a member nor its folder: a class of them alone would be a
            readable = {t for i, _, t in keep if i not in unreadable}  # class here, none in the extracted folder
            lost = sorted({t for _, _, t in keep} - readable)
            if lost:
                first = next(unreadable[i] for i, _, t in keep if t == lost[0])
                raise ArchiveError(f"{first}; and class {classes[lost[0]]!r} has no other image (extracted, it would "
                                   "be no class at all: the classes would be numbered otherwise)")  # fmt: skip
        empty = sorted(set(range(len(classes))) - {t for _, _, t in keep})
        gone = [t for t in empty if self._removed_by_unzip(f"{top}/{classes[t]}" if top else classes[t])]
        if gone:  # links to nothing alone (a loop, a dead link): unzip-gbk removes them and the folder made for them
            renumber = {t: k for k, t in enumerate(t for t in range(len(classes)) if t not in gone)}
            classes = [c for t, c in enumerate(classes) if t not in gone]
            keep = [(i, f, renumber[t]) for i, f, t in keep]
            empty = [renumber[t] for t in empty if t not in gone]
        if empty:  # as the extracted folder is refused: a class without samples shifts nothing silently
            hint = _OTHER_FILES if self.extensions == IMG_EXTENSIONS else ""
            raise LabelError(f"{self.path}: class folder {(top + '/' if top else '') + classes[empty[0]]!r} holds no "
                             f"images (no file ending in {' '.join(self.extensions)}{hint})")  # fmt: skip
        _refuse_unicode_twins(self.path, classes)
        self.members = np.array([i for i, _, _ in keep], dtype=np.int64)
        self.files = StringArray([f for _, f, _ in keep])
        self.prefix = top + "/" if top else ""
        targets = np.array([t for _, _, t in keep], dtype=np.int64)
        self._sizes = None
        super().__init__(targets, classes, **kwargs)

    def _removed_by_unzip(self, folder: str) -> bool:
        """Whether unzip-gbk leaves no ``folder`` behind: every entry under it a link to nothing (removed, and the
        folder made for them with it), none a member of the archive's own (a folder member stays, empty or not)."""
        from datakit.archive import member_path

        listed = {member_path(m.name).rstrip("/") for m in self.zip._all if m.is_dir}
        todo, links = [folder], 0
        while todo:
            here = todo.pop()
            if here in listed:
                return False
            for name, entry in self.zip.tree().get(here, {}).items():
                path = f"{here}/{name}"
                if entry[0] == "dir":
                    todo.append(path)
                elif entry[0] != "link" or self.zip.lookup(path) is not None:
                    return False
                else:
                    links += 1
        return links > 0

    def _scan(self, top: str) -> tuple[list[str], list[tuple[int, str, int]]]:
        """(classes, [(member index, file path, target)]): the walk :func:`scan_class_folders` makes of the
        folder unzip-gbk extracts, made on the archive's own tree: links to images and to folders
        followed as there (chains, ``cat2 -> cat``, ``cat/more -> ../dog``, ``b/up -> ..``), a folder
        reached by two paths walked by both, a link back to a folder its path is inside not followed,
        links to nothing or out of the archive left out (unzip-gbk removes or refuses them)."""
        tree = self.zip.tree()

        def join(folder: str, name: str) -> str:
            return f"{folder}/{name}" if folder else name

        def kind(path: str) -> tuple[str, int | str] | None:
            return self.zip.lookup(path)

        root = kind(top) if top else ("dir", "")
        if root is None or root[0] != "dir":
            return [], []
        at = root[1]
        classes = sorted(n for n in tree.get(at, {}) if n != "__MACOSX" and (kind(join(at, n)) or ("",))[0] == "dir")
        # datakit's own index cache, zipped with the folder: no class there, none here
        classes = _without_caches(str(self.path), classes,
                                  lambda c: (kind(join(join(at, c), "INDEX_CACHE")) or ("",))[0] == "file")  # fmt: skip
        keep = []
        for idx, cls in enumerate(classes):
            found: list[tuple[str, list[tuple[str, int]]]] = []
            walks = _Walks(str(self.path), cls)
            todo = [(cls, kind(join(at, cls))[1], frozenset())]  # (the path shown, its real folder, those above)
            while todo:
                shown, real, above = todo.pop()
                if real in above:  # a link back to a folder this path is inside: a loop
                    continue
                walks.count(real)
                files = []
                for name, entry in tree.get(real, {}).items():
                    # a file or folder of this real folder is what it is; only a link needs the walk from the top
                    there = kind(join(real, name)) if entry[0] == "link" else (
                        entry if entry[0] == "file" else ("dir", join(real, name)))  # fmt: skip
                    if there is None:
                        continue
                    if there[0] == "dir":
                        todo.append((f"{shown}/{name}", there[1], above | {real}))
                    elif _is_image(name, self.extensions) and not name.startswith("._"):
                        files.append((name, there[1]))
                found.append((shown, sorted(files)))
            for shown, files in sorted(found, key=lambda f: f[0]):  # as the folder scan sorts its paths
                keep += [(index, f"{shown}/{name}", idx) for name, index in files]
        return classes, keep

    def name(self, index: int) -> str:
        return f"{self.path}:{self.prefix}{self.files[index]}"

    def read(self, index: int) -> bytes:
        return self.zip.read_index(int(self.members[index]))

    def encoded_size(self) -> int:
        sizes = {m.index: m.file_size for m in self.zip.members}
        return sum(sizes[int(i)] for i in self.members)


# ---------------------------------------------------------------------------------------------
# LMDB packs


def _packed_from(source) -> list[str]:
    """The real paths of the packs a pack's recorded ``source`` names (a path, a glob or a list of them)."""
    import glob

    names = source if isinstance(source, list) else [source] if isinstance(source, str) else []
    out = []
    for name in names:
        if not isinstance(name, str):
            continue
        found = glob.glob(name) if any(c in name for c in "*?[") else [name]
        out += [os.path.realpath(f) for f in found if f.lower().endswith(".lmdb") or os.path.isdir(f)]
    return out


def _origin(source, depth: int = 0) -> object:
    """Where a pack's samples came from: its recorded ``source``, or for a pack made from packs (shards joined,
    a re-pack) their own origin, where those packs are still there and agree (a whole pack and the pack joined
    from its source's shards hold the same samples)."""
    from datakit.lmdb import read_meta

    made = _packed_from(source)
    if not made or depth > 8:
        return tuple(source) if isinstance(source, list) else source
    origins = set()
    for pack in made:
        try:
            meta = read_meta(pack)
        except (PackError, OSError, ValueError):
            meta = None
        if not isinstance(meta, dict):
            return tuple(source) if isinstance(source, list) else source
        found = pack_origin(meta, depth + 1)
        origins.add(found if not isinstance(found, list) else tuple(found))
    return origins.pop() if len(origins) == 1 else (tuple(source) if isinstance(source, list) else source)


def _same_samples_in_other_packs(readers: list) -> None:
    """Packs of one origin that are no shards of one set (the pack of a table and the pack of one of its splits,
    ``--split val``; a ``--classes`` pack beside the plain one) may hold the same samples: their stored names are
    compared, and one found in two is refused. Shards of one set hold disjoint samples by making: not read.

    A pack written before datakit recorded its source's names (version 1 and the first version 2 packs) may have
    recorded its source relative to a directory not known now: its samples are compared with every other pack's."""
    by_origin: dict[object, list] = {}
    for r in readers:
        origin = pack_origin(r.meta)
        shard = (r.meta.get("options") or {}).get("shard") or [0, 1]
        if origin is not None:
            by_origin.setdefault(origin, []).append((r, (r.meta.get("source_names"), int(shard[1]))))
    compared = [(origin, [r for r, _ in packs]) for origin, packs in by_origin.items()
                if len({key for _, key in packs}) >= 2 or any(key == (None, 1) for _, key in packs[1:])]  # fmt: skip
    unplaced = [r for r in readers if r.meta.get("source_names") is None]
    for u in unplaced:  # beside the packs whose source may be its own, however it was spelled when packed
        near = [r for r in readers if r is not u and _maybe_same_source(u.meta, r.meta)]
        compared += [(None, [u, r]) for r in near if not any(u in p and r in p for _, p in compared)]
    for origin, packs in compared:
        owner: dict[tuple, str] = {}
        for r in packs:
            records = getattr(r, "records", None)
            for i in range(int(r.meta.get("count") or 0)):
                name = r.name(i)
                # the same name and the same stored bytes (checksum, size): one folder packed again after its files
                # were replaced by others of the same names (a week's images, /data/images in a container) is not
                key = (name, int(records["crc32"][i]), int(records["nbytes"][i])) if records is not None else (name,)
                if key in owner and owner[key] != r.path:
                    of = f"a sample of {origin}" if origin is not None else "a sample"
                    why = "the pack of one of its splits, or of the same images with other options?"
                    if r in unplaced or owner[key] in {u.path for u in unplaced}:  # no names of its source kept
                        why = "a copy of it, or a pack of the same images?"
                    raise GivenTwice(f"{r.path}: holds {name!r}, {of} that {owner[key]} holds too ({why}); each "
                                     "sample is read once")  # fmt: skip
                owner.setdefault(key, r.path)


def _maybe_same_source(a: dict, b: dict) -> bool:
    """Whether two packs' recorded sources may be one, a pack written before datakit kept its source's names
    having recorded it as given (``data``, relative to where it was packed, unknown now): the same path, or one
    ending in the other (``/home/u/data`` and ``data``). Two shards of one set are not (disjoint by making); a
    source recorded otherwise (packs joined) may be."""
    sa, sb = a.get("source"), b.get("source")
    if not isinstance(sa, str) or not isinstance(sb, str):
        return True
    shard_a = (a.get("options") or {}).get("shard") or [0, 1]
    shard_b = (b.get("options") or {}).get("shard") or [0, 1]
    if sa == sb and shard_a[1] == shard_b[1] > 1 and shard_a[0] != shard_b[0]:
        return False

    def parts(path: str) -> list[str]:
        return [p for p in os.path.normpath(path).replace("\\", "/").split("/") if p not in ("", ".", "..", "~")]

    pa, pb = parts(sa), parts(sb)
    short, long = sorted((pa, pb), key=len)
    return not short or long[len(long) - len(short) :] == short  # ('.': the folder it was packed in, any)


def pack_origin(meta: dict, depth: int = 0) -> object:
    """Where a pack's samples came from (hashable): the ``origin`` a pack made from packs records (their own,
    found when it was packed: it holds when they are moved or deleted later), else :func:`_origin` of its source."""
    recorded = meta.get("origin")
    if recorded is None:
        return _origin(meta.get("source"), depth)
    return tuple(recorded) if isinstance(recorded, list) else recorded


class GivenTwice(UsageError, PackError):
    """Packs given so that samples would be read twice (a pack twice, a joined pack beside its shards): a
    usage mistake (exit 2), and a :class:`PackError` as every refusal of the packs given."""


class ShardsMissing(UsageError, PackError):
    """Shards of one pack given without the others (``part-0.lmdb`` alone): a usage mistake (exit 2), as a glob
    that matches nothing is."""


def _check_shards(readers: list) -> None:
    """Shards read as one dataset are each pack once, and all of each sharded source: a shard
    given twice doubles its samples, a missing one drops them, silently otherwise."""
    seen: dict[str, object] = {}
    groups: dict[tuple, dict[int, object]] = {}
    whole: dict[tuple, object] = {}
    sharded: dict[tuple, dict[int, object]] = {}
    given = {os.path.realpath(r.path): r.path for r in readers}
    stored_as: dict[object, tuple] = {}  # each shard's --max-size and --quality
    for r in readers:  # a pack joined from shards, given with them ('part-*.lmdb' after part-all.lmdb was made)
        for made_from in _packed_from(r.meta.get("source")):
            if made_from in given and made_from != os.path.realpath(r.path):
                raise GivenTwice(f"{r.path}: was packed from {given[made_from]}, given too; each sample is read once: "
                                "give the one or the others")  # fmt: skip
    for r in readers:
        real = os.path.realpath(r.path)
        if real in seen:
            raise GivenTwice(f"{r.path}: given twice (as {seen[real]}); each pack is read once")
        seen[real] = r.path
        shard = (r.meta.get("options") or {}).get("shard") or [0, 1]
        i, n = int(shard[0]), int(shard[1])
        source = r.meta.get("source")
        source = tuple(source) if isinstance(source, list) else source  # shards joined: their paths
        key = (pack_origin(r.meta), r.meta.get("source_names"))  # joined shards: the shards' source
        if key[1] is not None:  # a copy of a pack, or a whole pack beside shards of its source: samples twice
            other = whole.get(key) if n > 1 else (whole.get(key) or next(iter(sharded.get(key, {}).values()), None))
            if other is not None:  # given so (a usage mistake, exit 2), as a pack given twice is
                recorded = r.meta.get("source")
                via = " (packed from packs of it)" if isinstance(recorded, list) or _packed_from(recorded) else (
                    " (a dataset object of it)")  # fmt: skip
                joined = "" if key[0] == source else via
                raise GivenTwice(f"{r.path}: holds samples of {key[0]}{joined} that {other} holds too (a copy of it, "
                                 "or a whole pack beside its shards); each sample is read once")  # fmt: skip
            if n <= 1:
                whole[key] = r.path
            else:
                sharded.setdefault(key, {})[i] = r.path
        if n <= 1:
            continue  # a whole pack: packs of the same classes may be read together
        group = groups.setdefault((source, r.meta.get("source_names"), n), {})
        options = r.meta.get("options") or {}
        stored = (options.get("max_size"), options.get("quality"))
        other = next((p for p in group.values() if stored_as.get(p, stored) != stored), None)
        if other is not None:  # one set of shards whose pixels were stored otherwise: one dataset of two kinds

            def how(s: tuple) -> str:
                return f"the images re-encoded (--max-size {s[0]}, --quality {s[1]})" if s[0] else "their own bytes"

            raise PackError(f"{r.path}: shard {i}/{n} of {r.meta.get('source')} holds {how(stored)}, {other} "
                            f"{how(stored_as[other])}: pack every shard with the same options")  # fmt: skip
        stored_as[r.path] = stored
        if i in group:
            raise GivenTwice(f"{r.path}: shard {i}/{n} of {r.meta.get('source')}, as {group[i]} is; each shard is "
                             "read once")  # fmt: skip
        group[i] = r.path
    _same_samples_in_other_packs(readers)
    for (source, _, n), got in groups.items():
        missing = [f"{i}/{n}" for i in range(n) if i not in got]
        if missing:
            have = ", ".join(f"{i}/{n} ({got[i]})" for i in sorted(got))
            other = next((g for (s, _, m), g in groups.items() if s == source and m == n and g is not got and
                          set(g) & {int(x.split("/")[0]) for x in missing}), None)  # fmt: skip
            if other is not None:  # the shard is given, packed from another version of the source
                theirs = ", ".join(f"{i}/{n} ({other[i]})" for i in sorted(other))
                raise PackError(
                    f"shards {have} and {theirs} of {source} were packed from different versions of it "
                    "(its files changed between them): pack every shard of the source as it is now"
                )
            many = len(missing) > 1
            which = f"shards {', '.join(missing)} of {source} are" if many else f"shard {missing[0]} of {source} is"
            raise ShardsMissing(f"{which} not among the packs given ({have}): {'their' if many else 'its'} samples "
                                "would be missing; give every shard")  # fmt: skip


_FILES_SPARED = 128  # open files kept for what else a process reads and writes beside the shards


def _room_for_shards(n: int) -> None:
    """Make room for ``n`` shards read at once, two open files each (``data.mdb`` and ``lock.mdb``, kept open
    once read): the soft open-file limit raised to the hard one, as create_loader raises it; where even that is
    too few, refused now, naming the limit, instead of 'Too many open files' at the 511th shard."""
    limits = raise_open_file_limit()
    if limits is None:
        return
    soft, hard = limits
    import resource

    need = 2 * n + _FILES_SPARED
    if soft != resource.RLIM_INFINITY and soft < need:
        most = "no limit" if hard == resource.RLIM_INFINITY else f"{hard:,}"
        raise UsageError(f"{n:,} shards keep {2 * n:,} files open when read, past this process's limit of {soft:,} "
                         f"open files (ulimit -n; the most it may be raised to: {most}); raise the limit (as root, "
                         "or in /etc/security/limits.conf), or pack the source again into fewer shards "
                         "(--shard I/N with a smaller N)")  # fmt: skip


class LmdbDataset(ImageDataset):
    """One pack, or several shards read as one dataset, decoded lazily through :mod:`datakit.io`.

    Environments open lazily in each process (see :mod:`datakit.lmdb`), so the dataset works with
    DataLoader workers started by fork, spawn or forkserver. With ``allow_incomplete=True`` a pack
    that is still being written is read as far as it is committed, and its length follows the
    writer (checked at most every ``follow_seconds``; :meth:`refresh` checks at once).
    """

    def __init__(self, paths: str | os.PathLike | Sequence[str | os.PathLike], *, split: str | None = None,
                 allow_incomplete: bool = False, follow_seconds: float = 1.0, **kwargs) -> None:  # fmt: skip
        paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
        if len(paths) > 1:
            _room_for_shards(len(paths))
        self.readers = [LmdbReader(p, allow_incomplete=allow_incomplete) for p in paths]
        first = self.readers[0]
        for r in self.readers[1:]:
            if r.meta["classes"] != first.meta["classes"]:
                raise PackError(f"{r.path}: its classes differ from {first.path}'s; these are not shards of one pack")
        _check_shards(self.readers)
        self.split = split
        self.follow_seconds = follow_seconds
        self._checked = time.monotonic()
        self.class_map = first.class_map
        self._index()
        super().__init__(self.targets, first.class_map.classes, **kwargs)

    def _index(self) -> None:
        shard_of, local = [], []
        missing: UsageError | None = None  # the first pack without the split asked for
        for k, r in enumerate(self.readers):
            idx = np.arange(len(r), dtype=np.int64)
            if self.split is not None:
                try:
                    idx = self._in_split(r, idx)
                except UsageError as exc:
                    if len(self.readers) == 1:
                        raise
                    missing = missing or exc  # packs read as one hold the union of their splits
                    idx = idx[:0]
            shard_of.append(np.full(len(idx), k, dtype=np.int32))
            local.append(idx)
        if missing is not None and not sum(len(i) for i in local):
            raise missing  # none holds it
        self.shard = np.concatenate(shard_of)
        self.local = np.concatenate(local)
        self.targets = np.concatenate([r.records["target"][i] for r, i in zip(self.readers, local)]).astype(np.int64)
        self.heights = np.concatenate([r.records["height"][i] for r, i in zip(self.readers, local)])
        self.widths = np.concatenate([r.records["width"][i] for r, i in zip(self.readers, local)])

    def _in_split(self, r, idx: np.ndarray) -> np.ndarray:
        """The indices ``idx`` of pack ``r`` in the split asked for; ``UsageError`` where the pack has no such
        split."""
        splits = r.meta.get("splits") or []
        options = r.meta.get("options")
        packed = options.get("split") if isinstance(options, dict) else None
        if not splits and packed == self.split:  # pack-lmdb --split val, read as split val: all of it
            return idx
        at = split_index(splits, self.split)
        if at is None:
            if not splits and isinstance(packed, str):  # pack-lmdb --split: that split alone, no split column
                raise UsageError(f"{r.path}: no split {self.split!r}; the pack holds split {packed!r} alone "
                                 f"(made with --split {packed}): leave out split= (--split)")  # fmt: skip
            if not splits:
                raise UsageError(f"{r.path}: no split {self.split!r}; the pack has no splits (its source had no "
                                 "split column or sheets)")  # fmt: skip
            shown = ", ".join(map(repr, splits))
            raise UsageError(f"{r.path}: no split {self.split!r}; the pack's splits are {shown}")
        return idx[r.records["split"] == at + 1]

    @property
    def complete(self) -> bool:
        """Whether every pack is complete (nothing more will appear)."""
        return all(r.complete for r in self.readers)

    def refresh(self) -> int:
        """Take in the samples committed since the pack was opened; returns the new length."""
        if not self.complete:
            before = [len(r) for r in self.readers]
            if [r.refresh() for r in self.readers] != before:
                self._index()
        self._checked = time.monotonic()
        return len(self.targets)

    def _image(self, index: int):
        behind = isinstance(index, (int, np.integer)) and index >= len(self.targets) and not self.complete
        if behind:  # a worker's copy behind the writer: catch up
            self.refresh()
        return super()._image(index)

    def __len__(self) -> int:
        if not self.readers[0].complete and time.monotonic() - self._checked >= self.follow_seconds:
            self.refresh()
        return len(self.targets)

    def name(self, index: int) -> str:
        r = self.readers[self.shard[index]]
        return f"{r.path}:{r.name(int(self.local[index]))}"

    def read(self, index: int) -> bytes:
        return self.readers[self.shard[index]].get(int(self.local[index]))

    def encoded_size(self) -> int:
        return int(sum(r.records["nbytes"][self.local[self.shard == k]].sum() for k, r in enumerate(self.readers)))

    def sizes(self) -> np.ndarray:
        """(height, width) of every sample, known without decoding."""
        return np.stack([self.heights, self.widths], axis=1)


# ---------------------------------------------------------------------------------------------
# the entry point


def _expand_sources(src) -> list[str] | None:
    """The shards ``src`` names: each glob ('part-*.lmdb', alone or among other names) standing for what it
    matches, in the order they were made; None for one path."""
    if isinstance(src, (list, tuple)):
        return [p for s in src for p in (_expand_sources(s) or [os.fspath(s)])]
    s = os.fspath(src)
    if any(ch in s for ch in "*?[") and not os.path.exists(s):
        from datakit.filenames import natural_key

        found = sorted(glob.glob(s), key=natural_key)  # the shards in the order they were made: 2 before 10
        if not found:
            raise UsageError(f"{s}: the pattern matches nothing")
        return found
    return None


def missing_why(path: str | os.PathLike) -> str:
    """Why ``path`` is not there: nothing has that name, or it is a symbolic link to nothing or in a loop."""
    if not os.path.islink(path):
        return "no such file or folder"
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link in a loop of links (each leads to another, never to a file or folder)"
    return f"a symbolic link to {os.readlink(path)!r}, which does not exist"


_OTHER_FILES = "; remove the folder, or pass extensions= (Python) to count other files"


# what a table's name without an extension ('0001') is looked for with, to say so where the file is there
GUESSED_EXTENSIONS = (".jpg", ".jpeg", ".png", ".JPG", ".JPEG", ".PNG", ".bmp", ".webp", ".tif")


def _holds_image(folder: Path, extensions) -> bool:
    """Whether ``folder`` holds an image file (at any depth) that a class folder's scan counts: one without any
    (a cache, __pycache__, notes) is no class."""
    walk = os.walk(folder, followlinks=True)
    return any(f.lower().endswith(extensions) for _, _, files in walk for f in files)


def _folder_alone(ds):
    """``ds``, a folder of class folders; where it is an evaluation split (``data/val``) beside a training split's
    folder (``data/train``) with class folders it lacks, its classes are numbered without those, every later one
    shifted against the training split's (ImageFolder's way, without a word): said, as for a table read alone."""
    root = Path(ds.root)
    word = _eval_word(root / "_")
    if word is None or _OPENED_WITH_CLASSES.get():
        return ds
    try:
        train = next((d for d in sorted(root.parent.iterdir()) if d.is_dir() and d.name.lower() in _TRAIN_WORDS
                      | set(_TRAIN_CJK)), None)  # fmt: skip
        theirs = {d.name for d in train.iterdir() if d.is_dir() and not d.name.startswith(".")} if train else set()
    except OSError:
        return ds
    lacking = sorted(c for c in theirs - set(ds.classes) if _holds_image(train / c, ds.extensions))
    if lacking and set(ds.classes) <= theirs:
        log.warning("%s: read alone, this %s split numbers its own %d classes, without %s of %s's %d: give those "
                    "classes, classes=train.classes (--classes %s), so that the ones it lacks do not shift the "
                    "others' indices", root, word, len(ds.classes), ", ".join(map(repr, lacking[:4])) + (
                        ", ..." if len(lacking) > 4 else ""), train, len(ds.classes) + len(lacking),
                    train)  # fmt: skip
    return ds


def is_pack_path(path: str) -> bool:
    p = Path(path)
    return p.is_dir() and (p / "data.mdb").exists() or p.suffix.lower() == ".lmdb"


def refuse_output_in_source(out: str | os.PathLike, src, what: str, labels: str | None = None) -> None:
    """Refuse an output file inside a source's class folders (or anywhere in a folder a label table names files
    of): an image written there (a preview, a histogram) is one of its samples to every later scan, and with
    --overwrite it could replace one. Inside a pack's folder it is a file the pack does not hold. ``src``: a path, a
    glob, a list of them, or a dataset (its folder, table or packs)."""
    if not isinstance(src, (str, os.PathLike, list, ImageDataset)):  # a Subset, a ConcatDataset, one of the caller's
        from datakit.loader import _leaves

        for leaf in _leaves(src, through="all"):
            if isinstance(leaf, ImageDataset):
                refuse_output_in_source(out, leaf, what)
        return
    literal = isinstance(src, ImageDataset)
    if literal:
        src, labels = _dataset_source(src)
        if src is None:
            return
    out = os.fspath(out)
    folder = os.path.dirname(os.path.realpath(out))  # beside the class folders it is no sample; in one it is
    if os.path.isfile(os.path.join(folder, "data.mdb")):  # any pack's folder, a source or not
        raise UsageError(f"{out}: inside the LMDB pack {folder}, whose folder holds the pack's files alone (a "
                         f"re-pack with --overwrite would refuse it); write the {what} outside")  # fmt: skip
    import glob

    from datakit.io import IMAGE_EXTENSIONS

    if not out.lower().endswith(IMAGE_EXTENSIONS):  # an .svg or .pdf histogram is no image to any scan: no sample
        return
    sources = [p for s in (src if isinstance(src, list) else [src])  # a dataset's own paths are literal ('set[1]')
               for p in (sorted(glob.glob(s)) if not literal and not os.path.exists(s) and any(c in s for c in "*?[")
                         else [s])]  # fmt: skip
    for s in sources:
        inside = (folder + os.sep).startswith(os.path.realpath(s).rstrip(os.sep) + os.sep)
        if os.path.isdir(s) and inside and is_pack_path(s):
            raise UsageError(f"{out}: inside the LMDB pack {s}, whose folder holds the pack's files alone (a "
                             f"re-pack with --overwrite would refuse it); write the {what} outside")  # fmt: skip
        if os.path.isdir(s) and inside and labels and not is_pack_path(s):  # the table names files at its top too
            raise UsageError(f"{out}: inside the folder {s}, whose images {labels} names, where it could replace "
                             f"one of them and `check` would find the {what} among them as an image not in the "
                             "table; write it outside")  # fmt: skip
        if os.path.isdir(s) and not is_pack_path(s) and folder.startswith(os.path.realpath(s).rstrip(os.sep) + os.sep):
            raise UsageError(f"{out}: inside the source folder {s}, where every later scan (check, stats, "
                             f"open_dataset) would read the {what} as one of its images; write it outside")  # fmt: skip
        # a label table alone: its names are relative to its folder, where the images are (one replaced by
        # --overwrite, or a new one that `check` then reports as not in the table)
        if os.path.isfile(s) and _is_table(s):
            here = os.path.dirname(os.path.realpath(s)).rstrip(os.sep) + os.sep
            if (folder + os.sep).startswith(here):
                shown = os.path.join(os.path.dirname(s) or ".", "")  # './' for a table named bare
                raise UsageError(f"{out}: inside {shown}, the folder of the images {s} "
                                 f"names, where it could replace one of them and `check` would find the {what} "
                                 "among them as an image not in the table; write it outside")  # fmt: skip


def _dataset_source(ds: ImageDataset) -> tuple[str | list[str] | None, str | None]:
    """(the source's path or paths, the label table's path) of a dataset read from the disk; (None, None) for one
    whose images are in an archive or made in memory."""
    if isinstance(ds, FolderDataset):
        return ds.root, None
    if isinstance(ds, TableDataset):
        return (ds.root, os.fspath(ds.table.path)) if ds.zip is None else (None, None)
    if isinstance(ds, LmdbDataset):
        return [os.fspath(r.path) for r in ds.readers], None
    return None, None


def _is_pack(path: Path) -> bool:
    return path.is_dir() and (path / "data.mdb").exists() or path.suffix.lower() == ".lmdb"


_OPENED_WITH_CLASSES = contextvars.ContextVar("datakit_opened_with_classes", default=False)
_TRAIN_WORDS = frozenset({"train", "training", "trainset", "trainval"})
_TRAIN_CJK = ("训练", "訓練")
_EVAL_CJK = frozenset({"验证", "验证集", "测试", "测试集", "驗證", "驗證集", "測試", "測試集"})
_EVAL_WORDS = frozenset({"val", "valid", "validation", "test", "testing", "dev", "eval", "evaluation", "holdout",
                         *_EVAL_CJK})  # fmt: skip


def say_whole(ds, what: str = "as one dataset") -> None:
    """A warning where ``ds`` reads every split of a table with several (``open_dataset(..., labels="labels.xlsx")``
    without ``split=``): training on it trains on val and test too, without a word. ``what``: what it is read as."""
    table = getattr(ds, "table", None)
    readers = getattr(ds, "readers", None)  # a pack keeps its table's splits: read whole, the same word
    if (table is None and not readers) or getattr(ds, "split", None) is not None:
        return
    if table is not None:
        names, where = list(getattr(table, "split_names", []) or []), table.path
    else:
        names = list(dict.fromkeys(n for r in readers for n in (r.meta.get("splits") or [])))
        where = readers[0].path if len(readers) == 1 else f"{readers[0].path} (and {len(readers) - 1} more shards)"
    if len(names) > 1:
        shown = ", ".join(map(repr, names[:4])) + (", ..." if len(names) > 4 else "")
        log.warning("%s: its %d splits (%s) are all read (%d samples) %s; pass split= (--split) to read one, such "
                    "as split=%r", where, len(names), shown, len(ds), what, names[0])  # fmt: skip


def _eval_word(path: Path) -> str | None:
    """The evaluation split a table's name says it is: a word of its stem (``val.csv``, ``valid_labels.csv``,
    ``val2017.csv``, ``testset.txt``, ``验证集标签.csv``) or its folder's whole name (``val/labels.csv``); None."""
    stem, folder = path.stem.lower(), path.parent.name.lower()
    if any(w in _TRAIN_WORDS for w in re.findall(r"[a-z]+", stem)) or any(w in stem for w in _TRAIN_CJK):
        return None  # train_labels.csv, 训练验证集.csv (train and val), 训练集_不含测试.csv: a training table
    for text, whole in ((stem, False), (folder, True)):
        words = re.findall(r"[a-z]+", text)  # val2017: val; valid_labels: valid, labels
        for w in words if not whole or len(words) == 1 else ():
            for word in (w, w.removesuffix("set"), w.removesuffix("data")):
                if word in _EVAL_WORDS and not (whole and word == "dev"):  # ~/dev/: where people keep their code
                    return word
        for word in sorted(_EVAL_CJK, key=len, reverse=True):  # 验证集标签: the characters run on, no separator
            if word in text and (not whole or re.sub(r"[\W\d_]+", "", text) == word):
                return word
    return None


def _alone(ds):
    """``ds``; a table named as an evaluation split (``val.txt``, ``test_list.csv``), read without ``classes=``,
    numbers its own class names: one it lacks shifts every later index against the training split's, without a
    word. Said (the caller of open_source with classes= never gets here: it indexes by those)."""
    table = getattr(ds, "table", None)
    whole = getattr(table, "whole", None) or table
    if table is None or table.kind != "name" or len(whole.split_names) > 1 or _OPENED_WITH_CLASSES.get():
        return ds
    word = _eval_word(Path(table.path))
    if word is not None:
        log.warning("%s: read alone, this %s split numbers its own %d classes (%s); if the model was trained on "
                    "another split's, give those: classes=train.classes (--classes TRAIN), so that a class it "
                    "lacks does not shift the others' indices", table.path, word, len(ds.classes),
                    ", ".join(map(repr, ds.classes[:4])) + (", ..." if len(ds.classes) > 4 else ""))  # fmt: skip
    return ds


def _is_table(src) -> bool:
    return isinstance(src, (str, os.PathLike)) and Path(src).suffix.lower() in EXCEL_SUFFIXES + TEXT_SUFFIXES


def as_given(classes: Sequence[str], given: Sequence[str]) -> list[str]:
    """A table's integer classes (``'0'``, ``'1'``) written as ``given`` (``classes=``) writes the same integers
    (``'00'``, ``'01'``: class folders named with zeros in front), where every class given is an integer, each
    once; ``classes`` unchanged otherwise. The table's labels are integers however they are padded."""
    from datakit.labels import _int_of, _is_int_text

    if all(c in given for c in classes) or not given or not all(_is_int_text(g) for g in given):
        return list(classes)
    by_int = {_int_of(g): g for g in given}
    if len(by_int) != len(given):
        return list(classes)
    return [by_int.get(_int_of(c), c) if c not in given and _is_int_text(c) else c for c in classes]


def unknown_classes(classes: Sequence[str], given: Sequence[str], where: str, option: str,
                    table=None) -> str | None:  # fmt: skip
    """The line for ``classes`` not among ``given`` (``classes=``), naming up to five; None when all are. With the
    label ``table`` they came from, ``where`` is the first row of the first one."""
    known = set(given)
    unknown = [c for c in classes if c not in known]
    if not unknown:
        return None
    if table is not None and hasattr(table, "where_label"):
        where = table.where_label(unknown[0]) or where
    shown = ", ".join(map(repr, unknown[:5])) + (", ..." if len(unknown) > 5 else "")
    line = f"{where}: class{'es' * (len(unknown) > 1)} {shown} not among the {len(given)} classes given ({option})"
    nfc = {unicodedata.normalize("NFC", g): g for g in given}
    twins = [(c, nfc[unicodedata.normalize("NFC", c)]) for c in unknown if unicodedata.normalize("NFC", c) in nfc]
    if twins:  # the same name typed on Windows (NFC) and copied from macOS (NFD): they look alike, they differ
        c, g = twins[0]
        line += (f"; {c!r} ({_unicode_form(c)}: {ascii(c)}) is {g!r} of the classes given in another Unicode form "
                 f"({_unicode_form(g)}: {ascii(g)}): write both one way")  # fmt: skip
        return line
    folded = {g.casefold(): g for g in given}
    cased = [(c, folded[c.casefold()]) for c in unknown if c.casefold() in folded]
    if cased:  # pandas' bool column: 'True' in its CSV, Excel's TRUE in its workbook
        c, g = cased[0]
        line += (f"; {c!r} is {g!r} of the classes given in other letter case (a CSV's True against a workbook's "
                 "TRUE cells?): write both one way")  # fmt: skip
        return line
    whole = re.compile(r"-?\d+")
    if all(whole.fullmatch(str(c)) for c in classes) and not any(whole.fullmatch(str(g)) for g in given):
        # (mmpretrain's meta/val.txt of indices beside its classes.txt of names: said why they never meet)
        line += (f"; the labels are whole numbers and the classes given are names ({', '.join(map(repr, given[:3]))}"
                 f"{', ...' if len(given) > 3 else ''}): classes= looks labels up by name, so integer labels meet "
                 "only integer classes; give the classes of the same kind (the training split's list of indices, "
                 "or write the names in the labels)")  # fmt: skip
    return line


class _ClassNames(list):
    """A text file's class names; ``header``: (file, line, name) where the first is a label column's name;
    ``comments``: the file and its ``#`` lines, (line number, text), read as comments, not classes."""

    header: tuple[Path, int, str] | None = None
    comments: tuple[Path, list[tuple[int, str]]] | None = None


# a classes file's first line that names its column: a label column's name (or a name column's, a class id's,
# what pandas' to_csv writes above a column of names), or the list's own
_CLASS_HEADERS = frozenset({_norm(k) for k in LABEL_COLUMNS} | _RIVAL_COLUMNS | {
    "classes", "class_names", "classnames", "categories", "category_name", "category_names", "类别名称", "类名",
    "类别列表", "name", "names", "cls", "species", "breed", "breeds", "名称", "名字", "標籤名", "名稱"})  # fmt: skip


_SYNSET = re.compile(r"n\d{8}[ \t]+\S.*")


def _class_lines(path: Path, text: str) -> list[str]:
    """A text file's class names, one a line in index order; ``#`` lines are comments, as in a label list. A
    first line that is a label column's name (a column copied with its header) is marked: :func:`check_header`
    refuses it unless the labels hold it as a class."""
    from datakit.labels import _looks_like_file

    names = _ClassNames()
    comments: list[tuple[int, str]] = []
    blank: list[int] | None = []  # blank lines after a class, said once a class follows them (None: a comment)
    gaps: list[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        name = line.strip()
        if name.startswith("#"):
            comments.append((number, name))
        if not name:
            if names and blank is not None:
                blank.append(number)
            continue
        if name.startswith("#"):
            blank = None  # a comment between two classes parts sections ("# vehicles"), its blank lines with it
            continue
        gaps += blank or []
        blank = []
        first = re.split(r"[,\t; ]", name, maxsplit=1)[0].strip('"')
        if _looks_like_file(first):  # `--classes train.csv`: the label table itself, its rows read as classes
            raise UsageError(f"{path}, line {number}: {first!r} is an image file's name: this is a label table, "
                             "not a list of classes; classes= takes a pack, a .json list or a text file of class "
                             "names, one a line, class 0 first")  # fmt: skip
        if not names and _norm(name) in _CLASS_HEADERS:
            names.header = (path, number, name)
        names.append(name)
    names.comments = (path, comments) if comments else None
    if gaps:  # line k is class k-1 to whoever wrote the file by index (an unused index left blank?)
        shown = ", ".join(map(str, gaps[:3])) + (f" and {len(gaps) - 3} more" if len(gaps) > 3 else "")
        many = "s" * (len(gaps) > 1)
        log.warning("%s: blank line%s between classes (line%s %s) skipped: each class after one is one index "
                    "lower than its line; if a blank line stands for an unused index, give the classes as a .json "
                    "list", path, many, many, shown)  # fmt: skip
    if not names:  # an empty file: no class at all, and every label would be "not among the 0 classes"
        raise UsageError(f"{path}: no class names in it (a text file of class names holds one a line, class 0 "
                         "first)")  # fmt: skip
    one_line = re.fullmatch(r"[^\s,;]+(?:([,;\t])[^\s,;]+)+", names[0]) if len(names) == 1 else None
    if one_line:  # 'cat,dog,bird': one line, read as one class ('tench, Tinca tinca' may be one class's name)
        sep = one_line.group(1)
        raise UsageError(f"{path}: one line of names parted by {sep!r} ({names[0][:60]!r}); a text file of class "
                         "names holds one a line, class 0 first (or give a .json list)")  # fmt: skip
    if len(names) > 1 and all(_SYNSET.fullmatch(n) for n in names):
        # ImageNet's LOC_synset_mapping.txt, 'n01440764 tench, Tinca tinca': the classes are the WordNet ids, as
        # ImageNet's class folders are named, in the file's order
        out = _ClassNames(n.split(None, 1)[0] for n in names)
        _named_classes(out, str(path))
        return out
    pairs = [re.fullmatch(r"(\d+)[ \t]+(\S.*)", n) for n in names]
    if len(names) > 1 and all(pairs) and [int(m.group(1)) for m in pairs] == list(range(len(names))):
        raise UsageError(f"{path}: lines of an index and a name ({names[0]!r}), a list mapping class indices to "
                         "names (PaddleClas's label_list.txt); classes= takes the classes as the labels write them, "
                         "one a line, class 0 first: a file of the names alone where the labels are names, none "
                         "where they are these indices")  # fmt: skip
    from datakit.labels import _is_int_text

    if len(names) > 1 and _is_int_text(names[0]) and not any(_is_int_text(n) for n in names[1:]):
        # the one number above names: the header pandas writes for a Series without a name (to_csv(index=False))
        number = next(k for k, line in enumerate(text.splitlines(), 1) if line.strip() == names[0])
        names.header = (path, number, names[0])
    _named_classes(names, str(path))  # no name of invisible characters alone, no two that look alike
    return names


def check_header(given: Sequence[str], labels: Sequence[str]) -> None:
    """Refuse a classes file whose first line is a label column's name no label holds: read as class 0, it
    would move every class one index on. A class really named so (``target``) is one the labels hold."""
    held = {str(x) for x in labels}
    comments = getattr(given, "comments", None)
    if comments is not None:
        path, lines = comments
        for number, text in lines:
            if text in held:  # a class named '#' or '#1', its line skipped: every class after it one index off
                raise LabelError(f"{path}, line {number}: {text!r} starts with # and is read as a comment, but the "
                                 "labels hold a class of that name: every class after it would move one index "
                                 "on; give the classes as a .json list")  # fmt: skip
        lone = [(n, t) for n, t in lines if re.fullmatch(r"#[^\s#]{0,3}", t)]
        if lone:  # '#' or '#5' alone on a line: a class's name as much as a comment (not '#####', '#classes')
            shown = ", ".join(f"{t!r} (line {n})" for n, t in lone[:3]) + (
                f" and {len(lone) - 3} more" if len(lone) > 3 else ""
            )
            log.warning("%s: %s read as a comment, not a class; if it is a class, give the classes as a .json "
                        "list: every class after it is one index on", path, shown)  # fmt: skip
    header = getattr(given, "header", None)
    if header is None or header[2] in held:
        return
    path, number, name = header
    what = ("a number above class names (the header pandas writes for a Series without a name?)" if name.isdigit()
            else "a column's name (a header copied with the column?)")  # fmt: skip
    raise LabelError(f"{path}, line {number}: {name!r} is {what} and no "
                     "label holds it; the file holds one class name a line, class 0 first: remove the line (a class "
                     "really named so, with no samples: give the classes as a .json list)")  # fmt: skip


def _named_classes(names: Sequence[object], where: str) -> list[str]:
    """A list of class names as text, refusing what no class is called (None, a blank name) and two names that
    differ only in what does not show (``'dog'``, ``'dog\u200b'``): each would be a class index of its own."""
    from datakit.labels import _INVISIBLE_RUN, _look_alike, _with_unseen

    if not len(names):  # every label would be "not among the 0 classes given"
        raise UsageError(f"{where}: no class names (an empty list); give the classes in index order, class 0 first")
    out = []
    for k, c in enumerate(names):
        if c is None or (isinstance(c, str) and not _INVISIBLE_RUN.sub("", c).strip()):
            raise UsageError(f"{where}: class {k} is {_with_unseen(c) if c else repr(c)}, which names no class")
        out.append(str(c))
    seen: dict[str, int] = {}
    for k, c in enumerate(out):
        j = seen.setdefault(_look_alike(c), k)
        if j != k and out[j] != c:
            raise UsageError(f"{where}: classes {j} {_with_unseen(out[j])} and {k} {_with_unseen(c)} differ only in "
                             "invisible characters, spaces, character width or look-alike letters and marks; write "
                             "them alike")  # fmt: skip
    return out


def _pack_classes(path: Path) -> list[str]:
    """The classes of the pack at ``path``: those its metadata (checksummed, what its targets index) holds;
    its ``classes.json`` (a copy, for people and other tools) must say the same, or the pack is refused."""
    from datakit.lmdb import FORMAT, _no_meta, read_meta, record_count

    meta = read_meta(path)
    if meta is not None and meta.get("format") != FORMAT:  # another program's record under datakit's key
        raise UsageError(f"classes={os.fspath(path)!r}: not a datakit pack (its metadata record is of format "
                         f"{meta.get('format')!r})")  # fmt: skip
    if meta is None:  # another program's LMDB, or a damaged one, is no pack still to be written
        why = _no_meta(path, record_count(path))
        said = why[len(f"{path}: ") :] if why.startswith(f"{path}: ") else why
        if said.startswith("not a datakit pack"):
            raise UsageError(f"classes={os.fspath(path)!r}: {said}")
        if said.startswith("damaged"):
            raise PackError(f"classes={os.fspath(path)!r}: {said}")
    if meta is None or not isinstance(meta.get("classes"), dict):
        raise UsageError(f"classes={os.fspath(path)!r}: a pack with no classes committed yet (its first samples are "
                         "not written): pack it first, or give the classes another way")  # fmt: skip
    try:
        ours = [str(c) for c in ClassMap.from_json(meta["classes"]).classes]
    except ValueError as e:
        raise LabelError(f"classes={os.fspath(path)!r}: the pack's metadata holds {e}") from None
    copy = path / "classes.json"
    if copy.is_file():
        try:
            obj = json.loads(copy.read_bytes().decode("utf-8-sig"))
        except (OSError, UnicodeDecodeError, ValueError):
            obj = None
        names = obj.get("classes") if isinstance(obj, dict) else None
        if names != ours:
            if isinstance(names, list) and len(names) == len(ours):
                k = next(k for k, (a, b) in enumerate(zip(names, ours)) if a != b)
                how = f"class {k} is {names[k]!r} there, {ours[k]!r} in the pack's metadata"
            elif isinstance(names, list):
                how = f"it names {len(names)} classes, the pack's metadata {len(ours)}"
            else:
                how = "it cannot be read as a class map"
            raise LabelError(f"{copy}: not the class map of the pack ({how}), which its samples' labels index: "
                             "changed by hand? `datakit verify` says more; run its pack-lmdb command again with "
                             "--resume to write it again")  # fmt: skip
    return ours


def given_classes(classes) -> list[str]:
    """The class list ``classes=`` names: a sequence of names, a dataset or :class:`ClassMap` (its
    ``classes``), an LMDB pack (its ``classes.json``), a ``.json`` file (a list, or a pack's
    ``{"classes": [...]}``), a text file of one class per line, or a folder of class folders (its classes)."""
    if isinstance(classes, ClassMap) or hasattr(classes, "classes"):
        return [str(c) for c in classes.classes]
    if isinstance(classes, (str, os.PathLike)):
        path = Path(classes)
        if path.is_dir() and not (path / "classes.json").exists() and not (path / "data.mdb").exists():
            try:  # a folder of class folders (the training images): theirs
                return list(open_source(path).classes)
            except (LabelError, UsageError) as exc:
                raise UsageError(f"classes={os.fspath(classes)!r}: a folder, but not one of class folders ({exc}); "
                                 "classes= takes a pack, a .json or .txt of class names, or the training folder of "
                                 "class folders") from None  # fmt: skip
        if path.is_dir() and (path / "data.mdb").is_file():
            return _pack_classes(path)
        if path.is_dir():
            path = path / "classes.json"
        if not path.is_file():
            if path.exists():
                raise UsageError(f"classes={os.fspath(classes)!r}: {not_a_file(path)}, not a file (a pack, a .json "
                                 "or a .txt of class names)")  # fmt: skip
            raise UsageError(f"classes={os.fspath(classes)!r}: no such file (a pack, a .json or a .txt of class names)")
        if path.suffix.lower() in EXCEL_SUFFIXES or path.suffix.lower() == ".xls":
            raise UsageError(f"{path}: a workbook; classes= takes a pack, a .json list or a text file of class "
                             "names, one per line")  # fmt: skip
        from datakit.labels import _decode_text

        raw = path.read_bytes()
        if path.suffix.lower() == ".json":
            try:
                text = raw.decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                line = raw.count(b"\n", 0, exc.start) + 1
                raise LabelError(
                    f"{path}, line {line}: byte 0x{raw[exc.start]:02x} is not UTF-8, which JSON is written in"
                ) from None
        else:  # a text file: in any encoding a label table may be in (GBK, Big5, UTF-16), found the same way
            from datakit.io import image_format

            kind = ("a zip archive" if raw[:4] == b"PK\x03\x04" else "an LMDB file: give the pack's folder"
                    if raw[16:20] == b"\xde\xc0\xef\xbe" else f"a {fmt} image" if (fmt := image_format(raw))
                    else None)  # fmt: skip
            if kind is not None:  # a zip, an image, a pack's data.mdb: no list of names in any encoding
                raise UsageError(f"classes={os.fspath(classes)!r}: not a text file of class names ({kind}); classes= "
                                 "takes a pack, a .json or a .txt of class names (one per line), or the training "
                                 "folder of class folders")  # fmt: skip
            decoded, enc = _decode_text(raw, path, None)  # a text of names with a bad byte: named by its line
            text = (decoded if decoded is not None else raw.decode("ascii")).lstrip("\ufeff")
        if path.suffix.lower() == ".json":
            try:
                obj = json.loads(text)
            except ValueError as exc:
                raise UsageError(f"{path}: not JSON ({exc})") from None
            obj = obj.get("classes") if isinstance(obj, dict) else obj
            if not isinstance(obj, list):
                raise UsageError(f'{path}: expected a list of class names or {{"classes": [...]}}')
            return _named_classes(obj, str(path))
        return _class_lines(path, text)
    if isinstance(classes, Sequence):
        return _named_classes(classes, "classes=")
    raise UsageError(
        f"classes= must be a list of class names, a dataset, a pack or a file, got {type(classes).__name__}"
    )


def refuse_table_options(path: str | os.PathLike, remap_labels: bool = False, **options) -> None:
    """Refuse a label table's options (``file_column=``, ``label_column=``, ``split_column=``, ``include_hidden=``,
    ``encoding=``, ``remap_labels=``) given with a folder, a zip or a pack read without a table: they would change
    nothing, unsaid. A zip's ``encoding=`` is of its member names; a pack refuses ``remap_labels=`` itself."""
    path = Path(path)
    suffix = path.suffix.lower()
    if path.is_file() and suffix in EXCEL_SUFFIXES + TEXT_SUFFIXES:
        return  # the source is the table
    pack = _is_pack(path)
    flags = {"file_column": "--file-column", "label_column": "--label-column", "split_column": "--split-column",
             "include_hidden": "--include-hidden", "encoding": "--encoding", "engine": "", "sep": ""}  # fmt: skip
    unheeded = [(name, flags[name]) for name in flags if options.get(name) and not (name == "encoding" and
                                                                                  suffix == ".zip")]  # fmt: skip
    if remap_labels and not pack:  # a folder's or a zip's classes are names: no integers to map
        unheeded.append(("remap_labels", "--remap-labels"))
    if unheeded:
        name, flag = unheeded[0]
        said = f"{name}= ({flag})" if flag else f"{name}="
        if pack:
            raise UsageError(f"{said} is for reading a label table; {path} is an LMDB pack, which holds "
                             "its own labels: leave it out")  # fmt: skip
        what = "a zip" if suffix == ".zip" else "a folder"
        raise UsageError(f"{said} is for reading a label table; {path} is {what}, read without one: "
                         "give the table with labels= (--labels TABLE), or leave it out")  # fmt: skip


def _user_path(path):
    """A path as the user may give it: bytes (``os.fsencode``) as the str Python's os functions take, and a
    leading ``~`` (``~/data``) expanded as torchvision's ImageFolder does, where no such name is here as it is."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if isinstance(path, str) and path.startswith("~") and not os.path.lexists(path):
        return os.path.expanduser(path)
    return path


def open_source(
    src: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    kinds=None,
    labels: str | os.PathLike | LabelTable | None = None,
    split: str | None = None,
    transform: Callable | None = None,
    target_transform: Callable | None = None,
    mode: str = "rgb",
    on_error: str | Callable = "raise",
    cache: str | None = None,
    remap_labels: bool = False,
    root: str | os.PathLike | None = None,
    file_column: str | None = None,
    label_column: str | None = None,
    split_column: str | None = None,
    encoding: str | None = None,
    include_hidden: bool = False,
    classes: object = None,
    sheets: str | Sequence[str] | None = None,
    zip_encoding: str | None = None,
    engine: str | None = None,
    sep: str | None = None,
    **kwargs,
) -> ImageDataset:
    """:func:`datakit.datasets.open_dataset` (which documents the arguments) with the classes of
    ``kinds``: a module holding FolderDataset, TableDataset, ZipDataset and LmdbDataset, this one
    by default (torch-free), :mod:`datakit.datasets` for its torch datasets."""
    kinds = kinds or sys.modules[__name__]
    src = [_user_path(s) for s in src] if isinstance(src, (list, tuple)) else _user_path(src)
    labels = _user_path(labels) if isinstance(labels, (str, bytes, os.PathLike)) else labels
    if labels is not None and not isinstance(labels, (str, os.PathLike)) and type(labels).__name__ != "LabelTable":
        raise UsageError(f"labels= is the path of a label table (.csv, .xlsx, .txt ...) or read_labels()'s table, got "
                         f"a {type(labels).__name__}; save it first (DataFrame.to_csv) and give the path")  # fmt: skip
    for name, value in (("transform", transform), ("target_transform", target_transform)):
        if value is not None and not callable(value):  # (a list of transforms: v2.Compose(list); "train": a pipeline)
            raise UsageError(f"{name} must be a function or a transform object (or None), got {value!r}")
    remap_labels, include_hidden = as_flag("remap_labels", remap_labels), as_flag("include_hidden", include_hidden)
    root = _user_path(root) if root is not None else None
    refuse_empty(src=src, labels=labels, root=root, classes=classes, split=split, file_column=file_column,
                 label_column=label_column, split_column=split_column)  # fmt: skip
    if classes is not None:
        given = given_classes(classes)
        if remap_labels:
            raise UsageError("classes= and remap_labels= both number the classes; give one of them")
        # integer labels are read as they are (a split without class 3 is no gap), then indexed by classes=
        as_read = labels is not None or _is_table(src)
        with markers_as_classes(given):  # a class named 'None' or 'nan' that classes= names is read as a class
            told = _OPENED_WITH_CLASSES.set(True)  # indexed by the classes given: no split alone to speak of
            try:
                ds = open_source(src, kinds=kinds, labels=labels, split=split, transform=transform,
                                 target_transform=target_transform, mode=mode, on_error=on_error, cache=cache,
                                 remap_labels=as_read, root=root, file_column=file_column, label_column=label_column,
                                 split_column=split_column, encoding=encoding, include_hidden=include_hidden,
                                 sheets=sheets, zip_encoding=zip_encoding, engine=engine, sep=sep,
                                 **kwargs)  # fmt: skip
            finally:
                _OPENED_WITH_CLASSES.reset(told)
        check_header(given, ds.classes)
        if ds.classes != given:
            ds.use_classes(list(given), where=os.fspath(labels if isinstance(labels, (str, os.PathLike)) else src))
        return ds
    common = dict(transform=transform, target_transform=target_transform, mode=mode, on_error=on_error, cache=cache)
    shards = _expand_sources(src)
    if shards is not None:
        if len(shards) == 1:
            return open_source(shards[0], kinds=kinds, labels=labels, split=split, remap_labels=remap_labels, root=root,
                                file_column=file_column, label_column=label_column, split_column=split_column,
                                encoding=encoding, include_hidden=include_hidden, sheets=sheets,
                                zip_encoding=zip_encoding, engine=engine, sep=sep, **common, **kwargs)  # fmt: skip
        return kinds.LmdbDataset(shards, split=split, **common, **kwargs)
    path = Path(src)
    if not path.exists():
        raise FileNotFoundError(f"{path}: {missing_why(path)}")
    if path.is_dir() and not os.access(path, os.R_OK | os.X_OK):  # its files neither listed nor opened (chmod 000)
        raise UsageError(f"{path}: a folder this process may not read (its permissions); nothing in it can be opened")
    pack = _is_pack(path)
    if zip_encoding and path.suffix.lower() != ".zip" and not os.fspath(root or "").lower().endswith(".zip"):
        raise UsageError(f"zip_encoding= (--zip-encoding) names the encoding of a zip's member names; {path} is no "
                         "zip: leave it out")  # fmt: skip
    given = [name for name, v in (("labels", labels), ("root", root), ("remap_labels", remap_labels)) if v]
    if pack and given:  # a pack holds its labels: a table beside it would be silently ignored
        raise UsageError(f"{path}: an LMDB pack holds its own labels; {', '.join(given)} cannot change them "
                         "(pack the table: datakit pack-lmdb FOLDER OUT --labels TABLE)")  # fmt: skip
    table_options = dict(split=split, file_column=file_column, label_column=label_column, split_column=split_column,
                         encoding=encoding, include_hidden=include_hidden, remap_labels=remap_labels,
                         sheets=sheets, engine=engine, sep=sep)  # fmt: skip
    if sheets is not None and not (labels is not None and not isinstance(labels, LabelTable) or _is_table(path)):
        raise UsageError("sheets= names the sheets of a workbook read here (labels=, or the workbook as the source)")
    table = labels if isinstance(labels, LabelTable) else (read_labels(labels, **table_options) if labels else None)
    suffix = path.suffix.lower()
    if table is None:
        refuse_table_options(path, remap_labels, file_column=file_column, label_column=label_column,
                             split_column=split_column, include_hidden=include_hidden, encoding=encoding,
                             engine=engine, sep=sep)  # fmt: skip
    if path.is_dir() and (path / "data.mdb").exists() or suffix == ".lmdb":
        return kinds.LmdbDataset(path, split=split, **common, **kwargs)
    if table is not None:
        if root is not None:
            raise UsageError(f"root= is for a label table opened alone; with labels=, {path} is the root")
        if path.is_file() and suffix != ".zip":  # 'labels.csv --labels labels.xlsx': every file 'missing'
            raise UsageError(f"{path}: a file; with labels= (--labels) the source is the folder or .zip of the images "
                             "the table names")  # fmt: skip
        return _alone(kinds.TableDataset(table, path, split=split, remap_labels=remap_labels,
                                         zip_encoding=zip_encoding, **common, **kwargs))  # fmt: skip
    if path.is_file() and suffix in EXCEL_SUFFIXES + TEXT_SUFFIXES:
        return _alone(kinds.TableDataset(read_labels(path, **table_options), root, split=split,
                                         remap_labels=remap_labels, **common, **kwargs))  # fmt: skip
    if path.is_file() and suffix != ".zip":  # a table of a kind not read (.xls, .json), or no dataset at all
        from datakit.labels import _TABLE_SUFFIXES

        raise UsageError(f"{path}: not a dataset source (a folder, a label table: {_TABLE_SUFFIXES}, a .zip or an "
                         "LMDB pack)")  # fmt: skip
    if split is not None:
        raise UsageError(f"split={split!r} needs a label table (labels=) or an LMDB pack with splits; {path} has none")
    if path.is_dir():
        return _folder_alone(kinds.FolderDataset(path, **common, **kwargs))
    if suffix == ".zip":  # encoding=: of its member names here, as unzip-gbk --encoding (zip_encoding= too)
        if encoding and zip_encoding and codecs.lookup(encoding).name != codecs.lookup(zip_encoding).name:
            raise UsageError(f"encoding={encoding!r} and zip_encoding={zip_encoding!r}: both name the encoding of "
                             f"{path}'s member names (read without a table); give one")  # fmt: skip
        names = zip_encoding or encoding
        return kinds.ZipDataset(path, **common, **({"encoding": names} if names else {}), **kwargs)
    # a FIFO, a socket
    raise UsageError(f"{path}: not a dataset source (a folder, a label table, a .zip or an LMDB pack)")
