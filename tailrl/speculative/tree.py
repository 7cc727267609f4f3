"""Token trees for exact speculative verification (pure functions, no model).

A verify row for one sequence is [root, n_1 .. n_m]: the root is the sequence's last sampled (not yet
cached) token; the nodes are the union of the candidate drafts merged as a trie, so a chain draft is a
tree with one path and Best-of-N drafts share their common prefixes. The target model runs the row
once with an ancestor-only attention mask; the keyed sample at each node is exactly the token plain
decoding would produce after that node's path. Walking from the root and following the child equal to
the sample keeps the longest exactly-verified path, plus one corrected/bonus token — so the output is
token-identical to plain decoding whatever the drafts were.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class TokenTree:
    tokens: list[int]  # node tokens; index 0 is the root
    parents: list[int]  # parent index per node (-1 for the root)
    depth: list[int]  # root depth 0
    source: list[int]  # per node: index of the first candidate that proposed it (-1 for the root)

    def __len__(self) -> int:
        return len(self.tokens)

    def mask(self) -> torch.Tensor:
        """(n, n) bool: node i attends to node j iff j is i or an ancestor of i."""
        n = len(self.tokens)
        rows: list[list[bool]] = []
        for i, p in enumerate(self.parents):  # a parent comes before its children
            row = list(rows[p]) if p >= 0 else [False] * n
            row[i] = True
            rows.append(row)
        return torch.tensor(rows, dtype=torch.bool)

    @property
    def is_chain(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents))


def build_tree(root: int, candidates: list[list[int]]) -> TokenTree:
    """Merge candidate drafts (each continuing after `root`) into a trie rooted at `root`.
    Nodes appear in first-seen order, so a single candidate gives a chain [root, d1, .., dk]."""
    tree = TokenTree([root], [-1], [0], [-1])
    children: list[dict[int, int]] = [{}]
    for c, draft in enumerate(candidates):
        cur = 0
        for tok in draft:
            nxt = children[cur].get(tok)
            if nxt is None:
                nxt = len(tree.tokens)
                tree.tokens.append(tok)
                tree.parents.append(cur)
                tree.depth.append(tree.depth[cur] + 1)
                tree.source.append(c)
                children.append({})
                children[cur][tok] = nxt
            cur = nxt
    return tree


def accept_path(tree: TokenTree, samples: list[int]) -> tuple[list[int], list[int]]:
    """samples[i]: the keyed target sample at node i (the token that follows node i's path).
    Returns (path, emitted): path = accepted node indices (excluding the root) along which every node
    equals the sample of its parent; emitted = their tokens + the sample at the path's last node."""
    children: dict[int, dict[int, int]] = {}
    for i in range(1, len(tree.tokens)):
        children.setdefault(tree.parents[i], {})[tree.tokens[i]] = i
    path, cur = [], 0
    while True:
        nxt = children.get(cur, {}).get(samples[cur])
        if nxt is None:
            break
        path.append(nxt)
        cur = nxt
    return path, [tree.tokens[i] for i in path] + [samples[cur]]
