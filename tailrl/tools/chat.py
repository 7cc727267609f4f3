"""Conversations with tools -> messages and token ids, through the tokenizer's own chat template.

    prompt_ids = render_ids(tok, messages, tools=schemas, add_generation_prompt=True)
    ... the model generates a turn with tool calls, ending with its end-of-turn token ...
    suffix = observation_ids(tok, tool_messages(observations), end_token_id=eot)
    sequence = prompt_ids + generated_ids + suffix       # the model continues from here

Place in the flow: parsers.py -> executor.py -> **tool_messages** / **observation_ids** -> the engine
appends `suffix` to the parked sequence (not built yet). Generated tokens are never re-tokenized: the
suffix is the template's text between the end of an assistant turn and the next generation prompt,
found as TRL's GRPOTrainer finds it (`_get_tool_suffix_ids`): render a dummy user + assistant-with-tool-
call conversation with and without the tool messages and take the difference, the prefix cut after its
last end-of-turn token. This needs a prefix-preserving template (appending messages does not change how
earlier ones render); one that is not is a UserError. With such a template and a turn generated exactly
as the template writes it, `prompt + turn + suffix` equals `render_ids` of the whole conversation (tested).

Messages use transformers' format: an assistant turn with calls is `{"role": "assistant", "content": ...,
"tool_calls": [{"type": "function", "function": {"name": ..., "arguments": {...}}}]}`, a result is
`{"role": "tool", "name": ..., "content": ...}` (TRL's tool message).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tailrl.errors import UserError
from tailrl.tools.observation import Observation
from tailrl.tools.parsers import ToolCall, ToolCallError

__all__ = ["append_reset", "assistant_message", "observation_ids", "render_ids", "tool_messages"]


def assistant_message(content: str, calls: Sequence[ToolCall | ToolCallError]) -> dict:
    """The assistant turn that made `calls` (a ToolCallError has no name/arguments to render: left out)."""
    tool_calls = [{"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                  for c in calls if isinstance(c, ToolCall)]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def tool_messages(observations: Sequence[Observation]) -> list[dict]:
    """One `{"role": "tool", "name", "content"}` message per observation, in call order."""
    return [{"role": "tool", "name": o.name, "content": o.content} for o in observations]


def append_reset(prompt: str | list[dict], observation: str | None) -> str | list[dict]:
    """The prompt with an environment's reset text appended to its last message's content (TRL's rule);
    unchanged for None. The input is not modified."""
    if not observation:
        return prompt
    if isinstance(prompt, str):
        return prompt + observation
    last = prompt[-1]
    return [*prompt[:-1], {**last, "content": last["content"] + observation}]


def render_ids(tokenizer: Any, messages: list[dict], tools: Sequence[dict] | None = None,
               add_generation_prompt: bool = False, **template_kwargs: Any) -> list[int]:
    """Token ids of `messages` through the tokenizer's chat template, tool schemas passed as `tools=`
    (None when there are none: some templates render tool boilerplate for an empty list)."""
    return list(tokenizer.apply_chat_template(
        messages, tools=list(tools) if tools else None, add_generation_prompt=add_generation_prompt,
        tokenize=True, return_dict=False, **template_kwargs))


def observation_ids(tokenizer: Any, messages: Sequence[dict], tools: Sequence[dict] | None = None,
                    end_token_id: int | None = None, **template_kwargs: Any) -> list[int]:
    """The token ids that follow an assistant turn ending in `end_token_id` (default: the tokenizer's
    eos): the tool `messages` as the template renders them, then the next generation prompt.

    Raises UserError when the template is not prefix-preserving (see the module docstring).
    """
    if not messages:
        raise ValueError("observation_ids needs at least one tool message")
    end = tokenizer.eos_token_id if end_token_id is None else end_token_id
    dummy = [{"role": "user", "content": "dummy"},
             {"role": "assistant", "content": "",
              "tool_calls": [{"type": "function", "function": {"name": messages[0]["name"], "arguments": {}}}]}]
    prefix = render_ids(tokenizer, dummy, tools, add_generation_prompt=False, **template_kwargs)
    full = render_ids(tokenizer, dummy + list(messages), tools, add_generation_prompt=True, **template_kwargs)
    ends = [i for i, token in enumerate(prefix) if token == end]
    if ends:  # templates that write "<end>\n" after a turn: the sequence stops at <end>, the "\n" follows
        prefix = prefix[: ends[-1] + 1]
    if full[: len(prefix)] != prefix:
        raise UserError("the chat template is not prefix-preserving (adding tool messages changes how the "
                        "assistant turn before them renders); multi-turn tool use needs one that is")
    return full[len(prefix):]
