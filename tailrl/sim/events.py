"""A discrete-event loop: callbacks run in time order (ties in scheduling order); a callback may
schedule more. Time is simulated seconds, never the wall clock."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable


class EventLoop:
    def __init__(self) -> None:
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        self.processed = 0

    def at(self, t: float, fn: Callable[[], None]) -> None:
        if t < self.now - 1e-12:
            raise ValueError(f"cannot schedule in the past ({t} < {self.now})")
        heapq.heappush(self._queue, (max(t, self.now), self._seq, fn))
        self._seq += 1

    def after(self, dt: float, fn: Callable[[], None]) -> None:
        self.at(self.now + dt, fn)

    def pending(self) -> int:
        return len(self._queue)

    def run(self, until: float = math.inf) -> float:
        """Process events with time <= until; returns the time of the last one processed."""
        while self._queue and self._queue[0][0] <= until:
            t, _, fn = heapq.heappop(self._queue)
            self.now = t
            fn()
            self.processed += 1
        return self.now
