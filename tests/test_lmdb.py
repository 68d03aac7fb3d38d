from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lmdb
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from datakit.cli import main
from datakit.datasets import open_dataset
from datakit.errors import UsageError
from datakit.io import imwrite
from datakit.lmdb import LmdbDataset, LmdbReader, PackError, lmdb_info, pack_lmdb, verify_lmdb
from datakit.testing import synthetic_image


def values(path: Path) -> list[tuple[bytes, bytes]]:
    r = LmdbReader(path, allow_incomplete=True)
    return [(r.get(i), r.records[i].tobytes()) for i in range(len(r))]


def test_pack_and_read_back_bytes(class_folder: Path, tmp_path: Path):
    out = tmp_path / "包.lmdb"
    report = pack_lmdb(class_folder, out, workers=2)
    assert report.count == 12 and report.bytes_in == report.bytes_out
    src = open_dataset(class_folder)
    ds = open_dataset(out)
    assert isinstance(ds, LmdbDataset) and ds.classes == src.classes and len(ds) == 12
    for i in range(12):
        assert ds.read(i) == Path(src.name(i)).read_bytes()
        np.testing.assert_array_equal(ds[i][0], src[i][0])
        assert ds[i][1] == src[i][1]
        assert tuple(ds.sizes()[i]) == src[i][0].shape[:2]
    assert json.loads((out / "classes.json").read_text(encoding="utf-8")) == {"classes": ["cat", "dog", "鸟"]}
    assert ds.name(1) == f"{out}:cat/图片_1.png"
    with open(out / "data.mdb", "rb") as f:
        assert b"\x80\x04\x95" not in f.read()  # no pickle protocol-4 frames anywhere


def test_max_size_reencodes(samples: Path, tmp_path: Path):
    out = tmp_path / "small.lmdb"
    pack_lmdb(samples / "images", out, max_size=64, quality=80, workers=1)
    ds = open_dataset(out)
    sizes = ds.sizes()
    assert sizes.max() == 64 and (sizes.max(axis=1) == 64).all()
    assert ds[0][0].shape[:2] == tuple(sizes[0])
    assert lmdb_info(out)["encoding"] == "JPEG quality 80, longer side <= 64"


def test_labels_splits_and_class_map(samples: Path, tmp_path: Path):
    out = tmp_path / "s.lmdb"
    pack_lmdb(samples / "images", out, labels=samples / "labels.xlsx", workers=1)
    info = lmdb_info(out)
    assert info["splits"] == ["train", "val", "test"]
    assert info["split_counts"] == {"train": 18, "val": 3, "test": 3}
    assert len(open_dataset(out, split="val")) == 3
    with pytest.raises(UsageError, match=r"no split 'dev'; the pack's splits are 'train', 'val', 'test'"):
        open_dataset(out, split="dev")


def test_map_grows_from_tiny_map(class_folder: Path, tmp_path: Path):
    out = tmp_path / "tiny.lmdb"
    pack_lmdb(class_folder, out, map_size=32 << 10, commit_every=2, workers=1)
    data = lmdb_info(out)["bytes"]
    assert len(open_dataset(out)) == 12
    assert (out / "data.mdb").stat().st_size < 4 * data + (256 << 10)  # not preallocated to some huge size


def test_existing_output_refused_and_overwrite(class_folder: Path, tmp_path: Path):
    out = tmp_path / "o.lmdb"
    pack_lmdb(class_folder, out, workers=1)
    with pytest.raises(
        UsageError, match=r"o.lmdb: already exists; use --resume to continue an interrupted pack or --overwrite"
    ):
        pack_lmdb(class_folder, out, workers=1)
    assert pack_lmdb(class_folder, out, workers=1, resume=True).count == 12  # complete: nothing to do
    assert pack_lmdb(class_folder, out, workers=1, overwrite=True).count == 12
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.docx").write_bytes(b"x")
    with pytest.raises(PackError, match="holds other files than an LMDB pack; not removing it"):
        pack_lmdb(class_folder, precious, overwrite=True)
    assert (precious / "thesis.docx").exists()
    with pytest.raises(PackError, match="was packed with a different options"):
        pack_lmdb(class_folder, out, workers=1, resume=True, max_size=10)


def test_corrupt_sources_refused_or_skipped(class_folder: Path, tmp_path: Path):
    bad = class_folder / "dog" / "图片_2.jpg"
    bad.write_bytes(bad.read_bytes()[:300])
    with pytest.raises(PackError) as e:
        pack_lmdb(class_folder, tmp_path / "a.lmdb", workers=2)
    lines = str(e.value).splitlines()
    assert lines[0].startswith("1 unreadable images (the pack holds the 6 samples before the first")
    assert lines[1] == f"{bad}: truncated JPEG (no end-of-image marker)"
    with pytest.raises(PackError, match="incomplete pack"):
        open_dataset(tmp_path / "a.lmdb")
    report = pack_lmdb(class_folder, tmp_path / "b.lmdb", workers=2, skip_bad=True)
    assert report.count == 11 and report.skipped == [f"{bad}: truncated JPEG (no end-of-image marker)"]
    assert lmdb_info(tmp_path / "b.lmdb")["skipped"] == report.skipped


def test_shards_read_as_one(class_folder: Path, tmp_path: Path):
    for i in range(3):
        pack_lmdb(class_folder, tmp_path / f"shard-{i}.lmdb", shard=f"{i}/3", workers=1)
    whole = open_dataset(class_folder)
    ds = open_dataset(str(tmp_path / "shard-*.lmdb"))
    assert len(ds) == 12 and ds.targets.tolist() == whole.targets.tolist()
    for i in range(12):
        np.testing.assert_array_equal(ds[i][0], whole[i][0])
    with pytest.raises(UsageError, match=r"shard I/N needs 0 <= I < N, got 3/3"):
        pack_lmdb(class_folder, tmp_path / "x.lmdb", shard="3/3")


def test_verify_catches_tampering(class_folder: Path, tmp_path: Path):
    out = tmp_path / "t.lmdb"
    pack_lmdb(class_folder, out, workers=1)
    assert verify_lmdb(out) == []
    env = lmdb.open(str(out))
    with env.begin(write=True) as txn:
        v = bytearray(txn.get(b"i0000000004"))
        v[len(v) // 2] ^= 0x55
        txn.put(b"i0000000004", bytes(v))
    env.close()
    assert verify_lmdb(out) == [
        f"{out}: key i0000000004 (dog/图片_0.jpg): checksum mismatch, the stored bytes were altered"
    ]
    assert main(["verify", str(out), "-q"]) == 1


def test_unknown_version_and_foreign_files_refused(class_folder: Path, tmp_path: Path):
    out = tmp_path / "v.lmdb"
    pack_lmdb(class_folder, out, workers=1)
    env = lmdb.open(str(out))
    with env.begin(write=True) as txn:
        meta = json.loads(txn.get(b"__meta__"))
        txn.put(b"__meta__", json.dumps(dict(meta, version=2)).encode())
    env.close()
    with pytest.raises(PackError, match=r"pack version 2 is not readable by this datakit \(reads version 1\)"):
        open_dataset(out)
    other = tmp_path / "other"
    env = lmdb.open(str(other))
    env.close()
    with pytest.raises(PackError, match="not a datakit pack"):
        LmdbReader(other)


def corner(img: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(img[:8, :8].copy())


def test_workers_under_spawn(class_folder: Path, tmp_path: Path):
    out = tmp_path / "w.lmdb"
    pack_lmdb(class_folder, out, workers=1)
    ds = open_dataset(out, transform=corner)
    ds[0]  # an environment opened in the parent is not carried into the workers
    loader = DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context="spawn")
    labels = torch.cat([t for _, t in loader])
    assert labels.tolist() == ds.targets.tolist()


def _photo_folder(root: Path, n: int) -> Path:
    for i in range(n):
        d = root / f"c{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        imwrite(d / f"{i:04d}.jpg", synthetic_image(480, 640, seed=i), quality=90)
    return root


@pytest.mark.slow
def test_sigkill_then_resume_is_identical(tmp_path: Path):
    src = _photo_folder(tmp_path / "src", 300)
    ref = tmp_path / "ref.lmdb"
    pack_lmdb(src, ref, max_size=160, workers=1)
    out = tmp_path / "killed.lmdb"
    cmd = [sys.executable, "-m", "datakit.cli", "pack-lmdb", str(src), str(out), "--max-size", "160",
           "--workers", "1", "--commit-every", "7", "-q"]  # fmt: skip
    proc = subprocess.Popen(cmd)
    try:
        deadline = time.time() + 60
        count = 0
        while time.time() < deadline and proc.poll() is None:
            if (out / "data.mdb").exists():
                try:
                    count = LmdbReader(out, allow_incomplete=True).meta["count"]
                except (lmdb.Error, PackError, TypeError):
                    count = 0
                if count >= 30:
                    break
            time.sleep(0.01)
        assert proc.poll() is None, "packing finished before it could be interrupted"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    from datakit.lmdb import _forget_env

    _forget_env(out)
    meta = LmdbReader(out, allow_incomplete=True).meta
    assert meta["complete"] is False and 30 <= meta["count"] < 300
    _forget_env(out)
    report = pack_lmdb(src, out, max_size=160, workers=2, resume=True)
    assert report.resumed_from == meta["count"] and report.count == 300
    assert values(out) == values(ref)
    assert verify_lmdb(out) == []


def test_cli_pack_info_and_errors(class_folder: Path, tmp_path: Path, capsys):
    out = tmp_path / "c.lmdb"
    assert main(["pack-lmdb", str(class_folder), str(out), "--workers", "1"]) == 0
    assert capsys.readouterr().out.startswith(f"packed 12 images into {out}")
    assert main(["pack-lmdb", str(class_folder), str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["pack-lmdb", str(class_folder), str(out), "--resume", "--overwrite"]) == 2
    assert main(["info", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["class_counts"] == {"cat": 4, "dog": 4, "鸟": 4}
    assert main(["pack-lmdb", str(tmp_path / "none"), str(tmp_path / "x.lmdb")]) == 2
    (class_folder / "cat" / "图片_0.jpg").write_bytes(b"junk")
    assert main(["pack-lmdb", str(class_folder), str(tmp_path / "bad.lmdb")]) == 1
    err = capsys.readouterr().err
    assert "图片_0.jpg: not a recognised image format" in err and "Traceback" not in err


def test_write_failure_keeps_committed_samples_and_resumes(class_folder: Path, tmp_path: Path, monkeypatch):
    import datakit.lmdb as dl

    out = tmp_path / "full.lmdb"
    real = dl.LmdbWriter._write
    calls = []

    def disk_full(self, items, meta):
        calls.append(meta["count"])
        if len(calls) == 3:
            raise lmdb.DiskError("mdb_txn_commit: No space left on device")
        return real(self, items, meta)

    monkeypatch.setattr(dl.LmdbWriter, "_write", disk_full)
    with pytest.raises(PackError) as e:
        pack_lmdb(class_folder, out, workers=1, commit_every=4)
    assert str(e.value).startswith(f"{out}: writing failed after 8 committed samples (DiskError: ")
    assert str(e.value).endswith("then run the same command with --resume")
    monkeypatch.undo()
    assert LmdbReader(out, allow_incomplete=True).meta["count"] == 8
    dl._forget_env(out)
    report = pack_lmdb(class_folder, out, workers=1, resume=True, commit_every=4)
    assert report.resumed_from == 8 and report.count == 12 and verify_lmdb(out) == []
