"""Drafters: propose up to k next tokens per sequence. Proposals never change the output (verification
is exact); they only decide how many tokens one target forward can confirm.

    class Drafter(Protocol):
        name: str
        def propose(self, seqs, ks) -> list[list[int]]   # batched: one proposal (<= ks[i] tokens) per seq
        def release(self, seq) -> None                   # seq finished / failed: drop its state
        def end_rollout(self) -> None                    # generate() finished: keep what outlives a step

DRAFTERS maps a name to a factory(engine, spec_config, arg) -> Drafter.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Protocol

from tailrl.engine.sequence import Sequence
from tailrl.engine.spec.ngram_index import NgramIndex


class Drafter(Protocol):
    name: str

    def propose(self, seqs: list[Sequence], ks: list[int]) -> list[list[int]]: ...

    def release(self, seq: Sequence) -> None: ...

    def end_rollout(self) -> None: ...


DRAFTERS: dict[str, Callable[..., Drafter]] = {}


class PromptLookupDrafter:
    """Prompt-lookup n-gram drafting: match the sequence's current suffix in its own prompt and output."""

    name = "ngram"

    def __init__(self, min_n: int = 2, max_n: int = 6):
        self.min_n, self.max_n = min_n, max_n
        self._index: dict[int, NgramIndex] = {}

    def propose(self, seqs: list[Sequence], ks: list[int]) -> list[list[int]]:
        out = []
        for s, k in zip(seqs, ks):
            idx = self._index.get(s.seq_id)
            if idx is None:
                idx = self._index[s.seq_id] = NgramIndex(self.min_n, self.max_n)
                idx.add(s.tokens)
            idx.refresh()
            out.append(idx.propose(s.tokens[-self.max_n:], k))
        return out

    def release(self, seq: Sequence) -> None:
        self._index.pop(seq.seq_id, None)

    def end_rollout(self) -> None:
        self._index.clear()


class HistoryDrafter:
    """Group / history suffix drafting: one n-gram index per prompt over the live sibling rollouts of this
    step (GRPO's G samples share much text) and the last `per_prompt` finished rollouts of the same prompt
    from earlier steps (history rhymes: RhymeRL / SPEC-RL)."""

    name = "history"

    def __init__(self, min_n: int = 2, max_n: int = 6, per_prompt: int = 32, max_prompts: int = 100_000):
        self.min_n, self.max_n, self.per_prompt, self.max_prompts = min_n, max_n, per_prompt, max_prompts
        self._history: OrderedDict[tuple[int, ...], deque[list[int]]] = OrderedDict()  # prompt -> outputs
        self._pools: dict[tuple[int, ...], NgramIndex] = {}
        self._member: set[int] = set()  # seq ids already in a pool

    def _pool(self, seq: Sequence) -> NgramIndex:
        key = tuple(seq.tokens[: seq.num_prompt])
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = NgramIndex(self.min_n, self.max_n)
            for old in self._history.get(key, ()):
                pool.add(old)
        if seq.seq_id not in self._member:
            self._member.add(seq.seq_id)
            pool.add(seq.tokens)  # live: the index picks up its new tokens on refresh
        return pool

    def propose(self, seqs: list[Sequence], ks: list[int]) -> list[list[int]]:
        out = []
        for s, k in zip(seqs, ks):
            pool = self._pool(s)
            pool.refresh()
            out.append(pool.propose(s.tokens[-self.max_n:], k))
        return out

    def release(self, seq: Sequence) -> None:
        if seq.finish_reason in ("stop", "length") and seq.num_generated:
            key = tuple(seq.tokens[: seq.num_prompt])
            hist = self._history.setdefault(key, deque(maxlen=self.per_prompt))
            self._history.move_to_end(key)
            hist.append(list(seq.tokens))
            while len(self._history) > self.max_prompts:
                self._history.popitem(last=False)

    def end_rollout(self) -> None:
        self._pools.clear()
        self._member.clear()


DRAFTERS["ngram"] = lambda engine, cfg, arg=None: PromptLookupDrafter(cfg.ngram_min, cfg.ngram_max)
DRAFTERS["history"] = lambda engine, cfg, arg=None: HistoryDrafter(cfg.ngram_min, cfg.ngram_max, cfg.history_per_prompt)
