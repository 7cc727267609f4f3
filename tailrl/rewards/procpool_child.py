"""The worker side of `WorkerPool` (procpool.py): the main of `python -m MODULE FD ARGS_JSON`.

A worker module's main is `serve(load)`. `load(args)` runs once in the fresh interpreter (it imports what
the owner named, so "file.py:function" references load here) and returns `(info, answer)`; then

    parent -> worker: message ... None (exit)
    worker -> parent: ("ready", info) | ("failed", one-line why) once, then `answer(message)` per message

in the order the messages were sent. `answer` must catch what the code it runs can raise (an answer is
a value, never an exception); a call that hangs, crashes the interpreter or exits it is the parent's to
notice (it kills and replaces this process).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from tailrl.errors import UserError

__all__ = ["serve"]

Load = Callable[[dict], tuple[Any, Callable[[Any], Any]]]


def serve(load: Load) -> None:
    """Run this process as a pool worker: argv is `FD ARGS_JSON` (see the module docstring)."""
    fd, args = int(sys.argv[1]), json.loads(sys.argv[2])
    die_with_parent(args["parent"])
    ignore_stop_signals()
    faulthandler.enable()  # code that crashes the interpreter leaves its traceback on stderr
    sys.path[:] = args["sys_path"]  # "package.module:function" imports what the parent could import
    conn = Connection(fd)
    try:
        _answer_all(conn, load, args)
    except (EOFError, OSError):  # the pool went away
        pass


def _answer_all(conn: Connection, load: Load, args: dict) -> None:
    try:
        info, answer = load(args)
    except UserError as e:
        conn.send(("failed", str(e)))
        return
    except Exception as e:  # a bug in a user module's import: the user's to fix, said in one line
        conn.send(("failed", f"loading failed: {type(e).__name__}: {e}"))
        return
    conn.send(("ready", info))
    while (message := conn.recv()) is not None:
        conn.send(answer(message))


def ignore_stop_signals() -> None:
    """Ctrl-C reaches the whole process group and SLURM signals every process of a step (SIGTERM at its time
    limit or a preemption): the parent's stop guard (train/stop.py) decides when the step ends, and this
    process dies with it (die_with_parent) or is killed by it (SIGKILL)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this process when the thread that started it ends (the parent exited or was
    killed), even while a call is stuck in C code; elsewhere the closed socket ends an idle worker."""
    if sys.platform.startswith("linux"):
        import ctypes  # lazy: Linux only

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # the parent was gone before the request above took effect
        os._exit(1)
