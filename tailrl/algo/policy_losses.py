"""Clipped policy-gradient surrogates per token (registry POLICY_LOSSES), before the KL term, the entropy bonus
and the rollout-correction weight (algo/losses.py composes them) and before aggregation.

- vanilla (PPO / GRPO, TRL GRPOTrainer and veRL "vanilla" without dual-clip):
      -min(r_t A, clip(r_t, 1 - eps_low, 1 + eps_high) A),   r_t = exp(logp_t - old_t)
- gspo (GSPO, arXiv 2507.18071; veRL `compute_policy_loss_gspo`): one importance ratio per sequence,
      s = exp(mean_t (logp_t - old_t)) over the sequence's tokens,
  clipped as a whole; per token the ratio is s_t = sg[s] * exp(logp_t - sg[logp_t]) (value s, gradient
  s * grad logp_t), log s_t clamped at 10 as veRL, then the same -min(s_t A, clip(s_t) A). The paper's clip
  range is tiny (eps 3e-4 / 4e-4, the gspo preset) because s is a geometric mean over the tokens.
"""

from __future__ import annotations

from typing import Protocol

import torch

from tailrl.registry import Registry


class PolicyLoss(Protocol):
    def __call__(self, logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                 eps_low: float, eps_high: float) -> dict[str, torch.Tensor]:
        """logp (grad), old_logp: (S, T) sampled tokens' logprobs; adv: (S,); mask: (S, T) real tokens.
        -> per-token (S, T): pg_loss, ratio (the ratio the clip acts on), clipped (bool: clip active)."""


POLICY_LOSSES: Registry[PolicyLoss] = Registry("algo.policy_loss")


def clipped_surrogate(ratio: torch.Tensor, adv: torch.Tensor, eps_low: float,
                      eps_high: float) -> dict[str, torch.Tensor]:
    """ratio: (S, T); adv: (S,) -> pg_loss, ratio, clipped (S, T): -min(r A, clip(r) A) and where clipping
    took the gradient away (r below 1 - eps_low with A < 0, or above 1 + eps_high with A > 0)."""
    a = adv.unsqueeze(-1)  # (S, 1)
    pg = -torch.min(ratio * a, ratio.clamp(1 - eps_low, 1 + eps_high) * a)
    clipped = ((ratio < 1 - eps_low) & (a < 0)) | ((ratio > 1 + eps_high) & (a > 0))
    return {"pg_loss": pg, "ratio": ratio, "clipped": clipped}


@POLICY_LOSSES.register("vanilla")
def vanilla(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
            eps_low: float, eps_high: float) -> dict[str, torch.Tensor]:
    return clipped_surrogate(torch.exp(logp - old_logp), adv, eps_low, eps_high)


@POLICY_LOSSES.register("gspo")
def gspo(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
         eps_low: float, eps_high: float) -> dict[str, torch.Tensor]:
    m = mask.to(logp.dtype)
    seq_log_ratio = ((logp - old_logp) * m).sum(-1) / m.sum(-1).clamp(min=1)  # (S,) log s
    log_ratio = logp - logp.detach() + seq_log_ratio.detach().unsqueeze(-1)  # (S, T): value log s, grad of logp_t
    return clipped_surrogate(torch.exp(log_ratio.clamp(max=10.0)), adv, eps_low, eps_high)
