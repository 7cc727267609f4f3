"""The embedded demo task's checker: the number after the last '>' equals the answer."""

from __future__ import annotations

from typing import Any

from tailrl.data.demo_task import parse_answer
from tailrl.rewards.registry import register


@register("demo_arith")
def demo_arith_reward(prompt: str, completion: str, answer: str | None = None, **row: Any) -> float:
    got = parse_answer(completion)
    return 1.0 if got is not None and answer is not None and got == str(answer).strip() else 0.0
