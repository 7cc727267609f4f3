"""Moving unfinished sequences between engines (what a TP/DP switch does), in one process: with their
K/V, without it (recompute), and with no room for them in the new engine."""

import pytest
import torch

from tailrl.config import EngineConfig
from tailrl.engine import Engine, Request, SamplingParams
from tests.helpers import tiny_native


@pytest.fixture(scope="module")
def model():
    return tiny_native("llama", seed=1)[0]


def _requests():
    params = SamplingParams(temperature=1.0, max_new_tokens=30, seed=7, ignore_eos=True)
    return [Request([3 + i, 9, 27, 4], uid=i, n=2, params=params, max_new_tokens=[30, 12 + i]) for i in range(3)]


@pytest.mark.parametrize("with_kv,max_batch", [(True, 64), (False, 64), (True, 2)])
def test_export_adopt_is_token_identical(model, with_kv, max_batch):
    want = {(r.uid, r.sample_index): (r.token_ids, r.logprobs) for r in Engine(model, EngineConfig()).generate(_requests())[0]}
    a = Engine(model, EngineConfig(kv_cache_tokens=2048, block_size=8))
    for r in _requests():
        a.add(r)
    done = []
    for _ in range(6):
        done += a.step()
    moved = a.export_unfinished(with_kv=with_kv)
    assert moved and not a.has_unfinished() and a.cache.num_free == a.cache.num_blocks
    b = Engine(model, EngineConfig(kv_cache_tokens=2048, block_size=8, max_batch_size=max_batch))
    for seq, kv in moved:
        b.adopt(seq, kv)
    assert len(b.scheduler.running) <= max_batch  # no room: the rest wait and are recomputed
    while b.has_unfinished():
        done += b.step()
    got = {(r.uid, r.sample_index): (r.token_ids, r.logprobs) for r in done}
    assert got.keys() == want.keys()
    for k in want:
        assert got[k][0] == want[k][0]
        assert max(abs(x - y) for x, y in zip(got[k][1], want[k][1])) < 1e-4


def test_cache_write_is_read_inverse(model):
    e = Engine(model, EngineConfig(kv_cache_tokens=256, block_size=8))
    kv = torch.randn(2, model.args.num_layers, 13, *model.kv_shape_per_token)
    e.cache.write(5, kv)
    assert torch.equal(e.cache.read(5, 13), kv)
