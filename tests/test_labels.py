from __future__ import annotations

import codecs
import re
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
from openpyxl import Workbook
from test_labels_parse import encodable

from datakit.datasets import TableDataset, open_dataset
from datakit.errors import UsageError
from datakit.io import imwrite
from datakit.labels import (
    ClassMap,
    CodedColumn,
    ColumnNotFound,
    LabelError,
    StringArray,
    detect_text_encoding,
    read_labels,
    resolve_path,
)
from datakit.testing import synthetic_image

# ---------------------------------------------------------------------------------------------
# writing real tables in every format

FORMATS = ["xlsx", "csv", "tsv", "list", "list-tab", "utf16-txt"]


def write_table(tmp_path: Path, fmt: str, rows: list[tuple[str, object]], name: str = "labels") -> Path:
    """``rows`` of (file, label) as a user's tool would write them in ``fmt``."""
    if fmt == "xlsx":
        path = tmp_path / f"{name}.xlsx"
        wb = Workbook()
        ws = wb.active
        ws.title = "train"
        ws.append(["文件名", "标签"])
        for f, lab in rows:
            ws.append([f, lab])
        wb.save(path)
        return path
    text = lambda v: v if isinstance(v, str) else repr(v)  # noqa: E731  (1.0 stays "1.0", as pandas writes it)
    if fmt == "csv":
        path = tmp_path / f"{name}.csv"
        path.write_text("file,label\n" + "".join(f"{f},{text(lab)}\n" for f, lab in rows), encoding="utf-8")
    elif fmt == "tsv":
        path = tmp_path / f"{name}.tsv"
        path.write_text("file\tlabel\n" + "".join(f"{f}\t{text(lab)}\n" for f, lab in rows), encoding="utf-8")
    elif fmt == "list":
        path = tmp_path / f"{name}.txt"
        path.write_text("".join(f"{f} {text(lab)}\n" for f, lab in rows), encoding="utf-8")
    elif fmt == "list-tab":
        path = tmp_path / f"{name}.txt"
        path.write_text("".join(f"{f}\t{text(lab)}\n" for f, lab in rows), encoding="utf-8")
    else:  # Excel's "Unicode text": UTF-16 with a BOM, tab-separated, CRLF
        path = tmp_path / f"{name}.txt"
        body = "file\tlabel\r\n" + "".join(f"{f}\t{text(lab)}\r\n" for f, lab in rows)
        path.write_bytes(body.encode("utf-16"))
    return path


def where(path: Path, fmt: str, row: int) -> str:
    """How a problem names data row ``row`` (0-based) of a table written by :func:`write_table`."""
    if fmt == "xlsx":
        return f"{path}, sheet 'train', row {row + 2}"
    return f"{path}, line {row + (1 if fmt.startswith('list') else 2)}"


def targets(path: Path, remap: bool = False) -> tuple[list[int], tuple[str, ...]]:
    t = read_labels(path, remap_labels=remap)
    cm = t.class_map(remap=remap)
    return t.targets(cm).tolist(), cm.classes


# ---------------------------------------------------------------------------------------------
# 1. one typing rule for every format


@pytest.mark.parametrize("fmt", FORMATS)
def test_integer_labels_numeric_order(tmp_path: Path, fmt: str):
    """0..11: the image labelled 2 is class 2 in every format (not class 4, as text sorting gives)."""
    labels = [2, 10, 0, 11, 1, 3, 4, 5, 6, 7, 8, 9]
    path = write_table(tmp_path, fmt, [(f"img_{i}.jpg", v) for i, v in enumerate(labels)])
    got, classes = targets(path)
    assert got == labels
    assert classes == tuple(str(i) for i in range(12))


@pytest.mark.parametrize("fmt", FORMATS)
def test_integer_labels_as_text_and_float(tmp_path: Path, fmt: str):
    """1, "1" and 1.0 are the same integer label, whatever the format."""
    path = write_table(tmp_path, fmt, [("a.jpg", 0), ("b.jpg", "1"), ("c.jpg", 2.0), ("d.jpg", "1")])
    got, classes = targets(path)
    assert got == [0, 1, 2, 1] and classes == ("0", "1", "2")
    assert read_labels(path).kind == "int"


@pytest.mark.parametrize("fmt", FORMATS)
def test_one_based_labels_refused_then_remapped(tmp_path: Path, fmt: str):
    path = write_table(tmp_path, fmt, [("a.jpg", 1), ("b.jpg", 3), ("c.jpg", 2)])
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == (
        f"{path}: integer labels are 1..3, not 0..2; passed on as they are they would index past the 3 outputs of a "
        "classifier (CUDA: 'device-side assert triggered'). Use remap_labels=True (--remap-labels) to map 1..3 to "
        "0..2 in order, or fix the table; a split kept in a file of its own (a val list without some class) takes the "
        "training split's classes instead: classes=train.classes (pack-lmdb --classes train.lmdb), since remapping it "
        f"alone would shift its indices (first outside: 3 at {where(path, fmt, 1).split(', ', 1)[1]})"
    )
    assert targets(path, remap=True) == ([0, 2, 1], ("1", "2", "3"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_gaps_refused_then_remapped(tmp_path: Path, fmt: str):
    path = write_table(tmp_path, fmt, [("a.jpg", 0), ("b.jpg", 5), ("c.jpg", 2)])
    with pytest.raises(LabelError, match=r"integer labels are \{0, 2, 5\}, not 0\.\.2"):
        read_labels(path)
    assert targets(path, remap=True) == ([0, 2, 1], ("0", "2", "5"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_class_names_code_point_order(tmp_path: Path, fmt: str):
    path = write_table(tmp_path, fmt, [("a.jpg", "猫"), ("b.jpg", "dog"), ("c.jpg", "狗"), ("d.jpg", "Cat")])
    assert targets(path) == ([3, 1, 2, 0], ("Cat", "dog", "狗", "猫"))  # 狗 U+72D7 < 猫 U+732B


@pytest.mark.parametrize("fmt", FORMATS)
def test_mixed_integers_and_names_refused(tmp_path: Path, fmt: str):
    path = write_table(tmp_path, fmt, [("a.jpg", "cat"), ("b.jpg", 1), ("c.jpg", "dog")])
    with pytest.raises(LabelError) as e:
        read_labels(path)
    short = lambda r: where(path, fmt, r).split(", ", 1)[1]  # noqa: E731
    assert str(e.value) == (
        f"{path}: labels mix integers and class names: 1 rows hold integers (first '1' at {short(1)}) and 2 hold "
        f"names (first 'cat' at {short(0)}); make every label a class name, or every label an integer (or, where "
        "both are class names, as an OCR set's 0-9 and A-Z, give the classes with classes=, --classes)"
    )


# Boolean cells: Excel shows a boolean cell as TRUE/FALSE and writes it so to CSV, TSV and its "Unicode text";
# openpyxl and calamine read it as Python's True/False.


def excel_exports(tmp_path: Path, rows: list[tuple[str, bool]]) -> dict[str, Path]:
    """``rows`` of (file, boolean label) as an .xlsx of boolean cells and as Excel exports that sheet: "CSV UTF-8"
    (a BOM, CRLF), "Unicode text" (UTF-16, tab-separated, as .txt) and a ``path label`` list."""
    xlsx = write_table(tmp_path, "xlsx", rows)
    with zipfile.ZipFile(xlsx) as z:  # really boolean cells, not text
        assert z.read("xl/worksheets/sheet1.xml").count(b't="b"') == len(rows)
    shown = [(f, "TRUE" if lab else "FALSE") for f, lab in rows]
    csv = tmp_path / "labels.csv"
    csv.write_bytes(("文件名,标签\r\n" + "".join(f"{f},{lab}\r\n" for f, lab in shown)).encode("utf-8-sig"))
    txt = tmp_path / "unicode.txt"
    txt.write_bytes(("文件名\t标签\r\n" + "".join(f"{f}\t{lab}\r\n" for f, lab in shown)).encode("utf-16"))
    lst = tmp_path / "list.txt"
    lst.write_text("".join(f"{f} {lab}\n" for f, lab in shown), encoding="utf-8")
    return {"xlsx": xlsx, "csv": csv, "unicode-txt": txt, "list": lst}


@pytest.mark.parametrize("engine", ["calamine", "openpyxl"])
def test_boolean_cells_are_the_classes_excel_writes_to_csv(tmp_path: Path, engine: str):
    # The attack: a workbook's boolean cells became classes 'True'/'False', the CSV Excel exports from it holds
    # TRUE/FALSE: the same labels, other class names, depending on the format.
    rows = [("猫/0.jpg", True), ("猫/1.jpg", False), ("猫/2.jpg", True), ("猫/3.jpg", False), ("猫/4.jpg", False)]
    paths = excel_exports(tmp_path, rows)
    for fmt, path in paths.items():
        t = read_labels(path, engine=engine) if fmt == "xlsx" else read_labels(path)
        cm = t.class_map()
        assert (fmt, t.labels.tolist()) == (fmt, ["TRUE", "FALSE", "TRUE", "FALSE", "FALSE"])
        assert (fmt, t.kind, cm.classes, cm.class_to_idx) == (fmt, "name", ("FALSE", "TRUE"), {"FALSE": 0, "TRUE": 1})
        assert (fmt, t.targets(cm).tolist()) == (fmt, [1, 0, 1, 0, 0])
        assert (fmt, t.problems(), t.notes) == (fmt, [], [])


def test_a_workbook_train_split_and_a_csv_val_split_share_boolean_classes(tmp_path: Path):
    # The attack: train kept in a workbook (boolean cells), val in the CSV Excel exported: train's classes were
    # ['False', 'True'], val's ['FALSE', 'TRUE'], and val with classes=train.classes was refused.
    root = tmp_path / "图片"
    make_images(root, ["t0.png", "t1.png", "t2.png", "v0.png", "v1.png"])
    train_xlsx = write_table(root, "xlsx", [("t0.png", False), ("t1.png", True), ("t2.png", True)], name="train")
    val_csv = root / "val.csv"
    val_csv.write_bytes(b"file,label\r\nv0.png,TRUE\r\nv1.png,FALSE\r\n")  # as Excel's "CSV (Comma delimited)"
    train = open_dataset(root, labels=train_xlsx)
    val = open_dataset(root, labels=val_csv)
    assert train.classes == val.classes == ["FALSE", "TRUE"]
    assert train.class_to_idx == val.class_to_idx == {"FALSE": 0, "TRUE": 1}
    assert [train[i][1] for i in range(3)] == [0, 1, 1] and [val[i][1] for i in range(2)] == [1, 0]
    given = open_dataset(root, labels=val_csv, classes=train.classes)
    assert given.classes == ["FALSE", "TRUE"] and [given[i][1] for i in range(2)] == [1, 0]


def test_boolean_and_text_true_in_one_column_are_what_the_csv_gives(tmp_path: Path, caplog):
    # The attack: a boolean TRUE cell and a text cell 'True' in one sheet were one class 'True' (both read as
    # 'True'), silently; the CSV of that sheet holds TRUE and True: two classes apart in letter case, with a note.
    # Now the workbook gives what its CSV gives; a text cell 'TRUE' is the boolean's class, as in the CSV.
    rows = [("0.jpg", True), ("1.jpg", "True"), ("2.jpg", "TRUE"), ("3.jpg", False)]
    xlsx = write_table(tmp_path, "xlsx", rows)
    csv = tmp_path / "labels.csv"
    csv.write_text("文件名,标签\n0.jpg,TRUE\n1.jpg,True\n2.jpg,TRUE\n3.jpg,FALSE\n", encoding="utf-8")
    for path, first, second in ((xlsx, "sheet 'train', row 2", "sheet 'train', row 3"), (csv, "line 2", "line 3")):
        note = (f"{path}: labels 'TRUE' (first at {first}) and 'True' (first at {second}) differ only in letter "
                "case: they are 2 classes")  # fmt: skip
        caplog.clear()
        with caplog.at_level("WARNING", logger="datakit"):
            t = read_labels(path)
        assert t.labels.tolist() == ["TRUE", "True", "TRUE", "FALSE"]
        assert t.class_map().classes == ("FALSE", "TRUE", "True") and t.targets(t.class_map()).tolist() == [1, 2, 1, 0]
        assert t.notes == [note] and caplog.messages == [note] and t.problems() == []


def test_booleans_beside_integers_are_names_in_every_format(tmp_path: Path):
    rows = [("a.jpg", 1), ("b.jpg", True), ("c.jpg", 0)]
    xlsx = write_table(tmp_path, "xlsx", rows)
    csv = tmp_path / "labels.csv"
    csv.write_text("file,label\na.jpg,1\nb.jpg,TRUE\nc.jpg,0\n", encoding="utf-8")
    for path, at in ((xlsx, "sheet 'train', row"), (csv, "line")):
        with pytest.raises(LabelError) as e:
            read_labels(path)
        assert str(e.value) == (
            f"{path}: labels mix integers and class names: 2 rows hold integers (first '1' at {at} 2) and 1 hold "
            f"names (first 'TRUE' at {at} 3); make every label a class name, or every label an integer (or, where "
            "both are class names, as an OCR set's 0-9 and A-Z, give the classes with classes=, --classes)"
        )


def test_boolean_split_cells_are_the_splits_the_csv_gives(tmp_path: Path):
    rows = [["file", "label", "split"], ["a.jpg", "cat", True], ["b.jpg", "dog", False], ["c.jpg", "dog", True]]
    xlsx = book(tmp_path / "l.xlsx", {"Sheet": rows})
    csv = tmp_path / "l.csv"
    csv.write_text("file,label,split\na.jpg,cat,TRUE\nb.jpg,dog,FALSE\nc.jpg,dog,TRUE\n", encoding="utf-8")
    for path in (xlsx, csv):
        assert read_labels(path).split_names == ["TRUE", "FALSE"]
        assert read_labels(path, split="TRUE").files.tolist() == ["a.jpg", "c.jpg"]


def test_class_map_from_python_and_numpy_booleans():
    cm = ClassMap.from_labels([True, False, np.True_, "TRUE"])
    assert cm.classes == ("FALSE", "TRUE")
    assert cm.encode([False, True, "TRUE", np.False_, "FALSE"]).tolist() == [0, 1, 1, 0, 0]


def test_class_map_from_tensors_arrays_and_series_reads_their_values():
    # The attack: ClassMap.from_labels(torch.arange(12)) made the classes 'tensor(0)', 'tensor(1)', 'tensor(10)'...
    # in text order (label 10 became class 2), and a tensor of 1..C was not refused; a Series' None failed in
    # encode with a bare KeyError: 'nan', and pd.NA became a class '<NA>'.
    import pandas as pd
    import torch

    t = torch.arange(12)
    cm = ClassMap.from_labels(t)
    assert cm.classes == tuple(str(i) for i in range(12))
    assert cm.encode(t).tolist() == list(range(12))
    assert ClassMap.from_labels(np.arange(3, dtype=np.float32)).classes == ("0", "1", "2")
    # floats narrower than 64 bits read as they print (not 0.100000001490116), NaN as missing, bfloat16 too
    assert ClassMap.from_labels(np.array([0.1, 0.2], np.float32)).classes == ("0.1", "0.2")
    assert ClassMap.from_labels(np.array([0, 1, np.nan], np.float16)).classes == ("0", "1")
    assert ClassMap.from_labels(torch.tensor([0.0, 1.0, float("nan")], dtype=torch.bfloat16)).classes == ("0", "1")
    with pytest.raises(LabelError) as e:
        ClassMap.from_labels(["0", "1", "2"]).encode(np.array([0, 1, np.nan], np.float32))
    assert str(e.value) == "label at index 2: missing (classes '0', '1', '2')"
    assert ClassMap.from_labels([0, 1, 2]).encode(["2.0", "+1", np.float32(0)]).tolist() == [2, 1, 0]
    with pytest.raises(LabelError):  # '+7' is both '7' and '07' as a number: neither
        ClassMap(("7", "07")).encode(["7", "+7"])
    with pytest.raises(LabelError, match=r"^labels: integer labels are 1..3, not 0..2"):
        ClassMap.from_labels(torch.tensor([1, 2, 3]))
    remapped = ClassMap.from_labels(torch.tensor([1, 2, 3]), remap=True)
    assert remapped.encode(torch.tensor([3, 1])).tolist() == [2, 0]
    with pytest.raises(LabelError) as e:
        remapped.encode([4])
    assert str(e.value) == "label at index 0: '4', not one of the 3 classes (classes '1', '2', '3')"
    s = pd.Series(["cat", "dog", None, pd.NA])
    cm = ClassMap.from_labels(s)
    assert cm.classes == ("cat", "dog")
    with pytest.raises(LabelError) as e:
        cm.encode(s)
    assert str(e.value) == "label at index 2: missing (classes 'cat', 'dog')"


@pytest.mark.parametrize("fmt", [f for f in FORMATS if not f.startswith("list")])  # lists: test_list_problems
def test_every_problem_at_once(tmp_path: Path, fmt: str):
    rows = [("a.jpg", "cat"), ("b.jpg", ""), ("c.jpg", "dog"), ("a.jpg", "cat"), ("d.jpg", ""), ("", "dog")]
    path = write_table(tmp_path, fmt, rows)
    with pytest.raises(LabelError) as e:
        read_labels(path)
    w = lambda r: where(path, fmt, r)  # noqa: E731
    first = w(0).split(", ", 1)[1]
    assert str(e.value) == "\n".join(
        [
            f"{path}: 4 problems:",
            f"  {w(1)}: file 'b.jpg' has no label",
            f"  {w(3)}: file 'a.jpg' is listed again (first at {first})",
            f"  {w(4)}: file 'd.jpg' has no label",
            f"  {w(5)}: label 'dog' has no file name",
        ]
    )
    t = read_labels(path, validate=False)
    assert len(t.problems()) == 4 and t.files.tolist() == ["a.jpg", "c.jpg", "a.jpg"]


def test_many_problems_listed_first_twenty(tmp_path: Path):
    path = tmp_path / "l.csv"
    path.write_text("file,label\n" + "".join(f"{i}.jpg,\n" for i in range(25)) + "x.jpg,cat\n", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        read_labels(path)
    lines = str(e.value).split("\n")
    assert lines[0] == f"{path}: 25 problems:"
    assert lines[1] == f"  {path}, line 2: file '0.jpg' has no label"
    assert lines[20] == f"  {path}, line 21: file '19.jpg' has no label"
    assert lines[21] == f"  ... and 5 more (datakit check FOLDER --labels {path} lists them all)"
    assert len(lines) == 22


# ---------------------------------------------------------------------------------------------
# 2. encodings

TRADITIONAL = ["貓", "狗", "鳥類", "飛機", "汽車", "青蛙", "卡車", "馬"]
SIMPLIFIED = ["猫", "狗", "鸟类", "飞机", "汽车", "青蛙", "卡车", "马"]


def class_table(classes: list[str], header: str = "file,label") -> str:
    return header + "\n" + "".join(f"{c}/{c}_{i:03d}.jpg,{c}\n" for i, c in enumerate(classes * 2))


@pytest.mark.parametrize(
    ("encoding", "classes", "detected"),
    [
        ("utf-8", SIMPLIFIED, "utf-8"),
        ("utf-8-sig", TRADITIONAL, "utf-8-sig"),
        ("gbk", SIMPLIFIED, "gbk"),
        ("big5", TRADITIONAL, "big5"),
        ("gb18030", SIMPLIFIED + ["𠀀"], "gb18030"),
    ],
)
def test_text_encodings_detected(tmp_path: Path, encoding: str, classes: list[str], detected: str):
    path = tmp_path / "标签.csv"
    path.write_bytes(class_table(classes).encode(encoding))
    t = read_labels(path)
    assert t.encoding == detected
    assert t.labels.tolist() == classes * 2
    assert t.files[0] == f"{classes[0]}/{classes[0]}_000.jpg"
    assert t.class_map().classes == tuple(sorted(classes))


def test_excel_unicode_text(tmp_path: Path):
    """Excel's "Unicode text": UTF-16 LE with a BOM, tab-separated, CRLF, a header."""
    path = tmp_path / "标签.txt"
    path.write_bytes("文件名\t類別\r\n貓/1.jpg\t貓\r\n狗/2.jpg\t狗\r\n".encode("utf-16"))
    t = read_labels(path)
    assert t.encoding == "utf-16"
    assert (t.files.tolist(), t.labels.tolist(), t.rows.tolist()) == (["貓/1.jpg", "狗/2.jpg"], ["貓", "狗"], [2, 3])
    assert (t.file_column, t.label_column) == ("文件名", "類別")


def test_utf16_without_bom(tmp_path: Path):
    path = tmp_path / "l.tsv"
    path.write_bytes("file\tlabel\n猫.jpg\t猫\n".encode("utf-16-le"))
    assert read_labels(path).labels.tolist() == ["猫"]


def test_undecided_encoding_names_the_candidates(tmp_path: Path):
    """Three GBK characters that are also three valid, as plausible Big5 characters: refuse rather than guess."""
    path = tmp_path / "l.csv"
    path.write_bytes("file,label\na.jpg,棒\nb.jpg,列\nc.jpg,秽\n".encode("gbk"))
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == (
        f"{path}: cannot tell the encoding apart: as GBK it reads '棒, 列, 秽'; as Big5 it reads '堵, 蹈, 韶'; "
        "pass encoding='gbk' or encoding='big5' (--encoding) to say which"
    )
    assert read_labels(path, encoding="gbk").labels.tolist() == ["棒", "列", "秽"]
    assert read_labels(path, encoding="big5").labels.tolist() == ["堵", "蹈", "韶"]  # forced means forced


def test_one_or_two_characters_are_too_little_to_tell_big5_from_gbk(tmp_path: Path):
    """The attack: Big5 豬 and 鼠 (a Traditional-Chinese Excel's CSV) read as GBK 睫 and 公, the commonest
    character scoring 0.15 above them: the classes renamed and swapped, no word said. With one or two
    characters in all, a wider margin is asked; GBK's 猫/狗 and Big5's 貓/狗 still read."""
    path = tmp_path / "big5.csv"
    path.write_bytes("file,label\r\n1.jpg,豬\r\n2.jpg,鼠\r\n3.jpg,豬\r\n".encode("big5"))
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == (f"{path}: cannot tell the encoding apart: as Big5 it reads '豬, 鼠'; as GBK it reads "
                            "'睫, 公'; as CP949 (Korean) it reads '쌨, 무'; pass encoding='big5' or encoding='gbk' or "
                            "encoding='cp949' (--encoding) to say which")  # fmt: skip
    assert read_labels(path, encoding="big5").labels.tolist() == ["豬", "鼠", "豬"]
    for a, b in (("豬_1", "鼠_2"), ("1豬", "2鼠")):  # ASCII beside them is no evidence of either
        path.write_bytes(f"file,label\n1.jpg,{a}\n2.jpg,{b}\n".encode("big5"))
        with pytest.raises(LabelError, match=r"cannot tell the encoding apart: as Big5 it reads"):
            read_labels(path)
    for enc, a, b in (("gbk", "猫", "狗"), ("big5", "貓", "狗"), ("gbk", "正常", "异常")):
        path.write_bytes(f"file,label\n1.jpg,{a}\n2.jpg,{b}\n".encode(enc))
        t = read_labels(path)
        assert (t.encoding, t.labels.tolist()) == (enc, [a, b])


def test_gbk_table_that_is_valid_utf8_is_not_read_as_utf8(tmp_path: Path):
    """The attack: 猫 and 牛 in GBK (C3 A8, C5 A3) are valid UTF-8 ('è', 'ţ'). Read as UTF-8, the classes
    came out ['è', 'ţ'], in the other order than the same table's in .xlsx: every cat trained as a cow."""
    rows = [["file", "label"], ["1.jpg", "猫牛"], ["2.jpg", "牛猫"], ["3.jpg", "猫牛"]]
    text = "".join(",".join(r) + "\r\n" for r in rows)
    assert text.encode("gbk").decode("utf-8").splitlines()[1] == "1.jpg,èţ"  # runs of accented letters alone
    (tmp_path / "gbk.csv").write_bytes(text.encode("gbk"))
    book(tmp_path / "t.xlsx", {"Sheet": rows})
    for name in ("gbk.csv", "t.xlsx"):
        t = read_labels(tmp_path / name)
        assert (t.class_map().classes, t.targets(t.class_map()).tolist()) == (("牛猫", "猫牛"), [1, 0, 1]), name
    assert read_labels(tmp_path / "gbk.csv").encoding == "gbk"
    # single letters alone read either way: refused, naming every reading, UTF-8's too
    path = tmp_path / "single.csv"
    path.write_bytes("file,label\n1.jpg,猫\n2.jpg,牛\n".encode("gbk"))
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == (f"{path}: cannot tell the encoding apart: as UTF-8 it reads 'è, ţ'; as GBK it reads "
                            "'猫, 牛'; as Big5 it reads '癡, 籟'; pass encoding='utf-8' or encoding='gbk' or "
                            "encoding='big5' (--encoding) to say which")  # fmt: skip
    assert read_labels(path, encoding="gbk").labels.tolist() == ["猫", "牛"]
    assert read_labels(path, encoding="utf-8").labels.tolist() == ["è", "ţ"]  # forced means forced


@pytest.mark.parametrize(
    "labels",
    [["猫", "牛"], ["кошка", "собака"], ["café", "crème", "forêt"], ["Müller", "Straße"], ["γάτα", "σκύλος"],
     ["ねこ", "いぬ"], ["고양이", "개"], ["niño", "león"], ["貓", "狗"], ["żółw", "kůň"], ["חתול", "כלב"],
     ["قطة", "كلب"], ["🐱", "🐶"], ["Äpfel", "Öl"]],
)  # fmt: skip
def test_utf8_tables_in_every_script_stay_utf8(tmp_path: Path, labels: list[str]):
    path = tmp_path / "l.csv"
    path.write_bytes(("file,label\n" + "".join(f"{i}.jpg,{v}\n" for i, v in enumerate(labels))).encode("utf-8"))
    t = read_labels(path)
    assert (t.encoding, t.labels.tolist()) == ("utf-8", labels)


def test_big5_not_read_as_gbk(tmp_path: Path):
    """The reported defect: a Big5 table from Taiwan Excel came out as GBK mojibake."""
    path = tmp_path / "labels.csv"
    path.write_bytes(class_table(["貓", "狗"], "檔名,類別").encode("big5"))
    t = read_labels(path)
    assert t.encoding == "big5" and t.class_map().classes == ("狗", "貓")
    assert (t.file_column, t.label_column) == ("檔名", "類別")
    guess = detect_text_encoding(path.read_bytes())
    assert guess.name == "big5" and guess.confidence > 0.5


def test_forced_encoding_that_does_not_fit(tmp_path: Path):
    path = tmp_path / "l.csv"
    path.write_bytes(b"file,label\na.jpg,cat\n" + "b.jpg,猫\n".encode())
    with pytest.raises(LabelError) as e:
        read_labels(path, encoding="big5")
    assert str(e.value) == f"{path}, line 3: byte 0xe7 is not valid big5 text"
    for bad in ("klingon", "rot13", "hex"):  # rot13 and hex are codecs, but not of bytes to text
        with pytest.raises(UsageError) as u:
            read_labels(path, encoding=bad)
        assert str(u.value) == f"{path}: unknown encoding {bad!r} (try utf-8, gbk, big5, utf-16)"
    assert read_labels(path, encoding="auto").labels.tolist() == ["cat", "猫"]


def test_not_any_known_encoding(tmp_path: Path):
    path = tmp_path / "l.csv"
    path.write_bytes(b"file,label\na.jpg,caf\xe9,\n")
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == (
        f"{path}: not UTF-8, UTF-16, GBK/GB18030 or Big5 text: as Windows-1252 it reads 'café'; pass "
        "encoding='cp1252' (--encoding) if so"
    )
    assert read_labels(path, encoding="cp1252").labels.tolist() == ["café"]
    path.write_bytes(b"file,label\na.jpg,\x81\xff\x81,\n")  # no reading at all
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == (
        f"{path}: not UTF-8, UTF-16, GBK/GB18030 or Big5 text; pass encoding= (--encoding) to name it"
    )


# ---------------------------------------------------------------------------------------------
# 3. path-label lists


def test_list_file_as_tools_write_it(tmp_path: Path):
    path = tmp_path / "train.txt"
    path.write_text(
        "# PaddleClas list\n"
        "\n"
        "train/n01/a b c.JPEG 3\n"  # spaces in the file name: the label is the last field
        "train/n01/x.JPEG   0\r\n"
        "train/猫/y.jpg\t1\n"
        "  \n"
        "train/n02/z.JPEG 2  \n",
        encoding="utf-8",
    )
    t = read_labels(path)
    assert t.files.tolist() == ["train/n01/a b c.JPEG", "train/n01/x.JPEG", "train/猫/y.jpg", "train/n02/z.JPEG"]
    assert t.labels.tolist() == [3, 0, 1, 2]
    assert t.rows.tolist() == [3, 4, 5, 7]
    assert t.where(2) == f"{path}, line 5"


def test_list_with_tabs_keeps_spaces_in_labels(tmp_path: Path):
    path = tmp_path / "l.txt"
    path.write_text("a b.jpg\tgolden retriever\nc.jpg\tpug\n", encoding="utf-8")
    assert read_labels(path).labels.tolist() == ["golden retriever", "pug"]


def test_list_header_line_skipped(tmp_path: Path):
    path = tmp_path / "l.txt"
    path.write_text("path label\na.jpg 0\nb.jpg 1\n", encoding="utf-8")
    t = read_labels(path)
    assert t.files.tolist() == ["a.jpg", "b.jpg"] and t.rows.tolist() == [2, 3]


def test_list_problems(tmp_path: Path):
    path = tmp_path / "l.txt"
    path.write_text("a.jpg 0\nlonely.jpg\nb.jpg 1\na.jpg 1\n", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == "\n".join(
        [
            f"{path}: 2 problems:",
            f"  {path}, line 2: 'lonely.jpg' has no label (expected 'path label')",
            f"  {path}, line 4: file 'a.jpg' is listed again (first at line 1)",
        ]
    )


def make_images(root: Path, names: list[str]) -> None:
    for k, n in enumerate(names):
        (root / n).parent.mkdir(parents=True, exist_ok=True)
        from datakit.io import imwrite

        imwrite(root / n, synthetic_image(20, 30, seed=k), mode="rgb")


def test_open_dataset_with_a_list(tmp_path: Path):
    root = tmp_path / "数据"
    make_images(root, ["train/猫 咪/1.jpg", "train/狗/2.png", "val/猫 咪/3.jpg"])
    (root / "train.txt").write_text("train/猫 咪/1.jpg 1\ntrain/狗/2.png 0\n", encoding="utf-8")
    ds = open_dataset(root, labels=root / "train.txt")
    assert isinstance(ds, TableDataset) and len(ds) == 2 and ds.classes == ["0", "1"]
    img, target = ds[0]
    assert img.shape == (20, 30, 3) and target == 1
    alone = open_dataset(root / "train.txt")  # names relative to the list's folder
    assert alone[1][1] == 0 and alone.name(1) == str(root / "train/狗/2.png")


# ---------------------------------------------------------------------------------------------
# 4. workbooks as people keep them


def book(path: Path, sheets: dict[str, list[list[object]]], hidden: tuple[str, ...] = ()) -> Path:
    wb = Workbook()
    wb.remove(wb.active)
    for name, rows in sheets.items():
        ws = wb.create_sheet(name)
        for r in rows:
            ws.append(r)
        if name in hidden:
            ws.sheet_state = "hidden"
    wb.save(path)
    return path


SPLITS = {
    "说明": [["本表说明"], ["标签: 0 猫, 1 狗"]],
    "train": [["file", "label"], ["a.jpg", "cat"], ["b.jpg", "dog"], ["c.jpg", "bird"]],
    "val": [["file", "label"], ["d.jpg", "cat"], ["e.jpg", "bird"]],
}


def test_notes_sheet_skipped_with_a_note(tmp_path: Path, caplog):
    path = book(tmp_path / "l.xlsx", SPLITS)
    with caplog.at_level("WARNING", logger="datakit"):
        t = read_labels(path)
    assert t.split_names == ["train", "val"] and len(t) == 5
    note = f"{path}: sheet '说明' skipped (no file and label header: notes, a chart or a pivot table)"
    assert t.notes == [note] and caplog.messages == [note]


def test_a_notes_sheet_with_a_header_and_no_rows_is_skipped_with_a_note(tmp_path: Path, caplog):
    # before: "sheet '说明': an empty split" (exit 1) for a title and the columns explained, nothing under them
    sheets = {"说明": [["本表说明"], ["文件名", "图片的名字"]], "train": SPLITS["train"], "val": [["file", "label"]]}
    path = book(tmp_path / "l.xlsx", sheets)
    with caplog.at_level("WARNING", logger="datakit"):
        t = read_labels(path, validate=False)
    note = (f"{path}: sheet '说明' skipped (a header and no rows under it, on a sheet not named as a split, beside "
            "sheets whose rows name images: notes?)")  # fmt: skip
    assert t.notes == [note] and caplog.messages == [note]
    # a split's sheet with a header alone is still an empty split
    assert t.problems() == [f"{path}, sheet 'val': an empty split (a header at row 1, no rows under it)"]
    assert t.split_names == ["train"]


def test_split_reads_only_its_sheet_with_the_whole_class_map(tmp_path: Path):
    sheets = dict(SPLITS)
    sheets["test"] = [["file", "label"], ["f.jpg", None]]  # broken: must not fail --split val
    path = book(tmp_path / "l.xlsx", sheets)
    val = read_labels(path, split="val")
    assert val.files.tolist() == ["d.jpg", "e.jpg"] and val.split_names == ["val"]
    # classes come from every sheet, so val's indices agree with train's although val has no dog
    assert val.class_map().classes == ("bird", "cat", "dog")
    assert val.targets(val.class_map()).tolist() == [1, 0]
    for name in ("d.jpg", "e.jpg"):
        (tmp_path / name).write_bytes(b"")
    ds = open_dataset(tmp_path, labels=path, split="val")
    assert ds.classes == ["bird", "cat", "dog"] and ds.targets.tolist() == [1, 0]
    with pytest.raises(LabelError, match=r"sheet 'test', row 2: file 'f.jpg' has no label"):
        read_labels(path)


def test_hidden_sheet_left_out_unless_asked(tmp_path: Path):
    sheets = dict(SPLITS)
    sheets["old"] = [["file", "label"], ["z.jpg", "cat"]]
    path = book(tmp_path / "l.xlsx", sheets, hidden=("old",))
    t = read_labels(path)
    assert t.split_names == ["train", "val"]
    assert t.notes[-1] == f"{path}: hidden sheet 'old' not read (include_hidden=True, --include-hidden, reads them)"
    assert read_labels(path, include_hidden=True).split_names == ["train", "val", "old"]
    assert read_labels(path, split="old", include_hidden=True).files.tolist() == ["z.jpg"]


def test_rows_hidden_in_excel_are_asked_about_not_read_silently(tmp_path: Path, capsys):
    # The attack: a workbook saved with a filter on (or rows hidden by hand), the rows out of sight meant as left out:
    # read as samples like the others, without a word (pandas reads them too). Hidden sheets were left out, noted.
    from datakit.cli import main

    wb = Workbook()
    train = wb.active
    train.title = "train"
    train.append(["文件名", "标签"])
    for k in range(6):
        train.append([f"img/{k}.jpg", "猫" if k % 2 else "狗"])
    train.append([None, None])  # a blank row hidden: nothing to ask about
    for r in (3, 6, 8):
        train.row_dimensions[r].hidden = True
    train.auto_filter.ref = "A1:B7"
    val = wb.create_sheet("val")
    val.append(["文件名", "标签"])
    val.append(["img/v0.jpg", "猫"])
    val.append(["img/v1.jpg", "狗"])
    val.row_dimensions[3].hidden = True
    path = tmp_path / "l.xlsx"
    wb.save(path)
    train_rows = (f"{path}, sheet 'train': rows 3 and 6 are hidden in Excel (by a filter, or by hand): samples, or "
                  "rows left out? pass include_hidden=True (--include-hidden) to read them, or delete them from the sheet")  # fmt: skip
    with pytest.raises(LabelError) as e:
        read_labels(path, split="train")
    assert str(e.value) == train_rows
    with pytest.raises(LabelError) as e:
        read_labels(path, split="val")  # a split not asked for keeps its own: only the rows read are asked about
    assert str(e.value) == (f"{path}, sheet 'val': row 3 is hidden in Excel (by a filter, or by hand): samples, or "
                            "rows left out? pass include_hidden=True (--include-hidden) to read it, or delete it from "
                            "the sheet")  # fmt: skip
    assert read_labels(path, split="train", include_hidden=True).files.tolist() == [f"img/{k}.jpg" for k in range(6)]
    assert len(read_labels(path, include_hidden=True)) == 8
    capsys.readouterr()
    assert main(["check", str(tmp_path), "--labels", str(path), "--split", "train", "--workers", "1"]) == 1
    assert train_rows in capsys.readouterr().err.splitlines()
    # a sheet of more than one streamed chunk of XML: a row hidden far down is found
    big = Workbook()
    ws = big.active
    ws.title = "train"
    ws.append(["file", "label"])
    for k in range(40000):
        ws.append([f"a/{k:05d}.jpg", "cat" if k % 2 else "dog"])
    ws.row_dimensions[39001].hidden = True
    big.save(tmp_path / "big.xlsx")
    with zipfile.ZipFile(tmp_path / "big.xlsx") as z:
        assert z.getinfo("xl/worksheets/sheet1.xml").file_size > 2 << 20
    with pytest.raises(LabelError, match=r"sheet 'train': row 39001 is hidden in Excel \(by a filter, or by hand\)"):
        read_labels(tmp_path / "big.xlsx")
    assert len(read_labels(tmp_path / "big.xlsx", include_hidden=True)) == 40000


@pytest.mark.parametrize("unseen", ["\u200b", " \ufeff ", "\u2060", "\u3164", "\u2800", "\u200d\u200e"])
def test_a_label_of_invisible_characters_alone_has_no_label_in_every_format(tmp_path: Path, unseen: str):
    # the attack: a label cell holding a zero-width space alone (pasted from a web page), empty to the eye in Excel:
    # read as a class of its own, "\u200b", shifting the classes after it, with "0 problems" from check
    rows = [("a.png", "cat"), ("b.png", unseen), ("c.png", "dog")]
    wb = Workbook()
    ws = wb.active
    ws.title = "train"
    ws.append(["file", "label"])
    for r in rows:
        ws.append(list(r))
    tables = {"l.xlsx": None, "l.csv": "file,label\n" + "".join(f"{f},{lab}\n" for f, lab in rows),
              "l.txt": "".join(f"{f} {lab}\n" for f, lab in rows)}  # fmt: skip
    for name, text in tables.items():
        path = tmp_path / name
        if text is None:
            wb.save(path)
        else:
            path.write_text(text, encoding="utf-8")
        where = f"{path}, sheet 'train', row 3" if text is None else f"{path}, line {3 if name.endswith('csv') else 2}"
        engines = ("calamine", "openpyxl") if text is None else (None,)
        for engine in engines:
            with pytest.raises(LabelError) as e:
                read_labels(path, **({"engine": engine} if engine else {}))
            assert str(e.value) == f"{where}: file 'b.png' has no label"


def test_excel_escapes_in_cell_text_read_alike_by_both_engines(tmp_path: Path):
    # the attack: Excel writes a carriage return in a cell as _x000D_ (text pasted with CRLF line ends); calamine
    # decodes it, openpyxl kept it: 'cat_x000D_' a class beside 'cat', '_x0041_' beside 'A', with engine="openpyxl"
    wb = Workbook()
    ws = wb.active
    ws.title = "train"
    ws.append(["file", "label"])
    for f, lab in (("a.jpg", "cat"), ("b.jpg", "cat"), ("c.jpg", "dog"), ("d.jpg", "A"), ("e_x005F_x0041_.jpg", "A"),
                   ("tile_x0512_y1024.jpg", "dog"), ("scan_xD83D_y1.jpg", "dog")):  # fmt: skip
        ws.append([f, lab])
    path = tmp_path / "l.xlsx"
    wb.save(path)
    with zipfile.ZipFile(path) as z:
        members = [(info, z.read(info)) for info in z.infolist()]
    with zipfile.ZipFile(path, "w") as z:  # as Excel writes them: escaped in the workbook's XML
        for info, data in members:
            if info.filename in ("xl/sharedStrings.xml", "xl/worksheets/sheet1.xml"):
                data = data.replace(b">cat<", b">cat_x000D_<", 1).replace(b">A<", b">_x0041_<", 1)
            z.writestr(info, data)
    got = {engine: read_labels(path, engine=engine) for engine in ("calamine", "openpyxl")}
    for table in got.values():
        assert table.class_map().classes == ("A", "cat", "dog")
        assert list(zip(table.files.tolist(), table.labels.tolist())) == [
            ("a.jpg", "cat"), ("b.jpg", "cat"), ("c.jpg", "dog"), ("d.jpg", "A"), ("e_x0041_.jpg", "A"),
            ("tile_x0512_y1024.jpg", "dog"), ("scan_xD83D_y1.jpg", "dog")]  # fmt: skip
    # (past U+00FF calamine leaves them as they are, and so does the openpyxl engine: names written by pandas, which
    # stores text literally, keep their _x0512_)


def test_the_characters_that_show_nothing_are_all_listed():
    from datakit.labels import _NOTHING_SEEN, _UNSEEN_CHARS

    found = {c for c in map(chr, range(0x30000)) if _NOTHING_SEEN.fullmatch(c) and not c.isspace()}
    assert found == {c for c in _UNSEEN_CHARS if not c.isspace()}  # (a cell's spaces are stripped first)


def test_a_workbook_rewritten_with_its_size_and_time_kept_is_read_again(tmp_path: Path):
    # the attack: in one process (a notebook), labels.xlsx read, then rewritten with row 3 hidden, the same size and
    # its old modification time put back: the sheet's scan, cached by time and size, was taken for the new file's,
    # and the hidden row read without a question
    import os

    wb = Workbook()
    ws = wb.active
    ws.title = "train"
    ws.append(["file", "label"])
    for k in range(4):
        ws.append([f"img/{k}.jpg", "猫" if k % 2 else "狗"])
    made = tmp_path / "made.xlsx"
    wb.save(made)
    with zipfile.ZipFile(made) as z:
        members = [(info, z.read(info)) for info in z.infolist()]

    def book(hidden: str) -> bytes:  # stored, not deflated: the same size whether row 3 is hidden or not
        path = tmp_path / f"{hidden}.xlsx"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
            for info, data in members:
                if info.filename == "xl/worksheets/sheet1.xml":
                    data = data.replace(b'<row r="3"', f'<row r="3" hidden="{hidden}"'.encode(), 1)
                z.writestr(info.filename, data)
        return path.read_bytes()

    shown, hidden = book("0"), book("1")
    assert len(shown) == len(hidden) and shown != hidden
    path = tmp_path / "labels.xlsx"
    path.write_bytes(shown)
    st = path.stat()
    assert len(read_labels(path, split="train")) == 4
    path.write_bytes(hidden)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(LabelError, match=r"sheet 'train': row 3 is hidden in Excel \(by a filter, or by hand\)"):
        read_labels(path, split="train")


def test_a_text_table_cut_short_is_refused_not_read_with_a_class_of_its_last_line(tmp_path: Path):
    # The attack: a CSV half-copied (or read while it was written), cut inside its last label: 'coffee' became
    # 'cof', a class of one sample, without a word.
    rows = "文件名,标签\nimages/1.jpg,cat\nimages/2.jpg,coffee\nimages/3.jpg,cat\nimages/4.jpg,coffee"
    cut = tmp_path / "cut.csv"
    cut.write_text(rows[:-3], encoding="utf-8")
    with pytest.raises(LabelError) as e:
        read_labels(cut)
    assert str(e.value) == (f"{cut}, line 5: the last line has no line end, and its label 'cof' is on no other line "
                            "and the start of 'coffee': the file cut short (half-copied, or read while it was "
                            "written)? copy it again; if 'cof' is a class, end the file with a line break")  # fmt: skip
    whole = tmp_path / "whole.csv"
    whole.write_text(rows, encoding="utf-8")  # no line end after the last line, but no label cut: read as it is
    assert read_labels(whole).labels.tolist() == ["cat", "coffee", "cat", "coffee"]
    cut.write_text(rows[:-3] + "\n", encoding="utf-8")  # 'cof' meant as a class: a line break says so
    assert read_labels(cut).labels.tolist() == ["cat", "coffee", "cat", "cof"]
    listed = tmp_path / "train.txt"  # a 'path label' list, GBK, cut the same way
    listed.write_bytes("图/1.jpg 猫\n图/2.jpg 猫咪\n图/3.jpg 猫".encode("gbk"))
    assert read_labels(listed).labels.tolist() == ["猫", "猫咪", "猫"]  # '猫' on another line too: a class
    listed.write_bytes("图/1.jpg 狗\n图/2.jpg 猫咪\n图/3.jpg 猫".encode("gbk"))
    with pytest.raises(
        LabelError, match=r"train\.txt, line 3: the last line has no line end, and its label '猫' is on"
    ):
        read_labels(listed)
    dropped = tmp_path / "dropped.csv"  # the last line left out for a problem of its own: no other line blamed
    dropped.write_text("文件名,标签\nimages/1.jpg,cof\nimages/2.jpg,coffee\nimages/3.jpg,", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        read_labels(dropped)
    assert str(e.value) == f"{dropped}, line 4: file 'images/3.jpg' has no label"
    # the attack: cut inside the split column ('train' as 'tra'), the last row was a split of its own: --split train
    # read one row fewer, pack-lmdb and stats exit 0, without a word
    split = tmp_path / "split.csv"
    rows = "file,label,split\n1.jpg,cat,val\n2.jpg,dog,train\n3.jpg,cat,train\n4.jpg,cat,train"
    split.write_text(rows[:-2], encoding="utf-8")
    with pytest.raises(LabelError) as e:
        read_labels(split, split="train")
    assert str(e.value) == (f"{split}, line 5: the last line has no line end, and its split 'tra' is on no other line "
                            "and the start of 'train': the file cut short (half-copied, or read while it was "
                            "written)? copy it again; if 'tra' is a split, end the file with a line break")  # fmt: skip
    split.write_text(rows, encoding="utf-8")
    assert read_labels(split, split="train").files.tolist() == ["2.jpg", "3.jpg", "4.jpg"]


def test_a_list_line_of_a_spaced_file_name_without_its_label_is_named_not_a_class(tmp_path: Path):
    # The attack: 'IMG (1).png' alone on a line of a 'path label' list (its label left out): read as the file 'IMG'
    # labelled '(1).png', a class of its own that moved every class after it, with a warning at most.
    lines = [f"{k:03d}.png {'cat' if k % 2 else 'dog'}" for k in range(40)]
    lines[10], lines[20] = "IMG (1).png", "scan 3.png"
    listed = tmp_path / "list.txt"
    listed.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        read_labels(listed)
    assert str(e.value).splitlines() == [
        f"{listed}: 2 problems:",
        f"  {listed}, line 11: 'IMG (1).png' has no label (expected 'path label'): it reads as the file 'IMG' labelled "
        "'(1).png', a file name with a space in it and no label after it",
        f"  {listed}, line 21: 'scan 3.png' has no label (expected 'path label'): it reads as the file 'scan' labelled "
        "'3.png', a file name with a space in it and no label after it",
    ]
    pairs = tmp_path / "pairs.txt"  # a label that is a file beside a path that is one too (an image and its mask)
    pairs.write_text("img/1.jpg masks/1.png\nimg/2.jpg masks/2.png\n", encoding="utf-8")
    assert read_labels(pairs).files.tolist() == ["img/1.jpg", "img/2.jpg"]


def test_an_encoding_given_for_a_workbook_is_refused_not_left_unheeded(tmp_path: Path):
    # The attack: --encoding gbk beside an .xlsx (whose text is Unicode) was accepted and changed nothing (exit 0).
    path = book(tmp_path / "l.xlsx", dict(SPLITS))
    with pytest.raises(UsageError) as e:
        read_labels(path, encoding="gbk")
    assert str(e.value) == (f"{path}: encoding='gbk' (--encoding) is a text table's (and, without a table, a zip's "
                            "names'); a workbook stores its text as Unicode, read as it is: leave it out")  # fmt: skip
    assert read_labels(path).split_names == ["train", "val"]


def jpeg(path: Path) -> None:
    """A small JPEG whose grey level its name picks: two files are two images (check finds one image under two
    names by its bytes)."""
    import zlib

    import cv2

    path.parent.mkdir(parents=True, exist_ok=True)
    grey = zlib.crc32(path.name.encode()) % 200 + 20
    path.write_bytes(cv2.imencode(".jpg", np.full((8, 8, 3), grey, np.uint8))[1].tobytes())


def test_a_hidden_sheet_never_gives_the_splits_two_class_maps(tmp_path: Path, caplog, capsys):
    # The attack: a hidden 'val' sheet holds a class the visible 'train' sheet lacks. --split train
    # left it out (cat=0) while --split val read it and the others' labels (ant=0, cat=1), with no note.
    # Then val was refused without include_hidden, but train, read without it (a note), had cat=0 where val read
    # with it has cat=1: the notes now say which classes the hidden sheet adds, and to read every split alike.
    from datakit.cli import main

    train = [["file", "label"], ["f0.jpg", "cat"], ["f1.jpg", "dog"], ["f2.jpg", "cat"]]
    val = [["file", "label"], ["f4.jpg", "ant"], ["f5.jpg", "cat"], ["f6.jpg", "dog"]]
    path = book(tmp_path / "l.xlsx", {"train": train, "val": val}, hidden=("val",))
    for name in ("f0", "f1", "f2", "f4", "f5", "f6"):
        jpeg(tmp_path / "img" / f"{name}.jpg")
    note = (f"{path}: hidden sheet 'val' not read (include_hidden=True, --include-hidden, reads them); read, they "
            "would add the class 'ant' and every index after it would move: read every split of this workbook with "
            "include_hidden or every one without")  # fmt: skip
    refusal = f"{path}: sheet 'val' is hidden; pass include_hidden=True (--include-hidden) to read it"
    for split in (None, "train"):
        caplog.clear()
        with caplog.at_level("WARNING", logger="datakit"):
            t = read_labels(path, split=split)
        assert t.class_map().classes == ("cat", "dog") and t.targets(t.class_map()).tolist() == [0, 1, 0]
        assert t.notes == [note] and caplog.messages == [note]
    for how in ({"split": "val"}, {"sheets": "val"}, {"sheets": ["train", "val"]}):
        with pytest.raises(LabelError) as e:
            read_labels(path, **how)
        assert str(e.value) == refusal
    with pytest.raises(LabelError) as e:
        open_dataset(tmp_path / "img", labels=path, split="val")
    assert str(e.value) == refusal
    capsys.readouterr()
    assert main(["check", str(tmp_path / "img"), "--labels", str(path), "--split", "val"]) == 2  # as a split not there
    assert capsys.readouterr().err == f"datakit check: error: {refusal}\n"
    # with include_hidden every split reads the same sheets, so cat is 1 in both
    for split, targets in (("train", [1, 2, 1]), ("val", [0, 1, 2])):
        t = read_labels(path, split=split, include_hidden=True)
        assert t.class_map().classes == ("ant", "cat", "dog") and t.targets(t.class_map()).tolist() == targets
        assert t.notes == [f"{path}: the hidden sheets read (include_hidden) add the class 'ant', which moves the "
                           "class indices against a read without include_hidden: read every split alike"]  # fmt: skip
        ds = open_dataset(tmp_path / "img", labels=path, split=split, include_hidden=True)
        assert ds.classes == ["ant", "cat", "dog"] and ds.targets.tolist() == targets


@pytest.mark.parametrize("engine", ["calamine", "openpyxl"])
def test_formula_without_saved_value(tmp_path: Path, engine: str):
    path = book(tmp_path / "l.xlsx", {"train": [["file", "label"], ["a.jpg", 0], ["b.jpg", "=A1&1"]]})
    with pytest.raises(LabelError) as e:
        read_labels(path, engine=engine)
    assert str(e.value) == (
        f"{path}, sheet 'train', row 3: cell B3 holds a formula (=A1&1) with no saved value; open the file in "
        "Excel and save it, so the values are stored"
    )


def cfb(streams: dict[str, bytes]) -> bytes:
    """A minimal OLE compound file (what Excel writes for a password-protected workbook)."""
    sector, free, end, fat_mark = 512, 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD
    datas = [d + b"\0" * (-len(d) % sector) for d in streams.values()]  # every stream >= 4096: no mini stream
    fat = [fat_mark, end]  # sector 0: the FAT, sector 1: the directory
    starts = []
    for d in datas:
        n = len(d) // sector
        starts.append(len(fat))
        fat += [len(fat) + k + 1 for k in range(n - 1)] + [end]
    fat += [free] * (128 - len(fat))

    def entry(name: str, kind: int, child: int, right: int, start: int, size: int) -> bytes:
        raw = name.encode("utf-16-le") + b"\0\0"
        return (raw.ljust(64, b"\0") + struct.pack("<HBB3I", len(raw), kind, 1, free, right, child) + b"\0" * 36
                + struct.pack("<IQ", start, size))  # fmt: skip

    names = list(streams)
    dirs = entry("Root Entry", 5, 1, free, end, 0)
    for k, name in enumerate(names):
        dirs += entry(name, 2, free, k + 2 if k + 1 < len(names) else free, starts[k], len(streams[name]))
    dirs = dirs.ljust(sector, b"\0")
    header = (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 16 + struct.pack("<HHHHH", 0x3E, 3, 0xFFFE, 9, 6)
              + b"\0" * 6 + struct.pack("<IIIIIIII", 0, 1, 1, 0, 4096, end, 0, end) + struct.pack("<I", 0)
              + struct.pack("<I", 0) + struct.pack("<108I", *([free] * 108)))  # fmt: skip
    header = header[:512].ljust(512, b"\xff")
    return header + struct.pack("<128I", *fat) + dirs + b"".join(datas)


def test_password_protected_workbook(tmp_path: Path):
    path = tmp_path / "加密.xlsx"
    path.write_bytes(cfb({"EncryptionInfo": b"\x04\x00\x04\x00" * 1024, "EncryptedPackage": b"\x7f" * 4096}))
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == (
        f"{path}: the workbook is password-protected (encrypted), so it cannot be read; open it in Excel, remove "
        "the password (File > Info > Protect Workbook > Encrypt with Password) and save it, or save the sheets as CSV"
    )
    xls = tmp_path / "old.xlsx"
    xls.write_bytes(cfb({"Workbook": b"\x09\x08" * 2048}))
    with pytest.raises(LabelError, match=r"an old Excel 97-2003 \(.xls\) file under an .xlsx name"):
        read_labels(xls)


def messy_workbook(path: Path) -> Path:
    """Leading title row (merged), an empty row, Chinese sheet and column names, numeric names, a blank row."""
    wb = Workbook()
    ws = wb.active
    ws.title = "训练"
    ws["A1"] = "猫狗数据集 标签表"
    ws.merge_cells("A1:D1")
    ws["A3"], ws["B3"], ws["C3"] = "文件名", "标签", "备注"
    ws.merge_cells("C3:D3")
    ws.append(["00123", "猫", "leading zeros kept"])
    ws.append([456, "狗"])
    ws.append([None, None])
    ws.append(["  cat\\a.jpg ", " 猫 "])
    ws2 = wb.create_sheet("验证")
    ws2.append(["File", "Label"])
    ws2.append(["dog/b.jpg", "狗"])
    wb.save(path)
    return path


@pytest.mark.parametrize("engine", [None, "openpyxl"])
def test_messy_workbook(tmp_path: Path, engine):
    t = read_labels(messy_workbook(tmp_path / "标签.xlsx"), engine=engine)
    assert t.files.tolist() == ["00123", "456", "cat/a.jpg", "dog/b.jpg"]
    assert t.labels.tolist() == ["猫", "狗", "猫", "狗"]
    assert t.splits.tolist() == ["训练", "训练", "训练", "验证"]
    assert t.rows.tolist() == [4, 5, 7, 2]
    assert t.where(2) == f"{tmp_path / '标签.xlsx'}, sheet '训练', row 7"
    assert (t.file_column, t.label_column) == ("文件名", "标签")
    assert t.class_map().classes == ("狗", "猫")
    assert len(t.select("验证")) == 1
    with pytest.raises(UsageError, match=r"no split 'test'; the splits are '训练', '验证'"):
        t.select("test")


def test_numeric_split_values_are_asked_for_either_way(tmp_path: Path):
    # a split column of fold numbers: a workbook's 2.0 cell reads "2", the same table saved as CSV keeps "2.0"
    csv = tmp_path / "folds.csv"
    csv.write_text("file,label,fold\na.jpg,cat,2.0\nb.jpg,dog,2.0\nc.jpg,cat,1\nd.jpg,dog,01\n", encoding="utf-8")
    t = read_labels(csv, split_column="fold")
    assert t.split_names == ["2.0", "1", "01"]
    assert t.select("2").files.tolist() == ["a.jpg", "b.jpg"]
    assert t.select("2.0").files.tolist() == ["a.jpg", "b.jpg"]
    # "1" is a value of its own; "1.0" is both "1" and "01": which one is not guessed
    assert t.select("1").files.tolist() == ["c.jpg"]
    assert read_labels(csv, split_column="fold", split="2").files.tolist() == ["a.jpg", "b.jpg"]
    with pytest.raises(
        UsageError, match=r"^" + re.escape(f"{csv}: no split '1.0'; the splits are '2.0', '1', '01'") + "$"
    ):
        t.select("1.0")


def test_sheet_selection(tmp_path: Path):
    path = messy_workbook(tmp_path / "l.xlsx")
    assert read_labels(path, sheets="验证").files.tolist() == ["dog/b.jpg"]
    with pytest.raises(LabelError, match=r"no sheet 'test'; the sheets are '训练', '验证'"):
        read_labels(path, sheets=["test"])


def test_empty_split_and_missing_column(tmp_path: Path):
    path = book(tmp_path / "l.xlsx", {"train": [["file", "label"], ["a.jpg", "cat"]], "test": [["file", "label"]],
                                      "extra": [["file", "备注"], ["b.jpg", "x", "y"], ["c.jpg"]]})  # fmt: skip
    t = read_labels(path, validate=False, label_column="label")
    assert t.problems() == [
        f"{path}, sheet 'test': an empty split (a header at row 1, no rows under it)",
        f"{path}, sheet 'extra', row 1: no label column named 'label' among 'file', '备注'",
    ]
    # named by the caller and on no sheet: a usage mistake, one line (the attack: a note per sheet calling each
    # "notes, a chart or a pivot table", then a problem that said to pass the option just passed; exit 1)
    for kw, want in (
        ({"label_column": "类别"}, f"{path}, sheet 'train', row 1: no label column named '类别' among 'file', 'label' "
                                  "(nor any other sheet: 2 more)"),
        ({"file_column": "路径"}, f"{path}, sheet 'train': no file column named '路径' in the first 50 rows; the "
                                 "first row holds 'file', 'label' (and no other sheet has one either: 'test', 'extra')"),
        ({"split_column": "fold"}, f"{path}, sheet 'train', row 1: no split column named 'fold' among 'file', 'label'"),
    ):  # fmt: skip
        with pytest.raises(ColumnNotFound) as e:
            read_labels(path, validate=False, **kw)
        assert str(e.value) == want and isinstance(e.value, UsageError) and e.value.exit_code == 2
    # the split column on one sheet only, the split asked for on another: still read (it was before)
    two = book(tmp_path / "s.xlsx", {"train": [["file", "label", "split"], ["a.jpg", "cat", "train"]],
                                     "val": [["file", "label"], ["b.jpg", "dog"]]})  # fmt: skip
    assert read_labels(two, split="val", split_column="split").files.tolist() == ["b.jpg"]


def test_no_header_anywhere(tmp_path: Path):
    path = book(tmp_path / "l.xlsx", {"说明": [["只有说明"]]})
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == (
        f"{path}, sheet '说明': no file-name column found (looked for file, filename, file_name, filepath, file_path, "
        "path, 文件名, 图片, ...); the first row holds '只有说明'; name it with file_column= (--file-column), or, "
        "where the rows begin at once, add a header line naming the columns (file,label)"
    )


def test_explicit_columns(tmp_path: Path):
    path = tmp_path / "l.tsv"
    path.write_text("id\tpic\tkind\tfold\n1\ta.jpg\tx\tval\n", encoding="utf-8")
    with pytest.raises(LabelError, match=r"no file-name column found"):
        read_labels(path)
    t = read_labels(path, file_column="pic", label_column="kind", split_column="fold")
    assert (t.files.tolist(), t.labels.tolist(), t.splits.tolist()) == (["a.jpg"], ["x"], ["val"])
    with pytest.raises(LabelError) as e:
        read_labels(path, file_column="pic", label_column="nope")
    assert str(e.value) == f"{path}, line 1: no label column named 'nope' among 'id', 'pic', 'kind', 'fold'"
    assert isinstance(e.value, ColumnNotFound) and e.value.exit_code == 2
    for kw, want in (({"file_column": "图"}, f"{path}: no file column named '图' in the first 50 rows; the first "
                                             "row holds 'id', 'pic', "
                                             "'kind', 'fold'"),
                     ({"file_column": "pic", "label_column": "kind", "split_column": "折"},
                      f"{path}, line 1: no split column named '折' among 'id', 'pic', 'kind', 'fold'")):  # fmt: skip
        with pytest.raises(ColumnNotFound) as e:
            read_labels(path, **kw)
        assert str(e.value) == want


def test_columns_named_for_a_list_it_does_not_have_are_a_usage_error(tmp_path: Path):
    # the attack: `--label-column x` (or --file-column, --split-column) on a 'path label' list was ignored without
    # a word; on a list whose header is not a known one, the message said to pass --file-column, just passed
    plain = tmp_path / "list.txt"
    plain.write_text("a.jpg cat\nb.jpg dog\n", encoding="utf-8")
    headed = tmp_path / "headed.txt"
    headed.write_text("图片地址\t类别\na.jpg\tcat\n", encoding="utf-8")
    for path, kw, want in (
        (plain, {"label_column": "x"}, f"{plain}: no header line, so no label column named 'x'; its lines are 'path label'"),
        (plain, {"split_column": "fold"}, f"{plain}: a list of 'path label' lines has no split column ('fold' named); "
                                          "its split is the file itself"),
        (headed, {"file_column": "路径"}, f"{headed}, line 1: no file column named '路径' among '图片地址', '类别'"),
    ):  # fmt: skip
        with pytest.raises(ColumnNotFound) as e:
            read_labels(path, **kw)
        assert str(e.value) == want
    t = read_labels(headed, file_column="图片地址", label_column="类别")  # the columns it has, named: read
    assert (t.files.tolist(), t.labels.tolist()) == (["a.jpg"], ["cat"])


def test_columns_named_for_a_headerless_table_are_a_usage_error(tmp_path: Path):
    # the attacks: a headerless CSV or sheet with --split-column was read without a word; with --label-column alone
    # the message said to name the file column (exit 1)
    csv = tmp_path / "l.csv"
    csv.write_text("a.jpg,cat\nb.png,dog\n", encoding="utf-8")
    sheet = book(tmp_path / "l.xlsx", {"Sheet1": [["a.jpg", "cat"], ["b.png", "dog"]]})
    for path, kw, want in (
        (csv, {"split_column": "fold"}, f"{csv}: no header line, so no split column named 'fold'; its columns are "
                                        "file, label"),
        (csv, {"label_column": "x"}, f"{csv}: no header with a label column named 'x'; the first row holds 'a.jpg', "
                                     "'cat'"),
        (sheet, {"split_column": "fold"}, f"{sheet}, sheet 'Sheet1': no header row, so no split column named 'fold'"),
        (sheet, {"label_column": "x"}, f"{sheet}, sheet 'Sheet1': no header with a label column named 'x'; the first "
                                       "row holds 'a.jpg', 'cat'"),
    ):  # fmt: skip
        with pytest.raises(ColumnNotFound) as e:
            read_labels(path, **kw)
        assert str(e.value) == want
    assert read_labels(csv).files.tolist() == read_labels(sheet).files.tolist() == ["a.jpg", "b.png"]


def test_headerless_csv(tmp_path: Path):
    path = tmp_path / "l.csv"
    path.write_text("a.jpg,cat\nb.png,dog\n", encoding="utf-8")
    t = read_labels(path)
    assert t.files.tolist() == ["a.jpg", "b.png"] and t.rows.tolist() == [1, 2]
    assert t.notes == [f"{path}: no header line; the first column read as files, the second as labels"]


def test_bad_files(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="no such label table"):
        read_labels(tmp_path / "none.xlsx")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(LabelError, match="not a label table") as e:
        read_labels(tmp_path / "x.json")
    assert isinstance(e.value, UsageError) and e.value.exit_code == 2
    assert str(e.value) == f"{tmp_path / 'x.json'}: not a label table (expected .xlsx, .xlsm, .csv, .tsv, .txt or .lst)"
    (tmp_path / "bad.xlsx").write_bytes(b"not a zip")
    with pytest.raises(LabelError, match=r"bad.xlsx: not an .xlsx workbook"):
        read_labels(tmp_path / "bad.xlsx")


# ---------------------------------------------------------------------------------------------
# the two text parsers agree; the table is numpy


@pytest.mark.parametrize("fmt", ["csv", "list"])
def test_fast_and_python_paths_agree(tmp_path: Path, fmt: str):
    rows = [
        (f"类_{i % 7}/图 {i}.jpg" if fmt == "csv" else f"类_{i % 7}/图_{i}.jpg", f"类别 {i % 7}") for i in range(200)
    ]
    rows[5] = (rows[5][0], "")  # a blank label
    rows[9] = rows[3]  # a duplicate
    plain = write_table(tmp_path, fmt if fmt == "csv" else "list-tab", rows, "plain")
    quoted = tmp_path / ("quoted.csv" if fmt == "csv" else "quoted.txt")
    text = plain.read_text(encoding="utf-8")
    # a quoted field (csv) or a ragged line (list) sends the whole file through the Python path
    quoted.write_text(text.replace("\n类_0/图 0.jpg,", '\n"类_0/图 0.jpg",') if fmt == "csv" else text, "utf-8")
    if fmt == "list":
        quoted.write_text(text.replace("\t类别 6\n", "\t 类别 6\u3000\n", 1), encoding="utf-8")
    a, b = read_labels(plain, validate=False), read_labels(quoted, validate=False)
    assert a.files.tolist() == b.files.tolist()
    assert a.labels.tolist() == b.labels.tolist() and a.rows.tolist() == b.rows.tolist()
    assert [p.replace("quoted", "plain") for p in b.problems()] == a.problems()
    assert len(a.problems()) == 2


def test_table_is_numpy(tmp_path: Path):
    path = write_table(tmp_path, "csv", [(f"{i}.jpg", i % 3) for i in range(9)])
    ds = TableDataset(read_labels(path), tmp_path, probe=False)
    t = ds.table
    assert isinstance(t.files, StringArray) and isinstance(t.labels, CodedColumn)
    assert t.labels.codes.dtype == np.int32 and t.rows.dtype == np.int32 and ds.targets.dtype == np.int64
    # nothing per row as Python objects: every per-row field of the table and dataset is a numpy array
    for obj in (t, t.labels, t.splits, t.sheets, ds):
        for name, value in vars(obj).items():
            assert not isinstance(value, (list, tuple)) or len(value) < 9, name


def test_duplicates_found_exactly(tmp_path: Path):
    names = [f"dir/{'x' * (i % 40)}{i}.jpg" for i in range(3000)] + ["dir/x1.jpg", "dir/40.jpg"]
    path = tmp_path / "l.txt"
    path.write_text("".join(f"{n} 0\n" for n in names), encoding="utf-8")
    t = read_labels(path, validate=False)
    assert t.problems() == [
        f"{path}, line 3001: file 'dir/x1.jpg' is listed again (first at line 2)",
        f"{path}, line 3002: file 'dir/40.jpg' is listed again (first at line 41)",
    ]


@pytest.mark.parametrize(
    ("first", "again"),
    [("./a.jpg", "a.jpg"), ("a.jpg", "./a.jpg"), ("x/../a.jpg", "a.jpg"), (".\\a.jpg", "a.jpg"),
     ("sub//a.jpg", "sub/a.jpg"), ("sub\\a.jpg", "./sub/./a.jpg"), ("././a.jpg", ".//a.jpg")],
)  # fmt: skip
def test_one_file_spelled_two_ways_is_listed_again(tmp_path: Path, first: str, again: str):
    # The attack: './a.jpg' cat and 'a.jpg' dog name one image; it was packed twice, once per label.
    path = tmp_path / "labels.csv"
    path.write_text(f"file,label\n{first},cat\n{again},dog\nb.jpg,dog\n", encoding="utf-8")
    want = f"{path}, line 3: file {again!r} is listed again (first at line 2)"
    assert read_labels(path, validate=False).problems() == [want]
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == want


def test_one_file_listed_in_two_unicode_forms_is_listed_again(tmp_path: Path):
    # The attack: 'café/1.jpg' typed on Windows (NFC) and copied from macOS (NFD) name one image, which a
    # table finds under either form; it was packed twice.
    nfc, nfd = "caf\u00e9/1.jpg", "cafe\u0301/1.jpg"
    path = tmp_path / "labels.csv"
    path.write_text(f"file,label\n{nfc},cat\nb.jpg,dog\n.\\{nfd},dog\n图/二.jpg,cat\n", encoding="utf-8")
    want = (f"{path}, line 4: file './{nfd}' (NFD: './cafe\\u0301/1.jpg') is listed again in another "
            "Unicode form (first at line 2, NFC); a table's name finds a file in either form, so two files named "
            "alike but for it are one to a table: rename one")  # fmt: skip
    assert read_labels(path, validate=False).problems() == [want]
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == want
    path.write_text(f"file,label\n{nfd},cat\ncafe/1.jpg,dog\n图/二.jpg,cat\n", encoding="utf-8")  # one form each
    assert read_labels(path).files.tolist() == [nfd, "cafe/1.jpg", "图/二.jpg"]


def test_the_bytes_that_skip_the_unicode_form_check_are_those_of_characters_nfc_keeps_alone():
    # The check of names' Unicode forms is skipped for a buffer none of whose bytes starts a character that NFC
    # changes, that combines, or that NFC may join with the character before it: derived here from unicodedata.
    import unicodedata

    from datakit.labels import _NFC_UNSAFE_LEADS

    unsafe = set()
    for cp in range(0x80, 0x110000):
        c = chr(cp)
        decomposition = unicodedata.decomposition(c).split()
        second = [int(decomposition[1], 16)] if len(decomposition) == 2 and not decomposition[0].startswith("<") else []
        for x in [cp] * bool(unicodedata.combining(c) or unicodedata.normalize("NFC", c) != c) + second:
            unsafe.add(chr(x).encode("utf-8", "surrogatepass")[0])
    for cp in [*range(0x1161, 0x1176), *range(0x11A8, 0x11C3)]:  # Hangul vowels and finals: joined by algorithm
        unsafe.add(chr(cp).encode()[0])
    assert set(_NFC_UNSAFE_LEADS) == unsafe


@pytest.mark.parametrize(("first", "again", "forms"), [
    ("\u8c48/1.jpg", "\uf900/1.jpg", ("NFC", "mixed")),  # a CJK compatibility ideograph, which NFC maps to 豈
    ("\ud55c/1.jpg", "\u1112\u1161\u11ab/1.jpg", ("NFC", "NFD")),  # 한 composed, and as its three Hangul jamo
])  # fmt: skip
def test_names_of_chinese_and_korean_text_in_two_unicode_forms_are_listed_again(tmp_path: Path, first, again, forms):
    # The attack: beside Chinese names (whose bytes skip the form check), a name in another Unicode form.
    path = tmp_path / "labels.csv"
    path.write_text(f"file,label\n{first},cat\n图/二.jpg,dog\n{again},dog\n", encoding="utf-8")
    problems = read_labels(path, validate=False).problems()
    assert len(problems) == 1
    assert problems[0].startswith(f"{path}, line 4: file {again!r} ({forms[1]}: ")
    assert f"is listed again in another Unicode form (first at line 2, {forms[0]})" in problems[0]
    path.write_text(f"file,label\n{first},cat\n图/二.jpg,dog\n图/三.jpg,dog\n", encoding="utf-8")
    assert read_labels(path).files.tolist() == [first, "图/二.jpg", "图/三.jpg"]


def test_excel_errors_and_missing_markers_are_not_class_names_in_any_format(tmp_path: Path):
    # The attack: a label column filled by VLOOKUP holds #N/A where nothing matched. The .xlsx refused that row;
    # the same sheet saved as CSV by Excel ('#N/A') or by pandas (na_rep='NaN') trained a class '#N/A' / 'NaN'.
    named = (
        "a missing-value marker, not a class name; a class really named so is read when classes= (--classes) names it"
    )
    for marker, what in (("#N/A", "an Excel error value, not a class name"), ("#DIV/0!", "an Excel error value, not "
                         "a class name"), ("NaN", named), ("nan", named)):  # fmt: skip
        for sep, ext in ((",", "csv"), ("\t", "tsv")):
            path = tmp_path / f"l.{ext}"
            path.write_text(sep.join(["file", "label"]) + "\n" + "".join(
                sep.join(r) + "\n" for r in (["a.jpg", "cat"], ["b.jpg", marker], ["c.jpg", "dog"])), encoding="utf-8")  # fmt: skip
            want = f"{path}, line 3: file 'b.jpg' has no label (the cell holds {marker!r}, {what})"
            assert read_labels(path, validate=False).problems() == [want]
            assert read_labels(path, validate=False).class_map().classes == ("cat", "dog")
    xlsx = book(tmp_path / "l.xlsx", {"train": [["file", "label"], ["a.jpg", "cat"], ["b.jpg", "#N/A"]]})
    want = f"{xlsx}, sheet 'train', row 3: file 'b.jpg' has no label (the cell holds '#N/A', an Excel error value, not a class name)"
    assert read_labels(xlsx, validate=False).problems() == [want]  # calamine reads the error cell as empty: the XML
    assert read_labels(xlsx, validate=False, engine="openpyxl").problems() == [want]


def test_rows_made_only_of_formulas_without_values_are_named_not_dropped(tmp_path: Path):
    # The attack: a 'val' sheet whose rows copy a master sheet by formula (=master!A2), as a script writes them
    # with openpyxl (no saved values): rows whose file and label cells were both formulas vanished as empty rows.
    path = tmp_path / "l.xlsx"
    wb = Workbook()
    master = wb.active
    master.title = "master"
    for row in (["file", "label"], ["0.jpg", "cat"], ["1.jpg", "dog"], ["2.jpg", "cat"]):
        master.append(row)
    val = wb.create_sheet("val")
    for row in (["file", "label"], ["9.jpg", "cat"], ["=master!A2", "=master!B2"], ["8.jpg", "dog"],
                ["=master!A3", "=master!B3"]):  # fmt: skip
        val.append(row)
    wb.save(path)
    note = "with no saved value; open the file in Excel and save it, so the values are stored"
    assert read_labels(path, split="val", validate=False).problems() == [
        f"{path}, sheet 'val', row 3: cell A3 holds a formula (=master!A2) {note}",
        f"{path}, sheet 'val', row 5: cell A5 holds a formula (=master!A3) {note}",
    ]
    with pytest.raises(LabelError, match="row 3: cell A3 holds a formula"):
        read_labels(path, split="val")


@pytest.mark.parametrize("split", ["val", "train", None])
def test_a_split_cell_whose_formula_has_no_saved_value_is_refused_not_read_as_blank(tmp_path: Path, split):
    # The attack: split column C4 is =IF(TRUE,"val","train"), written by openpyxl (no saved value): c.jpg was in no
    # split, said only as "a blank split cell", and check --split val counted it as 0 problems
    path = tmp_path / "l.xlsx"
    wb = Workbook()
    ws = wb.active
    ws.title = "all"
    for row in (["file", "label", "split"], ["a.jpg", "cat", "train"], ["b.jpg", "dog", "train"],
                ["c.jpg", "cat", '=IF(TRUE,"val","train")'], ["d.jpg", "dog", "val"]):  # fmt: skip
        ws.append(row)
    wb.save(path)
    want = (f"{path}, sheet 'all', row 4: cell C4 holds a formula (=IF(TRUE,\"val\",\"train\")) with no saved value; "
            "open the file in Excel and save it, so the values are stored")  # fmt: skip
    assert read_labels(path, split=split, validate=False).problems() == [want]
    with pytest.raises(LabelError) as e:
        read_labels(path, split=split)
    assert str(e.value) == want


def _linked_img(tmp_path: Path) -> Path:
    for name in ("0", "1"):
        jpeg(tmp_path / "img" / f"{name}.jpg")
    (tmp_path / "link").symlink_to(tmp_path / "img", target_is_directory=True)
    return tmp_path / "img"


def test_one_file_listed_through_a_linked_folder_and_by_name_is_listed_again(tmp_path: Path, capsys):
    # before: the same pixels were a cat and a dog, and check said nothing
    from datakit.cli import main

    img = _linked_img(tmp_path)
    path = tmp_path / "labels.csv"
    path.write_text(f"file,label\n{tmp_path / 'link' / '0.jpg'},cat\n0.jpg,dog\n1.jpg,dog\n", encoding="utf-8")
    want = (f"{path}, line 3: file '0.jpg' is listed again (first at line 2 as '{tmp_path / 'link' / '0.jpg'}': "
            f"both name {img / '0.jpg'})")  # fmt: skip
    with pytest.raises(LabelError) as e:
        open_dataset(img, labels=path)
    assert str(e.value) == want
    assert main(["check", str(img), "--labels", str(path), "--workers", "0", "-q"]) == 1
    assert want in capsys.readouterr().err
    # the root given through the link, the names by the real path
    path.write_text(f"file,label\n{img / '0.jpg'},cat\n0.jpg,dog\n1.jpg,dog\n", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        open_dataset(tmp_path / "link", labels=path)
    assert str(e.value) == (f"{path}, line 3: file '0.jpg' is listed again (first at line 2 as '{img / '0.jpg'}': "
                            f"both name {img / '0.jpg'})")  # fmt: skip


def test_two_relative_names_through_a_link_in_the_root_are_listed_again(tmp_path: Path):
    _linked_img(tmp_path)
    path = tmp_path / "labels.csv"
    path.write_text("file,label\nimg/0.jpg,cat\nimg/1.jpg,dog\nlink/1.jpg,cat\n", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        open_dataset(tmp_path, labels=path)
    assert str(e.value) == (f"{path}, line 4: file 'link/1.jpg' is listed again (first at line 3 as 'img/1.jpg': "
                            f"both name {tmp_path / 'img' / '1.jpg'})")  # fmt: skip
    # two links to one folder elsewhere
    (tmp_path / "link").unlink()
    root = tmp_path / "root"
    root.mkdir()
    for name in ("a", "b"):
        (root / name).symlink_to(tmp_path / "img", target_is_directory=True)
    path.write_text("file,label\na/0.jpg,cat\nb/0.jpg,dog\n", encoding="utf-8")
    with pytest.raises(LabelError, match=r"line 3: file 'b/0\.jpg' is listed again \(first at line 2 as 'a/0\.jpg'"):
        open_dataset(root, labels=path)


def test_one_member_listed_through_a_folder_link_of_a_zip_read_in_place_is_listed_again(tmp_path: Path, capsys):
    # the attack: a zip with img/0.jpg and a link member "link -> img", a table naming img/0.jpg a cat and
    # link/0.jpg a dog: the folder unzip-gbk extracts refused it, the zip read in place took both rows
    import cv2

    from datakit.cli import main
    from datakit.testing import ZipEntry, build_zip

    shade = [cv2.imencode(".jpg", np.full((8, 8, 3), v, np.uint8))[1].tobytes() for v in (60, 200)]
    z = tmp_path / "data.zip"
    z.write_bytes(build_zip([ZipEntry(b"img/0.jpg", shade[0]), ZipEntry(b"img/1.jpg", shade[1]),
                             ZipEntry(b"link", symlink_to=b"img")]))  # fmt: skip
    path = tmp_path / "labels.csv"
    path.write_text("file,label\nimg/0.jpg,cat\nimg/1.jpg,dog\nlink/0.jpg,dog\n", encoding="utf-8")
    want = (
        f"{path}, line 4: file 'link/0.jpg' is listed again (first at line 2 as 'img/0.jpg': both name {z}:img/0.jpg)"
    )
    with pytest.raises(LabelError) as e:
        open_dataset(z, labels=path)
    assert str(e.value) == want
    assert main(["check", str(z), "--labels", str(path), "--workers", "0", "-q"]) == 1
    assert want in capsys.readouterr().err
    path.write_text("file,label\nimg/0.jpg,cat\nlink/1.jpg,dog\n", encoding="utf-8")  # once each: read through the link
    ds = open_dataset(z, labels=path)
    assert [ds[i][1] for i in range(2)] == [0, 1] and ds.read(1) == shade[1]


def test_a_root_whose_folders_link_to_other_disks_is_no_duplicate(tmp_path: Path):
    # the usual reason for a link: the images live elsewhere; each file is still named once
    store = tmp_path / "store"
    for name in ("0", "1"):
        jpeg(store / "cats" / f"{name}.jpg")
        jpeg(store / "dogs" / f"{name}.jpg")
    root = tmp_path / "root"
    root.mkdir()
    (root / "cats").symlink_to(store / "cats", target_is_directory=True)
    (root / "dogs").symlink_to(store / "dogs", target_is_directory=True)
    path = tmp_path / "labels.csv"
    path.write_text("file,label\ncats/0.jpg,cat\ncats/1.jpg,cat\ndogs/0.jpg,dog\ndogs/1.jpg,dog\n", encoding="utf-8")
    ds = open_dataset(root, labels=path)
    assert (len(ds), ds.classes, ds.targets.tolist()) == (4, ["cat", "dog"], [0, 0, 1, 1])


def test_one_file_listed_by_absolute_and_relative_path_is_listed_again(tmp_path: Path, capsys, monkeypatch):
    # The attack: b.jpg in train and, as /abs/root/b.jpg, in val with another label: a leak only the root shows.
    from datakit.cli import main

    for name in ("b", "c", "d"):
        jpeg(tmp_path / "img" / f"{name}.jpg")
    path = tmp_path / "labels.csv"
    path.write_text(f"file,label,split\nb.jpg,cat,train\n{tmp_path / 'img' / 'b.jpg'},dog,val\nc.jpg,cat,val\n"
                    "d.jpg,dog,train\n", encoding="utf-8")  # fmt: skip
    want = (f"{path}, line 3: file '{tmp_path / 'img' / 'b.jpg'}' is listed again (first at line 2 as 'b.jpg': "
            f"both name {tmp_path / 'img' / 'b.jpg'})")  # fmt: skip
    for split in (None, "train", "val"):
        with pytest.raises(LabelError) as e:
            open_dataset(tmp_path / "img", labels=path, split=split)
        assert str(e.value) == want
    monkeypatch.chdir(tmp_path)  # the folder given relative, as on a command line
    with pytest.raises(LabelError) as e:
        open_dataset("img", labels=path)
    assert str(e.value) == want
    capsys.readouterr()
    assert main(["check", str(tmp_path / "img"), "--labels", str(path), "--workers", "1"]) == 1
    assert capsys.readouterr().err.splitlines() == [want]
    path.write_text(f"file,label\n{tmp_path / 'img' / 'b.jpg'},cat\nc.jpg,dog\n", encoding="utf-8")
    assert len(open_dataset(tmp_path / "img", labels=path)) == 2  # an absolute name alone is fine


def test_a_split_column_works_alike_in_a_workbook_and_a_csv_and_blank_cells_stay_their_splits(tmp_path: Path):
    # The attacks: a one-sheet .xlsx with a split column put every row in split 'Sheet' (the .csv it was saved from
    # had train and val); a blank label in a val row refused split='train' of a CSV with a split column.
    rows = [["file", "label", "split"], ["a.jpg", "cat", "train"], ["b.jpg", "dog", "train"], ["c.jpg", "cat", "val"],
            ["d.jpg", "", "val"]]  # fmt: skip
    csv = tmp_path / "t.csv"
    csv.write_text("".join(",".join(r) + "\n" for r in rows), encoding="utf-8")
    xlsx = book(tmp_path / "t.xlsx", {"Sheet": [[v or None for v in r] for r in rows]})
    for path, where in ((csv, "line 5"), (xlsx, "sheet 'Sheet', row 5")):
        t = read_labels(path, validate=False)
        assert t.split_names == ["train", "val"]
        assert t.problems() == [f"{path}, {where}: file 'd.jpg' has no label"]
        assert read_labels(path, split="train").files.tolist() == ["a.jpg", "b.jpg"]  # val's blank cell is val's
        with pytest.raises(LabelError, match="file 'd.jpg' has no label"):
            read_labels(path, split="val")


def test_a_stale_dimension_tag_hides_no_rows_from_either_engine(tmp_path: Path):
    # The attack: a sheet whose <dimension> says A1:B3 (left stale by a writer) holds 10 rows; the openpyxl engine
    # (the fallback without calamine) read 2 of them, silently.
    import re
    import zipfile

    src = book(tmp_path / "a.xlsx", {"train": [["file", "label"], *([f"{i}.jpg", ["cat", "dog"][i % 2]]
                                                                    for i in range(10))]})  # fmt: skip
    stale = tmp_path / "b.xlsx"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(stale, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename.startswith("xl/worksheets/sheet"):
                data, n = re.subn(rb'<dimension ref="[^"]*"\s*/>', b'<dimension ref="A1:B3"/>', data)
                assert n == 1
            zout.writestr(item, data)
    for engine in ("calamine", "openpyxl"):
        assert read_labels(stale, engine=engine).files.tolist() == [f"{i}.jpg" for i in range(10)], engine


def test_names_of_different_files_are_not_listed_again(tmp_path: Path):
    path = tmp_path / "labels.csv"
    rows = ["a.jpg", "sub/a.jpg", "../a.jpg", "/a.jpg", "a.jpg.", "x/./../c/a.jpg", "b/a.jpg"]
    path.write_text("file,label\n" + "".join(f"{n},cat\n" for n in rows), encoding="utf-8")
    assert read_labels(path).files.tolist() == rows  # stored as written
    path.write_text("file,label\n" + "".join(f"{n},cat\n" for n in rows + ["b\\..\\sub\\a.jpg"]), encoding="utf-8")
    assert read_labels(path, validate=False).problems() == [
        f"{path}, line 9: file 'b/../sub/a.jpg' is listed again (first at line 3)"
    ]


def test_check_and_pack_refuse_one_image_listed_under_two_spellings(tmp_path: Path, capsys):
    from datakit.cli import main

    for name in ("a", "b"):
        jpeg(tmp_path / "img" / f"{name}.jpg")
    xlsx = book(tmp_path / "l.xlsx", {"train": [["file", "label"], [".\\a.jpg", "cat"], ["b.jpg", "dog"],
                                                ["a.jpg", "dog"]]})  # fmt: skip
    want = f"{xlsx}, sheet 'train', row 4: file 'a.jpg' is listed again (first at sheet 'train', row 2)"
    capsys.readouterr()
    assert main(["check", str(tmp_path / "img"), "--labels", str(xlsx), "--workers", "1"]) == 1
    assert capsys.readouterr().err.splitlines() == [want]
    assert main(["pack-lmdb", str(tmp_path / "img"), str(tmp_path / "out.lmdb"), "--labels", str(xlsx), "-q"]) == 1
    assert capsys.readouterr().err == f"datakit pack-lmdb: error: {want}\n"
    assert not (tmp_path / "out.lmdb").exists()


def test_an_image_in_two_sheets_is_refused_whichever_split_is_asked_for(tmp_path: Path, capsys):
    # The attack: 0.jpg is 'a' in train and 'b' in val. Only the whole workbook found it; --split val, --split
    # train, pack-lmdb --split and open_dataset(split=) read the other sheet for its labels alone and took it.
    from datakit.cli import main

    for i in range(6):
        jpeg(tmp_path / "img" / f"{i}.jpg")
    train = [["文件名", "标签"], *([f"{i}.jpg", lab] for i, lab in enumerate("aabbc"))]
    val = [["文件名", "标签"], ["0.jpg", "b"], ["5.jpg", "c"]]
    path = book(tmp_path / "l.xlsx", {"train": train, "val": val})
    want = f"{path}, sheet 'val', row 2: file '0.jpg' is listed again (first at sheet 'train', row 2)"
    for how in ({}, {"split": "train"}, {"split": "val"}, {"sheets": "val"}, {"sheets": ["train"]}):
        with pytest.raises(LabelError) as e:
            read_labels(path, **how)
        assert str(e.value) == want
        assert read_labels(path, validate=False, **how).problems() == [want]
    val_only = read_labels(path, split="val", validate=False)
    assert val_only.files.tolist() == ["0.jpg", "5.jpg"] and val_only.class_map().classes == ("a", "b", "c")
    with pytest.raises(LabelError) as e:
        open_dataset(tmp_path / "img", labels=path, split="val")
    assert str(e.value) == want
    capsys.readouterr()
    for split in ("val", "train"):
        args = ["check", str(tmp_path / "img"), "--labels", str(path), "--split", split, "--workers", "1", "-q"]
        assert main(args) == 1
        lacks = ["split 'val' has no samples of class 'a'"] if split == "val" else []  # the split's own check
        assert capsys.readouterr().err.splitlines() == [want, *lacks]
    out = tmp_path / "val.lmdb"
    assert main(["pack-lmdb", str(tmp_path / "img"), str(out), "--labels", str(path), "--split", "val", "-q"]) == 1
    assert capsys.readouterr().err == f"datakit pack-lmdb: error: {want}\n"
    assert not out.exists()


def test_an_image_in_two_splits_of_a_split_column_is_refused_for_either(tmp_path: Path):
    path = tmp_path / "labels.csv"
    rows = ["a.jpg,cat,train", "b.jpg,dog,train", "a.jpg,dog,val", "c.jpg,cat,val", "a.jpg,cat,val", "c.jpg,cat,val"]
    path.write_text("file,label,split\n" + "".join(f"{r}\n" for r in rows), encoding="utf-8")
    across = [
        f"{path}, line 4: file 'a.jpg' is listed again (first at line 2)",
        f"{path}, line 6: file 'a.jpg' is listed again (first at line 2)",
    ]
    within_val = f"{path}, line 7: file 'c.jpg' is listed again (first at line 5)"
    assert read_labels(path, validate=False).problems() == [*across, within_val]
    assert read_labels(path, split="val", validate=False).problems() == [*across, within_val]
    train = read_labels(path, split="train", validate=False)
    assert train.files.tolist() == ["a.jpg", "b.jpg"] and train.problems() == across
    with pytest.raises(LabelError) as e:
        read_labels(path, split="train")
    assert str(e.value) == "\n".join([f"{path}: 2 problems:", *(f"  {p}" for p in across)])
    # a selected split's own rows, selected again, are checked on their own (what TableDataset does)
    assert train.select("train").problems() == []


NFC, NFD = "caf\xe9", "cafe\u0301"


@pytest.mark.parametrize("fmt", FORMATS)
def test_labels_in_two_unicode_forms_are_refused(tmp_path: Path, fmt: str):
    # The attack: 'café' typed on Windows (NFC) and pasted from macOS (NFD) became two classes, check said nothing.
    path = write_table(tmp_path, fmt, [("0.jpg", NFC), ("1.jpg", "dog"), ("2.jpg", NFD), ("3.jpg", NFC)])
    short = lambda r: where(path, fmt, r).split(", ", 1)[1]  # noqa: E731
    want = (
        f"{path}: labels 'caf\xe9' (NFC: 'caf\\xe9') first at {short(0)} and 'cafe\u0301' (NFD: 'cafe\\u0301') "
        f"first at {short(2)} are one name in two Unicode forms and would be two classes; write them in one form"
    )
    assert read_labels(path, validate=False).problems() == [want]
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == want


def test_labels_in_two_unicode_forms_in_two_sheets_are_refused_for_either_split(tmp_path: Path, capsys):
    from datakit.cli import main

    for i in range(4):
        jpeg(tmp_path / "img" / f"{i}.jpg")
    train = [["file", "label"], ["0.jpg", "dog"], ["1.jpg", NFC]]
    val = [["file", "label"], ["2.jpg", "dog"], ["3.jpg", NFD]]
    path = book(tmp_path / "l.xlsx", {"train": train, "val": val})
    want = (
        f"{path}: labels 'caf\xe9' (NFC: 'caf\\xe9') first at sheet 'train', row 3 and 'cafe\u0301' "
        "(NFD: 'cafe\\u0301') first at sheet 'val', row 3 are one name in two Unicode forms and would be two "
        "classes; write them in one form"
    )
    for split in (None, "train", "val"):
        with pytest.raises(LabelError) as e:
            read_labels(path, split=split)
        assert str(e.value) == want
    capsys.readouterr()
    assert main(["check", str(tmp_path / "img"), "--labels", str(path), "--split", "train", "--workers", "1"]) == 1
    assert want in capsys.readouterr().err.splitlines()


def test_labels_differing_in_case_are_classes_with_a_note(tmp_path: Path, caplog):
    path = tmp_path / "labels.csv"
    rows = [("0.jpg", "bird"), ("1.jpg", "cat"), ("2.jpg", "Bird"), ("3.jpg", "BIRD"), ("4.jpg", "Cat")]
    path.write_text("file,label\n" + "".join(f"{f},{lab}\n" for f, lab in rows), encoding="utf-8")
    with caplog.at_level("WARNING", logger="datakit"):
        t = read_labels(path)
    notes = [
        f"{path}: labels 'bird' (first at line 2), 'Bird' (first at line 4) and 'BIRD' (first at line 5) differ "
        "only in letter case: they are 3 classes",
        f"{path}: labels 'cat' (first at line 3) and 'Cat' (first at line 6) differ only in letter case: they are "
        "2 classes",
    ]
    assert t.notes == notes and caplog.messages == notes and t.problems() == []
    assert t.class_map().classes == ("BIRD", "Bird", "Cat", "bird", "cat")


# look-alike labels: one name typed with an invisible character, a full-width letter or an odd space

LOOK_ALIKE_FORMATS = ["xlsx", "csv", "gbk-csv"]
LOOK_ALIKES = [  # (label, its look-alike, the characters the message names)
    ("猫", "猫\u200b", "U+200B ZERO WIDTH SPACE"),
    ("猫", "\ufeff猫", "U+FEFF ZERO WIDTH NO-BREAK SPACE"),
    ("猫", "猫\u2060", "U+2060 WORD JOINER"),
    (
        "cat",
        "ｃａｔ",
        "U+FF43 FULLWIDTH LATIN SMALL LETTER C, U+FF41 FULLWIDTH LATIN SMALL LETTER A, "
        "U+FF54 FULLWIDTH LATIN SMALL LETTER T",
    ),
    ("black cat", "black\u3000cat", "U+3000 IDEOGRAPHIC SPACE"),
    ("black cat", "black\u00a0cat", "U+00A0 NO-BREAK SPACE"),
    ("black cat", "black  cat", ""),  # two spaces: the message shows them
    ("猫咪", "猫咪\u00a0\u200c", "U+00A0 NO-BREAK SPACE, U+200C ZERO WIDTH NON-JOINER"),
]


def write_look_alike_table(tmp_path: Path, fmt: str, rows: list[tuple[str, str]]) -> Path:
    """``rows`` as a workbook written by openpyxl, a UTF-8 CSV or a GBK CSV (as Excel saves one in China)."""
    if fmt == "xlsx":
        return write_table(tmp_path, "xlsx", rows)
    path = tmp_path / "labels.csv"
    text = "文件名,标签\n" + "".join(f"{f},{lab}\n" for f, lab in rows)
    path.write_bytes(text.encode("gbk" if fmt == "gbk-csv" else "utf-8"))
    return path


@pytest.mark.parametrize("fmt", LOOK_ALIKE_FORMATS)
@pytest.mark.parametrize(("label", "twin", "chars"), LOOK_ALIKES)
def test_look_alike_labels_are_refused(tmp_path: Path, fmt: str, label: str, twin: str, chars: str):
    # The attack: '猫' in most rows and '猫\u200b' (a zero-width space), 'ｃａｔ' beside 'cat', a no-break or
    # full-width space inside a name in some: two classes, every class index after them shifted, check said nothing.
    rows = [("图片/猫咪_0.jpg", label), ("图片/狗_1.jpg", "狗"), ("图片/猫咪_2.jpg", twin), ("图片/猫咪_3.jpg", label)]
    if fmt == "gbk-csv" and not all(encodable(lab, "gbk") for _, lab in rows):
        pytest.skip("GBK has no such character")
    path = write_look_alike_table(tmp_path, fmt, rows)
    t = read_labels(path, validate=False)
    assert t.labels.tolist() == [label, "狗", twin, label]  # never changed: reported, not silently merged
    assert t.encoding == ("gbk" if fmt == "gbk-csv" else None if fmt == "xlsx" else "utf-8")
    first = "sheet 'train', row 2" if fmt == "xlsx" else "line 2"
    again = "sheet 'train', row 4" if fmt == "xlsx" else "line 4"
    named = f"{twin!r} ({chars})" if chars else repr(twin)
    want = (
        f"{path}: labels {label!r} first at {first} and {named} first at {again} differ only in invisible "
        "characters, spaces, character width or look-alike letters and marks and would be two classes; write them alike"
    )
    assert t.problems() == [want] and t.notes == []
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == want


def test_three_look_alikes_are_one_problem_and_a_split_read_alone_is_refused_too(tmp_path: Path):
    train = [["文件名", "标签"], ["0.jpg", "猫"], ["1.jpg", "狗"], ["2.jpg", "猫\u200b"]]
    val = [["文件名", "标签"], ["3.jpg", "狗"], ["4.jpg", "猫\u3000"], ["5.jpg", "猫\u2060"]]
    path = book(tmp_path / "l.xlsx", {"train": train, "val": val})
    want = (
        f"{path}: labels '猫' first at sheet 'train', row 2, '猫\\u200b' (U+200B ZERO WIDTH SPACE) first at sheet "
        "'train', row 4 and '猫\\u2060' (U+2060 WORD JOINER) first at sheet 'val', row 4 differ only in invisible "
        "characters, spaces, character width or look-alike letters and marks and would be 3 classes; write them alike"
    )
    for split in (None, "train", "val"):  # the class map is the whole workbook's: either split is refused
        assert read_labels(path, split=split, validate=False).problems() == [want]
        with pytest.raises(LabelError) as e:
            read_labels(path, split=split)
        assert str(e.value) == want


@pytest.mark.parametrize("fmt", LOOK_ALIKE_FORMATS)
def test_ordinary_labels_are_not_look_alikes(tmp_path: Path, fmt: str):
    # Chinese names that share characters, names with and without a space, names apart in one letter, a trailing
    # no-break or full-width space (stripped from the cell, as any stray space is): no problem, no note
    names = ["猫", "猫咪", "小猫", "狗", "狗狗", "golden retriever", "goldenretriever", "cafe", "café", "太空", "猫\u3000",
             "cat", "cat\u00a0", "cat\u3000", "c4t", "ca t", "1号", "一号"]  # fmt: skip
    if fmt == "gbk-csv":
        names = [n for n in names if encodable(n, "gbk")]
    rows = [(f"图片/{k}.jpg", n) for k, n in enumerate(names)]
    path = write_look_alike_table(tmp_path, fmt, rows)
    t = read_labels(path)
    assert t.problems() == [] and t.notes == []
    assert set(t.class_map().classes) == {n.strip() for n in names}
    ints = write_look_alike_table(tmp_path, fmt, [(f"图片/{k}.jpg", str(k % 10)) for k in range(30)])
    t = read_labels(ints)
    assert t.problems() == [] and t.notes == [] and t.class_map().classes == tuple(map(str, range(10)))


def test_labels_apart_in_case_stay_a_note_and_their_look_alikes_a_problem(tmp_path: Path):
    # 'Cat' and 'cat' may be two classes on purpose (a dataset of letters has 'a' and 'A'): a note, as before;
    # 'ｃａｔ' is never meant as a class of its own: a problem, and named once, not again in the note
    path = tmp_path / "labels.csv"
    rows = [("0.jpg", "cat"), ("1.jpg", "Cat"), ("2.jpg", "ｃａｔ"), ("3.jpg", "dog"), ("4.jpg", "ＤＯＧ")]
    path.write_text("file,label\n" + "".join(f"{f},{lab}\n" for f, lab in rows), encoding="utf-8")
    t = read_labels(path, validate=False)
    assert t.problems() == [
        f"{path}: labels 'cat' first at line 2 and 'ｃａｔ' (U+FF43 FULLWIDTH LATIN SMALL LETTER C, U+FF41 FULLWIDTH "
        "LATIN SMALL LETTER A, U+FF54 FULLWIDTH LATIN SMALL LETTER T) first at line 4 differ only in invisible "
        "characters, spaces, character width or look-alike letters and marks and would be two classes; write them alike"
    ]
    assert t.notes == [
        f"{path}: labels 'cat' (first at line 2) and 'Cat' (first at line 3) differ only in letter case: they are "
        "2 classes",
        f"{path}: labels 'dog' (first at line 5) and 'ＤＯＧ' (first at line 6) differ only in letter case and in "
        "invisible characters, spaces, character width or look-alike letters and marks: they are 2 classes",
    ]


@pytest.mark.parametrize(
    ("plain", "drawn", "named"),
    [
        ("men's", "men’s", "U+2019 RIGHT SINGLE QUOTATION MARK"),  # Word's and macOS's apostrophe
        ("t-shirt", "t‑shirt", "U+2011 NON-BREAKING HYPHEN"),
        ("t-shirt", "t–shirt", "U+2013 EN DASH"),
        ("cat", "сat", "U+0441 CYRILLIC SMALL LETTER ES"),
        ("кот", "кoт", "U+006F LATIN SMALL LETTER O"),  # a Latin letter typed into a Cyrillic word
        ("Ауди A4", "Ауди А4", "U+0410 CYRILLIC CAPITAL LETTER A"),
        ("TOP", "ТОP", "U+0422 CYRILLIC CAPITAL LETTER TE, U+041E CYRILLIC CAPITAL LETTER O"),
        ("Молоко Milk", "Молoко Milk", "U+006F LATIN SMALL LETTER O"),  # word by word, whatever the other words
        ("B-cell", "Β-cell", "U+0392 GREEK CAPITAL LETTER BETA"),
        ('say "hi"', "say “hi”", "U+201C LEFT DOUBLE QUOTATION MARK, U+201D RIGHT DOUBLE QUOTATION MARK"),
    ],
)
def test_labels_drawn_alike_are_refused(tmp_path: Path, plain, drawn, named):
    # The attack: men's and men’s, t-shirt and t‑shirt, cat and сat (a Cyrillic с) were 6 classes, without a word
    path = tmp_path / "labels.csv"
    quoted = '"' + plain.replace('"', '""') + '"'  # a CSV field with quotes in it
    path.write_text(f"file,label\na.jpg,{quoted}\nb.jpg,{drawn}\nc.jpg,кот\n", encoding="utf-8")
    t = read_labels(path, validate=False)
    assert t.problems() == [
        f"{path}: labels {plain!r} first at line 2 and {drawn!r} ({named}) first at line 3 differ only in invisible "
        "characters, spaces, character width or look-alike letters and marks and would be two classes; write them alike"
    ]
    with pytest.raises(UsageError) as e:
        open_dataset(tmp_path, classes=[plain, drawn])
    assert str(e.value) == (
        f"classes=: classes 0 {plain!r} and 1 {drawn!r} ({named}) differ only in invisible "
        "characters, spaces, character width or look-alike letters and marks; write them alike"
    )


def test_words_of_cyrillic_or_greek_letters_alone_are_their_own_labels(tmp_path: Path):
    # whole words of another alphabet are other labels: кот, сова, Ζώο beside cat, cob, Zwo
    path = tmp_path / "labels.csv"
    path.write_text("file,label\na.jpg,кот\nb.jpg,cat\nc.jpg,сова\nd.jpg,cob\ne.jpg,Ζώο\nf.jpg,Zwo\n", encoding="utf-8")
    t = read_labels(path, validate=False)
    assert t.problems() == [] and t.notes == []
    assert t.class_map().classes == ("Zwo", "cat", "cob", "Ζώο", "кот", "сова")


# ---------------------------------------------------------------------------------------------
# the committed samples and the table-alone path


def test_samples_workbook():
    root = Path(__file__).resolve().parents[1] / "samples"
    t = read_labels(root / "labels.xlsx")
    assert t.split_names == ["train", "val", "test"] and len(t) == 24
    assert [len(t.select(s)) for s in ("train", "val", "test")] == [18, 3, 3]
    assert t.class_map().classes == ("cat", "coffee", "太空")


def test_samples_csv_alone_as_documented(samples: Path):
    ds = open_dataset(samples / "labels.csv")  # the docs' "a table alone"
    assert len(ds) == 24 and ds.classes == ["cat", "coffee", "太空"]
    img, target = ds[0]
    assert img.ndim == 3 and target == 0
    assert ds.name(0) == str(samples / "images" / "cat" / "猫_01.jpg")
    assert len(open_dataset(samples / "labels.csv", split="val")) == 3


def test_table_alone_with_wrong_root_says_where(samples: Path):
    with pytest.raises(LabelError) as e:
        open_dataset(samples / "labels.xlsx")  # its names are relative to samples/images
    assert str(e.value) == (
        f"{samples / 'labels.xlsx'}: none of the files the table names (8 looked for, first 'cat/猫_01.jpg') is under "
        f"{samples}; names are relative to the table's folder, or to the folder given with it; they are under "
        f"{samples / 'images'}: give that folder (open_dataset({str(samples / 'images')!r}, labels=TABLE), or "
        f"root={str(samples / 'images')!r} with the table alone; CLI: {samples / 'images'} --labels TABLE)"
    )
    assert len(open_dataset(samples / "labels.xlsx", root=samples / "images")) == 24


def test_resolve_path():
    assert resolve_path("a\\b.jpg", "/root") == "/root/a/b.jpg"
    assert resolve_path("/abs/x.jpg", "/root") == "/abs/x.jpg"
    assert resolve_path("D:\\data\\x.jpg", "/root") == "D:/data/x.jpg"


def test_class_map_roundtrip(tmp_path: Path):
    cm = ClassMap.from_labels([5, 7, 9], remap=True)
    cm.save(tmp_path / "classes.json")
    assert ClassMap.load(tmp_path / "classes.json") == cm
    assert ClassMap.from_labels(["b", "a", "b"]).encode(["a", "b"]).tolist() == [0, 1]
    with pytest.raises(LabelError, match=r"labels: integer labels are \{0, 1, 2, 10\}, not 0..3"):
        ClassMap.from_labels(["10", "2", 0, 1.0])


@pytest.mark.parametrize("labels", [("cat", "dog"), ("1", "0")])
@pytest.mark.parametrize("split", [False, True])
def test_rows_left_empty_name_no_class_and_no_split(tmp_path: Path, labels, split):
    # Excel saves an empty row of a 2-column sheet as "," (",," with a split column)
    (tmp_path / "img").mkdir()
    for name in ("a.jpg", "b.jpg"):
        imwrite(tmp_path / "img" / name, synthetic_image(8, 8), mode="rgb")
    head, empty = ("file,label,split\n", ",,\n") if split else ("file,label\n", ",\n")
    end = ",train" if split else ""
    text = head + f"a.jpg,{labels[0]}{end}\n" + empty + " , \n" + f"b.jpg,{labels[1]}{end}\n" + empty
    (tmp_path / "t.csv").write_text(text, encoding="utf-8")
    table = read_labels(tmp_path / "t.csv")
    assert table.problems() == [] and table.split_names == (["train"] if split else [])
    ds = open_dataset(tmp_path / "img", labels=tmp_path / "t.csv")
    assert ds.classes == sorted(labels) and [ds.classes[t] for t in ds.targets] == list(labels)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16"])
def test_a_tab_separated_csv_is_read_as_such(tmp_path: Path, encoding):
    # what Excel's "Unicode text" gives (UTF-16 with BOM, tabs), saved under a .csv name
    (tmp_path / "img").mkdir()
    for name in ("图1.jpg", "图2.jpg"):
        imwrite(tmp_path / "img" / name, synthetic_image(8, 8), mode="rgb")
    (tmp_path / "t.csv").write_text("文件名\t标签\n图1.jpg\t猫\n图2.jpg\t狗\n", encoding=encoding)
    ds = open_dataset(tmp_path / "img", labels=tmp_path / "t.csv")
    assert ds.classes == ["狗", "猫"] and [ds.classes[t] for t in ds.targets] == ["猫", "狗"]


def test_a_notes_sheet_explaining_the_columns_is_not_a_split(tmp_path: Path):
    # The attack: a 说明 sheet documenting the columns has a row starting with 文件名, so it was read as a split:
    # its description '类别: cat 或 dog' became a third class of every split.
    wb = Workbook()
    ws = wb.active
    ws.title = "说明"
    for row in (("字段", "含义"), ("文件名", "图片相对 images/ 的路径"), ("标签", "类别: cat 或 dog")):
        ws.append(row)
    for name, rows in (("train", [("0.png", "cat"), ("1.png", "dog")]), ("val", [("2.png", "cat")])):
        ws = wb.create_sheet(name)
        ws.append(["文件名", "标签"])
        for r in rows:
            ws.append(r)
    path = tmp_path / "l.xlsx"
    wb.save(path)
    t = read_labels(path, validate=False)
    assert t.files.tolist() == ["0.png", "1.png", "2.png"] and t.split_names == ["train", "val"]
    assert t.class_map().classes == ("cat", "dog")
    assert t.notes == [f"{path}: sheet '说明' skipped (no row names an image file, as the other sheets' rows do: "
                       "notes?)"]  # fmt: skip
    assert read_labels(path, split="train", validate=False).class_map().classes == ("cat", "dog")


def test_a_name_that_climbs_out_of_the_folder_and_back_in_is_the_same_file(tmp_path: Path, capsys):
    # The attack: '../img/a.jpg' under the folder img is img/a.jpg. Its text differs from 'a.jpg', so the table's own
    # check took them for two files: one image trained as cat and as dog, and `check` said 0 problems.
    from datakit.cli import main

    for name in ("a", "b"):
        jpeg(tmp_path / "img" / f"{name}.jpg")
    path = tmp_path / "l.txt"
    path.write_text("a.jpg cat\nb.jpg dog\n../img/a.jpg dog\n", encoding="utf-8")
    want = (f"{path}, line 3: file '../img/a.jpg' is listed again (first at line 1 as 'a.jpg': both name "
            f"{tmp_path / 'img' / 'a.jpg'})")  # fmt: skip
    with pytest.raises(LabelError) as e:
        open_dataset(tmp_path / "img", labels=path)
    assert str(e.value) == want
    capsys.readouterr()
    assert main(["check", str(tmp_path / "img"), "--labels", str(path), "--workers", "1"]) == 1
    assert capsys.readouterr().err.splitlines() == [want]
    # climbing out to another folder names another file: no problem there
    jpeg(tmp_path / "other" / "a.jpg")
    path.write_text("a.jpg cat\nb.jpg dog\n../other/a.jpg dog\n", encoding="utf-8")
    assert open_dataset(tmp_path / "img", labels=path).targets.tolist() == [0, 1, 1]


def test_split_names_a_split_column_value_when_the_sheets_named_like_splits_carry_one(tmp_path: Path):
    # The attack: sheets 'train' and 'val' each with a split column; split='train' read the sheet 'train' alone and
    # dropped d.jpg (the val sheet's row whose split is train) without a word, where the same rows as a CSV give
    # a.jpg and d.jpg. A sheet with a split column is no split of its own.
    make_images(tmp_path / "img", ["a.jpg", "b.jpg", "c.jpg", "d.jpg"])
    head = ["file", "label", "split"]
    xlsx = book(tmp_path / "l.xlsx", {"train": [head, ["a.jpg", "cat", "train"], ["b.jpg", "dog", "val"]],
                                      "val": [head, ["c.jpg", "cat", "val"], ["d.jpg", "dog", "train"]]})  # fmt: skip
    csv = tmp_path / "l.csv"
    csv.write_text("file,label,split\na.jpg,cat,train\nb.jpg,dog,val\nc.jpg,cat,val\nd.jpg,dog,train\n",
                   encoding="utf-8")  # fmt: skip
    for path in (xlsx, csv):
        for split, files in (("train", ["a.jpg", "d.jpg"]), ("val", ["b.jpg", "c.jpg"])):
            ds = open_dataset(tmp_path / "img", labels=path, split=split)
            assert [Path(ds.name(i)).name for i in range(len(ds))] == files, (path.name, split)
            assert ds.classes == ["cat", "dog"]


def test_a_full_width_digit_is_a_look_alike_of_the_digit_not_the_same_class(tmp_path: Path):
    # The attack: '1' and '１' (full-width) in one integer table were one class 1 without a word: int() reads any
    # Unicode digit. The docs call full-width digits look-alikes, refused.
    path = tmp_path / "l.csv"
    path.write_text("file,label\na.jpg,1\nb.jpg,１\nc.jpg,2\n", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value).splitlines()[1] == (
        f"  {path}: labels '1' first at line 2 and '１' (U+FF11 FULLWIDTH DIGIT ONE) first at line 3 differ only in "
        "invisible characters, spaces, character width or look-alike letters and marks and would be two classes; write them alike"
    )


@pytest.mark.parametrize("encoding", ["utf-8", "gbk"])
def test_a_list_whose_lines_end_in_cr_alone_reads_as_its_lf_twin(tmp_path: Path, encoding: str):
    # The attack: a `path label` list saved with classic Mac line endings (CR alone) was read as one line: "none of
    # 1 files the table names (first 'a.jpg cat\rb.jpg dog\r...')". The CSV reader took them; the list reader now too.
    lines = ["猫/a.jpg cat", "狗/b.jpg dog", "猫/c.jpg cat", "bad-line-without-label"]
    lf, cr = tmp_path / "lf.txt", tmp_path / "cr.txt"
    lf.write_bytes("".join(f"{x}\n" for x in lines).encode(encoding))
    cr.write_bytes("".join(f"{x}\r" for x in lines).encode(encoding))
    want = LabelError
    with pytest.raises(want) as a:
        read_labels(lf)
    with pytest.raises(want) as b:
        read_labels(cr)
    assert str(b.value) == str(a.value).replace(str(lf), str(cr)) and "line 4" in str(b.value)
    for path in (lf, cr):
        path.write_bytes(path.read_bytes().replace("bad-line-without-label".encode(encoding), b""))
    a, b = read_labels(lf), read_labels(cr)
    assert b.files.tolist() == a.files.tolist() == ["猫/a.jpg", "狗/b.jpg", "猫/c.jpg"]
    assert b.targets(b.class_map()).tolist() == a.targets(a.class_map()).tolist() == [0, 1, 0]


def test_one_number_written_two_ways_is_refused_as_a_text_table_and_a_workbook_would_differ(tmp_path: Path):
    # The attack: '1.5' and '1.50' in a CSV were two classes; the same table saved as .xlsx (number cells) gave one,
    # so the class indices of the same labels depended on the file format.
    path = tmp_path / "l.csv"
    path.write_text("file,label\na.jpg,1.5\nb.jpg,1.50\nc.jpg,2.5\n", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == (f"{path}: labels '1.5' first at line 2 and '1.50' first at line 3 are one number written "
                            "two ways and would be two classes (a workbook's number cells read them as one); write "
                            "them alike")  # fmt: skip
    path.write_text("file,label\na.jpg,1.5\nb.jpg,1.5\nc.jpg,2.5\n", encoding="utf-8")
    xlsx = book(tmp_path / "l.xlsx", {"train": [["file", "label"], ["a.jpg", 1.5], ["b.jpg", 1.50], ["c.jpg", 2.5]]})
    a, b = read_labels(path), read_labels(xlsx)
    assert a.class_map().classes == b.class_map().classes == ("1.5", "2.5")
    assert a.targets(a.class_map()).tolist() == b.targets(b.class_map()).tolist() == [0, 0, 1]
    # the attack: 0.1 + 0.2 and 0.3 saved by pandas: '0.30000000000000004' and '0.3', four classes from the CSV and
    # three from the workbook (which shows and reads 15 digits): refused in the CSV as well
    path.write_text("file,label\na.jpg,0.1\nb.jpg,0.2\nc.jpg,0.30000000000000004\nd.jpg,0.3\n", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == (f"{path}: labels '0.30000000000000004' first at line 4 and '0.3' first at line 5 are the "
                            "same number to the 15 significant digits a workbook keeps and would be two classes (a "
                            "workbook's number cells read them as one); write them alike")  # fmt: skip
    xlsx = book(tmp_path / "f.xlsx", {"train": [["file", "label"], ["a.jpg", 0.1], ["b.jpg", 0.2], ["c.jpg", 0.1 + 0.2],
                                                ["d.jpg", 0.3]]})  # fmt: skip
    assert read_labels(xlsx).class_map().classes == ("0.1", "0.2", "0.3")


def test_integer_labels_past_2_to_the_53_in_number_cells_are_not_merged(tmp_path: Path):
    # the attack: labels 9007199254740993 and 9007199254740992 in number cells: calamine reads doubles, so both
    # came out 9007199254740992, one class (the same labels as CSV: two), silently with remap_labels=True
    from openpyxl import Workbook

    wb = Workbook()
    ws = wb.active
    ws.title = "train"
    ws.append(["file", "label"])
    for i, lab in enumerate([111, 222, 111, 222]):
        ws.append([f"{i}.jpg", lab])
    wb.save(tmp_path / "small.xlsx")
    path = tmp_path / "big.xlsx"  # the numbers put in the sheet's XML by hand: openpyxl writes them as doubles
    with zipfile.ZipFile(tmp_path / "small.xlsx") as src, zipfile.ZipFile(path, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "xl/worksheets/sheet1.xml":
                data = data.replace(b"<v>111</v>", b"<v>9007199254740993</v>").replace(
                    b"<v>222</v>", b"<v>9007199254740992</v>"
                )
            dst.writestr(item, data)
    with pytest.raises(LabelError) as e:
        read_labels(path, remap_labels=True, engine="calamine")
    assert str(e.value).splitlines()[1:3] == [
        f"  {path}, sheet 'train', row 2: label 9007199254740992 is a number cell past 2**53, which this reader gives "
        "as a 64-bit float, no longer exact (two labels could read as one); store the labels as text, or read it in "
        "Python with engine='openpyxl'",
        f"  {path}, sheet 'train', row 3: label 9007199254740992 is a number cell past 2**53, which this reader gives "
        "as a 64-bit float, no longer exact (two labels could read as one); store the labels as text, or read it in "
        "Python with engine='openpyxl'",
    ]
    exact = read_labels(path, remap_labels=True, engine="openpyxl")  # whole numbers read as Python ints: exact
    assert exact.class_values == ("9007199254740993", "9007199254740992")  # as first met: two classes


def test_gbk_labels_that_happen_to_be_valid_utf8_are_not_read_as_cyrillic(tmp_path: Path):
    # the attack: a GBK CSV (Chinese Excel's "CSV") with an ASCII header and labels 学校/小学: their bytes are valid
    # UTF-8 too ("ѧУ", "Сѧ", a run of one script, taken for a word), so the classes came out as Cyrillic and the
    # targets permuted, check saying 0 problems; the same rows as .xlsx gave 学校 and 小学
    rows = "filename,label\nIMG_0001.png,学校\nIMG_0002.png,小学\nIMG_0003.png,学校\n"
    (tmp_path / "gbk.csv").write_bytes(rows.encode("gbk"))
    t = read_labels(tmp_path / "gbk.csv")
    assert t.encoding == "gbk" and t.class_values == ("学校", "小学")
    # a capital standing alone before a GB2312 character (zones, groups: A区, B栋) is Chinese, not letters glued
    # together: the UTF-8 reading 'AС, BŮ' (a Cyrillic letter after a Latin one) is no word (before: refused as too
    # close to call; A区 and A栋 were read as Big5 'A⑹' and 'A集' without a word)
    (tmp_path / "close.csv").write_bytes("filename,label\na.png,A小\nb.png,B女\n".encode("gbk"))
    assert read_labels(tmp_path / "close.csv").class_values == ("A小", "B女")
    for labels in (("A区", "B区", "C区"), ("A栋", "B栋", "C栋"), ("A片", "B片", "C片"), ("A组", "B组", "C组")):
        (tmp_path / "zone.csv").write_bytes(
            ("file,label\n" + "".join(f"{k}.png,{v}\n" for k, v in enumerate(labels))).encode("gbk")
        )
        t = read_labels(tmp_path / "zone.csv")
        assert (t.encoding, t.class_values) == ("gbk", labels)
    # Vietnamese in UTF-8 (ơ, ư: Latin Extended-B, as GBK 片 read as UTF-8 'Ƭ' is): words, read as they are
    (tmp_path / "vi.csv").write_text("file,label\n1.png,bơ\n2.png,mơ\n3.png,dưa\n4.png,lê\n", encoding="utf-8")
    assert read_labels(tmp_path / "vi.csv").class_values == ("bơ", "mơ", "dưa", "lê")
    # real words of those scripts, in UTF-8, read as they are
    for words in (("Собака", "кошка"), ("قطة", "كلب"), ("café", "thé")):
        (tmp_path / "u.csv").write_text(f"filename,label\na.png,{words[0]}\nb.png,{words[1]}\n", encoding="utf-8")
        u = read_labels(tmp_path / "u.csv")
        assert u.encoding == "utf-8" and u.class_values == words


def test_excel_unicode_text_with_a_title_row_reads_as_its_table(tmp_path: Path):
    # the attack: Excel's "Unicode Text" (UTF-16, tab-separated) of a sheet with a title row above the header: the
    # first line alone decided, so the file was read as a path-label list, the title and the header two samples
    # and their words two more classes; the same sheet as .xlsx or .csv skipped the title
    text = "2024年 标注结果\r\n文件名\t标签\r\na.png\t猫\r\nb.png\t狗\r\nc.png\t猫\r\n"
    (tmp_path / "u.txt").write_bytes(codecs.BOM_UTF16_LE + text.encode("utf-16-le"))
    t = read_labels(tmp_path / "u.txt")
    assert t.files.tolist() == ["a.png", "b.png", "c.png"] and t.class_values == ("猫", "狗")


def test_a_txt_table_under_ten_or_more_title_lines_reads_as_its_table(tmp_path: Path):
    # the attack: the header was looked for in the first 10 lines only: under 10 note lines the table read as a
    # path-label list, refused line by line ("got 3 fields"), while the same bytes as .tsv read
    notes = [f"说明第{i}行\t\t" for i in range(12)]
    body = "文件名\t标签\t划分\r\na.png\t猫\ttrain\r\nb.png\t狗\tval\r\n"
    for k in (9, 10, 12):
        (tmp_path / "u.txt").write_bytes(("\r\n".join(notes[:k]) + "\r\n" + body).encode("utf-16"))
        t = read_labels(tmp_path / "u.txt")
        assert t.files.tolist() == ["a.png", "b.png"] and t.split_names == ["train", "val"], k


def test_a_space_separated_list_headed_by_a_class_id_column_reads(tmp_path: Path):
    # the attack: 'file class_id' over 'a.png 0' lines was refused as naming no known file column, and
    # --file-column file then said there was no column 'file'; the same header in a CSV reads
    path = tmp_path / "sp.txt"
    for head in ("file class_id", "filename category_id", "image_name cls"):
        path.write_text(f"{head}\na.png 0\nb.png 1\nc.png 1\n", encoding="utf-8")
        t = read_labels(path)
        assert t.files.tolist() == ["a.png", "b.png", "c.png"] and t.labels.tolist() == [0, 1, 1], head
    # a list with a comma in a name far down, beside a word a file column may be called: still a list (the header is
    # looked for above the first line naming an image, so 'img,30.jpg cat' is none)
    lines = [f"p{i}.jpg {'dog' if i % 2 else 'cat'}" for i in range(60)]
    lines[30] = "img,30.jpg cat"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    t = read_labels(path)
    assert len(t.files) == 60 and t.files.tolist()[30] == "img,30.jpg" and t.class_values == ("cat", "dog")
    path.write_text("file 品种\na.png 猫\nb.png 狗\n", encoding="utf-8")  # a label name not known: named by the file's
    with pytest.raises(LabelError, match="'file', '品种' looks like a header"):
        read_labels(path)
    assert read_labels(path, file_column="file").labels.tolist() == ["猫", "狗"]


def test_date_label_cells_read_alike_with_either_engine(tmp_path: Path):
    # the attack: a date cell 2024-01-02 beside a text cell "2024-01-02": calamine (a date) gave one class,
    # openpyxl (a datetime, "2024-01-02 00:00:00") two, without a note
    import datetime

    wb = Workbook()
    ws = wb.active
    ws.title = "train"
    ws.append(["file", "label"])
    ws.append(["a.png", datetime.datetime(2024, 1, 2)])
    ws.append(["b.png", "2024-01-02"])
    ws.append(["c.png", datetime.datetime(2024, 1, 2, 8, 30)])
    wb.save(tmp_path / "d.xlsx")
    for engine in ("calamine", "openpyxl"):
        t = read_labels(tmp_path / "d.xlsx", engine=engine)
        assert t.class_values == ("2024-01-02", "2024-01-02 08:30:00"), engine


# ---------------------------------------------------------------------------------------------
# two columns that both name the class (target beside class, class_id beside class_name)


def _rival_table(tmp_path: Path, fmt: str, header: tuple[str, str, str], rows: list[tuple[str, object, object]],
                 sheets: int = 1) -> Path:  # fmt: skip
    if fmt == "csv":
        path = tmp_path / "labels.csv"
        path.write_text("\n".join(",".join(map(str, r)) for r in [header, *rows]) + "\n", encoding="utf-8")
        return path
    wb = Workbook()
    wb.remove(wb.active)
    per = -(-len(rows) // sheets)
    for k, name in enumerate(["train", "val"][:sheets]):
        ws = wb.create_sheet(name)
        ws.append(list(header))
        for r in rows[k * per : (k + 1) * per]:
            ws.append(list(r))
    path = tmp_path / "labels.xlsx"
    wb.save(path)
    return path


@pytest.mark.parametrize("fmt", ["csv", "xlsx"])
def test_a_target_column_that_numbers_the_classes_otherwise_is_refused(tmp_path: Path, fmt: str):
    # before: the 'class' column was used and 'target' ignored: dog, the table's class 0, became class 2
    path = _rival_table(tmp_path, fmt, ("file", "target", "class"), [("a.jpg", 0, "dog"), ("b.jpg", 1, "cat"),
                                                                     ("c.jpg", 2, "bird")])  # fmt: skip
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == (
        f"{path}: the columns 'class' and 'target' both name the class but number the classes differently (class 0 "
        "is 'bird' by 'class', 'dog' by 'target'); name the one to use with label_column= (--label-column)"
    )
    by_target = read_labels(path, label_column="target")
    assert by_target.targets(by_target.class_map()).tolist() == [0, 1, 2]
    by_class = read_labels(path, label_column="class")
    assert (by_class.targets(by_class.class_map()).tolist(), by_class.class_map().classes) == (
        [2, 1, 0], ("bird", "cat", "dog"))  # fmt: skip


def test_ids_across_sheets_are_compared_as_one_table(tmp_path: Path):
    # each sheet alone numbers its classes in name order; together they do not (b is 2, c is 1)
    rows = [("1.jpg", "a", 0), ("2.jpg", "b", 2), ("3.jpg", "c", 1), ("4.jpg", "a", 0)]
    path = _rival_table(tmp_path, "xlsx", ("file", "class_name", "class_id"), rows, sheets=2)
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == (
        f"{path}: the columns 'class_name' and 'class_id' both name the class but number the classes differently "
        "(class 1 is 'b' by 'class_name', 'c' by 'class_id'); name the one to use with label_column= (--label-column)"
    )


@pytest.mark.parametrize("fmt", ["csv", "xlsx"])
def test_columns_that_do_not_match_one_to_one_are_refused(tmp_path: Path, fmt: str):
    # a fine class and a coarse one: which is meant cannot be told
    rows = [("1.jpg", "cat", "animal"), ("2.jpg", "dog", "animal"), ("3.jpg", "car", "vehicle")]
    path = _rival_table(tmp_path, fmt, ("file", "label", "category"), rows)
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == (
        f"{path}: the columns 'label' and 'category' both name the class but do not match one to one (category "
        "'animal' goes with label 'cat' and 'dog'); name the one to use with label_column= (--label-column)"
    )
    assert read_labels(path, label_column="category").class_map().classes == ("animal", "vehicle")


@pytest.mark.parametrize("fmt", ["csv", "xlsx"])
@pytest.mark.parametrize("ids", [(0, 1, 2), (1, 2, 3), (10, 20, 30)])
def test_ids_that_number_the_classes_as_their_names_do_are_accepted(tmp_path: Path, fmt: str, ids):
    rows = [("a.jpg", "bird", ids[0]), ("b.jpg", "cat", ids[1]), ("c.jpg", "dog", ids[2]), ("d.jpg", "cat", ids[1])]
    path = _rival_table(tmp_path, fmt, ("file", "class_name", "class_id"), rows)
    assert read_labels(path).label_column == "class_name"
    assert targets(path) == ([0, 1, 2, 1], ("bird", "cat", "dog"))


def test_the_same_labels_in_two_columns_are_accepted(tmp_path: Path):
    path = _rival_table(tmp_path, "csv", ("file", "label", "class"), [("a.jpg", 10, 10), ("b.jpg", 2, 2)])
    assert targets(path, remap=True) == ([1, 0], ("2", "10"))  # numeric order in both: no quarrel
    path.write_text("file,label,class\na.jpg,1,1\nb.jpg,0,0\n", encoding="utf-8")
    assert targets(path) == ([1, 0], ("0", "1"))


def test_check_names_the_two_columns(tmp_path: Path, capsys):
    from datakit.cli import main

    root = tmp_path / "imgs"
    root.mkdir()
    for name in ("a.jpg", "b.jpg"):
        imwrite(root / name, synthetic_image(16, 16, seed=ord(name[0])), mode="rgb")
    path = tmp_path / "labels.csv"
    path.write_text("file,class_id,class_name\na.jpg,0,zebra\nb.jpg,1,ant\n", encoding="utf-8")
    assert main(["check", str(root), "--labels", str(path), "--workers", "0"]) == 1
    assert capsys.readouterr().err == (
        f"{path}: the columns 'class_name' and 'class_id' both name the class but number the classes differently "
        "(class 0 is 'ant' by 'class_name', 'zebra' by 'class_id'); name the one to use with label_column= "
        "(--label-column)\n"
    )
    assert main(["check", str(root), "--labels", str(path), "--label-column", "class_id", "--workers", "0"]) == 0


# ---------------------------------------------------------------------------------------------
# path-label lists: '#' lines that name images, labels with a space


def test_a_commented_line_that_names_an_image_is_noted(tmp_path: Path):
    # before: '#1.jpg 1' vanished without a word (a comment by the rule, but a sample by its look)
    path = tmp_path / "train.txt"
    path.write_text("# a comment, no image\na.jpg 0\n#1.jpg 1\n#2.png 0\nb.jpg 1\n./#3.jpg 1\n", encoding="utf-8")
    t = read_labels(path)
    assert t.files.tolist() == ["a.jpg", "b.jpg", "./#3.jpg"]
    assert t.notes == [f"{path}, line 3: '#1.jpg 1' starts with '#' and is skipped as a comment (and 1 more lines "
                       "like it); a file whose name starts with '#' is written './#...'"]  # fmt: skip
    path.write_text("# images.jpg 0 is how a line reads\na.jpg 0\n", encoding="utf-8")  # '# ' is prose
    assert read_labels(path).notes == []


@pytest.mark.parametrize("first", [False, True])
def test_a_label_with_a_space_in_a_list_is_refused(tmp_path: Path, first: bool):
    # before: '1.jpg black cat' was the file '1.jpg black' labelled 'cat', found missing only when read
    lines = ["0.jpg dog", "1.jpg black cat", "2.jpg cat"]
    if first:
        lines = lines[1:2] + lines[:1] + lines[2:]
    path = tmp_path / "train.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == (
        f"{path}, line {1 if first else 2}: '1.jpg black cat' reads as the file '1.jpg black' labelled 'cat': a "
        "label with a space in it? The label is the last field of a 'path label' line; part the fields with a tab, "
        "or write a CSV"
    )
    path.write_text("0.jpg\tdog\n1.jpg\tblack cat\nmy photo.jpg\tcat\n", encoding="utf-8")
    assert targets(path) == ([2, 0, 1], ("black cat", "cat", "dog"))
    path.write_text("my photo.jpg cat\nIMG 001.JPG dog\n", encoding="utf-8")  # spaces in names are no labels
    assert read_labels(path).files.tolist() == ["my photo.jpg", "IMG 001.JPG"]


def test_a_train_val_leak_is_refused_where_a_split_that_lists_it_is_asked_for(tmp_path: Path, capsys):
    # cat/1.png in train and again in val: refused for train, val and the whole table; a third split that does not
    # list it (test) opens, since val and test sharing files (a small dataset), or a VOC-style trainval beside
    # train, is no leak into it
    from datakit.cli import main
    from datakit.io import imwrite
    from datakit.labels import LabelError

    for k in range(4):
        imwrite(tmp_path / f"{k}.png", np.full((4, 4, 3), k, np.uint8))
    (tmp_path / "l.csv").write_text("file,label,split\n0.png,cat,train\n1.png,dog,train\n0.png,cat,val\n"
                                    "2.png,dog,val\n3.png,cat,test\n", encoding="utf-8")  # fmt: skip
    path = book(tmp_path / "l.xlsx", {"train": [["file", "label"], ["0.png", "cat"], ["1.png", "dog"]],
                                      "val": [["file", "label"], ["0.png", "cat"], ["2.png", "dog"]],
                                      "test": [["file", "label"], ["3.png", "cat"]]})  # fmt: skip
    for table, where in ((tmp_path / "l.csv", "line 4"), (path, "sheet 'val', row 2")):
        first = "line 2" if table.suffix == ".csv" else "sheet 'train', row 2"
        for split in ("train", "val", None):
            with pytest.raises(LabelError) as e:
                open_dataset(tmp_path, labels=table, split=split)
            assert str(e.value) == f"{table}, {where}: file '0.png' is listed again (first at {first})"
        assert main(["check", str(tmp_path), "--labels", str(table), "--split", "val", "--workers", "1"]) == 1
        assert f"{table}, {where}: file '0.png' is listed again (first at {first})" in capsys.readouterr().err
        assert len(open_dataset(tmp_path, labels=table, split="test")) == 1


def test_a_split_sheet_whose_labels_cannot_be_read_is_refused_whichever_split_is_asked_for(tmp_path: Path):
    # The attack: sheet 'val' headed 图片地址 | 类别 (a file header not on the list): --split train skipped it without
    # a word, so 兔 was missing from train's classes; --split val --file-column 图片地址 then dropped the train sheet
    # (no such column there): 狗 was 0 in train's pack and 1 in val's.
    path = book(tmp_path / "l.xlsx", {"train": [["文件名", "类别"], ["a.png", "狗"], ["b.png", "猫"]],
                                      "val": [["图片地址", "类别"], ["c.png", "兔"], ["d.png", "狗"]]})  # fmt: skip
    val = (f"{path}, sheet 'val', row 1: a label column ('类别', column B) but no file-name column found; the class "
           "map every split shares takes this sheet's labels too: name its file column as the other sheets name "
           "theirs")  # fmt: skip
    for split in (None, "train", "val"):
        with pytest.raises(LabelError) as e:
            read_labels(path, split=split)
        assert str(e.value) == val
    with pytest.raises(LabelError) as e:
        read_labels(path, split="val", file_column="图片地址")
    assert str(e.value) == (f"{path}, sheet 'train', row 1: a label column ('类别', column B) but no file column named "
                            "'图片地址'; the class map every split shares takes this sheet's labels too: name its file "
                            "column as the other sheets name theirs")  # fmt: skip
    # named alike, both splits read, one class map
    path = book(tmp_path / "m.xlsx", {"train": [["文件名", "类别"], ["a.png", "狗"], ["b.png", "猫"]],
                                      "val": [["文件名", "类别"], ["c.png", "兔"], ["d.png", "狗"]]})  # fmt: skip
    for split, targets in (("train", [1, 2]), ("val", [0, 1])):
        t = read_labels(path, split=split)
        assert t.class_map().classes == ("兔", "狗", "猫") and t.targets(t.class_map()).tolist() == targets
    # a notes sheet that explains the columns is no split: skipped with a note, as before
    path = book(tmp_path / "n.xlsx", {"train": [["文件名", "类别"], ["a.png", "狗"]], "说明": [["类别", "the class"]]})
    assert read_labels(path, split="train").files.tolist() == ["a.png"]


def test_a_formula_label_without_a_value_in_another_split_is_refused(tmp_path: Path):
    # The attack: val!B2 is =LOWER("ANT"), written by openpyxl (no saved value): --split train read it as blank and
    # left 'ant' out of the class map (cat=0), which val, once saved in Excel, has as class 0 (cat=1)
    path = book(tmp_path / "l.xlsx", {"train": [["file", "label"], ["a.png", "cat"], ["b.png", "dog"]],
                                      "val": [["file", "label"], ["c.png", '=LOWER("ANT")'], ["d.png", "cat"]]})  # fmt: skip
    for split in (None, "train", "val"):
        with pytest.raises(LabelError) as e:
            read_labels(path, split=split)
        assert str(e.value) == (f"{path}, sheet 'val', row 2: cell B2 holds a formula (=LOWER(\"ANT\")) with no saved "
                                "value; open the file in Excel and save it, so the values are stored")  # fmt: skip


def test_remapping_labels_with_gaps_says_what_a_split_lacking_classes_needs(tmp_path: Path, caplog):
    # The attack: val.txt with labels 2, 3, 5 (train has 1..5) packed with --remap-labels: 2, 3, 5 became 0, 1, 2
    # without a word, so val's 2 took the index train gives 1
    (tmp_path / "val.txt").write_text("c.png 2\nd.png 3\ne.png 5\n", encoding="utf-8")
    (tmp_path / "train.txt").write_text("a.png 1\nb.png 2\n", encoding="utf-8")
    with caplog.at_level("WARNING", logger="datakit"):
        t = read_labels(tmp_path / "val.txt", remap_labels=True)
        assert t.class_map(remap=True).classes == ("2", "3", "5")
        t.class_map(remap=True)  # said once
        read_labels(tmp_path / "train.txt", remap_labels=True).class_map(remap=True)  # 1..2: no gap, nothing said
    assert caplog.messages == [
        f"{tmp_path / 'val.txt'}: integer labels {{2, 3, 5}} remapped to 0..2 in order (remap_labels, --remap-labels), "
        "though they have gaps: if this is a split lacking some classes, it takes the training split's indices only "
        "with classes= (--classes)"
    ]


def _patch_sheet(path: Path, sheet_no: int, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` in the XML of the workbook's sheet ``sheet_no`` (1-based), as Excel would save it."""
    member = f"xl/worksheets/sheet{sheet_no}.xml"
    with zipfile.ZipFile(path) as z:
        items = [(i, z.read(i.filename)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for info, data in items:
            if info.filename == member:
                assert old.encode() in data
                data = data.replace(old.encode(), new.encode())
            z.writestr(info, data)


def test_split_sheets_that_hold_no_labels_to_miss_are_read_around_as_before(tmp_path: Path):
    # The regression round's attacks on the rule that refuses a split's sheet whose labels cannot be read: an
    # unlabelled Kaggle-style test sheet (id | label, label empty), a pivot table named val (类别 | 计数项:文件名), a
    # notes sheet named test explaining 'label', a helper sheet with label formulas, and a formula whose saved
    # value is "" (Excel writes t="str" and an empty <v/>): each refused train before; they hold no labels to miss.
    train = [["file", "label"], ["a.png", "cat"], ["b.png", "dog"]]
    cases = {
        "kaggle": {"train": train, "test": [["id", "label"], ["x1.png", None], ["x2.png", None]]},
        "pivot": {"train": train, "val": [["类别", "计数项:文件名"], ["cat", 1], ["dog", 1]]},
        "notes": {"train": train, "test": [["字段", "含义"], ["label", "the class of the image"]]},
        "helper": {"train": train, "mapping": [["name", "label"], ["cat", '=UPPER("cat")']]},
    }
    for name, sheets in cases.items():
        path = book(tmp_path / f"{name}.xlsx", sheets)
        t = read_labels(path, split="train")
        assert (t.files.tolist(), t.class_map().classes) == (["a.png", "b.png"], ("cat", "dog")), name
    path = book(tmp_path / "empty.xlsx", {"train": [*train, ["c.png", '=IF(A4="","","bird")']]})
    _patch_sheet(path, 1, '<c r="B4"><f>', '<c r="B4" t="str"><f>')  # saved by Excel: a text formula, its value ""
    with pytest.raises(LabelError) as e:  # a value saved, and it is empty: the file has no label, said as such
        read_labels(path)
    assert str(e.value) == f"{path}, sheet 'train', row 4: file 'c.png' has no label"


def test_a_hidden_split_is_left_out_and_the_classes_it_would_add_are_named(tmp_path: Path):
    # The regression round: a hidden old split with a retired class 'bird' made that class part of the map (every
    # index after it moved against the models trained before); it is left out as before, and the note names it
    train = [["file", "label"], ["a.png", "cat"], ["b.png", "dog"]]
    path = book(tmp_path / "l.xlsx", {"train": train, "val_old": [["file", "label"], ["c.png", "bird"]],
                                      "train (2)": train}, hidden=("val_old", "train (2)"))  # fmt: skip
    t = read_labels(path, split="train")
    assert (t.files.tolist(), t.class_map().classes) == (["a.png", "b.png"], ("cat", "dog"))
    assert t.notes == [f"{path}: hidden sheets 'val_old', 'train (2)' not read (include_hidden=True, --include-hidden, "
                       "reads them); read, they would add the class 'bird' and every index after it would move: read "
                       "every split of this workbook with include_hidden or every one without"]  # fmt: skip


def test_a_split_sheets_column_named_like_a_split_column_holding_no_split_leaves_the_sheet_its_split(tmp_path: Path):
    # The attack: sheets train and val, each with a column 数据集 naming the data's source (自采, COCO): without
    # split= the rows were grouped by source, without a word; split="train" said "no split 'train'; the splits are
    # '自采', 'COCO'"
    path = tmp_path / "l.xlsx"
    wb = Workbook()
    wb.remove(wb.active)
    for name, rows in {"train": [("a.jpg", "cat", "自采"), ("b.jpg", "dog", "COCO")],
                       "val": [("c.jpg", "cat", "自采"), ("d.jpg", "dog", "COCO")]}.items():  # fmt: skip
        ws = wb.create_sheet(name)
        ws.append(("file", "label", "数据集"))
        for row in rows:
            ws.append(row)
    wb.save(path)
    t = read_labels(path, validate=False)
    assert t.split_names == ["train", "val"]
    assert t.notes == [f"{path}, sheet {s!r}: column '数据集' holds '自采', 'COCO', no split: its rows are the sheet's "
                       f"split, {s!r} (split_column= reads the column as the split)" for s in ("train", "val")]  # fmt: skip
    assert [str(f) for f in read_labels(path, split="train", validate=False).files] == ["a.jpg", "b.jpg"]
    # named, the column is the split, as asked
    assert read_labels(path, split_column="数据集", validate=False).split_names == ["自采", "COCO"]
    # a column of real splits in a sheet named as one still splits its rows
    wb = Workbook()
    wb.active.title = "train"
    for row in (("file", "label", "split"), ("a.jpg", "cat", "train"), ("b.jpg", "dog", "val")):
        wb.active.append(row)
    wb.save(path)
    assert read_labels(path, validate=False).split_names == ["train", "val"]


def test_a_space_separated_list_saved_as_csv_is_told_to_be_a_txt(tmp_path: Path):
    # The attack: 'a.png 0' lines in a .csv: "no file-name column found ...; name it with file_column=", advice that
    # cannot help
    path = tmp_path / "k.csv"
    path.write_text("a.png 0\nb.png 1\n", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == (f"{path}: its lines are a file name and a label separated by spaces (the first: "
                            "'a.png 0'), where a table's columns are separated by commas or tabs: name the file .txt, "
                            "which is read as such a list (PaddleClas, mmpretrain), or save it with commas between "
                            "the columns")  # fmt: skip
    path.rename(tmp_path / "k.txt")
    assert read_labels(tmp_path / "k.txt", validate=False).class_map().classes == ("0", "1")


def test_a_header_naming_the_columns_the_other_way_round_is_refused(tmp_path: Path):
    # The attack: header 'label,file' over rows 'a.png,cat': the classes were 'a.png' and 'b.png', without a word
    path = tmp_path / "s.csv"
    path.write_text("label,file\na.png,cat\nb.png,dog\n", encoding="utf-8")
    want = (f"{path}: every label is an image's file name ('a.png', first at line 2) and no file name is ('cat'): "
            "the header names the columns the other way round? ('file' is read as the files, 'label' as the labels: "
            "name each column as it holds)")  # fmt: skip
    assert read_labels(path, validate=False).problems() == [want]
    path.write_text("file,label,ref\na.png,b.png,x\nc.png,d.png,y\n", encoding="utf-8")  # files are images too
    assert read_labels(path, validate=False).problems() == []


@pytest.mark.parametrize(("first", "then", "said"), [("utf-8", "gbk", "lines 2-3 read as UTF-8, line 4 not"),
                                                     ("gbk", "utf-8", "lines 2-3 read as GBK, line 4 not")])  # fmt: skip
def test_a_table_of_lines_in_two_encodings_names_the_line_where_the_second_begins(tmp_path: Path, first, then, said):
    # The attack: a UTF-8 CSV with a GBK line appended (or the other way round): "not UTF-8, UTF-16, GBK/GB18030 or
    # Big5 text", no line named
    path = tmp_path / "mix.csv"
    path.write_bytes("file,label\na.jpg,猫\nb.jpg,狗\n".encode(first) + "c.jpg,鸟\n".encode(then))
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == (f"{path}: not UTF-8, UTF-16, GBK/GB18030 or Big5 text ({said}: lines of two encodings?); "
                            "pass encoding= (--encoding) to name it")  # fmt: skip


def test_single_characters_and_words_of_one_alphabet_are_not_look_alikes(tmp_path: Path):
    # The regressions: an OCR or symbol set ('A', Greek 'Α', Cyrillic 'А', '-', '−', "f'", 'f′') was refused as
    # look-alikes, classes= too, with no way out; Кот and кот lost their letter-case note (К read as Latin K)
    path = tmp_path / "labels.csv"
    symbols = ["A", "Α", "А", "-", "−", "f'", "f′", "p", "ρ"]
    path.write_text("file,label\n" + "".join(f"{i}.jpg,{s}\n" for i, s in enumerate(symbols)), encoding="utf-8")
    t = read_labels(path, validate=False)
    assert t.problems() == [] and len(t.class_map().classes) == 9
    from datakit.sources import given_classes

    assert given_classes(symbols) == symbols
    path.write_text("file,label\n0.jpg,Кот\n1.jpg,кот\n2.jpg,ТОР\n3.jpg,тор\n", encoding="utf-8")
    t = read_labels(path, validate=False)
    assert t.problems() == []
    assert t.notes == [
        f"{path}: labels 'Кот' (first at line 2) and 'кот' (first at line 3) differ only in letter case: they are 2 "
        "classes",
        f"{path}: labels 'ТОР' (first at line 4) and 'тор' (first at line 5) differ only in letter case: they are 2 "
        "classes",
    ]


def test_a_label_that_is_another_in_quotes_is_noted(tmp_path: Path):
    # The attack: 'cat' and "cat" beside cat (quotes typed into a cell, or a tool that quoted twice) were three
    # classes, without a word
    path = tmp_path / "q.csv"
    path.write_text('file,label\na.jpg,cat\nb.jpg,\'cat\'\nc.jpg,"""cat"""\nd.jpg,dog\n', encoding="utf-8")
    t = read_labels(path, validate=False)
    assert t.problems() == [] and len(t.class_map().classes) == 4
    why = "they are 2 classes (quotes typed into the cell, or left by a tool that quoted the text twice?)"
    assert t.notes == [
        f"{path}: labels 'cat' at line 2 and \"'cat'\" at line 3 differ only in the quotes around the second: {why}",
        f"{path}: labels 'cat' at line 2 and '\"cat\"' at line 4 differ only in the quotes around the second: {why}",
    ]


def test_an_empty_path_or_name_is_refused_not_read_as_this_folder_or_none(class_folder: Path, tmp_path: Path,
                                                                          monkeypatch):  # fmt: skip
    # the attack: open_dataset(..., classes="") read the current folder's class folders as the class list, and
    # labels="" opened the folder without its table
    table = tmp_path / "l.csv"
    table.write_text("file,label\ncat/图片_0.jpg,cat\ndog/图片_0.jpg,dog\n", encoding="utf-8")
    monkeypatch.chdir(class_folder)
    with pytest.raises(UsageError) as err:
        open_dataset(class_folder, labels=table, classes="")
    assert str(err.value) == ("classes= (--classes): an empty path (''); give the file or folder, or . for the current "
                              "folder (an unset variable?)")  # fmt: skip
    with pytest.raises(UsageError) as err:
        open_dataset(class_folder, labels="")
    assert str(err.value) == ("labels= (--labels): an empty path (''); give the file or folder, or . for the current "
                              "folder (an unset variable?)")  # fmt: skip
    with pytest.raises(UsageError) as err:
        read_labels(table, label_column=" ")
    assert str(err.value) == ("label_column= (--label-column): an empty name (' '); give the column's header, or leave "
                              "it out to find the column by the common names (an unset variable?)")  # fmt: skip
    with pytest.raises(UsageError) as err:
        open_dataset("")
    assert (
        str(err.value)
        == "an empty path (''); give the file or folder, or . for the current folder (an unset variable?)"
    )


def test_an_mxnet_im2rec_list_is_read_as_its_path_and_label(tmp_path: Path):
    # the attack: im2rec's .lst ('index<TAB>label<TAB>path', the label a float) was refused on every line as
    # "expected 'path<TAB>label', got 3 fields", naming neither the format nor a fix
    lst = tmp_path / "train.lst"
    lst.write_text("0\t1.000000\tdog/b.jpg\n1\t0.000000\tcat/a.jpg\n# a comment\n\n2\t0.000000\tcat/c d.jpg\n")
    table = read_labels(lst)
    assert [table.files[i] for i in range(len(table))] == ["dog/b.jpg", "cat/a.jpg", "cat/c d.jpg"]
    assert [table.labels[i] for i in range(len(table))] == [1, 0, 0]
    assert table.rows.tolist() == [1, 2, 5]
    assert table.notes == [f"{lst}: read as MXNet im2rec lines, 'index<TAB>label<TAB>path' (the index left out)"]
    assert table.class_map().classes == ("0", "1")
    odd = tmp_path / "odd.lst"  # one path without an image's suffix: that line named, not every line refused
    odd.write_text("0\t1.000000\tdog/1.jpg\n1\t0.000000\tcat/2\n")
    assert read_labels(odd, validate=False).problems() == [
        f"{odd}: line 2: 'cat/2' names no image file, unlike the rows around it (a total or a note?): its label '0' "
        "would be a class; delete the row"
    ]
    multi = tmp_path / "multi.lst"
    multi.write_text("0\t1.0\t0.0\tdog/b.jpg\n")
    with pytest.raises(LabelError) as err:
        read_labels(multi)
    assert str(err.value) == (f"{multi}, line 1: '0\\t1.0\\t0.0\\tdog/b.jpg': an MXNet im2rec line with 2 labels "
                              "(multi-label); datakit reads one label a sample")  # fmt: skip
    # the regression round: its first line looked for in the first 64 KiB alone, cut there after blank lines
    late = tmp_path / "late.lst"
    late.write_text("\n" * 65530 + "0\t1.000000\tcat/1.jpg\n1\t0.000000\tdog/2.jpg\n")
    table = read_labels(late)
    assert [table.files[i] for i in range(len(table))] == ["cat/1.jpg", "dog/2.jpg"] and table.rows.tolist() == [
        65531, 65532]  # fmt: skip


def test_a_line_refused_whole_leaves_the_integer_range_unjudged(tmp_path: Path):
    # the attack: a list of labels 0 and 1 whose one 0 line was refused (a third field) was also said to hold
    # "integer labels 1..1, not 0..0", with --remap-labels advised; a row refused for a blank label hides no label,
    # and the range is judged beside it as before
    lst = tmp_path / "list.txt"
    lst.write_text("a.png\t0\t# checked\nb.png\t1\n")
    assert read_labels(lst, validate=False).problems() == [
        f"{lst}, line 1: expected 'path<TAB>label', got 3 fields: 'a.png\\t0\\t# checked'"
    ]
    fixed = tmp_path / "fixed.txt"
    fixed.write_text("b.png\t1\n")
    assert (
        read_labels(fixed, validate=False)
        .problems()[0]
        .startswith(f"{fixed}: integer labels are 1..1, not 0..0; passed on as they are")
    )
    blank = tmp_path / "blank.csv"
    blank.write_text("file,label\na.png,\nb.png,1\n")
    assert [p.split(": ", 1)[1][:40] for p in read_labels(blank, validate=False).problems()] == [
        "file 'a.png' has no label",
        "integer labels are 1..1, not 0..0; passe",
    ]


def test_a_line_without_a_label_leaves_the_integer_range_judged(tmp_path: Path):
    # the attack: a 1-based list with one line 'cat/2.png' (no label) said only that; the range problem came after
    # that line was mended, a second round of fixes, though a line without a label hides no label value
    lst = tmp_path / "list.txt"
    lst.write_text("cat/1.png 1\ncat/2.png\ndog/1.png 2\n")
    problems = read_labels(lst, validate=False).problems()
    assert problems[0] == f"{lst}, line 2: 'cat/2.png' has no label (expected 'path label')"
    assert problems[1].startswith(f"{lst}: integer labels are 1..2, not 0..1; passed on as they are")


def _rewrite_sheet(path: Path, out: Path, change) -> Path:
    with zipfile.ZipFile(path) as z:
        files = {n: z.read(n) for n in z.namelist()}
    files["xl/worksheets/sheet1.xml"] = change(files["xl/worksheets/sheet1.xml"].decode()).encode()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as o:
        for n, d in files.items():
            o.writestr(n, d)
    return out


@pytest.mark.parametrize("engine", [None, "openpyxl"])
def test_a_stray_cell_far_from_the_table_is_refused_by_name_not_an_aborted_interpreter(tmp_path: Path, engine):
    # the attack: a 5 KB workbook with one more cell, at XFD1048576: calamine made a grid of every cell up to it
    # (512 GB asked for) and the interpreter aborted (SIGABRT, a Rust backtrace, exit 134); openpyxl would make 17
    # billion cells one by one
    wb = Workbook()
    ws = wb.active
    ws.title = "train"
    ws.append(["文件名", "标签"])
    ws.append(["a.jpg", "猫"])
    wb.save(tmp_path / "base.xlsx")
    far = _rewrite_sheet(
        tmp_path / "base.xlsx",
        tmp_path / "far.xlsx",
        lambda x: x.replace(
            "</sheetData>", '<row r="1048576"><c r="XFD1048576" t="inlineStr"><is><t>x</t></is></c></row></sheetData>'
        ),
    )
    with pytest.raises(LabelError) as e:
        read_labels(far, engine=engine)
    assert str(e.value) == (f"{far}, sheet 'train': its cells reach column XFD and row 1,048,576 (16,384 columns by "
                            "1,048,576 rows, 17,179,869,184 cells), past the 67,108,864 a sheet may hold to be read: a "
                            "stray cell far from the table (one is at XFD1048576)? In Excel, Ctrl+End goes to the "
                            "last; delete the rows and columns past the table, save, or save the sheet as CSV")  # fmt: skip
    # a table of rows with one stray cell far to the right, in its second row: the same grid past what fits
    wide = _rewrite_sheet(
        tmp_path / "base.xlsx",
        tmp_path / "wide.xlsx",
        lambda x: x.replace(
            "</row></sheetData>",
            '<c r="XFD2" t="inlineStr"><is><t>x</t></is></c></row>'
            '<row r="9000"><c r="A9000" t="inlineStr"><is><t>b.jpg</t></is></c></row></sheetData>',
        ),
    )
    with pytest.raises(LabelError, match=r"its cells reach column XFD and row 9,000 \(16,384 columns by 9,000 rows, "
                                         r"147,456,000 cells\).*\(one is at XFD2\)"):  # fmt: skip
        read_labels(wide, engine=engine)
    # far, yet a grid that fits: read, the stray cell's row a problem of its own or nothing
    near = _rewrite_sheet(
        tmp_path / "base.xlsx",
        tmp_path / "near.xlsx",
        lambda x: x.replace(
            "</sheetData>", '<row r="20000"><c r="Z20000" t="inlineStr"><is><t>x</t></is></c></row></sheetData>'
        ),
    )
    assert read_labels(near, engine=engine).files.tolist() == ["a.jpg"]
    # the regression round: an empty row element (a height, a hidden row: no cell) at the sheet's foot counted as
    # a row of the grid, and a 72-column table with ws.row_dimensions[1048576].height set was refused
    wide = Workbook()
    ws = wide.active
    ws.title = "train"
    ws.append(["文件名", "标签"] + [f"c{k}" for k in range(70)])
    ws.append(["a.jpg", "猫"] + list(range(70)))
    ws.row_dimensions[1048576].height = 20
    wide.save(tmp_path / "tall.xlsx")
    assert read_labels(tmp_path / "tall.xlsx", engine=engine).files.tolist() == ["a.jpg"]


def test_blanks_between_a_sheets_rows_are_read_through_once(tmp_path: Path):
    # the attack: megabytes of blanks between two rows (a 400 KB workbook holding 400 MB): each 1 MiB chunk without a
    # '>' was carried into the next read whole, so the pass took time of the square of its size (55 s for 400 MB);
    # a hidden row after them is still found
    wb = Workbook()
    ws = wb.active
    ws.title = "train"
    ws.append(["file", "label"])
    ws.append(["a.jpg", "cat"])
    ws.append(["b.jpg", "dog"])
    ws.row_dimensions[3].hidden = True
    wb.save(tmp_path / "base.xlsx")
    blank = _rewrite_sheet(tmp_path / "base.xlsx", tmp_path / "blank.xlsx",
                           lambda x: x.replace('<row r="3"', " " * (3 << 20) + '<row r="3"', 1))  # fmt: skip
    with pytest.raises(LabelError, match=r"sheet 'train': row 3 is hidden in Excel"):
        read_labels(blank)
    assert read_labels(blank, include_hidden=True).files.tolist() == ["a.jpg", "b.jpg"]


def test_integers_beside_names_are_class_names_when_classes_given_name_them(tmp_path: Path, capsys):
    # the attack: an OCR set (classes 0-9, A, B; a folder reads it as ImageFolder does) had no table that could be
    # read: "labels mix integers and class names", with classes= naming exactly those classes as well
    from datakit.cli import main
    from datakit.datasets import open_dataset
    from datakit.io import imwrite

    classes = ["10", "2", "Dog", "猫"]  # as a folder of them sorts: '10' before '2'
    rows = []
    for k, c in enumerate(classes):
        (tmp_path / "imgs" / c).mkdir(parents=True)
        imwrite(tmp_path / "imgs" / c / "0.png", np.full((4, 4, 3), 40 * k, np.uint8), mode="rgb")
        rows.append(f"{c}/0.png,{c}\n")
    table = tmp_path / "l.csv"
    table.write_text("file,label\n" + "".join(reversed(rows)), encoding="utf-8")
    with pytest.raises(LabelError) as e:
        open_dataset(tmp_path / "imgs", labels=table)
    assert str(e.value).startswith(f"{table}: labels mix integers and class names: 2 rows hold integers")
    for given in (classes, tmp_path / "imgs", open_dataset(tmp_path / "imgs")):
        ds = open_dataset(tmp_path / "imgs", labels=table, classes=given)
        assert ds.classes == classes and ds.targets.tolist() == [3, 2, 1, 0]  # each label looked up by name
        assert [int(ds[i][0][0, 0, 0]) // 40 for i in range(4)] == [3, 2, 1, 0]
    # a label the classes given do not name: refused as before
    with pytest.raises(LabelError) as e:
        open_dataset(tmp_path / "imgs", labels=table, classes=["10", "2", "Dog"])
    assert "labels mix integers and class names" in str(e.value)
    assert main(["check", str(tmp_path / "imgs"), "--labels", str(table), "--classes", str(tmp_path / "imgs"),
                 "-q", "--workers", "0"]) == 0  # fmt: skip
    assert main(["pack-lmdb", str(tmp_path / "imgs"), str(tmp_path / "p.lmdb"), "--labels", str(table),
                 "--classes", str(tmp_path / "imgs"), "--workers", "0", "-q"]) == 0  # fmt: skip
    assert open_dataset(tmp_path / "p.lmdb").targets.tolist() == [3, 2, 1, 0]


@pytest.mark.parametrize("refs", [True, False])
@pytest.mark.parametrize("engine", [None, "openpyxl"])
def test_rows_stored_out_of_order_are_all_read_by_either_engine(tmp_path: Path, engine, refs: bool):
    # the attack: an exporter that writes a sheet's rows out of order (row 4 before rows 2 and 3); openpyxl's
    # streamed reader kept only row 4 and the rows were lost with no word, where calamine read all three
    wb = Workbook()
    ws = wb.active
    ws.title = "train"
    for row in (["文件名", "标签"], ["a.png", "猫"], ["b.png", "狗"], ["c.png", "猫"]):
        ws.append(row)
    wb.save(tmp_path / "base.xlsx")

    def shuffle(xml: str) -> str:
        rows = re.findall(r"<row .*?</row>", xml)
        xml = xml.replace("".join(rows), rows[0] + rows[3] + rows[1] + rows[2])
        # cells may leave out their r= (OOXML allows it): the rows' own numbers alone are out of order then
        return xml if refs else re.sub(r'(<c\b[^>]*?) r="[A-Z]+\d+"', r"\1", xml)

    book = _rewrite_sheet(tmp_path / "base.xlsx", tmp_path / "ooo.xlsx", shuffle)
    table = read_labels(book, engine=engine)
    assert table.files.tolist() == ["a.png", "b.png", "c.png"]
    assert table.rows.tolist() == [2, 3, 4]
    for n in "abc":
        imwrite(tmp_path / f"{n}.png", np.zeros((4, 4, 3), np.uint8))
    ds = open_dataset(tmp_path, labels=book, split="train", engine=engine)
    assert (ds.classes, [ds[i][1] for i in range(len(ds))]) == (["狗", "猫"], [1, 0, 1])


def test_open_dataset_takes_the_table_readers_engine_and_sep_and_refuses_them_without_a_table(tmp_path: Path):
    # engine= went through to the dataset class and failed as a TypeError of ImageDataset.__init__
    imwrite(tmp_path / "a.png", np.zeros((4, 4, 3), np.uint8))
    (tmp_path / "t.txt").write_text("文件名;标签\na.png;猫\n", encoding="utf-8")
    assert open_dataset(tmp_path / "t.txt", sep=";").classes == ["猫"]
    with pytest.raises(UsageError) as e:
        open_dataset(tmp_path, engine="openpyxl")
    assert str(e.value) == (f"engine= is for reading a label table; {tmp_path} is a folder, read without one: give the "
                            "table with labels= (--labels TABLE), or leave it out")  # fmt: skip
