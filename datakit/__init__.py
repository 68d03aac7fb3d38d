"""datakit: the image data people really have, turned into fast, correct PyTorch input.

The names below are importable from ``datakit`` directly; modules that pull in torch are loaded
on first use, so ``import datakit`` stays fast.
"""

from __future__ import annotations

import importlib

from datakit.devices import select_gpus
from datakit.errors import (
    ArchiveError,
    DataError,
    DatakitError,
    ImageDecodeError,
    LabelError,
    PackError,
    SampleError,
    UsageError,
)
from datakit.io import decode_image, encode_image, imread, imwrite

__version__ = "0.1.0"

_LAZY = {
    "unzip": "archive", "detect_encoding": "archive", "ZipReader": "archive",
    "read_labels": "labels", "LabelTable": "labels", "ClassMap": "labels",
    "open_dataset": "datasets", "FolderDataset": "datasets", "TableDataset": "datasets",
    "ZipDataset": "datasets",
    "LmdbDataset": "datasets", "LmdbReader": "lmdb", "LmdbWriter": "lmdb", "verify_lmdb": "lmdb",
    "lmdb_info": "lmdb", "pack_lmdb": "pack", "PackReport": "pack",
    "compute_stats": "stats", "Stats": "stats", "PRESETS": "stats",
    "check_dataset": "check", "preview": "check",
    "stack_collate": "collate", "pad_collate": "collate", "detection_collate": "collate",
    "create_loader": "loader", "InfiniteLoader": "loader", "seed_everything": "loader", "seed_worker": "loader",
    "CUDAPrefetcher": "prefetch", "tune_num_workers": "tuning", "measure_throughput": "tuning",
}  # fmt: skip

__all__ = [
    "ArchiveError",
    "DataError",
    "DatakitError",
    "ImageDecodeError",
    "LabelError",
    "PackError",
    "SampleError",
    "UsageError",
    "__version__",
    "decode_image",
    "encode_image",
    "imread",
    "imwrite",
    "select_gpus",
    *sorted(_LAZY),
]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'datakit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"datakit.{module}"), name)
    globals()[name] = value
    return value
