"""Affine cost models fitted online. The target's forward: t(N) = c0 + c1 * N seconds for a forward
over N tokens, fitted by least squares to a short calibration and then to every decode / verify
forward the engine runs (a sliding window), so it follows the machine and the current context
lengths. The same class models whole-step wall time against the batch size (plain decode steps, and
the speculative path's own overhead: planning, drafting bookkeeping, trees, acceptance)."""

from __future__ import annotations

from collections import defaultdict, deque

from tailrl.engine.probe import time_forward
from tailrl.perf.fit import fit_affine


class ForwardCost:
    def __init__(self, window: int = 256, default: tuple[float, float] = (1e-3, 1e-5)):
        self.default = default
        self.calibration: list[tuple[float, float]] = []
        self.observed: deque[tuple[float, float]] = deque(maxlen=window)
        self._fit: tuple[float, float] | None = None

    def calibrate(self, engine, reps: int = 3, sizes: tuple[int, ...] = (1, 4, 16, 64)) -> None:
        """Time forwards of one scratch row with n new tokens over a short context (real kernels, no requests)."""
        cache = engine.cache
        sizes = tuple(n for n in sizes if cache.blocks_for(16 + n) <= cache.num_free) or (1,)
        for n in sizes:
            self.calibration += [(float(n), t) for t in time_forward(engine, 1, n, ctx=16, reps=reps)]
        self._fit = None

    def observe(self, n_tokens: int, seconds: float) -> None:
        self.observed.append((float(n_tokens), seconds))
        self._fit = None

    def fitted(self) -> bool:
        """Any measurement yet (otherwise coefficients() is the default)."""
        return bool(self.calibration or self.observed)

    def coefficients(self) -> tuple[float, float]:
        """(c0, c1): least squares over >= 2 distinct sizes; with one size only, proportional (0, t / n)."""
        if self._fit is None:
            pts = self.calibration + list(self.observed)
            if len({p[0] for p in pts}) >= 2:
                self._fit = fit_affine(pts)
            elif pts:
                self._fit = (0.0, sum(p[1] for p in pts) / max(sum(p[0] for p in pts), 1e-12))
            else:
                self._fit = self.default
        return self._fit


class ThroughputGate:
    """The final word on whether speculating pays at a batch size: measured tokens per second of
    speculative and plain decode steps per power-of-two batch-size bucket, exponentially weighted. A
    bucket measures a plain step first (the baseline to beat); a "slower" verdict expires after
    `remeasure_after` plain steps in the bucket (acceptance drifts)."""

    def __init__(self, remeasure_after: int = 256):
        self.remeasure_after = remeasure_after
        self.buckets: dict[int, dict] = defaultdict(lambda: {"spec": [0.0, 0.0], "plain": [0.0, 0.0]})

    def record(self, kind: str, batch: int, tokens: int, seconds: float) -> None:
        """A finished decode step: `kind` "spec" or "plain", tokens emitted, wall seconds."""
        b = self.buckets[batch.bit_length()]
        acc = b[kind]
        acc[0] = 0.9 * acc[0] + tokens
        acc[1] = 0.9 * acc[1] + seconds
        b["plain_since_spec"] = 0 if kind == "spec" else b.get("plain_since_spec", 0) + 1

    def slower(self, batch: int) -> bool:
        """Speculative steps in this bucket emitted fewer tokens per second than plain ones; True too while
        the bucket has no plain step yet."""
        b = self.buckets[batch.bit_length()]
        if b["plain"][1] == 0:
            return True
        if b["spec"][1] == 0 or b.get("plain_since_spec", 0) >= self.remeasure_after:
            return False  # never measured here, or long ago: the models decide
        return b["spec"][0] * b["plain"][1] < b["plain"][0] * b["spec"][1]
