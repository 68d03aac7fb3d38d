"""Label tables (xlsx sheets, csv/tsv tables, ``path label`` lists, in any common encoding),
their one typing rule, class maps, and all label validation.

Every row keeps where it came from (sheet and row as Excel shows it, or the line of a text
file), so each problem is reported where the user will fix it, and every problem of a table
is reported at once. A table is held in numpy arrays (file names as one UTF-8 buffer plus
offsets, labels and splits as small code arrays), never as per-row Python objects.
"""

from __future__ import annotations

import codecs
import contextlib
import contextvars
import csv
import dataclasses
import datetime
import decimal
import functools
import io
import itertools
import json
import logging
import math
import os
import posixpath
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from datakit.errors import LabelError, UsageError, as_flag, refuse_empty
from datakit.filenames import decodes
from datakit.textparse import Columns, gather, hash_spans, holds, parse_delimited, parse_list, span_keys

__all__ = [
    "FILE_COLUMNS",
    "LABEL_COLUMNS",
    "SPLIT_COLUMNS",
    "ClassMap",
    "CodedColumn",
    "LabelError",
    "LabelTable",
    "StringArray",
    "TextEncoding",
    "detect_text_encoding",
    "read_labels",
    "resolve_path",
]

log = logging.getLogger("datakit")

FILE_COLUMNS = ("file", "filename", "file_name", "filepath", "file_path", "path", "image", "image_path", "image_name",
                "img", "img_path", "name", "文件名", "文件", "文件路径", "图片", "图片名", "图片名称", "图像", "图像名",
                "路径", "图片路径", "图像路径", "图片文件", "图片文件名", "文件名称", "檔名", "檔案", "檔案名稱",
                "圖片", "圖片名稱", "圖片路徑", "路徑")  # fmt: skip
LABEL_COLUMNS = ("label", "labels", "class", "class_name", "classname", "category", "target", "标签", "类别", "类",
                 "分类", "类别名", "標籤", "類別", "分類")  # fmt: skip
SPLIT_COLUMNS = ("split", "subset", "set", "划分", "数据集", "劃分", "資料集")
# sheet names that are splits whatever their rows name (files without extensions): train/val/test as people write them
_SPLIT_NAMES = frozenset({"train", "training", "trainset", "val", "valid", "validation", "dev", "test", "testing",
                          "testset", "训练", "训练集", "验证", "验证集", "测试", "测试集", "訓練", "訓練集", "驗證",
                          "驗證集", "測試", "測試集"})  # fmt: skip
EXCEL_SUFFIXES = (".xlsx", ".xlsm")
TEXT_SUFFIXES = (".csv", ".tsv", ".txt", ".lst")
_TABLE_SUFFIXES = ", ".join((*EXCEL_SUFFIXES, *TEXT_SUFFIXES)[:-1]) + " or " + TEXT_SUFFIXES[-1]


class NotATable(UsageError, LabelError):
    """A path given as a label table that is none (a folder, a ``.json``): a mistake in the call (exit 2),
    and still a ``LabelError`` to code that catches that."""


class SheetNotRead(UsageError, LabelError):
    """A sheet asked for that is not there, or hidden without ``include_hidden``: a mistake in the
    call (exit 2), as an unknown split is, and still a ``LabelError`` to code that catches that."""


class ColumnNotFound(UsageError, LabelError):
    """A column named by the caller (``file_column=``, ``label_column=``, ``split_column=``) that the table does
    not have: a mistake in the call (exit 2), and still a ``LabelError`` to code that catches that."""


class NotADataset(UsageError, LabelError):
    """A folder or zip given as a dataset with no class folders in it (and no table): a mistake in the call
    (exit 2), as any source that is not a dataset, and still a ``LabelError`` to code that catches that."""


class WrongRoot(UsageError, LabelError):
    """A table whose files are all under another folder than the one they were looked for in (that folder found):
    a mistake in the call (exit 2), its fix named, and still a ``LabelError`` to code that catches that."""


# every extension datakit decodes (io.IMAGE_EXTENSIONS), and .jfif: a row naming one is an image's row
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".bmp", ".webp", ".tif", ".tiff", ".gif", ".ppm", ".pgm",
                  ".pbm")  # fmt: skip
MAX_LISTED = 20  # problems spelled out in one LabelError; the rest are counted
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")  # a label a number cell could hold
_INT = re.compile(r"[+-]?[0-9]+(?:\.0*)?")  # ASCII digits: a full-width "１" is a name, a look-alike of "1"
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def _norm(name: object) -> str:
    return re.sub(r"[\s_\-]+", "_", str(name).strip().lower())


# columns that name a sample's class too, by number or by name: found beside the label column, they must
# number the classes as it does, or the table says which to use (label_column=)
_RIVAL_COLUMNS = frozenset(_norm(k) for k in (
    *LABEL_COLUMNS, "class_id", "classid", "class_idx", "class_index", "label_id", "labelid", "label_idx",
    "label_index", "category_id", "categoryid", "category_idx", "target_id", "cls", "cls_id", "类别编号", "类别id",
    "类别号", "类别序号", "标签编号", "标签id", "類別編號", "label_name", "labelname", "category_name", "class_label",
    "类别名称", "类别名", "类名", "标签名称", "标签名", "類別名稱"))  # fmt: skip
# of those, the ones that spell out a class's name: beside class names (an ImageNet WordNet id and its words) they
# are a description, one to one, sorted otherwise; beside integer ids they are the names the ids stand for
_NAME_COLUMNS = frozenset(_norm(k) for k in (
    "label_name", "labelname", "category_name", "class_label", "类别名称", "类别名", "类名", "标签名称", "标签名",
    "類別名稱"))  # fmt: skip


def _blank(v: object) -> bool:
    if v.__class__ is str:  # (most cells: one check)
        s = v.strip()
        if not s:
            return True
        if s[0] not in _UNSEEN_CHARS:  # (a visible first character: most cells, one look-up)
            return False
        return _NOTHING_SEEN.fullmatch(s) is not None  # a zero-width space alone: empty, as it looks
    return (
        v is None
        or (isinstance(v, (float, np.floating)) and math.isnan(v))
        or (isinstance(v, str) and (not v.strip() or _NOTHING_SEEN.fullmatch(v) is not None))
        or type(v).__name__ in ("NAType", "NaTType")  # pandas' missing values (pd.NA, pd.NaT)
    )


def _int_key(v: object) -> object:
    """An integer label's value (``'2.0'``, ``'+1'``, ``np.int64(2)``), else its text."""
    t = _text(v)
    return _int_of(t) if _is_int_text(t) else t


def _shown_classes(classes: Sequence[str]) -> str:
    head = ", ".join(repr(c) for c in classes[:5])
    return f"classes {head}{', ...' if len(classes) > 5 else ''}" if classes else "no classes"


def _values(labels: Iterable[object]) -> Iterable[object]:
    """``labels``, a tensor's as a NumPy array (its elements are ``tensor(3)``, which reads as the name
    ``'tensor(3)'``), and floats narrower than 64 bits as the numbers they print as (``np.float32(0.1)`` is 0.1,
    not 0.100000001490116; NaN a missing label)."""
    if type(labels).__module__.startswith("torch") and callable(getattr(labels, "numpy", None)):
        t = labels.detach().cpu()
        labels = (t.float() if str(t.dtype) == "torch.bfloat16" else t).numpy()  # NumPy has no bfloat16
    if isinstance(labels, np.ndarray) and labels.dtype.kind == "f" and labels.dtype.itemsize < 8:
        return [float(x) for x in labels.astype(str).ravel()]
    return labels


def _text(v: object) -> str:
    """A cell as text, as Excel shows it and writes it to CSV: numbers without a spurious ``.0``, booleans as
    ``TRUE``/``FALSE`` (a workbook's boolean cell reads as Python's ``True``), stray whitespace stripped."""
    if v.__class__ is str:  # (most cells: one check)
        return v.strip()
    if isinstance(v, (bool, np.bool_)):  # before numbers: a bool is an int
        return "TRUE" if v else "FALSE"
    if isinstance(v, datetime.datetime):  # a date cell: openpyxl gives a datetime, calamine a date; one text
        return v.date().isoformat() if v.time() == datetime.time() else v.isoformat(sep=" ")
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, datetime.timedelta):  # a duration cell: as [hh]:mm:ss shows it (25:00:00, not '1 day, 1:00:00')
        ms = (abs(v) + datetime.timedelta(microseconds=500)) // datetime.timedelta(milliseconds=1)  # (float noise)
        sec, ms = divmod(ms, 1000)
        text = f"{'-' if v < datetime.timedelta(0) else ''}{sec // 3600:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}"
        return text + (f".{ms:03d}".rstrip("0") if ms else "")  # a fraction the format may show (ss.00) kept
    if isinstance(v, float) and math.isfinite(v):
        if not v.is_integer():  # Excel shows 15 significant digits: a formula's 3.3000000000000003 (=1.1+2.2) is 3.3
            v = float(format(v, ".15g"))
        if v.is_integer():
            v = int(v)
        elif "e" in repr(v):  # 5e-05: Excel shows and writes 0.00005 (its General format has no exponent there)
            return format(decimal.Decimal(repr(v)), "f")
    return str(v).strip()


def split_index(values: Sequence[str], split: str) -> int | None:
    """Where ``split`` is among a table's split values: itself, or the one value that is the same whole number
    written another way (fold ``2`` asked for, the CSV says ``2.0``; a workbook's 2.0 cell reads ``2``)."""
    if split in values:
        return list(values).index(split)
    if not _is_int_text(str(split).strip()):
        return None
    same = [i for i, v in enumerate(values) if _int_key(v) == _int_key(str(split).strip())]
    return same[0] if len(same) == 1 else None  # "1.0" among "1" and "01": which one is not guessed


_DECIMAL_COMMA = re.compile(r"[+-]?[0-9]+,0+")  # whole numbers: '2,0' (pandas' decimal=','); '4,3' is a name
_IN_ASCII_QUOTES = re.compile(r"\"[^\"]+\"|'[^']+'")  # a list's label as R's write.table quotes it
_QUOTED_NUMBER = re.compile(r"([\"'])[+-]?[0-9]+(?:\.[0-9]*)?\1")


def _sorted_pair(form: str) -> str:
    return "'10,0' before '2,0'" if "comma" in form else "'\"10\"' before '\"2\"'"


# 2.000000e+00: C's %e, as pandas' float_format='%e' writes it (a point and a signed exponent: '5e12', '1E1' are names,
# hexadecimal codes and the like)
_EXP_INT = re.compile(r"[+-]?[0-9]\.[0-9]+[eE][+-][0-9]{2,3}")


def _is_int_text(s: str) -> bool:
    # past 4000 digits a label is no class index (and Python refuses to read it as one): a name; a whole number in
    # exponent form (1.000000e+01, as a float format writes 10) is one too, or it would sort as text before 2
    if len(s) > 4000:
        return False
    if _INT.fullmatch(s) is not None:
        return True
    if _EXP_INT.fullmatch(s) is None:
        return False
    value = decimal.Decimal(s)
    return value == value.to_integral_value()


def _is_wide_int(s: str) -> bool:
    """An integer label written in decimal digits other than ASCII ones (full-width ``１２`` typed with an East
    Asian input method, Arabic-Indic ``١٢``): a name by :func:`_is_int_text`, though nobody means it as one, and
    as a name it sorts as text. Circled ``①`` or Roman ``Ⅻ`` numerals are no decimal digits: names."""
    body = s.lstrip("+-＋－")
    return 0 < len(body) <= 4000 and not s.isascii() and body.isdecimal()


def _int_of(s: str) -> int:
    if "e" in s or "E" in s:
        return int(decimal.Decimal(s))
    return int(s.split(".", 1)[0])


# ---------------------------------------------------------------------------------------------
# compact columns


class StringArray:
    """Many strings stored as one UTF-8 buffer plus offsets: two numpy arrays, no Python objects."""

    def __init__(self, items: Sequence[str] = ()) -> None:
        encoded = [s.encode("utf-8", "surrogateescape") for s in items]
        self.offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=self.offsets[1:])
        self.data = np.frombuffer(b"".join(encoded), dtype=np.uint8).copy()

    @classmethod
    def from_buffer(cls, data: np.ndarray, offsets: np.ndarray) -> StringArray:
        """Wrap an existing UTF-8 buffer and its ``len + 1`` offsets (no copy)."""
        out = cls.__new__(cls)
        out.data, out.offsets = data, offsets.astype(np.int64, copy=False)
        return out

    @classmethod
    def concat(cls, parts: Sequence[StringArray]) -> StringArray:
        if len(parts) == 1:
            return parts[0]
        data = np.concatenate([p.data for p in parts]) if parts else np.zeros(0, np.uint8)
        offsets = [np.zeros(1, np.int64)]
        base = 0
        for p in parts:
            offsets.append(p.offsets[1:] + base)
            base += int(p.offsets[-1])
        return cls.from_buffer(data, np.concatenate(offsets))

    def take(self, index: np.ndarray) -> StringArray:
        """The strings at ``index`` (an integer array), as a new array."""
        if len(index) and np.any(np.diff(index) <= 0):  # keep order: gather one by one unless increasing
            return StringArray([self[int(i)] for i in index])
        index = np.asarray(index, dtype=np.int64)
        data, offsets = gather(self.data, self.offsets[:-1][index], self.offsets[1:][index])
        return StringArray.from_buffer(data, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> str:
        return self.data[self.offsets[i] : self.offsets[i + 1]].tobytes().decode("utf-8", "surrogateescape")

    def __iter__(self) -> Iterator[str]:
        blob = self.data.tobytes()
        offs = self.offsets.tolist()
        return (blob[offs[i] : offs[i + 1]].decode("utf-8", "surrogateescape") for i in range(len(self)))

    def tolist(self) -> list[str]:
        return list(self)

    @property
    def nbytes(self) -> int:
        return self.data.nbytes + self.offsets.nbytes


class CodedColumn:
    """A column of few distinct values: the values once, and one small integer code per row."""

    def __init__(self, values: Sequence[object], codes: np.ndarray, missing: object = "") -> None:
        self.values = tuple(values)
        self.codes = codes
        self.missing = missing  # the value of code -1

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, i: int) -> object:
        c = int(self.codes[i])
        return self.values[c] if c >= 0 else self.missing

    def __iter__(self) -> Iterator[object]:
        vals = (*self.values, self.missing)  # code -1 picks the last
        return (vals[c] for c in self.codes.tolist())

    def tolist(self) -> list[object]:
        return list(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple)):
            return self.tolist() == list(other)
        return NotImplemented


# ---------------------------------------------------------------------------------------------
# class maps


@dataclass(frozen=True)
class ClassMap:
    """Class names in index order: index ``i`` is ``classes[i]``.

    The typing rule is the same for every table format: when every label is an integer
    (``1``, ``"1"``, ``1.0``), the labels are integers and the classes are in numeric order;
    ``0..C-1`` keep their values, any other set (``1..C``, gaps) is refused unless
    ``remap=True``, which maps the sorted values to ``0..C-1``. Otherwise every label is a class
    name, ordered by code point (Python's ``sorted``, the order torchvision's ImageFolder uses). A boolean
    (a workbook's boolean cell) is the name Excel shows and writes to CSV: ``TRUE`` or ``FALSE``.
    """

    classes: tuple[str, ...]
    source_values: tuple[int, ...] | None = None  # original integer labels, when remapped

    @classmethod
    def from_labels(cls, labels: Iterable[object], *, remap: bool = False, where: str = "labels") -> ClassMap:
        values = {_text(v) for v in _values(labels) if not _blank(v)}
        if not values:
            return cls(())
        ints = [_is_int_text(v) for v in values]
        if all(ints):
            return cls.from_ints(sorted({_int_of(v) for v in values}), remap=remap, where=where)
        if any(ints):
            raise LabelError(f"{where}: labels mix integers and class names; make them all one kind")
        return cls(tuple(sorted(values)))

    @classmethod
    def from_ints(
        cls, ints: Sequence[int], *, remap: bool = False, where: str = "labels", say: bool = True
    ) -> ClassMap:
        """``say``: warn of a remapped set with gaps (not where the caller maps them only to go on reading, a
        check that reports them as a problem)."""
        ints = sorted(ints)
        if ints == list(range(len(ints))):
            return cls(tuple(str(i) for i in ints))
        if not remap:
            raise LabelError(f"{where}: {_range_message(ints)}")
        if say and _unlike_one_based(ints) and (where, tuple(ints)) not in _GAPS_SAID and not _GIVEN_CLASSES.get():
            # (with classes= given, the labels are read as they are and then indexed by those: nothing to say)
            # 1..C shifted by one is what remap_labels is for; a set with gaps, or from 2 on, is as often a split
            # lacking classes
            _GAPS_SAID.add((where, tuple(ints)))
            why = "have gaps" if ints[-1] - ints[0] + 1 != len(ints) else f"start at {ints[0]}"
            if ints[0] < 0:  # -1: as often "no label" (ignore_index, an unlabelled image) as a class
                why += f" ({ints[0]}: often 'no label', not a class)"
            log.warning("%s: integer labels %s remapped to 0..%d in order (remap_labels, --remap-labels), though they "
                        "%s: if this is a split lacking some classes, it takes the training split's indices only "
                        "with classes= (--classes)", where, _ranges(ints), len(ints) - 1, why)  # fmt: skip
        return cls(tuple(str(i) for i in ints), tuple(ints))

    @property
    def class_to_idx(self) -> dict[str, int]:
        return {c: i for i, c in enumerate(self.classes)}

    def __len__(self) -> int:
        return len(self.classes)

    def encode(self, labels: Sequence[object]) -> np.ndarray:
        """Indices (int64) for ``labels`` (class names, or integer labels when remapped)."""
        labels = _values(labels)
        if self.source_values is not None:
            lookup = {v: i for i, v in enumerate(self.source_values)}
            key = _int_key
        else:
            lookup, key = self.class_to_idx, _text
        try:
            return np.fromiter((lookup[key(v)] for v in labels), dtype=np.int64, count=len(labels))
        except KeyError:
            pass
        if self.source_values is None and all(_is_int_text(c) for c in self.classes):  # 0..C-1: '2.0', '+1' too
            ints = {_int_of(c): i for i, c in enumerate(self.classes)}
            found = [ints.get(_int_key(v)) for v in labels]
            if None not in found and len(ints) == len(self.classes):  # ('7', '07'): no one number a class
                return np.asarray(found, dtype=np.int64)
        i, v = next((i, v) for i, v in enumerate(labels) if key(v) not in lookup)
        shown = _text(v) if len(_text(v)) <= 60 else _text(v)[:57] + "..."
        what = "missing" if _blank(v) else f"{shown!r}, not one of the {len(self.classes)} classes"
        raise LabelError(f"label at index {i}: {what} ({_shown_classes(self.classes)})")

    def to_json(self) -> dict:
        out: dict = {"classes": list(self.classes)}
        if self.source_values is not None:
            out["source_values"] = list(self.source_values)
        return out

    @classmethod
    def from_json(cls, obj: dict) -> ClassMap:
        """The map :meth:`to_json` wrote; ``ValueError`` for anything else (a list, names that are
        not strings, ``source_values`` that are not integers, one per class)."""
        classes = obj.get("classes") if isinstance(obj, dict) else None
        if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
            raise ValueError('not a class map: {"classes": [class names]} expected')
        src = obj.get("source_values")
        if src is not None and (not isinstance(src, list) or len(src) != len(classes)
                                or not all(type(v) is int for v in src)):  # fmt: skip
            raise ValueError('not a class map: "source_values" must be one integer per class')
        for name, values in (("class", classes), ("source value", src or [])):
            if len(set(values)) != len(values):  # two indices under one name: one of them unreachable by name
                twice = next(v for v in values if values.count(v) > 1)
                at = [i for i, v in enumerate(values) if v == twice]
                raise ValueError(f"a class map naming {name} {twice!r} twice (classes {at[0]} and {at[1]})")
        return cls(tuple(classes), tuple(src) if src is not None else None)

    def save(self, path: str | os.PathLike) -> None:
        """Write the map as JSON, atomically: a kill leaves the old file or the new one, never half of it."""
        from datakit.filenames import json_text

        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")  # one writer at a time (a pack's holds its lock)
        try:
            tmp.write_text(json_text(self.to_json(), indent=1), encoding="utf-8")
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()

    @classmethod
    def load(cls, path: str | os.PathLike) -> ClassMap:
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))


def _ranges(ints: list[int]) -> str:
    if ints[-1] - ints[0] == len(ints) - 1:  # sorted and distinct: no gap (never a list as long as the span)
        return f"{ints[0]}..{ints[-1]}"
    return "{" + ", ".join(map(str, ints[:8])) + (", ..." if len(ints) > 8 else "") + "}"


_GAPS_SAID: set[tuple[str, tuple[int, ...]]] = set()  # remapped label sets with gaps, warned about once a process


def _range_message(ints: list[int]) -> str:
    n, lo, hi = len(ints), ints[0], ints[-1]
    head = (f"integer labels are {_ranges(ints)}, not 0..{n - 1}; passed on as they are they would index past the "
            f"{n} outputs of a classifier (CUDA: 'device-side assert triggered'). ")  # fmt: skip
    own = ("a split kept in a file of its own (a val list without some class) takes the training split's classes"
           "{} classes=train.classes (pack-lmdb --classes train.lmdb), since remapping it alone would shift its "
           "indices")  # fmt: skip
    if _unlike_one_based(ints):  # most likely a split lacking classes: the way that keeps its indices first
        return (head + "A" + own.format(":")[1:] + f"; for a table of every class, remap_labels=True "
                f"(--remap-labels) maps {_ranges(ints)} to 0..{n - 1} in order, or fix the table")  # fmt: skip
    return (head + f"Use remap_labels=True (--remap-labels) to map {lo}..{hi} to 0..{n - 1} in order, or fix the "
            "table; " + own.format(" instead:"))  # fmt: skip


def _unlike_one_based(ints: list[int]) -> bool:
    """Sorted distinct integer labels that are not 1..C: gaps in them, a first label past 1, or a negative one."""
    return ints[0] > 1 or ints[0] < 0 or ints[-1] - ints[0] + 1 != len(ints)


# ---------------------------------------------------------------------------------------------
# the table


@dataclass
class LabelTable:
    """Rows of (file, label, split), each with the sheet and row (or line) it came from.

    ``files`` is a :class:`StringArray`; ``labels``, ``splits`` and ``sheets`` are
    :class:`CodedColumn` s; ``rows`` an int32 array. ``class_values`` holds the labels of the
    whole table (every sheet read, hidden ones only with ``include_hidden``), so one split's class
    map agrees with the others'. A table stands for its file where a path is expected
    (``os.fspath(table)``).
    """

    path: Path
    files: StringArray
    labels: CodedColumn
    splits: CodedColumn
    sheets: CodedColumn
    rows: np.ndarray
    file_column: str = ""
    label_column: str = ""
    kind: str = "name"  # "int", "name", "mixed" or "empty"
    class_values: tuple[str, ...] = ()
    encoding: str | None = None
    notes: list[str] = field(default_factory=list)
    read_problems: list[tuple[tuple[int, int], str]] = field(default_factory=list)
    sheet_orders: tuple[int, ...] = ()  # each sheet's place in the workbook, to sort problems
    # problems found on the whole table when these are some of its rows (None: found on these rows)
    table_problems: list[tuple[tuple[int, int], str]] | None = None
    # the whole table these rows are part of (a split read alone), for problems only the root shows
    whole: LabelTable | None = field(default=None, repr=False, compare=False)
    # files named by rows left out for a problem of their own (a blank label): named, so never "not in the table"
    dropped_files: list[str] = field(default_factory=list, repr=False, compare=False)
    unread: int = field(default=0, repr=False, compare=False)  # lines refused whole, their labels unread

    def __len__(self) -> int:
        return len(self.files)

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def where_label(self, label: str) -> str | None:
        """Where the first row labelled ``label`` is (:meth:`where`); an integer label by its value (``'03'`` is 3).
        None when no row is."""
        values = [str(v) for v in self.labels.values]
        if self.kind == "int" and _is_int_text(label):
            want = {k for k, v in enumerate(values) if _is_int_text(v) and _int_of(v) == _int_of(label)}
        else:
            want = {k for k, v in enumerate(values) if v == label}
        rows = np.flatnonzero(np.isin(self.labels.codes, list(want))) if want else []
        return self.where(int(rows[0])) if len(rows) else None

    def where(self, i: int) -> str:
        """``"labels.xlsx, sheet 'train', row 7"`` (or ``"labels.csv, line 7"``) for row ``i``."""
        return self._where(self.sheets[i], int(self.rows[i]))

    def _where(self, sheet: object, row: int) -> str:
        if sheet:
            return f"{self.path}, sheet {sheet!r}, row {row}"
        return f"{self.path}, line {row}"

    @property
    def split_names(self) -> list[str]:
        used = np.unique(self.splits.codes)
        return [self.splits.values[c] for c in sorted(int(c) for c in used if c >= 0)]

    def select(self, split: str | None) -> LabelTable:
        """Only the rows of ``split`` (a sheet name, or a value of the split column)."""
        if split is None:
            return self
        code = split_index(self.splits.values, split)
        keep = np.flatnonzero(self.splits.codes == code) if code is not None else np.zeros(0, np.int64)
        if not len(keep):
            names = ", ".join(repr(s) for s in self.split_names) or "none (the table has no sheets or split column)"
            raise UsageError(f"{self.path}: no split {split!r}; the splits are {names}")
        return self._take(keep)

    def _take(self, keep: np.ndarray) -> LabelTable:
        def col(c: CodedColumn) -> CodedColumn:
            return CodedColumn(c.values, c.codes[keep], c.missing)

        return LabelTable(self.path, self.files.take(keep), col(self.labels), col(self.splits), col(self.sheets),
                          self.rows[keep], self.file_column, self.label_column, self.kind, self.class_values,
                          self.encoding, list(self.notes), [], self.sheet_orders)  # fmt: skip

    # -- typing and validation ------------------------------------------------------------

    def class_map(self, remap: bool = False, strict: bool = True) -> ClassMap:
        """The class map of the whole table (every sheet), by the one typing rule.

        ``strict=False`` never refuses: mixed labels count as names, other integer sets are remapped.
        """
        values = self.class_values
        if self.kind == "int":
            ints = sorted({_int_of(v) for v in values})
            return ClassMap.from_ints(ints, remap=remap or not strict, where=str(self.path), say=remap)
        if self.kind == "mixed" and strict and not _names_given(values):
            raise LabelError(self._mixed_problem())
        return ClassMap(tuple(sorted(set(values))))

    def targets(self, class_map: ClassMap) -> np.ndarray:
        """The class index (int64) of every row under ``class_map``."""
        values = [str(v) for v in self.labels.values]
        if class_map.source_values is not None or self.kind == "int":
            lookup = {v: i for i, v in enumerate(class_map.source_values or [int(c) for c in class_map.classes])}
            per_value = [lookup.get(_int_of(v), -1) if _is_int_text(v) else -1 for v in values]
        else:
            lookup = class_map.class_to_idx
            per_value = [lookup.get(v, -1) for v in values]
        table = np.asarray(per_value + [-1], dtype=np.int64)
        out = table[self.labels.codes]
        if len(out) and out.min() < 0:
            bad = int(np.flatnonzero(out < 0)[0])
            raise LabelError(f"{self.where(bad)}: label {self.labels[bad]!r} is not one of the {len(class_map)} "
                             "classes")  # fmt: skip
        return out

    def problems(self, remap: bool = False) -> list[str]:
        """Every problem of the table, one line each with its sheet and row (or line), in table order:
        blank files or labels, duplicate files (read with a split: also those listed in another split),
        labels that are one name in two Unicode forms or that differ only in invisible characters, spaces
        or character width, mixed integer and name labels, integer labels outside ``0..C-1`` (unless
        ``remap``), empty splits, missing columns, undecodable rows."""
        found = list(self.read_problems)
        if self.table_problems is not None:
            found += self.table_problems
        else:
            found += self._duplicate_problems() + self._twin_problems() + self._look_alike_problems()
        whole = self.whole or self  # the kind of labels is the whole table's: so are its counts and first rows
        if self.kind == "mixed" and not _names_given(whole.class_values):
            found.append(((1 << 30, 0), whole._mixed_problem()))
        elif self.kind == "int" and not remap:
            ints = sorted({_int_of(v) for v in self.class_values})
            # not judged without lines refused whole (their labels unread): a list of 0 and 1 whose one 0 line is
            # refused would be "1..1, not 0..0", with --remap-labels advised
            if ints != list(range(len(ints))) and not whole.unread:
                found.append(((1 << 30, 1), whole._range_problem(ints)))
        elif self.kind == "name" and len(whole) and all(_VECTOR.fullmatch(str(v)) for v in whole.labels.values):
            found.append(((1 << 30, 2), whole._vector_problem()))
        elif self.kind == "name" and len(whole) and any(_is_wide_int(str(v)) for v in whole.labels.values):
            found.append(((1 << 30, 3), whole._wide_digits_problem()))
        elif self.kind == "name" and len(whole) and (spelled := whole._numbers_spelled_as_text()):
            found.append(((1 << 30, 3), spelled))
        if self.kind == "name" and len(whole) and all(_looks_like_file(str(v)) for v in whole.labels.values):
            some = [str(whole.files[i]) for i in range(min(len(whole), 1000))]
            if not any(_looks_like_file(f) for f in some):  # file, label under a header that says label, file
                why = (f"the header names the columns the other way round? ({self.file_column!r} is read as the "
                       f"files, {self.label_column!r} as the labels: name each column as it holds)")  # fmt: skip
                if (self.file_column, self.label_column) == (
                    "path",
                    "label",
                ):  # a list's 'label path' lines, or such a header
                    why = ("the lines are 'label path' where a list's are 'path label' (or a header 'path label' "
                           "names the columns the other way round)? write each line as its image's path, then its "
                           "label")  # fmt: skip
                found.append(((1 << 30, 4), f"{self.path}: every label is an image's file name ({whole.labels[0]!r}, "
                              f"first at {whole._short(0)}) and no file name is ({some[0]!r}): {why}"))  # fmt: skip
        found.sort(key=lambda p: p[0])
        return [text for _, text in found]

    def missing_classes(self, class_map: ClassMap, split: str | None = None) -> list[str]:
        """One line per split that lacks some classes of ``class_map`` (a table-only check); with
        ``split``, that split's line alone."""
        out = []
        if not self.split_names:
            return out
        targets = self.targets(class_map)
        for code, name in enumerate(self.splits.values):
            rows = self.splits.codes == code
            if not rows.any() or (split is not None and name != split):
                continue
            present = set(np.unique(targets[rows]).tolist())
            absent = [c for i, c in enumerate(class_map.classes) if i not in present]
            if absent:
                out.append(f"split {name!r} has no samples of class {', '.join(map(repr, absent))}")
        return out

    def _first_row(self, mask_values: Sequence[bool]) -> int | None:
        wanted = np.asarray(list(mask_values) + [False], dtype=bool)
        hits = np.flatnonzero(wanted[self.labels.codes])
        return int(hits[0]) if len(hits) else None

    def _mixed_problem(self) -> str:
        is_int = [_is_int_text(str(v)) for v in self.labels.values]
        n_int = int(np.asarray(is_int + [False])[self.labels.codes].sum())
        i, j = self._first_row(is_int), self._first_row([not x for x in is_int])
        first_int = f" (first {self.labels[i]!r} at {self._short(i)})" if i is not None else ""
        first_name = f" (first {self.labels[j]!r} at {self._short(j)})" if j is not None else ""
        return (
            f"{self.path}: labels mix integers and class names: {n_int} rows hold integers{first_int} and "
            f"{len(self) - n_int} hold names{first_name}; make every label a class name, or every label an integer "
            "(or, where both are class names, as an OCR set's 0-9 and A-Z, give the classes with classes=, --classes)"
        )

    def _first_label(self, shown: Callable[[str], str] = repr) -> str:
        """`` (first LABEL at ROW)`` of the table's first row, "" when it has none."""
        i = self._first_row([True] * len(self.labels.values))
        return f" (first {shown(str(self.labels[i]))} at {self._short(i)})" if i is not None else ""

    def _vector_problem(self) -> str:
        return (f"{self.path}: every label is a list of 0s and 1s{self._first_label()}: multi-label vectors "
                "(PaddleClas' multi-label lists), while datakit reads one class per image; make each label one class "
                "name or index")  # fmt: skip

    def _distinct_notes(self) -> list[str]:
        """A note where every one of 20 rows or more has a label of its own: a column of ids or annotations read as
        the classes (ImageNet's PredictionString 'n01440764 0 3 50 60', a class and a box: 30 rows, 30 classes)."""
        n = len(self)
        if self.kind != "name" or n < 20 or len(self.labels.values) < n:
            return []
        values = [str(v) for v in self.labels.values]
        if 5 * sum(bool(_ANNOTATED.fullmatch(v.strip())) for v in values) < 4 * n:  # (one image a class: a catalogue)
            return []
        if len({v.split()[0] for v in values}) == n:  # the words repeat, the numbers differ: a class and its box
            return []
        shown = ", ".join(map(repr, values[:2]))
        return [f"{self.path}: every one of its {n} rows has a label of its own, a word and numbers ({shown}, ...): "
                f"{n} classes of one image each; is the label column an annotation (a class and a box)? name the "
                "class column with label_column= (--label-column), or write the class alone"]  # fmt: skip

    def _quoted_notes(self) -> list[str]:
        """A note for a label that is another label in quotes (``'cat'`` or ``"cat"`` beside ``cat``: quotes typed
        into a cell, or left by a tool that quoted twice): two classes, which may be meant, so said, not refused."""
        if self.kind != "name" or not len(self):
            return []
        values = [str(v) for v in self.labels.values]
        names = set(values)
        out = []
        for v in values:
            m = _QUOTED.fullmatch(v)
            if m is not None and m.group(2) in names:
                i, j = (self._first_row([x == w for x in values]) for w in (m.group(2), v))
                out.append(f"{self.path}: labels {m.group(2)!r} at {self._short(i)} and {v!r} at {self._short(j)} "
                           "differ only in the quotes around the second: they are 2 classes (quotes typed into the "
                           "cell, or left by a tool that quoted the text twice?)")  # fmt: skip
                if len(out) == 3:
                    break
        return out

    def _list_notes(self) -> list[str]:
        """A note for labels that are lists of other labels ('cat,dog' beside 'cat' and 'dog', or 'cat,dog' and
        'dog,cat'): a multi-label table, each combination of which is a class of its own, or classes of
        combinations (sleet as 'rain,snow') meant so; said, not refused."""
        if self.kind != "name" or not len(self) or all(_VECTOR.fullmatch(str(v)) for v in self.labels.values):
            return []
        values = [str(v) for v in self.labels.values]
        names = set(values)
        orders: dict[frozenset, tuple[str, list[str]]] = {}
        for v in values:
            parts = [p for p in _LIST_SEPARATORS.split(v.strip()) if p]
            if len(parts) < 2:
                parts = [p for p in _OTHER_SEPARATORS.split(v.strip()) if p]
            if len(parts) < 2 or len(set(parts)) < len(parts):
                continue
            if all(p in names for p in parts):
                i = self._first_row([x == v for x in values])
                return [f"{self.path}: label {v!r} at {self._short(i)} is a list of other labels "
                        f"({', '.join(map(repr, parts))}), and a class of its own: datakit reads one class per image "
                        "(a multi-label table needs a collate and a loss of your own)"]  # fmt: skip
            other, ordered = orders.setdefault(frozenset(parts), (v, parts))
            if other != v and ordered != parts:  # (the same labels in the same order apart look alike: said there)
                i, j = (self._first_row([x == w for x in values]) for w in (other, v))
                return [f"{self.path}: labels {other!r} at {self._short(i)} and {v!r} at {self._short(j)} list the "
                        "same labels in another order, and are two classes: datakit reads one class per image (a "
                        "multi-label table needs a collate and a loss of your own)"]  # fmt: skip
        return self._tag_notes(values)

    def _tag_notes(self, values: list[str]) -> list[str]:
        """A note for labels that are lists of a few words apart by spaces (Planet's 'clear primary', 'haze primary
        water'): twice as many labels as words or more, most of them of two words or more, of three lengths or more.
        Class names of words use more words than that (ImageNet's 'tiger cat', a car's make, model and year), or
        have one shape (a grid's 'ace of clubs', 'red cube')."""
        distinct = list(dict.fromkeys(values))
        words = {w for v in distinct for w in v.split()}
        lists = [v for v in distinct if len(v.split()) >= 2]
        lengths = {len(v.split()) for v in distinct}
        if len(distinct) < 8 or 2 * len(lists) < len(distinct) or 2 * len(words) > len(distinct) or len(lengths) < 3:
            return []
        i = self._first_row([x == lists[0] for x in values])
        return [
            f"{self.path}: {len(distinct)} labels are lists of {len(words)} words apart by spaces (first {lists[0]!r} "
            f"at {self._short(i)}): tags of a multi-label table, each combination a class of its own; datakit reads "
            "one class per image (a multi-label table needs a collate and a loss of your own)"
        ]

    def _numbers_spelled_as_text(self) -> str | None:
        """Labels that are all numbers written in a way read as names: with a decimal comma (``2,0``, a German or
        French locale's CSV) or in quotes (``"3"`` in a list): as class names they would sort as text, every index
        after them permuted. None when they are not."""
        values = [str(v) for v in self.labels.values]
        if _names_given(values):  # classes= names them: names they are
            return None
        for form, test, fix in (
            ("with a decimal comma", _DECIMAL_COMMA.fullmatch, "save the table with a decimal point, or write them "
             "as whole numbers (2)"),
            ("in quotes", _QUOTED_NUMBER.fullmatch, "write them without the quotes"),
        ):  # fmt: skip
            if all(test(v) for v in values) and not ("comma" in form and all(v.endswith(",000") for v in values)):
                # ('1,000', '5,000': thousands, a #,##0 column's CSV, as likely as 1.000 with a decimal comma: names)
                i = self._first_row([True] * len(values))
                first = f" (first {values[i]!r} at {self._short(i)})" if i is not None else ""
                return (f"{self.path}: every label is a number written {form}{first}: as class names they would "
                        f"sort as text ({_sorted_pair(form)}), not as the numbers they are; {fix}")  # fmt: skip
        # R's write.table quotes every field of the list it writes (a CSV's quotes are its own syntax: any left in a
        # name are meant, '"""cat"""'; and 「猫」 or “cat” are names written so)
        if self.path.suffix.lower() in (".txt", ".lst") and all(_IN_ASCII_QUOTES.fullmatch(v) for v in values):
            i = self._first_row([True] * len(values))
            first = f" (first {values[i]!r} at {self._short(i)})" if i is not None else ""
            return (f"{self.path}: every label is written in quotes{first}: the quotes would be part of the class "
                    "names; write the table without them (R: write.table(..., quote=FALSE)), or as CSV")  # fmt: skip
        return None

    def _wide_digits_problem(self) -> str:
        wide = [_is_wide_int(str(v)) for v in self.labels.values]
        i = self._first_row(wide)
        first = f" (first {_with_unseen(str(self.labels[i]))} at {self._short(i)})" if i is not None else ""
        every = "every label is an integer" if all(wide) else "labels hold integers"
        return (f"{self.path}: {every} written in full-width or other non-ASCII digits{first}: as class names "
                "they would sort as text ('１０' before '２'), not as the numbers they are; write them in ASCII "
                "digits")  # fmt: skip

    def _range_problem(self, ints: list[int]) -> str:
        outside = [0 <= int(v) < len(ints) for v in self.labels.values]
        i = self._first_row([not x for x in outside])
        first = f" (first outside: {self.labels[i]!r} at {self._short(i)})" if i is not None else ""
        return f"{self.path}: {_range_message(ints)}{first}"

    def _short(self, i: int) -> str:
        sheet = self.sheets[i]
        return f"sheet {sheet!r}, row {int(self.rows[i])}" if sheet else f"line {int(self.rows[i])}"

    def _duplicate_problems(self, keep: np.ndarray | None = None) -> list[tuple[tuple[int, int], str]]:
        """Every file listed again; with ``keep`` (a mask of rows), those where either listing is kept (a leak
        between two other splits, or val and test sharing files, is not this split's)."""
        out = []
        for i, first in _duplicates(self.files):
            if keep is not None and not (keep[i] or keep[first]):
                continue
            name, before = self.files[i], self.files[first]
            if _unicode_form(name) != _unicode_form(before) and not name.isascii():
                form = f"{_unicode_form(name)}: {ascii(name)}"
                text = (f"{self.where(i)}: file {name!r} ({form}) is listed again in another Unicode form "
                        f"(first at {self._short(first)}, {_unicode_form(before)}); a table's name finds a file in "
                        "either form, so two files named alike but for it are one to a table: rename one")  # fmt: skip
            else:
                text = f"{self.where(i)}: file {name!r} is listed again (first at {self._short(first)})"
            out.append((self._key(i), text))
        return out

    def _first_rows(self) -> dict[str, int]:
        """{label text: the first row holding it} for the name labels of the table."""
        if self.kind == "int" or not len(self):
            return {}
        codes, first = np.unique(self.labels.codes, return_index=True)
        return {str(self.labels.values[c]): int(i) for c, i in zip(codes.tolist(), first.tolist()) if c >= 0}

    def _key(self, i: int) -> tuple[int, int]:
        """Where row ``i`` sorts among the problems: its sheet's place in the workbook, then its row."""
        return ((*self.sheet_orders, 0)[int(self.sheets.codes[i])], int(self.rows[i]))

    def _twin_problems(self) -> list[tuple[tuple[int, int], str]]:
        """Labels that are one name in two Unicode forms (``café`` typed on Windows is NFC, the same
        name copied from macOS is NFD): they look the same but would be two classes."""
        if self.kind == "int" or all(unicodedata.is_normalized("NFC", str(v)) for v in self.labels.values):
            return []
        out = []
        for same in _groups(self._first_rows(), lambda v: unicodedata.normalize("NFC", v)):
            named = " and ".join(f"{v!r} ({_unicode_form(v)}: {ascii(v)}) first at {self._short(i)}" for v, i in same)
            count = "two" if len(same) == 2 else str(len(same))
            out.append((self._key(same[-1][1]), f"{self.path}: labels {named} are one name in {count} Unicode "
                        f"forms and would be {count} classes; write them in one form"))  # fmt: skip
        return out

    def _look_alike_problems(self) -> list[tuple[tuple[int, int], str]]:
        """Labels that differ only in what does not show: a zero-width character (``猫`` and ``猫\\u200b``,
        pasted from a web page), full-width letters or spaces (``ｃａｔ``, ``black\\u3000cat``, typed with a
        Chinese input method), a no-break space, spaces doubled. Nobody means them as two classes, yet
        they would be two, every index after them shifted. Only the distinct labels are looked at."""
        if self.kind == "int":
            return []
        out = self._number_spelling_problems()
        values = [str(v) for v in self.labels.values]
        keys = _look_alike_keys(values)
        if keys is None or len(set(keys)) == len({unicodedata.normalize("NFC", v) for v in values}):
            return out
        key_of = dict(zip(values, keys))
        nfc: dict[str, tuple[str, int]] = {}  # one name per Unicode form: twins are a problem of their own
        for v, i in sorted(self._first_rows().items(), key=lambda item: item[1]):
            nfc.setdefault(unicodedata.normalize("NFC", v), (v, i))
        for same in _groups(dict(nfc.values()), key_of.__getitem__):
            shown = [f"{_with_unseen(v)} first at {self._short(i)}" for v, i in same]
            count = "two" if len(same) == 2 else str(len(same))
            out.append((self._key(same[-1][1]), f"{self.path}: labels {', '.join(shown[:-1])} and {shown[-1]} "
                        "differ only in invisible characters, spaces, character width or look-alike letters and "
                        f"marks and would be {count} classes; write them alike"))  # fmt: skip
        return out

    def _number_spelling_problems(self) -> list[tuple[tuple[int, int], str]]:
        """Labels that are one number written two ways (``1.5`` and ``1.50``, ``2`` and ``2.0`` beside
        them): two classes in a text table, one in a workbook's number cells, so the same table would
        give other classes in another format."""
        by_value: dict[float, list[tuple[str, int]]] = {}
        for v, i in self._first_rows().items():
            text = str(v)
            if len(text) <= 40 and _NUMBER.fullmatch(text) and math.isfinite(float(text)):
                # at the 15 significant digits a workbook shows and reads: 0.30000000000000004 (0.1 + 0.2 saved by
                # pandas) is 0.3 there
                by_value.setdefault(float(format(float(text), ".15g")), []).append((text, i))
        out = []
        for same in by_value.values():
            if len(same) > 1:
                same.sort(key=lambda vi: vi[1])
                shown = [f"{v!r} first at {self._short(i)}" for v, i in same]
                count = "two" if len(same) == 2 else str(len(same))
                how = (f"one number written {count} ways" if len({float(v) for v, _ in same}) == 1 else
                       "the same number to the 15 significant digits a workbook keeps")  # fmt: skip
                out.append((self._key(same[-1][1]), f"{self.path}: labels {', '.join(shown[:-1])} and {shown[-1]} "
                            f"are {how} and would be {count} classes (a workbook's number cells read them as one); "
                            "write them alike"))  # fmt: skip
        return out

    def _case_notes(self) -> list[str]:
        """A note for labels that differ only in letter case (``bird``, ``Bird``): some datasets mean them
        as classes of their own, so they are not refused, but each is a class. Labels that also look alike
        (``ｃａｔ``, ``cat``) are a problem of their own: one of them stands for all here."""
        if self.kind == "int":
            return []
        values = [str(v) for v in self.labels.values]
        # letter case first, then the look-alikes: ТОР (all drawn as Latin) and тор (т is not) are one word in case
        folded = [v.casefold() for v in values]
        case_keys = _look_alike_keys(folded) or folded
        if len(set(case_keys)) == len(values):
            return []
        keys = _look_alike_keys(values) or values
        key_of, case_of = dict(zip(values, keys)), dict(zip(values, case_keys))
        out = []
        rows = self._first_rows()
        alike: dict[str, tuple[str, int]] = {}  # one name per look-alike group
        for v, i in sorted(rows.items(), key=lambda item: item[1]):
            alike.setdefault(key_of[v], (v, i))
        for same in _groups(dict(alike.values()), case_of.__getitem__):
            named = ", ".join(f"{v!r} (first at {self._short(i)})" for v, i in same[:-1])
            v, i = same[-1]
            case = len({unicodedata.normalize("NFC", w).casefold() for w, _ in same}) == 1
            how = ("letter case" if case else "letter case and in invisible characters, spaces, character width or "
                   "look-alike letters and marks")  # fmt: skip
            out.append(f"{self.path}: labels {named} and {v!r} (first at {self._short(i)}) differ only in {how}: "
                       f"they are {len(same)} classes")  # fmt: skip
        return out

    def _split_notes(self) -> list[str]:
        """Notes for a split column whose values differ only in letter case or spaces (``train``,
        ``Train``: two splits, and ``split="train"`` leaves the other's rows out) and for its blank
        cells (those rows are in no split)."""
        if not len(self.splits.values) or not len(self):
            return []
        out = []
        codes, first = np.unique(self.splits.codes, return_index=True)
        rows = {str(self.splits.values[c]): int(i) for c, i in zip(codes.tolist(), first.tolist()) if c >= 0}
        for same in _groups(rows, lambda v: " ".join(unicodedata.normalize("NFKC", v).casefold().split())):
            named = ", ".join(f"{v!r} (first at {self._short(i)})" for v, i in same[:-1])
            v, i = same[-1]
            out.append(f"{self.path}: split values {named} and {v!r} (first at {self._short(i)}) differ only in "
                       f"letter case or spaces: they are {len(same)} splits")  # fmt: skip
        blank = np.flatnonzero(self.splits.codes < 0)
        if len(blank):
            shown = ", ".join(self._short(int(i)) for i in blank[:5]) + (", ..." if len(blank) > 5 else "")
            out.append(f"{self.path}: {len(blank)} row{'s' if len(blank) > 1 else ''} with a blank split cell "
                       f"({shown}): in no split")  # fmt: skip
        return out


# what does not show: Unicode's default-ignorable code points (zero-width characters, direction marks and
# embeddings, the soft hyphen, variation selectors, Hangul fillers, tags...), control characters other than
# whitespace (NUL, DEL, C1), and the blank Braille pattern
_INVISIBLE = (
    "\x01-\x08\x0e-\x1f\x7f-\x84\x86-\x9f\xad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f"
    "\u200b-\u200f\u202a-\u202e\u2060-\u206f\u2800\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
)  # not the tags (U+E0000..: they make England's flag 🏴 other than Scotland's) nor ideographic variation selectors
_INVISIBLE_RUN = re.compile(f"[{_INVISIBLE}\x00]+")
# what the look-alike key changes: an invisible character, a space that is not one ASCII space between two words
# (labels are joined by NUL to be scanned at once: a NUL inside one is counted apart)
_UNSEEN = re.compile(f"[{_INVISIBLE}]|[^\\S ]|  |^ | $|\x00 | \x00")
_NOTHING_SEEN = re.compile(f"[\\s{_INVISIBLE}]*")  # a cell of these alone looks empty in Excel: no label
# the characters of _INVISIBLE one by one: a cell whose first character (after its spaces) is none of them shows
# something (tests/test_labels.py checks the set against the pattern)
_UNSEEN_CHARS = frozenset(
    "".join(chr(c) for a, b in re.findall(r"(.)-(.)", _INVISIBLE, re.S) for c in range(ord(a), ord(b) + 1))
    + re.sub(r".-.", "", _INVISIBLE, flags=re.S)
)


# tag characters: invisible, except in a flag's sequence (🏴 + tags + the cancel tag: England's, Scotland's)
_TAGS = re.compile("(\U0001f3f4[\U000e0020-\U000e007e]+\U000e007f)|[\U000e0000-\U000e007f]")
_ANY_TAG = re.compile("[\U000e0000-\U000e007f]")


# characters drawn as an ASCII one is: typographic apostrophes, quotes and dashes (men’s, t‑shirt, as Word and
# macOS write them), and the Cyrillic and Greek letters drawn as Latin ones (сat with a Cyrillic с). Each maps to
# the ASCII character it looks like, so two labels alike but for them are one label seen twice
_DRAWN_ALIKE = {
    "'": "\u2018\u2019\u201b\u2032\u02bc\u02b9",
    '"': "\u201c\u201d\u201f\u2033\u02ba",
    "-": "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\u2043\ufe58",
    "a": "\u0430", "c": "\u0441\u03f2", "e": "\u0435", "i": "\u0456", "j": "\u0458", "o": "\u043e\u03bf",
    "p": "\u0440\u03c1", "s": "\u0455", "x": "\u0445", "y": "\u0443", "v": "\u03bd",
    "A": "\u0410\u0391", "B": "\u0412\u0392", "C": "\u0421\u03f9", "E": "\u0415\u0395", "H": "\u041d\u0397",
    "I": "\u0406\u0399", "J": "\u0408", "K": "\u041a\u039a", "M": "\u041c\u039c", "N": "\u039d",
    "O": "\u041e\u039f", "P": "\u0420\u03a1", "S": "\u0405", "T": "\u0422\u03a4", "X": "\u0425\u03a7",
    "Y": "\u04ae\u03a5", "Z": "\u0396",
}  # fmt: skip
_DRAWN_MARKS = str.maketrans({c: a for a, cs in _DRAWN_ALIKE.items() if not a.isalpha() for c in cs})
_TO_LATIN = {c: a for a, cs in _DRAWN_ALIKE.items() if a.isalpha() for c in cs}
_DRAWN_LETTERS = str.maketrans(_TO_LATIN)
_ALL_DRAWN = re.compile("[A-Za-z" + "".join(_TO_LATIN) + "]+")  # a word of letters all drawn as Latin ones
_TWO_LETTERS = re.compile(r"[^\W\d_].*?[^\W\d_]", re.S)
# the other way: each Latin letter as its Cyrillic or Greek twin, for a label mostly of that alphabet (кoт, a Latin o)
_AS_CYRILLIC = str.maketrans({a: c for a, cs in _DRAWN_ALIKE.items() if a.isalpha() for c in cs if c >= "\u0400"})
_AS_GREEK = str.maketrans({a: c for a, cs in _DRAWN_ALIKE.items() if a.isalpha() for c in cs if c < "\u0400"})
_DRAWN_ANY = re.compile("[" + "".join(_DRAWN_ALIKE.values()) + "]")
_LATIN_LETTER = re.compile("[A-Za-z]")
_OTHER_LETTER = re.compile("[\u0370-\u03ff\u0400-\u04ff]")


def _drawn(label: str) -> str:
    """``label`` with what is drawn as ASCII written so: the typographic marks (’ ‑ “) in a label of two letters or
    more, a word (a single character or symbol is a class of its own in OCR and symbol sets: ``−`` and ``-``,
    ``f′``), and, word by word, the letters Latin, Cyrillic and Greek draw alike: a word made of such letters
    alone written in Latin (``сat`` and ``ТОP`` as ``cat`` and ``TOP``), a word of Cyrillic or Greek with a Latin
    letter among them written in that alphabet (``кoт`` as ``кот``); a word of one alphabet with letters of its
    own (``Кот``) is left as it is written."""
    if not (_DRAWN_ANY.search(label) or _OTHER_LETTER.search(label)) or not _TWO_LETTERS.search(label):
        return label
    return _ALPHA_WORD.sub(_drawn_word, label.translate(_DRAWN_MARKS))


def _drawn_word(m: re.Match) -> str:
    w = m.group()
    other = _OTHER_LETTER.search(w)
    if other is None:
        return w
    if _ALL_DRAWN.fullmatch(w):
        return w.translate(_DRAWN_LETTERS)
    if _LATIN_LETTER.search(w):
        return w.translate(_AS_CYRILLIC if other.group() >= "\u0400" else _AS_GREEK)
    return w


def _look_alike(label: str) -> str:
    """A label as it looks: invisible characters dropped (tag characters outside a flag's sequence too), then
    Unicode's compatibility form (NFKC: full-width letters, digits and spaces as ASCII ones, a no-break space as a
    space), the characters drawn as ASCII ones are (``’``, ``‑``, a Cyrillic ``с``) as those, every run of spaces
    one space."""
    if _ANY_TAG.search(label):
        label = _TAGS.sub(lambda m: m.group(1) or "", label)
    return " ".join(_drawn(unicodedata.normalize("NFKC", _INVISIBLE_RUN.sub("", label))).split())


def _look_alike_keys(values: list[str]) -> list[str] | None:
    """:func:`_look_alike` of each of ``values``; None when it would change none of them, as in most
    tables (ASCII names, Chinese names): found by two C scans of all the names joined."""
    joined = "\x00".join(values)
    if (
        unicodedata.is_normalized("NFKC", joined)
        and not _UNSEEN.search(joined)
        and joined.count("\x00") < len(values)
        and not _ANY_TAG.search(joined)
        and not _DRAWN_ANY.search(joined)
    ):
        return None
    return [_look_alike(v) for v in values]


def _with_unseen(label: str) -> str:
    """``label`` escaped (``'猫\\u200b'``), then the characters :func:`_look_alike` drops or changes in it,
    named (three at most): ``'ｃａｔ' (U+FF43 FULLWIDTH LATIN SMALL LETTER C, ...)``."""
    drawn = _drawn(label) if isinstance(label, str) else label
    changed = {c for c, d in zip(label, drawn) if c != d}  # the letters and marks written otherwise (one for one)
    odd = [
        c
        for c in dict.fromkeys(label)
        if _INVISIBLE_RUN.match(c)
        or (c.isspace() and c != " ")
        or unicodedata.normalize("NFKC", c) != c
        or "\U000e0000" <= c <= "\U000e007f"
        or c in changed
    ]
    if not odd:
        return repr(label)
    shown = [f"U+{ord(c):04X} {unicodedata.name(c, '')}".rstrip() for c in odd[:3]]
    return f"{label!r} ({', '.join(shown)}{', ...' if len(odd) > 3 else ''})"


def _unicode_form(name: str) -> str:
    return next((f for f in ("NFC", "NFD") if unicodedata.is_normalized(f, name)), "mixed")


def _groups(first_rows: dict[str, int], key) -> list[list[tuple[str, int]]]:
    """The labels (with their first rows) that share ``key`` with another, each group in table order,
    the groups in the order of their second label's first row."""
    groups: dict[str, list[tuple[str, int]]] = {}
    for v, i in sorted(first_rows.items(), key=lambda item: item[1]):
        groups.setdefault(key(v), []).append((v, i))
    return sorted((g for g in groups.values() if len(g) > 1), key=lambda g: g[1][1])


def _duplicates(files: StringArray) -> list[tuple[int, int]]:
    """(row, first row with the same name) for every repeated name, names compared as paths
    (:func:`_path_spans`: ``./a.jpg``, ``a//b/../a.jpg`` and ``.\\a.jpg`` all name ``a.jpg``).

    A cheap key per name, sorted, shows at once when no name repeats (the usual case). Otherwise
    the rows whose key another row shares are hashed in full, grouped in order of first appearance,
    and each repeat is compared exactly with the first of its group.
    """
    import pandas as pd

    n = len(files)
    if n < 2:
        return []
    data, starts, lens = _path_spans(files)
    keys = span_keys(data, starts, lens)
    ordered = np.sort(keys)
    if not (ordered[1:] == ordered[:-1]).any():
        return []
    codes, _ = pd.factorize(keys)
    rows = np.flatnonzero(np.bincount(codes)[codes] > 1)
    codes, _ = pd.factorize(hash_spans(data, starts[rows], lens[rows], two=False)[0])
    # codes appear in order, so a group's first row is where the running maximum first reaches it
    firsts = np.flatnonzero(np.r_[True, codes[1:] > np.maximum.accumulate(codes)[:-1]])
    again = np.flatnonzero(firsts[codes] != np.arange(len(rows)))
    later, first = rows[again].tolist(), rows[firsts[codes[again]]].tolist()

    def span(i: int) -> bytes:
        return data[starts[i] : starts[i] + lens[i]].tobytes()

    return [(i, f) for i, f in zip(later, first) if span(i) == span(f)]


_DOT, _SLASH, _BACKSLASH = ord("."), ord("/"), ord("\\")


def _path_spans(files: StringArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(buffer, starts, lengths) of every name as the path it names: ``\\`` read as ``/``, then
    ``posixpath.normpath`` (``./a.jpg``, ``x/../a.jpg``, ``a//b.jpg`` become ``a.jpg``, ``a.jpg``,
    ``a/b.jpg``). Names that need it are found on the bytes; only those are rewritten, in Python."""

    data = files.data
    starts = files.offsets[:-1].copy()
    lens = files.offsets[1:] - starts
    while True:  # a leading "./" (the common way a list spells every name) is skipped without Python
        lead = np.flatnonzero(lens >= 3)  # not ".//a" nor "./\\a", which would become "/a"
        at = starts[lead]
        after = data[at + 2]
        lead = lead[(data[at] == _DOT) & (data[at + 1] == _SLASH) & (after != _SLASH) & (after != _BACKSLASH)]
        if not len(lead):
            break
        starts[lead] += 2
        lens[lead] -= 2
    # what posixpath.normpath may change: "\\", "//", "./" (also "../"), a name ending in "/" or "."
    suspect = np.zeros(len(lens), bool)
    if holds(data, b"\\", b"//", b"./"):  # (searches of the bytes in C: the usual table has none)
        slash = data == _SLASH
        mark = data == _BACKSLASH
        mark[:-1] |= (slash[:-1] | (data[:-1] == _DOT)) & slash[1:]
        pos = np.flatnonzero(mark)
        row = np.searchsorted(files.offsets, pos, side="right") - 1
        suspect[row[pos >= starts[row]]] = True  # not in a "./" skipped above
    ends = np.flatnonzero(lens > 0)
    last = data[starts[ends] + lens[ends] - 1]
    suspect[ends[(last == _SLASH) | (last == _DOT)]] = True
    nfd = _not_nfc(files)
    suspect[nfd] = True
    rows = np.flatnonzero(suspect)
    if not len(rows):
        return data, starts, lens
    extra, at = [], int(len(data))
    nfd = set(nfd.tolist())
    for i in rows.tolist():
        name = data[starts[i] : starts[i] + lens[i]].tobytes().replace(b"\\", b"/")
        name = posixpath.normpath(name) if name else name
        if i in nfd:  # one name in its composed form: 'café' typed on Windows and copied from macOS
            text = unicodedata.normalize("NFC", name.decode("utf-8", "surrogateescape"))
            name = text.encode("utf-8", "surrogateescape")
        extra.append(name)
        starts[i], lens[i] = at, len(name)
        at += len(name)
    return np.concatenate([data, np.frombuffer(b"".join(extra), np.uint8)]), starts, lens


# the UTF-8 lead bytes of every character whose canonical combining class is not 0, which NFC changes by itself, or
# which NFC may join with the character before it (the second of a canonical pair); tests/test_labels.py derives
# the set from unicodedata again
_NFC_UNSAFE_LEADS = bytes.fromhex("cc cd ce d2 d6 d7 d8 d9 db dc dd df e0 e1 e2 e3 ea ef f0")
_NFC_SAFE_BYTES = bytes(b for b in range(256) if b not in _NFC_UNSAFE_LEADS)


def _not_nfc(files: StringArray) -> np.ndarray:
    """The rows whose names are not in Unicode's composed form (NFC): names copied from macOS (NFD).
    One check of the whole buffer first: a table of NFC names (ASCII, Chinese) costs one C call."""
    data = files.data
    if not len(data) or data.max() < 0x80:
        return np.zeros(0, np.int64)
    raw = data.tobytes()
    # no byte that starts a character which is not NFC by itself or may join the one before it (a combining mark,
    # a compatibility ideograph, a Hangul vowel): Chinese names, the usual non-ASCII ones, cost one C pass
    if not raw.translate(None, _NFC_SAFE_BYTES):
        return np.zeros(0, np.int64)
    if unicodedata.is_normalized("NFC", raw.decode("utf-8", "surrogateescape")):
        return np.zeros(0, np.int64)
    rows = np.unique(np.searchsorted(files.offsets, np.flatnonzero(data >= 0x80), side="right") - 1)
    return np.asarray([i for i in rows.tolist() if not unicodedata.is_normalized("NFC", files[i])], np.int64)


def spelled_twice(table: LabelTable, root: str | os.PathLike) -> list[str]:
    """One file listed under two spellings only the file system tells apart: an absolute path and a
    name relative to ``root`` (``/data/img/a.jpg`` and ``a.jpg``), a name that climbs out of ``root``
    and back in (``../img/a.jpg`` under ``img``), or two folders one of which is a symbolic link to
    the other (``link/a.jpg`` and ``img/a.jpg``, a link in ``root``; also the root given through a
    link beside absolute names): one line each, as :meth:`LabelTable.problems` words a file listed
    again. Folders are compared by their real paths (links followed); files that are themselves
    links to others are two files, as they are to ImageFolder. Tables with none of these (the usual
    case) cost one look at the bytes and one at ``root``'s entries."""
    table = table.whole or table
    files = table.files
    if not len(files):
        return []
    data, first = files.data, files.offsets[:-1]
    nonempty = first < files.offsets[1:]
    starts = first[nonempty]
    lead = data[starts]
    absolute = (lead == _SLASH) | (lead == _BACKSLASH)
    two = starts[files.offsets[1:][nonempty] - starts >= 2]
    drive = len(two) > 0 and bool((data[two + 1] == ord(":")).any())
    up = holds(data, b"../", b"..\\")
    linked = _linked_folders(root)
    if not absolute.any() and not drive and not up and not linked:
        return []
    real: dict[str, str] = {}
    # the folder may be given relative, the names absolute
    return _listed_twice(table, lambda name: file_by_folder(resolve_path(name, root), real))


def file_by_folder(path: str | os.PathLike, real: dict[str, str]) -> str:
    """``path`` with its folder's links followed (``real``: the folders' real paths so far), the file's own name
    kept: two names of one file through a folder link are one, a link to a file (ImageFolder's view) is another."""
    folder, base = os.path.split(os.path.abspath(path))
    if folder not in real:
        real[folder] = os.path.realpath(folder)
    return os.path.join(real[folder], base)


def zip_spelled_twice(table: LabelTable, reader, prefix: str = "") -> list[str]:
    """:func:`spelled_twice` for names of members of a zip read in place (``reader``, a
    :class:`~datakit.archive.ZipReader`; ``prefix``, the wrapping folder the names leave out): two
    names of one member through a folder link in the archive (``link/a.jpg`` and ``img/a.jpg``), as on
    the folder unzip-gbk extracts. Nothing to do for an archive without links (the usual case)."""
    if not reader.links:
        return []
    from datakit.archive import member_path

    real: dict[str, str] = {}

    def where(name: str) -> str:
        folder, base = posixpath.split(member_path(prefix + name))
        if folder not in real:
            found = reader.lookup(folder) if folder else ("dir", "")
            real[folder] = found[1] if found is not None and found[0] == "dir" else folder
        return f"{reader.path}:{real[folder] + '/' if real[folder] else ''}{base}"

    return _listed_twice(table.whole or table, where)


def _listed_twice(table: LabelTable, where: Callable[[str], str]) -> list[str]:
    """One line for each row naming the file an earlier row names (``where``: the file a name is) under
    another spelling; the same spelling (up to \\, ./, x/.. and Unicode form) the table's own check reports."""
    spelled = lambda n: unicodedata.normalize("NFC", posixpath.normpath(n.replace("\\", "/")))  # noqa: E731
    files = table.files
    seen: dict[str, int] = {}
    out = []
    for i, name in enumerate(files):
        key = where(name)
        j = seen.setdefault(key, i)
        if j != i and spelled(name) != spelled(files[j]):
            out.append(f"{table.where(i)}: file {name!r} is listed again (first at {table._short(j)} as "
                       f"{files[j]!r}: both name {key})")  # fmt: skip
    return out


def _linked_folders(root: str | os.PathLike) -> bool:
    """Whether a folder in ``root`` is a symbolic link to another folder inside ``root``, or to the
    same folder as another such link: then two relative names can name one file (one look at
    ``root``'s entries; links deeper down are not looked for)."""
    try:
        with os.scandir(root) as it:
            links = [e.path for e in it if e.is_symlink()]
        if not links:
            return False
        inside = os.path.realpath(root)
        targets = [os.path.realpath(p) for p in links]
    except (OSError, ValueError):
        return False
    return len(set(targets)) < len(targets) or any(
        t == inside or t.startswith(inside.rstrip(os.sep) + os.sep) for t in targets
    )


def resolve_path(name: str, root: str | os.PathLike) -> str:
    """A table's file name as a path: ``\\`` separators accepted, absolute kept, else under ``root``."""
    name = name.replace("\\", "/")
    if "/../" in name or name.startswith("../"):  # 'x/../a.jpg' is 'a.jpg', as the table's duplicates count it,
        name = posixpath.normpath(name)  # also where the folder x is not there
    if name.startswith("/") or re.match(r"^[A-Za-z]:/", name):
        return name
    return os.path.join(os.fspath(root), name)


# ---------------------------------------------------------------------------------------------
# text encodings


@dataclass(frozen=True)
class TextEncoding:
    """The encoding a text table is read with, how sure the choice is (0..1) and why."""

    name: str
    confidence: float
    reason: str


_SAMPLE = 1 << 20


def _cut(raw: bytes, limit: int) -> bytes:
    if len(raw) <= limit:
        return raw
    cut = raw.rfind(b"\n", 0, limit)
    return raw[: cut + 1] if cut > 0 else raw[:limit]


def detect_text_encoding(raw: bytes) -> TextEncoding:
    """The encoding of a text table: a byte-order mark, strict UTF-8, else GBK/GB18030 or Big5
    scored on how plausible the decoded characters are.

    Raises:
        LabelError: no candidate decodes the bytes, or the candidates are too close to call
            (the message shows what each would read, so the user can pass ``encoding=``).
    """
    if raw.startswith(codecs.BOM_UTF8):
        return TextEncoding("utf-8-sig", 1.0, "UTF-8 byte-order mark")
    if raw.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):  # before UTF-16's: FF FE 00 00 starts with FF FE
        return TextEncoding("utf-32", 1.0, "UTF-32 byte-order mark")
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return TextEncoding("utf-16", 1.0, "UTF-16 byte-order mark (Excel's Unicode text)")
    head = raw[:4096]
    if len(head) >= 4 and head.count(0) >= len(head) // 4:
        even, odd = head[0::2].count(0), head[1::2].count(0)
        enc = "utf-16-be" if even > odd else "utf-16-le"
        return TextEncoding(enc, 0.9, "UTF-16 without a byte-order mark (NUL bytes in every other place)")
    sample = _cut(raw, _SAMPLE)
    if sample.isascii():
        return TextEncoding("utf-8", 1.0, "ASCII")
    return _most_plausible(sample)


_CELL_SPLIT = re.compile(r"[\r\n,;\t\"/\\]+")


def _most_plausible(sample: bytes) -> TextEncoding:
    """UTF-8, GBK (GB18030) or Big5 for a non-ASCII sample.

    Valid UTF-8 is UTF-8 unless its reading looks like legacy bytes: GBK text is valid UTF-8 only by
    chance, each GBK character then one character of U+0080..U+07FF from whatever block its lead
    byte picks (猫 and 牛, C3 A8 and C5 A3, read as ``è`` and ``ţ``). So a UTF-8 reading with a real
    word in it (a run of one script, or letters beside ASCII ones: ``żółw``, ``חתול``, ``café``) is
    taken; one whose runs mix scripts or are accented letters alone (``èţ``) is read as GBK or
    Big5; one of single letters standing alone (``è``) is refused when a legacy reading is
    plausible too. Without valid UTF-8, GBK against Big5 is scored as file names are
    (:func:`datakit.filenames.score`). Readings too close to call are refused, naming each.
    """
    from datakit.filenames import AMBIGUITY_MARGIN, score

    readings: dict[str, list[str]] = {}
    for enc in ("utf-8", "gbk", "gb18030", "big5"):
        if (enc != "gb18030" or "gbk" not in readings) and (cells := _scored_cells(sample, enc)) is not None:
            # split into cells after decoding: a backslash byte (0x5C) is also the second byte of some
            # GBK and Big5 characters (許, 功, 嘰), so splitting the bytes would cut them in two
            readings[enc] = cells
    # encodings read only with encoding=, scored as rivals: Korean (CP949/EUC-KR), Japanese (CP932/Shift-JIS),
    # Western (Windows-1252), Russian (Windows-1251, KOI8-R) and Greek (Windows-1253) tables decode as GBK or Big5
    # too, into characters of their own (고양이: 绊剧捞, корова: 膰豂瘔)
    rivals: dict[str, list[str]] = {}
    for enc in _RIVALS:
        if (cells := _scored_cells(sample, enc)) is not None:
            rivals[enc] = cells
    rival_scores = {enc: _rival_score(names, enc) for enc, names in rivals.items()}
    if "cp1250" in rival_scores and "cp1252" in rival_scores:  # one Latin reading: the two read most bytes alike
        # (both named where they differ and score close: Western 'Ångström, naïve' is Central European
        # 'Ĺngström, naďve', which scores higher; offering only that one would rename the classes)
        lead = rival_scores["cp1250"] - rival_scores["cp1252"]
        if rivals["cp1250"] == rivals["cp1252"]:
            del rival_scores["cp1250" if lead <= 0 else "cp1252"]
        elif lead <= 0:
            del rival_scores["cp1250"]
        elif lead >= 0.3:
            del rival_scores["cp1252"]
    rivals = {e: v for e, v in rivals.items() if e in rival_scores}
    if not readings:
        _refuse_rivals([e for e, v in rival_scores.items() if v >= _RIVALS[e]], rivals)
        raise LabelError("not UTF-8, UTF-16, GBK/GB18030 or Big5 text" + _where_each_fails(sample)
                         + "; pass encoding= (--encoding) to name it")  # fmt: skip
    scores = {enc: score(names, "gbk" if enc == "gb18030" else enc, table=True) for enc, names in readings.items()}
    legacy = [e for e in readings if e != "utf-8"]
    kind = _utf8_kind(readings["utf-8"]) if "utf-8" in readings else None
    if kind == "word" or (kind is not None and not legacy):
        return TextEncoding("utf-8", 1.0, "valid UTF-8")
    # single letters alone ('è', or 猫 in GBK), or short runs of one script: refused, naming the readings, unless
    # the legacy ones are garbage
    weak = kind in ("single", "short")
    plausible = sorted((e for e in legacy if scores[e] >= (0.0 if weak else 0.5)), key=lambda e: -scores[e])
    if weak and plausible:
        return _too_close(["utf-8", *plausible], readings)
    if weak:
        return TextEncoding("utf-8", 1.0, "valid UTF-8")
    ranked = sorted(legacy, key=lambda e: -scores[e])
    best = ranked[0]
    margin = scores[best] - (scores[ranked[1]] if len(ranked) > 1 else -2.0)
    shown = ", ".join(f"{e} {scores[e]:.2f}" for e in legacy)
    lead = "valid UTF-8 that reads as legacy bytes, " if kind else ""
    # one or two characters in all are little evidence: Big5 鼠 is GBK 公, one of the commonest characters, and
    # scores 0.3 above it (300 random tables of each: with these margins none of them read wrong, against 4 in 89
    # and 5 in 128 at the usual one; a few pairs still can)
    evidence = sum(not ch.isascii() for cell in readings[best] for ch in cell)
    need = {1: 0.4, 2: 0.2}.get(evidence, AMBIGUITY_MARGIN) if len(ranked) > 1 else AMBIGUITY_MARGIN
    # a rival as plausible as the best reading, or nearly: the table may be Korean, Japanese or Western
    # (those near the likeliest of them: KOI8-R reads a Windows-1251 table as capitals, ПШАЮ for рыба)
    # (an alphabet's reading, Cyrillic, Greek or Central European, only when it is the more plausible: two of its
    # letters are one GBK character, any common one of which spells something, 油污 as УНОЫ)
    top = max(rival_scores.values(), default=0.0)
    close_rivals = [e for e in rivals if rival_scores[e] >= _RIVALS[e] and rival_scores[e] >= top - 0.25
                    and rival_scores[e] > scores[best] - (0.0 if e in _ALPHABETS else need)]  # fmt: skip
    if close_rivals:
        readings.update(rivals)
        close = [e for e in ranked if scores[best] - scores[e] < need]
        return _too_close([*close, *sorted(close_rivals, key=lambda e: -rival_scores[e])], readings)
    # a GBK reading with a character that swallowed a letter of a Latin word (Windows-1254's kadın: kad齨) is
    # another encoding's accented letter, whose bytes happen to pair up with the next: no GB2312 character, which
    # Chinese text is written in, has an ASCII letter for its second byte
    glued = _glued(readings[best]) if best in ("gbk", "gb18030") and not kind else None
    if glued is not None:
        said, _ = _readings_said([best], readings)
        raise LabelError(f"not UTF-8, UTF-16, GBK/GB18030 or Big5 text by the look of it: {said}, where {glued!r} "
                         "is a letter of another encoding joined with the letter after it; pass encoding= "
                         f"(--encoding) to name its encoding (encoding='{best}' if that reading is right)")  # fmt: skip
    if margin >= need and scores[best] >= 0.5 - (0.0 if kind else 2.5):
        return TextEncoding(best, min(1.0, margin), f"{lead}characters most plausible as {best} (scores: {shown})")
    close = [e for e in ranked if scores[best] - scores[e] < need]
    return _too_close((["utf-8"] if kind else []) + close, readings)


# each with the score its reading must reach to count: GBK and Big5 bytes read as CP949 are Hangul syllables
# too, mostly of the rarer ones (0.75 each), where Korean words are mostly of the common ones (1.0)
_RIVALS = {"cp949": 0.8, "cp932": 0.5, "cp1252": 0.5, "cp1250": 0.5, "cp1251": 0.6, "cp1253": 0.5}


def _where_each_fails(sample: bytes) -> str:
    """`` (lines 2-3 read as UTF-8, line 4 not: lines of two encodings?)`` where non-ASCII lines read in one encoding
    come before the first line that does not (a table saved in one encoding, then added to in another); ""."""
    best = None  # the encoding that reads the most lines before its first failure, the other the rest
    for enc, shown, other in (("utf-8", "UTF-8", "gb18030"), ("gb18030", "GBK", "utf-8")):
        try:
            sample.decode(enc)
        except UnicodeDecodeError as exc:
            start = sample.rfind(b"\n", 0, exc.start) + 1  # the failing line's first byte
            line_end = sample.find(b"\n", exc.start)
            rest = sample[start : line_end if line_end >= 0 else len(sample)]
            if not sample[:start].isascii() and decodes(rest, other) and (best is None or start > best[0]):
                best = (start, shown)
    if best is None:
        return ""
    start, shown = best
    first = sample.count(b"\n", 0, next(k for k, b in enumerate(sample) if b >= 0x80)) + 1
    line = sample.count(b"\n", 0, start) + 1
    lines = f"line {first}" if first == line - 1 else f"lines {first}-{line - 1}"
    return f" ({lines} read as {shown}, line {line} not: lines of two encodings?)"


def _glued(cells: list[str]) -> str | None:
    """The first character of a GBK reading outside GB2312 whose second byte is an ASCII letter and that stands alone
    among ASCII letters (``瀍`` in ``瀍lva``, ``齨`` in ``kad齨``, not ``賓`` in ``Benz賓士``): two bytes of another
    encoding's word paired up; None."""
    for cell in cells:
        padded = f" {cell} "
        for a, b, c in zip(padded, padded[1:], padded[2:]):
            if not ("\u4e00" <= b <= "\u9fff") or not ((a.isascii() and a.isalpha()) or (c.isascii() and c.isalpha())):
                continue
            if not (a.isascii() and c.isascii()):  # beside another character: a word of its own (Benz賓士)
                continue
            try:
                raw = b.encode("gbk")
            except UnicodeEncodeError:
                continue
            if len(raw) == 2 and (0x41 <= raw[1] <= 0x5A or 0x61 <= raw[1] <= 0x7A):
                return b
    return None


_QUOTED = re.compile("([\"'“‘「『])(.+)([\"'”’」』])", re.S)
_ALPHABETS = frozenset({"cp1250", "cp1251", "cp1253"})
_ALPHA_WORD = re.compile(r"[^\W\d_]+")
_TONOS = frozenset("άέήίόύώΆΈΉΊΌΎΏΐΰ")


def _rival_score(cells: list[str], enc: str) -> float:
    """``score(cells, enc)``, but a Central European, Cyrillic or Greek reading counts only with the words one
    writes: lower case, capitalised or all capitals, and one of three letters or more not in capitals. A GBK or Big5
    character is two bytes, which these code pages read as two letters, capitals mostly (人: ИЛ, 油污: УНОЫ): such
    letters are no evidence."""
    from datakit.filenames import score

    if enc in _ALPHABETS:
        evidence = False
        for w in (w for c in cells for w in _ALPHA_WORD.findall(c) if not w.isascii()):
            if not (w.islower() or w.isupper() or (w[0].isupper() and w[1:].islower())):
                return -1.0
            if enc == "cp1253" and (sum(ch in _TONOS for ch in w) > 1 or "ς" in w[:-1]):
                return -1.0  # Greek words carry one accent, and end in ς, never hold it inside (茯苓: άςάί)
            evidence = evidence or (len(w) >= 3 and not w.isupper())
        if not evidence:  # capitals alone are what GBK's lead bytes read as (油污: УНОЫ), not a word
            return -1.0
    return score(cells, enc, table=True)


def _scored_cells(sample: bytes, enc: str) -> list[str] | None:
    """The distinct non-ASCII cells of ``sample`` read as ``enc``, at most ``MAX_SCORED`` of them, evenly spaced;
    None when ``sample`` is not valid ``enc`` (decoded once, strictly: the check and the reading in one)."""
    from datakit.filenames import MAX_SCORED

    try:
        text = sample.decode(enc)
    except UnicodeDecodeError:
        return None
    cells = list(dict.fromkeys(itertools.filterfalse(str.isascii, _CELL_SPLIT.split(text))))
    return cells[:: max(1, len(cells) // MAX_SCORED)][:MAX_SCORED]


def _readings_said(encodings: list[str], readings: dict[str, list[str]]) -> tuple[str, str]:
    """("as GBK it reads '...'; as Big5 it reads '...'", "encoding='gbk' or encoding='big5'")."""
    said = "; ".join(f"as {_label(e)} it reads {', '.join(dict.fromkeys(readings[e][:4]))!r}" for e in encodings)
    return said, " or ".join(f"encoding='{e}'" for e in encodings)


def _refuse_rivals(encodings: list[str], readings: dict[str, list[str]]) -> None:
    """Raise naming what each of ``encodings`` (none of them detected by itself) would read, if any."""
    if encodings:
        said, options = _readings_said(encodings, readings)
        raise LabelError(f"not UTF-8, UTF-16, GBK/GB18030 or Big5 text: {said}; pass {options} (--encoding) if so")


def _too_close(encodings: list[str], readings: dict[str, list[str]]) -> TextEncoding:
    said, options = _readings_said(encodings, readings)
    raise LabelError(f"cannot tell the encoding apart: {said}; pass {options} (--encoding) to say which")


_RUN = re.compile(r"[^\x00-\x7f]+")


def _utf8_kind(cells: list[str]) -> str | None:
    """How the UTF-8 reading of a table's non-ASCII cells looks: ``"word"`` (some run of non-ASCII
    characters is a real word), ``"mojibake"`` (every run mixes scripts or is accented Latin alone),
    ``"single"`` (nothing but single letters standing alone); None without any run."""
    from datakit.filenames import _script

    kinds = set()
    for cell in cells:
        for m in _RUN.finditer(cell):
            run = m.group()
            beside = cell[m.start() - 1 : m.start()] + cell[m.end() : m.end() + 1]
            if any(ord(c) >= 0x800 or ord(c) & 0x3F < 0x21 for c in run):
                # CJK, kana, emoji: three bytes and more; or a second byte of 0x80-0xA0, which no GB2312 or Big5
                # character has (their second bytes read as UTF-8 are 0xA1-0xBF): ق, ß, a combining accent, NBSP
                return "word"
            scripts = {_script(c) if c.isalpha() else unicodedata.category(c)[0] for c in run}
            if any(c.isascii() and c.isalpha() for c in beside):
                token = re.search(r"[^\W\d_]*" + re.escape(run) + r"[^\W\d_]*", cell).group()
                if scripts == {"latin"} and not _unlikely_run(token) and all(map(_european_letter, run)):
                    kinds.add("latin")  # accented letters beside ASCII ones: café, żółw
                else:  # Cyrillic glued to Latin letters (GBK's 小 after an A: "AС"), or a capital after "è" ("èA")
                    kinds.add("mojibake")
            elif len(run) == 1:
                kinds.add("single")
            elif len(scripts) > 1 or scripts == {"latin"} or _unlikely_run(run):
                kinds.add("mojibake")
            elif len(run) < 4:
                kinds.add("short")  # two or three letters of one script: 学校 in GBK reads as Cyrillic "ѧУ" too
            else:
                return "word"  # a run of one script: Hebrew, Cyrillic, Greek, Arabic
    if not kinds:
        return None
    for kind in ("mojibake", "latin", "short"):  # GBK read as UTF-8 shows somewhere: the words beside it do not count
        if kind in kinds:
            return "word" if kind == "latin" else kind
    return "single"


def _european_letter(ch: str) -> bool:
    """A letter of Latin-1 or Latin Extended-A (the accented letters of European languages: é, ø, ł, ő), Romanian's
    ș ț, Pinyin's ǎ ǐ ǒ ǔ ǚ or Vietnamese ơ ư; not the rest of Latin Extended-B, where GBK characters read as UTF-8
    land: 片 (C6 AC) is Ƭ, so 'A片' read as 'AƬ', a letter beside a letter, was taken for a word."""
    o = ord(ch)
    return 0xC0 <= o <= 0x17F or 0x218 <= o <= 0x21B or 0x1CD <= o <= 0x1DC or ch in "ƠơƯư"  # (Vietnamese bơ, dưa)


def _unlikely_run(run: str) -> bool:
    """A run of one script no word is written in: archaic Cyrillic letters (ѧ, Ѽ, ѣ: U+0460-U+048F, where GBK's
    D1 row lands), or a small letter followed by a capital (аУ)."""
    if any(0x460 <= ord(c) <= 0x48F for c in run):
        return True
    return any(a.islower() and b.isupper() for a, b in zip(run, run[1:]))


def _label(enc: str) -> str:
    names = {"gb18030": "GB18030", "gbk": "GBK", "utf-8": "UTF-8", "big5": "Big5", "cp949": "CP949 (Korean)",
             "cp932": "CP932 (Japanese)", "cp1252": "Windows-1252", "cp1250": "Windows-1250 (Central European)",
             "cp1251": "Windows-1251 (Cyrillic)",
             "koi8_r": "KOI8-R (Russian)", "cp1253": "Windows-1253 (Greek)"}  # fmt: skip
    return names.get(enc, enc)


def _excerpt(text: str) -> str:
    words = []
    for w in re.split(r"[\s,\t/\\.]+", text):
        if not w.isascii() and w not in words:
            words.append(w)
        if len(words) == 4:
            break
    return ", ".join(words)


def _refuse_cut_character(raw: bytes, path: Path) -> None:
    """Refuse UTF-8 text whose last bytes begin a character and stop (a copy or download cut short), which would
    otherwise read as no encoding at all: UTF-8 up to its last character, the rest missing."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]  # UTF-8 by its own characters (not ASCII alone: 'café' in Windows-1252 ends so)
        if exc.end == len(raw) and exc.reason == "unexpected end of data" and not before.isascii():
            line = raw.count(b"\n", 0, exc.start) + 1
            cut = raw[exc.start :]
            bytes_ = f"last bytes {cut.hex(' ')} begin" if len(cut) > 1 else f"last byte {cut.hex()} begins"
            raise LabelError(f"{path}, line {line}: the file ends inside a UTF-8 character (its {bytes_} one): cut "
                             "short, a copy or download not finished? copy it again") from None  # fmt: skip
        cut = raw[exc.start :]
        if exc.end == len(raw) and exc.reason == "unexpected end of data" and len(cut) > 1:
            # ASCII but for a character's first bytes at the end (the list's one Chinese label, cut): read as GBK,
            # 'e7 8c' was a class '鐚', without a word; a whole GBK file may end so too, so both are said
            line = raw.count(b"\n", 0, exc.start) + 1
            legacy = next((e for e in ("gbk", "big5") if decodes(cut, e)), None)
            whole = (f"; if the file is whole, ending in {cut.decode(legacy)!r} in {_label(legacy)}, pass encoding="
                     f"{legacy!r}" if legacy else "")  # fmt: skip
            raise LabelError(f"{path}, line {line}: the file's one non-ASCII text is its last bytes, {cut.hex(' ')}, "
                             "with no line end: the start of a UTF-8 character, the file cut short (a copy or download "
                             f"not finished? copy it again){whole}") from None  # fmt: skip


def _decode_text(raw: bytes, path: Path, encoding: str | None) -> tuple[str | None, str]:
    """(text, encoding used); strict, with the line of the first undecodable byte. The text is None for
    ASCII read as UTF-8: valid as the bytes are, it is decoded only if the Python parser needs it."""
    from datakit.filenames import text_codec

    if encoding is not None and encoding.lower() == "auto":
        encoding = None
    if raw[-1:] >= b"\x80" and (encoding is None or text_codec(encoding) in ("utf-8", "utf-8-sig")):
        _refuse_cut_character(raw, path)
    if encoding is None:
        try:
            guess = detect_text_encoding(raw)
        except LabelError as exc:
            raise LabelError(f"{path}: {exc}") from None
        enc = guess.name
    else:
        enc = text_codec(encoding)  # None also for rot13, hex: no bytes-to-text codec
        if enc is None:
            raise UsageError(f"{path}: unknown encoding {encoding!r} (try utf-8, gbk, big5, utf-16)")
        if enc in ("utf-8", "utf_8") and raw.startswith(codecs.BOM_UTF8):
            enc = "utf-8-sig"
    dec = "gb18030" if enc in ("gbk", "gb2312") else enc  # GB18030 is GBK's superset: same bytes, same text
    if dec in ("utf-8", "ascii") and raw.isascii():
        return None, enc
    try:
        if dec == "gb18030":
            try:
                return raw.decode("gbk"), enc  # the faster codec, when the text is plain GBK
            except UnicodeDecodeError:
                pass
        return raw.decode(dec), enc
    except UnicodeDecodeError as exc:
        start = exc.start + len(raw) - len(exc.object)  # utf-8-sig counts from after its byte-order mark
        line = raw.count(b"\n", 0, start) + 1
        hint = "" if encoding is not None else "; pass encoding= (--encoding) to name the right one"
        raise LabelError(f"{path}, line {line}: byte 0x{raw[start]:02x} is not valid {enc} text{hint}") from None


# ---------------------------------------------------------------------------------------------
# reading: shared pieces


@dataclass
class _Part:
    """The rows of one sheet or text file, before they are joined into a table."""

    sheet: str
    files: StringArray
    labels: list[str]  # distinct label texts
    label_codes: np.ndarray
    splits: list[str]
    split_codes: np.ndarray
    rows: np.ndarray
    file_column: str = ""
    label_column: str = ""
    order: int = 0
    chosen: bool = True  # False: a sheet not asked for, read for its labels and to compare its files
    # the split column's value of each line dropped with a problem: with split=, another split's problem is its own
    dropped_splits: dict[tuple[int, int], str] = field(default_factory=dict)
    dropped_files: list[str] = field(default_factory=list)  # files of rows left out for a problem (no label)
    unread: int = 0  # lines refused whole (their label never read: a range of integer labels is unsure without it)
    # another column naming the class (class_id beside class): its name -> the (label, its value) pairs of the rows
    rivals: dict[str, set[tuple[str, str]]] = field(default_factory=dict)


def _part_from_lists(sheet: str, files: list[str], labels: list[str], splits: list[str], rows: list[int],
                     fcol: str, lcol: str) -> _Part:  # fmt: skip
    lv, lc = _codes(labels)
    sv, sc = _codes(splits)
    if "" in sv:  # a blank split cell: no split (code -1), as in text tables
        blank = sv.index("")
        sc = np.where(sc == blank, -1, sc - (sc > blank)).astype(np.int32)
        sv.remove("")
    return _Part(sheet, StringArray(files), lv, lc, sv, sc, np.asarray(rows, np.int32), fcol, lcol)


def _codes(values: list[str]) -> tuple[list[str], np.ndarray]:
    index: dict[str, int] = {}
    codes = np.fromiter((index.setdefault(v, len(index)) for v in values), dtype=np.int32, count=len(values))
    return list(index), codes


def _header_index(row: Sequence[object], keys: set[str]) -> bool:
    """Whether ``row`` is a header: a known column name in it, and no image file name (a data row of a
    table without a header whose class is called ``image`` or ``name`` is not one)."""
    cells = [v for v in row if not _blank(v)]
    return any(_norm(v) in keys for v in cells) and not any(_looks_like_file(v) for v in cells)


_FILE_KEYS = frozenset(_norm(k) for k in FILE_COLUMNS)
_HEADING_KEYS = _RIVAL_COLUMNS | frozenset(_norm(k) for k in SPLIT_COLUMNS)  # a label's, or a split's, column


def _header_again(f: str, lab: str, fname: str, lname: str | None) -> str | None:
    """What a data row's file and label cells say of it: "same", the header again up to letter case and spacing
    (``File,Label`` under ``file,label``: tables joined); "other", the header of another table (a file column's name
    beside a label's or split's, ``Filename,Class``, ``file,split,label``), under which the columns mean other
    things; None, a data row."""
    if ("." in f or "/" in f) and f.lower() != (fname or "").lower():  # an image's name: a data row (every row asks)
        return None
    if lname is not None and _norm(f) == _norm(fname) and _norm(lab) == _norm(lname):
        return "same"
    return "other" if _norm(f) in _FILE_KEYS and _norm(lab) in _HEADING_KEYS else None


def _other_header(f: str, lab: str) -> str:
    return (f"{f!r}, {lab!r}: the header of another table (tables joined, with other column names or order?): "
            "remove it, and check that the rows under it have their columns in this table's order")  # fmt: skip


def _file_text(v: str) -> str:
    """A file cell as a path is compared: ``\\`` or ``/``, a leading ``./``, spaces, letter case and Unicode
    form aside (a file system may hold either spelling)."""
    return unicodedata.normalize("NFC", v.strip().replace("\\", "/").removeprefix("./")).casefold()


_ELSEWHERE = re.compile(r"^(?:/|[A-Za-z]:|\.\./|[A-Za-z][A-Za-z0-9+.-]*://)")  # absolute, C:, ../, a URL


def _rival_files(rows) -> tuple[str, object]:
    """How a second column naming the image relates to the file column, over ``rows`` of (where, mine,
    theirs) texts: ("same", None) where they name the same files, or the other column names a place on
    another machine (an absolute path, ``C:``, ``../``, a URL) on some row: a record of where the file came
    from, not another file here; ("deeper", (where, mine, theirs)) where the other column gives the same names
    with folders (``sub/a.png`` beside ``a.png``) on every row where they differ, the first such row;
    ("differ", (where, mine, theirs)) at the first row where they name different files."""
    rows = list(rows)
    if any(_ELSEWHERE.match(b.strip().replace("\\", "/")) for _, _, b in rows):
        return "same", None
    deeper = None
    for where, a, b in rows:
        x, y = _file_text(a), _file_text(b)
        if x == y or x.endswith("/" + y):  # the file column the deeper one: it is read
            continue
        if posixpath.splitext(x)[0] == posixpath.splitext(y)[0]:  # a0.jpg beside a0.png: one image, converted
            continue
        if not y.endswith("/" + x):
            return "differ", (where, a, b)
        deeper = deeper or (where, a, b)
    return ("deeper", deeper) if deeper is not None else ("same", None)


def _rival_note(where: str, fname: str, rname: str, row: str, a: str, b: str) -> str:
    same = _norm(fname) == _norm(rname)
    other = f"the second {rname!r} column" if same else repr(rname)
    fix = "rename one to choose" if same else f"file_column={rname!r} reads those"
    return (
        f"{where}: {other} names the same images with their folders ({row}: {b!r} beside {a!r}); {fname!r} "
        f"is read, as the file column ({fix})"
    )


def _file_rival_problem(where: str, fname: str, fcol: int, rname: str, rcol: int, row: str, a: str, b: str) -> str:
    if _norm(fname) == _norm(rname):  # the header twice: naming it cannot choose
        return (
            f"{where}, {row}: the column {fname!r} is there twice (columns {_column_letter(fcol)} and "
            f"{_column_letter(rcol)}), naming different image files ({a!r} and {b!r}); rename the one not meant"
        )
    return (
        f"{where}, {row}: the columns {fname!r} and {rname!r} both name the image file, but different ones "
        f"({a!r} and {b!r}); name the one to use with file_column= (--file-column)"
    )


def _find_column(header: Sequence[object], wanted: str | None, known: Sequence[str]) -> int | None:
    names = [_norm(h) if not _blank(h) else "" for h in header]
    if wanted is not None:
        key = _norm(wanted)
        return names.index(key) if key in names else None
    for k in known:
        if _norm(k) in names:
            return names.index(_norm(k))
    return None


def _without_dot(files: StringArray, most: float = 0.05) -> list[int]:
    """The positions of the names with no '.' at all; [] where they are over ``most`` of the names (a table of
    names without suffixes). A name with a suffix has its dot in its last 6 bytes, looked up in the one buffer
    for every name at once; the few others are looked at whole."""
    ends, lens = files.offsets[1:], np.diff(files.offsets)
    suffixed = np.zeros(len(lens), bool)
    for back in range(2, 7):  # '.x' .. '.xxxxx'
        at = np.maximum(ends - back, 0)
        suffixed |= (lens >= back) & (files.data[at] == ord(".")) if len(files.data) else False
    rest = np.flatnonzero(~suffixed)
    if len(rest) > most * len(lens):
        return []
    return [int(k) for k in rest if "." not in files[int(k)]]


_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,5}\s*$")  # a name ending in a file suffix, image or not


def _looks_like_file(v: object) -> bool:
    return isinstance(v, str) and v.strip().lower().endswith(IMAGE_SUFFIXES)


@dataclass
class _Header:
    at: int  # index of the header row in the grid, -1 when the table has none
    fcol: int
    lcol: int | None
    scol: int | None
    fname: str
    lname: str
    rivals: tuple[tuple[int, str], ...] = ()  # other columns naming the class (column, header), when lcol was found
    file_rivals: tuple[tuple[int, str], ...] = ()  # other columns naming the image file (column, header)
    why: str = ""  # where lcol is None though one column could have been taken as the labels: why it was not
    below: int = 0  # rows under ``at`` that are the header's too (a header of two rows, its cells merged down)


# columns that describe an image, never its class: the one column beside the files is not taken as the labels when
# it is one of these (a table of file names and remarks is not a labelled one)
_NOT_LABEL_COLUMNS = frozenset(_norm(k) for k in (
    "备注", "说明", "描述", "注释", "備註", "說明", "remark", "remarks", "note", "notes", "comment", "comments",
    "description", "caption", "size", "大小", "尺寸", "文件大小", "width", "height", "宽", "高", "宽度", "高度",
    "bytes", "date", "日期", "time", "时间", "url", "链接", "md5", "sha1", "sha256", "hash", "id", "序号", "编号",
    "no", "index", "bbox", "box", "source", "来源", "author", "作者"))  # fmt: skip


def _header_row(grid: Sequence[Sequence[object]], keys: set[str], label_column: str | None) -> int | None:
    """The index of a table's header among its first 50 rows: the first row naming a file column, or, where that
    one names no label column and one of the next 3 rows names both, that one (a group title row above the header,
    ``图片信息`` over ``文件名 | 大小``, or Excel's CSV of it, ``图片,,``)."""
    found = [r for r, row in enumerate(grid[:50]) if _header_index(row, keys)]
    if not found:
        return None

    def titles_only(a: int, b: int) -> bool:  # no row between a and b names an image (a table above: its header)
        return not any(_looks_like_file(v) for row in grid[a + 1 : b] for v in row if not _blank(v))

    labelled = [r for r in found[:4] if r - found[0] <= 3 and titles_only(found[0], r)
                and _find_column(grid[r], label_column, LABEL_COLUMNS) is not None]  # fmt: skip
    if not labelled:
        return found[0]
    r = labelled[0]
    # a title row that names both (图片,,标签 over 文件名,大小,类别): the header is the row right under it; so it is
    # where that row names the file column and no known label column (图片,标签 over 文件名,初标,复核: two label
    # columns, which the header then says nothing of), not a sample '文件名' of a class '初标'
    below = next((k for k in range(r + 1, min(len(grid), 50)) if any(not _blank(v) for v in grid[k])), None)
    if below in found and _find_column(grid[below], label_column, LABEL_COLUMNS) is not None:
        return below
    if (
        below in found
        and _find_column(grid[below], None, FILE_COLUMNS) is not None
        and _fills_blanks(grid[r], grid[below])
    ):
        return below  # it names the columns under the title's merged cells (标签 over 初标 | 复核), not a sample
    return r


def _fills_blanks(above: Sequence[object], row: Sequence[object]) -> bool:
    """Whether ``row`` has a value in a column that ``above`` leaves blank (or does not reach): a header under a
    title row whose merged cells span several of its columns, not a data row of the table ``above`` heads."""
    return any(not _blank(v) and (k >= len(above) or _blank(above[k])) for k, v in enumerate(row))


def _inferred_label(grid: Sequence[Sequence[object]], r: int, others: list[int],
                    fcol: int) -> tuple[int | None, str, str]:  # fmt: skip
    """(the label column, '', its name where the title row gives it) for a header naming no label column, or
    (None, why none can be taken, ''): the label name in the group title row above a blank header cell (``标签``
    merged down over two rows), else the one other named column, unless it describes the image (remarks, sizes)
    or a column without a name holds values beside it (the labels, most likely: which one is, the table does not
    say)."""
    row = grid[r]
    data = [line for line in grid[r + 1 : r + 51] if any(not _blank(v) for v in line)]

    def values(i: int) -> list:
        return [line[i] for line in data if i < len(line) and not _blank(line[i])]

    def filled(i: int) -> bool:  # a column of values, not a stray remark in a cell or two
        return bool(data) and 2 * len(values(i)) >= len(data)

    for above in grid[max(0, r - 2) : r]:
        named = [i for i, h in enumerate(above) if i < len(row) and _blank(row[i]) and not _blank(h)
                 and _norm(h) in _RIVAL_COLUMNS and filled(i)]  # fmt: skip
        if len(named) == 1:
            return named[0], "", _text(above[named[0]])
    if len(others) != 1:
        return None, "", ""
    name = _text(row[others[0]])

    def row_ids(i: int) -> bool:  # 0, 1, 2... or those shuffled: the row numbers pandas writes first (to_csv)
        try:
            ints = [int(_text(v)) for v in values(i)]
        except ValueError:
            return False
        return len(ints) >= 3 and len(set(ints)) == len(ints)

    def varied(i: int) -> bool:  # a value in every row alike ('ok') classes nothing
        return len({_text(v) for v in values(i)}) > 1

    width = max((len(line) for line in data), default=0)
    # columns left of the files under no header are an index (pandas writes its own first: numbers, names, dates,
    # several for a MultiIndex), not labels
    unnamed = [i for i in range(fcol + 1, width) if (i >= len(row) or _blank(row[i])) and filled(i) and varied(i)
               and not row_ids(i)]  # fmt: skip
    if unnamed:
        why = (f"column {_column_letter(unnamed[0])} holds values under no header beside {name!r} (column "
               f"{_column_letter(others[0])}), and which of them are the labels the table does not say; give the "
               "label column a header (标签, label), or name it with label_column= (--label-column)")  # fmt: skip
        return None, why, ""
    labels = [_text(v) for v in values(others[0])]
    if _norm(name) in _NOT_LABEL_COLUMNS and len(labels) >= 20 and 2 * len(set(labels)) > len(labels):
        # a remark, a size, an id for almost every image; labels repeat (a column named 'id' of cat, dog is read;
        # in a few rows, which it is cannot be told: read, as before)
        why = (f"{name!r} (column {_column_letter(others[0])}) describes the images, it does not class them; name "
               "the label column with label_column= (--label-column)")  # fmt: skip
        return None, why, ""
    return others[0], "", ""


def _shape(name: str) -> str:
    return re.sub(r"[0-9]+", "0", name)


def _refuse_a_sample_as_header(grid: Sequence[Sequence[object]], r: int, fcol: int, where: str) -> None:
    """A header row the caller's file_column=/label_column= names that is a sample: a table without a header line,
    its first row taken for one, would lose that sample without a word (its file cell named as the files below
    are, digits aside). A label column named as a class is no sign: 'file,defect' over 'a.png,defect'
    is a header."""
    row = grid[r]
    file = _text(row[fcol])
    if _norm(file) in _FILE_KEYS:  # 'file', 'image', '文件名': a header, whatever its label column is called
        return
    # (the header again below, tables joined, is no file of theirs)
    below = [line for line in grid[r + 1 : r + 51] if any(not _blank(v) for v in line) and list(line) != list(row)]
    files = [_text(line[fcol]) for line in below if fcol < len(line) and not _blank(line[fcol])]
    alike = sum(_shape(f) == _shape(file) for f in files)
    if re.search(r"[0-9]", file) and len(files) >= 2 and 5 * alike >= 4 * len(files):
        why = f"{file!r} is named as the files below it are"
    else:  # (a first cell naming an image is never taken for a header: refused before)
        return
    shown = ", ".join(repr(_text(v)) for v in row if not _blank(v))
    raise UsageError(f"{where}: the row taken for the header ({shown}) is a sample: {why}; a table without a "
                     "header line would lose its first sample so: add a header line naming the columns "
                     "(file,label)")  # fmt: skip


def _locate_header(grid: Sequence[Sequence[object]], file_column: str | None, label_column: str | None,
                   split_column: str | None, where: str = "the table") -> _Header | None:  # fmt: skip
    keys = {_norm(file_column)} if file_column is not None else {_norm(k) for k in FILE_COLUMNS}
    r = _header_row(grid, keys, label_column)  # title rows and leading empty rows may come first
    if r is not None:
        row = grid[r]
        fcol = _find_column(row, file_column, FILE_COLUMNS)
        lcol = _find_column(row, label_column, LABEL_COLUMNS)
        why, titled = "", ""
        if lcol is None and label_column is None:
            others = [i for i, h in enumerate(row) if i != fcol and not _blank(h)]
            others = [i for i in others if _find_column([row[i]], None, SPLIT_COLUMNS) is None
                      and _find_column([row[i]], split_column, SPLIT_COLUMNS) is None]  # fmt: skip
            lcol, why, titled = _inferred_label(grid, r, others, fcol)
        scol = _find_column(row, split_column, SPLIT_COLUMNS)
        assert fcol is not None
        if scol is not None and scol in (fcol, lcol) and split_column is None:
            scol = None  # a column named like a split column, already taken as the files or the labels
        for col, what in ((lcol, "label"), (scol, "split")):
            if col is not None and col == fcol or (what == "split" and col is not None and col == lcol):
                other = "file" if col == fcol else "label"
                raise UsageError(
                    f"{where}: the {other} column and the {what} column are both {_text(row[col])!r} (column "
                    f"{_column_letter(col)}); name another with {what}_column= (--{what}-column)"
                )
        lname = (titled or _text(row[lcol])) if lcol is not None else ""
        rivals: tuple[tuple[int, str], ...] = ()
        if label_column is None and lcol is not None and _norm(row[lcol]) in _RIVAL_COLUMNS:
            rivals = tuple((i, _text(h)) for i, h in enumerate(row) if i not in (fcol, lcol, scol)
                           and not _blank(h) and _norm(h) in _RIVAL_COLUMNS)  # fmt: skip
        elif label_column is not None and lcol is not None:  # the named column twice: which one was meant?
            rivals = tuple((i, _text(h)) for i, h in enumerate(row) if i not in (fcol, lcol, scol)
                           and not _blank(h) and _norm(h) == _norm(label_column))  # fmt: skip
        # other columns naming the image (path beside filename, the header twice, two tables side by side):
        # where they name another image file, which one the rows mean is not known
        # ('name' beside 'image' is as often an upload's original name, a description: not compared)
        same = {_norm(file_column)} if file_column is not None else _FILE_KEYS - {"name"}
        file_rivals = tuple((i, _text(h)) for i, h in enumerate(row) if i not in (fcol, lcol, scol)
                            and not _blank(h) and _norm(h) in same)  # fmt: skip
        if file_column is not None or label_column is not None:
            _refuse_a_sample_as_header(grid, r, fcol, where)
        return _Header(r, fcol, lcol, scol, _text(row[fcol]), lname, rivals, file_rivals, why)
    unnamed = _unnamed_file_header(grid, label_column, split_column) if file_column is None else None
    if unnamed is not None:
        top, lcol, scol, row = unnamed
        return _Header(top, 0, lcol, scol, "", _text(row[lcol]))
    first = next((row for row in grid if any(not _blank(v) for v in row)), None)
    if first is not None and file_column is None and label_column is None and _looks_like_file(first[0]):
        width = max(i for i, v in enumerate(first) if not _blank(v)) + 1
        if width >= 2:  # no header: the rows start at once, file then label
            return _Header(-1, 0, 1, None, "", "")
    return None


def _heading(cell: object) -> str:
    """What column a header cell names: "label" (a label's or a split's: ``label``, ``类别``, ``split``), "file"
    (``file``, ``filename``, ``文件名``) or ""."""
    key = _norm(cell)
    return "label" if key in _HEADING_KEYS else "file" if key in _FILE_KEYS else ""


def _unnamed_file_header(grid: Sequence[Sequence[object]], label_column: str | None, split_column: str | None = None
                         ) -> tuple[int, int, int | None, list] | None:  # fmt: skip
    """(the header's row, the label column, the split column, the header as its columns are) of a table whose file
    column has no name: pandas' Series.to_csv() or to_excel() (a DataFrame's too, with the files as the index; R's
    write.csv with them as the row names) leaves the header cell above the image names empty (',label', ',0'), or
    leaves it out (pandas' index_label=False, R's write.table: 'label' over 'a.png,cat'). None for any other table."""
    top = next((k for k, row in enumerate(grid[:50]) if any(not _blank(v) for v in row)), None)
    if top is None or not grid[top]:
        return None
    row = list(grid[top])
    filled = [r for r in grid[top + 1 : top + 51] if any(not _blank(v) for v in r)]
    width = max((i + 1 for i, v in enumerate(row) if not _blank(v)), default=0)
    if not _blank(row[0]):  # the row names' header cell left out: every row one field longer than the header
        if not filled or not all(max(i + 1 for i, v in enumerate(r) if not _blank(v)) == width + 1 for r in filled):
            return None
        if _heading(row[0]) != "label":  # ('图片编号 | 标签' over 'a.jpg | 猫 | 清晰': the files named by a header
            return None  # datakit does not know, a note after them; 'label | score' over 'a.jpg | cat | 0.9' shifts)
        row = ["", *row]
    under = [r[0] for r in filled if r and not _blank(r[0])]
    if not under or 5 * sum(_looks_like_file(v) for v in under) < 4 * len(under):
        return None
    lcol = _find_column(row, label_column, LABEL_COLUMNS)
    scol = _find_column(row, split_column, SPLIT_COLUMNS)
    others = [i for i, h in enumerate(row) if i and not _blank(h) and i != scol]
    if lcol is None and label_column is None and len(others) == 1:
        lcol = others[0]  # the one column beside the files: a Series' values, headed by its name or 0
    if lcol is None or scol == lcol:
        return None
    return top, lcol, scol, row


def _one_hot_columns(cols, header_row: Sequence[object], fcol: int | None) -> list[str]:
    """The headings of a text table's columns beside the files that hold only 0 and 1, where two or more do (the
    class columns of a one-hot table: image,cat,dog,bird); [] otherwise."""
    hot = []
    for i, h in enumerate(header_row):
        if i == fcol or _blank(h):
            continue
        try:
            values, _, filled = cols.coded(i)
        except (IndexError, KeyError):
            continue
        if filled.all() and values and set(values) <= {"0", "1", "0.0", "1.0"}:
            hot.append(_text(h))
        elif filled.any():  # a column of other values (species beside is_val, difficult): no one-hot table
            return []
    return hot if len(hot) >= 2 else []


def _no_header_problem(grid: Sequence[Sequence[object]], where: str, file_column: str | None,
                       label_column: str | None = None) -> str:  # fmt: skip
    first = next((row for row in grid if any(not _blank(v) for v in row)), [])
    shown = ", ".join(repr(_text(v)) for v in first if not _blank(v)) or "nothing"
    if file_column is not None:
        return f"{where}: no file column named {file_column!r} in the first 50 rows; the first row holds {shown}"
    if label_column is not None and any(_norm(_text(v)) == _norm(label_column) for v in first if not _blank(v)):
        # (it is there: "no label column named 'Category'" over a row holding 'Category' said the wrong column)
        return (f"{where}: the label column {label_column!r} is there, but no file-name column beside it (looked for "
                f"{', '.join(FILE_COLUMNS[:6])}, 文件名, 图片, ...); the first row holds {shown}; name it with "
                "file_column= (--file-column)")  # fmt: skip
    if label_column is not None:  # with the label column named, the file column is looked for beside it only
        return f"{where}: no header with a label column named {label_column!r}; the first row holds {shown}"
    cells = [_text(v) for v in first if not _blank(v)]
    if len(cells) == 1 and re.fullmatch(r"\S+\.[A-Za-z]{2,5}[ \t]+\S.*", cells[0]):  # 'a.png 0' on every line
        return (f"{where}: its lines are a file name and a label separated by spaces (the first: {shown}), where a "
                "table's columns are separated by commas or tabs: name the file .txt, which is read as such a list "
                "(PaddleClas, mmpretrain), or save it with commas between the columns")  # fmt: skip
    return (
        f"{where}: no file-name column found (looked for {', '.join(FILE_COLUMNS[:6])}, 文件名, 图片, ...); "
        f"the first row holds {shown}; name it with file_column= (--file-column), or, where the rows begin at once, "
        "add a header line naming the columns (file,label)"
    )


# what a missing or failed cell becomes when a table is exported: Excel's error values, pandas' markers
_EXCEL_ERRORS = frozenset({"#N/A", "#N/A N/A", "#NA", "#VALUE!", "#REF!", "#DIV/0!", "#NUM!", "#NAME?", "#NULL!",
                           "#SPILL!", "#CALC!", "#GETTING_DATA"})  # fmt: skip
# and what a program writes for a value it did not have: Python's None, SQL's NULL, a database dump's \\N
# (pandas' default markers all: R's write.csv writes a missing factor as NA, C's printf a NaN as -nan)
_NOT_A_LABEL = _EXCEL_ERRORS | {"NaN", "nan", "<NA>", "None", "NULL", "null", "\\N", "N/A", "n/a", "NA", "-NaN", "-nan",
                                "1.#IND", "-1.#IND", "1.#QNAN", "-1.#QNAN"}  # fmt: skip


# class names given with the labels (classes=, --classes): a marker among them is a class ('None', 'nan' as the
# pinyin of 男), read while markers_as_classes() is active
_GIVEN_CLASSES: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("given_classes", default=frozenset())


@contextlib.contextmanager
def markers_as_classes(classes: Sequence[str] | None):
    """While active, a label cell holding a missing-value marker (``None``, ``NULL``, ``nan``...) that ``classes``
    names is that class, not a missing label."""
    token = _GIVEN_CLASSES.set(frozenset(str(c) for c in classes or ()))
    try:
        yield
    finally:
        _GIVEN_CLASSES.reset(token)


def _names_given(values: Iterable[object]) -> bool:
    """Whether the classes given (classes=, --classes) name every one of these label values: integers beside names
    (an OCR set's 0-9 and A-Z) are then class names, each looked up by name, where alone they would be refused."""
    given = _GIVEN_CLASSES.get()
    return bool(given) and all(_text(v) in given for v in values)


def _not_a_label(text: str) -> bool:
    return text in _NOT_A_LABEL and (text in _EXCEL_ERRORS or text not in _GIVEN_CLASSES.get())


def _marker_problem(file: str, label: str) -> str:
    if label in _EXCEL_ERRORS:
        return f"file {file!r} has no label (the cell holds {label!r}, an Excel error value, not a class name)"
    return (f"file {file!r} has no label (the cell holds {label!r}, a missing-value marker, not a class name; a class "
            "really named so is read when classes= (--classes) names it)")  # fmt: skip


def _parse_grid(
    grid: Sequence[Sequence[object]], head: _Header, *, sheet: str, where: str, problems: list,
    order: int, split_column: str | None, cell_note=None, notes: list | None = None, cell_error=None,
    engine: str = "calamine", split_name: str | None = None,
) -> _Part:  # fmt: skip
    """Rows under ``head`` as a part; blank files or labels become problems, wholly empty rows vanish.
    ``engine``: the reader that read the grid (a number past 2**53 is exact in openpyxl's where the sheet holds
    its digits)."""
    files: list[str] = []
    labels: list[str] = []
    splits: list[str] = []
    rows: list[int] = []
    fcol, lcol, scol = head.fcol, head.lcol, head.scol
    dropped: dict[tuple[int, int], str] = {}
    named: list[str] = []
    numbers: tuple[int, str] | None = None  # the first file cell that holds a number, not text
    dates: tuple[int, str] | None = None  # the first label cell that holds a date, not text
    times: tuple[int, str] | None = None  # the first label cell that holds a time of day or a duration
    rivals: dict[str, set[tuple[str, str]]] = {name: set() for _, name in head.rivals}
    fname = head.fname
    for col, name in head.file_rivals:  # another column naming the image: the same files, or refused
        both = (
            (r, row[fcol], row[col])
            for r, row in enumerate(grid[head.at + 1 :], head.at + 2)
            if fcol < len(row) and col < len(row) and _looks_like_file(row[fcol]) and _looks_like_file(row[col])
        )
        verdict, at = _rival_files((r, _text(a), _text(b)) for r, a, b in both)
        if verdict == "differ":
            r, a, b = at  # type: ignore[misc]
            problems.append(((order, r), _file_rival_problem(where, fname, fcol, name, col, f"row {r}", a, b)))
        elif verdict == "deeper" and notes is not None:  # said, not chosen: which one the disk holds is not known here
            r, a, b = at  # type: ignore[misc]
            notes.append(_rival_note(where, fname, name, f"row {r}", a, b))
    for r in range(head.at + 1 + head.below, len(grid)):
        row = grid[r]
        f = row[fcol] if fcol < len(row) else None
        lab = row[lcol] if lcol is not None and lcol < len(row) else None
        rownum = r + 1
        no_file, no_label = _blank(f), _blank(lab)  # (once a row: the checks below ask each several times)
        if no_label and not no_file and cell_error is not None:  # calamine reads '#N/A' as empty: the cell's own
            lab = cell_error(rownum, lcol) or lab
            no_label = _blank(lab)
        if no_file and no_label:
            note = cell_note(rownum, fcol) if cell_note is not None else None
            if note is None and lcol is not None and cell_note is not None:
                note = cell_note(rownum, lcol)
            if note:  # formulas without saved values read as empty: the row is there, its values are not
                problems.append(((order, rownum), f"{where}, row {rownum}: {note}"))
            continue  # empty rows are absent, not errors
        if (no_file or no_label or _not_a_label(_text(lab))) and scol is not None and scol < len(row):
            dropped[(order, rownum)] = "" if _blank(row[scol]) else _text(row[scol])
        if not no_file and (no_label or _not_a_label(_text(lab))):
            named.append(_text(f).replace("\\", "/"))
        if no_file or no_label:
            col = fcol if no_file else lcol
            extra = cell_note(rownum, col) if cell_note is not None else None
            if extra:
                problems.append(((order, rownum), f"{where}, row {rownum}: {extra}"))
            elif no_file:
                problems.append(((order, rownum), f"{where}, row {rownum}: label {_text(lab)!r} has no file name"))
            else:
                problems.append(((order, rownum), f"{where}, row {rownum}: file {_text(f)!r} has no label"))
            continue
        if _not_a_label(_text(lab)):
            problems.append(((order, rownum), f"{where}, row {rownum}: {_marker_problem(_text(f), _text(lab))}"))
            continue
        again = _header_again(_text(f), _text(lab), fname, head.lname) if head.at >= 0 else None
        if again == "same":
            if notes is not None:  # the header row again (sheets pasted one under another)
                notes.append(f"{where}, row {rownum}: the header row again (tables joined?): skipped")
            continue
        if again == "other":
            problems.append(((order, rownum), f"{where}, row {rownum}: {_other_header(_text(f), _text(lab))}"))
            continue
        if isinstance(lab, float) and lab.is_integer() and abs(lab) >= 2**53:  # read as a double: no longer exact
            problems.append(((order, rownum), f"{where}, row {rownum}: label {_text(lab)} is a number cell past "
                             "2**53, which this reader gives as a 64-bit float, no longer exact (two labels could "
                             "read as one); store the labels as text"
                             + (", or read it in Python with engine='openpyxl'" if engine == "calamine"
                                else "")))  # fmt: skip
            continue
        if scol is not None and cell_note is not None and (scol >= len(row) or _blank(row[scol])):
            extra = cell_note(rownum, scol)  # a split formula without a saved value: the row in no split, unsaid
            if extra:
                problems.append(((order, rownum), f"{where}, row {rownum}: {extra}"))
                continue
        if numbers is None and isinstance(f, (int, float)) and not isinstance(f, bool):
            numbers = (rownum, _text(f))
        if dates is None and isinstance(lab, datetime.date):
            dates = (rownum, _text(lab))
        if times is None and isinstance(lab, (datetime.time, datetime.timedelta)):
            times = (rownum, _text(lab))
        files.append(_text(f).replace("\\", "/"))
        labels.append(_text(lab))
        for col, name in head.rivals:
            if col < len(row) and not _blank(row[col]):
                rivals[name].add((labels[-1], _text(row[col])))
        s = row[scol] if scol is not None and scol < len(row) else None
        # the split column where the sheet has one (a one-sheet workbook as the CSV it was saved from), else the sheet
        splits.append(("" if _blank(s) else _text(s)) if scol is not None else split_name or sheet)
        rows.append(rownum)
    if dates is not None and notes is not None:  # Excel shows (and saves to CSV) 2024/1/2, which sorts otherwise
        notes.append(
            f"{where}, row {dates[0]}: the label {dates[1]!r} is a date cell, read as that ISO text and "
            "ordered as such; a CSV saved from this workbook holds the date as Excel shows it "
            "(2024/1/2, say), whose classes sort in another order: store the column as text for one reading"
        )
    if times is not None and notes is not None:
        notes.append(
            f"{where}, row {times[0]}: the label {times[1]!r} is a time or duration cell, read as that text "
            "(hh:mm:ss) and ordered as such; a CSV saved from this workbook holds it as its format shows it "
            "(2:00 PM, 2:00:00, say), whose classes sort in another order: store the column as text for one reading"
        )
    if numbers is not None and notes is not None:
        notes.append(f"{where}, row {numbers[0]}: the file name {numbers[1]!r} is a number cell, not text; zeros "
                     "its format may show before it (00123) are not part of it: if the files are named so, store the "
                     "column as text")  # fmt: skip
    if split_column is None and scol is not None and _norm(sheet) in _SPLIT_NAMES:
        # a sheet named as a split whose column found by its name (数据集, set) holds no split: the data's source
        # (自采, COCO), not the rows' split, which the sheet's name is
        held = [v for v in dict.fromkeys(splits) if v]
        if held and not any(_norm(v) in _SPLIT_NAMES for v in held):
            splits = [sheet] * len(splits)
            dropped = dict.fromkeys(dropped, sheet)
            if notes is not None:
                shown = ", ".join(map(repr, held[:3])) + (", ..." if len(held) > 3 else "")
                notes.append(f"{where}: column {_text(grid[head.at][scol])!r} holds {shown}, no split: its rows are "
                             f"the sheet's split, {sheet!r} (split_column= reads the column as the split)")  # fmt: skip
    part = _part_from_lists(sheet, files, labels, splits, rows, fname, head.lname)
    part.dropped_splits, part.dropped_files, part.rivals = dropped, named, rivals
    return part


# ---------------------------------------------------------------------------------------------
# reading: workbooks


@dataclass
class _Sheet:
    name: str
    visible: bool
    worksheet: bool


def _refuse_string_counts(path: Path) -> None:
    """Refuse a shared-string table whose ``count``/``uniqueCount`` promise more strings than its bytes can hold:
    calamine allocates for the promise first (4294967295 strings: 103 GB asked for, the interpreter aborted)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            info = z.getinfo("xl/sharedStrings.xml")
            with z.open(info) as f:
                head = f.read(4096)
    except (KeyError, OSError, zipfile.BadZipFile):
        return
    most = info.file_size // 5 + 1  # '<si/>' is the least a string takes
    for name in (b"uniqueCount",):  # (count is of the cells that use them: as many as a sheet's rows, rightly)
        m = re.search(rb"<(?:\w+:)?sst\b[^>]*\s" + name + rb'="(\d+)"', head)
        if m and int(m.group(1)) > most:
            raise LabelError(f"{path}: its shared-string table (xl/sharedStrings.xml) declares {name.decode()}="
                             f"{int(m.group(1)):,} strings, more than its {info.file_size:,} bytes can hold: a damaged "
                             "or hand-edited workbook; open it in Excel and save it again, or save the sheets as "
                             "CSV")  # fmt: skip


def _workbook_sheets(path: Path, engine: str) -> tuple[list[_Sheet], object]:
    if engine == "calamine":
        from python_calamine import CalamineWorkbook, SheetTypeEnum, SheetVisibleEnum

        _refuse_string_counts(path)

        wb = CalamineWorkbook.from_path(os.fspath(path))
        sheets = [_Sheet(m.name, m.visible == SheetVisibleEnum.Visible, m.typ == SheetTypeEnum.WorkSheet)
                  for m in wb.sheets_metadata]  # fmt: skip
        return sheets, wb
    from openpyxl import load_workbook

    wb = load_workbook(path, read_only=True, data_only=True)
    _east_asian_dates(wb)
    sheets = [_Sheet(ws.title, ws.sheet_state == "visible", hasattr(ws, "iter_rows")) for ws in wb.worksheets]
    sheets += [_Sheet(cs.title, cs.sheet_state == "visible", False) for cs in wb.chartsheets]
    lost = [n for n in _declared_sheets(path) if n not in {sh.name for sh in sheets}]
    if lost:  # a part missing, or named in another letter case than its relationship says: openpyxl skips the sheet
        raise LabelError(f"{path}, sheet {lost[0]!r}: cannot be read with engine='openpyxl' (its part is missing "
                         "from the file, or named otherwise than the workbook says); read it with the default "
                         "engine, or open the workbook in Excel and save it again")  # fmt: skip
    return sheets, wb


_EAST_ASIAN_DATES = frozenset((*range(27, 37), *range(50, 59)))


def _east_asian_dates(wb) -> None:
    """Excel's built-in number formats 27-36 and 50-58, the dates (and times) of Chinese, Japanese and Korean Excel
    and of WPS (``yyyy"年"m"月"d"日"`` is 31), which styles.xml names by number alone, read as dates by openpyxl as
    calamine reads them (openpyxl knows them not, and gave serial numbers: 45292.5): the workbook's own styles of
    those formats are added to the ones its reader converts (openpyxl's tables are left as they are)."""
    extra = {i for i, style in enumerate(getattr(wb, "_cell_styles", ())) if style.numFmtId in _EAST_ASIAN_DATES}
    if extra:
        wb._date_formats = set(wb._date_formats) | extra


def _east_asian_cells(ws) -> list[list[object]]:
    """A whole-loaded sheet's rows, its cells of the East Asian built-in date formats as dates (as
    :func:`_east_asian_dates` has them read in a streamed workbook; a whole one converts its cells as it loads)."""
    from openpyxl.utils.datetime import from_excel

    out = []
    for row in ws.iter_rows(min_row=1, min_col=1):
        values = []
        for cell in row:
            value = cell.value
            style = getattr(cell, "_style", None)
            if (style is not None and style.numFmtId in _EAST_ASIAN_DATES and isinstance(value, (int, float))
                    and not isinstance(value, bool)):  # fmt: skip
                value = from_excel(value, ws.parent.epoch)
            values.append(value)
        out.append(values)
    return out


def _declared_sheets(path: Path) -> list[str]:
    """The sheets' names as the workbook's own part lists them."""
    import html
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            book = z.read("xl/workbook.xml").decode("utf-8")
    except (KeyError, OSError, zipfile.BadZipFile, UnicodeDecodeError):
        return []
    out = []
    for m in re.finditer(r"<(?:\w+:)?sheet\b([^>]*)/?>", book):
        name = re.search(r'\bname="([^"]*)"', m.group(1))
        if name:
            out.append(html.unescape(name.group(1)))
    return out


def _sheet_grid(wb: object, name: str, engine: str, path: Path) -> list[list[object]]:
    _refuse_far_cells(path, name)
    if engine == "calamine":
        return wb.get_sheet_by_name(name).to_python(skip_empty_area=False)
    ws = wb[name]
    if hasattr(ws, "reset_dimensions") and not (_scan_of(path, name).ordered and _row_tags_ordered(path, name)):
        # rows stored out of order (some exporters write them so): openpyxl's streamed reader keeps only the
        # rows after the last one it went back past; its whole-workbook reader places each cell by its reference
        from openpyxl import load_workbook

        return _ooxml_unescaped(_east_asian_cells(load_workbook(path, data_only=True)[name]))
    if hasattr(ws, "reset_dimensions"):  # read-only: trust the rows, not a <dimension> tag another tool left stale
        ws.reset_dimensions()
    return _ooxml_unescaped([list(r) for r in ws.iter_rows(values_only=True)])


_OOXML_ESCAPE = re.compile(r"_x00([0-9A-Fa-f]{2})_")


def _ooxml_unescaped(grid: list[list[object]]) -> list[list[object]]:
    """The grid with the escapes Excel writes in cell text for control characters (``_x000D_`` for a carriage
    return, ``_x005F_`` for an underscore before one) decoded, as calamine reads them: openpyxl keeps them
    literally, so ``cat_x000D_`` was a class beside ``cat``. Those of U+0100 and up are left as they are, as calamine
    leaves them (``tile_x0512_y1024.jpg``, written by pandas through openpyxl, is that name)."""
    for row in grid:
        for j, v in enumerate(row):
            if v.__class__ is str and "_x00" in v:
                row[j] = _OOXML_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), v)
    return grid


def _check_container(path: Path) -> None:
    with open(path, "rb") as f:
        head = f.read(8)
    if head == _OLE_MAGIC:
        raw = path.read_bytes()
        if "EncryptedPackage".encode("utf-16-le") in raw:
            raise LabelError(
                f"{path}: the workbook is password-protected (encrypted), so it cannot be read; open it in Excel, "
                "remove the password (File > Info > Protect Workbook > Encrypt with Password) and save it, "
                "or save the sheets as CSV"
            )
        raise LabelError(f"{path}: an old Excel 97-2003 (.xls) file under an .xlsx name; open it in Excel and "
                         "save it as .xlsx (Excel Workbook)")  # fmt: skip
    if head[:2] != b"PK":
        raise LabelError(f"{path}: not an .xlsx workbook (it is not a zip container); save it from Excel as .xlsx")


def _sheet_member(z, sheet: str) -> str | None:
    """The zip member holding ``sheet``'s XML in an .xlsx opened as ``z``."""
    import html

    book = z.read("xl/workbook.xml").decode("utf-8")
    rels = z.read("xl/_rels/workbook.xml.rels").decode("utf-8")
    rid = None
    for m in re.finditer(r"<(?:\w+:)?sheet\b([^>]*)/?>", book):
        attrs = m.group(1)
        name = re.search(r'\bname="([^"]*)"', attrs)
        if name and html.unescape(name.group(1)) == sheet:
            rid = re.search(r'\br:id="([^"]*)"|\bid="([^"]*)"', attrs)
            rid = rid and (rid.group(1) or rid.group(2))
            break
    target = None
    for m in re.finditer(r"<Relationship\b([^>]*)/?>", rels):
        if re.search(rf'\bId="{re.escape(rid or "")}"', m.group(1)):
            target = re.search(r'\bTarget="([^"]*)"', m.group(1)).group(1)
    if target is None:
        return None
    return target.lstrip("/") if target.startswith("/") else posixpath.normpath("xl/" + target)  # ./worksheets/...


def _declared_rows(path: Path, sheet: str) -> int:
    """The last row the sheet's ``<dimension>`` declares (0 when it has none): rows past what the reader
    gave are rows whose every cell read as empty (formulas without saved values among them)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            target = _sheet_member(z, sheet)
            if target is None:
                return 0
            with z.open(target) as f:
                head = f.read(4096).decode("utf-8", "ignore")
    except (KeyError, OSError, zipfile.BadZipFile, AttributeError, UnicodeDecodeError):
        return 0
    m = re.search(r'<(?:\w+:)?dimension\b[^>]*\bref="[A-Z]*\d*:?[A-Z]*(\d+)"', head)
    return int(m.group(1)) if m else 0


def _hidden_columns(path: Path, sheet: str) -> set[int]:
    """The columns (0-based) the sheet hides in Excel (``<col min max hidden="1">``, before its rows)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            target = _sheet_member(z, sheet)
            if target is None:
                return set()
            with z.open(target) as f:
                head = ""
                while "sheetData" not in head and len(head) < 1 << 20:  # <cols> comes before the rows
                    chunk = f.read(1 << 16).decode("utf-8", "ignore")
                    if not chunk:
                        break
                    head += chunk
    except (KeyError, OSError, zipfile.BadZipFile, AttributeError, UnicodeDecodeError):
        return set()
    head = head.split("sheetData", 1)[0]
    out: set[int] = set()
    for m in re.finditer(r"<(?:\w+:)?col\b([^>]*)/?>", head):
        attrs = m.group(1)
        lo, hi = re.search(r'\bmin="(\d+)"', attrs), re.search(r'\bmax="(\d+)"', attrs)
        if lo and hi and re.search(r'\bhidden="(?:1|true)"', attrs):
            out.update(range(int(lo.group(1)) - 1, min(int(hi.group(1)), int(lo.group(1)) + 1024)))
    return out


_ROW_TAG = re.compile(rb"<(?:\w+:)?row\b([^>]*)>")
_MAX_TAG = 1 << 20  # a tag longer than this (a row's attributes padded with spaces) is no row Excel writes


@dataclass(frozen=True)
class _SheetScan:
    hidden: tuple[int, ...]  # rows Excel hides (numbered as Excel numbers them)
    rows: int  # the last row any row or cell names
    cols: int  # the last column any cell names (1-based)
    far: str  # that cell's reference ('XFD1048576'), '' for none
    ordered: bool = True  # the cells' rows never go back (openpyxl's streamed reader drops rows that do)
    formulas: bool = True  # a formula's tag is in it (False: none, so no formula's value to look at)


_WINDOW = 11  # an r= value: a column's letters (3 at most), a row's digits (7 at most) and the closing quote


def _extent(part: bytes) -> tuple[int, str, int, int, bool]:
    """(the last column, a reference to a cell in it, the last row, the first row, whether the rows come in order)
    that the cells' ``r="B7"`` attributes of ``part``
    (a piece of a sheet's XML ending after a tag) name; a row's own ``r="7"`` is no cell (an empty row element, a
    height or a hidden row alone, makes no grid row). Found with NumPy over the bytes, twice as fast as a regular
    expression's matches on a sheet of many columns."""
    n = len(part)
    if n < 5:
        return 0, "", 0, 0, True
    buf = np.frombuffer(part + bytes(_WINDOW + 4), np.uint8)
    head = buf[: n - 3]
    blank = (head == 0x20) | (head == 0x09) | (head == 0x0A) | (head == 0x0D)
    pos = np.flatnonzero(blank & (buf[1 : n - 2] == 0x72) & (buf[2 : n - 1] == 0x3D) & (buf[3:n] == 0x22)) + 4
    if not len(pos):
        return 0, "", 0, 0, True
    w = buf[pos[:, None] + np.arange(_WINDOW)].astype(np.int64)
    letter, digit, quote = (w >= 65) & (w <= 90), (w >= 48) & (w <= 57), w == 0x22
    lead = np.cumprod(letter[:, :3], axis=1)  # the leading letters (a column's)
    nlet = lead.sum(axis=1)
    end = np.where(quote.any(axis=1), quote.argmax(axis=1), -1)
    k = np.arange(_WINDOW)
    inside = (k >= nlet[:, None]) & (k < end[:, None])  # the row's digits
    ok = (nlet > 0) & (end > nlet) & (end - nlet <= 7) & ~(inside & ~digit).any(axis=1)  # cells' (a row's r= no cell)
    if not ok.any():
        return 0, "", 0, 0, True
    w, nlet, end, inside, pos = w[ok], nlet[ok], end[ok], inside[ok], pos[ok]
    row = np.zeros(len(w), np.int64)
    for j in range(_WINDOW):
        row = np.where(inside[:, j], row * 10 + (w[:, j] - 48), row)
    col = np.zeros(len(w), np.int64)
    for j in range(3):
        col = np.where(nlet > j, col * 26 + (w[:, j] - 64), col)
    best = int(col.argmax())
    at = int(pos[best])
    ref = part[at : at + int(end[best])].decode("ascii") if col[best] else ""
    return int(col[best]), ref, int(row.max()), int(row[0]), bool((row[1:] >= row[:-1]).all())


@functools.lru_cache(maxsize=16)
def _sheet_scan(path: str, sheet: str, stamp: tuple) -> _SheetScan:
    """One streamed pass over a sheet's XML (``stamp``: the file's identity, times and size: a changed file is read
    again):
    the rows it hides and how far its cells reach, which every reader makes a grid of (calamine allocates it
    whole: one stray cell at XFD1048576 in a 5 KB workbook asked for 512 GB and aborted the interpreter)."""
    import zipfile

    hidden: list[int] = []
    rows = cols = 0
    far = ""
    ordered = True
    formulas = False
    try:
        with zipfile.ZipFile(path) as z:
            target = _sheet_member(z, sheet)
            if target is None:
                return _SheetScan((), 0, 0, "")
            with z.open(target) as f:
                carry = b""
                while True:
                    chunk = f.read(1 << 20)
                    buf = carry + chunk
                    end = buf.rfind(b">") + 1 if chunk else len(buf)  # a tag cut by the chunk goes with the next
                    part, carry = buf[:end], buf[end:]
                    if len(carry) > _MAX_TAG:  # no tag ends in it (blanks between rows): never carried on and on
                        carry = carry[-256:]
                    if b"hidden=" in part:
                        for m in _ROW_TAG.finditer(part):
                            if re.search(rb'\bhidden="(?:1|true)"', m.group(1)):
                                r = re.search(rb'\br="(\d+)"', m.group(1))
                                hidden.append(int(r.group(1)) if r else 0)  # 0: its number left out (implied)
                    formulas = formulas or b"</f>" in part or b"<f " in part or b":f>" in part or b":f " in part
                    col, at, row, first, inorder = _extent(part)
                    if col > cols:
                        cols, far = col, at
                    ordered = ordered and inorder and (not first or first >= rows)
                    rows = max(rows, row)
                    if not chunk:
                        break
    except (KeyError, OSError, zipfile.BadZipFile, AttributeError):
        return _SheetScan((), 0, 0, "")
    return _SheetScan(tuple(hidden), rows, cols, far, ordered, formulas)


_ROW_NUMBER = re.compile(rb'<(?:\w+:)?row\b[^>]*?\sr="(\d+)"')


def _row_tags_ordered(path: Path, sheet: str) -> bool:
    """Whether the sheet's ``<row r="N">`` tags never go back (cells may leave out their own ``r=``, which OOXML
    allows: the rows' numbers alone then say where they are). Read for openpyxl's streamed reader only."""
    import zipfile

    last = 0
    try:
        with zipfile.ZipFile(path) as z:
            target = _sheet_member(z, sheet)
            if target is None:
                return True
            with z.open(target) as f:
                carry = b""
                while chunk := f.read(1 << 20):
                    buf = carry + chunk
                    end = buf.rfind(b">") + 1
                    for m in _ROW_NUMBER.finditer(buf, 0, end):
                        r = int(m.group(1))
                        if r < last:
                            return False
                        last = r
                    carry = buf[end:][-_MAX_TAG:]
    except (KeyError, OSError, zipfile.BadZipFile, AttributeError):
        return True
    return True


def _scan_of(path: Path, sheet: str) -> _SheetScan:
    try:
        st = os.stat(path)
    except OSError:
        return _SheetScan((), 0, 0, "")
    # the status time too: a file rewritten with its old modification time put back (os.utime, a copy that keeps
    # times) has a new one
    return _sheet_scan(os.fspath(path), sheet, (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size))


_MAX_CELLS = 1 << 26  # a grid of 67 million cells: about 2 GB to the readers; a label table is far under it


def _refuse_far_cells(path: Path, sheet: str) -> None:
    """Refuse, naming the cell, a sheet whose cells reach so far that a reader's grid of them would not fit."""
    scan = _scan_of(path, sheet)
    if scan.rows * scan.cols > _MAX_CELLS:
        letters, rows = scan.far.rstrip("0123456789"), scan.rows
        raise LabelError(f"{path}, sheet {sheet!r}: its cells reach column {letters} and row {rows:,} ({scan.cols:,} "
                         f"columns by {scan.rows:,} rows, {scan.rows * scan.cols:,} cells), past the {_MAX_CELLS:,} a "
                         f"sheet may hold to be read: a stray cell far from the table (one is at {scan.far})? In "
                         "Excel, Ctrl+End goes to the last; delete the rows and columns past the table, save, or save "
                         "the sheet as CSV")  # fmt: skip


def _hidden_rows(path: Path, sheet: str) -> list[int]:
    """The rows (numbered as Excel numbers them) the sheet hides: ``<row r="4" hidden="1">``, hidden by hand, by a
    filter, or in a collapsed group. The sheet's XML is streamed; only a part that holds ``hidden=`` is parsed."""
    return list(_scan_of(path, sheet).hidden)


def _rows_text(rows: list[int]) -> str:
    """'row 4', 'rows 4 and 7', 'rows 4, 7, 9 and 12 more'."""
    if len(rows) == 1:
        return f"row {rows[0]}"
    if len(rows) == 2:
        return f"rows {rows[0]} and {rows[1]}"
    if len(rows) == 3:
        return f"rows {rows[0]}, {rows[1]} and {rows[2]}"
    return f"rows {rows[0]}, {rows[1]}, {rows[2]} and {len(rows) - 3} more"


_LABEL_ENDINGS = ("标签", "类别", "分类", "標籤", "類別", "分類")
_ANOTHER_LABEL = re.compile(
    r"(?:new|final|checked|corrected|fixed|revised|true|gt|clean|manual|human|correct)_?(?:label|class|category|target)s?"
    r"|(?:label|class|category|target)s?_?(?:new|final|checked|corrected|fixed|revised|v?\d+)"
)


def _names_labels(header: object) -> bool:
    """Whether a column's header names labels: a known one, another version of one (new_label, label_checked,
    label2, 新标签), not a column about them (labeler, label_time, label_confidence, class_count)."""
    key = _norm(header)
    return key in _RIVAL_COLUMNS or bool(_ANOTHER_LABEL.fullmatch(key)) or key.endswith(_LABEL_ENDINGS)


def _hidden_label_column(path: Path, sheet: str, grid: Sequence[Sequence[object]], head: _Header,
                         where: str) -> tuple[str, str] | None:  # fmt: skip
    """('problem' or 'note', the line) where the label column found is hidden in Excel: a problem where a column
    shown beside it names labels too (新标签 beside a hidden 标签: the labels the user sees are not the ones read),
    else a note."""
    hidden = _hidden_columns(path, sheet)
    if head.lcol not in hidden:
        return None
    row = grid[head.at] if head.at >= 0 else []
    letter = _column_letter(head.lcol)
    name = f"{head.lname!r} (column {letter})" if head.lname else f"column {letter}"
    shown = [(i, _text(h)) for i, h in enumerate(row) if i not in (head.fcol, head.lcol, head.scol) and i not in hidden
             and not _blank(h) and _names_labels(h)]  # fmt: skip
    if shown:
        i, other = shown[0]
        return "problem", (f"{where}, row {head.at + 1}: the label column {name} is hidden in Excel, and "
                           f"{other!r} (column {_column_letter(i)}) beside it is shown: which one holds the labels? "
                           "name it with label_column= (--label-column)")  # fmt: skip
    return "note", f"{where}: the label column {name} is hidden in Excel; its labels are read"


def _cell_ref(letters: str) -> int:
    col = 0
    for ch in letters:
        col = col * 26 + ord(ch) - 64
    return col - 1


def _merged_header_rows(grid: list[list[object]], head: _Header, path: Path, sheet: str, locate) -> _Header:
    """The header of a sheet whose file cell is merged down over the rows under it: a header of two rows, as
    offices lay one out (文件名 merged over rows 1-2, beside it a group title 拍摄信息 over the sub-headers
    日期 | 地点, or 标注信息 over 标签 | 备注). Each column is named by its lowest text in those rows, the rows under
    the first are the header's (blanked, no samples with their file missing), and ``locate`` finds the columns
    again in that header. The CSV Excel saves of such a sheet reads the same."""
    below = head.at + 1
    if below >= len(grid):
        return head
    row = grid[below]
    if (head.fcol < len(row) and not _blank(row[head.fcol])) or all(_blank(v) for v in row):
        return head
    for r0, c0, r1, c1, _ in _CellNotes(path, sheet).merged:
        if r0 == head.at + 1 and c0 <= head.fcol <= c1 and r1 > r0:  # (rows from 1, columns from 0)
            last = min(r1, len(grid))
            top = list(grid[head.at])
            top += [None] * (max(len(grid[k]) for k in range(head.at, last)) - len(top))
            for k in range(below, last):
                for c, v in enumerate(grid[k]):
                    if not _blank(v):
                        top[c] = v
                grid[k] = [None] * len(grid[k])
            changed = top[: len(grid[head.at])] != list(grid[head.at]) or any(not _blank(v) for v in
                                                                              top[len(grid[head.at]) :])  # fmt: skip
            grid[head.at] = top
            found = locate() if changed else head
            return dataclasses.replace(found or head, below=r1 - r0)
    return head


class _CellNotes:
    """Why cells of one sheet that Excel shows with a value read as empty: a formula without a saved value, an
    error value (``#N/A``), a cell under a merged one (only the merged range's first cell holds its value)."""

    def __init__(self, path: Path, sheet: str, placeholders: bool = False) -> None:
        """``placeholders``: the workbook's saved formula values are placeholders (:func:`_recalculated`): the
        formulas saved with XlsxWriter's 0 are gathered in ``placeholders`` (only they are looked for)."""
        import html
        import zipfile

        self.formulas: dict[tuple[int, int], str] = {}
        self.errors: dict[tuple[int, int], str] = {}
        self.placeholders: dict[tuple[int, int], str] = {}  # formulas saved with a placeholder value (placeholders=)
        self.computed: set[int] = set()  # (placeholders=) columns with a formula saved with another value than 0
        self.merged: list[tuple[int, int, int, int, str]] = []  # first row, first column, last row, last column
        try:
            with zipfile.ZipFile(path) as z:
                target = _sheet_member(z, sheet)
                if target is None:
                    return
                raw = z.read(target)
        except (KeyError, OSError, zipfile.BadZipFile, AttributeError):
            return
        if placeholders and b"<f" not in raw and b":f" not in raw:  # no formula: nothing to look at (most sheets)
            return
        try:
            xml = raw.decode("utf-8")
        except UnicodeDecodeError:
            return
        if _PREFIXED_TAG.search(xml):  # <x:c>, <x:f>, <x:v> as the Open XML SDK writes them: read as the plain tags
            xml = _TAG_PREFIX.sub(r"<\1", xml)
        for m in re.finditer(r'<c\b([^>]*?)\br="([A-Z]+)(\d+)"([^>]*?)(?:/>|>(.*?)</c>)', xml, re.S):
            inner = m.group(5) or ""
            key = (int(m.group(3)), _cell_ref(m.group(2)))
            value = re.search(r"<v>([^<]+)</v>", inner)
            if value is None and re.search(r'\bt="str"', m.group(1) + m.group(4)) and re.search(r"<v\s*/>|<v></v>",
                                                                                                  inner):  # fmt: skip
                value = re.search(r"<v\s*/>|<v></v>", inner)  # a text formula whose saved value is "" (Excel)
            if re.search(r'\bt="e"', m.group(1) + m.group(4)) and value is not None and value.groups():
                self.errors[key] = html.unescape(value.group(1))
            elif "<f" in inner and value is None:
                formula = re.search(r"<f[^>]*>([^<]*)</f>", inner)
                self.formulas[key] = html.unescape(formula.group(1)) if formula else ""
            elif "<f" in inner and placeholders and value.groups() and value.group(1) == "0":
                formula = re.search(r"<f[^>]*>([^<]*)</f>", inner)
                self.placeholders[key] = html.unescape(formula.group(1)) if formula else ""
            elif "<f" in inner and placeholders:
                self.computed.add(key[1])  # a formula of this column saved with a value of its own: real values
        for m in re.finditer(r'<mergeCell\b[^>]*\bref="([A-Z]+)(\d+):([A-Z]+)(\d+)"', xml):
            r0, c0, r1, c1 = int(m.group(2)), _cell_ref(m.group(1)), int(m.group(4)), _cell_ref(m.group(3))
            self.merged.append((r0, c0, r1, c1, f"{m.group(1)}{m.group(2)}:{m.group(3)}{m.group(4)}"))

    def rows(self) -> set[int]:
        return {r for r, _ in self.formulas} | {r for r, _ in self.errors}

    def __call__(self, row: int, col: int) -> str | None:
        cell = f"{_column_letter(col)}{row}"
        f = self.formulas.get((row, col))
        if f is not None:
            return (f"cell {cell} holds a formula (={f}) {_NO_SAVED_VALUE}; open the file in Excel and save it, "
                    "so the values are stored")  # fmt: skip
        e = self.errors.get((row, col))
        if e is not None:
            return f"cell {cell} holds {e!r}, an Excel error value, not a name"
        for r0, c0, r1, c1, ref in self.merged:
            if r0 <= row <= r1 and c0 <= col <= c1 and (row, col) != (r0, c0):
                return (f"cell {cell} is part of the merged cell {ref}, whose value only its first cell holds; "
                        "unmerge the cells and fill the value into every row")  # fmt: skip
        return None


_PERCENT_CODE = re.compile(r"([#,0]*)0?(?:\.(0*)(#*))?( ?)%")  # 0%, 0.00%, #,##0.0%, 0.0#%, 0.0 %: shown as such


def _percent_code(code: str) -> tuple | None:
    """(least decimals, most decimals, space before %, thousands separated, how a negative is written) of a number
    format that shows numbers as percentages, from its first section (its colour, condition and spacing dropped, an
    escaped space kept); the negative's (before, after) is ("-", "") without a section of its own, ("(", ")") for
    ``0%;(0%)``, None for a section of another kind (such a number is left as it is). None for any other format."""
    sections = [re.sub(r"\[[^\]]*\]|_.|\\.|\*.", "", part.replace("\\ ", " ")).strip() for part in code.split(";")]
    shown = _PERCENT_CODE.fullmatch(sections[0])
    if shown is None:
        return None
    zeros, hashes = shown.group(2) or "", shown.group(3) or ""
    negative: tuple[str, str] | None = ("-", "")
    if len(sections) > 1:
        wrapped = re.fullmatch(r"(\(|-)?(.*?)(\))?", sections[1])
        inner = _PERCENT_CODE.fullmatch(wrapped.group(2)) if wrapped else None
        if inner is None or inner.groups() != shown.groups() or (wrapped.group(1) == "(") != bool(wrapped.group(3)):
            negative = None
        else:
            negative = (wrapped.group(1) or "", wrapped.group(3) or "")
    return len(zeros), len(zeros) + len(hashes), shown.group(4), "," in shown.group(1), negative


def _percent_styles(path: Path) -> dict[int, tuple]:
    """The cell styles of the workbook at ``path`` that show numbers as percentages (Excel's 0% and 0.00%, or a
    format of its own such as 0.0%), each with how it shows them (:func:`_percent_code`); {} for none."""
    xml = _styles_xml(path)
    if xml is None or ("%" not in xml and not re.search(r'numFmtId="(?:9|10)"', xml)):
        return {}
    codes: dict[int, tuple] = {9: (0, 0, "", False, ("-", "")), 10: (2, 2, "", False, ("-", ""))}
    for fid, text in _custom_formats(xml):
        shown = _percent_code(text)
        if shown is not None:
            codes[fid] = shown
        else:
            codes.pop(fid, None)
    return _xf_styles(xml, codes)


# Excel's built-in number formats that show a number otherwise than General (dates and percents read elsewhere)
_BUILTIN_FORMATS = {1: "0", 2: "0.00", 3: "#,##0", 4: "#,##0.00", 11: "0.00E+00", 12: "# ?/?", 13: "# ??/??",
                    37: "#,##0 ;(#,##0)", 38: "#,##0 ;[Red](#,##0)", 39: "#,##0.00;(#,##0.00)",
                    40: "#,##0.00;[Red](#,##0.00)", 48: "##0.0E+0"}  # fmt: skip
_DATE_CODE = re.compile(r"[dmyhs]", re.I)


def _styles_xml(path: Path) -> str | None:
    """The workbook's xl/styles.xml, None where it has none (or cannot be read)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            return z.read("xl/styles.xml").decode("utf-8")
    except (KeyError, OSError, zipfile.BadZipFile, UnicodeDecodeError):
        return None


def _custom_formats(xml: str) -> list[tuple[int, str]]:
    """(id, format code) of the workbook's own number formats (its <numFmts>, not <dxfs>' formats)."""
    import html

    formats = re.search(r"<(?:\w+:)?numFmts\b[^>]*>(.*?)</(?:\w+:)?numFmts>", xml, re.S)
    out = []
    for m in re.finditer(r"<(?:\w+:)?numFmt\b([^>]*)/?>", formats.group(1) if formats else ""):  # attributes any order
        fid = re.search(r'\bnumFmtId="(\d+)"', m.group(1))
        code = re.search(r'\bformatCode="([^"]*)"', m.group(1))
        if fid and code:
            out.append((int(fid.group(1)), html.unescape(code.group(1))))
    return out


def _xf_styles(xml: str, codes: dict) -> dict:
    """The cell styles (their index in <cellXfs>) whose number format is one of ``codes``, each with its entry."""
    xfs = re.search(r"<(?:\w+:)?cellXfs\b[^>]*>(.*?)</(?:\w+:)?cellXfs>", xml, re.S)
    if xfs is None:
        return {}
    out = {}
    for k, m in enumerate(re.finditer(r"<(?:\w+:)?xf\b([^>]*?)/?>", xfs.group(1))):
        fmt = re.search(r'\bnumFmtId="(\d+)"', m.group(1))
        if fmt and int(fmt.group(1)) in codes:
            out[k] = codes[int(fmt.group(1))]
    return out


def _format_styles(path: Path) -> dict[int, str]:
    """The cell styles of the workbook at ``path`` whose number format is neither General, text, a percent
    (:func:`_percent_styles`) nor a date: each with its format code; {} for none."""
    xml = _styles_xml(path)
    if xml is None:
        return {}
    codes: dict[int, str] = dict(_BUILTIN_FORMATS)
    for fid, text in _custom_formats(xml):
        plain = re.sub(r'"[^"]*"|\\.|\[[^\]]*\]', "", text)  # literal text and brackets: no date letters
        if text.lower() in ("general", "@") or "%" in plain or _DATE_CODE.search(plain.replace("E+", "")):
            codes.pop(fid, None)
        else:
            codes[fid] = text
    return _xf_styles(xml, codes)


def _styled_numbers(grid: list[list[object]], path: Path, sheet: str, styles: dict, column: int):
    """(row index, number, its style's entry in ``styles``) of the number cells of ``grid`` (the sheet's rows from
    A1) in ``column`` whose cell style is one of ``styles``."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            target = _sheet_member(z, sheet)
            xml = z.read(target).decode("utf-8") if target else ""
    except (KeyError, OSError, zipfile.BadZipFile, AttributeError, UnicodeDecodeError):
        return
    letters = _column_letter(column)
    for m in re.finditer(rf'<(?:\w+:)?c\b([^>]*?\br="{letters}(\d+)"[^>]*?)/?>', xml):
        style = re.search(r'\bs="(\d+)"', m.group(1))
        if style is None or int(style.group(1)) not in styles:
            continue
        row = int(m.group(2)) - 1
        if row >= len(grid) or column >= len(grid[row]):
            continue
        v = grid[row][column]
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float)) or not math.isfinite(v):
            continue
        yield row, v, styles[int(style.group(1))]


# colours and a locale tag, LCID (``[$-409]``) or BCP-47 (``[$-zh-CN]``), with no currency symbol before its dash
_FORMAT_TAGS = re.compile(r"\[(?:Red|Black|Blue|Green|White|Yellow|Cyan|Magenta|Color\d+|\$-[0-9A-Za-z-]+)\]", re.I)
# literal spaces, a padding (_)), a fill of spaces: what a label loses as it is read
_BLANKS = re.compile(r'"\s*"|\\\s|_.|\*\s')


def _shown_otherwise(v: float, code: str) -> bool:
    """Whether the number format ``code`` shows ``v`` otherwise than its value's text (what datakit reads): text or
    a condition in the format, a scientific or fractional form, fewer decimals than the value has, thousands
    separated or scaled away, zeros padded before it, a sign dropped, nothing at all (``;;;``, ``#`` on 0). Colours
    and a locale tag (``[$-409]``) show nothing; the section for negative numbers and for zero is the one read."""
    sections = code.split(";")
    if v < 0 and len(sections) > 1:  # a negative section of its own: -0 shows -5; (0), 0- and 0 show it otherwise
        section = _BLANKS.sub("", _FORMAT_TAGS.sub("", sections[1])).strip()
        minus = next((m for m in ("-", "\\-", '"-"') if section.startswith(m)), None)  # -0, \-0 and "-"0 alike
        return minus is None or _section_otherwise(-v, section[len(minus) :])
    if v == 0 and len(sections) > 2:  # a zero section of its own: "-", empty (;;;), or 0
        return _section_otherwise(v, sections[2])
    return _section_otherwise(v, sections[0])


def _section_otherwise(v: float, section: str) -> bool:
    """:func:`_shown_otherwise` for one section of a format."""
    spaced = _FORMAT_TAGS.sub("", section).strip()  # its blanks kept: '# ?/?' and '#\ ?/?' part whole and fraction
    section = _BLANKS.sub("", spaced).strip()
    if not section:  # ;;; hides the number
        return True
    if section.lower() == "general":  # General;General, [Red]General: the value's own text
        return False
    if re.search(r'["\\@\[*]', section) or re.search(r"[A-DF-Za-df-z]", section):  # text, a condition, letters
        return True
    if "E" in section.upper() or "/" in section:
        # # ?/? shows a whole number as itself (and blanks); ?/? with no whole part shows 5 as 5/1
        return not (float(v).is_integer() and re.match(r"[#0?,]+(?:\s|\\\s|_.)+[#0?]+/", spaced) is not None)
    digits = re.sub(r"[^0#?.,]", "", section)
    if re.sub(r"[0#?.,]", "", section):  # any other character shown beside the number: $, (5), a sign, 1, a space
        return True
    whole, _, frac = digits.partition(".")
    if digits.endswith(","):  # 0, and 0.0, : thousands scaled away
        return v != 0
    if "," in whole and abs(v) >= 1000:  # #,##0: 1,000
        return True
    text = _text(float(abs(v)))
    integral, _, decimals = text.partition(".")
    if whole.count("0") > len(integral):  # 000 shows 5 as 005
        return True
    if abs(v) < 1 and "0" not in whole:  # # shows 0 as nothing, #.# shows 0.5 as .5
        return True
    return len(decimals) > len(frac.replace(",", "")) or (len(decimals) < frac.count("0") and not float(v).is_integer())


def _format_note(grid: list[list[object]], path: Path, sheet: str, styles: dict, column: int, where: str) -> str | None:
    """A note for the label column's number cells that their number format shows otherwise than their values (1.4
    under 0 shows 1; 3 under "类"0 shows 类3): a CSV saved from the sheet holds what is shown, other classes."""
    first, count = None, 0
    for row, v, code in _styled_numbers(grid, path, sheet, styles, column):
        if _shown_otherwise(v, code):
            count += 1
            first = first or (row + 1, _text(v), code)
    if first is None:
        return None
    more = f" (and {count - 1} more)" if count > 1 else ""
    return (f"{where}, row {first[0]}: the label {first[1]!r}{more} is a number cell whose format {first[2]!r} shows "
            "it otherwise; datakit reads the value, while a CSV saved from this workbook holds what is shown, which "
            "gives other classes: set the column's format to General (or store the labels as text) for one "
            "reading")  # fmt: skip


def _percent_text(v: float, shown: tuple) -> str | None:
    """``v`` as a percent format ``shown`` shows it (0.05 under 0%: '5%'; 0.125: '13%', rounded half away from zero
    as Excel rounds; 0.0512 under 0.0#%: '5.12%'); None where it cannot be written so (a value past Excel's)."""
    least, most, space, grouped, negative = shown
    if v < 0 and negative is None:
        return None
    try:
        with decimal.localcontext() as ctx:
            ctx.prec = 400
            text = str(
                (decimal.Decimal(_text(float(v))) * 100).quantize(
                    decimal.Decimal(1).scaleb(-most), rounding=decimal.ROUND_HALF_UP
                )
            )
    except (decimal.InvalidOperation, ValueError):
        return None
    whole, _, frac = text.partition(".")
    if most > least:  # optional digits (#): trailing zeros past the required ones dropped
        frac = frac.rstrip("0").ljust(least, "0")
    before, after = negative if whole.startswith("-") and negative is not None else ("", "")
    whole = whole.lstrip("-")
    if grouped:  # #,##0%: 12,345%
        whole = f"{int(whole):,}"
    number = f"{whole}.{frac}" if frac or most else whole  # 0.##% of 0.5: '50.%', the point kept, as Excel shows
    return f"{before}{number}{space}%{after}"


def _show_percents(grid: list[list[object]], path: Path, sheet: str, styles: dict, column: int) -> None:
    """Number cells of ``grid`` (the sheet's rows from A1) in ``column`` (the labels') formatted as percentages, as
    Excel shows them and writes them to CSV (:func:`_percent_text`)."""
    for row, v, shown in _styled_numbers(grid, path, sheet, styles, column):
        text = _percent_text(v, shown)
        if text is not None:
            grid[row][column] = text


def _beside_files(grid: Sequence[Sequence[object]], head) -> bool:
    """Whether any row under the header (the first 2000 of them) holds a value beside its file name."""
    for row in grid[head.at + 1 : head.at + 2001]:
        if any(not _blank(v) for j, v in enumerate(row) if j != head.fcol):
            return True
    return False


def _column_letter(col: int) -> str:
    s = ""
    col += 1
    while col:
        col, r = divmod(col - 1, 26)
        s = chr(65 + r) + s
    return s


def _added_classes(hidden: list, visible: list) -> list[str]:
    """The labels of the ``hidden`` parts that no ``visible`` part holds, in class order."""
    mine = {_text(v) for p in visible for v in p.labels if not _blank(v)}
    theirs = {_text(v) for p in hidden for v in p.labels if not _blank(v)}
    if all(_is_int_text(c) for c in mine | theirs):
        return sorted(theirs - mine, key=_int_of)
    return sorted(theirs - mine)


def _hidden_classes(wb, engine: str, path: Path, names: list[str], parts: list, file_column, label_column,
                    split_column) -> list[str]:  # fmt: skip
    """The classes the hidden sheets ``names`` would add to the class map of ``parts``, were they read: those
    that are splits (a row naming an image file, or a split's name)."""
    hidden = []
    percents = _percent_styles(path) if names else {}
    for name in names:
        try:
            grid = _sheet_grid(wb, name, engine, path)
            head = _locate_header(grid, file_column, label_column, split_column, f"{path}, sheet {name!r}")
            if head is None or head.lcol is None:
                continue
            if percents:
                _show_percents(grid, path, name, percents, head.lcol)
            part = _parse_grid(grid, head, sheet=name, where=f"{path}, sheet {name!r}", problems=[], order=0,
                               engine=engine, split_column=split_column)  # fmt: skip
        except Exception:  # noqa: BLE001 - a sheet not read is told about in the note, whatever it holds
            continue
        if any(_looks_like_file(f) for f in part.files) or _norm(name) in _SPLIT_NAMES:
            hidden.append(part)
    return _added_classes(hidden, parts) if hidden else []


def _label_header_cell(grid: Sequence[Sequence[object]], label_column: str | None) -> tuple[int, int, str] | None:
    """(row, column, text) of the first cell in the first 50 rows that names a label column (``label_column``
    or one of :data:`LABEL_COLUMNS`), rows numbered from 1, where the rows below hold labels in it and image
    file names in another column; None otherwise."""
    keys = {_norm(label_column)} if label_column is not None else {_norm(k) for k in LABEL_COLUMNS}
    for r, row in enumerate(grid[:50]):
        for c, v in enumerate(row):
            if not _blank(v) and _norm(v) in keys:
                below = grid[r + 1 :]
                labelled = any(c < len(x) and not _blank(x[c]) for x in below)
                named = any(_looks_like_file(y) for x in below for k, y in enumerate(x) if k != c and not _blank(y))
                # labels beside image file names: a split (an unlabelled test sheet, a pivot table of counts, notes
                # explaining the columns are none)
                return (r + 1, c, _text(v)) if labelled and named else None
    return None


def _no_file_column(file_column: str | None) -> str:
    return f"no file column named {file_column!r}" if file_column is not None else "no file-name column found"


_NO_SAVED_VALUE = "with no saved value"  # in a cell note: a formula whose value Excel has not stored
_PREFIXED_TAG = re.compile(r"</?\w+:(?:c|f|v|row|mergeCell)\b")
_TAG_PREFIX = re.compile(r"<(/?)\w+:")


def _recalculated(path: Path) -> bool:
    """Whether the workbook asks Excel to compute every formula when it opens it (``fullCalcOnLoad``), as XlsxWriter
    (and pandas' xlsxwriter engine) writes one: the values saved with its formulas are then placeholders (0)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            book = z.read("xl/workbook.xml")
    except (KeyError, OSError, zipfile.BadZipFile):
        return False
    return re.search(rb'\bfullCalcOnLoad="(?:1|true)"', book) is not None


def _placeholder_problems(path: Path, sheet: str, head: _Header, where: str, order: int) -> list:
    """The file and label cells holding a formula in a workbook whose saved formula values are placeholders."""
    if not _scan_of(path, sheet).formulas:  # (the sheet's one streamed pass said so: not read again)
        return []
    cells = _CellNotes(path, sheet, placeholders=True)
    out = []
    for (row, col), formula in sorted(cells.placeholders.items()):
        # (a column whose formulas hold other values too: XlsxWriter's value= given, each saved with its result)
        if row > head.at + 1 + head.below and col in (head.fcol, head.lcol) and col not in cells.computed:
            out.append(((order, row), f"{where}, row {row}: cell {_column_letter(col)}{row} holds a formula "
                        f"(={formula}) whose saved value is a placeholder: the program that wrote the workbook left "
                        "its formulas for Excel to compute when it opens it (fullCalcOnLoad); open the file in Excel "
                        "and save it, so the values are stored"))  # fmt: skip
    return out


class _CellNotesOnce:
    """A sheet's cell notes (formulas without saved values), loaded at the first question."""

    def __init__(self, path: Path, sheet: str) -> None:
        self.path, self.sheet, self.notes = path, sheet, None

    def __call__(self, row: int, col: int) -> str | None:
        if self.notes is None:
            self.notes = _CellNotes(self.path, self.sheet)
        return self.notes(row, col)


def _read_workbook(path: Path, *, sheets: Sequence[str] | None, split: str | None, include_hidden: bool,
                   file_column: str | None, label_column: str | None, split_column: str | None, engine: str,
                   problems: list, notes: list) -> list[_Part]:  # fmt: skip
    """The parts of every recognised sheet, in workbook order; those of the sheets not asked for are not
    ``chosen``: they give the class map their labels, and their files are compared with the chosen rows."""
    _check_container(path)
    try:
        meta, wb = _workbook_sheets(path, engine)
    except LabelError:
        raise
    except Exception as exc:
        if type(exc).__name__ == "PasswordError":
            raise LabelError(f"{path}: the workbook is password-protected (encrypted); remove the password in "
                             "Excel and save it") from None  # fmt: skip
        raise LabelError(f"{path}: cannot read the workbook ({type(exc).__name__}: {exc})") from None
    names = [s.name for s in meta]
    # a sheet's name as a split, stripped of spaces around it as a split column's values are ('train ' is 'train',
    # and sheets 'train' and 'train ' are one split, as a split column's values 'train' and 'train ' are)
    split_of = {n: n.strip() or n for n in names}
    wanted = list(sheets) if sheets is not None else None
    if wanted is None and split is not None and split in split_of.values():
        wanted = [n for n, t in split_of.items() if t == split]  # --split reads only its sheets (the others give
        # only their class names)
    if wanted is not None:
        missing = [s for s in wanted if s not in names]
        if missing:
            raise SheetNotRead(f"{path}: no sheet {missing[0]!r}; the sheets are {', '.join(map(repr, names))}")
    # a hidden sheet is read, for its rows and its labels, only with include_hidden: naming it alone would
    # give its split a class map the other splits (read without it) do not share
    asked = [*(wanted or ()), *([split] if split is not None else [])]
    hidden = next((s for s in meta if not s.visible and s.worksheet and s.name in asked), None)
    if hidden is not None and not include_hidden:
        raise SheetNotRead(f"{path}: sheet {hidden.name!r} is hidden; pass include_hidden=True (--include-hidden) "
                           "to read it")  # fmt: skip
    parts: list[_Part] = []
    unsaved: dict[int, list] = {}  # label formulas without saved values in the sheets not asked for, by sheet
    hidden_left: list[str] = []
    named_missing: list[str] = []  # sheets without the label column the caller named
    split_missing: list[str] = []  # and without the split column
    split_found = False
    percent_styles: dict | None = None  # read once, at the first sheet with a label column
    recalculated: bool | None = None  # the workbook's saved formula values are placeholders (fullCalcOnLoad)
    format_styles: dict = {}
    for order, sh in enumerate(meta):
        chosen = wanted is None or sh.name in wanted
        if not sh.worksheet:
            if chosen:
                notes.append(f"{path}: sheet {sh.name!r} skipped (a chart, not a table)")
            continue
        if not sh.visible and not include_hidden:
            hidden_left.append(sh.name)  # left out of the class map too, whichever sheets are read (an old split)
            continue
        try:
            grid = _sheet_grid(wb, sh.name, engine, path)
        except LabelError as exc:  # a sheet too far-reaching to read: said as it is
            problems.append(((order, 0), str(exc)))
            continue
        except Exception as exc:  # damaged XML, a missing part, a shared string that is not there
            # not skipped: without its rows (or, for a sheet not asked for, its labels in the class map) the
            # table would be read as another one
            what = (str(exc).strip().splitlines() or [""])[0][:200]
            problems.append(((order, 0), f"{path}, sheet {sh.name!r}: cannot be read ({type(exc).__name__}: "
                             f"{what}); open the workbook in Excel and save it again, or delete the sheet if it holds "
                             "no labels"))  # fmt: skip
            continue
        where = f"{path}, sheet {sh.name!r}"
        head = _locate_header(grid, file_column, label_column, split_column, where)
        if head is not None and head.at >= 0:
            relocate = functools.partial(_locate_header, grid, file_column, label_column, split_column, where)
            head = _merged_header_rows(grid, head, path, sh.name, relocate)
        if head is not None and head.lcol is not None and label_column is None:
            hidden_label = _hidden_label_column(path, sh.name, grid, head, where)
            if hidden_label is not None and hidden_label[0] == "problem":
                problems.append(((order, head.at + 1), hidden_label[1]))
                continue
            if hidden_label is not None:
                notes.append(hidden_label[1])
        if head is not None and head.lcol is not None:
            if percent_styles is None:
                percent_styles, format_styles = _percent_styles(path), _format_styles(path)
            if percent_styles:  # the label column's cells as Excel shows them (5% for 0.05)
                _show_percents(grid, path, sh.name, percent_styles, head.lcol)
            if format_styles and (note := _format_note(grid, path, sh.name, format_styles, head.lcol, where)):
                notes.append(note)
        if head is None:
            labelled = _label_header_cell(grid, label_column)
            if labelled is not None and _norm(sh.name) not in _SPLIT_NAMES:
                if file_column is None and label_column is None:  # a summary (类别 | 数量), or samples under a file
                    # header not known: which, only the user knows; said, whether the sheet was asked for or not
                    r, c, text = labelled
                    theirs = "" if sum(1 for m in meta if m.worksheet) == 1 else "as the other sheets name theirs "
                    notes.append(f"{where}, row {r}: skipped: a label column ({text!r}, column {_column_letter(c)}) "
                                 f"but no file-name column found; if its rows are samples, name its file column "
                                 f"{theirs}(or give file_column=, --file-column)")  # fmt: skip
                    continue
                labelled = None
            if labelled is not None and (not chosen or (file_column is None and label_column is None)):
                # a split's sheet with a label column, its files not found: skipped, its labels would be missing from
                # the class map every split shares (and its rows from the splits read), without a word
                r, c, text = labelled
                alone = sum(1 for m in meta if m.worksheet) == 1
                fix = (
                    "name it with file_column= (--file-column)"
                    if alone
                    else "the class map every split "
                    "shares takes this sheet's labels too: name its file column as the other sheets name theirs"
                )
                problems.append(((order, r), f"{where}, row {r}: a label column ({text!r}, column "
                                 f"{_column_letter(c)}) but {_no_file_column(file_column)}; {fix}"))  # fmt: skip
                continue
            if chosen and file_column is None and label_column is None:  # one named missing: said below
                notes.append(f"{path}: sheet {sh.name!r} skipped (no file and label header: notes, a chart or "
                             "a pivot table)")  # fmt: skip
            continue
        if split_column is not None:  # any sheet's, asked for or not: it holds every split
            if head.at < 0:
                split_missing.append(f"{where}: no header row, so no split column named {split_column!r}")
            elif head.scol is None:
                shown = ", ".join(repr(_text(h)) for h in grid[head.at] if not _blank(h))
                split_missing.append(f"{where}, row {head.at + 1}: no split column named {split_column!r} among "
                                     f"{shown}")  # fmt: skip
            else:
                split_found = True
        if not chosen:
            if head.lcol is not None:  # its problems are its own split's, not reported here, but a label cell
                # whose formula has no saved value is a label missing from the class map every split shares
                own: list = []
                notes_of = _CellNotesOnce(path, sh.name)
                other = _parse_grid(grid, head, sheet=sh.name, where=where, problems=own, order=order, engine=engine,
                                    split_column=split_column, cell_note=notes_of,
                                    split_name=split_of[sh.name])  # fmt: skip
                unsaved[order] = [q for q in own if _NO_SAVED_VALUE in q[1]]  # said below if it is a split
                other.order, other.chosen = order, False
                parts.append(other)
            elif _norm(sh.name) in _SPLIT_NAMES and head.at >= 0 and sheets is None and _beside_files(grid, head):
                # a split's sheet whose label column is not found, with other columns filled: its labels would be
                # missing from the class map every split shares (a class only it has shifts the others' indices
                # once it is read), unsaid. A sheet of file names alone (a test split without labels) has none;
                # sheets= names the sheets the caller wants read
                shown = ", ".join(repr(_text(h)) for h in grid[head.at] if not _blank(h))
                which = f"named {label_column!r} " if label_column else "found "
                problems.append(((order, head.at + 1), f"{where}, row {head.at + 1}: no label column {which}among "
                                 f"{shown}; the class map every split shares takes this sheet's labels too: name "
                                 "its label column as the other sheets name theirs (or give label_column=, "
                                 "--label-column), or leave the sheet out with sheets="))  # fmt: skip
            continue
        if head.lcol is None:
            shown = ", ".join(repr(_text(h)) for h in grid[head.at] if not _blank(h))
            if label_column:
                missing = f"{where}, row {head.at + 1}: no label column named {label_column!r} among {shown}"
                named_missing.append(missing)
            elif head.why:
                missing = f"{where}, row {head.at + 1}: no label column found among {shown}: {head.why}"
            else:
                missing = (f"{where}, row {head.at + 1}: no label column found among {shown}; name it with "
                           "label_column= (--label-column)")  # fmt: skip
            problems.append(((order, head.at + 1), missing))
            continue
        if head.at < 0:
            wide = next((r for r, row in enumerate(grid[:50]) if sum(not _blank(v) for v in row) > 2), None)
            if wide is not None:  # which of them is the label is a guess: column B taken, C, D... dropped unsaid
                shown = ", ".join(repr(_text(v)) for v in grid[wide] if not _blank(v))
                problems.append(((order, wide + 1), f"{where}, row {wide + 1}: no header row, and {shown} are "
                                 "more than a file and a label: add a header row naming the columns (file, label, "
                                 "...)"))  # fmt: skip
                continue
            notes.append(f"{where}: no header row; column A read as files, column B as labels")
        cells: _CellNotes | None = None

        def cell_note(row: int, col: int, _name=sh.name) -> str | None:
            nonlocal cells
            if cells is None:
                cells = _CellNotes(path, _name)
            return cells(row, col)

        def cell_error(row: int, col: int, _name=sh.name) -> str | None:
            nonlocal cells
            if cells is None:
                cells = _CellNotes(path, _name)
            return cells.errors.get((row, col))

        part = _parse_grid(grid, head, sheet=sh.name, where=where, problems=problems, order=order, engine=engine,
                           split_column=split_column, cell_note=cell_note, notes=notes,
                           cell_error=cell_error, split_name=split_of[sh.name])  # fmt: skip
        if recalculated is None:
            recalculated = _recalculated(path)
        if recalculated:  # labels of XlsxWriter's formulas read as its placeholder 0, one class of every row
            problems += _placeholder_problems(path, sh.name, head, where, order)
        if not include_hidden:  # rows hidden in Excel (a filter, by hand): samples or not? asked, not guessed
            marked = _hidden_rows(path, sh.name)
            hidden_rows = [r for r in marked
                           if head.at + 1 < r <= len(grid) and any(not _blank(v) for v in grid[r - 1])]  # fmt: skip
            if not hidden_rows and 0 in marked:  # a row tag marked hidden without its number (which OOXML allows)
                problems.append(((order, 0), f"{where}: rows are hidden in Excel (by a filter, or by hand), one "
                                 "marked without its number: samples, or rows left out? pass include_hidden=True "
                                 "(--include-hidden) to read them, or unhide them in Excel and save"))  # fmt: skip
            if hidden_rows:
                it, are = ("them", "are") if len(hidden_rows) > 1 else ("it", "is")
                problems.append(((order, hidden_rows[0]), f"{where}: {_rows_text(hidden_rows)} {are} hidden in Excel "
                                 "(by a filter, or by hand): samples, or rows left out? pass include_hidden=True "
                                 f"(--include-hidden) to read {it}, or delete {it} from the sheet"))  # fmt: skip
        if _declared_rows(path, sh.name) > len(grid):  # trailing rows read as empty: formulas without values?
            cell_note(0, 0)  # loads the sheet's formula cells
            for row in sorted({r for r in cells.rows() if r > len(grid)}):
                note = cell_note(row, head.fcol) or (cell_note(row, head.lcol) if head.lcol is not None else None)
                if note:
                    problems.append(((order, row), f"{where}, row {row}: {note}"))
        if not len(part.files) and not any(p[0][0] == order for p in problems):
            problems.append(((order, head.at + 1), f"{where}: an empty split (a header at row {head.at + 1}, "
                             "no rows under it)"))  # fmt: skip
        part.order = order
        parts.append(part)
    # the same sheets read whatever split= asks for, so every split gets one class map: a sheet is a split when
    # a row names an image file, when its name is a split's (train, val, 验证...) and no sheet has a split
    # column, or when sheets= names it
    by_column = any(p.splits != [p.sheet] and p.splits for p in parts)
    if by_column and sheets is None and wanted == [split]:
        # split= picked the sheet of that name, but the sheets here carry a split column, and a sheet with one is
        # no split of its own: the split is that column's value, in every sheet (as the same rows in one CSV)
        problems.clear()
        notes.clear()
        return _read_workbook(path, sheets=None, split=None, include_hidden=include_hidden, file_column=file_column,
                              label_column=label_column, split_column=split_column, engine=engine, problems=problems,
                              notes=notes)  # fmt: skip
    named = [
        any(_looks_like_file(f) for f in p.files)
        or (sheets is not None and p.sheet in wanted)
        or (not by_column and _norm(p.sheet) in _SPLIT_NAMES)
        for p in parts
    ]
    if any(named):  # a notes sheet with a 文件名 row (the columns explained) is no split: no row names an image
        notes_read = [p.sheet for p, has in zip(parts, named) if not has and len(p.files)]
        if sheets is None and split in notes_read:
            # split= picked a sheet of that name, and it is notes: the split is a split column's value, if any
            problems.clear()
            notes.clear()
            return _read_workbook(path, sheets=None, split=None, include_hidden=include_hidden,
                                  file_column=file_column, label_column=label_column, split_column=split_column,
                                  engine=engine, problems=problems, notes=notes)  # fmt: skip
        # a header alone, on a sheet not named as a split (说明: a title, then 文件名 | 图片的名字): notes as well
        bare = [not has and not len(p.files) and p.chosen and not by_column and sheets is None for p, has in
                zip(parts, named)]  # fmt: skip
        for p, has, empty in zip(parts, named, bare):
            if not has and len(p.files):
                if p.chosen:
                    notes.append(f"{path}: sheet {p.sheet!r} skipped (no row names an image file, as the other "
                                 "sheets' rows do: notes?)")  # fmt: skip
                problems[:] = [q for q in problems if q[0][0] != p.order]
            elif empty:
                notes.append(f"{path}: sheet {p.sheet!r} skipped (a header and no rows under it, on a sheet not "
                             "named as a split, beside sheets whose rows name images: notes?)")  # fmt: skip
                problems[:] = [q for q in problems if q[0][0] != p.order]
        parts = [p for p, has, empty in zip(parts, named, bare) if has or (not len(p.files) and not empty)]
    for p in parts:  # a split's sheet (not notes, not a lookup table): its labels are in the class map
        if unsaved.get(p.order) and (_norm(p.sheet) in _SPLIT_NAMES or any(_looks_like_file(f) for f in p.files)):
            problems += unsaved[p.order]
    if hidden_left and not any(p.chosen for p in parts) and not problems and wanted is None:
        # nothing visible to read: the hidden sheets are the tables (the note's "would add classes" has no base)
        problems.append(((0, 0), f"{path}: no visible sheet holds a table of files and labels; the hidden sheet"
                         f"{'s' if len(hidden_left) > 1 else ''} {', '.join(map(repr, hidden_left))} may "
                         "(include_hidden=True, --include-hidden, reads them)"))  # fmt: skip
        notes[:] = [n for n in notes if not n.startswith(f"{path}: sheet ")]  # 'notes' skipped: said above
    elif hidden_left:
        extra = _hidden_classes(wb, engine, path, hidden_left, parts, file_column, label_column, split_column)
        notes.append(f"{path}: hidden sheet{'s' if len(hidden_left) > 1 else ''} "
                     f"{', '.join(map(repr, hidden_left))} not read "
                     "(include_hidden=True, --include-hidden, reads them)"
                     + (f"; read, they would add the class{'es' * (len(extra) > 1)} "
                        f"{', '.join(map(repr, extra[:5]))}{', ...' if len(extra) > 5 else ''} and every index after "
                        "it would move: read every split of this workbook with include_hidden or every one without"
                        if extra else ""))  # fmt: skip
    elif include_hidden:  # hidden sheets read: the classes they add move indices against a read without them
        hidden = {s.name for s in meta if not s.visible and s.worksheet}
        shown = [p for p in parts if p.sheet not in hidden]
        extra = _added_classes([p for p in parts if p.sheet in hidden], shown)
        if extra and any(len(p.files) for p in shown):  # (else nothing is read without them: no indices to move)
            notes.append(f"{path}: the hidden sheets read (include_hidden) add the class{'es' * (len(extra) > 1)} "
                         f"{', '.join(map(repr, extra[:5]))}{', ...' if len(extra) > 5 else ''}, which moves the "
                         "class indices against a read without include_hidden: read every split alike")  # fmt: skip
    if split_missing and not split_found:
        raise ColumnNotFound(split_missing[0])
    if named_missing and not any(p.chosen for p in parts):
        raise ColumnNotFound(named_missing[0] + (f" (nor any other sheet: {len(named_missing) - 1} more)"
                                                 if len(named_missing) > 1 else ""))  # fmt: skip
    if not any(p.chosen for p in parts) and not problems:
        grids = []
        for sh in meta:
            if sh.worksheet and (sh.visible or include_hidden) and (wanted is None or sh.name in wanted):
                grids.append((sh.name, _sheet_grid(wb, sh.name, engine, path)))
        if grids:
            missing = (_no_header_problem(grids[0][1], f"{path}, sheet {grids[0][0]!r}", file_column, label_column)
                       + (f" (and no other sheet has one either: {', '.join(repr(n) for n, _ in grids[1:])})"
                          if len(grids) > 1 else ""))  # fmt: skip
            if file_column is not None or label_column is not None:
                raise ColumnNotFound(missing)
            problems.append(((0, 0), missing))
        else:
            problems.append(
                ((0, 0), f"{path}: no visible sheet to read (include_hidden=True, --include-hidden, reads hidden ones)")
            )
    return parts


# ---------------------------------------------------------------------------------------------
# reading: text tables and lists


def _text_kind(path: Path, text: str, sep: str | None, file_column: str | None) -> tuple[str, str]:
    """("table", delimiter) or ("list", "") from the suffix and the first meaningful line."""
    first = ""
    for line in text[:65536].split("\n"):
        s = line.strip()
        if s and not s.startswith("#"):
            first = s
            break
        if s:
            break
    suffix = path.suffix.lower()
    keys = {_norm(file_column)} if file_column is not None else {_norm(k) for k in FILE_COLUMNS}
    if sep is not None:
        return ("list", "") if sep in (" ", "whitespace") else ("table", sep)
    if suffix == ".tsv":
        return "table", "\t"
    if suffix == ".csv":
        for delim in ("\t", ";"):  # Excel's "Unicode text" saved as .csv; a locale's semicolons
            if "," not in first and delim in first:
                return "table", delim
        return "table", ","
    # .txt/.lst: Excel's Unicode text is a tab-separated table with a header, maybe under title rows (a title
    # line alone, "2024年 标注结果", read as the first line of a path-label list made the header a sample too)
    # among the first 50 lines, as a table's header is looked for, above the first naming an image file (a line
    # 'img,30.jpg cat' of a path-label list is no header)
    heads = [s for s in (line.strip() for line in text[:65536].split("\n")) if s and not s.startswith("#")][:50]
    for line in heads:
        if any(_looks_like_file(w) for w in re.split(r"[\s,;]+", line)):
            break
        for delim in ("\t", ",", ";"):
            if delim in line and any(_norm(v) in keys for v in line.split(delim)):
                return "table", delim
    return "list", ""


_LINE_BREAKS = (b"\xc2\x85", b"\xe2\x80\xa8", b"\xe2\x80\xa9")  # U+0085, U+2028, U+2029 in UTF-8


def _quoted_spans(buf: bytes, delim: str) -> list[tuple[int, int]]:
    """The (start, end) byte spans of ``buf`` inside quoted fields, as Python's CSV reader finds them: a quote
    opens a field only at its start (after the delimiter or a line end); inside, ``""`` is a quote and a quote
    before the delimiter, a line end or the end closes it; a quote elsewhere in a field is a character."""
    spans = []
    quotes = np.flatnonzero(np.frombuffer(buf, np.uint8) == 0x22).tolist()
    k, n, sep = 0, len(buf), delim.encode()
    while k < len(quotes):
        q = quotes[k]
        if q and buf[q - 1 : q] not in (sep, b"\n", b"\r"):  # inside an unquoted field: a character
            k += 1
            continue
        k += 1
        while k < len(quotes):  # the closing quote: not doubled
            c = quotes[k]
            if c + 1 < n and buf[c + 1 : c + 2] == b'"':
                k += 2
                continue
            break
        end = quotes[k] if k < len(quotes) else n
        spans.append((q, end))
        k += 1
    return spans


_NOT_ODD = bytes(c for c in range(256) if (0x20 <= c != 0x7F) or c in (0x09, 0x0A, 0x0D))  # deleted: C0 and DEL stay


def _control_characters(buf: bytes, every: bool, delim: str = ",") -> list[tuple[int, str]]:
    """Each line of the UTF-8 ``buf`` holding a carriage return inside it (before a character other than a line
    end, outside a table's quotes: a line break to the CSV reader, part of a field to the fast one), and with
    ``every`` (a 'path label' list, where the two readers split fields on them differently) any other control
    character: a C0 one but tab and line feed, DEL, or U+0085/U+2028/U+2029; as (line, "U+000C"), in line
    order; an empty list when there is none. A CR before another CR or a line end (``\\r\\r\\n``, a CRLF file
    converted twice) ends the line for both; a table's quoted note may hold a CR, and Word's soft break (U+000B),
    which both readers keep. A NUL is refused in a table too, quoted or not."""
    arr = np.frombuffer(buf, np.uint8)
    at: set[int] = set()
    if every:
        if buf.translate(None, _NOT_ODD):  # one C pass, an empty result where there is none
            odd = (arr < 0x20) & (arr != 0x09) & (arr != 0x0A) & (arr != 0x0D) | (arr == 0x7F)
            at.update(np.flatnonzero(odd).tolist())
        for mark in _LINE_BREAKS if not buf.isascii() else ():  # (multi-byte: none in ASCII text)
            if mark in buf:
                at.update(m.start() for m in re.finditer(re.escape(mark), buf))
    elif b"\x00" in buf:  # a table's NUL, quoted or not: no file name or label holds one ('c\x00at' was a class)
        at.update(np.flatnonzero(arr == 0).tolist())
    cr = buf.count(b"\r")
    if cr and cr != buf.count(b"\r\n"):
        inside = [m.start() for m in re.finditer(rb"\r[ \t]*(?![\r\n \t]|$)", buf)]
        if inside and not every:  # a table: a CR in a quoted field is the field's, as both readers keep it
            spans = _quoted_spans(buf, delim)
            starts = np.asarray([a for a, _ in spans], np.int64)
            ends = np.asarray([b for _, b in spans], np.int64)

            def quoted(pos: np.ndarray) -> np.ndarray:
                k = np.searchsorted(starts, pos, side="right") - 1
                return (k >= 0) & (pos < ends[np.maximum(k, 0)]) if len(starts) else np.zeros(len(pos), bool)

            inside = [p for p, q in zip(inside, quoted(np.asarray(inside, np.int64))) if not q]
            lf = np.flatnonzero(arr == 0x0A)
            if not (~quoted(lf)).any():  # CR line ends (Excel's "CSV (Macintosh)"), an LF only in quotes
                inside = []
        at.update(inside)
    if not at:
        return []
    found: dict[int, str] = {}
    positions = sorted(at)
    lines = np.searchsorted(np.flatnonzero(arr == 0x0A), positions) + 1
    for pos, line in zip(positions, lines.tolist()):
        char = buf[pos : pos + 3].decode("utf-8", "replace")[0] if buf[pos] >= 0x80 else chr(buf[pos])
        found.setdefault(line, f"U+{ord(char):04X}")
    return sorted(found.items())


def _read_text(path: Path, raw: bytes, *, encoding: str | None, sep: str | None, file_column: str | None,
               label_column: str | None, split_column: str | None, problems: list,
               notes: list) -> tuple[list[_Part], str]:  # fmt: skip
    text, enc = _decode_text(raw, path, encoding)
    if enc in ("utf-8", "ascii"):
        buf = raw
    elif enc == "utf-8-sig":
        buf = raw[3:]
    else:
        buf = text.encode("utf-8", "surrogateescape")
    if b"\n\xef\xbb\xbf" in buf:  # a byte-order mark starting a line: files saved with one, joined (copy /b a+b)
        line = buf.count(b"\n", 0, buf.index(b"\n\xef\xbb\xbf")) + 2
        notes.append(f"{path}, line {line}: a byte-order mark starts the line (files joined?): read without it")
        buf = buf.replace(b"\n\xef\xbb\xbf", b"\n")
        text = text.replace("\n\ufeff", "\n") if text is not None else None
    if b"\r" in buf and b"\n" not in buf:  # a classic Mac file: lines end in CR alone
        buf = buf.replace(b"\r", b"\n")
        text = text.replace("\r", "\n") if text is not None else None
    # DOS's end-of-file mark, after the last line (and a line end); the tail first (rstrip copies what it keeps)
    tail = buf[-4096:].rstrip(b"\r\n")
    if (tail if tail or len(buf) <= 4096 else buf.rstrip(b"\r\n")).endswith(b"\x1a"):
        buf = buf.rstrip(b"\r\n").rstrip(b"\x1a")
        text = text.rstrip("\r\n").rstrip("\x1a") if text is not None else None
    kind, delim = _text_kind(path, text if text is not None else buf[:65536].decode("ascii"), sep, file_column)
    stray = _control_characters(buf, every=kind == "list", delim=delim)
    if stray:  # the fast and the Python readers part such a line differently: neither reading is sure
        for line, char in stray[:MAX_LISTED]:
            if char == "U+000D":
                what = ("a carriage return (U+000D) inside the line, not at its end, which one reader takes for a "
                        "line break and another for part of a name or label; remove it")  # fmt: skip
            elif char == "U+0000":
                what = "a NUL character (U+0000) in the line, which no file name, label or note holds; remove it"
            else:
                what = (f"a control character ({char}) in the line, which no file name or label holds and readers "
                        "split lines on differently; remove it")  # fmt: skip
            problems.append(((0, line), f"{path}, line {line}: {what}"))
        if len(stray) > MAX_LISTED:
            problems.append(((0, stray[MAX_LISTED][0]), f"{path}: {len(stray) - MAX_LISTED} more lines with a "
                             "control character"))  # fmt: skip
        return [_part_from_lists("", [], [], [], [], "", "")], enc
    if text is not None and text.startswith("\ufeff"):
        text = text[1:]
    if kind == "list" and (im2rec := _im2rec_lines(path, buf, notes)) is not None:
        buf, text = im2rec, None if text is None else im2rec.decode("utf-8", "surrogateescape")
    if kind == "list":
        fkeys = {_norm(file_column)} if file_column is not None else {_norm(k) for k in FILE_COLUMNS}
        # the label's name any column naming the class may have (file class_id); any at all under the file column
        # named (--file-column file over 'file 品种')
        lkeys = {_norm(label_column)} if label_column is not None else _RIVAL_COLUMNS
        any_label = file_column is not None and label_column is None
        cols = parse_list(buf, text, lambda row: _norm(row[0]) in fkeys and (any_label or _norm(row[-1]) in lkeys))
        if split_column is not None:
            raise ColumnNotFound(f"{path}: a list of 'path label' lines has no split column ({split_column!r} "
                                 "named); its split is the file itself")  # fmt: skip
        part = _list_part(path, cols, problems, notes, file_column, label_column)
        if b"#" in buf:
            _commented_images(path, buf, notes)
        return [part], enc
    keys = {_norm(file_column)} if file_column is not None else {_norm(k) for k in FILE_COLUMNS}
    top = _first_rows(buf, text, delim)  # the header's rows above and below it, where a group title row may be
    pick = _header_row(top, keys, label_column)
    unnamed = _unnamed_file_header(top, label_column, split_column) if pick is None and file_column is None else None
    if unnamed is not None:  # the files under an empty header cell (pandas' index): that row is the header
        chosen = top[unnamed[0]]
        pick = unnamed[0]

        def is_header(row: list[str]) -> bool:
            return row == chosen
    elif pick is not None and pick != next(r for r, row in enumerate(top) if _header_index(row, keys)):
        chosen = top[pick]  # a header below the first row naming a file column, which names no label column

        def is_header(row: list[str]) -> bool:
            return row == chosen
    else:

        def is_header(row: list[str]) -> bool:
            return _header_index(row, keys)

    cols = parse_delimited(buf, text, delim, is_header, _heading)
    around = None
    if pick is not None and cols.header in (top[pick], ["", *top[pick]]):
        # (the header as read may have gained the row names' cell it left out: '' before 'label')
        around = [*top[:pick], cols.header, *top[pick + 1 :]]
    return [_table_part(path, cols, delim, problems, notes, file_column, label_column, split_column, around)], enc


_IM2REC_LINE = re.compile(rb"[ \t]*(\d+)\t((?:[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?\t)+)([^\t\r\n]*?)[ \t]*\r?")


def _im2rec_lines(path: Path, buf: bytes, notes: list) -> bytes | None:
    """MXNet's ``im2rec`` lists (``.lst``: ``index<TAB>label<TAB>path`` a line, the label written as a float,
    ``0.000000``) as ``path<TAB>label`` lines, the line numbers kept; None for any other list. Every sample
    line must have that shape, and one at least name an image; more than one label a line (multi-label) is
    refused."""
    first, pos = None, 0
    while pos <= len(buf):  # the first sample line, found without splitting the whole file
        end = buf.find(b"\n", pos)
        end = len(buf) if end < 0 else end
        if buf[pos:end].strip() and not buf[pos:end].strip().startswith(b"#"):
            first = buf[pos:end]
            break
        pos = end + 1
    if first is not None and _IM2REC_LINE.fullmatch(first) is None:
        return None  # its first sample line has another shape: no such list (every line is split only for one)
    out: list[bytes] = []
    multi = None  # the first line with more than one label
    named = False  # a path that names an image (an odd one, 'dog/2', is then a path all the same)
    for line in buf.split(b"\n"):
        s = line.strip()
        if not s or s.startswith(b"#"):
            out.append(line)
            continue
        m = _IM2REC_LINE.fullmatch(line)
        if m is None or not m.group(3).strip():
            return None
        named = named or _looks_like_file(m.group(3).decode("utf-8", "surrogateescape"))
        labels = m.group(2).split(b"\t")[:-1]
        if len(labels) > 1 and multi is None:
            multi = (len(out) + 1, s, len(labels))
        out.append(m.group(3) + b"\t" + labels[0])
    if not named:
        return None
    if multi is not None:
        line, s, n = multi
        raise LabelError(f"{path}, line {line}: {s.decode('utf-8', 'replace')!r}: an MXNet im2rec line with {n} "
                         "labels (multi-label); datakit reads one label a sample")  # fmt: skip
    notes.append(f"{path}: read as MXNet im2rec lines, 'index<TAB>label<TAB>path' (the index left out)")
    return b"\n".join(out)


def _first_rows(buf: bytes, text: str | None, delim: str, size: int = 1 << 16) -> list[list[str]]:
    """The first 100 rows of a text table with a cell (cells stripped, as the parser gives them), read from its
    first ``size`` characters."""
    start = text[:size] if text is not None else buf[:size].decode("ascii", "replace")
    if len(start) == size:
        start = start[: start.rfind("\n") + 1] or start  # whole lines only
    rows = []
    for rec in csv.reader(io.StringIO(start, newline=""), delimiter=delim):
        cells = [c.strip() for c in rec]
        if any(cells):
            rows.append(cells)
            if len(rows) == 100:
                break
    return rows


_SUFFIX_ALTERNATIVES = "|".join(s.lstrip(".") for s in IMAGE_SUFFIXES)
_IMAGE_THEN_WORDS = re.compile(rf"(.*?\.(?:{_SUFFIX_ALTERNATIVES})) +\S", re.I)
_COMMENTED_IMAGE = re.compile(rf"^[ \t]*(#[^\n]*?\.(?:{_SUFFIX_ALTERNATIVES}))[ \t]+\S[^\n]*$".encode(), re.I | re.M)


def _commented_images(path: Path, buf: bytes, notes: list) -> None:
    """A note for ``#`` lines of a list that read as samples (``#1.jpg 1``): a comment, or a file
    whose name starts with ``#``, which only ``./#1.jpg`` tells apart."""
    found = [m for m in _COMMENTED_IMAGE.finditer(buf) if not m.group(1).startswith(b"# ")]
    if found:
        line = buf.count(b"\n", 0, found[0].start()) + 1
        shown = found[0].group(0).strip().decode("utf-8", "replace")
        more = f" (and {len(found) - 1} more lines like it)" if len(found) > 1 else ""
        notes.append(f"{path}, line {line}: {shown!r} starts with '#' and is skipped as a comment{more}; a file "
                     "whose name starts with '#' is written './#...'")  # fmt: skip


def _spaced_labels(path: Path, part: _Part, problems: list, spaced: bool) -> None:
    """A problem for each row of a ``path label`` list whose path is an image name and more words
    (``1.jpg black cat`` read as the file '1.jpg black' labelled 'cat'): a label with a space in it.
    Names with no space cost one look at the bytes."""
    files = part.files
    if not spaced:
        return
    spaced = np.flatnonzero(files.data == 32)
    for i in np.unique(np.searchsorted(files.offsets, spaced, side="right") - 1).tolist():
        name = files[i]
        if not _looks_like_file(name) and _IMAGE_THEN_WORDS.match(name):
            line, label = int(part.rows[i]), part.labels[part.label_codes[i]]
            problems.append(((0, line), f"{path}, line {line}: '{name} {label}' reads as the file {name!r} labelled "
                             f"{label!r}: a label with a space in it? The label is the last field of a 'path label' "
                             "line; part the fields with a tab, or write a CSV"))  # fmt: skip


def _list_part(path: Path, cols: Columns, problems: list, notes: list, file_column: str | None,
               label_column: str | None) -> _Part:  # fmt: skip
    for line, what in cols.bad:
        problems.append(((0, line), f"{path}, line {line}: {what}"))
    if cols.unicode_separators:
        notes.append(_unicode_separator_note(path, cols.unicode_separators))
    if cols.header is not None:
        fname, lname = _text(cols.header[0]), _text(cols.header[-1])
    else:
        fname, lname = "", ""
        (data, offsets), _ = cols.strings(0)
        names = StringArray.from_buffer(data, offsets)
        if (
            len(names) > 1
            and not _looks_like_file(names[0])
            and _looks_like_file(names[1])
            and not _IMAGE_THEN_WORDS.match(names[0])
        ):  # '0.jpg black' of '0.jpg black cat': a spaced label
            # a header whose names are not known ones (Excel's Unicode text: 图片路径<TAB>类别) is no sample
            labels, codes, _ = cols.coded(1)
            shown = ", ".join(repr(v) for v in (names[0], labels[codes[0]] if codes[0] >= 0 else "") if v)
            named = [(k, v) for k, v in (("file", file_column), ("label", label_column)) if v is not None]
            if named:  # the caller named a column this header does not have
                raise ColumnNotFound(f"{path}, line {int(cols.lines[0])}: no {named[0][0]} column named "
                                     f"{named[0][1]!r} among {shown}")  # fmt: skip
            problems.append(((0, int(cols.lines[0])), f"{path}, line {int(cols.lines[0])}: {shown} looks like a "
                             "header (the lines under it name image files), but names no known file column; name "
                             "it with file_column= (--file-column)"))  # fmt: skip
            return _part_from_lists("", [], [], [], [], "", "")
    named = [(k, v) for k, v in (("file", file_column), ("label", label_column)) if v is not None]
    if cols.header is None and named:  # a headerless list: the columns are where they are, nameless
        raise ColumnNotFound(f"{path}: no header line, so no {named[0][0]} column named {named[0][1]!r}; its lines "
                             "are 'path label'")  # fmt: skip
    part = _columns_part(cols, 0, 1, None, "", fname or file_column or "path", lname or label_column or "label",
                         path, problems, notes)  # fmt: skip
    part.unread = _unread(cols.bad)
    spaced = holds(part.files.data, b" ")  # (names with a space: what the two checks below look at)
    if spaced and (numbered := _numbered_fields(path, part)) is not None:
        problems.append(numbered)
        return _part_from_lists("", [], [], [], [], "", "")
    _spaced_labels(path, part, problems, spaced)
    _unlabelled_spaced_files(path, part, problems)
    return part


_INTEGER = re.compile(r"-?\d+")
_NOT_NUMBERED = re.compile(rb"^(?!\S+(?:[ \t]+-?\d+)+$)", re.M)  # a line that is not a name and numbers


def _numbered_fields(path: Path, part: _Part) -> tuple[tuple[int, int], str] | None:
    """The problem of a list every line of which is a name and two or more integers, however spaced (Oxford-IIIT
    Pet's ``Abyssinian_100 1 1 1``: image, class id, species, breed id; CelebA's ``img 1 -1``), which would read
    as the file 'Abyssinian_100 1 1' labelled with the last number; None for any other list. Called for names with
    a space; labels that are no integers cost one look at the distinct labels, the rest one regular-expression
    pass over the names."""
    files = part.files
    if not len(files) or not all(_INTEGER.fullmatch(str(v)) for v in part.labels):
        return None
    names = np.insert(files.data, files.offsets[1:-1], 10).tobytes()  # one a line (no name holds a newline)
    if _NOT_NUMBERED.search(names) is not None:
        return None
    line, name, label = int(part.rows[0]), files[0], part.labels[part.label_codes[0]]
    fields = len(name.split()) + 1
    return ((0, line), f"{path}, line {line}: '{name} {label}' is a name and {fields - 1} numbers, as is every line, "
            "where a 'path label' list has a name and one label: which number is the label is not known (Oxford-IIIT "
            "Pet's list.txt: image, class id, species, breed id); write the lines as 'path label' with the one meant, "
            "or as a CSV whose header names its columns")  # fmt: skip


def _unlabelled_spaced_files(path: Path, part: _Part, problems: list) -> None:
    """A problem for each line of a ``path label`` list that is one file name with a space in it and no label
    (``IMG (1).png``, as Windows and phones name copies, read as the file 'IMG' labelled '(1).png'): a line
    without its label, which would otherwise be a class of its own. Only labels that are image names are looked at,
    in a list whose other labels are not (every label a file name: a 'label path' list, said as such elsewhere)."""
    if all(_looks_like_file(v) for v in part.labels):
        return
    for code, label in enumerate(part.labels):
        if not _looks_like_file(label):
            continue
        for i in np.flatnonzero(part.label_codes == code).tolist():
            name = part.files[i]
            if not _looks_like_file(name):
                line = int(part.rows[i])
                problems.append(((0, line), f"{path}, line {line}: '{name} {label}' has no label (expected 'path "
                                 f"label'): it reads as the file {name!r} labelled {label!r}, a file name with a "
                                 "space in it and no label after it"))  # fmt: skip


def _unread(bad: list[tuple[int, str]]) -> int:
    """How many of the lines refused whole may hold a label: not those with none (``b.png`` alone, a blank
    field), which hide no label value from the integer range."""
    return sum(1 for _, what in bad if "has no label" not in what and "got 2 fields" not in what)


def _unicode_separator_note(path: Path, found: list[tuple[int, str]]) -> str:
    """The note for list lines whose path and label a Unicode space parts (a full-width space, as a Chinese
    input method types it): read as a space, as the reader of the list may not."""
    spaces = dict.fromkeys(c for _, wide in found for c in wide)
    what = " or ".join(
        "a full-width space (U+3000, as a Chinese input method types it)" if c == "\u3000"
        else f"{_article(unicodedata.name(c, 'space').lower())} (U+{ord(c):04X})"
        for c in spaces
    )  # fmt: skip
    n = len(found)
    shown = ", ".join(f"line {line}" for line, _ in found[:5]) + (", ..." if n > 5 else "")
    lines, them = (f"{n} lines separate", "them") if n > 1 else ("1 line separates", "it")
    return (f"{path}: {lines} the path and the label by {what} ({shown}): read as a space; tools that split lines "
            f"on ASCII spaces (PaddleClas, mmpretrain) will not read {them}")  # fmt: skip


def _article(name: str) -> str:
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"


def _table_part(path: Path, cols: Columns, delim: str, problems: list, notes: list, file_column: str | None,
                label_column: str | None, split_column: str | None,
                around: list[list[str]] | None = None) -> _Part:  # fmt: skip
    """``around``: the table's first rows, the header among them, where it was read from them (the rows above and
    below it tell which column holds the labels where the header does not)."""
    for line, what in cols.bad:
        problems.append(((0, line), f"{path}, line {line}: {what}"))
    header_row = cols.header
    empty = _part_from_lists("", [], [], [], [], "", "")
    if header_row is None:
        grid = [cols.first_row] if cols.first_row is not None else []
        if not grid and cols.bad:  # every line was a problem of its own (a quote opened on the first, never closed)
            return empty
        head = _locate_header(grid, file_column, label_column, split_column, str(path))
        if head is None or head.at >= 0:
            if file_column is not None or label_column is not None:
                raise ColumnNotFound(_no_header_problem(grid, str(path), file_column, label_column))
            problems.append(((0, 0), _no_header_problem(grid, str(path), file_column)))
            return empty
        if split_column is not None or file_column is not None or label_column is not None:
            named = next(f"{k} column named {v!r}" for k, v in (("split", split_column), ("file", file_column),
                                                                ("label", label_column)) if v is not None)  # fmt: skip
            raise ColumnNotFound(f"{path}: no header line, so no {named}; its columns are file, label")
        row = cols.first_row or []
        if sum(not _blank(v) for v in row) > 2:  # which of them is the label is a guess: the second taken, the rest
            # dropped unsaid
            line = int(cols.lines[0]) if len(cols.lines) else 1
            shown = ", ".join(repr(_text(v)) for v in row if not _blank(v))
            problems.append(((0, line), f"{path}, line {line}: no header line, and {shown} are more than a file "
                             "and a label: add a header line naming the columns (file,label,...)"))  # fmt: skip
            return empty
        notes.append(f"{path}: no header line; the first column read as files, the second as labels")
        return _columns_part(cols, 0, 1, None, "", "", "", path, problems, notes)
    head = _locate_header(around or [header_row], file_column, label_column, split_column, str(path))
    assert head is not None
    if head.lcol is None:
        shown = ", ".join(repr(_text(h)) for h in header_row if not _blank(h))
        if label_column:
            raise ColumnNotFound(f"{path}, line {cols.header_line}: no label column named {label_column!r} among "
                                 f"{shown}")  # fmt: skip
        why = f": {head.why}" if head.why else "; name it with label_column= (--label-column)"
        hot = _one_hot_columns(cols, header_row, head.fcol)
        if hot and not head.why:  # (naming one of them read 'dog' or not: a yes/no task, without a word)
            why = (f": {', '.join(map(repr, hot))} hold 0 and 1, a one-hot (multi-label) table; datakit reads one "
                   "class per image: write each row's class name in one column (label), or keep the table for a "
                   "multi-label loader; if a column holds the class names, name it with label_column= "
                   "(--label-column)")  # fmt: skip
        problems.append(((0, cols.header_line), f"{path}, line {cols.header_line}: no label column found among "
                         f"{shown}{why}"))  # fmt: skip
        return empty
    if split_column is not None and head.scol is None:
        shown = ", ".join(repr(_text(h)) for h in header_row if not _blank(h))
        raise ColumnNotFound(f"{path}, line {cols.header_line}: no split column named {split_column!r} among {shown}")
    moved, named = _short_rows(path, cols, delim, head, problems) or (None, [])
    part = _columns_part(
        cols, head.fcol, head.lcol, head.scol, "", head.fname, head.lname, path, problems, notes, head.rivals,
        head.file_rivals, moved,
    )  # fmt: skip
    part.unread = _unread(cols.bad) + (int(moved.sum()) if moved is not None else 0)
    part.dropped_files = list(dict.fromkeys([*part.dropped_files, *named]))
    return part


def _short_rows(path: Path, cols: Columns, delim: str, head, problems: list) -> tuple[np.ndarray, list[str]] | None:
    """The rows too short for the header whose fields moved: a value under one column that the other rows hold only
    under a later column read (``2.png,val`` under ``file,label,split`` where ``val`` is a split and no label: the
    label left out, ``val`` read as a class). A problem for each, the mask of them for :func:`_columns_part`, and
    the image names they hold (their files are in the table, without a label). Other short rows are read as
    written, their last fields blank: old Excel drops the empty fields' delimiters after a sheet's first rows,
    editors trim trailing tabs."""
    if not cols.short or cols._rows is None:
        return None
    header = cols.header or []
    width = len(header)
    read = sorted(c for c in (head.fcol, head.lcol, head.scol) if c is not None and c < width)
    shorts = {row for row, _, _ in cols.short}
    values = {c: {r[c] for k, r in enumerate(cols._rows) if k not in shorts and c < len(r) and r[c]} for c in read}
    mask = np.zeros(len(cols._rows), dtype=bool)
    named: list[str] = []
    for row, n, shown in cols.short:
        fields = cols._rows[row]
        if n > read[-1]:  # every column read is there: short of a note's alone
            continue
        moved = next(((c, later) for c in read if c < n and fields[c] and fields[c] not in values[c]
                      for later in read if later > c and fields[c] in values[later]), None)  # fmt: skip
        if moved is None:
            continue
        c, later = moved
        line = int(cols.lines[row])
        fields_text = f"{n} field{'s' * (n != 1)}"
        problems.append(((0, line), f"{path}, line {line}: {fields_text} where the header has {width} ({shown}): "
                         f"{fields[c]!r} stands under {_text(header[c])!r}, and the other rows hold it under "
                         f"{_text(header[later])!r} only: a field left out? Write every field, an empty one as nothing "
                         f"between two {delim!r}"))  # fmt: skip
        mask[row] = True
        named += [f for f in fields if _looks_like_file(f)]  # its file, wherever the fields moved it
    return (mask, named) if mask.any() else None


_EXCEL_TEXT = re.compile(r'="((?:[^"]|"")*)"')


def _excel_texts(values: list, codes: np.ndarray) -> tuple[list, np.ndarray, int]:
    """The coded column with each ="TEXT" value read as TEXT (merged with a plain TEXT of the column), and how
    many rows held one."""
    out: list = []
    where: dict[str, int] = {}
    remap = np.empty(len(values) + 1, dtype=codes.dtype)
    remap[-1] = -1  # a missing cell stays missing
    wrapped = np.zeros(len(values) + 1, dtype=bool)
    for k, v in enumerate(values):
        m = _EXCEL_TEXT.fullmatch(str(v))
        text = m.group(1).replace('""', '"').strip() if m else v
        wrapped[k] = m is not None
        remap[k] = where.setdefault(text, len(out))
        if remap[k] == len(out):
            out.append(text)
    return out, remap[codes], int(wrapped[codes].sum())


def _columns_part(cols: Columns, fcol: int, lcol: int, scol: int | None, sheet: str, fname: str, lname: str,
                  path: Path, problems: list, notes: list, rivals: Sequence[tuple[int, str]] = (),
                  file_rivals: Sequence[tuple[int, str]] = (), refused: np.ndarray | None = None) -> _Part:  # fmt: skip
    """``refused``: rows already a problem of their own (their fields moved), whose files are in the table without
    a label."""
    (data, offsets), fvalid = cols.strings(fcol)
    files = StringArray.from_buffer(data, offsets)
    for col, name in file_rivals:  # another column naming the image: the same files, or refused
        (rdata, roffsets), rvalid = cols.strings(col)
        theirs = StringArray.from_buffer(rdata, roffsets)
        both = ((i, files[i], theirs[i]) for i in np.flatnonzero(fvalid & rvalid).tolist()
                if _looks_like_file(files[i]) and _looks_like_file(theirs[i]))  # fmt: skip
        verdict, at = _rival_files(both)
        if verdict in ("differ", "deeper"):
            k, a, b = at  # type: ignore[misc]
            line = f"line {int(cols.lines[k])}"
            if verdict == "differ":
                problems.append(((0, int(cols.lines[k])), _file_rival_problem(str(path), fname, fcol, name, col, line,
                                                                              a, b)))  # fmt: skip
            else:  # said, not chosen: which one the disk holds is not known here
                notes.append(_rival_note(str(path), fname, name, line, a, b))
    labels, lcodes, lvalid = cols.coded(lcol)
    labels = list(labels)
    unseen = [k for k, v in enumerate(labels) if _blank(str(v))]  # a zero-width space alone: empty, as it looks
    if unseen:
        lvalid = lvalid & ~np.isin(lcodes, unseen)
    lines = cols.lines
    if any(_EXCEL_TEXT.fullmatch(str(v)) for v in labels):  # ="001": Excel's text formula, 001 in Excel and .xlsx
        labels, lcodes, count = _excel_texts(labels, lcodes)
        notes.append(f'{path}: {count} label{"s" * (count > 1)} written as ="..." (the text formula Excel keeps '
                     "text with) read as the text inside, as Excel shows them")  # fmt: skip
    marked = [k for k, v in enumerate(labels) if _not_a_label(str(v))]
    listed = np.zeros(len(lines), dtype=bool)  # files whose label is a marker: in the table, without a label
    if marked:  # '#N/A' or 'nan' where a label should be: the cell was empty or an error where it was made
        hit = np.isin(lcodes, marked) & lvalid
        listed = hit & fvalid
        for i in np.flatnonzero(listed):
            line = int(lines[i])
            problems.append(((0, line), f"{path}, line {line}: {_marker_problem(files[int(i)], labels[lcodes[i]])}"))
        lvalid = lvalid & ~hit
        fvalid = fvalid & ~hit
    if refused is not None:
        listed = listed | (refused & fvalid)
        lvalid, fvalid = lvalid & ~refused, fvalid & ~refused
    one_blank = fvalid ^ lvalid
    again: list[int] = []
    keys = _HEADING_KEYS | ({_norm(lname)} if lname else set())
    heads = [k for k, v in enumerate(labels) if fname and _norm(v) in keys]
    if heads:  # the header line again (two tables joined, pandas' to_csv(mode="a")), or another table's
        for i in np.flatnonzero(np.isin(lcodes, heads) & fvalid & lvalid):
            f, lab = files[int(i)], str(labels[lcodes[i]])
            kind = _header_again(f, lab, fname.replace("\\", "/"), lname)
            if kind == "same":
                notes.append(f"{path}, line {int(lines[i])}: the header line again (tables joined?): skipped")
            elif kind == "other":
                problems.append(((0, int(lines[i])), f"{path}, line {int(lines[i])}: {_other_header(f, lab)}"))
            if kind is not None:
                again.append(int(i))
        if again:
            fvalid, lvalid = fvalid.copy(), lvalid.copy()
            fvalid[again] = lvalid[again] = False
    for i in np.flatnonzero(one_blank):
        line = int(lines[i])
        if fvalid[i]:
            problems.append(((0, line), f"{path}, line {line}: file {files[int(i)]!r} has no label"))
        else:
            problems.append(((0, line), f"{path}, line {line}: label {labels[lcodes[i]]!r} has no file name"))
    keep = fvalid & lvalid
    named = [files[int(i)] for i in np.flatnonzero((fvalid | listed) & ~keep)]
    pairs: dict[str, set[tuple[str, str]]] = {}
    for col, name in rivals:
        rvals, rcodes, rvalid = cols.coded(col)
        both = np.unique(np.stack([lcodes[keep & rvalid], rcodes[keep & rvalid]]), axis=1)
        pairs[name] = {(str(labels[a]), _text(rvals[b])) for a, b in both.T.tolist()}
    dropped: dict[tuple[int, int], str] = {}
    if scol is not None:
        svals, scodes, _ = cols.coded(scol)
        for i in np.flatnonzero(~keep):
            if i in again:
                continue
            dropped[(0, int(lines[i]))] = str(svals[scodes[i]]) if scodes[i] >= 0 else ""
    else:
        svals, scodes = [], np.full(len(lines), -1, np.int32)
    if not keep.all():
        idx = np.flatnonzero(keep)
        files = files.take(idx)
        lcodes, scodes, lines = lcodes[idx], scodes[idx], lines[idx]
    # the split column's blank cells become code -1 ("" : no split)
    svals = list(svals)
    if "" in svals:
        blank = svals.index("")
        scodes = np.where(scodes == blank, -1, scodes)
    # only values of the rows kept: a skipped row (",", as Excel saves an empty one) names no class
    labels, lcodes = _used(list(labels), lcodes)
    svals, scodes = _used(svals, scodes)
    part = _Part(sheet, files, list(labels), lcodes.astype(np.int32), svals, scodes.astype(np.int32),
                 lines.astype(np.int32), fname, lname)  # fmt: skip
    part.dropped_splits, part.dropped_files, part.rivals = dropped, named, pairs
    return part


def _used(values: list, codes: np.ndarray) -> tuple[list, np.ndarray]:
    """``values`` cut to those some code points at (codes -1 stay -1), the codes renumbered."""
    used = np.zeros(len(values) + 1, bool)
    used[codes] = True  # -1 marks the extra last entry
    if used[:-1].all():
        return values, codes
    renumber = np.append(np.cumsum(used[:-1]) - 1, -1)
    return [v for v, u in zip(values, used[:-1]) if u], renumber[codes].astype(codes.dtype)


# ---------------------------------------------------------------------------------------------
# the entry point


def _excel_engine(engine: str | None) -> str:
    if engine is not None:
        if engine not in ("calamine", "openpyxl"):
            raise LabelError(f"engine must be 'calamine' or 'openpyxl', got {engine!r}")
        return engine
    try:
        import python_calamine  # noqa: F401

        return "calamine"
    except ImportError:
        return "openpyxl"


def _class_order(values: Iterable[str]) -> list[str]:
    """``values`` in the order their classes take (ClassMap's rule: numbers when all are integers)."""
    values = list(values)
    return sorted(values, key=_int_of) if values and all(_is_int_text(v) for v in values) else sorted(values)


def _rival_problem(path: Path, lname: str, rname: str, pairs: set[tuple[str, str]]) -> str | None:
    """The problem when the label column ``lname`` and another column naming the class, ``rname``,
    would give the samples different classes (``pairs``: each row's two values); None when they agree."""
    fix = "; name the one to use with label_column= (--label-column)"
    both, ln, rn, lq, rq = f"the columns {lname!r} and {rname!r}", lname, rname, repr(lname), repr(rname)
    if _norm(lname) == _norm(rname):  # the header twice: naming it cannot choose
        fix, both = "; rename the one not meant", f"the two columns named {lname!r}"
        ln, rn = lq, rq = "the first", "the second"
    by_label: dict[str, list[str]] = {}
    by_rival: dict[str, list[str]] = {}
    for a, b in pairs:
        by_label.setdefault(a, []).append(b)
        by_rival.setdefault(b, []).append(a)
    for one, other, seen in ((ln, rn, by_label), (rn, ln, by_rival)):
        for v in _class_order(seen):
            if len(seen[v]) > 1:
                two = _class_order(seen[v])[:2]
                return (f"{path}: {both} both name the class but do not match one to one "
                        f"({one} {v!r} goes with {other} {two[0]!r} and {two[1]!r}){fix}")  # fmt: skip
    if _norm(rname) in _NAME_COLUMNS and not all(_is_int_text(a) for a in by_label):
        return None  # names beside names, one to one: the label column's are read, the others describe them
    mine, theirs = _class_order(by_label), _class_order(by_rival)
    # each class said by the names the reader knows it by: ids beside names are shown as the names they stand for
    by_names = all(_is_int_text(a) for a in by_label) and not all(_is_int_text(b) for b in by_rival)
    for k, (a, b) in enumerate(zip(mine, theirs)):
        if by_label[a][0] != b:
            mine_k, theirs_k = (by_label[a][0], b) if by_names else (a, by_rival[b][0])
            return (f"{path}: {both} both name the class but number the classes "
                    f"differently (class {k} is {mine_k!r} by {lq}, {theirs_k!r} by {rq}){fix}")  # fmt: skip
    return None


def _join(path: Path, parts: list[_Part], problems: list, notes: list, encoding: str | None) -> LabelTable:
    label_index: dict[str, int] = {}
    split_index: dict[str, int] = {}
    lcodes, scodes, sheet_codes = [], [], []
    sheets: list[str] = []
    orders: list[int] = []
    for p in parts:
        lmap = np.asarray([label_index.setdefault(v, len(label_index)) for v in p.labels] + [-1], np.int32)
        smap = np.asarray([split_index.setdefault(v, len(split_index)) for v in p.splits] + [-1], np.int32)
        lcodes.append(lmap[p.label_codes])
        scodes.append(smap[p.split_codes])
        if p.sheet:
            sheets.append(p.sheet)
            orders.append(p.order)
        sheet_codes.append(np.full(len(p.files), len(sheets) - 1 if p.sheet else -1, np.int16))
    cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)  # noqa: E731
    files = StringArray.concat([p.files for p in parts]) if parts else StringArray()
    labels = list(label_index)
    values = tuple(labels)
    is_int = [_is_int_text(v) for v in values]
    kind = "empty" if not values else "int" if all(is_int) else "mixed" if any(is_int) else "name"
    label_col = CodedColumn([_int_of(v) for v in labels] if kind == "int" else labels, cat(lcodes, np.int32))
    first = next((p for p in parts if p.file_column), None)
    rivals: dict[str, set[tuple[str, str]]] = {}
    for p in parts:
        for name, pairs in p.rivals.items():
            rivals.setdefault(name, set()).update(pairs)
    for name, pairs in rivals.items():
        problem = _rival_problem(path, first.label_column if first else "", name, pairs)
        if problem:
            problems.append(((0, 0), problem))
    table = LabelTable(
        path=path, files=files, labels=label_col, splits=CodedColumn(list(split_index), cat(scodes, np.int32)),
        sheets=CodedColumn(sheets, cat(sheet_codes, np.int16)), rows=cat([p.rows for p in parts], np.int32),
        file_column=first.file_column if first else "", label_column=first.label_column if first else "",
        kind=kind, class_values=values, encoding=encoding, notes=notes, read_problems=problems,
        sheet_orders=tuple(orders), dropped_files=[f for p in parts for f in p.dropped_files],
        unread=sum(p.unread for p in parts),
    )  # fmt: skip
    start = 0
    for p in parts:  # total or note rows among a sheet's images ('总计 | 2张'): samples, and their labels classes
        n = len(p.files)
        if n > 1 and _looks_like_file(p.files[0]):
            end = n
            while end > 1 and not _SUFFIX.search(p.files[end - 1]):  # no '.jpg', '.jp2', '.avif': no file
                end -= 1
            # the rows under the last image with no file suffix (a total, who made it, when), else the few between
            # images that have none at all (a subtotal): among thousands of images, not one in twenty
            odd = [end] if end < n and _looks_like_file(p.files[end - 1]) else _without_dot(p.files)
            said = {key for key, _ in problems}  # a line named already (a spaced file name without its label)
            if odd:
                for k in odd[:MAX_LISTED]:
                    i = start + k
                    if (p.order, int(table.rows[i])) in said:
                        continue
                    problems.append(((p.order, int(table.rows[i])), f"{path}: {table._short(i)}: {table.files[i]!r} "
                                     "names no image file, unlike the rows around it (a total or a note?): its label "
                                     f"{str(table.labels[i])!r} would be a class; delete the row"))  # fmt: skip
        start += n
    return table


def not_a_file(path: Path) -> str:
    """What ``path`` is, when it exists and is neither a file nor a folder: "a pipe", "a device", "a socket"."""
    import stat

    mode = path.stat().st_mode
    if stat.S_ISFIFO(mode):
        return "a pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "not a regular file"


def read_labels(
    path: str | os.PathLike,
    sheets: str | Sequence[str] | None = None,
    *,
    split: str | None = None,
    file_column: str | None = None,
    label_column: str | None = None,
    split_column: str | None = None,
    encoding: str | None = None,
    include_hidden: bool = False,
    remap_labels: bool = False,
    validate: bool = True,
    engine: str | None = None,
    sep: str | None = None,
) -> LabelTable:
    """Read a label table.

    Args:
        path: a workbook (``.xlsx``/``.xlsm``: every visible sheet with a file and label header,
            each sheet's name becoming its rows' split), a text table (``.csv``/``.tsv``, or
            a ``.txt`` whose first line is a header; a split column is used when present), or a
            list (``.txt``/``.lst``: ``path label`` per line, as PaddleClas and mmpretrain write
            them; the label is the last field, ``#`` comments and blank lines are skipped; MXNet
            im2rec's ``index<TAB>label<TAB>path`` lines too).
        sheets: only these sheets (a name or a list).
        split: only the rows of this split: a workbook keeps only that sheet's rows (the others
            give their labels, so every split gets the same class map, and their files are compared
            with this split's, so an image listed in another split too is a problem of either);
            a text table keeps the rows whose split column holds it, likewise.
        file_column, label_column, split_column: the column names, when they are not among the
            common ones (file, filename, path, image, 文件名, 图片... / label, class, 标签, 类别...).
        encoding: the encoding of a text table; by default detected (UTF-8, UTF-8 with BOM,
            UTF-16 with BOM, GBK/GB18030, Big5), refusing to guess when GBK and Big5 are too close.
        include_hidden: read hidden sheets too. By default they are left out, rows and labels alike,
            with a note, and naming one (``sheets=``, ``split=``) is refused: its split would get a
            class map the other splits do not share.
        remap_labels: integer labels that are not ``0..C-1`` are not a problem (they will be remapped).
        validate: raise on problems (``False`` returns the readable rows; see :meth:`LabelTable.problems`).
        engine: ``"calamine"`` (default when installed) or ``"openpyxl"`` for workbooks.
        sep: the delimiter of a text table, or ``" "`` for a ``path label`` list.

    Raises:
        FileNotFoundError: no such file.
        LabelError: every problem of the table at once (the first 20 spelled out, each with its
            sheet and row or line, then a count), or a file that cannot be read as a table.
    """
    if not isinstance(path, (str, bytes, os.PathLike)):  # a DataFrame, a dict (pandas' habits): pathlib's TypeError
        raise UsageError(f"a label table is read from its file (a path to .csv, .xlsx, .txt ...), got a "
                         f"{type(path).__name__}; save it first (DataFrame.to_csv) and give the path")  # fmt: skip
    path = os.fsdecode(path)
    refuse_empty(path=path, split=split, file_column=file_column, label_column=label_column, split_column=split_column)
    include_hidden, remap_labels = as_flag("include_hidden", include_hidden), as_flag("remap_labels", remap_labels)
    validate = True if validate is None else as_flag("validate", validate)  # (None: the default, not False)
    path = Path(path)
    if sheets is not None and not isinstance(sheets, str):  # a list, a tuple, pandas' keys or Index, an array
        names = list(sheets) if hasattr(sheets, "__iter__") else None
        if not names or not all(isinstance(n, str) for n in names):  # (read_excel's sheet_name=0)
            raise UsageError(f"sheets must be a sheet's name or a list of names, got {sheets!r}")
        sheets = [str(n) for n in names]
    if sep is not None and (not isinstance(sep, str) or (len(sep) != 1 and sep != "whitespace")):
        raise UsageError(f"sep must be one character (or ' ' or 'whitespace' for a 'path label' list), got {sep!r} "
                         "(a text table is read by its delimiter, not a regular expression)")  # fmt: skip
    if path.is_dir():
        raise NotATable(f"{path}: is a folder, not a label table (expected {_TABLE_SUFFIXES})")
    if not path.is_file():
        if path.exists():  # `--labels <(iconv ...)`: a pipe can be read once only, and has no suffix to say its format
            raise UsageError(f"{path}: {not_a_file(path)}, not a file: a label table is read from a file, whose "
                             "suffix says its format; save it as one (.csv, .xlsx, ...) and give that")  # fmt: skip
        raise FileNotFoundError(f"{path}: no such label table")
    suffix = path.suffix.lower()
    if encoding is not None and suffix in EXCEL_SUFFIXES:  # a workbook's text is Unicode: the encoding would do nothing
        raise UsageError(f"{path}: encoding={encoding!r} (--encoding) is a text table's (and, without a table, a zip's "
                         "names'); a workbook stores its text as Unicode, read as it is: leave it out")  # fmt: skip
    if sheets is not None and suffix not in EXCEL_SUFFIXES:  # read whole, as if no sheet were named: no
        raise UsageError(f"{path}: a text table, which has no sheets; sheets= names a workbook's sheets (split= "
                         "keeps one split's rows)")  # fmt: skip
    problems: list[tuple[tuple[int, int], str]] = []
    notes: list[str] = []
    enc = None
    if suffix in EXCEL_SUFFIXES:
        wanted = [sheets] if isinstance(sheets, str) else (list(sheets) if sheets is not None else None)
        parts = _read_workbook(path, sheets=wanted, split=split, include_hidden=include_hidden,
                               file_column=file_column, label_column=label_column, split_column=split_column,
                               engine=_excel_engine(engine), problems=problems, notes=notes)  # fmt: skip
    elif suffix in TEXT_SUFFIXES:
        raw = path.read_bytes()
        if raw.startswith((b"PK\x03\x04", _OLE_MAGIC)):  # a workbook (or a zip) under a text table's name
            old = raw.startswith(_OLE_MAGIC)
            kind = "an Excel 97-2003 (.xls) workbook" if old else "a zip archive or an .xlsx workbook"
            fix = "save it as .xlsx in Excel" if old else "if it is a workbook, name it .xlsx"
            raise LabelError(f"{path}: {kind}, not {suffix} text; {fix}")
        parts, enc = _read_text(path, raw, encoding=encoding, sep=sep, file_column=file_column,
                                label_column=label_column, split_column=split_column, problems=problems,
                                notes=notes)  # fmt: skip
    elif suffix == ".xls":  # Excel 97-2003, or the HTML table a web system exports under that name
        with open(path, "rb") as f:
            head = f.read(512)
        if head.startswith(_OLE_MAGIC):
            raise LabelError(f"{path}: an Excel 97-2003 (.xls) workbook, which datakit does not read; open it in "
                             "Excel and save it as .xlsx")  # fmt: skip
        if head.startswith(b"PK\x03\x04"):  # an .xlsx renamed (or saved as "Excel 97-2003" by name only)
            raise LabelError(f"{path}: an .xlsx workbook (a zip container) under an .xls name; rename it to "
                             f"{path.with_suffix('.xlsx').name}")  # fmt: skip
        if re.search(rb"<(?:html|table|meta|!doctype)", head.lower()):
            raise LabelError(f"{path}: a web page (HTML) under an .xls name, as web systems export tables; open it "
                             "in Excel and save it as .xlsx")  # fmt: skip
        raise LabelError(f"{path}: not an Excel 97-2003 workbook, nor a table datakit reads (expected "
                         f"{_TABLE_SUFFIXES}); save it as .xlsx")  # fmt: skip
    else:
        raise NotATable(f"{path}: not a label table (expected {_TABLE_SUFFIXES})")
    if split is not None:  # a split column: another split's blank cell is that split's problem
        elsewhere = {key for p in parts for key, s in p.dropped_splits.items() if s and s != split}
        problems[:] = [p for p in problems if p[0] not in elsewhere]
    whole = _join(path, parts, problems, notes, enc)  # every sheet read, also those not asked for
    if suffix in TEXT_SUFFIXES and len(parts) == 1:
        cut = _cut_short(path, raw, parts[0], enc)
        if cut is not None:
            problems.append(cut)
    listed = whole._list_notes()
    notes += whole._case_notes() + whole._split_notes() + listed + whole._quoted_notes()
    notes += [] if listed else whole._distinct_notes()  # (lists of tags, each row's own: said there)
    for note in notes:
        log.warning("%s", note)
    keep = np.concatenate([np.full(len(p.files), p.chosen) for p in parts]) if parts else np.zeros(0, bool)
    if not keep.any() and not problems:
        problems.append(((0, 0), f"{path}: the table holds no rows"))
    if split is not None and keep.any():
        code = split_index(whole.splits.values, split)
        code = -2 if code is None else code
        in_split = keep & (whole.splits.codes == code)
        if in_split.any():
            keep = in_split
        elif not problems:
            whole._take(np.flatnonzero(keep)).select(split)  # raises, naming the splits there are
    table = whole if keep.all() else _part_of(whole, keep)
    if validate:
        found = table.problems(remap=remap_labels)
        if found:
            raise LabelError(_summary(path, found))
    return table


# a word followed by four numbers or more: a class and its box (ImageNet's PredictionString 'n01440764 0 3 50 60')
_ANNOTATED = re.compile(r"\S+(?:\s+-?\d+(?:\.\d+)?){4,}")
# between the labels of a multi-label cell ('cat,dog', '猫、狗')
_LIST_SEPARATORS = re.compile(r"\s*[,，、]\s*")
# where no comma parts them: MovieLens' 'Action|Drama', 'cat;dog' (not a space, '/' or '+': 'ski mask', 'AC/DC')
_OTHER_SEPARATORS = re.compile(r"\s*[|;；]\s*")
_VECTOR = re.compile(r"[01](?:(?:\s*[,;|]\s*|\s+)[01])+")  # '0,1,0': a one-hot (or multi-hot) vector, not a class name


def _cut_short(path: Path, raw: bytes, part: _Part, encoding: str | None) -> tuple[tuple[int, int], str] | None:
    """A problem where a text table looks cut short (half-copied, or read while written): its last line has no line
    end, and that line's label (or split) is on no other line and is the start of another one ('cof' where 'coffee'
    is one, 'tra' where 'train' is), which would otherwise be a class (a split) of its own, without a word."""
    if not raw or raw.endswith((b"\n", b"\r")) or not len(part.rows):
        return None
    k = int(np.argmax(part.rows))
    last = raw[max(raw.rfind(b"\n"), raw.rfind(b"\r")) + 1 :].decode(encoding or "utf-8", "replace")
    for what, values, codes in (("label", part.labels, part.label_codes), ("split", part.splits, part.split_codes)):
        code = int(codes[k])
        if code < 0 or int(np.count_nonzero(codes == code)) != 1:
            continue
        value = str(values[code])
        longer = sorted(v for v in map(str, values) if v != value and v.startswith(value))
        # (that row is the last line, not one before a line dropped; a split, the line's last field)
        if not value or not longer or value not in (last if what == "label" else last[-len(value) :]):
            continue
        row = int(part.rows[k])
        whose = "class" if what == "label" else "split"
        return ((0, row), f"{path}, line {row}: the last line has no line end, and its {what} {value!r} is on no "
                          f"other line and the start of {longer[0]!r}: the file cut short (half-copied, or read while "
                          f"it was written)? copy it again; if {value!r} is a {whose}, end the file with a line "
                          "break")  # fmt: skip
    return None


def _part_of(whole: LabelTable, keep: np.ndarray) -> LabelTable:
    """The rows ``keep`` (a mask) of ``whole``, keeping its read problems and its problems that span the
    whole table: a file listed in another split too (an image in train and val), labels that are one
    name in two Unicode forms or look alike (the class map is the whole table's)."""
    part = whole._take(np.flatnonzero(keep))
    part.read_problems = whole.read_problems
    part.table_problems = whole._duplicate_problems(keep) + whole._twin_problems() + whole._look_alike_problems()
    part.whole = whole
    part.dropped_files = whole.dropped_files
    part.unread = whole.unread
    return part


def _summary(path: Path, found: list[str]) -> str:
    if len(found) == 1:
        return found[0]
    head = f"{path}: {len(found)} problems:"
    lines = [f"  {p}" for p in found[:MAX_LISTED]]
    if len(found) > MAX_LISTED:
        lines.append(f"  ... and {len(found) - MAX_LISTED} more (datakit check FOLDER --labels {path} lists them all)")
    return "\n".join([head, *lines])
