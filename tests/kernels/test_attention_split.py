"""Split-context (flash-decoding) paged attention: contexts over many chunks against the torch reference,
and bitwise the same result split or unsplit, alone or batched, decode = prefill = verify.

Chunks are 256 positions; most cases shrink them to one 64-key tile (module constant, read per call) so
the interpreter sees many chunks at small contexts."""

import pytest
import torch

pytest.importorskip("triton")

import tailrl.kernels.attention as attention  # noqa: E402
from tailrl.kernels import paged_attention  # noqa: E402
from tailrl.kernels.reference import paged_attention_ref  # noqa: E402
from tests.helpers import DEVICE, PagedCase, spy_grids  # noqa: E402

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}
LENGTHS = [300, 75, 9, 200]
DECODE = [(0, 299, 1), (1, 74, 1), (2, 3, 0), (3, 130, 1)]  # 5, 2, -, 3 chunks of 64


@pytest.fixture
def chunk64(monkeypatch):
    monkeypatch.setattr(attention, "CHUNK", 64)


@pytest.mark.parametrize("group,dtype,window", [(1, torch.float32, 0), (4, torch.bfloat16, 0), (8, torch.float32, 70),
                                                (2, torch.float32, 21)])
def test_split_and_unsplit_match_the_reference_and_each_other(chunk64, group, dtype, window):
    case = PagedCase(LENGTHS, 16, kv_heads=2, group=group, head_dim=32, dtype=dtype, seed=3)
    kw = case.batch(DECODE)
    want = paged_attention_ref(**kw, sliding_window=window)
    split = paged_attention(**kw, sliding_window=window, split=True)
    whole = paged_attention(**kw, sliding_window=window, split=False)
    torch.testing.assert_close(split, want, **TOL[dtype])
    assert torch.equal(split, whole)
    assert not split[2].any()  # the padding row


@pytest.mark.parametrize("group,dtype,window", [(1, torch.float32, 0), (4, torch.bfloat16, 0), (2, torch.float32, 90)])
def test_decode_split_equals_prefill_and_verify_over_many_chunks(chunk64, group, dtype, window):
    """Position p decoded alone on the split path == the same query in a prefill (unsplit: several row
    tiles) == in a verify window (split), and in any batch."""
    case = PagedCase(LENGTHS, 16, kv_heads=1, group=group, head_dim=32, dtype=dtype, seed=4)
    start, n = 250, 12
    prefill = paged_attention(**case.batch([(1, 40, 9), (0, start, n)]), sliding_window=window)[1]
    decodes = paged_attention(**case.batch([(0, start + t, 1) for t in range(n)]), sliding_window=window, split=True)
    assert torch.equal(decodes[:, 0], prefill)
    verify = paged_attention(**case.batch([(3, 7, 2), (0, start + 3, 4)]), sliding_window=window, split=True)[1]
    assert torch.equal(verify, prefill[3:7])
    alone = paged_attention(**case.batch([(0, start + 5, 1)]), split=True, sliding_window=window)[0]
    assert torch.equal(alone, prefill[5:6])


def test_default_chunks_over_a_long_context():
    """The real chunk length: a 700-token context is three chunks; the split result is the unsplit one."""
    case = PagedCase([700, 40], 16, kv_heads=2, group=4, head_dim=64, dtype=torch.float32, seed=5)
    kw = case.batch([(0, 699, 1), (1, 39, 1)])
    split = paged_attention(**kw, split=True)
    assert torch.equal(split, paged_attention(**kw, split=False))
    torch.testing.assert_close(split, paged_attention_ref(**kw), **TOL[torch.float32])


def test_split_is_chosen_for_a_grid_smaller_than_the_gpu(chunk64, monkeypatch):
    calls = spy_grids(monkeypatch, attention, "_combine_kernel")
    case = PagedCase(LENGTHS, 16, kv_heads=2, group=2, head_dim=32, dtype=torch.float32, seed=6)
    kw = case.batch(DECODE)
    base = paged_attention(**kw)  # a CPU has no SMs to fill: never split unless asked
    assert calls == []
    monkeypatch.setattr(attention, "sm_count", lambda device: 132)
    assert torch.equal(paged_attention(**kw), base) and calls == [(4, 2)]  # B x Hkv = 8 < 132
    monkeypatch.setattr(attention, "sm_count", lambda device: 8)
    paged_attention(**kw)
    assert calls == [(4, 2)]  # a grid that fills the GPU splits nothing
    prefill = case.batch([(0, 200, 40)])
    monkeypatch.setattr(attention, "sm_count", lambda device: 132)
    paged_attention(**prefill)
    assert calls == [(4, 2)]  # several row tiles: never split
    with pytest.raises(ValueError, match="split needs"):
        paged_attention(**prefill, split=True)


def test_split_path_on_the_device_under_test():
    """On CUDA (TAILRL_TEST_DEVICE=cuda) the compiled split and unsplit binaries agree bit for bit."""
    case = PagedCase([1000, 300], 16, kv_heads=2, group=6, head_dim=64, dtype=torch.bfloat16, seed=7)
    kw = case.batch([(0, 999, 1), (1, 299, 1)])
    assert str(kw["q"].device).startswith(DEVICE)
    assert torch.equal(paged_attention(**kw, split=True), paged_attention(**kw, split=False))
