"""The tools demo's report.png: the run report (train/report.py: reward and held-out accuracy, the last
rollout's timeline with the sequences waiting on tools, lengths, tail telemetry) and a third row for the
tools: model turns and tool calls per rollout over the steps, and held-out accuracy with the calculator
before / after training against the same policies without tools (the single-turn baseline)."""

from __future__ import annotations

from pathlib import Path

from tailrl.train.metrics import step_rows
from tailrl.train.report import report_figure


def write_tools_report(run_dir: Path, rows: list[dict], last_phase, tau: float, summary: dict,
                       name: str = "report.png") -> Path:
    """Draw the run report with the tools row; returns the PNG's path."""
    fig = report_figure(rows, last_phase, tau)
    old = fig.axes
    n_rows = len(old) // 2 + 1
    grid = fig.add_gridspec(n_rows, 2)
    for i, ax in enumerate(old):  # the run report's panels move up; the tools row goes last
        ax.set_subplotspec(grid[i // 2, i % 2])
    fig.set_size_inches(12, 4 * n_rows)
    plot_turns(fig.add_subplot(grid[n_rows - 1, 0]), step_rows(rows))
    plot_accuracy(fig.add_subplot(grid[n_rows - 1, 1]), summary)
    fig.tight_layout()
    path = Path(run_dir) / name
    fig.savefig(path, dpi=110)
    fig.clear()
    return path


def plot_turns(ax, steps: list[dict]) -> None:
    """rollout/turns_mean and tools/calls_mean per step (1 turn, 0 calls: no rollout used the tool)."""
    x = [r["step"] for r in steps]
    ax.plot(x, [r.get("rollout/turns_mean") for r in steps], label="model turns per rollout (mean)")
    ax.plot(x, [r.get("tools/calls_mean") for r in steps], label="tool calls per rollout (mean)")
    errors = sum(r.get("tools/errors", 0.0) for r in steps)
    ax.set_xlabel("step")
    ax.set_ylim(bottom=0)
    ax.set_title(f"multi-turn rollouts ({errors:.0f} tool errors over the run)")
    ax.legend()


def plot_accuracy(ax, summary: dict) -> None:
    """Held-out accuracy before / after training, with the calculator and without tools."""
    labels = ["before RL", "after RL"]
    with_tools = [summary["accuracy_before"], summary["accuracy_after"]]
    single = [summary["single_turn_accuracy"], summary["single_turn_accuracy_after"]]
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], with_tools, width=0.4, label="with the calculator (multi-turn)")
    ax.bar([x + 0.2 for x in xs], single, width=0.4, label="without tools (single-turn)")
    for x, v in [*zip([x - 0.2 for x in xs], with_tools), *zip([x + 0.2 for x in xs], single)]:
        ax.text(x, v + 0.01, f"{v:.1%}", ha="center", fontsize=8)
    ax.set_xticks(list(xs), labels)
    ax.set_ylim(0, 1.3)  # room above the bars for the legend
    ax.set_title("held-out accuracy (one sample per problem)")
    ax.legend(loc="upper center", ncol=2, fontsize=8)
