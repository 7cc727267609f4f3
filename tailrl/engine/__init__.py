"""Rollout engine: continuous batching over a paged, rollback-able KV cache with keyed sampling; decode steps
taken by a DecodeStrategy (PlainDecode here; the speculative ones and `build_engine` in tailrl.speculative)."""

from tailrl.engine.engine import Engine
from tailrl.engine.request import Request, Rollout, SamplingParams
from tailrl.engine.strategy import DecodeStrategy, PlainDecode
from tailrl.engine.telemetry import RolloutTrace

__all__ = ["DecodeStrategy", "Engine", "PlainDecode", "Request", "Rollout", "RolloutTrace", "SamplingParams"]
