"""Static group size: G never changes (the baseline every controller is compared with)."""

from __future__ import annotations

from tailrl.control.base import CONTROLLERS


class StaticController:
    def __init__(self, group_size: int, **_):
        self.group_size = group_size
        self.steps = 0

    def choose(self) -> int:
        return self.group_size

    def observe(self, group_lengths: list[list[int]]) -> None:
        self.steps += 1

    def state_dict(self) -> dict:
        return {"group_size": self.group_size, "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.group_size, self.steps = state["group_size"], state["steps"]


CONTROLLERS["static"] = StaticController
