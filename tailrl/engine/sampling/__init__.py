"""Keyed sampling: hashing (keys -> random numbers), processing (temperature, top-k / top-p, flags), the
samplers (the SAMPLERS registry: blocked, inverse_cdf, gumbel) and rows (engine sequences -> keyed
samples, the one device-to-host copy)."""

from tailrl.engine.sampling.hashing import (
    hash_keys,
    key_hash,
    mix32,
    position_hash,
    prefix_hash,
    uniform_from_hash,
)
from tailrl.engine.sampling.keyed import SAMPLERS, KeyedSampler, keyed_sample, keyed_sample_hashed
from tailrl.engine.sampling.processing import Flags, host_flags, process_logits

__all__ = ["SAMPLERS", "Flags", "KeyedSampler", "hash_keys", "host_flags", "key_hash", "keyed_sample",
           "keyed_sample_hashed", "mix32", "position_hash", "prefix_hash", "process_logits", "uniform_from_hash"]
