"""The Drafter protocol and its registry: drafters propose up to k next tokens per sequence. Proposals never
change the output (verification is exact); they only decide how many tokens one target forward can confirm.

DRAFTERS maps a name to a factory(engine, spec_config) -> Drafter; `drafter_names` says which drafters an
engine.spec.method uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tailrl.engine.sequence import Sequence
from tailrl.registry import Registry


class Drafter(Protocol):
    name: str

    def propose(self, seqs: list[Sequence], ks: list[int], draws: list[list[Callable]] | None = None
                ) -> list[list[int]]:
        """Batched: one proposal (<= ks[i] tokens) per seq; draws[i][j] is how the target draws seq i's j-th
        drafted position from a small distribution (counts -> token, at that position's key; None: greedy
        decoding), for drafters that sample from counts."""

    def release(self, seq: Sequence) -> None:
        """seq finished or failed: drop its state."""

    def end_rollout(self) -> None:
        """generate() finished: keep only what outlives a rollout."""


class DrafterFactory(Protocol):
    def __call__(self, engine, cfg) -> Drafter: ...


DRAFTERS: Registry[DrafterFactory] = Registry("drafter")


def drafter_names(cfg) -> list[str]:
    """The drafters engine.spec.method uses (the first is the default primary); cfg: SpecConfig."""
    if cfg.method == "none":
        return []
    if cfg.method == "auto":
        return ["history", "ngram"] + (["draft"] if cfg.draft_model else [])
    return [cfg.method]
