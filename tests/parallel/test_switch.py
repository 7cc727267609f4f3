"""A rollout that switches TP/DP layout mid-generation is token-identical to one that never switches,
for both ways of moving the unfinished requests (KV migration and recompute)."""

import pytest

from tailrl.config import EngineConfig
from tailrl.engine import Request, SamplingParams
from tailrl.model import ModelArgs
from tailrl.model.loading import iter_safetensors, read_config
from tailrl.parallel.dist import spawn
from tailrl.parallel.layout import Layout
from tailrl.parallel.rollout import forced, tp_generate
from tests.helpers import make_model_dir

pytestmark = pytest.mark.slow  # every test here starts processes


def _requests():
    params = SamplingParams(temperature=1.0, max_new_tokens=40, seed=3, ignore_eos=True)
    lens = [[40, 5, 33], [12, 40, 7], [25, 9, 40], [3, 18, 30]]
    return [Request([5 + i, 17, 33, 2 + i, 60], uid=i, n=3, params=params, max_new_tokens=lens[i]) for i in range(4)]


def _run(rank, world, folder, start, switch_to, path):
    args = ModelArgs.from_hf(read_config(folder))
    tensors = list(iter_safetensors(sorted(folder.glob("*.safetensors"))))
    decide = forced(6, Layout(switch_to, world), path) if switch_to else None
    res = tp_generate(rank, world, args, tensors, _requests(), EngineConfig(kv_cache_tokens=4096, block_size=8),
                      Layout(start, world), decide, interval=3)
    return [(r.uid, r.sample_index, r.token_ids, r.logprobs) for r in res.rollouts], res.layouts, res.switches


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("m") / "tiny")


@pytest.fixture(scope="module")
def reference(folder):
    return spawn(_run, 2, folder, 1, 0, "")[0][0]  # DP2, never switches


@pytest.mark.parametrize("start,to,path", [(1, 2, "migrate"), (1, 2, "recompute"), (2, 1, "migrate"),
                                           (2, 1, "recompute")])
def test_switch_is_token_identical(folder, reference, start, to, path):
    outs = spawn(_run, 2, folder, start, to, path)
    for rollouts, layouts, switches in outs:
        assert layouts == [f"TP{start}/DP{2 // start}", f"TP{to}/DP{2 // to}"]
        assert len(switches) == 1 and switches[0].kv_path == path and switches[0].unfinished > 0
        assert (switches[0].kv_bytes > 0) == (path == "migrate")
        assert len(rollouts) == len(reference) == 12
        for (u, i, toks, lps), (u2, i2, toks2, lps2) in zip(rollouts, reference):
            assert (u, i, toks) == (u2, i2, toks2)
            assert max(abs(a - b) for a, b in zip(lps, lps2)) < 1e-4
