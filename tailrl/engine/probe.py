"""Timing forwards of the engine's own model on scratch rows (no requests): the cost models of speculation,
the batch-1 step of tail efficiency and the offline profiles all measure through `time_forward`.

Scratch rows use negative sequence ids in the engine's KV cache and free their blocks afterwards, so a
probe may run between rollouts without touching any request.
"""

from __future__ import annotations

import random
import time

import torch

from tailrl.engine.request import Request, SamplingParams
from tailrl.engine.sampling.rows import to_host
from tailrl.engine.sequence import Sequence


def fake_seqs(b: int, vocab: int, rng: random.Random) -> list[Sequence]:
    """b scratch sequences (16 prompt tokens, then a motif repeated: n-gram drafters find matches)."""
    seqs = []
    for i in range(b):
        motif = [rng.randrange(3, vocab) for _ in range(8)]
        toks = [rng.randrange(3, vocab) for _ in range(16)] + motif * 4
        req = Request(toks[:16], uid=i, n=1, params=SamplingParams())
        seqs.append(Sequence(i, req, 0, 256, toks, 16))
    return seqs


@torch.inference_mode()
def time_forward(engine, b: int, n: int, ctx: int = 64, reps: int = 3, sample: bool = False) -> list[float]:
    """Seconds of each of `reps` forwards over b scratch rows of n new tokens after ctx cached ones;
    sample: with keyed sampling of every new position (what a verify round computes)."""
    cache = engine.cache
    seqs = fake_seqs(b, engine.model.args.vocab_size, random.Random(b))
    for i, s in enumerate(seqs):
        s.seq_id = -1000 - i
        cache.ensure(s.seq_id, 0, ctx + n)
    try:
        for s in seqs:
            s.num_cached = 0
        engine.forward(seqs, [[1] * ctx] * b)
        for s in seqs:
            s.num_cached = ctx
        rows = [list(range(n))] * b if sample else None
        sync = torch.cuda.synchronize if next(engine.model.parameters()).is_cuda else (lambda: None)
        times = []
        for _ in range(reps):
            sync()
            t = time.perf_counter()
            logits = engine.forward(seqs, [[1] * n] * b, logits_rows=rows)
            if sample:
                to_host(*engine.sample_windows(seqs, logits.reshape(b * n, -1), [n] * b))  # as a verify round
            sync()  # the kernels' time, not their launches'
            times.append(time.perf_counter() - t)
        return times
    finally:
        for s in seqs:
            cache.free(s.seq_id)
