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
