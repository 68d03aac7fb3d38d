from __future__ import annotations

import math
import warnings
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from conftest import rgb_blocks
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms import v2

from datakit.datasets import open_dataset
from datakit.testing import synthetic_image
from datakit.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    BGRToRGB,
    CenterCrop,
    Compose,
    HWCToCHW,
    Normalize,
    OneHot,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ToDtype,
    ToTensor,
    cv2_to_tensor,
    eval_pipeline,
    tensor_to_cv2,
    tensor_to_pil,
    to_batch,
    train_pipeline,
)


def test_to_tensor_matches_torchvision():
    img = synthetic_image(20, 30)
    ours = ToTensor()(img)
    ref = T.ToTensor()(Image.fromarray(img))
    assert ours.dtype == torch.float32 and ours.shape == (3, 20, 30)
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(ToTensor(bgr=True)(img[..., ::-1].copy()), ref)


def test_layout_and_colour():
    img = rgb_blocks()
    chw = HWCToCHW()(img)
    assert chw.dtype == torch.uint8 and chw.shape == (3, 32, 48) and chw[0, 0, 0] == 255
    assert BGRToRGB()(img)[0, 0].tolist() == [0, 0, 255]
    assert BGRToRGB()(chw)[2, 0, 0] == 255
    bgr = tensor_to_cv2(chw)
    assert bgr[0, 0].tolist() == [0, 0, 255]
    assert torch.equal(cv2_to_tensor(bgr), chw)
    assert tensor_to_pil(chw).getpixel((0, 0)) == (255, 0, 0)
    with pytest.raises(TypeError, match=r"HWCToCHW expects an HxW or HxWxC numpy array .*got \(3, 4, 5, 6\)"):
        HWCToCHW()(np.zeros((3, 4, 5, 6), np.uint8))


@pytest.mark.parametrize("shape", [(3, 5, 7), (4, 3, 5, 7)])
def test_normalize_contiguous_uint8_matches_torchvision(shape):
    x = torch.randint(0, 256, shape, dtype=torch.uint8)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    out = Normalize(mean, std)(x)
    assert out.dtype == torch.float32 and out.shape == x.shape
    torch.testing.assert_close(out, T.Normalize(mean, std)(x.float() / 255))
    caffe_mean, caffe_std = [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]
    torch.testing.assert_close(Normalize(caffe_mean, caffe_std)(x), T.Normalize(caffe_mean, caffe_std)(x.float()))
    assert x.dtype == torch.uint8  # the input is left as it was


def test_normalize_reuses_a_batch_buffer_only_when_nobody_holds_it(monkeypatch):
    import pickle

    from datakit import transforms

    norm, ref = Normalize(IMAGENET_MEAN, IMAGENET_STD), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)
    x, y = (torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8) for _ in range(2))
    expected = ref(x.float() / 255)
    first = norm(x).data_ptr()  # let go of at once
    # the attack: each way a caller can still hold a batch's memory, then more batches than the pool has
    holds = {
        "tensor": lambda t: t,
        "slice": lambda t: t[1:],
        "numpy": lambda t: t.numpy(),
        "view": lambda t: t.view(-1),
        "permuted": lambda t: t.permute(0, 2, 3, 1),
    }
    for name, hold in holds.items():
        a = norm(x)
        assert a.data_ptr() == first, name  # nobody held it: reused
        kept = hold(a)
        del a
        for _ in range(4):
            b = norm(y)
            assert b.data_ptr() != first, name
            torch.testing.assert_close(b, ref(y.float() / 255))
            del b
        assert np.allclose(np.asarray(kept), np.asarray(hold(expected)), atol=1e-6), name
        del kept
    assert len(norm._pool) == 2 and pickle.loads(pickle.dumps(norm))._pool == []
    big = Normalize(IMAGENET_MEAN, IMAGENET_STD)
    monkeypatch.setattr(transforms, "_POOL_BYTES", 2 * x.numel() * 4)  # room for two such batches
    kept = [big(x) for _ in range(4)]
    assert [t.data_ptr() for t in kept[:2]] == [a.ctypes.data for a in big._pool] and len(big._pool) == 2


def test_normalize_scales_and_warns():
    img = synthetic_image(8, 8)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    ref = T.Normalize(mean, std)(T.ToTensor()(Image.fromarray(img)))
    torch.testing.assert_close(Normalize(mean, std)(HWCToCHW()(img)), ref)  # uint8 in, 0-1 stats
    torch.testing.assert_close(Normalize(mean, std)(ToTensor()(img)), ref)
    caffe = Normalize([123.675, 116.28, 103.53], [1, 1, 1])(HWCToCHW()(img))
    torch.testing.assert_close(caffe[0], torch.from_numpy(img[..., 0]).float() - 123.675)
    with pytest.warns(UserWarning, match="0-255 statistics applied to 0-1 data"):
        Normalize([123.675, 116.28, 103.53], [58.4, 57.1, 57.4])(ToTensor()(img))
    with pytest.warns(UserWarning, match="0-1 statistics applied to data above 1"):
        Normalize(mean, std)(HWCToCHW()(img).float())
    with pytest.raises(ValueError, match="Normalize has 3 channel statistics but the input has 1 channels"):
        Normalize(mean, std)(torch.zeros(1, 4, 4))


def test_dtypes_and_one_hot():
    img, target = ToDtype()((HWCToCHW()(synthetic_image(4, 4)), 3))
    assert img.dtype == torch.float32 and img.max() <= 1 and target.dtype == torch.int64
    assert ToDtype()(np.int32(2)).dtype == torch.int64
    for labels in (np.array([1, 2], np.int32), [1, 2]):  # a NumPy array or list of labels was read as an image
        out = ToDtype()(labels)
        assert (out.dtype, out.tolist()) == (torch.int64, [1, 2])
    assert OneHot(4)(2).tolist() == [0, 0, 1, 0]
    assert OneHot(3)(torch.tensor([0, 2])).shape == (2, 3)
    with pytest.raises(ValueError, match=r"OneHot\(3\): label \[3\] outside 0..2"):
        OneHot(3)([3])
    # the attack: Python floats went through float32: 2.9999999 became class 3, 2.00000001 class 2 (ToDtype refuses
    # both), and inf or 1e19 were "label -9223372036854775808 outside 0..4"
    for bad, why in ((2.00000001, "labels must be class indices (integers), got 2.00000001 (float64)"),
                     ([1, 2.9999999], "labels must be class indices (integers), got [1.        2.9999999] (float64)"),
                     (float("inf"), "label inf outside 0..4"), (1e19, "label 1e+19 outside 0..4")):  # fmt: skip
        with pytest.raises(ValueError) as e:
            OneHot(5)(bad)
        assert str(e.value) == f"OneHot(5): {why}"
    assert OneHot(5)(2.0).tolist() == [0, 0, 1, 0, 0]
    # and a NumPy uint64 past int64's range read as -1 ("label -1 outside"); ToDtype gave torch's TypeError or
    # overflow message for it and for 2**63
    with pytest.raises(ValueError) as e:
        OneHot(5)(np.uint64(2**64 - 1))
    assert str(e.value) == "OneHot(5): label 18446744073709551615 outside 0..4"
    for big in (np.uint64(2**64 - 1), 2**63):
        with pytest.raises(ValueError) as e:
            ToDtype()(big)
        assert str(e.value) == (f"ToDtype: label {int(big)} is outside int64's range -9223372036854775808.."
                                "9223372036854775807; it would wrap around, silently")  # fmt: skip
    assert ToDtype()(np.uint64(3)).tolist() == 3 and OneHot(5)(np.uint64(3)).tolist() == [0, 0, 0, 1, 0]


def test_to_batch_any_layout():
    assert to_batch(synthetic_image(5, 6)).shape == (1, 3, 5, 6)
    assert to_batch(np.zeros((5, 6), np.uint8)).shape == (1, 1, 5, 6)
    assert to_batch(torch.zeros(3, 5, 6)).shape == (1, 3, 5, 6)
    assert to_batch(Image.new("RGB", (6, 5))).shape == (1, 3, 5, 6)


def test_resize_crop_flip_keep_uint8():
    img = synthetic_image(100, 200)
    r = Resize(50)(img)
    assert r.shape == (50, 100, 3) and r.dtype == np.uint8
    assert Resize((30, 40))(img).shape == (30, 40, 3)
    c = CenterCrop(60)(img)
    np.testing.assert_array_equal(c, img[20:80, 70:130])
    assert CenterCrop(120)(img).shape == (120, 120, 3)
    torch.manual_seed(0)
    flips = [RandomHorizontalFlip()(img)[0, 0].tolist() == img[0, -1].tolist() for _ in range(2000)]
    assert 0.45 < np.mean(flips) < 0.55


def test_resize_close_to_torchvision_antialias():
    img = synthetic_image(200, 300)
    chw = torch.from_numpy(img).permute(2, 0, 1)
    for size in ([100, 150], [60, 140], [99, 149]):
        ours = torch.from_numpy(Resize(tuple(size))(img)).permute(2, 0, 1)
        # shrunk 2x or more: torchvision's own antialiased filter, the very same pixels
        assert torch.equal(ours, v2.functional.resize(chw, size, antialias=True))
    for view in (img[..., ::-1], img[:, ::-1], img[::-1]):  # flipped views (BGR to RGB): negative strides
        out = Resize((60, 140))(view)
        assert out.flags["C_CONTIGUOUS"]  # HWC in memory, as OpenCV's drawing functions want it
        ref = v2.functional.resize(torch.from_numpy(view.copy()).permute(2, 0, 1), [60, 140], antialias=True)
        assert torch.equal(torch.from_numpy(out).permute(2, 0, 1), ref)
    ours = torch.from_numpy(Resize((150, 200))(img)).permute(2, 0, 1).float()
    ref = v2.functional.resize(chw, [150, 200], antialias=True).float()
    # less than 2x: OpenCV's bilinear, whose support still covers every source pixel
    assert 0 < (ours - ref).abs().mean() < 3.5


def test_train_pipeline_crops_shrunk_2x_or_more_are_torchvision_pixels():
    from datakit.io import decode_image, encode_image

    img = synthetic_image(1000, 1400, seed=3)
    data = encode_image(img, ".jpg", 90)
    pipe = train_pipeline(224, scale=(0.5, 1.0), ratio=(0.75, 0.75))  # tall crops: 2x or more at 1/2 scale
    half = torch.from_numpy(decode_image(data, "rgb", 700)).permute(2, 0, 1)  # the image at 1/2, as decoded
    assert half.shape == (3, 500, 700)
    shrunk = 0
    for seed in range(40):
        torch.manual_seed(seed)
        out = pipe.from_bytes(data, "rgb", "tall.jpg")
        torch.manual_seed(seed)
        i, j, ch, cw = pipe.crop.get_params(1000, 1400)
        flip = torch.rand(1).item() < 0.5
        y0, x0, y1, x1 = i // 2, j // 2, round((i + ch) / 2), round((j + cw) / 2)
        if min(ch, cw) / 2 < 224 or max(y1 - y0, x1 - x0) < 448:
            continue
        ref = v2.functional.resize(half[:, y0:y1, x0:x1], [224, 224], antialias=True)
        assert torch.equal(out, torch.flip(ref, [2]) if flip else ref), seed
        assert out.is_contiguous()
        shrunk += 1
    assert shrunk >= 10


def test_random_resized_crop_same_distribution_as_torchvision():
    ours = RandomResizedCrop(224)
    ref = T.RandomResizedCrop(224)
    torch.manual_seed(1)
    a = np.array([ours.get_params(480, 640) for _ in range(3000)], dtype=float)
    torch.manual_seed(1)
    b = np.array([ref.get_params(torch.empty(3, 480, 640), ref.scale, ref.ratio) for _ in range(3000)], dtype=float)
    np.testing.assert_array_equal(a, b)  # same generator, same draws: identical crops
    area = a[:, 2] * a[:, 3] / (480 * 640)
    assert area.min() >= 0.08 - 1e-3 and area.max() <= 1.0
    ratio = a[:, 3] / a[:, 2]
    assert math.isclose(np.median(np.log(ratio)), 0, abs_tol=0.05)
    out = ours(synthetic_image(480, 640))
    assert out.shape == (224, 224, 3) and out.dtype == np.uint8


def test_compose_with_torchvision_both_ways(class_folder):
    ours_then_tv = Compose([RandomResizedCrop(32), HWCToCHW(), v2.ToDtype(torch.float32, scale=True)])
    img, _ = open_dataset(class_folder, transform=ours_then_tv)[0]
    assert img.shape == (3, 32, 32) and img.dtype == torch.float32
    tv_then_ours = Compose([v2.ToImage(), v2.Resize((16, 16)), Normalize([0.5] * 3, [0.5] * 3)])
    img, _ = open_dataset(class_folder, transform=tv_then_ours)[0]
    assert img.shape == (3, 16, 16) and img.dtype == torch.float32 and img.min() >= -1 and img.max() <= 1


def test_pipelines():
    img = synthetic_image(300, 400)
    out = train_pipeline(224)(img)  # uint8 by default: normalised per batch, on the device
    assert out.shape == (3, 224, 224) and out.dtype == torch.uint8
    assert eval_pipeline(224, 256)(img).dtype == torch.uint8
    ev = eval_pipeline(224, 256, normalize=True)(img)  # the explicit per-sample float path still works
    assert ev.shape == (3, 224, 224) and ev.dtype == torch.float32
    ref = T.Compose(
        [T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = ref(Image.fromarray(img))
    assert (ev - expected).abs().mean() < 0.05


def test_train_pipeline_decodes_only_what_the_crop_needs(tmp_path, monkeypatch):
    import datakit.io as dio
    from datakit.io import encode_image

    if not dio.region_decoder_available():
        pytest.skip("the region decoder is not built")
    data = encode_image(synthetic_image(1600, 2400), ".jpg", 92, mode="rgb")
    pipe = train_pipeline(224, scale=(0.6, 0.6), ratio=(4 / 3, 4 / 3), normalize=False)  # 1753x1315 crops
    torch.manual_seed(5)
    i, j, ch, cw = pipe.crop.get_params(1600, 2400)
    assert (ch, cw) == (1315, 1753)
    regions, wholes = [], []
    real_region, real_whole = dio._decode_region, dio._decode_image
    # (data, height, width, mode, scale, box, name, index): the frame header read once, by the pipeline
    monkeypatch.setattr(dio, "_decode_region", lambda *a, **k: regions.append(a[4:6]) or real_region(*a, **k))
    # (data, mode, max_size, name, ...): the whole image, as stored (decode_image turns that upright)
    monkeypatch.setattr(dio, "_decode_image", lambda *a, **k: wholes.append(a[2]) or real_whole(*a, **k))
    torch.manual_seed(5)
    fast = pipe.from_bytes(data, "rgb", "big.jpg")
    # at 1/4 scale (the crop still 438x328 there), only the crop's rows and columns
    assert regions == [(4, (i // 4, j // 4, round((i + ch) / 4), round((j + cw) / 4)))] and wholes == []
    monkeypatch.setattr(dio, "_REGION", False)  # the region decoder not built: the whole image at 1/4
    torch.manual_seed(5)
    fallback = pipe.from_bytes(data, "rgb", "big.jpg")
    assert wholes == [600]  # 2400 / 4
    assert torch.equal(fast, fallback)
    monkeypatch.undo()
    torch.manual_seed(5)
    slow = pipe(dio.decode_image(data, "rgb"))  # the same draws on the fully decoded image
    assert fast.shape == slow.shape == (3, 224, 224) and fast.dtype == torch.uint8
    assert (fast.float() - slow.float()).abs().mean() < 8


def test_dataset_uses_the_fused_path(class_folder):
    ds = open_dataset(class_folder, transform=train_pipeline(32, normalize=True))
    img, target = ds[0]
    assert img.shape == (3, 32, 32) and img.dtype == torch.float32
    ev = open_dataset(class_folder, transform=eval_pipeline(24, 28))[3]
    assert ev[0].shape == (3, 24, 24)


def test_normalize_true_is_the_uint8_output_normalised():
    img = synthetic_image(300, 400)
    torch.manual_seed(3)
    u8 = train_pipeline(64)(img)
    torch.manual_seed(3)
    f32 = train_pipeline(64, normalize=True)(img)
    assert u8.dtype == torch.uint8 and f32.dtype == torch.float32
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    torch.testing.assert_close(f32, T.Normalize(mean, std)(u8.float() / 255))


@pytest.mark.parametrize("pipeline", ["train", "eval"])
def test_normalize_true_puts_the_default_statistics_in_a_bgr_dataset_s_order(class_folder, pipeline):
    # the attack: train_pipeline(normalize=True) on a mode="bgr" dataset normalised its blue plane with
    # ImageNet's red statistics (create_loader's batches were right); JPEG (decoded at the crop) and PNG alike
    def make(**kw):
        return train_pipeline(24, **kw) if pipeline == "train" else eval_pipeline(24, 28, **kw)

    def sample(mode, i, **kw):
        torch.manual_seed(5)
        return open_dataset(class_folder, transform=make(**kw), mode=mode)[i][0]

    for i in (0, 1):  # a JPEG and a PNG
        rgb_u8, bgr_u8 = sample("rgb", i), sample("bgr", i)
        assert torch.equal(bgr_u8, rgb_u8.flip(0))
        rgb, bgr = sample("rgb", i, normalize=True), sample("bgr", i, normalize=True)
        torch.testing.assert_close(rgb, T.Normalize(IMAGENET_MEAN, IMAGENET_STD)(rgb_u8.float() / 255))
        torch.testing.assert_close(bgr, rgb.flip(0))
        # statistics given as numbers are applied as given, in the dataset's channel order
        given = dict(mean=[0.1, 0.5, 0.9], std=[0.2, 0.3, 0.4])
        torch.testing.assert_close(sample("bgr", i, normalize=True, **given),
                                   T.Normalize(given["mean"], given["std"])(bgr_u8.float() / 255))  # fmt: skip
    # an image given to the pipeline directly has no dataset to say its order: the statistics as they are
    img = synthetic_image(60, 80)
    direct = eval_pipeline(24, 28, normalize=True)(img)
    torch.testing.assert_close(
        direct, T.Normalize(IMAGENET_MEAN, IMAGENET_STD)(eval_pipeline(24, 28)(img).float() / 255)
    )


@pytest.mark.parametrize("pipeline", ["train", "eval"])
def test_an_unchanged_dataset_is_normalised_in_its_bgr_order_by_the_pipeline_and_the_loader(class_folder, pipeline):
    # the attack: mode="unchanged" gives colour images in OpenCV's BGR order, as mode="bgr" does, and both the
    # pipeline's normalize=True and create_loader(device="cpu") normalised them with ImageNet's RGB statistics
    from datakit.loader import create_loader

    def make(**kw):
        return train_pipeline(24, **kw) if pipeline == "train" else eval_pipeline(24, 28, **kw)

    def sample(mode, **kw):
        torch.manual_seed(5)
        return open_dataset(class_folder, transform=make(**kw), mode=mode)[1][0]  # a PNG: decoded whole in both

    u8 = sample("unchanged")
    assert torch.equal(u8, sample("bgr"))
    want = T.Normalize(IMAGENET_MEAN[::-1], IMAGENET_STD[::-1])(u8.float() / 255)
    torch.testing.assert_close(sample("unchanged", normalize=True), want)

    def batch(**kw):
        ds = open_dataset(class_folder, transform=make(), mode="unchanged")
        torch.manual_seed(5)  # a sampler of one's own: the draws go on from the process's seed
        return next(iter(create_loader(ds, 2, train=False, num_workers=0, device="cpu", seed=0, sampler=[1, 1],
                                       **kw)))[0]  # fmt: skip

    pixels = batch(normalize=False)
    assert pixels.dtype == torch.uint8
    torch.testing.assert_close(batch(), T.Normalize(IMAGENET_MEAN[::-1], IMAGENET_STD[::-1])(pixels.float() / 255))


def test_tensor_to_cv2_is_the_inverse_of_cv2_to_tensor_with_alpha_last():
    # the attack: an RGBA tensor came back ABGR (all four channels reversed), not OpenCV's BGRA
    bgra = np.array([[[10, 20, 30, 255], [40, 50, 60, 128]]], dtype=np.uint8)
    rgba = cv2_to_tensor(bgra)
    assert rgba[:, 0, 0].tolist() == [30, 20, 10, 255]
    assert tensor_to_cv2(rgba).tolist() == bgra.tolist()
    assert tensor_to_cv2(rgba.float() / 255).tolist() == bgra.tolist()


def test_a_resize_past_the_pixel_limit_is_refused_not_allocated(monkeypatch, tmp_path: Path):
    # the attack: eval_pipeline(224, 256) on a valid 8000x1 JPEG (25 KB) resized its shorter side to 256 and the other
    # to 2048000 before the centre crop: 3.6 GB of memory; a 60000x1 one was killed by the kernel
    from datakit.errors import ImageDecodeError
    from datakit.io import encode_image

    data = encode_image(np.zeros((8000, 1, 3), np.uint8), ".jpg")
    want = ("1x8000 resized to 256 on its shorter side is 256x2048000 = 524288000 pixels, over the limit of 89478485 "
            "(an image this narrow: leave it out or crop it first; raise the limit with the DATAKIT_MAX_PIXELS "
            "environment variable)")  # fmt: skip
    with pytest.raises(ImageDecodeError) as e:
        eval_pipeline(224, 256).from_bytes(data, name="thin.jpg")
    assert str(e.value) == f"thin.jpg: {want}"
    with pytest.raises(ImageDecodeError) as e:
        Resize(256)(np.zeros((8000, 1, 3), np.uint8))
    assert str(e.value) == want
    # the next attack: as a PNG, or in mode "unchanged", the refusal was a transform step's: never a bad sample to
    # skip (on_error="skip" stopped training), and it named neither the sample nor the file
    from datakit.datasets import open_dataset
    from datakit.errors import SampleError

    png = encode_image(np.zeros((8000, 1, 3), np.uint8), ".png")
    for blob, mode in ((data, "unchanged"), (png, "rgb"), (png, "unchanged")):
        with pytest.raises(ImageDecodeError) as e:
            eval_pipeline(224, 256).from_bytes(blob, mode, name="thin.x")
        assert str(e.value) == f"thin.x: {want}"
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.png").write_bytes(encode_image(np.zeros((30, 40, 3), np.uint8), ".png"))
    (tmp_path / "c" / "thin.png").write_bytes(png)
    with pytest.raises(SampleError) as e:
        open_dataset(tmp_path, transform=eval_pipeline(224, 256))[1]
    assert str(e.value) == f"sample 1: {tmp_path / 'c' / 'thin.png'}: {want}"
    skipping = open_dataset(tmp_path, transform=eval_pipeline(224, 256), on_error="skip", max_bad_fraction=0.5)
    assert tuple(skipping[1][0].shape) == (3, 224, 224) and list(skipping.bad) == [1]
    monkeypatch.setenv("DATAKIT_MAX_PIXELS", "600000000")  # the limit raised: resized as asked
    assert tuple(eval_pipeline(224, 256).from_bytes(data).shape) == (3, 224, 224)


def test_float_tensors_on_another_scale_are_refused_not_clipped():
    # the attack: 0-255 floats (10, 100, 200) came back white, a normalised batch in false colours, without a word
    pixels = torch.tensor([10.0, 100.0, 200.0]).view(3, 1, 1).expand(3, 2, 2)
    with pytest.raises(ValueError) as e:
        tensor_to_pil(pixels)
    assert str(e.value) == (
        "tensor_to_pil: a float tensor's values are 10..200, not on the 0-1 scale: for a normalised batch undo the "
        "normalisation first (x * std + mean, the 0-1 stats), for 0-255 floats divide by 255"
    )
    normalised = T.Normalize(IMAGENET_MEAN, IMAGENET_STD)(pixels / 255)
    with pytest.raises(ValueError, match=r"^tensor_to_cv2: a float tensor's values are -1\.947\.\.1\.681, not on"):
        tensor_to_cv2(normalised)
    # a resize's overshoot past 0 and 1 is clipped, as before
    assert tensor_to_cv2(torch.tensor([-0.1, 0.5, 1.1]).view(3, 1, 1))[0, 0].tolist() == [255, 128, 0]


def test_parts_changed_in_place_hold_for_every_image_jpeg_or_not(class_folder):
    # the attack: ds.transform.augment = [] (augmentations off for the last epochs) held for the JPEGs, decoded
    # through the pipeline's parts, and not for the PNGs, which went through the steps listed when it was built
    ds = open_dataset(class_folder, transform=train_pipeline(24, augment=[v2.RandomErasing(p=1.0, value=0)]))
    assert all(bool((ds[i][0] == 0).all(0).any()) for i in (0, 1))  # a JPEG and a PNG: erased
    ds.transform.augment = []
    for i in (0, 1):
        torch.manual_seed(i)
        assert not bool((ds[i][0] == 0).all(0).any())
    assert [type(t).__name__ for t in ds.transform.transforms] == ["RandomResizedCrop", "RandomHorizontalFlip",
                                                                    "HWCToCHW"]  # fmt: skip
    ev = open_dataset(class_folder, transform=eval_pipeline(24, 28, normalize=True))
    assert ev[0][0].dtype == ev[1][0].dtype == torch.float32
    ev.transform.norm = None
    assert ev[0][0].dtype == ev[1][0].dtype == torch.uint8
    ev.transform.norm = Normalize([0.5] * 3, [0.25] * 3)  # set by hand: applied as given, in a BGR dataset too
    bgr = open_dataset(class_folder, transform=ev.transform, mode="bgr")
    u8 = open_dataset(class_folder, transform=eval_pipeline(24, 28), mode="bgr")
    for i in (0, 1):
        torch.testing.assert_close(bgr[i][0], T.Normalize([0.5] * 3, [0.25] * 3)(u8[i][0].float() / 255))
    with pytest.raises(AttributeError, match=r"^EvalPipeline's steps are its parts: set crop, flip, augment or norm$"):
        ev.transform.transforms = []


AUGMENTS = {
    "TrivialAugmentWide": lambda: v2.TrivialAugmentWide(),
    "RandAugment": lambda: v2.RandAugment(num_ops=3, magnitude=12),
    "AutoAugment": lambda: v2.AutoAugment(v2.AutoAugmentPolicy.IMAGENET),
    "AugMix": lambda: v2.AugMix(),
    "ColorJitter": lambda: v2.ColorJitter(0.4, 0.4, 0.4, 0.1),
    "RandomErasing": lambda: v2.RandomErasing(p=1.0),
    "Trivial+Erasing": lambda: v2.Compose([v2.TrivialAugmentWide(), v2.RandomErasing(p=0.5)]),
}


@pytest.mark.parametrize("name", list(AUGMENTS))
@pytest.mark.parametrize("fused", [False, True])
def test_augment_equals_torchvision_on_the_same_crop(name, fused):
    """The augment stage is torchvision's: the same uint8 crop and the same seed give the same pixels."""
    from datakit.io import encode_image

    img = synthetic_image(360, 480, seed=4)
    data = encode_image(img, ".jpg", 92, mode="rgb")
    plain = train_pipeline(96)
    augmented = train_pipeline(96, augment=[AUGMENTS[name]()])
    reference = AUGMENTS[name]()
    changed = 0
    for seed in range(6):
        torch.manual_seed(seed)
        out = augmented.from_bytes(data, "rgb") if fused else augmented(img)
        torch.manual_seed(seed)
        crop = plain.from_bytes(data, "rgb") if fused else plain(img)
        expected = reference(crop.contiguous())  # torchvision on the same uint8 crop, the random state continuing
        assert out.dtype == torch.uint8 and out.shape == (3, 96, 96)
        assert torch.equal(out, expected), f"seed {seed}"
        changed += not torch.equal(out, crop)
    assert changed >= 3  # the augmentation really ran


def test_augment_in_a_dataset_with_workers(class_folder):
    from datakit.loader import create_loader

    pipe = train_pipeline(32, augment=[v2.TrivialAugmentWide(), v2.RandomErasing(p=0.5)])
    ds = open_dataset(class_folder, transform=pipe)
    for context in ("fork", "spawn"):
        loader = create_loader(ds, 4, num_workers=2, seed=0, multiprocessing_context=context)
        images, labels = next(iter(loader))
        assert images.shape == (4, 3, 32, 32) and images.dtype == torch.uint8 and labels.dtype == torch.int64


def test_augment_refusing_uint8_fails_at_construction_naming_itself():
    with pytest.raises(ValueError, match=r"^augment step Normalize\(.*\) does not accept the uint8 CHW tensor"):
        train_pipeline(224, augment=[v2.Normalize([0.5] * 3, [0.5] * 3)])
    with pytest.raises(TypeError, match="augment must be a list of callables"):
        train_pipeline(224, augment=[3])
    torch.manual_seed(0)
    a = torch.rand(3)
    torch.manual_seed(0)
    train_pipeline(224, augment=v2.RandAugment())  # one transform alone is accepted too
    assert torch.equal(torch.rand(3), a)  # trying the augmentations leaves the random state alone


def test_interpolation_modes():
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.v2 import functional as F

    img = synthetic_image(20, 30)
    chw = torch.from_numpy(img).permute(2, 0, 1)
    up = torch.from_numpy(Resize((40, 60), interpolation="nearest")(img)).permute(2, 0, 1)
    assert torch.equal(up, F.resize(chw, [40, 60], interpolation=InterpolationMode.NEAREST))
    cubic = Resize((40, 60), interpolation=InterpolationMode.BICUBIC)(img).astype(float)
    ref = F.resize(chw, [40, 60], interpolation=InterpolationMode.BICUBIC).permute(1, 2, 0).numpy().astype(float)
    linear = Resize((40, 60))(img).astype(float)
    # OpenCV's cubic (fixed point) is within a few levels of torchvision's, and much closer than bilinear
    assert np.abs(cubic - ref).max() <= 8 and np.abs(cubic - ref).mean() < 0.6 * np.abs(linear - ref).mean()
    with pytest.raises(
        ValueError, match=r"^interpolation must be one of bilinear, bicubic, nearest, nearest-exact, area, box, lanczos"
    ):
        train_pipeline(224, interpolation=InterpolationMode.HAMMING)


@pytest.mark.parametrize("fused", [False, True])
def test_train_pipeline_nearest_only_copies_pixels(fused):
    from torchvision.transforms import InterpolationMode

    from datakit.io import encode_image

    palette = np.array([[255, 0, 0], [0, 0, 255]], np.uint8)
    img = palette[(np.indices((240, 320)).sum(0) // 16) % 2]  # a checkerboard of two colours
    data = encode_image(img, ".png")
    nearest = train_pipeline(48, interpolation=InterpolationMode.NEAREST)
    bilinear = train_pipeline(48, interpolation="bilinear")
    for seed in range(3):
        torch.manual_seed(seed)
        out = nearest.from_bytes(data, "rgb") if fused else nearest(img)
        colours = {tuple(c) for c in out.permute(1, 2, 0).reshape(-1, 3).tolist()}
        assert colours <= {(255, 0, 0), (0, 0, 255)}
    torch.manual_seed(0)
    blended = bilinear(img).permute(1, 2, 0).reshape(-1, 3).tolist()
    assert len({tuple(c) for c in blended}) > 2


@pytest.mark.parametrize("interpolation", ["nearest", "nearest-exact"])
def test_nearest_modes_never_blend_a_jpeg_s_pixels(interpolation):
    # decoding at a reduced DCT scale averages 8x8 blocks: the nearest modes decode at full size
    from datakit.io import decode_image, encode_image

    blocks = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 0]], np.uint8)
    grid = np.random.default_rng(0).integers(0, 4, (43, 43))
    img = np.ascontiguousarray(blocks[grid].repeat(3, 0).repeat(3, 1))  # 129 x 129, 3-pixel blocks
    data = encode_image(img, ".jpg", quality=100)
    full = {tuple(p) for p in decode_image(data, "rgb").reshape(-1, 3)}
    torch.manual_seed(0)
    for pipe in (train_pipeline(16, interpolation=interpolation), eval_pipeline(16, interpolation=interpolation)):
        for _ in range(20):
            out = pipe.from_bytes(data)
            assert out.shape == (3, 16, 16)
            assert {tuple(p) for p in out.permute(1, 2, 0).reshape(-1, 3).tolist()} <= full


def test_statistics_with_a_std_above_1_are_on_the_255_scale():
    # mmdetection's YOLOv3 config: mean 0, std 255, i.e. pixels / 255
    from datakit.loader import create_loader

    x = torch.tensor([0, 51, 255], dtype=torch.uint8).view(1, 3, 1, 1).expand(1, 3, 2, 2).contiguous()
    assert Normalize([0, 0, 0], [255, 255, 255])(x)[0, :, 0, 0].tolist() == [0.0, 0.20000000298023224, 1.0]
    loader = create_loader([(x[0], 0)], 1, train=False, num_workers=0, normalize=([0, 0, 0], [255, 255, 255]))
    assert next(iter(loader))[0][0, :, 0, 0].tolist() == [0.0, 0.20000000298023224, 1.0]
    # a std of 1 with 0-1 means stays on the 0-1 scale, as before
    assert Normalize([0, 0, 0], [1, 1, 1])(x)[0, :, 0, 0].tolist() == [0.0, 0.20000000298023224, 1.0]


@pytest.mark.parametrize("orientation", [1, 3, 5, 6, 7, 8])
def test_an_exif_turned_jpeg_is_cropped_once_at_a_scale_that_holds_the_crop(monkeypatch, orientation):
    # the crop is drawn on the upright sides before decoding: orientations 5-8 swap them
    import io as _io

    import datakit.transforms as dt
    from datakit.io import _exif_turned, decode_image

    im = Image.fromarray(np.random.default_rng(0).integers(0, 256, (700, 1000, 3), dtype=np.uint8))
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = _io.BytesIO()
    im.save(buf, "JPEG", quality=90, exif=exif.tobytes())
    data = buf.getvalue()
    upright = decode_image(data, "rgb").shape[:2]
    assert _exif_turned(data) == (orientation >= 5) and upright == ((1000, 700) if orientation >= 5 else (700, 1000))
    draws, scales = [], []
    get_params = dt.RandomResizedCrop.get_params
    monkeypatch.setattr(
        dt.RandomResizedCrop,
        "get_params",
        lambda self, h, w: draws.append((h, w, get_params(self, h, w))) or draws[-1][2],
    )
    decode_scaled = dt._decode_scaled
    monkeypatch.setattr(dt, "_decode_scaled", lambda *a: scales.append(a[-1]) or decode_scaled(*a))
    import datakit.io as dio

    region = dio._decode_region  # (data, height, width, mode, scale, box, name, index)
    monkeypatch.setattr(dio, "_decode_region", lambda *a, **k: scales.append(a[4]) or region(*a, **k))
    pipe = train_pipeline(112)
    torch.manual_seed(0)
    for _ in range(40):
        draws.clear(), scales.clear()
        assert pipe.from_bytes(data).shape == (3, 112, 112)
        ((h, w, (_, _, ch, cw)),) = draws  # one draw, on the upright sides
        assert (h, w) == upright
        f = scales[-1]  # what the region decoder (upright files) or the whole-image one decoded at
        assert min(ch, cw) / f >= 112 and (f == 8 or min(ch, cw) / (2 * f) < 112)  # the smallest that holds it


def test_crops_are_torchvisions_boxes_on_large_images_too():
    # The attack: ratios drawn in float64 (math.log/math.exp) where torchvision draws in float32:
    # about 1 draw in 2000 on a 4000 x 6000 photo rounded a side one pixel otherwise, moving the box.
    from torchvision.transforms import RandomResizedCrop as TVCrop

    from datakit.transforms import RandomResizedCrop

    crop = RandomResizedCrop(224)
    for seed in (1063, 8241, 8890, *range(300)):
        torch.manual_seed(seed)
        ours = crop.get_params(4000, 6000)
        torch.manual_seed(seed)
        assert ours == tuple(TVCrop.get_params(torch.empty(1, 4000, 6000), (0.08, 1.0), (3 / 4, 4 / 3))), seed


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: train_pipeline(0), "size must be at least 1 pixel a side, got (0, 0)"),
        (lambda: train_pipeline((224, -5)), "size must be at least 1 pixel a side, got (224, -5)"),
        (
            lambda: eval_pipeline(224, 0),
            "resize must be the shorter side in whole pixels >= 1, or (height, width) (None: size * 256 / 224), got 0",
        ),
        (lambda: eval_pipeline(-16), "size must be at least 1 pixel a side, got (-16, -16)"),  # not the resize, -18
        (
            lambda: train_pipeline(16, augment=5),
            "augment must be a list of callables (torchvision v2 transforms), got 5",
        ),
        (
            lambda: train_pipeline(16, augment="flip"),
            "augment must be a list of callables (torchvision v2 transforms), got 'flip'",
        ),
        (
            lambda: train_pipeline(224, ratio=(0, 1)),
            "scale and ratio must be positive and finite, got (0.08, 1.0) and (0, 1)",
        ),
        (
            lambda: train_pipeline(224, scale=(0.0, 1.0)),
            "scale and ratio must be positive and finite, got (0.0, 1.0) and (0.75, 1.3333333333333333)",
        ),
        # the attack: a string meaning "no" is true to Python: normalize="no" normalised, antialias="no" antialiased
        (lambda: eval_pipeline(64, normalize="no"), "normalize must be True or False, got 'no'"),
        (lambda: train_pipeline(64, normalize="false"), "normalize must be True or False, got 'false'"),
        (lambda: eval_pipeline(64, antialias="no"), "antialias must be True or False, got 'no'"),
        # hflip is a probability: 2 and -0.5 were taken, "yes" failed on every sample inside the workers
        *(
            (
                lambda p=p: train_pipeline(64, hflip=p),
                "the flip's probability (hflip=, p=) must be a number in 0..1 "
                f"(0.5: half the images mirrored, 0: none), got {p!r}",
            )
            for p in (2, -0.5, True, "yes", float("nan"))
        ),
        # tracebacks before: 'float' object is not subscriptable, new(): invalid data type 'str', expected str ...
        (lambda: train_pipeline(64, scale=0.5), "scale must be (min, max), two numbers, got 0.5"),
        (lambda: train_pipeline(64, ratio=("3/4", "4/3")), "ratio must be (min, max), two numbers, got ('3/4', '4/3')"),
        (
            lambda: train_pipeline(64, mean="imagenet"),
            "mean must be one number per channel, got 'imagenet' (a preset "
            "such as 'imagenet' goes to create_loader(..., normalize=...))",
        ),
        (lambda: train_pipeline(64, index_cache=5), "index_cache must be a folder's path (or None), got 5"),
    ],
)
def test_bad_pipeline_arguments_are_refused_at_construction(make, message):
    # they built, then failed on the first image inside a worker: ZeroDivisionError, an OpenCV assertion
    with pytest.raises((ValueError, TypeError)) as e:
        make()
    assert str(e.value) == message


def test_a_resize_under_the_crop_warns_that_size_and_resize_look_swapped():
    # the attack: eval_pipeline(256, 224) padded every image with 32 black columns, as CenterCrop does, unsaid
    with pytest.warns(UserWarning) as caught:
        pipe = eval_pipeline(256, 224)
    assert [str(w.message) for w in caught] == [
        "eval_pipeline(size=256, resize=224): the shorter side resized to 224 is less than the crop, so the centre "
        "crop pads every image with black borders (as torchvision's CenterCrop does); size and resize swapped? "
        "(eval_pipeline(224, 256): resize to 256, crop 224)"
    ]
    out = pipe(np.full((291, 355, 3), 200, np.uint8))
    assert out.shape == (3, 256, 256) and int((out == 0).all(dim=(0, 2)).sum()) == 32  # 224 rows of 256
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        eval_pipeline(224, 256), eval_pipeline(224), eval_pipeline((224, 300)), eval_pipeline(224, 224)
        assert train_pipeline(64, hflip=0).flip.p == 0.0 and train_pipeline(64, hflip=1).flip.p == 1.0


def test_label_and_channel_conversions_never_change_values_silently():
    # The attack: ToDtype cut 2.9 to class 2, OneHot took 1.5 and True as class 1, ToTensor(bgr=True)
    # and cv2_to_tensor put BGRA in ARGB or BGRA order, HWCToCHW made (224, 3, 224) of a CHW array.
    from datakit.transforms import HWCToCHW, OneHot, ToDtype, ToTensor, cv2_to_tensor

    with pytest.raises(ValueError) as e:
        ToDtype()(2.9)
    assert (
        str(e.value)
        == "ToDtype: label 2.9 is not a whole number, not a class index; as int64 it would be cut, silently"
    )
    assert ToDtype()(np.float32(2.0)).item() == 2 and ToDtype()(torch.tensor([1.0, 3.0])).tolist() == [1, 3]
    for bad, shown in ((1.5, "1.5 (float64)"), (True, "True (bool)"), (2.9, "2.9 (float64)")):  # not 2.9000000953674316
        with pytest.raises(ValueError) as e:
            OneHot(3)(bad)
        assert str(e.value) == f"OneHot(3): labels must be class indices (integers), got {shown}"
    assert OneHot(3)(2.0).tolist() == [0.0, 0.0, 1.0]
    bgra = np.array([[[10, 20, 30, 255]]], np.uint8)
    assert (ToTensor(bgr=True)(bgra) * 255).round().flatten().tolist() == [30.0, 20.0, 10.0, 255.0]
    assert cv2_to_tensor(bgra).flatten().tolist() == [30, 20, 10, 255]
    with pytest.raises(ValueError) as e:
        HWCToCHW()(np.zeros((3, 224, 224), np.uint8))
    assert str(e.value) == ("HWCToCHW expects an H x W x C array, and (3, 224, 224) looks C x H x W already; pass it "
                            "on as it is (torch.from_numpy)")  # fmt: skip
    assert HWCToCHW()(np.zeros((2, 500, 3), np.uint8)).shape == (3, 2, 500)  # a thin strip is still H x W x C
    with pytest.raises(ValueError) as e:  # named HWCToCHW, which the caller never called
        ToTensor()(np.zeros((3, 32, 32), np.uint8))
    assert str(e.value) == ("ToTensor expects an H x W x C array, and (3, 32, 32) looks C x H x W already; pass it "
                            "on as it is (torch.from_numpy)")  # fmt: skip
    # the attack: a C x H x W array (another loader's) given to the pipelines: eval_pipeline(64) read it as 3 rows of
    # 257 pixels in 300 channels and gave a (300, 64, 64) tensor without a word; train_pipeline failed in an OpenCV
    # assertion that named neither
    from datakit.transforms import CenterCrop, Resize, eval_pipeline, train_pipeline

    chw = np.zeros((3, 257, 300), np.uint8)
    for who, step in (("eval_pipeline", eval_pipeline(64)), ("train_pipeline", train_pipeline(64))):
        with pytest.raises(ValueError) as e:
            step(chw)
        assert str(e.value) == (f"{who} expects an H x W x C array of 1-4 channels, and (3, 257, 300) looks C x H x W; "
                                "give it as H x W x C (img.transpose(1, 2, 0))")  # fmt: skip
    assert eval_pipeline(64)(chw.transpose(1, 2, 0)).shape == (3, 64, 64)
    # a line scan of 224 bands (1 x 640 x 224, H x W x C) is no C x H x W image to the resizes, which take it
    assert Resize((1, 320))(np.zeros((1, 640, 224), np.uint8)).shape == (1, 320, 224)
    assert CenterCrop((4, 300))(np.zeros((4, 600, 8), np.uint8)).shape == (4, 300, 8)


def test_normalize_refuses_statistics_and_dtypes_it_cannot_use():
    from datakit.transforms import Normalize

    with pytest.raises(ValueError) as e:
        Normalize([0.5], [float("nan")])
    assert str(e.value) == "mean must be finite and std positive and finite, got mean [0.5] and std [nan]"
    with pytest.raises(TypeError) as e:
        Normalize([0.5], [0.25])(torch.zeros(1, 2, 2, dtype=torch.int32))
    assert str(e.value) == "Normalize expects uint8 or float images, got int32: convert them first (ToDtype)"


def test_a_crop_pickled_by_an_earlier_version_draws_torchvisions_boxes():
    # an earlier RandomResizedCrop kept the log-ratio tensor only; unpickled now, it draws as before
    from torchvision.transforms import RandomResizedCrop as TVCrop

    crop = train_pipeline(224).crop
    state = {k: v for k, v in crop.__dict__.items() if k != "_log_bounds"}
    old = type(crop).__new__(type(crop))
    old.__setstate__(state)
    for seed in range(50):
        torch.manual_seed(seed)
        ours = old.get_params(480, 640)
        torch.manual_seed(seed)
        assert ours == tuple(TVCrop.get_params(torch.empty(1, 480, 640), (0.08, 1.0), (3 / 4, 4 / 3))), seed


# ---------------------------------------------------------------------------------------------
# EXIF orientation: the crop of a turned JPEG decoded at a reduced DCT scale

# the transposition that turns an upright image into the one stored under each EXIF orientation
# (Pillow's exif_transpose undoes it)
_STORED = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}
# and the one that turns it upright, as Pillow's exif_transpose picks it
_UPRIGHT = {**_STORED, 6: Image.Transpose.ROTATE_270, 8: Image.Transpose.ROTATE_90}


def _waves(h: int, w: int) -> np.ndarray:
    """Smooth waves across, down and diagonally (4-6 levels a pixel at their steepest): a crop one
    scaled pixel off (2-8 pixels) changes the output by 10-45 levels, a DCT-scaled decode by about 1."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    waves = [np.sin(2 * np.pi * x / 128), np.sin(2 * np.pi * y / 112), np.sin(2 * np.pi * (x - y) / 160)]
    return np.stack([np.round(128 + 110 * v) for v in waves], -1).astype(np.uint8)


def _stored_jpeg(upright: np.ndarray, orientation: int, subsampling: int) -> bytes:
    """``upright`` stored as a camera stores it under ``orientation``, with that EXIF tag."""
    import io

    from PIL import ImageOps

    im = Image.fromarray(upright)
    if orientation != 1:
        im = im.transpose(_STORED[orientation])
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=100, subsampling=subsampling, exif=exif.tobytes())
    data = buf.getvalue()
    assert np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data)))).shape == upright.shape
    return data


def _upright_box(box, orientation: int, sh: int, sw: int) -> tuple[int, int, int, int]:
    """A crop (top, left, height, width) of the stored ``sh`` x ``sw`` image as the same pixels of the upright one."""
    i, j, h, w = box
    return {
        1: (i, j, h, w),
        2: (i, sw - j - w, h, w),
        3: (sh - i - h, sw - j - w, h, w),
        4: (sh - i - h, j, h, w),
        5: (j, i, w, h),
        6: (j, sh - i - h, w, h),
        7: (sw - j - w, sh - i - h, w, h),
        8: (sw - j - w, i, w, h),
    }[orientation]


def _fixed_crop(monkeypatch, box):
    monkeypatch.setattr(RandomResizedCrop, "get_params", lambda self, h, w: box)


@pytest.mark.parametrize("subsampling", [0, 2], ids=["444", "420"])
@pytest.mark.parametrize("scale", [2, 4, 8])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_turned_crop_at_a_reduced_scale_is_where_it_is_in_the_upright_image(
    monkeypatch, subsampling, scale, orientation
):
    # The attack: a JPEG of 301 x 517 (no multiple of 2, 4, 8 or an MCU) under EXIF orientation 2-8, decoded
    # at 1/2, 1/4 or 1/8 (libjpeg's ceil(side / scale): the last scaled row and column hold fewer pixels), was
    # turned upright whole and the crop cut from it as if every scaled pixel held `scale` upright ones from the
    # top left: where the image was flipped, the short row or column was at the top or left and the crop came
    # out up to a scaled pixel off (on these crops, mean error 2.3-12.5 levels per crop and up to 46).
    import io

    from PIL import ImageOps
    from torchvision.transforms.v2 import functional as F

    out, (uh, uw) = 32, (301, 517)
    data = _stored_jpeg(_waves(uh, uw), orientation, subsampling)
    sh, sw = (uh, uw) if orientation < 5 else (uw, uh)
    reference = torch.from_numpy(np.array(ImageOps.exif_transpose(Image.open(io.BytesIO(data))))).permute(2, 0, 1)
    pipe = train_pipeline(out, hflip=0.0)
    # crops of the stored image on the 1/scale grid: cut without rounding at that scale, so the only
    # difference from the reference is the DCT-scaled decode against the antialiased resize
    side = out * scale
    for si, sj in ((0, 0), (sh // scale * scale - side, sw // scale * scale - side), (scale * 3, scale * 5)):
        box = _upright_box((si, sj, side, side), orientation, sh, sw)
        assert pipe._factor(box[2], box[3]) == scale
        _fixed_crop(monkeypatch, box)
        got = pipe.from_bytes(data).to(torch.int16)
        want = F.resized_crop(reference, *box, [out, out], antialias=True).to(torch.int16)
        err = (got - want).abs()
        # the DCT-scaled decode against Pillow's full decode and the antialiased resize, measured upright
        # (orientation 1) on these crops: mean <= 0.85, max 7 (0.89 and 8 for the others, each encoded anew)
        assert err.float().mean() <= 1.0 and err.max() <= 8, (box, err.float().mean().item(), err.max().item())


@pytest.mark.parametrize("subsampling", [0, 2], ids=["444", "420"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_turned_crop_is_the_stored_pixels_of_that_crop_turned_upright(subsampling, orientation, monkeypatch):
    # exact: a crop on the 1/scale grid of the stored image, of the output's size there (nothing resized), is
    # the pixels of the same file decoded at that scale with its orientation set to 1, cropped and turned upright
    from datakit.io import decode_image

    out, (uh, uw) = 24, (301, 517)
    data = _stored_jpeg(_waves(uh, uw), orientation, subsampling)
    tag = data.index(b"\x01\x12\x00\x03\x00\x00\x00\x01")  # Pillow writes big-endian EXIF: Orientation, SHORT, 1
    as_stored = data[: tag + 8] + b"\x00\x01" + data[tag + 10 :]
    sh, sw = (uh, uw) if orientation < 5 else (uw, uh)
    for scale in (1, 2, 4, 8):
        stored = decode_image(as_stored, "rgb", -(-max(sh, sw) // scale) if scale > 1 else None)
        side = out * scale
        for si, sj in ((0, 0), (sh // scale * scale - side, sw // scale * scale - side), (scale * 3, scale * 5)):
            box = _upright_box((si, sj, side, side), orientation, sh, sw)
            _fixed_crop(monkeypatch, box)
            got = train_pipeline(out, hflip=0.0).from_bytes(data).permute(1, 2, 0).numpy()
            crop = Image.fromarray(stored[si // scale : si // scale + out, sj // scale : sj // scale + out])
            want = np.asarray(crop if orientation == 1 else crop.transpose(_UPRIGHT[orientation]))
            np.testing.assert_array_equal(got, want, err_msg=f"scale {scale}, box {box}")


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_turned_crops_come_from_the_region_decoder_with_the_whole_images_pixels(
    monkeypatch, orientation, tmp_path
):
    # a phone photo (orientation 6 for every portrait shot) is not left to the slower whole-image decoders: the
    # region decoder decodes the crop of the pixels as stored and the pipeline turns it upright. The pixels are
    # those of the whole-image path, for crops at every scale, with and without an entropy index
    import datakit.io as dio

    if not dio.region_decoder_available():
        pytest.skip("the region decoder is not built")
    data = _stored_jpeg(_waves(301, 517), orientation, 2)
    calls = []
    region = dio._REGION

    class Spy:
        def __getattr__(self, name):
            return getattr(region, name)

        def decode_region(self, *a):
            calls.append(("region", a[-1] if len(a) == 8 else False))
            return region.decode_region(*a)

        def decode_indexed(self, *a):
            calls.append(("indexed", a[-1] if len(a) == 9 else False))
            return region.decode_indexed(*a)

    for size in (16, 40, 120, 300):  # crops decoded at 1/8 to 1/1
        for cache in (None, tmp_path / "index"):
            for seed in range(3):
                monkeypatch.setattr(dio, "_REGION", False)
                torch.manual_seed(seed)
                want = train_pipeline(size, index_cache=cache).from_bytes(data)
                monkeypatch.setattr(dio, "_REGION", Spy())
                calls.clear()
                torch.manual_seed(seed)
                got = train_pipeline(size, index_cache=cache).from_bytes(data)
                assert torch.equal(got, want), (size, cache, seed)
                assert calls == [("indexed" if cache else "region", orientation != 1)], (size, cache, seed)


def _bar_centres(chw: torch.Tensor) -> list[float]:
    """The centres of the bright vertical bars of a 1-row profile, in output pixels."""
    m = chw[0].float().mean(0).numpy()
    m = (m - m.min()) / (m.max() - m.min())
    bright = np.flatnonzero(m > 0.5)
    runs = np.split(bright, np.flatnonzero(np.diff(bright) > 1) + 1)
    return [float((r * m[r]).sum() / m[r].sum()) for r in runs]


@pytest.mark.parametrize("turned", [False, True])
def test_eval_from_bytes_keeps_torchvision_geometry_at_a_reduced_scale(turned: bool):
    # before: decoded at 1/8, the resize took the decode's rounded-up sides (262 x 483 for 2089 x 3860) for the
    # picture, so the crop was stretched and shifted: 1.8 output pixels at its right edge (0.74 at its left)
    import io as _io

    from torchvision.io import decode_jpeg

    img = np.full((2089, 3860, 3), 40, np.uint8)
    for x0 in (1100, 1950, 2750):
        img[:, x0 : x0 + 60] = 220
    pil = Image.fromarray(img)
    buf = _io.BytesIO()
    if turned:  # stored on its side, EXIF 6 turns it upright: the header's sides are swapped
        exif = Image.Exif()
        exif[0x0112] = 6
        pil.transpose(Image.Transpose.ROTATE_90).save(buf, "JPEG", quality=95, exif=exif.tobytes())
    else:
        pil.save(buf, "JPEG", quality=95)
    data = buf.getvalue()
    full = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), apply_exif_orientation=True)
    assert tuple(full.shape) == (3, 2089, 3860)
    ref = v2.CenterCrop(224)(v2.Resize(256, antialias=True)(full))
    got = eval_pipeline(224, 256).from_bytes(data, "rgb")
    assert got.shape == ref.shape == (3, 224, 224)
    want, have = _bar_centres(ref), _bar_centres(got)
    assert len(want) == len(have) == 3
    assert max(abs(a - b) for a, b in zip(want, have)) < 0.45  # under one scaled pixel (8 full, 0.98 output)


@pytest.mark.parametrize("period", [32, 8])
def test_eval_from_bytes_at_a_reduced_scale_stays_within_a_few_levels_of_torchvision(period: int):
    # the attack: a 1100 x 700 JPEG of fine texture through eval_pipeline(64) was decoded at 1/8 (an 8 x 8 block's
    # mean, not torchvision's antialiased filter): up to 41 levels off (mean 7.4) at a 32 px texture, 66 (mean
    # 11.6) at 8 px, where the docs said about 20 (1-2 on average). Decoded at a scale that keeps twice the side:
    import io as _io

    import cv2

    from datakit.io import decode_image

    rng = np.random.default_rng(0)
    small = rng.integers(0, 256, (1100 // period + 1, 700 // period + 1, 3), dtype=np.uint8)
    buf = _io.BytesIO()
    Image.fromarray(cv2.resize(small, (700, 1100), interpolation=cv2.INTER_CUBIC)).save(buf, "JPEG", quality=92)
    data = buf.getvalue()
    full = torch.from_numpy(decode_image(data, "rgb")).permute(2, 0, 1)
    ref = v2.Compose([v2.Resize(73), v2.CenterCrop(64)])(full).int()
    diff = (eval_pipeline(64).from_bytes(data, "rgb").int() - ref).abs().float()
    assert float(diff.max()) <= 4 and float(diff.mean()) < 1


def test_the_chroma_lag_of_each_subsampling():
    from datakit.io import _jpeg_chroma_lag

    img = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    got = {}
    for name in ("411", "420", "422", "440", "444"):
        flag = getattr(cv2, f"IMWRITE_JPEG_SAMPLING_FACTOR_{name}")
        got[name] = _jpeg_chroma_lag(cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_SAMPLING_FACTOR, flag])[1].tobytes())
    assert got == {"411": 4, "420": 1, "422": 2, "440": 2, "444": 1}
    assert _jpeg_chroma_lag(cv2.imencode(".jpg", img[..., 0])[1].tobytes()) == 1  # gray: no chroma
    assert _jpeg_chroma_lag(b"\xff\xd8\xff\xd9") == 1  # no frame header


def _texture_jpeg(period: int, subsampling: int) -> bytes:
    import io as _io

    rng = np.random.default_rng(period)
    small = rng.integers(0, 256, (1100 // period + 1, 700 // period + 1, 3), dtype=np.uint8)
    buf = _io.BytesIO()
    Image.fromarray(cv2.resize(small, (700, 1100), interpolation=cv2.INTER_CUBIC)).save(
        buf, "JPEG", quality=92, subsampling=subsampling
    )
    return buf.getvalue()


@pytest.mark.parametrize("period", [32, 8])
def test_a_4_2_2_jpeg_keeps_its_colour_at_a_reduced_scale(period: int):
    # the attack: a 4:2:2 JPEG (as many cameras write them) at a reduced DCT scale: libjpeg scales the chroma's inverse
    # DCT only by square steps, so its chroma came out at half the luma's resolution across. eval_pipeline(64) was up
    # to 29 levels from torchvision's pixels (mean 5.7) on an 8-pixel texture, where 4:2:0 is 4 (mean 0.9); a training
    # crop of the whole image 47 in Cr (mean 7.4) from the same crop of the decoded array. Decoded a scale finer:
    from datakit.io import decode_image

    data = _texture_jpeg(period, 1)  # Pillow's subsampling=1: 4:2:2
    full = torch.from_numpy(decode_image(data, "rgb")).permute(2, 0, 1)
    ref = v2.Compose([v2.Resize(73), v2.CenterCrop(64)])(full).int()
    diff = (eval_pipeline(64).from_bytes(data, "rgb").int() - ref).abs().float()
    limit = (4, 1.0) if period == 32 else (10, 2.0)
    assert float(diff.max()) <= limit[0] and float(diff.mean()) < limit[1], (float(diff.max()), float(diff.mean()))
    pipe = train_pipeline(64, scale=(1.0, 1.0), ratio=(700 / 1100, 700 / 1100), hflip=0.0)  # the whole image
    crops = [pipe.from_bytes(data, "rgb"), pipe(decode_image(data, "rgb"))]
    ycc = [cv2.cvtColor(c.permute(1, 2, 0).numpy(), cv2.COLOR_RGB2YCrCb).astype(int) for c in crops]
    chroma = np.abs(ycc[0] - ycc[1])[..., 1:]
    assert chroma.max() <= 20 and chroma.mean() < 3.5, (int(chroma.max()), float(chroma.mean()))


@pytest.mark.parametrize("orientation", range(1, 9))
def test_eval_from_bytes_of_sides_no_multiple_of_the_scale_stays_within_a_few_levels_of_torchvision(orientation):
    # the attack: a 657 x 615 JPEG through eval_pipeline(64), decoded at 1/4 (165 x 154: its last row and column stand
    # for 4 pixels, 1 and 3 of them past the edge), was resized to a size rounded to whole pixels, which shifted the
    # centre cut by up to half an output pixel: 28 levels off (mean 4.3) on a smooth texture, where a 656 x 616 one
    # is 2 off (mean 0.4). Under each EXIF orientation, whose flips move that edge to the top or left.
    import io as _io

    from datakit.io import decode_image

    rng = np.random.default_rng(orientation)
    small = rng.integers(0, 256, (657 // 32 + 2, 615 // 32 + 2, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = _io.BytesIO()
    Image.fromarray(cv2.resize(small, (615, 657), interpolation=cv2.INTER_CUBIC)).save(buf, "JPEG", quality=92,
                                                                                        exif=exif.tobytes())  # fmt: skip
    data = buf.getvalue()
    full = torch.from_numpy(decode_image(data, "rgb")).permute(2, 0, 1)  # upright
    assert tuple(full.shape[1:]) == ((615, 657) if orientation >= 5 else (657, 615))
    ref = v2.Compose([v2.Resize(73), v2.CenterCrop(64)])(full).int()
    for pipe in (eval_pipeline(64), eval_pipeline(64, interpolation="bicubic")):
        got = pipe.from_bytes(data, "rgb")
        want = ref if pipe.resize.interpolation == "bilinear" else pipe(decode_image(data, "rgb")).int()
        diff = (got.int() - want).abs().float()
        assert got.shape == (3, 64, 64) and got.is_contiguous()
        assert float(diff.max()) <= 4 and float(diff.mean()) < 1, (pipe.resize.interpolation, float(diff.max()))


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_nearest_picks_the_pixels_torchvision_picks(mode: str):
    # before: OpenCV's fixed point picked the pixel before where a position falls on a pixel's edge: for 21 columns
    # to 300, output 100 took column 6 where torch takes 7 (100 * 21 / 300 = 7)
    rng = np.random.default_rng(0)
    tv_mode = v2.InterpolationMode.NEAREST if mode == "nearest" else v2.InterpolationMode.NEAREST_EXACT
    for (h, w), (oh, ow) in [((5, 21), (5, 300)), ((4, 3000), (4, 233)), ((37, 250), (111, 99)), ((600, 9), (7, 388))]:
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        want = v2.Resize((oh, ow), interpolation=tv_mode)(torch.from_numpy(img).permute(2, 0, 1))
        got = Resize((oh, ow), interpolation=mode)(img)
        assert torch.equal(torch.from_numpy(np.ascontiguousarray(got)).permute(2, 0, 1), want), (h, w, oh, ow)


@pytest.mark.parametrize("h, w", [(300, 400), (333, 500), (480, 640), (600, 500), (200, 260)])
def test_eval_pipeline_gives_torchvisions_eval_pixels(tmp_path: Path, h: int, w: int):
    # the attack: eval_pipeline(224, 256) against v2.Resize(256) + v2.CenterCrop(224) (antialias=True, v2's
    # default) on a 480x640 photo: up to 8 levels apart, plain bilinear under a 2x shrink
    from torchvision.transforms import v2

    from datakit.io import imread, imwrite
    from datakit.transforms import eval_pipeline

    rng = np.random.default_rng(h)
    img = cv2.GaussianBlur(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), (7, 7), 0)
    want = v2.Compose([v2.Resize(256), v2.CenterCrop(224)])
    for suffix in (".png", ".jpg"):  # a JPEG under 512 px is decoded whole (from_bytes), then resized the same
        path = imwrite(tmp_path / f"x{suffix}", img, mode="rgb")
        pixels = imread(path, mode="rgb")
        tv = want(torch.from_numpy(pixels).permute(2, 0, 1))
        ours = eval_pipeline(224, 256)
        assert torch.equal(ours(pixels), tv)
        assert torch.equal(ours.from_bytes(path.read_bytes()), tv)
    fast = eval_pipeline(224, 256, antialias=False)(pixels).int()  # plain bilinear under 2x, as before
    plain = v2.Compose([v2.Resize(256, antialias=False), v2.CenterCrop(224)])(torch.from_numpy(pixels).permute(2, 0, 1))
    assert (fast - plain.int()).abs().max() <= 1


def test_normalize_takes_the_scale_when_the_values_cannot_say_it():
    # the attack: `datakit stats` of a very dark set gave 0-255 means and stds all under 1; Normalize read them as
    # 0-1 statistics and a pixel of 1 came out -0.938 instead of 1.058
    x = torch.tensor([[[0, 1]]] * 3, dtype=torch.uint8)
    mean, std = [0.472, 0.507, 0.465], [0.499, 0.5, 0.499]
    assert Normalize(mean, std)(x)[0, 0, 1].item() == pytest.approx((1 / 255 - 0.472) / 0.499, abs=1e-5)  # read as 0-1
    assert Normalize(mean, std, scale=255)(x)[0, 0, 1].item() == pytest.approx((1 - 0.472) / 0.499, abs=1e-5)
    assert Normalize([120.0] * 3, [60.0] * 3, scale=1).scale255 is False
    with pytest.raises(ValueError, match=r"scale must be 'auto', 1 or 255, got 100"):
        Normalize(mean, std, scale=100)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_eval_from_bytes_centres_the_crop_alike_under_every_exif_orientation(orientation: int):
    # the attack: a 2049 x 2305 photo decoded at 1/8 scale covers 2056 x 2312 pixels, the 7 past the edge at the
    # stored bottom and right; turned upright (orientations 2, 3, 4, 6, 7, 8) they were at the top or the left, and
    # the centre crop came out shifted by most of an output pixel (a ramp's mean off by 0.93 levels, against 0.06)
    import io as _io

    from datakit.io import decode_image

    y, x = np.mgrid[0:2049, 0:2305].astype(np.float64)
    ramps = np.stack([x / 2305 * 255, y / 2049 * 255, np.full_like(x, 128)], -1).astype(np.uint8)
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = _io.BytesIO()
    Image.fromarray(ramps).save(buf, "JPEG", quality=100, subsampling=0, exif=exif.tobytes())
    data = buf.getvalue()
    upright = torch.from_numpy(decode_image(data, "rgb")).permute(2, 0, 1)
    want = v2.Compose([v2.Resize(256), v2.CenterCrop(224)])(upright).float()
    got = eval_pipeline(224).from_bytes(data, "rgb", "x.jpg").float()
    off = (got - want).mean(dim=(1, 2))
    assert got.shape == (3, 224, 224) and off[:2].abs().max() < 0.25, off


@pytest.mark.parametrize(("label", "dtype", "shown"), [(1e20, torch.int64, "1e+20"), (2.0**63, torch.int64, "9.223372036854776e+18"),
                                                        (300, torch.uint8, "300"), (-1, torch.uint8, "-1"),
                                                        (200.0, torch.int8, "200.0")])  # fmt: skip
def test_to_dtype_refuses_a_label_its_dtype_cannot_hold(label, dtype, shown):
    # the attack: ToDtype()(1e20) gave -9223372036854775808 and uint8 turned 300 into 44, where the docs say none
    # of these transforms changes a value silently
    info = torch.iinfo(dtype)
    name = str(dtype).removeprefix("torch.")
    with pytest.raises(ValueError) as e:
        ToDtype(target_dtype=dtype)(label)
    assert str(e.value) == (f"ToDtype: label {shown} is outside {name}'s range {info.min}..{info.max}; it would wrap "
                            "around, silently")  # fmt: skip
    assert ToDtype(target_dtype=dtype)(5).item() == 5


@pytest.mark.parametrize(("mean", "std"), [([0.5, 0.5, 0.5], 0.25), ([0.5, 0.5, 0.5], [0.25]), (0.5, 0.25),
                                           ([0.5, 0.5], [0.2, 0.2, 0.2])])  # fmt: skip
def test_normalize_refuses_statistics_that_are_not_one_value_per_channel(mean, std):
    # the attack: Normalize([.5, .5, .5], 0.25) worked on float input (broadcast) and raised TypeError on uint8
    with pytest.raises(ValueError) as e:
        Normalize(mean, std)
    assert str(e.value) == (f"mean and std must be lists of one value per channel, as many in each, got mean "
                            f"{mean!r} and std {std!r}")  # fmt: skip


@pytest.mark.parametrize("suffix", [".png", ".jpg"])
def test_augmentations_see_rgb_whatever_the_dataset_s_channel_order(tmp_path: Path, suffix: str):
    # the attack: mode="bgr" with augment=[v2.Grayscale(3)]: a red image came out 29 grey where mode="rgb" gave
    # 93 (red weighted as blue); ColorJitter's hue and saturation, AutoAugment's colour steps the same
    (tmp_path / "c").mkdir()
    img = np.zeros((64, 64, 3), np.uint8)
    img[..., 0], img[..., 1] = 255, 30  # red, RGB
    cv2.imwrite(str(tmp_path / "c" / f"red{suffix}"), img[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 100])
    for augment in ([v2.Grayscale(3)], [v2.ColorJitter(hue=0.3, saturation=0.5)], [v2.RandAugment()]):
        got = {}
        for mode in ("rgb", "bgr", "unchanged"):
            ds = open_dataset(tmp_path, mode=mode, transform=train_pipeline(32, scale=(1, 1), augment=augment))
            torch.manual_seed(0)
            x = ds[0][0]
            got[mode] = x if mode == "rgb" else x.flip(0)
        assert torch.equal(got["rgb"], got["bgr"]) and torch.equal(got["rgb"], got["unchanged"])
        if suffix == ".png" and isinstance(augment[0], v2.Grayscale):  # 0.2989 * 255 + 0.587 * 30, as torchvision
            assert got["bgr"][:, 5, 5].tolist() == [93, 93, 93]
    # a step that changes the channel count (Grayscale to one channel) leaves nothing to put back
    one = open_dataset(tmp_path, mode="bgr", transform=train_pipeline(32, scale=(1, 1), augment=[v2.Grayscale(1)]))
    assert one[0][0].shape == (1, 32, 32)
    if suffix == ".png":
        assert one[0][0][0, 5, 5].item() == 93


@pytest.mark.parametrize("seed", range(6))
def test_a_float_step_inside_a_random_container_is_refused_at_build_whatever_the_draw(seed: int):
    # the attack: RandomApply([Normalize(...)], p=0.3) was tried once at build: when p skipped it (15 seeds of 20),
    # the pipeline was built and the first epoch died in a worker on torchvision's bare error
    from torchvision.transforms import v2

    from datakit.transforms import train_pipeline

    torch.manual_seed(seed)
    for wrap in (lambda t: v2.RandomApply([t], p=0.3), lambda t: v2.RandomChoice([v2.Identity(), t], p=[0.9, 0.1])):
        with pytest.raises(ValueError) as e:
            train_pipeline(32, augment=[wrap(v2.Normalize([0.5] * 3, [0.5] * 3))])
        assert str(e.value) == (
            "augment step Normalize(mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5], inplace=False) does not accept the "
            "uint8 CHW tensor the pipeline gives it (TypeError: Input tensor should be a float tensor. Got "
            "torch.uint8.); put float steps after the loader, or use normalize=True and a transform of your own"
        )


def test_random_erasing_with_random_values_is_refused_on_uint8():
    # the attack: v2.RandomErasing(value="random") (timm's --remode pixel) painted the erased box with 0-3 and
    # 253-255: torchvision casts N(0, 1) noise to uint8
    from torchvision.transforms import v2

    from datakit.transforms import train_pipeline

    for p, step in ((1.0, v2.RandomErasing(p=1.0, value="random")),
                    (0.5, v2.RandomApply([v2.RandomErasing(value="random")]))):  # fmt: skip
        with pytest.raises(ValueError) as e:
            train_pipeline(64, augment=[step])
        assert str(e.value) == (
            f"augment step RandomErasing(p={p}, scale=(0.02, 0.33), ratio=(0.3, 3.3), inplace=False) with "
            "value='random' paints uint8 crops with 0-3 and 253-255 (torchvision casts N(0, 1) noise to uint8); "
            "give value= a colour, or erase the normalised float batch after the loader"
        )
    pipe = train_pipeline(64, augment=[v2.RandomErasing(p=1.0, value=128)])
    torch.manual_seed(0)
    out = pipe(np.zeros((100, 100, 3), np.uint8))
    assert sorted(torch.unique(out).tolist()) == [0, 128]


def test_a_fill_colour_on_the_0_1_scale_is_refused_on_uint8_crops():
    # the attack: v2.RandomErasing(value=[0.485, 0.456, 0.406]), ImageNet's mean on the float pipelines' 0-1 scale,
    # as a port of a reference script writes it: taken without a word, and every fraction cast to 0 on the uint8
    # crop, so the box was painted black; the geometric steps' fill= the same (black corners), NumPy floats and a
    # caller's subclass too
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    from datakit.transforms import train_pipeline

    class MyErasing(v2.RandomErasing):
        pass

    half = np.float32(0.5)
    for step, shown, first, name in (
        (v2.RandomErasing(p=1.0, value=[0.485, 0.456, 0.406]),
         "RandomErasing(p=1.0, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=[0.485, 0.456, 0.406], inplace=False)",
         "0.485", "value"),
        (v2.RandomApply([v2.RandomRotation(10, fill=0.5)]),
         "RandomRotation(degrees=[-10.0, 10.0], interpolation=nearest, expand=False, fill=0.5)", "0.5", "fill"),
        (v2.RandomAffine(5, fill={tv_tensors.Image: [half, half, half]}),
         "RandomAffine(degrees=[-5.0, 5.0], interpolation=nearest)", "0.5", "fill"),
        (MyErasing(p=1.0, value=0.25), "MyErasing(p=1.0, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=[0.25], "
         "inplace=False)", "0.25", "value"),
    ):  # fmt: skip
        with pytest.raises(ValueError) as e:
            train_pipeline(64, augment=[step])
        assert str(e.value) == (
            f"augment step {shown} fills with {first}, a level on the 0-1 scale of float images, which the uint8 crop "
            f"it paints takes as 0, black: give the colour in 0-255 ({name}=[124, 116, 104] is ImageNet's mean)"
        )
    # the review round's regressions: levels in 0-255 with fractions (mmdet's 123.675), a mask's ignore index, a fill
    # a reflecting pad does not use, and the 0-1 mean inside a float round trip, where it is the right one
    to_float, to_uint8 = v2.ToDtype(torch.float32, scale=True), v2.ToDtype(torch.uint8, scale=True)
    for step in (
        v2.RandomErasing(p=1.0, value=[123.675, 116.28, 103.53]),
        v2.RandomAffine(5, fill={tv_tensors.Image: 0, tv_tensors.Mask: 255}),
        v2.Pad(2, fill=0.5, padding_mode="reflect"),
        v2.Compose([to_float, v2.RandomErasing(p=1.0, value=[0.485, 0.456, 0.406]), to_uint8]),
    ):
        assert train_pipeline(64, augment=[step]).augment == [step]
    # and the other way round: 0-255 levels on the float crop of a round trip, painted as they are, out of range
    # (white once the crop is uint8 again); a round trip without scale=True keeps 0-255, where they are right
    for step, shown, first, name in (
        (v2.RandomErasing(p=1.0, value=[124, 116, 104]),
         "RandomErasing(p=1.0, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=[124.0, 116.0, 104.0], inplace=False)",
         "124", "value"),
        (v2.RandomRotation(10, fill=255), "RandomRotation(degrees=[-10.0, 10.0], interpolation=nearest, expand=False, "
         "fill=255)", "255", "fill"),
    ):  # fmt: skip
        with pytest.raises(ValueError) as e:
            train_pipeline(64, augment=[v2.Compose([to_float, step, to_uint8])])
        for before in (v2.GaussianBlur(5, sigma=(0.1, 2)), v2.GaussianNoise(clip=False)):  # (white now past 1.0)
            for seed in range(8):
                torch.manual_seed(seed)
                with pytest.raises(ValueError):
                    train_pipeline(64, augment=[v2.Compose([to_float, before, step, to_uint8])])
        assert str(e.value) == (
            f"augment step {shown} fills with {first}, a 0-255 level, the float crop it paints having its white at 1 "
            "(as ToDtype(torch.float32, scale=True) makes it): it is painted out of range, white once the crop is "
            f"uint8 again: give the colour on the crop's own scale ({name}=[0.485, 0.456, 0.406] is ImageNet's mean "
            "on the 0-1 scale)"
        )
    kept = [v2.ToDtype(torch.float32), v2.RandomErasing(p=1.0, value=[124, 116, 104]), v2.ToDtype(torch.uint8)]
    assert train_pipeline(64, augment=kept).augment == kept
    # there (0-255 levels in float), a 0-1 fill paints black as on uint8 (the docs round's attack)
    unscaled = [
        v2.ToDtype(torch.float32),
        v2.RandomErasing(p=1.0, value=[0.485, 0.456, 0.406]),
        v2.ToDtype(torch.uint8),
    ]
    with pytest.raises(ValueError) as e:
        train_pipeline(64, augment=unscaled)
    assert str(e.value) == (
        "augment step RandomErasing(p=1.0, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=[0.485, 0.456, 0.406], "
        "inplace=False) fills with 0.485, a level on the 0-1 scale of float images, which the float crop of 0-255 "
        "levels it paints takes as 0, black: give the colour in 0-255 (value=[124, 116, 104] is ImageNet's mean)"
    )
    normalised = [to_float, v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]), v2.RandomErasing(p=1.0),
                  v2.ToDtype(torch.uint8)]  # fmt: skip
    assert train_pipeline(64, augment=normalised).augment == normalised  # (no rule knows a normalised crop's fill)
    pipe = train_pipeline(
        64, augment=[v2.RandomErasing(p=1.0, value=[124, 116, 104]), v2.RandomRotation(10, fill=255.0)]
    )
    torch.manual_seed(0)
    out = pipe(np.zeros((100, 100, 3), np.uint8))
    assert ((out == torch.tensor([124, 116, 104]).view(3, 1, 1)).all(0)).any()  # the box, in the mean


def test_a_three_colour_fill_on_gray_crops_is_refused_at_the_first_crop_not_at_random(tmp_path):
    # the attack: a mode="gray" dataset with the fill the docs give, v2.RandomErasing(0.25, value=[124, 116, 104]),
    # or TrivialAugmentWide(fill=[124, 116, 104]): the pipeline was built (its check tries 3 channels), then the
    # samples whose draw erased (16 of 72) or filled failed at random mid-epoch
    from torchvision.transforms import v2

    from datakit.io import encode_image
    from datakit.transforms import train_pipeline

    (tmp_path / "a").mkdir()
    for i in range(12):
        (tmp_path / "a" / f"{i}.jpg").write_bytes(encode_image(synthetic_image(60, 70, seed=i), ".jpg", 90))
    for step in (v2.RandomErasing(0.25, value=[124, 116, 104]), v2.TrivialAugmentWide(fill=[124, 116, 104])):
        ds = open_dataset(tmp_path, transform=train_pipeline(32, augment=[step]), mode="gray")
        for i in range(len(ds)):  # every sample, whatever its draws
            torch.manual_seed(i)
            with pytest.raises(ValueError) as e:
                ds[i]
            name = "value" if isinstance(step, v2.RandomErasing) else "fill"
            assert str(e.value) == (
                f"augment step {' '.join(repr(step).split())} fills with 3 levels, and this crop has 1 channel (a gray "
                f"image): give the step's {name} one level ({name}=116), or read the images in mode 'rgb'"
            )
    for step in (v2.RandomErasing(1.0, value=116), v2.TrivialAugmentWide(fill=116), v2.ColorJitter(0.4, 0.4)):
        ds = open_dataset(tmp_path, transform=train_pipeline(32, augment=[step]), mode="gray")
        assert [tuple(ds[i][0].shape) for i in range(len(ds))] == [(1, 32, 32)] * 12


def test_a_compose_in_augment_is_tried_in_order_not_step_by_step():
    # the regression: steps inside a Compose were each tried on the raw crop, so a float round trip
    # (ToDtype, a float step, ToDtype back) and a crop after an enlarging resize were refused
    from torchvision.transforms import v2

    from datakit.transforms import train_pipeline

    def noise(x):
        return (x + 0.05 * torch.randn_like(x)).clamp(0, 1)

    float_trip = v2.Compose(
        [v2.ToDtype(torch.float32, scale=True), v2.Lambda(noise), v2.ToDtype(torch.uint8, scale=True)]
    )
    for augment in (
        [v2.RandomApply([float_trip], p=0.3)],
        [v2.Compose([v2.Resize(40), v2.RandomCrop(36), v2.Resize(32)])],
    ):
        pipe = train_pipeline(32, augment=augment)
        assert pipe(np.zeros((50, 60, 3), np.uint8)).shape == (3, 32, 32)


def test_augment_set_on_a_pipeline_is_tried_as_train_pipeline_tries_it(tmp_path):
    # the attack: pipe.augment = None (train_pipeline's own default) to switch augmentations off for the last
    # epochs: every PNG sample, and the loader's next epoch, failed with "Value after * must be an iterable"; one
    # transform (not a list) the same, and a step refusing uint8 was taken until the samples were read
    from torchvision.transforms import v2

    from datakit.io import encode_image
    from datakit.transforms import train_pipeline

    png = encode_image(np.full((50, 60, 3), 90, np.uint8), ".png")
    pipe = train_pipeline(32, augment=[v2.ColorJitter(0.3)])
    for value, want in ((None, []), ([], []), (v2.RandomGrayscale(1.0), "one")):
        pipe.augment = value
        kinds = [type(t).__name__ for t in pipe.augment]
        assert kinds == ([] if want == [] else ["RandomGrayscale"])
        assert tuple(pipe.from_bytes(png, "rgb").shape) == (3, 32, 32)
    with pytest.raises(ValueError, match=r"^augment step Normalize\(.*\) does not accept the uint8 CHW tensor"):
        pipe.augment = [v2.Normalize([0.5] * 3, [0.2] * 3)]
    assert isinstance(pipe.augment[0], v2.RandomGrayscale)  # the refused one is not kept


def test_colour_augmentations_of_an_rgba_crop_are_refused_at_its_first_crop_not_at_random():
    # the attack: mode="unchanged" on RGBA PNGs with AutoAugment: the pipeline was built (its check tries 3
    # channels), then 6 in 40 draws failed at random mid-epoch ("permitted channel values are 1 or 3, but found 4")
    from torchvision.transforms import v2

    from datakit.io import encode_image
    from datakit.transforms import train_pipeline

    rgba = encode_image(np.random.default_rng(0).integers(0, 256, (60, 70, 4), dtype=np.uint8), ".png")
    for step in (v2.AutoAugment(), v2.ColorJitter(0.4, 0.4, 0.4, 0.1)):
        pipe = train_pipeline(32, augment=[step])
        for seed in range(3):  # the same refusal whatever the draws
            torch.manual_seed(seed)
            with pytest.raises(ValueError) as e:
                pipe.from_bytes(rgba, "unchanged")
            assert str(e.value).startswith(f"augment step {step!r} does not accept the uint8 CHW tensor")
            assert str(e.value).endswith(
                "; this crop has 4 channels (mode 'unchanged' keeps alpha), which torchvision's colour steps refuse: "
                "read the images in mode 'rgb' for these augmentations"
            )
        assert tuple(pipe.from_bytes(rgba, "rgb").shape) == (3, 32, 32)
    geometric = train_pipeline(32, augment=[v2.RandomRotation(20), v2.RandomErasing(1.0, value=0)])
    assert tuple(geometric.from_bytes(rgba, "unchanged").shape) == (4, 32, 32)


def test_an_augment_step_that_leaves_uint8_at_random_is_refused():
    # the attack: RandomApply([ToDtype(float32, scale=True)], p=0.5): half the crops 0-1 floats, the rest 0-255,
    # stacked into one float batch the loader called "in 0..255"
    from torchvision.transforms import v2

    from datakit.transforms import train_pipeline

    to_float = v2.ToDtype(torch.float32, scale=True)
    for step, shown in ((v2.RandomApply([to_float], p=0.5), "RandomApply( ToDtype(scale=True))"),
                        (v2.RandomChoice([to_float, v2.RandomGrayscale(1.0)]),
                         "RandomChoice(transforms=[ToDtype(scale=True), RandomGrayscale(p=1.0)], p=[0.5, 0.5])")):  # fmt: skip
        for seed in range(3):  # whatever this draw takes
            torch.manual_seed(seed)
            with pytest.raises(ValueError) as e:
                train_pipeline(32, augment=[step])
            assert str(e.value) == (f"augment step {shown} turns the uint8 crop into float32 on some draws only, its "
                                    "batches then of two scales: augment takes steps that keep uint8 (the loader's "
                                    "device= and normalize= convert and normalise the batches); put float steps after "
                                    "the loader")  # fmt: skip
    # every crop made float: one scale (the loader says the images are float already)
    assert train_pipeline(32, augment=[to_float])(np.full((40, 50, 3), 100, np.uint8)).dtype == torch.float32
    # a float round trip written as plain steps ends in uint8: taken, as inside one Compose
    trip = [v2.ToDtype(torch.float32, scale=True), v2.GaussianNoise(), v2.ToDtype(torch.uint8, scale=True)]
    out = train_pipeline(32, augment=trip)(np.full((40, 50, 3), 100, np.uint8))
    assert out.dtype == torch.uint8 and tuple(out.shape) == (3, 32, 32)


def test_rgb_statistics_on_two_scales_are_warned_of_by_normalize_and_the_loader():
    # the attack: ImageNet's mean times 255 beside its 0-1 std normalised batches to std 288, and the 0-1 mean beside
    # the 0-255 std left them uncentred, without a word. A warning, not a refusal: data in units of its own (depth in
    # metres, flux, CT) has such statistics rightly, and is not judged beyond three channels
    from datakit.prefetch import resolve_normalize

    cases = {
        ((123.675, 116.28, 103.53), (0.229, 0.224, 0.225)): "the mean [123.675, 116.28, 103.53] is on the 0-255 "
        "scale but the std [0.229, 0.224, 0.225] on the 0-1 scale",
        ((0.485, 0.456, 0.406), (58.395, 57.12, 57.375)): "the mean [0.485, 0.456, 0.406] is on the 0-1 scale but "
        "the std [58.395, 57.12, 57.375] on the 0-255 scale",
    }
    fix = ("(statistics copied from two places?); give both on one scale (ImageNet's: mean [0.485, 0.456, 0.406], "
           "std [0.229, 0.224, 0.225], or both times 255), or, if they are right, ")  # fmt: skip
    for (mean, std), why in cases.items():
        with pytest.warns(UserWarning) as said:
            Normalize(mean, std)
        assert [str(w.message) for w in said] == [f"{why} {fix}scale=1 or scale=255 says which (and this goes)"]
        with pytest.warns(UserWarning) as said:
            assert resolve_normalize((mean, std)) == ([float(m) for m in mean], [float(s) for s in std])
        assert [str(w.message) for w in said] == [
            f"normalize: {why} {fix}normalize=False and datakit.transforms.Normalize(mean, std, scale=...) in the "
            "loop take them without a word"
        ]
        assert said[0].filename == __file__  # the caller's line, not datakit's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Normalize(*next(iter(cases)), scale=255).scale255  # said to be so: taken as they are
        for mean, std in (([0, 0, 0], [255, 255, 255]), ([0.5] * 3, [0.5] * 3), ([127.5] * 3, [127.5] * 3),
                          ([0.485, 0.456, 0.406, 2.1], [0.229, 0.224, 0.225, 0.9]), ([3.2], [0.95]), ([0.4], [350]),
                          ([1.5, 1.2], [0.4, 0.3]), ([123.675, 116.28, 0.9], [0.5, 0.5, 0.5])):  # fmt: skip
            assert resolve_normalize((mean, std)) == ([float(m) for m in mean], [float(s) for s in std])
            Normalize(mean, std)


def test_eval_pipeline_antialiases_16_bit_images_as_torchvision_does():
    # the attack: a 16-bit PNG read with mode="unchanged", shrunk 1.4x by eval_pipeline: plain bilinear, up to 1624
    # of 65535 from torchvision's antialiased resize, which the docs promise at any factor
    import cv2

    img = np.random.default_rng(0).integers(0, 65536, (70, 90, 3)).astype(np.uint16)
    pipe = eval_pipeline(48, resize=56)
    chw = torch.from_numpy(img.astype(np.int32)).permute(2, 0, 1).float()
    want = v2.CenterCrop(48)(v2.Resize(56, antialias=True)(chw)).round().clamp(0, 65535)
    out = pipe(img)
    assert out.dtype == torch.uint16 and out.shape == (3, 48, 48)
    assert torch.equal(out.to(torch.float32), want)
    png = cv2.imencode(".png", img)[1].tobytes()
    assert torch.equal(pipe.from_bytes(png, mode="unchanged"), out)


def test_trying_the_augmentations_when_the_pipeline_is_built_moves_no_random_state_of_the_callers():
    # the attack: the build's trial of each augment step moved random's and NumPy's global states (torch's was put
    # back), so a script's own draws after train_pipeline(augment=[...]) changed with the augmentations listed
    import random

    class Mine:
        def __call__(self, x):
            random.random()
            np.random.rand()
            return x

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    want = (random.random(), float(np.random.rand()), float(torch.rand(())))
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    train_pipeline(32, augment=[v2.TrivialAugmentWide(), Mine()])
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == want
