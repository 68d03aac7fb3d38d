"""The evaluation pipeline from JPEG bytes against torchvision's, head to head: time and pixels.

    python tools/bench_eval.py [--n 24] [--data DIR] [--json]

One core, large photos (benchutil.leaves_photo, 2000-4000 px, JPEG quality 90) saved 4:2:0 (OpenCV's
and Pillow's default) and 4:2:2 (as many cameras write them): ``eval_pipeline(224).from_bytes``
(decoded at a reduced DCT scale that keeps twice the resized side) against torchvision's
``decode_jpeg`` + ``v2.Resize(256)`` + ``v2.CenterCrop(224)``, the pixels it stands for. Per sample,
best of interleaved passes, and how far its pixels are from torchvision's, in levels (the largest
over the photos, and the mean).
"""

from __future__ import annotations

import argparse
import io
import tempfile
from pathlib import Path

import numpy as np
import torch
from benchutil import dump_json, interleaved_best, machine, make_leaves_set, print_table
from PIL import Image
from torchvision.io import decode_jpeg
from torchvision.transforms import v2

from datakit.transforms import eval_pipeline


def photo_bytes(folder: Path, subsampling: int) -> list[bytes]:
    """The photos' JPEG bytes, re-saved by Pillow with ``subsampling`` (2: 4:2:0, 1: 4:2:2)."""
    out = []
    for path in sorted(folder.rglob("*.jpg")):
        buf = io.BytesIO()
        Image.open(path).save(buf, "JPEG", quality=90, subsampling=subsampling)
        out.append(buf.getvalue())
    return out


def measure(datas: list[bytes]) -> list[object]:
    ours = eval_pipeline(224, 256)
    theirs = v2.Compose([v2.Resize(256), v2.CenterCrop(224)])

    def tv(d: bytes) -> torch.Tensor:
        return theirs(decode_jpeg(torch.frombuffer(bytearray(d), dtype=torch.uint8)))

    best = interleaved_best({"datakit": lambda: [ours.from_bytes(d) for d in datas],
                             "torchvision": lambda: [tv(d) for d in datas]}, repeat=3)  # fmt: skip
    diffs = [(ours.from_bytes(d).int() - tv(d).int()).abs().float() for d in datas]
    ms_d, ms_t = best["datakit"] / len(datas) * 1e3, best["torchvision"] / len(datas) * 1e3
    return [round(ms_d, 2), round(ms_t, 2), f"{ms_t / ms_d:.2f}x", int(max(float(d.max()) for d in diffs)),
            round(float(np.mean([float(d.mean()) for d in diffs])), 2)]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=24, help="large photos (2000-4000 px)")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "datakit-bench")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    import cv2

    cv2.setNumThreads(1)
    folder = make_leaves_set(args.data / "eval-large", args.n, 2000, 4000, quality=90)
    rows = [[name, *measure(photo_bytes(folder, sub))] for name, sub in (("4:2:0", 2), ("4:2:2", 1))]
    header = ["chroma", "datakit ms", "torchvision ms", "speed", "max levels off", "mean levels off"]
    print(machine())
    print_table(f"eval_pipeline(224).from_bytes vs decode_jpeg + Resize(256) + CenterCrop(224), {args.n} photos",
                header, rows)  # fmt: skip
    if args.json:
        dump_json({"header": header, "rows": rows})


if __name__ == "__main__":
    main()
