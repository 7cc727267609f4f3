"""The built-in tools, registered in TOOLS: `calculator` (safe arithmetic) and `python` (sandboxed code).

Both are plain tools like a user's (type hints, Google docstrings: their schemas come from
get_json_schema) and always return text; a bad input is an answer the model reads ("Error: ..."), not an
exception. Both are deterministic: the same input gives the same text.

`calculator` parses with `ast` and evaluates only numbers (int, float), + - * / // % **, unary + and -,
and parentheses; anything else (names, calls, attributes, strings, comparisons) is refused before any
evaluation. Sizes are bounded so no input can take long: at most `MAX_CHARS` characters, powers and
products of integers of at most `MAX_BITS` bits (checked before they are computed; sums may add a bit),
exponents of at most `MAX_EXPONENT` in size. `python` runs the code through sandbox.run_python with its default limits.
"""

from __future__ import annotations

import ast
import math
import operator

from tailrl.tools.sandbox import run_python
from tailrl.tools.schema import TOOLS

__all__ = ["MAX_BITS", "MAX_CHARS", "MAX_EXPONENT", "calculator", "python"]

MAX_CHARS = 1000
MAX_BITS = 4096  # the largest integer the calculator builds (a 1,233-digit number)
MAX_EXPONENT = 10_000

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class _Refused(ValueError):
    """The expression is not plain arithmetic, or too large to compute."""


@TOOLS.register("calculator")
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with numbers, + - * / // % **, and parentheses.

    Args:
        expression: The expression to evaluate, for example "(2 + 3) * 4 ** 2 / 7".

    Returns:
        The value, or a line starting with "Error:" saying why there is none.
    """
    if len(expression) > MAX_CHARS:
        return f"Error: the expression is longer than {MAX_CHARS} characters"
    try:
        tree = ast.parse(expression.strip(), mode="eval")
        value = _evaluate(tree.body)
    except SyntaxError as e:
        return f"Error: not a valid expression ({e.msg})"
    except _Refused as e:
        return f"Error: {e}"
    except ZeroDivisionError:
        return "Error: division by zero"
    except RecursionError:
        return "Error: the expression is nested too deeply"
    except (OverflowError, MemoryError):
        return "Error: the result is too large"
    if isinstance(value, float) and not math.isfinite(value):
        return "Error: the result is not a finite number"
    return repr(value)


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        _check_size(type(node.op), left, right)
        value = _BINARY[type(node.op)](left, right)
        if isinstance(value, complex):  # a negative number to a fractional power
            raise _Refused("the result is not a real number")
        return value
    if isinstance(node, ast.BinOp):
        raise _Refused(f"operator {type(node.op).__name__} is not allowed; use + - * / // % **")
    what = type(node.value).__name__ if isinstance(node, ast.Constant) else type(node).__name__
    raise _Refused(f"only numbers, + - * / // % ** and parentheses are allowed (found {what})")


def _check_size(op: type, left: int | float, right: int | float) -> None:
    """Refuse a power or product whose integer result would exceed MAX_BITS, before computing it."""
    if op is ast.Pow:
        if abs(right) > MAX_EXPONENT:
            raise _Refused(f"exponent {right!r} is larger than {MAX_EXPONENT}")
        if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
            if right * math.log2(abs(left)) > MAX_BITS:
                raise _Refused(f"the result of ** would have more than {MAX_BITS} bits")
    elif op is ast.Mult and isinstance(left, int) and isinstance(right, int):
        if abs(left).bit_length() + abs(right).bit_length() - 1 > MAX_BITS:
            raise _Refused(f"the result of * would have more than {MAX_BITS} bits")


@TOOLS.register("python")
def python(code: str) -> str:
    """Run Python code in a fresh sandboxed interpreter and return what it prints.

    Args:
        code: The Python program to run; use print() to show results.

    Returns:
        What the program printed (stdout, then stderr), with a note when a limit stopped it.
    """
    return run_python(code)
