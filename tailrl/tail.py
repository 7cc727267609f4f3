"""The tail vocabulary, defined once: what a straggler is and how a rollout's tail is measured.

Everything that speaks of stragglers imports it: the engine's trace (per-rollout metrics), the group-size
controllers (SAGC's constraint), the trainer's logging and the simulator. Pure Python, no torch.

- `len_max_over_median` of one group's response lengths; a straggler event is ratio > tau, with
  DEFAULT_TAU = 1.25 (SAGC's definition, and `rollout.straggler_tau`'s default);
- `straggler_rate`: the share of groups (of >= 2 responses) that straggle;
- `tail_efficiency` = (batch-1 decode time of the longest response) / (actual rollout time): the
  straggler bound a synchronous step cannot beat without speculation.
"""

from __future__ import annotations

import statistics

DEFAULT_TAU = 1.25


def len_max_over_median(lengths: list[int]) -> float:
    """max / median of one group's response lengths (median of >= 1 token)."""
    return max(lengths) / max(statistics.median(lengths), 1.0)


def group_ratios(groups: list[list[int]]) -> list[float]:
    """len_max_over_median of each group with >= 2 responses (a lone response has no tail)."""
    return [len_max_over_median(g) for g in groups if len(g) >= 2]


def straggler_event(lengths: list[int], tau: float = DEFAULT_TAU) -> bool:
    """A group straggles when its longest response exceeds tau x its median (SAGC's definition)."""
    return len_max_over_median(lengths) > tau


def straggler_rate(groups: list[list[int]], tau: float = DEFAULT_TAU) -> float:
    """Share of the groups with >= 2 responses whose lengths straggle (0 when there are none)."""
    rated = [g for g in groups if len(g) >= 2]
    return sum(straggler_event(g, tau) for g in rated) / len(rated) if rated else 0.0


def tail_efficiency(longest: int, b1_step_s: float | None, rollout_s: float) -> float:
    """(batch-1 decode time of the longest response) / (rollout time); 0 when not measurable."""
    if b1_step_s is None or longest <= 0 or rollout_s <= 0:
        return 0.0
    return longest * b1_step_s / rollout_s
