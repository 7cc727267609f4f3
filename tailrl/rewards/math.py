"""Verifiable math rewards: `math` (symbolic, via math-verify), `gsm8k` (strict number), `boxed` (string).

All three read the ground truth from `row["answer"]` (GSM8K's "... #### 72" is reduced to "72") and
return 1.0 or 0.0. A missing ground truth raises, which `Reward` scores 0 and counts as an error.

math-verify guards its own parsing with signal.alarm, which only works in the main thread; rewards
run in a worker thread (see timeout.py), so its timeouts are switched off here and `Reward`'s
per-call timeout bounds the time instead (`RewardPool`'s, pool.py, when they run in worker processes).
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any

from tailrl.errors import UserError
from tailrl.rewards.extract import (
    after_hashes,
    answer_tag,
    first_number,
    gold_answer,
    last_boxed,
    last_number,
    leading_number,
    light_normalize,
    strip_thousands,
    to_decimal,
)
from tailrl.rewards.registry import register

__all__ = ["answers_match", "boxed_reward", "final_answer", "gsm8k_reward", "math_reward"]


def final_answer(completion: str) -> str | None:
    """The completion's final answer, by precedence: last balanced `\\boxed{}`, last `<answer>` tag,
    `#### x` (its leading number when it starts with one, "72 dollars" -> "72"), else the last number.
    """
    for found in (last_boxed(completion), answer_tag(completion)):
        if found is not None and found.strip():
            return found.strip()
    hashed = after_hashes(completion)
    if hashed:
        return leading_number(hashed) or hashed
    return last_number(completion)


@register("math")
def math_reward(prompt: str, completion: str, answer: Any = None, **row: Any) -> float:
    """1.0 if the completion's final answer equals the ground truth mathematically (1/2 == 0.5 == \\frac{1}{2})."""
    gold = gold_answer(answer)
    pred = final_answer(completion)
    return 1.0 if pred is not None and answers_match(gold, pred) else 0.0


def answers_match(gold: str, pred: str) -> bool:
    """Equal as strings after light normalisation, or equivalent according to math-verify.

    Integers are compared directly (math-verify spends ~1.5 ms parsing each through LaTeX, and GSM8K
    style answers are nearly all integers); other numbers and expressions go to math-verify, whose
    parses are cached because a group's G completions share one ground truth and repeat answers.
    """
    if light_normalize(gold) and light_normalize(gold) == light_normalize(pred):
        return True
    gold_number, pred_number = to_decimal(gold), to_decimal(pred)
    if gold_number is not None and pred_number is not None:
        if gold_number == pred_number:
            return True
        if _is_integer_text(gold) and _is_integer_text(pred):
            return False
    gold_parsed, pred_parsed = _parse(_as_latex(gold)), _parse(_as_latex(pred))
    if not gold_parsed or not pred_parsed:
        return False
    _, verify = _math_verify()
    # Argument order matters to math-verify: gold first.
    return bool(verify(list(gold_parsed), list(pred_parsed), timeout_seconds=None))


def _is_integer_text(text: str) -> bool:
    return "." not in text.strip().rstrip(".")


@lru_cache(maxsize=4096)
def _parse(latex: str) -> tuple:
    """math-verify's parse of one `$...$` answer (a tuple: cached values must not be mutated)."""
    parse, _ = _math_verify()
    return tuple(parse(latex, parsing_timeout=None))


def _as_latex(answer: str) -> str:
    """A bare answer wrapped in `$...$` so math-verify reads it as LaTeX; "1,000" becomes "1000"."""
    s = answer.strip()
    if len(s) >= 2 and s.startswith("$") and s.endswith("$") and not s.endswith("\\$"):
        s = s.strip("$").strip()
    return f"${strip_thousands(s)}$"


@lru_cache(maxsize=1)
def _math_verify():
    """Import math-verify on first use (it pulls in sympy: ~1 s with the first parse) and silence its
    one-time warning that its own timeouts are off: we disable them on purpose (see module docstring)."""
    from math_verify import parse, verify  # lazy: sympy takes ~1 s; loaded once, by prepare()

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(_drop_timeout_disabled_warning)
    return parse, verify


def _prepare() -> None:
    """Warm math-verify up (import, grammar, sympy caches) before the first timed call, and fail at
    startup if it cannot parse LaTeX: math-verify swallows parser errors, so a broken install (e.g. an
    antlr4 runtime pinned to another version by a different package) would otherwise score every
    completion 0 without a single counted error."""
    try:
        ok = answers_match("\\frac{1}{2}", "0.5")
    except ImportError as e:
        raise UserError(f"reward 'math' needs math-verify: pip install 'math-verify>=0.7' ({e})") from e
    if not ok:
        raise UserError(
            "reward 'math': math-verify cannot parse LaTeX here (check that antlr4-python3-runtime matches "
            "latex2sympy2_extended: pip install 'math-verify[antlr4_13_2]')"
        )


math_reward.prepare = _prepare  # type: ignore[attr-defined]  (see registry: optional prepare hook)


def _drop_timeout_disabled_warning(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Timeout is disabled")


@register("gsm8k")
def gsm8k_reward(prompt: str, completion: str, answer: Any = None, **row: Any) -> float:
    """1.0 if the completion's number equals the GSM8K ground truth exactly (commas, `$`, "72.0" allowed).

    The completion's number is the first one after its last `####`, else its last number.
    """
    gold = to_decimal(first_number(gold_answer(answer)))
    if gold is None:
        raise ValueError(f"gsm8k ground truth is not a number: {answer!r}")
    hashed = after_hashes(completion)
    pred = first_number(hashed) if hashed is not None else last_number(completion)
    return 1.0 if to_decimal(pred) == gold else 0.0


@register("boxed")
def boxed_reward(prompt: str, completion: str, answer: Any = None, **row: Any) -> float:
    """1.0 if the last `\\boxed{}` equals the ground truth after light normalisation (no math parsing)."""
    gold = light_normalize(gold_answer(answer))
    boxed = last_boxed(completion)
    return 1.0 if boxed is not None and gold and light_normalize(boxed) == gold else 0.0
