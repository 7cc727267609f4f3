"""The keys of keyed sampling turned into random numbers: a counter-based integer hash computed vectorised
in torch (int64 arithmetic masked to 32 bits: identical on CPU and CUDA, and equal to the same arithmetic
on Python ints), with no per-row generators.

A key is (run seed, prompt uid, sample index, position); a sequence hashes its fixed part once
(prefix_hash) and each position then costs one mix (position_hash).
"""

from __future__ import annotations

import torch

_M32 = 0xFFFFFFFF
_ROUNDS = (0x9E3779B9, 0x85EBCA6B, 0xC2B2AE35, 0x27D4EB2F, 0x165667B1)


def mix32(x):
    """lowbias32 integer finaliser on int64 tensors (or Python ints) holding 32-bit values; int64 products
    wrap, and only their low 32 bits are kept, so results are exact and platform independent, and a
    Python int gives the same value as a tensor element."""
    x = x & _M32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _M32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _M32
    return x ^ (x >> 16)


def prefix_hash(seed, uid, sample):
    """The hash of a key's fixed part (seed, uid, sample index): tensors (B,) or Python ints. A sequence
    computes it once; each position then costs one mix (position_hash)."""
    h = mix32(seed ^ _ROUNDS[0])
    for i, part in enumerate((seed >> 32, uid, uid >> 32, sample)):
        h = mix32(h ^ (part & _M32) ^ _ROUNDS[i + 1])
    return h


def position_hash(prefix, pos):
    """prefix_hash (B,) and positions (B,) -> (B,) int64: the 32-bit hash of the whole key."""
    return mix32(prefix ^ (pos & _M32) ^ _ROUNDS[0])


def key_hash(seed: torch.Tensor, uid: torch.Tensor, sample: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """(B,) int64 each -> (B,) int64 32-bit hash of the sampling key."""
    return position_hash(prefix_hash(seed, uid, sample), pos)


def uniform_from_hash(h: torch.Tensor | int, counter: torch.Tensor | int = 0) -> torch.Tensor | float:
    """Hash (any shape, or a Python int) and a counter (int or broadcastable int64 tensor) -> float64
    uniforms in (0, 1) with 53 random bits (a float for a Python int hash and counter)."""
    a = mix32(h ^ mix32(counter * 2 + 1))
    b = mix32(a ^ 0x68E31DA4)
    bits = (a >> 5) * (1 << 26) + (b >> 6)  # 27 + 26 = 53 bits
    if isinstance(bits, int):  # a Python int key (the drafters' votes): the same float, exactly
        return (bits + 0.5) / float(1 << 53)
    return (bits.double() + 0.5) / float(1 << 53)


def hash_keys(keys: torch.Tensor) -> torch.Tensor:
    """(B, 4) int64 key rows (seed, uid, sample, position) -> (B,) int64 hashes."""
    return key_hash(keys[:, 0], keys[:, 1], keys[:, 2], keys[:, 3])
