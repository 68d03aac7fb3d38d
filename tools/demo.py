"""The demo behind ``make demo``: datakit's main jobs, run on the committed samples/ folder.

    python tools/demo.py [SAMPLES] [--out demo-out] [--no-bench]

Everything it writes stays in the output folder (``demo-out/`` by default, ignored by git) to be
inspected afterwards: the unzipped archive, an LMDB pack and a contact sheet. A run replaces the
folder of an earlier run, and refuses a folder that an earlier run did not write.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a clone without installing

from datakit.cli import print_table  # noqa: E402
from datakit.errors import UsageError  # noqa: E402
from datakit.io import IMAGE_EXTENSIONS, imread  # noqa: E402

MARKER = ".datakit-demo"
STEPS = 8


def step(k: int, title: str, why: str = "") -> None:
    print(f"\n== step {k} of {STEPS}: {title}")
    if why:
        print(f"   {why}")


def prepare(out: Path) -> Path:
    """An empty output folder: new, or one an earlier demo run wrote (it carries the marker)."""
    if out.exists():
        if not (out / MARKER).is_file():
            raise UsageError(f"{out}: exists and was not written by the demo; pass --out with another folder")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("written by tools/demo.py; replaced on the next run\n", encoding="utf-8")
    return out


def show_images(samples: Path) -> None:
    files = sorted(p for p in (samples / "images").rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS)
    step(1, f"read every sample image: {len(files)} files, some with Chinese names",
         "datakit.io.imread(path, 'rgb') reads any path (cv2.imread returns None on these) as uint8 RGB")  # fmt: skip
    rows = []
    for p in files:
        img = imread(p, "rgb")
        rows.append([p.relative_to(samples / "images").as_posix(), f"{img.shape[0]} x {img.shape[1]} x {img.shape[2]}",
                     str(img.dtype)])  # fmt: skip
    print_table(["file", "height x width x channels", "dtype"], rows)


def show_zip(samples: Path, out: Path) -> Path:
    from datakit.archive import read_members, unzip

    archive = samples / "images.zip"
    dest = out / "images"
    members, guess = read_members(archive, "auto")
    folders = sum(m.is_dir for m in members)
    step(2, f"unzip {archive.name} into {dest}",
         "made the way Chinese Windows makes zips: GBK names without the UTF-8 flag (unzip shows mojibake)")  # fmt: skip
    report = unzip(archive, dest)
    print(f"   names decoded as {guess.encoding}: {len(members)} names in the archive "
          f"({len(members) - folders} files and {folders} folders), all plausible as {guess.encoding}")  # fmt: skip
    same = sorted(report.extracted) == sorted(
        p.relative_to(samples / "images").as_posix() for p in (samples / "images").rglob("*") if p.is_file()
    )
    print(f"   extracted {len(report.extracted)} files; the same names as samples/images: {'yes' if same else 'NO'}")
    return dest


def show_datasets(samples: Path, unzipped: Path) -> None:
    from datakit.datasets import open_dataset
    from datakit.labels import read_labels

    table = read_labels(samples / "labels.xlsx")
    step(3, "open_dataset: one entry point for every source",
         f"labels.xlsx has sheets {', '.join(table.split_names)} (columns {table.file_column} / {table.label_column}); "
         "each dataset below is lazy: it reads an image only when indexed")  # fmt: skip
    rows = []
    for what, ds in (
        ("folder of class folders", open_dataset(unzipped)),
        ("the zip, read in place", open_dataset(samples / "images.zip")),
        ("folder + labels.xlsx, split train", open_dataset(unzipped, labels=table, split="train")),
        ("folder + labels.xlsx, split val", open_dataset(unzipped, labels=table, split="val")),
    ):
        img, target = ds[0]
        rows.append([what, type(ds).__name__, len(ds), ", ".join(ds.classes),
                     f"{img.shape[0]} x {img.shape[1]}, class {target} ({ds.classes[target]})"])  # fmt: skip
    print_table(["source", "dataset", "samples", "classes", "sample 0"], rows)


def show_check_and_stats(samples: Path, unzipped: Path) -> None:
    from datakit.check import check_dataset
    from datakit.stats import compute_stats

    check = check_dataset(unzipped, labels=samples / "labels.xlsx", workers=2)
    step(4, "datakit check: read every image and every label row",
         f"{check.samples} samples, {len(check.problems)} problems; heights {check.height_range[0]}-"
         f"{check.height_range[1]} px, widths {check.width_range[0]}-{check.width_range[1]} px")  # fmt: skip
    splits = list(check.class_counts)
    classes = sorted({c for counts in check.class_counts.values() for c in counts})
    print_table(["class", *splits], [[c, *(check.class_counts[s].get(c, 0) for s in splits)] for c in classes])
    for problem in check.problems:
        print(f"   problem: {problem}")
    from datakit.datasets import open_dataset

    train = open_dataset(unzipped, labels=samples / "labels.xlsx", split="train")
    st = compute_stats(train, workers=2)
    step(5, "datakit stats: the exact mean and std of the training split",
         f"over all {st.pixels} pixels of each channel of {st.count} images, ready to paste:")  # fmt: skip
    print("   " + st.code())


def show_pack(samples: Path, unzipped: Path, out: Path) -> Path:
    from datakit.lmdb import lmdb_info, verify_lmdb
    from datakit.pack import pack_lmdb

    pack = out / "train.lmdb"
    report = pack_lmdb(unzipped, pack, labels=samples / "labels.xlsx", split="train", workers=2)
    info = lmdb_info(pack)
    problems = verify_lmdb(pack)
    step(6, f"datakit pack-lmdb: the training split in one file, {pack}",
         "one LMDB file reads faster than many small files, resumes after kill -9, and carries checksums")  # fmt: skip
    print(f"   {report.count} images, {report.bytes_in / 1e6:.2f} MB read, {info['file_bytes'] / 1e6:.2f} MB on disk; "
          f"per class: {', '.join(f'{k} {v}' for k, v in info['class_counts'].items())}")  # fmt: skip
    print(f"   verify: every checksum and decode checked, {len(problems)} problems")
    print(f"   look inside: datakit info {pack}")
    return pack


def show_preview(pack: Path, out: Path) -> None:
    from datakit.datasets import open_dataset
    from datakit.preview import preview
    from datakit.transforms import train_pipeline

    ds = open_dataset(pack, transform=train_pipeline(224))
    result = preview(ds, out / "preview.png", n=16)
    step(7, f"datakit preview: what the model will see, {result.path}",
         f"{result.samples} samples after the train pipeline (random crop and flip), captioned with index and class")  # fmt: skip
    if result.hint:
        print(f"   {result.hint}")


def show_pipeline(samples: Path) -> int:
    step(8, "training input, datakit against torchvision, on these 24 small photos",
         "a short run of tools/bench_loader.py; 24 tiny photos only show the mechanics, "
         "docs/benchmarks.md has the real comparison")  # fmt: skip
    sys.stdout.flush()
    cmd = [sys.executable, str(ROOT / "tools" / "bench_loader.py"), "--src", str(samples.resolve() / "images"),
           "--epochs", "4", "--no-lmdb", "--json"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT / "tools")
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return proc.returncode
    report = json.loads(proc.stdout)
    (label, results), = report["sets"].items()  # fmt: skip

    def find(*words: str) -> float | None:
        return next((v for k, v in results.items() if all(w in k for w in words)), None)

    v1, v2, decode = find("v1"), find("v2"), find("decode only", "full size")
    rows = []
    for name, rate in results.items():
        name = name.split(". ", 1)[1] if name[:1].isdigit() and ". " in name else name
        rows.append([name, f"{rate:.0f}", f"{rate / v1:.2f}x" if v1 else "", f"{rate / v2:.2f}x" if v2 else "",
                     f"{rate / decode:.2f}x" if decode else ""])  # fmt: skip
    print_table(["pipeline", "images/s", "vs torchvision v1", "vs torchvision v2", "vs decoding only"], rows)
    print("   each ratio divides a row's images/s by the images/s of torchvision's ImageFolder with v1 (PIL)")
    print("   or v2 transforms, or of the same workers only decoding every image at full size")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("samples", type=Path, nargs="?", default=ROOT / "samples", help="the samples folder")
    parser.add_argument("--out", type=Path, default=Path("demo-out"), help="where the outputs stay (default demo-out)")
    parser.add_argument("--no-bench", action="store_true", help="skip the pipeline comparison (step 8)")
    args = parser.parse_args(argv)
    try:
        out = prepare(args.out)
    except UsageError as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        return 2
    show_images(args.samples)
    unzipped = show_zip(args.samples, out)
    show_datasets(args.samples, unzipped)
    show_check_and_stats(args.samples, unzipped)
    pack = show_pack(args.samples, unzipped, out)
    show_preview(pack, out)
    rc = 0 if args.no_bench else show_pipeline(args.samples)
    print(f"\nThe outputs stay in {out}/: images/ (the unzipped archive), train.lmdb (the pack), preview.png.")
    print(f"Try: datakit info {out}/train.lmdb; datakit check {out}/images --labels {args.samples}/labels.xlsx")
    return rc


if __name__ == "__main__":
    sys.exit(main())
