"""The JPEG region decoder (datakit._jpegregion): the crop's pixels, exactly, for less work."""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

import datakit.io as dio
from datakit.errors import ImageDecodeError
from datakit.io import decode_image, decode_jpeg_region, encode_image, region_decoder_available
from datakit.testing import synthetic_image
from datakit.transforms import train_pipeline

ROOT = Path(__file__).resolve().parents[1]
# the extension builds where libjpeg-turbo's headers and its link library (both in the -dev package) are
_LIBDIRS = ("/usr/lib", "/usr/lib64", "/usr/local/lib", f"/usr/lib/{sysconfig.get_config_var('MULTIARCH')}")
HEADERS = Path("/usr/include/jpeglib.h").exists() and any(Path(d, "libjpeg.so").exists() for d in _LIBDIRS)
needs_region = pytest.mark.skipif(not region_decoder_available(), reason="datakit._jpegregion was not built")

SAMPLING = {
    "444": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444,
    "422": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_422,
    "420": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420,
    "411": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_411,
    "440": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_440,
}


def _photo(h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    small = (rng.random((h // 8 + 1, w // 8 + 1, 3)) * 255).astype(np.uint8)
    img = cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC).astype(np.int16)
    return np.clip(img + rng.integers(-20, 20, img.shape), 0, 255).astype(np.uint8)


def _jpeg(img: np.ndarray, sampling: str, progressive: bool = False, restart: int = 0) -> bytes:
    params = [cv2.IMWRITE_JPEG_QUALITY, 90, cv2.IMWRITE_JPEG_SAMPLING_FACTOR, SAMPLING[sampling]]
    params += [cv2.IMWRITE_JPEG_PROGRESSIVE, int(progressive), cv2.IMWRITE_JPEG_RST_INTERVAL, restart]
    return cv2.imencode(".jpg", img, params)[1].tobytes()


def _whole(data: bytes, mode: str, f: int, sh: int, sw: int) -> np.ndarray:
    """The whole image at 1/f as the region decoder's libjpeg decodes it: OpenCV's decode where the two
    agree (the system libjpeg-turbo 2.1 and OpenCV's bundled 3.1 do). Another build (the region decoder linked to Pillow's,
    say) may round 4:4:0 upsampling otherwise, by at most 2 levels: crops are then compared with the
    region decoder's own whole image, still exactly."""
    whole = decode_image(data, mode, max_size=max(sh, sw) if f > 1 else None)
    assert whole.shape[:2] == (sh, sw)
    own = decode_jpeg_region(data, mode, f, (0, 0, sh, sw))
    if not np.array_equal(own, whole):
        assert int(np.abs(own.astype(np.int16) - whole).max()) <= 2, (mode, f)
    return own


def _system_header(name: str) -> Path:
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    return next(p for p in (Path("/usr/include", name), Path("/usr/include", multiarch, name)) if p.is_file())


def _compile_against(api: int, folder: Path, source: Path) -> subprocess.CompletedProcess:
    """Compiles the extension (syntax and types, no code) against this system's libjpeg headers declaring the
    libjpeg API of version ``api``, as libjpeg-turbo's jconfig.h does when it is built for that API."""
    for name in ("jpeglib.h", "jmorecfg.h", "jerror.h", "jconfig.h"):
        shutil.copy(_system_header(name), folder / name)
    config = folder / "jconfig.h"
    text, n = re.subn(r"#define JPEG_LIB_VERSION\s+\d+", f"#define JPEG_LIB_VERSION {api}", config.read_text())
    assert n == 1
    config.write_text(text)
    cc = shutil.which("cc") or shutil.which("gcc")
    include = sysconfig.get_paths()["include"]
    return subprocess.run(
        [cc, "-fsyntax-only", f"-I{folder}", f"-I{include}", str(source)], capture_output=True, text=True
    )


@pytest.mark.parametrize("api", [62, 80])
def test_the_region_decoder_compiles_against_the_libjpeg_6b_and_8_apis(tmp_path: Path, api: int):
    # The attack: Ubuntu's libjpeg-turbo8-dev declares the libjpeg 8 API (JPEG_LIB_VERSION 80), where libjpeg 6b's
    # min_DCT_scaled_size is two fields, one a direction. The build failed there and, the extension being optional,
    # pip installed datakit without its region decoder, slower, without a word.
    if not HEADERS or not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no libjpeg-turbo headers or no C compiler")
    proc = _compile_against(api, tmp_path, ROOT / "datakit" / "_jpegregion.c")
    assert proc.returncode == 0, proc.stderr[-3000:]


_DOCTOR_SAYS = r"""
import sys
import datakit, datakit.io as dio
from datakit.doctor import doctor
assert datakit.__file__.startswith(sys.argv[1]), datakit.__file__
(found,) = [f for f in doctor(num_workers=1).findings if f.check == "jpeg-region"]
print(dio.region_decoder_available(), found.status, found.detail, sep="\n")
"""


def test_an_extension_that_cannot_decode_here_is_not_used_and_doctor_says_why(tmp_path: Path):
    # The attacks: the extension built against headers of the libjpeg 8 API and run on libjpeg 6b's library
    # ("Wrong JPEG library version" on every decode, each sample failing over to the whole image), and one linked to
    # libjpeg.so.8 installed where there is none (a wheel built elsewhere): doctor said "built" for the first and "not
    # built (no C compiler or no libjpeg-turbo headers)" for the second, whose reinstall would change nothing.
    cc = shutil.which("cc") or shutil.which("gcc")
    if not HEADERS or not cc:
        pytest.skip("no libjpeg-turbo headers or no C compiler")
    include = sysconfig.get_paths()["include"]
    so_name = "_jpegregion" + sysconfig.get_config_var("EXT_SUFFIX")
    headers, stub = tmp_path / "api", tmp_path / "stub"
    headers.mkdir()
    stub.mkdir()
    system = int(re.search(r"#define JPEG_LIB_VERSION\s+(\d+)", _system_header("jconfig.h").read_text()).group(1))
    other = 62 if system >= 70 else 80  # headers of the other API than the library's
    assert _compile_against(other, headers, ROOT / "datakit" / "_jpegregion.c").returncode == 0
    (stub / "s.c").write_text("int stub;\n")
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libjpeg.so.8", "-o", str(stub / "libjpeg.so"),
                    str(stub / "s.c")], check=True)  # fmt: skip
    # and a binary of an older source, which a wheel built where an earlier build/ held it ships when the new source
    # fails to compile: it offered the functions looked for, and decoded
    older = tmp_path / "older.c"
    older.write_text(re.sub(r'#define DATAKIT_REGION_SOURCE "\w+"', '#define DATAKIT_REGION_SOURCE "0123456789ab"',
                            (ROOT / "datakit" / "_jpegregion.c").read_text()))  # fmt: skip
    builds = {
        "other API": [f"-I{headers}", "-ljpeg"],
        "library gone": [f"-L{stub}", "-Wl,--no-as-needed", "-ljpeg"],
        "older source": ["-ljpeg"],
    }
    said = {}
    for what, flags in builds.items():
        pkg = tmp_path / what.replace(" ", "-")
        source = older if what == "older source" else ROOT / "datakit" / "_jpegregion.c"
        shutil.copytree(ROOT / "datakit", pkg / "datakit", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
        subprocess.run([cc, "-shared", "-fPIC", "-O0", f"-I{include}", *flags[:-1], str(source), flags[-1], "-lm",
                        "-o", str(pkg / "datakit" / so_name)], check=True)  # fmt: skip
        if what == "library gone":
            shutil.rmtree(stub)
        env = {**os.environ, "PYTHONPATH": str(pkg)}
        proc = subprocess.run([sys.executable, "-c", _DOCTOR_SAYS, str(pkg)], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=120)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        said[what] = proc.stdout.splitlines()
    tail = "): train_pipeline decodes whole images at the crop's scale, about 1.3x slower"
    assert said["other API"] == ["False", "warn", "JPEG region decoder built but not usable here (ValueError: Wrong JPEG "
                                 f"library version: library is {system}, caller expects {other}" + tail]  # fmt: skip
    assert said["library gone"] == ["False", "warn", "JPEG region decoder built but not usable here (libjpeg.so.8: "
                                    "cannot open shared object file: No such file or directory" + tail]  # fmt: skip
    assert said["older source"] == ["False", "warn", "JPEG region decoder not used (built from another version of its "
                                    f"source (0123456789ab, this datakit's is {dio._REGION_SOURCE}): install datakit "
                                    "again, without an earlier build/ folder" + tail]  # fmt: skip


def test_the_region_decoder_source_carries_its_own_stamp():
    # the stamp that tells a binary of another source from this one's: the SHA-256 of the source without its line;
    # changing the C source means setting both to the new value this test gives
    text = (ROOT / "datakit" / "_jpegregion.c").read_text()
    (stamp,) = re.findall(r'^#define DATAKIT_REGION_SOURCE "(\w+)"$', text, re.M)
    body = "".join(
        line for line in text.splitlines(keepends=True) if not line.startswith("#define DATAKIT_REGION_SOURCE ")
    )
    digest = hashlib.sha256(body.encode()).hexdigest()[:12]
    assert (stamp, dio._REGION_SOURCE) == (digest, digest)
    if region_decoder_available():
        from datakit import _jpegregion

        built = _jpegregion.SOURCE
        assert built == digest  # (the binary built here, from this source)


def test_the_region_decoder_is_built_where_libjpeg_turbo_headers_are():
    if not HEADERS:
        pytest.skip("no libjpeg-turbo headers and libjpeg.so: the package installs without the region decoder")
    assert region_decoder_available()
    from datakit import _jpegregion

    assert _jpegregion.LIBJPEG_VERSION >= 62


@needs_region
@pytest.mark.parametrize("sampling", list(SAMPLING))
@pytest.mark.parametrize("progressive", [False, True])
def test_region_equals_the_whole_image_decoded_then_cropped(sampling: str, progressive: bool):
    # The attack: boxes on iMCU edges, of one pixel, touching every border, at every scale and
    # chroma subsampling, progressive or not: any upsampling edge effect would show here.
    rng = np.random.default_rng(len(sampling) * 7 + progressive)
    for trial in range(12):
        h, w = (int(v) for v in rng.integers(17, 420, 2))
        data = _jpeg(_photo(h, w, rng), sampling, progressive, restart=3 if trial % 4 == 0 else 0)
        for f in (1, 2, 4, 8):
            sh, sw = -(-h // f), -(-w // f)
            for mode in ("rgb", "bgr", "gray"):
                whole = _whole(data, mode, f, sh, sw)
                y0, x0 = int(rng.integers(0, sh)), int(rng.integers(0, sw))
                boxes = [
                    (y0, x0, int(rng.integers(y0 + 1, sh + 1)), int(rng.integers(x0 + 1, sw + 1))),
                    (0, 0, sh, sw),
                    (sh - 1, sw - 1, sh, sw),
                    (min(16 // f, sh - 1), min(16 // f, sw - 1), sh, min(sw, 16 // f + 1)),
                ]
                for t, left, b, r in boxes:
                    got = decode_jpeg_region(data, mode, f, (t, left, b, r))
                    assert got is not None and got.dtype == np.uint8
                    assert np.array_equal(got, whole[t:b, left:r]), (sampling, progressive, f, mode, (t, left, b, r))


@needs_region
def test_region_of_a_gray_jpeg_in_every_mode():
    gray = cv2.cvtColor(_photo(200, 300, np.random.default_rng(3)), cv2.COLOR_BGR2GRAY)
    data = cv2.imencode(".jpg", gray)[1].tobytes()
    for mode, shape in (("rgb", (50, 70, 3)), ("bgr", (50, 70, 3)), ("gray", (50, 70))):
        got = decode_jpeg_region(data, mode, 2, (10, 20, 60, 90))
        assert got.shape == shape
        assert np.array_equal(got, decode_image(data, mode, max_size=150)[10:60, 20:90])


def _exif_rotated(orientation: int) -> bytes:
    im = Image.fromarray(synthetic_image(120, 200))
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=90, exif=exif.tobytes())
    return buf.getvalue()


@needs_region
def test_images_it_leaves_to_the_whole_image_decoders():
    assert decode_jpeg_region(_exif_rotated(6), "rgb", 1, (0, 0, 10, 10)) is None  # EXIF rotation
    assert decode_jpeg_region(_exif_rotated(3), "rgb", 1, (0, 0, 10, 10)) is None
    assert decode_jpeg_region(_exif_rotated(1), "rgb", 1, (0, 0, 10, 10)).shape == (10, 10, 3)
    cmyk = io.BytesIO()
    Image.new("CMYK", (40, 30), (10, 20, 30, 40)).save(cmyk, "JPEG")
    assert decode_jpeg_region(cmyk.getvalue(), "rgb", 1, (0, 0, 10, 10)) is None
    png = encode_image(synthetic_image(30, 40), ".png")
    assert decode_jpeg_region(png, "rgb", 1, (0, 0, 10, 10)) is None
    assert decode_jpeg_region(_exif_rotated(1), "unchanged", 1, (0, 0, 10, 10)) is None


@needs_region
def test_bad_jpegs_raise_what_the_whole_image_decoder_raises(tmp_path: Path):
    data = encode_image(synthetic_image(300, 400), ".jpg", 90)
    cut = data[: len(data) // 2]  # a half-copied file: the box lies in the part that is there
    with pytest.raises(ImageDecodeError) as e:
        decode_jpeg_region(cut, "rgb", 1, (0, 0, 8, 8), name="数据/half.jpg")
    assert str(e.value) == "数据/half.jpg: truncated JPEG (no end-of-image marker)"
    damaged = data[:700] + bytes(range(256)) * 8 + data[700 + 2048 :]  # entropy data overwritten, same length
    # libjpeg decodes around the damage, and the whole-image decoder gives that (strict=True would refuse it); the
    # region decoder refuses a crop whose rows it met the damage in (the attack: a file cut in half with its end
    # marker put back trained on crops half gray, on_error="skip" and bad_samples= none the wiser)
    with pytest.raises(ImageDecodeError) as e:
        decode_jpeg_region(damaged, "rgb", 1, (100, 50, 200, 300), name="数据/damaged.jpg")
    assert str(e.value).startswith("数据/damaged.jpg: damaged JPEG data: Corrupt JPEG data: ")
    half = data[: len(data) // 2] + b"\xff\xd9"
    with pytest.raises(ImageDecodeError) as e:
        decode_jpeg_region(half, "rgb", 1, (250, 0, 300, 400), name="half.jpg")
    assert str(e.value) == "half.jpg: damaged JPEG data: Corrupt JPEG data: premature end of data segment"
    top = decode_jpeg_region(half, "rgb", 1, (0, 0, 40, 400))  # rows above the cut: the image's own pixels
    assert np.array_equal(top, decode_image(data, "rgb")[:40])
    header_only = data[:200] + b"\xff\xd9"
    assert decode_jpeg_region(header_only, "rgb", 1, (0, 0, 8, 8)) is None  # no frame: the decoders say why
    big = bytearray(data)
    sof = big.index(b"\xff\xc0")
    big[sof + 5 : sof + 9] = (30000).to_bytes(2, "big") + (30000).to_bytes(2, "big")
    with pytest.raises(ImageDecodeError) as e:
        decode_jpeg_region(bytes(big), "rgb", 8, (0, 0, 8, 8), name="bomb.jpg")
    assert str(e.value).startswith("bomb.jpg: 30000x30000 = 900000000 pixels, over the limit of 89478485")
    with pytest.raises(ValueError) as e:
        decode_jpeg_region(data, "rgb", 2, (0, 0, 151, 10))
    assert str(e.value) == "box (0, 0, 151, 10) is not inside the 200x150 image at 1/2"


@needs_region
def test_pipeline_output_is_the_same_with_or_without_the_region_decoder(monkeypatch):
    rng = np.random.default_rng(9)
    files = [
        _jpeg(_photo(int(h), int(w), rng), sampling, progressive)
        for sampling in SAMPLING
        for progressive in (False, True)
        for h, w in [rng.integers(60, 900, 2)]
    ]
    files.append(_exif_rotated(6))
    pipe = train_pipeline(64)
    for mode in ("rgb", "bgr"):
        torch.manual_seed(1)
        fast = [pipe.from_bytes(d, mode) for d in files]
        monkeypatch.setattr(dio, "_REGION", False)
        torch.manual_seed(1)
        whole = [pipe.from_bytes(d, mode) for d in files]
        monkeypatch.undo()
        assert all(torch.equal(a, b) for a, b in zip(fast, whole))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs a C toolchain to prove the build survives losing it")
def test_the_package_builds_without_a_c_compiler(tmp_path: Path):
    # the attack: a machine with no compiler (or no libjpeg headers): the build must go on without the extension
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "datakit", tmp_path / "datakit", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    env = dict(os.environ, CC="false", LDSHARED="false")
    build = [sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_ext", "--inplace"]
    run = subprocess.run(build, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    # setuptools' words; another build_ext in the environment (scikit-build's) names itself instead
    assert re.search(r'warning: \w+: building extension "datakit._jpegregion" failed', run.stderr), run.stderr
    assert not list((tmp_path / "datakit").glob("_jpegregion*.so"))


@needs_region
def test_a_file_cut_short_with_its_end_marker_put_back_is_a_bad_sample_in_training(tmp_path: Path):
    # the attack: half a JPEG with b"\xff\xd9" appended, trained on with on_error="skip": crops half gray, and
    # bad_samples.json said count 0 (check and pack-lmdb refused the same file)
    from datakit.datasets import open_dataset
    from datakit.errors import SampleError

    (tmp_path / "d" / "a").mkdir(parents=True)
    data = encode_image(synthetic_image(300, 400), ".jpg", 90)
    (tmp_path / "d" / "a" / "cut.jpg").write_bytes(data[: len(data) // 2] + b"\xff\xd9")
    (tmp_path / "d" / "a" / "ok.jpg").write_bytes(data)
    ds = open_dataset(tmp_path / "d", transform=train_pipeline(64, scale=(1.0, 1.0), ratio=(4 / 3, 4 / 3)))
    with pytest.raises(SampleError) as e:
        ds[0]
    assert str(e.value) == (f"sample 0: {tmp_path / 'd' / 'a' / 'cut.jpg'}: damaged JPEG data: Corrupt JPEG data: "
                            "premature end of data segment")  # fmt: skip
    assert tuple(ds[1][0].shape) == (3, 64, 64)


@needs_region
def test_warnings_that_leave_the_pixels_the_images_own_are_no_damage():
    # false positives of the refusal above: a JFIF 2.01 header ("unknown JFIF revision number 2.01") and a
    # progressive file with stray bytes before a marker (cameras write them) were refused as damaged, stopping
    # training on sound images
    buf = io.BytesIO()
    Image.fromarray(synthetic_image(120, 160)).save(buf, "JPEG", quality=90)
    plain = buf.getvalue()
    at = plain.index(b"JFIF\x00") + 5
    jfif201 = plain[:at] + b"\x02\x01" + plain[at + 2 :]
    buf = io.BytesIO()
    Image.fromarray(synthetic_image(120, 160)).save(buf, "JPEG", quality=90, progressive=True)
    prog = buf.getvalue()
    junk = prog[:-2] + bytes(range(1, 241)) + prog[-2:]
    scans = prog.rindex(b"\xff\xda")
    between = prog[:scans] + b"\x00" * 240 + prog[scans:]
    pipe = train_pipeline(64, scale=(1.0, 1.0), ratio=(4 / 3, 4 / 3))
    for clean, odd in ((plain, jfif201), (prog, junk), (prog, between)):
        torch.manual_seed(3)
        want = pipe.from_bytes(clean, "rgb")
        torch.manual_seed(3)
        assert torch.equal(pipe.from_bytes(odd, "rgb"), want)


@needs_region
def test_whole_image_decodes_refuse_damaged_jpeg_data_as_the_crops_do(tmp_path: Path):
    # the attack: the file cut in half with its end marker put back, read by imread, decode_image and the eval
    # pipeline of a dataset: libjpeg filled its lower half with gray and every one of them returned that without a
    # word, while the training pipeline's crops, check and pack-lmdb refused the same file
    from datakit.datasets import open_dataset
    from datakit.errors import SampleError
    from datakit.io import imread
    from datakit.transforms import eval_pipeline

    data = encode_image(synthetic_image(300, 400), ".jpg", 90)
    half = data[: len(data) // 2] + b"\xff\xd9"
    (tmp_path / "d" / "a").mkdir(parents=True)
    cut = tmp_path / "d" / "a" / "a半.jpg"  # first, before ok.jpg
    cut.write_bytes(half)
    (tmp_path / "d" / "a" / "ok.jpg").write_bytes(data)
    said = f"{cut}: damaged JPEG data: Corrupt JPEG data: premature end of data segment"
    for mode in ("rgb", "bgr", "gray", "unchanged"):
        for max_size in (None, 200, 50):
            with pytest.raises(ImageDecodeError) as e:
                imread(cut, mode, max_size)
            assert str(e.value) == said
    with pytest.raises(ImageDecodeError) as e:
        decode_image(half, "rgb", name="半.jpg")
    assert str(e.value) == "半.jpg: damaged JPEG data: Corrupt JPEG data: premature end of data segment"
    ds = open_dataset(tmp_path / "d", transform=eval_pipeline(64))
    with pytest.raises(SampleError) as e:
        ds[0]
    assert str(e.value) == f"sample 0: {said}"
    assert tuple(ds[1][0].shape) == (3, 64, 64)
    # strict keeps its decoders, which refuse any warning
    with pytest.raises(ImageDecodeError, match="^<bytes>: damaged JPEG data: Corrupt JPEG data: premature end"):
        decode_image(half, "rgb", strict=True)


@needs_region
def test_whole_image_decodes_give_the_pixels_of_torchvision_and_opencv():
    rng = np.random.default_rng(4)
    gray = cv2.imencode(".jpg", _photo(123, 201, rng)[:, :, 0], [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()
    files = [_jpeg(_photo(157, 230, rng), s, p) for s in ("444", "422", "420") for p in (False, True)] + [gray]
    for data in files:
        buf = np.frombuffer(data, np.uint8)
        assert np.array_equal(dio._compiled_jpeg(data, "rgb", 1, None), dio._torchvision_jpeg(data, "rgb"))
        assert np.array_equal(dio._compiled_jpeg(data, "gray", 1, None), dio._torchvision_jpeg(data, "gray"))
        for f, flag in ((1, cv2.IMREAD_COLOR), (2, cv2.IMREAD_REDUCED_COLOR_2), (4, cv2.IMREAD_REDUCED_COLOR_4),
                        (8, cv2.IMREAD_REDUCED_COLOR_8)):  # fmt: skip
            want = cv2.imdecode(buf, flag | cv2.IMREAD_IGNORE_ORIENTATION)
            assert np.array_equal(dio._compiled_jpeg(data, "bgr", f, None), want), f
            got = dio._compiled_jpeg(data, "rgb", f, None)
            assert got.flags.c_contiguous and np.array_equal(got, want[:, :, ::-1])
        assert np.array_equal(decode_image(data, "gray", 60), cv2.imdecode(buf, cv2.IMREAD_REDUCED_GRAYSCALE_2))
        # mode "unchanged": the colour (BGR) or gray the file holds, as OpenCV reads it
        h, w = (123, 201) if data is gray else (157, 230)
        for f in (1, 2, 8):
            want = cv2.imdecode(buf, dio._cv2_flags("unchanged", "JPEG", f, 1 if data is gray else 3))
            got = decode_image(data, "unchanged", -(-w // f) if f > 1 else None)
            assert got.shape == want.shape == (-(-h // f), -(-w // f), *(() if data is gray else (3,))), f
            assert np.array_equal(got, want), f
    # what it leaves to the other decoders: CMYK
    cmyk = io.BytesIO()
    Image.fromarray(synthetic_image(40, 60)).convert("CMYK").save(cmyk, "JPEG", quality=90)
    assert dio._compiled_jpeg(cmyk.getvalue(), "rgb", 1, None) is None
    assert dio._compiled_jpeg(cmyk.getvalue(), "unchanged", 1, None) is None
    assert decode_image(cmyk.getvalue(), "rgb").shape == (40, 60, 3)


@needs_region
def test_a_progressive_jpeg_cut_short_is_refused_by_every_decode():
    # the attack: a progressive JPEG (what web images often are) cut to 2-60% with its end marker put back: its
    # scans leave coefficients unrefined, which the compiled decoder left to the whole-image decoders before it
    # looked at the damage, and they decoded it around (36% of its rows gray), in imread, eval and training alike
    buf = io.BytesIO()
    Image.fromarray(synthetic_image(300, 400)).save(buf, "JPEG", quality=90, progressive=True)
    data = buf.getvalue()
    for cut in (0.02, 0.3, 0.6, 0.95):
        bad = data[: int(len(data) * cut)] + b"\xff\xd9"
        for mode, max_size in (("rgb", None), ("gray", None), ("bgr", 100)):
            with pytest.raises(ImageDecodeError) as e:
                decode_image(bad, mode, max_size, name="p.jpg")
            assert str(e.value) == "p.jpg: damaged JPEG data: Corrupt JPEG data: premature end of data segment"
        for pipe in (train_pipeline(64), eval_pipeline_64()):
            with pytest.raises(ImageDecodeError, match=r"^<bytes>: damaged JPEG data: Corrupt JPEG data: premature"):
                pipe.from_bytes(bad, "rgb")
    # a sound progressive file whose scans stop short by design (no damage) still decodes, as before
    assert decode_image(data, "rgb").shape == (300, 400, 3)


def eval_pipeline_64():
    from datakit.transforms import eval_pipeline

    return eval_pipeline(64)


@needs_region
@pytest.mark.skipif(not HEADERS or shutil.which("gcc") is None, reason="needs gcc and libjpeg's headers to encode")
def test_an_arithmetic_coded_jpeg_cut_short_is_refused(tmp_path: Path):
    # the attack: libjpeg says "bad arithmetic code" for an arithmetic-coded scan cut short, a warning the compiled
    # decoder did not count as damage: half the image gray, without a word (no common encoder writes these: a
    # small libjpeg program does)
    (tmp_path / "a.c").write_text(r"""
#include <stdio.h>
#include <stdlib.h>
#include <jpeglib.h>
int main(int argc, char **argv) {
    int w = 400, h = 300, i;
    unsigned char *p = malloc(w * h * 3);
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    FILE *f = fopen(argv[1], "wb");
    srand(1); /* noise: a cut short smooth scan can end in codes that read as valid */
    for (i = 0; i < w * h * 3; i++) p[i] = (unsigned char)((i % 1200) / 5 + rand() % 40);
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = w; c.image_height = h; c.input_components = 3; c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    c.arith_code = TRUE;
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < (unsigned)h) { JSAMPROW r = p + c.next_scanline * w * 3; jpeg_write_scanlines(&c, &r, 1); }
    jpeg_finish_compress(&c);
    fclose(f);
    return 0;
}
""")
    subprocess.run(["gcc", "-o", str(tmp_path / "a"), str(tmp_path / "a.c"), "-ljpeg"], check=True, timeout=120)
    subprocess.run([str(tmp_path / "a"), str(tmp_path / "arith.jpg")], check=True, timeout=60)
    data = (tmp_path / "arith.jpg").read_bytes()
    assert np.array_equal(decode_image(data, "bgr"), cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR))
    cut = data[: len(data) // 2] + b"\xff\xd9"
    for mode, max_size in (("rgb", None), ("gray", None), ("rgb", 100)):
        with pytest.raises(ImageDecodeError) as e:
            decode_image(cut, mode, max_size, name="arith.jpg")
        assert str(e.value) == "arith.jpg: damaged JPEG data: Corrupt JPEG data: bad arithmetic code"


def test_a_stuffed_byte_between_segments_is_no_marker_to_the_header_reader():
    # the attack: b"\xff\x00" and two bytes between header segments (libjpeg skips them as garbage) made the header
    # reader take them for a segment, jump over the real frame header and read one hidden in a comment (100 rows of
    # 300): the image was decoded cut to its top third
    import struct

    buf = io.BytesIO()
    Image.fromarray(synthetic_image(300, 400)).save(buf, "JPEG", quality=90)
    base = buf.getvalue()
    sof = base.index(b"\xff\xc0")
    sos = base.index(b"\xff\xda")
    fake = bytearray(base[sof : sof + 2 + int.from_bytes(base[sof + 2 : sof + 4], "big")])
    fake[5:7] = struct.pack(">H", 100)
    head = base[2:sos]
    com = b"\xff\xfe" + struct.pack(">H", 4 + len(fake)) + b"xx" + bytes(fake)
    raw = base[:2] + b"\xff\x00" + struct.pack(">H", len(head) + 8) + head + com + base[sos:]
    assert dio._jpeg_size(raw) == (300, 400, 3)
    assert decode_image(raw, "rgb").shape == (300, 400, 3)
    assert decode_image(raw, "rgb", 150).shape == (150, 200, 3)
    assert tuple(train_pipeline(64).from_bytes(raw, "rgb").shape) == (3, 64, 64)
