"""Per-request draft windows from acceptance rates and a forward-cost model (SpecActor's coupled
Algorithm 2 on one device), as a pure function.

One verify forward over N tokens costs c0 + c1 * N seconds (fixed cost: weights and launches; c1: per
token). With per-token acceptance alpha, the m-th draft token of a request is used with probability
alpha^m (all earlier drafts accepted), so a window of k yields 1 + alpha + .. + alpha^k tokens in
expectation. Windows maximise the batch's expected tokens per second, S / T: draft tokens are added
greedily in order of gain/cost (each request's gains fall with k) while gain / cost > S / T — the
optimum of this fractional knapsack. At a large batch T is dominated by c1 * N and no draft pays unless
acceptance is near 1; in the tail (small batch, T ~ c0) drafts are almost free and windows grow.
"""

from __future__ import annotations

import heapq


def expected_tokens(alpha: float, k: int) -> float:
    """1 + alpha + ... + alpha^k: tokens one verify of a k-token draft yields in expectation."""
    return float(k + 1) if alpha >= 1.0 else (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def plan_windows(alphas: list[float], k_max: list[int], c0: float, c1: float, draft_cost: list[float],
                 base_tokens: int | None = None) -> list[int]:
    """alphas: per-request acceptance (B,); k_max: per-request cap (B,); c0, c1: forward cost model;
    draft_cost: seconds per proposed draft token per request (B,); base_tokens: tokens the forward
    processes anyway (default B). Returns windows k (B,) maximising expected tokens per second."""
    B = len(alphas)
    S = float(B)
    T = c0 + c1 * (B if base_tokens is None else base_tokens)
    ks = [0] * B
    heap = []  # (-gain/cost, i)
    for i in range(B):
        if k_max[i] > 0 and alphas[i] > 0:
            cost = c1 + draft_cost[i]
            heapq.heappush(heap, (-alphas[i] / max(cost, 1e-12), i))
    while heap:
        neg_ratio, i = heapq.heappop(heap)
        gain = alphas[i] ** (ks[i] + 1)
        cost = c1 + draft_cost[i]
        if gain * T <= S * cost:  # gain / cost <= S / T: no remaining increment pays (ratios only fall)
            break
        ks[i] += 1
        S += gain
        T += cost
        if ks[i] < k_max[i]:
            heapq.heappush(heap, (-(gain * alphas[i]) / max(cost, 1e-12), i))
    return ks
