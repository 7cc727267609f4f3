"""The forward-cost model (speculative/cost.py ForwardCost): its local line against a brute-force weighted
least-squares oracle, and why it is local — on a concave cost curve like a CPU's (SmolLM2: 1 / 4 / 64 tokens
~58 / ~79 / ~300 ms) one line through every size mispredicts the tail's small forwards, and the planner then
declines speculation that pays at batch 1."""

from __future__ import annotations

import math
import random

import pytest

from tailrl.config import EngineConfig, SpecConfig
from tailrl.speculative import build_engine
from tailrl.speculative.cost import ForwardCost
from tailrl.speculative.window import expected_tokens, plan_windows
from tests.helpers import tiny_native


def curve(n: float) -> float:
    """A concave forward cost: 70 ms for one token, 90 ms for 4, 210 ms for 64, 370 ms for 256."""
    return 0.050 + 0.020 * math.sqrt(n)


def _oracle(points, near):
    """Weighted least squares over the points, weight exp(-d^2 / 2), d = octaves between half-octave bins."""
    def b(n):
        return round(2 * math.log2(max(n, 1.0)))

    w = [1.0 if near is None else math.exp(-0.125 * (b(n) - b(near)) ** 2) for n, _ in points]
    W = sum(w)
    mx = sum(wi * n for wi, (n, _) in zip(w, points)) / W
    my = sum(wi * t for wi, (_, t) in zip(w, points)) / W
    sxx = sum(wi * (n - mx) ** 2 for wi, (n, _) in zip(w, points)) / W
    sxy = sum(wi * (n - mx) * (t - my) for wi, (n, t) in zip(w, points)) / W
    c1 = max(sxy / sxx, 1e-9)
    return max(my - c1 * mx, 0.0), c1


def test_local_lines_equal_the_weighted_least_squares_over_the_window():
    rng = random.Random(0)
    cost = ForwardCost(window=50)
    cost.calibration = []
    for _ in range(3):
        for n in (1, 4, 16):
            cost.calibration.append((float(n), curve(n)))
            cost._add(float(n), curve(n), 1.0)
    pts = [(float(rng.choice([1, 2, 3, 5, 9, 17, 40, 100, 300])), curve(1) * rng.uniform(0.5, 3)) for _ in range(400)]
    for i, (n, t) in enumerate(pts):
        cost.observe(int(n), t)
        if i % 97 == 0 or i == len(pts) - 1:
            kept = cost.calibration + pts[max(0, i + 1 - 50): i + 1]
            for near in (None, 1, 3, 20, 256):
                got, want = cost.coefficients(near=near), _oracle(kept, near)
                assert got == pytest.approx(want, rel=1e-6, abs=1e-9), (i, near)


def test_one_size_is_proportional_and_nothing_is_the_default():
    cost = ForwardCost(default=(0.5, 0.25))
    assert not cost.fitted() and cost.coefficients() == (0.5, 0.25) and cost.coefficients(near=8) == (0.5, 0.25)
    cost.observe(4, 0.2)
    cost.observe(4, 0.4)
    assert cost.fitted() and cost.coefficients() == pytest.approx((0.0, 0.075))
    assert cost.coefficients(near=100) == pytest.approx((0.0, 0.075))


def _cpu_like(cost: ForwardCost, sizes) -> None:
    for n in sizes:
        cost.observe(n, curve(n))


def test_the_local_line_predicts_the_small_forwards_that_one_line_does_not():
    cost = ForwardCost()
    _cpu_like(cost, [32, 64, 96, 128, 192, 256] * 30 + [1, 2, 3, 5, 6] * 6)  # a large phase, then a tail
    for n in (1, 2, 3, 5, 6):
        c0, c1 = cost.coefficients(near=n)
        assert c0 + c1 * n == pytest.approx(curve(n), rel=0.05)
    c0, c1 = cost.coefficients()
    assert c0 + c1 > 1.3 * curve(1)  # the single line: a 1-token forward ~1.6x too dear


def test_the_planner_speculates_at_batch_1_where_it_pays():
    """At batch 1 with acceptance 0.5 a speculative step pays on this curve (best window: 1.46x); the
    planner's window with the local lines is within 3% of the best and its O(1) prediction within 10% of the
    truth; with single lines (before) it predicted a loss (0.90x) and never tried."""
    model = tiny_native("llama", vocab=61)[0]
    engine = build_engine(model, None, EngineConfig(kv_cache_tokens=4096, block_size=4, spec=SpecConfig(method="ngram")))
    sp = engine.strategy
    sp.cost, sp.plain_step, sp.spec_overhead = ForwardCost(), ForwardCost(default=(0.0, 0.0)), ForwardCost(default=(0.0, 0.0))
    # verify forwards of the large phase (B = 32 .. 8 rows of 1 + k tokens), then of the tail
    _cpu_like(sp.cost, [96, 192, 288, 384, 576, 768] * 30 + [2, 3, 4, 5, 6] * 6)
    for b in [32, 24, 16, 12, 8] * 10 + [4, 3, 2, 1, 1, 1] * 4:  # plain steps: one token a sequence
        sp.plain_step.observe(b, curve(b))
        sp.spec_overhead.observe(b, 0.0)
    sp.alpha_hist = lambda name: 0.5
    sp.draft_s = {n: 0.0 for n in sp.draft_s}
    B, base = 1, 1
    c0, c1 = sp.cost.coefficients(near=base + B * sp._k_guess)
    predicted = sp._predicted_gain(B, base, c0, c1)
    k = plan_windows([0.5], [sp.cfg.k_max], c0, c1, [0.0], base)[0]
    true = expected_tokens(0.5, k) * curve(1) / curve(1 + k)
    best = max(expected_tokens(0.5, j) * curve(1) / curve(1 + j) for j in range(1, sp.cfg.k_max + 1))
    assert k >= 1 and true > 0.97 * best > 1.4 and predicted == pytest.approx(true, rel=0.10)
    g0, g1 = sp.cost.coefficients()  # the single lines of before
    sp.plain_step.coefficients = lambda near=None, f=sp.plain_step.coefficients: f()
    assert sp._predicted_gain(B, base, g0, g1) < 1.0
    engine.close()
