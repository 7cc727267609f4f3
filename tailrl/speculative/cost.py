"""Cost models fitted online. The target's forward: t(N) = c0 + c1 * N seconds for a forward over N tokens,
fitted by least squares to a short calibration and then to every verify forward the engine runs (a sliding
window), so it follows the machine and the current context lengths. The same class models whole-step wall
time against the batch size (plain decode steps, and the speculative path's own overhead: planning,
drafting bookkeeping, trees, acceptance).

A forward's time is far from affine over the sizes a rollout sees: on a 2-core CPU SmolLM2's forwards of
1 / 4 / 64 tokens take ~58 / ~79 / ~300 ms, and one line through all of them predicts ~118 ms for the
1-token one, so the planner declined speculation in the tail, where it pays. `coefficients(near=n)` is
therefore the line fitted *near* n: the points weighted by exp(-d^2 / 2) with d their distance from n in
octaves — the tangent of the measured curve where it will be used (far points still weigh a little, so a
size never measured gets the global slope through the local level)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict, deque
from dataclasses import dataclass, field

from tailrl.engine.probe import time_forward
from tailrl.perf.fit import add_point, affine_from_sums, one_size


class ForwardCost:
    """Online t = c0 + c1 * n over (n, seconds) points: the calibration (kept) and the last `window`
    observations. Sums per half-octave bin of n, so an observation and a fit are O(bins)."""

    def __init__(self, window: int = 256, default: tuple[float, float] = (1e-3, 1e-5)):
        self.default = default
        self.calibration: list[tuple[float, float]] = []
        self.observed: deque[tuple[float, float]] = deque()
        self.window = window
        self._bins: dict[int, list[float]] = {}  # half-octave bin of n -> sums [w, w n, w t, w n^2, w n t]
        self._fits: dict[int | None, tuple[float, float]] = {}

    @staticmethod
    def _bin(n: float) -> int:
        return round(2 * math.log2(max(n, 1.0)))

    def _add(self, n: float, t: float, sign: float) -> None:
        b = self._bin(n)
        sums = self._bins.setdefault(b, [0.0] * 5)
        add_point(sums, n, t, sign)
        if sums[0] < 0.5:  # empty (the count is exact; the other sums may keep rounding dust)
            del self._bins[b]
        self._fits.clear()

    def calibrate(self, engine, reps: int = 3, sizes: tuple[int, ...] = (1, 4, 16, 64)) -> None:
        """Time forwards of one scratch row with n new tokens over a short context (real kernels, no requests)."""
        cache = engine.cache
        sizes = tuple(n for n in sizes if cache.blocks_for(16 + n) <= cache.num_free) or (1,)
        for n in sizes:
            for t in time_forward(engine, 1, n, ctx=16, reps=reps):
                self.calibration.append((float(n), t))
                self._add(float(n), t, 1.0)

    def observe(self, n_tokens: int, seconds: float) -> None:
        self.observed.append((float(n_tokens), seconds))
        self._add(float(n_tokens), seconds, 1.0)
        if len(self.observed) > self.window:
            self._add(*self.observed.popleft(), -1.0)

    def fitted(self) -> bool:
        """Any measurement yet (otherwise coefficients() is the default)."""
        return bool(self._bins)

    def coefficients(self, near: float | None = None) -> tuple[float, float]:
        """(c0, c1): least squares over every point (near None), or weighted toward sizes near `near` (module
        docstring; resolved to half an octave); with one size only, proportional (0, t / n); the default
        before any point."""
        key = None if near is None else self._bin(near)
        fit = self._fits.get(key)
        if fit is None:
            only = next(iter(self._bins.values())) if len(self._bins) == 1 else None
            if not self._bins:
                fit = self.default
            elif only is not None and one_size(only):
                fit = (0.0, only[2] / max(only[1], 1e-12))  # one size: proportional
            else:
                sums = [0.0] * 5
                for b, s in self._bins.items():
                    w = 1.0 if key is None else math.exp(-0.125 * (b - key) ** 2)  # (b - key) / 2 octaves
                    for i in range(5):
                        sums[i] += w * s[i]
                fit = affine_from_sums(sums)
            self._fits[key] = fit
        return fit


@dataclass
class _Bucket:
    """Measurements and verdict state of one batch-size bucket (see ThroughputGate)."""

    plain: deque = field(default_factory=lambda: deque(maxlen=3))  # tokens/s of the last plain steps
    spec: list[float] = field(default_factory=lambda: [0.0, 0.0])  # tokens, seconds (weighted) since the last re-test
    plain_since_spec: int = 0
    spec_since_plain: int = 0
    wait: int = 0  # plain steps a "slower" verdict holds before a speculative re-test
    first_wait: int = 0  # that wait after the first losing step (a new rollout starts over from it)
    losses: int = 0  # losing re-tests in a row
    refresh: int = 0  # speculative steps a "faster" verdict holds before a plain step re-measures the baseline
    refreshes: int = 0  # baselines re-measured since the bucket last measured slower
    predicted: float | None = None  # the gain the models predicted for the step that made it slower

    def gain(self) -> float:
        """Speculative tokens/s over plain tokens/s (the plain baseline: median of the last plain steps)."""
        return self.spec[0] / self.spec[1] / statistics.median(self.plain)


class ThroughputGate:
    """The final word on whether speculating pays at a batch size: measured tokens per second of speculative
    and plain decode steps per power-of-two batch-size bucket. The plain baseline is the median rate of the
    bucket's last 3 plain steps (recent: contexts grow, the machine's load changes; a median: one noisy
    step does not move it); a bucket measures a plain step first. Speculative steps are weighted
    exponentially (`decay` a step) since the bucket's verdict was last re-tested.

    Both verdicts are re-tested, so neither a stale nor a one-off measurement decides for long:
    - "slower": by one speculative step judged on its own (the record it re-tests is dropped), after as
      many plain steps as keep that step's measured loss within `probe_budget` of their time (loss /
      probe_budget, at least 1), doubling with each losing re-test, at most `remeasure_after`; a new
      rollout (acceptance changes with history, the policy) starts over from the first wait. Where the
      caller passes the gain its models predict, also at once when that prediction has risen by more
      than the measured shortfall (the models learned that acceptance rose since the bucket lost). One
      step with one-off costs, or measured while nothing drafted well, switches speculation off for a
      few steps, not for the rest of the tail or the rollouts after it; where speculation never pays,
      re-tests cost at most `probe_budget` of the plain time, halving with each;
    - "faster", by gain g: by one plain step that re-measures the baseline after (g - 1) / probe_budget
      speculative steps (what it gives up, 1 - 1/g of a step, within probe_budget of their time, times g:
      the larger the margin, the further off a baseline would have to be to reverse it), doubling with
      each baseline that confirms it."""

    def __init__(self, remeasure_after: int = 256, probe_budget: float = 0.1, decay: float = 0.9):
        self.remeasure_after, self.probe_budget, self.decay = remeasure_after, probe_budget, decay
        self.buckets: dict[int, _Bucket] = defaultdict(_Bucket)

    def record(self, kind: str, batch: int, tokens: int, seconds: float, predicted: float | None = None) -> None:
        """A finished decode step: `kind` "spec" or "plain", tokens emitted, wall seconds; predicted: the
        gain the models predicted for a speculative step, if any."""
        b = self.buckets[batch.bit_length()]
        if kind != "spec":
            b.plain.append(tokens / max(seconds, 1e-12))
            b.plain_since_spec += 1
            if b.spec_since_plain and b.refresh and b.spec_since_plain >= b.refresh:
                b.refreshes += 1  # a baseline re-measured while speculation measured faster
            b.spec_since_plain = 0
        elif b.plain:  # (without a plain baseline there is nothing to judge it against)
            self._judge(b, batch, tokens, seconds, predicted)

    def _judge(self, b: _Bucket, batch: int, tokens: int, seconds: float, predicted: float | None) -> None:
        """Add one speculative step to its bucket and set how long the verdict it leaves holds. A step
        taken while the bucket measured slower is a re-test: it is judged on its own."""
        if b.spec[1] > 0 and b.gain() < 1.0:
            b.spec[:] = [0.0, 0.0]
        b.spec[0] = self.decay * b.spec[0] + tokens
        b.spec[1] = self.decay * b.spec[1] + max(seconds, 1e-12)
        b.plain_since_spec = 0
        b.spec_since_plain += 1
        g = b.gain()
        if g >= 1.0:  # faster: a plain step re-measures the baseline every (g - 1) / probe_budget steps
            b.losses = b.wait = 0
            b.refresh = self._hold(g - 1.0, b.refreshes)
            return
        rate = statistics.median(b.plain)
        loss = max(0.0, seconds - tokens / rate) * rate / batch  # in plain steps of this batch
        if b.losses == 0:
            b.first_wait = self._hold(loss, 0)
        b.losses += 1
        b.refreshes = 0
        b.predicted = predicted
        b.wait = self._hold(loss, b.losses - 1)

    def _hold(self, cost: float, doublings: int) -> int:
        """Steps a verdict holds so that re-testing it (costing `cost` steps) takes at most probe_budget
        of them, doubled `doublings` times, at most remeasure_after."""
        steps = max(1, math.ceil(cost / self.probe_budget - 1e-9))  # (rates are float sums)
        return min(self.remeasure_after, steps << min(doublings, 30))

    def new_rollout(self) -> None:
        """A rollout starts: acceptance may have changed (drafters' history, the policy's weights), so every
        "slower" verdict is re-tested after its first wait, counted from now."""
        for b in self.buckets.values():
            if b.losses:
                b.losses, b.wait, b.plain_since_spec = 1, b.first_wait, 0

    def slower(self, batch: int, predicted: float | None = None) -> bool:
        """Whether the next step in this bucket should be a plain one: speculative steps measured slower and
        the verdict is not due for a re-test (predicted: the models' gain now), or the baseline is due to be
        re-measured; True too while the bucket has no plain step yet."""
        b = self.buckets[batch.bit_length()]
        if not b.plain:
            return True
        if b.spec[1] == 0:
            return False  # never measured here: the models decide
        g = b.gain()
        if g >= 1.0:
            return 0 < b.refresh <= b.spec_since_plain
        if predicted is not None and b.predicted and predicted * g >= b.predicted:
            return False  # the prediction rose by more than the measured shortfall: re-test
        return b.plain_since_spec < b.wait
