"""LMDB packing and reading against plain files.

    python tools/bench_lmdb.py [--n 2000] [--workers 2] [--json]

In one run on the same photo JPEGs: ``pack_lmdb`` throughput (MB/s; it reads, validates by
decoding, and writes) against a plain copy of the files, and random-access reads through
``LmdbDataset`` against reading the file folder (bytes only, and bytes + decode).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np
from benchutil import dump_json, interleaved_best, machine, make_photo_set, print_table

from datakit.datasets import open_dataset
from datakit.pack import pack_lmdb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "datakit-bench")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    src = make_photo_set(args.data / "zip-src", args.n, 320, 640)
    files = sorted(src.rglob("*.jpg"))
    mb = sum(f.stat().st_size for f in files) / 2**20
    work = Path(tempfile.mkdtemp(prefix="bench-lmdb-", dir=args.data))

    def pack():
        shutil.rmtree(work / "p.lmdb", ignore_errors=True)
        pack_lmdb(src, work / "p.lmdb", workers=args.workers)

    def pack_small():
        shutil.rmtree(work / "s.lmdb", ignore_errors=True)
        pack_lmdb(src, work / "s.lmdb", workers=args.workers, max_size=256)

    def copy():
        shutil.rmtree(work / "copy", ignore_errors=True)
        shutil.copytree(src, work / "copy")

    t = interleaved_best({"pack": pack, "copy": copy, "small": pack_small}, 3)
    lm, folder = open_dataset(work / "p.lmdb"), open_dataset(src)
    order = np.random.default_rng(0).permutation(len(folder))
    r = interleaved_best({
        "lmdb_read": lambda: [lm.read(int(i)) for i in order],
        "file_read": lambda: [folder.read(int(i)) for i in order],
        "lmdb_dec": lambda: [lm[int(i)] for i in order[:500]],
        "file_dec": lambda: [folder[int(i)] for i in order[:500]],
    }, 3)  # fmt: skip
    n = len(files)
    rows = [
        [f"pack-lmdb ({args.workers} workers, verbatim)", round(mb / t["pack"], 1), round(n / t["pack"]), f"{t['copy'] / t['pack']:.2f}x"],
        [f"pack-lmdb --max-size 256 ({args.workers} workers)", round(mb / t["small"], 1), round(n / t["small"]), f"{t['copy'] / t['small']:.2f}x"],
        ["plain copy of the files (shutil.copytree)", round(mb / t["copy"], 1), round(n / t["copy"]), "1.00x"],
        ["random read bytes: LmdbDataset", round(mb / r["lmdb_read"], 1), round(n / r["lmdb_read"]), f"{r['file_read'] / r['lmdb_read']:.2f}x"],
        ["random read bytes: file folder", round(mb / r["file_read"], 1), round(n / r["file_read"]), "1.00x"],
        ["random read + decode: LmdbDataset", "", round(500 / r["lmdb_dec"]), f"{r['file_dec'] / r['lmdb_dec']:.2f}x"],
        ["random read + decode: file folder", "", round(500 / r["file_dec"]), "1.00x"],
    ]  # fmt: skip
    size = (work / "p.lmdb" / "data.mdb").stat().st_size / 2**20
    small = (work / "s.lmdb" / "data.mdb").stat().st_size / 2**20
    shutil.rmtree(work)
    if args.json:
        dump_json({"machine": machine(), "files": n, "mb": mb, "pack_mb": size, "small_pack_mb": small,
                   "rows": [dict(zip(["what", "mb_per_s", "files_per_s", "ratio"], x)) for x in rows]})  # fmt: skip
        return
    print_table(f"{n} JPEGs, {mb:.0f} MB (pack: {size:.0f} MB file; --max-size 256: {small:.0f} MB)",
                ["what", "MB/s", "images/s", "vs peer"], rows)  # fmt: skip
    print(f"\nmachine: {machine()}")


if __name__ == "__main__":
    main()
