from __future__ import annotations

import math
import warnings

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
    assert OneHot(4)(2).tolist() == [0, 0, 1, 0]
    assert OneHot(3)(torch.tensor([0, 2])).shape == (2, 3)
    with pytest.raises(ValueError, match=r"OneHot\(3\): label \[3\] outside 0..2"):
        OneHot(3)([3])


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
    ours = torch.from_numpy(Resize((100, 150))(img)).permute(2, 0, 1).float()
    ref = v2.functional.resize(torch.from_numpy(img).permute(2, 0, 1), [100, 150], antialias=True).float()
    # INTER_AREA (box) against torchvision's antialiased bilinear (triangle) on a noisy image
    assert (ours - ref).abs().mean() < 3.5


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
    out = train_pipeline(224, normalize=False)(img)
    assert out.shape == (3, 224, 224) and out.dtype == torch.uint8
    ev = eval_pipeline(224, 256)(img)
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

    data = encode_image(synthetic_image(1600, 2400), ".jpg", 92, mode="rgb")
    pipe = train_pipeline(224, scale=(0.6, 0.6), ratio=(4 / 3, 4 / 3), normalize=False)  # 1752x1314 crops
    seen = []
    real = dio.decode_image
    monkeypatch.setattr(dio, "decode_image", lambda *a, **k: seen.append(k.get("max_size")) or real(*a, **k))
    torch.manual_seed(5)
    fast = pipe.from_bytes(data, "rgb", "big.jpg")
    monkeypatch.undo()
    assert seen == [600]  # 2400 / 4: decoded at 1/4 scale, the crop still 438x328 there
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
