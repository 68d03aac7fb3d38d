"""Label tables and dataset indexing at scale.

    python tools/bench_labels.py [--rows 100000] [--entries 1000000] [--json]

1. A 3-sheet workbook of ``rows`` rows in all, written by openpyxl: ``read_labels`` with the
   calamine engine against the openpyxl engine (pandas' default), in one run.
2. Indexing ``entries`` synthetic files: datakit's compact index (StringArray + numpy targets)
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
from benchutil import best_time, dump_json, machine, print_table

from datakit.datasets import StringArray
from datakit.labels import read_labels


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
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report: dict = {"machine": machine()}
    with tempfile.TemporaryDirectory() as tmp:
        book = Path(tmp) / "labels.xlsx"
        t = time.perf_counter()
        write_workbook(book, args.rows)
        report["write_s"] = time.perf_counter() - t
        t_cal = best_time(lambda: read_labels(book, engine="calamine"), 3)
        t_opx = best_time(lambda: read_labels(book, engine="openpyxl"), 1)
        assert read_labels(book, engine="calamine").files == read_labels(book, engine="openpyxl").files
    report["xlsx"] = {"rows": args.rows, "calamine_s": t_cal, "openpyxl_s": t_opx, "speedup": t_opx / t_cal}
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
    print_table(
        f"read_labels on a 3-sheet workbook, {args.rows} rows",
        ["engine", "seconds", "rows/s", "vs openpyxl"],
        [["calamine (datakit default)", round(t_cal, 2), round(args.rows / t_cal), f"{t_opx / t_cal:.1f}x"],
         ["openpyxl (pandas' default)", round(t_opx, 2), round(args.rows / t_opx), "1.0x"]],
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
