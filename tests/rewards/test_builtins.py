"""Built-in rewards on representative right and wrong answers."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailrl.rewards import REWARDS
from tailrl.rewards.math import final_answer

GSM8K_GOLD = "Natalia sold 48/2 = 24 clips in May.\nShe sold 48+24 = 72 clips.\n#### 72"


def score(name, completion, answer, **row):
    return REWARDS[name]("prompt", completion, answer=answer, **row)


@pytest.mark.parametrize(
    "completion, answer",
    [
        (r"Thus the answer is $\boxed{\frac{1}{2}}$.", "0.5"),
        (r"\boxed{0.5}", r"\frac{1}{2}"),
        (r"\boxed{\dfrac{\sqrt{3}}{2}}", r"\frac{1}{2}\sqrt{3}"),
        (r"\boxed{1+x^2}", "x^2 + 1"),
        ("Step 1 ... #### 1,000", "1000"),
        ("#### 72 dollars", GSM8K_GOLD),
        ("so she sold 72 clips", GSM8K_GOLD),
        ("<answer>\\frac{3}{4}</answer>", "0.75"),
        (r"\boxed{\text{Evelyn}}", r"\text{Evelyn}"),
        (r"\boxed{1,000}", "#### 1,000"),
        (r"\boxed{7}", 7),  # numeric ground truth from JSON
        ("#### 5.0", "5"),
        (r"\boxed{50\%}", "50"),
    ],
)
def test_math_positive(completion, answer):
    assert score("math", completion, answer) == 1.0


@pytest.mark.parametrize(
    "completion, answer",
    [
        (r"\boxed{\frac{1}{3}}", "0.5"),
        ("#### 71", GSM8K_GOLD),
        ("I do not know", GSM8K_GOLD),
        (r"\boxed{2} ... wait, last number 72", GSM8K_GOLD),  # the box wins over later numbers
        ("", "1"),
        (r"\boxed{-3}", "3"),
        (r"\boxed{0.3333}", r"\frac{1}{3}"),  # math-verify rounds to 6 places, not 4
    ],
)
def test_math_negative(completion, answer):
    assert score("math", completion, answer) == 0.0


def test_final_answer_precedence():
    assert final_answer(r"\boxed{3} <answer>4</answer> #### 5 6") == "3"
    assert final_answer("<answer>4</answer> #### 5 6") == "4"
    assert final_answer("#### 5 6") == "5"
    assert final_answer("#### 1/2") == "1/2"
    assert final_answer("a 5 b 6") == "6"
    assert final_answer("nothing") is None


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("#### 1,000", 1.0),
        ("so 2 + 3 = 1000", 1.0),
        ("#### $1000.00", 1.0),
        ("#### 1001", 0.0),
        ("#### 1000 because 3 * 4 = 12", 1.0),  # first number after ####
        ("no number", 0.0),
        (r"\boxed{\frac{2000}{2}}", 0.0),  # strict: no symbolic evaluation
    ],
)
def test_gsm8k(completion, expected):
    assert score("gsm8k", completion, "We get 1,000.\n#### 1,000") == expected


def test_gsm8k_non_numeric_gold_raises():
    with pytest.raises(ValueError):
        score("gsm8k", "#### 1", "#### seven")


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=-(10**7), max_value=10**7))
def test_gsm8k_and_math_accept_any_grouped_integer(n):
    gold = f"work\n#### {n}"
    assert score("gsm8k", f"#### {n:,}", gold) == 1.0
    assert score("gsm8k", f"#### {n + 1:,}", gold) == 0.0
    assert score("math", f"#### {n:,}", gold) == 1.0


@pytest.mark.parametrize(
    "completion, answer, expected",
    [
        (r"\boxed{ 42 }.", "42", 1.0),
        (r"\boxed{$x+1$}", "x + 1", 1.0),
        (r"\boxed{42.}", "#### 42", 1.0),
        (r"\boxed{\frac{1}{2}}", "0.5", 0.0),  # no math parsing in `boxed`
        ("42", "42", 0.0),  # not boxed
        (r"\boxed{}", "", 0.0),
    ],
)
def test_boxed(completion, answer, expected):
    assert score("boxed", completion, answer) == expected


@pytest.mark.parametrize(
    "completion, expected",
    [
        (r"answer: \boxed{3}", 1.0),
        ("<answer>3</answer>", 1.0),
        (r"\boxed{ }", 0.0),
        ("<answer></answer>", 0.0),
        (r"\boxed{3", 0.0),
        ("3", 0.0),
    ],
)
def test_format(completion, expected):
    assert REWARDS["format"]("p", completion) == expected


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("<think>reason</think>\n<answer>3</answer>", 1.0),
        ("reason</think> <answer>3</answer>\n", 1.0),  # <think> was in the prompt
        ("<think>r</think><answer>3</answer> trailing", 0.0),
        ("<think>r</think><answer> </answer>", 0.0),
        ("<answer>3</answer>", 0.0),
        ("<think>a</think><think>b</think><answer>3</answer>", 0.0),
    ],
)
def test_think_format(completion, expected):
    assert REWARDS["think_format"]("p", completion) == expected


def test_builtins_ignore_unknown_row_keys():
    for name in ("math", "gsm8k", "boxed", "format", "think_format"):
        plain = REWARDS[name]("p", r"\boxed{1}", answer="1")
        extra = REWARDS[name]("p", r"\boxed{1}", answer="1", id=3, split="train", meta={"x": 1})
        assert extra == plain, name  # the extra keys change nothing
    assert REWARDS["math"]("p", r"\boxed{1}", answer="1", id=3) == 1.0


def test_math_prepare_fails_loudly_when_latex_parsing_is_broken(monkeypatch):
    from tailrl.errors import UserError
    from tailrl.rewards import math as math_rewards

    monkeypatch.setattr(math_rewards, "_parse", lambda latex: ())
    with pytest.raises(UserError, match="cannot parse LaTeX"):
        math_rewards.math_reward.prepare()
