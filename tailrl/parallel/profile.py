"""`tailrl profile tp`: PAT's offline profiler (§4.2) on this machine — for each TP degree, tailrl's
engine in that layout (every DP replica busy, as in a real rollout) timed over a grid of batch sizes
and context lengths with dummy random-token batches, plus prefill latency, the bandwidth one rank
reaches in an all-gather, the cost of creating a process group and of building an engine (its KV
pool) in the layout. The JSON is the simulator's
`Profiled` table (one decode curve family per TP degree) with those extras, so the same predictor
serves `tailrl simulate` and the switch controller."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from tailrl.model import load
from tailrl.model.layers import TPContext
from tailrl.model.weights import full_tensors
from tailrl.parallel.dist import GroupPool, spawn
from tailrl.parallel.latency_profile import profile_engine
from tailrl.parallel.layout import Layout
from tailrl.parallel.shard import sharded
from tailrl.speculative import build_engine


def measure_bandwidth(nbytes: int = 1 << 24, reps: int = 3) -> float:
    """Bytes per second one rank receives in a world-wide all-gather (median of reps). Collective."""
    world = dist.get_world_size()
    x = torch.zeros(nbytes // 4 // world, dtype=torch.float32)  # this rank's share of the gathered tensor
    parts = [torch.empty_like(x) for _ in range(world)]
    times = []
    for _ in range(reps):
        dist.barrier()
        t = time.perf_counter()
        dist.all_gather(parts, x)
        times.append(time.perf_counter() - t)
    received = x.numel() * x.element_size() * (world - 1)
    return received / sorted(times)[len(times) // 2]


def profile_tp_rank(rank: int, world: int, args, tensors: list, engine_cfg, tps: list[int], batches, contexts,
                    steps: int) -> dict:
    """Runs on every rank (collective); rank 0's measurements are the profile."""

    out = {"decode": {}, "prefill": {}, "world": world}
    pool = GroupPool()
    for tp in tps:
        layout = Layout(tp, world)
        t = time.perf_counter()
        pool.layout_groups(layout)
        if tp > 1:
            out["group_init_s"] = max(out.get("group_init_s", 0.0), time.perf_counter() - t)
        model = sharded(args, tensors, TPContext(pool.get(layout.group_of(rank))))
        t = time.perf_counter()
        engine = build_engine(model, None, engine_cfg)  # the KV pool is allocated here: part of every switch's cost
        out.setdefault("engine_init_s", {})[str(tp)] = time.perf_counter() - t
        prof = profile_engine(engine, args.vocab_size, batches, contexts, steps)
        out["decode"][str(tp)] = prof["decode"]["1"]
        out["prefill"][str(tp)] = prof["prefill"]["1"]
        out.setdefault("round", prof["round"])
        dist.barrier()
    out["bandwidth"] = measure_bandwidth()
    out.setdefault("group_init_s", 0.0)
    return out


def _rank_profile(rank, world, model_path, engine_cfg, tps, batches, contexts, steps):
    model, _ = load(model_path, tokenizer=False)
    args, tensors = model.args, list(full_tensors(model))
    del model
    return profile_tp_rank(rank, world, args, tensors, engine_cfg, tps, batches, contexts, steps)


def profile_tp(model_path: str, world: int, tps: list[int], engine_cfg, batches, contexts, steps: int) -> dict:
    """Spawn `world` ranks and profile every TP degree in `tps`; returns rank 0's profile."""

    return spawn(_rank_profile, world, model_path, engine_cfg, tps, batches, contexts, steps)[0]
