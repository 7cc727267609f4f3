"""`build_engine`: an Engine for a model and its tokenizer (EOS ids from both, stop strings decoded with the
tokenizer) — how the trainer, `tailrl generate` and the benchmarks get their engine."""

from __future__ import annotations

from tailrl.config import EngineConfig
from tailrl.engine.engine import Engine
from tailrl.tail import DEFAULT_TAU


def eos_ids_of(model, tokenizer) -> list[int]:
    """EOS ids of the model's config and the tokenizer's EOS token."""
    ids = set(model.args.eos_token_ids)
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return sorted(ids)


def build_engine(model, tokenizer, cfg: EngineConfig, tau: float = DEFAULT_TAU) -> Engine:
    detok = (lambda ids: tokenizer.decode(ids, skip_special_tokens=True)) if tokenizer is not None else None
    return Engine(model, cfg, eos_ids=eos_ids_of(model, tokenizer), detokenize=detok, tau=tau)
