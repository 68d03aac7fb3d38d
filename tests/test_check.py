from __future__ import annotations

import json
from pathlib import Path

from openpyxl import Workbook
from PIL import Image

from datakit.check import check_dataset
from datakit.cli import main


def table(path: Path, rows: list[list[object]], sheet: str = "train") -> Path:
    wb = Workbook()
    ws = wb.active
    ws.title = sheet
    ws.append(["文件名", "标签"])
    for r in rows:
        ws.append(r)
    wb.save(path)
    return path


def test_samples_are_clean(samples: Path):
    report = check_dataset(samples / "images", labels=samples / "labels.xlsx", workers=2)
    assert report.ok and report.samples == 24
    assert report.class_counts["train"] == {"cat": 6, "coffee": 6, "太空": 6}
    assert report.height_range == (66, 231) and report.width_range == (127, 219)


def test_every_kind_of_problem(class_folder: Path, tmp_path: Path):
    (class_folder / "cat" / "图片_1.png").write_bytes(b"")
    labels = table(
        tmp_path / "标签.xlsx",
        [
            ["cat/图片_0.jpg", 1],
            ["cat/图片_1.png", 2],
            ["cat/没有.jpg", 1],
            ["cat/图片_0.jpg", 1],
            ["dog/图片_0.jpg", 3],
        ],
    )
    report = check_dataset(class_folder, labels=labels, workers=1)
    where = f"{labels}, sheet 'train'"
    assert report.problems[0].startswith(f"{labels}: integer labels are 1..3, not 0..2")
    assert f"duplicate: 'cat/图片_0.jpg' at {where}, row 5 is also at {where}, row 2" in report.problems
    assert (
        f"missing: 'cat/没有.jpg' ({where}, row 4) not found at {class_folder / 'cat' / '没有.jpg'}" in report.problems
    )
    assert (
        f"unreadable: {class_folder / 'cat' / '图片_1.png'}: empty file (0 bytes) ({where}, row 3)" in report.problems
    )
    assert f"not in the table: {class_folder / 'dog' / '图片_1.png'}" in report.problems
    assert not report.ok


def test_cli_check_exit_codes(class_folder: Path, tmp_path: Path, capsys):
    assert main(["check", str(class_folder), "--workers", "1"]) == 0
    assert "12 samples checked, 0 problems" in capsys.readouterr().out
    (class_folder / "鸟" / "图片_3.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    assert main(["check", str(class_folder), "--json", "--workers", "1"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert len(out["problems"]) == 1
    assert out["problems"][0].startswith(
        f"unreadable: {class_folder / '鸟' / '图片_3.png'}: PNG data is corrupt or truncated"
    )
    assert main(["check", str(tmp_path / "none")]) == 2


def test_cli_preview(samples: Path, tmp_path: Path, capsys):
    out = tmp_path / "预览.png"
    assert (
        main(
            [
                "preview",
                str(samples / "images.zip"),
                "--out",
                str(out),
                "--n",
                "10",
                "--transform",
                "train",
                "--size",
                "64",
            ]
        )
        == 0
    )
    with Image.open(out) as im:
        assert im.size[0] == 8 * 160 and im.size[1] > 2 * 160
    assert "classes: 0 cat, 1 coffee, 2 太空" in capsys.readouterr().out
