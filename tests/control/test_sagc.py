"""SAGC controller: synthetic non-stationary environment, exact resume, validation, neighbour moves."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from tailrl.control.base import CONTROLLERS
from tailrl.control.sagc import SAGCController, straggler_event

B = 64  # fixed effective batch: P = B / G groups per step (paper, appendix B)
DELTA = 0.15
PHASES = [
    ({4: 0.05, 8: 0.10, 16: 0.45}, 8),  # (straggler probability per G, largest feasible G)
    ({4: 0.05, 8: 0.40, 16: 0.60}, 4),
]
STEPS, BURN_IN = 1500, 200


def fake_step(rng: random.Random, G: int, p: float) -> list[list[int]]:
    """P = B/G groups of G lengths; a group straggles (max/median = 2.0 > tau) with probability p,
    otherwise max/median = 1.1 < tau."""
    groups = []
    for _ in range(B // G):
        lengths = [100] * (G - 1) + [200 if rng.random() < p else 110]
        rng.shuffle(lengths)
        groups.append(lengths)
    return groups


def run(ctrl: SAGCController, env_rng: random.Random, p: dict[int, float], steps: int):
    chosen, events, groups = [], 0, 0
    for _ in range(steps):
        G = ctrl.choose()
        lengths = fake_step(env_rng, G, p[G])
        ctrl.observe(lengths)
        chosen.append(G)
        events += sum(straggler_event(v, 1.25) for v in lengths)
        groups += len(lengths)
    return chosen, events, groups


def test_fake_step_events_match_tau():
    rng = random.Random(0)
    assert all(straggler_event(v, 1.25) for v in fake_step(rng, 8, 1.0))
    assert not any(straggler_event(v, 1.25) for v in fake_step(rng, 8, 0.0))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_synthetic_change_point(seed):
    ctrl = SAGCController(group_size=8, delta=DELTA, seed=seed)
    env_rng = random.Random(1000 + seed)
    for p, feasible in PHASES:
        run(ctrl, env_rng, p, BURN_IN)
        chosen, events, groups = run(ctrl, env_rng, p, STEPS - BURN_IN)
        assert events / groups <= DELTA + 0.03, (p, events / groups)
        mode = Counter(chosen).most_common(1)[0][0]
        assert mode == feasible, (p, Counter(chosen))


def test_resume_is_exact():
    p = PHASES[0][0]
    ref = SAGCController(group_size=8, delta=DELTA, seed=7)
    full, _, _ = run(ref, random.Random(3), p, 100)

    env = random.Random(3)
    a = SAGCController(group_size=8, delta=DELTA, seed=7)
    first, _, _ = run(a, env, p, 50)
    b = SAGCController(group_size=8, delta=DELTA, seed=999)  # seed is overwritten by the state
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    second, _, _ = run(b, env, p, 50)
    assert first + second == full
    assert b.lam == ref.lam and b.posterior_mean() == ref.posterior_mean()


def test_moves_only_to_neighbours():
    cands = [2, 4, 8, 16, 32]
    ctrl = SAGCController(group_size=32, candidates=cands, delta=0.1, seed=0)
    p = {2: 0.0, 4: 0.02, 8: 0.3, 16: 0.6, 32: 0.9}
    chosen, _, _ = run(ctrl, random.Random(0), p, 400)
    pos = [cands.index(g) for g in chosen]
    assert all(abs(a - b) <= 1 for a, b in zip(pos, pos[1:]))
    assert len(set(chosen)) >= 3  # it did travel down the list


def test_first_choice_is_initial_group_size_and_registry():
    assert CONTROLLERS["sagc"] is SAGCController
    ctrl = SAGCController(group_size=4, unknown_extra="ignored")
    assert ctrl.choose() == 4 and ctrl.choose() == 4
    assert set(ctrl.posterior_mean()) == {4, 8, 16}
    assert all(v == 0.5 for v in ctrl.posterior_mean().values())


@pytest.mark.parametrize("kwargs", [
    {"candidates": ()},
    {"candidates": (0, 4, 8), "group_size": 4},
    {"candidates": (-4, 8), "group_size": 8},
    {"delta": 0.0},
    {"delta": 1.0},
    {"delta": -0.1},
    {"group_size": 6},
    {"gamma": 0.0},
    {"gamma": 1.5},
])
def test_validation(kwargs):
    with pytest.raises(ValueError):
        SAGCController(**{"group_size": 8, **kwargs})
