"""Native decoder vs Hugging Face transformers (the oracle) on random tiny configs of each family."""

import pytest
import torch

from tests.helpers import DEVICE, FAMILIES, tiny_native

CASES = [(f, tied) for f in FAMILIES for tied in (False, True)]


@pytest.mark.parametrize("family,tied", CASES)
def test_logits_match_transformers(family, tied):
    native, hf = tiny_native(family, tied)
    ids = torch.randint(0, 97, (3, 40), generator=torch.Generator().manual_seed(1)).to(DEVICE)
    with torch.no_grad():
        ours = native(ids)
        ref = hf(ids).logits
    assert ours.shape == ref.shape == (3, 40, 97)
    assert (ours - ref).abs().max().item() <= 1e-4


def test_llama3_rope_scaling_is_active():
    a, _ = tiny_native("llama")
    b, _ = tiny_native("llama3_rope")
    assert not torch.allclose(a.rotary.inv_freq, b.rotary.inv_freq)


def test_mistral_sliding_window_matches():
    native, hf = tiny_native("mistral", sliding_window=8)
    ids = torch.randint(0, 97, (2, 30), generator=torch.Generator().manual_seed(2)).to(DEVICE)
    with torch.no_grad():
        diff = (native(ids) - hf(ids).logits).abs().max().item()
    assert diff <= 1e-4


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_runs_close(dtype):
    native, hf = tiny_native("qwen2")
    ids = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(3)).to(DEVICE)
    with torch.no_grad():
        ref = hf(ids).logits
        ours = native.to(dtype)(ids).float()
    assert ours.dtype == torch.float32 and torch.isfinite(ours).all()
    assert (ours - ref).abs().max().item() < 0.1


def test_autograd_flows():
    native, _ = tiny_native("qwen3")
    native.train()
    ids = torch.randint(0, 97, (2, 12), device=DEVICE)
    native(ids).logsumexp(-1).mean().backward()
    grads = [p.grad for p in native.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
