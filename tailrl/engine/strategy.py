"""The decode interface: how a decode step is taken, as one Protocol every strategy implements.

The engine owns intake, prefill, the KV cache, sampling and results; a DecodeStrategy decides only how
the running sequences advance by one decode step. Three implement it:

    PlainDecode                      one forward, one keyed sample per sequence (engine.decode_step)
    spec.coupled.Speculator          drafts in this process, verified exactly in one forward
    spec.decoupled.DecoupledSpeculator  a drafter process drafting ahead, verified in lockstep rounds

A strategy is built once per engine with the engine it serves and talks to it only through the
engine's public decode API: `now()`, `forward(seqs, tokens, ...)`, `sample(...)`,
`sample_windows(...)`, `decode_step(ready)`, `commit(seq, num_cached, tokens, logprobs)`,
`record(kind, t0, batch, tokens, emitted)` and the KV cache's bookkeeping (`engine.cache`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # type names only: the engine imports this module
    from tailrl.engine.engine import Engine
    from tailrl.engine.sequence import Sequence


class DecodeStrategy(Protocol):
    def decode(self, ready: list[Sequence]) -> None:
        """Advance every sequence in `ready` (blocks for its pending tokens ensured) by >= 1 token,
        through engine.commit / engine.decode_step; finished sequences leave the engine there."""

    def release(self, seq: Sequence) -> None:
        """`seq` finished or left the engine: drop what the strategy keeps for it."""

    def begin_rollout(self) -> None:
        """A generate() call starts: reset per-rollout counters."""

    def end_rollout(self) -> None:
        """A generate() call ended (counters were read with metrics())."""

    def metrics(self) -> dict[str, float]:
        """This rollout's strategy metrics (spec/...; empty for plain decoding)."""

    def close(self) -> None:
        """Release what outlives memory (a drafter process)."""


class PlainDecode:
    """One forward over the running sequences and one keyed sample each."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def decode(self, ready: list[Sequence]) -> None:
        self.engine.decode_step(ready)

    def release(self, seq: Sequence) -> None:
        pass

    def begin_rollout(self) -> None:
        pass

    def end_rollout(self) -> None:
        pass

    def metrics(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        pass
