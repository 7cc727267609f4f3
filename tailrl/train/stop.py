"""Stopping a run on a signal without losing a step: what SLURM (--signal, time limit, preemption),
Kubernetes, spot instances and Ctrl-C send.

    SIGTERM | SIGINT | SIGUSR1 -> the current step finishes -> every rank agrees at the step's one gather
        -> a checkpoint at that step (every rank) -> metrics flushed -> exit EXIT_STOPPED (75)
    `tailrl train --resume RUN_DIR` then continues bitwise as if never stopped.

A rollout still running when finishing the step would pass train.stop_grace_s after the signal (less what
the rest of the step took last time: update, evaluation, save) is abandoned: StepAbandoned is raised inside
it, and only there (`rollout()` marks the window; `shield()` keeps it out of callbacks that talk to other
processes). The ranks learn it at the rollout's gather, so all abandon together; the trainer rolls its
state back to the step's start and checkpoints that boundary.

A second Ctrl-C stops at once (KeyboardInterrupt; `tailrl` exits 130): checkpoints are written to a
temporary folder and renamed, metric rows are flushed one by one, so what was written stays. A repeated
SIGTERM or SIGUSR1 is ignored: SLURM signals every process of a step and torchrun forwards its own copy,
so a rank can get the same stop twice.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time

EXIT_STOPPED = 75  # sysexits' EX_TEMPFAIL: stopped cleanly at a step boundary; resume to continue
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


class StepAbandoned(Exception):
    """The step's rollout was cut at the stop deadline; args[0] names the stop (a signal, or a peer's)."""


class StopSignals:
    """The stop request of one process: signal handlers while entered (main thread only), the abandon
    deadline of a rollout, and `request()` for a stop asked from code."""

    def __init__(self, grace_s: float, announce: bool = True):
        self.grace_s = max(0.0, grace_s)
        self.announce = announce  # under torchrun rank 0 speaks for the job
        self.reserve_s = 0.0  # seconds the step needs after its rollout (the trainer sets it before each step)
        self.signal: str | None = None
        self._t0 = math.inf  # time.monotonic() of the first stop request
        self._window = False  # inside a rollout: StepAbandoned may be raised
        self._shield = 0
        self._installed: dict[int, object] = {}
        self._armed = False  # our ITIMER_REAL is set (only then is it cleared: another's timer is left alone)

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def request(self, name: str) -> None:
        """Stop at the next step boundary (what a signal does); the first request wins."""
        if self.signal is not None:
            return
        self.signal, self._t0 = name, time.monotonic()
        if self.announce:  # os.write: a handler may run in the middle of a print to the same stream
            os.write(2, f"\ntailrl: {name}: stopping after this step (a rollout that would run past "
                        f"train.stop_grace_s={self.grace_s:g}s is abandoned); Ctrl-C again stops at once\n".encode())
        self._check()

    # -- handlers --------------------------------------------------------------------------------
    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (*STOP_SIGNALS, signal.SIGALRM):
                self._installed[sig] = signal.signal(sig, self._alarm if sig == signal.SIGALRM else self._handle)
        return self

    def __exit__(self, *exc) -> None:
        self._disarm()
        for sig, previous in self._installed.items():
            signal.signal(sig, previous)
        self._installed.clear()

    def _handle(self, signum: int, frame) -> None:
        if self.signal is None:
            self.request(signal.Signals(signum).name)
        elif signum == signal.SIGINT:  # a person pressed Ctrl-C twice
            raise KeyboardInterrupt

    def _alarm(self, signum: int, frame) -> None:
        self._check()

    # -- the rollout window ----------------------------------------------------------------------
    @contextlib.contextmanager
    def rollout(self):
        """The part of a step that may be abandoned: StepAbandoned is raised inside when a stop's deadline
        passes (at once when it has passed already)."""
        self._window = True
        try:
            self._check()
            yield
        finally:
            self._window = False
            self._disarm()

    @contextlib.contextmanager
    def shield(self):
        """Inside a rollout: code that must not be cut (handing a group to the reward processes); a deadline
        passing here raises when it ends."""
        self._shield += 1
        try:
            yield
        except BaseException:
            self._shield -= 1
            raise
        self._shield -= 1
        self._check()

    def deadline(self) -> float:
        """time.monotonic() after which a rollout is abandoned (inf without a stop)."""
        return self._t0 + self.grace_s - self.reserve_s

    def _check(self) -> None:
        if not (self._window and self.signal is not None):
            return
        left = self.deadline() - time.monotonic()
        if left <= 0:
            if not self._shield:
                raise StepAbandoned(self.signal)
        elif self._installed:  # wake up at the deadline (SIGALRM runs _check again)
            signal.setitimer(signal.ITIMER_REAL, left)
            self._armed = True

    def _disarm(self) -> None:
        if self._armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self._armed = False
