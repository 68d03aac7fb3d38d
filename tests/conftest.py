"""Shared fixtures: real image files with non-ASCII names, built in tmp_path."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from datakit.io import imwrite
from datakit.testing import synthetic_image

SAMPLES = Path(__file__).resolve().parents[1] / "samples"

# A shell's background job (`make test &`, `nohup make test &`) starts with SIGINT ignored: Python then never raises
# KeyboardInterrupt, in this process nor in the programs the tests start (an ignored signal stays ignored across
# exec; a handled one is reset to the default). The Ctrl-C tests need SIGINT as a terminal gives it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _private_tmpdir(tmp_path_factory):
    """TMPDIR under pytest's own base folder, for this process and every program the tests start: what a killed
    worker or torchrun leaves behind (multiprocessing's pymp-*, torchelastic_*) goes with pytest's old runs."""
    folder = tmp_path_factory.mktemp("tmpdir")
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = None
    yield folder
    if before is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before
    tempfile.tempdir = None


@pytest.fixture
def samples(tmp_path: Path) -> Path:
    """A private copy of the committed samples/ folder."""
    dst = tmp_path / "samples"
    shutil.copytree(SAMPLES, dst)
    return dst


@pytest.fixture
def class_folder(tmp_path: Path) -> Path:
    """Three class folders (one Chinese) with 4 images each, sizes differing, names non-ASCII."""
    root = tmp_path / "数据 集"
    sizes = [(40, 60), (50, 50), (64, 48), (30, 70)]
    for c, cls in enumerate(["cat", "dog", "鸟"]):
        (root / cls).mkdir(parents=True)
        for i, (h, w) in enumerate(sizes):
            img = synthetic_image(h, w, seed=c * 10 + i)
            ext = ".png" if i % 2 else ".jpg"
            imwrite(root / cls / f"图片_{i}{ext}", img, mode="rgb")
    return root


def rgb_blocks(h: int = 32, w: int = 48) -> np.ndarray:
    """An RGB image whose left third is pure red, middle green, right blue."""
    img = np.zeros((h, w, 3), np.uint8)
    img[:, : w // 3, 0] = 255
    img[:, w // 3 : 2 * w // 3, 1] = 255
    img[:, 2 * w // 3 :, 2] = 255
    return img


class PassThrough(torch.utils.data.Dataset):
    """A dataset of the caller's around another, as users write them: ``__getitem__`` and ``__len__`` passed on."""

    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        return self.inner[i]
