"""`tailrl demo`, `tailrl train`, `tailrl eval`: the training job and its evaluation.

`tailrl train` exits 0 when the run is done, 2 on a mistake a user can fix, 75 when SIGTERM / SIGINT /
SIGUSR1 stopped it at a step boundary with a checkpoint (continue with --resume), 130 after a second
Ctrl-C (stopped at once; the last checkpoint is intact). Under torchrun every rank exits the same way;
`tailrl eval` there scores a shard of the prompts on each rank."""

from __future__ import annotations

from tailrl.errors import UserError


def add(sub) -> None:
    p = sub.add_parser("demo", help="the main job on the embedded default: warm-start + GRPO (no downloads)")
    p.set_defaults(run=run_demo)
    p.add_argument("overrides", nargs="*", help="dotted overrides of the demo config, e.g. train.total_steps=20; "
                   "demo.task=tools: the arithmetic task with a calculator tool, multi-turn (default: arith)")
    p.add_argument("--out-dir", default=None, help="run directory (default runs/demo-<time>)")

    p = sub.add_parser("train", help="GRPO / Dr.GRPO / DAPO training from a YAML config (exit 75: stopped by a "
                       "signal at a step boundary with a checkpoint; continue with --resume)")
    p.set_defaults(run=run_train)
    p.add_argument("config", nargs="?", help="YAML config (optional with --resume)")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.lr=1e-6 rollout.group_size=8")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint")
    p.add_argument("--run-dir", help="run directory (default train.out_dir/train.run_name)")

    p = sub.add_parser("eval", help="pass@k and mean length of a model on a dataset")
    p.set_defaults(run=run_eval)
    p.add_argument("config", help="YAML config (data, reward, rollout sections are used)")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--model", help="HF folder / known name / run directory (default: model.path)")
    p.add_argument("--samples", type=int, default=1, help="completions per prompt (pass@k for k <= samples)")
    p.add_argument("--prompts", type=int, default=0, help="evaluate the first N prompts (0 = all)")
    p.add_argument("--temperature", type=float, default=None, help="default: 0 (greedy) for 1 sample, else rollout's")
    p.add_argument("--out", help="write the metrics as JSON")


DEMO_TASKS = ("arith", "tools")  # demo.task: the single-turn demo | the calculator tool, multi-turn


def demo_task(overrides: list[str]) -> tuple[str, list[str]]:
    """(demo.task, the other overrides): demo.task is the demo command's own key, not a config key."""
    task, rest = "arith", []
    for o in overrides:
        if o.startswith("demo.task="):
            task = o.split("=", 1)[1]
        else:
            rest.append(o)
    if task not in DEMO_TASKS:
        raise UserError(f"unknown demo.task {task!r}; choose one of: {', '.join(DEMO_TASKS)}")
    return task, rest


def run_demo(a) -> int:
    task, overrides = demo_task(a.overrides)
    if task == "tools":
        # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
        from tailrl.demo.tools_run import run_tools_demo

        return run_tools_demo(a.out_dir, overrides)
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    from tailrl.demo.run import run_demo as demo

    return demo(a.out_dir, overrides)


def run_train(a) -> int:
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    from tailrl.config import load_config
    from tailrl.train.distributed import leaving
    from tailrl.train.trainer import Trainer, resume_config, run_dir_for

    overrides = list(a.overrides)
    if a.resume:
        if a.config and "=" in a.config:
            overrides.insert(0, a.config)
        elif a.config:
            raise UserError("with --resume the config comes from the run directory; pass only overrides")
        cfg, run_dir = resume_config(a.resume, overrides), a.resume
    else:
        if not a.config:
            raise UserError("a config file is required (or --resume RUN_DIR)")
        cfg = load_config(a.config, overrides)
        run_dir = a.run_dir or run_dir_for(cfg)
    trainer = Trainer(cfg, run_dir, resume=bool(a.resume))
    with leaving(trainer.ctx):
        return _fit(trainer, cfg)


def _fit(trainer, cfg) -> int:
    """Train to the end (or a stop); rank 0 shows the run. Returns the exit code."""
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    from tailrl.train.console import StepDisplay
    from tailrl.train.stop import EXIT_STOPPED

    if not trainer.ctx.main:  # under torchrun rank 0 speaks for the job
        trainer.fit()
        return EXIT_STOPPED if trainer.stopped else 0
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    from rich.console import Console

    console = Console(stderr=True)
    ranks = f" on {trainer.ctx.world} ranks" if trainer.ctx.enabled else ""
    console.print(f"[bold]tailrl train[/bold] -> {trainer.run_dir}{ranks}  (resolved config: "
                  f"{trainer.run_dir / 'config.yaml'})")
    console.print((trainer.run_dir / "config.yaml").read_text().rstrip(), style="dim")
    if trainer.step_idx:
        console.print(f"resumed at step {trainer.step_idx} from {trainer.last_checkpoint}")
    with StepDisplay(cfg.train.total_steps, trainer.step_idx, console) as display:
        trainer.fit(on_step=display)
    if trainer.stopped:
        console.print(f"stopped by {trainer.stopped} at step {trainer.step_idx}: checkpoint {trainer.last_checkpoint}; "
                      f"continue with: tailrl train --resume {trainer.run_dir}", soft_wrap=True)  # one copyable line
        return EXIT_STOPPED
    console.print(f"done: {trainer.step_idx} steps; checkpoint {trainer.last_checkpoint}; "
                  f"metrics {trainer.run_dir / 'metrics.jsonl'}")
    return 0


def run_eval(a) -> int:
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    import json
    from pathlib import Path

    from tailrl.config import load_config
    from tailrl.model.loading import resolve_device
    from tailrl.train.checkpoint import latest_checkpoint
    from tailrl.train.distributed import init_distributed, leaving
    from tailrl.train.lora_checkpoint import is_lora_checkpoint

    cfg = load_config(a.config, a.overrides)
    ref = a.model or cfg.model.path
    lora_ckpt = None
    if ref and (Path(ref) / "checkpoints").is_dir():
        ckpt = latest_checkpoint(ref)
        if ckpt is None:
            raise UserError(f"run directory {ref} has no complete checkpoint")
        run_dir, ref = ref, str(ckpt / "model")
        if is_lora_checkpoint(ckpt):  # the base with the checkpoint's adapter merged: the weights its engine ran
            lora_ckpt = (run_dir, ckpt)
    if not ref:
        raise UserError("no model: pass --model or set model.path")
    if a.samples < 1:
        raise UserError("--samples must be >= 1")
    device = resolve_device(cfg.model.device)
    ctx = init_distributed(device, cfg.train.dist_timeout_s)  # under torchrun: a shard of the prompts per rank
    with leaving(ctx):
        out = _eval_on_rank(a, cfg, ref, lora_ckpt, device, ctx)
    if not ctx.main:
        return 0
    for k, v in out.items():
        print(f"{k:28s} {v:.4f}")
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=2))
    return 0


def _eval_on_rank(a, cfg, ref: str, lora_ckpt, device: str, ctx) -> dict:
    """Load the policy on this rank, generate and score its share of the prompts; the gathered eval/* numbers."""
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    from dataclasses import replace

    from tailrl.data.datasets import encode_example, load_dataset
    from tailrl.engine import SamplingParams
    from tailrl.model import load
    from tailrl.rewards import build_reward
    from tailrl.speculative import build_engine
    from tailrl.train.distributed import rank_device
    from tailrl.train.evaluate import evaluate
    from tailrl.train.lora_checkpoint import merged_policy

    if lora_ckpt is not None:
        model, tok, _ = merged_policy(*lora_ckpt)
        model = model.to(rank_device(device, ctx))
    else:
        model, tok = load(ref, dtype=cfg.model.dtype, device=rank_device(device, ctx))
    ds = load_dataset(cfg.data, cfg.data.eval_source or cfg.data.source, held_out=bool(cfg.data.eval_source))
    examples = ds.examples[: a.prompts] if a.prompts else ds.examples
    r = cfg.rollout
    temp = a.temperature if a.temperature is not None else (0.0 if a.samples == 1 else r.temperature)
    params = SamplingParams(temperature=temp, top_p=r.top_p, max_new_tokens=r.max_new_tokens, seed=r.seed, stop=r.stop)
    engine = build_engine(model, tok, replace(cfg.engine))
    ks = tuple(k for k in (1, 2, 4, 8, 16, 32) if k <= a.samples)
    reward = build_reward(cfg.reward)
    try:
        out = evaluate(engine, tok, examples, lambda ex: encode_example(ex, tok, cfg.data.chat_template),
                       reward, a.samples, params, ks, ctx=ctx)
    finally:
        reward.close()
        engine.close()
    return out
