"""PAT's switch controller (Alg. 1) on a real rollout: the simulator's `PatPolicy` (predicted
remaining time under the current layout vs each candidate plus its one-time switch cost, every
unfinished request bounded by max_new_tokens) fed with the measured `tailrl profile tp` table
(piecewise-linear predictor, `tailrl.perf.latency.Profiled`) and the measured bandwidth."""

from __future__ import annotations

from tailrl.parallel.layout import Layout
from tailrl.perf.hardware import ModelShape
from tailrl.perf.latency import Profiled
from tailrl.perf.pat import PatPolicy


def model_bytes(args, bytes_per_param: int = 4) -> tuple[float, float]:
    """(all weight bytes — a reshard moves the embeddings too —, K/V bytes per token) of a ModelArgs."""
    spec = ModelShape.of(args, bytes_per_param)
    return spec.params * bytes_per_param, spec.kv_bytes_per_token


class PatDecider:
    """A `Decider` for tailrl.parallel.rollout.tp_generate."""

    def __init__(self, profile: dict, args, world: int, max_new_tokens: int, kv: str = "auto",
                 tp_options: tuple[int, ...] | None = None, min_gain: float = 0.1):
        """min_gain: hysteresis against measured-latency noise — a switch must save this fraction of
        the predicted remaining time (PAT's rule is min_gain = 0; with noisy predictions it flip-flops)."""
        self.lat = Profiled(profile)
        tps = tuple(sorted(int(t) for t in profile["decode"]))
        opts = tuple(t for t in (tp_options or tps) if t in tps and world % t == 0)
        weights, kv_tok = model_bytes(args)
        self.world = world
        self.policy = PatPolicy(self.lat, weights, kv_tok, world, opts, max_new_tokens, float(profile["bandwidth"]),
                                kv=kv, group_init_s=float(profile.get("group_init_s", 0.0)),
                                # the GPU's CUDA-graph recapture slot: here, building the new engine (KV pool)
                                recapture_s=max(profile.get("engine_init_s", {}).values(), default=0.0),
                                min_gain=min_gain)

    def __call__(self, it: int, t: float, layout: Layout, per_replica: list[list[tuple[int, int]]]):
        self.policy.pool.add(layout.tp)
        m = self.policy.max_len
        reqs = [(ctx, gen) for rep in per_replica for ctx, gen in rep]
        current = [[(ctx, m - gen) for ctx, gen in rep] for rep in per_replica]
        tp, cost, stay, chosen = self.policy.decide(layout.tp, reqs, current)
        if cost is None:
            return None
        path = "recompute" if cost.kv_path == "none" else cost.kv_path  # nothing cached yet: only tokens move
        return Layout(tp, self.world), path, {"predicted_stay_s": stay, "predicted_switch_s": chosen,
                                                      "predicted_cost_s": cost.total}
