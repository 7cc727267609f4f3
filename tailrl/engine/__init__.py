"""Rollout engine: continuous batching over a paged, rollback-able KV cache with keyed sampling."""

from tailrl.engine.engine import Engine
from tailrl.engine.request import Request, Rollout, SamplingParams
from tailrl.engine.telemetry import RolloutTrace

__all__ = ["Engine", "Request", "Rollout", "RolloutTrace", "SamplingParams"]
