"""engine.exact=canonical (model/canonical.py): a linear's row and an attention query's output do not depend
on the batch around them, checked against brute force (the same row alone / in a batch of 64, every
position), and rollouts bitwise identical (tokens and logprobs) alone, batched, speculative (chains and
Best-of-N trees), preempted."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tailrl.bench.engine_tail import engine_config
from tailrl.engine import Request, SamplingParams
from tailrl.engine.execution import resolve_execution
from tailrl.errors import UserError
from tailrl.model import canonical, load
from tailrl.speculative import build_engine


@pytest.mark.parametrize("k, n, bias", [(64, 192, False), (128, 40, True)])
def test_a_linear_row_is_the_same_in_any_batch_at_any_position(k, n, bias):
    g = torch.Generator().manual_seed(1)
    w, b = torch.randn(n, k, generator=g), (torch.randn(n, generator=g) if bias else None)
    v = torch.randn(k, generator=g)
    big = torch.randn(64, k, generator=g)
    big[5] = v
    ref = F.linear(big, w, b)[5]  # a large batch: the kernel every consistent row count shares
    with canonical.active():
        for m in range(1, 40):
            for p in range(m):
                x = torch.randn(m, k, generator=g)
                x[p] = v
                assert torch.equal(canonical.linear(x, w, b)[p], ref), (m, p)
        x = torch.randn(2, 3, k, generator=g)  # leading dims kept
        assert canonical.linear(x, w, b).shape == (2, 3, n)
    assert not canonical.is_active()
    x = torch.randn(3, k, generator=g)
    assert torch.equal(canonical.linear(x, w, b), F.linear(x, w, b))  # outside an engine: F.linear itself


def test_consistent_row_counts_are_found_once_per_shape():
    canonical.consistent_rows.cache_clear()
    good = canonical.consistent_rows(64, 192, False, torch.float32, torch.get_num_threads())
    assert good and all(1 <= m <= canonical.CHECK_ROWS for m in good) and canonical.CHECK_ROWS in good
    canonical.consistent_rows(64, 192, False, torch.float32, torch.get_num_threads())
    assert canonical.consistent_rows.cache_info().hits == 1
    assert canonical.padded_rows(10 ** 4, 64, 192, False, torch.float32) == 10 ** 4


def _requests(n_prompts: int = 3, samples: int = 3, new: int = 14):
    params = SamplingParams(temperature=1.0, max_new_tokens=new, seed=3)
    return [Request([5 + i, 9, 11 + 2 * i, 7, 5 + i, 9], uid=i, n=samples, params=params) for i in range(n_prompts)]


def _run(model, tok, **settings):
    engine = build_engine(model, tok, engine_config({}, {"exact": "canonical", "kv_cache_tokens": 4096,
                                                         "block_size": 4, **settings}))
    with torch.inference_mode():
        outs, trace = engine.generate(_requests())
    engine.close()
    return [(o.uid, o.sample_index, o.token_ids, o.logprobs) for o in outs], trace


def test_rollouts_are_bitwise_identical_alone_batched_speculative_and_preempted(tiny_model_dir):
    model, tok = load(str(tiny_model_dir))
    ref, _ = _run(model, tok, max_batch_size=1)
    assert sum(len(t) for *_, t, _ in ref) > 60
    runs = {
        "batch 3": _run(model, tok, max_batch_size=3),
        "batch 9": _run(model, tok, max_batch_size=9),
        "n-gram, gate off": _run(model, tok, max_batch_size=9, **{"spec.method": "ngram", "spec.gate": False}),
        "draft + Best-of-N trees": _run(model, tok, max_batch_size=9, **{
            "spec.method": "auto", "spec.draft_model": str(tiny_model_dir), "spec.gate": False,
            "spec.coupled.best_of_n": True, "spec.coupled.bon_spare": 50.0}),
        "preempted": _run(model, tok, max_batch_size=9, kv_cache_tokens=48),
    }
    for name, (out, _) in runs.items():
        assert out == ref, name  # tokens and logprobs, bitwise
    assert runs["preempted"][1].preemptions > 0
    assert any(s.kind == "verify" for s in runs["n-gram, gate off"][1].steps)
    assert runs["draft + Best-of-N trees"][1].spec.get("spec/bon_requests", 0) > 0
    assert not canonical.is_active()  # only inside the engine's forwards: never the trainer's


def test_engines_of_both_modes_share_one_model(tiny_model_dir):
    """The mode belongs to the engine's forwards, not to the model: a fast engine built after a canonical one
    on the same model still runs stock kernels, and the canonical one stays canonical."""
    model, tok = load(str(tiny_model_dir))
    settings = {"kv_cache_tokens": 4096, "block_size": 4, "max_batch_size": 9}
    canon = build_engine(model, tok, engine_config({}, {"exact": "canonical", **settings}))
    fast = build_engine(model, tok, engine_config({}, {"exact": "fast", **settings}))
    calls = []
    real = canonical.attention
    canonical.attention = lambda *a: calls.append(1) or real(*a)
    try:
        with torch.inference_mode():
            fast.generate(_requests())
            assert calls == []
            outs, _ = canon.generate(_requests())
    finally:
        canonical.attention = real
    assert calls and [(o.uid, o.sample_index, o.token_ids, o.logprobs) for o in outs] == _run(model, tok, max_batch_size=1)[0]
    canon.close()
    fast.close()


def test_canonical_is_the_cpus_mode():
    cfg = engine_config({}, {"exact": "canonical"})
    ex = resolve_execution(cfg, torch.device("cpu"), 1, torch.float32)
    assert ex.canonical and not ex.strict and ex.attention == "torch"
    with pytest.raises(UserError, match="on CUDA use engine.exact=strict"):
        resolve_execution(cfg, torch.device("cuda"), 1, torch.bfloat16)
    with pytest.raises(UserError, match="needs engine.attention=torch"):
        resolve_execution(engine_config({}, {"exact": "canonical", "attention": "triton"}), torch.device("cpu"))
