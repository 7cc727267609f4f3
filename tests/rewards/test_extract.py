"""Pure extraction helpers: boxes, tags, GSM8K hashes, numbers."""

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailrl.rewards.extract import (
    after_hashes,
    answer_tag,
    gold_answer,
    last_boxed,
    last_number,
    leading_number,
    light_normalize,
    strip_thousands,
    to_decimal,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),
        (r"\boxed{1} then \boxed{2}", "2"),
        (r"\boxed{3} and a cut-off \boxed{\frac{1}{", "3"),  # truncated last box: use the earlier one
        (r"\boxed {x^{2}}", "x^{2}"),
        (r"\fbox{7}", "7"),
        (r"\boxed{\{1,2\}}", r"\{1,2\}"),  # escaped braces do not nest
        (r"\boxed{}", ""),
        ("no box here", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


def test_answer_tag_and_hashes():
    assert answer_tag("<answer> 1 </answer> x <answer>\n42\n</answer>") == "42"
    assert answer_tag("<answer>open") is None
    assert after_hashes("work\n#### 1,000\nextra") == "1,000"
    assert after_hashes("no hashes") is None


@pytest.mark.parametrize(
    "text, expected",
    [
        ("3-5", "5"),
        ("x = -5", "-5"),
        ("1,2,3", "3"),
        ("$1,000.50 total", "1,000.50"),
        ("pi is 3.14.", "3.14"),
        ("none", None),
    ],
)
def test_last_number(text, expected):
    assert last_number(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("72 dollars", "72"),
        ("$1,000.", "1,000"),
        ("-3", "-3"),
        ("1/2", None),
        ("3x", None),
        (r"\frac{1}{2}", None),
    ],
)
def test_leading_number(text, expected):
    assert leading_number(text) == expected


def test_normalisers():
    assert to_decimal("$1,000.") == Decimal(1000)
    assert to_decimal("72.0") == to_decimal("72")
    assert to_decimal("1/2") is None and to_decimal(None) is None
    assert strip_thousands("1,000") == "1000" and strip_thousands("(1,2)") == "(1,2)"
    assert light_normalize(" $ x + 1 $ .") == "x+1"


def test_gold_answer_shapes():
    assert gold_answer("She pays 5 * 2 = 10.\n#### 10") == "10"
    assert gold_answer(r"\boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert gold_answer(72) == "72"
    with pytest.raises(ValueError):
        gold_answer(None)


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=-(10**9), max_value=10**9))
def test_grouped_numbers_round_trip(n):
    text = f"the total is {n:,} apples"
    assert to_decimal(last_number(text)) == n
