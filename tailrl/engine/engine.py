"""The rollout engine: requests -> scheduler -> KV cache -> model runner -> keyed sampler -> Rollouts.

    engine = Engine(model, EngineConfig(), eos_ids={2})
    rollouts, trace = engine.generate([Request(prompt_ids, uid=0, n=8, params=SamplingParams())])

`add()` / `step()` / `has_unfinished()` drive it incrementally (new requests may join mid-rollout).
Every token is keyed by (seed, uid, sample index, position), so output never depends on batching,
arrival order or preemption.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import torch

from tailrl.config import EngineConfig
from tailrl.engine.keyed import keyed_sample_hashed, position_hash
from tailrl.engine.kv_cache import PagedKVCache
from tailrl.engine.request import Request, Rollout
from tailrl.engine.runner import ModelRunner
from tailrl.engine.scheduler import Scheduler
from tailrl.engine.sequence import Sequence
from tailrl.engine.stops import finish_reason
from tailrl.engine.telemetry import RequestRecord, RolloutTrace, StepRecord


def sample_keys(seqs: list[Sequence], positions: list[int] | None = None, device=None) -> torch.Tensor:
    """(B, 4) int64 sampling keys (seed, uid, sample index, position); positions default to each
    sequence's next index. The key's definition (and the tests' oracle); sampling goes through
    sample_hashes, which hashes the same keys with each sequence's fixed part computed once."""
    pos = positions if positions is not None else [s.num_generated for s in seqs]
    return torch.tensor([[s.request.params.seed, s.request.uid, s.sample_index, p] for s, p in zip(seqs, pos)],
                        dtype=torch.long, device=device)


def sample_hashes(seqs: list[Sequence], positions: list[int] | None = None, device=None) -> torch.Tensor:
    """(B,) int64 hashes of sample_keys(seqs, positions): each sequence's fixed key part is hashed once
    (Sequence.key_prefix), so a step hashes only the positions. uniform_from_hash of these is the uniform
    the inverse-CDF sampler draws (drafters that sample with the target's randomness use it)."""
    pos = positions if positions is not None else [s.num_generated for s in seqs]
    pp = torch.tensor([[s.key_prefix, p] for s, p in zip(seqs, pos)], dtype=torch.long, device=device)
    return position_hash(pp[:, 0], pp[:, 1])


def _params(seqs: list[Sequence], device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row (temperature (B,), top_k (B,), top_p (B,)) of seqs' sampling parameters, in one transfer."""
    p = torch.tensor([[s.request.params.temperature, s.request.params.top_k, s.request.params.top_p]
                      for s in seqs], dtype=torch.float64, device=device)
    return p[:, 0].float(), p[:, 1].long(), p[:, 2].float()


def sample_rows(seqs: list[Sequence], logits: torch.Tensor, positions: list[int] | None, sampler: str):
    """Keyed samples (tokens (B,), logprobs (B,)) for rows of logits (B, V) with each row's sampling
    parameters: the engine's sampler, shared with drafters that sample in another process."""
    dev = logits.device
    return keyed_sample_hashed(logits, sample_hashes(seqs, positions, dev), *_params(seqs, dev), sampler)


def sample_windows(seqs: list[Sequence], logits: torch.Tensor, counts: list[int], sampler: str):
    """Keyed samples for consecutive positions of each sequence: logits (sum(counts), V) holds counts[i]
    rows for seqs[i] at positions num_generated + 0 .. counts[i] - 1 (a verify window). The same keys and
    parameters as sample_rows over the expanded rows, built with tensor ops instead of per-row lists."""
    dev = logits.device
    c = torch.tensor(counts, device=dev)
    pp = torch.tensor([[s.key_prefix, s.num_generated] for s in seqs], dtype=torch.long,
                      device=dev).repeat_interleave(c, 0)  # (N, 2)
    start = torch.cumsum(c, 0) - c
    pos = pp[:, 1] + torch.arange(pp.shape[0], device=dev) - start.repeat_interleave(c)
    temp, top_k, top_p = (t.repeat_interleave(c, 0) for t in _params(seqs, dev))
    return keyed_sample_hashed(logits, position_hash(pp[:, 0], pos), temp, top_k, top_p, sampler)


class Engine:
    def __init__(self, model, config: EngineConfig | None = None, eos_ids: Iterable[int] = (),
                 detokenize: Callable[[list[int]], str] | None = None, tau: float = 1.25):
        self.model = model
        self.config = config = config or EngineConfig()
        self.max_model_len = config.max_model_len or model.args.max_position_embeddings
        self.cache = PagedKVCache(model, config.kv_cache_tokens, config.block_size)
        self.runner = ModelRunner(model, self.cache)
        self.scheduler = Scheduler(self.cache, config.max_batch_size, config.max_prefill_tokens)
        self.eos_ids = frozenset(eos_ids) or frozenset(model.args.eos_token_ids)
        self.detokenize = detokenize
        self.tau = tau
        self._next_seq = 0
        self._b1_step_s: float | None = None
        self._finished: list[Rollout] = []
        self.trace = RolloutTrace(tau=tau)
        self._t0 = time.perf_counter()
        self.speculator = None
        if config.spec.method != "none":
            from tailrl.engine.spec.modes import build_speculator

            self.speculator = build_speculator(self, config.spec)

    # -- intake ---------------------------------------------------------------------------------
    def _now(self) -> float:
        return time.perf_counter() - self._t0

    def add(self, request: Request) -> None:
        """Queue a request's n samples; an invalid request yields error rollouts at once."""
        error = request.error or self._validate(request)
        for i in range(request.n if request.n >= 1 else 1):
            k = request.first_sample + i
            budget = request.max_new_tokens[i] if request.max_new_tokens else request.params.max_new_tokens
            seq = Sequence(self._next_seq, request, k, budget, list(request.prompt_ids), len(request.prompt_ids))
            self._next_seq += 1
            seq.t_start = self._now()
            if error:
                self._fail(seq, error)
            else:
                self.scheduler.add(seq)

    def close(self) -> None:
        """Release what the engine started besides memory (a decoupled speculator's drafter process)."""
        if self.speculator is not None:
            self.speculator.close()

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

    # -- one forward ----------------------------------------------------------------------------
    def step(self) -> list[Rollout]:
        """Run one prefill or decode forward; returns the rollouts that finished in it."""
        self._finished = []
        sch = self.scheduler
        admitted = sch.admit()
        if admitted:
            self._prefill(admitted)
        elif sch.running:
            ready, impossible = sch.prepare_decode()
            for seq in impossible:
                self._fail(seq, "sequence no longer fits in the KV cache (raise engine.kv_cache_tokens)")
            if ready and self.speculator is not None:
                self.speculator.decode(self, ready)
            elif ready:
                self._decode(ready)
        elif sch.waiting:  # nothing running and the head still does not fit: it never will
            seq = sch.waiting.popleft()
            self._fail(seq, f"sequence of {len(seq.tokens)} tokens exceeds the KV cache")
        self.trace.preemptions = sch.preemptions
        return self._finished

    def _prefill(self, admitted: list[Sequence]) -> None:
        rows = [s for s in admitted if s.group_parent is None]
        for s in rows:
            self.cache.ensure(s.seq_id, s.num_cached, s.pending)
        t0 = self._now()
        n_tokens = sum(s.pending for s in rows)
        logits = self.runner.forward([s.seq_id for s in rows], [s.num_cached for s in rows],
                                     [s.tokens[s.num_cached:] for s in rows])
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
        self.trace.steps.append(StepRecord("prefill", t0, self._now(), len(admitted), n_tokens, len(admitted)))

    def _decode(self, ready: list[Sequence]) -> None:
        t0 = self._now()
        logits = self.runner.forward([s.seq_id for s in ready], [s.num_cached for s in ready],
                                     [s.tokens[s.num_cached:] for s in ready])
        for s in ready:
            s.num_cached = len(s.tokens)
        self._sample_and_advance(ready, logits)
        self.trace.steps.append(StepRecord("decode", t0, self._now(), len(ready), len(ready), len(ready)))

    def sample(self, seqs: list[Sequence], logits: torch.Tensor, positions: list[int] | None = None):
        """Keyed samples for rows of logits (B, V); positions default to each sequence's next index."""
        return sample_rows(seqs, logits, positions, self.config.sampler)

    def advance(self, seq: Sequence, token: int, logprob: float) -> bool:
        """Append one sampled token; finish the sequence when it stops. Returns whether it finished."""
        seq.tokens.append(token)
        seq.logprobs.append(logprob)
        reason = finish_reason(seq, self.eos_ids, self.max_model_len, self.detokenize)
        if reason is not None:
            self._finish(seq, reason)
        return reason is not None

    def _sample_and_advance(self, seqs: list[Sequence], logits: torch.Tensor) -> None:
        tokens, logps = self.sample(seqs, logits)
        for s, t, lp in zip(seqs, tokens.tolist(), logps.tolist()):
            self.advance(s, t, lp)

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
        seq.finish_reason, seq.error, seq.t_finish = reason, error, self._now()
        if self.speculator is not None:
            self.speculator.release(seq)
        r = Rollout(seq.request.uid, seq.sample_index, seq.tokens[: seq.num_prompt], seq.generated, seq.logprobs,
                    reason, error, seq.t_start, seq.t_finish)
        self.trace.requests.append(RequestRecord(r.uid, r.sample_index, r.t_start, r.t_finish, r.num_tokens, reason,
                                                 seq.num_prompt))
        self._finished.append(r)

    def _fail(self, seq: Sequence, error: str) -> None:
        seq.tokens = seq.tokens[: seq.num_prompt]
        seq.logprobs = []
        self._finish(seq, "error", error)

    def generate(self, requests: Iterable[Request], on_finish: Callable[[Rollout], None] | None = None,
                 ) -> tuple[list[Rollout], RolloutTrace]:
        """Run requests to completion. Returns rollouts sorted by (uid, sample index) and the trace."""
        self.trace = RolloutTrace(tau=self.tau)
        self._t0 = time.perf_counter()
        if self.speculator is not None:
            self.speculator.reset_counters()
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
        self.trace.t_end = self._now()
        if self.speculator is not None:
            self.trace.spec = self.speculator.metrics()
            self.speculator.end_rollout()
        self.trace.b1_step_s = self.calibrate_b1() if self.trace.b1_step_time() is None else None
        out.sort(key=lambda r: (r.uid, r.sample_index))
        return out, self.trace

    @torch.inference_mode()
    def calibrate_b1(self, steps: int = 8) -> float:
        """Median wall time of a batch-1 decode step (short context); cached per engine."""
        if self._b1_step_s is None:
            import statistics

            sid = -1
            self.cache.ensure(sid, 0, 16 + steps)
            times = []
            try:
                self.runner.forward([sid], [0], [list(range(16))])
                for i in range(steps):
                    t = time.perf_counter()
                    self.runner.forward([sid], [16 + i], [[1]])
                    times.append(time.perf_counter() - t)
            finally:
                self.cache.free(sid)
            self._b1_step_s = statistics.median(times)
        return self._b1_step_s
