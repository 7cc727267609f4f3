"""From one call's outcome to a batch's scores: the part of the failure contract both scorers share.

Place in the flow: a reward call (in-process, timeout.py; or in a pool worker, pool_worker.py) ->
**settle** (parse the return into a `Scored`, in whichever process ran the call) -> **Tally.batch**
(weights, components, counts, one warning per failing function) -> `RewardBatch`. `Scorer` is the
interface the trainer sees, implemented by `Reward` (base.py) and `RewardPool` (pool.py).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tailrl.rewards.timeout import Outcome

__all__ = ["RewardBatch", "Scored", "Scorer", "Tally", "settle"]

log = logging.getLogger(__name__)


@dataclass
class RewardBatch:
    """Scores for one batch, aligned with the completions.

    `components[name]` is each function's unweighted score; a dict return's other numeric keys
    appear as `components["name/key"]` (0.0 where a call did not report that key).
    """

    scores: list[float]
    components: dict[str, list[float]]
    errors: int
    timeouts: int


@dataclass(frozen=True)
class Scored:
    """One call's result, small and picklable: a finite `value` (+ `extras`), a `failure`, or a timeout."""

    value: float = 0.0
    extras: dict[str, float] = field(default_factory=dict)
    failure: str | None = None  # "TypeName: message" when the call raised or returned a non-number
    timed_out: bool = False


def settle(outcome: Outcome) -> Scored:
    """The `Scored` of one finished call; a return that is not a finite number (or such a dict) fails."""
    if outcome.timed_out:
        return Scored(timed_out=True)
    problem = outcome.error
    if problem is None:
        try:
            value, extras = _parse_result(outcome.value)
            return Scored(value, extras)
        except (TypeError, ValueError) as e:
            problem = e
    return Scored(failure=f"{type(problem).__name__}: {str(problem).strip()[:200]}")


class Tally:
    """Weights a grid of `Scored` into a RewardBatch; the first failure of each function is logged once."""

    def __init__(self, names: Sequence[str], weights: Sequence[float], timeout_s: float):
        self.names, self.weights, self.timeout_s = list(names), tuple(weights), timeout_s
        self._warned: set[str] = set()

    def batch(self, grid: Sequence[Sequence[Scored]], n: int) -> RewardBatch:
        """grid[f][i]: function f's result for completion i (n completions)."""
        scores = [0.0] * n
        components: dict[str, list[float]] = {name: [0.0] * n for name in self.names}
        errors = timeouts = 0
        for name, weight, row in zip(self.names, self.weights, grid):
            for i, s in enumerate(row):
                if s.timed_out:
                    timeouts += 1
                    self._warn_once(name, f"timed out after {self.timeout_s:g} s")
                elif s.failure is not None:
                    errors += 1
                    self._warn_once(name, f"failed: {s.failure}")
                else:
                    components[name][i] = s.value
                    scores[i] += weight * s.value
                    for key, extra in s.extras.items():
                        components.setdefault(f"{name}/{key}", [0.0] * n)[i] = extra
        return RewardBatch(scores=scores, components=components, errors=errors, timeouts=timeouts)

    def _warn_once(self, name: str, what: str) -> None:
        if name not in self._warned:
            self._warned.add(name)
            log.warning("reward '%s' %s; scored 0 (further failures are only counted)", name, what)


class Scorer:
    """What the trainer uses: `submit` a batch (returns at once), `result` blocks until it is scored.

    `Reward` scores a submission in-process when its result is asked for; `RewardPool` starts at submit,
    in worker processes. `score` is both in one call; `close` releases what the scorer started.
    """

    names: list[str]
    weights: tuple[float, ...]

    def submit(self, prompts: list[str], completions: list[str], rows: list[dict]) -> int:
        raise NotImplementedError

    def result(self, ticket: int) -> RewardBatch:
        raise NotImplementedError

    def score(self, prompts: list[str], completions: list[str], rows: list[dict]) -> RewardBatch:
        return self.result(self.submit(prompts, completions, rows))

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @staticmethod
    def _check_aligned(prompts: list, completions: list, rows: list) -> int:
        n = len(completions)
        if len(prompts) != n or len(rows) != n:
            raise ValueError(
                f"score() needs aligned lists: {len(prompts)} prompts, {n} completions, {len(rows)} rows"
            )
        return n


def _parse_result(result: Any) -> tuple[float, dict[str, float]]:
    """(score, extra numeric components) from a float or a dict with "score"; raises on anything else."""
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"dict return needs a 'score' key, got keys {sorted(map(str, result))}")
        extras = {}
        for key, value in result.items():
            if key != "score":
                number = _maybe_number(value)
                if number is not None and math.isfinite(number):
                    extras[str(key)] = number
        return _finite(result["score"]), extras
    return _finite(result), {}


def _finite(value: Any) -> float:
    number = _maybe_number(value)
    if number is None:
        raise TypeError(f"reward must return a number or a dict with 'score', got {type(value).__name__}")
    if not math.isfinite(number):
        raise ValueError(f"reward returned {number}")
    return number


def _maybe_number(value: Any) -> float | None:
    """float(value) for numbers (bool, numpy and 0-d torch scalars included); None for strings and others."""
    if value is None or isinstance(value, (str, bytes)):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
