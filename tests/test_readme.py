"""The README's commands, run as a newcomer runs them, so the README cannot drift from the code.

Every fenced block of README.md carries a language. ```bash and ```python blocks run in document
order in one temporary folder prepared from samples/ as the README says (``.venv`` there is this
environment, so ``source .venv/bin/activate`` works; shell lines run with its ``bin/`` on PATH).
```sh blocks download (make, pip from an index) and are checked against the repository instead:
the make targets exist, the constraints pin PyTorch, and the wheel they build installs and runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from test_region import HEADERS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RUN = ("bash", "python")
LANGUAGES = (*RUN, "sh", "text")
FENCE = re.compile(r"^```(\S*)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def fenced_blocks(text: str) -> list[tuple[str, int, str]]:
    """``(language, first line number, body)`` of every fenced block of a Markdown text."""
    return [(m.group(1), text.count("\n", 0, m.start()) + 2, m.group(2)) for m in FENCE.finditer(text)]


def readme_blocks() -> list[tuple[str, int, str]]:
    return fenced_blocks(README.read_text(encoding="utf-8"))


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    # datakit from this checkout, as an editable install would give it
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["DATAKIT_CACHE"] = str(tmp / ".cache")  # num_workers measurements stay in the folder
    env["PYTHONIOENCODING"] = "utf-8"
    env.pop("DATAKIT_NUM_WORKERS", None)
    return env


def test_fenced_blocks_parse_language_line_and_body():
    text = "intro\n\n```bash\necho 1\necho 2\n```\n\ntext\n```python\nprint(3)\n```\n"
    assert fenced_blocks(text) == [("bash", 4, "echo 1\necho 2\n"), ("python", 10, "print(3)\n")]


def test_every_block_names_a_known_language():
    blocks = readme_blocks()
    unknown = [f"README.md line {line}: ```{lang}" for lang, line, _ in blocks if lang not in LANGUAGES]
    assert unknown == [], "give each fenced block one of " + ", ".join(LANGUAGES)
    assert {lang for lang, _, _ in blocks} >= {"bash", "python", "sh"}


@pytest.mark.slow
def test_readme_runs_on_the_samples(tmp_path: Path):
    """Each ```bash and ```python block, in order, in a folder holding the clone's samples/ and .venv."""
    shutil.copytree(ROOT / "samples", tmp_path / "samples")
    os.symlink(Path(sys.prefix), tmp_path / ".venv", target_is_directory=True)
    env = _env(tmp_path)
    ran = 0
    for lang, line, body in readme_blocks():
        if lang not in RUN:
            continue
        run_env = env
        if lang == "bash":
            cmd = ["bash", "-c", "set -euo pipefail\n" + body]
        else:  # a script of its own, run where workers start by spawn (macOS, Windows): each imports it again
            script = tmp_path / f"readme_{line}.py"
            script.write_text(body, encoding="utf-8")
            site = tmp_path / "spawn-site"
            site.mkdir(exist_ok=True)
            (site / "sitecustomize.py").write_text(
                "import multiprocessing\nmultiprocessing.set_start_method('spawn')\n"
            )
            run_env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))}
            cmd = [sys.executable, str(script)]
        proc = subprocess.run(cmd, cwd=tmp_path, env=run_env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (
            f"README.md line {line}: the ```{lang} block exited {proc.returncode}\n{body}\n"
            f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
        )
        assert "Traceback" not in proc.stderr, f"README.md line {line}: a traceback\n{proc.stderr[-4000:]}"
        ran += 1
    assert ran >= 5
    # what the README promises the commands leave behind
    assert sorted(p.name for p in (tmp_path / "data" / "images").iterdir()) == ["cat", "coffee", "太空"]
    assert (tmp_path / "grid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "train.lmdb" / "data.mdb").is_file()


def _sh_lines() -> list[tuple[int, str]]:
    out = []
    for lang, line, body in readme_blocks():
        if lang == "sh":
            for k, text in enumerate(body.splitlines()):
                command = text.split("#", 1)[0].strip()
                if command:
                    out.append((line + k, command))
    return out


def test_sh_blocks_name_real_make_targets_and_files():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", makefile, re.M))
    lines = _sh_lines()
    assert lines, "the README shows no install commands"
    for line, command in lines:
        words = command.split()
        if words[0] == "make":
            missing = [t for t in words[1:] if t not in targets]
            assert missing == [], f"README.md line {line}: no make target {missing}"
        if "-c" in words:
            constraints = words[words.index("-c") + 1]
            assert Path(constraints).name == "constraints.txt", f"README.md line {line}: {constraints}"
        if "venv" in words:
            assert words[-1] == re.search(r"^VENV := (\S+)", makefile, re.M).group(1), f"README.md line {line}"
    pins = (ROOT / "constraints.txt").read_text(encoding="utf-8")
    assert re.search(r"^torch==\d", pins, re.M) and re.search(r"^torchvision==\d", pins, re.M)


@pytest.mark.slow
def test_wheel_the_readme_builds_installs_and_runs(tmp_path: Path):
    """``pip wheel --no-deps -w dist path/to/datakit``, then the wheel alone gives both commands."""
    wheel_line = next((c for _, c in _sh_lines() if c.startswith("pip wheel")), None)
    assert wheel_line is not None, "the README shows how to build a wheel"
    assert "--no-deps" in wheel_line.split() and "-w dist" in wheel_line
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", ".git", "*.egg-info", "build", "dist",
                                                              "__pycache__", ".*cache", "demo-out", "bench-data", "*.so"))  # fmt: skip
    env = _env(tmp_path)
    env["PYTHONPATH"] = ""
    # offline: the build backend of this environment instead of a downloaded one
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
             "-w", str(tmp_path / "dist"), str(src)]  # fmt: skip
    proc = subprocess.run(build, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("datakit-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        entry_points = next(zf.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "datakit/cli.py" in names and "datakit/datasets.py" in names
    compiled = [n for n in names if n.startswith("datakit/_jpegregion") and n.endswith(".so")]
    assert len(compiled) == (1 if HEADERS else 0)  # built where it can be
    assert not any(n.startswith(("tests/", "samples/", "tools/")) for n in names)
    assert "datakit = datakit._entry:datakit" in entry_points
    assert "unzip-gbk = datakit._entry:unzip_gbk" in entry_points
    target = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(target), str(wheel)]
    proc = subprocess.run(install, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    env["PYTHONPATH"] = str(target)
    probe = ("import datakit, datakit.cli, datakit.io; print(datakit.__file__); "
             "print(datakit.io.region_decoder_available()); datakit.cli.main(['--version'])")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith(str(target))
    assert proc.stdout.splitlines()[1] == str(bool(compiled))
    assert re.fullmatch(r"datakit \d+\.\d+\.\d+", proc.stdout.splitlines()[2])
