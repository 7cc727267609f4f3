"""Environments with TRL's environment_factory contract: public methods are the tools (TRL's member rule), reset
and get_reward are reserved, one instance per rollout holds state across its calls, get_reward scores it."""

import inspect

import pytest
from transformers.utils import get_json_schema

from tailrl.errors import UserError
from tailrl.tools import Observation, ToolCall, ToolExecutor, load_environment
from tailrl.tools.environment import environment_methods
from tests.tools import sample_tools
from tests.tools.sample_tools import GameEnv, IncrementEnv


def trl_tool_names(instance) -> list[str]:
    """TRL GRPOTrainer's rule, as written there: every `inspect.ismethod` member not reserved or private."""
    return [name for name, _ in inspect.getmembers(instance, predicate=inspect.ismethod)
            if name not in ("reset", "get_reward") and not name.startswith("_")]


def test_methods_follow_trls_rule():
    env = load_environment(GameEnv)
    assert [t.name for t in env.tools] == trl_tool_names(GameEnv()) == ["freeze", "look", "move", "rules"]
    assert env.name == "GameEnv" and env.has_reward and env.ref == "tests.tools.sample_tools:GameEnv"
    probe = GameEnv()
    for tool in env.tools:  # schemas of the bound methods, as TRL hands them to the chat template
        assert tool.schema == get_json_schema(getattr(probe, tool.name)) and tool.ref is None
    assert set(environment_methods(probe)) == {"freeze", "look", "move", "rules"}


def test_trls_documentation_example_loads_by_ref_and_file(tmp_path):
    env = load_environment("tests.tools.sample_tools:IncrementEnv")
    assert [t.name for t in env.tools] == ["increment"] and env.has_reward
    assert env.tools[0].schema["function"]["parameters"]["properties"]["step"]["type"] == "integer"
    path = tmp_path / "envs.py"
    path.write_text(inspect.getsource(sample_tools))
    assert [t.name for t in load_environment(f"{path}:GameEnv").tools] == ["freeze", "look", "move", "rules"]


def test_environment_errors_are_one_line(tmp_path):
    cases = [
        ("tests.tools.sample_tools:NoResetEnv", "must define a callable reset"),
        ("tests.tools.sample_tools:BadMethodEnv", "method 'act': cannot derive its JSON schema"),
        (f"{tmp_path}/none.py:Env", "file not found"),
        ("tests.tools.sample_tools:Missing", "has no 'Missing'"),
        ("tests.tools.sample_tools", "is not module:name"),
        (lambda: IncrementEnv(), "cannot import"),
    ]
    for ref, message in cases:
        with pytest.raises(UserError, match=message) as info:
            load_environment(ref)
        assert "\n" not in str(info.value)


@pytest.fixture(scope="module")
def games():
    with ToolExecutor(tools=[sample_tools.add], environment=GameEnv, workers=2, timeout_s=2.0) as ex:
        yield ex


@pytest.mark.slow  # starts tool workers
def test_one_instance_per_rollout_with_state_and_reward(games):
    a, b = games.open({"prompt": "p"}), games.open()
    assert (a.slot, b.slot) == (0, 1) and a.reset.result().content == ""  # reset returned None
    handles = [a.submit(ToolCall("move", {"action": "up"})), b.submit(ToolCall("move", {"action": "left"})),
               a.submit(ToolCall("move", {"action": "down"})), a.submit(ToolCall("look", {})),
               a.submit(ToolCall("rules", {})), b.submit(ToolCall("add", {"a": 1, "b": 1}))]
    assert [h.result().content for h in handles][:5] == ["up", "left", "up,down", "2 moves; instance 1", "move to win"]
    assert handles[5].result().content == "2"  # a standalone tool next to the environment's methods
    assert (a.reward().result().value, b.reward().result().value) == (2.0, 1.0)  # async get_reward awaited
    with pytest.raises(ValueError, match="environment method"):
        games.submit(ToolCall("move", {"action": "up"}))  # a method needs its session
    for s in (a, b):
        s.close()


@pytest.mark.slow
def test_instances_are_reused_and_reset(games):
    first = games.open()
    first.submit(ToolCall("move", {"action": "up"})).result()
    made = first.submit(ToolCall("look", {})).result().content
    first.close()
    again = games.open()
    while again.slot != first.slot:  # the next session on first's worker takes its closed instance
        again.close()
        again = games.open()
    assert again.submit(ToolCall("look", {})).result().content == "0 moves; " + made.split("; ")[1]
    again.close()


@pytest.mark.slow
def test_trl_increment_env_end_to_end():
    with ToolExecutor(environment="tests.tools.sample_tools:IncrementEnv", workers=1, timeout_s=5.0) as ex:
        assert [s["function"]["name"] for s in ex.schemas] == ["increment"]
        session = ex.open({"target": 2})
        assert session.reset.result().content == "Increment the counter by 2."
        assert [session.submit(ToolCall("increment", {"step": 1})).result().content for _ in range(2)] == ["1", "2"]
        assert session.reward().result().value == 1.0
        wrong = session.submit(ToolCall("increment", {"step": "one"})).result()
        assert wrong.error == "tool 'increment': argument 'step': expected integer, got string"


@pytest.mark.slow
def test_a_timed_out_worker_loses_its_sessions_and_says_so(games):
    stuck, other, same_worker = games.open(), games.open(), games.open()
    assert stuck.slot == same_worker.slot != other.slot
    for s in (stuck, other, same_worker):
        s.reset.result()
    frozen = stuck.submit(ToolCall("freeze", {})).result()
    assert frozen.timed_out and frozen.content == "{'error': \"tool 'freeze' timed out after 2 s\"}"
    assert other.submit(ToolCall("move", {"action": "up"})).result().content == "up"  # another worker: kept
    lost = same_worker.submit(ToolCall("move", {"action": "up"})).result()
    assert "environment instance is gone" in lost.error
    assert same_worker.reward().result().failure.endswith("timed out or crashed there")
    metrics = games.metrics()
    assert metrics["tools/timeouts"] >= 1 and metrics["tools/restarts"] >= 1 and metrics["tools/env_errors"] >= 1
    fresh = games.open()
    while fresh.slot != stuck.slot:
        fresh = games.open()
    assert fresh.reset.result().error is None  # the replacement worker serves new sessions
    assert fresh.submit(ToolCall("move", {"action": "up"})).result().content == "up"


@pytest.mark.slow
def test_reset_and_creation_failures_are_reported_per_session():
    with ToolExecutor(environment="tests.tools.sample_tools:FlakyEnv", workers=1, timeout_s=5.0) as ex:
        ok = ex.open({"mode": "ok"})
        assert ok.reset.result() == Observation("reset", "")
        ok.close()
        bad_row = ex.open({"mode": "raise"})  # reuses the one instance: its reset raises
        assert bad_row.reset.result().error == "environment reset failed: reset() failed: ValueError: bad row"
        bad_row.close()
        wrong_type = ex.open({"mode": "int"})
        assert wrong_type.reset.result().error == \
            "environment reset failed: reset() must return a str or None, got int"
        second = ex.open()  # wrong_type still holds the only instance: creating another fails in the worker
        why = "creating the environment failed: RuntimeError: only one instance"
        assert second.reset.result().error == f"environment reset failed: {why}"
        assert second.submit(ToolCall("ping", {})).result().error == why
        assert second.reward().result().failure == why
        assert ex.metrics()["tools/env_errors"] == 4  # three resets and one reward
