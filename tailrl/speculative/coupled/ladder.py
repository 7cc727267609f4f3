"""The draft ladder (SpecActor section 4.2): the speed-up of each drafter as a function of the acceptance
rate, used to pick the drafter that starts a rollout (the ladder's best at the historically observed
acceptance).

It needs no trained model: drafting cost does not depend on what the target would accept, and the
verification can be simulated by accepting each drafted token at random with probability alpha. The
profile (`tailrl profile ladder`) measures real forward times of the target at each batch size and
window, and real proposal times of each drafter; `simulate` then runs Monte-Carlo rollouts of a batch
whose requests shrink as they finish, with random accept/reject, coupled verification and the best
window per alpha, against plain decoding of the same lengths. Without a profile, `Ladder.analytic`
gives the batch-1 value from the engine's online cost model.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from tailrl.errors import UserError
from tailrl.speculative.window import expected_tokens

ALPHAS = tuple(round(0.1 * i, 1) for i in range(1, 10)) + (0.95,)


@dataclass
class Ladder:
    alphas: list[float]
    table: dict[str, list[float]] = field(default_factory=dict)  # drafter -> speed-up per alpha
    meta: dict = field(default_factory=dict)

    def speedup(self, name: str, alpha: float) -> float:
        """Piecewise-linear in alpha between profiled points (clamped at the ends)."""
        xs, ys = self.alphas, self.table[name]
        if alpha <= xs[0]:
            return ys[0]
        for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
            if alpha <= x1:
                return y0 + (y1 - y0) * (alpha - x0) / (x1 - x0)
        return ys[-1]

    def best(self, alphas: dict[str, float]) -> str:
        return max(alphas, key=lambda n: self.speedup(n, alphas[n]))

    @staticmethod
    def analytic(alpha: float, c0: float, c1: float, draft_s: float, k_max: int) -> float:
        """Batch-1 speed-up of the best window: E[tokens per verify] x t_decode / (t_verify + drafting)."""
        t_dec = c0 + c1
        return max(expected_tokens(alpha, k) * t_dec / (c0 + c1 * (k + 1) + draft_s * k) for k in range(k_max + 1))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps({"alphas": self.alphas, "table": self.table, "meta": self.meta}, indent=1))

    @classmethod
    def load(cls, path: str | Path) -> Ladder:
        try:
            d = json.loads(Path(path).read_text())
            return cls(list(d["alphas"]), {k: list(v) for k, v in d["table"].items()}, d.get("meta", {}))
        except (OSError, KeyError, ValueError) as e:
            raise UserError(f"cannot read draft ladder {path}: {e}") from e


def interp(table: dict[int, float], b: int) -> float:
    """Value at batch size b, linear between the profiled batch sizes (clamped)."""
    xs = sorted(table)
    if b <= xs[0]:
        return table[xs[0]]
    for x0, x1 in zip(xs, xs[1:]):
        if b <= x1:
            return table[x0] + (table[x1] - table[x0]) * (b - x0) / (x1 - x0)
    return table[xs[-1]]


def simulate(alpha: float, k: int, lengths: list[int], t_forward: dict[int, dict[int, float]],
             draft_s: float, rng: random.Random) -> float:
    """Seconds to generate `lengths` tokens for a batch with coupled speculation at window k and random
    acceptance alpha; t_forward[n_per_row][batch] = measured forward seconds (k = 0: plain decoding)."""
    left = list(lengths)
    total = 0.0
    while left:
        b = len(left)
        total += interp(t_forward[k + 1], b) + draft_s * k * b
        nxt = []
        for n in left:
            a = 0
            while a < k and rng.random() < alpha:
                a += 1
            n -= a + 1
            if n > 0:
                nxt.append(n)
        left = nxt
    return total
