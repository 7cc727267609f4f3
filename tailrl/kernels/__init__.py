"""Triton kernels for the rollout forward, each with a pure-torch reference in `reference.py`.

Place in the flow: the engine's cached forward calls these instead of the torch ops (paged attention and
KV writes, RMSNorm with the residual add, rotary, SiLU*mul, batch-invariant matmul and log-softmax). The
contract they share is batch invariance: a row's result is bitwise independent of the batch it runs in,
because tokens are drawn by a keyed inverse-CDF from the logits and one ulp of drift changes a token.

`import tailrl.kernels` never needs Triton: the kernels are imported on first use, after `require_triton`.
Without CUDA the Triton interpreter is selected (it runs kernels on CPU tensors, how the tests run them).
"""

from __future__ import annotations

import importlib
import os

import torch

from tailrl.errors import UserError

if not torch.cuda.is_available():
    # Triton picks the interpreter when a kernel is defined, so this precedes importing any kernel module
    os.environ.setdefault("TRITON_INTERPRET", "1")

try:
    import triton  # noqa: F401

    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False

# public name -> submodule defining it
_EXPORTS = {
    "store_kv": "attention",
    "paged_attention": "attention",
    "rms_norm": "norm",
    "rotary_cache": "rotary",
    "apply_rotary": "rotary",
    "silu_mul": "activation",
    "matmul_invariant": "matmul",
    "log_softmax_invariant": "softmax",
    "token_logprobs_invariant": "softmax",
    "gumbel_argmax": "gumbel",
    "nucleus_floor": "radix",
}

__all__ = ["HAS_TRITON", "require_triton", *_EXPORTS]


def require_triton(setting: str) -> None:
    """Raise UserError naming `setting` (the option that asked for kernels) when Triton is missing."""
    if not HAS_TRITON:
        raise UserError(f"{setting}: Triton is not installed (pip install triton, or the [gpu] extra)")


def __getattr__(name: str):
    """Lazy re-export: `tailrl.kernels.paged_attention` imports tailrl.kernels.attention on first use."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    require_triton(f"tailrl.kernels.{name}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
