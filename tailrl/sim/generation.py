"""One synchronous generation round on a simulated cluster, as discrete events.

Each DP replica (a TP group of GPUs) runs continuous batching like tailrl's engine: admission prefers
prefill (samples of one prompt admitted together prefill once), finished requests leave at once,
waiting ones are admitted when slots free. Decode steps are simulated in chunks that end when the
first request of the batch finishes (at most `chunk` steps), priced at the chunk's mid context.

Options that change the round's time but never its tokens: speculation (tokens per iteration and the
iteration cost from sim/spec.py) and PAT (per node, a controller tick every `pat_interval` seconds may
pause the node's replicas at their next step boundary, pay the switch cost, and resume the unfinished
requests on a new TP/DP layout).
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

from tailrl.perf.pat import PatPolicy, spread
from tailrl.sim.events import EventLoop
from tailrl.sim.spec import SpecModel, bon_alpha
from tailrl.sim.workload import Req
from tailrl.speculative.window import expected_tokens


@dataclass
class Live:
    req: Req
    alpha: float = 0.0
    done: float = 0.0  # tokens generated so far (fractional under speculation: expected tokens)
    t_finish: float = math.nan

    @property
    def ctx(self) -> float:
        return self.req.prompt_len + self.done

    @property
    def remaining(self) -> float:
        return self.req.out_len - self.done


@dataclass
class Replica:
    rid: int
    node: int
    tp: int
    gpus: int  # GPUs it occupies (tp, plus drafter GPUs under decoupled speculation)
    waiting: deque = field(default_factory=deque)
    running: list = field(default_factory=list)
    inflight: list = field(default_factory=list)  # admitted, their prefill still running
    busy: bool = False  # a forward of this replica is in flight (an event is pending)
    busy_s: float = 0.0
    parked: bool = False

    def unfinished(self) -> list[Live]:
        return self.running + self.inflight + list(self.waiting)


@dataclass
class GenResult:
    gen_s: float
    finish: list[float]
    busy_gpu_s: float
    num_gpus: int
    timeline: list[tuple[float, int, int, int]]  # (t, node, replica, active batch) at each forward
    switches: list[dict]
    iterations: int
    tokens: int
    spec_windows: list[int]
    accept: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # accepted, drafted; then both for tail batches

    @property
    def accept_rate(self) -> float:
        """Accepted draft tokens / drafted tokens (per path kept), over the round."""
        return self.accept[0] / self.accept[1] if self.accept[1] else 0.0

    @property
    def tail_accept_rate(self) -> float:
        """The same over the forwards of replicas down to `tail_batch` requests or fewer."""
        return self.accept[2] / self.accept[3] if self.accept[3] else 0.0

    @property
    def bubble_frac(self) -> float:
        """Share of GPU-seconds of the round in which a GPU had nothing to run."""
        return 1.0 - self.busy_gpu_s / (self.num_gpus * self.gen_s) if self.gen_s > 0 else 0.0


@dataclass
class GenerationSim:
    requests: list[Req]
    lat: object
    tp: int
    num_gpus: int
    node_gpus: int
    max_batch: int = 256
    max_prefill_tokens: int = 8192
    chunk: int = 32
    spec: SpecModel | None = None
    draft_gpus: int = 0  # extra GPUs per replica (decoupled drafter)
    acceptance: float = 0.0
    acceptance_kappa: float = 20.0  # Beta concentration of per-request acceptance
    best_of_n: int = 1
    pat: list[PatPolicy] | None = None  # one policy per node
    pat_interval: float = 1.0
    seed: int = 0
    tail_batch: int = 4  # replicas at or below this batch count as "tail" in the acceptance metrics

    def __post_init__(self):
        per = self.tp + self.draft_gpus
        if self.node_gpus % self.tp or per > self.num_gpus:
            raise ValueError(f"TP={self.tp} (+{self.draft_gpus} drafter GPUs) does not fit nodes of {self.node_gpus} "
                             f"GPUs / {self.num_gpus} GPUs")
        self.loop = EventLoop()
        self.replicas: list[Replica] = []
        n_rep = max(self.num_gpus // per, 1)
        for i in range(n_rep):
            self.replicas.append(Replica(i, (i * per) // self.node_gpus, self.tp, per))
        rng = random.Random(self.seed)
        lives = []
        for r in self.requests:
            a = 0.0
            if self.spec is not None:
                k = self.acceptance_kappa
                a = rng.betavariate(max(self.acceptance * k, 1e-3), max((1 - self.acceptance) * k, 1e-3))
            lives.append(Live(r, min(a, 0.999)))
        self.lives = lives
        self.all_replicas = list(self.replicas)  # every replica ever created, for GPU-busy accounting
        bounds = [round(i * len(lives) / n_rep) for i in range(n_rep + 1)]  # contiguous, sizes differ by <= 1
        for i, rep in enumerate(self.replicas):
            rep.waiting.extend(lives[bounds[i]:bounds[i + 1]])
        self.timeline: list[tuple[float, int, int, int]] = []
        self.switches: list[dict] = []
        self.iterations = 0
        self.windows: list[int] = []
        self.accept = [0.0, 0.0, 0.0, 0.0]
        # node -> (new tp, cost, predicted stay, predicted switch, decided at) while pausing for a switch
        self.pending: dict[int, tuple] = {}

    # -- replicas ----------------------------------------------------------------------------------
    def _admit(self, rep: Replica) -> list[Live]:
        out, budget, uids = [], self.max_prefill_tokens, set()
        while rep.waiting and len(rep.running) + len(out) < self.max_batch:
            lv = rep.waiting[0]
            need = 0 if lv.req.uid in uids else lv.req.prompt_len + int(lv.done)
            if out and need > budget:
                break
            rep.waiting.popleft()
            uids.add(lv.req.uid)
            budget -= need
            out.append(lv)
        return out

    def _paths(self) -> int:
        if self.best_of_n <= 1:
            return 1
        active = sum(1 for r in self.replicas if r.running or r.waiting)
        return max(1, min(self.best_of_n, len(self.replicas) // max(active, 1)))

    def _step(self, rep: Replica) -> None:
        if rep.node in self.pending:
            rep.parked = True
            self.timeline.append((self.loop.now, rep.node, rep.rid, 0))
            self._maybe_switch(rep.node)
            return
        now = self.loop.now
        admitted = self._admit(rep)
        if admitted:
            seen, tokens = set(), 0
            for lv in admitted:
                if lv.req.uid not in seen or lv.done:  # siblings fork the prompt; a moved request re-prefills
                    tokens += lv.req.prompt_len + int(lv.done)
                seen.add(lv.req.uid)
            dt = self.lat.prefill(rep.tp, tokens, len(admitted))
            self.timeline.append((now, rep.node, rep.rid, len(rep.running) + len(admitted)))
            rep.inflight = admitted

            def after_prefill():
                rep.busy, rep.inflight = False, []
                for lv in admitted:
                    lv.done += 1  # the next token is sampled from the prefill's logits (first, or after a recompute)
                rep.running.extend(admitted)
                self._retire(rep)
                self._step(rep)

            rep.busy = True
            rep.busy_s += dt
            self.loop.after(dt, after_prefill)
            return
        if not rep.running:
            self.timeline.append((now, rep.node, rep.rid, 0))
            return  # this replica is done for the round
        b = len(rep.running)
        ctx = sum(lv.ctx for lv in rep.running)
        if self.spec is not None:
            paths = self._paths()
            w, _ = self.spec.plan(rep.tp, b, ctx, [lv.alpha for lv in rep.running], paths)
            rates = [expected_tokens(bon_alpha(lv.alpha, paths), w) for lv in rep.running]
        else:
            paths, w, rates = 1, 0, [1.0] * b
        k = max(1, min(self.chunk, min(math.ceil(lv.remaining / r - 1e-9) for lv, r in zip(rep.running, rates))))
        mid = ctx + (k - 1) * sum(rates) / 2  # mean context over the chunk's k steps
        per = self.spec.iteration(rep.tp, b, mid, w, paths) if self.spec is not None else self.lat.decode(rep.tp, b, mid)
        dt = k * per
        self.timeline.append((now, rep.node, rep.rid, b))
        self.iterations += k
        if self.spec is not None:
            self.windows.append(w)
            acc, drafted = k * (sum(rates) - b), k * b * w
            self.accept[0] += acc
            self.accept[1] += drafted
            if b <= self.tail_batch:
                self.accept[2] += acc
                self.accept[3] += drafted

        def after_decode():
            rep.busy = False
            for lv, r in zip(rep.running, rates):
                lv.done = min(lv.done + k * r, lv.req.out_len)
            self._retire(rep)
            self._step(rep)

        rep.busy = True
        rep.busy_s += dt
        self.loop.after(dt, after_decode)

    def _retire(self, rep: Replica) -> None:
        keep = []
        for lv in rep.running:
            if lv.remaining <= 1e-9:
                lv.t_finish = self.loop.now
            else:
                keep.append(lv)
        rep.running = keep

    # -- PAT ---------------------------------------------------------------------------------------
    def _node_replicas(self, node: int) -> list[Replica]:
        return [r for r in self.replicas if r.node == node]

    def _tick(self, node: int) -> None:
        reps = self._node_replicas(node)
        if not any(r.unfinished() for r in reps):
            return  # the node is done for the round (no work arrives mid-round)
        policy = self.pat[node]
        state = [(lv.ctx, int(lv.done)) for r in reps for lv in r.unfinished()]
        current = [[(lv.ctx, policy.max_len - int(lv.done)) for lv in r.unfinished()] for r in reps]
        tp, cost, stay, chosen = policy.decide(reps[0].tp, state, current)
        if cost is not None:
            self.pending[node] = (tp, cost, stay, chosen, self.loop.now)
            for r in reps:
                r.parked = not r.busy  # busy replicas park when their forward ends (_step)
            self._maybe_switch(node)
        else:
            self.loop.after(self.pat_interval, lambda: self._tick(node))

    def _maybe_switch(self, node: int) -> None:
        reps = self._node_replicas(node)
        if any(r.busy for r in reps):
            return  # wait for the forwards in flight
        tp, cost, stay, chosen, t_decided = self.pending[node]
        lives = [lv for r in reps for lv in r.unfinished()]
        policy = self.pat[node]
        policy.pool.add(tp)
        n_new = policy.node_gpus // tp
        base = max(r.rid for r in self.replicas) + 1
        new = [Replica(base + i, node, tp, tp) for i in range(n_new)]
        parts = spread(lives, n_new, weight=lambda lv: policy.max_len - lv.done)  # by PAT's max_len bound
        for rep, part in zip(new, parts):
            cached = [lv for lv in part if lv.done >= 1]
            rep.running = cached[: self.max_batch]  # over the batch cap: queued, re-prefilled when admitted
            rep.waiting.extend(cached[self.max_batch:] + [lv for lv in part if lv.done < 1])
        self.replicas = [r for r in self.replicas if r.node != node] + new
        self.all_replicas += new
        self.switches.append({"t": self.loop.now, "node": node, "from": reps[0].tp, "to": tp, "decided_at": t_decided,
                              "weights_s": cost.weights_s, "kv_s": cost.kv_s, "groups_s": cost.groups_s,
                              "recapture_s": cost.recapture_s, "kv_path": cost.kv_path,
                              "predicted_stay_s": stay, "predicted_switch_s": chosen,
                              "unfinished": len(lives)})
        del self.pending[node]

        def resume():
            for rep in new:
                self._step(rep)
            self.loop.after(self.pat_interval, lambda: self._tick(node))

        self.loop.after(cost.total, resume)

    # -- run ---------------------------------------------------------------------------------------
    def run(self) -> GenResult:
        for rep in self.replicas:
            self.loop.at(0.0, lambda rep=rep: self._step(rep))
        if self.pat is not None:
            for node in sorted({r.node for r in self.replicas}):
                self.loop.at(self.pat_interval, lambda node=node: self._tick(node))
        self.loop.run()
        finish = [lv.t_finish for lv in self.lives]
        if any(math.isnan(f) for f in finish):  # an invariant, not a user error
            raise RuntimeError(f"simulator lost {sum(math.isnan(f) for f in finish)} requests")
        gen_s = max(finish, default=0.0) + (self.lat.round_s(len(self.lives)) if self.lives else 0.0)
        busy = sum(r.busy_s * r.gpus for r in self.all_replicas)
        return GenResult(gen_s, finish, busy, self.num_gpus, sorted(self.timeline, key=lambda e: e[0]), self.switches, self.iterations,
                         sum(r.out_len for r in self.requests), self.windows, tuple(self.accept))
