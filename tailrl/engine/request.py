"""Typed records that cross the engine boundary: SamplingParams, Request in, Rollout out.

A Request is one prompt with `n` samples (a GRPO group). Each sample's tokens are keyed by
(params.seed, uid, sample_index, position), so a rollout is the same whichever batch it ran in.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    max_new_tokens: int = 256
    seed: int = 0
    stop: tuple[str, ...] = ()  # stop strings (need a detokenizer in the engine)
    stop_token_ids: tuple[int, ...] = ()  # extra stop ids besides the model's EOS
    ignore_eos: bool = False


@dataclass
class Request:
    prompt_ids: list[int]
    uid: int  # prompt identity in the sampling key (stable across steps/runs for the same prompt)
    n: int = 1  # samples of this prompt
    params: SamplingParams = field(default_factory=SamplingParams)
    first_sample: int = 0  # sample indices are first_sample .. first_sample + n - 1 (over-sampling)
    max_new_tokens: list[int] | None = None  # optional per-sample override (forced lengths in benchmarks)
    error: str | None = None  # set by the caller for a request it could not build (malformed row)


@dataclass
class Rollout:
    uid: int
    sample_index: int
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]  # per sampled token, under softmax(logits / T) of the target model
    finish_reason: str  # "stop" | "length" | "error"
    error: str | None = None
    t_start: float = 0.0  # seconds since the rollout began: admitted
    t_finish: float = 0.0
    token_mask: list[int] | None = None  # multi-turn: 1 sampled token, 0 observation token (logprob NaN)
    turns: int = 0  # observations the rollout received (engine/turns.py)
    parked_s: float = 0.0  # seconds parked waiting for its observations (tool calls)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def final_turn_ids(self) -> list[int]:
        """The tokens after the last observation (all of them for a single-turn rollout): the final answer's
        turn, what rewards read."""
        if not self.token_mask or 0 not in self.token_mask:
            return self.token_ids
        return self.token_ids[len(self.token_mask) - self.token_mask[::-1].index(0):]

    @property
    def num_model_tokens(self) -> int:
        """Tokens the model sampled (observation tokens of a multi-turn rollout left out)."""
        return len(self.token_ids) if self.token_mask is None else sum(self.token_mask)
