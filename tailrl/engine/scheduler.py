"""Scheduler: which sequences run in the next forward (bookkeeping only; no tensors).

Continuous batching: sequences leave the running set the moment they finish, and waiting ones are
admitted whenever batch slots and KV blocks allow — also mid-rollout (refills, over-sampling).
Admission prefers prefill; the samples of one prompt admitted together prefill once (one row) and
fork the prompt's KV. When a decode step needs a block and none is free, the newest sequence is
preempted: its blocks are freed and it re-enters the queue to be recomputed (prefill of prompt +
generated tokens). Keyed sampling makes the result independent of all of this.
"""

from __future__ import annotations

from collections import deque

from tailrl.engine.kv_cache import PagedKVCache
from tailrl.engine.sequence import Sequence


class Scheduler:
    def __init__(self, cache: PagedKVCache, max_batch_size: int, max_prefill_tokens: int):
        self.cache = cache
        self.max_batch_size = max_batch_size
        self.max_prefill_tokens = max_prefill_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # in admission order (admitted_at increasing): no per-step sort
        self.parked: dict[int, Sequence] = {}  # multi-turn: waiting for an observation, K/V kept while room lasts
        self.preemptions = 0
        self._admissions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.parked)

    def admit(self) -> list[Sequence]:
        """Admit waiting sequences for a prefill forward. Returns the admitted ones; siblings that will
        fork a parent's prompt KV carry `group_parent` and need no prefill row of their own."""
        admitted: list[Sequence] = []
        budget = self.max_prefill_tokens
        free = self.cache.num_free
        parents: dict[int, Sequence] = {}  # id(request) -> fresh parent admitted in this batch
        while self.waiting and len(self.running) + len(admitted) < self.max_batch_size:
            seq = self.waiting[0]
            fresh = seq.num_generated == 0 and seq.num_cached == 0
            parent = parents.get(id(seq.request)) if fresh else None
            if parent is not None:
                need_blocks, need_tokens = 1, 0  # copy-on-write of the shared partial block, later
            else:
                need_blocks = self._missing_blocks(seq)
                need_tokens = seq.pending
            if admitted and (need_blocks > free or need_tokens > budget):
                break
            if need_blocks > free and not self.running:
                free += self._evict_idle(need_blocks - free, keep=seq)  # idle K/V goes before a deadlock
                need_blocks = self._missing_blocks(seq)
            if need_blocks > free:
                break  # nothing admitted yet: wait for running sequences to free blocks
            self.waiting.popleft()
            seq.group_parent = parent
            if fresh and parent is None:
                parents[id(seq.request)] = seq
            free -= need_blocks
            budget -= need_tokens
            self._admissions += 1
            seq.admitted_at = self._admissions
            admitted.append(seq)
        return admitted

    def adopt(self, seq: Sequence, cached: bool) -> None:
        """A sequence arriving from another engine: running at once when its K/V came along, else
        waiting for a recompute."""
        if cached:
            self._admissions += 1
            seq.admitted_at = self._admissions
            self.running.append(seq)
        else:
            self.waiting.append(seq)

    def start_running(self, seqs: list[Sequence]) -> None:
        self.running.extend(seqs)

    def prepare_decode(self) -> tuple[list[Sequence], list[Sequence]]:
        """Make KV room for each running sequence's next forward (its pending tokens).
        Preempts the newest sequences when blocks run out. Returns (ready, impossible): `impossible`
        sequences cannot fit even alone and must be failed by the caller."""
        impossible: list[Sequence] = []
        preempted: set[int] = set()
        cache = self.cache
        for seq in list(self.running):  # oldest first: the newest are preempted to make room
            n = seq.pending
            if cache.writable(seq.seq_id, seq.num_cached, n):
                continue  # its blocks already hold the next tokens (most decode steps)
            if seq.seq_id in preempted:
                continue  # preempted below while making room for an older one
            while not self.cache.can_ensure(seq.seq_id, seq.num_cached, n):
                if self._evict_idle(1, keep=seq):
                    continue  # a parked or queued sequence's K/V made the room
                victim = max(self.running, key=lambda s: s.admitted_at)
                if victim is seq and len(self.running) == 1:
                    impossible.append(seq)
                    self.running.remove(seq)
                    break
                self.preempt(victim)
                preempted.add(victim.seq_id)
                if victim is seq:
                    break
            else:
                self.cache.ensure(seq.seq_id, seq.num_cached, n)
        return list(self.running), impossible

    def _missing_blocks(self, seq: Sequence) -> int:
        """Blocks seq's prefill still needs: all of them, less those a resumed multi-turn sequence still
        holds (engine/turns.py)."""
        return max(0, self.cache.blocks_for(len(seq.tokens) + 1) - len(self.cache.tables.get(seq.seq_id, ())))

    def _evict_idle(self, blocks: int, keep: Sequence) -> int:
        """Free the K/V of idle sequences — parked (multi-turn) first, then queued ones still holding blocks —
        newest first, until `blocks` blocks are free or none is left; they are recomputed when they run
        again. Returns the blocks freed."""
        idle = sorted(self.parked.values(), key=lambda s: -s.admitted_at) + [
            s for s in reversed(self.waiting) if s is not keep]
        freed = 0
        for s in idle:
            if freed >= blocks:
                break
            held = len(self.cache.tables.get(s.seq_id, ()))
            if held:
                self.cache.free(s.seq_id)
                s.num_cached = 0
                self.preemptions += 1
                freed += held
        return freed

    def preempt(self, seq: Sequence) -> None:
        self.cache.free(seq.seq_id)
        seq.num_cached = 0
        seq.group_parent = None
        self.running.remove(seq)
        self.waiting.appendleft(seq)
        self.preemptions += 1

    def finish(self, seq: Sequence) -> None:
        self.cache.free(seq.seq_id)
        if seq in self.running:
            self.running.remove(seq)
