"""Text label tables split into columns: delimited tables (csv/tsv) and ``path label`` lists.

The common case (no quotes, the same number of fields on every line) is split with numpy over
the UTF-8 bytes, all lines at once: the delimiters, newlines and spaces are ASCII, and ASCII
bytes never occur inside a multi-byte UTF-8 character. Anything else (quoted fields, ragged
rows, title lines above the header, Unicode spaces to strip) goes through Python's ``csv``
module line by line. Both paths give the same columns.
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["Columns", "gather", "hash_spans", "holds", "parse_delimited", "parse_list", "span_keys"]

_WS = np.zeros(256, dtype=bool)
_WS[[9, 13, 32]] = True
# the spaces that part a list line's fields: ASCII ones, tabs, and the Unicode spaces a keyboard gives (a Chinese
# input method types U+3000, a web page copies U+00A0), read as the ASCII space they stand for
_SPACES = "\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000"
_LIST_LINE = re.compile(rf"(.*?)([ \t{_SPACES}]+)(\S+)")
_UNICODE_SPACE = re.compile(rb"\xc2\xa0|\xe1\x9a\x80|\xe2\x80[\x80-\x8a\xaf]|\xe2\x81\x9f|\xe3\x80\x80")  # in UTF-8
_HEADER_SCAN = 50


class Columns:
    """The data rows of a text table, column by column, with their line numbers.

    ``header`` is the header row (``None`` when there is none: then ``first_row`` is the first
    row, and the data start at it); ``bad`` lists ``(line, what)`` for lines that are not rows;
    ``unicode_separators`` lists ``(line, spaces)`` for list lines whose fields a Unicode space parts
    (a full-width one, U+3000), each with the spaces that are not ASCII.
    """

    def __init__(self, lines: np.ndarray, header: list[str] | None, header_line: int,
                 first_row: list[str] | None) -> None:  # fmt: skip
        self.lines = lines
        self.header = header
        self.header_line = header_line
        self.first_row = first_row
        self.bad: list[tuple[int, str]] = []
        self.unicode_separators: list[tuple[int, str]] = []
        self.short: list[tuple[int, int, str]] = []  # (row, fields, the row shown) of rows under the header's width
        self._buf: np.ndarray | None = None
        self._backslash = False
        self._spans: list[tuple[np.ndarray, np.ndarray]] = []
        self._rows: list[list[str]] | None = None
        self._strings: dict[int, tuple[tuple[np.ndarray, np.ndarray], np.ndarray]] = {}  # gathered once a column

    # -- the two backends -----------------------------------------------------------------

    @classmethod
    def from_spans(cls, raw: bytes, spans: list[tuple[np.ndarray, np.ndarray]], lines: np.ndarray,
                   header: list[str] | None, header_line: int, first_row: list[str] | None) -> Columns:  # fmt: skip
        """Columns as (start, end) byte spans of the UTF-8 text ``raw``."""
        out = cls(lines, header, header_line, first_row)
        out._buf, out._spans = np.frombuffer(raw, dtype=np.uint8), spans
        out._backslash = b"\\" in raw  # one C scan; most tables have no backslash to turn into a slash
        return out

    @classmethod
    def from_rows(cls, rows: list[list[str]], lines: Sequence[int], header: list[str] | None, header_line: int,
                  first_row: list[str] | None) -> Columns:  # fmt: skip
        out = cls(np.asarray(lines, dtype=np.int64), header, header_line, first_row)
        out._rows = rows
        return out

    def strings(self, col: int) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
        """((UTF-8 buffer, offsets), non-blank mask) of column ``col``, ``\\`` turned into ``/``; the same arrays
        each time (not to be written to)."""
        if col not in self._strings:
            self._strings[col] = self._gathered(col)
        return self._strings[col]

    def _gathered(self, col: int) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
        if self._rows is not None:
            values = [r[col] if col < len(r) else "" for r in self._rows]
            encoded = [v.replace("\\", "/").encode("utf-8", "surrogateescape") for v in values]
            offsets = np.zeros(len(encoded) + 1, np.int64)
            np.cumsum([len(b) for b in encoded], out=offsets[1:])
            data = np.frombuffer(b"".join(encoded), dtype=np.uint8).copy()
            return (data, offsets), offsets[1:] > offsets[:-1]
        starts, ends = self._spans[col]
        data, offsets = gather(self._buf, starts, ends)
        if self._backslash:
            data[data == 0x5C] = 0x2F
        return (data, offsets), ends > starts

    def coded(self, col: int) -> tuple[list[str], np.ndarray, np.ndarray]:
        """(distinct values in order of first appearance, int32 code per row, non-blank mask)."""
        if self._rows is not None:
            index: dict[str, int] = {}
            values = [r[col] if col < len(r) else "" for r in self._rows]
            codes = np.fromiter((index.setdefault(v, len(index)) for v in values), np.int32, count=len(values))
            return list(index), codes, np.asarray([bool(v) for v in values], dtype=bool)
        starts, ends = self._spans[col]
        n = len(starts)
        if not n:
            return [], np.zeros(0, np.int32), np.zeros(0, bool)
        import pandas as pd

        lens = ends - starts
        longest = lens.max()
        if longest <= 8:  # the value itself, as one 8-byte word, is an exact key
            key = short_keys(self._buf, starts, lens)
            parts: tuple[np.ndarray, ...] = (lens,)  # 'cat' and 'cat\0' share a key: their lengths tell them apart
        elif longest <= 16:  # the first and last eight bytes and the length are the value itself
            head, tail = edge_words(self._buf, starts, lens)
            parts = (head, tail, lens)
            with np.errstate(over="ignore"):
                key = (head * _P1 ^ tail) * _P2 ^ lens.astype(np.uint64)
        else:
            parts = hash_spans(self._buf, starts, lens)
            key = parts[0]
        inv, _ = pd.factorize(key)  # a hash table: linear time, codes in order of first appearance
        # codes appear in order, so a value's first row is where the running maximum first reaches it
        first = np.flatnonzero(np.r_[True, inv[1:] > np.maximum.accumulate(inv)[:-1]])
        if not all(np.array_equal(p, p[first][inv]) for p in parts):  # two values, one key: decode row by row
            raw = self._buf
            texts = [raw[s:e].tobytes().decode("utf-8", "surrogateescape") for s, e in zip(starts, ends)]
            index: dict[str, int] = {}
            codes = np.fromiter((index.setdefault(v, len(index)) for v in texts), np.int32, count=n)
            return list(index), codes, ends > starts
        values = [self._buf[starts[i] : ends[i]].tobytes().decode("utf-8", "surrogateescape") for i in first]
        return values, inv.astype(np.int32), ends > starts


_NEEDLES: dict[bytes, re.Pattern[bytes]] = {}


def holds(buf: np.ndarray, *needles: bytes) -> bool:
    """Whether any of ``needles`` occurs in the bytes of ``buf``, searched in place: a copy of a large buffer as
    ``bytes`` (to use ``in``) costs more than the search."""
    view = memoryview(np.ascontiguousarray(buf))
    for needle in needles:
        if (found := _NEEDLES.get(needle)) is None:
            found = _NEEDLES.setdefault(needle, re.compile(re.escape(needle)))
        if found.search(view) is not None:
            return True
    return False


_BLOCK = 1 << 18  # bytes per step of a pass over a whole text: its temporaries stay in the CPU's cache


def gather(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bytes of increasing, non-overlapping spans as one buffer plus offsets.

    A boolean mask, made by repeating "keep" and "skip" over the alternating runs of span and gap
    lengths (a running sum over every byte costs twice as much), then a masked copy; both a block
    of spans at a time.
    """
    n = len(starts)
    lens = ends - starts
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    out = np.empty(int(offsets[-1]), np.uint8)
    if not n:
        return out, offsets
    runs = np.empty(2 * n - 1, np.int64)  # span, gap, span, ..., span
    runs[0::2] = lens
    runs[1::2] = starts[1:] - ends[:-1]
    keep = np.zeros(2 * n - 1, bool)
    keep[0::2] = True
    cuts = np.unique(np.searchsorted(starts, np.arange(0, int(ends[-1]), _BLOCK)))  # first span of each block
    cuts = cuts[cuts < n].tolist()
    for a, b in zip(cuts, [*cuts[1:], n]):
        mask = np.repeat(keep[2 * a : 2 * b - 1], runs[2 * a : 2 * b - 1])
        out[offsets[a] : offsets[b]] = buf[starts[a] : ends[b - 1]][mask]
    return out, offsets


_P1, _P2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F)
_LONG_SPAN = 256  # bytes: longer spans are hashed one by one (hash_spans)
_LOW_BYTES = np.array([(1 << (8 * i)) - 1 for i in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


def words_at(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The little-endian 8-byte word starting at each of ``pos``, zero past the end of ``buf``.

    Read through an unaligned view of the buffer itself (no padded copy of it): a word that would
    run past the end is the buffer's last word shifted down.
    """
    if len(buf) < 8:
        padded = np.zeros(8, np.uint8)
        padded[: len(buf)] = buf
        return words_at(padded, np.minimum(pos, 8)) if len(buf) else np.zeros(len(pos), np.uint64)
    last = len(buf) - 8
    view = np.ndarray((last + 1,), dtype="<u8", buffer=buf, strides=(1,))
    if not len(pos) or pos.max() <= last:
        return view[pos]
    words = view[np.minimum(pos, last)]
    late = np.flatnonzero(pos > last)
    if len(late):
        words[late] >>= (8 * (pos[late] - last)).astype(np.uint64)
    return words


def edge_words(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first and the last eight bytes of every span as words, the bytes past a shorter span zeroed.

    Together with the length they are the span itself when it is at most 16 bytes long (the two
    words overlap or meet), so such spans compare exactly as three numbers.
    """
    head = words_at(buf, starts)
    tail = words_at(buf, np.maximum(starts + lens - 8, starts))
    if len(lens) and lens.min() < 8:
        keep = _LOW_BYTES[np.minimum(lens, 8)]
        head &= keep
        tail &= keep
    return head, tail


def short_keys(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Spans of at most 8 bytes as uint64 keys (the bytes, zero-padded): exact but for values that end in NUL
    bytes, which only their lengths tell apart."""
    return words_at(buf, starts) & _LOW_BYTES[np.minimum(lens, 8)]


def hash_spans(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray, two: bool = True) -> tuple[np.ndarray, ...]:
    """64-bit hashes of every span of ``buf`` (two independent ones unless ``two=False``), eight bytes at
    a time, all spans at once."""
    n = len(starts)
    lens = np.asarray(lens, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    # a span longer than any name or label (a note of megabytes): one round of the loop below is 8 of its bytes,
    # each round a few NumPy calls (1.8 s a MB); such spans are hashed by BLAKE2 instead. The method goes by the
    # length alone, so equal spans still hash alike
    long = np.flatnonzero(lens > _LONG_SPAN)
    if len(long):
        long_lens = lens[long]
        lens = lens.copy()
        lens[long] = 0
    h1 = lens.astype(np.uint64) * _P1
    h2 = lens.astype(np.uint64) * _P2 + np.uint64(1) if two else None
    rows: np.ndarray | None = None  # None: every row
    k = 0
    with np.errstate(over="ignore"):
        while True:
            rem = (lens if rows is None else lens[rows]) - 8 * k
            if rows is None:
                live = int(np.count_nonzero(rem > 0))
                if not live:
                    break
                if live < n // 2:
                    rows = np.flatnonzero(rem > 0)
                    rem = rem[rows]
            else:
                keep = rem > 0
                rows, rem = rows[keep], rem[keep]
                if not len(rows):
                    break
            w = words_at(buf, (starts if rows is None else starts[rows]) + 8 * k)
            if rem.min() < 8:
                w &= _LOW_BYTES[np.clip(rem, 0, 8)]
            if rows is None:
                np.bitwise_xor(h1, w, out=h1)
                np.multiply(h1, _P1, out=h1)
                if two:
                    np.add(h2, w, out=h2)
                    np.multiply(h2, _P2, out=h2)
            else:
                h1[rows] = (h1[rows] ^ w) * _P1
                if two:
                    h2[rows] = (h2[rows] + w) * _P2
            k += 1
    for r, ln in zip(long.tolist(), long_lens.tolist() if len(long) else ()):
        at = int(starts[r])
        digest = hashlib.blake2b(buf[at : at + ln], digest_size=16).digest()
        h1[r] = int.from_bytes(digest[:8], "little")
        if two:
            h2[r] = int.from_bytes(digest[8:], "little")
    return (h1, h2) if two else (h1,)


def span_keys(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """A cheap 64-bit key per span for finding repeated ones: its length and four of its words (the
    first, the middle and the last sixteen bytes, where file names that differ mostly differ).

    Equal spans always get equal keys; different spans seldom do, and only those that share a key
    are then hashed in full and compared.
    """
    starts = np.asarray(starts, dtype=np.int64)
    lens = np.asarray(lens, dtype=np.int64)
    head, tail = edge_words(buf, starts, lens)
    middle = words_at(buf, starts + np.maximum(lens - 8, 0) // 2)
    before_tail = words_at(buf, starts + np.maximum(lens - 16, 0))
    if len(lens) and lens.min() < 8:
        keep = _LOW_BYTES[np.minimum(lens, 8)]
        middle &= keep
        before_tail &= keep
    key = lens.astype(np.uint64) * _P2
    with np.errstate(over="ignore"):
        for w in (head, middle, before_tail, tail):
            np.bitwise_xor(key, w, out=key)
            np.multiply(key, _P1, out=key)
    return key


_SUSPECT_LEADS = (b"\xc2", b"\xe1", b"\xe2", b"\xe3")


def _edges_plain(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> bool:
    """No span starts or ends with a space that only Python's ``str.strip`` removes (NBSP, U+3000 ...)."""
    full = ends > starts
    s, e = starts[full], ends[full]
    if not len(s):
        return True
    b1, b2, b3 = _byte_before(buf, e, 1), _byte_before(buf, e, 2), _byte_before(buf, e, 3)
    bad = _SUSPECT_LEAD[buf[s]]
    bad |= (b2 == 0xC2) & ((b1 == 0xA0) | (b1 == 0x85))
    bad |= ((b3 == 0xE3) & (b2 == 0x80) & (b1 == 0x80)) | ((b3 == 0xE2) & ((b2 == 0x80) | (b2 == 0x81)))
    bad |= (b3 == 0xE1) & (b2 == 0x9A) & (b1 == 0x80)
    bad |= _CONTROL[b1]
    return not bad.any()


def _byte_before(buf: np.ndarray, pos: np.ndarray, k: int) -> np.ndarray:
    """The byte ``k`` places before each of ``pos``, 0 before the start of the buffer."""
    out = buf[np.maximum(pos - k, 0)]
    out[pos < k] = 0
    return out


_CONTROL = np.zeros(256, bool)
_CONTROL[[0x0B, 0x0C, 0x1C, 0x1D, 0x1E, 0x1F]] = True
_SUSPECT_LEAD = _CONTROL.copy()
_SUSPECT_LEAD[[0xC2, 0xE1, 0xE2, 0xE3]] = True


# ---------------------------------------------------------------------------------------------
# the numpy path


class _LowBytes:
    """Where the bytes up to ``top`` (newlines, ASCII spaces, controls, and a delimiter below the digits)
    are in a buffer: one pass over it for all of them, a block at a time, then small arrays (file names
    seldom hold such bytes, so there are few more of them than lines and delimiters)."""

    def __init__(self, buf: np.ndarray, top: int = 32) -> None:
        self.top = top
        self.size = len(buf)
        mask = np.empty(min(len(buf), _BLOCK), bool)
        parts = [np.zeros(0, np.int64)]
        for at in range(0, len(buf), _BLOCK):
            block = mask[: min(_BLOCK, len(buf) - at)]
            np.less_equal(buf[at : at + _BLOCK], top, out=block)
            parts.append(np.flatnonzero(block) + at)
        self.pos = np.concatenate(parts)
        self.found = buf[self.pos]
        self.counts = np.bincount(self.found, minlength=256)
        self._where: dict[int, np.ndarray] = {}
        plain = not (self.counts[9] or self.counts[13])
        # tabs, carriage returns and spaces: what the numpy path strips
        self.spaces = self.where(32) if plain else self.pos[_WS[self.found]]
        side = np.flatnonzero(self.pos[1:] - self.pos[:-1] == 1)
        self._pairs = (self.found[side], self.found[side + 1])  # low bytes side by side

    def where(self, byte: int) -> np.ndarray:
        if byte not in self._where:
            self._where[byte] = self.pos[self.found == byte] if self.counts[byte] else np.zeros(0, np.int64)
        return self._where[byte]

    def controls(self) -> bool:
        """Whether any control character that ``str.strip`` removes is present."""
        return bool(self.counts[_CONTROL].any())

    def spaced(self, byte: int) -> bool:
        """Whether an ASCII space is next to some ``byte`` (itself a low byte)."""
        left, right = self._pairs
        return bool((_WS[left] & (right == byte)).any() or ((left == byte) & _WS[right]).any())

    def edge_spaced(self) -> bool:
        """Whether some line starts or ends with an ASCII space: one at an end of the text or next to a
        newline."""
        s = self.spaces
        return bool(len(s)) and (s[0] == 0 or s[-1] == self.size - 1 or self.spaced(10))


def _may_have_suspects(raw: bytes, low: _LowBytes) -> bool:
    """Whether any byte that can start a space only ``str.strip`` removes is present: the controls are
    among the low bytes, the lead bytes of NBSP, U+3000 and the like are looked for with C scans (none
    in ASCII text)."""
    return low.controls() or (not raw.isascii() and any(lead in raw for lead in _SUSPECT_LEADS))


def _strip(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    starts, ends = starts.copy(), ends.copy()
    todo = np.flatnonzero(starts < ends)
    while len(todo):
        todo = todo[_WS[buf[starts[todo]]]]
        starts[todo] += 1
        todo = todo[starts[todo] < ends[todo]]
    todo = np.flatnonzero(starts < ends)
    while len(todo):
        todo = todo[_WS[buf[ends[todo] - 1]]]
        ends[todo] -= 1
        todo = todo[starts[todo] < ends[todo]]
    return starts, ends


def _next_to(buf: np.ndarray, pos: np.ndarray, byte: int) -> bool:
    """Whether any of ``pos`` has ``byte`` just before or just after it."""
    if not len(pos):
        return False
    before = buf[pos[pos > 0] - 1]
    after = buf[pos[pos < len(buf) - 1] + 1]
    return bool((before == byte).any() or (after == byte).any())


def _lines(buf: np.ndarray, low: _LowBytes, comments: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, line number) of every non-blank line, stripped; ``#`` lines dropped with ``comments``
    (which the caller passes only when the text holds a ``#``)."""
    nl = low.where(10)
    starts = np.empty(len(nl) + 1, np.int64)
    starts[0] = 0
    starts[1:] = nl + 1
    ends = np.empty(len(nl) + 1, np.int64)
    ends[:-1] = nl
    ends[-1] = len(buf)
    numbers = np.arange(1, len(starts) + 1, dtype=np.int64)
    if low.edge_spaced():
        starts, ends = _strip(buf, starts, ends)
    keep = ends > starts
    if comments:
        keep &= buf[np.minimum(starts, len(buf) - 1)] != ord("#")
    if keep[:-1].all():  # no blank line, except the empty one after a final newline
        n = len(keep) - (not keep[-1])
        return starts[:n], ends[:n], numbers[:n]
    return starts[keep], ends[keep], numbers[keep]


def _decode(buf: np.ndarray, s: int, e: int) -> str:
    return buf[s:e].tobytes().decode("utf-8", "surrogateescape")


def _per_line(marks: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray | None:
    """The positions ``marks`` as one row per line, when every line holds as many of them as the first.

    When there are exactly that many in all, checking each line's first and last is enough (the
    positions are sorted and the lines disjoint); else each line is counted (some lie outside the
    lines, as tabs stripped off their ends do).
    """
    n = len(starts)
    k = int(np.searchsorted(marks, ends[0]) - np.searchsorted(marks, starts[0]))
    if len(marks) == k * n:
        grid = marks.reshape(n, k)
        if k and not ((grid[:, 0] >= starts).all() and (grid[:, -1] < ends).all()):
            return None
        return grid
    first = np.searchsorted(marks, starts)
    if not (np.searchsorted(marks, ends) - first == k).all():
        return None
    return marks[first[:, None] + np.arange(k)]


def _fast_delimited(raw: bytes, delim: str, is_header: Callable[[list[str]], bool]) -> Columns | None:
    if b'"' in raw:
        return None
    buf = np.frombuffer(raw, dtype=np.uint8)
    code = ord(delim)
    low = _LowBytes(buf, code if 32 < code < 0x30 else 32)
    if code == 9:  # a tab starting a line is a blank first cell, which stripping the line would drop
        tabs = low.where(9)
        if len(tabs) and (tabs[0] == 0 or (buf[tabs[tabs > 0] - 1] == 10).any()):
            return None  # the Python path reads it (a line "\tb.jpg\tdog" has three fields)
    starts, ends, numbers = _lines(buf, low, comments=False)
    if not len(starts):
        return None
    grid = _per_line(low.where(code) if code <= low.top else np.flatnonzero(buf == code), starts, ends)
    if grid is None:
        return None
    k = grid.shape[1]
    # else no field has spaces to strip (lines are stripped already)
    padded = low.spaced(code) if code <= low.top else _next_to(buf, low.spaces, code)
    suspects = _may_have_suspects(raw, low)
    spans = []
    for j in range(k + 1):
        s = starts if j == 0 else grid[:, j - 1] + 1
        e = ends if j == k else grid[:, j]
        spans.append(_strip(buf, s, e) if padded else (s, e))
        if suspects and not _edges_plain(buf, *spans[-1]):
            return None
    row0 = [_decode(buf, int(s[0]), int(e[0])) for s, e in spans]
    if not is_header(row0):
        return None  # title lines above the header, or no header: the Python path looks further
    spans = [(s[1:], e[1:]) for s, e in spans]
    return Columns.from_spans(raw, spans, numbers[1:], row0, int(numbers[0]), None)


def _list_separators(buf: np.ndarray, low: _LowBytes, starts: np.ndarray, ends: np.ndarray) -> np.ndarray | None:
    """Where each line's fields part: its one tab when the text has tabs, else its last space."""
    tabs = low.where(9)
    if len(tabs):
        grid = _per_line(tabs, starts, ends)
        return grid[:, 0] if grid is not None and grid.shape[1] == 1 else None
    blanks = low.where(32)
    if len(blanks) == len(starts) and (blanks >= starts).all() and (blanks < ends).all():
        return blanks  # one space on every line, as most lists have
    last = np.searchsorted(blanks, ends) - 1
    if (last < 0).any():
        return None
    sep = blanks[last]
    if (sep < starts).any():
        return None  # a line with one field: the Python path reports it
    return sep


def _fast_list(raw: bytes, is_header: Callable[[list[str]], bool]) -> Columns | None:
    buf = np.frombuffer(raw, dtype=np.uint8)
    low = _LowBytes(buf)
    if not low.counts[9] and not raw.isascii() and _UNICODE_SPACE.search(raw):
        return None  # a Unicode space may part a line's fields (the numpy path parts them at ASCII spaces only)
    starts, ends, numbers = _lines(buf, low, comments=b"#" in raw)
    if not len(starts):
        return None
    sep = _list_separators(buf, low, starts, ends)
    if sep is None:
        return None
    if low.spaced(int(buf[sep[0]])) and (_WS[buf[sep - 1]].any() or _WS[buf[sep + 1]].any()):
        fs, fe = _strip(buf, starts, sep)
        ls, le = _strip(buf, sep + 1, ends)
    else:  # one space between the fields, lines already stripped
        fs, fe, ls, le = starts, sep, sep + 1, ends
    if (fe <= fs).any() or (le <= ls).any():
        return None
    if _may_have_suspects(raw, low) and not (_edges_plain(buf, fs, fe) and _edges_plain(buf, ls, le)):
        return None
    row0 = [_decode(buf, int(fs[0]), int(fe[0])), _decode(buf, int(ls[0]), int(le[0]))]
    spans = [(fs, fe), (ls, le)]
    if is_header(row0):
        return Columns.from_spans(raw, [(s[1:], e[1:]) for s, e in spans], numbers[1:], row0, int(numbers[0]), None)
    return Columns.from_spans(raw, spans, numbers, None, 0, None)


# ---------------------------------------------------------------------------------------------
# the Python path


def _slow_delimited(text: str, delim: str, is_header: Callable[[list[str]], bool],
                    heading: Callable[[str], str] | None = None) -> Columns:  # fmt: skip
    limit = csv.field_size_limit()
    if len(text) >= limit:  # a quoted note past the csv module's 131,072 characters: a field pandas reads too
        csv.field_size_limit(len(text) + 1)
    try:
        return _slow_delimited_rows(text, delim, is_header, heading)
    finally:
        csv.field_size_limit(limit)


def _slow_delimited_rows(text: str, delim: str, is_header: Callable[[list[str]], bool],
                         heading: Callable[[str], str] | None = None) -> Columns:  # fmt: skip
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delim)
    rows: list[list[str]] = []
    lines: list[int] = []
    last = 0
    raw_last: list[str] = []
    candidates: list[tuple[int, int, list]] = []
    for rec in reader:
        line = last + 1
        last = reader.line_num
        cells = [c.strip() for c in rec]
        if not any(cells):
            continue
        inner = _rows_inside(rec, delim) if last > line else []
        if inner:  # (judged below, against the table's other rows)
            candidates.append((line, last, inner))
        rows.append(cells)
        lines.append(line)
        raw_last = rec
    # a quote opened by mistake ('5 inch"...'), closed lines later: the rows between were one field's text, lost
    # without a word (their files then "not in the table", if on the disk at all). A line inside the field counts
    # as a row where it names an image and has as many fields as the table's rows (a note's second line,
    # "see backup.zip, page 2", does not)
    swallowed = []
    if candidates:
        whole = {ln for ln, *_ in candidates}
        plain = [r for r, ln in zip(rows, lines) if ln not in whole]
        widths = [len(r) for r in plain]
        width = max(set(widths), key=widths.count) if widths else 0  # the rows' usual width, not the widest's
        seen = [{r[k] for r in plain if k < len(r) and r[k]} for k in range(max(widths, default=0))]
        for line, last, parts in candidates:
            # a line in the field counts as a row where it has a row's fields, or holds a value of the rows' own
            # in its place ('b.png,dog' where the label column holds dog; not 'cat001.png, same shot')
            def row_like(fields: list[str]) -> bool:
                return len(fields) >= width or any(k < len(seen) and f and f in seen[k]
                                                   for k, f in enumerate(fields[1:], 1))  # fmt: skip

            inner = next((text for text, fields in parts if row_like(fields)), None)
            if inner is not None:
                swallowed.append((line, f"a quoted field runs over lines {line}-{last} and holds what reads as rows "
                                  f"of their own ({inner!r}); a quote opened by mistake? close it on its line, or "
                                  "quote no part of the name"))  # fmt: skip
    unclosed = None
    if rows and any("\n" in c or "\r" in c for c in raw_last):
        # the last record holds a line break: a quote never closed swallows the rest of the file. The reader
        # says so only by the record it gives; a closing quote put after the end then closes that field and
        # adds no record, where after a record that ended it would begin one more
        rest = "".join(io.StringIO(text, newline="").readlines()[lines[-1] - 1 :])
        rest += "" if rest.endswith(("\n", "\r")) else "\n"

        def records(t: str) -> int:
            return sum(1 for _ in csv.reader(io.StringIO(t, newline=""), delimiter=delim))

        if records(rest + '"\n') == records(rest):
            start = lines.pop()
            rows.pop()
            span = f"lines {start}-{last} read" if last > start else f"line {start} reads"
            unclosed = (start, f"a quote (\") opened on this line is never closed, so {span} as one field; close it, "
                        "or quote no part of the name")  # fmt: skip
            swallowed = [(n, why) for n, why in swallowed if n != start]  # said so, as never closed
    if swallowed:
        drop = {n for n, _ in swallowed}
        keep = [k for k, n in enumerate(lines) if n not in drop]
        rows, lines = [rows[k] for k in keep], [lines[k] for k in keep]
    for k, row in enumerate(rows[:_HEADER_SCAN]):
        if is_header(row):
            out = _fitting(rows[k + 1 :], lines[k + 1 :], row, lines[k], None, delim, "the header", heading)
            break
    else:
        out = _fitting(rows, lines, None, 0, rows[0] if rows else None, delim, "the first row")
    if unclosed is not None:
        out.bad.append(unclosed)
    out.bad += swallowed
    return out


_IMAGE_NAME = re.compile(r"\.(?:jpe?g|jpe|jfif|png|bmp|gif|webp|tiff?|jp2|pgm|ppm|pbm|pnm|avif|heic|dcm|exr|hdr)$",
                         re.IGNORECASE)  # fmt: skip


def _rows_inside(rec: list[str], delim: str) -> list[tuple[str, list[str]]]:
    """The lines inside a record's fields that may be rows of their own (an image's name, then the delimiter and
    more), each with its fields."""
    out = []
    for cell in rec:
        for part in cell.splitlines()[1:]:
            fields = [f.strip().strip('"') for f in part.split(delim)]
            if len(fields) >= 2 and fields[1] and _IMAGE_NAME.search(fields[0]):
                out.append((part, fields))
    return out


_NAMED_FILE = re.compile(r"\.[A-Za-z][A-Za-z0-9]{1,4}$")  # a name with an extension: b.jpg, 0001.png


def _fitting(rows: list[list[str]], lines: list[int], header: list[str] | None, header_line: int,
             first_row: list[str] | None, delim: str, what: str,
             heading: Callable[[str], str] | None = None) -> Columns:  # fmt: skip
    """Columns of the rows that fit the header's (or first row's) width; a row with more filled fields
    (an unquoted delimiter in a name: ``c,1.jpg,cat``) is a problem of its line, not a shifted row."""
    top = header if header is not None else first_row or []
    width = len(top)
    filled = [row for row in rows if any(f.strip() for f in row)]
    if (header is not None and width and filled and all(len(row) == width + 1 and row[width].strip() for row in filled)
            and header[0].strip()):  # fmt: skip
        # every row one field longer than the header, the last filled: R's write.table (and pandas' to_csv with
        # index_label=False) leave the row names' header cell out, so the first field is the row's name: where the
        # rows' first fields are no file names (1, 2, 3); or the header's first names a label's column ('label,score'
        # over 'a.jpg,cat,0.9'); or a file column over file names ('filename,label' over 'a.jpg,a.jpg,cat'). A file
        # first under 'path,label' with a field after the label is a name with an unquoted delimiter in it
        first = heading(header[0]) if heading is not None else ""
        files_second = all(_NAMED_FILE.search(row[1].strip()) for row in filled)
        if (not any(_NAMED_FILE.search(row[0].strip()) for row in filled) or first == "label"
                or (first == "file" and files_second)):  # fmt: skip
            header = top = ["", *header]
            width += 1
    keep, kept, bad, short = [], [], [], []
    for row, line in zip(rows, lines):
        if (delim == "\t" and width and len(row) > width and not row[0].strip() and top[0].strip()
                and _NAMED_FILE.search(row[1].strip())):  # fmt: skip
            row = row[1:]  # a line indented with a tab ("\tb.jpg\tdog"), not a blank first cell ("\tdog\textra")
        if width and any(row[width:]):
            shown = delim.join(row)  # a tab shows as \t in the repr
            bad.append((line, f"{len(row)} fields where {what} has {width} ({shown!r}); quote a name that holds "
                        f"{delim!r}"))  # fmt: skip
            continue
        if header is not None and len(row) < width:  # judged once the columns read are known (a note's cell may lack)
            shown = delim.join('"' + f.replace('"', '""') + '"' if delim in f or '"' in f else f for f in row)
            short.append((len(keep), len(row), repr(shown)))
        keep.append(row)
        kept.append(line)
    out = Columns.from_rows(keep, kept, header, header_line, first_row)
    out.bad += bad
    out.short = short
    return out


def _slow_list(text: str, is_header: Callable[[list[str]], bool]) -> Columns:
    rows: list[list[str]] = []
    lines: list[int] = []
    bad: list[tuple[int, str]] = []
    odd: list[tuple[int, str]] = []
    header, header_line = None, 0
    for n, line in enumerate(text.split("\n"), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if "\t" in s:
            fields = [f.strip() for f in s.split("\t")]
            if len(fields) != 2 or not all(fields):
                bad.append((n, f"expected 'path<TAB>label', got {len(fields)} fields: {s!r}"))
                continue
        else:
            m = _LIST_LINE.fullmatch(s)
            if m is None:
                comma = re.fullmatch(r"[^,;]+\.[A-Za-z0-9]{2,5}[,;][^,;]+", s)  # 0.jpg,cat: a CSV's line
                why = f"{s!r} has no label (expected 'path label')"
                if comma is not None:
                    sep = "," if "," in s else ";"
                    why = (
                        f"{s!r} has no label (expected 'path label'): its parts are separated by {sep!r}, as in a "
                        "table; name the file .csv with a header line (file,label), or separate them by a space"
                    )
                bad.append((n, why))
                continue
            fields = [m.group(1).strip(), m.group(3)]
            wide = "".join(c for c in m.group(2) if c not in " \t")
            if wide:
                odd.append((n, wide))
        if not rows and header is None and not bad and is_header(fields):
            header, header_line = fields, n
            continue
        rows.append(fields)
        lines.append(n)
    out = Columns.from_rows(rows, lines, header, header_line, None)
    out.bad = bad
    out.unicode_separators = odd
    return out


# ---------------------------------------------------------------------------------------------
# entry points


def parse_delimited(raw: bytes, text: str | None, delim: str, is_header: Callable[[list[str]], bool],
                    heading: Callable[[str], str] | None = None) -> Columns:  # fmt: skip
    """A delimited table (UTF-8 bytes ``raw`` and the same as ``text``, or None when ``raw`` is ASCII);
    the header is the first of the first 50 rows that ``is_header`` accepts. ``heading``: what column a header cell
    names, "file", "label" (a label's or split's) or "" (a header one field short of every row may have left out
    the row names' cell)."""
    return _fast_delimited(raw, delim, is_header) or _slow_delimited(_text_of(raw, text), delim, is_header, heading)


def parse_list(raw: bytes, text: str | None, is_header: Callable[[list[str]], bool]) -> Columns:
    """A ``path label`` list: one sample per line, the label the last field (after the last tab when
    there is one, else after the last run of spaces, a Unicode space such as U+3000 read as one),
    ``#`` comments and blank lines skipped."""
    return _fast_list(raw, is_header) or _slow_list(_text_of(raw, text), is_header)


def _text_of(raw: bytes, text: str | None) -> str:
    """``text``, decoded from ``raw`` only now when the caller left that to the Python path (ASCII)."""
    return text if text is not None else raw.decode("ascii")
