"""`tailrl bench pods`: GRPO with update size m vs GRPO-PODS generating n = 4m and training on m
(PODS paper, single-device setting (a)), same training-time budget, on the embedded demo task.

Reports time to reach 0.99x of GRPO's peak held-out accuracy (PODS Table 3 style) and the three
down-sampling rules side by side (PODS App. A.3). The time axis is the steps' own wall time
(generation + reward + update), evaluations excluded.
"""

from __future__ import annotations

import json
from pathlib import Path

RUNS = [  # (name, overrides)
    ("grpo_m", ["rollout.group_size={m}"]),
    ("pods_max_variance", ["rollout.group_size={n}", "algo.downsample.rule=max_variance", "algo.downsample.m={m}"]),
    ("pods_max_reward", ["rollout.group_size={n}", "algo.downsample.rule=max_reward", "algo.downsample.m={m}"]),
    ("pods_random", ["rollout.group_size={n}", "algo.downsample.rule=random", "algo.downsample.m={m}"]),
]


def time_to_reach(curve: list[tuple[float, float]], target: float) -> float | None:
    """First time at which accuracy >= target (curve: (time, accuracy) in time order)."""
    return next((t for t, a in curve if a >= target - 1e-12), None)


def run_pods_bench(out_dir: str, m: int, ratio: int, prompts: int, budget_s: float, rules: bool,
                   extra: list[str]) -> dict:
    from rich.console import Console

    from tailrl.bench.common import demo_policy, run_demo_training

    console = Console(stderr=True)
    root = Path(out_dir)
    model_dir = demo_policy()
    n = m * ratio
    results = {}
    for name, ovs in RUNS if rules else RUNS[:2]:
        run_dir = root / name
        G = n if name.startswith("pods") else m
        ov = [o.format(m=m, n=n) for o in ovs] + [
            f"train.rollout_batch_size={prompts * G}", f"train.micro_batch_size={prompts * m}",
            "train.total_steps=100000", f"train.time_budget_s={budget_s}", "train.eval_every=5",
            "train.save_every=0", "train.tensorboard=false"] + list(extra)
        console.print(f"[bold]{name}[/bold]: P={prompts}, generate {G}/prompt, train {m}/prompt, budget {budget_s:.0f}s")
        rows, wall = run_demo_training(model_dir, run_dir, ov)
        curve = [(0.0, rows[0]["eval/accuracy"])] + [(r["timing_s/cumulative"], r["eval/accuracy"]) for r in rows
                                                    if r.get("eval/accuracy") is not None and r["step"] > 0]
        upd = [r["timing_s/update"] for r in rows if "timing_s/update" in r]
        gen = [r["timing_s/gen"] for r in rows if "timing_s/gen" in r]
        results[name] = {"curve": curve, "steps": len(upd), "peak": max(a for _, a in curve),
                         "mean_update_s": sum(upd) / len(upd), "mean_gen_s": sum(gen) / len(gen),
                         "wall_s": wall}
    peak = results["grpo_m"]["peak"]
    target = 0.99 * peak
    for r in results.values():
        r["time_to_target_s"] = time_to_reach(r["curve"], target)
    base = results["grpo_m"]["time_to_target_s"]
    summary = {"m": m, "n": n, "prompts_per_step": prompts, "budget_s": budget_s, "grpo_peak": peak,
               "target": target, "runs": results}
    for r in results.values():
        t = r["time_to_target_s"]
        r["speedup_vs_grpo"] = (base / t) if (t and base) else None
    root.mkdir(parents=True, exist_ok=True)
    (root / "pods_bench.json").write_text(json.dumps(summary, indent=1))
    _plot(results, target, root / "pods_bench.png")
    print(f"target = 0.99 x GRPO peak = {target:.3f}  (m={m}, n={n}, P={prompts}, budget {budget_s:.0f}s)")
    print(f"{'run':20s} {'steps':>6s} {'peak':>6s} {'t->target s':>12s} {'speed-up':>9s} {'gen s/step':>10s} {'upd s/step':>10s}")
    for name, r in results.items():
        t = r["time_to_target_s"]
        sp = r["speedup_vs_grpo"]
        t_txt = f"{t:.1f}" if t else "never"
        sp_txt = f"{sp:.2f}x" if sp else "-"
        print(f"{name:20s} {r['steps']:>6d} {r['peak']:>6.3f} {t_txt:>12s} {sp_txt:>9s} "
              f"{r['mean_gen_s']:>10.2f} {r['mean_update_s']:>10.2f}")
    return summary


def _plot(results: dict, target: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, r in results.items():
        ax.plot([t for t, _ in r["curve"]], [a for _, a in r["curve"]], "o-", ms=3, label=name)
    ax.axhline(target, color="gray", ls="--", label="0.99 x GRPO peak")
    ax.set_xlabel("training time (s, evals excluded)")
    ax.set_ylabel("held-out accuracy")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
