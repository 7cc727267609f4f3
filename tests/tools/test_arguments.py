"""Arguments are checked against the tool's schema: missing, unknown and wrongly typed ones are named."""

from typing import Literal

import pytest
from transformers.utils import get_json_schema

from tailrl.tools.arguments import check_arguments


def f(n: int, x: float, s: str, ok: bool, items: list[int], pair: tuple[int, str], table: dict[str, float],
      maybe: int | None, either: int | str, mode: Literal["a", "b"], anything: list = None) -> str:
    """Take many kinds of arguments.

    Args:
        n: An integer.
        x: A number.
        s: A string.
        ok: A boolean.
        items: Integers.
        pair: An integer and a string.
        table: Numbers by name.
        maybe: An integer or null.
        either: An integer or a string.
        mode: A or b.
        anything: Any list.
    """
    return ""


SCHEMA = get_json_schema(f)
GOOD = dict(n=1, x=2, s="s", ok=True, items=[1, 2], pair=[1, "a"], table={"k": 1.5}, maybe=None, either="e", mode="a")


def test_good_arguments_pass():
    assert check_arguments(SCHEMA, GOOD) is None
    assert check_arguments(SCHEMA, {**GOOD, "x": 2.5, "maybe": 3, "either": 4, "anything": [1, "a", None]}) is None


@pytest.mark.parametrize("change, message", [
    ({"n": 1.0}, "argument 'n': expected integer, got number"),
    ({"n": True}, "argument 'n': expected integer, got boolean"),
    ({"x": "1"}, "argument 'x': expected number, got string"),
    ({"ok": 1}, "argument 'ok': expected boolean, got integer"),
    ({"items": [1, "2"]}, "argument 'items'[1]: expected integer, got string"),
    ({"items": {"a": 1}}, "argument 'items': expected array, got object"),
    ({"pair": [1]}, "argument 'pair': expected an array of 2 items, got 1"),
    ({"pair": ["a", "b"]}, "argument 'pair'[0]: expected integer, got string"),
    ({"table": {"k": "v"}}, "argument 'table'['k']: expected number, got string"),
    ({"either": 1.5}, "argument 'either': expected integer or string, got number"),
    ({"mode": "c"}, "argument 'mode': expected one of ['a', 'b'], got 'c'"),
    ({"s": None}, "argument 's': expected string, got null"),
    ({"zzz": 1}, "unknown argument 'zzz' (takes: n, x, s, ok, items, pair, table, maybe, either, mode, anything)"),
])
def test_wrong_arguments_are_named(change, message):
    assert check_arguments(SCHEMA, {**GOOD, **change}) == message


def test_missing_and_non_object_arguments():
    assert check_arguments(SCHEMA, {k: v for k, v in GOOD.items() if k not in ("n", "s")}) == \
        "missing required arguments 'n', 's'"
    assert check_arguments(SCHEMA, [1, 2]) == "arguments must be a JSON object, got array"
