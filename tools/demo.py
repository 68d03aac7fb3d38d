"""The demo behind ``make demo``: datakit's main jobs, run on the committed samples/ folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from datakit.io import IMAGE_EXTENSIONS, imread


def show_images(root: Path) -> None:
    files = sorted(p for p in (root / "images").rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS)
    rows = [(str(p.relative_to(root / "images")), imread(p, "rgb")) for p in files]
    width = max(len(n) for n, _ in rows)
    print(f"== every sample image read with datakit.io.imread (mode='rgb'): {len(rows)} files")
    print(f"{'name'.ljust(width)}  {'shape':>14}  dtype")
    for name, img in rows:
        print(f"{name.ljust(width)}  {str(img.shape):>14}  {img.dtype}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("samples", type=Path, nargs="?", default=Path(__file__).resolve().parents[1] / "samples")
    args = parser.parse_args(argv)
    show_images(args.samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
