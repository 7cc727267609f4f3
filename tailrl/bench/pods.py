"""`tailrl bench pods`: GRPO with update size m vs GRPO-PODS generating n = 4m and training on m
(PODS paper, single-device setting (a)), same training-time budget, on the embedded demo task.

Reports time to reach 0.99x of GRPO's peak held-out accuracy (PODS Table 3 style) and the three
down-sampling rules side by side (PODS App. A.3), over one or more seeds: the headline is read off the
seed-mean curves (accuracy and time averaged per evaluation step), the per-seed ratios show the spread. The time axis is the steps' own wall time
(generation + reward + update), evaluations excluded.
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from tailrl.bench.common import demo_policy, run_demo_training, time_to_reach
from tailrl.errors import UserError
from tailrl.train.metrics import read_metrics

RUNS = [  # (name, overrides)
    ("grpo_m", ["rollout.group_size={m}"]),
    ("pods_max_variance", ["rollout.group_size={n}", "algo.downsample.rule=max_variance", "algo.downsample.m={m}"]),
    ("pods_max_reward", ["rollout.group_size={n}", "algo.downsample.rule=max_reward", "algo.downsample.m={m}"]),
    ("pods_random", ["rollout.group_size={n}", "algo.downsample.rule=random", "algo.downsample.m={m}"]),
]


def mean_curve(evals: list[list[tuple[int, float, float]]]) -> list[tuple[float, float]]:
    """Seeds' evaluations (step, time, accuracy) -> (mean time, mean accuracy) at every step that all seeds
    evaluated, in step order (a run's off-grid last evaluation, where its budget ran out, is left out
    unless every seed has that step)."""
    common = set.intersection(*({st for st, _, _ in e} for e in evals))
    by_step = [{st: (t, a) for st, t, a in e} for e in evals]
    return [(sum(d[st][0] for d in by_step) / len(evals), sum(d[st][1] for d in by_step) / len(evals))
            for st in sorted(common)]


def speedups(curves: dict[str, list[tuple[float, float]]], base: str = "grpo_m") -> tuple[float, dict]:
    """Target = 0.99 x the base run's peak; per run: (time to target or None, speed-up vs base or None)."""
    target = 0.99 * max(a for _, a in curves[base])
    t = {name: time_to_reach(c, target) for name, c in curves.items()}
    ok = t[base] is not None and t[base] > 0
    return target, {name: (t[name], t[base] / t[name] if ok and t[name] else None) for name in curves}


def run_summary(rows: list[dict], wall: float) -> dict:
    """One run's evaluations (step, time, accuracy), curve (time, accuracy) and mean step costs."""
    evals = [(0, 0.0, rows[0]["eval/accuracy"])] + [(r["step"], r["timing_s/cumulative"], r["eval/accuracy"])
                                                    for r in rows if r.get("eval/accuracy") is not None and r["step"] > 0]
    upd = [r["timing_s/update"] for r in rows if "timing_s/update" in r]
    gen = [r["timing_s/gen"] for r in rows if "timing_s/gen" in r]
    return {"evals": evals, "curve": [(t, a) for _, t, a in evals], "steps": len(upd),
            "peak": max(a for _, _, a in evals), "mean_update_s": sum(upd) / len(upd),
            "mean_gen_s": sum(gen) / len(gen), "wall_s": wall}


SEED_KEYS = ("rollout.seed", "data.seed", "train.seed")


def run_pods_bench(out_dir: str, m: int, ratio: int, prompts: int, budget_s: float, rules: bool,
                   extra: list[str], seeds: list[int] = (0,), reuse: bool = False) -> dict:
    """Every run once per seed (rollout, prompt-order and torch seeds); the headline speed-up is read off the
    seed-mean curves, the per-seed speed-ups show the spread. reuse: read runs already in out_dir (same
    settings) instead of training them again."""

    if any(o.split("=", 1)[0] in SEED_KEYS for o in extra):
        raise UserError(f"set seeds with --seeds, not with overrides ({', '.join(SEED_KEYS)})")
    console = Console(stderr=True)
    root = Path(out_dir)
    model_dir = None if reuse else demo_policy()
    n = m * ratio
    runs: dict[str, dict[int, dict]] = {}
    for seed in seeds:
        for name, ovs in RUNS if rules else RUNS[:2]:
            G = n if name.startswith("pods") else m
            run_dir = root / f"{name}-seed{seed}"
            if reuse:
                if not (run_dir / "metrics.jsonl").is_file():
                    raise UserError(f"--reuse: no finished run in {run_dir}")
                runs.setdefault(name, {})[seed] = run_summary(read_metrics(run_dir), float("nan"))
                continue
            ov = [o.format(m=m, n=n) for o in ovs] + [
                f"train.rollout_batch_size={prompts * G}", f"train.micro_batch_size={prompts * m}",
                "train.total_steps=100000", f"train.time_budget_s={budget_s}", "train.eval_every=5",
                "train.save_every=0", "train.tensorboard=false"] + list(extra) + [f"{k}={seed}" for k in SEED_KEYS]
            console.print(f"[bold]{name}[/bold] seed {seed}: P={prompts}, generate {G}/prompt, train {m}/prompt, "
                          f"budget {budget_s:.0f}s")
            rows, wall = run_demo_training(model_dir, run_dir, ov)
            runs.setdefault(name, {})[seed] = run_summary(rows, wall)
    means = {name: mean_curve([r["evals"] for r in by_seed.values()]) for name, by_seed in runs.items()}
    target, sp = speedups(means)
    per_seed = {seed: speedups({name: runs[name][seed]["curve"] for name in runs})[1] for seed in seeds}
    results = {}
    for name, by_seed in runs.items():
        avg = {k: sum(r[k] for r in by_seed.values()) / len(by_seed) for k in ("steps", "mean_update_s", "mean_gen_s")}
        results[name] = avg | {"mean_curve": means[name], "peak": max(a for _, a in means[name]),
                               "time_to_target_s": sp[name][0], "speedup_vs_grpo": sp[name][1],
                               "speedup_per_seed": {s: per_seed[s][name][1] for s in seeds}, "seeds": by_seed}
    summary = {"m": m, "n": n, "prompts_per_step": prompts, "budget_s": budget_s, "seeds": list(seeds),
               "grpo_peak": results["grpo_m"]["peak"], "target": target, "runs": results}
    root.mkdir(parents=True, exist_ok=True)
    (root / "pods_bench.json").write_text(json.dumps(summary, indent=1))
    _plot(results, target, root / "pods_bench.png")
    print(f"target = 0.99 x GRPO's peak of the seed-mean curve = {target:.3f}  (m={m}, n={n}, P={prompts}, "
          f"budget {budget_s:.0f}s, seeds {list(seeds)})")
    print(f"{'run':20s} {'steps':>6s} {'peak':>6s} {'t->target s':>12s} {'speed-up':>9s} {'per seed':>20s} "
          f"{'gen s/step':>10s} {'upd s/step':>10s}")
    fmt = lambda x: f"{x:.2f}x" if x else "-"  # noqa: E731
    for name, r in results.items():
        t = r["time_to_target_s"]
        t_txt = f"{t:.1f}" if t is not None else "never"
        seeds_txt = " ".join(fmt(x) for x in r["speedup_per_seed"].values())
        print(f"{name:20s} {r['steps']:>6.0f} {r['peak']:>6.3f} {t_txt:>12s} {fmt(r['speedup_vs_grpo']):>9s} "
              f"{seeds_txt:>20s} {r['mean_gen_s']:>10.2f} {r['mean_update_s']:>10.2f}")
    return summary


def _plot(results: dict, target: float, path: Path) -> None:
    # lazy: matplotlib only when a plot is drawn
    import matplotlib

    matplotlib.use("Agg")
    # lazy: matplotlib only when a plot is drawn
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (name, r) in enumerate(results.items()):
        color = f"C{i}"
        for run in r["seeds"].values():
            ax.plot([t for t, _ in run["curve"]], [a for _, a in run["curve"]], "-", color=color, alpha=0.2, lw=0.8)
        ax.plot([t for t, _ in r["mean_curve"]], [a for _, a in r["mean_curve"]], "o-", ms=3, color=color,
                label=f"{name} (mean of {len(r['seeds'])})")
    ax.axhline(target, color="gray", ls="--", label="0.99 x GRPO peak")
    ax.set_xlabel("training time (s, evals excluded)")
    ax.set_ylabel("held-out accuracy")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
