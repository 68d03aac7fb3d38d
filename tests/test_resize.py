"""The compiled bilinear resize (datakit._jpegregion.resize_planes) the pipelines use for crops
shrunk under 2x or enlarged: its integers against a plain NumPy statement of them, its SIMD path
against its C path, its layouts, its refusals, and the pipelines that use it."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from datakit import transforms as T
from datakit.io import decode_image, encode_image
from datakit.testing import bilinear_exact, synthetic_image
from datakit.transforms import RandomResizedCrop, _planes, _resize, train_pipeline

try:
    from datakit._jpegregion import resize_planes as kernel
except ImportError:
    kernel = None
needs_kernel = pytest.mark.skipif(kernel is None, reason="datakit._jpegregion was not built")
# the pipelines take it where its AVX2 path runs (elsewhere OpenCV's resize is the faster one)
taken = pytest.mark.skipif(not T._resize_kernel(), reason="datakit._jpegregion not built or no AVX2")


def _axis(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """First taps and second-tap weights in 1/16384, as the kernel states them."""
    f = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
    i = np.floor(f).astype(np.int64)
    a = f - i
    a[i < 0], i[i < 0] = 0, 0
    q = np.rint(a * 16384).astype(np.int64)
    i[q >= 16384] += 1
    q[q >= 16384] = 0
    last = i >= n_in - 1
    i[last], q[last] = n_in - 1, 0
    return i, q


def _reference(img: np.ndarray, oh: int, ow: int) -> np.ndarray:
    """The kernel's arithmetic in NumPy: across in 1/16384 kept in 1/128 of a level, down in 1/16384."""
    x = img.astype(np.int64)
    if x.ndim == 2:
        x = x[:, :, None]
    sx, ax = _axis(x.shape[1], ow)
    sy, by = _axis(x.shape[0], oh)
    right = np.minimum(sx + 1, x.shape[1] - 1)
    across = (x[:, sx] * (16384 - ax)[None, :, None] + x[:, right] * ax[None, :, None] + 64) >> 7
    below = np.minimum(sy + 1, x.shape[0] - 1)
    down = across[sy] * (16384 - by)[:, None, None] + across[below] * by[:, None, None]
    return ((down + (1 << 20)) >> 21).astype(np.uint8).transpose(2, 0, 1)


_exact = bilinear_exact


def _noise(h: int, w: int, c: int = 3, seed: int = 0) -> np.ndarray:
    shape = (h, w, c) if c > 1 else (h, w)
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


SIZES = [
    ((300, 300), (224, 224)),  # the usual crop
    ((447, 300), (224, 224)),  # just under 2x down
    ((260, 200), (224, 224)),  # down across, up below
    ((100, 150), (224, 224)),  # enlarged
    ((7, 5), (224, 224)),  # tiny: windows wider than the row
    ((1, 1), (3, 5)),
    ((240, 333), (17, 223)),  # outputs that are no multiple of 16
    ((50, 40), (1, 1)),
]


@needs_kernel
@pytest.mark.parametrize("src, out", SIZES)
@pytest.mark.parametrize("channels", [3, 1])
def test_the_kernel_computes_the_stated_integers_on_both_paths(src, out, channels):
    img = _noise(*src, channels)
    want = _reference(img, *out)
    for simd in (True, False):
        got = np.frombuffer(kernel(img, *out, False, simd), np.uint8).reshape(channels, *out)
        np.testing.assert_array_equal(got, want)
        mirrored = np.frombuffer(kernel(img, *out, True, simd), np.uint8).reshape(channels, *out)
        np.testing.assert_array_equal(mirrored, want[:, :, ::-1])


@needs_kernel
def test_the_kernel_is_closer_to_exact_bilinear_than_opencv():
    errors, cv_errors = [], []
    for seed, (src, out) in enumerate(SIZES[:5]):
        img = _noise(*src, 3, seed)
        exact = _exact(img, *out)
        got = np.frombuffer(kernel(img, *out, False), np.uint8).reshape(3, *out)
        errors.append(np.abs(got - exact).max())
        cv = cv2.resize(img, out[::-1], interpolation=cv2.INTER_LINEAR).transpose(2, 0, 1)
        cv_errors.append(np.abs(cv - exact).max())
    assert max(errors) < 0.52 and max(cv_errors) > 0.74
    # the worst found: both weights and the values across rounded the same way as the last rounding
    checker = np.array([[0, 255], [255, 0]], np.uint8)
    got = np.frombuffer(kernel(checker, 66, 115, False), np.uint8).reshape(66, 115)
    assert got[17, 33] == 27 and 0.51 < _exact(checker, 66, 115)[0, 17, 33] - 27 < 0.52
    assert np.abs(got - _exact(checker, 66, 115)[0]).max() < 0.52
    assert kernel(np.full((300, 300, 3), 77, np.uint8), 224, 224, False) == bytearray([77] * 3 * 224 * 224)


@needs_kernel
def test_a_crop_view_with_a_wider_row_gives_the_crops_pixels():
    band = _noise(320, 400)
    crop = band[10:310, 37:337]  # rows 1200 bytes apart, not contiguous
    assert not crop.flags.c_contiguous
    got = np.frombuffer(kernel(crop, 224, 224, False), np.uint8)
    assert got.tobytes() == kernel(np.ascontiguousarray(crop), 224, 224, False)
    np.testing.assert_array_equal(got.reshape(3, 224, 224), _reference(crop, 224, 224))


@needs_kernel
@pytest.mark.parametrize(
    "bad",
    [
        np.zeros((30, 30, 4), np.uint8),  # 4 channels
        np.zeros((30, 30, 3), np.float32),
        np.zeros((30, 30, 3), np.uint8)[:, ::-1],  # mirrored view: pixels not contiguous
        np.zeros((30, 30, 3), np.uint8).transpose(1, 0, 2),  # turned view
        np.zeros((3, 30, 30), np.uint8).transpose(1, 2, 0),  # planes viewed as HWC
        np.zeros((0, 30, 3), np.uint8),
        np.zeros(30, np.uint8),
    ],
)
def test_the_kernel_refuses_layouts_it_does_not_take(bad):
    with pytest.raises(
        ValueError, match=r"^resize_planes: a uint8 array of rows x width \(x 1 or 3 channels\) with contiguous rows$"
    ):
        kernel(bad, 224, 224, False)


@needs_kernel
@pytest.mark.parametrize("out", [(0, 224), (224, -1), (65536, 4)])
def test_the_kernel_refuses_an_output_size_it_cannot_make(out):
    with pytest.raises(
        ValueError, match=rf"^resize_planes: an output of {out[0]} x {out[1]}; each side must be 1-65535$"
    ):
        kernel(np.zeros((30, 30, 3), np.uint8), *out, False)


@taken
def test_resize_keeps_a_one_channel_axis():
    img = _noise(300, 300, 1)[:, :, None]
    out = _resize(img, 224, 224)
    assert out.shape == (224, 224, 1)
    np.testing.assert_array_equal(out[:, :, 0], _reference(img[:, :, 0], 224, 224)[0])
    assert T.Resize(224)(img).shape == (224, 224, 1)
    assert RandomResizedCrop(224)(img).shape == (224, 224, 1)
    assert _resize(img[:, :, 0], 224, 224).shape == (224, 224)


def test_a_one_pixel_wide_crop_flipped_becomes_a_tensor():
    pipe = train_pipeline(1, hflip=1.0)  # every crop mirrored: a 1-wide view with a negative stride
    for seed in range(4):
        torch.manual_seed(seed)
        out = pipe(_noise(40, 30))
        assert out.shape == (3, 1, 1) and out.dtype == torch.uint8


@taken
def test_planes_takes_the_kernel_only_where_it_applies():
    img = _noise(300, 300)
    chw = _planes(img, 224, 224, "bilinear", flip=True)
    assert chw.shape == (3, 224, 224) and chw.is_contiguous() and chw.dtype == torch.uint8
    np.testing.assert_array_equal(chw.numpy(), _reference(img, 224, 224)[:, :, ::-1])
    assert _planes(img, 224, 224, "bicubic") is None
    assert _planes(img, 300, 300, "bilinear") is None  # no resize
    assert _planes(_noise(448, 300), 224, 224, "bilinear") is None  # 2x: torchvision's antialiased filter
    assert _planes(img[:, ::-1], 224, 224, "bilinear") is None  # a mirrored view: OpenCV's path
    gray = _planes(_noise(300, 300, 1), 224, 224, "bilinear")
    assert gray.shape == (1, 224, 224)


@taken
def test_the_array_transforms_and_the_bytes_path_give_the_same_pixels():
    img = synthetic_image(480, 640)
    data = encode_image(img, ".jpg", 95, mode="rgb")
    decoded = decode_image(data, "rgb")
    hwc = _resize(decoded[:300, :400], 224, 224)
    np.testing.assert_array_equal(hwc.transpose(2, 0, 1), _reference(decoded[:300, :400], 224, 224))
    # at full scale (crops of 300-447 px of a 480 x 640 photo) the pipeline resizes the decoded crop
    for seed in range(6):
        pipe = train_pipeline(224, scale=(0.4, 0.6), ratio=(1.0, 1.0))
        torch.manual_seed(seed)
        i, j, ch, cw = RandomResizedCrop(224, (0.4, 0.6), (1.0, 1.0)).get_params(480, 640)
        torch.manual_seed(seed)
        got = pipe.from_bytes(data, "rgb")
        torch.manual_seed(seed)
        via_arrays = pipe(decoded)
        assert torch.equal(got, via_arrays), seed
        plain = torch.from_numpy(_reference(decoded[i : i + ch, j : j + cw], 224, 224))
        assert torch.equal(got, plain) or torch.equal(got, plain.flip(2)), seed


@taken
@pytest.mark.parametrize("normalize", [False, True])
def test_the_eval_pipeline_from_bytes_gives_the_array_paths_pixels(normalize):
    modes = ("rgb", "bgr") if normalize else ("rgb", "gray", "bgr")  # ImageNet's statistics: 3 channels
    for (h, w), mode in zip(((480, 640), (500, 333), (300, 420)), modes):  # decoded at full scale
        data = encode_image(synthetic_image(h, w), ".jpg", 95, mode="rgb")
        pipe = T.eval_pipeline(224, normalize=normalize)
        got = pipe.from_bytes(data, mode)
        want = pipe._whole(decode_image(data, mode), mode)  # the array path, normalised for the dataset's order
        assert got.is_contiguous() and got.shape == want.shape == (1 if mode == "gray" else 3, 224, 224)
        assert torch.equal(got, want), (h, w, mode)
    # smaller than the crop after the resize: padded, by the array path
    small = encode_image(synthetic_image(200, 150), ".jpg", 95, mode="rgb")
    pipe = T.eval_pipeline(224, 224, normalize=normalize)
    assert torch.equal(pipe.from_bytes(small), pipe(decode_image(small, "rgb")))


@pytest.mark.parametrize("ratio", [(10.0, 20.0), (0.05, 0.06)])
def test_a_ratio_far_from_a_thin_images_crops_one_pixel_alike_from_bytes_and_arrays(ratio):
    # The attack: train_pipeline(7, ratio=(10, 20)) on a 300x1 image: the fallback crop's width rounded to 0, and the
    # array path raised OpenCV's "!ssize.empty()" where the bytes path returned a crop.
    for h, w in ((300, 1), (1, 300), (2, 2)):
        img = np.full((h, w, 3), 90, np.uint8)
        data = encode_image(img, ".png")
        pipe = train_pipeline(7, ratio=ratio)
        torch.manual_seed(0)
        a = pipe(img)
        torch.manual_seed(0)
        b = pipe.from_bytes(data)
        assert a.shape == b.shape == (3, 7, 7) and torch.equal(a, b) and int(a.min()) == int(a.max()) == 90
    assert RandomResizedCrop(7, ratio=(10.0, 20.0)).get_params(300, 1) == (149, 0, 1, 1)  # the fallback, not 0 wide
