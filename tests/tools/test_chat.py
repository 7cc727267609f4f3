"""Rendering through a real (Qwen2.5-style) chat template with tools: the prompt, the generated turn and the
observation suffix concatenate to exactly the template's rendering of the whole conversation."""

import pytest

from tailrl.errors import UserError
from tailrl.tools import Observation, ToolCall, load_tools
from tailrl.tools.builtin import calculator
from tailrl.tools.chat import append_reset, assistant_message, observation_ids, render_ids, tool_messages
from tailrl.tools.parsers import hermes
from tests.helpers import make_char_tokenizer

# Qwen2.5-Instruct's chat template (tool use included), as published with the model.
QWEN25_TEMPLATE = r"""
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""


@pytest.fixture(scope="module")
def tok():
    tok = make_char_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.eos_token = "<|im_end|>"
    tok.chat_template = QWEN25_TEMPLATE
    return tok


@pytest.fixture(scope="module")
def schemas():
    return [t.schema for t in load_tools(["calculator", "tests.tools.sample_tools:add"])]


def generate(tok, text: str) -> list[int]:
    """The ids a model trained on this template emits for one turn: its text, then the end-of-turn token."""
    return tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]


def test_prompt_renders_the_tools(tok, schemas):
    text = tok.decode(render_ids(tok, [{"role": "user", "content": "hi"}], schemas, add_generation_prompt=True))
    assert '<tools>\n{"type": "function", "function": {"name": "calculator"' in text
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert "<tools>" not in tok.decode(render_ids(tok, [{"role": "user", "content": "hi"}], []))  # [] -> None


def test_round_trip_prompt_turn_observations_equals_the_whole_conversation(tok, schemas):
    messages = [{"role": "user", "content": "What is 6*7, and 2+3?"}]
    ids = render_ids(tok, messages, schemas, add_generation_prompt=True)
    turns = [
        'Let me compute.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>',
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "42+5"}}\n</tool_call>',
    ]
    for turn in turns:
        generated = generate(tok, turn)
        content, calls = hermes(tok.decode(generated, skip_special_tokens=True))
        assert all(isinstance(c, ToolCall) for c in calls)
        results = [calculator(**c.arguments) if c.name == "calculator" else str(c.arguments["a"] + c.arguments["b"])
                   for c in calls]
        observations = [Observation(c.name, r) for c, r in zip(calls, results)]
        ids = ids + generated + observation_ids(tok, tool_messages(observations), schemas)
        messages = messages + [assistant_message(content, calls), *tool_messages(observations)]
        assert ids == render_ids(tok, messages, schemas, add_generation_prompt=True)
    final = generate(tok, "6*7 = 42 and 2+3 = 5.")
    messages.append({"role": "assistant", "content": "6*7 = 42 and 2+3 = 5."})
    assert ids + final + tok.encode("\n", add_special_tokens=False) == render_ids(tok, messages, schemas)
    text = tok.decode(ids)
    assert "<|im_start|>user\n<tool_response>\n42\n</tool_response>\n<tool_response>\n5\n</tool_response><|im_end|>" \
        in text


def test_observation_suffix_starts_after_the_end_of_turn_token(tok, schemas):
    suffix = observation_ids(tok, [{"role": "tool", "name": "add", "content": "5"}], schemas)
    assert tok.decode(suffix) == "\n<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n" \
                                 "<|im_start|>assistant\n"
    with pytest.raises(ValueError, match="at least one"):
        observation_ids(tok, [])


def test_a_template_that_is_not_prefix_preserving_is_refused(tok):
    # like Qwen3's: an assistant turn renders differently once it is no longer the last message
    template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n"
                "{% if m.role == 'assistant' and not loop.last %}[earlier]{% else %}{{ m.content }}{% endif %}"
                "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    with pytest.raises(UserError, match="not prefix-preserving"):
        observation_ids(tok, [{"role": "tool", "name": "add", "content": "5"}], chat_template=template)


def test_append_reset_is_trls_rule():
    prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": "Play."}]
    assert append_reset(prompt, " Target: 3.") == [prompt[0], {"role": "user", "content": "Play. Target: 3."}]
    assert prompt[1]["content"] == "Play."  # not modified
    assert append_reset(prompt, None) is prompt and append_reset("Q:", " go") == "Q: go"
