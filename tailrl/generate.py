"""`tailrl generate`: prompts file -> engine -> completions JSONL + run summary (+ timeline plot)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from tailrl.config import EngineConfig
from tailrl.engine import Engine, Request, Rollout, RolloutTrace, SamplingParams
from tailrl.engine.stops import trim_at_stop


def eos_ids_of(model, tokenizer) -> list[int]:
    ids = set(model.args.eos_token_ids)
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return sorted(ids)


def build_engine(model, tokenizer, cfg: EngineConfig, tau: float = 1.25) -> Engine:
    detok = (lambda ids: tokenizer.decode(ids, skip_special_tokens=True)) if tokenizer is not None else None
    return Engine(model, cfg, eos_ids=eos_ids_of(model, tokenizer), detokenize=detok, tau=tau)


@dataclass
class GenerateResult:
    rollouts: list[Rollout]
    trace: RolloutTrace


def run_generate(model, tokenizer, rows, params: SamplingParams, n: int, engine_cfg: EngineConfig,
                 out_path: str | Path | None, progress: bool = True) -> GenerateResult:
    """rows: PromptRow list. Writes one JSON line per completion (prompt_index order) to out_path or stdout."""
    engine = build_engine(model, tokenizer, engine_cfg)
    requests = [Request(r.token_ids, uid=r.index, n=n, params=params, error=r.error) for r in rows]
    total = len(requests) * n
    if progress:
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


def write_rollouts(rollouts: list[Rollout], tokenizer, params: SamplingParams, out_path: str | Path | None) -> None:
    """One JSON line per completion (the order given) to out_path or stdout."""
    out = open(out_path, "w", encoding="utf-8") if out_path else sys.stdout
    try:
        for r in rollouts:
            text = tokenizer.decode(r.token_ids, skip_special_tokens=True) if tokenizer is not None else ""
            if params.stop and r.finish_reason == "stop":
                text = trim_at_stop(text, params.stop)
            row = {"prompt_index": r.uid, "sample_index": r.sample_index, "token_ids": r.token_ids, "text": text,
                   "finish_reason": r.finish_reason, "num_tokens": r.num_tokens}
            if r.error:
                row["error"] = r.error
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    finally:
        if out_path:
            out.close()


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
