"""Reward orchestration: weights, dict returns, and the never-crash contract (errors, timeouts, NaN)."""

import math
import subprocess
import sys
import textwrap
import threading

import pytest

from tailrl.config import RewardConfig
from tailrl.errors import UserError
from tailrl.rewards import REWARDS, Reward, RewardBatch, build_reward, register


@pytest.fixture
def registered():
    """Register temporary rewards for one test and remove them afterwards."""
    added = []

    def add(name, fn):
        register(name)(fn)
        added.append(name)
        return fn

    yield add
    for name in added:
        REWARDS.remove(name)


def test_weights_and_components():
    reward = Reward(["math", "format"], weights=[1.0, 0.1])
    batch = reward.score(["p", "p"], [r"\boxed{2}", "2"], [{"answer": "2"}, {"answer": "3"}])
    assert isinstance(batch, RewardBatch)
    assert batch.components == {"math": [1.0, 0.0], "format": [1.0, 0.0]}
    assert batch.scores == pytest.approx([1.1, 0.0])
    assert (batch.errors, batch.timeouts) == (0, 0)


def test_default_weights_are_one():
    batch = Reward(["format", "boxed"]).score(["p"], [r"\boxed{5}"], [{"answer": "5"}])
    assert batch.scores == [2.0]


def test_row_fields_are_passed_and_prompt_key_does_not_collide(registered):
    seen = []
    registered("t_row", lambda prompt, completion, **row: seen.append((prompt, row)) or 1.0)
    batch = Reward(["t_row"]).score(["P"], ["C"], [{"prompt": "raw question", "answer": "a", "id": 7}])
    assert batch.scores == [1.0] and batch.errors == 0
    assert seen == [("P", {"answer": "a", "id": 7})]


def test_named_parameters_get_only_their_keys(registered):
    registered("t_named", lambda prompt, completion, answer: float(completion == answer))
    batch = Reward(["t_named"]).score(["p", "p"], ["x", "y"], [{"answer": "x", "extra": 1}] * 2)
    assert batch.scores == [1.0, 0.0] and batch.errors == 0


def test_exception_scores_zero_and_counts(registered, caplog):
    def boom(prompt, completion, **row):
        if completion == "bad":
            raise RuntimeError("kaboom")
        return 1.0

    registered("t_boom", boom)
    batch = Reward(["t_boom", "format"]).score(["p"] * 3, ["ok", "bad", "ok"], [{}] * 3)
    assert batch.components["t_boom"] == [1.0, 0.0, 1.0]
    assert batch.errors == 1 and batch.timeouts == 0
    assert "RuntimeError: kaboom" in caplog.text


def test_bad_return_values_count_as_errors(registered):
    values = iter([math.nan, math.inf, "1.0", None, {"no_score": 1}, {"score": math.nan}, True, 0.5])
    registered("t_bad", lambda prompt, completion, **row: next(values))
    batch = Reward(["t_bad"]).score(["p"] * 8, ["c"] * 8, [{}] * 8)
    assert batch.scores == [0.0] * 6 + [1.0, 0.5]
    assert batch.errors == 6


def test_missing_answer_is_an_error_not_a_crash():
    batch = Reward(["math"]).score(["p"], [r"\boxed{1}"], [{}])
    assert batch.scores == [0.0] and batch.errors == 1


def test_timeout_scores_zero_and_recovers(registered):
    release = threading.Event()

    def slow(prompt, completion, **row):
        if completion == "slow":
            release.wait(120)  # only a score() that abandons the call at its timeout returns before this
        return 1.0

    registered("t_slow", slow)
    reward = Reward(["t_slow"], timeout_s=0.2)
    batch = reward.score(["p"] * 3, ["fast", "slow", "fast"], [{}] * 3)
    assert not release.is_set()  # score() returned while the slow call was still stuck
    assert batch.scores == [1.0, 0.0, 1.0]
    assert (batch.timeouts, batch.errors) == (1, 0)
    assert reward.score(["p"], ["fast"], [{}]).scores == [1.0]  # a fresh worker took over
    release.set()


def test_inline_mode_without_timeout(registered):
    registered("t_inline", lambda prompt, completion, **row: 1 / 0)
    batch = Reward(["t_inline", "format"], timeout_s=0).score(["p"], [r"\boxed{1}"], [{}])
    assert batch.scores == [1.0] and batch.errors == 1


def test_dict_return_logs_extra_components(registered):
    def detailed(prompt, completion, **row):
        out = {"score": 0.5, "length": len(completion), "label": "text is ignored"}
        if completion == "short":
            out["bonus"] = 1
        return out

    registered("t_dict", detailed)
    batch = Reward(["t_dict"], weights=[2.0]).score(["p"] * 2, ["short", "longer"], [{}] * 2)
    assert batch.scores == [1.0, 1.0]
    assert batch.components == {
        "t_dict": [0.5, 0.5],
        "t_dict/length": [5.0, 6.0],
        "t_dict/bonus": [1.0, 0.0],
    }


def test_empty_batch():
    batch = Reward(["math"]).score([], [], [])
    assert batch.scores == [] and batch.components == {"math": []}


def test_misaligned_lists_are_a_programming_error():
    with pytest.raises(ValueError):
        Reward(["format"]).score(["p"], ["a", "b"], [{}, {}])


@pytest.mark.parametrize(
    "functions, weights, match",
    [
        (["nope"], (), "unknown reward 'nope'; valid: boxed, demo_arith, format, gsm8k, math"),
        ([], (), "empty"),
        (["math", "format"], (1.0,), "one per function"),
        (["math", "math"], (), "used twice"),
        (["math"], (math.nan,), "finite"),
    ],
)
def test_bad_specs_raise_user_error(functions, weights, match):
    with pytest.raises(UserError, match=match):
        Reward(functions, weights)


def test_build_reward_from_config():
    reward = build_reward(RewardConfig(functions=("gsm8k", "format"), weights=(1.0, 0.5), timeout_s=3.0))
    assert reward.names == ["gsm8k", "format"] and reward.weights == (1.0, 0.5)
    assert reward.score(["p"], ["#### 4"], [{"answer": "#### 4"}]).scores == [1.0]


def test_register_rejects_a_different_function_under_a_taken_name():
    with pytest.raises(ValueError):
        register("math")(lambda prompt, completion, **row: 0.0)


@pytest.mark.slow
def test_stuck_reward_does_not_block_interpreter_exit(tmp_path):
    script = textwrap.dedent(
        """
        import time
        from tailrl.rewards import Reward, register
        register("hang")(lambda prompt, completion, **row: time.sleep(60))
        batch = Reward(["hang"], timeout_s=0.1).score(["p"], ["c"], [{}])
        print(batch.timeouts)
        """
    )
    # the stuck call sleeps 60 s: an exit that waited for it would overrun this timeout and fail the test
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"


def test_reward_raising_timeout_error_or_exit_is_an_error(registered):
    def raises(prompt, completion, **row):
        if completion == "t":
            raise TimeoutError("network")
        raise SystemExit(3)

    registered("t_raises", raises)
    batch = Reward(["t_raises"], timeout_s=5).score(["p", "p"], ["t", "x"], [{}, {}])
    assert (batch.errors, batch.timeouts) == (2, 0)


def test_prepare_hook_runs_once_at_build(registered):
    calls = []

    def fn(prompt, completion, **row):
        return 1.0

    fn.prepare = lambda: calls.append(1)
    registered("t_prepare", fn)
    reward = Reward(["t_prepare"])
    reward.score(["p"] * 3, ["c"] * 3, [{}] * 3)
    assert calls == [1]
