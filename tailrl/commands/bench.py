"""`tailrl bench ...`: side-by-side benchmarks (ratios measured in one run). Each subcommand checks its
arguments in one line and hands over to tailrl/bench/<name>.py."""

from __future__ import annotations

from tailrl.errors import UserError


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
    q = bs.add_parser("spec", help="speculation off vs on, same engine and requests (demo G=16, SmolLM2, large batch)")
    q.set_defaults(run=spec)
    q.add_argument("--workloads", nargs="+", default=["demo", "large", "smollm2", "train"],
                   choices=["demo", "large", "smollm2", "train"])
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
    q.add_argument("--systems", nargs="+", default=["trl", "off", "full"], choices=["trl", "off", "full"])
    q.add_argument("--task", default="demo", choices=["demo", "smollm2"],
                   help="demo: the demo policy on chained arithmetic; smollm2: SmolLM2-135M-Instruct on easy sums")
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

    run_spec_bench(a.out_dir, a.workloads, a.spec, a.threads, a.repeats, a.train_steps)
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
    run_e2e_bench(a.out_dir, a.steps, a.eval_every, a.systems, a.task)
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
