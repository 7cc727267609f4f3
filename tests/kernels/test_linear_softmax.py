"""matmul_invariant and the log-softmax kernels against torch."""

import pytest
import torch

pytest.importorskip("triton")

from tailrl.kernels import log_softmax_invariant, matmul_invariant, token_logprobs_invariant  # noqa: E402
from tailrl.kernels.matmul import matmul_blocks  # noqa: E402
from tailrl.kernels.reference import (  # noqa: E402
    log_softmax_invariant_ref,
    matmul_invariant_ref,
    token_logprobs_invariant_ref,
)
from tests.helpers import DEVICE  # noqa: E402


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype).to(DEVICE)


@pytest.mark.parametrize("bias", [False, True])
def test_matmul_fp32_matches_torch(bias):
    x, w = _randn(37, 100, seed=0), _randn(70, 100, seed=1)  # M, N, K all off the tile grid
    b = _randn(70, seed=2) if bias else None
    assert 37 % matmul_blocks(70, 100, torch.float32)[0]
    want = x @ w.T + (b if bias else 0)
    torch.testing.assert_close(matmul_invariant(x, w, b), want, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(matmul_invariant(x, w, b), matmul_invariant_ref(x, w, b), atol=1e-4, rtol=1e-5)


def test_matmul_bf16_matches_reference():
    x, w, b = _randn(9, 130, dtype=torch.bfloat16, seed=3), _randn(40, 130, dtype=torch.bfloat16, seed=4), \
        _randn(40, dtype=torch.bfloat16, seed=5)
    got = matmul_invariant(x, w, b)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, matmul_invariant_ref(x, w, b), atol=3e-2, rtol=2e-2)


def test_matmul_tiles_ignore_m():
    assert matmul_blocks(4096, 4096, torch.bfloat16) == (32, 64, 64)
    assert matmul_blocks(40, 20, torch.float32) == (32, 64, 32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_log_softmax_matches_torch(dtype):
    x = (4 * _randn(3, 5003, seed=6)).to(dtype)  # a full and a partial 4096-column block
    want = torch.log_softmax(x.float(), -1)
    torch.testing.assert_close(log_softmax_invariant(x), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(log_softmax_invariant(x, 0.6), log_softmax_invariant_ref(x, 0.6), atol=1e-5, rtol=1e-5)


def test_token_logprobs_matches_torch_and_log_softmax_bitwise():
    logits = (4 * _randn(4, 300, seed=7)).to(torch.bfloat16)
    targets = torch.tensor([0, 299, 17, 150], device=DEVICE)
    T = 0.7
    got = token_logprobs_invariant(logits, targets, T)
    want = torch.log_softmax(logits.float() / T, -1).gather(-1, targets[:, None]).squeeze(-1)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got, token_logprobs_invariant_ref(logits, targets, T), atol=1e-5, rtol=1e-5)
    # one code path: the gathered log-softmax, with the temperature inside or divided out beforehand
    # (elementwise IEEE division, as the engine divides by its temperature tensor)
    gathered = log_softmax_invariant(logits, T).gather(-1, targets[:, None]).squeeze(-1)
    assert torch.equal(got, gathered)
    z = logits.float() / torch.full((4, 1), T, device=DEVICE)
    assert torch.equal(got, log_softmax_invariant(z).gather(-1, targets[:, None]).squeeze(-1))
