"""The rollout phase of one step: prompts -> engine -> rewards -> groups -> shaping (with DAPO refills).

Groups (train/groups.py) carry everything later stages need; no loose dicts cross into the update.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tailrl.engine import Engine, Request, Rollout, RolloutTrace, SamplingParams
from tailrl.train.groups import Group
from tailrl.train.shaping import Shaper


@dataclass
class RolloutPhase:
    groups: list[Group]  # kept groups (P at most)
    traces: list[RolloutTrace]  # one per generation round
    generated: list[Group] = field(default_factory=list)  # every group generated this step (for metrics)
    reward_s: float = 0.0
    reward_errors: int = 0
    reward_timeouts: int = 0


class RolloutWorker:
    """Draws prompts, generates G samples each with the shared engine, scores them."""

    def __init__(self, engine: Engine, tokenizer, sampler, reward, encode, params: SamplingParams):
        self.engine = engine
        self.tokenizer = tokenizer
        self.sampler = sampler
        self.reward = reward
        self.encode = encode  # Example -> prompt token ids (cached by the caller)
        self.params = params
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
        for q, ex, ids in zip(requests, examples, prompt_ids):
            rs = sorted(by_uid[q.uid], key=lambda r: r.sample_index)
            sl = slice(i, i + len(rs))
            comps = {k: v[sl] for k, v in batch.components.items()}
            groups.append(Group(ex, ids, rs, texts[sl], list(batch.scores[sl]), comps))
            i += len(rs)
        return groups, trace, reward_s, batch.errors, batch.timeouts

    def step(self, num_prompts: int, group_size: int, shaper: Shaper, max_refill_rounds: int) -> RolloutPhase:
        """Generate P groups and shape them; while the shaper drops groups (DAPO) and refills are asked
        for, draw new prompts for the missing ones (at most max_refill_rounds more generations)."""
        phase = RolloutPhase([], [])
        shaper.begin_step(group_size)
        need, rounds = num_prompts, 0
        while need > 0 and rounds <= max_refill_rounds:
            groups, trace, rs, err, to = self.generate_groups(self.sampler.next(need), group_size)
            phase.traces.append(trace)
            phase.reward_s += rs
            phase.reward_errors += err
            phase.reward_timeouts += to
            kept = shaper(groups)
            phase.generated += groups
            phase.groups += kept[:need]
            need = num_prompts - len(phase.groups)
            rounds += 1
            if not shaper.refills:
                break
        return phase


def update_time_saved(update_s: float, kept_token_frac: float) -> float:
    """PODS's estimated update seconds saved this step: the measured update scaled to the completion tokens
    it did not train on (update time ~ proportional to tokens, as with token-budgeted micro-batches)."""
    return update_s * (1.0 - kept_token_frac) / kept_token_frac if kept_token_frac > 0 else 0.0
