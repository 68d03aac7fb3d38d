from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import datakit.devices
from datakit.cli import main
from datakit.doctor import (
    check_cpus,
    check_cuda,
    check_jpeg_region,
    check_open_files,
    check_opencv,
    check_sharing_strategy,
    check_shm,
    check_versions,
    doctor,
    read_speed,
)
from datakit.loader import plan_shared_memory

MIB = 2**20
ROOT = Path(__file__).resolve().parents[1]


def test_plan_shared_memory_from_the_free_bytes():
    # 10 MiB batches, 2 workers x 4 prefetched + 2 in the loop = 100 MiB, within 90% of the free space
    assert plan_shared_memory(10 * MIB, 2, 4, 112 * MIB) == (2, 4, None)
    assert plan_shared_memory(10 * MIB, 2, 4, 110 * MIB)[:2] == (2, 3)
    w, p, msg = plan_shared_memory(10 * MIB, 2, 4, 67 * MIB)
    assert (w, p) == (2, 2) and msg == (
        "/dev/shm has 67 MiB free, 2 workers x prefetch_factor 4 batches of 10.0 MiB, and 2 more the training loop holds, need 100 MiB: using "
        "num_workers=2, prefetch_factor=2; give it more (docker run --shm-size=8g, or a larger tmpfs)"
    )
    assert plan_shared_memory(10 * MIB, 2, 4, 34 * MIB)[:2] == (1, 1)
    w, p, msg = plan_shared_memory(10 * MIB, 2, 4, 33 * MIB)
    assert w == 0 and "loading in the main process instead" in msg
    assert plan_shared_memory(10 * MIB, 0, 4, 1) == (0, 4, None)  # no workers, no shared memory
    assert plan_shared_memory(10 * MIB, 2, 4, None) == (2, 4, None)  # no /dev/shm to measure
    # the attack: `doctor --workers 1000000000` (or --prefetch-factor) stepped down one at a time: a hang
    assert plan_shared_memory(10 * MIB, 10**9, 4, 1000 * MIB)[:2] == (88, 1)  # 10 MiB x (88 + 2) <= 900 MiB
    assert plan_shared_memory(10 * MIB, 2, 10**9, 1000 * MIB)[:2] == (2, 44)  # 10 MiB x (2 x 44 + 2) <= 900 MiB


def test_check_shm_explains_the_fix():
    ok = check_shm(10 * MIB, 2, 4, 112 * MIB)
    assert ok.status == "ok" and ok.data["need"] == 100 * MIB
    bad = check_shm(10 * MIB, 2, 4, 67 * MIB, 64 * MIB)
    assert bad.status == "fail"
    assert bad.detail == ("/dev/shm: 67 MiB free; 2 workers x prefetch_factor 4 batches of 10.0 MiB, and 2 more the training loop holds, need 100 MiB: "
                          "workers would die with 'Bus error' or hang")  # fmt: skip
    assert bad.fix.startswith("docker run --shm-size=8g") and bad.fix.endswith(
        "create_loader falls back to num_workers=2, prefetch_factor=2 by itself"
    )


def test_limits_cpus_cuda_opencv_versions():
    assert check_open_files((1024, 1024), 4).status == "warn"
    assert check_open_files((1024, 1024), 0).status == "info"
    assert check_open_files((1024, 1048576), 4).fix == "create_loader raises the soft limit to the hard one by itself"
    assert check_open_files((65536, 65536), 4).status == "ok"
    assert check_sharing_strategy("file_descriptor", (1024, 1024)).status == "warn"
    assert check_sharing_strategy("file_descriptor", (65536, 65536)).status == "ok"
    cpus = check_cpus(8, affinity=4, cpu_count=64, quota=1.5)
    assert cpus.status == "warn" and cpus.data["usable"] == 1
    assert cpus.detail == ("1 usable CPUs (os.cpu_count() 64, affinity 4, cgroup quota 1.5); num_workers=8 is more: "
                           "workers compete for them")  # fmt: skip
    assert check_cpus(2, affinity=4, cpu_count=4, quota=None).status == "ok"
    late = check_cuda(True, "1", 2, "fork")
    assert [(f.check, f.status) for f in late] == [("cuda-fork", "fail"), ("cuda-visible-devices", "fail")]
    assert late[1].detail == (
        "CUDA_VISIBLE_DEVICES='1' lists 1 GPU but CUDA sees 2: it names GPUs this machine lacks "
        "(nvidia-smi -L lists those it has), or it was set after CUDA started and is ignored"
    )
    # counted as CUDA reads the list: '0,abc,1' is one GPU (check_environment says why), not "set after CUDA started"
    assert [f.status for f in check_cuda(True, "0,abc,1", 1, "spawn")] == ["ok", "ok"]
    assert [f.status for f in check_cuda(True, "0,1", 2, "spawn")] == ["ok", "ok"]
    assert [f.status for f in check_cuda(False, None, None, "fork")] == ["ok", "ok"]
    assert check_opencv(8, "fork").status == "info" and check_opencv(1, "fork").status == "ok"
    assert check_opencv(8, "fork").fix == (
        "create_loader calls cv2.setNumThreads(0) in every worker (and sets OPENCV_FOR_THREADS_NUM=1 for spawned "
        "ones); in your own DataLoader pass a worker_init_fn that calls cv2.setNumThreads(0), not 1 (after fork, "
        "resizing the inherited pool to 1 thread can hang), or datakit.loader.WorkerInit()"
    )
    assert check_jpeg_region(True).status == "ok"
    missing = check_jpeg_region(False)
    assert missing.status == "warn" and missing.fix.startswith(
        "install libjpeg-turbo's headers (Debian: libjpeg62-turbo-dev"
    )
    v = check_versions({"torch": "2.14.1+cu130", "torchvision": "0.28.0"})
    assert v.status == "fail" and v.fix == "pip install torchvision==0.29.* (matching torch 2.14.1+cu130)"
    assert check_versions({"torch": "2.14.1", "torchvision": "0.29.1", "lmdb": None}).status == "ok"


def test_the_opencv_advice_names_the_call_the_loader_makes(monkeypatch):
    # before: the advice said create_loader sets cv2.setNumThreads(1); its WorkerInit calls setNumThreads(0)
    import types

    import datakit.collate
    import datakit.loader

    calls = []
    monkeypatch.setitem(sys.modules, "cv2", types.SimpleNamespace(setNumThreads=calls.append))
    monkeypatch.setattr(datakit.loader, "seed_worker", lambda worker_id: None)  # the test's random state untouched
    monkeypatch.setattr(datakit.collate, "use_batch_slots", lambda capacity: None)
    monkeypatch.setenv("OPENCV_FOR_THREADS_NUM", "8")
    datakit.loader.WorkerInit()(0)
    assert calls == [0] and os.environ["OPENCV_FOR_THREADS_NUM"] == "1"
    fix = check_opencv(8, "fork").fix
    assert f"create_loader calls cv2.setNumThreads({calls[0]}) in every worker" in fix
    assert "OPENCV_FOR_THREADS_NUM=1" in fix and "setNumThreads(1)" not in fix


def test_read_speed_reads_every_image_cold_then_warm(class_folder: Path):
    f = read_speed(class_folder)
    assert f.check == "read-speed" and f.data["files"] == 12 and f.data["evicted"] is True
    assert f.data["bytes"] == sum(p.stat().st_size for p in class_folder.rglob("*.*"))
    assert f.detail.startswith(f"{class_folder}: 12 files, ")


def test_read_speed_does_not_call_large_photos_small_files(tmp_path: Path, monkeypatch):
    # the attack: 12 photos of 4.7 MB read cold at 986 MB/s (over 2 ms each, by bandwidth alone): "small files read
    # slowly when not cached", and its fix (a pack) read 1.4x faster
    import datakit.doctor as doctor

    for k, size in enumerate((3 * 2**20, 100_000)):
        (tmp_path / str(k) / "a").mkdir(parents=True)
        for i in range(4):
            (tmp_path / str(k) / "a" / f"{i}.jpg").write_bytes(b"\xff\xd8" + bytes(size))
    monkeypatch.setattr(
        doctor, "_read_all", lambda files, limit: (sum(f.stat().st_size for f in files), len(files), 0.005 * len(files))
    )  # 5 ms a file, cold or warm
    assert read_speed(tmp_path / "0").status == "ok"  # 3 MiB a file: its bandwidth
    slow = read_speed(tmp_path / "1")  # 100 KB a file: its latency
    assert (slow.status, slow.detail.endswith("; small files read slowly when not cached")) == ("warn", True)


def test_doctor_cli_json_and_usage(class_folder: Path, capsys):
    rc = main(["doctor", str(class_folder), "--json", "--workers", "2", "--batch-size", "8"])
    out = json.loads(capsys.readouterr().out)
    assert [f["check"] for f in out["findings"]] == ["shm", "open-files", "sharing-strategy", "cpus", "cuda-fork",
                                                     "cuda-visible-devices", "opencv", "jpeg-region", "versions", "read-speed"]  # fmt: skip
    assert rc == (0 if out["ok"] else 1) and out["ok"] == doctor(class_folder, num_workers=2, batch_size=8).ok
    assert out["findings"][0]["data"]["batch_bytes"] == 8 * 3 * 224 * 224
    with pytest.raises(SystemExit) as e:
        main(["doctor", "--batch-size", "0"])
    assert e.value.code == 2
    assert "datakit doctor: error: argument --batch-size: must be >= 1, got 0" in capsys.readouterr().err
    assert main(["doctor", str(class_folder / "nothing")]) == 2
    capsys.readouterr()
    # -q (the README: every command takes it): the findings that are not ok (nor information), one a line; an option doctor does not
    # take is refused with doctor's own usage, not datakit's
    report = doctor(None, num_workers=2, batch_size=8)
    assert main(["doctor", "-q", "--workers", "2", "--batch-size", "8"]) == (0 if report.ok else 1)
    want = [f"{f.check}: {f.status}: {f.detail}" + (f"; fix: {f.fix}" if f.fix else "")
            for f in report.findings if f.status not in ("ok", "info")]  # fmt: skip
    assert capsys.readouterr().out.splitlines() == want
    with pytest.raises(SystemExit) as e:
        main(["doctor", "--cols"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    with pytest.raises(SystemExit):  # an option before the command is datakit's own
        main(["--bogus", "doctor"])
    assert capsys.readouterr().err.endswith("datakit: error: unrecognized arguments: --bogus\n")
    assert err.startswith("usage: datakit doctor ") and err.endswith("datakit doctor: error: unrecognized arguments: "
                                                                     "--cols\n")  # fmt: skip


SMALL_SHM = r"""
import logging, sys, time
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

class Big(Dataset):  # 2 MiB samples: batches of 2 need (2 workers x 4 + 2) x 4 MiB = 40 MiB; /dev/shm has 16
    def __len__(self): return 24
    def __getitem__(self, i): return np.full((1024, 1024, 2), i % 251, np.uint8), i

if sys.argv[1] == "raw":
    # timeout: when the failed write happens in a worker's queue feeder thread, a plain loader waits for ever
    loader = DataLoader(Big(), batch_size=2, num_workers=2, prefetch_factor=4, persistent_workers=True, timeout=20)
    for batch in loader:
        time.sleep(0.5)  # a slow first step: the workers fill every prefetch slot, as they do in training
    print("raw survived")
else:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    from datakit.loader import create_loader
    loader = create_loader(Big(), 2, num_workers=2, train=False)
    seen = [int(t) for _, labels in loader for t in labels]
    assert seen == list(range(24)), seen
    print("workers", loader.num_workers, "prefetch", loader.prefetch_factor)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("unshare") is None, reason="needs unshare")
def test_real_small_tmpfs_loader_adapts_instead_of_bus_error(tmp_path: Path):
    script = tmp_path / "small_shm.py"
    script.write_text(SMALL_SHM)
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def run(mode: str) -> subprocess.CompletedProcess:
        # a private mount namespace: the 16 MiB /dev/shm exists only for this child
        cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c",
               f'mount -t tmpfs -o size=16m tmpfs /dev/shm && exec "{sys.executable}" "{script}" {mode}']  # fmt: skip
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)

    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs -o size=16m tmpfs /dev/shm"], capture_output=True)  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {probe.stderr.decode(errors='replace').strip()}")
    ours = run("datakit")
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.strip() == "workers 1 prefetch 1"
    assert ours.stderr.strip() == (
        "/dev/shm has 16 MiB free, 2 workers x prefetch_factor 4 batches of 4.0 MiB, and 2 more the training loop holds, need 40 MiB: using num_workers=1, "
        "prefetch_factor=1; give it more (docker run --shm-size=8g, or a larger tmpfs)"
    )
    raw = run("raw")  # the attack: the same loader as a plain DataLoader (bus error, lost batch or a hang)
    assert raw.returncode != 0 and "raw survived" not in raw.stdout


def test_environment_variables_are_read_as_their_readers_read_them():
    # the attack: DATAKIT_NUM_WORKERS=abc (which create_loader refuses), CUDA_VISIBLE_DEVICES='abc' (no GPU for
    # CUDA) and OMP_NUM_THREADS=0 (ignored by OpenMP) were all "ok" or unmentioned
    from datakit.doctor import check_environment

    def seen(**env):
        return [(f.check, f.status, f.detail) for f in check_environment(env, 2)]

    assert seen() == []
    assert seen(DATAKIT_NUM_WORKERS="abc") == [("datakit-num-workers", "fail", "DATAKIT_NUM_WORKERS='abc': "
                                                "create_loader refuses it (a whole number >= 0)")]  # fmt: skip
    assert seen(DATAKIT_NUM_WORKERS="") == []  # empty: unset, as create_loader reads it
    assert seen(DATAKIT_NUM_WORKERS="5")[0][1] == "warn"  # more than the 2 CPUs given, fewer than 4 a CPU
    assert seen(DATAKIT_NUM_WORKERS="1")[0][1] == "info"
    # the attack: values create_loader refuses (its reading: ASCII digits) passed as "info" or "warn"; so did more
    # workers than create_loader lets a machine start
    from datakit.tuning import worker_room

    for value in ("+2", "-0", "1_0", "٣", "２", "-1"):
        assert seen(DATAKIT_NUM_WORKERS=value) == [("datakit-num-workers", "fail", f"DATAKIT_NUM_WORKERS={value!r}: "
                                                    "create_loader refuses it (a whole number >= 0)")]  # fmt: skip
    assert seen(DATAKIT_NUM_WORKERS=" 2 ")[0][1] == "info"
    assert seen(DATAKIT_NUM_WORKERS="100000") == [("datakit-num-workers", "fail", "DATAKIT_NUM_WORKERS='100000': "
                                                   f"create_loader refuses it ({worker_room(100000)})")]  # fmt: skip
    assert seen(CUDA_VISIBLE_DEVICES="0,1") == seen(CUDA_VISIBLE_DEVICES="GPU-8e6a,GPU-9f01") == []
    # as torch models CUDA's reading (torch.cuda._parse_visible_devices): a GPU listed twice leaves none, an entry
    # is the number it begins with, a list of UUIDs ends at the first entry that is none, legacy MIG names are UUIDs
    value = lambda v: [d for _, _, d in seen(CUDA_VISIBLE_DEVICES=v)]  # noqa: E731
    assert value("0,0") == ["CUDA_VISIBLE_DEVICES='0,0': GPU 0 is listed twice; CUDA sees no GPU"]
    assert value("1,01") == ["CUDA_VISIBLE_DEVICES='1,01': GPU 1 is listed twice; CUDA sees no GPU"]
    assert value("１") == ["CUDA_VISIBLE_DEVICES='１': '１' is neither an index nor a GPU-/MIG- UUID; CUDA stops "
                          "reading there: CUDA sees no GPU"]  # fmt: skip
    assert value("0;1") == ["CUDA_VISIBLE_DEVICES='0;1': '0;1' is read as GPU 0 (the number it begins with); only "
                            "GPU 0 is visible"]  # fmt: skip
    assert value("GPU-8e6a,1") == ["CUDA_VISIBLE_DEVICES='GPU-8e6a,1': '1' is not a GPU- UUID, as the first entry is; "
                                   "CUDA stops reading there: only GPU-8e6a is visible"]  # fmt: skip
    assert value("MIG-GPU-8e6a/1/0") == value("+1") == value(" 0 , 1") == value("01") == []
    assert seen(CUDA_VISIBLE_DEVICES="0,abc,1") == [("cuda-visible-devices-value", "warn", "CUDA_VISIBLE_DEVICES="
                                                     "'0,abc,1': 'abc' is neither an index nor a GPU-/MIG- UUID; CUDA "
                                                     "stops reading there: only GPU 0 is visible")]  # fmt: skip
    assert seen(CUDA_VISIBLE_DEVICES="-1")[0][2] == ("CUDA_VISIBLE_DEVICES='-1': '-1' ends the list (a negative "
                                                     "index); CUDA stops reading there: CUDA sees no GPU")  # fmt: skip
    assert seen(OMP_NUM_THREADS="0")[0][:2] == ("omp-num-threads", "warn")
    assert seen(OMP_NUM_THREADS="4") == []
    # as libgomp reads it: a list, one value per nesting level, is no mistake; a digit of another script is one
    assert seen(OMP_NUM_THREADS="1,4") == seen(OMP_NUM_THREADS=" 2 ") == seen(OMP_NUM_THREADS="+4,+2") == []
    assert seen(OMP_NUM_THREADS="99999999999999999999")[0][:2] == ("omp-num-threads", "warn")  # strtoul's overflow
    assert seen(OMP_NUM_THREADS="\u0663")[0][:2] == seen(OMP_NUM_THREADS="1,0")[0][:2] == ("omp-num-threads", "warn")
    assert seen(DATAKIT_MAX_PIXELS="abc") == [("datakit-max-pixels", "fail", "DATAKIT_MAX_PIXELS='abc': every decode "
                                               "refuses it (a positive whole number of pixels)")]  # fmt: skip
    assert seen(DATAKIT_MAX_PIXELS="200_000_000") == []


def test_read_speed_of_a_table_reads_its_images_and_a_link_to_nothing_is_passed_over(samples: Path):
    # the attacks: `doctor labels.csv` timed the table file alone ("1 files, 0.0 MiB ... ok"), the images it names
    # unread; a link to nothing named .jpg in the folder aborted the run ("[Errno 2] ...", exit 1)
    table = read_speed(samples / "labels.csv")
    assert table.status == "ok" and table.data["files"] == 24
    (samples / "images" / "dangling.jpg").symlink_to("nowhere.jpg")
    folder = read_speed(samples / "images")
    assert folder.status == "ok" and folder.data["files"] == 24


@pytest.mark.parametrize("kind", ["script", "fifo", "device"])
def test_doctor_of_a_file_that_is_no_dataset_is_a_usage_error(tmp_path: Path, capsys, kind: str):
    # the attack: `datakit doctor train.py` timed the script as the data and said "ok", exit 0; a FIFO or /dev/null
    # failed as data ("no image files found", exit 1) where every other command calls it a usage mistake
    script = tmp_path / "train.py"
    if kind == "script":
        script.write_text("print(1)\n")
    elif kind == "fifo":
        os.mkfifo(script)
    else:
        script = Path(os.devnull)
    assert main(["doctor", str(script)]) == 2
    assert capsys.readouterr().err == (f"datakit doctor: error: {script}: a file that is no dataset source; give the "
                                       "folder, zip, label table or pack the training reads\n")  # fmt: skip


def test_doctor_of_a_source_with_no_image_fails(tmp_path: Path, capsys):
    # the attack: `datakit doctor data/train` on a folder left empty by a failed copy: a "warn" row, exit 0
    empty = tmp_path / "train"
    empty.mkdir()
    (empty / "notes.txt").write_text("no images here\n")
    finding = read_speed(empty)
    assert (finding.check, finding.status, finding.detail, finding.fix) == (
        "read-speed", "fail", f"{empty}: no image files found to read",
        "give the folder, zip, label table or pack that holds the images")  # fmt: skip
    assert main(["doctor", "--quiet", str(empty)]) == 1
    assert (f"read-speed: fail: {empty}: no image files found to read; fix: give the folder, zip, label table or "
            "pack that holds the images\n") in capsys.readouterr().out  # fmt: skip


def test_doctor_of_a_zip_that_is_none_or_an_empty_path_is_refused(tmp_path: Path, capsys, monkeypatch):
    # the attacks: `datakit doctor data.zip` on a file that is no zip (or a zip of text files) timed its bytes and
    # said "ok", exit 0, where check says it is none; `datakit doctor "$UNSET"` (and info, verify) read the folder
    # it ran in; `doctor imgs imgs` called a folder of images a pack
    junk = tmp_path / "data.zip"
    junk.write_text("junk\n")
    assert main(["doctor", "--quiet", str(junk)]) == 1
    assert capsys.readouterr().err == (f"datakit doctor: error: {junk}: not a zip archive, or truncated (File is not "
                                       "a zip file)\n")  # fmt: skip
    monkeypatch.chdir(tmp_path)
    for cmd in ("doctor", "info", "verify"):
        assert main([cmd, ""]) == 2
        assert capsys.readouterr().err == (f"datakit {cmd}: error: an empty path (''); give the folder, table, zip or "
                                           "pack to read (an unset variable?)\n")  # fmt: skip
    texts = tmp_path / "texts.zip"
    with zipfile.ZipFile(texts, "w") as z:
        z.writestr("a/notes.txt", "x")
    assert main(["doctor", "--quiet", str(texts)]) == 1
    assert capsys.readouterr().err == (f"datakit doctor: error: {texts}: no image inside the archive (1 members); give "
                                       "the zip of the images the training reads\n")  # fmt: skip
    flat = tmp_path / "flat.zip"  # images without class folders (read with --labels): measured, as before
    with zipfile.ZipFile(flat, "w") as z:
        z.writestr("a.png", (tmp_path / "data.zip").read_bytes())
    assert main(["doctor", "--quiet", str(flat)]) in (0, 1)
    assert "error" not in capsys.readouterr().err
    (tmp_path / "imgs").mkdir()
    assert main(["doctor", "imgs", "imgs"]) == 2
    assert capsys.readouterr().err == "datakit doctor: error: imgs: given twice (as imgs); each source is read once\n"


def test_an_output_picture_on_a_full_disk_is_named(tmp_path: Path):
    # the attack: preview --out and stats --plot on a full disk said "cannot write the output", as for stdout
    import errno

    from datakit.io import atomic_output

    out = tmp_path / "grid.png"
    with pytest.raises(OSError) as e, atomic_output(out):  # still an OSError of ENOSPC, naming the output
        raise OSError(errno.ENOSPC, "No space left on device")
    assert (e.value.errno, e.value.filename, e.value.strerror) == (
        errno.ENOSPC, str(out), "cannot be written (No space left on device); nothing was written there")  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_doctor_of_the_shards_of_a_pack_reads_them_all(samples: Path, tmp_path: Path, capsys, monkeypatch):
    # the attack: `datakit doctor 'part-*.lmdb'`, the form check and stats take, was "no such file or folder"
    from datakit.pack import pack_lmdb

    for k in range(3):
        pack_lmdb(samples / "images", tmp_path / f"part-{k}.lmdb", shard=(k, 3))
    monkeypatch.chdir(tmp_path)
    # as on a machine without CUDA: a GPU machine's test process has started the driver, which doctor reports (exit 1)
    monkeypatch.setattr(datakit.devices, "_cuda_started", lambda: False)
    for args in (["part-*.lmdb"], ["part-0.lmdb", "part-1.lmdb", "part-2.lmdb"]):
        assert main(["doctor", "--json", *args]) == 0
        speed = next(f for f in json.loads(capsys.readouterr().out)["findings"] if f["check"] == "read-speed")
        assert speed["detail"].startswith("part-0.lmdb and 2 more: 3 files, ")
        assert speed["data"]["files"] == 3
    assert main(["doctor", "part-0.lmdb", "images"]) == 2
    assert capsys.readouterr().err == ("datakit doctor: error: images: no such file or folder\n")
    (tmp_path / "images").mkdir()
    assert main(["doctor", "part-0.lmdb", "images"]) == 2
    assert capsys.readouterr().err == ("datakit doctor: error: images: not an LMDB pack; several sources are the "
                                       "shards of one pack, give one folder, zip or table alone\n")  # fmt: skip
    assert main(["doctor", "nope-*.lmdb"]) == 2
    assert capsys.readouterr().err == "datakit doctor: error: nope-*.lmdb: matches nothing\n"
    # the regression round: a shard alone, or one given twice, said "ok" where check and stats refuse them
    for args in (["part-0.lmdb"], ["part-0.lmdb", "part-1.lmdb"], ["part-0.lmdb", "part-0.lmdb", "part-1.lmdb",
                                                                    "part-2.lmdb"]):  # fmt: skip
        assert main(["doctor", *args]) == 2
        assert main(["check", *args]) == 2
        err = capsys.readouterr().err.splitlines()
        assert err[0].removeprefix("datakit doctor: ") == err[-1].removeprefix("datakit check: ")


def test_doctor_quiet_says_nothing_of_information_and_size_0_needs_a_source(samples: Path, capsys, monkeypatch):
    # the attacks: `doctor -q` printed the opencv "info" line, where -q means only what needs looking at; `doctor
    # --size 0` with no SRC planned batches of 0 bytes and said "ok"; `doctor labels.xlsx` whose images are under
    # images/ said "no image files found", where check names that folder
    import datakit.doctor

    real = datakit.doctor.doctor

    def only_info(*args, **kwargs):
        report = real(*args, **kwargs)
        report.findings = [f for f in report.findings if f.status in ("ok", "info")]
        return report

    monkeypatch.setattr(datakit.doctor, "doctor", only_info)
    assert main(["doctor", "-q"]) == 0
    assert capsys.readouterr().out == ""
    monkeypatch.setattr(datakit.doctor, "doctor", real)
    assert main(["doctor", "--size", "0"]) == 2
    assert capsys.readouterr().err == ("datakit doctor: error: --size 0 takes the size of SRC's first image; give SRC, "
                                       "or a side in pixels\n")  # fmt: skip
    assert main(["doctor", str(samples / "labels.xlsx")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"datakit doctor: error: {samples / 'labels.xlsx'}: none of the files the table names ")
    assert f"they are under {samples / 'images'}: give that folder" in err


def test_doctor_under_a_cpu_quota_warns_of_no_worker_count_of_its_own(monkeypatch):
    # the attack: under a cgroup quota of 1 CPU (docker --cpus=1), plain `datakit doctor` warned "num_workers=2 is
    # more": its own default counted the affinity alone, as stats, check and pack-lmdb did
    import datakit.parallel as par

    monkeypatch.setattr(par, "cgroup_cpu_quota", lambda: 1.0)
    cpus = next(f for f in doctor(None, batch_size=8).findings if f.check == "cpus")
    assert (cpus.status, cpus.data["usable"], cpus.data["num_workers"], cpus.data["quota"]) == ("ok", 1, 1, 1.0)
