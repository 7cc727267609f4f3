"""Row schemas: turn one raw row of a known dataset shape into (question | messages, answer, row).

load_dataset (datasets.py) reads records from a container (JSONL, parquet, a `datasets` folder,
reasoning-gym) and hands each dict to one schema reader from SCHEMAS. A reader raises RowError for a
row it cannot use; the loader then skips and counts it, or fails, as data.on_bad_row says. Readers
know their own fields; only the generic reader follows data.prompt_field / messages_field / answer_field.

Schemas (what the public files look like):
  generic    {prompt_field: str} or {messages_field: [{role, content}, ...]}, plus answer_field
  gsm8k      {"question", "answer": "...reasoning...\\n#### 42"}            -> answer "42"
  math500    {"problem", "answer", ...}; an answer-less MATH row's last \\boxed{} in "solution" is used
  dapo_math  {"prompt": [{role, content}], "reward_model": {"ground_truth"}, ...} (verl parquet)
  reasoning_gym  entries of reasoning_gym.create_dataset: {"question", "answer", "metadata"}
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from typing import Any, NamedTuple

from tailrl.config import DataConfig
from tailrl.errors import UserError


class RowError(ValueError):
    """A row that cannot become an Example; the message names the missing or bad field."""


class Parsed(NamedTuple):
    question: str | None  # user question text, or None when the row brings its own messages
    messages: list[dict] | None  # the row's own chat turns
    answer: str | None
    row: dict  # fields handed to rewards (JSON-able); the loader sets row["answer"]


def jsonable(value: Any) -> Any:
    """Rows go to rewards, logs and checkpoints: tuples, numpy scalars, bytes become JSON types."""
    return json.loads(json.dumps(value, default=str))


def get_field(row: dict, name: str) -> Any:
    """row[name], or a dotted path into nested dicts ("reward_model.ground_truth"); None if absent."""
    if name in row:
        return row[name]
    node: Any = row
    for part in name.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def answer_str(value: Any) -> str:
    """Ground truth as text; 27.0 (AMC/AIME JSON floats) becomes "27" so string checks still match."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value).strip()


def _fields(row: dict) -> str:
    return ", ".join(sorted(map(str, row))) or "none"


def check_messages(msgs: Any, name: str) -> list[dict]:
    if not isinstance(msgs, (list, tuple)) or not msgs:
        raise RowError(f"field '{name}' must be a non-empty list of {{role, content}} objects")
    out = []
    for m in msgs:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise RowError(f"field '{name}' must be a list of {{role, content}} objects with string values")
        out.append(dict(m))
    if not any(m["role"] == "user" for m in out):
        raise RowError(f"field '{name}' has no user turn")
    return out


def _question(row: dict, name: str) -> str:
    q = get_field(row, name)
    if q is None:
        raise RowError(_missing(row, name))
    if not isinstance(q, str):
        raise RowError(f"field '{name}' must be a string, got {type(q).__name__}")
    if not q.strip():
        raise RowError(f"field '{name}' is empty")
    return q


def _missing(row: dict, name: str) -> str:
    return f"field '{name}' is null" if name in row else f"missing field '{name}' (row has: {_fields(row)})"


def _answer(row: dict, name: str) -> str:
    a = get_field(row, name)
    if a is None:
        raise RowError(_missing(row, name))
    text = answer_str(a)
    if not text:
        raise RowError(f"field '{name}' is empty")
    return text


def read_generic(row: dict, cfg: DataConfig) -> Parsed:
    """Field mapping: messages_field wins when present, else prompt_field; answer_field="" = no answers."""
    msgs = get_field(row, cfg.messages_field) if cfg.messages_field else None
    if msgs is not None:
        messages, question = check_messages(msgs, cfg.messages_field), None
    else:
        if cfg.prompt_field not in row and get_field(row, cfg.prompt_field) is None:
            alt = f" (or '{cfg.messages_field}')" if cfg.messages_field else ""
            raise RowError(f"missing field '{cfg.prompt_field}'{alt} (row has: {_fields(row)})")
        messages, question = None, _question(row, cfg.prompt_field)
    answer = _answer(row, cfg.answer_field) if cfg.answer_field else None
    return Parsed(question, messages, answer, dict(row))


def gsm8k_answer(solution: str) -> str:
    """The number after the last '####' with thousands commas removed ("#### 1,080" -> "1080")."""
    if "####" not in solution:
        raise RowError("field 'answer' has no '#### <number>' line (not a GSM8K solution)")
    ans = solution.rsplit("####", 1)[1].strip().replace(",", "")
    if not ans:
        raise RowError("field 'answer' has nothing after '####'")
    return ans


def read_gsm8k(row: dict, cfg: DataConfig) -> Parsed:
    question = _question(row, "question")
    solution = row.get("answer")
    if not isinstance(solution, str):
        raise RowError(_missing(row, "answer") if solution is None else "field 'answer' must be a string")
    out = dict(row)
    out.setdefault("solution", solution)  # keep the worked solution; row["answer"] becomes the number
    return Parsed(question, None, gsm8k_answer(solution), out)


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}), braces matched; None if there is none."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth, j = 1, i
    while j < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        j += 1
    return text[i:j - 1].strip() if depth == 0 else None


def read_math500(row: dict, cfg: DataConfig) -> Parsed:
    question = _question(row, "problem")
    if row.get("answer") is not None:
        answer = _answer(row, "answer")
    elif isinstance(row.get("solution"), str) and (boxed := last_boxed(row["solution"])):
        answer = boxed  # full MATH rows carry the answer only inside the solution
    else:
        raise RowError(f"{_missing(row, 'answer')} and no \\boxed{{}} in a 'solution' field")
    return Parsed(question, None, answer, dict(row))


def read_dapo_math(row: dict, cfg: DataConfig) -> Parsed:
    messages = check_messages(row.get("prompt"), "prompt")
    answer = _answer(row, "reward_model.ground_truth")
    return Parsed(None, messages, answer, dict(row))


def read_reasoning_gym(row: dict, cfg: DataConfig) -> Parsed:
    """Answer may be None: some gym tasks accept many answers and only the gym's scorer can judge."""
    question = _question(row, "question")
    answer = None if row.get("answer") is None else answer_str(row["answer"])
    return Parsed(question, None, answer, dict(row))


SCHEMAS: dict[str, Callable[[dict, DataConfig], Parsed]] = {
    "generic": read_generic,
    "gsm8k": read_gsm8k,
    "math500": read_math500,
    "dapo_math": read_dapo_math,
    "reasoning_gym": read_reasoning_gym,
}


def detect_schema(row: dict, cfg: DataConfig) -> str:
    """Named schema from a row's fields when its signature is unambiguous, else generic.

    A row that has the configured messages/prompt field as a string or chat list is generic unless it
    also carries a named signature that the generic mapping would misread (DAPO's "prompt" is a list
    of turns with the answer nested in reward_model; GSM8K's "answer" is a whole worked solution).
    """
    if isinstance(row.get("prompt"), list) and isinstance(row.get("reward_model"), dict) \
            and "ground_truth" in row["reward_model"]:
        return "dapo_math"
    if isinstance(row.get("question"), str) and isinstance(row.get("answer"), str) and "####" in row["answer"]:
        return "gsm8k"
    generic_hit = get_field(row, cfg.prompt_field) is not None or (
        bool(cfg.messages_field) and get_field(row, cfg.messages_field) is not None)
    if not generic_hit and isinstance(row.get("problem"), str) and ("answer" in row or "solution" in row):
        return "math500"
    return "generic"


def reasoning_gym_rows(task: str, size: int, seed: int, args: dict | None = None) -> list[dict]:
    """Generate a reasoning-gym task offline; each row keeps the entry's metadata and the task name."""
    try:
        # lazy: optional dependency (the [gym] extra)
        import reasoning_gym
    except ImportError as e:
        raise UserError('reasoning-gym sources need the reasoning-gym package: pip install "tailrl[gym]" '
                        "(or pip install reasoning-gym)") from e
    # lazy: optional dependency (the [gym] extra)
    from reasoning_gym.factory import DATASETS

    if task not in DATASETS:

        close = difflib.get_close_matches(task, list(DATASETS), n=5, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UserError(f"unknown reasoning_gym task '{task}'{hint} ({len(DATASETS)} tasks: "
                        "python -c 'import reasoning_gym.factory as f; print(sorted(f.DATASETS))')")
    if size <= 0:
        raise UserError(f"data.reasoning_gym_size must be positive, got {size}")
    try:
        ds = reasoning_gym.create_dataset(task, size=size, seed=seed, **(args or {}))
    except Exception as e:  # the gym validates its own config; its message is the story
        raise UserError(f"reasoning_gym task '{task}' could not be created: {e}") from e
    rows = []
    for entry in ds:
        row = jsonable(dict(entry))
        row["reasoning_gym_task"] = task
        rows.append(row)
    return rows

