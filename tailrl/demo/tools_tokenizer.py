"""The tools demo's tokenizer: the demo's character tokenizer over every printable ASCII character, with a
minimal chat template for user / assistant / tool messages (`tailrl demo demo.task=tools`).

    prompt      <s>[calculator]7+5-3+8=                                          (tools=[calculator schema])
                <s>7+5-3+8=                                                      (no tools: today's prompt)
    turn 1      <tool_call>{"name": "calculator", "arguments": {"expression": "7+5-3+8"}}</tool_call></s>
    observation <result>17</result>                                              (the tool message)
    turn 2      >17</s>

Every character is an ordinary token (one per character, the demo's 16 first, so their ids are today's),
so a turn decoded with skip_special_tokens=True keeps the `<tool_call>` markers and the JSON the hermes
parser reads. The template is prefix-preserving (a message renders the same whatever follows it), each
assistant turn ends with the eos token (the engine's end of turn), and the generation prompt is empty, so
`tools.chat.observation_ids` finds the observation suffix `<result>17</result>` and prompt + turns +
observations equal the template's rendering of the whole conversation (tests/demo/test_tools_demo.py).
The tools are rendered as their names only: the prompt stays close to the single-turn demo's, and the
warm start learns that a prompt without them is solved without a call.
"""

from __future__ import annotations

from tailrl.data.demo_task import VOCAB
from tailrl.demo.tokenizer import char_tokenizer

# the demo's characters first (same ids as the single-turn demo), then the rest of printable ASCII
TOOLS_VOCAB = VOCAB + [chr(c) for c in range(32, 127) if chr(c) not in VOCAB]

TOOLS_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if tools %}{%- for t in tools %}[{{ (t.function or t).name }}]{%- endfor %}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}"
    "{{- m.content or '' }}"
    "{%- for c in m.tool_calls or [] %}{%- set f = c.function or c %}"
    '<tool_call>{"name": "{{ f.name }}", "arguments": {{ f.arguments | tojson }}}</tool_call>'
    "{%- endfor %}"
    "{{- eos_token }}"
    "{%- elif m.role == 'tool' %}"
    "<result>{{ m.content }}</result>"
    "{%- else %}"
    "{{- m.content }}"
    "{%- endif %}"
    "{%- endfor %}"
)


# How TRL's GRPOTrainer (transformers' parse_response) reads an assistant turn of this template: the turn starts
# after the prompt's final "=" or after an observation, a call is hermes JSON inside <tool_call> tags, the
# rest is content up to the eos token (tailrl parses the same turns with its hermes parser, tools/parsers.py)
TOOLS_RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor_pattern": r"=|</result>",
    "fields": {
        "tool_calls": {"open": "<tool_call>", "close_pattern": r"</tool_call>\s*", "repeats": True, "content": "json",
                       "transform": {"type": "function", "function": "{content}"}},
        "content": {"close_pattern": r"</s>\s*", "content": "text"},
    },
}


def tools_tokenizer():
    """The character tokenizer of the tools demo (HF fast tokenizer) with TOOLS_TEMPLATE as its chat template."""
    tok = char_tokenizer(TOOLS_VOCAB, clean_up_tokenization_spaces=False)
    tok.chat_template = TOOLS_TEMPLATE
    return tok
