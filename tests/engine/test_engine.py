"""Engine vs oracles: HF generate (greedy), itself under other batching/order/preemption (sampled)."""

import random

import pytest
import torch

from tailrl.config import EngineConfig
from tailrl.engine import Engine, Request, SamplingParams
from tailrl.engine.telemetry import RequestRecord, RolloutTrace, StepRecord
from tests.helpers import DEVICE, tiny_native

PROMPTS = [[5, 6, 7], [9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19], [30], [40, 41, 42, 43, 44, 45, 46], [3, 3, 3, 3]]


@pytest.fixture(scope="module")
def models():
    return tiny_native("qwen2", vocab=97)


def _engine(model, **kw):
    cfg = dict(kv_cache_tokens=4096, block_size=4)
    cfg.update(kw)
    return Engine(model, EngineConfig(**cfg), eos_ids=[2])


def test_greedy_matches_transformers_generate(models):
    native, hf = models
    params = SamplingParams(temperature=0, max_new_tokens=24)
    outs, _ = _engine(native).generate([Request(p, uid=i, params=params) for i, p in enumerate(PROMPTS)])
    for o in outs:
        ref = hf.generate(torch.tensor([o.prompt_ids], device=DEVICE), max_new_tokens=24, do_sample=False, eos_token_id=2,
                          pad_token_id=0)[0, len(o.prompt_ids):].tolist()
        assert o.token_ids == ref
        assert o.finish_reason == ("stop" if ref[-1] == 2 and len(ref) <= 24 and 2 in ref else "length")


def _sampled(model, requests_order, **kw):
    params = SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=30, seed=11)
    reqs = [Request(PROMPTS[i], uid=100 + i, n=4, params=params) for i in requests_order]
    outs, trace = _engine(model, **kw).generate(reqs)
    return {(o.uid, o.sample_index): o.token_ids for o in outs}, trace


def test_sampled_identical_across_batching_order_and_preemption(models):
    native, _ = models
    base, _ = _sampled(native, range(len(PROMPTS)))
    assert len({tuple(v) for v in base.values()}) > 10  # genuinely sampled, not all equal
    small_batch, _ = _sampled(native, range(len(PROMPTS)), max_batch_size=3)
    order = list(range(len(PROMPTS)))
    random.Random(0).shuffle(order)
    shuffled, _ = _sampled(native, order)
    preempted, trace = _sampled(native, range(len(PROMPTS)), kv_cache_tokens=96, block_size=4)
    assert trace.preemptions > 0
    assert small_batch == base and shuffled == base and preempted == base


def test_gumbel_sampler_also_batch_invariant(models):
    native, _ = models
    a, _ = _sampled(native, range(len(PROMPTS)), sampler="gumbel")
    b, _ = _sampled(native, range(len(PROMPTS)), sampler="gumbel", max_batch_size=2)
    assert a == b


def test_group_prefills_once_and_matches_separate_samples(models):
    native, _ = models
    params = SamplingParams(temperature=1.0, max_new_tokens=12, seed=3, ignore_eos=True)
    eng = _engine(native)
    grouped, trace = eng.generate([Request(PROMPTS[1], uid=7, n=5, params=params)])
    prefill = [s for s in trace.steps if s.kind == "prefill"]
    assert len(prefill) == 1 and prefill[0].tokens == len(PROMPTS[1])  # one prompt row for 5 samples
    single = [_engine(native).generate([Request(PROMPTS[1], uid=7, n=1, first_sample=k, params=params)])[0][0]
              for k in range(5)]
    assert [g.token_ids for g in grouped] == [s.token_ids for s in single]
    assert all(len(g.token_ids) == 12 and g.finish_reason == "length" for g in grouped)


def test_rollback_then_redecode_gives_same_continuation(models):
    native, _ = models
    params = SamplingParams(temperature=0.8, max_new_tokens=40, seed=5, ignore_eos=True)
    ref, _ = _engine(native).generate([Request(PROMPTS[0], uid=1, params=params)])
    eng = _engine(native)
    eng.add(Request(PROMPTS[0], uid=1, params=params))
    for _ in range(20):
        eng.step()
    seq = eng.scheduler.running[0]
    assert seq.num_generated == 20
    eng.rollback(seq, 13)
    assert seq.num_generated == 13 and len(eng.cache.tables[seq.seq_id]) == eng.cache.blocks_for(seq.num_cached)
    outs = []
    while eng.has_unfinished():
        outs += eng.step()
    assert outs[0].token_ids == ref[0].token_ids
    assert outs[0].logprobs == pytest.approx(ref[0].logprobs, abs=1e-5)


def test_logprobs_match_full_forward(models):
    native, _ = models
    params = SamplingParams(temperature=0.7, max_new_tokens=10, seed=2, ignore_eos=True)
    (o,), _ = _engine(native).generate([Request(PROMPTS[3], uid=0, params=params)])
    ids = torch.tensor([o.prompt_ids + o.token_ids], device=DEVICE)
    with torch.no_grad():
        logp = (native(ids)[0, len(o.prompt_ids) - 1:-1] / 0.7).log_softmax(-1)
    ref = logp.gather(-1, torch.tensor(o.token_ids, device=DEVICE)[:, None])[:, 0].cpu()
    assert torch.allclose(torch.tensor(o.logprobs), ref, atol=1e-5)


def test_new_requests_join_mid_rollout(models):
    native, _ = models
    params = SamplingParams(temperature=1.0, max_new_tokens=16, seed=1, ignore_eos=True)
    eng = _engine(native)
    eng.add(Request(PROMPTS[0], uid=0, n=2, params=params))
    outs = []
    for _ in range(5):
        outs += eng.step()
    eng.add(Request(PROMPTS[2], uid=1, n=2, params=params))  # a refill arriving mid-rollout
    while eng.has_unfinished():
        outs += eng.step()
    both, _ = _engine(native).generate([Request(PROMPTS[0], uid=0, n=2, params=params),
                                        Request(PROMPTS[2], uid=1, n=2, params=params)])
    assert sorted((o.uid, o.sample_index, tuple(o.token_ids)) for o in outs) == \
        sorted((o.uid, o.sample_index, tuple(o.token_ids)) for o in both)


def test_add_and_step_after_release_kv_bring_the_pool_back(models):
    """The incremental API (add / step) after release_kv(), as generate() after it: the pool is restored on
    first use and the tokens are those of an engine that never released it."""
    native, _ = models
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=4, ignore_eos=True)
    eng = _engine(native)
    eng.release_kv()
    eng.add(Request(PROMPTS[0], uid=0, n=2, params=params))
    outs = []
    while eng.has_unfinished():
        outs += eng.step()
    ref, _ = _engine(native).generate([Request(PROMPTS[0], uid=0, n=2, params=params)])
    assert not eng.cache.released and all(o.finish_reason == "length" for o in outs)
    assert eng.cache.num_blocks * eng.cache.block_size == eng.pool_tokens  # back at the size it was given
    assert sorted(tuple(o.token_ids) for o in outs) == sorted(tuple(o.token_ids) for o in ref)


def test_bad_requests_error_others_complete(models):
    native, _ = models
    params = SamplingParams(temperature=0, max_new_tokens=5)
    eng = _engine(native, max_model_len=32)
    reqs = [Request([], uid=0, params=params), Request(list(range(3, 40)), uid=1, params=params),
            Request([5, 6], uid=2, params=params), Request([500], uid=3, params=params),
            Request([5], uid=4, params=params, error="line 5 is not valid JSON")]
    outs, _ = eng.generate(reqs)
    by_uid = {o.uid: o for o in outs}
    assert by_uid[0].finish_reason == "error" and "empty" in by_uid[0].error
    assert by_uid[1].finish_reason == "error" and "context limit" in by_uid[1].error
    assert by_uid[3].finish_reason == "error" and "vocabulary" in by_uid[3].error
    assert by_uid[4].error == "line 5 is not valid JSON"
    assert by_uid[2].finish_reason in ("stop", "length") and by_uid[2].num_tokens >= 1


def test_context_limit_and_stop_strings(models):
    native, _ = models
    eng = Engine(native, EngineConfig(kv_cache_tokens=4096, block_size=4, max_model_len=12), eos_ids=[2],
                 detokenize=lambda ids: "".join(chr(97 + i % 26) for i in ids))
    params = SamplingParams(temperature=1.0, max_new_tokens=100, seed=0, ignore_eos=True)
    (o,), _ = eng.generate([Request([5, 6, 7], uid=0, params=params)])
    assert o.finish_reason == "length" and len(o.prompt_ids) + o.num_tokens == 12
    text = "".join(chr(97 + i % 26) for i in o.token_ids)
    stop = text[3:5]
    eng2 = Engine(native, EngineConfig(kv_cache_tokens=4096, block_size=4, max_model_len=12), eos_ids=[2],
                  detokenize=lambda ids: "".join(chr(97 + i % 26) for i in ids))
    (s,), _ = eng2.generate([Request([5, 6, 7], uid=0, params=SamplingParams(
        temperature=1.0, max_new_tokens=100, seed=0, ignore_eos=True, stop=(stop,)))])
    assert s.finish_reason == "stop" and s.token_ids == o.token_ids[: len(s.token_ids)] and len(s.token_ids) <= 5


def test_trace_metrics(models):
    native, _ = models
    params = SamplingParams(temperature=1.0, max_new_tokens=64, seed=0, ignore_eos=True)
    req = Request(PROMPTS[0], uid=0, n=4, params=params, max_new_tokens=[8, 8, 8, 64])
    outs, trace = _engine(native).generate([req])
    assert [o.num_tokens for o in outs] == [8, 8, 8, 64]
    assert trace.len_max_over_median() == [8.0] and trace.straggler_rate() == 1.0
    # the prefill samples token 1; 7 decodes at batch 4, then the straggler alone for 56
    assert [(s.kind, s.batch) for s in trace.steps] == [("prefill", 4)] + [("decode", 4)] * 7 + [("decode", 1)] * 56
    assert trace.tail_phase_frac() > 0 and trace.tail_efficiency() > 0
    times, batch = trace.timeline()
    assert batch[0] == 4 and batch[-1] == 1 and times == sorted(times)


def test_tail_metrics_of_a_known_trace():
    """tail_phase_frac and tail_efficiency on a trace with fixed times (the real ones are wall-clock)."""
    steps = ([StepRecord("prefill", 0.0, 1.0, 4, 12)] + [StepRecord("decode", 1.0 + i, 2.0 + i, 4, 4) for i in range(3)]
             + [StepRecord("decode", 4.0 + 0.5 * i, 4.5 + 0.5 * i, 1, 1) for i in range(8)])
    reqs = [RequestRecord(0, i, 0.0, 4.0 if i < 3 else 8.0, n, "length") for i, n in enumerate([4, 4, 4, 12])]
    trace = RolloutTrace(steps=steps, requests=reqs, t_end=8.0)
    assert trace.tail_phase_frac() == 0.5  # the batch falls below half its peak at t = 4 of 8
    assert trace.tail_efficiency() == 12 * 0.5 / 8.0  # longest x batch-1 step / rollout time
    assert RolloutTrace(steps=steps, requests=reqs, t_end=8.0, b1_step_s=9.0).tail_efficiency() == 0.75
