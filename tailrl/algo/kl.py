"""Per-token KL estimators of KL(pi || pi_ref) from the sampled tokens' logprobs (registry KL_ESTIMATORS), and
the KL as a reward penalty. J. Schulman, "Approximating KL divergence" (2020); veRL's `kl_penalty`, whose
names are given in brackets; d = logp - ref_logp:

- k1 ("kl"):          d                          unbiased, high variance, can be negative
- k2 ("mse"):         d² / 2                     biased, low variance; its gradient is KL's gradient
- k3 ("low_var_kl"):  exp(-d) + d - 1            unbiased, low variance, >= 0; as veRL, -d clamped to
                                                 [-20, 20] and the estimate to [-10, 10] (today's default)
- abs ("abs"):        |d|

Where the KL goes is the caller's choice (algo.kl_in_reward): added to the loss as beta * estimate per token
(veRL use_kl_loss, TRL beta), or subtracted from the reward as beta * sum over the tokens of the estimate
under the pre-update policy (veRL use_kl_in_reward: its outcome estimators sum the token rewards).
"""

from __future__ import annotations

from typing import Protocol

import torch

from tailrl.registry import Registry


class KLEstimator(Protocol):
    def __call__(self, logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
        """logp, ref_logp: (S, T) logprobs of the sampled tokens -> (S, T) per-token estimates."""


KL_ESTIMATORS: Registry[KLEstimator] = Registry("algo.kl_estimator")


@KL_ESTIMATORS.register("k1")
def k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return logp - ref_logp


@KL_ESTIMATORS.register("k2")
def k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return 0.5 * (logp - ref_logp).square()


@KL_ESTIMATORS.register("k3")
def k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    d = (ref_logp - logp).clamp(-20.0, 20.0)
    return (torch.exp(d) - d - 1).clamp(-10.0, 10.0)


@KL_ESTIMATORS.register("abs")
def kl_abs(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return (logp - ref_logp).abs()


def sequence_kl(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, estimator: str) -> torch.Tensor:
    """logp, ref_logp, mask: (S, T) -> (S,) float64 sum over each sequence's tokens of the estimate (the KL
    reward penalty before its coefficient)."""
    return (KL_ESTIMATORS.get(estimator)(logp.double(), ref_logp.double()) * mask.double()).sum(-1)
