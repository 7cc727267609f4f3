"""Requests for `tailrl bench exactness --model`: GSM8K-style questions through the model's chat template,
`group` samples each — what an RL rollout of a real model samples.

The questions come from a JSONL file (`--prompts`, a "question" or "prompt" field per row, e.g. GSM8K's
test.jsonl) or, without one, from `word_problems`: grade-school word problems generated from templates with
seeded numbers (no download; what the tests use).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tailrl.engine import Request, SamplingParams
from tailrl.errors import UserError

_TEMPLATES = (
    "{a} sold {b} clips to her friends in April, and then she sold half as many clips in May. How many clips did "
    "{a} sell altogether in April and May?",
    "{a} earns ${b} an hour for babysitting. Yesterday, she did {c} minutes of babysitting. How much did she earn?",
    "{a} is saving money for a new bike which costs ${d}. {a} has {b} dollars. Her parents give her ${c} and her "
    "grandparents twice as much as her parents. How much more money does {a} need to buy the bike?",
    "{a} writes a {b}-page letter to {c} different friends twice a week. How many pages does {a} write a year?",
    "A farmer has {d} apples. He gives {b} apples to each of his {c} neighbours. How many apples are left?",
    "{a} reads {b} pages on Monday and {c} more pages on Tuesday than on Monday. How many pages did {a} read in "
    "the two days?",
    "A train travels {d} miles in {c} hours. At the same speed, how far does it travel in {b} hours?",
    "{a} buys {c} packs of pencils with {b} pencils in each pack and gives away {e} pencils. How many pencils "
    "does {a} have now?",
)
_NAMES = ("Natalia", "Weng", "Betty", "James", "Maria", "Tom", "Aisha", "Ken", "Lucia", "Omar")


def word_problems(n: int, seed: int = 0) -> list[str]:
    """n distinct-ish word problems (templates x names x seeded numbers)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        b, c = rng.randint(2, 60), rng.randint(2, 12)
        out.append(_TEMPLATES[i % len(_TEMPLATES)].format(a=rng.choice(_NAMES), b=b, c=c, d=rng.randint(100, 900),
                                                          e=rng.randint(1, b)))
    return out


def read_questions(path: str | Path, n: int) -> list[str]:
    """The first n questions of a JSONL file (field "question", else "prompt")."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"--prompts {p}: no such file")
    out = []
    for i, line in enumerate(p.read_text(encoding="utf-8").splitlines()):
        if len(out) == n:
            break
        try:
            row = json.loads(line)
            out.append(str(row.get("question") or row["prompt"]))
        except (json.JSONDecodeError, KeyError, AttributeError):
            raise UserError(f"--prompts {p}: line {i + 1} is not a JSON object with a 'question' or 'prompt'") from None
    if len(out) < n:
        raise UserError(f"--prompts {p}: {len(out)} questions, {n} needed")
    return out


def chat_ids(tokenizer, question: str) -> list[int]:
    """The question as a user turn through the tokenizer's chat template, ready for the assistant's answer."""
    ids = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                        tokenize=True)
    if hasattr(ids, "keys"):  # transformers >= 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def chat_requests(tokenizer, questions: list[str], sequences: int, group: int, new_tokens: int, temperature: float,
                  seed: int) -> list[Request]:
    """ceil(sequences / group) questions with `group` samples each (the last the remainder), up to new_tokens
    each, stopping at EOS (real lengths)."""
    params = SamplingParams(temperature=temperature, max_new_tokens=new_tokens, seed=seed)
    n = -(-sequences // group)
    return [Request(chat_ids(tokenizer, q), uid=i, n=min(group, sequences - i * group), params=params)
            for i, q in enumerate(questions[:n])]
