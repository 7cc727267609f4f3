"""`tailrl bench spec --mode off coupled decoupled`: speculation modes side by side at large batch
(SpecActor §4.1: where coupled speculation stops paying), and the TGS model's predicted throughput
against the measured one.

Workload: the demo policy with its distilled draft model (demo/draft.py), B / 16 demo test prompts x 16
samples (B = 64-256), natural lengths. Every mode runs the same requests on the same machine: `off` and
`coupled` on all cores, `decoupled` with the drafter process on its own core(s); `coupled` and
`decoupled` always speculate (gate off), `auto` is the engine's default. Throughput = tokens emitted per
second over the large-batch start: decode rounds after the first while >= frac * B sequences run (the
decoupled rounds include waiting for the drafter); the whole-rollout ratio covers everything. The
predictions come from a TGS profile measured at the start of the run on the demo's train prompts
(`tailrl profile spec`, same code) and the draft's measured acceptance.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from tailrl.bench.common import demo_policy, write_outputs
from tailrl.bench.spec_workload import measure_acceptance, prompt_texts, workload
from tailrl.config import DecoupledSpecConfig, EngineConfig, SpecConfig
from tailrl.demo.draft import demo_draft
from tailrl.demo.run import DEMO_TASK
from tailrl.engine import Request, SamplingParams
from tailrl.model import load
from tailrl.speculative import build_engine
from tailrl.speculative.decoupled.tgs import choose, save_tgs_profile, tgs_coupled, tgs_decoupled, tgs_plain
from tailrl.speculative.profiling.tgs import profile_tgs

# the TGS model's tokens per second per request of each mode at mean batch b (coupled: its best window)
PREDICT = {
    "off": lambda D, V, b, p, w, wc, G, gd: tgs_plain(V[G], b),
    "coupled": lambda D, V, b, p, w, wc, G, gd: tgs_coupled(D[G], V[G], b, p, wc),
    "decoupled": lambda D, V, b, p, w, wc, G, gd: tgs_decoupled(D[gd], V[G - gd], b, p, w),
    "auto": lambda D, V, b, p, w, wc, G, gd: max(f(D, V, b, p, w, wc, G, gd) for f in _EXEC),
}
_EXEC = [PREDICT["off"], PREDICT["coupled"], PREDICT["decoupled"]]


def phase(trace, B: int, frac: float) -> tuple[float, int, float]:
    """(seconds, tokens emitted, mean active batch) of the decode rounds while at least frac * B
    sequences are running — the large-batch start of the rollout — after the first one (the steady
    state the TGS model describes: decoupled execution's first round has no drafts yet and waits for
    the draft model's prefill; the whole-rollout ratio includes it)."""
    steps = [s for s in trace.steps if s.kind in ("decode", "verify")][1:]
    steps = [s for s in steps if s.batch >= frac * B]
    secs = sum(s.t1 - s.t0 for s in steps)
    mean_b = sum(s.batch * (s.t1 - s.t0) for s in steps) / secs if secs else 0.0
    return secs, sum(s.emitted for s in steps), mean_b


def run_modes_bench(out_dir: str, modes: list[str], batches: list[int], max_new: int, threads: int,
                    repeats: int = 1, group: int = 16, frac: float = 0.75) -> dict:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(threads)
    G, gd = threads, 1
    policy, draft = demo_policy(), demo_draft()
    model, tok = load(policy)
    t = time.perf_counter()
    # offline profile on the demo's train prompts; the measurement below runs on test prompts
    train = prompt_texts("demo", 256, "train")
    prof = profile_tgs(model, draft, [G], batches=tuple(sorted({1, 8, 32, *batches})), windows=(1, 2, 3, 4),
                       progress=lambda m: print("  " + m, flush=True), decoupled=(gd, G - gd),
                       requests=workload(tok, train, group, max_new))
    prof["acceptance"] = measure_acceptance(model, tok, draft, train, max_new, 1.0)
    torch.set_num_threads(threads)
    save_tgs_profile(prof, out / "spec_profile.json", model=str(policy), draft=str(draft))
    p = prof["acceptance"]
    print(f"profile: {time.perf_counter() - t:.1f}s; draft acceptance per token {p:.3f}", flush=True)
    rows_all = DEMO_TASK.rows(max(batches) // group + 1, "test", seed=7)
    params = SamplingParams(temperature=1.0, max_new_tokens=max_new, seed=1)
    results = []
    for B in batches:
        plans = choose(B, G, prof["drafts"], prof["verifies"], p, [G - gd])
        common = {"method": "draft", "draft_model": str(draft),
                  "decoupled": DecoupledSpecConfig(profile=str(out / "spec_profile.json"), acceptance=p, draft_cores=gd,
                                                 verify_cores=G - gd)}
        spec_cfg = {"off": SpecConfig(),  # execution modes as such (gate off), then the engine's default
                    "coupled": SpecConfig(mode="coupled", gate=False, k_max=plans["coupled"].w, **common),
                    "decoupled": SpecConfig(mode="decoupled", gate=False, **common),
                    "auto": SpecConfig(mode="auto", **common)}
        reqs = [Request(tok(r["prompt"])["input_ids"], uid=i, n=group, params=params)
                for i, r in enumerate(rows_all[:B // group])]
        engines = {m: build_engine(model, None, EngineConfig(kv_cache_tokens=B * (max_new + 64) * 2, max_batch_size=B,
                                                 spec=spec_cfg[m])) for m in modes}
        warm = [Request(r.prompt_ids, uid=10**6 + i, params=SamplingParams(max_new_tokens=8)) for i, r in enumerate(reqs[:4])]
        for e in engines.values():
            e.generate(warm)
        acc = {m: [0.0, 0, 0.0, 0.0] for m in modes}  # phase seconds, phase tokens, batch x seconds, rollout seconds
        outs, spec = {}, {}
        for _ in range(repeats):
            for m, e in engines.items():
                t = time.perf_counter()
                o, trace = e.generate(reqs)
                acc[m][3] += time.perf_counter() - t
                secs, n, mean_b = phase(trace, B, frac)
                acc[m][0] += secs
                acc[m][1] += n
                acc[m][2] += mean_b * secs
                outs[m] = {(r.uid, r.sample_index): r.token_ids for r in o}
                spec[m] = trace.spec or {}
        dec = engines.get("decoupled")
        w = int(spec["decoupled"]["spec/decoupled/window_first"]) if dec is not None else plans["decoupled"].w
        row = {"batch": B, "max_new": max_new, "acceptance_profiled": p, "window": w, "coupled_window": plans["coupled"].w,
               "planned_best": plans["best"].mode}
        for m in modes:
            secs, n, bs, wall = acc[m]
            b = bs / secs  # mean active batch of the phase
            tgs = PREDICT[m](prof["drafts"], prof["verifies"], b, p, w, plans["coupled"].w, G, gd)
            same = sum(outs[m][k] == outs["off"][k] for k in outs["off"])
            row[m] = {"tokens_per_s": n / secs, "phase_s": secs / repeats, "mean_batch": b, "rollout_s": wall / repeats,
                      "predicted_tokens_per_s": b * tgs, "model_error": b * tgs / (n / secs) - 1.0,
                      "identity": same / len(outs["off"]), "acceptance": spec[m].get("spec/acceptance_rate")}
        for m in modes:
            row[m]["speedup_vs_off"] = row[m]["tokens_per_s"] / row["off"]["tokens_per_s"]
            row[m]["rollout_speedup_vs_off"] = row["off"]["rollout_s"] / row[m]["rollout_s"]
        results.append(row)
        _print(row, modes)
        for e in engines.values():
            e.close()
    summary = {"threads": threads, "modes": modes, "batches": batches, "max_new": max_new, "repeats": repeats,
               "group": group, "phase_frac": frac, "acceptance": p, "rows": results}
    write_outputs(out, _markdown(summary), summary)
    return summary


def _print(row: dict, modes: list[str]) -> None:
    parts = [f"B={row['batch']} w={row['window']} (model picks {row['planned_best']})"]
    for m in modes:
        r = row[m]
        parts.append(f"{m} {r['tokens_per_s']:.0f} tok/s at b~{r['mean_batch']:.0f} (pred {r['predicted_tokens_per_s']:.0f}, "
                     f"err {r['model_error']:+.1%}) x{r['speedup_vs_off']:.2f}, rollout x{r['rollout_speedup_vs_off']:.2f}, "
                     f"identity {r['identity']:.0%}")
    print(" | ".join(parts), flush=True)


def _markdown(s: dict) -> str:
    lines = [f"Speculation modes at large batch: demo policy + distilled draft (acceptance {s['acceptance']:.3f}), "
             f"groups of {s['group']}, up to {s['max_new']} new tokens, {s['threads']} cores; large-batch phase = "
             f"decode rounds after the first with >= {s['phase_frac']:.0%} of B running; coupled and decoupled "
             f"always speculate (gate off), auto = the engine's default (mode from the TGS model, measured "
             f"fallback to plain steps)", "",
             "| B | mode | phase tokens/s | × off | predicted | model error | whole rollout × off | identity | acceptance |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in s["rows"]:
        for m in s["modes"]:
            x = r[m]
            w = {"decoupled": f" (w={r['window']})", "coupled": f" (k={r['coupled_window']})"}.get(m, "")
            a = f"{x['acceptance']:.2f}" if x["acceptance"] is not None else "—"
            lines.append(f"| {r['batch']} | {m}{w} | {x['tokens_per_s']:.0f} | {x['speedup_vs_off']:.2f} | "
                         f"{x['predicted_tokens_per_s']:.0f} | {x['model_error']:+.1%} | {x['rollout_speedup_vs_off']:.2f} | "
                         f"{x['identity']:.0%} | {a} |")
    return "\n".join(lines)
