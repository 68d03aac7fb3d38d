"""Contact sheets: fonts found the platform's way and checked glyph by glyph, the hint when none
draws a class name, the eval crop at any size, and the module's import paths."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import PassThrough
from PIL import Image, ImageDraw, ImageFont

import datakit.preview as pv
from datakit.cli import main
from datakit.io import imwrite
from datakit.testing import synthetic_image
from datakit.transforms import eval_pipeline

MPL_FONTS = Path(pytest.importorskip("matplotlib").get_data_path()) / "fonts" / "ttf"
needs_fontconfig = pytest.mark.skipif(shutil.which("fc-list") is None, reason="needs fontconfig's fc-list")
HINT = ("no installed font can draw '太空': captions show class numbers; install a font that has them "
        "(on Debian/Ubuntu: sudo apt install fonts-noto-cjk), or pass --font FILE")  # fmt: skip


def build_font(path: Path, chars: str, family: str = "Datakit Test Sans") -> Path:
    """A real TrueType font holding a distinct box glyph for each of ``chars`` (and .notdef)."""
    from fontTools.fontBuilder import FontBuilder
    from fontTools.pens.ttGlyphPen import TTGlyphPen

    names = [".notdef", *(f"u{ord(c):04X}" for c in chars)]
    glyphs = {}
    for k, name in enumerate(names):
        pen = TTGlyphPen(None)
        if name == ".notdef":  # a hollow box, as most fonts draw it
            for (
                x0,
                y0,
                x1,
                y1,
            ) in ((50, 0, 550, 700), (100, 50, 500, 650)):
                pen.moveTo((x0, y0)), pen.lineTo((x0, y1)), pen.lineTo((x1, y1)), pen.lineTo((x1, y0))
                pen.closePath()
        elif not chars[k - 1].isspace():
            top = 150 + 40 * k  # every glyph a different filled bar
            pen.moveTo((80, 0)), pen.lineTo((80, top)), pen.lineTo((520, top)), pen.lineTo((520, 0))
            pen.closePath()
        glyphs[name] = pen.glyph()
    fb = FontBuilder(1000, isTTF=True)
    fb.setupGlyphOrder(names)
    fb.setupCharacterMap({ord(c): f"u{ord(c):04X}" for c in chars})
    fb.setupGlyf(glyphs)
    fb.setupHorizontalMetrics({n: (600, 80) for n in names})
    fb.setupHorizontalHeader(ascent=900, descent=-200)
    fb.setupNameTable({"familyName": family, "styleName": "Regular"})
    fb.setupOS2(sTypoAscender=900, sTypoDescender=-200, usWinAscent=900, usWinDescent=200)
    fb.setupPost()
    path.parent.mkdir(parents=True, exist_ok=True)
    fb.save(str(path))
    return path


@pytest.fixture
def fonts(tmp_path: Path, monkeypatch) -> Path:
    """A font folder that fontconfig (and only fontconfig) searches: nothing else installed counts."""
    folder = tmp_path / "fonts"
    folder.mkdir()
    conf = tmp_path / "fonts.conf"
    conf.write_text(f'<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "fonts.dtd">\n<fontconfig>'
                    f"<dir>{folder}</dir><cachedir>{tmp_path / 'fc-cache'}</cachedir></fontconfig>\n",
                    encoding="utf-8")  # fmt: skip
    monkeypatch.setenv("FONTCONFIG_FILE", str(conf))
    monkeypatch.setattr(pv, "_matplotlib", lambda: iter(()))
    monkeypatch.setattr(pv, "PLATFORM_FONTS", ())
    pv._find.cache_clear()
    yield folder
    pv._find.cache_clear()


@pytest.fixture
def space_folder(tmp_path: Path) -> Path:
    root = tmp_path / "图片"
    for c, cls in enumerate(["cat", "太空"]):
        (root / cls).mkdir(parents=True)
        for i in range(3):
            imwrite(root / cls / f"{i}.png", synthetic_image(40, 50 + 10 * i, seed=c * 5 + i), mode="rgb")
    return root


CAPTION_CHARS = "0123456789: clasto太空"


def test_glyph_coverage_is_checked_per_character():
    dejavu = ImageFont.truetype(str(MPL_FONTS / "DejaVuSans.ttf"), 16)
    assert pv._missing(dejavu, "cat 太空 кот") == "太空"  # DejaVu has Cyrillic, not Han
    assert pv._missing(dejavu, "") == ""


def test_glyph_coverage_of_a_built_font(tmp_path: Path):
    font = ImageFont.truetype(str(build_font(tmp_path / "t.ttf", "ab 太")), 16)
    assert pv._missing(font, "ab太空c") == "空c"


@needs_fontconfig
def test_fontconfig_finds_the_font_that_draws_the_class_names(fonts: Path, space_folder: Path, tmp_path: Path):
    shutil.copy(MPL_FONTS / "DejaVuSans.ttf", fonts)
    built = build_font(fonts / "cjk.ttf", CAPTION_CHARS, family="Test Serif CJK")
    assert pv.find_font(["0123456789: class", "cat", "太空"]) == pv.CaptionFont(str(built), 0, "")
    assert pv.find_font(["cat"]).path == str(fonts / "DejaVuSans.ttf")  # regular sans first
    result = pv.preview(pv_dataset(space_folder), tmp_path / "grid.png", n=6)
    assert result.hint is None and result.undrawn == () and result.font.path == str(built)
    assert result.samples == 6 and Image.open(result.path).size == (8 * 160, 160 + 17 + 6)
    expected = Image.new("L", (160, 23), 32)
    ImageDraw.Draw(expected).text((4, 2), "3: 太空", fill=255, font=ImageFont.truetype(str(built), 17))
    sheet = np.asarray(Image.open(result.path).convert("L"))
    np.testing.assert_array_equal(sheet[160 : 160 + 23, 3 * 160 : 4 * 160], np.asarray(expected))


def pv_dataset(root: Path):
    from datakit import open_dataset

    return open_dataset(root)


@needs_fontconfig
def test_no_font_for_the_names_captions_numbers_and_says_what_to_install(
    fonts: Path, space_folder: Path, tmp_path: Path, capsys, monkeypatch
):
    shutil.copy(MPL_FONTS / "DejaVuSans.ttf", fonts)
    shutil.copy(MPL_FONTS / "LastResortHE-Regular.ttf", fonts)  # "covers" everything with placeholder boxes
    monkeypatch.setattr(sys, "platform", "linux")
    chosen = pv.find_font(["0123456789: class", "cat", "太空"])
    assert chosen == pv.CaptionFont(str(fonts / "DejaVuSans.ttf"), 0, "太空")
    result = pv.preview(pv_dataset(space_folder), tmp_path / "a.png")
    assert result.undrawn == ("太空",) and result.hint == HINT
    # the caption of a 太空 sample is "class 1", drawn with the chosen font
    sheet = np.asarray(Image.open(result.path).convert("L"))
    face = ImageFont.truetype(chosen.path, 17)
    expected = Image.new("L", (160, 23), 32)
    ImageDraw.Draw(expected).text((4, 2), "3: class 1", fill=255, font=face)
    np.testing.assert_array_equal(sheet[160 : 160 + 23, 3 * 160 : 4 * 160], np.asarray(expected))
    assert main(["preview", str(space_folder), "--out", str(tmp_path / "b.png")]) == 0
    out, err = capsys.readouterr()
    assert err == f"datakit preview: {HINT}\n"
    assert out == f"wrote 6 of 6 samples, as decoded, to {tmp_path / 'b.png'}; classes: 0 cat, 1 太空\n"
    # a font file given that lacks them (the attack: the hint said to pass --font FILE, which the user just did)
    given = fonts / "DejaVuSans.ttf"
    assert main(["preview", str(space_folder), "--out", str(tmp_path / "c.png"), "--font", str(given)]) == 0
    assert capsys.readouterr().err == (f"datakit preview: {given} cannot draw '太空': captions show class numbers; "
                                       "pass --font FILE of a font that has them\n")  # fmt: skip


@needs_fontconfig
def test_font_option_forces_a_file(fonts: Path, space_folder: Path, tmp_path: Path, capsys):
    shutil.copy(MPL_FONTS / "DejaVuSans.ttf", fonts)
    built = build_font(tmp_path / "elsewhere" / "mine.ttf", CAPTION_CHARS)
    out = tmp_path / "c.png"
    assert main(["preview", str(space_folder), "--out", str(out), "--font", str(built)]) == 0
    assert capsys.readouterr().err == ""
    assert (
        main(["preview", str(space_folder), "--out", str(tmp_path / "d.png"), "--font", str(tmp_path / "no.ttf")]) == 2
    )
    assert capsys.readouterr().err == f"datakit preview: error: {tmp_path / 'no.ttf'}: no such font file\n"
    assert main(["preview", str(space_folder), "--out", str(tmp_path / "d.png"), "--font", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"datakit preview: error: {tmp_path}: a folder, not a font file\n"
    (tmp_path / "bad.ttf").write_bytes(b"not a font")
    assert (
        main(["preview", str(space_folder), "--out", str(tmp_path / "e.png"), "--font", str(tmp_path / "bad.ttf")]) == 2
    )
    assert capsys.readouterr().err == (
        f"datakit preview: error: {tmp_path / 'bad.ttf'}: not a font Pillow can open (TrueType, OpenType, a collection)\n"
    )
    assert not (tmp_path / "d.png").exists() and not (tmp_path / "e.png").exists()


def test_platform_fonts_are_used_without_fontconfig(tmp_path: Path, monkeypatch):
    built = build_font(tmp_path / "msyh.ttf", CAPTION_CHARS)
    monkeypatch.setattr(pv, "_fontconfig", lambda chars: iter(()))
    monkeypatch.setattr(pv, "_matplotlib", lambda: iter(()))
    monkeypatch.setattr(pv, "PLATFORM_FONTS", (str(tmp_path / "absent.ttc"), str(built)))
    pv._find.cache_clear()
    try:
        assert pv.find_font(["1: 太空"]) == pv.CaptionFont(str(built), 0, "")
        monkeypatch.setattr(pv, "PLATFORM_FONTS", ())
        pv._find.cache_clear()
        assert pv.find_font(["1: 太空"]) == pv.CaptionFont(None, 0, "太空")  # Pillow's built-in font
    finally:
        pv._find.cache_clear()


def test_hint_names_the_package_for_the_script():
    assert pv.font_hint("太空", "linux") == HINT
    assert pv.font_hint("ねこ", "linux").endswith(
        "(on Debian/Ubuntu: sudo apt install fonts-noto-cjk), or pass --font FILE"
    )
    assert pv.font_hint("قطة", "linux") == (
        "no installed font can draw 'قطة': captions show class numbers; install a font that has them "
        "(on Debian/Ubuntu: sudo apt install fonts-noto-core), or pass --font FILE"
    )
    assert pv.font_hint("太空", "darwin") == (
        "no installed font can draw '太空': captions show class numbers; install a font that has them, or pass --font FILE"
    )


def test_long_captions_are_cut_to_the_tile():
    face = ImageFont.truetype(str(MPL_FONTS / "DejaVuSans.ttf"), 17)
    text = pv._fit("12: " + "a_very_long_class_name" * 4, face, 152)
    assert text.startswith("12: a_very_long") and text.endswith("…") and face.getlength(text) <= 152
    assert pv._fit("12: cat", face, 152) == "12: cat"


def test_eval_resize_scales_with_the_crop():
    assert eval_pipeline(224).resize.size == 256
    assert eval_pipeline(128).resize.size == 146
    assert eval_pipeline(384).resize.size == 438
    assert eval_pipeline((160, 128)).resize.size == 182
    assert eval_pipeline(128, 200).resize.size == 200


def test_preview_eval_at_128_shows_the_whole_centre_not_a_zoom(tmp_path: Path):
    """A horizontal ramp: the left edge of the centre crop must come from near the image's left edge."""
    ramp = np.repeat(np.linspace(0, 255, 292).astype(np.uint8)[None, :, None], 292, axis=0).repeat(3, axis=2)
    (tmp_path / "r" / "a").mkdir(parents=True)
    imwrite(tmp_path / "r" / "a" / "ramp.png", ramp, mode="rgb")
    from datakit import open_dataset

    ds = open_dataset(tmp_path / "r", transform=eval_pipeline(128, normalize=False))
    img = ds[0][0].numpy()
    assert img.shape == (3, 128, 128)
    # shorter side 292 -> 146, crop offset 9: columns 18..273 of 292, values 16..239
    assert abs(int(img[0, :, 0].mean()) - 16) <= 2 and abs(int(img[0, :, -1].mean()) - 239) <= 2


def test_import_paths_in_any_order(space_folder: Path, tmp_path: Path):
    code = (
        "import sys\n"
        "from datakit import open_dataset\n"
        "ds = open_dataset(sys.argv[1])\n"
        "{first}\n"
        "from datakit import preview\n"
        "from datakit.check import preview as old, PREVIEW_EXTENSIONS\n"
        "print(preview(ds, sys.argv[2] + '/a.png', n=2).samples, old(ds, sys.argv[2] + '/b.png', n=3).samples,"
        " PREVIEW_EXTENSIONS[0])\n"
    )
    for k, first in enumerate(("import datakit.preview", "pass")):
        out = tmp_path / f"o{k}"
        out.mkdir()
        proc = subprocess.run([sys.executable, "-c", code.format(first=first), str(space_folder), str(out)],
                              capture_output=True, text=True)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == "2 3 .png\n"


def test_a_bgr_dataset_is_shown_in_the_order_its_samples_come_in(tmp_path: Path):
    # The attack: a mode="bgr" dataset whose transform already gives RGB tensors (ToTensor(bgr=True)) was shown with
    # its channels swapped: the model got red, the sheet showed blue.
    from datakit.datasets import open_dataset
    from datakit.io import imread
    from datakit.transforms import Compose, ToTensor, eval_pipeline, train_pipeline

    red = np.zeros((64, 64, 3), np.uint8)
    red[..., 0] = 255  # RGB
    (tmp_path / "data" / "red").mkdir(parents=True)
    imwrite(tmp_path / "data" / "red" / "r.png", red, mode="rgb")
    # datakit's pipelines keep a mode="bgr" dataset's order (BGR tensors, for a model trained on BGR): shown as the
    # colours they are, as the arrays of that dataset are, where the sheet showed the red image blue
    pipelines = [train_pipeline(32), eval_pipeline(32, resize=32), Compose([np.ascontiguousarray, train_pipeline(32)])]
    cases = [(ToTensor(bgr=True), [255, 0, 0]), (None, [255, 0, 0]), (ToTensor(), [0, 0, 255])]
    for transform, shown in cases + [(p, [255, 0, 0]) for p in pipelines]:
        out = tmp_path / f"grid{len(list(tmp_path.glob('grid*')))}.png"
        pv.preview(open_dataset(tmp_path / "data", mode="bgr", transform=transform), out, n=1)
        assert imread(out, "rgb")[40, 80].tolist() == shown  # ToTensor() on BGR data: the swap shows


def test_a_16_bit_dataset_read_unchanged_is_shown_on_the_8_bit_scale(tmp_path: Path):
    # The attack: preview of a mode="unchanged" 16-bit dataset raised Pillow's "Cannot handle this data type".
    from datakit.datasets import open_dataset
    from datakit.io import imread

    (tmp_path / "data" / "gray").mkdir(parents=True)
    imwrite(tmp_path / "data" / "gray" / "a.png", np.full((64, 64), 40000, np.uint16))
    pv.preview(open_dataset(tmp_path / "data", mode="unchanged"), tmp_path / "grid.png", n=1)
    assert imread(tmp_path / "grid.png", "rgb")[40, 80].tolist() == [40000 >> 8] * 3


def test_an_unchanged_mode_dataset_is_shown_in_its_colours(tmp_path: Path):
    # the attack: open_dataset(..., mode="unchanged") gives BGR(A) arrays, and the contact sheet showed a red image
    # blue (only mode="bgr" was turned to RGB)
    from datakit import open_dataset

    (tmp_path / "src" / "c").mkdir(parents=True)
    red = np.zeros((64, 64, 3), np.uint8)
    red[..., 0] = 255
    Image.fromarray(red).save(tmp_path / "src" / "c" / "a.png")
    Image.fromarray(np.dstack([red, np.full((64, 64), 255, np.uint8)]), "RGBA").save(tmp_path / "src" / "c" / "b.png")
    for mode in ("unchanged", "bgr", "rgb"):
        out = tmp_path / f"{mode}.png"
        pv.preview(open_dataset(tmp_path / "src", mode=mode), out, n=2, overwrite=True)
        sheet = np.asarray(Image.open(out).convert("RGB"))
        tiles = [sheet[60, x] for x in range(sheet.shape[1]) if (sheet[60, x] != 32).any()]
        assert tiles and all(tuple(t) == (255, 0, 0) for t in tiles), mode


def test_a_float_array_on_the_0_1_scale_is_shown_as_a_tensor_would_be():
    # the attack: a transform returning img.astype(np.float32) / 255 (HWC) gave black tiles: the array was cast as
    # 0-255, every pixel 0, while the same pixels as a CHW tensor were shown right
    import torch

    from datakit.preview import _to_hwc_uint8

    img = np.random.default_rng(0).integers(0, 256, (6, 5, 3)).astype(np.uint8)
    as_float = img.astype(np.float32) / 255
    assert np.array_equal(_to_hwc_uint8(as_float), img)
    assert np.array_equal(_to_hwc_uint8(torch.from_numpy(as_float).permute(2, 0, 1)), img)
    assert np.array_equal(_to_hwc_uint8(img.astype(np.float32)), img)  # float on the 0-255 scale: as it is


def test_preview_of_a_subset_a_concat_or_a_wrapper_names_the_classes_of_what_they_read(tmp_path: Path):
    # the attack: preview(Subset(ds)), of a ConcatDataset or of a dataset of the caller's died with a TypeError (and
    # then an AttributeError); a target made a tensor (target_transform=torch.tensor) was captioned 'tensor(0)'
    import torch

    from datakit.datasets import open_dataset

    for cls in ("cat", "dog"):
        (tmp_path / "data" / cls).mkdir(parents=True)
        for k in range(2):
            imwrite(tmp_path / "data" / cls / f"{k}.png", synthetic_image(20, 20, seed=k), mode="rgb")
    ds = open_dataset(tmp_path / "data")

    Wrap = PassThrough

    shown = {}
    real = pv._what_it_shows
    for name, wrapped in (("subset", torch.utils.data.Subset(ds, [1, 2])), ("concat", ds + ds), ("wrap", Wrap(ds))):
        result = pv.preview(wrapped, tmp_path / f"{name}.png", n=2)
        shown[name] = (result.samples, real(wrapped)[:2])
    # a dataset of the caller's may map the targets: captioned 'class N' unless it names its classes itself
    assert shown == {"subset": (2, (["cat", "dog"], "rgb")), "concat": (2, (["cat", "dog"], "rgb")),
                     "wrap": (2, ([], "rgb"))}  # fmt: skip
    named = Wrap(ds)
    named.classes = ["no fur", "fur"]
    assert real(named)[:2] == (["no fur", "fur"], "rgb")
    assert pv._is_index(torch.tensor(1)) and pv._is_index(np.int64(1)) and pv._is_index(3)
    assert not any(map(pv._is_index, (torch.tensor(1.0), torch.tensor([1]), True, torch.tensor(True), "1")))
    with pytest.raises(pv.UsageError, match="inside the source folder"):
        pv.preview(torch.utils.data.Subset(ds, [0]), tmp_path / "data" / "cat" / "grid.png")
