"""Evaluation: pass@k and mean response length of a policy on a prompt set (`tailrl eval`, and the
trainer's held-out accuracy every train.eval_every steps).

Under torchrun every rank scores a shard of the prompts (prompt i on rank i % world, keeping its global
uid i, so keyed sampling draws the tokens one process would) and the per-sample results are gathered in
(uid, sample) order: the numbers are one process's, in about 1 / world of its time. Only eval/timing_s
differs: the slowest rank's generation time.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from tailrl.engine import Request, SamplingParams
from tailrl.train.distributed import SINGLE, DistContext
from tailrl.train.groups import reward_text


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass(frozen=True)
class Sample:
    """One scored completion: what the metrics need of it (small, so a rank's shard gathers cheaply)."""

    uid: int
    index: int
    num_tokens: int
    score: float
    correct: bool


def score_shard(engine, tokenizer, examples: list, encode, reward, samples: int, params: SamplingParams,
                ctx: DistContext = SINGLE, episodes=None) -> tuple[list[Sample], float]:
    """This rank's share of the prompts, generated and scored; correct = the first reward function scores
    >= 1. Returns the samples and the generation seconds. episodes: rollout.environment's (train/episodes.py):
    each sample's prompt after its reset, the environment's reward in the score."""
    mine = ctx.share(list(enumerate(examples)))
    if not mine:  # more ranks than prompts
        return [], 0.0
    try:
        if episodes is not None:
            reqs = [q for qs in episodes.requests(mine, samples, params).values() for q in qs]
        else:
            reqs = [Request(encode(ex), uid=i, n=samples, params=params) for i, ex in mine]
        rollouts, trace = engine.generate(reqs)
        texts = [reward_text(tokenizer, r) for r in rollouts]
        flat = [examples[r.uid] for r in rollouts]
        batch = reward.score([ex.prompt for ex in flat], texts, [ex.row for ex in flat])
        if episodes is not None:
            batch = episodes.add_reward(batch, [(r.uid, r.sample_index) for r in rollouts])
    finally:
        if episodes is not None:
            episodes.close()
    correct = batch.components[reward.names[0]]
    return [Sample(r.uid, r.sample_index, r.num_tokens, s, v >= 1.0)
            for r, s, v in zip(rollouts, batch.scores, correct)], trace.t_end


def eval_metrics(samples: list[Sample], num_prompts: int, per_prompt: int, ks: tuple[int, ...] = (1,)
                 ) -> dict[str, float]:
    """eval/* from every rank's samples (any order: they are sorted by (uid, sample) first)."""
    samples = sorted(samples, key=lambda s: (s.uid, s.index))
    by_prompt: dict[int, list[bool]] = {}
    for s in samples:
        by_prompt.setdefault(s.uid, []).append(s.correct)

    def mean(values: list) -> float:
        return statistics.mean(values) if values else 0.0

    out = {"eval/prompts": float(num_prompts), "eval/samples": float(per_prompt),
           "eval/accuracy": mean([s.correct for s in samples]), "eval/reward_mean": mean([s.score for s in samples]),
           "eval/response_length_mean": mean([s.num_tokens for s in samples])}
    for k in ks:
        if k <= per_prompt and by_prompt:
            out[f"eval/pass@{k}"] = mean([pass_at_k(len(v), sum(v), k) for v in by_prompt.values()])
    return out


def evaluate(engine, tokenizer, examples: list, encode, reward, samples: int, params: SamplingParams,
             ks: tuple[int, ...] = (1,), ctx: DistContext = SINGLE, episodes=None) -> dict[str, float]:
    """Generate `samples` completions per example (this rank's shard under torchrun; a collective there)."""
    mine, gen_s = score_shard(engine, tokenizer, examples, encode, reward, samples, params, ctx, episodes)
    parts = ctx.gather((mine, gen_s))
    out = eval_metrics([s for p in parts for s in p[0]], len(examples), samples, ks)
    return out | {"eval/timing_s": max(p[1] for p in parts)}
