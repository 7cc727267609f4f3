"""`tailrl bench e2e --task tools` (bench/e2e_tasks.py, bench/e2e_latency.py): the calculator behind a latency,
the same function for TRL and tailrl's workers; the response template TRL parses the tools chat template with."""

import asyncio
import inspect
import subprocess
import sys
import time

import pytest

from tailrl.bench.e2e_latency import with_latency
from tailrl.bench.e2e_tasks import TASKS
from tailrl.tools.builtin import calculator
from tailrl.tools.schema import load_tool


def test_the_slow_calculator_is_the_calculator_behind_a_latency(tmp_path):
    task, overrides = with_latency(TASKS["tools"], 0.05, tmp_path, workers=3)
    (ref,) = [o.split("=", 1)[1].strip("[]") for o in overrides if o.startswith("rollout.tools=")]
    assert "rollout.tool_workers=3" in overrides
    slow = load_tool(ref)  # how tailrl's workers load it
    assert slow.schema == load_tool("calculator").schema and task.tools == (slow.fn,)
    t = time.perf_counter()
    assert slow.fn("2*(3+4)") == calculator("2*(3+4)") == "14"
    assert time.perf_counter() - t >= 0.05
    twin, _ = with_latency(TASKS["tools"], 0.01, tmp_path, workers=1, trl_async=True)
    (fn,) = twin.tools
    assert inspect.iscoroutinefunction(fn) and fn.__name__ == "calculator"
    assert asyncio.run(fn("7+5-3+8")) == "17"
    with pytest.raises(ValueError, match="--task tools"):
        with_latency(TASKS["demo"], 0.1, tmp_path, workers=1)


def test_cli_takes_a_latency_only_for_the_tools_task(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tailrl", "bench", "e2e", "--task", "demo", "--systems", "off",
                        "--tool-latency", "0.2", "--out-dir", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2 and "--task tools" in r.stderr


def test_trl_reads_the_tools_template_turns_as_tailrl_does():
    """TOOLS_RESPONSE_TEMPLATE through transformers' parse_response (what TRL calls): a hermes call after the
    prompt, a plain final turn after an observation."""
    from tailrl.demo.tools_tokenizer import TOOLS_RESPONSE_TEMPLATE, tools_tokenizer

    tok = tools_tokenizer()
    if not hasattr(tok, "parse_response"):
        pytest.skip("transformers without parse_response")
    prompt = tok.apply_chat_template([{"role": "user", "content": "7+5-3+8="}], tools=[calculator],
                                     add_generation_prompt=True, tokenize=False)
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "7+5-3+8"}}</tool_call></s>'
    msg = tok.parse_response(call, TOOLS_RESPONSE_TEMPLATE, prefix=prompt)
    assert msg["tool_calls"] == [{"type": "function", "function": {"name": "calculator",
                                                                   "arguments": {"expression": "7+5-3+8"}}}]
    final = tok.parse_response(">17</s>", TOOLS_RESPONSE_TEMPLATE, prefix=prompt + call + "<result>17</result>")
    assert final == {"role": "assistant", "content": ">17"}
