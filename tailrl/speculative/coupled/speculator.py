"""The speculator: per decode step, which drafter drafts how many tokens for which sequence, and what
is learned from the verification. Owns the drafters, acceptance statistics, the forward-cost model
and the draft ladder; the verify step is coupled/verify.py, the exact check the engine's keyed sampler.
It is the engine's DecodeStrategy for engine.spec.mode=coupled (engine/strategy.py).

Per sequence, acceptance is a per-token rate alpha per drafter (truncated-geometric MLE: accepted /
(accepted + rejections)), shrunk toward the drafter's historical rate (weight `prior_weight`), which
itself is an exponential average over earlier verifies — the SpecActor observation that the batch
mean is stable. Primary drafter of a sequence = the ladder's best at its alpha estimates. Windows come
from plan_windows (speculative/window.py). Best-of-N: while the verify forward stays within (1 + bon_spare) of
its fixed cost, the lowest-acceptance sequences get every other drafter's proposal too (depth first:
all drafters for the slowest request before the next), merged into one token tree.

A step speculates only if three gates agree, each from measurements: the measured tokens/s of
speculative vs plain steps in this batch-size bucket (power of two; a plain step is measured first, a
"slower" verdict is re-tested after a few plain steps, more after each losing re-test, at once when
the O(1) prediction has risen enough to make up for the measured shortfall (acceptance rose), and in
every new rollout: cost.ThroughputGate), an O(1) prediction at each
drafter's historical acceptance, and the prediction for the planned windows (forward-cost model +
drafting + the speculative path's own overhead, all fitted online) against a plain step. Otherwise
plan() returns None and the engine runs a plain decode step. Until the speculative path's overhead has
been measured once, speculation is only tried at batches of at most `explore_batch` (the tail, where a
wrong guess costs a few milliseconds), never first at a large batch, where it costs ~0.35 ms a sequence.
A batch that never shrinks to that size (fixed lengths, no tail) therefore never speculates.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict, deque
from functools import partial

from tailrl.engine.sampling.rows import sample_hashes
from tailrl.speculative.cost import ForwardCost, ThroughputGate
from tailrl.speculative.coupled.ladder import Ladder
from tailrl.speculative.coupled.verify import speculative_decode
from tailrl.speculative.drafters import DRAFTERS, drafter_names
from tailrl.speculative.window import expected_tokens, plan_windows


class Speculator:
    def __init__(self, engine, cfg, prior_weight: float = 4.0, history_decay: float = 0.99, explore_batch: int = 16):
        self.cfg = cfg
        self.names = drafter_names(cfg)
        self.drafters = {n: DRAFTERS.get(n)(engine, cfg) for n in self.names}
        self.engine = engine
        self.cost = ForwardCost()
        self.plain_step = ForwardCost(default=(0.0, 0.0))  # wall of a plain decode step vs batch size
        self.spec_overhead = ForwardCost(default=(0.0, 0.0))  # spec step wall - forward - drafting, vs batch
        self.cost.calibrate(engine)  # while the cache is empty
        self.ladder = Ladder.load(cfg.coupled.ladder) if cfg.coupled.ladder else None
        self.prior_weight, self.decay = prior_weight, history_decay
        self.explore_batch = explore_batch  # the first speculative step runs at a batch this small or smaller
        self.hist = {n: [cfg.alpha_prior * prior_weight, prior_weight] for n in self.names}  # [accepted, trials]
        self.seq_stats: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
        self.draft_s = {n: 0.0 for n in self.names}  # seconds per proposed token (median of recent calls)
        self._draft_obs = {n: deque(maxlen=31) for n in self.names}
        self._draft_calls = {n: 0 for n in self.names}
        self.counters: dict[str, float] = defaultdict(float)
        self.last_draft_s = 0.0  # drafting seconds of the current plan
        self._plans, self._table = 0, None
        self.gate = ThroughputGate()
        self.predicted = 1.0  # the O(1) predicted gain of the step being planned (gate on)
        self._k_guess = max(1.0, cfg.k_max / 2)  # drafted tokens per sequence of the last speculative plan

    def decode(self, ready) -> None:
        """One decode step of the running sequences: draft, verify exactly, or plain (coupled/verify.py)."""
        speculative_decode(self, ready)

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

    def primary(self, seq_id: int, table: dict[str, list[float]]) -> str:
        """The drafter with the best ladder speed-up at this sequence's acceptance estimates (ties: order);
        table[name][j] = speed-up at alpha = j / 50."""
        return max(self.names, key=lambda n: (table[n][round(self.alpha(seq_id, n) * 50)], -self.names.index(n)))

    # -- planning --------------------------------------------------------------------------------
    def plan(self, seqs, room: list[int]) -> list[list[tuple[str, list[int]]]] | None:
        """Candidate (drafter, draft) pairs per sequence (first = the primary's); room[i] caps sequence i's
        draft length. None: a plain decode step is expected to be faster (the caller runs one)."""
        self.last_draft_s = 0.0
        base = sum(s.pending for s in seqs)
        # the forward-cost line near the size this step's verify forward would have (cost.py: not one line)
        c0, c1 = self.cost.coefficients(near=base + len(seqs) * self._k_guess)
        gate = self.cfg.gate
        if gate and not self.spec_overhead.fitted() and len(seqs) > self.explore_batch:
            return None  # the speculative path's own cost is unmeasured: find it where a wrong guess is cheap
        if gate:  # O(1) gates: predicted not to pay, or measured slower at this batch size
            self.predicted = self._predicted_gain(len(seqs), base, c0, c1)
            if self.predicted <= 1.0 or self.measured_slower(len(seqs)):
                return None
        self._plans += 1
        if self._table is None or self._plans % 32 == 0:  # ladder on an alpha grid, refreshed as costs drift
            self._table = {n: [self.speedup(n, j / 50) for j in range(51)] for n in self.names}
        table = self._table
        prim = [self.primary(s.seq_id, table) for s in seqs]
        alphas = [self.alpha(s.seq_id, n) for s, n in zip(seqs, prim)]
        caps = [max(0, min(self.cfg.k_max, r)) for r in room]
        dcost = [self.draft_s[n] for n in prim]
        if gate:
            ks = plan_windows(alphas, caps, c0, c1, dcost, base)
            if not self.pays(alphas, ks, dcost, len(seqs), base, c0, c1):
                return None
        else:  # always speculate, k_max per request (a benchmark baseline: naive coupled speculation)
            ks = caps
        self._k_guess = max(1.0, sum(ks) / len(ks))
        cands: list[list[tuple[str, list[int]]]] = [[] for _ in seqs]
        by_name: dict[str, list[int]] = defaultdict(list)
        for i, (n, k) in enumerate(zip(prim, ks)):
            if k > 0:
                by_name[n].append(i)
        self._propose(seqs, by_name, ks, cands)
        # token trees verify on the dense torch path: only where that is the attention path anyway
        # (not under triton, whose numerics the tree rows would leave; not strict: not batch-invariant)
        ex = self.engine.execution
        if (self.cfg.coupled.best_of_n and len(self.names) > 1 and ex.attention == "torch"
                and not ex.strict):
            self._best_of_n(seqs, prim, alphas, caps, cands, base)
        return cands

    # -- measured throughput per batch-size bucket (the final word over the models) ----------------
    def record(self, kind: str, batch: int, tokens: int, seconds: float) -> None:
        """A finished decode step for the throughput gate; a speculative one with the gain the models
        predicted when it was planned."""
        self.gate.record(kind, batch, tokens, seconds, self.predicted if kind == "spec" else None)

    def measured_slower(self, batch: int) -> bool:
        """The throughput gate's verdict at this batch size, given the models' current predicted gain."""
        return self.gate.slower(batch, self.predicted)

    def _predicted_gain(self, B: int, base: int, c0: float, c1: float) -> float:
        """The best predicted gain (see gain) at batch B if every sequence used one drafter at its historical
        acceptance (windows from the same rule, uniform across the batch), over the drafters."""
        best = 0.0
        for name in self.names:
            a, d = self.alpha_hist(name), self.draft_s[name]
            k = plan_windows([a], [self.cfg.k_max], c0 / B, c1, [d], base / B)[0]  # per-sequence share of the forward
            best = max(best, self.gain([a] * B, [k] * B, [d] * B, B, base, c0, c1))
        return best

    def pays(self, alphas, ks, dcost, B: int, base: int, c0: float, c1: float) -> bool:
        """Whether this speculative step is expected to emit more tokens per second than a plain step."""
        return self.gain(alphas, ks, dcost, B, base, c0, c1) > 1.0

    def gain(self, alphas, ks, dcost, B: int, base: int, c0: float, c1: float) -> float:
        """Expected tokens per second of this speculative step (windows ks, forward, drafting and the
        speculative path's own overhead) over those of a plain decode step at batch B, both from measured
        models; 0 without a draft."""
        if not any(ks):
            return 0.0
        S = sum(expected_tokens(a, k) for a, k in zip(alphas, ks))
        o0, o1 = self.spec_overhead.coefficients(near=B)
        t_spec = c0 + c1 * (base + sum(ks)) + sum(d * k for d, k in zip(dcost, ks)) + o0 + o1 * B
        p0, p1 = self.plain_step.coefficients(near=B)
        if self.plain_step.fitted():
            t_plain = p0 + p1 * B
        else:  # no plain step measured yet: the forward-cost line near the plain forward's own size
            b0, b1 = self.cost.coefficients(near=base)
            t_plain = b0 + b1 * base
        return S * t_plain / max(B * t_spec, 1e-12)

    def _propose(self, seqs, by_name: dict[str, list[int]], ks: list[int], cands) -> None:
        for name, idx in by_name.items():
            t = time.perf_counter()
            draws = self._draws([seqs[i] for i in idx], max(ks[i] for i in idx))
            props = self.drafters[name].propose([seqs[i] for i in idx], [ks[i] for i in idx], draws)
            dt = time.perf_counter() - t
            self.last_draft_s += dt
            # seconds per proposed token (misses cost too); the median of recent calls, so one-time costs
            # (a drafter's first call, a new prompt's index) do not switch speculation off for good
            self._draft_calls[name] += 1
            if self._draft_calls[name] > 2:  # the first calls build indexes / caches: not the steady cost
                window = self._draft_obs[name]
                window.append(dt / max(sum(len(p) for p in props), len(idx)))
                self.draft_s[name] = statistics.median(window)
            for i, p in zip(idx, props):
                if p:
                    cands[i].append((name, p))
                    self.counters[f"proposed/{name}"] += len(p)

    def _draws(self, seqs, k: int) -> list[list] | None:
        """How the target draws each sequence's next k positions from a small distribution: its sampler's
        vote at each position's key (engine/sampling/votes.py); None when some sequence decodes greedily."""
        if any(s.request.params.temperature <= 0 for s in seqs):
            return None
        rows = [s for s in seqs for _ in range(k)]
        h = sample_hashes(rows, [s.num_generated + j for s in seqs for j in range(k)]).tolist()
        vote = self.engine.sampler.vote
        return [[partial(vote, h=x) for x in h[i * k:(i + 1) * k]] for i in range(len(seqs))]

    def _best_of_n(self, seqs, prim, alphas, caps, cands, base) -> None:
        planned = base + sum(len(c[0][1]) for c in cands if c)
        g0, g1 = self.cost.coefficients()  # the spare tokens against the forward's fixed cost: the whole range's
        budget = int(self.cfg.coupled.bon_spare * g0 / g1) - planned  # line (a locally flat one would be ~1e9)
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

    def close(self) -> None:
        """Nothing outlives the engine here (the decoupled speculator stops its drafter process)."""

    def begin_rollout(self) -> None:
        self.counters.clear()
        self.gate.new_rollout()  # acceptance may have changed (history): "slower" verdicts are re-tested

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

