"""Zip archives whose member names use any legacy encoding: detection, safe extraction, reading in place.

Chinese Windows writes member names as GBK bytes without the UTF-8 flag; Japanese, Traditional
Chinese and Korean systems do the same with their code pages, and macOS tools write UTF-8 without
the flag. The raw name bytes are read from the central directory (never re-encoded from
``zipfile``'s cp437 guess) and decoded per member: the UTF-8 flag first, then a valid Info-ZIP
Unicode Path field, then one encoding chosen for the whole archive.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import io
import logging
import lzma
import os
import posixpath
import re
import shlex
import shutil
import stat
import struct
import sys
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from datakit.errors import ArchiveError, UsageError
from datakit.filenames import EncodingGuess, decode_name, decodes, flagged_legacy, guess_encoding, host_family
from datakit.io import _umask, refuse_unreadable_names
from datakit.parallel import hold_interrupts, release_interrupts

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("datakit")

__all__ = [
    "DEFAULT_MAX_MEMBER",
    "DEFAULT_MAX_RATIO",
    "DEFAULT_MAX_TOTAL",
    "ArchiveError",
    "EncodingGuess",
    "ExtractReport",
    "ZipMember",
    "ZipReader",
    "detect_encoding",
    "read_members",
    "safe_relpath",
    "unzip",
]

SUPPORTED_METHODS = {0: "stored", 8: "deflate", 12: "bzip2", 14: "lzma"}
METHOD_NAMES = {9: "Deflate64", 93: "Zstandard", 95: "XZ", 96: "JPEG", 97: "WavPack", 98: "PPMd", 99: "AES"}
DEFAULT_MAX_RATIO = 200.0
DEFAULT_MAX_TOTAL = 100 * 2**30
DEFAULT_MAX_MEMBER = 1 << 30  # per member read in place: held in memory whole
_RATIO_MIN_SIZE = 1 << 20  # tiny members compress absurdly well without being bombs
_CHUNK = 1 << 20
_Zlib = type(zlib.decompressobj())


def _link_text(raw: bytes, m: ZipMember) -> str:
    """A symbolic link member's target, in the encoding its own name was read in: the tool that stored the
    name as GBK bytes stored the target so too; UTF-8 where the bytes are no text in that encoding but are
    UTF-8, and for flagged names. Bytes that are no text in either become U+FFFD."""
    if m.name_source in ("utf-8 flag", "unicode path field", "ascii", "utf-8") or raw.isascii():
        return raw.decode("utf-8", errors="replace")
    if not decodes(raw, m.name_source) and decodes(raw, "utf-8", windows=False):
        return raw.decode("utf-8")  # no text in the names' encoding, and UTF-8 (a tool of another locale wrote it)
    return decode_name(raw, m.name_source)


@dataclass(frozen=True)
class ZipMember:
    """One central-directory entry, with its raw and decoded name."""

    index: int
    raw_name: bytes
    name: str
    name_source: str
    file_size: int
    compress_size: int
    method: int
    flags: int
    crc: int
    date_time: tuple[int, int, int, int, int, int]
    unix_mode: int | None
    header_offset: int
    external_attr: int = 0
    # its local header holds other name bytes: set where the local headers are read (refuse_overlaps)
    local_name_differs: bool = field(default=False, compare=False)

    @property
    def is_dir(self) -> bool:
        if self.name.endswith("/"):
            return True
        if self.unix_mode is not None:
            return stat.S_ISDIR(self.unix_mode)
        # MS-DOS/Windows tools may mark a folder only by the directory attribute, without a slash
        return bool(self.external_attr & 0x10) and self.file_size == 0

    @property
    def is_symlink(self) -> bool:
        return self.unix_mode is not None and stat.S_ISLNK(self.unix_mode)

    @property
    def folder_and_link(self) -> bool:
        """Named as a folder (a trailing '/') with a symbolic link's mode: neither is made, nor read in place."""
        return self.is_symlink and self.name.replace("\\", "/").endswith("/")

    @property
    def encrypted(self) -> bool:
        return bool(self.flags & 0x1)


@dataclass
class ExtractReport:
    """What :func:`unzip` did: files written, files already there and identical, problems."""

    encoding: EncodingGuess
    extracted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


# ---------------------------------------------------------------------------------------------
# Reading the central directory


def _central_directory(zf: zipfile.ZipFile) -> list[tuple[bytes, int, bytes]]:
    """(raw name, flags, extra) for every central-directory entry, in order."""
    fp = zf.fp
    assert fp is not None
    fp.seek(zf.start_dir)
    data = fp.read()
    out, pos = [], 0
    for _ in zf.infolist():
        if data[pos : pos + 4] != b"PK\x01\x02" or pos + 46 > len(data):
            raise zipfile.BadZipFile("central directory entry is damaged")
        flags = struct.unpack_from("<H", data, pos + 8)[0]
        nlen, elen, clen = struct.unpack_from("<HHH", data, pos + 28)
        name = data[pos + 46 : pos + 46 + nlen]
        extra = data[pos + 46 + nlen : pos + 46 + nlen + elen]
        out.append((name, flags, extra))
        pos += 46 + nlen + elen + clen
    return out


def _unicode_path(raw: bytes, extra: bytes) -> str | None:
    """The name from a valid Info-ZIP Unicode Path field (0x7075), or None."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, size = struct.unpack_from("<HH", extra, pos)
        body = extra[pos + 4 : pos + 4 + size]
        valid = tag == 0x7075 and len(body) >= 5 and body[0] == 1
        if valid and struct.unpack_from("<I", body, 1)[0] == zlib.crc32(raw):
            try:
                return body[5:].decode("utf-8")
            except UnicodeDecodeError:
                return None
        pos += 4 + size
    return None


def _has_field(extra: bytes, tag: int) -> bool:
    pos = 0
    while pos + 4 <= len(extra):
        t, size = struct.unpack_from("<HH", extra, pos)
        if t == tag:
            return True
        pos += 4 + size
    return False


def _local_unicode_path(path: str | os.PathLike, info: zipfile.ZipInfo, central_extra: bytes) -> str | None:
    """The Unicode Path name when its CRC matches the *local* header's name instead of the central one.

    Some writers change the central directory's name after computing the field from the local
    header (libarchive's ``test_read_format_zip_7075_utf8_paths.zip`` is such an archive); the
    local header's own field is tried too.
    """
    try:
        with open(path, "rb") as f:
            f.seek(info.header_offset)
            head = f.read(30)
            if len(head) < 30 or head[:4] != b"PK\x03\x04":
                return None
            nlen, elen = struct.unpack_from("<HH", head, 26)
            local = f.read(nlen + elen)
    except OSError:
        return None
    name, extra = local[:nlen], local[nlen:]
    return _unicode_path(name, central_extra) or _unicode_path(name, extra)


class _Unflagged(io.RawIOBase):
    """An archive file read with the UTF-8 flag (bit 11) cleared in some headers: a few bytes replaced as read."""

    def __init__(self, path: str | os.PathLike, patches: dict[int, int]) -> None:
        self._f = open(path, "rb")  # noqa: SIM115 (closed with this object)
        self.name = os.fspath(path)
        self._at = sorted(patches)
        self._patches = patches

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def readinto(self, buffer) -> int:
        start = self._f.tell()
        n = self._f.readinto(buffer)
        for k in range(bisect.bisect_left(self._at, start), bisect.bisect_left(self._at, start + n)):
            buffer[self._at[k] - start] = self._patches[self._at[k]]
        return n

    def close(self) -> None:
        self._f.close()
        super().close()


def _flag_patches(
    path: str | os.PathLike, base: dict[int, int] | None = None
) -> tuple[dict[int, int], int, bytes] | None:
    """Where to clear the UTF-8 flag of every flagged member (central and local header), when a flagged name is
    not UTF-8: (patches, flagged names, the first name that is not UTF-8); None when none is, or the central
    directory cannot be walked (zipfile's own error stands then)."""
    try:
        with io.BufferedReader(_Unflagged(path, base)) if base else open(path, "rb") as f:  # noqa: SIM115
            end = zipfile._EndRecData(f)
            if not end:
                return None
            size_cd, offset_cd = end[zipfile._ECD_SIZE], end[zipfile._ECD_OFFSET]
            concat = end[zipfile._ECD_LOCATION] - size_cd - offset_cd
            if end[zipfile._ECD_SIGNATURE] == zipfile.stringEndArchive64:
                concat -= zipfile.sizeEndCentDir64 + zipfile.sizeEndCentDir64Locator
            f.seek(offset_cd + concat)
            cd = f.read(size_cd)
            patches, flagged, broken, pos = {}, 0, None, 0
            while pos + 46 <= len(cd) and cd[pos : pos + 4] == b"PK\x01\x02":
                flags = struct.unpack_from("<H", cd, pos + 8)[0]
                nlen, xlen, clen = struct.unpack_from("<HHH", cd, pos + 28)
                offset = struct.unpack_from("<I", cd, pos + 42)[0]
                raw, extra = cd[pos + 46 : pos + 46 + nlen], cd[pos + 46 + nlen : pos + 46 + nlen + xlen]
                if flags & 0x800:
                    flagged += 1
                    if broken is None and not decodes(raw, "utf-8", windows=False):
                        broken = raw
                    patches[offset_cd + concat + pos + 9] = (flags >> 8) & ~0x08
                    offset = _zip64_offset(offset, struct.unpack_from("<II", cd, pos + 20), extra)
                    f.seek(offset + concat)
                    head = f.read(30)
                    if len(head) == 30 and head[:4] == b"PK\x03\x04" and head[7] & 0x08:
                        patches[offset + concat + 7] = head[7] & ~0x08
                pos += 46 + nlen + xlen + clen
    except (OSError, struct.error, ValueError):
        return None
    return (patches, flagged, broken) if broken is not None else None


def _zip64_offset(offset: int, sizes: tuple[int, int], extra: bytes) -> int:
    """A central-directory entry's local header offset, from its ZIP64 field where it says 0xFFFFFFFF."""
    if offset != 0xFFFFFFFF:
        return offset
    pos = 0
    while pos + 4 <= len(extra):
        tag, n = struct.unpack_from("<HH", extra, pos)
        if tag == 1:
            skip = 8 * sum(v == 0xFFFFFFFF for v in sizes)  # the sizes come first, where they are there
            return struct.unpack_from("<Q", extra, pos + 4 + skip)[0]
        pos += 4 + n
    return offset


def _comment_patches(path: str | os.PathLike) -> dict[int, int] | None:
    """Where the archive's comment holds the end record's signature (``PK\\x05\\x06``, "made by scanner PK..."):
    zipfile takes the last one in the file for the end record and refused a valid archive as "not a zip file".
    Asked only where zipfile refused the archive: the end record is then the last whose comment ends the file (one
    hidden in a member's data comes before it), and the signatures after it are patched out as read. None where
    it is the last signature."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - (1 << 16) - 22)
            f.seek(start)
            tail = f.read()
    except OSError:
        return None
    at = len(tail)
    while (at := tail.rfind(zipfile.stringEndArchive, 0, at)) >= 0:  # the last whose comment ends the file
        if at + 22 + int.from_bytes(tail[at + 20 : at + 22], "little") == len(tail):
            patches, found = {}, at
            while (found := tail.find(zipfile.stringEndArchive, found + 1)) >= 0:
                patches[start + found] = 0  # "\0K\x05\x06": comment text to zipfile, no signature
            return patches or None
    return None


def _open_zip(path: str | os.PathLike) -> zipfile.ZipFile:
    try:
        mode = os.stat(path).st_mode if isinstance(path, (str, bytes, os.PathLike)) else None  # or a file object
    except OSError:
        mode = None  # zipfile says why below
    if (
        mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)
    ):  # a FIFO would block, /dev/zero fill memory
        what = (
            "a pipe" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket"
        )
        raise UsageError(f"{path}: {what}, not a regular file; a zip archive is read from a file")
    if mode is not None and stat.S_ISREG(mode):
        _refuse_split_part(path)
    try:
        return _flag_tolerant(path, {})
    except ArchiveError:
        # zipfile takes the last end-record signature in the file: one in the archive's comment ("made by scanner
        # PK\x05\x06") made a valid archive unreadable; read it again with those in the comment hidden
        comment = _comment_patches(path) if mode is not None else None
        if not comment:
            raise
    # (the retry's own error, where it fails too, says more: two archives joined, a damaged directory)
    return _flag_tolerant(path, comment)


def _refuse_split_part(path: str | os.PathLike) -> None:
    """Refuse the last part of a split archive (``zip -s``, WinZip's split: ``ds.z01``, ``ds.z02`` ... beside
    ``ds.zip``), whose end record numbers its disk: its directory lists every member, but their bytes are in the
    other parts, and each read failed as "past the end of the file (a damaged or forged directory)"."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - 65557))
            tail = f.read()
    except OSError:
        return  # zipfile says why
    # the last end record whose comment ends the file (a signature in the comment's text, "made by scanner
    # PK\x05\x06 v2.3", is no end record); where none does (bytes appended after it), the last one
    last = at = tail.rfind(b"PK\x05\x06", 0, len(tail) - 18)  # (22 bytes at least)
    while at >= 0 and at + 22 + struct.unpack_from("<H", tail, at + 20)[0] != len(tail):
        at = tail.rfind(b"PK\x05\x06", 0, at)
    if at < 0:
        at = last
    if at < 0:
        return
    disk, cd_disk = struct.unpack_from("<HH", tail, at + 4)
    z64 = at - 20  # a ZIP64 locator: the disks are counted there
    if z64 >= 0 and tail[z64 : z64 + 4] == b"PK\x06\x07":
        disks = struct.unpack_from("<I", tail, z64 + 16)[0]  # the total number of disks (0 or 1: one file)
        if disks <= 1:
            return
        disk, cd_disk = disks - 1, 0
    elif (disk, cd_disk) == (0xFFFF, 0xFFFF):  # the ZIP64 marker without a ZIP64 record: read as one file
        return
    if disk == 0 and cd_disk == 0:
        return
    stem = os.path.splitext(os.path.basename(os.fspath(path)))[0]
    others = [f"{stem}.z{k:02d}" for k in range(1, disk + 1)]
    named = " and ".join(others) if len(others) <= 2 else f"{others[0]} ... {others[-1]}"
    raise ArchiveError(f"{path}: the last part of a split archive of {disk + 1} parts (made by zip -s or WinZip's "
                       f"split), whose members are in the others, {named}: join the parts, all in one folder, into "
                       f"one archive first (zip -s 0 {shlex.quote(os.fspath(path))} --out whole.zip), then read "
                       "that")  # fmt: skip


def _flag_tolerant(path: str | os.PathLike, patches: dict[int, int]) -> zipfile.ZipFile:
    """The archive read with ``patches`` applied (none: the file as it is), and where a name flagged UTF-8 is not
    UTF-8, again with every UTF-8 flag cleared as well."""
    try:
        return _patched_zip(path, patches)
    except UnicodeDecodeError as exc:  # Python's zipfile decodes a flagged name strictly, before anything else
        found = _flag_patches(path, patches)
        if found is None:
            raise ArchiveError(_not_utf8(path, exc)) from None
    # the tool set the flag whatever the bytes: none of its flags is trusted
    flags, flagged, broken = found
    try:
        zf = _patched_zip(path, {**patches, **flags})
    except UnicodeDecodeError as exc:  # (every flag is cleared: a local header's, read later, may still say so)
        raise ArchiveError(_not_utf8(path, exc)) from None
    zf.flag_ignored = (flagged, broken)
    return zf


def _patched_zip(path: str | os.PathLike, patches: dict[int, int]) -> zipfile.ZipFile:
    if not patches:
        return _zipfile(path, path)
    f = io.BufferedReader(_Unflagged(path, patches))
    try:
        zf = _zipfile(path, f)
    except BaseException:
        f.close()
        raise
    zf._filePassed = 0  # closed with the archive
    return zf


def _not_utf8(path, exc: UnicodeDecodeError) -> str:
    raw = exc.object[max(0, exc.start - 8) : exc.end + 8]
    legacy = next((f"{exc.object.decode(e)!r} in {e.upper()}, " for e in ("gbk", "big5")
                   if decodes(exc.object, e, windows=False)), "")  # fmt: skip
    return (f"{path}: a member name is flagged UTF-8 but is not UTF-8 ({legacy}bytes {raw.hex(' ')}): "
            "the tool that made the archive set the flag on legacy (GBK?) names, and a flagged name "
            "is read as UTF-8 whatever --encoding says; make it again without the flag, or with UTF-8 "
            "names")  # fmt: skip


def _zipfile(path, file) -> zipfile.ZipFile:
    """``zipfile.ZipFile(file)``, its errors as datakit's (a UnicodeDecodeError, a name flagged UTF-8 that is not,
    is left to the caller)."""
    try:
        zf = zipfile.ZipFile(file)
        joined = _joined_archive(zf)
    except (FileNotFoundError, UnicodeDecodeError):
        raise
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, not a zip archive") from None
    except PermissionError:
        raise ArchiveError(f"{path}: cannot be read (permission denied)") from None
    except NotImplementedError as exc:  # a member needs a later ZIP version than zipfile reads ("zip file version 6.4")
        raise ArchiveError(f"{path}: a member needs a newer ZIP format than this reader knows ({exc}); "
                           "make the archive again with a common zip tool") from None  # fmt: skip
    except zipfile.BadZipFile as exc:
        text = str(exc).lower()
        if "zip64 extra field" in text or "corrupt extra field" in text:  # one member's central entry damaged
            try:
                name = _bad_extra_member(path)
            except (struct.error, ValueError):  # a directory that cannot be walked either
                name = None
            which = f"member {name!r}" if name is not None else "a member"
            field = "ZIP64 size field" if "zip64" in text else "extra field"
            raise ArchiveError(f"{path}: {which}: its {field} in the central directory is damaged ({exc}); "
                               "the archive's list of members cannot be read past it: make the archive again, or "
                               "extract what a repair tool (zip -FF) recovers") from None  # fmt: skip
        raise ArchiveError(f"{path}: not a zip archive, or truncated ({exc})") from None
    except (OSError, ValueError, EOFError, OverflowError) as exc:
        raise ArchiveError(f"{path}: not a zip archive, or truncated ({exc})") from None
    if joined is None and _within_another(zf):
        zf.close()
        raise ArchiveError(f"{path}: truncated: its last end record is that of a zip stored within it (a member at "
                           "the start of the file is not in that record's list), the archive's own end is missing; "
                           "download or copy it again")  # fmt: skip
    if joined is not None:
        zf.close()
        raise ArchiveError(f"{path}: two zip archives joined into one file (cat a.zip b.zip?): the {joined[0]} bytes "
                           f"before this archive's members hold another archive, of {joined[1]} members, which zip "
                           "readers skip; extract that one on its own, or zip all the files again as one "
                           "archive")  # fmt: skip
    return zf


def _within_another(zf: zipfile.ZipFile) -> bool:
    """Whether the file starts with a member's local header that the end record read lists not, its first member
    further on: the end record found is a stored member's (a zip, an .xlsx, stored in an archive cut short after
    it; zip readers look for it in the last 64 KiB, and would read the inner archive alone without a word). A
    self-extractor's program before the members starts otherwise."""
    first = min((i.header_offset for i in zf.infolist()), default=0)
    if first <= 0 or zf.fp is None or first >= zf.fp.seek(0, os.SEEK_END):  # (outside: said of its member)
        return False
    zf.fp.seek(first)
    if zf.fp.read(4) != b"PK\x03\x04":  # (no member there: said of it when it is read)
        return False
    zf.fp.seek(0)
    return zf.fp.read(4) == b"PK\x03\x04"


def _joined_archive(zf: zipfile.ZipFile) -> tuple[int, int] | None:
    """(bytes before the first member, members of the archive there) when those bytes end in another whole zip
    archive (``cat a.zip b.zip``, a zip appended to a zip): zip readers take the last archive alone, as after a
    self-extractor's program, and the first one's members would be lost without a word. None otherwise (a
    self-extractor's program holds no end record whose central directory starts with an entry)."""
    infos = zf.infolist()
    first = min((i.header_offset for i in infos), default=0)
    if first < 22 or zf.fp is None:
        return None
    fp = zf.fp
    if first > fp.seek(0, os.SEEK_END):  # an offset outside the file: said of its member when it is read
        return None
    start = max(0, first - 65557)  # an end record and the longest comment
    fp.seek(start)
    tail = fp.read(first - start)
    at = tail.rfind(b"PK\x05\x06")
    while at >= 0:
        if at + 22 <= len(tail):
            count, cd_size = struct.unpack("<HI", tail[at + 10 : at + 16])
            cd_at = start + at - cd_size
            z64 = at - 76  # a ZIP64 end record (56 bytes) and its locator (20) before the end record: theirs count
            if z64 >= 0 and tail[at - 20 : at - 16] == b"PK\x06\x07" and tail[z64 : z64 + 4] == b"PK\x06\x06":
                count, cd_size = struct.unpack("<QQ", tail[z64 + 32 : z64 + 48])
                cd_at = start + z64 - cd_size
            if count and cd_at >= 0:
                fp.seek(cd_at)
                if fp.read(4) == b"PK\x01\x02":
                    return first, count
        at = tail.rfind(b"PK\x05\x06", 0, at)
    return None


def _bad_extra_member(path) -> str | None:
    """The name of the first central-directory entry whose extra field is damaged: a field running past the extra
    area, or sizes or offset saying 0xFFFFFFFF (look in the ZIP64 extra field) without a ZIP64 field long enough to
    hold them; None when none is found (or the directory cannot be walked)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 65557))
            tail = f.read()
            end = tail.rfind(b"PK\x05\x06")
            if end < 0 or len(tail) < end + 22:
                return None
            count, cd_size, cd_offset = struct.unpack("<HII", tail[end + 10 : end + 20])
            f.seek(cd_offset)
            cd = f.read(min(cd_size, 64 << 20))
    except (OSError, struct.error):
        return None
    pos = 0
    for _ in range(count):
        if cd[pos : pos + 4] != b"PK\x01\x02" or len(cd) < pos + 46:
            return None
        flags, csize, usize = struct.unpack("<H10xII", cd[pos + 8 : pos + 28])
        nlen, xlen, clen = struct.unpack("<HHH", cd[pos + 28 : pos + 34])
        offset = struct.unpack("<I", cd[pos + 42 : pos + 46])[0]
        raw = cd[pos + 46 : pos + 46 + nlen]
        extra = cd[pos + 46 + nlen : pos + 46 + nlen + xlen]
        need = 8 * sum(v == 0xFFFFFFFF for v in (usize, csize, offset))
        have, k, torn = 0, 0, False
        while k + 4 <= len(extra):
            tag, n = struct.unpack("<HH", extra[k : k + 4])
            torn = torn or k + 4 + n > len(extra)
            if tag == 1:
                have = min(n, len(extra) - k - 4)
            k += 4 + n
        if torn or (need and have < need):
            return raw.decode("utf-8" if flags & 0x800 else "gbk", "replace")
        pos += 46 + nlen + xlen + clen
    return None


def read_members(
    path: str | os.PathLike, encoding: str = "auto", *, zf: zipfile.ZipFile | None = None
) -> tuple[list[ZipMember], EncodingGuess]:
    """Every member of the archive with its decoded name, and the encoding used for unflagged names."""
    own = zf is None
    zf = _open_zip(path) if zf is None else zf
    try:
        try:
            entries = _central_directory(zf)
        except (zipfile.BadZipFile, struct.error) as exc:
            raise ArchiveError(f"{path}: damaged central directory ({exc})") from None
        infos = zf.infolist()
        ignored = getattr(zf, "flag_ignored", None)
    finally:
        if own:
            zf.close()
    unicode_names = [None if flags & 0x800 else _unicode_path(raw, extra) for raw, flags, extra in entries]
    for i, ((_, flags, extra), info) in enumerate(zip(entries, infos)):
        if unicode_names[i] is None and not flags & 0x800 and _has_field(extra, 0x7075):
            unicode_names[i] = _local_unicode_path(path, info, extra)
    legacy = [(raw, info.create_system) for (raw, flags, _), u, info in zip(entries, unicode_names, infos)
              if not flags & 0x800 and u is None]  # fmt: skip
    if encoding == "auto":
        guess = guess_encoding([raw for raw, _ in legacy], [host for _, host in legacy])
    else:
        guess = _forced(encoding, [raw for raw, _ in legacy])
    if legacy and guess.encoding not in ("utf-8", "ascii") and not guess.ambiguous:  # else none is read otherwise:
        # an archive of flagged names alone (most of them) is not looked through again
        flagged = [raw for raw, flags, _ in entries
                   if flags & 0x800 and not raw.isascii() and decodes(raw, "utf-8", windows=False)]  # fmt: skip
        if flagged:
            guess = flagged_legacy(guess, flagged, [raw for raw, _ in legacy], host_family([h for _, h in legacy]))
    if ignored is not None:
        guess = replace(guess, flag_ignored=ignored)
    read_legacy = {raw for raw, _ in guess.flagged_legacy}
    members = []
    for i, ((raw, flags, _), uname, info) in enumerate(zip(entries, unicode_names, infos)):
        if flags & 0x800 and raw in read_legacy:
            name, source = decode_name(raw, guess.encoding), guess.encoding
        elif flags & 0x800:
            try:
                name, source = raw.decode("utf-8"), "utf-8 flag"
            except UnicodeDecodeError:
                name, source = decode_name(raw, guess.encoding), guess.encoding
        elif uname is not None:
            name, source = uname, "unicode path field"
        else:
            name, source = guess.decode(raw), "utf-8" if raw in guess.utf8_names else guess.encoding
        unix = (info.external_attr >> 16) if info.create_system == 3 and info.external_attr >> 16 else None
        members.append(
            ZipMember(
                index=i,
                raw_name=raw,
                name=name.replace("\\", "/"),
                name_source=source,
                file_size=info.file_size,
                compress_size=info.compress_size,
                method=info.compress_type,
                flags=info.flag_bits,
                crc=info.CRC,
                date_time=tuple(info.date_time),
                unix_mode=unix,
                header_offset=info.header_offset,
                external_attr=info.external_attr,
            )  # fmt: skip
        )
    return members, guess


# ---------------------------------------------------------------------------------------------
# Choosing an encoding


def _codec(name: str) -> str:
    from datakit.filenames import text_codec

    codec = text_codec(name)  # None also for rot13, hex: no bytes-to-text codec
    if codec is None:
        raise UsageError(f"unknown encoding {name!r}: use 'auto' or a Python codec such as gbk, big5, cp932")
    return codec


def _forced(encoding: str, names: list[bytes]) -> EncodingGuess:
    enc = _codec(encoding)
    bad = sum(1 for n in names if not decodes(n, enc))
    reason = f"forced by the caller; {len(names) - bad} of {len(names)} unflagged names decode"
    return EncodingGuess(enc, reason, {})


def mixed_names(guess: EncodingGuess) -> str:
    """What a guess with names of two encodings says of them."""
    if not guess.utf8_names:  # one encoding reads them all: whether some are UTF-8 cannot be told
        return (f"{guess.mixed_utf8} names read better as UTF-8 than as {guess.encoding} (written by two tools?, "
                f"or by chance); all decoded as {guess.encoding}, some names may be wrong")  # fmt: skip
    return (f"{guess.mixed_utf8} names are UTF-8 and the others {guess.encoding} (written by two tools?): each "
            "is read in its own encoding")  # fmt: skip


def legacy_flagged(guess: EncodingGuess) -> str:
    """What a guess that reads names flagged UTF-8 in its encoding says of them."""
    raw, shown = guess.flagged_legacy[0]
    n = len(guess.flagged_legacy)
    which = "1 name flagged UTF-8 is" if n == 1 else f"{n} names flagged UTF-8 are"
    mine = decode_name(raw, guess.encoding)
    return (f"{which} {guess.encoding} like the names beside it: {mine!r} in {guess.encoding}, in a folder of "
            f"theirs ({shown!r} as UTF-8); read as {guess.encoding}")  # fmt: skip


def ignored_flags(guess: EncodingGuess) -> str:
    """What a guess read from an archive whose UTF-8 flags were ignored says of them."""
    flagged, raw = guess.flag_ignored
    legacy = next((f"{raw.decode(e)!r} in {e.upper()}, " for e in (guess.encoding, "gbk", "big5")
                   if e not in ("utf-8", "ascii") and decodes(raw, e, windows=False)), "")  # fmt: skip
    which = "the 1 name flagged UTF-8" if flagged == 1 else f"the {flagged} names flagged UTF-8"
    return (
        f"a name flagged UTF-8 is not UTF-8 ({legacy}bytes {raw.hex(' ')}): the tool that made the archive set "
        f"the flag on legacy names, so it is ignored: {which} read as the others are ({guess.encoding})"
    )


def detect_encoding(archive: str | os.PathLike) -> EncodingGuess:
    """The encoding ``unzip(..., encoding="auto")`` would use for the archive's unflagged names.

    See :func:`datakit.filenames.guess_encoding`: every candidate that decodes all the names is
    scored; ``reason`` says why, and ``ambiguous`` lists close rivals when the choice is not clear.
    """
    return read_members(archive, "auto")[1]


# ---------------------------------------------------------------------------------------------
# Safe extraction


def safe_relpath(name: str) -> tuple[str | None, str]:
    """The relative path a member may be written to, and a note on what was neutralised.

    Backslashes become separators, drive letters and leading slashes are removed (noted), and a
    name with a ``..`` component is refused (None, with the reason).
    """
    s = name.replace("\\", "/")
    notes = []
    if re.match(r"^[A-Za-z]:", s):
        s = s[2:]
        notes.append("drive letter removed")
    if s.startswith("/"):
        s = s.lstrip("/")
        notes.append("absolute path made relative")
    parts = [p for p in s.split("/") if p not in ("", ".")]
    if ".." in parts:
        return None, "refused: a '..' component would escape the target folder"
    if any("\x00" in p for p in parts):
        return None, "refused: the name contains a NUL byte"
    if not parts:
        return None, "refused: the name is empty"
    out = "/".join(parts)
    try:
        size = len(out.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError as exc:  # a lone surrogate, no undecodable byte (--encoding unicode_escape)
        return None, f"refused: the name holds U+{ord(out[exc.start]):04X}, which no file name can hold"
    if size > _PATH_MAX:  # no path this long opens; deep ones cost time and memory to walk
        return None, f"refused: the name is {size} bytes, longer than a path may be ({_PATH_MAX})"
    for k, part in enumerate(parts):  # what no file system here can name (the zip read in place refuses it too)
        n = len(part.encode("utf-8", "surrogateescape"))
        if n > _NAME_MAX:
            what = "the name" if k == len(parts) - 1 else f"folder {'/'.join(parts[: k + 1])!r}"
            return None, f"refused: {what} is {n} bytes, over the {_NAME_MAX}-byte limit of file names"
    return out, "; ".join(notes)


_PATH_MAX = 4095  # bytes of a path Linux opens (PATH_MAX, 4096 with its NUL)


def _macos_metadata(name: str) -> bool:
    """Whether a member is Finder's AppleDouble metadata: under ``__MACOSX/`` or named ``._NAME``, looked
    at as :func:`safe_relpath` writes it (``C:__MACOSX/x`` is written as ``__MACOSX/x``)."""
    s = name.replace("\\", "/")
    parts = [p for p in (s[2:] if re.match(r"^[A-Za-z]:", s) else s).split("/") if p not in ("", ".")]
    return bool(parts) and (parts[0] == "__MACOSX" or parts[-1].startswith("._"))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _check_budget(archive: str, members: list[ZipMember], max_total: int, max_ratio: float) -> tuple[int, int]:
    """Refuse an archive whose declared sizes break the budget, before anything is written.

    Three limits, none of which can be sidestepped by splitting the payload into many members:
    the declared total, the ratio of each member of 1 MiB or more, and the ratio of the whole
    archive (all declared bytes over all compressed bytes) once it declares 1 MiB or more.
    Returns the declared total and the number of folders extraction makes.
    """
    refuse_overlaps(archive, members)  # first: it also refuses compressed sizes the file cannot hold
    files = [m for m in members if not m.is_dir]
    total = sum(m.file_size for m in files)
    packed = sum(m.compress_size for m in files)
    if total > max_total:
        raise ArchiveError(
            f"{archive}: refused, members declare {total} bytes uncompressed, over the limit of {max_total} "
            "(raise it with --max-total if this is expected)"
        )
    for m in files:
        if m.file_size >= _RATIO_MIN_SIZE and m.file_size > max_ratio * max(1, m.compress_size):
            ratio = m.file_size / max(1, m.compress_size)
            raise ArchiveError(
                f"{archive}: refused, member {m.name!r} expands {ratio:.0f}:1 ({m.compress_size} -> {m.file_size} "
                f"bytes), over the limit of {max_ratio:g}:1 (zip bomb?; raise it with --max-ratio)"
            )
    if total >= _RATIO_MIN_SIZE and total > max_ratio * max(1, packed):
        raise ArchiveError(
            f"{archive}: refused, its {len(files)} members expand {total / max(1, packed):.0f}:1 in all "
            f"({_size(packed)} -> {_size(total)}), over the limit of {max_ratio:g}:1 "
            "(zip bomb?; raise it with --max-ratio)"
        )
    # folders declare no size, yet each takes a block and an inode: 20 names 2000 folders deep make 40,000
    folders = _count_folders(members)
    disk = total + _FOLDER_BYTES * folders
    if disk > max_total:
        raise ArchiveError(
            f"{archive}: refused, its {folders} folders take {_size(_FOLDER_BYTES * folders)} on disk (4 KiB each) "
            f"beside {_size(total)} of files, over the limit of {max_total} bytes (raise it with --max-total if "
            "this is expected)"
        )
    size = os.path.getsize(archive)  # the folders' names are in it, not in the members' compressed bytes
    room = _FOLDER_BYTES * folders  # the folders alone against the archive: its files have their own ratios above
    if room >= _RATIO_MIN_SIZE and room > max_ratio * max(1, size):
        raise ArchiveError(
            f"{archive}: refused, its {folders} folders take {_size(room)} on disk (4 KiB each) beside "
            f"{_size(total)} of files, from a {_size(size)} archive: {room / max(1, size):.0f}:1, over the limit of "
            f"{max_ratio:.0f}:1 (a bomb of folders?; raise it with --max-ratio)"
        )
    return total, folders


_FOLDER_BYTES = 4096  # what a folder takes on disk: one block


def _count_folders(members: list[ZipMember], dest: Path | None = None) -> int:
    """How many folders extraction makes: folder members and every folder above a member, each once;
    with ``dest``, only those not already there."""
    ids: dict[tuple[int, str], int] = {}  # (parent's id, name) -> id: linear in the names' lengths
    paths = {0: ""}
    made = 0
    for m in members:
        rel = safe_relpath(m.name)[0]
        if rel is None or _macos_metadata(m.name):
            continue
        parts = rel.split("/")
        node = 0
        for part in parts if m.is_dir else parts[:-1]:
            child = ids.setdefault((node, part), len(ids) + 1)
            if dest is not None and child not in paths:
                paths[child] = f"{paths[node]}/{part}" if node else part
                made += not os.path.isdir(dest / paths[child])
            node = child
    return len(ids) if dest is None else made


def refuse_overlaps(archive: str, members: list[ZipMember]) -> None:
    """Refuse members whose bytes overlap in the file (one compressed stream behind many names: a
    bomb that no per-member ratio shows), each checked against every member before it."""
    spans = sorted(_local_spans(archive, members), key=lambda s: s[:2])
    last_end, last = -1, None
    for start, end, m in spans:
        if start < last_end:
            raise ArchiveError(
                f"{archive}: refused, members {last.name!r} and {m.name!r} overlap in the file (a zip bomb technique)"
            )
        if end > last_end:
            last_end, last = end, m


def _local_spans(archive: str, members: list[ZipMember]) -> list[tuple[int, int, ZipMember]]:
    """(start, end, member): the bytes each member takes in the file, from its local header to the end
    of its data, measured with the local header's own name and extra-field lengths (which the central
    directory need not repeat: a second member's header hidden in the first's extra field is inside)."""
    out = []
    with open(archive, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        for m in members:
            if not 0 <= m.header_offset <= size - 30:
                at = (
                    f"starts at byte {m.header_offset}, outside"
                    if m.header_offset >= 0
                    else f"starts {-m.header_offset} bytes before the start of"
                )  # (the offsets the directory gives)
                raise ArchiveError(f"{archive}: member {m.name!r} {at} the {size}-byte file (a damaged or forged "
                                   "directory)")  # fmt: skip
            f.seek(m.header_offset)
            head = f.read(30)
            if len(head) == 30 and head[:4] == b"PK\x03\x04":
                nlen, elen = struct.unpack_from("<HH", head, 26)
                object.__setattr__(m, "local_name_differs", f.read(nlen) != m.raw_name)  # (frozen: found, not given)
            else:  # not a local header: reading the member fails on its own, naming it
                nlen, elen = len(m.raw_name), 0
            end = m.header_offset + 30 + nlen + elen + m.compress_size
            if end > size:  # a size the file cannot hold: it would also shrink every ratio the budget checks
                raise ArchiveError(f"{archive}: member {m.name!r} declares {m.compress_size} compressed bytes, past "
                                   f"the end of the {size}-byte file (a damaged or forged directory)")  # fmt: skip
            out.append((m.header_offset, end, m))
    return out


def same_stored_bytes(archive: str, a: ZipMember, b: ZipMember) -> bool:
    """Whether two members store the same bytes the same way (method, sizes, CRC-32 and the data itself)."""
    if (a.method, a.compress_size, a.file_size, a.crc) != (b.method, b.compress_size, b.file_size, b.crc):
        return False
    with open(archive, "rb") as f:
        starts = []
        for m in (a, b):
            f.seek(m.header_offset)
            head = f.read(30)
            if len(head) < 30 or head[:4] != b"PK\x03\x04":
                return False
            nlen, elen = struct.unpack_from("<HH", head, 26)
            starts.append(m.header_offset + 30 + nlen + elen)
        left = a.compress_size
        while left > 0:
            n = min(left, _CHUNK)
            f.seek(starts[0] + a.compress_size - left)
            x = f.read(n)
            f.seek(starts[1] + a.compress_size - left)
            if x != f.read(n) or len(x) < n:
                return False
            left -= n
    return True


def _mtime(m: ZipMember) -> float | None:
    try:
        return time.mktime(m.date_time + (0, 0, -1))
    except (OverflowError, ValueError):
        return None


def _member_problem(m: ZipMember) -> str | None:
    if m.encrypted:
        return "encrypted; datakit does not decrypt (use a tool that asks for the password)"
    if m.method not in SUPPORTED_METHODS:
        label = METHOD_NAMES.get(m.method, "unknown")
        return f"compression method {m.method} ({label}) is not supported"
    if m.method == zipfile.ZIP_STORED and m.compress_size != m.file_size and not m.is_dir:
        # stored bytes are the content: the two sizes differ only in a damaged or forged archive (Info-ZIP refuses)
        return f"stored (not compressed), yet declares {m.compress_size} bytes stored and {m.file_size} of content"
    return None


_FOLDER_AND_LINK = "refused: named as a folder (it ends in '/') but its mode is a symbolic link's"


class _Refused(Exception):
    """One member that cannot be written where it asks to be; the message says why."""


_NAME_MAX = 255  # bytes per path component on every common filesystem
_KEPT_DEPTH = 64  # folders this deep keep their descriptors between members; deeper ones are passed through
_PART = ".unzip-part"
_MAX_HOPS = 40  # links one path lookup follows before Linux refuses it (MAXSYMLINKS, ELOOP)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _temp_name(name: str, m: ZipMember) -> str:
    """The temporary name a member is written under: readable when it fits, hashed when not,
    tagged with the member's CRC-32 and size, so that the part an interrupted run left of this
    member (and nothing else) is what the next run removes."""
    tag = f"{zlib.crc32(f'{m.crc}:{m.file_size}'.encode()):08x}"
    tmp = f".{name}.{tag}{_PART}"
    if len(os.fsencode(tmp)) <= _NAME_MAX:
        return tmp
    import hashlib

    return f".{hashlib.sha1(os.fsencode(name)).hexdigest()[:20]}.{tag}{_PART}"


_OTHER_PART = re.compile(r"\.(.+)\.[0-9a-f]{8}" + re.escape(_PART))


def _remove_other_parts(tree: _Tree, written: dict[str, ZipMember], report: ExtractReport, dest: Path) -> None:
    """Remove the parts an interrupted run left of other versions of the files now in place (an archive
    replaced by a newer one between the runs: its part's tag, the old member's CRC-32 and size, is not this
    one's; a file under this one's own tag was left as it was above), each with a note; one listing per folder
    written into."""
    import hashlib

    by_folder: dict[tuple[str, ...], set[str]] = {}
    own: set[str] = set()
    for rel, m in written.items():
        *folder, name = rel.split("/")
        by_folder.setdefault(tuple(folder), set()).add(name)
        own.add("/".join([*folder, _temp_name(name, m)]))
    for folder, names in by_folder.items():
        try:
            fd = tree.folder(list(folder), create=False)
            entries = sorted(e for e in os.listdir(fd) if e.endswith(_PART))
        except (_Refused, OSError):
            continue
        if not entries:
            continue
        hashed = {hashlib.sha1(os.fsencode(n)).hexdigest()[:20]: n for n in names}
        for entry in entries:
            if entry in names or "/".join([*folder, entry]) in own:  # a member named like a part; this one's tag
                continue
            m = _OTHER_PART.fullmatch(entry)
            name = m and (m.group(1) if m.group(1) in names else hashed.get(m.group(1)))
            if not name:
                continue
            shown = _printable(dest / "/".join([*folder, entry]))
            if not _marked(entry, fd):  # a file of yours named so (or parts where no mark can be kept): kept
                report.notes.append(
                    f"{shown}: left there, named as the part an interrupted extraction leaves of "
                    f"another version of {name!r} but not marked as one; remove it if it is"
                )
            elif _remove_stale_part(entry, fd, sys.maxsize) and _lstat(entry, fd) is None:
                report.notes.append(f"{shown}: removed, the part an interrupted extraction left of another version "
                                    f"of {name!r}")  # fmt: skip


class _Tree:
    """The target folder, walked one component at a time through directory file descriptors.

    Every folder is opened with ``O_NOFOLLOW`` relative to its parent's descriptor, so nothing is
    ever written through a symbolic link, whoever made it and whenever: safety comes from how
    paths are opened, not from checking their text.
    """

    def __init__(self, root: Path) -> None:
        self.root = os.path.realpath(root)
        # the target itself is the user's choice: a link there (data -> /mnt/big/data) is followed,
        # as it is anywhere above it; below it, nothing is
        try:
            self.fd = os.open(root, _DIR_FLAGS & ~getattr(os, "O_NOFOLLOW", 0))
        except PermissionError:  # writable but not readable (chmod 300): it is opened to be locked and compared
            raise UsageError(f"{root}: a folder this process may not read (its permissions); extraction opens the "
                             "folder it writes into, to lock it and to compare what is there") from None  # fmt: skip
        self._open: dict[tuple[str, ...], int] = {}
        self.made: set[tuple[str, ...]] = set()  # the folders this run made
        try:  # one extraction into a folder at a time: two would remove each other's parts
            import fcntl

            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise ArchiveError(f"{root}: another extraction into this folder is running; wait for it to finish, "
                               "then run this again (what it wrote counts as done)") from None  # fmt: skip
        except (ImportError, OSError):
            pass  # no flock here (or on this filesystem): as before

    def folder(self, parts: list[str], create: bool = True) -> int:
        """A descriptor of the folder ``parts`` below the root, made if ``create``; valid until the next call."""
        key = tuple(parts)
        if key in self._open:
            return self._open[key]
        if len(self._open) > 256:
            self.close_children()
        fd = self.fd
        passing = -1  # a descriptor of this walk that is not kept: folders deeper than _KEPT_DEPTH (one at a time)
        try:
            for i, part in enumerate(parts):
                sub = key[: i + 1]
                if sub in self._open:
                    fd = self._open[sub]
                    continue
                made = False
                if create:
                    try:
                        os.mkdir(part, 0o777, dir_fd=fd)
                        made = True
                    except FileExistsError:
                        pass
                    except OSError as exc:
                        self.check_root()
                        raise _Refused(f"folder {'/'.join(sub)!r} cannot be made: {exc.strerror}") from None
                try:
                    fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _Refused(self._why_not_folder(fd, part, "/".join(sub), exc)) from None
                if made:  # a run's own folder until its mode and time are set (a killed run's, for the next)
                    _mark_part(fd, True)
                    self.made.add(sub)
                if passing >= 0:
                    os.close(passing)
                    passing = -1
                if i < _KEPT_DEPTH or i == len(parts) - 1:
                    self._open[sub] = fd
                else:
                    passing = fd
        except BaseException:
            if passing >= 0:
                os.close(passing)
            raise
        return fd

    def check_root(self) -> None:
        """Stop the whole extraction, in one line, where the target folder itself was removed meanwhile
        (by hand, or by another program): every member would fail alike."""
        try:
            gone = os.fstat(self.fd).st_nlink == 0
        except OSError:
            gone = True
        if gone:
            raise ArchiveError(f"{self.root}: the target folder was removed while the archive was extracted into "
                               "it; nothing more was written (run it again)")  # fmt: skip

    @staticmethod
    def _why_not_folder(parent: int, part: str, shown: str, exc: OSError) -> str:
        try:
            st = os.stat(part, dir_fd=parent, follow_symlinks=False)
        except OSError:
            return f"folder {shown!r} cannot be opened: {exc.strerror}"
        if stat.S_ISLNK(st.st_mode):
            return f"{shown!r} is a symbolic link; nothing is written through links"
        if not stat.S_ISDIR(st.st_mode):
            return f"{shown!r} is a file, not a folder"
        return f"folder {shown!r} cannot be opened: {exc.strerror}"

    def remove_empty(self, parts: list[str]) -> bool:
        """Remove the folder ``parts`` if it is empty (a folder made for members all refused)."""
        key = tuple(parts)
        for sub in [k for k in self._open if k[: len(key)] == key]:
            os.close(self._open.pop(sub))
        try:
            os.rmdir(parts[-1], dir_fd=self.folder(parts[:-1], create=False))
        except (_Refused, OSError):
            return False
        self.made.discard(key)
        return True

    def close_children(self) -> None:
        for fd in self._open.values():
            os.close(fd)
        self._open.clear()

    def close(self) -> None:
        self.close_children()
        os.close(self.fd)


def _lstat(name: str, fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _is_dir(name: str, fd: int) -> bool:
    st = _lstat(name, fd)
    return st is not None and stat.S_ISDIR(st.st_mode)


def _same_file(fd: int, name: str, m: ZipMember) -> bool:
    st = _lstat(name, fd)
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_size != m.file_size:
        return False
    crc = 0
    with open(os.open(name, os.O_RDONLY | _NOFOLLOW, dir_fd=fd), "rb") as f:
        while chunk := f.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc == m.crc


@dataclass
class _Budget:
    """Bytes actually written so far, against the archive's limit (declared sizes may lie)."""

    limit: int
    written: int = 0
    declared: bool = False  # the limit is what the members declare, below --max-total

    def spend(self, n: int, archive: str) -> None:
        self.written += n
        if self.written > self.limit:
            why = "more than its members declare" if self.declared else "over --max-total"
            raise ArchiveError(f"{archive}: stopped, more than {self.limit} bytes written ({why})")


def unzip(
    archive: str | os.PathLike,
    dest: str | os.PathLike = ".",
    *,
    encoding: str = "auto",
    overwrite: bool = False,
    max_total: int = DEFAULT_MAX_TOTAL,
    max_ratio: float = DEFAULT_MAX_RATIO,
    progress: Callable[[int], None] | None = None,
) -> ExtractReport:
    """Extract an archive into ``dest`` safely, decoding legacy-encoded names.

    Nothing lands outside ``dest``: every folder is opened component by component without
    following links, and symlink members are made last, each only if it resolves inside
    ``dest`` on the real filesystem. An archive whose declared sizes break the budget (total,
    per-member ratio, whole-archive ratio) is refused before anything is written, and bytes
    are counted while writing. An existing file is kept unless ``overwrite`` (one identical to
    the member counts as done, so re-running an interrupted extraction finishes it); every
    file is written under a temporary name and renamed when complete, with the member's
    timestamp. A member that cannot be written is reported and the rest is extracted.

    Raises:
        ArchiveError: unreadable archive, or one refused as a whole (bomb limits, overlap, space).
        UsageError: ``dest`` exists and is not a folder, or the encoding is unknown.
        FileNotFoundError: ``archive`` does not exist.
    """
    archive = os.fspath(archive)
    dest_path = Path(dest)
    if os.path.exists(dest_path) and not os.path.isdir(dest_path):
        raise UsageError(f"{dest}: exists and is not a folder (-d names the folder to extract into)")
    with _open_zip(archive) as zf:
        members, guess = read_members(archive, encoding, zf=zf)
        refuse_unreadable_names(dest, all(m.name.isascii() for m in members))  # (they would be written in it)
        report = ExtractReport(encoding=guess)
        total, folders = _check_budget(archive, members, max_total, max_ratio)
        made = [p for p in [dest_path.absolute(), *dest_path.absolute().parents] if not os.path.lexists(p)]
        try:
            dest_path.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            what = "a link to nothing" if os.path.islink(dest_path) else "a file"  # a dangling link is no file
            raise UsageError(f"{dest}: cannot be made a folder ({what} is in the way)") from None
        except OSError as exc:
            raise UsageError(f"{dest}: cannot be made a folder ({exc.strerror})") from None
        if not os.access(dest_path, os.W_OK | os.X_OK):  # one line now, not one per member below
            raise UsageError(f"{dest}: not writable; cannot extract into it")
        free = shutil.disk_usage(dest_path).free
        vfs = os.statvfs(dest_path)
        nodes = sum(1 for m in members if not m.is_dir) + folders  # a file each, empty or not: inodes run out first
        declared = total
        # each file takes whole blocks: 2000 thumbnails of 1.5 KB need 8 MB of a disk of 4 KiB blocks, not 3 MB
        # (a network file system's unit past 64 KiB, CephFS's 4 MiB, is one it reports sizes in, not allocates by)
        block = vfs.f_frsize if 512 <= vfs.f_frsize <= 65536 else _FOLDER_BYTES
        need = sum(_in_blocks(m.file_size, block) for m in members if not m.is_dir) + _FOLDER_BYTES * folders
        if need > free or (vfs.f_files and nodes > vfs.f_favail):  # a rerun: what is there needs no room again
            there, count = _already_there(dest_path, members, block)
            total -= there[0]
            folders_left = _count_folders(members, dest_path)
            need -= there[1] + _FOLDER_BYTES * (folders - folders_left)
            nodes = nodes - folders - count + folders_left
            free += _parts_left(dest_path, members, block)  # a killed run's parts: removed before their members
        if vfs.f_files and nodes > vfs.f_favail:  # (0 inodes in all: a file system that does not count them)
            _remove_made(made)
            raise ArchiveError(f"{archive}: refused, its members need {nodes} files and folders but only "
                               f"{vfs.f_favail} more fit in {dest} (inodes; a bomb of empty files?)")  # fmt: skip
        if need > free:
            _remove_made(made)
            raise ArchiveError(f"{archive}: refused, members need {need} bytes on disk (each file in whole blocks of "
                               f"{block} bytes) but only {free} are free in {dest}")  # fmt: skip
        try:
            tree = _Tree(dest_path)
        except ArchiveError:  # another extraction holds the folder: the folders made for this one go, but for the
            # target and those above it, which that extraction writes into (made by this run a moment before it
            # took them; removed, its descriptor would be of a deleted folder and every member of its would fail)
            used = os.path.realpath(dest_path)
            _remove_made(
                [p for p in made if used != (real := os.path.realpath(p)) and not used.startswith(real + os.sep)]
            )
            raise
        # what every member declares, not less the files already there: --overwrite writes those that differ again
        budget = _Budget(min(max_total, declared), declared=declared < max_total)
        infos = zf.infolist()
        dirs: list[tuple[list[str], ZipMember]] = []
        # folders there before this run: theirs, as unzip leaves them (their modes and times kept, not the archive's)
        there = set() if overwrite else {rel for m in members if m.is_dir for rel in [safe_relpath(m.name)[0]]
                                         if rel and os.path.lexists(dest_path / rel)}  # fmt: skip
        links: list[tuple[ZipMember, str]] = []
        paths = {rel for rel, _ in map(safe_relpath, (m.name for m in members)) if rel is not None}
        folders_of = _folders_of(paths)
        files_seen: dict[str, ZipMember] = {}
        macos = 0
        try:
            for m in members:
                if _macos_metadata(m.name):
                    macos += 1
                    continue
                rel, note = safe_relpath(m.name)
                label = f"{archive}: member {m.name!r}"
                if rel is None and m.is_dir and m.name.replace("\\", "/").strip("/") in ("", "."):
                    if m.file_size:  # a file renamed by hand or a crafted archive, as for 'd/' below
                        report.problems.append(f"{label}: named as the target folder itself but holds "
                                               f"{m.file_size} bytes; not extracted")  # fmt: skip
                    continue  # './': the target folder itself, as the dataset read in place takes it
                if rel is None:
                    report.problems.append(f"{label}: {note}")
                    continue
                legacy = m.name_source not in ("utf-8 flag", "unicode path field")
                if legacy and not decodes(m.raw_name, m.name_source):
                    # --encoding that does not fit: the name would be written with U+FFFD for its bytes
                    report.problems.append(f"{label}: its name (bytes {m.raw_name.hex(' ')[:96]}) is not "
                                           f"{m.name_source} text; not extracted (name the archive's encoding with "
                                           "--encoding, or leave it to auto)")  # fmt: skip
                    continue
                if note:
                    report.notes.append(f"{label}: {note}, written as {rel!r}")
                parts = rel.split("/")
                try:
                    if m.folder_and_link:
                        raise _Refused(_FOLDER_AND_LINK)
                    if m.is_dir and m.file_size > 0:
                        # named as a folder, or with a folder's Unix mode, holding bytes: a file renamed by hand or a
                        # crafted archive; which one it is meant to be is a guess
                        how = "named as a folder" if m.name.replace("\\", "/").endswith("/") else "a folder by its mode"
                        report.problems.append(f"{label}: {how} but holds {m.file_size} bytes; not extracted")
                        continue
                    if m.is_dir:
                        tree.folder(parts)
                        dirs.append((parts, m))
                        continue
                    # a file refused here (encrypted, Deflate64) still holds its name: the zip read in place has
                    # it there, so no later link or file of the name is made in its place
                    first = files_seen.setdefault(rel, m) if not m.is_symlink else m
                    problem = _member_problem(m)
                    if problem:
                        report.problems.append(f"{label}: {problem}")
                        continue
                    if m.is_symlink:
                        links.append((m, rel))  # made last: a link never redirects a later member
                        continue
                    name = parts[-1]
                    if first is not m and _member_problem(first):
                        raise _Refused("in the archive twice, and the first copy is not extracted (said above); not "
                                       "written either (the zip read in place reads the first)")  # fmt: skip
                    if first is not m:  # the name stored twice: one file on disk, whatever --overwrite says
                        if same_stored_bytes(archive, first, m):  # byte for byte, not by a CRC-32 one can forge
                            report.notes.append(f"{label}: in the archive twice, the same bytes both times; "
                                                "written once")  # fmt: skip
                            continue
                        raise _Refused("in the archive twice, with other bytes than the first copy; not written "
                                       "(the zip read in place refuses the name)")  # fmt: skip
                    fd = tree.folder(parts[:-1])
                    st = _lstat(name, fd)
                    if st is not None and stat.S_ISDIR(st.st_mode):  # --overwrite would not replace it either
                        why = "a folder of the archive's own members" if rel in folders_of else "a folder"
                        raise _Refused(f"{_printable(dest_path / rel)} is {why}; not replaced by a file")
                    if st is not None:
                        try:
                            same = _same_file(fd, name, m)
                        except PermissionError:
                            if not overwrite:
                                why = "cannot be read to compare with the member (permission denied)"
                                shown = _printable(dest_path / rel)
                                msg = f"{shown} exists and {why}; not overwritten (use --overwrite)"
                                raise _Refused(msg) from None
                            same = False
                        if same:  # a part left by a run killed between putting it in place and removing it
                            tmp = _temp_name(name, m)
                            if "/".join([*parts[:-1], tmp]) not in paths:
                                _remove_stale_part(tmp, fd, m.file_size)
                            report.unchanged.append(rel)
                            if progress:
                                progress(m.file_size)
                            continue
                        if not overwrite:
                            tmp = _temp_name(name, m)  # the part a killed --overwrite left of it: not kept for ever
                            if "/".join([*parts[:-1], tmp]) not in paths:
                                _remove_stale_part(tmp, fd, m.file_size)
                            raise _Refused(f"{_printable(dest_path / rel)} exists and differs; not overwritten "
                                           "(use --overwrite)")  # fmt: skip
                    if _extract_file(zf, infos[m.index], m, fd, name, budget, archive, progress, rel, paths, overwrite):
                        report.extracted.append(rel)
                    else:  # the same file put there meanwhile, by another extraction into a folder around this one
                        report.unchanged.append(rel)
                except _Refused as exc:
                    report.problems.append(f"{label}: {exc}")
                except (*_READ_ERRORS, OSError) as exc:
                    if isinstance(exc, FileNotFoundError):
                        tree.check_root()
                    report.problems.append(f"{label}: {_explain(exc)}")
            if macos:
                report.notes.append(f"{archive}: {macos} member{'s' if macos > 1 else ''} of macOS Finder's metadata "
                                    "(__MACOSX/..., ._NAME) not extracted: resource forks, no files of the folder "
                                    "zipped (the zip read in place leaves them out too)")  # fmt: skip
            _remove_other_parts(tree, {rel: files_seen[rel] for rel in [*report.extracted, *report.unchanged]
                                       if rel in files_seen}, report, dest_path)  # fmt: skip
            last = {rel: m.index for m in members if not m.is_dir for rel in [safe_relpath(m.name)[0]] if rel}
            passed_by: dict[str, set[str]] = {}  # the paths each link's last resolution passed
            try:
                _make_links(zf, infos, links, last, files_seen, tree, overwrite, report, archive, folders_of)
            finally:  # Ctrl-C (or SIGTERM) half-way: the links made so far are checked all the same, and one
                # during the check waits for its end (a link left half-checked could lead out of the target)
                with _signals_held():
                    _recheck_links(tree, links, report, archive, passed_by=passed_by)
            # a folder made only for members refused (by this run, or by a killed one for the same members) is
            # not left empty: the dataset read from the target would refuse it as an empty class folder
            listed = {"/".join(parts) for parts, _ in dirs}
            left = folders_of - listed
            pending = set(left)
            while pending:  # a link through a folder removed here (dog/m.png -> ../bird/../cat/1.png) leads to nothing
                gone = set()
                for rel in sorted(pending, key=lambda r: -r.count("/")):  # a folder before the one it is in
                    parts = rel.split("/")
                    if (tuple(parts) in tree.made or _folder_marked(tree, parts)) and tree.remove_empty(parts):
                        gone.add(rel)
                left -= gone
                if not gone or not links:
                    break
                # which may leave more folders empty: those the links removed were in (only the links whose last
                # resolution passed through a folder removed are resolved again: a chain of such links, each
                # through the folder of the one before, was resolved whole once per folder, quadratic time)
                unlinked = _recheck_links(tree, links, report, archive, _real_paths(tree, gone), passed_by)
                pending = {a for rel in unlinked for a in _ancestors(rel)} & left
            umask = _umask()
            for parts, m in reversed(dirs):  # after their contents, which touch the folders' times
                if "/".join(parts) in there and not _folder_marked(tree, parts):  # yours, not a killed run's
                    continue
                t = _mtime(m)
                try:
                    fd = tree.folder(parts[:-1], create=False)
                    if m.unix_mode is not None and stat.S_IMODE(m.unix_mode) and _is_dir(parts[-1], fd):
                        # the folder's own mode, as unzip restores it, never locking its owner out, under the umask
                        os.chmod(parts[-1], stat.S_IMODE(m.unix_mode) & 0o777 & ~umask | 0o700, dir_fd=fd)
                    if t is not None:
                        os.utime(parts[-1], (t, t), dir_fd=fd, follow_symlinks=False)
                except (_Refused, OSError):
                    pass  # the folder itself was reported above, or is a link now: never touched through it
            # every folder of the archive's (made by this run or a killed one): those that hold members, and the
            # folder members themselves (an empty one left marked would read as a killed run's to the next run)
            for rel in sorted(folders_of | {"/".join(parts) for parts, _ in dirs}):
                try:
                    _mark_part(tree.folder(rel.split("/"), create=False), False)
                except (_Refused, OSError):
                    pass
        finally:
            tree.close()
    return report


def _make_links(zf: zipfile.ZipFile, infos: list[zipfile.ZipInfo], links: list[tuple[ZipMember, str]],
                last: dict[str, int], files_seen: dict[str, ZipMember], tree: _Tree, overwrite: bool,
                report: ExtractReport, archive: str, folders_of: set[str]) -> None:  # fmt: skip
    """Make the link members, in the archive's order, after every file and folder; ``folders_of``: the folders
    that hold the archive's members."""
    chain: dict[str, str | None] = {}  # where the archive's links are, and their targets
    for m, rel in links:
        try:
            target = _link_text(_read_bounded(zf, infos[m.index], m.file_size), m) if m.file_size <= _MAX_LINK else None
        except (*_READ_ERRORS, OSError):
            target = None
        chain[os.path.join(tree.root, *rel.split("/"))] = target
    for m, rel in links:
        label = f"{archive}: member {m.name!r}"
        if last.get(rel, m.index) > m.index:  # a later member of the same name wins, as between files
            report.notes.append(f"{label}: a later member has the same name; the link is not made")
            continue
        if rel in files_seen:  # an earlier file of the name, written by this run: kept, --overwrite or not
            report.notes.append(f"{label}: an earlier member has the same name; the link is not made")
            continue
        try:
            _extract_symlink(zf, infos[m.index], m, tree, rel, overwrite, report, label, rel in folders_of, chain)
        except _Refused as exc:
            report.problems.append(f"{label}: {exc}")
        except (*_READ_ERRORS, OSError) as exc:
            report.problems.append(f"{label}: {_explain(exc)}")


def _folders_of(paths: set[str]) -> set[str]:
    """Every folder that holds one of ``paths`` (``a``, ``a/b`` for ``a/b/c``)."""
    out: set[str] = set()
    for rel in paths:
        cut = rel.rfind("/")
        while cut > 0 and rel[:cut] not in out:
            out.add(rel[:cut])
            cut = rel.rfind("/", 0, cut)
    return out


class _Inflating:
    """A deflate, bzip2 or LZMA member read ``n`` bytes at most per call. zipfile hands each chunk
    of bzip2 or LZMA data to the decompressor whole, and 900 bytes of bzip2 inflate to 1.2 GB in
    that one call, before any size check can stop them. It bounds deflate, but cuts the stream at
    the declared size: a stream that runs on past it, with a CRC-32 made for the cut bytes, passed,
    and one cut short was called a CRC mismatch. The member's raw bytes are read as if stored,
    inflated here with ``max_length`` (what runs past the declared size is seen by the caller, a
    stream that ends before its end marker raises ``EOFError``), and checked against its CRC-32 at
    the end, as zipfile checks it."""

    def __init__(self, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
        import copy

        raw = copy.copy(info)
        raw.compress_type, raw.file_size, raw.CRC = zipfile.ZIP_STORED, info.compress_size, None
        self.raw = _zip_open(zf, raw)
        self.info = info
        self.crc = 0
        self.done = False
        if info.compress_type == zipfile.ZIP_DEFLATED:
            self.d = zlib.decompressobj(-15)
        elif info.compress_type == zipfile.ZIP_BZIP2:
            import bz2

            self.d = bz2.BZ2Decompressor()
        else:  # LZMA in a zip: a 4-byte header (version, size of the properties), then the properties
            import lzma

            head = self.raw.read(4)
            if len(head) < 4:
                raise EOFError("Compressed file ended before the end-of-stream marker was reached")
            props = self.raw.read(struct.unpack("<H", head[2:])[0])
            filters = [lzma._decode_filter_properties(lzma.FILTER_LZMA1, props)]  # as zipfile does
            try:
                self.d = lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=filters)
            except MemoryError:  # a dictionary of up to 4 GiB is declared, and allocated before any data
                raise zipfile.BadZipFile(
                    f"its LZMA data asks for a {_size(filters[0].get('dict_size', 0))} "
                    "dictionary, more memory than this process may take; not read"
                ) from None

    def read(self, n: int) -> bytes:
        if isinstance(self.d, _Zlib):
            return self._inflate(n)
        out = b""
        while not out and not self.done:
            if self.d.eof:
                self.done = True
                break
            data = self.raw.read(_CHUNK) if self.d.needs_input else b""
            if self.d.needs_input and not data:
                if self.info.compress_type == zipfile.ZIP_BZIP2:
                    raise EOFError("Compressed file ended before the end-of-stream marker was reached")
                self.done = True  # LZMA may end without a marker: its data is all there is
                break
            try:
                out = self.d.decompress(data, n)
            except MemoryError:  # liblzma allocates the declared dictionary at the first data
                raise zipfile.BadZipFile("its compressed data asks for more memory than this process may take; "
                                         "not read") from None  # fmt: skip
            except Exception as exc:  # OSError from bz2, LZMAError: damaged data
                raise zipfile.BadZipFile(f"compressed data is damaged ({exc})") from None
        self.crc = zlib.crc32(out, self.crc)
        if self.done and self.crc != self.info.CRC:
            raise zipfile.BadZipFile(f"Bad CRC-32 for file {self.info.filename!r}")
        return out

    def _inflate(self, n: int) -> bytes:
        out = b""
        while not out and not self.done:
            if self.d.eof:
                self.done = True
                break
            data = self.d.unconsumed_tail or self.raw.read(_CHUNK)
            try:  # with no input left, what zlib still holds comes out, or nothing: the stream is cut short
                out = self.d.decompress(data, n)
            except zlib.error as exc:
                raise zipfile.BadZipFile(f"compressed data is damaged ({exc})") from None
            if not data and not out and not self.d.eof:
                raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        self.crc = zlib.crc32(out, self.crc)
        if self.done and self.crc != self.info.CRC:
            raise zipfile.BadZipFile(f"Bad CRC-32 for file {self.info.filename!r}")
        return out

    def __enter__(self) -> _Inflating:
        return self

    def __exit__(self, *exc) -> None:
        self.raw.close()


def _open_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo):
    """A member's data as a file to ``read(n)`` from, never inflating much past ``n`` at once."""
    if info.compress_type in (zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
        return _Inflating(zf, info)
    return _zip_open(zf, info)  # stored


def _zip_open(zf: zipfile.ZipFile, info: zipfile.ZipInfo):
    """``zf.open(info)``, also for a member whose local header names it otherwise than the central directory
    where the name came from the local header (a Unicode Path field matching the local name, the writer
    having changed the central one after: libarchive's ``test_read_format_zip_7075_utf8_paths.zip``)."""
    try:
        return zf.open(info)
    except zipfile.BadZipFile as exc:
        if "File name in directory" not in str(exc) or zf.filename is None:
            raise
        with open(zf.filename, "rb") as f:
            f.seek(info.header_offset)
            head = f.read(30)
            local = f.read(struct.unpack_from("<H", head, 26)[0])
        legacy = getattr(zf, "metadata_encoding", None) or "cp437"
        try:  # the central name's own bytes
            central = info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else legacy)
        except UnicodeEncodeError:
            central = None
        # the same bytes, only the local header's UTF-8 flag otherwise (the central one read, as unzip does)
        if local != central and _local_unicode_path(zf.filename, info, info.extra) is None:
            raise
        import copy

        same = copy.copy(info)
        local_utf8 = struct.unpack_from("<H", head, 6)[0] & 0x800
        same.orig_filename = local.decode("utf-8" if local_utf8 else legacy, errors="surrogateescape")
        return zf.open(same)


# what reading a damaged member raises: a bad stream, an unknown method, lzma's bad properties, a local
# header flagged UTF-8 whose name is not
_READ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError, NotImplementedError, lzma.LZMAError,
                UnicodeDecodeError)  # fmt: skip


def _printable(path: os.PathLike | str) -> str:
    """A path for a message line: control characters (a newline in a member's name) escaped, as ``-l`` shows
    them, so a name cannot forge another line or reach the terminal as an escape sequence."""
    text = os.fspath(path)
    return text if text.isprintable() else "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def _remove_made(made: list[Path]) -> None:
    """Remove the folders made for an archive refused: it leaves nothing behind."""
    for p in made:
        if p.name in (".", ".."):  # out/sub/..: its folder is the one above, made or not
            continue
        try:
            p.rmdir()
        except OSError:
            break


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM held while the block runs, then delivered as they came (to the handlers there before)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    before = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            before[signum] = signal.signal(signum, lambda n, _frame: got.append(n))
        except (ValueError, OSError):
            pass
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
        if got:
            signal.raise_signal(got[0])


def _parts_left(dest: Path, members: list[ZipMember], block: int) -> int:
    """The bytes on disk of the parts a killed run left in ``dest`` of these members (each under its own tag, no
    bigger than its member), which this run removes before it writes them: room that is free to it."""
    room = 0
    for m in members:
        rel = safe_relpath(m.name)[0] if not (m.is_dir or m.is_symlink) else None
        if rel is None:
            continue
        *folder, name = rel.split("/")
        try:
            st = os.lstat(dest.joinpath(*folder, _temp_name(name, m)))
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_size <= m.file_size:
            room += _in_blocks(st.st_size, block)
    return room


def _in_blocks(size: int, block: int) -> int:
    """What a file of ``size`` bytes takes on a disk of ``block``-byte blocks (an empty one, an inode alone: 0)."""
    return -(-size // block) * block


def _already_there(dest: Path, members: list[ZipMember], block: int) -> tuple[tuple[int, int], int]:
    """((the bytes, the bytes on disk in ``block``-byte blocks), the number) of the regular members whose file is
    already in ``dest`` with their size."""
    there = disk = count = 0
    for m in members:
        rel = safe_relpath(m.name)[0] if not (m.is_dir or m.is_symlink) else None
        if rel is None:
            continue
        try:
            st = os.lstat(dest / rel)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_size == m.file_size:
            there += m.file_size
            disk += _in_blocks(m.file_size, block)
            count += 1
    return (there, disk), count


def _explain(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "its local header marks the name UTF-8, but the name is not UTF-8 (a damaged or hand-made archive)"
    if "File name in directory" in str(exc):  # zipfile read the local name otherwise (its UTF-8 flag, its bytes)
        return "its local header names it otherwise than the central directory does (a damaged or hand-made archive)"
    if isinstance(exc, lzma.LZMAError):
        return f"compressed data is damaged (LZMA: {exc})"
    text = str(exc)
    if "Bad CRC-32" in text:
        return "data does not match its CRC-32 (corrupt)"
    if isinstance(exc, EOFError) or "Compressed file ended" in text:
        return "data is truncated (its compressed stream ends before its end marker)"
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot be written: {exc.strerror}"
    return text or type(exc).__name__


def _extract_file(
    zf: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    m: ZipMember,
    fd: int,
    name: str,
    budget: _Budget,
    archive: str,
    progress: Callable[[int], None] | None,
    rel: str,
    members: set[str],
    overwrite: bool = True,
) -> bool:
    """Write one member; False where the same file appeared meanwhile (nothing replaced)."""
    tmp = _temp_name(name, m)
    # the archive has a member of that name (left untouched), or another extraction (into a folder around
    # this one, which its lock does not cover) is writing that part now: a name of this run's own
    if "/".join([*rel.split("/")[:-1], tmp]) in members or not _remove_stale_part(tmp, fd, m.file_size):
        tmp = f".{os.urandom(8).hex()}{_PART}"
    held = hold_interrupts()  # a Ctrl-C between the part's creation and the try below would leave it behind
    try:
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o666, dir_fd=fd)
    except BaseException:
        release_interrupts(held)
        raise
    written = 0
    try:
        release_interrupts(held)  # a Ctrl-C that came meanwhile is raised here, where the part is removed
        _flock(out)  # held while the part is written and put in place: it is nobody's leftover
        _mark_part(out, True)
        with _open_member(zf, info) as src, open(out, "wb", closefd=False) as dst:
            while chunk := src.read(_CHUNK):
                written += len(chunk)
                if written > m.file_size:
                    raise zipfile.BadZipFile(f"inflates past its declared size of {m.file_size} bytes; stopped")
                budget.spend(len(chunk), archive)
                dst.write(chunk)
                if progress:
                    progress(len(chunk))
            if written != m.file_size:
                raise zipfile.BadZipFile(f"holds {written} bytes but declares {m.file_size}")
            dst.flush()
            if m.unix_mode is not None and stat.S_IMODE(m.unix_mode):
                # the owner keeps reading and writing it (0o200, 0o000 stored): a second run compares it, a
                # training job reads it; the umask applies, as to any file made here (a stored 0o777 is not made
                # writable by everyone)
                os.fchmod(dst.fileno(), stat.S_IMODE(m.unix_mode) & 0o777 & ~_umask() | 0o600)
            t = _mtime(m)
            if t is not None:
                os.utime(dst.fileno(), (t, t))
        if not _names(out, tmp, fd):  # removed or replaced meanwhile by a run that could not see this one
            raise _Refused(f"{rel}: another extraction removed its part file while it was written; nothing was "
                           "put in place, run this again")  # fmt: skip
        _mark_part(out, False)  # the file put in place carries no mark
        return _put_in_place(tmp, name, fd, overwrite, rel, m)
    except BaseException:
        if _names(out, tmp, fd):  # never another run's part
            try:
                os.unlink(tmp, dir_fd=fd)
            except OSError:
                pass
        raise
    finally:
        os.close(out)


_PART_MARK = "user.datakit-unzip-part"


def _mark_part(fd: int, on: bool) -> None:
    """Mark the part open as ``fd`` as one of datakit's (an extended attribute), or take the mark off: a part
    left of another version of a file is removed only with it, never a file of yours that has such a name. Where
    the file system keeps no extended attributes, nothing (such parts are then left, with a note)."""
    try:
        if on:
            os.setxattr(fd, _PART_MARK, b"1")
        else:
            os.removexattr(fd, _PART_MARK)
    except (OSError, AttributeError):  # not supported here (or not on this platform)
        pass


def _marked(name: str, dir_fd: int) -> bool:
    try:
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0), dir_fd=dir_fd)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.getxattr(fd, _PART_MARK) == b"1"
    except (OSError, AttributeError):
        return False
    finally:
        os.close(fd)


def _folder_marked(tree: _Tree, parts: list[str]) -> bool:
    """Whether the folder ``parts`` carries the mark of a run that made it (and was killed before it set the
    folder's mode and time)."""
    try:
        return os.getxattr(tree.folder(parts, create=False), _PART_MARK) == b"1"
    except (_Refused, OSError, AttributeError):
        return False


def _flock(fd: int) -> bool | None:
    """An exclusive lock on ``fd``, not waited for: True taken, False held by another process, None no flock here."""
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except (ImportError, OSError):
        return None


def _names(fd: int, name: str, dir_fd: int) -> bool:
    """Whether ``name`` in the folder ``dir_fd`` is the file open as ``fd``."""
    there = _lstat(name, dir_fd)
    here = os.fstat(fd)
    return there is not None and (there.st_dev, there.st_ino) == (here.st_dev, here.st_ino)


def _remove_stale_part(tmp: str, fd: int, size: int) -> bool:
    """Remove the part ``tmp`` an interrupted run left; False where a running extraction holds it, or
    where what has its name is no part of a ``size``-byte member (a FIFO, a folder, a link, a longer
    file: someone else's, left alone; the caller writes under another name)."""
    try:  # O_NONBLOCK: a FIFO under that name must not hold the run on its open
        old = os.open(tmp, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0), dir_fd=fd)
    except FileNotFoundError:
        return True
    except OSError:  # a link, or unreadable: not a part of ours
        return False
    try:
        st = os.fstat(old)
        if not stat.S_ISREG(st.st_mode) or st.st_size > size or _flock(old) is False:
            return False
        try:
            os.unlink(tmp, dir_fd=fd)
        except FileNotFoundError:
            pass
        return True
    finally:
        if old is not None:
            os.close(old)


def _put_in_place(tmp: str, name: str, fd: int, overwrite: bool, rel: str, m: ZipMember) -> bool:
    """Rename the complete part into place; without ``overwrite`` by a hard link, which fails if a file
    of that name appeared meanwhile (another program writing into the folder), then the part goes.
    False where what appeared is the member's own bytes (another extraction of the same file)."""
    if overwrite:
        os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        return True
    try:
        os.link(tmp, name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
    except FileExistsError:
        if not _same_file(fd, name, m):
            raise _Refused(
                f"{rel} appeared while it was written and differs; not overwritten (use --overwrite)"
            ) from None
        os.unlink(tmp, dir_fd=fd)
        return False
    except OSError:  # no hard links on this filesystem (FAT, some network shares): a rename, checked first
        if _lstat(name, fd) is not None:
            raise _Refused(f"{rel} appeared while it was written; not overwritten (use --overwrite)") from None
        os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        return True
    os.unlink(tmp, dir_fd=fd)
    return True


_MAX_LINK = 4096


def _extract_symlink(
    zf: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    m: ZipMember,
    tree: _Tree,
    rel: str,
    overwrite: bool,
    report: ExtractReport,
    label: str,
    mine: bool = False,
    chain: dict[str, str | None] | None = None,
) -> None:
    """Make the link member ``m`` at ``rel``; ``mine``: a folder of that name holds other members of the archive;
    ``chain``: where the archive's link members are (a refused link that leads out through one of them, found in
    place with the member's own target, is what a killed run left, and is removed)."""
    if m.file_size > _MAX_LINK:
        raise _Refused(f"symlink target of {m.file_size} bytes is longer than any real path; not created")
    link = (chain or {}).get(os.path.join(tree.root, *rel.split("/")))  # read once, by the caller
    if link is None:
        link = _link_text(_read_bounded(zf, info, m.file_size), m)  # a bomb behind 12 bytes: no
    parts = rel.split("/")
    if not link:
        raise _Refused("a symlink with an empty target, which no link can have; not created")
    if "\x00" in link:  # no path holds one: the system cuts it there
        raise _Refused(f"symlink to {link!r} holds a NUL byte, which no path can; not created")
    if os.path.isabs(link) or re.match(r"^[A-Za-z]:", link):
        raise _Refused(f"symlink to {link!r} points outside the target folder; not created")
    where = os.path.join(tree.root, *parts[:-1], link)
    if len(os.fsencode(where)) > _PATH_MAX:  # the kernel resolves no longer path: it could not be checked
        raise _Refused(f"symlink path of {len(os.fsencode(where))} bytes is longer than a path may be ({_PATH_MAX}); "
                       "not created")  # fmt: skip
    # resolved on the real filesystem (links made before included), not on the text of the path
    # followed as the kernel follows it, at most 40 links (os.path.realpath has no such bound: a chain of
    # thousands of links, each resolved to its end, took minutes)
    try:
        resolved, via = _resolve(os.path.join(tree.root, *parts[:-1], link), os.path.join(tree.root, *parts[:-1]))
    except _TooLong as exc:
        raise _Refused(f"symlink to {_printable(link[:60])}{'...' if len(link) > 60 else ''}: {exc.strerror} (links "
                       "of real folders take tens); not created") from None  # fmt: skip
    # led out through another link of the archive (a -> b/.., b -> .): one a killed run made before b, unchecked;
    # the link there must be the archive's (its member's target), not one of yours of the same name
    ours = bool(chain) and any(chain.get(v) is not None and _link_is(v, chain[v]) for v in via)
    if resolved is None:
        raise _Refused(f"symlink to {link!r} leads through more than {_MAX_HOPS} links, which the kernel does not "
                       f"follow (ELOOP); not created{_left_over(tree, parts, link) if ours else ''}")  # fmt: skip
    if not _inside(resolved, tree.root):
        raise _Refused(f"symlink to {link!r} points outside the target folder; not created"
                       + (_left_over(tree, parts, link) if ours else ""))  # fmt: skip
    # a link that climbs out of the target and back in (../../out/cat/1.jpg under out/dog) works only while
    # the folder keeps its name: renamed or moved, it leads elsewhere; the zip read in place has no such file
    if posixpath.normpath(posixpath.join(*parts[:-1], link) if parts[:-1] else link).split("/")[0] == "..":
        raise _Refused(f"symlink to {link!r} leaves the target folder by name and comes back (it would break, or "
                       "lead elsewhere, once the folder is renamed); not created")  # fmt: skip
    fd = tree.folder(parts[:-1])
    name = parts[-1]
    st = _lstat(name, fd)
    if st is not None:
        if stat.S_ISLNK(st.st_mode) and os.readlink(name, dir_fd=fd) == link:
            report.unchanged.append(rel)
            return
        if stat.S_ISDIR(st.st_mode):  # --overwrite would not replace it either
            why = "a folder of the archive's own members" if mine else "a folder"
            raise _Refused(f"{_printable(Path(tree.root) / rel)} is {why}; not replaced by a link")
        if not overwrite:
            raise _Refused(f"{_printable(Path(tree.root) / rel)} exists and differs; not overwritten (use --overwrite)")
        os.unlink(name, dir_fd=fd)
    os.symlink(link, name, dir_fd=fd)
    if (t := _mtime(m)) is not None:  # the link's own time, as unzip sets it (its target's is the target member's)
        try:
            os.utime(name, (t, t), dir_fd=fd, follow_symlinks=False)
        except (NotImplementedError, OSError):
            pass
    report.extracted.append(rel)


def _link_is(path: str, target: str) -> bool:
    """Whether ``path`` is a symbolic link to ``target``."""
    try:
        return os.readlink(path) == target
    except OSError:
        return False


def _left_over(tree: _Tree, parts: list[str], link: str) -> str:
    """Remove the link to ``link`` at ``parts`` that an earlier run, killed before it checked its links, left in
    place: refused now (led out through another link of the archive), it must not stay. A link that leads out by
    its own text was refused by every run, so never made by one: a link of the user's, left alone. Returns what to
    add to the refusal."""
    try:
        fd = tree.folder(parts[:-1], create=False)
        if os.readlink(parts[-1], dir_fd=fd) != link:
            return ""
        os.unlink(parts[-1], dir_fd=fd)
    except (_Refused, OSError):
        return ""
    return "; the same link, left there by an earlier run, removed"


def _ancestors(rel: str) -> list[str]:
    """The folders a relative path is inside, the nearest first: 'a/b/c' -> ['a/b', 'a']."""
    parts = rel.split("/")[:-1]
    return ["/".join(parts[:k]) for k in range(len(parts), 0, -1)]


def _real_paths(tree: _Tree, rels: set[str]) -> set[str]:
    """The real paths of ``rels`` in the target, as :func:`_resolve` names the paths it passes."""
    real = os.path.realpath(tree.root)
    return {os.path.join(real, *rel.split("/")) for rel in rels}


def _recheck_links(tree: _Tree, links: list[tuple[ZipMember, str]], report: ExtractReport, archive: str,
                   only: set[str] | None = None, passed_by: dict[str, set[str]] | None = None) -> set[str]:  # fmt: skip
    """Remove any link that a later link made resolve outside the target (``a -> b/..``, then ``b -> .``),
    and any that leads to nothing (``nosuch/../../cat/1.png``, ``1.png/``): the folder's scan would
    list it as an image it cannot read, where the zip read in place has no such sample. ``only``: after
    the folders at these real paths were removed, only the links whose last resolution passed through one
    of them (or through a link removed since) are resolved again; ``passed_by`` keeps the paths each link's
    resolution passed, between calls. The links removed."""
    # the links an earlier run made count too, where they lead out: one killed half-way left them unchecked; one
    # that leads to nothing goes where this run made it, or a killed run did (in a folder that run made and marked:
    # its classes would differ from the zip read in place), and stays in a folder of yours, as it was
    now = set(report.extracted)
    extracted = {*report.extracted, *report.unchanged}

    def killed_runs(rel: str) -> bool:
        parts = rel.split("/")[:-1]
        return bool(parts) and (tuple(parts) in tree.made or _folder_marked(tree, parts))

    made = [(m, rel) for m, rel in links if rel in extracted]
    removed: set[str] = set()

    def unaffected(rel: str) -> bool:  # by what ``only`` names: its last resolution passed none of it
        return only is not None and passed_by is not None and rel in passed_by and not passed_by[rel] & only

    # a removal can only leave links that resolved through the removed one leading to nothing; a resolution
    # follows at most 40 links, so the passes are few however many links there are
    changed = True
    while changed:
        changed = False
        for m, rel in made:
            if rel in removed or unaffected(rel):
                continue
            full = os.path.join(tree.root, *rel.split("/"))
            why = None
            passed: list[str] = []
            try:
                end, _ = _resolve(full, passed=passed)
                if end is None:
                    why = f"symlink leads through more than {_MAX_HOPS} links (ELOOP); removed"
                elif not _inside(end, tree.root):
                    why = "symlink resolves outside the target through other links; removed"
                elif not os.path.exists(full) and (rel in now or killed_runs(rel)):  # a file a scan cannot read
                    why = f"symlink to {os.readlink(full)!r} leads to nothing inside the target; removed"
            except OSError as exc:  # a path the kernel will not resolve (too long): it cannot be checked
                why = f"symlink cannot be resolved ({exc.strerror}); removed"
            if passed_by is not None:
                passed_by[rel] = set(passed)
            if why:
                parts = rel.split("/")
                os.unlink(parts[-1], dir_fd=tree.folder(parts[:-1], create=False))
                removed.add(rel)
                report.problems.append(f"{archive}: member {m.name!r}: {why}")
                changed = True
                if only is not None:
                    only |= _real_paths(tree, {rel})  # the links through it lead to nothing now too
    if only is not None:  # removals lead nowhere new: no link already in the folder leads out through them
        _drop_removed(report, removed)
        return removed
    # a link already in the folder (an earlier run's, unchanged by this one) may now lead out through a link this
    # run made (a -> b/../x from before, b -> . now): the new link on its way goes
    before = set(removed)
    mine = {os.path.join(tree.root, *rel.split("/")): (m, rel) for m, rel in made if rel not in removed}
    changed = bool(mine)
    while changed:
        changed = False
        for here in _links_under(tree.root):
            if here in mine:
                continue
            try:
                end, via = _resolve(here)
            except OSError:  # too long to walk: a link of yours, as it was
                continue
            if end is not None and _inside(end, tree.root):
                continue
            for link in via:
                if link in mine:
                    m, rel = mine.pop(link)
                    os.unlink(link)
                    removed.add(rel)
                    shown = os.path.relpath(here, tree.root).replace(os.sep, "/")
                    report.problems.append(f"{archive}: member {m.name!r}: symlink would make {shown!r}, a link "
                                           "already in the folder, resolve outside the target; removed")  # fmt: skip
                    changed = True
    _drop_removed(report, removed)
    if removed - before:  # the links that led through one removed here lead to nothing now: looked at again
        removed |= _recheck_links(tree, links, report, archive, _real_paths(tree, removed - before), passed_by)
    return removed


def _drop_removed(report: ExtractReport, removed: set[str]) -> None:
    if removed:
        report.extracted[:] = [rel for rel in report.extracted if rel not in removed]
        report.unchanged[:] = [rel for rel in report.unchanged if rel not in removed]


def _links_under(root: str) -> list[str]:
    """Every symbolic link in the folder ``root``, links to folders not followed."""
    out = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        out += [os.path.join(folder, n) for n in (*dirs, *files) if os.path.islink(os.path.join(folder, n))]
    return out


_MAX_STEPS = 512  # path parts one resolution may walk: real links take tens; a hostile chain ('d/../' x 780, 40
# links deep) took 60,000 lstat calls for each link pointing into it (about 0.4 s of CPU per 115 bytes of archive)


class _TooLong(OSError):
    def __init__(self) -> None:
        super().__init__(errno.E2BIG, f"its resolution walks more than {_MAX_STEPS} path parts")


def _resolve(path: str, base: str | None = None, passed: list[str] | None = None) -> tuple[str | None, list[str]]:
    """Where the absolute ``path`` leads as the kernel resolves it, and the links it passes on the way;
    None for the end where more than 40 links are followed (ELOOP). ``_TooLong`` past ``_MAX_STEPS`` parts more
    than the path's own, or than ``base``'s, the folder a link's text is read in (a folder 520 deep is no bomb;
    every link's text counts, the one resolved too). ``passed``: every path looked at is appended to it."""
    todo = [p for p in reversed(path.split("/")) if p]
    here, via, hops, steps = "/", [], 0, -len([p for p in (base or path).split("/") if p])
    while todo:
        steps += 1
        if steps > _MAX_STEPS:
            raise _TooLong
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            here = os.path.dirname(here)
            continue
        step = os.path.join(here, part)
        if passed is not None:
            passed.append(step)
        if not os.path.islink(step):
            here = step
            continue
        hops += 1
        if hops > _MAX_HOPS:
            return None, via
        via.append(step)
        text = os.readlink(step)
        if text.startswith("/"):
            here = "/"
        todo += [p for p in reversed(text.split("/")) if p]
    return here, via


# ---------------------------------------------------------------------------------------------
# Reading in place


# a member read directly (ZipReader._read_direct): its local header's offset, sizes, CRC-32s (data, name), method
_DIRECT = [("offset", "<u8"), ("stored", "<u8"), ("size", "<u8"), ("crc", "<u4"), ("name_crc", "<u4"),
           ("flags", "<u2"), ("method", "<u2"), ("direct", "u1")]  # fmt: skip


def _read_bounded(zf: zipfile.ZipFile, info: zipfile.ZipInfo, size: int) -> bytes:
    """A member's bytes, inflated one chunk at a time: ``zf.read`` inflates the whole stream
    before cutting it to the declared size, so a lying member would fill memory first."""
    out = bytearray()
    with _open_member(zf, info) as f:
        while len(out) < size and (chunk := f.read(min(_CHUNK, size - len(out)))):
            out += chunk
        if len(out) == size and f.read(1):  # defensive: never more than declared
            raise zipfile.BadZipFile(f"inflates past its declared size of {size} bytes; stopped")
    if len(out) < size:  # a stream (its CRC-32 made for it) shorter than declared: refused, as extraction does
        raise zipfile.BadZipFile(f"holds {len(out)} bytes but declares {size}")
    return bytes(out)


def _names_folder(name: str) -> bool:
    """Whether a path names a folder by its end (``cat/``, ``cat/.``): through a file it leads to nothing (the
    kernel's ENOTDIR), as ``cat/1.png/.`` does on the extracted folder."""
    return name.replace("\\", "/").endswith(("/", "/.")) or name == "."


def member_path(name: str) -> str:
    """The path a member name (or a table's name for one) spells: ``\\`` read as ``/``, ``.`` and empty
    parts dropped, ``x/..`` resolved, a leading ``/`` dropped."""
    name = name.replace("\\", "/")
    if "//" not in name and "./" not in name and not name.startswith("/") and not name.endswith((".", "/")):
        return name  # the usual name, as it is
    return posixpath.normpath("/" + name).lstrip("/")


def _written_path(name: str) -> str:
    """The path unzip-gbk writes a member to, as :func:`member_path` spells it: a drive letter dropped too
    (``C:cat/1.png`` is ``cat/1.png``, one name with a ``cat/1.png`` stored beside it)."""
    if len(name) > 1 and name[1] == ":" and name[0].isascii() and name[0].isalpha():
        name = name[2:]
    return member_path(name)


class ZipReader:
    """Read members of an archive by decoded name without extracting.

    Every read is held to a budget, as extraction is: a member declaring more than
    ``max_member_size`` bytes, or of 1 MiB or more expanding over ``max_ratio``, is refused
    with :class:`ArchiveError` naming it, before anything is inflated; the bytes inflated
    never exceed the declared size. The zip handle opens lazily in the process that reads
    (and again after a fork), and is not pickled, so a reader can live in a Dataset used by
    DataLoader workers under fork or spawn.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        encoding: str = "auto",
        *,
        max_member_size: int = DEFAULT_MAX_MEMBER,
        max_ratio: float = DEFAULT_MAX_RATIO,
        hint: str = "encoding= (--encoding)",
    ) -> None:
        """``hint``: how the caller names the encoding, in the warnings (a zip read with a label table takes it as
        ``zip_encoding=``, ``encoding=`` being the table's)."""
        self.path = os.fspath(path)
        self.max_member_size = int(max_member_size)
        self.max_ratio = float(max_ratio)
        members, self.encoding = read_members(self.path, encoding)
        refuse_overlaps(self.path, members)  # read in place as extracted: one stream behind many names is a bomb
        if self.encoding.mixed_utf8:
            log.warning("%s: %s; pass %s to choose", self.path, mixed_names(self.encoding), hint)
        if self.encoding.flagged_legacy:
            log.warning("%s: %s", self.path, legacy_flagged(self.encoding))
        if self.encoding.flag_ignored:
            log.warning("%s: %s", self.path, ignored_flags(self.encoding))
        if self.encoding.ambiguous:  # as unzip-gbk warns: the names may be read in the wrong encoding
            log.warning("%s: names decoded as %s, but ambiguous: %s; pass %s to choose", self.path,
                        self.encoding.encoding, " or ".join(self.encoding.ambiguous), hint)  # fmt: skip
        self.members = [m for m in members if not m.is_dir and not m.is_symlink]
        self.links = [m for m in members if m.is_symlink]  # read as the member they name, where one does
        # by the path each name spells (``./cat/1.png``, ``cat//1.png`` and ``cat/1.png`` are one), as on disk
        self._by_name: dict[str, int] = {}
        self._folded: dict[str, list[str]] | None = None  # casefolded member path -> paths (case_twin's, when asked)
        for m in self.members:  # the first copy of a name stored twice, as unzip-gbk writes it
            path = _written_path(m.name)
            usual = (
                path
                and ".." not in m.name
                and m.name.isprintable()  # (no NUL, no surrogate)
                and len(m.name) < 1024
                and max(map(len, m.name.split("/"))) <= 63
            )  # (4 bytes a character at most)
            if (usual or safe_relpath(m.name)[0] is not None) and not _macos_metadata(m.name):  # what unzip-gbk writes:
                self._by_name.setdefault(path, m.index)  # no 'cat/../dog/1.png', '.', NUL, Finder's ._1.png
        # a name that is also a folder's ('cat/x.png' beside 'cat/x.png/3.png'): which one unzip-gbk wrote, the
        # archive's order decides (lookup, through the tree)
        folders: set[str] = set()
        todo = {n.rpartition("/")[0] for n in self._by_name} | {member_path(m.name) for m in members if m.is_dir}
        while todo:
            here = todo.pop()
            if here and here not in folders:
                folders.add(here)
                todo.add(here.rpartition("/")[0])
        for shadowed in folders & self._by_name.keys():
            del self._by_name[shadowed]
        # names stored twice (a file added again: the first copy stays): which copy is meant cannot be told
        self.twice: set[str] = set()
        if len(self._by_name) < len(self.members):  # the same bytes twice are one file, as unzip-gbk writes them
            first: dict[str, ZipMember] = {}
            for m in self.members:
                f = first.setdefault(_written_path(m.name), m)
                if f is not m and not same_stored_bytes(self.path, f, m):
                    self.twice.add(_written_path(m.name))
        self._by_index = {m.index: m for m in members}
        self._all = members
        self._tree: dict[str, dict[str, tuple[str, object]]] | None = None
        self._links_read: dict[int, str | None] = {}
        self._links_raw: dict[int, str | None] = {}  # each link member inflated once: the tree and lookups share it
        self._zf: zipfile.ZipFile | None = None
        self._pid = -1
        self._table = self._direct_table(members)
        self._fd: io.FileIO | None = None  # this process's file of the archive, for direct reads (closed with it)
        self._fd_pid = -1

    def tree(self) -> dict[str, dict[str, tuple[str, object]]]:
        """The archive as the folder it extracts to: {folder path: {name: ("file", index) | ("dir", None) |
        ("link", member)}}, folders implied by the members' paths too ("" is the top)."""
        if self._tree is None:
            tree: dict[str, dict[str, tuple[str, object]]] = {"": {}}

            def folder(path: str) -> bool:
                """Make the folders of ``path``; False where a file or link is already in the way."""
                here = ""  # the path so far, grown a part at a time (a deep name costs its length, not its square)
                for part in path.split("/") if path else []:
                    entry = tree[here].setdefault(part, ("dir", None))
                    if entry[0] != "dir":
                        return False
                    here = f"{here}/{part}" if here else part
                    tree.setdefault(here, {})
                return True

            # as unzip-gbk writes them: files and folders in archive order, the first of a name kept (a later
            # one is refused there), then the links, none over a name already there and none where a later
            # member has the link's name (that one is made, or refused, instead)
            last = {rel: m.index for m in self._all if not m.is_dir for rel in [safe_relpath(m.name)[0]] if rel}
            members: set[str] = set()  # folder members: unzip-gbk makes them, empty or not
            for m in sorted(self._all, key=lambda m: m.is_symlink):
                path = safe_relpath(m.name)[0]  # where unzip-gbk writes it ('C:cat/1.jpg' and '/cat/1.jpg': cat/1.jpg)
                if path is None or m.folder_and_link or _macos_metadata(m.name):
                    continue  # what unzip-gbk does not write ('..', NUL, too long; Finder's metadata) is not there
                if m.is_dir and m.file_size > 0:  # a folder holding bytes: which one it is meant to be is a guess
                    how = "named as a folder" if m.name.replace("\\", "/").endswith("/") else "a folder by its mode"
                    log.warning("%s: member %r: %s but holds %d bytes; left out, as unzip-gbk leaves it out", self.path,
                                m.name, how, m.file_size)  # fmt: skip
                    continue
                if m.is_dir:
                    if folder(path):
                        members.add(path)
                    continue
                if m.is_symlink and (last.get(path, m.index) > m.index or self._raw_link_text(m) is None):
                    continue  # not made, or refused before its folder is made: neither the link nor its folders
                parent, _, name = path.rpartition("/")
                if folder(parent):
                    tree[parent].setdefault(name, ("link", m) if m.is_symlink else ("file", m.index))
            self._tree = tree
            if any(kind == "link" for entries in tree.values() for kind, _ in entries.values()):
                self._prune(tree, members)
        return self._tree

    def _prune(self, tree: dict[str, dict[str, tuple[str, object]]], members: set[str]) -> None:
        """Take out of ``tree`` what unzip-gbk removes after making the links: a link that leads to nothing (or
        out, or round), then a folder it made for such links alone, left empty, and then the links that led
        through that folder (``dog/m.png -> ../bird/../cat/1.png`` once ``bird/`` is gone), until none is left.
        After the first look at every link, only those whose lookup passed something removed are looked up again
        (a chain of links, each through the folder of the one before, was looked up whole once per folder)."""
        passed_by: dict[str, set[str]] = {}  # each link's path: the paths its last lookup passed
        todo = [(here, name) for here, entries in tree.items() for name, (kind, _) in entries.items() if kind == "link"]
        folders = [here for here in tree if here]  # the first time, every folder may be one left empty
        while todo or folders:
            gone: set[str] = set()
            for here, name in todo:
                path = f"{here}/{name}" if here else name
                if name not in tree.get(here, {}):
                    continue
                passed: list[str] = []
                if self.lookup(path, _passed=passed) is None:
                    del tree[here][name]
                    passed_by.pop(path, None)
                    gone.add(path)
                    folders += _ancestors(path)
                else:
                    passed_by[path] = set(passed)
            for here in sorted(set(folders), key=lambda p: -p.count("/")):  # a folder before the one it is in
                if here in tree and not tree[here] and here not in members:
                    parent, _, name = here.rpartition("/")
                    del tree[parent][name], tree[here]
                    gone.add(here)  # (the folders it is in are in the set: those of a link removed, or all)
            folders = []
            todo = [tuple(p.rpartition("/")[::2]) for p, seen in passed_by.items() if seen & gone]

    def lookup(self, path: str, _hops: list[int] | None = None, _passed: list[str] | None = None,
               _steps: list[int] | None = None) -> tuple[str, int | str] | None:  # fmt: skip
        """What ``path`` inside the archive is, its links followed as the kernel follows them on the
        extracted folder: ("file", member index), ("dir", its real folder path) or None (nothing there,
        a path through a file, a link out of the archive or to nothing, more than 40 links followed in
        all, where Linux gives up with ELOOP and unzip-gbk removes the link). ``_passed``: every entry
        looked at (its path in the archive) is appended to it. The parts of the links' texts followed count
        against ``_MAX_STEPS``, as extraction counts them (past it, unzip-gbk makes no such link: nothing)."""
        hops = [0] if _hops is None else _hops  # links followed so far in this lookup, nested ones included
        steps = [0] if _steps is None else _steps  # parts of the links' texts walked so far
        tree = self.tree()
        real: list[str] = []
        here = ""  # "/".join(real), kept as real changes
        parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
        folder = _names_folder(path)  # 'cat/1.png/.': through a file, nothing
        for k, part in enumerate(parts):
            if part == "..":
                if not real:
                    return None  # out of the archive
                real.pop()
                here = here.rpartition("/")[0]
                continue
            if _passed is not None:
                _passed.append(f"{here}/{part}" if here else part)
            entry = tree.get(here, {}).get(part)
            if entry is None:
                return None
            kind, value = entry
            last = k == len(parts) - 1
            if kind == "link":
                link = self._link_text(value)
                hops[0] += 1
                if link is None or hops[0] > _MAX_HOPS:
                    return None
                steps[0] += sum(1 for p in link.split("/") if p)
                if steps[0] > _MAX_STEPS:  # a hostile chain ('cat/../' x 500 a link): bounded, as extraction is
                    return None
                found = self.lookup("/".join([*real, link]), hops, _passed, steps)
                if found is None or (found[0] == "file" and (not last or folder or _names_folder(link))):
                    return None  # 'a.png/', 'a.png/.': a folder, which it is not
                if found[0] == "file" and _member_problem(self._by_index[found[1]]):
                    return None  # a member unzip-gbk never writes (encrypted, Deflate64): the link leads to nothing
                if found[0] == "file":
                    return found
                here = found[1]
                real = here.split("/") if here else []
            elif kind == "file":
                return ("file", value) if last and not folder else None
            else:
                real.append(part)
                here = f"{here}/{part}" if here else part
        return ("dir", here)

    def _link_text(self, m: ZipMember) -> str | None:
        if m.index not in self._links_read:  # each link member inflated once, however often lookups pass it
            self._links_read[m.index] = self._read_link_text(m)
        return self._links_read[m.index]

    def _raw_link_text(self, m: ZipMember) -> str | None:
        if m.index not in self._links_raw:
            self._links_raw[m.index] = self._inflate_link_text(m)
        return self._links_raw[m.index]

    def _inflate_link_text(self, m: ZipMember) -> str | None:
        """A link member's text, or None where unzip-gbk refuses it before making its folder: unreadable, longer
        than any path, empty, absolute, or leaving the target by name (``../x``, ``a/../../x``)."""
        if m.file_size > _MAX_LINK:
            return None
        try:
            link = _link_text(self.read_index(m.index), m)
        except (ValueError, OSError):
            return None
        if not link or link.startswith("/") or re.match(r"^[A-Za-z]:", link) or "\x00" in link:
            return None
        parent = (safe_relpath(m.name)[0] or "").rpartition("/")[0]  # where unzip-gbk writes it
        if posixpath.normpath(posixpath.join(parent, link) if parent else link).split("/")[0] == "..":
            return None
        return link

    def _read_link_text(self, m: ZipMember) -> str | None:
        link = self._raw_link_text(m)
        if link is None:
            return None
        if "\ufffd" in link:
            return None  # bytes that are no text in the names' encoding: unzip-gbk's link leads to nothing
        if link.startswith("/") or re.match(r"^[A-Za-z]:", link) or "\x00" in link:
            return None  # unzip-gbk makes no link out of the target
        if "\\" in link:
            return None  # on the extracted folder a backslash is part of the name: a link to nothing, removed
        return link

    def link_target(self, m: ZipMember) -> int | None:
        """The index of the regular member the symlink member ``m`` leads to inside the archive, as the
        extracted folder's links resolve (:meth:`lookup`); None for a folder, nothing or outside."""
        found = self.lookup(member_path(m.name))
        return found[1] if found is not None and found[0] == "file" else None  # type: ignore[return-value]

    def link_folder(self, m: ZipMember) -> str | None:
        """The real folder (its path inside the archive) the symlink member ``m`` leads to, or None."""
        found = self.lookup(member_path(m.name))
        return found[1] if found is not None and found[0] == "dir" else None  # type: ignore[return-value]

    def _listed(self, name: str) -> bool:
        """Whether a file member is stored under ``name`` as it is (``cat/2.png/.``, written as cat/2.png)."""
        return any(m.name == name for m in self.members)

    def names(self) -> list[str]:
        """Decoded names of the file members, in archive order."""
        return [m.name for m in self.members]

    def case_twin(self, name: str) -> str | None:
        """The one file member named as ``name`` but for letter case (``cat/A.jpg`` asked, ``cat/a.jpg`` stored:
        found on a folder too, where an extracted copy tells them apart), in whole; None for none or several."""
        if self._folded is None:  # built once: asked for each missing name of a table
            self._folded = {}
            for m in self._by_name:
                self._folded.setdefault(m.casefold(), []).append(m)
        path = member_path(name)
        found = [m for m in self._folded.get(path.casefold(), ()) if m != path]
        return found[0] if len(found) == 1 else None

    def __contains__(self, name: str) -> bool:
        if _names_folder(name) and not self._listed(name):  # 'cat/1.png/.' names no file, as on the extracted folder
            return False
        name = member_path(name)
        if name in self._by_name:
            return True
        found = self.lookup(name)  # through links, as on the extracted folder
        return found is not None and found[0] == "file"

    def __len__(self) -> int:
        return len(self.members)

    def _file(self) -> zipfile.ZipFile:
        if self._zf is None or self._pid != os.getpid():
            self._zf = _open_zip(self.path)
            self._pid = os.getpid()
        return self._zf

    def check_budget(self, m: ZipMember) -> None:
        """Raise :class:`ArchiveError` if reading ``m`` would break the per-member budget."""
        if m.file_size > self.max_member_size:
            raise ArchiveError(
                f"{self.path}: member {m.name!r} declares {m.file_size} bytes, over the limit of "
                f"{self.max_member_size} per member read in place (raise max_member_size=, or extract it)"
            )
        ratio = m.file_size / max(1, m.compress_size)
        if m.file_size >= _RATIO_MIN_SIZE and ratio > self.max_ratio:
            raise ArchiveError(
                f"{self.path}: member {m.name!r} expands {ratio:.0f}:1 ({m.compress_size} -> {m.file_size} bytes), "
                f"over the limit of {self.max_ratio:g}:1 (zip bomb?; if it is none, extract the archive with "
                f"unzip-gbk --max-ratio and use the folder, or raise max_ratio= in Python)"
            )

    def _direct_table(self, members: list[ZipMember]) -> np.ndarray:
        """Where each member's data is and how it is stored, in one array (no object per member to touch: a forked
        worker reading through it copies none of the reader's pages), for :meth:`_read_direct`; ``direct`` is 0
        where a member goes the checked way through ``zipfile`` (another method, a problem or over the budget)."""
        import numpy as np

        table = np.zeros(max((m.index for m in members), default=-1) + 1, _DIRECT)
        for m in members:
            if m.is_dir or m.method not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) or _member_problem(m):
                continue
            try:
                self.check_budget(m)
            except ArchiveError:
                continue
            if m.flags & 0x0021:  # encrypted, or patched data: never read here
                continue
            where = (m.header_offset, m.compress_size, m.file_size, m.crc, zlib.crc32(m.raw_name), m.flags, m.method)
            table[m.index] = (*where, 1)
        try:
            st = os.stat(self.path)
            self._identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            self._identity = None
        return table

    def _direct_fd(self) -> int:
        """This process's descriptor of the archive, -1 where it is not the file that was listed (replaced since:
        the checked way then compares its members). Held by a file object, closed when the reader is."""
        if self._fd_pid != os.getpid():
            inherited, self._fd, self._fd_pid = self._fd, None, os.getpid()  # a forked copy's: opened again, its own
            if inherited is not None:
                inherited.close()  # this process's copy of the parent's descriptor (the parent's stays open)
            try:
                f = io.FileIO(self.path, "r")
            except OSError:
                return -1
            st = os.fstat(f.fileno())
            if self._identity is None or (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != self._identity:
                f.close()
                return -1
            self._fd = f
        return self._fd.fileno() if self._fd is not None else -1

    def _read_direct(self, index: int) -> bytes | None:
        """A stored or deflated member's bytes, read at its offset and inflated in one call, checked against its
        size and CRC-32; None where anything is not as listed (the checked way then reads it, or says why)."""
        table = self._table
        if not 0 <= index < len(table) or not table["direct"][index] or (fd := self._direct_fd()) < 0:
            return None
        offset, stored, size, crc, name_crc, flags, method, _ = table[index].tolist()
        head = os.pread(fd, 30 + 256, offset)
        if len(head) < 30 or head[:4] != b"PK\x03\x04":
            return None
        nlen, elen = struct.unpack_from("<HH", head, 26)
        name = head[30 : 30 + nlen] if nlen <= 256 else os.pread(fd, nlen, offset + 30)
        if zlib.crc32(name) != name_crc:  # the local header names another member: as zipfile, the checked way
            return None
        if struct.unpack_from("<H", head, 6)[0] & 0x0821 != flags & 0x0821:  # UTF-8, encrypted, patched: as listed
            return None
        if flags & 0x0800:
            try:
                name.decode("utf-8")
            except UnicodeDecodeError:  # flagged UTF-8 and not: zipfile refuses it, and says so the checked way
                return None
        raw = os.pread(fd, stored, offset + 30 + nlen + elen) if stored else b""
        if len(raw) != stored:
            return None
        if method == zipfile.ZIP_DEFLATED:
            inflate = zlib.decompressobj(-15)
            try:
                data = inflate.decompress(raw, size) if size else inflate.decompress(raw, 1)
            except zlib.error:
                return None
            if not inflate.eof or inflate.unconsumed_tail:
                return None
        else:
            data = raw
        if len(data) != size or zlib.crc32(data) != crc:
            return None
        return data

    def local_name_problem(self, m: ZipMember) -> str | None:
        """Why member ``m`` can never be read, its local header naming it otherwise than the central directory
        (as unzip-gbk refuses it), or None. Only a member whose local name bytes differ is opened to find out."""
        if not m.local_name_differs:
            return None
        zf = self._file()
        infos = zf.infolist()
        if m.index >= len(infos):
            return None
        try:
            with _zip_open(zf, infos[m.index]):
                return None
        except zipfile.BadZipFile as exc:
            return _explain(exc) if "File name in directory" in str(exc) else None
        except Exception:  # noqa: BLE001 - anything else is said when the member is read
            return None

    def read_index(self, index: int) -> bytes:
        """The bytes of the member at central-directory position ``index``."""
        data = self._read_direct(index)
        if data is not None:
            return data
        m = self._by_index.get(index)
        if m is None:
            raise KeyError(f"{self.path}: no member #{index}")
        self.check_budget(m)
        problem = _member_problem(m)
        if problem:
            raise ArchiveError(f"{self.path}: member {m.name!r}: {problem}")
        zf = self._file()
        infos = zf.infolist()
        zi = infos[index] if index < len(infos) else None
        if zi is None or (zi.CRC, zi.header_offset, zi.file_size, zi.compress_size) != (
            m.crc,
            m.header_offset,
            m.file_size,
            m.compress_size,
        ):  # replaced since it was listed (rsync, mv new.zip): the member at this place is another file now
            raise ArchiveError(f"{self.path}: the archive changed since it was opened (member {m.name!r} is not "
                               "where it was); open the dataset again")  # fmt: skip
        try:
            return _read_bounded(zf, zi, m.file_size)
        except _READ_ERRORS as exc:
            raise ArchiveError(f"{self.path}: member {m.name!r}: {_explain(exc)}") from None

    def read(self, name: str) -> bytes:
        """The bytes of the member with decoded name ``name``."""
        raw, name = name, member_path(name)
        folder = _names_folder(raw) and not self._listed(raw)  # 'cat/1.png/.' names no file, as on the extracted folder
        index = None if folder else self._by_name.get(name)
        if index is None and not folder:  # through links (a link member, or a folder link on the way), as on disk
            found = self.lookup(name)
            index = found[1] if found is not None and found[0] == "file" else None
        if index is None:
            given = next((m for m in self.members if m.name == raw), None)
            why = safe_relpath(raw)[1] if given is not None and safe_relpath(raw)[0] is None else None
            if given is not None and why is None and _macos_metadata(raw):
                why = "macOS Finder's metadata (__MACOSX/, ._NAME), which unzip-gbk does not extract either"
            if why:  # a name the archive lists but no one reads ('cat/../bird/4.png'), as unzip-gbk refuses it
                raise ArchiveError(f"{self.path}: member {raw!r} is not read: {why}")
            raise KeyError(f"{self.path}: no member named {raw if folder or not name else name!r}")  # ('cat/..')
        if name in self.twice:
            raise ArchiveError(f"{self.path}: member {name!r} is in the archive twice: which copy is the image "
                               "cannot be told")  # fmt: skip
        return self.read_index(index)

    def close(self) -> None:
        if self._zf is not None:
            self._zf.close()
            self._zf = None
        if self._fd is not None and self._fd_pid == os.getpid():
            self._fd.close()
        self._fd, self._fd_pid = None, -1

    def __del__(self) -> None:  # the direct reads' file closed quietly, as zipfile closes its own
        f = self.__dict__.get("_fd")
        if f is not None:
            with contextlib.suppress(Exception):
                f.close()

    def __enter__(self) -> ZipReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_zf"], state["_pid"] = None, -1
        state["_fd"], state["_fd_pid"] = None, -1
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if "_table" not in state:  # pickled by a datakit before direct reads: every member read the checked way
            self._table = self._direct_table([])
            self._fd, self._fd_pid = None, -1


def iter_progress(
    total: int, desc: str, quiet: bool = False
) -> tuple[Callable[[int], None] | None, Callable[[], None]]:
    """A byte-progress callback on stderr (only on a terminal), and the function that closes it."""
    if quiet or not sys.stderr.isatty() or total < (64 << 20):
        return None, lambda: None
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit="B", unit_scale=True, file=sys.stderr, leave=False)
    return bar.update, bar.close
