"""The pack job: pack_lmdb and `datakit pack-lmdb`, resumable after SIGKILL, one writer, safe --overwrite."""

from __future__ import annotations

import errno
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import lmdb
import numpy as np
import pytest

from datakit.cli import main
from datakit.datasets import LmdbDataset, open_dataset
from datakit.errors import LabelError, PackError, UsageError
from datakit.io import imread, imwrite, jpeg_damage, probe_image, region_decoder_available
from datakit.lmdb import LmdbReader, PackLock, PackWriteError, close_pack, lmdb_info, read_meta, verify_lmdb
from datakit.pack import _names_crc, pack_lmdb
from datakit.sources import ZipDataset
from datakit.testing import synthetic_image

# what an interrupted pack-lmdb says last (a plain pack: how to go on)
INTERRUPTED = (
    "datakit pack-lmdb: interrupted; the samples committed stay: the same command with --resume goes on from them\n"
)


def stop_after_six(done: int, total: int, nbytes: int) -> None:
    """A pack's progress callback that interrupts it as Ctrl-C would, once six samples are done."""
    if done == 6:
        raise KeyboardInterrupt


def values(path: Path) -> list[tuple[bytes, bytes, str]]:
    r = LmdbReader(path, allow_incomplete=True)
    out = [(r.get(i), r.records[i].tobytes(), r.name(i)) for i in range(len(r))]
    r.close()
    return out


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
    assert sorted(os.listdir(out)) == ["classes.json", "data.mdb", "lock.mdb", "pack.lock"]


def test_a_pack_whose_path_is_not_utf8_is_written_and_read(class_folder: Path, tmp_path: Path):
    # the attack: a pack named in Latin-1 bytes ('caf\xe9.lmdb', as an old share or archive names folders): packing
    # failed with "'utf-8' codec can't encode character '\udce9'", left a folder holding only pack.lock that
    # --resume could not finish; info and open_dataset failed the same way, verify with a traceback
    out = Path(os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9.lmdb"))
    cli = [sys.executable, "-m", "datakit.cli"]
    run = lambda *args: subprocess.run([*cli, *args], capture_output=True, timeout=300)  # noqa: E731
    assert run("pack-lmdb", class_folder, out, "-q").returncode == 0
    verify = run("verify", out)
    assert (verify.returncode, verify.stdout, verify.stderr) == (0, os.fsencode(out) + b": 12 samples checked, "
                                                                 b"0 problems\n", b"")  # fmt: skip
    info = run("info", out)
    assert info.returncode == 0 and info.stdout.startswith(os.fsencode(out) + b": datakit-lmdb version 2, 12 samples")
    src, ds = open_dataset(class_folder), open_dataset(out)
    assert [ds.read(i) for i in range(12)] == [Path(src.name(i)).read_bytes() for i in range(12)]
    assert [ds[i][1] for i in range(12)] == [src[i][1] for i in range(12)]


def test_package_names_still_importable():
    import datakit

    assert datakit.pack_lmdb is pack_lmdb and datakit.LmdbDataset is LmdbDataset
    assert datakit.PackReport.__module__ == "datakit.pack" and datakit.LmdbReader is LmdbReader


def test_max_size_reencodes(samples: Path, tmp_path: Path):
    out = tmp_path / "small.lmdb"
    pack_lmdb(samples / "images", out, max_size=64, quality=80, workers=1)
    ds = open_dataset(out)
    sizes = ds.sizes()
    assert sizes.max() == 64 and (sizes.max(axis=1) == 64).all()
    assert ds[0][0].shape[:2] == tuple(sizes[0])
    assert lmdb_info(out)["encoding"] == "JPEG quality 80, longer side <= 64"


def test_max_size_keeps_the_colour_of_a_4_2_2_jpeg(tmp_path: Path):
    # the attack: a 4:2:2 JPEG (as many cameras write them) packed with --max-size: decoded at the DCT scale that keeps
    # the size, where libjpeg gives its chroma at half the luma's resolution across, its Cr came out 9.9 levels off on
    # average (56 at most) from the full decode shrunk to the same size, where a 4:2:0 one is 1.6 off. One scale finer:
    import io as _io

    from PIL import Image

    from datakit.io import decode_image
    from datakit.pack import _shrunk

    rng = np.random.default_rng(8)
    img = cv2.resize(rng.integers(0, 256, (138, 88, 3), dtype=np.uint8), (700, 1100), interpolation=cv2.INTER_CUBIC)
    for subsampling in (1, 2):  # Pillow's 4:2:2, 4:2:0
        buf = _io.BytesIO()
        Image.fromarray(img).save(buf, "JPEG", quality=92, subsampling=subsampling)
        data = buf.getvalue()
        got = _shrunk(data, "a.jpg", 275, "rgb")
        ref = cv2.resize(decode_image(data, "rgb"), (175, 275), interpolation=cv2.INTER_AREA)
        assert got.shape == ref.shape == (275, 175, 3)
        diff = np.abs(cv2.cvtColor(got, cv2.COLOR_RGB2YCrCb).astype(int) - cv2.cvtColor(ref, cv2.COLOR_RGB2YCrCb))
        assert diff[..., 0].mean() < 0.5 and diff[..., 1:].mean() < 3, (subsampling, diff.mean(axis=(0, 1)).tolist())
    (tmp_path / "src" / "a").mkdir(parents=True)
    (tmp_path / "src" / "a" / "a.jpg").write_bytes(data)
    buf = _io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=92, subsampling=1)
    (tmp_path / "src" / "a" / "b.jpg").write_bytes(buf.getvalue())
    pack_lmdb(tmp_path / "src", tmp_path / "p.lmdb", max_size=275, workers=1)
    assert open_dataset(tmp_path / "p.lmdb").sizes().tolist() == [[275, 175], [275, 175]]


def test_labels_splits_and_class_map(samples: Path, tmp_path: Path, capsys):
    out = tmp_path / "s.lmdb"
    pack_lmdb(samples / "images", out, labels=samples / "labels.xlsx", workers=1)
    assert main(["info", str(out)]) == 0  # where the labels came from, in the text too (not only --json)
    assert capsys.readouterr().out.splitlines()[1:3] == [f"  source: {os.path.realpath(samples / 'images')} (shard 0/1)",
                                                         f"  from: labels {samples / 'labels.xlsx'}"]  # fmt: skip
    info = lmdb_info(out)
    assert info["splits"] == ["train", "val", "test"]
    assert info["split_counts"] == {"train": 18, "val": 3, "test": 3}
    assert len(open_dataset(out, split="val")) == 3
    with pytest.raises(UsageError, match=r"no split 'dev'; the pack's splits are 'train', 'val', 'test'"):
        open_dataset(out, split="dev")
    # one split, by path or as a dataset object: the same pack (its samples are that split alone)
    by_path, by_object = tmp_path / "p.lmdb", tmp_path / "o.lmdb"
    pack_lmdb(samples / "images", by_path, labels=samples / "labels.xlsx", split="val", workers=1)
    assert main(["info", str(by_path)]) == 0
    assert capsys.readouterr().out.splitlines()[2] == f"  from: labels {samples / 'labels.xlsx'}, split 'val'"
    pack_lmdb(open_dataset(samples / "images", labels=samples / "labels.xlsx", split="val"), by_object, workers=1)
    for pack in (by_path, by_object):
        info = lmdb_info(pack)
        assert (info["count"], info["splits"], "split_counts" in info) == (3, [], False), pack


def test_a_numeric_split_is_found_written_either_way_in_a_pack(class_folder: Path, tmp_path: Path):
    # folds saved from Excel as CSV: "2.0" in the table; a user asks for fold 2 (a workbook's 2.0 reads "2")
    files = sorted(p.relative_to(class_folder).as_posix() for p in class_folder.rglob("*.*"))[:6]
    folds = ["2.0", "2.0", "1", "2.0", "1", "2.0"]
    table = tmp_path / "folds.csv"
    table.write_text("file,label,split\n" + "".join(f"{f},{f.split('/')[0]},{k}\n" for f, k in zip(files, folds)))
    out = tmp_path / "f.lmdb"
    pack_lmdb(class_folder, out, labels=table, workers=1)
    assert lmdb_info(out)["splits"] == ["2.0", "1"]
    names = [
        [ds.name(i).split(":", 1)[1] for i in range(len(ds))]
        for ds in (open_dataset(out, split=s) for s in ("2", "2.0", "1.0"))
    ]
    assert names == [
        [files[0], files[1], files[3], files[5]]] * 2 + [[files[2], files[4]]]  # fmt: skip
    assert len(open_dataset(class_folder, labels=table, split="2")) == 4
    with pytest.raises(
        UsageError, match=r"^" + re.escape(f"{out}: no split '3'; the pack's splits are '2.0', '1'") + "$"
    ):
        open_dataset(out, split="3")


def test_map_grows_from_tiny_map(class_folder: Path, tmp_path: Path):
    out = tmp_path / "tiny.lmdb"
    pack_lmdb(class_folder, out, map_size=32 << 10, commit_every=2, workers=1)
    data = lmdb_info(out)["bytes"]
    assert len(open_dataset(out)) == 12
    assert (out / "data.mdb").stat().st_size < 4 * data + (256 << 10)  # not preallocated to some huge size


def test_existing_output_refused_resumed_or_overwritten(class_folder: Path, tmp_path: Path):
    out = tmp_path / "o.lmdb"
    pack_lmdb(class_folder, out, workers=1)
    with pytest.raises(UsageError) as e:
        pack_lmdb(class_folder, out, workers=1)
    assert str(e.value) == f"{out}: already exists, a complete pack of 12 samples; use --overwrite to pack it again"
    assert pack_lmdb(class_folder, out, workers=1, resume=True).count == 12  # complete: nothing to do
    assert pack_lmdb(class_folder, out, workers=1, overwrite=True).count == 12
    with pytest.raises(UsageError, match="was packed with other options"):
        pack_lmdb(class_folder, out, workers=1, resume=True, max_size=10)
    with pytest.raises(UsageError, match="--resume and --overwrite contradict each other"):
        pack_lmdb(class_folder, out, resume=True, overwrite=True)
    # the same source through a link to it (the attack: "was packed from another source", the job lost)
    link = tmp_path / "link"
    link.symlink_to(class_folder, target_is_directory=True)
    assert pack_lmdb(link, out, workers=1, resume=True).count == 12
    shutil.copytree(class_folder, tmp_path / "copy")
    with pytest.raises(UsageError, match="was packed from another source"):
        pack_lmdb(tmp_path / "copy", out, workers=1, resume=True)
    # packed through a link later pointed at another folder (same names): that folder is another source
    cur, by_link = tmp_path / "cur", tmp_path / "by-link.lmdb"
    cur.symlink_to(class_folder, target_is_directory=True)
    pack_lmdb(cur, by_link, workers=1)
    assert lmdb_info(by_link)["source"] == os.path.realpath(class_folder)
    cur.unlink()
    cur.symlink_to(tmp_path / "copy", target_is_directory=True)
    for src in (cur, tmp_path / "copy"):
        with pytest.raises(UsageError, match="was packed from another source"):
            pack_lmdb(src, by_link, workers=1, resume=True)


def test_classes_json_cut_by_a_kill_after_completion_is_restored_by_resume(class_folder: Path, tmp_path: Path):
    # The attack: a kill between marking the pack complete and writing classes.json left it missing or cut short
    # ('{"clas'); --resume said "packed 12 images", exit 0, and never wrote it again.
    out = tmp_path / "o.lmdb"
    pack_lmdb(class_folder, out, workers=1)
    whole = (out / "classes.json").read_text(encoding="utf-8")
    assert json.loads(whole) == {"classes": ["cat", "dog", "鸟"]}
    for damage in ('{"clas', None):
        if damage is None:
            (out / "classes.json").unlink()
        else:
            (out / "classes.json").write_text(damage, encoding="utf-8")
        (out / ".classes.json.tmp").write_text('{"cl', encoding="utf-8")  # the kill's own leftover
        assert pack_lmdb(class_folder, out, workers=1, resume=True).count == 12
        assert (out / "classes.json").read_text(encoding="utf-8") == whole
        assert not (out / ".classes.json.tmp").exists()


def test_classes_of_a_pack_are_its_metadatas_and_an_edited_classes_json_is_refused(
    class_folder: Path, tmp_path: Path, capsys
):
    # The attack: classes.json of a pack edited to ["dog", "cat", "鸟"]; pack-lmdb val --classes PACK gave val dog=0,
    # cat=1 where the pack's samples index cat=0, dog=1: a model evaluated with its labels swapped, exit 0
    train = tmp_path / "train.lmdb"
    pack_lmdb(class_folder, train, workers=1)
    assert open_dataset(class_folder, classes=train).classes == ["cat", "dog", "鸟"]
    (train / "classes.json").write_text('{"classes": ["dog", "cat", "鸟"]}', encoding="utf-8")
    want = (f"{train / 'classes.json'}: not the class map of the pack (class 0 is 'dog' there, 'cat' in the pack's "
            "metadata), which its samples' labels index: changed by hand? `datakit verify` says more; run its "
            "pack-lmdb command again with --resume to write it again")  # fmt: skip
    with pytest.raises(LabelError) as e:
        open_dataset(class_folder, classes=train)
    assert str(e.value) == want
    assert main(["pack-lmdb", str(class_folder), str(tmp_path / "val.lmdb"), "--classes", str(train), "-q"]) == 1
    assert capsys.readouterr().err.splitlines() == [f"datakit pack-lmdb: error: {want}"]
    assert not (tmp_path / "val.lmdb").exists()
    # a complete pack killed before it wrote classes.json: its classes are in its metadata, where they are read
    (train / "classes.json").unlink()
    assert open_dataset(class_folder, classes=train).classes == ["cat", "dog", "鸟"]


def test_overwrite_never_replaces_a_file_or_a_foreign_folder(class_folder: Path, tmp_path: Path):
    note = tmp_path / "notes.txt"
    note.write_text("mine")
    with pytest.raises(UsageError, match=r"notes.txt: is a file, not a pack folder; pick another OUT"):
        pack_lmdb(class_folder, note, overwrite=True)
    assert note.read_text() == "mine"
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.docx").write_bytes(b"x")
    with pytest.raises(UsageError, match="holds other files than a datakit pack; not touching it, --overwrite"):
        pack_lmdb(class_folder, precious, overwrite=True)
    assert os.listdir(precious) == ["thesis.docx"]
    foreign = tmp_path / "foreign-lmdb"
    env = lmdb.open(str(foreign))
    with env.begin(write=True) as txn:
        txn.put(b"k", b"v")
    env.close()
    with pytest.raises(UsageError, match="holds an LMDB environment that is not a datakit pack; not touching it"):
        pack_lmdb(class_folder, foreign, overwrite=True)
    env = lmdb.open(str(foreign), readonly=True)
    assert env.begin().get(b"k") == b"v"
    env.close()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert pack_lmdb(class_folder, empty, workers=1).count == 12
    # a pack's classes.json alone (data.mdb deleted by hand, a copy cut short) was called "an LMDB environment that
    # is not a datakit pack", --overwrite refused too: it is a pack killed before its first commit
    cut = tmp_path / "cut.lmdb"
    cut.mkdir()
    (cut / "classes.json").write_text('{"classes": ["a", "b"]}')
    with pytest.raises(UsageError) as e:
        pack_lmdb(class_folder, cut, workers=1)
    assert str(e.value) == f"{cut}: already exists; use --resume to continue an interrupted pack or --overwrite"
    assert pack_lmdb(class_folder, cut, workers=1, overwrite=True).count == 12
    # a classes.json of yours (a list, not a pack's) is not touched
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "classes.json").write_text('["dog", "cat"]')
    for resume in (False, True):
        with pytest.raises(UsageError) as e:
            pack_lmdb(class_folder, mine, workers=1, resume=resume)
        assert (
            str(e.value)
            == f"{mine}: holds a classes.json that is not a datakit pack's; not touching it, pick another OUT"
        )
    assert os.listdir(mine) == ["classes.json"] and (mine / "classes.json").read_text() == '["dog", "cat"]'
    assert main(["pack-lmdb", str(class_folder), str(note), "--overwrite", "-q"]) == 2


def test_corrupt_sources_refused_or_skipped(class_folder: Path, tmp_path: Path):
    bad = class_folder / "dog" / "图片_2.jpg"
    bad.write_bytes(bad.read_bytes()[:300])
    with pytest.raises(PackError) as e:
        pack_lmdb(class_folder, tmp_path / "a.lmdb", workers=2)
    lines = str(e.value).splitlines()
    assert lines[0] == (
        "1 unreadable image (the pack holds the 6 samples before the first; fix them and run the same command with "
        "--resume, or the same command with --resume --skip-bad to leave them out):"
    )
    assert lines[1] == f"{bad}: truncated JPEG (no end-of-image marker)"
    with pytest.raises(PackError, match="incomplete pack"):
        open_dataset(tmp_path / "a.lmdb")
    report = pack_lmdb(class_folder, tmp_path / "b.lmdb", workers=2, skip_bad=True)
    assert report.count == 11 and report.skipped == [f"{bad}: truncated JPEG (no end-of-image marker)"]
    assert lmdb_info(tmp_path / "b.lmdb")["skipped"] == report.skipped


def test_the_bytes_validated_are_the_bytes_packed(class_folder: Path, tmp_path: Path, monkeypatch):
    # a file rewritten or deleted right after its validation: the pack holds what was validated, never
    # the new (unvalidated) bytes, with the checksum of what it holds
    import datakit.pack as pack_module

    victim, gone = class_folder / "dog" / "图片_2.jpg", class_folder / "cat" / "图片_1.png"
    originals = {str(p): p.read_bytes() for p in (victim, gone)}
    validate = pack_module._prepare

    def then_change(ds, i, **kw):
        result = validate(ds, i, **kw)
        if ds.name(i) == str(victim):
            victim.write_bytes(victim.read_bytes()[:300])
        elif ds.name(i) == str(gone):
            gone.unlink()
        return result

    monkeypatch.setattr(pack_module, "_prepare", then_change)
    report = pack_lmdb(class_folder, tmp_path / "a.lmdb", workers=2)
    assert report.count == 12 and report.skipped == []
    assert verify_lmdb(tmp_path / "a.lmdb") == []
    stored = {name: value for value, _, name in values(tmp_path / "a.lmdb")}
    assert stored["dog/图片_2.jpg"] == originals[str(victim)] and stored["cat/图片_1.png"] == originals[str(gone)]


def test_a_file_gone_before_it_is_read_or_not_an_image_is_one_plain_line(class_folder: Path, tmp_path: Path,
                                                                         monkeypatch):  # fmt: skip
    import datakit.pack as pack_module

    gone, junk = class_folder / "dog" / "图片_2.jpg", class_folder / "cat" / "图片_0.jpg"
    junk.write_bytes(b"junk data, not an image")
    validate = pack_module._prepare

    def delete_first(ds, i, **kw):
        if ds.name(i) == str(gone):
            gone.unlink()
        return validate(ds, i, **kw)

    monkeypatch.setattr(pack_module, "_prepare", delete_first)
    report = pack_lmdb(class_folder, tmp_path / "a.lmdb", workers=2, skip_bad=True)
    assert report.count == 10
    assert report.skipped == [
        f"{junk}: not a recognised image format (starts with b'junk dat'; cannot identify image file)",
        f"missing: {gone} (gone from the folder while it was packed)",
    ]
    assert report.skipped_summary == "1 missing file and 1 unreadable image"


def test_shards_read_as_one(class_folder: Path, tmp_path: Path):
    for i in range(3):
        pack_lmdb(class_folder, tmp_path / f"shard-{i}.lmdb", shard=f"{i}/3", workers=1)
    whole = open_dataset(class_folder)
    ds = open_dataset(str(tmp_path / "shard-*.lmdb"))
    assert len(ds) == 12 and ds.targets.tolist() == whole.targets.tolist()
    for i in range(12):
        np.testing.assert_array_equal(ds[i][0], whole[i][0])
    # a glob beside another name, as a shell passes a quoted one with others (it was taken as a file name)
    mixed = open_dataset([str(tmp_path / "shard-[01].lmdb"), tmp_path / "shard-2.lmdb"])
    assert len(mixed) == 12 and mixed.targets.tolist() == whole.targets.tolist()
    assert main(["stats", str(tmp_path / "shard-[01].lmdb"), str(tmp_path / "shard-2.lmdb"), "-q"]) == 0
    with pytest.raises(UsageError, match=r"shard I/N needs 0 <= I < N, got 3/3"):
        pack_lmdb(class_folder, tmp_path / "x.lmdb", shard="3/3")


def test_info_counts_the_classes_a_shard_has_no_sample_of(class_folder: Path, tmp_path: Path, capsys):
    out = tmp_path / "one.lmdb"
    assert main(["pack-lmdb", str(class_folder), str(out), "--shard", "0/12", "--workers", "1", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["info", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["class_counts"] == {"cat": 1, "dog": 0, "鸟": 0}
    assert main(["info", str(out)]) == 0
    assert capsys.readouterr().out.endswith("class  samples\n-----  -------\ncat    1\ndog    0\n鸟     0\n")


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
        if len(calls) == 4:  # the creation commit, two of 4 samples, then the disk is full
            raise lmdb.DiskError("mdb_txn_commit: No space left on device")
        return real(self, items, meta)

    monkeypatch.setattr(dl.LmdbWriter, "_write", disk_full)
    with pytest.raises(PackError) as e:
        pack_lmdb(class_folder, out, workers=1, commit_every=4)
    assert str(e.value).startswith(f"{out}: writing failed after 8 committed samples (DiskError: ")
    assert str(e.value).endswith("then run the same command with --resume")
    monkeypatch.undo()
    assert read_meta(out)["count"] == 8
    report = pack_lmdb(class_folder, out, workers=1, resume=True, commit_every=4)
    assert report.resumed_from == 8 and report.count == 12 and verify_lmdb(out) == []


def test_resume_refuses_a_part_whose_stored_names_were_altered(class_folder: Path, tmp_path: Path, monkeypatch):
    # the attack: a name of the part packed so far altered on disk, then --resume: the pack finished with the altered
    # name under a fresh checksum and verified clean
    import datakit.lmdb as dl

    out = tmp_path / "part.lmdb"
    real, calls = dl.LmdbWriter._write, []

    def disk_full(self, items, meta):
        calls.append(meta["count"])
        if len(calls) == 4:
            raise lmdb.DiskError("mdb_txn_commit: No space left on device")
        return real(self, items, meta)

    monkeypatch.setattr(dl.LmdbWriter, "_write", disk_full)
    with pytest.raises(PackError):
        pack_lmdb(class_folder, out, workers=1, commit_every=4)
    monkeypatch.undo()
    dl.close_pack(out)
    env = lmdb.open(str(out))
    with env.begin(write=True) as txn:
        name = txn.get(b"n0000000003")
        txn.put(b"n0000000003", name.replace("图片".encode(), "图像".encode()))
    env.close()
    with pytest.raises(PackError) as e:
        pack_lmdb(class_folder, out, workers=1, resume=True)
    altered = name.decode().replace("图片", "图像")
    assert str(e.value) == (f"{out}: sample 3's stored name {altered!r} is no source sample's in its place: the part "
                            "packed so far was altered since it was written; pack it again with --overwrite")  # fmt: skip
    assert pack_lmdb(class_folder, out, workers=1, overwrite=True).count == 12 and verify_lmdb(out) == []


# ---------------------------------------------------------------------------------------------
# real processes: SIGKILL, a second writer


def _photo_folder(root: Path, n: int) -> Path:
    for i in range(n):
        d = root / f"c{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        imwrite(d / f"{i:04d}.jpg", synthetic_image(480, 640, seed=i), quality=90)
    return root


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "datakit.cli", "pack-lmdb", *args]


def _meta_or_none(out: Path) -> dict | None:
    try:
        return read_meta(out)
    except PackError:
        return None


def _kill_when(proc: subprocess.Popen, ready, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    try:
        while time.time() < deadline and proc.poll() is None and not ready():
            time.sleep(0.005)
        assert proc.poll() is None, "packing finished before it could be interrupted"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    return _photo_folder(tmp_path_factory.mktemp("photos") / "src", 240)


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["at-start", "before-first-sample-commit", "after-some-commits"])
def test_sigkill_then_resume_is_identical(photos: Path, tmp_path: Path, moment: str):
    ref = tmp_path / "ref.lmdb"
    pack_lmdb(photos, ref, max_size=160, workers=1)
    out = tmp_path / "killed.lmdb"
    opts = ["--max-size", "160", "--workers", "1", "-q"]
    if moment == "after-some-commits":
        opts += ["--commit-every", "7"]
    proc = subprocess.Popen(_cli(str(photos), str(out), *opts))
    if moment == "at-start":
        _kill_when(proc, lambda: out.exists())
    elif moment == "before-first-sample-commit":
        _kill_when(proc, lambda: _meta_or_none(out) is not None)
        assert read_meta(out)["count"] == 0  # killed while only the creation commit was there
    else:
        _kill_when(proc, lambda: (_meta_or_none(out) or {}).get("count", 0) >= 30)
        meta = read_meta(out)
        assert meta["complete"] is False and 30 <= meta["count"] < 240
    left = list(out.iterdir())
    again = subprocess.run(_cli(str(photos), str(out), *opts), capture_output=True, text=True, timeout=120)
    if moment == "at-start" and not left:
        # killed before even its lock file was made (a slow start): the empty folder left is packed into (a lock
        # file alone says a run began: refused as below, and resumed)
        assert again.returncode == 0, again.stderr
        assert values(out) == values(ref) and lmdb_info(out)["count"] == 240
        return
    assert again.returncode == 2
    assert again.stderr.strip() == (f"datakit pack-lmdb: error: {out}: already exists; use --resume to continue an "
                                    "interrupted pack or --overwrite")  # fmt: skip
    resumed = subprocess.run(_cli(str(photos), str(out), *opts, "--resume"), capture_output=True, text=True,
                             timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert values(out) == values(ref)
    assert verify_lmdb(out) == [] and lmdb_info(out)["count"] == 240


@pytest.mark.slow
def test_overwrite_killed_midway_leaves_the_old_pack_whole_and_resumes(photos: Path, tmp_path: Path, class_folder):
    # The attack: --overwrite deleted the old pack first and built in its place; a kill -9 part-way left an
    # incomplete pack (or none at all), and the complete old one was gone.
    out = tmp_path / "train.lmdb"
    pack_lmdb(class_folder, out, workers=1)
    old = values(out)
    ref = tmp_path / "ref.lmdb"
    pack_lmdb(photos, ref, max_size=160, workers=1)
    opts = ["--max-size", "160", "--workers", "1", "--commit-every", "7", "-q", "--overwrite"]
    part = tmp_path / ".train.lmdb.overwrite-part"
    proc = subprocess.Popen(_cli(str(photos), str(out), *opts))
    _kill_when(proc, lambda: (_meta_or_none(part) or {}).get("count", 0) >= 30)
    assert values(out) == old and verify_lmdb(out) == [] and lmdb_info(out)["count"] == 12  # the old one, whole
    assert len(open_dataset(out)) == 12
    again = subprocess.run(_cli(str(photos), str(out), *opts), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert values(out) == values(ref) and verify_lmdb(out) == [] and lmdb_info(out)["count"] == 240
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".train")) == []


# ---------------------------------------------------------------------------------------------
# a full disk, in a real process: its files cut at RLIMIT_FSIZE (no root, no small filesystem needed)


def _noise_folder(root: Path, n: int) -> list[str]:
    """``n`` JPEGs of noise (which does not compress: about 20 KB each) in two class folders; returns their
    names as a pack stores them, in order."""
    rng = np.random.default_rng(0)
    for i in range(n):
        (root / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        img = rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)
        cv2.imwrite(str(root / f"c{i % 2}" / f"{i:03d}.jpg"), img, [cv2.IMWRITE_JPEG_QUALITY, 95])
    return sorted(f"c{i % 2}/{i:03d}.jpg" for i in range(n))


def _disk_of(limit: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child may write files of ``limit`` bytes at most, and a write past it fails (EFBIG,
    or a short write) instead of killing it (SIGXFSZ ignored), as a write to a full disk fails."""

    def cut() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return cut


def _cut(limit: int) -> set[str]:
    """What a commit cut at ``limit`` bytes fails with: LMDB calls a short write an I/O error."""
    hint = f"; this process may write files of {limit} bytes at most (ulimit -f)"
    return {f"Error: mdb_txn_commit: {os.strerror(e)}{hint}" for e in (errno.EIO, errno.EFBIG)}


def test_overwrite_on_a_full_disk_keeps_the_old_pack_and_says_how_to_go_on(class_folder: Path, tmp_path: Path,
                                                                           monkeypatch):  # fmt: skip
    # The attack: the disk filled while --overwrite built the new pack; the line named the hidden part folder and
    # said "run the same command with --resume", which refuses (another source) or calls the old pack finished.
    src, out, part = tmp_path / "src", tmp_path / "out.lmdb", tmp_path / ".out.lmdb.overwrite-part"
    names = _noise_folder(src, 60)
    pack_lmdb(class_folder, out, workers=1)
    old = values(out)
    opts = ["--overwrite", "--workers", "1", "--commit-every", "10"]
    full = subprocess.run(_cli(str(src), str(out), *opts), capture_output=True, text=True, timeout=300,
                          preexec_fn=_disk_of(600_000))  # fmt: skip
    n = read_meta(part)["count"]
    close_pack(part)
    assert 0 < n < 60 and (full.returncode, full.stdout) == (1, ""), full.stderr
    assert full.stderr in {
        f"datakit pack-lmdb: error: {out}: writing the new pack failed after {n} committed samples ({why}), at "
        f"sample {n} ({names[n]}); {out} still holds the old pack, untouched; the {n} new samples written so far "
        f"are kept in {part}: free space (the old pack and the new one need room side by side) or fix the cause, "
        f"then run the same --overwrite command to go on from them, or delete {part} to give its space back\n"
        for why in _cut(600_000)
    }
    assert values(out) == old and verify_lmdb(out) == []
    # still full: not even the part's lock file can be written; what the part holds is kept, and said
    import datakit.pack as pack_module

    def no_room(folder):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pack_module, "PackLock", lambda f: no_room(f) if Path(f) == part else PackLock(f))
    with pytest.raises(PackWriteError) as e:
        pack_lmdb(src, out, overwrite=True, workers=1)
    monkeypatch.undo()
    assert str(e.value) == (
        f"{out}: writing the new pack failed after {n} committed samples (OSError: [Errno 28] No space left on "
        f"device); {out} still holds the old pack, untouched; the {n} new samples written so far are kept in {part}: "
        "free space (the old pack and the new one need room side by side) or fix the cause, then run the same "
        f"--overwrite command to go on from them, or delete {part} to give its space back"
    )
    again = subprocess.run(_cli(str(src), str(out), *opts), capture_output=True, text=True, timeout=300)
    assert (again.returncode, again.stderr) == (0, "")
    assert again.stdout.startswith(f"packed 60 images (resumed after {n}) into {out}: ")
    assert [name for _, _, name in values(out)] == names and verify_lmdb(out) == [] and not part.exists()


@pytest.mark.parametrize("flag", [[], ["--overwrite"]])  # --overwrite of nothing: the pack is built in place
def test_a_new_pack_on_a_full_disk_says_resume_and_resume_finishes_it(tmp_path: Path, flag: list[str]):
    src, out = tmp_path / "src", tmp_path / "out.lmdb"
    names = _noise_folder(src, 60)
    opts = ["--workers", "1", "--commit-every", "10"]
    full = subprocess.run(_cli(str(src), str(out), *opts, *flag), capture_output=True, text=True, timeout=300,
                          preexec_fn=_disk_of(600_000))  # fmt: skip
    n = read_meta(out)["count"]
    close_pack(out)
    again = "the same command with --resume" + (" in place of --overwrite" if flag else "")
    assert 0 < n < 60 and (full.returncode, full.stdout) == (1, ""), full.stderr
    assert full.stderr in {
        f"datakit pack-lmdb: error: {out}: writing failed after {n} committed samples ({why}), at sample {n} "
        f"({names[n]}); free space or fix the cause, then run {again}\n"
        for why in _cut(600_000)
    }
    with pytest.raises(PackError, match=rf"incomplete pack \({n} of 60 samples\)"):
        open_dataset(out)  # never read as a whole pack
    resumed = subprocess.run(_cli(str(src), str(out), *opts, "--resume"), capture_output=True, text=True, timeout=300)
    assert (resumed.returncode, resumed.stderr) == (0, "")
    assert resumed.stdout.startswith(f"packed 60 images (resumed after {n}) into {out}: ")
    assert [name for _, _, name in values(out)] == names and verify_lmdb(out) == []


def test_no_room_to_create_a_pack_is_a_failed_write_not_a_damaged_pack(class_folder: Path, tmp_path: Path):
    # The attack: a disk too full for LMDB's lock file: "opening the pack failed (...); run `datakit verify`,
    # copy it again or re-pack", of a pack never written.
    out, part = tmp_path / "new.lmdb", tmp_path / ".new.lmdb.overwrite-part"
    hint = "this process may write files of 50000 bytes at most (ulimit -f)"  # LMDB's lock file is 65664 bytes
    full = subprocess.run(_cli(str(class_folder), str(out), "--workers", "1"), capture_output=True, text=True,
                          timeout=300, preexec_fn=_disk_of(50_000))  # fmt: skip
    assert (full.returncode, full.stdout, full.stderr) == (1, "", (
        f"datakit pack-lmdb: error: {out}: writing failed after 0 committed samples (Error: {out}: File too large; "
        f"{hint}); free space or fix the cause, then run the same command with --resume\n"))  # fmt: skip
    resumed = subprocess.run(_cli(str(class_folder), str(out), "--workers", "1", "--resume", "-q"),
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert (resumed.returncode, resumed.stderr) == (0, "") and lmdb_info(out)["count"] == 12
    old = values(out)
    full = subprocess.run(_cli(str(class_folder), str(out), "--workers", "1", "--overwrite", "--max-size", "8"),
                          capture_output=True, text=True, timeout=300, preexec_fn=_disk_of(50_000))  # fmt: skip
    assert (full.returncode, full.stderr) == (1, (
        f"datakit pack-lmdb: error: {out}: writing the new pack failed after 0 committed samples (Error: {part}: "
        f"File too large; {hint}); {out} still holds the old pack, untouched: free space or fix the cause, then run "
        "the same --overwrite command again\n"))  # fmt: skip
    assert values(out) == old and not part.exists()  # a part with nothing in it is not left behind


def test_a_damaged_pack_run_again_is_told_to_overwrite_not_resume(class_folder, tmp_path, capsys):
    # the attack: a half-copied pack, packed again: "use --resume to continue an interrupted pack or --overwrite";
    # --resume then said only "truncated ... copy it again or re-pack"
    out = tmp_path / "p.lmdb"
    pack_lmdb(class_folder, out, workers=1)
    data = out / "data.mdb"
    size = data.stat().st_size
    os.truncate(data, size // 2)
    assert main(["pack-lmdb", str(class_folder), str(out), "--workers", "1", "-q"]) == 2
    assert capsys.readouterr().err == (
        f"datakit pack-lmdb: error: {out}: already exists, but cannot be read (truncated: {size // 2} of {size} bytes; "
        "copy it again or re-pack); use --overwrite to pack it again\n"
    )
    assert main(["pack-lmdb", str(class_folder), str(out), "--workers", "1", "-q", "--overwrite"]) == 0
    assert verify_lmdb(out) == []


def test_overwrite_deletes_nothing_of_the_users_beside_or_in_the_pack(class_folder, tmp_path, monkeypatch):
    # the attacks: a folder of the user's named .OUT.overwrite-old was deleted by --overwrite (even by one that was then
    # refused); a file put in OUT while --overwrite built the new pack went with the old pack's folder
    import datakit.pack as pack_module

    out, part, aside = tmp_path / "p.lmdb", tmp_path / ".p.lmdb.overwrite-part", tmp_path / ".p.lmdb.overwrite-old"
    pack_lmdb(class_folder, out, workers=1)
    old = values(out)
    aside.mkdir()
    (aside / "thesis.tex").write_text("precious")
    with pytest.raises(UsageError) as e:
        pack_lmdb(class_folder, out, workers=1, overwrite=True, max_size=8)
    assert str(e.value) == (
        f"{aside}: exists and is not a pack that pack-lmdb --overwrite put aside (it puts the pack it replaces there "
        "until it is removed); not touching it: move it away"
    )
    assert (aside / "thesis.tex").read_text() == "precious" and values(out) == old
    shutil.rmtree(aside)
    fill = pack_module._fill

    def fill_and_meanwhile(*args, **kwargs):
        (out / "NOTES.txt").write_text("mine")
        return fill(*args, **kwargs)

    monkeypatch.setattr(pack_module, "_fill", fill_and_meanwhile)
    with pytest.raises(UsageError) as e:
        pack_lmdb(class_folder, out, workers=1, overwrite=True, max_size=8)
    assert str(e.value) == (
        f"{out}: NOTES.txt put in it while the new pack was built; not replacing it, so as not to delete them: the "
        f"new pack is complete in {part}: move them out of {out} and run the same command again to put it in place"
    )
    assert (out / "NOTES.txt").read_text() == "mine" and values(out) == old
    monkeypatch.undo()
    (out / "NOTES.txt").unlink()
    report = pack_lmdb(class_folder, out, workers=1, overwrite=True, max_size=8)
    assert (report.count, report.resumed_from) == (12, 12) and not part.exists() and not aside.exists()
    assert read_meta(out)["options"]["max_size"] == 8


def test_an_old_pack_half_removed_by_a_killed_overwrite_is_removed_by_the_next(class_folder, tmp_path, monkeypatch):
    # The attack: SIGKILL while --overwrite removed the old pack it had put aside: rmtree had removed lock.mdb and
    # the .swapped-out marker, not data.mdb and pack.lock, and every later --overwrite was refused ("exists and is not
    # a pack that pack-lmdb --overwrite put aside"), exit 2
    import datakit.pack as pack_module
    from datakit.lmdb import SWAPPED_OUT

    out, aside = tmp_path / "p.lmdb", tmp_path / ".p.lmdb.overwrite-old"
    pack_lmdb(class_folder, out, workers=1)
    removed = []
    real_unlink = os.unlink

    def record(path, *a, **k):
        removed.append(os.path.basename(path))
        real_unlink(path, *a, **k)

    monkeypatch.setattr(pack_module.os, "unlink", record)
    pack_lmdb(class_folder, out, workers=1, overwrite=True, max_size=8)
    monkeypatch.undo()
    assert removed[-1] == SWAPPED_OUT and sorted(removed) == sorted(["data.mdb", "lock.mdb", "classes.json",
                                                                     "pack.lock", SWAPPED_OUT])  # fmt: skip
    # what the killed run left: some of the old pack's files, its marker gone (as rmtree left them)
    aside.mkdir()
    shutil.copy(out / "data.mdb", aside / "data.mdb")
    (aside / "pack.lock").write_text("")
    report = pack_lmdb(class_folder, out, workers=1, overwrite=True)
    assert report.count == 12 and not aside.exists() and verify_lmdb(out) == []


@pytest.mark.parametrize("how", ["exchange", "renames"])
def test_a_failed_swap_keeps_the_old_pack_and_the_same_command_swaps(class_folder, tmp_path, monkeypatch, how):
    import datakit.pack as pack_module

    out, part = tmp_path / "p.lmdb", tmp_path / ".p.lmdb.overwrite-part"
    pack_lmdb(class_folder, out, workers=1)
    old = values(out)

    def fail(*args):
        raise OSError(errno.EIO, "Input/output error")

    if how == "exchange":
        monkeypatch.setattr(pack_module, "_exchange", fail)
    else:  # no renameat2: two renames, the second of which fails
        real = os.rename
        monkeypatch.setattr(pack_module, "_exchange", lambda a, b: False)
        monkeypatch.setattr(pack_module.os, "rename", lambda a, b: fail() if Path(a) == part else real(a, b))
    with pytest.raises(PackWriteError) as e:
        pack_lmdb(class_folder, out, workers=1, overwrite=True, max_size=8)
    assert str(e.value) == (
        f"{out}: putting the new pack in place failed after 12 committed samples (OSError: [Errno 5] Input/output "
        f"error); the new pack is complete in {part} and {out} still holds the old one: fix the cause, then run the "
        "same --overwrite command again to swap them"
    )
    assert values(out) == old and verify_lmdb(out) == []
    monkeypatch.undo()
    report = pack_lmdb(class_folder, out, workers=1, overwrite=True, max_size=8)
    assert (report.count, report.resumed_from) == (12, 12) and not part.exists()
    assert read_meta(out)["options"]["max_size"] == 8 and verify_lmdb(out) == []


def test_bad_images_met_by_an_overwrite_say_to_run_it_again_not_resume(class_folder: Path, tmp_path: Path):
    out = tmp_path / "p.lmdb"
    pack_lmdb(class_folder, out, workers=1)
    (class_folder / "dog" / "图片_0.jpg").write_bytes(b"")
    with pytest.raises(PackError) as e:
        pack_lmdb(class_folder, out, workers=1, overwrite=True)
    part = tmp_path / ".p.lmdb.overwrite-part"
    assert str(e.value).splitlines() == [
        f"1 unreadable image ({out} still holds the old pack, untouched; the 4 new samples before the first are kept "
        f"in {part}: fix them and run the same --overwrite command to go on from them, or the same --overwrite "
        f"command with --skip-bad to leave them out, or delete {part} to give its space back):",
        f"{class_folder / 'dog' / '图片_0.jpg'}: empty file (0 bytes)",
    ]
    assert lmdb_info(out)["count"] == 12 and read_meta(part)["count"] == 4


def _photo_classes(src: Path, n: int) -> Path:
    """``n`` JPEGs of 120 x 160 in two class folders, c0 and c1."""
    for k in range(n):
        (src / f"c{k % 2}").mkdir(parents=True, exist_ok=True)
        imwrite(src / f"c{k % 2}" / f"{k:03d}.jpg", synthetic_image(120, 160, seed=k), quality=90)
    return src


def _wait_for_commits(proc: subprocess.Popen, out: Path, count: int) -> None:
    """Wait until the pack job ``proc`` has committed ``count`` samples to ``out``, still running."""
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and (_meta_or_none(out) or {}).get("count", 0) < count:
        time.sleep(0.002)
    assert proc.poll() is None, "packing finished before it could be interrupted"


def test_ctrl_c_to_the_whole_group_is_one_line_with_pool_workers(tmp_path: Path):
    # the attack: Ctrl-C in a terminal (SIGINT to the process group) during `pack-lmdb --max-size` printed
    # "Process ForkPoolWorker-1:" and sometimes a worker's KeyboardInterrupt traceback beside "interrupted"
    src = _photo_classes(tmp_path / "src", 400)
    out = tmp_path / "cut.lmdb"
    proc = subprocess.Popen(_cli(str(src), str(out), "--max-size", "64", "--workers", "2", "--commit-every", "2",
                                 "-q"), stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    _wait_for_commits(proc, out, 20)
    os.killpg(proc.pid, signal.SIGINT)  # the group this test started: the packer and its pool
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (130, INTERRUPTED)


def test_an_overwrite_of_an_out_not_there_interrupted_says_resume_in_place_of_overwrite(tmp_path: Path):
    # the attack: `pack-lmdb SRC OUT --overwrite` with no OUT yet, interrupted, said only "interrupted"; the same
    # command again started over from zero, throwing the committed samples away
    src = _photo_classes(tmp_path / "src", 300)
    out = tmp_path / "new.lmdb"
    opts = ["--max-size", "64", "--workers", "1", "--commit-every", "2", "-q"]
    proc = subprocess.Popen(_cli(str(src), str(out), *opts, "--overwrite"), stderr=subprocess.PIPE, text=True)
    _wait_for_commits(proc, out, 20)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (130, "datakit pack-lmdb: interrupted; the samples committed stay: the same "
                                      "command with --resume in place of --overwrite goes on from them\n")  # fmt: skip
    kept = read_meta(out)["count"]
    assert kept >= 20 and not (tmp_path / ".new.lmdb.overwrite-part").exists()
    report = pack_lmdb(src, out, workers=1, resume=True, max_size=64)
    assert (report.count, report.resumed_from) == (300, kept) and verify_lmdb(out) == []


def test_an_overwrite_of_an_interrupted_pack_interrupted_in_turn_gives_no_resume_advice(tmp_path: Path):
    # the attack: with -q (no line of where the new pack stands), an --overwrite of an incomplete pack, interrupted,
    # said "--resume in place of --overwrite": which resumed the old pack, and left the new samples in the part
    src = _photo_classes(tmp_path / "src", 300)
    out = tmp_path / "old.lmdb"
    with pytest.raises(KeyboardInterrupt):
        pack_lmdb(src, out, workers=1, max_size=64, commit_every=2, progress=stop_after_six)
    assert read_meta(out)["complete"] is False
    opts = ["--max-size", "64", "--workers", "1", "--commit-every", "2", "-q", "--overwrite"]
    proc = subprocess.Popen(_cli(str(src), str(out), *opts), stderr=subprocess.PIPE, text=True)
    part = tmp_path / ".old.lmdb.overwrite-part"
    _wait_for_commits(proc, part, 20)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (130, "datakit pack-lmdb: interrupted\n")
    assert read_meta(part)["count"] >= 20


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_threaded_pack_interrupted_mid_write_resumes_identical(photos: Path, tmp_path: Path, sig: int):
    # verbatim plain files: reader threads, commits written by the writer's thread while reading goes on
    ref = tmp_path / "ref.lmdb"
    pack_lmdb(photos, ref, workers=1)
    out = tmp_path / "cut.lmdb"
    opts = ["--workers", "2", "--commit-every", "2", "-q"]
    proc = subprocess.Popen(_cli(str(photos), str(out), *opts), stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and (_meta_or_none(out) or {}).get("count", 0) < 30:
        time.sleep(0.002)
    assert proc.poll() is None, "packing finished before it could be interrupted"
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    if sig == signal.SIGINT:
        assert (proc.returncode, err) == (130, INTERRUPTED)
    else:
        assert proc.returncode == -signal.SIGKILL
    meta = read_meta(out)
    assert meta["complete"] is False and 30 <= meta["count"] < 240
    assert verify_lmdb(out) == [f"{out}: incomplete pack ({meta['count']} of 240 samples)"]  # and nothing else wrong
    resumed = subprocess.run(_cli(str(photos), str(out), *opts, "--resume"), capture_output=True, text=True,
                             timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert values(out) == values(ref)
    assert verify_lmdb(out) == [] and lmdb_info(out)["count"] == 240


def test_a_second_writer_names_the_first_even_in_the_instant_before_it_wrote_its_pid(tmp_path: Path):
    # The attack: two pack-lmdb at once; the loser read the lock file between the winner's flock and its PID write
    # and said "PID unknown" (6 races in 40).
    from datakit.lmdb import PackLock

    out = tmp_path / "o.lmdb"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\nfcntl.flock(fd, fcntl.LOCK_EX)\n"
                               "print('held', flush=True)\ntime.sleep(0.1)\nos.pwrite(fd, b'4321\\n', 0)\n"
                               "time.sleep(30)", str(out / "pack.lock")], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(PackError) as e:
            PackLock(out)
        assert (
            str(e.value) == f"{out}: another process (PID 4321) is writing this pack; wait for it to finish or stop it"
        )
        lmdb.open(str(out)).close()  # the writer's first instant: the environment made, no metadata in it yet
        with pytest.raises(PackError) as e:
            open_dataset(out, allow_incomplete=True)
        assert str(e.value) == (
            f"{out}: being created by another process (PID 4321), which has not written its metadata yet; "
            "open it again in a moment"
        )
    finally:
        holder.kill()
        holder.wait()
    PackLock(out).close()  # free again once it is gone


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_end_with_a_killed_pack_and_print_nothing(photos: Path, tmp_path: Path):
    # plain files are read by threads; a zip's members by worker processes, which must not outlive the pack
    import zipfile

    src = tmp_path / "photos.zip"
    with zipfile.ZipFile(src, "w") as z:
        for p in sorted(photos.rglob("*.jpg")):
            z.write(p, p.relative_to(photos).as_posix())
    out = tmp_path / "orphans.lmdb"
    err = tmp_path / "stderr.txt"
    with open(err, "wb") as stderr:
        proc = subprocess.Popen(_cli(str(src), str(out), "--max-size", "160", "--workers", "2", "-q"),
                                stderr=stderr)  # fmt: skip
        deadline = time.time() + 60
        while time.time() < deadline and proc.poll() is None and len(_children(proc.pid)) < 2:
            time.sleep(0.01)
        workers = _children(proc.pid)
        assert len(workers) >= 2, "the pack's workers never started"
        _kill_when(proc, lambda: (_meta_or_none(out) or {}).get("count") is not None)
        deadline = time.time() + 10
        while time.time() < deadline and any(_state(w) not in (None, "Z") for w in workers):
            time.sleep(0.05)
    assert [w for w in workers if _state(w) not in (None, "Z")] == []  # the orphans did not go on decoding
    time.sleep(0.2)
    assert err.read_text(errors="replace") == ""  # no BrokenPipeError tracebacks


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _feed_fifo(fifo: Path, data: bytes, reader: subprocess.Popen, timeout: float = 60) -> None:
    """Write ``data`` into ``fifo`` once ``reader`` opens it; never block on a reader that died or never came."""
    deadline = time.time() + timeout
    while reader.poll() is None and time.time() < deadline:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: nobody has the pipe open for reading yet
            time.sleep(0.02)
            continue
        os.set_blocking(fd, True)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return
    if reader.poll() is None:
        reader.kill()


def test_second_writer_refused_while_the_first_runs(class_folder: Path, tmp_path: Path):
    # the first writer's last image is a named pipe: it holds the pack open until the test feeds it.
    # Folder scans list regular files only, so a label table names the pipe.
    fifo = class_folder / "鸟" / "图片_9.jpg"
    real = (class_folder / "鸟" / "图片_0.jpg").read_bytes()
    names = sorted(p.relative_to(class_folder).as_posix() for p in class_folder.rglob("*.*"))
    os.mkfifo(fifo)
    table = tmp_path / "labels.csv"
    table.write_text("file,label\n" + "".join(f"{n},{n.split('/')[0]}\n" for n in [*names, "鸟/图片_9.jpg"]),
                     encoding="utf-8")  # fmt: skip
    out = tmp_path / "one.lmdb"
    first = subprocess.Popen(_cli(str(class_folder), str(out), "--labels", str(table), "--workers", "1", "-q"))
    try:
        deadline = time.time() + 60
        while time.time() < deadline and ((_meta_or_none(out) or {}).get("count") is None):
            time.sleep(0.01)
        assert (out / "pack.lock").read_text() == f"{first.pid}\n"
        msg = f"{out}: another process (PID {first.pid}) is writing this pack; wait for it to finish or stop it"
        for extra in ([], ["--resume"], ["--overwrite"]):
            second = subprocess.run(_cli(str(class_folder), str(out), "-q", *extra), capture_output=True, text=True,
                                    timeout=120)  # fmt: skip
            assert (second.returncode, second.stderr.strip()) == (1, f"datakit pack-lmdb: error: {msg}")
        with pytest.raises(PackError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            pack_lmdb(class_folder, out, resume=True)
        assert first.poll() is None
    finally:
        _feed_fifo(fifo, real, first)  # let the first writer finish
        assert first.wait(120) == 0
    assert verify_lmdb(out) == [] and len(open_dataset(out)) == 13
    assert lmdb_info(out)["source"] == os.path.realpath(class_folder)
    assert open_dataset(out).read(12) == real


def test_a_named_pipe_in_the_source_is_read_by_its_worker_only(class_folder: Path, tmp_path: Path):
    # the cold-cache read-ahead opens the files ahead of the workers (it reaches the last one first): opening
    # the pipe would take its data, and the worker would wait for more forever
    fifo = class_folder / "鸟" / "管道.jpg"
    real = (class_folder / "鸟" / "图片_0.jpg").read_bytes()
    names = [*sorted(p.relative_to(class_folder).as_posix() for p in class_folder.rglob("*.*")), "鸟/管道.jpg"]
    os.mkfifo(fifo)
    table = tmp_path / "labels.csv"
    table.write_text("file,label\n" + "".join(f"{n},{n.split('/')[0]}\n" for n in names), encoding="utf-8")
    out = tmp_path / "pipe.lmdb"
    proc = subprocess.Popen(_cli(str(class_folder), str(out), "--labels", str(table), "--workers", "2", "-q"))
    try:
        _feed_fifo(fifo, real, proc)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ds = open_dataset(out)
    assert len(ds) == 13 and ds.name(12).endswith(":鸟/管道.jpg") and ds.read(12) == real


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_ends_a_pack_whose_reader_waits_on_a_named_pipe(tmp_path: Path, workers: str):
    # nobody writes the pipe: its reader waits in open() for ever, as `cat` would; Ctrl-C must still end the
    # pack at once, with one line, whether the reader is this process's main thread or one of its threads
    src = tmp_path / "src"
    for k in range(40):  # enough samples for reader threads (16 per worker at least)
        (src / f"c{k % 2}").mkdir(parents=True, exist_ok=True)
        imwrite(src / f"c{k % 2}" / f"图片_{k:02d}.jpg", synthetic_image(48, 64, seed=k), quality=90)
    names = [*sorted(p.relative_to(src).as_posix() for p in src.rglob("*.jpg")), "c1/管道.jpg"]
    os.mkfifo(src / "c1" / "管道.jpg")
    table = tmp_path / "labels.csv"
    table.write_text("file,label\n" + "".join(f"{n},{n.split('/')[0]}\n" for n in names), encoding="utf-8")
    out = tmp_path / "stuck.lmdb"
    proc = subprocess.Popen(_cli(str(src), str(out), "--labels", str(table), "--workers", workers, "-q"),
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.time() + 60
        while time.time() < deadline and _meta_or_none(out) is None:
            time.sleep(0.01)
        time.sleep(1.5)  # the 40 files before the pipe are read: its reader waits in open()
        assert proc.poll() is None
        t0 = time.time()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
        assert (proc.returncode, err) == (130, INTERRUPTED)
        assert time.time() - t0 < 5
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert read_meta(out)["count"] == 40  # what was read before Ctrl-C is kept
    assert verify_lmdb(out) == [f"{out}: incomplete pack (40 of 41 samples)"]


def test_resume_refuses_another_dataset_object_of_the_same_shape(class_folder: Path, tmp_path: Path):
    twin = tmp_path / "twin"
    for p in class_folder.rglob("*.*"):
        (twin / p.relative_to(class_folder)).parent.mkdir(parents=True, exist_ok=True)
        (twin / p.relative_to(class_folder)).write_bytes(p.read_bytes())
    imwrite(twin / "cat" / "图片_1.png", synthetic_image(40, 40, seed=99))  # same names and classes, other pixels
    out = tmp_path / "obj.lmdb"

    with pytest.raises(KeyboardInterrupt):
        pack_lmdb(open_dataset(class_folder), out, workers=0, commit_every=4, progress=stop_after_six)
    assert read_meta(out)["count"] == 6
    source = read_meta(out)["source"]
    assert source.startswith("FolderDataset of 12 samples (names and targets crc32 ")
    with pytest.raises(UsageError, match="was packed from another source"):
        pack_lmdb(open_dataset(twin), out, resume=True)
    report = pack_lmdb(open_dataset(class_folder), out, resume=True)
    assert (report.count, report.resumed_from) == (12, 6) and verify_lmdb(out) == []


def test_a_resume_that_adds_classes_is_told_so(class_folder: Path, tmp_path: Path, capsys):
    # The attack: a pack of a folder, killed, resumed with --classes naming the very same classes, was refused as
    # "packed from another source ('/data/x', now 'FolderDataset of 12 samples ...')": the same folder
    out = tmp_path / "c.lmdb"

    with pytest.raises(KeyboardInterrupt):
        pack_lmdb(str(class_folder), out, workers=0, commit_every=4, progress=stop_after_six)
    (tmp_path / "classes.txt").write_text("\n".join(open_dataset(class_folder).classes) + "\n", encoding="utf-8")
    argv = ["pack-lmdb", str(class_folder), str(out), "--resume", "-q"]
    assert main([*argv, "--classes", str(tmp_path / "classes.txt")]) == 2
    err = capsys.readouterr().err.strip()
    fingerprint = read_meta(out)["source"]
    assert fingerprint == os.path.realpath(class_folder)
    assert err.startswith(f"datakit pack-lmdb: error: {out}: was packed from a folder or file ({fingerprint!r}), now "
                          "from a dataset ('FolderDataset of 12 samples (names and targets crc32 ")  # fmt: skip
    assert err.endswith("; pack-lmdb --classes, and --encoding of a zip, make a dataset of its source): resume "
                        "with the first run's arguments, or use --overwrite")  # fmt: skip
    assert main(argv) == 0 and verify_lmdb(out) == []


def test_what_pack_stats_and_check_do_not_take_is_named(class_folder: Path, tmp_path: Path):
    from torch.utils.data import Subset

    from datakit.check import check_dataset
    from datakit.stats import compute_stats

    part = Subset(open_dataset(class_folder), [0, 1])
    with pytest.raises(UsageError) as e:
        pack_lmdb(part, tmp_path / "s.lmdb")
    assert str(e.value) == ("pack_lmdb takes a path or a datakit dataset (open_dataset), got Subset; pack the "
                            "dataset it is made of (shard= packs a part)")  # fmt: skip
    with pytest.raises(UsageError, match=r"^compute_stats takes a path or a datakit dataset \(open_dataset\), got "
                       "Subset; give the dataset it is made of"):  # fmt: skip
        compute_stats(part)
    with pytest.raises(UsageError, match=r"^check_dataset takes a path \(a folder, a table, a zip or a pack\), "
                       "got FolderDataset$"):  # fmt: skip
        check_dataset(open_dataset(class_folder))
    assert not (tmp_path / "s.lmdb").exists()


def test_no_space_for_the_lock_is_one_line(class_folder: Path, tmp_path: Path, monkeypatch, capsys):
    import errno

    import datakit.pack as pack_module

    def full(out):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pack_module, "PackLock", full)
    out = tmp_path / "full.lmdb"
    assert main(["pack-lmdb", str(class_folder), str(out)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"datakit pack-lmdb: error: {out}: writing failed after 0 committed samples (OSError: [Errno 28] No space "
        "left on device); free space or fix the cause, then run the same command with --resume"
    )


def test_interrupted_before_anything_was_committed_resumes(class_folder: Path, tmp_path: Path):
    out = tmp_path / "bare.lmdb"
    out.mkdir()
    (out / "pack.lock").write_text("12345\n")  # what a kill between taking the lock and the first commit leaves
    (out / "data.mdb").write_bytes(b"")
    with pytest.raises(UsageError, match="already exists; use --resume"):
        pack_lmdb(class_folder, out, workers=1)
    report = pack_lmdb(class_folder, out, workers=1, resume=True)
    assert report.count == 12 and report.resumed_from == 0 and verify_lmdb(out) == []
    close_pack(out)


def test_validation_probes_near_square_rotated_jpegs_without_a_full_decode(tmp_path: Path, monkeypatch):
    from PIL import Image

    import datakit.io as dio

    root = tmp_path / "src"
    (root / "a").mkdir(parents=True)
    shapes = {"square.jpg": (300, 300, 1), "turned.jpg": (514, 518, 6), "upright.jpg": (514, 518, 1)}
    for name, (h, w, orientation) in shapes.items():
        exif = Image.Exif()
        exif[0x0112] = orientation
        Image.fromarray(synthetic_image(h, w, seed=h)).save(root / "a" / name, quality=90, exif=exif.tobytes())
    full = []
    real, compiled = dio._torchvision_jpeg, dio._compiled_jpeg
    monkeypatch.setattr(dio, "_torchvision_jpeg", lambda raw, mode: full.append(mode) or real(raw, mode))
    monkeypatch.setattr(
        dio, "_compiled_jpeg", lambda raw, mode, f, name: (f == 1 and full.append(mode)) or compiled(raw, mode, f, name)
    )
    out = tmp_path / "p.lmdb"
    pack_lmdb(root, out, workers=1)
    assert full == []  # every size came from a reduced-scale decode
    sizes = {n: tuple(s) for n, s in zip(sorted(shapes), open_dataset(out).sizes().tolist())}
    assert sizes == {"square.jpg": (300, 300), "turned.jpg": (518, 514), "upright.jpg": (514, 518)}
    ds = open_dataset(out)
    assert [ds[i][0].shape[:2] for i in range(3)] == [(300, 300), (518, 514), (514, 518)]


def test_commits_on_a_time_interval(tmp_path: Path):
    from datakit.labels import ClassMap
    from datakit.lmdb import LmdbWriter

    meta = {"format": "datakit-lmdb", "version": 2, "classes": ClassMap(("a",)).to_json()}
    with LmdbWriter(tmp_path / "slow", meta, commit_seconds=3600) as w:
        assert w.meta["count"] == 0  # the metadata was committed when the pack was created
        w.add(b"x", 0, 1, 1, "x")
        assert w.count == 0  # pending
    with LmdbWriter(tmp_path / "fast", meta, commit_seconds=0.0) as w:
        w.add(b"x", 0, 1, 1, "x")
        assert w.count == 1  # committed at once: the interval had passed
    assert read_meta(tmp_path / "fast")["count"] == 1 and read_meta(tmp_path / "slow")["count"] == 0


def test_background_commits_count_once_written_and_a_failed_write_is_raised_next(tmp_path: Path, monkeypatch):
    import threading

    from datakit.labels import ClassMap
    from datakit.lmdb import LmdbWriter

    out = tmp_path / "bg"
    meta = {"format": "datakit-lmdb", "version": 2, "classes": ClassMap(("a",)).to_json()}
    real, gate = LmdbWriter._write, threading.Event()

    def held(self, items, m):
        if threading.current_thread().name == "datakit-lmdb-commit":
            assert gate.wait(30)
        return real(self, items, m)

    monkeypatch.setattr(LmdbWriter, "_write", held)
    with LmdbWriter(out, meta, commit_every=2, commit_seconds=3600, background=True) as w:
        w.add(b"a", 0, 1, 1, "a")
        w.add(b"b", 0, 1, 1, "b")  # a commit is due: its write is held in the writer's thread
        w.meta["skipped"] = ["x: bad"]  # the caller goes on changing the metadata meanwhile
        w.add(b"c", 0, 1, 1, "c")
        assert w.count == 0  # not written yet, not counted
        gate.set()
        w.commit()  # waits for the write in flight, then writes "c"
        assert w.count == 3 and w.meta["count"] == 3 and w.meta["skipped"] == ["x: bad"]

        def disk_full(self, items, m):
            raise PackWriteError(self.path, self.count, lmdb.DiskError("mdb_txn_commit: No space left on device"))

        monkeypatch.setattr(LmdbWriter, "_write", disk_full)
        w.add(b"d", 0, 1, 1, "d")
        w.add(b"e", 0, 1, 1, "e")  # its write fails in the writer's thread
        with pytest.raises(PackWriteError) as e:
            w.commit()
        assert str(e.value).startswith(f"{out}: writing failed after 3 committed samples (DiskError: ")
        assert w.count == 3
    monkeypatch.undo()
    assert read_meta(out)["count"] == 3 and read_meta(out)["skipped"] == ["x: bad"]
    assert [v for v, _, _ in values(out)] == [b"a", b"b", b"c"]


def test_ctrl_c_as_a_background_commit_starts_loses_no_sample(tmp_path: Path, monkeypatch):
    import threading

    from datakit.io import encode_image
    from datakit.labels import ClassMap
    from datakit.lmdb import LmdbWriter

    out = tmp_path / "cut"
    jpegs = [encode_image(synthetic_image(8, 8, seed=k), ".jpg", 90) for k in range(6)]
    meta = {"format": "datakit-lmdb", "version": 2, "classes": ClassMap(("a",)).to_json()}
    real_start, hit = threading.Thread.start, []

    def start(self):
        if self.name == "datakit-lmdb-commit" and not hit:
            hit.append(self)
            raise KeyboardInterrupt  # lands after the commit's thread was made, before it ran
        return real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(KeyboardInterrupt), LmdbWriter(out, meta, commit_every=3, background=True) as w:
        for k in range(5):
            w.add(jpegs[k], 0, 8, 8, f"s{k}")
    assert len(hit) == 1
    monkeypatch.undo()
    # leaving the with block on Ctrl-C wrote the three samples read, counted once
    assert read_meta(out)["count"] == 3
    assert [(v, n) for v, _, n in values(out)] == [(jpegs[k], f"s{k}") for k in range(3)]
    with LmdbWriter(out, read_meta(out), resume=True, commit_every=2, background=True) as w:
        assert w.count == 3
        for k in range(3, 6):
            w.add(jpegs[k], 0, 8, 8, f"s{k}")
        w._join()
        w._confirm(w.meta)  # confirming twice drops nothing more
        assert w.count == 5 and [p[0] for p in w._pending] == [5]
        w.finish()
    assert [(v, n) for v, _, n in values(out)] == [(jpegs[k], f"s{k}") for k in range(6)]
    assert verify_lmdb(out) == []


def test_a_writer_resumes_from_the_packs_own_count_and_refuses_a_complete_pack(tmp_path: Path):
    from datakit.io import encode_image
    from datakit.labels import ClassMap
    from datakit.lmdb import LmdbWriter

    out = tmp_path / "p"
    meta = {"format": "datakit-lmdb", "version": 2, "classes": ClassMap(("a",)).to_json()}
    jpegs = [encode_image(synthetic_image(8, 8, seed=k), ".jpg", 90) for k in range(5)]
    with LmdbWriter(out, meta, commit_every=1) as w:
        for k in range(3):
            w.add(jpegs[k], 0, 8, 8, f"s{k}")
    with LmdbWriter(out, dict(meta, count=0), resume=True) as w:  # the caller's count is wrong: the pack's wins
        assert w.count == 3
        for k in range(3, 5):
            w.add(jpegs[k], 0, 8, 8, f"s{k}")
        w.finish()
    assert [n for _, _, n in values(out)] == [f"s{k}" for k in range(5)] and verify_lmdb(out) == []
    with pytest.raises(PackError) as e:
        LmdbWriter(out, read_meta(out), resume=True)
    assert str(e.value) == f"{out}: a complete pack; nothing to resume (write a new pack to add samples)"
    assert read_meta(out)["complete"] is True and verify_lmdb(out) == []  # left as it was


def stopped_after_six(src: Path, out: Path, commit_every: int) -> Path:
    """``out``, a pack of ``src`` interrupted (Ctrl-C) after six samples, which it committed."""

    with pytest.raises(KeyboardInterrupt):
        pack_lmdb(src, out, workers=0, commit_every=commit_every, progress=stop_after_six)
    return out


def test_resume_of_a_copied_pack_refuses_a_packed_file_edited_since(tmp_path: Path):
    # the attack: a pack interrupted after 60 samples, an already-packed image replaced, the partial pack copied
    # (cp -r, to another disk: its data.mdb as new as the copy), --resume of the copy: the file's time was compared
    # with the copy's, and the 32 samples re-encoded to compare missed sample 1: exit 0, the old image kept
    src = tmp_path / "src"
    for c in ("a", "b"):
        (src / c).mkdir(parents=True)
        for k in range(40):
            imwrite(src / c / f"{k:02d}.jpg", synthetic_image(40, 40, seed=100 * ord(c) + k))

    def stop_after_60(done: int, total: int, nbytes: int) -> None:
        if done == 60:
            raise KeyboardInterrupt

    out, copy = tmp_path / "p.lmdb", tmp_path / "copy.lmdb"
    with pytest.raises(KeyboardInterrupt):
        pack_lmdb(src, out, workers=0, commit_every=10, max_size=16, progress=stop_after_60)
    assert read_meta(out)["count"] == 60
    time.sleep(0.05)  # past the clock's tick after the last commit
    edited = src / "a" / "01.jpg"  # sample 1, packed
    imwrite(edited, synthetic_image(40, 40, seed=7))
    time.sleep(0.05)
    shutil.copytree(out, copy, copy_function=shutil.copyfile)  # as cp -r: new times
    assert (copy / "data.mdb").stat().st_mtime_ns > edited.stat().st_mtime_ns
    with pytest.raises(UsageError) as e:
        pack_lmdb(src, copy, resume=True, workers=0, max_size=16)
    assert re.fullmatch(
        rf"{re.escape(str(copy))}: {re.escape(str(edited))} changed after its samples were packed \(modified, "
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}; the pack's last commit \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\); resume only "
        r"the same files, or use --overwrite",
        str(e.value),
    )
    assert read_meta(copy)["count"] == 60  # nothing written
    # and a backup restored over the pack's own files (the same inode, the restore's time)
    for name in ("data.mdb", "lock.mdb"):
        shutil.copyfile(copy / name, out / name)
    with pytest.raises(UsageError, match=re.escape(f"{edited} changed after its samples were packed (modified, ")):
        pack_lmdb(src, out, resume=True, workers=0, max_size=16)
    # the review round's: the writer's clock behind the file system's (an NFS server's), the pack resumed where it
    # was written: files made just before they were read are no edits
    src2, out2 = tmp_path / "src2", tmp_path / "p2.lmdb"
    shutil.copytree(src, src2)
    real = time.time_ns
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(time, "time_ns", lambda: real() - 120 * 10**9)
        with pytest.raises(KeyboardInterrupt):
            pack_lmdb(src2, out2, workers=0, commit_every=10, max_size=16, progress=stop_after_60)
    assert abs(read_meta(out2)["committed_ns"] - (out2 / "data.mdb").stat().st_mtime_ns) < 10**9  # the disk's clock
    assert pack_lmdb(src2, out2, resume=True, workers=0, max_size=16).count == 80


@pytest.mark.parametrize("change", ["moved to another class", "renamed", "replaced by another"])
def test_resume_refuses_a_source_folder_whose_files_changed(class_folder: Path, tmp_path: Path, change: str):
    # same count and classes, but the samples already packed are no longer the source's first ones
    out = stopped_after_six(class_folder, tmp_path / "p.lmdb", commit_every=4)
    began = read_meta(out)["source_names"]
    if change == "moved to another class":
        (class_folder / "cat" / "图片_0.jpg").rename(class_folder / "鸟" / "图片_9.jpg")
    elif change == "renamed":
        (class_folder / "cat" / "图片_0.jpg").rename(class_folder / "cat" / "图片_9.jpg")
    else:
        (class_folder / "cat" / "图片_0.jpg").unlink()
        imwrite(class_folder / "dog" / "图片_9.jpg", synthetic_image(20, 20))
    with pytest.raises(UsageError) as e:
        pack_lmdb(class_folder, out, resume=True)
    now = f"crc32 {_names_crc(open_dataset(class_folder), short=True):08x}"
    assert began != now and str(e.value) == (
        f"{out}: the source's files or labels changed since this pack began (names and targets {began} when it "
        f"began, {now} now); resume only the same files, or use --overwrite"
    )
    assert read_meta(out)["count"] == 6  # nothing written
    report = pack_lmdb(class_folder, out, overwrite=True)
    assert report.count == 12 and verify_lmdb(out) == []


def test_resume_refuses_a_packed_file_edited_while_the_pack_was_interrupted(class_folder: Path, tmp_path: Path):
    # the attack: killed after 120 samples, an already-packed JPEG overwritten by another, --resume: exit 0, a pack
    # mixing the file's old bytes with the rest, unlike a fresh pack of the same folder, and verify passing it
    out = stopped_after_six(class_folder, tmp_path / "p.lmdb", commit_every=3)
    assert read_meta(out)["count"] == 6
    time.sleep(0.05)  # past the clock's tick after the last commit
    later = class_folder / "鸟" / "图片_2.jpg"  # sample 10: not packed yet, its edit is the pack's
    imwrite(later, synthetic_image(21, 21, seed=5))
    assert pack_lmdb(class_folder, tmp_path / "q.lmdb", workers=0, commit_every=3).count == 12  # (a fresh one)
    edited = class_folder / "cat" / "图片_2.jpg"  # sample 2, packed
    imwrite(edited, synthetic_image(21, 21, seed=7))
    with pytest.raises(UsageError) as e:
        pack_lmdb(class_folder, out, resume=True, workers=0)
    assert re.fullmatch(
        rf"{re.escape(str(out))}: {re.escape(str(edited))} changed after its samples were packed \(modified, "
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}; the pack's last commit \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\); resume only "
        r"the same files, or use --overwrite",
        str(e.value),
    )
    assert read_meta(out)["count"] == 6  # nothing written
    assert main(["pack-lmdb", str(class_folder), str(out), "--resume", "-q"]) == 2
    assert pack_lmdb(class_folder, out, overwrite=True).count == 12 and verify_lmdb(out) == []


def test_resume_on_whole_second_times_refuses_a_file_edited_in_the_commits_second(class_folder: Path, tmp_path: Path,
                                                                                    monkeypatch):  # fmt: skip
    # the attack (exFAT, FAT: times kept in whole seconds, the status time the same): killed, an already-packed
    # image edited within the second of the last commit, --resume: its time equal to the pack's, taken as not
    # later, exit 0 with the old bytes kept (and the spot check reading other samples)
    out = stopped_after_six(class_folder, tmp_path / "p.lmdb", commit_every=3)
    edited = class_folder / "cat" / "图片_2.jpg"  # sample 2, packed
    imwrite(edited, synthetic_image(21, 21, seed=7))
    second = (out / "data.mdb").stat().st_mtime_ns // 10**9 * 10**9  # the commit's second, as exFAT keeps it
    real = os.stat
    said = re.escape(f"{edited} changed after its samples were packed (modified at a time its file system keeps in "
                     "whole seconds, which may stand for up to 2 s later: perhaps after the last commit, ")  # fmt: skip

    def whole_seconds(*paths: Path):  # os.stat giving these files the commit's second for every time
        def stat(path, *args, **kwargs):
            st = real(path, *args, **kwargs)
            if os.fspath(path) in {os.fspath(p) for p in paths}:
                fields = list(st)
                fields[7:10] = [second // 10**9] * 3  # st_atime, st_mtime, st_ctime
                st = os.stat_result(fields, {"st_atime_ns": second, "st_mtime_ns": second, "st_ctime_ns": second})
            return st

        return stat

    # the pack and the source on the disk of whole seconds; then (the review round's) the pack on a disk of
    # nanosecond times, the source on a USB disk of whole ones: the edit's time, rounded down, before the commit's
    for paths in ((edited, out / "data.mdb"), (edited,)):
        monkeypatch.setattr(os, "stat", whole_seconds(*paths))
        monkeypatch.setattr(os, "lstat", whole_seconds(*paths))
        with pytest.raises(UsageError, match=said):
            pack_lmdb(class_folder, out, resume=True, workers=0)


def test_resume_refuses_a_packed_file_replaced_by_one_with_an_older_time(class_folder: Path, tmp_path: Path):
    # the attack: the packed file replaced by `cp -p` (or mv, rsync -a, tar x, curl -R) of other bytes whose
    # modification time is older than the pack: --resume kept the old bytes, exit 0, verify passing it
    import shutil

    older = tmp_path / "older.jpg"  # made before the pack: its times (status time too) older than the commits
    imwrite(older, synthetic_image(19, 23, seed=8))
    time.sleep(0.05)
    out = stopped_after_six(class_folder, tmp_path / "p.lmdb", commit_every=3)
    other = tmp_path / "other.jpg"
    imwrite(other, synthetic_image(21, 21, seed=7))
    os.utime(other, (1_000_000_000, 1_000_000_000))  # 2001
    time.sleep(0.05)
    edited = class_folder / "cat" / "图片_2.jpg"  # sample 2, packed
    shutil.copy2(other, edited)  # cp -p
    assert os.stat(edited).st_mtime < os.stat(out / "data.mdb").st_mtime
    with pytest.raises(UsageError, match=re.escape(f"{edited} changed after its samples were packed (its status "
                                                   "changed: replaced or moved, by other bytes than it packed, ")):  # fmt: skip
        pack_lmdb(class_folder, out, resume=True, workers=0)
    assert read_meta(out)["count"] == 6
    # the same file re-pointed as a link (`ln -sf other.jpg`): the target's times are old, the link's own are not;
    # --resume kept the old bytes and verify passed them
    edited.unlink()
    os.symlink(older, edited)
    assert max(os.stat(edited).st_mtime, os.stat(edited).st_ctime) < os.stat(out / "data.mdb").st_mtime
    with pytest.raises(UsageError, match=re.escape(f"{edited} changed after its samples were packed (its status "
                                                   "changed: replaced or moved, by other bytes than it packed, ")):  # fmt: skip
        pack_lmdb(class_folder, out, resume=True, workers=0)


@pytest.mark.parametrize("max_size", [None, 32])
def test_resume_refuses_a_source_folder_swapped_whole_for_one_of_the_same_names(class_folder: Path, tmp_path: Path,
                                                                                 max_size):  # fmt: skip
    # The attack: after a kill, `mv data data_v1; mv data_v2 data`: the same names and labels, other images made
    # before the pack began, their times untouched by the folder's move. --resume packed the rest from v2 behind
    # v1's first samples (exit 0, verify passing); with --max-size alike, and a pack as the source too.
    import shutil

    v2 = tmp_path / "v2"
    shutil.copytree(class_folder, v2)
    for p in sorted(v2.rglob("图片_*")):
        imwrite(p, 255 - imread(p, "rgb"), mode="rgb")  # the same names, other pixels
    time.sleep(0.05)  # made before the pack begins: their times (status times too) older than its commits

    out = tmp_path / "p.lmdb"
    with pytest.raises(KeyboardInterrupt):
        pack_lmdb(class_folder, out, workers=0, commit_every=3, max_size=max_size, progress=stop_after_six)
    class_folder.rename(tmp_path / "v1")
    v2.rename(class_folder)
    with pytest.raises(UsageError) as e:
        pack_lmdb(class_folder, out, resume=True, workers=0, max_size=max_size)
    hint = (
        " or the pack was begun by another version of datakit or OpenCV, which re-encodes otherwise" if max_size else ""
    )
    assert str(e.value) == (f"{out}: {class_folder / 'cat' / '图片_0.jpg'} gives other bytes than the pack stores for "
                            "it: the source changed after its samples were packed (another folder, archive or pack "
                            f"put in its place?{hint}); resume only the same files, or use --overwrite")  # fmt: skip
    assert read_meta(out)["count"] == 6
    # the same folder back in place: the resume goes on, as an uninterrupted pack
    class_folder.rename(v2)
    (tmp_path / "v1").rename(class_folder)
    assert pack_lmdb(class_folder, out, resume=True, workers=0, max_size=max_size).count == 12
    fresh = tmp_path / "fresh.lmdb"
    pack_lmdb(class_folder, fresh, workers=0, max_size=max_size)
    a, b = open_dataset(out), open_dataset(fresh)
    assert [a.read(i) for i in range(12)] == [b.read(i) for i in range(12)] and verify_lmdb(out) == []


@pytest.mark.parametrize("how", ["a folder of the same names moved in", "a file edited"])
def test_an_overwrite_run_again_packs_afresh_when_its_parts_source_changed(class_folder: Path, tmp_path: Path, how):
    # The attack: --overwrite killed part-way, then the source changed (another folder of the same names moved in,
    # or an image edited), then the same --overwrite again: it resumed the part, and was refused by its own checks
    # with "... or use --overwrite" (every rerun, no way out but deleting the hidden part), or with the changes
    # outside the samples compared, mixed the two sources. The part is packed again from the start.
    import shutil

    out = tmp_path / "p.lmdb"
    pack_lmdb(class_folder, out, workers=0)
    v2 = tmp_path / "v2"
    shutil.copytree(class_folder, v2)
    for p in sorted(v2.rglob("图片_*")):
        imwrite(p, 255 - imread(p, "rgb"), mode="rgb")
    time.sleep(0.05)

    with pytest.raises(KeyboardInterrupt):
        pack_lmdb(class_folder, out, workers=0, commit_every=3, overwrite=True, progress=stop_after_six)
    part = tmp_path / ".p.lmdb.overwrite-part"
    assert read_meta(part)["count"] == 6
    if how == "a file edited":
        shutil.copy2(v2 / "cat" / "图片_0.jpg", class_folder / "cat" / "图片_0.jpg")
        os.utime(class_folder / "cat" / "图片_0.jpg")
    else:
        class_folder.rename(tmp_path / "v1")
        v2.rename(class_folder)
    assert main(["pack-lmdb", str(class_folder), str(out), "--overwrite", "-q", "--workers", "0"]) == 0
    fresh = tmp_path / "fresh.lmdb"
    pack_lmdb(class_folder, fresh, workers=0)
    a, b = open_dataset(out), open_dataset(fresh)
    assert [a.read(i) for i in range(12)] == [b.read(i) for i in range(12)] and verify_lmdb(out) == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".p.lmdb")) == []


def test_a_resume_of_packs_sharing_sample_names_goes_on(class_folder: Path, tmp_path: Path):
    # The attack: two packs of the same names (a and its flipped copy b) packed as one source, interrupted, then
    # --resume: a sample of b was compared with the bytes stored under the same name for a, and refused
    import shutil

    flipped = tmp_path / "flipped"
    shutil.copytree(class_folder, flipped)
    for p in sorted(flipped.rglob("图片_*")):
        imwrite(p, imread(p, "rgb")[:, ::-1], mode="rgb")
    a, b = tmp_path / "a.lmdb", tmp_path / "b.lmdb"
    pack_lmdb(class_folder, a, workers=0)
    pack_lmdb(flipped, b, workers=0)

    def stop_after_eighteen(done, total, nbytes):
        if done == 18:
            raise KeyboardInterrupt

    out = tmp_path / "k.lmdb"
    with pytest.raises(KeyboardInterrupt):
        pack_lmdb([a, b], out, workers=0, commit_every=3, progress=stop_after_eighteen)
    assert pack_lmdb([a, b], out, workers=0, resume=True).count == 24
    ref = tmp_path / "ref.lmdb"
    pack_lmdb([a, b], ref, workers=0)
    x, y = open_dataset(out), open_dataset(ref)
    assert [x.read(i) for i in range(24)] == [y.read(i) for i in range(24)] and verify_lmdb(out) == []


def test_an_overwrite_killed_after_its_swap_never_puts_the_old_pack_back(class_folder: Path, tmp_path: Path):
    # The attack: --overwrite exchanged the new pack into OUT, then was killed (SIGKILL) while removing the old one
    # from the part's place: run again, it found there a complete pack "of the same job" (same names and labels)
    # and swapped the old pack back, saying "complete already". The old pack is marked before the exchange.
    from datakit.lmdb import SWAPPED_OUT

    out = tmp_path / "p.lmdb"
    pack_lmdb(class_folder, out, workers=0)
    first = class_folder / "cat" / "图片_0.jpg"
    imwrite(first, np.full((40, 60, 3), 255, np.uint8), mode="rgb")  # an image fixed, then packed again
    new = tmp_path / "new.lmdb"
    pack_lmdb(class_folder, new, workers=0)
    # the moment of the kill, as the swap leaves it: the new pack in OUT, the old one (marked) at the part's place
    part = tmp_path / ".p.lmdb.overwrite-part"
    (out / SWAPPED_OUT).touch()
    out.rename(part)
    new.rename(out)
    assert main(["pack-lmdb", str(class_folder), str(out), "--overwrite", "-q", "--workers", "0"]) == 0
    assert int(open_dataset(out)[0][0].min()) == 255 and verify_lmdb(out) == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".p.lmdb")) == []
    # and the swap itself leaves no marker in the new pack, none of the old one behind
    imwrite(first, np.full((40, 60, 3), 0, np.uint8), mode="rgb")
    assert main(["pack-lmdb", str(class_folder), str(out), "--overwrite", "-q", "--workers", "0"]) == 0
    assert int(open_dataset(out)[0][0].max()) == 0 and not (out / SWAPPED_OUT).exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".p.lmdb")) == []


@pytest.mark.parametrize("change", ["chmod", "touch", "cp -p of the same bytes"])
def test_resume_keeps_a_packed_file_whose_time_moved_but_not_its_bytes(class_folder: Path, tmp_path: Path,
                                                                       change: str):  # fmt: skip
    # the attack: a chmod, a touch or a copy of the same bytes between a kill and --resume was refused like an
    # edit, and the only way on was packing everything again; the bytes say the file is the one packed
    import shutil

    out = stopped_after_six(class_folder, tmp_path / "p.lmdb", commit_every=3)
    time.sleep(0.05)
    packed = class_folder / "cat" / "图片_2.jpg"  # sample 2, packed
    if change == "chmod":
        packed.chmod(0o600)
    elif change == "touch":
        packed.touch()
    else:
        shutil.copy2(packed, tmp_path / "copy.jpg")
        shutil.copy2(tmp_path / "copy.jpg", packed)
    assert max(os.stat(packed).st_mtime_ns, os.stat(packed).st_ctime_ns) > os.stat(out / "data.mdb").st_mtime_ns
    assert main(["pack-lmdb", str(class_folder), str(out), "--resume", "-q"]) == 0
    fresh = tmp_path / "fresh.lmdb"
    assert pack_lmdb(class_folder, fresh, workers=0).count == 12 and verify_lmdb(out) == []
    a, b = open_dataset(out), open_dataset(fresh)
    assert [a.read(i) for i in range(12)] == [b.read(i) for i in range(12)]


@pytest.mark.parametrize("change", ["touch", "chmod"])
def test_resume_refuses_a_touched_file_whose_sample_was_re_encoded(class_folder: Path, tmp_path: Path, change: str):
    # with --max-size a large image is stored re-encoded: its file's bytes cannot be compared, and a moved time
    # is refused as before
    big = class_folder / "cat" / "图片_0.jpg"  # sample 0
    imwrite(big, synthetic_image(300, 200, seed=3), mode="rgb")

    out = tmp_path / "p.lmdb"
    with pytest.raises(KeyboardInterrupt):
        pack_lmdb(class_folder, out, workers=0, commit_every=3, max_size=64, progress=stop_after_six)
    time.sleep(0.05)
    if change == "touch":
        big.touch()
        how = "modified"
    else:
        big.chmod(0o600)
        how = ("its status changed: replaced or moved, or only its permissions or owner changed, which the pack "
               "cannot tell apart for an image it stores re-encoded")  # fmt: skip
    with pytest.raises(UsageError, match=re.escape(f"{big} changed after its samples were packed ({how}, ")):
        pack_lmdb(class_folder, out, resume=True, workers=0, max_size=64)


@pytest.mark.parametrize("change", ["touch", "other bytes, an older time"])
def test_resume_of_a_zip_read_in_place_compares_the_members_packed(class_folder: Path, tmp_path: Path, change: str):
    # the attack: the archive touched (or copied with cp -p, same bytes) between a kill and --resume was refused as
    # edited; and one of its packed members rewritten with the same names must still be refused
    import zipfile

    def write(path: Path, replace: bytes | None = None) -> Path:
        with zipfile.ZipFile(path, "w") as z:
            for f in sorted(class_folder.rglob("*.*")):
                rel = f.relative_to(class_folder).as_posix()
                z.writestr(rel, replace if replace is not None and rel == "cat/图片_1.png" else f.read_bytes())
        return path

    archive = write(tmp_path / "a.zip")
    out = stopped_after_six(archive, tmp_path / "p.lmdb", commit_every=3)
    time.sleep(0.05)
    if change == "touch":
        archive.touch()
        assert main(["pack-lmdb", str(archive), str(out), "--resume", "-q"]) == 0
        fresh = tmp_path / "fresh.lmdb"
        assert pack_lmdb(archive, fresh, workers=0).count == 12 and verify_lmdb(out) == []
        a, b = open_dataset(out), open_dataset(fresh)
        assert [a.read(i) for i in range(12)] == [b.read(i) for i in range(12)]
        return
    other = cv2.imencode(".png", np.full((50, 50, 3), 7, np.uint8))[1].tobytes()
    write(archive, replace=other)  # sample 1, packed
    os.utime(archive, (1_000_000_000, 1_000_000_000))
    with pytest.raises(UsageError, match=re.escape(f"{archive} changed after its samples were packed (its status "
                                                   "changed: replaced or moved, by other bytes than it packed, ")):  # fmt: skip
        pack_lmdb(archive, out, resume=True, workers=0)


def test_resume_of_a_zip_touched_before_anything_was_packed(class_folder: Path, tmp_path: Path, monkeypatch):
    # the attack (a review's): killed before the first sample (count 0 committed), the archive touched, --resume:
    # UnboundLocalError, a traceback, as no member was there to compare
    import zipfile

    import datakit.pack as pack

    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in sorted(class_folder.rglob("*.*")):
            z.writestr(f.relative_to(class_folder).as_posix(), f.read_bytes())
    out = tmp_path / "p.lmdb"
    with monkeypatch.context() as m:
        m.setattr(pack, "_fill", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
        with pytest.raises(KeyboardInterrupt):
            pack_lmdb(archive, out, workers=0)
    assert read_meta(out)["count"] == 0
    time.sleep(0.05)
    archive.touch()
    assert main(["pack-lmdb", str(archive), str(out), "--resume", "-q"]) == 0
    assert len(open_dataset(out)) == 12 and verify_lmdb(out) == []


def test_names_that_are_not_utf8_are_packed_skipped_and_listed(tmp_path: Path, capsys):
    # The attack: a Latin-1 file name from an old system (b'caf\xe9'), on an empty file: the
    # skip record could not be written as UTF-8 and the pack died at 0 samples, unresumable.
    src = tmp_path / "src"
    (src / "c").mkdir(parents=True)
    good = cv2.imencode(".png", np.full((4, 4, 3), 9, np.uint8))[1].tobytes()
    for name, data in ((b"caf\xe9_ok.png", good), (b"z_ok.png", good), (b"caf\xe9_bad.png", b"")):
        with open(os.path.join(os.fsencode(src / "c"), name), "wb") as f:
            f.write(data)
    out = tmp_path / "out.lmdb"
    assert main(["pack-lmdb", str(src), str(out), "--skip-bad", "--workers", "1", "--quiet"]) == 0
    bad = os.fsdecode(os.path.join(os.fsencode(src / "c"), b"caf\xe9_bad.png"))
    assert capsys.readouterr().err == f"skipped: {bad}: empty file (0 bytes)\n".replace("\udce9", "\\udce9")
    ds = open_dataset(out)
    assert [ds.name(i) for i in range(len(ds))] == [f"{out}:c/caf\udce9_ok.png", f"{out}:c/z_ok.png"]
    assert [int(ds[i][0][0, 0, 0]) for i in range(len(ds))] == [9, 9]
    assert main(["info", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["skipped"] == [f"{bad}: empty file (0 bytes)"]
    # the bad-samples file written while training holds such a name too
    folder = open_dataset(src, on_error="skip", max_bad_fraction=0.5, bad_samples=tmp_path / "bad.json")
    [folder[i] for i in range(len(folder))]
    assert folder.merge_bad_samples() == tmp_path / "bad.json"
    assert [e["name"] for e in json.loads((tmp_path / "bad.json").read_text(encoding="utf-8"))["bad"]] == [bad]


def test_a_pack_inside_its_source_folder_is_refused_before_anything_is_written(class_folder: Path, capsys):
    # The attack: `pack-lmdb data data/train.lmdb`, killed: every later scan of data/ (--resume,
    # check) met train.lmdb as a class folder without images, and the pack could never be finished.
    out = class_folder / "train.lmdb"
    assert main(["pack-lmdb", str(class_folder), str(out), "--quiet"]) == 2
    assert capsys.readouterr().err == (
        f"datakit pack-lmdb: error: {out}: inside the source folder {class_folder}, whose every later scan (--resume, "
        "check, open_dataset) would read it as a class folder; put OUT outside the source (moved there, a started "
        "pack resumes)\n"
    )
    assert not out.exists() and open_dataset(class_folder).classes == ["cat", "dog", "鸟"]


def test_the_library_refuses_a_pack_or_a_preview_inside_the_folder_of_the_dataset_handed_to_it(
    class_folder: Path, tmp_path: Path
):
    # The attack: the CLI refused these, but pack_lmdb(ds, "src/p.lmdb") and preview(ds, "src/cat/grid.png") on a
    # dataset object wrote them: the source no longer opened ("class folder 'p.lmdb' holds no images"), or the
    # contact sheet was one more 'cat' sample.
    from datakit import preview

    ds = open_dataset(class_folder)
    out = class_folder / "p.lmdb"
    with pytest.raises(UsageError) as e:
        pack_lmdb(ds, out)
    assert str(e.value) == (f"{out}: inside the source folder {class_folder}, whose every later scan (--resume, "
                            "check, open_dataset) would read it as a class folder; put OUT outside the source "
                            "(moved there, a started pack resumes)")  # fmt: skip
    sheet = class_folder / "cat" / "grid.png"
    with pytest.raises(UsageError) as e:
        preview(ds, sheet)
    assert str(e.value) == (f"{sheet}: inside the source folder {class_folder}, where every later scan (check, "
                            "stats, open_dataset) would read the contact sheet as one of its images; write it "
                            "outside")  # fmt: skip
    pack_lmdb(ds, tmp_path / "ok.lmdb")
    packed = open_dataset(tmp_path / "ok.lmdb")
    inside = tmp_path / "ok.lmdb" / "grid.png"
    with pytest.raises(UsageError) as e:
        preview(packed, inside)
    assert str(e.value) == (f"{inside}: inside the LMDB pack {tmp_path / 'ok.lmdb'}, whose folder holds the pack's "
                            "files alone (a re-pack with --overwrite would refuse it); write the contact sheet "
                            "outside")  # fmt: skip
    table = tmp_path / "labels.csv"
    table.write_text("file,label\ncat/图片_0.jpg,cat\ndog/图片_0.jpg,dog\n", encoding="utf-8")
    listed = open_dataset(class_folder, labels=table)
    with pytest.raises(UsageError, match="inside the folder .* whose images .*labels.csv names"):
        preview(listed, class_folder / "grid.png")
    assert sorted(p.name for p in class_folder.iterdir()) == ["cat", "dog", "鸟"]
    assert preview(ds, tmp_path / "grid.png").path == tmp_path / "grid.png"


def _damaged_jpegs(folder: Path) -> dict[str, str]:
    """A good JPEG and two that libjpeg decodes around, printing a warning: what check reports."""
    rng = np.random.default_rng(0)
    img = cv2.GaussianBlur(rng.integers(0, 256, (400, 600, 3), dtype=np.uint8), (5, 5), 0)
    good = cv2.imencode(".jpg", img)[1].tobytes()
    mid = bytearray(good)
    mid[len(good) // 2 : len(good) // 2 + 50] = rng.integers(0, 256, 50, dtype=np.uint8).tobytes()
    early = bytearray(good)
    at = early.find(b"\xff\xda")
    early[at + 20 : at + 24] = b"\xff\xd9\x00\x00"
    folder.mkdir(parents=True)
    for name, data in (("good.jpg", good), ("garbage_mid.jpg", mid), ("early_eoi.jpg", early)):
        (folder / name).write_bytes(bytes(data))
    return {
        "early_eoi.jpg": "damaged JPEG data: Corrupt JPEG data: premature end of data segment",
        "garbage_mid.jpg": "damaged JPEG data: Corrupt JPEG data: 90 extraneous bytes before marker 0xd9",
    }


@pytest.mark.skipif(not region_decoder_available(), reason="needs the compiled JPEG decoder")
@pytest.mark.parametrize("max_size", [None, 100])
def test_pack_refuses_the_jpegs_check_calls_damaged_naming_them_and_prints_nothing_else(tmp_path, capfd, max_size):
    # The attack: JPEGs with garbage in their data or an early end: check said unreadable, while
    # pack-lmdb packed them and verify passed, and libjpeg's bare warnings reached stderr.
    damaged = _damaged_jpegs(tmp_path / "src" / "c")
    src, out = tmp_path / "src", tmp_path / "out.lmdb"
    size = ["--max-size", str(max_size)] if max_size else []
    assert main(["check", str(src), "--quiet"]) == 1
    want = [f"unreadable: {src / 'c' / n}: {why}" for n, why in sorted(damaged.items())]
    assert capfd.readouterr().err.splitlines() == want
    assert main(["pack-lmdb", str(src), str(out), "--workers", "2", "--quiet", *size]) == 1
    assert capfd.readouterr().err.splitlines()[1:] == [f"{src / 'c' / n}: {why}" for n, why in sorted(damaged.items())]
    assert main(["pack-lmdb", str(src), str(out), "--resume", "--skip-bad", "--workers", "2", "--quiet", *size]) == 0
    assert capfd.readouterr().err.splitlines() == [f"skipped: {src / 'c' / n}: {w}" for n, w in sorted(damaged.items())]
    assert [open_dataset(out).name(0)] == [f"{out}:c/good.jpg"]


@pytest.mark.skipif(not region_decoder_available(), reason="needs the compiled JPEG decoder")
def test_verify_reports_a_damaged_jpeg_an_older_pack_holds(tmp_path, monkeypatch, capfd):
    import datakit.pack as pack

    damaged = _damaged_jpegs(tmp_path / "src" / "c")
    monkeypatch.setattr(pack, "_validate", probe_image)  # packed as before: warnings not refused
    pack_lmdb(tmp_path / "src", tmp_path / "out.lmdb", workers=1)
    monkeypatch.undo()
    capfd.readouterr()
    problems = verify_lmdb(tmp_path / "out.lmdb")
    out = tmp_path / "out.lmdb"
    assert problems == [
        f"{out}: sample {k}: c/{n}: {w} (key i{k:010d})" for k, (n, w) in enumerate(sorted(damaged.items()))
    ]
    assert capfd.readouterr().err == ""
    assert jpeg_damage(b"junk") is None and jpeg_damage((tmp_path / "src" / "c" / "good.jpg").read_bytes()) == ""


def test_shards_missing_or_given_twice_are_refused(class_folder: Path, tmp_path: Path):
    # The attack: part-[02].lmdb (the middle shard missing) read as 8 samples, part-0 twice as
    # 8 duplicated ones, and check said 0 problems
    parts = [tmp_path / f"part-{i}.lmdb" for i in range(3)]
    for i, p in enumerate(parts):
        pack_lmdb(class_folder, p, shard=f"{i}/3", workers=1)
    with pytest.raises(PackError) as e:
        open_dataset([parts[0], parts[2]])
    assert str(e.value) == (f"shard 1/3 of {class_folder} is not among the packs given (0/3 ({parts[0]}), 2/3 "
                            f"({parts[2]})): its samples would be missing; give every shard")  # fmt: skip
    assert main(["check", str(parts[0]), str(parts[2])]) == 2  # a usage mistake, as a glob matching nothing
    with pytest.raises(PackError) as e:
        open_dataset([parts[0], parts[1], parts[2], parts[0]])
    assert str(e.value) == f"{parts[0]}: given twice (as {parts[0]}); each pack is read once"
    copy = tmp_path / "copy-of-1.lmdb"
    shutil.copytree(parts[1], copy)
    with pytest.raises(PackError) as e:
        open_dataset([*parts, copy])
    assert str(e.value) == f"{copy}: shard 1/3 of {class_folder}, as {parts[1]} is; each shard is read once"
    assert main(["check", *map(str, parts), str(copy), "-q"]) == 2  # given so: a usage mistake, as a pack twice
    assert len(open_dataset(str(tmp_path / "part-*.lmdb"))) == 12
    # the next attack: a file moved to another class folder between packing shard 0/2 and 1/2: "shard 1/2 is not
    # among the packs given", where it was given
    src = tmp_path / "src"
    shutil.copytree(class_folder, src)
    halves = [tmp_path / f"half-{i}.lmdb" for i in range(2)]
    pack_lmdb(src, halves[0], shard="0/2", workers=1)
    first, second = sorted(d for d in src.iterdir() if d.is_dir())[:2]
    moved = sorted(first.iterdir())[0]
    moved.rename(second / moved.name)
    pack_lmdb(src, halves[1], shard="1/2", workers=1)
    with pytest.raises(PackError) as e:
        open_dataset(halves)
    assert str(e.value) == (f"shards 0/2 ({halves[0]}) and 1/2 ({halves[1]}) of {src} were packed from different "
                            "versions of it (its files changed between them): pack every shard of the source as it is "
                            "now")  # fmt: skip
    # the attack: a whole pack beside its backup copy, or beside the shards of its source: every sample twice
    whole = tmp_path / "train.lmdb"
    pack_lmdb(class_folder, whole, workers=1)
    shutil.copytree(whole, tmp_path / "train-backup.lmdb")
    twice = f"holds samples of {class_folder} that {{}} holds too (a copy of it, or a whole pack beside its shards); " \
            "each sample is read once"  # fmt: skip
    with pytest.raises(PackError) as e:
        open_dataset(str(tmp_path / "train*.lmdb"))
    assert str(e.value) == f"{whole}: " + twice.format(tmp_path / "train-backup.lmdb")
    with pytest.raises(PackError) as e:
        open_dataset([whole, *parts])
    assert str(e.value) == f"{parts[0]}: " + twice.format(whole)
    # the attack: the pack joined from those shards, beside the whole pack: every sample twice, accepted (its
    # recorded source is the shards' paths, not the folder); a copy given is a usage mistake, exit 2, as a pack
    # given twice is (it was exit 1, and exit 2 for a joined pack beside its shards)
    joined = tmp_path / "joined.lmdb"
    pack_lmdb(parts, joined, workers=1)
    with pytest.raises(UsageError) as e:
        open_dataset([whole, joined])
    assert str(e.value) == (f"{joined}: holds samples of {class_folder} (packed from packs of it) that {whole} holds "
                            "too (a copy of it, or a whole pack beside its shards); each sample is read once")  # fmt: skip
    assert main(["check", str(whole), str(joined), "-q"]) == 2
    assert main(["pack-lmdb", str(whole), str(joined), str(tmp_path / "twice.lmdb"), "-q"]) == 2
    assert not (tmp_path / "twice.lmdb").exists()
    # ... and once the shards are tidied away (moved after the join): the joined pack records where they came from
    moved = tmp_path / "old"
    moved.mkdir()
    for p in parts:
        close_pack(p)  # (this process's handle on it: LMDB opens one file once)
        p.rename(moved / p.name)
    with pytest.raises(UsageError) as e:
        open_dataset([whole, joined])
    assert str(e.value) == (f"{joined}: holds samples of {class_folder} (packed from packs of it) that {whole} holds "
                            "too (a copy of it, or a whole pack beside its shards); each sample is read once")  # fmt: skip
    with pytest.raises(UsageError, match=r"^" + re.escape(f"{moved / 'part-0.lmdb'}: holds samples of {class_folder} "
                                                          f"that {joined} holds too")):  # fmt: skip
        open_dataset([joined, *(moved / p.name for p in parts)])


def test_resume_refuses_a_table_whose_splits_changed_and_takes_the_folder_spelled_otherwise(class_folder: Path,
                                                                                           tmp_path: Path,
                                                                                           monkeypatch):  # fmt: skip
    # The attacks: a split column changed between a kill and --resume was accepted, the rows packed before keeping
    # the old splits (63 of 79 'val' samples were train images); the same folder given by an absolute path, or from
    # another working directory, was refused as "changed".
    files = sorted(p.relative_to(class_folder).as_posix() for p in class_folder.rglob("*.jpg"))
    table = tmp_path / "t.csv"
    rows = [(f, f.split("/")[0], "val" if k % 3 == 0 else "train") for k, f in enumerate(files)]
    table.write_text("file,label,split\n" + "".join(f"{f},{c},{s}\n" for f, c, s in rows), encoding="utf-8")
    out = tmp_path / "p.lmdb"

    def stop_after_four(done, total, nbytes):
        if done == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pack_lmdb(class_folder, out, labels=table, workers=0, commit_every=2, progress=stop_after_four)
    rows[0] = (rows[0][0], rows[0][1], "train")
    table.write_text("file,label,split\n" + "".join(f"{f},{c},{s}\n" for f, c, s in rows), encoding="utf-8")
    with pytest.raises(UsageError) as e:
        pack_lmdb(class_folder, out, labels=table, resume=True)
    assert str(e.value) == (
        f"{out}: the table's splits changed since this pack began (['val', 'train'] then, "
        "['train', 'val'] now, or a row's split); resume only the same table, or use --overwrite"
    )
    rel = tmp_path / "q.lmdb"
    monkeypatch.chdir(class_folder.parent)
    with pytest.raises(KeyboardInterrupt):
        pack_lmdb(class_folder.name, rel, workers=0, commit_every=2, progress=stop_after_four)
    monkeypatch.chdir(tmp_path)
    report = pack_lmdb(class_folder, rel, resume=True, workers=0)
    assert (report.resumed_from, report.count) == (4, len(open_dataset(class_folder)))


def test_overwrite_of_a_linked_pack_or_of_dot_replaces_the_pack_itself(class_folder: Path, tmp_path: Path,
                                                                       monkeypatch):  # fmt: skip
    # The attacks: --overwrite where OUT is a link to a pack made a new folder beside the link (the pack it named
    # kept the old labels) and left a hidden '.train.lmdb.overwrite-part' link; `pack-lmdb ../photos . --overwrite`
    # from inside the pack built the new one inside it and failed.
    real = tmp_path / "store" / "train.lmdb"
    real.parent.mkdir()
    pack_lmdb(class_folder, real, workers=1, max_size=8)
    link = tmp_path / "train.lmdb"
    link.symlink_to(real, target_is_directory=True)
    pack_lmdb(class_folder, link, workers=1, overwrite=True)
    assert link.is_symlink() and read_meta(real)["options"]["max_size"] is None
    assert sorted(p.name for p in tmp_path.iterdir() if p != class_folder) == ["store", "train.lmdb"]
    monkeypatch.chdir(real)
    pack_lmdb(class_folder, ".", workers=1, overwrite=True, max_size=8)
    assert read_meta(real)["options"]["max_size"] == 8 and not list(real.glob("*overwrite-part*"))
    assert sorted(p.name for p in real.parent.iterdir()) == ["train.lmdb"]


class _KilledAt40(ZipDataset):
    """A zip dataset whose reading worker process is killed (as the OOM killer does) at sample 40, while the
    file ``marker`` exists. A module's class, so that workers started by spawn (where CUDA has started) read it."""

    def __init__(self, path, marker):
        super().__init__(path)
        self.marker, self.main_pid = str(marker), os.getpid()

    def read(self, i):
        if i == 40 and os.getpid() != self.main_pid and os.path.exists(self.marker):
            os.kill(os.getpid(), signal.SIGKILL)
        return super().read(i)


def test_a_reading_worker_killed_ends_the_pack_with_a_line_not_a_hang(tmp_path: Path):
    # The attack: a worker process of the pool killed by SIGKILL (the OOM killer): the pool replaced it, its work was
    # lost and pack_lmdb waited for ever, printing nothing.
    import zipfile

    with zipfile.ZipFile(tmp_path / "a.zip", "w") as zf:
        for i in range(80):
            zf.writestr(f"{'ab'[i % 2]}/{i:02d}.png", cv2.imencode(".png", synthetic_image(8, 8, seed=i))[1].tobytes())
    out, marker = tmp_path / "out.lmdb", tmp_path / "kill"
    marker.touch()
    started = time.monotonic()
    with pytest.raises(PackError) as e:
        pack_lmdb(_KilledAt40(tmp_path / "a.zip", marker), out, workers=2)
    assert time.monotonic() - started < 60
    msg = str(e.value)
    assert msg.startswith(f"{out}: a worker process (pid ") and msg.endswith("run the same command with --resume")
    assert "died, killed by SIGKILL (out of memory? the kernel's OOM killer sends SIGKILL; use fewer workers)" in msg
    marker.unlink()
    assert pack_lmdb(_KilledAt40(tmp_path / "a.zip", marker), out, resume=True, workers=2).count == 80


# ---------------------------------------------------------------------------------------------
# a pack as the source: its splits, class order and names are the re-pack's


def _split_table(folder: Path, table: Path, splits: tuple[str, ...]) -> list[tuple[str, str]]:
    """A CSV naming every image under ``folder`` with its class folder and a split (``splits`` in turn)."""
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    rows = [(f, splits[k % len(splits)]) for k, f in enumerate(files)]
    table.write_text("file,label,split\n" + "".join(f"{f},{f.split('/')[0]},{s}\n" for f, s in rows), encoding="utf-8")
    return rows


def _samples(path: Path) -> list[tuple[str, str, str]]:
    """(stored name, split or '-', class) of every sample of a pack."""
    r = LmdbReader(path)
    splits = ["-", *r.meta["splits"]]
    out = [(r.name(i), splits[int(r.records["split"][i])], r.class_map.classes[int(r.records["target"][i])])
           for i in range(len(r))]  # fmt: skip
    r.close()
    return out


def test_a_pack_beside_the_pack_of_one_of_its_splits_or_of_a_dataset_object_of_it_is_refused(class_folder: Path,
                                                                                             tmp_path: Path):  # fmt: skip
    # the attacks: all.lmdb (a table) with val.lmdb (--split val of the same table), and plain.lmdb with the pack
    # of the same folder made with --classes (a dataset object): every val (every) sample read twice, check exit 0
    files = sorted(p.relative_to(class_folder).as_posix() for p in class_folder.rglob("*.*"))
    table = tmp_path / "t.csv"
    table.write_text("file,label,split\n" + "".join(f"{f},{f.split('/')[0]},{'val' if k % 4 == 0 else 'train'}\n"
                                                    for k, f in enumerate(files)), encoding="utf-8")  # fmt: skip
    every, val, train = tmp_path / "all.lmdb", tmp_path / "val.lmdb", tmp_path / "train.lmdb"
    pack_lmdb(class_folder, every, labels=table, workers=1)
    pack_lmdb(class_folder, val, labels=table, split="val", workers=1)
    pack_lmdb(class_folder, train, labels=table, split="train", workers=1)
    with pytest.raises(UsageError) as e:
        open_dataset([every, val])
    assert str(e.value) == (f"{val}: holds {files[0]!r}, a sample of {class_folder} that {every} holds too (the pack "
                            "of one of its splits, or of the same images with other options?); each sample is read "
                            "once")  # fmt: skip
    assert len(open_dataset([train, val])) == 12  # two splits of one table: no sample in both
    assert main(["check", str(every), str(val), "-q"]) == 2
    plain, given = tmp_path / "plain.lmdb", tmp_path / "given.lmdb"
    pack_lmdb(class_folder, plain, workers=1)
    pack_lmdb(open_dataset(class_folder, classes=["cat", "dog", "鸟"]), given, workers=1)
    with pytest.raises(UsageError) as e:
        open_dataset([plain, given])
    assert str(e.value) == (f"{given}: holds samples of {class_folder} (a dataset object of it) that {plain} holds "
                            "too (a copy of it, or a whole pack beside its shards); each sample is read once")  # fmt: skip


def test_shards_stored_otherwise_are_refused_and_a_repack_says_how_its_values_are_stored(class_folder: Path,
                                                                                          tmp_path: Path):  # fmt: skip
    # the attacks: part-0 packed with --max-size 20, part-1 with its images' own bytes, read and joined as one
    # dataset of two kinds; a re-pack of a --max-size pack (or that join) said "values: original bytes"
    parts = [tmp_path / f"part-{i}.lmdb" for i in range(2)]
    pack_lmdb(class_folder, parts[0], shard="0/2", max_size=20, workers=1)
    pack_lmdb(class_folder, parts[1], shard="1/2", workers=1)
    with pytest.raises(PackError) as e:
        open_dataset(parts)
    assert str(e.value) == (
        f"{parts[1]}: shard 1/2 of {class_folder} holds their own bytes, {parts[0]} the images "
        "re-encoded (--max-size 20, --quality 90): pack every shard with the same options"
    )
    small, again = tmp_path / "small.lmdb", tmp_path / "again.lmdb"
    pack_lmdb(class_folder, small, max_size=20, workers=1)
    pack_lmdb(small, again, workers=1)
    assert lmdb_info(again)["encoding"] == lmdb_info(small)["encoding"] == "JPEG quality 90, longer side <= 20"


def test_a_join_resumed_after_a_shard_was_packed_again_is_refused(class_folder: Path, tmp_path: Path):
    # the attack: the join of three shards killed, shard 0 packed again (--overwrite) from a source with one image
    # changed, the join --resume'd: old and new bytes mixed, verify clean (a pack source had no identity checked,
    # and the spread spot check missed the one sample)
    src = tmp_path / "src"
    for c in ("a", "b", "c"):
        (src / c).mkdir(parents=True)
        for k in range(40):  # 90 packed before the kill: the resume's spread re-reads 32 of them, not sample 1
            imwrite(src / c / f"{k:03d}.png", np.full((4, 4, 3), k, np.uint8), mode="rgb")
    parts = [tmp_path / f"part-{i}.lmdb" for i in range(3)]
    for i, p in enumerate(parts):
        pack_lmdb(src, p, shard=f"{i}/3", workers=1)
    joined = tmp_path / "joined.lmdb"

    def stop(done, total, nbytes):
        if done == 90:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pack_lmdb(parts, joined, workers=0, commit_every=10, progress=stop)
    imwrite(src / "a" / "001.png", np.full((4, 4, 3), 250, np.uint8), mode="rgb")
    pack_lmdb(src, parts[0], shard="0/3", workers=1, overwrite=True)
    with pytest.raises(UsageError, match=r"part-0\.lmdb:a/001\.png gives other bytes than the pack stores for it: "
                                         r"the source changed after its samples were packed"):  # fmt: skip
        pack_lmdb(parts, joined, workers=1, resume=True)
    assert pack_lmdb(parts, joined, workers=1, overwrite=True).count == 120


def test_a_repack_keeps_every_samples_split_class_order_and_name(class_folder: Path, tmp_path: Path, capsys):
    # The defect: `pack-lmdb old.lmdb new.lmdb` of a pack with splits wrote every sample with split 0 and no
    # splits at all: `info` showed none, and `open_dataset(new, split="val")` was refused.
    table = tmp_path / "labels.csv"
    rows = _split_table(class_folder, table, ("train", "val", "train", "test"))
    old, new = tmp_path / "old.lmdb", tmp_path / "new.lmdb"
    pack_lmdb(open_dataset(class_folder, labels=table, classes=["鸟", "dog", "cat"]), old, workers=1)
    want = [(f, s, f.split("/")[0]) for f, s in rows]
    assert _samples(old) == want
    assert main(["pack-lmdb", str(old), str(new), "--workers", "1", "-q"]) == 0
    assert _samples(new) == want
    assert values(new) == values(old)  # the same bytes, records (split ids included) and names, sample for sample
    info = lmdb_info(new)
    assert (info["splits"], info["split_counts"]) == (["train", "val", "test"], {"train": 6, "val": 3, "test": 3})
    assert info["classes"] == {"classes": ["鸟", "dog", "cat"]}
    assert json.loads((new / "classes.json").read_text(encoding="utf-8")) == {"classes": ["鸟", "dog", "cat"]}
    assert verify_lmdb(new) == []
    capsys.readouterr()
    assert main(["info", str(new)]) == 0
    assert "  splits: train 6, val 3, test 3" in capsys.readouterr().out.splitlines()
    val = open_dataset(new, split="val")
    assert [val.name(i) for i in range(len(val))] == [f"{new}:{f}" for f, s in rows if s == "val"]


def test_a_repack_of_shards_or_of_packs_with_other_splits_keeps_each_samples_split(class_folder: Path,
                                                                                   tmp_path: Path):  # fmt: skip
    table = tmp_path / "labels.csv"
    rows = _split_table(class_folder, table, ("train", "val", "train", "test"))
    whole = tmp_path / "whole.lmdb"
    pack_lmdb(class_folder, whole, labels=table, workers=1)
    for i in range(2):
        pack_lmdb(class_folder, tmp_path / f"part-{i}.lmdb", labels=table, shard=f"{i}/2", workers=1)
    joined = tmp_path / "joined.lmdb"
    pack_lmdb(str(tmp_path / "part-*.lmdb"), joined, workers=1)
    assert values(joined) == values(whole)
    assert lmdb_info(joined)["split_counts"] == {"train": 6, "val": 3, "test": 3}
    # two packs whose splits differ (another order, one the other lacks): each sample keeps its split's name
    other = tmp_path / "other"
    shutil.copytree(class_folder, other)
    rows2 = _split_table(other, tmp_path / "other.csv", ("test", "train"))
    b, both = tmp_path / "b.lmdb", tmp_path / "both.lmdb"
    pack_lmdb(other, b, labels=tmp_path / "other.csv", workers=1)
    assert lmdb_info(b)["splits"] == ["test", "train"]
    pack_lmdb(open_dataset([whole, b]), both, workers=1)
    assert _samples(both) == [(f, s, f.split("/")[0]) for f, s in rows + rows2]
    info = lmdb_info(both)
    assert (info["splits"], info["split_counts"]) == (["train", "val", "test"], {"train": 12, "val": 3, "test": 9})
    assert verify_lmdb(both) == []


def test_split_of_a_pack_source_packs_exactly_that_split_and_an_unknown_one_is_refused(class_folder: Path,
                                                                                       tmp_path: Path, capsys):  # fmt: skip
    # The leak to rule out: `pack-lmdb old.lmdb train.lmdb --split train` taking every sample, val and test included.
    table = tmp_path / "labels.csv"
    rows = _split_table(class_folder, table, ("train", "val", "train", "test"))
    old = tmp_path / "old.lmdb"
    pack_lmdb(class_folder, old, labels=table, workers=1)
    for split, n in (("train", 6), ("val", 3), ("test", 3)):
        out = tmp_path / f"{split}.lmdb"
        assert main(["pack-lmdb", str(old), str(out), "--split", split, "--workers", "1", "-q"]) == 0
        # a pack of one split holds that split alone and records no splits, as one of a table's splits does
        assert _samples(out) == [(f, "-", f.split("/")[0]) for f, s in rows if s == split]
        info = lmdb_info(out)
        assert (info["count"], info["splits"], "split_counts" in info) == (n, [], False)
    by_table = tmp_path / "val-from-table.lmdb"
    pack_lmdb(class_folder, by_table, labels=table, split="val", workers=1)
    assert values(tmp_path / "val.lmdb") == values(by_table)
    capsys.readouterr()
    assert main(["pack-lmdb", str(old), str(tmp_path / "dev.lmdb"), "--split", "dev"]) == 2
    assert capsys.readouterr().err == (
        f"datakit pack-lmdb: error: {old}: no split 'dev'; the pack's splits are 'train', 'val', 'test'\n"
    )
    assert not (tmp_path / "dev.lmdb").exists()
    plain = tmp_path / "plain.lmdb"
    pack_lmdb(class_folder, plain, workers=1)
    with pytest.raises(UsageError) as e:
        pack_lmdb(plain, tmp_path / "x.lmdb", split="train")
    assert str(e.value) == (f"{plain}: no split 'train'; the pack has no splits (its source had no split column or "
                            "sheets)")  # fmt: skip
    assert not (tmp_path / "x.lmdb").exists()
    # a pack made with --split holds that split alone (before: "its source had no split column or sheets"); asked
    # for that split, it is all of it (before: refused as "no split 'train'; the pack holds split 'train' alone")
    for made in (tmp_path / "train.lmdb", by_table):
        packed, other = ("train", "val") if made.name == "train.lmdb" else ("val", "train")
        assert main(["pack-lmdb", str(made), str(tmp_path / "x.lmdb"), "--split", other]) == 2
        assert capsys.readouterr().err == (
            f"datakit pack-lmdb: error: {made}: no split {other!r}; the pack holds split {packed!r} alone (made with "
            f"--split {packed}): leave out split= (--split)\n"
        )
        assert not (tmp_path / "x.lmdb").exists()
        assert len(open_dataset(made, split=packed)) == len(open_dataset(made)) > 0


def test_a_repack_resumes_with_its_splits_and_refuses_a_source_pack_whose_splits_changed(class_folder: Path,
                                                                                         tmp_path: Path,
                                                                                         monkeypatch):  # fmt: skip
    table = tmp_path / "labels.csv"
    rows = _split_table(class_folder, table, ("train", "val", "train", "test"))
    old, whole, part = tmp_path / "old.lmdb", tmp_path / "whole.lmdb", tmp_path / "part.lmdb"
    pack_lmdb(class_folder, old, labels=table, workers=1)
    pack_lmdb(old, whole, workers=1)

    def stop_after_four(done, total, nbytes):
        if done == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pack_lmdb(old, part, workers=0, commit_every=2, progress=stop_after_four)
    monkeypatch.chdir(tmp_path)  # the same source pack, spelled relative to another working directory
    report = pack_lmdb("old.lmdb", part, resume=True, workers=0)
    assert (report.resumed_from, report.count) == (4, 12)
    assert values(part) == values(whole)
    assert lmdb_info(part)["split_counts"] == {"train": 6, "val": 3, "test": 3}
    # the source packed again between a kill and --resume, one sample already packed now in another split (the same
    # files, labels and split names): the samples packed before would keep the old split
    again = tmp_path / "again.lmdb"
    with pytest.raises(KeyboardInterrupt):
        pack_lmdb(old, again, workers=0, commit_every=2, progress=stop_after_four)
    rows[2] = (rows[2][0], "val")
    table.write_text("file,label,split\n" + "".join(f"{f},{f.split('/')[0]},{s}\n" for f, s in rows), encoding="utf-8")
    pack_lmdb(class_folder, old, labels=table, workers=1, overwrite=True)
    with pytest.raises(UsageError) as e:
        pack_lmdb(old, again, resume=True)
    assert str(e.value) == (
        f"{again}: the source pack's splits changed since this pack began (['train', 'val', 'test'] then, "
        "['train', 'val', 'test'] now, or a sample's split); resume only the same pack, or use --overwrite"
    )


def test_a_repack_begun_by_the_previous_datakit_resumes_naming_its_samples_as_it_began(class_folder: Path,
                                                                                       tmp_path: Path,
                                                                                       monkeypatch):  # fmt: skip
    # datakit before this fix stored a re-pack's names as PACK:NAME; a re-pack it began and this one resumes must
    # not mix the two kinds of names
    import datakit.pack

    old, whole, part = tmp_path / "old.lmdb", tmp_path / "whole.lmdb", tmp_path / "part.lmdb"
    pack_lmdb(class_folder, old, workers=1)

    def stop_after_four(done, total, nbytes):
        if done == 4:
            raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(datakit.pack, "_short_name", lambda ds, i: ds.name(i))  # the previous naming
        pack_lmdb(old, whole, workers=1)
        with pytest.raises(KeyboardInterrupt):
            pack_lmdb(old, part, workers=0, commit_every=2, progress=stop_after_four)
    report = pack_lmdb(old, part, resume=True, workers=0)
    assert (report.resumed_from, report.count) == (4, 12)
    assert values(part) == values(whole)
    assert [name for _, _, name in values(part)] == [f"{old}:{name}" for _, _, name in values(old)]
    assert read_meta(part)["source_names"] == read_meta(whole)["source_names"] and verify_lmdb(part) == []


@pytest.mark.parametrize("damaged", ['["cat", "dog"]', '"cat"', "null", '{"classes": [1, 2]}',
                                     '{"classes": ["0", "1"], "source_values": ["a", "b"]}'])  # fmt: skip
def test_resume_rewrites_a_classes_json_that_is_json_but_no_class_map(tmp_path, damaged):
    # the attack: classes.json replaced by JSON of another shape (a bare list, a string, null); the repair that
    # verify advises, pack-lmdb --resume, crashed with an AttributeError traceback on it
    src = tmp_path / "src"
    for cls in ("cat", "dog"):
        (src / cls).mkdir(parents=True)
        imwrite(src / cls / "a.jpg", synthetic_image(8, 8))
    out = tmp_path / "pack"
    assert main(["pack-lmdb", str(src), str(out)]) == 0
    want = (out / "classes.json").read_text(encoding="utf-8")
    (out / "classes.json").write_text(damaged, encoding="utf-8")
    assert main(["pack-lmdb", str(src), str(out), "--resume"]) == 0
    assert (out / "classes.json").read_text(encoding="utf-8") == want
    assert json.loads(want) == {"classes": ["cat", "dog"]}


def test_a_pack_finished_between_the_look_at_out_and_the_lock_is_not_written_over(class_folder: Path,
                                                                                   tmp_path: Path, monkeypatch):  # fmt: skip
    # the attack: OUT was looked at (missing) before the writer lock was taken; another pack-lmdb that made and
    # finished OUT in between was then written into as a new pack, without --overwrite (orphan keys, verify failed)
    import datakit.pack as P

    out = tmp_path / "o.lmdb"
    real, fired = P.PackLock, []
    other = tmp_path / "other"
    for c in ("a", "b"):
        (other / c).mkdir(parents=True)
        imwrite(other / c / "1.png", np.full((8, 8, 3), 9, np.uint8))

    def lock(folder):
        if not fired:
            fired.append(1)
            shutil.rmtree(out)  # this run's mkdir undone: the other run finds no OUT, as it would have
            P.pack_lmdb(other, out, workers=0)
        return real(folder)

    monkeypatch.setattr(P, "PackLock", lock)
    with pytest.raises(UsageError) as e:
        P.pack_lmdb(class_folder, out, workers=0)
    assert str(e.value) == f"{out}: already exists, a complete pack of 2 samples; use --overwrite to pack it again"
    assert len(LmdbDataset(out)) == 2  # the other run's pack, whole


def test_an_out_that_cannot_be_written_is_a_usage_error_before_any_work(class_folder: Path, tmp_path: Path,
                                                                        monkeypatch, capsys):  # fmt: skip
    # the attack: OUT in a folder this user may not write: "writing failed after 0 committed samples
    # (PermissionError ...); ... run the same command with --resume", exit 1
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == tmp_path else real(p, mode, **kw))
    assert main(["pack-lmdb", str(class_folder), str(tmp_path / "o.lmdb"), "-q"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"datakit pack-lmdb: error: {tmp_path}: not writable; cannot write the pack {tmp_path / 'o.lmdb'} into it"
    ]
    assert not (tmp_path / "o.lmdb").exists()


def test_resuming_a_complete_pack_says_so(class_folder: Path, tmp_path: Path, capsys):
    # it said "packed 12 images (resumed after 12) into ...: 0.0 MB read, 0.0 MB stored, 0 images/s"
    out = tmp_path / "o.lmdb"
    assert main(["pack-lmdb", str(class_folder), str(out), "-q"]) == 0
    assert main(["pack-lmdb", str(class_folder), str(out), "--resume"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{out} is complete already (12 images): nothing to pack"]


@pytest.mark.parametrize("orientation", [1, 3, 6])
def test_max_size_keeps_the_geometry_of_sides_no_multiple_of_the_decode_scale(tmp_path: Path, orientation: int):
    # the attack: 257 x 613 decoded at 1/4 is 65 x 154, its last row covering one source row of four; resized as
    # if the 65 rows spanned the 257, every row came out up to half a pixel high: a dark band centred on row 50.74
    # of an area resize of the whole image lay at 50.21
    from PIL import Image

    from datakit.io import _orient

    src = np.full((257, 613, 3), 255, np.uint8)
    src[236:252] = 0
    (tmp_path / "src" / "x").mkdir(parents=True)
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(src).save(tmp_path / "src" / "x" / "e.jpg", quality=100, subsampling=0, exif=exif.tobytes())
    out = tmp_path / "o.lmdb"
    pack_lmdb(tmp_path / "src", out, max_size=128, quality=100, workers=0)
    got = open_dataset(out, mode="rgb")[0][0]
    upright = _orient(src, orientation)
    h, w = upright.shape[:2]
    s = 128 / max(h, w)
    ref = cv2.resize(upright, (round(w * s), round(h * s)), interpolation=cv2.INTER_AREA)
    assert got.shape == ref.shape

    def centre(img: np.ndarray) -> float:  # of the dark band, along the axis it lies across
        profile = 255 - img[..., 0].astype(float).mean(axis=1 if orientation != 6 else 0)
        return float((profile * np.arange(len(profile))).sum() / profile.sum())

    assert abs(centre(got) - centre(ref)) < 0.05


def test_eleven_shards_joined_by_a_glob_keep_the_source_order(class_folder: Path, tmp_path: Path):
    # the attack: a glob sorted as text put shard-10 before shard-2: the joined pack (and the dataset read from
    # the shards) held the samples in another order than the source's, though each kept its label
    for i in range(11):
        pack_lmdb(class_folder, tmp_path / f"shard-{i}.lmdb", shard=f"{i}/11", workers=0)
    whole = open_dataset(class_folder)
    ds = open_dataset(str(tmp_path / "shard-*.lmdb"))
    assert [os.path.basename(ds.name(i)) for i in range(12)] == [os.path.basename(whole.name(i)) for i in range(12)]
    assert main(["pack-lmdb", str(tmp_path / "shard-*.lmdb"), str(tmp_path / "all.lmdb"), "-q"]) == 0
    joined = open_dataset(tmp_path / "all.lmdb")
    assert [os.path.basename(joined.name(i)) for i in range(12)] == [os.path.basename(whole.name(i)) for i in range(12)]


def test_a_pack_names_its_samples_one_way_however_the_table_spells_the_paths(tmp_path: Path):
    # the attack: the same labelling as 'a.jpg', './a.jpg' and '/abs/img/a.jpg' made packs whose samples were named
    # 'a.jpg', './a.jpg' and '/abs/img/a.jpg' (the machine's path in the pack, three names_crc32)
    img = tmp_path / "img"
    (img / "子").mkdir(parents=True)
    for k, name in enumerate(["a.jpg", "子/b.jpg"]):
        imwrite(img / name, np.full((8, 8, 3), 60 * k, np.uint8))
    tables = {
        "rel": "file,label\na.jpg,cat\n子/b.jpg,dog\n",
        "dot": "file,label\n./a.jpg,cat\n.\\子\\b.jpg,dog\n",
        "abs": f"file,label\n{img / 'a.jpg'},cat\n{img / '子' / 'b.jpg'},dog\n",
    }
    names = {}
    for key, text in tables.items():
        (tmp_path / f"{key}.csv").write_text(text, encoding="utf-8")
        pack = tmp_path / f"{key}.lmdb"
        assert main(["pack-lmdb", str(img), str(pack), "--labels", str(tmp_path / f"{key}.csv"), "-q"]) == 0
        ds = open_dataset(pack)
        names[key] = ([ds.name(i) for i in range(len(ds))], ds.readers[0].meta["names_crc32"])
    assert [n for n, _ in names.values()] == [[f"{tmp_path / k}.lmdb:a.jpg", f"{tmp_path / k}.lmdb:子/b.jpg"]
                                              for k in tables]  # fmt: skip
    assert len({crc for _, crc in names.values()}) == 1
    # absolute paths through the folder's real path (reached by a link), and a folder's own names kept as they are
    (tmp_path / "link").symlink_to(img)
    (tmp_path / "t.csv").write_text(f"file,label\n{img.resolve() / 'a.jpg'},cat\n", encoding="utf-8")
    pack = tmp_path / "t.lmdb"
    assert main(["pack-lmdb", str(tmp_path / "link"), str(pack), "--labels", str(tmp_path / "t.csv"), "-q"]) == 0
    assert open_dataset(pack).readers[0].name(0) == "a.jpg"
    imwrite(img / "子" / "x\\y.jpg", np.zeros((8, 8, 3), np.uint8))  # a backslash: a file name's character here
    assert main(["pack-lmdb", str(img), str(tmp_path / "f.lmdb"), "-q"]) == 0
    f = open_dataset(tmp_path / "f.lmdb").readers[0]
    assert sorted(f.name(k) for k in range(len(f))) == ["子/b.jpg", "子/x\\y.jpg"]


def test_max_size_keeps_a_gray_image_gray(tmp_path: Path):
    # the attack: `pack-lmdb --max-size 400` of a gray 800x600 JPEG (and gray PNG) stored a 3-channel JPEG: three
    # times the pixels, and mode="unchanged" read H x W x 3 where the source gave H x W
    from PIL import Image

    (tmp_path / "src" / "c").mkdir(parents=True)
    gray = np.random.default_rng(0).integers(0, 255, (600, 800), np.uint8)
    Image.fromarray(gray, "L").save(tmp_path / "src" / "c" / "g.jpg")
    Image.fromarray(gray, "L").save(tmp_path / "src" / "c" / "g.png")
    Image.fromarray(np.dstack([gray] * 3), "RGB").save(tmp_path / "src" / "c" / "rgb.png")
    # a gray BMP (8-bit indices into a palette of grays) and an 8-bit gray TIFF were stored as 3 channels
    Image.fromarray(gray, "L").save(tmp_path / "src" / "c" / "g.bmp")
    Image.fromarray(gray, "L").save(tmp_path / "src" / "c" / "g.tif")
    assert main(["pack-lmdb", str(tmp_path / "src"), str(tmp_path / "p.lmdb"), "--max-size", "400", "-q"]) == 0
    ds = open_dataset(tmp_path / "p.lmdb", mode="unchanged")
    names = [os.path.basename(ds.name(i)) for i in range(len(ds))]
    shapes = dict(zip(names, (ds[i][0].shape for i in range(len(ds)))))
    assert shapes == {"g.bmp": (300, 400), "g.jpg": (300, 400), "g.png": (300, 400), "g.tif": (300, 400),
                      "rgb.png": (300, 400, 3)}  # fmt: skip
    assert [probe_image(ds.read(i))[:2] for i in range(len(ds))] == [(300, 400)] * 5
    source = open_dataset(tmp_path / "src", mode="rgb")
    bmp = names.index("g.bmp")
    np.testing.assert_array_equal(open_dataset(tmp_path / "p.lmdb", mode="rgb")[bmp][0][..., 0],
                                  open_dataset(tmp_path / "p.lmdb", mode="gray")[bmp][0])  # fmt: skip
    assert source[bmp][0].shape == (600, 800, 3)


def test_an_out_on_a_file_system_that_takes_no_files_is_a_usage_error(class_folder: Path, capsys):
    # the attack: OUT under /proc was "writing failed after 0 committed samples ... free space", exit 1
    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc here")
    assert main(["pack-lmdb", str(class_folder), "/proc/new.lmdb", "-q"]) == 2
    assert capsys.readouterr().err == ("datakit pack-lmdb: error: /proc/new.lmdb: cannot be written (No such file "
                                       "or directory); pick another OUT\n")  # fmt: skip


def test_skip_bad_with_every_image_unreadable_packs_nothing_and_says_so(class_folder: Path, tmp_path: Path, capsys):
    # the attack: a lost mount (every file empty or junk) with --skip-bad wrote an empty pack, exit 0, and
    # open_dataset read 0 samples without a word; with --overwrite it would have replaced a good pack
    src = tmp_path / "lost"
    for cls in ("a", "b"):
        (src / cls).mkdir(parents=True)
        for i in range(3):
            (src / cls / f"{i}.jpg").write_bytes(b"" if cls == "b" else b"junk\n")
    out = tmp_path / "p.lmdb"
    assert main(["pack-lmdb", str(src), str(out), "--skip-bad", "-q"]) == 1
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith(f"datakit pack-lmdb: error: {out}: every one of the 6 images was unreadable and skipped "
                          "(--skip-bad): nothing packed; the first: ")  # fmt: skip
    assert not out.exists()
    good = tmp_path / "good.lmdb"
    pack_lmdb(class_folder, good, workers=0)
    assert main(["pack-lmdb", str(src), str(good), "--skip-bad", "--overwrite", "-q"]) == 1
    assert f"nothing packed; {good} still holds the old pack, untouched; " in capsys.readouterr().err
    assert len(open_dataset(good)) == 12 and not (tmp_path / ".good.lmdb.overwrite-part").exists()


def test_packs_read_as_one_hold_the_union_of_their_splits(class_folder: Path, tmp_path: Path):
    # the attack: s1 (splits val, train) and s2 (train, test) read together with split='test' were refused
    # ("s1.lmdb: no split 'test'"), while the same two packed into one gave its 'test' samples
    import shutil

    a, b = shutil.copytree(class_folder, tmp_path / "a"), shutil.copytree(class_folder, tmp_path / "b")
    t1, t2 = tmp_path / "t1.csv", tmp_path / "t2.csv"
    _split_table(a, t1, ("val", "train"))
    rows2 = _split_table(b, t2, ("train", "test"))
    s1, s2 = tmp_path / "s1.lmdb", tmp_path / "s2.lmdb"
    pack_lmdb(a, s1, labels=t1, workers=0)
    pack_lmdb(b, s2, labels=t2, workers=0)
    both = open_dataset([str(s1), str(s2)], split="test")
    assert len(both) == sum(s == "test" for _, s in rows2) == 6
    assert len(open_dataset([str(s1), str(s2)], split="train")) == 12  # from each
    with pytest.raises(UsageError, match=r"no split 'dev'; the pack's splits are 'val', 'train'"):
        open_dataset([str(s1), str(s2)], split="dev")  # in none of them


def test_an_empty_or_too_long_pack_name_is_refused_before_anything_is_written(class_folder: Path, tmp_path: Path,
                                                                              monkeypatch, capsys):  # fmt: skip
    # The attacks: pack-lmdb SRC "" (an unset "$OUT") packed into the current folder; a name of 240-255 bytes was
    # packed, and every later --overwrite failed with "File name too long" on the folder it builds beside it
    monkeypatch.chdir(tmp_path)
    assert main(["pack-lmdb", str(class_folder), "", "-q"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "datakit pack-lmdb: error: the pack's folder is named by an empty string (an unset variable?); name the "
        "folder to write the pack in"
    ]
    long = tmp_path / ("数" * 80 + ".lmdb")  # 245 bytes
    with pytest.raises(UsageError) as e:
        pack_lmdb(class_folder, long, workers=1)
    assert str(e.value) == (f"{long}: its name is 245 bytes; a pack's name may be 239 at most, so that --overwrite "
                            f"can build its replacement beside it (.{'数' * 23}...)")  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["数据 集"]
    ok = tmp_path / ("数" * 78 + ".lmdb")  # 239 bytes: packed, and replaced
    pack_lmdb(class_folder, ok, workers=1)
    assert pack_lmdb(class_folder, ok, workers=1, overwrite=True, max_size=8).count == 12
    # a pack of a longer name packed before the check: resumed as before, its --overwrite refused up front
    (ok).rename(long)
    assert pack_lmdb(class_folder, long, workers=1, max_size=8, resume=True).count == 12
    with pytest.raises(UsageError, match="its name is 245 bytes"):
        pack_lmdb(class_folder, long, workers=1, overwrite=True)


def _pack_stopped_after(src: Path, out: Path, samples: int, max_size: int | None = None) -> None:
    """Pack ``src`` into ``out``, stopped (Ctrl-C) once ``samples`` samples are packed, committed every 8."""

    def stop(done, total, nbytes):
        if done == samples:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pack_lmdb(src, out, workers=0, commit_every=8, progress=stop, max_size=max_size)


def test_a_resume_that_only_marks_the_pack_complete_says_so(class_folder: Path, tmp_path: Path, capsys):
    # The attack: pack-lmdb stopped after its last sample was committed, before the pack was marked complete (info:
    # INCOMPLETE (12 of 12)); --resume finished it (index, classes.json, complete) but said "is complete already
    # (12 images): nothing to pack".
    from datakit.cli import main

    out = tmp_path / "p.lmdb"

    def stop(done, total, nbytes):
        if done == total:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pack_lmdb(class_folder, out, workers=0, commit_every=4, progress=stop)
    assert (read_meta(out)["count"], read_meta(out)["complete"]) == (12, False)
    capsys.readouterr()
    assert main(["pack-lmdb", str(class_folder), str(out), "--resume"]) == 0
    assert capsys.readouterr().out == (f"completed {out} (12 images, every one committed before the interruption): its "
                                       "index and classes written, the pack marked complete\n")  # fmt: skip
    assert read_meta(out)["complete"] is True
    assert main(["pack-lmdb", str(class_folder), str(out), "--resume"]) == 0
    assert capsys.readouterr().out == f"{out} is complete already (12 images): nothing to pack\n"


@pytest.mark.parametrize("max_size", [None, 16])
def test_resume_from_a_source_folder_put_in_place_of_the_one_packed_reads_every_packed_sample_again(tmp_path: Path,
                                                                                                    max_size):  # fmt: skip
    # The attack: the pack of src killed after 72 of 80 samples; then `mv src src_old; mv src_v2 src`, src_v2 a copy
    # (older times) with one image edited: resume read 32 of the 72 samples again, missed the edited one, and the
    # pack mixed the two folders, verify saying 0 problems. With --max-size, only those 32 were read again even
    # once the folder was known to be another.
    src, v2 = tmp_path / "src", tmp_path / "src_v2"
    (src / "a").mkdir(parents=True)
    side = 8 if max_size is None else 40  # shrunk and encoded again by --max-size 16
    for i in range(80):
        imwrite(src / "a" / f"{i:05d}.png", synthetic_image(side, side, seed=i), mode="rgb")
    shutil.copytree(src, v2)  # times kept
    imwrite(v2 / "a" / "00001.png", synthetic_image(side, side, seed=999), mode="rgb")  # not among the 32 read again
    same = tmp_path / "src_same"
    shutil.copytree(src, same)
    out = tmp_path / "p.lmdb"

    _pack_stopped_after(src, out, 72, max_size)
    assert read_meta(out)["count"] == 72
    src.rename(tmp_path / "src_old")
    v2.rename(src)
    with pytest.raises(UsageError) as e:
        pack_lmdb(src, out, workers=0, resume=True, max_size=max_size)
    hint = (
        " or the pack was begun by another version of datakit or OpenCV, which re-encodes otherwise" if max_size else ""
    )
    assert str(e.value) == (f"{out}: {src / 'a' / '00001.png'} gives other bytes than the pack stores for it: the "
                            "source changed after its samples were packed (another folder, archive or pack put in its "
                            f"place?{hint}); resume only the same files, or use --overwrite")  # fmt: skip
    # a copy of the same bytes put in its place resumes, every packed sample read again and found the same
    src.rename(tmp_path / "src_v2")
    same.rename(src)
    report = pack_lmdb(src, out, workers=0, resume=True, max_size=max_size)
    assert (report.count, report.resumed_from) == (80, 72) and verify_lmdb(out) == []


def test_resume_after_one_class_folder_was_put_in_place_of_another_reads_every_packed_sample_again(tmp_path: Path):
    # The attack: `mv src/cat cat_old; mv src_ed/cat src/cat`, src_ed a copy (times kept) with one packed image
    # edited: the source folder itself kept its inode, and resume spot-checked, exit 0, the pack mixing the two
    src = tmp_path / "src"
    for cls in ("cat", "dog"):
        (src / cls).mkdir(parents=True)
        for i in range(40):
            imwrite(
                src / cls / f"{i:05d}.png", synthetic_image(8, 8, seed=i + (100 if cls == "dog" else 0)), mode="rgb"
            )
    edited = tmp_path / "cat_ed"
    shutil.copytree(src / "cat", edited)
    imwrite(edited / "00001.png", synthetic_image(8, 8, seed=999), mode="rgb")
    out = tmp_path / "p.lmdb"

    _pack_stopped_after(src, out, 72)
    (src / "cat").rename(tmp_path / "cat_old")
    edited.rename(src / "cat")
    with pytest.raises(UsageError, match=re.escape(f"{src / 'cat' / '00001.png'} gives other bytes than the pack")):
        pack_lmdb(src, out, workers=0, resume=True)


def test_a_missing_folder_of_a_table_keeps_the_swap_check(tmp_path: Path):
    # The regression: one folder of the table missing (skipped as bad) made the source's identity None, so a copy
    # put in place of the source, one packed image edited, resumed without a word
    from datakit.pack import _source_identity

    src = tmp_path / "data"
    (src / "a").mkdir(parents=True)
    for i in range(3):
        imwrite(src / "a" / f"{i}.png", synthetic_image(8, 8, seed=i), mode="rgb")
    (src / "l.csv").write_text("file,label\na/0.png,x\na/1.png,y\na/2.png,x\ngone/9.png,y\n", encoding="utf-8")
    ident = _source_identity(open_dataset(src / "l.csv"))
    assert ident is not None and len(ident) == 3
    copy = tmp_path / "copy"
    shutil.copytree(src, copy)
    assert _source_identity(open_dataset(copy / "l.csv")) != ident


def test_an_out_inside_a_pack_a_link_to_nothing_or_an_empty_shard_is_refused(class_folder: Path, tmp_path: Path,
                                                                             capsys):  # fmt: skip
    # the attacks: OUT inside an existing pack was packed (the outer pack then refused --overwrite, holding other
    # files); OUT a link to a missing far/deep/x.lmdb made those folders; --shard 0/5 of 2 samples wrote an empty
    # pack, "complete already (0 images)"
    outer = tmp_path / "outer.lmdb"
    assert main(["pack-lmdb", str(class_folder), str(outer), "-q"]) == 0
    assert main(["pack-lmdb", str(class_folder), str(outer / "inner"), "-q"]) == 2
    assert capsys.readouterr().err == (f"datakit pack-lmdb: error: {outer}/inner: inside the pack {outer}, which would "
                                       "then hold other files than a pack's (and refuse --overwrite); pick an OUT "
                                       "outside it\n")  # fmt: skip
    assert sorted(os.listdir(outer)) == ["classes.json", "data.mdb", "lock.mdb", "pack.lock"]
    (outer / "made").mkdir()  # a folder made in it first: the pack is still a pack around OUT
    assert main(["pack-lmdb", str(class_folder), str(outer / "made"), "-q"]) == 2
    assert capsys.readouterr().err.startswith(f"datakit pack-lmdb: error: {outer}/made: inside the pack {outer},")
    (outer / "made").rmdir()
    foreign = tmp_path / "foreign"  # another program's LMDB environment is no pack: a folder in it is a place
    with lmdb.open(str(foreign), map_size=1 << 20) as env, env.begin(write=True) as txn:
        txn.put(b"k", b"v")
    assert main(["pack-lmdb", str(class_folder), str(foreign / "mine.lmdb"), "-q"]) == 0
    link = tmp_path / "dl"
    link.symlink_to("far/deep/x.lmdb")
    with pytest.raises(UsageError) as err:
        pack_lmdb(class_folder, link)
    assert str(err.value) == (f"{link}: a link to far/deep/x.lmdb, which does not exist; make that folder first, or "
                              "give the pack's own path as OUT")  # fmt: skip
    assert not (tmp_path / "far").exists()
    two = tmp_path / "two"
    (two / "a").mkdir(parents=True)
    (two / "b").mkdir()
    imwrite(two / "a" / "1.png", synthetic_image(4, 4, seed=1))
    imwrite(two / "b" / "1.png", synthetic_image(4, 4, seed=2))
    assert main(["pack-lmdb", str(two), str(tmp_path / "sh.lmdb"), "--shard", "0/5"]) == 2
    assert capsys.readouterr().err == ("datakit pack-lmdb: error: shard 0/5 of 2 samples holds none: split them into "
                                       "at most 2 shards\n")  # fmt: skip
    assert not (tmp_path / "sh.lmdb").exists()
    assert main(["pack-lmdb", str(two), str(tmp_path / "sh.lmdb"), "--shard", "1/2", "-q"]) == 0
    assert lmdb_info(tmp_path / "sh.lmdb")["count"] == 1


def test_a_file_gone_from_the_folder_while_it_is_packed_gets_advice_that_works(samples: Path, tmp_path: Path,
                                                                               monkeypatch):  # fmt: skip
    # the attack: a file deleted while its folder was packed: "fix them and run the same command with --resume, or
    # ... --resume --skip-bad"; the second was refused (the folder has another number of samples now)
    import datakit.sources as sources

    src = samples / "images"
    victim = src / "coffee" / "coffee_08.jpg"
    kept = tmp_path / "kept.jpg"
    scan = sources.scan_class_folders

    def scan_then_lose_one(*args, **kwargs):
        found = scan(*args, **kwargs)
        if victim.exists():
            shutil.move(victim, kept)
        return found

    monkeypatch.setattr(sources, "scan_class_folders", scan_then_lose_one)
    out = tmp_path / "p.lmdb"
    with pytest.raises(PackError) as e:
        pack_lmdb(src, out)
    assert str(e.value) == (
        "1 missing file (the pack holds the 12 samples before the first; put it back and run the same command with "
        f"--resume, or pack the folder as it is now with --overwrite):\nmissing: {victim} (gone from the folder while "
        "it was packed)"
    )
    monkeypatch.setattr(sources, "scan_class_folders", scan)
    assert pack_lmdb(src, out, overwrite=True).count == 23  # the folder as it is now
    shutil.move(kept, victim)
    assert pack_lmdb(src, out, overwrite=True).count == 24
    monkeypatch.setattr(sources, "scan_class_folders", scan_then_lose_one)
    with pytest.raises(PackError) as e:
        pack_lmdb(src, out, overwrite=True)
    part = tmp_path / ".p.lmdb.overwrite-part"
    assert str(e.value).startswith(
        f"1 missing file ({out} still holds the old pack, untouched; the 12 new samples before the first are kept in "
        f"{part}: put it back and run the same --overwrite command to go on from them, or run it with the folder as "
        "it is now to pack that anew):\n"
    )
    monkeypatch.setattr(sources, "scan_class_folders", scan)
    shutil.move(kept, victim)  # put back: the same command goes on from the 12
    report = pack_lmdb(src, out, overwrite=True)
    assert (report.count, report.resumed_from) == (24, 12)
    assert pack_lmdb(src, tmp_path / "fresh.lmdb").count == 24
    assert [open_dataset(out).read(i) for i in range(24)] == [open_dataset(tmp_path / "fresh.lmdb").read(i)
                                                                for i in range(24)]  # fmt: skip


def test_resume_of_a_complete_pack_whose_source_changed_since_is_refused(class_folder: Path, tmp_path: Path):
    # the attack: an image edited after the pack completed, `pack-lmdb ... --resume` (a script run again): "complete
    # already: nothing to pack", exit 0, the pack holding the old image
    out = tmp_path / "p.lmdb"
    pack_lmdb(class_folder, out, workers=1)
    assert pack_lmdb(class_folder, out, workers=1, resume=True).count == 12  # as it was: nothing to do
    image = sorted(p for p in class_folder.rglob("*.png"))[0]
    time.sleep(0.05)
    imwrite(image, synthetic_image(50, 50, seed=77), mode="rgb")
    with pytest.raises(UsageError) as e:
        pack_lmdb(class_folder, out, workers=1, resume=True)
    assert str(e.value).startswith(f"{out}: complete, but {image} changed after its samples were packed (modified, ")
    assert str(e.value).endswith("; use --overwrite to pack it again")
    assert pack_lmdb(class_folder, out, workers=1, overwrite=True).count == 12


def test_packs_of_one_folder_refilled_under_the_same_names_and_a_touched_max_size_pack_pass(tmp_path: Path):
    # false positives of the checks above: one folder packed each week, its files replaced by new images of the same
    # names (`/data/images` in a container), was refused as "holds 'cat/0000.png' ... too"; `--resume` of a complete
    # --max-size pack after `touch` of a source file was refused as changed (its bytes cannot be compared)
    src = tmp_path / "incoming"
    weeks = [tmp_path / "week1.lmdb", tmp_path / "week2.lmdb"]
    for w, pack in enumerate(weeks):
        shutil.rmtree(src, ignore_errors=True)
        for c in ("cat", "dog"):
            (src / c).mkdir(parents=True)
            for k in range(3 + w):
                imwrite(src / c / f"{k:04d}.png", np.full((4, 4, 3), 40 * w + k, np.uint8), mode="rgb")
        pack_lmdb(src, pack, workers=1)
    assert len(open_dataset(weeks)) == 6 + 8
    small = tmp_path / "small.lmdb"
    pack_lmdb(src, small, max_size=2, workers=1)
    time.sleep(0.05)
    (src / "cat" / "0000.png").touch()
    assert pack_lmdb(src, small, max_size=2, workers=1, resume=True).count == 8


def test_a_max_size_of_another_type_is_refused_once_or_taken_as_the_whole_number_it_is(class_folder: Path,
                                                                                    tmp_path: Path):  # fmt: skip
    # the regression round: once decode_image refused a float max_size, pack_lmdb(max_size=64.0) reported every
    # image as unreadable (a usage mistake counted as bad data, sample by sample)
    report = pack_lmdb(class_folder, tmp_path / "a.lmdb", workers=0, max_size=64.0)
    assert report.count == 12 and read_meta(tmp_path / "a.lmdb")["options"]["max_size"] == 64
    for bad in (0.5, "64", True):
        with pytest.raises(UsageError) as e:
            pack_lmdb(class_folder, tmp_path / "b.lmdb", workers=0, max_size=bad)
        assert str(e.value) == (f"max_size must be a positive whole number (the longer side needed, in pixels) or "
                                f"None, got {bad!r}")  # fmt: skip
        assert not (tmp_path / "b.lmdb").exists()
