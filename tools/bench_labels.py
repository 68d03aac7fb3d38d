"""Label tables and dataset indexing at scale.

    python tools/bench_labels.py [--lines 1000000] [--rows 100000] [--entries 1000000] [--json]

1. A GBK CSV of ``lines`` rows (file, label, split; Chinese names) and a ``path label`` list of
   ``lines`` lines: ``read_labels`` (detecting the encoding, typing, every validation) against
   ``pandas.read_csv`` told the encoding (which parses only), on the same files in the same run.
2. A 3-sheet workbook of ``rows`` rows in all, written by openpyxl: ``read_labels`` against
   ``pandas.read_excel(sheet_name=None)`` with pandas' default engine (openpyxl).
3. Indexing ``entries`` synthetic files: datakit's compact index (StringArray + numpy targets)
   against a list of (path, label) tuples, for build time and the memory a forked DataLoader
   worker ends up owning after touching every entry (copy-on-read).
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from benchutil import best_time, dump_json, interleaved_best, machine, print_table

from datakit.labels import StringArray, read_labels


def write_workbook(path: Path, rows: int) -> None:
    from openpyxl import Workbook

    wb = Workbook(write_only=True)
    per = rows // 3
    for split in ("train", "val", "test"):
        ws = wb.create_sheet(split)
        ws.append(["文件名", "标签"])
        for i in range(per):
            ws.append([f"类别_{i % 100}/图片_{split}_{i:07d}.jpg", f"类别_{i % 100}"])
    wb.save(path)


def write_gbk_csv(path: Path, lines: int) -> None:
    rows = "".join(f"类别_{i % 100}/图片_{i:07d}.jpg,类别_{i % 100},{'val' if i % 10 == 0 else 'train'}\n"
                   for i in range(lines))  # fmt: skip
    path.write_bytes(("文件名,标签,split\n" + rows).encode("gbk"))


def write_list(path: Path, lines: int) -> None:
    rows = "".join(f"train/n{i % 1000:08d}/n{i % 1000:08d}_{i}.JPEG {i % 1000}\n" for i in range(lines))
    path.write_text(rows, encoding="utf-8")


def _private_kb() -> int:
    with open("/proc/self/smaps_rollup") as f:
        return sum(int(line.split()[1]) for line in f if line.startswith(("Private_Dirty", "Private_Clean")))


def worker_memory(build) -> int:
    """KiB a forked child owns privately after reading every entry of what ``build`` made."""
    index = build()
    gc.collect()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        before = _private_kb()
        n = 0
        for i in range(len(index)):
            n += len(index[i][0]) if isinstance(index, list) else len(index[i])
        os.write(w, str(_private_kb() - before).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    os.close(w)
    return int(os.read(r, 64))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import pandas as pd

    report: dict = {"machine": machine()}
    with tempfile.TemporaryDirectory() as tmp:
        csv, lst = Path(tmp) / "labels.csv", Path(tmp) / "train.txt"
        write_gbk_csv(csv, args.lines)
        write_list(lst, args.lines)
        assert len(read_labels(csv)) == len(read_labels(lst)) == args.lines
        text = interleaved_best({
            "csv_datakit": lambda: read_labels(csv),
            "csv_pandas": lambda: pd.read_csv(csv, encoding="gbk"),
            "list_datakit": lambda: read_labels(lst),
            "list_pandas": lambda: pd.read_csv(lst, sep=" ", header=None, encoding="utf-8"),
        }, repeat=3)  # fmt: skip
        book = Path(tmp) / "labels.xlsx"
        t = time.perf_counter()
        write_workbook(book, args.rows)
        report["write_s"] = time.perf_counter() - t
        t_dk = best_time(lambda: read_labels(book), 3)
        t_pd = best_time(lambda: pd.read_excel(book, sheet_name=None), 1)
        assert read_labels(book).files.tolist() == read_labels(book, engine="openpyxl").files.tolist()
    report["text"] = {"lines": args.lines, **text}
    report["xlsx"] = {"rows": args.rows, "datakit_s": t_dk, "pandas_openpyxl_s": t_pd, "speedup": t_pd / t_dk}
    names = [f"类别_{i % 1000}/图片_{i:08d}.jpg" for i in range(args.entries)]
    labels = [i % 1000 for i in range(args.entries)]
    t_ours = best_time(lambda: (StringArray(names), np.asarray(labels, dtype=np.int64)), 1)
    t_list = best_time(lambda: list(zip(names, labels)), 1)
    m_ours = worker_memory(lambda: StringArray(names))
    m_list = worker_memory(lambda: [(str(n), int(x)) for n, x in zip(names, labels)])
    report["index"] = {"entries": args.entries, "datakit_build_s": t_ours, "list_build_s": t_list,
                       "datakit_worker_kib": m_ours, "list_worker_kib": m_list}  # fmt: skip
    if args.json:
        dump_json(report)
        return
    n = args.lines
    print_table(
        f"read_labels against pandas on the same files, {n} lines (best of 3)",
        ["file", "reader", "seconds", "lines/s", "vs pandas"],
        [["GBK CSV (file,label,split)", "read_labels (detects GBK, validates)", round(text["csv_datakit"], 3),
          round(n / text["csv_datakit"]), f"{text['csv_pandas'] / text['csv_datakit']:.2f}x"],
         ["", "pandas.read_csv(encoding='gbk')", round(text["csv_pandas"], 3), round(n / text["csv_pandas"]), "1.00x"],
         ["path label list", "read_labels (validates)", round(text["list_datakit"], 3),
          round(n / text["list_datakit"]), f"{text['list_pandas'] / text['list_datakit']:.2f}x"],
         ["", "pandas.read_csv(sep=' ', header=None)", round(text["list_pandas"], 3),
          round(n / text["list_pandas"]), "1.00x"]],
    )  # fmt: skip
    print_table(
        f"read_labels on a 3-sheet workbook, {args.rows} rows",
        ["reader", "seconds", "rows/s", "vs pandas"],
        [["read_labels (calamine, validates)", round(t_dk, 3), round(args.rows / t_dk), f"{t_pd / t_dk:.1f}x"],
         ["pandas.read_excel (default engine: openpyxl)", round(t_pd, 2), round(args.rows / t_pd), "1.0x"]],
    )  # fmt: skip
    print_table(
        f"indexing {args.entries} entries",
        ["index", "build s", "worker private memory after one pass (MiB)"],
        [["datakit StringArray + int64 targets", round(t_ours, 2), round(m_ours / 1024, 1)],
         ["list of (path, label) tuples", round(t_list, 2), round(m_list / 1024, 1)]],
    )  # fmt: skip
    print(f"\nmachine: {report['machine']}")


if __name__ == "__main__":
    main()
