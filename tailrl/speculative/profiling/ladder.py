"""`tailrl profile ladder`: build the draft ladder offline (SpecActor section 4.2).

Measures (i) target forward seconds per batch size and tokens per row (1 = plain decode, k + 1 =
verify of a k-token draft) on scratch sequences, and (ii) each drafter's proposal seconds per token on
synthetic sequences; then, per drafter and acceptance rate, simulates rollouts of a long-tailed batch
with random accept/reject (coupled/ladder.py `simulate`) at every window and keeps the best speed-up over
plain decoding. No trained model is needed: the target's weights do not change the timings.
"""

from __future__ import annotations

import random
import statistics
import time

from tailrl.engine.probe import fake_seqs, time_forward
from tailrl.speculative.coupled.ladder import ALPHAS, Ladder, simulate


def _time_drafter(drafter, b: int, k: int, vocab: int) -> float:
    seqs = fake_seqs(b, vocab, random.Random(b))
    drafter.propose(seqs, [k] * b)  # warm (indexes, caches)
    t = time.perf_counter()
    props = drafter.propose(seqs, [k] * b)
    dt = time.perf_counter() - t
    for s in seqs:
        drafter.release(s)
    drafter.end_rollout()
    return dt / max(1, sum(len(p) for p in props), b * k // 4)


def profile_ladder(engine, batches=(1, 2, 4, 8, 16, 32, 64), k_max: int = 8, n_requests: int = 64,
                   alphas=ALPHAS, seed: int = 0, progress=print) -> Ladder:
    spec = engine.strategy  # a coupled Speculator: its drafters are timed
    vocab = engine.model.args.vocab_size
    t_fwd = {n: {} for n in range(1, k_max + 2)}
    for n in t_fwd:
        for b in batches:
            t_fwd[n][b] = statistics.median(time_forward(engine, b, n))
        progress(f"target forward, {n} token(s)/row: " + ", ".join(f"b={b} {t * 1e3:.2f}ms" for b, t in t_fwd[n].items()))
    draft_s = {}
    for name, d in spec.drafters.items():
        draft_s[name] = statistics.median(_time_drafter(d, b, k_max, vocab) for b in (1, 8, 32))
        progress(f"drafter {name}: {draft_s[name] * 1e6:.1f} us per proposed token")
    rng = random.Random(seed)
    lengths = [max(8, int(rng.lognormvariate(4.0, 0.8))) for _ in range(n_requests)]
    base = simulate(0.0, 0, lengths, t_fwd, 0.0, random.Random(seed))
    table = {}
    for name in spec.drafters:
        row = []
        for a in alphas:
            best = max(base / simulate(a, k, lengths, t_fwd, draft_s[name], random.Random(seed)) for k in range(k_max + 1))
            row.append(best)
        table[name] = row
        progress(f"ladder {name}: " + ", ".join(f"a={a:.2f} {v:.2f}x" for a, v in zip(alphas, row)))
    meta = {"batches": list(batches), "k_max": k_max, "n_requests": n_requests, "draft_s_per_token": draft_s,
            "t_forward_s": {str(n): {str(b): t for b, t in v.items()} for n, v in t_fwd.items()}}
    return Ladder(list(alphas), table, meta)
