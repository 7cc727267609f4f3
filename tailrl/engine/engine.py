"""The rollout engine: requests -> scheduler -> KV cache -> model runner -> keyed sampler -> Rollouts.

    engine = Engine(model, EngineConfig(), eos_ids={2})
    rollouts, trace = engine.generate([Request(prompt_ids, uid=0, n=8, params=SamplingParams())])

`add()` / `step()` / `has_unfinished()` drive it incrementally (new requests may join mid-rollout).
Every token is keyed by (seed, uid, sample index, position), so output never depends on batching,
arrival order or preemption.

A decode step is taken by the engine's DecodeStrategy (engine/strategy.py): PlainDecode unless a builder
hands it another (`tailrl.speculative.build_engine` builds the speculative ones from engine.spec; the
engine itself knows nothing of speculation). Strategies use only the public decode API below (`now`,
`forward`, `sample`, `sample_windows`, `decode_step`, `commit`, `record`) and the cache's bookkeeping.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable

import torch

from tailrl.config import EngineConfig
from tailrl.engine.clock import Clock
from tailrl.engine.execution import kv_pool_tokens, resolve_execution
from tailrl.engine.kv_cache import PagedKVCache
from tailrl.engine.probe import time_forward
from tailrl.engine.request import Request, Rollout
from tailrl.engine.runner import DecodeSetup, ModelRunner
from tailrl.engine.sampling.keyed import SAMPLERS
from tailrl.engine.sampling.rows import sample_rows, sample_windows, to_host
from tailrl.engine.scheduler import Scheduler
from tailrl.engine.sequence import Sequence
from tailrl.engine.stops import finish_reason
from tailrl.engine.strategy import DecodeStrategy, PlainDecode
from tailrl.engine.telemetry import RequestRecord, RolloutTrace, StepRecord
from tailrl.engine.turns import Turns, append_observation
from tailrl.tail import DEFAULT_TAU


class Engine:
    def __init__(self, model, config: EngineConfig | None = None, eos_ids: Iterable[int] = (),
                 detokenize: Callable[[list[int]], str] | None = None, tau: float = DEFAULT_TAU,
                 clock: Clock | None = None, strategy: Callable[[Engine], DecodeStrategy] = PlainDecode,
                 turns: Turns | None = None):
        """strategy: builds the DecodeStrategy from the engine (PlainDecode; a speculative one from
        tailrl.speculative.build_engine, which an engine.spec.method other than none requires).
        turns: multi-turn rollouts (engine/turns.py): sequences that end a turn are parked until their
        observation is ready, then resume."""
        self.turns = turns
        self.model = model
        self.config = config = config or EngineConfig()
        self.max_model_len = config.max_model_len or model.args.max_position_embeddings
        model.max_positions = max(model.max_positions, self.max_model_len)  # the fused path's rotary table
        device = next(model.parameters()).device
        self.execution = ex = resolve_execution(config, device, model.tp.size, next(model.parameters()).dtype)  # exactness, attention backend, static steps, graphs
        if ex.strict:
            model.set_strict(True)  # every forward of this model, the trainer's too (model/strict.py)
        # sized once per engine (on CUDA from free memory): a pool re-measured after each update would shrink
        # by whatever the update's allocator still holds
        self.pool_tokens = self._pool_tokens()
        self.cache = PagedKVCache(model, self.pool_tokens, config.block_size, grow=ex.grow_pool)
        self.sampler = SAMPLERS.get(config.sampler)  # resolved once
        self.runner = ModelRunner(model, self.cache, ex.attention,
                                  DecodeSetup(self.sampler, ex.strict, ex.static, ex.graphs, config.max_batch_size,
                                              self.max_model_len, ex.canonical))
        self.scheduler = Scheduler(self.cache, config.max_batch_size, config.max_prefill_tokens)
        self.eos_ids = frozenset(eos_ids) or frozenset(model.args.eos_token_ids)
        self.detokenize = detokenize
        self.tau = tau
        self.clock = clock or Clock()  # a TP/DP switch hands the rollout's clock to the engines it builds
        self._next_seq = 0
        self._b1_step_s: float | None = None
        self._finished: list[Rollout] = []
        self.trace = RolloutTrace(tau=tau)
        if config.spec.method != "none" and strategy is PlainDecode:
            raise ValueError(f"engine.spec.method={config.spec.method}: build the engine with "
                             "tailrl.speculative.build_engine (the engine does not build speculation)")
        self.strategy: DecodeStrategy = strategy(self)

    # -- intake ---------------------------------------------------------------------------------
    def add(self, request: Request) -> None:
        """Queue a request's n samples; an invalid request yields error rollouts at once."""
        self._ensure_kv()
        error = request.error or self._validate(request)
        for i in range(request.n if request.n >= 1 else 1):
            k = request.first_sample + i
            budget = request.max_new_tokens[i] if request.max_new_tokens else request.params.max_new_tokens
            seq = Sequence(self._next_seq, request, k, budget, list(request.prompt_ids), len(request.prompt_ids))
            self._next_seq += 1
            seq.t_start = self.now()
            if error:
                self._fail(seq, error)
            else:
                self.scheduler.add(seq)

    def close(self) -> None:
        """Release what the engine started besides memory (a decoupled speculator's drafter process)."""
        self.strategy.close()

    def take_finished(self) -> list[Rollout]:
        """Rollouts finished outside step() (invalid requests fail at add()), handed over once."""
        out, self._finished = self._finished, []
        return out

    def _validate(self, r: Request) -> str | None:
        if r.n < 1:
            return f"n must be >= 1, got {r.n}"
        if not r.prompt_ids:
            return "empty prompt"
        if len(r.prompt_ids) >= self.max_model_len:
            return f"prompt of {len(r.prompt_ids)} tokens leaves no room in the context limit of {self.max_model_len}"
        vocab = self.model.args.vocab_size
        if min(r.prompt_ids) < 0 or max(r.prompt_ids) >= vocab:
            return f"prompt has token ids outside the vocabulary [0, {vocab})"
        if self.cache.blocks_for(len(r.prompt_ids) + 1) > self.cache.num_blocks:
            return f"prompt of {len(r.prompt_ids)} tokens exceeds the KV cache ({self.cache.num_blocks * self.cache.block_size} tokens)"
        return None

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    # -- one engine step ------------------------------------------------------------------------
    def step(self) -> list[Rollout]:
        """Run one prefill forward or one decode step; returns the rollouts that finished in it."""
        self._ensure_kv()
        self._finished = []
        sch = self.scheduler
        if sch.parked:  # nothing else to run: wait a little for an observation instead of spinning
            self._resume(0.0 if sch.waiting or sch.running else 0.01)
        admitted = sch.admit()
        if admitted:
            self._prefill(admitted)
        elif sch.running:
            ready, impossible = sch.prepare_decode()
            for seq in impossible:
                self._fail(seq, "sequence no longer fits in the KV cache (raise engine.kv_cache_tokens)")
            if ready:
                self.strategy.decode(ready)
        elif sch.waiting:  # nothing running and the head still does not fit: it never will
            seq = sch.waiting.popleft()
            self._fail(seq, f"sequence of {len(seq.tokens)} tokens exceeds the KV cache")
        self.trace.preemptions = sch.preemptions
        self.trace.graph_captures = self.runner.captures
        return self._finished

    def _prefill(self, admitted: list[Sequence]) -> None:
        rows = [s for s in admitted if s.group_parent is None]
        for s in rows:
            self.cache.ensure(s.seq_id, s.num_cached, s.pending)
        t0 = self.now()
        n_tokens = sum(s.pending for s in rows)
        logits = self.forward(rows, [s.tokens[s.num_cached:] for s in rows])
        for s in rows:
            s.num_cached = len(s.tokens)
        row_of = {id(s): i for i, s in enumerate(rows)}
        order = []
        for s in admitted:
            if s.group_parent is not None:  # fork the parent's prompt KV instead of recomputing it
                self.cache.fork(s.group_parent.seq_id, s.seq_id, s.num_prompt)
                s.num_cached = s.num_prompt
                order.append(row_of[id(s.group_parent)])
            else:
                order.append(row_of[id(s)])
            s.group_parent = None
        logits = logits[torch.tensor(order, device=logits.device)]
        self.scheduler.start_running(admitted)
        self._sample_and_advance(admitted, logits)
        self.record("prefill", t0, len(admitted), n_tokens, len(admitted))

    # -- the decode API (engine/strategy.py) ------------------------------------------------------
    def now(self) -> float:
        """Seconds since this rollout started (the trace's time axis)."""
        return self.clock.now()

    def forward(self, seqs: list[Sequence], tokens: list[list[int]], tree_mask: list | None = None,
                tree_depth: list | None = None, logits_rows: list[list[int]] | None = None) -> torch.Tensor:
        """One model forward: row i processes tokens[i] at positions seqs[i].num_cached onwards (their
        blocks ensured) and writes their K/V. Returns logits (B, V) at each row's last token, or
        (B, R, V) at logits_rows (see ModelRunner.forward; tree_mask/tree_depth: token-tree rows)."""
        return self.runner.forward([s.seq_id for s in seqs], [s.num_cached for s in seqs], tokens,
                                   tree_mask=tree_mask, tree_depth=tree_depth, logits_rows=logits_rows)

    def decode_step(self, ready: list[Sequence]) -> None:
        """A plain decode step: one forward over each sequence's pending tokens, one keyed sample each (on
        static buffers, a CUDA graph on CUDA, when engine.static_decode is on: ModelRunner.decode)."""
        t0 = self.now()
        tokens, logps = self.runner.decode(ready)
        for s, t, lp in zip(ready, tokens, logps):
            s.num_cached = len(s.tokens)
            self._advance(s, t, lp)
        self.record("decode", t0, len(ready), len(ready), len(ready))

    def sample(self, seqs: list[Sequence], logits: torch.Tensor, positions: list[int] | None = None):
        """Keyed samples (tokens (B,), logprobs (B,)) for rows of logits (B, V); positions default to each
        sequence's next index."""
        return sample_rows(seqs, logits, positions, self.sampler, self.execution.strict)

    def sample_windows(self, seqs: list[Sequence], logits: torch.Tensor, counts: list[int]):
        """Keyed samples at positions num_generated + 0 .. counts[i] - 1 of each sequence (a verify
        window); logits (sum(counts), V)."""
        return sample_windows(seqs, logits, counts, self.sampler, self.execution.strict)

    def commit(self, seq: Sequence, num_cached: int, tokens: list[int], logprobs: list[float]) -> int:
        """Accept verified tokens: the cache keeps K/V of seq's first `num_cached` positions (the rest is
        rolled back), then tokens are appended one by one until the sequence stops. Returns how many were
        appended. Every strategy ends a step here, so a finished sequence leaves the engine the same way."""
        seq.num_cached = num_cached
        self.cache.truncate(seq.seq_id, num_cached)
        for j, (tok, lp) in enumerate(zip(tokens, logprobs)):
            if self._advance(seq, tok, lp):
                if seq.seq_id in self.scheduler.parked and seq.num_cached > len(seq.tokens):
                    # a turn ended inside the window: the K/V past its end are drafts' (accepted up to the
                    # stop, not committed); the observation's prefill must write those positions again
                    seq.num_cached = len(seq.tokens)
                    self.cache.truncate(seq.seq_id, seq.num_cached)
                return j + 1
        return len(tokens)

    def record(self, kind: str, t0: float, batch: int, tokens: int, emitted: int) -> None:
        """Append one forward to the rollout trace (kind: prefill | decode | verify), ending now."""
        self.trace.steps.append(StepRecord(kind, t0, self.now(), batch, tokens, emitted))

    def _advance(self, seq: Sequence, token: int, logprob: float) -> bool:
        """Append one sampled token; finish the sequence when it stops. Returns whether it finished."""
        seq.tokens.append(token)
        seq.logprobs.append(logprob)
        if seq.token_mask is not None:
            seq.token_mask.append(1)
        reason = finish_reason(seq, self.eos_ids, self.max_model_len, self.detokenize)
        if reason == "stop" and self.turns is not None and self.turns.end_turn(seq):
            self.scheduler.running.remove(seq)  # parked: its blocks stay, it leaves the decode batch
            self.scheduler.parked[seq.seq_id] = seq
            seq.waits.append((self.now(), -1.0))  # the end is set when its observation arrives
        elif reason is not None:
            self._finish(seq, reason)
        return reason is not None

    def _resume(self, timeout: float) -> None:
        """Parked sequences whose observation is ready: observation appended, queued for its prefill (over
        the cached prefix), or finished when the observation ends the rollout or exhausts its budget."""
        for seq, tokens in self.turns.ready(timeout):
            del self.scheduler.parked[seq.seq_id]
            seq.waits[-1] = (seq.waits[-1][0], self.now())
            if tokens is None:
                self._finish(seq, "stop")
            elif append_observation(seq, tokens, self.max_model_len):
                self.scheduler.add(seq)
            else:
                self._finish(seq, "length")

    def _sample_and_advance(self, seqs: list[Sequence], logits: torch.Tensor) -> None:
        for s, t, lp in zip(seqs, *to_host(*self.sample(seqs, logits))):  # one device-to-host copy
            self._advance(s, t, lp)

    def rollback(self, seq: Sequence, num_generated: int) -> None:
        """Forget generated tokens past `num_generated` (tokens, logprobs and their K/V).
        The next forward re-processes the last kept token, so decoding continues as if never advanced."""
        keep = seq.num_prompt + num_generated
        del seq.tokens[keep:]
        del seq.logprobs[num_generated:]
        seq.num_cached = min(seq.num_cached, keep - 1)
        self.cache.truncate(seq.seq_id, seq.num_cached)

    # -- moving unfinished sequences to another engine (TP/DP switch, tailrl/parallel) -------------
    def export_unfinished(self, with_kv: bool = True) -> list[tuple[Sequence, torch.Tensor | None]]:
        """Take every unfinished sequence out of this engine, with a copy of its cached K/V when asked
        (None for waiting ones: nothing cached); their cache blocks are freed."""
        if self.scheduler.parked:
            raise RuntimeError("moving sequences to another engine while multi-turn sequences are parked "
                               "(waiting for an observation) is not supported")
        sch, out = self.scheduler, []
        for seq in sorted(sch.running, key=lambda s: s.admitted_at) + list(sch.waiting):
            kv = self.cache.read(seq.seq_id, seq.num_cached) if with_kv and seq.num_cached else None
            self.cache.free(seq.seq_id)
            seq.group_parent = None
            out.append((seq, kv))
        sch.running, sch.waiting = [], type(sch.waiting)()
        return out

    def adopt(self, seq: Sequence, kv: torch.Tensor | None) -> None:
        """Continue a sequence exported by another engine: with its K/V it decodes at once (migration);
        without, it waits to be recomputed by a prefill of prompt + generated tokens (recompute)."""
        seq.seq_id = self._next_seq
        self._next_seq += 1
        seq.num_cached = 0
        sch = self.scheduler
        if kv is not None and (len(sch.running) >= sch.max_batch_size
                               or not self.cache.can_ensure(seq.seq_id, 0, kv.shape[2] + 1)):
            kv = None  # no room to run it now: it waits and is recomputed when admitted
        if kv is not None:
            self.cache.write(seq.seq_id, kv)
            seq.num_cached = kv.shape[2]
        sch.adopt(seq, cached=kv is not None)

    # -- results --------------------------------------------------------------------------------
    def _finish(self, seq: Sequence, reason: str, error: str | None = None) -> None:
        self.scheduler.finish(seq)
        seq.finish_reason, seq.error, seq.t_finish = reason, error, self.now()
        self.strategy.release(seq)
        r = Rollout(seq.request.uid, seq.sample_index, seq.tokens[: seq.num_prompt], seq.generated, seq.logprobs,
                    reason, error, seq.t_start, seq.t_finish, seq.token_mask, seq.turns,
                    sum(t1 - t0 for t0, t1 in seq.waits))
        self.trace.requests.append(RequestRecord(r.uid, r.sample_index, r.t_start, r.t_finish, r.num_tokens, reason,
                                                 seq.num_prompt, tuple(seq.waits)))
        self._finished.append(r)

    def _fail(self, seq: Sequence, error: str) -> None:
        seq.tokens = seq.tokens[: seq.num_prompt]
        seq.logprobs = []
        self._finish(seq, "error", error)

    def generate(self, requests: Iterable[Request], on_finish: Callable[[Rollout], None] | None = None,
                 ) -> tuple[list[Rollout], RolloutTrace]:
        """Run requests to completion. Returns rollouts sorted by (uid, sample index) and the trace."""
        self.trace = RolloutTrace(tau=self.tau)
        self.clock.reset()
        self.strategy.begin_rollout()
        out: list[Rollout] = []
        self._finished = []
        for r in requests:
            self.add(r)
        out.extend(self._finished)
        if on_finish:
            for r in self._finished:
                on_finish(r)
        while self.has_unfinished():
            done = self.step()
            out.extend(done)
            if on_finish:
                for r in done:
                    on_finish(r)
        self.trace.t_end = self.now()
        self.trace.spec = self.strategy.metrics()
        self.strategy.end_rollout()
        self.trace.b1_step_s = self.calibrate_b1() if self.trace.b1_step_time() is None else None
        out.sort(key=lambda r: (r.uid, r.sample_index))
        return out, self.trace

    def _ensure_kv(self) -> None:
        """After release_kv(): the pool again, at the size it was first given (pool_tokens). Every entry that
        needs KV (add, step) comes through here."""
        if self.cache.released:
            self.cache.restore(self.pool_tokens)

    def release_kv(self) -> None:
        """Free the KV pool between rollouts (the trainer's update can use the memory); the next generate()
        allocates it again at the same size. Captured graphs are kept: reused if the pool comes back at the
        same address, captured again if not (engine/runner.py). Idempotent."""
        self.cache.release()
        if self.cache.kv.is_cuda:
            torch.cuda.empty_cache()  # hand the pool's memory back so the update's allocator can reuse it

    def _pool_tokens(self) -> int:
        """The KV pool's capacity now (engine.kv_cache_tokens, on CUDA capped by free memory)."""
        return kv_pool_tokens(self.config, self.model, next(self.model.parameters()).device, self.max_model_len,
                              tp_group=self.model.tp.group)

    def calibrate_b1(self, reps: int = 8) -> float:
        """Median wall time of a batch-1 decode step (short context); cached per engine."""
        if self._b1_step_s is None:
            self._b1_step_s = statistics.median(time_forward(self, 1, 1, ctx=16, reps=reps))
        return self._b1_step_s
