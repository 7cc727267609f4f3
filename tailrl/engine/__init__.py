"""Rollout engine: continuous batching over a paged, rollback-able KV cache with keyed sampling; decode steps
taken by a DecodeStrategy (plain, coupled or decoupled speculation)."""

from tailrl.engine.build import build_engine, eos_ids_of
from tailrl.engine.engine import Engine
from tailrl.engine.request import Request, Rollout, SamplingParams
from tailrl.engine.strategy import DecodeStrategy, PlainDecode
from tailrl.engine.telemetry import RolloutTrace

__all__ = ["DecodeStrategy", "Engine", "PlainDecode", "Request", "Rollout", "RolloutTrace", "SamplingParams",
           "build_engine", "eos_ids_of"]
