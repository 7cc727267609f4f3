"""`tailrl demo`: the main job on the embedded default.

Until the RL demo lands (trainer + embedded long-tailed task), the strongest job that exists runs:
group rollouts (G samples per prompt, as GRPO would draw them) of SmolLM2-135M-Instruct — a real
pretrained model shipped inside a PyPI wheel, no downloads — on seeded arithmetic word problems,
with the long-tail telemetry and timeline. Writes a run directory.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

from tailrl.config import Config, EngineConfig, ModelConfig, RolloutConfig, dump_config
from tailrl.errors import UserError


def arithmetic_prompts(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b, c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(2, 9)
        q = f"Tom has {a} apples. He buys {b} more and then gives away {c}. How many apples does he have now?"
        rows.append({"messages": [{"role": "user", "content": q}], "answer": a + b - c})
    return rows


def run_demo(model_ref: str, out_dir: str | None, n_prompts: int, n: int, max_new_tokens: int) -> int:
    from rich.console import Console
    from rich.table import Table

    from tailrl.data.prompts import PromptRow, encode_row
    from tailrl.engine import SamplingParams
    from tailrl.engine.timeline import plot_timeline
    from tailrl.generate import print_summary, run_generate
    from tailrl.model import load

    console = Console(stderr=True)
    run = Path(out_dir or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}")
    run.mkdir(parents=True, exist_ok=True)
    cfg = Config(model=ModelConfig(path=model_ref), engine=EngineConfig(kv_cache_tokens=16384),
                 rollout=RolloutConfig(group_size=n, max_new_tokens=max_new_tokens, temperature=0.8, seed=0))
    dump_config(cfg, run / "config.yaml")
    console.print("[bold]resolved config[/bold]\n" + (run / "config.yaml").read_text().rstrip())
    console.print(f"[bold]tailrl demo[/bold]: {n_prompts} prompts x G={n} from {model_ref} -> {run}")
    t = time.perf_counter()
    try:
        model, tok = load(model_ref)
    except UserError as e:
        raise UserError(f"{e} (run `make demo`, which installs it)") from None
    console.print(f"loaded in {time.perf_counter() - t:.1f}s: {model.args.architecture}, "
                  f"{sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters")
    rows_json = arithmetic_prompts(n_prompts)
    rows = [PromptRow(i, i + 1, *encode_row(r, tok)) for i, r in enumerate(rows_json)]
    r = cfg.rollout
    params = SamplingParams(temperature=r.temperature, max_new_tokens=r.max_new_tokens, seed=r.seed)
    result = run_generate(model, tok, rows, params, n, cfg.engine, run / "completions.jsonl",
                          progress=sys.stderr.isatty())
    correct = 0
    table = Table("prompt", "sample", "tokens", "finish", "correct", "completion")
    for ro in result.rollouts:
        text = tok.decode(ro.token_ids, skip_special_tokens=True)
        ok = str(rows_json[ro.uid]["answer"]) in text
        correct += ok
        if ro.sample_index == 0:
            table.add_row(str(ro.uid), str(ro.sample_index), str(ro.num_tokens), ro.finish_reason, "yes" if ok else "no",
                          text.replace("\n", " ")[:70])
    console.print(table)
    print_summary(result)
    summary = result.trace.summary() | {"accuracy": correct / max(1, len(result.rollouts))}
    (run / "summary.json").write_text(json.dumps(summary, indent=2))
    plot_timeline(result.trace, run / "timeline.png", title=f"{model_ref}: {n_prompts} prompts x G={n}")
    console.print(f"accuracy (answer appears in completion): {summary['accuracy']:.0%} | "
                  f"run directory: {run} (config.yaml, completions.jsonl, summary.json, timeline.png)")
    return 0
