"""Reward settings -> checked values and loaded functions, for whichever process runs the calls.

Place in the flow: `reward.functions / weights / timeout_s` -> **check_settings** (in the trainer's
process, before anything starts) -> **load_functions** (in the process that calls the rewards: the
trainer's for `Reward`, each worker's for `RewardPool`) -> calls with `row_filter(fn)(row)` as keywords.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tailrl.errors import UserError
from tailrl.rewards.registry import RewardFn
from tailrl.rewards.user import resolve

__all__ = ["Loaded", "check_settings", "load_functions", "row_filter"]

# Passed as arguments, so a row's own fields of these names cannot also go in as keywords.
_ARGUMENT_NAMES = frozenset({"prompt", "completion"})


@dataclass(frozen=True)
class Loaded:
    name: str  # the metric name: registry name or the function's own name
    fn: RewardFn
    keep: Callable[[dict], dict]  # row -> the keywords fn takes


def check_settings(
    functions: Sequence[str] | str, weights: Sequence[float], timeout_s: float
) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """(functions, weights with the default 1.0 each filled in); a bad setting is a UserError."""
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
    return tuple(functions), weights


def load_functions(functions: Sequence[str]) -> list[Loaded]:
    """Resolve every ref (see user.py) and run each function's `prepare()` hook once."""
    resolved = [resolve(ref) for ref in functions]
    names = [name for name, _ in resolved]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UserError(f"reward name(s) used twice: {', '.join(duplicates)}; each function may appear once")
    for name, fn in resolved:
        _prepare(name, fn)
    return [Loaded(name, fn, row_filter(fn)) for name, fn in resolved]


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


def row_filter(fn: RewardFn) -> Callable[[dict], dict]:
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
