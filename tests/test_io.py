from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from conftest import rgb_blocks
from PIL import Image

from datakit.io import ImageDecodeError, decode_image, image_format, imread, imwrite, reduction_factor
from datakit.testing import synthetic_image

NAME = "猫 的 照片 — a rather long file name with spaces and 中文 characters"


def _save_pil(img: Image.Image, path: Path, **kw) -> Path:
    img.save(path, **kw)
    return path


@pytest.mark.parametrize("ext", [".png", ".bmp", ".tif", ".webp"])
def test_lossless_roundtrip_unicode_path_every_mode(tmp_path: Path, ext: str):
    img = rgb_blocks()
    path = tmp_path / "目录" / f"{NAME}{ext}"
    path.parent.mkdir()
    params = {"quality": 100} if ext != ".webp" else {"quality": 101}
    if ext == ".webp":  # quality above 100 selects lossless WebP in OpenCV
        path = _save_pil(Image.fromarray(img), path, lossless=True)
    else:
        imwrite(path, img, mode="rgb", **params)
    np.testing.assert_array_equal(imread(path, "rgb"), img)
    np.testing.assert_array_equal(imread(path, "bgr"), img[..., ::-1])
    assert imread(path).shape == (32, 48, 3)  # default mode is OpenCV's BGR
    gray = imread(path, "gray")
    assert gray.shape == (32, 48) and gray.dtype == np.uint8
    # BT.601 luma of pure red, green, blue (libpng and OpenCV round the green one differently)
    assert [int(gray[0, 0]), int(gray[0, 20]), int(gray[0, 40])] in ([76, 150, 29], [76, 149, 29])


def test_jpeg_channel_order(tmp_path: Path):
    path = imwrite(tmp_path / "红绿蓝.jpg", rgb_blocks(), quality=100, mode="rgb")
    rgb = imread(path, "rgb").astype(int)
    assert rgb[16, 5, 0] > 240 and rgb[16, 5, 1] < 15 and rgb[16, 5, 2] < 15
    assert rgb[16, 40, 2] > 240 and rgb[16, 40, 0] < 15
    np.testing.assert_array_equal(imread(path, "bgr"), imread(path, "rgb")[..., ::-1])


def test_png_16bit(tmp_path: Path):
    img = np.full((8, 10, 3), 0x1234, np.uint16)
    img[..., 2] = 0xFFFF
    path = tmp_path / "十六位.png"
    imwrite(path, img)
    raw = imread(path, "unchanged")
    assert raw.dtype == np.uint16
    np.testing.assert_array_equal(raw, img)
    bgr = imread(path, "bgr")
    assert bgr.dtype == np.uint8
    assert bgr[0, 0].tolist() == [0x12, 0x12, 0xFF]


def test_png_palette_with_transparency(tmp_path: Path):
    pal = Image.new("P", (6, 4))
    pal.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)
    pal.putpixel((0, 0), 1)
    path = _save_pil(pal, tmp_path / "调色板.png", transparency=0)
    rgb = imread(path, "rgb")
    assert rgb.shape == (4, 6, 3)
    assert rgb[0, 0].tolist() == [0, 0, 255] and rgb[1, 1].tolist() == [255, 0, 0]
    assert imread(path, "unchanged").shape == (4, 6, 4)


def test_png_alpha_dropped_for_colour_modes(tmp_path: Path):
    rgba = np.zeros((5, 5, 4), np.uint8)
    rgba[..., 0], rgba[..., 3] = 200, 17
    path = _save_pil(Image.fromarray(rgba, "RGBA"), tmp_path / "透明.png")
    assert imread(path, "rgb")[0, 0].tolist() == [200, 0, 0]
    assert imread(path, "unchanged")[0, 0].tolist() == [0, 0, 200, 17]  # BGRA, as OpenCV


def test_grayscale_expands_to_three_channels(tmp_path: Path):
    g = np.arange(48, dtype=np.uint8).reshape(6, 8)
    path = _save_pil(Image.fromarray(g, "L"), tmp_path / "灰度.png")
    rgb = imread(path, "rgb")
    assert rgb.shape == (6, 8, 3)
    np.testing.assert_array_equal(rgb[..., 1], g)
    assert imread(path, "unchanged").shape == (6, 8)


def test_gif_first_frame(tmp_path: Path):
    frames = [Image.new("RGB", (7, 5), c) for c in [(255, 0, 0), (0, 0, 255)]]
    path = tmp_path / "动画.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:])
    assert imread(path, "rgb")[2, 3].tolist() == [255, 0, 0]


def test_jpeg_exif_orientation_applied(tmp_path: Path):
    img = Image.fromarray(synthetic_image(40, 80))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    path = _save_pil(img, tmp_path / "旋转.jpg", exif=exif.tobytes(), quality=95)
    assert imread(path, "rgb").shape == (80, 40, 3)
    assert imread(path, "unchanged").shape == (80, 40, 3)
    assert imread(path, "rgb", max_size=20).shape == (20, 10, 3)  # 1/4 scale, still rotated


def test_cmyk_jpeg(tmp_path: Path):
    rgb = synthetic_image(24, 32)
    path = _save_pil(Image.fromarray(rgb).convert("CMYK"), tmp_path / "印刷.jpg", quality=95)
    with Image.open(path) as im:
        assert im.mode == "CMYK"
        ref = np.asarray(im.convert("RGB")).astype(int)
    got = imread(path, "rgb").astype(int)
    assert got.shape == (24, 32, 3)
    assert np.abs(got - ref).mean() < 3


def test_max_size_decodes_reduced(tmp_path: Path):
    path = imwrite(tmp_path / "大图.jpg", synthetic_image(1200, 1600), quality=90)
    assert imread(path, "rgb", max_size=300).shape == (300, 400, 3)  # 1/4 keeps >= 300
    assert imread(path, "rgb", max_size=150).shape == (150, 200, 3)  # 1/8
    assert imread(path, "rgb", max_size=700).shape == (600, 800, 3)  # 1/2
    assert imread(path, "rgb", max_size=1500).shape == (1200, 1600, 3)
    assert imread(path, "gray", max_size=300).shape == (300, 400)
    small = imread(path, "rgb", max_size=300).astype(int)
    import cv2

    ref = cv2.resize(imread(path, "rgb"), (400, 300), interpolation=cv2.INTER_AREA).astype(int)
    assert np.abs(small - ref).mean() < 4
    png = imwrite(tmp_path / "大图.png", synthetic_image(120, 160))
    assert imread(png, "rgb", max_size=30).shape == (120, 160, 3)  # only JPEG decodes reduced


def test_reduction_factor():
    assert reduction_factor(4000, 3000, 512) == 4
    assert reduction_factor(4000, 3000, 500) == 8
    assert reduction_factor(300, 300, 512) == 1
    assert reduction_factor(300, 300, None) == 1


def test_missing_file_names_path(tmp_path: Path):
    path = tmp_path / "不存在.jpg"
    with pytest.raises(FileNotFoundError, match="不存在.jpg"):
        imread(path)


def test_empty_file(tmp_path: Path):
    path = tmp_path / "空.jpg"
    path.write_bytes(b"")
    with pytest.raises(ImageDecodeError) as e:
        imread(path)
    assert str(e.value) == f"{path}: empty file (0 bytes)"
    assert isinstance(e.value, ValueError)


def test_truncated_jpeg(tmp_path: Path):
    good = imwrite(tmp_path / "好.jpg", synthetic_image(64, 64))
    bad = tmp_path / "截断.jpg"
    bad.write_bytes(good.read_bytes()[:700])
    with pytest.raises(ImageDecodeError) as e:
        imread(bad)
    assert str(e.value) == f"{bad}: truncated JPEG (no end-of-image marker)"


def test_truncated_png(tmp_path: Path):
    good = imwrite(tmp_path / "好.png", synthetic_image(64, 64))
    bad = tmp_path / "截断.png"
    bad.write_bytes(good.read_bytes()[:300])
    with pytest.raises(ImageDecodeError, match=r"截断.png: PNG data is corrupt or truncated"):
        imread(bad)


def test_not_an_image(tmp_path: Path):
    path = tmp_path / "说明.jpg"
    path.write_text("hello, this is text", encoding="utf-8")
    with pytest.raises(ImageDecodeError, match=r"说明.jpg: not a recognised image format \(starts with b'hello, t'"):
        imread(path)


def test_decode_bytes_and_name():
    with pytest.raises(ImageDecodeError, match=r"^<bytes>: empty file"):
        decode_image(b"")
    with pytest.raises(ImageDecodeError, match=r"^key-7: not a recognised"):
        decode_image(b"\x00" * 10, name="key-7")
    with pytest.raises(ValueError, match="mode must be one of bgr, rgb, gray, unchanged, got 'RGB'"):
        decode_image(b"\x00", mode="RGB")


def test_image_format():
    buf = io.BytesIO()
    Image.new("RGB", (2, 2)).save(buf, "WEBP")
    assert image_format(buf.getvalue()) == "WEBP"
    assert image_format(b"\xff\xd8\xff\xe0") == "JPEG"
    assert image_format(b"hello") is None


def test_imwrite_atomic_leaves_old_file_on_failure(tmp_path: Path, monkeypatch):
    path = imwrite(tmp_path / "原图.png", np.zeros((4, 4, 3), np.uint8))
    before = path.read_bytes()

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="No space left"):
        imwrite(path, np.full((4, 4, 3), 255, np.uint8))
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["原图.png"]


def test_imwrite_rejects_bad_input(tmp_path: Path):
    with pytest.raises(ValueError, match="quality must be in 1..100, got 0"):
        imwrite(tmp_path / "a.jpg", np.zeros((2, 2, 3), np.uint8), quality=0)
    with pytest.raises(ValueError, match=r"expected an HxW or HxWxC array, got \(2,\)"):
        imwrite(tmp_path / "a.jpg", np.zeros(2, np.uint8))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_imwrite_honours_the_umask(tmp_path: Path, umask: int):
    old = os.umask(umask)
    try:
        path = imwrite(tmp_path / f"图_{umask:o}.png", np.zeros((4, 4, 3), np.uint8))
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left behind


def test_imwrite_without_overwrite_keeps_the_existing_file(tmp_path: Path):
    from datakit.errors import UsageError

    path = tmp_path / "已有.png"
    path.write_bytes(b"mine")
    with pytest.raises(UsageError, match=r"已有.png: already exists; pass --overwrite to replace it$"):
        imwrite(path, np.zeros((4, 4, 3), np.uint8), overwrite=False)
    assert path.read_bytes() == b"mine" and len(list(tmp_path.iterdir())) == 1
    with pytest.raises(UsageError, match=r"no such folder to write x.png into$"):
        imwrite(tmp_path / "missing" / "x.png", np.zeros((4, 4, 3), np.uint8), overwrite=False)
