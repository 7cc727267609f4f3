"""The samplers' top-k / top-p cut as a Triton radix select (kernels/radix.py), run under TRITON_INTERPRET=1:
bitwise the floors of the torch radix select (engine/sampling/blocked.nucleus_floor_torch, the CPU path), which
tests/engine/test_keyed_blocked.py checks against a sorting oracle. With TAILRL_TEST_DEVICE=cuda the kernel runs
on the GPU (the oracle stays on CPU tensors)."""

import pytest
import torch

from tailrl.engine.sampling.blocked import _weights, nucleus_floor_torch
from tests.helpers import DEVICE, lm_like_logits, sampling_params

pytest.importorskip("triton")

FLAGS = [(True, True), (True, False), (False, True)]


def _kernel(p, top_k, top_p, need_k, need_p):
    from tailrl.kernels.radix import nucleus_floor

    return nucleus_floor(p.to(DEVICE), top_k.to(DEVICE), top_p.to(DEVICE), need_k, need_p).cpu()


def _case(B, V, seed, dtype=torch.float32):
    """(p, top_k, top_p): weights of LM-like logits with every kind of row: top-k only / top-p only / both /
    neither, k = 1, k > V, a flat row (all ties), a row with most tokens filtered (-inf: weight 0)."""
    g = torch.Generator().manual_seed(seed)
    logits = lm_like_logits(B, V, g).to(dtype)
    temp, top_k, top_p = sampling_params(B, 1.0, g, top=True)
    temp[::4] = 0.6
    top_k[0], top_k[2], top_k[3] = V + 7, 1, 5
    top_p[3] = 0.3
    logits[3] = 0.0  # ties everywhere: the cut keeps them all
    logits[4, V // 3:] = float("-inf")
    top_p[4] = 0.999
    return _weights(logits, temp)[0], top_k, top_p


@pytest.mark.parametrize("need_k,need_p", FLAGS)
@pytest.mark.parametrize("V,B,dtype", [(300, 12, torch.float32), (1024 * 2 + 5, 8, torch.float32),
                                       (3000, 6, torch.bfloat16)])
def test_kernel_floor_equals_torch_radix_select(V, B, dtype, need_k, need_p):
    p, top_k, top_p = _case(B, V, V + B, dtype)
    want = nucleus_floor_torch(p.clone(), top_k, top_p, need_k, need_p)
    got = _kernel(p, top_k, top_p, need_k, need_p)
    assert got.dtype == torch.int32 and torch.equal(got, want)
    assert (want > 0).any() and (want == 0).any()  # the case exercises cuts and uncut rows


def test_kernel_masses_use_the_samplers_fixed_point():
    """The kernel (which cannot import the engine) and blocked count top-p masses in the same 2**-FIX_BITS."""
    from tailrl.engine.sampling import blocked
    from tailrl.kernels import radix

    assert radix.FIX_BITS == blocked.FIX_BITS


def test_kernel_floor_is_row_local_and_reads_only():
    """A row's floor alone = in a batch (any order); the weights are not written."""
    p, top_k, top_p = _case(8, 700, 3)
    p = p.to(DEVICE)
    before = p.clone()
    full = _kernel(p, top_k, top_p, True, True)
    assert torch.equal(p, before)
    perm = torch.tensor([5, 0, 7, 2])
    assert torch.equal(_kernel(p[perm.to(DEVICE)], top_k[perm], top_p[perm], True, True), full[perm])
    assert torch.equal(_kernel(p[6:7], top_k[6:7], top_p[6:7], True, True), full[6:7])


@pytest.mark.slow
def test_kernel_floor_at_a_real_vocabulary():
    p, top_k, top_p = _case(5, 49152, 11)
    assert torch.equal(_kernel(p, top_k, top_p, True, True), nucleus_floor_torch(p.clone(), top_k, top_p, True, True))
