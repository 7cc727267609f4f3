"""The GroupController protocol and its registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class GroupController(Protocol):
    def choose(self) -> int:
        """Group size G for the next step."""

    def observe(self, group_lengths: list[list[int]]) -> None:
        """Response lengths of each group of the step just generated."""

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
