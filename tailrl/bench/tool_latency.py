"""`tailrl bench tools`: does tool latency overlap decoding? The tools demo's warm-started policy (it calls the
calculator on about half of the problems whose prompt lists it) rolls out the same requests twice, with the
calculator answering at once and after a sleep of `--sleep` seconds per call, in one run.

    added = wall(sleep) - wall(no sleep);  serial = calls x sleep;  overlap ratio = added / serial

A synchronous loop that runs each call in the decoding thread (one call at a time) pays `serial`; a ratio
well below 1 means the sleeps ran on the tool workers while the other sequences decoded. The two runs must
also give the same tokens: latency never changes a rollout (the keyed-sampling contract).

The sleeping tool is this module's `calculator` (the built-in one after a sleep read from the environment
variable TAILRL_BENCH_TOOL_SLEEP_S, which the worker processes inherit): same name and schema, so the model
calls it as it learned to.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

SLEEP_ENV = "TAILRL_BENCH_TOOL_SLEEP_S"


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression (+, -, *, /, parentheses) and return its value.

    Args:
        expression: The expression to evaluate, e.g. "7+5-3".

    Returns:
        The value, or an error message.
    """
    # lazy: runs in a tool worker, which imports only what its tools need
    from tailrl.tools.builtin import calculator as exact

    time.sleep(float(os.environ.get(SLEEP_ENV, "0")))
    return exact(expression)


def rollout_once(model, tok, prompts: list[list[int]], samples: int, sleep_s: float, workers: int,
                 max_new_tokens: int, seed: int = 0) -> dict:
    """One multi-turn rollout of every prompt with the sleeping calculator; wall time, calls, rollouts."""
    # lazy: the tool workers import this module for `calculator`; torch and the engine stay out of them
    from tailrl.config import EngineConfig
    from tailrl.engine import Request, SamplingParams
    from tailrl.speculative import build_engine
    from tailrl.tools import ToolExecutor, ToolTurns

    params = SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens, seed=seed)
    requests = [Request(p, uid=i, n=samples, params=params) for i, p in enumerate(prompts)]
    os.environ[SLEEP_ENV] = repr(float(sleep_s))  # the workers inherit it (a replaced worker too): set throughout
    try:
        with ToolExecutor(tools=[f"{__name__}:calculator"], workers=workers, timeout_s=30.0 + 10 * sleep_s) as ex:
            engine = build_engine(model, tok, EngineConfig(kv_cache_tokens=65536, block_size=16),
                                  turns=ToolTurns(ex, tok, max_turns=2))
            engine.generate(requests[:1])  # warm-up (first forward, worker imports) outside the timing
            ex.metrics()
            t0 = time.perf_counter()
            rollouts, trace = engine.generate(requests)
            wall = time.perf_counter() - t0
            counts = ex.metrics()
    finally:
        del os.environ[SLEEP_ENV]
    return {"wall_s": wall, "calls": int(counts["tools/calls"]), "errors": int(counts["tools/errors"]),
            "parked_frac": trace.parked_frac(), "turns_mean": sum(r.turns + 1 for r in rollouts) / len(rollouts),
            "tokens": {(r.uid, r.sample_index): r.token_ids for r in rollouts},
            "tool_latency_mean_s": counts["tools/latency_mean_s"]}


def run_tools_bench(prompts: int, samples: int, sleep_s: float, workers: int, max_new_tokens: int,
                    out: str | None, threads: int = 0) -> dict:
    # lazy: the tool workers import this module for `calculator`; torch and the model stay out of them
    import torch

    from tailrl.demo.run import DEMO_TASK
    from tailrl.demo.tools_data import prompt_ids, tool_schemas
    from tailrl.demo.tools_run import tools_policy
    from tailrl.model import load

    if threads:
        torch.set_num_threads(threads)
    model, tok = load(str(tools_policy()), dtype="float32", device="cpu")
    schemas = tool_schemas()
    rows = DEMO_TASK.rows(prompts, "test", seed=2)
    ids = [prompt_ids(tok, r["prompt"], schemas) for r in rows]
    base = rollout_once(model, tok, ids, samples, 0.0, workers, max_new_tokens)
    slow = rollout_once(model, tok, ids, samples, sleep_s, workers, max_new_tokens)
    added, serial = slow["wall_s"] - base["wall_s"], slow["calls"] * sleep_s
    same = sum(base["tokens"][k] == slow["tokens"][k] for k in base["tokens"])
    result = {
        "prompts": prompts, "samples": samples, "sleep_s": sleep_s, "workers": workers,
        "max_new_tokens": max_new_tokens, "threads": torch.get_num_threads(),
        "wall_s_no_sleep": base["wall_s"], "wall_s_sleep": slow["wall_s"], "calls": slow["calls"],
        "calls_no_sleep": base["calls"], "tool_errors": slow["errors"], "added_s": added,
        "serial_s": serial, "overlap_ratio": added / serial if serial > 0 else None,
        "parked_frac_sleep": slow["parked_frac"], "turns_mean": slow["turns_mean"],
        "tool_latency_mean_s": slow["tool_latency_mean_s"],
        "identical_rollouts": f"{same}/{len(base['tokens'])}",
    }
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1))
    return result
