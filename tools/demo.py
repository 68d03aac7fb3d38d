"""The demo behind ``make demo``: datakit's main jobs, run on the committed samples/ folder."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from datakit.cli import print_table
from datakit.io import IMAGE_EXTENSIONS, imread


def show_images(root: Path) -> None:
    files = sorted(p for p in (root / "images").rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS)
    print(f"== 1. every sample image read with datakit.io.imread(mode='rgb'): {len(files)} files")
    rows = []
    for p in files:
        img = imread(p, "rgb")
        rows.append([p.relative_to(root / "images").as_posix(), str(img.shape), str(img.dtype)])
    print_table(["name", "shape", "dtype"], rows)


def show_zip(root: Path, tmp: Path) -> None:
    from datakit.archive import detect_encoding, unzip

    archive = root / "images.zip"
    guess = detect_encoding(archive)
    print(f"\n== 2. {archive.name}: GBK names without the UTF-8 flag, as Chinese Windows writes them")
    print(f"detected encoding: {guess.encoding} ({guess.reason})")
    report = unzip(archive, tmp / "unzipped")
    same = sorted(report.extracted) == sorted(
        p.relative_to(root / "images").as_posix() for p in (root / "images").rglob("*") if p.is_file()
    )
    print(f"extracted {len(report.extracted)} files; names identical to samples/images: {same}")


def show_datasets(root: Path) -> None:
    from datakit.datasets import open_dataset
    from datakit.labels import read_labels

    table = read_labels(root / "labels.xlsx")
    print(f"\n== 3. labels.xlsx: sheets {table.split_names}, columns {table.file_column!r} / {table.label_column!r}")
    rows = []
    for what, ds in (
        ("folder images/", open_dataset(root / "images")),
        ("zip images.zip (read in place)", open_dataset(root / "images.zip")),
        ("folder + labels.xlsx, split train", open_dataset(root / "images", labels=table, split="train")),
        ("folder + labels.xlsx, split val", open_dataset(root / "images", labels=table, split="val")),
    ):
        img, target = ds[0]
        rows.append([what, type(ds).__name__, len(ds), ", ".join(ds.classes), f"{img.shape} -> {ds.classes[target]}"])
    print_table(["source", "dataset", "samples", "classes", "first sample"], rows)


def show_pack_and_stats(root: Path, tmp: Path) -> None:
    from datakit.check import check_dataset
    from datakit.lmdb import lmdb_info, verify_lmdb
    from datakit.pack import pack_lmdb
    from datakit.stats import compute_stats

    out = tmp / "samples.lmdb"
    report = pack_lmdb(root / "images", out, labels=root / "labels.xlsx", workers=2)
    info = lmdb_info(out)
    print(f"\n== 4. pack-lmdb: {report.count} samples into {out.name} ({info['file_bytes'] / 1e6:.2f} MB), "
          f"splits {info['split_counts']}, verify problems: {len(verify_lmdb(out))}")  # fmt: skip
    st = compute_stats(root / "images", workers=2)
    print(f"\n== 5. exact stats over {st.pixels} pixels per channel ({st.order}):")
    print("   " + st.code())
    check = check_dataset(root / "images", labels=root / "labels.xlsx", workers=2)
    print(f"\n== 6. check: {check.samples} samples, {len(check.problems)} problems, "
          f"heights {check.height_range}, widths {check.width_range}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("samples", type=Path, nargs="?", default=Path(__file__).resolve().parents[1] / "samples")
    args = parser.parse_args(argv)
    show_images(args.samples)
    with tempfile.TemporaryDirectory(prefix="datakit-demo-") as tmp:
        show_zip(args.samples, Path(tmp))
        show_datasets(args.samples)
        show_pack_and_stats(args.samples, Path(tmp))
    print("\n== 7. the training input pipeline against torchvision on samples/ (a short run of tools/bench_loader.py;")
    print("   24 small photos only show the mechanics: see docs/benchmarks.md for the real comparison)")
    sys.stdout.flush()
    import subprocess

    bench = Path(__file__).resolve().parent / "bench_loader.py"
    cmd = [sys.executable, str(bench), "--src", str(args.samples / "images"), "--epochs", "4", "--no-lmdb"]
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
