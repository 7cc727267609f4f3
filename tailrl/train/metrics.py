"""Metrics sinks: metrics.jsonl (always), TensorBoard (default on), Weights & Biases (when asked and
installed), and traces.jsonl (every rollout's per-request lengths and forward timeline, which
`tailrl simulate` replays). Names follow veRL/TRL (`timing_s/gen`, `actor/pg_loss`, ...)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from torch.utils.tensorboard import SummaryWriter


class MetricsLogger:
    def __init__(self, run_dir: Path, tensorboard: bool = True, wandb: bool = False, wandb_project: str = "tailrl",
                 config: dict | None = None, resume_step: int | None = None, rollouts: bool = False):
        self.path = Path(run_dir) / "metrics.jsonl"
        self._file = open_jsonl(self.path, resume_step)
        self._traces = open_jsonl(Path(run_dir) / "traces.jsonl", resume_step)
        self._rollouts = open_jsonl(Path(run_dir) / "rollouts.jsonl", resume_step) if rollouts else None
        self._tb = None
        if tensorboard:
            self._tb = SummaryWriter(str(Path(run_dir) / "tensorboard"), purge_step=resume_step + 1 if resume_step else None)
        self._wandb = None
        if wandb:
            try:
                # lazy: optional dependency (wandb)
                import wandb as _wandb
            except ImportError:
                _wandb = None
            if _wandb is not None:
                self._wandb = _wandb.init(project=wandb_project, config=config, dir=str(run_dir), resume="allow")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **{k: (v if isinstance(v, (int, float)) and math.isfinite(v) else None)
                                for k, v in metrics.items()}}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        if self._tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)) and math.isfinite(v):
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(metrics, step=step)

    def log_traces(self, step: int, traces: list) -> None:
        """One row per step: the RolloutTrace of each generation round (refills are extra rounds)."""
        self._traces.write(json.dumps({"step": step, "rounds": [tr.to_json() for tr in traces]}) + "\n")
        self._traces.flush()

    def log_rollouts(self, step: int, generated: list, kept: list) -> None:
        """With train.save_rollouts: one row per generated rollout (tokens, text, reward, kept for the update)."""
        if self._rollouts is None:
            return
        trained = {(r.uid, r.sample_index) for g in kept for r in g.rollouts}
        for g in generated:
            for r, text, score in zip(g.rollouts, g.texts, g.scores):
                self._rollouts.write(json.dumps({"step": step, "uid": r.uid, "sample_index": r.sample_index,
                                                 "token_ids": r.token_ids, "text": text, "score": score,
                                                 "finish_reason": r.finish_reason,
                                                 "trained": (r.uid, r.sample_index) in trained}) + "\n")
        self._rollouts.flush()

    def close(self) -> None:
        self._file.close()
        self._traces.close()
        if self._rollouts is not None:
            self._rollouts.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def open_jsonl(path: Path, resume_step: int | None):
    """Append handle on a per-step JSONL file; on resume, rows past the checkpoint are dropped first
    (they were produced by steps that will be redone)."""
    if resume_step is not None and path.is_file():
        rows = [line for line in path.read_text().splitlines() if line.strip()]
        keep = [r for r in rows if json.loads(r).get("step", 0) <= resume_step]
        path.write_text("".join(r + "\n" for r in keep))
    return path.open("a", encoding="utf-8")


def read_metrics(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def step_rows(rows: list[dict]) -> list[dict]:
    """The training-step rows of metrics.jsonl (the step-0 evaluation row has no reward)."""
    return [r for r in rows if r.get("reward/mean") is not None]
