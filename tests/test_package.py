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
