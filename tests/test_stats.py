from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from datakit.cli import main
from datakit.datasets import open_dataset
from datakit.io import imread, imwrite
from datakit.stats import PRESETS, Stats, compute_stats
from datakit.testing import synthetic_image


def reference(folder: Path) -> tuple[np.ndarray, np.ndarray, int]:
    """float64 NumPy over every pixel of every image (decoded the same way)."""
    ds = open_dataset(folder)
    pix = np.concatenate([imread(ds.name(i), "rgb").reshape(-1, 3).astype(np.float64) for i in range(len(ds))])
    return pix.mean(0) / 255, pix.std(0) / 255, len(pix)


def test_exact_against_float64_reference(class_folder: Path):
    mean, std, n = reference(class_folder)
    for workers in (1, 2):
        st = compute_stats(class_folder, workers=workers)
        assert st.count == 12 and st.pixels == n and st.order == "RGB"
        np.testing.assert_allclose(st.mean, mean, atol=1e-12)
        np.testing.assert_allclose(st.std, std, atol=1e-12)
        np.testing.assert_allclose(st.mean_255, mean * 255, atol=1e-9)


def test_pixel_weighted_not_average_of_image_stds(tmp_path: Path):
    from datakit.io import imwrite

    for i, value in enumerate((0, 255)):  # each image is flat (std 0), the dataset is not
        (tmp_path / f"c{i}").mkdir()
        imwrite(tmp_path / f"c{i}" / "平.png", np.full((10, 30 if i else 10, 3), value, np.uint8))
    st = compute_stats(tmp_path, workers=1)
    assert st.pixels == 400 and st.mean == [0.75] * 3  # 300 of the 400 pixels are 255
    assert st.std == [pytest.approx(np.sqrt(0.75 * 0.25))] * 3  # the average of per-image stds would be 0


def test_from_histogram_exact():
    hist = np.zeros((3, 256), np.int64)
    hist[:, 0], hist[:, 255] = 1, 1  # half 0, half 255
    st = Stats.from_histogram(hist, 1)
    assert st.mean == [0.5] * 3 and st.std == [0.5] * 3 and st.pixels == 2


def test_resize_and_sample(class_folder: Path):
    st = compute_stats(class_folder, size=(8, 6), workers=1)
    assert st.pixels == 12 * 48
    est = compute_stats(class_folder, sample=6, workers=1)
    assert est.count == 6 and len(est.stderr_mean) == 3 and all(e > 0 for e in est.stderr_std)
    full = compute_stats(class_folder, workers=1)
    assert all(abs(a - b) < 6 * e + 1e-3 for a, b, e in zip(est.mean, full.mean, est.stderr_mean))


def test_sample_and_seed_are_refused_before_any_image_is_read(class_folder: Path):
    from datakit.errors import UsageError

    # the attack: compute_stats(sample=6, seed=None) decoded every sampled image, then failed in the bootstrap with
    # "unsupported operand type(s) for +: 'NoneType' and 'int'"; seed=-1 and sample=2.5 gave NumPy's errors
    for kw, said in (({"sample": 6, "seed": None}, "seed must be a whole number >= 0, got None"),
                     ({"sample": 6, "seed": -1}, "seed must be a whole number >= 0, got -1"),
                     ({"sample": 2.5}, "sample must be a whole number of images (or None: every image), got 2.5"),
                     ({"sample": True}, "sample must be a whole number of images (or None: every image), got True")):  # fmt: skip
        with pytest.raises(UsageError) as e:
            compute_stats(class_folder, workers=0, **kw)
        assert str(e.value) == said
    # NumPy's integers are whole numbers too, read as Python's (np.uint8(255) + 1 wrapped to the bootstrap seed 0)
    for seed in (np.uint8(255), np.int64(2**63 - 1)):
        got = compute_stats(class_folder, workers=0, sample=np.int64(6), seed=seed)
        assert got.stderr_mean == compute_stats(class_folder, workers=0, sample=6, seed=int(seed)).stderr_mean


def test_a_sample_as_large_as_the_dataset_says_the_statistics_are_exact(class_folder: Path, caplog):
    full = compute_stats(class_folder, workers=1)
    with caplog.at_level(logging.WARNING, logger="datakit"):
        st = compute_stats(class_folder, sample=5000, workers=1)
    assert [r.getMessage() for r in caplog.records] == [
        "sample=5000 (--sample) is not fewer than the 12 images: every image is read, the statistics are exact (no "
        "standard errors)"
    ]
    assert st.mean == full.mean and st.std == full.std and st.stderr_mean is None


def test_bgr_dataset_reports_order(class_folder: Path):
    st = compute_stats(open_dataset(class_folder, mode="bgr"), workers=1)
    rgb = compute_stats(class_folder, workers=1)
    assert st.order == "BGR" and np.allclose(st.mean, rgb.mean[::-1])


def test_unchanged_mode_refused_not_counted_in_the_wrong_order_or_depth(tmp_path: Path):
    # The attack: mode="unchanged" gave BGR channels labelled RGB, counted only the 16-bit values under 256, and
    # failed with a bare broadcasting error when RGBA met RGB.
    import cv2

    from datakit.errors import UsageError

    (tmp_path / "x").mkdir()
    deep = np.zeros((10, 10, 3), np.uint16)
    deep[5:] = 60000
    cv2.imwrite(str(tmp_path / "x" / "deep.png"), deep)
    with pytest.raises(UsageError) as e:
        compute_stats(open_dataset(tmp_path, mode="unchanged"), workers=0)
    assert str(e.value) == ("compute_stats counts 8-bit pixels in RGB (or BGR, gray) order; this dataset was opened "
                            "with mode='unchanged' (channels and bit depth as stored): open it with mode='rgb'")  # fmt: skip
    s = compute_stats(open_dataset(tmp_path), workers=0)  # RGB: 16 bits read as 8, as every decoder here does
    assert (s.pixels, [round(m, 6) for m in s.mean]) == (100, [round(0.5 * (60000 >> 8) / 255, 6)] * 3)


def test_presets():
    assert PRESETS["cifar10"]["std"] == (0.2470, 0.2435, 0.2616)
    assert PRESETS["imagenet_caffe"]["std"] == (1.0, 1.0, 1.0)


def test_cli_json_and_table(class_folder: Path, capsys):
    assert main(["stats", str(class_folder), "--json", "--workers", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"count", "pixels", "mean", "std", "mean_255", "std_255", "order"}
    assert main(["stats", str(class_folder), "--workers", "1"]) == 0
    text = capsys.readouterr().out
    assert "transforms.Normalize(mean=[" in text and "channel order RGB" in text
    with pytest.raises(SystemExit) as e:
        main(["stats", str(class_folder), "--size", "big"])
    assert e.value.code == 2


WORKER = r"""
import json, os, sys
import torch.distributed as dist
from datakit.stats import compute_stats
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["PORT"],
                        rank=int(os.environ["RANK"]), world_size=2)
st = compute_stats(sys.argv[1], workers=1, distributed="auto")
print(json.dumps({"count": st.count, "pixels": st.pixels, "mean": st.mean, "std": st.std}))
dist.destroy_process_group()
import os as _os, sys as _sys  # (gloo's threads, freed in the interpreter's teardown, abort it now and then)
_sys.stdout.flush(), _sys.stderr.flush()
_os._exit(0)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_equal_single_process(class_folder: Path):
    env = dict(os.environ, PORT=str(_free_port()))
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(class_folder)], env=dict(env, RANK=str(r)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in range(2)
    ]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    single = compute_stats(class_folder, workers=1)
    for out, _ in outs:
        got = json.loads(out)
        assert got["count"] == 12 and got["pixels"] == single.pixels
        assert got["mean"] == single.mean and got["std"] == single.std


def test_a_histogram_over_2_to_the_24_pixels_counts_every_pixel():
    # The attack: OpenCV's calcHist counts in float32: a 20 MP image (under the pixel budget) came out one pixel off.
    from datakit.stats import _hist_one

    class One:
        def decode(self, i):
            return np.zeros((4097, 4097, 3), np.uint8)  # 16785409 pixels: odd, past float32's whole numbers

    assert _hist_one(One(), 0)[:, 0].tolist() == [4097 * 4097] * 3


def test_to_dtype_scales_16_bit_images_as_torchvision_does():
    import torch
    from torchvision.transforms import v2

    from datakit.transforms import ToDtype

    x = torch.tensor([[[0, 32768, 65535]]], dtype=torch.uint16)
    assert torch.equal(ToDtype().image(x), v2.ToDtype(torch.float32, scale=True)(x))
    assert ToDtype().image(x).tolist() == [[[0.0, float(torch.tensor(32768 / 65535, dtype=torch.float32)), 1.0]]]


def _workers(pid: int) -> dict[int, int]:
    """The worker processes of process ``pid`` (its children forked from it: the same command line; not a
    program it runs, such as the ``ldconfig -p`` of torch's import), each with the CPU ticks it has used."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat, cmdline = (entry / "stat").read_text(), (entry / "cmdline").read_bytes()
            fields = stat[stat.rindex(")") + 2 :].split()  # after "(comm)": state, ppid, ... utime (12), stime
            if int(fields[1]) == pid and cmdline == Path(f"/proc/{pid}/cmdline").read_bytes():
                found[int(entry.name)] = int(fields[11]) + int(fields[12])
        except OSError:  # ended meanwhile
            continue
    return found


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("moment", ["a-worker-forked", "workers-decoding"])
def test_ctrl_c_prints_one_line_and_nothing_from_the_workers(tmp_path: Path, moment: str):
    # The attack: Ctrl-C in a terminal sends SIGINT to the whole process group, the stats' worker processes
    # included: each printed "Process ForkPoolWorker-1:" and a KeyboardInterrupt traceback (one from inside the
    # pool's initializer when it came as they started) around the main process's own line. One that came while a
    # worker was forked was raised in logging's at-fork hook, printed as "Exception ignored" and lost: the stats
    # ran to the end, exit 0.
    src = tmp_path / "图片"
    for i in range(300):
        (src / f"c{i % 3}").mkdir(parents=True, exist_ok=True)
        imwrite(src / f"c{i % 3}" / f"{i}.jpg", synthetic_image(24, 32, seed=i), mode="rgb")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")}
    # resized to 1024x1024, 300 images take seconds: the work is still going on when the signal comes
    cmd = [sys.executable, "-m", "datakit.cli", "stats", str(src), "--workers", "2", "--size", "1024x1024"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)  # fmt: skip

    def ready() -> bool:
        if moment == "a-worker-forked":  # at once: the parent may still be in its at-fork hooks
            return len(_workers(proc.pid)) >= 1
        ticks = _workers(proc.pid).values()  # both decoding: the pool is whole
        return len(ticks) == 2 and min(ticks) >= 2

    try:
        deadline = time.monotonic() + 120
        while not ready() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the workers never started"
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: the main process and its workers
        out, err = proc.communicate(timeout=120)  # its end of file: every worker has ended too
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert (proc.returncode, out, err) == (130, "", "datakit stats: interrupted\n")


def test_a_jpeg_with_grey_filled_in_is_refused_not_counted(tmp_path: Path, capfd):
    # the attack: a dark JPEG cut to a third, its end marker put back, decodes with grey (about 128) filled in and
    # libjpeg's bare "Corrupt JPEG data" line on stderr: stats counted it (mean 0.22 where the whole images give
    # 0.08), while check and pack-lmdb refuse the same file
    from PIL import Image

    (tmp_path / "a").mkdir()
    dark = np.random.default_rng(0).integers(0, 40, (200, 200, 3), dtype=np.uint8)
    Image.fromarray(dark).save(tmp_path / "a" / "whole.jpg", quality=95)
    data = (tmp_path / "a" / "whole.jpg").read_bytes()
    (tmp_path / "a" / "cut.jpg").write_bytes(data[: len(data) // 3] + b"\xff\xd9")
    assert main(["stats", str(tmp_path), "-q"]) == 1
    err = capfd.readouterr().err.splitlines()
    assert err == [
        f"datakit stats: error: sample 0: {tmp_path / 'a' / 'cut.jpg'}: damaged JPEG data: Corrupt JPEG data: "
        "premature end of data segment"
    ]


def test_a_gray_dataset_has_one_channel_of_statistics_that_normalise_it(class_folder: Path):
    # before: three equal channels called "RGB", which the loader then refused for the dataset's 1-channel batches
    from datakit.loader import create_loader
    from datakit.transforms import eval_pipeline

    st = compute_stats(open_dataset(class_folder, mode="gray"), workers=0)
    pixels = np.concatenate([imread(p, mode="gray").ravel() for p in sorted(class_folder.rglob("*.*"))])
    assert (st.order, st.pixels) == ("L", pixels.size)
    assert st.mean == [pixels.mean() / 255] and st.std == pytest.approx([pixels.std() / 255], rel=1e-12)
    ds = open_dataset(class_folder, mode="gray", transform=eval_pipeline(16, 20))
    x, _ = next(iter(create_loader(ds, 4, train=False, num_workers=0, device="cpu", normalize=st)))
    assert x.shape == (4, 1, 16, 16) and x.dtype.is_floating_point


GRAY_WORKER = r"""
import json, os, sys
import torch.distributed as dist
from datakit.datasets import open_dataset
from datakit.stats import compute_stats
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["PORT"],
                        rank=int(os.environ["RANK"]), world_size=2)
st = compute_stats(open_dataset(sys.argv[1], mode="gray"), workers=0, distributed="auto")
print(json.dumps({"count": st.count, "mean": st.mean, "order": st.order}))
dist.destroy_process_group()
import os as _os, sys as _sys  # (gloo's threads, freed in the interpreter's teardown, abort it now and then)
_sys.stdout.flush(), _sys.stderr.flush()
_os._exit(0)
"""


def test_gray_statistics_with_a_size_and_with_a_rank_that_gets_no_image(tmp_path: Path):
    # the attacks: a gray dataset with size= raised IndexError (OpenCV drops a one-channel image's axis); under
    # torchrun a rank that got no image summed three channels against the other's one, and gloo aborted the job
    root = tmp_path / "g"
    (root / "a").mkdir(parents=True)
    imwrite(root / "a" / "1.png", np.full((8, 6), 100, np.uint8))  # one channel: a gray PNG
    st = compute_stats(open_dataset(root, mode="gray"), workers=0, size=(4, 4))
    assert (st.order, st.pixels, st.mean) == ("L", 16, [100 / 255])
    env = dict(os.environ, PORT=str(_free_port()))
    procs = [subprocess.Popen([sys.executable, "-c", GRAY_WORKER, str(root)], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert [json.loads(o) for o, _ in outs] == [{"count": 1, "mean": [100 / 255], "order": "L"}] * 2


def test_a_flat_channel_is_warned_and_tiny_values_keep_their_digits(tmp_path: Path, capsys):
    # the attack: identical images printed std=[0.0000, ...] with exit 0 (Normalize then divides by zero), and a
    # std of 3.9e-05 printed as 0.0000
    root = tmp_path / "f"
    (root / "a").mkdir(parents=True)
    for k in range(2):
        imwrite(root / "a" / f"{k}.png", np.full((4, 4, 3), 7, np.uint8), mode="rgb")
    assert main(["stats", str(root), "-q", "--workers", "0"]) == 0
    out, err = capsys.readouterr()
    assert out == "transforms.Normalize(mean=[0.0275, 0.0275, 0.0275], std=[0.0000, 0.0000, 0.0000])\n"
    assert err == ("warning: std is 0 in channels R, G, B (every pixel the same value): normalising divides by zero "
                   "there; leave the channel out, or use std 1 for it\n")  # fmt: skip
    tiny = Stats(1, 1, [0.5, 0.5, 0.5], [3.92e-05, 0.25, 0.25])
    assert tiny.normalize_args() == "mean=[0.5000, 0.5000, 0.5000], std=[3.92e-05, 0.2500, 0.2500]"
    # the table and the 0-255 line too (a std of 1.31e-06 printed 0.0000 there, and 0.000 in the line to paste)
    assert tiny.mmdet_args() == "mean=[127.500, 127.500, 127.500], std=[0.01, 63.750, 63.750]"
    assert Stats(1, 1, [0.5] * 3, [1.31e-06] * 3).mmdet_args() == (
        "mean=[127.500, 127.500, 127.500], std=[0.000334, 0.000334, 0.000334]"
    )
    one_off = np.full((300, 300, 3), 100, np.uint8)
    one_off[0, 0] = 101
    imwrite(root / "a" / "0.png", one_off, mode="rgb")
    imwrite(root / "a" / "1.png", np.full((300, 300, 3), 100, np.uint8), mode="rgb")
    assert main(["stats", str(root), "--workers", "0"]) == 0
    out = capsys.readouterr().out
    assert "R        0.3922      9.24e-06   100.00        0.00236" in out
    assert "dict(mean=[100.000, 100.000, 100.000], std=[0.00236, 0.00236, 0.00236], to_rgb=True)" in out
    with pytest.raises(SystemExit) as e:
        main(["stats", str(root), "--size", "30000x30000"])
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "datakit stats: error: argument --size: 30000x30000 = 900000000 pixels, over the limit of 89478485 a "
        "decoded image may have (DATAKIT_MAX_PIXELS)"
    )


RANK0_ONLY = r"""
import json, os, sys
import torch.distributed as dist
from datakit.stats import compute_stats
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["PORT"],
                        rank=int(os.environ["RANK"]), world_size=2)
if dist.get_rank() == 0:
    st = compute_stats(sys.argv[1], workers=0)
    print(json.dumps({"count": st.count, "mean": st.mean}))
dist.barrier()
dist.destroy_process_group()
import os as _os, sys as _sys  # (gloo's threads, freed in the interpreter's teardown, abort it now and then)
_sys.stdout.flush(), _sys.stderr.flush()
_os._exit(0)
"""


def test_stats_on_rank_0_alone_inside_a_process_group_does_not_wait_for_the_others(class_folder: Path):
    # the attack: `if rank == 0: compute_stats(...)` then a barrier: rank 0's all-reduce met rank 1's barrier and
    # both waited for the group's timeout (30 minutes by default), then died in gloo
    env = dict(os.environ, PORT=str(_free_port()))
    procs = [subprocess.Popen([sys.executable, "-c", RANK0_ONLY, str(class_folder)], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]  # fmt: skip
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), outs
    single = compute_stats(class_folder, workers=0)
    assert json.loads(outs[0][0]) == {"count": 12, "mean": single.mean} and outs[1][0] == ""


def test_a_row_of_more_than_2_to_the_24_pixels_is_counted_exactly(tmp_path: Path):
    # the attack: a 1 x 16,777,219 image (16,777,217 zeros): calcHist's float32 bins cannot hold an odd count past
    # 2**24, and one row could not be cut: 16,777,218 pixels reported
    from datakit.stats import _hist_one

    img = np.zeros((1, 2**24 + 3), np.uint8)
    img[0, :2] = 255

    class One:
        mode = "gray"

        def decode(self, i):
            return img

    hist = _hist_one(One(), 0)
    assert hist.shape == (1, 256) and hist[0, 0] == 2**24 + 1 and hist[0, 255] == 2 and hist.sum() == 2**24 + 3


def test_stats_of_a_pack_of_several_splits_says_they_are_all_read_and_plot_needs_are_said_first(
        samples: Path, tmp_path: Path, capsys, caplog, monkeypatch):  # fmt: skip
    # the attacks: `stats sp.lmdb` (a pack keeping train/val/test) mixed all 24 samples without the word its source
    # gives; `--plot` without matplotlib failed after every image was decoded, and the statistics were lost
    pack = tmp_path / "sp.lmdb"
    assert main(["pack-lmdb", str(samples / "images"), str(pack), "--labels", str(samples / "labels.xlsx"), "-q"]) == 0
    with caplog.at_level(logging.WARNING, logger="datakit"):
        assert main(["stats", str(pack), "-q", "--workers", "0"]) == 0
        assert len(open_dataset(pack)) == 24
        assert len(open_dataset(pack, split="val")) == 3
    said = f"{pack}: its 3 splits ('train', 'val', 'test') are all read (24 samples) {{}}; pass split= (--split) to " \
           "read one, such as split='train'"  # fmt: skip
    assert caplog.messages == [said.format("into the statistics"), said.format("as one dataset")]
    capsys.readouterr()
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    read = []
    monkeypatch.setattr("datakit.stats.compute_stats", lambda *a, **k: read.append(1))
    assert main(["stats", str(pack), "--plot", str(tmp_path / "h.png")]) == 2
    assert capsys.readouterr().err == "datakit stats: error: --plot needs matplotlib: pip install matplotlib\n"
    assert read == []


def test_compute_stats_refuses_a_size_of_no_pixels_and_says_a_transform_is_not_applied(class_folder: Path, caplog):
    # the attacks: size=(0, 5) gave OpenCV's own error from a worker; a dataset's transform was silently left out
    from datakit.errors import UsageError
    from datakit.transforms import eval_pipeline

    for size in ((0, 5), (5,), "8x8", (2.5, 3)):
        with pytest.raises(UsageError) as e:
            compute_stats(open_dataset(class_folder), size=size, workers=0)
        assert str(e.value) == f"size must be (width, height), two whole numbers of pixels >= 1, got {size!r}"
    with caplog.at_level(logging.WARNING, logger="datakit"):
        st = compute_stats(open_dataset(class_folder, transform=eval_pipeline(8)), workers=0)
    assert caplog.messages == ["compute_stats reads the images as decoded (resized with size= where given); the "
                               "dataset's transform (EvalPipeline) is not applied: statistics are of the data, before "
                               "augmentation"]  # fmt: skip
    assert st.pixels == sum(h * w for h, w in [(40, 60), (50, 50), (64, 48), (30, 70)]) * 3


def test_sampled_standard_errors_shrink_as_the_sample_nears_every_image(class_folder: Path):
    # the attack: --sample 23 of 24 said +-0.040 on a mean whose error was 0.0012: the bootstrap, made for draws
    # with replacement from a population without end, took no account of the sample being nearly all of it
    few = compute_stats(class_folder, sample=3, workers=0)
    most = compute_stats(class_folder, sample=11, workers=0)
    full = compute_stats(class_folder, workers=0)
    assert sum(most.stderr_mean) < sum(few.stderr_mean) / 2  # 11 of 12: corrected by sqrt(1/11), about 0.3
    assert all(abs(a - b) <= 3 * e + 1e-9 for a, b, e in zip(most.mean, full.mean, most.stderr_mean))


def test_a_file_output_named_with_a_trailing_slash_is_refused_by_the_python_api_too(class_folder: Path, tmp_path: Path):
    # the attack: plot_histogram(s, "h.png/"), preview(ds, "p.png/") and imwrite("i.png/", ...) wrote the files
    # h.png, p.png and i.png (Path drops the '/'), where the CLI refused the same names
    from datakit.datasets import open_dataset
    from datakit.errors import UsageError
    from datakit.io import imwrite
    from datakit.preview import preview
    from datakit.stats import plot_histogram

    stats = compute_stats(class_folder, workers=0)
    for write, name in ((lambda p: plot_histogram(stats, p), "h.png/"),
                        (lambda p: preview(open_dataset(class_folder), p), "p.png/"),
                        (lambda p: imwrite(p, np.zeros((4, 4, 3), np.uint8)), "i.png/"),
                        (lambda p: imwrite(os.fsencode(p), np.zeros((4, 4, 3), np.uint8)), "b.png/")):  # fmt: skip
        with pytest.raises(UsageError) as e:
            write(f"{tmp_path}/{name}")
        assert str(e.value) == f"{tmp_path}/{name}: names a folder (it ends with '/'); give a file name"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["数据 集"]
