"""Label tables as users get them wrong: each test is an input that once gave wrong classes, a
traceback or a misleading line, and what datakit says now."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import pytest
from openpyxl import Workbook

from datakit.check import check_dataset
from datakit.cli import main
from datakit.datasets import open_dataset
from datakit.errors import LabelError, UsageError
from datakit.labels import IMAGE_SUFFIXES, _text, read_labels


def images(folder: Path, *names: str) -> Path:
    """PNG files (whatever their names end in) of distinct grey levels, in ``folder``."""
    import cv2

    folder.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        (folder / name).write_bytes(cv2.imencode(".png", np.full((8, 8, 3), 10 * i, np.uint8))[1].tobytes())
    return folder


def workbook(path: Path, sheets: dict[str, list[list[object]]], header=("文件名", "标签"), formats=None) -> Path:
    wb = Workbook()
    for k, (name, rows) in enumerate(sheets.items()):
        ws = wb.active if k == 0 else wb.create_sheet(name)
        ws.title = name
        ws.append(list(header))
        for r in rows:
            ws.append(r)
        for cell, fmt in (formats or {}).get(name, {}).items():
            ws[cell].number_format = fmt
    wb.save(path)
    return path


def test_every_extension_datakit_decodes_names_an_image_row():
    from datakit.io import IMAGE_EXTENSIONS

    assert set(IMAGE_EXTENSIONS) <= set(IMAGE_SUFFIXES)


def test_a_sheet_of_ppm_files_is_a_split_not_notes(tmp_path: Path):
    root = images(tmp_path / "p", "a.jpg", "b.jpg", "c.ppm", "d.ppm")
    book = workbook(tmp_path / "p.xlsx", {"train": [["a.jpg", "cat"], ["b.jpg", "dog"]],
                                          "val": [["c.ppm", "cat"], ["d.ppm", "bird"]]})  # fmt: skip
    ds = open_dataset(root, labels=book)
    assert len(ds) == 4 and ds.classes == ["bird", "cat", "dog"]
    val = open_dataset(root, labels=book, split="val")
    assert [val.name(i) for i in range(len(val))] == [str(root / "c.ppm"), str(root / "d.ppm")]
    assert list(val.targets) == [1, 0]


def test_every_split_gets_one_class_map_whatever_split_is_asked_for(tmp_path: Path):
    # The attacks: a sheet whose files have no extension was read when asked for and skipped as notes when not,
    # so --split train gave ('cat', 'dog') and --split val ('bird', 'cat', 'dog'): 'cat' had index 0 in one pack
    # and 1 in the other; and a later fix dropped such a sheet even where sheets= named it. A sheet named as a
    # split is (or sheets= names) is a split, whatever its rows name.
    book = workbook(tmp_path / "t.xlsx", {"train": [["a.jpg", "cat"], ["b.jpg", "dog"]],
                                          "val": [["c", "bird"], ["d", "cat"]]})  # fmt: skip
    for how in ({"split": "train"}, {"split": "val"}, {"sheets": "val"}, {"sheets": ["train", "val"]}, {}):
        assert read_labels(book, **how).class_map().classes == ("bird", "cat", "dog"), how
    assert read_labels(book, split="val").files.tolist() == ["c", "d"]
    assert read_labels(book, sheets="val").files.tolist() == ["c", "d"]
    assert read_labels(book, sheets=["train", "val"]).files.tolist() == ["a.jpg", "b.jpg", "c", "d"]
    notes = workbook(tmp_path / "n.xlsx", {"train": [["a.jpg", "cat"], ["b.jpg", "dog"]],
                                           "说明": [["file", "the image's name"], ["label", "cat or dog"]]})  # fmt: skip
    assert read_labels(notes).class_map().classes == ("cat", "dog")  # a notes sheet of another name: still notes


def test_a_notes_sheet_named_like_a_split_leaves_the_split_to_the_split_column(tmp_path: Path):
    # The attack: a data sheet with a split column and a notes sheet called 'val': --split val read the notes
    # (rows 'file' and 'label', class 'cat or dog') instead of the val rows of the data sheet.
    book = workbook(tmp_path / "t.xlsx", {
        "data": [["a.jpg", "cat", "train"], ["b.jpg", "dog", "train"], ["c.jpg", "cat", "val"], ["d.jpg", "dog", "val"]],
        "val": [["file", "the file name"], ["label", "cat or dog"]],
    }, header=("file", "label", "split"))  # fmt: skip
    table = read_labels(book, split="val")
    assert table.files.tolist() == ["c.jpg", "d.jpg"] and table.class_map().classes == ("cat", "dog")


def test_check_of_one_split_reports_the_classes_it_lacks(tmp_path: Path, capsys):
    root = images(tmp_path / "img", "a.png", "b.png", "c.png", "x.png")
    book = workbook(tmp_path / "s.xlsx", {"train": [["a.png", "cat"], ["b.png", "dog"], ["c.png", "zebra"]],
                                          "val": [["x.png", "cat"]]})  # fmt: skip
    report = check_dataset(root, labels=book, split="val", workers=0)
    assert report.problems == ["split 'val' has no samples of class 'dog', 'zebra'"]
    assert main(["check", str(root), "--labels", str(book), "--split", "val", "-q"]) == 1
    assert capsys.readouterr().err == "split 'val' has no samples of class 'dog', 'zebra'\n"
    assert check_dataset(root, labels=book, split="train", workers=0).problems == []


def test_the_label_or_split_column_named_as_the_file_column_is_refused(tmp_path: Path, capsys):
    root = images(tmp_path / "f", "a.png", "b.png")
    (tmp_path / "g.csv").write_text("file,label\na.png,cat\nb.png,dog\n")
    with pytest.raises(UsageError) as e:
        read_labels(tmp_path / "g.csv", label_column="file")
    assert str(e.value) == (f"{tmp_path / 'g.csv'}: the file column and the label column are both 'file' (column "
                            "A); name another with label_column= (--label-column)")  # fmt: skip
    assert main(["check", str(root), "--labels", str(tmp_path / "g.csv"), "--split-column", "label"]) == 2
    assert capsys.readouterr().err == (
        f"datakit check: error: {tmp_path / 'g.csv'}: the label column and the split column are both 'label' "
        "(column B); name another with split_column= (--split-column)\n"
    )
    # the split column named, and no other column: no label column, not a clash with one never named
    (tmp_path / "f.csv").write_text("file,fold\na.png,cat\n")
    assert read_labels(tmp_path / "f.csv", split_column="fold", validate=False).problems() == [
        f"{tmp_path / 'f.csv'}, line 1: no label column found among 'file', 'fold'; name it with label_column= "
        "(--label-column)"
    ]
    (tmp_path / "s.csv").write_text("file,split,fold\na.png,train,0\nb.png,val,1\n")  # nor a column named split
    assert read_labels(tmp_path / "s.csv", split_column="fold", validate=False).problems() == [
        f"{tmp_path / 's.csv'}, line 1: no label column found among 'file', 'split', 'fold'; name it with "
        "label_column= (--label-column)"
    ]


def test_a_split_column_name_taken_by_the_labels_is_not_also_the_split(tmp_path: Path):
    (tmp_path / "g.csv").write_text("file,split\na.png,cat\nb.png,dog\n")
    table = read_labels(tmp_path / "g.csv", label_column="split")
    assert table.labels.tolist() == ["cat", "dog"] and table.split_names == []


def test_a_label_of_thousands_of_digits_is_a_name_not_a_crash(tmp_path: Path):
    path = tmp_path / "i.csv"
    path.write_text("file,label\na.png,0\nb.png," + "9" * 5000 + "\n")
    (problem,) = read_labels(path, validate=False).problems()
    assert problem.startswith(f"{path}: labels mix integers and class names: 1 rows hold integers (first '0' at "
                              "line 2) and 1 hold names")  # fmt: skip


@pytest.mark.parametrize("big", [10**17, 10**23, 50_000_000])
def test_huge_integer_labels_are_one_problem_line(tmp_path: Path, big: int):
    path = tmp_path / "big.csv"
    path.write_text(f"file,label\na.png,0\nb.png,1\nc.png,{big}\n")
    problems = read_labels(path, validate=False).problems()
    assert len(problems) == 1
    assert problems[0].startswith(f"{path}: integer labels are {{0, 1, {big}}}, not 0..2; ")
    assert problems[0].endswith(f"(first outside: {big} at line 4)")
    assert read_labels(path, remap_labels=True).class_map(remap=True).classes == ("0", "1", str(big))


def test_encoding_is_checked_when_parsed_and_auto_detects(tmp_path: Path, capsys):
    root = images(tmp_path / "img", "a.png", "b.png")
    table = tmp_path / "g.csv"
    table.write_bytes("file,label\na.png,猫\nb.png,狗\n".encode("gbk"))
    for bad in ("nope", "rot13", "hex", "undefined", "punycode", "idna"):
        with pytest.raises(SystemExit) as e:
            main(["check", str(root), "--labels", str(table), "--encoding", bad])
        assert e.value.code == 2
        assert capsys.readouterr().err.endswith(
            f"datakit check: error: argument --encoding: unknown encoding {bad!r}: use auto, gbk, big5, cp932, "
            "utf-8...\n"
        )
    assert main(["check", str(root), "--labels", str(table), "--encoding", "auto", "-q"]) == 0
    assert main(["check", str(root), "--labels", str(table), "--encoding", "gbk", "-q"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("suffix", [".csv", ".txt"])
def test_a_workbook_under_a_text_name_is_named_as_one(tmp_path: Path, suffix: str):
    book = workbook(tmp_path / "g.xlsx", {"train": [["a.png", "cat"]]})
    wrong = tmp_path / f"wrong{suffix}"
    wrong.write_bytes(book.read_bytes())
    with pytest.raises(LabelError) as e:
        read_labels(wrong)
    assert (
        str(e.value)
        == f"{wrong}: a zip archive or an .xlsx workbook, not {suffix} text; if it is a workbook, name it .xlsx"
    )
    old = tmp_path / "old.csv"
    old.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504))
    with pytest.raises(LabelError) as e:
        read_labels(old)
    assert str(e.value) == f"{old}: an Excel 97-2003 (.xls) workbook, not .csv text; save it as .xlsx in Excel"


def test_an_unreadable_table_does_not_list_every_image_as_not_in_it(tmp_path: Path):
    root = images(tmp_path / "img", "a.png", "b.png", "c.png")
    (tmp_path / "t.csv").write_text("a;b\nx;y\n")
    report = check_dataset(root, labels=tmp_path / "t.csv", workers=0)
    assert len(report.problems) == 1 and "no file-name column found" in report.problems[0]


def test_an_unclosed_quote_names_its_line(tmp_path: Path):
    root = images(tmp_path / "img", "a.png", "b.png", "c.png")
    path = tmp_path / "q.csv"
    path.write_text('file,label\na.png,"cat\nb.png,dog\nc.png,cat\n')
    report = check_dataset(root, labels=path, workers=0)
    assert report.problems == [
        f'{path}, line 2: a quote (") opened on this line is never closed, so lines 2-4 read as one field; close '
        "it, or quote no part of the name"
    ]
    path.write_text('file,label\na.png,"cat"\n"b.png",dog\nc.png,cat\n')  # quotes closed: as before
    assert read_labels(path).labels.tolist() == ["cat", "dog", "cat"]
    # closed quotes over lines the reader splits otherwise than str.splitlines (Word's soft break \x0b), and a quote
    # inside an unquoted field: read as they are, not called unclosed
    path.write_text('file,label,note\na.png,cat,"from Word\x0bsoft break"\nb.png,dog,"two\nlines"\n', newline="")
    assert read_labels(path).files.tolist() == ["a.png", "b.png"]
    path.write_text('file,label,note\na.png,cat,x\nc"x.png,dog,"a\nb"\n', newline="")
    assert read_labels(path, validate=False).files.tolist() == ["a.png", 'c"x.png']
    path.write_text('file,label\na.png,cat\n"b.png" ,"cat\nc.png,dog\n')  # after a stray character: still found
    assert check_dataset(root, labels=path, workers=0).problems[0] == (
        f'{path}, line 3: a quote (") opened on this line is never closed, so lines 3-4 read as one field; close '
        "it, or quote no part of the name"
    )
    path.write_text('file,label\na.png,cat\nb.png,"dog\n')  # on the last line alone
    assert read_labels(path, validate=False).problems() == [
        f'{path}, line 3: a quote (") opened on this line is never closed, so line 3 reads as one field; close it, '
        "or quote no part of the name"
    ]
    path.write_text('"file,label\na.png,cat\n')  # on the header line: that one line, nothing about a header
    assert check_dataset(root, labels=path, workers=0).problems == [
        f'{path}, line 1: a quote (") opened on this line is never closed, so lines 1-2 read as one field; close '
        "it, or quote no part of the name"
    ]


def test_check_lines_stay_one_line_each_whatever_the_names_hold(tmp_path: Path, capsys):
    root = images(tmp_path / "nl", "a.png", "ev\nil.png")
    path = tmp_path / "nl.csv"
    path.write_text('file,label\na.png,cat\n"x\ny.png",dog\n')
    assert main(["check", str(root), "--labels", str(path), "-q"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"missing: 'x\\ny.png' ({path}, line 3) not found at {root}/x\\ny.png",
        f"not in the table: {root}/ev\\nil.png",
    ]
    # split names head the class table: escaped there too (an escape sequence, a newline)
    split = tmp_path / "e.csv"
    split.write_text('file,label,split\na.png,cat,"v\x1b]0;x\x07al"\n"ev\nil.png",dog,"va\nl"\n', newline="")
    main(["check", str(root), "--labels", str(split)])
    assert capsys.readouterr().out.splitlines()[0].split() == ["class", "v\\x1b]0;x\\x07al", "va\\nl"]


def test_stats_and_pack_errors_escape_what_a_name_holds(tmp_path: Path, capsys):
    # the attack: an unreadable image named x<ESC>]0;owned<BEL><ESC>[2J.jpg: stats' and pack-lmdb's errors wrote the
    # escape sequences to the terminal (its title set, the screen cleared), where check escaped them
    root = images(tmp_path / "esc" / "ok", "0.png").parent
    (root / "bad").mkdir()
    bad = root / "bad" / "x\x1b]0;owned\x07\x1b[2J.jpg"
    bad.write_bytes(b"garbage")
    shown = f"{root}/bad/x\\x1b]0;owned\\x07\\x1b[2J.jpg: not a recognised image format (starts with b'garbage'"
    assert main(["stats", str(root), "-q"]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and err.startswith(f"datakit stats: error: sample 0: {shown}")
    assert main(["pack-lmdb", str(root), str(tmp_path / "e.lmdb"), "-q"]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and err.splitlines()[1].startswith(shown)


def test_a_stray_tag_character_makes_no_second_class_and_flags_stay_two(tmp_path: Path):
    # the attack: 'cat' and 'cat' + U+E0020 (TAG SPACE, invisible): two classes, without a word, where every other
    # invisible character is refused as a look-alike; tags inside a flag's sequence are what tells England's from
    # Scotland's
    root = images(tmp_path / "img", "0.png", "1.png", "2.png", "3.png")
    table = tmp_path / "t.csv"
    table.write_text("file,label\n0.png,cat\n1.png,cat\U000e0020\n2.png,dog\n3.png,dog\n", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        open_dataset(root, labels=table)
    assert str(e.value) == (
        f"{table}: labels 'cat' first at line 2 and 'cat\\U000e0020' (U+E0020 TAG SPACE) first at line 3 differ only "
        "in invisible characters, spaces, character width or look-alike letters and marks and would be two classes; write them alike"
    )
    england = "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f"
    scotland = "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"
    flags = tmp_path / "f.csv"
    flags.write_text(
        f"file,label\n0.png,{england}\n1.png,{scotland}\n2.png,{england}\n3.png,{scotland}\n", encoding="utf-8"
    )
    assert open_dataset(root, labels=flags).classes == [england, scotland]


def test_number_cells_as_file_names_get_a_note(tmp_path: Path, caplog):
    book = workbook(tmp_path / "n.xlsx", {"train": [[123, "cat"], [7, "dog"]]},
                    header=("file", "label"), formats={"train": {"A2": "00000", "A3": "00000"}})  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="datakit"):
        table = read_labels(book)
    assert table.files.tolist() == ["123", "7"]
    assert [r.getMessage() for r in caplog.records] == [
        f"{book}, sheet 'train', row 2: the file name '123' is a number cell, not text; zeros its format may show "
        "before it (00123) are not part of it: if the files are named so, store the column as text"
    ]


@pytest.mark.parametrize("engine", ["openpyxl", "calamine"])
def test_date_cells_as_labels_get_a_note(tmp_path: Path, caplog, engine: str):
    # the attack: dates shown as 2024/1/2 and 2024/1/10 (a Chinese Excel's format) read as ISO text, in date
    # order; the CSV Excel saves holds 2024/1/10 and 2024/1/2, in the other order: the same labels, classes swapped
    import datetime

    d1, d2 = datetime.datetime(2024, 1, 2), datetime.datetime(2024, 1, 10)
    book = workbook(tmp_path / "d.xlsx", {"train": [["a.png", d1], ["b.png", d2], ["c.png", d1]]},
                    header=("file", "label"), formats={"train": {"B2": "yyyy/m/d", "B3": "yyyy/m/d"}})  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="datakit"):
        table = read_labels(book, engine=engine)
    assert table.labels.tolist() == ["2024-01-02", "2024-01-10", "2024-01-02"]
    assert [r.getMessage() for r in caplog.records] == [
        f"{book}, sheet 'train', row 2: the label '2024-01-02' is a date cell, read as that ISO text and ordered as "
        "such; a CSV saved from this workbook holds the date as Excel shows it (2024/1/2, say), whose classes sort "
        "in another order: store the column as text for one reading"
    ]


@pytest.mark.parametrize("engine", ["openpyxl", "calamine"])
def test_duration_cells_as_labels_read_as_excel_shows_them(tmp_path: Path, caplog, engine: str):
    # the attack: durations of 2, 10 and 25 hours ([hh]:mm:ss) read as Python's text, '2:00:00', '10:00:00' and
    # '1 day, 1:00:00', in the order 25 h, 10 h, 2 h, without a word; the CSV Excel saves holds 02:00:00, 10:00:00,
    # 25:00:00, in that order (a fraction of a second is kept, to the millisecond: 1.4 s and 1.2 s stay two classes)
    import datetime

    hours = [["a.png", datetime.timedelta(hours=2)], ["b.png", datetime.timedelta(hours=10)],
             ["c.png", datetime.timedelta(hours=25)], ["d.png", datetime.timedelta(seconds=1.4)],
             ["e.png", datetime.timedelta(seconds=1.2)]]  # fmt: skip
    book = workbook(tmp_path / "d.xlsx", {"train": hours}, header=("file", "label"))
    csv = tmp_path / "d.csv"
    csv.write_text("file,label\na.png,02:00:00\nb.png,10:00:00\nc.png,25:00:00\nd.png,00:00:01.4\ne.png,00:00:01.2\n")
    with caplog.at_level(logging.WARNING, logger="datakit"):
        table = read_labels(book, engine=engine)
    assert table.labels.tolist() == ["02:00:00", "10:00:00", "25:00:00", "00:00:01.4", "00:00:01.2"]
    assert table.class_map().classes == read_labels(csv).class_map().classes == tuple(sorted(table.labels.tolist()))
    assert [r.getMessage() for r in caplog.records] == [
        f"{book}, sheet 'train', row 2: the label '02:00:00' is a time or duration cell, read as that text "
        "(hh:mm:ss) and ordered as such; a CSV saved from this workbook holds it as its format shows it (2:00 PM, "
        "2:00:00, say), whose classes sort in another order: store the column as text for one reading"
    ]


@pytest.mark.parametrize("engine", ["openpyxl", "calamine"])
def test_number_formats_that_show_labels_otherwise_get_a_note(tmp_path: Path, caplog, engine: str):
    # the attack: label cells 0.4, 1.4, 10.4 under the format 0 (Excel shows 0, 1, 10), 3 under "类"0 (shows 类3),
    # 1 and 2 under [=1]"dog";[=2]"cat";"bird": the values were read without a word, while the CSV Excel saves from
    # the sheet holds what is shown: other classes, other indices
    cases = {"0": ([0.4, 1.4, 10.4], "0.4", 2), '"类"0': ([3, 1, 2], "3", 2), '[=1]"dog";[=2]"cat";"bird"': ([1, 2, 1], "1", 2),
             "#,##0": ([999, 1000, 5], "1000", 0), "0,": ([2000, 3000, 1], "2000", 2), "0.00E+00": ([1, 2, 3], "1", 2)}  # fmt: skip
    for k, (fmt, (values, first, more)) in enumerate(cases.items()):
        rows = [[f"{j}.png", v] for j, v in enumerate(values)]
        book = workbook(tmp_path / f"f{k}.xlsx", {"train": rows}, header=("file", "label"),
                        formats={"train": {f"B{r}": fmt for r in range(2, 2 + len(values))}})  # fmt: skip
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="datakit"):
            table = read_labels(book, engine=engine, validate=False)  # (integer classes with gaps, 1..C: refused)
        assert [_text(x) for x in table.labels.tolist()] == [_text(v) for v in values]  # the values, as before
        row = 2 + values.index(next(v for v in values if _text(v) == first))
        also = f" (and {more} more)" if more else ""
        assert [r.getMessage() for r in caplog.records] == [
            f"{book}, sheet 'train', row {row}: the label {first!r}{also} is a number cell whose format {fmt!r} shows "
            "it otherwise; datakit reads the value, while a CSV saved from this workbook holds what is shown, which "
            "gives other classes: set the column's format to General (or store the labels as text) for one reading"
        ], fmt
    # formats that show the labels as they are: no note (whole numbers under 0 or 0.00, small ones under #,##0)
    for k, (fmt, values) in enumerate((("0", [1, 2, 3]), ("0.00", [1, 2]), ("#,##0", [5, 999]), ("0.0", [1.5, 2]))):
        book = workbook(tmp_path / f"ok{k}.xlsx", {"train": [[f"{j}.png", v] for j, v in enumerate(values)]},
                        header=("file", "label"), formats={"train": {f"B{r}": fmt for r in range(2, 2 + len(values))}})  # fmt: skip
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="datakit"):
            read_labels(book, engine=engine, validate=False)
        assert caplog.records == [], fmt


@pytest.mark.parametrize("engine", ["openpyxl", "calamine"])
def test_number_formats_read_by_section_and_tag(tmp_path: Path, caplog, engine: str):
    # the attack: [$-409]0 (a locale tag), 0;-0 on negatives and 0" " showed the labels as they are and got a note;
    # ;;; (hidden), # on 0 (shown as nothing), a zero section "-" and 000 (5 shown as 005) got none
    def notes(fmt: str, values: list) -> list[str]:
        book = workbook(tmp_path / f"s{len(list(tmp_path.iterdir()))}.xlsx",
                        {"train": [[f"{j}.png", v] for j, v in enumerate(values)]}, header=("file", "label"),
                        formats={"train": {f"B{r}": fmt for r in range(2, 2 + len(values))}})  # fmt: skip
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="datakit"):
            read_labels(book, engine=engine, validate=False)
        return [r.getMessage().removeprefix(f"{book}, sheet 'train', ") for r in caplog.records]

    for fmt, values in (("[$-409]0", [1, 2]), ("0;-0", [-1, 2]), ('0;[Red]-0;"zero"', [-3, 4]), ('0" "', [1, 2]),
                        ("_(0_);(0)", [1, 2]), ("0;-0;0", [0, 1]),
                        # a minus escaped or quoted (UK accounting), General in two sections, a BCP-47 locale tag,
                        # a fraction with a whole part on whole numbers
                        ("0;[Red]\\-0", [-3, 4]), ('0;"-"0', [-3, 4]), ('_-* #,##0_-;\\-* #,##0_-;_-* "-"_-;_-@_-', [-3, 5]),
                        ("General;General", [1, 2]), ("[$-zh-CN]0", [1, 2]), ("# ?/?", [1, 2])):  # fmt: skip
        assert notes(fmt, values) == [], fmt
    for fmt, values, first in ((";;;", [1, 2], "1"), ("#", [0, 1], "0"), ('0;-0;"-"', [1, 0], "0"),
                               ("000", [5, 12], "5"), ("0;(0)", [1, -2], "-2"), ("#.#", [1.5, 0.5], "0.5"),
                               # 5 shown as 5/1, 2000 as 2.0, 0 as -, -1 as 1, 5 as €5
                               ("?/?", [5, 2], "5"), ("0.0,", [2000, 0], "2000"),
                               ('_-* #,##0_-;\\-* #,##0_-;_-* "-"_-;_-@_-', [1, 0], "0"),
                               ("General;General", [1, -1], "-1"), ("[$€-407]0", [5, 0], "5")):  # fmt: skip
        row = 2 + [_text(v) for v in values].index(first)
        more = " (and 1 more)" if fmt in (";;;", "000", "?/?", "[$€-407]0") else ""
        assert notes(fmt, values) == [
            f"row {row}: the label {first!r}{more} is a number cell whose format {fmt!r} shows it otherwise; datakit "
            "reads the value, while a CSV saved from this workbook holds what is shown, which gives other classes: "
            "set the column's format to General (or store the labels as text) for one reading"
        ], fmt


def test_a_utf8_table_cut_inside_a_character_is_said_to_be_cut_short(tmp_path: Path):
    # the attack: a UTF-8 table cut one byte into its last label (a copy not finished) was "not UTF-8, UTF-16,
    # GBK/GB18030 or Big5 text; pass encoding= (--encoding)", naming no line and pointing at the wrong fix
    whole = "file,label\na.jpg,猫\nb.jpg,狗".encode()
    for keep, shown in ((1, "last byte e7 begins"), (2, "last bytes e7 8b begin")):
        path = tmp_path / f"cut{keep}.csv"
        path.write_bytes(whole[: len(whole) - 3 + keep])
        want = (f"{path}, line 3: the file ends inside a UTF-8 character (its {shown} one): cut short, a copy or "
                "download not finished? copy it again")  # fmt: skip
        for encoding in (None, "UTF8", "utf-8-sig"):
            with pytest.raises(LabelError) as e:
                read_labels(path, encoding=encoding)
            assert str(e.value) == want
    # a whole file, and GBK ending in a Chinese character, are read
    (tmp_path / "ok.csv").write_bytes(whole)
    (tmp_path / "gbk.csv").write_bytes(whole.decode().encode("gbk"))
    assert (
        read_labels(tmp_path / "ok.csv").class_values == read_labels(tmp_path / "gbk.csv").class_values == ("猫", "狗")
    )
    # a Windows-1252 table whose one accented letter ends it is no cut UTF-8: its encoding is named, as before
    (tmp_path / "cafe.csv").write_bytes("file,label\n1.jpg,cat\n2.jpg,café".encode("cp1252"))
    with pytest.raises(LabelError) as e:
        read_labels(tmp_path / "cafe.csv")
    assert "as Windows-1252 it reads 'café'" in str(e.value) and "cut short" not in str(e.value)
    # the attack: ASCII but for the last label, cut two bytes into its one character ('猫' as e7 8c): read as GBK, a
    # class '鐚' and "0 problems"; a whole GBK file may end so too, and is read with encoding='gbk'
    (tmp_path / "list.txt").write_bytes(b"a.png cat\nb.png dog\nc.png " + "猫".encode()[:2])
    with pytest.raises(LabelError) as e:
        read_labels(tmp_path / "list.txt")
    assert str(e.value) == (
        f"{tmp_path / 'list.txt'}, line 3: the file's one non-ASCII text is its last bytes, e7 8c, with no line end: "
        "the start of a UTF-8 character, the file cut short (a copy or download not finished? copy it again); if the "
        "file is whole, ending in '鐚' in GBK, pass encoding='gbk'"
    )
    assert read_labels(tmp_path / "list.txt", encoding="gbk").class_values == ("cat", "dog", "鐚")


def test_labels_that_differ_in_a_trailing_nul_are_refused(tmp_path: Path):
    path = tmp_path / "nul.csv"
    path.write_bytes(b"file,label\na.png,cat\nb.png,cat\x00\nc.png,cat\n")
    with pytest.raises(LabelError) as err:
        read_labels(path)
    assert (
        str(err.value)
        == f"{path}, line 3: a NUL character (U+0000) in the line, which no file name, label or note holds; remove it"
    )


def test_a_split_of_mixed_or_out_of_range_labels_counts_the_whole_table(tmp_path: Path, capsys):
    # the attack: with split='train' the labels' kind was judged on the whole table and counted on the split:
    # "3 rows hold integers (first '0' at line 2) and 0 hold names", naming no row; "first outside" went missing;
    # check --split train added "split 'train' has no samples of class '1.5'"
    img = images(tmp_path / "img", "a.jpg", "b.jpg", "c.jpg")
    (tmp_path / "i.csv").write_text("file,label,split\na.jpg,0,train\nb.jpg,1,train\nc.jpg,1.5,val\n")
    (tmp_path / "j.csv").write_text("file,label,split\na.jpg,0,train\nb.jpg,1,train\nc.jpg,-1,val\n")
    mixed = (f"{tmp_path / 'i.csv'}: labels mix integers and class names: 2 rows hold integers (first '0' at line 2) "
             "and 1 hold names (first '1.5' at line 4); make every label a class name, or every label an integer "
             "(or, where both are class names, as an OCR set's 0-9 and A-Z, give the classes with classes=, "
             "--classes)")  # fmt: skip
    for split in (None, "train"):
        with pytest.raises(LabelError) as e:
            open_dataset(img, labels=tmp_path / "i.csv", split=split)
        assert str(e.value) == mixed
        with pytest.raises(LabelError, match=r"\(first outside: -1 at line 4\)$"):
            open_dataset(img, labels=tmp_path / "j.csv", split=split)
    assert check_dataset(img, labels=tmp_path / "i.csv", split="train").problems == [mixed]


def test_multi_label_vectors_are_refused_not_read_as_class_names(tmp_path: Path):
    # the attack: a PaddleClas multi-label list ('a.jpg<TAB>0,1,0') was read as three classes named '0,0,1',
    # '0,1,0', '1,0,0': the vector of class 0 became class 2, without a word
    img = images(tmp_path / "img", "a.jpg", "b.jpg", "c.jpg")
    (tmp_path / "ml.txt").write_text("a.jpg\t0,1,0\nb.jpg\t1,0,0\nc.jpg\t0, 0, 1\n")
    with pytest.raises(LabelError) as e:
        open_dataset(img, labels=tmp_path / "ml.txt")
    assert str(e.value) == (f"{tmp_path / 'ml.txt'}: every label is a list of 0s and 1s (first '0,1,0' at line 1): "
                            "multi-label vectors (PaddleClas' multi-label lists), while datakit reads one class per "
                            "image; make each label one class name or index")  # fmt: skip
    (tmp_path / "ok.txt").write_text("a.jpg\t0,1,0\nb.jpg\tcat\nc.jpg\tdog\n")  # one such name among others: a name
    assert open_dataset(img, labels=tmp_path / "ok.txt").classes == ["0,1,0", "cat", "dog"]


def test_a_class_given_in_another_unicode_form_is_said_so(tmp_path: Path):
    # the attack: classes= from folders made on macOS ('café' in NFD) and a CSV typed on Windows (NFC): "class 'café'
    # not among the 2 classes given", of a list that visibly holds 'café'
    import unicodedata

    nfd = unicodedata.normalize("NFD", "café")
    train = images(tmp_path / "tr" / nfd, "1.png").parent
    images(train / "cafz", "2.png")
    img = images(tmp_path / "img", "a.png", "b.png")
    (tmp_path / "v.csv").write_text("file,label\na.png,café\nb.png,cafz\n", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        open_dataset(img, labels=tmp_path / "v.csv", classes=open_dataset(train))
    assert str(e.value) == (f"{tmp_path / 'v.csv'}, line 2: class 'café' not among the 2 classes given (classes=); 'café' "
                            f"(NFC: 'caf\\xe9') is {nfd!r} of the classes given in another Unicode form (NFD: "
                            "'cafe\\u0301'): write both one way")  # fmt: skip


def test_classes_given_as_the_training_folder_of_class_folders(tmp_path: Path, capsys):
    # the attack: `check img --labels val.csv --classes train/` (a folder of class folders) said "classes='train': no
    # such file", of a folder that is there
    train = tmp_path / "train"
    for cls in ("cat", "dog", "鸟"):
        images(train / cls, "1.png")
    img = images(tmp_path / "img", "a.png", "b.png")
    (tmp_path / "val.csv").write_text("file,label\na.png,dog\nb.png,鸟\n", encoding="utf-8")
    ds = open_dataset(img, labels=tmp_path / "val.csv", classes=train)
    assert (ds.classes, ds.targets.tolist()) == (["cat", "dog", "鸟"], [1, 2])
    assert main(["check", str(img), "--labels", str(tmp_path / "val.csv"), "--classes", str(train), "-q"]) == 0
    (tmp_path / "packs" / "part0").mkdir(parents=True)  # a folder of packs, not of class folders
    (tmp_path / "packs" / "part0" / "data.mdb").touch()
    with pytest.raises(UsageError) as e:
        open_dataset(img, labels=tmp_path / "val.csv", classes=tmp_path / "packs")
    assert str(e.value).startswith(f"classes={str(tmp_path / 'packs')!r}: a folder, but not one of class folders (")


def test_excel_text_formulas_in_a_csv_are_read_as_their_text(tmp_path: Path):
    # the attack: a CSV cell ="001" (Excel's way to keep the leading zeros) was the class name '="001"', where the
    # same sheet as .xlsx reads 1, and ="10" sorted before ="2"
    img = images(tmp_path / "img", "a.jpg", "b.jpg", "c.jpg")
    (tmp_path / "x.csv").write_text('file,label\na.jpg,="0"\nb.jpg,="02"\nc.jpg,1\n')
    table = read_labels(tmp_path / "x.csv")
    assert (table.kind, table.class_values) == ("int", ("0", "02", "1"))
    assert table.notes == [f'{tmp_path / "x.csv"}: 2 labels written as ="..." (the text formula Excel keeps text '
                           "with) read as the text inside, as Excel shows them"]  # fmt: skip
    ds = open_dataset(img, labels=tmp_path / "x.csv")
    assert (ds.classes, ds.targets.tolist()) == (["0", "1", "2"], [0, 2, 1])
    (tmp_path / "n.csv").write_text(
        'file,label\na.jpg,="cat"\nb.jpg,cat\nc.jpg,"=""say """"hi"""""""\n'
    )  # ="say ""hi""": say "hi"
    ds = open_dataset(img, labels=tmp_path / "n.csv")
    assert (ds.classes, ds.targets.tolist()) == (["cat", 'say "hi"'], [0, 0, 1])


def test_tables_saved_with_a_byte_order_mark_and_joined_keep_their_classes(tmp_path: Path):
    # the attack: two CSVs saved by Excel ("CSV UTF-8", or "Unicode text") joined with copy /b: the second header
    # starts with a byte-order mark, was read as a row labelled '标签', a third class, and moved every index on
    img = images(tmp_path / "img", "a.jpg", "b.jpg", "c.jpg", "d.jpg")
    part1 = "文件名,标签\r\na.jpg,猫\r\nb.jpg,狗\r\n"
    part2 = "文件名,标签\r\nc.jpg,猫\r\nd.jpg,狗\r\n"
    (tmp_path / "u8.csv").write_bytes(b"\xef\xbb\xbf" + part1.encode() + b"\xef\xbb\xbf" + part2.encode())
    (tmp_path / "u16.txt").write_bytes(
        part1.replace(",", "\t").encode("utf-16") + part2.replace(",", "\t").encode("utf-16")
    )
    for name in ("u8.csv", "u16.txt"):
        table = read_labels(tmp_path / name)
        assert table.notes == [f"{tmp_path / name}, line 4: a byte-order mark starts the line (files joined?): "
                               "read without it",
                               f"{tmp_path / name}, line 4: the header line again (tables joined?): skipped"]  # fmt: skip
        ds = open_dataset(img, labels=tmp_path / name)
        assert (ds.classes, ds.targets.tolist()) == (["狗", "猫"], [1, 0, 1, 0])


def test_a_classes_file_skips_comments_and_refuses_a_header_line(tmp_path: Path):
    # the attack: a classes .txt starting with '# 类别列表', or with the column's header '类别' copied with it, made
    # that line class 0 and moved every class one index on
    img = images(tmp_path / "img", "a.jpg", "b.jpg")
    (tmp_path / "l.csv").write_text("file,label\na.jpg,猫\nb.jpg,狗\n", encoding="utf-8")
    (tmp_path / "comment.txt").write_bytes("# 类别列表\r\n鸟\r\n猫\r\n狗\r\n".encode("gbk"))
    ds = open_dataset(img, labels=tmp_path / "l.csv", classes=tmp_path / "comment.txt")
    assert (ds.classes, ds.targets.tolist()) == (["鸟", "猫", "狗"], [1, 2])
    (tmp_path / "header.txt").write_bytes("类别\r\n鸟\r\n猫\r\n狗\r\n".encode("gbk"))
    want = (f"{tmp_path / 'header.txt'}, line 1: '类别' is a column's name (a header copied with the column?) and no "
            "label holds it; the file holds one class name a line, class 0 first: remove the line (a class really "
            "named so, with no samples: give the classes as a .json list)")  # fmt: skip
    with pytest.raises(LabelError) as e:
        open_dataset(img, labels=tmp_path / "l.csv", classes=tmp_path / "header.txt")
    assert str(e.value) == want
    out = tmp_path / "p.lmdb"
    args = [str(img), str(out), "--labels", str(tmp_path / "l.csv"), "--classes", str(tmp_path / "header.txt"), "-q"]
    assert main(["pack-lmdb", *args]) == 1
    assert not out.exists()
    # the attack: pd.Series(train.classes).to_csv("classes.txt", index=False) writes the header line '0'; 'classes'
    # and 'category_name' above the names too: each was class 0, every val target one index on
    for header in ("0", "classes", "category_name", "Class Names"):
        (tmp_path / "h.txt").write_text(f"{header}\n鸟\n猫\n狗\n", encoding="utf-8")
        with pytest.raises(LabelError) as e:
            open_dataset(img, labels=tmp_path / "l.csv", classes=tmp_path / "h.txt")
        what = ("a number above class names (the header pandas writes for a Series without a name?)" if header == "0"
                else "a column's name (a header copied with the column?)")  # fmt: skip
        assert str(e.value) == want.replace("header.txt", "h.txt").replace("'类别'", repr(header)).replace(
            "a column's name (a header copied with the column?)", what)  # fmt: skip
    # 'name' above the names (pandas' to_csv of a column called so) is refused as well; a class really called
    # 'name' that the labels hold is class 0
    (tmp_path / "name.txt").write_text("name\n猫\n狗\n", encoding="utf-8")
    with pytest.raises(LabelError, match="^" + re.escape(f"{tmp_path / 'name.txt'}, line 1: 'name' is a column's")):
        open_dataset(img, labels=tmp_path / "l.csv", classes=tmp_path / "name.txt")
    (tmp_path / "named.csv").write_text("file,label\na.jpg,name\nb.jpg,狗\n", encoding="utf-8")
    ds = open_dataset(img, labels=tmp_path / "named.csv", classes=tmp_path / "name.txt")
    assert (ds.classes, ds.targets.tolist()) == (["name", "猫", "狗"], [0, 2])
    # numbers are class names when they all are ('0', '1', '2' for integer labels)
    (tmp_path / "n.txt").write_text("0\n1\n2\n", encoding="utf-8")
    (tmp_path / "n.csv").write_text("file,label\na.jpg,1\nb.jpg,2\n", encoding="utf-8")
    ds = open_dataset(img, labels=tmp_path / "n.csv", classes=tmp_path / "n.txt")
    assert (ds.classes, ds.targets.tolist()) == (["0", "1", "2"], [1, 2])
    # a class really named as a column ('target', with 'background'): the labels hold it, so it is class 0
    (tmp_path / "t.csv").write_text("file,label\na.jpg,target\nb.jpg,background\n", encoding="utf-8")
    (tmp_path / "t.txt").write_text("target\nbackground\n", encoding="utf-8")
    ds = open_dataset(img, labels=tmp_path / "t.csv", classes=tmp_path / "t.txt")
    assert (ds.classes, ds.targets.tolist()) == (["target", "background"], [0, 1])
    assert check_dataset(img, labels=tmp_path / "t.csv", classes=tmp_path / "t.txt").problems == []


def test_none_null_and_database_nulls_are_not_class_names(tmp_path: Path):
    # the attack: f"{path},{label}" with label None, or a database export's NULL and \N, were three classes
    path = tmp_path / "l.csv"
    path.write_text("file,label\na.jpg,cat\nb.jpg,None\nc.jpg,NULL\nd.jpg,\\N\ne.jpg,dog\n", encoding="utf-8")
    table = read_labels(path, validate=False)
    assert table.problems() == [
        f"{path}, line {n}: file {f!r} has no label (the cell holds {v!r}, a missing-value marker, not a class name; "
        "a class really named so is read when classes= (--classes) names it)"
        for n, f, v in ((3, "b.jpg", "None"), (4, "c.jpg", "NULL"), (5, "d.jpg", "\\N"))
    ]
    assert table.class_map().classes == ("cat", "dog")
    # a class really named 'None' (no finding), given with classes=: read as that class, in every command
    img = images(tmp_path / "img", "a.jpg", "b.jpg")
    (tmp_path / "n.csv").write_text("file,label\na.jpg,None\nb.jpg,tumor\n", encoding="utf-8")
    (tmp_path / "classes.txt").write_text("None\ntumor\n", encoding="utf-8")
    assert check_dataset(img, labels=tmp_path / "n.csv").problems == [
        f"{tmp_path / 'n.csv'}, line 2: file 'a.jpg' has no label (the cell holds 'None', a missing-value marker, not "
        "a class name; a class really named so is read when classes= (--classes) names it)"
    ]  # and a.jpg is not called "not in the table": it is
    ds = open_dataset(img, labels=tmp_path / "n.csv", classes=tmp_path / "classes.txt")
    assert (ds.classes, ds.targets.tolist()) == (["None", "tumor"], [0, 1])
    assert check_dataset(img, labels=tmp_path / "n.csv", classes=tmp_path / "classes.txt").problems == []


def test_cells_under_a_merged_label_are_named_as_such(tmp_path: Path):
    # the attack: one label cell merged over each class's rows, as people lay a sheet out: every row but the first
    # of each was "has no label", where Excel shows them labelled
    from openpyxl import Workbook

    wb = Workbook()
    ws = wb.active
    ws.title = "train"
    for row in (["文件名", "标签"], ["a.jpg", "猫"], ["b.jpg", None], ["c.jpg", "狗"], ["d.jpg", None]):
        ws.append(row)
    ws.merge_cells("B2:B3")
    ws.merge_cells("B4:B5")
    wb.save(tmp_path / "m.xlsx")
    fix = "whose value only its first cell holds; unmerge the cells and fill the value into every row"
    for engine in ("calamine", "openpyxl"):
        assert read_labels(tmp_path / "m.xlsx", validate=False, engine=engine).problems() == [
            f"{tmp_path / 'm.xlsx'}, sheet 'train', row 3: cell B3 is part of the merged cell B2:B3, {fix}",
            f"{tmp_path / 'm.xlsx'}, sheet 'train', row 5: cell B5 is part of the merged cell B4:B5, {fix}",
        ]


def test_an_xls_file_is_named_for_what_it_is(tmp_path: Path, capsys):
    # the attack: a real .xls, or the HTML table a web system exports as .xls, was "not a label table" (exit 2)
    img = images(tmp_path / "img", "a.jpg")
    (tmp_path / "old.xls").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504))
    (tmp_path / "web.xls").write_text("<html><body><table><tr><td>文件名</td></tr></table></body></html>", "utf-8")
    assert main(["check", str(img), "--labels", str(tmp_path / "old.xls")]) == 1
    assert main(["check", str(img), "--labels", str(tmp_path / "web.xls")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"datakit check: error: {tmp_path / 'old.xls'}: an Excel 97-2003 (.xls) workbook, which datakit does not "
        "read; open it in Excel and save it as .xlsx",
        f"datakit check: error: {tmp_path / 'web.xls'}: a web page (HTML) under an .xls name, as web systems export "
        "tables; open it in Excel and save it as .xlsx",
    ]


def test_a_gb18030_table_with_characters_gbk_lacks_is_read(tmp_path: Path):
    # the attack: a GB18030 CSV naming 王䶮.jpg (a character of people's names GBK lacks) raised UnicodeEncodeError
    # from the encoding guess
    img = images(tmp_path / "img", "王䶮.jpg", "李娜.jpg")
    (tmp_path / "l.csv").write_bytes("file,label\n王䶮.jpg,猫\n李娜.jpg,狗\n".encode("gb18030"))
    ds = open_dataset(img, labels=tmp_path / "l.csv")
    assert (ds.classes, ds.targets.tolist()) == (["狗", "猫"], [1, 0])
    assert [Path(ds.name(i)).name for i in range(2)] == ["王䶮.jpg", "李娜.jpg"]


@pytest.mark.parametrize("mark", ["\u200e", "\u00ad", "\u202a", "\u034f", "\ufe0f", "\u3164", "\u2800", "\x00", "\x7f"])
@pytest.mark.parametrize("kind", ["csv", "xlsx"])
def test_labels_that_differ_by_a_mark_that_does_not_show_are_refused(tmp_path: Path, mark: str, kind: str):
    # the attack: 'cat' and 'cat' + a left-to-right mark (or a soft hyphen, a variation selector, a Hangul filler,
    # NUL, DEL...) were two classes, every index after them one further, and check said 0 problems
    img = images(tmp_path / "img", "a.png", "b.png", "c.png")
    rows = [["a.png", "cat"], ["b.png", "dog"], ["c.png", f"cat{mark}"]]
    if kind == "csv":
        path = tmp_path / "l.csv"
        path.write_text("file,label\n" + "".join(f"{f},{lab}\n" for f, lab in rows), encoding="utf-8-sig")
        second, third = "line 2", "line 4"
    elif mark == "\x00":
        pytest.skip("no workbook cell holds NUL")
    else:
        path = workbook(tmp_path / "l.xlsx", {"train": rows}, header=("file", "label"))
        second, third = "sheet 'train', row 2", "sheet 'train', row 4"
    name = f"U+{ord(mark):04X} {__import__('unicodedata').name(mark, '')}".rstrip()
    with pytest.raises(LabelError) as e:
        open_dataset(img, labels=path)
    if mark == "\x00":  # a text table's NUL is refused wherever it is
        assert (
            str(e.value)
            == f"{path}, line 4: a NUL character (U+0000) in the line, which no file name, label or note holds; remove it"
        )
        return
    assert str(e.value) == (
        f"{path}: labels 'cat' first at {second} and {f'cat{mark}'!r} ({name}) first at {third} differ only in "
        "invisible characters, spaces, character width or look-alike letters and marks and would be two classes; write them alike"
    )


def test_integer_labels_in_full_width_digits_are_refused_not_sorted_as_text(tmp_path: Path, capsys):
    # the attack: labels ０..１１ typed with a Chinese input method were class names in text order: '１０' was
    # class 2, and the same table in ASCII digits made it class 10; check said 0 problems
    img = images(tmp_path / "img", *(f"{i}.png" for i in range(12)))
    wide = lambda s: "".join(chr(ord(c) + 0xFEE0) for c in s)  # noqa: E731
    path = tmp_path / "l.csv"
    path.write_text("file,label\n" + "".join(f"{i}.png,{wide(str(i))}\n" for i in range(12)), encoding="utf-8")
    line = (
        f"{path}: every label is an integer written in full-width or other non-ASCII digits (first '０' (U+FF10 "
        "FULLWIDTH DIGIT ZERO) at line 2): as class names they would sort as text ('１０' before '２'), not as the "
        "numbers they are; write them in ASCII digits"
    )
    with pytest.raises(LabelError) as e:
        open_dataset(img, labels=path)
    assert str(e.value) == line
    assert main(["check", str(img), "--labels", str(path)]) == 1
    assert capsys.readouterr().err == line + "\n"
    path.write_text("file,label\n" + "".join(f"{i}.png,{i}\n" for i in range(12)), encoding="utf-8")
    assert open_dataset(img, labels=path).targets.tolist() == list(range(12))  # ASCII: numbers, in their order
    arabic = "".join(chr(0x660 + int(d)) for d in "10")  # Arabic-Indic ١٠, as wrong in text order
    path.write_text(f"file,label\n0.png,{arabic}\n1.png,cat\n", encoding="utf-8-sig")
    with pytest.raises(LabelError) as e:
        open_dataset(img, labels=path)
    assert str(e.value).startswith(f"{path}: labels hold integers written in full-width or other non-ASCII digits "
                                   f"(first '{arabic}' at line 2)")  # fmt: skip
    circled = "".join(f"{i}.png,{chr(0x2460 + i)}\n" for i in range(12))  # ① ... ⑫: names, in their own order
    path.write_text("file,label\n" + circled, encoding="utf-8-sig")
    assert open_dataset(img, labels=path).targets.tolist() == list(range(12))


@pytest.mark.parametrize("kind", ["csv", "xlsx"])
def test_a_total_row_under_the_images_is_refused_not_a_class(tmp_path: Path, kind: str):
    # the attack: a sheet ending in '总计 | 2张' (Excel's total row): '2张' became class 0 and moved 猫 and 狗 one up
    img = images(tmp_path / "img", "0.png", "1.png")
    rows = [["0.png", "猫"], ["1.png", "狗"], ["总计", "2张"]]
    if kind == "csv":
        path = tmp_path / "l.csv"
        path.write_text("文件名,标签\n" + "".join(f"{f},{lab}\n" for f, lab in rows), encoding="utf-8-sig")
        where = "line 4"
    else:
        path = workbook(tmp_path / "l.xlsx", {"train": rows})
        where = "sheet 'train', row 4"
    with pytest.raises(LabelError) as e:
        open_dataset(img, labels=path)
    assert str(e.value) == (
        f"{path}: {where}: '总计' names no image file, unlike the rows around it (a total or a note?): its label "
        "'2张' would be a class; delete the row"
    )
    rows.pop()
    if kind == "csv":
        path.write_text("文件名,标签\n" + "".join(f"{f},{lab}\n" for f, lab in rows), encoding="utf-8-sig")
    else:
        workbook(path, {"train": rows})
    assert open_dataset(img, labels=path).classes == ["狗", "猫"]


@pytest.mark.parametrize("rival", ["类别名称", "label_name", "标签名称", "category_name"])
def test_a_class_name_column_beside_the_class_ids_is_compared(tmp_path: Path, rival: str):
    # the attack: 'file,label,label_name' (ids and names that disagree): the ids were read, the names ignored
    img = images(tmp_path / "img", "0.png", "1.png", "2.png")
    path = tmp_path / "l.csv"
    path.write_text(f"file,label,{rival}\n0.png,0,dog\n1.png,1,cat\n2.png,0,dog\n", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        open_dataset(img, labels=path)
    assert str(e.value) == (
        f"{path}: the columns 'label' and {rival!r} both name the class but number the classes differently (class 0 "
        f"is 'dog' by 'label', 'cat' by {rival!r}); name the one to use with label_column= (--label-column)"
    )


def test_integer_labels_match_class_folders_named_with_leading_zeros(tmp_path: Path, capsys):
    # the attack: --classes train (folders 00, 01, 02) and a val table labelled 00, 01, 02 (read as integers):
    # "classes '0', '1', '2' not among the 3 classes given", with no way to write the labels otherwise
    for c in ["00", "01", "02"]:
        images(tmp_path / "train" / c, f"t{c}.png")
    img = images(tmp_path / "img", "00.png", "01.png", "02.png")
    path = tmp_path / "val.csv"
    path.write_text("file,label\n00.png,02\n01.png,00\n02.png,1\n", encoding="utf-8")
    ds = open_dataset(img, labels=path, classes=str(tmp_path / "train"))
    assert ds.classes == ["00", "01", "02"] and ds.targets.tolist() == [2, 0, 1]
    assert main(["check", str(img), "--labels", str(path), "--classes", str(tmp_path / "train")]) == 0
    assert capsys.readouterr().out.endswith("3 samples checked, 0 problems\n")
    out = tmp_path / "p.lmdb"
    assert main(["pack-lmdb", str(img), str(out), "--labels", str(path), "--classes", str(tmp_path / "train"),
                 "-q"]) == 0  # fmt: skip
    packed = open_dataset(out)
    assert packed.classes == ["00", "01", "02"] and packed.targets.tolist() == [2, 0, 1]


@pytest.mark.parametrize(
    ("given", "line"),
    [
        (["cat", "dog\u200b", "dog"], "classes=: classes 1 'dog\\u200b' (U+200B ZERO WIDTH SPACE) and 2 'dog' differ "
         "only in invisible characters, spaces, character width or look-alike letters and marks; write them alike"),
        (["cat", ""], "classes=: class 1 is '', which names no class"),
        (["cat", None], "classes=: class 1 is None, which names no class"),
        (["cat", "\u3164"], "classes=: class 1 is '\u3164' (U+3164 HANGUL FILLER), which names no class"),
    ],
)  # fmt: skip
def test_a_classes_list_with_look_alike_or_blank_names_is_refused(tmp_path: Path, given: list, line: str):
    images(tmp_path / "img" / "cat", "a.png")
    with pytest.raises(UsageError) as e:
        open_dataset(tmp_path / "img", classes=given)
    assert str(e.value) == line


def test_what_the_new_label_checks_leave_alone_and_a_longer_run_of_notes(tmp_path: Path):
    # a review's attacks on the checks above: an ImageNet table (WordNet id, then its words in label_name) was
    # refused as rival columns; a last image named .jp2 was taken for a total row; England's and Scotland's flags
    # (tag characters) were look-alikes; four note rows under the images passed where three were refused
    img = images(tmp_path / "img", "a.jpg", "b.jpg", "c.jp2")
    imagenet = tmp_path / "in.csv"
    imagenet.write_text("file,label,label_name\na.jpg,n01440764,tench\nb.jpg,n01443537,goldfish\n", encoding="utf-8")
    assert open_dataset(img, labels=imagenet).classes == ["n01440764", "n01443537"]
    jp2 = tmp_path / "jp2.csv"
    jp2.write_text("file,label\na.jpg,cat\nb.jpg,dog\nc.jp2,cat\n", encoding="utf-8")
    assert len(open_dataset(img, labels=jp2)) == 3
    flags = tmp_path / "flags.csv"
    england, scotland = (
        "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f",
        ("\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"),
    )
    flags.write_text(f"file,label\na.jpg,{england}\nb.jpg,{scotland}\n", encoding="utf-8-sig")
    assert open_dataset(img, labels=flags).classes == [england, scotland]
    notes = tmp_path / "notes.csv"
    notes.write_text("file,label\na.jpg,cat\nb.jpg,dog\n总计,2张\n制表人,张三\n日期,2024-01-01\n审核,李四\n",
                     encoding="utf-8")  # fmt: skip
    with pytest.raises(LabelError) as e:
        open_dataset(img, labels=notes)
    assert str(e.value) == (f"{notes}: line 4: '总计' names no image file, unlike the rows around it (a total or a "
                            "note?): its label '2张' would be a class; delete the row")  # fmt: skip


def test_a_classes_text_file_with_look_alike_names_is_refused(tmp_path: Path):
    # a review's way around the list check: the same two names in a .txt of class names (YOLO, PaddleClas)
    images(tmp_path / "img" / "cat", "a.png")
    names = tmp_path / "classes.txt"
    names.write_text("cat\ndog\ndog\u200b\n", encoding="utf-8")
    with pytest.raises(UsageError) as e:
        open_dataset(tmp_path / "img", classes=str(names))
    assert str(e.value) == (f"{names}: classes 1 'dog' and 2 'dog\\u200b' (U+200B ZERO WIDTH SPACE) differ only in "
                            "invisible characters, spaces, character width or look-alike letters and marks; write them alike")  # fmt: skip


def test_a_subtotal_row_among_the_images_is_refused_and_names_without_suffixes_are_not(tmp_path: Path):
    # a review's way around the total-row check: a '小计' row between two groups of images made '5张' a class
    img = images(tmp_path / "img", *(f"{i}.jpg" for i in range(20)))
    for i in range(20, 40):
        images(tmp_path / "more", f"{i}.jpg")  # one grey each (the helper's levels stop at 25 images)
        (tmp_path / "more" / f"{i}.jpg").rename(img / f"{i}.jpg")
    rows = [f"{i}.jpg,{'cat' if i < 20 else 'dog'}\n" for i in range(40)]
    path = tmp_path / "l.csv"
    path.write_text("file,label\n" + "".join(rows[:20]) + "小计,20张\n" + "".join(rows[20:]), encoding="utf-8")
    with pytest.raises(LabelError) as e:
        open_dataset(img, labels=path)
    assert str(e.value) == (f"{path}: line 22: '小计' names no image file, unlike the rows around it (a total or a "
                            "note?): its label '20张' would be a class; delete the row")  # fmt: skip
    bare = images(tmp_path / "bare", *(f"{i}.jpg" for i in range(20)), *(f"x{i}" for i in range(5)))
    bare_rows = [r for i in range(5) for r in (*rows[4 * i : 4 * i + 2], f"x{i},dog\n", *rows[4 * i + 2 : 4 * i + 4])]
    path.write_text("file,label\n" + "".join(bare_rows), encoding="utf-8")  # a fifth, among the others
    assert len(open_dataset(bare, labels=path)) == 25  # files of those names, not subtotals


@pytest.mark.parametrize("codec, labels, reading, option", [
    ("euc-kr", ["고양이", "비행기", "말"], "as CP949 (Korean) it reads '고양이, 비행기, 말'", "encoding='cp949'"),
    ("shift_jis", ["ねこ", "いぬ", "とり"], "as CP932 (Japanese) it reads 'ねこ, いぬ, とり'", "encoding='cp932'"),
    ("cp1252", ["crème", "brûlée", "château"], "as Windows-1252 it reads 'crème, brûlée, château'", "encoding='cp1252'"),
    ("cp1251", ["корова", "лошадь", "рыба"], "as Windows-1251 (Cyrillic) it reads 'корова, лошадь, рыба'",
     "encoding='cp1251'"),
    ("cp1253", ["γάτα", "σκύλος", "λουλούδι"], "as Windows-1253 (Greek) it reads 'γάτα, σκύλος, λουλούδι'",
     "encoding='cp1253'"),
])  # fmt: skip
def test_korean_japanese_western_cyrillic_and_greek_tables_are_not_read_as_gbk(tmp_path: Path, codec, labels, reading,
                                                                                option):  # fmt: skip
    # the attack: these tables decode as GBK or Big5 too (고양이 as 绊剧捞, корова as Big5 膰豂瘔), and were read so,
    # the classes permuted, and check said '0 problems'
    names = [f"{i}.jpg" for i in range(6)]
    root = images(tmp_path / "img", *names)
    table = tmp_path / "labels.csv"
    table.write_bytes(
        ("file,label\r\n" + "".join(f"{n},{labels[i % 3]}\r\n" for i, n in enumerate(names))).encode(codec)
    )
    with pytest.raises(LabelError) as err:
        open_dataset(root, labels=table)
    assert str(err.value).startswith(f"{table}: cannot tell the encoding apart: as ")
    assert reading in str(err.value) and f" or {option} (--encoding) to say which" in str(err.value)
    ds = open_dataset(root, labels=table, encoding=option.split("'")[1])
    assert ds.classes == sorted(labels) and list(ds.targets) == [sorted(labels).index(labels[i % 3]) for i in range(6)]


@pytest.mark.parametrize("codec, labels, message", [
    ("cp1250", ["želva"], "cannot tell the encoding apart: as GBK it reads '瀍lva'; as Windows-1250 (Central European) "
     "it reads 'želva'; pass encoding='gbk' or encoding='cp1250' (--encoding) to say which"),
    ("cp1250", ["jabłko", "dziecko"], "cannot tell the encoding apart: as GBK it reads 'jab砶o'; as Big5 it reads "
     "'jab趾o'; as Windows-1250 (Central European) it reads 'jabłko'; pass encoding='gbk' or encoding='big5' or "
     "encoding='cp1250' (--encoding) to say which"),
    # (Windows-1252's reading, 'koèka', scores close behind: named too, as the Western 'naïve' is when Windows-1250
    # reads it 'naďve' and scores higher)
    ("cp1250", ["želva", "kočka", "pes"], "cannot tell the encoding apart: as GBK it reads '瀍lva, ko鑛a'; as "
     "Windows-1250 (Central European) it reads 'želva, kočka'; as Windows-1252 it reads 'želva, koèka'; pass "
     "encoding='gbk' or encoding='cp1250' or encoding='cp1252' (--encoding) to say which"),
    ("cp1254", ["kadın"], "not UTF-8, UTF-16, GBK/GB18030 or Big5 text by the look of it: as GBK it reads 'kad齨', "
     "where '齨' is a letter of another encoding joined with the letter after it; pass encoding= (--encoding) to name "
     "its encoding (encoding='gbk' if that reading is right)"),
    ("cp1257", ["žuvis", "šuo", "katė"], "not UTF-8, UTF-16, GBK/GB18030 or Big5 text; pass encoding= (--encoding) to "
     "name it"),
])  # fmt: skip
def test_tables_whose_legacy_reading_is_implausible_are_refused(codec, labels, message):
    # the attack: Central European, Turkish and Baltic tables paired up into GBK characters and were read so
    from datakit.labels import detect_text_encoding

    raw = ("file,label\r\n" + "".join(f"{i}.jpg,{labels[i % len(labels)]}\r\n" for i in range(6))).encode(codec)
    with pytest.raises(LabelError) as err:
        detect_text_encoding(raw)
    assert str(err.value) == message


def test_chinese_tables_beside_the_new_rivals_are_still_read():
    from datakit.labels import detect_text_encoding

    # rare characters (birds, wild animals, elements), a letter beside a character, short labels of common characters
    # that Windows-1251 reads as capitals (油污: УНОЫ) and Windows-1253 as accented Greek (茯苓: άςάί): GBK, as before
    for words in (("鹌鹑", "鸬鹚", "鹦鹉", "鸳鸯"), ("猞猁", "貂", "獾", "狍子"), ("砷", "硒", "碲", "锑"), ("A类", "B类", "C类"),
                  ("A型", "B型", "AB型", "O型"), ("T恤", "衬衫", "卫衣"), ("京A", "沪B", "粤C"), ("猫cat", "狗dog"),
                  ("油污", "裂纹"), ("葡萄", "桃子"), ("茯苓", "雾"), ("BMW寶馬", "Benz賓士")):  # fmt: skip
        raw = ("file,label\r\n" + "".join(f"{i}.jpg,{w}\r\n" for i, w in enumerate(words))).encode("gbk")
        assert detect_text_encoding(raw).name == "gbk", words

    body = "file,label\r\n0.jpg,{}\r\n1.jpg,{}\r\n2.jpg,{}\r\n"
    for codec, labels in (("gbk", ("猫", "狗", "鸟")), ("gbk", ("飞机", "汽车", "轮船")), ("gbk", ("合格", "不合格", "良品")),
                          ("big5", ("貓", "狗", "鳥")), ("big5", ("汽車", "機車", "卡車"))):  # fmt: skip
        assert detect_text_encoding(body.format(*labels).encode(codec)).name == codec


def test_grades_and_list_marks_in_a_gbk_table_are_not_read_as_big5(tmp_path: Path):
    # the attack: GBK tables of Ⅰ级/Ⅱ级/Ⅲ级/正常 (or ①②③, α型) under an English header were read as Big5: the classes
    # '淏都', 'ｉ撰', ... in another order, and check said nothing
    from datakit.labels import detect_text_encoding

    names = [f"{i}.png" for i in range(8)]
    root = images(tmp_path / "img", *names)
    labels = ["Ⅰ级", "Ⅱ级", "Ⅲ级", "正常"] * 2
    table = tmp_path / "gbk.csv"
    table.write_bytes(("file,label\n" + "".join(f"{n},{v}\n" for n, v in zip(names, labels))).encode("gbk"))
    ds = open_dataset(root, labels=table)
    assert ds.classes == ["Ⅰ级", "Ⅱ级", "Ⅲ级", "正常"] and list(ds.targets) == [0, 1, 2, 3, 0, 1, 2, 3]
    body = "file,label\r\n" + "".join(f"{i}.jpg,{{}}\r\n" for i in range(4))
    for codec, cells in (("gbk", ("①", "②", "③", "其他")), ("gbk", ("Ⅰ", "Ⅱ", "Ⅲ", "无")), ("gbk", ("α型", "β型", "α型", "γ型")),
                         ("gbk", ("Ⅰ型", "Ⅰ型", "Ⅱ型", "Ⅱ型")), ("gbk", ("★", "★★", "★★★", "5℃")), ("gbk", ("10μm", "20μm", "50μm", "10μm")),
                         ("big5", ("Ａ", "Ｂ", "Ｃ", "Ａ")), ("big5", ("Ⅰ", "Ⅱ", "Ⅲ", "Ⅳ")), ("big5", ("Ⅰ級", "Ⅱ級", "正常", "正常"))):  # fmt: skip
        assert detect_text_encoding(body.format(*cells).encode(codec)).name == codec, cells
    # labels in CJK brackets or quotes (【猫】, “好”): a pair Big5 reads as two symbols (▽癡▼, ※疑§), refused or misread
    for cells in (("【猫】", "【狗】", "【鸟】", "【猫】"), ("《猫》", "《狗》", "《猫》", "《狗》"), ("「男」", "「女」", "「男」", "「女」"),
                  ("“好”", "“坏”", "“好”", "“坏”"), ("‘猫’", "‘狗’", "‘猫’", "‘狗’"), ("〔甲〕", "〔乙〕", "〔甲〕", "〔乙〕")):  # fmt: skip
        assert detect_text_encoding(body.format(*cells).encode("gbk")).name == "gbk", cells
    # symbols alone whose other reading is brackets alone (Big5 ○, ● is GBK 〕, 〈): no label is a lone bracket
    for cells in (("○", "●", "○", "●"), ("★", "★★", "★★★", "★")):
        assert detect_text_encoding(body.format(*cells).encode("big5")).name == "big5", cells


def test_a_headerless_table_of_more_than_two_columns_is_refused_not_read_from_the_second(tmp_path: Path):
    # the attack: '0.png,0,dog' lines without a header (the class index beside the name): the second column was taken
    # as the labels and the third dropped without a word, where the same lines as a .txt list were refused
    names = [f"{i}.png" for i in range(4)]
    root = images(tmp_path / "img", *names)
    rows = [(n, i, "dog" if i % 2 == 0 else "cat") for i, n in enumerate(names)]
    (tmp_path / "l.csv").write_text("".join(f"{n},{i},{c}\n" for n, i, c in rows))
    (tmp_path / "l.tsv").write_text("".join(f"{n}\t{i}\t{c}\n" for n, i, c in rows))
    wb = Workbook()
    wb.active.title = "train"
    for r in rows:
        wb.active.append(list(r))
    book = tmp_path / "l.xlsx"
    wb.save(book)
    for table in ("l.csv", "l.tsv"):
        with pytest.raises(LabelError) as err:
            open_dataset(root, labels=tmp_path / table)
        assert str(err.value) == (f"{tmp_path / table}, line 1: no header line, and '0.png', '0', 'dog' are more than a "
                                  "file and a label: add a header line naming the columns (file,label,...)")  # fmt: skip
    with pytest.raises(LabelError) as err:
        open_dataset(root, labels=book)
    assert str(err.value) == (f"{book}, sheet 'train', row 1: no header row, and '0.png', '0', 'dog' are more than a "
                              "file and a label: add a header row naming the columns (file, label, ...)")  # fmt: skip
    (tmp_path / "two.csv").write_text("".join(f"{n},{c},\n" for n, _, c in rows))  # an empty third: two columns
    ds = open_dataset(root, labels=tmp_path / "two.csv")
    assert ds.classes == ["cat", "dog"] and list(ds.targets) == [1, 0, 1, 0]


def test_a_formula_s_decimal_is_read_as_excel_shows_it(tmp_path: Path):
    # the attack: =1.1+2.2 is saved as 3.3000000000000003, which Excel shows and exports as 3.3; it was a 4th class
    import zipfile

    names = [f"{i}.jpg" for i in range(6)]
    root = images(tmp_path / "img", *names)
    plain = workbook(tmp_path / "plain.xlsx", {"train": [[n, v] for n, v in zip(names, [1.1, 2.2, 3.3] * 2)]})
    book = tmp_path / "labels.xlsx"
    with zipfile.ZipFile(plain) as zin, zipfile.ZipFile(book, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "xl/worksheets/sheet1.xml":
                old = b'<c r="B7" t="n"><v>3.3</v></c>'
                assert old in data
                data = data.replace(old, b'<c r="B7"><f>1.1+2.2</f><v>3.3000000000000003</v></c>')
            zout.writestr(item, data)
    csv = tmp_path / "labels.csv"
    csv.write_text("file,label\n" + "".join(f"{n},{v}\n" for n, v in zip(names, ["1.1", "2.2", "3.3"] * 2)))
    for table in (book, csv):
        ds = open_dataset(root, labels=table)
        assert ds.classes == ["1.1", "2.2", "3.3"] and list(ds.targets) == [0, 1, 2, 0, 1, 2]


def test_a_sheet_of_a_label_column_and_an_unknown_file_header_is_said_whichever_split_is_asked_for(tmp_path, caplog):
    # the attack: a 'Sheet2' headed 图片地址 | 类别 beside 'train': with split='train' it left the class map without a
    # word; 图片路径 (image path) was no known file header at all
    root = images(tmp_path / "img", *[f"{i}.png" for i in range(5)])
    for header, classes in (("图片路径", ["ant", "cat", "dog", "emu"]), ("图片地址", ["cat", "dog", "emu"])):
        wb = Workbook()
        wb.active.title = "train"
        for row in (["file", "label"], ["0.png", "cat"], ["1.png", "dog"], ["2.png", "emu"]):
            wb.active.append(row)
        other = wb.create_sheet("Sheet2")
        for row in ([header, "类别"], ["3.png", "ant"], ["4.png", "dog"]):
            other.append(row)
        book = tmp_path / f"{header}.xlsx"
        wb.save(book)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="datakit"):
            ds = open_dataset(root, labels=book, split="train")
        assert ds.classes == classes and len(ds) == 3
        said = [r.getMessage() for r in caplog.records if "Sheet2" in r.getMessage()]
        assert said == ([] if header == "图片路径" else [
            f"{book}, sheet 'Sheet2', row 1: skipped: a label column ('类别', column B) but no file-name column found; "
            "if its rows are samples, name its file column as the other sheets name theirs (or give file_column=, "
            "--file-column)"
        ])  # fmt: skip


def test_small_decimals_in_a_workbook_are_read_without_an_exponent_as_excel_shows_them(tmp_path: Path):
    # the attack: 0.00005 and 0.0001 as labels: the workbook gave the classes '0.0001', '5e-05' (in that order), the
    # CSV Excel writes of it '0.00005', '0.0001'
    names = ["0.jpg", "1.jpg"]
    root = images(tmp_path / "img", *names)
    book = workbook(tmp_path / "labels.xlsx", {"train": [[names[0], 0.00005], [names[1], 0.0001]]})
    csv = tmp_path / "labels.csv"
    csv.write_text("file,label\n0.jpg,0.00005\n1.jpg,0.0001\n")
    for table in (book, csv):
        ds = open_dataset(root, labels=table)
        assert ds.classes == ["0.00005", "0.0001"] and list(ds.targets) == [0, 1]


def test_a_utf32_table_is_read_and_a_bad_byte_behind_a_bom_is_named(tmp_path: Path):
    root = images(tmp_path / "img", "000.jpg", "001.jpg", "002.jpg")
    body = "file,label\r\n000.jpg,猫\r\n001.jpg,狗\r\n002.jpg,猫\r\n"
    wide = tmp_path / "utf32.csv"
    wide.write_bytes(body.encode("utf-32"))  # with its byte-order mark, which starts like UTF-16's
    ds = open_dataset(root, labels=wide)
    assert ds.classes == sorted(["猫", "狗"])
    assert list(ds.targets) == [ds.classes.index(c) for c in ("猫", "狗", "猫")]
    mixed = tmp_path / "bom_gbk.csv"
    mixed.write_bytes(b"\xef\xbb\xbf" + body.encode("gbk"))  # 猫 in GBK is valid UTF-8 (è); 狗 is not
    with pytest.raises(LabelError) as err:
        open_dataset(root, labels=mixed)
    assert str(err.value) == (f"{mixed}, line 3: byte 0xb9 is not valid utf-8-sig text; pass encoding= (--encoding) "
                              "to name the right one")  # fmt: skip


@pytest.mark.parametrize("kind", ["xlsx", "csv"])
def test_check_of_one_split_does_not_call_another_split_s_unlabelled_file_unlisted(tmp_path: Path, capsys, kind):
    # the attack: a val row with a blank label made `check --split train` say "not in the table: .../v.png" (exit
    # 1), where open_dataset(split="train") opens fine and the blank cell is val's own problem
    root = images(tmp_path / "img", "a.png", "b.png", "v.png", "w.png")
    if kind == "xlsx":
        table = workbook(tmp_path / "s.xlsx", {"train": [["a.png", "cat"], ["b.png", "dog"]],
                                               "val": [["v.png", None], ["w.png", "cat"]]})  # fmt: skip
    else:
        table = tmp_path / "s.csv"
        table.write_text("file,label,split\na.png,cat,train\nb.png,dog,train\nv.png,,val\nw.png,cat,val\n")
    assert main(["check", str(root), "--labels", str(table), "--split", "train", "-q"]) == 0
    assert capsys.readouterr().err == ""
    assert len(open_dataset(root, labels=table, split="train")) == 2
    assert main(["check", str(root), "--labels", str(table), "-q"]) == 1  # the whole table: val's blank cell
    where = "sheet 'val', row 2" if kind == "xlsx" else "line 4"
    assert capsys.readouterr().err.splitlines() == [f"{table}, {where}: file 'v.png' has no label",
                                                    "split 'val' has no samples of class 'dog'"]  # fmt: skip


def test_two_file_columns_naming_different_images_are_refused_not_one_taken(tmp_path: Path, caplog):
    # the attack: `path,filename,label` with path sub/a.png and filename a.png, both files on disk: the filename
    # column was read (first in the known names), sample 0 was img/a.png where the table's path meant sub/a.png;
    # the header twice, or two tables side by side, the same
    root = images(tmp_path / "img", "a.png", "b.png", "c.png")
    images(root / "sub", "a.png", "x.png")
    csv = tmp_path / "l.csv"
    csv.write_text("path,filename,label\nsub/a.png,a.png,cat\nb.png,b.png,dog\n")
    with caplog.at_level(logging.WARNING):
        ds = open_dataset(root, labels=csv)
    # the same names, one column with their folders: which the disk holds is not known from the table, so the file
    # column is read as before (a table whose other column records where the files were, /kaggle/input/..., C:\...,
    # is read so too), and the other is said
    assert [f for f, _ in ds.samples] == [str(root / "a.png"), str(root / "b.png")]
    assert (f"{csv}: 'path' names the same images with their folders (line 2: 'sub/a.png' beside 'a.png'); 'filename' "
            "is read, as the file column (file_column='path' reads those)") in caplog.messages  # fmt: skip
    assert open_dataset(root, labels=csv, file_column="path").samples[0] == (str(root / "sub" / "a.png"), 0)
    book = workbook(tmp_path / "l.xlsx", {"train": [["a.png", "sub/a.png", "cat"], ["c.png", "c.png", "dog"]]},
                    header=("filename", "path", "label"))  # fmt: skip
    table = read_labels(book)
    assert table.file_column == "filename" and list(table.files) == ["a.png", "c.png"]
    assert table.notes == [f"{book}, sheet 'train': 'path' names the same images with their folders (row 2: "
                           "'sub/a.png' beside 'a.png'); 'filename' is read, as the file column (file_column='path' "
                           "reads those)"]  # fmt: skip
    elsewhere = tmp_path / "elsewhere.csv"  # where the files were on another machine, a URL, a converted copy
    elsewhere.write_text("filename,path,image_name,label\na.png,/kaggle/input/ds/a.png,a.jpg,cat\n"
                         "b.png,https://cdn.example.com/b.png,b.jpg,dog\n")  # fmt: skip
    assert list(read_labels(elsewhere).files) == ["a.png", "b.png"] and read_labels(elsewhere).notes == []
    # names that are other files, or folders now on one side, now on the other: which column is meant is not known
    other = tmp_path / "other.csv"
    other.write_text("path,filename,label\nsub/a.png,a.png,cat\nb.png,c.png,dog\n")
    with pytest.raises(LabelError) as err:
        open_dataset(root, labels=other)
    assert str(err.value) == (f"{other}, line 3: the columns 'filename' and 'path' both name the image file, but "
                              "different ones ('c.png' and 'b.png'); name the one to use with file_column= "
                              "(--file-column)")  # fmt: skip
    other_book = workbook(tmp_path / "w.xlsx", {"train": [["sub/a.png", "a.png", "cat"], ["x.png", "c.png", "dog"]]},
                          header=("path", "filename", "label"))  # fmt: skip
    with pytest.raises(LabelError) as err:
        open_dataset(root, labels=other_book)
    assert str(err.value) == (f"{other_book}, sheet 'train', row 3: the columns 'filename' and 'path' both name the "
                              "image file, but different ones ('c.png' and 'x.png'); name the one to use with "
                              "file_column= (--file-column)")  # fmt: skip
    twice = tmp_path / "twice.csv"
    twice.write_text("file,label,file\nb.png,dog,b.png\nsub/a.png,cat,c.png\n")
    for kw in ({}, {"file_column": "file"}):  # naming it cannot choose between the two
        with pytest.raises(LabelError) as err:
            open_dataset(root, labels=twice, **kw)
        assert str(err.value) == (f"{twice}, line 3: the column 'file' is there twice (columns A and C), naming "
                                  "different image files ('sub/a.png' and 'c.png'); rename the one not meant")  # fmt: skip
    # the same file spelled two ways, and a column named like a file column that holds no file names, are read
    same = tmp_path / "same.csv"
    same.write_text("file,label,path,name\n./b.png,dog,b.png,Alice\nsub\\a.png,cat,sub/a.png,Bob\n")
    ds = open_dataset(root, labels=same)
    assert [Path(f).name for f, _ in ds.samples] == ["b.png", "a.png"] and ds.classes == ["cat", "dog"]
    labels_twice = tmp_path / "labels_twice.csv"
    labels_twice.write_text("file,label,label\nb.png,dog,cat\nsub/a.png,cat,dog\n")
    for kw in ({}, {"label_column": "label"}):
        with pytest.raises(LabelError) as err:
            open_dataset(root, labels=labels_twice, **kw)
        assert str(err.value) == (f"{labels_twice}: the two columns named 'label' both name the class but number "
                                  "the classes differently (class 0 is 'cat' by the first, 'dog' by the second); "
                                  "rename the one not meant")  # fmt: skip


def _damaged_workbooks(tmp_path: Path) -> dict[str, Path]:
    import zipfile

    good = workbook(tmp_path / "good.xlsx", {"train": [["a.png", "cat"]]}, header=("file", "label"))
    src = zipfile.ZipFile(good)
    sheet = "xl/worksheets/sheet1.xml"
    cell = b'<c r="B2" t="inlineStr"><is><t>cat</t></is></c>'
    assert cell in src.read(sheet)
    edits = {
        "badxml": lambda name, data: data.replace(b"</sheetData>", b"<x>&</x></sheetData>") if name == sheet else data,
        "badsst": lambda name, data: data.replace(cell, b'<c r="B2" t="s"><v>7</v></c>') if name == sheet else data,
    }  # fmt: skip
    out = {}
    for kind, edit in edits.items():
        out[kind] = tmp_path / f"{kind}.xlsx"
        with zipfile.ZipFile(out[kind], "w") as z:
            for info in src.infolist():
                z.writestr(info.filename, edit(info.filename, src.read(info)))
    return out


def test_a_damaged_sheet_is_one_line_naming_it_not_a_traceback_nor_skipped(tmp_path: Path, capsys):
    # the attack: damaged sheet XML, or a cell pointing past the shared strings: calamine's XmlError/CalamineError
    # came out as a traceback (`datakit check`, exit 1), openpyxl's IndexError bare; a damaged sheet among others
    # was skipped with a note, its rows (and its labels in the class map) left out
    root = images(tmp_path / "img", "a.png")
    books = _damaged_workbooks(tmp_path)
    with pytest.raises(LabelError) as err:
        read_labels(books["badsst"])
    assert str(err.value) == (f"{books['badsst']}, sheet 'train': cannot be read (CalamineError: Cell string index "
                              "not found in shared strings table); open the workbook in Excel and save it again, or "
                              "delete the sheet if it holds no labels")  # fmt: skip
    with pytest.raises(LabelError) as err:
        read_labels(books["badsst"], engine="openpyxl")
    assert str(err.value) == (f"{books['badsst']}, sheet 'train': cannot be read (IndexError: list index out of "
                              "range); open the workbook in Excel and save it again, or delete the sheet if it holds "
                              "no labels")  # fmt: skip
    with pytest.raises(LabelError, match=r"^.*badxml\.xlsx, sheet 'train': cannot be read \(XmlError: "):
        read_labels(books["badxml"])
    assert main(["check", str(root), "--labels", str(books["badxml"]), "-q"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{books['badxml']}, sheet 'train': cannot be read (XmlError: ") and err.count("\n") == 1


def test_classes_given_a_label_table_or_nothing_is_a_usage_error(tmp_path: Path, capsys):
    # the attack: `--classes train.csv` (the table itself) read its rows as classes ('file,label', 'a.png,cat'),
    # an empty file as 0 classes: "classes 'cat', 'dog' not among the 3 classes given", exit 1, the wrong lead
    root = images(tmp_path / "img", "a.png", "b.png")
    (tmp_path / "val.txt").write_text("a.png cat\nb.png dog\n")
    (tmp_path / "train.csv").write_text("file,label\na.png,cat\nb.png,dog\n")
    (tmp_path / "empty.txt").write_text("# classes\n\n")
    (tmp_path / "ok.txt").write_text("cat\ndog\n")
    val = str(tmp_path / "val.txt")
    assert main(["check", str(root), "--labels", val, "--classes", str(tmp_path / "train.csv"), "-q"]) == 2
    assert capsys.readouterr().err == (
        f"datakit check: error: {tmp_path / 'train.csv'}, line 2: 'a.png' is an image file's name: this is a label "
        "table, not a list of classes; classes= takes a pack, a .json list or a text file of class names, one a "
        "line, class 0 first\n"
    )
    assert main(["check", str(root), "--labels", val, "--classes", str(tmp_path / "empty.txt"), "-q"]) == 2
    assert capsys.readouterr().err == (f"datakit check: error: {tmp_path / 'empty.txt'}: no class names in it (a "
                                       "text file of class names holds one a line, class 0 first)\n")  # fmt: skip
    with pytest.raises(UsageError) as err:
        open_dataset(root, labels=val, classes=[])
    assert str(err.value) == "classes=: no class names (an empty list); give the classes in index order, class 0 first"
    assert open_dataset(root, labels=val, classes=tmp_path / "ok.txt").classes == ["cat", "dog"]


def test_an_xlsx_under_an_xls_name_is_told_to_be_renamed(tmp_path: Path):
    book = workbook(tmp_path / "good.xlsx", {"train": [["a.png", "cat"]]}, header=("file", "label"))
    renamed = tmp_path / "labels.xls"
    renamed.write_bytes(book.read_bytes())
    with pytest.raises(LabelError) as err:
        read_labels(renamed)
    assert (
        str(err.value) == f"{renamed}: an .xlsx workbook (a zip container) under an .xls name; rename it to labels.xlsx"
    )


def test_a_table_naming_a_file_longer_than_a_name_may_be_is_one_line(tmp_path: Path):
    # the attack: --file-column pointing at a note column of 91 Chinese characters (273 bytes): a bare OSError
    # (File name too long) from a probe of the folder, naming no table
    img = images(tmp_path / "img", "a.png")
    path = tmp_path / "labels.csv"
    note = "很长的说明文字" * 13
    path.write_text(f"文件名,标签,备注\na.png,猫,{note}\n", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        open_dataset(img, labels=path, file_column="备注")
    assert str(e.value) == (
        f"{path}: none of the files the table names (1 looked for, first {note!r}) is under {img}; names are relative "
        "to the table's folder, or to the folder given with it"
    )


@pytest.mark.parametrize(
    ("name", "raw", "line", "char"),
    [
        ("plain.csv", b"file,label\n0.png,a\rb\n1.png,c\n", 2, "U+000D"),
        ("quoted.csv", b'file,label\n0.png,a\rb\n"1.png",c\n', 2, "U+000D"),
        ("plain.txt", b"0.png a\x0cb\n1.png c\n", 1, "U+000C"),
        ("wide.txt", "0.png a\x0cb\n1.png\u3000c\n".encode(), 1, "U+000C"),
        ("sep.txt", "0.png c\n1.png a\u2028b\n".encode(), 2, "U+2028"),
        ("nel.lst", "0.png c\n1.png a\x85b\n".encode(), 2, "U+0085"),
        ("after.csv", b'file,label\n0.png,say"hi\n1.png,a\rb\n', 3, "U+000D"),  # after a quote that opens nothing
    ],
)
def test_a_control_character_in_a_line_is_refused_whichever_reader_runs(tmp_path: Path, name, raw, line, char):
    # the attack: 'a\rb' was the class 'a\rb' in one file and split into two lines (line 3: file 'b' has no label)
    # once a quote elsewhere sent the file to the other reader; '\x0c' in a list likewise, after a U+3000
    path = tmp_path / name
    path.write_bytes(raw)
    with pytest.raises(LabelError) as e:
        read_labels(path)
    what = (
        "a carriage return (U+000D) inside the line, not at its end, which one reader takes for a line break and "
        "another for part of a name or label; remove it"
        if char == "U+000D"
        else f"a control character ({char}) in the line, which no file name or label holds and readers split lines "
        "on differently; remove it"
    )
    assert str(e.value) == f"{path}, line {line}: {what}"


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("crcrlf.txt", b"a.jpg 0\r\r\nb.jpg 1\r\r\n"),  # a CRLF file converted to CRLF again
        ("lastcr.txt", b"a.jpg 0\r\nb.jpg 1\r"),
        ("space.txt", b"a.jpg 0\r \nb.jpg 1\n"),
        ("mac.csv", b'file,label,note\r"a.jpg",0,"line1\nline2"\rb.jpg,1,x\r'),  # Excel's "CSV (Macintosh)"
        ("note.csv", b'file,label,note\r\na.jpg,0,"x\ry"\r\nb.jpg,1,z\r\n'),  # a CR in a quoted note
        # a quote inside an unquoted field is a character (the CSV reader's rule), not the start of a quoted one
        ("mid.csv", b'file,label,note\na.jpg,0,say"hi\nb.jpg,1,"x\ry"\n'),
        ("dosz.txt", b"a.jpg 0\nb.jpg 1\n\x1a\n"),  # DOS's end mark on a line of its own
        ("dosz.csv", b"file,label\r\na.jpg,0\r\nb.jpg,1\r\n\x1a\r\n"),
        # the end mark under more line ends than the tail that is looked at first, and after a long text
        ("doszlong.txt", b"a.jpg 0\nb.jpg 1\n\x1a" + b"\r\n" * 3000),
        ("doszend.csv", b"file,label,note\na.jpg,0," + b"x" * 9000 + b"\nb.jpg,1,y\n\x1a\r\n"),
    ],
)
def test_carriage_returns_that_end_lines_or_sit_in_quotes_are_read(tmp_path: Path, name: str, raw: bytes):
    # the regression round: each of these read right before the control-character rule, and was refused by it
    path = tmp_path / name
    path.write_bytes(raw)
    table = read_labels(path)
    assert (table.files.tolist(), table.labels.tolist()) == (["a.jpg", "b.jpg"], [0, 1])


def test_word_soft_breaks_in_a_quoted_note_and_a_dos_end_mark_are_read(tmp_path: Path):
    path = tmp_path / "t.csv"
    path.write_bytes(b'file,label,note\na.png,cat,"from Word\x0bsoft break"\nb.png,dog,x\n\x1a')
    table = read_labels(path)
    assert (table.files.tolist(), table.labels.tolist()) == (["a.png", "b.png"], ["cat", "dog"])
    path = tmp_path / "t.txt"
    path.write_bytes(b"a.png cat\r\nb.png dog\r\n\x1a")
    table = read_labels(path)
    assert (table.files.tolist(), table.labels.tolist()) == (["a.png", "b.png"], ["cat", "dog"])


def test_a_val_list_from_two_on_leads_with_the_training_classes(tmp_path: Path, caplog):
    # the attack: val.txt labelled 2 and 3 (train 1..3): the refusal's first advice, remap_labels=True, gave val
    # 2 -> 0 where train has 2 -> 1, without a word
    img = images(tmp_path / "img", "6.png", "7.png")
    (tmp_path / "img" / "val.txt").write_text("6.png 2\n7.png 3\n", encoding="utf-8")
    path = tmp_path / "img" / "val.txt"
    with pytest.raises(LabelError) as e:
        open_dataset(img, labels=path)
    assert str(e.value) == (
        f"{path}: integer labels are 2..3, not 0..1; passed on as they are they would index past the 2 outputs of a "
        "classifier (CUDA: 'device-side assert triggered'). A split kept in a file of its own (a val list without "
        "some class) takes the training split's classes: classes=train.classes (pack-lmdb --classes train.lmdb), "
        "since remapping it alone would shift its indices; for a table of every class, remap_labels=True "
        "(--remap-labels) maps 2..3 to 0..1 in order, or fix the table (first outside: 2 at line 1)"
    )
    with caplog.at_level(logging.WARNING, logger="datakit"):
        ds = open_dataset(img, labels=path, remap_labels=True)
    assert ds.targets.tolist() == [0, 1]
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: integer labels 2..3 remapped to 0..1 in order (remap_labels, --remap-labels), though they start at "
        "2: if this is a split lacking some classes, it takes the training split's indices only with classes= "
        "(--classes)"
    ]
    assert open_dataset(img, labels=path, classes=["1", "2", "3"]).targets.tolist() == [1, 2]


def test_negative_integer_labels_remapped_are_warned_of(tmp_path: Path, caplog):
    # the attack: labels -1, 0, 1 (-1: an unlabelled image, ignore_index) remapped to 0..2 without a word
    img = images(tmp_path / "img", "a.png", "b.png", "c.png")
    path = tmp_path / "l.txt"
    path.write_text("a.png -1\nb.png 0\nc.png 1\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="datakit"):
        assert open_dataset(img, labels=path, remap_labels=True).targets.tolist() == [0, 1, 2]
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: integer labels -1..1 remapped to 0..2 in order (remap_labels, --remap-labels), though they start "
        "at -1 (-1: often 'no label', not a class): if this is a split lacking some classes, it takes the training "
        "split's indices only with classes= (--classes)"
    ]


@pytest.mark.parametrize("body", [b"file,label\n0.jpg,c\x00at\n1.jpg,dog\n2.jpg,dog\n",
                                  b'file,label\n0.jpg,"c\x00at"\n1.jpg,dog\n2.jpg,dog\n'])  # fmt: skip
def test_a_nul_inside_a_table_label_is_refused_naming_the_line(tmp_path: Path, body: bytes):
    # the attack: 'c\x00at' was a class of its own, and check said '0 problems'
    root = images(tmp_path / "img", "0.jpg", "1.jpg", "2.jpg")
    table = tmp_path / "labels.csv"
    table.write_bytes(body)
    with pytest.raises(LabelError) as err:
        open_dataset(root, labels=table)
    assert (
        str(err.value)
        == f"{table}, line 2: a NUL character (U+0000) in the line, which no file name, label or note holds; remove it"
    )


@pytest.mark.parametrize("split", ["train", None])
def test_a_split_sheet_whose_label_column_is_not_found_is_refused_whichever_split_is_read(tmp_path: Path, split):
    # the attack: with split='train', a 'val' sheet headed 文件名 | 备注 | 标注 was left out of the class map without a
    # word; once its header was fixed, its class 'ant' moved 'cat' from index 0 to 1
    wb = Workbook()
    wb.active.title = "train"
    for row in (("文件名", "标签"), ("a.jpg", "cat"), ("b.jpg", "dog")):
        wb.active.append(row)
    val = wb.create_sheet("val")
    for row in (("文件名", "备注", "标注"), ("c.jpg", "x", "ant"), ("d.jpg", "y", "cat")):
        val.append(row)
    path = tmp_path / "labels.xlsx"
    wb.save(path)
    with pytest.raises(LabelError) as err:
        read_labels(path, split=split)
    tail = ("the class map every split shares takes this sheet's labels too: name its label column as the other sheets "
            "name theirs (or give label_column=, --label-column), or leave the sheet out with sheets=") if split else "name it with label_column= (--label-column)"  # fmt: skip
    assert str(err.value) == f"{path}, sheet 'val', row 1: no label column found among '文件名', '备注', '标注'; {tail}"
    # left out with sheets=, or a test sheet of file names alone (no labels yet, nothing beside them): read as before
    assert read_labels(path, sheets=["train"], split=split).class_values == ("cat", "dog")
    wb.remove(val)
    test = wb.create_sheet("test")
    for row in (("文件名",), ("e.jpg",), ("f.jpg",)):
        test.append(row)
    wb.save(path)
    assert read_labels(path, split="train").class_values == ("cat", "dog")


def test_multi_label_cells_are_noted_as_classes_of_combinations(tmp_path: Path):
    # the attack: rows 'cat,dog', 'dog', 'cat', 'dog,cat' gave the classes ['cat', 'cat,dog', 'dog', 'dog,cat'], and
    # check said '0 problems'. Classes of combinations can be meant (sleet as 'rain,snow'): said, not refused
    table = tmp_path / "l.csv"
    table.write_text('file,label\n0.jpg,"cat,dog"\n1.jpg,dog\n2.jpg,cat\n3.jpg,"dog,cat"\n', encoding="utf-8")
    t = read_labels(table)
    assert t.class_values == ("cat,dog", "dog", "cat", "dog,cat") and t.notes == [
        f"{table}: label 'cat,dog' at line 2 is a list of other labels ('cat', 'dog'), and a class of its own: datakit "
        "reads one class per image (a multi-label table needs a collate and a loss of your own)"
    ]
    book = workbook(tmp_path / "l.xlsx", {"train": [["0.jpg", "猫、狗"], ["1.jpg", "狗、猫"], ["2.jpg", "鸟"]]})
    assert read_labels(book).notes == [
        f"{book}: labels '猫、狗' at sheet 'train', row 2 and '狗、猫' at sheet 'train', row 3 list the same labels in "
        "another order, and are two classes: datakit reads one class per image (a multi-label table needs a collate "
        "and a loss of your own)"
    ]
    # the next attack: tags joined by '|' (MovieLens) or ';' had no note
    for sep in ("|", ";", " ; "):
        table.write_text(f'file,label\n0.jpg,clear\n1.jpg,"clear{sep}primary"\n2.jpg,primary\n', encoding="utf-8")
        assert read_labels(table).notes == [
            f"{table}: label 'clear{sep}primary' at line 3 is a list of other labels ('clear', 'primary'), and a class "
            "of its own: datakit reads one class per image (a multi-label table needs a collate and a loss of your own)"
        ]
    # ImageNet's words: a class named with its synonyms beside a class of one of them is no list of labels; nor is
    # a name of two words beside classes of each ('ski mask' beside 'ski' and 'mask'), nor 'AC/DC', nor 'salt+pepper'
    table.write_text(
        "file,label\n0.jpg,ski\n1.jpg,mask\n2.jpg,ski mask\n3.jpg,AC\n4.jpg,DC\n5.jpg,AC/DC\n"
        "6.jpg,salt\n7.jpg,pepper\n8.jpg,salt+pepper\n9.jpg,John Smith\n10.jpg,Smith John\n",
        "utf-8",
    )
    assert read_labels(table).notes == []
    # a name of two words is a label of a list
    table.write_text('file,label\n0.jpg,golden retriever\n1.jpg,cat\n2.jpg,"golden retriever,cat"\n', "utf-8")
    assert read_labels(table).notes == [
        f"{table}: label 'golden retriever,cat' at line 4 is a list of other labels ('golden retriever', 'cat'), and "
        "a class of its own: datakit reads one class per image (a multi-label table needs a collate and a loss of "
        "your own)"
    ]
    table.write_text('file,label\n0.jpg,maillot\n1.jpg,"maillot, tank suit"\n2.jpg,"tench, Tinca tinca"\n', "utf-8")
    assert read_labels(table).notes == []


def test_tags_apart_by_spaces_are_noted_as_classes_of_combinations(tmp_path: Path):
    # the attack: Planet's labels ('clear primary', 'haze primary water', ...: 17 tags) gave a class per combination
    # of tags, and check said 0 problems
    import itertools

    weather, land = ("clear", "haze", "partly_cloudy"), ("primary", "water", "agriculture", "road")
    labels = [" ".join((w, *ls)) for w in weather for n in (1, 2, 3) for ls in itertools.combinations(land, n)]
    assert len(labels) == 42
    table = tmp_path / "train_v2.csv"
    table.write_text("image_name,tags\n" + "".join(f"train_{i}.jpg,{v}\n" for i, v in enumerate(labels)), "utf-8")
    t = read_labels(table)
    assert len(t.class_values) == 42 and t.notes == [
        f"{table}: 42 labels are lists of 7 words apart by spaces (first 'clear primary' at line 2): tags of a "
        "multi-label table, each combination a class of its own; datakit reads one class per image (a multi-label "
        "table needs a collate and a loss of your own)"
    ]
    # class names of words: more words than half the labels (a car's make, model and year; ImageNet's names)
    cars = [f"{make} {model} {year}" for make, model in (("Audi", "A4"), ("Audi", "A6"), ("BMW", "X5"), ("BMW", "M3"),
                                                         ("Ford", "Focus")) for year in (2011, 2012)]  # fmt: skip
    table.write_text("file,label\n" + "".join(f"{i}.jpg,{v}\n" for i, v in enumerate(cars)), "utf-8")
    assert read_labels(table).notes == []
    names = ["tiger cat", "tiger", "tiger shark", "Egyptian cat", "Persian cat", "great white shark", "tabby", "lynx"]
    table.write_text("file,label\n" + "".join(f"{i}.jpg,{v}\n" for i, v in enumerate(names)), "utf-8")
    assert read_labels(table).notes == []
    # names of a grid, one shape each: a card's rank and suit, a colour and an object
    ranks = ("ace", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "jack", "queen", "king")
    cards = [f"{r} of {s}" for r in ranks for s in ("clubs", "diamonds", "hearts", "spades")] + ["joker"]
    things = [f"{c} {o}" for c in ("red", "green", "blue", "yellow") for o in ("cube", "ball", "cone", "ring")]
    for grid in (cards, things):
        table.write_text("file,label\n" + "".join(f"{i}.jpg,{v}\n" for i, v in enumerate(grid)), "utf-8")
        assert read_labels(table).notes == []


def test_percent_cells_read_as_excel_shows_them_like_the_csv_it_saves(tmp_path: Path):
    # the attack: number cells formatted 0% read as 0.05, 0.1, 0.5 where Excel shows (and its CSV holds) 5%, 10%, 50%:
    # the workbook and its CSV gave the classes in other orders
    names = [f"img{i}.jpg" for i in range(6)]
    root = images(tmp_path / "img", *names)
    wb = Workbook()
    ws = wb.active
    ws.title = "train"
    ws.append(["file", "label", "share"])
    for i, (v, fmt) in enumerate([(0.05, "0%"), (0.1, "0%"), (0.5, "0%"), (0.125, "0%"), (1, "0%"), (0.0512, "0.0%")]):
        ws.append([names[i], v, v])
        ws.cell(ws.max_row, 2).number_format = fmt
    book = tmp_path / "l.xlsx"
    wb.save(book)
    csv = tmp_path / "l.csv"
    csv.write_text("file,label\n" + "".join(f"{n},{v}\n" for n, v in zip(names, ["5%", "10%", "50%", "13%", "100%",
                                                                                  "5.1%"])))  # fmt: skip
    for engine in ("calamine", "openpyxl"):
        t = read_labels(book, engine=engine)
        assert t.labels.tolist() == ["5%", "10%", "50%", "13%", "100%", "5.1%"], engine
    a, b = open_dataset(root, labels=book), open_dataset(root, labels=csv)
    assert a.classes == b.classes == ["10%", "100%", "13%", "5%", "5.1%", "50%"]
    assert a.targets.tolist() == b.targets.tolist() == [3, 0, 5, 2, 1, 4]
    # the regression round: optional digits, a space, a section for negatives; a value past Excel's; a sheet whose
    # other columns are formatted so too (only the labels' are read as shown)
    for fmt, v, shown in (("0.0#%", 0.0512, "5.12%"), ("0.0#%", 0.05, "5.0%"), ("0.0 %", 0.05, "5.0 %"),
                          ("0%_);(0%)", 0.05, "5%"), ("#%", 0.05, "5%"), ("#,##0%", 123.45, "12,345%"),
                          ("#,##0.00%", -12.3456, "-1,234.56%"), ("0.00\\ %", 0.05, "5.00 %"),
                          ("0.00%;(0.00%)", -0.05, "(5.00%)"), ("0%;[Red]-0%", -0.13, "-13%"), ('0%;"neg"', -0.1, "-0.1"), ("0.##%", 0.5, "50.%"),
                          ("0%", 1e30, None)):  # fmt: skip
        ws.cell(2, 2).value = v
        ws.cell(2, 2).number_format = fmt
        wb.save(book)
        got = read_labels(book).labels.tolist()[0]
        assert got == shown if shown else got.endswith("%"), (fmt, got)  # 1e30: read, not "cannot be read"


def _two_row_header(path: Path) -> Path:
    """A group title row over the header, 标签 merged down over both rows, as Chinese workbooks are laid out."""
    wb = Workbook()
    ws = wb.active
    ws.title = "train"
    for r in [("图片信息", None, "标签"), ("文件名", "大小", None), ("0.jpg", 1, 0), ("1.jpg", 0, 1), ("2.jpg", 1, 0),
              ("3.jpg", 0, 1)]:  # fmt: skip
        ws.append(r)
    ws.merge_cells("A1:B1")
    ws.merge_cells("C1:C2")
    wb.save(path)
    return path


def test_a_label_header_merged_down_from_a_title_row_is_the_label_column(tmp_path: Path):
    # once: 大小, the one other named cell of the header row, was read as the labels, and check said 0 problems
    root = images(tmp_path / "img", "0.jpg", "1.jpg", "2.jpg", "3.jpg")
    book = _two_row_header(tmp_path / "t.xlsx")
    (tmp_path / "t.csv").write_text("图片信息,,标签\n文件名,大小,\n0.jpg,1,0\n1.jpg,0,1\n2.jpg,1,0\n3.jpg,0,1\n",
                                    encoding="utf-8")  # fmt: skip
    for table in (book, tmp_path / "t.csv"):
        ds = open_dataset(root, labels=table)
        assert ds.classes == ["0", "1"] and list(ds.targets) == [0, 1, 0, 1], table


def test_a_header_below_a_title_row_naming_a_file_column_is_the_header(tmp_path: Path):
    # Excel's CSV of a merged group title (图片 over 文件名 | 大小 | 类别): once refused, and --label-column 类别 too
    root = images(tmp_path / "img", "0.jpg", "1.jpg", "2.jpg", "3.jpg")
    table = tmp_path / "g.csv"
    table.write_text("图片,,\n文件名,大小,类别\n0.jpg,1,猫\n1.jpg,2,狗\n2.jpg,1,猫\n3.jpg,2,狗\n", encoding="utf-8")
    for named in (None, "类别"):
        ds = open_dataset(root, labels=table, label_column=named)
        assert ds.classes == ["狗", "猫"] and list(ds.targets) == [1, 0, 1, 0]
    assert main(["check", "-q", str(root), "--labels", str(table), "--label-column", "类别"]) == 0


def test_the_one_named_column_is_not_the_labels_beside_an_unnamed_one_or_when_it_describes(tmp_path: Path, capsys):
    root = images(tmp_path / "img", "0.jpg", "1.jpg", "2.jpg", "3.jpg")
    unnamed = tmp_path / "u.csv"
    unnamed.write_text("文件名,大小,\n0.jpg,1,0\n1.jpg,0,1\n2.jpg,1,0\n3.jpg,0,1\n", encoding="utf-8")
    remarks = tmp_path / "r.csv"
    remarks.write_text(
        "文件名,备注\n" + "".join(f"{i % 4}.jpg,拍摄于2023年{i + 1}月\n" for i in range(24)), encoding="utf-8"
    )
    assert main(["check", "-q", str(root), "--labels", str(unnamed)]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{unnamed}, line 1: no label column found among '文件名', '大小': column C holds values under no header beside "
        "'大小' (column B), and which of them are the labels the table does not say; give the label column a header "
        "(标签, label), or name it with label_column= (--label-column)"
    ]
    assert main(["check", "-q", str(root), "--labels", str(remarks)]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{remarks}, line 1: no label column found among '文件名', '备注': '备注' (column B) describes the images, it "
        "does not class them; name the label column with label_column= (--label-column)"
    ]
    few = tmp_path / "few.csv"  # in a few rows, remarks and labels cannot be told apart: read, as before
    few.write_text("文件名,备注\n0.jpg,逆光\n1.jpg,模糊\n2.jpg,遮挡\n3.jpg,逆光\n", encoding="utf-8")
    assert open_dataset(root, labels=few).classes == ["模糊", "逆光", "遮挡"]
    # labels repeat, remarks seldom do: a column named 'id' or 备注 of cat, dog is read as the labels
    (tmp_path / "id.csv").write_text("filename,id\n0.jpg,cat\n1.jpg,dog\n2.jpg,cat\n3.jpg,dog\n", encoding="utf-8")
    ds = open_dataset(root, labels=tmp_path / "id.csv")
    assert ds.classes == ["cat", "dog"] and list(ds.targets) == [0, 1, 0, 1]
    book = workbook(tmp_path / "u.xlsx", {"train": [["0.jpg", 1, 0], ["1.jpg", 0, 1], ["2.jpg", 1, 0], ["3.jpg", 0, 1]]},
                    header=("文件名", "大小"))  # fmt: skip
    with pytest.raises(LabelError, match=r"sheet 'train', row 1: no label column found among '文件名', '大小': column C "
                       r"holds values under no header beside '大小' \(column B\)"):  # fmt: skip
        open_dataset(root, labels=book)


def test_check_refuses_integer_labels_with_gaps_without_saying_they_were_remapped(tmp_path: Path, capsys):
    root = images(tmp_path / "img", "0.jpg", "1.jpg", "2.jpg", "3.jpg")
    table = tmp_path / "gap.csv"
    table.write_text("file,label\n0.jpg,0\n1.jpg,2\n2.jpg,5\n3.jpg,0\n", encoding="utf-8")
    assert main(["check", "-q", str(root), "--labels", str(table)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "remapped" not in err[0]
    assert err[0].startswith(f"{table}: integer labels are {{0, 2, 5}}, not 0..2;")
    assert "remap_labels=True (--remap-labels) maps {0, 2, 5} to 0..2 in order" in err[0]


def test_a_hidden_label_column_beside_a_shown_one_is_refused_and_alone_noted(tmp_path: Path, capsys):
    # once: 标签 hidden in Excel, 新标签 shown beside it: the hidden column's labels were read, with no word
    root = images(tmp_path / "img", "0.jpg", "1.jpg", "2.jpg", "3.jpg")

    def book(name: str, third: str, hide: str = "B") -> Path:
        wb = Workbook()
        ws = wb.active
        ws.title = "train"
        ws.append(["文件名", "标签", third])
        for i, (a, b) in enumerate([("猫", "狗"), ("狗", "猫"), ("猫", "狗"), ("狗", "猫")]):
            ws.append([f"{i}.jpg", a, b])
        ws.column_dimensions[hide].hidden = True
        wb.save(tmp_path / name)
        return tmp_path / name

    relabelled = book("h.xlsx", "新标签")
    assert main(["check", "-q", str(root), "--labels", str(relabelled)]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{relabelled}, sheet 'train', row 1: the label column '标签' (column B) is hidden in Excel, and '新标签' "
        "(column C) beside it is shown: which one holds the labels? name it with label_column= (--label-column)"
    ]
    ds = open_dataset(root, labels=relabelled, label_column="新标签")
    assert [ds.classes[t] for t in ds.targets] == ["狗", "猫", "狗", "猫"]
    remarks = book("r.xlsx", "备注")
    assert main(["check", "-q", str(root), "--labels", str(remarks)]) == 0
    assert read_labels(remarks).notes == [f"{remarks}, sheet 'train': the label column '标签' (column B) is hidden in "
                                          "Excel; its labels are read"]  # fmt: skip
    for k, about in enumerate(["labeler", "label_time", "label_confidence"]):  # columns about the labels
        annotator = book(f"a{k}.xlsx", about)
        assert main(["check", "-q", str(root), "--labels", str(annotator)]) == 0, about
    capsys.readouterr()
    shown = book("s.xlsx", "新标签", hide="C")  # the other one hidden: the label column read, nothing to say
    assert main(["check", "-q", str(root), "--labels", str(shown)]) == 0 and capsys.readouterr().err == ""


def test_row_numbers_a_stray_remark_and_a_table_above_do_not_change_which_column_holds_the_labels(tmp_path: Path):
    # the regression round: pandas' row numbers under a blank header (to_csv, to_excel with index=True), one remark
    # in a cell with no header, a title word over an empty column, and a second table under the first were refused
    # or read otherwise
    import pandas as pd

    root = images(tmp_path / "img", "0.jpg", "1.jpg", "2.jpg", "3.jpg")
    frame = pd.DataFrame({"filename": [f"{i}.jpg" for i in range(4)], "species": ["cat", "dog", "cat", "dog"]})
    frame.to_csv(tmp_path / "p.csv")
    frame.to_excel(tmp_path / "p.xlsx")
    frame.sample(frac=1, random_state=1).to_csv(tmp_path / "shuffled.csv")  # the index after sample(), a split
    frame.assign(**{"": "ok"}).to_csv(tmp_path / "constant.csv", index=False)  # one value under no header
    pd.concat([frame[:2], frame[2:]]).to_csv(tmp_path / "concat.csv")  # the index repeats: 0, 1, 0, 1
    frame.set_axis(["a", "b", "c", "d"]).to_excel(tmp_path / "named.xlsx")  # an index of names under no header
    tables = {"p.csv": None, "p.xlsx": None, "shuffled.csv": None, "constant.csv": None, "concat.csv": None,
              "named.xlsx": None,
              "title.csv": ",label\nfilename,,species\n0.jpg,,cat\n1.jpg,,dog\n2.jpg,,cat\n3.jpg,,dog\n",
              "both.csv": "图片,,标签\n文件名,大小,类别\n0.jpg,1,cat\n1.jpg,2,dog\n2.jpg,1,cat\n3.jpg,2,dog\n"}  # fmt: skip
    workbook(tmp_path / "stray.xlsx", {"train": [["0.jpg", "cat", None, "看不清"], ["1.jpg", "dog"], ["2.jpg", "cat"],
                                                 ["3.jpg", "dog"]]}, header=("文件名", "品种"))  # fmt: skip
    tables["stray.xlsx"] = None
    for name, text in tables.items():
        if text is not None:
            (tmp_path / name).write_text(text, encoding="utf-8")
        ds = open_dataset(root, labels=tmp_path / name)
        got = {Path(ds.name(i)).name: ds.classes[t] for i, t in enumerate(ds.targets)}
        assert got == {"0.jpg": "cat", "1.jpg": "dog", "2.jpg": "cat", "3.jpg": "dog"}, name
    stacked = tmp_path / "stacked.csv"  # two tables one under the other: the first one's header is the header
    stacked.write_text("filename,species\n0.jpg,cat\n1.jpg,dog\n,,\nfilename,label\n2.jpg,cat\n", encoding="utf-8")
    assert read_labels(stacked, validate=False).files.tolist() == ["0.jpg", "1.jpg", "2.jpg"]
    with pytest.raises(LabelError) as e:  # the second header is no sample of class 'label': refused, named
        read_labels(stacked)
    assert str(e.value) == (f"{stacked}, line 5: 'filename', 'label': the header of another table (tables joined, "
                            "with other column names or order?): remove it, and check that the rows under it have "
                            "their columns in this table's order")  # fmt: skip


def test_a_title_row_over_a_header_of_two_label_columns_is_no_header(tmp_path: Path):
    # the attack: 标签 merged over the first-pass and reviewed labels (初标, 复核) of the header under it; the title
    # row was taken as the header, and the real header read as sample '文件名' of a class '初标' (3 outputs for 2
    # classes), the labels silently the first pass's
    root = images(tmp_path / "img", "a.png", "b.png", "c.png", "d.png")
    rows = [["a.png", "cat", "cat"], ["b.png", "cat", "dog"], ["c.png", "dog", "dog"], ["d.png", "dog", "cat"]]
    book = workbook(tmp_path / "t.xlsx", {"train": [["文件名", "初标", "复核"], *rows]}, header=("图片", "标签"))
    table = tmp_path / "t.csv"
    table.write_text("图片,标签,\n文件名,初标,复核\n" + "".join(",".join(r) + "\n" for r in rows), encoding="utf-8")
    for path, where in ((book, "sheet 'train', row 2"), (table, "line 2")):
        with pytest.raises(LabelError) as e:
            open_dataset(root, labels=path)
        assert str(e.value) == (f"{path}, {where}: no label column found among '文件名', '初标', '复核'; name it with "
                                "label_column= (--label-column)")  # fmt: skip
        ds = open_dataset(root, labels=path, label_column="复核")
        assert ds.classes == ["cat", "dog"] and list(ds.targets) == [0, 1, 1, 0], path
    # a first sample whose file is named like a file column ('image', no suffix) under a whole header is a sample:
    # a row filling no column the header leaves blank
    plain = tmp_path / "p.csv"
    plain.write_text("file,label\nimage,cat\nb1,dog\nb2,cat\n", encoding="utf-8")
    t = read_labels(plain, validate=False)
    assert t.files.tolist() == ["image", "b1", "b2"] and t.labels.tolist() == ["cat", "dog", "cat"]


def test_a_name_listed_in_both_unicode_forms_says_to_rename_one_of_two_files(tmp_path: Path):
    # the attack: dog/café.jpg on disk in both forms (two images), each listed: refused as if one row were listed
    # twice, with no word of the two files
    nfc, nfd = "dog/caf\u00e9.jpg", "dog/cafe\u0301.jpg"
    table = tmp_path / "t.csv"
    table.write_text(f"file,label\n{nfc},a\n{nfd},b\n", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        read_labels(table)
    assert str(e.value).splitlines()[-1].strip() == (
        f"{table}, line 3: file {nfd!r} (NFD: 'dog/cafe\\u0301.jpg') is listed again in another Unicode form (first "
        "at line 2, NFC); a table's name finds a file in either form, so two files named alike but for it are one to "
        "a table: rename one"
    )


def test_a_workbook_of_one_sheet_is_not_told_of_other_sheets(tmp_path: Path, capsys):
    # once: "name its file column as the other sheets name theirs" for a workbook of one sheet, --file-column unsaid
    root = images(tmp_path / "img", "0.jpg", "1.jpg")
    book = workbook(tmp_path / "one.xlsx", {"train": [["0.jpg", "a"], ["1.jpg", "b"]]}, header=("image_id", "label"))
    assert main(["check", "-q", str(root), "--labels", str(book)]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{book}, sheet 'train', row 1: a label column ('label', column B) but no file-name column found; name it "
        "with file_column= (--file-column)"
    ]
    ds = open_dataset(root, labels=book, file_column="image_id")
    assert ds.classes == ["a", "b"] and list(ds.targets) == [0, 1]


def test_a_table_of_another_machines_absolute_paths_says_which_prefix_to_drop(tmp_path: Path):
    # once: "names are relative to the table's folder" for D:\data\img\0.jpg, which is no relative name
    root = images(tmp_path / "img", "0.jpg", "1.jpg")
    table = tmp_path / "win.csv"
    table.write_text("file,label\nD:\\data\\img\\0.jpg,0\nD:\\data\\img\\1.jpg,1\n", encoding="utf-8")
    with pytest.raises(LabelError) as err:
        open_dataset(root, labels=table)
    assert str(err.value) == (f"{table}: none of the files the table names (2 looked for, first 'D:/data/img/0.jpg') "
                              f"is under {root}: the table names paths on a Windows drive, another machine's; {root} "
                              "holds '0.jpg': write the names without 'D:/data/img/', relative to the folder")  # fmt: skip


def test_a_list_of_comma_separated_lines_says_it_looks_like_a_table(tmp_path: Path):
    table = tmp_path / "c.txt"
    table.write_text("0.jpg,0\n1.jpg,1\n", encoding="utf-8")
    with pytest.raises(LabelError) as err:
        read_labels(table)
    assert str(err.value).splitlines()[1].strip() == (
        f"{table}, line 1: '0.jpg,0' has no label (expected 'path label'): its parts are separated by ',', as in a "
        "table; name the file .csv with a header line (file,label), or separate them by a space"
    )


def test_a_workbook_whose_tables_are_all_hidden_says_so(tmp_path: Path, capsys):
    # the attack: the 'train' and 'val' sheets hidden, a visible 'notes' sheet: check's one problem was "sheet
    # 'notes': no file-name column found", beside a note that reading the hidden sheets "would add the classes
    # 'cat', 'dog' and every index after it would move" (there were no others)
    from datakit.cli import main

    wb = Workbook()
    notes = wb.active
    notes.title = "notes"
    notes.append(["hello"])
    for name, rows in (("train", [["0.jpg", "cat"], ["1.jpg", "dog"]]), ("val", [["2.jpg", "cat"], ["3.jpg", "dog"]])):
        ws = wb.create_sheet(name)
        ws.append(["file", "label"])
        for r in rows:
            ws.append(r)
        ws.sheet_state = "hidden"
    book = tmp_path / "l.xlsx"
    wb.save(book)
    root = images(tmp_path / "img", "0.jpg", "1.jpg", "2.jpg", "3.jpg")
    assert main(["check", str(root), "--labels", str(book)]) == 1
    assert capsys.readouterr().err == (
        f"{book}: no visible sheet holds a table of files and labels; the hidden sheets 'train', 'val' may "
        "(include_hidden=True, --include-hidden, reads them)\n"
    )
    assert main(["check", str(root), "--labels", str(book), "--include-hidden"]) == 0
    assert capsys.readouterr().out.endswith("4 samples checked, 0 problems\n")


@pytest.mark.parametrize("kind", ["csv", "xlsx"])
def test_a_header_again_in_other_case_is_skipped_and_another_tables_header_refused(tmp_path: Path, kind: str):
    # the attack: 'File,Label,Split' under 'file,label,split' (two tables joined) was a data row: class 'Label' took
    # index 0 and moved cat and dog to 1 and 2 in split 'train', without a word; 'Filename,Class,Split' did the same,
    # and 'file,split,label' gave the rows under it their splits as labels
    img = images(tmp_path / "img", "0.jpg", "1.jpg", "2.jpg")

    def table(name: str, second: str, last: str) -> Path:
        rows = [r.split(",") for r in ("file,label,split", "0.jpg,cat,train", "1.jpg,dog,train", second, last)]
        if kind == "csv":
            (tmp_path / f"{name}.csv").write_text("".join(",".join(r) + "\n" for r in rows))
            return tmp_path / f"{name}.csv"
        return workbook(tmp_path / f"{name}.xlsx", {"train": rows[1:]}, header=tuple(rows[0]))

    where = (lambda p, n: f"{p}, line {n}") if kind == "csv" else (lambda p, n: f"{p}, sheet 'train', row {n}")
    same = table("same", "File,Label,Split", "2.jpg,cat,val")
    ds = open_dataset(img, labels=same, split="train")
    assert ds.class_to_idx == {"cat": 0, "dog": 1} and ds.targets.tolist() == [0, 1]
    what = "line" if kind == "csv" else "row"
    assert read_labels(same).notes == [f"{where(same, 4)}: the header {what} again (tables joined?): skipped"]
    for name, second, last, shown in (("syn", "Filename,Class,Split", "2.jpg,cat,val", "'Filename', 'Class'"),
                                      ("order", "file,split,label", "2.jpg,val,cat", "'file', 'split'")):  # fmt: skip
        path = table(name, second, last)
        with pytest.raises(LabelError) as e:
            open_dataset(img, labels=path, split="train")
        assert str(e.value) == (f"{where(path, 4)}: {shown}: the header of another table (tables joined, with other "
                                "column names or order?): remove it, and check that the rows under it have their "
                                "columns in this table's order")  # fmt: skip


def test_a_blank_line_between_classes_is_said(tmp_path: Path, caplog):
    # the attack: classes.txt 'cat', '', 'dog', 'zebra' (line k, class k-1 to its writer) read as cat, dog, zebra
    # without a word, where a lone '#' line in its place was said
    img = images(tmp_path / "img", "0.jpg", "1.jpg")
    (tmp_path / "val.csv").write_text("file,label\n0.jpg,cat\n1.jpg,zebra\n")
    (tmp_path / "classes.txt").write_text("\ncat\n\r\ndog\nzebra\n\n \n")  # blank lines before and after: no note
    with caplog.at_level(logging.WARNING, logger="datakit"):
        ds = open_dataset(img, labels=tmp_path / "val.csv", classes=tmp_path / "classes.txt")
    assert ds.classes == ["cat", "dog", "zebra"] and [int(t) for t in ds.targets] == [0, 2]
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'classes.txt'}: blank line between classes (line 3) skipped: each class after one is one index "
        "lower than its line; if a blank line stands for an unused index, give the classes as a .json list"
    ]
    (tmp_path / "two.txt").write_text("cat\n\ndog\n\n\nzebra\n")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="datakit"):
        open_dataset(img, labels=tmp_path / "val.csv", classes=tmp_path / "two.txt")
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'two.txt'}: blank lines between classes (lines 2, 4, 5) skipped: each class after one is one "
        "index lower than its line; if a blank line stands for an unused index, give the classes as a .json list"
    ]
    # blank lines before and after the classes, or around a comment that heads a section: no note
    (tmp_path / "ends.txt").write_text("\n\n# animals\ncat\n\n# pets\n\ndog\n\n# more\nzebra\n\n\n")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="datakit"):
        assert open_dataset(img, labels=tmp_path / "val.csv", classes=tmp_path / "ends.txt").classes == [
            "cat", "dog", "zebra"]  # fmt: skip
    assert caplog.records == []


def test_a_class_list_comment_that_is_a_class_and_a_header_of_other_names(tmp_path: Path, caplog):
    # the attack: a class list written from the classes ['#', 'a', 'b'] lost '#' as a comment line: a and b were
    # 0 and 1 against 1 and 2 in training; a first line 'name' (pandas' to_csv of a column) was class 0
    img = images(tmp_path / "img", "0.jpg", "1.jpg", "2.jpg", "3.jpg")
    (tmp_path / "train.txt").write_text("0.jpg #\n1.jpg a\n2.jpg b\n")
    (tmp_path / "classes.txt").write_text("#\na\nb\n")
    (tmp_path / "val.txt").write_text("3.jpg a\n")
    with pytest.raises(LabelError) as e:
        open_dataset(img, labels=tmp_path / "train.txt", classes=tmp_path / "classes.txt")
    assert str(e.value) == (f"{tmp_path / 'classes.txt'}, line 1: '#' starts with # and is read as a comment, but the "
                            "labels hold a class of that name: every class after it would move one index on; give "
                            "the classes as a .json list")  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="datakit"):
        ds = open_dataset(img, labels=tmp_path / "val.txt", classes=tmp_path / "classes.txt")
    assert ds.class_to_idx == {"a": 0, "b": 1}
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'classes.txt'}: '#' (line 1) read as a comment, not a class; if it is a class, give the classes "
        "as a .json list: every class after it is one index on"
    ]
    # a comment of words, or a banner of #, is one: no note
    (tmp_path / "words.txt").write_text("##########\n# the classes\n#classes\n##########\na\nb\n")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="datakit"):
        assert open_dataset(img, labels=tmp_path / "val.txt", classes=tmp_path / "words.txt").classes == ["a", "b"]
    assert caplog.records == []
    (tmp_path / "v2.txt").write_text("0.jpg cat\n1.jpg dog\n")
    # a real class 0 named as a tag or a type (tag, price, shelf), with no sample in this split: read, as before
    (tmp_path / "shelf.txt").write_text("tag\nprice\nshelf\n")
    (tmp_path / "v3.txt").write_text("0.jpg price\n1.jpg shelf\n")
    ds = open_dataset(img, labels=tmp_path / "v3.txt", classes=tmp_path / "shelf.txt")
    assert (ds.classes, ds.targets.tolist()) == (["tag", "price", "shelf"], [1, 2])
    for head in ("name", "cls", "species", "label_name", "标签名"):
        (tmp_path / "c2.txt").write_text(f"{head}\ncat\ndog\n")
        with pytest.raises(LabelError) as e:
            open_dataset(img, labels=tmp_path / "v2.txt", classes=tmp_path / "c2.txt")
        assert str(e.value).startswith(f"{tmp_path / 'c2.txt'}, line 1: {head!r} is a column's name (a header copied "
                                       "with the column?) and no label holds it"), head  # fmt: skip


def test_a_headerless_list_of_label_then_path_is_said_to_be_so(tmp_path: Path):
    # the attack: '0 0.jpg' lines were told "the header names the columns the other way round? ('path' is read as
    # the files, ...)": the list has no header, and no 'path' column to rename
    (tmp_path / "rev.txt").write_text("0 0.jpg\n1 1.jpg\n")
    with pytest.raises(LabelError) as e:
        read_labels(tmp_path / "rev.txt")
    assert str(e.value) == (f"{tmp_path / 'rev.txt'}: every label is an image's file name ('0.jpg', first at line 1) "
                            "and no file name is ('0'): the lines are 'label path' where a list's are 'path label' (or "
                            "a header 'path label' names the columns the other way round)? write each line as its "
                            "image's path, then its label")  # fmt: skip


@pytest.mark.parametrize("source", ["folder", "zip"])
def test_a_lone_class_of_another_split_whose_file_is_not_there_is_noted(tmp_path: Path, caplog, source: str):
    # the attack: a database's type row 'string,string,string' under the header made class 'string' (split
    # 'string'): with split='train' the train model got one output more, cat and dog kept their indices by luck
    # only, and nothing was said (the note for a lone missing class looked at train's rows alone)
    img = images(tmp_path / "img", "0.jpg", "1.jpg", "2.jpg", "3.jpg")
    if source == "zip":
        import zipfile

        with zipfile.ZipFile(tmp_path / "img.zip", "w") as z:
            for n in ("0.jpg", "1.jpg", "2.jpg", "3.jpg"):
                z.write(img / n, n)
        img = tmp_path / "img.zip"
    (tmp_path / "t.csv").write_text("file,label,split\nstring,string,string\n0.jpg,cat,train\n1.jpg,dog,train\n"
                                    "2.jpg,cat,val\n3.jpg,bird,val\n")  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="datakit"):
        ds = open_dataset(img, labels=tmp_path / "t.csv", split="train")
    assert ds.class_to_idx == {"bird": 0, "cat": 1, "dog": 2, "string": 3}
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 't.csv'}, line 2: class 'string' is this row's alone, in split 'string', and its file 'string' "
        "is not there: a class with no image (a type or example row under the header?) that split 'train' counts as "
        "one output more; datakit check lists every missing file"
    ]
    # bird, val's alone, is there: no word of it
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="datakit"):
        open_dataset(img, labels=tmp_path / "t.csv", split="val")
    assert [r.getMessage().split(": class ")[1][:8] for r in caplog.records] == ["'string'"]


@pytest.mark.parametrize("kind", ["csv", "xlsx"])
def test_a_first_sample_named_as_the_header_is_refused_not_dropped(tmp_path: Path, capsys, kind: str):
    # the attack: a table with no header line whose files have no image extension ('img001,cat') was refused with
    # "name it with file_column=": doing so took the first sample for the header, and it was lost without a word
    # (check: "3 samples checked, 0 problems", exit 0)
    path = tmp_path / f"noext.{kind}"

    def save(rows):
        if kind == "csv":
            path.write_text("".join(f"{f},{lab}\n" for f, lab in rows), encoding="utf-8")
            return str(path)
        wb = Workbook()
        wb.active.title = "train"
        for row in rows:
            wb.active.append(row)
        wb.save(path)
        return f"{path}, sheet 'train'"

    rows = [["img001", "cat"], ["img002", "dog"], ["img003", "cat"], ["img004", "dog"]]
    where = save(rows)
    msg = (f"{where}: the row taken for the header ('img001', 'cat') is a sample: 'img001' is named as the files below "
           "it are; a table without a header line would lose its first sample so: add a header line naming the "
           "columns (file,label)")  # fmt: skip
    with pytest.raises(UsageError) as e:
        read_labels(path, file_column="img001")
    assert str(e.value) == msg
    assert (
        main(["check", str(tmp_path), "--labels", str(path), "--file-column", "img001", "--label-column", "cat"]) == 2
    )
    assert capsys.readouterr().err == f"datakit check: error: {msg}\n"
    # the regression round: real headers named by the caller are read as before, a label column named as a class
    # ('defect') and the header again below (tables joined) included
    save([["图片编号", "类别"], *rows[1:]])
    t = read_labels(path, file_column="图片编号", label_column="类别")
    assert t.files.tolist() == ["img002", "img003", "img004"] and t.labels.tolist() == ["dog", "cat", "dog"]
    save([["file", "defect"], ["a.png", "defect"], ["b.png", "ok"], ["file", "defect"], ["c.png", "defect"]])
    t = read_labels(path, file_column="file", label_column="defect")
    assert t.files.tolist() == ["a.png", "b.png", "c.png"] and t.labels.tolist() == ["defect", "ok", "defect"]


def test_a_label_number_past_2_53_names_a_fix_the_command_line_has(tmp_path: Path, capsys):
    # the attack: the message said "or read with engine='openpyxl'", an option no command has
    root = images(tmp_path / "img", "a.png", "b.png")
    path = tmp_path / "big.xlsx"
    wb = Workbook()
    wb.active.append(["file", "label"])
    wb.active.append(["a.png", 123456789012345678])
    wb.active.append(["b.png", 1])
    wb.save(path)
    assert main(["check", str(root), "--labels", str(path)]) == 1
    assert (f"{path}, sheet 'Sheet', row 2: label 123456789012345696 is a number cell past 2**53, which this reader "
            "gives as a 64-bit float, no longer exact (two labels could read as one); store the labels as text, or "
            "read it in Python with engine='openpyxl'\n") in capsys.readouterr().err  # fmt: skip


@pytest.mark.parametrize("engine", ["openpyxl", "calamine"])
def test_a_sheet_name_with_a_trailing_space_is_the_split_a_csv_gives(tmp_path: Path, engine: str):
    # the attack: a sheet named 'train ' (a space typed after the name) was the split 'train ', and split='train'
    # was refused; the same value in a CSV's split column is stripped, 'train'
    book = workbook(tmp_path / "s.xlsx", {"train ": [["a.png", "cat"], ["b.png", "dog"]], "val": [["c.png", "cat"]]})
    csv = tmp_path / "s.csv"
    csv.write_text("文件名,标签,split\na.png,cat,train \nb.png,dog,train \nc.png,cat,val\n", encoding="utf-8")
    assert read_labels(book, engine=engine).split_names == read_labels(csv).split_names == ["train", "val"]
    assert read_labels(book, split="train", engine=engine).files.tolist() == ["a.png", "b.png"]
    assert read_labels(csv, split="train").files.tolist() == ["a.png", "b.png"]
    # a name of spaces alone is kept as it is; one that another sheet's gives once stripped is that split too, as
    # the CSV's values 'train' and '  train' are one split (it was a split of its own, which split='train' left out)
    both = workbook(
        tmp_path / "b.xlsx", {"train": [["a.png", "cat"]], "  train": [["b.png", "dog"]], " ": [["c.png", "cat"]]}
    )
    assert read_labels(both, engine=engine).split_names == ["train", " "]
    assert read_labels(both, split="train", engine=engine).files.tolist() == ["a.png", "b.png"]
    csv.write_text("文件名,标签,split\na.png,cat,train\nb.png,dog,  train\nc.png,cat, \n", encoding="utf-8")
    assert read_labels(csv, split="train").files.tolist() == ["a.png", "b.png"]


def test_a_western_table_that_central_european_reads_more_plausibly_is_refused_naming_both(tmp_path: Path):
    # the attack: Excel's Western CSV of 'Ångström' and 'naïve'; Windows-1250 reads 'Ĺngström, naďve' and scores
    # higher, and the refusal offered it alone: following its advice renamed the classes without a word
    root = images(tmp_path / "img", "1.jpg", "2.jpg", "3.jpg")
    table = tmp_path / "labels.csv"
    table.write_bytes("file,label\r\n1.jpg,Ångström\r\n2.jpg,naïve\r\n3.jpg,Ångström\r\n".encode("cp1252"))
    with pytest.raises(LabelError) as err:
        open_dataset(root, labels=table)
    assert str(err.value) == (
        f"{table}: cannot tell the encoding apart: as Big5 it reads '囊gstr闣, na鴳e'; as GBK it reads '舗gstr鰉, "
        "na飗e'; as Windows-1250 (Central European) it reads 'Ĺngström, naďve'; as Windows-1252 it reads 'Ångström, "
        "naïve'; pass encoding='big5' or encoding='gbk' or encoding='cp1250' or encoding='cp1252' (--encoding) to say "
        "which"
    )
    assert open_dataset(root, labels=table, encoding="cp1252").classes == ["naïve", "Ångström"]


@pytest.mark.parametrize("engine", ["calamine", "openpyxl"])
def test_a_header_of_two_rows_with_its_cells_merged_down_is_read_as_its_csv_is(tmp_path: Path, engine: str):
    # the attack: 文件名 and 标签 merged over rows 1-2, a group title 拍摄信息 over the sub-headers 日期 | 地点 of row 2
    # (a layout offices use): row 2 was read as a sample, and the sheet refused ('cell A2 is part of the merged cell
    # A1:A2'), where the CSV Excel saves of it was read
    wb = Workbook()
    ws = wb.active
    ws.title = "train"
    for cell, value in {"A1": "文件名", "B1": "标签", "C1": "拍摄信息", "C2": "日期", "D2": "地点"}.items():
        ws[cell] = value
    for ref in ("A1:A2", "B1:B2", "C1:D1"):
        ws.merge_cells(ref)
    for row in (["001.jpg", "猫", "2024-01-01", "北京"], ["002.jpg", "狗", "2024-01-02", "上海"]):
        ws.append(row)
    wb.save(tmp_path / "two.xlsx")
    table = read_labels(tmp_path / "two.xlsx", engine=engine)
    assert (table.files.tolist(), [str(v) for v in table.labels], table.rows.tolist()) == (
        ["001.jpg", "002.jpg"], ["猫", "狗"], [3, 4])  # fmt: skip
    # the label column's name under a group title (标注信息 over 标签 | 备注): found in the header's second row
    grouped = Workbook()
    ws2 = grouped.active
    ws2.title = "train"
    for cell, value in {"A1": "文件名", "B1": "标注信息", "B2": "标签", "C2": "备注"}.items():
        ws2[cell] = value
    for ref in ("A1:A2", "B1:C1"):
        ws2.merge_cells(ref)
    for row in (["001.jpg", "猫", "x"], ["002.jpg", "狗", ""]):
        ws2.append(row)
    grouped.save(tmp_path / "grouped.xlsx")
    for named in ({}, {"label_column": "标签"}):
        table = read_labels(tmp_path / "grouped.xlsx", engine=engine, **named)
        assert (table.files.tolist(), [str(v) for v in table.labels], table.label_column) == (
            ["001.jpg", "002.jpg"], ["猫", "狗"], "标签")  # fmt: skip
    # a sample row with its file and label cells blank under a header of one row is still refused, naming the cell
    ws.unmerge_cells("A1:A2")
    ws.unmerge_cells("B1:B2")
    ws.merge_cells("A3:A4")
    ws["A3"] = "003.jpg"
    wb.save(tmp_path / "one.xlsx")
    with pytest.raises(LabelError) as err:
        read_labels(tmp_path / "one.xlsx", engine=engine)
    assert "row 4: cell A4 is part of the merged cell A3:A4" in str(err.value)


def test_numbers_written_as_other_programs_write_them_are_numbers_or_refused(tmp_path: Path):
    # the attacks: integer labels 0..11 written in exponent form (pandas' float_format='%e': 1.000000e+01), with a
    # decimal comma (a German locale's CSV: 10,0) or in quotes in a list ('img.png "10"') were class names sorted as
    # text, 20 of 24 targets permuted without a word; R's NA (a missing factor) was a class, every index after it
    # shifted
    names = [f"{i:02d}.png" for i in range(24)]
    root = images(tmp_path / "img", *names)
    table = tmp_path / "labels.csv"
    table.write_text("file,label\n" + "".join(f"{n},{i % 12:e}\n" for i, n in enumerate(names)), encoding="utf-8")
    ds = open_dataset(root, labels=table)
    assert ds.classes == [str(k) for k in range(12)] and list(ds.targets) == [i % 12 for i in range(24)]
    table.write_text("file;label\n" + "".join(f"{n};{i % 12},0\n" for i, n in enumerate(names)), encoding="utf-8")
    with pytest.raises(LabelError) as err:
        open_dataset(root, labels=table)
    assert str(err.value) == (f"{table}: every label is a number written with a decimal comma (first '0,0' at line 2): "
                              "as class names they would sort as text ('10,0' before '2,0'), not as the numbers they "
                              "are; save the table with a decimal point, or write them as whole numbers (2)")  # fmt: skip
    listed = tmp_path / "train.txt"
    listed.write_text("".join(f'img/{n} "{i % 12}"\n' for i, n in enumerate(names)), encoding="utf-8")
    with pytest.raises(LabelError) as err:
        open_dataset(tmp_path, labels=listed)
    assert str(err.value) == (f"{listed}: every label is a number written in quotes (first '\"0\"' at line 1): as "
                              "class names they would sort as text ('\"10\"' before '\"2\"'), not as the numbers they "
                              "are; write them without the quotes")  # fmt: skip
    table.write_text('"","file","label"\n"1","00.png","bird"\n"2","01.png",NA\n"3","02.png","cat"\n', encoding="utf-8")
    with pytest.raises(LabelError) as err:
        read_labels(table)
    assert str(err.value) == (f"{table}, line 3: file '01.png' has no label (the cell holds 'NA', a missing-value "
                              "marker, not a class name; a class really named so is read when classes= (--classes) "
                              "names it)")  # fmt: skip


def _hand_made_book(path: Path, sheet_xml: str, strings: list[str] | None = None, workbook_extra: str = "",
                    sst_attrs: str = "") -> Path:  # fmt: skip
    """A workbook of one sheet 'train' whose sheet XML (inside <sheetData>) is given as it is, as other programs
    than Excel write it."""
    import zipfile

    head = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    ns = ('xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" '
          'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"')  # fmt: skip
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/"
    files = {
        "[Content_Types].xml": head + '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
        '<Override PartName="/xl/worksheets/sheet1.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'
        '<Override PartName="/xl/sharedStrings.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/></Types>',
        "_rels/.rels": head + '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        f'<Relationship Id="rId1" Type="{rel}officeDocument" Target="xl/workbook.xml"/></Relationships>',
        "xl/workbook.xml": head + f'<workbook {ns}><sheets><sheet name="train" sheetId="1" r:id="rId1"/></sheets>'
        f"{workbook_extra}</workbook>",
        "xl/_rels/workbook.xml.rels": head + "<Relationships "
        'xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        f'<Relationship Id="rId1" Type="{rel}worksheet" Target="worksheets/sheet1.xml"/>'
        f'<Relationship Id="rId2" Type="{rel}sharedStrings" Target="sharedStrings.xml"/></Relationships>',
        "xl/worksheets/sheet1.xml": head + f"<worksheet {ns}><sheetData>{sheet_xml}</sheetData></worksheet>",
        "xl/sharedStrings.xml": head + '<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
        f"{sst_attrs}>" + "".join(f"<si><t>{s}</t></si>" for s in strings or []) + "</sst>",
    }
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


def _rewrite_part(book: Path, part: str, old: bytes | None, new: bytes = b"") -> None:
    """``book`` with ``old`` replaced by ``new`` in its ``part`` (``old`` None: the part left out)."""
    import zipfile

    with zipfile.ZipFile(book) as z:
        parts = {n: z.read(n) for n in z.namelist()}
    if old is None:
        del parts[part]
    else:
        parts[part] = parts[part].replace(old, new)
    with zipfile.ZipFile(book, "w") as z:
        for name, data in parts.items():
            z.writestr(name, data)


def _inline(ref: str, text: str, prefix: str = "") -> str:
    return f'<{prefix}c r="{ref}" t="inlineStr"><{prefix}is><{prefix}t>{text}</{prefix}t></{prefix}is></{prefix}c>'


@pytest.mark.parametrize("engine", ["calamine", "openpyxl"])
def test_workbooks_other_programs_write_are_read_or_refused_by_name(tmp_path: Path, engine: str):
    # the attacks: (1) XlsxWriter (pandas' xlsxwriter engine) saves every formula's value as a placeholder 0 and asks
    # Excel to compute them on opening (fullCalcOnLoad): a label column of formulas read as one class '0', every row;
    # (2) the Open XML SDK's x:-prefixed tags hid a label formula without a saved value, a class left out unsaid;
    # (3) a shared-string table declaring 4294967295 strings aborted the interpreter (calamine allocated for them)
    rows = _inline("A1", "file") + _inline("B1", "label")
    formula = '<c r="B2" t="str"><f>IF(1&gt;0,"cat","dog")</f><v>0</v></c>'
    book = _hand_made_book(tmp_path / "placeholder.xlsx", f'<row r="1">{rows}</row><row r="2">{_inline("A2", "a.jpg")}'
                           f"{formula}</row>", workbook_extra='<calcPr fullCalcOnLoad="1"/>')  # fmt: skip
    with pytest.raises(LabelError) as err:
        read_labels(book, engine=engine)
    assert str(err.value) == (f"{book}, sheet 'train', row 2: cell B2 holds a formula (=IF(1>0,\"cat\",\"dog\")) whose "
                              "saved value is a placeholder: the program that wrote the workbook left its formulas for "
                              "Excel to compute when it opens it (fullCalcOnLoad); open the file in Excel and save it, "
                              "so the values are stored")  # fmt: skip
    x = "x:"
    prefixed = (f'<{x}row r="1">{_inline("A1", "file", x)}{_inline("B1", "label", x)}</{x}row>'
                f'<{x}row r="2">{_inline("A2", "a.jpg", x)}<{x}c r="B2"><{x}f>CONCAT("bi","rd")</{x}f></{x}c></{x}row>'
                f'<{x}row r="3">{_inline("A3", "b.jpg", x)}{_inline("B3", "cat", x)}</{x}row>')  # fmt: skip
    book = _hand_made_book(tmp_path / "prefixed.xlsx", prefixed)
    _rewrite_part(book, "xl/worksheets/sheet1.xml", b"<worksheet ",  # the x: prefix bound to the default namespace
                  b'<worksheet xmlns:x="http://schemas.openxmlformats.org/spreadsheetml/2006/main" ')  # fmt: skip
    with pytest.raises(LabelError) as err:
        read_labels(book, engine=engine)
    assert str(err.value) == (f"{book}, sheet 'train', row 2: cell B2 holds a formula (=CONCAT(\"bi\",\"rd\")) with no "
                              "saved value; open the file in Excel and save it, so the values are stored")  # fmt: skip
    shared = '<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1" t="s"><v>1</v></c></row>'
    shared += '<row r="2"><c r="A2" t="s"><v>2</v></c><c r="B2" t="s"><v>3</v></c></row>'
    strings = ["file", "label", "a.jpg", "cat"]
    book = _hand_made_book(tmp_path / "counted.xlsx", shared, strings, sst_attrs=' count="4294967295" uniqueCount="4"')
    assert read_labels(book, engine=engine).files.tolist() == ["a.jpg"]  # count: the cells that use them, any number
    book = _hand_made_book(tmp_path / "huge.xlsx", shared, strings, sst_attrs=' uniqueCount="4294967295"')
    if engine == "calamine":
        with pytest.raises(LabelError) as err:
            read_labels(book, engine=engine)
        import zipfile

        size = zipfile.ZipFile(book).getinfo("xl/sharedStrings.xml").file_size
        assert str(err.value) == (f"{book}: its shared-string table (xl/sharedStrings.xml) declares uniqueCount="
                                  f"4,294,967,295 strings, more than its {size:,} bytes can hold: a damaged or "
                                  "hand-edited workbook; open it in Excel and save it again, or save the sheets as "
                                  "CSV")  # fmt: skip
    else:
        assert read_labels(book, engine=engine).files.tolist() == ["a.jpg"]


@pytest.mark.parametrize("engine", ["calamine", "openpyxl"])
def test_hidden_rows_and_sheet_parts_as_other_programs_write_them(tmp_path: Path, engine: str):
    # the attacks: a hidden row whose tag leaves out its number (<row hidden="1">, which OOXML allows) was read
    # without the refusal hidden rows get; a sheet part named './worksheets/sheet1.xml' by its relationship hid its
    # hidden rows from the check; openpyxl's engine skipped a sheet whose part is missing without a word

    rows = (f'<row>{_inline("A1", "file")}{_inline("B1", "label")}</row><row>{_inline("A2", "a.jpg")}'
            f'{_inline("B2", "cat")}</row><row hidden="1">{_inline("A3", "b.jpg")}{_inline("B3", "dog")}</row>')  # fmt: skip
    book = _hand_made_book(tmp_path / "unnumbered.xlsx", rows)
    with pytest.raises(LabelError) as err:
        read_labels(book, engine=engine)
    assert str(err.value) == (f"{book}, sheet 'train': rows are hidden in Excel (by a filter, or by hand), one marked "
                              "without its number: samples, or rows left out? pass include_hidden=True "
                              "(--include-hidden) to read them, or unhide them in Excel and save")  # fmt: skip
    assert read_labels(book, engine=engine, include_hidden=True).files.tolist() == ["a.jpg", "b.jpg"]
    numbered = rows.replace("<row>", "<row r='x'>").replace('<row hidden="1">', '<row r="3" hidden="1">')
    numbered = numbered.replace("<row r='x'>", '<row r="1">', 1).replace("<row r='x'>", '<row r="2">', 1)
    book = _hand_made_book(tmp_path / "dotted.xlsx", numbered)
    _rewrite_part(book, "xl/_rels/workbook.xml.rels", b'Target="worksheets/sheet1.xml"',
                  b'Target="./worksheets/sheet1.xml"')  # fmt: skip
    if engine == "openpyxl":  # (calamine does not find such a part: refused as unreadable, naming the sheet)
        with pytest.raises(LabelError) as err:
            read_labels(book, engine=engine)
        assert "sheet 'train': row 3 is hidden in Excel" in str(err.value)
    _rewrite_part(book, "xl/worksheets/sheet1.xml", None)  # the sheet's part missing
    with pytest.raises(LabelError) as err:
        read_labels(book, engine=engine)
    assert str(err.value).startswith(f"{book}, sheet 'train': cannot be read")


def test_a_workbook_whose_files_are_pandas_index_column_is_read(tmp_path: Path):
    # the false refusal: Series.to_excel() (or DataFrame.to_excel() with the files as the index) leaves the file
    # column's header cell empty: 'no file-name column found', and no name could be given for it
    import pandas as pd

    pd.Series(["猫", "狗", "猫"], index=["a.png", "b.png", "c.png"], name="label").to_excel(tmp_path / "s.xlsx",
                                                                                        sheet_name="train")  # fmt: skip
    pd.Series(["猫", "狗"], index=["a.png", "b.png"]).to_excel(tmp_path / "s0.xlsx", sheet_name="train")
    pd.Series(["猫", "狗", "猫"], index=["a.png", "b.png", "c.png"], name="label").to_csv(tmp_path / "s.csv")
    pd.Series(["猫", "狗"], index=["a.png", "b.png"]).to_csv(tmp_path / "s0.csv")
    for name, files in (("s.xlsx", ["a.png", "b.png", "c.png"]), ("s0.xlsx", ["a.png", "b.png"]),
                        ("s.csv", ["a.png", "b.png", "c.png"]), ("s0.csv", ["a.png", "b.png"])):  # fmt: skip
        table = read_labels(tmp_path / name)
        assert (table.files.tolist(), [str(v) for v in table.labels]) == (files, ["猫", "狗", "猫"][: len(files)])
    with pytest.raises(UsageError) as err:  # a label column named that the header has not
        read_labels(tmp_path / "s0.csv", label_column="label")
    assert (
        str(err.value) == f"{tmp_path / 's0.csv'}: no header with a label column named 'label'; the first row holds '0'"
    )


def test_rows_one_field_longer_than_the_header_are_row_names_first(tmp_path: Path):
    # the false refusal: R's write.table(df, sep=",") and pandas' to_csv(index_label=False) leave the row names'
    # header cell out; every row was refused as '3 fields where the header has 2', with quoting advice that was wrong
    import pandas as pd

    df = pd.DataFrame({"file": ["a.png", "b.png", "c.png"], "label": [0, 1, 0]})
    df.to_csv(tmp_path / "pandas.csv", index_label=False)
    (tmp_path / "r.csv").write_text('"file","label"\n"1","a.png",0\n"2","b.png",1\n"3","c.png",0\n', encoding="utf-8")
    for name in ("pandas.csv", "r.csv"):
        table = read_labels(tmp_path / name)
        assert (table.files.tolist(), [int(v) for v in table.labels]) == (["a.png", "b.png", "c.png"], [0, 1, 0])
    # one row longer alone is still an unquoted delimiter in a name, said on its line
    (tmp_path / "one.csv").write_text("file,label\na.png,0\nc,1.png,1\n", encoding="utf-8")
    with pytest.raises(LabelError) as err:
        read_labels(tmp_path / "one.csv")
    assert "line 3: 3 fields where the header has 2" in str(err.value)


def test_east_asian_date_formats_read_alike_by_either_engine(tmp_path: Path):
    # the attack: Chinese Excel and WPS store yyyy"年"m"月"d"日" as built-in format 31, undefined in styles.xml:
    # calamine read the labels as dates, openpyxl's engine as serial numbers (45292.5), with no word
    import datetime
    import zipfile

    wb = Workbook()
    ws = wb.active
    ws.title = "train"
    ws.append(["文件名", "标签"])
    for k, day in enumerate((1, 2)):
        ws.append([f"{k}.jpg", datetime.datetime(2024, 1, day, 12)])
        ws.cell(row=k + 2, column=2).number_format = "yyyy-mm-dd"
    wb.save(tmp_path / "base.xlsx")
    with zipfile.ZipFile(tmp_path / "base.xlsx") as z:
        parts = {n: z.read(n) for n in z.namelist()}
    styles = parts["xl/styles.xml"].decode()
    code = re.search(r'<numFmt numFmtId="(\d+)" formatCode="yyyy-mm-dd" ?/>', styles)
    styles = styles.replace(code.group(0), "").replace(f'numFmtId="{code.group(1)}"', 'numFmtId="31"')
    parts["xl/styles.xml"] = styles.encode()
    with zipfile.ZipFile(tmp_path / "cn.xlsx", "w") as z:
        for name, data in parts.items():
            z.writestr(name, data)
    read = {engine: [str(v) for v in read_labels(tmp_path / "cn.xlsx", engine=engine).labels]
            for engine in ("calamine", "openpyxl")}  # fmt: skip
    assert read == {e: ["2024-01-01 12:00:00", "2024-01-02 12:00:00"] for e in ("calamine", "openpyxl")}
    # rows stored out of order: openpyxl's engine loads such a sheet whole, and reads those dates so too
    with zipfile.ZipFile(tmp_path / "cn.xlsx") as z:
        sheet = z.read("xl/worksheets/sheet1.xml").decode()
    rows = re.findall(r"<row .*?</row>", sheet)
    _rewrite_part(tmp_path / "cn.xlsx", "xl/worksheets/sheet1.xml", "".join(rows).encode(),
                  (rows[0] + rows[2] + rows[1]).encode())  # fmt: skip
    assert [str(v) for v in read_labels(tmp_path / "cn.xlsx", engine="openpyxl").labels] == read["openpyxl"]
    from openpyxl.styles import numbers

    assert 31 not in numbers.BUILTIN_FORMATS  # openpyxl's own tables left as they are


def test_the_later_checks_leave_valid_tables_alone(tmp_path: Path):
    # the false refusals of this round's own checks, each a table as real programs write it:
    import pandas as pd

    # XlsxWriter with value= given: every formula saved with its result, 0 among them, under fullCalcOnLoad
    rows = _inline("A1", "file") + _inline("B1", "label")
    cells = "".join(f'<row r="{k + 2}">{_inline(f"A{k + 2}", f"{k}.jpg")}<c r="B{k + 2}"><f>MOD({k},2)</f><v>{k % 2}</v>'
                    "</c></row>" for k in range(4))  # fmt: skip
    book = _hand_made_book(tmp_path / "computed.xlsx", f'<row r="1">{rows}</row>{cells}',
                           workbook_extra='<calcPr fullCalcOnLoad="1"/>')  # fmt: skip
    assert [int(v) for v in read_labels(book).labels] == [0, 1, 0, 1]
    # thousands (a #,##0 column's CSV: banknotes), aspect ratios, hexadecimal codes and '1E1' are names
    for labels in (["1,000", "2,000", "5,000", "10,000"], ["4,3", "16,9"], ["a3f2", "5e12", "0c44"], ["1E1", "2E1"]):
        table = tmp_path / "names.csv"
        table.write_text("file;label\n" + "".join(f"{k}.jpg;{v}\n" for k, v in enumerate(labels)), encoding="utf-8")
        assert list(read_labels(table).class_map().classes) == sorted(labels)
    # the files as pandas' index beside a split column: the split column is found
    df = pd.DataFrame(
        {"label": ["猫", "狗", "猫"], "split": ["train", "train", "val"]}, index=["a.png", "b.png", "c.png"]
    )
    df.to_csv(tmp_path / "indexed.csv")
    df.to_excel(tmp_path / "indexed.xlsx", sheet_name="all")
    for name in ("indexed.csv", "indexed.xlsx"):
        assert read_labels(tmp_path / name, split="train").files.tolist() == ["a.png", "b.png"]
    # ... and as the row names left without a header cell (index_label=False: 'label' over 'a.png,cat')
    df[["label"]].to_csv(tmp_path / "rownames.csv", index_label=False)
    assert read_labels(tmp_path / "rownames.csv").files.tolist() == ["a.png", "b.png", "c.png"]
    # ... beside a column of another name ('label,score' over 'a.png,猫,0.9'), in a workbook too, and R's row names
    # that are the file names under a header that names the file column as well
    scored = pd.DataFrame({"label": ["猫", "狗"], "score": [0.9, 0.8]}, index=["a.png", "b.png"])
    scored.to_csv(tmp_path / "scored.csv", index_label=False)
    (tmp_path / "r.csv").write_text('"filename","label"\n"a.png","a.png","猫"\n"b.png","b.png","狗"\n',
                                    encoding="utf-8")  # fmt: skip
    wb = Workbook()
    for row in (["label", "score"], ["a.png", "猫", 0.9], ["b.png", "狗", 0.8]):
        wb.active.append(row)
    wb.save(tmp_path / "scored.xlsx")
    for name in ("scored.csv", "r.csv", "scored.xlsx"):
        table = read_labels(tmp_path / name)
        assert (table.files.tolist(), [str(v) for v in table.labels]) == (["a.png", "b.png"], ["猫", "狗"])


def test_a_note_after_the_files_is_no_row_names_and_one_real_value_clears_no_placeholder(tmp_path: Path):
    # the regressions: (1) '图片编号 | 标签' over 'a.jpg | 猫 | 清晰' (a file header datakit does not know, an unheaded
    # note after the label) was read as row names: the notes became the classes; (2) 'path,label' over
    # 'imgs/a.png,cat,0.93' was shifted so: the labels became the files; (3) a count cell saved with a real value
    # (XlsxWriter's value=) cleared the placeholder labels of another column: all one class '0'
    wb = Workbook()
    ws = wb.active
    ws.title = "train"
    for row in (["图片编号", "标签"], ["001.jpg", "猫", "清晰"], ["002.jpg", "狗", "模糊"]):
        ws.append(row)
    wb.save(tmp_path / "noted.xlsx")
    with pytest.raises(LabelError) as err:
        read_labels(tmp_path / "noted.xlsx")
    assert "a label column ('标签', column B) but no file-name column found" in str(err.value)
    assert read_labels(tmp_path / "noted.xlsx", file_column="图片编号").class_map().classes == ("狗", "猫")
    scored = tmp_path / "scored.csv"
    scored.write_text("path,label\nimgs/a.png,cat,0.93\nimgs/b.png,dog,0.88\n", encoding="utf-8")
    with pytest.raises(LabelError) as err:
        read_labels(scored)
    assert "line 2: 3 fields where the header has 2 ('imgs/a.png,cat,0.93')" in str(err.value)
    rows = _inline("A1", "file") + _inline("B1", "label")
    cells = "".join(f'<row r="{k + 2}">{_inline(f"A{k + 2}", f"{k}.jpg")}<c r="B{k + 2}" t="str"><f>C{k + 2}</f>'
                    "<v>0</v></c></row>" for k in range(2))  # fmt: skip
    count = '<row r="5"><c r="E5"><f>COUNTA(A2:A3)</f><v>2</v></c></row>'
    book = _hand_made_book(tmp_path / "counted.xlsx", f'<row r="1">{rows}</row>{cells}{count}',
                           workbook_extra='<calcPr fullCalcOnLoad="1"/>')  # fmt: skip
    with pytest.raises(LabelError) as err:
        read_labels(book)
    assert "row 2: cell B2 holds a formula (=C2) whose saved value is a placeholder" in str(err.value)


def test_classes_given_in_other_letter_case_are_named_so(tmp_path: Path):
    # the attack: one DataFrame with a bool label column: its CSV says True/False, its workbook TRUE/FALSE; the val
    # CSV read with the workbook's classes was refused as 'not among the classes given', with no word of the case
    root = images(tmp_path / "img", "a.png", "b.png")
    table = tmp_path / "val.csv"
    table.write_text("file,label\na.png,True\nb.png,False\n", encoding="utf-8")
    with pytest.raises(LabelError) as err:
        open_dataset(root, labels=table, classes=["FALSE", "TRUE"])
    assert str(err.value) == (f"{table}, line 3: classes 'False', 'True' not among the 2 classes given (classes=); "
                              "'False' is 'FALSE' of the classes given in other letter case (a CSV's True against a "
                              "workbook's TRUE cells?): write both one way")  # fmt: skip


def test_a_list_of_quoted_fields_as_r_writes_it_is_refused(tmp_path: Path):
    # the attack: R's write.table(df, "labels.txt") (spaces, every field quoted, row names first) was read as a
    # list without a word: '"1" "a.jpg"' the file, '"cat"' the class, the header a sample
    table = tmp_path / "labels.txt"
    table.write_text('"file" "label"\n"1" "a.jpg" "cat"\n"2" "b.jpg" "dog"\n', encoding="utf-8")
    with pytest.raises(LabelError) as err:
        read_labels(table)
    assert str(err.value) == (f"{table}: every label is written in quotes (first '\"label\"' at line 1): the quotes "
                              "would be part of the class names; write the table without them (R: write.table(..., "
                              "quote=FALSE)), or as CSV")  # fmt: skip
    # names written in quotes of other kinds, or a CSV's own escaped quotes, are names as they are
    csv = tmp_path / "quoted.csv"
    csv.write_text('file,label\na.jpg,「猫」\nb.jpg,“dog”\nc.jpg,"""cat"""\n', encoding="utf-8")
    assert list(read_labels(csv).class_map().classes) == ['"cat"', "“dog”", "「猫」"]


def test_tables_as_public_datasets_ship_them_are_said_for_what_they_are(tmp_path: Path):
    # the attacks: a one-hot table (image,cat,dog,bird of 0/1) was refused with "name it with label_column=", which
    # read one class column as a yes/no task; ImageNet's LOC_val_solution.csv read with its PredictionString
    # ('n01440764 0 3 50 60': a class and a box) gave 30 classes for 30 images without a word; a label column
    # named beside an unknown file column was "no label column named 'Category'" over a row holding it
    hot = tmp_path / "onehot.csv"
    rows = ["image,cat,dog,bird"] + [f"{i}.jpg," + ",".join("1" if c == i % 3 else "0" for c in range(3))
                                     for i in range(6)]  # fmt: skip
    hot.write_text("\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        read_labels(hot)
    assert str(e.value).endswith(
        f"{hot}, line 1: no label column found among 'image', 'cat', 'dog', 'bird': 'cat', 'dog', 'bird' hold 0 and "
        "1, a one-hot (multi-label) table; datakit reads one class per image: write each row's class name in one "
        "column (label), or keep the table for a multi-label loader; if a column holds the class names, name it "
        "with label_column= (--label-column)"
    )
    loc = tmp_path / "LOC_solution.csv"
    loc.write_text("ImageId,PredictionString\n" + "".join(f"val_{i:04d},n0144{i % 5:04d} {i} 3 50 60\n"
                                                           for i in range(30)), encoding="utf-8")  # fmt: skip
    t = read_labels(loc, file_column="ImageId")
    assert t.notes[-1] == (
        f"{loc}: every one of its 30 rows has a label of its own, a word and numbers ('n01440000 0 3 50 60', "
        "'n01440001 1 3 50 60', ...): 30 classes of one image each; is the label column an annotation (a class and a "
        "box)? name the class column with label_column= (--label-column), or write the class alone"
    )
    # a class column beside 0/1 flags (is_val, difficult): no one-hot table; names with numbers: no annotation
    flags = tmp_path / "flags.csv"
    flags.write_text("filename,species,is_val,difficult\na.png,cat,0,1\nb.png,dog,1,0\n", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        read_labels(flags)
    assert str(e.value).endswith("no label column found among 'filename', 'species', 'is_val', 'difficult'; name it "
                                 "with label_column= (--label-column)")  # fmt: skip
    assert read_labels(flags, label_column="species").class_values == ("cat", "dog")
    planes = tmp_path / "planes.csv"
    planes.write_text("file,label\n" + "".join(f"{i}.jpg,Boeing 737 {i}00\n" for i in range(25)), encoding="utf-8")
    assert read_labels(planes).notes == []
    names = tmp_path / "names.csv"  # one image a class, names of words: a catalogue, no note
    names.write_text("file,label\n" + "".join(f"{i}.jpg,product {chr(65 + i)}\n" for i in range(26)), encoding="utf-8")
    assert read_labels(names).notes == []
    cat = tmp_path / "cat.csv"
    cat.write_text("ImageId,Category\na,cat\nb,dog\n", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        read_labels(cat, label_column="Category")
    assert "the label column 'Category' is there, but no file-name column beside it" in str(e.value)


def test_integer_labels_against_classes_given_by_name_say_why_they_never_meet(tmp_path: Path):
    # the attack: mmpretrain's meta/val.txt (indices) with its classes.txt (names): "classes '0', '1', '2' not among
    # the 3 classes given", with nothing of why
    root = images(tmp_path / "img", "a.png", "b.png", "c.png")
    (tmp_path / "val.txt").write_text("a.png 0\nb.png 1\nc.png 2\n", encoding="utf-8")
    with pytest.raises(LabelError) as e:
        open_dataset(root, labels=tmp_path / "val.txt", classes=["cat", "dog", "bird"])
    assert str(e.value).endswith(
        "classes '0', '1', '2' not among the 3 classes given (classes=); the labels are whole numbers and the classes "
        "given are names ('cat', 'dog', 'bird'): classes= looks labels up by name, so integer labels meet only integer "
        "classes; give the classes of the same kind (the training split's list of indices, or write the names in the "
        "labels)"
    )


@pytest.mark.parametrize(
    ("lines", "shown", "numbers"),
    [
        ("Abyssinian_100 1 1 1\nAbyssinian_101 1 1 1\namerican_bulldog_100 2 2 1\n", "Abyssinian_100 1 1 1", 3),
        ("cub_0001 3 1\ncub_0002 7 1\n", "cub_0001 3 1", 2),
        ("Abyssinian_1     1  1  1\nbeagle_2     12  2  3\n", "Abyssinian_1     1  1 1", 3),  # aligned columns
        ("000001.jpg -1 1\n000002.jpg 1 -1\n", "000001.jpg -1 1", 2),  # CelebA's attributes, -1 and 1
    ],
)
def test_a_list_of_a_name_and_several_numbers_is_refused_not_read_by_its_last(tmp_path: Path, lines, shown, numbers):
    # The attack: Oxford-IIIT Pet's list.txt (image, class id, species, breed id) read as the files
    # 'Abyssinian_100 1 1' labelled with the breed id: the last number, not the class.
    path = tmp_path / "list.txt"
    path.write_text("#Image CLASS-ID SPECIES BREED ID\n" + lines, encoding="utf-8")
    want = (f"{path}, line 2: '{shown}' is a name and {numbers} numbers, as is every line, where a 'path label' list "
            "has a name and one label: which number is the label is not known (Oxford-IIIT Pet's list.txt: image, "
            "class id, species, breed id); write the lines as 'path label' with the one meant, or as a CSV whose "
            "header names its columns")  # fmt: skip
    table = read_labels(path, validate=False)
    assert (table.files.tolist(), table.problems()) == ([], [want])
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value) == want
    # one line of a name and one label: the other lines are files with spaces in their names, read as before
    path.write_text(lines + "plain 4\n", encoding="utf-8")
    table = read_labels(path, validate=False)
    assert table.files.tolist()[-1] == "plain" and len(table.files) == lines.count("\n") + 1


def test_a_list_of_spaced_names_and_numbers_whose_labels_are_words_is_read(tmp_path: Path):
    # the review round: 'photo 1 cat' (a name with a number in it, a word label) was refused as a name and numbers
    path = tmp_path / "list.txt"
    path.write_text("photo 1 cat\nphoto 2 dog\n", encoding="utf-8")
    table = read_labels(path, validate=False)
    assert (table.files.tolist(), table.labels.tolist(), table.problems()) == (["photo 1", "photo 2"], ["cat", "dog"],
                                                                               [])  # fmt: skip
