"""RewardPool: rewards that hang (in C or Python), segfault, os._exit or raise score 0, are counted, and the
pool goes on; normal rewards score exactly as in-process; close() leaves no processes behind."""

import os
import textwrap
import threading
import time

import pytest

from tailrl.config import RewardConfig
from tailrl.errors import UserError
from tailrl.rewards import Reward, build_reward
from tailrl.rewards.pool import RewardPool

pytestmark = pytest.mark.slow  # every test here starts processes

TROUBLE = textwrap.dedent(
    """
    import ctypes, os

    def trouble(prompt, completion, **row):
        if completion == "hang":  # stuck in C code: only a kill ends it
            ctypes.CDLL(None).sleep(60)
        if completion == "spin":
            while True:
                pass
        if completion == "crash":
            ctypes.string_at(0)
        if completion == "exit":
            os._exit(3)
        if completion == "raise":
            raise RuntimeError("kaboom")
        return {"score": 1.0, "pid": os.getpid()}
    """
)

PARTS = textwrap.dedent(
    """
    def parts(prompt, completion, answer=None, **row):
        return {"score": float(str(answer) in completion), "chars": len(completion), "label": "ignored"}
    """
)


@pytest.fixture(scope="module")
def trouble_spec(tmp_path_factory):
    path = tmp_path_factory.mktemp("rewards") / "trouble.py"
    path.write_text(TROUBLE)
    return f"{path}:trouble"


@pytest.fixture(scope="module")
def pool(trouble_spec):
    with RewardPool([trouble_spec], timeout_s=0.5, workers=2) as pool:
        yield pool


@pytest.mark.parametrize(
    "mode, timeouts, errors",
    [("hang", 1, 0), ("spin", 1, 0), ("crash", 0, 1), ("exit", 0, 1), ("raise", 0, 1)],
)
def test_failing_call_scores_zero_is_counted_and_the_pool_goes_on(pool, mode, timeouts, errors):
    batch = pool.score(["p"] * 4, ["ok", mode, "ok", "ok"], [{}] * 4)
    # a hang that was not cut at 0.5 s would return 1.0 after 60 s (and spin never returns)
    assert batch.scores == [1.0, 0.0, 1.0, 1.0]
    assert (batch.timeouts, batch.errors) == (timeouts, errors)
    assert pool.score(["p"] * 3, ["ok"] * 3, [{}] * 3).scores == [1.0] * 3  # replaced, still scoring


def test_all_failures_in_one_batch_and_one_warning_per_function(trouble_spec, caplog):
    items = ["ok", "hang", "ok", "crash", "ok", "exit", "raise", "spin", "ok"]
    with RewardPool([trouble_spec], timeout_s=0.5, workers=2) as pool:
        batch = pool.score(["p"] * len(items), items, [{}] * len(items))
        assert pool.restarts == 4
    assert batch.scores == [float(x == "ok") for x in items]
    assert (batch.timeouts, batch.errors) == (2, 3)
    assert len([r for r in caplog.records if "reward 'trouble'" in r.getMessage()]) == 1


def test_results_equal_the_in_process_reward(tmp_path, monkeypatch):
    (tmp_path / "parts_rewards.py").write_text(PARTS)
    monkeypatch.syspath_prepend(str(tmp_path))  # the module spec must import in the workers too
    specs = ["math", f"{tmp_path / 'parts_rewards.py'}:parts", "tailrl.rewards.math:gsm8k_reward"]
    completions = [r"so \boxed{\frac{1}{2}}", "#### 72", r"\boxed{0.5}", "no answer", r"\boxed{3}"]
    rows = [{"answer": "0.5"}, {"answer": "#### 72"}, {"answer": r"\frac{1}{2}"}, {"answer": "7"}, {}]
    prompts = ["p"] * len(rows)
    want = Reward(specs, weights=[1.0, 0.5, 0.25]).score(prompts, completions, rows)
    with RewardPool(specs, weights=[1.0, 0.5, 0.25], workers=2) as pool:
        assert pool.names == ["math", "parts", "gsm8k_reward"]
        got = pool.score(prompts, completions, rows)
    assert got == want
    assert want.errors == 2  # the row without an answer fails math and gsm8k: same counts both ways


def test_module_spec_resolves_in_the_workers(tmp_path, monkeypatch):
    (tmp_path / "tailrl_test_pool_rewards.py").write_text(PARTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    with RewardPool(["tailrl_test_pool_rewards:parts"], workers=1) as pool:
        assert pool.score(["p"], ["42"], [{"answer": 42}]).scores == [1.0]


def test_tickets_are_served_in_order_and_taken_once(pool):
    tickets = [pool.submit(["p"] * 2, ["ok", "raise"], [{}] * 2) for _ in range(3)]
    batches = [pool.result(t) for t in reversed(tickets)]
    assert all(b.scores == [1.0, 0.0] and b.errors == 1 for b in batches)
    with pytest.raises(KeyError):
        pool.result(tickets[0])
    assert pool.score([], [], []).scores == []


def test_close_leaves_no_processes_even_with_a_hung_call(trouble_spec):
    pool = RewardPool([trouble_spec], timeout_s=3600, workers=2)
    batch = pool.score(["p"] * 6, ["ok", "exit"] * 3, [{}] * 6)
    pids = {int(p) for p in batch.components["trouble/pid"] if p}
    pids |= set(pool.worker_pids())
    ticket = pool.submit(["p"], ["spin"], [{}])  # never returns, and the pool's own timeout never fires
    time.sleep(0.3)  # the call is running
    closer = threading.Thread(target=pool.close, daemon=True)
    closer.start()
    closer.join(120)  # a liveness guard: a close() that waited for the busy worker would never return
    assert not closer.is_alive(), "close() waited for a call that never ends"
    with pytest.raises(RuntimeError, match="closed"):
        pool.result(ticket)
    for pid in pids:
        with pytest.raises(ProcessLookupError):  # gone and reaped (a zombie would still answer)
            os.kill(pid, 0)
    pool.close()  # twice is fine


def test_unknown_or_broken_specs_fail_at_start(tmp_path):
    with pytest.raises(UserError, match="unknown reward 'nope'"):
        RewardPool(["nope"], workers=1)
    bad = tmp_path / "bad.py"
    bad.write_text("raise ImportError('no such dependency')\n")
    with pytest.raises(UserError, match="loading .*bad.py failed: ImportError: no such dependency"):
        RewardPool([f"{bad}:f"], workers=2)
    with pytest.raises(UserError, match="one per function"):
        RewardPool(["math", "format"], weights=[1.0], workers=1)


def test_build_reward_picks_pool_or_in_process():
    with build_reward(RewardConfig(functions=("gsm8k",), workers=1)) as reward:
        assert isinstance(reward, RewardPool)
        assert reward.score(["p"], ["#### 4"], [{"answer": "4"}]).scores == [1.0]
    reward = build_reward(RewardConfig(functions=("gsm8k",)))
    assert isinstance(reward, Reward)
    ticket = reward.submit(["p"], ["#### 4"], [{"answer": "4"}])  # in-process: scored when asked for
    assert reward.result(ticket).scores == [1.0]
    with pytest.raises(UserError, match="reward.workers"):
        build_reward(RewardConfig(functions=("gsm8k",), workers=-1))
