"""SAGC: Straggler-Aware Group-size Control (paper 001, sections 3-4, Algorithm 1, appendices C-D).

Online constrained choice of the group size G: maximise a utility U(G) subject to a long-run
straggler rate <= delta, solved by a primal-dual rule:

* straggler event of one group: max(lengths) / max(median(lengths), 1) > tau (eq. 1-2; tau = 1.25);
* per candidate G a discounted Beta(alpha_G, beta_G) posterior over the straggler probability p_G;
  every ``observe`` first discounts ALL posteriors toward the prior (alpha <- gamma*alpha +
  (1-gamma)*alpha_0, same for beta; discounted Thompson sampling, so arms left unvisited drift back
  to the prior and are re-explored after the length distribution changes), then adds the step's
  events to the posterior of the G that generated it (one Bernoulli observation per group);
* projected dual ascent on the step's straggler rate (eq. 8):
  lambda <- clip(lambda + eta * (rate - delta), 0, lambda_max);
* ``choose``: Thompson-sample p~_G ~ Beta(alpha_G, beta_G) for every candidate, project the draws
  onto risks non-decreasing in G (``monotone``; our addition, see there), and among the current G and
  its neighbours in the sorted candidate list (moves restricted to neighbours, appendix C.3) pick the
  argmax of the Lagrangian score U(G) - lambda * (p~_G - delta) (eq. 6-7); ties go to the larger G.

U(G) = log G / log G_max: increasing with diminishing returns and on the scale of a probability
(U(G_max) = 1), so the penalty stays influential at large G (section 3.2 / C.3 use a log utility;
the exact normalisation was lost from the text extract; this choice is ours).

Pure Python (``random.Random``), so any training loop can drive it. ``state_dict`` is JSON-able and
a controller restored from it reproduces the uninterrupted G sequence exactly.
"""

from __future__ import annotations

import math
import random

from tailrl.control.base import CONTROLLERS
from tailrl.tail import DEFAULT_TAU, straggler_event


def monotone(draws: dict[int, float], candidates: list[int]) -> dict[int, float]:
    """Project Thompson draws onto risks non-decreasing in G: p~_G <- min over G' >= G of p~_G'.

    The straggler statistic max/median of G i.i.d. lengths grows with G, so a smaller group is never
    riskier than a larger one. Without this, an arm left unvisited drifts back to its prior (mean 1/2
    under the uniform prior) and a small G looks riskier than the large G it should replace."""
    out, run = {}, math.inf
    for g in reversed(candidates):
        run = min(run, draws[g])
        out[g] = run
    return out


@CONTROLLERS.register("sagc")
class SAGCController:
    """Straggler-aware group-size controller.

    Args (defaults; the paper's text fixes only tau and the candidate set, the rest are ours):
        group_size: G of the first step; must be one of ``candidates``.
        candidates: admissible group sizes (paper: {4, 8, 16}); sorted and de-duplicated.
        tau: straggler threshold on max/median length (paper: 1.25).
        delta: target long-run straggler rate, in (0, 1). Default 0.1 (the paper calls its setting
            "conservative"; its number did not survive the text extract).
        eta: dual step size (default 0.5: with the rate typically 0.1-0.3 above delta, lambda rises by
            0.05-0.15 per step and reaches the utility-gap / risk-gap ratio that moves G down (~1-2 on the
            demo) within 10-20 steps; 0.05 took >150 steps there, most of a run).
        gamma: forgetting factor of the discounted Beta posteriors, in (0, 1] (default 0.98: an
            effective memory of ~50 steps; 1 = no forgetting).
        lambda_max: upper end of the dual projection interval (default 10).
        prior: (alpha_0, beta_0) of every posterior (default (1, 1), uniform).
        seed: seed of the Thompson-sampling RNG.

    Observations are attributed to the G returned by the last ``choose`` (the G that generated
    them). Groups with fewer than 2 lengths carry no straggler information and are skipped (as in
    the rollout telemetry). ``choose`` re-decides only after a new ``observe``; before the first
    observation it returns ``group_size``.
    """

    def __init__(self, group_size: int = 8, candidates=(4, 8, 16), tau: float = DEFAULT_TAU, delta: float = 0.1,
                 eta: float = 0.5, gamma: float = 0.98, lambda_max: float = 10.0, prior=(1.0, 1.0),
                 seed: int = 0, **_):
        cands = sorted({int(c) for c in candidates})
        if not cands:
            raise ValueError("sagc: candidates must be a non-empty set of group sizes")
        if cands[0] <= 0:
            raise ValueError(f"sagc: candidates must be positive, got {cands}")
        if group_size not in cands:
            raise ValueError(f"sagc: group_size {group_size} is not one of the candidates {cands}")
        if not 0.0 < delta < 1.0:
            raise ValueError(f"sagc: delta (target straggler rate) must be in (0, 1), got {delta}")
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"sagc: gamma (forgetting factor) must be in (0, 1], got {gamma}")
        if tau <= 0:
            raise ValueError(f"sagc: tau must be positive, got {tau}")
        if eta < 0 or lambda_max < 0:
            raise ValueError(f"sagc: eta and lambda_max must be >= 0, got {eta}, {lambda_max}")
        a0, b0 = (float(x) for x in prior)
        if a0 <= 0 or b0 <= 0:
            raise ValueError(f"sagc: prior must be two positive numbers, got {prior}")
        self.candidates = cands
        self.tau, self.delta, self.eta, self.gamma = float(tau), float(delta), float(eta), float(gamma)
        self.lambda_max = float(lambda_max)
        self.prior = (a0, b0)
        self.group_size = int(group_size)
        self.lam = 0.0
        self.alpha = {g: a0 for g in cands}
        self.beta = {g: b0 for g in cands}
        self._fresh = False  # an observation arrived since the last decision
        self._rng = random.Random(seed)
        gmax = cands[-1]
        self.utility = {g: (math.log(g) / math.log(gmax) if gmax > 1 else 1.0) for g in cands}

    # -- protocol ---------------------------------------------------------------------------------
    def choose(self) -> int:
        if not self._fresh:
            return self.group_size
        self._fresh = False
        i = self.candidates.index(self.group_size)
        draws = {g: self._rng.betavariate(self.alpha[g], self.beta[g]) for g in self.candidates}
        p_tilde = monotone(draws, self.candidates)
        best, best_score = self.group_size, -math.inf
        for g in self.candidates[max(i - 1, 0): i + 2]:  # ascending, so ">=" breaks ties to larger G
            score = self.utility[g] - self.lam * (p_tilde[g] - self.delta)
            if score >= best_score:
                best, best_score = g, score
        self.group_size = best
        return best

    def observe(self, group_lengths: list[list[int]]) -> None:
        events = [straggler_event(v, self.tau) for v in group_lengths if len(v) >= 2]
        if not events:
            return
        a0, b0 = self.prior
        for g in self.candidates:
            self.alpha[g] = self.gamma * self.alpha[g] + (1.0 - self.gamma) * a0
            self.beta[g] = self.gamma * self.beta[g] + (1.0 - self.gamma) * b0
        s = sum(events)
        self.alpha[self.group_size] += s
        self.beta[self.group_size] += len(events) - s
        rate = s / len(events)
        self.lam = min(max(self.lam + self.eta * (rate - self.delta), 0.0), self.lambda_max)
        self._fresh = True

    # -- metrics ----------------------------------------------------------------------------------
    def posterior_mean(self) -> dict[int, float]:
        return {g: self.alpha[g] / (self.alpha[g] + self.beta[g]) for g in self.candidates}

    def metrics(self) -> dict[str, float]:
        m = {"sagc/lambda": self.lam, "sagc/delta": self.delta}  # G itself: the trainer's rollout/group_size
        m |= {f"sagc/p_hat/G={g}": p for g, p in self.posterior_mean().items()}
        return m

    # -- resume -----------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        version, internal, gauss = self._rng.getstate()
        return {
            "group_size": self.group_size, "lam": self.lam, "fresh": self._fresh,
            "alpha": {str(g): v for g, v in self.alpha.items()},
            "beta": {str(g): v for g, v in self.beta.items()},
            "rng": [version, list(internal), gauss],
        }

    def load_state_dict(self, state: dict) -> None:
        alpha = {int(g): float(v) for g, v in state["alpha"].items()}
        beta = {int(g): float(v) for g, v in state["beta"].items()}
        if sorted(alpha) != self.candidates or sorted(beta) != self.candidates:
            raise ValueError(f"sagc: checkpoint candidates {sorted(alpha)} differ from configured {self.candidates}")
        self.alpha, self.beta = alpha, beta
        self.group_size = int(state["group_size"])
        self.lam, self._fresh = float(state["lam"]), bool(state["fresh"])
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))

