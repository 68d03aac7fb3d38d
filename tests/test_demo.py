"""``make demo`` (tools/demo.py) on the committed samples: it runs, and its outputs stay to be inspected."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_demo(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """As ``make demo`` runs it: ``python tools/demo.py samples`` from the folder that holds both."""
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    for name in ("tools", "samples"):
        if not (cwd / name).exists():
            (cwd / name).symlink_to(ROOT / name, target_is_directory=True)
    return subprocess.run([sys.executable, "tools/demo.py", "samples", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip


@pytest.mark.slow
def test_demo_runs_every_step_keeps_its_outputs_and_replaces_only_its_own_folder(tmp_path: Path):
    proc = run_demo(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    steps = [line for line in out.splitlines() if line.startswith("== step ")]
    assert [s.split(":")[0] for s in steps] == [f"== step {k} of 8" for k in range(1, 9)]
    assert "names decoded as gbk: 27 names in the archive (24 files and 3 folders)" in out
    assert "extracted 24 files; the same names as samples/images: yes" in out
    assert "24 samples, 0 problems" in out and "verify: every checksum and decode checked, 0 problems" in out
    assert "vs (1)" not in out and "of (5)" not in out and "3. datakit" not in out
    assert "pipeline  " in out and "vs torchvision v1" in out
    demo = tmp_path / "demo-out"
    assert sorted(p.name for p in (demo / "images").iterdir()) == ["cat", "coffee", "太空"]
    assert (demo / "train.lmdb" / "data.mdb").is_file()
    assert (demo / "preview.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.rstrip().endswith(
        "Try: datakit info demo-out/train.lmdb; datakit check demo-out/images --labels samples/labels.xlsx"
    )
    # run again, it replaces its own folder (a file left in it goes); a folder it did not write is refused
    (demo / "images" / "stale.txt").write_text("from an earlier run", encoding="utf-8")
    again = run_demo(tmp_path, "--no-bench")
    assert again.returncode == 0, again.stderr
    assert not (demo / "images" / "stale.txt").exists() and "step 8" not in again.stdout
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "keep.txt").write_text("not the demo's", encoding="utf-8")
    refused = run_demo(tmp_path, "--out", str(theirs))
    assert refused.returncode == 2 and refused.stdout == ""
    assert (
        refused.stderr
        == f"demo: error: {theirs}: exists and was not written by the demo; pass --out with another folder\n"
    )
    assert (theirs / "keep.txt").read_text(encoding="utf-8") == "not the demo's"
