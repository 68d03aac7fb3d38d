from __future__ import annotations

from pathlib import Path

import pytest
from openpyxl import Workbook

from datakit.errors import UsageError
from datakit.labels import ClassMap, LabelError, read_labels, resolve_path


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
    assert t.files == ["00123", "456", "cat\\a.jpg", "dog/b.jpg"]
    assert t.labels == ["猫", "狗", "猫", "狗"]
    assert t.splits == ["训练", "训练", "训练", "验证"]
    assert t.rows == [4, 5, 7, 2]
    assert t.where(2) == f"{tmp_path / '标签.xlsx'}, sheet '训练', row 7"
    assert (t.file_column, t.label_column) == ("文件名", "标签")
    assert t.class_map().classes == ("狗", "猫")  # code point order: 狗 U+72D7 < 猫 U+732B
    assert len(t.select("验证")) == 1
    with pytest.raises(UsageError, match=r"no split 'test'; the splits are '训练', '验证'"):
        t.select("test")


def test_sheet_selection(tmp_path: Path):
    path = messy_workbook(tmp_path / "l.xlsx")
    assert read_labels(path, sheets="验证").files == ["dog/b.jpg"]
    with pytest.raises(LabelError, match=r"no sheet 'test'; the sheets are '训练', '验证'"):
        read_labels(path, sheets=["test"])


def test_missing_label_names_sheet_and_row(tmp_path: Path):
    wb = Workbook()
    ws = wb.active
    ws.title = "train"
    for row in (["image", "class"], ["a.jpg", 0], ["b.jpg", None], ["c.jpg", 1]):
        ws.append(row)
    wb.save(tmp_path / "l.xlsx")
    with pytest.raises(LabelError) as e:
        read_labels(tmp_path / "l.xlsx")
    assert str(e.value) == f"{tmp_path / 'l.xlsx'}, sheet 'train', row 3: file 'b.jpg' has no label"


def test_integer_labels_stay_integers(tmp_path: Path):
    wb = Workbook()
    ws = wb.active
    for row in (["file", "label"], ["a.jpg", 0], [None, None], ["b.jpg", 2.0], ["c.jpg", 1]):
        ws.append(row)
    wb.save(tmp_path / "l.xlsx")
    t = read_labels(tmp_path / "l.xlsx")
    assert t.labels == [0, 2, 1] and all(type(v) is int for v in t.labels)
    assert t.class_map().classes == ("0", "1", "2")


def test_one_based_labels_reported_or_remapped(tmp_path: Path):
    csv = tmp_path / "l.csv"
    csv.write_text("file,label\na.jpg,1\nb.jpg,2\nc.jpg,3\n", encoding="utf-8")
    t = read_labels(csv)
    assert t.labels == ["1", "2", "3"]  # text tables give text; ints come from numeric cells
    wb = Workbook()
    ws = wb.active
    for row in (["file", "label"], ["a.jpg", 1], ["b.jpg", 2], ["c.jpg", 3]):
        ws.append(row)
    wb.save(tmp_path / "l.xlsx")
    t = read_labels(tmp_path / "l.xlsx")
    with pytest.raises(LabelError, match=r"integer labels are 1..3, not 0..2; .*device-side assert triggered"):
        t.class_map()
    cm = t.class_map(remap=True)
    assert cm.classes == ("1", "2", "3") and cm.source_values == (1, 2, 3)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "gbk"])
def test_csv_encodings(tmp_path: Path, encoding: str):
    path = tmp_path / "标签.csv"
    path.write_bytes("图片,类别,split\n猫/1.jpg,猫,train\n狗/2.jpg,狗,val\n".encode(encoding))
    t = read_labels(path)
    assert t.files == ["猫/1.jpg", "狗/2.jpg"] and t.labels == ["猫", "狗"] and t.splits == ["train", "val"]
    assert t.where(1) == f"{path}, line 3"


def test_tsv_and_explicit_columns(tmp_path: Path):
    path = tmp_path / "l.tsv"
    path.write_text("id\tpic\tkind\n1\ta.jpg\tx\n", encoding="utf-8")
    with pytest.raises(LabelError, match=r"no file-name column found"):
        read_labels(path)
    t = read_labels(path, file_column="pic", label_column="kind")
    assert (t.files, t.labels) == (["a.jpg"], ["x"])
    with pytest.raises(LabelError, match=r"no label column named 'nope'; the columns are 'id', 'pic', 'kind'"):
        read_labels(path, file_column="pic", label_column="nope")


def test_bad_files(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="no such label table"):
        read_labels(tmp_path / "none.xlsx")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(LabelError, match="not a label table"):
        read_labels(tmp_path / "x.json")
    (tmp_path / "bad.xlsx").write_bytes(b"not a zip")
    with pytest.raises(LabelError, match=r"bad.xlsx: cannot read the workbook"):
        read_labels(tmp_path / "bad.xlsx")


def test_resolve_path(tmp_path: Path):
    assert resolve_path("a\\b.jpg", "/root") == "/root/a/b.jpg"
    assert resolve_path("/abs/x.jpg", "/root") == "/abs/x.jpg"
    assert resolve_path("D:\\data\\x.jpg", "/root") == "D:/data/x.jpg"


def test_class_map_roundtrip(tmp_path: Path):
    cm = ClassMap.from_labels([5, 7, 9], remap=True)
    cm.save(tmp_path / "classes.json")
    assert ClassMap.load(tmp_path / "classes.json") == cm
    assert ClassMap.from_labels(["b", "a", "b"]).encode(["a", "b"]).tolist() == [0, 1]


def test_samples_workbook():
    root = Path(__file__).resolve().parents[1] / "samples"
    t = read_labels(root / "labels.xlsx")
    assert t.split_names == ["train", "val", "test"] and len(t) == 24
    assert [len(t.select(s)) for s in ("train", "val", "test")] == [18, 3, 3]
    assert t.class_map().classes == ("cat", "coffee", "太空")
