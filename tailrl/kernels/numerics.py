"""Numerics shared by every kernel: exact dtype conversions around fp32 compute, and the tile dot product.

Place in the flow: each kernel loads its operands, computes in fp32, and stores in the input dtype through
these helpers. On a GPU they are plain casts and tl.dot. Under the Triton interpreter (CPU, the tests)
bfloat16 is held as raw uint16: its arithmetic and `tl.dot` misread the bits, and its fp32 -> bf16 cast
truncates instead of rounding to nearest even; and tl.dot is a BLAS matmul whose result for a row depends
on its place in the block. With `EMULATE` set (the interpreter) bf16 is converted by bit manipulation and
dots are summed by broadcasting, so the interpreter computes, and is batch invariant, as the GPU is.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

# The interpreter is chosen when a kernel is defined (tailrl.kernels sets the variable first without CUDA);
# kernels defined in this process run the same way, so one flag read now serves every launch.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def _device_function(fn):
    """triton.jit on a GPU. Under the interpreter the plain function: the running kernel has already patched
    triton.language, and a nested jit call would patch it again (milliseconds per call, per program)."""
    return fn if INTERPRET else triton.jit(fn)


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (tile sizes must be powers of two)."""
    return 1 << max(0, int(n) - 1).bit_length()


@_device_function
def to_f32(x, EMULATE: tl.constexpr):
    """x: any float block -> the same values in fp32 (exact)."""
    if EMULATE and x.dtype == tl.bfloat16:
        # bf16 is the top half of an fp32: widen the bits
        return (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    else:
        return x.to(tl.float32)


@_device_function
def from_f32(x, dtype: tl.constexpr, EMULATE: tl.constexpr):
    """x: fp32 block -> `dtype`, rounded to nearest even like torch (NaN payloads aside)."""
    if EMULATE and dtype == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)  # round half to even on the 16 dropped bits
        return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return x.to(dtype)


@_device_function
def round_f32(x, dtype: tl.constexpr, EMULATE: tl.constexpr):
    """x: fp32 block -> fp32 values representable in `dtype` (what a torch op in `dtype` would hold)."""
    return to_f32(from_f32(x, dtype, EMULATE), EMULATE)


@_device_function
def dot_f32(a, b, EMULATE: tl.constexpr):
    """a: (M, K), b: (K, N) blocks of one dtype -> (M, N) fp32 products summed in fp32 (tensor cores for
    16-bit inputs; exact fp32 FMAs, not TF32, for fp32 inputs).

    Under the interpreter tl.dot is numpy's matmul, whose BLAS kernels sum a row differently depending on
    where it sits in the block: a query would change with its neighbours. There the products are summed
    along K by broadcasting instead, the same way for every element, as the GPU's MMA does."""
    if EMULATE:
        return tl.sum(to_f32(a, EMULATE)[:, :, None] * to_f32(b, EMULATE)[None, :, :], axis=1)
    else:
        return tl.dot(a, b, input_precision="ieee")


_SM_COUNT: dict[int, int] = {}


def sm_count(device: torch.device) -> int:
    """Multiprocessors of a CUDA device, for the split-or-not choice of the split-K / split-context paths
    (0 elsewhere: the CPU never splits unless asked)."""
    if device.type != "cuda":
        return 0
    return _SM_COUNT.setdefault(device.index or 0, torch.cuda.get_device_properties(device).multi_processor_count)
