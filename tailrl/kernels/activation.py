"""SiLU-gated product of the MLP: [gate | up] -> silu(gate) * up.

Place in the flow: between gate_up_proj and down_proj of tailrl/model/decoder.py MLP. Computed in fp32
and rounded once to the input dtype (the torch MLP rounds silu(gate) first, then the product: results may
differ from it by one unit in the last place, never between batches). Elementwise, so batch invariant.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tailrl.kernels.numerics import INTERPRET, from_f32, next_pow2, to_f32


@triton.jit
def _silu_mul_kernel(x_ptr, y_ptr, inter, x_s, y_s, BLOCK: tl.constexpr, EMULATE: tl.constexpr):
    """Program (row, column block): y[row, c] = silu(x[row, c]) * x[row, inter + c]."""
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = c < inter
    g = to_f32(tl.load(x_ptr + row * x_s + c, mask=ok, other=0.0), EMULATE)
    u = to_f32(tl.load(x_ptr + row * x_s + inter + c, mask=ok, other=0.0), EMULATE)
    y = g / (1.0 + tl.exp(-g)) * u  # silu as torch writes it: x / (1 + exp(-x))
    tl.store(y_ptr + row * y_s + c, from_f32(y, y_ptr.dtype.element_ty, EMULATE), mask=ok)


def silu_mul(x: torch.Tensor) -> torch.Tensor:
    """x: (..., 2I) = [gate | up] -> (..., I) = silu(gate) * up, in x.dtype."""
    two_i = x.shape[-1]
    if two_i % 2:
        raise ValueError(f"silu_mul: last dim {two_i} is not [gate | up]")
    inter = two_i // 2
    x2 = x.reshape(-1, two_i)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty(*x.shape[:-1], inter, dtype=x.dtype, device=x.device)
    M = x2.shape[0]
    if M and inter:
        block = min(1024, next_pow2(inter))
        _silu_mul_kernel[(M, triton.cdiv(inter, block))](x2, y, inter, x2.stride(0), inter, BLOCK=block, EMULATE=INTERPRET)
    return y
