"""The embedded default task: chained arithmetic with stochastic re-checks and reviews.

    prompt      "7+5-3+8="
    completion  "7+5=12;12-3=9;9+8=17;>17"                              (most samples)
                "7+5=12;12-3=9;9+8=17;|7+5=12;12-3=9;9+8=17;|...>17"    (a review: rare, 2-4x longer)

Each step computes one partial sum; after a step the solver may write it again ("re-check") a
geometric number of times (probability `p_recheck` each). After the chain it may, rarely
(probability `p_review`), review the whole chain again, and again with probability 1/2 each time,
up to `max_reviews`. Both counts are drawn per sample, so the G completions of one prompt differ in
length only by how often they re-check and review: a long tail *within* a group, which is what SAGC,
speculation and PAT are about. A rare whole-chain review makes the straggler rate of a group grow
with G like 1 - (1 - p_review)^G, the shape SAGC trades against group size. The answer is verifiable: the
number after '>'. Splits are disjoint by construction: a problem belongs to the test split iff a
stable hash of its text falls in the test bucket.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

VOCAB = list("0123456789+-=;>|")  # the demo tokenizer's characters (plus <pad>, <s>, </s>)


@dataclass(frozen=True)
class DemoTask:
    min_terms: int = 3
    max_terms: int = 5
    max_operand: int = 9
    p_recheck: float = 0.35
    max_rechecks: int = 6  # per step, so lengths stay within the generation budget
    p_review: float = 0.0
    max_reviews: int = 3
    test_fraction: float = 0.1

    def problem(self, rng: random.Random) -> tuple[str, int]:
        """A random expression 'a+b-c=' and its value."""
        n = rng.randint(self.min_terms, self.max_terms)
        terms = [rng.randint(1, self.max_operand) for _ in range(n)]
        ops = [rng.choice("+-") for _ in range(n - 1)]
        text = str(terms[0]) + "".join(o + str(t) for o, t in zip(ops, terms[1:])) + "="
        return text, self.evaluate(text)

    @staticmethod
    def evaluate(prompt: str) -> int:
        expr = prompt.rstrip("=")
        total, num, sign = 0, "", 1
        for ch in expr + "+":
            if ch.isdigit():
                num += ch
            else:
                total += sign * int(num)
                num, sign = "", (1 if ch == "+" else -1)
        return total

    def solution(self, prompt: str, rng: random.Random) -> str:
        """Chain-of-thought with a random number of re-checks per step; ends with '>answer'."""
        expr = prompt.rstrip("=")
        parts, cur = [], ""
        for ch in expr:
            if ch in "+-" and cur:
                parts.append(cur)
                cur = ch
            else:
                cur += ch
        parts.append(cur)
        acc = int(parts[0])
        out = []
        for p in parts[1:]:
            op, val = p[0], int(p[1:])
            new = acc + val if op == "+" else acc - val
            step = f"{acc}{op}{val}={new};"
            k = 0
            while k < self.max_rechecks and rng.random() < self.p_recheck:
                k += 1
            out.append(step * (1 + k))
            acc = new
        chain = "".join(out)
        reviews = 0
        if rng.random() < self.p_review:
            reviews = 1
            while reviews < self.max_reviews and rng.random() < 0.5:
                reviews += 1
        return chain + ("|" + chain) * reviews + f">{acc}"

    def in_test_split(self, prompt: str) -> bool:
        h = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:4], "big")
        return h < self.test_fraction * 2**32

    def rows(self, n: int, split: str, seed: int, with_solution: bool = False) -> list[dict]:
        """n rows {"prompt", "answer"[, "solution"]} of one split (train/test), seeded."""
        rng = random.Random(f"{seed}-{split}")
        rows = []
        tries = 0
        while len(rows) < n:
            tries += 1
            if tries > 1000 * n:
                raise ValueError(f"cannot draw {n} {split} problems from this task's space")
            prompt, ans = self.problem(rng)
            if self.in_test_split(prompt) != (split == "test"):
                continue
            row = {"prompt": prompt, "answer": str(ans)}
            if with_solution:
                row["solution"] = self.solution(prompt, rng)
            rows.append(row)
        return rows


def parse_answer(completion: str) -> str | None:
    """The number after the last '>' (None when there is none)."""
    if ">" not in completion:
        return None
    tail = completion.rsplit(">", 1)[1].strip()
    num = ""
    for i, ch in enumerate(tail):
        if ch.isdigit() or (ch == "-" and i == 0):
            num += ch
        else:
            break
    return num if num and num != "-" else None
