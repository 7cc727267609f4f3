"""store_kv and paged_attention against their torch references (under the Triton interpreter on a CPU)."""

import pytest
import torch

pytest.importorskip("triton")

from tailrl.kernels import paged_attention, store_kv  # noqa: E402
from tailrl.kernels.attention import attention_blocks  # noqa: E402
from tailrl.kernels.reference import paged_attention_ref, store_kv_ref  # noqa: E402
from tests.helpers import (
    DEVICE,  # noqa: E402
    PagedCase,  # noqa: E402
)

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=2e-2, rtol=2e-2),
       torch.float16: dict(atol=2e-3, rtol=2e-3)}

LENGTHS = [150, 75, 9, 40]  # sequence 0 spans three 64-key tiles
# ragged rows (seq, start, q_len): a cached-prefix chunk crossing a key tile, a fresh prefill, a padding
# row, a short chunk; then one decode token per row
PREFILL = [(0, 133, 7), (1, 0, 9), (2, 0, 0), (3, 31, 5)]
DECODE = [(0, 149, 1), (1, 70, 1), (2, 3, 0), (3, 39, 1)]


@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_store_kv_writes_both_pools_and_skips_padding(dtype, slot_dtype):
    g = torch.Generator().manual_seed(0)
    pool_k = torch.randn(20, 2, 24, generator=g).to(dtype).to(DEVICE)
    pool_v = torch.randn(20, 2, 24, generator=g).to(dtype).to(DEVICE)
    qkv = torch.randn(6, 3 * 2 * 24, generator=g).to(dtype).to(DEVICE)  # k, v: strided views of a fused row
    k = qkv[:, 48:96].view(6, 2, 24)
    v = qkv[:, 96:].view(6, 2, 24)
    slots = torch.tensor([7, -1, 0, 19, -1, 3], dtype=slot_dtype, device=DEVICE)
    ref_k, ref_v = pool_k.clone(), pool_v.clone()
    store_kv_ref(k, v, ref_k, ref_v, slots)
    store_kv(k, v, pool_k, pool_v, slots)
    assert torch.equal(pool_k, ref_k) and torch.equal(pool_v, ref_v)


CASES = [  # (group H/Hkv, block_size, dtype, sliding_window, head_dim)
    (1, 16, torch.float32, 0, 32),
    (2, 4, torch.float32, 0, 24),  # head_dim not a power of two
    (4, 16, torch.bfloat16, 0, 32),
    (8, 4, torch.float32, 21, 32),  # window shorter than a key tile, crossing tile borders
    (2, 16, torch.bfloat16, 37, 32),
    (1, 4, torch.float16, 0, 32),
]


@pytest.mark.parametrize("group,block_size,dtype,window,head_dim", CASES)
def test_paged_attention_matches_reference(group, block_size, dtype, window, head_dim):
    case = PagedCase(LENGTHS, block_size, kv_heads=2, group=group, head_dim=head_dim, dtype=dtype)
    for rows in (PREFILL, DECODE):
        kw = case.batch(rows)
        got = paged_attention(**kw, sliding_window=window)
        want = paged_attention_ref(**kw, sliding_window=window)
        assert got.dtype == dtype and got.shape == kw["q"].shape
        torch.testing.assert_close(got, want, **TOL[dtype])
        for b, (_, _, n) in enumerate(rows):  # padding queries (and padding rows) give exact zeros
            assert not got[b, n:].any()


def test_paged_attention_writes_into_out():
    case = PagedCase(LENGTHS, 16, kv_heads=2, group=2, head_dim=32, dtype=torch.float32)
    kw = case.batch(DECODE)
    out = torch.full_like(kw["q"], float("nan"))
    assert paged_attention(**kw, out=out) is out
    torch.testing.assert_close(out, paged_attention_ref(**kw), **TOL[torch.float32])


def test_tiles_come_from_head_dim_and_group_only():
    assert attention_blocks(128, 1) == (32, 32)
    assert attention_blocks(64, 8) == (32, 64)
    assert attention_blocks(256, 64) == (64, 32)
