"""Model-free drafters that look drafts up in text already seen: `ngram` (prompt lookup in the sequence's
own prompt and output) and `history` (sibling rollouts of the same prompt and earlier steps' rollouts)."""

from __future__ import annotations

from collections import OrderedDict, deque

from tailrl.engine.sequence import Sequence
from tailrl.speculative.drafters.base import DRAFTERS
from tailrl.speculative.drafters.ngram_index import NgramIndex


class PromptLookupDrafter:
    """Prompt-lookup n-gram drafting: match the sequence's current suffix in its own prompt and output."""

    name = "ngram"

    def __init__(self, min_n: int = 2, max_n: int = 6):
        self.min_n, self.max_n = min_n, max_n
        self._index: dict[int, NgramIndex] = {}

    def propose(self, seqs: list[Sequence], ks: list[int], draws=None) -> list[list[int]]:
        out = []
        for i, (s, k) in enumerate(zip(seqs, ks)):
            idx = self._index.get(s.seq_id)
            if idx is None:
                idx = self._index[s.seq_id] = NgramIndex(self.min_n, self.max_n)
                idx.add(s.tokens)
            idx.refresh()
            out.append(idx.propose(s.tokens[-self.max_n:], k, draws[i] if draws else None))
        return out

    def release(self, seq: Sequence) -> None:
        self._index.pop(seq.seq_id, None)

    def end_rollout(self) -> None:
        self._index.clear()


class HistoryDrafter:
    """Group / history suffix drafting: one n-gram index per prompt over the live sibling rollouts of this
    step (GRPO's G samples share much text) and the last `per_prompt` finished rollouts of the same prompt
    from earlier steps (history rhymes: RhymeRL / SPEC-RL); when the prompt's pool has no match, a global
    index over the last `global_size` finished rollouts of any prompt (the policy's habits: its own
    arithmetic facts, phrases and formats). Drafts are keyed draws from the matches' empirical
    continuation distribution (see NgramIndex), so they follow the policy's sampling."""

    name = "history"

    def __init__(self, min_n: int = 2, max_n: int = 6, per_prompt: int = 32, global_size: int = 1024,
                 max_prompts: int = 100_000):
        self.min_n, self.max_n, self.per_prompt, self.max_prompts = min_n, max_n, per_prompt, max_prompts
        self._history: OrderedDict[tuple[int, ...], deque[list[int]]] = OrderedDict()  # prompt -> outputs
        self._recent: deque[list[int]] = deque(maxlen=global_size)  # generated tokens, any prompt
        self._fresh: list[list[int]] = []  # finished in this rollout, not yet in the global index
        self._global = self._build_global()
        self._global_stale = True  # sources added since the global index last indexed them
        self._pools: dict[tuple[int, ...], NgramIndex] = {}
        self._member: set[int] = set()  # seq ids already in a pool

    def _build_global(self) -> NgramIndex:
        idx = NgramIndex(self.min_n, self.max_n, max_hits=64)
        for toks in self._recent:
            idx.add(toks)
        return idx

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

    def propose(self, seqs: list[Sequence], ks: list[int], draws=None) -> list[list[int]]:
        out = []
        for i, (s, k) in enumerate(zip(seqs, ks)):
            pool = self._pool(s)
            pool.refresh()
            u = draws[i] if draws else None
            suffix = s.tokens[-self.max_n:]
            found = pool.propose(suffix, k, u)
            if not found:
                if self._global_stale:  # its sources change only between rollouts
                    self._global.refresh()
                    self._global_stale = False
                found = self._global.propose(suffix, k, u)
            out.append(found)
        return out

    def release(self, seq: Sequence) -> None:
        if seq.finish_reason in ("stop", "length") and seq.num_generated:
            key = tuple(seq.tokens[: seq.num_prompt])
            hist = self._history.setdefault(key, deque(maxlen=self.per_prompt))
            self._history.move_to_end(key)
            hist.append(list(seq.tokens))
            while len(self._history) > self.max_prompts:
                self._history.popitem(last=False)
            self._recent.append(seq.tokens[max(0, seq.num_prompt - self.max_n):])
            self._fresh.append(self._recent[-1])

    def end_rollout(self) -> None:
        self._pools.clear()
        self._member.clear()
        for toks in self._fresh:  # incremental; rebuilt only when twice the window has accumulated
            self._global.add(toks)
        self._fresh.clear()
        if len(self._global.sources) > 2 * (self._recent.maxlen or 0):
            self._global = self._build_global()
        self._global_stale = True
        # indexing is lazy (propose refreshes): while speculation stays off it costs nothing


@DRAFTERS.register("ngram")
def _ngram(engine, cfg) -> PromptLookupDrafter:
    return PromptLookupDrafter(cfg.coupled.ngram_min, cfg.coupled.ngram_max)


@DRAFTERS.register("history")
def _history(engine, cfg) -> HistoryDrafter:
    return HistoryDrafter(cfg.coupled.ngram_min, cfg.coupled.ngram_max, cfg.coupled.history_per_prompt)
