"""What every benchmark shares: the cached warm-start demo policy (`demo_policy`, from the demo), one
fresh training run (`run_training`; on the demo config with overrides: `run_demo_training`), the time a
curve first reaches an accuracy (`time_to_reach`), engines' first-call costs kept out of timings (`warm_up`),
and writing a benchmark's summary and result."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from pathlib import Path

from tailrl.demo.run import (
    DEMO_TASK,
    demo_config,
    demo_policy,  # noqa: F401  (re-exported for the benchmarks)
    write_splits,
)
from tailrl.train.metrics import read_metrics
from tailrl.train.trainer import Trainer


def warm_up(engines, reqs: list) -> None:
    """Run 8 tokens of the first two requests' first prompt token (uids outside the workload's, so no
    drafter learns the workload from it) through every engine, then end that rollout: first-call costs
    (allocations, kernels, calibrations) stay out of the timings."""
    warm = [replace(r, prompt_ids=r.prompt_ids[:1], uid=10**9 + i, n=1, params=replace(r.params, max_new_tokens=8))
            for i, r in enumerate(reqs[:2])]
    for e in engines:
        e.generate(warm)
        e.strategy.end_rollout()


def time_to_reach(curve: list[tuple[float, float]], target: float) -> float | None:
    """First time at which accuracy >= target (curve: (time, accuracy) in time order)."""
    return next((t for t, a in curve if a >= target - 1e-12), None)


def write_outputs(out: Path, md: str, result: dict) -> None:
    """summary.md (the table a human reads) and result.json (every number) into out/."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(md.rstrip() + "\n")
    (out / "result.json").write_text(json.dumps(result, indent=1, default=str))


def run_training(run_dir: Path, write_data, config) -> tuple[list[dict], float]:
    """One training run from scratch (a leftover run in run_dir is removed, not resumed): write_data(run_dir)
    writes the splits the config reads; (metrics rows, wall seconds)."""

    shutil.rmtree(run_dir, ignore_errors=True)
    write_data(run_dir)
    t0 = time.perf_counter()
    Trainer(config, run_dir).fit()
    return read_metrics(run_dir), time.perf_counter() - t0


def run_demo_training(model_dir: Path, run_dir: Path, overrides: list[str]) -> tuple[list[dict], float]:
    """Train on the demo task's splits with the demo config + overrides, from scratch; (rows, wall s)."""

    return run_training(run_dir, lambda d: write_splits(d, DEMO_TASK), demo_config(model_dir, run_dir, overrides))
