"""engine.exact=strict: rollouts (tokens and logprobs) bitwise the same alone or in a batch, on static or dynamic
steps, with speculation on or off; the engine's logprobs equal the trainer's forward bitwise; a strict
training run reports a zero mismatch. On a CPU the kernels run under the Triton interpreter (slow tier)."""

from __future__ import annotations

import pytest
import torch

from tailrl.algo.logprobs import completion_logprobs
from tailrl.config import EngineConfig, SpecConfig, load_config
from tailrl.engine import Request, SamplingParams
from tailrl.errors import UserError
from tailrl.speculative import build_engine
from tailrl.train.batch import make_train_batch
from tailrl.train.trainer import Trainer
from tests.helpers import base_overrides, tiny_native

PROMPTS = [[5, 9, 11, 3], [7, 8]]


@pytest.fixture(scope="module")
def model():
    return tiny_native("llama", vocab=61, layers=1)[0]


def _run(model, **engine):
    eng = build_engine(model, None, EngineConfig(kv_cache_tokens=512, block_size=4, exact="strict", **engine), eos_ids=[2])
    params = SamplingParams(temperature=1.0, max_new_tokens=7, seed=3, ignore_eos=True)
    outs, _ = eng.generate([Request(p, uid=i, n=2, params=params) for i, p in enumerate(PROMPTS)])
    return [(o.token_ids, o.logprobs) for o in outs]


@pytest.fixture(scope="module")
def batched(model):
    return _run(model, max_batch_size=8)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["alone", "static", "speculation"])
def test_strict_rollouts_are_bitwise_the_same(model, batched, variant):
    kw = {"alone": dict(max_batch_size=1), "static": dict(max_batch_size=8, static_decode=True),
          "speculation": dict(max_batch_size=8, spec=SpecConfig(method="ngram", gate=False))}[variant]
    assert _run(model, **kw) == batched  # tokens and logprobs, bitwise


@pytest.mark.slow
@pytest.mark.parametrize("chunk_rows", [1024, 0])  # 0 (train.logprob_chunk_rows=0): still the strict kernels
def test_strict_engine_logprobs_equal_the_trainer_forward(model, batched, chunk_rows):
    prompts = [p for p in PROMPTS for _ in range(2)]
    batch = make_train_batch(prompts, [t for t, _ in batched], torch.zeros(len(prompts)))
    with torch.no_grad():
        lp = completion_logprobs(model, batch.input_ids, batch.prompt_lens, batch.max_completion, 1.0,
                                 chunk_rows=chunk_rows)
    assert torch.equal(lp, torch.tensor([lp for _, lp in batched]))


@pytest.mark.slow
def test_a_strict_training_step_has_no_mismatch(tiny_model_dir, arith_data, tmp_path):
    cfg = load_config(None, base_overrides(tiny_model_dir, arith_data, tmp_path, **{
        "engine.exact": "strict", "train.total_steps": 1, "rollout.max_new_tokens": 4, "train.tensorboard": "false",
        "train.rollout_batch_size": 8, "rollout.group_size": 4}))
    t = Trainer(cfg, tmp_path)
    before = {n: p.detach().clone() for n, p in t.model.named_parameters()}
    (m,) = t.fit()
    assert m["rollout/logprob_diff_max"] == 0.0 and m["rollout/logprob_diff_mean"] == 0.0
    assert any(not torch.equal(p, before[n]) for n, p in t.model.named_parameters())  # gradients flowed


def test_fast_mode_reports_its_mismatch(tiny_model_dir, arith_data, tmp_path):
    cfg = load_config(None, base_overrides(tiny_model_dir, arith_data, tmp_path, **{"train.total_steps": 1,
                                                                                   "train.tensorboard": "false"}))
    (m,) = Trainer(cfg, tmp_path).fit()
    assert 0.0 <= m["rollout/logprob_diff_mean"] <= m["rollout/logprob_diff_max"] < 1e-4


def test_strict_needs_the_triton_attention(model):
    with pytest.raises(UserError, match="engine.exact=strict needs engine.attention=triton"):
        build_engine(model, None, EngineConfig(exact="strict", attention="torch"))
    with pytest.raises(UserError, match="unknown engine.exact 'exactish'"):
        build_engine(model, None, EngineConfig(exact="exactish"))


@pytest.mark.parametrize("V", [49152, 151936])
def test_engine_and_trainer_logprobs_reach_the_kernel_in_one_dtype(monkeypatch, V):
    """bf16 logits of a real vocabulary: the engine's strict logprob (its fp32 logits) and the trainer's (the
    model-dtype logits, with autograd) reach the invariant kernel as the same dtype and are bitwise equal.
    (Compiled for a GPU, a bf16 and an fp32 row reduce in different layouts at this V: another order.)"""
    from tailrl import kernels
    from tailrl.engine.sampling.rows import invariant_logprobs
    from tailrl.model import strict

    seen = []
    kernel = kernels.token_logprobs_invariant

    def spy(logits, *args):
        seen.append(logits.dtype)
        return kernel(logits, *args)

    monkeypatch.setattr(kernels, "token_logprobs_invariant", spy, raising=False)
    g = torch.Generator().manual_seed(V)
    logits = (torch.randn(3, V, generator=g) * 4).to(torch.bfloat16)
    tokens = torch.randint(0, V, (3,), generator=g)
    with torch.inference_mode():  # the engine: fp32 logits from the runner
        engine = invariant_logprobs(logits.float(), tokens, torch.full((3,), 0.7), {0.7})
    trained = strict.token_logprobs(logits.clone().requires_grad_(), tokens, 0.7)  # the trainer's forward
    assert seen == [torch.float32, torch.float32]
    assert torch.equal(engine, trained.detach())
