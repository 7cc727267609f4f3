"""Per-step display: a progress bar over steps and one table row per step (rich, on stderr)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

COLUMNS = [  # (header, metric, format)
    ("step", None, "{}"),
    ("G", "rollout/group_size", "{:.0f}"),
    ("reward", "reward/mean", "{:.3f}"),
    ("acc", "reward/accuracy", "{:.2f}"),
    ("len", "response_length/mean", "{:.0f}"),
    ("rollout s", "timing_s/gen", "{:.1f}"),
    ("update s", "timing_s/update", "{:.1f}"),
    ("straggler", "rollout/straggler_rate", "{:.2f}"),
    ("tail eff", "rollout/tail_efficiency", "{:.2f}"),
    ("pg_loss", "actor/pg_loss", "{:+.4f}"),
]


class StepDisplay:
    def __init__(self, total_steps: int, start_step: int = 0, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 TimeRemainingColumn(), console=self.console, transient=True)
        self.task = self.progress.add_task("train", total=total_steps, completed=start_step)
        self._header = False

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        self.progress.__exit__(*exc)

    def row(self, step: int, m: dict[str, float]) -> str:
        cells = []
        for head, key, fmt in COLUMNS:
            v = step if key is None else m.get(key)
            cells.append((fmt.format(v) if v is not None else "-").rjust(len(head)))
        return "  ".join(cells)

    def __call__(self, step: int, m: dict[str, float]) -> None:
        if not self._header:
            self.progress.console.print("  ".join(h for h, _, _ in COLUMNS), style="bold")
            self._header = True
        self.progress.console.print(self.row(step, m))
        self.progress.update(self.task, completed=step)
