"""Batch-invariant linear layer: y = x @ weight.T (+ bias) with a reduction order fixed per output element.

Place in the flow: the projections of the rollout forward (qkv, o, gate_up, down, LM head) when logits must
not depend on what else is in the batch. cuBLAS picks tiles and split-K from M, so a row's result changes
with the batch size; here the tiles come from (N, K, dtype) only, K is reduced tile by tile in increasing
order inside one program, and there is no split-K: every output element is computed the same way for any M
and any row index.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tailrl.kernels.numerics import INTERPRET, dot_f32, from_f32, next_pow2, to_f32


def matmul_blocks(N: int, K: int, dtype: torch.dtype) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K) from the weight's shape and dtype alone, never from M.

    16-bit: 64 x 64 x 64 tensor-core tiles; 64 columns (not 128) so a decode step (M small) still spreads
    N / 64 programs over the GPU. fp32 takes the exact (non-TF32) path: smaller tiles. N and K below a
    tile shrink it to the next power of two (>= 16, the smallest tl.dot)."""
    bm, bn, bk = (32, 64, 32) if dtype == torch.float32 else (64, 64, 64)
    return bm, min(bn, max(16, next_pow2(N))), min(bk, max(16, next_pow2(K)))


@triton.jit(do_not_specialize=["M"])  # M = 1 must not get a binary of its own
def _matmul_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
    x_sm, x_sk, w_sn, w_sk, y_sm, y_sn,
    HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, EMULATE: tl.constexpr,
):
    """One program per (BLOCK_M, BLOCK_N) output tile, walking K from 0 up in BLOCK_K steps."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    # grouped order: GROUP_M row tiles share weight column tiles while they sit in L2 (values unaffected)
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % size_m
    pid_n = (pid % per_group) // size_m

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < N
    x_rows = x_ptr + rm.to(tl.int64)[:, None] * x_sm
    w_cols = w_ptr + rn.to(tl.int64)[None, :] * w_sn
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        k_ok = kk < K
        a = tl.load(x_rows + kk[None, :] * x_sk, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(w_cols + kk[:, None] * w_sk, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc += dot_f32(a, b, EMULATE)
    if HAS_BIAS:
        acc += to_f32(tl.load(b_ptr + rn, mask=n_ok, other=0.0), EMULATE)[None, :]
    y = from_f32(acc, y_ptr.dtype.element_ty, EMULATE)
    tl.store(y_ptr + rm.to(tl.int64)[:, None] * y_sm + rn[None, :] * y_sn, y, mask=m_ok[:, None] & n_ok[None, :])


def matmul_invariant(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x: (M, K), weight: (N, K) (nn.Linear layout), bias: (N,) or None -> y: (M, N) in x.dtype.

    fp32 accumulation; bias added in fp32 before the single rounding to x.dtype."""
    M, K = x.shape
    N, Kw = weight.shape
    if Kw != K or weight.dtype != x.dtype:
        raise ValueError(f"matmul_invariant: x {tuple(x.shape)} {x.dtype}, weight {tuple(weight.shape)} {weight.dtype}")
    if bias is not None and bias.shape != (N,):
        raise ValueError(f"matmul_invariant: bias {tuple(bias.shape)} for {N} outputs")
    y = torch.empty(M, N, dtype=x.dtype, device=x.device)
    if M == 0 or N == 0:
        return y
    if K == 0:
        return y.copy_(bias.expand(M, N)) if bias is not None else y.zero_()
    bm, bn, bk = matmul_blocks(N, K, x.dtype)
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    _matmul_kernel[grid](
        x, weight, bias if bias is not None else x, y, M, N, K,
        x.stride(0), x.stride(1), weight.stride(0), weight.stride(1), y.stride(0), y.stride(1),
        HAS_BIAS=bias is not None, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, EMULATE=INTERPRET,
        num_warps=4, num_stages=3 if x.dtype != torch.float32 else 2,
    )
    return y
