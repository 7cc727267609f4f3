"""ToolExecutor: every way a tool call can fail becomes a counted error observation, dead or stuck workers are
replaced, handles are polled without blocking, and an observation never depends on latency or order."""

import os
import threading
import time

import pytest

from tailrl.errors import UserError
from tailrl.tools import TOOLS, ToolCall, ToolCallError, ToolExecutor
from tailrl.tools.builtin import calculator
from tests.tools import sample_tools

pytestmark = pytest.mark.slow  # every test here starts tool workers (the first one also imports transformers)

REFS = ["tests.tools.sample_tools:trouble", sample_tools.echo, sample_tools.add, sample_tools.async_add, "calculator"]


@pytest.fixture(scope="module")
def ex():
    with ToolExecutor(REFS, workers=2, timeout_s=1.0) as ex:
        yield ex


def call(ex, name, **arguments):
    return ex.submit(ToolCall(name, arguments)).result()


@pytest.mark.parametrize("mode, error, timed_out", [
    ("raise", "ZeroDivisionError: division by zero", False),
    ("system_exit", "SystemExit: 2", False),
    ("object", "TypeError: returned a value of type 'object', which has no well-defined text; return a str", False),
    ("exit", "tool 'trouble' crashed: worker process died (exit code 3) during this call", False),
    ("crash", "tool 'trouble' crashed: worker process died (SIGSEGV) during this call", False),
    ("hang", "tool 'trouble' timed out after 1 s", True),
    ("spin", "tool 'trouble' timed out after 1 s", True),
])
def test_each_failure_is_an_error_observation_counted_and_the_executor_goes_on(ex, mode, error, timed_out):
    ex.metrics()
    observation = call(ex, "trouble", mode=mode)
    assert (observation.error, observation.timed_out) == (error, timed_out)
    assert observation.content == str({"error": error})  # TRL's error observation: what the model reads
    metrics = ex.metrics()
    assert (metrics["tools/calls"], metrics["tools/errors"], metrics["tools/timeouts"]) == \
        (1, 0 if timed_out else 1, 1 if timed_out else 0)
    assert metrics["tools/restarts"] == (1 if mode in ("exit", "crash", "hang", "spin") else 0)
    assert call(ex, "add", a=2, b=3).content == "5"  # still serving


def test_plain_data_returns_are_text_as_in_trl(ex):
    assert call(ex, "add", a=40, b=2).content == "42"  # an int, like TRL's own examples
    assert call(ex, "async_add", a=1, b=2).content == "3"  # an async tool, awaited in its worker
    assert call(ex, "trouble", mode="none").content == "None"  # str(None), as TRL does


def test_refused_calls_never_reach_a_worker(ex):
    ex.metrics()
    cases = [
        (ToolCall("nope", {}), "unknown tool 'nope'; available: trouble, echo, add, async_add, calculator"),
        (ToolCall("add", {"b": 1}), "tool 'add': missing required argument 'a'"),
        (ToolCall("add", {"a": 1, "c": 2}), "tool 'add': unknown argument 'c' (takes: a, b)"),
        (ToolCall("add", {"a": "1"}), "tool 'add': argument 'a': expected integer, got string"),
        (ToolCallError("{oops", "malformed JSON in tool call: Expecting property name", "unknown"),
         "malformed JSON in tool call: Expecting property name"),
    ]
    for tool_call, error in cases:
        handle = ex.submit(tool_call)
        assert handle.done()  # answered at submit
        assert handle.result().error == error and handle.result().name == tool_call.name
    metrics = ex.metrics()
    assert (metrics["tools/calls"], metrics["tools/errors"], metrics["tools/latency_max_s"]) == (5, 5, 0.0)


def test_polling_never_blocks_while_a_tool_runs(ex):
    slow = ex.submit(ToolCall("echo", {"text": "slow", "delay": 0.6}))
    fast = ex.submit(ToolCall("echo", {"text": "fast"}))
    polls, worst = 0, 0.0
    while not slow.done():
        start = time.perf_counter()
        slow.done()
        worst = max(worst, time.perf_counter() - start)
        polls += 1
        time.sleep(0.005)
    assert worst < 0.1 and polls > 20  # the caller kept going the whole time ("decoding")
    assert fast.result().content == "fast"  # the other worker answered too (a busy CI may finish it last)
    assert slow.result().content == "slow"
    assert ex.metrics()["tools/latency_max_s"] >= 0.6


def test_observations_do_not_depend_on_latency_or_order(ex):
    texts = [f"t{i}" for i in range(6)]
    runs = []
    for delays in ([0.0, 0.2, 0.0, 0.1, 0.3, 0.0], [0.3, 0.0, 0.1, 0.0, 0.0, 0.2]):
        order = range(len(texts)) if len(runs) == 0 else reversed(range(len(texts)))
        handles = {i: ex.submit(ToolCall("echo", {"text": texts[i], "delay": delays[i]})) for i in order}
        handles[6] = ex.submit(ToolCall("calculator", {"expression": "2 ** 0.5"}))
        handles[7] = ex.submit(ToolCall("add", {"a": "x"}))
        runs.append({i: h.result() for i, h in handles.items()})
    assert runs[0] == runs[1]
    assert runs[0][6].content == calculator("2 ** 0.5")  # the same text as calling the tool in-process


def test_close_never_hangs_and_leaves_no_processes():
    ex = ToolExecutor(REFS, workers=2, timeout_s=0)  # no timeout: only close() can end a hung call
    pids = ex.worker_pids()
    hung = ex.submit(ToolCall("trouble", {"mode": "hang"}))
    time.sleep(0.2)
    closer = threading.Thread(target=ex.close, daemon=True)
    closer.start()
    closer.join(60)
    assert not closer.is_alive(), "close() waited for a call that never ends"
    with pytest.raises(RuntimeError, match="closed"):
        hung.result()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    ex.close()  # twice is fine


def test_a_tool_registered_by_a_plugin_loads_in_the_workers():
    TOOLS.add("sample_add", sample_tools.add)  # as a plugin module's @TOOLS.register would at its import
    try:
        with ToolExecutor(["sample_add"], workers=1) as ex:
            assert call(ex, "add", a=1, b=2).content == "3"
    finally:
        TOOLS.remove("sample_add")


def test_bad_settings_fail_before_any_worker_starts():
    with pytest.raises(UserError, match="at least 1 worker"):
        ToolExecutor(["calculator"], workers=0)
    with pytest.raises(UserError, match="at least one tool or an environment"):
        ToolExecutor([])
    with pytest.raises(UserError, match="no docstring"):
        ToolExecutor(["tests.tools.sample_tools:no_docstring"])
    with pytest.raises(UserError, match="two tools are named 'add'"):
        ToolExecutor([sample_tools.add, "tests.tools.sample_tools:add"])
    with pytest.raises(ValueError, match="needs an environment"):
        with ToolExecutor(["calculator"], workers=1) as ex:
            ex.open()


def test_workers_outlive_a_slurm_wide_sigterm():
    """SLURM signals every process of a step: the workers ignore SIGTERM (the trainer's stop guard decides;
    they die with their parent), so a call made after it is still answered by the same processes."""
    import signal

    with ToolExecutor(REFS, workers=2) as ex:
        pids = ex.worker_pids()
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        time.sleep(0.3)
        assert call(ex, "add", a=2, b=3).content == "5"
        assert ex.worker_pids() == pids and ex.metrics()["tools/restarts"] == 0
