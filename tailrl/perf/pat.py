"""PAT in the simulator: predicted remaining decode time per layout, the one-time switch cost, and the
switch decision (PAT Alg. 1, §4.2-4.3).

The prediction is conservative as in the paper: every unfinished request is assumed to run to
max_len. A node's remaining time under a layout is that of its slowest replica after the unfinished
requests are spread over the layout's DP replicas (longest first onto the least loaded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tailrl.perf.hardware import GPU, ModelShape


def decode_time(lat, tp: int, reqs: list[tuple[float, int]], chunk: int = 256) -> float:
    """Seconds to decode requests (context tokens, tokens still to generate) together on one replica,
    each leaving the batch when done. Costs are taken at each chunk's mid context (exact for costs
    linear in context)."""
    live = sorted(((c, r) for c, r in reqs if r > 0), key=lambda x: x[1])
    t, done, i = 0.0, 0, 0
    ctx = sum(c for c, _ in live)
    while i < len(live):
        b = len(live) - i
        k = min(live[i][1] - done, chunk)
        t += k * lat.decode(tp, b, ctx + b * (k - 1) / 2)
        ctx += b * k
        done += k
        while i < len(live) and live[i][1] <= done:
            ctx -= live[i][0] + live[i][1]  # a finished request's KV is freed
            i += 1
    return t


def spread(items: list, replicas: int, weight=lambda x: x[1]) -> list[list]:
    """Largest weight first onto the least loaded replica (balanced DP redistribution); by default
    items are (context, remaining tokens) and weigh their remaining tokens."""
    out: list[list] = [[] for _ in range(replicas)]
    load = [0.0] * replicas
    for it in sorted(items, key=lambda x: -weight(x)):
        j = min(range(replicas), key=lambda k: (load[k], len(out[k])))
        out[j].append(it)
        load[j] += weight(it)
    return out


@dataclass
class SwitchCost:
    weights_s: float
    kv_s: float
    groups_s: float
    recapture_s: float
    kv_path: str  # "migrate" | "recompute" | "none"

    @property
    def total(self) -> float:
        return self.weights_s + self.kv_s + self.groups_s + self.recapture_s


@dataclass
class PatPolicy:
    """The switch controller of one node (its pool of process groups persists across rounds)."""

    lat: object  # latency model: Roofline (simulator) or Profiled (measured, tailrl/parallel)
    weight_bytes: float  # the model's weights
    kv_bytes_per_token: float  # K/V of one token, all layers and heads
    node_gpus: int
    tp_options: tuple[int, ...]
    max_len: int
    bandwidth: float  # bytes/s one rank moves during a switch (link x efficiency, or measured)
    kv: str = "auto"  # auto | migrate | recompute
    group_init_s: float = 1.0  # first use of a TP degree: communicator creation
    recapture_s: float = 0.5  # CUDA graph recapture after a switch
    pool: set[int] = field(default_factory=set)
    min_gain: float = 0.0  # switch only when it saves this fraction of the predicted remaining time

    @classmethod
    def for_hardware(cls, lat, model: ModelShape, gpu: GPU, link_eff: float, **kw) -> PatPolicy:
        return cls(lat, model.weight_bytes, model.kv_bytes_per_token, bandwidth=gpu.link_gbps * 1e9 * link_eff, **kw)

    def switch_cost(self, tp_from: int, tp_to: int, contexts: list[int]) -> SwitchCost:
        """Weights: layer-wise all-gather then slice (merging) or fetching the missing part (splitting);
        KV: migration (volume / bandwidth, PAT Eq. 1-2) or recompute (a prefill of all unfinished
        requests at their RMS context, Eq. 3-4), whichever is cheaper unless forced."""
        W = self.weight_bytes
        moved = W * (1 - 1 / tp_from) if tp_to > tp_from else max(W / tp_to - W / tp_from, 0.0)
        weights = moved / self.bandwidth
        if contexts:
            migrate = sum(contexts) * self.kv_bytes_per_token / tp_from / self.bandwidth
            rms = math.sqrt(sum(c * c for c in contexts) / len(contexts))
            per_replica = max(1, math.ceil(len(contexts) / (self.node_gpus // tp_to)))  # replicas recompute in parallel
            recompute = self.lat.prefill(tp_to, int(rms * per_replica), per_replica)
            path = self.kv if self.kv != "auto" else ("migrate" if migrate <= recompute else "recompute")
            kv = migrate if path == "migrate" else recompute
        else:
            path, kv = "none", 0.0
        groups = 0.0 if tp_to in self.pool else self.group_init_s
        return SwitchCost(weights, kv, groups, self.recapture_s, path)

    def predict(self, tp: int, reqs: list[tuple[float, int]]) -> float:
        """Remaining seconds for a node's unfinished requests (context, generated) under layout tp."""
        bound = [(c, self.max_len - g) for c, g in reqs]
        return max((decode_time(self.lat, tp, part) for part in spread(bound, self.node_gpus // tp) if part),
                   default=0.0)

    def decide(self, tp: int, reqs: list[tuple[float, int]], current: list[list[tuple[float, int]]] | None = None
               ) -> tuple[int, SwitchCost | None, float, float]:
        """reqs: the node's unfinished (context, generated); current: (context, max_len bound) per
        replica as they are placed now (default: spread evenly). Returns (tp to run, its switch cost or
        None to stay, predicted remaining if staying, predicted remaining with the choice)."""
        stay = (max((decode_time(self.lat, tp, part) for part in current if part), default=0.0)
                if current is not None else self.predict(tp, reqs))
        best, best_t, best_cost = tp, stay * (1 - self.min_gain), None
        contexts = [int(c) for c, g in reqs if g > 0]  # requests with K/V to move (waiting ones have none)
        for cand in self.tp_options:
            if cand == tp or cand > self.node_gpus or self.node_gpus % cand:
                continue
            cost = self.switch_cost(tp, cand, contexts)
            t = self.predict(cand, reqs) + cost.total
            if t < best_t:
                best, best_t, best_cost = cand, t, cost
        return best, best_cost, stay, (best_t if best_cost is not None else stay)
