"""An incremental n-gram index over growing token lists, and suffix-match proposals from it.

Sources are token lists that may keep growing (a live sibling rollout, the sequence itself); `refresh`
indexes only their new tokens, so keeping the index current costs O(new tokens x n-gram sizes).
`propose(suffix, k, draws)` looks up the longest n-gram (max_n down to min_n) ending the suffix and
returns up to k continuation tokens, chosen position by position among the matches still consistent
with the tokens chosen so far: with `draws` (per drafted position, the target sampler's draw from a small
distribution at that position's key: engine/sampling/votes.py) applied to the matches' empirical
next-token counts — so wherever that distribution is close to the policy's, the draft *is* the policy's
sample; without (greedy decoding), by majority vote.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

Draw = Callable[[Counter], int]  # next-token counts -> the token the target's sampler draws from them


class NgramIndex:
    def __init__(self, min_n: int = 2, max_n: int = 6, max_hits: int = 16):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"n-gram sizes must satisfy 1 <= min_n <= max_n, got {min_n}, {max_n}")
        self.min_n, self.max_n, self.max_hits = min_n, max_n, max_hits
        self.sources: list[list[int]] = []
        self._done: list[int] = []  # tokens of each source already indexed
        self._index: dict[tuple[int, ...], list[tuple[int, int]]] = {}  # n-gram -> [(source, end)]

    def add(self, tokens: list[int]) -> int:
        """Register a (possibly growing) token list; returns its source id."""
        self.sources.append(tokens)
        self._done.append(0)
        return len(self.sources) - 1

    def refresh(self) -> None:
        """Index the n-grams ending at every position added since the last refresh."""
        for s, toks in enumerate(self.sources):
            for end in range(self._done[s] + 1, len(toks) + 1):
                for n in range(self.min_n, min(self.max_n, end) + 1):
                    hits = self._index.setdefault(tuple(toks[end - n:end]), [])
                    hits.append((s, end))
                    if len(hits) > 4 * self.max_hits:
                        del hits[: len(hits) - self.max_hits]
            self._done[s] = len(toks)

    def propose(self, suffix: list[int], k: int, draws: list[Draw] | None = None) -> list[int]:
        """Up to k tokens continuing `suffix` (matches with no continuation yet, e.g. the suffix's own
        occurrence at the end of a source, are skipped)."""
        if k <= 0:
            return []
        for n in range(min(self.max_n, len(suffix)), self.min_n - 1, -1):
            hits = [(s, e) for s, e in self._index.get(tuple(suffix[-n:]), ())[-self.max_hits:]
                    if e < len(self.sources[s])]
            if hits:
                return self._draw(hits, k, draws)
        return []

    def _draw(self, hits: list[tuple[int, int]], k: int, draws: list[Draw] | None) -> list[int]:
        out: list[int] = []
        live = hits
        for i in range(k):
            votes = Counter(self.sources[s][e + i] for s, e in live if e + i < len(self.sources[s]))
            if not votes:
                break
            if draws is None:
                tok = max(votes.items(), key=lambda kv: (kv[1], -kv[0]))[0]  # majority, ties to the lower id
            else:
                tok = draws[i](votes)
            out.append(tok)
            live = [(s, e) for s, e in live if e + i < len(self.sources[s]) and self.sources[s][e + i] == tok]
        return out

