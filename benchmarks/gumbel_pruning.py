"""How many tokens the pruned Gumbel race hashes, and its time, on Gaussian logits of a given spread
(flat logits are its hard case: random-weight models, high temperatures).

    python benchmarks/gumbel_pruning.py --batch 64 --vocab 49152 151936 --std 1.2 3.6 --threads 1

Prints, per (B, V, std): the share of the vocabulary given per-token noise and the fastest of --reps calls of
`sample_gumbel_fast` (a fresh position per call). The tokens are checked against the full race once.
"""

from __future__ import annotations

import argparse
import time

import torch

from tailrl.engine.sampling.gumbel import sample_gumbel_fast, sample_gumbel_race
from tailrl.engine.sampling.processing import host_flags


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[64])
    ap.add_argument("--vocab", type=int, nargs="+", default=[49152, 151936])
    ap.add_argument("--std", type=float, nargs="+", default=[1.2, 3.6])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print("| B | V | logit std | hashed | fastest ms |\n|---|---|---|---|---|")
    for B in a.batch:
        for V in a.vocab:
            for std in a.std:
                logits = torch.randn(B, V, generator=torch.Generator().manual_seed(0)) * std
                h = torch.arange(B, dtype=torch.int64) * 7919
                temp, top_k, top_p = torch.ones(B), torch.zeros(B, dtype=torch.long), torch.ones(B)
                flags = host_flags([1.0] * B, [0] * B, [1.0] * B)
                race = sample_gumbel_race(logits, h, temp, top_k, top_p, flags)[0]
                if not torch.equal(race, sample_gumbel_fast(logits, h, temp, top_k, top_p, flags)[0]):
                    raise SystemExit("the pruned race disagrees with the full race")
                times, stats = [], {}
                for i in range(a.reps):
                    t = time.perf_counter()
                    sample_gumbel_fast(logits, h + i + 1, temp, top_k, top_p, flags, stats)
                    times.append(time.perf_counter() - t)
                print(f"| {B} | {V} | {std:g} | {stats['hashed'] / stats['tokens']:.2%} | {min(times) * 1e3:.1f} |")


if __name__ == "__main__":
    main()
