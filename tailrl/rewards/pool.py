"""`RewardPool`: reward calls in worker processes, scored while the rest of the rollout still runs.

Place in the flow: engine.generate(on_finish=...) -> **pool.submit(group)** as each group's last rollout
finishes -> ... -> **pool.result(ticket)** after generation -> advantages. Only the groups that finish
last are still being scored when generation ends (the tail), instead of the whole batch.

Same contract as `Reward` (base.py, scoring.py): every call `fn(prompt, completion, **row)` scores a
number or 0, failures are counted and warned once per function. Processes add what threads cannot do:
a call past `timeout_s` has its worker SIGKILLed (also when stuck in C code) and counts as a timeout;
a worker that dies during a call (segfault, os._exit) counts an error for that call. Either way a
fresh worker replaces it and the calls queued behind go to the next free worker.

One dispatcher thread owns the workers (pool_worker.py, fresh interpreters): it sends calls oldest
submission first, at most `_PIPELINE` per worker, reads results, and kills overdue workers. The
caller's thread only queues calls (`submit`) and waits for a submission to complete (`result`).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing import Pipe
from multiprocessing.connection import Connection, wait

from tailrl.errors import UserError
from tailrl.rewards.registry import REWARDS
from tailrl.rewards.scoring import RewardBatch, Scored, Scorer, Tally
from tailrl.rewards.settings import check_settings

__all__ = ["RewardPool"]

_PIPELINE = 2  # calls in flight per worker: the next one waits in its socket and starts with no round trip
_PIPELINE_BYTES = 64 * 1024  # larger calls go only to an idle worker (reading), so a send never blocks
_RESTARTS = 3  # replacement workers in a row that fail to start before the pool gives up
_GRACE_S = 2.0  # at close, idle workers get this long to exit on their own before they are killed


@dataclass
class _Job:
    """One submission: its items and the grid[f][i] of results filled in as they come."""

    prompts: list[str]
    completions: list[str]
    rows: list[dict]
    grid: list[list[Scored | None]]
    left: int  # calls not yet scored


@dataclass(frozen=True)
class _Call:
    ticket: int
    f: int  # function index
    i: int  # item index in the submission


class _Worker:
    """One worker process and what it was sent; calls[0] is running since `started` (monotonic s)."""

    def __init__(self, args: dict):
        ours, theirs = Pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tailrl.rewards.pool_worker", str(theirs.fileno()), json.dumps(args)],
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        self.conn: Connection = ours
        self.ready = False
        self.calls: deque[_Call] = deque()
        self.started = 0.0

    def exit_text(self) -> str:
        """How the process ended (it is killed first if it somehow still runs)."""
        try:
            code = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        if code < 0:
            try:
                return signal.Signals(-code).name
            except ValueError:
                return f"signal {-code}"
        return f"exit code {code}"


class RewardPool(Scorer):
    """Weighted reward functions scored by `workers` processes; see the module docstring."""

    def __init__(self, functions: Sequence[str], weights: Sequence[float] = (), timeout_s: float = 10.0,
                 workers: int = 2):
        functions, self.weights = check_settings(functions, weights, timeout_s)
        if workers < 1:
            raise UserError(f"a reward pool needs at least 1 worker, got {workers} (0 scores in-process)")
        self.timeout_s = float(timeout_s)  # <= 0: no limit, as for Reward
        self.workers = workers
        self.restarts = 0  # workers replaced after a timeout or a death
        self._args = {"functions": list(functions), "imports": _imports(functions),
                      "sys_path": list(sys.path), "parent": os.getpid()}
        self._cond = threading.Condition()  # guards the queue, the jobs and the states below
        self._queue: deque[_Call] = deque()
        self._jobs: dict[int, _Job] = {}
        self._next_ticket = 0
        self._names: list[str] | None = None
        self._up = False  # every first worker reported ready
        self._closing = False  # the dispatcher stops (close() was called, or the pool gave up)
        self._closed = False
        self._broken: Exception | None = None  # why results can no longer come
        self._failed_starts = 0
        self._live: list[_Worker] = []  # owned by the dispatcher thread
        self._procs: list[subprocess.Popen] = []  # started and not yet reaped (close's safety net)
        self._wake_recv, self._wake_send = socket.socketpair()
        self._wake_recv.setblocking(False)
        self._wake_send.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="tailrl-reward-pool", daemon=True)
        self._thread.start()
        try:
            with self._cond:
                while not self._up and self._broken is None:
                    self._cond.wait()
                if self._broken is not None:
                    raise self._broken
        except BaseException:  # a reward that cannot load, or Ctrl-C while the workers start
            self.close()
            raise
        self.names: list[str] = self._names or []
        self._tally = Tally(self.names, self.weights, self.timeout_s)

    # -- the caller's side ------------------------------------------------------------------------
    def submit(self, prompts: list[str], completions: list[str], rows: list[dict]) -> int:
        """Queue one call per (function, completion) behind everything submitted before; returns at once."""
        n = self._check_aligned(prompts, completions, rows)
        k = len(self.names)
        with self._cond:
            if self._closing:  # closed, or given up (then say why)
                raise RuntimeError("submit() on a closed RewardPool") if self._closed else self._broken
            ticket, self._next_ticket = self._next_ticket, self._next_ticket + 1
            grid: list[list[Scored | None]] = [[None] * n for _ in range(k)]
            self._jobs[ticket] = _Job(list(prompts), list(completions), list(rows), grid, n * k)
            self._queue.extend(_Call(ticket, f, i) for i in range(n) for f in range(k))
        self._wake()
        return ticket

    def result(self, ticket: int) -> RewardBatch:
        """Block until every call of `ticket` is scored; each ticket's result can be taken once."""
        with self._cond:
            job = self._jobs.get(ticket)
            if job is None:
                raise KeyError(f"no pending reward submission {ticket} (unknown, or its result was taken)")
            while job.left and self._broken is None:
                self._cond.wait()
            if job.left:
                raise self._broken
            del self._jobs[ticket]
        return self._tally.batch(job.grid, len(job.completions))

    def close(self) -> None:
        """Stop the workers (idle ones exit, busy ones are killed) and wait for them; never hangs."""
        with self._cond:
            if self._closed:
                return
            self._closed = self._closing = True
            self._broken = self._broken or RuntimeError("the RewardPool was closed before this was scored")
            self._cond.notify_all()
        self._wake()
        self._thread.join(timeout=_GRACE_S + 10.0)
        for proc in list(self._procs):  # only left when the dispatcher could not finish its own shutdown
            proc.kill()
            proc.wait()
        self._procs.clear()
        self._wake_recv.close()
        self._wake_send.close()

    def _wake(self) -> None:
        try:
            self._wake_send.send(b"\0")
        except OSError:  # buffer full (a wake-up is pending anyway) or already closed
            pass

    # -- the dispatcher thread --------------------------------------------------------------------
    def _run(self) -> None:
        try:
            for _ in range(self.workers):
                self._start_worker()
            while not self._closing:
                self._step()
        except BaseException as e:  # a bug here must not leave result() waiting forever
            self._give_up(RuntimeError(f"the reward pool's dispatcher failed: {type(e).__name__}: {e}"))
        finally:
            self._stop_workers()

    def _step(self) -> None:
        deadline = self._next_deadline()
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        readable = wait([self._wake_recv, *(w.conn for w in self._live)], timeout)
        if self._wake_recv in readable:
            try:
                while self._wake_recv.recv(4096):
                    pass
            except BlockingIOError:
                pass
        for w in list(self._live):
            if w.conn in readable:
                self._receive(w)
        self._expire()
        self._feed()

    def _next_deadline(self) -> float | None:
        if self.timeout_s <= 0:
            return None
        return min((w.started + self.timeout_s for w in self._live if w.ready and w.calls), default=None)

    def _receive(self, w: _Worker) -> None:
        """Handle every message waiting from `w`; its closed socket means it died."""
        while w in self._live:
            try:
                if not w.conn.poll():
                    return
                message = w.conn.recv()
            except (EOFError, OSError):
                self._lost(w, Scored(failure=f"worker process died ({w.exit_text()}) during this call"))
                return
            if isinstance(message, Scored):
                self._record(w.calls.popleft(), message)
                w.started = time.monotonic()  # the worker went straight on to its next call
            elif message[0] == "ready":
                self._ready(w, message[1])
            else:  # ("failed", why): it could not load the rewards
                self._remove(w)
                self._start_failed(UserError(message[1]))

    def _ready(self, w: _Worker, names: list[str]) -> None:
        w.ready = True
        self._failed_starts = 0
        with self._cond:
            self._names = self._names or names
            if not self._up and sum(x.ready for x in self._live) == self.workers:
                self._up = True
                self._cond.notify_all()

    def _expire(self) -> None:
        if self.timeout_s <= 0:
            return
        now = time.monotonic()
        for w in list(self._live):
            # a result already waiting in the socket is read next round, not thrown away with the worker
            if w.ready and w.calls and now >= w.started + self.timeout_s and not w.conn.poll():
                w.proc.kill()
                self._lost(w, Scored(timed_out=True))

    def _lost(self, w: _Worker, head: Scored) -> None:
        """A worker was killed or died: its running call scores `head`, the calls sent after it are
        queued again (they never started), and a fresh worker takes its place."""
        self._remove(w)
        if not w.ready:
            self._start_failed(UserError(f"a reward worker ended ({w.exit_text()}) while loading the rewards "
                                         f"{self._args['functions']} (its error is above)"))
            return
        if w.calls:
            self._record(w.calls.popleft(), head)
        with self._cond:
            self._queue.extendleft(reversed(w.calls))
        self.restarts += 1
        if not self._closing:
            self._start_worker()

    def _start_failed(self, error: UserError) -> None:
        self._failed_starts += 1
        if not self._up or self._failed_starts >= _RESTARTS:
            self._give_up(error)
        elif not self._closing:
            self._start_worker()

    def _feed(self) -> None:
        for w in self._live:
            while w.ready and len(w.calls) < _PIPELINE:
                with self._cond:
                    if not self._queue:
                        return
                    call = self._queue.popleft()
                    job = self._jobs[call.ticket]
                try:
                    item = (call.f, job.prompts[call.i], job.completions[call.i], job.rows[call.i])
                    data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
                except Exception as e:  # a row that cannot cross to a process: that call's failure
                    why = f"row cannot be sent to a reward worker: {type(e).__name__}: {e}"
                    self._record(call, Scored(failure=why))
                    continue
                if w.calls and len(data) > _PIPELINE_BYTES:
                    self._requeue(call)
                    break
                try:
                    w.conn.send_bytes(data)
                except OSError:  # the worker is gone; reading its socket next round replaces it
                    self._requeue(call)
                    break
                if not w.calls:
                    w.started = time.monotonic()
                w.calls.append(call)

    def _requeue(self, call: _Call) -> None:
        with self._cond:
            self._queue.appendleft(call)

    def _record(self, call: _Call, scored: Scored) -> None:
        with self._cond:
            job = self._jobs[call.ticket]
            job.grid[call.f][call.i] = scored
            job.left -= 1
            if not job.left:
                self._cond.notify_all()

    def _give_up(self, error: Exception) -> None:
        with self._cond:
            self._broken = self._broken or error
            self._closing = True
            self._cond.notify_all()

    def _start_worker(self) -> None:
        w = _Worker(self._args)
        self._procs.append(w.proc)
        self._live.append(w)

    def _remove(self, w: _Worker) -> None:
        self._live.remove(w)
        w.conn.close()
        self._reap(w.proc)

    def _reap(self, proc: subprocess.Popen) -> None:
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return  # close() kills and reaps it
        if proc in self._procs:
            self._procs.remove(proc)

    def _stop_workers(self) -> None:
        for w in self._live:
            if w.ready and not w.calls:
                try:
                    w.conn.send_bytes(pickle.dumps(None))
                except OSError:
                    pass
            else:  # busy or still loading: its result is not wanted any more
                w.proc.kill()
        end = time.monotonic() + _GRACE_S
        for w in self._live:
            try:
                w.proc.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.proc.kill()
            w.conn.close()
            self._reap(w.proc)
        self._live.clear()


def _imports(functions: Sequence[str]) -> list[str]:
    """Modules a worker imports first, so a name the trainer's process registered at import (a plugin's
    `@register`) is registered there too; a name registered by the script being run cannot be."""
    modules = []
    for ref in functions:
        fn = REWARDS[ref.strip()] if ref.strip() in REWARDS else None
        if fn is None:
            continue  # module:function or file.py:function, or unknown: the worker resolves and reports it
        module = getattr(fn, "__module__", None) or ""
        if module == "__main__":
            raise UserError(f"reward '{ref}' is registered by the script being run, which reward workers "
                            "cannot import; define it in a module or file and name it module:function or "
                            "file.py:function (or set reward.workers=0)")
        if module and module not in modules:
            modules.append(module)
    return modules
