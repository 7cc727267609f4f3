"""Speculative decoding in the simulator: what one draft-and-verify iteration costs and yields.

A request with per-token acceptance alpha and draft window w gains tau(alpha, w) = 1 + alpha + ... +
alpha^w tokens per verification in expectation (exact verification: accepted drafts plus the
target's own token; speculative/window.py). One iteration of a batch of b requests costs

    D = w * draft(b)                    w draft forwards (0 for a model-free n-gram drafter)
    V = target forward over b * (n * w + 1) tokens   (n draft paths per request: Best-of-N tree)
    coupled:   D + V                    drafter and verifier share the GPUs, one after the other
    decoupled: max(D, V)                SpecActor §4.1: pipelined on separate GPUs, IL = max(w D, V)

Best-of-N (SpecActor §4.2): GPUs freed by finished replicas run more drafters for the remaining
requests; with n independent drafters a position is accepted when any path matches, alpha_n = 1 - (1 -
alpha)^n. The window is re-planned from the batch's current acceptance at every simulated chunk (the
periodic per-request reconfiguration of Alg. 2, with one window per replica).
"""

from __future__ import annotations

from collections.abc import Callable

from tailrl.speculative.window import expected_tokens

# iteration time from (draft seconds, verify seconds): one entry per execution mode
ITERATION: dict[str, Callable[[float, float], float]] = {
    "coupled": lambda d, v: d + v,
    "decoupled": lambda d, v: max(d, v),
}


def bon_alpha(alpha: float, n: int) -> float:
    """Acceptance of a position with n independent draft paths."""
    return 1.0 - (1.0 - alpha) ** max(n, 1)


class SpecModel:
    def __init__(self, mode: str, target, draft, w_max: int, draft_tp: int = 1):
        """target, draft: latency models (draft None = model-free drafter, zero draft cost)."""
        if mode not in ITERATION:
            raise ValueError(f"unknown speculation mode '{mode}'; valid: {', '.join(ITERATION)}")
        self.mode, self.target, self.draft, self.w_max, self.draft_tp = mode, target, draft, w_max, draft_tp
        self.combine = ITERATION[mode]

    def iteration(self, tp: int, batch: int, ctx: float, w: int, paths: int = 1) -> float:
        """Seconds for one iteration with window w (w = 0: a plain decode step)."""
        if w == 0:
            return self.target.decode(tp, batch, ctx)
        # decoupled Best-of-N: each extra path is drafted by a lent drafter, in parallel with the others;
        # coupled: the replica's own GPUs draft every path, one after the other
        drafted = batch if self.mode == "decoupled" else batch * paths
        d = 0.0 if self.draft is None else w * self.draft.decode(self.draft_tp, drafted, ctx * drafted / batch)
        v = self.target.forward(tp, batch, batch * (paths * w + 1), ctx)
        return self.combine(d, v)

    def plan(self, tp: int, batch: int, ctx: float, alphas: list[float], paths: int = 1) -> tuple[int, float]:
        """(w, seconds per iteration) maximising the batch's expected tokens per second; w = 0 (plain
        decoding) wins when no window pays."""
        best = (0, self.target.decode(tp, batch, ctx))
        best_rate = len(alphas) / best[1]
        for w in range(1, self.w_max + 1):
            t = self.iteration(tp, batch, ctx, w, paths)
            rate = sum(expected_tokens(bon_alpha(a, paths), w) for a in alphas) / t
            if rate > best_rate:
                best, best_rate = (w, t), rate
        return best
