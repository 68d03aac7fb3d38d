"""The ``datakit`` and ``unzip-gbk`` commands: parse arguments, call the library, report.

Exit codes: 0 success, 1 a problem with the data (one line per problem on stderr), 2 bad usage.
A user mistake never shows a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path

from datakit.errors import DatakitError, UsageError

__all__ = ["main", "unzip_gbk_main", "UsageError"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own usage errors: exit 2 with the usage line
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


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


def parse_bytes(text: str) -> int:
    """``"500M"``, ``"10G"``, ``"1024"`` to a byte count."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 500M or 10G)")
    return int(float(m.group(1)) * 1024 ** " kmgt".index(m.group(2) or " "))


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _existing(path: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{path}: no such file or folder")
    return p


# ---------------------------------------------------------------------------------------------
# unzip


def _add_unzip_args(p: argparse.ArgumentParser) -> None:
    from datakit.archive import DEFAULT_MAX_RATIO, DEFAULT_MAX_TOTAL

    p.add_argument("archive", help="the zip archive")
    p.add_argument("-d", "--dest", default=".", help="folder to extract into (default: the current folder)")
    p.add_argument(
        "-l", "--list", action="store_true", help="list decoded names, sizes and the encoding; extract nothing"
    )
    p.add_argument(
        "--encoding", default="auto", help="encoding of unflagged names: auto (default), gbk, big5, cp932..."
    )
    p.add_argument("--overwrite", action="store_true", help="replace existing files that differ")
    p.add_argument("--max-ratio", type=_positive_float, default=DEFAULT_MAX_RATIO,
                   help=f"refuse members that expand more than this (default {DEFAULT_MAX_RATIO:.0f}:1)")  # fmt: skip
    p.add_argument("--max-total", type=parse_bytes, default=DEFAULT_MAX_TOTAL,
                   help="refuse archives declaring more uncompressed bytes than this (default 100G)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar, no summary")


def cmd_unzip(args: argparse.Namespace) -> int:
    from datakit.archive import iter_progress, read_members, unzip

    archive = _existing(args.archive)
    if args.list:
        members, guess = read_members(archive, args.encoding)
        files = [m for m in members if not m.is_dir]
        if args.json:
            out = {
                "archive": str(archive),
                "encoding": guess.encoding,
                "reason": guess.reason,
                "members": [
                    {"name": m.name, "size": m.file_size, "compressed": m.compress_size, "name_source": m.name_source}
                    for m in members
                ],
            }
            print(json.dumps(out, ensure_ascii=False, indent=2))
            return 0
        print(f"encoding: {guess.encoding} ({guess.reason})")
        rows = [
            [m.file_size, "{:04d}-{:02d}-{:02d} {:02d}:{:02d}".format(*m.date_time[:5]), m.name, m.name_source]
            for m in members
        ]
        print_table(["size", "modified", "name", "name from"], rows)
        print(f"{len(files)} files, {sum(m.file_size for m in files)} bytes")
        return 0
    members, _ = read_members(archive, args.encoding)
    update, close = iter_progress(sum(m.file_size for m in members), "unzip", args.quiet)
    try:
        report = unzip(archive, args.dest, encoding=args.encoding, overwrite=args.overwrite,
                       max_total=args.max_total, max_ratio=args.max_ratio, progress=update)  # fmt: skip
    finally:
        close()
    for note in report.notes:
        print(f"warning: {note}", file=sys.stderr)
    for problem in report.problems:
        print(problem, file=sys.stderr)
    if args.json:
        print(json.dumps({"archive": str(archive), "dest": str(args.dest), "encoding": report.encoding.encoding,
                          "extracted": report.extracted, "unchanged": report.unchanged,
                          "problems": report.problems}, ensure_ascii=False, indent=2))  # fmt: skip
    elif not args.quiet:
        done = f"extracted {len(report.extracted)} files to {args.dest}"
        if report.unchanged:
            done += f" ({len(report.unchanged)} already there and identical)"
        print(f"{done}; names decoded as {report.encoding.encoding}: {report.encoding.reason}")
        if report.problems:
            print(f"{len(report.problems)} members not extracted (see above)", file=sys.stderr)
    return 0 if report.ok else 1


# ---------------------------------------------------------------------------------------------
# pack-lmdb, info, verify


def _bar(total: int, desc: str, quiet: bool, unit: str = "img"):
    """A tqdm bar on stderr, or None when quiet or stderr is not a terminal."""
    if quiet or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False, dynamic_ncols=True)


def _progress(bar) -> Callable[[int, int], None]:
    """A ``progress(done, total)`` callback that moves ``bar`` (or does nothing without one)."""

    def progress(done: int, total: int) -> None:
        if bar is not None:
            bar.total, bar.n = total, done
            bar.refresh()

    return progress


def _add_source_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", help="a class folder, a label table, a .zip, an LMDB pack (or several shards)", nargs="+")
    p.add_argument("--labels", help="label table (.xlsx/.csv) naming the files under SRC")
    p.add_argument("--split", help="only this split (a sheet name, or a value of the split column)")
    p.add_argument("--remap-labels", action="store_true", help="map integer labels that are not 0..C-1 to 0..C-1")


def _source(args: argparse.Namespace):
    srcs = [str(_existing(s)) if not any(c in s for c in "*?[") else s for s in args.src]
    return srcs[0] if len(srcs) == 1 else srcs


def cmd_pack_lmdb(args: argparse.Namespace) -> int:
    from datakit.lmdb import PackError, pack_lmdb

    if args.resume and args.overwrite:
        raise UsageError("--resume and --overwrite contradict each other; pick one")
    if len(args.src) != 2:
        raise UsageError("pack-lmdb takes SRC and OUT")
    src, out = str(_existing(args.src[0])), args.src[1]
    if args.labels:
        _existing(args.labels)
    bar = _bar(0, "pack", args.quiet)

    def progress(done: int, total: int, nbytes: int) -> None:
        if bar is not None:
            bar.total = total
            bar.n = done
            elapsed = max(1e-6, bar.format_dict["elapsed"])
            bar.set_postfix_str(f"{nbytes / 2**20 / elapsed:.1f} MB/s", refresh=False)
            bar.refresh()

    try:
        report = pack_lmdb(src, out, labels=args.labels, split=args.split, max_size=args.max_size,
                           quality=args.quality, workers=args.workers, resume=args.resume, overwrite=args.overwrite,
                           shard=args.shard, skip_bad=args.skip_bad, remap_labels=args.remap_labels,
                           commit_every=args.commit_every, progress=progress)  # fmt: skip
    except PackError as exc:
        if "already exists" in str(exc) or "contradict" in str(exc) or "I/N" in str(exc):
            raise UsageError(str(exc)) from None
        raise
    finally:
        if bar is not None:
            bar.close()
    for s in report.skipped:
        print(f"skipped: {s}", file=sys.stderr)
    rate = (report.count - report.resumed_from) / max(report.seconds, 1e-9)
    summary = {"out": str(report.path), "count": report.count, "resumed_from": report.resumed_from,
               "skipped": report.skipped, "bytes_in": report.bytes_in, "bytes_out": report.bytes_out,
               "seconds": round(report.seconds, 3), "images_per_s": round(rate, 1)}  # fmt: skip
    if args.json:
        print(json.dumps(summary, ensure_ascii=False, indent=2))
    elif not args.quiet:
        resumed = f" (resumed after {report.resumed_from})" if report.resumed_from else ""
        print(f"packed {report.count} images{resumed} into {report.path}: {report.bytes_in / 2**20:.1f} MB read, "
              f"{report.bytes_out / 2**20:.1f} MB stored, {rate:.0f} images/s"
              + (f"; {len(report.skipped)} unreadable images skipped" if report.skipped else ""))  # fmt: skip
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from datakit.lmdb import lmdb_info

    info = lmdb_info(_existing(args.pack))
    if args.json:
        print(json.dumps(info, ensure_ascii=False, indent=2))
        return 0
    state = "complete" if info["complete"] else f"INCOMPLETE ({info['count']} of {info.get('planned')})"
    print(f"{args.pack}: {info['format']} version {info['version']}, {info['count']} samples, {state}")
    print(f"  source: {info['source']} (shard {info['options']['shard'][0]}/{info['options']['shard'][1]})")
    stored, size = info.get("bytes", 0) / 2**20, info["file_bytes"] / 2**20
    print(f"  values: {info['encoding']}, {stored:.1f} MB in a {size:.1f} MB file; checksums {info['checksum']}")
    if "height_range" in info:
        print(f"  sizes: height {info['height_range'][0]}..{info['height_range'][1]}, "
              f"width {info['width_range'][0]}..{info['width_range'][1]}")  # fmt: skip
    print(f"  classes ({len(info['classes']['classes'])}):")
    print_table(["class", "samples"], list(info["class_counts"].items()))
    if info.get("split_counts"):
        print("  splits: " + ", ".join(f"{k} {v}" for k, v in info["split_counts"].items()))
    if info.get("skipped"):
        print(f"  skipped while packing: {len(info['skipped'])}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from datakit.lmdb import LmdbReader, verify_lmdb

    path = _existing(args.pack)
    n = len(LmdbReader(path, allow_incomplete=True))
    bar = _bar(n, "verify", args.quiet)
    problems = verify_lmdb(path, progress=(lambda d, t: bar.update(1)) if bar else None)
    if bar:
        bar.close()
    if args.json:
        print(json.dumps({"pack": str(path), "samples": n, "problems": problems}, ensure_ascii=False, indent=2))
    else:
        for p in problems:
            print(p, file=sys.stderr)
        if not args.quiet:
            print(f"{path}: {n} samples checked, {len(problems)} problems")
    return 1 if problems else 0


def _register_lmdb(sub) -> None:
    p = sub.add_parser("pack-lmdb", help="pack any dataset into an LMDB file, resumably")
    p.add_argument("src", nargs="+", metavar="SRC OUT", help="source (folder, table, zip) and the output pack folder")
    p.add_argument("--labels", help="label table (.xlsx/.csv) naming the files under SRC")
    p.add_argument("--split", help="only this split")
    p.add_argument("--remap-labels", action="store_true", help="map integer labels that are not 0..C-1 to 0..C-1")
    p.add_argument("--max-size", type=int, help="re-encode images whose longer side exceeds this (JPEG)")
    p.add_argument("--quality", type=int, default=90, help="JPEG quality when re-encoding (default 90)")
    p.add_argument("--workers", type=int, help="reader processes (default: usable CPUs)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted pack")
    p.add_argument("--overwrite", action="store_true", help="replace an existing pack")
    p.add_argument("--shard", help="I/N: pack only the I-th of N parts (0-based)")
    p.add_argument("--skip-bad", action="store_true", help="skip unreadable images (listed) instead of failing")
    p.add_argument("--commit-every", type=int, default=5000, help="samples per transaction at most (default 5000)")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_pack_lmdb)
    for name, func, text in (("info", cmd_info, "what a pack holds"),
                             ("verify", cmd_verify, "re-check every checksum and decode every image")):  # fmt: skip
        q = sub.add_parser(name, help=text)
        q.add_argument("pack", help="the pack folder (OUT of pack-lmdb)")
        q.add_argument("--json", action="store_true")
        q.add_argument("-q", "--quiet", action="store_true")
        q.set_defaults(func=func)


# ---------------------------------------------------------------------------------------------
# check, preview


def cmd_check(args: argparse.Namespace) -> int:
    from datakit.check import check_dataset

    if args.labels:
        _existing(args.labels)
    bar = _bar(0, "check", args.quiet)

    progress = _progress(bar)

    try:
        report = check_dataset(_source(args), labels=args.labels, split=args.split, workers=args.workers,
                               progress=progress)  # fmt: skip
    finally:
        if bar is not None:
            bar.close()
    if args.json:
        print(json.dumps(report.to_json(), ensure_ascii=False, indent=2))
    else:
        for p in report.problems:
            print(p, file=sys.stderr)
        classes = sorted({c for counts in report.class_counts.values() for c in counts})
        splits = list(report.class_counts)
        print_table(["class", *splits], [[c, *(report.class_counts[s].get(c, 0) for s in splits)] for c in classes])
        if report.height_range:
            print(f"image sizes: height {report.height_range[0]}..{report.height_range[1]}, "
                  f"width {report.width_range[0]}..{report.width_range[1]}")  # fmt: skip
        print(f"{report.samples} samples checked, {len(report.problems)} problems")
    return 0 if report.ok else 1


def cmd_preview(args: argparse.Namespace) -> int:
    from datakit.check import preview
    from datakit.datasets import open_dataset

    if args.labels:
        _existing(args.labels)
    transform = None
    if args.transform != "none":
        from datakit.transforms import eval_pipeline, train_pipeline

        make = train_pipeline if args.transform == "train" else eval_pipeline
        transform = make(size=args.size, normalize=False)
    ds = open_dataset(_source(args), labels=args.labels, split=args.split, transform=transform,
                      remap_labels=args.remap_labels)  # fmt: skip
    out = preview(ds, args.out, n=args.n, seed=args.seed)
    if not args.quiet:
        print(f"wrote {min(args.n, len(ds))} samples to {out}; classes: "
              + ", ".join(f"{i} {c}" for i, c in enumerate(ds.classes)))  # fmt: skip
    return 0


def _register_check(sub) -> None:
    p = sub.add_parser("check", help="read every sample; report unreadable images, missing files, bad labels")
    _add_source_args(p)
    p.add_argument("--workers", type=int, help="reader processes (default: usable CPUs)")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("preview", help="a contact sheet of what the model will see")
    _add_source_args(p)
    p.add_argument("--out", required=True, help="the picture to write (.png or .jpg)")
    p.add_argument("--n", type=int, default=32, help="samples to show (default 32)")
    p.add_argument("--transform", choices=["none", "train", "eval"], default="none",
                   help="show samples after datakit's train or eval pipeline")  # fmt: skip
    p.add_argument("--size", type=int, default=224, help="crop size for --transform (default 224)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_preview)


# ---------------------------------------------------------------------------------------------
# stats


def _wxh(text: str) -> tuple[int, int]:
    import re as _re

    m = _re.fullmatch(r"(\d+)[xX*](\d+)", text.strip())
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise argparse.ArgumentTypeError(f"size must look like WxH (for example 224x224), got {text!r}")
    return int(m.group(1)), int(m.group(2))


def cmd_stats(args: argparse.Namespace) -> int:
    from datakit.datasets import open_dataset
    from datakit.stats import compute_stats, plot_histogram

    if args.labels:
        _existing(args.labels)
    ds = open_dataset(_source(args), labels=args.labels, split=args.split, remap_labels=args.remap_labels)
    bar = _bar(0, "stats", args.quiet)

    progress = _progress(bar)

    try:
        st = compute_stats(ds, workers=args.workers, sample=args.sample, size=args.size, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    if args.plot:
        plot_histogram(st, args.plot)
    if args.json:
        print(json.dumps(st.to_json(), indent=2))
        return 0
    where = f" after resizing to {args.size[0]}x{args.size[1]}" if args.size else ""
    print(f"{st.count} images, {st.pixels} pixels per channel{where}; channel order {st.order}")
    rows = []
    for c, name in enumerate(st.order):
        row = [name, f"{st.mean[c]:.4f}", f"{st.std[c]:.4f}", f"{st.mean_255[c]:.2f}", f"{st.std_255[c]:.2f}"]
        if st.stderr_mean is not None:
            row += [f"±{st.stderr_mean[c]:.4f}", f"±{st.stderr_std[c]:.4f}"]
        rows.append(row)
    header = ["channel", "mean (0-1)", "std (0-1)", "mean (0-255)", "std (0-255)"]
    if st.stderr_mean is not None:
        header += ["stderr mean", "stderr std"]
    print_table(header, rows)
    print("\n# torchvision (after ToTensor, 0-1 scale):")
    print("transforms.Normalize(mean=[" + ", ".join(f"{v:.4f}" for v in st.mean) + "], std=["
          + ", ".join(f"{v:.4f}" for v in st.std) + "])")  # fmt: skip
    print("# mmdetection / caffe style (0-255 scale):")
    print("dict(mean=[" + ", ".join(f"{v:.3f}" for v in st.mean_255) + "], std=["
          + ", ".join(f"{v:.3f}" for v in st.std_255) + f"], to_rgb={st.order == 'RGB'})")  # fmt: skip
    if args.plot:
        print(f"histogram written to {args.plot}")
    return 0


def _register_stats(sub) -> None:
    p = sub.add_parser("stats", help="exact per-channel mean and std over every pixel")
    _add_source_args(p)
    p.add_argument("--workers", type=int, help="decoding processes (default: usable CPUs)")
    p.add_argument("--sample", type=int, help="estimate from N random images, with standard errors")
    p.add_argument("--size", type=_wxh, help="WxH: compute after resizing every image to this size")
    p.add_argument("--plot", help="write per-channel histograms to this picture (needs matplotlib)")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_stats)


# ---------------------------------------------------------------------------------------------
# bench


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 0,1,2,4, got {text!r}") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected numbers >= 0 like 0,1,2,4, got {text!r}")
    return values


def cmd_bench(args: argparse.Namespace) -> int:
    from datakit.datasets import open_dataset
    from datakit.transforms import train_pipeline
    from datakit.tuning import default_candidates, measure_throughput

    if args.labels:
        _existing(args.labels)
    transform = train_pipeline(args.size, normalize=False) if args.size else None
    ds = open_dataset(_source(args), labels=args.labels, split=args.split, transform=transform,
                      remap_labels=args.remap_labels)  # fmt: skip
    counts = args.workers or default_candidates()
    rows, out = [], []
    for w in counts:
        # raw decodes differ in size: count them instead of stacking them
        m = measure_throughput(ds, args.batch_size, w, budget_s=args.seconds, collate_fn=None if args.size else len)
        out.append(m.__dict__)
        rows.append([w, f"{m.images_per_s:.0f}", f"{m.batches_per_s:.1f}", f"{m.first_batch_s:.2f}"])
        if not args.json and not args.quiet:
            print(f"  num_workers={w}: {m.images_per_s:.0f} images/s", file=sys.stderr)
    best = max(out, key=lambda m: m["images_per_s"])
    near = min((m for m in out if m["images_per_s"] >= 0.95 * best["images_per_s"]), key=lambda m: m["num_workers"])
    if args.json:
        print(json.dumps({"batch_size": args.batch_size, "results": out, "recommended": near["num_workers"]}, indent=2))
        return 0
    print_table(["num_workers", "images/s", "batches/s", "first batch (s)"], rows)
    print(f"recommended: num_workers={near['num_workers']} ({near['images_per_s']:.0f} images/s; the fewest workers "
          "within 5% of the best)")  # fmt: skip
    return 0


def _register_bench(sub) -> None:
    p = sub.add_parser("bench", help="loading throughput per num_workers, and the advice")
    _add_source_args(p)
    p.add_argument("--workers", type=_int_list, help="worker counts to try, e.g. 0,1,2,4 (default: up to the CPUs)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--size", type=int, default=224, help="crop size of the train pipeline (0: raw decode)")
    p.add_argument("--seconds", type=float, default=3.0, help="measuring time per worker count")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_bench)


_EXTRA_COMMANDS: list = [_register_lmdb, _register_check, _register_stats, _register_bench]


# ---------------------------------------------------------------------------------------------
# entry points


def _run(func: Callable[[argparse.Namespace], int], args: argparse.Namespace, prog: str) -> int:
    try:
        return func(args)
    except DatakitError as exc:  # the type decides the exit code: UsageError 2, data errors 1
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # a check in a library not yet given a datakit type: data, not usage
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="datakit", description="Image data to fast, correct PyTorch input.")
    from datakit import __version__

    parser.add_argument("--version", action="version", version=f"datakit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    p = sub.add_parser("unzip", help="extract a zip with legacy-encoded (GBK, Big5, CP932...) names, safely")
    _add_unzip_args(p)
    p.set_defaults(func=cmd_unzip)
    for register in _EXTRA_COMMANDS:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``datakit COMMAND ...``"""
    args = build_parser().parse_args(argv)
    return _run(args.func, args, f"datakit {args.command}")


def unzip_gbk_main(argv: Sequence[str] | None = None) -> int:
    """``unzip-gbk ARCHIVE [-d DIR] [-l] [--encoding auto|gbk|...]``"""
    parser = _Parser(prog="unzip-gbk", description="Extract a zip whose names are GBK (or Big5, CP932...), safely.")
    _add_unzip_args(parser)
    return _run(cmd_unzip, parser.parse_args(argv), "unzip-gbk")


if __name__ == "__main__":
    sys.exit(main())
