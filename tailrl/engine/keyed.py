"""Keyed sampling: every sampled token is a pure function of the processed distribution and the key
(run seed, prompt uid, sample index, position) — never of batch composition, order, preemption, TP
layout or speculation.

Random numbers come from a counter-based integer hash computed vectorised in torch (int64 arithmetic,
masked to 32 bits, identical on CPU and CUDA); there are no per-row generators. Two exact samplers are
registered in SAMPLERS:

- inverse_cdf: one keyed uniform per position; token = first index whose cumulative probability
  exceeds u. One random number per token; the default (cheapest at large vocabularies).
- gumbel: argmax(log p + Gumbel(key, token)); V random numbers per token.

Both draw from exactly softmax(processed logits). Greedy (temperature 0) is argmax for both.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

_M32 = 0xFFFFFFFF
_ROUNDS = (0x9E3779B9, 0x85EBCA6B, 0xC2B2AE35, 0x27D4EB2F, 0x165667B1)


def mix32(x):
    """lowbias32 integer finaliser on int64 tensors (or Python ints) holding 32-bit values; int64 products
    wrap, and only their low 32 bits are kept, so results are exact and platform independent, and a
    Python int gives the same value as a tensor element."""
    x = x & _M32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _M32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _M32
    return x ^ (x >> 16)


def prefix_hash(seed, uid, sample):
    """The hash of a key's fixed part (seed, uid, sample index): tensors (B,) or Python ints. A sequence
    computes it once; each position then costs one mix (position_hash)."""
    h = mix32(seed ^ _ROUNDS[0])
    for i, part in enumerate((seed >> 32, uid, uid >> 32, sample)):
        h = mix32(h ^ (part & _M32) ^ _ROUNDS[i + 1])
    return h


def position_hash(prefix, pos):
    """prefix_hash (B,) and positions (B,) -> (B,) int64: the 32-bit hash of the whole key."""
    return mix32(prefix ^ (pos & _M32) ^ _ROUNDS[0])


def key_hash(seed: torch.Tensor, uid: torch.Tensor, sample: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """(B,) int64 each -> (B,) int64 32-bit hash of the sampling key."""
    return position_hash(prefix_hash(seed, uid, sample), pos)


def uniform_from_hash(h: torch.Tensor, counter: torch.Tensor | int = 0) -> torch.Tensor:
    """Hash (any shape) and a counter (int or broadcastable int64 tensor) -> float64 uniforms in (0, 1)
    with 53 random bits."""
    a = mix32(h ^ mix32(counter * 2 + 1))
    b = mix32(a ^ 0x68E31DA4)
    bits = (a >> 5) * (1 << 26) + (b >> 6)  # 27 + 26 = 53 bits
    return (bits.double() + 0.5) / float(1 << 53)


def _flags(temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> tuple[bool, bool, bool]:
    """(any row uses top-k, any uses top-p, any is greedy), read with a single host sync."""
    need_k, need_p, greedy = torch.stack([(top_k > 0).any(), (top_p < 1.0).any(), (temperature <= 0).any()]).tolist()
    return need_k, need_p, greedy


def _scaled(logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """(B, V) float32 logits / T (greedy rows, T = 0, are left unscaled)."""
    t = torch.where(temperature > 0, temperature, torch.ones_like(temperature)).float()
    return logits.float() / t.unsqueeze(-1)


def _filtered(x: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, need_k: bool, need_p: bool) -> torch.Tensor:
    """(B, V) scaled logits with tokens outside top-k / the top-p nucleus set to -inf."""
    if not (need_k or need_p):
        return x
    sorted_x, order = x.sort(dim=-1, descending=True)
    remove = torch.zeros_like(sorted_x, dtype=torch.bool)
    if need_k:
        rank = torch.arange(x.shape[-1], device=x.device)
        k = torch.where(top_k > 0, top_k, torch.full_like(top_k, x.shape[-1]))
        remove |= rank.unsqueeze(0) >= k.unsqueeze(-1)
    if need_p:
        probs = sorted_x.masked_fill(remove, float("-inf")).softmax(-1)
        before = probs.cumsum(-1) - probs  # mass strictly above this token
        # rows without top-p are left alone: their float cumsum may pass 1.0 and must not cut the tail
        # because another row of the batch uses top-p (a token must not depend on its batch)
        remove |= (before > top_p.float().unsqueeze(-1)) & (top_p < 1).unsqueeze(-1)
    remove[:, 0] = False  # keep the most likely token always
    return x.scatter(-1, order, sorted_x.masked_fill(remove, float("-inf")))


def process_logits(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                   top_p: torch.Tensor) -> torch.Tensor:
    """logits: (B, V); temperature/top_p: (B,) float; top_k: (B,) int (0 = off).
    Returns (B, V) float32 log-probabilities of the sampling distribution (-inf where filtered).
    Rows with temperature 0 are returned unscaled (the caller takes argmax)."""
    need_k, need_p, _ = _flags(temperature, top_k, top_p)
    return _filtered(_scaled(logits, temperature), top_k, top_p, need_k, need_p).log_softmax(-1)


def hash_keys(keys: torch.Tensor) -> torch.Tensor:
    """(B, 4) int64 key rows (seed, uid, sample, position) -> (B,) int64 hashes."""
    return key_hash(keys[:, 0], keys[:, 1], keys[:, 2], keys[:, 3])


def sample_inverse_cdf(logp: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """logp: (B, V) processed log-probs; h: (B,) key hashes -> (B,) int64 tokens."""
    u = uniform_from_hash(h)  # (B,)
    cdf = logp.exp().double().cumsum(-1)  # (B, V), summed in float64 so batch shape cannot matter
    target = (u * cdf[:, -1]).unsqueeze(-1)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return idx.clamp_(max=logp.shape[-1] - 1)


def sample_gumbel(logp: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """logp: (B, V); h: (B,) -> (B,) int64 argmax of logp + keyed Gumbel noise (one number per token)."""
    tok = torch.arange(logp.shape[-1], device=logp.device, dtype=torch.int64)
    u = uniform_from_hash(h.unsqueeze(-1), tok.unsqueeze(0))  # (B, V)
    g = -torch.log(-torch.log(u))
    return (logp.double() + g).argmax(-1)


SAMPLERS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "inverse_cdf": sample_inverse_cdf,
    "gumbel": sample_gumbel,
}


def keyed_sample(logits: torch.Tensor, keys: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                 top_p: torch.Tensor, method: str = "inverse_cdf") -> tuple[torch.Tensor, torch.Tensor]:
    """logits: (B, V); keys: (B, 4) int64 rows (seed, uid, sample, position).
    Returns (tokens (B,) int64, logprobs (B,) float32). The logprob is that of the sampled token under
    softmax(logits / T) — the temperature-scaled policy the trainer recomputes (before top-k/top-p)."""
    return keyed_sample_hashed(logits, hash_keys(keys), temperature, top_k, top_p, method)


def keyed_sample_hashed(logits: torch.Tensor, h: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                        top_p: torch.Tensor, method: str = "inverse_cdf") -> tuple[torch.Tensor, torch.Tensor]:
    """keyed_sample with the keys already hashed: h (B,) int64 = hash_keys(keys) (the engine's path, which
    hashes each sequence's fixed key part once)."""
    need_k, need_p, any_greedy = _flags(temperature, top_k, top_p)
    x = _scaled(logits, temperature)
    base = x.log_softmax(-1)  # the policy the trainer scores under
    logp = _filtered(x, top_k, top_p, need_k, need_p).log_softmax(-1) if (need_k or need_p) else base
    tokens = SAMPLERS[method](logp, h)
    if any_greedy:
        tokens = torch.where(temperature <= 0, logits.argmax(-1), tokens)
    return tokens, base.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
