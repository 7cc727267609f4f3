"""RMSNorm, optionally fused with the residual add that precedes it in every decoder layer.

Place in the flow: the decoder's input/post-attention/final norms (tailrl/model/layers.py RMSNorm), with
`h = h + sublayer(...)` folded in. One program normalizes one whole row in a fixed-order reduction, so a
row's result never depends on the batch around it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tailrl.kernels.numerics import INTERPRET, from_f32, next_pow2, round_f32, to_f32

MAX_DIM = 16384  # one row is held in registers; models stay far below this


@triton.jit
def _rms_norm_kernel(
    x_ptr, res_ptr, w_ptr, y_ptr, h_ptr, D, eps,
    x_s, res_s, y_s, h_s,
    HAS_RES: tl.constexpr, BLOCK_D: tl.constexpr, EMULATE: tl.constexpr,
):
    """One program per row: y = w * rmsnorm(h), h = x (+ residual), each step rounded to x's dtype."""
    row = tl.program_id(0).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    ok = d < D
    dtype = x_ptr.dtype.element_ty
    h = to_f32(tl.load(x_ptr + row * x_s + d, mask=ok, other=0.0), EMULATE)
    if HAS_RES:
        r = to_f32(tl.load(res_ptr + row * res_s + d, mask=ok, other=0.0), EMULATE)
        h_low = from_f32(h + r, dtype, EMULATE)  # the residual stream lives in x's dtype
        tl.store(h_ptr + row * h_s + d, h_low, mask=ok)
        h = to_f32(h_low, EMULATE)
    inv_rms = tl.math.rsqrt(tl.sum(h * h, 0) / D + eps)
    normed = round_f32(h * inv_rms, dtype, EMULATE)  # statistics in fp32, value cast as RMSNorm does
    w = round_f32(to_f32(tl.load(w_ptr + d, mask=ok, other=0.0), EMULATE), dtype, EMULATE)
    tl.store(y_ptr + row * y_s + d, from_f32(normed * w, dtype, EMULATE), mask=ok)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
             residual: torch.Tensor | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """x: (..., D), weight: (D,) -> y: (..., D) = weight * rmsnorm_fp32(x).to(x.dtype), in x.dtype.

    With residual (same shape as x): h = x + residual in x.dtype, returns (rms_norm(h), h)."""
    D = x.shape[-1]
    if weight.shape != (D,):
        raise ValueError(f"rms_norm: weight {tuple(weight.shape)} for rows of {D}")
    if D > MAX_DIM:
        raise ValueError(f"rms_norm: rows of {D} > {MAX_DIM} are not supported")
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        raise ValueError("rms_norm: residual must match x's shape and dtype")
    x2 = x.reshape(-1, D)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    res2 = x2 if residual is None else residual.reshape(-1, D).contiguous()
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    h = torch.empty_like(y) if residual is not None else y
    N = x2.shape[0]
    if N:
        block = next_pow2(D)
        _rms_norm_kernel[(N,)](
            x2, res2, weight.contiguous(), y, h, D, eps,
            x2.stride(0), res2.stride(0), D, D,
            HAS_RES=residual is not None, BLOCK_D=block, EMULATE=INTERPRET,
            num_warps=4 if block <= 1024 else (8 if block <= 4096 else 16),
        )
    return y if residual is None else (y, h)
