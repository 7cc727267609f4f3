"""Workloads for profiling and benchmarking speculation on real prompts: prompt texts ('demo' or a JSONL
file), requests(b) for `profile_decoupled`, and a draft model's keyed acceptance on the target's own
rollouts (`tailrl profile spec`, `tailrl bench spec --mode`)."""

from __future__ import annotations

import json
from pathlib import Path

from tailrl.config import EngineConfig
from tailrl.demo.run import DEMO_TASK
from tailrl.engine import Engine, Request, SamplingParams
from tailrl.errors import UserError
from tailrl.model import load
from tailrl.speculative.profiling.acceptance import keyed_acceptance


def prompt_texts(prompts: str, n: int, split: str = "test") -> list[str]:
    """n prompt texts: 'demo' (the demo task's split) or a JSONL file with a 'prompt' field."""
    if prompts == "demo":
        return [r["prompt"] for r in DEMO_TASK.rows(n, split, seed=0)]
    try:
        return [json.loads(line)["prompt"] for line in Path(prompts).read_text().splitlines() if line.strip()][:n]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"cannot read prompts from {prompts}: {e} (JSONL with a 'prompt' field, or 'demo')") from None


def workload(tok, texts: list[str], group: int, max_new: int, temperature: float = 1.0, seed: int = 0):
    """requests(b) for profile_decoupled: b // group prompts (cycling through texts) x group samples."""
    params = SamplingParams(temperature=temperature, max_new_tokens=max_new, seed=seed)

    def requests(b: int) -> list:
        g = min(group, b)
        return [Request(tok(texts[i % len(texts)])["input_ids"], uid=i, n=g, params=params) for i in range(b // g)]
    return requests


def measure_acceptance(model, tok, draft, texts: list[str], max_new: int, temperature: float, seed: int = 0) -> float:
    """Per-token acceptance of the draft on the target's own rollouts of the texts: the share of generated
    positions where the draft's keyed sample equals the target's token (profiling/acceptance.py)."""
    if isinstance(draft, (str, Path)):
        draft = load(str(draft), tokenizer=False)[0]
    params = SamplingParams(temperature=temperature, max_new_tokens=max_new, seed=seed)
    reqs = [Request(tok(t)["input_ids"], uid=i, params=params) for i, t in enumerate(texts)]
    outs, _ = Engine(model, EngineConfig(kv_cache_tokens=max(65536, 2 * len(reqs) * (max_new + 64)))).generate(reqs)
    outs = [o for o in outs if o.finish_reason != "error" and o.token_ids]
    return keyed_acceptance(draft.eval(), outs, seed, temperature, pad=0)
