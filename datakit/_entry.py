"""The ``datakit`` and ``unzip-gbk`` commands' entry points: a Ctrl-C while the command's code is still
being imported ends it with one line and exit 130, as one later does, not with a traceback."""

from __future__ import annotations

import os
import signal
import sys


def _interrupted_while_starting(prog: str):
    def handler(signum, frame) -> None:
        sys.stderr.write(f"{prog}: interrupted\n")
        sys.stderr.flush()
        os._exit(130)  # nothing done yet: nothing to clean up

    return handler


def _start(prog: str, name: str) -> int:
    try:  # SIGINT ignored (a background job of a script): left so
        ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        before = None if ignored else signal.signal(signal.SIGINT, _interrupted_while_starting(prog))
    except ValueError:  # not the main thread: as a plain import
        before = None
    try:
        from datakit import cli

        command = getattr(cli, name)
    finally:
        if before is not None:
            signal.signal(signal.SIGINT, before)
    try:
        return command()
    except KeyboardInterrupt:  # between the handler's end and the command's own
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


_COMMANDS = ("unzip", "check", "stats", "pack-lmdb", "info", "verify", "preview", "bench", "doctor")


def prog_of(argv) -> str:
    """``datakit COMMAND`` as the command's own lines name it (``datakit check: interrupted``), its first word
    found without argparse; ``datakit`` where there is none."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return f"datakit {word}" if word in _COMMANDS else "datakit"


def datakit() -> int:
    return _start(prog_of(sys.argv[1:]), "main")


def unzip_gbk() -> int:
    return _start("unzip-gbk", "unzip_gbk_main")
