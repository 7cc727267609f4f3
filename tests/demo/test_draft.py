"""The demo draft: distillation from a tiny random policy, keyed acceptance, caching."""

import json
from dataclasses import replace

import pytest
import torch

import tailrl.demo.draft as draft_mod
from tailrl.data.demo_task import DemoTask
from tailrl.demo.draft import DraftParams, distill_draft, keyed_acceptance, policy_rollouts
from tailrl.demo.tokenizer import demo_tokenizer
from tailrl.demo.warmstart import WarmStartParams, model_args
from tailrl.model import build_model, init_random, load, save_hf

TASK = DemoTask(min_terms=2, max_terms=3, max_operand=5)
SPEC = DraftParams(hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64, samples=48, steps=40, batch=8,
                 lr=1e-2, max_new_tokens=24, eval_samples=16)


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    """A tiny random policy with peaked (std 0.3) next-token distributions, saved with the demo tokenizer."""
    tok = demo_tokenizer()
    arch = WarmStartParams(hidden=48, layers=2, heads=2, kv_heads=1, intermediate=96)
    model = init_random(build_model(model_args(arch, len(tok), tok.eos_token_id)), std=0.3, seed=3)
    return save_hf(model, tmp_path_factory.mktemp("policy") / "demo-policy-tiny", tokenizer=tok)


def test_policy_accepts_its_own_keyed_samples(policy_dir):
    """The acceptance keys are the engine's: the policy re-drawing its own rollouts matches every token."""
    model, tok = load(policy_dir)
    rolls = policy_rollouts(model, tok, TASK, 16, "test", 7, SPEC)
    assert sum(len(r.token_ids) for r in rolls) > 50
    assert keyed_acceptance(model, rolls, 7, SPEC.temperature, tok.pad_token_id) >= 0.99
    # another seed: other draws
    assert keyed_acceptance(model, rolls, 8, SPEC.temperature, tok.pad_token_id) < 0.99


@pytest.mark.slow
def test_distill_draft_trains_saves_and_caches(policy_dir, tmp_path, monkeypatch):
    torch.manual_seed(0)
    folder = distill_draft(policy_dir, tmp_path, TASK, SPEC)
    assert folder.name == f"demo-draft-{SPEC.key(policy_dir)}" and folder.parent == tmp_path
    draft, tok = load(folder)
    policy, _ = load(policy_dir)
    assert draft.args.vocab_size == policy.args.vocab_size == len(tok)
    assert draft.args.eos_token_ids == policy.args.eos_token_ids
    assert draft.args.hidden_size == SPEC.hidden and draft.args.num_layers == SPEC.layers
    meta = json.loads((folder / "draft_meta.json").read_text())
    assert 0.0 <= meta["keyed_acceptance"] <= 1.0
    assert meta["kl_final"] < meta["kl_first"]
    assert meta["param_ratio"] < 1.0 and meta["forward_time_ratio"] > 0
    assert meta["spec"]["steps"] == SPEC.steps
    assert not list(tmp_path.glob("*.tmp"))

    def no_training(*a, **k):
        raise AssertionError("retrained a cached draft")

    monkeypatch.setattr(draft_mod, "load", no_training)
    assert distill_draft(policy_dir, tmp_path, TASK, SPEC) == folder
    assert SPEC.key(policy_dir) != replace(SPEC, steps=SPEC.steps + 1).key(policy_dir)
    assert SPEC.key(policy_dir) != SPEC.key(policy_dir.with_name("demo-policy-other"))
