"""The standard classification input pipeline, datakit against torchvision, head to head.

    python tools/bench_loader.py [--n 4000] [--large 500] [--workers 2] [--batch-size 64] [--json]
    python tools/bench_loader.py --src samples/images --epochs 3      (the short version in make demo)

Same photos, batch size and worker count for every contender, in one run, images/s after the
first batch:
1. torchvision ImageFolder + v1 transforms (PIL, RandomResizedCrop, flip, ToTensor, Normalize);
2. torchvision ImageFolder(loader=decode_image) + v2 transforms (ToDtype, Normalize);
3. datakit from the folder (train_pipeline: crop drawn from the header, JPEG decoded at the
   scale the crop needs, uint8 batches): as they go to the GPU, where CUDAPrefetcher normalises
   them, and with a batched Normalize in the main process, as CPU training would use them;
4. datakit from an LMDB pack, and from a pack made with --max-size 512;
5. decode only (full-size decode of every image in the same workers): the machine's limit;
6. decode only, at the DCT scale each random crop needs (same draws, no resize): the limit of
   any pipeline on the same decoder for this crop distribution;
7. decode only, everything at 1/8 scale: the floor that reading the entropy-coded data sets
   for any pipeline that decodes every file.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import torch
from benchutil import dump_json, machine, make_photo_set, print_table
from torch.utils.data import DataLoader, Dataset
from torchvision import datasets, transforms
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms import v2

from datakit.datasets import open_dataset
from datakit.io import decode_image as dk_decode
from datakit.io import read_bytes
from datakit.loader import create_loader
from datakit.pack import pack_lmdb
from datakit.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Normalize,
    _decode_scaled,
    _factor,
    _jpeg_header,
    train_pipeline,
)

SIZE = 224


def tv_decode(path: str) -> torch.Tensor:
    return decode_image(path, mode=ImageReadMode.RGB)


class DecodeOnly(Dataset):
    def __init__(self, files: list[str], max_size: int | None = None) -> None:
        self.files, self.max_size = files, max_size

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> int:
        dk_decode(read_bytes(self.files[i]), "rgb", max_size=self.max_size)
        return 0


class DecodeAtCropScale(Dataset):
    """Draw the crop as train_pipeline does and decode at the DCT scale it needs, nothing else:
    the limit for this crop distribution of any pipeline built on the same decoder."""

    def __init__(self, files: list[str]) -> None:
        self.files, self.pipe = files, train_pipeline(SIZE, normalize=False)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> int:
        data = read_bytes(self.files[i])
        header = _jpeg_header(data, "rgb")
        if header is None:  # not a JPEG: decoded whole, as the pipeline does
            dk_decode(data, "rgb")
            return 0
        h, w = header
        _, _, ch, cw = self.pipe.crop.get_params(h, w)
        _decode_scaled(data, "rgb", None, h, w, _factor(ch, cw, SIZE, SIZE))
        return 0


def _count(batch) -> int:
    return len(batch)


def measure(loader, images: int, post=None) -> float:
    """images/s over ``images`` images after the first batch (workers started, imports paid)."""
    it = iter(loader)
    next(it)
    done, t = 0, time.perf_counter()
    while done < images:
        for batch in it:
            if post is not None:
                batch = post(batch)
            done += batch if isinstance(batch, int) else len(batch[0])
            if done >= images:
                break
        else:
            it = iter(loader)
    return done / (time.perf_counter() - t)


def run_set(root: Path, work: Path, workers: int, bs: int, images: int, packs: bool) -> dict[str, float]:
    dl = dict(batch_size=bs, num_workers=workers, shuffle=True, persistent_workers=workers > 0,
              **({"prefetch_factor": 4} if workers else {}))  # fmt: skip
    v1 = transforms.Compose([transforms.RandomResizedCrop(SIZE), transforms.RandomHorizontalFlip(),
                             transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])  # fmt: skip
    tv2 = v2.Compose([v2.RandomResizedCrop(SIZE, antialias=True), v2.RandomHorizontalFlip(),
                      v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])  # fmt: skip
    norm = Normalize(IMAGENET_MEAN, IMAGENET_STD)

    def dk_post(batch):
        return norm(batch[0]), batch[1]  # the last step, in the main process, on the whole uint8 batch

    out = {}
    out["1. ImageFolder + v1 (PIL)"] = measure(DataLoader(datasets.ImageFolder(str(root), v1), **dl), images)
    out["2. ImageFolder(decode_image) + v2"] = measure(
        DataLoader(datasets.ImageFolder(str(root), tv2, loader=tv_decode), **dl), images)  # fmt: skip
    pipe = train_pipeline(SIZE, normalize=False)
    folder = open_dataset(root, transform=pipe)
    out["3. datakit, folder (uint8 batch, normalised on the GPU)"] = measure(
        create_loader(folder, bs, num_workers=workers, seed=0), images)  # fmt: skip
    out["3. datakit, folder + Normalize in the main process"] = measure(
        create_loader(folder, bs, num_workers=workers, seed=0), images, dk_post)  # fmt: skip
    if packs:
        for label, opts in (("4. datakit, LMDB", {}), ("4. datakit, LMDB --max-size 512", {"max_size": 512})):
            out_dir = work / ("pack" + str(opts.get("max_size", "")))
            shutil.rmtree(out_dir, ignore_errors=True)
            pack_lmdb(root, out_dir, workers=workers, **opts)
            ds = open_dataset(out_dir, transform=pipe)
            out[label + " (uint8 batch)"] = measure(create_loader(ds, bs, num_workers=workers, seed=0), images)
    files = [str(p) for p in sorted(root.rglob("*")) if p.suffix.lower() in (".jpg", ".jpeg", ".png")]
    out["5. decode only (full size)"] = measure(DataLoader(DecodeOnly(files), collate_fn=_count, **dl), images)
    out["6. decode only, at the scale each crop needs"] = measure(
        DataLoader(DecodeAtCropScale(files), collate_fn=_count, **dl), images)  # fmt: skip
    # max_size=1: every JPEG at 1/8 scale, where the IDCT is next to free and what is left is
    # reading the entropy-coded data: no pipeline that decodes each file can go faster
    out["7. decode only, all at 1/8 scale (entropy-decoding floor)"] = measure(
        DataLoader(DecodeOnly(files, max_size=1), collate_fn=_count, **dl), images)  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4000, help="photo-sized JPEGs (320-640 px)")
    parser.add_argument("--large", type=int, default=500, help="large JPEGs (2000-4000 px); 0 to skip")
    parser.add_argument("--src", type=Path, help="use this class folder instead of generated sets")
    parser.add_argument("--epochs", type=float, default=1.0, help="images measured per contender, in epochs")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--no-lmdb", action="store_true", help="skip the LMDB contenders")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "datakit-bench")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-loader-"))
    sets = []
    if args.src:
        sets.append((f"{args.src}", args.src, min(args.batch_size, 8)))
    else:
        sets.append(
            (
                f"{args.n} photos, 320-640 px",
                make_photo_set(args.data / "loader-small", args.n, 320, 640),
                args.batch_size,
            )
        )
        if args.large:
            sets.append((f"{args.large} large photos, 2000-4000 px",
                         make_photo_set(args.data / "loader-large", args.large, 2000, 4000, quality=90), args.batch_size))  # fmt: skip
    report = {"machine": machine(), "workers": args.workers, "sets": {}}
    try:
        for label, root, bs in sets:
            n = len([p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")])
            res = run_set(root, work, args.workers, bs, max(bs * 2, int(n * args.epochs)), not args.no_lmdb)
            report["sets"][label] = res
            if args.json:
                continue
            v1, v2r = res["1. ImageFolder + v1 (PIL)"], res["2. ImageFolder(decode_image) + v2"]
            limit = res["5. decode only (full size)"]
            needed = res["6. decode only, at the scale each crop needs"]
            rows = [[k, round(v), f"{v / v1:.2f}x", f"{v / v2r:.2f}x", f"{v / limit:.0%}", f"{v / needed:.0%}"]
                    for k, v in res.items()]  # fmt: skip
            print_table(f"{label}: batch {bs}, {args.workers} workers, crop {SIZE}",
                        ["pipeline", "images/s", "vs (1)", "vs (2)", "of (5)", "of (6)"], rows)  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        dump_json(report)
    else:
        print(f"\nmachine: {report['machine']}")


if __name__ == "__main__":
    main()
