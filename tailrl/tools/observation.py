"""`Observation`: what the model sees for one tool call, and how a tool's return value becomes that text.

Place in the flow: a tool returns (in its worker, worker.py) -> **to_text** -> the executor (executor.py)
builds the **Observation** -> chat.py renders it as `{"role": "tool", "name": ..., "content": ...}` ->
observation tokens appended to the sequence.

As in TRL's GRPOTrainer, a failure is not an exception but an observation the model reads: the content
is `str({"error": message})`, e.g. `{'error': "ZeroDivisionError: division by zero"}`, so the model can
recover. The text is a function of the call alone (never of latency, scheduling or which worker ran it),
so a deterministic tool gives the same observation tokens in every run.

Return values, as TRL turns them into text (`str(result)`) where that text is well defined: a `str` as
is; plain data (int, float, bool, None, and lists / tuples / dicts of plain data) through `str()`, so a
TRL tool returning `int` works unchanged. Anything else (an object whose `str` may carry a memory
address, TRL's multimodal content blocks) is an error observation: return text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_ERROR_CHARS", "Observation", "error_content", "failed", "to_text"]

MAX_ERROR_CHARS = 500  # an error message longer than this is cut (a traceback-sized str(e))
_BLOCKS = ("text", "image", "audio", "video")  # TRL's content-block types


@dataclass(frozen=True)
class Observation:
    """One tool call's result as the model sees it.

    `content` is the tool message's text: the tool's answer, or `error_content(error)` when `error` is set
    (the call was malformed, named an unknown tool, had wrong arguments, raised, returned a non-text value,
    crashed its worker, or timed out: then `timed_out` too). For an environment's `reset`, `content` is the
    text to append to the prompt's last message ("" when reset returned None).
    """

    name: str  # the tool's name, as called (the tool message's "name")
    content: str
    error: str | None = None
    timed_out: bool = False


def error_content(message: str) -> str:
    """The text the model sees for a failed call (TRL's `str({"error": message})`)."""
    return str({"error": message})


def failed(name: str, message: str, timed_out: bool = False) -> Observation:
    """The error observation of a call to `name` that failed with `message` (cut to MAX_ERROR_CHARS)."""
    if len(message) > MAX_ERROR_CHARS:
        message = message[: MAX_ERROR_CHARS - 3] + "..."
    return Observation(name, error_content(message), error=message, timed_out=timed_out)


def to_text(value: Any) -> str:
    """The text of a tool's return value; TypeError for a value whose text is not well defined."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(v, dict) and v.get("type") in _BLOCKS for v in value):
        raise TypeError("returned content blocks (multimodal tool results are not supported); return a str")
    if _plain(value):
        return str(value)
    raise TypeError(f"returned a value of type {type(value).__name__!r}, which has no well-defined text; return a str")


def _plain(value: Any, depth: int = 0) -> bool:
    """JSON-like data whose str() depends only on the value: numbers, bools, None, str, and containers."""
    if depth > 32:
        return False
    if value is None or type(value) in (bool, int, float, str):
        return True
    if type(value) in (list, tuple):
        return all(_plain(v, depth + 1) for v in value)
    if type(value) is dict:
        return all(type(k) in (str, int, float, bool) and _plain(v, depth + 1) for k, v in value.items())
    return False
