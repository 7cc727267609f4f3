"""A draft restricted to a sub-vocabulary (drafters/vocab_head.py) and the draft distiller (speculative/distill.py):
the restricted head equals the full head on its tokens and -inf elsewhere; speculation with such a draft stays
token-identical to plain decoding; distillation raises keyed acceptance and writes a loadable draft folder."""

from __future__ import annotations

import json

import torch

from tailrl.config import EngineConfig, SpecConfig
from tailrl.engine import Engine, Request, SamplingParams
from tailrl.model import load, save_hf
from tailrl.speculative import build_engine
from tailrl.speculative.distill import DistillParams, distill_draft, frequent_vocab, kl_topk
from tailrl.speculative.drafters.vocab_head import VOCAB_FILE, load_draft, restrict_vocab
from tests.helpers import tiny_native


def test_subset_head_matches_full_head_on_its_tokens():
    model, _ = tiny_native(tied=True)
    ids = torch.tensor([[3, 5, 8, 13]])
    full = model(ids)
    keep = [2, 7, 11, 50, 96]
    restrict_vocab(model, keep)
    sub = model(ids)
    torch.testing.assert_close(sub[..., keep], full[..., keep], rtol=1e-5, atol=1e-6)  # another GEMM shape
    rest = torch.ones(97, dtype=torch.bool)
    rest[keep] = False
    assert torch.isneginf(sub[..., rest]).all()


def test_frequent_vocab_ranks_by_count_and_keeps_eos():
    from tailrl.engine import Rollout

    outs = [Rollout(uid=0, sample_index=0, prompt_ids=[1], token_ids=[5, 5, 5, 9, 9, 4], logprobs=[0.0] * 6,
                    finish_reason="stop")]
    assert frequent_vocab(outs, 3, always=(2,)) == [2, 5, 9]


def test_kl_topk_is_zero_for_the_teacher_itself_and_ignores_tokens_outside_the_head():
    torch.manual_seed(0)
    logits = torch.randn(6, 20)
    vocab = torch.arange(0, 20, 2)  # the head has the even tokens
    slot = torch.full((20,), -1, dtype=torch.long)
    slot[vocab] = torch.arange(10)
    v, j = logits.topk(20, dim=-1)
    student = logits[:, vocab]  # exactly the teacher restricted to the head
    assert kl_topk(student, v, j, slot, 1.0).abs() < 1e-6
    assert kl_topk(torch.zeros(6, 10), v, j, slot, 1.0) > 0.01


def _rollout_tokens(engine, reqs):
    outs, _ = engine.generate(reqs)
    return {(o.uid, o.sample_index): o.token_ids for o in outs}


def test_distilled_subset_draft_keeps_speculation_exact(tmp_path, tiny_model_dir):
    policy, tok = load(str(tiny_model_dir))
    params = DistillParams(layers=(0,), vocab=40, max_new_tokens=16, top_k=16, epochs=3, batch=4, lr=3e-3,
                           temperature=1.0)
    prompts = [[1, 5 + i, 9, 3 + i % 7] for i in range(16)]
    folder = distill_draft(policy, tok, "tiny", prompts[:12], prompts[12:], params, tmp_path / "cache",
                           log=lambda *_: None)
    meta = json.loads((folder / "draft_meta.json").read_text())
    vocab = json.loads((folder / VOCAB_FILE).read_text())
    assert len(vocab) == 40 and 2 in vocab  # EOS always drafted
    assert meta["kl_final"] < meta["kl_first"]
    assert 0.0 <= meta["keyed_acceptance_before"] <= 1.0 and 0.0 <= meta["keyed_acceptance"] <= 1.0
    # the cached folder is found again by its key
    assert distill_draft(policy, tok, "tiny", prompts[:12], prompts[12:], params, tmp_path / "cache") == folder
    draft = load_draft(folder)
    assert draft.lm_head.ids.numel() == 40
    params_s = SamplingParams(temperature=1.0, max_new_tokens=20, seed=4)
    reqs = [Request(p, uid=i, n=2, params=params_s) for i, p in enumerate(prompts[12:])]
    plain = _rollout_tokens(Engine(policy, EngineConfig(kv_cache_tokens=4096)), reqs)
    spec = build_engine(policy, tok, EngineConfig(kv_cache_tokens=4096, spec=SpecConfig(
        method="draft", draft_model=str(folder), gate=False)))
    assert _rollout_tokens(spec, reqs) == plain
    assert spec.strategy.drafters["draft"].model.lm_head.ids.numel() == 40


def test_restricted_draft_folder_is_a_plain_hf_model(tmp_path):
    model, hf = tiny_native(tied=True)
    folder = save_hf(model, tmp_path / "d")
    (folder / VOCAB_FILE).write_text(json.dumps([2, 3, 4]))
    full, _ = load(str(folder), tokenizer=False)  # the folder itself: the whole head
    assert full.lm_head.__class__.__name__ == "ParallelLMHead"
    assert load_draft(folder).lm_head.ids.tolist() == [2, 3, 4]
