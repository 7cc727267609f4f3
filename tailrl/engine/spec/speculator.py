"""The speculator: per decode step, which drafter drafts how many tokens for which sequence, and what
is learned from the verification. Owns the drafters, acceptance statistics, the forward-cost model
and the draft ladder; the engine owns the model and the exact check (spec/step.py).

Per sequence, acceptance is a per-token rate alpha per drafter (truncated-geometric MLE: accepted /
(accepted + rejections)), shrunk toward the drafter's historical rate (weight `prior_weight`), which
itself is an exponential average over earlier verifies — the SpecActor observation that the batch
mean is stable. Primary drafter of a sequence = the ladder's best at its alpha estimates. Windows come
from plan_windows (spec/window.py). Best-of-N: while the verify forward stays within (1 + bon_spare) of
its fixed cost, the lowest-acceptance sequences get every other drafter's proposal too (depth first:
all drafters for the slowest request before the next), merged into one token tree.
"""

from __future__ import annotations

import time
from collections import defaultdict

from tailrl.engine.spec.cost import ForwardCost
from tailrl.engine.spec.drafters import DRAFTERS
from tailrl.engine.spec.ladder import Ladder
from tailrl.engine.spec.window import plan_windows

METHODS = ("none", "ngram", "history", "draft", "auto")


def drafter_names(method: str, draft_model: str) -> list[str]:
    """The drafters a method uses (the first is the default primary)."""
    if method not in METHODS:
        from tailrl.errors import UserError

        raise UserError(f"unknown speculation method '{method}'; valid: {', '.join(METHODS)} (or draft:PATH)")
    if method == "none":
        return []
    if method == "auto":
        return ["history", "ngram"] + (["draft"] if draft_model else [])
    return [method]


class Speculator:
    def __init__(self, engine, cfg, prior_weight: float = 4.0, history_decay: float = 0.99):
        from tailrl.engine.spec import draft_model

        draft_model.register()
        self.cfg = cfg
        method, arg = cfg.method, None
        if method.startswith("draft:"):
            method, arg = "draft", method.split(":", 1)[1]
        self.names = drafter_names(method, arg or cfg.draft_model)
        self.drafters = {n: DRAFTERS[n](engine, cfg, arg) for n in self.names}
        self.engine = engine
        self.cost = ForwardCost()
        self.cost.calibrate(engine.runner, engine.cache)  # while the cache is empty
        self.ladder = Ladder.load(cfg.ladder) if cfg.ladder else None
        self.prior_weight, self.decay = prior_weight, history_decay
        self.hist = {n: [cfg.alpha_prior * prior_weight, prior_weight] for n in self.names}  # [accepted, trials]
        self.seq_stats: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
        self.draft_s = {n: 0.0 for n in self.names}  # EMA seconds per proposed token
        self.counters: dict[str, float] = defaultdict(float)

    @property
    def enabled(self) -> bool:
        return bool(self.names)

    # -- estimates -------------------------------------------------------------------------------
    def alpha_hist(self, name: str) -> float:
        a, n = self.hist[name]
        return a / n if n > 0 else self.cfg.alpha_prior

    def alpha(self, seq_id: int, name: str) -> float:
        a, n = self.seq_stats[seq_id][name]
        w = self.prior_weight
        return (a + w * self.alpha_hist(name)) / (n + w)

    def speedup(self, name: str, alpha: float) -> float:
        if self.ladder is not None and name in self.ladder.table:
            return self.ladder.speedup(name, alpha)
        c0, c1 = self.cost.coefficients()
        return Ladder.analytic(alpha, c0, c1, self.draft_s[name], self.cfg.k_max)

    def primary(self, seq_id: int) -> str:
        return max(self.names, key=lambda n: (self.speedup(n, self.alpha(seq_id, n)), -self.names.index(n)))

    # -- planning --------------------------------------------------------------------------------
    def plan(self, seqs, room: list[int]) -> list[list[tuple[str, list[int]]]]:
        """Candidate (drafter, draft) pairs per sequence (first = the primary's); room[i] caps sequence i's
        draft length."""
        c0, c1 = self.cost.coefficients()
        prim = [self.primary(s.seq_id) for s in seqs]
        alphas = [self.alpha(s.seq_id, n) for s, n in zip(seqs, prim)]
        caps = [max(0, min(self.cfg.k_max, r)) for r in room]
        base = sum(s.pending for s in seqs)
        ks = plan_windows(alphas, caps, c0, c1, [self.draft_s[n] for n in prim], base)
        cands: list[list[tuple[str, list[int]]]] = [[] for _ in seqs]
        by_name: dict[str, list[int]] = defaultdict(list)
        for i, (n, k) in enumerate(zip(prim, ks)):
            if k > 0:
                by_name[n].append(i)
        self._propose(seqs, by_name, ks, cands)
        if self.cfg.best_of_n and len(self.names) > 1:
            self._best_of_n(seqs, prim, alphas, caps, cands, c0, c1, base)
        return cands

    def _propose(self, seqs, by_name: dict[str, list[int]], ks: list[int], cands) -> None:
        for name, idx in by_name.items():
            t = time.perf_counter()
            props = self.drafters[name].propose([seqs[i] for i in idx], [ks[i] for i in idx])
            n_tok = sum(len(p) for p in props)
            if n_tok:
                per = (time.perf_counter() - t) / n_tok
                self.draft_s[name] = per if self.draft_s[name] == 0 else 0.9 * self.draft_s[name] + 0.1 * per
            for i, p in zip(idx, props):
                if p:
                    cands[i].append((name, p))
                    self.counters[f"proposed/{name}"] += len(p)

    def _best_of_n(self, seqs, prim, alphas, caps, cands, c0, c1, base) -> None:
        planned = base + sum(len(c[0][1]) for c in cands if c)
        budget = int(self.cfg.bon_spare * c0 / c1) - planned
        if budget <= 0:
            return
        extra: dict[str, list[int]] = defaultdict(list)
        ks = [0] * len(seqs)
        for i in sorted(range(len(seqs)), key=lambda i: alphas[i]):  # lowest acceptance first
            if caps[i] <= 0:
                continue
            for n in self.names:
                if n != prim[i] and budget >= caps[i]:
                    extra[n].append(i)
                    ks[i] = caps[i]
                    budget -= caps[i]
            if budget < 1:
                break
        self._propose(seqs, extra, ks, cands)
        self.counters["bon_requests"] += len({i for idx in extra.values() for i in idx})

    # -- learning --------------------------------------------------------------------------------
    def observe(self, seq, cands: list[tuple[str, list[int]]], accepted: list[int], winner: int) -> None:
        """After verification: credit each candidate's drafter with its accepted prefix.
        accepted: the verified draft tokens (the path, without the bonus token); winner: index of the
        candidate that proposed the path."""
        if not cands:
            return
        stats = self.seq_stats[seq.seq_id]
        for name, draft in cands:
            a = 0
            while a < len(draft) and a < len(accepted) and draft[a] == accepted[a]:
                a += 1
            trials = a + (1 if a < len(draft) else 0)
            for st in (stats[name], self.hist[name]):
                st[0] += a
                st[1] += trials
            self.counters[f"accepted/{name}"] += a
        if accepted:
            self.counters[f"share/{cands[winner][0]}"] += len(accepted)
        self.counters["verified_rows"] += 1
        self.counters["accepted"] += len(accepted)
        self.counters["proposed"] += max(len(d) for _, d in cands)

    def release(self, seq) -> None:
        self.seq_stats.pop(seq.seq_id, None)
        for d in self.drafters.values():
            d.release(seq)

    def end_rollout(self) -> None:
        for d in self.drafters.values():
            d.end_rollout()
        for st in self.hist.values():  # older rollouts weigh less
            st[0] *= self.decay
            st[1] *= self.decay

    def metrics(self) -> dict[str, float]:
        c = self.counters
        m = {"spec/acceptance_rate": c["accepted"] / c["proposed"] if c["proposed"] else 0.0,
             "spec/mean_accepted_len": c["accepted"] / c["verified_rows"] if c["verified_rows"] else 0.0,
             "spec/bon_requests": c["bon_requests"]}
        shares = sum(c[f"share/{n}"] for n in self.names)
        for n in self.names:
            m[f"spec/drafter_share/{n}"] = c[f"share/{n}"] / shares if shares else 0.0
            m[f"spec/acceptance/{n}"] = c[f"accepted/{n}"] / c[f"proposed/{n}"] if c[f"proposed/{n}"] else 0.0
        return m

    def reset_counters(self) -> None:
        self.counters.clear()

