"""`tailrl bench e2e`: one run each of TRL's GRPOTrainer, tailrl with every acceleration off, and tailrl
with SAGC + PODS + speculation — same model, task, hyperparameters and prompt budget — side by side, on
a workload of bench/e2e_tasks.py (the demo task, or SmolLM2-135M-Instruct on easy sums).

Shared: GRPO (group-normalised advantages, PPO clip 0.2, sequence-mean token-mean loss, no KL), the
task's lr (constant), AdamW (0.9, 0.999), grad-norm clip 1.0, temperature 1, the task's new tokens, B
= P x G rollouts per step, the same prompt budget. TRL uses its default generation backend on this CPU
(transformers `generate`); tailrl its own engine. Every run is evaluated the same way — tailrl's
trainer evaluation on the task's held-out prompts (one sample each at temperature 1) every
`eval_every` steps, outside the step clock; for TRL the current weights are copied into a tailrl
model for it. Reported: wall-clock per step, rollout share, straggler rate, tail efficiency, reward
and accuracy after the budget, time to a fixed accuracy, and ratios; plus reward vs wall-clock.
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

import torch

from tailrl.bench.common import run_training, time_to_reach, write_outputs
from tailrl.bench.e2e_latency import with_latency
from tailrl.bench.e2e_tasks import TASKS, E2ETask
from tailrl.model import load_weights
from tailrl.model.loading import resolve_device
from tailrl.rewards import REWARDS
from tailrl.train.metrics import step_rows
from tailrl.train.trainer import Trainer


class Evaluator:
    """The task's trainer evaluation, for weights from anywhere (HF-named tensors)."""

    def __init__(self, task: E2ETask, model_dir: Path, run_dir: Path):
        task.write_data(run_dir)
        self.trainer = Trainer(task.config(model_dir, run_dir, [f"train.eval_prompts={task.eval_prompts}",
                                                                "train.eval_every=1", "train.tensorboard=false"]),
                               run_dir)

    def __call__(self, named_tensors) -> float:
        load_weights(self.trainer.model, named_tensors)
        self.trainer.policy.sync_rollout()  # the engine evaluates its own copy when model.dtype is not fp32
        return self.trainer.evaluate()["eval/accuracy"]

    def close(self) -> None:
        self.trainer.close()


def _text(x) -> str:
    """A TRL prompt / completion: a string, or chat messages (the last one's content)."""
    return x if isinstance(x, str) else x[-1]["content"]


def run_trl(task: E2ETask, model_dir: Path, out: Path, steps: int, eval_every: int, evaluator: Evaluator,
            device: str) -> dict:
    """TRL's GRPOTrainer on the task, on `device` (cpu or cuda); per-step wall times from a callback
    (evaluations excluded)."""
    # lazy: optional dependency (the [e2e] extra)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    fn = REWARDS[task.reward]
    rows = task.rows(steps * task.prompts * 2, "train")
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}] if task.chat else r["prompt"],
                             "answer": r["answer"]} for r in rows])

    def reward(prompts, completions, answer, **_):
        return [fn(_text(p), _text(c), a) for p, c, a in zip(prompts, completions, answer)]

    reward.__name__ = task.reward
    log: dict = {"step_s": [], "evals": [], "gen_s": []}

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            log["t"], log["gen"] = time.perf_counter(), 0.0

        def on_step_end(self, args, state, control, model=None, **kw):
            log["step_s"].append(time.perf_counter() - log["t"])
            log["gen_s"].append(log["gen"])
            if state.global_step % eval_every == 0 or state.global_step == steps:
                log["evals"].append((state.global_step, sum(log["step_s"]),
                                     evaluator((k, v.detach()) for k, v in model.state_dict().items())))

    class Timed(GRPOTrainer):  # the generation share of each step (every turn and tool call of it)
        def _generate(self, *a, **k):
            t = time.perf_counter()
            out = super()._generate(*a, **k)
            log["gen"] += time.perf_counter() - t
            return out

    cfg = GRPOConfig(output_dir=str(out), use_cpu=device == "cpu", bf16=False, num_generations=task.group,
                     per_device_train_batch_size=task.group * task.prompts, gradient_accumulation_steps=1,
                     max_completion_length=task.max_new, temperature=1.0, top_p=1.0, learning_rate=task.lr,
                     lr_scheduler_type="constant", loss_type="grpo", beta=0.0, epsilon=0.2, scale_rewards="group",
                     max_grad_norm=1.0, optim="adamw_torch", weight_decay=0.0, max_steps=steps, logging_steps=1,
                     save_strategy="no", report_to=[], seed=0, disable_tqdm=True,
                     max_tool_calling_iterations=task.max_turns - 1 if task.tools else None)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    if task.response_template is not None:
        tok.response_template = task.response_template
    trainer = Timed(model=model, reward_funcs=reward, args=cfg, train_dataset=ds, processing_class=tok,
                    callbacks=[Clock()], tools=list(task.tools) or None)
    log["evals"].insert(0, (0, 0.0, evaluator((k, v.detach()) for k, v in model.state_dict().items())))
    trainer.train()
    hist = [h for h in trainer.state.log_history if "reward" in h]
    return {"steps": len(log["step_s"]), "step_s": log["step_s"], "evals": log["evals"],
            "rewards": [h["reward"] for h in hist], "gen_s": log["gen_s"],
            "update_s": [s - g for s, g in zip(log["step_s"], log["gen_s"])]}


def run_tailrl(task: E2ETask, model_dir: Path, out: Path, budget: int, eval_every: int, overrides: list[str],
               device: str) -> dict:
    """A fresh tailrl run of the task (bench.common.run_training) on `device`."""

    cfg = task.config(model_dir, out, [f"train.prompt_budget={budget}", "train.total_steps=1000000",
                                       f"train.eval_every={eval_every}", f"train.eval_prompts={task.eval_prompts}",
                                       "train.save_every=0", "train.tensorboard=false", f"model.device={device}"]
                     + overrides)
    rows, _ = run_training(out, task.write_data, cfg)
    steps = step_rows(rows)
    evals, t = [], {}
    for r in steps:
        t[r["step"]] = r["timing_s/cumulative"]
    for r in rows:
        if r.get("eval/accuracy") is not None:
            evals.append((r["step"], t.get(r["step"], 0.0), r["eval/accuracy"]))
    return {"steps": len(steps), "step_s": [r["timing_s/step"] for r in steps], "evals": evals,
            "rewards": [r["reward/mean"] for r in steps], "gen_s": [r["timing_s/gen"] for r in steps],
            "update_s": [r["timing_s/update"] for r in steps],
            "straggler_rate": statistics.mean(r["rollout/straggler_rate"] for r in steps),
            "tail_efficiency": statistics.mean(r["rollout/tail_efficiency"] for r in steps),
            "prompts": sum(r["data/prompts"] for r in steps)}


def summarize(r: dict, target: float | None) -> dict:
    """One run's numbers; s_per_step leaves out the first step (warm-up: allocations, first kernels)."""
    wall = sum(r["step_s"])
    reached = time_to_reach([(t, acc) for _, t, acc in r["evals"]], target) if target is not None else None
    n = max(1, len(r["rewards"]) // 5)
    later = r["step_s"][1:] or r["step_s"]
    upd = r["update_s"][1:] or r["update_s"]
    return {"steps": r["steps"], "wall_s": wall, "s_per_step": sum(later) / len(later),
            "update_s_per_step": sum(upd) / len(upd),
            "rollout_share": sum(r["gen_s"]) / wall if r["gen_s"] else None,
            "straggler_rate": r.get("straggler_rate"), "tail_efficiency": r.get("tail_efficiency"),
            "final_reward": statistics.mean(r["rewards"][-n:]), "accuracy_start": r["evals"][0][2],
            "accuracy_end": r["evals"][-1][2], "time_to_target_s": reached}


def run_e2e_bench(out_dir: str, steps: int, eval_every: int, systems: list[str], task_name: str = "demo",
                  tool_latency_s: float = 0.0, tool_workers: int = 8, trl_async_tool: bool = False) -> dict:
    task = TASKS[task_name]
    root = Path(out_dir)
    for name in ("trl", "eval"):  # fresh (the tailrl runs clear their own folders)
        shutil.rmtree(root / name, ignore_errors=True)
    extra: list[str] = []  # tailrl overrides of both runs (the evaluation keeps the task's own tools)
    if tool_latency_s > 0:
        task, extra = with_latency(task, tool_latency_s, root, tool_workers, trl_async_tool)
    model_dir = task.model_dir()
    budget = steps * task.prompts
    device = resolve_device("auto")  # one device for every system: TRL's and tailrl's steps compare there
    runs = {}
    t0 = time.perf_counter()
    if "trl" in systems:
        evaluator = Evaluator(task, model_dir, root / "eval")
        try:
            runs["trl"] = run_trl(task, model_dir, root / "trl", steps, eval_every, evaluator, device)
        finally:
            evaluator.close()
        print(f"trl: {sum(runs['trl']['step_s']):.1f}s of steps ({time.perf_counter() - t0:.0f}s wall)", flush=True)
    if "off" in systems:
        runs["off"] = run_tailrl(task, model_dir, root / "off", budget, eval_every, extra, device)
        print(f"tailrl off: {sum(runs['off']['step_s']):.1f}s of steps", flush=True)
    if "full" in systems:
        runs["full"] = run_tailrl(task, model_dir, root / "full", budget, eval_every, [*extra, *task.full], device)
        print(f"tailrl full: {sum(runs['full']['step_s']):.1f}s of steps", flush=True)
    if "unchunked" in systems:  # off with the whole (S, C, V) logits in the update, as before chunking
        runs["unchunked"] = run_tailrl(task, model_dir, root / "unchunked", budget, eval_every,
                                       [*extra, "train.logprob_chunk_rows=0"], device)
        print(f"tailrl off, unchunked: {sum(runs['unchunked']['step_s']):.1f}s of steps", flush=True)
    start = statistics.mean(r["evals"][0][2] for r in runs.values())
    gain = max(r["evals"][-1][2] for r in runs.values()) - start
    target = start + 0.5 * gain if gain > 0 else None  # half the best gain over the start
    table = {k: summarize(r, target) for k, r in runs.items()}
    for k, s in table.items():
        for base in ("trl", "off"):
            if base in table and k != base:
                s[f"step_speedup_vs_{base}"] = table[base]["s_per_step"] / s["s_per_step"]
                s[f"wall_speedup_vs_{base}"] = table[base]["wall_s"] / s["wall_s"]
                tb, tk = table[base]["time_to_target_s"], s["time_to_target_s"]
                s[f"time_to_target_speedup_vs_{base}"] = tb / tk if tb and tk else None
    result = {"task": task_name, "tool_latency_s": tool_latency_s, "trl_async_tool": trl_async_tool,
              "group": task.group, "prompts": task.prompts, "steps": steps, "prompt_budget": budget,
              "eval_every": eval_every, "target_accuracy": target,
              "runs": table, "curves": {k: {"rewards": r["rewards"], "step_s": r["step_s"], "evals": r["evals"]}
                                        for k, r in runs.items()}}
    _plot(runs, root / "e2e_bench.png")
    write_outputs(root, _markdown(result), result)
    print(_markdown(result))
    return result


def _plot(runs: dict, path: Path) -> None:
    # lazy: matplotlib only when a plot is drawn
    import matplotlib

    matplotlib.use("Agg")
    # lazy: matplotlib only when a plot is drawn
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    names = {"trl": "TRL GRPOTrainer", "off": "tailrl, accelerations off", "full": "tailrl, the task's accelerations",
             "unchunked": "tailrl off, unchunked logprobs"}
    for k, r in runs.items():
        t, acc = [], 0.0
        for s in r["step_s"]:
            acc += s
            t.append(acc)
        y = r["rewards"][:len(t)]
        k_avg = max(1, min(10, len(y) // 4))  # a moving average over k steps: a step's reward is one batch
        smooth = [sum(y[max(0, i - k_avg + 1):i + 1]) / len(y[max(0, i - k_avg + 1):i + 1]) for i in range(len(y))]
        line = ax[0].plot(t, smooth, label=f"{names[k]} ({k_avg}-step mean)")[0]
        ax[0].plot(t, y, color=line.get_color(), alpha=0.2, lw=0.8)
        ax[1].plot([e[1] for e in r["evals"]], [e[2] for e in r["evals"]], "o-", label=names[k])
    ax[0].set(xlabel="wall-clock of the steps (s)", ylabel="training reward", title="reward vs wall-clock")
    ax[1].set(xlabel="wall-clock of the steps (s)", ylabel="held-out accuracy", title="accuracy vs wall-clock")
    for a in ax:
        a.legend(fontsize=8)
        a.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _markdown(res: dict) -> str:
    def f(v, fmt):
        return format(v, fmt) if isinstance(v, (int, float)) else "—"

    tgt = f"{res['target_accuracy']:.3f} (half the best gain)" if res["target_accuracy"] is not None else "none (no gain)"
    lines = [f"Task {res['task']}, prompt budget {res['prompt_budget']} ({res['steps']} steps of {res['prompts']} x "
             f"{res['group']} at G = {res['group']}); "
             + (f"the tool sleeps {res['tool_latency_s']:g} s per call (TRL: "
                f"{'an async twin' if res.get('trl_async_tool') else 'the same sync function'}); "
                if res.get("tool_latency_s") else "")
             + f"s / step without the first (warm-up) step; target accuracy {tgt}", "",
             "| system | steps | s / step | update s / step | × TRL | × off | rollout share | straggler rate | "
             "tail eff. | final reward | accuracy start → end | time to target s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for k, s in res["runs"].items():
        lines.append(f"| {k} | {s['steps']} | {s['s_per_step']:.2f} | {s['update_s_per_step']:.2f} | "
                     f"{f(s.get('step_speedup_vs_trl'), '.2f')} | "
                     f"{f(s.get('step_speedup_vs_off'), '.2f')} | {f(s['rollout_share'], '.2f')} | "
                     f"{f(s['straggler_rate'], '.3f')} | {f(s['tail_efficiency'], '.2f')} | {s['final_reward']:.3f} | "
                     f"{s['accuracy_start']:.3f} → {s['accuracy_end']:.3f} | {f(s['time_to_target_s'], '.1f')} |")
    return "\n".join(lines)
