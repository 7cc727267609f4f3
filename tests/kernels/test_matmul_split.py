"""Split-K of the batch-invariant matmul: segments of K fixed from the dtype, summed in segment order — the
same bits with one program per tile or one per (tile, segment) plus the reduce, for any M. K_SEG shrinks to
one K tile here (a module constant, read per call) so small K spans several segments under the interpreter."""

import pytest
import torch

pytest.importorskip("triton")

import tailrl.kernels.matmul as matmul  # noqa: E402
from tailrl.kernels.reference import matmul_invariant_ref  # noqa: E402
from tests.helpers import DEVICE, spy_grids  # noqa: E402


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype).to(DEVICE)


@pytest.mark.parametrize("dtype,k_seg", [(torch.float32, 32), (torch.bfloat16, 64), (torch.bfloat16, 512)])
@pytest.mark.parametrize("bias", [False, True])
def test_split_k_is_bitwise_the_unsplit_result_for_any_m(monkeypatch, dtype, k_seg, bias):
    monkeypatch.setattr(matmul, "K_SEG", k_seg)
    K = 200 if k_seg < 512 else 1100  # 4-7 segments, the last one short
    w, b = _randn(70, K, dtype=dtype, seed=1), (_randn(70, dtype=dtype, seed=2) if bias else None)
    x = _randn(37, K, dtype=dtype, seed=0)
    whole = matmul.matmul_invariant(x, w, b, split=False)
    assert torch.equal(matmul.matmul_invariant(x, w, b, split=True), whole)
    for rows in ([5], [0, 1, 2], list(range(33, 37))):  # decode-sized batches: split, as a GPU would run them
        assert torch.equal(matmul.matmul_invariant(x[rows], w, b, split=True), whole[rows])
    tol = dict(atol=1e-4, rtol=1e-5) if dtype == torch.float32 else dict(atol=3e-2, rtol=2e-2)
    torch.testing.assert_close(whole, matmul_invariant_ref(x, w, b), **tol)


def test_split_is_chosen_when_the_tiles_leave_the_gpu_idle(monkeypatch):
    monkeypatch.setattr(matmul, "K_SEG", 32)
    calls = spy_grids(monkeypatch, matmul, "_reduce_kernel")
    x, w = _randn(4, 100), _randn(70, 100, seed=1)
    base = matmul.matmul_invariant(x, w)  # a CPU has no SMs to fill: never split unless asked
    assert calls == []
    monkeypatch.setattr(matmul, "sm_count", lambda device: 132)
    assert torch.equal(matmul.matmul_invariant(x, w), base) and calls == [(2,)]  # 1 x 2 tiles < 132
    monkeypatch.setattr(matmul, "sm_count", lambda device: 2)
    matmul.matmul_invariant(x, w)
    assert calls == [(2,)]  # enough tiles: no split
    monkeypatch.setattr(matmul, "K_SEG", 512)
    monkeypatch.setattr(matmul, "sm_count", lambda device: 132)
    matmul.matmul_invariant(x, w)
    assert calls == [(2,)]  # K within one segment: nothing to split
