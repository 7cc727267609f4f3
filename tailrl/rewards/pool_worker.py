"""One reward worker process of `RewardPool` (pool.py): `python -m tailrl.rewards.pool_worker FD ARGS_JSON`.

Place in the flow: RewardPool starts it as a fresh interpreter (not a fork of the trainer, which holds
torch's threads; not multiprocessing's spawn, which re-imports the trainer's __main__) with one end of
a socket pair as FD. It loads the reward functions itself (so "file.py:function" references load here),
runs their `prepare()` hooks, then answers calls one at a time, in the order they were sent:

    parent -> worker: (f, prompt, completion, row) ... None (exit)
    worker -> parent: ("ready", names) | ("failed", message) once, then one `Scored` per call

A call that hangs, crashes the interpreter or exits it is the parent's to notice (it kills and replaces
this process); everything a call can raise is caught here and sent back as a failure.
"""

from __future__ import annotations

import faulthandler
import importlib
import json
import os
import signal
import sys
from multiprocessing.connection import Connection

from tailrl.errors import UserError
from tailrl.rewards.scoring import settle
from tailrl.rewards.settings import Loaded, load_functions
from tailrl.rewards.timeout import Outcome


def serve(conn: Connection, functions: list[str], imports: list[str]) -> None:
    try:
        for module in imports:  # modules whose import registers a reward name the trainer registered
            importlib.import_module(module)
        loaded = load_functions(functions)
    except UserError as e:
        conn.send(("failed", str(e)))
        return
    except Exception as e:  # a bug in a reward module's import: the user's to fix, said in one line
        conn.send(("failed", f"loading the rewards failed: {type(e).__name__}: {e}"))
        return
    conn.send(("ready", [f.name for f in loaded]))
    while (call := conn.recv()) is not None:
        f, prompt, completion, row = call
        conn.send(settle(_call(loaded[f], prompt, completion, row)))


def _call(f: Loaded, prompt: str, completion: str, row: dict) -> Outcome:
    try:
        return Outcome(value=f.fn(prompt, completion, **f.keep(row)))
    except BaseException as e:  # SystemExit too: the call failed, this worker goes on
        return Outcome(error=e)


def _die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this process when the pool's thread that started it ends (the trainer exited or
    was killed), even while a call is stuck in C code; elsewhere the closed socket ends an idle worker."""
    if sys.platform.startswith("linux"):
        import ctypes  # lazy: Linux only

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # the parent was gone before the request above took effect
        os._exit(1)


def main() -> None:
    fd, args = int(sys.argv[1]), json.loads(sys.argv[2])
    _die_with_parent(args["parent"])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent decides
    faulthandler.enable()  # a reward that crashes the interpreter leaves its traceback on stderr
    sys.path[:] = args["sys_path"]  # "package.module:function" imports what the trainer could import
    conn = Connection(fd)
    try:
        serve(conn, args["functions"], args["imports"])
    except (EOFError, OSError):  # the pool went away
        pass


if __name__ == "__main__":
    main()
