"""Format rewards: did the completion present an answer in a checkable shape (correct or not)?

Used with a small weight beside a correctness reward so that early policies learn to produce an
answer the verifier can find. Neither function reads the ground truth.
"""

from __future__ import annotations

from typing import Any

from tailrl.rewards.extract import answer_tag, last_boxed
from tailrl.rewards.registry import register

__all__ = ["format_reward", "think_format_reward"]


@register("format")
def format_reward(prompt: str, completion: str, **row: Any) -> float:
    """1.0 if the completion has a non-empty, brace-balanced `\\boxed{...}` (or `\\fbox{...}`) or a
    non-empty `<answer>...</answer>` pair anywhere; else 0.0."""
    boxed = last_boxed(completion)
    tagged = answer_tag(completion)
    return 1.0 if (boxed and boxed.strip()) or tagged else 0.0


@register("think_format")
def think_format_reward(prompt: str, completion: str, **row: Any) -> float:
    """1.0 for exactly `[<think>] reasoning </think> <answer> non-empty </answer>` (R1 style), else 0.0.

    The opening `<think>` is optional because many chat templates put it in the prompt. Only
    whitespace may surround the blocks, and each tag appears once.
    """
    text = completion.strip()
    if text.startswith("<think>"):
        text = text[len("<think>") :]
    if any(text.count(tag) != 1 for tag in ("</think>", "<answer>", "</answer>")) or "<think>" in text:
        return 0.0
    _, after_think = text.split("</think>")
    after_think = after_think.strip()
    if not (after_think.startswith("<answer>") and after_think.endswith("</answer>")):
        return 0.0
    return 1.0 if after_think[len("<answer>") : -len("</answer>")].strip() else 0.0
