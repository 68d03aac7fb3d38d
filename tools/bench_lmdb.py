"""LMDB packing against decoding every file once and against copying the files; pack reads against files.

    python tools/bench_lmdb.py [--n 1000] [--workers 2] [--repeat 3] [--cold] [--json]

In one run on the same photo JPEGs, each contender in turn per repeat (so a slow spell of a
shared machine hits all alike):

- ``pack_lmdb`` with ``--workers`` processes, verbatim, validating every image (in this process);
- the same from the command line, ``python -m datakit.cli pack-lmdb`` (process start and imports included);
- one core reading and decoding every file once (``decode_image``, full size, RGB): the peer;
- a plain copy (``shutil.copy`` of every file into a fresh folder);
- with ``--cold``, the copy and both packs again after dropping the page cache (needs root and a
  writable /proc/sys/vm/drop_caches; otherwise reported as not measured);
- random-access reads of the finished pack against reading the files (bytes, and bytes + decode).

Times are the median of the repeats, with the spread (min-max) in images/s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from benchutil import ROOT, dump_json, interleaved_best, machine, make_photo_set, print_table

from datakit.datasets import open_dataset
from datakit.io import decode_image, read_bytes
from datakit.pack import pack_lmdb

DROP = Path("/proc/sys/vm/drop_caches")


def drop_caches() -> bool:
    """Drop the page cache (root only); False where the system does not allow it."""
    try:
        os.sync()
        DROP.write_text("3\n")
        return True
    except OSError:
        return False


def timed(fns: dict[str, Callable[[], object]], repeat: int, before: Callable[[], object] | None = None):
    """Every wall time of each function, run in turn ``repeat`` times (``before`` untimed, before each)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            if before is not None:
                before()
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="also measure after dropping the page cache")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "datakit-bench")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    src = make_photo_set(args.data / f"pack-src-{args.n}", args.n, 480, 800)
    files = sorted(str(p) for p in src.rglob("*.jpg"))
    n, mb = len(files), sum(os.path.getsize(f) for f in files) / 2**20
    work = Path(tempfile.mkdtemp(prefix="bench-lmdb-", dir=args.data))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))

    def decode() -> None:
        for f in files:
            decode_image(read_bytes(f), "rgb")

    def copy() -> None:
        shutil.rmtree(work / "copy", ignore_errors=True)
        (work / "copy").mkdir()
        for k, f in enumerate(files):
            shutil.copy(f, work / "copy" / f"{k}.jpg")

    def pack() -> None:
        shutil.rmtree(work / "p.lmdb", ignore_errors=True)
        pack_lmdb(src, work / "p.lmdb", workers=args.workers)

    def pack_cli() -> None:
        shutil.rmtree(work / "c.lmdb", ignore_errors=True)
        cmd = [sys.executable, "-m", "datakit.cli", "pack-lmdb", str(src), str(work / "c.lmdb"), "--workers",
               str(args.workers), "-q"]  # fmt: skip
        subprocess.run(cmd, check=True, env=env)

    decode()  # warm the page cache
    warm = timed({"decode": decode, "copy": copy, "pack": pack, "pack_cli": pack_cli}, args.repeat)
    cold = None
    if args.cold and drop_caches():
        cold = timed({"copy": copy, "pack": pack, "pack_cli": pack_cli}, args.repeat, before=drop_caches)

    lm, folder = open_dataset(work / "p.lmdb"), open_dataset(src)
    order = np.random.default_rng(0).permutation(n)
    first = time.perf_counter()  # a sample's first read in a process checks its CRC-32; later reads skip it
    for i in order:
        lm.read(int(i))
    first = time.perf_counter() - first
    r = interleaved_best({
        "lmdb_read": lambda: [lm.read(int(i)) for i in order],
        "file_read": lambda: [folder.read(int(i)) for i in order],
        "lmdb_dec": lambda: [lm[int(i)] for i in order[:300]],
        "file_dec": lambda: [folder[int(i)] for i in order[:300]],
    }, 3)  # fmt: skip
    pack_mb = (work / "p.lmdb" / "data.mdb").stat().st_size / 2**20
    shutil.rmtree(work)

    def row(what: str, ts: list[float], peer: list[float], peer_name: str) -> list[object]:
        med = statistics.median(ts)
        rates = sorted(n / t for t in ts)
        return [what, round(mb / med, 1), round(n / med), f"{round(rates[0])}-{round(rates[-1])}",
                f"{statistics.median(peer) / med:.2f}x {peer_name}"]  # fmt: skip

    w = args.workers
    rows = [
        row(f"pack_lmdb ({w} workers, verbatim, every image validated)", warm["pack"], warm["decode"], "decode"),
        row(f"datakit pack-lmdb CLI ({w} workers; start and imports included)", warm["pack_cli"], warm["decode"],
            "decode"),
        row("one core decoding every file once (the peer)", warm["decode"], warm["decode"], "decode"),
        row("plain copy (shutil.copy of every file)", warm["copy"], warm["decode"], "decode"),
        row(f"pack_lmdb ({w} workers) vs the copy", warm["pack"], warm["copy"], "copy"),
    ]  # fmt: skip
    if cold is not None:
        rows += [
            row("cold cache: pack_lmdb", cold["pack"], cold["copy"], "copy"),
            row("cold cache: datakit pack-lmdb CLI", cold["pack_cli"], cold["copy"], "copy"),
            row("cold cache: plain copy", cold["copy"], cold["copy"], "copy"),
        ]
    reads = [
        ["random read bytes: LmdbDataset, first read (CRC-32 checked)", round(mb / first, 1), round(n / first), "",
         f"{r['file_read'] / first:.2f}x files"],
        ["random read bytes: LmdbDataset, later reads", round(mb / r["lmdb_read"], 1), round(n / r["lmdb_read"]), "",
         f"{r['file_read'] / r['lmdb_read']:.2f}x files"],
        ["random read bytes: file folder", round(mb / r["file_read"], 1), round(n / r["file_read"]), "", "1.00x files"],
        ["random read + decode: LmdbDataset", "", round(300 / r["lmdb_dec"]), "",
         f"{r['file_dec'] / r['lmdb_dec']:.2f}x files"],
        ["random read + decode: file folder", "", round(300 / r["file_dec"]), "", "1.00x files"],
    ]  # fmt: skip
    cold_note = "measured" if cold is not None else ("not measured (--cold not given)" if not args.cold else
                                                     "not measured: the page cache cannot be dropped here")  # fmt: skip
    if args.json:
        dump_json({"machine": machine(), "files": n, "mb": mb, "pack_mb": pack_mb, "cold": cold_note,
                   "times": {"warm": warm, "cold": cold},
                   "rows": [dict(zip(["what", "mb_per_s", "images_per_s", "spread", "ratio"], x)) for x in rows + reads]})  # fmt: skip
        return
    print_table(f"{n} photo JPEGs, {mb:.0f} MB (pack: {pack_mb:.0f} MB file); median of {args.repeat}, cold cache: "
                f"{cold_note}", ["what", "MB/s", "images/s", "spread (images/s)", "ratio"], rows + reads)  # fmt: skip
    print(f"\nmachine: {machine()}")


if __name__ == "__main__":
    main()
