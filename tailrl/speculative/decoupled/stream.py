"""A request's stream of unverified drafts in decoupled speculation, and the one rule both sides apply.

The drafter process and the verifier (the engine) each keep a Stream per request: the drafted tokens
after the last verified one, and an epoch. The verifier sends the tokens it commits; the drafter sends
the tokens it drafts, tagged with its epoch. Both run `reconcile` on every committed chunk: drafts
equal to the committed tokens are consumed, the first difference kills the rest of the stream and
bumps the epoch. Because each side sees the same committed tokens against the same drafts, they bump
epochs in step without extra messages, and the verifier can drop any draft chunk from an older epoch.
Nothing here decides a token: verification (spec/decoupled.py) keeps the target's keyed samples.

Per-request pacing (SpecActor §4.1): `decoupled` drafts up to w per round and runs at most 2w - 1
ahead of the verified token (a mismatch wastes at most 2w - 1 drafted tokens); `coupled` keeps the
draft-verify barrier: w drafts only when nothing is in flight, all w verified in one forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Stream:
    start: int                 # position (index in prompt + generated) of tokens[0] = verified length
    w: int                     # draft window
    mode: str = "decoupled"
    tokens: list[int] = field(default_factory=list)
    epoch: int = 0

    @property
    def end(self) -> int:
        return self.start + len(self.tokens)

    def ahead_cap(self) -> int:
        """Most drafted tokens in flight beyond the verified ones."""
        return 2 * self.w - 1 if self.mode == "decoupled" else self.w

    def to_draft(self, limit: int) -> int:
        """Tokens to draft this round; limit = first position past the request's budget."""
        if self.mode == "coupled" and self.tokens:
            return 0  # the barrier: wait until the window in flight is verified
        return max(0, min(self.w, self.ahead_cap() - len(self.tokens), limit - self.end))

    def verify_window(self) -> int:
        """Drafts the verifier puts into its forward this round (the rest wait for the next round)."""
        return min(len(self.tokens), self.w - 1 if self.mode == "decoupled" else self.w)


def reconcile(stream: Stream, committed: list[int]) -> tuple[int, int]:
    """Apply tokens committed at positions stream.start.. to the stream. Returns (consumed, lost):
    drafts equal to committed tokens, and drafted tokens discarded by a mismatch (then the stream
    empties and its epoch moves on; lost > 0 exactly when that happens)."""
    n = min(len(committed), len(stream.tokens))
    bad = next((i for i in range(n) if stream.tokens[i] != committed[i]), None)
    stream.start += len(committed)
    if bad is None:
        del stream.tokens[:len(committed)]
        return n, 0
    lost = len(stream.tokens) - bad
    stream.tokens.clear()
    stream.epoch += 1
    return bad, lost


def merge(stream: Stream, epoch: int, start: int, drafted: list[int], verified: list[int]) -> tuple[int, int, bool]:
    """Verifier side: add a drafter chunk (positions start..) to the stream. verified: the request's
    verified tokens (prompt + generated). A chunk of an older epoch is dropped; one covering positions
    verified meanwhile (the verifier ran past its drafts) is checked against them like a commit.
    Returns (consumed, lost, mismatch): mismatch when this chunk ended the epoch."""
    if epoch != stream.epoch:
        return 0, len(drafted), False
    consumed = 0
    if start < stream.start:  # then the stream is empty: every earlier chunk was consumed
        probe = Stream(start, stream.w, stream.mode, list(drafted), epoch)
        consumed, lost = reconcile(probe, verified[start:stream.start])
        if lost:
            stream.epoch += 1
            return consumed, lost, True
        drafted = probe.tokens
    else:
        assert start == stream.end, (start, stream.start, stream.end)  # chunks of an epoch are contiguous
    stream.tokens.extend(drafted)
    return consumed, 0, False
