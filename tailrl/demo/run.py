"""`tailrl demo`: the main job on the embedded default, no downloads.

1. warm-start (cached): a tiny Llama learns the chained-arithmetic task with rare whole-chain reviews by a
   short SFT (tailrl/demo/warmstart.py);
2. GRPO on the task's train split with G = 16, held-out accuracy every few steps;
3. a run directory with config.yaml, metrics.jsonl, TensorBoard events, checkpoints, report.png and
   summary.json (accuracy and straggler rate before/after, len_max_over_median at G = 16).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tailrl.config import (
    AlgoConfig,
    Config,
    DataConfig,
    EngineConfig,
    ModelConfig,
    RewardConfig,
    RolloutConfig,
    TrainConfig,
    with_overrides,
)
from tailrl.data.demo_task import DemoTask
from tailrl.demo.warmstart import WarmStartParams, warm_start
from tailrl.model.loading import cache_dir
from tailrl.train.console import StepDisplay
from tailrl.train.metrics import read_metrics, step_rows
from tailrl.train.report import write_report
from tailrl.train.trainer import Trainer

DEMO_TASK = DemoTask(min_terms=2, max_terms=4, max_operand=5, p_recheck=0.0, p_review=0.03)
DEMO_SPEC = WarmStartParams(layers=2, batch=32, steps=250, time_budget_s=600.0)  # fixed steps: reproducible


def demo_policy(progress=None) -> Path:
    """Folder of the warm-started demo policy (trained once, then cached)."""

    return warm_start(cache_dir() / "demo", DEMO_TASK, DEMO_SPEC, progress=progress)


def local_run_config(model_dir: Path, run_dir: Path, overrides: list[str], reward: tuple[str, ...],
                     chat_template: bool, rollout: dict, train: dict, engine: dict) -> Config:
    """GRPO on model_dir for a run in run_dir that reads the splits written to run_dir/data/{train,test}.jsonl
    (the demo, the benchmarks); rollout / train / engine: those sections' fields, then the overrides."""
    base = Config(
        model=ModelConfig(path=str(model_dir)),
        data=DataConfig(source=str(run_dir / "data" / "train.jsonl"), eval_source=str(run_dir / "data" / "test.jsonl"),
                        chat_template=chat_template, seed=0),
        reward=RewardConfig(functions=reward),
        rollout=RolloutConfig(**rollout),
        algo=AlgoConfig(name="grpo"),
        train=TrainConfig(**train, out_dir=str(run_dir.parent), run_name=run_dir.name),
        engine=EngineConfig(**engine),
    )
    return with_overrides(base, overrides)


def demo_config(model_dir: Path, run_dir: Path, overrides: list[str] = ()) -> Config:
    return local_run_config(
        model_dir, run_dir, overrides, ("demo_arith",), False,
        rollout=dict(group_size=16, max_new_tokens=160, temperature=1.0, seed=0),
        train=dict(total_steps=100, rollout_batch_size=128, micro_batch_size=64, micro_batch_tokens=1024, lr=1e-4,
                   eval_every=10, eval_prompts=400, save_every=25),
        engine=dict(kv_cache_tokens=65536, block_size=16))


def write_splits(run_dir: Path, task: DemoTask, n_train: int = 20000, n_test: int = 400) -> None:
    d = run_dir / "data"
    d.mkdir(parents=True, exist_ok=True)
    for split, n, seed in (("train", n_train, 1), ("test", n_test, 2)):
        rows = task.rows(n, split, seed=seed)
        (d / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def run_demo(out_dir: str | None, overrides: list[str]) -> int:
    console = Console(stderr=True)
    run_dir = Path(out_dir or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}")
    t0 = time.perf_counter()
    console.print(f"[bold]tailrl demo[/bold] -> {run_dir}")
    with Progress(TextColumn("warm-start SFT (cached after the first run)"), BarColumn(), TextColumn("{task.fields[loss]}"),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("sft", total=DEMO_SPEC.steps, loss="")
        model_dir = demo_policy(progress=lambda s, n, loss: bar.update(task, completed=s, loss=f"loss {loss:.3f}"))
    info = json.loads((model_dir / "warmstart.json").read_text())
    console.print(f"policy: {model_dir} (SFT {info['sft_steps']} steps, {info['sft_seconds']:.0f}s, loss {info['sft_final_loss']:.3f})")
    write_splits(run_dir, DEMO_TASK)
    cfg = demo_config(model_dir, run_dir, overrides)
    trainer = Trainer(cfg, run_dir)
    console.print((run_dir / "config.yaml").read_text().rstrip(), style="dim")
    with StepDisplay(cfg.train.total_steps, 0, console) as display:
        trainer.fit(on_step=display)

    rows = read_metrics(run_dir)
    evals = [r for r in rows if r.get("eval/accuracy") is not None]
    steps = step_rows(rows)
    summary = {
        "accuracy_before": evals[0]["eval/accuracy"], "accuracy_after": evals[-1]["eval/accuracy"],
        "train_reward_first": steps[0]["reward/mean"], "train_reward_last": steps[-1]["reward/mean"],
        "straggler_rate_first_step": steps[0]["rollout/straggler_rate"],
        "straggler_rate_last_step": steps[-1]["rollout/straggler_rate"],
        "straggler_rate_mean": statistics.mean(r["rollout/straggler_rate"] for r in steps),
        "len_max_over_median_mean": statistics.mean(r["rollout/len_max_over_median"] for r in steps),
        "group_size": cfg.rollout.group_size, "steps": len(steps), "wall_s": time.perf_counter() - t0,
        "warm_start": info,
    }
    ratios = [tr_ratio for tr in trainer.last_phase.traces for tr_ratio in tr.len_max_over_median()]
    summary["last_step_len_max_over_median"] = ratios
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    write_report(run_dir, rows, trainer.last_phase, cfg.rollout.straggler_tau)
    console.print(f"held-out accuracy {summary['accuracy_before']:.1%} -> {summary['accuracy_after']:.1%} | "
                  f"straggler rate {summary['straggler_rate_first_step']:.2f} -> {summary['straggler_rate_last_step']:.2f} | "
                  f"{summary['wall_s']:.0f}s")
    console.print(f"run directory: {run_dir} (config.yaml, metrics.jsonl, traces.jsonl, tensorboard/, checkpoints/, report.png, summary.json)")
    return 0
