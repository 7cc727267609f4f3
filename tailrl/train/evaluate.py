"""Evaluation: pass@k and mean response length of a policy on a prompt set (`tailrl eval`)."""

from __future__ import annotations

import math
import statistics

from tailrl.engine import Request, SamplingParams


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def evaluate(engine, tokenizer, examples: list, encode, reward, samples: int, params: SamplingParams,
             ks: tuple[int, ...] = (1,)) -> dict[str, float]:
    """Generate `samples` completions per example; correct = the first reward function scores >= 1."""
    reqs = [Request(encode(ex), uid=i, n=samples, params=params) for i, ex in enumerate(examples)]
    rollouts, trace = engine.generate(reqs)
    texts = [tokenizer.decode(r.token_ids, skip_special_tokens=True) for r in rollouts]
    flat = [examples[r.uid] for r in rollouts]
    batch = reward.score([ex.prompt for ex in flat], texts, [ex.row for ex in flat])
    first = reward.names[0]
    correct = [v >= 1.0 for v in batch.components[first]]
    per_prompt: dict[int, list[bool]] = {}
    for r, ok in zip(rollouts, correct):
        per_prompt.setdefault(r.uid, []).append(ok)
    out = {"eval/prompts": float(len(examples)), "eval/samples": float(samples),
           "eval/accuracy": statistics.mean(correct) if correct else 0.0,
           "eval/reward_mean": statistics.mean(batch.scores) if batch.scores else 0.0,
           "eval/response_length_mean": statistics.mean(r.num_tokens for r in rollouts) if rollouts else 0.0,
           "eval/timing_s": trace.t_end}
    for k in ks:
        if k <= samples and per_prompt:
            out[f"eval/pass@{k}"] = statistics.mean(pass_at_k(len(v), sum(v), k) for v in per_prompt.values())
    return out
