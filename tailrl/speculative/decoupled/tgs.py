"""SpecActor's throughput model for decoupled speculation (§4.1) and the two planners built on it:
Alg. 1 (which cores draft, which verify, and the batch's draft window w) and Alg. 2 (per-request
window and coupled/decoupled mode for requests accepting less than the batch average). Pure
functions over profiled affine costs; `tailrl profile spec` measures them (spec/profiling/tgs.py).

Costs (seconds), fitted offline per resource count g (cores here, GPUs on a cluster):
    D_g(b)    = alpha + b * D'          one draft step (one token for each of b requests)
    V_g(b, n) = beta + b * V'_b + n * V'_n    one verify forward of b requests over n tokens in all
The paper fits V_{g,w}(b) = beta_w + b * V'_w per window; with n = b * w ours is that family with
beta_w = beta and V'_w = V'_b + w * V'_n, one fit for every w and for rounds of mixed windows.

Decoupled runtime (spec/decoupled.py), per request and round, acceptance p per token:
  - the verifier checks w positions per round: w - 1 drafts inside its forward (w tokens per
    request) and the w-th against the sample after them (the "bonus" token) when the drafter's
    next message arrives; the drafter drafts w tokens per round and may run at most 2w - 1 ahead of
    the verified tokens, so a mismatch wastes at most 2w - 1 drafted tokens;
  - a full round commits min(a, w - 1) + 1 tokens (a = accepted prefix) and stays full with
    probability p^w; after a mismatch the next round has no drafts (the drafter restarts from the
    verified token): it commits 1 token and becomes full again when the drafter's first token
    matches it (probability p).
  Stationary tokens per round tau_D = pi_F * T_F + pi_E with pi_F = p / (p + 1 - p^w),
  T_F = sum_{j<w-1} p^j (1-p) (j+1) + p^(w-1) w;   IL_D(b) = max(w * D(b), V(b, b * slots)).
  The paper's tau_w counts a partial accept as (a+1)/2 to charge the pipeline's waste; the chain
  above is the exact expectation for this runtime (tested against a simulation of it).
Coupled (draft, then verify, on the same resources; or one request alternating in the decoupled
runtime): tau_C = 1 + p + ... + p^w (all w drafts in the forward plus the bonus), IL_C(b) = w * D(b) +
V(b, b * (w + 1)).  TGS = tau / IL, tokens per second per request.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from tailrl.errors import UserError


@dataclass(frozen=True)
class DraftCost:
    """D(b) = alpha + b * slope: seconds of one draft step for b requests."""
    alpha: float
    slope: float

    def __call__(self, b: float) -> float:
        return self.alpha + b * self.slope


@dataclass(frozen=True)
class VerifyCost:
    """V(b, n) = beta + b * per_request + n * per_token: one target forward of b requests, n tokens."""
    beta: float
    per_request: float
    per_token: float

    def __call__(self, b: float, n: float) -> float:
        return self.beta + b * self.per_request + n * self.per_token


# -- expected tokens ---------------------------------------------------------------------------------
def tau_coupled(p: float, w: int) -> float:
    """1 + p + ... + p^w: tokens one draft-then-verify of w drafts yields."""
    return float(w + 1) if p >= 1.0 else (1.0 - p ** (w + 1)) / (1.0 - p)


def _full_round(p: float, w: int) -> float:
    """T_F: expected tokens of a round that starts with w - 1 drafts in hand."""
    return sum(p ** j * (1 - p) * (j + 1) for j in range(w - 1)) + p ** (w - 1) * w


def full_share(p: float, w: int) -> float:
    """pi_F: stationary share of rounds that start with drafts in hand (1 when p = 1)."""
    return 1.0 if p >= 1.0 else p / (p + 1.0 - p ** w)


def tau_decoupled(p: float, w: int) -> float:
    """Expected tokens per round of one request in the decoupled runtime (w >= 1; w = 1 is plain)."""
    f = full_share(p, w)
    return f * _full_round(p, w) + (1.0 - f)


def slots_decoupled(p: float, w: int) -> float:
    """Expected verify-forward tokens per request and round: w in a full round, 1 after a mismatch."""
    f = full_share(p, w)
    return f * w + (1.0 - f)


# -- throughput --------------------------------------------------------------------------------------
def il_decoupled(D: DraftCost, V: VerifyCost, b: float, p: float, w: int) -> float:
    return max(w * D(b), V(b, b * slots_decoupled(p, w)))


def il_coupled(D: DraftCost, V: VerifyCost, b: float, w: int) -> float:
    return w * D(b) + V(b, b * (w + 1))


def tgs_decoupled(D: DraftCost, V: VerifyCost, b: float, p: float, w: int) -> float:
    """Tokens per second per request, decoupled with window w at batch b."""
    return tau_decoupled(p, w) / il_decoupled(D, V, b, p, w)


def tgs_coupled(D: DraftCost, V: VerifyCost, b: float, p: float, w: int) -> float:
    return tau_coupled(p, w) / il_coupled(D, V, b, w)


def tgs_plain(V: VerifyCost, b: float) -> float:
    return 1.0 / V(b, b)


def w_limit(D: DraftCost, V: VerifyCost, b: float, p: float, cap: int) -> int:
    """Alg. 1 line 5's pruning: past the first w where drafting w tokens takes as long as verifying,
    IL grows like w * D while tau_w / w falls, so TGS only falls. Returns that w (<= cap)."""
    for w in range(1, cap + 1):
        if w * D(b) >= V(b, b * slots_decoupled(p, w)):
            return w
    return cap


def best_window(D: DraftCost, V: VerifyCost, b: float, p: float, cap: int = 16) -> tuple[int, float]:
    """(w, TGS) of the best decoupled window at batch b, searched up to Alg. 1's pruning bound."""
    t, w = max((tgs_decoupled(D, V, b, p, w), w) for w in range(1, w_limit(D, V, b, p, cap) + 1))
    return w, t


# -- Alg. 1: the decoupled plan ----------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    mode: str          # "decoupled" | "coupled" | "off"
    g_draft: int       # resources drafting (0 for coupled / off: they share the verifier's)
    g_verify: int
    w: int             # draft window (0 for off)
    batch: int         # requests per drafter/verifier group
    groups: int        # independent groups the resources form
    tgs: float         # tokens per second per request
    throughput: float  # tokens per second, all groups

def plan_decoupled(B: int, G: int, verify_configs: list[int], drafts: dict[int, DraftCost],
                   verifies: dict[int, VerifyCost], p: float, cap: int = 16) -> Plan | None:
    """Alg. 1: over verifier sizes g_v in verify_configs and drafter sizes g_d <= g_v with g_d + g_v <=
    G (profiled sizes only), the window w maximising total tokens per second. b = ceil((g_d + g_v) B /
    G) requests per group. None when no profiled combination fits."""
    best = None
    for gv in verify_configs:
        if gv not in verifies:
            continue
        for gd in range(1, gv + 1):
            if gd not in drafts or gd + gv > G:
                continue
            groups = G // (gd + gv)
            b = math.ceil((gd + gv) * B / G)
            w, t = best_window(drafts[gd], verifies[gv], b, p, cap)
            thr = t * min(B, groups * b)
            if best is None or thr > best.throughput:
                best = Plan("decoupled", gd, gv, w, b, groups, t, thr)
    return best


def plan_coupled(B: int, G: int, D: DraftCost, V: VerifyCost, p: float, cap: int = 16) -> Plan:
    """Coupled on all G resources: the window maximising TGS (draft time adds to verify time)."""
    t, w = max((tgs_coupled(D, V, B, p, w), w) for w in range(1, cap + 1))
    return Plan("coupled", 0, G, w, B, 1, t, t * B)


def plan_plain(B: int, G: int, V: VerifyCost) -> Plan:
    t = tgs_plain(V, B)
    return Plan("off", 0, G, 0, B, 1, t, t * B)


def choose(B: int, G: int, drafts: dict[int, DraftCost], verifies: dict[int, VerifyCost], p: float,
           verify_configs: list[int] | None = None, cap: int = 16) -> dict[str, Plan]:
    """The best plan of each mode at batch B on G resources; 'best' names the winner."""
    plans = {"off": plan_plain(B, G, verifies[G]), "coupled": plan_coupled(B, G, drafts[G], verifies[G], p, cap)}
    dec = plan_decoupled(B, G, verify_configs or sorted(verifies), drafts, verifies, p, cap)
    if dec is not None:
        plans["decoupled"] = dec
    plans["best"] = max(plans.values(), key=lambda q: q.throughput)
    return plans


# -- Alg. 2: per-request reconfiguration -------------------------------------------------------------
def reconfigure(acceptance: dict[int, float], D: DraftCost, V: VerifyCost, cap: int = 16, batch: int = 1,
                p_batch: float = 0.5, w_batch: int = 2) -> dict[int, tuple[int, str]]:
    """Alg. 2: for each request accepting less than the average, the window and mode (coupled or
    decoupled) with the higher TGS at its own p. acceptance: request -> p; D, V: the costs of the plan's
    drafting and verifying resources. Returns request -> (w, "coupled" | "decoupled"); requests at or
    above average keep the plan.

    batch = 1 is the paper's b = 1 comparison: coupled takes w D(1) + V(1, w + 1) per window, decoupled
    IL_D(1). In a batch the round time IL is the batch's (p_batch, w_batch) and one request only adds
    its verify tokens to it; a coupled request then sits out every other round (its window is drafted
    meanwhile), so it yields tau_C per two rounds: tau_C / (2 IL + V'_n (w + 1)) against
    tau_D / (IL + V'_n slots_D)."""
    if not acceptance:
        return {}
    mean = sum(acceptance.values()) / len(acceptance)
    il = il_decoupled(D, V, batch, p_batch, w_batch)
    out = {}
    for r, p in acceptance.items():
        if p >= mean:
            continue
        if batch <= 1:
            tc, wc = max((tgs_coupled(D, V, 1, p, w), w) for w in range(1, cap + 1))
            wd, td = best_window(D, V, 1, p, cap)
        else:
            tc, wc = max((tau_coupled(p, w) / (2 * il + V.per_token * (w + 1)), w) for w in range(1, cap + 1))
            td, wd = max((tau_decoupled(p, w) / (il + V.per_token * slots_decoupled(p, w)), w)
                         for w in range(1, cap + 1))
        out[r] = (wd, "decoupled") if td >= tc else (wc, "coupled")
    return out


def save_tgs_profile(prof: dict, path: str | Path, **meta) -> None:
    """Write a profile {"drafts": {g: DraftCost}, "verifies": {g: VerifyCost}, "acceptance", "points"} as JSON."""
    blob = {"drafts": {str(g): [c.alpha, c.slope] for g, c in prof["drafts"].items()},
            "verifies": {str(g): [c.beta, c.per_request, c.per_token] for g, c in prof["verifies"].items()},
            "acceptance": prof.get("acceptance"), "points": {str(g): v for g, v in prof["points"].items()}, **meta}
    Path(path).write_text(json.dumps(blob, indent=1))


def load_tgs_profile(path: str | Path) -> dict:
    """The profile save_tgs_profile wrote; UserError when it cannot be read."""
    try:
        blob = json.loads(Path(path).read_text())
        return {"drafts": {int(g): DraftCost(*v) for g, v in blob["drafts"].items()},
                "verifies": {int(g): VerifyCost(*v) for g, v in blob["verifies"].items()},
                "acceptance": blob.get("acceptance"), "points": blob.get("points", {})}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"cannot read the TGS profile {path}: {e} (make one with `tailrl profile spec`)") from None
