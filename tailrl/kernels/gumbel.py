"""The keyed Gumbel-max race as one Triton kernel: one program per row streams the vocabulary in tiles of
GROUPS x GROUP tokens, computing hash, noise and scaled logit on the fly (no (B, V) temporaries), with a
running (best score, lowest id) argmax. Bitwise the tokens of the torch race (engine/sampling/gumbel.py),
whose noise is kernels/gumbel_noise.py: the same constants and operations.

Per tile: the scaled logits x = logit / T (IEEE division: div_rn), the keep mask (logit >= the row's
threshold: blocked's top-k / top-p cut as a logit threshold), each group's noise max M_b; only when some
group's (largest kept x) + M_b exceeds the best score so far are the tile's token noises computed (exact:
a group's noises are <= M_b; a strict > suffices because tiles go in id order, so a later tie loses).
Greedy rows (T <= 0) use noise 0: the first largest logit.

On a GPU it is compiled with enable_fp_fusion=False (set by gumbel_argmax) so det_log's Horner steps are
not contracted into FMAs, which would change the bits against torch. Under TRITON_INTERPRET=1 it runs on
CPU tensors (numpy: no contraction), how the tests compare it with the torch race.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tailrl.kernels import gumbel_noise as gn
from tailrl.kernels.numerics import INTERPRET

# the noise's constants, as constexprs (Triton reads only constexpr globals)
GROUP = gn.GROUP
LOG2_GROUP = gn.LOG2_GROUP
C1 = tl.constexpr(gn.C1)
C2 = tl.constexpr(gn.C2)
K_ID = tl.constexpr(gn.K_ID)
SALT_G = tl.constexpr(gn.SALT_G)
SALT_J = tl.constexpr(gn.SALT_J)
SQRT2 = tl.constexpr(gn.SQRT2)
LN2 = tl.constexpr(gn.LN2)
A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11 = (tl.constexpr(a) for a in gn.ATANH)
GROUPS = 16  # groups per tile


@triton.jit
def _hash32(x):
    """uint32 block -> uint32 block: gumbel_noise.hash32 (lowbias32; uint32 shifts are logical)."""
    x = x ^ (x >> 16)
    x = x * C1
    x = x ^ (x >> 15)
    x = x * C2
    return x ^ (x >> 15)


@triton.jit
def _det_log(y):
    """float64 block > 0 -> log(y), the same operations as gumbel_noise.det_log."""
    bits = y.to(tl.int64, bitcast=True)
    e = (bits >> 52) - 1023
    m = ((bits & 0xFFFFFFFFFFFFF) | 0x3FF0000000000000).to(tl.float64, bitcast=True)
    big = m > SQRT2
    m = tl.where(big, m * 0.5, m)
    e = e + big.to(tl.int64)
    s = (m - 1.0) / (m + 1.0)  # fp64 division is IEEE (div.rn.f64); div_rn takes fp32 only
    z = s * s
    p = z * A11 + A10
    p = p * z + A9
    p = p * z + A8
    p = p * z + A7
    p = p * z + A6
    p = p * z + A5
    p = p * z + A4
    p = p * z + A3
    p = p * z + A2
    p = p * z + A1
    p = p * z + A0
    return e.to(tl.float64) * LN2 + (s + s) * p


@triton.jit
def _exp_variate(bits):
    """uint32 block -> float64 -log((bits + 0.5) / 2**32)."""
    return -_det_log((bits.to(tl.float64) + 0.5) * 2.3283064365386963e-10)


@triton.jit
def gumbel_race_kernel(logits_ptr, stride_row, h_ptr, t_ptr, thr_ptr, out_ptr, V,
                       GROUPS: tl.constexpr, GROUP_: tl.constexpr, LOG2_GROUP_: tl.constexpr):
    """One program per row. logits (B, V) any float dtype (row stride stride_row, unit column stride);
    h (B,) int64 key hashes; t (B,) float32 temperatures; thr (B,) float32 keep thresholds (-inf: all);
    out (B,) int64 tokens."""
    row = tl.program_id(0)
    T = tl.load(t_ptr + row).to(tl.float32)
    greedy = T <= 0.0
    Tdiv = tl.where(greedy, 1.0, T)
    thr = tl.load(thr_ptr + row).to(tl.float32)
    h = tl.load(h_ptr + row).to(tl.uint32)  # int64 -> its low 32 bits
    hg = _hash32(h ^ SALT_G)
    hj = _hash32(h ^ SALT_J)
    slot = tl.arange(0, GROUP_)
    best = tl.full([], -float("inf"), tl.float64)
    best_idx = tl.zeros([], dtype=tl.int64)
    row_ptr = logits_ptr + row.to(tl.int64) * stride_row
    for start in range(0, V, GROUPS * GROUP_):
        gid = start // GROUP_ + tl.arange(0, GROUPS)  # (GROUPS,) group ids
        tok = gid[:, None] * GROUP_ + slot[None, :]  # (GROUPS, GROUP) token ids
        inside = tok < V
        lg = tl.load(row_ptr + tok, mask=inside, other=-float("inf")).to(tl.float32)
        keep = inside & (lg >= thr)
        x = tl.where(keep, tl.math.div_rn(lg, Tdiv), -float("inf"))
        gkey = gid.to(tl.uint32) * K_ID
        eg = _exp_variate(_hash32(hg ^ gkey)) * (1.0 / GROUP_)  # (GROUPS,) E_b / GROUP
        m_b = -_det_log(eg)
        m_b = tl.where(greedy, 0.0, m_b)
        bound = tl.max(x, axis=1).to(tl.float64) + m_b
        if tl.max(bound, axis=0) > best:
            j = ((_hash32(hj ^ gkey) >> (32 - LOG2_GROUP_)) & (GROUP_ - 1)).to(tl.int32)
            e_t = _exp_variate(_hash32(h ^ (tok.to(tl.uint32) * K_ID)))
            g = tl.minimum(-_det_log(eg[:, None] + e_t), m_b[:, None])
            g = tl.where(slot[None, :] == j[:, None], m_b[:, None], g)
            g = tl.where(greedy, 0.0, g)
            s = tl.where(keep, x.to(tl.float64) + g, -float("inf"))
            tmax = tl.max(tl.max(s, axis=1), axis=0)
            tidx = tl.min(tl.min(tl.where(s == tmax, tok, 2147483647), axis=1), axis=0)
            upd = tmax > best
            best_idx = tl.where(upd, tidx.to(tl.int64), best_idx)
            best = tl.where(upd, tmax, best)
    tl.store(out_ptr + row, best_idx)


def gumbel_argmax(logits: torch.Tensor, h: torch.Tensor, temperature: torch.Tensor, thr: torch.Tensor,
           groups: int = GROUPS) -> torch.Tensor:
    """The keyed Gumbel-max race of each row: logits (B, V) any float dtype, h (B,) int64 key hashes,
    temperature (B,), thr (B,) float32 keep thresholds (the smallest kept logit; -inf: all) -> (B,) int64
    tokens, bitwise those of engine/sampling/gumbel.py's race. Graph-capturable (no host reads)."""
    B, V = logits.shape
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    out = torch.empty(B, dtype=torch.int64, device=logits.device)
    kw = {} if INTERPRET else {"enable_fp_fusion": False}
    gumbel_race_kernel[(B,)](logits, logits.stride(0), h.contiguous(), temperature.float().contiguous(),
                             thr.float().contiguous(), out, V, GROUPS=groups, GROUP_=GROUP,
                             LOG2_GROUP_=LOG2_GROUP, **kw)
    return out
