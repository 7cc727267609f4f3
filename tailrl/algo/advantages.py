"""Outcome advantages per group (registry ADVANTAGES), pure functions of scores and group ids.

- grpo: (r - mean_g) / (std_g + eps), std unbiased — veRL's `compute_grpo_outcome_advantage`
  (a group of one gets mean 0, std 1, as in veRL);
- drgrpo: r - mean_g (Dr.GRPO: no std normalisation).
"""

from __future__ import annotations

from typing import Protocol

import torch

from tailrl.registry import Registry


class AdvantageFn(Protocol):
    def __call__(self, scores: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
        """scores (N,) float, groups (N,) int ids -> (N,) float32 advantages."""


ADVANTAGES: Registry[AdvantageFn] = Registry("algo.advantage")


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


@ADVANTAGES.register("grpo")
def grpo(scores: torch.Tensor, groups: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """(N,), (N,) -> (N,) float32 advantages."""
    mean, std, cnt = group_stats(scores, groups)
    single = cnt < 2
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    return ((scores.double() - mean) / (std + eps)).float()


@ADVANTAGES.register("drgrpo")
def drgrpo(scores: torch.Tensor, groups: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """(N,), (N,) -> (N,) float32: r - group mean."""
    mean, _, cnt = group_stats(scores, groups)
    mean = torch.where(cnt < 2, torch.zeros_like(mean), mean)
    return (scores.double() - mean).float()

