"""One coupled speculative decode step with exact keyed verification.

For each running sequence: row = [pending tokens .., last token = tree root, tree nodes ..] where the
tree merges its candidate drafts (a chain for one drafter, a trie for Best-of-N). One target forward
over all rows (ancestor-only masks for trees, rotary position = root position + depth); keyed samples
at the root and every node with the same key plain decoding uses (seed, uid, sample, position); the
longest path whose tokens equal their parents' samples is kept, plus the sample after it. K/V of a
tree's kept path is moved to consecutive slots, everything after it is rolled back (engine.commit).
"""

from __future__ import annotations

import torch

from tailrl.engine.sampling.rows import to_host
from tailrl.speculative.tree import accept_path, build_tree


def _row_mask(pending: int, tree) -> torch.Tensor:
    """(p + m, p + m) bool over [pending tokens (the last is the root), m tree nodes]."""
    n = pending - 1 + len(tree)
    m = torch.zeros(n, n, dtype=torch.bool)
    m[: pending, : pending] = torch.ones(pending, pending, dtype=torch.bool).tril()
    m[pending - 1:, : pending - 1] = True
    m[pending - 1:, pending - 1:] = tree.mask()
    return m


def speculative_decode(spec, ready) -> None:
    """One decode step of `ready` for the coupled Speculator `spec`: plan, verify, commit."""
    engine = spec.engine
    cache = engine.cache
    t0 = engine.now()
    room = []
    for s in ready:
        left = min(s.max_new_tokens - s.num_generated, engine.max_model_len - len(s.tokens))
        room.append(left - 1)  # the bonus token needs a place too
    cands = spec.plan(ready, room)
    if cands is None:  # the cost models expect a plain step to be faster here
        engine.decode_step(ready)
        spec.plain_step.observe(len(ready), engine.now() - t0)
        spec.record("plain", len(ready), len(ready), engine.now() - t0)
        return
    trees, toks, masks, depths, rows = [], [], [], [], []
    for s, cand in zip(ready, cands):
        p = s.pending
        tree = build_tree(s.tokens[-1], [d for _, d in cand])
        if len(tree) > 1 and not cache.can_ensure(s.seq_id, s.num_cached, p + len(tree) - 1):
            tree, cand[:] = build_tree(s.tokens[-1], []), []
        cache.ensure(s.seq_id, s.num_cached, p + len(tree) - 1)
        trees.append(tree)
        toks.append(s.tokens[s.num_cached:] + tree.tokens[1:])
        chain = tree.is_chain
        masks.append(None if chain else _row_mask(p, tree))
        depths.append(None if chain else list(range(p - 1)) + [p - 1 + d for d in tree.depth])
        rows.append([p - 1 + i for i in range(len(tree))])
    use_tree = any(m is not None for m in masks)
    tf = engine.now()
    logits = engine.forward(ready, toks, tree_mask=masks if use_tree else None,
                            tree_depth=depths if use_tree else None, logits_rows=rows)  # (B, R, V)
    flat_seqs, flat_pos, flat_logits = [], [], []
    for b, (s, tree) in enumerate(zip(ready, trees)):
        for i in range(len(tree)):
            flat_seqs.append(s)
            flat_pos.append(s.num_generated + tree.depth[i])
        flat_logits.append(logits[b, : len(tree)])
    samples, logps = to_host(*engine.sample(flat_seqs, torch.cat(flat_logits), flat_pos))  # waits for the forward
    n_tokens = sum(len(t) for t in toks)
    t_fwd = engine.now() - tf
    spec.cost.observe(n_tokens, t_fwd)
    off = emitted_total = 0
    for s, tree, cand in zip(ready, trees, cands):
        smp, lp = samples[off: off + len(tree)], logps[off: off + len(tree)]
        off += len(tree)
        path, emitted = accept_path(tree, smp)
        if cand:
            spec.observe(s, cand, emitted[:-1], tree.source[path[-1]] if path else 0)
        base = s.num_cached + s.pending  # tokens whose K/V this forward completed (pending incl. root)
        if path != list(range(1, len(path) + 1)):  # keep the path's K/V at consecutive positions
            cache.move(s.seq_id, [base - 1 + node for node in path], list(range(base, base + len(path))))
        sources = [0] + path  # emitted[j] was sampled at node sources[j]
        emitted_total += engine.commit(s, base + len(path), emitted, [lp[i] for i in sources])
    spec.record("spec", len(ready), emitted_total, engine.now() - t0)
    spec.spec_overhead.observe(len(ready), max(0.0, engine.now() - t0 - t_fwd - spec.last_draft_s))
    engine.record("verify", t0, len(ready), n_tokens, emitted_total)
