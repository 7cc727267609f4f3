"""Batch invariance, bitwise: a row's result may not depend on the batch it is computed in.

This is the exactness contract of the rollout engine: tokens are drawn by a keyed inverse-CDF from the
logits, so one ulp of drift caused by the batch composition changes sampled tokens. Under the interpreter
these tests check the kernels' schedule (fixed tiles, key order, masking); on a GPU
(TAILRL_TEST_DEVICE=cuda) they check the compiled kernels as well.
"""

import pytest
import torch

pytest.importorskip("triton")

from tailrl.kernels import (  # noqa: E402
    log_softmax_invariant,
    matmul_invariant,
    paged_attention,
    rms_norm,
    token_logprobs_invariant,
)
from tests.helpers import (
    DEVICE,  # noqa: E402
    PagedCase,  # noqa: E402
)

LENGTHS = [150, 75, 40, 9]


@pytest.mark.parametrize("group,dtype,window", [(1, torch.float32, 0), (4, torch.bfloat16, 0),
                                                (8, torch.float32, 19)])
def test_attention_row_alone_equals_row_in_any_batch(group, dtype, window):
    case = PagedCase(LENGTHS, 4, kv_heads=1, group=group, head_dim=32, dtype=dtype, seed=1)
    target = (0, 130, 6)  # a chunk over a cached prefix, crossing a key tile
    alone = paged_attention(**case.batch([target]), sliding_window=window)[0, :6]
    batches = [
        ([(1, 60, 9), (2, 0, 0), target], 9),  # last row, T larger than its length, next to a padding row
        ([target, (3, 0, 9), (1, 74, 1), (2, 20, 3), (0, 12, 2)], 13),  # first row, wider padded T
    ]
    for rows, T in batches:
        b = rows.index(target)
        got = paged_attention(**case.batch(rows, T=T), sliding_window=window)[b, :6]
        assert torch.equal(got, alone)


@pytest.mark.parametrize("group,dtype,window", [(1, torch.float32, 0), (4, torch.bfloat16, 0),
                                                (2, torch.float32, 13)])
def test_attention_decode_equals_prefill_and_verify(group, dtype, window):
    """Position p decoded alone (T = 1) == the same query inside a prefill chunk or a verify forward."""
    case = PagedCase(LENGTHS, 16, kv_heads=1, group=group, head_dim=32, dtype=dtype, seed=2)
    start, n = 120, 10
    prefill = paged_attention(**case.batch([(1, 40, 9), (0, start, n)]), sliding_window=window)[1]  # (n, H, D)
    # every position decoded as its own row of one batch (each row its own start, T = 1)
    decodes = paged_attention(**case.batch([(0, start + t, 1) for t in range(n)]), sliding_window=window)
    assert torch.equal(decodes[:, 0], prefill)
    verify = paged_attention(**case.batch([(0, start + 3, 4)]), sliding_window=window)[0]  # [last, d1, d2, d3]
    assert torch.equal(verify, prefill[3:7])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_row_alone_equals_row_in_batches(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(33, 96, generator=g).to(dtype).to(DEVICE)
    w = torch.randn(80, 96, generator=g).to(dtype).to(DEVICE)
    bias = torch.randn(80, generator=g).to(dtype).to(DEVICE)
    full = matmul_invariant(x, w, bias)  # M = 33: row j at its own place in the first or second row tile
    for j in (0, 21, 32):
        alone = matmul_invariant(x[j:j + 1], w, bias)[0]  # M = 1
        assert torch.equal(alone, full[j])
        rows = torch.tensor([(j + 5 * i) % 33 for i in range(-6, 1)], device=DEVICE)  # M = 7, j last
        assert torch.equal(matmul_invariant(x[rows], w, bias)[6], alone)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_row_alone_equals_row_in_batch(dtype):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(9, 200, generator=g).to(dtype).to(DEVICE)
    res = torch.randn(9, 200, generator=g).to(dtype).to(DEVICE)
    w = torch.randn(200, generator=g).to(dtype).to(DEVICE)
    y, h = rms_norm(x, w, 1e-6, residual=res)
    for j in (0, 8):
        y1, h1 = rms_norm(x[j:j + 1], w, 1e-6, residual=res[j:j + 1])
        assert torch.equal(y1[0], y[j]) and torch.equal(h1[0], h[j])
        assert torch.equal(rms_norm(x[j:j + 1], w, 1e-6)[0], rms_norm(x, w, 1e-6)[j])


def test_log_softmax_rows_alone_equal_rows_in_batch():
    g = torch.Generator().manual_seed(5)
    logits = (3 * torch.randn(6, 5000, generator=g)).to(DEVICE)  # two 4096-column blocks
    targets = torch.randint(0, 5000, (6,), generator=g).to(DEVICE)
    full = log_softmax_invariant(logits)
    lp = token_logprobs_invariant(logits, targets, 0.7)
    for j in (0, 5):
        assert torch.equal(log_softmax_invariant(logits[j:j + 1])[0], full[j])
        assert torch.equal(token_logprobs_invariant(logits[j:j + 1], targets[j:j + 1], 0.7)[0], lp[j])
