"""One step's rollout metrics from what its rollout phase produced (train/rollout.py RolloutPhase): rewards,
lengths, finish reasons, tail telemetry (tailrl/tail.py's vocabulary) and speculation. veRL / TRL names
where those exist (`reward/mean`, `response_length/mean`, `frac_reward_zero_std`)."""

from __future__ import annotations

import statistics

from tailrl.engine.telemetry import merge_spec
from tailrl.tail import group_ratios, straggler_rate


def rollout_metrics(phase, reward_names: list[str] | None, tau: float) -> dict[str, float]:
    """phase: a RolloutPhase (every generated group, this rank's traces); reward_names: the reward functions'
    (the first one's >= 1 is `reward/accuracy`); tau: the straggler threshold."""
    gen = phase.generated
    scores = [s for g in gen for s in g.scores]
    lengths = [n for g in gen for n in g.lengths]
    reasons = [r.finish_reason for g in gen for r in g.rollouts]
    m: dict[str, float] = {
        "reward/mean": statistics.mean(scores), "reward/std": statistics.pstdev(scores),
        "frac_reward_zero_std": sum(g.score_std == 0 for g in gen) / len(gen),
        "response_length/mean": statistics.mean(lengths), "response_length/max": float(max(lengths)),
        "response_length/min": float(min(lengths)),
        "response_length/clip_ratio": sum(r == "length" for r in reasons) / len(reasons),
        "rollout/errors": float(sum(r == "error" for r in reasons)),
        "reward/errors": float(phase.reward_errors), "reward/timeouts": float(phase.reward_timeouts),
    }
    for name in (gen[0].components if gen else []):
        m[f"reward/{name}/mean"] = statistics.mean(v for g in gen for v in g.components[name])
    first = reward_names[0] if reward_names else None
    if first and f"reward/{first}/mean" in m:
        m["reward/accuracy"] = statistics.mean(float(v >= 1.0) for g in gen for v in g.components[first])
    # length statistics from the step's groups (every rank's, all-gathered), timing from this rank's traces
    done = [[r.num_tokens for r in g.rollouts if r.finish_reason != "error"] for g in gen]
    ratios = group_ratios(done)
    traces = phase.traces
    m |= {"rollout/len_max_over_median": statistics.mean(ratios) if ratios else 0.0,
          "rollout/straggler_rate": straggler_rate(done, tau),
          "rollout/tail_efficiency": statistics.mean(tr.tail_efficiency() for tr in traces),
          "rollout/tail_phase_frac": statistics.mean(tr.tail_phase_frac() for tr in traces),
          "rollout/tokens_per_s": sum(tr.decode_tokens for tr in traces) / max(1e-9, sum(tr.t_end for tr in traces))}
    return m | merge_spec([tr.spec for tr in traces])  # speculation (engine.spec.method != none)
