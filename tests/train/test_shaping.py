"""The shaping stage: each step against a hand-computed or brute-force oracle, and DAPO's refill loop in the
rollout worker (fake engine and reward: the loop's logic, not the model, is under test)."""

from __future__ import annotations

import itertools
import statistics
from types import SimpleNamespace

import pytest
import torch

from tailrl.config import AlgoConfig, DownsampleConfig
from tailrl.engine import Rollout, RolloutTrace, SamplingParams
from tailrl.rewards import RewardBatch, Scorer
from tailrl.train.groups import Group
from tailrl.train.recipe import resolve_algo
from tailrl.train.rollout import RolloutWorker
from tailrl.train.shaping import OverlongPenalty, PodsSelect, Shaper, ZeroVarianceFilter


def _group(uid: int, scores: list[float], lengths: list[int]) -> Group:
    rs = [Rollout(uid, i, [1], [5] * n, [0.0] * n, "stop") for i, n in enumerate(lengths)]
    return Group(SimpleNamespace(uid=uid), [1], rs, [""] * len(rs), list(scores), {"r": list(scores)})


def test_overlong_penalty_ramps_over_the_buffer():
    step = OverlongPenalty(max_new_tokens=100, buffer=20, penalty=1.0)
    step.begin_step(4)
    (g,) = step.apply([_group(0, [1.0, 1.0, 1.0, 1.0], [50, 80, 90, 100])])
    assert g.scores == pytest.approx([1.0, 1.0, 0.5, 0.0])  # 0 up to 80, then -(L - 80) / 20
    m = step.metrics([g])
    assert m["shaping/overlong_frac"] == 0.5 and m["shaping/overlong_penalty_mean"] == pytest.approx(-1.5 / 4)


def test_pods_keeps_a_max_variance_subset_per_group():
    step = PodsSelect(DownsampleConfig(rule="max_variance", m=3), seed=0)
    step.begin_step(6)
    scores = [0.1, 0.9, 0.4, 0.4, 0.0, 0.7]
    (kept,) = step.apply([_group(3, scores, [1, 2, 3, 4, 5, 6])])
    best = max(statistics.pvariance(c) for c in itertools.combinations(scores, 3))  # brute force
    assert len(kept.scores) == 3 and statistics.pvariance(kept.scores) == pytest.approx(best)
    assert kept.full is not None and kept.full.scores == scores
    m = step.metrics([kept])
    assert m["pods/n"] == 6 and m["pods/m"] == 3 and m["pods/var_kept_over_var_all"] > 1


def test_zero_variance_filter_drops_constant_groups():
    step = ZeroVarianceFilter()
    step.begin_step(2)
    kept = step.apply([_group(0, [1, 1], [1, 1]), _group(1, [0, 1], [1, 1]), _group(2, [0, 0], [1, 1])])
    assert [g.rollouts[0].uid for g in kept] == [1]
    assert step.metrics(kept) == {"dapo/refill_rounds": 0.0, "dapo/dropped_groups": 2.0, "dapo/kept_groups": 1.0}


def test_presets_pick_the_steps():
    def steps(name):
        return [type(s).__name__ for s in Shaper.from_config(resolve_algo(AlgoConfig(name=name), 64), 64, 0).steps]

    assert steps("grpo") == [] and steps("drgrpo") == []
    assert steps("dapo") == ["OverlongPenalty", "ZeroVarianceFilter"]
    pods = resolve_algo(AlgoConfig(name="dapo", downsample=DownsampleConfig(rule="random", ratio=2)), 64)
    assert [type(s).__name__ for s in Shaper.from_config(pods, 64, 0).steps] == [
        "OverlongPenalty", "PodsSelect", "ZeroVarianceFilter"]


class _Engine:
    """Every request's samples get lengths 1..n; generate() is all the worker needs."""

    def generate(self, requests, on_finish):
        outs = [Rollout(q.uid, i, q.prompt_ids, [7] * (i + 1), [0.0] * (i + 1), "stop")
                for q in requests for i in range(q.n)]
        for o in reversed(outs):  # any finishing order
            on_finish(o)
        return outs, RolloutTrace()


class _Reward(Scorer):
    """A prompt's samples all score 1 when its uid is even (zero variance), else 0, 1, 0, 1, ..."""

    def __init__(self):
        self.jobs = []

    def submit(self, prompts, completions, rows):
        self.jobs.append(rows)
        return len(self.jobs) - 1

    def result(self, ticket):
        s = [1.0 if row["uid"] % 2 == 0 else float(i % 2) for i, row in enumerate(self.jobs[ticket])]
        return RewardBatch(s, {"r": s}, 0, 0)


class _Sampler:
    def __init__(self):
        self.uid = 0

    def next(self, n):
        out = [SimpleNamespace(uid=self.uid + i, prompt="p", row={"uid": self.uid + i}) for i in range(n)]
        self.uid += n
        return out


@pytest.mark.parametrize("max_rounds,expect_groups,expect_rounds,expect_draws", [(3, 4, 3, 8), (1, 3, 1, 6)])
def test_dapo_refills_until_enough_varied_groups_or_the_cap(max_rounds, expect_groups, expect_rounds, expect_draws):
    tok = SimpleNamespace(decode=lambda ids, skip_special_tokens=True: "x")
    worker = RolloutWorker(_Engine(), tok, _Sampler(), _Reward(), lambda ex: [1, 2], SamplingParams())
    shaper = Shaper([ZeroVarianceFilter()])
    phase = worker.step(4, 2, shaper, max_rounds)
    # round 1: uids 0-3 -> 1, 3 kept; refill 1: uids 4, 5 -> 5 kept; refill 2: uid 6 dropped; refill 3: 7 kept
    assert len(phase.groups) == expect_groups and all(g.score_std > 0 for g in phase.groups)
    assert shaper.metrics(phase.groups)["dapo/refill_rounds"] == expect_rounds
    assert worker.draws == expect_draws


def test_without_refills_one_round_only():
    tok = SimpleNamespace(decode=lambda ids, skip_special_tokens=True: "x")
    worker = RolloutWorker(_Engine(), tok, _Sampler(), _Reward(), lambda ex: [1, 2], SamplingParams())
    phase = worker.step(4, 2, Shaper([]), max_refill_rounds=3)
    assert len(phase.groups) == 4 and len(phase.traces) == 1 and worker.draws == 4
    assert torch.tensor([len(g.rollouts) for g in phase.groups]).eq(2).all()


def test_groups_are_scored_as_they_finish_not_after_the_rollout():
    """Streaming rewards: each group is submitted from inside generate(), as its last sample finishes."""
    events = []

    class Engine(_Engine):
        def generate(self, requests, on_finish):
            out = super().generate(requests, on_finish)
            events.append("rollout done")
            return out

    class Reward(_Reward):
        def submit(self, prompts, completions, rows):
            events.append(f"submit {rows[0]['uid']}")
            return super().submit(prompts, completions, rows)

    tok = SimpleNamespace(decode=lambda ids, skip_special_tokens=True: "x")
    worker = RolloutWorker(Engine(), tok, _Sampler(), Reward(), lambda ex: [1, 2], SamplingParams())
    groups, *_ = worker.generate_groups(_Sampler().next(3), 2)
    assert events == ["submit 2", "submit 1", "submit 0", "rollout done"]  # finishing order, then the end
    assert [g.rollouts[0].uid for g in groups] == [0, 1, 2]  # groups in request order all the same
