"""The arithmetic of `tailrl bench exactness` (tailrl/bench/exactness.py): token identity of two runs of the
same requests, where diverging sequences first differ, logprob deltas, and the summary table. Pure functions
on host lists: the runs hand over token ids and logprobs in the same (uid, sample index) order."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

HIST_BINS = 8  # equal-width bins over the completion positions


def first_divergence(ref: Sequence[int], other: Sequence[int]) -> int | None:
    """Index of the first position where two token lists differ; a list that stops early differs at the
    shorter one's length; None when they are identical."""
    for i, (a, b) in enumerate(zip(ref, other)):
        if a != b:
            return i
    return None if len(ref) == len(other) else min(len(ref), len(other))


def histogram(values: Sequence[int], length: int, bins: int = HIST_BINS) -> dict:
    """Counts of integer positions in [0, length) over `bins` equal-width bins (width ceil(length / bins));
    {"edges": bins + 1 ints, "counts": bins ints}. A value past the end lands in the last bin."""
    width = max(1, math.ceil(length / bins))
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, v // width)] += 1
    return {"edges": [i * width for i in range(bins)] + [length], "counts": counts}


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a rate k / n (95% at z = 1.96): what n sequences say about the identity
    rate itself (n = 0: the whole [0, 1])."""
    if n == 0:
        return 0.0, 1.0
    p, d = k / n, 1 + z * z / n
    mid, half = (p + z * z / (2 * n)) / d, z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, mid - half), min(1.0, mid + half)


def compare_runs(ref_tokens: Sequence[Sequence[int]], ref_logprobs: Sequence[Sequence[float]],
                 tokens: Sequence[Sequence[int]], logprobs: Sequence[Sequence[float]], length: int,
                 keys: Sequence | None = None) -> dict:
    """Run `tokens` against the reference run `ref_tokens`, row i being the same request sample in both
    (S rows of token ids / per-token logprobs; `length`: the completion budget, for the histogram; keys: S
    names of the rows, e.g. (uid, sample index), default the row index).

    identity_rate: share of rows whose token ids are identical (identity_ci95: its Wilson interval); first_divergence: over the diverging rows,
    count / min / median / max of the first differing position, its histogram and `at`: [key, position] per
    diverging row (where to look); max_abs_dlogprob: the
    largest |logprob - reference logprob| over the identical rows' tokens (0.0 when none);
    logprobs_bitwise: share of identical rows whose logprobs are all equal to the reference's;
    logprob_tokens_equal: share of the identical rows' tokens whose logprob equals the reference's."""
    if len(ref_tokens) != len(tokens):
        raise ValueError(f"runs of different sizes: {len(ref_tokens)} vs {len(tokens)} sequences")
    firsts, at, dmax, bitwise, same, equal, tokens_same = [], [], 0.0, 0, 0, 0, 0
    for i, (rt, rl, t, lp) in enumerate(zip(ref_tokens, ref_logprobs, tokens, logprobs)):
        d = first_divergence(rt, t)
        if d is not None:
            firsts.append(d)
            at.append([keys[i] if keys is not None else i, d])
            continue
        same += 1
        deltas = [abs(a - b) for a, b in zip(rl, lp)]
        dmax = max([dmax, *deltas])
        bitwise += not any(deltas)
        equal += deltas.count(0.0)
        tokens_same += len(deltas)
    n = len(tokens)
    div = {"count": len(firsts)}
    if firsts:
        div |= {"min": min(firsts), "median": statistics.median(firsts), "max": max(firsts),
                "histogram": histogram(firsts, length), "at": at}
    return {"sequences": n, "identical": same, "identity_rate": same / n if n else 1.0,
            "identity_ci95": list(wilson(same, n)), "first_divergence": div,
            "max_abs_dlogprob": dmax, "logprobs_bitwise": bitwise / same if same else None,
            "logprob_tokens_equal": equal / tokens_same if tokens_same else None}


def token_deltas(engine: Sequence[Sequence[float]], trainer: Sequence[Sequence[float]]) -> dict:
    """Per-token |engine logprob - trainer logprob| over rows of equal length (S rows, each row's tokens):
    max, mean, the number of tokens and the share that are exactly equal."""
    deltas = [abs(a - b) for e, t in zip(engine, trainer) for a, b in zip(e, t)]
    if not deltas:
        return {"tokens": 0, "max": 0.0, "mean": 0.0, "equal": None}
    return {"tokens": len(deltas), "max": max(deltas), "mean": sum(deltas) / len(deltas),
            "equal": sum(d == 0.0 for d in deltas) / len(deltas)}


def _num(x, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def _divergence_cell(c: dict) -> str:
    d = c["first_divergence"]
    if not d["count"]:
        return "—"
    h = d["histogram"]
    bins = ", ".join(f"{lo}–{hi - 1}: {k}" for lo, hi, k in zip(h["edges"], h["edges"][1:], h["counts"]) if k)
    return f"{d['count']} at {d['min']} / {d['median']:g} / {d['max']} ({bins})"


def summary(res: dict) -> str:
    """summary.md: the settings, one row per comparison, the engine-vs-trainer logprob rows, each run's cost."""
    s = res["settings"]
    lines = [f"# tailrl bench exactness (engine.exact={s['exact']}, {s['shape']}, {s['device']}, {s['dtype']}, "
             f"torch {res['torch']})", "",
             (f"{s['sequences']} sequences ({s['prompts']} chat-formatted questions x up to {s['group']} samples), up to "
              f"{s['new_tokens']} new tokens (EOS stops), temperature {s.get('temperature', 1.0)}, "
              if s.get("real_model") else
              f"{s['sequences']} sequences ({s['prompts']} random prompts x up to {s['group']} samples) x "
              f"{s['new_tokens']} forced new tokens, temperature 1, ")
             + f"sampler {s['sampler']}, seed {s['seed']}. "
             "Reference: every request alone (max_batch_size=1). First divergence: count at min / median / max "
             "position (histogram bins of positions: count).", "",
             "| run | vs | identical | diverging: first position | max \\|Δ logprob\\| (identical) | "
             "logprobs bitwise equal: sequences / tokens |", "|---|---|---|---|---|---|"]
    for c in res["comparisons"]:
        if c.get("not_measured"):
            lines.append(f"| {c['run']} | {c['vs']} | not measured: {c['not_measured']} | | | |")
            continue
        bit = f"{_num(c['logprobs_bitwise'], '.1%')} / {_num(c['logprob_tokens_equal'], '.1%')}"
        lo, hi = c.get("identity_ci95") or wilson(c["identical"], c["sequences"])
        lines.append(f"| {c['run']} | {c['vs']} | {c['identity_rate']:.2%} ({c['identical']}/{c['sequences']}; "
                     f"95% CI {lo:.1%}–{hi:.1%}) | "
                     f"{_divergence_cell(c)} | {c['max_abs_dlogprob']:.3g} | {bit} |")
    lines += ["", "Rollout logprobs vs the trainer's forward of the same tokens (make_train_batch padding, "
              "batch_logprobs micro-batches, temperature 1):", "",
              "| rollout | tokens | max \\|Δ\\| | mean \\|Δ\\| | exactly equal |", "|---|---|---|---|---|"]
    for t in res["trainer"]:
        eq = "—" if t["equal"] is None else f"{t['equal']:.1%}"
        lines.append(f"| {t['run']} | {t['tokens']} | {t['max']:.3g} | {t['mean']:.3g} | {eq} |")
    lines += ["", "| run | max batch | wall s | forwards | verify forwards | tokens per verified row | "
              "draft acceptance |", "|---|---|---|---|---|---|---|"]
    for name, r in res["runs"].items():
        lines.append(f"| {name} | {r['max_batch_size']} | {r['wall_s']:.1f} | {_num(r.get('forwards'), 'd')} | "
                     f"{_num(r.get('verify_steps'), 'd')} | {_num(r.get('tokens_per_verify_row'), '.2f')} | "
                     f"{_num(r.get('acceptance'), '.1%')} |")
    lines += ["", *res["notes"]]
    return "\n".join(lines)
