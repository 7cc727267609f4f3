"""The run report: one PNG with the reward/accuracy curve, the last rollout's timeline, the
length distribution against the straggler threshold, and straggler rate / tail efficiency per step."""

from __future__ import annotations

import statistics
from pathlib import Path


def write_report(run_dir: Path, rows: list[dict], last_phase, tau: float, name: str = "report.png") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r for r in rows if r.get("reward/mean") is not None]
    evals = [r for r in rows if r.get("eval/accuracy") is not None]
    fig, ax = plt.subplots(2, 2, figsize=(12, 8))

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
        times, batch = tr.timeline()
        a.step(times + [tr.t_end], batch + [batch[-1] if batch else 0], where="post")
        a.set_title(f"last step's rollout timeline (tail efficiency {tr.tail_efficiency():.2f})")
    a.set_xlabel("seconds")
    a.set_ylabel("active sequences")

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
    fig.tight_layout()
    path = Path(run_dir) / name
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
