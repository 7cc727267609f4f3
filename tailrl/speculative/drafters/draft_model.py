"""Draft-model drafting: a smaller model with the same tokenizer and its own paged KV cache.

Drafts are *keyed* samples of the draft model: the same key (seed, uid, sample, position) and the same
sampler as the target, so wherever the two distributions are close the inverse-CDF draws coincide and
the exact check accepts them (greedy decoding drafts the argmax). The draft cache tracks which tokens
its K/V holds; before drafting it is cut back to the longest prefix shared with the verified tokens
(O(1) rollback: truncate the block table), then the missing tokens are fed in one catch-up row.
"""

from __future__ import annotations

from tailrl.engine.kv_cache import PagedKVCache
from tailrl.engine.runner import ModelRunner
from tailrl.engine.sampling.keyed import SAMPLERS
from tailrl.engine.sampling.rows import sample_rows
from tailrl.engine.sequence import Sequence
from tailrl.errors import UserError
from tailrl.speculative.drafters.base import DRAFTERS
from tailrl.speculative.drafters.vocab_head import load_draft


class DraftModelDrafter:
    name = "draft"

    def __init__(self, model, sampler: str, kv_cache_tokens: int = 65536, block_size: int = 16):
        self.model = model
        self.cache = PagedKVCache(model, kv_cache_tokens, block_size)
        self.runner = ModelRunner(model, self.cache)
        self.sampler = SAMPLERS.get(sampler)  # engine.sampler: the target's keyed draws (tokens only)
        self._ctx: dict[int, list[int]] = {}  # seq id -> tokens whose K/V is in the draft cache

    def _sync(self, seq: Sequence) -> int:
        """Cut the draft cache back to its longest prefix shared with seq.tokens, leaving >= 1 token to feed."""
        ctx = self._ctx.setdefault(seq.seq_id, [])
        m = len(ctx)
        if m < len(seq.tokens) and seq.tokens[:m] == ctx:
            return m  # the usual round: the cache holds a prefix of the sequence (one C-level compare)
        n = 0
        limit = min(len(ctx), len(seq.tokens) - 1)
        while n < limit and ctx[n] == seq.tokens[n]:
            n += 1
        if n < len(ctx):
            del ctx[n:]
            self.cache.truncate(seq.seq_id, n)
        return n

    def propose(self, seqs: list[Sequence], ks: list[int], draws=None) -> list[list[int]]:
        """Keyed draws of the draft model (it computes the keys itself; `draws` are not needed)."""
        drafts: list[list[int]] = [[] for _ in seqs]
        feed: dict[int, list[int]] = {}
        for i, (s, k) in enumerate(zip(seqs, ks)):
            if k > 0:
                feed[i] = s.tokens[self._sync(s):]
        while feed:
            rows = []
            for i, toks in feed.items():
                sid, start = seqs[i].seq_id, len(self._ctx[seqs[i].seq_id])
                if self.cache.can_ensure(sid, start, len(toks)):
                    self.cache.ensure(sid, start, len(toks))
                    rows.append(i)
                else:  # draft cache full: this sequence drafts no further this round
                    self.release(seqs[i])
            if not rows:
                break
            logits = self.runner.forward([seqs[i].seq_id for i in rows], [len(self._ctx[seqs[i].seq_id]) for i in rows],
                                         [feed[i] for i in rows])
            for i in rows:
                self._ctx[seqs[i].seq_id].extend(feed[i])
            toks, _ = sample_rows([seqs[i] for i in rows], logits,
                                  [seqs[i].num_generated + len(drafts[i]) for i in rows], self.sampler)
            feed = {}
            for i, t in zip(rows, toks.tolist()):
                drafts[i].append(t)
                if len(drafts[i]) < ks[i]:
                    feed[i] = [t]
        return drafts

    def release(self, seq: Sequence) -> None:
        if self._ctx.pop(seq.seq_id, None) is not None:
            self.cache.free(seq.seq_id)

    def end_rollout(self) -> None:
        for sid in list(self._ctx):
            self.cache.free(sid)
        self._ctx.clear()


@DRAFTERS.register("draft")
def _draft_factory(engine, cfg) -> DraftModelDrafter:
    path = cfg.draft_model
    if not path:
        raise UserError("speculation with a draft model needs engine.spec.draft_model (or --spec draft:PATH)")
    p = next(engine.model.parameters())
    model = load_draft(path, dtype=p.dtype, device=str(p.device))
    if model.args.vocab_size != engine.model.args.vocab_size:
        raise UserError(f"draft model vocabulary ({model.args.vocab_size}) differs from the policy's "
                        f"({engine.model.args.vocab_size}); it must share the tokenizer")
    return DraftModelDrafter(model, engine.config.sampler, cfg.draft_kv_tokens, engine.config.block_size)
