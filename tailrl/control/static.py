"""Static group size: G never changes (the baseline every controller is compared with)."""

from __future__ import annotations

from tailrl.control.base import CONTROLLERS


@CONTROLLERS.register("static")
class StaticController:
    def __init__(self, group_size: int, **_):
        self.group_size = group_size

    def choose(self) -> int:
        return self.group_size

    def observe(self, group_lengths: list[list[int]]) -> None:
        pass

    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict:
        return {"group_size": self.group_size}

    def load_state_dict(self, state: dict) -> None:
        self.group_size = state["group_size"]

