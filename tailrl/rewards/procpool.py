"""`WorkerPool`: calls answered by worker processes that may hang, crash or exit, each call's fate told.

Shared by the reward pool (pool.py: `RewardPool`) and the tool executor (tailrl/tools/executor.py). The
owner names a worker module (`python -m MODULE FD ARGS_JSON`, whose main is procpool_child.serve) and
sends it picklable messages; every message gets exactly one `Reply`:

    ticket = pool.submit(message, slot=None)   # queued at once; returns at once
    pool.poll(ticket) -> Reply | None           # non-blocking: the reply once it is there (taken once)
    pool.wait(ticket) -> Reply                  # blocking
    Reply(message=<the worker's answer>) | Reply(failure="worker process died (SIGSEGV) during this call")
    | Reply(timed_out=True)                     # + seconds: submit -> reply, wall clock

Processes do what threads cannot: a call running past `timeout_s` has its worker SIGKILLed (also when it
is stuck in C code) and replies `timed_out`; a worker that dies during a call (segfault, os._exit) gives
that call a `failure`. Either way a fresh worker takes its place (`restarts`) and the calls sent to it
behind the lost one go to the next free worker. A message with `slot=s` goes only to the worker in slot
s (0 <= s < workers), in submission order; the rest go to any worker, oldest submission first.

One dispatcher thread owns the workers (fresh interpreters: not a fork of the caller, which holds torch's
threads; not multiprocessing's spawn, which re-imports the caller's __main__): it sends calls, at most
`_PIPELINE` per worker, reads replies, and kills overdue workers. Callers' threads only queue and take.
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
from dataclasses import dataclass
from multiprocessing import Pipe
from multiprocessing.connection import Connection, wait
from typing import Any

from tailrl.errors import UserError

__all__ = ["Reply", "WorkerPool"]

_PIPELINE = 2  # calls in flight per worker: the next one waits in its socket and starts with no round trip
_PIPELINE_BYTES = 64 * 1024  # larger calls go only to an idle worker (reading), so a send never blocks
_RESTARTS = 3  # replacement workers in a row that fail to start before the pool gives up
_GRACE_S = 2.0  # at close, idle workers get this long to exit on their own before they are killed


@dataclass(frozen=True)
class Reply:
    """What became of one call: the worker's `message`, or a `failure` / `timed_out` instead of one."""

    message: Any = None
    failure: str | None = None  # the worker died during the call, or the message could not be sent
    timed_out: bool = False
    seconds: float = 0.0  # from submit to reply (queueing included), wall clock


@dataclass(frozen=True)
class _Call:
    ticket: int
    data: bytes  # the pickled message
    slot: int | None  # the worker slot it must run in, or None for any
    submitted: float  # monotonic s


class _Worker:
    """One worker process and what it was sent; calls[0] is running since `started` (monotonic s)."""

    def __init__(self, module: str, args: dict, slot: int):
        ours, theirs = Pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, str(theirs.fileno()), json.dumps(args)], pass_fds=(theirs.fileno(),)
        )
        theirs.close()
        self.conn: Connection = ours
        self.slot = slot
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


class WorkerPool:
    """`workers` processes running `module`; see the module docstring.

    `what` names the pool in messages and thread names ("reward"); `loading` says what a worker loads at
    start ("the rewards ['math']"). The constructor returns once every worker reported ready (`info` is
    what the first one reported) and raises the UserError a worker sent when it could not load.
    """

    def __init__(self, module: str, args: dict, workers: int, timeout_s: float, what: str, loading: str):
        self.what, self.loading = what, loading
        self.timeout_s = float(timeout_s)  # <= 0: no limit
        self.workers = workers
        self.restarts = 0  # workers replaced after a timeout or a death
        self.info: Any = None  # what the first worker reported when ready
        self._module = module
        self._args = {**args, "sys_path": list(sys.path), "parent": os.getpid()}
        self._cond = threading.Condition()  # guards the queues, the replies and the states below
        self._queue: deque[_Call] = deque()  # calls for any worker
        self._pinned: list[deque[_Call]] = [deque() for _ in range(workers)]  # calls for one slot
        self._replies: dict[int, Reply | None] = {}  # ticket -> reply (None: not yet)
        self._discarded: set[int] = set()  # tickets whose reply nobody will take
        self._next_ticket = 0
        self._up = False  # every first worker reported ready
        self._closing = False  # the dispatcher stops (close() was called, or the pool gave up)
        self._closed = False
        self._broken: Exception | None = None  # why replies can no longer come
        self._failed_starts = 0
        self._live: list[_Worker] = []  # owned by the dispatcher thread
        self._procs: list[subprocess.Popen] = []  # started and not yet reaped (close's safety net)
        self._wake_recv, self._wake_send = socket.socketpair()
        self._wake_recv.setblocking(False)
        self._wake_send.setblocking(False)
        self._thread = threading.Thread(target=self._run, name=f"tailrl-{what}-pool", daemon=True)
        self._thread.start()
        try:
            with self._cond:
                while not self._up and self._broken is None:
                    self._cond.wait()
                if self._broken is not None:
                    raise self._broken
        except BaseException:  # a module that cannot load, or Ctrl-C while the workers start
            self.close()
            raise

    # -- the callers' side ------------------------------------------------------------------------
    def submit(self, message: Any, slot: int | None = None) -> int:
        """Queue `message` behind everything submitted before (for its slot, if any); returns its ticket."""
        if slot is not None and not 0 <= slot < self.workers:
            raise ValueError(f"slot {slot} out of range for {self.workers} workers")
        now = time.monotonic()
        try:
            data, failure = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL), None
        except Exception as e:  # something that cannot cross to a process: that call's failure
            data, failure = b"", f"cannot be sent to a {self.what} worker: {type(e).__name__}: {e}"
        with self._cond:
            if self._closing:  # closed, or given up (then say why)
                raise RuntimeError(f"submit() on a closed {self.what} pool") if self._closed else self._broken
            ticket, self._next_ticket = self._next_ticket, self._next_ticket + 1
            self._replies[ticket] = Reply(failure=failure) if failure else None
            if not failure:
                (self._queue if slot is None else self._pinned[slot]).append(_Call(ticket, data, slot, now))
        self._wake()
        return ticket

    def poll(self, ticket: int) -> Reply | None:
        """The reply to `ticket` if it came (taken: a second poll is a KeyError), else None; never blocks."""
        with self._cond:
            return self._take(ticket, block=False)

    def wait(self, ticket: int) -> Reply:
        """Block until `ticket` is answered; raises why when the pool was closed or gave up first."""
        with self._cond:
            return self._take(ticket, block=True)

    def discard(self, ticket: int) -> None:
        """Nobody will take this ticket's reply: drop it now, or when it comes."""
        with self._cond:
            if self._replies.get(ticket, 0) is None:
                self._discarded.add(ticket)
            self._replies.pop(ticket, None)

    def pids(self) -> list[int]:
        """The worker processes started and not yet reaped."""
        return [proc.pid for proc in list(self._procs)]

    def close(self) -> None:
        """Stop the workers (idle ones exit, busy ones are killed) and wait for them; never hangs."""
        with self._cond:
            if self._closed:
                return
            self._closed = self._closing = True
            self._broken = self._broken or RuntimeError(f"the {self.what} pool was closed before this call ended")
            self._cond.notify_all()
        self._wake()
        self._thread.join(timeout=_GRACE_S + 10.0)
        for proc in list(self._procs):  # only left when the dispatcher could not finish its own shutdown
            proc.kill()
            proc.wait()
        self._procs.clear()
        self._wake_recv.close()
        self._wake_send.close()

    def _take(self, ticket: int, block: bool) -> Reply | None:
        if ticket not in self._replies:
            raise KeyError(f"no pending {self.what} call {ticket} (unknown, or its reply was taken)")
        while block and self._replies[ticket] is None and self._broken is None:
            self._cond.wait()
        reply = self._replies[ticket]
        if reply is None and self._broken is not None:
            raise self._broken
        if reply is not None:
            del self._replies[ticket]
        return reply

    def _wake(self) -> None:
        try:
            self._wake_send.send(b"\0")
        except OSError:  # buffer full (a wake-up is pending anyway) or already closed
            pass

    # -- the dispatcher thread --------------------------------------------------------------------
    def _run(self) -> None:
        try:
            for slot in range(self.workers):
                self._start_worker(slot)
            while not self._closing:
                self._step()
        except BaseException as e:  # a bug here must not leave wait() waiting forever
            self._give_up(RuntimeError(f"the {self.what} pool's dispatcher failed: {type(e).__name__}: {e}"))
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
                self._lost(w, Reply(failure=f"worker process died ({w.exit_text()}) during this call"))
                return
            if w.ready:
                self._record(w.calls.popleft(), Reply(message=message))
                w.started = time.monotonic()  # the worker went straight on to its next call
            elif message[0] == "ready":
                self._ready(w, message[1])
            else:  # ("failed", why): it could not load what it serves
                self._remove(w)
                self._start_failed(UserError(message[1]), w.slot)

    def _ready(self, w: _Worker, info: Any) -> None:
        w.ready = True
        self._failed_starts = 0
        with self._cond:
            if self.info is None:
                self.info = info
            if not self._up and sum(x.ready for x in self._live) == self.workers:
                self._up = True
                self._cond.notify_all()

    def _expire(self) -> None:
        if self.timeout_s <= 0:
            return
        now = time.monotonic()
        for w in list(self._live):
            # a reply already waiting in the socket is read next round, not thrown away with the worker
            if w.ready and w.calls and now >= w.started + self.timeout_s and not w.conn.poll():
                w.proc.kill()
                self._lost(w, Reply(timed_out=True))

    def _lost(self, w: _Worker, head: Reply) -> None:
        """A worker was killed or died: its running call gets `head`, the calls sent after it are queued
        again (they never started), and a fresh worker takes its slot."""
        self._remove(w)
        if not w.ready:
            why = f"a {self.what} worker ended ({w.exit_text()}) while loading {self.loading} (its error is above)"
            self._start_failed(UserError(why), w.slot)
            return
        if w.calls:
            self._record(w.calls.popleft(), head)
        for call in reversed(w.calls):
            self._requeue(call)
        self.restarts += 1
        if not self._closing:
            self._start_worker(w.slot)

    def _start_failed(self, error: UserError, slot: int) -> None:
        self._failed_starts += 1
        if not self._up or self._failed_starts >= _RESTARTS:
            self._give_up(error)
        elif not self._closing:
            self._start_worker(slot)

    def _feed(self) -> None:
        for w in self._live:
            while w.ready and len(w.calls) < _PIPELINE:
                with self._cond:
                    queue = self._pinned[w.slot] if self._pinned[w.slot] else self._queue
                    if not queue:
                        break
                    call = queue.popleft()
                if w.calls and len(call.data) > _PIPELINE_BYTES:
                    self._requeue(call)
                    break
                try:
                    w.conn.send_bytes(call.data)
                except OSError:  # the worker is gone; reading its socket next round replaces it
                    self._requeue(call)
                    break
                if not w.calls:
                    w.started = time.monotonic()
                w.calls.append(call)

    def _requeue(self, call: _Call) -> None:
        with self._cond:
            (self._queue if call.slot is None else self._pinned[call.slot]).appendleft(call)

    def _record(self, call: _Call, reply: Reply) -> None:
        reply = Reply(reply.message, reply.failure, reply.timed_out, time.monotonic() - call.submitted)
        with self._cond:
            if call.ticket in self._discarded:
                self._discarded.discard(call.ticket)
                return
            self._replies[call.ticket] = reply
            self._cond.notify_all()

    def _give_up(self, error: Exception) -> None:
        with self._cond:
            self._broken = self._broken or error
            self._closing = True
            self._cond.notify_all()

    def _start_worker(self, slot: int) -> None:
        w = _Worker(self._module, self._args, slot)
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
            else:  # busy or still loading: its reply is not wanted any more
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
