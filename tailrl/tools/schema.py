"""A tool is a plain Python function with type hints and a Google-style docstring; its JSON schema is
the one transformers' chat templates render (`transformers.utils.get_json_schema`, used as is).

    tool = load_tool("path/to/tools.py:search")      # or "package.module:search", a TOOLS name
    tool = load_tool(search)                          # a function object (TRL's `tools=[search]`)
    tool.schema == {"type": "function", "function": {"name": "search", "description": ...,
                    "parameters": {"type": "object", "properties": {...}, "required": [...]}}}

Place in the flow: the tool settings -> **load_tools** (in the trainer's process, before any model
loads: every mistake is a UserError with one line) -> schemas for the chat template's `tools=` and
argument checks (arguments.py); tool worker processes load the same refs again (`resolve_tool`, no
schema: transformers is not imported there). A tool may be `async def` (awaited in its worker, as TRL
awaits async tools). Built-ins register in `TOOLS` (builtin.py: calculator, python).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tailrl.errors import UserError
from tailrl.registry import Registry
from tailrl.rewards.user import load_attribute, ref_of

__all__ = ["TOOLS", "Tool", "load_tool", "load_tools", "resolve_tool", "tool_schema"]

ToolFn = Callable[..., Any]

TOOLS: Registry[ToolFn] = Registry("tool")


@dataclass(frozen=True)
class Tool:
    """One tool as the model sees it (`schema`) and as a worker loads it again (`ref`)."""

    name: str  # schema["function"]["name"]: the function's __name__
    fn: ToolFn
    schema: dict  # get_json_schema(fn)
    ref: str | None  # a TOOLS name, module:attr or file.py:attr; None for an environment's method


def tool_schema(fn: ToolFn, what: str) -> dict:
    """`get_json_schema(fn)`; a missing docstring, argument description or type hint is a UserError
    that starts with `what` ("tool 'x.py:f'") and fits on one line."""
    # lazy: tool worker processes import this package and never derive a schema (transformers: ~1.3 s)
    from transformers.utils import get_json_schema

    try:
        return get_json_schema(fn)
    except Exception as e:  # DocstringParsingException, TypeHintParsingException, a signature-less callable
        why = " ".join(str(e).split()) or type(e).__name__
        raise UserError(f"{what}: cannot derive its JSON schema (a tool needs type hints and a Google-style "
                        f"docstring with Args:): {why}") from e


def resolve_tool(tool: str | ToolFn) -> tuple[str, ToolFn, str]:
    """(name, function, ref) of a TOOLS name, a `module:fn` / `file.py:fn` ref or a function object;
    the ref loads the same function in another process. Raises UserError for anything else."""
    if isinstance(tool, str):
        ref = tool.strip()
        if ref in TOOLS:
            fn = TOOLS[ref]
        elif ":" in ref:
            _, fn = load_attribute(ref, "tool")
        else:
            raise UserError(f"unknown tool '{ref}'; valid: {', '.join(TOOLS) or 'none'}, or package.module:function, "
                            "or path/to/file.py:function")
    else:
        fn = tool
        ref = next((name for name in TOOLS if TOOLS[name] is fn), None) or ref_of(fn)
        if ref is None:
            raise UserError(f"tool '{getattr(fn, '__qualname__', fn)}' is defined in the script being run or inside "
                            "a function, which tool workers cannot import; define it in a module or file")
    if inspect.isclass(fn) or not callable(fn):
        raise UserError(f"tool '{ref}' must be a function (got {type(fn).__name__}); a class is an environment")
    return getattr(fn, "__name__", "operation"), fn, ref


def load_tool(tool: str | ToolFn) -> Tool:
    """A `Tool` with its schema; see the module docstring."""
    name, fn, ref = resolve_tool(tool)
    return Tool(name, fn, tool_schema(fn, f"tool '{ref}'"), ref)


def load_tools(tools: Sequence[str | ToolFn]) -> list[Tool]:
    """Every tool loaded; two tools under one name is a UserError (the model could not tell them apart)."""
    loaded = [load_tool(t) for t in tools]
    check_unique(loaded)
    return loaded


def check_unique(tools: Sequence[Tool]) -> None:
    """A UserError naming the first tool name that appears twice."""
    seen: dict[str, Tool] = {}
    for tool in tools:
        if tool.name in seen:
            first = seen[tool.name].ref or "an environment method"
            raise UserError(f"two tools are named '{tool.name}' ({first} and {tool.ref or 'an environment method'})"
                            "; tool names must be unique")
        seen[tool.name] = tool
