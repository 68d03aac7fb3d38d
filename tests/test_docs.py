"""The examples of docs/*.md, run as written, so the documentation cannot drift from the code.

Each ```bash block runs with `set -euo pipefail`; the ```python blocks of one page run in document
order in one interpreter (a page's later blocks use the names its first one imports), in a folder
holding what they name: 数据集.zip and old.zip (legacy-encoded names), data/images and data/train,
labels.xlsx, a PaddleClas list, train.lmdb and two shards, 数据/猫 01.jpg, a 4000 x 3000 huge.jpg.
After a page's blocks, a few lines check what they made, with exact values. A block that needs a
GPU (``cuda``) runs whole only where CUDA is (the ``gpu`` tests); elsewhere only its definitions
are run (a script's ``main()`` under ``if __name__ == "__main__":``), or nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from test_readme import FENCE, ROOT, _env, fenced_blocks

from datakit.archive import unzip
from datakit.pack import pack_lmdb

DOCS = ROOT / "docs"
RUN = ("bash", "python")
LANGUAGES = (*RUN, "json", "")  # a bare fence is output or a transcript: shown, not run

# what each page's examples must have left, checked in the namespace of its python blocks
CHECKS = {
    "archive.md": """
        assert {"cat", "coffee", "太空"} <= set(os.listdir("data"))  # unzip-gbk 数据集.zip -d data
        assert sorted(os.listdir("写真")) == ["犬_02.jpg", "猫_01.jpg"]  # old.zip, forced to CP932
        assert data == open("data/cat/猫_01.jpg", "rb").read() and len(ds) == 24 and ds.classes == ["cat", "coffee", "太空"]
    """,
    "datasets.md": """
        assert len(ds) == 48 and target == 0 and img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3
        assert os.path.getsize("grid.png") > 0
    """,
    "io.md": """
        assert img.shape == cv2.imdecode(np.fromfile("数据/cat.jpg", np.uint8), cv2.IMREAD_COLOR).shape and small.shape == (750, 1000, 3)  # 1/4: 500 < 512
        assert (imread("结果.png", mode="rgb") == img).all()
        assert crop.shape == (80, 100, 3) and (crop == decode_image(data, "rgb")[10:90, 20:120]).all()
    """,
    "loader.md": """
        assert callable(main)
        assert loader.state_dict()["samples"] == 24
        images, labels = next(iter(loader))
        assert images.dtype == torch.uint8 and tuple(images.shape) == (24, 3, 224, 224) and labels.dtype == torch.int64
        import json

        record = json.load(open("runs/exp1/bad_samples.json", encoding="utf-8"))  # its folder made, as said
        assert (record["samples"], record["count"], record["bad"]) == (24, 0, [])
    """,
    "stats-transforms-collate.md": """
        assert os.path.getsize("hist.png") > 0
    """,
}
GPU_CHECKS = {"devices.md": "assert str(model.weight.device) == 'cuda:0'"}


def docs_blocks(page: str) -> list[tuple[str, int, str]]:
    return fenced_blocks((DOCS / page).read_text(encoding="utf-8"))


def _workspace(tmp: Path) -> None:
    """What the docs' examples name, made from samples/."""
    shutil.copytree(ROOT / "samples", tmp / "samples")
    shutil.copy(ROOT / "samples" / "images.zip", tmp / "数据集.zip")
    shutil.copy(ROOT / "samples" / "labels.xlsx", tmp / "labels.xlsx")
    unzip(tmp / "数据集.zip", tmp / "data" / "images")
    shutil.copytree(tmp / "data" / "images", tmp / "data" / "train")
    lines = []
    for c, name in enumerate(sorted(os.listdir(tmp / "data" / "train"))):
        lines += [f"train/{name}/{f} {c}" for f in sorted(os.listdir(tmp / "data" / "train" / name))]
    (tmp / "data" / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cats = sorted((tmp / "data" / "train" / "cat").glob("*.jpg"))

    class CP932(zipfile.ZipInfo):  # a name stored as CP932 bytes, without the UTF-8 flag
        def _encodeFilenameFlags(self):
            return self.filename.encode("cp932"), self.flag_bits

    with zipfile.ZipFile(tmp / "old.zip", "w") as z:
        for name, src in zip(["写真/猫_01.jpg", "写真/犬_02.jpg"], cats):
            z.writestr(CP932(name), src.read_bytes())
    (tmp / "数据").mkdir()
    shutil.copy(cats[0], tmp / "数据" / "猫 01.jpg")
    shutil.copy(cats[0], tmp / "数据" / "cat.jpg")  # the same image under an ASCII file name, to compare with
    small = (np.random.default_rng(0).random((30, 40, 3)) * 255).astype(np.uint8)
    cv2.imwrite(str(tmp / "huge.jpg"), cv2.resize(small, (4000, 3000), interpolation=cv2.INTER_CUBIC))
    pack_lmdb(tmp / "data" / "train", tmp / "train.lmdb", workers=1)
    (tmp / "packs").mkdir()
    pack_lmdb(tmp / "data" / "train", tmp / "packs" / "train-0.lmdb", workers=1)
    pack_lmdb(tmp / "data" / "images", tmp / "packs" / "train-1.lmdb", workers=1)


_RUNNER = """
import os, sys
import cv2, numpy as np, torch

def main_blocks():
    ns = {"__name__": "__main__", "os": os, "np": np, "cv2": cv2, "torch": torch}
    for line, body, whole in BLOCKS:
        if not whole:  # a GPU script where there is none: its definitions only
            ns["__name__"] = "docs"
        exec(compile(body, PAGE + ":" + str(line), "exec"), ns)
        ns["__name__"] = "__main__"
    exec(compile(CHECK, PAGE + " (checks)", "exec"), ns)
    print("checked", PAGE)

if __name__ == "__main__":  # spawned workers import this file again: they run nothing
    main_blocks()
"""


def _run_page(page: str, tmp: Path, gpu: bool) -> int:
    env = _env(tmp)
    ran = 0
    blocks = []
    for lang, line, body in docs_blocks(page):
        if lang not in RUN:
            continue
        needs_gpu = "cuda" in body
        if lang == "bash":
            proc = subprocess.run(["bash", "-c", "set -euo pipefail\n" + body], cwd=tmp, env=env,
                                  capture_output=True, text=True, timeout=600)  # fmt: skip
            assert proc.returncode == 0, (
                f"docs/{page} line {line}: exit {proc.returncode}\n{body}\n{proc.stderr[-4000:]}"
            )
            assert "Traceback" not in proc.stderr, f"docs/{page} line {line}: a traceback\n{proc.stderr[-4000:]}"
            ran += 1
        elif needs_gpu and not gpu and 'if __name__ == "__main__":' not in body:
            continue  # a GPU at the top level of the block: for the gpu tests
        else:
            blocks.append((line, body, gpu or not needs_gpu))
    check = (GPU_CHECKS if gpu else CHECKS).get(page)
    if blocks or check:
        script = tmp / f"docs_{page.replace('.', '_').replace('-', '_')}.py"
        script.write_text(f"BLOCKS = {blocks!r}\nPAGE = {'docs/' + page!r}\nCHECK = {textwrap.dedent(check or '')!r}\n"
                          + _RUNNER, encoding="utf-8")  # fmt: skip
        site = tmp / "spawn-site"  # workers started by spawn, as on macOS and Windows
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text("import multiprocessing\nmultiprocessing.set_start_method('spawn')\n")
        run_env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))}
        proc = subprocess.run([sys.executable, str(script)], cwd=tmp, env=run_env, capture_output=True, text=True,
                              timeout=600)  # fmt: skip
        assert proc.returncode == 0 and f"checked docs/{page}" in proc.stdout, (
            f"docs/{page}: the python blocks at lines {[b[0] for b in blocks]} exited {proc.returncode}\n"
            f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
        )
        ran += len(blocks)
    return ran


def test_every_docs_block_names_a_known_language():
    unknown = [f"docs/{p.name} line {line}: ```{lang}" for p in sorted(DOCS.glob("*.md"))
               for lang, line, _ in fenced_blocks(p.read_text(encoding="utf-8")) if lang not in LANGUAGES]  # fmt: skip
    assert unknown == [], "give each fenced block one of " + ", ".join(map(repr, LANGUAGES))
    assert FENCE.pattern.startswith("^```")


def test_every_page_with_examples_is_checked():
    with_examples = {p.name for p in DOCS.glob("*.md") if any(lang in RUN for lang, _, _ in docs_blocks(p.name))}
    assert with_examples == set(CHECKS) | set(GPU_CHECKS)


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(CHECKS))
def test_docs_examples_run_as_written(page: str, tmp_path: Path):
    _workspace(tmp_path)
    assert _run_page(page, tmp_path, gpu=False) >= 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("page", ["devices.md", "loader.md"])
def test_docs_gpu_examples_run_as_written(page: str, tmp_path: Path):
    if page == "devices.md" and torch.cuda.device_count() < 2:
        pytest.skip('select_gpus("1") needs a second GPU')
    _workspace(tmp_path)
    assert _run_page(page, tmp_path, gpu=True) >= 1
