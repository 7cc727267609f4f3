"""`tailrl bench sim`: the simulator against what it must reproduce.

1. calibration: the bundled configs (tailrl/sim/calibration/) against the four papers' headline
   numbers — each row the paper's figure, the simulated one and the error (ranges: distance to the
   range), within ±15% or not;
2. replay: a short demo training run writes traces.jsonl, the engine is profiled on this machine
   (`tailrl profile engine`), and the simulator replays every generation round of the run with the
   profile; predicted vs measured rollout time per round.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from tailrl.bench.common import demo_policy, run_demo_training, write_outputs
from tailrl.config import load_config
from tailrl.model import load
from tailrl.parallel.latency_profile import profile_engine, save_profile
from tailrl.perf.hardware import gpu, model_spec
from tailrl.perf.latency import CALIBRATED, Roofline
from tailrl.perf.pat import PatPolicy
from tailrl.sim.command import resolve_config
from tailrl.sim.config import SimConfig
from tailrl.sim.run import simulate, variants
from tailrl.speculative import build_engine

TOLERANCE = 0.15


@dataclass
class Check:
    target: str
    config: str  # bundled config (and overrides) that reproduces it
    paper: float | tuple[float, float]
    sim: float
    fitted: bool = False  # the engine constants were fitted to this number (not a prediction)
    informative: bool = False  # not a calibration target (shown for comparison)

    @property
    def error(self) -> float:
        if isinstance(self.paper, tuple):
            lo, hi = self.paper
            return 0.0 if lo <= self.sim <= hi else (self.sim / lo - 1 if self.sim < lo else self.sim / hi - 1)
        return self.sim / self.paper - 1

    @property
    def ok(self) -> bool:
        return abs(self.error) <= TOLERANCE


def _summaries(config: str, overrides: list[str] = ()) -> dict[str, dict]:
    cfg = load_config(resolve_config(config), list(overrides), cls=SimConfig)
    return {name: simulate(v, name).summary() for name, v in variants(cfg)}


def calibration_checks() -> list[Check]:
    out: list[Check] = []
    c = "pat_h100_llama8b_24k"
    s = _summaries(c)
    st, pat = s["static TP2/DP4"], s["PAT"]
    out += [Check("PAT H100 LLaMA3.1-8B 24K: static generation s", c, 134.3, st["timing_s/gen"], True),
            Check("PAT H100 LLaMA3.1-8B 24K: PAT generation s", c, 87.9, pat["timing_s/gen"], True),
            Check("PAT H100 LLaMA3.1-8B 24K: static tokens/s", c, 2570.6, st["perf/throughput"]),
            Check("PAT H100 LLaMA3.1-8B 24K: PAT tokens/s", c, 3510.9, pat["perf/throughput"]),
            Check("PAT H100 LLaMA3.1-8B 24K: throughput speed-up", c, 1.37, pat["perf/throughput"] / st["perf/throughput"])]
    c = "pat_h100_qwen14b_16k"
    s = _summaries(c)
    st, pat = s["static TP2/DP4"], s["PAT"]
    out += [Check("PAT H100 Qwen3-14B 16K: static generation s", c, 133.9, st["timing_s/gen"], True),
            Check("PAT H100 Qwen3-14B 16K: PAT generation s", c, 91.1, pat["timing_s/gen"], True),
            Check("PAT H100 Qwen3-14B 16K: throughput speed-up", c, 1.29, pat["perf/throughput"] / st["perf/throughput"])]
    lat = Roofline(gpu("a40"), model_spec("llama3.1-8b"), CALIBRATED["a40"])
    for tp, b, ms in ((2, 1, 15.37), (8, 1, 9.64), (2, 128, 24.41), (8, 128, 30.87)):
        per = max(b // (8 // tp), 1)  # a global batch over the DP replicas
        out.append(Check(f"PAT §3.1 A40 LLaMA3.1-8B decode ms/token, batch {b}, TP{tp}", "latency roofline a40, 2K context",
                         ms, lat.decode(tp, per, per * 2048) * 1e3, True))

    pol = PatPolicy.for_hardware(lat, model_spec("llama3.1-8b"), gpu("a40"), CALIBRATED["a40"].link_eff, node_gpus=8,
                                 tp_options=(2, 8), max_len=16384, kv="migrate")
    cost = pol.switch_cost(2, 8, [12 * 1024] * 9)  # PAT §5.4: TP2 -> TP8, 9 unfinished samples at 12K context
    out += [Check("PAT §5.4 A40 switch TP2->TP8 (9 x 12K): weight resharding s", "PatPolicy.switch_cost, a40", 1.03,
                  cost.weights_s, informative=True),
            Check("PAT §5.4 A40 switch TP2->TP8 (9 x 12K): KV migration s", "PatPolicy.switch_cost, a40", 2.36,
                  cost.kv_s, informative=True)]
    c = "pat_a40_llama8b"
    for max_len in (6144, 16384):
        s = _summaries(c, [f"workload.max_new_tokens={max_len}"])
        best = max((v["perf/throughput"] for k, v in s.items() if k.startswith("static")))
        out.append(Check(f"PAT A40 LLaMA3.1-8B {max_len // 1024}K: speed-up over best static (1.05-1.27)",
                         f"{c} workload.max_new_tokens={max_len}", (1.05, 1.27), s["PAT"]["perf/throughput"] / best))
    c = "specactor_qwen32b_grpo"
    s = _summaries(c)
    base, sa = s["veRL (no speculation)"], s["decoupled + Best-of-N (SpecActor)"]
    out += [Check("SpecActor GRPO-32B-20K: rollout speed-up over veRL (2.0-2.4)", c, (2.0, 2.4),
                  base["timing_s/gen"] / sa["timing_s/gen"]),
            Check("SpecActor GRPO-32B-20K: tail acceptance (48.7-72.3%)", c, (0.487, 0.723), sa["spec/tail_accept_rate"]),
            Check("SpecActor GRPO-32B-20K: coupled (VanillaSpec) speed-up (naive: 1.1-1.2)", c, (1.1, 1.2),
                  base["timing_s/gen"] / s["coupled (VanillaSpec)"]["timing_s/gen"], informative=True)]
    c = "sagc_qwen3b"
    s = _summaries(c)
    rates = [s[f"static G={g}"]["rollout/straggler_rate"] for g in (4, 8, 16)]
    ordered = float(rates[0] < rates[1] < rates[2])
    out += [Check("SAGC Qwen2.5-3B: straggler rate G=4 < G=8 < G=16 (1 = ordered)", c, 1.0, ordered)]
    for g, paper in zip((4, 8, 16), (0.039, 0.141, 0.314)):
        out.append(Check(f"SAGC Qwen2.5-3B (OpenRLHF row): straggler rate at G={g}", c, paper,
                         s[f"static G={g}"]["rollout/straggler_rate"], informative=True))
    return out


def _fmt(x) -> str:
    if isinstance(x, tuple):
        return f"{x[0]:g}-{x[1]:g}"
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.1f}"


def calibration_table(checks: list[Check]) -> str:
    lines = ["| target | paper | simulated | error | within ±15% | reproduce with |", "|---|---|---|---|---|---|"]
    for c in checks:
        fit = " (fitted)" if c.fitted else " (informative)" if c.informative else ""
        lines.append(f"| {c.target}{fit} | {_fmt(c.paper)} | {_fmt(c.sim)} | {c.error:+.1%} | {'yes' if c.ok else 'NO'} "
                     f"| `{c.config}` |")
    return "\n".join(lines)


def replay(out_dir: Path, steps: int, trace: str | None = None, profile: str | None = None) -> dict:
    """Train the demo for `steps` steps (or use `trace`), profile the engine, replay; per-round errors."""

    run_dir = Path(trace) if trace else out_dir / "run"
    model_dir = demo_policy()
    if not trace:  # a fresh run (run_demo_training clears the folder): traces.jsonl holds only its rounds
        run_demo_training(model_dir, run_dir, [f"train.total_steps={steps}", "train.eval_every=100000",
                                               "train.tensorboard=false", "train.save_every=0"])
    run_cfg = load_config(run_dir / "config.yaml")
    if not profile:

        model, _ = load(str(model_dir), tokenizer=False)
        t0 = time.perf_counter()
        prof = profile_engine(build_engine(model, None, run_cfg.engine), model.args.vocab_size, (1, 4, 16, 64, 128, 256), (8, 48, 128))
        profile = str(out_dir / "engine_profile.json")
        save_profile(prof, profile)
        print(f"  engine profiled in {time.perf_counter() - t0:.1f} s -> {profile}")
    e = run_cfg.engine
    cfg = load_config(None, [f"workload.trace={run_dir}", f"latency.profile={profile}", "cluster.num_gpus=1",
                             f"engine.max_batch_size={e.max_batch_size}", f"engine.max_prefill_tokens={e.max_prefill_tokens}",
                             "engine.chunk=1"], cls=SimConfig)
    res = simulate(cfg, "replay")
    rows = [(s.measured_gen_s, s.gen_s) for s in res.steps]
    errs = [p / m - 1 for m, p in rows]
    return {"run_dir": str(run_dir), "profile": profile, "rounds": len(rows),
            "measured_s": sum(m for m, _ in rows), "predicted_s": sum(p for _, p in rows),
            "total_error": sum(p for _, p in rows) / sum(m for m, _ in rows) - 1,
            "mean_abs_error": statistics.mean(abs(x) for x in errs), "max_abs_error": max(abs(x) for x in errs),
            "per_round": [{"measured_s": m, "predicted_s": p} for m, p in rows]}


def run_sim_bench(out_dir: str | Path, replay_steps: int = 8, trace: str | None = None, profile: str | None = None,
                  calibration: bool = True, do_replay: bool = True) -> str:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    parts, result = [], {}
    if calibration:
        t0 = time.perf_counter()
        checks = calibration_checks()
        md = calibration_table(checks)
        parts.append(f"## Calibration against the papers ({time.perf_counter() - t0:.0f} s)\n\n{md}")
        result["calibration"] = [{"target": c.target, "paper": c.paper, "sim": c.sim, "error": c.error, "ok": c.ok,
                                  "fitted": c.fitted, "informative": c.informative, "config": c.config} for c in checks]
    if do_replay:
        r = replay(out, replay_steps, trace, profile)
        result["replay"] = r
        parts.append(f"## Replay of tailrl's own rollouts ({r['rounds']} steps of {r['run_dir']})\n\n"
                     f"| measured s | predicted s | total error | mean abs error per step | max abs error |\n"
                     f"|---|---|---|---|---|\n| {r['measured_s']:.2f} | {r['predicted_s']:.2f} | {r['total_error']:+.1%} "
                     f"| {r['mean_abs_error']:.1%} | {r['max_abs_error']:.1%} |")
    md = "\n\n".join(parts)
    write_outputs(out, md, result)
    return md
