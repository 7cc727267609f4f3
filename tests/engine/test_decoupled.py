"""Decoupled speculation: token identity with a drafter process (the exactness contract), waste <= 2w - 1
drafted tokens per mismatch, the stream rule both sides share, and the lockstep protocol against the
TGS model's expected tokens per round (a simulation of the protocol as the oracle)."""

import random

import pytest

from tailrl.config import DecoupledSpecConfig, EngineConfig, SpecConfig
from tailrl.engine import Request, SamplingParams
from tailrl.errors import UserError
from tailrl.speculative import build_engine
from tailrl.speculative.decoupled.stream import Stream, merge, reconcile
from tailrl.speculative.decoupled.tgs import slots_decoupled, tau_decoupled
from tests.helpers import tiny_native

PROMPTS = [[5, 6, 7, 5, 6, 7, 5, 6], [9, 10, 11, 12, 13, 14, 15, 16], [30], [40, 41, 42, 40, 41, 42]]


@pytest.fixture(scope="module")
def model():
    return tiny_native("llama", vocab=61)[0]


@pytest.fixture(scope="module")
def drafts(model, tmp_path_factory):
    from tailrl.model.loading import save_hf

    d = tmp_path_factory.mktemp("drafts")
    save_hf(model, d / "self")  # the policy itself: keyed drafts are the target's own samples
    save_hf(tiny_native("llama", vocab=61, layers=1, seed=1)[0], d / "other")  # disagrees often
    return d


def _run(model, spec=None, temperature=1.0, max_new=40, **kw):
    engine = build_engine(model, None, EngineConfig(**({"kv_cache_tokens": 4096, "block_size": 4, "spec": spec or SpecConfig()}
                                           | kw)), eos_ids=[2])
    params = SamplingParams(temperature=temperature, max_new_tokens=max_new, seed=5)
    outs, trace = engine.generate([Request(p, uid=10 + i, n=4, params=params) for i, p in enumerate(PROMPTS)])
    got = {(o.uid, o.sample_index): (o.token_ids, o.finish_reason) for o in outs}
    return got, {k: o.logprobs for k, o in zip(got, outs)}, trace, engine


@pytest.mark.slow
@pytest.mark.parametrize("w,temperature", [(2, 1.0), (4, 1.0), (3, 0.0)])
def test_decoupled_token_identity_and_waste_bound(model, drafts, w, temperature):
    base, base_lp, _, _ = _run(model, temperature=temperature)
    got, lp, trace, engine = _run(model, SpecConfig(method=f"draft:{drafts / 'other'}", mode="decoupled", decoupled=DecoupledSpecConfig(window=w),
                                                    gate=False), temperature=temperature)
    spec = engine.strategy
    try:
        assert got == base
        for k in base_lp:
            assert lp[k] == pytest.approx(base_lp[k], abs=1e-4)
        assert trace.spec["spec/decoupled/wasted_tokens"] > 0 and spec.waste  # mismatches happened
        assert 1 <= spec.max_waste_per_mismatch() <= 2 * w - 1
        assert 0 <= trace.spec["spec/acceptance_rate"] < 1
    finally:
        spec.close()


@pytest.mark.slow
def test_self_draft_is_accepted_and_paced_by_the_window(model, drafts):
    """Keyed drafts of the policy itself always match: no waste, and a round commits w tokens."""
    w = 4
    base, _, _, _ = _run(model, max_new=32)
    got, _, trace, engine = _run(model, SpecConfig(method=f"draft:{drafts / 'self'}", mode="decoupled", decoupled=DecoupledSpecConfig(window=w),
                                                   gate=False), max_new=32, kv_cache_tokens=8192)
    try:
        assert got == base
        assert trace.spec["spec/acceptance_rate"] == 1.0 and trace.spec["spec/decoupled/wasted_tokens"] == 0
        longest = max(len(t) for t, _ in got.values())
        # the first round has no drafts yet (1 token), every later round commits w
        assert trace.spec["spec/decoupled/rounds"] <= 2 + (longest - 1 + w - 1) // w
    finally:
        engine.strategy.close()


@pytest.mark.slow
@pytest.mark.parametrize("draft", ["other", "self"])
def test_identity_under_preemption(model, drafts, draft):
    """A preempted sequence is re-prefilled, which samples a token outside any round: both sides must
    commit it to the stream, or every later draft is checked one position off (waste with a self-draft)."""
    w = 3
    base, _, _, _ = _run(model)
    got, _, trace, engine = _run(model, SpecConfig(method=f"draft:{drafts / draft}", mode="decoupled", decoupled=DecoupledSpecConfig(window=w),
                                                   gate=False), kv_cache_tokens=96, max_batch_size=3)
    try:
        assert got == base
        assert trace.preemptions > 0
        assert engine.strategy.max_waste_per_mismatch() <= 2 * w - 1
        if draft == "self":
            assert trace.spec["spec/decoupled/wasted_tokens"] == 0
    finally:
        engine.strategy.close()


@pytest.mark.slow
def test_identity_while_requests_change_window_and_mode(model, drafts, monkeypatch):
    """Alg. 2 moves requests between coupled and decoupled pacing and other windows mid-stream."""
    import tailrl.speculative.decoupled.speculator as dec
    from tailrl.speculative.decoupled.tgs import DraftCost, VerifyCost

    flips = iter(range(10**6))
    monkeypatch.setattr(dec, "reconfigure", lambda acc, *a: {sid: (2 + next(flips) % 3, ("coupled", "decoupled")[
        sid % 2]) for sid in acc})
    base, _, _, _ = _run(model)
    spec = SpecConfig(method=f"draft:{drafts / 'other'}", mode="decoupled", gate=False,
                      decoupled=DecoupledSpecConfig(window=3, reconfigure_every=2))
    engine = build_engine(model, None, EngineConfig(kv_cache_tokens=4096, block_size=4, spec=spec), eos_ids=[2])
    sp = engine.strategy
    sp.D, sp.V = DraftCost(1e-3, 0.0), VerifyCost(1e-3, 0.0, 1e-4)  # turn Alg. 2 on (window stays fixed)
    params = SamplingParams(temperature=1.0, max_new_tokens=40, seed=5)
    try:
        outs, trace = engine.generate([Request(p, uid=10 + i, n=4, params=params) for i, p in enumerate(PROMPTS)])
        assert {(o.uid, o.sample_index): (o.token_ids, o.finish_reason) for o in outs} == base
        assert trace.spec["spec/decoupled/reconfigured"] > 10
        assert sp.max_waste_per_mismatch() <= 2 * 4 - 1
    finally:
        sp.close()


@pytest.mark.slow
def test_gate_falls_back_to_plain_rounds_and_stays_exact(model, drafts):
    base, _, _, _ = _run(model)
    got, _, trace, engine = _run(model, SpecConfig(method=f"draft:{drafts / 'other'}", mode="decoupled", decoupled=DecoupledSpecConfig(window=3)))
    try:
        assert got == base
        kinds = {s.kind for s in trace.steps}
        assert "decode" in kinds  # the gate measures plain rounds (each batch-size bucket starts with one)
    finally:
        engine.strategy.close()


def test_config_errors(model):
    with pytest.raises(UserError, match="draft model"):
        build_engine(model, None, EngineConfig(spec=SpecConfig(method="ngram", mode="decoupled")))
    with pytest.raises(UserError, match="engine.spec.mode"):
        build_engine(model, None, EngineConfig(spec=SpecConfig(method="ngram", mode="sideways")))


# -- the stream rule ------------------------------------------------------------------------------------
def test_reconcile_consumes_matches_and_ends_the_epoch_on_a_mismatch():
    st = Stream(10, 3, tokens=[1, 2, 3, 4])
    assert reconcile(st, [1, 2]) == (2, 0) and st.tokens == [3, 4] and st.start == 12 and st.epoch == 0
    assert reconcile(st, [3, 9, 7]) == (1, 1) and st.tokens == [] and st.start == 15 and st.epoch == 1
    assert reconcile(st, [5]) == (0, 0) and st.start == 16  # nothing in flight: nothing to compare


def test_merge_drops_old_epochs_and_checks_late_chunks():
    verified = list(range(100))
    st = Stream(20, 2, epoch=1)
    assert merge(st, 0, 20, [7, 7], verified) == (0, 2, False) and st.tokens == []  # older epoch
    assert merge(st, 1, 20, [5, 6], verified) == (0, 0, False) and st.tokens == [5, 6]
    st = Stream(22, 2, epoch=1)  # the verifier committed 20, 21 without drafts in hand
    assert merge(st, 1, 20, [20, 21, 8], verified) == (2, 0, False) and st.tokens == [8]
    st = Stream(22, 2, epoch=1)
    assert merge(st, 1, 20, [20, 0, 8], verified) == (1, 2, True) and st.epoch == 2 and st.tokens == []


def test_pacing_per_mode():
    dec, cpl = Stream(0, 3), Stream(0, 3, "coupled")
    assert dec.to_draft(100) == 3 and cpl.to_draft(100) == 3
    dec.tokens, cpl.tokens = [1, 2, 3], [1, 2, 3]
    assert dec.to_draft(100) == 2 and cpl.to_draft(100) == 0  # 2w - 1 ahead at most; the barrier
    assert dec.verify_window() == 2 and cpl.verify_window() == 3
    assert Stream(0, 3).to_draft(2) == 2  # never past the request's budget


# -- the protocol against the model -------------------------------------------------------------------
def _simulate(p: float, w: int, rounds: int, seed: int) -> tuple[float, float]:
    """The lockstep protocol with a target that accepts each draft with probability p (a mismatching
    draft gets another token): mean committed tokens and verify tokens per round."""
    rng = random.Random(seed)
    verified: list[int] = [0]
    v, d = Stream(1, w), Stream(1, w)  # verifier's and drafter's views
    inflight: list[tuple[int, int, list[int]]] = []
    committed_total = slots_total = 0
    last_commit: list[int] = []
    for _ in range(rounds):
        reconcile(d, last_commit)  # the drafter applies last round's commits, then drafts
        n = d.to_draft(10**9)
        chunk = [rng.randrange(1, 10**6) for _ in range(n)]  # tokens are unique: equality = acceptance
        inflight = [(d.epoch, d.end, chunk)]
        d.tokens += chunk
        k = v.verify_window()
        out = []
        for j in range(k + 1):  # k drafts in the forward, then the sample after them meets the next draft
            draft = d.tokens[j] if j < len(d.tokens) else None
            if draft is not None and rng.random() < p:
                out.append(draft)
                if j < k:
                    continue
            else:
                out.append(-len(verified) - j)  # a token no draft holds
            break
        slots_total += k + 1
        verified += out
        committed_total += len(out)
        reconcile(v, out)
        last_commit = out
        for e, s, toks in inflight:
            merge(v, e, s, toks, verified)
    return committed_total / rounds, slots_total / rounds


@pytest.mark.parametrize("p,w", [(0.9, 4), (0.6, 3), (0.3, 2), (1.0, 5)])
def test_tau_decoupled_matches_the_protocol(p, w):
    tokens, slots = _simulate(p, w, 20000, seed=1)
    assert tokens == pytest.approx(tau_decoupled(p, w), rel=0.03)
    assert slots == pytest.approx(slots_decoupled(p, w), rel=0.03)


# -- mode choice and the runtime profile ----------------------------------------------------------------
def _profile(path, draft_alpha: float) -> str:
    from tailrl.speculative.decoupled.tgs import DraftCost, VerifyCost, save_tgs_profile

    v = VerifyCost(5e-3, 1e-6, 1e-6)  # a verify forward costs its fixed part: drafts verify almost free
    save_tgs_profile({"drafts": {1: DraftCost(draft_alpha, 0.0), 2: DraftCost(draft_alpha, 0.0)},
                      "verifies": {1: v, 2: v}, "points": {}, "acceptance": 0.9}, path)
    return str(path)


@pytest.mark.slow
def test_auto_mode_follows_the_tgs_model(model, drafts, tmp_path):
    from tailrl.speculative.coupled.speculator import Speculator
    from tailrl.speculative.decoupled.speculator import DecoupledSpeculator

    def build(alpha):
        spec = SpecConfig(method=f"draft:{drafts / 'other'}", mode="auto",
                          decoupled=DecoupledSpecConfig(draft_cores=1, verify_cores=1,
                                        profile=_profile(tmp_path / f"p{alpha}.json", alpha)))
        return build_engine(model, None, EngineConfig(kv_cache_tokens=4096, block_size=4, max_batch_size=16, spec=spec))

    # a draft step costs half a verify forward: pipelined, drafting hides behind verification (TGS 345/s
    # per request at w = 2); in line it adds to it (274/s at best, w = 3); plain decoding 199/s
    cheap = build(2.5e-3)
    try:
        assert isinstance(cheap.strategy, DecoupledSpeculator) and cheap.strategy.plan.w > 1
    finally:
        cheap.strategy.close()
    assert isinstance(build(1.0).strategy, Speculator)  # a draft step of 1 s never pays


@pytest.mark.slow
def test_runtime_profile_fits_its_rounds(model, drafts):
    from tailrl.speculative.profiling.tgs import profile_decoupled

    d, v, pts = profile_decoupled(model, str(drafts / "other"), 1, 1, batches=(2, 6), windows=(2, 3), max_new=6,
                                  block_size=4)
    assert len(pts["verify"]) >= 8 and pts["draft"]
    assert min(d.alpha, d.slope, v.beta, v.per_request, v.per_token) >= 0 and d(4) > 0 and v(4, 8) > 0
    assert {rows for rows, _, _ in pts["verify"]} >= {2, 6}


def test_profile_without_the_needed_core_counts_is_a_clear_error(model, drafts, tmp_path):
    from tailrl.speculative.decoupled.tgs import DraftCost, VerifyCost, save_tgs_profile

    save_tgs_profile({"drafts": {1: DraftCost(1e-3, 0.0)}, "verifies": {1: VerifyCost(1e-3, 0.0, 0.0)}, "points": {}},
                     tmp_path / "p.json")
    spec = SpecConfig(method=f"draft:{drafts / 'other'}", mode="auto",
                      decoupled=DecoupledSpecConfig(draft_cores=1, verify_cores=1, profile=str(tmp_path / "p.json")))
    with pytest.raises(UserError, match="no drafts for 2 core"):
        build_engine(model, None, EngineConfig(spec=spec))


@pytest.mark.slow
def test_the_drafter_outlives_a_slurm_wide_sigterm(model, drafts):
    """SLURM signals every process of a step: the drafter ignores SIGTERM (the trainer's stop guard decides
    when the step ends) and the next rollout still drafts, token-identical to plain decoding."""
    import os
    import signal

    base, _, _, _ = _run(model)
    spec = SpecConfig(method=f"draft:{drafts / 'self'}", mode="decoupled", gate=False,
                      decoupled=DecoupledSpecConfig(window=2))
    engine = build_engine(model, None, EngineConfig(kv_cache_tokens=4096, block_size=4, spec=spec), eos_ids=[2])
    try:
        os.kill(engine.strategy.proc.pid, signal.SIGTERM)
        params = SamplingParams(temperature=1.0, max_new_tokens=40, seed=5)
        outs, trace = engine.generate([Request(p, uid=10 + i, n=4, params=params) for i, p in enumerate(PROMPTS)])
        assert engine.strategy.proc.poll() is None and trace.spec["spec/acceptance_rate"] > 0.5
        assert {(o.uid, o.sample_index): (o.token_ids, o.finish_reason) for o in outs} == base
    finally:
        engine.strategy.close()
