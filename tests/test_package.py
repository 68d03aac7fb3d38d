"""The package's surface: every lazily loaded name visible to type checkers, the py.typed marker
shipped, and ``import datakit`` staying light."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import datakit

ROOT = Path(__file__).resolve().parents[1]


def test_type_checking_imports_match_the_lazy_names():
    tree = ast.parse((ROOT / "datakit" / "__init__.py").read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    seen = {a.name: imp.module.removeprefix("datakit.") for imp in block.body for a in imp.names}
    assert seen == datakit._LAZY
    assert set(datakit.__all__) == set(datakit._LAZY) | {
        "ArchiveError", "DataError", "DatakitError", "ImageDecodeError", "LabelError", "PackError", "SampleError",
        "UsageError", "__version__", "decode_image", "encode_image", "imread", "imwrite", "select_gpus",
    }  # fmt: skip
    for name in datakit.__all__:
        assert getattr(datakit, name) is not None


def test_python_m_datakit_is_the_datakit_command_and_unzip_gbk_says_its_version():
    # the attack: `python -m datakit --version` (where the script is not on the PATH) was "No module named
    # datakit.__main__", and `unzip-gbk --version` "the following arguments are required: archive"
    import runpy

    from datakit import __version__

    proc = subprocess.run([sys.executable, "-m", "datakit", "--version"], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"datakit {__version__}\n", "")
    proc = subprocess.run([sys.executable, "-m", "datakit", "info"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.splitlines()[-1].startswith("datakit info: error: ")
    proc = subprocess.run([sys.executable, "-c", "import sys; from datakit.cli import unzip_gbk_main; "
                           "sys.exit(unzip_gbk_main(['--version']))"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, f"unzip-gbk (datakit {__version__})\n")
    # a worker started by spawn imports the main module as __mp_main__: it must not run the command again
    assert runpy.run_module("datakit.__main__", run_name="__mp_main__")["__name__"] == "__mp_main__"


def test_py_typed_is_shipped():
    assert (ROOT / "datakit" / "py.typed").is_file()
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["datakit"]


def test_import_and_cli_parsing_stay_light():
    code = (
        "import sys, datakit, datakit.cli\n"
        "datakit.cli.build_parser()\n"
        "print(sorted(m for m in ('torch', 'cv2', 'pandas', 'lmdb') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_pack_and_check_run_without_torch(tmp_path: Path):
    # the command-line tools read samples through datakit.sources: importing torch would cost them over a second
    code = (
        "import sys\n"
        "from datakit.cli import main\n"
        f"assert main(['pack-lmdb', 'samples/images', {str(tmp_path / 'p.lmdb')!r}, '-q']) == 0\n"
        "assert main(['check', 'samples/images', '-q']) == 0\n"
        "print(sorted(m for m in ('torch', 'torchvision') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_datasets_are_torch_datasets_made_of_the_torch_free_sources():
    from torch.utils.data import ConcatDataset, Dataset

    from datakit import sources
    from datakit.datasets import FolderDataset, LmdbDataset, TableDataset, ZipDataset, open_dataset

    ds = open_dataset(ROOT / "samples" / "images")
    assert type(ds) is FolderDataset and isinstance(ds, Dataset) and isinstance(ds, sources.ImageDataset)
    assert isinstance(ds + ds, ConcatDataset) and len(ds + ds) == 2 * len(ds)
    for cls in (FolderDataset, LmdbDataset, TableDataset, ZipDataset):
        assert issubclass(cls, Dataset) and issubclass(cls, getattr(sources, cls.__name__))
    plain = sources.open_source(ROOT / "samples" / "images")
    assert type(plain) is sources.FolderDataset and not isinstance(plain, Dataset)
    assert plain.read(3) == ds.read(3) and plain[3][1] == ds[3][1]


def test_ctrl_c_while_a_command_loads_is_one_line():
    # the attack: Ctrl-C in the first fraction of a second of `datakit stats ...`, while the parser is built and
    # NumPy loads: a 20-line traceback ending in KeyboardInterrupt, where a running command prints one line and
    # exits 130. Here that import itself is interrupted; `import datakit` and `import datakit.cli` load no NumPy
    code = (
        "import sys\n"
        "class Interrupts:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'numpy':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupts())\n"
        "from datakit.cli import main\n"
        "sys.exit(main(['stats', 'x']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert (out.returncode, out.stdout, out.stderr) == (130, "", "datakit stats: interrupted\n")  # as it ends later


def test_an_interrupted_start_names_the_command_as_its_later_lines_do():
    # the attack: Ctrl-C in the first 0.3 s of `datakit check DIR` printed "datakit: interrupted", where the same
    # key a second later prints "datakit check: interrupted"
    from datakit._entry import prog_of

    assert prog_of(["check", "data"]) == "datakit check"
    assert prog_of(["-q", "pack-lmdb", "a", "b"]) == "datakit pack-lmdb"
    assert prog_of(["--version"]) == prog_of(["nonsense"]) == prog_of([]) == "datakit"


def test_ctrl_c_while_numpy_loads_at_a_commands_start_ends_in_one_line():
    # the attack: Ctrl-C 0.1 s into `unzip-gbk big.zip`, as NumPy loaded for the work: NumPy turned
    # the KeyboardInterrupt inside its C import into an ImportError ("PyCapsule_Import could not import module
    # datetime"), a traceback and exit 1. The signal here comes exactly then, from the import itself
    code = (
        "import os, signal, sys\n"
        "class Interrupts:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'numpy':\n"
        "            try:  # as NumPy's C import does with a KeyboardInterrupt that lands inside it\n"
        "                os.kill(os.getpid(), signal.SIGINT)\n"
        "                signal.pause()\n"
        "            except KeyboardInterrupt:\n"
        "                raise ImportError('PyCapsule_Import could not import module \"datetime\"') from None\n"
        "sys.meta_path.insert(0, Interrupts())\n"
        "from datakit._entry import unzip_gbk\n"
        "sys.argv = ['unzip-gbk', 'x.zip', '-l']\n"
        "sys.exit(unzip_gbk())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert (out.returncode, out.stdout, out.stderr) == (130, "", "unzip-gbk: interrupted\n")


def test_arguments_as_other_libraries_take_them_are_refused_by_name(class_folder: Path, tmp_path: Path):
    # the attacks: each of these went on silently wrong (a string taken for True, an out-of-range seed written into
    # PYTHONHASHSEED), hung, or died far inside torch, numpy or pathlib with a message naming no argument
    import os

    import numpy as np
    import pandas as pd
    import torch

    from datakit import UsageError, compute_stats, create_loader, decode_image, open_dataset, read_labels
    from datakit.loader import seed_everything
    from datakit.transforms import Normalize, Resize, eval_pipeline, train_pipeline

    hashseed = os.environ.get("PYTHONHASHSEED")
    for seed, shown in ((-1, "-1"), (2**40, "1099511627776"), ("0", "'0'"), (1.5, "1.5")):
        with pytest.raises(UsageError) as e:
            seed_everything(seed)
        assert str(e.value) == f"seed must be a whole number in 0..4294967295 (PYTHONHASHSEED's range), got {shown}"
    assert os.environ.get("PYTHONHASHSEED") == hashseed  # nothing changed by a refused seed
    table = tmp_path / "labels.csv"
    table.write_text("file,label\n" + "".join(f"{p.relative_to(class_folder)},{k + 1}\n"
                                              for k, p in enumerate(sorted(class_folder.rglob("*.*"))[:3])))  # fmt: skip
    for name in ("remap_labels", "include_hidden"):
        with pytest.raises(UsageError, match=rf"^{name} must be True or False, got 'no'$"):
            open_dataset(table, root=class_folder, **{name: "no"})
        with pytest.raises(UsageError, match=rf"^{name} must be True or False, got 'no'$"):
            read_labels(table, **{name: "no"})
    with pytest.raises(UsageError, match=r"^transform must be a function or a transform object \(or None\), got 5$"):
        open_dataset(class_folder, transform=5)
    with pytest.raises(UsageError, match=r"^labels= is the path of a label table .* got a DataFrame; save it first"):
        open_dataset(class_folder, labels=pd.DataFrame({"file": ["a.png"], "label": ["cat"]}))
    with pytest.raises(UsageError, match=r"^sheets must be a sheet's name or a list of names, got 0$"):
        read_labels(tmp_path / "labels.xlsx", sheets=0)
    with pytest.raises(UsageError, match=r"^sep must be one character .* got '\\\\s\+' \(a text table is read by"):
        read_labels(table, sep=r"\s+")
    with pytest.raises(UsageError, match=r"^distributed must be 'auto', True or False, got 'no'$"):
        compute_stats(class_folder, distributed="no")
    with pytest.raises(UsageError, match=r"^workers must be a whole number >= 0 .* got 'auto'$"):
        compute_stats(class_folder, workers="auto")
    with pytest.raises(UsageError, match=r"^progress must be a function called with \(done, total\), or None"):
        compute_stats(class_folder, workers=0, progress=True)
    ds = open_dataset(class_folder, transform=train_pipeline(np.int64(16)))  # NumPy's integers are integers
    assert tuple(ds[0][0].shape) == (3, 16, 16)
    assert Resize(np.int64(8)).output_size(20, 40) == (8, 16)  # the shorter side, not an 8x8 square
    with pytest.raises(ValueError, match=r"^train_pipeline: size 12000x12000 = 144000000 pixels a crop, over"):
        train_pipeline(12000)
    with pytest.raises(ValueError, match=r"^size must be whole numbers of pixels, got \(224\.0, 224\.0\)$"):
        eval_pipeline((224.0, 224.0))
    with pytest.raises(ValueError, match=r"^mean and std must be lists of numbers, one per channel, got mean "):
        Normalize("imagenet", "imagenet")
    with pytest.raises(UsageError, match=r"^decode_image decodes a file's bytes .* got 'PosixPath'; for a path use"):
        decode_image(table)
    with pytest.raises(UsageError, match=r"got an array of int64, shape \(3,\); for a path use imread"):
        decode_image(np.array([1, 2, 3]))
    # what the checks must still take: sheet names as pandas gives them, bytes in any buffer, NumPy's flags
    import mmap

    with pytest.raises(FileNotFoundError):  # (past the sheets check: the workbook is not there)
        read_labels(tmp_path / "labels.xlsx", sheets=pd.Index(["train", "val"]))
    raw = (class_folder / "cat" / "图片_0.jpg").read_bytes()
    with open(class_folder / "cat" / "图片_0.jpg", "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert decode_image(m).shape == decode_image(raw).shape == (40, 60, 3)
    assert decode_image(np.frombuffer(raw, np.int8).reshape(1, -1)).shape == (40, 60, 3)
    assert compute_stats(class_folder, workers=0, distributed=np.False_).count == 12
    loader = create_loader(torch.utils.data.TensorDataset(torch.arange(12)), 5, num_workers=0, drop_last=1)
    assert [len(b[0]) for b in loader] == [5, 5]  # 1 is True, as torch's DataLoader would not take it
