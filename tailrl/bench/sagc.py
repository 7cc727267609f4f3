"""`tailrl bench sagc`: static G in {4, 8, 16} vs SAGC on the embedded demo task, one run each, under
the SAGC paper's fair protocol (section 5.2, App. B): the same prompt budget N and the same effective
batch B = P * G for every method, so every step does the same generation work and a smaller G means
more prompts per step and fewer steps.

Reported per run (paper Table 1 style) and as ratios against static G = 16: wall-clock (the steps'
own time, evaluations excluded), straggler rate (fraction of groups with max/median length > tau),
final reward (mean training reward over the last 20% of the prompt budget), held-out accuracy at the
end, mean response length. Writes sagc_bench.json and sagc_bench.png (reward vs wall-clock, G and
lambda over steps, posterior straggler risk per candidate).
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from tailrl.bench.common import demo_policy, run_demo_training
from tailrl.train.metrics import step_rows
from tailrl.train.report import plot_sagc

TARGETS = {"wall": 0.6, "straggler": 0.5, "reward": 0.95}  # SAGC vs static G_max (issue: <=, <=, >=)


def summarize(rows: list[dict], prompt_budget: int, tail_frac: float = 0.2) -> dict:
    """One run's Table-1 numbers from its metrics rows (step rows carry reward/mean; eval rows eval/accuracy)."""
    steps = step_rows(rows)
    groups = [r["data/prompts"] for r in steps]
    used, tail = 0.0, []
    for r, n in zip(steps, groups):
        used += n
        if used > (1.0 - tail_frac) * prompt_budget:
            tail.append(r)
    tail = tail or steps[-1:]
    evals = [r for r in rows if r.get("eval/accuracy") is not None]
    return {
        "steps": len(steps),
        "prompts": int(sum(groups)),
        "wall_s": steps[-1]["timing_s/cumulative"],
        "gen_s": sum(r["timing_s/gen"] for r in steps),
        "straggler_rate": sum(r["rollout/straggler_rate"] * n for r, n in zip(steps, groups)) / sum(groups),
        "final_reward": sum(r["reward/mean"] for r in tail) / len(tail),
        "accuracy_start": evals[0]["eval/accuracy"] if evals else None,
        "accuracy_end": evals[-1]["eval/accuracy"] if evals else None,
        "mean_response_length": sum(r["response_length/mean"] * n for r, n in zip(steps, groups)) / sum(groups),
        "group_sizes": [int(r["rollout/group_size"]) for r in steps],
    }


def run_sagc_bench(out_dir: str, batch: int, prompt_budget: int, candidates: list[int], start_g: int | None,
                   extra: list[str], sagc_extra: list[str]) -> dict:
    console = Console(stderr=True)
    root = Path(out_dir)
    model_dir = demo_policy()
    gmax = max(candidates)
    start = start_g if start_g is not None else sorted(candidates)[len(candidates) // 2]
    common = [f"train.rollout_batch_size={batch}", f"train.micro_batch_size={min(batch, 64)}",
              f"train.prompt_budget={prompt_budget}", "train.total_steps=1000000", "train.eval_every=1000000",
              "train.save_every=0", "train.tensorboard=false"] + list(extra)
    plan = [(f"static_G{g}", [f"rollout.group_size={g}"]) for g in sorted(candidates)]
    plan.append(("sagc", [f"rollout.group_size={start}", "control.kind=sagc",
                          "control.candidates=[" + ",".join(map(str, sorted(candidates))) + "]"] + list(sagc_extra)))
    results, histories = {}, {}
    for name, ov in plan:
        console.print(f"[bold]{name}[/bold]: B={batch}, prompt budget {prompt_budget}")
        rows, wall = run_demo_training(model_dir, root / name, common + ov)
        results[name] = summarize(rows, prompt_budget) | {"wall_with_evals_s": wall}
        histories[name] = step_rows(rows)
    base = results[f"static_G{gmax}"]
    for r in results.values():
        r["wall_ratio"] = r["wall_s"] / base["wall_s"]
        r["straggler_ratio"] = r["straggler_rate"] / base["straggler_rate"] if base["straggler_rate"] else None
        r["reward_ratio"] = r["final_reward"] / base["final_reward"] if base["final_reward"] else None
    s = results["sagc"]
    met = {"wall": s["wall_ratio"] <= TARGETS["wall"],
           "straggler": s["straggler_ratio"] is not None and s["straggler_ratio"] <= TARGETS["straggler"],
           "reward": s["reward_ratio"] is not None and s["reward_ratio"] >= TARGETS["reward"]}
    summary = {"batch": batch, "prompt_budget": prompt_budget, "candidates": sorted(candidates), "sagc_start": start,
               "extra": list(extra), "sagc_extra": list(sagc_extra), "runs": results, "targets": TARGETS, "met": met}
    root.mkdir(parents=True, exist_ok=True)
    (root / "sagc_bench.json").write_text(json.dumps(summary, indent=1))
    _plot(histories, root / "sagc_bench.png")
    print_table(summary)
    return summary


def print_table(summary: dict) -> None:
    print(f"B={summary['batch']}, prompt budget {summary['prompt_budget']}, candidates {summary['candidates']}")
    print(f"{'run':12s} {'steps':>5s} {'wall s':>7s} {'x G_max':>7s} {'straggler':>9s} {'x G_max':>7s} "
          f"{'reward':>6s} {'x G_max':>7s} {'acc':>11s} {'mean len':>8s}")
    for name, r in summary["runs"].items():
        acc = f"{r['accuracy_start']:.3f}->{r['accuracy_end']:.3f}" if r["accuracy_end"] is not None else "-"
        sr = f"{r['straggler_ratio']:.2f}" if r["straggler_ratio"] is not None else "-"
        rr = f"{r['reward_ratio']:.2f}" if r["reward_ratio"] is not None else "-"
        print(f"{name:12s} {r['steps']:>5d} {r['wall_s']:>7.1f} {r['wall_ratio']:>7.2f} {r['straggler_rate']:>9.3f} "
              f"{sr:>7s} {r['final_reward']:>6.3f} {rr:>7s} {acc:>11s} {r['mean_response_length']:>8.1f}")
    t, met = summary["targets"], summary["met"]
    print(f"targets (SAGC vs G_max): wall <= {t['wall']}x {'met' if met['wall'] else 'NOT met'}; straggler <= "
          f"{t['straggler']}x {'met' if met['straggler'] else 'NOT met'}; reward >= {t['reward']}x "
          f"{'met' if met['reward'] else 'NOT met'}")


def _plot(histories: dict[str, list[dict]], path: Path) -> None:
    # lazy: matplotlib only when a plot is drawn
    import matplotlib

    matplotlib.use("Agg")
    # lazy: matplotlib only when a plot is drawn
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 2, figsize=(12, 8))
    for name, rows in histories.items():
        ax[0, 0].plot([r["timing_s/cumulative"] for r in rows], _smooth([r["reward/mean"] for r in rows]), label=name)
        ax[0, 1].plot([r["timing_s/cumulative"] for r in rows], _smooth([r["rollout/straggler_rate"] for r in rows]),
                      label=name)
    ax[0, 0].set_title("training reward (moving average of 5 steps)")
    ax[0, 1].set_title("straggler rate (moving average of 5 steps)")
    for a in ax[0]:
        a.set_xlabel("wall-clock s (steps only)")
        a.legend()
    if histories.get("sagc"):
        plot_sagc(ax[1, 0], ax[1, 1], histories["sagc"])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _smooth(v: list[float], k: int = 5) -> list[float]:
    return [sum(v[max(0, i - k + 1): i + 1]) / len(v[max(0, i - k + 1): i + 1]) for i in range(len(v))]
