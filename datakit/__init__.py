"""datakit: the image data people really have, turned into fast, correct PyTorch input.

The names below are importable from ``datakit`` directly; modules that pull in torch are loaded
on first use, so ``import datakit`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

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

__version__ = "0.1.0"

_LAZY = {
    "decode_image": "io", "encode_image": "io", "imread": "io", "imwrite": "io",
    "unzip": "archive", "detect_encoding": "archive", "ZipReader": "archive",
    "read_labels": "labels", "LabelTable": "labels", "ClassMap": "labels",
    "open_dataset": "datasets", "FolderDataset": "datasets", "TableDataset": "datasets",
    "ZipDataset": "datasets",
    "LmdbDataset": "datasets", "LmdbReader": "lmdb", "LmdbWriter": "lmdb", "verify_lmdb": "lmdb",
    "lmdb_info": "lmdb", "pack_lmdb": "pack", "PackReport": "pack",
    "compute_stats": "stats", "Stats": "stats", "PRESETS": "stats",
    "check_dataset": "check", "preview": "preview",
    "stack_collate": "collate", "pad_collate": "collate", "detection_collate": "collate",
    "create_loader": "loader", "InfiniteLoader": "loader", "seed_everything": "loader", "seed_worker": "loader",
    "CUDAPrefetcher": "prefetch", "tune_num_workers": "tuning", "measure_throughput": "tuning",
    "recommend": "tuning", "map_ordered": "parallel", "usable_cpus": "parallel",
}  # fmt: skip

__all__ = [  # a literal list, so type checkers see every public name (the lazy ones included)
    "ArchiveError",
    "CUDAPrefetcher",
    "ClassMap",
    "DataError",
    "DatakitError",
    "FolderDataset",
    "ImageDecodeError",
    "InfiniteLoader",
    "LabelError",
    "LabelTable",
    "LmdbDataset",
    "LmdbReader",
    "LmdbWriter",
    "PRESETS",
    "PackError",
    "PackReport",
    "SampleError",
    "Stats",
    "TableDataset",
    "UsageError",
    "ZipDataset",
    "ZipReader",
    "__version__",
    "check_dataset",
    "compute_stats",
    "create_loader",
    "decode_image",
    "detect_encoding",
    "detection_collate",
    "encode_image",
    "imread",
    "imwrite",
    "lmdb_info",
    "map_ordered",
    "measure_throughput",
    "open_dataset",
    "pack_lmdb",
    "pad_collate",
    "preview",
    "read_labels",
    "recommend",
    "seed_everything",
    "seed_worker",
    "select_gpus",
    "stack_collate",
    "tune_num_workers",
    "unzip",
    "usable_cpus",
    "verify_lmdb",
]


if TYPE_CHECKING:  # what __getattr__ loads on first use, spelled out for type checkers and IDEs
    from datakit.archive import ZipReader, detect_encoding, unzip
    from datakit.check import check_dataset
    from datakit.collate import detection_collate, pad_collate, stack_collate
    from datakit.datasets import FolderDataset, LmdbDataset, TableDataset, ZipDataset, open_dataset
    from datakit.io import decode_image, encode_image, imread, imwrite
    from datakit.labels import ClassMap, LabelTable, read_labels
    from datakit.lmdb import LmdbReader, LmdbWriter, lmdb_info, verify_lmdb
    from datakit.loader import InfiniteLoader, create_loader, seed_everything, seed_worker
    from datakit.pack import PackReport, pack_lmdb
    from datakit.parallel import map_ordered, usable_cpus
    from datakit.prefetch import CUDAPrefetcher
    from datakit.preview import preview
    from datakit.stats import PRESETS, Stats, compute_stats
    from datakit.tuning import measure_throughput, recommend, tune_num_workers


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'datakit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"datakit.{module}"), name)
    globals()[name] = value
    return value
