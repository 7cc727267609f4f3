"""`tailrl bench ...`: side-by-side benchmarks (ratios measured in one run). Each subcommand checks its
arguments in one line and hands over to tailrl/bench/<name>.py."""

from __future__ import annotations

from pathlib import Path

from tailrl.errors import UserError

# bench/e2e_tasks.py's TASKS (named here so that --help imports no torch; tests/bench check they agree)
E2E_TASKS = ("demo", "smollm2", "wide", "tools", "big-step", "big-step-dry")


def add(sub) -> None:
    p = sub.add_parser("bench", help="side-by-side benchmarks (ratios measured in one run)")
    bs = p.add_subparsers(dest="bench", required=True)
    q = bs.add_parser("pods", help="GRPO (m per prompt) vs GRPO-PODS (n = ratio*m generated, m trained) on the demo task")
    q.set_defaults(run=pods)
    q.add_argument("overrides", nargs="*", help="extra demo-config overrides for every run")
    q.add_argument("--m", type=int, default=16, help="rollouts trained per prompt (PODS setting (a): 16)")
    q.add_argument("--ratio", type=int, default=4, help="n / m (PODS setting (a): n = 64)")
    q.add_argument("--prompts", type=int, default=4, help="prompts per step (4 x 16 = 64 rows per update)")
    q.add_argument("--budget-s", type=float, default=90.0, help="training-time budget per run")
    q.add_argument("--no-rules", action="store_true", help="skip the max_reward / random side runs")
    q.add_argument("--seeds", type=int, nargs="+", default=[0], help="run everything once per seed; "
                   "the speed-up is read off the seed-mean curves")
    q.add_argument("--reuse", action="store_true", help="read the runs already in --out-dir (same settings) "
                   "instead of training them again: re-derive the table and plot")
    q.add_argument("--out-dir", default="runs/bench-pods")
    q = bs.add_parser("tools", help="tool latency vs decoding: the tools demo's rollouts with the calculator "
                      "answering at once and after a sleep per call (overlap ratio, identity)")
    q.set_defaults(run=tools)
    q.add_argument("--prompts", type=int, default=32)
    q.add_argument("--samples", type=int, default=8, help="samples per prompt")
    q.add_argument("--sleep", type=float, default=0.2, help="seconds each calculator call sleeps")
    q.add_argument("--workers", type=int, default=4, help="tool worker processes")
    q.add_argument("--max-new-tokens", type=int, default=160)
    q.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    q.add_argument("--out", default="runs/bench-tools/result.json")
    q = bs.add_parser("sagc", help="static G in {4, 8, 16} vs SAGC on the demo task, same prompt budget and B")
    q.set_defaults(run=sagc)
    q.add_argument("overrides", nargs="*", help="extra demo-config overrides for every run")
    q.add_argument("--batch", type=int, default=128, help="effective batch B = prompts x G per step")
    q.add_argument("--prompt-budget", type=int, default=1600, help="prompts drawn per run (same for every method)")
    q.add_argument("--candidates", type=int, nargs="+", default=[4, 8, 16])
    q.add_argument("--start-g", type=int, default=None, help="SAGC's first G (default: the middle candidate)")
    q.add_argument("--sagc", nargs="*", default=[], metavar="KEY=VALUE",
                   help="overrides for the SAGC run only, e.g. control.delta=0.15")
    q.add_argument("--out-dir", default="runs/bench-sagc")
    q = bs.add_parser("spec", help="speculation off vs on, same engine and requests (demo G=16, SmolLM2, large batch, "
                      "SmolLM2's long tail with its distilled draft)")
    q.set_defaults(run=spec)
    q.add_argument("--workloads", nargs="+", default=["demo", "large", "smollm2", "train"],
                   choices=["demo", "large", "smollm2", "train", "tail"],
                   help="tail: SmolLM2 rolling out GSM8K-style questions for several epochs, every --configs side by "
                        "side, per phase (batch > 4 / <= 4); distils and caches SmolLM2's draft on first use")
    q.add_argument("--prompts", default=None, help="tail: questions JSONL (e.g. GSM8K test.jsonl; default generated)")
    q.add_argument("--draft-prompts", default=None, help="tail: questions the draft is distilled on (JSONL, e.g. "
                   "GSM8K train.jsonl; default other generated problems)")
    q.add_argument("--configs", nargs="+", default=["history+ngram", "draft", "draft-decoupled", "all+BoN"],
                   choices=["history+ngram", "draft", "draft-decoupled", "all+BoN"], help="tail: configurations vs off")
    q.add_argument("--tail-prompts", type=int, default=4, help="tail: questions per epoch")
    q.add_argument("--group", type=int, default=8, help="tail: samples per question (G)")
    q.add_argument("--tail-new", type=int, default=448, help="tail: new tokens per sample at most")
    q.add_argument("--temperature", type=float, default=0.7, help="tail: sampling temperature")
    q.add_argument("--epochs", type=int, default=3, help="tail: epochs over the same questions (history from the 2nd)")
    q.add_argument("--train-steps", type=int, default=10, help="steps of the in-training comparison")
    q.add_argument("--spec", default="auto", help="speculation method for the 'on' side")
    q.add_argument("--threads", type=int, default=2)
    q.add_argument("--repeats", type=int, default=1)
    q.add_argument("--mode", nargs="+", choices=["off", "coupled", "decoupled", "auto"], default=None,
                   help="instead of the workloads: these speculation modes side by side at large batch, with the "
                        "TGS model's predictions (demo policy + distilled draft)")
    q.add_argument("--batches", type=int, nargs="+", default=[64, 128, 256], help="with --mode: batch sizes (multiples of 16)")
    q.add_argument("--max-new", type=int, default=160, help="with --mode: new tokens per request at most")
    q.add_argument("--out-dir", default="runs/bench-spec")
    q = bs.add_parser("e2e", help="TRL's GRPOTrainer vs tailrl (accelerations off) vs tailrl (SAGC + PODS + "
                      "speculation) on the demo task, same model, hyperparameters and prompt budget")
    q.set_defaults(run=e2e)
    q.add_argument("--steps", type=int, default=30, help="steps of P prompts x G samples at the task's G (the prompt budget)")
    q.add_argument("--eval-every", type=int, default=10, help="held-out evaluation every N steps")
    q.add_argument("--systems", nargs="+", default=["trl", "off", "full"], choices=["trl", "off", "full", "unchunked"],
                   help="unchunked: off with the whole (S, C, V) logits in the update (train.logprob_chunk_rows=0)")
    q.add_argument("--task", default="demo", choices=E2E_TASKS,
                   help="demo: the demo policy on chained arithmetic; smollm2: SmolLM2-135M-Instruct on easy sums; "
                        "tools: the tools demo's policy with the calculator tool, multi-turn (TRL: tools=); "
                        "wide: a tiny Qwen2 with a 49,152 vocabulary, 256-token completions at G = 16; big-step: one "
                        "step of a Qwen2.5-1.5B shape at B = 256, 1,024 tokens (a GPU's size; big-step-dry: 2 layers)")
    q.add_argument("--tool-latency", type=float, default=0.0,
                   help="with --task tools: the calculator sleeps this many seconds per call (both systems)")
    q.add_argument("--tool-workers", type=int, default=8, help="with --tool-latency: tailrl's tool worker processes")
    q.add_argument("--trl-async-tool", action="store_true",
                   help="with --tool-latency: TRL gets an async twin of the tool (TRL 1.16 gathers async calls "
                        "per completion, so calls of different completions still run one after another)")
    q.add_argument("--out-dir", default="runs/bench-e2e")
    q = bs.add_parser("tp", help="static TP1/DP2 and TP2/DP1 vs PAT's adaptive switching on a long-tailed batch (2 ranks)")
    q.set_defaults(run=tp)
    q.add_argument("--requests", type=int, default=32)
    q.add_argument("--long-every", type=int, default=16, help="every k-th request is long")
    q.add_argument("--long", type=int, default=192, help="tokens of a long request (short ones: 8-40)")
    q.add_argument("--switch-at", type=int, default=24, help="engine step of the forced switches")
    q.add_argument("--out-dir", default="runs/bench-tp")
    q = bs.add_parser("sim", help="simulator vs the papers' numbers (calibration) and vs tailrl's own measured rollouts")
    q.set_defaults(run=sim)
    q.add_argument("--replay-steps", type=int, default=8, help="demo training steps whose rollouts are replayed")
    q.add_argument("--trace", help="replay this run folder's traces.jsonl instead of training")
    q.add_argument("--profile", help="use this engine profile instead of profiling now")
    q.add_argument("--no-calibration", action="store_true")
    q.add_argument("--no-replay", action="store_true")
    q.add_argument("--out-dir", default="runs/bench-sim")
    q = bs.add_parser("engine", help="decode ms/step, kernels and syncs per step, HBM roofline per model shape and "
                      "batch; keyed sampling vs the LM head; the long-tailed workload vs HF generate")
    q.set_defaults(run=engine)
    q.add_argument("--shapes", nargs="+", default=None,
                   choices=["smollm2-135m", "qwen2.5-0.5b", "qwen2.5-1.5b", "small", "tiny"],
                   help="model shapes (random weights); default: the first three on CUDA, smollm2-135m on a CPU "
                        "(small, tiny: 4- and 2-layer shapes for checking the harness)")
    q.add_argument("--sampling-batch", type=int, default=64, help="rows of the keyed-sampling vs LM-head timing")
    q.add_argument("--model", default=None, help="decode with a checkpoint's real weights (a folder or a known name, "
                   "e.g. smollm2-135m-instruct) instead of the random-weight --shapes")
    q.add_argument("--samplers", nargs="+", default=None, choices=["gumbel", "blocked", "inverse_cdf"],
                   help="time every decode step and the sampling once per sampler, interleaved in one run "
                        "(default: the engine's sampler only)")
    q.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64, 256])
    q.add_argument("--context", type=int, default=None, help="tokens per sequence (default 512 on CUDA, 128 on CPU)")
    q.add_argument("--steps", type=int, default=None, help="timed steps per batch (default 20 on CUDA, 5 on CPU)")
    q.add_argument("--warmup", type=int, default=3)
    q.add_argument("--device", default=None, help="cuda | cpu (default: cuda when available)")
    q.add_argument("--dtype", default=None, choices=["float32", "bfloat16"], help="default: bfloat16 on CUDA, float32 on CPU")
    q.add_argument("--no-tail", action="store_true", help="skip the long-tailed workload vs HF generate")
    q.add_argument("--tail-batch", type=int, default=64)
    q.add_argument("--tail-max-len", type=int, default=1024)
    q.add_argument("--tail-median", type=float, default=64.0)
    q.add_argument("--tail-shape", default=None, help="model shape of the long-tailed workload (default: "
                   "smollm2-135m on CUDA, the small 4-layer shape on a CPU)")
    q.add_argument("--repeat", type=int, default=None, help="long-tailed runs per system, fastest kept (default: 2 "
                   "on CUDA, where the first run captures graphs and compiles, 1 on a CPU)")
    q.add_argument("--engine", action="append", default=[], metavar="KEY=VALUE",
                   help="engine options for every run, e.g. --engine attention=torch --engine cuda_graphs=false")
    q.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    q.add_argument("--out-dir", default="runs/bench-engine")
    q = bs.add_parser("rewards", help="sequential in-process scoring vs the streaming reward pool overlapping "
                      "the rollout's tail (math-verify, mostly wrong answers)")
    q.set_defaults(run=rewards)
    q.add_argument("--batch", type=int, default=512)
    q.add_argument("--workers", type=int, default=2)
    q.add_argument("--group", type=int, default=8)
    q.add_argument("--max-new-tokens", type=int, default=512)
    q.add_argument("--out-dir", default="runs/bench-rewards")
    q = bs.add_parser("exactness", help="token identity of the same requests alone vs batched, with speculation, "
                      "CUDA graphs and TP, and rollout vs trainer logprobs, for one engine.exact mode")
    q.set_defaults(run=exactness)
    q.add_argument("--exact", default="fast", choices=["fast", "strict", "canonical"], help="engine.exact of every run")
    q.add_argument("--sequences", type=int, default=1000, help="sequences (prompts x 8 samples)")
    q.add_argument("--new-tokens", type=int, default=256, help="tokens generated per sequence (forced with "
                   "--shape; the most with --model, where EOS stops)")
    q.add_argument("--batches", type=int, nargs="+", default=[16, 64, 256],
                   help="max_batch_size of the batched runs (the reference is batch 1)")
    q.add_argument("--shape", default="small", help="model shape with random weights: small (4 layers, hidden "
                   "256), tiny (2 layers, hidden 64, vocab 512: for --exact strict on a CPU, where the kernels run "
                   "under the Triton interpreter) or smollm2-135m / qwen2.5-0.5b / qwen2.5-1.5b")
    q.add_argument("--model", default=None, help="a real model instead of --shape: a known name "
                   "(smollm2-135m-instruct) or a local Hugging Face folder; its chat template formats the questions")
    q.add_argument("--prompts", default=None, help="with --model: JSONL of questions (a 'question' or 'prompt' "
                   "field, e.g. GSM8K's test.jsonl; default: generated GSM8K-style word problems)")
    q.add_argument("--temperature", type=float, default=1.0, help="with --model: sampling temperature")
    q.add_argument("--spec-methods", nargs="*", default=["auto"],
                   help="speculative runs at the largest batch: auto ngram history draft bon decoupled (none: no "
                   "speculation); draft, bon and decoupled draft with the policy's first --draft-layers layers")
    q.add_argument("--draft-layers", type=int, default=4, help="layers of the draft made from the policy")
    q.add_argument("--preempt", action="store_true", help="also a run at the largest batch whose KV pool holds a "
                   "quarter of what its running batch needs (preemption and recompute)")
    q.add_argument("--no-spec", action="store_true", help="skip the speculative runs (--spec-methods with none)")
    q.add_argument("--tp", type=int, default=2, help="ranks of the TP run over gloo (SmolLM2-135M: 3); --no-tp: none")
    q.add_argument("--no-tp", action="store_true", help="skip the TP run")
    q.add_argument("--device", default=None, help="cuda | cpu (default: cuda when available)")
    q.add_argument("--dtype", default=None, choices=["float32", "bfloat16"], help="default: bfloat16 on CUDA, float32 on CPU")
    q.add_argument("--engine", action="append", default=[], metavar="KEY=VALUE",
                   help="engine options for every run, e.g. --engine attention=torch")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    q.add_argument("--out-dir", default="runs/bench-exactness", help="summary.md and result.json; every "
                   "finished run is kept under OUT_DIR/runs-<digest of the settings>/, so the same command started "
                   "again continues where a stopped one ended (a kept run is reused while the code that could "
                   "have made it is unchanged)")
    q.add_argument("--fresh", action="store_true", help="run everything again (replace the kept runs)")
    q = bs.add_parser("gpu", help="every GPU figure in one command: the CUDA tests, engine, long tail, exactness, "
                      "e2e vs TRL, spec / PODS / SAGC, each under its own budget (docs/gpu.md)")
    q.set_defaults(run=gpu)
    q.add_argument("--out", default="runs/bench-gpu", help="results folder; a second call with the same folder "
                   "continues where the first stopped")
    q.add_argument("--budget-min", type=float, default=25.0, help="minutes for this call (parts that do not fit "
                   "are left for the next call)")
    q.add_argument("--only", nargs="+", default=None, metavar="PART", help="only these parts (of: "
                   "tests engine engine-eager long-tail exactness e2e spec pods sagc)")
    q.add_argument("--dry-run", action="store_true", help="every part on the CPU at tiny sizes (seconds each): "
                   "checks the harness and writes the same files")
    q.add_argument("--redo", action="store_true", help="run parts again that an earlier call finished")
    q.add_argument("--pack", default=None, metavar="FILE.tgz", help="also bundle the small result files into "
                   "this archive after every part")


def gpu(a) -> int:
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    import torch

    from tailrl.bench.gpu import run_gpu_bench
    from tailrl.bench.gpu_parts import PART_NAMES

    bad = sorted(set(a.only or ()) - set(PART_NAMES))
    if bad:
        raise UserError(f"--only {' '.join(bad)}: not a part (parts: {' '.join(PART_NAMES)})")
    if a.budget_min <= 0:
        raise UserError("--budget-min must be > 0")
    if not a.dry_run and not torch.cuda.is_available():
        raise UserError("no CUDA device here: `tailrl bench gpu` measures a GPU (--dry-run checks the harness on a CPU)")
    s = run_gpu_bench(a.out, a.budget_min, a.only, a.dry_run, a.redo, a.pack)
    print((Path(a.out) / "summary.md").read_text())
    return 0 if all(p["status"] in ("ok", "skipped") for p in s["parts"]) else 1


def tools(a) -> int:
    if a.prompts < 1 or a.samples < 1 or a.workers < 1 or a.sleep <= 0 or a.max_new_tokens < 1:
        raise UserError("bench tools needs --prompts, --samples, --workers, --max-new-tokens >= 1 and --sleep > 0")
    # lazy: torch and the model only when the benchmark runs
    from tailrl.bench.tool_latency import run_tools_bench

    r = run_tools_bench(a.prompts, a.samples, a.sleep, a.workers, a.max_new_tokens, a.out, a.threads)
    ratio = "n/a" if r["overlap_ratio"] is None else f"{r['overlap_ratio']:.3f}"
    print(f"{r['calls']} calls x {a.sleep:g} s = {r['serial_s']:.1f} s if run one at a time; the rollout grew by "
          f"{r['added_s']:.2f} s ({r['wall_s_no_sleep']:.2f} -> {r['wall_s_sleep']:.2f} s): overlap ratio {ratio}; "
          f"rollouts identical {r['identical_rollouts']}; parked {r['parked_frac_sleep']:.0%} of sequence time "
          f"-> {a.out}")
    return 0


def pods(a) -> int:
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    from tailrl.bench.pods import run_pods_bench

    if a.m < 2 or a.ratio < 1 or a.prompts < 1 or a.budget_s <= 0:
        raise UserError("need --m >= 2, --ratio >= 1, --prompts >= 1, --budget-s > 0")
    if len(set(a.seeds)) != len(a.seeds):
        raise UserError(f"--seeds must be distinct, got {a.seeds}")
    run_pods_bench(a.out_dir, a.m, a.ratio, a.prompts, a.budget_s, not a.no_rules, a.overrides, a.seeds, a.reuse)
    return 0


def sagc(a) -> int:
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    from tailrl.bench.sagc import run_sagc_bench

    bad = [g for g in a.candidates if g < 2 or a.batch % g]
    if not a.candidates or bad:
        raise UserError(f"--candidates must be group sizes >= 2 dividing --batch {a.batch}; bad: {bad}")
    if a.prompt_budget < max(a.batch // g for g in a.candidates):
        raise UserError("--prompt-budget must cover at least one step of every run")
    if a.start_g is not None and a.start_g not in a.candidates:
        raise UserError(f"--start-g {a.start_g} is not one of --candidates {a.candidates}")
    run_sagc_bench(a.out_dir, a.batch, a.prompt_budget, a.candidates, a.start_g, a.overrides, a.sagc)
    return 0


def spec(a) -> int:
    if a.mode:
        # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
        from tailrl.bench.decoupled import run_modes_bench

        if min(a.batches) < 1 or a.max_new < 2 or a.threads < 2 or a.repeats < 1:
            raise UserError("need batch sizes >= 1, --max-new >= 2, --threads >= 2 (one drafts), --repeats >= 1")
        run_modes_bench(a.out_dir, list(dict.fromkeys(["off", *a.mode])), a.batches, a.max_new, a.threads, a.repeats)
        return 0
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    from tailrl.bench.spec import run_spec_bench
    from tailrl.bench.spec_tail import run_tail_bench

    rest = [w for w in a.workloads if w != "tail"]
    if rest:
        run_spec_bench(a.out_dir, rest, a.spec, a.threads, a.repeats, a.train_steps)
    if "tail" in a.workloads:
        if a.tail_prompts < 1 or a.group < 1 or a.tail_new < 2 or a.epochs < 2:
            raise UserError("tail needs --tail-prompts >= 1, --group >= 1, --tail-new >= 2, --epochs >= 2")
        run_tail_bench(a.out_dir, a.prompts, a.draft_prompts, a.tail_prompts, a.group, a.tail_new, a.temperature,
                       a.epochs, a.configs, a.threads)
    return 0


def e2e(a) -> int:
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    import importlib.util

    from tailrl.bench.e2e import run_e2e_bench

    if a.steps < 1 or a.eval_every < 1:
        raise UserError("need --steps >= 1 and --eval-every >= 1")
    if "trl" in a.systems and not (importlib.util.find_spec("trl") and importlib.util.find_spec("datasets")):
        raise UserError("the TRL side needs `pip install trl datasets` (or `pip install -e .[e2e]`); "
                        "or leave it out: --systems off full")
    if a.tool_latency < 0 or (a.tool_latency > 0 and a.task != "tools"):
        raise UserError("--tool-latency takes seconds >= 0, with --task tools")
    run_e2e_bench(a.out_dir, a.steps, a.eval_every, a.systems, a.task, a.tool_latency, a.tool_workers,
                  a.trl_async_tool)
    return 0


def tp(a) -> int:
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    from tailrl.bench.tp import run_tp_bench

    if a.requests < 2 or a.long_every < 1 or a.long < 41 or a.switch_at < 1:
        raise UserError("need --requests >= 2, --long-every >= 1, --long > 40, --switch-at >= 1")
    print(run_tp_bench(a.out_dir, a.requests, a.long_every, a.long, a.switch_at))
    return 0


def sim(a) -> int:
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    from tailrl.bench.sim import run_sim_bench

    if a.replay_steps < 1:
        raise UserError("--replay-steps must be >= 1")
    print(run_sim_bench(a.out_dir, a.replay_steps, a.trace, a.profile, not a.no_calibration, not a.no_replay))
    return 0


def engine(a) -> int:
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    import torch

    from tailrl.bench.engine import run_engine_bench

    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise UserError("--device cuda: this machine has no CUDA device")
    repeat = a.repeat or (2 if cuda else 1)
    if min(a.batches) < 1 or a.warmup < 0 or repeat < 1 or a.tail_batch < 1 or a.tail_max_len < 8 or a.sampling_batch < 1:
        raise UserError("need batch sizes >= 1, --warmup >= 0, --repeat >= 1, --tail-batch >= 1, --tail-max-len >= 8")
    if a.threads:
        torch.set_num_threads(a.threads)
    overrides = _engine_overrides(a.engine)
    fixed = sorted({"max_batch_size", "kv_cache_tokens", "block_size", "max_model_len", "max_prefill_tokens"} & set(overrides))
    if fixed:
        raise UserError(f"--engine {', '.join(fixed)}: set by the benchmark (use --batches / --context / --tail-batch)")
    if a.samplers and "sampler" in overrides:
        raise UserError("--samplers and --engine sampler=...: give one of them")
    run_engine_bench(a.out_dir, a.shapes or (["smollm2-135m", "qwen2.5-0.5b", "qwen2.5-1.5b"] if cuda else ["smollm2-135m"]),
                     a.batches, a.context or (512 if cuda else 128), a.steps or (20 if cuda else 5), a.warmup, device,
                     a.dtype or ("bfloat16" if cuda else "float32"), not a.no_tail, a.tail_batch, a.tail_max_len,
                     a.tail_median, a.tail_shape or ("smollm2-135m" if cuda else "small"), repeat, overrides,
                     sampling_batch=a.sampling_batch, samplers=a.samplers, model_path=a.model)
    print((Path(a.out_dir) / "summary.md").read_text())
    return 0


def rewards(a) -> int:
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    from tailrl.bench.rewards import run_rewards_bench

    if a.batch < 1 or a.workers < 1 or a.group < 1 or a.batch % a.group or a.max_new_tokens < 8:
        raise UserError("need --batch a multiple of --group >= 1, --workers >= 1, --max-new-tokens >= 8")
    run_rewards_bench(a.out_dir, batch=a.batch, workers=a.workers, group=a.group, max_new_tokens=a.max_new_tokens)
    print((Path(a.out_dir) / "summary.md").read_text())
    return 0


def _engine_overrides(pairs: list[str]) -> dict:
    """--engine KEY=VALUE options, checked (keys and types) against EngineConfig: the ones that differ from
    the defaults."""
    # lazy: the CLI imports a command's stack only when the command runs
    from tailrl.config import EngineConfig, load_config, to_dict

    cfg = load_config(None, pairs, cls=EngineConfig)
    base = to_dict(EngineConfig())
    return {k: v for k, v in to_dict(cfg).items() if v != base[k]}


def exactness(a) -> int:
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    import torch

    from tailrl.bench.exactness import run_exactness_bench

    if a.device and a.device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError("--device cuda: this machine has no CUDA device")
    if a.sequences < 1 or a.new_tokens < 1 or min(a.batches) < 1 or a.tp < 2:
        raise UserError("need --sequences >= 1, --new-tokens >= 1, batch sizes >= 1 and --tp >= 2 (--no-tp: no TP run)")
    if a.threads:
        torch.set_num_threads(a.threads)
    overrides = _engine_overrides(a.engine)
    if "exact" in overrides or "max_batch_size" in overrides:
        raise UserError("--engine exact / max_batch_size: use --exact and --batches")
    if a.prompts and not a.model:
        raise UserError("--prompts needs --model (random-weight shapes decode random prompts)")
    run_exactness_bench(a.out_dir, a.sequences, a.new_tokens, a.shape, a.device, a.dtype, a.exact, a.batches,
                        () if a.no_spec else tuple(a.spec_methods), 0 if a.no_tp else a.tp, overrides, a.seed, model=a.model,
                        prompts=a.prompts, temperature=a.temperature, preempt=a.preempt, draft_layers=a.draft_layers,
                        resume=not a.fresh)
    print((Path(a.out_dir) / "summary.md").read_text())
    return 0
