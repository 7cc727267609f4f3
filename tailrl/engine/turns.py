"""Multi-turn rollouts in the engine: a sequence that ends a turn can be parked with its K/V kept while
something outside the engine (a tool call, an environment) prepares the next observation, then resumes:
the observation's tokens are appended, prefilled over the cached prefix, and sampling continues.

The engine knows nothing of tools. It talks to a `Turns` object:

    end_turn(seq)   called when seq stops ("stop": EOS, a stop id or string) — True parks it (an
                    observation will follow), False lets it finish as usual
    ready(timeout)  the parked sequences whose observation is ready, as (seq, tokens); tokens None ends
                    the rollout there ("stop"). Waits up to `timeout` seconds when none is ready yet.

Exactness: observation tokens take positions like any other token, so every sampled token stays keyed by
(seed, uid, sample index, position); with deterministic observations a multi-turn rollout is the same
alone or batched, whatever the latencies and the order in which observations arrive. Observation tokens
carry logprob NaN and mask 0 in the Rollout (`token_mask`): the trainer's loss must skip them.
"""

from __future__ import annotations

from typing import Protocol

from tailrl.engine.sequence import Sequence


class Turns(Protocol):
    def end_turn(self, seq: Sequence) -> bool:
        """seq stopped at the end of a turn: True when an observation will follow (the engine parks it)."""

    def ready(self, timeout: float) -> list[tuple[Sequence, list[int] | None]]:
        """Parked sequences whose observation is ready: (seq, observation token ids, or None to finish)."""


def append_observation(seq: Sequence, tokens: list[int], max_model_len: int) -> bool:
    """Append an observation's tokens to a parked sequence (logprob NaN, mask 0), cut to what its token
    budget and the context limit leave. Returns whether the sequence can still sample a token."""
    room = min(seq.max_new_tokens - seq.num_generated, max_model_len - len(seq.tokens))
    take = tokens[: max(room, 0)]
    if seq.token_mask is None:
        seq.token_mask = [1] * seq.num_generated
    seq.tokens.extend(take)
    seq.logprobs.extend([float("nan")] * len(take))
    seq.token_mask.extend([0] * len(take))
    seq.turns += 1
    return len(take) < room
