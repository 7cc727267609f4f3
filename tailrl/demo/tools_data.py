"""The tools demo's warm-start data: the demo task's problems, solved either by a call to the `calculator`
tool or by today's chain, as token ids with the loss mask the SFT trains on.

    prompt lists the tools, call   <s>[calculator]7+5-3+8=  <tool_call>{... "7+5-3+8"}</tool_call></s>
                                   <result>17</result>  >17</s>
    prompt lists the tools, chain  <s>[calculator]7+5-3+8=  7+5=12;12-3=9;9+8=17;>17</s>
    no tools                       <s>7+5-3+8=  7+5=12;12-3=9;9+8=17;>17</s>          (the single-turn demo's)

Built the way a rollout is laid out, so training and rollouts see the same tokens: the prompt through the
chat template as the trainer encodes it (`encode_row` with the tools' schemas), the model's turns as text
+ eos, and the observation as `tools.chat.observation_ids` renders it for the engine (ToolTurns) from the
calculator's own answer. The loss mask is 1 on the model's tokens and 0 on the prompt and the observation.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

import torch

from tailrl.data.demo_task import DemoTask
from tailrl.data.prompts import encode_row
from tailrl.tools import Observation, ToolCall, load_tools, observation_ids, tool_messages
from tailrl.tools.builtin import calculator

TOOL_NAMES = ("calculator",)


@dataclass(frozen=True)
class ToolsMix:
    """How the warm start's rows are drawn: p_tools of them list the tools in the prompt, and p_call of those
    solve the problem with one calculator call; every other row is solved by today's chain (the defaults: half
    of all rows call, a quarter are the single-turn demo's rows)."""

    p_tools: float = 0.75
    p_call: float = 2 / 3


def tool_schemas() -> list[dict]:
    """The JSON schemas of the demo's tools (the chat template's `tools=`)."""
    return [t.schema for t in load_tools(list(TOOL_NAMES))]


def calculator_call(prompt: str) -> ToolCall:
    """The call that solves a demo problem: the whole expression (without its '=') to the calculator."""
    return ToolCall("calculator", {"expression": prompt.rstrip("=")})


def call_text(call: ToolCall) -> str:
    """A call as the template writes it in an assistant turn (hermes format)."""
    return f'<tool_call>{{"name": "{call.name}", "arguments": {json.dumps(call.arguments)}}}</tool_call>'


def prompt_ids(tok, prompt: str, schemas: list[dict] | None) -> list[int]:
    """The prompt's token ids as the trainer encodes a row with data.chat_template=true."""
    ids, _ = encode_row({"messages": [{"role": "user", "content": prompt}]}, tok, schemas)
    return list(ids)


def turn_ids(tok, text: str) -> list[int]:
    """One assistant turn as the model generates it: the text's characters, then eos (the end of turn)."""
    return tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]


def sequence(tok, prompt: str, solution: str, schemas: list[dict] | None, call: bool
             ) -> tuple[list[int], list[int]]:
    """(ids, loss mask) of one solved problem: with `call`, a calculator turn, its observation and the
    answer turn '>value'; else `solution` (the chain) as one turn."""
    ids = prompt_ids(tok, prompt, schemas)
    mask = [0] * len(ids)
    if not call:
        turn = turn_ids(tok, solution)
        return ids + turn, mask + [1] * len(turn)
    c = calculator_call(prompt)
    answer = calculator(**c.arguments)  # the text the tool worker returns for this call
    first, last = turn_ids(tok, call_text(c)), turn_ids(tok, f">{answer}")
    obs = observation_ids(tok, tool_messages([Observation(c.name, answer)]), schemas)
    return ids + first + obs + last, mask + [1] * len(first) + [0] * len(obs) + [1] * len(last)


def tools_sft_chunks(task: DemoTask, tok, rng: random.Random, n: int, mix: ToolsMix, schemas: list[dict]
                     ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One SFT step's n rows as (ids (k, L), loss mask (k, L)) chunks of similar lengths, each padded to its
    own longest (a call row is ~4x a chain row: one padded batch would be mostly padding)."""
    seqs = []
    for row in task.rows(n, "train", seed=rng.randrange(2**31), with_solution=True):
        tools = rng.random() < mix.p_tools
        call = tools and rng.random() < mix.p_call
        seqs.append(sequence(tok, row["prompt"], row["solution"], schemas if tools else None, call))
    seqs.sort(key=lambda s: len(s[0]))
    chunks: list[list[tuple[list[int], list[int]]]] = [[]]
    for s in seqs:  # a new chunk once a row is 1.5x the chunk's shortest
        if chunks[-1] and len(s[0]) > 1.5 * len(chunks[-1][0][0]):
            chunks.append([])
        chunks[-1].append(s)
    return [pad(chunk, tok.pad_token_id, row_mean=True) for chunk in chunks]


def pad(seqs: list[tuple[list[int], list[int]]], pad_id: int, row_mean: bool = False
        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad (ids, mask) pairs to one length: (ids (k, L) int64, mask (k, L) float32). row_mean: each row's
    mask divided by its number of loss tokens, so a token-averaged loss averages rows instead (a call row's
    ~75 model tokens, most of them the call's fixed text, would otherwise outweigh a ~25-token chain 3 to 1)."""
    L = max(len(ids) for ids, _ in seqs)
    ids = torch.tensor([s + [pad_id] * (L - len(s)) for s, _ in seqs])
    mask = torch.tensor([m + [0] * (L - len(m)) for _, m in seqs], dtype=torch.float32)
    if row_mean:
        mask = mask / mask.sum(1, keepdim=True).clamp(min=1.0)
    return ids, mask
