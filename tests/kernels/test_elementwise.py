"""rms_norm, rotary and silu_mul against their references and the torch model code they replace."""

import pytest
import torch

pytest.importorskip("triton")

from tailrl.kernels import apply_rotary, rms_norm, rotary_cache, silu_mul  # noqa: E402
from tailrl.kernels.reference import (  # noqa: E402
    apply_rotary_ref,
    rms_norm_ref,
    rotary_cache_ref,
    silu_mul_ref,
)
from tailrl.model import layers  # noqa: E402
from tests.helpers import DEVICE  # noqa: E402

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


def _randn(*shape, dtype, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype).to(DEVICE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim", [24, 640])
def test_rms_norm_matches_reference_and_module(dtype, dim):
    x = _randn(2, 3, dim, dtype=dtype, seed=0)  # leading dims are flattened
    w = _randn(dim, dtype=dtype, seed=1)
    want = rms_norm_ref(x, w, 1e-5)
    torch.testing.assert_close(rms_norm(x, w, 1e-5), want, **TOL[dtype])
    module = layers.RMSNorm(dim, 1e-5).to(dtype).to(DEVICE)
    module.weight.data.copy_(w)
    assert torch.equal(module(x), want)  # the reference is the model's RMSNorm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_residual_rms_norm(dtype):
    x = _randn(5, 96, dtype=dtype, seed=2)
    res = _randn(5, 96, dtype=dtype, seed=3)
    w = _randn(96, dtype=dtype, seed=4)
    y, h = rms_norm(x, w, 1e-6, residual=res)
    y_ref, h_ref = rms_norm_ref(x, w, 1e-6, residual=res)
    assert torch.equal(h, x + res)  # the residual stream is the plain add in x's dtype
    torch.testing.assert_close(h, h_ref, atol=0, rtol=0)
    torch.testing.assert_close(y, y_ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_matches_model_rotary(dtype):
    head_dim, hq, hk, n = 32, 4, 2, 7
    rot = layers.Rotary(head_dim, 10000.0, None)
    cache = rotary_cache(rot.inv_freq.to(DEVICE), 300, dtype)
    assert torch.equal(cache, rotary_cache_ref(rot.inv_freq.to(DEVICE), 300, dtype))
    qkv = _randn(n, (hq + 2 * hk) * head_dim, dtype=dtype, seed=5)  # q and k as strided views, as in attention
    q = qkv[:, : hq * head_dim].view(n, hq, head_dim)
    k = qkv[:, hq * head_dim:(hq + hk) * head_dim].view(n, hk, head_dim)
    positions = torch.tensor([0, 1, 17, 63, 64, 200, 299], device=DEVICE)
    q_out, k_out = apply_rotary(q, k, cache, positions)
    # the model path: Rotary.cos_sin on (B=1, T=n) positions, apply_rotary on (B, H, T, D)
    cos, sin = rot.cos_sin(positions.unsqueeze(0), dtype)
    q_model = layers.apply_rotary(q.transpose(0, 1).unsqueeze(0), cos, sin)[0].transpose(0, 1)
    k_model = layers.apply_rotary(k.transpose(0, 1).unsqueeze(0), cos, sin)[0].transpose(0, 1)
    q_ref, k_ref = apply_rotary_ref(q, k, cache, positions)
    assert torch.equal(q_ref, q_model) and torch.equal(k_ref, k_model)
    torch.testing.assert_close(q_out, q_model, **TOL[dtype])
    torch.testing.assert_close(k_out, k_model, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_mul(dtype):
    x = _randn(2, 3, 2 * 1100, dtype=dtype, seed=6)  # two column blocks, the second partial
    got = silu_mul(x)
    assert got.shape == (2, 3, 1100)
    torch.testing.assert_close(got, silu_mul_ref(x), **TOL[dtype])
