from __future__ import annotations

import json
from pathlib import Path

import numpy as np
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
            ["dog/图片_2.jpg", None],
        ],
    )
    report = check_dataset(class_folder, labels=labels, workers=1)
    where = f"{labels}, sheet 'train'"
    assert report.problems == [
        # the table's problems, all of them, from labels.py, in table order
        f"{where}, row 5: file 'cat/图片_0.jpg' is listed again (first at sheet 'train', row 2)",
        f"{where}, row 7: file 'dog/图片_2.jpg' has no label",
        f"{labels}: integer labels are 1..3, not 0..2; passed on as they are they would index past the 3 outputs of "
        "a classifier (CUDA: 'device-side assert triggered'). Use remap_labels=True (--remap-labels) to map 1..3 to "
        "0..2 in order, or fix the table; a split kept in a file of its own (a val list without some class) takes the "
        "training split's classes instead: classes=train.classes (pack-lmdb --classes train.lmdb), since remapping it "
        "alone would shift its indices (first outside: 3 at sheet 'train', row 6)",
        # then what needs the images
        f"missing: 'cat/没有.jpg' ({where}, row 4) not found at {class_folder / 'cat' / '没有.jpg'}",
        f"not in the table: {class_folder / 'cat' / '图片_2.jpg'}",
        f"not in the table: {class_folder / 'cat' / '图片_3.png'}",
        f"not in the table: {class_folder / 'dog' / '图片_1.png'}",  # 图片_2.jpg is in it, at row 7, without a label
        f"not in the table: {class_folder / 'dog' / '图片_3.png'}",
        f"not in the table: {class_folder / '鸟' / '图片_0.jpg'}",
        f"not in the table: {class_folder / '鸟' / '图片_1.png'}",
        f"not in the table: {class_folder / '鸟' / '图片_2.jpg'}",
        f"not in the table: {class_folder / '鸟' / '图片_3.png'}",
        f"unreadable: {class_folder / 'cat' / '图片_1.png'}: empty file (0 bytes) ({where}, row 3)",
    ]
    assert report.samples == 5 and report.class_counts == {"train": {"1": 3, "2": 1, "3": 1}}
    assert not report.ok
    # with --remap-labels the integer range is no longer a problem
    remapped = check_dataset(class_folder, labels=labels, workers=1, remap_labels=True)
    assert not any("integer labels" in p for p in remapped.problems) and len(remapped.problems) == 12


def test_cli_check_lists_every_table_problem(tmp_path: Path, capsys):
    """One line per problem on stderr, exit 1; no matching of message text anywhere."""
    root = tmp_path / "数据"
    (root / "a").mkdir(parents=True)
    (root / "train.txt").write_text("a/1.jpg 0\na/2.jpg\na/1.jpg 1\n", encoding="utf-8")
    assert main(["check", str(root), "--labels", str(root / "train.txt"), "--workers", "1"]) == 1
    err = capsys.readouterr().err.splitlines()
    labels = root / "train.txt"
    assert err[:4] == [
        f"{labels}, line 2: 'a/2.jpg' has no label (expected 'path label')",
        f"{labels}, line 3: file 'a/1.jpg' is listed again (first at line 1)",
        f"missing: 'a/1.jpg' ({labels}, line 1) not found at {root / 'a' / '1.jpg'}",
        f"missing: 'a/1.jpg' ({labels}, line 3) not found at {root / 'a' / '1.jpg'}",
    ]


def test_cli_column_and_encoding_options(class_folder: Path, tmp_path: Path, capsys):
    """--file-column, --label-column, --split-column and --encoding, as the errors advise them."""
    csv = tmp_path / "表.csv"
    rows = "".join(f"x,{c}/图片_{i}{'.png' if i % 2 else '.jpg'},{c},{'val' if i == 3 else 'train'}\n"
                   for c in ("cat", "dog") for i in range(4))  # fmt: skip
    csv.write_bytes(("编号,图,种类,折\n" + rows).encode("gbk"))
    assert main(["check", str(class_folder), "--labels", str(csv), "--workers", "1"]) == 1
    err = capsys.readouterr().err
    assert "name it with file_column= (--file-column)" in err
    opts = ["--labels", str(csv), "--file-column", "图", "--label-column", "种类", "--split-column", "折",
            "--encoding", "gbk"]  # fmt: skip
    # the folder's third class, 鸟, is in no split of the table: not in the table, one split asked for or not
    assert main(["check", str(class_folder), *opts, "--workers", "1", "--split", "train", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["samples"] == 6 and out["class_counts"] == {"train": {"cat": 3, "dog": 3}}
    birds = sorted(str(p) for p in (class_folder / "鸟").iterdir())
    assert out["problems"] == [f"not in the table: {b}" for b in birds]
    assert main(["stats", str(class_folder), *opts, "--workers", "1", "--json", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["count"] == 8
    assert main(["preview", str(class_folder), *opts, "--out", str(tmp_path / "p.png"), "--n", "4", "-q"]) == 0
    assert main(["pack-lmdb", str(class_folder), str(tmp_path / "p.lmdb"), *opts, "--workers", "1", "-q"]) == 0
    from datakit.datasets import LmdbDataset

    packed = LmdbDataset(tmp_path / "p.lmdb")
    assert len(packed) == 8 and packed.classes == ["cat", "dog"]
    assert main(["bench", str(class_folder), *opts, "--workers", "0", "--seconds", "0.2", "--size", "0",
                 "--json"]) == 0  # fmt: skip
    capsys.readouterr()
    utf8 = tmp_path / "utf8.csv"
    utf8.write_text("图,种类\ncat/图片_0.jpg,cat\n", encoding="utf-8")
    assert main(["check", str(class_folder), "--labels", str(utf8), "--encoding", "big5", "--workers", "1"]) == 1
    assert f"{utf8}, line 1: byte 0xe5 is not valid big5 text" in capsys.readouterr().err


def test_check_a_table_alone(samples: Path, capsys):
    """The committed CSV names files relative to its own folder: a table alone checks clean."""
    assert main(["check", str(samples / "labels.csv"), "--workers", "1"]) == 0
    assert "24 samples checked, 0 problems" in capsys.readouterr().out


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


def test_check_a_table_of_absolute_paths_beside_a_relative_folder(tmp_path: Path, capsys, monkeypatch):
    # The attack: `datakit check img --labels abs.csv`, the table naming the images by absolute path: every image
    # was reported "not in the table", exit 1.
    (tmp_path / "img").mkdir()
    for name in ("a", "b"):
        Image.new("RGB", (8, 8)).save(tmp_path / "img" / f"{name}.jpg")
    (tmp_path / "abs.csv").write_text(f"file,label\n{tmp_path / 'img' / 'a.jpg'},cat\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["check", "img", "--labels", "abs.csv", "--workers", "1"]) == 1
    assert capsys.readouterr().err.splitlines() == ["not in the table: img/b.jpg"]  # a.jpg is in it


def test_check_tells_an_image_apart_from_its_twin_in_another_unicode_form(tmp_path: Path, capsys, monkeypatch):
    # The attack: café.png twice in one folder, composed (NFC, as Linux and Windows write it) and decomposed (NFD,
    # as macOS writes it), the table naming it once. One was "not in the table: img/café.png", the very name the
    # table lists, with nothing to tell the two apart.
    import unicodedata

    nfc, nfd = unicodedata.normalize("NFC", "café.png"), unicodedata.normalize("NFD", "café.png")
    (tmp_path / "img").mkdir()
    for k, name in enumerate((nfc, nfd, "b.png")):
        Image.new("RGB", (8, 8), (40 * k, 0, 0)).save(tmp_path / "img" / name)
    monkeypatch.chdir(tmp_path)
    for row, other, forms in ((nfc, nfd, ("NFC", "NFD")), (nfd, nfc, ("NFD", "NFC"))):
        Path("t.csv").write_text(f"file,label\n{row},cat\nb.png,dog\n", encoding="utf-8")
        capsys.readouterr()
        assert main(["check", "img", "--labels", "t.csv", "--workers", "1"]) == 1
        assert capsys.readouterr().err.splitlines() == [
            f"not in the table: img/{other} (the row of img/{row} names the file whose name is {forms[0]}; this "
            f"one's is the same name in {forms[1]}: two files that look alike, rename or remove one)"
        ]
    Path("t.csv").write_text("file,label\nb.png,dog\n", encoding="utf-8")  # neither named: no twin to tell apart
    assert main(["check", "img", "--labels", "t.csv", "--workers", "1"]) == 1
    assert capsys.readouterr().err.splitlines() == [f"not in the table: img/{nfd}", f"not in the table: img/{nfc}"]


def test_check_says_a_folder_is_a_folder_and_names_a_row_without_a_label_once(tmp_path: Path, capsys):
    # The attacks: a row naming a folder was "not found" (it is there: a folder); the file of a row without a label
    # was also "not in the table" (it is, in that row).
    (tmp_path / "img" / "sub.jpg").mkdir(parents=True)
    for name in ("a", "b"):
        Image.new("RGB", (8, 8)).save(tmp_path / "img" / f"{name}.jpg")
    table = tmp_path / "t.csv"
    table.write_text("file,label\na.jpg,cat\nb.jpg,\nsub.jpg,dog\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["check", str(tmp_path / "img"), "--labels", str(table), "--workers", "1"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{table}, line 3: file 'b.jpg' has no label",
        f"missing: 'sub.jpg' ({table}, line 4) is a folder, not an image: {tmp_path / 'img' / 'sub.jpg'}",
    ]


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


def test_what_an_import_prints_is_not_taken_for_a_damaged_image(samples: Path):
    # the strict decode reads what C libraries print to fd 2: the decoders' own first import (here with
    # -X importtime, which prints a line per module) must happen outside that window
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "datakit.cli", "check", str(samples / "images")],
                         capture_output=True, text=True, cwd=root, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stdout
    assert out.stdout.splitlines()[-1] == "24 samples checked, 0 problems"


def test_check_reports_unlisted_images_of_a_zip_and_of_a_table_alone(tmp_path: Path, capsys):
    # The attack: "not in the table" came only for a folder given with --labels; the same data as a zip read in place
    # with --labels, or as the table alone (names relative to its folder), passed with 0 problems.
    import zipfile

    from datakit.cli import main
    from datakit.io import encode_image

    png = encode_image(np.zeros((4, 4, 3), np.uint8), ".png")
    data = tmp_path / "data"
    for name in ("cat/1.png", "dog/2.png", "dog/4.png"):
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_bytes(png)
    table = data / "labels.csv"
    table.write_text("file,label\ncat/1.png,cat\ndog/2.png,dog\n", encoding="utf-8")
    with zipfile.ZipFile(tmp_path / "data.zip", "w") as zf:
        for name in ("cat/1.png", "dog/2.png", "dog/4.png"):
            zf.write(data / name, name)
    for argv, extra in (([str(tmp_path / "data.zip"), "--labels", str(table)], f"{tmp_path / 'data.zip'}:dog/4.png"),
                        ([str(table)], str(data / "dog" / "4.png"))):  # fmt: skip
        capsys.readouterr()
        assert main(["check", *argv, "--workers", "1"]) == 1
        assert capsys.readouterr().err.splitlines()[0] == f"not in the table: {extra}"


def test_check_of_an_empty_split_reports_it_as_data(tmp_path: Path, capsys):
    # The attack: `check --split test` where the test sheet holds only its header exited 2 (usage) saying the
    # table has no sheets, where open_dataset says "an empty split".
    wb = Workbook()
    wb.active.title = "train"
    wb.active.append(["file", "label"])
    wb.active.append(["a.png", "cat"])
    wb.create_sheet("test").append(["file", "label"])
    wb.save(tmp_path / "l.xlsx")
    (tmp_path / "img").mkdir()
    Image.new("RGB", (4, 4)).save(tmp_path / "img" / "a.png")
    assert main(["check", str(tmp_path / "img"), "--labels", str(tmp_path / "l.xlsx"), "--split", "test"]) == 1
    assert capsys.readouterr().err.splitlines()[0] == (f"{tmp_path / 'l.xlsx'}, sheet 'test': an empty split (a "
                                                        "header at row 1, no rows under it)")  # fmt: skip


def test_check_refuses_look_alike_labels(tmp_path: Path, capsys):
    # The attack: '猫' in one row and '猫' followed by a zero-width space in another were two classes; check
    # printed both in its class table (they look the same) and exited 0.
    (tmp_path / "img").mkdir()
    for k, name in enumerate(("0", "1", "2")):
        Image.new("RGB", (8, 8), (40 * k, 0, 0)).save(tmp_path / "img" / f"{name}.jpg")
    path = table(tmp_path / "t.xlsx", [["0.jpg", "猫"], ["1.jpg", "狗"], ["2.jpg", "猫\u200b"]])
    capsys.readouterr()
    assert main(["check", str(tmp_path / "img"), "--labels", str(path), "--workers", "1"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{path}: labels '猫' first at sheet 'train', row 2 and '猫\\u200b' (U+200B ZERO WIDTH SPACE) first at sheet "
        "'train', row 4 differ only in invisible characters, spaces, character width or look-alike letters and marks and would be two classes; "
        "write them alike"
    ]


def test_check_notes_a_list_separated_by_a_full_width_space(tmp_path: Path, capsys, caplog):
    # The attack: '图片/1.jpg　猫' (the separator typed as a full-width space by a Chinese input method) was refused
    # as a line without a label; after a name with a space ('a b.jpg　猫') it was split at that space instead.
    (tmp_path / "图片").mkdir()
    for k, name in enumerate(("0", "1", "a b")):
        Image.new("RGB", (8, 8), (40 * k, 0, 0)).save(tmp_path / "图片" / f"{name}.jpg")
    path = tmp_path / "train.txt"
    path.write_text("图片/0.jpg 猫\n图片/1.jpg\u3000猫\n图片/a b.jpg\u3000狗\n", encoding="utf-8")
    note = (f"{path}: 2 lines separate the path and the label by a full-width space (U+3000, as a Chinese input "
            "method types it) (line 2, line 3): read as a space; tools that split lines on ASCII spaces (PaddleClas, "
            "mmpretrain) will not read them")  # fmt: skip
    capsys.readouterr()
    with caplog.at_level("WARNING", logger="datakit"):  # printed on stderr, as every note of a table
        assert main(["check", str(path), "--workers", "1"]) == 0
    captured = capsys.readouterr()
    assert caplog.messages == [note] and captured.err == ""
    assert "3 samples checked, 0 problems" in captured.out
    assert main(["check", str(path), "--workers", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["notes"] == [note] and out["problems"] == [] and out["class_counts"] == {"all": {"狗": 1, "猫": 2}}


def test_integer_classes_are_counted_and_shown_in_numeric_order(tmp_path: Path, capsys):
    # the attack: labels 0..11 came out of check as 0, 1, 10, 11, 2, ...: its counts were sorted as text, where
    # the dataset, the pack and classes.json number them 0, 1, 2, ..., 11
    rows = []
    for i in range(12):
        Image.fromarray(np.full((8, 8, 3), 10 * i, np.uint8)).save(tmp_path / f"图{i}.png")
        rows.append([f"图{i}.png", i])
    labels = table(tmp_path / "labels.xlsx", rows)
    report = check_dataset(tmp_path, labels=labels)
    order = [str(i) for i in range(12)]
    assert report.ok and list(report.class_counts["train"]) == order and report.classes == order
    assert main(["check", str(tmp_path), "--labels", str(labels)]) == 0
    shown = [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:14]]
    assert shown == order


def test_check_of_a_table_whose_files_are_elsewhere_says_where_in_one_line(samples: Path, tmp_path: Path, capsys):
    # the attack: `datakit check labels.xlsx` beside the image folder printed 48 lines (24 missing, 24 not in the
    # table) and no hint, where open_dataset, stats and pack-lmdb refuse in one line naming the folder
    import shutil

    shutil.copytree(samples, tmp_path / "copy")
    table = tmp_path / "copy" / "labels.xlsx"
    assert main(["check", str(table)]) == 2  # the fix is the command line's (the folder to give): a usage error
    images = tmp_path / "copy" / "images"
    assert capsys.readouterr().err.splitlines() == [
        f"datakit check: error: {table}: none of the files the table names (8 looked for, first 'cat/猫_01.jpg') is "
        f"under {tmp_path / 'copy'}; names are relative to the table's folder, or to the folder given with it; "
        f"they are under {images}: give that folder (open_dataset({str(images)!r}, labels=TABLE), or "
        f"root={str(images)!r} with the table alone; CLI: {images} --labels TABLE)"
    ]


def test_check_of_one_split_names_an_image_no_split_names(class_folder: Path, tmp_path: Path):
    # the attack: with --split train, an image that no sheet names went unreported (the other splits' files are
    # expected there, and so every file was); without --split it was "not in the table"
    images = sorted(p.relative_to(class_folder).as_posix() for p in class_folder.rglob("*.*"))
    wb = Workbook()
    for k, name in enumerate(["train", "val"]):
        ws = wb.active if k == 0 else wb.create_sheet()
        ws.title = name
        ws.append(["文件名", "标签"])
        for f in images[k::2][:-1] if name == "val" else images[k::2]:  # val's last image left out of every sheet
            ws.append([f, f.split("/")[0]])
    wb.save(tmp_path / "splits.xlsx")
    unnamed = class_folder / images[1::2][-1]
    for split in (None, "train"):
        report = check_dataset(class_folder, labels=tmp_path / "splits.xlsx", split=split)
        assert report.problems == [f"not in the table: {unnamed}"]


def test_a_missing_file_whose_name_on_disk_has_spaces_around_it_is_said(tmp_path: Path):
    # the attack: ' lead.png' on disk, named so in the table: a table's names are stripped of spaces, so check said
    # "missing: 'lead.png'" and "not in the table: img/ lead.png", two lines contradicting each other without the fix
    (tmp_path / "img").mkdir()
    for k, n in enumerate((" lead.png", "trail.png ", "ok.png")):
        Image.fromarray(np.full((8, 8, 3), 40 * k, np.uint8)).save(tmp_path / "img" / n, format="PNG")
    (tmp_path / "t.csv").write_text("file,label\n lead.png,cat\ntrail.png ,dog\nok.png,dog\n", encoding="utf-8")
    report = check_dataset(tmp_path / "img", labels=tmp_path / "t.csv")
    assert report.problems[:2] == [
        f"missing: 'lead.png' ({tmp_path / 't.csv'}, line 2) not found at {tmp_path / 'img' / 'lead.png'} (there is "
        "' lead.png': a table's names are read without the spaces around them; rename the file, or write the name as "
        "'./ lead.png' to keep its leading space)",
        f"missing: 'trail.png' ({tmp_path / 't.csv'}, line 3) not found at {tmp_path / 'img' / 'trail.png'} (there "
        "is 'trail.png ': a table's names are read without the spaces around them; rename the file)",
    ]
    (tmp_path / "u.csv").write_text("file,label\n./ lead.png,cat\nok.png,dog\n", encoding="utf-8")
    assert check_dataset(tmp_path / "img", labels=tmp_path / "u.csv").problems == []  # (as the fix says)
    # in a folder, the fix keeps the folder (the review round's: './ lead.png' there named another file)
    (tmp_path / "img" / "sub").mkdir()
    (tmp_path / "img" / " lead.png").rename(tmp_path / "img" / "sub" / " lead.png")
    (tmp_path / "v.csv").write_text("file,label\nsub/lead.png,cat\nok.png,dog\n", encoding="utf-8")
    assert check_dataset(tmp_path / "img", labels=tmp_path / "v.csv").problems[0] == (
        f"missing: 'sub/lead.png' ({tmp_path / 'v.csv'}, line 2) not found at {tmp_path / 'img' / 'sub' / 'lead.png'} "
        "(there is ' lead.png': a table's names are read without the spaces around them; rename the file, or write the "
        "name as 'sub/ lead.png' to keep its leading space)"
    )


def test_a_missing_file_that_differs_only_in_case_is_said(tmp_path: Path):
    # the attack: the table said C3.PNG, the disk held c3.png: check printed "missing" and "not in the table" as
    # two unrelated lines, never that the names differ only in letter case
    (tmp_path / "img").mkdir()
    for n in ("a1.png", "c3.png"):
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "img" / n)
    (tmp_path / "t.csv").write_text("file,label\na1.png,cat\nC3.PNG,dog\n", encoding="utf-8")
    report = check_dataset(tmp_path / "img", labels=tmp_path / "t.csv")
    assert report.problems == [
        f"missing: 'C3.PNG' ({tmp_path / 't.csv'}, line 3) not found at {tmp_path / 'img' / 'C3.PNG'} (there is "
        "'c3.png': the names differ in letter case, which this file system keeps apart)",
        f"not in the table: {tmp_path / 'img' / 'c3.png'}",
    ]
    # a folder above it spelled in another case (SUB/A.PNG for sub/a.png) too, with the whole path; two candidates
    # (Sub/ and sub/ both there) or none give no hint
    (tmp_path / "img" / "sub").mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "img" / "sub" / "a.png")
    (tmp_path / "u.csv").write_text("file,label\nSUB/A.PNG,cat\nsub/a.png,dog\nNOPE/a.png,dog\n", encoding="utf-8")
    report = check_dataset(tmp_path / "img", labels=tmp_path / "u.csv")
    assert report.problems[:2] == [
        f"missing: 'SUB/A.PNG' ({tmp_path / 'u.csv'}, line 2) not found at {tmp_path / 'img' / 'SUB' / 'A.PNG'} "
        f"(there is {str(tmp_path / 'img' / 'sub' / 'a.png')!r}: the names differ in letter case, which this file "
        "system keeps apart)",
        f"missing: 'NOPE/a.png' ({tmp_path / 'u.csv'}, line 4) not found at {tmp_path / 'img' / 'NOPE' / 'a.png'}",
    ]
    (tmp_path / "img" / "Sub").mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "img" / "Sub" / "a.png")
    report = check_dataset(tmp_path / "img", labels=tmp_path / "u.csv")
    assert report.problems[0] == (f"missing: 'SUB/A.PNG' ({tmp_path / 'u.csv'}, line 2) not found at "
                                  f"{tmp_path / 'img' / 'SUB' / 'A.PNG'}")  # fmt: skip


def test_check_a_split_in_a_file_of_its_own_with_the_training_classes(tmp_path: Path, capsys, caplog):
    # before: check had no --classes, so a val list of classes 4..11 was "not 0..7" (exit 1) whatever was right
    from datakit.io import imwrite
    from datakit.testing import synthetic_image

    img = tmp_path / "img"
    img.mkdir()
    for i in range(12):
        imwrite(img / f"{i}.png", synthetic_image(8, 8, seed=i), mode="rgb")
    (tmp_path / "train.txt").write_text("".join(f"{i}.png {i}\n" for i in range(8)), encoding="utf-8")
    (tmp_path / "val.txt").write_text("".join(f"{i}.png {i - 4}\n" for i in range(8, 12)), encoding="utf-8")
    (tmp_path / "classes.txt").write_text("".join(f"{i}\n" for i in range(8)), encoding="utf-8")
    val = ["check", str(img), "--labels", str(tmp_path / "val.txt"), "--workers", "0", "-q"]
    assert main(val) == 1  # alone, its labels 4..7 are a gap
    assert "integer labels are 4..7, not 0..3" in capsys.readouterr().err
    # train's images share the folder (PaddleClas' layout): with --classes they are the other splits' files, a
    # note (the attack: one "not in the table" problem per training image, so that check could never pass)
    assert main([*val, "--classes", str(tmp_path / "classes.txt"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["classes"] == [str(i) for i in range(8)]
    assert out["class_counts"] == {"all": {"4": 1, "5": 1, "6": 1, "7": 1}}
    assert out["problems"] == []
    note = f"8 images under {img} are not in {tmp_path / 'val.txt'} (the other splits' files, with --classes?); not checked"
    assert note in out["notes"]
    # the training classes it lacks: no problem (a val list often lacks some), but said (before: not a word)
    lacks = f"{tmp_path / 'val.txt'} has no samples of classes '0', '1', '2', '3' (of the 8 classes given: classes=, --classes)"
    assert lacks in out["notes"]
    with caplog.at_level("WARNING", logger="datakit"):
        assert main([*val[:-1], "--classes", str(tmp_path / "classes.txt")]) == 0  # said on the screen too
    assert f"note: {note}" in caplog.messages
    capsys.readouterr()
    # a table with a split column names every split's files: an image it does not name stays a problem
    (tmp_path / "all.csv").write_text("file,label,split\n" + "".join(f"{i}.png,{i},{'train' if i < 8 else 'val'}\n"
                                                                     for i in range(11)), encoding="utf-8")  # fmt: skip
    whole = ["check", str(img), "--labels", str(tmp_path / "all.csv"), "--split", "val", "--workers", "0", "--json"]
    assert main([*whole, "--classes", str(tmp_path / "classes.txt")]) == 1
    assert f"not in the table: {img / '11.png'}" in json.loads(capsys.readouterr().out)["problems"]
    (tmp_path / "classes.txt").write_text("0\n1\n2\n3\n4\n5\n", encoding="utf-8")
    assert main([*val, "--classes", str(tmp_path / "classes.txt")]) == 1
    assert capsys.readouterr().err.splitlines()[0] == (
        f"{tmp_path / 'val.txt'}, line 3: classes '6', '7' not among the 6 classes given (classes=, --classes)"
    )
    # the attack: one label outside them made the class map the list's own ('6' as class 2), the classes given gone
    assert main([*val, "--classes", str(tmp_path / "classes.txt"), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["classes"] == ["0", "1", "2", "3", "4", "5"]
    assert out["class_counts"] == {"all": {"4": 1, "5": 1}}  # the labels outside are the problem's, not classes
    lacks = f"{tmp_path / 'val.txt'} has no samples of classes '0', '1', '2', '3' (of the 6 classes given: classes=, --classes)"
    assert lacks in out["notes"]
    assert main([*val, "--classes", str(tmp_path / "classes.txt"), "--remap-labels"]) == 2
    assert capsys.readouterr().err == (
        "datakit check: error: classes= and remap_labels= both number the classes; give one of them\n"
    )
    # pack-lmdb refuses the pair as check does (it packed, taking --classes alone), before anything is written
    pack = ["pack-lmdb", str(img), str(tmp_path / "v.lmdb"), "--labels", str(tmp_path / "val.txt")]
    assert main([*pack, "--classes", str(tmp_path / "classes.txt"), "--remap-labels"]) == 2
    assert capsys.readouterr().err == (
        "datakit pack-lmdb: error: classes= and remap_labels= both number the classes; give one of them\n"
    )
    assert not (tmp_path / "v.lmdb").exists()


def test_a_pack_is_checked_by_split_as_its_source_is(tmp_path: Path, capsys):
    # the attack: an .xlsx with train (cat, dog) and val (dog, dog) sheets: `check img --labels l.xlsx --split val`
    # said "split 'val' has no samples of class 'cat'" (exit 1); the pack of it passed, counted as one column "all"
    img = tmp_path / "img"
    img.mkdir()
    for k, name in enumerate(["a.jpg", "b.jpg", "c.jpg", "d.jpg"]):
        Image.fromarray(np.full((8, 8, 3), 40 * k, np.uint8)).save(img / name)
    wb = Workbook()
    wb.active.title = "train"
    for row in [("file", "label"), ("a.jpg", "cat"), ("b.jpg", "dog")]:
        wb.active.append(row)
    val = wb.create_sheet("val")
    for row in [("file", "label"), ("c.jpg", "dog"), ("d.jpg", "dog")]:
        val.append(row)
    wb.save(tmp_path / "l.xlsx")
    assert main(["pack-lmdb", str(img), str(tmp_path / "p.lmdb"), "--labels", str(tmp_path / "l.xlsx"), "-q"]) == 0
    capsys.readouterr()
    for split in (None, "val"):
        source = check_dataset(img, labels=tmp_path / "l.xlsx", split=split)
        pack = check_dataset(tmp_path / "p.lmdb", split=split)
        assert pack.problems == source.problems == ["split 'val' has no samples of class 'cat'"]
        assert pack.class_counts == source.class_counts
    assert pack.class_counts == {"val": {"dog": 2}}
    assert check_dataset(tmp_path / "p.lmdb").class_counts == {"train": {"cat": 1, "dog": 1}, "val": {"dog": 2}}
    assert main(["check", str(tmp_path / "p.lmdb"), "--split", "val", "-q"]) == 1
    assert capsys.readouterr().err == "split 'val' has no samples of class 'cat'\n"


def test_a_pack_of_one_split_is_checked_as_that_split_of_its_source(tmp_path: Path, capsys):
    # the attack: `check img --labels l.csv --split val` said "split 'val' has no samples of class 'dog'" (exit 1);
    # the pack made with --split val passed (0 problems), its table of counts leaving dog out; and a val pack made
    # with --classes (another split's classes) said nothing of the classes it lacks, which its source notes
    img = tmp_path / "img"
    img.mkdir()
    rows = ["file,label,split"]
    for i in range(6):
        Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)).save(img / f"{i}.png")
        rows.append(f"{i}.png,{['cat', 'dog', 'bird'][i % 3]},{'val' if i in (0, 2) else 'train'}")
    (tmp_path / "l.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    val = tmp_path / "val.lmdb"
    assert main(["pack-lmdb", str(img), str(val), "--labels", str(tmp_path / "l.csv"), "--split", "val", "-q"]) == 0
    source = check_dataset(img, labels=tmp_path / "l.csv", split="val")
    pack = check_dataset(val)
    assert pack.problems == source.problems == ["split 'val' has no samples of class 'dog'"]
    assert pack.class_counts == source.class_counts == {"val": {"bird": 1, "cat": 1}}
    assert main(["check", str(val), "-q"]) == 1
    assert capsys.readouterr().err == "split 'val' has no samples of class 'dog'\n"
    # a split in a file of its own, packed with the training pack's classes: a note, as its source's check gives
    (tmp_path / "val.txt").write_text("0.png cat\n2.png bird\n", encoding="utf-8")
    (tmp_path / "train.txt").write_text("".join(r.replace(",", " ")[:-6] + "\n" for r in rows[1:] if "train" in r))
    train, given = tmp_path / "train.lmdb", tmp_path / "given.lmdb"
    assert main(["pack-lmdb", str(img), str(train), "--labels", str(tmp_path / "train.txt"), "-q"]) == 0
    assert check_dataset(train).problems == []
    va = ["--labels", str(tmp_path / "val.txt"), "--classes", str(train)]
    assert main(["pack-lmdb", str(img), str(given), *va, "-q"]) == 0
    capsys.readouterr()
    assert check_dataset(img, labels=tmp_path / "val.txt", classes=train).notes[-1] == (
        f"{tmp_path / 'val.txt'} has no samples of class 'dog' (of the 3 classes given: classes=, --classes)"
    )
    report = check_dataset(given)
    assert (report.problems, report.notes) == ([], [f"{given} has no samples of class 'dog' (of the 3 classes it was "
                                                    "packed with)"])  # fmt: skip


def test_check_with_given_classes_indexes_integer_labels_as_open_dataset_does(tmp_path: Path, capsys):
    # The attack: an integer val list checked with --classes classes.json holding [0.0, 1.0, 2.0] (json.dump of a
    # float array) or 0/1/background: open_dataset and pack-lmdb read it, check ended in "invalid literal for int()"
    from datakit.datasets import open_dataset
    from datakit.io import imwrite

    for k in range(3):
        imwrite(tmp_path / f"{k}.png", np.full((4, 4, 3), k, np.uint8))
    (tmp_path / "val.txt").write_text("0.png 0\n1.png 1\n2.png 1\n", encoding="utf-8")
    for name, text, classes in (("classes.json", "[0.0, 1.0, 2.0]", ["0.0", "1.0", "2.0"]),
                                ("classes.txt", "0\n1\nbackground\n", ["0", "1", "background"])):  # fmt: skip
        (tmp_path / name).write_text(text, encoding="utf-8")
        ds = open_dataset(tmp_path, labels=tmp_path / "val.txt", classes=tmp_path / name)
        assert (ds.classes, ds.targets.tolist()) == (classes, [0, 1, 1])
        args = ["check", str(tmp_path), "--labels", str(tmp_path / "val.txt"), "--classes", str(tmp_path / name)]
        assert main([*args, "--workers", "1", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert (out["classes"], out["class_counts"], out["problems"]) == (classes, {"all": {classes[0]: 1,
                                                                          classes[1]: 2}}, [])  # fmt: skip
        assert out["notes"][-1] == (f"{tmp_path / 'val.txt'} has no samples of class {classes[2]!r} (of the 3 "
                                    "classes given: classes=, --classes)")  # fmt: skip


def test_check_with_given_classes_reads_a_workbook_of_one_split_as_a_file_of_its_own(tmp_path: Path, capsys):
    # The regression round: a val workbook of one sheet, checked with --classes: its missing training class was a
    # problem (exit 1) and the other splits' images in the folder one problem each, where the same rows in a CSV
    # gave notes
    from openpyxl import Workbook

    for k in range(4):
        Image.fromarray(np.full((4, 4, 3), k, np.uint8)).save(tmp_path / f"{k}.png")
    wb = Workbook()
    ws = wb.active
    ws.title = "val"
    for row in (["file", "label"], ["0.png", "cat"], ["1.png", "dog"]):
        ws.append(row)
    wb.save(tmp_path / "val.xlsx")
    (tmp_path / "c.txt").write_text("bird\ncat\ndog\n", encoding="utf-8")
    args = ["check", str(tmp_path), "--labels", str(tmp_path / "val.xlsx"), "--classes", str(tmp_path / "c.txt")]
    assert main([*args, "--workers", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["problems"], out["class_counts"]) == ([], {"val": {"cat": 1, "dog": 1}})
    assert out["notes"] == [
        f"2 images under {tmp_path} are not in {tmp_path / 'val.xlsx'} (the other splits' files, with --classes?); "
        "not checked",
        f"{tmp_path / 'val.xlsx'} has no samples of class 'bird' (of the 3 classes given: classes=, --classes)",
    ]


def _grey_png(path: Path, level: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (level, level, level)).save(path)


def test_one_image_under_two_names_is_found_by_its_bytes(tmp_path: Path, capsys):
    # the attack: alias.png -> 0.png (a link to a file), 0.png 'dog' in val and alias.png 'cat' in train: check
    # and open_dataset took both; a hard link and a plain copy were two images as well
    import os

    root = tmp_path / "img"
    for i in range(5):
        _grey_png(root / f"{i}.png", 40 * i)
    os.symlink("0.png", root / "alias.png")
    os.link(root / "1.png", root / "hard.png")
    (root / "copy.png").write_bytes((root / "2.png").read_bytes())
    (root / "twin.png").write_bytes((root / "3.png").read_bytes())
    path = tmp_path / "l.csv"
    path.write_text("file,label,split\nalias.png,cat,train\n0.png,dog,val\n1.png,cat,train\nhard.png,cat,val\n"
                    "2.png,dog,train\ncopy.png,dog,train\n3.png,cat,val\ntwin.png,cat,val\n4.png,dog,val\n",
                    encoding="utf-8")  # fmt: skip
    report = check_dataset(root, labels=path, workers=0)
    assert report.problems == [
        f"one image, two labels: {root / 'alias.png'} ({path}, line 2) is 'cat', {root / '0.png'} ({path}, line 3) "
        f"is 'dog' (one file, {root / '0.png'})",
        f"one image in two splits: {root / '1.png'} ({path}, line 4) in 'train', {root / 'hard.png'} ({path}, line "
        "5) in 'val' (one file, a hard link): one split would score images the other trains on",
    ]
    assert report.notes == [
        f"2 images are copies of another under another name, with the same label (the same bytes), such as "
        f"{root / 'copy.png'} ({path}, line 7) of {root / '2.png'} ({path}, line 6)"
    ]
    assert main(["check", str(root), "--labels", str(path), "--workers", "1"]) == 1
    assert "one image, two labels: " in capsys.readouterr().err
    # class folders: one image in two of them
    _grey_png(tmp_path / "f" / "cat" / "a.png", 10)
    _grey_png(tmp_path / "f" / "dog" / "b.png", 10)
    _grey_png(tmp_path / "f" / "dog" / "c.png", 90)
    assert check_dataset(tmp_path / "f", workers=0).problems == [
        f"one image, two labels: {tmp_path / 'f' / 'cat' / 'a.png'} is 'cat', {tmp_path / 'f' / 'dog' / 'b.png'} is "
        "'dog' (the same bytes)"
    ]
    # a class folder linked into another: each image is said to be one file
    os.symlink("cat", tmp_path / "f" / "kitty")
    a = tmp_path / "f" / "cat" / "a.png"
    assert check_dataset(tmp_path / "f", workers=0).problems[-1] == (
        f"one image, two labels: {a} is 'cat', {tmp_path / 'f' / 'kitty' / 'a.png'} is 'kitty' (one file, {a})"
    )


def test_a_file_listed_twice_by_name_is_said_once(tmp_path: Path):
    # the same file under two spellings is the table's own problem ("listed again"): its bytes add no second line
    root = tmp_path / "img"
    for i in range(3):
        _grey_png(root / f"{i}.png", 40 * i)
    path = tmp_path / "l.csv"
    path.write_text("file,label\n0.png,cat\n./0.png,dog\n1.png,dog\n2.png,cat\n", encoding="utf-8")
    problems = check_dataset(root, labels=path, workers=0).problems
    assert len(problems) == 1 and "listed again" in problems[0]


def test_no_class_coverage_note_for_a_table_none_of_whose_rows_was_read(tmp_path: Path, capsys):
    # the attack: Tiny-ImageNet's val_annotations.txt (6 fields a line) checked with --classes: "note: ... has no
    # samples of classes ..." came first, where the table has samples of every class and none of its lines was read
    from datakit.io import imwrite
    from datakit.testing import synthetic_image

    img = tmp_path / "img"
    img.mkdir()
    for i in range(3):
        imwrite(img / f"{i}.png", synthetic_image(8, 8, seed=i), mode="rgb")
    (tmp_path / "val.txt").write_text("".join(f"{i}.png\tc{i}\t0\t2\t30\t40\n" for i in range(3)), encoding="utf-8")
    (tmp_path / "classes.txt").write_text("c0\nc1\nc2\n", encoding="utf-8")
    args = ["check", str(img), "--labels", str(tmp_path / "val.txt"), "--classes", str(tmp_path / "classes.txt")]
    assert main([*args, "--json", "--workers", "0"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["problems"][0].startswith(f"{tmp_path / 'val.txt'}, line 1: expected 'path<TAB>label', got 6 fields")
    assert not [n for n in out["notes"] if "has no samples of class" in n]
