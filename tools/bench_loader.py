"""The standard classification input pipeline, datakit against torchvision, head to head.

    python tools/bench_loader.py [--photos leaves|samples|both] [--n 2000] [--large 200] [--workers 2]
                                 [--batch-size 64] [--passes 2] [--no-lmdb] [--json]
    python tools/bench_loader.py --src samples/images --epochs 3      (the short version in make demo)

Photo sets: "leaves" are generated scenes that owe nothing to samples/ (benchutil.leaves_photo:
dead-leaves occlusion, shading, texture and sensor noise, JPEG quality 90); "samples" are random
crops of the real photos in samples/, resized. Same photos, batch size and worker count for every
contender, in one run, images/s after the first batch (best of --passes passes):
1. torchvision ImageFolder + v1 transforms (PIL, RandomResizedCrop, flip, ToTensor, Normalize);
2. torchvision ImageFolder(loader=decode_image) + v2 transforms (ToDtype, Normalize);
3. datakit from the folder (train_pipeline: crop drawn from the header, JPEG decoded at the
   scale the crop needs): the README's default path (create_loader(..., device="cpu"):
   normalised float32 batches on the CPU); uint8 batches as they go to the GPU, where the
   loader normalises them; and float32 normalised per sample in the workers
   (train_pipeline(normalize=True)), the slower way it is measured against;
4. datakit from an LMDB pack, and from a pack made with --max-size 512;
5. decode only (full-size decode of every image in the same workers): the machine's limit;
6. decode only, at the DCT scale each random crop needs (same draws, no resize), the whole
   image and, with the region decoder, only the crop's rows and columns (what train_pipeline
   decodes): the limits of any pipeline on the same decoder for this crop distribution (row 3
   also runs with the region decoder switched off, so the two are compared in one run);
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
from benchutil import dump_json, machine, make_leaves_set, make_photo_set, print_table
from torch.utils.data import DataLoader, Dataset
from torchvision import datasets, transforms
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms import v2

import datakit.io as dio
from datakit.datasets import open_dataset
from datakit.io import decode_image as dk_decode
from datakit.io import decode_jpeg_region, read_bytes, region_decoder_available
from datakit.loader import create_loader
from datakit.pack import pack_lmdb
from datakit.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    _decode_scaled,
    _factor,
    _jpeg_header,
    _scaled_box,
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
    the whole image (``region=False``), or only the crop's rows and columns (``region=True``,
    what train_pipeline decodes): the limits for this crop distribution."""

    def __init__(self, files: list[str], region: bool = False) -> None:
        self.files, self.pipe, self.region = files, train_pipeline(SIZE), region

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
        f = _factor(ch, cw, SIZE, SIZE)
        if self.region:
            i, j, _, _ = self.pipe.crop.get_params(h, w)  # the same number of draws as the pipeline
            box = _scaled_box(i, j, ch, cw, -(-h // f), -(-w // f), f)
            if decode_jpeg_region(data, "rgb", f, box) is not None:
                return 0
        _decode_scaled(data, "rgb", None, h, w, f)
        return 0


def _count(batch) -> int:
    return len(batch)


def measure(loader, images: int, post=None, passes: int = 1) -> float:
    """images/s over ``images`` images after the first batch (workers started, imports paid),
    the best of ``passes`` passes."""
    return max(_measure(loader, images, post) for _ in range(passes))


def first_epoch(loader) -> float:
    """images/s of one whole epoch, timed from the start of the workers."""
    done, t = 0, time.perf_counter()
    for batch in loader:
        done += len(batch[0])
    return done / (time.perf_counter() - t)


def _measure(loader, images: int, post=None) -> float:
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
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()  # the last batches' copies and normalisation are counted
    return done / (time.perf_counter() - t)


def run_set(root: Path, work: Path, workers: int, bs: int, images: int, packs: bool, passes: int = 1,
            full: bool = True, device: str = "cpu") -> dict[str, float]:  # fmt: skip
    """images/s of every contender on the class folder ``root``; ``full=False`` runs only the
    peers and datakit's default path (the short comparison the demo prints). ``device="cuda"``:
    every training contender delivers its batches on the GPU (torchvision's from pinned memory
    with ``non_blocking=True``, as its reference scripts do; datakit's through create_loader)."""
    cuda = device != "cpu"
    dl = dict(batch_size=bs, num_workers=workers, shuffle=True, persistent_workers=workers > 0,
              pin_memory=cuda, **({"prefetch_factor": 4} if workers else {}))  # fmt: skip
    to_device = (lambda b: (b[0].to(device, non_blocking=True), b[1].to(device, non_blocking=True))) if cuda else None
    v1 = transforms.Compose([transforms.RandomResizedCrop(SIZE), transforms.RandomHorizontalFlip(),
                             transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])  # fmt: skip
    tv2 = v2.Compose([v2.RandomResizedCrop(SIZE, antialias=True), v2.RandomHorizontalFlip(),
                      v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])  # fmt: skip

    def run(loader, post=None):
        return measure(loader, images, post, passes)

    out = {}
    out[ROW_V1] = run(DataLoader(datasets.ImageFolder(str(root), v1), **dl), to_device)
    out[ROW_V2] = run(DataLoader(datasets.ImageFolder(str(root), tv2, loader=tv_decode), **dl), to_device)
    folder = open_dataset(root, transform=train_pipeline(SIZE))
    if cuda:
        out[ROW_DEFAULT_CUDA] = run(create_loader(folder, bs, num_workers=workers, seed=0, device=device))
    else:
        out[ROW_DEFAULT] = run(create_loader(folder, bs, num_workers=workers, seed=0, device="cpu"))
    if not full:
        return out
    if cuda:  # the CPU default for comparison: normalising on the GPU spares the workers' cores that pass
        out[ROW_DEFAULT] = run(create_loader(folder, bs, num_workers=workers, seed=0, device="cpu"))
    out[ROW_UINT8] = run(create_loader(folder, bs, num_workers=workers, seed=0))
    if region_decoder_available():  # the same loader with the region decoder switched off
        dio._REGION = False
        try:
            out[ROW_WHOLE] = run(create_loader(folder, bs, num_workers=workers, seed=0))
        finally:
            dio._REGION = None
    # the entropy-index cache: one epoch from worker start on an empty cache (every index built
    # then), against the same for the loader without it; then the later epochs, measured as above
    cache_dir = work / "index-cache"
    shutil.rmtree(cache_dir, ignore_errors=True)
    cached = open_dataset(root, transform=train_pipeline(SIZE, index_cache=cache_dir))
    out[ROW_FIRST] = first_epoch(create_loader(folder, bs, num_workers=workers, seed=0))
    cached_loader = create_loader(cached, bs, num_workers=workers, seed=0)
    out[ROW_CACHE_FIRST] = first_epoch(cached_loader)
    out[ROW_CACHE] = run(cached_loader)
    in_workers = open_dataset(root, transform=train_pipeline(SIZE, normalize=True))
    out["3. datakit, float32 normalised in the workers"] = run(
        create_loader(in_workers, bs, num_workers=workers, seed=0)
    )
    if packs:
        pipe = train_pipeline(SIZE)
        for label, opts in (("4. datakit, LMDB", {}), ("4. datakit, LMDB --max-size 512", {"max_size": 512})):
            out_dir = work / ("pack" + str(opts.get("max_size", "")))
            shutil.rmtree(out_dir, ignore_errors=True)
            pack_lmdb(root, out_dir, workers=workers, **opts)
            ds = open_dataset(out_dir, transform=pipe)
            out[label + " (uint8 batch)"] = run(create_loader(ds, bs, num_workers=workers, seed=0))
    files = [str(p) for p in sorted(root.rglob("*")) if p.suffix.lower() in (".jpg", ".jpeg", ".png")]
    out[ROW_DECODE] = run(DataLoader(DecodeOnly(files), collate_fn=_count, **dl))
    out[ROW_CROP_SCALE] = run(DataLoader(DecodeAtCropScale(files), collate_fn=_count, **dl))
    if region_decoder_available():
        out[ROW_REGION] = run(DataLoader(DecodeAtCropScale(files, region=True), collate_fn=_count, **dl))
    # max_size=1: every JPEG at 1/8 scale, where the IDCT is next to free and what is left is
    # reading the entropy-coded data: no pipeline that decodes each file can go faster
    out["7. decode only, all at 1/8 scale (entropy-decoding floor)"] = run(
        DataLoader(DecodeOnly(files, max_size=1), collate_fn=_count, **dl))  # fmt: skip
    return out


ROW_V1 = "1. ImageFolder + v1 (PIL)"
ROW_V2 = "2. ImageFolder(decode_image) + v2"
ROW_DEFAULT = "3. datakit default: create_loader(device='cpu'), normalised float32"
ROW_DEFAULT_CUDA = "3. datakit default on the GPU: create_loader(device='cuda'), normalised float32"
ROW_UINT8 = "3. datakit, uint8 batches (normalised on the GPU)"
ROW_DECODE = "5. decode only (full size)"
ROW_CROP_SCALE = "6. decode only, at the scale each crop needs"
ROW_REGION = "6. decode only the crop's region, at that scale"
ROW_WHOLE = "3. datakit, uint8, whole image at the crop's scale (no region decoder)"
ROW_FIRST = "3. datakit, uint8: the first epoch, from worker start"
ROW_CACHE_FIRST = "3. datakit, uint8, index_cache: the first epoch (building every index)"
ROW_CACHE = "3. datakit, uint8, index_cache: the later epochs"


def default_path_comparison(root: Path, workers: int = 2, batch_size: int = 8, epochs: float = 3.0) -> dict:
    """torchvision v1 and v2 against datakit's default path (the README's lines, normalised
    float32 batches on the CPU) on the class folder ``root``: ``{"rows": {name: images/s},
    "vs_v1": x, "vs_v2": x}``. The short comparison for a demo."""
    n = len([p for p in Path(root).rglob("*") if p.is_file() and not p.name.startswith(".")])
    rows = run_set(Path(root), Path(tempfile.gettempdir()), workers, batch_size,
                   max(batch_size * 2, int(n * epochs)), packs=False, full=False)  # fmt: skip
    return {"rows": rows, "vs_v1": rows[ROW_DEFAULT] / rows[ROW_V1], "vs_v2": rows[ROW_DEFAULT] / rows[ROW_V2]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", choices=("leaves", "samples", "both"), default="both",
                        help="generated scenes (nothing from samples/), crops of samples/, or both")  # fmt: skip
    parser.add_argument("--n", type=int, default=2000, help="photo-sized JPEGs (320-640 px) per photo set; 0 to skip")
    parser.add_argument("--large", type=int, default=200, help="large JPEGs (2000-4000 px) per photo set; 0 to skip")
    parser.add_argument("--src", type=Path, help="use this class folder instead of generated sets")
    parser.add_argument("--epochs", type=float, default=1.0, help="images measured per contender, in epochs")
    parser.add_argument("--large-epochs", type=float, default=2.0, help="the same for the large photos")
    parser.add_argument("--passes", type=int, default=2, help="passes per contender; the best is reported")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--no-lmdb", action="store_true", help="skip the LMDB contenders")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "datakit-bench")
    parser.add_argument("--device", default="cpu", help="'cuda': batches delivered on the GPU by every contender")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-loader-"))
    sets = []
    if args.src:
        sets.append((f"{args.src}", args.src, min(args.batch_size, 8), args.epochs))
    else:
        makers = {"leaves": make_leaves_set, "samples": make_photo_set}
        kinds = ["leaves", "samples"] if args.photos == "both" else [args.photos]
        for kind in kinds:
            make = makers[kind]
            if args.n:
                sets.append((f"{args.n} {kind} photos, 320-640 px", make(args.data / f"{kind}-small", args.n, 320, 640),
                             args.batch_size, args.epochs))  # fmt: skip
            if args.large:
                sets.append((f"{args.large} large {kind} photos, 2000-4000 px",
                             make(args.data / f"{kind}-large", args.large, 2000, 4000, quality=90),
                             args.batch_size, args.large_epochs))  # fmt: skip
    report = {"machine": machine(), "workers": args.workers, "passes": args.passes, "device": args.device, "sets": {}}
    if args.device != "cpu":
        report["gpu"] = torch.cuda.get_device_name(torch.device(args.device))
    try:
        for label, root, bs, epochs in sets:
            n = len([p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")])
            res = run_set(root, work, args.workers, bs, max(bs * 2, int(n * epochs)), not args.no_lmdb, args.passes,
                          device=args.device)  # fmt: skip
            report["sets"][label] = res
            if args.json:
                continue
            v1, v2r = res[ROW_V1], res[ROW_V2]
            limit, needed = res[ROW_DECODE], res[ROW_CROP_SCALE]
            rows = [[k, round(v), f"{v / v1:.2f}x", f"{v / v2r:.2f}x", f"{v / limit:.0%}", f"{v / needed:.0%}"]
                    for k, v in res.items()]  # fmt: skip
            where = f", batches on {report['gpu']}" if args.device != "cpu" else ""
            print_table(f"{label}: batch {bs}, {args.workers} workers, crop {SIZE}, best of {args.passes}{where}",
                        ["pipeline", "images/s", "vs (1)", "vs (2)", "of (5)", "of (6)"], rows)  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        dump_json(report)
    else:
        print(f"\nmachine: {report['machine']}")


if __name__ == "__main__":
    main()
