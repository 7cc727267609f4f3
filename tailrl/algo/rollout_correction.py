"""Rollout correction for the train / inference gap (registry ROLLOUT_CORRECTIONS): importance weights
pi_old / pi_rollout of the sampled tokens, from the trainer's pre-update logprobs (old) and the logprobs the
engine returned with the tokens (rollout). The weight multiplies the policy-gradient term of each token
(veRL rollout_corr's `rollout_is_weights`, TRL's `importance_sampling_ratio`), never the KL or entropy terms,
and is a constant (no gradient). Token level: w_t = exp(old_t - rollout_t); sequence level: one
w = exp(sum_t (old_t - rollout_t)) for all of a sequence's tokens. Log ratios are clamped to [-20, 20]
(veRL's SAFETY_BOUND) before the exponential. With cap C:

- token_tis / seq_tis: truncated IS, min(w, C)            (veRL rollout_is=token|sequence, TRL *_truncate,
                                                           slime --use-tis, OpenRLHF is_correction_type tis)
- token_mis / seq_mis: masked IS, w if w <= C else 0      (TRL *_mask; the token or sequence is dropped from
                                                           the gradient but stays in the normaliser)

Each returns the weights and which tokens the cap acted on, for `rollout/is_weight_mean` and
`rollout/is_clipped_frac`. In engine.exact=strict the engine's logprobs equal the trainer's: every w is 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from tailrl.registry import Registry

SAFETY_BOUND = 20.0


class RolloutCorrection(Protocol):
    def __call__(self, log_ratio: torch.Tensor, mask: torch.Tensor, cap: float) -> tuple[torch.Tensor, torch.Tensor]:
        """log_ratio: (S, T) old - rollout logprobs; mask: (S, T) real tokens; cap: C > 0.
        -> weights (S, T) float, 0 on padding, no grad; capped (S, T) bool: real tokens the cap truncated or
        masked."""


ROLLOUT_CORRECTIONS: Registry[RolloutCorrection] = Registry("algo.rollout_correction")


def correction_choices() -> tuple[str, ...]:
    """The valid algo.rollout_correction names: none (no correction) and every registered one."""
    return ("none", *ROLLOUT_CORRECTIONS)


@dataclass(frozen=True)
class ImportanceWeights:
    """One entry: per-token or per-sequence weights, truncated at the cap (TIS) or masked above it (MIS)."""

    sequence: bool
    masked: bool

    def __call__(self, log_ratio: torch.Tensor, mask: torch.Tensor, cap: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(S, T), (S, T), C -> weights (S, T), capped (S, T) bool (see RolloutCorrection)."""
        m = mask.to(log_ratio.dtype)
        lr = log_ratio.detach()
        if self.sequence:  # the sequence's product, on each of its tokens
            lr = (lr * m).sum(-1, keepdim=True).expand_as(log_ratio)
        w = torch.exp(lr.clamp(-SAFETY_BOUND, SAFETY_BOUND)) * m
        over = (w > cap) & mask.bool()
        return (w.masked_fill(over, 0.0) if self.masked else w.clamp(max=cap)), over


for _name, _sequence, _masked in (("token_tis", False, False), ("seq_tis", True, False), ("token_mis", False, True),
                                  ("seq_mis", True, True)):
    ROLLOUT_CORRECTIONS.add(_name, ImportanceWeights(_sequence, _masked))
