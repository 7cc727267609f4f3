"""Token identity of real-model rollouts under each keyed sampler, side by side: the same requests with all
sequences in one batch (the reference), in batches of --small-batch, and with speculation (history + n-gram,
gate off), per sampler. Which (question, sample) diverge and at which token is printed.

    python benchmarks/identity_by_sampler.py --samplers blocked gumbel --questions 2 --samples 8 --new-tokens 256

SmolLM2-135M-Instruct (real weights) by default; the questions are tailrl's generated GSM8K-style word
problems through the chat template (or --prompts FILE.jsonl, e.g. GSM8K's test split); temperature 1.
`tailrl bench exactness --model ...` is the full comparison (alone, batches, every speculation method,
preemption, the trainer's logprobs) for one sampler; this is the quick one across samplers.
"""

from __future__ import annotations

import argparse
import time

import torch

from tailrl.bench.exactness_prompts import chat_requests, read_questions, word_problems
from tailrl.config import EngineConfig, SpecConfig
from tailrl.model import load
from tailrl.speculative import build_engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--samplers", nargs="+", default=["blocked", "gumbel"])
    ap.add_argument("--questions", type=int, default=2)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--small-batch", type=int, default=4)
    ap.add_argument("--prompts", default=None, help="JSONL of questions (default: generated word problems)")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model, tok = load(a.model, dtype="float32", device="cpu")
    questions = read_questions(a.prompts, a.questions) if a.prompts else word_problems(a.questions, 0)
    n = a.questions * a.samples
    reqs = chat_requests(tok, questions, n, a.samples, a.new_tokens, a.temperature, 0)
    print(f"{a.model}: {a.questions} questions x {a.samples} samples, up to {a.new_tokens} tokens, T={a.temperature}")
    for sampler in a.samplers:
        def run(batch: int, spec: SpecConfig | None = None, sampler: str = sampler):
            cfg = EngineConfig(max_batch_size=batch, kv_cache_tokens=65536, sampler=sampler, spec=spec or SpecConfig())
            t = time.perf_counter()
            outs, _ = build_engine(model, tok, cfg).generate(reqs)
            return {(o.uid, o.sample_index): o.token_ids for o in outs}, time.perf_counter() - t

        ref, t_ref = run(n)
        print(f"{sampler}: reference B={n}, {sum(map(len, ref.values()))} tokens, {t_ref:.0f} s")
        for name, (b, spec) in {f"B={a.small_batch}": (a.small_batch, None),
                                "speculation": (n, SpecConfig(method="auto", gate=False))}.items():
            got, t = run(b, spec)
            bad = [(k, next(i for i, (x, y) in enumerate(zip(ref[k] + [-1], got[k] + [-2])) if x != y))
                   for k in ref if ref[k] != got[k]]
            print(f"{sampler}: {name}: {n - len(bad)}/{n} identical ({t:.0f} s); diverging (uid, sample) at "
                  f"token: {bad}")


if __name__ == "__main__":
    main()
