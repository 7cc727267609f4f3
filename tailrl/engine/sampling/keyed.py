"""Keyed sampling: every sampled token is a pure function of the processed distribution and the key
(run seed, prompt uid, sample index, position) — never of batch composition, order, preemption, TP
layout or speculation. The samplers are entries of the SAMPLERS registry (engine.sampler), each a
KeyedSampler over logits and key hashes (sampling/hashing.py):

- gumbel (the default; sampling/gumbel.py): argmax of logit / T + keyed Gumbel noise per (key, token),
  pruned to the tokens that can win (a Triton kernel on CUDA); robust to small logit differences.
- blocked (sampling/blocked.py): the inverse CDF at one keyed uniform in fp32 blocks and exact integers,
  with its own radix-select top-k / top-p cut: no sort, no float64, no host sync.
- inverse_cdf: one keyed uniform per position; token = first index whose cumulative probability
  exceeds u (a float64 cumsum over the whole vocabulary).

gumbel and blocked keep the same tokens under top-k / top-p and return the same logprob; an inverse-CDF
draw flips where its uniform falls within the logits' error of any CDF boundary, a Gumbel race only where
the two best perturbed scores are that close (docs/results.md: the identity rates on a real model).

All draw from exactly softmax(processed logits). Greedy (temperature 0) is argmax for all. The logprob
returned is that of the sampled token under softmax(logits / T), the temperature-scaled policy the trainer
recomputes (before top-k / top-p).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from tailrl.engine.sampling.blocked import keyed_blocked
from tailrl.engine.sampling.gumbel import keyed_gumbel
from tailrl.engine.sampling.hashing import hash_keys, uniform_from_hash
from tailrl.engine.sampling.processing import Flags, filtered, read_flags, scaled
from tailrl.engine.sampling.votes import gumbel_vote, inverse_cdf_vote
from tailrl.registry import Registry


@dataclass(frozen=True)
class KeyedSampler:
    """A SAMPLERS entry: called as sample(logits, h, temperature, top_k, top_p, flags) with logits (B, V), h (B,)
    int64 key hashes, temperature / top_p (B,) float, top_k (B,) int (0 = off) and flags from host-side
    parameters (processing.host_flags) -> (tokens (B,) int64, logprobs (B,)). vote(counts, h): the same
    sampler's draw from a small explicit distribution at key hash h (sampling/votes.py), for drafters."""

    sample: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    vote: Callable[[Mapping[int, int], int], int]

    def __call__(self, logits, h, temperature, top_k, top_p, flags):
        return self.sample(logits, h, temperature, top_k, top_p, flags)


SAMPLERS: Registry[KeyedSampler] = Registry("engine.sampler")
SAMPLERS.add("gumbel", KeyedSampler(keyed_gumbel, gumbel_vote))
SAMPLERS.add("blocked", KeyedSampler(keyed_blocked, inverse_cdf_vote))  # blocked draws at inverse_cdf's uniform


def sample_inverse_cdf(logp: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """logp: (B, V) processed log-probs; h: (B,) key hashes -> (B,) int64 tokens."""
    u = uniform_from_hash(h)  # (B,)
    cdf = logp.exp().double().cumsum(-1)  # (B, V), summed in float64 so batch shape cannot matter
    target = (u * cdf[:, -1]).unsqueeze(-1)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return idx.clamp_(max=logp.shape[-1] - 1)


def _on_processed(draw):
    """A KeyedSampler from a draw over processed log-probs ((B, V), (B,) -> tokens): temperature and the
    sorted top-k / top-p cut first, greedy rows by argmax, the logprob under softmax(logits / T)."""

    def sampler(logits, h, temperature, top_k, top_p, flags):
        need_k, need_p, any_greedy = flags
        x = scaled(logits, temperature)
        base = x.log_softmax(-1)  # the policy the trainer scores under
        logp = filtered(x, top_k, top_p, need_k, need_p).log_softmax(-1) if (need_k or need_p) else base
        tokens = draw(logp, h)
        if any_greedy:
            tokens = torch.where(temperature <= 0, logits.argmax(-1), tokens)
        return tokens, base.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)

    sampler.__qualname__ = f"keyed_{draw.__name__}"
    return sampler


SAMPLERS.add("inverse_cdf", KeyedSampler(_on_processed(sample_inverse_cdf), inverse_cdf_vote))


def keyed_sample(logits: torch.Tensor, keys: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                 top_p: torch.Tensor, method: str = "inverse_cdf") -> tuple[torch.Tensor, torch.Tensor]:
    """logits: (B, V); keys: (B, 4) int64 rows (seed, uid, sample, position).
    Returns (tokens (B,) int64, logprobs (B,) float32)."""
    return keyed_sample_hashed(logits, hash_keys(keys), temperature, top_k, top_p, method)


def keyed_sample_hashed(logits: torch.Tensor, h: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                        top_p: torch.Tensor, method: str = "inverse_cdf",
                        flags: Flags | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """keyed_sample with the keys already hashed: h (B,) int64 = hash_keys(keys). flags = (any row uses
    top-k, any uses top-p, any is greedy), from host-side parameters (host_flags); None reads them from the
    tensors with one host sync. Flags only skip work and must be true whenever some row needs them; with
    method "blocked" a row's token and logprob are bitwise the same whatever the flags (and the rest of the
    batch). The engine resolves its sampler once (SAMPLERS.get) and calls it directly."""
    flags = flags if flags is not None else read_flags(temperature, top_k, top_p)
    return SAMPLERS.get(method)(logits, h, temperature, top_k, top_p, flags)
