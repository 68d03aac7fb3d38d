"""The ``datakit`` and ``unzip-gbk`` commands' entry points: a Ctrl-C (or a SIGTERM) while the command's code
is still being imported ends it with one line and exit 130 (143), as one later does, not with a traceback or
no word. Python's own start, before this module runs, is not covered."""

from __future__ import annotations

import os
import signal
import sys


def _interrupted_while_starting(prog: str, before):
    def handler(signum, frame) -> None:
        terminated = signum == signal.SIGTERM
        sys.stderr.write(f"{prog}: {'terminated' if terminated else 'interrupted'}\n")
        sys.stderr.flush()
        os._exit(143 if terminated else 130)  # nothing done yet: nothing to clean up

    handler.before = before  # put back by started(), once the command's arguments are read
    return handler


_IMPORT_MACHINERY = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")


def interrupt(signum, frame) -> None:
    """Python's own Ctrl-C handler (``KeyboardInterrupt``), except where the signal lands inside the import
    machinery itself: there (a module lock's weakref callback) Python prints "Exception ignored in ..." with a
    traceback and drops the interrupt, and the command ran on to the end. The signal is sent again a moment
    later, when that code is left."""
    if frame is not None and frame.f_code.co_filename in _IMPORT_MACHINERY:
        import threading

        timer = threading.Timer(0.02, os.kill, (os.getpid(), signum))
        timer.daemon = True
        timer.start()
        return
    raise KeyboardInterrupt


def started() -> None:
    """The command has read its arguments (the imports they need included) and is about to work: Ctrl-C is
    its own again (:func:`interrupt`). Until then a Ctrl-C ends the process at once: NumPy, imported meanwhile,
    turns one that lands inside its C import into an ImportError ("PyCapsule_Import could not import module
    datetime")."""
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(signum)
            if hasattr(handler, "before"):
                before = handler.before
                signal.signal(signum, interrupt if before is signal.default_int_handler else before)
    except ValueError:  # not the main thread
        pass


def _start(prog: str, name: str) -> int:
    try:  # SIGINT ignored (a background job of a script): left so; SIGTERM (a scheduler's stop) says so too
        for signum in (signal.SIGINT, signal.SIGTERM):
            current = signal.getsignal(signum)
            if current is not signal.SIG_IGN:
                signal.signal(signum, _interrupted_while_starting(prog, current))
    except ValueError:  # not the main thread: as a plain import
        pass
    try:
        from datakit import cli

        command = getattr(cli, name)
        # NumPy, which every command loads, loaded here: a Ctrl-C inside its C import comes out of it as an
        # ImportError ("PyCapsule_Import could not import module datetime"), a traceback, where this handler
        # ends the process with one line
        import numpy  # noqa: F401
    except BaseException:
        started()
        raise
    try:
        code = command()
    except KeyboardInterrupt:  # between the handler's end and the command's own
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    finally:
        _done()
    if cli.group_made:  # a torchrun rank whose group this command made and tore down: see cli.group_made
        _end_now(code)
    return code


def _end_now(code) -> None:
    """End the process with ``code`` as ``sys.exit`` would (the exit hooks run, the streams are flushed), without
    the interpreter's teardown after them."""
    import atexit

    code = 0 if code is None else code if isinstance(code, int) else 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or broken stream: nothing more can be written to it
            pass
    os._exit(code)


def _done() -> None:
    """The command's work is over: a Ctrl-C now would find Python finalizing, its handler gone, and kill the process
    with no word (exit -2) after the work was done; it is ignored instead, and the command's own exit code stands."""
    try:
        if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, interrupt):
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        pass


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
