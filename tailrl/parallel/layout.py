"""A TP x DP layout over `world` ranks: TP groups are consecutive ranks (they share a node), DP
replicas are the groups. `Layout(tp=2, world=4)` -> groups (0, 1), (2, 3)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    tp: int
    world: int

    def __post_init__(self):
        if self.tp < 1 or self.world % self.tp:
            raise ValueError(f"TP={self.tp} must divide the world size {self.world}")

    @property
    def dp(self) -> int:
        return self.world // self.tp

    def tp_groups(self) -> list[tuple[int, ...]]:
        return [tuple(range(i * self.tp, (i + 1) * self.tp)) for i in range(self.dp)]

    def group_of(self, rank: int) -> tuple[int, ...]:
        return self.tp_groups()[rank // self.tp]

    def replica_of(self, rank: int) -> int:
        return rank // self.tp

    def __str__(self) -> str:
        return f"TP{self.tp}/DP{self.dp}"


def splits(args, tp: int) -> bool:
    """Whether a model (its ModelArgs) can be split over `tp` TP ranks: query heads, KV heads and MLP width
    all divide by it (the vocabulary need not: vocab shards are padded)."""
    return not (args.num_heads % tp or args.num_kv_heads % tp or args.intermediate_size % tp)
