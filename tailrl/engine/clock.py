"""The rollout clock: seconds since the rollout started, shared by every engine of one rollout (a TP/DP
switch builds new engines mid-rollout and hands them the same clock, so one trace has one time axis)."""

from __future__ import annotations

import time


class Clock:
    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def reset(self) -> None:
        self.t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.t0
