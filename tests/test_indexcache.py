"""train_pipeline(index_cache=...): the entropy indexes kept on disk change the speed, never the
pixels, whatever happens to the files, the cache or the processes that share it."""

from __future__ import annotations

import io
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import cv2
import lmdb
import numpy as np
import pytest
import torch
from test_region import _photo

import datakit.indexcache as indexcache
import datakit.io as dio
from datakit import create_loader, open_dataset
from datakit.errors import ImageDecodeError
from datakit.indexcache import IndexCache
from datakit.io import region_decoder_available
from datakit.transforms import train_pipeline

pytestmark = pytest.mark.skipif(not region_decoder_available(), reason="datakit._jpegregion was not built")


def _write(path: Path, img: np.ndarray, **params) -> Path:
    flags = [cv2.IMWRITE_JPEG_QUALITY, 90]
    for key, value in params.items():
        flags += [getattr(cv2, key), value]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(cv2.imencode(".jpg", img, flags)[1].tobytes())
    return path


def _folder(root: Path, n: int = 12, seed: int = 0) -> list[Path]:
    rng = np.random.default_rng(seed)
    return [
        _write(
            root / f"类{k % 2}" / f"照片_{k}.jpg", _photo(int(rng.integers(240, 520)), int(rng.integers(240, 520)), rng)
        )
        for k in range(n)
    ]


@pytest.fixture
def builds(monkeypatch) -> list[int]:
    """The number of indexes built, as the cache builds them."""
    count = [0]
    build = indexcache.jpeg_entropy_index

    def counting(data):
        count[0] += 1
        return build(data)

    monkeypatch.setattr(indexcache, "jpeg_entropy_index", counting)
    return count


def _crops(pipe, files: list[Path], epoch: int) -> list[torch.Tensor]:
    out = []
    for k, p in enumerate(files):
        torch.manual_seed(1000 * epoch + k)
        out.append(pipe.from_bytes(p.read_bytes(), name=str(p)))
    return out


def _assert_same(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for k, (x, y) in enumerate(zip(a, b)):
        assert torch.equal(x, y), f"sample {k}"


def test_crops_with_the_cache_equal_those_without_and_each_index_is_built_once(tmp_path, builds, monkeypatch):
    files = _folder(tmp_path / "data")
    used = []
    decode = dio._decode_region  # (data, height, width, mode, scale, box, name, index): what the pipeline calls

    def spy(*args):
        used.append(args[7] is not None)
        return decode(*args)

    monkeypatch.setattr(dio, "_decode_region", spy)
    plain, cached = train_pipeline(224), train_pipeline(224, index_cache=tmp_path / "cache")
    for epoch in range(3):
        _assert_same(_crops(cached, files, epoch), _crops(plain, files, epoch))
        assert builds[0] == len(files)  # all in the first epoch, none after
    assert used.count(True) == 3 * len(files) and used.count(False) == 3 * len(files)
    assert sorted(os.listdir(tmp_path / "cache")) == ["INDEX_CACHE", "data.mdb", "lock.mdb"]


def test_a_file_changed_in_place_gets_its_own_index_not_the_old_one(tmp_path, builds):
    (p,) = _folder(tmp_path / "data", n=1)
    cached = train_pipeline(224, index_cache=tmp_path / "cache")
    _crops(cached, [p], 0)
    rng = np.random.default_rng(9)
    _write(p, _photo(480, 400, rng))  # the same name, other pixels
    _assert_same(_crops(cached, [p], 1), _crops(train_pipeline(224), [p], 1))
    assert builds[0] == 2
    # the same length (padded after the end-of-image marker), other pixels: the CRC tells them apart
    old = p.read_bytes()
    img = cv2.imdecode(np.frombuffer(old, np.uint8), cv2.IMREAD_COLOR)
    other = next(
        o
        for q in range(89, 0, -1)
        if len(o := cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, q])[1].tobytes()) < len(old)
    )
    assert 0 < len(old) - len(other) < 4000
    p.write_bytes(other + bytes(len(old) - len(other)))
    _assert_same(_crops(cached, [p], 2), _crops(train_pipeline(224), [p], 2))
    assert builds[0] == 3


def _built_cache(tmp_path: Path, n: int):
    """``n`` photos, a pipeline with a cache in ``tmp_path / "cache"`` that has read each once, the cache closed."""
    files = _folder(tmp_path / "data", n=n)
    cache = tmp_path / "cache"
    cached = train_pipeline(224, index_cache=cache)
    _crops(cached, files, 0)
    indexcache_close(cache)
    return files, cache, cached


def test_a_damaged_entry_is_built_again(tmp_path, builds):
    files, cache, cached = _built_cache(tmp_path, 3)
    with lmdb.open(str(cache), map_size=1 << 30) as env, env.begin(write=True) as txn:
        for key, value in list(txn.cursor()):
            damaged = bytearray(value)
            damaged[60] ^= 0x40  # a DC predictor of the first point, past the checksum and the header
            txn.put(key, bytes(damaged))
    _assert_same(_crops(cached, files, 1), _crops(train_pipeline(224), files, 1))
    assert builds[0] == 6


def indexcache_close(cache: Path) -> None:
    """Close this process's environment of the cache, as before opening it with py-lmdb directly."""
    from datakit.lmdb import _close_env

    _close_env(os.path.realpath(cache))


def test_a_jpeg_no_index_covers_is_remembered_and_decoded_the_ordinary_way(tmp_path, builds):
    rng = np.random.default_rng(3)
    files = [_write(tmp_path / "progressive.jpg", _photo(300, 360, rng), IMWRITE_JPEG_PROGRESSIVE=1),
             _write(tmp_path / "restarts.jpg", _photo(300, 360, rng), IMWRITE_JPEG_RST_INTERVAL=4)]  # fmt: skip
    cached = train_pipeline(224, index_cache=tmp_path / "cache")
    for epoch in range(2):
        _assert_same(_crops(cached, files, epoch), _crops(train_pipeline(224), files, epoch))
    assert builds[0] == 2


def test_bad_cache_folders_are_refused_naming_them(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError) as e:
        train_pipeline(224, index_cache=tmp_path / "file")
    assert str(e.value) == f"index_cache {tmp_path / 'file'}: exists and is not a folder"
    with pytest.raises(ValueError) as e:
        train_pipeline(224, index_cache=tmp_path / "other")
    assert (
        str(e.value)
        == f"index_cache {tmp_path / 'other'}: a folder with other files in it and no INDEX_CACHE; give an empty or new folder"
    )
    with pytest.raises(ValueError) as e:
        train_pipeline(224, index_cache=tmp_path / "file" / "below")
    assert str(e.value) == f"index_cache {tmp_path / 'file' / 'below'}: cannot create it (Not a directory)"
    assert not (tmp_path / "other" / "data.mdb").exists()
    pack = tmp_path / "pack"  # an LMDB folder that is not a cache: a pack, never written into
    with lmdb.open(str(pack), map_size=1 << 20) as env, env.begin(write=True) as txn:
        txn.put(b"k", b"v")
    with pytest.raises(ValueError) as e:
        train_pipeline(224, index_cache=pack)
    assert (
        str(e.value)
        == f"index_cache {pack}: a folder with other files in it and no INDEX_CACHE; give an empty or new folder"
    )


def test_an_unreadable_cache_warns_once_and_the_pixels_are_the_same(tmp_path, builds):
    files = _folder(tmp_path / "data", n=4)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "INDEX_CACHE").write_text("")
    (cache / "data.mdb").write_bytes(b"not an lmdb file" * 512)
    cached = train_pipeline(224, index_cache=cache)
    with pytest.warns(RuntimeWarning) as caught:
        got = _crops(cached, files, 0)
    _assert_same(got, _crops(train_pipeline(224), files, 0))
    assert len(caught) == 1
    # (the pack's own advice, "copy it again or re-pack", left out: a cache is deleted, not re-packed)
    assert str(caught[0].message) == (
        f"index_cache {cache}: reading failed (PackError: {cache}: data.mdb is not an LMDB file (no meta page)); "
        "going on without it (the same pixels, decoded without the index); delete the folder to start it afresh"
    )
    assert builds[0] == 0
    indexcache._BROKEN.discard(str(cache))


def test_the_cache_pickles_as_its_path(tmp_path):
    pipe = train_pipeline(224, index_cache=tmp_path / "cache")
    back = pickle.loads(pickle.dumps(pipe))
    assert isinstance(back.index_cache, IndexCache)
    assert back.index_cache.path == str(tmp_path / "cache")
    assert pickle.loads(pickle.dumps(pipe.index_cache)).__dict__ == {"path": str(tmp_path / "cache")}


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_share_the_cache_and_batches_equal_those_without_it(tmp_path, context):
    _folder(tmp_path / "data", n=16)
    cache = tmp_path / "cache"

    def batches(pipe):
        ds = open_dataset(tmp_path / "data", transform=pipe)
        loader = create_loader(ds, 4, num_workers=2, seed=7, multiprocessing_context=context)
        return [[x for x, _ in loader] for _ in range(2)]

    want = batches(train_pipeline(224))
    got = batches(train_pipeline(224, index_cache=cache))
    for epoch in range(2):
        _assert_same(got[epoch], want[epoch])
    indexcache_close(cache)  # the main process read samples too (create_loader's first-batch check)
    with lmdb.open(str(cache), readonly=True, lock=False) as env:
        assert env.stat()["entries"] == 16


def test_a_writer_killed_mid_write_leaves_a_cache_the_next_run_reads(tmp_path):
    # The attack: a process filling the cache is sent SIGKILL while it writes; the next run must
    # open the cache, read what was committed and add the rest.
    files = _folder(tmp_path / "data", n=40, seed=4)
    cache = tmp_path / "cache"
    script = (
        "import sys, itertools\n"
        "from datakit.indexcache import IndexCache\n"
        "c = IndexCache(sys.argv[1]); files = sys.argv[2:]\n"
        "print('ready', flush=True)\n"
        "for k in itertools.count():\n"
        "    p = files[k % len(files)]\n"
        "    c.index(open(p, 'rb').read() + bytes([k % 7]) * (k // len(files)), p)\n"  # ever new keys
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(cache), *map(str, files)], stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    import time

    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    cached = train_pipeline(224, index_cache=cache)
    _assert_same(_crops(cached, files, 0), _crops(train_pipeline(224), files, 0))
    indexcache_close(cache)
    with lmdb.open(str(cache), readonly=True, lock=False) as env:
        assert env.stat()["entries"] >= 40


def test_the_example_in_docs_loader_runs_as_written(tmp_path, monkeypatch):
    text = (Path(__file__).resolve().parents[1] / "docs" / "loader.md").read_text(encoding="utf-8")
    line = '  pipe = train_pipeline(224, index_cache="runs/index-cache")\n'
    assert "  ```python\n" + line + "  ```\n" in text
    monkeypatch.chdir(tmp_path)
    (p,) = _folder(tmp_path / "data", n=1)
    scope: dict = {"train_pipeline": train_pipeline}
    exec(line.strip(), scope)
    assert scope["pipe"].index_cache.path == str(tmp_path / "runs" / "index-cache")
    _assert_same(_crops(scope["pipe"], [p], 0), _crops(train_pipeline(224), [p], 0))
    assert sorted(os.listdir(tmp_path / "runs" / "index-cache")) == ["INDEX_CACHE", "data.mdb", "lock.mdb"]


def test_a_jpeg_over_the_pixel_budget_is_refused_naming_the_file_with_the_cache_too(tmp_path):
    data = bytearray(cv2.imencode(".jpg", np.zeros((64, 64, 3), np.uint8))[1].tobytes())
    sof = data.find(b"\xff\xc0")
    data[sof + 5 : sof + 9] = b"\xff\xff\xff\xff"  # 65535 x 65535 in the frame header
    pipe = train_pipeline(224, index_cache=tmp_path / "cache")
    with pytest.raises(ImageDecodeError) as e:
        pipe.from_bytes(bytes(data), name="大图/炸弹.jpg")
    assert str(e.value).startswith("大图/炸弹.jpg: 65535x65535 = 4294836225 pixels, over the limit of ")


_READ_CACHED = """
import sys, warnings, torch
from pathlib import Path
from datakit.transforms import train_pipeline
files = sorted(Path(sys.argv[1]).rglob("*.jpg"))
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    crops = []
    for k, p in enumerate(files):
        torch.manual_seed(k)
        crops.append(train_pipeline(224, index_cache=sys.argv[2]).from_bytes(p.read_bytes(), name=str(p)))
plain = []
for k, p in enumerate(files):
    torch.manual_seed(k)
    plain.append(train_pipeline(224).from_bytes(p.read_bytes(), name=str(p)))
print(all(torch.equal(a, b) for a, b in zip(crops, plain)))
print(*sorted({str(w.message).split(" (")[0] for w in seen}), sep="\\n")
"""


@pytest.mark.parametrize("damage", ["cut short", "a page pointer past the end"])
def test_a_damaged_cache_file_is_said_and_gone_around_not_a_crash(tmp_path, damage):
    # the attack: a cache's data.mdb cut to 8192 bytes (a copy cut short, a full disk), or one byte of a page
    # flipped, killed the process with SIGBUS (rc 135, every worker with it): the cache file was mapped unchecked
    _, cache, _ = _built_cache(tmp_path, 6)
    data = cache / "data.mdb"
    raw = bytearray(data.read_bytes())
    if damage == "cut short":
        raw = raw[:8192]
    else:
        for page in range(2, len(raw) // 4096):  # past the two meta pages: the B-tree's root among them
            raw[page * 4096 + 13] ^= 0x80  # mp_lower's high byte: its nodes' offsets run past the page
    data.write_bytes(bytes(raw))
    out = subprocess.run([sys.executable, "-c", _READ_CACHED, str(tmp_path / "data"), str(cache)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    same, *warned = out.stdout.splitlines()
    assert same == "True" and warned == [f"index_cache {cache}: reading failed"]


def test_an_index_of_another_file_with_the_same_key_is_gone_around(tmp_path, builds, monkeypatch):
    # the attack: a file replaced by another of the same name, length and CRC-32 (the CRC forged in a comment
    # segment): the cached index was refused ("the index is not one of this JPEG") and the good sample with it
    a, b = _folder(tmp_path / "data", n=2)
    cached = train_pipeline(224, index_cache=tmp_path / "cache")
    monkeypatch.setattr(indexcache, "_key", lambda data, name: b"one key for every file")
    _crops(cached, [a], 0)  # a's index stored under the key b will read too
    _assert_same(_crops(cached, [b], 1), _crops(train_pipeline(224), [b], 1))


def test_a_cache_inside_the_dataset_folder_is_no_class(tmp_path: Path, caplog):
    # the attack: train_pipeline(64, index_cache="data/.cache") made the folder at once, and the next
    # open_dataset("data") failed: "class folder '.cache' holds no images"
    import logging

    for c in ("cat", "dog"):
        (tmp_path / "data" / c).mkdir(parents=True)
        dio.imwrite(tmp_path / "data" / c / "1.jpg", _photo(48, 64, np.random.default_rng(0)))
    pipe = train_pipeline(32, index_cache=tmp_path / "data" / ".cache")
    with caplog.at_level(logging.WARNING):
        ds = open_dataset(tmp_path / "data", transform=pipe)
    assert ds.classes == ["cat", "dog"] and len(ds) == 2
    assert ds[0][0].shape == (3, 32, 32)
    assert f"{tmp_path / 'data'}: '.cache' skipped: datakit's index cache, not a class folder (keep it outside the " \
        "dataset)" in caplog.messages  # fmt: skip
    # the same folder zipped (the cache and all): read in place, the cache was a class with no images
    import shutil

    ds[1]  # the cache filled
    archive = shutil.make_archive(str(tmp_path / "data"), "zip", tmp_path / "data")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        zipped = open_dataset(archive)
    assert zipped.classes == ["cat", "dog"] and [zipped[i][1] for i in range(2)] == [0, 1]
    assert f"{archive}: '.cache' skipped: datakit's index cache, not a class folder (keep it outside the dataset)" in (
        caplog.messages
    )


def test_a_scan_naming_huffman_tables_past_the_four_is_no_crash(tmp_path):
    # the attack: one damaged byte in the scan's header (a component's tables 14 and 10) killed the process (SIGSEGV)
    # when the cache built its index: the table number was looked up before libjpeg checks it, at decoding
    from PIL import Image

    img = np.clip(np.random.default_rng(0).normal(128, 40, (97, 133, 3)), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=90)
    data = bytearray(buf.getvalue())
    sos = data.index(b"\xff\xda")
    data[sos + 5 + 2 * 2 + 1] = 0xEA  # the third component's DC and AC tables
    bad = tmp_path / "data" / "cat" / "bad.jpg"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(bytes(data))
    code = ("import sys\nfrom datakit import open_dataset\nfrom datakit.transforms import train_pipeline\n"
            "from datakit.io import jpeg_entropy_index\n"
            "print(jpeg_entropy_index(open(sys.argv[1], 'rb').read()))\n"
            "ds = open_dataset(sys.argv[2], transform=train_pipeline(64, index_cache=sys.argv[3]))\n"
            "try:\n    ds[0]\nexcept Exception as e:\n    print(type(e).__name__, str(e).split(':')[0])\n")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code, str(bad), str(tmp_path / "data"), str(tmp_path / "cache")],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert (out.returncode, out.stdout.splitlines()) == (0, ["None", "SampleError sample 0"]), out.stderr


def test_a_jpeg_of_larger_luma_sampling_is_left_to_the_whole_image_decoders(tmp_path):
    # the attack: cjpeg -sample 4x2 (or 2x4): the region decoder's column crops at 1/2 and 1/4 scale were up to 250
    # levels off the whole image's, with or without an index (train_pipeline: 77 of 100 crops)
    import shutil

    from datakit.io import decode_jpeg_region, jpeg_entropy_index

    if shutil.which("cjpeg") is None:
        pytest.skip("needs cjpeg (libjpeg-turbo's tools) to write such a JPEG")
    rng = np.random.default_rng(0)
    h, w = 121, 163
    img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    (tmp_path / "src.ppm").write_bytes(b"P6 %d %d 255\n" % (w, h) + img.tobytes())
    for sampling, handled in (("4x2", False), ("2x4", False), ("2x2", True), ("4x1", True)):
        data = subprocess.run(["cjpeg", "-sample", f"{sampling},1x1,1x1", str(tmp_path / "src.ppm")],
                              capture_output=True, check=True).stdout  # fmt: skip
        got = decode_jpeg_region(data, "rgb", 2, (20, 17, 41, 66))
        assert (got is not None) == handled and (jpeg_entropy_index(data) is not None) == handled, sampling
        pipe = train_pipeline(32, scale=(0.02, 1))
        for seed in range(20):
            torch.manual_seed(seed)
            region = pipe.from_bytes(data)
            dio._REGION = False  # the whole image at the crop's DCT scale, then cut
            try:
                torch.manual_seed(seed)
                whole = pipe.from_bytes(data)
            finally:
                dio._REGION = None
            assert (region.int() - whole.int()).abs().max() <= 1, (sampling, seed)


def test_a_damaged_jpeg_of_larger_luma_sampling_is_refused_not_decoded_gray(tmp_path):
    # the attack: a cjpeg -sample 4x2 file cut short, its end marker put back: the whole-image decoders it goes to
    # decoded it around the damage (76% gray), decode_image and train_pipeline without a word
    import shutil

    if shutil.which("cjpeg") is None:
        pytest.skip("needs cjpeg (libjpeg-turbo's tools) to write such a JPEG")
    img = np.random.default_rng(0).integers(0, 256, (121, 163, 3), dtype=np.uint8)
    (tmp_path / "src.ppm").write_bytes(b"P6 163 121 255\n" + img.tobytes())
    data = subprocess.run(["cjpeg", "-sample", "4x2,1x1,1x1", str(tmp_path / "src.ppm")],
                          capture_output=True, check=True).stdout  # fmt: skip
    assert dio.decode_image(data, "rgb").shape == (121, 163, 3)  # whole: read
    cut = data[: len(data) // 2] + b"\xff\xd9"
    want = "<bytes>: damaged JPEG data: Corrupt JPEG data: premature end of data segment"
    with pytest.raises(ImageDecodeError) as e:
        dio.decode_image(cut, "rgb")
    assert str(e.value) == want
    with pytest.raises(ImageDecodeError) as e:
        train_pipeline(32).from_bytes(cut)
    assert str(e.value) == want


def test_a_cache_on_a_full_disk_is_refused_or_left_never_a_dead_process(tmp_path, monkeypatch):
    # the attack: a cache folder (its marker made while there was room) on a full disk was taken when the pipeline
    # was built, and the first read died of SIGBUS: liblmdb maps a new lock file the disk has no space for
    files = _folder(tmp_path / "data", n=2)
    monkeypatch.setattr(indexcache, "_free_bytes", lambda path: 0)
    with pytest.raises(ValueError) as e:
        train_pipeline(64, index_cache=tmp_path / "full")
    assert str(e.value) == (f"index_cache {tmp_path / 'full'}: its disk is full (0 bytes free); free some space there, "
                            "or give a folder on another disk")  # fmt: skip
    monkeypatch.setattr(indexcache, "_free_bytes", lambda path: 1 << 30)
    pipe = train_pipeline(64, index_cache=tmp_path / "later")  # built with room; the disk fills before any read
    monkeypatch.setattr(indexcache, "_free_bytes", lambda path: 4096)
    monkeypatch.setattr(indexcache, "_BROKEN", set())
    with pytest.warns(RuntimeWarning, match=r"reading failed \(PackError: its disk is full \(4096 bytes free\)\); "
                                            r"going on without it"):  # fmt: skip
        cached = _crops(pipe, files, 0)
    _assert_same(cached, _crops(train_pipeline(64), files, 0))
    assert not (tmp_path / "later" / "lock.mdb").exists()


def test_a_cache_whose_lock_file_a_size_limit_left_empty_is_refused_on_a_full_disk(tmp_path, monkeypatch):
    from datakit.lmdb import close_pack

    # the attack: a first run under `ulimit -f 64` left lock.mdb of 0 bytes (liblmdb could not size it); a later run
    # on a full disk took the cache as made before, and liblmdb, sizing the lock file, died of SIGBUS
    files = _folder(tmp_path / "data", n=2)
    cache = tmp_path / "cache"
    _crops(train_pipeline(64, index_cache=cache), files, 0)
    close_pack(cache)  # (the run that left it ended)
    (cache / "lock.mdb").write_bytes(b"")
    monkeypatch.setattr(indexcache, "_free_bytes", lambda path: 0)
    with pytest.raises(ValueError) as e:
        train_pipeline(64, index_cache=cache)
    assert str(e.value) == (f"index_cache {cache}: its disk is full (0 bytes free); free some space there, or give a "
                            "folder on another disk")  # fmt: skip
    monkeypatch.setattr(indexcache, "_free_bytes", lambda path: 1 << 30)
    pipe = train_pipeline(64, index_cache=cache)  # built with room; the disk fills before any read
    monkeypatch.setattr(indexcache, "_free_bytes", lambda path: 4096)
    monkeypatch.setattr(indexcache, "_BROKEN", set())
    with pytest.warns(RuntimeWarning, match=r"reading failed \(PackError: its disk is full \(4096 bytes free\)\); "
                                            r"going on without it"):  # fmt: skip
        _crops(pipe, files, 0)
    assert (cache / "lock.mdb").stat().st_size == 0  # liblmdb never sized it


def test_a_cache_made_before_or_roots_reserved_room_is_no_full_disk(tmp_path, monkeypatch):
    # the regression round: a complete cache, which needs no room to be read, was refused on a nearly full disk, and
    # so was root (a training container's user), who may still write the blocks ext4 reserves for it
    import types

    files = _folder(tmp_path / "data", n=2)
    cache = tmp_path / "cache"
    pipe = train_pipeline(64, index_cache=cache)
    made = _crops(pipe, files, 0)
    assert (cache / "lock.mdb").exists()
    monkeypatch.setattr(indexcache, "_free_bytes", lambda path: 0)
    _assert_same(_crops(train_pipeline(64, index_cache=cache), files, 0), made)  # taken, and read
    monkeypatch.undo()
    full = types.SimpleNamespace(
        f_blocks=1 << 21, f_bavail=0, f_bfree=1 << 20, f_frsize=4096
    )  # 4 GiB reserved for root, none else
    monkeypatch.setattr(os, "statvfs", lambda path: full)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert indexcache._free_bytes(str(tmp_path)) == 4 << 30
    train_pipeline(64, index_cache=tmp_path / "root")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ValueError, match=r"its disk is full \(0 bytes free\)"):
        train_pipeline(64, index_cache=tmp_path / "user")
