"""Tool-call parsers: an assistant message's text -> (content, [ToolCall | ToolCallError]).

    parse = TOOL_PARSERS.get("hermes")
    content, calls = parse('Let me add.\\n<tool_call>\\n{"name": "add", "arguments": {"a": 1}}\\n</tool_call>')
    # content == "Let me add."; calls == [ToolCall("add", {"a": 1})]

Place in the flow: the engine stops a sequence at its end-of-turn token -> the turn's text -> **parse**
-> each entry to the executor (executor.py): a `ToolCall` runs, a `ToolCallError` (malformed JSON, no
name, arguments that are not an object, an unclosed block) becomes the error observation the model sees
for that call, in its place. So every call block gets exactly one tool message, in order.

Formats (the TOOL_PARSERS registry; a parser is `fn(text) -> (content, calls)`):
- `hermes`: Hermes 2 Pro / Qwen2.5 / Qwen3, one JSON object per `<tool_call>...</tool_call>` block,
  several per message: `{"name": str, "arguments": object}`; "arguments" may be a JSON string holding
  an object; absent means no arguments.
- `llama3_json`: Llama 3.1 / 3.2 JSON tool calling: the whole message (after an optional `<|python_tag|>`)
  is one `{"name": str, "parameters": object}` object (or a `;`-separated sequence of them); a message that
  does not start with `{` is plain content.
`content` is the text outside the call blocks, each piece stripped, joined by a newline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from tailrl.registry import Registry
from tailrl.tools.arguments import json_type

__all__ = ["TOOL_PARSERS", "ToolCall", "ToolCallError", "ToolParser", "hermes", "llama3_json"]


@dataclass(frozen=True)
class ToolCall:
    """One well-formed call: the tool's name and its arguments (a JSON object)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolCallError:
    """A call block that could not be read; `error` is one line the model is shown."""

    text: str  # the block as the model wrote it
    error: str
    name: str = "unknown"  # the tool's name, when the block had a readable one


Parsed = tuple[str, list[ToolCall | ToolCallError]]


class ToolParser(Protocol):
    def __call__(self, text: str) -> Parsed: ...


TOOL_PARSERS: Registry[ToolParser] = Registry("tool parser")

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"


@TOOL_PARSERS.register("hermes")
def hermes(text: str) -> Parsed:
    """Every `<tool_call>` block of `text`, in order; see the module docstring."""
    pieces: list[str] = []
    calls: list[ToolCall | ToolCallError] = []
    pos = 0
    while (start := text.find(_OPEN, pos)) >= 0:
        pieces.append(text[pos:start])
        end = text.find(_CLOSE, start)
        if end < 0:
            calls.append(ToolCallError(text[start:], f"unclosed {_OPEN} (no {_CLOSE})"))
            pos = len(text)
            break
        calls.append(_from_json(text[start + len(_OPEN): end], "arguments"))
        pos = end + len(_CLOSE)
    pieces.append(text[pos:])
    return _join(pieces), calls


@TOOL_PARSERS.register("llama3_json")
def llama3_json(text: str) -> Parsed:
    """The message as one JSON call (or `;`-separated calls); see the module docstring."""
    body = text.strip().removeprefix("<|python_tag|>").strip()
    if not body.startswith("{"):
        return text.strip(), []
    blocks = _split_top_level(body)
    return "", [_from_json(block, "parameters") for block in blocks]


def _from_json(block: str, arguments_key: str) -> ToolCall | ToolCallError:
    """One call from a JSON object `{"name": ..., arguments_key: {...}}`, or why it is not one."""
    try:
        obj = json.loads(block)
    except json.JSONDecodeError as e:
        return ToolCallError(block, f"malformed JSON in tool call: {e.msg} (line {e.lineno}, column {e.colno})")
    if not isinstance(obj, dict):
        return ToolCallError(block, f'a tool call must be a JSON object with "name" and "{arguments_key}", '
                                    f"got {json_type(obj)}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ToolCallError(block, 'tool call has no "name" (a non-empty string)')
    arguments = obj.get(arguments_key, {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return ToolCallError(block, f'"{arguments_key}" is a string that is not a JSON object', name)
    if not isinstance(arguments, dict):
        return ToolCallError(block, f'"{arguments_key}" must be a JSON object, got {json_type(arguments)}', name)
    return ToolCall(name, arguments)


def _split_top_level(body: str) -> list[str]:
    """`{...}; {...}` -> the objects' texts, splitting on `;` outside strings and braces."""
    blocks, depth, in_string, escaped, start = [], 0, False, False, 0
    for i, ch in enumerate(body):
        if escaped:  # the character after a backslash inside a string
            escaped = False
        elif in_string:
            escaped, in_string = ch == "\\", ch != '"'
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif ch == ";" and depth == 0:
            blocks.append(body[start:i])
            start = i + 1
    blocks.append(body[start:])
    return [b.strip() for b in blocks if b.strip()]


def _join(pieces: list[str]) -> str:
    return "\n".join(p.strip() for p in pieces if p.strip())
