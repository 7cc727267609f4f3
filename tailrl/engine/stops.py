"""When a sequence is done: EOS / stop ids, stop strings, its token budget, the context limit."""

from __future__ import annotations

from collections.abc import Callable

from tailrl.engine.sequence import Sequence


def finish_reason(seq: Sequence, eos_ids: frozenset[int], max_model_len: int,
                  detokenize: Callable[[list[int]], str] | None) -> str | None:
    """'stop', 'length' or None (keep going), after the last token was appended."""
    p = seq.request.params
    last = seq.tokens[-1]
    if (not p.ignore_eos and last in eos_ids) or last in p.stop_token_ids:
        return "stop"
    if p.stop and detokenize is not None:
        longest = max(len(s) for s in p.stop)
        tail = detokenize(seq.generated[-(longest + 4):])  # a token is >= 1 char except rare merges
        if any(s in tail for s in p.stop):
            return "stop"
    if seq.num_generated >= seq.max_new_tokens or len(seq.tokens) >= max_model_len:
        return "length"
    return None


def trim_at_stop(text: str, stops: tuple[str, ...]) -> str:
    """Text up to (excluding) the first stop string, as users of stop strings expect."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return text if cut < 0 else text[:cut]
