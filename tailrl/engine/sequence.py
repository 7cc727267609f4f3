"""Per-sample state the scheduler tracks (bookkeeping only; no tensors)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tailrl.engine.request import Request
from tailrl.engine.sampling.hashing import prefix_hash


@dataclass(eq=False)
class Sequence:
    seq_id: int
    request: Request
    sample_index: int
    max_new_tokens: int
    tokens: list[int]  # prompt + generated
    num_prompt: int
    num_cached: int = 0  # tokens whose K/V is in the cache; the forward processes tokens[num_cached:]
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    t_start: float = 0.0
    t_finish: float = 0.0
    admitted_at: int = -1  # admission counter: preemption takes the newest first
    group_parent: Sequence | None = None  # sibling whose prompt KV this one forks instead of prefilling
    token_mask: list[int] | None = None  # per generated token: 1 sampled, 0 an observation (multi-turn only)
    turns: int = 0  # observations appended (engine/turns.py)
    waits: list[tuple[float, float]] = field(default_factory=list)  # (parked, resumed) times per observation
    _key_prefix: int | None = field(default=None, repr=False)

    @property
    def key_prefix(self) -> int:
        """prefix_hash of this sample's key (seed, uid, sample index), computed once."""
        if self._key_prefix is None:
            self._key_prefix = prefix_hash(self.request.params.seed, self.request.uid, self.sample_index)
        return self._key_prefix

    @property
    def num_generated(self) -> int:
        return len(self.tokens) - self.num_prompt

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.num_prompt:]

    @property
    def pending(self) -> int:
        """Tokens the next forward must process."""
        return len(self.tokens) - self.num_cached
