"""What the simulator replays: generation rounds of requests with known prompt and response lengths.

A round is one synchronous generation (one RL step's rollout, or one refill round). Rounds come from
a tailrl run (`traces.jsonl`, written by the trainer, or `tailrl generate --trace`), which also
carries the measured rollout time, or from a synthetic length distribution:

    log L = mu + a_prompt + e_sample,  a ~ N(0, sigma^2 - sigma_within^2),  e ~ N(0, sigma_within^2)

capped at max_len. `tail` fixes mu and sigma from two tail fractions (PAT §2.3's DeepScaleR shape:
10.85% of responses over 8K, 2.18% over 16K); `mean_len` then rescales mu to a given mean (capped
lengths) keeping the shape; `force_max` makes one response per round reach max_len
(PAT measures only such steps).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist

from tailrl.engine.telemetry import RolloutTrace
from tailrl.errors import UserError


@dataclass(frozen=True)
class Req:
    uid: int  # prompt id (samples of one prompt share it)
    sample: int
    prompt_len: int
    out_len: int


@dataclass
class Round:
    requests: list[Req]
    measured_s: float | None = None  # rollout time a real engine took (trace replays)
    meta: dict = field(default_factory=dict)

    def groups(self) -> list[list[int]]:
        by: dict[int, list[int]] = {}
        for r in self.requests:
            by.setdefault(r.uid, []).append(r.out_len)
        return list(by.values())


def lognormal_from_tail(l1: float, p1: float, l2: float, p2: float) -> tuple[float, float]:
    """(mu, sigma) of a lognormal with P(L > l1) = p1 and P(L > l2) = p2."""
    if not (l2 > l1 > 0 and 1 > p1 > p2 > 0):
        raise UserError(f"workload.tail needs l1 < l2 and p1 > p2 in (0, 1), got {l1}, {p1}, {l2}, {p2}")
    z1, z2 = NormalDist().inv_cdf(1 - p1), NormalDist().inv_cdf(1 - p2)
    sigma = (math.log(l2) - math.log(l1)) / (z2 - z1)
    return math.log(l1) - z1 * sigma, sigma


def capped_mean(mu: float, sigma: float, cap: float) -> float:
    """E[min(L, cap)] for log L ~ N(mu, sigma^2)."""
    nd, lc = NormalDist(), math.log(cap)
    return (math.exp(mu + sigma ** 2 / 2) * nd.cdf((lc - mu - sigma ** 2) / sigma)
            + cap * (1 - nd.cdf((lc - mu) / sigma)))


def mu_for_mean(mean: float, sigma: float, cap: float) -> float:
    """mu whose capped lognormal has the given mean (bisection; the capped mean rises with mu)."""
    if not 0 < mean < cap:
        raise UserError(f"workload.mean_len must be in (0, max_len={cap}), got {mean}")
    lo, hi = -10.0, math.log(cap) + 10 * sigma
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if capped_mean(mid, sigma, cap) < mean else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class LengthModel:
    mu: float
    sigma: float
    sigma_within: float
    max_len: int
    prompt_len: int

    def prompt_effect(self, rng: random.Random) -> float:
        return rng.gauss(0.0, math.sqrt(max(self.sigma ** 2 - self.sigma_within ** 2, 0.0)))

    def sample(self, a: float, rng: random.Random) -> int:
        return max(1, min(self.max_len, round(math.exp(self.mu + a + rng.gauss(0.0, self.sigma_within)))))

    def round(self, prompts: int, group: int, rng: random.Random, first_uid: int = 0, force_max: bool = False) -> Round:
        reqs = []
        for p in range(prompts):
            a = self.prompt_effect(rng)
            reqs += [Req(first_uid + p, i, self.prompt_len, self.sample(a, rng)) for i in range(group)]
        if force_max and reqs:
            j = max(range(len(reqs)), key=lambda k: reqs[k].out_len)
            reqs[j] = Req(reqs[j].uid, reqs[j].sample, reqs[j].prompt_len, self.max_len)
        return Round(reqs)


def length_model(w) -> LengthModel:
    """From a WorkloadConfig (tail fractions win over median/sigma when given; mean_len rescales)."""
    if w.tail:
        if len(w.tail) != 4:
            raise UserError("workload.tail must be [l1, p1, l2, p2], e.g. [8192, 0.1085, 16384, 0.0218]")
        mu, sigma = lognormal_from_tail(*w.tail)
    else:
        mu, sigma = math.log(w.median), w.sigma
    if w.mean_len:
        mu = mu_for_mean(w.mean_len, sigma, w.max_new_tokens)
    if not 0 <= w.sigma_within <= sigma:
        raise UserError(f"workload.sigma_within must be in [0, sigma={sigma:.3f}], got {w.sigma_within}")
    return LengthModel(mu, sigma, w.sigma_within, w.max_new_tokens, w.prompt_len)


def synthetic_rounds(w, seed: int) -> list[Round]:
    rng = random.Random(seed)
    lm = length_model(w)
    return [lm.round(w.prompts, w.group_size, rng, i * w.prompts, w.force_max) for i in range(w.steps)]


def load_trace_rounds(path: str | Path) -> list[Round]:
    """Rounds of a tailrl run folder (its traces.jsonl) or of a traces.jsonl file, with their measured
    rollout times. Errored requests are dropped (they never decoded)."""
    p = Path(path)
    if p.is_dir():
        p = p / "traces.jsonl"
    if not p.is_file():
        raise UserError(f"trace not found: {p} (tailrl train writes traces.jsonl into its run folder)")
    rounds = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            for rd in row["rounds"]:
                tr = RolloutTrace.from_json(rd)  # the engine's own trace format
                reqs = [Req(r.uid, r.sample_index, r.prompt_tokens, r.num_tokens) for r in tr.requests
                        if r.finish_reason != "error"]
                rounds.append(Round(reqs, tr.t_end, {"step": row.get("step"), "steps": rd.get("steps", [])}))
        except (KeyError, ValueError, TypeError) as e:
            raise UserError(f"{p}:{n}: not a tailrl trace row ({e!r})") from None
    if not rounds:
        raise UserError(f"{p} holds no rollouts")
    return rounds
