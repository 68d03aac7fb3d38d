"""Label tables (xlsx with one sheet per split, csv/tsv in UTF-8 or GBK) and class maps.

Every row keeps where it came from (sheet and row number as Excel or a text editor shows it),
so each problem can be reported where the user will fix it.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from datakit.errors import LabelError, UsageError

__all__ = [
    "FILE_COLUMNS",
    "LABEL_COLUMNS",
    "ClassMap",
    "LabelError",
    "LabelTable",
    "read_labels",
    "resolve_path",
]

FILE_COLUMNS = ("file", "filename", "file_name", "filepath", "file_path", "path", "image", "image_path", "image_name",
                "img", "img_path", "name", "文件名", "文件", "文件路径", "图片", "图片名", "图片名称", "图像", "图像名",
                "路径")  # fmt: skip
LABEL_COLUMNS = ("label", "labels", "class", "class_name", "classname", "category", "target", "标签", "类别", "类",
                 "分类", "类别名")  # fmt: skip
SPLIT_COLUMNS = ("split", "subset", "set", "划分", "数据集")
EXCEL_SUFFIXES = (".xlsx", ".xlsm")
TEXT_SUFFIXES = (".csv", ".tsv", ".txt")


def _norm(name: object) -> str:
    return re.sub(r"[\s_\-]+", "_", str(name).strip().lower())


def _blank(v: object) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def _text(v: object) -> str:
    """A cell as text: numbers without a spurious ``.0``, stray whitespace stripped."""
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return str(v).strip()


@dataclass(frozen=True)
class ClassMap:
    """Class names in index order: index ``i`` is ``classes[i]``.

    String labels are ordered by code point (Python's ``sorted``, the order torchvision's
    ImageFolder uses for folder names). Integer labels ``0..C-1`` keep their values; other
    integer sets are refused unless ``remap=True``, which maps the sorted values to ``0..C-1``.
    """

    classes: tuple[str, ...]
    source_values: tuple[int, ...] | None = None  # original integer labels, when remapped

    @classmethod
    def from_labels(cls, labels: Iterable[object], *, remap: bool = False, where: str = "labels") -> ClassMap:
        values = set(labels)
        if not values:
            return cls(())
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
            ints = sorted(int(v) for v in values)
            if ints == list(range(len(ints))):
                return cls(tuple(str(i) for i in ints))
            if not remap:
                lo, hi = ints[0], ints[-1]
                raise LabelError(
                    f"{where}: integer labels are {_ranges(ints)}, not 0..{len(ints) - 1}; passed on as they are they "
                    f"would index past the {len(ints)} outputs of a classifier (CUDA: 'device-side assert triggered'). "
                    f"Use remap_labels=True (--remap-labels) to map {lo}..{hi} to 0..{len(ints) - 1} in order, "
                    "or fix the table"
                )
            return cls(tuple(str(i) for i in ints), tuple(ints))
        return cls(tuple(sorted(str(v) for v in values)))

    @property
    def class_to_idx(self) -> dict[str, int]:
        return {c: i for i, c in enumerate(self.classes)}

    def __len__(self) -> int:
        return len(self.classes)

    def encode(self, labels: Sequence[object]) -> np.ndarray:
        """Indices (int64) for ``labels``."""
        lookup = self.class_to_idx
        return np.fromiter((lookup[_text(v)] for v in labels), dtype=np.int64, count=len(labels))

    def to_json(self) -> dict:
        out: dict = {"classes": list(self.classes)}
        if self.source_values is not None:
            out["source_values"] = list(self.source_values)
        return out

    @classmethod
    def from_json(cls, obj: dict) -> ClassMap:
        src = obj.get("source_values")
        return cls(tuple(obj["classes"]), tuple(src) if src is not None else None)

    def save(self, path: str | os.PathLike) -> None:
        Path(path).write_text(json.dumps(self.to_json(), ensure_ascii=False, indent=1), encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike) -> ClassMap:
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))


def _ranges(ints: list[int]) -> str:
    if ints == list(range(ints[0], ints[-1] + 1)):
        return f"{ints[0]}..{ints[-1]}"
    return "{" + ", ".join(map(str, ints[:8])) + (", ..." if len(ints) > 8 else "") + "}"


@dataclass
class LabelTable:
    """Rows of (file, label, split) with the sheet and row each came from."""

    path: Path
    files: list[str]
    labels: list[object]
    splits: list[str]
    sheets: list[str]
    rows: list[int]
    file_column: str
    label_column: str

    def __len__(self) -> int:
        return len(self.files)

    def where(self, i: int) -> str:
        """``"labels.xlsx, sheet 'train', row 7"`` for row ``i`` of the table."""
        if self.sheets[i]:
            return f"{self.path}, sheet {self.sheets[i]!r}, row {self.rows[i]}"
        return f"{self.path}, line {self.rows[i]}"

    @property
    def split_names(self) -> list[str]:
        return list(dict.fromkeys(s for s in self.splits if s))

    def select(self, split: str | None) -> LabelTable:
        """Only the rows of ``split`` (a sheet name, or a value of the split column)."""
        if split is None:
            return self
        keep = [i for i, s in enumerate(self.splits) if s == split]
        if not keep:
            names = ", ".join(repr(s) for s in self.split_names) or "none (the table has no sheets or split column)"
            raise UsageError(f"{self.path}: no split {split!r}; the splits are {names}")
        pick = lambda xs: [xs[i] for i in keep]  # noqa: E731
        return LabelTable(self.path, pick(self.files), pick(self.labels), pick(self.splits), pick(self.sheets),
                          pick(self.rows), self.file_column, self.label_column)  # fmt: skip

    def class_map(self, remap: bool = False) -> ClassMap:
        return ClassMap.from_labels(self.labels, remap=remap, where=str(self.path))


def resolve_path(name: str, root: str | os.PathLike) -> str:
    """A table's file name as a path: ``\\`` separators accepted, absolute kept, else under ``root``."""
    name = name.replace("\\", "/")
    if name.startswith("/") or re.match(r"^[A-Za-z]:/", name):
        return name
    return os.path.join(os.fspath(root), name)


def _find_column(header: list[object], wanted: str | None, known: Sequence[str], what: str, where: str) -> int | None:
    names = [_norm(h) if not _blank(h) else "" for h in header]
    if wanted is not None:
        key = _norm(wanted)
        if key in names:
            return names.index(key)
        shown = ", ".join(repr(str(h).strip()) for h in header if not _blank(h))
        raise LabelError(f"{where}: no {what} column named {wanted!r}; the columns are {shown}")
    for k in known:
        if _norm(k) in names:
            return names.index(_norm(k))
    return None


def _parse_grid(
    grid: list[list[object]], *, path: Path, sheet: str, file_column: str | None, label_column: str | None,
    line_offset: int = 1,
) -> tuple[list[str], list[object], list[str], list[int], str, str]:  # fmt: skip
    where = f"{path}, sheet {sheet!r}" if sheet else str(path)
    header_at = None
    keys = {_norm(file_column)} if file_column is not None else {_norm(k) for k in FILE_COLUMNS}
    for r, row in enumerate(grid[:50]):  # title rows and leading empty rows may come first
        if any(_norm(v) in keys for v in row if not _blank(v)):
            header_at = r
            break
    if header_at is None:
        first = next((row for row in grid if any(not _blank(v) for v in row)), None)
        if first is None:
            return [], [], [], [], "", ""
        shown = ", ".join(repr(_text(v)) for v in first if not _blank(v))
        if file_column is not None:
            raise LabelError(f"{where}: no file column named {file_column!r}; the first row holds {shown}")
        raise LabelError(
            f"{where}: no file-name column found (looked for {', '.join(FILE_COLUMNS[:6])}, 文件名, 图片, ...); "
            f"the first row holds {shown}; name it with file_column=/--file-column"
        )
    header = grid[header_at]
    fcol = _find_column(header, file_column, FILE_COLUMNS, "file", where)
    lcol = _find_column(header, label_column, LABEL_COLUMNS, "label", where)
    if lcol is None:
        others = [i for i, h in enumerate(header) if i != fcol and not _blank(h)]
        if len(others) != 1:
            shown = ", ".join(repr(_text(h)) for h in header if not _blank(h))
            raise LabelError(
                f"{where}, row {header_at + line_offset}: no label column found among {shown}; "
                "name it with label_column=/--label-column"
            )
        lcol = others[0]
    scol = _find_column(header, None, SPLIT_COLUMNS, "split", where)
    files, labels, splits, rows = [], [], [], []
    for r in range(header_at + 1, len(grid)):
        row = grid[r]
        f, lab = _cell(row, fcol), _cell(row, lcol)
        rownum = r + line_offset
        if _blank(f) and _blank(lab):
            continue  # empty rows are absent, not errors
        if _blank(f):
            raise LabelError(f"{where}, row {rownum}: label {_text(lab)!r} has no file name")
        if _blank(lab):
            raise LabelError(f"{where}, row {rownum}: file {_text(f)!r} has no label")
        files.append(_text(f))
        if isinstance(lab, float) and lab.is_integer():
            lab = int(lab)
        labels.append(lab if isinstance(lab, int) and not isinstance(lab, bool) else _text(lab))
        split = _cell(row, scol)
        splits.append(sheet or ("" if _blank(split) else _text(split)))
        rows.append(rownum)
    return files, labels, splits, rows, _text(header[fcol]), _text(header[lcol])


def _cell(row: list[object], col: int | None) -> object:
    return row[col] if col is not None and col < len(row) else None


def _excel_engine(engine: str | None) -> str:
    if engine is not None:
        return engine
    try:
        import python_calamine  # noqa: F401

        return "calamine"
    except ImportError:
        return "openpyxl"


def _read_text_table(path: Path, sep: str | None) -> list[list[object]]:
    import csv
    import io

    raw = path.read_bytes()
    for enc in ("utf-8-sig", "gb18030"):
        try:
            text = raw.decode(enc)
            break
        except UnicodeDecodeError:
            continue
    else:
        raise LabelError(f"{path}: not UTF-8 or GBK text")
    if sep is None:
        sep = "\t" if path.suffix.lower() == ".tsv" else ","
    return [list(r) for r in csv.reader(io.StringIO(text, newline=""), delimiter=sep)]


def read_labels(
    path: str | os.PathLike,
    sheets: str | Sequence[str] | None = None,
    *,
    file_column: str | None = None,
    label_column: str | None = None,
    engine: str | None = None,
    sep: str | None = None,
) -> LabelTable:
    """Read a label table.

    Args:
        path: ``.xlsx``/``.xlsm`` (every sheet, each sheet's name becoming the rows' split), or
            ``.csv``/``.tsv``/``.txt`` (UTF-8, UTF-8 with BOM or GBK; a ``split`` column is used
            when present).
        sheets: only these sheets (a name or a list).
        file_column, label_column: the column names, when they are not among the common ones
            (file, filename, path, image, 文件名, 图片... / label, class, category, 标签, 类别...).
        engine: pandas' Excel engine; calamine when installed (several times faster), else openpyxl.
        sep: the delimiter of a text table (default: tab for .tsv, comma otherwise).

    Raises:
        LabelError: no file or label column, a row with a file but no label (naming sheet and
            row), a missing sheet, an unreadable file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such label table")
    suffix = path.suffix.lower()
    grids: list[tuple[str, list[list[object]]]]
    if suffix in EXCEL_SUFFIXES:
        import pandas as pd

        wanted = [sheets] if isinstance(sheets, str) else (list(sheets) if sheets is not None else None)
        try:
            frames = pd.read_excel(path, sheet_name=None, header=None, dtype=object, engine=_excel_engine(engine))
        except Exception as exc:
            raise LabelError(f"{path}: cannot read the workbook ({type(exc).__name__}: {exc})") from None
        if wanted is not None:
            missing = [s for s in wanted if s not in frames]
            if missing:
                raise LabelError(f"{path}: no sheet {missing[0]!r}; the sheets are {', '.join(map(repr, frames))}")
            frames = {s: frames[s] for s in wanted}
        grids = [(name, df.values.tolist()) for name, df in frames.items()]
    elif suffix in TEXT_SUFFIXES:
        grids = [("", _read_text_table(path, sep))]
    else:
        raise LabelError(f"{path}: not a label table (expected .xlsx, .xlsm, .csv, .tsv or .txt)")
    files: list[str] = []
    labels: list[object] = []
    splits: list[str] = []
    sheet_of: list[str] = []
    rows: list[int] = []
    fname = lname = ""
    for sheet, grid in grids:
        f, lab, s, r, fn, ln = _parse_grid(grid, path=path, sheet=sheet, file_column=file_column,
                                           label_column=label_column)  # fmt: skip
        files += f
        labels += lab
        splits += s
        rows += r
        sheet_of += [sheet] * len(f)
        fname, lname = fname or fn, lname or ln
    if not files:
        raise LabelError(f"{path}: the table holds no rows")
    if any(isinstance(v, int) for v in labels) and any(isinstance(v, str) for v in labels):
        labels = [_text(v) for v in labels]  # mixed: treat every label as a name
    return LabelTable(path, files, labels, splits, sheet_of, rows, fname, lname)
