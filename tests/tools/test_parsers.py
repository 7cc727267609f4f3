"""Tool-call parsers: several calls per message, text around them, and every malformed block as an error entry
in its place."""

import pytest

from tailrl.errors import UserError
from tailrl.tools import TOOL_PARSERS, ToolCall, ToolCallError
from tailrl.tools.parsers import hermes, llama3_json


def block(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


def test_registry():
    assert TOOL_PARSERS.get("hermes") is hermes and TOOL_PARSERS.get("llama3_json") is llama3_json
    with pytest.raises(UserError, match="unknown tool parser 'nope'; valid: hermes, llama3_json"):
        TOOL_PARSERS.get("nope")


def test_hermes_several_calls_with_text_around():
    text = ("I will add, then search.\n"
            + block('{"name": "add", "arguments": {"a": 1, "b": 2}}') + "\n"
            + block('{"name": "search", "arguments": {"query": "tail <latency>", "opts": {"k": [1, 2]}}}')
            + "\nDone.")
    content, calls = hermes(text)
    assert content == "I will add, then search.\nDone."
    assert calls == [ToolCall("add", {"a": 1, "b": 2}),
                     ToolCall("search", {"query": "tail <latency>", "opts": {"k": [1, 2]}})]


def test_hermes_plain_text_and_no_arguments():
    assert hermes("  just an answer: 42  ") == ("just an answer: 42", [])
    assert hermes(block('{"name": "now"}')) == ("", [ToolCall("now", {})])
    # arguments written as a JSON string holding an object (some models do)
    assert hermes(block('{"name": "add", "arguments": "{\\"a\\": 1}"}'))[1] == [ToolCall("add", {"a": 1})]


def test_hermes_malformed_blocks_keep_their_place():
    text = (block('{"name": "add", "arguments": {"a": 1}}')
            + block('{"name": "add", "arguments": {"a": 1}')            # unbalanced brace
            + block('{"arguments": {"a": 1}}')                           # no name
            + block('["add", {"a": 1}]')                                 # not an object
            + block('{"name": "add", "arguments": [1, 2]}')             # arguments not an object
            + block('{"name": "add", "arguments": "not json"}')
            + block('{"name": "add", "arguments": {"a": 2}}')
            + "<tool_call>\n{\"name\": \"add\"")                         # cut off: never closed
    content, calls = hermes(text)
    assert content == ""
    assert calls[0] == ToolCall("add", {"a": 1}) and calls[6] == ToolCall("add", {"a": 2})
    errors = calls[1:6] + calls[7:]
    assert all(isinstance(e, ToolCallError) for e in errors)
    assert errors[0].error.startswith("malformed JSON in tool call: Expecting ',' delimiter")
    assert errors[0].name == "unknown" and errors[0].text == '\n{"name": "add", "arguments": {"a": 1}\n'
    assert errors[1].error == 'tool call has no "name" (a non-empty string)'
    assert errors[2].error == 'a tool call must be a JSON object with "name" and "arguments", got array'
    assert (errors[3].error, errors[3].name) == ('"arguments" must be a JSON object, got array', "add")
    assert errors[4].error == '"arguments" is a string that is not a JSON object'
    assert errors[5].error == "unclosed <tool_call> (no </tool_call>)"


def test_llama3_json():
    assert llama3_json('<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": 2}}') == \
        ("", [ToolCall("add", {"a": 1, "b": 2})])
    content, calls = llama3_json('{"name": "echo", "parameters": {"text": "a; b {c}"}}; {"name": "now", "parameters": {}}')
    assert calls == [ToolCall("echo", {"text": "a; b {c}"}), ToolCall("now", {})]  # ';' inside a string stays
    assert llama3_json("The answer is 4.") == ("The answer is 4.", [])
    assert isinstance(llama3_json('{"name": "add", "parameters": {')[1][0], ToolCallError)
