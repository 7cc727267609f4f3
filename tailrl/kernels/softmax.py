"""Batch-invariant log-softmax over the vocabulary, and the log-probability of chosen tokens.

Place in the flow: logits -> log-probabilities for sampling bookkeeping and for the rollout logprobs the
trainer compares against (tailrl/model/head.py). One program per row; the row is reduced block by block
in a fixed order (max first, then the sum of exp), so a row's values never depend on the batch. Both
functions share one code path, so

    token_logprobs_invariant(logits, targets, T)[n] == log_softmax_invariant(logits, T)[n, targets[n]]
                                                    == log_softmax_invariant(z)[n, targets[n]]

bitwise, for z = logits.float() / T divided elementwise (IEEE round-to-nearest, as tailrl/engine/sampling/blocked.py
divides by a temperature tensor; torch's tensor / python-float may multiply by 1/T on a GPU instead).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tailrl.kernels.numerics import INTERPRET, next_pow2, to_f32


def softmax_block(V: int) -> int:
    """Columns per reduction step: 4096, or the whole row rounded up to a power of two when shorter."""
    return min(4096, max(16, next_pow2(V)))


@triton.jit
def _scaled(row_ptr, cols, V, temperature, EMULATE: tl.constexpr):
    """z = x / temperature in fp32 for the columns < V of a row, -inf elsewhere."""
    ok = cols < V
    x = to_f32(tl.load(row_ptr + cols, mask=ok, other=0.0), EMULATE)
    return tl.where(ok, tl.div_rn(x, temperature), float("-inf"))


@triton.jit
def _row_stats(row_ptr, V, temperature, BLOCK_V: tl.constexpr, EMULATE: tl.constexpr):
    """(max of z, log(sum(exp(z - max)))) over one row, blocks visited in increasing order."""
    cols = tl.arange(0, BLOCK_V)
    m_vec = tl.full([BLOCK_V], float("-inf"), tl.float32)
    for v0 in range(0, V, BLOCK_V):
        m_vec = tl.maximum(m_vec, _scaled(row_ptr, v0 + cols, V, temperature, EMULATE))
    m = tl.max(m_vec, 0)
    s_vec = tl.zeros([BLOCK_V], tl.float32)
    for v0 in range(0, V, BLOCK_V):
        s_vec += tl.exp(_scaled(row_ptr, v0 + cols, V, temperature, EMULATE) - m)
    return m, tl.log(tl.sum(s_vec, 0))


@triton.jit
def _log_softmax_kernel(x_ptr, y_ptr, V, x_s, y_s, temperature, BLOCK_V: tl.constexpr, EMULATE: tl.constexpr):
    """One program per row: y = (z - max) - lse."""
    row = tl.program_id(0).to(tl.int64)
    m, lse = _row_stats(x_ptr + row * x_s, V, temperature, BLOCK_V, EMULATE)
    cols = tl.arange(0, BLOCK_V)
    for v0 in range(0, V, BLOCK_V):
        c = v0 + cols
        z = _scaled(x_ptr + row * x_s, c, V, temperature, EMULATE)
        tl.store(y_ptr + row * y_s + c, (z - m) - lse, mask=c < V)


@triton.jit
def _token_logprob_kernel(x_ptr, tgt_ptr, y_ptr, V, x_s, temperature,
                          BLOCK_V: tl.constexpr, EMULATE: tl.constexpr):
    """One program per row: y = (z[target] - max) - lse, the same expression as _log_softmax_kernel."""
    row = tl.program_id(0).to(tl.int64)
    m, lse = _row_stats(x_ptr + row * x_s, V, temperature, BLOCK_V, EMULATE)
    tgt = tl.load(tgt_ptr + row).to(tl.int64)
    z = tl.div_rn(to_f32(tl.load(x_ptr + row * x_s + tgt), EMULATE), temperature)
    tl.store(y_ptr + row, (z - m) - lse)


def _rows(x: torch.Tensor) -> torch.Tensor:
    if x.dim() != 2:
        raise ValueError(f"expected (N, V) logits, got {tuple(x.shape)}")
    return x if x.stride(1) == 1 else x.contiguous()


def log_softmax_invariant(x: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """x: (N, V) any float dtype -> (N, V) fp32 log_softmax(x.float() / temperature, dim=-1)."""
    x = _rows(x)
    if not temperature > 0:
        raise ValueError(f"log_softmax_invariant: temperature must be > 0, got {temperature}")
    N, V = x.shape
    y = torch.empty(N, V, dtype=torch.float32, device=x.device)
    if N and V:
        _log_softmax_kernel[(N,)](x, y, V, x.stride(0), V, float(temperature), BLOCK_V=softmax_block(V), EMULATE=INTERPRET,
                                  num_warps=4)
    return y


def token_logprobs_invariant(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits: (N, V), targets: (N,) int in [0, V) -> (N,) fp32
    log_softmax(logits.float() / temperature, dim=-1)[n, targets[n]]."""
    logits = _rows(logits)
    N, V = logits.shape
    if targets.shape != (N,):
        raise ValueError(f"token_logprobs_invariant: targets {tuple(targets.shape)} for {N} rows")
    if not temperature > 0:
        raise ValueError(f"token_logprobs_invariant: temperature must be > 0, got {temperature}")
    y = torch.empty(N, dtype=torch.float32, device=logits.device)
    if N:
        _token_logprob_kernel[(N,)](logits, targets, y, V, logits.stride(0), float(temperature),
                                    BLOCK_V=softmax_block(V), EMULATE=INTERPRET, num_warps=4)
    return y
