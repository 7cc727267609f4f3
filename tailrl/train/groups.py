"""Group: one prompt's rollouts with their texts and rewards — what flows from the rollout phase through
shaping (train/shaping.py) into the update. No loose dicts cross into the update."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from tailrl.engine import Rollout


@dataclass
class Group:
    example: object  # tailrl.data.datasets.Example
    prompt_ids: list[int]
    rollouts: list[Rollout]
    texts: list[str]
    scores: list[float]  # final reward per rollout (incl. the overlong penalty when shaping applies one)
    components: dict[str, list[float]]
    full: Group | None = None  # the whole generated group when this one is a PODS subset

    @property
    def lengths(self) -> list[int]:
        return [r.num_tokens for r in self.rollouts]

    @property
    def score_std(self) -> float:
        return statistics.pstdev(self.scores) if len(self.scores) > 1 else 0.0


def subset(group: Group, idx: list[int]) -> Group:
    """The group restricted to rollouts idx (PODS); the full group stays in `.full` for metrics."""
    g = Group(group.example, group.prompt_ids, [group.rollouts[i] for i in idx], [group.texts[i] for i in idx],
              [group.scores[i] for i in idx], {k: [v[i] for i in idx] for k, v in group.components.items()})
    g.full = group.full if group.full is not None else group
    return g


def reward_text(tokenizer, rollout: Rollout) -> str:
    """What the reward functions read of a rollout: its final turn's text (after the last observation of a
    multi-turn rollout; the whole completion otherwise)."""
    return tokenizer.decode(rollout.final_turn_ids, skip_special_tokens=True)
