"""A check of an LMDB file's B-tree pages before liblmdb reads them.

liblmdb trusts its pages: a damaged page whose node gives a value a size, or an overflow page, past
the end of data.mdb makes a read touch memory outside the file, and the process dies of SIGBUS or
SIGSEGV (py-lmdb touches every page of a value as it returns it). :func:`tree_problem` walks the
current tree once, level by level with NumPy, and checks that every node a read can follow stays
inside its page, every page it leads to lies inside the file and is of the kind expected there,
and every value ends inside the file. A pack that passes is then read by liblmdb without leaving
the file; one that fails is refused in one line.

Format (liblmdb 0.9, 64-bit, what py-lmdb bundles): two meta pages, the one with the larger
transaction id current; 16-byte page headers (page number, flags, lower/upper or overflow page
count); node offsets after the header; nodes of 8 bytes (size or child page number, flags, key
size), then the key, then the value, or the first overflow page's number for a value of its own pages.
"""

from __future__ import annotations

import mmap
import os

import numpy as np

_MAGIC = 0xBEEFC0DE
_P_BRANCH, _P_LEAF, _P_OVERFLOW, _P_LEAF2 = 0x01, 0x02, 0x04, 0x20  # page kinds
_F_BIGDATA, _F_SUBDATA, _F_DUPDATA = 0x01, 0x02, 0x04
_HDR = 16  # page header
_NODE = 8  # node header
_NO_PAGE = 0xFFFFFFFFFFFFFFFF  # the root of an empty tree
_DB_RECORD = 48  # sizeof(MDB_db), a named database's record in the main tree
NAMED_DATABASES = "named databases"  # tree_problem's answer for another program's sound LMDB file that has them


def tree_problem(path: str | os.PathLike) -> str | None:
    """What is wrong with the main tree of the LMDB file ``path`` (a data.mdb), None when every page a
    read can reach is sound. Reads the tree's branch and leaf pages only (a value in overflow pages is
    checked by its page number and size, as liblmdb finds it)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 2 * 4096:
            return None if size == 0 else f"{size} bytes, shorter than LMDB's two meta pages"
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return _check(np.frombuffer(m, np.uint8), size)


def _db_record(value: np.ndarray, npages: int) -> bool:
    """Whether 48 bytes are a sound MDB_db, a named database's record (md_pad, md_flags, md_depth, then the page
    counts, md_entries and md_root): flags liblmdb knows, its root a page of the file (or none, when it holds
    nothing), its depth to match. A datakit pack's name or value of that size under a flipped flag is not one."""
    if len(value) != _DB_RECORD:
        return False
    flags, depth = (int(v) for v in value[4:8].view("<u2"))
    branch, leaf, overflow, entries, root = (int(v) for v in value[8:48].view("<u8"))
    if flags & ~0x7E or depth > 64:
        return False
    if root == _NO_PAGE:
        return depth == 0 and entries == 0 and branch == leaf == overflow == 0
    return 2 <= root < npages and depth >= 1 and leaf >= 1 and branch + leaf + overflow <= npages


def _meta(buf: np.ndarray, at: int) -> tuple[int, int, int] | None:
    """(transaction id, page size, main tree's root) of the meta page at byte ``at``, None if not one."""
    head = buf[at : at + 160].view(np.uint8)
    if len(head) < 152 or int(head[16:20].view("<u4")[0]) != _MAGIC:
        return None
    psize = int(head[40:44].view("<u4")[0])  # the free tree's md_pad holds the page size
    return int(head[144:152].view("<u8")[0]), psize, int(head[128:136].view("<u8")[0])


def _check(buf: np.ndarray, size: int) -> str | None:
    first = _meta(buf, 0)
    if first is None:
        return "its first page is not an LMDB meta page"
    second = _meta(buf, first[1]) if 512 <= first[1] <= 65536 else None
    metas = [m for m in (first, second) if m is not None]
    _, psize, root = max(metas)
    if psize < 512 or psize > 65536 or psize & (psize - 1):
        return f"page size {psize} in its meta page"
    if root == _NO_PAGE:
        return None
    npages = size // psize
    pages = buf[: npages * psize].reshape(npages, psize)
    level, seen, depth = np.array([root], np.int64), 0, 0
    while len(level):
        depth += 1
        if depth > 64 or seen > npages:
            return "its tree has a loop"
        seen += len(level)
        if (level < 2).any() or (level >= npages).any():
            return f"a tree page number {int(level[(level < 2) | (level >= npages)][0])} is outside the file"
        head = pages[level, :_HDR]
        flags = head[:, 10].astype(np.int64) | (head[:, 11].astype(np.int64) << 8)
        lower = head[:, 12].astype(np.int64) | (head[:, 13].astype(np.int64) << 8)
        upper = head[:, 14].astype(np.int64) | (head[:, 15].astype(np.int64) << 8)
        kind = flags & (_P_BRANCH | _P_LEAF | _P_OVERFLOW | _P_LEAF2)
        branch = kind == _P_BRANCH
        if not (branch | (kind == _P_LEAF)).all():
            bad = int(level[~(branch | (kind == _P_LEAF))][0])
            return f"page {bad} is not a tree page where the tree leads, flags {int(flags[level == bad][0]):#x}"
        if (branch.any() and not branch.all()) or not ((lower >= _HDR) & (lower <= upper) & (upper <= psize)).all():
            return "a tree page's layout is damaged"
        counts = (lower - _HDR) // 2
        if branch.all() and (counts < 2).any():  # liblmdb asserts a branch has two keys or more, and aborts
            return f"branch page {int(level[counts < 2][0])} holds {int(counts[counts < 2][0])} keys"
        n = int(counts.sum())
        owner = np.repeat(np.arange(len(level)), counts)
        slot = np.arange(n) - np.repeat(np.cumsum(counts) - counts, counts)
        rows = pages[level]
        ptr_at = _HDR + 2 * slot
        node = rows[owner, ptr_at].astype(np.int64) | (rows[owner, ptr_at + 1].astype(np.int64) << 8)
        if ((node < upper[owner]) | (node + _NODE > psize)).any():
            return "a node lies outside its page"
        lo = rows[owner, node].astype(np.int64) | (rows[owner, node + 1].astype(np.int64) << 8)
        hi = rows[owner, node + 2].astype(np.int64) | (rows[owner, node + 3].astype(np.int64) << 8)
        nflags = rows[owner, node + 4].astype(np.int64) | (rows[owner, node + 5].astype(np.int64) << 8)
        ksize = rows[owner, node + 6].astype(np.int64) | (rows[owner, node + 7].astype(np.int64) << 8)
        keyed = node + _NODE + ksize
        if branch.all():
            if (keyed > psize).any():
                return "a key runs past its page"
            level = np.unique(lo | (hi << 16) | (nflags << 32))
            continue
        sub = (nflags & (_F_SUBDATA | _F_DUPDATA)) != 0
        if sub.any():
            # a named database's record: flags F_SUBDATA alone and its 48-byte MDB_db as the value (what
            # env.open_db(b"images") writes); a datakit pack has none, so the file is another program's
            named = all(_db_record(rows[o, at : at + _DB_RECORD], npages) for o, at in zip(owner[sub], keyed[sub]))
            named &= bool(((nflags[sub] == _F_SUBDATA) & ((lo | (hi << 16))[sub] == _DB_RECORD)).all())
            return NAMED_DATABASES if named else "a node of a kind these packs never hold, a sub-tree"
        data = lo | (hi << 16)
        big = (nflags & _F_BIGDATA) != 0
        if ((keyed + np.where(big, 8, data)) > psize).any():
            return "a value runs past its page: a damaged size"
        if big.any():  # the value's pages follow the first: its last byte must lie inside the file
            at = keyed[big]
            o = owner[big]
            first_page = np.zeros(len(at), np.int64)
            for b in range(8):  # the overflow page number, little-endian, byte by byte
                first_page |= rows[o, at + b].astype(np.int64) << (8 * b)
            if ((first_page < 2) | (first_page >= npages) | (first_page * psize + _HDR + data[big] > size)).any():
                return "a value runs past the end of the file: a damaged size or page number"
        level = np.zeros(0, np.int64)
    return None
