"""Logit processing shared by the samplers: temperature, top-k / top-p by sorting (the reference the
`inverse_cdf` and `gumbel` samplers use; `blocked` cuts by a radix select instead), and the sampling flags
(any top-k, any top-p, any greedy row) that let a sampler skip work without reading tensors back.
"""

from __future__ import annotations

import torch

Flags = tuple[bool, bool, bool]


def read_flags(temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> Flags:
    """(any row uses top-k, any uses top-p, any is greedy), read with a single host sync."""
    need_k, need_p, greedy = torch.stack([(top_k > 0).any(), (top_p < 1.0).any(), (temperature <= 0).any()]).tolist()
    return need_k, need_p, greedy


def host_flags(temperature: list[float], top_k: list[int], top_p: list[float]) -> Flags:
    """The `flags` argument of the samplers from host-side sampling parameters (no device sync)."""
    return any(k > 0 for k in top_k), any(p < 1.0 for p in top_p), any(t <= 0 for t in temperature)


def scaled(logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """(B, V) float32 logits / T (greedy rows, T = 0, are left unscaled)."""
    t = torch.where(temperature > 0, temperature, torch.ones_like(temperature)).float()
    return logits.float() / t.unsqueeze(-1)


def filtered(x: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, need_k: bool, need_p: bool) -> torch.Tensor:
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
    need_k, need_p, _ = read_flags(temperature, top_k, top_p)
    return filtered(scaled(logits, temperature), top_k, top_p, need_k, need_p).log_softmax(-1)
