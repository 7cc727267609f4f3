"""The shaping stage: between rewards and advantages, what the update trains on.

    generate + score -> Shaper(groups) -> kept groups -> advantages -> update

Steps run in order over one generation round's groups; each has its own metrics:

    overlong   DAPO soft overlong penalty: rewards of responses in the last `buffer` tokens of the budget
               ramp down to -penalty (scores change, the group stays)
    pods       PODS down-sampling: n generated -> the m kept by a rule (max_variance, ...), the full group
               kept in `.full` for metrics
    dapo       DAPO dynamic sampling: groups whose (kept) rewards have zero std are dropped; the rollout
               worker refills with new prompts while this step drops groups (`refills`)

A step is present only when configured (GRPO: none), so no stage branches on settings in the step loop.
"""

from __future__ import annotations

import statistics
from typing import Protocol

import torch

from tailrl.algo.downsample import DOWNSAMPLE, pods_m
from tailrl.algo.overlong import overlong_penalty
from tailrl.config import AlgoConfig
from tailrl.train.groups import Group, subset


class ShapingStep(Protocol):
    refills: bool  # dropping groups asks the rollout worker for new prompts

    def begin_step(self, group_size: int) -> None:
        """A training step starts with this G (the controller's choice)."""

    def apply(self, groups: list[Group]) -> list[Group]:
        """One generation round's groups -> the groups passed on (changed, subsets or fewer)."""

    def metrics(self, kept: list[Group]) -> dict[str, float]:
        """This step's metrics for the training step, given the groups finally kept."""


class OverlongPenalty:
    refills = False

    def __init__(self, max_new_tokens: int, buffer: int, penalty: float):
        self.max_new_tokens, self.buffer, self.penalty = max_new_tokens, buffer, penalty
        self.seen = self.penalized = 0
        self.total = 0.0

    def begin_step(self, group_size: int) -> None:
        self.seen = self.penalized = 0
        self.total = 0.0

    def apply(self, groups: list[Group]) -> list[Group]:
        for g in groups:  # in place: the generated groups' logged rewards include the penalty
            for i, r in enumerate(g.rollouts):
                p = overlong_penalty(r.num_model_tokens, self.max_new_tokens, self.buffer, self.penalty)  # no observations
                g.scores[i] += p
                self.seen += 1
                self.penalized += p < 0
                self.total += p
        return groups

    def metrics(self, kept: list[Group]) -> dict[str, float]:
        return {"shaping/overlong_frac": self.penalized / self.seen if self.seen else 0.0,
                "shaping/overlong_penalty_mean": self.total / self.seen if self.seen else 0.0}


class PodsSelect:
    refills = False

    def __init__(self, ds, seed: int):
        """ds: the algo.downsample section; seed: the rollout seed (random subsets are reproducible)."""
        self.ds, self.seed = ds, seed
        self.rule = DOWNSAMPLE.get(ds.rule)
        self.n = self.m = 0

    def begin_step(self, group_size: int) -> None:
        self.n, self.m = group_size, pods_m(self.ds, group_size)

    def apply(self, groups: list[Group]) -> list[Group]:
        out = []
        for g in groups:
            idx = self.rule(torch.tensor(g.scores, dtype=torch.float64), self.m, self.seed * 1_000_003 + g.rollouts[0].uid)
            out.append(subset(g, idx.tolist()))
        return out

    def metrics(self, kept: list[Group]) -> dict[str, float]:
        """pods/n, pods/m, variance kept / variance of the whole group, share of completion tokens trained."""
        ratios = []
        for g in kept:
            full = g.full if g.full is not None else g
            v_all = statistics.pvariance(full.scores) if len(full.scores) > 1 else 0.0
            if v_all > 0:
                ratios.append((statistics.pvariance(g.scores) if len(g.scores) > 1 else 0.0) / v_all)
        kept_tokens = sum(sum(g.lengths) for g in kept)
        all_tokens = sum(sum((g.full or g).lengths) for g in kept)
        return {"pods/n": float(self.n), "pods/m": float(self.m),
                "pods/var_kept_over_var_all": statistics.mean(ratios) if ratios else 0.0,
                "pods/kept_token_frac": kept_tokens / all_tokens if all_tokens else 0.0}


class ZeroVarianceFilter:
    refills = True

    def __init__(self):
        self.rounds = self.dropped = 0

    def begin_step(self, group_size: int) -> None:
        self.rounds = self.dropped = 0

    def apply(self, groups: list[Group]) -> list[Group]:
        self.rounds += 1
        kept = [g for g in groups if g.score_std > 0]
        self.dropped += len(groups) - len(kept)
        return kept

    def metrics(self, kept: list[Group]) -> dict[str, float]:
        return {"dapo/refill_rounds": float(max(0, self.rounds - 1)), "dapo/dropped_groups": float(self.dropped),
                "dapo/kept_groups": float(len(kept))}


class Shaper:
    """The configured steps in order (overlong, pods, dapo)."""

    def __init__(self, steps: list[ShapingStep]):
        self.steps = steps
        self.refills = any(s.refills for s in steps)

    @classmethod
    def from_config(cls, algo: AlgoConfig, max_new_tokens: int, seed: int) -> Shaper:
        """algo: the resolved algo section (presets applied, train/recipe.py)."""
        steps: list[ShapingStep] = []
        if algo.overlong_buffer:
            steps.append(OverlongPenalty(max_new_tokens, algo.overlong_buffer, algo.overlong_penalty))
        if algo.downsample.rule != "none":
            steps.append(PodsSelect(algo.downsample, seed))
        if algo.dynamic_sampling:
            steps.append(ZeroVarianceFilter())
        return cls(steps)

    def begin_step(self, group_size: int) -> None:
        for s in self.steps:
            s.begin_step(group_size)

    def __call__(self, groups: list[Group]) -> list[Group]:
        for s in self.steps:
            groups = s.apply(groups)
        return groups

    def metrics(self, kept: list[Group]) -> dict[str, float]:
        out: dict[str, float] = {}
        for s in self.steps:
            out |= s.metrics(kept)
        return out

    def step_of(self, kind: type) -> ShapingStep | None:
        return next((s for s in self.steps if isinstance(s, kind)), None)
