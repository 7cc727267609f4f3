"""`tailrl profile ...`: offline profiles — the draft ladder and the TGS model's costs (speculation), the engine's latency table
(`tailrl simulate`), and PAT's per-TP-degree table (`tailrl generate --switch auto`)."""

from __future__ import annotations

import json
from pathlib import Path

from tailrl.errors import UserError


def add(sub) -> None:
    p = sub.add_parser("profile", help="offline profiles used by the engine")
    ps = p.add_subparsers(dest="profile", required=True)
    q = ps.add_parser("ladder", help="draft ladder: speed-up of each drafter vs acceptance rate (random accept/reject)")
    q.set_defaults(run=ladder)
    q.add_argument("--model", required=True, help="target model (HF folder or known name; random weights are fine)")
    q.add_argument("--draft", default="", help="draft model folder (adds the draft-model rung)")
    q.add_argument("--k-max", type=int, default=8)
    q.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    q.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    q.add_argument("--out", default="ladder.json", help="ladder JSON (use with engine.spec.coupled.ladder=PATH)")
    q = ps.add_parser("spec", help="SpecActor's TGS profile: draft-step and verify costs per core count, draft acceptance")
    q.set_defaults(run=spec)
    q.add_argument("--model", required=True, help="target model (HF folder or known name)")
    q.add_argument("--draft", required=True, help="draft model folder (same tokenizer)")
    q.add_argument("--threads", type=int, nargs="+", default=None,
                   help="core counts to profile (default: 1 and every core of this process)")
    q.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64, 128])
    q.add_argument("--windows", type=int, nargs="+", default=[1, 2, 4, 6], help="verify tokens per request")
    q.add_argument("--reps", type=int, default=3)
    q.add_argument("--draft-cores", type=int, default=1, help="decoupled split profiled in the runtime itself")
    q.add_argument("--verify-cores", type=int, default=0, help="(0: the remaining cores; both 0: no decoupled profile)")
    q.add_argument("--prompts", default="", help="'demo' (the demo task) or a JSONL file with a 'prompt' field: the draft's per-token "
                   "acceptance on the target's rollouts of them, and the decoupled runtime profiled on them")
    q.add_argument("--samples", type=int, default=256, help="prompts read (acceptance: one rollout each)")
    q.add_argument("--group", type=int, default=16, help="samples per prompt in the decoupled runtime's profile")
    q.add_argument("--max-new-tokens", type=int, default=160)
    q.add_argument("--temperature", type=float, default=1.0)
    q.add_argument("--out", default="spec_profile.json", help="profile JSON (use with engine.spec.decoupled.profile=PATH)")
    q = ps.add_parser("draft", help="distil a draft model from the policy's own rollouts: its first layers, its most "
                      "frequent tokens (for --spec draft:FOLDER)")
    q.set_defaults(run=draft)
    q.add_argument("--model", required=True, help="the policy (HF folder or known name)")
    q.add_argument("--prompts", required=True, help="questions JSONL ('question' or 'prompt' field), through the chat template")
    q.add_argument("--samples", type=int, default=256, help="questions rolled out for distillation")
    q.add_argument("--heldout", type=int, default=32, help="further questions for the keyed acceptance")
    q.add_argument("--layers", type=int, nargs="+", default=[0, 1], help="the policy's layers the draft starts from")
    q.add_argument("--vocab", type=int, default=8192, help="tokens in the draft's head (0: all)")
    q.add_argument("--temperature", type=float, default=0.7)
    q.add_argument("--max-new-tokens", type=int, default=384)
    q.add_argument("--epochs", type=int, default=3)
    q.add_argument("--out", default="drafts", help="cache folder (the draft is a subfolder named by its settings)")
    q = ps.add_parser("engine", help="decode / prefill latency of the engine on this machine (for tailrl simulate)")
    q.set_defaults(run=engine)
    q.add_argument("--model", required=True, help="HF folder, .gguf file, or a known name")
    _grid_args(q, [1, 4, 16, 64, 128, 256], [16, 64, 192], 40)
    q.add_argument("--out", default="engine_profile.json", help="profile JSON (use with latency.profile=PATH)")
    q = ps.add_parser("tp", help="PAT's profiler: decode / prefill latency per TP degree, bandwidth, group creation")
    q.set_defaults(run=tp)
    q.add_argument("--model", required=True, help="HF folder, .gguf file, or a known name")
    q.add_argument("--world", type=int, default=2, help="ranks spawned on this machine")
    q.add_argument("--tps", type=int, nargs="+", default=None, help="TP degrees (default: every divisor of --world)")
    _grid_args(q, [1, 4, 16, 64], [16, 128, 512], 24)
    q.add_argument("--out", default="tp_profile.json", help="profile JSON (use with generate --tp-profile PATH)")


def _grid_args(q, batches: list[int], contexts: list[int], steps: int) -> None:
    q.add_argument("--engine", action="append", default=[], metavar="KEY=VALUE", help="engine option (as in generate)")
    q.add_argument("--batches", type=int, nargs="+", default=batches)
    q.add_argument("--contexts", type=int, nargs="+", default=contexts, help="prompt tokens per sequence")
    q.add_argument("--steps", type=int, default=steps, help="decode steps timed per (batch, context)")


def _grid(a):
    """(engine config, sorted batches, sorted contexts) of a latency-grid command, checked."""
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    from tailrl.config import EngineConfig, load_config

    if min(a.batches) < 1 or min(a.contexts) < 1 or a.steps < 9:
        raise UserError("need batch sizes >= 1, contexts >= 1 and --steps >= 9")
    return load_config(None, a.engine, cls=EngineConfig), tuple(sorted(a.batches)), tuple(sorted(a.contexts))


def draft(a) -> int:
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    from tailrl.bench.exactness_prompts import chat_ids, read_questions
    from tailrl.model import load
    from tailrl.speculative.distill import DistillParams, distill_draft

    if a.samples < 1 or a.heldout < 1 or a.epochs < 1 or a.vocab < 0 or a.max_new_tokens < 1:
        raise UserError("need --samples, --heldout, --epochs, --max-new-tokens >= 1 and --vocab >= 0")
    model, tok = load(a.model)
    if max(a.layers) >= model.args.num_layers or min(a.layers) < 0:
        raise UserError(f"--layers {a.layers}: the model has layers 0..{model.args.num_layers - 1}")
    ids = [chat_ids(tok, q) for q in read_questions(a.prompts, a.samples + a.heldout)]
    params = DistillParams(layers=tuple(a.layers), vocab=a.vocab, temperature=a.temperature,
                           max_new_tokens=a.max_new_tokens, epochs=a.epochs)
    folder = distill_draft(model, tok, str(a.model), ids[:a.samples], ids[a.samples:], params, Path(a.out),
                           progress=lambda s, n, kl: print(f"  step {s}/{n}: KL {kl:.3f}") if s % 10 == 0 else None)
    print(folder)
    return 0


def ladder(a) -> int:
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    import torch

    from tailrl.config import EngineConfig, SpecConfig
    from tailrl.model import load
    from tailrl.speculative import build_engine
    from tailrl.speculative.coupled.ladder import ALPHAS
    from tailrl.speculative.profiling.ladder import profile_ladder

    if a.k_max < 1 or min(a.batches) < 1:
        raise UserError("need --k-max >= 1 and batch sizes >= 1")
    if a.threads:
        torch.set_num_threads(a.threads)
    model, _ = load(a.model, tokenizer=False)
    spec = SpecConfig(method="auto", draft_model=a.draft, k_max=a.k_max)
    eng = build_engine(model, None, EngineConfig(kv_cache_tokens=max(a.batches) * (80 + a.k_max) * 2, spec=spec))
    profile_ladder(eng, tuple(sorted(a.batches)), a.k_max, alphas=ALPHAS).save(a.out)
    print(f"ladder: {a.out}")
    return 0


def spec(a) -> int:
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    import os

    from tailrl.bench.spec_workload import measure_acceptance, prompt_texts, workload
    from tailrl.model import load
    from tailrl.speculative.decoupled.tgs import save_tgs_profile
    from tailrl.speculative.profiling.tgs import profile_tgs

    cores = len(os.sched_getaffinity(0))
    threads = sorted(set(a.threads or {1, cores}))
    if min(threads) < 1 or min(a.batches) < 1 or min(a.windows) < 1 or a.reps < 1:
        raise UserError("need thread counts, batch sizes, windows and --reps >= 1")
    split = None
    if a.draft_cores:
        split = (a.draft_cores, a.verify_cores or cores - a.draft_cores)
        if split[1] < 1:
            raise UserError(f"--draft-cores {a.draft_cores} leaves no core to verify on ({cores} available)")
    model, tok = load(a.model)
    texts = prompt_texts(a.prompts, a.samples) if a.prompts else None
    prof = profile_tgs(model, a.draft, threads, tuple(sorted(a.batches)), tuple(sorted(a.windows)), a.reps,
                       progress=lambda m: print(m, flush=True), decoupled=split,
                       requests=workload(tok, texts, a.group, a.max_new_tokens, a.temperature) if texts else None)
    if texts:
        prof["acceptance"] = measure_acceptance(model, tok, a.draft, texts, a.max_new_tokens, a.temperature)
        print(f"draft acceptance per token: {prof['acceptance']:.3f}")
    save_tgs_profile(prof, a.out, model=a.model, draft=a.draft, threads=threads)
    for g in threads:
        d, v = prof["drafts"][g], prof["verifies"][g]
        print(f"{g} core(s): D(b) = {d.alpha * 1e3:.3f} ms + b * {d.slope * 1e3:.4f} ms | V(b, n) = "
              f"{v.beta * 1e3:.3f} ms + b * {v.per_request * 1e3:.4f} ms + n * {v.per_token * 1e3:.4f} ms")
    print(f"TGS profile: {a.out}")
    return 0


def engine(a) -> int:
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    from tailrl.model import load
    from tailrl.parallel.latency_profile import profile_engine, save_profile
    from tailrl.speculative import build_engine

    cfg, batches, contexts = _grid(a)
    model, _ = load(a.model, tokenizer=False)
    prof = profile_engine(build_engine(model, None, cfg), model.args.vocab_size, batches, contexts, a.steps,
                          progress=lambda b, c: print(f"  batch {b:4d}  prompt {c:4d} tokens", flush=True))
    save_profile(prof, a.out)
    print(f"engine profile: {a.out}")
    return 0


def tp(a) -> int:
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    from tailrl.model import load
    from tailrl.parallel.profile import profile_tp

    tps = a.tps or [t for t in range(1, a.world + 1) if a.world % t == 0]
    if a.world < 1 or any(t < 1 or a.world % t for t in tps):
        raise UserError(f"every --tps degree must divide --world {a.world}; got {tps}")
    cfg, batches, contexts = _grid(a)
    args = load(a.model, tokenizer=False)[0].args  # resolves the model (and fails in one line) before spawning
    bad = [t for t in tps if args.num_heads % t or args.num_kv_heads % t]
    if bad:
        raise UserError(f"TP={bad[0]} does not divide the model's heads ({args.num_heads} query, {args.num_kv_heads} KV)")
    prof = profile_tp(a.model, a.world, tps, cfg, batches, contexts, a.steps)
    Path(a.out).write_text(json.dumps(prof, indent=1))
    print(f"TP profile ({', '.join(f'TP{t}' for t in tps)} on {a.world} ranks; all-gather "
          f"{prof['bandwidth'] / 1e9:.2f} GB/s per rank): {a.out}")
    return 0
