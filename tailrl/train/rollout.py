"""The rollout phase of one step: prompts -> engine -> rewards -> groups (with DAPO refills).

Groups carry everything later stages need; no loose dicts cross into the update.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from tailrl.engine import Engine, Request, Rollout, RolloutTrace, SamplingParams
from tailrl.train.recipe import overlong_penalty


@dataclass
class Group:
    example: object  # tailrl.data.datasets.Example
    prompt_ids: list[int]
    rollouts: list[Rollout]
    texts: list[str]
    scores: list[float]  # final reward per rollout (incl. overlong penalty)
    components: dict[str, list[float]]
    full: Group | None = None  # the whole generated group when this one is a PODS subset

    @property
    def lengths(self) -> list[int]:
        return [r.num_tokens for r in self.rollouts]

    @property
    def score_std(self) -> float:
        return statistics.pstdev(self.scores) if len(self.scores) > 1 else 0.0


def subset(group: Group, idx: list[int]) -> Group:
    """The group restricted to rollouts idx (PODS); the full group stays in `.full` for metrics."""
    g = Group(group.example, group.prompt_ids, [group.rollouts[i] for i in idx], [group.texts[i] for i in idx],
              [group.scores[i] for i in idx], {k: [v[i] for i in idx] for k, v in group.components.items()})
    g.full = group.full if group.full is not None else group
    return g


@dataclass
class RolloutPhase:
    groups: list[Group]  # kept groups (P at most)
    traces: list[RolloutTrace]  # one per generation round
    generated: list[Group] = field(default_factory=list)  # every group generated this step (for metrics)
    reward_s: float = 0.0
    reward_errors: int = 0
    reward_timeouts: int = 0
    refill_rounds: int = 0


class RolloutWorker:
    """Draws prompts, generates G samples each with the shared engine, scores them."""

    def __init__(self, engine: Engine, tokenizer, sampler, reward, encode, params: SamplingParams,
                 overlong_buffer: int, overlong_penalty_value: float):
        self.engine = engine
        self.tokenizer = tokenizer
        self.sampler = sampler
        self.reward = reward
        self.encode = encode  # Example -> prompt token ids (cached by the caller)
        self.params = params
        self.overlong = (overlong_buffer, overlong_penalty_value)
        self.draws = 0  # prompts drawn so far: each draw gets a fresh sampling uid

    def generate_groups(self, examples: list, group_size: int) -> tuple[list[Group], RolloutTrace, float, int, int]:
        requests, prompt_ids = [], []
        for ex in examples:
            ids = self.encode(ex)
            prompt_ids.append(ids)
            requests.append(Request(ids, uid=self.draws, n=group_size, params=self.params))
            self.draws += 1
        rollouts, trace = self.engine.generate(requests)
        by_uid: dict[int, list[Rollout]] = {}
        for r in rollouts:
            by_uid.setdefault(r.uid, []).append(r)
        t0 = time.perf_counter()
        texts = [self.tokenizer.decode(r.token_ids, skip_special_tokens=True) for r in rollouts]
        flat_ex = [ex for ex in examples for _ in range(group_size)]  # rollouts come sorted by (uid, sample)
        batch = self.reward.score([ex.prompt for ex in flat_ex], texts, [ex.row for ex in flat_ex])
        reward_s = time.perf_counter() - t0
        groups, i = [], 0
        buf, pen = self.overlong
        for q, ex, ids in zip(requests, examples, prompt_ids):
            rs = sorted(by_uid[q.uid], key=lambda r: r.sample_index)
            sl = slice(i, i + len(rs))
            scores = [s + overlong_penalty(r.num_tokens, self.params.max_new_tokens, buf, pen)
                      for s, r in zip(batch.scores[sl], rs)]
            comps = {k: v[sl] for k, v in batch.components.items()}
            groups.append(Group(ex, ids, rs, texts[sl], scores, comps))
            i += len(rs)
        return groups, trace, reward_s, batch.errors, batch.timeouts

    def step(self, num_prompts: int, group_size: int, dynamic_sampling: bool, max_refill_rounds: int,
             select=None) -> RolloutPhase:
        """Generate P groups; `select` (PODS) maps a group to the subset trained on; with dynamic
        sampling, groups whose (kept) rewards have zero std are dropped and refilled (capped)."""
        phase = RolloutPhase([], [])
        need, rounds = num_prompts, 0
        while need > 0 and rounds <= max_refill_rounds:
            groups, trace, rs, err, to = self.generate_groups(self.sampler.next(need), group_size)
            phase.traces.append(trace)
            phase.generated += groups
            phase.reward_s += rs
            phase.reward_errors += err
            phase.reward_timeouts += to
            if select is not None:
                groups = [select(g) for g in groups]
            kept = [g for g in groups if not dynamic_sampling or g.score_std > 0]
            phase.groups += kept[:need]
            need = num_prompts - len(phase.groups)
            rounds += 1
            if not dynamic_sampling:
                break
        phase.refill_rounds = rounds - 1
        return phase


def pods_metrics(phase: RolloutPhase, n: int, m: int) -> dict[str, float]:
    """pods/n, pods/m, variance kept / variance of the whole group, share of completion tokens trained."""
    ratios = []
    for g in phase.groups:
        full = g.full if g.full is not None else g
        v_all = statistics.pvariance(full.scores) if len(full.scores) > 1 else 0.0
        if v_all > 0:
            ratios.append((statistics.pvariance(g.scores) if len(g.scores) > 1 else 0.0) / v_all)
    kept_tokens = sum(sum(g.lengths) for g in phase.groups)
    all_tokens = sum(sum((g.full or g).lengths) for g in phase.groups)
    return {"pods/n": float(n), "pods/m": float(m),
            "pods/var_kept_over_var_all": statistics.mean(ratios) if ratios else 0.0,
            "pods/kept_token_frac": kept_tokens / all_tokens if all_tokens else 0.0}


def update_time_saved(update_s: float, kept_token_frac: float) -> float:
    """PODS's estimated update seconds saved this step: the measured update scaled to the completion tokens
    it did not train on (update time ~ proportional to tokens, as with token-budgeted micro-batches)."""
    return update_s * (1.0 - kept_token_frac) / kept_token_frac if kept_token_frac > 0 else 0.0
