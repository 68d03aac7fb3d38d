"""Dataset health checks (``datakit check``).

A check reports every problem of the label table at once (labels.py finds them: blank cells,
duplicate files, mixed or out-of-range integer labels, missing columns, each with its sheet and
row), then reads every sample in parallel and adds, one line each, what needs the images:
unreadable or empty images, files the table names but the disk lacks, files on disk the table
does not name; then class counts per split and the range of image sizes.
"""

from __future__ import annotations

import hashlib
import logging
import os
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from datakit.errors import UsageError, names_sample
from datakit.filenames import undecoded_names
from datakit.io import IMAGE_EXTENSIONS, probe_image
from datakit.labels import (
    EXCEL_SUFFIXES,
    MAX_LISTED,
    TEXT_SUFFIXES,
    LabelTable,
    file_by_folder,
    markers_as_classes,
    read_labels,
    resolve_path,
    spelled_twice,
)
from datakit.parallel import map_ordered
from datakit.sources import (
    FolderDataset,
    ImageDataset,
    LmdbDataset,
    TableDataset,
    as_given,
    check_header,
    given_classes,
    open_source,
    unknown_classes,
)

log = logging.getLogger("datakit")

__all__ = ["CheckReport", "check_dataset"]

TABLE_SUFFIXES = EXCEL_SUFFIXES + TEXT_SUFFIXES


@dataclass
class CheckReport:
    """The outcome of :func:`check_dataset`: problems (one line each), notes, counts and size ranges."""

    samples: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    class_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    classes: list[str] = field(default_factory=list)  # every class, in class-index order
    height_range: tuple[int, int] | None = None
    width_range: tuple[int, int] | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {"samples": self.samples, "problems": self.problems, "notes": self.notes, "classes": self.classes,
                "class_counts": self.class_counts, "height_range": self.height_range,
                "width_range": self.width_range}  # fmt: skip


def _probe(ds: ImageDataset, i: int) -> tuple[int, int, str | None, bytes | None]:
    """``(height, width, None, digest)`` of sample ``i`` from its header (``digest``: of its bytes, to
    find one image under two names), or ``(0, 0, reason, None)``.

    Strict: data the decoders only warn about (``Corrupt JPEG data``, a bad CRC) is reported as
    damaged, with the C library's message attached to the file instead of printed bare.
    """
    try:
        data = ds.read(i)
        h, w = probe_image(data, ds.name(i), strict=True)
        return h, w, None, hashlib.blake2b(data, digest_size=16).digest()
    except (ValueError, OSError, KeyError) as exc:
        text = str(exc)
        named = ds.name(i) in text or (isinstance(ds, LmdbDataset) and names_sample(text, i))
        return 0, 0, text if named else f"{ds.name(i)}: {text}", None


def _same_images(ds: ImageDataset, table_ds: TableDataset | None, digests: dict[int, bytes], targets: np.ndarray,
                 split_of: Callable[[int], str | None], report: CheckReport) -> None:  # fmt: skip
    """One image under two names (a copy, a link, a hard link): a problem when its labels differ or when it
    is in two splits (one split would score images the other trains on); a note when it is a plain copy."""
    shown = lambda i: ds.name(i) + (f" ({table_ds.where(i)})" if table_ds is not None else "")  # noqa: E731
    real: dict[str, str] = {}

    def same_name(i: int, j: int) -> bool:  # one file by its name (a row again, a folder link): said already
        if table_ds is None or table_ds.zip is not None:
            return ds.name(i) == ds.name(j)
        return file_by_folder(ds.path(i), real) == file_by_folder(ds.path(j), real)

    def file_of(k: int) -> str | None:  # the file on disk, links followed: a folder source's, a table's
        if isinstance(ds, FolderDataset):
            return os.path.realpath(ds.name(k))
        if table_ds is not None and table_ds.zip is None:
            return os.path.realpath(ds.path(k))
        return None

    def how(i: int, j: int) -> str:  # one file through a link (a class folder linked into another) or two alike
        a, b = file_of(i), file_of(j)
        if a is not None and a == b:
            return f"one file, {a}"
        try:
            if a is not None and b is not None and os.path.samefile(a, b):
                return "one file, a hard link"
        except OSError:
            pass
        return "the same bytes"

    first: dict[bytes, int] = {}
    twins: list[str] = []
    leaks: list[str] = []
    copies: list[tuple[int, int]] = []
    for i in sorted(digests):
        j = first.setdefault(digests[i], i)
        if j == i or same_name(i, j):
            continue
        if targets[i] != targets[j]:
            twins.append(f"one image, two labels: {shown(j)} is {ds.classes[targets[j]]!r}, {shown(i)} is "
                         f"{ds.classes[targets[i]]!r} ({how(i, j)})")  # fmt: skip
        elif split_of(i) != split_of(j):
            leaks.append(f"one image in two splits: {shown(j)} in {split_of(j)!r}, {shown(i)} in {split_of(i)!r} "
                         f"({how(i, j)}): one split would score images the other trains on")  # fmt: skip
        else:
            copies.append((j, i))
    for found, what in ((twins, "images with two labels"), (leaks, "images in two splits")):
        report.problems += found[:MAX_LISTED]
        if len(found) > MAX_LISTED:
            report.problems.append(f"{len(found) - MAX_LISTED} more {what} (the same bytes under two names)")
    if copies:
        j, i = copies[0]
        note = (f"{len(copies)} image{'s are copies' if len(copies) > 1 else ' is a copy'} of another under another "
                f"name, with the same label (the same bytes), such as {shown(i)} of {shown(j)}")  # fmt: skip
        report.notes.append(note)
        log.warning("note: %s", note)


def _open_checked(src, labels, split: str | None, remap_labels: bool, root, options: dict,
                  report: CheckReport, classes=None, zip_encoding: str | None = None) -> ImageDataset:  # fmt: skip
    """The dataset to read; a table's every problem goes into the report (labels.py finds them)."""
    given = None
    if classes is not None:
        given = given_classes(classes)
        if remap_labels:
            raise UsageError("classes= and remap_labels= both number the classes; give one of them")
    path = Path(src) if isinstance(src, (str, os.PathLike)) else None
    alone = labels is None and path is not None and path.is_file() and path.suffix.lower() in TABLE_SUFFIXES
    if labels is None and not alone:
        # a table's options refused there without a table (a zip's encoding= is of its names)
        return open_source(src, split=split, classes=classes, remap_labels=remap_labels, zip_encoding=zip_encoding,
                           **options)  # fmt: skip
    if labels is not None and path is not None and path.is_file() and path.suffix.lower() not in (".zip", ".lmdb"):
        raise UsageError(f"{path}: a file; with labels= (--labels) the source is the folder or .zip of the images the "
                         "table names")  # fmt: skip
    if labels is not None and path is not None and ((path / "data.mdb").exists() or path.suffix.lower() == ".lmdb"):
        return open_source(src, labels=labels, split=split)  # refused there: a pack holds its own labels
    with markers_as_classes(given):  # a class named 'None' that --classes names is a class
        table = (
            labels
            if isinstance(labels, LabelTable)
            else read_labels(labels if labels is not None else src, split=split, validate=False, **options)
        )
    report.notes += table.notes
    # with classes=, integer labels are read as they are (a split without class 3 is no gap), then indexed by them
    with markers_as_classes(given):  # integers beside names that --classes names are class names too
        report.problems += table.problems(remap=remap_labels or given is not None)
    report.problems += spelled_twice(table, (root or Path(table.path).parent) if alone else src)
    with markers_as_classes(given):  # read on whatever the labels (with classes=, as they are: no gap to say)
        class_map = table.class_map(remap=remap_labels or given is not None, strict=False)
    if given is not None:
        check_header(given, class_map.classes)
        mine = as_given(class_map.classes, given) if table.kind == "int" else class_map.classes
        unknown = unknown_classes(mine, given, str(table.path), "classes=, --classes", table)
        if unknown:  # a problem; the classes stay the given ones, the labels outside them indexed after them
            report.problems.append(unknown)
            known = set(given)
            extra = [c for c in dict.fromkeys(mine) if c not in known]
            given_count, given = len(given), given + extra
    if split is not None and not len(table) and report.problems:
        split = None  # the split asked for has no rows, which a problem says (an empty split): nothing to select
    images = root if alone else src  # a table alone reads its images under root= (a zip too)
    if zip_encoding and not os.fspath(images or "").lower().endswith(".zip"):
        raise UsageError(f"zip_encoding= (--zip-encoding) names the encoding of a zip's member names; {src} is no "
                         "zip: leave it out")  # fmt: skip
    ds = TableDataset(table, root if alone else src, split=split, class_map=class_map, probe=False,
                      zip_encoding=zip_encoding)  # fmt: skip
    if given is not None and table.kind != "mixed":  # indexed by the classes given, as open_dataset indexes them
        ds.use_classes(given, str(table.path))
        ds._given = True
        ds._given_count = given_count if unknown else len(given)  # the classes given, before any outside them
    report.problems += ds.linked_twice
    ds._every_file = (getattr(table, "whole", None) or table).files  # every split's rows: what "not in the table" means
    ds._whole_table = getattr(table, "whole", None) or table
    return ds


def check_dataset(
    src: str | os.PathLike,
    *,
    labels: str | os.PathLike | LabelTable | None = None,
    split: str | None = None,
    workers: int | None = None,
    distributed: bool = False,
    progress: Callable[[int, int], None] | None = None,
    remap_labels: bool = False,
    root: str | os.PathLike | None = None,
    file_column: str | None = None,
    label_column: str | None = None,
    split_column: str | None = None,
    encoding: str | None = None,
    include_hidden: bool = False,
    bad_samples: str | os.PathLike | None = None,
    classes: object = None,
    zip_encoding: str | None = None,
) -> CheckReport:
    """Read every sample of ``src`` (anything :func:`open_dataset` takes) and report what is wrong.

    With ``distributed`` and an initialised ``torch.distributed`` process group, each rank reads its
    share of the samples and every rank gets the whole report; every rank must then call it (off
    by default, so a check run on rank 0 alone does not wait for the others).

    The table's problems come from :meth:`LabelTable.problems` (all of them, each with its sheet
    and row); this adds what needs the images: files missing, unreadable, or not in the table.
    ``bad_samples``: a bad-samples file written while training; the samples it lists are
    reported as unreadable (with the reason recorded then) without being read again.
    ``classes``: the classes to index by, as ``open_dataset``'s ``classes=`` (the training split's,
    for a split kept in a file of its own); a label not among them is a problem.
    """
    if not isinstance(src, (str, os.PathLike, list, tuple)):
        raise UsageError(f"check_dataset takes a path (a folder, a table, a zip or a pack), got {type(src).__name__}")
    report = CheckReport()
    options = dict(file_column=file_column, label_column=label_column, split_column=split_column,
                   encoding=encoding, include_hidden=include_hidden)  # fmt: skip
    ds = _open_checked(src, labels, split, remap_labels, root, options, report, classes, zip_encoding)
    table_ds = ds if isinstance(ds, TableDataset) else None
    missing = set()
    if table_ds is not None:
        for i in range(len(ds)):
            line = _missing_line(table_ds, i)
            if line is not None:
                missing.add(i)
                report.problems.append(line)
        if missing and len(missing) == len(ds):  # none of its files is there, all in another folder: one line
            table_ds._probe_root(found_only=True)
        # a table none of whose rows could be read (its problems say why) would list every image as not in it;
        # with one split asked for, the other splits' files are expected, an image no row of any split names is not
        if len(table_ds.table):
            unlisted = []
            if table_ds.zip is not None:
                unlisted = _not_in_table_zip(table_ds)
            elif os.path.isdir(table_ds.root):  # the folder given, or a table's own folder when it is alone
                unlisted = _not_in_table(table_ds, table_ds.root)
            whole = getattr(table_ds, "_whole_table", None) or table_ds.table
            if classes is not None and unlisted and len(whole.split_names) <= 1:
                # a split kept in a file of its own (--classes: the training split's): the images of the other
                # splits' files share the folder (PaddleClas' train_list.txt / val_list.txt), expected there; a
                # table with a split column names every split's files, so an image it does not name is a problem
                n = len(unlisted)
                note = (
                    f"{n} image{'s' * (n != 1)} {'inside' if table_ds.zip is not None else 'under'} {table_ds.root} "
                    f"{'are' if n != 1 else 'is'} not in {table_ds.table.path} (the other splits' files, with "
                    "--classes?); not checked"
                )
                report.notes.append(note)
                log.warning("note: %s", note)
            else:
                twin = _form_twin if table_ds.zip is None else lambda ds, u: ""  # noqa: E731
                report.problems += [f"not in the table: {u}{twin(table_ds, u)}" for u in unlisted]
                root = os.fspath(table_ds.root)
                legacy = table_ds.zip is None and undecoded_names(  # a table's 猫.jpg as GBK bytes on disk
                    root, [os.path.relpath(u, root) for u in unlisted], [table_ds.files[i] for i in missing]
                )
                if legacy:
                    report.notes.append(legacy)
                    log.warning("note: %s", legacy)
    report.problems += _pack_name_problems(ds)
    listed = _listed_bad(ds, bad_samples, report) if bad_samples is not None else {}
    todo = [i for i in range(len(ds)) if i not in missing and i not in listed]
    sizes = np.zeros((len(ds), 2), dtype=np.int64)
    ok = np.zeros(len(ds), dtype=bool)
    rank, world = _process_group() if distributed else (0, 1)
    mine = todo[rank::world]
    probes = list(zip(mine, map_ordered(_probe, mine, workers=workers, dataset=ds, per_worker=64, progress=progress)))
    if world > 1:  # every rank read its share; every rank gets the whole report
        import torch.distributed as dist

        parts: list = [None] * world
        dist.all_gather_object(parts, probes)
        probes = sorted(p for part in parts for p in part)
    probes = sorted(probes + [(i, (0, 0, reason, None)) for i, reason in listed.items()])
    digests: dict[int, bytes] = {}
    for i, (h, w, err, digest) in probes:
        if err is not None:
            where = f" ({table_ds.where(i)})" if table_ds is not None else ""
            report.problems.append(f"unreadable: {err}{where}")
        else:
            sizes[i], ok[i], digests[i] = (h, w), True, digest
    report.samples = len(ds)
    targets = np.asarray(ds.targets, dtype=np.int64)
    packed = _pack_splits(ds) if table_ds is None else None
    if table_ds is not None and table_ds.table.split_names:
        splits = table_ds.table.splits
        names, codes = splits.values, splits.codes
    elif packed is not None:  # a pack keeps its source's splits: checked as that source is
        names, codes = packed
    else:
        names, codes = [], np.full(len(ds), -1)
    _same_images(ds, table_ds, digests, targets, lambda i: names[codes[i]] if codes[i] >= 0 else None, report)
    groups = [(name, codes == code) for code, name in enumerate(names)]
    groups = [(name, rows) for name, rows in groups if rows.any()]
    one_split, given_to_pack = _pack_of_one_split(ds) if table_ds is None else (None, False)
    if (codes < 0).any() or not groups:
        groups.append((one_split or "all", codes < 0))  # pack-lmdb --split val: its samples are split 'val'
    report.classes = list(ds.classes)[: getattr(table_ds, "_given_count", None)]  # not the labels outside them
    for name, rows in groups:
        counts = np.bincount(targets[rows], minlength=len(ds.classes))
        counts = counts[: len(report.classes)]  # not the labels outside the classes given (each a problem)
        report.class_counts[name] = {report.classes[k]: int(c) for k, c in enumerate(counts) if c}  # in class order
    given = table_ds is not None and getattr(table_ds, "_given", False)
    if given:  # one split alone in its file (a CSV, a workbook of one sheet): the classes given are another's
        whole = getattr(table_ds, "_whole_table", None) or table_ds.table
        given = len(whole.split_names) <= 1
    a_pack = table_ds is None and _pack_paths(ds) is not None
    if a_pack:  # a pack of one split (or none) whose classes were given, or a shard: another's classes, some absent
        given = packed is None and (given_to_pack or one_split is None)
    if (table_ds is not None and table_ds.table.kind != "mixed") or a_pack:  # mixed: no classes yet
        for name, rows in groups:
            absent = [c for k, c in enumerate(report.classes) if not (targets[rows] == k).any()]
            if absent and name != "all" and not given:
                report.problems.append(f"split {name!r} has no samples of class {', '.join(map(repr, absent))}")
            elif absent and given and rows.any():  # a split in a file of its own, indexed by the training
                # split's classes: a val list often lacks some (no problem), but not without a word
                shown = ", ".join(map(repr, absent[:5])) + (f" and {len(absent) - 5} more" if len(absent) > 5 else "")
                whose = table_ds.table.path if table_ds is not None else _pack_paths(ds)
                how = "it was packed with" if a_pack else "given: classes=, --classes"
                note = (f"{whose} has no samples of class{'es' * (len(absent) > 1)} {shown} (of the "
                        f"{len(report.classes)} classes {how})")  # fmt: skip
                report.notes.append(note)
                log.warning("note: %s", note)
    if ok.any():
        report.height_range = (int(sizes[ok, 0].min()), int(sizes[ok, 0].max()))
        report.width_range = (int(sizes[ok, 1].min()), int(sizes[ok, 1].max()))
    return report


def _pack_name_problems(ds) -> list[str]:
    """A pack's (or its shards') stored sample names against the checksum it recorded of them: a damaged name key
    leaves a sample nameless ('#291' where 'c0/0291.jpg' was), which the images' checksums do not see."""
    from datakit.lmdb import PackError
    from datakit.sources import LmdbDataset

    out = []
    for reader in ds.readers if isinstance(ds, LmdbDataset) else ():
        try:
            reader.check_names()
        except PackError as e:
            out.append(str(e))
    return out


def _pack_of_one_split(ds) -> tuple[str | None, bool]:
    """(the split a pack holds alone, made with ``pack-lmdb --split``, else None; whether its classes were given
    to it, ``--classes``: another split's, of which it may lack some) for a pack or its shards."""
    from datakit.sources import LmdbDataset

    if not isinstance(ds, LmdbDataset):
        return None, False
    metas = [r.meta for r in ds.readers]
    splits = {(m.get("options") or {}).get("split") for m in metas}
    one = splits.pop() if len(splits) == 1 else None
    return (one if isinstance(one, str) else None), any(m.get("classes_given") for m in metas)


def _pack_paths(ds) -> str | None:
    """The pack's path (its first shard's, and how many more) for a pack or shards; None for another source."""
    from datakit.sources import LmdbDataset

    if not isinstance(ds, LmdbDataset):
        return None
    paths = [str(r.path) for r in ds.readers]
    return paths[0] if len(paths) == 1 else f"{paths[0]} (and {len(paths) - 1} more shards)"


def _pack_splits(ds) -> tuple[list[str], np.ndarray] | None:
    """(split names, each sample's split code, -1 for none) of a pack (or shards) with splits; None otherwise."""
    from datakit.pack import _pack_splits as splits_of
    from datakit.sources import LmdbDataset

    if not isinstance(ds, LmdbDataset):
        return None
    names, ids = splits_of(ds)  # ids: 0 none, k the k-th name
    return (names, ids.astype(np.int64) - 1) if names else None


def _missing_line(ds: TableDataset, i: int) -> str | None:
    """The line check gives a sample whose file (or zip member) the table names but is not there, ``missing:``
    included; None where it is there. ``datakit pack-lmdb`` words the sample the same."""
    if ds.exists(i):
        return None
    where = ds.name(i)
    what = "is a folder, not an image:" if ds.zip is None and os.path.isdir(where) else "not found at"
    line = f"missing: {ds.files[i]!r} ({ds.where(i)}) {what} {where}"
    if ds.zip is not None and (twin := ds.zip.case_twin(ds.path(i))) is not None:
        line += f" (there is the member {twin!r}: the names differ in letter case, which a zip keeps apart)"
    if ds.zip is None and what == "not found at":
        twin = _case_twin(where)
        if twin is not None:
            line += f" (there is {twin!r}: the names differ in letter case, which this file system keeps apart)"
        elif not os.path.splitext(where)[1]:
            from datakit.sources import GUESSED_EXTENSIONS

            whole = next((where + e for e in GUESSED_EXTENSIONS if os.path.isfile(where + e)), None)
            if whole is not None:
                line += f" (there is {os.path.basename(whole)!r}: the table's names lack their extension)"
        if twin is None and (spaced := _spaced_twin(where)) is not None:
            folder = str(ds.files[i]).replace("\\", "/").rpartition("/")[0]
            written = f"{folder}/{spaced}" if folder else f"./{spaced}"  # (a leading space kept behind a folder)
            line += (f" (there is {spaced!r}: a table's names are read without the spaces around them; rename the "
                     "file" + (f", or write the name as {written!r} to keep its leading space)"
                               if spaced == spaced.rstrip() else ")"))  # fmt: skip
    return line


def _spaced_twin(path: str) -> str | None:
    """The file a missing ``path`` names but for spaces around its name (' lead.png' on disk, a table's cell
    stripped to 'lead.png'), where there is one such file."""
    from datakit.sources import twin_path

    real = twin_path(path, "spaces")
    return os.path.basename(real) if real is not None and os.path.dirname(real) == os.path.dirname(path) else None


def _case_twin(path: str) -> str | None:
    """The file a missing ``path`` names but for letter case, in its name or in the folders above it (C3.PNG in the
    table, c3.png on disk; SUB/a.png, sub/a.png): the name where only the file name differs, else the whole path;
    None when there is none, or more than one."""
    from datakit.sources import twin_path

    real = twin_path(path, "case")
    if real is None or real == path:
        return None
    return os.path.basename(real) if os.path.isdir(os.path.dirname(path) or ".") else real


def _listed_bad(ds: ImageDataset, path: str | os.PathLike, report: CheckReport) -> dict[int, str]:
    """The samples of ``ds`` a bad-samples file lists, as problem texts; entries naming another
    file at that index (the data changed since) are problems of their own."""
    from datakit.sources import read_bad_samples, recorded_name, same_sample_name

    data = read_bad_samples(path)
    listed = {}
    for e in data["bad"]:
        i = e["index"]
        if 0 <= i < len(ds) and same_sample_name(ds.name(i), e["name"], e.get("cwd")):
            listed[i] = f"{e['name']}: {e['reason']} (listed in {path})"
        else:
            report.problems.append(f"{path}: sample {i} is {recorded_name(e)} there, not in this dataset")
    return listed


def _process_group() -> tuple[int, int]:
    """(rank, world size) of an initialised ``torch.distributed`` group, else (0, 1)."""
    import sys

    dist = sys.modules.get("torch.distributed")  # no group can exist if torch.distributed was never imported
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _dropped(ds: TableDataset) -> list[str]:
    """The files of rows left out for a problem of their own (a blank label), in every split: named by the table."""
    whole = getattr(ds, "_whole_table", None)
    return [*ds.table.dropped_files, *(whole.dropped_files if whole is not None else [])]


def _not_in_table_zip(ds: TableDataset) -> list[str]:
    """The images inside a zip (under its wrapping folder, when the table's names leave it out) that the
    table does not name, as :func:`_not_in_table` for a folder."""
    import unicodedata

    from datakit.archive import member_path

    def key(name: str) -> str:  # a name typed in NFC finds the member stored in NFD (macOS), as reading does
        return unicodedata.normalize("NFC", member_path(name))

    every = getattr(ds, "_every_file", ds.files)  # every split's rows, one split asked for or not
    named = {key(ds.prefix + f) for f in [*ds.files, *every, *_dropped(ds)]}
    out = []
    for m in ds.zip.members:
        path = member_path(m.name)
        parts = path.split("/")
        if (not path.lower().endswith(IMAGE_EXTENSIONS) or not path.startswith(ds.prefix) or parts[0] == "__MACOSX"
                or parts[-1].startswith("._") or key(path) in named):  # fmt: skip
            continue
        out.append(f"{ds.root}:{path}")
    return out


def _form_twin(ds: TableDataset, shown: str) -> str:
    """For an image the table does not name: where its name is a named file's in another Unicode form (two
    files, ``café.png`` composed and decomposed, which look the same; the row took the one of its own form),
    what tells them apart; else nothing."""
    twins = ds.__dict__.get("_nfc_named")
    if twins is None:
        twins = ds._nfc_named = {unicodedata.normalize("NFC", os.path.abspath(ds.path(i))): ds.path(i)
                                 for i in range(len(ds))}  # fmt: skip
    twin = twins.get(unicodedata.normalize("NFC", os.path.abspath(shown)))
    if twin is None or os.path.abspath(twin) == os.path.abspath(shown):
        return ""

    def form(name: str) -> str:
        return next((f for f in ("NFC", "NFD") if unicodedata.is_normalized(f, name)), "neither NFC nor NFD")

    return (
        f" (the row of {twin} names the file whose name is {form(twin)}; this one's is the same name in "
        f"{form(shown)}: two files that look alike, rename or remove one)"
    )


def _not_in_table(ds: TableDataset, src: str | os.PathLike) -> list[str]:
    on_disk: dict[str, str] = {}  # compared absolute (a table may name files by absolute paths), shown as walked
    for dirpath, _, names in os.walk(src):
        for n in names:
            if n.lower().endswith(IMAGE_EXTENSIONS):
                shown = os.path.normpath(os.path.join(dirpath, n))
                on_disk[os.path.normcase(os.path.abspath(shown))] = shown
    named = {os.path.normcase(os.path.abspath(ds.path(i))) for i in range(len(ds))}
    rows = [*getattr(ds, "_every_file", ds.files), *_dropped(ds)]  # every split's rows
    named |= {os.path.normcase(os.path.abspath(resolve_path(f, ds.root))) for f in rows}
    return sorted(on_disk[k] for k in on_disk.keys() - named)


def __getattr__(name: str):
    # preview moved to datakit.preview; the old import path keeps working
    if name in ("preview", "PREVIEW_EXTENSIONS"):
        import importlib

        return getattr(importlib.import_module("datakit.preview"), name)
    raise AttributeError(f"module 'datakit.check' has no attribute {name!r}")
