"""`tailrl bench tools`' pieces: the sleeping calculator answers as the built-in one after the sleep its
environment variable sets, and one rollout pass reports its wall time, calls and rollouts (a tiny random model
with the tools demo's tokenizer: it makes no calls, so both passes give the same tokens)."""

import os
import time

import pytest

from tailrl.bench.tool_latency import SLEEP_ENV, calculator, rollout_once
from tailrl.demo.tools_tokenizer import tools_tokenizer
from tailrl.tools.builtin import calculator as exact
from tests.helpers import tiny_native


def test_the_sleeping_calculator_sleeps_then_answers_exactly(monkeypatch):
    monkeypatch.setenv(SLEEP_ENV, "0.05")
    t0 = time.perf_counter()
    assert calculator("7+5-3") == exact("7+5-3") == "9"
    assert time.perf_counter() - t0 >= 0.05


@pytest.mark.slow  # starts tool workers
def test_rollout_once_reports_and_leaves_the_environment_clean():
    tok = tools_tokenizer()
    model = tiny_native("llama", vocab=len(tok))[0]
    prompts = [tok("7+5=")["input_ids"], tok("3-1=")["input_ids"]]
    fast = rollout_once(model, tok, prompts, samples=2, sleep_s=0.0, workers=1, max_new_tokens=8)
    slow = rollout_once(model, tok, prompts, samples=2, sleep_s=0.05, workers=1, max_new_tokens=8)
    assert SLEEP_ENV not in os.environ
    assert set(fast["tokens"]) == {(u, s) for u in range(2) for s in range(2)} and fast["tokens"] == slow["tokens"]
    assert fast["wall_s"] > 0 and fast["calls"] == slow["calls"] and fast["turns_mean"] >= 1.0
