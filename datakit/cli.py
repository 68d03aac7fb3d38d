"""The ``datakit`` and ``unzip-gbk`` commands: parse arguments, call the library, report.

Exit codes: 0 success, 1 a problem with the data (one line per problem on stderr), 2 bad usage.
The exception's type decides the code (:mod:`datakit.errors`), never its message. Every option
is checked when it is parsed, so a bad value is one line and exit 2, before any work starts.
Nothing written replaces an existing file without ``--overwrite``. Under ``torchrun`` only rank
0 prints, writes files and shows progress; the other ranks do their share of the work.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import errno
import io
import logging
import os
import re
import signal
import statistics
import sys
import threading
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path

from datakit.errors import DatakitError, UsageError, refuse_empty

TABLE_SUFFIXES = (".xlsx", ".xlsm", ".csv", ".tsv", ".txt", ".lst")

__all__ = ["main", "unzip_gbk_main", "UsageError"]


class _Parser(argparse.ArgumentParser):
    def _print_message(self, message: str, file=None) -> None:
        """argparse's, with what the stream's encoding cannot write escaped (--help's Chinese examples under
        LC_ALL=C or PYTHONIOENCODING=ascii): never a UnicodeEncodeError."""
        if not message:
            return
        file = file or sys.stderr
        try:
            try:
                file.write(message)
            except UnicodeEncodeError:
                enc = getattr(file, "encoding", None) or "ascii"
                file.write(message.encode(enc, "backslashreplace").decode(enc))
        except (AttributeError, OSError):
            pass

    def error(self, message: str):  # argparse's own usage errors: exit 2 with the usage line
        if _rank() == 0:
            self.print_usage(sys.stderr)
            self.exit(2, f"{self.prog}: error: {message}\n")
        self.exit(2)


def _command(sub, name: str, help: str, example: str) -> argparse.ArgumentParser:
    """A subcommand whose --help ends with ``example`` (shown as written)."""
    raw = argparse.RawDescriptionHelpFormatter
    description = help[:1].upper() + help[1:] + "."
    return sub.add_parser(name, help=help, description=description, epilog="example:\n" + example, formatter_class=raw)


# ---------------------------------------------------------------------------------------------
# output helpers


def display_width(text: str) -> int:
    """Terminal columns taken by ``text`` (CJK characters take two)."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def pad(text: str, width: int) -> str:
    return text + " " * max(0, width - display_width(text))


def print_table(header: Sequence[str], rows: Sequence[Sequence[object]], file=None) -> None:
    file = file or sys.stdout
    cells = [[str(h) for h in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(display_width(r[i]) for r in cells) for i in range(len(header))]
    for i, r in enumerate(cells):
        print("  ".join(pad(c, w) for c, w in zip(r, widths)).rstrip(), file=file)
        if i == 0:
            print("  ".join("-" * w for w in widths), file=file)


def _print_json(obj: object) -> None:
    import json

    from datakit.filenames import json_text

    encoding = (getattr(sys.stdout, "encoding", None) or "utf-8").lower().replace("_", "-")
    if encoding not in ("utf-8", "utf8"):  # Python's backslashreplace would write \xe9, which JSON has not
        print(json.dumps(obj, ensure_ascii=True, indent=2))
        return
    print(json_text(obj, indent=2))


# ---------------------------------------------------------------------------------------------
# option types: each one rejects a bad value when it is parsed (argparse turns it into exit 2)


def parse_bytes(text: str) -> int:
    """``"500M"``, ``"10G"``, ``"1024"`` to a byte count."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 500M or 10G)")
    value = int(float(m.group(1)) * 1024 ** " kmgt".index(m.group(2) or " "))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text!r}")
    return value


def _ratio(text: str) -> float:
    value = _positive_float(text)
    if value < 1:  # a stored member expands 1:1: under it, every archive would be a bomb
        raise argparse.ArgumentTypeError(f"must be at least 1 (a stored member expands 1:1), got {text}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _nonempty_path(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("an empty path; write . for the current folder")
    return text


def int_range(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type for a whole number in ``lo..hi`` (no upper bound when ``hi`` is None)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < lo or (hi is not None and value > hi):
            want = f"{lo}..{hi}" if hi is not None else f">= {lo}"
            raise argparse.ArgumentTypeError(f"must be {want}, got {value}")
        return value

    parse.__name__ = "int"  # argparse names the type in its messages
    return parse


_count = int_range(1)  # sizes, counts, batch sizes


def _worker_room(value: int) -> int:
    """``value`` worker processes, refused where this machine cannot hold them (:func:`datakit.tuning.worker_room`)."""
    from datakit.tuning import worker_room

    why = worker_room(value)
    if why is not None:
        raise argparse.ArgumentTypeError(f"{value} worker processes: {why}")
    return value


def _workers(text: str) -> int:  # 0: in the main process
    return _worker_room(int_range(0)(text))


_workers.__name__ = "int"  # argparse names the type in its messages


def _encoding(text: str) -> str:
    """``auto`` or a codec Python knows (gbk, big5, cp932, utf-8-sig, ...)."""
    if text.lower() == "auto":
        return "auto"
    from datakit.filenames import text_codec

    name = text_codec(text)  # None also for rot13, hex, base64: not bytes to text
    if name is None:
        raise argparse.ArgumentTypeError(f"unknown encoding {text!r}: use auto, gbk, big5, cp932, utf-8...")
    return name


def _extension(*allowed: str) -> Callable[[str], str]:
    """An argparse type for an output file name ending in one of ``allowed``."""

    def parse(text: str) -> str:
        if Path(text).suffix.lower() not in allowed:
            raise argparse.ArgumentTypeError(f"{text!r}: the name must end in {', '.join(allowed)}")
        return text

    parse.__name__ = "file name"
    return parse


def _wxh(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)[xX*](\d+)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"size must look like WxH (for example 224x224), got {text!r}")
    w, h = int(m.group(1)), int(m.group(2))
    if w < 1 or h < 1:
        raise argparse.ArgumentTypeError(f"size must be at least 1x1 pixels, got {text!r}")
    _within_budget(w, h, f"{w}x{h}")  # each image resized to it, in each worker
    return w, h


def _within_budget(w: int, h: int, what: str) -> None:
    """Refuse a size over the pixel budget a decoded image may have (a DATAKIT_MAX_PIXELS that is no number is
    refused before any work, by :func:`_check_environment`)."""
    from datakit.io import pixel_budget

    try:
        limit = pixel_budget()
    except UsageError:
        return
    if w * h > limit:
        raise argparse.ArgumentTypeError(f"{what} = {w * h} pixels, over the limit of {limit} a decoded image may "
                                         "have (DATAKIT_MAX_PIXELS)")  # fmt: skip


def _side(lo: int) -> Callable[[str], int]:
    """An argparse type for the side of a square image (``lo`` and up) whose pixels fit the budget."""
    whole = int_range(lo)

    def parse(text: str) -> int:
        n = whole(text)
        _within_budget(n, n, f"{n}x{n}")
        return n

    return parse


def _int_list(text: str) -> list[int]:
    items = text.split(",")
    if text.strip() and any(not x.strip() for x in items):  # '0,,1' or '0,1,': a number left out?
        raise argparse.ArgumentTypeError(f"expected numbers like 0,1,2,4, got {text!r} (an empty entry)")
    try:
        values = [int(x) for x in items if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 0,1,2,4, got {text!r}") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected numbers >= 0 like 0,1,2,4, got {text!r}")
    _worker_room(max(values))
    return sorted(set(values))


def _shard(text: str) -> str:
    m = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not m or not 0 <= int(m.group(1)) < int(m.group(2)):
        raise argparse.ArgumentTypeError(f"must be I/N with 0 <= I < N (for example 0/4), got {text!r}")
    return text.strip()


def _existing(path: str) -> Path:
    if not str(path).strip():  # Path("") is ".": an empty argument (an unset shell variable) would read this folder
        raise UsageError(f"an empty path ({path!r}); give the folder, table, zip or pack to read (an unset variable?)")
    p = Path(path)
    if not p.exists():
        from datakit.sources import missing_why

        raise UsageError(f"{path}: {missing_why(path)}")
    return p


def _add_json_quiet(p: argparse.ArgumentParser, quiet: str = "no progress bar and no summary") -> None:
    p.add_argument("--json", action="store_true", help="print the result as one JSON document on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help=quiet)


# ---------------------------------------------------------------------------------------------
# torchrun: one rank speaks


def _rank() -> int:
    """This process's rank: the initialised process group's, else torchrun's RANK, else 0."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    if "MASTER_ADDR" not in os.environ:  # not launched by torchrun (RANK left over in a shell): one process
        return 0
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _world() -> int:
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    from datakit.devices import launched_world_size

    return launched_world_size()


def _same_command(args: argparse.Namespace) -> None:
    """Refuse ranks given different commands or options (launched by hand): each would wait for the others in
    another collective, or blend two sources into one result."""
    import torch.distributed as dist

    mine = sorted((k, repr(v)) for k, v in vars(args).items() if k != "quiet" and not callable(v))
    every: list = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    other = next((r for r, theirs in enumerate(every) if theirs != every[0]), None)
    if other is not None:
        differ = sorted({k for k, v in set(every[0]) ^ set(every[other])})
        raise UsageError(f"rank {other} was given another command or options than rank 0 (they differ in "
                         f"{', '.join(differ)}); give every rank the same command, as torchrun does")  # fmt: skip


def _join_process_group() -> bool:
    """Under torchrun (WORLD_SIZE > 1, MASTER_ADDR set), join the ranks with gloo; True if this
    call created the group (the caller then destroys it)."""
    if _world() <= 1 or "MASTER_ADDR" not in os.environ:
        return False
    import torch.distributed as dist

    if dist.is_initialized():
        return False
    dist.init_process_group("gloo", init_method="env://")
    return True


def _join_interruptibly() -> bool:
    """:func:`_join_process_group` on a thread of its own, so that a Ctrl-C or a SIGTERM while a rank waits for
    the others (for 30 minutes, in torch's native code, where no Python handler runs and EINTR is retried) ends
    the command with its one line; the process then ends without the interpreter's teardown."""
    if threading.current_thread() is not threading.main_thread():
        return _join_process_group()
    out: list = []

    def join() -> None:
        try:
            out.append(_join_process_group())
        except BaseException as exc:  # noqa: BLE001 - raised again in the main thread
            out.append(exc)

    t = threading.Thread(target=join, name="datakit-join", daemon=True)
    t.start()
    try:
        while t.is_alive():
            t.join(0.1)
    except KeyboardInterrupt:
        group_made.append(True)  # the join goes on in native code: the entry point ends the process at once
        raise
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


# ---------------------------------------------------------------------------------------------
# unzip


def _add_unzip_args(p: argparse.ArgumentParser) -> None:
    from datakit.archive import DEFAULT_MAX_RATIO, DEFAULT_MAX_TOTAL

    p.add_argument("archive", help="the zip archive")
    p.add_argument("-d", "--dest", default=None, type=_nonempty_path,
                   help="folder to extract into (default: the current folder)")  # fmt: skip
    p.add_argument(
        "-l", "--list", action="store_true", help="list decoded names, sizes and the encoding; extract nothing"
    )
    p.add_argument("--encoding", type=_encoding, default="auto",
                   help="encoding of unflagged names: auto (default), gbk, big5, cp932...")  # fmt: skip
    p.add_argument("--overwrite", action="store_true", help="replace existing files that differ")
    p.add_argument("--max-ratio", type=_ratio, default=DEFAULT_MAX_RATIO,
                   help=f"refuse members that expand more than this (default {DEFAULT_MAX_RATIO:.0f}:1)")  # fmt: skip
    p.add_argument("--max-total", type=parse_bytes, default=DEFAULT_MAX_TOTAL,
                   help="refuse archives declaring more uncompressed bytes than this (default 100G)")  # fmt: skip
    _add_json_quiet(p)


_UNZIP_EXAMPLE = """\
  %(prog)s 照片.zip -d photos          # names decoded as GBK (or Big5, CP932...) when not flagged UTF-8
  %(prog)s 照片.zip -l                 # list the decoded names first; extract nothing
  %(prog)s 照片.zip --encoding gbk -d photos --overwrite
"""


def _shown(name: str) -> str:
    """``name`` as one line: control characters (newline, tab, escape...) written as ``\\n``-style escapes."""
    if name.isprintable():
        return name
    # a lone surrogate is a byte of a name that is not UTF-8 on disk: left for stdout to write as that byte,
    # as ls does (docs/cli.md)
    return "".join(ch if ch.isprintable() or "\udc80" <= ch <= "\udcff" else ascii(ch)[1:-1] for ch in name)


def _lines(text: object) -> str:
    """An error's text for the terminal: each of its lines as :func:`_shown` writes one (a name's escape sequences
    must not set the window title or clear the screen)."""
    return "\n".join(_shown(line) for line in str(text).split("\n"))


def _warn_ambiguous(archive: Path, guess) -> None:
    if guess.flag_ignored:
        from datakit.archive import ignored_flags

        print(f"warning: {archive}: {ignored_flags(guess)}", file=sys.stderr)
    if guess.flagged_legacy:
        from datakit.archive import legacy_flagged

        print(f"warning: {archive}: {legacy_flagged(guess)}", file=sys.stderr)
    if guess.mixed_utf8:
        from datakit.archive import mixed_names

        print(f"warning: {archive}: {mixed_names(guess)}; pass --encoding to choose", file=sys.stderr)
    if guess.ambiguous:
        print(
            f"warning: {archive}: names decoded as {guess.encoding}, but ambiguous: "
            f"{' or '.join(guess.ambiguous)}; pass --encoding to choose",
            file=sys.stderr,
        )


def _archive_bytes(archive: Path) -> int:
    """The bytes the files of ``archive`` declare, for the progress bar: its names are decoded once, by unzip."""
    from datakit.archive import _open_zip

    try:
        with _open_zip(archive) as zf:
            return sum(i.file_size for i in zf.infolist() if not i.filename.endswith("/"))  # '' is a name too
    except (DatakitError, OSError):  # unzip says what is wrong with it
        return 0


def cmd_unzip(args: argparse.Namespace) -> int:
    from datakit.archive import iter_progress, read_members, unzip

    archive = _existing(args.archive)
    if args.list:  # what extracting alone heeds, given with -l, would change nothing: said, not ignored
        from datakit.archive import DEFAULT_MAX_RATIO, DEFAULT_MAX_TOTAL

        given = [flag for flag, on in (("-d", args.dest is not None), ("--overwrite", args.overwrite),
                                       ("--max-ratio", args.max_ratio != DEFAULT_MAX_RATIO),
                                       ("--max-total", args.max_total != DEFAULT_MAX_TOTAL)) if on]  # fmt: skip
        if given:
            many = len(given) > 1
            raise UsageError(f"-l lists the members and extracts nothing; {', '.join(given)} {'are' if many else 'is'} "
                             f"for extracting: leave {'them' if many else 'it'} out, or leave out -l")  # fmt: skip
        members, guess = read_members(archive, args.encoding)
        _warn_ambiguous(archive, guess)
        files = [m for m in members if not m.is_dir]
        if args.json:
            out = {
                "archive": str(archive),
                "encoding": guess.encoding,
                "reason": guess.reason,
                "scores": guess.scores,
                "ambiguous": list(guess.ambiguous),
                "mixed_utf8": guess.mixed_utf8,
                "members": [
                    {"name": m.name, "size": m.file_size, "compressed": m.compress_size, "name_source": m.name_source}
                    for m in members
                ],
            }
            _print_json(out)
            return 0
        print(f"encoding: {guess.encoding} ({guess.reason})")
        rows = [  # a name's control characters escaped: a newline in a name must not forge a row
            [m.file_size, "{:04d}-{:02d}-{:02d} {:02d}:{:02d}".format(*m.date_time[:5]), _shown(m.name), m.name_source]
            for m in members
        ]
        print_table(["size", "modified", "name", "name from"], rows)
        if not args.quiet:  # -q: no summary
            print(f"{len(files)} files, {sum(m.file_size for m in files)} bytes")
        return 0
    args.dest = "." if args.dest is None else args.dest
    update, close = iter_progress(_archive_bytes(archive), "unzip", args.quiet)
    try:
        report = unzip(archive, args.dest, encoding=args.encoding, overwrite=args.overwrite,
                       max_total=args.max_total, max_ratio=args.max_ratio, progress=update)  # fmt: skip
    finally:
        close()
    _warn_ambiguous(archive, report.encoding)
    for note in report.notes:
        print(f"warning: {note}", file=sys.stderr)
    for problem in report.problems:
        print(problem, file=sys.stderr)
    if args.json:
        _print_json({"archive": str(archive), "dest": str(args.dest), "encoding": report.encoding.encoding,
                     "ambiguous": list(report.encoding.ambiguous), "mixed_utf8": report.encoding.mixed_utf8,
                     "extracted": report.extracted, "unchanged": report.unchanged,
                     "problems": report.problems})  # fmt: skip
    elif not args.quiet:
        n = len(report.extracted)
        done = f"extracted {n} file{'s' if n != 1 else ''} to {args.dest}"
        if report.unchanged:
            done += f" ({len(report.unchanged)} already there and identical)"
        print(f"{done}; names decoded as {report.encoding.encoding}: {report.encoding.reason}")
        if report.problems:
            n = len(report.problems)
            print(f"{n} member{'s' if n != 1 else ''} not extracted (see above)", file=sys.stderr)
    return 0 if report.ok else 1


# ---------------------------------------------------------------------------------------------
# pack-lmdb, info, verify


def _bar(total: int, desc: str, quiet: bool, unit: str = "img", file=None):
    """A tqdm bar on stderr (or ``file``, a stream to it), or None when quiet, not rank 0, or stderr is not a
    terminal."""
    if quiet or _rank() != 0 or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=file or sys.stderr, leave=False, dynamic_ncols=True)


def _progress(bar) -> Callable[[int, int], None]:
    """A ``progress(done, total)`` callback that moves ``bar`` (or does nothing without one)."""

    def progress(done: int, total: int) -> None:
        if bar is not None:
            bar.total, bar.n = total, done
            bar.refresh()

    return progress


def _add_source_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", help="a class folder, a label table, a .zip, an LMDB pack (or several shards, or a glob)",
                   nargs="+")  # fmt: skip
    _add_label_args(p)


def _add_label_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--labels", help="label table (.xlsx/.csv/.tsv) or 'path label' list (.txt) naming files under SRC")
    p.add_argument("--split", help="only this split (a sheet name, or a value of the split column)")
    p.add_argument("--remap-labels", action="store_true", help="map integer labels that are not 0..C-1 to 0..C-1")
    p.add_argument("--file-column", help="the table's file-name column, when its name is not a common one")
    p.add_argument("--label-column", help="the table's label column, when its name is not a common one")
    p.add_argument("--split-column", help="the table's split column (train/val/test per row)")
    p.add_argument("--encoding", type=_encoding, default="auto",
                   help="the text table's encoding (utf-8, gbk, big5, utf-16); default: auto, detected")  # fmt: skip
    p.add_argument("--include-hidden", action="store_true", help="read hidden workbook sheets and rows too")
    p.add_argument("--zip-encoding", type=_encoding, default=None, metavar="ENCODING",
                   help="a .zip SRC's member-name encoding when --labels is given (--encoding is then the table's); "
                        "default: auto, detected")  # fmt: skip


def _zip_options(args: argparse.Namespace) -> dict:
    """The encoding of a zip's member names (``--zip-encoding``), where given: ``auto`` is the default."""
    enc = getattr(args, "zip_encoding", None)
    return {"zip_encoding": enc} if enc not in (None, "auto") else {}


def _label_options(args: argparse.Namespace) -> dict:
    """How to read the label table, as ``open_dataset`` and ``read_labels`` take it."""
    encoding = None if args.encoding == "auto" else args.encoding  # auto: detected
    return {"file_column": args.file_column, "label_column": args.label_column, "split_column": args.split_column,
            "encoding": encoding, "include_hidden": args.include_hidden}  # fmt: skip


def _source(args: argparse.Namespace):
    srcs = [str(_existing(s)) if not any(c in s for c in "*?[") else s for s in args.src]
    if args.labels:
        _existing(args.labels)
    if len(srcs) > 1:  # several sources are the shards of one pack, nothing else
        other = next((s for s in srcs if not any(c in s for c in "*?[") and not _is_pack_path(s)), None)
        if other is not None or args.labels:
            what = f"{other} is not an LMDB pack" if other is not None else "--labels goes with one source"
            raise UsageError(f"several SRC are read as the shards of one LMDB pack; {what}: give one folder, table "
                             "or zip at a time")  # fmt: skip
    return srcs[0] if len(srcs) == 1 else srcs


def _is_pack_path(path: str) -> bool:
    from datakit.sources import is_pack_path

    return is_pack_path(path)


def refuse_output_in_source(out: str, src, what: str, labels: str | None = None) -> None:
    from datakit.sources import refuse_output_in_source as refuse

    refuse(out, src, what, labels)


_PACK_EXAMPLE = """\
  %(prog)s 数据集/ train.lmdb --max-size 512 --quality 90
  %(prog)s photos/ photos.lmdb --labels labels.xlsx --split train --resume
  %(prog)s photos/ part-1-of-4.lmdb --shard 1/4        # open_dataset('part-*.lmdb') reads the four as one
  torchrun --nproc_per_node 4 -m datakit.cli pack-lmdb photos/ 'part-{rank}.lmdb'   # one shard per rank
"""


def _pack_share(args: argparse.Namespace) -> tuple[str, str | None]:
    """OUT and --shard for this rank: under torchrun an OUT naming ``{rank}`` packs shard RANK/WORLD_SIZE
    into its own file on every rank; any other OUT is packed by rank 0 alone."""
    out, shard = args.src[-1], args.shard
    if "{rank}" in out:
        if shard is not None:
            raise UsageError("an OUT with {rank} picks each rank's shard itself; drop --shard")
        out, shard = out.replace("{rank}", str(_rank())), f"{_rank()}/{_world()}"
    return out, shard


def cmd_pack_lmdb(args: argparse.Namespace) -> int:
    from datakit.pack import pack_lmdb

    if len(args.src) < 2:
        raise UsageError("pack-lmdb takes SRC and OUT, got one path")
    if args.quality is not None and args.max_size is None:  # the images stored as they are: a quality changes nothing
        raise UsageError(f"--quality {args.quality} is the JPEG quality of the images --max-size shrinks; without "
                         "--max-size every image is stored as it is (its own bytes): give --max-size N with it, or "
                         "leave --quality out")  # fmt: skip
    args.quality = 90 if args.quality is None else args.quality
    out, shard = _pack_share(args)
    args.out_path = out  # what a Ctrl-C's line looks at (_run)
    # several SRC (or a glob, 'part-*.lmdb'): the shards of one pack, joined, as check and stats read them; a
    # glob never takes OUT itself ('part-*.lmdb' into part-all.lmdb, run again with --overwrite or --resume)
    srcs = [p for s in args.src[:-1] for p in (_globbed(s, os.fspath(out)) if _is_glob(s) else [s])]
    if any(_same_path(s, out) for s in srcs):
        raise UsageError(f"{out}: is a SRC too; pack into another OUT")
    src = _source(argparse.Namespace(src=srcs, labels=args.labels))
    labels = args.labels
    if labels:
        _existing(labels)
    elif isinstance(src, str) and Path(src).is_file() and Path(src).suffix.lower() in TABLE_SUFFIXES:
        labels, src = src, str(Path(src).parent)  # a table alone: names relative to its folder
    given = None
    if args.classes is not None and args.remap_labels:  # as open_dataset and check refuse the pair
        raise UsageError("classes= and remap_labels= both number the classes; give one of them")
    if args.classes is not None:
        from datakit.sources import given_classes

        _existing(args.classes)
        given = given_classes(args.classes)
    if labels:
        from datakit.labels import markers_as_classes, read_labels

        with markers_as_classes(given):  # a class named 'None' that --classes names is a class, as check reads it
            labels = read_labels(labels, split=args.split, remap_labels=args.remap_labels or given is not None,
                                 **_label_options(args))  # fmt: skip
    if not labels and isinstance(src, str) and not any(c in src for c in "*?["):  # a table's options, no table
        from datakit.sources import refuse_table_options

        refuse_table_options(src, args.remap_labels, **_label_options(args))
    source = src  # several: the shards of one pack, joined
    named = {"encoding": args.encoding} if args.encoding != "auto" and labels is None else {}
    zipped = isinstance(src, str) and src.lower().endswith(".zip")
    if args.classes is not None or (named and zipped) or _zip_options(args):  # a zip's names, as check reads them
        from datakit.sources import open_source

        source = open_source(src, labels=labels, split=args.split, classes=args.classes, **named, **_zip_options(args))
        labels = None
    term = None
    if not args.quiet and _rank() == 0 and sys.stderr.isatty():
        # the bar draws through a descriptor of its own: a reader thread that captures fd 2 for a decoder's
        # messages (a damaged image, in datakit.pack) would take a frame drawn meanwhile for one of them
        term = open(os.dup(sys.stderr.fileno()), "w", encoding=sys.stderr.encoding, errors="backslashreplace")  # noqa: SIM115
    bar = _bar(0, "pack", args.quiet, file=term)

    def progress(done: int, total: int, nbytes: int) -> None:
        if bar is not None:
            bar.total = total
            bar.n = done
            elapsed = max(1e-6, bar.format_dict["elapsed"])
            bar.set_postfix_str(f"{nbytes / 2**20 / elapsed:.1f} MB/s", refresh=False)
            bar.refresh()

    out_was_there = os.path.lexists(out)  # an --overwrite of it builds the new pack beside it
    was_complete = False  # a --resume of a pack stopped after its last sample, before it was marked complete, ends it
    if args.resume:
        from datakit.lmdb import read_meta

        try:
            was_complete = bool((read_meta(out) or {}).get("complete"))
        except (OSError, ValueError):
            pass
    try:
        report = pack_lmdb(source, out, labels=labels, split=args.split, max_size=args.max_size,
                           quality=args.quality, workers=args.workers, resume=args.resume, overwrite=args.overwrite,
                           shard=shard, skip_bad=args.skip_bad, bad_samples=args.bad_samples,
                           remap_labels=args.remap_labels, commit_every=args.commit_every, progress=progress,
                           empty_shard="{rank}" in args.src[-1])  # fmt: skip
    except KeyboardInterrupt:
        from datakit.pack import _part_path

        part = _part_path(Path(out))
        if args.overwrite and part.is_dir() and not args.quiet:  # the old pack is whole; the new one so far is kept
            print(f"{out} still holds the old pack, untouched; the new one so far is kept in {part}: the same "
                  "--overwrite command goes on from it, or delete it to give its space back",
                  file=sys.stderr)  # fmt: skip
        elif args.overwrite and not out_was_there:  # the pack was written in place: --resume goes on from it
            from datakit.lmdb import read_meta

            try:
                meta = read_meta(Path(out))
            except (DatakitError, OSError):
                meta = None
            args.resumable = meta is not None and not meta.get("complete") and meta.get("count", 0) > 0
        raise
    finally:
        if bar is not None:
            bar.close()
        if term is not None:
            term.close()
    for s in report.skipped:
        print(f"skipped: {_shown(s)}", file=sys.stderr)  # one line, whatever a name or a listed reason holds
    rate = (report.count - report.resumed_from) / max(report.seconds, 1e-9)
    summary = {"out": str(report.path), "count": report.count, "resumed_from": report.resumed_from,
               "skipped": report.skipped, "bytes_in": report.bytes_in, "bytes_out": report.bytes_out,
               "seconds": round(report.seconds, 3), "images_per_s": round(rate, 1)}  # fmt: skip
    shards = _shard_counts(report.count, report.resumed_from) if "{rank}" in args.src[-1] else None
    together = args.src[-1].replace("{rank}", "*")  # the glob that opens the shards as one
    if args.json:
        _print_json(summary if shards is None else {**summary, "shards": [c for c, _ in shards]})
    elif not args.quiet and shards is not None and all(c == r for c, r in shards) and not report.skipped:
        print(f"the {len(shards)} shards {args.src[-1]} hold every image already ({sum(c for c, _ in shards)}): "
              f"nothing to pack; open them together as {together!r}")  # fmt: skip
    elif not args.quiet and shards is not None:  # rank 0 speaks for the set, not of its own shard alone
        total, resumed = sum(c for c, _ in shards), sum(r for _, r in shards)
        again = f", {resumed} of them packed before and kept" if resumed else ""
        print(f"packed {total} images into {len(shards)} shards {args.src[-1]} ({', '.join(str(c) for c, _ in shards)}"
              f"{again}): open them together as {together!r}"
              + (f"; {report.skipped_summary} skipped on rank 0" if report.skipped else ""))  # fmt: skip
    elif not args.quiet and report.resumed_from == report.count and not report.skipped and was_complete:
        print(f"{report.path} is complete already ({report.count} images): nothing to pack")
    elif not args.quiet and report.resumed_from == report.count and not report.skipped:
        print(f"completed {report.path} ({report.count} images, every one committed before the interruption): its "
              "index and classes written, the pack marked complete")  # fmt: skip
    elif not args.quiet:
        resumed = f" (resumed after {report.resumed_from})" if report.resumed_from else ""
        print(f"packed {report.count} images{resumed} into {report.path}: {report.bytes_in / 2**20:.1f} MB read, "
              f"{report.bytes_out / 2**20:.1f} MB stored, {rate:.0f} images/s"
              + (f"; {report.skipped_summary} skipped" if report.skipped else ""))  # fmt: skip
    return 0


def _shard_counts(count: int, resumed_from: int) -> list[tuple[int, int]] | None:
    """(images, of them packed by an earlier run) of every rank's shard, rank 0's first, where ranks pack one
    shard each under torchrun; None in one process."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return None
    every: list = [None] * dist.get_world_size()
    dist.all_gather_object(every, (count, resumed_from))
    return [tuple(x) for x in every]


cmd_pack_lmdb.every_rank = lambda args: len(args.src) >= 2 and "{rank}" in args.src[-1]  # type: ignore[attr-defined]


def cmd_info(args: argparse.Namespace) -> int:
    from datakit.lmdb import lmdb_info

    packs = _packs(args.pack)
    if len(packs) == 1:  # one pack: its error is the command's
        info = lmdb_info(_existing(packs[0]))
        if args.json:  # naming its pack, as each of several does (and verify's object does)
            _print_json({"pack": str(packs[0]), **info})
        else:
            _print_info(packs[0], info, args.quiet)
        return 0
    found, code = [], 0
    for path in packs:  # each in turn: one that cannot be read does not hide the others
        try:
            info = lmdb_info(_existing(path))
        except DatakitError as exc:
            code = max(code, _said("info", exc))
            found.append({"pack": str(path), "error": str(exc)})
            continue
        found.append({"pack": str(path), **info})
        if not args.json:
            _print_info(path, info, args.quiet)
    if args.json:
        _print_json(found)
    return code


def _said(command: str, exc: Exception) -> int:
    """Print an error of one of several packs as the command's own error line; its exit code."""
    print(_shown(f"datakit {command}: error: {exc}"), file=sys.stderr)
    return 2 if isinstance(exc, UsageError) else 1


def _is_glob(name: str) -> bool:
    return any(c in name for c in "*?[") and not os.path.lexists(name)


def _same_path(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _globbed(pattern: str, out: str) -> list[str]:
    """The paths ``pattern`` matches, but ``out`` and the folders a pack being written into it keeps beside it."""
    import glob

    from datakit.filenames import natural_key

    found = [f for f in sorted(glob.glob(pattern), key=natural_key)
             if not _same_path(f, out) and not Path(f).name.startswith(".")]  # fmt: skip
    if not found:
        raise UsageError(f"{pattern}: matches nothing" + (f" but {out}, the output" if glob.glob(pattern) else ""))
    return found


def _packs(names: list[str]) -> list[Path]:
    """The pack folders named, a glob ('part-*.lmdb') standing for every shard it matches, in order."""
    import glob

    out = []
    for name in names:
        if not str(name).strip():  # Path("") is ".": an unset "$DATA" read (or measured) the folder it ran in
            raise UsageError(f"an empty path ({name!r}); give the folder, table, zip or pack to read (an unset "
                             "variable?)")  # fmt: skip
        if any(c in name for c in "*?[") and not os.path.lexists(name):
            from datakit.filenames import natural_key

            found = sorted(glob.glob(name), key=natural_key)  # train-2 before train-10
            if not found:
                raise UsageError(f"{name}: matches nothing")
            out += [Path(f) for f in found]
        else:
            out.append(Path(name))  # a missing one is said in its turn, after the packs before it
    seen: dict[str, Path] = {}
    for p in out:  # `info a.lmdb a.lmdb` printed it twice, where stats refuses it
        first = seen.setdefault(os.path.realpath(p), p)
        if first is not p:
            what = "pack" if (p / "data.mdb").is_file() else "source"  # (doctor's folder of images is none)
            raise UsageError(f"{p}: given twice (as {first}); each {what} is read once")
    return out


def _print_info(path: Path, info: dict, quiet: bool) -> None:
    state = "complete" if info["complete"] else f"INCOMPLETE ({info['count']} of {info.get('planned')})"
    print(f"{path}: {info['format']} version {info['version']}, {info['count']} samples, {state}")
    if quiet:
        return
    options = info.get("options") or {}  # a pack written by LmdbWriter alone has none
    shard = options.get("shard") or [0, 1]
    source = info.get("source")  # None from LmdbWriter alone
    print(f"  source: {source} (shard {shard[0]}/{shard[1]})" if source is not None else "  source: not recorded")
    labels = options.get("labels") or info.get("label_table")  # the table of a dataset object given (--classes)
    if labels or options.get("split"):  # where the labels came from, and which split was packed
        taken = [f"labels {labels}"] if labels else []
        taken += [f"split {options['split']!r}"] if options.get("split") else []
        print(f"  from: {', '.join(_shown(t) for t in taken)}")
    stored, size = info.get("bytes", 0) / 2**20, info["file_bytes"] / 2**20
    encoding = info.get("encoding", "bytes as written (no encoding recorded)")  # LmdbWriter alone records none
    print(f"  values: {encoding}, {stored:.1f} MB in a {size:.1f} MB file; checksums {info.get('checksum', 'crc32')}")
    if "height_range" in info:
        print(f"  sizes: height {info['height_range'][0]}..{info['height_range'][1]}, "
              f"width {info['width_range'][0]}..{info['width_range'][1]}")  # fmt: skip
    print(f"  classes ({len(info['classes']['classes'])}):")
    print_table(["class", "samples"], [(_shown(str(k)), v) for k, v in info["class_counts"].items()])
    if info.get("split_counts"):
        print("  splits: " + ", ".join(f"{_shown(str(k))} {v}" for k, v in info["split_counts"].items()))
    if info.get("skipped"):
        print(f"  skipped while packing: {len(info['skipped'])}")


def cmd_verify(args: argparse.Namespace) -> int:
    from datakit.lmdb import verify_pack

    found, bad, code = [], False, 0
    packs = _packs(args.pack)
    for path in packs:
        bar = _bar(0, "verify", args.quiet)
        try:  # in a child process: a page damaged so that liblmdb crashes is one more problem line, not a dead verify
            report = verify_pack(_existing(path), progress=_progress(bar))
        except DatakitError as exc:
            if len(packs) == 1:
                raise
            code = max(code, _said("verify", exc))  # each in turn: one that cannot be opened hides no other
            found.append({"pack": str(path), "error": str(exc)})
            continue
        finally:
            if bar:
                bar.close()
        bad = bad or bool(report.problems)
        found.append({"pack": str(path), "samples": report.samples, "problems": report.problems})
        if args.json:
            continue
        for p in report.problems:
            print(_shown(p), file=sys.stderr)
        if not args.quiet:
            checked = f"{_count_of(report.samples, 'sample')} checked"
            if report.crashed:
                checked = f"{report.checked} of {report.samples} samples checked before the reader crashed"
            print(f"{path}: {checked}, {_count_of(len(report.problems), 'problem')}")
    if args.json:
        _print_json(found[0] if len(found) == 1 else found)
    return max(code, 1 if bad else 0)


def _count_of(n: int, thing: str) -> str:
    return f"{n} {thing}" + ("" if n == 1 else "s")


def _register_lmdb(sub) -> None:
    p = _command(sub, "pack-lmdb", "pack any dataset into an LMDB file, resumably", _PACK_EXAMPLE)
    p.add_argument("src", nargs="+", metavar="PATH",  # (argparse would repeat a metavar 'SRC [SRC ...] OUT')
                   help="SRC [SRC ...] OUT: the source (folder, table, zip; several packs or a glob: the shards of "
                        "one), then the output pack folder")  # fmt: skip
    _add_label_args(p)
    p.add_argument("--max-size", type=_count, metavar="N",
                   help="re-encode (JPEG) images whose longer side exceeds N pixels (N >= 1)")  # fmt: skip
    p.add_argument("--quality", type=int_range(1, 100), default=None, metavar="Q",
                   help="JPEG quality 1-100 when re-encoding (default 90)")  # fmt: skip
    p.add_argument("--workers", type=_workers, metavar="N",
                   help="readers: threads for plain files, processes for zips and packs "
                        "(default: usable CPUs; 0: none)")  # fmt: skip
    _add_classes_arg(p)
    p.add_argument("--resume", action="store_true", help="continue an interrupted pack")
    p.add_argument("--overwrite", action="store_true", help="replace an existing pack")
    p.add_argument("--shard", type=_shard, metavar="I/N", help="pack only the I-th of N parts (0-based)")
    p.add_argument("--skip-bad", action="store_true",
                   help="skip unreadable images and missing files (listed) instead of failing")  # fmt: skip
    p.add_argument("--bad-samples", metavar="FILE",
                   help="with --skip-bad: skip, unread, the samples this file from training lists")  # fmt: skip
    p.add_argument("--commit-every", type=_count, default=5000, metavar="N",
                   help="samples per transaction at most (default 5000)")  # fmt: skip
    _add_json_quiet(p)
    p.set_defaults(func=cmd_pack_lmdb)
    examples = {"info": "  %(prog)s train.lmdb\n  %(prog)s train.lmdb --json\n",
                "verify": "  %(prog)s train.lmdb          # exit 1 and one line per bad sample if any\n"}  # fmt: skip
    for name, func, text, quiet in (
        ("info", cmd_info, "what a pack holds", "print only the first line"),
        ("verify", cmd_verify, "re-check every checksum and decode every image", "print only the problems"),
    ):
        q = _command(sub, name, text, examples[name])
        q.add_argument("pack", nargs="+", help="the pack folder (OUT of pack-lmdb); several, or a glob "
                       "('part-*.lmdb'): each in turn")  # fmt: skip
        _add_json_quiet(q, quiet)
        q.set_defaults(func=func)


# ---------------------------------------------------------------------------------------------
# check, preview


def cmd_check(args: argparse.Namespace) -> int:
    from datakit.check import check_dataset

    src = _source(args)
    bar = _bar(0, "check", args.quiet)
    logger = logging.getLogger("datakit")
    notes_off = _NoNotes()
    if args.quiet:  # -q: the problems alone, not the notes (warnings stay: a class order, a remapping)
        logger.addFilter(notes_off)
    try:
        report = check_dataset(src, labels=args.labels, split=args.split, workers=args.workers,
                               bad_samples=args.bad_samples, distributed=_world() > 1, progress=_progress(bar),
                               remap_labels=args.remap_labels, classes=args.classes,
                               **_label_options(args), **_zip_options(args))  # fmt: skip
    finally:
        logger.removeFilter(notes_off)
        if bar is not None:
            bar.close()
    if args.json:
        _print_json(report.to_json())
        return 0 if report.ok else 1
    if _rank() == 0:  # under torchrun every rank has the whole report, for its exit code; rank 0 says it
        for p in report.problems:
            print(_shown(p), file=sys.stderr)  # one line each, whatever the file names hold
    if args.quiet:
        return 0 if report.ok else 1
    counted = {c for counts in report.class_counts.values() for c in counts}
    classes = [c for c in report.classes if c in counted]  # in class order: 0, 1, 2, ..., 10 for integer labels
    splits = list(report.class_counts)
    rows = [[_shown(c), *(report.class_counts[s].get(c, 0) for s in splits)] for c in classes]
    if rows:  # none when no sample could be read (a table without rows): no empty table
        print_table(["class", *map(_shown, splits)], rows)  # names from the table: one line each, no escape sequences
    if report.height_range:
        print(f"image sizes: height {report.height_range[0]}..{report.height_range[1]}, "
              f"width {report.width_range[0]}..{report.width_range[1]}")  # fmt: skip
    print(f"{_count_of(report.samples, 'sample')} checked, {_count_of(len(report.problems), 'problem')}")
    return 0 if report.ok else 1


cmd_check.every_rank = lambda args: True  # type: ignore[attr-defined]  # each rank reads its share


def cmd_preview(args: argparse.Namespace) -> int:
    from datakit.io import check_output
    from datakit.preview import preview
    from datakit.sources import open_source

    if args.size is not None and args.transform == "none":  # shown as decoded: a size would change nothing, unsaid
        raise UsageError(f"--size {args.size} is the crop size of --transform train or eval; give one of them with it "
                         "(--transform train), or leave --size out to see the images as decoded")  # fmt: skip
    args.size = 224 if args.size is None else args.size
    src = _source(args)
    refuse_output_in_source(args.out, src, "contact sheet", args.labels)
    check_output(args.out, overwrite=args.overwrite, probe=True)  # before any image is read, not after the work
    if args.font is not None and not os.path.isfile(args.font):
        what = "a folder, not a font file" if os.path.isdir(args.font) else "no such font file"
        raise UsageError(f"{args.font}: {what}")
    transform = None
    if args.transform != "none":
        from datakit.transforms import eval_pipeline, train_pipeline

        # eval: shorter side to size * 256/224, then the centre crop (256 -> 224 at the default size)
        make = train_pipeline if args.transform == "train" else eval_pipeline
        transform = make(size=args.size, normalize=False)
    ds = open_source(src, labels=args.labels, split=args.split, transform=transform,
                     remap_labels=args.remap_labels, classes=args.classes, **_label_options(args),
                     **_zip_options(args))  # fmt: skip
    result = preview(ds, args.out, n=args.n, seed=args.seed, overwrite=args.overwrite, font=args.font)
    if result.hint and not args.quiet:  # -q: nothing (the grid is written all the same)
        print(f"datakit preview: {_shown(result.hint)}", file=sys.stderr)
    if not args.quiet:
        after = {"none": "as decoded", "train": f"after the train pipeline ({args.size} px crops)",
                 "eval": f"after the eval pipeline ({args.size} px centre crops)"}[args.transform]  # fmt: skip
        print(f"wrote {result.samples} of {len(ds)} samples, {after}, to {result.path}; classes: "
              + ", ".join(f"{i} {_shown(str(c))}" for i, c in enumerate(ds.classes)))  # fmt: skip
    return 0


_CHECK_EXAMPLE = """\
  %(prog)s 数据集/                                  # exit 1 and one line per problem if any
  %(prog)s photos/ --labels labels.xlsx --split train --json
"""
_PREVIEW_EXAMPLE = """\
  %(prog)s 数据集/ --out grid.png --n 32
  %(prog)s train.lmdb --out seen.jpg --transform train --size 224 --overwrite
"""


def _add_classes_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--classes", metavar="PACK_OR_FILE",
                   help="index the classes as these do (the training pack, its classes.json, or a .txt of one class "
                        "per line): for a split kept in a file of its own")  # fmt: skip


def _register_check(sub) -> None:
    from datakit.io import WRITE_EXTENSIONS as PREVIEW_EXTENSIONS  # datakit.check would import torch

    p = _command(sub, "check", "read every sample; report unreadable images, missing files, bad labels",
                 _CHECK_EXAMPLE)  # fmt: skip
    _add_source_args(p)
    p.add_argument("--workers", type=_workers, metavar="N", help="reader processes (default: usable CPUs; 0: none)")
    p.add_argument("--bad-samples", metavar="FILE",
                   help="report the samples this file from training lists, without reading them")  # fmt: skip
    _add_classes_arg(p)
    _add_json_quiet(p, "no progress bar, no table: only the problems, one per line")
    p.set_defaults(func=cmd_check)
    p = _command(sub, "preview", "a contact sheet of what the model will see", _PREVIEW_EXAMPLE)
    _add_source_args(p)
    _add_classes_arg(p)
    p.add_argument("--out", required=True, type=_extension(*PREVIEW_EXTENSIONS), metavar="FILE",
                   help=f"the picture to write ({', '.join(PREVIEW_EXTENSIONS)})")  # fmt: skip
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    p.add_argument("--n", type=_count, default=32, help="samples to show (default 32)")
    p.add_argument("--transform", choices=["none", "train", "eval"], default="none",
                   help="show samples after datakit's train or eval pipeline")  # fmt: skip
    p.add_argument("--size", type=_side(1), default=None, help="crop size for --transform (default 224)")
    p.add_argument("--seed", type=int_range(0), default=0, help="which random samples to show (default 0)")
    p.add_argument("--font", metavar="FILE", help="caption font (default: an installed one that draws the class names)")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    p.set_defaults(func=cmd_preview)


# ---------------------------------------------------------------------------------------------
# stats


def cmd_stats(args: argparse.Namespace) -> int:
    from datakit.io import check_output
    from datakit.sources import open_source, say_whole
    from datakit.stats import compute_stats, plot_histogram, shown

    if args.seed is not None and args.sample is None:  # every image read: a seed would change nothing, unsaid
        raise UsageError(f"--seed {args.seed} picks the images --sample N reads; without --sample every image is read "
                         "(exact statistics): give --sample N with it, or leave --seed out")  # fmt: skip
    if args.overwrite and not args.plot:  # nothing written without --plot: it would change nothing, unsaid
        raise UsageError("--overwrite replaces the histogram --plot FILE writes; without --plot nothing is written: "
                         "give --plot FILE with it, or leave --overwrite out")  # fmt: skip
    args.seed = 0 if args.seed is None else args.seed
    src = _source(args)
    if args.plot:
        refuse_output_in_source(args.plot, src, "histogram", args.labels)
        check_output(args.plot, overwrite=args.overwrite, probe=True)  # before any image is read, not after the work
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:  # said now, not after an hour of decoding
            raise UsageError("--plot needs matplotlib: pip install matplotlib")
    ds = open_source(src, labels=args.labels, split=args.split, remap_labels=args.remap_labels,
                     classes=args.classes, **_label_options(args), **_zip_options(args))  # fmt: skip
    if args.split is None:
        say_whole(ds, "into the statistics")
    bar = _bar(0, "stats", args.quiet)
    try:
        # under torchrun every rank runs this: each reads its share
        st = compute_stats(ds, workers=args.workers, sample=args.sample, size=args.size, seed=args.seed,
                           distributed="auto", progress=_progress(bar))  # fmt: skip
    finally:
        if bar is not None:
            bar.close()
    normalize = f"transforms.Normalize({st.normalize_args()})"
    flat = st.flat_channels()
    if flat and _rank() == 0:  # every pixel of a channel the same value: Normalize would divide by zero
        which = f"channel{'s' * (len(flat) > 1)} {', '.join(flat)}"
        print(f"warning: std is 0 in {which} (every pixel the same value): normalising divides by zero there; "
              "leave the channel out, or use std 1 for it", file=sys.stderr)  # fmt: skip

    def plot() -> int:  # after the numbers are out: a picture that cannot be written (a run beside this one wrote
        # it meanwhile) does not lose them
        if args.plot and _rank() == 0:
            plot_histogram(st, args.plot, overwrite=args.overwrite)
        return 0

    if args.json:
        _print_json(st.to_json())
        return plot()
    if args.quiet:
        print(normalize)
        return plot()
    where = f" after resizing to {args.size[0]}x{args.size[1]}" if args.size else ""
    print(f"{st.count} images, {st.pixels} pixels per channel{where}; channel order {st.order}")
    rows = []
    for c, name in enumerate(st.order):
        row = [name, shown(st.mean[c], 4), shown(st.std[c], 4), shown(st.mean_255[c], 2), shown(st.std_255[c], 2)]
        if st.stderr_mean is not None:
            row += [f"±{shown(st.stderr_mean[c], 4)}", f"±{shown(st.stderr_std[c], 4)}"]
        rows.append(row)
    header = ["channel", "mean (0-1)", "std (0-1)", "mean (0-255)", "std (0-255)"]
    if st.stderr_mean is not None:
        header += ["stderr mean", "stderr std"]
    print_table(header, rows)
    print("\n# torchvision (after ToTensor, 0-1 scale):")
    print(normalize)
    print("# mmdetection / caffe style (0-255 scale):")
    print(f"dict({st.mmdet_args()}, to_rgb={st.order == 'RGB'})")
    plot()
    if args.plot:
        print(f"histogram written to {args.plot}")
    return 0


cmd_stats.every_rank = lambda args: True  # type: ignore[attr-defined]  # each rank reads its share, sums all-reduced

_STATS_EXAMPLE = """\
  %(prog)s 数据集/                           # exact mean/std over every pixel, paste-ready Normalize(...)
  %(prog)s train.lmdb --sample 2000 --json  # an estimate from 2000 images, with standard errors
  %(prog)s photos/ --size 224x224 --plot hist.png
  torchrun --nproc_per_node 2 -m datakit.cli stats train.lmdb   # ranks split the work; rank 0 prints
"""


def _register_stats(sub) -> None:
    from datakit.stats import PLOT_EXTENSIONS

    p = _command(sub, "stats", "exact per-channel mean and std over every pixel", _STATS_EXAMPLE)
    _add_source_args(p)
    _add_classes_arg(p)
    p.add_argument("--workers", type=_workers, metavar="N", help="decoding processes (default: usable CPUs; 0: none)")
    p.add_argument("--sample", type=int_range(2), metavar="N",
                   help="estimate from N >= 2 random images, with standard errors")  # fmt: skip
    p.add_argument("--seed", type=int_range(0), default=None, metavar="N",
                   help="which random images --sample picks (default 0)")  # fmt: skip
    p.add_argument("--size", type=_wxh, help="WxH: compute after resizing every image to this size")
    p.add_argument("--plot", type=_extension(*PLOT_EXTENSIONS), metavar="FILE",
                   help=f"write per-channel histograms to this picture ({', '.join(PLOT_EXTENSIONS)}; "
                   "needs matplotlib)")  # fmt: skip
    p.add_argument("--overwrite", action="store_true", help="replace --plot if it exists")
    _add_json_quiet(p, "no progress bar, no table: print only the Normalize(...) line")
    p.set_defaults(func=cmd_stats)


# ---------------------------------------------------------------------------------------------
# bench


def cmd_bench(args: argparse.Namespace) -> int:
    from datakit import datasets
    from datakit.sources import open_source
    from datakit.transforms import train_pipeline
    from datakit.tuning import benchmark_workers, default_candidates

    src = _source(args)
    transform = train_pipeline(args.size, normalize=False) if args.size else None
    # every split alike: the loader's speed is measured, nothing is trained on (open_dataset would say "pass split=")
    ds = open_source(src, kinds=datasets, labels=args.labels, split=args.split, transform=transform,
                     remap_labels=args.remap_labels, **_label_options(args), **_zip_options(args))  # fmt: skip
    if len(ds) == 0:
        raise UsageError(f"{args.src[0]}: no samples to load")
    batch_size = args.batch_size or min(64, len(ds))  # a default batch larger than the dataset measures nothing
    if batch_size > len(ds):  # every batch holds the dataset's samples: said as such, not as the size asked for
        if not args.quiet:
            print(f"note: --batch-size {batch_size} is more than the {len(ds)} samples: every batch holds "
                  f"{len(ds)}", file=sys.stderr)  # fmt: skip
        batch_size = len(ds)
    device = args.device or _default_device()
    counts = args.workers or default_candidates()

    def report(m) -> None:
        if (
            not args.json and not args.quiet and sys.stderr.isatty()
        ):  # progress: only to a terminal (the table says it all)
            print(f"  num_workers={m.num_workers}: {m.images_per_s:.0f} images/s", file=sys.stderr)

    # raw decodes differ in size: count them instead of stacking them
    runs, rec = benchmark_workers(ds, batch_size, counts, repeats=args.repeats, budget_s=args.seconds,
                                  collate_fn=None if args.size else len, device=device, on_measure=report)  # fmt: skip
    if args.json:
        _print_json({
            "batch_size": batch_size, "device": device, "repeats": args.repeats, "samples": len(ds),
            "results": [{"num_workers": w, "images_per_s": statistics.median(m.images_per_s for m in ms),
                         "passes": [m.images_per_s for m in ms],
                         "first_batch_s": statistics.median(m.first_batch_s for m in ms)} for w, ms in runs.items()],
            "recommended": None if rec.noisy else rec.num_workers, "noisy": rec.noisy,
            "candidates": rec.candidates, "reason": rec.reason,
        })  # fmt: skip
        return 0
    if not args.quiet:
        rows = []
        for w, ms in runs.items():
            rates = [m.images_per_s for m in ms]
            rows.append([w, f"{statistics.median(rates):.0f}", f"{min(rates):.0f}-{max(rates):.0f}",
                         f"{statistics.median(m.first_batch_s for m in ms):.2f}"])  # fmt: skip
        passes = f"{args.repeats} pass{'es' * (args.repeats != 1)}"
        print(f"{len(ds)} samples, batch size {batch_size}, device {device}, {passes} of {args.seconds:g} s per worker "
              "count")  # fmt: skip
        print_table(["num_workers", "images/s (median)", "spread", "first batch (s)"], rows)
    if rec.noisy:
        print(f"no recommendation: {rec.reason}")
    else:
        print(f"recommended: num_workers={rec.num_workers} ({rec.reason})")
    return 0


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


_BENCH_EXAMPLE = """\
  %(prog)s 数据集/                              # tries 0, 1, 2, 4... workers and recommends one
  %(prog)s train.lmdb --workers 0,2,4 --batch-size 128 --repeats 5 --json
"""


def _register_bench(sub) -> None:
    p = _command(sub, "bench", "loading throughput per num_workers, and the advice", _BENCH_EXAMPLE)
    _add_source_args(p)
    p.add_argument("--workers", type=_int_list, metavar="LIST",
                   help="worker counts to try, e.g. 0,1,2,4 (default: 0, 1, 2, 4... up to the CPUs)")  # fmt: skip
    p.add_argument("--batch-size", type=_count, metavar="N",
                   help="samples per batch (default 64, or the dataset's size if smaller)")  # fmt: skip
    p.add_argument("--size", type=_side(0), default=224, help="crop size of the train pipeline (0: raw decode)")
    p.add_argument("--seconds", type=_positive_float, default=2.0,
                   help="measuring time per worker count and pass (default 2)")  # fmt: skip
    p.add_argument(
        "--repeats",
        type=_count,
        default=3,
        metavar="N",
        help="passes over all worker counts; their spread decides if one is recommended (default 3)",
    )
    p.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        help="cuda: pinned memory, as create_loader does for a GPU (default: cuda if available)",
    )
    _add_json_quiet(p, "print only the recommendation")
    p.set_defaults(func=cmd_bench)


# ---------------------------------------------------------------------------------------------
# doctor


def cmd_doctor(args: argparse.Namespace) -> int:
    from datakit.doctor import doctor

    src = None
    if not args.src and args.size == 0:
        raise UsageError("--size 0 takes the size of SRC's first image; give SRC, or a side in pixels")
    if args.src:
        names = [os.fspath(p) for p in _packs(args.src)]  # a glob: the shards it matches
        if len(names) > 1:  # the shards of one pack ('part-*.lmdb'), read together as check and stats read them
            for name in names:
                if not os.path.isfile(os.path.join(_existing(name), "data.mdb")):
                    raise UsageError(f"{name}: not an LMDB pack; several sources are the shards of one pack, "
                                     "give one folder, zip or table alone")  # fmt: skip
            src = names  # (doctor reads them as check does: every shard, each once)
        else:
            src = str(_existing(names[0]))
    table_or_pack = (".zip", ".lmdb", *TABLE_SUFFIXES)
    if (
        isinstance(src, str)
        and not os.path.isdir(src)
        and (not os.path.isfile(src) or Path(src).suffix.lower() not in table_or_pack)
    ):
        # (a script, a single image: timed as if it were the data, and said to be "ok"; a FIFO, /dev/null)
        raise UsageError(f"{src}: a file that is no dataset source; give the folder, zip, label table or pack the "
                         "training reads")  # fmt: skip
    if isinstance(src, str) and os.path.isfile(src) and Path(src).suffix.lower() == ".zip":
        from datakit.archive import ZipReader
        from datakit.errors import DataError
        from datakit.io import IMAGE_EXTENSIONS

        names = ZipReader(src).names()  # (a zip that is none, or of no image, was "ok": its bytes timed)
        if not any(Path(n).suffix.lower() in IMAGE_EXTENSIONS for n in names):
            raise DataError(f"{src}: no image inside the archive ({len(names)} members); give the zip of the images "
                            "the training reads")  # fmt: skip
    from datakit.labels import WrongRoot

    try:
        report = doctor(src, batch_size=args.batch_size, num_workers=args.workers,
                        prefetch_factor=args.prefetch_factor, size=args.size)  # fmt: skip
    except WrongRoot as exc:  # its fix names `FOLDER --labels TABLE`, which doctor does not take: it reads images
        found = re.search(r"; CLI: (.+) --labels TABLE\)$", str(exc))
        if found is None:
            raise
        raise UsageError(
            str(exc)[: found.start()] + f"; doctor reads the images alone: datakit doctor {found.group(1)})"
        ) from None
    if args.json:
        _print_json(report.to_json())
    elif args.quiet:  # what needs looking at, one line each
        for f in report.findings:
            if f.status not in ("ok", "info"):
                print(f"{f.check}: {f.status}: {f.detail}" + (f"; fix: {f.fix}" if f.fix else ""))
    else:
        print_table(["check", "status", "finding"], [[f.check, f.status, f.detail] for f in report.findings])
        fixes = [f for f in report.findings if f.fix and f.status != "ok"]
        if fixes:
            print("\nfixes:")
            for f in fixes:
                print(f"  {f.check}: {f.fix}")
    return 0 if report.ok else 1


def _register_doctor(sub) -> None:
    p = _command(sub, "doctor", "check the environment and the source's read speed, each finding with its fix",
                 "  datakit doctor data/train --batch-size 256 --workers 8")  # fmt: skip
    p.add_argument("src", nargs="*", help="a dataset source whose read speed to measure (cold and warm); several "
                   "packs or a glob: the shards of one")  # fmt: skip
    p.add_argument("--batch-size", type=_count, default=64, metavar="N",
                   help="batch size of the planned loader (default 64)")  # fmt: skip
    p.add_argument("--workers", type=_workers, metavar="N",
                   help="num_workers of the planned loader (default: the usable CPUs)")  # fmt: skip
    p.add_argument("--prefetch-factor", type=_count, default=4, metavar="N",
                   help="batches each worker prepares ahead (default 4)")  # fmt: skip
    p.add_argument("--size", type=_side(0), default=224, metavar="N",
                   help="image side in the batch (default 224; 0: the first image of SRC as it is)")  # fmt: skip
    _add_json_quiet(p, "no table: only the findings that are not ok, one a line with its fix")
    p.set_defaults(func=cmd_doctor)


_EXTRA_COMMANDS: list = [_register_lmdb, _register_check, _register_stats, _register_bench, _register_doctor]


# ---------------------------------------------------------------------------------------------
# entry points


_terminated: list[int] = []  # SIGTERM received (a job scheduler's stop): ended as Ctrl-C ends a command


def _on_sigterm(signum, frame) -> None:
    if os.getpid() != _terminated_pid[0]:  # a forked worker that kept the handler: it ends as it would have
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    _terminated.append(signum)
    raise KeyboardInterrupt  # the same clean-up as a Ctrl-C: no part file, no lock, no half output left


_terminated_pid = [0]
# set once this process tore down a process group it made under torchrun: its entry point then ends without the
# interpreter's teardown, where gloo's threads, freed late, abort it ("terminate called without an active
# exception", exit -6) now and then after the work was done and its output written
group_made: list[bool] = []


def _standard_streams() -> None:
    """Closed stdout or stderr (``2>&-``): Python makes them None, and every message would fail; they are
    written to nothing instead, and the command does its work."""
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (for the life of the process)
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115
    if not isinstance(sys.stderr, _Unfailing):
        sys.stderr = _Unfailing(sys.stderr)


class _Unfailing:
    """stderr whose messages cannot fail the command: written to a full disk (``2>/dev/full``) or to a pipe whose
    reader went away (``2>&1 | true``), a warning or a ``skipped:`` line raised there, and a usage mistake or a
    finished pack ended as a traceback with exit 1. Once a write fails, the stream goes to nothing (so the
    interpreter's last flush at exit cannot fail either) and the command goes on to its own exit code."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def _gone(self) -> None:
        with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
            os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except (OSError, ValueError):
            self._gone()
            with contextlib.suppress(OSError, ValueError):
                self._stream.flush()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (OSError, ValueError):
            self._gone()
            with contextlib.suppress(OSError, ValueError):
                self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _check_environment() -> None:
    """What would make every command go wrong, refused before any work: a current folder removed, a file-system
    encoding that is not UTF-8 (the C locale with PYTHONUTF8=0), a torchrun RANK outside its WORLD_SIZE."""
    from datakit.io import name_encoding_problem, pixel_budget

    pixel_budget()  # DATAKIT_MAX_PIXELS=abc: one line now, not one "unreadable" line per image later
    try:
        os.getcwd()
    except FileNotFoundError:  # relative names (the default -d ., an output's folder) would fail naming no path
        raise UsageError("the current folder no longer exists (removed while the shell was in it); cd to one that "
                         "does") from None  # fmt: skip
    if (problem := name_encoding_problem()) is not None:
        raise UsageError(problem)
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    if "MASTER_ADDR" not in os.environ:
        ok = {"RANK": ("", "0"), "WORLD_SIZE": ("", "0", "1")}
        left = [f"{n}={os.environ[n]}" for n in names[:2] if os.environ.get(n, "") not in ok[n]]
        if left:  # exported in a shell, or a launcher's leftovers: not a job of several ranks
            print(f"warning: {' '.join(left)} without MASTER_ADDR: not launched by torchrun; running as one "
                  "process", file=sys.stderr)  # fmt: skip
        return
    values = {}
    for name in names:
        text = os.environ.get(name)
        if text is None or text == "":
            continue
        try:
            values[name] = int(text)
        except ValueError:
            raise UsageError(f"{name}={text!r} is not a whole number (torchrun sets it; unset it to run "
                             "alone)") from None  # fmt: skip
    world = values.get("WORLD_SIZE", 1)
    if world < 1:
        raise UsageError(f"WORLD_SIZE={world}: a job has at least one process")
    rank = values.get("RANK", 0)
    if not 0 <= rank < world:
        raise UsageError(f"RANK={rank} is outside 0..{world - 1} (WORLD_SIZE={world}): no rank would do the work; "
                         "unset RANK and WORLD_SIZE to run alone, or launch with torchrun")  # fmt: skip


_NAMED_OPTIONS = ("labels", "classes", "root", "split", "file_column", "label_column", "split_column")


def _of_its_own(exc: Exception, args: argparse.Namespace, rank: int) -> bool:
    """Whether a usage mistake is of this rank's own output (an OUT naming ``{rank}``, this rank's one already
    there), which the other ranks do not meet: rank 0 would only say that a rank stopped."""
    src = getattr(args, "src", None)
    out = src[-1] if isinstance(src, list) and src and isinstance(src[-1], str) else ""
    return "{rank}" in out and out.replace("{rank}", str(rank)) in str(exc)


def _run(func: Callable[[argparse.Namespace], int], args: argparse.Namespace, prog: str) -> int:
    """Call ``func(args)`` as this rank should, and turn exceptions into one line and an exit code."""
    try:
        _check_environment()
        # `--classes "$TRAIN"` with TRAIN unset: "" would be the current folder, a column "" none named
        refuse_empty(**{k: v for k in _NAMED_OPTIONS if isinstance(v := getattr(args, k, None), str)})
    except UsageError as exc:
        print(f"{prog}: error: {_lines(exc)}", file=sys.stderr)
        return 2
    rank, world = _rank(), _world()
    every_rank = getattr(func, "every_rank", None)
    if world > 1 and rank != 0 and not (every_rank and every_rank(args)):
        # a job with no share to split: rank 0 does it alone (two ranks extracting or writing would race)
        if not getattr(args, "quiet", False) and "TORCHELASTIC_RUN_ID" not in os.environ:  # a shell's leftovers?
            print(f"{prog}: rank {rank} of {world}: this command runs on rank 0 alone; nothing to do here (RANK, "
                  "WORLD_SIZE and MASTER_ADDR are set; unset them to run as one process)", file=sys.stderr)  # fmt: skip
        return 0
    _tolerate_names(sys.stdout, sys.stderr)
    stdout = sys.stdout
    before = None
    created = peer_gone = False
    # a data error names the rank that met it, rank 0's too where every rank works (the others then say that a
    # rank stopped): said once, a usage mistake is not tagged
    tag = f" (rank {rank})" if rank or (world > 1 and every_rank is not None and every_rank(args)) else ""
    told_quiet = getattr(args, "quiet", False)
    if rank != 0:  # the other ranks work, but are silent: no result, no summary, no bar
        args.quiet = True
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (closed below)
    try:
        if threading.current_thread() is threading.main_thread():
            _terminated_pid[0] = os.getpid()
            before = signal.signal(signal.SIGTERM, _on_sigterm)
        if every_rank is not None and every_rank(args):
            if "TORCHELASTIC_RUN_ID" not in os.environ and world > 1 and not told_quiet:  # every rank: each waits
                where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT', '29500')}"
                print(f"{prog}: rank {rank} of {world}: waiting for the other ranks at {where} (RANK, WORLD_SIZE and "
                      "MASTER_ADDR are set; unset them to run as one process)", file=sys.stderr)  # fmt: skip
            created = _join_interruptibly()
            if created:
                _same_command(args)
        from datakit.io import output_run

        with output_run():  # an output checked free at the start and there at the end: another process's, exit 1
            code = func(args)
        if created:  # no rank tears the group down while another still talks in it (gloo aborts at exit then)
            import torch.distributed as dist

            dist.barrier()
        return code
    except DatakitError as exc:  # the type decides the exit code: UsageError 2, data errors 1
        if exc.exit_code == UsageError.exit_code:  # every rank sees the same usage mistake: rank 0 says it
            if rank == 0:
                print(f"{prog}: error: {_lines(exc)}", file=sys.stderr)
            elif _of_its_own(exc, args, rank):  # but for one of this rank's own output (part-1.lmdb is there)
                print(f"{prog}: error{tag}: {_lines(exc)}", file=sys.stderr)
        else:
            print(f"{prog}: error{tag}: {_lines(exc)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        # a pack (not one --overwrite builds beside the old, whose own line says where it stands): how to go on
        again = ""
        out = getattr(args, "out_path", None)
        if out is not None:
            from datakit.pack import _is_file
        if prog.endswith("pack-lmdb") and (out is None or not _is_file(Path(out) / "data.mdb")):
            pass  # stopped before the pack was begun: nothing committed to speak of
        elif prog.endswith("pack-lmdb") and not getattr(args, "overwrite", False):
            again = "; the samples committed stay: the same command with --resume goes on from them"
        elif prog.endswith("pack-lmdb") and getattr(args, "resumable", False):  # --overwrite of an OUT not there
            again = ("; the samples committed stay: the same command with --resume in place of --overwrite goes on "
                     "from them")  # fmt: skip
        if _terminated:
            print(f"{prog}: terminated{again}", file=sys.stderr)
            return 128 + 15
        print(f"{prog}: interrupted{again}", file=sys.stderr)
        return 130
    except RuntimeError as exc:  # gloo's "Connection closed by peer": another rank stopped (its own line says why)
        text = str(exc)
        if "DataLoader worker" in text and (_terminated or "signal: Terminated" in text or "signal: Interrupt" in text):
            # a SIGTERM (or Ctrl-C) sent to the whole process group (timeout, Slurm, systemd): torch's loader saw its
            # workers die of it before this process's own handler ran
            stopped = bool(_terminated) or "signal: Terminated" in text
            print(f"{prog}: {'terminated' if stopped else 'interrupted'}", file=sys.stderr)
            return 128 + 15 if stopped else 130
        if not created or not any(w in text for w in ("Connection closed", "Connection reset", "gloo")):
            raise
        why = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        why = re.sub(r"^\[[^\]]*\]\s*", "", why).split(". ")[0][:200]  # no "[.../gloo/pair.cc:561]", one sentence
        print(f"{prog}: error{tag}: another rank stopped before this one finished ({why})", file=sys.stderr)
        peer_gone = True
        return 1
    except BrokenPipeError:  # `datakit check ... | head -1`: the reader went away; the shell's code for it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
        print(f"{prog}: error{tag}: {_lines(exc)}", file=sys.stderr)
        return 1
    except ValueError as exc:  # a check in a library not yet given a datakit type: data, not usage
        print(f"{prog}: error{tag}: {_lines(exc)}", file=sys.stderr)
        return 1
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG) and exc.filename is None:
            # the output itself cannot be written (stdout on a full disk, `> /dev/full`): one line, not a traceback,
            # and nothing left in the buffer for the exit to fail on again
            os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())
            print(f"{prog}: error{tag}: cannot write the output: {exc.strerror}", file=sys.stderr)
            return 1
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):  # an output file named (a picture)
            print(f"{prog}: error{tag}: {_lines(exc.filename)}: {exc.strerror}", file=sys.stderr)
            return 1
        if exc.errno not in (errno.ENAMETOOLONG, errno.ELOOP) or exc.filename is None:
            raise
        # a path given that no file system takes (a name over 255 bytes, links in a loop): a usage mistake
        print(f"{prog}: error{tag}: {_lines(exc.filename)}: {exc.strerror}", file=sys.stderr)
        return 2
    finally:
        if sys.stdout is not stdout:
            sys.stdout.close()
            sys.stdout = stdout
        if before is not None:
            signal.signal(signal.SIGTERM, before)
        _terminated.clear()
        if created and peer_gone:
            # the group is broken: tearing it down (here, or gloo's threads at exit) can abort the process with
            # "terminate called without an active exception" (exit -6) after the line above; this process made
            # the group (torchrun's command line, never a caller's), so it ends here, its streams flushed
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(1)
        if created:
            import torch.distributed as dist

            dist.destroy_process_group()
            group_made.append(True)


def _tolerate_names(stdout, stderr) -> None:
    """A file name that is not UTF-8 (Latin-1 from an old system) holds lone surrogates, which a
    strict stream cannot write (stdout to a file or a pipe is strict): stdout then writes the bytes
    the name has on disk, as ``ls`` does, and stderr escapes them; never a UnicodeEncodeError."""
    for stream, errors in ((stdout, "surrogateescape"), (stderr, "backslashreplace")):
        if getattr(stream, "errors", None) != "strict" or not hasattr(stream, "reconfigure"):
            continue
        if errors == "surrogateescape" and codecs.lookup(stream.encoding).name != "utf-8":
            errors = "backslashreplace"  # a name's bytes mean nothing in another encoding
        try:
            stream.reconfigure(errors=errors)
        except (ValueError, OSError):
            pass


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="datakit", description="Image data to fast, correct PyTorch input.",
                     epilog="examples:\n  datakit check 数据集/\n  datakit pack-lmdb 数据集/ train.lmdb\n"
                     "  datakit COMMAND --help      # every command's options, with an example",
                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    from datakit import __version__

    parser.add_argument("--version", action="version", version=f"datakit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    p = _command(sub, "unzip", "extract a zip with legacy-encoded (GBK, Big5, CP932...) names, safely", _UNZIP_EXAMPLE)
    _add_unzip_args(p)
    p.set_defaults(func=cmd_unzip)
    for register in _EXTRA_COMMANDS:
        register(sub)
    parser.commands = sub.choices  # type: ignore[attr-defined]  # each command's parser, for its own usage line
    return parser


def _quiet_native_logs() -> None:
    # OpenCV's own warnings ("[ WARN:0@0.015] global grfmt_png.cpp ...") would break the one line
    # per problem on stderr; datakit reports every decoding failure itself. Read when cv2 loads.
    os.environ.setdefault("OPENCV_LOG_LEVEL", "OFF")


class _OneLine(logging.Filter):
    """A warning's text as one line on the terminal: a file name's newline or escape sequence written as an escape,
    as problem lines are (a note naming 'two\nlines.png' was two lines)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        shown = _shown(text)
        if shown != text:
            record.msg, record.args = shown, None
        return True


class _NoNotes(logging.Filter):
    """Drops check's notes (``note: ...``), which ``check -q`` leaves out."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("note: ")


def _one_line_logs() -> None:
    logger = logging.getLogger("datakit")
    if not any(isinstance(f, _OneLine) for f in logger.filters):
        logger.addFilter(_OneLine())


def main(argv: Sequence[str] | None = None) -> int:
    """``datakit COMMAND ...``"""
    _standard_streams()
    _quiet_native_logs()
    _one_line_logs()
    try:  # building the parser loads NumPy (the image formats): a Ctrl-C then is one line too
        parser = build_parser()
        words = list(sys.argv[1:] if argv is None else argv)
        if not any(not w.startswith("-") for w in words):  # `datakit --frob`: name the option, not a missing command
            unknown = [w for w in words if w.startswith("-") and w not in ("-h", "--help", "--version")]
            if unknown:
                parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        args, extra = parser.parse_known_args(argv)
        listed = next((k for k in ("src", "pack") if isinstance(getattr(args, k, None), list)), None)
        cut = extra.index("--") if "--" in extra else len(extra)  # after "--", a path may start with "-"
        if extra and listed is not None and not any(e.startswith("-") for e in extra[:cut]):
            # paths after the options (`pack-lmdb data --max-size 512 out.lmdb`): argparse takes the paths
            # before the first option only; the later ones are the same list, in order
            getattr(args, listed).extend(extra[:cut] + extra[cut + 1 :])
        elif extra:  # the command's own usage, which lists what it takes; datakit's for what came before the command
            before = words[: words.index(args.command)] if args.command in words else []
            owner = parser if any(e in before for e in extra) else parser.commands.get(args.command, parser)
            owner.error(f"unrecognized arguments: {' '.join(extra)}")
    except KeyboardInterrupt:
        from datakit._entry import prog_of

        print(f"{prog_of(sys.argv[1:] if argv is None else argv)}: interrupted", file=sys.stderr)
        return 130
    from datakit._entry import started

    started()  # the arguments read: Ctrl-C is the command's own from here
    return _run(args.func, args, f"datakit {args.command}")


def unzip_gbk_main(argv: Sequence[str] | None = None) -> int:
    """``unzip-gbk ARCHIVE [-d DIR] [-l] [--encoding auto|gbk|...]``"""
    _standard_streams()
    try:  # Ctrl-C while the parser is built (it imports the archive code): one line, as for datakit's commands
        _quiet_native_logs()
        parser = _Parser(prog="unzip-gbk", description="Extract a zip whose names are GBK (or Big5, CP932...), "
                         "safely.", epilog="example:\n" + _UNZIP_EXAMPLE,
                         formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
        _add_unzip_args(parser)
        from datakit import __version__

        parser.add_argument("--version", action="version", version=f"unzip-gbk (datakit {__version__})")
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        print("unzip-gbk: interrupted", file=sys.stderr)
        return 130
    from datakit._entry import started

    started()  # the arguments read: Ctrl-C is the command's own from here
    return _run(cmd_unzip, args, "unzip-gbk")


if __name__ == "__main__":
    code = main()
    if group_made:  # as the entry point ends it (a group torn down, or a join still waiting in native code)
        from datakit._entry import _end_now

        _end_now(code)
    sys.exit(code)
