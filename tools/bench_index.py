"""Crop decoding with and without the entropy index, one core, the same crops.

    python tools/bench_index.py [--n 300] [--large 24] [--json]

Leaves photos (``benchutil.leaves_photo``, JPEG quality 90, 4:2:0): photo-sized (320-640 px) and
large (2000-4000 px). Each file gets three crop draws of ``train_pipeline(224)``'s random resized
crop, decoded at the DCT scale that crop needs. Contenders, in turn, best of 5 passes:
``decode_jpeg_region`` as the pipelines call it (the peer), the same with ``index=`` (the file's
``jpeg_entropy_index``, built beforehand), and a whole decode at 1/8 scale (one pass over the
entropy-coded data), against which the index's build time is also given. Where the peer's time
goes: one pixel of each crop's first row, and of its last, decoded the same way, is the reading of
the entropy-coded data down to that row (the rows above a box are skipped without the inverse
DCT), the part of a crop's decode that no decoder without an index can leave out.
"""

from __future__ import annotations

import argparse
import time

import cv2
import numpy as np
from benchutil import dump_json, interleaved_best, leaves_photo, machine, print_table

from datakit.io import decode_jpeg_region, jpeg_entropy_index, region_decoder_available
from datakit.transforms import RandomResizedCrop, _factor, _scaled_box


def _files(n: int, lo: int, hi: int, rng: np.random.Generator) -> list[tuple[bytes, int, int]]:
    out = []
    for _ in range(n):
        long = int(rng.integers(lo, hi + 1))
        short = int(long * rng.uniform(0.75, 1.0))
        data = cv2.imencode(".jpg", leaves_photo(short, long, rng)[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 90])[1]
        out.append((data.tobytes(), short, long))
    return out


def run(files: list[tuple[bytes, int, int]], rng: np.random.Generator) -> dict:
    crop = RandomResizedCrop(224)
    t = time.perf_counter()
    indexes = [jpeg_entropy_index(d) for d, _, _ in files]
    build = time.perf_counter() - t
    assert all(ix is not None for ix in indexes)
    jobs = []
    for (data, h, w), ix in zip(files, indexes):
        for _ in range(3):
            i, j, ch, cw = crop.get_params(h, w)
            f = _factor(ch, cw, 224, 224)
            jobs.append((data, ix, f, _scaled_box(i, j, ch, cw, -(-h // f), -(-w // f), f)))
    for data, ix, f, box in jobs[:30]:  # the same pixels, or the comparison means nothing
        assert np.array_equal(
            decode_jpeg_region(data, "rgb", f, box), decode_jpeg_region(data, "rgb", f, box, index=ix)
        )
    bufs = [np.frombuffer(d, np.uint8) for d, _, _ in files]
    best = interleaved_best(
        {
            "region": lambda: [decode_jpeg_region(d, "rgb", f, b) for d, _, f, b in jobs],
            "indexed": lambda: [decode_jpeg_region(d, "rgb", f, b, index=ix) for d, ix, f, b in jobs],
            # one pixel at the crop's first row, and at its last: the entropy decoding down to there (libjpeg
            # skips the rows above without the inverse DCT), which no decoder without an index can avoid
            "to_top": lambda: [
                decode_jpeg_region(d, "rgb", f, (b[0], b[1], b[0] + 1, b[1] + 1)) for d, _, f, b in jobs
            ],
            "to_bottom": lambda: [
                decode_jpeg_region(d, "rgb", f, (b[2] - 1, b[1], b[2], b[1] + 1)) for d, _, f, b in jobs
            ],  # fmt: skip
            "eighth": lambda: [cv2.imdecode(b, cv2.IMREAD_REDUCED_COLOR_8) for b in bufs],
        }
    )
    return {
        "crops": len(jobs),
        "files": len(files),
        "region_ms": best["region"] / len(jobs) * 1e3,
        "indexed_ms": best["indexed"] / len(jobs) * 1e3,
        "to_top_ms": best["to_top"] / len(jobs) * 1e3,
        "to_bottom_ms": best["to_bottom"] / len(jobs) * 1e3,
        "eighth_ms": best["eighth"] / len(files) * 1e3,
        "build_ms": build / len(files) * 1e3,
        "index_share": sum(map(len, indexes)) / sum(len(d) for d, _, _ in files),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300, help="photo-sized JPEGs")
    ap.add_argument("--large", type=int, default=24, help="2000-4000 px JPEGs")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not region_decoder_available():
        raise SystemExit("datakit._jpegregion was not built: nothing to measure")
    cv2.setNumThreads(1)
    rng = np.random.default_rng(0)
    results = {
        "photo-sized (320-640 px)": run(_files(args.n, 320, 640, rng), rng),
        "large (2000-4000 px)": run(_files(args.large, 2000, 4000, rng), rng),
    }
    if args.json:
        dump_json(results)
        return
    rows = []
    for name, r in results.items():
        rows += [
            [name, "decode_jpeg_region (the peer)", round(r["region_ms"], 3), "1.00x"],
            [
                "",
                "decode_jpeg_region(index=...)",
                round(r["indexed_ms"], 3),
                f"{r['region_ms'] / r['indexed_ms']:.2f}x",
            ],
            [
                "",
                "of which: reading the rows above the crop",
                round(r["to_top_ms"], 3),
                f"{r['to_top_ms'] / r['region_ms']:.0%}",
            ],
            [
                "",
                "of which: reading every row down to the crop's last",
                round(r["to_bottom_ms"], 3),
                f"{r['to_bottom_ms'] / r['region_ms']:.0%}",
            ],
            ["", "building the index, per file", round(r["build_ms"], 3), f"{r['build_ms'] / r['eighth_ms']:.2f}x 1/8"],
            [
                "",
                "whole decode at 1/8 scale, per file",
                round(r["eighth_ms"], 3),
                f"index {r['index_share']:.1%} of file",
            ],
        ]
    print_table("crop decoding, one core, best of 5", ["files", "what", "ms", "ratio"], rows)
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
