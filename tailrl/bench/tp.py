"""`tailrl bench tp`: static layouts vs PAT's adaptive switching on a long-tailed batch (2 ranks here).

One random-weight Llama large enough that a decode step is weight-bandwidth bound on this CPU (so
splitting it over two ranks can pay once the batch is a few stragglers), a batch of requests with
forced lengths (most short, a few long), and on the same requests:

  static TP1/DP2, static TP2/DP1       the layouts PAT chooses between
  adaptive (PAT)                       starts TP1/DP2; the controller (profiled predictor) decides
  forced switch, migrate / recompute   the switch itself: overhead split weights / KV / groups

Reported: rollout seconds and ratios to the best static layout, every switch's overhead split and KV
path, the predictor's error on each static run (per decode step: profiled prediction vs measured
step-to-step time), and token identity of every run against static TP1/DP2.
"""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path

from tailrl.bench.common import write_outputs
from tailrl.config import EngineConfig
from tailrl.engine import Request, SamplingParams
from tailrl.model import ModelArgs
from tailrl.model.loading import build_model, cache_dir, save_hf
from tailrl.model.weights import init_random
from tailrl.parallel.generate import SwitchParams, run_parallel_generate
from tailrl.parallel.latency_profile import save_profile
from tailrl.parallel.profile import profile_tp
from tailrl.perf.latency import Profiled

BENCH_MODEL = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=6, num_attention_heads=8,
                   num_key_value_heads=4, vocab_size=4096)


def bench_model(folder: Path) -> Path:
    """A random-weight Llama (~78M parameters) as an HF folder, made once."""
    if (folder / "model.safetensors").is_file():
        return folder

    cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", max_position_embeddings=4096,
               rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, hidden_act="silu",
               bos_token_id=1, eos_token_id=2, torch_dtype="float32", **BENCH_MODEL)
    return save_hf(init_random(build_model(ModelArgs.from_hf(cfg)), std=0.02, seed=0), folder, hf_config=cfg)


def long_tailed_requests(n: int, long_every: int, short: tuple[int, int], long: int, seed: int = 0):
    rng = random.Random(seed)
    params = SamplingParams(temperature=1.0, max_new_tokens=long, seed=seed, ignore_eos=True)
    return [Request([rng.randrange(3, 4096) for _ in range(rng.randint(8, 24))], uid=i, params=params,
                    max_new_tokens=[long if i % long_every == 0 else rng.randint(*short)]) for i in range(n)]


def predictor_error(profile: dict, steps) -> float:
    """Sum of profiled predictions over a run's decode steps / sum of their measured step-to-step times - 1."""

    lat = Profiled(profile)
    pred = meas = 0.0
    for a, b in zip(steps, steps[1:]):
        if a.kind == "decode" and b.t0 > a.t0 and a.tp == b.tp:
            pred += lat.decode(a.tp, a.batch, a.context)
            meas += b.t0 - a.t0
    return pred / meas - 1 if meas else 0.0


def run_tp_bench(out_dir: str | Path, requests: int = 32, long_every: int = 16, long: int = 192,
                 switch_at: int = 24) -> str:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = str(bench_model(cache_dir() / "bench-tp-llama78m"))
    cfg = EngineConfig(kv_cache_tokens=16384, max_batch_size=256)  # fits the batch; a switch allocates a new pool
    t = time.perf_counter()
    profile = profile_tp(model, 2, [1, 2], cfg, (1, 4, 16, 32), (16, 160), 12)
    profile_s = time.perf_counter() - t
    save_profile(profile, out / "tp_profile.json")
    reqs = long_tailed_requests(requests, long_every, (8, 40), long)
    runs = {"static TP1/DP2": (1, SwitchParams()), "static TP2/DP1": (2, SwitchParams()),
            "adaptive (PAT)": (1, SwitchParams("auto")),
            "forced TP1->TP2, migrate": (1, SwitchParams("forced", 2, switch_at, "migrate")),
            "forced TP1->TP2, recompute": (1, SwitchParams("forced", 2, switch_at, "recompute"))}
    results = {}
    for name, (tp, sw) in runs.items():
        res, _ = run_parallel_generate(model, reqs, cfg, tp, 2 // tp, sw, profile, (), long, interval=8)
        results[name] = res
        print(f"  {name}: {res.rollout_s:.2f} s, layouts {' -> '.join(res.layouts)}", flush=True)
    ref = [(r.uid, r.token_ids) for r in results["static TP1/DP2"].rollouts]
    best = min(results["static TP1/DP2"].rollout_s, results["static TP2/DP1"].rollout_s)
    rows, table = [], ["| run | layouts | rollout s | vs best static | switch s (weights / KV / groups) | KV path | "
                       "tokens identical |", "|---|---|---|---|---|---|---|"]
    for name, res in results.items():
        same = sum(a == b for a, b in zip([(r.uid, r.token_ids) for r in res.rollouts], ref)) / len(ref)
        sw = res.switches
        split = "; ".join(f"{e.total_s:.3f} ({e.weights_s:.3f} / {e.kv_s:.3f} / {e.groups_s:.3f})" for e in sw) or "—"
        table.append(f"| {name} | {' -> '.join(res.layouts)} | {res.rollout_s:.2f} | {best / res.rollout_s:.2f}x | "
                     f"{split} | {', '.join(e.kv_path for e in sw) or '—'} | {same:.0%} |")
        rows.append({"run": name, "tp/layout": res.layouts, "timing_s/gen": res.rollout_s,
                     "tp/switch_events": len(sw), "tp/switch_seconds": sum(e.total_s for e in sw),
                     "switches": [e.__dict__ for e in sw], "token_identity": same})
    errs = {name: predictor_error(profile, results[name].steps) for name in ("static TP1/DP2", "static TP2/DP1")}
    for r in rows:
        if r["run"] in errs:
            r["tp/predicted_vs_actual"] = errs[r["run"]]
    md = "\n".join(table) + (
        f"\n\nProfile: {profile_s:.0f} s (`tailrl profile tp`, TP1 and TP2 on 2 ranks; all-gather "
        f"{profile['bandwidth'] / 1e9:.2f} GB/s per rank, group creation {profile['group_init_s'] * 1e3:.1f} ms, "
        f"engine + KV pool {', '.join(f'TP{k} {v:.2f} s' for k, v in profile['engine_init_s'].items())}). "
        "Predictor error per decode step, summed over each static run: "
        + ", ".join(f"{k} {v:+.1%}" for k, v in errs.items()) + ".\n")
    write_outputs(out, md, {"runs": rows, "predictor_error": errs, "decode_step_ms_median": {
        k: statistics.median([(s.t1 - s.t0) * 1e3 for s in v.steps if s.kind == "decode"]) for k, v in results.items()}})
    return md
