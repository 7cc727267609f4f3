"""Training that fits: fp32 masters under bf16 compute, the engine's own weights, exact bf16 resume, the chunked
LM head and activation checkpointing against the plain path, the KV pool released during the update, and a
CUDA OOM as one line."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from tailrl.config import load_config
from tailrl.engine import Request, SamplingParams
from tailrl.errors import UserError
from tailrl.model.head import token_logprobs
from tailrl.train.trainer import Trainer, out_of_memory
from tests.helpers import base_overrides, tiny_native


def _trainer(model_dir, data, run, **extra):
    return Trainer(load_config(None, base_overrides(model_dir, data, run, **{"train.tensorboard": "false"} | extra)), run)


def test_bf16_training_moves_fp32_masters_below_bf16_resolution(tiny_model_dir, arith_data, tmp_path):
    t = _trainer(tiny_model_dir, arith_data, tmp_path / "r", **{"model.dtype": "bfloat16", "train.lr": 1e-6,
                                                               "train.total_steps": 1})
    before = {n: p.detach().clone() for n, p in t.model.named_parameters()}
    assert all(p.dtype == torch.float32 for p in before.values())  # masters
    assert next(t.engine.model.parameters()).dtype == torch.bfloat16 and not t.policy.shared
    t.fit()
    moved = small = 0
    for n, p in t.model.named_parameters():
        d = (p.detach() - before[n]).abs()
        moved += int((d > 0).sum())
        # steps below half an ulp of the weight in bf16 (2**-9 relative): an in-place bf16 update loses them
        small += int(((d > 0) & (d < before[n].abs() * 2.0 ** -9)).sum())
        assert torch.equal(t.engine.model.get_parameter(n), p.detach().to(torch.bfloat16))  # engine = masters
    assert moved > 0 and small > 0


@pytest.mark.parametrize("run", ["bf16", "kl"])
def test_checkpoints_resume_exactly(tiny_model_dir, arith_data, tmp_path, run):
    """bf16: the HF folder in bf16 and the fp32 masters beside it; kl: the frozen reference comes back too."""
    extra = {"train.total_steps": 2, "train.save_every": 1} | (
        {"model.dtype": "bfloat16"} if run == "bf16" else {"algo.kl_coef": 0.1})
    full = _trainer(tiny_model_dir, arith_data, tmp_path / "full", **extra)
    full.fit()
    ckpt = tmp_path / "full" / "checkpoints" / "step-000002"
    with safe_open(str(ckpt / "model" / "model.safetensors"), "pt") as f:
        want = torch.bfloat16 if run == "bf16" else torch.float32
        assert f.get_tensor(f.keys()[0]).dtype == want  # the HF folder in the run's dtype
    assert (ckpt / "masters.safetensors").is_file() == (run == "bf16")
    half = _trainer(tiny_model_dir, arith_data, tmp_path / "half", **extra | {"train.total_steps": 1})
    half.fit()
    resumed = Trainer(load_config(tmp_path / "half" / "config.yaml", ["train.total_steps=2"]), tmp_path / "half",
                      resume=True)
    resumed.fit()
    for (n, a), (_, b) in zip(full.model.named_parameters(), resumed.model.named_parameters()):
        assert torch.equal(a, b), n


def test_chunked_head_and_activation_checkpointing_equal_the_plain_path():
    model = tiny_native("qwen2", vocab=97, tied=True)[0].train()
    ids = torch.randint(3, 97, (3, 12))
    idx = torch.arange(4, 11).expand(3, 7)
    tgt = ids.gather(1, idx + 1)

    def run(chunked: bool, checkpointing: bool):
        model.zero_grad()
        model.checkpointing = checkpointing
        lp = model(ids, logits_index=idx, targets=tgt, temperature=0.7, chunk_rows=5) if chunked else \
            token_logprobs(model(ids, logits_index=idx), tgt, 0.7)
        lp.sum().backward()
        return lp.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    ref_lp, ref_g = run(False, False)
    for chunked, ckpt in [(True, False), (False, True), (True, True)]:
        lp, g = run(chunked, ckpt)
        torch.testing.assert_close(lp, ref_lp, rtol=1e-6, atol=1e-6)
        for n in ref_g:
            torch.testing.assert_close(g[n], ref_g[n], rtol=1e-5, atol=1e-6)


def test_released_kv_pool_comes_back_and_tokens_do_not_change(tiny_model_dir, arith_data, tmp_path):
    t = _trainer(tiny_model_dir, arith_data, tmp_path / "r")
    reqs = [Request([5, 6, 7], uid=0, n=3, params=SamplingParams(max_new_tokens=12, seed=3, ignore_eos=True))]
    ref, _ = t.engine.generate(reqs)
    t.engine.release_kv()
    assert t.engine.cache.kv.numel() == 0
    again, _ = t.engine.generate(reqs)
    assert [r.token_ids for r in again] == [r.token_ids for r in ref] and t.engine.cache.kv.numel() > 0
    t2 = _trainer(tiny_model_dir, arith_data, tmp_path / "rel", **{"train.release_kv_during_update": "true"})
    t2.fit()  # released before every update, restored by the next rollout
    assert t2.step_idx == 2


def test_cuda_oom_is_one_line_and_names_the_settings(tmp_path):
    with pytest.raises(UserError, match=r"CUDA out of memory in the update: lower train.micro_batch_tokens.*"
                                        r"last checkpoint kept: .*step-7"):
        with out_of_memory("the update", "train.micro_batch_tokens", tmp_path / "step-7"):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
