"""`tailrl` command line: parse, build, run. Errors a user can cause print one line and exit 2
(`--debug` shows the traceback)."""

from __future__ import annotations

import argparse
import sys

from tailrl.errors import UserError


def _add_generate(sub) -> None:
    p = sub.add_parser("generate", help="sample completions for a JSONL prompts file")
    p.add_argument("--model", required=True, help="HF folder, .gguf file, or a known name (smollm2-135m-instruct)")
    p.add_argument("--prompts", required=True, help='JSONL rows {"prompt": ...} or {"messages": [...]}')
    p.add_argument("--n", type=int, default=1, help="samples per prompt")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--out", help="output JSONL (default stdout)")
    p.add_argument("--timeline", help="PNG of the active batch size over time")
    p.add_argument("--trace", help="write the rollout trace (traces.jsonl row, replayable by tailrl simulate)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="cpu")
    p.add_argument("--engine", action="append", default=[], metavar="KEY=VALUE",
                   help="engine option, e.g. --engine max_batch_size=64 --engine spec.k_max=4")
    p.add_argument("--spec", default=None, metavar="none|ngram|history|draft:PATH|auto",
                   help="speculative decoding (exact: the tokens do not change)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (ranks spawned on this machine: tp x dp)")
    p.add_argument("--dp", type=int, default=1, help="data-parallel replicas")
    p.add_argument("--switch", default="off", metavar="off|auto|tpN@STEP[:migrate|recompute]",
                   help="change the TP/DP layout mid-rollout: PAT's controller (auto) or forced (at the first "
                        "controller meeting, every 8 engine steps, at or after STEP)")
    p.add_argument("--tp-profile", help="latency profile from `tailrl profile tp` (for --switch auto)")
    p.add_argument("--switch-kv", default="auto", choices=["auto", "migrate", "recompute"],
                   help="how --switch auto moves unfinished requests (auto: the cost model picks)")


def _cmd_generate(a) -> int:
    import torch

    from tailrl.config import EngineConfig, config_from_dict, parse_override, set_dotted
    from tailrl.data.prompts import read_prompts
    from tailrl.engine import SamplingParams
    from tailrl.generate import print_summary, run_generate
    from tailrl.model import load

    if a.n < 1:
        raise UserError(f"--n must be >= 1, got {a.n}")
    if a.temperature < 0 or not 0 < a.top_p <= 1 or a.max_new_tokens < 1:
        raise UserError("need --temperature >= 0, 0 < --top-p <= 1, --max-new-tokens >= 1")
    tree: dict = {}
    for kv in a.engine + ([f"spec.method={a.spec}"] if a.spec else []):
        set_dotted(tree, *parse_override(kv))
    engine_cfg = config_from_dict(tree, EngineConfig)
    torch.manual_seed(a.seed)
    model, tok = load(a.model, dtype=a.dtype, device=a.device)
    rows = read_prompts(a.prompts, tok)
    params = SamplingParams(temperature=a.temperature, top_p=a.top_p, top_k=a.top_k, max_new_tokens=a.max_new_tokens,
                            seed=a.seed, stop=tuple(a.stop), ignore_eos=a.ignore_eos)
    if a.tp * a.dp > 1 or a.switch != "off":
        result = _generate_parallel(a, model, tok, rows, params, engine_cfg)
    else:
        result = run_generate(model, tok, rows, params, a.n, engine_cfg, a.out, progress=sys.stderr.isatty())
    print_summary(result)
    if a.trace:
        import json
        from pathlib import Path

        Path(a.trace).write_text(json.dumps({"step": 0, "rounds": [result.trace.to_json()]}) + "\n")
    if a.timeline:
        from tailrl.engine.timeline import plot_timeline

        plot_timeline(result.trace, a.timeline, title=f"{a.model}: {len(rows)} prompts x {a.n}")
        print(f"timeline: {a.timeline}", file=sys.stderr)
    return 0


def _generate_parallel(a, model, tok, rows, params, engine_cfg):
    import json
    from pathlib import Path

    from tailrl.engine import Request
    from tailrl.generate import GenerateResult, eos_ids_of, write_rollouts
    from tailrl.parallel.generate import SwitchSpec, check_layout, run_parallel_generate

    switch = SwitchSpec.parse(a.switch, a.switch_kv)
    profile = None
    if a.tp_profile:
        if not Path(a.tp_profile).is_file():
            raise UserError(f"latency profile not found: {a.tp_profile}")
        try:
            profile = json.loads(Path(a.tp_profile).read_text())
        except json.JSONDecodeError as e:
            raise UserError(f"latency profile {a.tp_profile} is not JSON: {e}") from None
    check_layout(model.args, a.tp, a.dp, switch, profile)
    requests = [Request(r.token_ids, uid=r.index, n=a.n, params=params, error=r.error) for r in rows]
    res, trace = run_parallel_generate(a.model, requests, engine_cfg, a.tp, a.dp, switch, profile,
                                       eos_ids_of(model, tok), a.max_new_tokens)
    write_rollouts(res.rollouts, tok, params, a.out)
    for ev in res.switches:
        print(f"switch at {ev.t:.2f}s: {ev.src} -> {ev.dst} ({ev.unfinished} unfinished, KV {ev.kv_path}) "
              f"{ev.total_s:.3f}s = weights {ev.weights_s:.3f} + KV {ev.kv_s:.3f} + groups {ev.groups_s:.3f}",
              file=sys.stderr)
    print(f"layouts: {' -> '.join(res.layouts)}", file=sys.stderr)
    return GenerateResult(res.rollouts, trace)


def _add_demo(sub) -> None:
    p = sub.add_parser("demo", help="the main job on the embedded default: warm-start + GRPO (no downloads)")
    p.add_argument("overrides", nargs="*", help="dotted overrides of the demo config, e.g. train.total_steps=20")
    p.add_argument("--out-dir", default=None, help="run directory (default runs/demo-<time>)")


def _cmd_demo(a) -> int:
    from tailrl.demo.run import run_demo

    return run_demo(a.out_dir, a.overrides)


def _add_train(sub) -> None:
    p = sub.add_parser("train", help="GRPO / Dr.GRPO / DAPO training from a YAML config")
    p.add_argument("config", nargs="?", help="YAML config (optional with --resume)")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.lr=1e-6 rollout.group_size=8")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint")
    p.add_argument("--run-dir", help="run directory (default train.out_dir/train.run_name)")


def _cmd_train(a) -> int:
    from tailrl.config import load_config
    from tailrl.train.console import StepDisplay
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
    from rich.console import Console

    console = Console(stderr=True)
    console.print(f"[bold]tailrl train[/bold] -> {trainer.run_dir}  (resolved config: {trainer.run_dir / 'config.yaml'})")
    console.print((trainer.run_dir / "config.yaml").read_text().rstrip(), style="dim")
    if trainer.step_idx:
        console.print(f"resumed at step {trainer.step_idx} from {trainer.last_checkpoint}")
    with StepDisplay(cfg.train.total_steps, trainer.step_idx, console) as display:
        trainer.fit(on_step=display)
    console.print(f"done: {trainer.step_idx} steps; checkpoint {trainer.last_checkpoint}; "
                  f"metrics {trainer.run_dir / 'metrics.jsonl'}")
    return 0


def _add_eval(sub) -> None:
    p = sub.add_parser("eval", help="pass@k and mean length of a model on a dataset")
    p.add_argument("config", help="YAML config (data, reward, rollout sections are used)")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--model", help="HF folder / known name / run directory (default: model.path)")
    p.add_argument("--samples", type=int, default=1, help="completions per prompt (pass@k for k <= samples)")
    p.add_argument("--prompts", type=int, default=0, help="evaluate the first N prompts (0 = all)")
    p.add_argument("--temperature", type=float, default=None, help="default: 0 (greedy) for 1 sample, else rollout's")
    p.add_argument("--out", help="write the metrics as JSON")


def _cmd_eval(a) -> int:
    import json
    from dataclasses import replace
    from pathlib import Path

    from tailrl.config import load_config
    from tailrl.data.datasets import encode_example, load_dataset
    from tailrl.engine import SamplingParams
    from tailrl.generate import build_engine
    from tailrl.model import load
    from tailrl.rewards import build_reward
    from tailrl.train.checkpoint import latest_checkpoint
    from tailrl.train.evaluate import evaluate

    cfg = load_config(a.config, a.overrides)
    ref = a.model or cfg.model.path
    if ref and (Path(ref) / "checkpoints").is_dir():
        ckpt = latest_checkpoint(ref)
        if ckpt is None:
            raise UserError(f"run directory {ref} has no complete checkpoint")
        ref = str(ckpt / "model")
    if not ref:
        raise UserError("no model: pass --model or set model.path")
    if a.samples < 1:
        raise UserError("--samples must be >= 1")
    model, tok = load(ref, dtype=cfg.model.dtype, device=cfg.model.device)
    ds = load_dataset(cfg.data, cfg.data.eval_source or cfg.data.source)
    examples = ds.examples[: a.prompts] if a.prompts else ds.examples
    r = cfg.rollout
    temp = a.temperature if a.temperature is not None else (0.0 if a.samples == 1 else r.temperature)
    params = SamplingParams(temperature=temp, top_p=r.top_p, max_new_tokens=r.max_new_tokens, seed=r.seed, stop=r.stop)
    engine = build_engine(model, tok, replace(cfg.engine))
    ks = tuple(k for k in (1, 2, 4, 8, 16, 32) if k <= a.samples)
    out = evaluate(engine, tok, examples, lambda ex: encode_example(ex, tok, cfg.data.chat_template),
                   build_reward(cfg.reward), a.samples, params, ks)
    for k, v in out.items():
        print(f"{k:28s} {v:.4f}")
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=2))
    return 0


def _add_simulate(sub) -> None:
    p = sub.add_parser("simulate", help="what-if simulator: synchronous RL steps on a cluster over length traces")
    p.add_argument("config", nargs="?", help="YAML config, or a bundled one (pat_h100_llama8b_24k, ...)")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. cluster.num_gpus=16 pat.enabled=true")
    p.add_argument("--out", default="runs/simulate", help="folder for summary.md, steps.json, timeline.png, breakdown.png")


def _cmd_simulate(a) -> int:
    from tailrl.sim.command import run_simulate

    config, overrides = a.config, list(a.overrides)
    if config and "=" in config:  # overrides only, no config file
        config, overrides = None, [config, *overrides]
    md, _ = run_simulate(config, overrides, a.out)
    print(md)
    print(f"report: {a.out}/summary.md, plots: {a.out}/timeline.png, {a.out}/breakdown.png")
    return 0


def _add_bench(sub) -> None:
    p = sub.add_parser("bench", help="side-by-side benchmarks (ratios measured in one run)")
    bs = p.add_subparsers(dest="bench", required=True)
    q = bs.add_parser("pods", help="GRPO (m per prompt) vs GRPO-PODS (n = ratio*m generated, m trained) on the demo task")
    q.add_argument("overrides", nargs="*", help="extra demo-config overrides for every run")
    q.add_argument("--m", type=int, default=4, help="rollouts trained per prompt")
    q.add_argument("--ratio", type=int, default=4, help="n / m")
    q.add_argument("--prompts", type=int, default=16, help="prompts per step")
    q.add_argument("--budget-s", type=float, default=90.0, help="training-time budget per run")
    q.add_argument("--no-rules", action="store_true", help="skip the max_reward / random side runs")
    q.add_argument("--out-dir", default="runs/bench-pods")
    q = bs.add_parser("sagc", help="static G in {4, 8, 16} vs SAGC on the demo task, same prompt budget and B")
    q.add_argument("overrides", nargs="*", help="extra demo-config overrides for every run")
    q.add_argument("--batch", type=int, default=128, help="effective batch B = prompts x G per step")
    q.add_argument("--prompt-budget", type=int, default=1600, help="prompts drawn per run (same for every method)")
    q.add_argument("--candidates", type=int, nargs="+", default=[4, 8, 16])
    q.add_argument("--start-g", type=int, default=None, help="SAGC's first G (default: the middle candidate)")
    q.add_argument("--sagc", nargs="*", default=[], metavar="KEY=VALUE",
                   help="overrides for the SAGC run only, e.g. control.delta=0.15")
    q.add_argument("--out-dir", default="runs/bench-sagc")
    q = bs.add_parser("spec", help="speculation off vs on, same engine and requests (demo G=16, SmolLM2, large batch)")
    q.add_argument("--workloads", nargs="+", default=["demo", "large", "smollm2", "train"],
                   choices=["demo", "large", "smollm2", "train"])
    q.add_argument("--train-steps", type=int, default=10, help="steps of the in-training comparison")
    q.add_argument("--spec", default="auto", help="speculation method for the 'on' side")
    q.add_argument("--threads", type=int, default=2)
    q.add_argument("--repeats", type=int, default=1)
    q.add_argument("--out-dir", default="runs/bench-spec")
    q = bs.add_parser("tp", help="static TP1/DP2 and TP2/DP1 vs PAT's adaptive switching on a long-tailed batch (2 ranks)")
    q.add_argument("--requests", type=int, default=32)
    q.add_argument("--long-every", type=int, default=16, help="every k-th request is long")
    q.add_argument("--long", type=int, default=192, help="tokens of a long request (short ones: 8-40)")
    q.add_argument("--switch-at", type=int, default=24, help="engine step of the forced switches")
    q.add_argument("--out-dir", default="runs/bench-tp")
    q = bs.add_parser("sim", help="simulator vs the papers' numbers (calibration) and vs tailrl's own measured rollouts")
    q.add_argument("--replay-steps", type=int, default=8, help="demo training steps whose rollouts are replayed")
    q.add_argument("--trace", help="replay this run folder's traces.jsonl instead of training")
    q.add_argument("--profile", help="use this engine profile instead of profiling now")
    q.add_argument("--no-calibration", action="store_true")
    q.add_argument("--no-replay", action="store_true")
    q.add_argument("--out-dir", default="runs/bench-sim")


def _add_profile(sub) -> None:
    p = sub.add_parser("profile", help="offline profiles used by the engine")
    ps = p.add_subparsers(dest="profile", required=True)
    q = ps.add_parser("ladder", help="draft ladder: speed-up of each drafter vs acceptance rate (random accept/reject)")
    q.add_argument("--model", required=True, help="target model (HF folder or known name; random weights are fine)")
    q.add_argument("--draft", default="", help="draft model folder (adds the draft-model rung)")
    q.add_argument("--k-max", type=int, default=8)
    q.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    q.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    q.add_argument("--out", default="ladder.json", help="ladder JSON (use with engine.spec.ladder=PATH)")
    q = ps.add_parser("engine", help="decode / prefill latency of the engine on this machine (for tailrl simulate)")
    q.add_argument("--model", required=True, help="HF folder, .gguf file, or a known name")
    q.add_argument("--engine", action="append", default=[], metavar="KEY=VALUE", help="engine option (as in generate)")
    q.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 64, 128, 256])
    q.add_argument("--contexts", type=int, nargs="+", default=[16, 64, 192], help="prompt tokens per sequence")
    q.add_argument("--steps", type=int, default=40, help="decode steps timed per (batch, context)")
    q.add_argument("--out", default="engine_profile.json", help="profile JSON (use with latency.profile=PATH)")
    q = ps.add_parser("tp", help="PAT's profiler: decode / prefill latency per TP degree, bandwidth, group creation")
    q.add_argument("--model", required=True, help="HF folder, .gguf file, or a known name")
    q.add_argument("--world", type=int, default=2, help="ranks spawned on this machine")
    q.add_argument("--tps", type=int, nargs="+", default=None, help="TP degrees (default: every divisor of --world)")
    q.add_argument("--engine", action="append", default=[], metavar="KEY=VALUE", help="engine option (as in generate)")
    q.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 64])
    q.add_argument("--contexts", type=int, nargs="+", default=[16, 128, 512], help="prompt tokens per sequence")
    q.add_argument("--steps", type=int, default=24, help="decode steps timed per (batch, context)")
    q.add_argument("--out", default="tp_profile.json", help="profile JSON (use with generate --tp-profile PATH)")


def _cmd_profile(a) -> int:
    if a.profile == "engine":
        return _profile_engine(a)
    if a.profile == "tp":
        return _profile_tp(a)
    import torch

    from tailrl.config import EngineConfig, SpecConfig
    from tailrl.engine import Engine
    from tailrl.engine.spec.ladder import ALPHAS
    from tailrl.engine.spec.profile import profile_ladder
    from tailrl.model import load

    if a.k_max < 1 or min(a.batches) < 1:
        raise UserError("need --k-max >= 1 and batch sizes >= 1")
    if a.threads:
        torch.set_num_threads(a.threads)
    model, _ = load(a.model, tokenizer=False)
    spec = SpecConfig(method="auto", draft_model=a.draft, k_max=a.k_max)
    engine = Engine(model, EngineConfig(kv_cache_tokens=max(a.batches) * (80 + a.k_max) * 2, spec=spec))
    ladder = profile_ladder(engine, tuple(sorted(a.batches)), a.k_max, alphas=ALPHAS)
    ladder.save(a.out)
    print(f"ladder: {a.out}")
    return 0


def _profile_engine(a) -> int:
    from tailrl.config import EngineConfig, config_from_dict, parse_override, set_dotted
    from tailrl.engine import Engine
    from tailrl.model import load
    from tailrl.sim.profile import profile_engine, save_profile

    if min(a.batches) < 1 or min(a.contexts) < 1 or a.steps < 9:
        raise UserError("need batch sizes >= 1, contexts >= 1 and --steps >= 9")
    tree: dict = {}
    for kv in a.engine:
        set_dotted(tree, *parse_override(kv))
    model, _ = load(a.model, tokenizer=False)
    engine = Engine(model, config_from_dict(tree, EngineConfig))
    prof = profile_engine(engine, model.args.vocab_size, tuple(sorted(a.batches)), tuple(sorted(a.contexts)), a.steps,
                          progress=lambda b, c: print(f"  batch {b:4d}  prompt {c:4d} tokens", flush=True))
    save_profile(prof, a.out)
    print(f"engine profile: {a.out}")
    return 0


def _profile_tp(a) -> int:
    import json
    from pathlib import Path

    from tailrl.config import EngineConfig, config_from_dict, parse_override, set_dotted
    from tailrl.model import load
    from tailrl.parallel.profile import profile_tp

    tps = a.tps or [t for t in range(1, a.world + 1) if a.world % t == 0]
    if a.world < 1 or any(t < 1 or a.world % t for t in tps):
        raise UserError(f"every --tps degree must divide --world {a.world}; got {tps}")
    if min(a.batches) < 1 or min(a.contexts) < 1 or a.steps < 9:
        raise UserError("need batch sizes >= 1, contexts >= 1 and --steps >= 9")
    args = load(a.model, tokenizer=False)[0].args  # resolves the model (and fails in one line) before spawning
    bad = [t for t in tps if args.num_heads % t or args.num_kv_heads % t]
    if bad:
        raise UserError(f"TP={bad[0]} does not divide the model's heads ({args.num_heads} query, {args.num_kv_heads} KV)")
    tree: dict = {}
    for kv in a.engine:
        set_dotted(tree, *parse_override(kv))
    prof = profile_tp(a.model, a.world, tps, config_from_dict(tree, EngineConfig), tuple(sorted(a.batches)),
                      tuple(sorted(a.contexts)), a.steps)
    Path(a.out).write_text(json.dumps(prof, indent=1))
    print(f"TP profile ({', '.join(f'TP{t}' for t in tps)} on {a.world} ranks; all-gather "
          f"{prof['bandwidth'] / 1e9:.2f} GB/s per rank): {a.out}")
    return 0


def _cmd_bench(a) -> int:
    if a.bench == "pods":
        from tailrl.bench.pods import run_pods_bench

        if a.m < 2 or a.ratio < 1 or a.prompts < 1 or a.budget_s <= 0:
            raise UserError("need --m >= 2, --ratio >= 1, --prompts >= 1, --budget-s > 0")
        run_pods_bench(a.out_dir, a.m, a.ratio, a.prompts, a.budget_s, not a.no_rules, a.overrides)
    elif a.bench == "sagc":
        from tailrl.bench.sagc import run_sagc_bench

        bad = [g for g in a.candidates if g < 2 or a.batch % g]
        if not a.candidates or bad:
            raise UserError(f"--candidates must be group sizes >= 2 dividing --batch {a.batch}; bad: {bad}")
        if a.prompt_budget < max(a.batch // g for g in a.candidates):
            raise UserError("--prompt-budget must cover at least one step of every run")
        if a.start_g is not None and a.start_g not in a.candidates:
            raise UserError(f"--start-g {a.start_g} is not one of --candidates {a.candidates}")
        run_sagc_bench(a.out_dir, a.batch, a.prompt_budget, a.candidates, a.start_g, a.overrides, a.sagc)
    elif a.bench == "spec":
        from tailrl.bench.spec import run_spec_bench

        run_spec_bench(a.out_dir, a.workloads, a.spec, a.threads, a.repeats, a.train_steps)
    elif a.bench == "tp":
        from tailrl.bench.tp import run_tp_bench

        if a.requests < 2 or a.long_every < 1 or a.long < 41 or a.switch_at < 1:
            raise UserError("need --requests >= 2, --long-every >= 1, --long > 40, --switch-at >= 1")
        print(run_tp_bench(a.out_dir, a.requests, a.long_every, a.long, a.switch_at))
    elif a.bench == "sim":
        from tailrl.bench.sim import run_sim_bench

        if a.replay_steps < 1:
            raise UserError("--replay-steps must be >= 1")
        print(run_sim_bench(a.out_dir, a.replay_steps, a.trace, a.profile, not a.no_calibration, not a.no_replay))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tailrl", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--version", action="store_true")
    sub = parser.add_subparsers(dest="command")
    _add_generate(sub)
    _add_demo(sub)
    _add_train(sub)
    _add_eval(sub)
    _add_bench(sub)
    _add_profile(sub)
    _add_simulate(sub)
    argv = sys.argv[1:] if argv is None else argv
    # --debug may appear anywhere on the line
    debug = "--debug" in argv
    argv = [x for x in argv if x != "--debug"]
    a = parser.parse_args(argv)
    if a.version:
        from tailrl import __version__

        print(__version__)
        return 0
    commands = {"generate": _cmd_generate, "demo": _cmd_demo, "train": _cmd_train, "eval": _cmd_eval, "bench": _cmd_bench,
                "profile": _cmd_profile, "simulate": _cmd_simulate}
    if a.command is None:
        parser.print_help()
        return 2
    try:
        return commands[a.command](a)
    except UserError as e:
        if debug:
            raise
        print(f"tailrl {a.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
