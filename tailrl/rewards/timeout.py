"""Run one reward call with a wall-clock limit, in a daemon worker thread.

Python cannot kill a thread, so a call that overruns is abandoned: its worker keeps running the stuck
call in the background (and still holds a share of the GIL while it computes) and exits once the
call returns; the next call goes to a fresh worker. Workers are daemon threads, so a call that
never returns does not keep the process alive at exit. (concurrent.futures' executors join their
threads at exit, which is why this uses a bare daemon thread and only a Future for the hand-off.)

Calls are made one at a time: each gets the full limit to itself and no CPU-bound reward can make
another one time out by competing with it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

__all__ = ["Outcome", "TimedCaller"]


@dataclass(frozen=True)
class Outcome:
    """What one call did: exactly one of `value` (finished), `error` (raised) or `timed_out` applies."""

    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False


class _Worker:
    """One daemon thread taking (fn, args, kwargs, future) jobs from its own inbox; None makes it exit."""

    def __init__(self) -> None:
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._loop, name="tailrl-reward", daemon=True).start()

    def _loop(self) -> None:
        while (job := self.inbox.get()) is not None:
            fn, args, kwargs, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args, **kwargs))
            except Exception as e:
                future.set_exception(e)
            except (
                BaseException
            ) as e:  # sys.exit() in a reward is just an error, never a KeyboardInterrupt here
                future.set_exception(RuntimeError(f"reward raised {type(e).__name__}: {e}"))


class TimedCaller:
    """Calls functions with a per-call timeout; `timeout_s <= 0` calls inline with no limit (debugging).

    Not thread-safe: one caller per `Reward`, used from the trainer's thread.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = float(timeout_s)
        self.abandoned = 0  # workers left running a timed-out call (still alive or since finished)
        self._worker: _Worker | None = None

    def call(self, fn: Callable[..., Any], args: tuple = (), kwargs: dict | None = None) -> Outcome:
        kwargs = kwargs or {}
        if self.timeout_s <= 0:
            try:
                return Outcome(value=fn(*args, **kwargs))
            except Exception as e:  # any reward failure scores 0
                return Outcome(error=e)
        if self._worker is None:
            self._worker = _Worker()
        future: Future = Future()
        self._worker.inbox.put((fn, args, kwargs, future))
        try:
            return Outcome(value=future.result(timeout=self.timeout_s))
        except FutureTimeout:
            if future.done():  # raised TimeoutError itself (same class on Python >= 3.11), or just finished
                error = future.exception()
                return Outcome(error=error) if error is not None else Outcome(value=future.result())
            self._worker.inbox.put(None)  # exit once the stuck call returns
            self._worker = None
            self.abandoned += 1
            return Outcome(timed_out=True)
        except Exception as e:  # raised inside the reward; a Ctrl-C while waiting still propagates
            return Outcome(error=e)

    def close(self) -> None:
        """Let the idle worker exit (optional: it is a daemon thread)."""
        if self._worker is not None:
            self._worker.inbox.put(None)
            self._worker = None
