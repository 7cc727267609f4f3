"""The GroupController protocol and its registry (control.kind)."""

from __future__ import annotations

from typing import Protocol

from tailrl.errors import UserError
from tailrl.registry import Registry


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


CONTROLLERS: Registry[type[GroupController]] = Registry("control.kind")


def build_controller(kind: str, **kwargs) -> GroupController:
    cls = CONTROLLERS.get(kind)
    try:
        return cls(**kwargs)
    except ValueError as e:  # controllers validate their own settings
        raise UserError(f"control: {e}") from e
