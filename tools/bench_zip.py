"""Zip extraction and in-place reading: datakit against zipfile.extractall and extracted files.

    python tools/bench_zip.py [--n 2000] [--json]

Builds one archive of real photo JPEGs under GBK names without the UTF-8 flag (as Chinese
Windows writes them), then, in one run: extraction with ``datakit.archive.unzip`` against
Python's ``zipfile.extractall`` (which writes mojibake names), and random reads through
``ZipDataset`` against reading the extracted files.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import zipfile
from pathlib import Path

import numpy as np
from benchutil import dump_json, interleaved_best, machine, make_photo_set, print_table

from datakit.archive import unzip
from datakit.datasets import open_dataset
from datakit.testing import ZipEntry, build_zip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "datakit-bench")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    photos = make_photo_set(args.data / "zip-src", args.n, 320, 640)
    files = sorted(photos.rglob("*.jpg"))
    archive = args.data / "gbk.zip"
    if not archive.exists():
        entries = [ZipEntry(name=f.relative_to(photos).as_posix().encode("gbk"), data=f.read_bytes(), method=0)
                   for f in files]  # fmt: skip
        archive.write_bytes(build_zip(entries))
    total = archive.stat().st_size
    work = Path(tempfile.mkdtemp(prefix="bench-zip-", dir=args.data))

    def ours():
        shutil.rmtree(work / "a", ignore_errors=True)
        assert unzip(archive, work / "a").ok

    def peer():
        shutil.rmtree(work / "b", ignore_errors=True)
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(work / "b")

    t = interleaved_best({"ours": ours, "peer": peer}, 7)
    t_ours, t_peer = t["ours"], t["peer"]
    ds_zip = open_dataset(archive)
    ds_dir = open_dataset(work / "a")
    order = np.random.default_rng(0).permutation(len(ds_zip))
    t = interleaved_best({
        "zread": lambda: [ds_zip.read(int(i)) for i in order],
        "fread": lambda: [ds_dir.read(int(i)) for i in order],
        "zdec": lambda: [ds_zip[int(i)] for i in order[:500]],
        "fdec": lambda: [ds_dir[int(i)] for i in order[:500]],
    }, 3)  # fmt: skip
    t_zread, t_fread, t_zdec, t_fdec = t["zread"], t["fread"], t["zdec"], t["fdec"]
    shutil.rmtree(work)
    mb = total / 2**20
    rows = [
        ["extract: datakit unzip (GBK names)", round(mb / t_ours, 1), round(len(files) / t_ours), f"{t_peer / t_ours:.2f}x"],
        ["extract: zipfile.extractall (mojibake)", round(mb / t_peer, 1), round(len(files) / t_peer), "1.00x"],
        ["read bytes: ZipDataset (in place)", round(mb / t_zread, 1), round(len(files) / t_zread), f"{t_fread / t_zread:.2f}x"],
        ["read bytes: extracted files", round(mb / t_fread, 1), round(len(files) / t_fread), "1.00x"],
        ["read + decode: ZipDataset", "", round(500 / t_zdec), f"{t_fdec / t_zdec:.2f}x"],
        ["read + decode: extracted files", "", round(500 / t_fdec), "1.00x"],
    ]  # fmt: skip
    if args.json:
        dump_json({"machine": machine(), "files": len(files), "mb": mb,
                   "rows": [dict(zip(["what", "mb_per_s", "files_per_s", "ratio"], r)) for r in rows]})  # fmt: skip
        return
    print_table(f"{len(files)} JPEGs, {mb:.0f} MB, GBK names, stored", ["what", "MB/s", "files/s", "vs peer"], rows)
    print(f"\nmachine: {machine()}")


if __name__ == "__main__":
    main()
