"""Multi-turn rollouts in the engine (engine/turns.py): parked sequences keep their K/V, observations are
prefilled over it, and with deterministic observations every rollout is token-identical alone or batched,
with other observation latencies (so another arrival order), under preemption, and with speculation on."""

import math
import random

import pytest

from tailrl.config import EngineConfig, SpecConfig
from tailrl.engine import Engine, Request, SamplingParams
from tailrl.speculative import build_engine
from tests.helpers import tiny_native

STOPS = (4, 5)  # with EOS 2: a turn ends on ~3 of 61 tokens


class ToolStub:
    """Deterministic observations (a function of the key and the turn's last tokens) that become ready after
    a random number of `ready` calls (latency), seeded per run: arrival order changes, content does not."""

    def __init__(self, max_turns: int = 3, latency_seed: int = 0, max_latency: int = 4, finish_after: int | None = None):
        self.max_turns, self.rng, self.max_latency = max_turns, random.Random(latency_seed), max_latency
        self.finish_after = finish_after
        self.waiting: list[list] = []  # [countdown, seq, tokens]
        self.calls = 0

    def end_turn(self, seq) -> bool:
        if seq.turns >= self.max_turns:
            return False
        self.calls += 1
        r = seq.request
        n = 1 + (seq.tokens[-2] + seq.turns) % 4
        obs = [3 + (r.uid * 7 + seq.sample_index * 3 + seq.turns * 5 + seq.tokens[-2] + i) % 55 for i in range(n)]
        done = self.finish_after is not None and seq.turns >= self.finish_after
        self.waiting.append([self.rng.randint(0, self.max_latency), seq, None if done else obs])
        return True

    def ready(self, timeout: float):
        out = [(s, t) for c, s, t in self.waiting if c <= 0]
        self.waiting = [w for w in self.waiting if w[0] > 0]
        for w in self.waiting:
            w[0] -= 1
        return out


def _requests(max_new=40):
    params = SamplingParams(temperature=1.0, max_new_tokens=max_new, seed=3, stop_token_ids=STOPS)
    return [Request([5 + u, 9, 11, 3 + u], uid=u, n=3, params=params) for u in range(4)]


def _key(outs):
    return {(o.uid, o.sample_index): (o.token_ids, o.token_mask, o.finish_reason) for o in outs}


@pytest.fixture(scope="module")
def model():
    return tiny_native("llama", vocab=61)[0]


def _engine(model, turns, **cfg):
    base = dict(kv_cache_tokens=4096, block_size=4, max_batch_size=16)
    return Engine(model, EngineConfig(**(base | cfg)), eos_ids=[2], turns=turns)


def test_multi_turn_rollouts_are_identical_alone_batched_and_whatever_the_latency(model):
    alone = {}
    for r in _requests():
        outs, _ = _engine(model, ToolStub(latency_seed=0)).generate([r])
        alone |= _key(outs)
    tool = ToolStub(latency_seed=1)
    batched, _ = _engine(model, tool).generate(_requests())
    assert _key(batched) == alone
    assert tool.calls >= 4 and sum(o.turns > 0 for o in batched) >= 3  # the runs really were multi-turn
    small, trace = _engine(model, ToolStub(latency_seed=2, max_latency=9), max_batch_size=3,
                           kv_cache_tokens=96).generate(_requests())
    assert _key(small) == alone and trace.preemptions > 0
    for o in batched:  # observation tokens: mask 0 and logprob NaN; sampled ones: mask 1, finite
        if o.turns:
            assert len(o.token_mask) == len(o.token_ids) == len(o.logprobs)
            assert all((m == 0) == math.isnan(lp) for m, lp in zip(o.token_mask, o.logprobs))
        else:
            assert o.token_mask is None


def test_speculation_on_gives_the_same_multi_turn_rollouts(model):
    ref, _ = _engine(model, ToolStub(latency_seed=0)).generate(_requests())
    eng = build_engine(model, cfg=EngineConfig(kv_cache_tokens=4096, block_size=4, max_batch_size=16,
                                               spec=SpecConfig(method="ngram")), eos_ids=[2], turns=ToolStub(latency_seed=5))
    outs, _ = eng.generate(_requests())
    assert _key(outs) == _key(ref)


def test_an_observation_can_end_the_rollout_or_exhaust_its_budget(model):
    outs, _ = _engine(model, ToolStub(finish_after=0)).generate(_requests())
    ended = [o for o in outs if o.turns == 0 and o.finish_reason == "stop" and o.token_ids[-1] in (2, *STOPS)]
    assert ended  # the environment ended these at their first turn: no observation appended
    short, _ = _engine(model, ToolStub(max_turns=50)).generate(_requests(max_new=12))
    assert all(len(o.token_ids) <= 12 for o in short)
    # an observation cut at the budget ends the rollout ("length") on an observation token
    assert any(o.finish_reason == "length" and o.token_mask and o.token_mask[-1] == 0 for o in short)


def test_a_turn_ending_inside_a_verify_window_keeps_the_observations_kv(model, tmp_path):
    """The policy drafting for itself (coupled): its drafts run on past a turn's stop token and are accepted up
    to it; the K/V of the accepted drafts after the stop must not stand in for the observation's. Tokens and
    logprobs equal plain decoding's (a wrong K/V moves logprobs long before it flips a token)."""
    from tailrl.model.loading import save_hf

    save_hf(model, tmp_path / "self")
    ref, _ = _engine(model, ToolStub(latency_seed=0)).generate(_requests())
    eng = build_engine(model, cfg=EngineConfig(kv_cache_tokens=4096, block_size=4, max_batch_size=16,
                                               spec=SpecConfig(method=f"draft:{tmp_path / 'self'}", gate=False)),
                       eos_ids=[2], turns=ToolStub(latency_seed=5))
    outs, trace = eng.generate(_requests())
    assert _key(outs) == _key(ref) and trace.spec["spec/acceptance_rate"] > 0.9
    for o, r in zip(outs, ref):
        assert o.logprobs == pytest.approx(r.logprobs, abs=1e-5, nan_ok=True), (o.uid, o.sample_index)
