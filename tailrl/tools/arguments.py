"""Check a tool call's arguments against its tool's JSON schema before anything runs.

Place in the flow: parsers.py (a `ToolCall` from the model's text) -> **check_arguments** (in the
executor's process, executor.py) -> a worker runs the tool, or the problem becomes the error observation
the model sees. Covers what `get_json_schema` (schema.py) produces: `type` (one or a list), `nullable`,
`enum`, `items`, `prefixItems`, `additionalProperties`, `anyOf`; `{}` (`Any`) takes anything.

JSON types are strict: "integer" takes a JSON integer (not 1.0, not true), "number" an integer or a
float (not a boolean). The messages are deterministic (the same call always reads the same), since the
model's next tokens are conditioned on them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["check_arguments", "json_type"]

_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null",
               list: "array", dict: "object"}


def json_type(value: Any) -> str:
    """The JSON type name of a value parsed from JSON ("integer", "object", ...); the Python type otherwise."""
    return _JSON_TYPES.get(type(value), type(value).__name__)


def check_arguments(schema: dict, arguments: Any) -> str | None:
    """None when `arguments` fit the tool's `schema` (get_json_schema's output), else one line saying why:
    not an object, a missing required argument, an unknown one, or a value of the wrong JSON type."""
    parameters = schema.get("function", schema).get("parameters", {})
    if not isinstance(arguments, dict):
        return f"arguments must be a JSON object, got {json_type(arguments)}"
    properties: dict = parameters.get("properties", {})
    missing = [name for name in parameters.get("required", []) if name not in arguments]
    if missing:
        return f"missing required argument{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}"
    for name, value in arguments.items():
        if name not in properties:
            takes = ", ".join(properties) or "no arguments"
            return f"unknown argument {name!r} (takes: {takes})"
        problem = _check(value, properties[name])
        if problem is not None:  # "expected ..." or "[i]: expected ..." (inside an array or object)
            return f"argument {name!r}{'' if problem.startswith('[') else ': '}{problem}"
    return None


def _check(value: Any, schema: dict, where: str = "") -> str | None:
    """None when `value` fits `schema`; else "[where: ]expected X, got Y" (where: the path inside it)."""
    if value is None and schema.get("nullable"):
        return None
    if "anyOf" in schema:
        if any(_check(value, option) is None for option in schema["anyOf"]):
            return None
        return _mismatch(where, " or ".join(_describe(option) for option in schema["anyOf"]), value)
    types = schema.get("type")
    if types is not None:
        allowed = [types] if isinstance(types, str) else list(types)
        if not any(_is(value, t) for t in allowed):
            return _mismatch(where, " or ".join(allowed), value)
    if "enum" in schema and not any(type(value) is type(v) and value == v for v in schema["enum"]):
        return f"{where}{': ' if where else ''}expected one of {schema['enum']}, got {value!r}"
    if isinstance(value, list):
        return _check_items(value, schema, where)
    if isinstance(value, dict) and "additionalProperties" in schema:
        for key, item in value.items():
            problem = _check(item, schema["additionalProperties"], f"{where}[{key!r}]")
            if problem is not None:
                return problem
    return None


def _check_items(value: list, schema: dict, where: str) -> str | None:
    if "prefixItems" in schema:
        prefix = schema["prefixItems"]
        if len(value) != len(prefix):
            return f"{where}{': ' if where else ''}expected an array of {len(prefix)} items, got {len(value)}"
        pairs = list(zip(value, prefix))
    else:
        pairs = [(item, schema["items"]) for item in value] if "items" in schema else []
    for i, (item, item_schema) in enumerate(pairs):
        problem = _check(item, item_schema, f"{where}[{i}]")
        if problem is not None:
            return problem
    return None


def _is(value: Any, json_type_name: str) -> bool:
    if json_type_name == "integer":
        return type(value) is int
    if json_type_name == "number":
        return type(value) in (int, float)
    if json_type_name in ("image", "audio"):  # transformers' non-JSON types: nothing a JSON call can check
        return True
    return _JSON_TYPES.get(type(value)) == json_type_name


def _describe(schema: dict) -> str:
    types = schema.get("type", "any")
    return types if isinstance(types, str) else " or ".join(types)


def _mismatch(where: str, expected: str, value: Any) -> str:
    return f"{where}{': ' if where else ''}expected {expected}, got {json_type(value)}"
