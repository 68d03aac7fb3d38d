"""Bytes to pixels and back, for any path (Unicode, GBK, spaces) and every common image format.

``cv2.imread`` returns ``None`` on a non-ASCII path on Windows and on any failure everywhere;
here the bytes are read by Python (which handles every path) and decoded by ``cv2.imdecode``,
with Pillow as the fallback for what OpenCV cannot decode. Failures raise, never return None.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import os
import re
import sys
import tempfile
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from datakit.errors import DatakitError, ImageDecodeError, UsageError

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "IMAGE_EXTENSIONS",
    "MODES",
    "UNNAMED",
    "WRITE_EXTENSIONS",
    "ImageDecodeError",
    "atomic_output",
    "check_output",
    "decode_image",
    "decode_jpeg_region",
    "discard",
    "encode_image",
    "header_size",
    "image_format",
    "probe_image",
    "imread",
    "imwrite",
    "pixel_budget",
    "read_bytes",
    "reduction_factor",
]

MODES = ("bgr", "rgb", "gray", "unchanged")
# the formats imwrite (and so preview) writes, by extension
WRITE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff")
IMAGE_EXTENSIONS = (
    ".jpg",
    ".jpeg",
    ".jpe",
    ".jfif",
    ".png",
    ".bmp",
    ".webp",
    ".tif",
    ".tiff",
    ".gif",
    ".ppm",
    ".pgm",
    ".pbm",
)

_MAGIC = (
    (b"\xff\xd8", "JPEG"),  # SOI; libjpeg skips garbage before the next marker, so no third byte
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"II+\x00", "TIFF"),  # BigTIFF (64-bit offsets)
    (b"MM\x00+", "TIFF"),
)
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def image_format(data: bytes | memoryview) -> str | None:
    """The container format named by the first bytes (``"JPEG"``, ``"PNG"``, ...), or None."""
    head = bytes(data[:12])
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WEBP"
    if head[:2] in (b"P1", b"P2", b"P3", b"P4", b"P5", b"P6"):
        return "PNM"
    if head.startswith((b"#?RADIANCE", b"#?RGBE")):
        return "HDR"  # Radiance: OpenCV decodes it (to float), Pillow does not
    return None


_HDR_SIZE = re.compile(rb"\s*-Y\s*([+-]?\d+)\s*\+X\s*([+-]?\d+)")  # as OpenCV reads it: sscanf "-Y %d +X %d"


def _hdr_size(data: bytes) -> tuple[int, int] | None:
    """A Radiance HDR's (height, width): text lines up to a blank one, then ``-Y H +X W``, read as OpenCV
    reads it (what follows the two numbers is ignored; other axis orders OpenCV does not decode)."""
    end = data.find(b"\n\n", 0, 65536)
    m = _HDR_SIZE.match(data, end + 2, end + 2 + 4096) if end >= 0 else None
    return (abs(int(m.group(1))), abs(int(m.group(2)))) if m else None


def _segments(data: bytes):
    """(position, marker) of a JPEG's markers in turn, from after SOI; bytes that are not a marker between
    segments are skipped, as libjpeg skips them (with a warning). The caller stops at the scan (0xDA)."""
    i, n = 2, len(data)
    while i + 4 < n:
        if data[i] != 0xFF:
            i = data.find(b"\xff", i)
            if i < 0:
                return
            continue
        marker = data[i + 1]
        if marker == 0xFF:  # fill bytes
            i += 1
            continue
        if marker == 0x00:  # not a marker (a stuffed byte): garbage to libjpeg, whose length is not read
            i += 2
            continue
        yield i, marker
        standalone = marker == 0xD8 or marker == 0x01 or 0xD0 <= marker <= 0xD7
        i += 2 if standalone else 2 + int.from_bytes(data[i + 2 : i + 4], "big")


def _jpeg_size(data: bytes) -> tuple[int, int, int] | None:
    """(height, width, components) from a JPEG's SOF segment, without decoding; a frame header behind
    garbage is still found, as libjpeg finds it."""
    for i, marker in _segments(data):
        if marker in _SOF_MARKERS:
            if i + 9 >= len(data):
                return None
            return int.from_bytes(data[i + 5 : i + 7], "big"), int.from_bytes(data[i + 7 : i + 9], "big"), data[i + 9]
        if marker == 0xDA:  # start of scan before any frame header: not a valid JPEG
            return None
    return None


def _jpeg_chroma_lag(data: bytes) -> int:
    """How many times coarser than the luma libjpeg decodes a JPEG's chroma at a reduced DCT scale, along its
    worse axis: 1 where each chroma component is subsampled alike across and down (4:4:4, 4:2:0) or there is none;
    2 for 4:2:2 and 4:4:0, 4 for 4:1:1. libjpeg-turbo scales a component's IDCT up in place of upsampling it only
    by square steps, both axes at once: a 4:2:2 JPEG's chroma, half the width at full size, is a quarter of the
    luma's width at any reduced scale, and upsampled from there (10 levels of Cb and Cr off at 1/4 on an 8-pixel
    texture, 15 at 1/8; under 1 for 4:2:0)."""
    for i, marker in _segments(data):
        if marker in _SOF_MARKERS:
            n = data[i + 9] if i + 9 < len(data) else 0
            comps = data[i + 10 : i + 10 + 3 * n]
            if n < 2 or len(comps) < 3 * n:
                return 1
            hs, vs = [b >> 4 for b in comps[1::3]], [b & 15 for b in comps[1::3]]
            if min(hs) < 1 or min(vs) < 1:
                return 1
            lag = 1
            for h, v in zip(hs, vs):
                across, down = max(hs) / h, max(vs) / v
                lag = max(lag, int(max(across / down, down / across)))
            return lag
        if marker == 0xDA:
            return 1
    return 1


def _apng_still(data: bytes) -> bytes:
    """An animated PNG whose still image (IDAT, what libpng, Pillow and torchvision show) is not its first
    frame, without its animation control chunk: OpenCV would give the first frame. Any other PNG as it is."""
    if data.find(b"acTL") < 0:
        return data
    i, actl, n = 8, [], len(data)
    while i + 8 <= n:
        size, kind = int.from_bytes(data[i : i + 4], "big"), data[i + 4 : i + 8]
        if kind == b"fcTL" or kind == b"IDAT":  # a frame control first: the still is the first frame
            if kind == b"fcTL" or not actl:
                return data
            return b"".join(data[a:b] for a, b in zip([0] + [e for _, e in actl], [s for s, _ in actl] + [n]))
        if kind == b"acTL":
            actl.append((i, i + 12 + size))  # the chunk: length, type, data, CRC (each one, if written twice)
        i += 12 + size
    return data


_PNG_GAMMA_CHUNKS = (b"gAMA", b"sRGB", b"cHRM", b"iCCP")


def _png_luma_plain(data: bytes) -> bytes:
    """A colour PNG (RGB, RGBA, a palette) to read in gray without its gamma and colour-space chunks: libpng turns
    colour to gray in linear light where the file states a gamma (red-orange 200, 40, 10 came out 118, not the
    BT.601 luma 84 that the same file without the chunk, a JPEG and Pillow give), and OpenCV applies the chunks
    nowhere else. A chunk whose CRC does not match stays, for strict decoding to see. Any other PNG as it is."""
    if len(data) < 26 or data[25] not in (2, 3, 6) or not any(data.find(k, 33) > 0 for k in _PNG_GAMMA_CHUNKS):
        return data
    i, drop, n = 8, [], len(data)
    while i + 8 <= n:
        size, kind = int.from_bytes(data[i : i + 4], "big"), data[i + 4 : i + 8]
        if kind == b"IDAT":
            break
        end = i + 12 + size
        if (
            kind in _PNG_GAMMA_CHUNKS
            and end <= n
            and zlib.crc32(data[i + 4 : end - 4]) == int.from_bytes(data[end - 4 : end], "big")
        ):
            drop.append((i, end))
        i = end
    if not drop:
        return data
    return b"".join(data[a:b] for a, b in zip([0] + [e for _, e in drop], [s for s, _ in drop] + [n]))


def _jpeg_precision(data: bytes) -> int | None:
    """The sample precision (bits) in a JPEG's SOF segment: 8 in nearly all; 12 or 16 in some. None where the byte
    is no precision its frame type allows (8 or 12; 2 to 16 in a lossless frame): a damaged header, not a JPEG of
    another depth."""
    for i, marker in _segments(data):
        if marker in _SOF_MARKERS:
            bits = data[i + 4] if i + 4 < len(data) else None
            lossless = marker in (0xC3, 0xC7, 0xCB, 0xCF)
            return bits if bits is not None and (2 <= bits <= 16 if lossless else bits in (8, 12)) else None
        if marker == 0xDA:
            return None
    return None


def _jpeg_ends(data: bytes) -> bool:
    """Whether a JPEG has its end-of-image marker: at its end (the usual file), or after its first scan begins
    when more follows it (a motion photo's video, padding), which the decoders ignore. An FF D9 before the scan
    (an EXIF thumbnail's own, a comment's bytes) is no end: a file cut in its scan has none after it."""
    if data.endswith(b"\xff\xd9"):  # most files, at once
        return True
    for i, marker in _segments(data):  # to the first scan: an EXIF thumbnail before it has an end marker of its own,
        if marker == 0xDA:  # and a COM segment may hold FF D9: only one after the scan begins counts
            # in entropy-coded data 0xFF is followed by 0x00 or a restart marker: FF D9 after the scan begins is the
            # end of the image (in the last 4 KB first: padding or a little more after it)
            return data.rfind(b"\xff\xd9", max(i, len(data) - 4096)) >= 0 or data.find(b"\xff\xd9", i) >= 0
    return False


_MAX_SCANS = 500  # libjpeg-turbo's advice for untrusted files (TJPARAM_SCANLIMIT); a progressive JPEG has about 10


def _refuse_scan_bomb(data: bytes, name) -> None:
    """Refuse a progressive JPEG of more than ``_MAX_SCANS`` scans: each is decoded over the whole image (its last scan
    repeated 10,000 times is 310 KB of 3000 x 3000 pixels that took over two minutes). FF DA is a scan's marker
    only: entropy-coded data stuffs a 00 after every FF."""
    sof = next((m for _, m in _segments(data) if m in _SOF_MARKERS or m == 0xDA), None)
    if sof not in (0xC2, 0xC6, 0xCA, 0xCE):  # progressive frames only: a sequential one reads each scan once
        return
    first = data.find(b"\xff\xda")
    # the image's end (most files end so): a motion photo's video after it is no scan of it
    end = len(data) - 2 if data.endswith(b"\xff\xd9") else data.find(b"\xff\xd9", first) if first >= 0 else -1
    body = np.frombuffer(data, np.uint8, count=(end if end >= 0 else len(data)))  # (after it: FF DA by chance)
    ff = np.flatnonzero(body[:-1] == 0xFF)  # a C pass, where bytes.count takes 0.25 ms for 150 KB of scans
    n = int(np.count_nonzero(body[ff + 1] == 0xDA))
    if n > _MAX_SCANS:
        raise ImageDecodeError(f"{_describe(name)}: a JPEG of {n} scans (a progressive JPEG has about 10; more than "
                               f"{_MAX_SCANS} is refused, as libjpeg-turbo advises: each is decoded over the whole "
                               "image)")  # fmt: skip


def _exif_orientation(data: bytes) -> int:
    """The EXIF orientation (1-8) every datakit path turns a JPEG upright by, read from the segments
    before the scan without decoding: the Orientation tag of the first APP1 segment that begins
    ``Exif\\0\\0`` (once or, as some writers leave it, twice), or 1 where that segment has no such tag,
    cannot be read or gives a value outside 1-8. Later segments are never consulted (see :func:`decode_image`)."""
    for i, marker in _segments(data):
        if marker == 0xDA or marker == 0xD9:
            return 1
        if marker != 0xE1 or data[i + 4 : i + 10] != b"Exif\0\0":
            continue
        tiff = data[i + 10 : i + 2 + int.from_bytes(data[i + 2 : i + 4], "big")]
        if tiff[:6] == b"Exif\0\0":  # the header written twice (a writer given EXIF that held it): Pillow skips both
            tiff = tiff[6:]
        order = {b"II": "little", b"MM": "big"}.get(tiff[:2])
        if order is None or len(tiff) < 8:
            return 1
        ifd = int.from_bytes(tiff[4:8], order)
        count = int.from_bytes(tiff[ifd : ifd + 2], order) if ifd + 2 <= len(tiff) else 0
        for e in range(ifd + 2, min(ifd + 2 + 12 * count, len(tiff) - 11), 12):
            if int.from_bytes(tiff[e : e + 2], order) == 0x0112:
                kind = int.from_bytes(tiff[e + 2 : e + 4], order)  # SHORT, as written; LONG, as some write it
                if kind not in (3, 4):  # no other type holds an orientation (Pillow reads none either)
                    return 1
                value = int.from_bytes(tiff[e + 8 : e + (12 if kind == 4 else 10)], order)
                return value if 1 <= value <= 8 else 1
        return 1
    return 1


def _container_orientation(data: bytes, fmt: str | None) -> int:
    """The EXIF orientation OpenCV turns a PNG or WebP by when it decodes them in colour or gray, which
    ``IMREAD_UNCHANGED`` leaves as stored: the first ``eXIf`` chunk of a PNG (TIFF data, no ``Exif\\0\\0``
    before it) or ``EXIF`` chunk of a WebP (with or without it), its first IFD's Orientation tag read as
    OpenCV reads it (the value field's first two bytes, whatever the type); 1 where there is none or it
    is outside 1-8."""
    if fmt == "PNG" and b"eXIf" in data:
        i, want = 8, b"eXIf"
    elif fmt == "WEBP" and b"EXIF" in data:
        i, want = 12, b"EXIF"
    else:
        return 1
    while i + 8 <= len(data):  # chunks: PNG length, type, data, CRC; RIFF type, length, data, pad to even
        if fmt == "PNG":
            size, tag, at = int.from_bytes(data[i : i + 4], "big"), data[i + 4 : i + 8], i + 8
        else:
            tag, size, at = data[i : i + 4], int.from_bytes(data[i + 4 : i + 8], "little"), i + 8
        if tag == want:
            tiff = data[at : at + size]
            if fmt == "WEBP" and tiff.startswith(b"Exif\0\0"):
                tiff = tiff[6:]
            order = {b"II*\0": "little", b"MM\0*": "big"}.get(tiff[:4])
            if order is None:
                return 1
            ifd = int.from_bytes(tiff[4:8], order)
            count = int.from_bytes(tiff[ifd : ifd + 2], order) if ifd + 2 <= len(tiff) else 0
            for e in range(ifd + 2, min(ifd + 2 + 12 * count, len(tiff) - 11), 12):
                if int.from_bytes(tiff[e : e + 2], order) == 0x0112:
                    value = int.from_bytes(tiff[e + 8 : e + 10], order)
                    return value if 1 <= value <= 8 else 1
            return 1
        i = at + size + (4 if fmt == "PNG" else size & 1)
    return 1


def _exif_turned(data: bytes) -> bool:
    """Whether a JPEG's EXIF orientation (:func:`_exif_orientation`) is one of 5-8, which swap the
    sides when the image is turned upright."""
    return _exif_orientation(data) >= 5


def _orient(img: np.ndarray, orientation: int) -> np.ndarray:
    """An image (or a crop of it) as stored, turned upright by its EXIF ``orientation`` as Pillow's
    ``ImageOps.exif_transpose`` turns it; the array itself for orientation 1."""
    if orientation == 1:
        return img
    import cv2

    if orientation == 2:
        return cv2.flip(img, 1)
    if orientation == 3:
        return cv2.rotate(img, cv2.ROTATE_180)
    if orientation == 4:
        return cv2.flip(img, 0)
    if orientation == 5:
        return cv2.transpose(img)
    if orientation == 6:
        return cv2.rotate(img, cv2.ROTATE_90_CLOCKWISE)
    if orientation == 7:
        return cv2.flip(cv2.transpose(img), -1)
    return cv2.rotate(img, cv2.ROTATE_90_COUNTERCLOCKWISE)


def _gif_size(data: bytes) -> tuple[int, int] | None:
    """The larger of the logical screen and the first frame (which may exceed the screen)."""
    if len(data) < 13:
        return None
    w, h = int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
    i = 13 + (3 << ((data[10] & 7) + 1) if data[10] & 0x80 else 0)
    while i < len(data):
        if data[i] == 0x2C and i + 9 <= len(data):
            x, y = int.from_bytes(data[i + 1 : i + 3], "little"), int.from_bytes(data[i + 3 : i + 5], "little")
            fw, fh = int.from_bytes(data[i + 5 : i + 7], "little"), int.from_bytes(data[i + 7 : i + 9], "little")
            return max(h, y + fh), max(w, x + fw)
        if data[i] != 0x21 or i + 2 >= len(data):
            break
        i += 2  # extension: introducer, label, then sub-blocks until a zero length
        while i < len(data) and data[i]:
            i += data[i] + 1
        i += 1
    return h, w


def _tiff_tags(data: bytes, wanted: tuple[int, ...]) -> dict[int, int]:
    """The SHORT, LONG (or BigTIFF's LONG8) values of the ``wanted`` tags in a TIFF's first IFD (those it
    holds). A BigTIFF has 8-byte offsets and counts, and entries of 20 bytes instead of 12."""
    order = "little" if data[:2] == b"II" else "big"
    big = int.from_bytes(data[2:4], order) == 43
    head, entry, value = (8, 20, 12) if big else (2, 12, 8)  # the IFD's count, an entry, its value's place
    off = int.from_bytes(data[8:16] if big else data[4:8], order)
    if off + head > len(data):
        return {}
    count = int.from_bytes(data[off : off + head], order)
    tags: dict[int, int] = {}
    for k in range(min(count, 4096)):
        e = off + head + entry * k
        if e + entry > len(data):
            break
        tag, typ = int.from_bytes(data[e : e + 2], order), int.from_bytes(data[e + 2 : e + 4], order)
        if tag in wanted:
            width = {3: 2, 4: 4, 16: 8}.get(typ, 4)  # SHORT, LONG, LONG8
            n = int.from_bytes(data[e + 4 : e + value], order)
            at = e + value
            if n * width > entry - value:  # the values elsewhere (a SampleFormat per channel): the first one
                at = int.from_bytes(data[e + value : e + entry], order)
                if at + width > len(data):
                    continue
            tags[tag] = int.from_bytes(data[at : at + width], order)
    return tags


def _tiff_size(data: bytes) -> tuple[int, int] | None:
    tags = _tiff_tags(data, (256, 257))
    return (tags[257], tags[256]) if len(tags) == 2 else None


def _tiff_tile_over(data: bytes, name, limit: int) -> ImageDecodeError | None:
    """A TIFF whose tiles (TileWidth x TileLength) pass the pixel budget: libtiff allocates a whole tile
    to decode any of it, so 16 x 16 pixels stored as one 32768 x 32768 tile take 1 GB (4 GiB at 65536)."""
    tags = _tiff_tags(data, (257, 278, 322, 323))
    if 322 in tags and 323 in tags and tags[322] * tags[323] > limit:
        tw, th = tags[322], tags[323]
        return ImageDecodeError(f"{_describe(name)}: TIFF tiles of {tw}x{th} = {tw * th} pixels, over the limit "
                                f"of {limit} (a decompression bomb?; raise it with max_pixels= or the "
                                "DATAKIT_MAX_PIXELS environment variable)")  # fmt: skip
    # strips of a row or a few over more than a million rows (past OpenCV's side, so to Pillow): each strip is a
    # read of its own, and 8 million one-row strips of 8 million pixels took a minute and 2.7 GB
    rows, per = tags.get(257, 0), tags.get(278) or 0xFFFFFFFF
    strips = -(-rows // per) if 322 not in tags else 0
    if strips > _MAX_TIFF_STRIPS:
        return ImageDecodeError(f"{_describe(name)}: a TIFF of {strips:,} strips ({per} row{'s' * (per > 1)} each), "
                                f"more than the {_MAX_TIFF_STRIPS:,} it may have to be read: save it with larger "
                                "strips (RowsPerStrip) or as tiles")  # fmt: skip
    return None


_MAX_TIFF_STRIPS = 1 << 20


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30:
        return int.from_bytes(data[28:30], "little") & 0x3FFF, int.from_bytes(data[26:28], "little") & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return ((bits >> 14) & 0x3FFF) + 1, (bits & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        return int.from_bytes(data[27:30], "little") + 1, int.from_bytes(data[24:27], "little") + 1
    return None


def _pnm_size(data: bytes) -> tuple[int, int] | None:
    head = re.sub(rb"#[^\n]*\n", b" ", data[:65536])  # comments may sit between the numbers
    m = re.match(rb"P[1-6]\s+(\d+)\s+(\d+)", head)
    return (int(m.group(2)), int(m.group(1))) if m else None


def _pnm_maxval(data: bytes) -> int | None:
    """The maximum sample value a PGM or PPM header declares (P2, P3, P5, P6), or None."""
    head = re.sub(rb"#[^\n]*\n", b" ", data[:65536])
    m = re.match(rb"(P[2356])\s+\d+\s+\d+\s+(\d+)", head)
    return int(m.group(2)) if m else None


_PNM_NEGATIVE = re.compile(rb"\s-\s*\d")  # a minus sign before a sample of an ASCII PNM (P1, P2, P3)
_PNM_ASCII_HEAD = re.compile(rb"(P[23])(?:\s|#[^\n\r]*)+(\d+)(?:\s|#[^\n\r]*)+(\d+)(?:\s|#[^\n\r]*)+(\d+)\s")


def _pnm_ascii_samples(data: bytes) -> np.ndarray | None:
    """An ASCII PGM or PPM's (P2, P3) samples as stored, laid out as OpenCV gives a binary one's (gray, or BGR),
    for a file of 8-bit samples: OpenCV scales those itself, truncating (50 of maxval 100 is 127, not 128). None
    where the samples are not plain digits and whitespace, each of up to 5 digits, at least as many as the image
    holds (a sign, a comma, a comment among them): OpenCV reads those as it does, or says what is wrong. Parsed
    in NumPy, a few bytes of memory per byte of the file."""
    m = _PNM_ASCII_HEAD.match(data)
    if not m:
        return None
    width, height, maxval = int(m.group(2)), int(m.group(3)), int(m.group(4))
    channels = 3 if m.group(1) == b"P3" else 1
    count = width * height * channels
    if not 0 < maxval <= 255 or not count:
        return None
    body = np.frombuffer(data, np.uint8)[m.end() :]
    digit = (body >= 0x30) & (body <= 0x39)
    space = (body == 0x20) | ((body >= 0x09) & (body <= 0x0D))
    if not (digit | space).all():
        return None
    edges = np.diff(digit.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    if len(starts) < count:
        return None
    starts, ends = starts[:count], ends[:count]
    lens = ends - starts
    if lens.max() > 5:
        return None
    values = np.zeros(count, np.int64)
    for k in range(int(lens.max())):  # digit by digit, every sample at once
        more = lens > k
        values[more] = values[more] * 10 + (body[starts[more] + k] - 0x30)
    deep = np.minimum(values, 65535).astype(np.uint16).reshape(height, width, channels)
    return deep[:, :, 0] if channels == 1 else deep[:, :, ::-1]


def _pnm_scaled(deep: np.ndarray, maxval: int, mode: str) -> np.ndarray:
    """A PGM/PPM's samples as OpenCV gives them (as stored: gray, or BGR) put on the 0-255 scale their
    ``maxval`` means (value x 255 / maxval rounded half to even, as Pillow rounds; above maxval: 255), in
    ``mode``'s channels."""
    import cv2

    wide = deep.astype(np.uint32)
    q, r = np.divmod(wide * 255, maxval)
    q += (2 * r > maxval) | ((2 * r == maxval) & (q % 2 == 1))
    img = np.minimum(q, 255).astype(np.uint8)
    if img.ndim == 2:
        return img if mode == "gray" else cv2.cvtColor(img, cv2.COLOR_GRAY2RGB if mode == "rgb" else cv2.COLOR_GRAY2BGR)
    if mode == "gray":
        return cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB) if mode == "rgb" else img


def header_size(data: bytes, fmt: str | None = None) -> tuple[int, int] | None:
    """The (height, width) an image's header declares, read without decoding (microseconds).

    JPEG, PNG, GIF, BMP, TIFF, WebP, PNM and Radiance HDR headers are parsed here; None when the format is
    another one or its header is unreadable. The size is as stored (before EXIF rotation).
    """
    fmt = image_format(data) if fmt is None else fmt
    try:
        if fmt == "JPEG":
            info = _jpeg_size(data)
            return None if info is None else info[:2]
        if fmt == "PNG":
            if data[12:16] != b"IHDR":
                return None
            return int.from_bytes(data[20:24], "big"), int.from_bytes(data[16:20], "big")
        if fmt == "GIF":
            return _gif_size(data)
        if fmt == "BMP":
            if int.from_bytes(data[14:18], "little") == 12:  # OS/2 core header: 16-bit sizes
                return int.from_bytes(data[20:22], "little"), int.from_bytes(data[18:20], "little")
            w = int.from_bytes(data[18:22], "little", signed=True)
            h = int.from_bytes(data[22:26], "little", signed=True)  # negative: stored top-down
            return abs(h), abs(w)
        if fmt == "TIFF":
            return _tiff_size(data)
        if fmt == "WEBP":
            return _webp_size(data)
        if fmt == "PNM":
            return _pnm_size(data)
        if fmt == "HDR":
            return _hdr_size(data)
    except (IndexError, ValueError):
        return None
    return None


# ---------------------------------------------------------------------------------------------
# the pixel budget

DEFAULT_MAX_PIXELS = 89_478_485  # Pillow's Image.MAX_IMAGE_PIXELS: about 0.25 GiB of RGB pixels
_ENV_PIXELS: tuple[str | None, int] = (None, DEFAULT_MAX_PIXELS)


def raise_open_file_limit() -> tuple[int, int] | None:
    """Raise the soft open-file limit to the hard one; returns (soft, hard) after, None where
    there is no such limit. Each shared tensor in flight between workers holds a descriptor, and
    each LMDB shard read two."""
    try:
        import resource
    except ImportError:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard and (hard == resource.RLIM_INFINITY or soft < hard):
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft, hard


def pixel_budget(value: int | None = None) -> int:
    """The pixel budget of a decode: ``value`` if given, else ``DATAKIT_MAX_PIXELS`` if set,
    else :data:`DEFAULT_MAX_PIXELS`."""
    global _ENV_PIXELS
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise UsageError(f"max_pixels must be a positive whole number, got {value!r}")
        return int(value)
    env = os.environ.get("DATAKIT_MAX_PIXELS")
    if env is None:
        return DEFAULT_MAX_PIXELS
    if env != _ENV_PIXELS[0]:  # parsed once per value, not once per image
        try:
            limit = int(env.replace("_", ""))
        except ValueError:
            limit = 0
        if limit < 1:
            raise UsageError(f"DATAKIT_MAX_PIXELS={env!r}: not a positive whole number of pixels")
        _ENV_PIXELS = (env, limit)
    return _ENV_PIXELS[1]


def _over_budget(name: str | os.PathLike | None, h: int, w: int, limit: int) -> ImageDecodeError:
    return ImageDecodeError(
        f"{_describe(name)}: {w}x{h} = {h * w} pixels, over the limit of {limit} (a decompression bomb?; "
        "raise it with max_pixels= or the DATAKIT_MAX_PIXELS environment variable)"
    )


def _pillow_size(data: bytes) -> tuple[int, int] | None:
    """(height, width) from Pillow's header parser (no pixels read), for formats parsed nowhere else."""
    import io
    import warnings

    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as im:
                return im.size[1], im.size[0]
    except Image.DecompressionBombError:
        # Image.open refuses it naming its pixel count only: its format's reader alone gives the sides
        for ident in Image.ID:
            factory, accept = Image.OPEN[ident]
            try:
                if accept is not None and not accept(data[:16]):
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    im = factory(io.BytesIO(data), "")
                return im.size[1], im.size[0]
            except Exception:
                continue
        return 2**31, 1
    except Exception:
        return None


# ---------------------------------------------------------------------------------------------
# strict decoding: what the C libraries only warn about

_CAPTURE_LOCK = threading.Lock()
# where a C library's message starts in what was written to fd 2 during a strict decode: libpng's, libjpeg's
# warnings (jerror.h's JWRN_ texts), libtiff's and OpenCV's own log lines
_LIBRARY_MESSAGE = re.compile(
    r"libpng (?:warning|error):|\[ ?(?:WARN|ERROR|INFO|FATAL):\d+@|OpenCV TIFF\(line|imdecode_\(|"
    r"\b(?:TIFF\w+|\w+Decode|\w+Encode|\w+\.tiff?): |"  # libtiff's: the module or file, then the message
    r"Corrupt JPEG data|Premature end of JPEG file|Invalid SOS parameters|Warning: unknown JFIF revision|"
    r"Application transferred too many|Unknown Adobe color transform|Inconsistent progression sequence|"
    r"Not a JPEG file|Unsupported JPEG process|Improper call to JPEG|Bogus (?:Huffman|DQT|DHT|marker|input|"
    r"virtual|sampling|progression|message)|Huffman table 0x|Quantization table 0x|Didn't expect more than|"
    r"Maximum supported image dimension|Sampling factors too large|Wrong JPEG library version|Empty JPEG image|"
    r"JPEG datastream contains no image|Invalid JPEG file structure|Invalid component ID|Invalid progressive|"
    r"Invalid crop request|Invalid color quantization|Unknown APP\d+ marker"
)


def _capture_before_fork() -> None:
    _CAPTURE_LOCK.acquire()  # a fork waits for a capture to end: a child would inherit fd 2 pointed at its file


def _capture_after_fork() -> None:
    _CAPTURE_LOCK.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_capture_before_fork, after_in_parent=_capture_after_fork,
                        after_in_child=_capture_after_fork)  # fmt: skip
_CAPTURE_FILE = None  # one temporary file per process, reused


@contextlib.contextmanager
def _c_messages() -> Iterator[list[str]]:
    """Collect what C libraries (libjpeg, libpng, libtiff) print to file descriptor 2 meanwhile.

    fd 2 belongs to the whole process, so captures are serialised by a lock, and only strict
    decodes take it (``datakit check`` runs them in worker processes, one at a time each); the
    plain decode path never pays for it.
    """
    global _CAPTURE_FILE
    lines: list[str] = []
    with _CAPTURE_LOCK:
        if _CAPTURE_FILE is None or _CAPTURE_FILE[0] != os.getpid():
            # a bare descriptor, not a file object: a forked child replaces it without closing the
            # parent's (shared) file, and nothing is left for the garbage collector to warn about
            fd, name = tempfile.mkstemp(prefix="datakit-c-messages-")
            os.unlink(name)
            _CAPTURE_FILE = (os.getpid(), fd)
        tmp = _CAPTURE_FILE[1]
        os.lseek(tmp, 0, os.SEEK_SET)  # fd 2 will share this offset
        os.ftruncate(tmp, 0)
        try:
            import sys

            sys.stderr.flush()
        except (AttributeError, ValueError, OSError):
            pass
        saved = os.dup(2)
        os.dup2(tmp, 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            text = os.pread(tmp, os.fstat(tmp).st_size, 0).decode("utf-8", "replace")
            # fd 2 is the process's: what other threads wrote meanwhile (a progress bar, a log line, a print) is
            # theirs, written on to stderr, and only a C library's message counts (one glued after a bar's frame too)
            others = []
            pieces = re.split(r"(\r\n|\r|\n)", text)
            for piece, end in zip(pieces[0::2], [*pieces[1::2], ""]):
                found = _LIBRARY_MESSAGE.search(piece)
                if found is None:
                    others.append(piece + end)  # (a bar's frames keep their carriage returns)
                else:
                    lines.append(piece[found.start() :].strip())
                    others.append(piece[: found.start()])
            passed = "".join(others)
            if passed.strip():
                try:
                    os.write(saved, passed.encode("utf-8", "replace"))
                except OSError:
                    pass
            os.close(saved)
            lines[:] = list(dict.fromkeys(line for line in lines if line))


def reduction_factor(height: int, width: int, max_size: int | None) -> int:
    """The largest JPEG DCT scale (1, 2, 4 or 8) that keeps the longer side at least ``max_size``."""
    if not max_size:
        return 1
    longer = max(height, width)
    for factor in (8, 4, 2):
        if -(-longer // factor) >= max_size:
            return factor
    return 1


UNNAMED = "<bytes>"  # how messages name data that came without a file name


def _describe(name: str | os.PathLike | None) -> str:
    return str(name) if name is not None else UNNAMED


def _cmyk_scaled(data: bytes, mode: str, factor: int) -> np.ndarray | None:
    """A CMYK (YCCK) JPEG decoded at 1/``factor`` scale with Pillow's conversion to RGB, as the full-size decode
    converts it (OpenCV's differs by a level), gray from that RGB as at full size; pixels as stored (the EXIF
    orientation is the caller's). None where Pillow does not give that scale."""
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            want = (-(-im.size[0] // factor), -(-im.size[1] // factor))  # libjpeg's scaled size (rounded up)
            im.draft("CMYK", (max(1, im.size[0] // factor), max(1, im.size[1] // factor)))  # (Pillow's scale: the
            # size // this)
            if im.size != want or im.mode != "CMYK":
                return None
            rgb = im.convert("RGB")
            if mode == "gray":
                return np.array(rgb.convert("L"))
            img = np.array(rgb)
    except Exception:  # damaged: OpenCV's decode below says what is wrong
        return None
    return img if mode == "rgb" else np.ascontiguousarray(img[..., ::-1])


def _cv2_flags(mode: str, fmt: str | None, factor: int, components: int) -> int:
    """OpenCV's flags for a decode; a JPEG's pixels come as stored (its EXIF orientation is datakit's to
    apply: :func:`_exif_orientation`), and so do a PNG's and a WebP's (turned by :func:`_decode`: OpenCV
    turns a still one, never an animated one)."""
    import cv2

    flags = _cv2_mode_flags(mode, fmt, factor, components)
    return flags | cv2.IMREAD_IGNORE_ORIENTATION if fmt in ("JPEG", "PNG", "WEBP") else flags


def _cv2_mode_flags(mode: str, fmt: str | None, factor: int, components: int) -> int:
    import cv2

    if mode == "unchanged":
        if fmt != "JPEG":
            return cv2.IMREAD_UNCHANGED
        # JPEG has no alpha: "any" colour and depth, at a reduced scale the colour or gray it is stored in
        if factor > 1:
            mode = "gray" if components == 1 else "bgr"
        else:
            return cv2.IMREAD_ANYCOLOR | cv2.IMREAD_ANYDEPTH
    gray = {1: cv2.IMREAD_GRAYSCALE, 2: cv2.IMREAD_REDUCED_GRAYSCALE_2,
            4: cv2.IMREAD_REDUCED_GRAYSCALE_4, 8: cv2.IMREAD_REDUCED_GRAYSCALE_8}[factor]  # fmt: skip
    if mode == "gray":
        return gray
    rgb = getattr(cv2, "IMREAD_COLOR_RGB", 0)
    if mode == "rgb" and rgb:
        # OpenCV >= 4.11 decodes straight to RGB: no BGR->RGB pass over the pixels.
        return (gray & ~cv2.IMREAD_GRAYSCALE) | rgb if factor > 1 else rgb
    return {1: cv2.IMREAD_COLOR, 2: cv2.IMREAD_REDUCED_COLOR_2,
            4: cv2.IMREAD_REDUCED_COLOR_4, 8: cv2.IMREAD_REDUCED_COLOR_8}[factor]  # fmt: skip


_TV = None  # (torch, the decode_jpeg operator, RGB mode, GRAY mode) once loaded; False if unavailable


def _load_torchvision_jpeg() -> bool:
    global _TV
    if _TV is None:
        try:
            import torch
            import torchvision.io as tio

            # The operator itself: the Python wrapper warns about a future deprecation on every call.
            _TV = (torch, torch.ops.image.decode_jpeg, tio.ImageReadMode.RGB.value, tio.ImageReadMode.GRAY.value)
        except Exception:
            _TV = False
    return bool(_TV)


def _torchvision_jpeg(raw: bytes, mode: str) -> np.ndarray | None:
    """Full-size JPEG decode through torchvision's libjpeg-turbo operator, which measures about
    1.3x faster than ``cv2.imdecode`` on the same bytes (identical pixels), as stored (no EXIF
    rotation: the caller applies :func:`_exif_orientation`). None when it is unavailable or refuses
    the data, so the caller falls back to OpenCV."""
    if not _load_torchvision_jpeg():
        return None
    torch, decode, rgb, gray = _TV
    try:
        data = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        chw = decode(data, gray if mode == "gray" else rgb, False).numpy()  # False: no EXIF rotation
    except Exception:
        return None
    hwc = chw.transpose(1, 2, 0)  # torchvision's CHW result is a view of HWC memory: no copy
    if mode == "gray":
        return hwc[..., 0]
    if mode == "bgr":
        import cv2

        return cv2.cvtColor(hwc, cv2.COLOR_RGB2BGR)
    return np.ascontiguousarray(hwc)


# TIFF compressions that OpenCV's bundled libtiff lacks (it fails, printing two log lines per file, and
# Pillow decodes them): LZMA, ZSTD, WebP, JPEG XL, LERC, JBIG
_TIFF_PILLOW_ONLY = {34925, 50000, 50001, 50002, 34887, 34661}


def _tiff_for_pillow(data: bytes, keep_deep: bool = False) -> bool:
    """Whether a TIFF is one for Pillow, not OpenCV: compressed in a way OpenCV's libtiff lacks, CIELab, or 8-bit
    RGBA with ordinary (unassociated) alpha, ExtraSamples = 2, as Pillow, GIMP and Photoshop write it (its
    colours are stored as they are; OpenCV returns them premultiplied)."""
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            tags = im.tag_v2 if hasattr(im, "tag_v2") else {}
            if tags.get(259) in _TIFF_PILLOW_ONLY or im.mode == "LAB":  # CIELab: libtiff's RGB clips b* (34 to 0)
                return True
            # (16-bit samples read unchanged: OpenCV gives them as stored, Pillow 8 bits of them)
            return im.mode == "RGBA" and tags.get(338) in (2, (2,)) and not keep_deep
    except Exception:  # not one Pillow reads: OpenCV says what is wrong
        return False


class _DeepSamples(ValueError):
    """Pillow's 32-bit samples (mode "F" or "I"), which no 8-bit mode can take without a scale."""


def _deep_samples(name, fmt: str | None, dtype: str, mode: str) -> str:
    return (
        f"{_describe(name)}: {fmt or 'image'} with {dtype} samples: mode {mode!r} gives 8 bits, and their "
        "scale is not stored (0-1? 0-65535?); read it with mode='unchanged' (as stored) and scale it yourself"
    )


def _pillow_decode(data: bytes, mode: str, upright: bool = True) -> np.ndarray:
    """Decode with Pillow (GIF, and anything the OpenCV build lacks); BGR order like OpenCV.
    ``upright``: turned by its EXIF orientation (False: as stored, for a JPEG, whose orientation
    datakit applies itself). The array is writable, as OpenCV's are (NumPy's view of Pillow's
    bytes is read-only: an edit in place failed, and torch warned of it)."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        img = _pillow_pixels(im, mode, upright)
    return img if img.flags.writeable else img.copy()


def _pillow_pixels(im, mode: str, upright: bool) -> np.ndarray:
    import cv2
    from PIL import ImageOps

    im.seek(0)
    tiff = im.format == "TIFF"
    if upright:
        im = ImageOps.exif_transpose(im)
    if im.mode == "P":
        im = im.convert("RGBA" if "transparency" in im.info else "RGB")
    if im.mode == "LAB":  # a CIELab TIFF: its colours in RGB, as every mode starts from (L has no direct way)
        im = im.convert("RGB")
    if im.mode in ("F", "I"):  # 32-bit float or integer samples: Pillow's 8-bit conversion clips them
        if mode != "unchanged":
            raise _DeepSamples("float32" if im.mode == "F" else "int32")
        return np.asarray(im)
    if im.mode in ("I;16", "I;16B", "I;16L", "I;16N"):  # Pillow's 8-bit conversion clips 16-bit samples at 255
        deep = np.asarray(im).astype(np.uint16)
        if mode == "unchanged":
            return deep
        gray = (deep >> 8).astype(np.uint8)  # the high byte, as OpenCV reduces 16-bit images
        return gray if mode == "gray" else np.ascontiguousarray(np.repeat(gray[..., None], 3, axis=2))
    if mode == "gray":
        return np.asarray(im.convert("L"))
    if mode in ("bgr", "rgb"):
        rgb = np.asarray(im.convert("RGB"))
        return np.ascontiguousarray(rgb) if mode == "rgb" else cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    if im.mode in ("L", "LA", "1"):  # a bilevel image as 0 and 255, one channel, as OpenCV reads it
        return np.asarray(im.convert("L"))
    if im.mode == "CMYK" and tiff:  # as OpenCV reads a CMYK TIFF unchanged: BGR and an opaque alpha
        return cv2.cvtColor(np.asarray(im.convert("RGB")), cv2.COLOR_RGB2BGRA)
    if im.mode == "RGBA":
        return cv2.cvtColor(np.asarray(im), cv2.COLOR_RGBA2BGRA)
    return cv2.cvtColor(np.asarray(im.convert("RGB")), cv2.COLOR_RGB2BGR)


def whole_size(value, name: str) -> int:
    """``value`` as an int where it is a whole number (an int, a NumPy integer, a float such as 512.0), else a
    ``UsageError`` naming ``name``: not a bool, a fraction or a string."""
    if isinstance(value, (bool, np.bool_)) or not (
        isinstance(value, (int, np.integer)) or (isinstance(value, (float, np.floating)) and float(value).is_integer())
    ):
        raise UsageError(f"{name} must be a positive whole number (the longer side needed, in pixels) or None, got "
                         f"{value!r}")  # fmt: skip
    return int(value)


def decode_image(
    data: bytes | bytearray | memoryview | np.ndarray,
    mode: str = "bgr",
    max_size: int | None = None,
    *,
    name: str | os.PathLike | None = None,
    max_pixels: int | None = None,
    strict: bool = False,
) -> np.ndarray:
    """Decode an encoded image held in memory.

    Args:
        data: the file's bytes.
        mode: ``"bgr"`` or ``"rgb"`` (uint8, 3 channels, alpha dropped, gray expanded),
            ``"gray"`` (uint8, 2-D) or ``"unchanged"`` (channels and bit depth as stored,
            uint16 for 16-bit PNG/TIFF, BGR(A) channel order).
        max_size: the longer side the caller needs; a JPEG is decoded at 1/2, 1/4 or 1/8
            scale when that still leaves at least this many pixels, which is several times
            faster. Other formats decode at full size. The caller resizes exactly.
        name: the file or key the bytes came from, for error messages.
        max_pixels: the pixel budget (default ``DATAKIT_MAX_PIXELS`` or 89,478,485, Pillow's):
            the size is read from the header first and a larger image is refused before
            any pixel memory is allocated.
        strict: also refuse data the decoders only warn about (``Corrupt JPEG data``,
            ``premature end of data segment``, a bad CRC), with their messages; they are
            captured from the C libraries, never printed. Slower: for checks, not training.

    Raises:
        ImageDecodeError: empty, truncated, damaged (``strict``; and without it, a JPEG whose
            scan libjpeg fills in, where the compiled decoder is built) or non-image data, or
            an image over the pixel budget.

    A JPEG is turned upright by the EXIF orientation :func:`_exif_orientation` reads (the first
    ``Exif`` APP1 segment's), whichever decoder runs: each of them is told to leave the pixels as
    stored, since torchvision's reads the first APP1 segment of any kind and OpenCV's the first
    Exif segment it can read, which differ where several segments are present.
    """
    img, orientation = _decode_image(data, mode, max_size, name, max_pixels, strict)
    return _orient(img, orientation)


def _decode_image(
    data: bytes | bytearray | memoryview | np.ndarray,
    mode: str,
    max_size: int | None,
    name: str | os.PathLike | None,
    max_pixels: int | None = None,
    strict: bool = False,
) -> tuple[np.ndarray, int]:
    """:func:`decode_image`'s pixels as stored, and the EXIF orientation (1-8) that turns them
    upright: 1 for formats other than JPEG, which come upright from their decoders."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if max_size is not None:  # -1, 0.5 and True decoded at 1/8 scale without a word, 0 at full size, "512" a TypeError
        max_size = whole_size(max_size, "max_size")
        if max_size < 1:
            raise UsageError(f"max_size must be a positive whole number (the longer side needed, in pixels) or None, "
                             f"got {max_size!r}")  # fmt: skip
    flat = isinstance(data, np.ndarray) and (data.ndim == 1 or (data.ndim == 2 and 1 in data.shape))
    if flat and data.dtype.itemsize == 1:
        data = data.reshape(-1)  # (bytes in an int8 array, or an (N, 1) one as cv2.imencode gives; not pixels)
    elif not isinstance(data, (bytes, np.ndarray, np.generic, str, os.PathLike)) or isinstance(data, np.void):
        try:
            with memoryview(data) as view:  # what holds a file's bytes: bytearray, mmap, array('B'), np.void
                data = view.cast("B").tobytes()  # (copied: a view held by an error's traceback kept an mmap open)
        except TypeError:
            pass  # (no buffer: refused below)
    if (
        isinstance(data, (str, os.PathLike))
        or not isinstance(data, (bytes, memoryview, np.ndarray))
        or (isinstance(data, np.ndarray) and (data.dtype.itemsize != 1 or data.ndim != 1))
    ):  # (torchvision's decode_image takes a path or a uint8 tensor; int64 held bytes were read as raw memory)
        kind = (
            f"an array of {data.dtype}, shape {data.shape}"
            if isinstance(data, np.ndarray)
            else repr(type(data).__name__)
        )
        raise UsageError(f"decode_image decodes a file's bytes (bytes, or a 1-D uint8 array), got {kind}; for a path "
                         "use imread(path), for a tensor tensor.numpy()")  # fmt: skip
    buf = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
    if buf.size == 0:
        raise ImageDecodeError(f"{_describe(name)}: empty file (0 bytes)")
    raw = data if isinstance(data, bytes) else buf.tobytes()
    fmt = image_format(raw)
    limit = pixel_budget(max_pixels) if max_pixels is not None else _default_budget()
    size = header_size(raw, fmt)
    if size is None:
        size = _pillow_size(raw)
        if size is None and fmt is not None:
            raise ImageDecodeError(
                f"{_describe(name)}: {fmt} data is corrupt or truncated (no image size in its header; "
                f"starts with {raw[:8]!r})"
            )
    if size is not None and size[0] * size[1] > limit:
        raise _over_budget(name, size[0], size[1], limit)
    if fmt == "TIFF" and (tiles := _tiff_tile_over(raw, name, limit)) is not None:
        raise tiles
    if not strict:
        img = _decode(raw, buf, fmt, mode, max_size, name)
    else:
        # the decoders imported first: what an import prints (warnings, -X importtime) is not the image's
        import cv2  # noqa: F401

        if fmt == "JPEG" and mode != "unchanged" and not max_size:
            _load_torchvision_jpeg()  # a full-size decode goes through it
        with _c_messages() as messages:
            try:
                img = _decode(raw, buf, fmt, mode, max_size, name, strict=True)
            except ImageDecodeError as exc:
                failed = exc
            else:
                failed = None
        # a metadata chunk libpng cannot read (an eXIf that begins "Exif\0\0", as some tools write it, an old
        # Photoshop's "iCCP: known incorrect sRGB profile"), or a TIFF tag libtiff does not know, leaves the pixels
        # as they are: dropped
        messages = [m for m in (_TIFF_TAG_WARNING.sub("", _METADATA_WARNING.sub("", m)).strip() for m in messages) if m]
        messages = list(dict.fromkeys(filter(None, map(_plain_message, messages))))
        if messages:
            what = f"{fmt} data" if fmt else "data"
            raise ImageDecodeError(f"{_describe(name)}: damaged {what}: {'; '.join(messages)}") from failed
        if failed is not None:
            raise failed
    if size is None and img.shape[0] * img.shape[1] > limit:  # a format no header parser knows
        raise _over_budget(name, img.shape[0], img.shape[1], limit)
    return img, _exif_orientation(raw) if fmt == "JPEG" else 1


# libpng's warnings about chunks whose content OpenCV does not apply to the pixels (colour profile and space,
# gamma, text, EXIF, time, physical size, background, histogram): printed without a line end at times, so one
# warning ends where the next begins
_METADATA_WARNING = re.compile(
    r"libpng warning: (?:iCCP|sRGB|cHRM|gAMA|eXIf|tEXt|zTXt|iTXt|tIME|pHYs|bKGD|hIST|sPLT|oFFs|pCAL|sCAL): "
    r"(?!CRC error)[^\n]*?(?=libpng |$)\s*",  # a CRC error is damaged bytes, not metadata libpng cannot use
    re.M,
)
# libtiff's, through OpenCV's log, about tags it does not apply to the pixels: a private tag (a camera's, a
# scanner's, a microscope's), a directory whose tags are out of order, a text tag without its end byte
_TIFF_TAG_WARNING = re.compile(
    r"^\[ ?WARN:[^\]]*\][^\n]*TIFF_Warning \w+: (?:Unknown field with tag|Invalid TIFF directory; tags are not "
    r"sorted in ascending order|ASCII value for tag)[^\n]*\n?",
    re.M,
)
# OpenCV's log line around a decoder's message: its level, a timer, the source file and line, the function
# ("[ WARN:0@0.036] global grfmt_tiff.cpp:123 TIFF_Warning "), and an exception's text around its reason
# ("imdecode_(''): can't read data: OpenCV(5.0.0) /path/bitstrm.cpp:59: error: (-2:Unspecified error) ... in
# function 'readBlock'")
_OPENCV_LOG_HEAD = re.compile(r"^\[ ?[A-Z]+:[^\]]*\]\s*(?:global\s+)?[\w.]+:\d+\s+\w+\s+")
_OPENCV_ERROR = re.compile(r"OpenCV\([\d.]+\)\s+\S+:\d+: error: \([-\d]+:[^)]*\)\s*(.*?)(?: in function '[^']*')?$")


def _plain_message(line: str) -> str:
    """A C library's message as a reader wants it: without OpenCV's log prefix (a timer that changes from run to
    run, its source file) and exception frame, which a message naming a damaged file has no use for."""
    line = _OPENCV_LOG_HEAD.sub("", line)
    line = re.sub(r"^imdecode_\([^)]*\):\s*", "", line)
    line = re.sub(r"^OpenCV TIFF\(line \d+\):\s*", "", line)
    return _OPENCV_ERROR.sub(r"\1", line).strip()


_LIBPNG_MAX_SIDE = 1_000_000  # libpng's default user limit on a PNG's width and height


def _wide_png(raw: bytes, mode: str, name) -> np.ndarray:
    """A PNG with a side over libpng's limit, through Pillow where it gives the pixels OpenCV would: 8-bit samples
    (gray, gray and alpha, RGB, RGBA, a palette) read as RGB, BGR or gray (gray from colour within a level).
    Other kinds (16-bit samples, bit depths under 8, and ``mode="unchanged"``, whose channels and dtype OpenCV's
    path decides) are refused by name: Pillow would clip a 16-bit gray to white and give 8 bits where 16 were."""
    depth, color = raw[24], raw[25]
    if mode == "unchanged" or depth != 8 or color not in (0, 2, 3, 4, 6):
        sides = f"{int.from_bytes(raw[16:20], 'big')} x {int.from_bytes(raw[20:24], 'big')}"
        what = f"{depth}-bit samples" if depth != 8 else "mode='unchanged'" if mode == "unchanged" else "its colours"
        raise ImageDecodeError(f"{_describe(name)}: a PNG of {sides} pixels, a side over the 1,000,000 libpng "
                               f"reads, with {what}: only 8-bit PNGs read as rgb, bgr or gray are decoded past it "
                               "(by Pillow); save it as an 8-bit PNG, or cut it into tiles")  # fmt: skip
    try:
        return _pillow_decode(raw, mode)
    except ImageDecodeError:
        raise
    except Exception as exc:  # a damaged file: OSError ("image file is truncated"), SyntaxError, ValueError
        raise ImageDecodeError(f"{_describe(name)}: damaged PNG data ({type(exc).__name__}: {exc})") from None


def _default_budget() -> int:
    # the hot path: one dict lookup when the environment variable is not set
    return DEFAULT_MAX_PIXELS if "DATAKIT_MAX_PIXELS" not in os.environ else pixel_budget()


def _decode(
    raw: bytes,
    buf: np.ndarray,
    fmt: str | None,
    mode: str,
    max_size: int | None,
    name: str | os.PathLike | None,
    strict: bool = False,
) -> np.ndarray:
    import cv2

    factor, components = 1, 3
    if fmt == "JPEG":
        if not _jpeg_ends(raw):
            raise ImageDecodeError(f"{_describe(name)}: truncated JPEG (no end-of-image marker)")
        _refuse_scan_bomb(raw, name)
        if max_size:
            info = _jpeg_size(raw)
            if info is not None:
                factor = reduction_factor(info[0], info[1], max_size)
                components = info[2]
    if fmt == "PNG" and (still := _apng_still(raw)) is not raw:
        raw, buf = still, np.frombuffer(still, np.uint8)
    if fmt == "PNG" and mode == "gray" and (plain := _png_luma_plain(raw)) is not raw:
        raw, buf = plain, np.frombuffer(plain, np.uint8)
    if fmt == "PNG" and raw.rfind(b"IEND\xaeB`\x82") < 0:  # cut short: libpng would print its own line first
        raise ImageDecodeError(f"{_describe(name)}: truncated PNG (no IEND chunk)")
    if (
        fmt == "PNG"
        and len(raw) >= 26
        and max(int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")) > (_LIBPNG_MAX_SIDE)
    ):  # libpng's own limit: it would refuse the file, printing two lines that name no file
        return _wide_png(raw, mode, name)
    if fmt == "JPEG" and not strict and (img := _compiled_jpeg(raw, mode, factor, name)) is not None:
        return img
    if fmt == "JPEG" and factor == 1 and mode != "unchanged":
        img = _torchvision_jpeg(raw, mode)
        if img is not None:
            return img
    if fmt == "JPEG" and factor > 1 and components == 4 and (img := _cmyk_scaled(raw, mode, factor)) is not None:
        if strict:  # Pillow keeps libjpeg's warnings of damaged data to itself: libjpeg through OpenCV says them
            cv2.imdecode(buf, _cv2_flags(mode, fmt, factor, components))
        return img
    if fmt == "JPEG" and factor == 1 and mode == "unchanged" and (info := _jpeg_size(raw)) and info[2] == 4:
        # CMYK (YCCK): 3 channels as every mode gives them, not OpenCV's conversion, a level brighter than libjpeg's
        img = _torchvision_jpeg(raw, "bgr")
        if img is not None:
            return img
    if fmt == "TIFF":
        tags = _tiff_tags(raw, (258, 259, 262, 277, 284, 338, 339))
        bits, deep = tags.get(258, 1), tags.get(258, 1) > 8
        if deep and tags.get(284) == 2 and tags.get(277, 1) > 1 and (mode == "unchanged" or tags.get(338) == 2):
            # OpenCV reads such planes as if interleaved (the first plane's samples in every channel), and Pillow
            # gives other colours; in colour and gray OpenCV reads them right but premultiplies ordinary alpha
            planes = f"{_describe(name)}: TIFF of {bits}-bit samples in separate planes (PlanarConfiguration 2)"
            raise ImageDecodeError(
                f"{planes} and ordinary alpha: refused in every mode (OpenCV premultiplies its colours, Pillow "
                "mixes its planes); save it with its samples interleaved"
                if tags.get(338) == 2
                else f"{planes}: refused in mode 'unchanged' (OpenCV reads its first plane into every channel); "
                "read it in mode 'rgb' or 'gray', or save it with its samples interleaved"
            )  # fmt: skip
        if (
            bits == 16
            and tags.get(339, 1) == 1
            and mode == "unchanged"
            and tags.get(277) == 2
            and tags.get(262, 1) in (0, 1)
        ):
            # OpenCV gives 8 bits of the gray and drops the alpha; Pillow has no 16-bit gray and alpha
            raise ImageDecodeError(
                f"{_describe(name)}: TIFF of {bits}-bit gray and alpha: refused in mode 'unchanged' (OpenCV gives 8 "
                "bits of its gray and drops its alpha); read it in mode 'gray' or 'rgb', or save it as RGBA"
            )
        if deep and mode == "unchanged" and tags.get(277, 1) > 1 and tags.get(259) in _TIFF_PILLOW_ONLY:
            # a compression OpenCV's libtiff lacks: Pillow reads it, but gives 8 bits of 16-bit colour
            raise ImageDecodeError(
                f"{_describe(name)}: TIFF of {bits}-bit colour samples, compressed in a way only Pillow reads here "
                f"(compression {tags.get(259)}; ZSTD, LZMA, ...), which gives 8 bits of them: refused in mode "
                "'unchanged'; read it in mode 'rgb' or 'gray', or save it with Deflate or LZW"
            )
        if _tiff_for_pillow(raw, keep_deep=deep and mode == "unchanged"):
            return _pillow_named(raw, mode, fmt, name)
        if mode != "unchanged" and tags.get(339) == 2:
            # signed samples: OpenCV's 8 bits of them wrap (-1 white, -1000 brighter than 3000)
            raise ImageDecodeError(_deep_samples(name, fmt, f"signed int{tags.get(258) or ''}", mode))
    if mode != "unchanged" and fmt is None and raw[:2] in (b"PF", b"Pf") and raw[2:3].isspace():
        # a PFM: OpenCV rounds its floats to 0 or 1 (a scale the file does not store) and keeps a colour one's
        # 3 channels in gray mode
        raise ImageDecodeError(_deep_samples(name, "PFM", "float32", mode))
    if fmt == "PNM" and mode == "unchanged" and raw[:2] in (b"P2", b"P3") and (maxval := _pnm_maxval(raw)) is not None:
        deep = _pnm_ascii_samples(raw) if maxval < 255 else None
        if deep is not None:  # as stored, as a binary file's are (OpenCV gives them scaled, truncating)
            return np.minimum(deep, 255).astype(np.uint8)  # a sample past 255 (past maxval too) kept in 8 bits
    if fmt == "PNM" and mode != "unchanged" and (maxval := _pnm_maxval(raw)) not in (None, 0, 255, 65535):
        # OpenCV keeps binary samples as stored (a white of maxval 100 is 100; of maxval 1000, after its 16-bit
        # to 8-bit shift, 3), and scales ASCII 8-bit ones truncating: they are scaled by what maxval means, as
        # Pillow scales 8-bit ones
        ascii8 = maxval <= 255 and raw[:2] in (b"P2", b"P3")
        deep = _pnm_ascii_samples(raw) if ascii8 else None
        if deep is None and not ascii8:  # (an ASCII file not read here: OpenCV's own scaling below, not twice)
            try:
                deep = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
            except cv2.error:
                deep = None
        if deep is not None and deep.dtype in (np.uint8, np.uint16):
            return _pnm_scaled(deep, maxval, mode)
    if fmt is None and raw[:3] == b"P7\n" and (pam := _pam(raw, mode)) is not None:
        return pam
    if fmt == "BMP" and raw[30:34] in _BMP_RLE and (rle := _bmp_rle(raw, mode)) is not None:
        return rle
    flags = _cv2_flags(mode, fmt, factor, components)
    try:
        if fmt == "PNM" and raw[:2] in (b"P1", b"P2", b"P3") and _PNM_NEGATIVE.search(re.sub(rb"#[^\n\r]*", b"", raw)):
            img = None  # OpenCV 4 reads a negative ASCII sample as a pixel (-5 as 243): Pillow below says what it is
        else:
            img = cv2.imdecode(buf, flags)
    except cv2.error:  # OpenCV's own limits (a side over 2**20, its pixel cap): Pillow below, or a named error
        img = None
    if img is None and fmt == "GIF" and not raw.endswith(b";"):  # its trailer byte lost (a copy cut short by one):
        try:  # OpenCV's colours, as for the whole file, not Pillow's other rules for transparency and background
            img = cv2.imdecode(np.frombuffer(raw + b";", np.uint8), flags)
        except cv2.error:
            img = None
    if img is None and mode != "unchanged" and fmt == "TIFF":
        try:
            deep = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
        except cv2.error:
            deep = None
        if deep is not None and deep.dtype not in (np.uint8, np.uint16):
            raise ImageDecodeError(_deep_samples(name, fmt, str(deep.dtype), mode))
    if img is None:
        return _pillow_named(raw, mode, fmt, name, upright=fmt != "JPEG")
    if mode == "rgb" and not flags & getattr(cv2, "IMREAD_COLOR_RGB", 0):
        img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    if fmt in ("PNG", "WEBP"):  # turned here in every mode, as OpenCV turns a still one (an animated one it leaves
        img = _orient(img, _container_orientation(raw, fmt))  # as stored, and mode "unchanged" every one)
    return img


_BMP_RLE = (b"\x01\x00\x00\x00", b"\x02\x00\x00\x00")  # biCompression BI_RLE8, BI_RLE4
_NIBBLES = [bytes((b >> 4, b & 15)) for b in range(256)]  # an RLE4 byte: its two pixels


def _bmp_rle(raw: bytes, mode: str) -> np.ndarray | None:
    """A run-length coded BMP (RLE8, RLE4: ImageMagick's and Windows' palette BMPs) read here: OpenCV carries a
    run that fills a row past its last pixel (up to the row's 4-byte end, as ImageMagick writes them) into the
    next row, and every row after it is misplaced, 60-90 levels off on average. Pixels past a row's end are
    dropped, as Pillow and ImageMagick drop them; what no run reaches is palette colour 0. Laid out as OpenCV
    gives a palette BMP (gray where the palette is, else BGR), then in ``mode``'s channels. None where the header
    or the stream is not whole and well formed (OpenCV then reads it, or says what is wrong)."""
    import cv2

    if len(raw) < 54 or int.from_bytes(raw[14:18], "little") < 40:
        return None
    offset, head = int.from_bytes(raw[10:14], "little"), int.from_bytes(raw[14:18], "little")
    w, h = int.from_bytes(raw[18:22], "little", signed=True), int.from_bytes(raw[22:26], "little", signed=True)
    bits, rle4 = int.from_bytes(raw[28:30], "little"), raw[30] == 2
    if bits != (4 if rle4 else 8) or not 0 < w <= 1 << 16 or not 0 < h <= 1 << 16 or offset > len(raw):
        return None  # (a top-down one, negative height, is no valid run-length BMP)
    used = int.from_bytes(raw[46:50], "little") or 1 << bits
    if used > 1 << bits:
        return None  # more colours than the indices reach: OpenCV refuses it
    if 14 + head + used * 4 > min(offset, len(raw)):
        return None  # the palette the header declares is not all there
    table = np.frombuffer(raw, np.uint8, used * 4, 14 + head).reshape(-1, 4)[:, :3]
    palette = np.zeros((256, 3), np.uint8)
    palette[: len(table)] = table  # B, G, R
    pixels = bytearray(w * h)  # (a bytearray's slices take a run in a fraction of NumPy's time)
    data, pos, x, y, end = raw, offset, 0, 0, len(raw)
    while True:
        if pos + 2 > end:
            return None  # no end-of-bitmap: cut short
        n, c = data[pos], data[pos + 1]
        pos += 2
        if x > w and (n or c > 2):
            return None  # a run after one past the row's end, without an end of line between: malformed
        if n:  # a run of n pixels: one index, or (RLE4) two alternating
            k = min(n, w - x) if y < h else 0
            if k > 0:
                at = (h - 1 - y) * w + x
                pixels[at : at + k] = (_NIBBLES[c] * ((k + 1) // 2))[:k] if rle4 else bytes((c,)) * k
            x += n
        elif c == 0:  # end of line
            x, y = 0, y + 1
        elif c == 1:  # end of bitmap
            break
        elif c == 2:  # a jump right and up
            if pos + 2 > end:
                return None
            x, y = x + data[pos], y + data[pos + 1]
            pos += 2
        else:  # c pixels as they are, padded to a 16-bit boundary
            size = (c + 1) // 2 if rle4 else c
            if pos + size > end or x + c > w:
                return None  # cut short, or more pixels than the row holds (Pillow carries them on, OpenCV refuses)
            k = min(c, w - x) if y < h else 0
            if k > 0:
                at = (h - 1 - y) * w + x
                run = b"".join(map(_NIBBLES.__getitem__, data[pos : pos + size])) if rle4 else data[pos : pos + size]
                pixels[at : at + k] = run[:k]
            x, pos = x + c, pos + size + (size & 1)
    idx = np.frombuffer(pixels, np.uint8).reshape(h, w)
    bgr = palette[idx]
    gray_palette = bool((table[:, 0] == table[:, 1]).all() and (table[:, 1] == table[:, 2]).all())
    if mode == "unchanged":
        return np.ascontiguousarray(bgr[:, :, 0]) if gray_palette else bgr
    if mode == "gray":
        return np.ascontiguousarray(bgr[:, :, 0]) if gray_palette else cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB) if mode == "rgb" else bgr


_PAM_HEAD = re.compile(rb"P7[ \t]*\r?\n((?:[^\n]*\n){1,64}?)ENDHDR[ \t]*\r?\n")


def _pam(raw: bytes, mode: str) -> np.ndarray | None:
    """A PAM (P7: netpbm's ``pam*`` tools write them, often under a .ppm or .pnm name) read here: OpenCV gives
    its RGB in RGB order where every other format comes BGR (red and blue swapped in modes "bgr" and
    "unchanged"), the gray of its RGB_ALPHA from the red alone, and a BLACKANDWHITE white (MAXVAL 1) as 1. Laid
    out as OpenCV gives other formats unchanged (gray, gray and alpha, BGR, BGRA), then in ``mode``'s channels,
    alpha dropped, on the 0-255 scale MAXVAL means. None where the header or the samples are not whole (OpenCV
    then says what is wrong)."""
    m = _PAM_HEAD.match(raw[:8192])
    if not m:
        return None
    fields = {}
    for line in m.group(1).split(b"\n"):
        words = line.split(None, 1)
        if words and not words[0].startswith(b"#"):
            fields[words[0]] = words[1].strip() if len(words) > 1 else b""
    sizes = [fields.get(k, b"") for k in (b"WIDTH", b"HEIGHT", b"DEPTH", b"MAXVAL")]
    if not all(v.isdigit() for v in sizes):  # (the keys as netpbm spells them, the numbers plain digits)
        return None
    w, h, depth, maxval = map(int, sizes)
    if w < 1 or h < 1 or depth not in (1, 2, 3, 4) or not 0 < maxval < 65536:
        return None
    dtype = np.dtype(np.uint8) if maxval < 256 else np.dtype(">u2")
    need = w * h * depth * dtype.itemsize
    if len(raw) - m.end() < need:
        return None
    samples = np.frombuffer(raw, dtype, w * h * depth, m.end()).reshape(h, w, depth)
    if dtype.itemsize == 2:
        samples = samples.astype(np.uint16)
    stored = np.ascontiguousarray(
        samples[:, :, 0] if depth == 1 else samples if depth == 2 else samples[:, :, [2, 1, 0, 3][:depth]]
    )
    if mode == "unchanged":
        return stored
    colour = np.ascontiguousarray(stored[:, :, 0] if depth == 2 else stored[:, :, :3] if depth == 4 else stored)
    if maxval not in (255, 65535):
        return _pnm_scaled(colour, maxval, mode)
    if maxval == 65535:  # the high byte, as OpenCV makes a PGM's or PPM's 16 bits 8
        colour = (colour >> 8).astype(np.uint8)
    import cv2

    if colour.ndim == 2:
        return colour if mode == "gray" else cv2.cvtColor(colour, cv2.COLOR_GRAY2BGR)  # (gray: RGB and BGR alike)
    if mode == "gray":
        return cv2.cvtColor(colour, cv2.COLOR_BGR2GRAY)
    return cv2.cvtColor(colour, cv2.COLOR_BGR2RGB) if mode == "rgb" else colour


def _compiled_jpeg(raw: bytes, mode: str, factor: int, name) -> np.ndarray | None:
    """The whole JPEG at 1/``factor``, as stored, through the compiled region decoder: the pixels of
    torchvision's and OpenCV's libjpeg-turbo decodes (tested), a little faster, and it notes libjpeg's
    warnings of damaged data, which they decode around without a word (a file cut short with its end
    marker put back: its lower part gray). Such data is refused, as the training pipeline's crops
    refuse it. Mode ``"unchanged"`` is the colour (BGR) or gray a JPEG is stored in, as OpenCV reads it.
    None where it does not apply (not built, CMYK, a progressive file it leaves to them, libjpeg's own
    errors, a frame of other sides than the header's)."""
    if mode not in (*_REGION_ORDER, "unchanged") or not region_decoder_available() or not getattr(_REGION, "STORED", 0):
        return None
    info = _jpeg_size(raw)
    if info is None or info[2] not in (1, 3) or not info[0] or not info[1]:
        return None
    if mode == "unchanged":
        mode = "gray" if info[2] == 1 else "bgr"
    sh, sw = -(-info[0] // factor), -(-info[1] // factor)
    try:
        got = _REGION.decode_region(raw, factor, 0, 0, sh, sw, _REGION_ORDER[mode], True)
    except ValueError:  # libjpeg's own error, or another frame than the header's: the other decoders say why
        return None
    except getattr(_REGION, "DamagedJPEG", ()) as exc:
        raise ImageDecodeError(f"{_describe(name)}: damaged JPEG data: {exc}") from None
    if got is None:  # a luma MCU of more than 4 blocks (cjpeg -sample 4x2): the others decode it, around any damage
        damage = jpeg_damage(raw)  # (a 4:1:0 file cut short, its end marker put back: 76% gray, without a word)
        if damage:
            raise ImageDecodeError(f"{_describe(name)}: damaged JPEG data: {damage}")
        return None
    pixels, rows, band, channels, offset = got
    if (rows, band, offset) != (sh, sw, 0):
        return None
    img = np.frombuffer(pixels, np.uint8)
    return img.reshape(rows, band) if mode == "gray" else img.reshape(rows, band, channels)


def _pillow_named(raw: bytes, mode: str, fmt: str | None, name, upright: bool = True) -> np.ndarray:
    """:func:`_pillow_decode`, its failures (a truncated TIFF's bare ``OSError``) as ``ImageDecodeError`` naming
    the file."""
    try:
        return _pillow_decode(raw, mode, upright=upright)
    except _DeepSamples as exc:
        raise ImageDecodeError(_deep_samples(name, fmt, str(exc), mode)) from None
    except ImageDecodeError:
        raise
    except Exception as exc:
        bits = _jpeg_precision(raw) if fmt == "JPEG" else None
        if bits not in (None, 8):  # a valid 12-bit (medical, raw converters) or 16-bit lossless JPEG, not damage
            raise ImageDecodeError(
                f"{_describe(name)}: a {bits}-bit JPEG: OpenCV and Pillow decode 8-bit JPEGs only; convert it to "
                "8 bits (or to a 16-bit PNG or TIFF) first"
            ) from None
        what = f"{fmt} data is corrupt or truncated" if fmt else "not a recognised image format"
        head = raw[:8]
        why = re.sub(r" ?<[\w.]+ object at 0x[0-9a-f]+>", "", str(exc))  # no run-to-run address
        raise ImageDecodeError(f"{_describe(name)}: {what} (starts with {head!r}; {why})") from None


_REGION = None  # datakit._jpegregion once imported; False when it was not built or cannot decode here
_REGION_SOURCE = "224240f7e7ae"  # the version of _jpegregion.c this datakit is (the SHA-256 the binary is stamped with)
_REGION_WHY: str | None = None  # why an extension that is there cannot be used, for doctor


def region_decoder_available() -> bool:
    """Whether the compiled JPEG region decoder (``datakit._jpegregion``) was built, and decodes
    here: it needs libjpeg-turbo's headers when the package is installed, and the same library
    when it runs. Without it the pipelines decode whole images at the DCT scale the crop needs."""
    global _REGION, _REGION_WHY
    if _REGION is None:
        try:
            from datakit import _jpegregion
        except ModuleNotFoundError as exc:
            _REGION = False
            if exc.name != f"{__package__}._jpegregion":  # the extension is there, something it imports is not
                _REGION_WHY = str(exc)
        except ImportError as exc:  # built, but a library it links is missing here (libjpeg.so.8: ...)
            _REGION, _REGION_WHY = False, str(exc)
        else:
            _REGION, _REGION_WHY = _jpegregion, _region_refusal(_jpegregion)
            if _REGION_WHY is not None:
                _REGION = False
    return bool(_REGION)


def _region_refusal(region) -> str | None:
    """Why the extension cannot decode an 8x8 JPEG here, or None: built against headers of another libjpeg than
    the one it loads, every decode fails ("Wrong JPEG library version: library is 62, caller expects 80"), and
    each sample would fail over to the whole-image path. A binary built from another version of its source (a
    wheel built where an earlier build/ held one, the new source failing to compile) is not used either."""
    built = getattr(region, "SOURCE", None)
    if built != _REGION_SOURCE:
        return (f"built from another version of its source ({built or 'unstamped'}, this datakit's is "
                f"{_REGION_SOURCE}): install datakit again, without an earlier build/ folder")  # fmt: skip
    try:
        pixels, rows, band, channels, offset = region.decode_region(base64.b64decode(_GRAY_8X8_JPEG), 1, 0, 0, 8, 8, 0)
        got = np.frombuffer(pixels, np.uint8).reshape(rows, band, channels)[:, offset : offset + 8]
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    if got.shape != (8, 8, 3) or int(np.abs(got.astype(np.int16) - 128).max()) > 2:
        return f"an 8x8 JPEG of gray 128 decoded to {got.shape}, values {int(got.min())}-{int(got.max())}"
    return None


_GRAY_8X8_JPEG = (  # 8x8 pixels of (128, 128, 128), as OpenCV writes them at quality 50
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDABALDA4MChAODQ4SERATGCgaGBYWGDEjJR0oOjM9PDkzODdASFxOQERXRTc4UG1RV19iZ2hnPk1xeXBk"
    "eFxlZ2P/2wBDARESEhgVGC8aGi9jQjhCY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2P/wAARCAAIAAgD"
    "ASIAAhEBAxEB/8QAFAABAAAAAAAAAAAAAAAAAAAAAP/EABQQAQAAAAAAAAAAAAAAAAAAAAD/xAAUAQEAAAAAAAAAAAAAAAAAAAAA/8QAFBEBAAAA"
    "AAAAAAAAAAAAAAAAAP/aAAwDAQACEQMRAD8AAA//2Q=="
)


def jpeg_damage(data: bytes) -> str | None:
    """The first warning libjpeg gives on a JPEG's data (``Corrupt JPEG data: premature end of
    data segment``), which the decoders otherwise decode around, printing it to stderr: the data
    is decoded at 1/8 scale by the compiled decoder, nothing is printed, no lock is taken (as the
    captured strict decode needs). ``""`` for clean data; None where that decoder was not built or
    libjpeg refuses the data (the decoders then say why)."""
    if not region_decoder_available() or not hasattr(_REGION, "jpeg_warning"):
        return None
    return _REGION.jpeg_warning(data)


def validate_image(data: bytes, name: str | os.PathLike | None = None) -> tuple[int, int]:
    """The upright (height, width) of an encoded image, refusing it where :func:`probe_image`
    does and also, for a JPEG, where libjpeg only warns (:func:`jpeg_damage`): what ``pack-lmdb``
    and ``verify`` accept, the same JPEGs ``datakit check`` accepts."""
    if image_format(data) == "JPEG":
        damage = jpeg_damage(data)
        if damage:
            raise ImageDecodeError(f"{_describe(name)}: damaged JPEG data: {damage}")
        info = _jpeg_size(data) if damage == "" else None
        if info is not None and info[0] * info[1] <= _default_budget() and not _exif_turned(data):
            return info[0], info[1]  # every bit of its data decoded above; no rotation to tell
    return probe_image(data, name)


_REGION_ORDER = {"rgb": 0, "bgr": 1, "gray": 2}


def decode_jpeg_region(
    data: bytes | bytearray | memoryview,
    mode: str,
    scale: int,
    box: tuple[int, int, int, int],
    *,
    name: str | os.PathLike | None = None,
    index: bytes | None = None,
) -> np.ndarray | None:
    """Rows ``top:bottom`` and columns ``left:right`` (``box``, in the image scaled by 1/``scale``,
    whose sides are ``ceil(side / scale)``) of a JPEG, decoding only the rows down to ``bottom``
    and, of those, only the iMCU columns that hold the box: the pixels equal those of the whole
    image decoded at that scale and then cropped. ``mode``: ``"rgb"``, ``"bgr"`` or ``"gray"``.

    None when the region decoder was not built or the image is one it leaves to
    :func:`decode_image` (CMYK, an EXIF orientation other than 1, not a JPEG) or that libjpeg
    refuses: the caller decodes it the ordinary way, which raises the usual errors. A truncated
    file and one over the pixel budget raise :class:`ImageDecodeError` here too.

    ``index``: this JPEG's :func:`jpeg_entropy_index`. With it, only the entropy-coded data of
    the MCUs around the box is read, not every row above it and the whole width of its rows: the
    same pixels, 1.15-1.19x faster for random resized crops of photo-sized JPEGs and 1.35-1.49x
    of 2000-4000 px ones (``tools/bench_index.py``). An index of another file raises
    ``ValueError``.
    """
    if mode not in _REGION_ORDER or not region_decoder_available():
        return None
    if not isinstance(data, bytes):
        data = bytes(data)
    if image_format(data) != "JPEG":
        return None
    info = _jpeg_size(data)
    if info is None or not info[0] or not info[1]:
        if not _jpeg_ends(data):
            raise ImageDecodeError(f"{_describe(name)}: truncated JPEG (no end-of-image marker)")
        return None  # no usable frame header: the whole-image decoders say what is wrong
    return _decode_region(data, info[0], info[1], mode, scale, box, name, index)


def _decode_region(data: bytes, h: int, w: int, mode: str, scale: int, box: tuple[int, int, int, int],
                   name, index: bytes | None, stored: bool = False) -> np.ndarray | None:  # fmt: skip
    """:func:`decode_jpeg_region` for a JPEG whose frame header says ``h`` x ``w`` (the caller has
    read it and checked ``mode`` and that the decoder is built), without reading the header again.
    ``stored``: ``box`` is in the pixels as stored whatever the EXIF orientation (the caller turns
    them upright); None then also from an extension built before it could decode those."""
    if stored and not getattr(_REGION, "STORED", 0):
        return None
    if not _jpeg_ends(data):
        raise ImageDecodeError(f"{_describe(name)}: truncated JPEG (no end-of-image marker)")
    _refuse_scan_bomb(data, name)
    if h * w > _default_budget():
        raise _over_budget(name, h, w, _default_budget())
    top, left, bottom, right = box
    sh, sw = -(-h // scale), -(-w // scale)
    if not (0 <= top < bottom <= sh and 0 <= left < right <= sw):
        raise ValueError(f"box {box} is not inside the {sw}x{sh} image at 1/{scale}")
    got = None
    if index is not None:
        got = _decode_indexed(data, index, scale, (top, left, bottom - top, right - left), mode, name, stored)
    damaged = getattr(_REGION, "DamagedJPEG", ())
    try:
        if got is None:
            rect = (top, left, bottom - top, right - left)
            got = _REGION.decode_region(data, scale, *rect, _REGION_ORDER[mode], *(True,)[:stored])
    except ValueError:
        return None  # libjpeg's own error: the ordinary decoders say what is wrong, in their words
    except damaged as exc:  # corrupt data where the crop is (a file cut short, its end marker put back): its
        # pixels there are libjpeg's gray filling-in, which the ordinary decoders would give without a word
        raise ImageDecodeError(f"{_describe(name)}: damaged JPEG data: {exc}") from None
    if got is None:
        return None
    pixels, rows, band, channels, offset = got
    img = np.frombuffer(pixels, np.uint8).reshape(rows, band, channels)[:, offset : offset + right - left]
    return img[:, :, 0] if mode == "gray" else img


def _decode_indexed(data: bytes, index: bytes, scale: int, rect: tuple[int, int, int, int], mode: str, name,
                    stored: bool = False):  # fmt: skip
    """decode_indexed's answer, None when it leaves the image to decode_region (or libjpeg refuses
    the data); an index of another file is the caller's mistake and raises."""
    if not hasattr(_REGION, "decode_indexed"):  # an extension built before the index existed
        return None
    if not isinstance(index, (bytes, bytearray, memoryview)):
        raise TypeError(f"index must be the bytes jpeg_entropy_index returned, not {type(index).__name__}")
    try:
        return _REGION.decode_indexed(data, bytes(index), scale, *rect, _REGION_ORDER[mode], *(True,)[:stored])
    except ValueError as e:
        if "index" in str(e):
            raise ForeignIndex(f"{_describe(name)}: {e}") from None
        return None
    except getattr(_REGION, "DamagedJPEG", ()):  # decode_region, reading the file itself, says what is wrong
        return None


class ForeignIndex(ValueError):
    """An entropy index that is not the one of the JPEG it was given with."""


def jpeg_entropy_index(data: bytes | bytearray | memoryview) -> bytes | None:
    """Where each MCU row's entropy-coded data starts in a baseline JPEG (every few MCUs, with the
    DC predictors there): pass it to :func:`decode_jpeg_region` as ``index`` to decode a crop
    without reading the data around it.

    About 2-4% of the file's size. Building it reads the Huffman symbols of the whole scan once
    (no coefficient is decoded or stored): about 1.2x a decode at 1/8 scale, so it pays back for
    an image decoded many times (``train_pipeline(..., index_cache=DIR)`` keeps it between
    epochs). None for a JPEG it does not cover: progressive or arithmetic-coded, with restart
    markers, 12-bit, not one interleaved scan, under 4x4 MCUs, or whose scan does not end exactly
    at its closing marker (corrupt data); the region decoder then reads the whole stream as
    before. None too when the region decoder was not built. A header over the pixel budget
    raises :class:`ImageDecodeError`, as the decoders do.
    """
    if not region_decoder_available() or not hasattr(_REGION, "jpeg_index"):
        return None
    if not isinstance(data, bytes):
        data = bytes(data)
    info = _jpeg_size(data)
    if info and info[0] * info[1] > _default_budget():  # what every decoder here refuses
        raise _over_budget(None, info[0], info[1], _default_budget())
    return _REGION.jpeg_index(data)


def _max_file_bytes(max_pixels: int | None = None) -> int:
    """The most bytes an image file within the pixel budget can take: every pixel stored raw at 8 bytes
    (16-bit RGBA), plus 64 MiB of metadata and padding."""
    return pixel_budget(max_pixels) * 8 + (64 << 20)


def read_bytes(path: str | os.PathLike, *, max_pixels: int | None = None, pipes: bool = True) -> bytes:
    """The whole file, for any path; ``FileNotFoundError`` names it when missing. A named pipe is read as
    ``cat`` reads it (waiting for its writer; Ctrl-C ends the wait), or with ``pipes=False`` (a dataset's
    files: one pipe among them would hang the whole run) refused. What is neither (a device such as
    ``/dev/zero``, endless; a folder) and a file larger than any image within the pixel budget (a sparse
    20 GB ``.jpg``, a pipe that never ends) raise :class:`ImageDecodeError` naming it, before (or instead
    of) reading it all."""
    import stat

    # O_NONBLOCK: a pipe is known for one before its open waits for a writer
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode, size = (st := os.fstat(fd)).st_mode, st.st_size
        limit = _max_file_bytes(max_pixels)
        if stat.S_ISFIFO(mode) and not pipes:
            raise ImageDecodeError(f"{os.fspath(path)}: a named pipe, not an image file")
        if stat.S_ISFIFO(mode):
            os.close(fd)
            fd = -1
            return _read_pipe(path, limit)
        if not stat.S_ISREG(mode):
            what = ("a folder" if stat.S_ISDIR(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")  # fmt: skip
            raise ImageDecodeError(f"{os.fspath(path)}: {what}, not an image file")
        if size > limit:
            raise ImageDecodeError(f"{os.fspath(path)}: {size} bytes, more than any image within the pixel budget "
                                   f"takes ({limit} bytes; raise it with max_pixels= or the DATAKIT_MAX_PIXELS "
                                   "environment variable)")  # fmt: skip
        with open(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        if fd >= 0:
            os.close(fd)


def _read_pipe(path: str | os.PathLike, limit: int) -> bytes:
    """A named pipe's bytes until its writer closes it, a chunk at a time, refused past ``limit``."""
    out = bytearray()
    with open(path, "rb", buffering=0) as f:  # waits for a writer, as cat does
        while chunk := f.read(1 << 20):
            out += chunk
            if len(out) > limit:
                raise ImageDecodeError(f"{os.fspath(path)}: a pipe giving more than any image within the pixel "
                                       f"budget takes ({limit} bytes); stopped")  # fmt: skip
    return bytes(out)


def imread(
    path: str | os.PathLike,
    mode: str = "bgr",
    max_size: int | None = None,
    *,
    max_pixels: int | None = None,
    strict: bool = False,
) -> np.ndarray:
    """Read an image from any path (Chinese characters, spaces, long names).

    Returns a uint8 array (uint16 for 16-bit files in ``"unchanged"`` mode): HWC for
    ``"bgr"``/``"rgb"``, HW for ``"gray"``. See :func:`decode_image` for the modes,
    ``max_size``, the pixel budget ``max_pixels`` and ``strict``. Never returns None: a
    missing file raises ``FileNotFoundError``, bad data raises :class:`ImageDecodeError`
    naming the path.
    """
    data = read_bytes(path, max_pixels=max_pixels)
    return decode_image(data, mode, max_size, name=path, max_pixels=max_pixels, strict=strict)


def encode_image(img: np.ndarray, ext: str = ".jpg", quality: int = 95, *, mode: str = "bgr") -> bytes:
    """Encode an array to bytes in the format named by ``ext`` (``.jpg``, ``.png``, ``.webp``...)."""
    import cv2

    if mode not in ("bgr", "rgb"):
        raise ValueError(f"mode must be 'bgr' or 'rgb', got {mode!r}")
    if not isinstance(img, np.ndarray) or img.ndim not in (2, 3):
        raise ValueError(f"expected an HxW or HxWxC array, got {getattr(img, 'shape', type(img))}")
    if not 1 <= int(quality) <= 100:
        raise ValueError(f"quality must be in 1..100, got {quality}")
    if mode == "rgb" and img.ndim == 3 and img.shape[2] in (3, 4):
        img = cv2.cvtColor(img, cv2.COLOR_RGB2BGR if img.shape[2] == 3 else cv2.COLOR_RGBA2BGRA)
    ext = ext.lower() if ext.startswith(".") else "." + ext.lower()
    deep = (".png", ".tif", ".tiff", ".pgm", ".ppm", ".pnm")  # the formats OpenCV writes 16 bits to
    if img.dtype != np.uint8 and not (img.dtype == np.uint16 and ext in deep):
        # OpenCV would write a float 0-1 image as 0 and 1 (black), saturate 16 bits into a JPEG, without a word
        kinds = "uint8" + (" or uint16" if ext in deep else "")
        raise ValueError(f"cannot encode a {img.dtype} array as {ext}: it takes {kinds} pixels (scale and convert "
                         "it first, for example (img * 255).round().astype(np.uint8) for floats in 0-1)")  # fmt: skip
    if img.size == 0 or (img.ndim == 3 and img.shape[2] not in (1, 3, 4)):
        raise ValueError(f"cannot encode an array of shape {img.shape} as {ext}: it takes H x W, or H x W x 1, 3 "
                         "or 4 channels, none of them 0")  # fmt: skip
    params: list[int] = []
    if ext in (".jpg", ".jpeg", ".jpe"):
        params = [cv2.IMWRITE_JPEG_QUALITY, int(quality)]
    elif ext == ".webp":
        params = [cv2.IMWRITE_WEBP_QUALITY, int(quality)]
    try:
        ok, out = cv2.imencode(ext, img, params)
    except cv2.error:  # an extension OpenCV does not know, or a layout its writer refuses
        ok = False
    if not ok:
        raise ValueError(f"cannot encode a {img.dtype} array of shape {img.shape} as {ext}")
    return out.tobytes()


def imwrite(
    path: str | os.PathLike,
    img: np.ndarray,
    quality: int = 95,
    *,
    mode: str = "bgr",
    overwrite: bool = True,
    tidy: bool = False,
) -> Path:
    """Write an image to any Unicode path, atomically: a temporary file renamed when complete.

    The format follows the extension. ``mode`` says whether ``img`` is BGR (OpenCV) or RGB.
    A reader never sees a half-written file, and an interrupted write leaves the old file.
    The file gets the permissions the umask gives a new file (``0666 & ~umask``). With
    ``overwrite=False`` an existing file is refused (``UsageError``), even one that appears
    while encoding. ``tidy``: first remove the temporary files earlier writes of ``path`` killed midway left
    (:func:`atomic_output`); it lists the folder, so a loop writing many images leaves it off.
    """
    path = file_path(path)  # bytes too, as imread takes them
    data = encode_image(img, path.suffix or ".png", quality, mode=mode)
    with atomic_output(path, overwrite=overwrite, tidy=tidy) as tmp, open(tmp, "wb") as f:
        f.write(data)
    return path


def _umask() -> int:
    try:  # Linux reports it without changing it (os.umask would, process-wide, for an instant)
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def name_encoding_problem() -> str | None:
    """What is wrong with the encoding this process reads and writes file names in, when it is not UTF-8 (the
    C locale with PYTHONUTF8=0, a locale such as en_US.ISO-8859-1 or zh_CN.GBK); None when it is."""
    enc = sys.getfilesystemencoding().lower().replace("_", "-")
    if os.name != "posix" or enc in ("utf-8", "utf8"):
        return None
    import locale

    ctype = locale.setlocale(locale.LC_CTYPE)
    why = "a C or POSIX locale with PYTHONUTF8=0?" if ctype in ("C", "POSIX") else f"the locale {ctype}"
    return (f"file names are read as {enc}, not UTF-8 ({why}), so names that are not ASCII cannot be read or "
            "written; use a UTF-8 locale (LC_ALL=C.UTF-8) or PYTHONUTF8=1")  # fmt: skip


def refuse_unreadable_names(where: str | os.PathLike, ascii_only: bool) -> None:
    """``UsageError`` when names that are not ASCII (``ascii_only`` false) are to be read from or written to the
    disk by a process whose file-name encoding is not UTF-8: read, a class folder 猫 would be the class
    'ç\\x8c«' (kept in a pack); written, an archive's 猫 would be GBK bytes no UTF-8 shell finds. ASCII names read
    alike in every encoding, so those are let be."""
    if not ascii_only and (problem := name_encoding_problem()) is not None:
        raise UsageError(f"{os.fspath(where)}: {problem}")


def check_path_length(path: str | os.PathLike) -> None:
    """``UsageError`` naming ``path`` when no file system takes it: a part of it longer than a file
    name may be (255 bytes), or the whole longer than a path may be (4095)."""
    raw = os.fsencode(path)
    longest = max((len(part) for part in raw.split(b"/")), default=0)
    if longest > 255:
        raise UsageError(f"{path}: a name in it is {longest} bytes, longer than a file name may be (255)")
    if len(raw) > 4095:
        raise UsageError(f"{path}: {len(raw)} bytes, longer than a path may be (4095)")


def file_path(path: str | bytes | os.PathLike) -> Path:
    """``path`` as a ``Path``, refusing (``UsageError``) a name that ends with '/', which names a folder:
    ``Path`` drops the '/', and ``out.png/`` would be written as the file ``out.png``."""
    text = os.fsdecode(path)
    if isinstance(path, (str, bytes)) and text.endswith(("/", os.sep)):  # (a Path has dropped it already)
        raise UsageError(f"{text}: names a folder (it ends with '/'); give a file name")
    return Path(text)


# outputs found free when checked within one run (a command, a preview or a histogram call), until written or the
# run's end: one there later in that run is another process's; outside a run nothing is kept
_FOUND_FREE: set[str] = set()
_RUNS = [0]


@contextlib.contextmanager
def output_run() -> Iterator[None]:
    """One run of work that checks its outputs first and writes them at its end: within it, an output found free
    then and there later was made by another process meanwhile (:class:`DatakitError`, exit 1), not a usage
    mistake (``UsageError``, exit 2). Nested runs are one; the outermost's end forgets what it found."""
    _RUNS[0] += 1
    try:
        yield
    finally:
        _RUNS[0] -= 1
        if not _RUNS[0]:
            _FOUND_FREE.clear()


def _made_meanwhile(path: Path) -> str:
    return (f"{path}: made by another process while this one worked (it was not there when this one began); not "
            "replaced: use --overwrite (overwrite=True) to replace it")  # fmt: skip


def check_output(path: str | os.PathLike, *, overwrite: bool = False, probe: bool = False) -> Path:
    """``path`` as a ``Path`` when a file may be written there; ``UsageError`` naming it when it
    exists (and ``overwrite`` is false), is a folder, its folder does not exist, or that folder
    is one this process may not create files in (its permissions, a read-only file system), or
    its name is longer than a file system takes.
    ``probe``: also make and remove a file there (before long work: what the permissions do not
    show, as for root in /sys)."""
    check_path_length(path)
    path = file_path(path)
    try:
        is_dir, exists = path.is_dir(), path.exists() or path.is_symlink()  # a dangling link is a name taken too
    except PermissionError:  # a folder this process may not enter (no x bit): nothing can be looked at or made there
        raise UsageError(f"{path.parent}: not writable; cannot write {path.name} into it") from None
    if is_dir:
        raise UsageError(f"{path}: is a folder; give a file name")
    if exists and not overwrite:
        if os.fspath(path) in _FOUND_FREE:  # checked free when the work began: another process made it since
            _FOUND_FREE.discard(os.fspath(path))  # (said once: asked for again, it is there, as any file)
            raise DatakitError(_made_meanwhile(path))
        raise UsageError(f"{path}: already exists; use --overwrite (overwrite=True) to replace it")
    if not exists and _RUNS[0]:
        _FOUND_FREE.add(os.fspath(path))
    if not path.parent.is_dir():
        raise UsageError(f"{path.parent}: no such folder to write {path.name} into")
    if not os.access(path.parent, os.W_OK | os.X_OK):  # written as a new file beside it, then renamed
        raise UsageError(f"{path.parent}: not writable; cannot write {path.name} into it")
    if probe:  # os.access says yes to root everywhere (/sys, /proc): a file made and removed tells
        try:
            fd, made = tempfile.mkstemp(dir=path.parent, prefix=".datakit-probe-")
        except OSError:
            raise UsageError(f"{path.parent}: not writable; cannot write {path.name} into it") from None
        os.close(fd)
        discard(made)
    return path


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, *, overwrite: bool = False, tidy: bool = False) -> Iterator[str]:
    """Yield a temporary file name next to ``path``; on success it becomes ``path`` in one step.

    The temporary file is in the same folder (so the rename is atomic), gets ``0666 & ~umask``
    (``mkstemp`` creates files readable by the owner only), and is removed on any failure.
    Without ``overwrite``, an existing ``path`` is refused before and after the write (a file
    created meanwhile is never replaced: the final step is a hard link, which fails if it exists).
    ``tidy`` first removes the temporary files of earlier writes of ``path`` killed midway
    (:func:`_remove_stale_temps`), listing the folder to find them.
    """
    path = check_output(path, overwrite=overwrite)
    # the temporary name holds the final one, cut so that it stays under the 255 bytes of a name
    stem = path.name if len(os.fsencode(path.name)) <= 200 else os.fsdecode(os.fsencode(path.name)[:200])
    if tidy:  # a command's one output: its folder listed once (not per image of a loop of imwrite calls)
        _remove_stale_temps(path.parent, stem)
    fd, tmp = tempfile.mkstemp(prefix=f".{stem}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    try:
        os.close(fd)
        try:
            yield tmp
        except OSError as exc:  # the disk full under it: the output named (not "cannot write the output", as stdout)
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
                raise
            why = f"cannot be written ({exc.strerror}); nothing was written there"
            raise OSError(exc.errno, why, os.fspath(path)) from None
        os.chmod(tmp, 0o666 & ~_umask())
        if overwrite:
            os.replace(tmp, path)
        else:
            # not there when the work began (checked above): another process made it meanwhile, which is no
            # usage mistake of this one's (exit 1, not 2)
            taken = _made_meanwhile(path)
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise DatakitError(taken) from None
            except OSError:  # a file system without hard links: the check above is the best we have
                if path.exists():
                    raise DatakitError(taken) from None
                os.replace(tmp, path)
    finally:
        _FOUND_FREE.discard(os.fspath(path))  # written (or not): asked for again, it is there or free, as any file
        discard(tmp)


_STALE_AFTER = 600.0  # seconds a temporary file must be untouched to be another write's leftover, not a live one


def _remove_stale_temps(folder: Path, stem: str) -> None:
    """Remove, best effort, the temporary files of earlier writes of ``stem`` into ``folder`` killed midway (SIGKILL,
    which no clean-up survives): regular files named exactly ``.STEM.PID.XXXXXXXX.tmp`` (``mkstemp``'s eight
    characters) whose PID runs no more here and that nothing has written for ten minutes (a writer on another
    machine of a shared folder has a PID this one does not know)."""
    import stat
    import time

    pattern = re.compile(rf"\.{re.escape(stem)}\.([0-9]+)\.[a-z0-9_]{{8}}\.tmp")
    try:
        names = [n for n in os.listdir(folder) if pattern.fullmatch(n)]
    except OSError:
        return
    now = time.time()
    for name in names:
        pid = int(pattern.fullmatch(name).group(1))
        try:
            st = os.lstat(folder / name)
            if not stat.S_ISREG(st.st_mode) or now - st.st_mtime < _STALE_AFTER or pid == os.getpid():
                continue
            try:
                os.kill(pid, 0)
                continue  # a process of that number runs: perhaps the writer
            except ProcessLookupError:
                pass
            os.unlink(folder / name)
        except (OSError, OverflowError):  # gone meanwhile, not ours to remove, a number no process can have
            continue


def discard(path: str | os.PathLike) -> None:
    """Remove a temporary file if it is there (after a failed or interrupted write)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _reduced_gray_shape(data: bytes, factor: int) -> tuple[int, ...] | None:
    """The shape of a JPEG decoded in gray at 1/``factor`` (EXIF orientation applied, as
    :func:`decode_image` applies it); None where OpenCV cannot decode it (the caller goes the
    ordinary way, which names the problem)."""
    import cv2

    img = cv2.imdecode(np.frombuffer(data, np.uint8), _cv2_flags("gray", "JPEG", factor, 1))
    if img is None:
        return None
    return (img.shape[1], img.shape[0]) if _exif_turned(data) else img.shape


def probe_image(
    data: bytes, name: str | os.PathLike | None = None, *, strict: bool = False, max_pixels: int | None = None
) -> tuple[int, int]:
    """The upright (height, width) of an encoded image, validating its data by decoding it.

    A JPEG is decoded at 1/8 scale, which still runs the entropy decoder over all of its data
    (so truncation and corruption are caught) at a fraction of the cost; its size comes from the
    frame header, turned upright by comparing with the decoded (EXIF-rotated) shape. ``strict``
    and ``max_pixels`` as in :func:`decode_image`.
    """
    info = _jpeg_size(data) if image_format(data) == "JPEG" else None
    kw = {"name": name, "strict": strict, "max_pixels": max_pixels}
    if info is not None:
        h, w, _ = info
        fast = not strict and max_pixels is None and h * w <= _default_budget() and _jpeg_ends(data)
        for factor in (8, 4, 2):
            # a square image reads the same either way; a nearly square one may need a finer scale to tell
            # what decode_image would do, directly (at the scale it would choose)
            shape = _reduced_gray_shape(data, reduction_factor(h, w, -(-max(h, w) // factor))) if fast else None
            if shape is None:
                shape = decode_image(data, "gray", -(-max(h, w) // factor), **kw).shape
            rh, rw = shape[:2]
            up, side = (-(-h // factor), -(-w // factor)), (-(-w // factor), -(-h // factor))
            if (rh, rw) == up and (up != side or h == w):
                return h, w
            if (rh, rw) == side and up != side:
                return w, h
            if up != side:
                break  # neither shape: decode in full below
    img = decode_image(data, "gray", **kw)
    return img.shape[0], img.shape[1]
