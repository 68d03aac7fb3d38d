"""The packed format: samples in one LMDB environment, written with checksums, read lazily per process.

Values are encoded image bytes, never decoded pixels and never pickles. Targets, sizes and
checksums are fixed binary records; metadata is JSON that carries its own checksum. This module
is the format only (writer, reader, verify, info); :mod:`datakit.pack` is the job that fills a
pack from a dataset. The layout is documented in docs/lmdb-format.md.

Environments and transactions open lazily in the process that reads, and are closed before a
fork and forgotten in the child: with py-lmdb 2 and later, a file whose environment object is
alive in a process cannot be opened again in it, and a forked child inherits the parent's objects.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import struct
import sys
import threading
import time
import traceback
import weakref
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import numpy as np

from datakit.errors import PackChangedError, PackError, UsageError
from datakit.labels import ClassMap

__all__ = [
    "FORMAT",
    "VERSION",
    "LmdbReader",
    "LmdbWriter",
    "PackError",
    "PackLock",
    "PackWriteError",
    "VerifyReport",
    "check_data_file",
    "close_pack",
    "lmdb_info",
    "read_meta",
    "verify_lmdb",
    "verify_pack",
]

FORMAT = "datakit-lmdb"
VERSION = 2
READABLE_VERSIONS = (1, 2)
META_KEY = b"__meta__"
INDEX_KEY = b"__index__"
LOCK_NAME = "pack.lock"
SWAPPED_OUT = ".swapped-out"  # marks the old pack that pack-lmdb --overwrite puts aside, to be removed
PACK_FILES = frozenset({"data.mdb", "lock.mdb", "classes.json", ".classes.json.tmp", LOCK_NAME, SWAPPED_OUT})
# one record per sample: target, height, width, crc32 of the value, split id, value length
RECORD = np.dtype([("target", "<i8"), ("height", "<u4"), ("width", "<u4"), ("crc32", "<u4"), ("split", "<u2"),
                   ("_pad", "<u2"), ("nbytes", "<u8")])  # fmt: skip
_RECORD_STRUCT = struct.Struct("<qIIIHHQ")  # RECORD, packed without numpy's per-element cost
INITIAL_MAP_SIZE = 64 << 20


def _image_key(i: int) -> bytes:
    return b"i%010d" % i


def _record_key(i: int) -> bytes:
    return b"r%010d" % i


def _name_key(i: int) -> bytes:
    return b"n%010d" % i


def names_crc32(txn, count: int) -> int:
    """The CRC-32 of samples 0 .. count-1's stored names, each as its 4-byte little-endian length
    then its bytes (a missing name counts as length 0xFFFFFFFF): what ``names_crc32`` records."""
    crc = 0
    for i in range(count):
        raw = txn.get(_name_key(i))
        crc = zlib.crc32(struct.pack("<I", 0xFFFFFFFF if raw is None else len(raw)) + (raw or b""), crc)
    return crc


def _lmdb():
    import lmdb

    return lmdb


# ---------------------------------------------------------------------------------------------
# errors and the data file's own header


@contextmanager
def _lmdb_errors(path: str | os.PathLike, doing: str = "reading") -> Iterator[None]:
    """Turn any py-lmdb error into one :class:`PackError` line naming the pack and what to do."""
    lmdb = _lmdb()
    try:
        yield
    except lmdb.Error as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "is already open in this process" in msg:  # py-lmdb's own refusal of a second environment: sound data
            raise PackError(
                f"{path}: the pack's LMDB environment is already open in this process outside datakit's readers "
                "(an lmdb.open() of your own, or an LmdbWriter not yet closed); close it before reading the pack "
                "with datakit"
            ) from None
        advice = (  # verify opens it the same way: pointing there would send the user round in a circle
            "copy it again (a copy cut short or a damaged disk leaves it so) or re-pack"
            if doing == "opening"
            else f"run `datakit verify {path}`, copy it again or re-pack"
        )
        raise PackError(f"{path}: {doing} the pack failed ({type(exc).__name__}: {msg}); {advice}") from None
    except PackError as exc:  # one said of the pack's real path (the environments are keyed so): the path given
        real, text = os.path.realpath(path), str(exc)
        if type(exc) is PackError and os.fspath(path) != real and text.startswith(f"{real}: "):
            raise PackError(f"{os.fspath(path)}: {text[len(real) + 2 :]}") from None
        raise


class PackWriteError(PackError):
    """Writing failed (a full disk, an I/O error); the ``committed`` samples before stay valid.

    ``cause``: the error the write met; ``sample``: (index, stored name) of the first sample the failed
    commit held, None where unknown (named in the message where given here). ``what`` and ``advice`` say it
    for a caller that knows more (``pack_lmdb --overwrite``, which writes beside the pack it replaces).
    """

    def __init__(self, path: str | os.PathLike, committed: int, exc: BaseException, *,
                 sample: tuple[int, str] | None = None, what: str = "writing",
                 advice: str | None = None) -> None:  # fmt: skip
        self.path, self.committed, self.cause, self.sample = Path(path), committed, exc, sample
        why = f"{type(exc).__name__}: {exc}"
        free = _free_bytes(path)
        if free is not None and free < 16 << 20 and "No space" not in why:
            why += f"; {free >> 10} KiB free on its disk"  # LMDB reports a full disk as an I/O error
        limit = _file_size_limit()
        if limit is not None and any(os.strerror(e) in why for e in (errno.EFBIG, errno.EIO)):
            why += f"; this process may write files of {limit} bytes at most (ulimit -f)"  # a short write is EIO
        at = f", at sample {sample[0]} ({sample[1]})" if sample is not None else ""
        advice = advice or "free space or fix the cause, then run the same command with --resume"
        super().__init__(f"{path}: {what} failed after {committed} committed samples ({why}){at}; {advice}")


def _file_size_limit() -> int | None:
    """The largest file this process may write (``RLIMIT_FSIZE``, ``ulimit -f``); None without a limit."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft


# the storage refusing a write: a full disk or quota, a file size limit, a read-only filesystem
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


def _no_room(exc: BaseException) -> bool:
    """Whether ``exc`` (an OSError, or a py-lmdb error, which carries the text alone) is the storage refusing
    a write (:data:`_NO_ROOM`), not a pack that cannot be read."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno in _NO_ROOM
    return any(os.strerror(e) in str(exc) for e in _NO_ROOM)


def _free_bytes(path: str | os.PathLike) -> int | None:
    """Bytes free to this user on the filesystem holding ``path`` (or its nearest existing parent)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except (OSError, AttributeError):
        return None
    if st.f_blocks == 0:  # a file system that reports no size (some FUSE ones): not known, not full
        return None
    return (st.f_bfree if reserved_room() else st.f_bavail) * st.f_frsize


def reserved_room() -> bool:
    """Whether this process may write the blocks a file system reserves for root (ext4's 5%): root of the machine,
    not root inside a user namespace (rootless containers, ``unshare -r``), whom the kernel does not give them."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False
    try:
        with open("/proc/self/uid_map", encoding="ascii") as f:
            return f.read().split() == ["0", "0", "4294967295"]  # the whole range, as the first namespace maps it
    except OSError:
        return False  # (not Linux, or /proc not mounted: not known, so not counted)


_LOCK_ROOM = 1 << 20  # bytes free that a new lock.mdb (its reader table) and a first commit need, with room to spare


def lock_needs_room(folder: str | os.PathLike) -> bool:
    """Whether opening the LMDB environment in ``folder`` with a lock may make liblmdb write blocks of its
    lock.mdb the disk has not given it: missing, left empty (a run under ``ulimit -f`` or on a full disk could not
    size it) or sized without a block. On a full disk the first write to such a page of its mapping is a SIGBUS, the
    process dead without a word; check the disk's room first."""
    try:
        st = os.stat(os.path.join(folder, "lock.mdb"))
    except FileNotFoundError:
        return True
    except OSError:
        return False
    # empty, or sized without a block (liblmdb sizes it with ftruncate, then writes its first page: a process that
    # died of this SIGBUS left it so); one written before has the pages its readers' slots are taken from
    return st.st_size == 0 or getattr(st, "st_blocks", 1) == 0


def lock_room_problem(folder: str | os.PathLike) -> str | None:
    """Why liblmdb cannot make ``folder``'s lock.mdb here (``its disk is full (N bytes free)``), or None."""
    if not lock_needs_room(folder):
        return None
    free = _free_bytes(folder)
    return f"its disk is full ({free} bytes free)" if free is not None and free < _LOCK_ROOM else None


_META_MAGIC = 0xBEEFC0DE
_P_META = 0x08  # a page header's flags on a meta page
_P_INVALID = (1 << 64) - 1  # the root of an empty B-tree
_MDB_INTEGERKEY = 0x08  # the free DB's flags
_MDB_DUPFIXED = 0x10
_DB_FLAGS = 0x7E  # every flag LMDB stores for a database (MDB_REVERSEKEY ... MDB_REVERSEDUP)
_PAGE_SIZES = (4096, 16384, 65536, 8192, 32768, 2048, 1024, 512)  # the most common first
# a page header, then MDB_meta: mm_magic, mm_version, mm_address, mm_mapsize, mm_dbs[2] (the free DB, the main DB:
# md_pad, md_flags, md_depth, then five counts and md_root), mm_last_pg, mm_txnid
_MDB_META = struct.Struct("<QHHHHIIQQ" + "IHHQQQQQ" * 2 + "QQ")


def _meta_page(head: bytes, off: int) -> dict | None:
    """The meta page at ``off`` (its header and ``MDB_meta``), or None where there is no LMDB magic number.

    The layout (lmdb.h / mdb.c, 64-bit): a 16-byte page header (mp_pgno, mp_pad, mp_flags, mp_lower, mp_upper),
    then mm_magic, mm_version (u32 each), mm_address, mm_mapsize (8 bytes each), mm_dbs[2] (48 bytes each; the
    free DB's md_pad holds the page size), mm_last_pg and mm_txnid (8 bytes each): 152 bytes.
    """
    if len(head) < off + _MDB_META.size:
        return None
    f = _MDB_META.unpack_from(head, off)
    if f[5] != _META_MAGIC:
        return None
    return {"pgno": f[0], "flags": f[2], "version": f[6], "mapsize": f[8], "psize": f[9], "free_flags": f[10],
            "free_root": f[16], "main_pad": f[17], "main_flags": f[18], "main_root": f[24], "last_pg": f[25],
            "txnid": f[26]}  # fmt: skip


def _header_problem(pack: Path, size: int, head: bytes) -> str | None:
    """What is wrong with ``data.mdb`` as its first bytes ``head`` and its ``size`` tell (None: nothing).

    LMDB keeps two meta pages and reads the one with the larger transaction id. Every commit writes
    the meta page of its id's parity with the id one above the other's, and the pages of a commit are written
    before its meta page, so in a whole file the two pages agree (page size, even and odd consecutive ids, the
    older using no more pages than the newer), each page fits its own map, and the file holds every page the newer
    one uses. A file shorter than that with a sound header is truncated; a header that breaks these rules is
    damaged (liblmdb would read a wrong snapshot, refuse it as "not an LMDB file", or map past the file's end).
    """
    p0 = struct.unpack_from("<I", head, 40)[0] if len(head) >= 44 else 0
    sizes = ([p0] if p0 in _PAGE_SIZES else []) + [p for p in _PAGE_SIZES if p != p0]
    at = next((p for p in sizes if _meta_page(head, p) is not None), None)  # meta page 1, even if page 0 lies
    psize = p0 if p0 in _PAGE_SIZES else at or 4096
    metas = [_meta_page(head, 0), _meta_page(head, at) if at else None]
    if size == 0 and _stopped_early(pack):  # created by pack-lmdb, stopped before anything was written
        return _STOPPED_EARLY.format(path=pack)
    if size < 2 * psize:
        return f"{pack}: truncated: {size} bytes, shorter than an LMDB header; copy it again or re-pack"
    if metas == [None, None]:
        return f"{pack}: data.mdb is not an LMDB file (no meta page); copy it again or re-pack"

    def damaged(why: str) -> str:
        return f"{pack}: the LMDB header of data.mdb is damaged ({why}); copy it again or re-pack"

    for k, m in enumerate(metas):
        if m is None:
            return damaged(f"meta page {k}: no LMDB magic number")
    m0, m1 = metas
    if (m0["version"], m1["version"]) != (1, 1):
        if m0["version"] == m1["version"]:
            return None  # another LMDB data version: its layout is not ours to parse; liblmdb checks it
        return damaged(f"data versions {m0['version']} and {m1['version']} on meta pages 0 and 1")
    for k, m in enumerate(metas):
        if m["pgno"] != k or m["flags"] != _P_META:
            return damaged(f"meta page {k}: its page header is damaged (page {m['pgno']}, flags {m['flags']:#x})")
    if m0["psize"] != m1["psize"]:
        return damaged(f"page sizes {m0['psize']} and {m1['psize']} on meta pages 0 and 1")
    if m0["psize"] not in _PAGE_SIZES or at != psize:
        return damaged(f"page size {m0['psize']} on both meta pages")
    t0, t1 = m0["txnid"], m1["txnid"]
    if (t0, t1) != (0, 0) and not (t0 % 2 == 0 and abs(t1 - t0) == 1):
        return damaged(f"transaction ids {t0} and {t1} on meta pages 0 and 1, not a pair LMDB writes")
    for k, m in enumerate(metas):
        pages = m["last_pg"] + 1
        if pages < 2 or pages * psize > m["mapsize"]:
            return damaged(f"meta page {k}: {pages} pages in use, more than its map of {m['mapsize']} bytes holds")
        for tree in ("main", "free"):
            root = m[f"{tree}_root"]
            if root != _P_INVALID and not 2 <= root < pages:
                return damaged(f"meta page {k}: the {tree} B-tree's root is page {root}, not one of its {pages}")
        if m["free_flags"] != _MDB_INTEGERKEY or m["main_flags"] & ~_DB_FLAGS:
            return damaged(f"meta page {k}: database flags {m['free_flags']:#x} and {m['main_flags']:#x}")
        if m["main_pad"] and not m["main_flags"] & _MDB_DUPFIXED:  # the size of fixed-size values, or 0
            return damaged(f"meta page {k}: the main database's md_pad is {m['main_pad']}")
    new = 1 if t1 > t0 else 0
    need, before = ((metas[k]["last_pg"] + 1) * psize for k in (new, 1 - new))
    if before > need:
        return damaged(f"meta page {1 - new}: {before // psize} pages in use, more than the newer meta page {new}'s "
                       f"{need // psize}")  # fmt: skip
    if size < need:
        if size % psize == 0 and size >= before:
            # a file cut at a page's boundary within the newest commit's pages looks like a newer page whose count
            # of pages was altered: say both
            return (f"{pack}: truncated, or its LMDB header damaged: data.mdb holds {size} of the {need} bytes its "
                    "header says are in use; copy it again or re-pack")  # fmt: skip
        return f"{pack}: truncated: {size} of {need} bytes; copy it again or re-pack"
    return None


_SOUND: set[tuple[int, int, int, int]] = set()  # data.mdb files (device, inode, size, mtime) whose tree passed
_TREE_CHECK = True  # off in verify's reader, a child process that survives liblmdb's crashes and counts what it read


def _tree_problem(data: Path) -> str | None:
    """:func:`datakit.lmdbpages.tree_problem` of a data.mdb, None where it cannot be read or mapped here."""
    from datakit.lmdbpages import tree_problem

    try:
        return tree_problem(data)
    except (OSError, ValueError):
        return None


def _damaged_pages(pack: Path, problem: str) -> str:
    from datakit.lmdbpages import NAMED_DATABASES

    if problem == NAMED_DATABASES:
        return f"{pack}: not a datakit pack (an LMDB environment with named databases, which a datakit pack never has)"
    return (f"{pack}: damaged LMDB data ({problem}); copy the pack again (a copy cut short or a damaged disk leaves "
            "it so) or re-pack")  # fmt: skip


def _check_tree(pack: Path, data: Path) -> None:
    """Refuse a data.mdb whose B-tree pages would send liblmdb outside the file (lmdbpages.py), once per file
    version in this process and the processes it forks. A pack written meanwhile is not judged on pages a
    commit was moving."""

    def version() -> tuple[int, int, int, int] | None:
        try:
            st = os.stat(data)
        except OSError:
            return None
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns

    before = version()
    if before is None or before in _SOUND or not _TREE_CHECK:
        return
    problem = _tree_problem(data)  # None too where unreadable or unmappable here: liblmdb's own open says so
    if version() != before:
        return  # a writer committed while the pages were read
    if problem is not None:
        raise PackError(_damaged_pages(pack, problem))
    _SOUND.add(before)


def check_data_file(path: str | os.PathLike) -> None:
    """Refuse a ``data.mdb`` whose LMDB header (its two meta pages) is damaged, or that is shorter than what its
    header says is in use, before it is mapped.

    Mapping a truncated file and reading past its end kills the process with SIGBUS, with no
    message, and a damaged header makes liblmdb read an older snapshot, map past the file's end
    or call it "not an LMDB file"; this reads the two meta pages at the start of the file instead.
    """
    pack = Path(path)
    data = pack / "data.mdb"
    for attempt in range(2):
        try:
            with open(data, "rb") as f:
                head = f.read(max(_PAGE_SIZES) + _MDB_META.size)
                size = os.fstat(f.fileno()).st_size  # after the read: a writer grows the file before its meta page
        except OSError as exc:
            raise PackError(f"{pack}: cannot read data.mdb ({exc.strerror or exc})") from None
        problem = _header_problem(pack, size, head)
        if problem is None:
            _check_tree(pack, data)
            return
        if attempt == 0:
            time.sleep(0.05)  # a pack being written: a meta page read while a commit rewrote it; read it again
    raise PackError(problem)


# ---------------------------------------------------------------------------------------------
# environments per process, safe across fork


_ENVS: dict[str, object] = {}
_TXNS: dict[str, object] = {}
_ENV_IDS: dict[str, tuple] = {}  # each environment's data.mdb (device, inode) and the pack's creation
# each environment's data.mdb: a descriptor of it, its size when opened, and its modification time for a complete pack
_SIZES: dict[str, tuple[int, int, int | None]] = {}
_LOCK = threading.RLock()
_PID = os.getpid()
# the readers alive in this process per pack folder: once the last is gone, the environment (its mapping and
# descriptors) is closed, so that dropped datasets do not hold packs open (nor a deleted pack's disk space). The
# close waits for the next read or open (a finalizer may run in the middle of a read), and the packs left last stay
# open, up to _KEPT of them, until others are left: a pool's worker gets a copy of the dataset (of every shard)
# with every task.
_USERS: dict[str, int] = {}
_IDLE: list[str] = []  # packs left without a reader, in the order they were left
_KEPT = 32


def _hold(reader: LmdbReader) -> None:
    """Count ``reader`` as a user of its pack's environment in this process until it is collected."""
    with _LOCK:
        _USERS[reader._key] = _USERS.get(reader._key, 0) + 1
        _settle(opening=reader._key not in _ENVS)  # (a pack kept open is read on, nothing opened: no check)
    weakref.finalize(reader, _release, reader._key, os.getpid())


def _release(key: str, pid: int) -> None:
    if os.getpid() != pid:  # a reader inherited through fork: the parent's count
        return
    with _LOCK:  # (counts only: the environment is closed later, by _settle)
        left = _USERS.get(key, 0) - 1
        if left > 0:
            _USERS[key] = left
        else:
            _USERS.pop(key, None)
            _IDLE.append(key)


def _settle(opening: bool = False) -> None:
    """Close the environments of packs left without a reader, but the ``_KEPT`` left last; those too when
    ``opening`` (a reader being made) finds their data.mdb deleted or replaced: py-lmdb knows environments by
    their files' inodes, and a new pack's file may get the inode a deleted one's lock.mdb had."""
    if not _IDLE or (len(_IDLE) <= _KEPT and not opening):
        return
    with _LOCK:
        idle = list(dict.fromkeys(k for k in _IDLE if not _USERS.get(k)))  # (one read again since: in use)
        keep = idle[-_KEPT:]
        if opening:
            keep = [k for k in keep if (ident := _identity(k)) is not None and ident == _ENV_IDS.get(k, (0,))[0]]
        _IDLE[:] = keep
        for key in idle:
            if key not in keep:
                _close_env(key)


def _close_all() -> None:
    """Before a fork: close this process's read environments so the child inherits none."""
    _LOCK.acquire()
    try:
        if os.getpid() == _PID:
            for txn in _TXNS.values():
                try:
                    txn.abort()
                except Exception:  # noqa: BLE001 - an invalidated transaction is already gone
                    pass
            for env in _ENVS.values():
                env.close()
            for fd, *_ in _SIZES.values():
                os.close(fd)
        _TXNS.clear()
        _ENVS.clear()
        _ENV_IDS.clear()
        _SIZES.clear()
        _IDLE.clear()
    finally:
        _LOCK.release()


def _forget_all() -> None:
    """In a forked child: drop whatever was inherited without touching it, and reset the lock."""
    global _PID, _LOCK
    _TXNS.clear()
    _ENVS.clear()
    _ENV_IDS.clear()
    _SIZES.clear()  # (the parent's descriptors: close-on-exec, left to it)
    _USERS.clear()  # (readers made here count from now on)
    _IDLE.clear()
    _PID = os.getpid()
    _LOCK = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_close_all, after_in_child=_forget_all)


def process_env(key: str, opener: Callable[[], object]):
    """This process's LMDB environment of folder ``key``, opened with ``opener`` on first use;
    closed before a fork and never used by the forked child, which opens its own."""
    if os.getpid() != _PID:  # fork without the hooks (os.fork from C): nothing inherited is used
        _forget_all()
    env = _ENVS.get(key)
    if env is None:
        with _LOCK:
            env = _ENVS.get(key)
            if env is None:
                env = _ENVS[key] = opener()
    return env


def _open_env(key: str, live: bool):
    """The read environment of pack folder ``key`` in this process (opened on first use)."""

    def opener():
        check_data_file(key)
        ident = _identity(key)
        # (a lock.mdb left empty, on a full disk: read without the reader table, no writer being there to mind it)
        lock = live and os.access(os.path.join(key, "lock.mdb"), os.W_OK) and lock_room_problem(key) is None
        with _lmdb_errors(key, "opening"):
            # a pack still being written is read with LMDB's reader table, so the writer does not
            # reuse pages a reader still sees; a finished pack needs no lock (and may be read-only)
            env = _lmdb().open(os.fsencode(key), readonly=True, lock=lock, readahead=False, meminit=False, subdir=True,
                               max_readers=1024, create=False)  # fmt: skip
            with env.begin(buffers=False) as txn:
                _ENV_IDS[key] = (ident, _creation(txn.get(META_KEY)))
        try:
            fd = os.open(os.path.join(key, "data.mdb"), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            st = os.fstat(fd)
            _SIZES[key] = (fd, st.st_size, None if live else st.st_mtime_ns)  # (one being written changes)
        except OSError:
            pass  # (the environment opened it: a file gone since only loses this check)
        return env

    return process_env(key, opener)


def _txn(key: str, live: bool):
    """A read transaction on ``key``, kept per process: beginning one costs more than a read."""
    _settle()
    txn = _TXNS.get(key)
    if txn is None:
        env = _open_env(key, live)
        lmdb = _lmdb()
        try:
            txn = env.begin(buffers=False)
        except lmdb.MapResizedError:
            env.set_mapsize(0)  # the writer grew the map: adopt its size
            txn = env.begin(buffers=False)
        _TXNS[key] = txn
    return txn


def _drop_txn(key: str) -> None:
    txn = _TXNS.pop(key, None)
    if txn is not None:
        txn.abort()


def _shrunk(key: str, path: object, since: int | None = None) -> bool:
    """Refuse to read a pack whose data.mdb is shorter than when this process opened it (cut, or copied over in
    place, while mapped): liblmdb would touch pages past its end, and the process would die of SIGBUS. True where a
    finished pack's data.mdb has another modification time than when this process opened it, or than ``since``,
    when the dataset read its labels (a worker opening the file after it changed): the environment is closed, and
    the caller looks whether the file still holds the same pack (touched, restored with the same bytes) or another
    one (copied over it in place: its images would be served under this one's labels)."""
    held = _SIZES.get(key)
    if held is None:
        return False
    st = os.fstat(held[0])
    if st.st_size < held[1]:
        _close_env(key)
        raise PackChangedError(f"{path}: its data.mdb shrank from {held[1]} to {st.st_size} bytes while it was read "
                               "(cut, or copied over in place?); open the pack again once it is whole")  # fmt: skip
    if held[2] is not None and (st.st_mtime_ns != held[2] or since is not None and since != held[2]):
        _close_env(key)
        return True
    return False


def _written_to(path: object) -> PackChangedError:
    return PackChangedError(f"{path}: its data.mdb was written to while it was read (another pack copied over it in "
                            "place?); open the pack again once it is whole")  # fmt: skip


def _close_env(key: str) -> None:
    with _LOCK:
        if os.getpid() != _PID:
            _forget_all()
            return
        _drop_txn(key)
        _ENV_IDS.pop(key, None)
        held = _SIZES.pop(key, None)
        if held is not None:
            os.close(held[0])
        env = _ENVS.pop(key, None)
        if env is not None:
            env.close()


def _creation(raw: bytes | None) -> tuple | None:
    """What tells one pack from another written at the same path: when and from what it was
    made (a new file may get the inode the replaced one had)."""
    try:
        meta = json.loads(raw) if raw is not None else None
    except (ValueError, RecursionError):  # damaged: _decode_meta says so
        return None
    if not isinstance(meta, dict):
        return None
    source = meta.get("source")
    return meta.get("created"), tuple(source) if isinstance(source, list) else source, meta.get("source_names")


def _identity(key: str) -> tuple[int, int] | None:
    """(device, inode) of the pack's data.mdb: another file once the pack is re-packed in place."""
    try:
        st = os.stat(os.path.join(key, "data.mdb"))
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _key(path: str | os.PathLike) -> str:
    return os.path.realpath(path)


def close_pack(path: str | os.PathLike) -> None:
    """Close this process's environment of the pack at ``path`` (readers reopen it on their next read).

    Needed only before opening the same files with py-lmdb directly in this process, which
    py-lmdb 2 and later refuse while another environment of them is open.
    """
    _close_env(_key(path))


def _decode_meta(raw: bytes | None, path: Path) -> dict | None:
    if raw is None:
        return None
    try:
        meta = json.loads(bytes(raw).decode("utf-8"))  # json.loads of bytes would also take UTF-16 and -32
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
    except RecursionError:  # arrays nested past Python's limit: no metadata datakit writes
        raise PackError(f"{path}: the metadata record is damaged (nested too deep); copy the pack again or "
                        "re-pack") from None  # fmt: skip
    except UnicodeDecodeError:
        raise PackError(f"{path}: the metadata record is damaged (not UTF-8 text); copy the pack again or "
                        "re-pack") from None  # fmt: skip
    except ValueError as exc:
        raise PackError(f"{path}: the metadata record is damaged ({exc}); copy the pack again or re-pack") from None
    crc = meta.pop("meta_crc32", None)
    if crc is not None and crc != zlib.crc32(_dump_meta(meta)):
        raise PackError(f"{path}: the metadata record fails its checksum; copy the pack again or re-pack")
    version = meta.get("version")
    if crc is None and meta.get("format") == FORMAT and version in READABLE_VERSIONS[1:]:  # written with one
        raise PackError(f"{path}: the metadata record is damaged (no meta_crc32, which every version {version} "
                        "pack has); copy the pack again or re-pack")  # fmt: skip
    if meta.get("format") == FORMAT:
        wrong = _meta_shape_problem(meta)
        if wrong:
            raise PackError(f"{path}: the metadata record is damaged ({wrong}); copy the pack again or re-pack")
    return meta


def _whole(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _meta_shape_problem(meta: dict) -> str | None:
    """What in a datakit pack's metadata has a type or value no writer gives it, read as it is read (a count of
    null, classes as a list, a shard as a string): one phrase, None when nothing is."""
    for key in ("count", "planned"):
        if key in meta and not _whole(meta[key]):
            return f"its {key!r} is {meta[key]!r}, not a whole number"
    if "classes" in meta and not (isinstance(meta["classes"], dict)
                                  and isinstance(meta["classes"].get("classes", []), list)):  # fmt: skip
        return f'its "classes" is {type(meta["classes"]).__name__}, not a class map'
    if "complete" in meta and not isinstance(meta["complete"], bool):
        return f'its "complete" is {meta["complete"]!r}, not true or false'
    if "splits" in meta and not (isinstance(meta["splits"], list) and all(isinstance(x, str) for x in meta["splits"])):
        return f'its "splits" is {meta["splits"]!r}, not a list of names'
    options = meta.get("options", {})
    if not isinstance(options, dict):
        return f'its "options" is {options!r}, not an object'
    shard = options.get("shard")
    if shard is not None and not (isinstance(shard, list) and len(shard) == 2 and all(map(_whole, shard))
                                  and shard[0] < shard[1]):  # fmt: skip
        return f"its shard is {shard!r}, not [I, N] with 0 <= I < N"
    return None


def _dump_meta(meta: dict) -> bytes:
    from datakit.filenames import json_text

    return json_text(meta, sort_keys=True, separators=(",", ":")).encode()


def _encode_meta(meta: dict) -> bytes:
    body = {k: v for k, v in meta.items() if k != "meta_crc32"}
    return _dump_meta(dict(body, meta_crc32=zlib.crc32(_dump_meta(body))))


def read_meta(path: str | os.PathLike) -> dict | None:
    """The pack's metadata, or None where there is no ``data.mdb`` or no metadata record yet."""
    path = Path(path)
    if not (path / "data.mdb").is_file():
        return None
    key = _key(path)
    with _LOCK, _lmdb_errors(path):
        try:
            if (path / "data.mdb").stat().st_size == 0:
                return None  # created, never committed
            raw = _open_env(key, True).begin().get(META_KEY)
        finally:
            _close_env(key)
    return _decode_meta(raw, path)


def committed_count(path: str | os.PathLike) -> int:
    """The samples the pack at ``path`` has committed, for a message (0 where it cannot be told)."""
    try:
        meta = read_meta(path)
    except Exception:  # noqa: BLE001 - only for a message
        return 0
    count = meta.get("count") if isinstance(meta, dict) else None
    return int(count) if _whole(count) else 0


def record_count(path: str | os.PathLike) -> int:
    """How many records the pack at ``path`` holds, metadata included (0 where there is no ``data.mdb`` or it was
    never committed): a pack with records and no metadata is damaged, since every commit writes both."""
    path = Path(path)
    if not (path / "data.mdb").is_file() or (path / "data.mdb").stat().st_size == 0:
        return 0
    key = _key(path)
    with _LOCK, _lmdb_errors(path):
        try:
            return int(_open_env(key, True).stat()["entries"])
        finally:
            _close_env(key)


def stored_names(path: str | os.PathLike) -> list[str | None]:
    """The stored names of the samples the pack at ``path`` has committed, complete or not, in order (None
    where a sample has no name); [] where it holds none."""
    path = Path(path)
    key = _key(path)
    with _LOCK, _lmdb_errors(path):
        try:
            if not (path / "data.mdb").is_file() or (path / "data.mdb").stat().st_size == 0:
                return []
            with _open_env(key, True).begin() as txn:
                meta = _decode_meta(txn.get(META_KEY), path) or {}
                raw = [txn.get(_name_key(i)) for i in range(int(meta.get("count", 0)))]
        finally:
            _close_env(key)
    return [r.decode("utf-8", "surrogateescape") if r is not None else None for r in raw]


def stored_values(path: str | os.PathLike, twice: set[str] | None = None) -> dict[str, tuple[int, int]]:
    """{stored name: (crc32, nbytes) of its stored value} of the samples the pack at ``path`` has committed,
    complete or not ({} where it holds none); a name stored twice keeps its first sample (and is added to
    ``twice``, when given)."""
    path = Path(path)
    key = _key(path)
    out: dict[str, tuple[int, int]] = {}
    with _LOCK, _lmdb_errors(path):
        try:
            if not (path / "data.mdb").is_file() or (path / "data.mdb").stat().st_size == 0:
                return out
            with _open_env(key, True).begin() as txn:
                meta = _decode_meta(txn.get(META_KEY), path) or {}
                for i in range(int(meta.get("count", 0))):
                    raw_name, raw_record = txn.get(_name_key(i)), txn.get(_record_key(i))
                    if raw_name is None or raw_record is None or len(raw_record) != RECORD.itemsize:
                        continue
                    rec = _RECORD_STRUCT.unpack(raw_record)
                    name = raw_name.decode("utf-8", "surrogateescape")
                    if twice is not None and name in out:
                        twice.add(name)
                    out.setdefault(name, (rec[3], rec[6]))
        finally:
            _close_env(key)
    return out


# ---------------------------------------------------------------------------------------------
# one writer at a time


def _holds(fd: int) -> bool:
    """Whether this descriptor holds its exclusive flock (taking it is idempotent for the holder)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _writer(path: Path) -> str | None:
    """The PID of the process writing the pack now (its lock held; ``"unknown"`` in the instant before it
    writes its PID), or None."""
    try:
        fd = os.open(path / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return None
    try:
        if _holds(fd):
            return None
        return os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
    finally:
        os.close(fd)


def _no_meta(path: Path, entries: int = 0) -> str:
    """Why a pack has no metadata: a writer in its first instant (its lock held), a pack stopped before its
    first commit, a copy made while it was written (``entries`` records in it, but not its metadata), or not a
    datakit pack."""
    pid = _writer(path)
    if pid is not None:
        return (f"{path}: being created by another process (PID {pid}), which has not written its metadata yet; "
                "open it again in a moment")  # fmt: skip
    problem = _tree_problem(path / "data.mdb")  # pages that send liblmdb astray can hide the metadata record
    if problem is not None:
        return _damaged_pages(path, problem)
    if entries and (path / LOCK_NAME).is_file():  # pack-lmdb's, records in it and no metadata: no commit leaves that
        return (f"{path}: damaged: {entries} record{'s' * (entries != 1)} and no metadata record (a copy made while "
                "the pack was being written?); copy it again once pack-lmdb has finished, or re-pack")  # fmt: skip
    if _stopped_early(path):  # pack-lmdb made it, and was stopped before its first commit
        return _STOPPED_EARLY.format(path=path)
    return f"{path}: not a datakit pack (no metadata record)"


def _stopped_early(path: Path) -> bool:
    """Whether pack-lmdb made ``path`` (its lock file is there) and had not finished: a finished pack has its
    classes.json, so a copy of one whose data.mdb is cut to nothing is a cut copy, not a pack to resume."""
    return (path / LOCK_NAME).is_file() and not (path / "classes.json").exists()


_STOPPED_EARLY = ("{path}: an interrupted pack, stopped before its first commit (no samples in it); run the same "
                  "pack-lmdb command with --resume, which starts it again, or with --overwrite")  # fmt: skip


class PackLock:
    """An exclusive ``flock`` on ``OUT/pack.lock`` holding the writer's PID; released on close or death."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.path = Path(folder) / LOCK_NAME
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        holder = ""
        for _ in range(50):  # the holder writes its PID just after taking the lock and clears it just before
            try:  # letting go: within that instant, look again rather than say "unknown"
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip()
                if holder:
                    break
                time.sleep(0.01)
        if holder or not _holds(self.fd):
            os.close(self.fd)
            raise PackError(
                f"{folder}: another process (PID {holder or 'unknown'}) is writing this pack; wait for it to finish "
                "or stop it"
            ) from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def close(self) -> None:
        if self.fd >= 0:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)  # closing the descriptor releases the flock
            self.fd = -1

    def __enter__(self) -> PackLock:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------
# writing


def _write_failed(path: Path, count: int, exc: BaseException, items: list) -> PackWriteError:
    """The error of a failed commit of ``items``, which knows its first sample (for the pack job's line; this
    writer's own line names the count alone)."""
    err = PackWriteError(path, count, exc)
    err.sample = (items[0][0], items[0][3].decode("utf-8", "surrogateescape")) if items else None
    return err


class LmdbWriter:
    """Appends samples to a pack; each commit stores samples and the new ``count`` together.

    The metadata is committed as soon as the writer opens, and again every ``commit_seconds``,
    ``commit_bytes`` or ``commit_every`` samples, whichever comes first, so an interruption at any
    moment (Ctrl-C, kill -9, a full disk) leaves a pack that holds exactly ``count`` valid samples
    and that ``pack-lmdb --resume`` continues. Use it as a context manager; :meth:`finish` writes
    the checksummed index and marks the pack complete.

    Args:
        path: the pack folder (created if missing).
        meta: the metadata (``format``, ``version``, ``classes`` ...); ``count`` is maintained here.
        resume: continue the samples already committed (the pack's own count; their records are read
            back once). A complete pack is refused.
        lock: a :class:`PackLock` already held on ``path`` (else one is taken here).
        background: the commits :meth:`add` makes are written by a thread of the writer's own while
            the caller goes on (one at a time; the next waits for it). ``count`` then counts what is
            written so far, a failed write is raised by the next call, and :meth:`commit`,
            :meth:`finish` and leaving the ``with`` block wait for it.
    """

    def __init__(self, path: str | os.PathLike, meta: dict, *, resume: bool = False, lock: PackLock | None = None,
                 commit_bytes: int = 64 << 20, commit_every: int = 5000, commit_seconds: float = 2.0,
                 map_size: int = INITIAL_MAP_SIZE, background: bool = False) -> None:  # fmt: skip
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._own_lock = lock is None
        self.lock = lock or PackLock(self.path)
        self.commit_bytes, self.commit_every, self.commit_seconds = commit_bytes, commit_every, commit_seconds
        # every sample added and not yet known to be on disk, in order, as (index, value, record, name):
        # one append per sample and nothing removed before its commit is confirmed, so that a Ctrl-C at
        # any moment leaves this list and ``count`` telling the truth between them (see _upto)
        self._pending: list[tuple[int, bytes, bytes, bytes]] = []
        self._pending_bytes = 0  # added since the last commit began
        self._index = bytearray()  # every sample's record, packed: the index, built as samples come
        self.count = 0
        self.env = None
        self._background = background
        self._thread: threading.Thread | None = None  # the write in flight (background), with its result
        self._written: tuple[int, dict, BaseException | None] | None = None
        try:
            data = self.path / "data.mdb"
            if data.is_file() and data.stat().st_size > 0:
                check_data_file(self.path)
            _close_env(_key(self.path))  # this process's reader of it, if any: one open per file
            if (full := lock_room_problem(self.path)) is not None:  # a lock.mdb to make: a SIGBUS on a full disk
                raise PackWriteError(self.path, committed_count(self.path),
                                     OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)}: {full}"))  # fmt: skip
            with _lmdb_errors(self.path, "opening"), self._write_errors():
                # meminit: unused bytes of a page are zeroed, not this process's leftover heap (which
                # may hold anything the process handled before, pickles included) written to the file
                self.env = _lmdb().open(os.fsencode(self.path), map_size=map_size, subdir=True, readahead=False,
                                        meminit=True, max_dbs=0, max_readers=1024)  # fmt: skip
                info, psize = self.env.info(), self.env.stat()["psize"]
                used = psize * (info["last_pgno"] + 1)
                if info["map_size"] < 2 * used:
                    self.env.set_mapsize(2 * used)
                if resume:
                    self._load_records()
            self.meta = dict(meta, count=self.count, complete=False)
            self._clock = 0  # the file system's clock less this process's (an NFS server's may differ)
            now = time.time_ns()
            self._write([], self.meta)  # committed now: from here on the pack is resumable
            try:
                self._clock = os.stat(self.path / "data.mdb").st_mtime_ns - now  # the write's time, as it keeps it
            except OSError:
                pass
        except BaseException:
            self.close()
            raise
        self._last_commit = time.monotonic()

    @contextmanager
    def _write_errors(self) -> Iterator[None]:
        """A full disk (a quota, a size limit) met while creating the files: a failed write, not a damaged
        pack to verify."""
        try:
            yield
        except _lmdb().Error as exc:
            if not _no_room(exc):
                raise  # an I/O error reading what is there, say: a pack to verify
            raise PackWriteError(self.path, self.count, exc) from None

    def _load_records(self) -> None:
        with self.env.begin() as txn:
            stored = _decode_meta(txn.get(META_KEY), self.path)
            # the pack's own count, whatever the caller's metadata says: samples above it would be orphaned
            if stored is None:
                raise PackError(f"{self.path}: no datakit metadata; nothing to resume")
            if stored.get("complete"):
                raise PackError(f"{self.path}: a complete pack; nothing to resume (write a new pack to add samples)")
            n = int(stored.get("count", 0))
            for i in range(n):
                raw = txn.get(_record_key(i))
                if raw is None or len(raw) != RECORD.itemsize:
                    raise PackError(f"{self.path}: the record of sample {i} is missing or damaged; re-pack")
                self._index += raw
        self.count = n

    @property
    def records(self) -> np.ndarray:
        """The records of every sample added so far (committed or pending)."""
        return np.frombuffer(bytes(self._index), RECORD)

    def add(self, value: bytes, target: int, height: int, width: int, name: str, split: int = 0,
            crc32: int | None = None) -> None:  # fmt: skip
        """Append one sample; commits when enough bytes, samples or seconds have gathered.

        ``crc32`` of ``value`` may come precomputed (by a worker process); it is computed here otherwise.
        """
        i = self._upto()
        crc = zlib.crc32(value) if crc32 is None else crc32
        rec = _RECORD_STRUCT.pack(target, height, width, crc, split, 0, len(value))
        self._index += rec
        self._pending.append((i, value, rec, name.encode("utf-8", "surrogateescape")))
        self._pending_bytes += len(value)
        if (
            self._pending_bytes >= self.commit_bytes
            or len(self._pending) - self._handed >= self.commit_every
            or time.monotonic() - self._last_commit >= self.commit_seconds
        ):
            self._flush(wait=not self._background)

    def _upto(self) -> int:
        """The count of samples added: committed ones and those still pending (or in flight)."""
        return self._pending[-1][0] + 1 if self._pending else self.count

    @property
    def _handed(self) -> int:
        """Pending samples handed to the write in flight (background)."""
        return 0 if self._written is None else self._written[0]

    def _flush(self, wait: bool, **extra) -> None:
        self._join()
        items = list(self._pending)  # a snapshot: the caller may go on adding while it is written
        meta = dict(self.meta, **extra, count=self._upto(), complete=False)  # what this commit stores
        self._pending_bytes = 0
        self._last_commit = time.monotonic()
        if wait:
            self._write(items, meta)
            self._confirm(meta)
            return
        self.meta = dict(self.meta, **extra)  # the caller may go on changing it while the write runs
        self._written = (len(items), meta, None)

        def write() -> None:
            try:
                self._write(items, meta)
            except BaseException as exc:  # raised by the next call, in the caller's thread
                self._written = (len(items), meta, exc)

        self._thread = threading.Thread(target=write, name="datakit-lmdb-commit", daemon=True)
        self._thread.start()  # interrupted before it started, it counts as not written (see _join)

    def _confirm(self, meta: dict) -> None:
        # count first, then the samples it covers leave the list (however often this runs): interrupted
        # in between, they are written again (the same keys, the same values), never lost
        self.count = max(self.count, meta["count"])
        if self._pending:
            del self._pending[: max(0, self.count - self._pending[0][0])]
        self.meta = dict(self.meta, count=self.count) if self._background else meta

    def _join(self) -> None:
        """Wait for the write in flight; count its samples, or raise its error."""
        if self._thread is None:
            self._written = None
            return
        if self._thread.ident is None:  # never started: nothing written, its samples are still pending
            self._thread = self._written = None
            return
        self._thread.join()
        _, meta, exc = self._written  # type: ignore[misc]
        if exc is not None:
            self._thread = self._written = None
            raise exc
        self._confirm(meta)
        self._thread = self._written = None

    def _write(self, items: list[tuple[int, bytes, bytes, bytes]], meta: dict,
               extra: list[tuple[bytes, bytes]] = ()) -> None:  # fmt: skip
        lmdb = _lmdb()
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    for i, value, rec, name in items:
                        txn.put(_image_key(i), value)
                        txn.put(_record_key(i), rec)
                        txn.put(_name_key(i), name)
                    for k, v in extra:
                        txn.put(k, v)
                    # when, on the file system's clock: a resume compares its source files' times with it where
                    # data.mdb's own is later (a copy of the pack, cp -r, or a backup restored over it: as new as
                    # the copy, later than the edits made since its samples were read)
                    txn.put(META_KEY, _encode_meta(dict(meta, committed_ns=time.time_ns() + self._clock)))
                return
            except lmdb.MapFullError:
                # the transaction was aborted whole; grow the map and write it again
                try:
                    self.env.set_mapsize(self.env.info()["map_size"] * 2)
                except lmdb.Error as exc:  # no room for a larger map (address space, a 32-bit system)
                    raise _write_failed(self.path, self.count, exc, items) from None
            except lmdb.Error as exc:
                # a full disk or an I/O error: the transaction was aborted whole, what was committed stays
                raise _write_failed(self.path, self.count, exc, items) from None

    def commit(self, **extra) -> None:
        """Write what is pending, with the metadata (updated by ``extra``) counting it."""
        self._flush(wait=True, **extra)

    def finish(self, **extra) -> None:
        """Commit what is pending, write the checksummed index and mark the pack complete."""
        self.commit()
        index = bytes(self._index)
        with self.env.begin() as txn:
            names = names_crc32(txn, self.count)
        meta = dict(self.meta, **extra, count=self.count, complete=True, index_crc32=zlib.crc32(index),
                    names_crc32=names)  # fmt: skip
        self._write([], meta, [(INDEX_KEY, index)])
        self.meta = meta
        self.env.sync(True)

    def close(self) -> None:
        if self._thread is not None and self._thread.ident is not None:
            self._thread.join()  # its samples are committed or, on its error, not: the pack is whole either way
            self._thread = self._written = None
        if self.env is not None:
            self.env.close()
            self.env = None
        if self._own_lock:
            self.lock.close()

    def __enter__(self) -> LmdbWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is KeyboardInterrupt and self.env is not None:
                self.commit()  # keep what was read before Ctrl-C
        finally:
            self.close()


# ---------------------------------------------------------------------------------------------
# reading


class LmdbReader:
    """Read access to one pack; the environment opens lazily in each process and is never pickled.

    A complete pack's records come from its checksummed index. ``allow_incomplete=True`` also
    opens a pack that is still being written (or was interrupted): it sees the committed samples,
    and :meth:`refresh` follows the writer.
    """

    def __init__(self, path: str | os.PathLike, *, allow_incomplete: bool = False) -> None:
        self.path = Path(path)
        self._key = _key(self.path)
        self.allow_incomplete = allow_incomplete
        _hold(self)
        if not (self.path / "data.mdb").is_file():
            left = self.path.is_dir() and any(p.name in PACK_FILES for p in self.path.iterdir())
            if self.path.name == "data.mdb" and self.path.is_file():  # the pack's file, not its folder
                raise UsageError(f"{self.path}: a pack's data file; give the folder that holds it "
                                 f"({self.path.parent})")  # fmt: skip
            if self.path.exists() and not left:  # a class folder, a JPEG: the wrong kind of path, not a damaged pack
                raise UsageError(f"{self.path}: not an LMDB pack (no data.mdb); a pack is the folder pack-lmdb wrote")
            raise PackError(f"{self.path}: not an LMDB pack (no data.mdb)")
        self.records = np.zeros(0, RECORD)
        self.meta: dict = {}
        self._ident: tuple | None = None  # the data.mdb and pack the records were read from
        self._live = True
        self._load()
        self._live = not self.meta.get("complete")

    @property
    def complete(self) -> bool:
        return bool(self.meta.get("complete"))

    def _load(self) -> None:
        with _LOCK, _lmdb_errors(self.path):
            _drop_txn(self._key)  # a fresh snapshot
            if not self.meta:  # opened anew: this process may still have an earlier file of that path open
                _close_env(self._key)
            try:
                txn = _txn(self._key, self._live)
                ident = _ENV_IDS.get(self._key)
                if self.meta and self._ident is not None and ident != self._ident:
                    # reopened (after a fork, or another open of the path) on another pack made there since: its
                    # records must not be joined to the ones read before, nor its samples to this class map
                    raise self._replaced()
                self._ident = ident
                meta = _decode_meta(txn.get(META_KEY), self.path)
                if meta is None:
                    raise PackError(_no_meta(self.path, txn.stat()["entries"]))
                self._check_meta(meta)
                records = self._read_records(txn, meta)
            except BaseException:
                _close_env(self._key)
                raise
            mtime = None
            if meta.get("complete"):
                held = _SIZES.get(self._key)
                try:
                    mtime = os.fstat(held[0]).st_mtime_ns if held is not None else None
                except OSError:
                    mtime = None
                _close_env(self._key)  # reopened without the reader table on the first read
        # the file's time as its labels were read: a worker that opens it later (forked, spawned) compares its own
        self.meta, self.records, self._data_mtime, self._loaded_mtime = meta, records, mtime, mtime
        try:
            self.class_map = ClassMap.from_json(meta.get("classes"))
        except ValueError as e:
            raise PackError(f"{self.path}: the pack's metadata holds {e}") from None

    def check_names(self) -> None:
        """Raise :class:`PackError` when the stored sample names disagree with the ``names_crc32`` the pack
        recorded (a pack written before names were checksummed, or one still being written, passes): what a
        re-pack reads them from, so that the damage is not copied into a pack that then verifies clean."""
        expected = self.meta.get("names_crc32")
        if expected is None or not self.complete:
            return
        with _LOCK, _lmdb_errors(self.path):
            found = names_crc32(_txn(self._key, self._live), len(self))
        if found != expected:
            raise PackError(f"{self.path}: the stored sample names were altered (names_crc32 mismatch; `datakit "
                            "verify` says so too); pack the pack's own source again")  # fmt: skip

    def _check_meta(self, meta: dict) -> None:
        if meta.get("format") != FORMAT:
            raise PackError(f"{self.path}: format is {meta.get('format')!r}, not {FORMAT!r}")
        if meta.get("version") not in READABLE_VERSIONS:
            raise PackError(
                f"{self.path}: pack version {meta.get('version')!r} is not readable by this datakit "
                f"(reads versions {', '.join(map(str, READABLE_VERSIONS))}); upgrade datakit or re-pack"
            )
        if not meta.get("complete") and not self.allow_incomplete:
            writer = _writer(self.path)
            if writer is not None:  # --resume would be refused while it runs
                raise PackError(
                    f"{self.path}: incomplete pack, being written by PID {writer} ({meta.get('count')} of "
                    f"{meta.get('planned')} samples committed so far); read it once the job has finished, or read "
                    "what is there in Python with open_dataset(..., allow_incomplete=True)"
                )
            raise PackError(
                f"{self.path}: incomplete pack ({meta.get('count')} of {meta.get('planned')} samples); "
                "finish it with `datakit pack-lmdb ... --resume`, or read what is there in Python with "
                "open_dataset(..., allow_incomplete=True)"
            )
        for key in ("count", "classes"):
            if key not in meta:
                raise PackError(f"{self.path}: the metadata has no {key!r}; copy the pack again or re-pack")

    def _read_records(self, txn, meta: dict) -> np.ndarray:
        n = int(meta["count"])
        index = txn.get(INDEX_KEY) if meta.get("complete") else None
        if index is not None:
            if len(index) != n * RECORD.itemsize:
                raise PackError(f"{self.path}: the index holds {len(index) // RECORD.itemsize} records for "
                                f"{n} samples; copy the pack again or re-pack")  # fmt: skip
            if "index_crc32" not in meta and meta.get("version", 1) >= 2:
                raise PackError(f"{self.path}: the metadata record is damaged (no index_crc32, which every complete "
                                f"version {meta['version']} pack has); copy the pack again or re-pack")  # fmt: skip
            if "index_crc32" in meta and zlib.crc32(index) != meta["index_crc32"]:
                raise PackError(f"{self.path}: the index fails its checksum; copy the pack again or re-pack")
            records = np.frombuffer(index, RECORD).copy()
        elif meta.get("complete") and meta.get("version", 1) >= 2:
            raise PackError(f"{self.path}: complete but without an index; copy the pack again or re-pack")
        else:
            start = len(self.records) if len(self.records) <= n else 0
            records = np.zeros(n, RECORD)
            records[:start] = self.records[:start]
            for i in range(start, n):
                raw = txn.get(_record_key(i))
                if raw is None or len(raw) != RECORD.itemsize:
                    raise PackError(f"{self.path}: the record of sample {i} is missing or damaged; re-pack")
                records[i] = np.frombuffer(raw, RECORD)[0]
        n_classes = len(meta["classes"].get("classes", ()))
        bad = np.flatnonzero((records["target"] < 0) | (records["target"] >= n_classes))
        if len(bad):
            i = int(bad[0])
            raise PackError(f"{self.path}: sample {i} has target {int(records['target'][i])}, outside the "
                            f"{n_classes} classes; run `datakit verify {self.path}` and re-pack")  # fmt: skip
        return records

    def _replaced(self) -> PackError:
        return PackChangedError(f"{self.path}: the pack was replaced (packed again) since this dataset read its "
                                "labels; open it again")  # fmt: skip

    def refresh(self) -> int:
        """Re-read a pack that is being written: the samples committed since; returns the count."""
        if self._live:
            if self._ident is not None and _identity(self._key) != self._ident[0]:
                raise self._replaced()  # the path holds another file now (deleted and packed again, or swapped in)
            self._load()
            self._live = not self.complete
        return len(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def get(self, i: int) -> bytes:
        """The stored bytes of sample ``i``."""
        with _LOCK:
            try:
                txn = self._current()
                value = txn.get(_image_key(i))
            except PackError:
                raise
            except Exception as exc:
                if isinstance(exc, _lmdb().Error):
                    _close_env(self._key)
                    if self._moved():
                        raise _written_to(self.path) from None
                    raise PackError(f"{self.path}: reading sample {i} failed ({type(exc).__name__}: {exc}); "
                                    f"run `datakit verify {self.path}`") from None  # fmt: skip
                raise
        if value is None:
            raise PackError(f"{self.path}: no value for sample {i} (key {_image_key(i).decode()}); re-pack")
        checked = self.__dict__.get("_checked")
        if checked is None or len(checked) < len(self.records):  # per process, never pickled (see __getstate__)
            grown = np.zeros(len(self.records), bool)
            if checked is not None:
                grown[: len(checked)] = checked
            checked = self._checked = grown
        if not checked[i]:
            # a flipped byte in an image still decodes, to other pixels: checked on its first read in a process
            # (9 us for 35 KB), which later epochs then skip
            rec = self.records[i]
            if len(value) != int(rec["nbytes"]) or zlib.crc32(value) != int(rec["crc32"]):
                if self._moved():  # a copy over it in progress, or bytes damaged in a pack only touched: not known
                    raise PackChangedError(f"{self.path}: sample {i} ({self.name(i)}) fails its checksum, and the "
                                           "pack's data.mdb was written to since this dataset read its labels (another "
                                           "pack copied over it, or only touched?); open the pack again, and run "
                                           f"`datakit verify {self.path}`")  # fmt: skip
                raise PackError(f"{self.path}: sample {i} ({self.name(i)}) fails its checksum: the stored bytes were "
                                f"altered; run `datakit verify {self.path}` and re-pack")  # fmt: skip
            checked[i] = True
        return value

    def _current(self):
        """This process's read transaction on the pack, refusing a file that is no longer the pack this dataset
        read its labels from (re-packed, or another pack copied over it in place). A file whose time moved but which
        holds the same pack (touched, restored with the same bytes: the same metadata, checksums included) is read
        on."""
        try:
            txn = _txn(self._key, self._live)
        except (PackError, _lmdb().Error) as exc:
            if not self._moved():
                raise
            # opened again on a file that changed since the labels were read (cut, a copy over it): the file's
            # fault, said as the opening says it, and no sample's (never recorded as a bad one)
            raise (PackChangedError(str(exc)) if isinstance(exc, PackError) else _written_to(self.path)) from None
        if _ENV_IDS.get(self._key) != self._ident:
            raise self._replaced()
        if not _shrunk(self._key, self.path, self.__dict__.get("_data_mtime")):
            return txn
        try:
            txn = _txn(self._key, self._live)  # opened again: the file as it is now
            same = _ENV_IDS.get(self._key) == self._ident and _decode_meta(txn.get(META_KEY), self.path) == self.meta
        except (PackError, _lmdb().Error):  # (a copy in progress: its pages half the one pack's, half the other's)
            same = False
        if not same:
            _close_env(self._key)
            raise _written_to(self.path)
        held = _SIZES.get(self._key)
        self._data_mtime = held[2] if held is not None else None
        self.__dict__.pop("_checked", None)  # every sample's checksum looked at again: a copy in progress over it
        return txn  # leaves the metadata it writes last as it was, and the samples it has reached fail theirs

    def _moved(self) -> bool:
        """Whether this finished pack's data.mdb has another modification time than when its labels were read: a
        sample failing its checksum there is the file changing, not a damaged image to record as bad."""
        since = self.__dict__.get("_loaded_mtime")  # (never moved on, as _data_mtime is for a touched file)
        if since is None:
            return False
        held = _SIZES.get(self._key)  # the file this process reads, wherever its folder went (renamed, deleted)
        try:
            st = os.fstat(held[0]) if held is not None else os.stat(os.path.join(self._key, "data.mdb"))
        except OSError:
            return False  # (gone: the opening says so)
        return st.st_mtime_ns != since

    def name(self, i: int) -> str:
        """Sample ``i``'s source name (relative to its source folder where it had one)."""
        with _LOCK, _lmdb_errors(self.path):
            txn = self._current()
            raw = txn.get(_name_key(i))
        return raw.decode("utf-8", "surrogateescape") if raw is not None else f"#{i}"

    def close(self) -> None:
        """Close this process's environment of the pack (it reopens on the next read)."""
        _close_env(self._key)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()  # only paths, metadata and records: no environment
        state.pop("_checked", None)  # which samples this process has checked: each process checks its own reads
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        _hold(self)  # (a spawned worker's copy, or a copy.copy: a user of the environment too)


def lmdb_info(path: str | os.PathLike) -> dict:
    """The pack's metadata, with per-class and per-split counts and sizes."""
    r = LmdbReader(path, allow_incomplete=True)
    r.close()  # one-shot: the records and metadata are in memory now
    info = {k: v for k, v in r.meta.items() if k not in ("record_dtype", "meta_crc32")}
    rec = r.records
    classes = r.class_map.classes
    counts = np.bincount(rec["target"], minlength=len(classes)) if len(rec) else np.zeros(len(classes), np.int64)
    info["class_counts"] = {name: int(c) for name, c in zip(classes, counts)}  # every class, those without samples too
    n_splits = len(r.meta.get("splits") or [])
    if len(rec) and (bad := np.flatnonzero(rec["split"] > n_splits)).size:  # as verify says it, not an IndexError
        i = int(bad[0])
        raise PackError(
            f"{r.path}: sample {i} has split id {int(rec['split'][i])}, the pack has {n_splits} splits"
            f"{f' ({bad.size} such samples)' if bad.size > 1 else ''}; datakit verify checks the rest"
        )
    if r.meta.get("splits"):
        names = ["-"] + r.meta["splits"]
        info["split_counts"] = {names[s]: int(c) for s, c in zip(*np.unique(rec["split"], return_counts=True))}
    if len(rec):
        info["height_range"] = [int(rec["height"].min()), int(rec["height"].max())]
        info["width_range"] = [int(rec["width"].min()), int(rec["width"].max())]
        info["bytes"] = int(rec["nbytes"].sum())
    info["file_bytes"] = (Path(path) / "data.mdb").stat().st_size
    return info


def _is_pack_key(key: bytes, n: int) -> bool:
    """Whether a pack of ``n`` samples holds ``key``: a sample's ``i``/``r``/``n`` key below ``n``, the metadata or
    the index."""
    if len(key) == 11 and key[:1] in (b"i", b"r", b"n") and key[1:].isdigit():
        return int(key[1:]) < n
    return key in (META_KEY, INDEX_KEY)


def _key_after(key: bytes, n: int) -> bytes | None:
    """The smallest key a pack of ``n`` samples holds that sorts after ``key`` (None: there is none)."""
    for fixed in (INDEX_KEY, META_KEY):  # b"__index__" < b"__meta__" < b"i..." < b"n..." < b"r..."
        if key < fixed:
            return fixed
    for prefix in (b"i", b"n", b"r"):
        if n and key < prefix + b"%010d" % (n - 1):
            lo, hi = 0, n - 1  # the first sample whose key sorts after ``key``
            while lo < hi:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if prefix + b"%010d" % mid > key else (mid + 1, hi)
            return prefix + b"%010d" % lo
    return None


def _lmdb_message(exc: Exception) -> str:
    """``MDB_PAGE_NOTFOUND: Requested page not found`` from py-lmdb's ``mdb_get: MDB_PAGE_NOTFOUND: ...``."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return re.sub(r"^mdb_\w+: ", "", text)


def _walk_keys(r: LmdbReader, n: int) -> tuple[int, list[str], Exception | None]:
    """Every key of the pack in cursor passes (which also read every B-tree page): how many were read, the keys that
    are no sample's (10 lines at most), and the first LMDB error met. A transaction that met an error refuses every
    later read, so past a page that cannot be read the walk goes on in a new one, from the next key the pack should
    hold."""
    lmdb = _lmdb()
    count, strays, error, resized = 0, [], None, 0
    start: bytes | None = b""
    while start is not None:
        last = None
        try:
            with _LOCK, _open_env(r._key, r._live).begin() as txn:
                cursor = txn.cursor()
                if cursor.set_range(start):
                    for key in cursor.iternext(keys=True, values=False):
                        last, count = key, count + 1
                        if not _is_pack_key(key, n) and len(strays) < 10:
                            strays.append(f"{r.path}: holds a key that is no sample's: {key!r}")
            start = None
        except lmdb.MapResizedError as exc:  # a writer grew the map since it was opened: adopt its size, walk on
            resized += 1
            if resized > 100:
                error, start = error or exc, None
                continue
            with _LOCK:
                _drop_txn(r._key)  # the map's new size ends every transaction of the environment
                _open_env(r._key, r._live).set_mapsize(0)
            start = _key_after(last, n) if last is not None else start
        except lmdb.Error as exc:
            error = error or exc
            start = _key_after(last if last is not None else start, n)
    return count, strays, error


def _ranges(indices: list[int], most: int = 10) -> str:
    """``3-5, 9, 12-40`` (the first ``most`` runs, then ``...``)."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs[:most])
    return text + (", ..." if len(runs) > most else "")


def _json_kind(value: object) -> str:
    """``a JSON string`` ... for a value ``json.loads`` returned."""
    kinds = ((bool, "a JSON boolean"), (str, "a JSON string"), (int, "a JSON number"), (float, "a JSON number"),
             (list, "a JSON array"), (dict, "a JSON object"))  # fmt: skip
    return next((name for t, name in kinds if isinstance(value, t)), "JSON null")


def _classes_json_problems(r: LmdbReader) -> list[str]:
    """The problems of the pack's ``classes.json``, one line each (none: an empty list): whether it can be read, is
    the class map :meth:`ClassMap.save` writes (``{"classes": [names], "source_values": [ints]}``, names once each),
    is the map the metadata holds, and names a class for every sample's target.

    It is written when the pack completes, so an incomplete pack may lack it; a complete pack written by
    ``pack-lmdb`` (its metadata names the writer) must hold it. A pack written by :class:`LmdbWriter` alone has
    none (its metadata holds the classes); one there is checked all the same.
    """
    from datakit.filenames import json_text

    f = r.path / "classes.json"
    packed = "writer" in r.meta
    again = "; its pack-lmdb command run again with --resume rewrites it" if packed else ""
    if not os.path.lexists(f):
        return [f"{f}: missing{again}"] if r.complete and packed else []
    if os.path.exists(f) and not os.path.isdir(f) and not os.path.isfile(f):  # a FIFO would wait for a writer
        return [f"{f}: cannot be read (not a regular file)"]
    try:
        data = f.read_bytes()
    except OSError as exc:
        return [f"{f}: cannot be read ({exc.strerror or exc})"]  # a folder, no permission: not for --resume
    whole = json_text(r.class_map.to_json(), indent=1).encode()  # the text ClassMap.save writes
    if not data:
        return [f"{f}: empty (0 bytes){again}"]
    if len(data) < len(whole) and whole.startswith(data):
        return [f"{f}: cut short ({len(data)} of {len(whole)} bytes){again}"]
    try:
        obj = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return [f"{f}: not UTF-8 (byte {exc.start}){again}"]
    except json.JSONDecodeError as exc:
        return [f"{f}: not JSON (line {exc.lineno} column {exc.colno}){again}"]
    if not isinstance(obj, dict):
        return [f'{f}: {_json_kind(obj)}, not a class map ({{"classes": [...]}}){again}']
    names = obj.get("classes")
    if not isinstance(names, list):
        what = 'no "classes"' if "classes" not in obj else f'its "classes" is {_json_kind(names)}, not a'
        return [f"{f}: {what} list of class names{again}"]
    for k, name in enumerate(names):
        if not isinstance(name, str):
            return [f"{f}: class {k} is {_json_kind(name)} ({json.dumps(name)}), not a class name{again}"]
    values = obj.get("source_values")
    if values is not None and (not isinstance(values, list) or len(values) != len(names)
                               or not all(isinstance(v, int) and not isinstance(v, bool) for v in values)):  # fmt: skip
        return [f'{f}: "source_values" is not a list of {len(names)} integers, one per class{again}']
    problems = []
    seen: dict[str, list[int]] = {}
    for k, name in enumerate(names):
        seen.setdefault(name, []).append(k)
    twice = [(name, at) for name, at in seen.items() if len(at) > 1]
    for name, at in twice[:10]:
        times = "twice" if len(at) == 2 else f"{len(at)} times"
        shown = " and ".join(", ".join(map(str, at)).rsplit(", ", 1))
        problems.append(f"{f}: class {name!r} is named {times} (classes {shown}){again}")
    if len(twice) > 10:
        problems.append(f"{f}: {len(twice) - 10} more class names are named more than once{again}")
    ours = list(r.class_map.classes)
    if len(names) != len(ours):
        problems.append(f"{f}: names {len(names)} classes, the pack's metadata {len(ours)}{again}")
    elif names != ours:
        differ = [k for k, (a, b) in enumerate(zip(names, ours)) if a != b]
        k = differ[0]
        more = f" ({len(differ)} classes differ)" if len(differ) > 1 else ""
        problems.append(f"{f}: class {k} is {names[k]!r}, the pack's metadata says {ours[k]!r}{more}{again}")
    ours_values = list(r.class_map.source_values) if r.class_map.source_values is not None else None
    if len(names) == len(ours) and values != ours_values:
        problems.append(f"{f}: source_values {values or 'none'}, the pack's metadata {ours_values or 'none'}{again}")
    targets = r.records["target"]
    past = np.flatnonzero(targets >= len(names))
    if len(past):
        i = int(past[0])
        more = f"; {len(past) - 1} more samples have labels past them" if len(past) > 1 else ""
        problems.append(f"{r.path}: sample {i} has label {int(targets[i])} but classes.json names {len(names)} "
                        f"classes{more}")  # fmt: skip
    return problems


def _verify_steps(path: str | os.PathLike) -> Iterator[tuple[str, object]]:
    """The work of :func:`verify_lmdb`, as it goes: ``("reading", what)`` before LMDB pages are read for ``what`` (a
    description, or a sample's index), ``("decoding", i)`` before sample ``i``'s image is decoded, ``("count", n)``
    once the pack is open, and ``("problem", line)``. Raises what :class:`LmdbReader` raises when the pack cannot be
    opened."""
    from datakit.io import validate_image

    lmdb = _lmdb()
    yield "reading", "the pack's metadata and index"
    r = LmdbReader(path, allow_incomplete=True)
    try:
        meta, rec = r.meta, r.records
        n = len(r)
        yield "count", n
        writer = None if r.complete else _writer(r.path)
        if writer is not None:  # what it has committed goes on growing: its samples so far are checked, not its count
            yield "problem", (f"{r.path}: incomplete pack, being written by PID {writer} ({meta.get('count')} of "
                              f"{meta.get('planned')} samples committed when verify began, those checked); verify it "
                              "again once the job has finished")  # fmt: skip
        elif not r.complete:
            yield "problem", f"{r.path}: incomplete pack ({meta.get('count')} of {meta.get('planned')} samples)"
        n_splits = len(meta.get("splits") or [])
        for i in np.flatnonzero(rec["split"] > n_splits)[:10]:
            yield "problem", f"{r.path}: sample {i} has split id {int(rec['split'][i])}, the pack has {n_splits} splits"
        for line in _classes_json_problems(r):
            yield "problem", line
        yield "reading", "the B-tree"
        problem = _tree_problem(r.path / "data.mdb")
        if problem is not None:  # what opening the pack for training refuses: said here, the rest still read
            yield "problem", _damaged_pages(r.path, problem)
        expected = 3 * n + 1 + (1 if r.complete else 0)
        with _LOCK, _lmdb_errors(r.path):
            entries = _open_env(r._key, r._live).stat()["entries"]  # the count the main DB's meta page keeps
        walked, strays, walk_error = _walk_keys(r, n)
        if writer is not None:
            entries, strays = expected, []  # the samples committed since are more entries and keys, rightly
        if entries != expected:
            if walk_error is None and walked == expected:
                yield "problem", (f"{r.path}: the LMDB header of data.mdb is damaged (it counts {entries} entries, the "
                                  f"B-tree holds {walked}); copy it again or re-pack")  # fmt: skip
            else:
                yield "problem", f"{r.path}: holds {entries} entries, expected {expected} for {n} samples"
        for line in strays:
            yield "problem", line
        unreadable: list[int] = []
        first_error: Exception | None = None
        names, no_name = 0, 0
        for i in range(n):
            yield "reading", i
            key = _image_key(i).decode()
            try:
                with _LOCK:
                    txn = _txn(r._key, r._live)
                    value, raw, stored = txn.get(_image_key(i)), txn.get(_record_key(i)), txn.get(_name_key(i))
            except lmdb.Error as exc:  # a page on the way is damaged: count the sample, go on in a new transaction
                with _LOCK:
                    _drop_txn(r._key)
                unreadable.append(i)
                first_error = first_error or exc
                continue
            length = 0xFFFFFFFF if stored is None else len(stored)  # as names_crc32 counts them
            names = zlib.crc32(struct.pack("<I", length) + (stored or b""), names)
            name = stored.decode("utf-8", "surrogateescape") if stored is not None else f"#{i}"
            if stored is None and no_name < 10:
                no_name += 1
                yield "problem", f"{r.path}: sample {i} has no name (key {_name_key(i).decode()})"
            if value is None:
                yield "problem", f"{r.path}: no value for sample {i} (key {key})"
                continue
            if raw is None:
                yield "problem", f"{r.path}: sample {i} ({name}): its record is missing (key {_record_key(i).decode()})"
            elif raw != rec[i].tobytes():
                yield "problem", (f"{r.path}: sample {i} ({name}): the index disagrees with its record (key "
                                  f"{_record_key(i).decode()})")  # fmt: skip
            if zlib.crc32(value) != int(rec[i]["crc32"]) or len(value) != int(rec[i]["nbytes"]):
                altered = "fails its checksum: the stored bytes were altered"
                yield "problem", f"{r.path}: sample {i} ({name}) {altered} (key {key})"
                continue
            yield "decoding", i
            try:
                size = validate_image(value, name)
                if size != (int(rec[i]["height"]), int(rec[i]["width"])):
                    recorded = (int(rec[i]["height"]), int(rec[i]["width"]))
                    yield "problem", f"{r.path}: sample {i} ({name}) decodes to {size}, recorded {recorded} (key {key})"
            except ValueError as exc:
                yield "problem", f"{r.path}: sample {i}: {exc} (key {key})"
        if unreadable:
            which = f"sample{'s' if len(unreadable) > 1 else ''} {_ranges(unreadable)}"
            yield "problem", (f"{r.path}: {len(unreadable)} of {n} samples cannot be read ({which}: "
                              f"{_lmdb_message(first_error)}): damaged LMDB pages; pack the source again")  # fmt: skip
        elif walk_error is not None:
            yield "problem", (f"{r.path}: walking the keys failed ({_lmdb_message(walk_error)}): damaged LMDB pages; "
                              "pack the source again")  # fmt: skip
        if "names_crc32" in meta and not unreadable and names != meta["names_crc32"]:
            yield "problem", (f"{r.path}: the stored sample names were altered (names_crc32 mismatch); images and "
                              "labels are checked separately; pack it again to restore the names")  # fmt: skip
    finally:
        r.close()


def verify_lmdb(path: str | os.PathLike, progress: Callable[[int, int], None] | None = None) -> list[str]:
    """Re-check everything a pack promises; the problems, one line each (empty: all good).

    The metadata's and the index's checksums (when the reader opens it), the index against every
    per-sample record, every value's CRC-32 and length, that it decodes to its recorded size, the
    names' CRC-32 (packs that record it), targets within the classes, split ids within the splits,
    that ``classes.json`` is the metadata's class map (see :func:`_classes_json_problems`), and that
    the pack holds exactly ``count`` samples and nothing else. Where liblmdb cannot read a
    part of the B-tree (an ``lmdb.Error``), the check goes on with the rest and one line counts the
    samples that cannot be read. This runs in this process: a page damaged so that liblmdb crashes
    kills it; :func:`verify_pack` runs it in a child process and reports that too.
    """
    global _TREE_CHECK
    problems: list[str] = []
    n = 0
    steps = _verify_steps(path)
    was, _TREE_CHECK = _TREE_CHECK, False  # what liblmdb cannot read is counted below, not refused at the door
    try:
        for kind, what in steps:
            if kind == "problem":
                problems.append(what)
            elif kind == "count":
                n = what
            elif kind == "reading" and progress and isinstance(what, int) and what:
                progress(what, n)
    except PackError as exc:
        return problems + [str(exc)]
    finally:
        steps.close()
        _TREE_CHECK = was
    if progress and n:
        progress(n, n)
    return problems


class VerifyReport(NamedTuple):
    """What :func:`verify_pack` found: the pack's sample count, the problems (one line each), how many samples were
    checked, and whether the check stopped there because its process crashed (the last problem says where)."""

    samples: int
    problems: list[str]
    checked: int
    crashed: bool = False


# run in a fresh interpreter with the caller's import path, so that it imports this very datakit
_CHILD = ("import json, sys; sys.path[:] = json.loads(sys.argv[1]); from datakit.lmdb import _verify_child; "
          "sys.exit(_verify_child(int(sys.argv[2]), sys.argv[3]))")  # fmt: skip
_CRASHES = ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT", "SIGSYS")


def verify_pack(path: str | os.PathLike, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """:func:`verify_lmdb` in a child process, which tells this one what it reads before it reads it.

    A page damaged so that liblmdb crashes (a node pointing past the file's end: SIGBUS or SIGSEGV) kills the
    child, not this process: it becomes one problem line naming the pack and what was being read,
    ``PACK: damaged LMDB data (the reader crashed with SIGBUS while reading sample 12); pack the source again``.
    What the child found before stays reported. Raises :class:`PackError` or :class:`UsageError` where the pack
    cannot be opened, as :class:`LmdbReader` does (a crash while opening it is a :class:`PackError`).
    """
    import signal
    import subprocess
    import tempfile

    def here() -> VerifyReport:
        r = LmdbReader(path, allow_incomplete=True)
        r.close()
        return VerifyReport(len(r), verify_lmdb(path, progress), len(r))

    if not sys.executable:  # an embedded interpreter that cannot start itself: check in this process
        return here()
    problems: list[str] = []
    n: int | None = None
    at: tuple[str, object] = ("reading", "the pack's metadata and index")
    failure: dict | None = None
    done = False
    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryFile() as err:
        try:
            where = json.dumps([os.fspath(p) for p in sys.path if isinstance(p, (str, os.PathLike))])
            cmd = [sys.executable, "-c", _CHILD, where, str(write_fd), os.fspath(path)]
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                    pass_fds=(write_fd,))  # fmt: skip
        except OSError:  # the interpreter cannot be started again (a path this user may not run): check here
            os.close(read_fd)
            proc = None
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        if proc is None:
            return here()
        try:
            with open(read_fd, "rb") as pipe:
                for line in pipe:
                    tag, body = line[:1], line[1:].rstrip(b"\n")
                    if tag == b"#":
                        at = ("reading", int(body))
                        if progress and n:
                            progress(at[1], n)
                    elif tag == b"~":
                        at = ("decoding", int(body))
                    elif tag == b"@":
                        at = ("reading", json.loads(body))
                    elif tag == b"!":
                        problems.append(json.loads(body))
                    elif tag == b"=":
                        n = int(body)
                    elif tag == b"E":
                        failure = json.loads(body)
                    elif tag == b".":
                        done = True
        finally:
            if proc.poll() is None and not done and failure is None:
                proc.kill()  # this process was interrupted (Ctrl-C): the child goes with it
            rc = proc.wait()
        err.seek(0)
        detail = err.read().decode(errors="replace").strip().splitlines()
    if failure is not None:
        from datakit import errors

        cls = getattr(errors, failure["type"], None)
        if not (isinstance(cls, type) and issubclass(cls, errors.DatakitError)):
            raise RuntimeError(f"{path}: verify's reader failed:\n{failure['traceback']}")
        if n is None or cls is errors.UsageError:
            raise cls(failure["message"])  # the pack cannot be opened: as LmdbReader raises it
        return VerifyReport(n, problems + [failure["message"]], at[1] if isinstance(at[1], int) else 0)
    if done and rc == 0:
        if progress and n:
            progress(n, n)
        return VerifyReport(n or 0, problems, n or 0)
    name = signal.Signals(-rc).name if rc < 0 and -rc in signal.valid_signals() else None
    if name == "SIGINT" or rc == 130:  # Ctrl-C reached the child alone
        raise KeyboardInterrupt
    kind, what = at
    what = f"sample {what}" if isinstance(what, int) else what
    if name in _CRASHES and kind == "decoding":
        line = f"{path}: the image decoder crashed with {name} while decoding {what}"
    elif name in _CRASHES:
        line = f"{path}: damaged LMDB data (the reader crashed with {name} while reading {what}); pack the source again"
    else:
        why = f"was killed by {name}" if name else f"failed (exit {rc}{': ' + detail[-1] if detail else ''})"
        raise PackError(f"{path}: verify's reader {why} while reading {what}")
    if n is None:
        raise PackError(line)
    checked = at[1] if isinstance(at[1], int) else 0
    return VerifyReport(n, problems + [line], checked, crashed=True)


def _verify_child(fd: int, path: str) -> int:
    """The child of :func:`verify_pack`: the steps of :func:`verify_lmdb`, each told through ``fd`` before it is
    taken (``#i`` reading sample i, ``~i`` decoding it, ``@"what"`` reading something else), then the problems
    (``!"line"``), the sample count (``=n``), an error that stopped it (``E{...}``) and the end (``.``)."""
    global _TREE_CHECK
    _TREE_CHECK = False

    def send(line: bytes) -> None:
        view = memoryview(line + b"\n")
        while view:
            view = view[os.write(fd, view) :]

    try:
        for kind, what in _verify_steps(path):
            if kind == "reading":
                send(b"#%d" % what if isinstance(what, int) else b"@" + json.dumps(what).encode())
            elif kind == "decoding":
                send(b"~%d" % what)
            elif kind == "count":
                send(b"=%d" % what)
            else:
                send(b"!" + json.dumps(what).encode())
        send(b".")
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1
    except Exception as exc:  # noqa: BLE001 - told to the parent, which raises it there
        send(b"E" + json.dumps({"type": type(exc).__name__, "message": str(exc),
                                "traceback": traceback.format_exc()}).encode())  # fmt: skip
        return 1
    return 0
