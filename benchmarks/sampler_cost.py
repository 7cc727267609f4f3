"""Keyed sampler cost, side by side: inverse-CDF (one keyed uniform per token) vs Gumbel-max
(V keyed numbers per token), at a given batch and vocabulary. DESIGN.md: measure before choosing.

    python benchmarks/sampler_cost.py --batch 64 --vocab 49152 --threads 2
"""

from __future__ import annotations

import argparse
import time

import torch

from tailrl.engine.keyed import SAMPLERS, keyed_sample


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    B, V = a.batch, a.vocab
    logits = torch.randn(B, V, device=a.device) * 3
    keys = torch.stack([torch.zeros(B), torch.arange(B), torch.zeros(B), torch.full((B,), 5)], 1).long().to(a.device)
    temp = torch.ones(B, device=a.device)
    top_k = torch.zeros(B, dtype=torch.long, device=a.device)
    top_p = torch.ones(B, device=a.device)
    times = {}
    for method in SAMPLERS:
        keyed_sample(logits, keys, temp, top_k, top_p, method)  # warm-up
        t = time.perf_counter()
        for i in range(a.iters):
            keys[:, 3] = i
            keyed_sample(logits, keys, temp, top_k, top_p, method)
        if a.device == "cuda":
            torch.cuda.synchronize()
        times[method] = (time.perf_counter() - t) / a.iters * 1e3
    print(f"B={B} V={V} device={a.device} threads={a.threads}")
    for m, ms in times.items():
        print(f"  {m:12s} {ms:8.2f} ms per sampling step")
    print(f"gumbel / inverse_cdf = {times['gumbel'] / times['inverse_cdf']:.1f}x")


if __name__ == "__main__":
    main()
