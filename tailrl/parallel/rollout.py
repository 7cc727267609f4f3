"""One rollout over a TP x DP layout, switching layout mid-generation without a restart (PAT §4).

Every rank runs this same control flow (SPMD): the ranks of a TP group drive identical engines (the
scheduler is deterministic and keyed sampling gives every rank the same tokens from the all-gathered
logits); DP replicas run their own shard of the requests. Every `interval` engine steps all ranks meet
(one all_gather_object): each replica reports its unfinished requests, and a `Decider` — identical on
every rank — may order a switch. A switch:

  1. creates or reuses the new layout's TP groups (GroupPool),
  2. takes the unfinished sequences out of the engines; with the KV path, their K/V is all-gathered
     over the old TP group (full heads), then shared world-wide (every rank receives all of it: simple,
     not volume-optimal) and each new rank keeps its heads of its requests; with the recompute path
     only the tokens move and the new engine re-prefills prompt + generated tokens (so does a migrated
     request that finds no room in its new engine),
  3. reshards the weights layer by layer (all-gather over the old group + slice, tailrl/parallel/shard.py),
  4. spreads the sequences over the new replicas and continues.

Keyed sampling makes the tokens independent of all of this (tests compare against a run that never
switches, for both paths).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from tailrl.engine.clock import Clock
from tailrl.engine.telemetry import StepRecord
from tailrl.model.layers import TPContext, gather_cat
from tailrl.parallel.dist import GroupPool
from tailrl.parallel.layout import Layout
from tailrl.parallel.shard import reshard, sharded
from tailrl.speculative import build_engine

# (iteration, seconds since start, current layout, per replica: [(context tokens, generated tokens)])
#   -> None to stay, or (new layout, "migrate" | "recompute", info dict for the event record)
Decider = Callable[[int, float, Layout, list[list[tuple[int, int]]]], tuple[Layout, str, dict] | None]


@dataclass
class SwitchEvent:
    iteration: int
    t: float
    src: str
    dst: str
    kv_path: str
    unfinished: int
    weights_s: float
    kv_s: float
    groups_s: float
    kv_bytes: int
    info: dict = field(default_factory=dict)

    @property
    def total_s(self) -> float:
        return self.weights_s + self.kv_s + self.groups_s


@dataclass
class StepTiming(StepRecord):
    context: int = 0  # tokens of the running sequences before the forward
    tp: int = 1  # the layout's TP degree


@dataclass
class TPResult:
    rollouts: list  # every rollout of the world, sorted by (uid, sample index) (identical on all ranks)
    rollout_s: float
    layouts: list[str]
    switches: list[SwitchEvent]
    steps: list  # StepTiming of this rank's forwards


def _slice_heads(kv: torch.Tensor, tp: TPContext) -> torch.Tensor:
    """(2, L, n, H, d) full-head K/V -> this rank's heads."""
    h = kv.shape[3] // tp.size
    return kv.narrow(3, tp.rank * h, h).contiguous()


class _Replica:
    """This rank's share of one layout: the TP context, the sharded model and its engine."""

    def __init__(self, layout: Layout, rank: int, pool: GroupPool, build: Callable, engine_cfg, eos_ids, clock: Clock):
        pool.layout_groups(layout)  # collective: every rank creates every new group, in order
        self.layout = layout
        self.tp = TPContext(pool.get(layout.group_of(rank)))
        self.leader = rank == layout.group_of(rank)[0]
        self.model = build(self.tp)
        self.engine = build_engine(self.model, None, engine_cfg, eos_ids=eos_ids, clock=clock)  # one clock across switches


def tp_generate(rank: int, world: int, args, tensors: list, requests: list, engine_cfg, layout: Layout,
                decide: Decider | None = None, interval: int = 8, eos_ids=()) -> TPResult:
    """Run `requests` (engine Requests) over `layout`; see the module docstring. Collective."""
    if engine_cfg.spec.method != "none":
        raise ValueError("speculation inside a TP/DP-switching rollout is not supported")
    dist.barrier()  # one start for every rank's clock
    clock = Clock()
    pool = GroupPool()
    rep = _Replica(layout, rank, pool, lambda tp: sharded(args, tensors, tp), engine_cfg, eos_ids, clock)
    tensors.clear()  # consumed: from here on a rank holds only its shards
    share = [r for i, r in enumerate(requests) if i % layout.dp == layout.replica_of(rank)]
    for r in share:
        rep.engine.add(r)
    finished = rep.engine.take_finished() if rep.leader else []  # invalid requests fail at once
    switches, layouts, steps = [], [str(layout)], []
    it = 0
    while True:
        eng = rep.engine
        if eng.has_unfinished():
            n_before = len(eng.trace.steps)
            ctx = sum(len(s.tokens) for s in eng.scheduler.running)
            done = eng.step()
            if rep.leader:  # the ranks of a TP group finish the same rollouts; one of them reports
                finished += done
            for s in eng.trace.steps[n_before:]:
                steps.append(StepTiming(s.kind, s.t0, s.t1, s.batch, s.tokens, s.emitted, ctx, rep.layout.tp))
        it += 1
        if it % interval:
            continue
        mine = [(len(s.tokens), s.num_generated) for s in eng.scheduler.running + list(eng.scheduler.waiting)]
        everyone = [None] * world
        dist.all_gather_object(everyone, (rep.leader, mine, clock.now()))  # collective: the world's work
        per_replica = [m for lead, m, _ in everyone if lead]
        if not any(per_replica):
            break
        # every rank decides on the same inputs (rank 0's clock included), so all switch or none do
        choice = decide(it, everyone[0][2], rep.layout, per_replica) if decide else None
        if choice is not None and choice[0] != rep.layout:
            del eng  # the old engine (and its KV pool) goes with the old replica
            rep, event = _switch(rep, rank, world, pool, choice[0], choice[1], engine_cfg, eos_ids, clock, it)
            event.info = choice[2]
            switches.append(event)
            layouts.append(str(rep.layout))
    rollout_s = clock.now()
    gathered = [None] * world
    dist.all_gather_object(gathered, finished)  # collective: results to every rank
    rollouts = sorted((r for part in gathered for r in part), key=lambda r: (r.uid, r.sample_index))
    return TPResult(rollouts, rollout_s, layouts, switches, steps)


def _switch(rep: _Replica, rank: int, world: int, pool: GroupPool, new: Layout, path: str, engine_cfg, eos_ids,
            clock: Clock, it: int) -> tuple[_Replica, SwitchEvent]:
    if path not in ("migrate", "recompute"):
        raise ValueError(f"KV path must be migrate or recompute, got {path!r}")
    t_start = clock.now()
    t_all = t = time.perf_counter()
    pool.layout_groups(new)  # collective; a no-op for groups already in the pool
    groups_s = time.perf_counter() - t

    exported = rep.engine.export_unfinished(with_kv=path == "migrate")
    # collective over the old TP group: head shards -> all heads
    moved = [(seq, gather_cat(kv, rep.tp, 3) if kv is not None else None) for seq, kv in exported]
    everyone = [None] * world
    dist.all_gather_object(everyone, moved if rep.leader else [])  # collective: sequences (+ K/V) to all
    pool_seqs = sorted((x for part in everyone for x in part), key=lambda x: (x[0].request.uid, x[0].sample_index))
    del exported, moved, everyone
    timing = {}

    def build(tp):
        t = time.perf_counter()
        model = reshard(rep.model, tp)  # collective over the old group: all-gather + slice, layer by layer
        timing["weights_s"] = time.perf_counter() - t
        return model

    rep.engine = None  # drop the old KV pool before the new one is allocated (bounded peak memory)
    nxt = _Replica(new, rank, pool, build, engine_cfg, eos_ids, clock)
    weights_s = timing["weights_s"]
    kv_bytes = 0
    for i, (seq, kv) in enumerate(pool_seqs):
        if i % new.dp == new.replica_of(rank):  # even spread over the new replicas
            if kv is not None:
                kv_bytes += kv.numel() * kv.element_size()
                kv = _slice_heads(kv, nxt.tp)
            nxt.engine.adopt(seq, kv)
    # everything but weights and groups: exporting, exchanging and placing the requests, the new KV pool
    kv_s = time.perf_counter() - t_all - weights_s - groups_s
    return nxt, SwitchEvent(it, t_start, str(rep.layout), str(new), path, len(pool_seqs), weights_s, kv_s, groups_s,
                            kv_bytes)


def forced(at_iteration: int, to: Layout, path: str) -> Decider:
    """A decider that switches once, at a given iteration (tests, benchmarks of the switch itself)."""

    def decide(it, t, layout, per_replica):
        return (to, path, {"forced": True}) if it >= at_iteration and layout != to else None

    return decide
