"""Per-core decode throughput: datakit.imread against bare cv2.imdecode, Pillow and torchvision.

    python tools/bench_decode.py [--n 300] [--large 24] [--json]

Runs in one process (one core) over the same files for every decoder: photo-sized JPEGs
(320-640 px) and large JPEGs (2000-4000 px, where ``imread(max_size=...)`` decodes reduced).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import cv2
import numpy as np
from benchutil import dump_json, interleaved_best, machine, make_photo_set, print_table
from PIL import Image

from datakit.io import imread


def _decoders(max_size: int | None = None) -> dict:
    import torch
    import torchvision.io as tio

    torch.set_num_threads(1)
    cv2.setNumThreads(1)

    def bare_cv2(p):
        return cv2.imdecode(np.fromfile(p, dtype=np.uint8), cv2.IMREAD_COLOR)

    def bare_cv2_rgb(p):
        return cv2.cvtColor(cv2.imdecode(np.fromfile(p, dtype=np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)

    def pillow(p):
        with Image.open(p) as im:
            return np.asarray(im.convert("RGB"))

    def torchvision_io(p):
        return tio.decode_image(tio.read_file(str(p)), mode=tio.ImageReadMode.RGB)

    return {
        "cv2.imdecode (BGR)": bare_cv2,
        "datakit imread bgr": lambda p: imread(p, "bgr"),
        "cv2.imdecode + cvtColor (RGB)": bare_cv2_rgb,
        "datakit imread rgb": lambda p: imread(p, "rgb"),
        "Pillow open().convert(RGB)": pillow,
        "torchvision.io.decode_image": torchvision_io,
    }


def run(files: list[Path], decoders: dict, repeat: int = 5) -> dict[str, tuple[float, float]]:
    pixels = sum(h * w for h, w in (imread(p, "gray").shape for p in files))
    out = {}
    for fn in decoders.values():  # warm up lazy imports, the page cache and the CPU clock
        for p in files:
            fn(p)
    # in turn, pass after pass: a slow spell of the shared machine hits every decoder alike
    best = interleaved_best({name: lambda fn=fn: [fn(p) for p in files] for name, fn in decoders.items()}, repeat)
    for name, t in best.items():
        out[name] = (len(files) / t, pixels / t / 1e6)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300, help="photo-sized JPEGs (320-640 px)")
    parser.add_argument("--large", type=int, default=24, help="large JPEGs (2000-4000 px)")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "datakit-bench")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    small = sorted(make_photo_set(args.data / "decode-small", args.n, 320, 640, classes=1).rglob("*.jpg"))
    large = sorted(make_photo_set(args.data / "decode-large", args.large, 2000, 4000, classes=1).rglob("*.jpg"))
    report = {"machine": machine(), "photo": {}, "large": {}}
    for label, files in (("photo", small), ("large", large)):
        decoders = _decoders()
        if label == "large":
            decoders["datakit imread rgb max_size=512"] = lambda p: imread(p, "rgb", max_size=512)
            decoders["datakit imread rgb max_size=1024"] = lambda p: imread(p, "rgb", max_size=1024)
        res = run(files, decoders)
        base = res["cv2.imdecode (BGR)"][0]
        pil = res["Pillow open().convert(RGB)"][0]
        report[label] = {k: {"images_per_s": v[0], "mpix_per_s": v[1]} for k, v in res.items()}
        if not args.json:
            rows = [
                [k, round(v[0], 1), round(v[1], 1), f"{v[0] / base:.2f}x", f"{v[0] / pil:.2f}x"] for k, v in res.items()
            ]
            title = f"{label} JPEGs ({len(files)} files), one core"
            print_table(title, ["decoder", "images/s", "Mpx/s", "vs cv2.imdecode", "vs Pillow"], rows)
    if args.json:
        dump_json(report)
    else:
        print(f"\nmachine: {report['machine']}")


if __name__ == "__main__":
    main()
