"""PODS down-sampling rules (registry DOWNSAMPLE): from a group's n rewards, the m rollouts to train on.

- max_variance: the size-m subset with maximal reward variance. By PODS Lemma 3.1 it is the k
  highest ∪ the (m - k) lowest rewards for some k, so one sort plus prefix sums of r and r² score
  every k in O(1): O(n log n) overall. Binary rewards take Theorem 2's shortcut (m/2 highest ∪ m/2
  lowest). Ties are broken deterministically: a stable sort by (reward, index) and the smallest
  optimal k.
- max_reward: the m highest rewards (stable by index).
- random: m uniformly at random, seeded per call (reproducible).

Each rule returns kept indices in increasing order, (m,) int64.
"""

from __future__ import annotations

from typing import Protocol

import torch

from tailrl.errors import UserError
from tailrl.registry import Registry


class DownsampleRule(Protocol):
    def __call__(self, rewards: torch.Tensor, m: int, seed: int = 0) -> torch.Tensor:
        """rewards (n,) -> (m,) int64 kept indices, increasing."""


DOWNSAMPLE: Registry[DownsampleRule] = Registry("algo.downsample.rule")


def rule_choices() -> tuple[str, ...]:
    """The valid algo.downsample.rule names: none (no down-sampling) and every registered rule."""
    return ("none", *DOWNSAMPLE)


def _sorted_order(rewards: torch.Tensor) -> torch.Tensor:
    """Indices sorting rewards ascending; equal rewards keep index order."""
    return torch.sort(rewards.double(), stable=True).indices


@DOWNSAMPLE.register("max_variance")
def max_variance(rewards: torch.Tensor, m: int, seed: int = 0) -> torch.Tensor:
    """rewards: (n,) -> (m,) indices of a maximal-variance subset."""
    n = rewards.numel()
    if m >= n:
        return torch.arange(n)
    order = _sorted_order(rewards)
    r = rewards.double()[order]  # ascending
    if bool(((r == r[0]) | (r == r[-1])).all()):  # two values (e.g. binary): Theorem 2
        return max_variance_binary(rewards, m)
    zero = torch.zeros(1, dtype=torch.float64)
    p1 = torch.cat([zero, r.cumsum(0)])  # p1[j] = sum of the j lowest
    p2 = torch.cat([zero, (r * r).cumsum(0)])
    k = torch.arange(m + 1)  # k highest + (m - k) lowest
    s1 = p1[m - k] + (p1[n] - p1[n - k])
    s2 = p2[m - k] + (p2[n] - p2[n - k])
    var = s2 / m - (s1 / m) ** 2  # (m + 1,)
    best = int(torch.argmax(var))  # first maximum: the smallest optimal k
    keep = torch.cat([order[: m - best], order[n - best:]])
    return keep.sort().values


def max_variance_binary(rewards: torch.Tensor, m: int) -> torch.Tensor:
    """Two reward values: as close to m/2 of each as the counts allow (PODS Theorem 2)."""
    n = rewards.numel()
    order = _sorted_order(rewards)
    r = rewards.double()[order]
    high = int((r == r[-1]).sum()) if r[-1] != r[0] else 0
    k = min(high, max(m - (n - high), (m + 1) // 2)) if high else 0  # number of high rewards kept
    keep = torch.cat([order[: m - k], order[n - k:]])
    return keep.sort().values


@DOWNSAMPLE.register("max_reward")
def max_reward(rewards: torch.Tensor, m: int, seed: int = 0) -> torch.Tensor:
    n = rewards.numel()
    order = torch.sort(-rewards.double(), stable=True).indices
    return order[: min(m, n)].sort().values


@DOWNSAMPLE.register("random")
def random_subset(rewards: torch.Tensor, m: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(rewards.numel(), generator=g)[: m].sort().values


def pods_m(ds, group_size: int) -> int | None:
    """Rollouts trained per prompt for this step's G (None: no down-sampling). Raises on bad config."""

    if ds.rule == "none":
        return None
    n = ds.n or group_size
    if n != group_size:
        raise UserError(f"algo.downsample.n ({ds.n}) must match the group size G ({group_size}); leave it 0 to follow G")
    if ds.m:
        m = ds.m
    elif ds.ratio:
        if ds.ratio < 1:
            raise UserError(f"algo.downsample.ratio must be >= 1 (n / m), got {ds.ratio}")
        m = max(1, int(round(n / ds.ratio)))
    else:
        raise UserError("algo.downsample needs m or ratio")
    if m > n:
        raise UserError(f"algo.downsample.m ({m}) must be <= n ({n})")
    if ds.rule == "max_variance" and m < 2:
        raise UserError(f"max_variance down-sampling needs m >= 2 (got m = {m})")
    return m
