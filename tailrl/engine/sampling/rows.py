"""Keyed sampling of engine sequences: the keys and sampling parameters of `Sequence`s turned into the
pure functions of sampling/keyed.py. The engine, every decode strategy and the drafters (in this process
or the drafter process) sample through these, so a token is drawn with the same key wherever it is drawn.

A key is (seed, prompt uid, sample index, position); each sequence hashes its fixed part once
(Sequence.key_prefix), so a step hashes positions only.
"""

from __future__ import annotations

import torch

from tailrl.engine.sampling.hashing import position_hash
from tailrl.engine.sampling.keyed import KeyedSampler
from tailrl.engine.sampling.processing import Flags, host_flags
from tailrl.engine.sequence import Sequence
from tailrl.model import strict as strict_ops


def sample_keys(seqs: list[Sequence], positions: list[int] | None = None, device=None) -> torch.Tensor:
    """(B, 4) int64 sampling keys (seed, uid, sample index, position); positions default to each
    sequence's next index. The key's definition (and the tests' oracle); sampling goes through
    sample_hashes, which hashes the same keys with each sequence's fixed part computed once."""
    pos = positions if positions is not None else [s.num_generated for s in seqs]
    return torch.tensor([[s.request.params.seed, s.request.uid, s.sample_index, p] for s, p in zip(seqs, pos)],
                        dtype=torch.long, device=device)


def sample_hashes(seqs: list[Sequence], positions: list[int] | None = None, device=None) -> torch.Tensor:
    """(B,) int64 hashes of sample_keys(seqs, positions): each sequence's fixed key part is hashed once
    (Sequence.key_prefix), so a step hashes only the positions. uniform_from_hash of these is the uniform
    the inverse-CDF sampler draws (drafters that sample with the target's randomness use it)."""
    pos = positions if positions is not None else [s.num_generated for s in seqs]
    pp = torch.tensor([[s.key_prefix, p] for s, p in zip(seqs, pos)], dtype=torch.long, device=device)
    return position_hash(pp[:, 0], pp[:, 1])


def seq_flags(seqs: list[Sequence]) -> Flags:
    """(any top-k, any top-p, any greedy) of seqs' sampling parameters, read on the host (no device sync)."""
    params = [s.request.params for s in seqs]
    return host_flags([p.temperature for p in params], [p.top_k for p in params], [p.top_p for p in params])


def row_params(seqs: list[Sequence], device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row (temperature (B,), top_k (B,), top_p (B,)) of seqs' sampling parameters, in one transfer."""
    p = torch.tensor([[s.request.params.temperature, s.request.params.top_k, s.request.params.top_p]
                      for s in seqs], dtype=torch.float64, device=device)
    return p[:, 0].float(), p[:, 1].long(), p[:, 2].float()


def pack(tokens: torch.Tensor, logps: torch.Tensor) -> torch.Tensor:
    """tokens (B,) int64, logps (B,) -> (B, 2) float64 on their device: one tensor, so one copy brings both
    to the host (token ids < 2**53 are exact in float64)."""
    return torch.stack([tokens.double(), logps.double()], dim=1)


def unpack(both: torch.Tensor) -> tuple[list[int], list[float]]:
    """(B, 2) float64 on the host (from pack) -> (tokens, logprobs) as lists."""
    return both[:, 0].long().tolist(), both[:, 1].tolist()


def to_host(tokens: torch.Tensor, logps: torch.Tensor) -> tuple[list[int], list[float]]:
    """Keyed samples as host lists, in one device-to-host copy (it waits for the forward)."""
    return unpack(pack(tokens, logps).cpu())


def invariant_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: torch.Tensor,
                       temperatures: set[float]) -> torch.Tensor:
    """Strict mode's logprobs: logits (B, V), tokens (B,), temperature (B,) (its distinct values on the host:
    `temperatures`) -> (B,) the trainer's token_logprobs (one row per program; greedy rows at T = 1, as the
    trainer scores them)."""
    out = torch.zeros(tokens.shape, dtype=torch.float32, device=logits.device)
    for t in sorted(temperatures):
        lp = strict_ops.token_logprobs(logits, tokens, t if t > 0 else 1.0)
        out = torch.where(temperature == t, lp, out)
    return out


def _strict(logits, tokens, temperature, seqs):
    return invariant_logprobs(logits, tokens, temperature, {s.request.params.temperature for s in seqs})


def sample_rows(seqs: list[Sequence], logits: torch.Tensor, positions: list[int] | None, sampler: KeyedSampler,
                strict: bool = False):
    """Keyed samples (tokens (B,), logprobs (B,)) for rows of logits (B, V) with each row's sampling
    parameters (sampler: a SAMPLERS entry): the engine's sampler, shared with drafters that sample in another process. strict: the
    logprobs recomputed as the trainer's invariant forward computes them."""
    dev = logits.device
    temp, top_k, top_p = row_params(seqs, dev)
    tokens, logps = sampler(logits, sample_hashes(seqs, positions, dev), temp, top_k, top_p, seq_flags(seqs))
    return (tokens, _strict(logits, tokens, temp, seqs)) if strict else (tokens, logps)


def sample_windows(seqs: list[Sequence], logits: torch.Tensor, counts: list[int], sampler: KeyedSampler,
                   strict: bool = False):
    """Keyed samples for consecutive positions of each sequence: logits (sum(counts), V) holds counts[i]
    rows for seqs[i] at positions num_generated + 0 .. counts[i] - 1 (a verify window). The same keys and
    parameters as sample_rows over the expanded rows, built with tensor ops instead of per-row lists."""
    dev = logits.device
    c = torch.tensor(counts, device=dev)
    pp = torch.tensor([[s.key_prefix, s.num_generated] for s in seqs], dtype=torch.long,
                      device=dev).repeat_interleave(c, 0)  # (N, 2)
    start = torch.cumsum(c, 0) - c
    pos = pp[:, 1] + torch.arange(pp.shape[0], device=dev) - start.repeat_interleave(c)
    temp, top_k, top_p = (t.repeat_interleave(c, 0) for t in row_params(seqs, dev))
    tokens, logps = sampler(logits, position_hash(pp[:, 0], pos), temp, top_k, top_p, seq_flags(seqs))
    return (tokens, _strict(logits, tokens, temp, seqs)) if strict else (tokens, logps)
