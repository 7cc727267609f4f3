"""Picture of a rollout's long tail: active batch size over time, and for multi-turn rollouts the sequences
parked waiting for tool calls (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

from tailrl.engine.telemetry import RolloutTrace


def plot_timeline(trace: RolloutTrace, path: str | Path, title: str = "rollout timeline") -> Path:
    # lazy: matplotlib only when a plot is drawn
    import matplotlib

    matplotlib.use("Agg")
    # lazy: matplotlib only when a plot is drawn
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.5))
    draw_timeline(ax, trace)
    tail = trace.tail_phase_frac()
    if tail > 0:
        ax.axvspan(trace.t_end * (1 - tail), trace.t_end, color="tab:red", alpha=0.12,
                   label=f"tail phase ({tail:.0%} of time)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper right")
    s = trace.summary()
    ax.set_title(f"{title} — {s['timing_s/gen']:.1f}s, tail efficiency {s['rollout/tail_efficiency']:.2f}, "
                 f"straggler rate {s['rollout/straggler_rate']:.2f}", fontsize=9)
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def draw_timeline(ax, trace: RolloutTrace) -> None:
    """Active sequences per forward on `ax`; with tool turns, the sequences parked waiting for tools too."""
    times, batch = trace.timeline()
    ax.step(times + [trace.t_end], batch + [batch[-1] if batch else 0], where="post", lw=1.5,
            label="decoding")
    p_times, parked = trace.parked_timeline()
    if p_times:
        ax.step([0.0, *p_times, trace.t_end], [0, *parked, parked[-1]], where="post", lw=1.2, color="tab:orange",
                label=f"waiting on tools ({trace.parked_frac():.0%} of sequence time)")
    ax.set_xlabel("seconds")
    ax.set_ylabel("active sequences")
