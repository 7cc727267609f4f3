"""The rollout phase of one step: prompts -> engine -> rewards -> groups -> shaping (with DAPO refills).

Rewards stream: a group goes to the scorer (rewards/: in-process, or the reward.workers pool) the moment
its last sample finishes, so with a pool the groups that finish early are scored while the tail is still
decoding; after the rollout only the tail's scoring is left (`timing_s/reward`). Under torchrun a rank
generates and scores its share of the requests (uids are global) and the groups are all-gathered, so every
rank shapes the same groups (train/distributed.py). Groups (train/groups.py) carry everything later stages
need; no loose dicts cross into the update.

With a stop guard (train/stop.py) the generation and the wait for its rewards may be abandoned at a stop's
deadline; the ranks learn it at the same gather that shares the groups, so either every rank abandons the
step or none does.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

from tailrl.engine import Engine, Request, Rollout, RolloutTrace, SamplingParams
from tailrl.train.distributed import SINGLE, DistContext
from tailrl.train.episodes import Episodes
from tailrl.train.groups import Group, reward_text
from tailrl.train.shaping import Shaper
from tailrl.train.stop import StepAbandoned, StopSignals


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

    def __init__(self, engine: Engine, tokenizer, sampler, reward, encode, params: SamplingParams,
                 ctx: DistContext = SINGLE, guard: StopSignals | None = None, episodes: Episodes | None = None):
        """episodes: rollout.environment's episodes (train/episodes.py): prompts after each instance's reset,
        its reward added to the score."""
        self.ctx = ctx
        self.episodes = episodes
        self.guard = guard  # a stop's deadline may abandon the rollout (None: never)
        self.engine = engine
        self.tokenizer = tokenizer
        self.sampler = sampler
        self.reward = reward
        self.encode = encode  # Example -> prompt token ids (cached by the caller)
        self.params = params
        self.draws = 0  # prompts drawn so far: each draw gets a fresh sampling uid

    def generate_groups(self, examples: list, group_size: int) -> tuple[list[Group], RolloutTrace, float, int, int]:
        by_uid = {}
        for ex in examples:
            by_uid[self.draws] = ex
            self.draws += 1
        finished: dict[int, list[Rollout]] = {}
        submitted: dict[int, tuple[list[Rollout], list[str], int]] = {}  # uid -> (rollouts, texts, ticket)
        shield = self.guard.shield if self.guard else contextlib.nullcontext

        def on_finish(r: Rollout) -> None:  # error rollouts finish too, so every group completes
            done = finished.setdefault(r.uid, [])
            done.append(r)
            if len(done) == group_size:
                rs = sorted(done, key=lambda x: x.sample_index)
                texts = [reward_text(self.tokenizer, x) for x in rs]
                ex = by_uid[r.uid]
                with shield():  # never cut a hand-over to the reward processes
                    submitted[r.uid] = rs, texts, self.reward.submit([ex.prompt] * len(rs), texts, [ex.row] * len(rs))

        mine = self.ctx.share(list(by_uid.items()))  # every prompt, in one process
        requests = self._requests(mine, group_size)
        abandoned = None
        try:
            with self.guard.rollout() if self.guard else contextlib.nullcontext():
                _, trace = self.engine.generate([q for qs in requests.values() for q in qs], on_finish=on_finish)
                t0 = time.perf_counter()
                scored = [self._score(uid, *submitted[uid]) for uid, _ in mine]  # what the tail left to score
                reward_s = time.perf_counter() - t0
        except StepAbandoned as e:  # this rank's share is dropped; the gather tells the others
            scored, trace, reward_s, abandoned = [], None, 0.0, str(e)
        finally:
            if self.episodes is not None:
                self.episodes.close()  # an abandoned step's episodes (scored ones are closed already)
        groups = [Group(ex, requests[uid][0].prompt_ids, *submitted[uid][:2], list(batch.scores), batch.components)
                  for (uid, ex), batch in zip(mine, scored)]
        errors, timeouts = sum(b.errors for b in scored), sum(b.timeouts for b in scored)
        if self.ctx.enabled:  # every rank gets every group, in request order (and learns every rank's abandon)
            parts = self.ctx.gather((groups, errors, timeouts, abandoned))
            groups = sorted((g for p in parts for g in p[0]), key=lambda g: g.rollouts[0].uid)
            errors, timeouts = sum(p[1] for p in parts), sum(p[2] for p in parts)
            abandoned = next((p[3] for p in parts if p[3]), None)
        if abandoned:
            raise StepAbandoned(abandoned)
        names = list(dict.fromkeys(k for g in groups for k in g.components))  # extras: 0.0 where unreported
        for g in groups:
            g.components = {k: g.components.get(k, [0.0] * len(g.rollouts)) for k in names}
        return groups, trace, reward_s, errors, timeouts

    def _requests(self, prompts: list[tuple[int, object]], n: int) -> dict[int, list[Request]]:
        """uid -> the engine requests of its n samples: one Request, or with an environment the episodes'."""
        if self.episodes is not None:
            return self.episodes.requests(prompts, n, self.params)
        return {uid: [Request(self.encode(ex), uid=uid, n=n, params=self.params)] for uid, ex in prompts}

    def _score(self, uid: int, rollouts: list[Rollout], texts: list[str], ticket: int):
        """The reward functions' batch of one group, with its episodes' rewards added (environments)."""
        batch = self.reward.result(ticket)
        if self.episodes is not None:
            batch = self.episodes.add_reward(batch, [(uid, r.sample_index) for r in rollouts])
        return batch

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
