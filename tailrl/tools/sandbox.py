"""Run model-written Python in a fresh, resource-limited interpreter: `run_python(code, ...) -> text`.

Place in the flow: the built-in `python` tool (builtin.py) -> **run_python** -> its text is the tool's
observation. Limits, each reported in the text when it ends the program:
- CPU time: RLIMIT_CPU (`cpu_s`; SIGXCPU ends the program);
- memory: RLIMIT_AS (`memory_mb` of address space; an allocation past it raises MemoryError);
- wall time: the program is killed after `wall_s` (a sleep or a blocked read uses no CPU);
- output: the first `max_output_chars` of stdout and of stderr are kept, the rest drained and dropped;
- no core dumps, no stdin, a fresh empty working directory (deleted after), a clean environment.

No access to the caller's state: a new interpreter (`python -s`: no user site), not a fork. It is not
`-I`, because isolated mode ignores PYTHONHASHSEED and the output must be deterministic: the hash seed is
fixed (0) and `random` is seeded (0), so the same code prints the same text in every run. The program
runs in its own session and the whole process group is killed at the end (children it forked too), and
on Linux it dies with the thread that started it. This bounds resources and isolates state; it is not a
security boundary (the program can read the file system and open sockets): run untrusted models' code
inside a container as well.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time

__all__ = ["run_python"]

# The child's first lines: limits on itself, die with the parent, determinism, then the code (argv[1])
# as __main__ with the wrapper's own frame left out of any traceback.
_WRAPPER = """\
import resource, sys
cpu, mem = int(sys.argv[2]), int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
if sys.platform.startswith("linux"):
    import ctypes, signal
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)
import random
random.seed(0)
source, sys.argv = sys.argv[1], [""]
try:
    exec(compile(source, "<tool>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
except SystemExit:
    raise
except BaseException as e:
    import traceback
    traceback.print_exception(type(e), e, e.__traceback__.tb_next)
    sys.exit(1)
"""

_ENV = {"PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8", "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8",
        "PATH": os.defpath, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run_python(code: str, cpu_s: int = 5, memory_mb: int = 1024, wall_s: float = 10.0,
               max_output_chars: int = 4000) -> str:
    """stdout, then stderr (tracebacks), of `code` run under the limits above, plus one bracketed line
    when a limit ended it or output was cut ("[killed: CPU time limit of 5 s]"); "(no output)" if empty."""
    with tempfile.TemporaryDirectory(prefix="tailrl-python-") as cwd:
        proc = subprocess.Popen(
            [sys.executable, "-s", "-c", _WRAPPER, code, str(int(cpu_s)), str(int(memory_mb) << 20)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=_ENV,
            start_new_session=True,
        )
        limit_bytes = 4 * max_output_chars  # utf-8: at most 4 bytes a character
        out, err, dropped, timed_out, killed = _collect(proc, limit_bytes, wall_s)
        status = proc.wait()
    notes = []
    if timed_out:
        notes.append(f"[killed: wall time limit of {wall_s:g} s]")
    elif status == -signal.SIGXCPU or (status == -signal.SIGKILL and not killed):  # soft, then hard limit
        notes.append(f"[killed: CPU time limit of {int(cpu_s)} s]")
    elif status < 0:
        notes.append(f"[killed by {signal.Signals(-status).name}]")
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    if dropped or max(len(stdout), len(stderr)) > max_output_chars:
        notes.insert(0, "[output truncated]")
    stdout, stderr = stdout[:max_output_chars], stderr[:max_output_chars]
    if stdout and stderr and not stdout.endswith("\n"):
        stdout += "\n"
    text = (stdout + stderr).rstrip("\n")
    return "\n".join(([text] if text.strip() else []) + notes) or "(no output)"


def _collect(proc: subprocess.Popen, limit: int, wall_s: float) -> tuple[bytes, bytes, bool, bool, bool]:
    """(stdout, stderr) up to `limit` bytes each, whether more was dropped, whether `wall_s` ran out, and
    whether the program was still running when its process group was killed (time up, or both pipes
    closed: then it has exited, or closed them itself)."""
    kept = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    dropped = timed_out = False
    deadline = time.monotonic() + wall_s
    with selectors.DefaultSelector() as selector:
        for pipe in kept:
            selector.register(pipe, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                buffer = kept[key.fileobj]
                room = max(0, limit - len(buffer))
                buffer += chunk[:room]
                dropped = dropped or len(chunk) > room
    killed = proc.poll() is None
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the program's children too; it may have exited already
    except ProcessLookupError:
        pass
    for pipe in kept:
        pipe.close()
    return bytes(kept[proc.stdout]), bytes(kept[proc.stderr]), dropped, timed_out, killed
