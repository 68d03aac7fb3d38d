"""The packed format: any dataset in one LMDB file, written resumably, read lazily, verified.

Values are the original encoded image bytes (or re-encoded ones when ``max_size`` asks), never
decoded pixels and never pickles. Targets, sizes and checksums are fixed binary records;
metadata is JSON. The layout is documented in docs/lmdb-format.md.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from datakit.datasets import ImageDataset, SampleError, StringArray
from datakit.errors import PackError, UsageError
from datakit.io import _jpeg_size, decode_image, encode_image, image_format, probe_image
from datakit.labels import ClassMap

__all__ = [
    "FORMAT",
    "VERSION",
    "LmdbDataset",
    "LmdbReader",
    "LmdbWriter",
    "PackError",
    "PackReport",
    "lmdb_info",
    "pack_lmdb",
    "verify_lmdb",
]

FORMAT = "datakit-lmdb"
VERSION = 1
META_KEY = b"__meta__"
INDEX_KEY = b"__index__"
# one record per sample: target, height, width, crc32 of the value, split id, value length
RECORD = np.dtype([("target", "<i8"), ("height", "<u4"), ("width", "<u4"), ("crc32", "<u4"), ("split", "<u2"),
                   ("_pad", "<u2"), ("nbytes", "<u8")])  # fmt: skip
INITIAL_MAP_SIZE = 64 << 20


_ENVS: dict[str, object] = {}
_ENVS_PID = -1


def _read_env(path: str | os.PathLike):
    """The read-only environment for ``path`` in this process, shared by every reader of it.

    py-lmdb allows one open environment per file per process, and an environment must not be
    used across fork, so they are cached per path and forgotten in a child process.
    """
    global _ENVS_PID
    import lmdb

    if os.getpid() != _ENVS_PID:
        _ENVS.clear()  # inherited handles are unusable after fork; drop them without closing
        _ENVS_PID = os.getpid()
    key = path if isinstance(path, str) and path in _ENVS else os.path.realpath(path)
    env = _ENVS.get(key)
    if env is None:
        env = _ENVS[key] = lmdb.open(key, readonly=True, lock=False, readahead=False, meminit=False,
                                     subdir=True, max_readers=512)  # fmt: skip
    return env


_TXNS: dict[str, tuple[object, object]] = {}


def _read_txn(path: str | os.PathLike):
    """A long-lived read transaction on a complete pack (nothing writes to it), per process:
    beginning one per read costs more than the read itself."""
    if os.getpid() == _ENVS_PID and isinstance(path, str):
        cached = _TXNS.get(path)
        if cached is not None and _ENVS.get(path) is cached[0]:
            return cached[1]  # the hot path: no system calls
    env = _read_env(path)
    key = os.path.realpath(path)
    cached = _TXNS.get(key)
    if cached is None or cached[0] is not env:
        cached = _TXNS[key] = (env, env.begin(buffers=False))
    return cached[1]


def _forget_env(path: str | os.PathLike) -> None:
    key = os.path.realpath(path)
    cached = _TXNS.pop(key, None)
    env = _ENVS.pop(key, None)
    if env is not None and os.getpid() == _ENVS_PID:
        if cached is not None:
            cached[1].abort()
        env.close()


def _image_key(i: int) -> bytes:
    return b"i%010d" % i


def _record_key(i: int) -> bytes:
    return b"r%010d" % i


def _name_key(i: int) -> bytes:
    return b"n%010d" % i


# ---------------------------------------------------------------------------------------------
# writing


class LmdbWriter:
    """Appends samples to a pack, committing in large transactions and growing the map when full.

    Every commit stores the samples and the new ``count`` together, so a pack interrupted at
    any point (Ctrl-C, kill -9, a full disk) holds exactly the samples counted in its metadata,
    and :meth:`open` with ``resume=True`` continues from there.
    """

    def __init__(self, path: str | os.PathLike, meta: dict, *, start: int = 0, commit_bytes: int = 64 << 20,
                 commit_every: int = 5000, map_size: int = INITIAL_MAP_SIZE) -> None:  # fmt: skip
        import lmdb

        self.path = Path(path)
        self.meta = meta
        self.count = start
        self.commit_bytes = commit_bytes
        self.commit_every = commit_every
        self.path.mkdir(parents=True, exist_ok=True)
        _forget_env(self.path)
        self.env = lmdb.open(str(self.path), map_size=map_size, subdir=True, readahead=False,
                             meminit=False, max_dbs=0)  # fmt: skip
        info = self.env.info()
        if info["map_size"] < self.env.stat()["psize"] * (info["last_pgno"] + 1) * 2:
            self.env.set_mapsize(max(map_size, self.env.stat()["psize"] * (info["last_pgno"] + 1) * 2))
        self._pending: list[tuple[bytes, bytes]] = []
        self._pending_bytes = 0

    def add(self, value: bytes, target: int, height: int, width: int, name: str, split: int = 0) -> None:
        i = self.count + len(self._pending) // 3
        rec = np.zeros(1, RECORD)
        rec[0] = (target, height, width, zlib.crc32(value), split, 0, len(value))
        self._pending += [(_image_key(i), value), (_record_key(i), rec.tobytes()), (_name_key(i), name.encode())]
        self._pending_bytes += len(value)
        if self._pending_bytes >= self.commit_bytes or len(self._pending) // 3 >= self.commit_every:
            self.commit()

    def _write(self, items: list[tuple[bytes, bytes]], meta: dict) -> None:
        import lmdb

        while True:
            try:
                with self.env.begin(write=True) as txn:
                    for k, v in items:
                        txn.put(k, v)
                    txn.put(META_KEY, json.dumps(meta, ensure_ascii=False).encode())
                return
            except lmdb.MapFullError:
                # the transaction was aborted whole; grow the map and write it again
                self.env.set_mapsize(self.env.info()["map_size"] * 2)

    def commit(self) -> None:
        n = len(self._pending) // 3
        meta = dict(self.meta, count=self.count + n, complete=False)
        self._write(self._pending, meta)
        self.count += n
        self.meta = meta
        self._pending, self._pending_bytes = [], 0

    def finish(self, extra: dict | None = None) -> None:
        """Commit what is pending, write the packed index and mark the pack complete."""
        self.commit()
        records = np.zeros(self.count, RECORD)
        with self.env.begin() as txn:
            for i in range(self.count):
                records[i] = np.frombuffer(txn.get(_record_key(i)), RECORD)[0]
        meta = dict(self.meta, **(extra or {}), count=self.count, complete=True)
        self._write([(INDEX_KEY, records.tobytes())], meta)
        self.meta = meta
        self.env.sync(True)

    def close(self) -> None:
        self.env.close()


def _read_meta(path: Path) -> dict | None:
    if not (path / "data.mdb").exists():
        return None
    with _read_env(path).begin() as txn:
        raw = txn.get(META_KEY)
    _forget_env(path)
    return json.loads(raw) if raw else None


@dataclass
class PackReport:
    """What :func:`pack_lmdb` did."""

    path: Path
    count: int
    resumed_from: int = 0
    skipped: list[str] = field(default_factory=list)
    bytes_in: int = 0
    bytes_out: int = 0
    seconds: float = 0.0


_WORKER_DS: ImageDataset | None = None


def _init_worker(ds: ImageDataset | None) -> None:
    global _WORKER_DS
    if ds is not None:
        _WORKER_DS = ds


def _prepare(task: tuple[int, int | None, int]) -> tuple[int, bytes | None, int, int, int, str | None]:
    """In a worker: read, validate and (re)encode one sample. Returns (index, value, h, w, in_bytes, error)."""
    i, max_size, quality = task
    ds = _WORKER_DS
    assert ds is not None
    try:
        data = ds.read(i)
        name = ds.name(i)
        if max_size:
            img = decode_image(data, "rgb", max_size, name=name)
            h, w = img.shape[:2]
            if max(h, w) > max_size:
                import cv2

                s = max_size / max(h, w)
                img = cv2.resize(img, (max(1, round(w * s)), max(1, round(h * s))), interpolation=cv2.INTER_AREA)
                return i, encode_image(img, ".jpg", quality, mode="rgb"), img.shape[0], img.shape[1], len(data), None
            if image_format(data) == "JPEG" and max(_jpeg_size(data)[:2]) > max_size:
                # decoded reduced but still larger than asked: re-encode the reduced pixels
                return i, encode_image(img, ".jpg", quality, mode="rgb"), h, w, len(data), None
            return i, data, h, w, len(data), None
        h, w = probe_image(data, name)
        return i, data, h, w, len(data), None
    except (SampleError, ValueError, OSError, KeyError) as exc:
        return i, None, 0, 0, 0, f"{ds.name(i)}: {exc}" if ds.name(i) not in str(exc) else str(exc)


def _short_name(ds: ImageDataset, i: int) -> str:
    """The sample's name relative to its source where the dataset has one, else its full name."""
    files = getattr(ds, "files", None)
    return files[i] if isinstance(files, StringArray) else ds.name(i)


def _lmdb_error() -> type[Exception]:
    import lmdb

    return lmdb.Error


def parse_shard(spec: str | tuple[int, int] | None) -> tuple[int, int]:
    """``"2/8"`` or ``(2, 8)`` to ``(2, 8)``; shards are numbered from 0."""
    if spec is None:
        return 0, 1
    if isinstance(spec, str):
        try:
            a, b = (int(x) for x in spec.split("/"))
        except ValueError:
            raise UsageError(f"shard must look like I/N (for example 0/4), got {spec!r}") from None
    else:
        a, b = spec
    if not (b >= 1 and 0 <= a < b):
        raise UsageError(f"shard I/N needs 0 <= I < N, got {a}/{b}")
    return a, b


def _remove_pack(path: Path) -> None:
    entries = {p.name for p in path.iterdir()}
    if entries - {"data.mdb", "lock.mdb", "classes.json"}:
        raise PackError(f"{path}: exists and holds other files than an LMDB pack; not removing it, pick another OUT")
    shutil.rmtree(path)


def pack_lmdb(
    src: str | os.PathLike | ImageDataset,
    out: str | os.PathLike,
    *,
    labels: str | os.PathLike | None = None,
    split: str | None = None,
    max_size: int | None = None,
    quality: int = 90,
    workers: int | None = None,
    resume: bool = False,
    overwrite: bool = False,
    shard: str | tuple[int, int] | None = None,
    skip_bad: bool = False,
    remap_labels: bool = False,
    commit_bytes: int = 64 << 20,
    commit_every: int = 5000,
    map_size: int = INITIAL_MAP_SIZE,
    progress: Callable[[int, int, int], None] | None = None,
) -> PackReport:
    """Pack any source :func:`~datakit.datasets.open_dataset` accepts into an LMDB pack at ``out``.

    Workers read, validate and (with ``max_size``) re-encode images; the main process writes them
    in large transactions. Without ``max_size`` the original bytes are stored verbatim.

    Args:
        max_size: re-encode (JPEG, ``quality``) images whose longer side exceeds this.
        workers: reader processes (default: usable CPUs).
        resume: continue an interrupted pack of the same source and options.
        overwrite: replace an existing pack.
        shard: ``"I/N"``: pack only the I-th of N contiguous parts (``open_dataset`` reads shards as one).
        skip_bad: skip unreadable images (listed in the report and the metadata) instead of failing.
        progress: called as ``progress(done, total, bytes_written)``.

    Raises:
        PackError: existing output without resume/overwrite, a resume with other options, bad images.
    """
    from datakit.datasets import open_dataset

    out = Path(out)
    sh = parse_shard(shard)
    ds = src if isinstance(src, ImageDataset) else open_dataset(src, labels=labels, split=split,
                                                                remap_labels=remap_labels)  # fmt: skip
    n_total = len(ds)
    lo, hi = sh[0] * n_total // sh[1], (sh[0] + 1) * n_total // sh[1]
    table = getattr(ds, "table", None)
    split_names = table.split_names if table is not None and split is None else []
    split_ids = {s: k + 1 for k, s in enumerate(split_names)}
    class_map = getattr(ds, "class_map", None) or ClassMap(tuple(ds.classes))
    source = os.fspath(src) if not isinstance(src, ImageDataset) else repr(src)
    options = {"max_size": max_size, "quality": quality if max_size else None, "split": split,
               "shard": [sh[0], sh[1]], "labels": os.fspath(labels) if labels else None}  # fmt: skip
    meta = {
        "format": FORMAT, "version": VERSION, "count": 0, "complete": False, "source": source,
        "source_samples": n_total, "planned": hi - lo, "first_source_index": lo, "options": options,
        "classes": class_map.to_json(), "splits": split_names, "checksum": "crc32",
        "encoding": f"JPEG quality {quality}, longer side <= {max_size}" if max_size else "original bytes",
        "record_dtype": RECORD.descr, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "writer": f"datakit {__import__('datakit').__version__}", "skipped": [],
    }  # fmt: skip
    start = 0
    existing = _read_meta(out) if out.exists() else None
    occupied = (out.is_dir() and any(out.iterdir())) or out.is_file()
    if occupied:
        if overwrite:
            _remove_pack(out) if out.is_dir() else out.unlink()
        elif resume and existing is not None:
            if existing.get("format") != FORMAT or existing.get("version") != VERSION:
                raise PackError(f"{out}: not a datakit-lmdb version {VERSION} pack; cannot resume it")
            for key in ("source", "source_samples", "options", "classes"):
                if existing.get(key) != meta[key]:
                    raise PackError(
                        f"{out}: was packed with a different {key} ({existing.get(key)!r}, now {meta[key]!r}); "
                        "resume only the same job, or use --overwrite"
                    )
            if existing.get("complete"):
                return PackReport(out, existing["count"], existing["count"])
            start = existing["count"]
            meta["skipped"] = existing.get("skipped", [])
            meta["created"] = existing.get("created", meta["created"])
        elif resume:
            raise PackError(f"{out}: exists but is not a datakit pack; nothing to resume")
        else:
            raise UsageError(f"{out}: already exists; use --resume to continue an interrupted pack or --overwrite")
    writer = LmdbWriter(out, meta, start=start, commit_bytes=commit_bytes, commit_every=commit_every,
                        map_size=map_size)  # fmt: skip
    report = PackReport(out, 0, resumed_from=start, skipped=list(meta["skipped"]))
    done_sources = start + len(report.skipped)
    tasks = [(i, max_size, quality) for i in range(lo + done_sources, hi)]
    workers = min(workers or len(os.sched_getaffinity(0)), max(1, len(tasks)))
    t0 = time.perf_counter()
    bad: list[str] = []
    try:
        if workers > 1:
            ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
            pool = ctx.Pool(workers, initializer=_init_worker, initargs=(ds,))
            results = pool.imap(_prepare, tasks, chunksize=8)
        else:
            pool = None
            _init_worker(ds)
            results = map(_prepare, tasks)
        try:
            for i, value, h, w, nin, err in results:
                if err is not None:
                    if skip_bad:
                        report.skipped.append(err)
                        writer.meta["skipped"] = report.skipped
                        continue
                    bad.append(err)
                if bad:
                    continue  # keep reading to name every bad image, but write nothing past the first
                sid = split_ids.get(table.splits[i], 0) if split_ids else 0
                writer.add(value, int(ds.targets[i]), h, w, _short_name(ds, i), sid)
                report.bytes_in += nin
                report.bytes_out += len(value)
                if progress:
                    progress(i + 1 - lo, hi - lo, report.bytes_out)
        finally:
            if pool is not None:
                pool.terminate()
                pool.join()
        if bad:
            writer.commit()
            raise PackError(
                f"{len(bad)} unreadable images (the pack holds the {writer.count} samples before the first; fix them "
                "and --resume, or pass --skip-bad):\n" + "\n".join(bad)
            )
        writer.finish({"skipped": report.skipped})
        class_map.save(out / "classes.json")
    except KeyboardInterrupt:
        writer.commit()
        raise
    except (OSError, _lmdb_error()) as exc:
        # a full disk or an I/O error: what was committed stays valid and resumable
        raise PackError(
            f"{out}: writing failed after {writer.count} committed samples ({type(exc).__name__}: {exc}); "
            "free space or fix the cause, then run the same command with --resume"
        ) from None
    finally:
        writer.close()
    report.count = writer.count
    report.seconds = time.perf_counter() - t0
    return report


# ---------------------------------------------------------------------------------------------
# reading


class LmdbReader:
    """Read access to one pack; the environment opens lazily in each process and is not pickled."""

    def __init__(self, path: str | os.PathLike, *, allow_incomplete: bool = False) -> None:
        self.path = Path(path)
        self._real = os.path.realpath(self.path)
        if not (self.path / "data.mdb").exists():
            raise PackError(f"{self.path}: not an LMDB pack (no data.mdb)")
        with self.env.begin() as txn:
            raw = txn.get(META_KEY)
            if raw is None:
                raise PackError(f"{self.path}: not a datakit pack (no metadata record)")
            self.meta = json.loads(raw)
            if self.meta.get("format") != FORMAT:
                raise PackError(f"{self.path}: format is {self.meta.get('format')!r}, not {FORMAT!r}")
            if self.meta.get("version") != VERSION:
                raise PackError(
                    f"{self.path}: pack version {self.meta.get('version')!r} is not readable by this datakit "
                    f"(reads version {VERSION}); upgrade datakit or re-pack"
                )
            if not self.meta.get("complete") and not allow_incomplete:
                raise PackError(
                    f"{self.path}: incomplete pack ({self.meta.get('count')} of {self.meta.get('planned')} samples); "
                    "finish it with `datakit pack-lmdb ... --resume`, or read what is there with allow_incomplete=True"
                )
            index = txn.get(INDEX_KEY) if self.meta.get("complete") else None
            if index is not None:
                self.records = np.frombuffer(index, RECORD).copy()
            else:
                n = self.meta["count"]
                self.records = np.zeros(n, RECORD)
                for i in range(n):
                    self.records[i] = np.frombuffer(txn.get(_record_key(i)), RECORD)[0]
        self.class_map = ClassMap.from_json(self.meta["classes"])

    @property
    def env(self):
        return _read_env(self.path)

    def __len__(self) -> int:
        return len(self.records)

    def get(self, i: int) -> bytes:
        value = _read_txn(self._real).get(_image_key(i))
        if value is None:
            raise KeyError(f"{self.path}: no value for sample {i} (key {_image_key(i).decode()})")
        return value

    def name(self, i: int) -> str:
        with self.env.begin() as txn:
            raw = txn.get(_name_key(i))
        return raw.decode() if raw is not None else f"#{i}"

    def close(self) -> None:
        _forget_env(self.path)


class LmdbDataset(ImageDataset):
    """One pack, or several shards read as one dataset, decoded lazily through :mod:`datakit.io`."""

    def __init__(self, paths: str | os.PathLike | Sequence[str | os.PathLike], *, split: str | None = None,
                 allow_incomplete: bool = False, **kwargs) -> None:  # fmt: skip
        paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
        self.readers = [LmdbReader(p, allow_incomplete=allow_incomplete) for p in paths]
        first = self.readers[0]
        for r in self.readers[1:]:
            if r.meta["classes"] != first.meta["classes"]:
                raise PackError(f"{r.path}: its classes differ from {first.path}'s; these are not shards of one pack")
        shard_of, local = [], []
        for k, r in enumerate(self.readers):
            idx = np.arange(len(r), dtype=np.int64)
            if split is not None:
                splits = r.meta.get("splits") or []
                if split not in splits:
                    shown = ", ".join(map(repr, splits)) or "none"
                    raise UsageError(f"{r.path}: no split {split!r}; the pack's splits are {shown}")
                idx = idx[r.records["split"] == splits.index(split) + 1]
            shard_of.append(np.full(len(idx), k, dtype=np.int32))
            local.append(idx)
        self.shard = np.concatenate(shard_of) if shard_of else np.zeros(0, np.int32)
        self.local = np.concatenate(local) if local else np.zeros(0, np.int64)
        targets = np.concatenate([r.records["target"][i] for r, i in zip(self.readers, local)])
        self.heights = np.concatenate([r.records["height"][i] for r, i in zip(self.readers, local)])
        self.widths = np.concatenate([r.records["width"][i] for r, i in zip(self.readers, local)])
        self.class_map = first.class_map
        super().__init__(targets, first.class_map.classes, **kwargs)

    def name(self, index: int) -> str:
        r = self.readers[self.shard[index]]
        return f"{r.path}:{r.name(int(self.local[index]))}"

    def read(self, index: int) -> bytes:
        return self.readers[self.shard[index]].get(int(self.local[index]))

    def encoded_size(self) -> int:
        return int(sum(r.records["nbytes"][self.local[self.shard == k]].sum() for k, r in enumerate(self.readers)))

    def sizes(self) -> np.ndarray:
        """(height, width) of every sample, known without decoding."""
        return np.stack([self.heights, self.widths], axis=1)


def lmdb_info(path: str | os.PathLike) -> dict:
    """The pack's metadata, with per-class and per-split counts and sizes."""
    r = LmdbReader(path, allow_incomplete=True)
    r.close()  # one-shot: the records and metadata are in memory now
    info = {k: v for k, v in r.meta.items() if k != "record_dtype"}
    rec = r.records
    classes = r.class_map.classes
    info["class_counts"] = {classes[t]: int(c) for t, c in zip(*np.unique(rec["target"], return_counts=True))}
    if r.meta.get("splits"):
        names = ["-"] + r.meta["splits"]
        info["split_counts"] = {names[s]: int(c) for s, c in zip(*np.unique(rec["split"], return_counts=True))}
    if len(rec):
        info["height_range"] = [int(rec["height"].min()), int(rec["height"].max())]
        info["width_range"] = [int(rec["width"].min()), int(rec["width"].max())]
        info["bytes"] = int(rec["nbytes"].sum())
    info["file_bytes"] = (Path(path) / "data.mdb").stat().st_size
    return info


def verify_lmdb(path: str | os.PathLike, progress: Callable[[int, int], None] | None = None) -> list[str]:
    """Re-check every checksum and decode every image; the problems, one line each (empty: all good)."""
    r = LmdbReader(path, allow_incomplete=True)
    problems = []
    if not r.meta.get("complete"):
        problems.append(f"{r.path}: incomplete pack ({r.meta.get('count')} of {r.meta.get('planned')} samples)")
    for i in range(len(r)):
        key = _image_key(i).decode()
        try:
            value = r.get(i)
        except KeyError as exc:
            problems.append(str(exc))
            continue
        rec = r.records[i]
        if zlib.crc32(value) != int(rec["crc32"]) or len(value) != int(rec["nbytes"]):
            problems.append(f"{r.path}: key {key} ({r.name(i)}): checksum mismatch, the stored bytes were altered")
            continue
        try:
            img = decode_image(value, "gray", name=r.name(i))
            if img.shape[:2] != (int(rec["height"]), int(rec["width"])):
                problems.append(f"{r.path}: key {key} ({r.name(i)}): decodes to {img.shape[:2]}, "
                                f"recorded {(int(rec['height']), int(rec['width']))}")  # fmt: skip
        except ValueError as exc:
            problems.append(f"{r.path}: key {key}: {exc}")
        if progress:
            progress(i + 1, len(r))
    r.close()
    return problems
