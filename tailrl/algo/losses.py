"""Clipped policy-gradient loss per token and its aggregation, independent of the micro-batch split.

per-token loss (TRL GRPOTrainer / veRL):  -min(ρ·A, clip(ρ, 1-ε_low, 1+ε_high)·A) + β·KL_k3
with ρ = exp(logp - old_logp) and KL_k3 = exp(ref - logp) - (ref - logp) - 1.

Aggregation (AGGREGATIONS) is explicit. Each mode is a sum over micro-batches of terms normalised by
whole-batch constants (`AggNorm`), so splitting a batch differently never changes loss or gradient:
- token-mean                (TRL loss_type="dapo"):    Σ l·m / Σ m
- seq-mean-token-mean       (TRL loss_type="grpo"):    (1/S) Σ_s (Σ_t l·m / Σ_t m)
- seq-mean-token-sum-norm   (TRL loss_type="dr_grpo"): Σ l·m / (S · max_len)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from tailrl.registry import Registry


@dataclass(frozen=True)
class AggNorm:
    """Whole-batch normalisers, computed once before micro-batching."""

    num_seqs: int
    num_tokens: int
    max_len: int  # the completion length budget (Dr.GRPO's constant)

    @classmethod
    def of(cls, mask: torch.Tensor, max_len: int) -> AggNorm:
        """mask: (S, T) of the whole batch."""
        return cls(int(mask.shape[0]), int(mask.sum()), max_len)


class Aggregation(Protocol):
    def __call__(self, loss: torch.Tensor, mask: torch.Tensor, norm: AggNorm) -> torch.Tensor:
        """loss, mask: (S_mb, T) -> this micro-batch's scalar share of the batch loss."""


AGGREGATIONS: Registry[Aggregation] = Registry("algo.loss_agg")


@AGGREGATIONS.register("token-mean")
def _token_mean(loss: torch.Tensor, mask: torch.Tensor, n: AggNorm) -> torch.Tensor:
    return (loss * mask).sum() / max(n.num_tokens, 1)


@AGGREGATIONS.register("seq-mean-token-mean")
def _seq_mean_token_mean(loss: torch.Tensor, mask: torch.Tensor, n: AggNorm) -> torch.Tensor:
    per_seq = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # (S_mb,)
    return per_seq.sum() / max(n.num_seqs, 1)


@AGGREGATIONS.register("seq-mean-token-sum-norm")
def _seq_mean_token_sum_norm(loss: torch.Tensor, mask: torch.Tensor, n: AggNorm) -> torch.Tensor:
    return (loss * mask).sum() / max(n.num_seqs * n.max_len, 1)


def aggregate(loss: torch.Tensor, mask: torch.Tensor, mode: str, norm: AggNorm) -> torch.Tensor:
    """loss, mask: (S_mb, T) -> scalar contribution of this micro-batch to the batch loss."""
    return AGGREGATIONS[mode](loss, mask.to(loss.dtype), norm)


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float,
                ref_logp: torch.Tensor | None = None, kl_coef: float = 0.0) -> dict[str, torch.Tensor]:
    """logp/old_logp/ref_logp: (S, T) per-token logprobs of the sampled tokens; adv: (S,).
    Returns per-token tensors (S, T): loss, pg_loss, kl, ratio, clipped (bool: clipping active)."""
    a = adv.unsqueeze(-1)  # (S, 1)
    ratio = torch.exp(logp - old_logp)
    clipped_ratio = ratio.clamp(1 - eps_low, 1 + eps_high)
    pg = -torch.min(ratio * a, clipped_ratio * a)
    clipped = ((ratio < 1 - eps_low) & (a < 0)) | ((ratio > 1 + eps_high) & (a > 0))
    out = {"pg_loss": pg, "ratio": ratio, "clipped": clipped}
    if ref_logp is not None and kl_coef != 0.0:
        d = ref_logp - logp
        kl = torch.exp(d) - d - 1
        out["kl"] = kl
        out["loss"] = pg + kl_coef * kl
    else:
        out["kl"] = torch.zeros_like(pg)
        out["loss"] = pg
    return out
