"""The GroupController protocol and its registry."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Protocol


def len_max_over_median(lengths: list[int]) -> float:
    """max / median of one group's response lengths (median of >= 1 token)."""
    return max(lengths) / max(statistics.median(lengths), 1.0)


def straggler_event(lengths: list[int], tau: float) -> bool:
    """A group straggles when its longest response exceeds tau x its median (SAGC's definition)."""
    return len_max_over_median(lengths) > tau


class GroupController(Protocol):
    def choose(self) -> int:
        """Group size G for the next step."""

    def observe(self, group_lengths: list[list[int]]) -> None:
        """Response lengths of each group of the step just generated."""

    def metrics(self) -> dict[str, float]:
        """The controller's own metrics for this step (empty for a static G)."""

    def state_dict(self) -> dict:
        """JSON-able state for exact resume."""

    def load_state_dict(self, state: dict) -> None: ...


CONTROLLERS: dict[str, Callable[..., GroupController]] = {}


def build_controller(kind: str, **kwargs) -> GroupController:
    from tailrl.errors import UserError

    if kind not in CONTROLLERS:
        raise UserError(f"unknown control.kind '{kind}'; valid: {', '.join(CONTROLLERS)}")
    try:
        return CONTROLLERS[kind](**kwargs)
    except ValueError as e:  # controllers validate their own settings
        raise UserError(f"control: {e}") from e
