"""`Reward`: score a batch of completions with weighted reward functions, never crashing the step.

Place in the flow: engine.generate -> **Reward.score** -> advantages. Each call is
`fn(prompt, completion, **row)` under a per-call timeout (timeout.py). A call that raises, returns
something that is not a finite number, or overruns scores 0 and is counted in the batch
(`errors`, `timeouts`), so one bad completion or a buggy user reward costs a zero, not the run.
The first error of each function is logged once as a warning, so a reward that always fails is seen.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tailrl.config import RewardConfig
from tailrl.errors import UserError
from tailrl.rewards.registry import RewardFn
from tailrl.rewards.timeout import TimedCaller
from tailrl.rewards.user import resolve

__all__ = ["Reward", "RewardBatch", "build_reward"]

log = logging.getLogger(__name__)

# Passed as arguments, so a row's own fields of these names cannot also go in as keywords.
_ARGUMENT_NAMES = frozenset({"prompt", "completion"})


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


class Reward:
    """Weighted sum of reward functions; see the module docstring for the failure contract."""

    def __init__(self, functions: Sequence[str], weights: Sequence[float] = (), timeout_s: float = 10.0):
        if isinstance(functions, str):
            functions = (functions,)
        if not functions:
            raise UserError("reward.functions is empty; name at least one reward (e.g. math)")
        if weights and len(weights) != len(functions):
            raise UserError(
                f"reward.weights has {len(weights)} values for {len(functions)} functions; give one per function"
            )
        weights = tuple(float(w) for w in weights) or (1.0,) * len(functions)
        if not all(math.isfinite(w) for w in weights):
            raise UserError(f"reward.weights must be finite numbers, got {list(weights)}")
        if not math.isfinite(timeout_s):
            raise UserError(f"reward.timeout_s must be a finite number of seconds, got {timeout_s}")
        resolved = [resolve(spec) for spec in functions]
        names = [name for name, _ in resolved]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise UserError(
                f"reward name(s) used twice: {', '.join(duplicates)}; each function may appear once"
            )
        self.names = names
        self.functions = [fn for _, fn in resolved]
        self.weights = weights
        self._row_filters = [_row_filter(fn) for fn in self.functions]
        for name, fn in resolved:
            _prepare(name, fn)
        self._caller = TimedCaller(timeout_s)
        self._warned: set[str] = set()

    def score(self, prompts: list[str], completions: list[str], rows: list[dict]) -> RewardBatch:
        n = len(completions)
        if len(prompts) != n or len(rows) != n:
            raise ValueError(
                f"score() needs aligned lists: {len(prompts)} prompts, {n} completions, {len(rows)} rows"
            )
        scores = [0.0] * n
        components: dict[str, list[float]] = {name: [0.0] * n for name in self.names}
        errors = timeouts = 0
        for name, fn, weight, keep in zip(self.names, self.functions, self.weights, self._row_filters):
            for i in range(n):
                outcome = self._caller.call(fn, (prompts[i], completions[i]), keep(rows[i]))
                if outcome.timed_out:
                    timeouts += 1
                    self._warn_once(name, f"timed out after {self._caller.timeout_s:g} s")
                    continue
                problem = outcome.error
                if problem is None:
                    try:
                        value, extras = _parse_result(outcome.value)
                    except (TypeError, ValueError) as e:
                        problem = e
                if problem is not None:
                    errors += 1
                    self._warn_once(name, f"failed: {type(problem).__name__}: {str(problem).strip()[:200]}")
                    continue
                components[name][i] = value
                scores[i] += weight * value
                for key, extra in extras.items():
                    components.setdefault(f"{name}/{key}", [0.0] * n)[i] = extra
        return RewardBatch(scores=scores, components=components, errors=errors, timeouts=timeouts)

    def _warn_once(self, name: str, what: str) -> None:
        if name not in self._warned:
            self._warned.add(name)
            log.warning("reward '%s' %s; scored 0 (further failures are only counted)", name, what)

    def close(self) -> None:
        self._caller.close()


def _prepare(name: str, fn: RewardFn) -> None:
    """Run the function's optional one-time `prepare()` hook (see registry); its failure is the user's."""
    prepare = getattr(fn, "prepare", None)
    if not callable(prepare):
        return
    try:
        prepare()
    except UserError:
        raise
    except Exception as e:
        raise UserError(f"reward '{name}': prepare() failed: {type(e).__name__}: {e}") from e


def build_reward(cfg: RewardConfig) -> Reward:
    return Reward(cfg.functions, cfg.weights, cfg.timeout_s)


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


def _row_filter(fn: RewardFn) -> Callable[[dict], dict]:
    """The row keys `fn` can take as keywords: all for `**row`, else only its named parameters (so a
    user's `def f(prompt, completion, answer)` works although rows carry more fields). Keys that would
    collide with the two positional arguments (`prompt`, `completion`, or whatever fn calls them) are
    dropped: the arguments win over the row's own fields of those names."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = None
    if params is None:
        return lambda row: {k: v for k, v in row.items() if isinstance(k, str) and k not in _ARGUMENT_NAMES}
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    taken = _ARGUMENT_NAMES | set(positional[:2])
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return lambda row: {k: v for k, v in row.items() if isinstance(k, str) and k not in taken}
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - taken
    return lambda row: {k: v for k, v in row.items() if k in named}
