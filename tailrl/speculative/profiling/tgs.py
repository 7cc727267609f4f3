"""`tailrl profile spec`: the offline profile SpecActor's TGS model needs (§4.1, "fitted through
offline profiling"), per resource count g (torch threads here; the drafter and the verifier each get
their own in decoupled mode):

    D_g(b)    seconds of one draft step for b requests (the draft model drafting a window, per token,
              through the same DraftModelDrafter the drafter process runs: catch-up row, forward,
              keyed sampling)
    V_g(b, n) seconds of one verify forward of b requests over n tokens, with keyed sampling of all n

fitted by least squares (speculative/decoupled/tgs.py), and optionally the per-token acceptance p of the draft
against the target: keyed draws of both on the target's own rollouts (teacher-forced, exact).
Random weights time the same as trained ones; acceptance needs the real pair.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from tailrl.config import DecoupledSpecConfig, EngineConfig, SpecConfig
from tailrl.engine.engine import Engine
from tailrl.engine.probe import fake_seqs, time_forward
from tailrl.engine.request import Request, SamplingParams
from tailrl.model.loading import save_hf
from tailrl.perf.fit import fit_affine
from tailrl.speculative.decoupled.speculator import DecoupledSpeculator, fixed_plan
from tailrl.speculative.decoupled.tgs import DraftCost, VerifyCost
from tailrl.speculative.drafters.draft_model import DraftModelDrafter
from tailrl.speculative.drafters.vocab_head import load_draft


def fit_verify(points: list[tuple[int, int, float]]) -> VerifyCost:
    """Least squares t = beta + b * per_request + n * per_token over (b, n, t) points, coefficients >= 0
    (a negative one is dropped and the rest refitted)."""
    cols = [0, 1, 2]
    while True:
        X = torch.tensor([[(1.0, float(b), float(n))[c] for c in cols] for b, n, _ in points], dtype=torch.float64)
        y = torch.tensor([[t] for _, _, t in points], dtype=torch.float64)
        coef = torch.linalg.lstsq(X, y).solution.flatten().tolist()
        if min(coef) >= 0 or len(cols) == 1:
            full = [0.0, 0.0, 0.0]
            for c, v in zip(cols, coef):
                full[c] = max(v, 0.0)
            return VerifyCost(*full)
        cols.pop(min(range(len(cols)), key=lambda i: coef[i]))


def time_draft(drafter, b: int, vocab: int, k: int = 4, reps: int = 3) -> float:
    """Median seconds per draft step of `drafter` drafting k tokens for b requests."""
    seqs = fake_seqs(b, vocab, random.Random(b))
    drafter.propose(seqs, [k] * b)  # warm: allocations, first catch-up
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        drafter.propose(seqs, [k] * b)
        times.append((time.perf_counter() - t) / k)
    drafter.end_rollout()
    return statistics.median(times)


def profile_tgs(target, draft, threads: list[int], batches=(1, 8, 32, 64), windows=(1, 2, 4, 6),
                reps: int = 3, block_size: int = 16, progress=None, decoupled: tuple[int, int] | None = None,
                requests=None) -> dict:
    """Profile kernels at each thread count (coupled and plain decoding on those cores). target: the policy
    model; draft: a model or a folder. decoupled=(g_draft, g_verify): the decoupled runtime's own D and V for that split replace the
    kernel fits at those counts (profile_decoupled, on requests(b) when given).
    Returns {"drafts": {g: DraftCost}, "verifies": {g: VerifyCost}, "points": raw timings}."""
    draft_path = draft if isinstance(draft, (str, Path)) else None
    if decoupled is not None and draft_path is None:
        raise ValueError("profiling the decoupled runtime needs the draft model's folder")
    if draft_path is not None:
        p = next(target.parameters())
        draft = load_draft(draft, dtype=p.dtype, device=str(p.device))
    vocab = target.args.vocab_size
    kv = max(batches) * (24 + max(windows) + 8) * 2
    engine = Engine(target, EngineConfig(kv_cache_tokens=kv, block_size=block_size))
    drafter = DraftModelDrafter(draft.eval(), engine.config.sampler, kv, block_size)
    before = torch.get_num_threads()
    out = {"drafts": {}, "verifies": {}, "points": {}}
    try:
        with torch.inference_mode():
            for g in threads:
                torch.set_num_threads(g)
                dp = [(float(b), time_draft(drafter, b, vocab, reps=reps)) for b in batches]
                vp = [(b, b * w, statistics.median(time_forward(engine, b, w, 24, reps, sample=True)))
                      for b in batches for w in windows]
                out["drafts"][g] = DraftCost(*fit_affine(dp))
                out["verifies"][g] = fit_verify(vp)
                out["points"][g] = {"draft": dp, "verify": vp}
                if progress:
                    progress(f"{g} thread(s): draft step " + ", ".join(f"b={int(b)} {t * 1e3:.2f}ms" for b, t in dp)
                             + " | verify " + ", ".join(f"b={b},n={n} {t * 1e3:.2f}ms" for b, n, t in vp))
    finally:
        torch.set_num_threads(before)
    if decoupled is not None:
        gd, gv = decoupled
        d, v, pts = profile_decoupled(target, str(draft_path), gd, gv, tuple(b for b in batches if b > 1) or (8,),
                                      tuple(w for w in windows if w > 1) or (2,), block_size=block_size,
                                      requests=requests)
        out["drafts"][gd], out["verifies"][gv] = d, v
        out["points"][f"decoupled {gd}+{gv}"] = pts
        if progress:
            progress(f"decoupled runtime ({gd} drafting + {gv} verifying cores): D(b) = {d.alpha * 1e3:.2f} ms + "
                     f"b * {d.slope * 1e3:.4f} ms, V(b, n) = {v.beta * 1e3:.2f} ms + b * {v.per_request * 1e3:.4f} ms "
                     f"+ n * {v.per_token * 1e3:.4f} ms ({len(pts['verify'])} rounds)")
    return out


def _runtime_rounds(target, draft_path: str, g_draft: int, g_verify: int, batches, windows,
                    max_new: int, block_size: int, requests=None) -> list[tuple]:
    """Per-round logs of a decoupled engine decoding, at each batch b and window, requests(b) (default:
    b random prompts decoded for max_new tokens; the first round of each run, a warm-up, is dropped)."""
    vocab = target.args.vocab_size
    spec = SpecConfig(method="draft", draft_model=draft_path, mode="decoupled", gate=False,
                      decoupled=DecoupledSpecConfig(window=max(windows), draft_cores=g_draft, verify_cores=g_verify))
    cfg = EngineConfig(kv_cache_tokens=max(batches) * (24 + max_new + 16) * 2, block_size=block_size,
                       max_batch_size=max(batches), spec=spec)
    engine = Engine(target, cfg, strategy=lambda e: DecoupledSpeculator(e, spec, fixed_plan(spec, cfg.max_batch_size),
                                                                        acceptance=spec.alpha_prior))
    sp = engine.strategy
    rng = random.Random(0)
    params = SamplingParams(temperature=1.0, max_new_tokens=max_new, seed=3, ignore_eos=True)
    log = []
    try:
        for b in batches:
            reqs = requests(b) if requests else [Request([rng.randrange(3, vocab) for _ in range(24)], uid=i,
                                                         params=params) for i in range(b)]
            for w in windows:
                sp.plan = replace(sp.plan, w=w)
                sp.log = []
                engine.generate(reqs)
                log += sp.log[1:]
    finally:
        sp.close()
    return log


def profile_decoupled(target, draft_path: str, g_draft: int, g_verify: int, batches=(8, 32, 64),
                      windows=(2, 3, 4), max_new: int = 12, block_size: int = 16,
                      requests=None) -> tuple[DraftCost, VerifyCost, dict]:
    """D and V of the decoupled runtime itself (drafter process on g_draft cores, verifier on g_verify),
    so the fits include what a round costs beyond the kernels (bookkeeping, sampling, messages):
    V from the verifier's seconds per round (without the wait for the drafter) against its batch and
    verify tokens, D from the draft model's seconds per draft step against the requests it drafted for.
    requests(b): b requests of the workload to profile on (their rounds cover the batch as it shrinks
    and the verify tokens the real acceptance gives). Without them: random prompts, and V measured with
    the target drafting for itself, so every round verifies exactly w tokens per request."""
    rounds = _runtime_rounds(target, draft_path, g_draft, g_verify, batches, windows if requests else windows[-1:],
                             max_new, block_size, requests)
    if requests:
        vp = [(rows, n, v_s) for rows, n, v_s, *_ in rounds if rows]
    else:
        with tempfile.TemporaryDirectory() as tmp:
            save_hf(target, tmp)
            vp = [(rows, n, v_s) for rows, n, v_s, *_ in
                  _runtime_rounds(target, tmp, g_draft, g_verify, batches, windows, max_new, block_size)]
    dp = [(float(d_rows), d_s / steps) for _, _, _, d_rows, steps, d_s in rounds if steps]
    return DraftCost(*fit_affine(dp)), fit_verify(vp), {"draft": dp, "verify": vp}
