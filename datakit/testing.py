"""Builders for real test data: zip archives written byte by byte, and photo-like images.

Python's ``zipfile`` always flags non-ASCII names as UTF-8, so it cannot write the archives
that Chinese Windows writes (GBK name bytes, no flag). :func:`build_zip` writes the bytes of
the format itself, so tests and sample generators can make exactly the archives users get.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

import numpy as np

__all__ = ["ZipEntry", "build_zip", "unicode_path_extra", "synthetic_image"]

_UNIX_MADE_BY = (3 << 8) | 20
_DOS_MADE_BY = 20


@dataclass
class ZipEntry:
    """One member of an archive built by :func:`build_zip`.

    ``name`` is the raw name as stored (bytes, already encoded however the test wants).
    ``declared_size`` overrides the uncompressed size written in the headers (for bomb
    tests); ``symlink_to`` makes a Unix symlink member; ``encrypted`` sets the encryption
    flag; ``method`` 0 stores, 8 deflates, anything else is written as given.
    ``external_attr`` and ``made_by`` override the central directory's attribute and
    "version made by" fields (host in the high byte: 0 MS-DOS, 3 Unix, 11 NTFS).
    """

    name: bytes
    data: bytes = b""
    method: int = 8
    utf8_flag: bool = False
    extra: bytes = b""
    encrypted: bool = False
    declared_size: int | None = None
    symlink_to: bytes | None = None
    mode: int | None = None
    date_time: tuple[int, int, int, int, int, int] = (2024, 5, 17, 10, 30, 0)
    comment: bytes = field(default=b"")
    external_attr: int | None = None
    made_by: int | None = None


def unicode_path_extra(header_name: bytes, unicode_name: str, crc: int | None = None) -> bytes:
    """An Info-ZIP Unicode Path extra field (0x7075, version 1) for ``header_name``."""
    crc = zlib.crc32(header_name) if crc is None else crc
    body = b"\x01" + struct.pack("<I", crc) + unicode_name.encode("utf-8")
    return struct.pack("<HH", 0x7075, len(body)) + body


def _dos_time(dt: tuple[int, int, int, int, int, int]) -> tuple[int, int]:
    y, mo, d, h, mi, s = dt
    return (h << 11) | (mi << 5) | (s // 2), ((y - 1980) << 9) | (mo << 5) | d


def build_zip(entries: list[ZipEntry], *, truncate_at: int | None = None) -> bytes:
    """The bytes of a zip archive holding ``entries`` exactly as described."""
    out = bytearray()
    central = bytearray()
    for e in entries:
        data = e.symlink_to if e.symlink_to is not None else e.data
        crc = zlib.crc32(data)
        if e.method == 8:
            comp = zlib.compressobj(6, zlib.DEFLATED, -15)
            payload = comp.compress(data) + comp.flush()
        else:
            payload = data
        flags = (0x800 if e.utf8_flag else 0) | (0x1 if e.encrypted else 0)
        usize = len(data) if e.declared_size is None else e.declared_size
        mtime, mdate = _dos_time(e.date_time)
        offset = len(out)
        out += struct.pack(
            "<IHHHHHIIIHH", 0x04034B50, 20, flags, e.method, mtime, mdate, crc, len(payload), usize,
            len(e.name), len(e.extra),
        )  # fmt: skip
        out += e.name + e.extra + payload
        if e.symlink_to is not None:
            made_by, attr = _UNIX_MADE_BY, (0o120777 << 16)
        elif e.mode is not None:
            made_by, attr = _UNIX_MADE_BY, (e.mode << 16)
        else:
            made_by, attr = _DOS_MADE_BY, (0x10 if e.name.endswith(b"/") else 0)
        if e.external_attr is not None:
            attr = e.external_attr
        if e.made_by is not None:
            made_by = e.made_by
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII", 0x02014B50, made_by, 20, flags, e.method, mtime, mdate, crc,
            len(payload), usize, len(e.name), len(e.extra), len(e.comment), 0, 0, attr, offset,
        )  # fmt: skip
        central += e.name + e.extra + e.comment
    cd_offset = len(out)
    out += central
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central), cd_offset, 0)
    if truncate_at is not None:
        del out[truncate_at:]
    return bytes(out)


def synthetic_image(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A smooth, photo-like uint8 RGB image (gradients plus noise) that compresses like a photo."""
    rng = np.random.default_rng(seed)
    y = np.linspace(0, 1, height, dtype=np.float32)[:, None]
    x = np.linspace(0, 1, width, dtype=np.float32)[None, :]
    img = np.empty((height, width, 3), dtype=np.float32)
    for c in range(3):
        a, b, f = rng.uniform(0.2, 1.0, 3)
        img[..., c] = 127 + 80 * np.sin(2 * np.pi * (a * x * f * 3 + b * y * 2 + c))
    img += rng.normal(0, 12, img.shape).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)
