"""`tailrl bench rewards`: streaming rewards in a process pool against scoring after generation.

Both sides in one run, on the same B rollouts (keyed sampling makes the two generations identical):

1. sequential (today's trainer, reward.workers=0): the engine generates everything, then the in-process
   `Reward` scores the B completions one call at a time -> `score_s_sequential`;
2. streaming (reward.workers=W): `engine.generate(on_finish=...)` submits each group to a `RewardPool`
   as soon as its last sample finishes -> `tail_s`, the time from the last rollout's finish to the last
   score, and `tail_fraction` = tail_s / score_s_sequential (target <= 0.10).

Workload: a tiny random Llama generates long-tailed lengths (lognormal per sample, EOS ignored); each
rollout's text (its tokens as characters: a "reasoning" of the generated length) ends in a final
`\\boxed{}` answer checked by the `math` reward against a GSM8K-like (integer) or MATH-like (LaTeX)
ground truth. Most answers are wrong, and every wrong one is written as a fraction, root, decimal or
expression, so math-verify parses and compares it (integers would take the reward's fast path).
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path

import torch

from tailrl.bench.common import write_outputs
from tailrl.config import EngineConfig
from tailrl.engine import Engine, Request, SamplingParams
from tailrl.model import ModelArgs, build_model, init_random
from tailrl.rewards import Reward, RewardPool

TARGET = 0.10


def math_workload(prompts: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """(question, ground truth as the dataset writes it, the correct final answer) per prompt: GSM8K-like
    word problems ("... #### 72") and MATH-like fractions ("\\frac{3}{4}"), alternating."""
    rng = random.Random(seed)
    out = []
    for i in range(prompts):
        if i % 2:
            a, b = rng.randint(2, 40), rng.randint(2, 30)
            out.append((f"Natalia sold clips to {a} friends, {b} clips each. How many clips did she sell?",
                        f"Each friend bought {b} clips, so {a} * {b} = {a * b}.\n#### {a * b}", str(a * b)))
        else:
            p, q = rng.randint(1, 30), rng.randint(2, 13)
            g = math.gcd(p, q)
            fraction = f"\\frac{{{p // g}}}{{{q // g}}}"
            out.append((f"Simplify {p}/{q}.", fraction, fraction))
    return out


def final_answer_text(rng: random.Random, correct: str, wrong: float) -> str:
    """The sample's final answer: the correct one with probability 1 - wrong, else a wrong non-integer."""
    if rng.random() >= wrong:
        return correct
    a, b = rng.randint(1, 99), rng.randint(2, 19)
    return rng.choice([f"\\frac{{{a}}}{{{b}}}", f"{a}\\sqrt{{{b}}}", f"{a}.{rng.randint(1, 99)}",
                       f"{a}x + {b}", f"\\frac{{{a}\\pi}}{{{b}}}"])


def completion_text(token_ids: list[int], answer: str) -> str:
    """A completion of the rollout's length (its tokens as printable characters) ending in the answer."""
    return "".join(chr(32 + t % 95) for t in token_ids) + f"\nThe answer is \\boxed{{{answer}}}."


def tiny_policy(vocab: int = 512, seed: int = 0):
    """A random-weight Llama (2 layers, hidden 128): real engine work at a CPU-friendly cost."""

    args = ModelArgs(architecture="LlamaForCausalLM", vocab_size=vocab, hidden_size=128,
                     intermediate_size=256, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=32,
                     rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=None, max_position_embeddings=1024,
                     tie_word_embeddings=True, qkv_bias=False, o_bias=False, mlp_bias=False, qk_norm=False,
                     sliding_window=None, bos_token_id=1, eos_token_ids=(2,))
    return init_random(build_model(args), std=0.02, seed=seed).eval()


class Workload:
    """B = questions x group rollouts of long-tailed lengths, and the math texts scored for them."""

    def __init__(self, batch: int, group: int, max_new: int, median: int, wrong: float, seed: int):
        self.group, self.max_new, self.median, self.seed = group, max_new, median, seed
        self.questions = max(1, batch // group)
        self.rows = math_workload(self.questions, seed)
        rng = random.Random(seed + 1)
        self.answers = {(q, k): final_answer_text(rng, self.rows[q][2], wrong)
                        for q in range(self.questions) for k in range(group)}

    def requests(self, questions: int | None = None, max_new: int | None = None) -> list:
        """One request per question, `group` samples of lognormal (sigma 0.9) forced lengths, EOS ignored."""

        rng = random.Random(self.seed)
        max_new = max_new or self.max_new
        params = SamplingParams(temperature=1.0, max_new_tokens=max_new, seed=self.seed, ignore_eos=True)
        return [Request([rng.randrange(3, 500) for _ in range(rng.randint(16, 48))], uid=q, n=self.group,
                        params=params, max_new_tokens=[min(max_new, max(4, round(rng.lognormvariate(
                            math.log(self.median), 0.9)))) for _ in range(self.group)])
                for q in range(questions or self.questions)]

    def texts(self, rollouts) -> tuple[list[str], list[str], list[dict]]:
        """(prompts, completions, rows) for `Scorer.submit`, aligned with the rollouts."""
        return ([self.rows[r.uid][0] for r in rollouts],
                [completion_text(r.token_ids, self.answers[r.uid, r.sample_index]) for r in rollouts],
                [{"answer": self.rows[r.uid][1]} for r in rollouts])


def sequential(engine, work: Workload, reward) -> tuple[list, object, float, float]:
    """Today's order: generate everything, then score it in-process; (rollouts, batch, gen s, score s)."""
    t = time.perf_counter()
    rollouts, _ = engine.generate(work.requests())
    gen_s = time.perf_counter() - t
    t = time.perf_counter()
    batch = reward.score(*work.texts(rollouts))
    return rollouts, batch, gen_s, time.perf_counter() - t


def streaming(engine, work: Workload, pool) -> tuple[dict, int, float, float, float]:
    """Each group goes to the pool the moment its last sample finishes; (scores by (uid, sample), errors,
    gen s, tail s = last rollout finished -> last score, end-to-end s)."""
    finished: dict[int, list] = {}
    tickets: list[tuple[int, list[tuple[int, int]]]] = []  # (ticket, its rollouts' (uid, sample))
    last_finish = 0.0

    def on_finish(r) -> None:
        nonlocal last_finish
        last_finish = time.perf_counter()
        done = finished.setdefault(r.uid, [])
        done.append(r)
        if len(done) == work.group:
            done.sort(key=lambda x: x.sample_index)
            tickets.append((pool.submit(*work.texts(done)), [(x.uid, x.sample_index) for x in done]))

    t = time.perf_counter()
    engine.generate(work.requests(), on_finish=on_finish)
    gen_s = time.perf_counter() - t
    batches = [pool.result(ticket) for ticket, _ in tickets]
    end = time.perf_counter()
    scores = {key: s for (_, keys), b in zip(tickets, batches) for key, s in zip(keys, b.scores)}
    return scores, sum(b.errors for b in batches), gen_s, end - last_finish, end - t


def run_rewards_bench(out_dir: str | Path, batch: int = 512, workers: int = 2, group: int = 8,
                      max_new_tokens: int = 512, median_tokens: int = 64, wrong: float = 0.85,
                      functions: tuple[str, ...] = ("math",), threads: int = 1, seed: int = 0) -> dict:
    """Run both sides (module docstring) and write summary.md and result.json to out_dir; returns the
    result. `threads`: the engine's torch threads (on a CPU machine the other cores are the workers')."""

    torch.set_num_threads(threads)
    work = Workload(batch, group, max_new_tokens, median_tokens, wrong, seed)
    engine = Engine(tiny_policy(seed=seed), EngineConfig(kv_cache_tokens=1 << 18, max_batch_size=256))
    engine.generate(work.requests(4, 16))  # warm-up: first-call costs off the clock
    t = time.perf_counter()
    pool = RewardPool(functions, workers=workers)  # started first: its imports do not compete with the runs
    pool_start_s = time.perf_counter() - t
    reward = Reward(functions)
    try:
        rollouts, seq, gen_plain_s, score_s = sequential(engine, work, reward)
        stream_scores, stream_errors, gen_stream_s, tail_s, end_stream_s = streaming(engine, work, pool)
    finally:
        pool.close()
        reward.close()
    lengths = sorted(r.num_tokens for r in rollouts)
    result = {
        "batch": len(rollouts), "group": group, "workers": workers, "engine_threads": threads,
        "functions": list(functions), "accuracy": sum(seq.scores) / len(rollouts), "errors": seq.errors,
        "timeouts": seq.timeouts, "tokens_median": lengths[len(lengths) // 2], "tokens_max": lengths[-1],
        "gen_s_plain": gen_plain_s, "score_s_sequential": score_s,
        "gen_over_score": gen_plain_s / score_s,  # the regime: rollout time to hide the scoring in
        "end_to_end_s_sequential": gen_plain_s + score_s, "pool_start_s": pool_start_s,
        "gen_s_streaming": gen_stream_s, "tail_s": tail_s, "end_to_end_s_streaming": end_stream_s,
        "tail_fraction": tail_s / score_s, "target": TARGET, "ok": tail_s / score_s <= TARGET,
        "scores_match": stream_scores == {(r.uid, r.sample_index): s for r, s in zip(rollouts, seq.scores)}
        and stream_errors == seq.errors,
    }
    write_outputs(Path(out_dir), _summary(result), result)
    return result


def _summary(r: dict) -> str:
    return "\n".join([
        f"# Streaming rewards: B = {r['batch']} ({', '.join(r['functions'])}, accuracy {r['accuracy']:.0%}), "
        f"{r['workers']} workers",
        "",
        "| | generation s | scoring after it s | end to end s |",
        "|---|---|---|---|",
        f"| sequential (reward.workers=0) | {r['gen_s_plain']:.2f} | {r['score_s_sequential']:.2f} | "
        f"{r['end_to_end_s_sequential']:.2f} |",
        f"| streaming pool | {r['gen_s_streaming']:.2f} | {r['tail_s']:.3f} (tail) | "
        f"{r['end_to_end_s_streaming']:.2f} |",
        "",
        f"tail / sequential scoring = {r['tail_fraction']:.3f} (target <= {r['target']:.2f}: "
        f"{'met' if r['ok'] else 'NOT met'}); scores identical: {r['scores_match']}; "
        f"pool start {r['pool_start_s']:.2f} s (once per run)",
    ])
