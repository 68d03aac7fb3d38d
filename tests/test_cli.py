"""The CLI as a user runs it: every subcommand in a real subprocess (``python -m datakit.cli`` and
the console scripts), exit codes by error type, one line per problem and no traceback, the --json
schemas, -q, refusal to overwrite, file permissions, help text, and rank 0 alone speaking under
two real gloo ranks."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from datakit.cli import build_parser, main
from datakit.errors import UsageError
from datakit.io import imwrite
from datakit.stats import compute_stats
from datakit.testing import ZipEntry, build_zip, synthetic_image

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
_DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "DATAKIT_NUM_WORKERS")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DIST_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(extra)
    return env


def datakit(*args: object, script: bool = False, umask: int = -1, cwd: Path | None = None):
    """Run ``datakit ARGS`` in a fresh process: the console script, or ``python -m datakit.cli``."""
    if script:
        exe = BIN / "datakit"
        if not exe.exists():
            pytest.skip("the datakit console script is not installed next to this Python")
        cmd = [str(exe)]
    else:
        cmd = [sys.executable, "-m", "datakit.cli"]
    return subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True, env=_env(), timeout=300,
                          umask=umask, cwd=cwd)  # fmt: skip


def one_line_error(proc, code: int, message: str) -> None:
    """Exit ``code``, no traceback, and stderr's last line is exactly ``message``."""
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == message


# ---------------------------------------------------------------------------------------------
# every command, end to end


@pytest.fixture
def gbk_zip(tmp_path: Path) -> Path:
    """A zip as Chinese Windows writes it: GBK name bytes, no UTF-8 flag, two class folders."""
    from datakit.io import encode_image

    entries = [
        ZipEntry(f"{cls}/图片_{i}.png".encode("gbk"), encode_image(synthetic_image(24, 32, seed=i + 10 * c), ".png"))
        for c, cls in enumerate(["猫", "狗"])
        for i in range(2)
    ]
    path = tmp_path / "照片.zip"
    path.write_bytes(build_zip(entries))
    return path


def test_unzip_and_unzip_gbk(gbk_zip: Path, tmp_path: Path):
    dest = tmp_path / "解压"
    proc = datakit("unzip", gbk_zip, "-d", dest)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"extracted 4 files to {dest}; names decoded as gbk")
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*.png")) == [
        "狗/图片_0.png", "狗/图片_1.png", "猫/图片_0.png", "猫/图片_1.png"
    ]  # fmt: skip
    exe = BIN / "unzip-gbk"
    if not exe.exists():
        pytest.skip("the unzip-gbk console script is not installed next to this Python")
    proc = subprocess.run([str(exe), str(gbk_zip), "-l", "--json"], capture_output=True, text=True, env=_env())
    assert proc.returncode == 0, proc.stderr
    listing = json.loads(proc.stdout)
    assert set(listing) == {"archive", "encoding", "reason", "scores", "ambiguous", "mixed_utf8", "members"}
    assert listing["encoding"] == "gbk" and listing["ambiguous"] == [] and listing["mixed_utf8"] == 0
    from datakit.archive import detect_encoding

    assert listing["scores"] == detect_encoding(str(gbk_zip)).scores  # the guess's own, as docs/archive.md says
    assert [m["name"] for m in listing["members"]] == [
        "猫/图片_0.png",
        "猫/图片_1.png",
        "狗/图片_0.png",
        "狗/图片_1.png",
    ]
    assert set(listing["members"][0]) == {"name", "size", "compressed", "name_source"}
    # extracting again over different files needs --overwrite; -q prints nothing
    (dest / "猫" / "图片_0.png").write_bytes(b"mine")
    proc = subprocess.run([str(exe), str(gbk_zip), "-d", str(dest), "-q"], capture_output=True, text=True, env=_env())
    assert proc.returncode == 1 and proc.stdout == "" and "猫/图片_0.png" in proc.stderr
    assert (dest / "猫" / "图片_0.png").read_bytes() == b"mine"
    (dest / "狗" / "图片_1.png").unlink()  # one file gone: extracted again, the identical ones counted
    proc = subprocess.run([str(exe), str(gbk_zip), "-d", str(dest)], capture_output=True, text=True, env=_env())
    assert proc.returncode == 1 and proc.stdout.startswith(
        f"extracted 1 file to {dest} (2 already there and identical); names decoded as gbk"
    )
    bad = subprocess.run([str(exe), str(gbk_zip), "--encoding", "klingon"], capture_output=True, text=True, env=_env())
    assert bad.returncode == 2 and bad.stderr.splitlines()[-1] == (
        "unzip-gbk: error: argument --encoding: unknown encoding 'klingon': use auto, gbk, big5, cp932, utf-8..."
    )


def test_pack_info_verify_check_json(class_folder: Path, tmp_path: Path):
    out = tmp_path / "包.lmdb"
    proc = datakit("pack-lmdb", class_folder, out, "--workers", "0", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert set(summary) == {"out", "count", "resumed_from", "skipped", "bytes_in", "bytes_out", "seconds",
                            "images_per_s"}  # fmt: skip
    assert (summary["out"], summary["count"], summary["skipped"]) == (str(out), 12, [])
    # the same command again: the pack exists, so it is refused as a usage error, untouched
    before = (out / "data.mdb").stat().st_mtime_ns
    one_line_error(datakit("pack-lmdb", class_folder, out, script=True), 2,
                   f"datakit pack-lmdb: error: {out}: already exists, a complete pack of 12 samples; use --overwrite "
                   "to pack it again")  # fmt: skip
    assert (out / "data.mdb").stat().st_mtime_ns == before
    info = datakit("info", out, "--json")
    assert info.returncode == 0 and json.loads(info.stdout)["class_counts"] == {"cat": 4, "dog": 4, "鸟": 4}
    assert json.loads(info.stdout)["pack"] == str(out)  # one pack's object names it, as verify's does
    quiet = datakit("info", out, "-q")
    assert quiet.stdout.count("\n") == 1 and quiet.stdout.startswith(f"{out}: datakit-lmdb version ")
    verify = datakit("verify", out, "--json")
    assert verify.returncode == 0 and json.loads(verify.stdout) == {"pack": str(out), "samples": 12, "problems": []}
    check = datakit("check", out, "--json")
    assert check.returncode == 0, check.stderr
    report = json.loads(check.stdout)
    assert set(report) == {"samples", "problems", "notes", "classes", "class_counts", "height_range", "width_range"}
    assert report["classes"] == ["cat", "dog", "鸟"]  # index order
    assert (report["samples"], report["problems"], report["height_range"]) == (12, [], [30, 64])


def test_check_data_errors_exit_1_one_line_each(class_folder: Path):
    (class_folder / "鸟" / "图片_3.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    (class_folder / "cat" / "图片_0.jpg").write_bytes(b"")
    proc = datakit("check", class_folder, "-q")
    assert proc.returncode == 1 and proc.stdout == "" and "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"unreadable: {class_folder / 'cat' / '图片_0.jpg'}: ")
    assert lines[1].startswith(f"unreadable: {class_folder / '鸟' / '图片_3.png'}: PNG data is corrupt or truncated")
    full = datakit("check", class_folder)
    assert full.returncode == 1 and full.stdout.splitlines()[-1] == "12 samples checked, 2 problems"


def _damaged_folder(root: Path, png_name: str, good: int = 40) -> dict[str, str]:
    """``good`` images (enough for two readers) and the damaged files users have, built for real: a JPEG cut
    short, a PNG whose IDAT checksum is wrong (libpng prints "CRC error" and OpenCV gives up; Pillow decodes
    it), an empty file and a text file named .jpg. Returns the reason `datakit check` gives each."""
    from datakit.io import encode_image

    folder = root / "c"
    folder.mkdir(parents=True)
    for k in range(good):
        img = synthetic_image(24, 32, seed=k)
        (folder / f"good_{k:02d}.jpg").write_bytes(encode_image(img, ".jpg", 90, mode="rgb"))
    img = synthetic_image(48, 64, seed=99)
    jpeg, png = encode_image(img, ".jpg", 90, mode="rgb"), bytearray(encode_image(img, ".png", mode="rgb"))
    at = png.find(b"IDAT")
    png[at + 4 + int.from_bytes(png[at - 4 : at], "big")] ^= 0xFF  # the first byte of the chunk's CRC
    (folder / "truncated.jpg").write_bytes(jpeg[: len(jpeg) // 2])
    (folder / png_name).write_bytes(bytes(png))
    (folder / "empty.jpg").write_bytes(b"")
    (folder / "text.jpg").write_text("hello, not an image\n", encoding="utf-8")
    return {
        png_name: "damaged PNG data: libpng error: IDAT: CRC error",
        "empty.jpg": "empty file (0 bytes)",
        "text.jpg": "not a recognised image format (starts with b'hello, n'; cannot identify image file)",
        "truncated.jpg": "truncated JPEG (no end-of-image marker)",
    }


@pytest.mark.parametrize("png_name", ["badcrc.png", "badcrc.jpg"])  # a folder of other images, or of JPEG names
@pytest.mark.parametrize("workers", ["0", "2"])
@pytest.mark.parametrize("max_size", [None, "16"])
def test_pack_skip_bad_says_what_check_says_and_no_library_line(tmp_path: Path, png_name, workers, max_size):
    # The attack: `pack-lmdb --skip-bad` on the files check calls unreadable printed libpng's bare "libpng error:
    # IDAT: CRC error" and packed that PNG; it called a cut JPEG "damaged JPEG data: Premature end of JPEG file"
    # where check says "truncated JPEG (no end-of-image marker)".
    src, out = tmp_path / "src", tmp_path / "out.lmdb"
    reasons = _damaged_folder(src, png_name)
    lines = [f"{src / 'c' / name}: {why}" for name, why in sorted(reasons.items())]
    check = datakit("check", src, "-q", "--workers", workers)
    assert (check.returncode, check.stdout, check.stderr.splitlines()) == (1, "", [f"unreadable: {x}" for x in lines])
    size = ["--max-size", max_size] if max_size else []
    refused = datakit("pack-lmdb", src, out, "-q", "--workers", workers, *size)
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr.splitlines() == [
        "datakit pack-lmdb: error: 4 unreadable images (the pack holds the 0 samples before the first; fix them "
        "and run the same command with --resume, or the same command with --resume --skip-bad to leave them out):",
        *lines,
    ]
    skipped = datakit("pack-lmdb", src, out, "-q", "--workers", workers, "--resume", "--skip-bad", *size)
    assert (skipped.returncode, skipped.stdout) == (0, ""), skipped.stderr
    assert skipped.stderr.splitlines() == [f"skipped: {x}" for x in lines]  # nothing else: no library's own line
    assert json.loads(datakit("info", out, "--json").stdout)["count"] == 40


def test_pack_skip_bad_names_the_table_row_as_check_does(tmp_path: Path):
    src, out = tmp_path / "src", tmp_path / "out.lmdb"
    reasons = _damaged_folder(src, "badcrc.png", good=2)
    names = ["good_00.jpg", "good_01.jpg", *sorted(reasons)]
    (src / "labels.csv").write_text("file,label\n" + "".join(f"c/{n},{k % 2}\n" for k, n in enumerate(names)))
    lines = [
        f"{src / 'c' / n}: {reasons[n]} ({src / 'labels.csv'}, line {k + 2})" for k, n in enumerate(names) if k > 1
    ]
    check = datakit("check", src, "--labels", src / "labels.csv", "-q")
    assert (check.returncode, check.stderr.splitlines()) == (1, [f"unreadable: {x}" for x in lines])
    skipped = datakit("pack-lmdb", src, out, "--labels", src / "labels.csv", "-q", "--skip-bad")
    assert (skipped.returncode, skipped.stderr.splitlines()) == (0, [f"skipped: {x}" for x in lines])


def _jpeg(path: Path, seed: int = 0) -> None:
    from datakit.io import encode_image

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_image(synthetic_image(24, 32, seed=seed), ".jpg", 90, mode="rgb"))


def test_pack_names_missing_files_as_check_does_and_counts_them_apart(tmp_path: Path):
    # The attack: a table naming a folder and a file the disk lacks; check says "missing: ... is a folder, not an
    # image" and "missing: ... not found at", pack-lmdb said "Is a directory" and "No such file or directory" and
    # counted both among "2 unreadable images skipped"
    src, out = tmp_path / "数据", tmp_path / "out.lmdb"
    _jpeg(src / "猫" / "a.jpg")
    (src / "猫" / "d.jpg").mkdir()
    (src / "猫" / "e.jpg").write_bytes(b"")
    table = src / "lab.csv"
    table.write_text("file,label\n猫/a.jpg,cat\n猫/d.jpg,cat\n猫/gone.jpg,cat\n猫/e.jpg,cat\n", encoding="utf-8")
    lines = [
        f"missing: '猫/d.jpg' ({table}, line 3) is a folder, not an image: {src / '猫' / 'd.jpg'}",
        f"missing: '猫/gone.jpg' ({table}, line 4) not found at {src / '猫' / 'gone.jpg'}",
        f"{src / '猫' / 'e.jpg'}: empty file (0 bytes) ({table}, line 5)",
    ]
    check = datakit("check", src, "--labels", table, "-q")
    assert (check.returncode, check.stderr.splitlines()) == (1, [*lines[:2], f"unreadable: {lines[2]}"])
    refused = datakit("pack-lmdb", src, out, "--labels", table, "-q")
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr.splitlines() == [
        "datakit pack-lmdb: error: 2 missing files and 1 unreadable image (the pack holds the 1 sample before the "
        "first; fix them and run the same command with --resume, or the same command with --resume --skip-bad to "
        "leave them out):",
        *lines,
    ]
    skipped = datakit("pack-lmdb", src, out, "--labels", table, "--resume", "--skip-bad")
    assert skipped.returncode == 0, skipped.stderr
    assert skipped.stderr.splitlines() == [f"skipped: {x}" for x in lines]
    assert skipped.stdout.startswith(f"packed 1 images (resumed after 1) into {out}: ")
    assert skipped.stdout.rstrip().endswith("; 2 missing files and 1 unreadable image skipped")
    assert json.loads(datakit("info", out, "--json").stdout)["skipped"] == lines


@pytest.mark.parametrize("overwrite", [False, True])
def test_pack_refusal_advises_commands_that_work_as_written(tmp_path: Path, overwrite: bool):
    # The attack: "fix them and run the same command with --resume, or pass --skip-bad"; followed literally,
    # `pack-lmdb SRC OUT --skip-bad` was refused: OUT "already exists; use --resume ... or --overwrite"
    src, out = tmp_path / "src", tmp_path / "out.lmdb"
    for k in range(3):
        _jpeg(src / "c" / f"a_{k}.jpg", seed=k)
    (src / "c" / "b_empty.jpg").write_bytes(b"")
    first = ["--overwrite"] if overwrite else []
    refused = datakit("pack-lmdb", src, out, "-q", *first)
    again = " in place of --overwrite" if overwrite else ""
    assert (refused.returncode, refused.stderr.splitlines()) == (1, [
        "datakit pack-lmdb: error: 1 unreadable image (the pack holds the 3 samples before the first; fix them and "
        f"run the same command with --resume{again}, or the same command with --resume --skip-bad{again} to leave "
        "them out):",
        f"{src / 'c' / 'b_empty.jpg'}: empty file (0 bytes)",
    ])  # fmt: skip
    skipped = datakit("pack-lmdb", src, out, "-q", "--resume", "--skip-bad")
    assert (skipped.returncode, skipped.stderr) == (0, f"skipped: {src / 'c' / 'b_empty.jpg'}: empty file (0 bytes)\n")
    info = json.loads(datakit("info", out, "--json").stdout)
    assert (info["count"], len(info["skipped"])) == (3, 1)


def test_pack_overwrite_stopped_by_bad_images_says_where_the_new_samples_are(tmp_path: Path):
    # The attack: "the pack holds the 4 samples before the first; fix them and run the same --overwrite command"
    # while OUT still held the old pack of 6 and the 4 new ones sat, never named, in .OUT.overwrite-part
    src, out, part = tmp_path / "src", tmp_path / "out.lmdb", tmp_path / ".out.lmdb.overwrite-part"
    for k in range(6):
        _jpeg(src / "c" / f"{'a' if k < 4 else 'c'}_{k}.jpg", seed=k)
    assert datakit("pack-lmdb", src, out, "-q").returncode == 0
    (src / "c" / "b_empty.jpg").write_bytes(b"")
    refused = datakit("pack-lmdb", src, out, "-q", "--overwrite", "--max-size", "16")
    assert (refused.returncode, refused.stderr.splitlines()) == (1, [
        f"datakit pack-lmdb: error: 1 unreadable image ({out} still holds the old pack, untouched; the 4 new samples "
        f"before the first are kept in {part}: fix them and run the same --overwrite command to go on from them, or "
        f"the same --overwrite command with --skip-bad to leave them out, or delete {part} to give its space back):",
        f"{src / 'c' / 'b_empty.jpg'}: empty file (0 bytes)",
    ])  # fmt: skip
    info = json.loads(datakit("info", out, "--json").stdout)
    assert (info["count"], info["options"]["max_size"]) == (6, None)
    from datakit.lmdb import read_meta

    assert read_meta(part)["count"] == 4
    skipped = datakit("pack-lmdb", src, out, "--overwrite", "--max-size", "16", "--skip-bad")
    assert skipped.returncode == 0, skipped.stderr
    assert skipped.stdout.startswith(f"packed 6 images (resumed after 4) into {out}: ")
    assert skipped.stdout.rstrip().endswith("; 1 unreadable image skipped") and not part.exists()
    info = json.loads(datakit("info", out, "--json").stdout)
    assert (info["count"], info["options"]["max_size"], len(info["skipped"])) == (6, 16, 1)


def test_stats_json_quiet_and_plot(class_folder: Path, tmp_path: Path):
    single = compute_stats(class_folder, workers=0)
    proc = datakit("stats", class_folder, "--json", "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert set(got) == {"count", "pixels", "mean", "std", "mean_255", "std_255", "order"}
    assert (got["count"], got["pixels"], got["mean"], got["std"]) == (12, single.pixels, single.mean, single.std)
    quiet = datakit("stats", class_folder, "-q", script=True)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert (
        quiet.stdout
        == "transforms.Normalize(mean=["
        + ", ".join(f"{v:.4f}" for v in single.mean)
        + "], std=["
        + ", ".join(f"{v:.4f}" for v in single.std)
        + "])\n"
    )
    plot = tmp_path / "直方图.png"
    plot.write_bytes(b"keep me")
    one_line_error(datakit("stats", class_folder, "--plot", plot), 2,
                   f"datakit stats: error: {plot}: already exists; use --overwrite (overwrite=True) to replace it")  # fmt: skip
    assert plot.read_bytes() == b"keep me"
    proc = datakit("stats", class_folder, "--plot", plot, "--overwrite", "-q", umask=0o027)
    assert proc.returncode == 0, proc.stderr
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and stat.S_IMODE(plot.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_preview_refuses_overwrite_and_honours_umask(class_folder: Path, tmp_path: Path):
    out = tmp_path / "预览.jpg"
    proc = datakit("preview", class_folder, "--out", out, "--n", "5", umask=0o022)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"wrote 5 of 12 samples, as decoded, to {out}; classes: 0 cat, 1 dog, 2 鸟\n"
    assert out.read_bytes()[:2] == b"\xff\xd8" and stat.S_IMODE(out.stat().st_mode) == 0o644
    first = out.read_bytes()
    one_line_error(datakit("preview", class_folder, "--out", out, "--seed", "1"), 2,
                   f"datakit preview: error: {out}: already exists; use --overwrite (overwrite=True) to replace it")  # fmt: skip
    assert out.read_bytes() == first
    proc = datakit("preview", class_folder, "--out", out, "--seed", "1", "--overwrite", "-q", umask=0o077)
    assert proc.returncode == 0 and proc.stdout == "" and out.read_bytes() != first
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["数据 集", "预览.jpg"]


# ---------------------------------------------------------------------------------------------
# an output that cannot be written: refused before the work, not found after it


@pytest.fixture
def unreadable_folder(tmp_path: Path) -> Path:
    """Two class folders of files that do not decode: a command that read one would exit 1 naming it."""
    root = tmp_path / "坏图"
    for cls in ("cat", "dog"):
        (root / cls).mkdir(parents=True)
        for i in range(3):
            (root / cls / f"{i}.png").write_bytes(b"\x89PNG\r\n\x1a\nnot an image")
    return root


# each command with the option naming its output picture
WRITERS = {"stats": ["--workers", "0", "--plot"], "preview": ["--out"]}


def _tree(root: Path) -> list[tuple[str, bytes | None]]:
    return sorted((p.relative_to(root).as_posix(), p.read_bytes() if p.is_file() else None) for p in root.rglob("*"))


@pytest.mark.parametrize("command", WRITERS)
def test_the_unreadable_source_is_read_when_the_output_can_be_written(command, unreadable_folder: Path, tmp_path: Path,
                                                                       capsys):  # fmt: skip
    # the control for the test below: with an output that can be written, the command reads the
    # images, and the first one fails (exit 1)
    assert main([command, str(unreadable_folder), *WRITERS[command], str(tmp_path / "fine.png")]) == 1
    assert f"{unreadable_folder}{os.sep}cat{os.sep}0.png" in capsys.readouterr().err
    assert not (tmp_path / "fine.png").exists()


UNWRITABLE = [
    ("a_file/out.png", "{tmp}/a_file: no such folder to write out.png into"),
    ("no/such/dir/out.png", "{tmp}/no/such/dir: no such folder to write out.png into"),
    ("a_folder.png", "{tmp}/a_folder.png: is a folder; give a file name"),
    ("exists.png", "{tmp}/exists.png: already exists; use --overwrite (overwrite=True) to replace it"),
    # a link to nothing (left by an old run) takes the name too: it was found free, and the run failed at its end
    # saying another process had made it meanwhile
    ("dangling.png", "{tmp}/dangling.png: already exists; use --overwrite (overwrite=True) to replace it"),
    # a name that ends with '/' names a folder: it was written as the file new.png
    ("new.png/", "{tmp}/new.png/: names a folder (it ends with '/'); give a file name"),
]


@pytest.mark.parametrize("command", WRITERS)
@pytest.mark.parametrize(("name", "message"), UNWRITABLE, ids=[n for n, _ in UNWRITABLE])
def test_an_output_that_cannot_be_written_is_refused_before_any_image_is_read(
    command, name, message, unreadable_folder: Path, tmp_path: Path, capsys
):
    (tmp_path / "a_file").write_text("a file, not a folder")
    (tmp_path / "a_folder.png").mkdir()
    (tmp_path / "exists.png").write_bytes(b"keep me")
    (tmp_path / "dangling.png").symlink_to("nowhere.png")
    before = _tree(tmp_path)
    rc = main([command, str(unreadable_folder), *WRITERS[command], f"{tmp_path}/{name}"])
    out, err = capsys.readouterr()
    # exit 2, not the exit 1 of the first unreadable image: no image was read
    assert (rc, out, err) == (2, "", f"datakit {command}: error: {message.format(tmp=tmp_path)}\n")
    assert _tree(tmp_path) == before  # nothing written, no temporary file left


def _in_read_only_folder(folder: Path, *args: object) -> subprocess.CompletedProcess:
    """``python -m datakit.cli ARGS`` with ``folder`` a read-only bind mount of itself, in a mount
    namespace of the child's own: no file can be created in it, by root either (chmod would not
    stop root). Skips where such a mount cannot be made."""
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        pytest.skip("needs unshare (Linux)")
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 97; shift; exec "$@"'
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", str(folder),
           sys.executable, "-m", "datakit.cli", *map(str, args)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=300)
    if proc.returncode == 97:
        pytest.skip(f"cannot make a read-only mount here: {proc.stderr.strip()}")
    return proc


@pytest.mark.parametrize("command", WRITERS)
def test_a_read_only_folder_is_refused_before_any_image_is_read(command, unreadable_folder: Path, tmp_path: Path):
    # before: the images were read, and (with a source that reads) the write failed at the end with
    # a traceback: "OSError: [Errno 30] Read-only file system: '.../read-only/.out.png.k3j2x0.tmp'"
    folder = tmp_path / "read-only"
    folder.mkdir()
    proc = _in_read_only_folder(folder, command, unreadable_folder, *WRITERS[command], folder / "out.png")
    one_line_error(proc, 2, f"datakit {command}: error: {folder}: not writable; cannot write out.png into it")
    assert proc.stdout == "" and list(folder.iterdir()) == []


def test_bench_json_schema_and_batch_capped(class_folder: Path):
    proc = datakit("bench", class_folder, "--workers", "0,1", "--seconds", "0.2", "--repeats", "2", "--size", "32",
                   "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {"batch_size", "device", "repeats", "samples", "results", "recommended", "noisy", "candidates",
                        "reason"}  # fmt: skip
    assert (out["batch_size"], out["samples"], out["repeats"]) == (12, 12, 2)  # 12 samples: not a batch of 64
    assert [r["num_workers"] for r in out["results"]] == [0, 1]
    assert all(len(r["passes"]) == 2 and set(r) == {"num_workers", "images_per_s", "passes", "first_batch_s"}
               for r in out["results"])  # fmt: skip
    if out["noisy"]:
        assert out["recommended"] is None and out["reason"].startswith(
            "too noisy to choose between num_workers 0, 1: the 2 passes"
        )
    else:
        assert out["recommended"] in (0, 1) and out["reason"].startswith("the fewest workers within 5%")
    quiet = datakit("bench", class_folder, "--workers", "0", "--seconds", "0.1", "--repeats", "1", "--size", "0", "-q")
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert quiet.stdout == "recommended: num_workers=0 (the fewest workers within 5% of the best median)\n"
    # the attack: --batch-size 100 on 12 samples reported "batch size 100" while every batch held 12
    asked = datakit("bench", class_folder, "--workers", "0", "--seconds", "0.1", "--repeats", "1", "--size", "32",
                    "--batch-size", "100", "--json")  # fmt: skip
    assert asked.returncode == 0, asked.stderr
    assert json.loads(asked.stdout)["batch_size"] == 12
    assert asked.stderr == "note: --batch-size 100 is more than the 12 samples: every batch holds 12\n"


# ---------------------------------------------------------------------------------------------
# usage mistakes: exit 2, one line, before any work


USAGE = [
    (["stats", "{src}", "--split", "train"],
     "datakit stats: error: split='train' needs a label table (labels=) or an LMDB pack with splits; {src} has none"),
    (["check", "{samples}/labels.csv", "--split", "dev"],
     "datakit check: error: {samples}/labels.csv: no split 'dev'; the splits are 'train', 'val', 'test'"),
    (["stats", "{tmp}/none-*.lmdb"], "datakit stats: error: {tmp}/none-*.lmdb: the pattern matches nothing"),
    (["stats", "{tmp}/none"], "datakit stats: error: {tmp}/none: no such file or folder"),
    (["bench", "{src}", "--batch-size", "0"], "datakit bench: error: argument --batch-size: must be >= 1, got 0"),
    (["pack-lmdb", "{src}", "{tmp}/o.lmdb", "--quality", "0"],
     "datakit pack-lmdb: error: argument --quality: must be 1..100, got 0"),
    (["pack-lmdb", "{src}", "{tmp}/o.lmdb", "--quality", "500"],
     "datakit pack-lmdb: error: argument --quality: must be 1..100, got 500"),
    (["pack-lmdb", "{src}", "{tmp}/o.lmdb", "--max-size", "-5"],
     "datakit pack-lmdb: error: argument --max-size: must be >= 1, got -5"),
    (["pack-lmdb", "{src}", "{tmp}/o.lmdb", "--shard", "4/4"],
     "datakit pack-lmdb: error: argument --shard: must be I/N with 0 <= I < N (for example 0/4), got '4/4'"),
    (["pack-lmdb", "{src}", "{tmp}/o.lmdb", "--quality", "50"],  # stored as they are: a quality unheeded, unsaid
     "datakit pack-lmdb: error: --quality 50 is the JPEG quality of the images --max-size shrinks; without --max-size "
     "every image is stored as it is (its own bytes): give --max-size N with it, or leave --quality out"),
    (["pack-lmdb", "{src}", "{tmp}/o.lmdb", "--resume", "--overwrite"],
     "datakit pack-lmdb: error: --resume and --overwrite contradict each other; pick one"),
    (["preview", "{src}", "--out", "{tmp}/p.png", "--n", "0"], "datakit preview: error: argument --n: must be >= 1, got 0"),
    (["preview", "{src}", "--out", "{tmp}/p.png", "--size", "64"],  # a size that would change nothing, unsaid
     "datakit preview: error: --size 64 is the crop size of --transform train or eval; give one of them with it "
     "(--transform train), or leave --size out to see the images as decoded"),
    (["preview", "{src}", "--out", "{tmp}/x.xyz"],
     "datakit preview: error: argument --out: '{tmp}/x.xyz': the name must end in .png, .jpg, .jpeg, .webp, .bmp, .tif, .tiff"),
    (["preview", "{src}", "--out", "{tmp}/no/such/dir/p.png"],
     "datakit preview: error: {tmp}/no/such/dir: no such folder to write p.png into"),
    (["stats", "{src}", "--plot", "{tmp}/h.gif"],
     "datakit stats: error: argument --plot: '{tmp}/h.gif': the name must end in .png, .jpg, .jpeg, .pdf, .svg"),
    (["stats", "{src}", "--sample", "1"], "datakit stats: error: argument --sample: must be >= 2, got 1"),
    (["stats", "{src}", "--seed", "3"],  # every image read: a seed unheeded, unsaid
     "datakit stats: error: --seed 3 picks the images --sample N reads; without --sample every image is read (exact "
     "statistics): give --sample N with it, or leave --seed out"),
    (["stats", "{src}", "--size", "big"],
     "datakit stats: error: argument --size: size must look like WxH (for example 224x224), got 'big'"),
    (["stats", "{src}", "--size", "0x224"], "datakit stats: error: argument --size: size must be at least 1x1 pixels, "
     "got '0x224'"),
    (["check", "{src}", "--workers", "-1"], "datakit check: error: argument --workers: must be >= 0, got -1"),
    (["bench", "{src}", "--workers", "0,x"], "datakit bench: error: argument --workers: expected numbers like 0,1,2,4, got '0,x'"),
    (["bench", "{src}", "--workers", "0,,1"], "datakit bench: error: argument --workers: expected numbers like 0,1,2,4, got '0,,1' (an empty entry)"),
    (["bench", "{src}", "--seconds", "0"], "datakit bench: error: argument --seconds: must be a positive number, got 0"),
    (["check", "{src}", "{samples}", "--labels", "{samples}/labels.xlsx"],  # a traceback in TableDataset before
     "datakit check: error: several SRC are read as the shards of one LMDB pack; {src} is not an LMDB pack: give one "
     "folder, table or zip at a time"),
    (["info", "{src}"],  # the wrong kind of path is a usage mistake, not damaged data
     "datakit info: error: {src}: not an LMDB pack (no data.mdb); a pack is the folder pack-lmdb wrote"),
    (["unzip", "{src}", "-d", "{tmp}/out"], "datakit unzip: error: {src}: is a directory, not a zip archive"),
    (["stats", "{src}", "--labels", "{src}"],
     "datakit stats: error: {src}: is a folder, not a label table (expected .xlsx, .xlsm, .csv, .tsv, .txt or .lst)"),
    (["check", "{tmp}/flat"],  # images with no class folders: exited 1 as bad data where a .png source exits 2
     "datakit check: error: {tmp}/flat: no class sub-folders (expected {tmp}/flat/<class>/<image>, or pass labels=, "
     "--labels TABLE)"),
    (["check", "{src}", "--labels", "{tmp}/labels.json"],  # exited 1 as bad data where a folder exits 2
     "datakit check: error: {tmp}/labels.json: not a label table (expected .xlsx, .xlsm, .csv, .tsv, .txt or .lst)"),
    (["unzip", "{tmp}/a.zip", "--encoding", "nope"],
     "datakit unzip: error: argument --encoding: unknown encoding 'nope': use auto, gbk, big5, cp932, utf-8..."),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "message"), USAGE, ids=[" ".join(a[:1] + a[2:4]) for a, _ in USAGE])
def test_usage_errors_exit_2_with_one_line(argv, message, class_folder: Path, samples: Path, tmp_path: Path):
    fill = {"src": class_folder, "tmp": tmp_path, "samples": samples}
    (tmp_path / "labels.json").write_text('{"a.jpg": 0}')
    (tmp_path / "flat").mkdir()
    imwrite(tmp_path / "flat" / "1.png", np.zeros((4, 4, 3), np.uint8))
    proc = datakit(*(a.format(**fill) for a in argv))
    one_line_error(proc, 2, message.format(**fill))
    assert proc.stdout == ""
    assert not (tmp_path / "o.lmdb").exists() and not (tmp_path / "p.png").exists()


def test_existing_output_refused_in_process(class_folder: Path, tmp_path: Path):
    from datakit.check import preview
    from datakit.datasets import open_dataset
    from datakit.errors import UsageError

    out = tmp_path / "sheet.png"
    imwrite(out, synthetic_image(8, 8))
    with pytest.raises(
        UsageError, match=r"sheet.png: already exists; use --overwrite \(overwrite=True\) to replace it$"
    ):
        preview(open_dataset(class_folder), out, n=2)


# ---------------------------------------------------------------------------------------------
# help


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_every_option_has_help_and_every_command_an_example():
    commands = _subparsers(build_parser())
    assert set(commands) >= {"unzip", "pack-lmdb", "info", "verify", "check", "preview", "stats", "bench"}
    for name, p in commands.items():
        undocumented = [a.dest for a in p._actions if not a.help]
        assert undocumented == [], f"{name}: options without help text: {undocumented}"
        text = p.format_help()
        assert "\nexample:\n  datakit " + name in text, name
    proc = datakit("stats", "--help")
    assert proc.returncode == 0 and "\nexample:\n  datakit stats 数据集/" in proc.stdout
    assert "-q, --quiet" in proc.stdout and "--json" in proc.stdout


# ---------------------------------------------------------------------------------------------
# torchrun: rank 0 speaks, every rank works


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_ranks(*args: object, rank1: tuple | None = None) -> list[subprocess.CompletedProcess]:
    """``python -m datakit.cli ARGS`` as torchrun starts it on two ranks (gloo on 127.0.0.1); ``rank1``: other
    arguments for rank 1 (ranks launched by hand)."""
    port = str(_free_port())
    procs = [
        subprocess.Popen([sys.executable, "-m", "datakit.cli", *map(str, rank1 if r and rank1 else args)],
                         env=_env(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                  MASTER_PORT=port, TORCHELASTIC_RUN_ID="test"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in range(2)
    ]  # fmt: skip
    outs = [p.communicate(timeout=180) for p in procs]
    return [subprocess.CompletedProcess(p.args, p.returncode, o, e) for p, (o, e) in zip(procs, outs)]


def test_a_rank_not_started_by_torchrun_says_what_it_waits_for_or_that_it_has_nothing_to_do(class_folder: Path,
                                                                                              tmp_path: Path):  # fmt: skip
    # the attack: RANK, WORLD_SIZE and MASTER_ADDR left in a shell: `stats` waited 30 minutes for ranks that never
    # came, saying nothing; `pack-lmdb` on RANK=1 wrote nothing and exited 0, saying nothing
    port = str(_free_port())
    env = _env(RANK="1", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    out = tmp_path / "p.lmdb"
    alone = subprocess.run([sys.executable, "-m", "datakit.cli", "pack-lmdb", str(class_folder), str(out)],
                           capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert (alone.returncode, alone.stderr) == (0, "datakit pack-lmdb: rank 1 of 2: this command runs on rank 0 alone; "
                                                "nothing to do here (RANK, WORLD_SIZE and MASTER_ADDR are set; unset "
                                                "them to run as one process)\n")  # fmt: skip
    assert not out.exists()
    proc = subprocess.Popen([sys.executable, "-m", "datakit.cli", "stats", str(class_folder)],
                            env=dict(env, RANK="0"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        first = proc.stderr.readline()
    finally:
        proc.kill()
        proc.communicate()
    assert first == (f"datakit stats: rank 0 of 2: waiting for the other ranks at 127.0.0.1:{port} (RANK, WORLD_SIZE "
                     "and MASTER_ADDR are set; unset them to run as one process)\n")  # fmt: skip


def test_two_ranks_print_one_json_document(class_folder: Path, tmp_path: Path):
    plot = tmp_path / "hist.png"
    r0, r1 = _two_ranks("stats", class_folder, "--json", "--workers", "1", "--plot", plot)
    assert (r0.returncode, r1.returncode) == (0, 0), (r0.stderr, r1.stderr)
    assert r1.stdout == "" and r1.stderr == "" and r0.stderr == ""
    stdout = r0.stdout + r1.stdout
    doc, end = json.JSONDecoder().raw_decode(stdout)
    assert stdout[end:].strip() == ""  # exactly one document
    single = compute_stats(class_folder, workers=0)
    assert (doc["count"], doc["pixels"], doc["mean"], doc["std"]) == (12, single.pixels, single.mean, single.std)
    assert plot.read_bytes()[:4] == b"\x89PNG" and sorted(p.name for p in tmp_path.iterdir()) == ["hist.png", "数据 集"]


def test_two_ranks_sampled_stats_are_one_process_s_and_a_rank_stopping_is_one_line(class_folder: Path):
    # the attack: `torchrun ... stats --sample 50` left out the standard errors one process gives (the bootstrap ran
    # with one rank only), 2 runs in 8 died at exit ("terminate called without an active exception", exit 1), and
    # the rank whose peer failed on a bad image printed gloo's traceback
    args = ("stats", class_folder, "--sample", "8", "--seed", "3", "--json", "--workers", "0")
    one = subprocess.run([sys.executable, "-m", "datakit.cli", *map(str, args)], capture_output=True, text=True,
                         env=_env(), timeout=180)  # fmt: skip
    for _ in range(3):
        r0, r1 = _two_ranks(*args)
        assert (r0.returncode, r1.returncode, r0.stderr, r1.stderr) == (0, 0, "", "")
        assert json.loads(r0.stdout) == json.loads(one.stdout) and "stderr_mean" in json.loads(r0.stdout)
    first = class_folder / "cat" / "图片_0.jpg"  # rank 0's share (samples 0, 2, ...): its line names rank 0
    kept = first.read_bytes()
    first.write_bytes(kept[: len(kept) // 2])
    r0, r1 = _two_ranks("stats", class_folder, "--workers", "0")
    assert (r0.returncode, r1.returncode) == (1, 1)
    assert r0.stderr.splitlines() == [
        f"datakit stats: error (rank 0): sample 0: {first}: truncated JPEG (no end-of-image marker)"
    ]
    assert r1.stderr.startswith("datakit stats: error (rank 1): another rank stopped before this one finished ")
    first.write_bytes(kept)
    bad = class_folder / "鸟" / "图片_3.png"
    bad.write_bytes(bad.read_bytes()[:100])  # rank 1's share (samples 1, 3, ..., 11)
    r0, r1 = _two_ranks("stats", class_folder, "--workers", "0")
    assert (r0.returncode, r1.returncode) == (1, 1)
    assert r1.stderr.splitlines() == [f"datakit stats: error (rank 1): sample 11: {bad}: truncated PNG (no IEND chunk)"]
    assert re.fullmatch(r"datakit stats: error \(rank 0\): another rank stopped before this one finished \(Connection closed by "
                        r"peer \[127\.0\.0\.1\]:\d+\)\n", r0.stderr), r0.stderr  # fmt: skip


def test_ranks_given_other_commands_are_refused(class_folder: Path, tmp_path: Path):
    # the attack: ranks launched by hand with other sources blended them into one result (exit 0); `stats` on one
    # rank and `check` on the other waited in two collectives until killed
    other = tmp_path / "other"
    shutil.copytree(class_folder, other)
    for rank1, differ in [(("stats", other, "--size", "32x32"), "size, src"), (("check", class_folder), None)]:
        r0, r1 = _two_ranks("stats", class_folder, rank1=rank1)
        assert (r0.returncode, r1.returncode, r1.stderr) == (2, 2, "")
        assert r0.stderr.startswith("datakit stats: error: rank 1 was given another command or options than rank 0 "
                                    f"(they differ in {differ or ''}"), r0.stderr  # fmt: skip
        assert r0.stderr.endswith("); give every rank the same command, as torchrun does\n")


def test_two_ranks_check_and_usage_error_said_once(class_folder: Path):
    (class_folder / "鸟" / "图片_3.png").write_bytes(b"")
    r0, r1 = _two_ranks("check", class_folder, "--json", "--workers", "0")
    assert (r0.returncode, r1.returncode) == (1, 1)  # every rank has the whole report
    assert r1.stdout == "" and len(json.loads(r0.stdout)["problems"]) == 1
    r0, r1 = _two_ranks("stats", class_folder, "--split", "x")
    assert (r0.returncode, r1.returncode) == (2, 2) and r1.stderr == ""
    assert r0.stderr.splitlines() == [
        f"datakit stats: error: split='x' needs a label table (labels=) or an LMDB pack with splits; {class_folder} has none"
    ]


def test_two_ranks_say_a_note_once(class_folder: Path):
    # the attack: `torchrun ... stats --sample 20` on 12 images: the note that every image is read came from every rank
    r0, r1 = _two_ranks("stats", class_folder, "--workers", "0", "--sample", "20", "-q")
    assert (r0.returncode, r1.returncode, r1.stderr) == (0, 0, "")
    assert r0.stderr == ("sample=20 (--sample) is not fewer than the 12 images: every image is read, the statistics "
                         "are exact (no standard errors)\n")  # fmt: skip


def test_two_ranks_check_prints_each_problem_once(class_folder: Path):
    # every rank has the whole report (for the exit code); only rank 0 prints its problems
    (class_folder / "鸟" / "图片_3.png").write_bytes(b"")
    r0, r1 = _two_ranks("check", class_folder, "--workers", "0")
    assert (r0.returncode, r1.returncode) == (1, 1)
    assert (r1.stdout, r1.stderr) == ("", "")
    problems = [line for line in r0.stderr.splitlines() if line.startswith("unreadable: ")]
    assert len(problems) == 1 and "图片_3.png" in problems[0], r0.stderr
    assert r0.stdout.splitlines()[-1] == "12 samples checked, 1 problem"


def test_two_ranks_preview_written_once(class_folder: Path, tmp_path: Path):
    out = tmp_path / "grid.png"
    r0, r1 = _two_ranks("preview", class_folder, "--out", out, "--n", "3")
    assert (r0.returncode, r1.returncode) == (0, 0)
    assert r0.stdout.startswith(f"wrote 3 of 12 samples, as decoded, to {out}") and r1.stdout == "" and r1.stderr == ""


def test_two_ranks_pack_one_shard_each(class_folder: Path, tmp_path: Path):
    from datakit.datasets import open_dataset

    r0, r1 = _two_ranks("pack-lmdb", class_folder, tmp_path / "part-{rank}.lmdb", "--workers", "0")
    assert (r0.returncode, r1.returncode) == (0, 0), (r0.stderr, r1.stderr)
    assert r0.stdout == (f"packed 12 images into 2 shards {tmp_path / 'part-{rank}.lmdb'} (6, 6): open them "
                         f"together as {str(tmp_path / 'part-*.lmdb')!r}\n") and r1.stdout == ""  # fmt: skip
    whole, parts = open_dataset(class_folder), open_dataset(str(tmp_path / "part-*.lmdb"))
    assert len(parts) == 12 and parts.targets.tolist() == whole.targets.tolist()
    # the attack: rank 1's shard left by an earlier run, rank 0's not: rank 1 exited 2 without a word, rank 0 said
    # only that a rank stopped; a usage mistake of a rank's own output is said by that rank
    shutil.copytree(tmp_path / "part-0.lmdb", tmp_path / "kept-0")
    shutil.rmtree(tmp_path / "part-0.lmdb")
    r0, r1 = _two_ranks("pack-lmdb", class_folder, tmp_path / "part-{rank}.lmdb", "--workers", "0")
    assert (r0.returncode, r1.returncode) == (1, 2)
    assert r1.stderr == (f"datakit pack-lmdb: error (rank 1): {tmp_path / 'part-1.lmdb'}: already exists, a complete "
                         "pack of 6 samples; use --overwrite to pack it again\n")  # fmt: skip
    assert r0.stderr.startswith("datakit pack-lmdb: error (rank 0): another rank stopped before this one finished")
    shutil.rmtree(tmp_path / "part-0.lmdb")
    shutil.copytree(tmp_path / "kept-0", tmp_path / "part-0.lmdb")
    r0, r1 = _two_ranks("pack-lmdb", class_folder, tmp_path / "part-{rank}.lmdb", "--workers", "0", "--resume")
    assert (r0.returncode, r1.returncode, r1.stdout) == (0, 0, "")
    assert r0.stdout == (f"the 2 shards {tmp_path / 'part-{rank}.lmdb'} hold every image already (12): nothing to "
                         f"pack; open them together as {str(tmp_path / 'part-*.lmdb')!r}\n")  # fmt: skip
    r0, r1 = _two_ranks("pack-lmdb", class_folder, tmp_path / "part-{rank}.lmdb", "--workers", "0", "--overwrite",
                        "--json")  # fmt: skip
    assert (r0.returncode, r1.returncode) == (0, 0) and json.loads(r0.stdout)["shards"] == [6, 6]
    # without {rank} in OUT, rank 0 packs everything alone and the other rank leaves it be
    r0, r1 = _two_ranks("pack-lmdb", class_folder, tmp_path / "all.lmdb", "--workers", "0", "--json")
    assert (r0.returncode, r1.returncode) == (0, 0) and json.loads(r0.stdout)["count"] == 12 and r1.stdout == ""


def test_more_ranks_than_samples_pack_an_empty_shard_of_the_set(tmp_path: Path):
    # the attack: torchrun with more ranks than samples and OUT part-{rank}.lmdb: rank 0's empty shard was refused
    # ("holds none"), the other ranks stopped, and the shards they wrote were no set; --shard 0/2 given by hand is
    # still refused
    from datakit.datasets import open_dataset

    (tmp_path / "src" / "a").mkdir(parents=True)
    imwrite(tmp_path / "src" / "a" / "1.png", synthetic_image(4, 4, seed=1))
    r0, r1 = _two_ranks("pack-lmdb", tmp_path / "src", tmp_path / "part-{rank}.lmdb", "--workers", "0")
    assert (r0.returncode, r1.returncode) == (0, 0), (r0.stderr, r1.stderr)
    parts = open_dataset(str(tmp_path / "part-*.lmdb"))
    assert len(parts) == 1 and parts.classes == ["a"]
    # rank 0 speaks for the set (it said "completed part-0.lmdb (0 images, every one committed before the
    # interruption)" of its empty shard, a fresh pack)
    assert r0.stdout == (f"packed 1 images into 2 shards {tmp_path / 'part-{rank}.lmdb'} (0, 1): open them together "
                         f"as {str(tmp_path / 'part-*.lmdb')!r}\n")  # fmt: skip
    assert r1.stdout == ""
    assert main(["pack-lmdb", str(tmp_path / "src"), str(tmp_path / "by-hand.lmdb"), "--shard", "0/2"]) == 2


def test_pack_lmdb_classes_gives_a_val_list_the_training_indices(tmp_path: Path):
    from datakit.datasets import open_dataset
    from datakit.io import imwrite

    for k in range(9):
        imwrite(tmp_path / f"{k}.png", np.full((8, 8, 3), k * 20, np.uint8))
    (tmp_path / "train.txt").write_text("".join(f"{k}.png {k}\n" for k in range(5)), encoding="utf-8")
    (tmp_path / "val.txt").write_text("5.png 0\n6.png 1\n7.png 2\n8.png 4\n", encoding="utf-8")
    assert datakit("pack-lmdb", tmp_path / "train.txt", tmp_path / "train.lmdb", "-q").returncode == 0
    proc = datakit("pack-lmdb", tmp_path / "val.txt", tmp_path / "val.lmdb", "--classes", tmp_path / "train.lmdb", "-q")
    assert proc.returncode == 0, proc.stderr
    val = open_dataset(tmp_path / "val.lmdb")
    assert (val.classes, val.targets.tolist()) == (["0", "1", "2", "3", "4"], [0, 1, 2, 4])
    info = datakit("info", tmp_path / "val.lmdb")  # where its labels came from (the attack: nothing said)
    assert info.stdout.splitlines()[2] == f"  from: labels {tmp_path / 'val.txt'}"


def test_stats_and_preview_take_classes_as_their_refusal_says(tmp_path: Path):
    # The attack: a val list whose integer labels skip a class ({1, 3}) was refused by stats and preview, pointing at
    # classes= (--classes) for a split kept in a file of its own; both then said "unrecognized arguments: --classes".
    from datakit.io import imwrite

    data = tmp_path / "data"
    (data / "img").mkdir(parents=True)
    for k in range(3):
        imwrite(data / "img" / f"{k}.png", np.full((8, 8, 3), k * 60, np.uint8))
    val = data / "val.csv"
    val.write_text("file,label\nimg/0.png,1\nimg/1.png,3\nimg/2.png,1\n", encoding="utf-8")
    classes = tmp_path / "classes.txt"
    classes.write_text("0\n1\n2\n3\n", encoding="utf-8")
    refused = datakit("stats", val, "-q")
    assert refused.returncode == 1 and "classes=train.classes" in refused.stderr
    stats = datakit("stats", val, "--classes", classes, "--json")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["mean"] == pytest.approx([60 / 255] * 3, abs=1e-12)  # (0 + 60 + 120) / 3
    out = tmp_path / "g.png"  # outside the images' folder
    sheet = datakit("preview", val, "--classes", classes, "--out", out)
    assert sheet.returncode == 0, sheet.stderr
    assert sheet.stdout.endswith(f"to {out}; classes: 0 0, 1 1, 2 2, 3 3\n")
    both = datakit("stats", val, "--classes", classes, "--remap-labels")
    assert (both.returncode, both.stderr) == (2, "datakit stats: error: classes= and remap_labels= both number the "
                                                 "classes; give one of them\n")  # fmt: skip


def test_shards_join_and_are_verified_by_a_glob_as_check_reads_them(class_folder: Path, tmp_path: Path, capsys,
                                                                    monkeypatch: pytest.MonkeyPatch):  # fmt: skip
    # The attack: check 'part-*.lmdb' read the shards as one, but pack-lmdb, verify and info said "part-*.lmdb: no
    # such file or folder", and pack-lmdb part-0.lmdb part-1.lmdb OUT "takes SRC and OUT, got 3 paths".
    from datakit.datasets import open_dataset

    monkeypatch.chdir(tmp_path)
    for i in range(2):
        assert main(["pack-lmdb", str(class_folder), f"part-{i}.lmdb", "--shard", f"{i}/2", "-q"]) == 0
    assert main(["pack-lmdb", "part-*.lmdb", "joined.lmdb", "-q"]) == 0
    assert main(["pack-lmdb", "part-0.lmdb", "part-1.lmdb", "listed.lmdb", "-q"]) == 0
    whole = open_dataset(class_folder)
    for out in ("joined.lmdb", "listed.lmdb"):
        ds = open_dataset(out)
        assert len(ds) == 12 and ds.classes == whole.classes
        stored = sorted(ds.name(i).removeprefix(f"{out}:") for i in range(12))
        assert stored == sorted(whole.name(i).split("数据 集/")[1] for i in range(12))
    capsys.readouterr()
    assert main(["verify", "part-*.lmdb"]) == 0
    assert (
        capsys.readouterr().out
        == "part-0.lmdb: 6 samples checked, 0 problems\npart-1.lmdb: 6 samples checked, 0 problems\n"
    )
    assert main(["info", "part-*.lmdb", "-q"]) == 0
    assert capsys.readouterr().out == ("part-0.lmdb: datakit-lmdb version 2, 6 samples, complete\n"
                                       "part-1.lmdb: datakit-lmdb version 2, 6 samples, complete\n")  # fmt: skip
    assert main(["verify", "part-*.lmdb", "--json"]) == 0
    assert [r["pack"] for r in json.loads(capsys.readouterr().out)] == ["part-0.lmdb", "part-1.lmdb"]
    assert main(["verify", "none-*.lmdb"]) == 2
    assert capsys.readouterr().err == "datakit verify: error: none-*.lmdb: matches nothing\n"
    assert main(["pack-lmdb", "part-0.lmdb", str(class_folder), "x.lmdb"]) == 2
    assert capsys.readouterr().err == (f"datakit pack-lmdb: error: several SRC are read as the shards of one LMDB pack; "
                                       f"{class_folder} is not an LMDB pack: give one folder, table or zip at a time\n")  # fmt: skip


def test_a_glob_of_shards_never_takes_out_and_one_bad_pack_hides_no_other(class_folder: Path, tmp_path: Path,
                                                                            capsys, monkeypatch: pytest.MonkeyPatch):  # fmt: skip
    # The attacks: pack-lmdb 'part-*.lmdb' part-all.lmdb --overwrite read part-all.lmdb too (every sample twice,
    # "complete"), and info/verify of a good pack and a folder that is not one printed nothing for the good one.
    monkeypatch.chdir(tmp_path)
    for i in range(2):
        assert main(["pack-lmdb", str(class_folder), f"part-{i}.lmdb", "--shard", f"{i}/2", "-q"]) == 0
    assert main(["pack-lmdb", "part-*.lmdb", "part-all.lmdb", "-q"]) == 0
    assert main(["pack-lmdb", "part-*.lmdb", "part-all.lmdb", "-q", "--overwrite"]) == 0
    assert main(["pack-lmdb", "part-*.lmdb", "part-all.lmdb", "-q", "--resume"]) == 0
    assert main(["info", "part-all.lmdb", "-q"]) == 0
    assert capsys.readouterr().out == "part-all.lmdb: datakit-lmdb version 2, 12 samples, complete\n"
    assert main(["pack-lmdb", "part-0.lmdb", "part-all.lmdb", "part-all.lmdb"]) == 2
    assert capsys.readouterr().err == "datakit pack-lmdb: error: part-all.lmdb: is a SRC too; pack into another OUT\n"
    # the same glob spelled from the root: the same shards, so the pack resumes
    assert main(["pack-lmdb", str(tmp_path / "part-?.lmdb"), "part-all.lmdb", "-q", "--resume"]) == 0
    # the joined pack beside its shards, under one glob: every sample would be read twice
    assert main(["pack-lmdb", "part-*.lmdb", "merged.lmdb", "-q"]) == 2
    assert capsys.readouterr().err == (f"datakit pack-lmdb: error: {tmp_path / 'part-all.lmdb'}: was packed from "
                                       f"{tmp_path / 'part-0.lmdb'}, given too; each sample is read once: give the one "
                                       "or the others\n")  # fmt: skip
    assert main(["stats", "part-0.lmdb", "part-0.lmdb"]) == 2
    assert capsys.readouterr().err.endswith("part-0.lmdb: given twice (as part-0.lmdb); each pack is read once\n")
    assert main(["check", "part-*.lmdb", "-q"]) == 2
    assert capsys.readouterr().err.endswith("part-all.lmdb: was packed from part-0.lmdb, given too; each sample is "
                                            "read once: give the one or the others\n")  # fmt: skip
    (tmp_path / "notpack").mkdir()
    assert main(["info", "part-0.lmdb", "notpack", "-q"]) == 2
    out = capsys.readouterr()
    assert out.out == "part-0.lmdb: datakit-lmdb version 2, 6 samples, complete\n"
    assert out.err == ("datakit info: error: notpack: not an LMDB pack (no data.mdb); a pack is the folder pack-lmdb "
                       "wrote\n")  # fmt: skip
    assert main(["verify", "part-0.lmdb", "notpack", "--json"]) == 2
    out = capsys.readouterr()
    assert [(r["pack"], r.get("problems"), r.get("error")) for r in json.loads(out.out)] == [
        ("part-0.lmdb", [], None),
        ("notpack", None, "notpack: not an LMDB pack (no data.mdb); a pack is the folder pack-lmdb wrote"),
    ]
    assert main(["info", "part-0.lmdb", "nope.lmdb", "--json"]) == 2  # a missing one, said in its turn
    out = capsys.readouterr()
    assert [(r["pack"], r.get("count"), r.get("error")) for r in json.loads(out.out)] == [
        ("part-0.lmdb", 6, None), ("nope.lmdb", None, "nope.lmdb: no such file or folder")]  # fmt: skip
    assert out.err == "datakit info: error: nope.lmdb: no such file or folder\n"


def test_a_path_no_file_system_takes_is_a_usage_error_in_one_line(class_folder: Path, tmp_path: Path, capsys):
    # the attacks: a name of 300 bytes as OUT or as SRC gave an "OSError: [Errno 36] File name too long" traceback
    # (pack-lmdb, info, stats, verify, check, preview); OUT under a file said "writing failed ... run the same
    # command with --resume", exit 1
    long = tmp_path / ("a" * 300)
    for argv in (["info", long], ["stats", long], ["verify", long], ["check", long]):
        assert main([str(a) for a in argv]) == 2
        assert capsys.readouterr().err == f"datakit {argv[0]}: error: {long}: File name too long\n"
    assert main(["pack-lmdb", str(class_folder), f"{long}.lmdb"]) == 2
    assert capsys.readouterr().err == (f"datakit pack-lmdb: error: {long}.lmdb: a name in it is 305 bytes, longer "
                                       "than a file name may be (255)\n")  # fmt: skip
    assert main(["preview", str(class_folder), "--out", f"{long}.png"]) == 2
    assert capsys.readouterr().err == (f"datakit preview: error: {long}.png: a name in it is 304 bytes, longer than "
                                       "a file name may be (255)\n")  # fmt: skip
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    for out in (tmp_path / "notes.txt" / "o.lmdb", tmp_path / "notes.txt" / "x" / "o.lmdb"):
        assert main(["pack-lmdb", str(class_folder), str(out)]) == 2
        assert capsys.readouterr().err == (f"datakit pack-lmdb: error: {tmp_path / 'notes.txt'}: is a file, not a "
                                           f"folder; cannot make the pack {out} under it; pick another OUT\n")  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "数据 集"]


def test_paths_after_the_options_are_paths_too(class_folder: Path, tmp_path: Path, capsys, monkeypatch):
    # the attack: `datakit pack-lmdb SRC --max-size 64 OUT` gave "datakit: error: unrecognized arguments: OUT"
    out = tmp_path / "o.lmdb"
    assert main(["pack-lmdb", str(class_folder), "--max-size", "32", str(out), "-q"]) == 0
    assert main(["info", "--json", str(out)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["count"], info["options"]["max_size"]) == (12, 32)
    monkeypatch.chdir(tmp_path)  # after "--", a path that starts with "-"
    assert main(["pack-lmdb", str(class_folder), "-q", "--", "-d.lmdb"]) == 0
    assert (tmp_path / "-d.lmdb" / "data.mdb").is_file()
    with pytest.raises(SystemExit) as e:
        main(["info", str(out), "--bogus", "x"])
    assert e.value.code == 2 and capsys.readouterr().err.endswith(
        "datakit info: error: unrecognized arguments: --bogus x\n"
    )


@pytest.mark.parametrize("argv", [["--frob"], ["--frob", "-x"], ["-q"]])
def test_an_unknown_option_without_a_command_is_named(argv, capsys):
    # the attack: `datakit --frob` said "the following arguments are required: COMMAND"
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and capsys.readouterr().err.endswith(
        f"datakit: error: unrecognized arguments: {' '.join(argv)}\n"
    )
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2 and capsys.readouterr().err.endswith(
        "datakit: error: the following arguments are required: COMMAND\n"
    )
    with pytest.raises(SystemExit) as e:  # a mistyped command is what is named, whatever options follow it
        main(["pack_lmdb", "a", "b", "--overwrite"])
    assert (
        e.value.code == 2 and "datakit: error: argument COMMAND: invalid choice: 'pack_lmdb'" in capsys.readouterr().err
    )


def test_check_of_a_table_without_rows_prints_no_empty_class_table(class_folder: Path, tmp_path: Path, capsys):
    # the attack: "class  all / -----  ---" with nothing under it, before "0 samples checked, 1 problems"
    table = tmp_path / "empty.csv"
    table.write_text("file,label\n", encoding="utf-8")
    assert main(["check", str(class_folder), "--labels", str(table), "--workers", "0"]) == 1
    out, err = capsys.readouterr()
    assert (out, err) == ("0 samples checked, 1 problem\n", f"{table}: the table holds no rows\n")


def _datakit(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    code = "import sys; from datakit._entry import datakit; sys.exit(datakit())"  # as the installed command
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, **kw)  # fmt: skip


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_a_stdout_on_a_full_device_is_one_line_not_a_traceback(class_folder: Path):
    # the attack: `datakit check SRC --json > /dev/full` (stdout on a full disk) ended in a 20-line traceback
    code = "import sys; from datakit._entry import datakit; sys.exit(datakit())"
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-c", code, "check", str(class_folder), "--json", "--workers", "0"],
                              stdout=full, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert (proc.returncode, proc.stderr) == (1, "datakit check: error: cannot write the output: No space left on "
                                                 "device\n")  # fmt: skip


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_a_stderr_on_a_full_device_or_a_gone_reader_keeps_the_commands_exit_code(class_folder: Path, tmp_path: Path):
    # the attack: with stderr on a full disk (2>/dev/full) or a pipe whose reader went away (2>&1 | true), a usage
    # mistake was exit 1 (its line's write failed, then the error line's), and `--skip-bad` wrote a complete pack
    # but exited 1 with nothing on stdout
    code = "import sys; from datakit._entry import datakit; sys.exit(datakit())"
    out = tmp_path / "p.lmdb"
    assert _datakit("pack-lmdb", str(class_folder), str(out)).returncode == 0
    with open("/dev/full", "w") as full:
        again = subprocess.run([sys.executable, "-c", code, "pack-lmdb", str(class_folder), str(out)],
                               stdout=subprocess.PIPE, stderr=full, text=True)  # fmt: skip
    assert (again.returncode, again.stdout) == (2, "")
    piped = subprocess.run(f"{sys.executable} -c '{code}' pack-lmdb '{class_folder}' '{out}' 2>&1 | true; "
                           "exit ${PIPESTATUS[0]}", shell=True, executable="/bin/bash")  # fmt: skip
    assert piped.returncode == 2
    (class_folder / "cat" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(20))
    with open("/dev/full", "w") as full:
        skipped = subprocess.run([sys.executable, "-c", code, "pack-lmdb", str(class_folder), str(tmp_path / "s.lmdb"),
                                  "--skip-bad"], stdout=subprocess.PIPE, stderr=full, text=True)  # fmt: skip
    assert skipped.returncode == 0
    assert skipped.stdout.startswith(f"packed 12 images into {tmp_path / 's.lmdb'}: ")
    assert skipped.stdout.rstrip().endswith("; 1 unreadable image skipped")


def test_json_on_a_stdout_that_is_not_utf8_is_json(class_folder: Path):
    # the attack: PYTHONIOENCODING=ascii made `check --json` write "\u9e1f" as Python's "\x..." escapes: no JSON
    out = _datakit("check", str(class_folder), "--json", env={"PYTHONIOENCODING": "ascii"})
    assert out.returncode == 0
    assert json.loads(out.stdout)["classes"] == ["cat", "dog", "鸟"]


def test_closed_streams_and_a_closed_pipe_do_not_fail_the_work(class_folder: Path, tmp_path: Path):
    # the attack: with stderr closed (2>&-) pack-lmdb stopped with exit 1 and no pack ('NoneType' has no isatty);
    # `check | true` was exit 1, bad data's code, on good data
    code = "import sys; from datakit._entry import datakit; sys.exit(datakit())"
    out = tmp_path / "p.lmdb"
    done = subprocess.run(f"{sys.executable} -c '{code}' pack-lmdb '{class_folder}' '{out}' 2>&-", shell=True,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0 and (out / "data.mdb").exists()
    rows = "\n".join(f"{i}.png,cat" for i in range(3000))
    (tmp_path / "l.csv").write_text(f"file,label\n{rows}\n")
    # --json: the 3000 missing files' lines on stdout, far more than a pipe holds, so the write meets the closed pipe
    piped = subprocess.run(f"{sys.executable} -c '{code}' check '{class_folder}' --labels '{tmp_path / 'l.csv'}' "
                           "--json 2>/dev/null | true; echo ${PIPESTATUS[0]}", shell=True, executable="/bin/bash",
                           capture_output=True, text=True)  # fmt: skip
    assert piped.stdout.strip() == "141"


def test_an_environment_no_command_can_work_in_is_refused(class_folder: Path, tmp_path: Path):
    # the attack: PYTHONUTF8=0 under LC_ALL=C (file names read as ASCII) printed a thread's traceback and called
    # every Chinese file unreadable; RANK=3 with WORLD_SIZE=2 did nothing, silently, with exit 0
    ascii_fs = _datakit("check", str(class_folder), env={"PYTHONUTF8": "0", "LC_ALL": "C", "LANG": "C"})
    assert ascii_fs.returncode == 2
    assert ascii_fs.stderr == (
        "datakit check: error: file names are read as ascii, not UTF-8 (a C or POSIX locale with PYTHONUTF8=0?), "
        "so names that are not ASCII cannot be read or written; use a UTF-8 locale (LC_ALL=C.UTF-8) or "
        "PYTHONUTF8=1\n"
    )
    launched = {"RANK": "3", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}
    rank = _datakit("pack-lmdb", str(class_folder), str(tmp_path / "r.lmdb"), env=launched)
    assert (rank.returncode, rank.stderr) == (2, "datakit pack-lmdb: error: RANK=3 is outside 0..1 (WORLD_SIZE=2): "
                                              "no rank would do the work; unset RANK and WORLD_SIZE to run alone, or "
                                              "launch with torchrun\n")  # fmt: skip
    assert not (tmp_path / "r.lmdb").exists()
    # RANK=1 WORLD_SIZE=2 left over in a shell, no launcher (no MASTER_ADDR): did nothing, exit 0; now one process
    alone = _datakit(
        "pack-lmdb", str(class_folder), str(tmp_path / "a.lmdb"), "-q", env={"RANK": "1", "WORLD_SIZE": "2"}
    )
    assert (alone.returncode, alone.stderr) == (0, "warning: RANK=1 WORLD_SIZE=2 without MASTER_ADDR: not launched by "
                                                "torchrun; running as one process\n")  # fmt: skip
    from datakit.datasets import open_dataset

    assert len(open_dataset(tmp_path / "a.lmdb")) == 12


def test_odd_paths_and_seeds_are_usage_errors_naming_what_is_wrong(class_folder: Path, tmp_path: Path, capsys):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    assert main(["check", str(tmp_path / "a")]) == 2
    assert main(["stats", str(tmp_path / "gone")]) == 2
    with pytest.raises(SystemExit) as e:
        main(["stats", str(class_folder), "--sample", "5", "--seed=-1"])
    assert e.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"datakit check: error: {tmp_path / 'a'}: a symbolic link in a loop of links (each leads to "
                      "another, never to a file or folder)")  # fmt: skip
    assert (
        err[1]
        == f"datakit stats: error: {tmp_path / 'gone'}: a symbolic link to '{tmp_path / 'nowhere'}', which does not exist"
    )
    assert err[-1] == "datakit stats: error: argument --seed: must be >= 0, got -1"


def test_sigterm_ends_a_command_as_ctrl_c_does(tmp_path: Path):
    # the attack: a job scheduler's SIGTERM killed unzip with no line and left a hidden part file behind
    import signal
    import time

    rng = np.random.default_rng(0)
    z = tmp_path / "big.zip"
    z.write_bytes(build_zip([ZipEntry(name=f"b/{i:04d}.jpg".encode(), data=rng.bytes(300_000), method=0)
                             for i in range(200)]))  # fmt: skip
    code = "import sys; print('go', flush=True); from datakit._entry import datakit; sys.exit(datakit())"
    proc = subprocess.Popen([sys.executable, "-c", code, "unzip", str(z), "-d", str(tmp_path / "out"), "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout.readline() == "go\n"
    deadline = time.monotonic() + 30
    while not any((tmp_path / "out").rglob("*.jpg")) and time.monotonic() < deadline:
        time.sleep(0.01)  # until it writes
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the extraction ended before the signal came")
    assert (proc.returncode, err) == (143, "datakit unzip: terminated\n")
    assert [p.name for p in (tmp_path / "out").rglob("*unzip-part")] == []


def test_files_named_in_gbk_bytes_on_disk_are_said_so(tmp_path: Path, capsys, caplog):
    # the attack: a GBK zip extracted by plain unzip leaves GBK bytes as names (图片 reads as the UTF-8 'ͼƬ', 猫咪
    # as no UTF-8 at all); check said the table's files were missing and others not in the table, never why
    import logging

    root = tmp_path / "g"
    (root / "cat").mkdir(parents=True)
    png = imwrite(root / "cat" / "plain.png", synthetic_image(8, 8), mode="rgb") or (root / "cat" / "plain.png")
    data = png.read_bytes()
    (root / "cat" / os.fsdecode("图片0.png".encode("gbk"))).write_bytes(data)
    (tmp_path / "l.csv").write_text("file,label\ncat/图片0.png,cat\ncat/plain.png,cat\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        assert main(["check", str(root), "--labels", str(tmp_path / "l.csv")]) == 1
    err = caplog.text
    caplog.clear()
    assert (f"note: {root}: 1 name on disk is the table's in gbk bytes ('cat/\\u037c\\u01ac0.png' is 'cat/图片0.png' "
            "in gbk): extracted by a tool that did not decode the archive's names; extract it again with unzip-gbk, "
            f"or rename them (convmv -f gbk -t utf-8 -r --notest {root})") in err  # fmt: skip
    os.mkdir(os.path.join(os.fsencode(root), "猫咪".encode("gbk")))
    with open(os.path.join(os.fsencode(root), "猫咪".encode("gbk"), b"1.png"), "wb") as f:
        f.write(data)
    with caplog.at_level(logging.WARNING):
        from datakit.datasets import open_dataset

        assert len(open_dataset(root)) == 3
    assert (f"{root}: 1 name on disk is not UTF-8 ('\\xe8\\udcdf\\udce4/1.png' is '猫咪/1.png' in gbk): extracted by "
            "a tool that did not decode the archive's names; extract it again with unzip-gbk, or rename them "
            f"(convmv -f gbk -t utf-8 -r --notest {root})") in caplog.text  # fmt: skip


def test_names_not_utf8_from_no_archive_tool_are_not_blamed_on_one():
    # the review's case: a Latin-1 name from an old system was "extracted by a tool that did not decode the
    # archive's names ... convmv -f cp1251", a false cause and a rename that would give another wrong name
    from datakit.filenames import undecoded_names

    latin1 = os.fsdecode(b"caf\xe9.jpg")
    assert undecoded_names("d", [latin1, "ok.jpg"]) == (
        "d: 1 name on disk is not UTF-8 ('caf\\udce9.jpg'); rename them to UTF-8 (convmv -f ENCODING -t utf-8 -r "
        "--notest d, with the encoding they were written in)"
    )
    assert undecoded_names("d", ["ok.jpg", "猫.jpg"]) is None
    # the next attack: UTF-8 class folders holding GBK (or Latin-1) file names, as plain unzip leaves an archive's
    # files in folders made by hand: an IndexError traceback from check, stats, pack-lmdb and open_dataset
    gbk = [os.fsdecode(c.encode() + b"/" + f"照片{k}.jpg".encode("gbk")) for c in ("猫", "狗") for k in range(3)]
    assert undecoded_names("d", gbk) == (
        "d: 6 names on disk are not UTF-8 ('\\u732b/\\udcd5\\udcd5\\u01ac0.jpg' is '猫/照片0.jpg' in gbk): extracted "
        "by a tool that did not decode the archive's names; extract it again with unzip-gbk, or rename them (convmv "
        "-f gbk -t utf-8 -r --notest d)"
    )
    assert undecoded_names("d", ["猫/" + latin1, "狗/" + os.fsdecode(b"gar\xe7on.jpg")]) == (
        "d: 2 names on disk are not UTF-8 ('\\u732b/caf\\udce9.jpg'); rename them to UTF-8 (convmv -f ENCODING -t "
        "utf-8 -r --notest d, with the encoding they were written in)"
    )


def test_a_pixel_budget_that_is_no_number_is_one_usage_line_and_sizes_over_it_are_refused(class_folder: Path,
                                                                                         tmp_path: Path):  # fmt: skip
    # the attacks: DATAKIT_MAX_PIXELS=abc made every image "unreadable" (exit 1), `verify` call a good pack damaged
    # and `pack-lmdb` leave an empty pack; `preview --size 100000` asked for 58 GB and died in a traceback
    out = tmp_path / "p.lmdb"
    for args in (("check", str(class_folder)), ("pack-lmdb", str(class_folder), str(out)),
                 ("stats", str(class_folder), "--size", "10x10")):  # fmt: skip
        proc = _datakit(*args, env={"DATAKIT_MAX_PIXELS": "abc"})
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"datakit {args[0]}: error: DATAKIT_MAX_PIXELS="
                                                               "'abc': not a positive whole number of pixels\n")  # fmt: skip
    assert not out.exists()
    for command in ("preview", "bench"):
        extra = ("--out", str(tmp_path / "g.png")) if command == "preview" else ()
        proc = _datakit(command, str(class_folder), *extra, "--size", "100000")
        assert proc.returncode == 2 and proc.stderr.splitlines()[-1] == (
            f"datakit {command}: error: argument --size: 100000x100000 = 10000000000 pixels, over the limit of "
            "89478485 a decoded image may have (DATAKIT_MAX_PIXELS)"
        )


@pytest.mark.parametrize(("signal_name", "code", "line"), [("Terminated", 143, "terminated"),
                                                           ("Interrupt", 130, "interrupted")])  # fmt: skip
def test_loader_workers_killed_by_a_group_signal_end_as_the_signal_does(signal_name: str, code: int, line: str,
                                                                        capsys):  # fmt: skip
    # the attack: `kill -TERM -- -PGID` (timeout, Slurm, systemd) during `datakit bench`: torch's loader saw its
    # workers die before this process's handler ran, and printed its RuntimeError as a traceback (sometimes exit 1)
    import argparse

    from datakit import cli

    def bench(args):
        raise RuntimeError(f"DataLoader worker (pid 4242) is killed by signal: {signal_name}. ")

    assert cli._run(bench, argparse.Namespace(quiet=True), "datakit bench") == code
    assert capsys.readouterr().err == f"datakit bench: {line}\n"


def test_a_preview_or_histogram_inside_a_class_folder_is_refused(class_folder: Path):
    # the attack: `preview SRC --out SRC/cat/1.png --overwrite` replaced a source image with the contact sheet, and
    # a picture written into a class folder was one more sample of that class to every later scan
    image = class_folder / "cat" / "图片_1.png"
    before = image.read_bytes()
    for args, what, out in ((("preview", "--out"), "contact sheet", image),
                            (("stats", "--plot"), "histogram", class_folder / "dog" / "h.png")):  # fmt: skip
        proc = _datakit(args[0], str(class_folder), args[1], str(out), "--overwrite")
        assert (proc.returncode, proc.stderr) == (2, f"datakit {args[0]}: error: {out}: inside the source folder "
                                                  f"{class_folder}, where every later scan (check, stats, "
                                                  f"open_dataset) would read the {what} as one of its images; write "
                                                  "it outside\n")  # fmt: skip
    assert image.read_bytes() == before and not (class_folder / "dog" / "h.png").exists()
    beside = _datakit("preview", str(class_folder), "--out", str(class_folder / "grid.png"), "--n", "2")
    assert beside.returncode == 0 and (class_folder / "grid.png").exists()  # beside the class folders: no sample


def test_a_preview_or_histogram_among_the_images_of_a_table_given_alone_is_refused(tmp_path: Path):
    # the attack: `stats tt/labels.csv --plot tt/images/cat/cat_03.png --overwrite` replaced a sample with the
    # histogram (exit 0), and `preview tt/labels.csv --out tt/images/cat/new.png` put a picture among the images that
    # `check tt/labels.csv` then reported as not in the table; a folder source refused both
    from conftest import SAMPLES

    tt = tmp_path / "tt"
    shutil.copytree(SAMPLES / "images", tt / "images")
    shutil.copy(SAMPLES / "labels.csv", tt / "labels.csv")
    image = next(p for p in sorted((tt / "images").rglob("*")) if p.is_file())
    before = image.read_bytes()
    for args, what, out in ((("stats", "--plot"), "histogram", image),
                            (("preview", "--out"), "contact sheet", tt / "images" / "cat" / "new.png"),
                            (("preview", "--out"), "contact sheet", tt / "grid.png")):  # fmt: skip
        proc = _datakit(args[0], str(tt / "labels.csv"), args[1], str(out), "--overwrite")
        assert (proc.returncode, proc.stderr) == (2, f"datakit {args[0]}: error: {out}: inside {tt}/, the folder of "
                                                  f"the images {tt / 'labels.csv'} names, where it could replace one "
                                                  f"of them and `check` would find the {what} among them as an image "
                                                  "not in the table; write it outside\n")  # fmt: skip
    assert image.read_bytes() == before and not (tt / "images" / "cat" / "new.png").exists()
    # the table named bare, from its folder: "inside , the folder of the images labels.csv names"
    proc = _datakit("preview", "labels.csv", "--out", "sheet.png", cwd=tt)
    assert (proc.returncode, proc.stderr) == (2, "datakit preview: error: sheet.png: inside ./, the folder of the "
                                              "images labels.csv names, where it could replace one of them and "
                                              "`check` would find the contact sheet among them as an image not in the "
                                              "table; write it outside\n")  # fmt: skip
    outside = _datakit("preview", str(tt / "labels.csv"), "--out", str(tmp_path / "grid.png"), "--n", "2")
    assert outside.returncode == 0 and (tmp_path / "grid.png").exists()


def test_a_preview_or_histogram_in_a_folder_given_with_labels_or_in_a_pack_is_refused(tmp_path: Path):
    # the attack: `preview t2 --labels t2.csv --out t2/a.jpg --overwrite` replaced the labelled a.jpg with the
    # contact sheet (check then passed: a 1280-px grid labelled cat), and `--out t2/grid.png` put an image the next
    # check reported as not in the table; the refusal covered class folders only, not a table's top level. A
    # picture written into a pack's folder made the next `pack-lmdb ... --overwrite` refuse the pack
    from conftest import SAMPLES

    t2 = tmp_path / "t2"
    shutil.copytree(SAMPLES / "images" / "cat", t2)
    names = sorted(p.name for p in t2.iterdir())[:2]
    (tmp_path / "t2.csv").write_text(f"file,label\n{names[0]},cat\n{names[1]},dog\n", encoding="utf-8")
    before = (t2 / names[0]).read_bytes()
    for args, what, out in ((("preview", "--out"), "contact sheet", t2 / names[0]),
                            (("stats", "--plot"), "histogram", t2 / "h.png")):  # fmt: skip
        proc = _datakit(args[0], str(t2), "--labels", str(tmp_path / "t2.csv"), args[1], str(out), "--overwrite")
        assert (proc.returncode, proc.stderr) == (2, f"datakit {args[0]}: error: {out}: inside the folder {t2}, whose "
                                                  f"images {tmp_path / 't2.csv'} names, where it could replace one of "
                                                  f"them and `check` would find the {what} among them as an image "
                                                  "not in the table; write it outside\n")  # fmt: skip
    assert (t2 / names[0]).read_bytes() == before and not (t2 / "h.png").exists()
    pack = tmp_path / "p.lmdb"
    assert _datakit("pack-lmdb", str(t2), str(pack), "--labels", str(tmp_path / "t2.csv"), "-q").returncode == 0
    proc = _datakit("preview", str(pack), "--out", str(pack / "x.png"))
    assert (proc.returncode, proc.stderr) == (2, f"datakit preview: error: {pack / 'x.png'}: inside the LMDB pack "
                                              f"{pack}, whose folder holds the pack's files alone (a re-pack with "
                                              "--overwrite would refuse it); write the contact sheet outside\n")  # fmt: skip
    assert not (pack / "x.png").exists()


def test_a_table_given_as_the_source_beside_labels_is_a_usage_error(tmp_path: Path):
    # the attack: `check samples/labels.csv --labels labels.xlsx`: 24 'missing' lines under samples/labels.csv/...
    # (exit 1, bad data), the table taken for the images' folder
    src = ROOT / "samples" / "labels.csv"
    for command in ("check", "stats"):
        proc = _datakit(command, str(src), "--labels", str(ROOT / "samples" / "labels.xlsx"))
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"datakit {command}: error: {src}: a file; with "
                                                               "labels= (--labels) the source is the folder or .zip "
                                                               "of the images the table names\n")  # fmt: skip


def test_an_interrupted_overwrite_says_where_the_new_pack_so_far_is(class_folder: Path, tmp_path: Path, monkeypatch,
                                                                    capsys):  # fmt: skip
    # the attack: Ctrl-C during `pack-lmdb SRC OUT --overwrite` left a hidden 102 MB .OUT.overwrite-part and said
    # only "interrupted"
    import datakit.pack as pack

    out = tmp_path / "p.lmdb"
    assert main(["pack-lmdb", str(class_folder), str(out), "-q"]) == 0
    monkeypatch.setattr(pack, "_fill", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    capsys.readouterr()
    assert main(["pack-lmdb", str(class_folder), str(out), "--overwrite"]) == 130
    part = tmp_path / ".p.lmdb.overwrite-part"
    assert part.is_dir() and capsys.readouterr().err == (
        f"{out} still holds the old pack, untouched; the new one so far is kept in {part}: the same --overwrite "
        "command goes on from it, or delete it to give its space back\ndatakit pack-lmdb: interrupted\n"
    )


def test_a_sigterm_while_the_command_starts_ends_it_with_one_line():
    # the attack: a scheduler's SIGTERM before the command had installed its own handler (imports, the parser)
    # killed it with no word, where Ctrl-C there gave one line; the command below stops there (before started())
    code = ("import os, signal, sys, time; import datakit.cli as c; from datakit import _entry\n"
            "def stopped():\n    os.kill(os.getpid(), signal.SIGTERM); time.sleep(30); return 0\n"
            "c.stopped = stopped\nsys.exit(_entry._start('datakit check', 'stopped'))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (143, "datakit check: terminated\n")
    ignored = subprocess.run([sys.executable, "-c", "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                              + code.replace("time.sleep(30)", "time.sleep(0.2)")],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (ignored.returncode, ignored.stderr) == (0, "")  # SIGTERM ignored by whoever started it: left so


def test_a_ctrl_c_landing_in_the_import_machinery_is_sent_again_not_lost():
    # the attack (about 1 in 200 Ctrl-C at 0.25 s into pack-lmdb): the KeyboardInterrupt was raised inside a module
    # lock's weakref callback, where Python prints "Exception ignored in ..." and drops it: the pack ran to the end
    code = (
        "import signal, sys, time\n"
        "from datakit import _entry\n"
        "signal.signal(signal.SIGINT, _entry.interrupt)\n"
        "exec(compile('import sys; frame.append(sys._getframe())', '<frozen importlib._bootstrap>', 'exec'),"
        " {'frame': (box := [])})\n"
        "_entry.interrupt(signal.SIGINT, box[0])  # where Python would drop the exception: deferred, no raise\n"
        "print('deferred', flush=True)\n"
        "try:\n"
        "    time.sleep(30)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "deferred\ninterrupted\n", "")
    # and it is the handler a command's Ctrl-C finds once it has started
    code = ("import signal, sys; from datakit import _entry, cli\n"
            "cli.probe = lambda: print(signal.getsignal(signal.SIGINT) is _entry.interrupt) or 0\n"
            "def probe():\n    _entry.started(); return cli.probe()\n"
            "cli.started_probe = probe\nsys.exit(_entry._start('datakit check', 'started_probe'))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "True\n")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_label_table_or_class_list_that_is_a_pipe_or_a_device_is_a_usage_mistake(class_folder: Path, capfd):
    # the attack: `--labels <(iconv -f gbk -t utf-8 labels.csv)` (a pipe) and `--labels /dev/zero` said "no such
    # label table", exit 1, and `--classes <(...)` "no such file": the path is there, and it is not a file
    fifo = class_folder.parent / "labels.csv"
    os.mkfifo(fifo)
    out = class_folder.parent / "out.lmdb"
    assert main(["check", str(class_folder), "--labels", str(fifo)]) == 2
    assert main(["pack-lmdb", str(class_folder), str(out), "--labels", os.devnull, "-q"]) == 2
    assert main(["pack-lmdb", str(class_folder), str(out), "--classes", str(fifo), "-q"]) == 2
    advice = "not a file: a label table is read from a file, whose suffix says its format; save it as one (.csv, .xlsx, ...) and give that"  # noqa: E501
    assert capfd.readouterr().err.splitlines() == [
        f"datakit check: error: {fifo}: a pipe, {advice}",
        f"datakit pack-lmdb: error: {os.devnull}: a device, {advice}",
        f"datakit pack-lmdb: error: classes={str(fifo)!r}: a pipe, not a file (a pack, a .json or a .txt of class "
        "names)",
    ]
    assert not out.exists()


def test_an_empty_path_is_a_usage_error_not_this_folder(capsys):
    # the attack: `datakit check "$DATA"` with DATA unset read the current folder, reported as "."
    for cmd in ("check", "stats", "bench"):
        assert main([cmd, ""]) == 2
        assert capsys.readouterr().err == (f"datakit {cmd}: error: an empty path (''); give the folder, table, zip or "
                                           "pack to read (an unset variable?)\n")  # fmt: skip


def test_an_empty_option_path_or_column_is_a_usage_error(class_folder: Path, tmp_path: Path, monkeypatch, capsys):
    # the attack: `--classes "$TRAIN"` with TRAIN unset read the current folder (here a folder of class folders, the
    # dataset's own among them) as the class list: targets off by one, exit 0; --label-column "" exited 1, saying
    # the table had no label column
    table = tmp_path / "l.csv"
    table.write_text("file,label\ncat/图片_0.jpg,cat\ndog/图片_0.jpg,dog\n", encoding="utf-8")
    monkeypatch.chdir(class_folder)
    for option, kind, fix in (
        ("--classes", "path", "give the file or folder, or . for the current folder"),
        ("--labels", "path", "give the file or folder, or . for the current folder"),
        ("--split", "name", "give the split's name, or leave it out for every split"),
        ("--label-column", "name", "give the column's header, or leave it out to find the column by the common names"),
        ("--file-column", "name", "give the column's header, or leave it out to find the column by the common names"),
    ):
        args = ["check", str(class_folder)] + (["--labels", str(table)] if option != "--labels" else []) + [option, ""]
        assert main(args) == 2, option
        name = option[2:].replace("-", "_")
        assert capsys.readouterr().err == (f"datakit check: error: {name}= ({option}): an empty {kind} (''); {fix} (an "
                                           "unset variable?)\n")  # fmt: skip


def test_check_notes_are_one_line_each_and_quiet_prints_problems_alone(tmp_path: Path):
    # the attack: a note naming 'two\nlines.png' printed the newline raw (one note, two lines), and check -q, which
    # prints "only the problems", printed the note too
    (tmp_path / "f" / "a").mkdir(parents=True)
    png = tmp_path / "f" / "a" / "one.png"
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(png)
    (tmp_path / "f" / "a" / "two\nlines.png").write_bytes(png.read_bytes())
    (tmp_path / "f" / "a" / "bad\nname.png").write_bytes(b"")
    proc = datakit("check", tmp_path / "f")
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        f"note: 1 image is a copy of another under another name, with the same label (the same bytes), such as "
        f"{tmp_path}/f/a/two\\nlines.png of {tmp_path}/f/a/one.png",
        f"unreadable: {tmp_path}/f/a/bad\\nname.png: empty file (0 bytes)",
    ]
    quiet = datakit("check", tmp_path / "f", "-q")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (
        1,
        "",
        f"unreadable: {tmp_path}/f/a/bad\\nname.png: empty file (0 bytes)\n",
    )
    # a warning that changes training (class folders that are numbers, indexed in text order) stays under -q
    for k, c in enumerate(("1", "2", "10")):
        (tmp_path / "n" / c).mkdir(parents=True)
        Image.fromarray(np.full((4, 4, 3), k, np.uint8)).save(tmp_path / "n" / c / "a.png")
    quiet = datakit("check", tmp_path / "n", "-q")
    assert (quiet.returncode, quiet.stdout) == (0, "")
    assert quiet.stderr.startswith(f"{tmp_path / 'n'}: the class folders are numbers, indexed in text order")


def test_a_rank_that_made_its_group_ends_with_its_code_its_exit_hooks_run_and_output_written(tmp_path: Path):
    # the attack: `torchrun ... datakit stats DIR` printed the right result, then now and then one rank aborted in
    # the interpreter's teardown ("terminate called without an active exception", exit -6) and torchrun said 1
    code = (
        "import atexit, sys; from datakit import _entry\n"
        f"atexit.register(lambda: open({str(tmp_path / 'hook')!r}, 'w').write('ran'))\n"
        "print('result', end='')\n"
        "_entry._end_now(3)\n"
        "print('never')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "result", "")
    assert (tmp_path / "hook").read_text() == "ran"


def test_pack_lmdb_reads_a_zips_names_in_the_encoding_given(tmp_path: Path, capsys):
    # the attack: `check x.zip --encoding utf-8` read the names as UTF-8, `pack-lmdb x.zip out --encoding utf-8` did
    # not (the option went to a label table there was none of): the pack kept other class names, exit 0
    from datakit.io import encode_image
    from datakit.lmdb import LmdbReader

    png = encode_image(synthetic_image(8, 8, seed=1), ".png")
    names = ["party 🎉/1.png", "beach 🏖️/2.png"]
    z = tmp_path / "e.zip"
    z.write_bytes(build_zip([ZipEntry(name=n.encode(), data=png) for n in names]))  # UTF-8 bytes, no flag
    out = tmp_path / "p.lmdb"
    assert main(["pack-lmdb", str(z), str(out), "--encoding", "utf-8", "-q", "--workers", "0"]) == 0
    reader = LmdbReader(out)
    assert reader.class_map.classes == ("beach 🏖️", "party 🎉")
    assert sorted(reader.name(i) for i in range(len(reader))) == sorted(names)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("rank", ["0", "1"])
def test_a_rank_waiting_for_the_others_ends_at_ctrl_c_or_sigterm_with_one_line(class_folder: Path, sig, rank: str):
    # the attack: a rank launched by hand, waiting for ranks that never came: Ctrl-C did nothing (torch retries the
    # interrupted connect for 30 minutes), SIGTERM killed it without its line, with torch's C++ trace on stderr;
    # rank 1 did not say what it waited for
    port = str(_free_port())
    env = _env(RANK=rank, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    for cmd in ([sys.executable, "-m", "datakit.cli"], [str(Path(sys.executable).parent / "datakit")]):
        proc = subprocess.Popen([*cmd, "stats", str(class_folder)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            first = proc.stderr.readline()
            time.sleep(1.0)  # in the join
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert first == (f"datakit stats: rank {rank} of 2: waiting for the other ranks at 127.0.0.1:{port} (RANK, "
                         "WORLD_SIZE and MASTER_ADDR are set; unset them to run as one process)\n")  # fmt: skip
        word, code = ("interrupted", 130) if sig == signal.SIGINT else ("terminated", 143)
        assert (proc.returncode, err) == (code, f"datakit stats: {word}\n")


def test_more_workers_than_the_machine_holds_are_refused_before_any_work(class_folder: Path, monkeypatch, capsys):
    # the attack: `datakit bench --workers 1000` on 2 CPUs started 978 workers that filled 24 GiB; the kernel ended
    # the command and left its workers behind
    import datakit.parallel
    import datakit.tuning
    from datakit.cli import main

    def run(argv: list[str]) -> int:
        try:
            return main(argv)
        except SystemExit as e:  # argparse's own exit, as the command line gets it
            return int(e.code)

    monkeypatch.setattr(datakit.parallel, "usable_cpus", lambda: 2)
    monkeypatch.setattr(datakit.tuning, "_available_memory", lambda: 6 << 30)  # room for 10 at 600 MiB
    for argv in (["bench", str(class_folder), "--workers", "0,1000"], ["stats", str(class_folder), "--workers", "1000"],
                 ["check", str(class_folder), "--workers", "11"]):  # fmt: skip
        assert run(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        count = argv[-1].split(",")[-1]
        assert err == (f"datakit {argv[0]}: error: argument --workers: {count} worker processes: at most 10 here (2 "
                       "usable CPUs and 6.0 GiB of available memory; 4 a CPU, or one per 600 MiB available)")  # fmt: skip
    monkeypatch.setattr(datakit.tuning, "_available_memory", lambda: 1 << 30)  # the CPUs' 4 each stand
    assert run(["stats", str(class_folder), "--workers", "9"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == ("datakit stats: error: argument --workers: 9 worker processes: at most 8 here (2 usable CPUs and "
                    "1.0 GiB of available memory; 4 a CPU, or one per 600 MiB available)")  # fmt: skip
    assert run(["stats", str(class_folder), "--workers", "8", "-q"]) == 0  # 4 a CPU: taken
    capsys.readouterr()


def test_pictures_inside_any_pack_or_too_large_for_their_format_are_refused_before_the_work(samples: Path,
                                                                                          tmp_path: Path, capsys):  # fmt: skip
    # the attacks: `stats 'part-*.lmdb' --plot part-0.lmdb/h.png` wrote into a shard (the glob was not expanded),
    # and `stats data --plot all.lmdb/h.png` into a pack that was no source: the next `pack-lmdb ... --overwrite`
    # refused that pack; `preview --n 800 --out g.webp` failed after reading every sample (18300 px, over WebP's
    # 16383), exit 1
    parts = [tmp_path / f"part-{i}.lmdb" for i in range(2)]
    for i, p in enumerate(parts):
        assert main(["pack-lmdb", str(samples / "images"), str(p), "--shard", f"{i}/2", "-q"]) == 0
    for cmd, out, what in (
        (["stats", str(tmp_path / "part-*.lmdb"), "--plot"], parts[0] / "h.png", "histogram"),
        (["stats", str(samples / "images"), "--plot"], parts[1] / "h.png", "histogram"),
        (["preview", str(tmp_path / "part-*.lmdb"), "--out"], parts[1] / "g.png", "contact sheet"),
    ):
        assert main([*cmd, str(out)]) == 2
        assert capsys.readouterr().err == (f"datakit {cmd[0]}: error: {out}: inside the LMDB pack {out.parent}, whose "
                                           "folder holds the pack's files alone (a re-pack with --overwrite would "
                                           f"refuse it); write the {what} outside\n")  # fmt: skip
        assert not out.exists()
    big = tmp_path / "g.webp"
    assert main(["preview", str(samples / "images"), "--out", str(big), "--n", "24"]) == 0  # 8 x 3 tiles: it fits
    assert main(["preview", str(samples / "images"), "--out", str(tmp_path / "g.jpg"), "--n", "24"]) == 0
    capsys.readouterr()
    from datakit.preview import preview
    from datakit.sources import open_source

    with pytest.raises(UsageError) as e:
        preview(open_source(samples / "images"), tmp_path / "tall.webp", n=24, cols=1, tile=800)
    assert str(e.value) == (f"{tmp_path / 'tall.webp'}: 24 samples of 800 px in 1 columns make a 800 x 21456 picture, "
                            "over the 16383 px a .webp side can hold; show fewer samples (n=, --n)")  # fmt: skip
    assert not (tmp_path / "tall.webp").exists()


def test_preview_of_a_class_named_with_a_line_break_draws_it_on_one_line(tmp_path: Path, capsys):
    # the attack: an Excel label typed with Alt+Enter ('big\ncat'): check passed, preview died in Pillow's text
    # layout (RuntimeError: raqm_layout() failed), a traceback
    img = tmp_path / "imgs"
    img.mkdir()
    for k in range(2):
        imwrite(img / f"{k}.png", synthetic_image(16, 16, seed=k), mode="rgb")
    from openpyxl import Workbook

    wb = Workbook()
    for row in (("file", "label"), ("0.png", "big\ncat"), ("1.png", "dog")):
        wb.active.append(row)
    wb.save(tmp_path / "t.xlsx")
    out = tmp_path / "g.png"
    assert main(["preview", str(img), "--labels", str(tmp_path / "t.xlsx"), "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote 2 of 2 samples, as decoded, to {out}; classes: 0 big\\ncat, 1 dog\n"
    assert out.exists()


def test_doctor_on_a_table_whose_images_are_elsewhere_names_its_own_fix(samples: Path, tmp_path: Path, capsys):
    # the attack: `doctor labels.csv` said "CLI: data --labels TABLE", and `doctor data --labels labels.csv` was
    # then refused (doctor takes no --labels)
    shutil.copy(samples / "labels.csv", tmp_path / "labels.csv")
    shutil.copytree(samples / "images", tmp_path / "data" / "images")
    assert main(["doctor", str(tmp_path / "labels.csv"), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.endswith(f"; doctor reads the images alone: datakit doctor {tmp_path / 'data'})\n"), err
    assert "--labels TABLE" not in err


def test_info_and_verify_refuse_a_pack_given_twice(class_folder: Path, tmp_path: Path, capsys):
    # the attack: `info all.lmdb all.lmdb` printed the pack twice, where stats refuses it
    pack = tmp_path / "p.lmdb"
    assert main(["pack-lmdb", str(class_folder), str(pack), "-q"]) == 0
    for cmd in ("info", "verify"):
        assert main([cmd, str(pack), str(tmp_path / "." / "p.lmdb")]) == 2
        assert (
            capsys.readouterr().err
            == f"datakit {cmd}: error: {pack}: given twice (as {pack}); each pack is read once\n"
        )


def test_a_histogram_that_is_no_image_may_be_written_among_the_images(samples: Path, tmp_path: Path, capsys):
    # a false positive of the refusal above: `stats . --labels labels.csv --plot hist.svg` (or .pdf) was refused as
    # an image `check` would find among the images; no scan reads an .svg or .pdf as one
    proj = tmp_path / "proj"
    shutil.copytree(samples / "images", proj / "images")
    shutil.copy(samples / "labels.csv", proj / "labels.csv")
    for name in ("hist.svg", "reports/hist.pdf"):
        (proj / "reports").mkdir(exist_ok=True)
        assert main(["stats", str(proj), "--labels", str(proj / "labels.csv"), "--plot", str(proj / name), "-q"]) == 0
        assert (proj / name).exists()
    capsys.readouterr()
    assert main(["check", str(proj), "--labels", str(proj / "labels.csv"), "-q"]) == 0


def _as_user(cmd: list[str]) -> list[str]:
    """``cmd`` run without root's right to ignore file permissions (a no-op for another user)."""
    import shutil

    if os.geteuid() != 0:
        return cmd
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to drop root's permission override")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *cmd]


def test_folders_this_process_may_not_enter_or_read_are_usage_errors(tmp_path: Path, class_folder: Path):
    # the attack: an output folder without its x bit (chmod 000, 600) gave "[Errno 13] Permission denied:
    # 'm/p.png'" and exit 1 (pack-lmdb named 'm/data.mdb', a file that is not there), an unreadable source folder
    # 'm/data.mdb' too, and unzip-gbk into a folder it may write but not read "[Errno 13] ... 'm300'"
    from datakit.io import encode_image

    (tmp_path / "src.zip").write_bytes(build_zip([ZipEntry(b"cat/0.png", encode_image(np.zeros((4, 4, 3), np.uint8),
                                                                                      ".png"))]))  # fmt: skip
    for mode in (0o000, 0o600, 0o300):
        (tmp_path / f"m{mode:o}").mkdir(mode=mode)
    try:
        runs = {
            "preview": ["preview", str(class_folder), "--out", str(tmp_path / "m0" / "p.png"), "-q"],
            "stats": ["stats", str(class_folder), "--plot", str(tmp_path / "m600" / "p.svg"), "-q"],
            "pack": ["pack-lmdb", str(class_folder), str(tmp_path / "m600" / "o.lmdb"), "-q", "--workers", "0"],
            "check": ["check", str(tmp_path / "m0"), "-q"],
        }
        got = {k: subprocess.run(_as_user([sys.executable, "-m", "datakit.cli", *v]), capture_output=True,
                                 text=True, timeout=120) for k, v in runs.items()}  # fmt: skip
        unzip = subprocess.run(_as_user([sys.executable, "-c", "import sys; from datakit.cli import unzip_gbk_main; "
                                         "sys.exit(unzip_gbk_main(sys.argv[1:]))", str(tmp_path / "src.zip"), "-d",
                                         str(tmp_path / "m300"), "-q"]), capture_output=True, text=True, timeout=120)  # fmt: skip
    finally:
        for mode in (0o000, 0o600, 0o300):
            (tmp_path / f"m{mode:o}").chmod(0o755)
    m0, m600 = tmp_path / "m0", tmp_path / "m600"
    assert {k: (r.returncode, r.stderr.strip()) for k, r in got.items()} == {
        "preview": (2, f"datakit preview: error: {m0}: not writable; cannot write p.png into it"),
        "stats": (2, f"datakit stats: error: {m600}: not writable; cannot write p.svg into it"),
        "pack": (2, f"datakit pack-lmdb: error: {m600}: not writable; cannot write the pack {m600 / 'o.lmdb'} into it"),
        "check": (2, f"datakit check: error: {m0}: a folder this process may not read (its permissions); nothing in "
                     "it can be opened"),
    }  # fmt: skip
    assert (unzip.returncode, unzip.stderr.strip()) == (2, f"unzip-gbk: error: {tmp_path / 'm300'}: a folder this "
                                                           "process may not read (its permissions); extraction opens "
                                                           "the folder it writes into, to lock it and to compare what "
                                                           "is there")  # fmt: skip


def test_help_is_written_to_a_stream_that_cannot_encode_its_examples():
    # the attack: PYTHONIOENCODING=ascii datakit --help (and LC_ALL=C PYTHONUTF8=0): a UnicodeEncodeError traceback
    # on the Chinese examples, exit 1, for every command's help but three
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    for args in (["--help"], ["check", "--help"], ["pack-lmdb", "--help"]):
        out = subprocess.run([sys.executable, "-m", "datakit.cli", *args], capture_output=True, env=env, timeout=120)
        assert out.returncode == 0 and out.stderr == b"", out.stderr
        assert b"\\u6570\\u636e\\u96c6/" in out.stdout  # 数据集/, escaped


def test_classes_given_a_file_that_holds_no_text_is_a_usage_error(tmp_path: Path, class_folder: Path, capsys):
    # the attack: --classes src.zip (an image, a pack's data.mdb): "not UTF-8, UTF-16, GBK/GB18030 or Big5 text;
    # pass encoding= (--encoding)", exit 1, and --encoding gbk gave the same line
    from datakit.io import encode_image

    (tmp_path / "a.zip").write_bytes(build_zip([ZipEntry(b"cat/0.png", b"x")]))
    (tmp_path / "a.jpg").write_bytes(encode_image(np.zeros((4, 4, 3), np.uint8), ".jpg"))
    for given, why in ((tmp_path / "a.zip", "a zip archive"), (tmp_path / "a.jpg", "a JPEG image")):
        assert main(["check", str(class_folder), "--classes", str(given), "-q"]) == 2
        assert capsys.readouterr().err.strip() == (
            f"datakit check: error: classes={str(given)!r}: not a text file of class names ({why}); classes= takes a "
            "pack, a .json or a .txt of class names (one per line), or the training folder of class folders"
        )


def test_a_pack_interrupted_before_it_was_begun_promises_no_committed_samples(tmp_path: Path, class_folder: Path,
                                                                            monkeypatch, capsys):  # fmt: skip
    # the attack: Ctrl-C two seconds into pack-lmdb of 20,000 files (still listing them): "the samples committed stay:
    # the same command with --resume goes on from them", and there was no pack at all
    import datakit.pack

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(datakit.pack, "pack_lmdb", stopped)
    assert main(["pack-lmdb", str(class_folder), str(tmp_path / "out.lmdb"), "-q", "--workers", "0"]) == 130
    assert capsys.readouterr().err == "datakit pack-lmdb: interrupted\n"
    assert not (tmp_path / "out.lmdb").exists()


def test_stats_refuses_overwrite_without_a_plot_to_replace(class_folder: Path, capsys):
    # the attack: `stats SRC --overwrite` was taken in silence, where other options that change nothing are refused
    assert main(["stats", str(class_folder), "--overwrite", "-q"]) == 2
    assert capsys.readouterr().err.strip() == (
        "datakit stats: error: --overwrite replaces the histogram --plot FILE writes; without --plot nothing is "
        "written: give --plot FILE with it, or leave --overwrite out"
    )


def test_a_command_run_in_a_removed_folder_says_so(tmp_path: Path):
    # The attack: `cd gone; rmdir ../gone; datakit pack-lmdb /abs/src out.lmdb` said "error: [Errno 2] No such file
    # or directory", exit 1, naming no path.
    gone = tmp_path / "gone"
    gone.mkdir()
    code = "import sys; from datakit.cli import main; sys.exit(main(sys.argv[1:]))"
    script = f'cd "{gone}" && rmdir "{gone}" && exec "{sys.executable}" -c "{code}" pack-lmdb "{tmp_path}" out.lmdb'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", "datakit pack-lmdb: error: the current folder no longer exists (removed while the shell was in it); "
        "cd to one that does\n")  # fmt: skip


def test_the_python_api_refuses_non_ascii_names_under_a_file_name_encoding_other_than_utf8(tmp_path: Path):
    # The attack: under a locale whose file names are not UTF-8, the CLI refused, but open_dataset read the class
    # folder 猫 as mojibake, pack_lmdb kept it in classes.json, and unzip wrote an archive's names in that encoding.
    for cls in ("猫", "dog"):
        (tmp_path / "data" / cls).mkdir(parents=True)
        imwrite(tmp_path / "data" / cls / "0.png", np.zeros((4, 4, 3), np.uint8))
    (tmp_path / "ascii" / "dog").mkdir(parents=True)
    imwrite(tmp_path / "ascii" / "dog" / "0.png", np.zeros((4, 4, 3), np.uint8))
    (tmp_path / "l.csv").write_text("file,label\n猫/0.png,cat\ndog/0.png,dog\n", encoding="utf-8")
    info = zipfile.ZipInfo("猫/0.png")
    with zipfile.ZipFile(tmp_path / "a.zip", "w") as zf:
        zf.writestr(info, (tmp_path / "data" / "dog" / "0.png").read_bytes())
    code = (
        "import sys\n"
        "from datakit import open_dataset\n"
        "from datakit.archive import unzip\n"
        "from datakit.errors import UsageError\n"
        "print(open_dataset('ascii').classes)\n"
        "for call in (lambda: open_dataset('data'), lambda: open_dataset('data', labels='l.csv'),\n"
        "             lambda: unzip('a.zip', 'out')):\n"
        "    try:\n"
        "        call()\n"
        "    except UsageError as e:\n"
        "        print(e)\n"
    )
    env = {**os.environ, "PYTHONUTF8": "0", "LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0"}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    why = ("file names are read as ascii, not UTF-8 (a C or POSIX locale with PYTHONUTF8=0?), so names that are not "
           "ASCII cannot be read or written; use a UTF-8 locale (LC_ALL=C.UTF-8) or PYTHONUTF8=1")  # fmt: skip
    assert done.stdout.splitlines() == ["['dog']", f"data: {why}", f"data: {why}", f"out: {why}"]
    assert not (tmp_path / "out").exists()


def test_a_source_whose_name_looks_like_a_glob_is_taken_as_named_by_the_output_check(tmp_path: Path, capsys):
    # The review round: the source folder 'set[12]' (opened as named) was globbed by the output check, so `preview
    # 'set[12]' --out set1/cat/p.png` was refused as "inside the source folder set1", and set[12]/a/p.png let be.
    for root in ("set[12]", "set1"):
        for cls in ("a", "b"):
            (tmp_path / root / cls).mkdir(parents=True)
            imwrite(tmp_path / root / cls / "0.png", np.zeros((8, 8, 3), np.uint8))
    src = str(tmp_path / "set[12]")
    assert main(["preview", src, "--out", str(tmp_path / "set1" / "a" / "p.png"), "-q"]) == 0
    inside = tmp_path / "set[12]" / "a" / "p.png"
    assert main(["preview", src, "--out", str(inside), "-q"]) == 2
    assert capsys.readouterr().err.endswith(f"error: {inside}: inside the source folder {src}, where every later scan "
                                            "(check, stats, open_dataset) would read the contact sheet as one of its "
                                            "images; write it outside\n")  # fmt: skip
    assert not inside.exists()
