"""Entropy indexes of JPEGs kept on disk, shared by every worker and reused from epoch to epoch.

An index (:func:`datakit.io.jpeg_entropy_index`) lets a random crop be decoded from the MCUs
around it alone, but building one reads the whole file once. ``train_pipeline(...,
index_cache=DIR)`` builds each image's index the first time the image is read, in whichever
worker reads it, and stores it in an LMDB environment in ``DIR``; every later epoch (and every
later run with the same folder) decodes its crops with it.

Entries are keyed by the sample's name, its byte length and the CRC-32 of its bytes, so a file
changed in place gets a new entry, never the old one's index; each entry carries the CRC-32 of
the index itself, and a damaged one is built again. An image no index covers (progressive,
restart markers, ...) is remembered as such and decoded the ordinary way. A cache that cannot be
opened or written says so once per process and the pipeline goes on without it: the cache
changes the speed, not the pixels, short of a file crafted to match another's length, CRC-32 and
scan ends (checksums, not a cryptographic hash: docs/loader.md).
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import warnings
import zlib
from pathlib import Path

from datakit.errors import ImageDecodeError, PackError
from datakit.io import jpeg_entropy_index
from datakit.lmdb import _free_bytes as lmdb_free_bytes
from datakit.lmdb import lock_needs_room

MARKER = "INDEX_CACHE"  # the file that makes a folder one of these caches
_MAP_SIZE = 1 << 40  # address space only: the data file grows as entries are written
_BROKEN: set[str] = set()  # caches this process gave up on (said once)


class IndexCache:
    """The entropy indexes of the JPEGs a pipeline reads, in the LMDB environment at ``path``.

    Created (with its parents) here, in the process that builds the pipeline, so that a path
    that cannot be written fails at once; opened lazily in each process that reads, so it
    pickles as its path and survives both fork and spawn workers.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.path.abspath(os.fspath(path))
        p = Path(self.path)
        if p.exists() and not p.is_dir():
            raise ValueError(f"index_cache {self.path}: exists and is not a folder")
        if p.is_dir() and any(p.iterdir()) and not (p / MARKER).is_file():
            # an LMDB pack, a dataset, anything else: never written into
            raise ValueError(f"index_cache {self.path}: a folder with other files in it and no {MARKER}; "
                             "give an empty or new folder")  # fmt: skip
        try:
            p.mkdir(parents=True, exist_ok=True)
            if not (p / MARKER).is_file():
                tmp = p / f".{MARKER}.{os.getpid()}"
                tmp.write_text("datakit entropy-index cache, format 1: delete this folder to reset it\n")
                os.replace(tmp, p / MARKER)
        except OSError as e:
            raise ValueError(f"index_cache {self.path}: cannot create it ({e.strerror})") from None
        if not os.access(self.path, os.W_OK | os.X_OK):
            raise ValueError(f"index_cache {self.path}: not writable")
        free = _free_bytes(self.path)
        fresh = lock_needs_room(self.path)  # a cache made before needs no more room to be read
        if fresh and free is not None and free < _MIN_FREE:  # its marker fitted; the LMDB files would not (see _env)
            raise ValueError(f"index_cache {self.path}: its disk is full ({free} bytes free); free some space there, "
                             "or give a folder on another disk")  # fmt: skip

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.path = state["path"]

    def __repr__(self) -> str:
        return f"IndexCache({self.path!r})"

    def _env(self):
        from datakit.lmdb import process_env

        def opener():
            import lmdb

            from datakit.lmdb import check_data_file

            free = _free_bytes(self.path)
            if lock_needs_room(self.path) and free is not None and free < _MIN_FREE:
                # liblmdb maps a new lock file (or one a size limit left empty) it cannot get disk space for: the
                # first page written is a SIGBUS, the process dead without a word
                raise PackError(f"its disk is full ({free} bytes free)")
            if os.path.lexists(os.path.join(self.path, "data.mdb")):
                # a cache cut short (a copy, a full disk) or with a damaged page would make liblmdb read past the
                # file's end: SIGBUS, the process (every worker) dead without a word. Refused as a pack is
                check_data_file(self.path)
            env = lmdb.open(os.fsencode(self.path), map_size=_MAP_SIZE, subdir=True, sync=False, readahead=False,
                            meminit=False, max_readers=1024, max_dbs=0)  # fmt: skip
            env.reader_check()  # slots of readers killed while reading
            return env

        return process_env(os.path.realpath(self.path), opener)

    def _give_up(self, doing: str, exc: BaseException) -> None:
        if self.path not in _BROKEN:
            _BROKEN.add(self.path)
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            msg = re.split(r"; (?:run `datakit verify|copy (?:it|the pack) again)", msg)[0]  # a pack's advice: not here
            warnings.warn(
                f"index_cache {self.path}: {doing} failed ({type(exc).__name__}: {msg}); going on without it "
                "(the same pixels, decoded without the index); delete the folder to start it afresh",
                RuntimeWarning,
                stacklevel=3,
            )

    def index(self, data: bytes, name: str | os.PathLike | None = None) -> bytes | None:
        """``data``'s entropy index: from the cache, else built now and stored. None when no index
        covers this JPEG or the cache is unusable in this process."""
        if self.path in _BROKEN:
            return None
        import lmdb

        key = _key(data, name)
        try:
            env = self._env()
            with env.begin() as txn:
                value = txn.get(key)
        except (lmdb.Error, PackError) as e:  # PackError: its data file damaged (check_data_file)
            self._give_up("reading", e)
            return None
        if value is not None:
            if not value:
                return None  # known: no index covers it
            if _valid(value):  # else damaged: built again below
                return bytes(value[4:])
        try:
            index = jpeg_entropy_index(data)
        except ImageDecodeError:
            return None  # over the pixel budget: the decoder refuses it next, naming the file
        value = b"" if index is None else struct.pack("<I", zlib.crc32(index)) + index
        try:
            with env.begin(write=True) as txn:
                txn.put(key, value)
        except lmdb.Error as e:
            self._give_up("writing", e)
        return index


_MIN_FREE = 1 << 20  # bytes: a new cache's lock and first pages, with room to spare


def _free_bytes(path: str) -> int | None:
    """The bytes this process may still write on ``path``'s file system, as a pack's writer counts them (root of
    the machine also those reserved for it; None where not known)."""
    return lmdb_free_bytes(path)


def _valid(value: bytes) -> bool:
    return len(value) > 4 and struct.unpack_from("<I", value)[0] == zlib.crc32(memoryview(value)[4:])


def _key(data: bytes, name: str | os.PathLike | None) -> bytes:
    who = os.fspath(name).encode("utf-8", "surrogateescape") if name is not None else b""
    return hashlib.sha1(who).digest()[:16] + struct.pack("<QI", len(data), zlib.crc32(data))
