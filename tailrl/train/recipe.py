"""Resolve and validate the run configuration: preset values fill the algorithm's unset fields (the names
themselves were checked when the config was made), and the checks that need several sections."""

from __future__ import annotations

from dataclasses import replace

from tailrl.algo.downsample import pods_m
from tailrl.config import ALGORITHM_PRESETS, AlgoConfig, Config
from tailrl.errors import UserError


def resolve_algo(algo: AlgoConfig, max_new_tokens: int) -> AlgoConfig:
    preset = ALGORITHM_PRESETS[algo.name]
    filled = replace(algo, **{k: v for k, v in preset.items() if getattr(algo, k) is None})
    if filled.overlong_buffer == -1:
        filled = replace(filled, overlong_buffer=max_new_tokens // 4)
    if filled.ppo_epochs < 1:
        raise UserError(f"algo.ppo_epochs must be >= 1, got {filled.ppo_epochs}")
    if not 0 <= filled.overlong_buffer < max_new_tokens:
        raise UserError(f"algo.overlong_buffer must be in [0, rollout.max_new_tokens), got {filled.overlong_buffer}")
    return filled


def validate(cfg: Config) -> Config:
    """Checks that need several sections; returns cfg with algo resolved."""
    t, r = cfg.train, cfg.rollout
    if not cfg.model.path:
        raise UserError("model.path is required (an HF folder, a .gguf file or a known name)")
    if not cfg.data.source:
        raise UserError("data.source is required (a .jsonl/.parquet file, an HF datasets folder or reasoning_gym:<task>)")
    if t.total_steps < 1 or t.micro_batch_size < 1 or t.rollout_batch_size < 1:
        raise UserError("train.total_steps, train.micro_batch_size and train.rollout_batch_size must be >= 1")
    if t.micro_batch_tokens < 0:
        raise UserError(f"train.micro_batch_tokens must be >= 0 (0 = off), got {t.micro_batch_tokens}")
    if r.group_size < 1 or t.rollout_batch_size % r.group_size:
        raise UserError(f"rollout.group_size ({r.group_size}) must divide train.rollout_batch_size "
                        f"({t.rollout_batch_size})")
    if t.prompt_budget < 0 or t.time_budget_s < 0:
        raise UserError("train.prompt_budget and train.time_budget_s must be >= 0 (0 = no budget)")
    if r.max_new_tokens < 1 or r.temperature < 0:
        raise UserError("rollout.max_new_tokens must be >= 1 and rollout.temperature >= 0")
    if cfg.control.kind == "sagc":
        bad = [g for g in cfg.control.candidates if g < 1 or t.rollout_batch_size % g]
        if not cfg.control.candidates or bad:
            raise UserError(f"control.candidates must be non-empty group sizes dividing train.rollout_batch_size "
                            f"({t.rollout_batch_size}); bad: {bad or 'empty'}")
        if r.group_size not in cfg.control.candidates:
            raise UserError(f"rollout.group_size ({r.group_size}) must be one of control.candidates {list(cfg.control.candidates)}")
        for g in cfg.control.candidates:
            pods_m(cfg.algo.downsample, g)
    pods_m(cfg.algo.downsample, r.group_size)  # validate against the configured G
    return replace(cfg, algo=resolve_algo(cfg.algo, r.max_new_tokens))
