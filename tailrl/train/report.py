"""The run report: one PNG with the reward/accuracy curve, the last rollout's timeline, the
length distribution against the straggler threshold, and straggler rate / tail efficiency per step.
Runs driven by SAGC get a third row: G and the dual variable lambda over time, and the posterior
straggler risk of every candidate G (the SAGC paper's Figure 4)."""

from __future__ import annotations

import statistics
from pathlib import Path

from tailrl.outputs.timeline import draw_timeline
from tailrl.train.metrics import step_rows


def write_report(run_dir: Path, rows: list[dict], last_phase, tau: float, name: str = "report.png") -> Path:
    """Draw the report of a run's metric rows and its last rollout phase; returns the PNG's path."""
    fig = report_figure(rows, last_phase, tau)
    path = Path(run_dir) / name
    fig.savefig(path, dpi=110)
    fig.clear()
    return path


def report_figure(rows: list[dict], last_phase, tau: float):
    """The report as a matplotlib Figure (2 x 2 panels, a third row for SAGC runs)."""
    from matplotlib.figure import Figure  # lazy: matplotlib only when a plot is drawn

    steps = step_rows(rows)
    evals = [r for r in rows if r.get("eval/accuracy") is not None]
    sagc = [r for r in steps if r.get("sagc/lambda") is not None]
    fig = Figure(figsize=(12, 12 if sagc else 8))
    ax = fig.subplots(3 if sagc else 2, 2)

    a = ax[0, 0]
    a.plot([r["step"] for r in steps], [r["reward/mean"] for r in steps], label="train reward (mean)")
    if evals:
        a.plot([r["step"] for r in evals], [r["eval/accuracy"] for r in evals], "o-", label="held-out accuracy")
    a.set_xlabel("step")
    a.set_title("reward and held-out accuracy")
    a.set_ylim(0, 1)
    a.legend()

    a = ax[0, 1]
    if last_phase is not None and last_phase.traces:
        tr = last_phase.traces[0]
        draw_timeline(a, tr)
        if tr.parked_frac() > 0:
            a.legend(loc="upper right")
        a.set_title(f"last step's rollout timeline (tail efficiency {tr.tail_efficiency():.2f})")

    a = ax[1, 0]
    rel, lengths = [], []
    if last_phase is not None:
        for g in last_phase.generated:
            med = max(statistics.median(g.lengths), 1.0)
            rel += [n / med for n in g.lengths]
            lengths += g.lengths
    if rel:
        a.hist(rel, bins=40, color="tab:blue", alpha=0.8)
        a.axvline(tau, color="tab:red", ls="--", label=f"straggler threshold τ = {tau}")
        a.legend()
    a.set_xlabel("response length / group median")
    a.set_title(f"last step: {len(lengths)} responses, lengths {min(lengths, default=0)}–{max(lengths, default=0)}")

    a = ax[1, 1]
    a.plot([r["step"] for r in steps], [r["rollout/straggler_rate"] for r in steps], label="straggler rate")
    a.plot([r["step"] for r in steps], [r["rollout/tail_efficiency"] for r in steps], label="tail efficiency")
    a.set_xlabel("step")
    a.set_ylim(0, max(1.05, max((r["rollout/tail_efficiency"] for r in steps), default=1) * 1.05))
    a.set_title("long-tail telemetry")
    a.legend()
    if sagc:
        plot_sagc(ax[2, 0], ax[2, 1], sagc)
    fig.tight_layout()
    return fig


def plot_sagc(ax_g, ax_risk, rows: list[dict]) -> None:
    """G chosen per step with lambda (twin axis), and the posterior mean straggler risk per candidate."""
    x = [r["step"] for r in rows]
    ax_g.step(x, [r["rollout/group_size"] for r in rows], where="post", color="tab:blue", label="G")
    ax_g.set_xlabel("step")
    ax_g.set_ylabel("group size G")
    ax_g.set_title("SAGC: group size and dual variable")
    twin = ax_g.twinx()
    twin.plot(x, [r["sagc/lambda"] for r in rows], color="tab:orange", label="λ")
    twin.set_ylabel("λ")
    ax_g.legend(loc="upper left")
    twin.legend(loc="upper right")
    keys = sorted((k for k in rows[0] if k.startswith("sagc/p_hat/G=")), key=lambda k: int(k.split("=")[1]))
    for k in keys:
        ax_risk.plot(x, [r.get(k) for r in rows], label=k.split("/")[-1])
    if rows[0].get("sagc/delta") is not None:
        ax_risk.axhline(rows[0]["sagc/delta"], color="gray", ls="--", label="target δ")
    ax_risk.set_ylim(0, 1)
    ax_risk.set_xlabel("step")
    ax_risk.set_ylabel("posterior mean P(straggler)")
    ax_risk.set_title("SAGC: posterior straggler risk per candidate")
    ax_risk.legend()
