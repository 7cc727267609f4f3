"""Rotary position embedding (rotate-half convention, as Hugging Face Llama) from a precomputed table.

Place in the flow: replaces Rotary.cos_sin + apply_rotary of tailrl/model/layers.py inside attention. The
table [cos | sin] is built once per model by `rotary_cache`; `apply_rotary` rotates q and k of all new
tokens in one launch, one program per token, rounding each step as torch does in q's dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tailrl.kernels.numerics import INTERPRET, from_f32, next_pow2, round_f32, to_f32


def rotary_cache(inv_freq: torch.Tensor, max_positions: int, dtype: torch.dtype) -> torch.Tensor:
    """inv_freq: (D/2,) fp32 -> (max_positions, D) in `dtype`: cos(p * inv_freq) | sin(p * inv_freq).

    The same fp32 products and rounding as Rotary.cos_sin, so rows equal its halves bitwise."""
    freqs = torch.arange(max_positions, device=inv_freq.device).float().unsqueeze(-1) * inv_freq.float()
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(dtype)


@triton.jit
def _rotate(x_ptr, o_ptr, x_sh, o_sh, H, HALF, cos, sin, dtype: tl.constexpr,
            BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr, EMULATE: tl.constexpr):
    """x: (H, 2*HALF) rows of one token -> o = x * [cos|cos] + [-x2|x1] * [sin|sin]."""
    h = tl.arange(0, BLOCK_H)[:, None]
    j = tl.arange(0, BLOCK_HALF)[None, :]
    mask = (h < H) & (j < HALF)
    x1 = to_f32(tl.load(x_ptr + h * x_sh + j, mask=mask, other=0.0), EMULATE)
    x2 = to_f32(tl.load(x_ptr + h * x_sh + HALF + j, mask=mask, other=0.0), EMULATE)
    # every product and the sum rounded to the dtype, as the torch expression computes them
    o1 = round_f32(x1 * cos, dtype, EMULATE) + round_f32(-x2 * sin, dtype, EMULATE)
    o2 = round_f32(x2 * cos, dtype, EMULATE) + round_f32(x1 * sin, dtype, EMULATE)
    tl.store(o_ptr + h * o_sh + j, from_f32(o1, dtype, EMULATE), mask=mask)
    tl.store(o_ptr + h * o_sh + HALF + j, from_f32(o2, dtype, EMULATE), mask=mask)


@triton.jit
def _rotary_kernel(
    q_ptr, k_ptr, qo_ptr, ko_ptr, cache_ptr, pos_ptr,
    q_sn, q_sh, k_sn, k_sh, qo_sn, qo_sh, ko_sn, ko_sh, cache_s, HQ, HK, HALF,
    BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr, BLOCK_HALF: tl.constexpr, EMULATE: tl.constexpr,
):
    """One program per token: rotate all its query and key heads by the table row of its position."""
    i = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + i).to(tl.int64)
    dtype = q_ptr.dtype.element_ty
    j = tl.arange(0, BLOCK_HALF)
    ok = j < HALF
    # the table may be kept in another dtype: torch would multiply by cos/sin in q's dtype
    cos = round_f32(to_f32(tl.load(cache_ptr + pos * cache_s + j, mask=ok, other=0.0), EMULATE), dtype, EMULATE)
    sin = round_f32(to_f32(tl.load(cache_ptr + pos * cache_s + HALF + j, mask=ok, other=0.0), EMULATE),
                    dtype, EMULATE)
    _rotate(q_ptr + i * q_sn, qo_ptr + i * qo_sn, q_sh, qo_sh, HQ, HALF, cos[None, :], sin[None, :], dtype,
            BLOCK_HQ, BLOCK_HALF, EMULATE)
    _rotate(k_ptr + i * k_sn, ko_ptr + i * ko_sn, k_sh, ko_sh, HK, HALF, cos[None, :], sin[None, :], dtype,
            BLOCK_HK, BLOCK_HALF, EMULATE)


def apply_rotary(q: torch.Tensor, k: torch.Tensor, cache: torch.Tensor,
                 positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q: (N, Hq, D), k: (N, Hk, D) same dtype (rows may be strided, D contiguous); cache: (max_pos, D)
    from rotary_cache; positions: (N,) int -> (q_out, k_out) new tensors shaped like q and k."""
    N, HQ, D = q.shape
    if k.shape[0] != N or k.shape[2] != D or k.dtype != q.dtype or D % 2:
        raise ValueError(f"apply_rotary: q {tuple(q.shape)} {q.dtype}, k {tuple(k.shape)} {k.dtype}")
    if cache.shape[1] != D or positions.shape != (N,):
        raise ValueError(f"apply_rotary: cache {tuple(cache.shape)}, positions {tuple(positions.shape)}")
    if q.stride(2) != 1:
        q = q.contiguous()
    if k.stride(2) != 1:
        k = k.contiguous()
    cache = cache.contiguous()
    positions = positions.contiguous()  # the kernel indexes it as a dense (N,) array
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    if N:
        HK = k.shape[1]
        _rotary_kernel[(N,)](
            q, k, q_out, k_out, cache, positions,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), q_out.stride(0), q_out.stride(1),
            k_out.stride(0), k_out.stride(1), cache.stride(0), HQ, HK, D // 2,
            BLOCK_HQ=next_pow2(HQ), BLOCK_HK=next_pow2(HK), BLOCK_HALF=next_pow2(D // 2), EMULATE=INTERPRET,
        )
    return q_out, k_out
