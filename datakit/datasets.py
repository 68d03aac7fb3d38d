"""Lazy map-style datasets over every source, behind one entry point: :func:`open_dataset`.

A dataset holds only what indexes its samples, in numpy arrays (file names as one UTF-8 blob
plus offsets), never lists of Python objects: with fork-started DataLoader workers, touching
a Python object writes its reference count, which copies the page it lives on into every
worker ("copy-on-read"), and worker memory grows without bound. Files, zip handles and LMDB
environments open lazily in the process that reads them, so datasets pickle cleanly and work
with workers started by fork or spawn.

The classes are :mod:`datakit.sources`' own, made ``torch.utils.data.Dataset`` subclasses here
(``isinstance`` checks and ``a + b`` concatenation work as with any torch dataset); the
command-line tools read the same sources without importing torch.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from torch.utils.data import Dataset

from datakit import sources
from datakit.errors import SampleError
from datakit.labels import StringArray
from datakit.sources import IMG_EXTENSIONS, read_bad_samples

__all__ = [
    "IMG_EXTENSIONS",
    "FolderDataset",
    "ImageDataset",
    "LmdbDataset",
    "SampleError",
    "StringArray",
    "TableDataset",
    "ZipDataset",
    "open_dataset",
    "read_bad_samples",
]


class ImageDataset(sources.ImageDataset, Dataset):
    __doc__ = sources.ImageDataset.__doc__


class FolderDataset(sources.FolderDataset, ImageDataset):
    __doc__ = sources.FolderDataset.__doc__


class TableDataset(sources.TableDataset, ImageDataset):
    __doc__ = sources.TableDataset.__doc__


class ZipDataset(sources.ZipDataset, ImageDataset):
    __doc__ = sources.ZipDataset.__doc__


class LmdbDataset(sources.LmdbDataset, ImageDataset):
    __doc__ = sources.LmdbDataset.__doc__


def open_dataset(src: str | os.PathLike | Sequence[str | os.PathLike], **options) -> ImageDataset:
    """Open any image source as a lazy map-style dataset of ``(image, target)``.

    ``src`` may be a folder of class sub-folders (ImageFolder's classes and order), a folder
    plus ``labels`` (a table whose rows name files under it), a label table alone (files
    relative to the table's folder), a zip archive (class folders inside, or plus ``labels``),
    an LMDB pack written by ``datakit pack-lmdb``, or a list or glob of LMDB shards.

    Args:
        labels: a label table path or a :class:`LabelTable`.
        split: a sheet name or split value of the table (``"train"``, ``"val"`` ...).
        transform: called on the uint8 HWC image (datakit or torchvision v2 transforms).
        mode: ``"rgb"`` (default), ``"bgr"``, ``"gray"`` or ``"unchanged"``.
        on_error: ``"raise"``, ``"skip"``, ``"substitute"`` or a handler; with ``bad_samples=`` (a JSON
            path) and ``max_bad_fraction=`` (default 0.01); see :class:`ImageDataset`.
        cache: ``"memory"`` keeps encoded samples in memory (small datasets; limit ``cache_limit``).
        remap_labels: map integer labels that are not ``0..C-1`` to ``0..C-1`` instead of refusing.
        extensions: for a folder or zip of class folders, the file suffixes that count as images;
            default ImageFolder's (:data:`IMG_EXTENSIONS`), so indices and targets match it.
        root: for a label table opened alone, the folder its file names are relative to
            (default: the table's own folder).
        file_column, label_column, split_column, encoding, include_hidden, sheets, engine, sep: how to
            read the table; see :func:`~datakit.labels.read_labels` (``sheets``: the workbook's sheets to read).
            A zip read without a table takes ``encoding=`` for its member names, as ``unzip-gbk --encoding``.
        zip_encoding: the encoding of a zip's member names when a table is read with it (``encoding=`` is
            then the table's); default: detected, as ``unzip-gbk`` detects it.
        target_transform: called on the class index.

    The arguments are those of :func:`datakit.sources.open_source`, which checks their names.
    """
    ds = sources.open_source(src, kinds=sys.modules[__name__], **options)
    if options.get("split") is None and options.get("sheets") is None:
        sources.say_whole(ds)
    return ds
