"""Decoupled speculation, verifier side (SpecActor §4.1): the engine verifies while a drafter process
(decoupled/worker.py) drafts the next window on other cores, in lockstep rounds. It is the engine's
DecodeStrategy for engine.spec.mode=decoupled (engine/strategy.py).

One round = one engine decode step: send the drafter what was committed last round, run the target's
forward over each request's pending token + the drafts in hand (Stream.verify_window), keep the
longest prefix equal to the target's keyed samples plus the sample after it (exactly what plain
decoding would emit), then take the drafts the drafter made meanwhile and reconcile them with what
was just committed (decoupled/stream.py). A coupled request (Alg. 2 may switch low-acceptance requests
to it) keeps the barrier: it skips the rounds in which its window is being drafted.

The plan (window, cores) comes from the TGS model (decoupled/tgs.py, Alg. 1) over a profile; every
`reconfigure_every` rounds the batch's window is re-planned for the batch running then and Alg. 2
re-plans the requests accepting less than average. With engine.spec.gate (default) a ThroughputGate
compares measured decoupled and plain rounds per batch-size bucket and runs plain rounds (on all
cores, the drafter idle) where decoupled ones were slower. Tokens a sequence gains outside a round
(the re-prefill after a preemption samples one) are committed to both streams first (_catch_up).

On CPU the drafter process is pinned to its cores and the verifier's *calling thread* to the others
(os.sched_setaffinity pins a thread; torch's worker threads, used when g_verify > 1, are not pinned).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import replace
from multiprocessing.connection import Listener

import torch

from tailrl.engine.sampling.rows import to_host
from tailrl.errors import UserError
from tailrl.speculative.cost import ThroughputGate
from tailrl.speculative.decoupled.stream import Stream, merge, reconcile
from tailrl.speculative.decoupled.tgs import DraftCost, Plan, VerifyCost, best_window, reconfigure
from tailrl.speculative.tree import accept_path, build_tree


def spec_cores(cfg) -> tuple[int, int]:
    """(G, g_draft): the cores speculation may use, and the drafter's share (cfg: SpecConfig)."""
    n = len(os.sched_getaffinity(0))
    gd = max(1, cfg.decoupled.draft_cores)
    gv = cfg.decoupled.verify_cores or max(1, n - gd)
    return gd + gv, gd


def fixed_plan(cfg, batch: int) -> Plan:
    """The plan of a window fixed by engine.spec.decoupled.window (no TGS model, no re-planning)."""
    G, gd = spec_cores(cfg)
    return Plan(mode="decoupled", g_draft=gd, g_verify=G - gd, w=cfg.decoupled.window, batch=batch, groups=1,
                tgs=0.0, throughput=0.0)


class DecoupledSpeculator:
    def __init__(self, engine, cfg, plan: Plan, draft_cost: DraftCost | None = None,
                 verify_cost: VerifyCost | None = None, acceptance: float = 0.5):
        self.engine, self.cfg, self.plan = engine, cfg, plan
        self.p = acceptance  # the batch's per-token acceptance the window is planned for
        self.D, self.V = draft_cost, verify_cost  # the plan's costs, for re-planning (None: fixed window)
        p = next(engine.model.parameters())
        # on CPU the drafter is pinned to the last g_draft cores and the verifier to the others
        avail = sorted(os.sched_getaffinity(0))
        on_cpu = p.device.type == "cpu" and not cfg.decoupled.draft_device and plan.g_draft < len(avail)
        cores = avail[-plan.g_draft:] if on_cpu else None
        self.verify_cores = set(avail[:-plan.g_draft]) if on_cpu else None
        self._affinity_before = None
        # a fresh interpreter (not multiprocessing's spawn, which re-imports the caller's __main__)
        # connected over a local socket
        key = os.urandom(16)
        listener = Listener(family="AF_UNIX", authkey=key)
        args = {"address": listener.address, "authkey": key.hex(), "model_path": cfg.draft_model,
                "dtype": str(p.dtype).removeprefix("torch."), "device": cfg.decoupled.draft_device or str(p.device),
                "threads": plan.g_draft, "cores": cores, "kv_tokens": cfg.draft_kv_tokens,
                "block_size": engine.config.block_size, "sampler": engine.config.sampler, "parent": os.getpid()}
        self.proc = subprocess.Popen([sys.executable, "-m", "tailrl.speculative.decoupled.worker", json.dumps(args)])
        try:
            listener._listener._socket.settimeout(120)  # a drafter that dies before connecting: no hang
            self.conn = listener.accept()
            if not self.conn.poll(600):
                raise EOFError
            kind, vocab = self.conn.recv()
        except (OSError, EOFError):
            self.close()
            raise UserError("the drafter process of decoupled speculation did not start (its error is above)") from None
        finally:
            listener.close()
        if vocab != engine.model.args.vocab_size:
            self.close()
            raise UserError(f"draft model vocabulary ({vocab}) differs from the policy's "
                            f"({engine.model.args.vocab_size}); it must share the tokenizer")
        self.streams: dict[int, Stream] = {}
        self.seqs: dict = {}  # seq id -> Sequence (its verified tokens, for late drafter chunks)
        self.ops: list[tuple] = []
        self.stats: dict[int, list[int]] = defaultdict(lambda: [0, 0])  # seq id -> [accepted, mismatches]
        self.waste: Counter = Counter()  # (seq id, epoch) -> drafted tokens discarded by that mismatch
        self.counters: Counter = Counter()
        self.rounds = 0
        self.first_window = plan.w  # the window of a rollout's first round (the large batch)
        self._skipped: set[int] = set()  # coupled requests that sat out the last round
        self._awaiting = False  # a round was sent and its reply not yet read
        self.gate = ThroughputGate()  # decoupled vs plain rounds, measured per batch-size bucket
        self.log: list[tuple] | None = None  # per round (rows, verify tokens, verify s, drafted rows, steps, draft s)
        self._threads_before: int | None = None

    # -- one round -------------------------------------------------------------------------------
    def decode(self, ready) -> None:
        engine = self.engine
        self._catch_up(ready)
        if self.cfg.gate and self.gate.slower(len(ready)):  # measured: plain rounds emit more per second here
            return self._plain(ready)
        self._cores(verify=True)
        dc = self.cfg.decoupled
        if self.D is not None and dc.window == 0 and self.rounds % dc.reconfigure_every == 0:
            # Alg. 1's window for the batch running now (it shrinks during a rollout); new requests take it,
            # and requests at or above average acceptance move to it
            w = best_window(self.D, self.V, len(ready), self.p, self.cfg.k_max)[0]
            if self.rounds == 0:
                self.first_window = w
            if w != self.plan.w:
                self.plan = replace(self.plan, w=w)
                for sid, st in self.streams.items():
                    if (st.w, st.mode) != (w, "decoupled") and self.acceptance(sid) >= self.p:
                        st.w, st.mode = w, "decoupled"
                        self.ops.append(("cfg", sid, w, st.mode))
        t0 = engine.now()
        for s in ready:
            if s.seq_id not in self.streams:
                st = self.streams[s.seq_id] = Stream(len(s.tokens), self.plan.w, "decoupled")
                self.seqs[s.seq_id] = s
                self.ops.append(("add", s.seq_id, s.request, s.sample_index, list(s.tokens), s.num_prompt,
                                 self._limit(engine, s), st.w, st.mode))
        self.conn.send(("round", self.ops))
        self.ops, self._awaiting = [], True
        try:
            self._verify(ready, t0)
        except BaseException:
            if self._awaiting:  # keep the lockstep: the drafter's answer to this round is not left unread
                self._reply()
            raise

    def _verify(self, ready, t0: float) -> None:
        engine = self.engine
        cache = engine.cache
        rows, toks, lrows, ks = [], [], [], []
        skipped = set()
        for s in ready:
            st = self.streams[s.seq_id]
            limit = self._limit(engine, s)
            k = max(0, min(st.verify_window(), limit - len(s.tokens) - 1))
            if (st.mode == "coupled" and k == 0 and s.seq_id not in self._skipped
                    and st.to_draft(limit) > 1):
                skipped.add(s.seq_id)
                continue  # the barrier: its window is being drafted this round (once: a drafter that
                # could not draft, e.g. a full draft cache, does not stall it)
            if k:
                if not cache.can_ensure(s.seq_id, s.num_cached, s.pending + k):
                    k = 0
                cache.ensure(s.seq_id, s.num_cached, s.pending + k)  # (prepare_decode ensured the pending ones)
            rows.append(s)
            ks.append(k)
            toks.append(s.tokens[s.num_cached:] + st.tokens[:k])
            lrows.append([s.pending - 1 + i for i in range(k + 1)])
        emitted = 0
        n_tokens = sum(len(t) for t in toks)
        if rows:
            logits = engine.forward(rows, toks, logits_rows=lrows)  # (B, R, V)
            counts = torch.tensor([k + 1 for k in ks], device=logits.device)
            flat_l = logits[torch.arange(logits.shape[1], device=logits.device) < counts[:, None]]  # (sum k+1, V)
            samples, logps = to_host(*engine.sample_windows(rows, flat_l, [k + 1 for k in ks]))
            off = 0
            for s, k in zip(rows, ks):
                st = self.streams[s.seq_id]
                smp, lp = samples[off: off + k + 1], logps[off: off + k + 1]
                off += k + 1
                path, accepted = accept_path(build_tree(s.tokens[-1], [st.tokens[:k]]), smp)
                base = len(s.tokens)  # K/V now holds base + k tokens; keep the accepted drafts' part
                n = engine.commit(s, base + len(path), accepted, lp[: len(accepted)])
                committed = accepted[:n]
                emitted += n
                if s.seq_id in self.streams:  # still running: tell the drafter, settle the stream
                    self._settle(s.seq_id, *reconcile(st, committed), st.epoch - 1)
                    self.ops.append(("commit", s.seq_id, committed))
        self._skipped = skipped
        tw = engine.now()
        kind, chunks, draft_s, steps, drafted_rows = self._reply()
        wait = engine.now() - tw
        self.counters["verify_wait_s"] += wait
        if self.log is not None:  # the runtime's own costs, for `tailrl profile spec` (profile_tgs.py)
            self.log.append((len(rows), n_tokens, tw - t0, drafted_rows, steps, draft_s))
        self.counters["draft_s"] += draft_s
        for sid, epoch, start, drafted in chunks:
            st = self.streams.get(sid)
            if st is None:  # finished meanwhile
                self.counters["wasted_finished"] += len(drafted)
                continue
            self.counters["drafted"] += len(drafted)
            consumed, lost, _ = merge(st, epoch, start, drafted, self.seqs[sid].tokens)
            self._settle(sid, consumed, lost, epoch)  # lost drafts belong to the chunk's (ended) epoch
        self.rounds += 1
        self.counters["emitted"] += emitted
        self.counters["rows"] += len(rows)
        self.counters["verify_tokens"] += n_tokens
        if self.D is not None and self.rounds % self.cfg.decoupled.reconfigure_every == 0:
            self._reconfigure()
        engine.record("verify", t0, len(ready), n_tokens, emitted)
        if n_tokens > len(rows):  # a round with drafts in hand: rounds that refill the pipeline are not judged
            self.gate.record("spec", len(ready), emitted, engine.now() - t0)

    def _reply(self):
        """The drafter's answer to the round just sent."""
        try:
            if not self.conn.poll(600):
                raise EOFError
            self._awaiting = False
            return self.conn.recv()
        except (EOFError, OSError):
            raise UserError("the drafter process of decoupled speculation stopped answering") from None

    def _catch_up(self, ready) -> None:
        """Tokens a sequence gained outside a round (the prefill after a preemption samples one; a tool
        turn's observation and the token after it) are committed to its stream like any other, on both
        sides. Drafts that happen to equal an observation's tokens are consumed but not counted as accepted."""
        for s in ready:
            st = self.streams.get(s.seq_id)
            if st is not None and st.start < len(s.tokens):
                new = s.tokens[st.start:]
                observed = s.token_mask is not None and 0 in s.token_mask[max(0, st.start - s.num_prompt):]
                consumed, lost = reconcile(st, new)
                self._settle(s.seq_id, 0 if observed else consumed, lost, st.epoch - 1)
                self.ops.append(("commit", s.seq_id, new))

    def _plain(self, ready) -> None:
        """A plain decode round on all of this process's cores, the drafter idle; the committed tokens
        reach the drafter with the next decoupled round (streams stay valid where they match)."""
        self._cores(verify=False)
        t0 = self.engine.now()
        self.engine.decode_step(ready)
        self._catch_up([s for s in ready if s.finish_reason is None])
        self.gate.record("plain", len(ready), len(ready), self.engine.now() - t0)
        self.counters["plain_rounds"] += 1

    def _cores(self, verify: bool) -> None:
        """Verifier rounds: g_verify threads (pinned to the verifier's cores on CPU); plain rounds and
        between rollouts: what the process had. Affinity changes before the thread count, so threads
        torch starts meanwhile inherit the right one."""
        if verify and self._threads_before is None:
            self._threads_before = torch.get_num_threads()
            if self.verify_cores:
                self._affinity_before = os.sched_getaffinity(0)
                os.sched_setaffinity(0, self.verify_cores)
            torch.set_num_threads(self.plan.g_verify)
        elif not verify and self._threads_before is not None:
            if self._affinity_before:
                os.sched_setaffinity(0, self._affinity_before)
                self._affinity_before = None
            torch.set_num_threads(self._threads_before)
            self._threads_before = None

    def _settle(self, sid: int, consumed: int, lost: int, epoch: int) -> None:
        """Book a reconcile / merge outcome: accepted drafts, and drafts lost to the mismatch of `epoch`."""
        st = self.stats[sid]
        st[0] += consumed
        self.counters["accepted"] += consumed
        if lost:
            if (sid, epoch) not in self.waste:
                st[1] += 1
                self.counters["mismatches"] += 1
            self.waste[(sid, epoch)] += lost
            self.counters["wasted"] += lost

    @staticmethod
    def _limit(engine, s) -> int:
        """First position past the sequence's budget: drafts at or beyond it are never used."""
        return min(s.num_prompt + s.max_new_tokens, engine.max_model_len)

    # -- Alg. 2 ----------------------------------------------------------------------------------
    def acceptance(self, sid: int) -> float:
        """Per-token acceptance of a request: accepted / (accepted + mismatches), shrunk to the batch's."""
        a, m = self.stats[sid]
        w = 4.0
        return (a + w * self.p) / (a + m + w)

    def _reconfigure(self) -> None:
        acc = {sid: self.acceptance(sid) for sid in self.streams}
        for sid, (w, mode) in reconfigure(acc, self.D, self.V, self.cfg.k_max, len(self.streams), self.p,
                                          self.plan.w).items():
            st = self.streams[sid]
            if (w, mode) != (st.w, st.mode):
                st.w, st.mode = w, mode
                self.ops.append(("cfg", sid, w, mode))
                self.counters["reconfigured"] += 1

    # -- lifecycle (the engine's speculator protocol) --------------------------------------------
    def release(self, seq) -> None:
        st = self.streams.pop(seq.seq_id, None)
        self.seqs.pop(seq.seq_id, None)
        if st is not None:
            self.counters["wasted_finished"] += len(st.tokens)
            self.ops.append(("drop", seq.seq_id))
        self.stats.pop(seq.seq_id, None)

    def end_rollout(self) -> None:
        c = self.counters
        if c["accepted"] + c["mismatches"] >= 32:  # the batch mean is stable across steps (SpecActor §4.1)
            self.p = c["accepted"] / (c["accepted"] + c["mismatches"])
        self.conn.send(("reset",))
        self.streams.clear()
        self.seqs.clear()
        self.ops = []
        self._cores(verify=False)

    def max_waste_per_mismatch(self) -> int:
        return max(self.waste.values(), default=0)

    def metrics(self) -> dict[str, float]:
        c = self.counters
        checked = c["accepted"] + c["mismatches"]
        return {"spec/acceptance_rate": c["accepted"] / checked if checked else 0.0,
                "spec/mean_accepted_len": c["accepted"] / c["rows"] if c["rows"] else 0.0,
                "spec/drafter_share/draft": 1.0, "spec/bon_requests": 0.0,
                "spec/decoupled/window": float(self.plan.w), "spec/decoupled/window_first": float(self.first_window),
                "spec/decoupled/rounds": float(self.rounds),
                "spec/decoupled/wasted_tokens": float(c["wasted"]),
                "spec/decoupled/max_waste_per_mismatch": float(self.max_waste_per_mismatch()),
                "spec/decoupled/reconfigured": float(c["reconfigured"]),
                "spec/decoupled/plain_rounds": float(c["plain_rounds"]),
                "spec/decoupled/draft_s": c["draft_s"], "spec/decoupled/verify_wait_s": c["verify_wait_s"]}

    def begin_rollout(self) -> None:
        self.counters.clear()
        self.waste.clear()
        self.rounds = 0

    def close(self) -> None:
        conn = getattr(self, "conn", None)
        if conn is not None:
            try:
                conn.send(("stop",))
            except (BrokenPipeError, OSError):
                pass
            conn.close()
            self.conn = None
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
