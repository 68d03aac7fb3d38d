from __future__ import annotations

import io
import os
import pickle
import random
import re
import stat
import struct
import subprocess
import sys
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

from datakit.archive import ArchiveError, ZipReader, detect_encoding, read_members, safe_relpath, unzip
from datakit.cli import main, unzip_gbk_main
from datakit.datasets import open_dataset
from datakit.errors import SampleError, UsageError
from datakit.testing import ZipEntry, build_zip, unicode_path_extra


def write_zip(path: Path, entries: list[ZipEntry], **kw) -> Path:
    path.write_bytes(build_zip(entries, **kw))
    return path


def gbk(name: str, data: bytes = b"", **kw) -> ZipEntry:
    return ZipEntry(name=name.encode("gbk"), data=data, **kw)


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def gbk_zip(tmp_path: Path) -> Path:
    return write_zip(
        tmp_path / "数据.zip",
        [
            gbk("训练/"),
            gbk("训练/猫_01.jpg", b"cat-bytes" * 50),
            gbk("训练/狗 02.png", b"dog", method=0),
            gbk("说明文件.txt", "标签说明".encode("gbk")),
        ],
    )


def test_gbk_names_without_flag(gbk_zip: Path, tmp_path: Path):
    guess = detect_encoding(gbk_zip)
    assert guess.encoding == "gbk"
    assert guess.reason == (
        "4 unflagged names written on DOS/Windows decode as gbk with plausibility 1.10 (next: cp949 0.69)"
    )
    assert guess.ambiguous == ()
    report = unzip(gbk_zip, tmp_path / "out")
    assert report.ok and report.problems == []
    assert tree(tmp_path / "out") == {
        "训练/狗 02.png": b"dog",
        "训练/猫_01.jpg": b"cat-bytes" * 50,
        "说明文件.txt": "标签说明".encode("gbk"),
    }
    assert sorted(report.extracted) == ["训练/狗 02.png", "训练/猫_01.jpg", "说明文件.txt"]


def test_timestamps_kept(gbk_zip: Path, tmp_path: Path):
    unzip(gbk_zip, tmp_path / "out")
    expected = time.mktime((2024, 5, 17, 10, 30, 0, 0, 0, -1))
    assert os.stat(tmp_path / "out" / "训练" / "猫_01.jpg").st_mtime == expected
    assert os.stat(tmp_path / "out" / "训练").st_mtime == expected


def test_mixed_flagged_and_unflagged(tmp_path: Path):
    z = write_zip(
        tmp_path / "mixed.zip",
        [
            ZipEntry(name="日本/ファイル.txt".encode(), data=b"a", utf8_flag=True),
            gbk("中文目录/文件.txt", b"b"),
        ],
    )
    members, guess = read_members(z)
    assert [(m.name, m.name_source) for m in members] == [
        ("日本/ファイル.txt", "utf-8 flag"),
        ("中文目录/文件.txt", "gbk"),
    ]
    assert guess.encoding == "gbk"
    unzip(z, tmp_path / "out")
    assert tree(tmp_path / "out") == {"日本/ファイル.txt": b"a", "中文目录/文件.txt": b"b"}


def test_unicode_path_extra_field_wins_when_valid(tmp_path: Path):
    header = "旧名字.txt".encode("gbk")
    bad_header = "另一个.txt".encode("gbk")
    z = write_zip(
        tmp_path / "x.zip",
        [
            ZipEntry(name=header, data=b"1", extra=unicode_path_extra(header, "正确的名字.txt")),
            ZipEntry(name=bad_header, data=b"2", extra=unicode_path_extra(bad_header, "错误.txt", crc=123)),
        ],
    )
    members, _ = read_members(z)
    assert [(m.name, m.name_source) for m in members] == [
        ("正确的名字.txt", "unicode path field"),
        ("另一个.txt", "gbk"),  # CRC of the header name does not match: the field is stale, ignored
    ]


@pytest.mark.parametrize(
    ("encoding", "names"),
    [
        ("cp932", ["写真/ねこの写真.jpg", "テスト画像.png", "資料/表示.txt"]),
        ("big5", ["資料/貓咪照片.jpg", "測試圖片.png", "訓練資料/狗.jpg"]),
        ("utf-8", ["macOS/文件.jpg", "naïve.png"]),
    ],
)
def test_detects_other_legacy_encodings(tmp_path: Path, encoding: str, names: list[str]):
    z = write_zip(tmp_path / "x.zip", [ZipEntry(name=n.encode(encoding), data=n.encode()) for n in names])
    assert detect_encoding(z).encoding == encoding
    unzip(z, tmp_path / "out")
    assert tree(tmp_path / "out") == {n: n.encode() for n in names}


def test_gbk_name_with_backslash_trail_byte(tmp_path: Path):
    name = "数据/嘰乗_图片.jpg"
    assert b"\x5c" in name.encode("gbk")  # the second byte of 嘰 is a backslash
    z = write_zip(tmp_path / "x.zip", [gbk(name, b"ok"), gbk("数据/猫.jpg", b"cat")])
    unzip(z, tmp_path / "out")
    assert tree(tmp_path / "out") == {"数据/嘰乗_图片.jpg": b"ok", "数据/猫.jpg": b"cat"}


def test_forced_encoding(gbk_zip: Path):
    members, guess = read_members(gbk_zip, "gb18030")
    assert guess.encoding == "gb18030" and members[1].name == "训练/猫_01.jpg"
    with pytest.raises(UsageError, match="unknown encoding 'klingon'"):
        read_members(gbk_zip, "klingon")


def test_safe_relpath():
    assert safe_relpath("a\\b\\c.txt") == ("a/b/c.txt", "")
    assert safe_relpath("/etc/passwd") == ("etc/passwd", "absolute path made relative")
    assert safe_relpath("C:\\Windows\\x.dll") == ("Windows/x.dll", "drive letter removed; absolute path made relative")
    assert safe_relpath("a/../../x") == (None, "refused: a '..' component would escape the target folder")
    assert safe_relpath("./a//b") == ("a/b", "")
    assert safe_relpath("a/\udcff.jpg") == ("a/\udcff.jpg", "")  # an undecodable byte: written back as it was


def test_a_name_no_file_can_hold_is_refused_and_the_others_extracted(tmp_path: Path, capsys):
    # the attack: --encoding unicode_escape over a name spelling "\ud800" stopped the whole run at that member:
    # "unzip-gbk: error: 'utf-8' codec can't encode character '\ud800' ...", nothing else extracted
    z = write_zip(tmp_path / "u.zip", [ZipEntry(b"cat/\\ud800.jpg", b"a"), ZipEntry(b"cat/ok.jpg", b"b")])
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "out"), "--encoding", "unicode_escape"]) == 1
    err = capsys.readouterr().err
    assert err == (f"{z}: member 'cat/\\ud800.jpg': refused: the name holds U+D800, which no file name can hold\n"
                   "1 member not extracted (see above)\n")  # fmt: skip
    assert tree(tmp_path / "out") == {"cat/ok.jpg": b"b"}


def test_traversal_and_absolute_members(tmp_path: Path):
    z = write_zip(
        tmp_path / "evil.zip",
        [
            gbk("../逃逸.txt", b"evil"),
            gbk("ok/../../x.txt", b"evil"),
            gbk("/abs/绝对.txt", b"abs"),
            gbk("C:\\temp\\盘符.txt", b"drive"),
            gbk("dir\\反斜杠.txt", b"bs"),
        ],
    )
    out = tmp_path / "out"
    report = unzip(z, out)
    assert not report.ok
    assert report.problems == [
        f"{z}: member '../逃逸.txt': refused: a '..' component would escape the target folder",
        f"{z}: member 'ok/../../x.txt': refused: a '..' component would escape the target folder",
    ]
    assert report.notes == [
        f"{z}: member '/abs/绝对.txt': absolute path made relative, written as 'abs/绝对.txt'",
        f"{z}: member 'C:/temp/盘符.txt': drive letter removed; absolute path made relative, written as 'temp/盘符.txt'",
    ]
    assert tree(out) == {"abs/绝对.txt": b"abs", "temp/盘符.txt": b"drive", "dir/反斜杠.txt": b"bs"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.zip", "out"]


def test_a_folder_entry_holding_bytes_is_a_problem_not_a_silent_folder(tmp_path: Path, capsys):
    # the attack: a member 'd/' carrying 11 bytes: a folder was made and the bytes dropped, exit 0, "extracted 1 file"
    z = write_zip(tmp_path / "d.zip", [gbk("d/", b"hello world"), gbk("小猫.txt", b"cat")])
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "out"), "--encoding", "gbk"]) == 1
    out = capsys.readouterr()
    assert out.err.splitlines()[0] == f"{z}: member 'd/': named as a folder but holds 11 bytes; not extracted"
    assert tree(tmp_path / "out") == {"小猫.txt": b"cat"}


def test_a_member_with_a_folders_mode_holding_bytes_is_a_problem_not_an_empty_folder(tmp_path: Path, capsys):
    # The attack: photo.jpg, 800 bytes, with a Unix folder's mode (0o40755) and no trailing '/': an empty folder
    # photo.jpg was made, its bytes dropped, exit 0
    z = write_zip(tmp_path / "m.zip", [gbk("photo.jpg", b"\xff" * 800, mode=0o40755), gbk("a.txt", b"a")])
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"{z}: member 'photo.jpg': a folder by its mode but holds 800 bytes; not extracted",
                   "1 member not extracted (see above)"]  # fmt: skip
    assert tree(tmp_path / "out") == {"a.txt": b"a"} and not (tmp_path / "out" / "photo.jpg").exists()


def test_a_folder_member_holding_bytes_is_no_class_in_place_as_none_once_extracted(tmp_path: Path, caplog):
    # the attack: 'bird/' holding 10 bytes (or 'bird' with a folder's mode): unzip-gbk makes no folder, the zip read
    # in place refused it as "class folder 'bird' holds no images", naming no cause
    for bird in (gbk("bird/", b"0123456789"), gbk("bird", b"0123456789", mode=0o40755)):
        z = write_zip(tmp_path / "b.zip", [gbk("cat/1.png", _png(10)), bird, gbk("dog/2.png", _png(50))])
        caplog.clear()
        with caplog.at_level("WARNING", logger="datakit"):
            ds = open_dataset(z)
        how = "named as a folder" if bird.name.endswith(b"/") else "a folder by its mode"
        assert caplog.messages == [f"{z}: member {bird.name.decode()!r}: {how} but holds 10 bytes; left out, as "
                                   "unzip-gbk leaves it out"]  # fmt: skip
        out = tmp_path / f"out-{len(bird.name)}"
        unzip(z, out)
        assert _samples(ds) == _samples(open_dataset(out)) == [("cat/1.png", "cat", 10), ("dog/2.png", "dog", 50)]


def test_a_zip_read_with_a_table_takes_its_names_encoding_as_zip_encoding(tmp_path: Path, capsys, caplog):
    # The attack: Polish CP1250 names (ambiguous to auto: cp437, cp850 or cp1250) read with a UTF-8 table: the
    # warning said "pass encoding= (--encoding)", which went to the table ("byte 0x81 is not valid cp1250 text"):
    # no way to name the zip's encoding with a table
    z = write_zip(tmp_path / "pl.zip", [ZipEntry("Łódź/1.png".encode("cp1250"), _png(10)),
                                        ZipEntry("Kraków/2.png".encode("cp1250"), _png(50))])  # fmt: skip
    table = tmp_path / "pl.csv"
    table.write_text("file,label\nŁódź/1.png,a\nKraków/2.png,b\n", encoding="utf-8")
    with caplog.at_level("WARNING", logger="datakit"):
        check_args = ["check", str(z), "--labels", str(table), "-q"]
        assert main(check_args) == 1
    assert f"{z}: names decoded as cp437, but ambiguous: cp437 or cp850 or cp1250; pass zip_encoding= " \
           "(--zip-encoding) to choose" in caplog.messages  # fmt: skip
    capsys.readouterr()
    ds = open_dataset(z, labels=table, zip_encoding="cp1250")
    assert [(ds.files[i], ds.classes[int(ds.targets[i])], int(ds[i][0][0, 0, 0])) for i in range(2)] == [
        ("Łódź/1.png", "a", 10), ("Kraków/2.png", "b", 50)]  # fmt: skip
    assert main([*check_args, "--zip-encoding", "cp1250"]) == 0
    out = tmp_path / "pl.lmdb"
    assert main(["pack-lmdb", str(z), str(out), "--labels", str(table), "--zip-encoding", "cp1250", "-q"]) == 0
    assert len(open_dataset(out)) == 2
    capsys.readouterr()
    # where it means nothing, or says otherwise than encoding= for a zip read alone: refused
    folder = tmp_path / "f"
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "1.png").write_bytes(_png(1))
    no_zip = "zip_encoding= (--zip-encoding) names the encoding of a zip's member names; {} is no zip: leave it out"
    with pytest.raises(UsageError, match="^" + re.escape(no_zip.format(folder)) + "$"):
        open_dataset(folder, zip_encoding="gbk")
    assert main(["stats", str(folder), "--zip-encoding", "gbk", "-q"]) == 2
    assert capsys.readouterr().err == f"datakit stats: error: {no_zip.format(folder)}\n"
    with pytest.raises(UsageError) as e:
        open_dataset(z, encoding="cp1250", zip_encoding="gbk")
    assert str(e.value) == (f"encoding='cp1250' and zip_encoding='gbk': both name the encoding of {z}'s member "
                            "names (read without a table); give one")  # fmt: skip
    assert len(open_dataset(z, zip_encoding="cp1250").classes) == 2


def test_symlink_members(tmp_path: Path):
    z = write_zip(
        tmp_path / "links.zip",
        [
            gbk("data/真.txt", b"real"),
            gbk("data/链接.txt", symlink_to=b"\xe7\x9c\x9f.txt"),  # UTF-8 target "真.txt", inside
            gbk("data/passwd", symlink_to=b"/etc/passwd"),
            gbk("data/up", symlink_to=b"../../outside"),
            gbk("data/up/x.txt", b"through the link?"),
            gbk("data/nul", symlink_to=b"a\x00b"),
        ],
    )
    out = tmp_path / "out"
    report = unzip(z, out)
    assert (out / "data" / "链接.txt").is_symlink() and (out / "data" / "链接.txt").read_bytes() == b"real"
    # the link gets its member's time, as the file does (it had the time of the extraction)
    stored = time.mktime((2024, 5, 17, 10, 30, 0, 0, 0, -1))
    assert os.lstat(out / "data" / "链接.txt").st_mtime == os.stat(out / "data" / "真.txt").st_mtime == stored
    assert not os.path.lexists(out / "data" / "passwd")
    # the refused link is not there, so the later member lands in a real folder inside the target
    assert (out / "data" / "up").is_dir() and not (out / "data" / "up").is_symlink()
    assert (out / "data" / "up" / "x.txt").read_bytes() == b"through the link?"
    assert report.problems == [
        f"{z}: member 'data/passwd': symlink to '/etc/passwd' points outside the target folder; not created",
        f"{z}: member 'data/up': symlink to '../../outside' points outside the target folder; not created",
        f"{z}: member 'data/nul': symlink to 'a\\x00b' holds a NUL byte, which no path can; not created",
    ]
    assert not (tmp_path / "outside").exists()


def test_bomb_ratio_refused_before_writing(tmp_path: Path):
    z = write_zip(tmp_path / "bomb.zip", [gbk("a.txt", b"fine"), gbk("全零数据.bin", bytes(20 << 20))])
    with pytest.raises(ArchiveError, match=r"refused, member '全零数据.bin' expands \d+:1 .* over the limit of 200:1"):
        unzip(z, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before even the target folder is made
    report = unzip(z, tmp_path / "out", max_ratio=5000)
    assert report.ok and (tmp_path / "out" / "全零数据.bin").stat().st_size == 20 << 20


def test_declared_total_refused(tmp_path: Path):
    z = write_zip(tmp_path / "big.zip", [gbk("a.bin", b"x" * 10, declared_size=10, method=0)] * 1)
    with pytest.raises(ArchiveError, match=r"members declare 10 bytes uncompressed, over the limit of 5"):
        unzip(z, tmp_path / "out", max_total=5)


def test_member_larger_than_declared_is_stopped(tmp_path: Path):
    z = write_zip(tmp_path / "lie.zip", [gbk("谎言.bin", b"y" * 5000, declared_size=100)])
    report = unzip(z, tmp_path / "out")
    assert report.problems == [f"{z}: member '谎言.bin': inflates past its declared size of 100 bytes; stopped"]
    assert list((tmp_path / "out").iterdir()) == []


def test_truncated_archive(gbk_zip: Path, tmp_path: Path):
    cut = tmp_path / "cut.zip"
    cut.write_bytes(gbk_zip.read_bytes()[:200])
    with pytest.raises(ArchiveError, match=r"cut.zip: not a zip archive, or truncated"):
        unzip(cut, tmp_path / "out")
    with pytest.raises(FileNotFoundError):
        unzip(tmp_path / "missing.zip", tmp_path / "out")


def test_encrypted_and_unsupported_members(tmp_path: Path):
    z = write_zip(
        tmp_path / "enc.zip",
        [gbk("秘密.txt", b"secret", encrypted=True), gbk("d64.bin", b"x", method=9), gbk("好.txt", b"ok")],
    )
    report = unzip(z, tmp_path / "out")
    assert report.problems == [
        f"{z}: member '秘密.txt': encrypted; datakit does not decrypt (use a tool that asks for the password)",
        f"{z}: member 'd64.bin': compression method 9 (Deflate64) is not supported",
    ]
    assert tree(tmp_path / "out") == {"好.txt": b"ok"}


def test_no_overwrite_and_rerun_finishes(gbk_zip: Path, tmp_path: Path):
    out = tmp_path / "out"
    (out / "训练").mkdir(parents=True)
    (out / "训练" / "狗 02.png").write_bytes(b"dog")  # identical: counts as done
    (out / "说明文件.txt").write_bytes(b"user's own edit")  # differs: kept
    from datakit.archive import _temp_name, read_members

    cat = next(m for m in read_members(gbk_zip)[0] if m.name == "训练/猫_01.jpg")
    assert (
        _temp_name("猫_01.jpg", cat) == f".猫_01.jpg.{zlib.crc32(f'{cat.crc}:{cat.file_size}'.encode()):08x}.unzip-part"
    )
    (out / "训练" / _temp_name("猫_01.jpg", cat)).write_bytes(b"cat-by")  # left by an interrupted run
    report = unzip(gbk_zip, out)
    assert report.unchanged == ["训练/狗 02.png"] and report.extracted == ["训练/猫_01.jpg"]
    assert report.problems == [
        f"{gbk_zip}: member '说明文件.txt': {out / '说明文件.txt'} exists and differs; not overwritten (use --overwrite)"
    ]
    assert (out / "说明文件.txt").read_bytes() == b"user's own edit"
    assert unzip(gbk_zip, out, overwrite=True).ok
    assert tree(out)["说明文件.txt"] == "标签说明".encode("gbk")
    assert not any(p.name.endswith(".unzip-part") for p in out.rglob("*"))


def test_members_and_files_named_like_temporary_parts_are_kept(tmp_path: Path):
    # The attack: a member named '.a.unzip-part' (the temporary name 'a' was written under) was
    # deleted as an interrupted run's leftover when 'a' came next, and the run still said ok.
    from datakit.archive import _temp_name, read_members

    first = write_zip(tmp_path / "probe.zip", [ZipEntry(name=b"a", data=b"other")])
    tag_name = _temp_name("a", read_members(first)[0][0])
    entries = [
        ZipEntry(name=n.encode(), data=f"precious {k}".encode()) for k, n in enumerate([".a.unzip-part", tag_name])
    ]
    z = write_zip(tmp_path / "t.zip", [*entries, ZipEntry(name=b"a", data=b"other")])
    out = tmp_path / "out"
    out.mkdir()
    (out / ".b.unzip-part").write_bytes(b"the user's own")
    report = unzip(z, out)
    assert report.ok and report.extracted == [".a.unzip-part", tag_name, "a"]
    assert tree(out) == {".a.unzip-part": b"precious 0", tag_name: b"precious 1", "a": b"other",
                         ".b.unzip-part": b"the user's own"}  # fmt: skip


def test_interrupted_write_leaves_no_partial_file(gbk_zip: Path, tmp_path: Path, monkeypatch):
    import datakit.archive as archive

    real = archive._extract_file
    calls = []

    def dies_on_second(zf, info, m, *args):
        calls.append(m.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(zf, info, m, *args)

    monkeypatch.setattr(archive, "_extract_file", dies_on_second)
    with pytest.raises(KeyboardInterrupt):
        unzip(gbk_zip, tmp_path / "out")
    monkeypatch.undo()
    assert tree(tmp_path / "out") == {"训练/猫_01.jpg": b"cat-bytes" * 50}
    report = unzip(gbk_zip, tmp_path / "out")
    assert report.ok and report.unchanged == ["训练/猫_01.jpg"] and len(report.extracted) == 2


def test_matches_zipfile_for_utf8_archives(tmp_path: Path):
    z = tmp_path / "py.zip"
    with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("文件夹/图片.txt", "内容")
        zf.writestr("plain.txt", "x")
    unzip(z, tmp_path / "a")
    with zipfile.ZipFile(z) as zf:
        zf.extractall(tmp_path / "b")
    assert tree(tmp_path / "a") == tree(tmp_path / "b")


def test_zip_reader_reads_in_place_and_pickles(gbk_zip: Path):
    reader = ZipReader(gbk_zip)
    assert reader.names() == ["训练/猫_01.jpg", "训练/狗 02.png", "说明文件.txt"]
    assert reader.read("训练/狗 02.png") == b"dog"
    assert reader.read("训练\\猫_01.jpg") == b"cat-bytes" * 50
    clone = pickle.loads(pickle.dumps(reader))
    assert clone._zf is None and clone.read("说明文件.txt") == "标签说明".encode("gbk")
    with pytest.raises(KeyError, match="no member named '没有.jpg'"):
        reader.read("没有.jpg")
    reader.close()


def test_zip_reader_pickled_before_direct_reads_still_reads(tmp_path: Path):
    # the attack: a ZipDataset pickled by the datakit before members were read at their offsets failed every read
    # with AttributeError ('ZipReader' object has no attribute '_table')
    import pickle

    z = tmp_path / "a.zip"
    z.write_bytes(build_zip([gbk("猫/1.txt", b"hello" * 50)]))
    reader = ZipReader(z)
    state = reader.__getstate__()
    for key in ("_table", "_fd", "_fd_pid", "_identity"):
        state.pop(key)
    old = ZipReader.__new__(ZipReader)
    old.__setstate__(state)
    assert old.read("猫/1.txt") == b"hello" * 50
    assert pickle.loads(pickle.dumps(reader)).read("猫/1.txt") == b"hello" * 50
    if os.path.isdir("/proc/self/fd"):  # readers dropped without close() leave no descriptor open
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(300):
            assert ZipReader(z).read("猫/1.txt") == b"hello" * 50
        assert len(os.listdir("/proc/self/fd")) <= before + 2
    # ... and quietly, as zipfile closes its own: no ResourceWarning, in this process or a forked one
    code = (f"import os, gc\nfrom datakit.archive import ZipReader\nr = ZipReader({str(z)!r}, 'gbk')\nr.read('猫/1.txt')\n"
            "pid = os.fork()\nif pid == 0:\n    r.read('猫/1.txt'); del r; gc.collect(); os._exit(0)\n"
            "os.waitpid(pid, 0)\ndel r\ngc.collect()\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-X", "dev", "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")


def test_zip_reader_corrupt_member(tmp_path: Path):
    data = bytearray(build_zip([gbk("损坏的文件.txt", b"hello world" * 100)]))
    data[40] ^= 0xFF  # inside the deflated data
    z = tmp_path / "bad.zip"
    z.write_bytes(bytes(data))
    with pytest.raises(ArchiveError, match=r"bad.zip: member '损坏的文件.txt': "):
        ZipReader(z).read("损坏的文件.txt")


# --- the command line --------------------------------------------------------------------------


def test_cli_list(gbk_zip: Path, capsys):
    assert unzip_gbk_main([str(gbk_zip), "-l"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("encoding: gbk (4 unflagged names written on DOS/Windows decode as gbk")
    assert "训练/猫_01.jpg" in out and "450" in out and out.rstrip().endswith("3 files, 461 bytes")


def test_cli_list_escapes_control_characters_and_sizes_must_be_positive(tmp_path: Path, capsys):
    # The attacks: a newline in a name forged a listing row ('../../etc/passwd'); --max-total 0 was accepted when
    # parsed and every archive then refused as "over the limit of 0".
    z = write_zip(tmp_path / "n.zip", [ZipEntry(b"a.txt\n    9999  2024-05-17 10:30  ../../etc/passwd", b"x")])
    assert unzip_gbk_main([str(z), "-l"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 5 and rows[3].startswith("1     2024-05-17 10:30  a.txt\\n    9999  2024-05-17 10:30  ../..")
    for size in ("0", "0.5"):
        with pytest.raises(SystemExit) as e:
            unzip_gbk_main([str(z), "--max-total", size])
        assert e.value.code == 2
        assert capsys.readouterr().err.endswith(f"error: argument --max-total: must be at least 1 byte, got '{size}'\n")


def test_list_refuses_what_only_extracting_heeds_and_a_ratio_under_one(gbk_zip: Path, tmp_path: Path, capsys):
    # The attack: `unzip-gbk X -l -d DIR --overwrite --max-ratio 5` took them all and listed a 1029:1 member the
    # ratio would refuse, exit 0; --max-ratio 0.5 was taken and every archive then refused ("limit of 0:1")
    assert unzip_gbk_main([str(gbk_zip), "-l", "-d", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err == ("unzip-gbk: error: -l lists the members and extracts nothing; -d is for "
                                       "extracting: leave it out, or leave out -l\n")  # fmt: skip
    assert unzip_gbk_main([str(gbk_zip), "-l", "--overwrite", "--max-ratio", "5", "--max-total", "1K"]) == 2
    assert capsys.readouterr().err == ("unzip-gbk: error: -l lists the members and extracts nothing; --overwrite, "
                                       "--max-ratio, --max-total are for extracting: leave them out, or leave out "
                                       "-l\n")  # fmt: skip
    assert not (tmp_path / "x").exists()
    assert unzip_gbk_main([str(gbk_zip), "-l", "-q"]) == 0  # -q: the listing without its summary line
    assert not capsys.readouterr().out.rstrip().endswith("3 files, 461 bytes")
    for ratio in ("0.5", "0.999"):
        with pytest.raises(SystemExit) as e:
            unzip_gbk_main([str(gbk_zip), "--max-ratio", ratio])
        assert e.value.code == 2
        assert capsys.readouterr().err.endswith(
            f"error: argument --max-ratio: must be at least 1 (a stored member expands 1:1), got {ratio}\n"
        )


def test_names_flagged_utf8_that_are_not_utf8_are_read_as_legacy_names(tmp_path: Path, capsys, caplog):
    # The attack: GBK names flagged UTF-8 by the tool that wrote them. Python's zipfile refuses the whole archive at
    # the first such name, and so did unzip-gbk ("make it again"), --encoding gbk included. Now the archive's flags
    # are ignored, every flagged name is read as an unflagged one would be, and a warning says so.
    z = write_zip(
        tmp_path / "g.zip",
        [ZipEntry(n.encode("gbk"), n.encode(), utf8_flag=True) for n in ("猫/小猫.jpg", "狗/大狗.jpg")]
        + [ZipEntry(b"readme.txt", b"r", utf8_flag=True)],
    )
    warning = (
        f"warning: {z}: a name flagged UTF-8 is not UTF-8 ('狗/大狗.jpg' in GBK, bytes b9 b7 2f b4 f3 b9 b7 2e 6a 70 "
        "67): the tool that made the archive set the flag on legacy names, so it is ignored: the 3 names flagged "
        "UTF-8 read as the others are (gbk)\n"
    )
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert captured.err == warning
    assert captured.out.startswith("extracted 3 files to ")
    assert tree(tmp_path / "out") == {"readme.txt": b"r", "猫/小猫.jpg": "猫/小猫.jpg".encode(),
                                      "狗/大狗.jpg": "狗/大狗.jpg".encode()}  # fmt: skip
    # --encoding now reaches them too; read in place, in this process and in a worker's (pickled)
    assert unzip_gbk_main([str(z), "-l", "--encoding", "big5"]) == 0
    assert "name from" in capsys.readouterr().out
    with caplog.at_level("WARNING", logger="datakit"):
        reader = ZipReader(z)
    assert [m.name for m in reader.members] == ["猫/小猫.jpg", "狗/大狗.jpg", "readme.txt"]
    assert caplog.messages == [warning[len("warning: ") : -1]]
    again = pickle.loads(pickle.dumps(reader))
    assert again.read("狗/大狗.jpg") == "狗/大狗.jpg".encode()
    reader.close()
    again.close()
    # prepended bytes (a self-extractor's stub) move every header: the flags are found all the same
    sfx = tmp_path / "sfx.zip"
    sfx.write_bytes(b"MZ" + bytes(98) + z.read_bytes())
    assert unzip_gbk_main([str(sfx), "-d", str(tmp_path / "sfx")]) == 0
    assert tree(tmp_path / "sfx") == tree(tmp_path / "out")
    assert capsys.readouterr().err == warning.replace(str(z), str(sfx))
    # damaged besides (the regression: errors of the second reading escaped as tracebacks): as any damaged archive
    bad = bytearray(z.read_bytes())
    cd = bad.rfind(b"PK\x01\x02")  # the last member's central entry: it needs ZIP version 6.4
    bad[cd + 6] = 64
    (tmp_path / "v.zip").write_bytes(bytes(bad))
    assert unzip_gbk_main([str(tmp_path / "v.zip"), "-l"]) == 1
    assert capsys.readouterr().err == (
        f"unzip-gbk: error: {tmp_path / 'v.zip'}: a member needs a newer ZIP format than this reader knows (zip file "
        "version 6.4); make the archive again with a common zip tool\n"
    )
    # UTF-8 names flagged beside one that is not: each is read in its own encoding, as in an unflagged archive
    m = write_zip(
        tmp_path / "m.zip",
        [ZipEntry("图片/猫.jpg".encode(), b"a", utf8_flag=True), ZipEntry("图片/狗.jpg".encode(), b"b", utf8_flag=True),
         ZipEntry("图片/鸟.jpg".encode("gbk"), b"c", utf8_flag=True)],
    )  # fmt: skip
    assert unzip_gbk_main([str(m), "-d", str(tmp_path / "m")]) == 0
    assert tree(tmp_path / "m") == {"图片/狗.jpg": b"b", "图片/猫.jpg": b"a", "图片/鸟.jpg": b"c"}
    assert capsys.readouterr().err.splitlines()[1] == (
        f"warning: {m}: 2 names are UTF-8 and the others gbk (written by two tools?): each is read in its own "
        "encoding; pass --encoding to choose"
    )


def test_a_zip_read_in_place_warns_of_ambiguous_names_and_takes_encoding(tmp_path: Path, caplog, capsys):
    # The attack: names that read as cp850 or cp437 were read in place without the warning unzip-gbk gives, and
    # open_dataset(zip, encoding=) and `datakit check ZIP --encoding` were ignored for them.
    from datakit.datasets import open_dataset

    z = write_zip(tmp_path / "amb.zip", [ZipEntry("Ærø/1.png".encode("cp850"), _png(1)), ZipEntry(b"x/2.png", _png(2))])
    with caplog.at_level("WARNING", logger="datakit"):
        assert open_dataset(z).classes == ["x", "Ærø"]
    assert (
        f"{z}: names decoded as cp850, but ambiguous: cp850 or cp437; pass encoding= (--encoding) to choose"
        in caplog.messages
    )
    assert open_dataset(z, encoding="cp437").classes == ["x", "Ær¢"]
    capsys.readouterr()
    assert main(["check", str(z), "--encoding", "cp437", "--workers", "1"]) == 0
    assert "Ær¢" in capsys.readouterr().out


def test_names_of_two_encodings_in_one_archive_are_each_read_in_their_own(tmp_path: Path, capsys, caplog):
    # The attacks: GBK names and unflagged UTF-8 names in one archive: no encoding reads both, cp866 "won" and every
    # name came out as box drawings, exit 0, without a word; later warned of, but every name still came out wrong.
    from datakit.datasets import open_dataset

    z = write_zip(tmp_path / "m.zip", [gbk("训练/猫/1.jpg", b"a"), ZipEntry("训练/狗/2.jpg".encode(), b"b"),
                                       gbk("训练/狗/3.jpg", b"c"), ZipEntry("训练/鸟/4.jpg".encode(), b"d")])  # fmt: skip
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert err == (f"warning: {z}: 2 names are UTF-8 and the others gbk (written by two tools?): each is read in "
                   "its own encoding; pass --encoding to choose\n")  # fmt: skip
    assert tree(tmp_path / "out") == {"训练/猫/1.jpg": b"a", "训练/狗/2.jpg": b"b", "训练/狗/3.jpg": b"c",
                                      "训练/鸟/4.jpg": b"d"}  # fmt: skip
    guess = detect_encoding(z)
    assert (guess.encoding, guess.mixed_utf8) == ("gbk", 2)
    assert guess.utf8_names == {"训练/狗/2.jpg".encode(), "训练/鸟/4.jpg".encode()}
    assert guess.reason.endswith("; 2 of the 4 non-ASCII names are UTF-8 (another tool wrote them), each read as UTF-8")
    with caplog.at_level("WARNING", logger="datakit"):
        assert open_dataset(z, root="训练").classes == ["狗", "猫", "鸟"]  # read in place: the same names
    assert f"{z}: 2 names are UTF-8 and the others gbk (written by two tools?): each is read in its own encoding; " \
           "pass encoding= (--encoding) to choose" in caplog.messages  # fmt: skip
    # all in one, as asked: the UTF-8 names, not GBK text, are refused by name, not written with U+FFFD in them
    capsys.readouterr()
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "one"), "--encoding", "gbk"]) == 1
    assert tree(tmp_path / "one") == {"训练/猫/1.jpg": b"a", "训练/狗/3.jpg": b"c"}
    assert capsys.readouterr().err.splitlines()[0] == (
        f"{z}: member '璁\ufffd缁\ufffd/鐙\ufffd/2.jpg': its name (bytes e8 ae ad e7 bb 83 2f e7 8b 97 2f 32 2e 6a 70 "
        "67) is not gbk text; not extracted (name the archive's encoding with --encoding, or leave it to auto)"
    )
    # Japanese: Shift-JIS names beside UTF-8 kana (no legacy encoding decodes the UTF-8 ones)
    names = [("写真/犬.jpg", "cp932"), ("資料/会議.jpg", "cp932"), ("ねこ/1.jpg", "utf-8"), ("データ/2.jpg", "utf-8")]
    jp = write_zip(tmp_path / "jp.zip", [ZipEntry(n.encode(e), b"x") for n, e in names])
    guess = detect_encoding(jp)
    assert (guess.encoding, guess.mixed_utf8) == ("cp932", 2)
    assert sorted(m.name for m in read_members(jp)[0]) == sorted(n for n, _ in names)


@pytest.mark.parametrize(("names", "mixed"), [(["锌/1.jpg", "锌/2.jpg", "铜/1.jpg", "铁/1.jpg"], 0),
                                             (["写/1.jpg", "写/2.jpg", "读/1.jpg"], 0),
                                             (["猫/猫a.jpg", "猫/1.jpg", "狗/1.jpg"], 1)])  # fmt: skip
def test_an_archive_of_one_encoding_stays_in_it_where_short_names_are_valid_utf8_too(tmp_path: Path, names, mixed,
                                                                                     capsys):  # fmt: skip
    # the attack: GBK 锌 (D0 BF) is also UTF-8 "п", 写 is "д", 猫 is "è": per-name reading took them for UTF-8
    # names of another tool, and one class became two ('п' beside '铜')
    z = write_zip(tmp_path / "one.zip", [gbk(n, b"x") for n in names])
    guess = detect_encoding(z)
    assert (guess.encoding, guess.utf8_names, guess.mixed_utf8) == ("gbk", frozenset(), mixed)
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "out")]) == 0
    assert sorted(tree(tmp_path / "out")) == sorted(names)
    # which it is, the names cannot tell: one encoding for all, and a warning (as for cp1251 beside UTF-8 below)
    # where a name reads better as UTF-8; a folder of one Cyrillic letter (п, д) does not, as one of è does not
    said = (f"warning: {z}: {mixed} names read better as UTF-8 than as gbk (written by two tools?, or by chance); all "
            "decoded as gbk, some names may be wrong; pass --encoding to choose\n")  # fmt: skip
    assert capsys.readouterr().err == (said if mixed else "")
    ru = [("кошка/1.jpg", "cp1251"), ("собака/1.jpg", "cp1251"), ("кошка/2.jpg", "utf-8"), ("собака/2.jpg", "utf-8")]
    z = write_zip(tmp_path / "ru.zip", [ZipEntry(n.encode(e), b"x") for n, e in ru])
    assert (detect_encoding(z).encoding, detect_encoding(z).mixed_utf8) == ("cp1251", 2)  # said, not silent
    plain = write_zip(tmp_path / "g.zip", [gbk("猫/1.jpg", b"a"), gbk("狗/2.jpg", b"b"), gbk("训练/鸟.jpg", b"c")])
    assert unzip_gbk_main([str(plain), "-d", str(tmp_path / "out2")]) == 0  # 猫 is valid UTF-8 too: no warning
    assert capsys.readouterr().err == "" and tree(tmp_path / "out2") == {"猫/1.jpg": b"a", "狗/2.jpg": b"b",
                                                                          "训练/鸟.jpg": b"c"}  # fmt: skip


def test_a_file_there_that_cannot_be_read_to_compare_is_named_as_such(tmp_path: Path, monkeypatch):
    # The attack: a re-run over a member extracted write-only (mode 0200), as a user without root's override:
    # "cannot be written: Permission denied", where it was the read for the comparison that failed.
    import datakit.archive as archive

    z = write_zip(tmp_path / "a.zip", [gbk("猫.txt", b"cat")])
    unzip(z, tmp_path / "out")

    def unreadable(*_):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(archive, "_same_file", unreadable)
    report = unzip(z, tmp_path / "out")
    assert report.problems == [f"{z}: member '猫.txt': {tmp_path / 'out' / '猫.txt'} exists and cannot be read to "
                               "compare with the member (permission denied); not overwritten (use --overwrite)"]  # fmt: skip
    assert unzip(z, tmp_path / "out", overwrite=True).extracted == ["猫.txt"]


def test_cli_extract_and_exit_codes(gbk_zip: Path, tmp_path: Path, capsys):
    out = tmp_path / "解压"
    assert main(["unzip", str(gbk_zip), "-d", str(out), "-q"]) == 0
    assert tree(out)["训练/狗 02.png"] == b"dog"
    (out / "说明文件.txt").write_bytes(b"changed")
    assert unzip_gbk_main([str(gbk_zip), "-d", str(out)]) == 1
    err = capsys.readouterr().err
    assert "exists and differs; not overwritten (use --overwrite)" in err
    assert unzip_gbk_main([str(tmp_path / "nope.zip")]) == 2
    assert capsys.readouterr().err == f"unzip-gbk: error: {tmp_path / 'nope.zip'}: no such file or folder\n"
    with pytest.raises(SystemExit) as e:
        unzip_gbk_main([str(gbk_zip), "--max-ratio", "-3"])
    assert e.value.code == 2


def _local(name: bytes, data: bytes, extra: bytes = b"") -> bytes:
    return struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 0, 0, 0x5821, zlib.crc32(data), len(data), len(data),
                       len(name), len(extra)) + name + extra  # fmt: skip


def _raw_zip(body: bytes, entries: list[tuple[bytes, bytes, int]]) -> bytes:
    """``body`` (local headers and data) with a central directory of (name, data, header offset) entries."""
    fmt = "<4sHHHHHHIIIHHHHHII"
    cd = b"".join(
        struct.pack(
            fmt, b"PK\x01\x02", 20, 20, 0, 0, 0, 0x5821, zlib.crc32(d), len(d), len(d), len(n), 0, 0, 0, 0, 0, off
        )
        + n
        for n, d, off in entries
    )
    return body + cd + struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(entries), len(entries), len(cd), len(body), 0)


def test_overlapping_members_refused_however_hidden(tmp_path: Path, capsys):
    # The attacks: (1) b's local header hidden inside a's local extra field, so both read the same data: the check
    # measured a member as 30 + name + data and missed it; (2) overlapping members with an empty one between
    # them in the file: the check compared neighbours only and skipped pairs with an empty member. Either way
    # the bytes are written once per member (a 180 KB archive wrote 400 MiB).
    payload = bytes(range(256)) * 16
    hdr_b = _local(b"b", payload)
    pad = bytes(len(payload) + 200)  # longer than the data: the old measure of a ended before b began
    extra = struct.pack("<HH", 0xCAFE, len(pad) + len(hdr_b)) + pad + hdr_b  # b's header ends a's extra field
    hdr_a = _local(b"a", payload, extra)
    hidden = _raw_zip(hdr_a + payload, [(b"a", payload, 0), (b"b", payload, len(hdr_a) - len(hdr_b))])
    hdr_e = _local(b"e", b"")
    inner = hdr_e + _local(b"b", payload)
    hdr_a = _local(b"a", inner + payload)
    between = _raw_zip(hdr_a + inner + payload, [(b"a", inner + payload, 0), (b"e", b"", len(hdr_a)),
                                                 (b"b", payload, len(hdr_a) + len(hdr_e))])  # fmt: skip
    for name, raw, pair in (("hidden.zip", hidden, "'a' and 'b'"), ("between.zip", between, "'a' and 'e'")):
        z = tmp_path / name
        z.write_bytes(raw)
        assert zipfile.ZipFile(z).read("b") == payload  # what an extractor that does not check writes
        capsys.readouterr()
        assert unzip_gbk_main([str(z), "-d", str(tmp_path / "out")]) == 1
        assert capsys.readouterr().err == (
            f"unzip-gbk: error: {z}: refused, members {pair} overlap in the file (a zip bomb technique)\n"
        )
        assert not (tmp_path / "out").exists()
        with pytest.raises(ArchiveError) as e:  # read in place too: one stream behind many names
            ZipReader(z)
        assert str(e.value) == f"{z}: refused, members {pair} overlap in the file (a zip bomb technique)"


def test_cli_bomb_and_truncated_are_data_errors(tmp_path: Path, capsys):
    z = write_zip(tmp_path / "bomb.zip", [gbk("全零数据.bin", bytes(20 << 20))])
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"unzip-gbk: error: {z}: refused, member '全零数据.bin' expands") and err.count("\n") == 1
    t = tmp_path / "t.zip"
    t.write_bytes(b"PK\x03\x04garbage")
    assert unzip_gbk_main([str(t)]) == 1


def test_console_script_runs(gbk_zip: Path, tmp_path: Path):
    exe = Path(sys.executable).with_name("unzip-gbk")
    res = subprocess.run([str(exe), str(gbk_zip), "-l"], capture_output=True, text=True)
    assert res.returncode == 0 and "说明文件.txt" in res.stdout and "Traceback" not in res.stderr
    _ = zlib  # the archives above are raw deflate streams built with zlib


# --- hostile archives: links, budgets, members that cannot be written ----------------------------


# ru_maxrss survives exec (a child forked from a large pytest reports the parent's peak); VmHWM does not
PEAK_RSS = (
    "import re\n"
    "def peak_rss_kib():\n"
    "    return int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\n"
)


def links_under(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): os.readlink(p) for p in sorted(root.rglob("*")) if p.is_symlink()}


def test_symlink_chain_through_a_link_to_dot_is_refused(tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.utime(outside, (1_000_000, 1_000_000))
    z = write_zip(
        tmp_path / "chain.zip",
        [
            gbk("x", symlink_to=b"."),
            gbk("x/x/x/x/esc", symlink_to=b"../../../../outside"),  # textually inside, really outside
            gbk("x/x/x/x/esc/", date_time=(2001, 1, 1, 0, 0, 0)),  # its time update must not touch outside/
            gbk("ok.txt", b"fine"),
        ],
    )
    out = tmp_path / "out"
    report = unzip(z, out)
    assert report.problems == [
        f"{z}: member 'x': {out / 'x'} is a folder of the archive's own members; not replaced by a link",
        f"{z}: member 'x/x/x/x/esc': {out / 'x/x/x/x/esc'} is a folder; not replaced by a link",
    ]
    assert os.stat(outside).st_mtime == 1_000_000 and list(outside.iterdir()) == []
    assert links_under(out) == {} and (out / "x/x/x/x/esc").is_dir() and (out / "ok.txt").read_bytes() == b"fine"


def test_link_to_dot_then_link_below_it(tmp_path: Path):
    z = write_zip(
        tmp_path / "chain.zip",
        [gbk("x", symlink_to=b"."), gbk("x/x/x/x/esc", symlink_to=b"../../../../outside"), gbk("x/y/f.txt", b"f")],
    )
    out = tmp_path / "out"
    report = unzip(z, out)
    # files first, then links: x/y/f.txt makes a real folder x, so the link x is refused, not followed,
    # and esc is made in real folders x/x/x/x, where its target is out/outside: inside, but nothing is there,
    # so it is removed (a folder scan would list it as an image it cannot read)
    assert report.problems == [
        f"{z}: member 'x': {out / 'x'} is a folder of the archive's own members; not replaced by a link",
        f"{z}: member 'x/x/x/x/esc': symlink to '../../../../outside' leads to nothing inside the target; removed",
    ]
    assert tree(out) == {"x/y/f.txt": b"f"} and links_under(out) == {}
    z2 = write_zip(tmp_path / "c2.zip", [gbk("x", symlink_to=b"."), gbk("x/x/x/x/esc", symlink_to=b"in.txt")])
    out2 = tmp_path / "out2"
    report = unzip(z2, out2)
    assert report.problems == [f"{z2}: member 'x/x/x/x/esc': 'x' is a symbolic link; nothing is written through links"]
    assert links_under(out2) == {"x": "."}
    assert not (tmp_path / "outside").exists()


def test_link_made_escaping_by_a_later_link_is_removed(tmp_path: Path):
    z = write_zip(
        tmp_path / "late.zip",
        [gbk("c/"), gbk("a", symlink_to=b"b/c/../.."), gbk("b", symlink_to=b".")],  # a is inside until b exists
    )
    out = tmp_path / "out"
    report = unzip(z, out)
    assert report.problems == [f"{z}: member 'a': symlink resolves outside the target through other links; removed"]
    assert links_under(out) == {"b": "."} and report.extracted == ["b"]


def test_existing_link_in_the_target_is_never_written_through(tmp_path: Path):
    victim = tmp_path / "victim"
    victim.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "data").symlink_to(victim)
    z = write_zip(tmp_path / "a.zip", [gbk("data/猫.jpg", b"cat"), gbk("其他.txt", b"x")])
    report = unzip(z, out)
    assert report.problems == [
        f"{z}: member 'data/猫.jpg': 'data' is a symbolic link; nothing is written through links"
    ]
    assert list(victim.iterdir()) == [] and (out / "其他.txt").read_bytes() == b"x"


def test_a_target_that_is_a_link_is_followed_as_the_folders_above_it_are(tmp_path: Path):
    # -d data, with data -> /mnt/big/data: the user's own choice, as -d data/sub through it is
    real = tmp_path / "big"
    (real / "sub").mkdir(parents=True)
    (tmp_path / "data").symlink_to(real)
    (real / "sub" / "inner").symlink_to(tmp_path / "elsewhere")  # below the target: never followed
    (tmp_path / "elsewhere").mkdir()
    z = write_zip(tmp_path / "a.zip", [gbk("猫.jpg", b"cat"), gbk("inner/狗.jpg", b"dog")])
    for dest in (tmp_path / "data" / "sub", tmp_path / "data"):
        report = unzip(z, dest, overwrite=True)
        assert (real / dest.relative_to(tmp_path / "data") / "猫.jpg").read_bytes() == b"cat"
    assert report.problems == [] and (real / "inner" / "狗.jpg").read_bytes() == b"dog"
    report = unzip(z, tmp_path / "data" / "sub", overwrite=True)
    assert report.problems == [
        f"{z}: member 'inner/狗.jpg': 'inner' is a symbolic link; nothing is written through links"
    ]
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_target_that_cannot_be_made_is_one_line(tmp_path: Path, capsys):
    z = write_zip(tmp_path / "a.zip", [gbk("猫.jpg", b"cat")])
    target = "/proc/datakit-no-such-folder"
    assert unzip_gbk_main([str(z), "-d", target]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"unzip-gbk: error: {target}: cannot be made a folder (") and err.count("\n") == 1


def test_a_second_extraction_into_the_same_folder_waits_its_turn(tmp_path: Path, capsys):
    # The attack: one archive extracted twice at once (a retried job): each removed the other's part file as if
    # an interrupted run had left it, and one renamed the other's half-written part into place.
    z = write_zip(tmp_path / "a.zip", [gbk("猫/1.jpg", b"cat" * 1000)])
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               "fd = os.open(sys.argv[1], os.O_RDONLY)\nfcntl.flock(fd, fcntl.LOCK_EX)\n"
                               "print('held', flush=True)\ntime.sleep(60)", str(out)],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        capsys.readouterr()
        assert unzip_gbk_main([str(z), "-d", str(out)]) == 1
        assert capsys.readouterr().err == (f"unzip-gbk: error: {out}: another extraction into this folder is running; "
                                           "wait for it to finish, then run this again (what it wrote counts as "
                                           "done)\n")  # fmt: skip
        assert list(out.iterdir()) == []
        # the attack: the same folder given through a folder still to make (out/sub/..): refused, but sub was left
        assert unzip_gbk_main([str(z), "-d", str(out / "sub" / "..")]) == 1
        assert "another extraction into this folder is running" in capsys.readouterr().err
        assert list(out.iterdir()) == []
    finally:
        holder.kill()
        holder.wait()
    assert unzip_gbk_main([str(z), "-d", str(out)]) == 0
    assert tree(out) == {"猫/1.jpg": b"cat" * 1000}


def test_two_extractions_started_at_once_into_a_new_folder_leave_one_to_finish(tmp_path: Path, monkeypatch, capsys):
    # The attack: `unzip-gbk a.zip -d out` twice at once, out not there yet. One run made out, the other took its
    # lock first; the first, refused, removed "the folders it made", out among them: the other then wrote into a
    # deleted folder, 400 lines of "folder 'd0' cannot be made: No such file or directory", and both exited 1.
    import fcntl

    import datakit.archive as archive

    z = write_zip(tmp_path / "a.zip", [gbk("猫/1.jpg", b"cat" * 1000)])
    out = tmp_path / "new" / "out"
    held: list[int] = []

    class Raced(archive._Tree):  # the other run takes the folder this one has just made, before this one locks it
        def __init__(self, root: Path) -> None:
            fd = os.open(root, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX)
            held.append(fd)
            super().__init__(root)

    monkeypatch.setattr(archive, "_Tree", Raced)
    capsys.readouterr()
    assert unzip_gbk_main([str(z), "-d", str(out)]) == 1
    assert capsys.readouterr().err == (f"unzip-gbk: error: {out}: another extraction into this folder is running; "
                                       "wait for it to finish, then run this again (what it wrote counts as done)\n")  # fmt: skip
    assert out.is_dir() and list(out.iterdir()) == []  # the other run's folder, and the one above it, still there
    os.close(held.pop())
    monkeypatch.undo()
    assert unzip_gbk_main([str(z), "-d", str(out)]) == 0  # what that other run would do
    assert tree(out) == {"猫/1.jpg": b"cat" * 1000}


def test_a_target_removed_during_the_extraction_stops_it_in_one_line(tmp_path: Path, monkeypatch, capsys):
    # The attack: the target folder deleted while an archive is extracted into it (rm -rf out in another terminal):
    # every member after that failed on its own line ("folder 'd1' cannot be made: No such file or directory").
    import shutil

    import datakit.archive as archive

    z = write_zip(tmp_path / "a.zip", [gbk(f"d{k}/{k}.jpg", b"x" * 100) for k in range(5)] + [gbk("top.jpg", b"t")])
    out = tmp_path / "out"
    real = archive._extract_file
    calls = []

    def remove_after_the_first(*args, **kw):
        calls.append(1)
        if len(calls) == 2:
            shutil.rmtree(out)
        return real(*args, **kw)

    monkeypatch.setattr(archive, "_extract_file", remove_after_the_first)
    capsys.readouterr()
    assert unzip_gbk_main([str(z), "-d", str(out)]) == 1
    assert capsys.readouterr().err == (f"unzip-gbk: error: {out}: the target folder was removed while the archive was "
                                       "extracted into it; nothing more was written (run it again)\n")  # fmt: skip
    assert not out.exists() and len(calls) == 2


def test_a_name_with_a_drive_letter_and_the_same_name_without_are_one_name_stored_twice(tmp_path: Path):
    # The attack: 'C:cat/1.png' then 'cat/1.png' with other bytes. unzip-gbk wrote the first and refused the second
    # ("the zip read in place refuses the name"), but ZipReader.read('cat/1.png') and a table's dataset read the
    # second copy: other pixels than the extracted folder's, without a word.
    z = tmp_path / "drive.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("C:cat/1.png", b"first")
        zf.writestr("cat/1.png", b"second")
        zf.writestr("dog/2.png", b"other")
    with pytest.raises(ArchiveError) as e:
        ZipReader(z).read("cat/1.png")
    assert str(e.value) == f"{z}: member 'cat/1.png' is in the archive twice: which copy is the image cannot be told"
    assert ZipReader(z).read("dog/2.png") == b"other"
    report = unzip(z, tmp_path / "out")
    assert tree(tmp_path / "out") == {"cat/1.png": b"first", "dog/2.png": b"other"} and len(report.problems) == 1


def test_an_empty_folder_member_is_the_users_after_a_clean_run(tmp_path: Path):
    # The attack: after a clean run, the folder member 'empty/' (no member below it) still carried the mark of a
    # killed run's folder: the next run of the same archive set its mode and time again (the user's 700 and time
    # lost, without --overwrite), and another archive whose member under it was refused deleted the folder.
    z = tmp_path / "a.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("empty/", b"")
        zf.writestr("cat/", b"")
        zf.writestr("cat/1.png", b"x")
    out = tmp_path / "out"
    assert unzip(z, out).problems == []
    for d in ("empty", "cat"):
        assert not any("datakit" in a for a in os.listxattr(out / d))
        os.chmod(out / d, 0o700)
        os.utime(out / d, (978307200, 978307200))
    assert unzip(z, out).problems == []
    for d in ("empty", "cat"):
        st = os.stat(out / d)
        assert (stat.S_IMODE(st.st_mode), st.st_mtime) == (0o700, 978307200), d
    refused = tmp_path / "b.zip"  # a member under it refused while written (its CRC-32): the folder, there before,
    with zipfile.ZipFile(refused, "w") as zf:  # stays
        zf.writestr("empty/1.png", b"hello world" * 10)
    data = bytearray(refused.read_bytes())
    data[data.find(b"hello")] ^= 1
    refused.write_bytes(bytes(data))
    assert unzip(refused, out).problems == [
        f"{refused}: member 'empty/1.png': data does not match its CRC-32 (corrupt)"
    ]
    assert (out / "empty").is_dir()


def test_a_forced_encoding_that_does_not_fit_a_name_is_refused_in_place_as_unzip_refuses_it(tmp_path: Path):
    # The attack: GBK names read with encoding="utf-8": unzip-gbk refused '狗/3.png' (its bytes are no UTF-8), but the
    # zip read in place made it a class named '��', one class more than the extracted folder has.
    z = write_zip(tmp_path / "enc.zip", [gbk("猫猫/1.png", b"1"), gbk("dog/2.png", b"2"), gbk("狗/3.png", b"3")])
    with pytest.raises(ArchiveError) as e:
        open_dataset(z, encoding="utf-8")
    assert str(e.value) == (f"{z}: member '\ufffd\ufffd/3.png': its name (bytes b9 b7 2f 33 2e 70 6e 67) is not utf-8 "
                            "text (as unzip-gbk refuses it); give the archive's encoding with encoding= (--encoding), "
                            "or leave it to auto")  # fmt: skip
    assert open_dataset(z).classes == ["dog", "狗", "猫猫"]


def test_a_class_folder_of_links_to_nothing_is_no_class_in_place_as_none_once_extracted(tmp_path: Path):
    # The attack: 'dog/' holding only a link loop (a.png -> b.png -> a.png), or a dead link: unzip-gbk removed the
    # links and the folder made for them, and the extracted folder opened as ['cat']; the zip read in place said
    # "class folder 'dog' holds no images" (it holds a.png and b.png), refusing the whole dataset.
    import shutil

    from datakit.io import encode_image
    from datakit.labels import LabelError

    png = encode_image(np.full((4, 4, 3), 9, np.uint8), ".png")
    for links in ([("dog/a.png", b"b.png"), ("dog/b.png", b"a.png")], [("dog/1.png", b"../cat/1.png/")]):
        z = write_zip(
            tmp_path / "l.zip", [gbk("cat/1.png", png), *[ZipEntry(n.encode(), symlink_to=t) for n, t in links]]
        )
        out = tmp_path / "out"
        unzip(z, out)
        assert open_dataset(out).classes == ["cat"]
        assert open_dataset(z).classes == ["cat"] and len(open_dataset(z)) == 1
        shutil.rmtree(out)
    listed = write_zip(
        tmp_path / "m.zip", [gbk("cat/1.png", png), gbk("dog/"), ZipEntry(b"dog/1.png", symlink_to=b"x/")]
    )
    with pytest.raises(LabelError, match=r"class folder 'dog' holds no images"):  # a folder member stays when extracted
        open_dataset(listed)


def test_a_file_that_appears_while_a_member_is_written_is_not_replaced(tmp_path: Path):
    from datakit.archive import ZipMember, _put_in_place, _Refused

    def member(data: bytes) -> ZipMember:
        return ZipMember(0, b"a", "a", "cp437", len(data), len(data), 0, 0, zlib.crc32(data), (2024, 1, 1, 0, 0, 0),
                         None, 0)  # fmt: skip

    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        (tmp_path / ".a.part").write_bytes(b"member")
        (tmp_path / "a").write_bytes(b"someone else's")
        with pytest.raises(_Refused) as e:
            _put_in_place(".a.part", "a", fd, False, "x/a", member(b"member"))
        assert str(e.value) == "x/a appeared while it was written and differs; not overwritten (use --overwrite)"
        assert (tmp_path / "a").read_bytes() == b"someone else's"
        assert _put_in_place(".a.part", "a", fd, True, "x/a", member(b"member")) is True
        assert (tmp_path / "a").read_bytes() == b"member" and not (tmp_path / ".a.part").exists()
        (tmp_path / ".b.part").write_bytes(b"b")
        assert _put_in_place(".b.part", "b", fd, False, "x/b", member(b"b")) is True
        assert sorted(os.listdir(tmp_path)) == ["a", "b"]
        # the same bytes put there meanwhile (another extraction of the same file): done, not "differs"
        (tmp_path / ".a.part").write_bytes(b"member")
        assert _put_in_place(".a.part", "a", fd, False, "x/a", member(b"member")) is False
        assert sorted(os.listdir(tmp_path)) == ["a", "b"]
    finally:
        os.close(fd)


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_stored_modes_pass_through_the_umask(tmp_path: Path, umask):
    # The attack: a member stored 0o4777 became 0o777 and a folder stored 0o1777 0o777: writable by every user
    z = write_zip(tmp_path / "m.zip", [ZipEntry(b"d/", mode=0o41777), ZipEntry(b"d/run.sh", b"x", mode=0o104777),
                                       ZipEntry(b"f.txt", b"y", mode=0o100666)])  # fmt: skip
    before = os.umask(umask)
    try:
        unzip(z, tmp_path / "out")
    finally:
        os.umask(before)
    modes = {n: os.stat(tmp_path / "out" / n).st_mode & 0o7777 for n in ("d", "d/run.sh", "f.txt")}
    assert modes == {"d": 0o777 & ~umask, "d/run.sh": 0o777 & ~umask, "f.txt": 0o666 & ~umask}


def test_folder_modes_restored_and_nothing_made_for_an_archive_refused_for_space(tmp_path: Path, monkeypatch):
    import datakit.archive as archive

    z = write_zip(tmp_path / "a.zip", [ZipEntry(b"priv/", mode=0o40700), ZipEntry(b"priv/a.txt", b"a"),
                                       ZipEntry(b"ro/", mode=0o40555), ZipEntry(b"ro/b.txt", b"b")])  # fmt: skip
    unzip(z, tmp_path / "out")
    assert {n: oct(os.stat(tmp_path / "out" / n).st_mode & 0o777) for n in ("priv", "ro")} == {
        "priv": "0o700",
        "ro": "0o755",  # never locking its owner out: unzip restores r-x, datakit keeps the owner's w
    }
    monkeypatch.setattr(archive.shutil, "disk_usage", lambda p: shutil_usage(0))
    with pytest.raises(ArchiveError) as e:
        unzip(z, tmp_path / "new" / "deep" / "target")
    block = os.statvfs(tmp_path).f_frsize  # 2 files of a byte (a block each), 2 folders (4 KiB each)
    assert str(e.value) == (f"{z}: refused, members need {2 * block + 8192} bytes on disk (each file in whole blocks "
                            f"of {block} bytes) but only 0 are free in {tmp_path / 'new' / 'deep' / 'target'}")  # fmt: skip
    assert not (tmp_path / "new").exists()


def shutil_usage(free: int):
    import collections

    return collections.namedtuple("usage", "total used free")(1 << 30, (1 << 30) - free, free)


def test_ratio_budget_covers_many_members_under_1mib(tmp_path: Path):
    zeros = bytes((1 << 20) - 1)
    z = write_zip(tmp_path / "many.zip", [gbk(f"零/{i:04d}.bin", zeros) for i in range(300)])
    assert z.stat().st_size < 600_000
    with pytest.raises(ArchiveError) as exc:
        unzip(z, tmp_path / "out")
    assert re.fullmatch(
        rf"{re.escape(str(z))}: refused, its 300 members expand \d+:1 in all \(\d+\.\d KiB -> 300\.0 MiB\), "
        r"over the limit of 200:1 \(zip bomb\?; raise it with --max-ratio\)",
        str(exc.value),
    )
    assert not (tmp_path / "out").exists()
    # many tiny, very compressible files that declare under 1 MiB in all are harmless
    small = write_zip(tmp_path / "small.zip", [gbk(f"t/{i}.txt", b"a" * 4000) for i in range(100)])
    assert unzip(small, tmp_path / "o2").ok


def test_members_that_cannot_be_written_are_reported_one_by_one(tmp_path: Path):
    long_dir = "目" * 90  # 270 bytes in UTF-8: over the 255-byte limit of a name
    name_250 = "n" * 246 + ".txt"
    z = write_zip(
        tmp_path / "odd.zip",
        [
            gbk("a", b"file a"),
            gbk("a/b", b"under a file"),
            ZipEntry(name=b"msdos", external_attr=0x10),  # a folder marked only by the DOS attribute
            ZipEntry(name=b"msdos/in.txt", data=b"in"),
            ZipEntry(name=f"{long_dir}/x.txt".encode(), data=b"x", utf8_flag=True),
            ZipEntry(name=name_250.encode(), data=b"long"),
            ZipEntry(name=b"m" * 256, data=b"too long"),
            gbk("好.txt", b"ok"),
        ],
    )
    out = tmp_path / "out"
    report = unzip(z, out)
    assert report.problems == [
        f"{z}: member 'a/b': 'a' is a file, not a folder",
        f"{z}: member '{long_dir}/x.txt': refused: folder '{long_dir}' is 270 bytes, over the 255-byte limit of "
        "file names",
        f"{z}: member '{'m' * 256}': refused: the name is 256 bytes, over the 255-byte limit of file names",
    ]
    assert tree(out) == {"a": b"file a", "msdos/in.txt": b"in", name_250: b"long", "好.txt": b"ok"}
    assert not any(p.name.endswith(".unzip-part") for p in out.iterdir())


def test_temp_name_fits_and_resume_cleans_it(tmp_path: Path):
    name = "名" * 84  # 252 bytes: the name fits, '.NAME.unzip-part' would not
    z = write_zip(tmp_path / "n.zip", [ZipEntry(name=name.encode(), data=b"payload", utf8_flag=True)])
    assert unzip(z, tmp_path / "out").extracted == [name]
    assert (tmp_path / "out" / name).read_bytes() == b"payload"


def test_cli_member_failures_exit_1_with_one_line_each(tmp_path: Path, capsys):
    z = write_zip(tmp_path / "odd.zip", [gbk("a", b"1"), gbk("a/b", b"2"), gbk("a/c", b"3"), gbk("好文件.txt", b"ok")])
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "out"), "-q"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"{z}: member 'a/b': 'a' is a file, not a folder", f"{z}: member 'a/c': 'a' is a file, not a folder"]
    assert (tmp_path / "out" / "好文件.txt").read_bytes() == b"ok"


def test_cli_dest_is_a_file_and_unknown_encoding_are_usage_errors(gbk_zip: Path, tmp_path: Path, capsys):
    f = tmp_path / "file.txt"
    f.write_text("x")
    assert unzip_gbk_main([str(gbk_zip), "-d", str(f)]) == 2
    assert capsys.readouterr().err == (
        f"unzip-gbk: error: {f}: exists and is not a folder (-d names the folder to extract into)\n"
    )
    with pytest.raises(SystemExit) as e:
        unzip_gbk_main([str(gbk_zip), "--encoding", "klingon"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.endswith(
        "unzip-gbk: error: argument --encoding: unknown encoding 'klingon': use auto, gbk, big5, cp932, utf-8...\n"
    )
    with pytest.raises(SystemExit) as e:
        main(["unzip", str(gbk_zip), "--encoding", "klingon", "-l"])
    assert e.value.code == 2


def test_zip_reader_budget_per_member(tmp_path: Path):
    z = write_zip(tmp_path / "r.zip", [gbk("零.bin", bytes(8 << 20)), gbk("小.txt", b"small" * 100)])
    reader = ZipReader(z)
    with pytest.raises(ArchiveError) as exc:
        reader.read("零.bin")
    assert re.fullmatch(
        rf"{re.escape(str(z))}: member '零.bin' expands \d+:1 \(\d+ -> 8388608 bytes\), over the limit of 200:1 "
        r"\(zip bomb\?; if it is none, extract the archive with unzip-gbk --max-ratio and use the folder, or raise "
        r"max_ratio= in Python\)",
        str(exc.value),
    )
    assert reader.read("小.txt") == b"small" * 100
    with pytest.raises(ArchiveError, match=r"member '小.txt' declares 500 bytes, over the limit of 100 per member"):
        ZipReader(z, max_member_size=100).read("小.txt")
    assert ZipReader(z, max_ratio=1e6).read("零.bin") == bytes(8 << 20)


def test_zip_reader_memory_stays_bounded_on_a_bomb(tmp_path: Path):
    """A member declaring 1 MiB whose data inflates to 512 MiB, its CRC-32 made for the first 1 MiB: reading
    stops past the declared size and refuses the member (it was read as whole before)."""
    payload = bytes(512 << 20)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = comp.compress(payload) + comp.flush()
    del payload
    name = "炸弹.bin".encode("gbk")
    crc = zlib.crc32(bytes(1 << 20))
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x5821, crc, len(body), 1 << 20, len(name), 0)
    central = struct.pack(
        "<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0x5821, crc, len(body), 1 << 20, len(name), 0, 0, 0, 0, 0, 0
    )
    data = local + name + body
    data += (
        central + name + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, 46 + len(name), len(local + name + body), 0)
    )
    z = tmp_path / "bomb.zip"
    z.write_bytes(data)
    code = (
        PEAK_RSS + "from datakit.archive import ZipReader\n"
        f"r = ZipReader({str(z)!r}, max_ratio=1e9)\n"
        "try:\n    r.read('炸弹.bin')\nexcept ValueError as e:\n    print(e)\n"
        "print(peak_rss_kib())"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = res.stdout.splitlines()
    assert lines[0] == f"{z}: member '炸弹.bin': inflates past its declared size of 1048576 bytes; stopped"
    assert int(lines[1]) < 300_000  # KiB: far below the 512 MiB the data would inflate to


def test_zip_dataset_refuses_escaping_names_and_bombs(tmp_path: Path):
    from datakit.datasets import ZipDataset
    from datakit.errors import SampleError

    z = write_zip(tmp_path / "esc.zip", [gbk("猫/1.jpg", b"x"), gbk("../../逃逸/x.jpg", b"y")])
    with pytest.raises(ArchiveError) as exc:
        ZipDataset(z)
    assert str(exc.value) == (
        f"{z}: member '../../逃逸/x.jpg': refused: a '..' component would escape the target folder (as unzip "
        "refuses it)"
    )
    # an absolute name or a drive letter: read where unzip-gbk writes it, inside (before: refused here, extracted
    # there, so the zip and its folder were two datasets); '9:cat' is no drive letter
    z2 = write_zip(tmp_path / "abs.zip", [gbk("猫/1.jpg", b"x"), gbk("/狗/2.jpg", b"y"), gbk("C:鸟/3.jpg", b"z"),
                                          gbk("9:cat/4.jpg", b"w")])  # fmt: skip
    ds = ZipDataset(z2)
    assert (ds.classes, ds.files.tolist()) == (["9:cat", "狗", "猫", "鸟"], ["9:cat/4.jpg", "狗/2.jpg", "猫/1.jpg",
                                                                          "鸟/3.jpg"])  # fmt: skip
    deep = write_zip(tmp_path / "deep.zip", [gbk("猫/1.jpg", b"x"), gbk("狗/" + "a/" * 2100 + "2.jpg", b"y")])
    with pytest.raises(ArchiveError, match=r"refused: the name is 4209 bytes, longer than a path may be \(4095\) "):
        ZipDataset(deep)
    z3 = write_zip(tmp_path / "bomb.zip", [gbk("猫/1.jpg", bytes(4 << 20)), gbk("狗/2.jpg", b"y")])
    ds = ZipDataset(z3)
    assert ds.classes == ["狗", "猫"]
    with pytest.raises(SampleError, match=rf"sample 1: {re.escape(str(z3))}: member '猫/1.jpg' expands \d+:1"):
        ds[1]
    with pytest.raises(SampleError, match=r"member '猫/1.jpg' declares 4194304 bytes, over the limit of 1000"):
        ZipDataset(z3, max_member_size=1000, max_ratio=1e9)[1]


def test_folder_dataset_follows_links_as_imagefolder_does_and_always_ends(tmp_path: Path, capsys):
    # The attack: train/外 -> ../outside (a class kept elsewhere, as split folders are often made) was skipped with
    # a log line, so every class after it had another index than ImageFolder's; a broken link too.
    from torchvision.datasets import ImageFolder

    from datakit.cli import main
    from datakit.datasets import open_dataset
    from datakit.io import imwrite
    from datakit.testing import synthetic_image

    outside = tmp_path / "outside"
    outside.mkdir()
    imwrite(outside / "3.png", synthetic_image(8, 8))
    root = tmp_path / "数据"
    (root / "猫").mkdir(parents=True)
    (root / "狗").mkdir()
    imwrite(root / "猫" / "1.png", synthetic_image(8, 8))
    imwrite(root / "狗" / "2.png", synthetic_image(8, 8))
    (root / "猫" / "loop").symlink_to(".")  # x -> . : walked once, the scan ends
    (root / "猫" / "out").symlink_to(outside)
    (root / "狗" / "same.png").symlink_to(root / "猫" / "1.png")
    (root / "狗" / "gone.png").symlink_to(tmp_path / "nothing.png")  # broken: a sample that fails, named
    (root / "外").symlink_to(outside)  # a class folder kept elsewhere
    ds = open_dataset(root)
    assert ds.classes == ["外", "狗", "猫"]
    assert [ds.files[i] for i in range(len(ds))] == ["外/3.png", "狗/2.png", "狗/gone.png", "狗/same.png", "猫/1.png",
                                                     "猫/out/3.png"]  # fmt: skip
    (root / "猫" / "loop").unlink()  # ImageFolder walks a loop until the path is too long
    tv = ImageFolder(str(root))
    assert [(os.path.relpath(p, root), t) for p, t in tv.samples] == [
        (ds.files[i], int(ds.targets[i])) for i in range(len(ds))
    ]
    with pytest.raises(ValueError, match=r"sample 2: .*gone\.png"):
        ds[2]
    capsys.readouterr()
    assert main(["check", str(root), "--workers", "1"]) == 1
    assert "gone.png" in capsys.readouterr().err


def test_a_folder_reached_by_two_links_is_walked_by_both_as_imagefolder_walks_it(tmp_path: Path):
    # The attack: cat/link1 -> pool and cat/link2 -> pool, cat/zz -> sub beside cat/sub: each real folder was walked
    # once, by whichever path the directory order gave first, so 5 samples where ImageFolder has 8 (index 4 was
    # dog/c.png there, cat/link2/p2.png in ImageFolder). The zip of that folder, read in place, alike.
    from torchvision.datasets import ImageFolder

    from datakit.datasets import open_dataset

    root = tmp_path / "data"
    for rel, v in (("cat/a.png", 10), ("cat/sub/b.png", 20), ("dog/c.png", 30), ("pool/p1.png", 40),
                   ("pool/p2.png", 50)):  # fmt: skip
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(_png(v))
    (root / "pool").rename(tmp_path / "pool")
    for name, to in (("link1", tmp_path / "pool"), ("link2", tmp_path / "pool"), ("zz", "sub")):
        (root / "cat" / name).symlink_to(to)
    want = ["cat/a.png", "cat/link1/p1.png", "cat/link1/p2.png", "cat/link2/p1.png", "cat/link2/p2.png",
            "cat/sub/b.png", "cat/zz/b.png", "dog/c.png"]  # fmt: skip
    tv = ImageFolder(str(root))
    assert [(os.path.relpath(p, root), t) for p, t in tv.samples] == [(f, int(f == "dog/c.png")) for f in want]
    ds = open_dataset(root)
    assert [(ds.files[i], int(ds.targets[i]), int(ds[i][0][0, 0, 0])) for i in range(len(ds))] == [
        (f, int(f == "dog/c.png"), v) for f, v in zip(want, (10, 40, 50, 40, 50, 20, 20, 30))]  # fmt: skip
    z = write_zip(tmp_path / "d.zip", [gbk("cat/a.png", _png(10)), gbk("cat/sub/b.png", _png(20)),
                                       gbk("dog/c.png", _png(30)), gbk("pool/p1.png", _png(40)),
                                       gbk("pool/p2.png", _png(50)), gbk("cat/link1", symlink_to=b"../pool"),
                                       gbk("cat/link2", symlink_to=b"../pool"), gbk("cat/zz", symlink_to=b"sub")])  # fmt: skip
    unzip(z, tmp_path / "out")
    assert _samples(open_dataset(tmp_path / "out")) == _samples(open_dataset(z))
    assert [f for f, _, _ in _samples(open_dataset(z)) if f.startswith("cat/")] == want[:-1]


def test_links_from_a_few_places_to_one_large_pool_are_walked_as_imagefolder_walks_them(tmp_path: Path):
    # The regression round: cat/a, cat/b and cat/c linking to one pool of 5001 folders (one a video) made 15003
    # walks, refused as a lattice by a limit that counted only the walks beyond one a folder
    from torchvision.datasets import ImageFolder

    from datakit.datasets import open_dataset

    pool = tmp_path / "pool"
    for k in range(5001):
        (pool / f"v{k:05d}").mkdir(parents=True)
    (pool / "v00000" / "f.png").write_bytes(_png(40))
    root = tmp_path / "data"
    (root / "cat").mkdir(parents=True)
    (root / "dog").mkdir()
    (root / "cat" / "1.png").write_bytes(_png(10))
    (root / "dog" / "1.png").write_bytes(_png(50))
    for name in "abc":
        (root / "cat" / name).symlink_to(pool)
    want = ["cat/1.png", "cat/a/v00000/f.png", "cat/b/v00000/f.png", "cat/c/v00000/f.png", "dog/1.png"]
    assert [os.path.relpath(p, root) for p, _ in ImageFolder(str(root)).samples] == want
    assert open_dataset(root).files.tolist() == want


@pytest.mark.parametrize("where", ["folder", "zip"])
def test_links_reaching_the_same_folders_by_ever_more_paths_are_refused(tmp_path: Path, where: str):
    # The attack: 16 folders, each holding two links to the next: 2**16 paths to the last one, each walked as
    # ImageFolder would walk it (a scan that in practice never ends); refused in one line once the walks pass 10000
    # and 100 a folder (three links to one pool of 5000 folders, 15000 walks, are read as ImageFolder reads them)
    from datakit.datasets import open_dataset
    from datakit.labels import LabelError

    entries = [gbk("cat/1.png", _png(10)), gbk("dog/2.png", _png(50))]
    for k in range(16):
        entries += [gbk(f"cat/f{k}/a", symlink_to=f"../f{k + 1}".encode()),
                    gbk(f"cat/f{k}/b", symlink_to=f"../f{k + 1}".encode())]  # fmt: skip
    entries.append(gbk("cat/f16/3.png", _png(30)))
    z = write_zip(tmp_path / "lattice.zip", entries)
    src = z
    if where == "folder":
        unzip(z, tmp_path / "out")
        src = tmp_path / "out"
    with pytest.raises(LabelError) as e:
        open_dataset(src)
    assert str(e.value) == (f"{src}: class folder 'cat': links reach the same folders by more than 100 paths each "
                            "(each would be walked, as ImageFolder walks them); remove the links that lead to "
                            "folders reached already")  # fmt: skip


def _png(value: int) -> bytes:
    from datakit.io import encode_image

    return encode_image(np.full((4, 4, 3), value, np.uint8), ".png")


def _samples(ds) -> list[tuple[str, str, int]]:
    return [(ds.files[i], ds.classes[int(ds.targets[i])], int(ds[i][0][0, 0, 0])) for i in range(len(ds))]


@pytest.mark.parametrize(
    ("links", "want"),
    [
        ([("cat2", b"cat")], [("cat/1.png", "cat", 10), ("cat2/1.png", "cat2", 10), ("dog/2.png", "dog", 50)]),
        ([("cat/more", b"../dog")], [("cat/1.png", "cat", 10), ("cat/more/2.png", "cat", 50), ("dog/2.png", "dog", 50)]),
        ([("dog/l1.png", b"l2.png"), ("dog/l2.png", b"../cat/1.png")],
         [("cat/1.png", "cat", 10), ("dog/2.png", "dog", 50), ("dog/l1.png", "dog", 10), ("dog/l2.png", "dog", 10)]),
        ([("dog/l.png", b"nosuch/../../cat/1.png")], [("cat/1.png", "cat", 10), ("dog/2.png", "dog", 50)]),
        ([("dog/l.png", b"../cat/1.png/")], [("cat/1.png", "cat", 10), ("dog/2.png", "dog", 50)]),
        ([("cat/again", b".")], [("cat/1.png", "cat", 10), ("dog/2.png", "dog", 50)]),
        # the docs' own example: cat2 -> cat holds cat's link cat/more too, as the folder scan walks it
        ([("cat2", b"cat"), ("cat/more", b"../dog")],
         [("cat/1.png", "cat", 10), ("cat/more/2.png", "cat", 50), ("cat2/1.png", "cat2", 10),
          ("cat2/more/2.png", "cat2", 50), ("dog/2.png", "dog", 50)]),
        ([("dog/up", b"..")], [("cat/1.png", "cat", 10), ("dog/2.png", "dog", 50), ("dog/up/cat/1.png", "dog", 10)]),
        # links unzip-gbk refuses before making their folder: no empty class 'bird' read in place either
        ([("bird/1.png", b"/etc/passwd")], [("cat/1.png", "cat", 10), ("dog/2.png", "dog", 50)]),
        ([("bird/1.png", b"../../up.png")], [("cat/1.png", "cat", 10), ("dog/2.png", "dog", 50)]),
        # one name stored twice as a link: the later is the one made (the earlier is not), refused or not
        ([("bird/1.png", b"../cat/1.png"), ("bird/1.png", b"/etc/passwd")],
         [("cat/1.png", "cat", 10), ("dog/2.png", "dog", 50)]),
        ([("dog/l.png", b"../cat/1.png"), ("dog/l.png", b"../../up.png")],
         [("cat/1.png", "cat", 10), ("dog/2.png", "dog", 50)]),
        ([("dog/l.png", b"/etc/passwd"), ("dog/l.png", b"../cat/1.png")],
         [("cat/1.png", "cat", 10), ("dog/2.png", "dog", 50), ("dog/l.png", "dog", 10)]),
        ([("dog/l.png", b"../cat/1.png"), ("dog/l.png", b"2.png")],
         [("cat/1.png", "cat", 10), ("dog/2.png", "dog", 50), ("dog/l.png", "dog", 50)]),
        # the attack: a link through a folder unzip-gbk removes (made for a link to nothing alone) was left
        # dangling on disk (a sample that cannot be read), and read in place as cat's image
        ([("bird/l.png", b"nosuch.png"), ("dog/m.png", b"../bird/../cat/1.png")],
         [("cat/1.png", "cat", 10), ("dog/2.png", "dog", 50)]),
        ([("bird/sub/l.png", b"../nosuch.png"), ("cow", b"bird/sub"), ("dog/m.png", b"../cow/../cat/1.png")],
         [("cat/1.png", "cat", 10), ("dog/2.png", "dog", 50)]),
    ],
)  # fmt: skip
def test_a_zip_read_in_place_gives_the_samples_of_the_folder_it_extracts_to(tmp_path: Path, links, want):
    # The attack: links to a class folder, to a folder inside a class, chains of links and links to nothing made
    # the zip read in place and the extracted folder differ in classes and samples (every later index shifted).
    from datakit.datasets import open_dataset

    z = write_zip(tmp_path / "d.zip", [gbk("cat/1.png", _png(10)), gbk("dog/2.png", _png(50)),
                                       *(gbk(n, symlink_to=t) for n, t in links)])  # fmt: skip
    unzip(z, tmp_path / "out")
    assert _samples(open_dataset(tmp_path / "out")) == want
    assert _samples(open_dataset(z)) == want


def test_a_folder_beside_the_one_holding_every_image_is_a_class_when_a_link_gives_it_images(tmp_path: Path):
    # the attack: every image member under dog/ (read as the one folder wrapping the classes), and a/3.PNG -> ..
    # beside it: the extracted folder's classes are a and dog (a's image through the link), the zip in place read
    # dog/ as the wrapper and refused its empty sub-folder: "class folder 'dog/cat' holds no images"
    from datakit.datasets import open_dataset

    z = write_zip(tmp_path / "d.zip", [gbk("dog/dog/x/2.png", _png(50)), gbk("dog/cat/x", b"notes"),
                                       gbk("a/3.PNG", symlink_to=b"..")])  # fmt: skip
    unzip(z, tmp_path / "out")
    want = [("a/3.PNG/dog/dog/x/2.png", "a", 50), ("dog/dog/x/2.png", "dog", 50)]
    assert _samples(open_dataset(tmp_path / "out")) == want
    assert _samples(open_dataset(z)) == want
    # without the link, dog/ wraps the classes, as when a folder is zipped
    plain = write_zip(tmp_path / "p.zip", [gbk("dog/dog/x/2.png", _png(50)), gbk("dog/cat/1.png", _png(10)),
                                           gbk("README.txt", b"notes")])  # fmt: skip
    assert _samples(open_dataset(plain)) == [("cat/1.png", "cat", 10), ("dog/x/2.png", "dog", 50)]


def test_zip_with_a_table_reads_what_the_folder_does(tmp_path: Path):
    # The attacks: a table writing ./cat/1.png or dog/../dog/2.png, a member stored as ./cat/1.png, a table naming a
    # link member: the folder read them all, the zip in place refused; a name stored twice was read as its last copy.
    from datakit.datasets import open_dataset

    z = write_zip(tmp_path / "d.zip", [gbk("./cat/1.png", _png(10)), gbk("dog//2.png", _png(50)),
                                       gbk("dog/3.png", symlink_to=b"../cat/1.png"), gbk("img/sub/4.png", _png(70)),
                                       gbk("img/sub/5.png", _png(90)), gbk("img/d", symlink_to=b"sub")])  # fmt: skip
    table = tmp_path / "labels.csv"
    table.write_text("file,label\n./cat/1.png,cat\ndog/../dog/2.png,dog\ndog/3.png,dog\nimg/d/5.png,dog\n"
                     "img/nosuch/../sub/4.png,cat\n", encoding="utf-8")  # fmt: skip
    unzip(z, tmp_path / "out")
    got = [(int(x[0, 0, 0]), y) for x, y in open_dataset(z, labels=table)]
    assert got == [(int(x[0, 0, 0]), y) for x, y in open_dataset(tmp_path / "out", labels=table)] == [
        (10, 0), (50, 1), (10, 1), (90, 1), (70, 0)]  # fmt: skip
    twice = write_zip(tmp_path / "twice.zip", [gbk("cat/1.png", _png(10)), gbk("dog/2.png", _png(50)),
                                               gbk("cat/1.png", _png(200))])  # fmt: skip
    table.with_name("t2.csv").write_text("file,label\ncat/1.png,cat\ndog/2.png,dog\n", encoding="utf-8")
    ds = open_dataset(twice, labels=table.with_name("t2.csv"))
    with pytest.raises(ValueError) as e:
        ds[0]
    assert str(e.value) == (f"sample 0: {twice}: member 'cat/1.png' is in the archive twice: which copy is the image "
                            f"cannot be told ({table.with_name('t2.csv')}, line 2)")  # fmt: skip


def test_a_zipped_folder_with_a_table_naming_files_inside_it(tmp_path: Path, capsys):
    # The attack: 数据集.zip holds 数据集/cat/1.png (a zipped folder); read alone its wrapping folder is the root,
    # but with labels= naming cat/1.png it was refused, with no hint and no way to say root= inside a zip.
    from datakit.datasets import open_dataset

    z = write_zip(tmp_path / "数据集.zip", [gbk("数据集/cat/1.png", _png(10)), gbk("数据集/dog/2.png", _png(50))])
    table = tmp_path / "labels.csv"
    table.write_text("file,label\ncat/1.png,cat\ndog/2.png,dog\n", encoding="utf-8")
    ds = open_dataset(z, labels=table)
    assert [(int(x[0, 0, 0]), y) for x, y in ds] == [(10, 0), (50, 1)]
    assert ds.name(0) == f"{z}:数据集/cat/1.png"
    capsys.readouterr()
    assert main(["check", str(z), "--labels", str(table), "--workers", "1"]) == 0
    # zipped by macOS Finder: __MACOSX beside the folder is no second top folder
    z = write_zip(tmp_path / "mac.zip", [gbk("数据集/cat/1.png", _png(10)), gbk("__MACOSX/数据集/cat/._1.png", b"x"),
                                         gbk("数据集/dog/2.png", _png(50))])  # fmt: skip
    assert [(int(x[0, 0, 0]), y) for x, y in open_dataset(z, labels=table)] == [(10, 0), (50, 1)]


def test_a_link_then_a_later_file_of_the_same_name_the_file_wins(tmp_path: Path):
    # The attack: cat/2.png as a link, then again as a real image: links are made last, so with --overwrite the
    # earlier link replaced the later file (two files: the later wins).
    z = write_zip(tmp_path / "lt.zip", [gbk("cat/1.png", _png(10)), gbk("cat/2.png", symlink_to=b"1.png"),
                                        gbk("cat/2.png", _png(99))])  # fmt: skip
    report = unzip(z, tmp_path / "out", overwrite=True)
    assert report.notes[-1] == f"{z}: member 'cat/2.png': a later member has the same name; the link is not made"
    assert not (tmp_path / "out" / "cat" / "2.png").is_symlink()
    assert (tmp_path / "out" / "cat" / "2.png").read_bytes() == _png(99)


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_file_then_a_later_link_of_the_same_name_the_file_stays(tmp_path: Path, overwrite: bool):
    # The attack: dog/a.png as a real image, then again as a link to ../cat/1.png: links are made last, so with
    # --overwrite the link replaced the file this same run had written (exit 0): a dog sample became the cat image,
    # while the zip read in place gave the dog image; without --overwrite the message sent the user to it. The file
    # stays, as the zip read in place reads it.
    z = write_zip(tmp_path / "fl.zip", [gbk("cat/1.png", _png(10)), gbk("dog/a.png", _png(99)),
                                        gbk("dog/a.png", symlink_to=b"../cat/1.png")])  # fmt: skip
    report = unzip(z, tmp_path / "out", overwrite=overwrite)
    assert report.problems == []
    assert report.notes[-1] == f"{z}: member 'dog/a.png': an earlier member has the same name; the link is not made"
    assert not (tmp_path / "out" / "dog" / "a.png").is_symlink()
    assert (tmp_path / "out" / "dog" / "a.png").read_bytes() == _png(99)
    assert _samples(open_dataset(z)) == _samples(open_dataset(tmp_path / "out")) == [
        ("cat/1.png", "cat", 10), ("dog/a.png", "dog", 99)]  # fmt: skip
    report = unzip(z, tmp_path / "out", overwrite=overwrite)  # again: the same
    assert report.problems == [] and (tmp_path / "out" / "dog" / "a.png").read_bytes() == _png(99)


def test_a_file_refused_then_a_link_of_the_same_name_the_link_is_not_made(tmp_path: Path):
    # The attack: dog/3.png encrypted (refused), then dog/3.png -> ../cat/1.png: the link was made, a readable
    # image on disk where the zip read in place has the encrypted file (a sample that fails). A later file of the
    # name is not written either.
    z = write_zip(tmp_path / "el.zip", [gbk("cat/1.png", _png(10)), gbk("dog/2.png", _png(50)),
                                        gbk("dog/3.png", _png(99), encrypted=True),
                                        gbk("dog/3.png", symlink_to=b"../cat/1.png"),
                                        gbk("dog/4.png", b"x", method=9), gbk("dog/4.png", _png(70))])  # fmt: skip
    report = unzip(z, tmp_path / "out")
    assert report.problems == [
        f"{z}: member 'dog/3.png': encrypted; datakit does not decrypt (use a tool that asks for the password)",
        f"{z}: member 'dog/4.png': compression method 9 (Deflate64) is not supported",
        f"{z}: member 'dog/4.png': in the archive twice, and the first copy is not extracted (said above); not "
        "written either (the zip read in place reads the first)",
    ]
    assert report.notes[-1] == f"{z}: member 'dog/3.png': an earlier member has the same name; the link is not made"
    assert sorted(os.listdir(tmp_path / "out" / "dog")) == ["2.png"]
    with pytest.raises(ArchiveError, match=r"member 'dog/4.png' is in the archive twice: which copy is the image "):
        open_dataset(z)
    z = write_zip(tmp_path / "e.zip", [gbk("cat/1.png", _png(10)), gbk("dog/2.png", _png(50)),
                                       gbk("dog/3.png", _png(99), encrypted=True),
                                       gbk("dog/3.png", symlink_to=b"../cat/1.png")])  # fmt: skip
    ds = open_dataset(z)  # the encrypted file, as unzip-gbk leaves its place: a sample that fails, not cat's image
    assert ds.files.tolist() == ["cat/1.png", "dog/2.png", "dog/3.png"]
    with pytest.raises(SampleError, match=r"^sample 2: .*e\.zip: member 'dog/3\.png': encrypted; datakit does not "):
        ds[2]


def test_a_link_with_an_empty_target_is_named_as_such(tmp_path: Path):
    z = write_zip(tmp_path / "e.zip", [gbk("cat/1.png", _png(10)), gbk("cat/2.png", symlink_to=b"")])
    report = unzip(z, tmp_path / "out")
    assert report.problems == [f"{z}: member 'cat/2.png': a symlink with an empty target, which no link can have; "
                               "not created"]  # fmt: skip


# --- honest name decoding -------------------------------------------------------------------------


def test_western_oem_names_are_not_cyrillic(tmp_path: Path):
    names = ["Müller/Größe.txt", "Präsentation März.pptx"]
    z = write_zip(tmp_path / "de.zip", [ZipEntry(name=n.encode("cp437"), data=b"x") for n in names])
    guess = detect_encoding(z)
    assert guess.encoding == "cp437" and guess.ambiguous == ()
    assert guess.reason.startswith("2 unflagged names written on DOS/Windows decode as cp437 with plausibility")
    assert guess.reason.endswith("; cp850 reads them the same")
    unzip(z, tmp_path / "out")
    assert tree(tmp_path / "out") == {n: b"x" for n in names}


@pytest.mark.parametrize(
    ("encoding", "made_by", "names"),
    [
        # the libarchive test archives test_read_format_zip_filename_{koi8r,cp866,cp932}.zip, rebuilt
        ("koi8_r", (3 << 8) | 20, ["привет", "ПРИВЕТ"]),
        ("cp866", (3 << 8) | 20, ["ПРИВЕТ", "привет"]),
        ("cp932", (11 << 8) | 20, ["表だよ/一覧表.txt", "表だよ/漢字.txt"]),
        ("cp1251", (11 << 8) | 20, ["Отчет_2023.docx", "Фотографии/Москва_лето.jpg"]),
        ("cp949", 20, ["사진/고양이.jpg", "새 폴더/이미지.png"]),
        ("big5", 20, ["資料/貓咪照片.jpg", "測試圖片.png"]),
    ],
)
def test_detects_cyrillic_japanese_korean_names(tmp_path: Path, encoding: str, made_by: int, names: list[str]):
    mode = 0o100644 if made_by >> 8 == 3 else None
    z = write_zip(
        tmp_path / "x.zip", [ZipEntry(name=n.encode(encoding), data=b"1", made_by=made_by, mode=mode) for n in names]
    )
    guess = detect_encoding(z)
    assert (guess.encoding, guess.ambiguous) == (encoding, ())
    assert [m.name for m in read_members(z)[0]] == names


def test_short_gbk_name_that_is_valid_utf8_is_still_gbk(tmp_path: Path):
    assert "通知".encode("gbk").decode("utf-8") == "\u0368\u05aa"  # valid UTF-8: combining marks
    z = write_zip(tmp_path / "x.zip", [gbk("通知.txt", b"1")])
    assert detect_encoding(z).encoding == "gbk"


def test_close_candidates_are_reported_as_ambiguous(tmp_path: Path, capsys):
    z = write_zip(tmp_path / "x.zip", [ZipEntry(name="Straße.txt".encode("cp437"), data=b"1", made_by=(19 << 8))])
    guess = detect_encoding(z)
    assert guess.ambiguous == ("cp1252", "cp437")
    assert guess.reason.startswith("ambiguous: cp1252 or cp437; pass --encoding (1 unflagged names written on Unix;")
    assert unzip_gbk_main([str(z), "-l"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0].startswith("encoding: cp1252 (ambiguous: cp1252 or cp437; pass --encoding")
    assert captured.err == (
        f"warning: {z}: names decoded as cp1252, but ambiguous: cp1252 or cp437; pass --encoding to choose\n"
    )
    assert unzip_gbk_main([str(z), "-l", "--encoding", "cp437"]) == 0
    assert "Straße.txt" in capsys.readouterr().out


def test_unicode_path_field_checked_against_the_local_header_name(tmp_path: Path):
    """As libarchive's test_read_format_zip_7075_utf8_paths.zip: the fields' CRCs are of the local
    header names ("File 2 - xx.txt"); the central directory names were changed afterwards."""
    z = tmp_path / "7075.zip"
    local_names = [b"File 1.txt", b"File 2 - xx.txt", b"File 3 - xx.txt"]
    central_names = [b"File 1.txt", "File 2 - ö.txt".encode("cp437"), "File 3 - ä.txt".encode("cp437")]
    unicode = [None, "File 2 - ö.txt", "File 3 - ä.txt"]
    out, central = bytearray(), bytearray()
    for local, cname, uname in zip(local_names, central_names, unicode):
        extra = unicode_path_extra(local, uname) if uname else b""
        crc = zlib.crc32(b"data")
        offset = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0x5821, crc, 4, 4, len(local), len(extra))
        out += local + extra + b"data"
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII",
            0x02014B50,
            20,
            20,
            0,
            0,
            0,
            0x5821,
            crc,
            4,
            4,
            len(cname),
            len(extra),
            0,
            0,
            0,
            0x20,
            offset,
        )
        central += cname + extra
    z.write_bytes(bytes(out + central) + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 3, 3, len(central), len(out), 0))
    members, _ = read_members(z)
    assert [(m.name, m.name_source) for m in members] == [
        ("File 1.txt", "ascii"),
        ("File 2 - ö.txt", "unicode path field"),
        ("File 3 - ä.txt", "unicode path field"),
    ]
    # and the members are read under those names, extracted and in place (zipfile refused the local name that
    # differs from the central one)
    report = unzip(z, tmp_path / "out")
    assert report.problems == [] and tree(tmp_path / "out") == {n: b"data" for n in ("File 1.txt", "File 2 - ö.txt",
                                                                                       "File 3 - ä.txt")}  # fmt: skip
    assert ZipReader(z).read("File 3 - ä.txt") == b"data"


def test_msdos_directory_attribute(tmp_path: Path):
    """libarchive's test_read_format_zip_msdos.zip, rebuilt: folders marked only by attribute 0x10."""
    z = write_zip(
        tmp_path / "msdos.zip",
        [
            ZipEntry(name=b"abc", method=0),
            ZipEntry(name=b"def", method=0, external_attr=0x10),
            ZipEntry(name=b"def/foo", method=0),
            ZipEntry(name=b"ghi/", method=0),
            ZipEntry(name=b"jkl", method=0, external_attr=0x10),
        ],
    )
    assert [(m.name, m.is_dir) for m in read_members(z)[0]] == [
        ("abc", False),
        ("def", True),
        ("def/foo", False),
        ("ghi/", True),
        ("jkl", True),
    ]
    report = unzip(z, tmp_path / "out")
    assert report.ok and report.extracted == ["abc", "def/foo"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir()) == ["def", "ghi", "jkl"]


def test_accuracy_on_the_name_corpus():
    """Three-name archives of every language and legacy encoding, on both corpora: never wrong
    while claiming certainty, and right in at least 95% of them (tools/bench_encoding.py measures more)."""
    import random

    from datakit.filenames import guess_encoding
    from datakit.testing import CORPUS_ENCODINGS, HELD_OUT_CORPUS, NAME_CORPUS, TYPICAL_HOST

    rng = random.Random(0)
    right = wrong = total = 0
    for corpus in (NAME_CORPUS, HELD_OUT_CORPUS):
        for lang, encodings in CORPUS_ENCODINGS.items():
            for enc in encodings:
                pool = [n for n in corpus[lang] if n == n.encode(enc, "replace").decode(enc)]
                for _ in range(20):
                    names = rng.sample(pool, 3)
                    raws = [n.encode(enc) for n in names]
                    guess = guess_encoding(raws, [TYPICAL_HOST.get(enc, 0)] * 3)
                    ok = [r.decode(guess.encoding) for r in raws] == names
                    right += ok
                    wrong += not ok and not guess.ambiguous
                    total += 1
    assert wrong == 0
    assert right / total >= 0.95


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_bzip2_and_lzma_members_extract_and_read_exactly(tmp_path: Path, method: int):
    rng = np.random.default_rng(0)
    big = bytes(range(256)) * 12 + rng.integers(0, 256, 3 << 20, dtype=np.uint8).tobytes()  # over one read
    small = "标签说明".encode("gbk")
    z = tmp_path / "m.zip"
    with zipfile.ZipFile(z, "w", compression=method) as zw:
        zw.writestr("data/big.bin", big)
        zw.writestr("cls/x.txt", small)
    report = unzip(z, tmp_path / "out")
    assert report.ok and report.extracted == ["data/big.bin", "cls/x.txt"]
    assert tree(tmp_path / "out") == {"cls/x.txt": small, "data/big.bin": big}
    assert ZipReader(z).read("data/big.bin") == big
    data = bytearray(z.read_bytes())
    data[zipfile.ZipFile(z).getinfo("cls/x.txt").header_offset + 30 + len("cls/x.txt") + 12] ^= 0xFF
    z.write_bytes(bytes(data))  # damaged compressed data: one line, never a traceback
    why = "Invalid data stream" if method == zipfile.ZIP_BZIP2 else "Corrupt input data"
    assert unzip(z, tmp_path / "again").problems == [f"{z}: member 'cls/x.txt': compressed data is damaged ({why})"]


_BOMB = """
import sys
from datakit.archive import ZipReader, unzip
report = unzip(sys.argv[1], sys.argv[2])
try:
    ZipReader(sys.argv[1]).read("bomb.bin")
except Exception as exc:
    print(type(exc).__name__, exc)
print(report.problems)
peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))  # this process's own peak
print(int(peak.split()[1]) // 1024 < 200)
"""


def test_a_bzip2_bomb_under_the_ratio_check_is_stopped_without_inflating(tmp_path: Path):
    if not os.path.exists("/proc/self/status"):
        pytest.skip("the peak memory is read from /proc")
    # The attack: 300 MiB of zeros in bzip2 take about 250 bytes; declared as 1000 bytes the member
    # is below the size where the ratio is checked, and zipfile inflated each chunk of bzip2 data
    # whole: the 300 MiB were in memory before any size check ran (2.5 GB from a 1 KB archive).
    import bz2

    payload = bz2.compress(b"\0" * (300 << 20), 9)
    name = b"bomb.bin"
    local = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 46, 0, 12, 0, 0x21, 0, len(payload), 1000, len(name), 0)
    central = struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 0x031E, 46, 0, 12, 0, 0x21, 0, len(payload), 1000,
                          len(name), 0, 0, 0, 0, 0o100644 << 16, 0) + name  # fmt: skip
    body = local + name + payload
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 1, 1, len(central), len(body), 0)
    z = tmp_path / "bomb.zip"
    z.write_bytes(body + central + end)
    script = tmp_path / "bomb.py"
    script.write_text(_BOMB)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, str(script), str(z), str(tmp_path / "out")], capture_output=True,
                         text=True, env=env, timeout=120)  # fmt: skip
    stopped = f"{z}: member 'bomb.bin': inflates past its declared size of 1000 bytes; stopped"
    assert out.stdout.splitlines() == [f"ArchiveError {stopped}", str([stopped]), "True"], out.stderr[-2000:]


def test_an_archive_replaced_after_opening_is_refused_not_read_by_old_places(tmp_path: Path):
    # The attack: data.zip replaced between epochs (rsync, mv new.zip data.zip): a new worker reopened it by path
    # and read members by their places in the old listing, so cat/1.bmp gave dog's bytes.
    def write(order: list[tuple[str, bytes]]) -> None:
        with zipfile.ZipFile(tmp_path / "new.zip", "w") as zf:
            for name, data in order:
                zf.writestr(name, data)
        os.replace(tmp_path / "new.zip", tmp_path / "data.zip")

    write([("cat/1.bmp", b"cat" * 10), ("dog/1.bmp", b"dog" * 20)])
    reader = ZipReader(tmp_path / "data.zip")
    assert reader.read("cat/1.bmp") == b"cat" * 10
    write([("dog/1.bmp", b"dog" * 20), ("cat/1.bmp", b"cat" * 10)])
    worker = pickle.loads(pickle.dumps(reader))  # a new worker: opens the path again
    with pytest.raises(ArchiveError) as e:
        worker.read("cat/1.bmp")
    assert str(e.value) == (f"{tmp_path / 'data.zip'}: the archive changed since it was opened (member 'cat/1.bmp' "
                            "is not where it was); open the dataset again")  # fmt: skip
    assert ZipReader(tmp_path / "data.zip").read("cat/1.bmp") == b"cat" * 10


@pytest.mark.parametrize(
    ("extra", "want"),
    [
        # a file then a link of the same name: unzip keeps the file (the link is refused), so does the zip in place
        ([gbk("cat/1.png", symlink_to=b"../dog/2.png")], [("cat/1.png", "cat", 10), ("dog/2.png", "dog", 50)]),
        # a link cat2 -> cat, then a real cat2/x.png: links are made last, so cat2 is the real folder
        ([gbk("cat2", symlink_to=b"cat"), gbk("cat2/x.png", _png(99))],
         [("cat/1.png", "cat", 10), ("cat2/x.png", "cat2", 99), ("dog/2.png", "dog", 50)]),
        # cat/1.png, then a file named cat: the first is kept
        ([gbk("cat", b"not an image")], [("cat/1.png", "cat", 10), ("dog/2.png", "dog", 50)]),
        # a link target with backslashes names nothing on the extracted folder (removed there)
        ([gbk("dog/x.png", symlink_to=b"..\\cat\\1.png")], [("cat/1.png", "cat", 10), ("dog/2.png", "dog", 50)]),
        # '1:b.png' is no drive letter: a link to a real file
        ([gbk("cat/1:b.png", _png(30)), gbk("cat/x.png", symlink_to=b"1:b.png")],
         [("cat/1.png", "cat", 10), ("cat/1:b.png", "cat", 30), ("cat/x.png", "cat", 30), ("dog/2.png", "dog", 50)]),
    ],
)  # fmt: skip
def test_a_name_stored_twice_or_an_odd_link_reads_as_the_extracted_folder(tmp_path: Path, extra, want):
    # The attack: the zip read in place took the later of two members of one name (cat/1.png decoding to dog's
    # pixels, class cat missing) and resolved link texts by other rules than the extracted folder's links.
    from datakit.datasets import open_dataset

    z = write_zip(tmp_path / "d.zip", [gbk("cat/1.png", _png(10)), gbk("dog/2.png", _png(50)), *extra])
    unzip(z, tmp_path / "out")
    assert _samples(open_dataset(tmp_path / "out")) == want
    assert _samples(open_dataset(z)) == want


@pytest.mark.parametrize(
    ("member", "why"),
    [
        (gbk("../bird", symlink_to=b"cat"), "a '..' component would escape the target folder"),
        (gbk("../evil/", b""), "a '..' component would escape the target folder"),
        (gbk("cat/evil\x00.png", _png(1)), "the name contains a NUL byte"),
    ],
)
def test_a_folder_link_or_nul_name_unzip_refuses_is_refused_in_place(tmp_path: Path, member, why):
    # The attack: link and folder members named with '..' were normalised in place ('../bird' -> 'bird'): a class
    # 'bird' appeared and every index shifted, where unzip-gbk refuses them.
    from datakit.datasets import open_dataset

    z = write_zip(tmp_path / "d.zip", [gbk("cat/1.png", _png(10)), gbk("dog/2.png", _png(50)), member])
    with pytest.raises(ArchiveError) as e:
        open_dataset(z)
    name = member.name.decode("gbk")
    assert str(e.value) == f"{z}: member {name!r}: refused: {why} (as unzip refuses it)"


def test_a_link_member_inflating_past_its_declared_size_is_stopped(tmp_path: Path):
    # The attack: a link declaring 12 bytes whose data inflates to 1 GiB: extraction read it with ZipFile.read,
    # which inflates the whole stream first (2 GiB of memory for a 1 KB archive).
    link = zipfile.ZipInfo("cat/x.png")
    link.create_system, link.external_attr = 3, (0o120777 << 16)
    link.compress_type = zipfile.ZIP_BZIP2  # a ZipInfo keeps its own method, not the archive's
    with zipfile.ZipFile(tmp_path / "d.zip", "w", zipfile.ZIP_BZIP2) as zf:  # bzip2 inflates all it is given
        zf.writestr("cat/1.png", _png(10))
        zf.writestr(link, b"1.png" + b"\0" * (256 << 20))
    raw = bytearray((tmp_path / "d.zip").read_bytes())
    # declare 5 bytes in both headers (the local header's size fields at 22, the central one's at 24)
    at = raw.find(b"PK\x03\x04", raw.find(b"cat/x.png") - 40)
    struct.pack_into("<I", raw, at + 22, 5)
    cd = raw.rfind(b"PK\x01\x02")
    struct.pack_into("<I", raw, cd + 24, 5)
    (tmp_path / "d.zip").write_bytes(bytes(raw))
    code = (
        "import sys, tracemalloc\nfrom datakit.archive import unzip\ntracemalloc.start()\n"
        "r = unzip(sys.argv[1], sys.argv[2])\nprint(tracemalloc.get_traced_memory()[1] >> 10)\n"
        "print(*r.problems, sep='\\n')"
    )  # the peak of what Python allocated, in KiB
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "d.zip"), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    peak_kib, *problems = proc.stdout.splitlines()
    assert int(peak_kib) < (16 << 10), proc.stderr  # 256 MiB inflated at once before
    assert problems == [
        f"{tmp_path / 'd.zip'}: member 'cat/x.png': inflates past its declared size of 5 bytes; stopped"
    ]


def _deflate(data: bytes) -> bytes:
    comp = zlib.compressobj(6, zlib.DEFLATED, -15)
    return comp.compress(data) + comp.flush()


_NOISE = random.Random(5).randbytes(4000)


def _hand_zip(members: list[tuple[bytes, bytes, int, bytes, int]]) -> bytes:
    """(name, data, method, stored bytes, local header flags) each, headers written by hand."""
    out, cd = bytearray(), bytearray()
    for name, data, method, comp, lflags in members:
        off, crc = len(out), zlib.crc32(data)
        out += struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 63, lflags, method, 0, 0x21, crc, len(comp), len(data),
                           len(name), 0) + name + comp  # fmt: skip
        cd += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 63, 63, 0, method, 0, 0x21, crc, len(comp),
                          len(data), len(name), 0, 0, 0, 0, 0x20, off) + name  # fmt: skip
    n = len(members)
    return bytes(out + cd + struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, n, n, len(cd), len(out), 0))


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        # LZMA (method 14) whose properties header is damaged: a traceback, and the members after it lost
        ((b"cat/2.jpg", b"two", 14, struct.pack("<BBH", 9, 20, 5) + b"\xff" * 5 + bytes(20), 0),
         "compressed data is damaged (LZMA: Invalid or unsupported options)"),
        # a local header flagged UTF-8 over a GBK name: a bare codec error that stopped the whole extraction
        (("狗/2.jpg".encode("gbk"), b"two", 0, b"two", 0x800),
         "its local header marks the name UTF-8, but the name is not UTF-8 (a damaged or hand-made archive)"),
        # a deflate stream that runs on past the declared 100 bytes, its CRC-32 made for the first 100: zipfile cut
        # the stream there and the 100 bytes passed, as if the member were whole
        ((b"cat/2.bin", b"y" * 100, 8, _deflate(b"y" * 5000), 0), "inflates past its declared size of 100 bytes; stopped"),
        # a deflate stream cut in half, the central directory whole: it was called a CRC mismatch
        ((b"cat/2.bin", _NOISE, 8, _deflate(_NOISE)[: len(_NOISE) // 2], 0),
         "data is truncated (its compressed stream ends before its end marker)"),
        # bytes that are no deflate stream at all
        ((b"cat/2.bin", b"two", 8, b"\xff" * 8, 0), "compressed data is damaged (Error -3 while decompressing data: "
         "invalid block type)"),
    ],
)  # fmt: skip
def test_a_damaged_member_is_one_line_and_the_others_are_extracted(tmp_path: Path, capsys, bad, why):
    name = bad[0].decode("gbk")
    z = tmp_path / "a.zip"
    z.write_bytes(_hand_zip([("猫/1.jpg".encode("gbk"), b"one", 0, b"one", 0), bad,
                            ("猫/3.jpg".encode("gbk"), b"three", 0, b"three", 0)]))  # fmt: skip
    # (names of one character, 猫, are ambiguous without --encoding: a warning line)
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "out"), "-q", "--encoding", "gbk"]) == 1
    assert capsys.readouterr().err.splitlines() == [f"{z}: member {name!r}: {why}"]  # -q: the count left out
    assert sorted(p.name for p in (tmp_path / "out" / "猫").iterdir()) == ["1.jpg", "3.jpg"]
    with pytest.raises(ArchiveError) as e:
        ZipReader(z).read(name)
    assert str(e.value) == f"{z}: member {name!r}: {why}"


def test_a_rerun_needs_room_only_for_the_files_not_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # The attack: re-running a finished (or kill -9'd) extraction on a nearly full disk was refused: the free-space
    # check counted the files already there and identical.
    import collections
    import shutil

    z = tmp_path / "a.zip"
    with zipfile.ZipFile(z, "w") as zf:
        for i in range(3):
            zf.writestr(f"cat/{i}.bin", bytes([i]) * 1000)
    unzip(z, tmp_path / "out")
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 500, 500))
    report = unzip(z, tmp_path / "out")
    assert (report.extracted, report.unchanged) == ([], ["cat/0.bin", "cat/1.bin", "cat/2.bin"])
    (tmp_path / "out" / "cat" / "1.bin").unlink()
    with pytest.raises(ArchiveError) as e:  # one file missing: its 1000 bytes (a block) do not fit in 500
        unzip(z, tmp_path / "out")
    block = os.statvfs(tmp_path).f_frsize
    assert str(e.value) == (f"{z}: refused, members need {block} bytes on disk (each file in whole blocks of {block} "
                            f"bytes) but only 500 are free in {tmp_path / 'out'}")  # fmt: skip


def test_many_small_files_are_counted_in_the_blocks_they_take(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # the attack: 2000 files of 1500 bytes (3 MB) passed the free-space check on a disk with 6 MiB free, then filled
    # it at the 1536th file (4 KiB blocks: 8 MB), 464 'No space left' lines and a half-extracted folder left
    import collections
    import shutil

    z = tmp_path / "small.zip"
    with zipfile.ZipFile(z, "w") as zf:
        for i in range(20):
            zf.writestr(f"cat/{i}.jpg", os.urandom(1500))
    block = os.statvfs(tmp_path).f_frsize
    usage = collections.namedtuple("usage", "total used free")
    free = 20 * 1500 + 4096 + 100  # the bytes and the folder fit; the blocks do not (where a block is over 1.5 KB)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 10**9 - free, free))
    if block < 2048:
        pytest.skip(f"blocks of {block} bytes")
    with pytest.raises(ArchiveError) as e:
        unzip(z, tmp_path / "out")
    assert str(e.value) == (f"{z}: refused, members need {20 * block + 4096} bytes on disk (each file in whole blocks "
                            f"of {block} bytes) but only {free} are free in {tmp_path / 'out'}")  # fmt: skip
    assert not (tmp_path / "out").exists()


def test_a_control_character_in_a_name_is_escaped_in_every_message(tmp_path: Path, capsys):
    # The attack: "exists and differs" printed the path raw: a newline in a member's name forged a line of its own.
    name = "cat/a\nunzip-gbk: error: forged\x1b[31m.png"
    z = write_zip(tmp_path / "a.zip", [ZipEntry(name.encode(), b"new", utf8_flag=True)])
    (tmp_path / "out" / "cat").mkdir(parents=True)
    (tmp_path / "out" / "cat" / "a\nunzip-gbk: error: forged\x1b[31m.png").write_bytes(b"old")
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "out"), "-q"]) == 1
    shown = "cat/a\\nunzip-gbk: error: forged\\x1b[31m.png"
    assert capsys.readouterr().err.splitlines() == [
        f"{z}: member {name!r}: {tmp_path / 'out'}/{shown} exists and differs; not overwritten (use --overwrite)"
    ]


def _central_entries(data: bytes) -> list[int]:
    """Offsets of the central directory entries of an archive."""
    out, i = [], -1
    while (i := data.find(b"PK\x01\x02", i + 1)) >= 0:
        out.append(i)
    return out


def test_a_compressed_size_the_file_cannot_hold_is_refused_before_the_ratio_is_read(tmp_path: Path):
    # 300 MiB of zeros in 300 members, refused for their ratio; one more member whose directory entry claims
    # 4 GiB of compressed bytes made the whole archive's ratio look harmless, and the bomb was written
    zeros = bytes((1 << 20) - 1)
    data = bytearray(
        build_zip([*(gbk(f"零/{i:04d}.bin", zeros) for i in range(300)), gbk("readme.txt", b"x", method=0)])
    )
    last = _central_entries(bytes(data))[-1]
    struct.pack_into("<I", data, last + 20, 0xFFFFFFF0)
    z = tmp_path / "lie.zip"
    z.write_bytes(data)
    with pytest.raises(ArchiveError) as exc:
        unzip(z, tmp_path / "out")
    assert str(exc.value) == (f"{z}: member 'readme.txt' declares 4294967280 compressed bytes, past the end of the "
                              f"{len(data)}-byte file (a damaged or forged directory)")  # fmt: skip
    assert not (tmp_path / "out").exists()
    with pytest.raises(ArchiveError) as exc2:
        ZipReader(z)
    assert str(exc2.value) == str(exc.value)


@pytest.mark.parametrize("offset", [-100, 2**63 + 5])
def test_a_member_offset_outside_the_file_is_one_line(tmp_path: Path, capsys, offset: int):
    if offset < 0:  # the end record says the directory starts 100 bytes later: zipfile reads every offset 100 less
        data = bytearray(build_zip([ZipEntry(name=b"a.txt", data=b"hello", method=0)]))
        end = data.rfind(b"PK\x05\x06")
        struct.pack_into("<I", data, end + 16, struct.unpack_from("<I", data, end + 16)[0] + 100)
    else:  # a ZIP64 extra field giving the member's offset
        local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0x21, zlib.crc32(b"hello"), 5, 5, 5, 0)
        extra = struct.pack("<HHQ", 1, 8, offset)
        central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x0314, 20, 0, 0, 0, 0x21, zlib.crc32(b"hello"), 5, 5,
                              5, len(extra), 0, 0, 0, 0, 0xFFFFFFFF) + b"a.txt" + extra  # fmt: skip
        head = local + b"a.txt" + b"hello"
        data = head + central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(head), 0)
    z = tmp_path / "off.zip"
    z.write_bytes(data)
    at = f"starts at byte {offset}, outside" if offset >= 0 else "starts 100 bytes before the start of"
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "o")]) == 1
    assert capsys.readouterr().err == (
        f"unzip-gbk: error: {z}: member 'a.txt' {at} the {len(data)}-byte file (a damaged or forged directory)\n"
    )
    assert main(["check", str(z)]) == 1
    assert capsys.readouterr().err.endswith(f"{z}: member 'a.txt' {at} the {len(data)}-byte file (a damaged or "
                                            "forged directory)\n")  # fmt: skip


def test_a_member_of_a_later_zip_version_is_one_line(tmp_path: Path, capsys):
    data = bytearray(build_zip([ZipEntry(name=b"a.txt", data=b"hello", method=0)]))
    (cd,) = _central_entries(bytes(data))
    struct.pack_into("<H", data, cd + 6, 64)  # version needed to extract: 6.4
    z = tmp_path / "v64.zip"
    z.write_bytes(data)
    for args in (["-l"], ["-d", str(tmp_path / "o")]):
        assert unzip_gbk_main([str(z), *args]) == 1
        assert capsys.readouterr().err == (
            f"unzip-gbk: error: {z}: a member needs a newer ZIP format than this reader knows (zip file version 6.4); "
            "make the archive again with a common zip tool\n"
        )
    assert main(["check", str(z)]) == 1
    assert "zip file version 6.4" in capsys.readouterr().err


def test_a_link_chain_the_kernel_refuses_is_refused_in_place_too(tmp_path: Path):
    # l0 -> l1/l1, l1 -> l2/l2, ... l7 -> '.': resolving l0 follows 2^8 links, past Linux's 40 (ELOOP), so
    # unzip-gbk removes l0-l2; read in place they were kept, and every lookup read each link again (hours)
    links = [ZipEntry(name=f"l{i}".encode(), symlink_to=f"l{i + 1}/l{i + 1}".encode()) for i in range(7)]
    entries = [gbk("cat/1.png", _png(1)), gbk("dog/2.png", _png(2)), *links,
               ZipEntry(name=b"l7", symlink_to=b".")]  # fmt: skip
    z = write_zip(tmp_path / "chain.zip", entries)
    start = time.perf_counter()
    reader = ZipReader(z)
    kept_in_place = sorted(m.name for m in reader.links if reader.link_folder(m) is not None)
    assert time.perf_counter() - start < 30
    report = unzip(z, tmp_path / "out")
    on_disk = sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_symlink())
    assert kept_in_place == on_disk == ["l3", "l4", "l5", "l6", "l7"]
    assert [p.split(": ")[1] for p in report.problems] == [f"member 'l{i}'" for i in range(3)]


def test_a_long_chain_of_links_is_cut_where_the_kernel_stops_as_read_in_place(tmp_path: Path):
    # the attack: 8000 links l0 -> l1 -> ... -> l8000 (a file), in a 724 KB zip: each link was resolved to the end of
    # the chain (os.path.realpath has no 40-link bound), about a minute of CPU; the kernel follows 40 at most
    n = 120
    links = [ZipEntry(name=f"l{i:03d}".encode(), symlink_to=f"l{i + 1:03d}".encode()) for i in reversed(range(n))]
    z = write_zip(tmp_path / "chain.zip", [gbk(f"l{n:03d}", b"end"), *links])
    report = unzip(z, tmp_path / "out")
    on_disk = sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_symlink())
    assert on_disk == [f"l{i:03d}" for i in range(n - 40, n)]  # 40 links or fewer to the file
    assert all((tmp_path / "out" / name).read_bytes() == b"end" for name in on_disk)
    reader = ZipReader(z)
    assert sorted(m.name for m in reader.links if reader.link_target(m) is not None) == on_disk
    assert f"{z}: member 'l{n - 42:03d}': symlink to 'l{n - 41:03d}' leads through more than 40 links, which the " \
        "kernel does not follow (ELOOP); not created" in report.problems  # fmt: skip
    assert len(report.problems) == n - 40


def test_many_links_extract_in_linear_time(tmp_path: Path):
    n = 6000
    z = write_zip(tmp_path / "links.zip", [ZipEntry(name=f"l{i:05d}".encode(), symlink_to=b".") for i in range(n)])
    report = unzip(z, tmp_path / "out")
    assert report.ok and len(report.extracted) == n
    assert sorted(os.listdir(tmp_path / "out"))[:2] == ["l00000", "l00001"]


def test_a_part_another_running_extraction_holds_is_left_alone(tmp_path: Path):
    import fcntl

    from datakit.archive import _temp_name

    z = write_zip(tmp_path / "a.zip", [ZipEntry(name=b"big.bin", data=b"x" * 5000)])
    (m,) = read_members(z)[0]
    out = tmp_path / "out"
    out.mkdir()
    part = out / _temp_name("big.bin", m)
    part.write_bytes(b"half")  # what another extraction (into a folder around this one) is writing now
    with open(part, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        code = subprocess.run([sys.executable, "-c", "import sys; from datakit.cli import unzip_gbk_main; "
                               f"sys.exit(unzip_gbk_main([{str(z)!r}, '-d', {str(out)!r}]))"]).returncode  # fmt: skip
        assert code == 0
        assert part.read_bytes() == b"half"  # not removed as a leftover
    assert (out / "big.bin").read_bytes() == b"x" * 5000
    (out / "big.bin").unlink()
    assert unzip(z, out).extracted == ["big.bin"]  # nobody holds the part now: a leftover, removed
    assert not part.exists() and (out / "big.bin").read_bytes() == b"x" * 5000


@pytest.mark.parametrize(
    ("names", "encoding", "want"),
    [
        # Chinese Windows (code page 936) writes the euro sign as the single byte 0x80, which Python's gbk refuses:
        # every name was read as KOI8-R
        ([b"\xd1\xb5\xc1\xb7/\xc3\xa8.jpg", "验证/狗.jpg".encode("gbk"), "训练/价格100".encode("gbk") + b"\x80.jpg"],
         "gbk", ["训练/价格100€.jpg", "训练/猫.jpg", "验证/狗.jpg"]),
        # Taiwanese Windows (code page 950) writes Big5's ETEN additions (碁 裏), which Python's big5 refuses
        (["訓練/碁盤.jpg".encode("cp950"), "驗證/裏面.jpg".encode("cp950"), "訓練/牆.jpg".encode("big5")],
         "big5", ["訓練/牆.jpg", "訓練/碁盤.jpg", "驗證/裏面.jpg"]),
    ],
)  # fmt: skip
def test_windows_code_page_bytes_python_codecs_refuse(tmp_path: Path, names, encoding, want):
    z = write_zip(tmp_path / "w.zip", [ZipEntry(name=n, data=b"x", made_by=0) for n in names])
    report = unzip(z, tmp_path / "out")
    assert report.ok and report.encoding.encoding == encoding and report.encoding.ambiguous == ()
    assert sorted(tree(tmp_path / "out")) == want


def test_a_target_that_cannot_be_written_is_one_line_and_a_dangling_link_is_named(gbk_zip: Path, tmp_path: Path,
                                                                                  monkeypatch, capsys):  # fmt: skip
    # the attacks: a read-only -d printed "folder '训练' cannot be made: Permission denied" once per member, exit 1;
    # -d naming a link to nothing was "a file is in the way"
    (tmp_path / "ro").mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m, **kw: False if Path(p) == tmp_path / "ro" else real(p, m, **kw))
    assert unzip_gbk_main([str(gbk_zip), "-d", str(tmp_path / "ro")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"unzip-gbk: error: {tmp_path / 'ro'}: not writable; cannot extract into it"
    ]
    assert list((tmp_path / "ro").iterdir()) == []
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    assert unzip_gbk_main([str(gbk_zip), "-d", str(tmp_path / "dangling")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"unzip-gbk: error: {tmp_path / 'dangling'}: cannot be made a folder (a link to nothing is in the way)"
    ]


# ---------------------------------------------------------------------------------------------
# a second run into the same folder, names past a path's length, parts in the way, memory, sizes


def test_a_link_from_an_earlier_run_led_out_by_a_new_link_is_stopped(tmp_path: Path):
    # before: run 1 made b -> c and a -> b/../secret.txt (inside); run 2 (--overwrite) made b -> ., so a led to the
    # secret.txt beside the target, exit 0
    (tmp_path / "secret.txt").write_text("OUTSIDE THE TARGET\n", encoding="utf-8")
    v1 = write_zip(tmp_path / "v1.zip", [gbk("c/"), gbk("secret.txt", b"inside\n"), gbk("b", symlink_to=b"c"),
                                         gbk("a", symlink_to=b"b/../secret.txt")])  # fmt: skip
    v2 = write_zip(tmp_path / "v2.zip", [gbk("b", symlink_to=b".")])
    out = tmp_path / "out"
    assert unzip(v1, out).problems == []
    report = unzip(v2, out, overwrite=True)
    assert report.problems == [f"{v2}: member 'b': symlink would make 'a', a link already in the folder, resolve "
                               "outside the target; removed"]  # fmt: skip
    assert not (out / "b").exists() and not os.path.lexists(out / "b")
    assert not os.path.exists(out / "a")  # a leads to nothing now, never out
    # a link of the user's own that leads out already is theirs: a run that makes links leaves it alone
    (tmp_path / "mine").symlink_to(tmp_path / "secret.txt")
    os.replace(tmp_path / "mine", out / "mine")
    v3 = write_zip(tmp_path / "v3.zip", [gbk("d", symlink_to=b"c")])
    assert unzip(v3, out).problems == [] and os.readlink(out / "mine") == str(tmp_path / "secret.txt")


def _chain_zip(path: Path, links: int = 0) -> Path:
    # a -> b/.. is inside while b is missing; b -> . then makes a lead out
    members = [gbk("f", b"x"), gbk("a", symlink_to=b"b/.."), gbk("b", symlink_to=b".")]
    return write_zip(path, members + [gbk(f"l{i}", symlink_to=b"f") for i in range(links)])


def test_a_chain_left_by_a_killed_run_is_removed_by_the_next(tmp_path: Path):
    # The attack: a run killed (SIGKILL) after making a and b, before its links were checked, left a -> b/.. leading
    # out of the target; the rerun refused a ("points outside the target folder; not created") and left it there
    z = _chain_zip(tmp_path / "esc.zip")
    out = tmp_path / "out"
    out.mkdir()
    (out / "a").symlink_to("b/..")  # what the killed run left: its files and links, unchecked
    (out / "b").symlink_to(".")
    report = unzip(z, out)
    assert report.problems == [f"{z}: member 'a': symlink to 'b/..' points outside the target folder; not created; "
                               "the same link, left there by an earlier run, removed"]  # fmt: skip
    assert not os.path.lexists(out / "a") and os.readlink(out / "b") == "." and report.unchanged == ["b"]
    # a link left by a killed run that another left-over link leads out is checked too, not taken as unchanged
    z2 = write_zip(tmp_path / "two.zip", [gbk("f", b"x"), gbk("c", symlink_to=b"d/.."), gbk("d", symlink_to=b".")])
    out2 = tmp_path / "out2"
    out2.mkdir()
    (out2 / "d").symlink_to(".")
    (out2 / "c").symlink_to("d/..")
    assert unzip(z2, out2).problems == [f"{z2}: member 'c': symlink to 'd/..' points outside the target folder; not "
                                        "created; the same link, left there by an earlier run, removed"]  # fmt: skip
    assert not os.path.lexists(out2 / "c")


def test_a_link_of_the_users_own_that_a_refused_member_names_is_left_alone(tmp_path: Path):
    # The regression: a member proj/up -> ../../outside2 is refused (it leads out by its own text); the user's own
    # link of that target, already in the folder (a tree extracted over its original), was removed as if a killed
    # run had left it; no run ever makes such a link. One the user made that leads to nothing stays too
    z = write_zip(tmp_path / "l.zip", [gbk("proj/a.txt", b"a"), gbk("proj/up", symlink_to=b"../../outside2"),
                                       gbk("proj/gone", symlink_to=b"nothing")])  # fmt: skip
    out = tmp_path / "d"
    (out / "proj").mkdir(parents=True)
    (out / "proj" / "up").symlink_to("../../outside2")
    (out / "proj" / "gone").symlink_to("nothing")
    report = unzip(z, out)
    assert report.problems == [f"{z}: member 'proj/up': symlink to '../../outside2' points outside the target "
                               "folder; not created"]  # fmt: skip
    assert os.readlink(out / "proj" / "up") == "../../outside2" and os.readlink(out / "proj" / "gone") == "nothing"


def test_a_run_interrupted_while_making_links_checks_the_links_it_made(tmp_path: Path, monkeypatch):
    # The attack: Ctrl-C (or SIGTERM, which the command turns into the same) after b -> . was made and while the
    # other links were still being made: a -> b/.. stayed, leading out of the target
    from datakit import archive

    z = _chain_zip(tmp_path / "esc.zip", links=3)
    made = []
    real = archive._extract_symlink

    def interrupted(zf, info, m, tree, rel, *args):
        if rel == "l1":
            raise KeyboardInterrupt
        real(zf, info, m, tree, rel, *args)
        made.append(rel)

    monkeypatch.setattr(archive, "_extract_symlink", interrupted)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        unzip(z, out)
    assert made == ["a", "b", "l0"]
    assert not os.path.lexists(out / "a") and sorted(os.listdir(out)) == ["b", "f", "l0"]


def test_many_link_members_are_checked_against_folders_once(tmp_path: Path):
    # The attack: each link member scanned every member's path for a folder of its name: 8,000 links took 17.6 s,
    # 16,000 took 81 s
    from datakit.archive import _folders_of

    assert _folders_of({"a/b/c.jpg", "a/d.jpg", "e.jpg", "a/b/f/g"}) == {"a", "a/b", "a/b/f"}
    z = _chain_zip(tmp_path / "many.zip", links=3000)
    report = unzip(z, tmp_path / "out")
    assert report.problems == [f"{z}: member 'a': symlink resolves outside the target through other links; removed"]
    assert len(report.extracted) == 3002


def test_names_and_links_longer_than_a_path_are_refused_in_one_line(tmp_path: Path, capsys):
    # before: a link whose path passed 4096 bytes gave "OSError: [Errno 36] File name too long" as a traceback
    deep = "/".join(f"d{i:02d}" + "x" * 240 for i in range(17))
    z = write_zip(tmp_path / "long.zip", [gbk(deep + "/f.txt", b"data"), gbk(deep + "/l.txt", symlink_to=b"f.txt"),
                                          gbk("ok.txt", b"ok")])  # fmt: skip
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[:2] == [f"{z}: member {deep + name!r}: refused: the name is {len(deep) + 6} bytes, longer than a path "
                       "may be (4095)" for name in ("/f.txt", "/l.txt")]  # fmt: skip
    assert err[2:] == ["2 members not extracted (see above)"]
    assert tree(tmp_path / "out") == {"ok.txt": b"ok"}


def test_a_fifo_or_a_longer_file_under_a_part_name_is_left_alone(tmp_path: Path):
    # before: a FIFO named as the member's part hung the run for ever; a file of that name was deleted
    z = write_zip(tmp_path / "f.zip", [gbk("a.jpg", b"data")])
    crc = zlib.crc32(b"data")
    tag = f"{zlib.crc32(f'{crc}:4'.encode()):08x}"
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / f".a.jpg.{tag}.unzip-part")
    (out / "sub").mkdir()
    proc = subprocess.run([sys.executable, "-m", "datakit.cli", "unzip", str(z), "-d", str(out), "-q"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (out / "a.jpg").read_bytes() == b"data" and os.path.exists(out / f".a.jpg.{tag}.unzip-part")
    notes = tmp_path / "out2"
    notes.mkdir()
    (notes / f".a.jpg.{tag}.unzip-part").write_text("my own notes\n", encoding="utf-8")  # longer than the member
    assert unzip(z, notes).problems == []
    assert (notes / f".a.jpg.{tag}.unzip-part").read_text(encoding="utf-8") == "my own notes\n"
    assert (notes / "a.jpg").read_bytes() == b"data"


def test_an_lzma_dictionary_past_the_memory_limit_is_one_line_and_the_rest_is_read(tmp_path: Path):
    # before: under `ulimit -v`, a member declaring a 4 GiB LZMA dictionary gave a MemoryError traceback
    props = bytes([0x5D]) + struct.pack("<I", 0xFFFFFFFF)
    z = write_zip(tmp_path / "lzma.zip", [gbk("a.txt", struct.pack("<BBH", 9, 20, 5) + props + b"\x00" * 16,
                                                 method=14), gbk("b.txt", b"fine")])  # fmt: skip
    code = (
        "import resource, sys\n"
        "from datakit.archive import ArchiveError, ZipReader, unzip\n"
        "size = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()\n"
        "resource.setrlimit(resource.RLIMIT_AS, (size + (1 << 30), size + (1 << 30)))\n"
        "r = ZipReader(sys.argv[1])\n"
        "try:\n    r.read('a.txt')\nexcept ArchiveError as e:\n    print(e)\n"
        "print(r.read('b.txt'))\n"
        "print(unzip(sys.argv[1], sys.argv[2]).problems)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(z), str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    why = "its LZMA data asks for a 4.0 GiB dictionary, more memory than this process may take; not read"
    assert proc.stdout.splitlines() == [f"{z}: member 'a.txt': {why}", "b'fine'", repr([f"{z}: member 'a.txt': {why}"])]
    assert tree(tmp_path / "out") == {"b.txt": b"fine"}


def test_a_stored_member_whose_sizes_differ_is_refused(tmp_path: Path):
    # before: 100 stored bytes declared as 10 were cut to 10, exit 0 (Info-ZIP: "ucsize 10 <> csize 100")
    z = write_zip(tmp_path / "s.zip", [gbk("s.bin", b"A" * 100, method=0, declared_size=10), gbk("after.txt", b"x")])
    report = unzip(z, tmp_path / "out")
    why = "stored (not compressed), yet declares 100 bytes stored and 10 of content"
    assert report.problems == [f"{z}: member 's.bin': {why}"] and tree(tmp_path / "out") == {"after.txt": b"x"}
    with pytest.raises(ArchiveError) as e:
        ZipReader(z).read("s.bin")
    assert str(e.value) == f"{z}: member 's.bin': {why}"


def test_a_dot_slash_folder_entry_is_the_target_itself(tmp_path: Path):
    # before: "member './': refused: the name is empty", exit 1, though nothing was at risk
    z = write_zip(tmp_path / "d.zip", [gbk("./"), gbk("./cat/1.txt", b"x")])
    report = unzip(z, tmp_path / "out")
    assert report.problems == [] and tree(tmp_path / "out") == {"cat/1.txt": b"x"}


def test_the_extracted_folder_is_the_dataset_the_zip_read_in_place_is(tmp_path: Path):
    # before: Finder's __MACOSX/ and ._1.png were extracted, so the folder had a class '__MACOSX' (cat and dog one
    # index up) and a '._' sample; a link climbing out of the target by its name and back in made a sample the zip
    # read in place does not have
    from datakit.datasets import open_dataset

    out = tmp_path / "out"
    z = write_zip(tmp_path / "mac.zip", [gbk("cat/1.png", _png(10)), gbk("dog/2.png", _png(50)),
                                         gbk("__MACOSX/cat/._1.png", b"\x00\x05\x16\x07"),
                                         gbk("cat/._1.png", b"\x00\x05\x16\x07"),
                                         gbk("dog/3.png", symlink_to=b"../../out/cat/1.png")])  # fmt: skip
    report = unzip(z, out)
    assert report.notes[-1] == (f"{z}: 2 members of macOS Finder's metadata (__MACOSX/..., ._NAME) not extracted: "
                                "resource forks, no files of the folder zipped (the zip read in place leaves them "
                                "out too)")  # fmt: skip
    assert report.problems == [f"{z}: member 'dog/3.png': symlink to '../../out/cat/1.png' leaves the target folder "
                               "by name and comes back (it would break, or lead elsewhere, once the folder is "
                               "renamed); not created"]  # fmt: skip
    assert tree(out) == {"cat/1.png": _png(10), "dog/2.png": _png(50)} and links_under(out) == {}
    folder, zipped = open_dataset(out), open_dataset(z)
    assert folder.classes == zipped.classes == ["cat", "dog"]
    assert [(int(x[0, 0, 0]), y) for x, y in folder] == [(int(x[0, 0, 0]), y) for x, y in zipped] == [(10, 0), (50, 1)]
    # the attack: "C:__MACOSX/x/1.png": the drive letter removed, it was written as __MACOSX/x/1.png, a class the
    # zip read in place leaves out: every label one index up in the folder
    z = write_zip(tmp_path / "drive.zip", [gbk("C:__MACOSX/x/1.png", _png(90)), gbk("cat/1.png", _png(10)),
                                           gbk("dog/2.png", _png(50))])  # fmt: skip
    report = unzip(z, tmp_path / "out2")
    assert report.notes[-1].startswith(f"{z}: 1 member of macOS Finder's metadata (__MACOSX/..., ._NAME) not extracted")
    assert tree(tmp_path / "out2") == {"cat/1.png": _png(10), "dog/2.png": _png(50)}
    assert open_dataset(tmp_path / "out2").classes == open_dataset(z).classes == ["cat", "dog"]


def test_a_bomb_of_folders_is_refused_before_anything_is_written(tmp_path: Path, capsys):
    # the attack: 20 folder members 2041 folders deep, 165 KB of zip: 40,820 folders, 160 MB on disk, exit 0
    # (folders declare no size, and the budget counted files only)
    z = write_zip(tmp_path / "dirs.zip", [ZipEntry(f"m{i:02d}/".encode() + b"a/" * 2040) for i in range(20)])
    assert z.stat().st_size == 164942
    line = (
        f"{z}: refused, its 40820 folders take 159.5 MiB on disk (4 KiB each) beside 0 bytes of files, from a "
        "161.1 KiB archive: 1014:1, over the limit of 200:1 (a bomb of folders?; raise it with --max-ratio)"
    )
    with pytest.raises(ArchiveError) as e:
        unzip(z, tmp_path / "out")
    assert str(e.value) == line
    assert not (tmp_path / "out").exists()
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err == f"unzip-gbk: error: {line}\n"
    # under --max-total as well, and 300 folders of a dataset beside their files are nothing
    with pytest.raises(ArchiveError, match=r"its 40820 folders take 159\.5 MiB on disk \(4 KiB each\) beside 0 "
                                           r"bytes of files, over the limit of 1000000 bytes"):  # fmt: skip
        unzip(z, tmp_path / "out", max_total=1_000_000, max_ratio=1e9)
    ok = write_zip(tmp_path / "ok.zip", [gbk(f"类{i}/{i}.png", b"x" * 500, method=0) for i in range(300)])
    assert len(unzip(ok, tmp_path / "out2").extracted) == 300


def test_a_name_no_file_system_holds_is_refused_in_place_as_by_unzip(tmp_path: Path):
    # the attack: 86 CJK characters are 172 bytes in GBK but 262 in UTF-8: unzip-gbk refused the member, the
    # zip read in place read it, so the two datasets had different classes
    from datakit.datasets import open_dataset
    from datakit.io import encode_image

    png = encode_image(np.zeros((4, 4, 3), np.uint8), ".png")
    long = "狗" * 86 + ".png"
    z = write_zip(tmp_path / "long.zip", [gbk("cat/1.png", png), gbk(f"dog/{long}", png), gbk("鸟/1.png", png),
                                          gbk("目" * 90 + "/x.png", png)])  # fmt: skip
    report = unzip(z, tmp_path / "out")
    assert report.problems == [
        f"{z}: member 'dog/{long}': refused: the name is 262 bytes, over the 255-byte limit of file names",
        f"{z}: member '{'目' * 90}/x.png': refused: folder '{'目' * 90}' is 270 bytes, over the 255-byte limit of "
        "file names",
    ]
    assert safe_relpath(f"dog/{long}") == (
        None,
        "refused: the name is 262 bytes, over the 255-byte limit of file names",
    )
    assert open_dataset(tmp_path / "out").classes == ["cat", "鸟"]
    with pytest.raises(ArchiveError) as e:  # read in place, what unzip-gbk refuses is refused, not read
        open_dataset(z)
    assert str(e.value) == (f"{z}: member 'dog/{long}': refused: the name is 262 bytes, over the 255-byte limit of "
                            "file names (as unzip refuses it)")  # fmt: skip


def test_a_path_thousands_of_folders_deep_needs_few_descriptors(tmp_path: Path):
    # the attack: 'a/' * 1100 + 'f.txt' (2205 bytes, under the 4095 a path may be) at `ulimit -n 1024`: "Too
    # many open files", 1020 folders left behind; every folder of the walk kept its descriptor
    z = write_zip(tmp_path / "deep.zip", [gbk("a/" * 1100 + "f.txt", b"x"), gbk("ok.txt", b"y")])
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200)); "
            "from datakit.archive import unzip; r = unzip(sys.argv[1], sys.argv[2], max_ratio=1e6); "
            "print(r.problems, len(r.extracted))")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code, str(z), str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "[] 2\n"
    assert (tmp_path / "out" / ("a/" * 1100 + "f.txt")).read_bytes() == b"x"
    # shutil.rmtree (pytest's clean-up of old temporary folders) recurses once a level: past Python's limit here
    subprocess.run(["rm", "-rf", str(tmp_path / "out")], check=True, timeout=60)


def test_a_member_named_as_a_folder_with_a_links_mode_is_refused_in_both_places(tmp_path: Path):
    # the attack: link 'x' -> dog and link 'x/' -> dog: unzip-gbk made 'x/' a folder (mode 0777 from the link's
    # bits) and refused the link; the zip read in place read 'x' as the link: classes cat, dog, x
    from datakit.datasets import open_dataset
    from datakit.io import encode_image

    png = encode_image(np.zeros((4, 4, 3), np.uint8), ".png")
    z = write_zip(tmp_path / "l.zip", [gbk("cat/1.png", png), gbk("dog/1.png", png),
                                       ZipEntry(b"x", symlink_to=b"dog"), ZipEntry(b"x/", symlink_to=b"dog")])  # fmt: skip
    report = unzip(z, tmp_path / "out")
    assert report.problems == [f"{z}: member 'x/': refused: named as a folder (it ends in '/') but its mode is a "
                               "symbolic link's"]  # fmt: skip
    assert os.readlink(tmp_path / "out" / "x") == "dog"
    assert open_dataset(z).classes == open_dataset(tmp_path / "out").classes == ["cat", "dog", "x"]


def test_a_name_stored_twice_is_one_file_or_refused_whatever_overwrite_says(tmp_path: Path):
    # the attack: cat/1.png stored twice: "1 already there and identical" into an empty folder, "exists and
    # differs" as if it had been there before, and with --overwrite the later copy silently replaced the first
    same = write_zip(tmp_path / "same.zip", [gbk("cat/1.png", b"one"), gbk("dog/1.png", b"two"),
                                             gbk("cat/1.png", b"one")])  # fmt: skip
    report = unzip(same, tmp_path / "o1")
    assert (report.extracted, report.unchanged, report.problems) == (["cat/1.png", "dog/1.png"], [], [])
    assert report.notes == [
        f"{same}: member 'cat/1.png': in the archive twice, the same bytes both times; written once"
    ]
    assert ZipReader(same).read("cat/1.png") == b"one"  # the same bytes: one file in place too
    other = write_zip(tmp_path / "other.zip", [gbk("cat/1.png", b"one"), gbk("dog/1.png", b"two"),
                                               gbk("cat/1.png", b"ONE")])  # fmt: skip
    for overwrite in (False, True):
        out = tmp_path / f"o-{overwrite}"
        report = unzip(other, out, overwrite=overwrite)
        assert report.extracted == ["cat/1.png", "dog/1.png"]
        assert report.problems == [f"{other}: member 'cat/1.png': in the archive twice, with other bytes than the "
                                   "first copy; not written (the zip read in place refuses the name)"]  # fmt: skip
        assert (out / "cat" / "1.png").read_bytes() == b"one"
    with pytest.raises(ArchiveError, match="member 'cat/1.png' is in the archive twice"):
        ZipReader(other).read("cat/1.png")


def test_an_archive_that_is_a_pipe_or_a_device_is_a_usage_error(tmp_path: Path, capsys):
    # the attack: a FIFO blocked for ever on open; /dev/zero was read to the end (3 GB in 3 s)
    fifo = tmp_path / "f.zip"
    os.mkfifo(fifo)
    assert unzip_gbk_main([str(fifo), "-d", str(tmp_path / "out")]) == 2
    assert (
        capsys.readouterr().err
        == f"unzip-gbk: error: {fifo}: a pipe, not a regular file; a zip archive is read from a file\n"
    )
    assert unzip_gbk_main(["/dev/zero", "-l"]) == 2
    assert (
        capsys.readouterr().err
        == "unzip-gbk: error: /dev/zero: a device, not a regular file; a zip archive is read from a file\n"
    )
    with pytest.raises(UsageError, match="a pipe, not a regular file"):
        ZipReader(fifo)
    assert not (tmp_path / "out").exists()


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_copies_of_a_name_are_the_same_only_if_their_stored_bytes_are(tmp_path: Path):
    # the attack: two copies of cat/1.png of one size and one CRC-32 (forged) but other bytes: unzip-gbk wrote the
    # first "the same bytes both times", the zip read in place gave the last; the class-folder zip read in place
    # refused two copies that were the same bytes, which unzip-gbk wrote once
    from datakit.archive import read_members
    from datakit.datasets import open_dataset
    from datakit.io import encode_image

    z = tmp_path / "forged.zip"
    with zipfile.ZipFile(z, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("cat/1.png", b"AAAA")
        zf.writestr("cat/1.png", b"BBBB")
    raw = bytearray(z.read_bytes())
    crc_a, crc_b = struct.pack("<I", zlib.crc32(b"AAAA")), struct.pack("<I", zlib.crc32(b"BBBB"))
    z.write_bytes(bytes(raw).replace(crc_b, crc_a))  # the second copy declares the first's CRC-32 (and size)
    members, _ = read_members(z)
    assert [(m.crc, m.file_size) for m in members] == [(zlib.crc32(b"AAAA"), 4)] * 2
    report = unzip(z, tmp_path / "out")
    assert (report.extracted, report.problems) == (["cat/1.png"], [
        f"{z}: member 'cat/1.png': in the archive twice, with other bytes than the first copy; not written (the zip "
        "read in place refuses the name)"])  # fmt: skip
    with pytest.raises(ArchiveError, match="member 'cat/1.png' is in the archive twice"):
        ZipReader(z).read("cat/1.png")
    png = [encode_image(np.full((4, 4, 3), c, np.uint8), ".png") for c in (0, 255)]
    same = write_zip(
        tmp_path / "same.zip", [gbk("cat/1.png", png[0]), gbk("cat/1.png", png[0]), gbk("dog/2.png", png[1])]
    )
    assert unzip(same, tmp_path / "o2").extracted == ["cat/1.png", "dog/2.png"]
    assert len(open_dataset(same)) == len(open_dataset(tmp_path / "o2")) == 2
    with open(same, "rb") as f:  # a file object, as read_members took before the pipe check
        assert [m.name for m in read_members(f)[0]] == ["cat/1.png", "cat/1.png", "dog/2.png"]


def test_a_few_folders_beside_compressible_files_are_no_bomb(tmp_path: Path):
    # the attack: 20 class folders of 50 KB of zeros each (3.4 KiB of zip) and one data/blank.bin of 1,048,000 zeros
    # were refused as "a bomb of folders": the file bytes under the 1 MiB a ratio starts at, counted with the folders
    masks = tmp_path / "masks.zip"
    with zipfile.ZipFile(masks, "w", zipfile.ZIP_DEFLATED) as zf:
        for c in range(20):
            zf.writestr(f"class{c:02d}/mask.raw", b"\0" * 50_000)
    assert len(unzip(masks, tmp_path / "m").extracted) == 20
    blank = tmp_path / "blank.zip"
    with zipfile.ZipFile(blank, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("data/blank.bin", b"\0" * 1_048_000)
    assert unzip(blank, tmp_path / "b").extracted == ["data/blank.bin"]


def test_names_with_gb18030_characters_and_short_japanese_names_decode(tmp_path: Path):
    # the attack: one name with a character GBK lacks (𠮷, 䶮: people's names) dropped GBK from the candidates and
    # every name came out as CP1251 or KOI8-R, with no warning; four Japanese surnames read as Korean
    for k, (names, enc, want) in enumerate(
        (
            (["照片/王𠮷.jpg", "照片/李娜.jpg", "照片/张伟.jpg"], "gb18030", "gb18030"),
            (["照片/王䶮.jpg", "照片/李娜.jpg"], "gb18030", "gb18030"),
            (["佐藤.pdf", "鈴木.pdf", "伊藤.pdf", "渡辺.pdf"], "cp932", "cp932"),
        )
    ):
        z = write_zip(tmp_path / f"{k}.zip", [ZipEntry(name=n.encode(enc), data=b"x") for n in names])
        guess = detect_encoding(z)
        assert (guess.encoding, guess.ambiguous) == (want, ())
        report = unzip(z, tmp_path / str(k))
        assert report.problems == [] and sorted(tree(tmp_path / str(k))) == sorted(names)
    # two characters alone (첨부 in CP949) read as well in another encoding: said so, never silently; 陳靜 in Big5,
    # once as plausible as CP949's 날픒 (a rare vowel and final), is Big5's
    for name, enc, ambiguous in (("陳靜.pdf", "big5", ()), ("첨부.jpg", "cp949", ("gbk", "cp949"))):
        z = write_zip(tmp_path / "one.zip", [ZipEntry(name=name.encode(enc), data=b"x")])
        assert detect_encoding(z).ambiguous == ambiguous
        assert detect_encoding(z).decode(name.encode(enc)) == (name if not ambiguous else "梅何.jpg")


def test_a_table_over_a_zip_reads_what_unzip_writes(tmp_path: Path):
    # the attack: a table read over a zip in place found 'dog/1.png' in the member 'cat/../dog/1.png' and 'cat/x.png'
    # in a file member the archive's own folder 'cat/x.png/' stands in place of; unzip-gbk writes neither
    from datakit.datasets import open_dataset

    png = b"\x89PNG\r\n\x1a\n" + bytes(8)
    z = write_zip(tmp_path / "a.zip", [ZipEntry(name=b"cat/../dog/1.png", data=png), ZipEntry(name=b"dog/2.png", data=png),
                                      ZipEntry(name=b"cat/x.png/"), ZipEntry(name=b"cat/x.png/3.png", data=png),
                                      ZipEntry(name=b"cat/x.png", data=png)])  # fmt: skip
    reader = ZipReader(z)
    assert "dog/2.png" in reader and "dog/1.png" not in reader and "cat/x.png" not in reader
    with pytest.raises(KeyError, match="no member named 'dog/1.png'"):
        reader.read("dog/1.png")
    report = unzip(z, tmp_path / "out")
    assert sorted(tree(tmp_path / "out")) == ["cat/x.png/3.png", "dog/2.png"]
    assert report.problems == [
        f"{z}: member 'cat/../dog/1.png': refused: a '..' component would escape the target folder",
        f"{z}: member 'cat/x.png': {tmp_path / 'out' / 'cat' / 'x.png'} is a folder of the archive's own members; "
        "not replaced by a file",
    ]
    (tmp_path / "l.csv").write_text("file,label\ndog/1.png,dog\ndog/2.png,dog\n")
    from datakit.errors import SampleError

    with pytest.raises(SampleError) as e:
        open_dataset(z, labels=tmp_path / "l.csv")[0]
    assert str(e.value) == f"sample 0: {z}: no member named 'dog/1.png' ({tmp_path / 'l.csv'}, line 2)"
    assert main(["check", str(z), "--labels", str(tmp_path / "l.csv")]) == 1


def test_a_path_through_a_file_ending_in_a_dot_is_nothing_in_place_as_on_disk(tmp_path: Path):
    # the attack: a link to '../cat/1.png/.' (unzip-gbk removes it: the kernel says ENOTDIR) was read in place as
    # cat's image under dog; a table row 'cat/1.png/.' found cat/1.png in the zip, and nothing on the folder
    png0, png1 = b"\x89PNG\r\n\x1a\n" + bytes(8), b"\x89PNG\r\n\x1a\n" + bytes(9)
    z = write_zip(tmp_path / "d.zip", [ZipEntry(b"cat/1.png", png0), ZipEntry(b"dog/1.png", png1),
                                      ZipEntry(b"dog/x.png", symlink_to=b"../cat/1.png/."),
                                      ZipEntry(b"dog/y.png", symlink_to=b"../cat/1.png//.")])  # fmt: skip
    report = unzip(z, tmp_path / "out")
    assert tree(tmp_path / "out") == {"cat/1.png": png0, "dog/1.png": png1}
    assert report.problems == [f"{z}: member 'dog/{n}.png': symlink to '../cat/1.png/{s}.' leads to nothing inside "
                               "the target; removed" for n, s in (("x", ""), ("y", "/"))]  # fmt: skip
    reader = ZipReader(z)
    for name in ("dog/x.png", "dog/y.png", "cat/1.png/.", "cat/1.png/", "dog/1.png/."):
        assert name not in reader and reader.lookup(name) is None, name
        with pytest.raises(KeyError) as e:
            reader.read(name)
        assert e.value.args == (f"{z}: no member named {name!r}",)
    assert [open_dataset(src).name(i) for src in (z, tmp_path / "out") for i in range(2)] == [
        f"{z}:cat/1.png",
        f"{z}:dog/1.png",
        str(tmp_path / "out" / "cat" / "1.png"),
        str(tmp_path / "out" / "dog" / "1.png"),
    ]
    # a member stored as 'cat/2.png/.' (written as cat/2.png) reads by the name it is listed under
    stored = write_zip(tmp_path / "s.zip", [ZipEntry(b"cat/2.png/.", png0)])
    assert ZipReader(stored).read("cat/2.png/.") == ZipReader(stored).read("cat/2.png") == png0
    (tmp_path / "l.csv").write_text("file,label\ncat/1.png/.,cat\ndog/1.png,dog\n")
    for src in (z, tmp_path / "out"):
        assert not open_dataset(src, labels=tmp_path / "l.csv").exists(0)
        assert main(["check", str(src), "--labels", str(tmp_path / "l.csv")]) == 1


def test_a_symlink_target_is_read_in_the_names_encoding(tmp_path: Path):
    # the attack: Info-ZIP on a GBK-locale Unix stores the names and the link's target as GBK bytes; the target was
    # read as UTF-8 ('è��.jpg'), led nothing, and the link was removed
    z = write_zip(tmp_path / "l.zip", [gbk("猫/猫咪.jpg", b"jpeg", mode=0o100644),
                                      gbk("猫/最新.jpg", symlink_to="猫咪.jpg".encode("gbk")),
                                      gbk("狗/小狗.jpg", b"dog", mode=0o100644)])  # fmt: skip
    report = unzip(z, tmp_path / "out")
    assert report.problems == []
    assert os.readlink(tmp_path / "out" / "猫" / "最新.jpg") == "猫咪.jpg"
    assert ZipReader(z).read("猫/最新.jpg") == b"jpeg"


def test_an_unreadable_image_member_is_refused_when_the_zip_is_opened(tmp_path: Path):
    # the attack: class 'ant' held only an encrypted image: in place the classes were ant, cat, dog; the extracted
    # folder (unzip-gbk writes neither the member nor its folder) cat, dog: every index one apart
    from datakit.datasets import open_dataset

    z = write_zip(tmp_path / "s.zip", [ZipEntry(name=b"ant/1.jpg", data=b"x", encrypted=True),
                                      ZipEntry(name=b"cat/2.jpg", data=b"y"), ZipEntry(name=b"dog/3.jpg", data=b"z")])  # fmt: skip
    with pytest.raises(ArchiveError) as e:
        open_dataset(z)
    assert str(e.value) == (f"{z}: member 'ant/1.jpg': encrypted; datakit does not decrypt (use a tool that asks for "
                            "the password); and class 'ant' has no other image (extracted, it would be no class at "
                            "all: the classes would be numbered otherwise)")  # fmt: skip
    # beside readable images of its class it is one bad sample, as before: reported when read, skipped with skip
    z = write_zip(tmp_path / "t.zip", [ZipEntry(name=b"ant/1.jpg", data=b"x", encrypted=True),
                                      ZipEntry(name=b"ant/2.jpg", data=b"w"), ZipEntry(name=b"cat/2.jpg", data=b"y")])  # fmt: skip
    ds = open_dataset(z)
    assert ds.classes == ["ant", "cat"] and len(ds) == 3
    # and a member whose local header names it otherwise than the central directory (unzip-gbk refuses it): a class
    # of its own in place, none extracted, every later index one apart
    data = build_zip([ZipEntry(name=b"ant/1.jpg", data=b"x"), ZipEntry(name=b"cat/2.jpg", data=b"y"),
                      ZipEntry(name=b"dog/3.jpg", data=b"z")])  # fmt: skip
    z = tmp_path / "n.zip"
    z.write_bytes(data.replace(b"ant/1.jpg", b"ant/2.jpg", 1))  # (the first: the local header's)
    assert not unzip(z, tmp_path / "out").ok and sorted(os.listdir(tmp_path / "out")) == ["cat", "dog"]
    with pytest.raises(ArchiveError) as e:
        open_dataset(z)
    assert str(e.value) == (f"{z}: member 'ant/1.jpg': its local header names it otherwise than the central directory "
                            "does (a damaged or hand-made archive); and class 'ant' has no other image (extracted, it "
                            "would be no class at all: the classes would be numbered otherwise)")  # fmt: skip


def test_the_last_part_of_a_split_archive_is_refused_as_one(tmp_path: Path, capsys):
    # the attack: zip -s 64k made ds.z01, ds.z02 and ds.zip; `unzip-gbk ds.zip -l` listed every member (exit 0), and
    # extracting or reading it said "declares N compressed bytes, past the end of the file (a damaged or forged
    # directory)": the members' bytes are in the other parts
    from datakit.datasets import open_dataset

    data = bytearray(build_zip([ZipEntry(name=b"cat/1.png", data=b"x" * 100), ZipEntry(name=b"dog/2.png", data=b"y")]))
    struct.pack_into("<HH", data, len(data) - 22 + 4, 2, 2)  # the end record of the third of three parts
    z = tmp_path / "ds.zip"
    z.write_bytes(bytes(data))
    said = (f"{z}: the last part of a split archive of 3 parts (made by zip -s or WinZip's split), whose members "
            "are in the others, ds.z01 and ds.z02: join the parts, all in one folder, into one archive first (zip -s "
            f"0 {z} --out whole.zip), then read that")  # fmt: skip
    for args in ([str(z), "-l"], [str(z), "-d", str(tmp_path / "out")]):
        assert unzip_gbk_main(args) == 1
        assert capsys.readouterr().err == f"unzip-gbk: error: {said}\n"
    assert not (tmp_path / "out").exists()
    with pytest.raises(ArchiveError) as e:
        open_dataset(z)
    assert str(e.value) == said
    # with bytes appended after its end record (a download padded): the same
    z.write_bytes(bytes(data) + bytes(512))
    with pytest.raises(ArchiveError) as e:
        open_dataset(z)
    assert str(e.value) == said
    # the review round's: a whole archive whose comment holds the signature and text after it ("made by scanner
    # PK\x05\x06 v2.3 ..."), one whose end record says 0xFFFF disks without a ZIP64 record, and a ZIP64 locator
    # counting 0 or 1 disks: one file each, read as before
    plain = build_zip([ZipEntry(name=b"cat/1.png", data=b"x" * 100), ZipEntry(name=b"dog/2.png", data=b"y")])
    comment = b"made by scanner PK\x05\x06 v2.3 build 2024-05-01, station 7"
    commented = bytearray(plain)
    struct.pack_into("<H", commented, len(commented) - 2, len(comment))
    marked = bytearray(plain)
    struct.pack_into("<HH", marked, len(marked) - 22 + 4, 0xFFFF, 0xFFFF)
    for k, data in enumerate((bytes(commented) + comment, bytes(marked))):
        one = tmp_path / f"one{k}.zip"
        one.write_bytes(data)
        assert open_dataset(one).classes == ["cat", "dog"]
        assert unzip_gbk_main([str(one), "-l"]) == 0
    capsys.readouterr()


def test_a_member_mode_without_the_owners_read_bit_still_lets_a_second_run_compare(tmp_path: Path):
    # the attack: a member stored with mode 0o200 was written so; run again (not as root), the file could not be
    # read to compare, and the run failed with "not overwritten"
    z = write_zip(tmp_path / "m.zip", [ZipEntry(name=b"secret.txt", data=b"s", mode=0o100200)])
    assert unzip(z, tmp_path / "out").ok
    assert os.stat(tmp_path / "out" / "secret.txt").st_mode & 0o777 == 0o600
    again = unzip(z, tmp_path / "out")
    assert again.ok and again.unchanged == ["secret.txt"]


def test_a_part_left_beside_its_finished_file_is_removed_by_the_next_run(tmp_path: Path):
    # the attack: a run killed after the part was linked into place and before it was removed left the part; runs
    # after it found the file identical and left the part for ever
    from datakit.archive import _temp_name

    z = write_zip(tmp_path / "p.zip", [ZipEntry(name=b"1.jpg", data=b"one"), ZipEntry(name=b"2.jpg", data=b"two")])
    out = tmp_path / "out"
    assert unzip(z, out).ok
    member = read_members(z)[0][0]
    os.link(out / "1.jpg", out / _temp_name("1.jpg", member))
    again = unzip(z, out)
    assert again.ok and sorted(again.unchanged) == ["1.jpg", "2.jpg"]
    assert sorted(p.name for p in out.iterdir()) == ["1.jpg", "2.jpg"]


def test_ctrl_c_at_any_moment_of_unzip_gbk_leaves_one_line_and_no_part(tmp_path: Path):
    # the attack: Ctrl-C while unzip-gbk set up printed a KeyboardInterrupt traceback (exit -2), and one arriving
    # between a part's creation and its write left the empty part behind
    import signal

    rng = np.random.default_rng(0)
    z = write_zip(tmp_path / "big.zip", [gbk(f"乙/图_{i:03d}.jpg", rng.bytes(200_000), method=0) for i in range(120)])
    # "go" once the interpreter runs this code (a Ctrl-C during Python's own start-up is Python's), then as the
    # installed command: datakit's import (10 ms), the handler, the rest
    code = "import sys; print('go', flush=True); from datakit._entry import unzip_gbk; sys.exit(unzip_gbk())"
    for k, delay in enumerate((0.1, 0.3, 0.45, 0.6, 0.8)):
        out = tmp_path / f"out{k}"
        proc = subprocess.Popen([sys.executable, "-c", code, str(z), "-d", str(out)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        assert proc.stdout.readline() == "go\n"
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode in (0, 130) and "Traceback" not in err, (delay, proc.returncode, err)
        if proc.returncode == 130:
            assert err == "unzip-gbk: interrupted\n"
        assert [p.name for p in out.rglob("*unzip-part")] == [] if out.exists() else True


def test_a_ctrl_c_after_the_work_is_done_leaves_the_commands_exit_code(tmp_path: Path):
    # the attack: a Ctrl-C landing once unzip-gbk had extracted everything, while Python finalized (its handler
    # gone), killed the process with no word: exit -2 for a complete extraction
    z = write_zip(tmp_path / "a.zip", [gbk("乙/图.jpg", b"x" * 100)])
    code = ("import os, signal, sys; from datakit._entry import unzip_gbk; rc = unzip_gbk(); "
            "os.kill(os.getpid(), signal.SIGINT); sys.exit(rc)")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code, str(z), "-d", str(tmp_path / "out"), "-q"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (proc.returncode, proc.stderr) == (0, "")
    assert (tmp_path / "out" / "乙" / "图.jpg").read_bytes() == b"x" * 100


@pytest.mark.parametrize(
    ("extra", "want_dog"),
    [
        ([gbk("__MACOSX/cat/3.png", _png(90)), gbk("dog/x.png", symlink_to=b"../__MACOSX/cat/3.png")], []),
        ([gbk("cat/._3.png", _png(90)), gbk("dog/x.png", symlink_to=b"../cat/._3.png")], []),
        ([gbk("blob.bin", _png(90), encrypted=True), gbk("dog/x.png", symlink_to=b"../blob.bin")], []),
        ([gbk("blob.bin", _png(90), method=9), gbk("dog/x.png", symlink_to=b"../blob.bin")], []),
        ([gbk("blob.bin", _png(90)), gbk("dog/x.png", symlink_to=b"../blob.bin")], [("dog/x.png", "dog", 90)]),
    ],
)  # fmt: skip
def test_a_link_to_what_unzip_never_writes_leads_to_nothing_in_place_too(tmp_path: Path, extra, want_dog):
    # the attack: a link to Finder's metadata (__MACOSX/..., ._NAME) or to an encrypted or Deflate64 member: unzip-gbk
    # writes none of them, so the link leads to nothing and is removed; read in place it was an extra sample
    z = write_zip(tmp_path / "d.zip", [gbk("cat/1.png", _png(10)), gbk("dog/2.png", _png(50)), *extra])
    unzip(z, tmp_path / "out")
    want = [("cat/1.png", "cat", 10), ("dog/2.png", "dog", 50), *want_dog]
    assert _samples(open_dataset(tmp_path / "out")) == want
    assert _samples(open_dataset(z)) == want
    folder = write_zip(tmp_path / "f.zip", [gbk("cat/1.png", _png(10)), gbk("__MACOSX/m/3.png", _png(90)),
                                            gbk("dog", symlink_to=b"__MACOSX/m")])  # fmt: skip
    unzip(folder, tmp_path / "fout")
    assert _samples(open_dataset(tmp_path / "fout")) == _samples(open_dataset(folder)) == [("cat/1.png", "cat", 10)]


@pytest.mark.parametrize(("folder", "rivals"), [("农", ("gbk", "cp949", "big5")), ("楼", ("gbk", "cp949", "big5"))])
def test_names_of_one_chinese_character_are_ambiguous_not_silent(tmp_path: Path, capsys, folder, rivals):
    # the attack: a DOS-made GBK zip whose only non-ASCII text is one class folder, 农: read as CP949 '크' (写 as
    # UTF-8 'д'), with the highest plausibility and no warning: the class got another name, exit 0. One character
    # cannot choose: the warning names the rivals, and GBK is read
    z = write_zip(tmp_path / "a.zip", [ZipEntry(f"{folder}/{i}.jpg".encode("gbk"), b"x", made_by=0x0014)
                                       for i in range(3)])  # fmt: skip
    guess = detect_encoding(z)
    assert (guess.encoding, guess.ambiguous) == ("gbk", rivals)
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().err == (f"warning: {z}: names decoded as gbk, but ambiguous: {' or '.join(rivals)}; "
                                       "pass --encoding to choose\n")  # fmt: skip
    assert sorted(tree(tmp_path / "out")) == [f"{folder}/{i}.jpg" for i in range(3)]
    # two characters or more are evidence enough, as before
    two = write_zip(tmp_path / "b.zip", [ZipEntry(f"{folder}业/{i}.jpg".encode("gbk"), b"x", made_by=0x0014)
                                         for i in range(3)])  # fmt: skip
    assert (detect_encoding(two).encoding, detect_encoding(two).ambiguous) == ("gbk", ())


@pytest.mark.parametrize(("letters", "encoding", "read", "rival"), [("ÄÖÜß", "cp437", "cp437", "cp866"),
                                                                   ("ÆØÅ", "cp850", "cp866", "cp850"),
                                                                   ("Ñ", "cp850", "cp866", "cp437")])  # fmt: skip
def test_the_class_folders_of_an_alphabet_are_read_with_a_warning_not_as_cyrillic_without_one(
    tmp_path: Path, letters, encoding, read, rival
):
    # the attack: a handwriting or sign-language alphabet, one folder a letter, zipped on DOS: CP437's Ä Ö Ü ß came out
    # as CP866's О Щ Ъ с, CP850's Ñ as е, with no warning (a folder of one accented letter counted against its
    # reading, one of a Cyrillic letter did not)
    names = [f"{c}/000.png" for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" + letters]
    z = write_zip(tmp_path / "a.zip", [ZipEntry(n.encode(encoding), b"x", made_by=0x0014) for n in names])
    guess = detect_encoding(z)
    assert guess.encoding == read and rival in guess.ambiguous
    if read == encoding:
        assert [guess.decode(n.encode(encoding)) for n in names] == names


@pytest.mark.parametrize("word", ["фото", "отчет"])
def test_cyrillic_small_letters_that_another_code_page_reads_as_capitals_are_ambiguous(tmp_path: Path, word):
    # the attack: CP1251 'фото' ("photo", all small letters) beside 'video': read as KOI8-R 'ТНРН', capitals alone,
    # with no warning (a capital after a small letter marks mojibake; a word of capitals alone is no such mark)
    names = [f"{word}/1.jpg", f"{word}/2.jpg", "video/1.jpg"]
    z = write_zip(tmp_path / "r.zip", [ZipEntry(n.encode("cp1251"), b"x", made_by=0x0014) for n in names])
    guess = detect_encoding(z)
    assert guess.ambiguous == ("koi8_r", "cp1251")


def test_a_gbk_class_of_one_character_from_a_unix_host_is_read_as_gbk(tmp_path: Path):
    # the attack: 写 zipped by Info-ZIP under a GBK locale (host Unix): UTF-8 'д' at 1.40 against GBK's 0.70, outside
    # the rival margin: the class 'д', no warning
    for folder in ("写", "锌"):
        z = write_zip(tmp_path / "u.zip", [ZipEntry(f"{folder}/{i}.jpg".encode("gbk"), b"x", made_by=0x0314)
                                           for i in range(3)])  # fmt: skip
        guess = detect_encoding(z)
        assert guess.encoding == "gbk" and "utf-8" in guess.ambiguous, folder


@pytest.mark.parametrize(("names", "encoding"), [(["grün/0.jpg", "blau/0.jpg"], "cp850"),
                                                 (["chat/été_0.jpg", "chien/hiver_0.jpg"], "cp437"),
                                                 (["кот/1.jpg"], "cp866")])  # fmt: skip
def test_one_accented_letter_is_no_ambiguity_with_cjk_code_pages(tmp_path: Path, names, encoding):
    # the regression round: one-character evidence named CP932 and GBK as rivals of grün and été, whose readings
    # there are no common character
    z = write_zip(tmp_path / "a.zip", [ZipEntry(n.encode(encoding), b"x", made_by=0x0014) for n in names])
    guess = detect_encoding(z)
    assert guess.ambiguous == () and [guess.decode(n.encode(encoding)) for n in names] == names


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_link_named_as_a_folder_of_the_archives_own_members_is_called_that_not_sent_to_overwrite(
    tmp_path: Path, overwrite: bool
):
    # the attack: dog/2.png, then a link 'dog -> cat': the plain run said "dog exists and differs; not overwritten (use
    # --overwrite)", and with --overwrite "is a folder; not replaced by a link": the advice could not help
    z = write_zip(tmp_path / "l.zip", [gbk("dog/2.png", b"x"), gbk("dog", symlink_to=b"cat"), gbk("cat/1.png", b"y")])
    report = unzip(z, tmp_path / "out", overwrite=overwrite)
    assert report.problems == [
        f"{z}: member 'dog': {tmp_path / 'out' / 'dog'} is a folder of the archive's own members; not replaced by a link"
    ]
    assert sorted(tree(tmp_path / "out")) == ["cat/1.png", "dog/2.png"]


def test_a_damaged_zip64_field_names_its_member_not_a_truncated_archive(tmp_path: Path):
    # the attack: one member's central-directory sizes said 0xFFFFFFFF with a ZIP64 extra field too short to hold
    # them: "not a zip archive, or truncated", of an archive Info-ZIP lists whole
    z = tmp_path / "z64.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("cat/ok.txt", b"fine")
        bad = zipfile.ZipInfo("cat/bad.txt")
        bad.extra = struct.pack("<HHI", 1, 4, 5)
        zf.writestr(bad, b"A" * 10)
    data = bytearray(z.read_bytes())
    at = data.rindex(b"PK\x01\x02")  # the second member's central-directory entry
    data[at + 20 : at + 28] = b"\xff" * 8  # compressed and uncompressed sizes: in the ZIP64 field, which has 4 bytes
    z.write_bytes(bytes(data))
    with pytest.raises(ArchiveError) as err:
        unzip(z, tmp_path / "out")
    assert str(err.value) == (f"{z}: member 'cat/bad.txt': its ZIP64 size field in the central directory is damaged "
                              "(Corrupt zip64 extra field. File size not found.); the archive's list of members cannot "
                              "be read past it: make the archive again, or extract what a repair tool (zip -FF) "
                              "recovers")  # fmt: skip


def test_a_torn_extra_field_names_its_member(tmp_path: Path):
    # the attack: one member's Unicode Path field claiming 200 bytes past the end of its extra area: "not a zip
    # archive, or truncated (Corrupt extra field 7075 (size=200))", naming no member
    z = write_zip(tmp_path / "x.zip", [ZipEntry(b"dog/b.png", b"b"),
                                       ZipEntry(b"cat/a.png", b"a", extra=struct.pack("<HH", 0x7075, 200) + b"\x01")])  # fmt: skip
    with pytest.raises(ArchiveError) as err:
        ZipReader(z)
    assert str(err.value) == (f"{z}: member 'cat/a.png': its extra field in the central directory is damaged "
                              "(Corrupt extra field 7075 (size=200)); the archive's list of members cannot be read "
                              "past it: make the archive again, or extract what a repair tool (zip -FF) recovers")  # fmt: skip


def test_long_names_are_scored_by_their_start(tmp_path: Path, monkeypatch):
    # The attack: 100 GBK names of 10 KB each (a 1 MB zip) took 33 s of scoring before one refusal, twice over in
    # the command (once for the progress bar): only each name's first characters are scored, once
    from datakit import filenames

    scored: list[int] = []
    real = filenames.score
    monkeypatch.setattr(
        filenames, "score", lambda names, *a, **k: scored.extend(map(len, names)) or real(names, *a, **k)
    )
    z = write_zip(tmp_path / "long.zip", [gbk(f"{i:03d}" + "猫狗鸟鱼" * 1200 + ".jpg", b"x") for i in range(20)])
    assert unzip_gbk_main([str(z), "-l", "--json"]) == 0
    assert detect_encoding(z).encoding == "gbk"
    assert scored and max(scored) == filenames.SCORED_CHARS


def test_names_the_forced_encoding_cannot_read_are_refused_not_written_with_replacement_characters(
    tmp_path: Path, capsys
):
    # The attack: --encoding ascii (or cp932 on bytes it lacks) wrote folders named '��', exit 0, the only sign
    # "1 of 3 unflagged names decode" inside the reason
    z = write_zip(tmp_path / "g.zip", [gbk("猫/1.jpg", b"x"), gbk("狗/2.jpg", b"y"), gbk("a.txt", b"a")])
    out = tmp_path / "out"
    assert unzip_gbk_main([str(z), "-d", str(out), "--encoding", "ascii"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"{z}: member '\ufffd\ufffd/1.jpg': its name (bytes c3 a8 2f 31 2e 6a 70 67) is not ascii text; not extracted "
        "(name the archive's encoding with --encoding, or leave it to auto)",
        f"{z}: member '\ufffd\ufffd/2.jpg': its name (bytes b9 b7 2f 32 2e 6a 70 67) is not ascii text; not extracted "
        "(name the archive's encoding with --encoding, or leave it to auto)",
        "2 members not extracted (see above)",
    ]
    assert tree(out) == {"a.txt": b"a"}


def test_overwrite_on_a_nearly_full_disk_rewrites_the_files_that_differ(tmp_path: Path, monkeypatch):
    # The attack: v1 extracted, then v2 (same names and sizes, other bytes) with --overwrite on a disk with 1,500
    # bytes free: the files already there were taken off the bytes to write, and the first one rewritten stopped the
    # run with "stopped, more than 0 bytes written (over --max-total)", --max-total never given
    import datakit.archive as archive

    v1 = write_zip(tmp_path / "v1.zip", [gbk("a.bin", b"1" * 1000), gbk("b.bin", b"2" * 1000)])
    v2 = write_zip(tmp_path / "v2.zip", [gbk("a.bin", b"3" * 1000), gbk("b.bin", b"4" * 1000)])
    out = tmp_path / "out"
    assert unzip(v1, out).ok
    monkeypatch.setattr(archive.shutil, "disk_usage", lambda p: shutil_usage(1500))
    report = unzip(v2, out, overwrite=True)
    assert report.problems == [] and sorted(report.extracted) == ["a.bin", "b.bin"]
    assert tree(out) == {"a.bin": b"3" * 1000, "b.bin": b"4" * 1000}


def test_a_shift_jis_name_whose_second_byte_is_a_backslash_is_not_split_by_a_one_byte_reading(tmp_path: Path):
    # The attack: 構造/001.jpg in CP932 (構 is 8D 5C) beside 結構.jpg: read as CP866, 'Н\\Св/001.jpg', whose
    # backslash parted it into the folders Н/Св, and 結構.jpg became the hidden МЛН/.jpg, exit 0
    names = ["構造/001.jpg", "構造/002.jpg", "結構.jpg"]
    z = write_zip(tmp_path / "kozo.zip", [ZipEntry(n.encode("cp932"), b"x") for n in names])
    guess = detect_encoding(z)
    assert guess.encoding == "cp932" and guess.ambiguous == ()
    assert unzip(z, tmp_path / "out").ok
    assert tree(tmp_path / "out") == {n: b"x" for n in names}
    # a DOS archive whose folders are parted by backslashes alone keeps its one-byte readings
    dos = write_zip(tmp_path / "dos.zip", [ZipEntry("Фото\\1.jpg".encode("cp866"), b"x", made_by=0),
                                           ZipEntry("Фото\\2.jpg".encode("cp866"), b"y", made_by=0)])  # fmt: skip
    assert detect_encoding(dos).encoding == "cp866"
    # The regression: names parted by backslashes beside another tool's '/' name kept their one-byte reading
    # (Café\Müller.jpg was read as GBK, Caf閈M黮ler.jpg; Кошка\1.jpg as CP932)
    # and a one-byte name parted both ways (photos/Café\1.jpg) keeps its reading, no double-byte one plausible
    for codec, names in (("cp1252", ["Café\\Müller.jpg", "Café\\Größe.jpg", "readme/notes.txt"]),
                         ("cp866", ["Кошка\\1.jpg", "Собака\\2.jpg", "Кошка/3.jpg"]),
                         ("cp437", ["photos/Café\\1.jpg", "photos/Zürich.jpg"])):  # fmt: skip
        mixed = write_zip(tmp_path / f"{codec}.zip", [ZipEntry(n.encode(codec), b"x", made_by=0) for n in names])
        assert detect_encoding(mixed).encoding == codec
        assert unzip(mixed, tmp_path / codec).ok
        assert sorted(tree(tmp_path / codec)) == sorted(n.replace("\\", "/") for n in names)


def test_members_named_empty_or_as_the_target_folder_holding_bytes_are_named_not_dropped(tmp_path: Path, capsys):
    # once: '' gave a traceback (IndexError) and extracted nothing; '//' holding 9 bytes was dropped unsaid, exit 0
    z = write_zip(tmp_path / "e.zip", [ZipEntry(name=b"", data=b"x"), ZipEntry(name=b"//", data=b"important"),
                                       ZipEntry(name=b"./", data=b""), ZipEntry(name=b"./", data=b"more"),
                                       ZipEntry(name=b"ok.txt", data=b"ok")])  # fmt: skip
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"{z}: member '': refused: the name is empty",
                   f"{z}: member '//': named as the target folder itself but holds 9 bytes; not extracted",
                   f"{z}: member './': named as the target folder itself but holds 4 bytes; not extracted",
                   "3 members not extracted (see above)"]  # fmt: skip
    assert tree(tmp_path / "out") == {"ok.txt": b"ok"}


def test_a_part_left_of_another_version_of_a_file_is_removed_when_the_file_is_written(tmp_path: Path):
    # once: a run killed on v1's cat/1.bin left its part, tagged with v1's CRC-32 and size; v2's run wrote cat/1.bin
    # and the 100 MB part stayed beside it, unsaid, for good
    z = write_zip(tmp_path / "v2.zip", [ZipEntry(name=b"cat/1.bin", data=b"v2" * 100), ZipEntry(name=b"cat/2.bin")])
    out = tmp_path / "out"
    (out / "cat").mkdir(parents=True)
    part = out / "cat" / ".1.bin.0badc0de.unzip-part"
    part.write_bytes(b"v1" * 10)
    try:  # the mark a run puts on its parts while it writes them
        os.setxattr(part, "user.datakit-unzip-part", b"1")
    except OSError:
        pytest.skip("this file system keeps no extended attributes")
    (out / "cat" / ".3.bin.0badc0de.unzip-part").write_bytes(b"of a file this archive does not hold")
    (out / "cat" / ".1.bin.unzip-part").write_bytes(b"no tag: not a part of datakit's")
    # the next attack: a file of yours (or one an earlier archive wrote) named as such a part was deleted
    (out / "cat" / ".2.bin.0123abcd.unzip-part").write_bytes(b"mine" * 500)
    report = unzip(z, out)
    assert report.ok and sorted(report.extracted) == ["cat/1.bin", "cat/2.bin"]
    assert report.notes == [
        f"{out}/cat/.1.bin.0badc0de.unzip-part: removed, the part an interrupted extraction left of another version "
        "of '1.bin'",
        f"{out}/cat/.2.bin.0123abcd.unzip-part: left there, named as the part an interrupted extraction leaves of "
        "another version of '2.bin' but not marked as one; remove it if it is",
    ]
    assert sorted(p.name for p in (out / "cat").iterdir()) == [".1.bin.unzip-part", ".2.bin.0123abcd.unzip-part",
                                                               ".3.bin.0badc0de.unzip-part", "1.bin", "2.bin"]  # fmt: skip
    assert os.listxattr(out / "cat" / "1.bin") == []  # the file put in place carries no mark


def test_an_archive_of_more_files_than_the_file_system_has_inodes_for_is_refused(tmp_path: Path, monkeypatch):
    import datakit.archive as archive

    real = os.statvfs
    z = write_zip(tmp_path / "many.zip", [ZipEntry(name=f"d{k % 3}/{k}.txt".encode()) for k in range(40)])

    def few(path):
        st = real(path)
        return os.statvfs_result((*st[:5], 1000, 30, 30, *st[8:]))

    monkeypatch.setattr(archive.os, "statvfs", few)
    with pytest.raises(ArchiveError) as err:
        unzip(z, tmp_path / "new" / "out")
    assert str(err.value) == (f"{z}: refused, its members need 43 files and folders but only 30 more fit in "
                              f"{tmp_path / 'new' / 'out'} (inodes; a bomb of empty files?)")  # fmt: skip
    assert not (tmp_path / "new").exists()
    monkeypatch.setattr(archive.os, "statvfs", lambda p: os.statvfs_result((*real(p)[:5], 0, 0, 0, *real(p)[8:])))
    assert unzip(z, tmp_path / "out").ok  # a file system that counts no inodes (btrfs) is not refused
    monkeypatch.setattr(archive.os, "statvfs", few)
    assert unzip(z, tmp_path / "out").ok  # run again: the 43 are there already, none more is needed


def test_short_class_folders_decode_in_their_own_encoding_or_are_said_to_be_ambiguous(tmp_path: Path, capsys):
    # the attack: one- and two-class archives made on Windows (MS-DOS host, no UTF-8 flag) came out as another
    # language with exit 0 and no word: GBK 病害/健康 as 깹벧/숯영, 苹果 as 틥벎, 橘子 as KOI8-R Иывс, CP932 検証 as
    # 뙚뤪, and CP949 친구 as GBK 模备
    cases = [("gbk", ["病害", "健康"]), ("gbk", ["苹果"]), ("gbk", ["柠檬", "芒果"]), ("gbk", ["玫瑰", "雏菊"]),
             ("gbk", ["橘子"]), ("cp932", ["検証"]), ("cp932", ["友達", "欠陥"])]  # fmt: skip
    for k, (enc, classes) in enumerate(cases):
        names = [f"{c}/IMG_{i:04d}.jpg" for c in classes for i in range(3)]
        z = write_zip(tmp_path / f"{k}.zip", [ZipEntry(n.encode(enc), b"x", made_by=0x0014) for n in names])
        assert unzip_gbk_main([str(z), "-d", str(tmp_path / str(k))]) == 0
        out = capsys.readouterr()
        # read right; where another reading is close (玫瑰/雏菊 as CP949 천밧/뇐앞, common syllables), said so
        assert f"names decoded as {enc}" in out.out, (classes, out)
        assert out.err in ("", f"warning: {z}: names decoded as {enc}, but ambiguous: {enc} or cp949; pass --encoding "
                           "to choose\n"), (classes, out)  # fmt: skip
        assert sorted(tree(tmp_path / str(k))) == sorted(names)
    z = write_zip(tmp_path / "kr.zip", [ZipEntry(f"친구/{i}.jpg".encode("cp949"), b"x", made_by=0x0014)
                                        for i in range(3)])  # fmt: skip
    guess = detect_encoding(z)
    assert guess.ambiguous == ("gbk", "cp949")  # GBK's 模备 is as plausible: said so, and --encoding cp949 reads it
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "kr"), "--encoding", "cp949"]) == 0
    assert sorted(tree(tmp_path / "kr")) == [f"친구/{i}.jpg" for i in range(3)]


def test_a_gbk_name_flagged_utf8_that_happens_to_be_utf8_is_read_as_gbk_like_the_others(tmp_path: Path, capsys):
    # the attack: 猫/图.jpg in GBK under the UTF-8 flag is valid UTF-8 (è/ͼ.jpg): beside the unflagged GBK names it
    # made a class 'è' of its own, exit 0, no word
    entries = [ZipEntry("猫/图.jpg".encode("gbk"), b"x", utf8_flag=True, made_by=0x0014),
               ZipEntry("猫/狗.jpg".encode("gbk"), b"y", made_by=0x0014),
               ZipEntry("狗/猫.jpg".encode("gbk"), b"z", made_by=0x0014)]  # fmt: skip
    z = write_zip(tmp_path / "flag.zip", entries)
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().err == (f"warning: {z}: 1 name flagged UTF-8 is gbk like the names beside it: "
                                       "'猫/图.jpg' in gbk, in a folder of theirs ('è/ͼ.jpg' as UTF-8); read as "
                                       "gbk\n")  # fmt: skip
    assert tree(tmp_path / "out") == {"猫/图.jpg": b"x", "猫/狗.jpg": b"y", "狗/猫.jpg": b"z"}
    assert open_dataset(z).classes == ["狗", "猫"]
    # a name that is UTF-8 (written by another tool, flagged) stays UTF-8 beside GBK names
    entries[0] = ZipEntry("猫/图.jpg".encode(), b"x", utf8_flag=True, made_by=0x0014)
    z = write_zip(tmp_path / "real.zip", entries)
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "real")]) == 0
    assert capsys.readouterr().err == ""
    assert tree(tmp_path / "real") == {"猫/图.jpg": b"x", "猫/狗.jpg": b"y", "狗/猫.jpg": b"z"}
    # the regression round: names 7-Zip flags where the code page lacks a character (©, ä, €) beside GBK, CP949 and
    # CP866 names stay UTF-8
    for k, (enc, names, flagged) in enumerate([("gbk", ["张伟的照片.jpg", "北京/天安门.jpg"], "©2020.pdf"),
                                               ("cp949", ["사진/서울타워.jpg", "김민수.pdf"], "ä/ö/ü.jpg"),
                                               ("cp866", ["Фото/Москва.jpg", "Иванов.docx"], "€/x.txt")]):  # fmt: skip
        entries = [ZipEntry(n.encode(enc), b"x", made_by=0x0014) for n in names]
        z = write_zip(tmp_path / f"7z{k}.zip", [*entries, ZipEntry(flagged.encode(), b"y", utf8_flag=True)])
        assert [m.name for m in read_members(z)[0]] == [*names, flagged]


def test_links_of_the_users_through_a_name_the_archive_links_too_are_left_alone(tmp_path: Path):
    # The attack: the user's data -> /elsewhere and x -> data/file; the archive's data -> stuff (refused: it exists
    # and differs) and x -> data/file (refused: it leads out through data). x was removed as "left there by an
    # earlier run", though no run could have made it (data was never the archive's link)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "file").write_text("mine")
    out = tmp_path / "out"
    out.mkdir()
    (out / "data").symlink_to(elsewhere)
    (out / "x").symlink_to("data/file")
    z = write_zip(tmp_path / "u.zip", [gbk("data", symlink_to=b"stuff"), gbk("x", symlink_to=b"data/file")])
    report = unzip(z, out)
    assert report.problems == [
        f"{z}: member 'data': {out / 'data'} exists and differs; not overwritten (use --overwrite)",
        f"{z}: member 'x': symlink to 'data/file' points outside the target folder; not created",
    ]
    assert os.readlink(out / "x") == "data/file" and os.readlink(out / "data") == str(elsewhere)


def test_a_link_whose_resolution_walks_thousands_of_parts_is_refused_at_once(tmp_path: Path):
    # The attack: a chain of 39 links, each 'd/../' x 780 long, and links into it: 60,000 lstat calls a link, about
    # 0.4 s of CPU per 115 bytes of archive, all links valid (240 of them: 56 s)
    pad = b"d/../" * 120  # 240 parts: a link through one such link is fine, through two it walks more than 512
    members = [gbk("d/"), gbk("d/f.png", b"x"), gbk("one", symlink_to=pad + b"d/f.png")]
    members += [gbk("l3", symlink_to=pad + b"d/f.png"), gbk("l2", symlink_to=pad + b"l3"),
                gbk("l1", symlink_to=pad + b"l2")]  # fmt: skip
    z = write_zip(tmp_path / "c.zip", members)
    out = tmp_path / "out"
    report = unzip(z, out)
    assert report.problems == [
        f"{z}: member 'l1': symlink to {'d/../' * 12}...: its resolution walks more than 512 path parts (links of real "
        "folders take tens); not created"
    ]
    assert (out / "one").read_bytes() == b"x" and (out / "l2").read_bytes() == b"x" and not os.path.lexists(out / "l1")


def test_a_folder_that_was_there_keeps_its_mode_and_time(tmp_path: Path):
    # The attack: private/ (0700) and shared/ (2775) already there; the archive's private/ 0777 and shared/ 0700 made
    # private readable by every user and took shared's group access, without --overwrite; unzip leaves them
    out = tmp_path / "out"
    (out / "private").mkdir(parents=True)
    (out / "shared").mkdir()
    os.chmod(out / "private", 0o700)
    os.chmod(out / "shared", 0o2775)
    os.utime(out / "shared", (1_000_000_000, 1_000_000_000))
    z = write_zip(tmp_path / "m.zip", [ZipEntry(b"private/", mode=0o40777), ZipEntry(b"shared/", mode=0o40700),
                                       ZipEntry(b"private/new.txt", b"x"), ZipEntry(b"made/", mode=0o40750)])  # fmt: skip
    assert unzip(z, out).ok
    assert stat.S_IMODE(os.stat(out / "private").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(out / "shared").st_mode) == 0o2775 and os.stat(out / "shared").st_mtime == 1e9
    from datakit.io import _umask

    assert stat.S_IMODE(os.stat(out / "made").st_mode) == 0o750 & ~_umask() | 0o700  # made here: the archive's
    assert unzip(z, out, overwrite=True).ok  # --overwrite: the archive's, never locking the owner out
    assert stat.S_IMODE(os.stat(out / "shared").st_mode) == 0o700
    # the regression: a folder a killed run made (marked, its mode and time not yet set) is not yours: the re-run
    # gives it the archive's, as a clean run would, and takes the mark off every folder
    again = tmp_path / "again"
    (again / "made" / "deep").mkdir(parents=True)
    try:
        os.setxattr(again / "made", "user.datakit-unzip-part", b"1")
        os.setxattr(again / "made" / "deep", "user.datakit-unzip-part", b"1")
    except OSError:
        pytest.skip("this file system keeps no extended attributes")
    z2 = write_zip(tmp_path / "k.zip", [ZipEntry(b"made/", mode=0o40750), ZipEntry(b"made/deep/x.txt", b"x")])
    assert unzip(z2, again).ok
    assert stat.S_IMODE(os.stat(again / "made").st_mode) == 0o750 & ~_umask() | 0o700
    assert os.stat(again / "made").st_mtime == time.mktime((2024, 5, 17, 10, 30, 0, 0, 0, -1))
    assert os.listxattr(again / "made") == [] and os.listxattr(again / "made" / "deep") == []


def test_a_member_listed_but_refused_is_named_when_read(tmp_path: Path):
    # the attack: ZipReader.names() listed 'cat/../bird/4.png' and read() of that name was a bare KeyError naming
    # 'bird/4.png', a name the archive does not hold
    z = write_zip(tmp_path / "ip.zip", [ZipEntry(b"cat/1.png", b"x"), ZipEntry(b"cat/../bird/4.png", b"y")])
    reader = ZipReader(z)
    assert reader.names() == ["cat/1.png", "cat/../bird/4.png"]
    with pytest.raises(ArchiveError) as e:
        reader.read("cat/../bird/4.png")
    assert str(e.value) == (f"{z}: member 'cat/../bird/4.png' is not read: refused: a '..' component would escape "
                            "the target folder")  # fmt: skip
    with pytest.raises(KeyError):
        reader.read("bird/4.png")
    reader.close()


def test_a_utf8_flag_missing_from_a_local_header_only_is_read_by_the_central_one(tmp_path: Path):
    # The attack: the same name bytes in both headers, the UTF-8 flag set in the central directory only: the member
    # was refused as "its local header names it otherwise" and an empty 猫/ left behind; unzip warns and goes on
    # with the central flag
    import zipfile

    z = tmp_path / "f.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("猫/a.png", b"cat bytes")
        zf.writestr("狗/b.png", b"dog bytes")
    data = bytearray(z.read_bytes())
    assert data[:4] == b"PK\x03\x04" and data[7] & 0x08  # the first local header's flag bit 11
    data[7] &= ~0x08
    z.write_bytes(bytes(data))
    report = unzip(z, tmp_path / "out")
    assert report.problems == [] and sorted(report.extracted) == ["狗/b.png", "猫/a.png"]
    assert tree(tmp_path / "out") == {"猫/a.png": b"cat bytes", "狗/b.png": b"dog bytes"}
    assert ZipReader(z).read("猫/a.png") == b"cat bytes"
    # the other way: a local header flagged UTF-8 over GBK bytes that are valid UTF-8 too (GBK 猫), the central
    # directory not flagged: the central reading, 猫/2.jpg, as the other members' (it was refused)
    z.write_bytes(_hand_zip([("猫/1.jpg".encode("gbk"), b"one", 0, b"one", 0),
                             ("猫/2.jpg".encode("gbk"), b"two", 0, b"two", 0x800)]))  # fmt: skip
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "gbk"), "-q", "--encoding", "gbk"]) == 0
    assert tree(tmp_path / "gbk") == {"猫/1.jpg": b"one", "猫/2.jpg": b"two"}


def test_a_member_shorter_than_it_declares_is_refused_in_place_as_in_extraction(tmp_path: Path, capsys):
    # The attack: a deflated member declaring 1000 bytes whose stream (its CRC-32 made for it) holds 69: unzip-gbk
    # refused it, while ZipReader.read returned the 69 bytes and open_dataset read them as a sample
    actual = b"short stream " * 5
    z = tmp_path / "s.zip"
    data = bytearray(_hand_zip([(b"cat/a.png", actual, 8, _deflate(actual), 0), (b"dog/b.png", b"b", 0, b"b", 0)]))
    struct.pack_into("<I", data, 22, 1000)  # the first local header's uncompressed size
    central = data.find(b"PK\x01\x02")
    struct.pack_into("<I", data, central + 24, 1000)  # and its central directory entry's
    z.write_bytes(bytes(data))
    why = f"{z}: member 'cat/a.png': holds {len(actual)} bytes but declares 1000"
    with pytest.raises(ArchiveError) as e:
        ZipReader(z).read("cat/a.png")
    assert str(e.value) == why
    assert ZipReader(z).read("dog/b.png") == b"b"
    assert unzip_gbk_main([str(z), "-d", str(tmp_path / "out"), "-q"]) == 1
    assert capsys.readouterr().err.splitlines() == [why]


def test_names_extraction_refuses_are_not_read_in_place_either(tmp_path: Path):
    # The attack: members named '.', '..' and 'a<NUL>b.png' were refused by unzip-gbk, but read in place ('bad<NUL>'
    # gave its bytes; '.' and '..' said "member '' is in the archive twice")
    z = write_zip(tmp_path / "n.zip", [ZipEntry(b"cat/1.png", b"one"), ZipEntry(b"bad\x00name.png", b"nul"),
                                       ZipEntry(b".", b"dot"), ZipEntry(b"..", b"dotdot")])  # fmt: skip
    reader = ZipReader(z)
    assert reader.read("cat/1.png") == b"one"
    for name, why in ((".", "refused: the name is empty"),
                      ("..", "refused: a '..' component would escape the target folder"),
                      ("bad\x00name.png", "refused: the name contains a NUL byte")):  # fmt: skip
        with pytest.raises(ArchiveError) as e:
            reader.read(name)
        assert str(e.value) == f"{z}: member {name!r} is not read: {why}"
    for name in ("", "cat/..", "/"):  # a name that spells no member is named as given
        with pytest.raises(KeyError) as e:
            reader.read(name)
        assert e.value.args == (f"{z}: no member named {name!r}",)
    report = unzip(z, tmp_path / "out")
    assert report.extracted == ["cat/1.png"] and tree(tmp_path / "out") == {"cat/1.png": b"one"}


def test_finders_metadata_is_not_read_in_place_as_it_is_not_extracted(tmp_path: Path):
    # The attack: unzip-gbk leaves img/._a.png out ("the zip read in place leaves them out too"), but ZipReader.read
    # returned its bytes, and a label table over the zip read it as a sample the extracted folder does not have
    z = write_zip(tmp_path / "m.zip", [ZipEntry(b"img/._a.png", b"apple double"), ZipEntry(b"img/a.png", b"a"),
                                       ZipEntry(b"__MACOSX/img/._a.png", b"fork")])  # fmt: skip
    reader = ZipReader(z)
    assert reader.read("img/a.png") == b"a"
    for name in ("img/._a.png", "__MACOSX/img/._a.png"):
        with pytest.raises(ArchiveError) as e:
            reader.read(name)
        assert str(e.value) == (f"{z}: member {name!r} is not read: macOS Finder's metadata (__MACOSX/, ._NAME), "
                                "which unzip-gbk does not extract either")  # fmt: skip
    report = unzip(z, tmp_path / "out")
    assert report.extracted == ["img/a.png"] and tree(tmp_path / "out") == {"img/a.png": b"a"}


def test_unflagged_utf8_names_of_macos_and_emoji_are_read_as_utf8(tmp_path: Path):
    # the attack: macOS writes UTF-8 names decomposed and without the flag: 'Café' (e + U+0301) was read as CP437
    # 'Cafe╠ü' with plausibility -0.15 and no warning; 'party 🎉' as CP866 'party ЁЯОЙ', '★' as 'тШЕ'
    import unicodedata

    names = [unicodedata.normalize("NFD", n) for n in ("Café/1.png", "Crème brûlée/2.png")]
    for group in (names, ["party 🎉/1.jpg", "beach 🏖️/2.jpg"], ["★/1.jpg"], ["Dogs 🐶/1.jpg"]):
        z = write_zip(tmp_path / "m.zip", [ZipEntry(n.encode(), b"x", made_by=(3 << 8) | 20) for n in group])
        guess = detect_encoding(z)
        assert (guess.encoding, guess.ambiguous) == ("utf-8", ()), group
        assert ZipReader(z).names() == group
    # CP866 words that are 4-byte UTF-8 sequences (ёжик: a code point no plane assigns; Ёлка: a CJK one) stay CP866
    for name in ("ёжик.jpg", "Ёлка/1.jpg"):
        z = write_zip(tmp_path / "r.zip", [ZipEntry(name.encode("cp866"), b"x", made_by=20)])
        assert (detect_encoding(z).encoding, detect_encoding(z).ambiguous, ZipReader(z).names()) == (
            "cp866",
            (),
            [name],
        )


def test_a_reading_that_no_candidate_makes_plausible_is_said_to_be_ambiguous(tmp_path: Path):
    # the attack: Polish CP1250 names (a code page no candidate is) were read as CP1252 '£ódŸ/zdjêcie_1.jpg' with
    # plausibility 0.04, and said to be sure: no score was too low to be presented as certain
    z = write_zip(tmp_path / "pl.zip", [ZipEntry("Łódź/zdjęcie_1.jpg".encode("cp1250"), b"x", made_by=20)])
    guess = detect_encoding(z)
    assert (guess.encoding, guess.ambiguous) == ("cp850", ("cp850", "cp1252", "cp1250"))  # CP1250, watched, named
    assert guess.reason.startswith("ambiguous: cp850 or cp1252 or cp1250; pass --encoding (1 unflagged names written "
                                   "on DOS/Windows; plausibility cp850 0.00, cp1252 -0.35, cp1250 0.75)")  # fmt: skip
    assert ZipReader(z, encoding="cp1250").names() == ["Łódź/zdjęcie_1.jpg"]
    # symbols alone score low and are read right: no doubt said (rotation classes, an apostrophe, №)
    for name, enc in (("0°/1.jpg", "cp1252"), ("photos/Bob’s party.jpg", "cp1252"), ("№1/a.jpg", "cp1251")):
        z = write_zip(tmp_path / "s.zip", [ZipEntry(name.encode(enc), b"x", made_by=(11 << 8) | 20)])
        assert (detect_encoding(z).encoding, detect_encoding(z).ambiguous, ZipReader(z).names()) == (enc, (), [name])


@pytest.mark.parametrize("host", [20, (3 << 8) | 20])
def test_unflagged_utf8_words_of_other_scripts_and_gbk_zone_names_are_read_as_written(tmp_path: Path, host: int):
    # the attacks: macOS's Archive Utility writes UTF-8 names without the flag: kana class folders (ねこ, いぬ) were
    # read as CP866 'уБнуБУ', Greek, Hebrew, Arabic and Hindi ones as GBK or CP866 nonsense, mostly without a word;
    # GBK class folders of a capital and one character (A区) were read as Big5 'A⑹', with camera file names
    sets = [("ねこ", "いぬ"), ("がっこう", "ねこ"), ("γάτα", "σκύλος"), ("חתול", "כלב"), ("قطة", "كلب"),
            ("कुत्ता", "बिल्ली"), ("カメラ", "テレビ")]  # fmt: skip
    for words in sets:
        z = write_zip(tmp_path / "u.zip", [ZipEntry(f"{w}/{k}.png".encode(), b"x", made_by=host)
                                           for k, w in enumerate(words)])  # fmt: skip
        guess = detect_encoding(z)
        assert (guess.encoding, guess.ambiguous) == ("utf-8", ()), (words, guess.reason)
        assert ZipReader(z).names() == [f"{w}/{k}.png" for k, w in enumerate(words)]
    for zones in (("A区", "B区", "C区"), ("A栋", "B栋")):
        z = write_zip(tmp_path / "g.zip", [ZipEntry(f"dataset/{w}/IMG_000{k}.png".encode("gbk"), b"x", made_by=host)
                                           for k, w in enumerate(zones)])  # fmt: skip
        assert detect_encoding(z).encoding == "gbk", zones
        assert open_dataset(z).classes == sorted(zones)
    # GBK names that are valid UTF-8 Greek or Hebrew (虾尾 is CF BA CE B2, 'Ϻβ'; 专注 D7 A8 D7 A2): still GBK, as
    # before (the first cut of the change above read 4,772 such pairs as UTF-8, without a word)
    for words in (("虾尾", "虾味"), ("洗胃", "装转")):
        z = write_zip(tmp_path / "x.zip", [ZipEntry(f"{w}/{k}.png".encode("gbk"), b"x", made_by=host)
                                           for k, w in enumerate(words)])  # fmt: skip
        assert ZipReader(z).names() == [f"{w}/{k}.png" for k, w in enumerate(words)]
    # Big5 and CP949 zones beside words (B區, A組, B동): GBK reads them as a capital before a GB2312 character too
    # (B跋, A舱, B悼), and a first cut of the change above took those; only a unit's or a common character is
    for words, enc in ((("竹筍", "A組"), "big5"), (("불량", "B동"), "cp949"), (("B조", "1공장", "A조"), "cp949")):
        z = write_zip(tmp_path / "o.zip", [ZipEntry(f"{w}/IMG_000{k}.jpg".encode(enc), b"x", made_by=host)
                                           for k, w in enumerate(words)])  # fmt: skip
        assert ZipReader(z).names() == [f"{w}/IMG_000{k}.jpg" for k, w in enumerate(words)], words
    # a Big5 class folder alone that GBK reads as a Greek letter (米, A6 CC: 'μ'): Big5
    z = write_zip(tmp_path / "b.zip", [ZipEntry(f"{w}/1.png".encode("big5"), b"x", made_by=host)
                                       for w in ("米", "bean", "corn")])  # fmt: skip
    assert open_dataset(z).classes == ["bean", "corn", "米"]


def test_two_zips_joined_into_one_file_are_refused_not_read_as_the_last(tmp_path: Path, capsys):
    # the attack: `cat a.zip b.zip > all.zip`: zip readers take the last archive alone (the first as a self-extractor's
    # program): unzip-gbk extracted eel/1.png, exit 0, and the zip read in place had one class; cat and dog were lost
    first = build_zip([ZipEntry(b"cat/1.png", b"c"), ZipEntry(b"dog/1.png", b"d")])
    joined = tmp_path / "all.zip"
    joined.write_bytes(first + build_zip([ZipEntry(b"eel/1.png", b"e")]))
    want = (f"{joined}: two zip archives joined into one file (cat a.zip b.zip?): the {len(first)} bytes before this "
            "archive's members hold another archive, of 2 members, which zip readers skip; extract that one on its "
            "own, or zip all the files again as one archive")  # fmt: skip
    assert unzip_gbk_main([str(joined), "-d", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err == f"unzip-gbk: error: {want}\n"
    assert not (tmp_path / "out").exists()
    with pytest.raises(ArchiveError) as err:
        open_dataset(joined)
    assert str(err.value) == want
    alone = tmp_path / "first.zip"  # each part on its own is read whole
    alone.write_bytes(first)
    assert open_dataset(alone).classes == ["cat", "dog"]
    # a first archive ending in ZIP64 end records (its central directory is found through them)
    buf = io.BytesIO()
    limit = zipfile.ZIP_FILECOUNT_LIMIT
    zipfile.ZIP_FILECOUNT_LIMIT = 1  # zipfile writes the ZIP64 records past this many members
    try:
        with zipfile.ZipFile(buf, "w") as zf:
            zf.writestr("cat/1.png", b"c")
            zf.writestr("dog/1.png", b"d")
    finally:
        zipfile.ZIP_FILECOUNT_LIMIT = limit
    assert b"PK\x06\x06" in buf.getvalue()
    joined.write_bytes(buf.getvalue() + build_zip([ZipEntry(b"eel/1.png", b"e")]))
    with pytest.raises(ArchiveError) as err:
        open_dataset(joined)
    assert str(err.value).startswith(f"{joined}: two zip archives joined into one file (cat a.zip b.zip?): the "
                                     f"{len(buf.getvalue())} bytes before this archive's members hold another "
                                     "archive, of 2 members")  # fmt: skip


def test_a_stored_archive_cut_short_after_a_zip_it_holds_is_refused_not_read_as_that_zip(tmp_path: Path, capsys):
    # the attack: a zip -0 archive (JPEGs stored) half downloaded, cut 5000 bytes after a member that is itself a zip
    # (val.zip, or an .xlsx): zip readers found that member's end record in the last 64 KiB, and the archive was read
    # as the inner one: 4 samples of 60, "0 problems", unzip-gbk extracted 4 files, exit 0
    inner = build_zip([ZipEntry("猫/1.png".encode("gbk"), b"c"), ZipEntry("狗/1.png".encode("gbk"), b"d")])
    whole = build_zip([ZipEntry(f"猫/{i:02d}.png".encode("gbk"), bytes(3000), method=0) for i in range(20)]
                      + [ZipEntry(b"val.zip", inner, method=0)]
                      + [ZipEntry(f"狗/{i:02d}.png".encode("gbk"), bytes(3000), method=0) for i in range(20)])  # fmt: skip
    cut = tmp_path / "dataset.zip"
    for extra in (5000, 0):  # the cut anywhere after the inner archive's end, or right at it
        cut.write_bytes(whole[: whole.index(inner) + len(inner) + extra])
        want = (
            f"{cut}: truncated: its last end record is that of a zip stored within it (a member at the start of "
            "the file is not in that record's list), the archive's own end is missing; download or copy it again"
        )
        assert unzip_gbk_main([str(cut), "-d", str(tmp_path / "out")]) == 1
        assert capsys.readouterr().err == f"unzip-gbk: error: {want}\n"
        assert not (tmp_path / "out").exists()
        with pytest.raises(ArchiveError) as err:
            open_dataset(cut)
        assert str(err.value) == want
    cut.write_bytes(whole)  # the whole archive: read whole
    assert len(open_dataset(cut)) == 40


@pytest.mark.parametrize(
    ("enc", "names", "host", "read_as", "named"),
    [
        ("cp857", ["kedi/ağaç.jpg", "köpek/şişe.jpg", "kuş/ılık.jpg"], 0, ["kedi/aºaç.jpg", "köpek/ƒiƒe.jpg", "kuƒ/ìlìk.jpg"],
         ("cp437", "cp857", "cp852")),
        ("cp1254", ["kedi/ağaç.jpg", "köpek/şişe.jpg", "kuş/ılık.jpg"], 3, ["kedi/aðaç.jpg", "köpek/þiþe.jpg", "kuþ/ýlýk.jpg"],
         ("cp1252", "cp1254")),
        ("cp852", ["kot/źródło.jpg", "pies/łódź.jpg"], 0, ["kot/½ródêo.jpg", "pies/êód½.jpg"], ("cp437", "cp852")),
        ("cp874", ["แมว/รูปภาพ.jpg", "หมา/ภาพถ่าย.jpg"], 0, ["бБЗ/ГЩ»АТѕ.jpg", "ЛБТ/АТѕ¶иТВ.jpg"], ("cp1251", "cp874")),
    ],
)  # fmt: skip
def test_a_code_page_that_is_no_candidate_is_named_when_it_reads_far_better(tmp_path: Path, capsys, enc, names, host,
                                                                            read_as, named):  # fmt: skip
    # the attack: Turkish, Polish and Thai names were read as CP437, CP1252 or CP1251 ('kuş' as 'kuƒ') with no doubt
    # said, exit 0: these code pages are no candidates (CP1254 reads most of CP1252, CP852 most of CP437), so they
    # are never chosen, but a reading of theirs far more plausible than the best makes the verdict ambiguous
    z = write_zip(tmp_path / "w.zip", [ZipEntry(n.encode(enc), b"x", made_by=(host << 8) | 20) for n in names])
    guess = detect_encoding(z)
    assert guess.ambiguous == named
    assert sorted(ZipReader(z).names()) == sorted(read_as)
    assert sorted(ZipReader(z, encoding=enc).names()) == sorted(names)
    assert unzip_gbk_main([str(z), "-l"]) == 0
    assert capsys.readouterr().err == (f"warning: {z}: names decoded as {named[0]}, but ambiguous: "
                                       f"{' or '.join(named)}; pass --encoding to choose\n")  # fmt: skip


def test_no_empty_folder_is_left_behind_members_refused(tmp_path: Path, capsys):
    # the attack: dog/deep/b.txt's bytes do not match its CRC-32; it is refused, and its folders were left
    # empty, which the dataset read from the target then refused as an empty class folder
    path = write_zip(tmp_path / "a.zip", [
        ZipEntry(name=b"cat/a.txt", data=b"meow", method=0),
        ZipEntry(name=b"dog/deep/b.txt", data=b"woof", method=0),
        ZipEntry(name=b"empty/", data=b""),
        ZipEntry(name=b"cat/c.txt", data=b"purr", method=0),
    ])  # fmt: skip
    raw = bytearray(path.read_bytes())
    raw[raw.index(b"woof")] = ord("W")
    path.write_bytes(bytes(raw))
    out = tmp_path / "out"
    (out / "cat").mkdir(parents=True)  # a folder of the user's, there before: kept as it is
    report = unzip(path, out)
    assert report.problems == [f"{path}: member 'dog/deep/b.txt': data does not match its CRC-32 (corrupt)"]
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == ["cat", "cat/a.txt", "cat/c.txt", "empty"]
    # a killed run's folder (marked as a part) for the same refused member goes the same way on the rerun
    (out / "dog" / "deep").mkdir(parents=True)
    try:
        for p in (out / "dog", out / "dog" / "deep"):
            os.setxattr(p, "user.datakit-unzip-part", b"1")
    except OSError:
        pytest.skip("no extended attributes on this file system")
    (out / "mine").mkdir()  # an empty folder of the user's, not in the archive: kept
    assert main(["unzip", str(path), "-d", str(out)]) == 1
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "cat", "cat/a.txt", "cat/c.txt", "empty", "mine"]  # fmt: skip


@pytest.mark.parametrize("comment", [b"made by scanner PK\x05\x06 v2", b"PK\x05\x06 PK\x05\x06PK\x05\x06"],
                         ids=["once", "three-times"])  # fmt: skip
def test_an_end_record_signature_in_the_comment(tmp_path: Path, comment: bytes):
    # the attack: an archive whose comment holds the end record's signature was refused as "not a zip archive, or
    # truncated" (Info-ZIP lists it), as zipfile takes the last signature for the end record
    path = tmp_path / "注释.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("猫/1.txt", b"meow")
        z.writestr("狗/2.txt", b"woof")
        z.comment = comment
    with ZipReader(path) as r:
        assert sorted(r.names()) == ["狗/2.txt", "猫/1.txt"]
        assert r.read("猫/1.txt") == b"meow"
    report = unzip(path, tmp_path / "out")
    assert report.problems == [] and sorted(report.extracted) == ["狗/2.txt", "猫/1.txt"]
    assert tree(tmp_path / "out") == {"狗/2.txt": b"woof", "猫/1.txt": b"meow"}
    # with GBK names flagged UTF-8 by the tool that made it: both read past, the flag ignored with its warning
    flagged = write_zip(tmp_path / "flagged.zip", [gbk("猫/一只小猫.txt", b"meow", utf8_flag=True),
                                                   gbk("狗/二只小狗.txt", b"woof", utf8_flag=True)])  # fmt: skip
    flagged.write_bytes(flagged.read_bytes()[:-2] + len(comment).to_bytes(2, "little") + comment)
    with ZipReader(flagged) as r:
        assert sorted(r.names()) == ["狗/二只小狗.txt", "猫/一只小猫.txt"] and r.read("猫/一只小猫.txt") == b"meow"


@pytest.mark.parametrize("comment", [b"", b"made by scanner PK\x05\x06 v2"], ids=["no-comment", "signature"])
def test_an_end_record_in_a_members_data_does_not_replace_the_archives(tmp_path: Path, comment: bytes):
    # the attack on the mend above: a stored member holding a small archive and an end record whose comment
    # reaches the end of the file; zipfile and Info-ZIP read the real archive, whose end record comes last
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as z:
        z.writestr("cat/1.txt", b"EVIL")
    fake = inner.getvalue()
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("cat/1.txt", b"meow")
        z.writestr("notes.bin", fake)
        z.comment = comment  # with a signature in it, zipfile refuses the archive and the retry takes the last
    raw = bytearray(path.read_bytes())
    at = raw.index(fake) + len(fake) - 2  # the member's end record: its comment now reaches the end of the file
    raw[at : at + 2] = (len(raw) - at - 2).to_bytes(2, "little")
    path.write_bytes(bytes(raw))
    with ZipReader(path) as r:
        assert sorted(r.names()) == ["cat/1.txt", "notes.bin"] and r.read("cat/1.txt") == b"meow"


def test_links_removed_in_a_cascade_are_resolved_a_bounded_number_of_times(tmp_path: Path, monkeypatch):
    # the attack: f0/dead.png -> nosuch.png, then f{i}/x.png -> ../f{i-1}/../c/1.png: each link leads through the
    # folder of the one before, removed once that link is; every link was resolved again per folder removed, on
    # disk and in the zip read in place: 1500 links (175 KB of zip) took 169 s to extract, 6.5 s to open
    import datakit.archive as arch
    from datakit.datasets import open_dataset

    k = 300
    entries = [gbk("c/1.png", _png(10)), gbk("f0/dead.png", symlink_to=b"nosuch.png")]
    entries += [gbk(f"f{i}/x.png", symlink_to=f"../f{i - 1}/../c/1.png".encode()) for i in range(1, k)]
    calls = {"_resolve": 0, "lookup": 0}
    resolve, lookup = arch._resolve, arch.ZipReader.lookup

    def counted_resolve(*a, **kw):
        calls["_resolve"] += 1
        return resolve(*a, **kw)

    def counted_lookup(self, *a, **kw):
        calls["lookup"] += 1
        return lookup(self, *a, **kw)

    monkeypatch.setattr(arch, "_resolve", counted_resolve)
    monkeypatch.setattr(arch.ZipReader, "lookup", counted_lookup)
    for order, z in (("forward", entries), ("backward", [*entries[:2], *entries[:1:-1]])):
        z = write_zip(tmp_path / f"{order}.zip", z)
        calls.update(_resolve=0, lookup=0)
        report = unzip(z, tmp_path / order)
        ds = open_dataset(z)
        assert len(report.problems) == k and tree(tmp_path / order) == {"c/1.png": _png(10)}
        named = sorted(re.search(r"member '([^']+)'", p).group(1) for p in report.problems)
        assert named == sorted(["f0/dead.png", *(f"f{i}/x.png" for i in range(1, k))])
        assert all(p.endswith("leads to nothing inside the target; removed") for p in report.problems)
        assert ds.classes == ["c"] and len(ds) == 1
        assert calls["_resolve"] <= 4 * k and calls["lookup"] <= 8 * k, calls  # were k * k


def test_a_link_through_one_removed_for_a_link_already_in_the_folder_goes_too(tmp_path: Path):
    # the attack: the folder holds a link of yours, old -> b/../x.png; the zip's b -> . would make it lead out, so b
    # is removed; c/m.png -> ../b/c/1.png then led to nothing and stayed (the folder listed a sample it cannot read)
    from datakit.datasets import open_dataset

    z = write_zip(tmp_path / "b.zip", [gbk("c/1.png", _png(10)), gbk("b", symlink_to=b"."),
                                       gbk("c/m.png", symlink_to=b"../b/c/1.png"),
                                       gbk("z/h.png", symlink_to=b"nosuch.png")])  # fmt: skip
    out = tmp_path / "out"
    out.mkdir()
    (out / "old").symlink_to("b/../x.png")
    report = unzip(z, out)
    assert report.problems == [
        f"{z}: member 'z/h.png': symlink to 'nosuch.png' leads to nothing inside the target; removed",
        f"{z}: member 'b': symlink would make 'old', a link already in the folder, resolve outside the target; removed",
        f"{z}: member 'c/m.png': symlink to '../b/c/1.png' leads to nothing inside the target; removed",
    ]
    assert tree(out) == {"c/1.png": _png(10)} and links_under(out) == {"old": "b/../x.png"}
    assert list(open_dataset(out).files) == ["c/1.png"]  # (in place, with no link of yours, b is a class and m.png is)


def test_a_dead_link_a_killed_run_made_is_removed_by_the_next_run(tmp_path: Path):
    # the attack: unzip-gbk killed once its links were made, before it checked them: the re-run found z/h.png ->
    # nosuch.png as the zip has it ("already there and identical"), left it, and exited 0; the folder had a class
    # 'z' with a sample it cannot read, which the zip read in place does not have
    from datakit.datasets import open_dataset

    z = write_zip(tmp_path / "k.zip", [gbk("c/1.png", _png(10)), gbk("z/h.png", symlink_to=b"nosuch.png")])
    out = tmp_path / "out"
    killed = subprocess.run(  # killed at the worst moment: the links made, none checked
        [sys.executable, "-c", "import os, sys; from datakit import archive; "
         "archive._recheck_links = lambda *a, **k: os._exit(9); archive.unzip(sys.argv[1], sys.argv[2])",
         str(z), str(out)], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert killed.returncode == 9 and os.readlink(out / "z" / "h.png") == "nosuch.png", killed.stderr
    report = unzip(z, out)
    assert report.problems == [f"{z}: member 'z/h.png': symlink to 'nosuch.png' leads to nothing inside the target; "
                               "removed"]  # fmt: skip
    assert tree(out) == {"c/1.png": _png(10)} and links_under(out) == {}
    assert open_dataset(out).classes == open_dataset(z).classes == ["c"]


def test_a_link_chain_walking_too_many_path_parts_is_left_out_in_place_as_extraction_refuses_it(tmp_path: Path):
    # the attack: links L0..L3, each 'cat/../' x 200 then the next, L3 -> cat/1.png, and dog/x0..x29 -> ../L0:
    # unzip-gbk refuses the chain (its resolution walks past 512 path parts) and the extracted folder has 2 samples;
    # read in place the zip had 32, 30 of them cat's pixels labelled dog, and opening it walked every chain whole
    import cv2

    png = cv2.imencode(".png", np.zeros((4, 4, 3), np.uint8))[1].tobytes()
    entries = [ZipEntry(b"cat/1.png", png), ZipEntry(b"dog/2.png", png)]
    for i in range(4):
        nxt = f"L{i + 1}" if i < 3 else "cat/1.png"
        entries.append(ZipEntry(f"L{i}".encode(), symlink_to=("cat/../" * 200 + nxt).encode()))
    entries += [ZipEntry(f"dog/x{k}.png".encode(), symlink_to=b"../L0") for k in range(30)]
    z = write_zip(tmp_path / "chain.zip", entries)
    unzip(z, tmp_path / "out")
    extracted = open_dataset(tmp_path / "out")
    in_place = open_dataset(z)
    assert (in_place.classes, len(in_place)) == (extracted.classes, len(extracted)) == (["cat", "dog"], 2)


def test_a_network_file_systems_reporting_unit_is_not_taken_for_its_blocks(tmp_path: Path, monkeypatch):
    # the false refusal: CephFS reports sizes in 4 MiB units (f_frsize); 300 files of 2 KB were counted 4 MiB each
    # and refused on a disk with 1 GiB free
    import collections
    import shutil

    z = tmp_path / "small.zip"
    with zipfile.ZipFile(z, "w") as zf:
        for i in range(300):
            zf.writestr(f"cat/{i}.jpg", os.urandom(2000))
    real = os.statvfs

    def ceph(path):
        st = real(path)
        return os.statvfs_result((4 << 20, 4 << 20, 256, 256, 256, st.f_files, st.f_ffree, st.f_favail, st.f_flag,
                                  st.f_namemax))  # fmt: skip

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(os, "statvfs", ceph)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(1 << 30, 0, 1 << 30))
    assert len(unzip(z, tmp_path / "out").extracted) == 300


def test_a_killed_runs_parts_are_room_to_the_next_and_removed_beside_a_refusal(tmp_path: Path, monkeypatch):
    # the attacks: (1) on a disk that holds the archive, a SIGKILLed run's hidden part made the re-run refuse for
    # space (the part counted as taken); (2) a killed --overwrite's part of a member the re-run refuses ('exists and
    # differs') was kept for ever
    import collections
    import shutil

    from datakit.archive import _temp_name

    z = tmp_path / "a.zip"
    with zipfile.ZipFile(z, "w") as zf:
        for i in range(2):
            zf.writestr(f"cat/{i}.bin", os.urandom(10000))
    members, _ = read_members(z)
    block = os.statvfs(tmp_path).f_frsize
    out = tmp_path / "out"
    (out / "cat").mkdir(parents=True)
    first = next(m for m in members if m.name == "cat/0.bin")
    part = out / "cat" / _temp_name("0.bin", first)
    part.write_bytes(os.urandom(8000))  # what a run killed while writing cat/0.bin left
    need = 2 * (-(-10000 // block) * block)  # the folder is there already
    held = -(-8000 // block) * block
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(1 << 30, 0, need - held))
    report = unzip(z, out)
    assert (sorted(report.extracted), part.exists()) == (["cat/0.bin", "cat/1.bin"], False)
    monkeypatch.undo()
    (out / "cat" / "0.bin").write_bytes(b"edited")
    part.write_bytes(os.urandom(5000))  # a killed --overwrite's part of it
    report = unzip(z, out)
    assert report.problems == [f"{z}: member 'cat/0.bin': {out / 'cat' / '0.bin'} exists and differs; not overwritten "
                               "(use --overwrite)"]  # fmt: skip
    assert not part.exists()


def test_ctrl_c_during_the_last_check_of_the_links_waits_for_its_end():
    # the attack: Ctrl-C while the links made were checked a last time stopped the check half-way: a link that
    # leads out of the target through another link (a -> b/b/../../etc, b -> .) was left
    import signal

    from datakit.archive import _signals_held

    done = []
    with pytest.raises(KeyboardInterrupt), _signals_held():
        signal.raise_signal(signal.SIGINT)
        done.append("checked")
    assert done == ["checked"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
