"""Engines with their decode strategy: engine.spec (method, mode) -> a DecodeStrategy handed to the Engine.
The engine knows nothing of speculation; everything that builds an engine from a config (the trainer,
`tailrl generate`, PAT's layouts, the benchmarks) builds it here, and any profiling speculation needs
(engine.spec.mode=decoupled or auto without a profile) runs here, never inside Engine.__init__.

    engine = build_engine(model, tokenizer, cfg.engine)
"""

from __future__ import annotations

from tailrl.config import EngineConfig
from tailrl.engine.clock import Clock
from tailrl.engine.engine import Engine
from tailrl.engine.strategy import DecodeStrategy, PlainDecode
from tailrl.engine.turns import Turns
from tailrl.speculative.modes import SPEC_MODES
from tailrl.tail import DEFAULT_TAU


def eos_ids_of(model, tokenizer) -> list[int]:
    """EOS ids of the model's config and the tokenizer's EOS token."""
    ids = set(model.args.eos_token_ids)
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return sorted(ids)


def build_strategy(engine: Engine, cfg) -> DecodeStrategy:
    """The DecodeStrategy for an engine.spec section (cfg: SpecConfig)."""
    if cfg.method == "none":
        return PlainDecode(engine)
    return SPEC_MODES.get(cfg.mode)(engine, cfg)


def build_engine(model, tokenizer=None, cfg: EngineConfig | None = None, tau: float = DEFAULT_TAU,
                 eos_ids=None, clock: Clock | None = None, turns: Turns | None = None) -> Engine:
    """An Engine for `model` whose decode steps follow cfg.spec. EOS ids: `eos_ids`, else the model's and the
    tokenizer's; stop strings are decoded with the tokenizer (when given); turns: multi-turn rollouts
    (engine/turns.py)."""
    cfg = cfg or EngineConfig()
    detok = (lambda ids: tokenizer.decode(ids, skip_special_tokens=True)) if tokenizer is not None else None
    eos = eos_ids if eos_ids is not None else eos_ids_of(model, tokenizer)
    return Engine(model, cfg, eos_ids=eos, detokenize=detok, tau=tau, clock=clock,
                  strategy=lambda engine: build_strategy(engine, cfg.spec), turns=turns)
