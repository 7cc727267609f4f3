"""The tools demo (`tailrl demo demo.task=tools`): its tokenizer and chat template round-trip the way the engine
renders observations, its warm-start rows call the calculator correctly with the rollout's token layout, its
cache key is its own, and `demo.task` is read by the demo command."""

import random

import pytest
import torch

from tailrl.cli import main
from tailrl.commands.training import demo_task
from tailrl.data.demo_task import parse_answer
from tailrl.demo.run import DEMO_SPEC, DEMO_TASK
from tailrl.demo.tokenizer import demo_tokenizer
from tailrl.demo.tools_data import (
    ToolsMix,
    calculator_call,
    call_text,
    prompt_ids,
    sequence,
    tool_schemas,
    tools_sft_chunks,
    turn_ids,
)
from tailrl.demo.tools_tokenizer import tools_tokenizer
from tailrl.demo.tools_warmstart import tools_key
from tailrl.errors import UserError
from tailrl.tools import Observation, ToolCall, assistant_message, observation_ids, render_ids, tool_messages
from tailrl.tools.builtin import calculator
from tailrl.tools.parsers import hermes


@pytest.fixture(scope="module")
def tok():
    return tools_tokenizer()


@pytest.fixture(scope="module")
def schemas():
    return tool_schemas()


def test_the_call_is_ordinary_tokens_and_parses_after_skipping_specials(tok):
    text = call_text(calculator_call("7+5-3+8="))
    assert text == '<tool_call>{"name": "calculator", "arguments": {"expression": "7+5-3+8"}}</tool_call>'
    ids = turn_ids(tok, text)
    assert tok.unk_token_id not in ids[:-1] and ids[-1] == tok.eos_token_id
    assert set(ids[:-1]).isdisjoint(tok.all_special_ids)
    _, calls = hermes(tok.decode(ids, skip_special_tokens=True))  # as ToolTurns.end_turn reads a turn
    assert calls == [ToolCall("calculator", {"expression": "7+5-3+8"})]


def test_prompts_keep_the_single_turn_demo_tokens(tok, schemas):
    plain = demo_tokenizer()
    for prompt in ("7+5-3+8=", "2-4=", "1+5-3="):
        assert prompt_ids(tok, prompt, None) == plain(prompt)["input_ids"]  # today's ids, no tools listed
        assert tok.decode(prompt_ids(tok, prompt, schemas)) == f"<s>[calculator]{prompt}"


def test_prompt_turn_and_observation_ids_equal_the_template_rendering(tok, schemas):
    messages = [{"role": "user", "content": "4-2-3-4="}]
    ids = render_ids(tok, messages, schemas, add_generation_prompt=True)
    assert ids == prompt_ids(tok, "4-2-3-4=", schemas)  # the trainer's encoding (text, then tokens)
    for expression in ("4-2-3-4", "oops+", "(1"):  # an answer, then two error answers from the tool
        call = ToolCall("calculator", {"expression": expression})
        generated = turn_ids(tok, call_text(call))
        content, calls = hermes(tok.decode(generated, skip_special_tokens=True))
        obs = [Observation(c.name, calculator(**c.arguments)) for c in calls]
        ids = ids + generated + observation_ids(tok, tool_messages(obs), schemas)  # as ToolTurns renders it
        messages = messages + [assistant_message(content, calls), *tool_messages(obs)]
        assert ids == render_ids(tok, messages, schemas, add_generation_prompt=True)
    ids = ids + turn_ids(tok, ">-5")
    assert ids == render_ids(tok, messages + [{"role": "assistant", "content": ">-5"}], schemas)
    assert tok.decode(observation_ids(tok, [{"role": "tool", "name": "calculator", "content": "-5"}], schemas)) == \
        "<result>-5</result>"


def test_warm_start_rows_call_the_calculator_right_with_the_rollout_layout(tok, schemas):
    rng = random.Random(0)
    for row in DEMO_TASK.rows(50, "train", seed=3, with_solution=True):
        ids, mask = sequence(tok, row["prompt"], row["solution"], schemas, call=True)
        n_prompt = len(prompt_ids(tok, row["prompt"], schemas))
        assert mask[:n_prompt] == [0] * n_prompt and len(ids) == len(mask)
        turn1_end = ids.index(tok.eos_token_id, n_prompt) + 1
        _, calls = hermes(tok.decode(ids[n_prompt:turn1_end], skip_special_tokens=True))
        assert len(calls) == 1 and calls[0].name == "calculator"
        result = calculator(**calls[0].arguments)
        assert result == row["answer"] == str(DEMO_TASK.evaluate(row["prompt"]))
        obs = observation_ids(tok, tool_messages([Observation("calculator", result)]), schemas)
        assert ids[turn1_end: turn1_end + len(obs)] == obs and mask[turn1_end: turn1_end + len(obs)] == [0] * len(obs)
        final = ids[turn1_end + len(obs):]
        assert mask[n_prompt:turn1_end] == [1] * (turn1_end - n_prompt) and mask[turn1_end + len(obs):] == [1] * len(final)
        assert parse_answer(tok.decode(final, skip_special_tokens=True)) == row["answer"]
        conversation = [{"role": "user", "content": row["prompt"]}, assistant_message("", calls),
                        {"role": "tool", "name": "calculator", "content": result},
                        {"role": "assistant", "content": f">{result}"}]
        assert ids == render_ids(tok, conversation, schemas)
        chain, chain_mask = sequence(tok, row["prompt"], row["solution"], None, call=False)
        assert chain == demo_tokenizer()(row["prompt"] + row["solution"])["input_ids"] + [tok.eos_token_id]
        assert sum(chain_mask) == len(row["solution"]) + 1
    chunks = tools_sft_chunks(DEMO_TASK, tok, rng, 64, ToolsMix(), schemas)
    assert sum(ids.shape[0] for ids, _ in chunks) == 64
    weights = torch.cat([m.sum(1) for _, m in chunks])
    assert torch.allclose(weights, torch.ones(64))  # every row weighs the same in the loss
    calls = sum(int((ids == tok.convert_tokens_to_ids("{")).any(1).sum()) for ids, _ in chunks)
    assert 16 <= calls <= 48  # about half of the rows call


def test_tools_warm_start_has_its_own_cache_key():
    assert DEMO_SPEC.key(DEMO_TASK) == "2d2625e030c4"  # the single-turn demo's cached policy is untouched
    key = tools_key(DEMO_TASK, DEMO_SPEC, ToolsMix())
    assert key != DEMO_SPEC.key(DEMO_TASK) and key != tools_key(DEMO_TASK, DEMO_SPEC, ToolsMix(p_call=0.5))


def test_demo_task_is_read_by_the_demo_command(capsys):
    assert demo_task([]) == ("arith", [])
    assert demo_task(["train.lr=1e-4", "demo.task=tools"]) == ("tools", ["train.lr=1e-4"])
    assert demo_task(["demo.task=arith", "train.total_steps=3"]) == ("arith", ["train.total_steps=3"])
    with pytest.raises(UserError, match="unknown demo.task 'chess'; choose one of: arith, tools"):
        demo_task(["demo.task=chess"])
    assert main(["demo", "demo.task=chess"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "tailrl demo: error: unknown demo.task 'chess'; choose one of: arith, tools"
