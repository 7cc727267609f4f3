"""`tailrl bench spec --workloads tail`'s pieces: the per-phase split of a rollout trace and the side-by-side
comparison (every configuration token-identical to speculation off)."""

from __future__ import annotations

import pytest

from tailrl.bench.spec_tail import _add_phases, compare
from tailrl.config import SpecConfig
from tailrl.engine import Request, SamplingParams
from tailrl.engine.telemetry import RolloutTrace, StepRecord, phase_rates
from tailrl.model import load


def test_phases_split_decode_steps_by_batch_and_count_acceptance():
    steps = [
        StepRecord("prefill", 0.0, 1.0, 8, 80, 8),
        StepRecord("decode", 1.0, 2.0, 8, 8, 8),  # large: owns 1.0 -> 2.0
        StepRecord("verify", 2.5, 3.0, 6, 6 + 12, 6 + 6),  # large: owns 2.0 -> 3.0, 12 drafted, 6 accepted
        StepRecord("verify", 3.0, 3.5, 2, 2 + 8, 2 + 6),  # tail: 8 drafted, 6 accepted
        StepRecord("decode", 3.5, 4.5, 1, 1, 1),  # tail
    ]
    ph = RolloutTrace(steps=steps).phases(tail_batch=4)
    assert ph["large"]["seconds"] == pytest.approx(2.0) and ph["large"]["tokens"] == 20
    assert ph["large"]["acceptance"] == pytest.approx(0.5) and ph["large"]["emitted_per_verify"] == pytest.approx(2.0)
    assert ph["tail"]["seconds"] == pytest.approx(1.5) and ph["tail"]["tokens"] == 9
    assert ph["tail"]["tokens_per_s"] == pytest.approx(6.0) and ph["tail"]["verifies"] == 1
    assert ph["tail"]["acceptance"] == pytest.approx(0.75) and ph["tail"]["emitted_per_verify"] == pytest.approx(4.0)


def test_phases_of_several_rollouts_pool_their_counts():
    """Over rollouts the acceptance is drafted-weighted (pooled counts), not a mean of per-rollout rates
    weighted by verify steps: 6 of 8 drafted in one verify, 0 of 40 in another -> 6 / 48, not 0.375."""
    a = RolloutTrace(steps=[StepRecord("verify", 0.0, 1.0, 2, 2 + 8, 2 + 6)])
    b = RolloutTrace(steps=[StepRecord("verify", 0.0, 1.0, 2, 2 + 40, 2)])
    acc: dict = {}
    for t in (a, b):
        _add_phases(acc, t.phase_counts(tail_batch=4))
    tail = phase_rates(acc["tail"])
    assert tail["acceptance"] == pytest.approx(6 / 48) and tail["emitted_per_verify"] == pytest.approx(10 / 4)
    assert tail["verifies"] == 2 and tail["tokens_per_s"] == pytest.approx(10 / 2)


def test_compare_runs_every_configuration_identically_over_epochs(tiny_model_dir):
    model, tok = load(str(tiny_model_dir))
    # lengths 6 / 12 / 30: the last three samples run alone (the tail phase)
    batches = [[Request([1, 5 + i, 9], uid=i, n=3, params=SamplingParams(temperature=1.0, max_new_tokens=6 * (1 + i * i),
                                                                         seed=e, ignore_eos=True))
                for i in range(3)] for e in range(2)]
    configs = {"off": SpecConfig(method="none"),
               "draft": SpecConfig(method="draft", draft_model=str(tiny_model_dir), gate=False)}
    res = compare(model, tok, batches, configs, log=lambda *_: None)
    assert set(res) == set(configs)
    for r in res.values():
        assert r["identity_rate"] == 1.0 and r["sequences"] == 18 and len(r["epochs_s"]) == 2
        assert set(r["phases"]) == {"large", "tail"}
        assert sum(p["tokens"] for p in r["phases"].values()) == 3 * (6 + 12 + 30) - 9  # prefill emits the first
    # the policy as its own draft: every drafted token that fits the budget is accepted
    tail = res["draft"]["phases"]["tail"]
    assert tail["verifies"] > 0 and tail["acceptance"] > 0.9 and tail["emitted_per_verify"] > 2
    assert res["off"]["speedup"] == pytest.approx(1.0)
