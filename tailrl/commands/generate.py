"""`tailrl generate`: completions for a JSONL prompts file, in one process or over a TP x DP layout
(ranks spawned here, optionally switching layout mid-rollout)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tailrl.errors import UserError

if TYPE_CHECKING:  # type names only: the CLI keeps torch out of `tailrl --help`
    from tailrl.config import EngineConfig
    from tailrl.engine import Rollout, RolloutTrace, SamplingParams


def add(sub) -> None:
    p = sub.add_parser("generate", help="sample completions for a JSONL prompts file")
    p.set_defaults(run=run)
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
    p.add_argument("--device", default="auto", help="auto (CUDA when available) | cpu | cuda | cuda:N")
    p.add_argument("--engine", action="append", default=[], metavar="KEY=VALUE",
                   help="engine option, e.g. --engine max_batch_size=64 --engine spec.k_max=4")
    p.add_argument("--spec", default=None, metavar="none|ngram|history|draft:PATH|auto",
                   help="speculative decoding (exact: a kept token is the keyed sample of the policy's logits)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (ranks spawned on this machine: tp x dp)")
    p.add_argument("--dp", type=int, default=1, help="data-parallel replicas")
    p.add_argument("--switch", default="off", metavar="off|auto|tpN@STEP[:migrate|recompute]",
                   help="change the TP/DP layout mid-rollout: PAT's controller (auto) or forced (at the first "
                        "controller meeting, every 8 engine steps, at or after STEP)")
    p.add_argument("--tp-profile", help="latency profile from `tailrl profile tp` (for --switch auto)")
    p.add_argument("--switch-kv", default="auto", choices=["auto", "migrate", "recompute"],
                   help="how --switch auto moves unfinished requests (auto: the cost model picks)")


def run(a) -> int:
    # lazy: the CLI imports a command's stack (torch, the model) only when the command runs
    import torch

    from tailrl.config import EngineConfig, load_config
    from tailrl.data.prompts import read_prompts
    from tailrl.engine import SamplingParams
    from tailrl.model import load

    if a.n < 1:
        raise UserError(f"--n must be >= 1, got {a.n}")
    if a.temperature < 0 or not 0 < a.top_p <= 1 or a.max_new_tokens < 1:
        raise UserError("need --temperature >= 0, 0 < --top-p <= 1, --max-new-tokens >= 1")
    engine_cfg = load_config(None, a.engine + ([f"spec.method={a.spec}"] if a.spec else []), cls=EngineConfig)
    torch.manual_seed(a.seed)
    model, tok = load(a.model, dtype=a.dtype, device=a.device)
    rows = read_prompts(a.prompts, tok)
    params = SamplingParams(temperature=a.temperature, top_p=a.top_p, top_k=a.top_k, max_new_tokens=a.max_new_tokens,
                            seed=a.seed, stop=tuple(a.stop), ignore_eos=a.ignore_eos)
    if a.tp * a.dp > 1 or a.switch != "off":
        result = _run_parallel(a, model, tok, rows, params, engine_cfg)
    else:
        result = run_generate(model, tok, rows, params, a.n, engine_cfg, a.out, progress=sys.stderr.isatty())
    print_summary(result)
    if a.trace:
        Path(a.trace).write_text(json.dumps({"step": 0, "rounds": [result.trace.to_json()]}) + "\n")
    if a.timeline:
        from tailrl.outputs.timeline import plot_timeline  # lazy: matplotlib only when a plot is asked for

        plot_timeline(result.trace, a.timeline, title=f"{a.model}: {len(rows)} prompts x {a.n}")
        print(f"timeline: {a.timeline}", file=sys.stderr)
    return 0


def _run_parallel(a, model, tok, rows, params, engine_cfg):
    # lazy: the CLI imports a command's stack only when the command runs
    from tailrl.engine import Request
    from tailrl.outputs.completions import write_rollouts
    from tailrl.parallel.generate import SwitchParams, check_layout, run_parallel_generate
    from tailrl.speculative import eos_ids_of

    switch = SwitchParams.parse(a.switch, a.switch_kv)
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


@dataclass
class GenerateResult:
    rollouts: list[Rollout]
    trace: RolloutTrace


def run_generate(model, tokenizer, rows, params: SamplingParams, n: int, engine_cfg: EngineConfig,
                 out_path: str | Path | None, progress: bool = True) -> GenerateResult:
    """rows: PromptRow list. Writes one JSON line per completion (prompt_index order) to out_path or stdout."""
    # lazy: the CLI imports a command's stack only when the command runs
    from tailrl.engine import Request
    from tailrl.outputs.completions import write_rollouts
    from tailrl.speculative import build_engine

    engine = build_engine(model, tokenizer, engine_cfg)
    requests = [Request(r.token_ids, uid=r.index, n=n, params=params, error=r.error) for r in rows]
    total = len(requests) * n
    if progress:
        # lazy: rich is only needed for an interactive progress bar
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("generating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task("gen", total=total)
            rollouts, trace = engine.generate(requests, on_finish=lambda r: bar.advance(task))
    else:
        rollouts, trace = engine.generate(requests)
    write_rollouts(rollouts, tokenizer, params, out_path)
    return GenerateResult(rollouts, trace)


def print_summary(result: GenerateResult, file=None) -> None:
    file = file or sys.stderr
    s = result.trace.summary()
    errors = [r for r in result.rollouts if r.finish_reason == "error"]
    for r in {r.uid: r for r in errors}.values():
        print(f"prompt {r.uid}: error: {r.error}", file=file)
    print(f"rollout {s['timing_s/gen']:.2f}s | {len(result.rollouts) - len(errors)} completions, "
          f"{result.trace.decode_tokens} tokens, {s['rollout/tokens_per_s']:.1f} tokens/s | "
          f"straggler rate {s['rollout/straggler_rate']:.2f} | tail efficiency {s['rollout/tail_efficiency']:.2f} | "
          f"errors {len(errors)}", file=file)
    sp = result.trace.spec
    if sp:
        shares = ", ".join(f"{k.rsplit('/', 1)[1]} {v:.0%}" for k, v in sp.items() if k.startswith("spec/drafter_share/"))
        print(f"speculation: acceptance {sp['spec/acceptance_rate']:.2f} | mean accepted {sp['spec/mean_accepted_len']:.2f} "
              f"tokens/verify | best-of-N requests {sp['spec/bon_requests']:.0f} | accepted tokens by drafter: {shares}",
              file=file)
