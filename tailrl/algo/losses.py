"""The per-token loss and its aggregation, independent of the micro-batch split.

per-token loss (TRL GRPOTrainer / veRL):  w·pg + β·KL - c·H
with pg a clipped surrogate (POLICY_LOSSES, algo/policy_losses.py: vanilla -min(ρ·A, clip(ρ, 1-ε_low,
1+ε_high)·A), ρ = exp(logp - old_logp); or GSPO's sequence ratio), w the rollout-correction weight
(algo/rollout_correction.py; 1 when off), KL a KL_ESTIMATORS estimate (algo/kl.py; k3 by default, 0 when the
KL is in the reward) and H the token's entropy (entropy bonus c = algo.entropy_coef).

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

from tailrl.algo.kl import KLEstimator, k3
from tailrl.algo.policy_losses import PolicyLoss, vanilla
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
                ref_logp: torch.Tensor | None = None, kl_coef: float = 0.0, *, mask: torch.Tensor | None = None,
                surrogate: PolicyLoss = vanilla, kl: KLEstimator = k3, is_weight: torch.Tensor | None = None,
                entropy: torch.Tensor | None = None, entropy_coef: float = 0.0) -> dict[str, torch.Tensor]:
    """logp/old_logp/ref_logp: (S, T) per-token logprobs of the sampled tokens; adv: (S,); mask: (S, T) real
    tokens (GSPO's per-sequence mean; default all); surrogate: a POLICY_LOSSES entry; kl: a KL_ESTIMATORS
    entry; is_weight: (S, T) rollout-correction weights (no grad); entropy: (S, T) per-token entropy.
    Returns per-token tensors (S, T): loss = is_weight * pg + kl_coef * kl - entropy_coef * entropy, and its
    parts pg_loss (weighted), kl (the estimate whenever ref_logp is given, kl_coef 0 or not), ratio, clipped
    (bool)."""
    out = surrogate(logp, old_logp, adv, torch.ones_like(logp) if mask is None else mask, eps_low, eps_high)
    pg = out["pg_loss"] if is_weight is None else out["pg_loss"] * is_weight
    out["pg_loss"] = loss = pg
    out["kl"] = kl(logp, ref_logp) if ref_logp is not None else torch.zeros_like(pg)  # logged even when not in the loss
    if ref_logp is not None and kl_coef != 0.0:
        loss = loss + kl_coef * out["kl"]
    if entropy is not None and entropy_coef != 0.0:
        loss = loss - entropy_coef * entropy
    out["loss"] = loss
    return out
