"""Zip archives whose member names use any legacy encoding: detection, safe extraction, reading in place.

Chinese Windows writes member names as GBK bytes without the UTF-8 flag; Japanese, Traditional
Chinese and Korean systems do the same with their code pages, and macOS tools write UTF-8 without
the flag. The raw name bytes are read from the central directory (never re-encoded from
``zipfile``'s cp437 guess) and decoded per member: the UTF-8 flag first, then a valid Info-ZIP
Unicode Path field, then one encoding chosen for the whole archive.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import struct
import sys
import time
import unicodedata
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from datakit.errors import ArchiveError
from datakit.io import discard

__all__ = [
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

CANDIDATES = ("gb18030", "big5", "cp932", "cp949", "cp866", "cp437")
SUPPORTED_METHODS = {0: "stored", 8: "deflate", 12: "bzip2", 14: "lzma"}
METHOD_NAMES = {9: "Deflate64", 93: "Zstandard", 95: "XZ", 96: "JPEG", 97: "WavPack", 98: "PPMd", 99: "AES"}
DEFAULT_MAX_RATIO = 200.0
DEFAULT_MAX_TOTAL = 100 * 2**30
_RATIO_MIN_SIZE = 1 << 20  # tiny members compress absurdly well without being bombs
_CHUNK = 1 << 20


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

    @property
    def is_dir(self) -> bool:
        return self.name.endswith("/") or (self.unix_mode is not None and stat.S_ISDIR(self.unix_mode))

    @property
    def is_symlink(self) -> bool:
        return self.unix_mode is not None and stat.S_ISLNK(self.unix_mode)

    @property
    def encrypted(self) -> bool:
        return bool(self.flags & 0x1)


@dataclass(frozen=True)
class EncodingGuess:
    """The encoding chosen for an archive's unflagged names, and why."""

    encoding: str
    reason: str
    scores: dict[str, float | None] = field(default_factory=dict)


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


def _open_zip(path: str | os.PathLike) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise ArchiveError(f"{path}: is a directory, not a zip archive") from None
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise ArchiveError(f"{path}: not a zip archive, or truncated ({exc})") from None


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
    finally:
        if own:
            zf.close()
    unicode_names = [None if flags & 0x800 else _unicode_path(raw, extra) for raw, flags, extra in entries]
    legacy = [raw for (raw, flags, _), u in zip(entries, unicode_names) if not flags & 0x800 and u is None]
    guess = _guess(legacy) if encoding == "auto" else _forced(encoding, legacy)
    members = []
    for i, ((raw, flags, _), uname, info) in enumerate(zip(entries, unicode_names, infos)):
        if flags & 0x800:
            try:
                name, source = raw.decode("utf-8"), "utf-8 flag"
            except UnicodeDecodeError:
                name, source = raw.decode(guess.encoding, errors="replace"), guess.encoding
        elif uname is not None:
            name, source = uname, "unicode path field"
        else:
            name, source = raw.decode(guess.encoding, errors="replace"), guess.encoding
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
            )  # fmt: skip
        )
    return members, guess


# ---------------------------------------------------------------------------------------------
# Choosing an encoding


def _codec(name: str) -> str:
    import codecs

    try:
        return codecs.lookup(name).name
    except LookupError:
        raise ValueError(f"unknown encoding {name!r}: use 'auto' or a Python codec such as gbk, big5, cp932") from None


def _forced(encoding: str, names: list[bytes]) -> EncodingGuess:
    enc = _codec(encoding)
    bad = sum(1 for n in names if not _decodes(n, enc))
    reason = f"forced by the caller; {len(names) - bad} of {len(names)} unflagged names decode"
    return EncodingGuess(enc, reason, {})


def _decodes(raw: bytes, enc: str) -> bool:
    try:
        raw.decode(enc)
        return True
    except UnicodeDecodeError:
        return False


def _char_score(ch: str, enc: str) -> float:
    """How plausible ``ch`` is in a file name decoded with ``enc`` (1 common .. -2 garbage)."""
    o = ord(ch)
    cat = unicodedata.category(ch)
    if cat in ("Cc", "Co", "Cn", "Cs"):
        return -2.0
    if 0xFF61 <= o <= 0xFF9F or 0x2500 <= o <= 0x259F:  # half-width katakana, box drawing: mojibake
        return -1.0
    if 0x4E00 <= o <= 0x9FFF:
        if enc in ("gb18030", "gbk"):
            return 1.0 if _encodes(ch, "gb2312") else 0.0
        if enc == "big5":
            return 1.0 if 0xA4 <= ch.encode("big5")[0] <= 0xC6 else 0.3
        if enc == "cp932":
            return 1.0 if 0x88 <= ch.encode("cp932")[0] <= 0x9F else 0.3
        return 0.2 if enc == "cp949" else 0.0
    if 0x3040 <= o <= 0x30FF:
        return 1.0 if enc == "cp932" else 0.0
    if 0xAC00 <= o <= 0xD7A3:
        return (1.0 if _encodes(ch, "euc_kr") else 0.3) if enc == "cp949" else 0.0
    if 0x0400 <= o <= 0x04FF:
        return 1.0 if enc == "cp866" else 0.0
    if 0xFF01 <= o <= 0xFF5E or 0x3000 <= o <= 0x303F:
        return 0.5
    if cat.startswith("L") and o < 0x250:
        return 0.5 if enc == "cp437" else 0.2
    return -0.5 if cat.startswith("S") else 0.0


def _encodes(ch: str, enc: str) -> bool:
    try:
        ch.encode(enc)
        return True
    except UnicodeEncodeError:
        return False


def _guess(names: list[bytes]) -> EncodingGuess:
    if not names:
        return EncodingGuess("utf-8", "every name is flagged UTF-8 or carries a Unicode path field", {})
    if all(n.isascii() for n in names):
        return EncodingGuess("ascii", f"all {len(names)} unflagged names are ASCII", {})
    if all(_decodes(n, "utf-8") for n in names):
        return EncodingGuess("utf-8", f"all {len(names)} unflagged names are valid UTF-8 (flag missing)", {})
    scores: dict[str, float | None] = {}
    for enc in CANDIDATES:
        try:
            text = "".join(n.decode(enc) for n in names)
        except UnicodeDecodeError:
            scores[enc] = None
            continue
        chars = [c for c in text if ord(c) >= 0x80]
        scores[enc] = sum(_char_score(c, enc) for c in chars) / max(1, len(chars))
    best = max((e for e in CANDIDATES if scores[e] is not None), key=lambda e: scores[e])  # cp437 always decodes
    chosen = "gbk" if best == "gb18030" and all(_decodes(n, "gbk") for n in names) else best
    ruled_out = [e for e, s in scores.items() if s is None]
    others = ", ".join(f"{e} {s:.2f}" for e, s in scores.items() if s is not None and e != best)
    reason = f"{len(names)} unflagged names decode as {chosen} with plausibility {scores[best]:.2f}"
    if others:
        reason += f" (also decode: {others})"
    if ruled_out:
        reason += f"; ruled out: {', '.join(ruled_out)}"
    return EncodingGuess(chosen, reason, scores)


def detect_encoding(archive: str | os.PathLike) -> EncodingGuess:
    """The encoding ``unzip(..., encoding="auto")`` would use for the archive's unflagged names.

    Strict UTF-8 first; otherwise every candidate (GB18030/GBK, Big5, CP932, CP949, CP866, CP437)
    that decodes all the names is scored on how plausible the characters are in file names, and
    the best wins (ties go to the earlier candidate). ``reason`` says why.
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
    return "/".join(parts), "; ".join(notes)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _check_bomb(archive: str, members: list[ZipMember], max_total: int, max_ratio: float, dest: Path) -> None:
    total = sum(m.file_size for m in members if not m.is_dir)
    if total > max_total:
        raise ArchiveError(
            f"{archive}: refused, members declare {total} bytes uncompressed, over the limit of {max_total} "
            "(raise it with --max-total if this is expected)"
        )
    for m in members:
        if m.file_size >= _RATIO_MIN_SIZE and m.file_size > max_ratio * max(1, m.compress_size):
            ratio = m.file_size / max(1, m.compress_size)
            raise ArchiveError(
                f"{archive}: refused, member {m.name!r} expands {ratio:.0f}:1 ({m.compress_size} -> {m.file_size} "
                f"bytes), over the limit of {max_ratio:.0f}:1 (zip bomb?; raise it with --max-ratio)"
            )
    spans = sorted(
        ((m.header_offset, m.header_offset + 30 + len(m.raw_name) + m.compress_size, m) for m in members),
        key=lambda s: s[:2],
    )
    for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
        if start < end and a.compress_size and b.compress_size:
            raise ArchiveError(
                f"{archive}: refused, members {a.name!r} and {b.name!r} overlap in the file (a zip bomb technique)"
            )
    free = shutil.disk_usage(dest).free
    if total > free:
        raise ArchiveError(f"{archive}: refused, members need {total} bytes but only {free} are free in {dest}")


def _mtime(m: ZipMember) -> float | None:
    try:
        return time.mktime(m.date_time + (0, 0, -1))
    except (OverflowError, ValueError):
        return None


def _same_file(path: Path, m: ZipMember) -> bool:
    if not path.is_file() or path.is_symlink() or path.stat().st_size != m.file_size:
        return False
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc == m.crc


def _member_problem(m: ZipMember) -> str | None:
    if m.encrypted:
        return "encrypted; datakit does not decrypt (use a tool that asks for the password)"
    if m.method not in SUPPORTED_METHODS:
        label = METHOD_NAMES.get(m.method, "unknown")
        return f"compression method {m.method} ({label}) is not supported"
    return None


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

    Nothing lands outside ``dest``; an archive whose declared sizes or ratios look like a bomb
    is refused before anything is written; an existing file is kept unless ``overwrite`` (one
    identical to the member counts as done, so re-running an interrupted extraction finishes
    it); every file is written under a temporary name and renamed when complete, with the
    member's timestamp. Per-member problems are collected in the report, not raised.

    Raises:
        ArchiveError: unreadable archive, or one refused as a whole (bomb limits, overlap, space).
        FileNotFoundError: ``archive`` does not exist.
    """
    archive = os.fspath(archive)
    dest_path = Path(dest)
    with _open_zip(archive) as zf:
        members, guess = read_members(archive, encoding, zf=zf)
        report = ExtractReport(encoding=guess)
        dest_path.mkdir(parents=True, exist_ok=True)
        _check_bomb(archive, members, max_total, max_ratio, dest_path)
        root = os.path.realpath(dest_path)
        infos = zf.infolist()
        dirs: list[tuple[Path, ZipMember]] = []
        safe_dirs: set[str] = set()  # folders already made and checked to resolve inside the target
        for m in members:
            rel, note = safe_relpath(m.name)
            label = f"{archive}: member {m.name!r}"
            if rel is None:
                report.problems.append(f"{label}: {note}")
                continue
            if note:
                report.notes.append(f"{label}: {note}, written as {rel!r}")
            target = dest_path / rel
            parent = os.path.dirname(rel)
            if parent not in safe_dirs:
                if not _inside(os.path.realpath(target.parent), root):
                    report.problems.append(
                        f"{label}: refused, its folder resolves outside the target (through a symlink)"
                    )
                    continue
                if not m.is_dir:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    safe_dirs.add(parent)
            try:
                if m.is_dir:
                    target.mkdir(parents=True, exist_ok=True)
                    dirs.append((target, m))
                    continue
                problem = _member_problem(m)
                if problem:
                    report.problems.append(f"{label}: {problem}")
                    continue
                if m.is_symlink:
                    safe_dirs.clear()  # a new link may redirect folders checked before
                    _extract_symlink(zf, infos[m.index], m, target, rel, root, overwrite, report, label)
                    continue
                if os.path.lexists(target):
                    if _same_file(target, m):
                        report.unchanged.append(rel)
                        if progress:
                            progress(m.file_size)
                        continue
                    if not overwrite:
                        report.problems.append(
                            f"{label}: {target} exists and differs; not overwritten (use --overwrite)"
                        )
                        continue
                    if target.is_dir() and not target.is_symlink():
                        report.problems.append(f"{label}: {target} is a folder; not replaced by a file")
                        continue
                _extract_file(zf, infos[m.index], m, target, progress)
                report.extracted.append(rel)
            except (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError, NotImplementedError) as exc:
                report.problems.append(f"{label}: {_explain(exc)}")
        for target, m in reversed(dirs):  # after their contents, which touch the folders' times
            t = _mtime(m)
            if t is not None:
                os.utime(target, (t, t))
    return report


def _explain(exc: BaseException) -> str:
    text = str(exc)
    if "Bad CRC-32" in text:
        return "data does not match its CRC-32 (corrupt, or larger than its declared size)"
    if isinstance(exc, EOFError) or "Compressed file ended" in text:
        return "data is truncated (the archive was cut short)"
    return text or type(exc).__name__


def _extract_file(
    zf: zipfile.ZipFile, info: zipfile.ZipInfo, m: ZipMember, target: Path, progress: Callable[[int], None] | None
) -> None:
    tmp = target.with_name(f".{target.name}.unzip-part")
    written = 0
    try:
        with zf.open(info) as src, open(tmp, "wb") as dst:
            while chunk := src.read(_CHUNK):
                written += len(chunk)
                if written > m.file_size:
                    raise zipfile.BadZipFile(f"inflates past its declared size of {m.file_size} bytes; stopped")
                dst.write(chunk)
                if progress:
                    progress(len(chunk))
        if written != m.file_size:
            raise zipfile.BadZipFile(f"holds {written} bytes but declares {m.file_size}")
        if m.unix_mode is not None and stat.S_IMODE(m.unix_mode):
            os.chmod(tmp, stat.S_IMODE(m.unix_mode) & 0o777)
        t = _mtime(m)
        if t is not None:
            os.utime(tmp, (t, t))
        os.replace(tmp, target)
    except BaseException:
        discard(tmp)
        raise


def _extract_symlink(
    zf: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    m: ZipMember,
    target: Path,
    rel: str,
    root: str,
    overwrite: bool,
    report: ExtractReport,
    label: str,
) -> None:
    link = zf.read(info).decode("utf-8", errors="replace")
    resolved = os.path.normpath(os.path.join(root, os.path.dirname(rel), link))
    if os.path.isabs(link) or re.match(r"^[A-Za-z]:", link) or not _inside(resolved, root):
        report.problems.append(f"{label}: symlink to {link!r} points outside the target folder; not created")
        return
    if os.path.lexists(target):
        if os.path.islink(target) and os.readlink(target) == link:
            report.unchanged.append(rel)
            return
        if not overwrite:
            report.problems.append(f"{label}: {target} exists and differs; not overwritten (use --overwrite)")
            return
        target.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(link, target)
    report.extracted.append(rel)


# ---------------------------------------------------------------------------------------------
# Reading in place


class ZipReader:
    """Read members of an archive by decoded name without extracting.

    The zip handle opens lazily in the process that reads (and again after a fork), and is not
    pickled, so a reader can live in a Dataset used by DataLoader workers under fork or spawn.
    """

    def __init__(self, path: str | os.PathLike, encoding: str = "auto") -> None:
        self.path = os.fspath(path)
        members, self.encoding = read_members(self.path, encoding)
        self.members = [m for m in members if not m.is_dir and not m.is_symlink]
        self._by_name = {m.name: m.index for m in self.members}
        self._zf: zipfile.ZipFile | None = None
        self._pid = -1

    def names(self) -> list[str]:
        """Decoded names of the file members, in archive order."""
        return [m.name for m in self.members]

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self.members)

    def _file(self) -> zipfile.ZipFile:
        if self._zf is None or self._pid != os.getpid():
            self._zf = _open_zip(self.path)
            self._pid = os.getpid()
        return self._zf

    def read_index(self, index: int) -> bytes:
        """The bytes of the member at central-directory position ``index``."""
        zf = self._file()
        try:
            return zf.read(zf.infolist()[index])
        except (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError, NotImplementedError) as exc:
            raise ArchiveError(f"{self.path}: member #{index}: {_explain(exc)}") from None

    def read(self, name: str) -> bytes:
        """The bytes of the member with decoded name ``name``."""
        try:
            index = self._by_name[name.replace("\\", "/")]
        except KeyError:
            raise KeyError(f"{self.path}: no member named {name!r}") from None
        return self.read_index(index)

    def close(self) -> None:
        if self._zf is not None:
            self._zf.close()
            self._zf = None

    def __enter__(self) -> ZipReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_zf"], state["_pid"] = None, -1
        return state


def iter_progress(
    total: int, desc: str, quiet: bool = False
) -> tuple[Callable[[int], None] | None, Callable[[], None]]:
    """A byte-progress callback on stderr (only on a terminal), and the function that closes it."""
    if quiet or not sys.stderr.isatty() or total < (64 << 20):
        return None, lambda: None
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit="B", unit_scale=True, file=sys.stderr, leave=False)
    return bar.update, bar.close
