"""Latency models: seconds for one forward of a TP group, from a roofline or from a measured profile.

Both answer the same questions, so policies never know which one they use:

    forward(tp, batch, new_tokens, context_tokens) -> s   one forward over `new_tokens` new tokens of
                                                          `batch` sequences holding `context_tokens`
                                                          KV tokens in total (decode: new = batch)
    decode(tp, batch, context_tokens) -> s                forward(tp, batch, batch, context_tokens)
    prefill(tp, tokens, batch) -> s                       forward over whole prompts

Roofline (per GPU of a TP group): max(bytes / HBM, FLOPs / peak) + 2 all-reduces per layer + a fixed
per-forward cost. Profiled: PAT §4.2's predictor — piecewise-linear in total context tokens along each
profiled batch size, interpolated between the two nearest profiled batch sizes.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from pathlib import Path

from tailrl.errors import UserError
from tailrl.perf.hardware import GPU, ModelShape


@dataclass(frozen=True)
class EngineOverheads:
    """How close an inference engine gets to the roofline. Not hardware facts: calibrated once against
    published measurements (see docs/results.md, "simulator calibration")."""

    hbm_eff: float = 0.8  # fraction of HBM peak reached by weight / KV reads
    mfu: float = 0.5  # fraction of tensor peak reached by forward matmuls
    link_eff: float = 0.7  # fraction of link bandwidth reached by all-reduce
    ar_base_us: float = 8.0  # all-reduce latency per call, any TP > 1 (launch + sync)
    ar_hop_us: float = 0.5  # extra latency per ring hop (2 (tp - 1) hops)
    step_ms: float = 1.0  # per forward: scheduling, sampling, launches


# Calibrated per GPU preset (docs/results.md, "simulator calibration"):
#  a40:  PAT §3.1 per-token decode latencies of LLaMA3.1-8B on 8 A40s over PCIe (batch 1 and 128 at TP2
#        and TP8, 2K context per sequence assumed), all four within 9%;
#  h100: PAT §5.3 generation times on 8 H100s (static TP2/DP4 -> PAT: LLaMA3.1-8B at 24K 134.3 -> 87.9 s,
#        Qwen3-14B at 16K 133.9 -> 91.1 s), all four within 10% (a grid over step_ms, ar_base_us,
#        ar_hop_us); h200 shares the H100 engine constants (same die and links; HBM from the preset).
CALIBRATED: dict[str, EngineOverheads] = {
    "a40": EngineOverheads(hbm_eff=0.8, mfu=0.5, link_eff=0.35, ar_base_us=20.0, ar_hop_us=5.0, step_ms=1.0),
    "h100": EngineOverheads(hbm_eff=0.8, mfu=0.5, link_eff=0.7, ar_base_us=8.0, ar_hop_us=1.0, step_ms=1.2),
    "h200": EngineOverheads(hbm_eff=0.8, mfu=0.5, link_eff=0.7, ar_base_us=8.0, ar_hop_us=1.0, step_ms=1.2),
}


class Roofline:
    def __init__(self, gpu: GPU, model: ModelShape, eng: EngineOverheads = EngineOverheads()):
        self.gpu, self.model, self.eng = gpu, model, eng

    def allreduce(self, tp: int, nbytes: float) -> float:
        """Ring all-reduce of nbytes per rank: latency + 2 (tp-1)/tp * nbytes / bandwidth."""
        if tp <= 1:
            return 0.0
        e = self.eng
        lat = (e.ar_base_us + e.ar_hop_us * 2 * (tp - 1)) * 1e-6
        return lat + 2 * (tp - 1) / tp * nbytes / (self.gpu.link_gbps * 1e9 * e.link_eff)

    def forward(self, tp: int, batch: int, new_tokens: int, context_tokens: float) -> float:
        m, g, e = self.model, self.gpu, self.eng
        kv_shards = min(tp, m.kv_heads)  # KV heads are split across TP ranks, replicated beyond that
        bytes_ = m.weight_bytes / tp + context_tokens * m.kv_bytes_per_token / kv_shards
        avg_ctx = context_tokens / max(batch, 1)
        flops = new_tokens * m.flops_per_token(avg_ctx) / tp
        compute = max(bytes_ / (g.hbm_tbps * 1e12 * e.hbm_eff), flops / (g.tflops * 1e12 * e.mfu))
        comm = 2 * m.layers * self.allreduce(tp, new_tokens * m.hidden * m.bytes_per_param)
        return compute + comm + e.step_ms * 1e-3

    def decode(self, tp: int, batch: int, context_tokens: float) -> float:
        return self.forward(tp, batch, batch, context_tokens)

    def prefill(self, tp: int, tokens: int, batch: int = 1) -> float:
        return self.forward(tp, batch, tokens, tokens / 2)  # causal: on average half the prompt is context

    def round_s(self, sequences: int) -> float:
        return 0.0  # per-forward costs (step_ms) carry the engine's overhead at cluster scale


def interp(xs: list[float], ys: list[float], x: float) -> float:
    """Piecewise-linear y(x) through sorted points, extrapolated linearly beyond both ends."""
    if len(xs) == 1:
        return ys[0]
    i = min(max(bisect.bisect_left(xs, x), 1), len(xs) - 1)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 != x0 else y0


class Profiled:
    """Measured latencies (`tailrl profile engine` writes them):

        {"decode": {"<tp>": {"<batch>": [[context_tokens, seconds], ...]}},
         "prefill": {"<tp>": [[tokens, seconds], ...]},
         "round": [seconds, seconds per sequence]}        (optional)
    """

    def __init__(self, table: dict):
        try:
            self.decode_pts = {int(tp): {int(b): sorted((float(c), float(s)) for c, s in pts) for b, pts in by_b.items()}
                               for tp, by_b in table["decode"].items()}
            self.prefill_pts = {int(tp): sorted((float(n), float(s)) for n, s in pts)
                                for tp, pts in table["prefill"].items()}
            self.round = tuple(float(x) for x in table.get("round", (0.0, 0.0)))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise UserError(f"latency profile is malformed ({e!r}); expected decode/prefill tables") from None
        self.table = table

    @classmethod
    def load(cls, path: str | Path) -> Profiled:
        p = Path(path)
        if not p.is_file():
            raise UserError(f"latency profile not found: {p} (make one with `tailrl profile engine`)")
        return cls(json.loads(p.read_text()))

    def _curve(self, tp: int, batch: int, ctx: float) -> float:
        pts = self.decode_pts[tp][batch]
        floor = min(s for _, s in pts)  # extrapolating below the profiled contexts never goes under it
        return max(interp([c for c, _ in pts], [s for _, s in pts], ctx), floor)

    def decode(self, tp: int, batch: int, context_tokens: float) -> float:
        if tp not in self.decode_pts:
            raise UserError(f"latency profile has no TP={tp}; profiled: {sorted(self.decode_pts)}")
        bs = sorted(self.decode_pts[tp])
        i = min(max(bisect.bisect_left(bs, batch), 1), len(bs) - 1) if len(bs) > 1 else 0
        if len(bs) == 1:
            return self._curve(tp, bs[0], context_tokens)
        b0, b1 = bs[i - 1], bs[i]
        y0, y1 = self._curve(tp, b0, context_tokens), self._curve(tp, b1, context_tokens)
        return y0 + (y1 - y0) * (batch - b0) / (b1 - b0)

    def prefill(self, tp: int, tokens: int, batch: int = 1) -> float:
        pts = self.prefill_pts[tp]
        return max(interp([n for n, _ in pts], [s for _, s in pts], tokens), 0.0)

    def round_s(self, sequences: int) -> float:
        return self.round[0] + self.round[1] * sequences

    def forward(self, tp: int, batch: int, new_tokens: int, context_tokens: float) -> float:
        """A forward over several new tokens per sequence (speculative verification): the decode cost
        at the same context plus the extra tokens priced like prefill tokens."""
        extra = max(new_tokens - batch, 0)
        return self.decode(tp, batch, context_tokens) + (
            self.prefill(tp, extra) - self.prefill(tp, 0) if extra else 0.0)
