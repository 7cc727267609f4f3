"""RolloutTrace: what happened during one rollout, and the tail metrics derived from it.

The tail vocabulary is tailrl/tail.py's (ARCHITECTURE.md): per group `len_max_over_median`, straggler
event = ratio > tau (1.25); per rollout `straggler_rate`, `tail_phase_frac`, `tail_efficiency`.

- tail phase: from the first moment the active batch falls below half of its peak until the end
  (PAT's "tail phase": a few long responses keep running while most have finished);
- tail_efficiency = (batch-1 decode time of the longest rollout) / (actual rollout time). The
  batch-1 step time is the median decode step at active batch 1 in this trace, or, when the trace has
  none, the engine's calibration. A synchronous step cannot exceed 1 without speculation.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from tailrl.tail import DEFAULT_TAU, group_ratios, straggler_rate, tail_efficiency


def merge_spec(rows: list[dict[str, float]]) -> dict[str, float]:
    """Speculation metrics of several rollouts as one: rates and lengths averaged, the count of
    Best-of-N requests summed."""
    rows = [r for r in rows if r]
    keys = sorted({k for r in rows for k in r})
    return {k: sum(r.get(k, 0.0) for r in rows) / (1 if k == "spec/bon_requests" else len(rows)) for k in keys}


@dataclass
class StepRecord:
    kind: str  # "prefill" | "decode" | "verify"
    t0: float
    t1: float
    batch: int  # active sequences in this forward
    tokens: int  # tokens processed by the forward
    emitted: int = 0  # tokens this step appended to its sequences (speculation: > batch when drafts pay)


@dataclass
class RequestRecord:
    uid: int
    sample_index: int
    t_start: float
    t_finish: float
    num_tokens: int
    finish_reason: str
    prompt_tokens: int = 0
    waits: tuple[tuple[float, float], ...] = ()  # multi-turn: (parked, resumed) seconds per observation


def phase_rates(c: dict[str, float]) -> dict[str, float]:
    """A phase's figures from its raw sums (RolloutTrace.phase_counts, or their sum over rollouts)."""
    rows, emit, drafted = c["rows"], c["emit"], c["drafted"]
    return {"seconds": c["seconds"], "tokens": c["tokens"], "verifies": c["verifies"],
            "tokens_per_s": c["tokens"] / c["seconds"] if c["seconds"] > 0 else 0.0,
            "emitted_per_verify": emit / rows if rows else 0.0,
            "acceptance": (emit - rows) / drafted if drafted > 0 else 0.0}


@dataclass
class RolloutTrace:
    steps: list[StepRecord] = field(default_factory=list)
    requests: list[RequestRecord] = field(default_factory=list)
    t_end: float = 0.0
    b1_step_s: float | None = None  # calibrated batch-1 decode step time (fallback)
    tau: float = DEFAULT_TAU
    preemptions: int = 0
    graph_captures: int = 0  # CUDA graphs the engine has captured so far (all rollouts: flat once reused)
    spec: dict[str, float] = field(default_factory=dict)  # speculation metrics (spec/...), empty when off

    # -- raw ------------------------------------------------------------------------------------
    @property
    def rollout_s(self) -> float:
        return self.t_end

    @property
    def decode_tokens(self) -> int:
        return sum(r.num_tokens for r in self.requests if r.finish_reason != "error")

    def timeline(self) -> tuple[list[float], list[int]]:
        """(times, active batch) per forward, for plots."""
        return [s.t0 for s in self.steps], [s.batch for s in self.steps]

    def parked_timeline(self) -> tuple[list[float], list[int]]:
        """(times, sequences parked waiting for an observation) at each park / resume event, for plots."""
        events = sorted((t, d) for r in self.requests for t0, t1 in r.waits for t, d in ((t0, 1), (t1, -1)))
        times, counts, n = [], [], 0
        for t, d in events:
            n += d
            times.append(t)
            counts.append(n)
        return times, counts

    def parked_frac(self) -> float:
        """Share of the requests' time (admitted to finished, summed) spent parked waiting for tools."""
        total = sum(r.t_finish - r.t_start for r in self.requests)
        return sum(t1 - t0 for r in self.requests for t0, t1 in r.waits) / total if total > 0 else 0.0

    def to_json(self) -> dict:
        """Compact JSON form (traces.jsonl; `tailrl simulate` replays it)."""
        return {"t_end": self.t_end, "preemptions": self.preemptions,
                "requests": [[r.uid, r.sample_index, r.prompt_tokens, r.num_tokens, r.finish_reason, r.t_start, r.t_finish]
                             + ([[list(w) for w in r.waits]] if r.waits else []) for r in self.requests],
                "steps": [[s.kind, s.t0, s.t1, s.batch, s.tokens, s.emitted] for s in self.steps]}

    @classmethod
    def from_json(cls, d: dict) -> RolloutTrace:
        return cls(steps=[StepRecord(*s) for s in d.get("steps", [])],
                   requests=[RequestRecord(u, i, t0, t1, n, fr, p, tuple(tuple(w) for w in (waits[0] if waits else ())))
                             for u, i, p, n, fr, t0, t1, *waits in d["requests"]],
                   t_end=float(d["t_end"]), preemptions=int(d.get("preemptions", 0)))

    # -- derived --------------------------------------------------------------------------------
    def group_lengths(self) -> dict[int, list[int]]:
        groups: dict[int, list[int]] = defaultdict(list)
        for r in self.requests:
            if r.finish_reason != "error":
                groups[r.uid].append(r.num_tokens)
        return dict(groups)

    def len_max_over_median(self) -> list[float]:
        return group_ratios(list(self.group_lengths().values()))

    def straggler_rate(self) -> float:
        return straggler_rate(list(self.group_lengths().values()), self.tau)

    def tail_phase_frac(self) -> float:
        if not self.steps or self.t_end <= 0:
            return 0.0
        peak = max(s.batch for s in self.steps)
        for s in self.steps:
            if s.kind != "prefill" and s.batch < peak / 2:
                return (self.t_end - s.t0) / self.t_end
        return 0.0

    def b1_step_time(self) -> float | None:
        b1 = [s.t1 - s.t0 for s in self.steps if s.kind == "decode" and s.batch == 1]
        return statistics.median(b1) if b1 else self.b1_step_s

    def tail_efficiency(self) -> float:
        lengths = [r.num_tokens for r in self.requests if r.finish_reason != "error"]
        return tail_efficiency(max(lengths, default=0), self.b1_step_time(), self.t_end)

    def phases(self, tail_batch: int = 4) -> dict[str, dict[str, float]]:
        """Decode steps split by active batch: "large" (batch > tail_batch) and "tail" (<= tail_batch). Per
        phase: wall seconds (a step owns the time since the previous step ended), tokens emitted, tokens/s,
        verify steps, tokens emitted per sequence per verify (accepted + 1) and the share of drafted tokens
        accepted (verify rows beyond each sequence's pending token; Best-of-N branches count as drafted)."""
        return {p: phase_rates(d) for p, d in self.phase_counts(tail_batch).items()}

    def phase_counts(self, tail_batch: int = 4) -> dict[str, dict[str, float]]:
        """The raw sums behind phases() (seconds, tokens, verifies, verified rows, tokens emitted by verify
        steps, drafted tokens): add them over rollouts, then phase_rates()."""
        out = {p: dict.fromkeys(("seconds", "tokens", "verifies", "rows", "emit", "drafted"), 0.0)
               for p in ("large", "tail")}
        prev = None
        for s in self.steps:
            if s.kind != "prefill":
                ph = out["tail" if s.batch <= tail_batch else "large"]
                ph["seconds"] += s.t1 - (s.t0 if prev is None else prev)
                ph["tokens"] += s.emitted
                if s.kind == "verify":
                    ph["verifies"] += 1
                    ph["rows"] += s.batch
                    ph["emit"] += s.emitted
                    ph["drafted"] += s.tokens - s.batch
            prev = s.t1
        return out

    def summary(self) -> dict[str, float]:
        ratios = self.len_max_over_median()
        lengths = [r.num_tokens for r in self.requests if r.finish_reason != "error"]
        return {
            "timing_s/gen": self.t_end,
            "rollout/tokens_per_s": self.decode_tokens / self.t_end if self.t_end > 0 else 0.0,
            "rollout/straggler_rate": self.straggler_rate(),
            "rollout/len_max_over_median": statistics.mean(ratios) if ratios else 0.0,
            "rollout/tail_phase_frac": self.tail_phase_frac(),
            "rollout/tail_efficiency": self.tail_efficiency(),
            "rollout/preemptions": float(self.preemptions),
            "rollout/graph_captures": float(self.graph_captures),
            "response_length/mean": statistics.mean(lengths) if lengths else 0.0,
            "response_length/max": float(max(lengths)) if lengths else 0.0,
        }

