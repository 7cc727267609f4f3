"""ToolTurns, the engine's Turns for tool calls: a turn's calls are parsed, run on the executor's workers
without blocking, and answered with the chat template's observation suffix (TRL's rendering)."""

from types import SimpleNamespace

import pytest

from tailrl.tools import Observation, ToolExecutor
from tailrl.tools.chat import observation_ids, tool_messages
from tailrl.tools.turns import ToolTurns
from tests.tools.test_chat import generate, tok  # noqa: F401  (the Qwen2.5-template tokenizer fixture)

pytestmark = pytest.mark.slow  # starts worker processes


def _seq(tok, prompt: str, turns: list[str], mask=None, n_turns=0):  # noqa: F811
    prompt_ids = tok.encode(prompt, add_special_tokens=False)
    gen = [t for turn in turns for t in generate(tok, turn)]
    return SimpleNamespace(seq_id=7, tokens=prompt_ids + gen, num_prompt=len(prompt_ids), token_mask=mask, turns=n_turns)


def test_a_turn_with_calls_is_parked_and_answered_with_the_templates_suffix(tok):  # noqa: F811
    with ToolExecutor(tools=["calculator"], workers=1) as ex:
        turns = ToolTurns(ex, tok, max_turns=2)
        seq = _seq(tok, "Q: 6*7?", ['<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n'
                                    '</tool_call>'])
        assert turns.end_turn(seq) and 7 in turns.pending
        got = turns.ready(timeout=20.0)
        want = observation_ids(tok, tool_messages([Observation("calculator", "42")]), ex.schemas)
        assert got == [(seq, want)] and turns.pending == {}
        assert "<tool_response>\n42\n</tool_response>" in tok.decode(want)
        assert turns.ready(timeout=0.0) == []  # nothing pending: returns at once


def test_no_call_or_no_turns_left_ends_the_rollout(tok):  # noqa: F811
    with ToolExecutor(tools=["calculator"], workers=1) as ex:
        turns = ToolTurns(ex, tok, max_turns=1)
        assert not turns.end_turn(_seq(tok, "Q", ["The answer is 42."]))
        call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+1"}}\n</tool_call>'
        assert not turns.end_turn(_seq(tok, "Q", [call], n_turns=1))  # max_turns reached
        assert turns.pending == {}


def test_only_the_current_turn_is_parsed(tok):  # noqa: F811
    """A call in an earlier turn (before the last observation) is not run again."""
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+2"}}\n</tool_call>'
    seq = _seq(tok, "Q", [call, "obs", "Done: 4."])
    first = len(generate(tok, call))
    n_obs = len(generate(tok, "obs"))
    seq.token_mask = [1] * first + [0] * n_obs + [1] * (len(seq.tokens) - seq.num_prompt - first - n_obs)
    assert ToolTurns.turn_start(seq) == seq.num_prompt + first + n_obs
    with ToolExecutor(tools=["calculator"], workers=1) as ex:
        assert not ToolTurns(ex, tok).end_turn(seq)
