"""What `tailrl simulate` writes: a markdown table of the variants (ratios to the first), the
per-step rows as JSON, and plots (active sequences over one round's time per variant; step-time
breakdown)."""

from __future__ import annotations

import json
from pathlib import Path

from tailrl.sim.generation import GenResult

COLUMNS = [("timing_s/gen", "gen s", "{:.2f}"), ("timing_s/prepare", "prepare s", "{:.2f}"),
           ("timing_s/update", "update s", "{:.2f}"), ("timing_s/step", "step s", "{:.2f}"),
           ("perf/throughput", "tokens/s", "{:.0f}"), ("rollout/bubble_frac", "GPU bubble", "{:.1%}"),
           ("rollout/straggler_rate", "straggler", "{:.1%}"), ("rollout/group_size", "G", "{:.1f}"),
           ("tp/switch_events", "switches", "{:.1f}"), ("tp/switch_seconds", "switch s", "{:.2f}")]


def active_series(gen: GenResult) -> tuple[list[float], list[int]]:
    """(times, active sequences over the whole cluster) from the per-replica timeline."""
    current: dict[int, int] = {}
    ts, ys = [], []
    for t, _node, rid, b in gen.timeline:
        current[rid] = b
        ts.append(t)
        ys.append(sum(current.values()))
    return ts, ys


def table(summaries: list[tuple[str, dict]]) -> str:
    """Markdown: one row per variant, plus the speed-up of step and generation time over the first."""
    cols = [c for c in COLUMNS if any(c[0] in s for _, s in summaries)]
    head = "| variant | " + " | ".join(c[1] for c in cols) + " | gen speed-up | step speed-up |"
    lines = [head, "|" + "---|" * (len(cols) + 3)]
    base = summaries[0][1]
    for name, s in summaries:
        cells = [c[2].format(s[c[0]]) for c in cols]
        g = base["timing_s/gen"] / s["timing_s/gen"] if s["timing_s/gen"] else 0.0
        st = base["timing_s/step"] / s["timing_s/step"] if s["timing_s/step"] else 0.0
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {g:.2f}x | {st:.2f}x |")
    return "\n".join(lines)


def write_report(out: Path, results: list, title: str) -> str:
    """results: SimResult per variant. Writes summary.md, steps.json, timeline.png, breakdown.png."""
    out.mkdir(parents=True, exist_ok=True)
    summaries = [(r.name, r.summary()) for r in results]
    md = table(summaries)
    (out / "summary.md").write_text(f"# {title}\n\n{md}\n")
    rows = [{"variant": r.name, "step": i, "gen_s": s.gen_s, "rounds": 1 + len(s.refills), "prepare_s": s.prepare_s, "update_s": s.update_s,
             "fixed_s": s.fixed_s, "tokens": s.tokens, "group_size": s.group_size, "straggler_rate": s.straggler_rate,
             "bubble_frac": s.gen.bubble_frac, "measured_gen_s": s.measured_gen_s, "switches": s.gen.switches}
            for r in results for i, s in enumerate(r.steps)]
    (out / "steps.json").write_text(json.dumps({"summary": dict(summaries), "steps": rows}, indent=1))
    _plots(out, results, title)
    return md


def _plots(out: Path, results: list, title: str) -> None:
    # lazy: matplotlib only when a plot is drawn
    import matplotlib

    matplotlib.use("Agg")
    # lazy: matplotlib only when a plot is drawn
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for r in results:
        if r.steps:
            ts, ys = active_series(r.steps[0].gen)
            ax.step(ts, ys, where="post", label=r.name)
            for sw in r.steps[0].gen.switches:
                ax.axvline(sw["t"], color="grey", lw=0.6, ls=":")
    ax.set_xlabel("simulated seconds (first step's rollout)")
    ax.set_ylabel("active sequences")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "timeline.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.45 * len(results)))
    names = [r.name for r in results]
    parts = [("timing_s/gen", "generation"), ("timing_s/prepare", "prepare"), ("timing_s/update", "update")]
    left = [0.0] * len(results)
    for key, label in parts:
        vals = [r.summary()[key] for r in results]
        ax.barh(names, vals, left=left, label=label)
        left = [a + b for a, b in zip(left, vals)]
    ax.set_xlabel("simulated seconds per step")
    ax.invert_yaxis()
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "breakdown.png", dpi=120)
    plt.close(fig)
