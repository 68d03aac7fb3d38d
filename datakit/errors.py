"""The exception types of datakit: what went wrong decides the CLI's exit code, never the message.

``UsageError`` (exit 2) is a mistake in how datakit was called: a bad option value, a missing
input, an output that exists without ``--overwrite``. ``DataError`` and its subclasses (exit 1)
are problems with the data itself. Every one is a ``ValueError`` too, so code that catches
``ValueError`` keeps working.
"""

from __future__ import annotations

import os
import re

__all__ = [
    "ArchiveError",
    "DataError",
    "DatakitError",
    "ImageDecodeError",
    "LabelError",
    "PackError",
    "SampleError",
    "UsageError",
]


class DatakitError(ValueError):
    """Base of every error datakit raises on purpose; ``exit_code`` is what the CLI returns."""

    exit_code = 1


class UsageError(DatakitError):
    """Bad usage: an option out of range, a missing input, an existing output without --overwrite."""

    exit_code = 2


class DataError(DatakitError):
    """A problem with the data (a file, an archive member, a table row, a pack): exit 1."""


class ImageDecodeError(DataError):
    """Bytes that are not a decodable image (empty, truncated, not an image, over the pixel budget)."""


class ArchiveError(DataError):
    """An archive that cannot be read or extracted safely; the message names the archive and member."""


class LabelError(DataError):
    """A label table that cannot be used as it is; the message names the file, sheet and row."""


class PackError(DataError):
    """A pack that cannot be written or read as asked; the message names it and says what to do."""


class PackChangedError(PackError):
    """A pack's files changed under a dataset reading them (packed again, another pack copied over them): no
    sample's fault, so never replaced nor recorded as a bad sample; the dataset must be opened again."""


class SampleError(DataError):
    """One sample that cannot be read or decoded; the message names the sample index and file."""


def names_sample(text: str, index: int) -> bool:
    """Whether an error's text names sample ``index`` already (a pack's own error says ``sample 5
    (cat/1.jpg)``): a caller that would put ``sample 5:`` before it leaves the text as it is."""
    return re.search(rf"\bsample {int(index)}\b", text) is not None


_PATH_ARGUMENTS = ("path", "src", "labels", "root", "classes")


def as_flag(name: str, value: object) -> bool:
    """A True/False option as a bool: True, False, 1, 0 (NumPy's too); anything else refused, a string above all,
    which Python takes for true (remap_labels="no" remapped, include_hidden="no" read the hidden sheets)."""
    import numpy as np

    if value is None or isinstance(value, (bool, np.bool_)):  # (None: False, as Python reads it)
        return bool(value)
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return bool(value)
    raise UsageError(f"{name} must be True or False, got {value!r}")


def refuse_empty(**given: object) -> None:
    """Refuse an empty path or name (an unset shell variable: ``--classes "$TRAIN"``): ``Path("")`` is the
    current folder, read as if named, and an empty column name or split would mean "none given"."""
    for name, value in given.items():
        if not isinstance(value, (str, os.PathLike)) or os.fspath(value).strip():
            continue
        flag = "" if name in ("path", "src") else f"{name}= (--{name.replace('_', '-')}): "
        if name in _PATH_ARGUMENTS:
            fix = "give the file or folder, or . for the current folder"
        elif name == "split":
            fix = "give the split's name, or leave it out for every split"
        else:
            fix = "give the column's header, or leave it out to find the column by the common names"
        kind = "path" if name in _PATH_ARGUMENTS else "name"
        raise UsageError(f"{flag}an empty {kind} ({os.fspath(value)!r}); {fix} (an unset variable?)")
