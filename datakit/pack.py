"""The pack job: any dataset into one LMDB pack, validated, resumable, one writer at a time.

Worker processes read and validate (or re-encode) samples in order; this process writes them
through :class:`~datakit.lmdb.LmdbWriter`. The format itself lives in :mod:`datakit.lmdb`.
"""

from __future__ import annotations

import errno
import json
import os
import posixpath
import re
import shutil
import stat
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from datakit.check import _missing_line
from datakit.errors import PackError, SampleError, UsageError
from datakit.io import (
    _default_budget,
    _exif_turned,
    _jpeg_chroma_lag,
    _jpeg_size,
    _tiff_tags,
    check_path_length,
    decode_image,
    encode_image,
    image_format,
    jpeg_damage,
    probe_image,
    reduction_factor,
    region_decoder_available,
)
from datakit.labels import ClassMap
from datakit.lmdb import (
    FORMAT,
    INITIAL_MAP_SIZE,
    LOCK_NAME,
    PACK_FILES,
    RECORD,
    SWAPPED_OUT,
    VERSION,
    LmdbWriter,
    PackLock,
    PackWriteError,
    _tree_problem,
    close_pack,
    committed_count,
    read_meta,
    record_count,
    stored_names,
    stored_values,
)
from datakit.lmdbpages import NAMED_DATABASES
from datakit.parallel import WorkerDied, map_ordered
from datakit.sources import (
    FolderDataset,
    ImageDataset,
    LmdbDataset,
    StringArray,
    TableDataset,
    open_source,
    same_sample_name,
)

__all__ = ["PackReport", "pack_lmdb", "parse_shard"]


@dataclass
class PackReport:
    """What :func:`pack_lmdb` did."""

    path: Path
    count: int
    resumed_from: int = 0
    skipped: list[str] = field(default_factory=list)
    bytes_in: int = 0
    bytes_out: int = 0
    seconds: float = 0.0

    @property
    def skipped_summary(self) -> str:
        """What was skipped, counted as check counts it: "2 missing files and 1 unreadable image"; "" if none."""
        return _tally(self.skipped)


def _tally(lines: list[str]) -> str:
    """Bad samples' lines counted by kind: the files a table names that are not there (check's ``missing:``
    lines) apart from the images that cannot be read."""
    missing = sum(line.startswith("missing: ") for line in lines)
    counts = [(missing, "missing file"), (len(lines) - missing, "unreadable image")]
    return " and ".join(f"{n} {what}{'' if n == 1 else 's'}" for n, what in counts if n)


def parse_shard(spec: str | tuple[int, int] | None) -> tuple[int, int]:
    """``"2/8"`` or ``(2, 8)`` to ``(2, 8)``; shards are numbered from 0."""
    if spec is None:
        return 0, 1
    if isinstance(spec, str):
        try:
            a, b = (int(x) for x in spec.split("/"))
        except ValueError:
            raise UsageError(f"shard must look like I/N (for example 0/4), got {spec!r}") from None
    else:
        a, b = spec
    if not (b >= 1 and 0 <= a < b):
        raise UsageError(f"shard I/N needs 0 <= I < N, got {a}/{b}")
    return a, b


# ---------------------------------------------------------------------------------------------
# the work of one sample, in a worker

Result = tuple[int, "bytes | None", int, int, int, "str | None", int]


def _validate(data: bytes, name: str) -> tuple[int, int]:
    """The upright (height, width) of an encoded image, refused where ``datakit check`` refuses it and in its
    words: check's own strict probe, whose C libraries' messages (libpng's "CRC error", libjpeg's "Corrupt JPEG
    data") are captured into the error, never printed. A JPEG that libjpeg decodes without a warning
    (:func:`~datakit.io.jpeg_damage`: no capture, no lock) skips it: the common case stays parallel."""
    if image_format(data) == "JPEG" and jpeg_damage(data) == "":
        info = _jpeg_size(data)
        if info is not None and info[0] * info[1] <= _default_budget() and not _exif_turned(data):
            return info[0], info[1]  # every bit of its data decoded without a warning; no rotation to tell
        return probe_image(data, name)  # turned or over the budget: nothing left for libjpeg to warn about
    return probe_image(data, name, strict=True)


def _prepare(ds: ImageDataset, i: int, max_size: int | None = None, quality: int = 90) -> Result:
    """In a worker (a thread for plain JPEG files, else a process): read, validate and (re)encode sample ``i``.

    Returns (index, value, height, width, bytes read, error, crc32 of value): the checksum is
    taken here, off the writing thread. The value is the very bytes validated: a file that changes
    afterwards does not change what is packed. The error is the line ``datakit check`` gives the sample.
    """
    try:
        data = ds.read(i)
        name = ds.name(i)
        if max_size:
            if image_format(data) != "JPEG" or jpeg_damage(data) != "":
                probe_image(data, name, strict=True)  # refused as check refuses it, in its words
            mode = "gray" if _gray(data) else "rgb"  # a gray image stays one (a third of the bytes, and H x W)
            info = _jpeg_size(data) if image_format(data) == "JPEG" else None
            reduced = info is not None and max(info[:2]) > max_size
            # a 4:2:2 JPEG (or the like) goes to _shrunk, which decodes it a scale finer, at once: decoded once
            img = None if reduced and mode != "gray" and _jpeg_chroma_lag(data) > 1 else decode_image(
                data, mode, max_size, name=name)  # fmt: skip
            h, w = img.shape[:2] if img is not None else (0, 0)
            value = data
            if img is None or max(h, w) > max_size:
                img = _shrunk(data, name, max_size, mode)
                value, (h, w) = encode_image(img, ".jpg", quality, mode="rgb"), img.shape[:2]
            elif reduced:
                # decoded reduced to the size asked: re-encode the reduced pixels
                value = encode_image(img, ".jpg", quality, mode="rgb")
        else:
            # validation: the format's structure and its data decoded (a JPEG's at 1/8 scale)
            h, w = _validate(data, name)
            value = data
        return i, value, h, w, len(data), None, zlib.crc32(value)
    except (SampleError, ValueError, OSError, KeyError) as exc:
        name = ds.name(i)
        if isinstance(exc, OSError) and exc.strerror:  # "name: No such file or directory", as the other lines
            return i, None, 0, 0, 0, f"{name}: {exc.strerror}", 0
        return i, None, 0, 0, 0, str(exc) if name in str(exc) else f"{name}: {exc}", 0


def _regular(path: str) -> bool:
    """A regular file, which reads the same twice (a named pipe or a device does not)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _local_files(ds: ImageDataset) -> bool:
    """Whether ``ds.name(i)`` is a plain file path (a folder or a table of files, not a zip or a pack)."""
    return isinstance(getattr(ds, "files", None), StringArray) and getattr(ds, "zip", None) is None


def _jpeg_names(files: StringArray) -> bool:
    """Whether every name ends in .jpg or .jpeg (any case), read from the names' bytes at once."""
    data = np.concatenate([np.zeros(5, np.uint8), files.data]) | 0x20  # ASCII letters lower-cased
    ends, lengths = files.offsets[1:] + 5, np.diff(files.offsets)

    def tail(suffix: bytes) -> np.ndarray:
        hit = lengths >= len(suffix)
        for k, c in enumerate(suffix):
            hit &= data[ends - len(suffix) + k] == c
        return hit

    return bool((tail(b".jpg") | tail(b".jpeg")).all())


def _read_ahead(ds: ImageDataset, first: int, hi: int, progress: list[int], stop: threading.Event,
                depth: int = 128) -> None:  # fmt: skip
    """Ask the kernel to start reading the next ``depth`` files (``POSIX_FADV_WILLNEED``), so that on a
    cold cache the disk works while the workers validate, instead of each worker waiting on each read."""
    for i in range(first, hi):
        while i > progress[0] + depth:
            if stop.wait(0.005):
                return
        if stop.is_set():
            return
        if not _regular(ds.name(i)):
            continue  # opening a named pipe would take its data from the worker that reads it
        try:
            fd = os.open(ds.name(i), os.O_RDONLY)
        except OSError:
            continue  # the worker reports it
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        finally:
            os.close(fd)


# ---------------------------------------------------------------------------------------------
# the output folder


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False in a folder this process may not enter (no x bit), which is refused as not
    writable where the pack would go."""
    try:
        return path.is_file()
    except OSError:
        return False


def _classify(out: Path) -> str:
    """What ``out`` is: "missing", "empty", "pack" (datakit pack files only), "file" or "foreign"."""
    if not os.path.lexists(out):
        return "missing"
    if not out.is_dir():
        return "file"
    entries = {e.name for e in os.scandir(out)}
    if not entries:
        return "empty"
    return "pack" if entries <= PACK_FILES else "foreign"


def _is_our_pack(folder: Path) -> bool:
    """Whether ``folder`` holds a datakit pack (its metadata, or the classes.json a pack writes first), whatever
    else is in it: a plain LMDB environment of another program is not one."""
    try:
        if read_meta(folder) is not None:
            return True
    except (PackError, OSError):
        pass
    return (folder / "classes.json").is_file() and _our_classes(folder)


def _our_classes(out: Path) -> bool:
    """Whether ``out`` holds a classes.json as a pack writes it (``{"classes": [...]}``), not a file of yours."""
    try:
        obj = json.loads((out / "classes.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return (out / "classes.json").exists()  # cut short by a kill: a pack's
    return isinstance(obj, dict) and isinstance(obj.get("classes"), list)


def _pack_state(out: Path, had_lock: bool) -> tuple[str, dict | None]:
    """Under the lock: ("datakit", meta), ("started", None): killed before its first commit,
    ("damaged", None): a datakit pack that cannot be read, or ("other", meta-or-None)."""
    marked = had_lock or _our_classes(out)
    try:
        meta = read_meta(out)
    except PackError:
        return ("damaged" if marked else "other"), None
    if meta is None:  # no metadata yet: killed before its first commit (a lock, or the classes written first);
        # records without it are no pack's stopped early (each commit writes both): a copy made while it was written
        if marked and record_count(out):
            return "damaged", None
        return ("started" if marked else "other"), None
    return ("datakit" if meta.get("format") == FORMAT else "other"), meta


def _damage(out: Path) -> str:
    """Why a pack :func:`_pack_state` calls damaged cannot be read."""
    try:
        read_meta(out)
    except (PackError, OSError) as exc:
        return str(exc).removeprefix(f"{out}: ")
    n = record_count(out)
    return f"{n} record{'s' * (n != 1)} and no metadata record (a copy made while the pack was being written?)"


def _restore_classes(out: Path, class_map: ClassMap) -> None:
    try:
        if ClassMap.load(out / "classes.json") == class_map:
            return
    except (OSError, ValueError, KeyError, TypeError):  # missing, or cut short by a kill
        pass
    class_map.save(out / "classes.json")


def _clear_pack(out: Path) -> None:
    """Remove a pack's files (the lock file stays: this process holds it)."""
    for name in ("data.mdb", "lock.mdb", "classes.json", ".classes.json.tmp"):
        try:
            (out / name).unlink()
        except FileNotFoundError:
            pass


def _gray(data: bytes) -> bool:
    """Whether an image is stored with one channel (a gray JPEG, a gray PNG without alpha, an 8-bit gray TIFF, a
    BMP of 8-bit indices into a palette of grays, which the decoders give as one channel): from its header."""
    fmt = image_format(data)
    if fmt == "JPEG":
        info = _jpeg_size(data)
        return info is not None and info[2] == 1
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 26 and data[12:16] == b"IHDR":
        return data[25] == 0  # colour type 0: gray
    if fmt == "TIFF":
        tags = _tiff_tags(data, (258, 262, 277))  # BitsPerSample, PhotometricInterpretation, SamplesPerPixel
        return tags.get(277, 1) == 1 and tags.get(258, 1) == 8 and tags.get(262) in (0, 1)
    if fmt == "BMP" and len(data) >= 54:
        head = int.from_bytes(data[14:18], "little")
        bits = int.from_bytes(data[28:30], "little")
        used = int.from_bytes(data[46:50], "little") or 256
        table = data[14 + head : 14 + head + 4 * used]
        return (bits == 8 and head >= 40 and used <= 256 and len(table) == 4 * used
                and all(table[k] == table[k + 1] == table[k + 2] for k in range(0, len(table), 4)))  # fmt: skip
    return False


def _shrunk(data: bytes, name: str, max_size: int, mode: str = "rgb") -> np.ndarray:
    """The image with its longer side ``max_size``, RGB, upright: resized (area filter) from the pixels as stored,
    decoded at the JPEG scale that keeps ``max_size``. At 1/f scale a side that is no multiple of f ends in a
    pixel covering fewer than f: resized as if the whole decoded image spanned the full sides, every pixel came
    out up to half a pixel off. Here each decoded pixel counts f source pixels, and the overhang of that short
    last row and column is cut from the bottom and right, where it is as stored; the result is turned upright."""
    import cv2

    from datakit.io import _decode_image, _orient

    info = _jpeg_size(data) if image_format(data) == "JPEG" else None
    scale = max_size
    lag = _jpeg_chroma_lag(data) if info is not None and info[0] and info[1] and mode != "gray" else 1
    if lag > 1:  # 4:2:2 and the like: at libjpeg's reduced scales their chroma is coarser than the luma: one finer
        f = max(1, reduction_factor(info[0], info[1], max_size) // lag)
        scale = -(-max(info[0], info[1]) // f) if f > 1 else None
    stored, orientation = _decode_image(data, mode, scale, name)
    dh, dw = stored.shape[:2]
    full_h, full_w = info[:2] if info is not None and info[0] >= dh and info[1] >= dw else (dh, dw)
    f = reduction_factor(full_h, full_w, scale) if info is not None else 1
    if -(-full_h // f) != dh or -(-full_w // f) != dw:  # decoded at another scale than libjpeg's: as it came
        full_h, full_w, f = dh, dw, 1
    s = max_size / max(full_h, full_w)
    th, tw = max(1, round(full_h * s)), max(1, round(full_w * s))
    # the target's sides span the full image's, as any resize maps them; OpenCV maps by fx/fy themselves when it
    # is given no size, so the decoded pixels past the full sides fall beyond the target and are cut
    out = cv2.resize(stored, None, fx=f * tw / full_w, fy=f * th / full_h, interpolation=cv2.INTER_AREA)
    if out.shape[0] < th or out.shape[1] < tw:  # a side rounded down past the target (a thin image): stretched
        out = cv2.resize(stored, (tw, th), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(_orient(out[:th, :tw], orientation))


def _open_output(out: Path, meta: dict, *, resume: bool, overwrite: bool, keep: bool = False,
                 legacy_names=lambda: None, splits_of: str = "table") -> tuple[PackLock, dict | None]:  # fmt: skip
    """Take the lock on ``out`` and decide where to start: the existing metadata to resume, or None.
    With ``keep``, an existing readable pack that ``overwrite`` replaces is left as it is (the new one
    is built beside it): the metadata returned is then ``{"replace": True}``. ``splits_of``: where the
    splits come from ("table", or "pack" for a re-pack), as a refused resume names it."""
    for p in Path(os.path.realpath(out)).parents:  # a pack inside a pack: the outer one's --overwrite refused later
        if _is_file(p / "data.mdb") and _is_our_pack(p):
            raise UsageError(f"{out}: inside the pack {p}, which would then hold other files than a pack's (and "
                             "refuse --overwrite); pick an OUT outside it")  # fmt: skip
    kind = _classify(out)
    if kind == "file":
        raise UsageError(f"{out}: is a file, not a pack folder; pick another OUT (--overwrite replaces only packs)")
    if kind == "foreign":
        why = "--overwrite replaces only a datakit pack or an empty folder" if overwrite else "pick another OUT"
        raise UsageError(f"{out}: exists and holds other files than a datakit pack; not touching it, {why}")
    place = next(p for p in [out, *out.absolute().parents] if os.path.isdir(p))  # where the pack's folder goes
    for p in [out, *out.absolute().parents][1:] if place != out else []:  # the folders still to make: a file
        if p == place:  # (or a link to nothing) in the way
            break
        if os.path.lexists(p):
            raise UsageError(f"{p}: is a file, not a folder; cannot make the pack {out} under it; pick another OUT")
    if not os.access(place, os.W_OK | os.X_OK):
        raise UsageError(f"{place}: not writable; cannot write the pack {out} {'in' if place == out else 'into'} it")
    try:
        out.mkdir(parents=True, exist_ok=True)
        had_lock = (out / LOCK_NAME).exists()
        lock = PackLock(out)
    except OSError as exc:  # a full disk or a read-only place, before anything was written
        # ENOENT with the parent folder there: a file system that takes no new files (/proc, /sys)
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT):
            raise UsageError(f"{out}: cannot be written ({exc.strerror}); pick another OUT") from None
        raise PackWriteError(out, committed_count(out) if kind == "pack" else 0, exc) from None
    try:
        if kind in ("missing", "empty"):
            if not {e.name for e in os.scandir(out)} - {LOCK_NAME}:
                return lock, None
            # another pack-lmdb made OUT and filled it between the look above and the lock: what is there now
            # decides, as if it had been there before (never written over without --overwrite)
            kind = _classify(out)
            if kind == "foreign":
                raise UsageError(f"{out}: exists and holds other files than a datakit pack; not touching it, "
                                 "pick another OUT")  # fmt: skip
            had_lock = True
        state, existing = _pack_state(out, had_lock)
        if state == "other":
            if not had_lock:
                (out / LOCK_NAME).unlink()  # leave a foreign folder as it was
            what = ("an LMDB environment that is not a datakit pack" if (out / "data.mdb").exists() else
                    "a classes.json that is not a datakit pack's")  # fmt: skip
            problem = _tree_problem(out / "data.mdb") if (out / "data.mdb").exists() else None
            if problem is not None and problem != NAMED_DATABASES:
                raise UsageError(f"{out}: holds an LMDB environment whose pages are damaged ({problem}), so it cannot "
                                 "be told a datakit pack; not touching it: remove it and pack again, or pick another "
                                 "OUT")  # fmt: skip
            raise UsageError(f"{out}: holds {what}; not touching it, pick another OUT")
        if overwrite:
            if keep and state == "datakit":
                return lock, {"replace": True}
            _clear_pack(out)
            return lock, None
        if not resume:
            if state == "datakit" and existing and existing.get("complete"):
                raise UsageError(f"{out}: already exists, a complete pack of {existing.get('count')} samples; use "
                                 "--overwrite to pack it again")  # fmt: skip
            if state == "damaged":  # --resume would only say why it cannot read it
                raise UsageError(f"{out}: already exists, but cannot be read ({_damage(out)}); use --overwrite to "
                                 "pack it again")  # fmt: skip
            raise UsageError(f"{out}: already exists; use --resume to continue an interrupted pack or --overwrite")
        if state == "started":
            _clear_pack(out)  # interrupted before anything was committed: start again
            return lock, None
        if state == "damaged":
            raise PackError(f"{out}: {_damage(out)}; it cannot be resumed: use --overwrite to pack it again")
        if existing.get("version") != VERSION:
            raise UsageError(f"{out}: a version {existing.get('version')} pack cannot be resumed by this datakit "
                             "(writes version 2); use --overwrite to pack again")  # fmt: skip
        for key in ("source", "source_samples", "options", "classes"):
            if key == "source" and isinstance(existing.get(key), str) and same_sample_name(existing[key], meta[key]):
                continue  # the same folder under another spelling (a link to it, the path through one)
            if key == "source" and _is_path(existing.get(key)) != _is_path(meta[key]):
                was_path = _is_path(existing.get(key))
                then, now = ("a folder or file", "a dataset") if was_path else ("a dataset", "a path")
                raise UsageError(  # a path's pack resumed from a dataset object, as `--classes` makes, or the other way
                    f"{out}: was packed from {then} ({existing.get(key)!r}), now from {now} ({meta[key]!r}; "
                    "pack-lmdb --classes, and --encoding of a zip, make a dataset of its source): resume with the "
                    "first run's arguments, "
                    "or use --overwrite"
                )
            if existing.get(key) != meta[key]:
                raise UsageError(
                    f"{out}: was packed {_WHAT[key]} ({existing.get(key)!r}, now {meta[key]!r}); "
                    "resume only the same job, or use --overwrite"
                )
        if existing.get("splits", []) != meta.get("splits", []) or existing.get("source_splits") != meta.get(
            "source_splits", existing.get("source_splits")
        ):  # a row's split changed: the samples packed before would keep the old one
            what, row = ("table's", "row") if splits_of == "table" else ("source pack's", "sample")
            raise UsageError(f"{out}: the {what} splits changed since this pack began ({existing.get('splits')!r} "
                             f"then, {meta.get('splits')!r} now, or a {row}'s split); resume only the same "
                             f"{splits_of}, or use --overwrite")  # fmt: skip
        if "source_names" in existing and existing["source_names"] not in (meta["source_names"], legacy_names()):
            # a file renamed, moved to another class, added or removed: the samples already packed
            # would no longer be the source's first ones
            raise UsageError(f"{out}: the source's files or labels changed since this pack began (names and targets "
                             f"{existing['source_names']} when it began, {meta['source_names']} now); resume only "
                             "the same files, or use --overwrite")  # fmt: skip
        return lock, existing
    except BaseException:
        lock.close()
        raise


# ---------------------------------------------------------------------------------------------
# the job


def _names_crc(ds: ImageDataset, short: bool = False) -> int:
    """CRC-32 of every sample's target and name, in order; ``short``: the names relative to the source
    where the dataset has them, so the same folder spelled otherwise (absolute, from another working
    directory) is the same source."""
    crc = zlib.crc32(np.asarray(ds.targets, dtype="<i8").tobytes())
    name = (lambda i: _short_name(ds, i)) if short else ds.name
    for i in range(len(ds)):
        crc = zlib.crc32(name(i).encode("utf-8", "surrogateescape") + b"\n", crc)
    return crc


def _splits_crc(table, split_names: list[str]) -> str | None:
    """CRC-32 of every row's split, for a pack that records the splits: a resume must not pair the rows packed
    before with another table's splits."""
    if table is None or not split_names:
        return None
    crc = zlib.crc32("\n".join(str(v) for v in table.splits.values).encode("utf-8", "surrogateescape"))
    return f"crc32 {zlib.crc32(np.asarray(table.splits.codes, dtype='<i4').tobytes(), crc):08x}"


def _pack_splits(ds: LmdbDataset) -> tuple[list[str], np.ndarray]:
    """The splits of packs read as a source: every pack's split names (the first pack's order, then those it
    lacks), and each sample's split id among them (0: none), so that a re-pack keeps every sample's split."""
    names: list[str] = []
    for r in ds.readers:
        names += [s for s in r.meta.get("splits") or [] if s not in names]
    ids = np.zeros(len(ds), np.uint16)
    for k, r in enumerate(ds.readers):
        own = r.meta.get("splits") or []
        local = ds.local[ds.shard == k]
        stored = r.records["split"][local]
        bad = np.flatnonzero(stored > len(own))
        if len(bad):
            i = int(local[bad[0]])
            raise PackError(f"{r.path}: sample {i} has split id {int(r.records['split'][i])}, the pack has "
                            f"{len(own)} splits; run `datakit verify {r.path}` and pack its source again")  # fmt: skip
        to = np.asarray([0] + [names.index(s) + 1 for s in own], np.uint16)
        ids[ds.shard == k] = to[stored]
    return names, ids


def _ids_crc(split_names: list[str], ids: np.ndarray) -> str:
    """CRC-32 of every sample's split, for a re-pack that records the splits: a resume must not pair the samples
    packed before with the splits of a source pack packed again since."""
    crc = zlib.crc32("\n".join(split_names).encode("utf-8", "surrogateescape"))
    return f"crc32 {zlib.crc32(np.asarray(ids, dtype='<u2').tobytes(), crc):08x}"


def _fingerprint(ds: ImageDataset) -> str:
    """A dataset object as the metadata records its source: its kind, size and a checksum of every
    sample's name and target, so that --resume refuses another dataset of the same size and classes."""
    return f"{type(ds).__name__} of {len(ds)} samples (names and targets crc32 {_names_crc(ds):08x})"


def _short_name(ds: ImageDataset, i: int) -> str:
    """The sample's name relative to its source where the dataset has one (a pack's: the name it stores), else
    its full name."""
    if isinstance(ds, LmdbDataset):
        return ds.readers[ds.shard[i]].name(int(ds.local[i]))
    files = getattr(ds, "files", None)
    if not isinstance(files, StringArray):
        return ds.name(i)
    if not isinstance(ds, TableDataset):
        return files[i]  # a folder's own names ('a\\b.png' is a file name on Linux)
    # one name however the table spells the path: './a.jpg', 'x\\..\\a.jpg' and '/abs/folder/a.jpg' are 'a.jpg'
    name = files[i].replace("\\", "/")
    if name.startswith("/") and ds.zip is None:
        for top in {os.path.abspath(ds.root), os.path.realpath(ds.root)}:  # the folder as given, or its real path
            top = top.rstrip("/") + "/"
            if name.startswith(top):
                name = name[len(top) :]
                break
    return name if name.startswith("/") or re.match(r"^[A-Za-z]:/", name) else posixpath.normpath(name)


def pack_lmdb(
    src: str | os.PathLike | ImageDataset | Sequence[str | os.PathLike],
    out: str | os.PathLike,
    *,
    labels: str | os.PathLike | None = None,
    split: str | None = None,
    max_size: int | None = None,
    quality: int = 90,
    workers: int | None = None,
    resume: bool = False,
    overwrite: bool = False,
    shard: str | tuple[int, int] | None = None,
    skip_bad: bool = False,
    bad_samples: str | os.PathLike | None = None,
    remap_labels: bool = False,
    commit_bytes: int = 8 << 20,
    commit_every: int = 5000,
    commit_seconds: float = 2.0,
    map_size: int = INITIAL_MAP_SIZE,
    progress: Callable[[int, int, int], None] | None = None,
    empty_shard: bool = False,
) -> PackReport:
    """Pack any source :func:`~datakit.datasets.open_dataset` accepts into an LMDB pack at ``out``.

    Workers read and validate every image (a JPEG is entropy-decoded at 1/8 scale) and, with
    ``max_size``, re-encode it; this process writes them in order (its commits from a thread of
    their own, while reading goes on). Without ``max_size`` the original
    bytes are stored verbatim. The pack is resumable from its creation: metadata is committed
    at once, then every ``commit_seconds`` (or ``commit_bytes``/``commit_every``).

    Args:
        max_size: re-encode (JPEG, ``quality``) images whose longer side exceeds this.
        workers: readers (default: usable CPUs): threads of this process for plain JPEG files, whose reads
            and decoder release the GIL; processes for other files, a zip's members or another pack's samples
            (check's strict probe, which captures the C libraries' messages, runs one at a time per process).
        skip_bad: skip unreadable images and the files a table names that are not there (listed in the report
            and the metadata, each as ``datakit check`` words it) instead of failing.
        resume: continue an interrupted pack of the same source and options.
        overwrite: replace an existing datakit pack (never a file or a folder holding anything else).
        shard: ``"I/N"``: pack only the I-th of N contiguous parts (``open_dataset`` reads shards as one).
            A shard that would get no sample (more shards than samples) is refused, unless ``empty_shard``:
            then it is an empty pack, one of the set (torchrun with more ranks than samples, ``OUT`` of ``{rank}``).
        bad_samples: a bad-samples file written while training (``on_error=`` with ``bad_samples=``);
            with ``skip_bad``, the samples it lists are skipped without being read again.
        progress: called as ``progress(done, total, bytes_written)``.

    Raises:
        UsageError: existing output without resume/overwrite, a resume of another job, a bad shard.
        PackError: bad images, another process writing ``out``, a damaged pack, a failed write
            (:class:`~datakit.lmdb.PackWriteError`, whose line says what stays and which command goes on).
    """
    if resume and overwrite:
        raise UsageError("--resume and --overwrite contradict each other; pick one")
    if bad_samples is not None and not skip_bad:
        raise UsageError("--bad-samples lists samples to skip: pass --skip-bad with it")
    if max_size is not None:
        from datakit.io import whole_size

        max_size = whole_size(max_size, "max_size")  # refused once, here, not as every image's read failing
        if max_size < 1:
            raise UsageError(f"max_size must be at least 1, got {max_size}")
    if not 1 <= quality <= 100:
        raise UsageError(f"quality must be 1..100, got {quality}")
    # OUT as the folder it is: "." (a shell inside the pack), a link to the pack (its target is replaced)
    if not os.fspath(out):  # an unset "$OUT": the current folder would be packed into, or replaced
        raise UsageError("the pack's folder is named by an empty string (an unset variable?); name the folder to "
                         "write the pack in")  # fmt: skip
    check_path_length(out)
    if os.path.islink(out) and not os.path.exists(out):  # a link to nothing: its target's folders made up far away
        raise UsageError(f"{out}: a link to {os.readlink(out)}, which does not exist; make that folder first, or "
                         "give the pack's own path as OUT")  # fmt: skip
    out = Path(os.path.realpath(out) if os.path.islink(out) else os.path.abspath(out))
    beside = len(os.fsencode(_part_path(out).name))
    if beside > 255 and (overwrite or not os.path.lexists(out)):
        # --overwrite builds the pack that replaces it beside it, under a longer name (one packed before this check
        # is resumed all the same)
        longest = 255 - (beside - len(os.fsencode(out.name)))
        raise UsageError(f"{out}: its name is {len(os.fsencode(out.name))} bytes; a pack's name may be {longest} at "
                         f"most, so that --overwrite can build its replacement beside it ({_part_path(out).name[:24]}"
                         "...)")  # fmt: skip
    if overwrite and os.path.ismount(out):  # the new pack is built beside OUT and swapped in: not across a mount
        raise UsageError(
            f"{out}: is a mount point; --overwrite builds the new pack beside it and swaps the two, "
            "which a mount point cannot be: pack into a folder inside it, or empty it and pack again"
        )
    sh = parse_shard(shard)
    made_out = not os.path.lexists(out)  # OUT is this run's own: nothing of it is left when nothing is packed
    if isinstance(src, (list, tuple)) and src and all(isinstance(p, (str, os.PathLike)) for p in src):
        src = [os.path.abspath(p) for p in src]  # the shards of one pack, recorded as such: joined, and resumable
    elif not isinstance(src, (str, os.PathLike, ImageDataset)):
        raise UsageError(f"pack_lmdb takes a path or a datakit dataset (open_dataset), got {type(src).__name__}; "
                         "pack the dataset it is made of (shard= packs a part)")  # fmt: skip
    folder = src.root if isinstance(src, FolderDataset) else src  # a dataset of class folders handed over: its root
    if labels is None and isinstance(folder, (str, os.PathLike)) and os.path.isdir(folder):
        real_src, real_out = os.path.realpath(folder), os.path.realpath(out)
        if real_out != real_src and real_out.startswith(real_src.rstrip(os.sep) + os.sep):
            raise UsageError(f"{out}: inside the source folder {folder}, whose every later scan (--resume, check, "
                             "open_dataset) would read it as a class folder; put OUT outside the source (moved "
                             "there, a started pack resumes)")  # fmt: skip
    ds = src if isinstance(src, ImageDataset) else open_source(src, labels=labels, split=split,
                                                                remap_labels=remap_labels)  # fmt: skip
    n_total = len(ds)
    lo, hi = sh[0] * n_total // sh[1], (sh[0] + 1) * n_total // sh[1]
    if hi == lo and n_total and not empty_shard:  # a pack of no sample, "complete already" (more shards than samples)
        raise UsageError(f"shard {sh[0]}/{sh[1]} of {n_total} samples holds none: split them into at most {n_total} "
                         "shards")  # fmt: skip
    table = getattr(ds, "table", None)
    one_split = split is not None or getattr(ds, "split", None) is not None  # by path, or a dataset opened so
    # the splits the pack records and each source sample's split id among them (a pack of one split records none)
    split_names, sids, source_splits = [], None, None
    if isinstance(ds, LmdbDataset):  # a re-pack copies the names: altered ones are refused, not given a fresh checksum
        for reader in ds.readers:
            reader.check_names()
    if not one_split and table is not None and table.split_names:
        split_names = table.split_names
        to = {s: k + 1 for k, s in enumerate(split_names)}
        sids = np.asarray([to.get(v, 0) for v in table.splits.values] + [0], np.uint16)[table.splits.codes]
        source_splits = _splits_crc(table, split_names)
    elif not one_split and isinstance(ds, LmdbDataset):  # a re-pack: every sample keeps its pack's split
        names, ids = _pack_splits(ds)
        if names:
            split_names, sids, source_splits = names, ids, _ids_crc(names, ids)
    class_map = getattr(ds, "class_map", None) or ClassMap(tuple(ds.classes))
    source = (
        (src if isinstance(src, list) else os.path.realpath(src))  # a link's own folder: re-pointed, it is another
        if not isinstance(src, ImageDataset)
        else _fingerprint(src)
    )
    options = {"max_size": max_size, "quality": quality if max_size else None, "split": split,
               "shard": [sh[0], sh[1]], "labels": os.path.abspath(labels) if labels else None}  # fmt: skip
    meta = {
        "format": FORMAT, "version": VERSION, "count": 0, "complete": False, "source": source,
        "source_samples": n_total, "source_names": f"crc32 {_names_crc(ds, short=True):08x}", "planned": hi - lo,
        "first_source_index": lo, "options": options,
        "classes": class_map.to_json(), "splits": split_names, "checksum": "crc32",
        "encoding": f"JPEG quality {quality}, longer side <= {max_size}" if max_size else "original bytes",
        "record_dtype": RECORD.descr, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "writer": f"datakit {__import__('datakit').__version__}", "skipped": [],
    }  # fmt: skip
    if source_splits is not None:
        meta["source_splits"] = source_splits
    if isinstance(ds, LmdbDataset) and not max_size:  # their values as they are: stored as those packs stored them
        kinds = {str(r.meta.get("encoding", "original bytes")) for r in ds.readers}
        meta["encoding"] = kinds.pop() if len(kinds) == 1 else "as the packs it was packed from stored them"
    if isinstance(src, ImageDataset) and not isinstance(ds, LmdbDataset):  # a dataset object (--classes builds
        # one): the folder or archive it reads, known beside a pack made from the path itself
        archive = getattr(ds, "zip", None)
        root = archive.path if archive is not None else getattr(ds, "root", None)
        if isinstance(root, (str, os.PathLike)) and os.path.exists(root):
            meta["origin"] = os.path.realpath(root)
    if isinstance(ds, LmdbDataset):  # packed from packs: where theirs came from, kept though they move or go later
        from datakit.sources import pack_origin

        origins = {pack_origin(r.meta) for r in ds.readers}
        found = origins.pop() if len(origins) == 1 else None
        if found is not None and found != (tuple(source) if isinstance(source, list) else source):
            meta["origin"] = list(found) if isinstance(found, tuple) else found
    identity = _source_identity(ds)
    if identity is not None:
        meta["source_id"] = identity
    if getattr(ds, "_given", False):  # indexed by classes given (--classes): check notes a class it lacks
        meta["classes_given"] = True
    if not labels and isinstance(ds, TableDataset):  # a dataset object given (--classes builds one): its table
        meta["label_table"] = os.path.abspath(ds.table.path)
    known = _known_bad(ds, bad_samples) if bad_samples is not None else {}
    name_of = partial(_short_name, ds)
    try:
        lock, existing = _open_output(out, meta, resume=resume, overwrite=overwrite, keep=True,
                                      legacy_names=lambda: f"crc32 {_names_crc(ds):08x}",  # names as typed: older
                                      splits_of="pack" if isinstance(ds, LmdbDataset) else "table")  # fmt: skip
    except PackWriteError as exc:  # no room for the lock file: nothing of OUT was changed
        if not overwrite:
            raise
        raise PackWriteError(out, 0, exc.cause, advice=f"{out} was left as it was: free space or fix the cause, "
                             "then run the same command again") from None  # fmt: skip
    target, part_lock, writer, written = out, None, None, False
    try:
        if existing is not None and existing.get("replace"):
            # --overwrite of a pack: the new one is built beside it and swapped in when complete, so a kill or a
            # full disk at any moment leaves the old pack whole; a part so left is resumed when it is this job's
            target = _part_path(out)
            _clear_old(out)  # an old pack a killed run left to be removed
            if (target / SWAPPED_OUT).exists():  # the old pack, put aside by a run killed before removing it
                _remove_marked(target)
            try:
                part_lock, existing = _open_output(target, meta, resume=True, overwrite=False)
            except PackWriteError:
                raise  # no room for its lock: the part, if any, stays as it was
            except (UsageError, PackError):
                part_lock, existing = _open_output(target, meta, resume=False, overwrite=True)
        if existing is not None:  # a complete pack too: "complete already" of a source changed since would be
            # a pack of the old files said to be the job done
            done = existing.get("complete") and target == out
            # a complete pack of re-encoded images: a moved time (touch, chmod, a copy restored) tells nothing its
            # bytes can confirm, so only the samples read again and re-encoded, and the source's identity, decide
            stale = _source_changed(ds, lo, existing, target, name_of, max_size, quality, identity,
                                    times=not (done and (existing.get("options") or {}).get("max_size")))  # fmt: skip
            if stale is not None and done:
                raise UsageError(f"{out}: complete, but {stale}; use --overwrite to pack it again")
            if stale is not None and target != out:
                # --overwrite, run again after a kill: the part it left was packed from a source that has changed
                # since, no start for a fresh pack (resumed, it would mix the two): packed again from the start
                part_lock.close()
                shutil.rmtree(target, ignore_errors=True)
                part_lock, existing = _open_output(target, meta, resume=False, overwrite=True)
            elif stale is not None:
                raise UsageError(f"{out}: {stale}; resume only the same files, or use --overwrite")
        if existing is not None:
            if existing.get("complete"):
                # killed after completing, before classes.json was written: the pack's own map restores it
                written = True
                _restore_classes(target, ClassMap.from_json(existing["classes"]))
                if target != out:
                    _swap_in(target, out)
                return PackReport(out, existing["count"], existing["count"], list(existing.get("skipped", [])))
            meta["skipped"] = existing.get("skipped", [])
            meta["created"] = existing.get("created", meta["created"])
            meta["count"] = existing["count"]
            named = existing.get("source_names", meta["source_names"])
            if isinstance(ds, LmdbDataset) and named != meta["source_names"]:
                # a re-pack begun by an older datakit, which named each sample PACK:NAME: it goes on naming them so
                name_of, meta["source_names"] = ds.name, named
            damaged = _names_damaged(target, lo, hi, len(existing.get("skipped", [])), name_of)
            if damaged is not None:
                raise PackError(f"{out}: {damaged}: the part packed so far was altered since it was written; pack "
                                "it again with --overwrite")  # fmt: skip
        writer = LmdbWriter(target, meta, resume=existing is not None, lock=part_lock or lock,
                            commit_bytes=commit_bytes, commit_every=commit_every, commit_seconds=commit_seconds,
                            map_size=map_size, background=True)  # fmt: skip
        with writer:
            report = _fill(writer, ds, lo, hi, workers, max_size, quality, skip_bad, sids, name_of, progress,
                           known, advice=partial(_bad_advice, out, target, overwrite))  # fmt: skip
            written = True
            class_map.save(target / "classes.json")
        if report.count == 0 and report.skipped:  # a lost mount, a wrong folder: an empty pack is no result
            close_pack(target)
            if target != out or made_out:
                shutil.rmtree(target, ignore_errors=True)
            else:
                _clear_pack(target)
            kept = f"; {out} still holds the old pack, untouched" if target != out else ""
            raise PackError(f"{out}: every one of the {len(report.skipped)} images was unreadable and skipped "
                            f"(--skip-bad): nothing packed{kept}; the first: {report.skipped[0]}")  # fmt: skip
        if target != out:
            _swap_in(target, out)
            report.path = out
    except (PackWriteError, OSError, __import__("lmdb").Error) as exc:
        # a full disk, a quota, a file size limit or an I/O error: what was committed stays
        if writer is not None:
            committed = writer.count
        elif part_lock is not None or target == out:  # what the part or OUT held as it was opened
            committed = existing.get("count", 0) if existing is not None and "replace" not in existing else 0
        else:  # the part could not be opened: what an earlier run left in it, if anything
            committed = _committed(target)
        if part_lock is not None and not committed and not written:
            shutil.rmtree(target, ignore_errors=True)  # a part with no sample in it: nothing worth its space
        raise _write_failure(exc, out, target, committed, overwrite=overwrite, written=written) from None
    except WorkerDied as exc:  # what was committed stays: the same command goes on from it
        committed = writer.count if writer is not None else 0
        raise PackError(f"{out}: {exc}; the {committed} samples committed stay: run {_again(out, target, overwrite)}"
                        ) from None  # fmt: skip
    finally:
        if part_lock is not None:
            part_lock.close()
        lock.close()
    return report


def _is_path(source) -> bool:
    """Whether a pack's recorded source is a path (or the paths of shards), not a dataset's fingerprint."""
    return isinstance(source, list) or (isinstance(source, str) and os.path.isabs(source))


_WHAT = {"source": "from another source", "source_samples": "from another number of source samples",
         "options": "with other options", "classes": "with other classes"}  # fmt: skip


def _names_damaged(target: Path, lo: int, hi: int, skipped: int, name_of: Callable[[int], str]) -> str | None:
    """What is wrong with the names an interrupted pack stored (None: they are the source's samples ``lo ..``, in
    order, ``skipped`` of them left out as bad): a name altered on disk would otherwise be finished under a fresh
    checksum, and the pack verify clean."""
    i = lo
    for k, name in enumerate(stored_names(target)):
        while i < hi and name_of(i) != name and i - lo - k < skipped:
            i += 1  # a sample skipped as bad: nothing stored for it
        if i >= hi or name_of(i) != name:
            return f"sample {k}'s stored name {name!r} is no source sample's in its place"
        i += 1
    return None


def _changed_after(ds: ImageDataset, lo: int, n: int, target: Path,
                   name_of: Callable[[int], str] | None = None, *, originals: bool = False,
                   committed: object = None) -> tuple[str, str, str] | None:  # fmt: skip
    """(path, its modification or status time, the pack's last commit) of the first source file of samples
    ``lo .. lo+n-1`` (a zip read in place: the archive) changed after the pack's last commit (data.mdb's time, or
    the time its metadata records, ``committed``, where earlier: a copy's file is as new as the copy):
    edited, or replaced by a file with an older modification time), None when none
    is: a file edited while the pack was interrupted. A file whose time moved but whose bytes are the ones its
    sample stores (``name_of(i)``: the name it was stored under) is the same file (``chmod``, ``touch``, a
    ``cp -p`` of the same bytes) and passes; ``originals``: the pack stores every image's own bytes, so other
    bytes are another file, not only a ``chmod``. An edit during the run, before the last commit, is not seen here."""
    try:
        data = os.stat(target / "data.mdb")
    except OSError:
        return None
    since = data.st_mtime_ns
    if isinstance(committed, int) and not isinstance(committed, bool) and 0 < committed < since:
        # the pack copied since (cp -r, to another disk, or a backup restored over it): its file's time is the
        # copy's, later than the edits; the commit's own (on the file system's clock, as the writer measured it)
        since = committed
    archive = getattr(ds, "zip", None)
    if archive is not None:
        paths: Iterable[str] = [archive.path]
    elif _local_files(ds):
        paths = (ds.name(i) for i in range(lo, min(lo + n, len(ds))))
    else:
        return None
    stored: dict[str, tuple[int, int]] | None = None  # the pack's (crc32, nbytes) by name, read when first needed
    compared = ""  # "other": its bytes differ from the sample's; "re-encoded": the sample's cannot be compared
    for k, path in enumerate(paths):
        try:
            st = os.stat(path)
            own = os.lstat(path)  # a link: its own times too (re-pointed with `ln -sf` at an older file)
        except OSError:
            continue  # gone: the names' checksum says so
        # the status time too: a file replaced by `cp -p`, `mv`, `rsync -a`, `tar x` or a re-download with
        # `curl -R` carries an older modification time, but its status time is when it was put there
        mtime = max(st.st_mtime_ns, st.st_ctime_ns, own.st_mtime_ns, own.st_ctime_ns)
        later = _after(mtime, since)
        if later and name_of is not None:
            if stored is None:
                stored = stored_values(target)
            if archive is None:
                verdict = _compare(stored.get(name_of(lo + k)), partial(_read_file, path))
            else:  # the archive: every member packed so far, compared until one differs (none packed: the same)
                verdict = "same"
                for i in range(lo, min(lo + n, len(ds))):
                    verdict = _compare(stored.get(name_of(i)), partial(ds.read, i))
                    if verdict != "same":
                        break
            if verdict == "same":
                continue  # its time moved, its bytes did not
            compared = ("other" if originals else "re-encoded") if verdict == "differs" else ""
        if later:

            def stamp(ns: int) -> str:
                return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns // 10**9)) + f".{ns % 10**9 // 10**6:03d}"

            if _after(st.st_mtime_ns, since):
                how = "modified"
                if max(st.st_mtime_ns, st.st_ctime_ns) <= since:  # only because its times are whole seconds
                    how = ("modified at a time its file system keeps in whole seconds, which may stand for up to 2 s "
                           "later: perhaps after the last commit")  # fmt: skip
            elif compared == "other":
                how = "its status changed: replaced or moved, by other bytes than it packed"
            elif compared == "re-encoded":
                how = ("its status changed: replaced or moved, or only its permissions or owner changed, which the "
                       "pack cannot tell apart for an image it stores re-encoded")  # fmt: skip
            else:  # a sample skipped as bad (nothing stored), or a source that cannot be read now
                how = ("its status changed: replaced or moved, or only its permissions or owner changed, which the "
                       "pack cannot tell apart where it stores no bytes of it to compare")  # fmt: skip
            return path, f"{how}, {stamp(mtime)}", stamp(since)
    return None


def _after(t: int, since: int) -> bool:
    """Whether a file time ``t`` may be later than ``since``: a time in whole seconds (FAT keeps even seconds,
    exFAT whole ones: a USB disk's files) stands for any moment up to 2 s after it, so one edited in the second of
    the last commit, or the next, is not taken for older."""
    return t > since or (t % 10**9 == 0 and t + 2 * 10**9 > since)


_SPOT_ENCODED = 32  # re-encoded samples a resume prepares again (each a decode and an encode) to compare
_SPOT_ORIGINAL = 1024  # samples stored as their own bytes a resume reads again (a read and a CRC-32 each)


def _source_changed(ds: ImageDataset, lo: int, existing: dict, target: Path, name_of: Callable[[int], str],
                    max_size: int | None, quality: int, identity: list[int] | None,
                    times: bool = True) -> str | None:  # fmt: skip
    """Why the samples a pack (or an --overwrite part) holds are no longer its source's, or None: a file
    modified or replaced since the last commit (its times), or samples read again whose bytes differ from
    those stored (a source swapped whole for another of the same names, which keeps older times)."""
    n = existing["count"] + len(existing.get("skipped", []))
    changed = (_changed_after(ds, lo, n, target, name_of, originals=not (existing.get("options") or {}).get("max_size"),
                              committed=existing.get("committed_ns")) if times else None)  # fmt: skip
    if changed is not None:  # edited since its samples were read: the pack would mix old and new bytes
        path, when, last = changed
        return f"{path} changed after its samples were packed ({when}; the pack's last commit {last})"
    was = existing.get("source_id")
    if was is not None and was != identity:  # identity: _source_identity(ds), read once
        # the folder (or archive) itself is another one than the pack began from: `mv data_v2 data`, a copy put in
        # its place, whose files keep older times; every sample packed is read again, not a spread of them (with
        # --max-size each is shrunk and encoded again to be compared: as long as packing them, and only then)
        other = _spot_check(ds, lo, n, target, name_of, max_size, quality, every=True)
    else:
        other = _spot_check(ds, lo, n, target, name_of, max_size, quality)
    if other is not None:
        hint = (" or the pack was begun by another version of datakit or OpenCV, which re-encodes otherwise"
                if max_size else "")  # fmt: skip
        return (f"{other} gives other bytes than the pack stores for it: the source changed after its samples were "
                f"packed (another folder, archive or pack put in its place?{hint})")  # fmt: skip
    return None


def _source_identity(ds: ImageDataset) -> list[int] | None:
    """[device, inode, CRC-32 of the device and inode of every folder that holds its files] of the folder a
    dataset's files are read from ([device, inode, 0] of an archive read in place); None for another source. A
    folder put in place of another (the whole source, or one class folder of it) changes it."""
    readers = getattr(ds, "readers", None)
    if isinstance(readers, list) and readers and all(isinstance(getattr(r, "meta", None), dict) for r in readers):
        # packs (a re-pack, shards joined): each one's making and contents; one packed again (--overwrite) in its
        # place changes them, though its names stay
        crc = 0
        for r in readers:
            m = r.meta
            crc = zlib.crc32(f"{m.get('created')}\0{m.get('index_crc32')}\0{m.get('count')}\n".encode(), crc)
        return [0, 0, crc]
    archive = getattr(ds, "zip", None)
    root = archive.path if archive is not None else getattr(ds, "root", None) if _local_files(ds) else None
    try:
        st = os.stat(root) if root is not None else None
        if st is None:
            return None
        if archive is not None:
            return [st.st_dev, st.st_ino, 0]
    except (OSError, TypeError, ValueError):
        return None
    crc = 0
    for d in sorted({posixpath.dirname(f.replace("\\", "/")) for f in ds.files}):
        try:
            sd = os.stat(os.path.join(root, d)) if d else st
            seen = f"{sd.st_dev}\0{sd.st_ino}"
        except (OSError, ValueError):  # a folder gone or unreadable: its files are skipped, said as bad
            seen = "missing"
        crc = zlib.crc32(f"{d}\0{seen}\n".encode("utf-8", "surrogateescape"), crc)
    return [st.st_dev, st.st_ino, crc]


def _spot_check(ds: ImageDataset, lo: int, n: int, target: Path, name_of: Callable[[int], str],
                max_size: int | None, quality: int, every: bool = False) -> str | None:  # fmt: skip
    """The name of the first of the samples spread over ``lo .. lo+n-1`` (the last one packed among them)
    whose bytes differ from the (crc32, nbytes) the pack stores; None when they all match. Stored as their
    own bytes, up to 1024 are read again (a read and a CRC-32 each: a source of which 1% changed slips
    through 1 time in 30000); re-encoded (``max_size``), 32 are prepared again as they were for the pack.
    A source swapped whole for another of the same names (``mv data_v2 data``, a zip or a pack rebuilt)
    keeps its files' times older than the pack's; only its bytes tell."""
    hi = min(lo + n, len(ds))
    if hi <= lo:
        return None
    twice: set[str] = set()
    stored = stored_values(target, twice)
    k = _SPOT_ENCODED if max_size else min(_SPOT_ORIGINAL, max(_SPOT_ENCODED, (hi - lo) // 8))
    picks = range(lo, hi) if every else sorted({lo + (hi - 1 - lo) * j // max(1, k - 1) for j in range(k)})
    for i in picks:
        name = name_of(i)
        value = stored.get(name)
        if value is None or name in twice:  # skipped as bad (nothing stored), or a name two samples share
            continue
        if max_size:
            got = _prepare(ds, i, max_size, quality)
            if got[1] is None:  # unreadable now: the pack goes on, and says so when it reaches it, if ever
                continue
            if (got[6], len(got[1])) != value:
                return ds.name(i)
        elif _compare(value, partial(ds.read, i)) == "differs":  # "": unreadable now, said when the pack reaches it
            return ds.name(i)
    return None


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _compare(value: tuple[int, int] | None, read: Callable[[], bytes]) -> str:
    """``"same"`` where ``read()`` gives exactly the bytes (crc32, nbytes) ``value`` a pack stores, "differs" where
    it gives others (another file, or an image the pack stores re-encoded), "" where there is nothing to compare
    (the pack stores no sample of that name: skipped) or the source cannot be read."""
    if value is None:
        return ""
    try:
        data = read()
    except Exception:  # gone, unreadable, a member no longer in the archive: not the bytes packed
        return ""
    return "same" if len(data) == value[1] and zlib.crc32(data) == value[0] else "differs"


def _committed(path: Path) -> int:
    """The samples a pack holds by its metadata, 0 where it cannot be read."""
    try:
        return int((read_meta(path) or {}).get("count", 0))
    except (PackError, OSError, ValueError):
        return 0


def _again(out: Path, target: Path, overwrite: bool, more: str = "") -> str:
    """The command that goes on from the samples a failed pack job committed into ``target``; ``more``: options
    it adds (``--skip-bad``)."""
    if target != out:  # it resumes the part it left beside OUT
        return "the same --overwrite command" + (f" with {more}" if more else "")
    flags = " ".join(["--resume", *([more] if more else [])])
    return f"the same command with {flags}" + (" in place of --overwrite" if overwrite else "")


def _bad_advice(out: Path, target: Path, overwrite: bool, committed: int, gone: int = 0) -> str:
    """What is true of OUT once bad images stopped a pack job, and the commands that go on from there: with the
    images fixed, or leaving them out (``--skip-bad``). An ``--overwrite`` builds the new pack beside OUT
    (``target``): OUT holds the old one, and the new samples take room in the part until it is deleted.
    ``gone``: files of a class folder that went while it was packed; without them the folder has another number
    of samples, which a resumed pack refuses: they are put back, or the folder packed again as it is now."""
    fixed, left_out = _again(out, target, overwrite), _again(out, target, overwrite, "--skip-bad")
    samples = f"{committed} sample{'s' * (committed != 1)}"
    them = "them" if gone > 1 else "it"
    if gone and target == out:
        return (f"the pack holds the {samples} before the first; put {them} back and run {fixed}, or pack the folder "
                "as it is now with --overwrite")  # fmt: skip
    if gone:
        return (f"{out} still holds the old pack, untouched; the {samples.replace(' ', ' new ', 1)} before the first "
                f"are kept in {target}: put {them} back and run {fixed} to go on from them, or run it with the "
                "folder as it is now to pack that anew")  # fmt: skip
    if target == out:
        return (f"the pack holds the {samples} before the first; fix them and run {fixed}, or {left_out} to leave "
                "them out")  # fmt: skip
    return (f"{out} still holds the old pack, untouched; the {samples.replace(' ', ' new ', 1)} before the first are "
            f"kept in {target}: fix them and run {fixed} to go on from them, or {left_out} to leave them out, or "
            f"delete {target} to give its space back")  # fmt: skip


def _write_failure(exc: BaseException, out: Path, target: Path, committed: int, *, overwrite: bool,
                   written: bool) -> PackWriteError:  # fmt: skip
    """One line for a write that failed, saying what is true of OUT and what to run: an ``--overwrite`` builds
    the new pack beside OUT (``target``), so the old one is whole and ``--resume`` (of OUT) is not the way on.
    ``written``: every sample was written (what failed is classes.json or the swap)."""
    cause = exc.cause if isinstance(exc, PackWriteError) else exc
    sample = getattr(exc, "sample", None)
    if written:
        sample = None
    if target == out:
        advice = f"free space or fix the cause, then run {_again(out, target, overwrite)}"
        return PackWriteError(out, committed, cause, sample=sample, advice=advice)
    if written:
        return PackWriteError(out, committed, cause, what="putting the new pack in place",
                              advice=f"the new pack is complete in {target} and {out} still holds the old one: "
                              "fix the cause, then run the same --overwrite command again to swap them")  # fmt: skip
    if not target.exists():
        return PackWriteError(out, committed, cause, sample=sample, what="writing the new pack",
                              advice=f"{out} still holds the old pack, untouched: free space or fix the cause, "
                              "then run the same --overwrite command again")  # fmt: skip
    return PackWriteError(out, committed, cause, sample=sample, what="writing the new pack",
                          advice=f"{out} still holds the old pack, untouched; the {committed} new samples written so "
                          f"far are kept in {target}: free space (the old pack and the new one need room side by "
                          "side) or fix the cause, then run the same --overwrite command to go on from them, or "
                          f"delete {target} to give its space back")  # fmt: skip


def _part_path(out: Path) -> Path:
    """Where ``--overwrite`` builds the pack that replaces ``out``: a hidden folder beside it."""
    return out.parent / f".{out.name}.overwrite-part"


def _old_path(out: Path) -> Path:
    """Where the pack ``--overwrite`` replaced waits to be removed."""
    return out.parent / f".{out.name}.overwrite-old"


def _clear_old(out: Path) -> None:
    """Remove the old pack a run killed after its swap left at :func:`_old_path` (marked ``SWAPPED_OUT``, or some of
    a pack's files left by a run killed while it removed them); a folder of that name holding anything else is not
    this command's to delete: refused, naming it."""
    old = _old_path(out)
    if not os.path.lexists(old):
        return
    entries = {e.name for e in os.scandir(old)} if old.is_dir() and not old.is_symlink() else None
    # a pack's files alone, marked or not: a run killed while it removed them (before its marker went last) left
    # some of them unmarked
    if entries is None or not entries <= PACK_FILES:
        raise UsageError(f"{old}: exists and is not a pack that pack-lmdb --overwrite put aside (it puts the pack it "
                         "replaces there until it is removed); not touching it: move it away")  # fmt: skip
    _remove_marked(old)


def _remove_marked(folder: Path) -> None:
    """Remove the old pack in ``folder``, its ``SWAPPED_OUT`` marker last: a run killed half-way leaves the folder
    still marked as one to remove (removed in any order, it could be left unmarked, and refused ever after)."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for e in sorted(entries, key=lambda e: e.name == SWAPPED_OUT):
        try:
            if e.is_dir(follow_symlinks=False):
                shutil.rmtree(e.path, ignore_errors=True)
            else:
                os.unlink(e.path)
        except OSError:
            pass
    try:
        folder.rmdir()
    except OSError:
        pass


def _swap_in(part: Path, out: Path) -> None:
    """Put the complete pack ``part`` in place of ``out`` in one step (Linux ``renameat2`` with
    ``RENAME_EXCHANGE``: ``out`` is the old pack or the new one at every moment), then remove the
    old one; where the kernel cannot exchange, two renames. The old pack is marked first, so that a
    run killed after the exchange, before the old pack is gone, leaves at the part's place a pack that
    the same command run again removes rather than takes for the new one (and swaps back)."""
    close_pack(out)
    close_pack(part)
    old = _old_path(out)
    _clear_old(out)
    added = sorted({e.name for e in os.scandir(out)} - PACK_FILES)
    if added:  # put in OUT while the new pack was built: the old pack's folder is removed below, with them
        shown = ", ".join(added[:3]) + (", ..." if len(added) > 3 else "")
        raise UsageError(f"{out}: {shown} put in it while the new pack was built; not replacing it, so as not to "
                         f"delete them: the new pack is complete in {part}: move them out of {out} and run the same "
                         "command again to put it in place")  # fmt: skip
    marker = out / SWAPPED_OUT
    marker.touch()
    if _exchange(part, out):
        try:
            os.rename(part, old)  # out of the part's place at once: what a rerun would resume
            part = old
        except OSError:
            pass
    else:
        os.rename(out, old)
        try:
            os.rename(part, out)
        except OSError:
            os.rename(old, out)  # OUT holds the old pack again, as the error says
            marker.unlink(missing_ok=True)
            raise
        part = old
    _remove_marked(part)


def _exchange(a: Path, b: Path) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _with_known(results: Iterable[Result], listed: list[int], known: dict[int, str], hi: int):
    """``results`` with the listed bad samples put back in index order, as failures."""
    k = 0
    try:
        for r in results:
            while k < len(listed) and listed[k] < r[0]:
                yield listed[k], None, 0, 0, 0, known[listed[k]], 0
                k += 1
            yield r
        for i in listed[k:]:
            yield i, None, 0, 0, 0, known[i], 0
    finally:
        close = getattr(results, "close", None)
        if close:
            close()  # the pool behind it, also when the caller stops early


def _known_bad(ds: ImageDataset, path: str | os.PathLike) -> dict[int, str]:
    """The samples a bad-samples file lists for this dataset (same size, same names), as skip lines."""
    from datakit.sources import read_bad_samples, recorded_name

    data = read_bad_samples(path)
    if data.get("samples") != len(ds):
        raise UsageError(f"{path}: lists samples of a dataset of {data.get('samples')}, this one has {len(ds)}")
    known = {}
    for e in data["bad"]:
        i = e["index"]
        if not (0 <= i < len(ds) and same_sample_name(ds.name(i), e["name"], e.get("cwd"))):
            raise UsageError(f"{path}: sample {i} is {recorded_name(e)} there, not in this dataset; another "
                             "source?")  # fmt: skip
        known[i] = f"{e['name']}: {e['reason']} (listed in {path})"
    return known


def _fill(writer: LmdbWriter, ds: ImageDataset, lo: int, hi: int, workers: int | None, max_size: int | None,
          quality: int, skip_bad: bool, sids: np.ndarray | None, name_of: Callable[[int], str], progress,
          known: dict[int, str] | None = None, *, advice: Callable[[int, int], str]) -> PackReport:  # fmt: skip
    """Read, validate and write source samples ``lo .. hi-1`` from where the pack stands; ``sids``: each source
    sample's split id in the pack's splits (None: the pack records none); ``name_of(i)``: the name it stores;
    ``advice(committed, gone)``: what stays and the commands that go on, when bad images stop the job."""
    start = writer.count
    report = PackReport(writer.path, 0, resumed_from=start, skipped=list(writer.meta["skipped"]))
    first = lo + start + len(report.skipped)
    t0 = time.perf_counter()
    bad: list[str] = []
    local = _local_files(ds)
    # plain JPEG files are read and validated by threads of this process (the decoder and the reads release
    # the GIL): no worker processes to start, no bytes through a pipe and none read twice. Other images take
    # check's strict decode, which captures the C libraries' messages from fd 2, one decode at a time per
    # process: in processes of their own, they decode in parallel and nothing else writes to their fd 2
    threads = local and region_decoder_available() and _jpeg_names(ds.files)
    work = partial(_prepare, max_size=max_size, quality=quality)
    known = known or {}
    listed = sorted(i for i in known if first <= i < hi)  # skipped in order, without being read
    todo = [i for i in range(first, hi) if i not in known]
    results: Iterable[Result] = map_ordered(work, todo, workers=workers, dataset=ds, per_worker=16, threads=threads)
    results = _with_known(results, listed, known, hi)
    done, stop = [first], threading.Event()
    where = getattr(ds, "where", None)
    table_ds = ds if isinstance(ds, TableDataset) else None
    folder, gone = local and table_ds is None, 0  # a class folder's scan: its files gone change the samples
    if local and hasattr(os, "posix_fadvise"):
        threading.Thread(target=_read_ahead, args=(ds, first, hi, done, stop), daemon=True).start()
    try:
        for i, value, h, w, nin, err, crc in results:
            done[0] = i
            if err is not None:
                missing = _missing_line(table_ds, i) if table_ds is not None and i not in known else None
                if missing is not None:
                    err = missing  # a file the table names that is not there (or a folder): check's line for it
                elif folder and not os.path.lexists(ds.name(i)):  # listed by the scan, gone from the folder since
                    err = f"missing: {ds.name(i)} (gone from the folder while it was packed)"
                    gone += 1
                elif where is not None:
                    err = f"{err} ({where(i)})"  # the table's sheet and row, as check names them
                if skip_bad:
                    report.skipped.append(err)
                    writer.meta["skipped"] = list(report.skipped)
                    continue
                bad.append(err)
            if bad:
                continue  # keep reading to name every bad image, but write nothing past the first
            writer.add(value, int(ds.targets[i]), h, w, name_of(i), int(sids[i]) if sids is not None else 0, crc)
            report.bytes_in += nin
            report.bytes_out += len(value)
            if progress:
                progress(i + 1 - lo, hi - lo, report.bytes_out)
    finally:
        stop.set()
        close = getattr(results, "close", None)
        if close:
            close()
    if bad:
        writer.commit()
        raise PackError(f"{_tally(bad)} ({advice(writer.count, gone)}):\n" + "\n".join(bad))
    writer.finish(skipped=report.skipped)
    report.count = writer.count
    report.seconds = time.perf_counter() - t0
    return report
