"""What every training benchmark on the embedded demo shares: the cached warm-start policy and one
run of the trainer on the demo config with overrides, returning its metrics rows."""

from __future__ import annotations

import time
from pathlib import Path


def demo_policy() -> Path:
    """Folder of the warm-started demo policy (trained once, then cached)."""
    from tailrl.demo.run import DEMO_SPEC, DEMO_TASK
    from tailrl.demo.warmstart import warm_start
    from tailrl.model.loading import cache_dir

    return warm_start(cache_dir() / "demo", DEMO_TASK, DEMO_SPEC)


def run_demo_training(model_dir: Path, run_dir: Path, overrides: list[str]) -> tuple[list[dict], float]:
    """Train on the demo task's splits with the demo config + overrides; (metrics rows, wall seconds)."""
    from tailrl.demo.run import DEMO_TASK, demo_config, write_splits
    from tailrl.train.metrics import read_metrics
    from tailrl.train.trainer import Trainer

    write_splits(run_dir, DEMO_TASK)
    t0 = time.perf_counter()
    Trainer(demo_config(model_dir, run_dir, overrides), run_dir).fit()
    return read_metrics(run_dir), time.perf_counter() - t0
