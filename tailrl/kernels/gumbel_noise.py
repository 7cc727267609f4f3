"""The keyed Gumbel noise of the `gumbel` sampler (engine/sampling/gumbel.py), in torch; the Triton kernel
(kernels/gumbel.py) computes the same bits from the constants defined here.

Random bits (hash32): a lowbias32 finaliser (shifts 16/15/15, multipliers 0x21F0AAAD, 0x735A2D97) of
(row key ^ id * 0x9E3779B9), in 32-bit lanes (torch int32: products wrap, right shifts are masked to be
logical), equal to the uint32 arithmetic of hash32_ref on Python ints.

Noise (grouped, exact iid Gumbel): tokens are grouped by id into groups of GROUP = 64 (token t in group
t >> 6, slot t & 63; the last group is padded with virtual tokens, so a token's noise does not depend on
V). With E(bits) = -log((bits + 0.5) / 2**32) an Exp(1) variate:

    E_t = E(hash32(h  ^ t * K))             token variate
    E_b = E(hash32(hg ^ b * K))             group variate      (hg = hash32(h ^ SALT_G))
    J_b = hash32(hj ^ b * K) >> 26          group's top slot   (hj = hash32(h ^ SALT_J))
    M_b = -log(E_b / GROUP)                 the group's largest noise
    g_t = M_b                               if t is slot J_b of its group
    g_t = min(M_b, -log(E_b / GROUP + E_t)) otherwise

the standard top-down construction of GROUP iid Gumbels (their max is Gumbel + log GROUP, its place
uniform, the others Gumbels truncated below it), so g is iid Gumbel per token (up to the 32-bit grid) and a
pure function of (h, t). Every noise of group b is <= M_b: a group whose best scaled logit + M_b is below an
achieved score cannot hold the winner and needs no per-token hash (with flat noise -log(-log u) the only
bound is 22.9, which leaves most of a real LM's vocabulary to hash at T = 1).

log here is `det_log`: float64 from IEEE +, -, *, / and bit operations only (no libm, no FMA), so the noise
is bitwise the same on any CPU path (vector body or scalar tail), on CUDA and in the Triton kernel
(compiled with enable_fp_fusion=False). Every function is elementwise: a token's noise is bitwise the same
in any batch and any subset of tokens.
"""

from __future__ import annotations

import math

import torch

GROUP = 64  # tokens per noise group (a power of two)
LOG2_GROUP = 6
K_ID = 0x9E3779B9  # id multiplier (golden ratio): spreads consecutive ids over the 32 bits
C1, C2 = 0x21F0AAAD, 0x735A2D97  # lowbias32 multipliers
SALT_G, SALT_J = 0x6A09E667, 0xBB67AE85  # derive the group keys from the row key
_M32 = 0xFFFFFFFF
SQRT2 = math.sqrt(2.0)
LN2 = math.log(2.0)
# 2 atanh(s) = log((1 + s) / (1 - s)) = 2 s (1 + z/3 + z^2/5 + ...), z = s^2 <= 0.0295: 12 terms reach 1e-18
ATANH = tuple(1.0 / (2 * k + 1) for k in range(12))


def _i32(c: int) -> int:
    """A uint32 constant as the int32 with the same bits (torch int32 ops take in-range scalars)."""
    return c - (1 << 32) if c >= 1 << 31 else c


# -- hashing -------------------------------------------------------------------------------------------

def hash32_ref(x: int) -> int:
    """The hash on a Python int (the uint32 reference): lowbias32 of x's low 32 bits."""
    x &= _M32
    x ^= x >> 16
    x = (x * C1) & _M32
    x ^= x >> 15
    x = (x * C2) & _M32
    return x ^ (x >> 15)


def token_noise_ref(h: int, t: int) -> int:
    """Reference of token_noise_u32 for one (row key hash, token id)."""
    return hash32_ref(h ^ ((t * K_ID) & _M32))


def hash32(x: torch.Tensor) -> torch.Tensor:
    """int32 tensor (bits of a uint32) -> int32 tensor, the bits of hash32_ref. Consumes x (in place)."""
    x ^= (x >> 16) & 0xFFFF  # logical shift: arithmetic shift, then clear the copied sign bits
    x *= _i32(C1)  # int32 products wrap (two's complement)
    x ^= (x >> 15) & 0x1FFFF
    x *= _i32(C2)
    x ^= (x >> 15) & 0x1FFFF
    return x


def to_i32(h: torch.Tensor) -> torch.Tensor:
    """(…) int64 holding 32-bit values -> int32 with the same low 32 bits."""
    h = h & _M32
    return torch.where(h >= 1 << 31, h - (1 << 32), h).to(torch.int32)


def _id_term(ids: torch.Tensor) -> torch.Tensor:
    """int64 ids -> int32 bits of ids * K_ID mod 2**32."""
    return to_i32(ids * K_ID)


def row_keys(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """h (B,) int64 -> (h, hg, hj) int32 (B,): the token, group-variate and group-slot keys."""
    h32 = to_i32(h)
    return h32, hash32(h32 ^ _i32(SALT_G)), hash32(h32 ^ _i32(SALT_J))


def token_noise_u32(h: torch.Tensor, V: int) -> torch.Tensor:
    """h (B,) int64 -> (B, V) int64 in [0, 2**32): token t's random bits hash32(h ^ t * K_ID)."""
    ids = _id_term(torch.arange(V, device=h.device))
    return hash32(to_i32(h).unsqueeze(-1) ^ ids).long() & _M32


# -- deterministic float64 log and the noise -----------------------------------------------------------

def det_log(y: torch.Tensor) -> torch.Tensor:
    """float64 y > 0, normal -> log(y) (error ~1 ulp), from IEEE basic ops and bit operations only, so the
    same bits on every torch path, CUDA and Triton. y = 2^e m, m in [sqrt(1/2), sqrt(2)): log y = e ln2 +
    2 atanh((m - 1) / (m + 1)) by a Horner series."""
    bits = y.view(torch.int64)
    e = (bits >> 52) - 1023
    m = ((bits & 0xFFFFFFFFFFFFF) | 0x3FF0000000000000).view(torch.float64)  # [1, 2)
    big = m > SQRT2
    m = torch.where(big, m * 0.5, m)
    e = e + big.long()
    s = (m - 1.0) / (m + 1.0)
    z = s * s
    p = torch.full_like(z, ATANH[-1])
    for c in reversed(ATANH[:-1]):
        p = p * z + c  # two IEEE ops (not addcmul, whose vector body may fuse)
    return e.double() * LN2 + (s + s) * p


def exp_variate(bits: torch.Tensor, log=det_log) -> torch.Tensor:
    """int32 bits (of a uint32) -> float64 E = -log(u), u = (bits + 0.5) / 2**32 (exact), E in
    [1.2e-10, 22.2]."""
    b = bits.double()
    b = torch.where(b < 0, b + 2.0 ** 32, b)
    return -log((b + 0.5) * 2.0 ** -32)


def group_noise(hg: torch.Tensor, hj: torch.Tensor, groups: torch.Tensor, log=det_log):
    """Row keys hg, hj (int32, broadcastable) and group ids (int64) -> (M float64: the group's largest noise,
    Eg float64: E_b / GROUP, J int64: its slot), elementwise. log: det_log, or torch.log for the pruning's
    approximations (within ~1e-14 of det_log's)."""
    gid = _id_term(groups)
    eg = exp_variate(hash32(hg ^ gid), log) * (1.0 / GROUP)  # exact: a power of two
    j = (hash32(hj ^ gid) >> (32 - LOG2_GROUP)) & (GROUP - 1)
    return -log(eg), eg, j.long()


def token_gumbel(h32: torch.Tensor, tokens: torch.Tensor, m: torch.Tensor, eg: torch.Tensor,
                 j: torch.Tensor, log=det_log) -> torch.Tensor:
    """Token noise from its group's values: h32 (int32) and the group's (m, eg, j) = group_noise(...)
    broadcast to tokens (int64) -> float64 g. Elementwise."""
    g = torch.minimum(-log(eg + exp_variate(hash32(h32 ^ _id_term(tokens)), log)), m)
    return torch.where((tokens & (GROUP - 1)) == j, m, g)


def gumbel_noise(keys, tokens: torch.Tensor, log=det_log) -> torch.Tensor:
    """keys = row_keys(h), each (B,) int32; tokens (B, k) int64 (any ids >= 0) -> (B, k) float64 noise g
    (module docstring). Elementwise in every op, so a token's noise is bitwise the same in any call."""
    h32, hg, hj = (k.unsqueeze(-1) for k in keys)
    return token_gumbel(h32, tokens, *group_noise(hg, hj, tokens >> LOG2_GROUP, log), log)


def gumbel_noise_py(h: int, t: int) -> float:
    """The noise g of token t under key hash h on Python numbers (math.log instead of det_log: within ~1e-15
    of gumbel_noise), for drafters that draw a handful of tokens as the target would."""
    gkey = (t >> LOG2_GROUP) * K_ID & _M32
    eg = -math.log((hash32_ref(hash32_ref(h ^ SALT_G) ^ gkey) + 0.5) * 2.0 ** -32) / GROUP
    m = -math.log(eg)
    if hash32_ref(hash32_ref(h ^ SALT_J) ^ gkey) >> (32 - LOG2_GROUP) == t & (GROUP - 1):
        return m
    e_t = -math.log((token_noise_ref(h, t) + 0.5) * 2.0 ** -32)
    return min(m, -math.log(eg + e_t))
