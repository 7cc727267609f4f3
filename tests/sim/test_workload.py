import json
import math
import random
import statistics
from statistics import NormalDist

import pytest

from tailrl.engine.telemetry import RequestRecord, RolloutTrace, StepRecord
from tailrl.errors import UserError
from tailrl.sim.config import WorkloadConfig
from tailrl.sim.workload import (
    LengthModel,
    capped_mean,
    length_model,
    load_trace_rounds,
    lognormal_from_tail,
    mu_for_mean,
    synthetic_rounds,
)


def test_tail_fractions_round_trip():
    mu, sigma = lognormal_from_tail(8192, 0.1085, 16384, 0.0218)
    nd = NormalDist(mu, sigma)
    assert 1 - nd.cdf(math.log(8192)) == pytest.approx(0.1085)
    assert 1 - nd.cdf(math.log(16384)) == pytest.approx(0.0218)
    with pytest.raises(UserError):
        lognormal_from_tail(16384, 0.1, 8192, 0.2)


def test_capped_mean_against_monte_carlo_and_inverse():
    rng = random.Random(0)
    mu, sigma, cap = 7.5, 0.9, 8000
    mc = statistics.mean(min(math.exp(rng.gauss(mu, sigma)), cap) for _ in range(200_000))
    assert capped_mean(mu, sigma, cap) == pytest.approx(mc, rel=0.01)
    assert mu_for_mean(capped_mean(mu, sigma, cap), sigma, cap) == pytest.approx(mu, abs=1e-6)


def test_synthetic_rounds_shape_cap_and_force_max():
    w = WorkloadConfig(steps=2, prompts=10, group_size=4, max_new_tokens=500, median=100, sigma=1.0, sigma_within=0.2,
                       force_max=True)
    rounds = synthetic_rounds(w, seed=3)
    assert len(rounds) == 2 and all(len(r.requests) == 40 for r in rounds)
    assert all(max(q.out_len for q in r.requests) == 500 for r in rounds)
    assert all(len(g) == 4 for g in rounds[0].groups())
    assert synthetic_rounds(w, seed=3)[1].requests == rounds[1].requests  # seeded


def test_sigma_within_controls_group_spread():
    tight = LengthModel(math.log(100), 0.8, 0.0, 10_000, 8).round(50, 8, random.Random(0))
    assert all(len(set(g)) == 1 for g in tight.groups())  # all spread between prompts, none within
    with pytest.raises(UserError, match="sigma_within"):
        length_model(WorkloadConfig(sigma=0.2, sigma_within=0.5))


def test_trace_json_round_trip_and_loading(tmp_path):
    tr = RolloutTrace(steps=[StepRecord("prefill", 0.0, 0.1, 2, 10), StepRecord("decode", 0.1, 0.2, 2, 2)],
                      requests=[RequestRecord(7, 0, 0.0, 0.2, 3, "stop", 5), RequestRecord(7, 1, 0.0, 0.2, 0, "error", 5),
                                RequestRecord(8, 0, 0.0, 0.3, 9, "length", 4)], t_end=0.3)
    back = RolloutTrace.from_json(json.loads(json.dumps(tr.to_json())))
    assert back.requests == tr.requests and back.steps == tr.steps and back.t_end == tr.t_end
    f = tmp_path / "traces.jsonl"
    f.write_text(json.dumps({"step": 1, "rounds": [tr.to_json(), tr.to_json()]}) + "\n")
    rounds = load_trace_rounds(tmp_path)
    assert len(rounds) == 2 and rounds[0].measured_s == 0.3
    assert [(q.uid, q.prompt_len, q.out_len) for q in rounds[0].requests] == [(7, 5, 3), (8, 4, 9)]  # errors dropped
    f.write_text('{"step": 1}\n')
    with pytest.raises(UserError, match="not a tailrl trace"):
        load_trace_rounds(f)
    with pytest.raises(UserError, match="not found"):
        load_trace_rounds(tmp_path / "missing")
