"""max_variance down-sampling cost vs n (PODS Algorithm 2 is O(n log n)): time per call for
n = 10^2 .. 10^6 with m = n / 4, and the time / (n log2 n) constant, which stays flat when the
algorithm is O(n log n) (a quadratic one would grow ~n / log n).

    python benchmarks/pods_scaling.py
"""

from __future__ import annotations

import math
import time

import torch

from tailrl.algo.downsample import max_variance


def main() -> None:
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    print(f"{'n':>9} {'m':>8} {'ms/call':>10} {'ns/(n log2 n)':>14}")
    for e in range(2, 7):
        n = 10 ** e
        m = max(2, n // 4)
        r = torch.rand(n, generator=g, dtype=torch.float64)
        reps = max(3, 20000 // n)
        max_variance(r, m)
        t = time.perf_counter()
        for _ in range(reps):
            max_variance(r, m)
        dt = (time.perf_counter() - t) / reps
        print(f"{n:>9} {m:>8} {dt * 1e3:>10.3f} {dt * 1e9 / (n * math.log2(n)):>14.2f}")


if __name__ == "__main__":
    main()
