"""Outcome advantages per group (registry ADVANTAGES), pure functions of scores, group ids and lengths.

One scalar reward per rollout; every estimator returns one advantage per rollout, the same for all of its
tokens (with outcome rewards and gamma = 1 veRL's token-level estimators are constant along a sequence too).

- grpo: (r - mean_g) / (std_g + eps), std unbiased — veRL's `compute_grpo_outcome_advantage`
  (a group of one gets mean 0, std 1, as in veRL);
- drgrpo: r - mean_g (Dr.GRPO: no std normalisation);
- rloo: r - mean of the other n - 1 rewards of the group = n/(n-1) (r - mean_g) — veRL's
  `compute_rloo_outcome_advantage` (a group of one keeps r);
- reinforce_pp: REINFORCE++ (arXiv 2501.03262), veRL's `compute_reinforce_plus_plus_outcome_advantage` at
  gamma = 1: the return (r on every token) whitened over all tokens of the batch;
- reinforce_pp_baseline: REINFORCE++-baseline, veRL's `compute_reinforce_plus_plus_baseline_outcome_advantage`:
  r - mean_g (a group of one: mean 0), then whitened over all tokens of the batch.

Whitening is veRL's `masked_whiten` over tokens: a rollout of L tokens weighs L in the batch mean and the
unbiased variance, (x - mean) / sqrt(var + 1e-8); that is what `lengths` is for.
"""

from __future__ import annotations

from typing import Protocol

import torch

from tailrl.registry import Registry


class AdvantageFn(Protocol):
    def __call__(self, scores: torch.Tensor, groups: torch.Tensor,
                 lengths: torch.Tensor | None = None) -> torch.Tensor:
        """scores (N,) float, groups (N,) int ids, lengths (N,) completion tokens (needed by the estimators that
        whiten over tokens) -> (N,) float32 advantages."""


ADVANTAGES: Registry[AdvantageFn] = Registry("algo.advantage")

WHITEN_EPS = 1e-8  # veRL's masked_whiten: (x - mean) * rsqrt(var + 1e-8)


def group_stats(scores: torch.Tensor, groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """scores: (N,) float; groups: (N,) int ids. Returns per-item (mean, unbiased std, count), each (N,)."""
    _, inv = torch.unique(groups, return_inverse=True)
    k = int(inv.max()) + 1 if inv.numel() else 0
    s = scores.double()
    cnt = torch.zeros(k, dtype=torch.float64).scatter_add_(0, inv, torch.ones_like(s))
    mean = torch.zeros(k, dtype=torch.float64).scatter_add_(0, inv, s) / cnt
    dev2 = torch.zeros(k, dtype=torch.float64).scatter_add_(0, inv, (s - mean[inv]) ** 2)
    std = torch.sqrt(dev2 / (cnt - 1).clamp(min=1))
    return mean[inv], std[inv], cnt[inv]


def _centred(scores: torch.Tensor, groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(N,), (N,) -> (r - mean_g with mean 0 for a group of one, unbiased std_g, count_g), each (N,) float64."""
    mean, std, cnt = group_stats(scores, groups)
    mean = torch.where(cnt < 2, torch.zeros_like(mean), mean)
    return scores.double() - mean, std, cnt


def token_whiten(values: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
    """values: (N,) one value per rollout, repeated on its lengths (N,) tokens -> (N,) float64 whitened over the
    batch's tokens: (v - mean) / sqrt(var + 1e-8), mean and unbiased var weighted by length (veRL's
    masked_whiten of the (N, T) tiled values; rollouts with no token weigh nothing)."""
    if lengths is None:
        raise ValueError("this advantage estimator whitens over tokens: pass lengths (N,) completion tokens")
    v, w = values.double(), lengths.double()
    n = w.sum()
    mean = (w * v).sum() / n.clamp(min=1)
    var = (w * (v - mean) ** 2).sum() / (n - 1).clamp(min=1)  # Bessel over tokens, as masked_var
    return (v - mean) / torch.sqrt(var + WHITEN_EPS)


@ADVANTAGES.register("grpo")
def grpo(scores: torch.Tensor, groups: torch.Tensor, lengths: torch.Tensor | None = None,
         eps: float = 1e-6) -> torch.Tensor:
    """(N,), (N,) -> (N,) float32 advantages."""
    centred, std, cnt = _centred(scores, groups)
    std = torch.where(cnt < 2, torch.ones_like(std), std)
    return (centred / (std + eps)).float()


@ADVANTAGES.register("drgrpo")
def drgrpo(scores: torch.Tensor, groups: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """(N,), (N,) -> (N,) float32: r - group mean."""
    return _centred(scores, groups)[0].float()


@ADVANTAGES.register("rloo")
def rloo(scores: torch.Tensor, groups: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """(N,), (N,) -> (N,) float32: r minus the mean of the group's other rewards (r itself in a group of one)."""
    centred, _, cnt = _centred(scores, groups)
    return (centred * torch.where(cnt < 2, torch.ones_like(cnt), cnt / (cnt - 1))).float()


@ADVANTAGES.register("reinforce_pp")
def reinforce_pp(scores: torch.Tensor, groups: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """(N,), (N,), lengths (N,) -> (N,) float32: the return r whitened over the batch's tokens (no group
    baseline: groups are not used)."""
    return token_whiten(scores, lengths).float()


@ADVANTAGES.register("reinforce_pp_baseline")
def reinforce_pp_baseline(scores: torch.Tensor, groups: torch.Tensor,
                          lengths: torch.Tensor | None = None) -> torch.Tensor:
    """(N,), (N,), lengths (N,) -> (N,) float32: r - group mean, whitened over the batch's tokens."""
    return token_whiten(_centred(scores, groups)[0], lengths).float()
