"""Pure text helpers shared by the built-in rewards: find the final answer in a completion.

Completions are free text written by a policy mid-training, so every helper returns None for
"nothing found" instead of raising, and nothing here imports a math library (cheap to test).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# A number as written in math word problems: optional sign, thousands groups ("1,000") or plain
# digits, optional decimals. The sign only counts when it cannot be a binary minus ("3-5" -> 5).
_NUMBER = re.compile(r"(?:(?<![\w)\]}])-)?(?<![\d.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_PLAIN_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_LEADING_NUMBER = re.compile(r"\s*\\?\$?\s*(" + _PLAIN_NUMBER.pattern + r")(?![\w/^{]|[,.]\d)")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_BOX_COMMANDS = ("\\boxed", "\\fbox")


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`) whose braces balance, else None.

    A completion cut off by the token limit often ends inside an open box; that box is skipped and
    an earlier, complete one is used. Escaped braces (`\\{`, `\\}`) do not count as nesting.
    """
    starts = sorted(m.start() for cmd in _BOX_COMMANDS for m in re.finditer(re.escape(cmd) + r"\s*\{", text))
    for start in reversed(starts):
        open_at = text.index("{", start)
        content = _balanced(text, open_at)
        if content is not None:
            return content
    return None


def _balanced(text: str, open_at: int) -> str | None:
    """Text between text[open_at] == '{' and its matching '}', or None if it never closes."""
    depth, i = 0, open_at
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i]
        i += 1
    return None


def answer_tag(text: str) -> str | None:
    """Content of the last `<answer>...</answer>` pair (stripped), else None."""
    found = _ANSWER_TAG.findall(text)
    return found[-1].strip() if found else None


def after_hashes(text: str) -> str | None:
    """GSM8K style: the rest of the line after the last `####`, stripped; None without `####`."""
    if "####" not in text:
        return None
    tail = text.rsplit("####", 1)[1].strip()
    return tail.splitlines()[0].strip() if tail else ""


def last_number(text: str) -> str | None:
    found = _NUMBER.findall(text)
    return found[-1] if found else None


def first_number(text: str) -> str | None:
    found = _NUMBER.search(text)
    return found.group(0) if found else None


def leading_number(text: str) -> str | None:
    """The number a `#### ...` answer starts with ("72 dollars" -> "72", "$1,000." -> "1,000"), else None.

    None when the number is only the start of an expression ("1/2", "2^3", "3x"), so the caller can
    hand the whole expression to a math parser instead.
    """
    m = _LEADING_NUMBER.match(text)
    return m.group(1) if m else None


def to_decimal(text: str | None) -> Decimal | None:
    """'1,000' -> Decimal('1000'); '$72.' -> Decimal('72'); anything that is not one number -> None."""
    if text is None:
        return None
    s = text.strip().rstrip(".").replace("\\$", "").replace("$", "").strip()
    if not _PLAIN_NUMBER.fullmatch(s):
        return None
    try:
        return Decimal(s.replace(",", ""))
    except InvalidOperation:
        return None


def strip_thousands(text: str) -> str:
    """'1,000' -> '1000' only when the whole string is one grouped number (so '(1,2)' stays a pair)."""
    s = text.strip()
    return s.replace(",", "") if _PLAIN_NUMBER.fullmatch(s) else s


def light_normalize(text: str) -> str:
    """Whitespace, `$` signs and a trailing period removed: enough for exact-string answer checks."""
    s = re.sub(r"\s+", "", text).replace("$", "")
    return s.rstrip(".")


def gold_answer(answer: object) -> str:
    """The ground truth as a bare answer string.

    Datasets store it in several shapes: GSM8K keeps a worked solution ending in `#### 72`, MATH
    style sets sometimes keep `\\boxed{...}`, JSON may give a number. All become e.g. "72".
    """
    if answer is None:
        raise ValueError("row has no 'answer' (ground truth) for this reward")
    s = str(answer).strip()
    hashed = after_hashes(s)
    if hashed is not None:
        return hashed
    boxed = last_boxed(s)
    return boxed.strip() if boxed is not None else s
