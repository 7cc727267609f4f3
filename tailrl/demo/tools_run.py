"""`tailrl demo demo.task=tools`: the demo's arithmetic task with the built-in `calculator` tool, multi-turn.

1. warm-start (cached, its own key): the demo's tiny Llama learns, by a short SFT, to solve a problem either
   by one calculator call (hermes format; the observation rendered by the chat template) or by today's
   chain, and to call only when the prompt lists the tool (tools_warmstart.py, tools_data.py);
2. the single-turn baseline: the same warm start evaluated without tools (tools_eval.py);
3. GRPO, multi-turn: rollout.tools=[calculator], data.chat_template=true; the engine parks a sequence at the
   end of a turn with a call, the call runs on a tool worker, the observation is appended (out of the loss)
   and decoding resumes; the reward reads the final turn's '>answer';
4. a run directory like `tailrl demo`'s, with summary.json (held-out accuracy with tools before/after, the
   single-turn baseline, rollout/turns_mean first/last step, tool calls per rollout, tool errors) and a
   report.png with a row for the tools (tools_report.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tailrl.config import Config
from tailrl.demo.run import DEMO_TASK, local_run_config, write_splits
from tailrl.demo.tools_data import TOOL_NAMES, ToolsMix
from tailrl.demo.tools_eval import single_turn_eval
from tailrl.demo.tools_report import write_tools_report
from tailrl.demo.tools_warmstart import tools_warm_start
from tailrl.demo.warmstart import WarmStartParams
from tailrl.model import load
from tailrl.model.loading import cache_dir
from tailrl.train.console import StepDisplay
from tailrl.train.metrics import read_metrics, step_rows
from tailrl.train.trainer import Trainer

TOOLS_TASK = DEMO_TASK  # the single-turn demo's problems
# fixed steps: reproducible (the time budget is only a safety stop, far above what the SFT takes on 2 cores)
TOOLS_SPEC = WarmStartParams(layers=2, batch=32, steps=800, time_budget_s=1800.0)
TOOLS_MIX = ToolsMix()  # half of all solutions call the calculator


def tools_policy(spec: WarmStartParams = TOOLS_SPEC, mix: ToolsMix = TOOLS_MIX, cache_root: Path | None = None,
                 progress=None) -> Path:
    """Folder of the tools demo's warm-started policy (trained once, then cached)."""
    return tools_warm_start(Path(cache_root or cache_dir() / "demo"), TOOLS_TASK, spec, mix, progress)


def tools_demo_config(model_dir: Path, run_dir: Path, overrides: list[str] = ()) -> Config:
    return local_run_config(
        model_dir, run_dir, overrides, ("demo_arith",), True,
        rollout=dict(group_size=8, max_new_tokens=160, temperature=1.0, seed=0, tools=TOOL_NAMES, max_turns=2,
                     tool_workers=1),
        train=dict(total_steps=60, rollout_batch_size=64, micro_batch_size=64, micro_batch_tokens=4096, lr=1e-4,
                   eval_every=20, eval_prompts=400, save_every=0),
        engine=dict(kv_cache_tokens=65536, block_size=16))


def tools_summary(rows: list[dict], baseline: dict, baseline_after: dict, group_size: int) -> dict:
    """summary.json's figures from the run's metric rows and the single-turn evaluations."""
    evals = [r for r in rows if r.get("eval/accuracy") is not None]
    steps = step_rows(rows)
    return {
        "accuracy_before": evals[0]["eval/accuracy"], "accuracy_after": evals[-1]["eval/accuracy"],
        "single_turn_accuracy": baseline["eval/accuracy"], "single_turn_accuracy_after": baseline_after["eval/accuracy"],
        "eval_tool_calls_before": evals[0].get("eval/tool_calls_mean"),
        "eval_tool_calls_after": evals[-1].get("eval/tool_calls_mean"),
        "turns_mean_first_step": steps[0]["rollout/turns_mean"], "turns_mean_last_step": steps[-1]["rollout/turns_mean"],
        "turns_max": max(r["rollout/turns_max"] for r in steps),
        "tool_calls_per_rollout_first_step": steps[0]["tools/calls_mean"],
        "tool_calls_per_rollout_last_step": steps[-1]["tools/calls_mean"],
        "tool_calls": sum(r["tools/calls"] for r in steps), "tool_errors": sum(r["tools/errors"] for r in steps),
        "tool_timeouts": sum(r["tools/timeouts"] for r in steps),
        "parked_frac_mean": sum(r["rollout/parked_frac"] for r in steps) / len(steps),
        "train_reward_first": steps[0]["reward/mean"], "train_reward_last": steps[-1]["reward/mean"],
        "group_size": group_size, "steps": len(steps),
    }


def run_tools_demo(out_dir: str | None, overrides: list[str], spec: WarmStartParams = TOOLS_SPEC,
                   mix: ToolsMix = TOOLS_MIX, cache_root: Path | None = None) -> int:
    """The tools demo into out_dir (default runs/demo-tools-<time>); spec / mix / cache_root: the warm start's
    (the defaults are the demo's; tests pass a tiny one)."""
    console = Console(stderr=True)
    run_dir = Path(out_dir or f"runs/demo-tools-{time.strftime('%Y%m%d-%H%M%S')}")
    t0 = time.perf_counter()
    console.print(f"[bold]tailrl demo demo.task=tools[/bold] -> {run_dir}")
    with Progress(TextColumn("warm-start SFT with tool calls (cached after the first run)"), BarColumn(),
                  TextColumn("{task.fields[loss]}"), TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("sft", total=spec.steps, loss="")
        model_dir = tools_policy(spec, mix, cache_root,
                                 progress=lambda s, n, loss: bar.update(task, completed=s, loss=f"loss {loss:.3f}"))
    info = json.loads((model_dir / "warmstart.json").read_text())
    console.print(f"policy: {model_dir} (SFT {info['sft_steps']} steps, {info['sft_seconds']:.0f}s, "
                  f"loss {info['sft_final_loss']:.3f})")
    write_splits(run_dir, TOOLS_TASK)
    cfg = tools_demo_config(model_dir, run_dir, overrides)
    policy, tok = load(model_dir)
    baseline = single_turn_eval(policy, tok, cfg)
    console.print(f"warm start without tools (single-turn): held-out accuracy {baseline['eval/accuracy']:.1%}")
    trainer = Trainer(cfg, run_dir)
    console.print((run_dir / "config.yaml").read_text().rstrip(), style="dim")
    with StepDisplay(cfg.train.total_steps, 0, console) as display:
        trainer.fit(on_step=display)
    baseline_after = single_turn_eval(trainer.model, trainer.tokenizer, cfg)

    rows = read_metrics(run_dir)
    summary = tools_summary(rows, baseline, baseline_after, cfg.rollout.group_size)
    summary |= {"wall_s": time.perf_counter() - t0, "warm_start": info}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    write_tools_report(run_dir, rows, trainer.last_phase, cfg.rollout.straggler_tau, summary)
    console.print(f"held-out accuracy with the calculator {summary['accuracy_before']:.1%} -> "
                  f"{summary['accuracy_after']:.1%} (the warm start without tools: {summary['single_turn_accuracy']:.1%}) | "
                  f"model turns per rollout {summary['turns_mean_first_step']:.2f} -> {summary['turns_mean_last_step']:.2f} | "
                  f"tool calls per rollout {summary['tool_calls_per_rollout_first_step']:.2f} -> "
                  f"{summary['tool_calls_per_rollout_last_step']:.2f}, {summary['tool_errors']:.0f} tool errors | "
                  f"{summary['wall_s']:.0f}s")
    console.print(f"run directory: {run_dir} (config.yaml, metrics.jsonl, traces.jsonl, tensorboard/, checkpoints/, "
                  "report.png, summary.json)")
    return 0
