"""User rewards named as package.module:function or path/to/file.py:function."""

import textwrap

import pytest

from tailrl.errors import UserError
from tailrl.rewards import Reward

SOURCE = textwrap.dedent(
    """
    def exact(prompt, completion, answer=None, **row):
        return float(completion.strip() == str(answer))

    def with_parts(prompt, completion, **row):
        return {"score": 1.0, "chars": len(completion)}

    def two_args(prompt):
        return 1.0

    NOT_CALLABLE = 3
    """
)


@pytest.fixture
def module_dir(tmp_path, monkeypatch):
    (tmp_path / "tailrl_test_user_rewards.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_module_function(module_dir):
    reward = Reward(["tailrl_test_user_rewards:exact", "tailrl_test_user_rewards:with_parts"])
    batch = reward.score(["p", "p"], ["42", "41"], [{"answer": "42"}] * 2)
    assert reward.names == ["exact", "with_parts"]
    assert batch.components["exact"] == [1.0, 0.0]
    assert batch.components["with_parts/chars"] == [2.0, 2.0]
    assert batch.scores == [2.0, 1.0]


def test_installed_package_module_function():
    reward = Reward(["tailrl.rewards.math:gsm8k_reward"])
    assert reward.names == ["gsm8k_reward"]
    assert reward.score(["p"], ["#### 3"], [{"answer": "3"}]).scores == [1.0]


def test_file_function(tmp_path):
    path = tmp_path / "my rewards.py"
    path.write_text(SOURCE)
    reward = Reward([f"{path}:exact"])
    assert reward.score(["p"], ["7"], [{"answer": 7}]).scores == [1.0]
    assert Reward([f"{path}:exact"]).functions[0] is reward.functions[0]  # loaded once


@pytest.mark.parametrize(
    "spec, match",
    [
        ("no_such_module_xyz:f", "no module named 'no_such_module_xyz'"),
        ("tailrl_test_user_rewards:missing", "has no 'missing'.*exact"),
        ("tailrl_test_user_rewards:NOT_CALLABLE", "not callable"),
        ("tailrl_test_user_rewards:two_args", r"must accept \(prompt, completion"),
        ("missing/file.py:f", "file not found"),
        (":f", "unknown reward"),
        ("tailrl_test_user_rewards:", "unknown reward"),
    ],
)
def test_bad_user_specs(module_dir, spec, match):
    with pytest.raises(UserError, match=match):
        Reward([spec])


def test_file_that_fails_to_load(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import no_such_dependency_xyz\n")
    with pytest.raises(UserError, match="loading .*broken.py failed: ModuleNotFoundError"):
        Reward([f"{path}:f"])
    path.write_text("def f(:\n")
    with pytest.raises(UserError, match="SyntaxError"):
        Reward([f"{path}:f"])
