"""SpecActor's TGS model and planners (Alg. 1, Alg. 2) against hand-computed values and brute force,
and the profile's least-squares fit and file round trip."""

import itertools
import random

import pytest

from tailrl.speculative.decoupled.tgs import (
    DraftCost,
    VerifyCost,
    choose,
    il_decoupled,
    load_tgs_profile,
    plan_decoupled,
    reconfigure,
    save_tgs_profile,
    slots_decoupled,
    tau_coupled,
    tau_decoupled,
    tgs_coupled,
    tgs_decoupled,
    tgs_plain,
)
from tailrl.speculative.profiling.tgs import fit_verify

D = DraftCost(1e-3, 1e-4)
V = VerifyCost(2e-3, 1e-4, 5e-5)


def test_hand_computed_values():
    # p = 0.5, w = 2: T_F = (1 - p) * 1 + p * 2 = 1.5, pi_F = p / (p + 1 - p^2) = 0.4, tau = 0.4 * 1.5 + 0.6
    assert tau_decoupled(0.5, 2) == pytest.approx(1.2)
    assert tau_coupled(0.5, 2) == pytest.approx(1.75)
    assert tau_decoupled(1.0, 5) == 5 and tau_coupled(1.0, 5) == 6 and tau_decoupled(0.7, 1) == 1
    # b = 10: slots = 0.4 * 2 + 0.6 = 1.4, V(10, 14) = 3.7 ms < w * D(10) = 4 ms -> IL = 4 ms
    assert tgs_decoupled(D, V, 10, 0.5, 2) == pytest.approx(1.2 / 4e-3)
    assert tgs_coupled(D, V, 10, 0.5, 2) == pytest.approx(1.75 / (4e-3 + 4.5e-3))  # w D + V(10, 30)
    assert tgs_plain(V, 10) == pytest.approx(1 / 3.5e-3)


def test_alg1_pruning_keeps_the_brute_force_optimum():
    rng = random.Random(0)
    for _ in range(200):
        drafts = {g: DraftCost(rng.uniform(1e-4, 5e-3) / g, rng.uniform(1e-6, 1e-4) / g) for g in (1, 2, 3)}
        verifies = {g: VerifyCost(rng.uniform(1e-3, 2e-2) / g, rng.uniform(0, 1e-4) / g, rng.uniform(1e-6, 2e-4) / g)
                    for g in (1, 2, 4)}
        B, G, p = rng.choice([8, 64, 256]), 6, rng.uniform(0.05, 0.99)
        plan = plan_decoupled(B, G, [1, 2, 4], drafts, verifies, p, cap=12)
        best = max(tgs_decoupled(drafts[gd], verifies[gv], -(-(gd + gv) * B // G), p, w) * min(B, (G // (gd + gv)) * -(-(gd + gv) * B // G))
                   for gv, gd, w in itertools.product([1, 2, 4], [1, 2, 3], range(1, 13)) if gd <= gv and gd + gv <= G)
        assert plan.throughput == pytest.approx(best, rel=1e-12)


def test_choose_names_the_fastest_mode():
    plans = choose(10, 2, {1: D, 2: D}, {1: V, 2: V}, 0.5, [1], cap=8)
    assert plans["best"].throughput == max(plans[m].throughput for m in ("off", "coupled", "decoupled"))
    slow_draft = {1: DraftCost(1.0, 0.0), 2: DraftCost(1.0, 0.0)}
    assert choose(10, 2, slow_draft, {1: V, 2: V}, 0.5, [1])["best"].mode == "off"


def test_alg2_reconfigures_below_average_requests_only():
    d, v = DraftCost(1e-4, 0.0), VerifyCost(1e-2, 0.0, 1e-4)  # the verify forward's fixed cost dominates
    out = reconfigure({0: 0.9, 1: 0.9, 2: 0.2}, d, v, cap=8)
    assert set(out) == {2}
    # p = 0.2, coupled: w = 1: 1.2 / 10.3 ms, w = 2: 1.24 / 10.5 ms (best), w = 3: 1.248 / 10.7 ms;
    # decoupled: at best 1.0345 / 10.117 ms (w = 2): after each mismatch a round without drafts
    assert out[2] == (2, "coupled")
    assert reconfigure({}, d, v) == {}
    # in a batch of 64 a coupled request sits out every other round: decoupled keeps it, with the window
    # maximising tau_D / (IL + V'_n slots) (brute force)
    batch = reconfigure({0: 0.9, 1: 0.9, 2: 0.2}, d, v, cap=8, batch=64, p_batch=0.9, w_batch=3)
    il = il_decoupled(d, v, 64, 0.9, 3)
    best = max(range(1, 9), key=lambda w: tau_decoupled(0.2, w) / (il + v.per_token * slots_decoupled(0.2, w)))
    assert batch == {2: (best, "decoupled")}


def test_fit_verify_recovers_coefficients():
    true = VerifyCost(3e-3, 2e-5, 4e-5)
    pts = [(b, b * w, true(b, b * w)) for b in (1, 8, 32, 64) for w in (1, 2, 4)]
    got = fit_verify(pts)
    assert (got.beta, got.per_request, got.per_token) == pytest.approx((3e-3, 2e-5, 4e-5), rel=1e-6)
    assert min(fit_verify([(1, 1, 1.0), (2, 2, 0.5), (4, 8, 0.25)]).__dict__.values()) >= 0


def test_profile_roundtrip(tmp_path):
    prof = {"drafts": {1: D}, "verifies": {1: V, 2: V}, "points": {}, "acceptance": 0.7}
    save_tgs_profile(prof, tmp_path / "p.json", model="m")
    back = load_tgs_profile(tmp_path / "p.json")
    assert back["drafts"] == {1: D} and back["verifies"] == {1: V, 2: V} and back["acceptance"] == 0.7
