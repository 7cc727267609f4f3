"""Offline latency profile of tailrl's own engine on this machine (`tailrl profile engine`, and per TP
degree `tailrl profile tp`), for the `Profiled` predictor of tailrl/perf/latency.py that the simulator
and PAT's live controller share (PAT §4.2's profiler): dummy batches of random-token prompts run through
`Engine.generate` with forced lengths, so every cost the engine pays per step (forward, sampling,
scheduling) is in the numbers.

    decode:  per profiled batch size b and prompt length c, the wall time between consecutive decode
             steps (medians over windows of 8 steps) against the batch's total context tokens
    prefill: prompt tokens of one prefill forward against its wall time
    round:   what a whole rollout costs beyond its forwards (requests in, rollouts out), affine in
             the number of sequences: [seconds, seconds per sequence]
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

from tailrl.engine.request import Request, SamplingParams
from tailrl.perf.fit import fit_affine


def _requests(b: int, c: int, new_tokens: int, vocab: int, seed: int):
    rng = random.Random(seed)
    params = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True, seed=seed)
    return [Request([rng.randrange(vocab) for _ in range(c)], uid=i, params=params) for i in range(b)]


def profile_engine(engine, vocab: int, batches=(1, 4, 16, 64, 128, 256), contexts=(16, 64, 192),
                   decode_steps: int = 40, window: int = 8, progress=None) -> dict:
    """Returns {"decode": {"1": {b: [[ctx, s], ...]}}, "prefill": {"1": [[tokens, s], ...]}, "meta": ...}."""
    decode: dict[str, list] = {}
    prefill: list[tuple[int, float]] = []
    rounds: list[tuple[float, float]] = []  # (sequences, seconds outside the forwards)
    engine.generate(_requests(2, 8, 4, vocab, 0))  # warm-up (allocator, kernels)
    for b in batches:
        pts: list[tuple[float, float]] = []
        for c in contexts:
            if b * (c + decode_steps + 1) > engine.cache.num_blocks * engine.cache.block_size:
                continue  # does not fit the KV cache: the engine would preempt
            _, trace = engine.generate(_requests(b, c, decode_steps + 1, vocab, 1000 * b + c))
            rounds.append((float(b), trace.t_end - (trace.steps[-1].t1 - trace.steps[0].t0)))
            for s in trace.steps:
                if s.kind == "prefill":
                    prefill.append((s.tokens, s.t1 - s.t0))
            dec = [s for s in trace.steps if s.kind == "decode" and s.batch == b]
            gaps = [(b * (c + 1 + i), dec[i + 1].t0 - dec[i].t0) for i in range(len(dec) - 1)]
            for j in range(0, len(gaps) - window + 1, window):
                chunk = gaps[j:j + window]
                pts.append((statistics.mean(x for x, _ in chunk), statistics.median(y for _, y in chunk)))
            if progress:
                progress(b, c)
        if pts:
            decode[str(b)] = sorted(pts)
    by_tokens: dict[int, list[float]] = {}
    for n, t in prefill:
        by_tokens.setdefault(n, []).append(t)
    pre = [[n, statistics.median(ts)] for n, ts in sorted(by_tokens.items())]
    return {"decode": {"1": decode}, "prefill": {"1": pre}, "round": list(fit_affine(rounds)) if rounds else [0.0, 0.0],
            "meta": {"batches": list(batches), "contexts": list(contexts), "decode_steps": decode_steps}}


def save_profile(profile: dict, path: str | Path) -> None:
    Path(path).write_text(json.dumps(profile, indent=1))
