"""LoRA on the native decoder (model/lora.py) against brute force: the merged weights W + s B A computed from
scratch, and the gradients of A and B from autograd through that merged weight (torch.func.functional_call on a
plain copy of the model). The custom backward never forms the (out, in) weight gradient; these tests show it
gives the same dA, dB (and dx, through the earlier layers' adapters)."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call

from tailrl.config.sections import LORA_TARGETS
from tailrl.errors import UserError
from tailrl.model.head import Targets
from tailrl.model.loading import clone_model
from tailrl.model.lora import (
    LINEAR_NAMES,
    LoraSpec,
    adapter_parameters,
    attach,
    lora_linears,
    merge,
    merged_copy,
    resolve_targets,
)
from tailrl.model.weights import hf_state_dict
from tests.helpers import tiny_native


def _lora_model(family="llama", targets=("all-linear",), r=4, alpha=8.0, seed=0, **kw):
    """A tiny native model with adapters whose B is random (so the adapters change the forward)."""
    model = tiny_native(family, **kw)[0]
    attach(model, LoraSpec(r=r, alpha=alpha, targets=targets), seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for _, m in lora_linears(model):
            for b in m.lora.lora_B.values():
                b.copy_(torch.randn(b.shape, generator=g) * 0.05)
    merge(model)
    return model


def _brute_force(model, ids, targets):
    """The logprobs of a plain copy whose adapted weights are W + s B A built by autograd from leaf copies of
    A and B; returns (logprobs, {id(adapter parameter): its leaf copy})."""
    plain = clone_model(model)
    leaves, weights = {}, {}
    for name, m in lora_linears(model):
        w = m.lora_base.float()
        for (start, n), a, b in m.lora.pairs():
            la, lb = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
            leaves[id(a)], leaves[id(b)] = la, lb
            rows = torch.zeros(w.shape[0], 1)
            rows[start:start + n] = 1
            w = w + rows * torch.nn.functional.pad(m.lora.scale * (lb @ la), (0, 0, start, w.shape[0] - start - n))
        weights[f"{name}.weight"] = w
    return functional_call(plain, weights, (ids,), {"targets": targets}), leaves


def test_attach_starts_at_the_base_and_adds_no_hf_weight():
    model, _ = tiny_native("llama_bias")
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(ids)
    names = set(hf_state_dict(model))
    attach(model, LoraSpec(r=4, alpha=8.0, targets=("q_proj", "v_proj", "down_proj")))
    merge(model)
    with torch.no_grad():
        assert torch.equal(model(ids), before)  # B = 0: W' = W, bit for bit
    assert set(hf_state_dict(model)) == names  # the merged weights are the HF weights; adapters are not
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora." in n for n in trainable)
    assert {p.dtype for p in adapter_parameters(model)} == {torch.float32}
    (_, qkv), (_, down), *_ = lora_linears(model)  # two per layer
    assert list(qkv.lora.rows) == ["q_proj", "v_proj"] and list(down.lora.rows) == ["down_proj"]
    assert model.lora_spec.targets == ("q_proj", "v_proj", "down_proj")


@pytest.mark.parametrize("family,targets", [("llama", ("all-linear",)), ("llama_bias", ("q_proj", "v_proj")),
                                            ("qwen3", ("k_proj", "o_proj", "up_proj")), ("qwen2", ("all-linear",))])
def test_forward_and_gradients_equal_brute_force(family, targets):
    model = _lora_model(family, targets)
    ids = torch.randint(0, 97, (3, 11), generator=torch.Generator().manual_seed(1))
    model.train()
    lp = model(ids, targets=ids)
    lp.sum().backward()
    want, leaves = _brute_force(model, ids, ids)
    want.sum().backward()
    assert (lp - want).abs().max() < 1e-5
    for p in adapter_parameters(model):
        ref = leaves[id(p)].grad
        assert (p.grad - ref).abs().max() <= 1e-5 * ref.abs().max() + 1e-9, p.shape
    assert all(p.grad is None for n, p in model.named_parameters() if ".lora." not in n)  # frozen: no gradient


def test_training_forward_equals_the_no_grad_forward_bitwise():
    """The trainer's forward (LoraMatmul) and the engine's (the plain layer under no_grad) multiply by the same
    merged tensor through the same op."""
    model = _lora_model("llama_bias")
    ids = torch.randint(0, 97, (2, 13), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        plain = model(ids, targets=ids)
    model.train()
    assert torch.equal(model(ids, targets=ids), plain)


def test_chunked_head_and_activation_checkpointing_give_the_same_gradients():
    model = _lora_model("llama")
    ids = torch.randint(0, 97, (2, 10), generator=torch.Generator().manual_seed(3))
    grads = []
    for chunk_rows, checkpointing in ((0, False), (4, False), (4, True)):
        model.zero_grad(set_to_none=True)
        model.checkpointing = checkpointing
        model.train()
        lp, ent = model(ids, targets=Targets(ids, entropy=True), chunk_rows=chunk_rows)
        (lp.sum() + 0.1 * ent.sum()).backward()
        grads.append(torch.cat([p.grad.flatten() for p in adapter_parameters(model)]))
    for g in grads[1:]:
        torch.testing.assert_close(g, grads[0], rtol=1e-5, atol=1e-6)


def test_an_optimizer_step_then_merge_is_the_brute_force_merge():
    model = _lora_model("llama_bias")
    bases = {n: m.lora_base.clone() for n, m in lora_linears(model)}
    opt = torch.optim.AdamW(adapter_parameters(model), lr=1e-2)
    opt.register_step_post_hook(lambda *_: merge(model))
    ids = torch.randint(0, 97, (2, 8), generator=torch.Generator().manual_seed(4))
    model.train()
    model(ids, targets=ids).sum().backward()
    opt.step()
    want = merged_copy(model)
    for name, m in lora_linears(model):
        assert torch.equal(m.weight, want[f"{name}.weight"])  # merged in place after the step
        assert torch.equal(m.lora_base, bases[name])  # the base never moves
    assert len(opt.state) == len(adapter_parameters(model))  # no optimizer state for the base


def test_bf16_base_with_fp32_adapters():
    model = tiny_native("llama")[0]
    attach(model, LoraSpec(r=2, alpha=4.0, targets=("all-linear",)), dtype=torch.bfloat16)
    assert {p.dtype for n, p in model.named_parameters() if ".lora." not in n} == {torch.bfloat16}
    assert {p.dtype for p in adapter_parameters(model)} == {torch.float32}
    with torch.no_grad():
        for p in adapter_parameters(model):
            p.add_(0.01)
    merge(model)
    for name, w in merged_copy(model).items():  # fp32 sum of the bf16 base and s B A, rounded once
        assert w.dtype == torch.bfloat16 and torch.equal(model.get_parameter(name), w)


def test_inits_and_seeds():
    a = _lora_model(seed=5)
    b = _lora_model(seed=5)
    for p, q in zip(adapter_parameters(a), adapter_parameters(b)):
        assert torch.equal(p, q)  # seeded: a resume rebuilds the same adapters before loading them
    model = tiny_native("llama")[0]
    attach(model, LoraSpec(r=8, alpha=8.0, targets=("q_proj",), init="gaussian"))
    (_, qkv), *_ = lora_linears(model)
    a = qkv.lora.lora_A["q_proj"]
    assert abs(a.std().item() - 1 / 8) < 0.03 and torch.count_nonzero(qkv.lora.lora_B["q_proj"]) == 0


def test_bad_targets_and_rank_name_the_valid_ones():
    with pytest.raises(UserError, match="q_projj.*the model's linear layers: q_proj, k_proj, v_proj, o_proj"):
        resolve_targets(("q_projj",))
    assert resolve_targets("all-linear") == LINEAR_NAMES and LORA_TARGETS == (*LINEAR_NAMES, "all-linear")
    assert resolve_targets(("v_proj", "q_proj")) == ("q_proj", "v_proj")
    with pytest.raises(UserError, match="r must be >= 1"):
        attach(tiny_native("llama")[0], LoraSpec(r=0, alpha=8.0, targets=("q_proj",)))
