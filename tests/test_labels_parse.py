"""The numpy path of text label tables against the Python path, and its pieces against plain Python.

Every tricky input is read twice: as it is (the numpy path where it applies) and with the numpy
path switched off, and both tables must be the same, problems included. Blocks are made tiny in
some runs, so that every block boundary of the blockwise passes is crossed.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from datakit import textparse
from datakit.labels import LabelError, StringArray, _duplicates, read_labels


def python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(textparse, "_fast_delimited", lambda *args: None)
    monkeypatch.setattr(textparse, "_fast_list", lambda *args: None)


def snapshot(path: Path, encoding: str | None = None) -> dict:
    t = read_labels(path, validate=False, encoding=encoding)
    return {"files": t.files.tolist(), "labels": t.labels.tolist(), "splits": t.splits.tolist(),
            "rows": t.rows.tolist(), "kind": t.kind, "classes": t.class_values, "notes": t.notes,
            "problems": t.problems(), "columns": (t.file_column, t.label_column)}  # fmt: skip


def names(n: int, seed: int = 0) -> list[str]:
    r = random.Random(seed)
    stems = ["img", "猫", "类别_3/图片", "a b", "x\\y", "n01440764", "ab" * 12, "é"]
    return [f"{r.choice(stems)}_{r.randrange(2 * n)}.jpg" for _ in range(n)]


ROWS = list(zip(names(300), [f"类别_{i % 7}" if i % 5 else f"c{i % 3}" for i in range(300)]))


def rows(line: str, odd: str | None = None, every: int = 0) -> str:
    """``line`` filled in for each row of ROWS ({f}: file, {flat}: file without spaces, {lab}: label,
    {n}: a digit, {split}); every ``every``-th row (from the third) gets ``odd`` instead."""
    out = []
    for i, (f, lab) in enumerate(ROWS):
        fmt = odd if every and i % every == 3 else line
        out.append(fmt.format(f=f, flat=f.replace(" ", "_"), lab=lab, n=i % 10, split="val" if i % 4 else "train"))
    return "".join(out)


TABLES = {
    "plain.csv": "文件名,标签,split\n" + rows("{f},{lab},{split}\n"),
    "crlf.csv": "file,label\r\n" + rows("{f},{lab}\r\n"),
    "padded.csv": "file , label\n" + rows(" {f} ,  {lab}\n"),
    "blanks.csv": "file,label,split\n" + rows("{f},{lab},{split}\n", ",{lab},\n", 9) + rows("{f},,{split}\n"),
    "blank_lines.csv": "\n\nfile,label\n" + rows("{f},{lab}\n\n   \n"),
    "duplicates.csv": "file,label\n" + rows("{f},{lab}\n") + rows("{f},{lab}\n")[:900],
    "semicolon.csv": "file;label\n" + rows("{f};{lab}\n"),
    "trailing_tabs.tsv": "file\tlabel\t\n" + rows("{f}\t{lab}\t\n"),
    "nbsp_edge.csv": "file,label\n" + rows("{f},{lab}\n", "{f}\u00a0,{lab}\n", 50),
    "ideographic_space.csv": "file,label\n" + rows("{f},{lab}\u3000\n"),
    "quoted.csv": "file,label\n" + rows('"{f}",{lab}\n'),
    "no_final_newline.csv": "file,label\n" + rows("{f},{lab}\n").rstrip("\n"),
    "long_labels.csv": "file,label\n" + rows("{f},German_short-haired_pointer_{n}\n"),
    "short_labels.csv": "file,label\n" + rows("{f},aaaaaaaaa\n", "{f},aaaaaaaaaa\n", 2),
    "list.txt": rows("{flat} {n}\n"),
    "list_spaces.txt": rows("{f} {n}\n"),
    "list_tabs.txt": rows("{f}\t{lab}\n"),
    "list_crlf.txt": rows("{flat} {n}\r\n"),
    "list_comments.txt": "# path label\n# a b\n" + rows("{flat}  {n} \n"),
    "list_comment_tab.txt": "# a\tb\n" + rows("{flat} {n}\n"),
    "list_header.txt": "path label\n" + rows("{flat} {lab}\n"),
    "list_one_field.txt": rows("{flat} {n}\n", "{flat}\n", 100),
    "list_control.txt": rows("{flat} {n}\n", "{flat} {n}\x1c\n", 100),
    "list_ideographic_sep.txt": rows("{f} {n}\n", "{f}\u3000{lab}\n", 7),
    "list_nbsp_sep.txt": rows("{f} {n}\n", "{f}\u00a0{n}\n", 7),
    "list_ideographic_sep_spaced.txt": rows("{flat} {n}\n", "x y_{flat}\u3000{lab}\n", 7),
}


def encodable(text: str, encoding: str) -> bool:
    try:
        text.encode(encoding)
        return True
    except UnicodeEncodeError:
        return False


@pytest.mark.parametrize("block", [textparse._BLOCK, 5, 64])
@pytest.mark.parametrize(
    ("name", "encoding"),
    [(n, e) for n in sorted(TABLES) for e in ("utf-8", "utf-8-sig", "gbk") if encodable(TABLES[n], e)],
)
def test_numpy_and_python_paths_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, encoding: str,
                                      block: int):  # fmt: skip
    path = tmp_path / name
    path.write_bytes(TABLES[name].encode(encoding))
    monkeypatch.setattr(textparse, "_BLOCK", block)
    given = "gbk" if encoding == "gbk" else None  # too few Chinese characters to tell GBK from Big5
    fast = snapshot(path, given)
    python_path(monkeypatch)
    assert fast == snapshot(path, given)


def test_numpy_path_taken_for_plain_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The tables above that the numpy path can read do go through it (else the test above compares
    the Python path with itself)."""
    taken = []
    for fn in ("_fast_delimited", "_fast_list"):
        original = getattr(textparse, fn)
        monkeypatch.setattr(textparse, fn, lambda *a, _f=original: taken.append(_f(*a) is not None) or _f(*a))
    for name in ("plain.csv", "crlf.csv", "padded.csv", "trailing_tabs.tsv", "list.txt", "list_spaces.txt",
                 "list_tabs.txt", "list_crlf.txt", "list_comments.txt", "long_labels.csv"):  # fmt: skip
        path = tmp_path / name
        path.write_text(TABLES[name], encoding="utf-8")
        taken.clear()
        read_labels(path, validate=False)
        assert taken == [True], name


def test_empty_list_holds_no_rows(tmp_path: Path):
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    t = read_labels(path, validate=False)
    assert len(t) == 0 and t.problems() == [f"{path}: the table holds no rows"]


# ---------------------------------------------------------------------------------------------
# the pieces


@pytest.mark.parametrize("block", [1, 3, 8, 1 << 18])
def test_gather_matches_slicing(monkeypatch: pytest.MonkeyPatch, block: int):
    monkeypatch.setattr(textparse, "_BLOCK", block)
    r = np.random.default_rng(block)
    buf = r.integers(0, 256, 500).astype(np.uint8)
    cuts = np.sort(r.choice(np.arange(501), 120, replace=False))
    starts, ends = cuts[0::2], cuts[1::2]
    ends = np.where(r.random(len(ends)) < 0.2, starts, ends)  # some empty spans
    data, offsets = textparse.gather(buf, starts, ends)
    parts = [buf[s:e].tobytes() for s, e in zip(starts, ends)]
    assert data.tobytes() == b"".join(parts)
    assert [data[a:b].tobytes() for a, b in zip(offsets[:-1], offsets[1:])] == parts
    empty = textparse.gather(buf, starts[:0], ends[:0])
    assert len(empty[0]) == 0 and empty[1].tolist() == [0]


def test_holds_finds_each_needle_in_place():
    buf = np.frombuffer(b"train/a.jpg 0\nval/./b.jpg 1\n", np.uint8)
    assert [textparse.holds(buf, n) for n in (b"./", b"//", b"\\", b" ", b"1\n")] == [True, False, False, True, True]
    assert textparse.holds(buf, b"//", b"\\", b".jpg") is True
    assert textparse.holds(buf, b"//", b"\\") is False
    assert textparse.holds(buf[1::2], b"ri") is True  # a strided view: searched in a contiguous copy
    assert textparse.holds(np.zeros(0, np.uint8), b" ") is False


def test_take_keeps_order_and_content():
    arr = StringArray(["", "a", "", "bb", "猫", "", "ccc"])
    for index in ([0, 1, 2], [1, 3, 6], [2, 5], [6, 1, 1], []):
        assert arr.take(np.asarray(index, np.int64)).tolist() == [arr[i] for i in index]


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 23])
def test_words_at_reads_zeros_past_the_end(size: int):
    buf = np.arange(1, size + 1, dtype=np.uint8)
    pos = np.arange(size + 1)
    padded = buf.tobytes() + bytes(8)
    expected = [int.from_bytes(padded[p : p + 8], "little") for p in pos]
    assert textparse.words_at(buf, pos).tolist() == expected


def test_keys_equal_exactly_when_spans_equal():
    words = ["", "a", "ab", "abcdefgh", "abcdefghi", "aaaaaaaaa", "aaaaaaaaaa", "x" * 40, "x" * 41, "类别_12"]
    blob = "".join(words).encode()
    lens = np.asarray([len(w.encode()) for w in words])
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    buf = np.frombuffer(blob, np.uint8)
    keys = textparse.span_keys(buf, starts, lens).tolist()
    assert len(set(keys)) == len(words)
    twice = np.frombuffer(blob + blob, np.uint8)
    again = textparse.span_keys(twice, np.concatenate([starts, starts + len(blob)]), np.concatenate([lens, lens]))
    assert again.tolist() == keys + keys


def test_duplicates_exact_when_cheap_keys_collide():
    """Names that agree in length and in every word the cheap key reads, differing only in bytes it skips,
    are told apart by the full comparison; real repeats are still found with their first row."""
    stem = "dir/abc/{}/middle/long/tail_0001.jpg"
    names = [stem.format(f"{i:04d}") for i in range(50)]
    keys = textparse.span_keys(np.frombuffer("".join(names).encode(), np.uint8),
                               np.arange(50) * len(names[0]), np.full(50, len(names[0])))  # fmt: skip
    assert len(set(keys.tolist())) == 1  # all collide on the cheap key
    assert _duplicates(StringArray(names)) == []
    assert _duplicates(StringArray([*names, names[7], names[3], names[7]])) == [(50, 7), (51, 3), (52, 7)]


def test_duplicates_compare_names_as_the_paths_they_name():
    """Against plain Python: two names repeat when posixpath.normpath, after \\ is read as /, makes them
    equal (./a.jpg, x/../a.jpg, a//b.jpg); the numpy prefilter that picks the names to rewrite misses none."""
    import posixpath

    rng = random.Random(7)
    pieces = ["a", "b", ".", "..", "/", "\\", "//", "./", "x.jpg", "类"]
    for _ in range(3000):
        names = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(2, 9))]
        paths = [posixpath.normpath(n.replace("\\", "/")) for n in names]
        want = [(i, paths.index(p)) for i, p in enumerate(paths) if paths.index(p) != i]
        assert _duplicates(StringArray(names)) == want, names
    names = ["./d/1.jpg", "d/2.jpg", "d//1.jpg", ".//d/2.jpg", "./\\d/1.jpg", "d/1.jpg/.", "./e/../d/2.jpg"]
    assert _duplicates(StringArray(names)) == [(2, 0), (3, 1), (4, 0), (5, 0), (6, 1)]


@pytest.mark.parametrize(
    "values",
    [["cat", "dog", "cat", ""], ["aaaaaaaaa", "aaaaaaaaaa", "aaaaaaaaa"], ["类别_12", "类别_1", "类别_12"],
     ["German_short-haired_pointer", "German_short-haired_pointers", "German_short-haired_pointer"]],
)  # fmt: skip
def test_coded_values_in_order_of_first_appearance(values: list[str]):
    blob = "\n".join(values).encode()
    lens = np.asarray([len(v.encode()) for v in values])
    starts = np.concatenate([[0], np.cumsum(lens + 1)[:-1]])
    cols = textparse.Columns.from_spans(blob, [(starts, starts + lens)], np.arange(len(values)), None, 0, None)
    distinct, codes, valid = cols.coded(0)
    assert distinct == list(dict.fromkeys(values))
    assert [distinct[c] for c in codes] == values and valid.tolist() == [bool(v) for v in values]


def test_a_row_wider_than_the_header_is_a_problem_not_a_phantom_class(tmp_path: Path):
    # The attack: an unquoted comma in a file name (c,1.jpg) read as file 'c', label '1.jpg': a phantom class
    # that shifted every real class index.
    path = tmp_path / "l.csv"
    path.write_text('file,label\na.jpg,cat\nc,1.jpg,cat\n"d,2.jpg",dog\nb.jpg,dog,\n', encoding="utf-8")
    t = read_labels(path, validate=False)
    assert t.problems() == [f"{path}, line 3: 3 fields where the header has 2 ('c,1.jpg,cat'); quote a name that "
                            "holds ','"]  # fmt: skip
    assert t.files.tolist() == ["a.jpg", "d,2.jpg", "b.jpg"] and t.class_map().classes == ("cat", "dog")
    path.write_text("a.jpg\tcat\nc\t1.jpg\tcat\nb.jpg\tdog\n", encoding="utf-8")  # no header: the first row's width
    assert read_labels(path, validate=False).problems() == [
        f"{path}, line 2: 3 fields where the first row has 2 ('c\\t1.jpg\\tcat'); quote a name that holds '\\t'"
    ]


def test_a_short_row_whose_fields_moved_is_a_problem_not_a_shifted_row(tmp_path: Path):
    # The attack: under file,label,split the row "2.png,val" (its label left out) was read as label 'val' in no
    # split: a class 'val' more, every later class one index on, in the table and in a pack made from it.
    path = tmp_path / "l.csv"
    path.write_text("file,label,split\n0.png,cat,train\n1.png,zebra,train\n2.png,val\n3.png,cat,val\n",
                    encoding="utf-8")  # fmt: skip
    t = read_labels(path, validate=False)
    assert t.problems() == [f"{path}, line 4: 2 fields where the header has 3 ('2.png,val'): 'val' stands under "
                            "'label', and the other rows hold it under 'split' only: a field left out? Write every "
                            "field, an empty one as nothing between two ','"]  # fmt: skip
    assert t.files.tolist() == ["0.png", "1.png", "3.png"] and t.class_map().classes == ("cat", "zebra")
    assert t.dropped_files == ["2.png"]  # in the table, without a label: never "not in the table"
    with pytest.raises(LabelError, match=r"line 4: 2 fields where the header has 3"):
        read_labels(path)
    # a tab-separated table, a quoted name shown quoted
    path = tmp_path / "t.tsv"
    path.write_text('file\tlabel\tsplit\n0.png\tcat\ttrain\n"b\t1.png"\ttrain\n', encoding="utf-8")
    assert read_labels(path, validate=False).problems() == [
        f"{path}, line 3: 2 fields where the header has 3 ('\"b\\t1.png\"\\ttrain'): 'train' stands under 'label', "
        "and the other rows hold it under 'split' only: a field left out? Write every field, an empty one as nothing "
        "between two '\\t'"
    ]
    # the empty last fields' delimiters dropped (old Excel after a sheet's first rows, an editor trimming tabs): the
    # values stand where the other rows hold them, and the rows read as before, their split blank
    path = tmp_path / "e.csv"
    path.write_text("file,label,split\n0.png,cat,train\n1.png,dog\n2.png,bird\n3.png\n", encoding="utf-8")
    t = read_labels(path, validate=False)
    assert t.problems() == [f"{path}, line 5: file '3.png' has no label"]
    assert t.files.tolist() == ["0.png", "1.png", "2.png"] and t.labels.tolist() == ["cat", "dog", "bird"]
    assert t.splits.tolist() == ["train", "", ""]
    # short of a column that is not read (a note): the row stands, as written, whatever its values (label 0 is also
    # a split id here: no field of it moved)
    path = tmp_path / "n.csv"
    path.write_text("file,label,split,note\n1.png,1,0,checked twice\n2.png,0,0\n3.png,2,1\n", encoding="utf-8")
    t = read_labels(path, validate=False)
    assert t.problems() == [] and t.files.tolist() == ["1.png", "2.png", "3.png"]
    assert t.labels.tolist() == [1, 0, 2] and t.splits.tolist() == ["0", "0", "1"]
    # the file column not first: the refused row's file is still in the table
    path = tmp_path / "f.csv"
    path.write_text("label,file,split\ncat,1.png,train\ndog,2.png,val\n3.png,train\n", encoding="utf-8")
    t = read_labels(path, validate=False)
    assert t.problems() == [f"{path}, line 4: 2 fields where the header has 3 ('3.png,train'): 'train' stands under "
                            "'file', and the other rows hold it under 'split' only: a field left out? Write every "
                            "field, an empty one as nothing between two ','"]  # fmt: skip
    assert "3.png" in t.dropped_files and t.files.tolist() == ["1.png", "2.png"]


def test_a_refused_short_row_of_integer_labels_raises_no_false_range_problem(tmp_path: Path):
    # the regression: the refused row was left out of the table entirely, so its label 1 was gone and {0, 2} was
    # called "not 0..1", advising --remap-labels, and its file "not in the table"
    import cv2

    from datakit.check import check_dataset

    img = tmp_path / "img"
    img.mkdir()
    for k, name in enumerate("abcd"):
        cv2.imwrite(str(img / f"{name}.png"), np.full((8, 8, 3), 10 * k, np.uint8))
    path = tmp_path / "ints.csv"
    path.write_text("file,label,split\na.png,0,train\nb.png,train\nc.png,2,train\nd.png,1,val\n")
    problems = check_dataset(img, labels=path, workers=0).problems
    assert [p for p in problems if "not in the table" in p or "integer labels" in p] == []
    assert problems[0] == (f"{path}, line 3: 2 fields where the header has 3 ('b.png,train'): 'train' stands under "
                           "'label', and the other rows hold it under 'split' only: a field left out? Write every "
                           "field, an empty one as nothing between two ','")  # fmt: skip


def test_a_line_indented_with_a_tab_reads_alike_with_or_without_quotes(tmp_path: Path):
    # The attack: "\tb.jpg\tdog" under a 2-column header was read as b.jpg -> dog by the fast path (which
    # stripped the tab with the line's spaces), and refused by the Python path once a quote stood elsewhere.
    for last in ("cat", '"cat"'):
        path = tmp_path / "t.tsv"
        path.write_text(f"file\tlabel\na.jpg\tcat\n\tb.jpg\tdog\nc.jpg\t{last}\n", encoding="utf-8")
        t = read_labels(path, validate=False)
        assert t.problems() == []
        assert t.files.tolist() == ["a.jpg", "b.jpg", "c.jpg"] and t.labels.tolist() == ["cat", "dog", "cat"]
    path.write_text("file\tlabel\na.jpg\tcat\n\tb.jpg\tdog\tx\n", encoding="utf-8")  # one field more still
    assert read_labels(path, validate=False).problems() == [
        f"{path}, line 3: 3 fields where the header has 2 ('b.jpg\\tdog\\tx'); quote a name that holds '\\t'"
    ]
    # a blank file cell before two others is no indentation: 'dog' is no file's name (it was read as one)
    path.write_text("file\tlabel\na.jpg\tcat\n\tdog\textra\n", encoding="utf-8")
    assert read_labels(path, validate=False).problems() == [
        f"{path}, line 3: 3 fields where the header has 2 ('\\tdog\\textra'); quote a name that holds '\\t'"
    ]
    path.write_text("file\tlabel\t\r\na.jpg\tcat\t\r\nb.jpg\tdog\t\r\n", encoding="utf-8")  # a tab ending each line
    t = read_labels(path, validate=False)
    assert t.problems() == [] and t.files.tolist() == ["a.jpg", "b.jpg"] and t.class_map().classes == ("cat", "dog")


def test_a_data_row_whose_class_is_a_column_name_is_not_the_header(tmp_path: Path):
    # The attack: a table without a header whose classes include 'image': that row was taken as the header, the
    # rows above it vanished and the columns swapped, without a problem.
    path = tmp_path / "l.csv"
    path.write_text("a.jpg,text\nb.jpg,image\nc.jpg,table\nd.jpg,text\n", encoding="utf-8")
    t = read_labels(path)
    assert t.files.tolist() == ["a.jpg", "b.jpg", "c.jpg", "d.jpg"] and t.rows.tolist() == [1, 2, 3, 4]
    assert t.class_map().classes == ("image", "table", "text")
    path.write_text("image,label\nb.jpg,image\n", encoding="utf-8")  # a real header still is one
    assert read_labels(path).labels.tolist() == ["image"]


@pytest.mark.parametrize("python_parser", [False, True])
def test_the_header_line_again_is_skipped_not_a_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     python_parser: bool):  # fmt: skip
    # The attack: a CSV appended to with pandas' to_csv(mode="a") repeats its header; that line became a sample
    # 'file' of class 'label', and 'zebra' got index 2 in train against 1 in a val table written in one go.
    if python_parser:
        monkeypatch.setattr(textparse, "_fast_delimited", lambda *args: None)
    path = tmp_path / "train.csv"
    path.write_text("file,label\n0.png,cat\n1.png,zebra\nfile,label\n2.png,cat\n3.png,zebra\n", encoding="utf-8")
    t = read_labels(path, validate=False)
    assert t.files.tolist() == ["0.png", "1.png", "2.png", "3.png"] and t.rows.tolist() == [2, 3, 5, 6]
    assert t.class_map().classes == ("cat", "zebra") and t.problems() == []
    assert t.notes == [f"{path}, line 4: the header line again (tables joined?): skipped"]


def test_the_header_row_again_in_a_sheet_is_skipped(tmp_path: Path):
    openpyxl = pytest.importorskip("openpyxl")
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "train"
    for row in (("文件名", "标签"), ("a.jpg", "猫"), ("文件名", "标签"), ("b.jpg", "狗")):
        ws.append(row)
    path = tmp_path / "l.xlsx"
    wb.save(path)
    t = read_labels(path, validate=False)
    assert t.files.tolist() == ["a.jpg", "b.jpg"] and t.class_map().classes == ("狗", "猫")
    assert t.notes == [f"{path}, sheet 'train', row 3: the header row again (tables joined?): skipped"]


def test_an_unknown_header_of_a_txt_list_is_refused_not_a_sample(tmp_path: Path):
    # The attack: Excel's Unicode text (UTF-16, tabs) saved as .txt with a header of names datakit does not know:
    # read as a list, its header became a sample '图片地址' of class '类别'.
    path = tmp_path / "labels.txt"
    path.write_bytes("图片地址\t类别\r\n0.png\t猫\r\n1.png\t狗\r\n".encode("utf-16"))
    with pytest.raises(LabelError) as e:
        read_labels(path)
    assert str(e.value).splitlines()[-1].strip() == (
        f"{path}, line 1: '图片地址', '类别' looks like a header (the lines under it name image files), but names no "
        "known file column; name it with file_column= (--file-column)"
    )
    t = read_labels(path, file_column="图片地址", label_column="类别")
    assert t.files.tolist() == ["0.png", "1.png"] and t.labels.tolist() == ["猫", "狗"]
    path.write_text("0.png 猫\n1.png 狗\n", encoding="utf-8")  # a list without a header: its first line a sample
    assert read_labels(path).files.tolist() == ["0.png", "1.png"]


def test_a_backslash_byte_inside_a_legacy_character_does_not_cut_it(tmp_path: Path):
    # The attack: the encoding guess split the bytes into cells at '\\' (0x5C), also the second byte of 許, 功
    # (Big5) and 嘰 (GBK): a bare UnicodeDecodeError naming no file.
    cases = [("猫\\1.png,cat\n狗\\2.png,dog\n", "utf-8", ["猫/1.png", "狗/2.png"]),
             ("file,label\n許/1.png,功夫\nx/2.png,餐點\n", "big5", ["許/1.png", "x/2.png"]),
             ("file,label\n嘰/1.png,乗类\n猫/2.png,其他类\n", "gbk", ["嘰/1.png", "猫/2.png"])]  # fmt: skip
    for k, (text, enc, files) in enumerate(cases):
        path = tmp_path / f"{k}.csv"
        path.write_bytes(text.encode(enc))
        t = read_labels(path, validate=False)
        assert (t.encoding, t.files.tolist()) == (enc, files)


def test_split_values_apart_only_in_case_and_blank_split_cells_are_noted(tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture):  # fmt: skip
    # The attack: 'Train' for 'train' and a blank split cell: split='train' left those rows out without a word.
    path = tmp_path / "l.csv"
    path.write_text("file,label,split\n0.png,cat,train\n1.png,dog,Train\n2.png,dog,\n3.png,cat,val\n", encoding="utf-8")
    t = read_labels(path, split="train", validate=False)
    assert t.files.tolist() == ["0.png"]
    assert t.notes == [
        f"{path}: split values 'train' (first at line 2) and 'Train' (first at line 3) differ only in letter case "
        "or spaces: they are 2 splits",
        f"{path}: 1 row with a blank split cell (line 4): in no split",
    ]
    openpyxl = pytest.importorskip("openpyxl")
    wb = openpyxl.Workbook()
    for row in (("file", "label", "split"), ("0.png", "cat", "train"), ("1.png", "dog", None)):
        wb.active.append(row)
    xlsx = tmp_path / "l.xlsx"
    wb.save(xlsx)
    t = read_labels(xlsx, validate=False)  # a blank cell is no split in a sheet too, not the sheet's name
    assert t.split_names == ["train"] and t.notes == [f"{xlsx}: 1 row with a blank split cell (sheet 'Sheet', "
                                                      "row 3): in no split"]  # fmt: skip


def test_a_full_width_space_between_path_and_label_reads_as_a_space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # The attack: '图片/1.jpg　猫', the separator typed as a full-width space (U+3000, as a Chinese input method
    # gives it), was refused as a line without a label; after a name holding a space ('图片/a b.jpg　狗') the
    # numpy path split the line at that space (when every line has one): file '图片/a', label 'b.jpg　狗', a class
    # of its own, without a word.
    text = (
        "图片/0.jpg 猫\n图片/1 1.jpg\u3000猫\n图片/a b.jpg\u3000狗\n图片/3.jpg  \u3000 狗\n图片/我的\u3000猫.jpg 猫\n"
    )
    for encoding in ("utf-8", "gbk"):
        path = tmp_path / f"{encoding}.txt"
        path.write_bytes(text.encode(encoding))
        note = (f"{path}: 3 lines separate the path and the label by a full-width space (U+3000, as a Chinese input "
                "method types it) (line 2, line 3, line 4): read as a space; tools that split lines on ASCII spaces "
                "(PaddleClas, mmpretrain) will not read them")  # fmt: skip
        for paths in ("numpy", "python"):
            if paths == "python":
                python_path(monkeypatch)
            t = read_labels(path, encoding="gbk" if encoding == "gbk" else None)
            assert t.files.tolist() == [
                "图片/0.jpg",
                "图片/1 1.jpg",
                "图片/a b.jpg",
                "图片/3.jpg",
                "图片/我的\u3000猫.jpg",
            ]
            assert t.labels.tolist() == ["猫", "猫", "狗", "狗", "猫"] and t.rows.tolist() == [1, 2, 3, 4, 5]
            assert t.problems() == [] and t.notes == [note]
        monkeypatch.undo()


def test_a_no_break_space_between_path_and_label_reads_as_a_space(tmp_path: Path):
    path = tmp_path / "l.txt"
    path.write_text("a.jpg\u00a0cat\nb.jpg dog\n", encoding="utf-8")
    t = read_labels(path)
    assert list(zip(t.files.tolist(), t.labels.tolist())) == [("a.jpg", "cat"), ("b.jpg", "dog")]
    assert t.notes == [f"{path}: 1 line separates the path and the label by a no-break space (U+00A0) (line 1): "
                       "read as a space; tools that split lines on ASCII spaces (PaddleClas, mmpretrain) will not "
                       "read it"]  # fmt: skip


def test_a_full_width_space_inside_a_tab_separated_list_stays_in_its_field(tmp_path: Path):
    path = tmp_path / "l.txt"
    path.write_text("我的\u3000图片.jpg\t金毛\u3000寻回犬\nb.jpg\tpug\n", encoding="utf-8")
    t = read_labels(path)
    assert t.files.tolist() == ["我的\u3000图片.jpg", "b.jpg"] and t.labels.tolist() == ["金毛\u3000寻回犬", "pug"]
    assert t.notes == []


def test_a_quoted_field_holding_rows_of_their_own_is_refused_not_swallowed(tmp_path: Path):
    # the attack: a quote opened by mistake in a note ('5 inch"') and closed a line later made b.png's row the note's
    # text: b.png was not in the table, without a word; in the label column it made a class 'cat\nb.png,dog'
    path = tmp_path / "labels.csv"
    for text, inner in (('file,label,note\na.png,cat,"5 inch\nb.png,dog,7 inch"\nc.png,cat,ok\nd.png,dog,"two\nlines"\n',
                         "b.png,dog,7 inch"),
                        ('file,label\na.png,"cat\nb.png,dog"\nc.png,cat\n', "b.png,dog")):  # fmt: skip
        path.write_text(text, encoding="utf-8")
        with pytest.raises(LabelError) as e:
            read_labels(path)
        assert str(e.value).splitlines()[-1].strip() == (
            f"{path}, line 2: a quoted field runs over lines 2-3 and holds what reads as rows of their own ({inner!r}); "
            "a quote opened by mistake? close it on its line, or quote no part of the name"
        )
    # the second regression round: rows shorter than the widest (a note left out), a row after a first line that is
    # none, a .jpe name: swallowed without a word by the first mend
    for text in ('file,label,note\na.png,cat,"5 inch\nb.png,dog\nc.png,cat,ok"\nd.png,dog,fine\n',
                 'file,label,note\nx.png,cat,ok,,,\na.png,cat,"5 inch\nb.png,dog,7 inch"\nc.png,dog,ok\n',
                 'file,label,note\na.png,cat,"5 inch\nsee b.png, x\nc.png,dog,7 inch"\nd.png,dog,ok\n',
                 'file,label\na.jpe,"cat\nb.jpe,dog"\nc.jpe,cat\n'):  # fmt: skip
        path.write_text(text, encoding="utf-8")
        with pytest.raises(LabelError, match="a quoted field runs over lines"):
            read_labels(path)
    # a note over two lines, no row in it, is read with its row; so is one whose second line names a file, with
    # fewer fields than a row (the regression round: "Reviewed by J.Smith, approved" was refused as a row)
    for note in ("5 inch\n7 inch", "first line\nReviewed by J.Smith, approved", "see\nbackup.zip, page 2",
                 "duplicate of\nc.png, same shot"):  # fmt: skip
        path.write_text(f'file,label,note\na.png,cat,"{note}"\nc.png,cat,ok\n', encoding="utf-8")
        t = read_labels(path)
        assert t.files.tolist() == ["a.png", "c.png"] and t.labels.tolist() == ["cat", "cat"]


def test_a_quoted_note_longer_than_the_csv_modules_field_limit_is_read(tmp_path: Path):
    # the attack: a valid CSV whose third column is a quoted note of 200,000 characters (with a line break, so the
    # quoting reader reads it): _csv.Error "field larger than field limit (131072)" escaped as a traceback
    import csv

    from datakit.labels import read_labels

    note = "长" * 100_000 + "\n" + "x" * 100_000
    path = tmp_path / "q.csv"
    path.write_text(f'file,label,note\na.png,cat,"{note}"\nb.png,dog,short\n', encoding="utf-8")
    before = csv.field_size_limit()
    table = read_labels(path)
    assert (table.files.tolist(), table.labels.tolist()) == (["a.png", "b.png"], ["cat", "dog"])
    assert csv.field_size_limit() == before  # the module's own limit as it was


def test_long_spans_hash_alike_when_equal_and_apart_when_not():
    # the attack: one unquoted label of 20 MB took 38 s to read (a round of NumPy calls per 8 bytes of the longest
    # field); spans past 256 bytes are hashed one by one, by length-decided method, so equality still holds
    import numpy as np

    from datakit.textparse import hash_spans

    text = b"x" * 300 + b"|" + b"x" * 300 + b"|" + b"x" * 299 + b"y|" + b"ab|ab|" + b"z" * 256 + b"|" + b"z" * 256
    buf = np.frombuffer(text, np.uint8)
    parts = text.split(b"|")
    starts = np.cumsum([0] + [len(p) + 1 for p in parts[:-1]])
    lens = np.array([len(p) for p in parts])
    h1, h2 = hash_spans(buf, starts, lens)
    pairs = list(zip(h1.tolist(), h2.tolist()))
    assert pairs[0] == pairs[1] and pairs[0] != pairs[2] and pairs[3] == pairs[4] and pairs[5] == pairs[6]
    assert len(set(pairs)) == 4
    (only,) = hash_spans(buf, starts, lens, two=False)
    assert only.tolist() == h1.tolist()


def test_a_label_of_megabytes_reads_in_one_pass(tmp_path: Path):
    from datakit.labels import read_labels

    path = tmp_path / "l.csv"
    path.write_bytes(b"file,label\na.png,cat\nb.png," + b"x" * (2 << 20) + b"\nc.png," + b"x" * (2 << 20) + b"\n")
    table = read_labels(path)
    cm = table.class_map()
    assert cm.classes == ("cat", "x" * (2 << 20)) and table.targets(cm).tolist() == [0, 1, 1]
