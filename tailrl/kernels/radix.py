"""The keyed samplers' top-k / top-p cut as one Triton kernel: a per-row radix select over the weights'
bit patterns, streaming the row (no (B, V) temporaries, no global scratch).

Input: the samplers' weights p (B, V) float32 = exp((logit - max) / T) in [0, 1] (engine/sampling/blocked.py
_weights). Output: each row's floor on p's bit pattern (p.view(int32) is monotone in p >= 0): the tokens
kept are those with bits >= floor (0 keeps all). The floor is defined exactly (integers throughout), so
this kernel and the torch implementation (blocked._nucleus_floor, the CPU path and this kernel's test
oracle) return the same floor whatever their digit widths or summation orders:

- top-k (k > 0): the largest key v with count(bits >= v) >= k (0 where the row has fewer than k tokens);
- top-p (< 1): with w = trunc(p * 2**40) int64 token masses and `kept` the mass of the top-k set (all of
  it without top-k), the largest v with sum(w[bits >= v]) >= trunc(top_p * kept) + 1 (float64 product);
  the row's floor is the larger of the two.

One program per row. A select runs PASSES = 30 / DIGIT passes over the row, most significant digit first
(keys < 2**30: p <= 1.0). A pass sums the weights of the keys inside the prefix chosen so far into
2**DIGIT buckets by their next digit; Triton has no weighted histogram, so a tile's bucket sums are a
one-hot (BLOCK, 2**DIGIT) masked sum (registers; the cross-warp step goes through shared memory). Then
the largest digit whose mass from the top (plus the mass above the prefix, carried from earlier passes)
reaches the target extends the prefix. Integer sums are exact in any order, so a row's floor is bitwise
independent of the batch, the grid and the device.

Memory traffic per row: the row's fp32 weights read once per pass (top-k: PASSES, top-p: PASSES + 1 for
the top-k set's mass), against ~18 GB per step for the torch path's (B, V) int32 / int64 histograms
buffers at B = 256, V = 151,936 (issue #28). Rows whose top-k / top-p is off skip their passes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

FIX_BITS = 40  # blocked.FIX_BITS: token masses in units of 2**-40 of the row's largest weight
KEY_BITS = 30  # p <= 1.0 < 2**30 as a bit pattern
DIGIT = 3  # bits per pass: 10 passes of 8 buckets (fewer passes cost more one-hot work per element)
BLOCK = 512  # tokens per tile: with 8 warps no spills on sm_80 / sm_90 with Triton 3.6 and 3.9 (aot test)
NUM_WARPS = 8


@triton.jit
def _select(row_ptr, V, target, COUNT: tl.constexpr, DIGIT_: tl.constexpr, KEY_BITS_: tl.constexpr,
            FIX: tl.constexpr, BLOCK_: tl.constexpr):
    """The largest key v (int64) with sum(weight[key >= v]) >= target, or 0 where the row's total is below
    it. weight = 1 per token (COUNT, int32) or trunc(p * 2**FIX) (int64); key = p's bits & (2**KEY_BITS - 1)."""
    NB: tl.constexpr = 1 << DIGIT_
    PASSES: tl.constexpr = KEY_BITS_ // DIGIT_
    buckets = tl.arange(0, NB)
    offs0 = tl.arange(0, BLOCK_)
    prefix = tl.zeros([], dtype=tl.int64)
    above = tl.zeros([], dtype=tl.int64)
    ok = tl.zeros([], dtype=tl.int1)
    for i in range(PASSES):  # a loop, not unrolled: unrolled passes spill on sm_80
        shift = KEY_BITS_ - (i + 1) * DIGIT_
        if COUNT:  # counts < V: int32 lanes (half the registers of the masses' int64)
            hist = tl.zeros([NB], dtype=tl.int32)
        else:
            hist = tl.zeros([NB], dtype=tl.int64)
        for start in range(0, V, BLOCK_):
            offs = start + offs0
            inside = offs < V
            p = tl.load(row_ptr + offs, mask=inside, other=0.0)
            key = p.to(tl.int32, bitcast=True) & ((1 << KEY_BITS_) - 1)
            if COUNT:
                w = tl.full([BLOCK_], 1, tl.int32)
            else:
                w = (p * (2.0 ** FIX)).to(tl.int64)  # exact scaling, truncated as torch's .long()
            live = inside & ((key >> (shift + DIGIT_)).to(tl.int64) == prefix)
            w = tl.where(live, w, 0)
            digit = (key >> shift) & (NB - 1)
            hist += tl.sum(tl.where(digit[:, None] == buckets[None, :], w[:, None], 0), axis=0)
        # mass[x]: the weight of the keys >= prefix . x (the buckets from x up, plus the keys above the prefix)
        hist64 = hist.to(tl.int64)
        mass = tl.sum(hist64, axis=0) - tl.cumsum(hist64, axis=0) + hist64 + above
        d = tl.sum((mass >= target).to(tl.int32), axis=0) - 1  # mass falls with x
        ok = tl.where(i == 0, d >= 0, ok)  # where the first pass finds a digit, so does every later one
        d = tl.maximum(d, 0)
        above = tl.sum(tl.where(buckets == d, mass - hist64, 0), axis=0)
        prefix = prefix * NB + d
    return tl.where(ok, prefix, 0)


@triton.jit
def _nucleus_floor_kernel(p_ptr, stride_row, V, top_k_ptr, top_p_ptr, floor_ptr,
                          NEED_K: tl.constexpr, NEED_P: tl.constexpr, DIGIT_: tl.constexpr,
                          KEY_BITS_: tl.constexpr, FIX: tl.constexpr, BLOCK_: tl.constexpr):
    """One program per row. p (B, V) float32 weights (row stride stride_row, unit column stride); top_k (B,)
    int64 (0: off); top_p (B,) float32 (1: off); floor (B,) int32 out."""
    row = tl.program_id(0)
    row_ptr = p_ptr + row.to(tl.int64) * stride_row
    floor = tl.zeros([], dtype=tl.int64)
    if NEED_K:
        k = tl.load(top_k_ptr + row)
        if k > 0:
            floor = _select(row_ptr, V, k, True, DIGIT_, KEY_BITS_, FIX, BLOCK_)
    if NEED_P:
        tp = tl.load(top_p_ptr + row)
        if tp < 1.0:
            offs0 = tl.arange(0, BLOCK_)
            kept = tl.zeros([], dtype=tl.int64)
            for start in range(0, V, BLOCK_):  # the top-k set's mass (all of it where top-k is off)
                offs = start + offs0
                inside = offs < V
                p = tl.load(row_ptr + offs, mask=inside, other=0.0)
                w = (p * (2.0 ** FIX)).to(tl.int64)
                kept += tl.sum(tl.where(inside & (p.to(tl.int32, bitcast=True) >= floor), w, 0), axis=0)
            target = (tp.to(tl.float64) * kept.to(tl.float64)).to(tl.int64) + 1
            floor = tl.maximum(floor, _select(row_ptr, V, target, False, DIGIT_, KEY_BITS_, FIX, BLOCK_))
    tl.store(floor_ptr + row, floor.to(tl.int32))


def nucleus_floor(p: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, need_k: bool,
                  need_p: bool) -> torch.Tensor:
    """p: (B, V) float32 weights in [0, 1] (largest = 1); top_k (B,) int (0 = off); top_p (B,) float (1 = off);
    need_k / need_p: host flags (some row uses top-k / top-p). -> (B,) int32 floors on p's bit pattern,
    bitwise blocked._nucleus_floor's. p is only read. Graph-capturable (no host reads)."""
    if p.dtype != torch.float32:
        raise TypeError(f"nucleus_floor: weights must be float32, got {p.dtype}")
    B, V = p.shape
    if p.stride(-1) != 1:
        p = p.contiguous()
    floor = torch.empty(B, dtype=torch.int32, device=p.device)
    _nucleus_floor_kernel[(B,)](p, p.stride(0), V, top_k.long().contiguous(), top_p.float().contiguous(), floor,
                                NEED_K=bool(need_k), NEED_P=bool(need_p), DIGIT_=DIGIT, KEY_BITS_=KEY_BITS,
                                FIX=FIX_BITS, BLOCK_=BLOCK, num_warps=NUM_WARPS)
    return floor
