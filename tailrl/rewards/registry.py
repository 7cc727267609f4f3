"""Reward protocol and the name -> function registry.

A reward is any callable `fn(prompt, completion, **row) -> float | dict`: `row` holds the dataset
row's fields (the ground truth under `answer`), and a function must ignore keys it does not know.
A dict return carries the score under "score"; its other numeric keys are logged as components.

A function may carry an optional `prepare()` attribute: `Reward` calls it once, in the building
thread, so slow one-time work (importing sympy) is not charged to the first timed call.

Built-ins register themselves here at import (`@register("math")`); later tasks (the demo task's
checker) add their own entries the same way, so `Reward` looks names up once and never branches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["REWARDS", "RewardFn", "register"]


class RewardFn(Protocol):
    def __call__(self, prompt: str, completion: str, **row: Any) -> float | dict[str, Any]: ...


REWARDS: dict[str, RewardFn] = {}


def register(name: str) -> Callable[[RewardFn], RewardFn]:
    """Decorator: add `fn` to REWARDS under `name` (a second, different function under one name is a bug)."""

    def add(fn: RewardFn) -> RewardFn:
        if ":" in name:
            raise ValueError(f"reward name {name!r} must not contain ':' (reserved for module:function)")
        old = REWARDS.get(name, fn)
        if old is not fn and _key(old) != _key(fn):  # same key = a module reload, allowed
            raise ValueError(f"reward {name!r} is already registered to {REWARDS[name]!r}")
        REWARDS[name] = fn
        return fn

    return add


def _key(fn: Any) -> tuple[str, str]:
    return getattr(fn, "__module__", ""), getattr(fn, "__qualname__", repr(fn))
