"""The entropy index (jpeg_entropy_index + decode_jpeg_region(index=...)): a crop decoded from
the MCUs around it alone has exactly the pixels of the whole image decoded and cropped."""

from __future__ import annotations

import io
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image
from test_region import SAMPLING, _photo, _whole

from datakit.errors import ImageDecodeError
from datakit.io import decode_jpeg_region, jpeg_entropy_index, region_decoder_available

pytestmark = pytest.mark.skipif(not region_decoder_available(), reason="datakit._jpegregion was not built")


def _jpeg(img: np.ndarray, sampling: str = "420", quality: int = 90, optimize: bool = False, **extra) -> bytes:
    params = [cv2.IMWRITE_JPEG_QUALITY, quality, cv2.IMWRITE_JPEG_OPTIMIZE, int(optimize)]
    if img.ndim == 3:
        params += [cv2.IMWRITE_JPEG_SAMPLING_FACTOR, SAMPLING[sampling]]
    for key, value in extra.items():
        params += [getattr(cv2, key), value]
    return cv2.imencode(".jpg", img, params)[1].tobytes()


def _boxes(sh: int, sw: int, rng: np.random.Generator) -> list[tuple[int, int, int, int]]:
    y0, x0 = int(rng.integers(0, sh)), int(rng.integers(0, sw))
    return [
        (y0, x0, int(rng.integers(y0 + 1, sh + 1)), int(rng.integers(x0 + 1, sw + 1))),
        (0, 0, sh, sw),
        (0, 0, 1, 1),
        (sh - 1, sw - 1, sh, sw),
        (y0, 0, sh, max(1, sw // 3)),  # the left edge, where the copied columns start at the image's
        (0, x0, max(1, sh // 3), sw),  # the top and right edges
    ]


def _check(data: bytes, h: int, w: int, rng: np.random.Generator, modes=("rgb", "bgr", "gray")) -> None:
    index = jpeg_entropy_index(data)
    assert index is not None
    for f in (1, 2, 4, 8):
        sh, sw = -(-h // f), -(-w // f)
        for mode in modes:
            whole = _whole(data, mode, f, sh, sw)
            for t, left, b, r in _boxes(sh, sw, rng):
                got = decode_jpeg_region(data, mode, f, (t, left, b, r), index=index)
                assert got is not None
                np.testing.assert_array_equal(got, whole[t:b, left:r], err_msg=f"1/{f} {mode} {(t, left, b, r)}")


@pytest.mark.parametrize("sampling", list(SAMPLING))
@pytest.mark.parametrize("optimize", [False, True])
def test_an_indexed_crop_equals_the_whole_image_decoded_then_cropped(sampling: str, optimize: bool):
    # The attack: every chroma subsampling, standard and optimised Huffman tables, boxes touching
    # each border (where the made-up column and the image's own edge meet), every DCT scale.
    rng = np.random.default_rng(len(sampling) * 3 + optimize)
    for _ in range(4):
        h, w = int(rng.integers(70, 400)), int(rng.integers(130, 400))
        _check(_jpeg(_photo(h, w, rng), sampling, int(rng.integers(40, 101)), optimize), h, w, rng)


def test_an_indexed_crop_of_a_gray_jpeg_and_of_pillows_encoder_equals_the_whole_image():
    rng = np.random.default_rng(5)
    img = _photo(131, 257, rng)
    _check(_jpeg(img[:, :, 0], optimize=True), 131, 257, rng, modes=("gray", "rgb"))
    for subsampling in (0, 1, 2):
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, "JPEG", quality=85, subsampling=subsampling, optimize=subsampling == 1)
        _check(buf.getvalue(), 131, 257, rng, modes=("rgb",))


def test_the_index_covers_a_baseline_jpeg_and_its_size_follows_the_mcus():
    rng = np.random.default_rng(1)
    data = _jpeg(_photo(300, 400, rng))  # 4:2:0: 25 x 19 MCUs of 16 px, a point every 4 MCUs
    index = jpeg_entropy_index(data)
    assert index[:4] == b"DKJ1"
    assert len(index) == 48 + 12 * (7 * 19 + 1) == 1656
    assert jpeg_entropy_index(bytearray(data)) == index


def test_no_index_for_jpegs_it_does_not_cover():
    rng = np.random.default_rng(2)
    img = _photo(120, 160, rng)
    full = _jpeg(img)
    corrupt = bytearray(full)
    corrupt[len(full) // 2 : len(full) // 2 + 40] = bytes(range(40))  # entropy data libjpeg decodes around
    png = cv2.imencode(".png", img)[1].tobytes()
    assert jpeg_entropy_index(_jpeg(img, IMWRITE_JPEG_PROGRESSIVE=1)) is None
    assert jpeg_entropy_index(_jpeg(img, IMWRITE_JPEG_RST_INTERVAL=2)) is None
    assert jpeg_entropy_index(_jpeg(img[:40, :60])) is None  # under 4x4 MCUs
    assert jpeg_entropy_index(full[: len(full) // 2]) is None  # truncated in its scan
    assert jpeg_entropy_index(bytes(corrupt)) is None
    assert jpeg_entropy_index(png) is None
    assert jpeg_entropy_index(b"") is None
    assert jpeg_entropy_index(full) is not None


def test_an_index_of_another_file_is_refused_naming_the_file():
    rng = np.random.default_rng(3)
    a = _jpeg(_photo(200, 240, rng))
    b = _jpeg(_photo(200, 240, rng))
    index = jpeg_entropy_index(a)
    for bad in (index, jpeg_entropy_index(b)[:-12], index[:20], b"DKJ1" + bytes(60)):
        with pytest.raises(ValueError) as e:
            decode_jpeg_region(b, "rgb", 2, (0, 0, 10, 10), name="标注/图片.jpg", index=bad)
        assert str(e.value) == "标注/图片.jpg: the index is not one of this JPEG"
    with pytest.raises(TypeError) as e:
        decode_jpeg_region(a, "rgb", 2, (0, 0, 10, 10), index="DKJ1")
    assert str(e.value) == "index must be the bytes jpeg_entropy_index returned, not str"
    with pytest.raises(ValueError) as e:
        decode_jpeg_region(a, "rgb", 2, (0, 0, 101, 10), index=index)
    assert str(e.value) == "box (0, 0, 101, 10) is not inside the 120x100 image at 1/2"


def test_a_tampered_index_never_reads_outside_the_data():
    # The attack: random bytes written over the index's points (offsets, phases, predictors). The
    # decoder may refuse, fall back or give wrong pixels for a forged index, but must not crash.
    rng = np.random.default_rng(4)
    data = _jpeg(_photo(256, 320, rng))
    index = jpeg_entropy_index(data)
    outcomes = set()
    for _ in range(400):
        forged = bytearray(index)
        for _ in range(int(rng.integers(1, 6))):
            at = int(rng.integers(48, len(forged)))
            forged[at] = int(rng.integers(0, 256))
        try:
            got = decode_jpeg_region(data, "rgb", int(rng.choice([1, 2, 4, 8])), (0, 0, 16, 16), index=bytes(forged))
            outcomes.add("pixels" if got is not None else "none")
        except ValueError as e:
            assert str(e) == "<bytes>: the index is not one of this JPEG"
            outcomes.add("refused")
    assert "refused" in outcomes and "pixels" in outcomes


def test_the_example_in_docs_io_runs_as_written(monkeypatch):
    root = Path(__file__).resolve().parents[1]
    text = (root / "docs" / "io.md").read_text(encoding="utf-8")
    block = text.split("```python\nfrom datakit.io import decode_jpeg_region, jpeg_entropy_index\n", 1)[1]
    code = "from datakit.io import decode_jpeg_region, jpeg_entropy_index\n" + block.split("```", 1)[0]
    monkeypatch.chdir(root)
    scope: dict = {}
    exec(compile(code, "docs/io.md", "exec"), scope)
    assert scope["index"] is not None
    assert scope["crop"].shape == (80, 100, 3)
    plain = decode_jpeg_region(scope["data"], "rgb", 1, (10, 20, 90, 120))
    np.testing.assert_array_equal(scope["crop"], plain)


def test_a_header_over_the_pixel_budget_is_refused_as_the_decoders_refuse_it():
    data = bytearray(cv2.imencode(".jpg", np.zeros((64, 64, 3), np.uint8))[1].tobytes())
    sof = data.find(b"\xff\xc0")
    data[sof + 5 : sof + 9] = b"\xff\xff\xff\xff"  # 65535 x 65535 in the frame header
    with pytest.raises(ImageDecodeError) as e:
        jpeg_entropy_index(bytes(data))
    assert str(e.value) == (
        "<bytes>: 65535x65535 = 4294836225 pixels, over the limit of 89478485 (a decompression bomb?; "
        "raise it with max_pixels= or the DATAKIT_MAX_PIXELS environment variable)"
    )


def test_bits_flipped_in_the_scan_give_no_index_or_one_that_decodes_what_libjpeg_decodes():
    # The attack: single bits flipped in the entropy-coded data. A flip in a code changes where
    # every later block starts, and the scan no longer ends at its marker: no index. A flip in a
    # coefficient's extra bits keeps every position and changes the pixels (and, in a DC value,
    # every later predictor): the index must follow and give the pixels libjpeg gives.
    rng = np.random.default_rng(6)
    data = _jpeg(_photo(96, 128, rng))
    scan = data.find(b"\xff\xda")
    scan += 2 + int.from_bytes(data[scan + 2 : scan + 4], "big")
    outcomes = {"none": 0, "same": 0}
    for _ in range(300):
        bad = bytearray(data)
        at = int(rng.integers(scan, len(data) - 2))
        if bad[at] == 0xFF or bad[at - 1] == 0xFF:
            continue  # the byte stuffing is the marker test's business
        bad[at] ^= 1 << int(rng.integers(0, 8))
        if bad[at] == 0xFF:
            continue
        index = jpeg_entropy_index(bytes(bad))
        if index is None:
            outcomes["none"] += 1
            continue
        for box in ((0, 0, 96, 128), (40, 50, 70, 90), (80, 0, 96, 30)):
            want = decode_jpeg_region(bytes(bad), "rgb", 1, box)
            np.testing.assert_array_equal(decode_jpeg_region(bytes(bad), "rgb", 1, box, index=index), want)
        outcomes["same"] += 1
    assert outcomes["none"] > 20 and outcomes["same"] > 20, outcomes
