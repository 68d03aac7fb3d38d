"""Attacks on the JPEG region decoder (datakit._jpegregion / datakit.io.decode_jpeg_region)."""

import io
import shutil
import subprocess

import numpy as np
import pytest

from datakit.io import decode_image, decode_jpeg_region, region_decoder_available

pytestmark = pytest.mark.skipif(not region_decoder_available(), reason="region decoder not built")


def _ppm(h, w):
    from PIL import Image

    a = np.random.default_rng(h * w).integers(0, 256, (h, w, 3), dtype=np.uint8)
    a = (a // 4 + np.linspace(0, 190, w, dtype=np.uint8)[None, :, None]).astype(np.uint8)
    b = io.BytesIO()
    Image.fromarray(a).save(b, "PPM")
    return b.getvalue()


def _cjpeg(h, w, *args):
    if shutil.which("cjpeg") is None:
        pytest.skip("cjpeg (libjpeg-turbo-progs) not installed")
    return subprocess.run(["cjpeg", *args], input=_ppm(h, w), capture_output=True, check=True).stdout


@pytest.mark.parametrize(
    "sample, scale, box",
    [
        ("4x2,1x1,1x1", 2, (0, 0, 50, 5)),  # 4:1:0 at 1/2: columns cropped on the right
        ("4x2,1x1,1x1", 2, (0, 5, 50, 38)),  # 4:1:0 at 1/2: columns cropped on the left
        ("4x2,1x1,1x1", 4, (0, 3, 25, 19)),  # 4:1:0 at 1/4
        ("2x2,2x1,1x1", 1, (0, 0, 100, 1)),  # chroma components with different sampling, full scale
    ],
)
def test_region_equals_whole_decode_cropped_unusual_sampling(sample, scale, box):
    data = _cjpeg(100, 75, "-sample", sample)
    sh, sw = -(-100 // scale), -(-75 // scale)
    full = decode_image(data, "rgb", max_size=max(sh, sw) if scale > 1 else None)
    assert full.shape[:2] == (sh, sw)
    region = decode_jpeg_region(data, "rgb", scale, box)
    if sample.startswith("4x2"):  # a luma MCU of 8 blocks: left to the whole-image decoders (libjpeg-turbo's column
        assert region is None  # crops of such files were up to 250 levels off at 1/2 and 1/4 scale on other boxes)
        return
    assert region is not None
    top, left, bottom, right = box
    np.testing.assert_array_equal(region, full[top:bottom, left:right])


def test_private_decode_region_wrapping_rectangle_does_not_crash():
    """Huge or negative coordinates passed to the C function itself: top + height once wrapped to
    0, passed the bounds check and the rows were written past a 0-byte buffer (SIGSEGV)."""
    import sys

    code = (
        "import io, numpy as np\n"
        "from PIL import Image\n"
        "from datakit import _jpegregion\n"
        "b = io.BytesIO(); Image.fromarray(np.full((64, 64), 128, np.uint8)).save(b, 'JPEG')\n"
        "H = 2**62\n"
        "for args in ((2**64 - H, 0, H, 64), (0, -1, 64, 2), (0, 0, 2**63, 64), (63, 63, 2, 1)):\n"
        "    try:\n"
        "        _jpegregion.decode_region(b.getvalue(), 1, *args, 2)\n"
        "    except ValueError as e:\n"
        "        print(e)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-500:])
    assert proc.stdout.splitlines() == [
        "rectangle 4611686018427387904x64 at (13835058055282163712, 0) outside the 64x64 image at 1/1",
        "rectangle 64x2 at (0, 18446744073709551615) outside the 64x64 image at 1/1",
        "rectangle 9223372036854775808x64 at (0, 0) outside the 64x64 image at 1/1",
        "rectangle 2x1 at (63, 63) outside the 64x64 image at 1/1",
    ]


def _exif_jpeg(*segments):
    from PIL import Image

    b = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 64, 3), dtype=np.uint8)).save(b, "JPEG")
    base = b.getvalue()
    return base[:2] + b"".join(b"\xff\xe1" + (len(p) + 2).to_bytes(2, "big") + p for p in segments) + base[2:]


def _tiff_orientation(orient):  # little-endian TIFF header, IFD0 with one Orientation (SHORT) entry
    if orient is None:
        return b"II*\x00\x08\x00\x00\x00" + b"\x00\x00" + b"\x00\x00\x00\x00"
    return (b"II*\x00\x08\x00\x00\x00" + b"\x01\x00" + b"\x12\x01\x03\x00\x01\x00\x00\x00"
            + orient.to_bytes(2, "little") + b"\x00\x00" + b"\x00\x00\x00\x00")  # fmt: skip


@pytest.mark.parametrize(
    "segments, scale",
    [
        # an APP1 "Exif\0\xff" header: torchvision (full scale) would rotate by it on its own; the C parser
        # reads any "Exif" segment and leaves the file to the whole-image decoders
        ((b"Exif\x00\xff" + _tiff_orientation(6),), 1),
        # two Exif APP1 segments, the first without an orientation: OpenCV (a DCT scale) would rotate by the second
        ((b"Exif\x00\x00" + _tiff_orientation(None), b"Exif\x00\x00" + _tiff_orientation(6)), 2),
        # the first Exif segment has a bad byte order mark: OpenCV would rotate by the second
        ((b"Exif\x00\x00XX*\x00\x08\x00\x00\x00\x00\x00", b"Exif\x00\x00" + _tiff_orientation(6)), 2),
    ],
    ids=["exif-header-not-nul-nul", "second-exif-segment", "first-exif-segment-bad-byte-order"],
)
def test_region_is_left_to_the_whole_image_decoders_when_exif_may_rotate(segments, scale):
    data = _exif_jpeg(*segments)
    sh, sw = -(-40 // scale), -(-64 // scale)
    region = decode_jpeg_region(data, "rgb", scale, (0, 0, sh, sw))
    assert region is None  # any Exif segment that asks for a rotation, or cannot be read: not decoded here
    # the whole-image decoders, at every scale, follow datakit's one rule: the first "Exif\0\0" segment's
    # orientation, 1 where it has none it can read; so all three files are upright, as stored
    plain = _exif_jpeg()
    for max_size in (None, 32, 16, 8):
        np.testing.assert_array_equal(decode_image(data, "rgb", max_size), decode_image(plain, "rgb", max_size))


def _jpeg_with_dims(h, w):
    from PIL import Image

    b = io.BytesIO()
    Image.fromarray(np.full((32, 48, 3), 100, np.uint8)).save(b, "JPEG")
    base = b.getvalue()
    i = base.index(b"\xff\xc0")
    return base[: i + 5] + h.to_bytes(2, "big") + w.to_bytes(2, "big") + base[i + 9 :]


def test_region_of_a_zero_width_frame_is_left_to_the_whole_image_decoders():
    """A frame header with width 0 (libjpeg: 'Empty JPEG image'): None, not an error about the box."""
    assert decode_jpeg_region(_jpeg_with_dims(32, 0), "rgb", 1, (0, 0, 1, 1), name="zero.jpg") is None


@pytest.mark.parametrize("h, w", [(32, 0), (0, 48)], ids=["width-0", "height-0-as-with-DNL"])
def test_train_pipeline_zero_dimension_jpeg_raises_image_decode_error(h, w):
    """decode_image says ImageDecodeError naming the file, and so does the pipeline (it once raised
    a ValueError about the box, or ZeroDivisionError drawing a crop from a zero height)."""
    from datakit.io import ImageDecodeError
    from datakit.transforms import train_pipeline

    data = _jpeg_with_dims(h, w)
    with pytest.raises(ImageDecodeError):
        decode_image(data, "rgb", name="zero.jpg")
    with pytest.raises(ImageDecodeError, match="zero.jpg"):
        train_pipeline(16).from_bytes(data, "rgb", name="zero.jpg")


def test_region_truncated_in_header_raises_image_decode_error():
    """A file cut before the end of its frame header is truncated too, and said so naming it."""
    from datakit.io import ImageDecodeError

    data = _jpeg_with_dims(32, 48)
    cut = data[: data.index(b"\xff\xc0") + 6]
    with pytest.raises(ImageDecodeError, match="cut.jpg"):
        decode_jpeg_region(cut, "rgb", 1, (0, 0, 1, 1), name="cut.jpg")


@pytest.mark.parametrize("progressive", [False, True])
def test_region_first_column_of_ordinary_420_jpeg(progressive):
    """Pillow's default 4:2:0 JPEG, full scale, the leftmost column alone: a band only a pixel
    wider made every row but the first differ (by up to 10 levels) from the whole image cropped."""
    from PIL import Image

    h, w = 48, 64
    a = np.random.default_rng(h).integers(0, 256, (h, w, 3), dtype=np.uint8)
    b = io.BytesIO()
    Image.fromarray(a).save(b, "JPEG", progressive=progressive)  # 4:2:0, quality 75
    data = b.getvalue()
    full = decode_image(data, "rgb")
    region = decode_jpeg_region(data, "rgb", 1, (0, 0, h, 1))
    assert region is not None
    np.testing.assert_array_equal(region, full[:, :1])


def _photo_jpeg(**save) -> bytes:
    from PIL import Image

    from datakit.testing import synthetic_image

    b = io.BytesIO()
    Image.fromarray(synthetic_image(480, 640, seed=3)).save(b, "JPEG", **save)
    return b.getvalue()


def test_a_progressive_file_with_unrefined_coefficients_goes_to_the_whole_image_decoders():
    # the attack: a progressive JPEG ending after its first scans (valid: libjpeg gives no warning) is decoded with
    # block smoothing, whose reach passed the region's margins: pixels up to 4 levels from the whole image's
    import cv2

    src = _photo_jpeg(quality=90, progressive=True)
    scans = [i for i in range(len(src) - 1) if src[i : i + 2] == b"\xff\xda"]
    assert len(scans) >= 4
    for cut in scans[1:4]:
        assert decode_jpeg_region(src[:cut] + b"\xff\xd9", "rgb", 1, (100, 150, 300, 400)) is None
    complete = decode_jpeg_region(src, "rgb", 1, (100, 150, 300, 400))  # every coefficient read: the region path
    whole = cv2.imdecode(np.frombuffer(src, np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
    assert complete is not None and np.array_equal(complete, whole[100:300, 150:400])


def test_a_truncated_jpeg_with_an_end_marker_in_its_headers_is_an_error_on_every_path():
    # the attack: a phone photo (an EXIF thumbnail, with its own FF D9, in APP1) cut in its scan: FF D9 in the file's
    # last 4 KB passed it as whole, and the region decoder filled the crop with gray 128 without a word
    import torch

    from datakit import io as dio
    from datakit.io import ImageDecodeError
    from datakit.transforms import train_pipeline

    thumb = _photo_jpeg(quality=60)[:1500] + b"\xff\xd9"  # a thumbnail's bytes, ending FF D9
    app1 = b"Exif\x00\x00" + thumb
    photo = _photo_jpeg(quality=90)
    data = photo[:2] + b"\xff\xe1" + (len(app1) + 2).to_bytes(2, "big") + app1 + photo[2:]
    cut = data[: data.index(b"\xff\xda") + 2000]
    for region in (True, False):
        region_decoder_available()  # loads it
        old = dio._REGION
        dio._REGION = old if region else False
        try:
            torch.manual_seed(0)
            with pytest.raises(ImageDecodeError, match=r"truncated JPEG \(no end-of-image marker\)"):
                train_pipeline(224).from_bytes(cut, "rgb", "cut.jpg")
        finally:
            dio._REGION = old
