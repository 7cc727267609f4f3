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

from tailrl.registry import Registry

__all__ = ["REWARDS", "RewardFn", "register"]


class RewardFn(Protocol):
    def __call__(self, prompt: str, completion: str, **row: Any) -> float | dict[str, Any]: ...


REWARDS: Registry[RewardFn] = Registry("reward.functions")


def register(name: str) -> Callable[[RewardFn], RewardFn]:
    """Decorator: add `fn` to REWARDS under `name` (a second, different function under one name is a bug;
    the same function again, as on a module reload, is fine)."""
    if ":" in name:
        raise ValueError(f"reward name {name!r} must not contain ':' (reserved for module:function)")
    return REWARDS.register(name)
