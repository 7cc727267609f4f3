"""Batch-invariant linear layer: y = x @ weight.T (+ bias) with a reduction order fixed per output element.

Place in the flow: the projections of the rollout forward (qkv, o, gate_up, down, LM head) when logits must
not depend on what else is in the batch. cuBLAS picks tiles and split-K from M, so a row's result changes
with the batch size; here the tiles come from (N, K, dtype) only, K is reduced tile by tile in increasing
order, and every output element is computed the same way for any M and any row index.

Split-K with a fixed order: K is cut into segments of K_SEG (from the dtype only); each segment is reduced
from zero, and the segments' sums are added in segment order, then the bias. One program may do all of it
(large M), or, when a decode step's few output tiles would leave the GPU idle, each (tile, segment) gets
its own program writing its fp32 partial and `_reduce_kernel` adds them in the same order: the same
additions, so the same bits either way.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tailrl.kernels.numerics import INTERPRET, dot_f32, from_f32, next_pow2, sm_count, to_f32


def matmul_blocks(N: int, K: int, dtype: torch.dtype) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K) from the weight's shape and dtype alone, never from M.

    16-bit: 32 x 64 x 64 tensor-core tiles on 8 warps (no register spills on sm_80 / sm_90 with Triton 3.6
    and 3.9; 32 rows waste less of a decode step than 64); 64 columns (not 128) so a decode step still
    spreads N / 64 programs over the GPU, and split-K more. fp32 takes the exact (non-TF32) path: smaller
    tiles. N and K below a tile shrink it to the next power of two (>= 16, the smallest tl.dot)."""
    bm, bn, bk = (32, 64, 32) if dtype == torch.float32 else (32, 64, 64)
    return bm, min(bn, max(16, next_pow2(N))), min(bk, max(16, next_pow2(K)))


# K elements per split-K segment (a multiple of every BLOCK_K): fixed, so the order of additions is too
K_SEG = 512


@triton.jit
def _tile_of(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Output tile (pid_m, pid_n) of program `pid` in grouped order (GROUP_M row tiles share weight column
    tiles while they sit in L2; values unaffected)."""
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    return first_m + (pid % per_group) % size_m, (pid % per_group) // size_m


@triton.jit(do_not_specialize=["M", "split"])  # M = 1 must not get a binary of its own; split is a runtime flag
def _matmul_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, part_ptr, M, N, K,
    x_sm, x_sk, w_sn, w_sk, y_sm, y_sn, split,
    HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, K_SEG_: tl.constexpr, EMULATE: tl.constexpr,
):
    """Program (output tile[, K segment with `split`]): each segment walks K up in BLOCK_K steps from zero;
    segment sums are added in order (all of them here, or one written as a partial for _reduce_kernel)."""
    pid = tl.program_id(0)
    seg = tl.program_id(1)
    pid_m, pid_n = _tile_of(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < N
    x_rows = x_ptr + rm.to(tl.int64)[:, None] * x_sm
    w_cols = w_ptr + rn.to(tl.int64)[None, :] * w_sn
    total = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    n_seg = tl.cdiv(K, K_SEG_)
    s_lo = tl.where(split != 0, seg, 0)
    s_hi = tl.where(split != 0, seg + 1, n_seg)
    for s in range(s_lo, s_hi):
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for k0 in range(s * K_SEG_, tl.minimum(s * K_SEG_ + K_SEG_, K), BLOCK_K):
            kk = k0 + rk
            k_ok = kk < K
            a = tl.load(x_rows + kk[None, :] * x_sk, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(w_cols + kk[:, None] * w_sk, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
            acc += dot_f32(a, b, EMULATE)
        total += acc
    out_mask = m_ok[:, None] & n_ok[None, :]
    if split != 0:
        tl.store(part_ptr + (seg * M + rm.to(tl.int64))[:, None] * N + rn[None, :], total, mask=out_mask)
    else:
        _finish(total, b_ptr, y_ptr, rm, rn, m_ok, n_ok, y_sm, y_sn, HAS_BIAS, EMULATE)


@triton.jit
def _finish(total, b_ptr, y_ptr, rm, rn, m_ok, n_ok, y_sm, y_sn, HAS_BIAS: tl.constexpr, EMULATE: tl.constexpr):
    """+ bias in fp32, one rounding to y's dtype, store."""
    if HAS_BIAS:
        total += to_f32(tl.load(b_ptr + rn, mask=n_ok, other=0.0), EMULATE)[None, :]
    y = from_f32(total, y_ptr.dtype.element_ty, EMULATE)
    tl.store(y_ptr + rm.to(tl.int64)[:, None] * y_sm + rn[None, :] * y_sn, y, mask=m_ok[:, None] & n_ok[None, :])


@triton.jit(do_not_specialize=["M"])
def _reduce_kernel(
    part_ptr, b_ptr, y_ptr, M, N, K, y_sm, y_sn,
    HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr,
    K_SEG_: tl.constexpr, EMULATE: tl.constexpr,
):
    """Program per output tile: the segments' partials added in segment order from zero, as _matmul_kernel
    adds them when it does every segment itself."""
    pid_m, pid_n = _tile_of(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < M
    n_ok = rn < N
    total = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for s in range(0, tl.cdiv(K, K_SEG_)):
        total += tl.load(part_ptr + (s * M + rm.to(tl.int64))[:, None] * N + rn[None, :],
                         mask=m_ok[:, None] & n_ok[None, :], other=0.0)
    _finish(total, b_ptr, y_ptr, rm, rn, m_ok, n_ok, y_sm, y_sn, HAS_BIAS, EMULATE)


def matmul_invariant(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                     split: bool | None = None) -> torch.Tensor:
    """x: (M, K), weight: (N, K) (nn.Linear layout), bias: (N,) or None -> y: (M, N) in x.dtype.

    fp32 accumulation; bias added in fp32 before the single rounding to x.dtype. split: one program per
    (output tile, K segment) plus a reduce (None: when the output tiles alone are fewer than the GPU's SMs);
    the result is bitwise the same either way."""
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
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    n_seg = triton.cdiv(K, K_SEG)
    if split is None:
        split = n_seg > 1 and tiles < sm_count(x.device)
    split = bool(split) and n_seg > 1
    part = torch.empty(n_seg, M, N, dtype=torch.float32, device=x.device) if split else y  # y: not read
    b = bias if bias is not None else x
    common = dict(HAS_BIAS=bias is not None, BLOCK_M=bm, BLOCK_N=bn, GROUP_M=8, K_SEG_=K_SEG, EMULATE=INTERPRET)
    _matmul_kernel[(tiles, n_seg if split else 1)](
        x, weight, b, y, part, M, N, K,
        x.stride(0), x.stride(1), weight.stride(0), weight.stride(1), y.stride(0), y.stride(1), int(split),
        BLOCK_K=bk, **common, num_warps=8 if x.dtype != torch.float32 else 4,
        num_stages=3 if x.dtype != torch.float32 else 2,
    )
    if split:
        _reduce_kernel[(tiles,)](part, b, y, M, N, K, y.stride(0), y.stride(1), **common, num_warps=4)
    return y
