"""Regenerate ``samples/`` deterministically from the real photos that scikit-image ships.

    python tools/make_samples.py [OUT]        (needs scikit-image: pip install -e ".[dev]")

Writes 24 photos (JPEG and PNG) in three class folders, some with Chinese names and spaces;
``images.zip`` holding them under GBK names without the UTF-8 flag, as Chinese Windows writes
them; ``labels.xlsx`` with sheets ``train``/``val``/``test`` (columns 文件名, 标签; names relative to
``images/``, for ``open_dataset("samples/images", labels="samples/labels.xlsx")``); and
``labels.csv`` with the same rows and a ``split`` column, naming ``images/...`` relative to its own
folder, for ``open_dataset("samples/labels.csv")``.
"""

from __future__ import annotations

import argparse
import csv
import io
import shutil
import sys
import zipfile
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datakit.io import imwrite  # noqa: E402
from datakit.testing import ZipEntry, build_zip  # noqa: E402

FIXED_TIME = (2024, 5, 17, 10, 30, 0)
# class folder -> (scikit-image photos to crop, file stems; Chinese names and a space included)
CLASSES = {
    "cat": (["chelsea"], ["猫_01", "猫_02", "cat_03", "cat 04", "猫咪_05", "cat_06", "cat_07", "小猫_08"]),
    "coffee": (["coffee"], ["coffee_01", "咖啡_02", "coffee_03", "咖啡 杯_04", "coffee_05", "拿铁_06",
                            "coffee_07", "coffee_08"]),  # fmt: skip
    "太空": (["rocket", "astronaut", "hubble_deep_field"],
           ["火箭_01", "rocket_02", "宇航员_03", "astronaut_04", "星空_05", "space_06", "太空_07", "银河_08"]),
}  # fmt: skip
SPLITS = ["train"] * 6 + ["val", "test"]


def _photo(name: str) -> np.ndarray:
    from skimage import data

    img = getattr(data, name)()
    return img if img.ndim == 3 else np.stack([img] * 3, axis=-1)


def make(out: Path) -> list[tuple[str, str, str]]:
    rng = np.random.default_rng(20240517)
    if out.exists():
        shutil.rmtree(out / "images", ignore_errors=True)
    (out / "images").mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str, str]] = []  # (relative path, class, split)
    for cls, (sources, stems) in CLASSES.items():
        (out / "images" / cls).mkdir()
        for i, stem in enumerate(stems):
            src = _photo(sources[i % len(sources)])
            h, w = src.shape[:2]
            ch = int(rng.integers(h // 2, h + 1))
            cw = int(rng.integers(w // 2, w + 1))
            y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
            crop = src[y : y + ch, x : x + cw]
            target = int(rng.integers(120, 240))
            scale = target / max(ch, cw)
            crop = cv2.resize(crop, (round(cw * scale), round(ch * scale)), interpolation=cv2.INTER_AREA)
            ext = ".png" if i % 3 == 2 else ".jpg"
            rel = f"{cls}/{stem}{ext}"
            imwrite(out / "images" / rel, crop, quality=88, mode="rgb")
            rows.append((rel, cls, SPLITS[i]))
    _write_zip(out, rows)
    _write_xlsx(out / "labels.xlsx", rows)
    with open(out / "labels.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["文件名", "标签", "split"])
        # relative to the table's own folder, so that open_dataset("samples/labels.csv") works alone
        writer.writerows((f"images/{rel}", cls, split) for rel, cls, split in rows)
    return rows


def _write_zip(out: Path, rows: list[tuple[str, str, str]]) -> None:
    entries = [ZipEntry(name=f"{cls}/".encode("gbk"), method=0, date_time=FIXED_TIME) for cls in CLASSES]
    for rel, _, _ in rows:
        data = (out / "images" / rel).read_bytes()
        method = 0 if rel.endswith(".jpg") else 8
        entries.append(ZipEntry(name=rel.encode("gbk"), data=data, method=method, date_time=FIXED_TIME))
    (out / "images.zip").write_bytes(build_zip(entries))


def _write_xlsx(path: Path, rows: list[tuple[str, str, str]]) -> None:
    import datetime

    from openpyxl import Workbook

    wb = Workbook()
    wb.remove(wb.active)
    for split in ("train", "val", "test"):
        ws = wb.create_sheet(split)
        ws.append(["文件名", "标签"])
        for rel, cls, s in rows:
            if s == split:
                ws.append([rel, cls])
    stamp = datetime.datetime(*FIXED_TIME)
    wb.properties.created = wb.properties.modified = stamp
    buf = io.BytesIO()
    wb.save(buf)
    # openpyxl stamps the zip entries with the current time; rewrite them for identical bytes.
    src = zipfile.ZipFile(buf)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename == "docProps/core.xml":
                data = _pin_core_times(data)
            dst.writestr(zipfile.ZipInfo(info.filename, FIXED_TIME), data, zipfile.ZIP_DEFLATED)


def _pin_core_times(xml: bytes) -> bytes:
    import re

    return re.sub(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", b"2024-05-17T10:30:00Z", xml)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=str(Path(__file__).resolve().parents[1] / "samples"))
    args = parser.parse_args()
    rows = make(Path(args.out))
    size = sum(p.stat().st_size for p in Path(args.out).rglob("*") if p.is_file())
    print(f"wrote {len(rows)} images, images.zip, labels.xlsx, labels.csv to {args.out} ({size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
