"""Keyed sampler cost against the LM head it follows, side by side in one run: for each vocabulary, the
(B, hidden) x (hidden, V) fp32 LM-head matmul (SmolLM2-135M's hidden 576 by default) and every sampler in
SAMPLERS (gumbel: the keyed Gumbel race pruned to the tokens that can win; blocked: two-level fp32 /
integer inverse CDF; inverse_cdf: float64 cumsum) at --temperature, with top_p = 1 and with top_p < 1.
Flags come from the host-side parameters, as in the engine, so no sampler pays a host sync. The figures
behind the default: docs/results.md.

    python benchmarks/sampler_cost.py --batch 64 --vocab 49152 151936 --threads 2 --model smollm2-135m-instruct

The logits matter (the Gumbel race hashes only the tokens that can still win): --model takes them from a
real model's forward over chat-formatted word problems (every position of the answers it samples); a
vocabulary larger than the model's is filled with tail logits drawn from each row's lower half. Without
--model they are a random matmul's, spread like a small LM's.

Each cell is the fastest of --iters timed calls after one warm-up (the median is printed beside it): on a
shared machine the fastest call is the best estimate of the uncontended cost. Ratios are to the matmul.
On CPU much of the cost of a (B, V) temporary can be page faults: glibc maps blocks above its mmap
threshold (at most 32 MiB) afresh on every call. MALLOC_MMAP_THRESHOLD_=17179869184
MALLOC_TRIM_THRESHOLD_=17179869184 in the environment keeps freed memory and shows the fault-free cost.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tailrl.engine.sampling import SAMPLERS, hash_keys, host_flags, keyed_sample_hashed


def _times(fn, iters: int, device: str) -> list[float]:
    """Milliseconds of `iters` calls of fn() after one warm-up call."""
    fn()
    out = []
    for _ in range(iters):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def real_logits(name: str, rows: int) -> torch.Tensor:
    """(rows, V) float32 next-token logits of a real model: every position of its sampled answers to
    chat-formatted word problems (what the sampler sees during a rollout)."""
    # lazy: the model stack only with --model
    from tailrl.bench.exactness_prompts import chat_requests, word_problems
    from tailrl.model import load
    from tailrl.speculative import build_engine

    model, tok = load(name, dtype="float32", device="cpu")
    reqs = chat_requests(tok, word_problems(8, 0), 8, 1, max(16, rows // 8 + 8), 1.0, 0)
    outs, _ = build_engine(model, tok).generate(reqs)
    out = []
    with torch.inference_mode():
        for r in outs:
            ids = torch.tensor([r.prompt_ids + r.token_ids])
            out.append(model(ids)[0, len(r.prompt_ids) - 1:-1].float())
    return torch.cat(out)[:rows].contiguous()


def widen(logits: torch.Tensor, V: int, g: torch.Generator) -> torch.Tensor:
    """(B, V0) -> (B, V): extra tail tokens with logits drawn from each row's lower half."""
    B, V0 = logits.shape
    if V <= V0:
        return logits[:, :V].contiguous()
    low = logits.sort(-1).values[:, : V0 // 2]
    pick = torch.randint(0, V0 // 2, (B, V - V0), generator=g)
    return torch.cat([logits, low.gather(1, pick)], -1).contiguous()


def _rows(a, V: int, g: torch.Generator, real: torch.Tensor | None) -> dict[str, list[float]]:
    """Timings (ms) of the LM-head matmul and of each sampler at top_p 1 and a.top_p, for vocabulary V."""
    B, dev = a.batch, a.device
    hidden = torch.randn(B, a.hidden, generator=g).to(dev)
    head = (torch.randn(a.hidden, V, generator=g) / a.hidden ** 0.5).to(dev)
    if real is not None:
        logits = widen(real, V, g).to(dev)
    else:
        logits = (hidden @ head * 3).contiguous()  # a logit spread like a small LM's
    keys = torch.stack([torch.zeros(B), torch.arange(B), torch.zeros(B), torch.full((B,), 5)], 1).long()
    temp = torch.full((B,), a.temperature, device=dev)
    top_k = torch.zeros(B, dtype=torch.long, device=dev)
    rows = {"matmul": _times(lambda: hidden @ head, a.iters, dev)}
    for top_p in (1.0, a.top_p):
        tp = torch.full((B,), top_p, device=dev)
        flags = host_flags([a.temperature] * B, [0] * B, [top_p] * B)
        for m in a.methods:
            step = [0]

            def call(m=m, tp=tp, flags=flags, step=step):
                keys[:, 3] = step[0] = step[0] + 1  # a fresh position per call, as in decoding
                keyed_sample_hashed(logits, hash_keys(keys).to(dev), temp, top_k, tp, m, flags)

            rows[f"{m} top_p={top_p:g}"] = _times(call, a.iters, dev)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--vocab", type=int, nargs="+", default=[49152, 151936])
    ap.add_argument("--hidden", type=int, default=576)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--methods", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS))
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--model", default=None, help="real logits from this model (e.g. smollm2-135m-instruct)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    print(f"B={a.batch} hidden={a.hidden} device={a.device} threads={a.threads}; "
          f"ms per call, fastest (median) of {a.iters}")
    real = real_logits(a.model, a.batch) if a.model else None
    if real is not None:
        print(f"logits: {a.model}, {real.shape[0]} positions of its sampled answers (V={real.shape[1]})")
    for V in a.vocab:
        rows = _rows(a, V, g, real)
        base = min(rows["matmul"])
        print(f"V={V}")
        for name, ts in rows.items():
            print(f"  {name:24s} {min(ts):9.2f} ({statistics.median(ts):9.2f})   {min(ts) / base:6.2f}x matmul")


if __name__ == "__main__":
    main()
