"""Keyed sampler cost against the LM head it follows, side by side in one run: for each vocabulary, the
(B, hidden) x (hidden, V) fp32 LM-head matmul (SmolLM2-135M's hidden 576 by default) and every sampler in
SAMPLERS (inverse_cdf: float64 cumsum; gumbel: V keyed numbers per token; blocked: two-level fp32 /
integer inverse CDF) at temperature 1, with top_p = 1 and with top_p < 1. Flags come from the host-side
parameters, as in the engine, so no sampler pays a host sync. The figures behind the default: docs/results.md.

    python benchmarks/sampler_cost.py --batch 64 --vocab 49152 151936 --threads 2

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


def _rows(a, V: int, g: torch.Generator) -> dict[str, list[float]]:
    """Timings (ms) of the LM-head matmul and of each sampler at top_p 1 and a.top_p, for vocabulary V."""
    B, dev = a.batch, a.device
    hidden = torch.randn(B, a.hidden, generator=g).to(dev)
    head = (torch.randn(a.hidden, V, generator=g) / a.hidden ** 0.5).to(dev)
    logits = (hidden @ head * 3).contiguous()  # a logit spread like a small LM's
    keys = torch.stack([torch.zeros(B), torch.arange(B), torch.zeros(B), torch.full((B,), 5)], 1).long()
    temp, top_k = torch.ones(B, device=dev), torch.zeros(B, dtype=torch.long, device=dev)
    rows = {"matmul": _times(lambda: hidden @ head, a.iters, dev)}
    for top_p in (1.0, a.top_p):
        tp = torch.full((B,), top_p, device=dev)
        flags = host_flags([1.0] * B, [0] * B, [top_p] * B)
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
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    print(f"B={a.batch} hidden={a.hidden} device={a.device} threads={a.threads}; "
          f"ms per call, fastest (median) of {a.iters}")
    for V in a.vocab:
        rows = _rows(a, V, g)
        base = min(rows["matmul"])
        print(f"V={V}")
        for name, ts in rows.items():
            print(f"  {name:24s} {min(ts):9.2f} ({statistics.median(ts):9.2f})   {min(ts) / base:6.2f}x matmul")


if __name__ == "__main__":
    main()
