"""Decode cost of engine.exact=canonical against fast, side by side in one process: the same requests rolled
out by both modes in turn (best of --repeats each, after a warm-up rollout), per batch size; the median
decode step and the whole rollout. Identity is `tailrl bench exactness --exact canonical`'s business.

    python benchmarks/exact_mode_cost.py --batches 64 4 --new-tokens 32

SmolLM2-135M-Instruct (real weights, fp32, CPU) by default; tailrl's generated GSM8K-style questions
through the chat template, 8 samples each, temperature 1.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tailrl.bench.exactness_prompts import chat_requests, word_problems
from tailrl.config import EngineConfig
from tailrl.model import load
from tailrl.speculative import build_engine

MODES = ("fast", "canonical")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--batches", type=int, nargs="+", default=[64, 4])
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model, tok = load(a.model, dtype=torch.float32, device="cpu")
    print(f"{a.model}, fp32, {a.threads} threads, {a.new_tokens} new tokens, best of {a.repeats}")
    print("| batch | mode | rollout s | median decode step ms | × fast (step) |\n|---|---|---|---|---|")
    for b in a.batches:
        reqs = chat_requests(tok, word_problems(max(1, b // 8), 0), b, min(8, b), a.new_tokens, 1.0, 0)
        engines = {m: build_engine(model, tok, EngineConfig(max_batch_size=b, kv_cache_tokens=32768, exact=m))
                   for m in MODES}
        best = {m: (float("inf"), 0.0) for m in MODES}
        with torch.inference_mode():
            for m in MODES:
                engines[m].generate(reqs)  # warm-up: calibration, first-call costs
            for _ in range(a.repeats):
                for m in MODES:  # alternating, so drift hits both
                    t = time.perf_counter()
                    _, trace = engines[m].generate(reqs)
                    wall = time.perf_counter() - t
                    step = statistics.median(s.t1 - s.t0 for s in trace.steps if s.kind == "decode")
                    best[m] = min(best[m], (wall, step))
        for m in MODES:
            engines[m].close()
            wall, step = best[m]
            print(f"| {b} | {m} | {wall:.2f} | {step * 1000:.1f} | {step / best['fast'][1]:.2f} |")


if __name__ == "__main__":
    main()
