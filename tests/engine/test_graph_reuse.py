"""CUDA graphs across RL steps (engine/runner.py), their logic checked on the CPU: a stand-in for the capture
replays the captured step function, so the keys, the cap, the reuse after release_kv() when the KV pool comes
back at the same address, and the recapture when it does not, all run as on a GPU."""

import dataclasses

import pytest
import torch

import tailrl.engine.runner as runner_mod
from tailrl.config import EngineConfig
from tailrl.engine import Engine, Request, SamplingParams
from tests.helpers import tiny_native

pytest.importorskip("triton")


class Replay:
    """What torch.cuda.graph gives, on the CPU: replay() runs the captured step again into the same `out`."""

    def __init__(self, step):
        self.step, self.out = step, step()

    @torch.inference_mode()
    def replay(self):
        self.out.copy_(self.step())


def _engine(model, monkeypatch):
    eng = Engine(model, EngineConfig(kv_cache_tokens=512, block_size=4, max_batch_size=8, attention="triton",
                                     static_decode=True), eos_ids=[2])
    runner = eng.runner
    runner.setup = dataclasses.replace(runner.setup, graphs=True)
    monkeypatch.setattr(runner, "_capture", lambda step: (g := Replay(step), g.out))
    return eng


def _generate(eng, uid0=0):
    params = SamplingParams(temperature=1.0, max_new_tokens=9, seed=7, ignore_eos=True)
    reqs = [Request([5, 9, 11, 3], uid=uid0, n=3, params=params, max_new_tokens=[3, 6, 9]),
            Request([7, 8], uid=uid0 + 1, n=3, params=params, max_new_tokens=[3, 6, 9])]
    outs, trace = eng.generate(reqs)
    return [o.token_ids for o in outs], trace


@pytest.mark.slow
def test_graphs_are_reused_across_steps_and_recaptured_when_the_pool_moves(monkeypatch):
    model = tiny_native("llama", vocab=61)[0]
    ref = Engine(model, EngineConfig(kv_cache_tokens=512, block_size=4, max_batch_size=8, attention="triton",
                                     static_decode=True), eos_ids=[2])
    want = [_generate(ref, u)[0] for u in (0, 10, 20)]
    eng = _engine(model, monkeypatch)
    got, trace = _generate(eng, 0)
    first = eng.runner.captures
    assert got == want[0] and first == len(eng.runner.graphs) > 1 and trace.graph_captures == first
    assert trace.summary()["rollout/graph_captures"] == first
    # an RL step: the pool is released for the update and comes back at the same address -> nothing recaptured
    eng.release_kv()
    assert eng.runner.graphs  # kept while the pool is away
    eng._ensure_kv()
    eng.runner.graph_kv_ptr = eng.cache.kv.data_ptr()  # the same address (on a CPU the allocator may move it)
    got, trace = _generate(eng, 10)
    assert got == want[1] and eng.runner.captures == first and trace.graph_captures == first
    # the pool came back elsewhere: every graph is dropped before any replay, then captured again on use
    eng.release_kv()
    eng._ensure_kv()
    eng.runner.graph_kv_ptr = -1
    got, _ = _generate(eng, 20)
    assert got == want[2] and eng.runner.captures == 2 * first


@pytest.mark.slow
def test_keys_beyond_the_cap_run_the_static_step_eagerly(monkeypatch):
    model = tiny_native("llama", vocab=61)[0]
    ref = Engine(model, EngineConfig(kv_cache_tokens=512, block_size=4, max_batch_size=8, attention="triton",
                                     static_decode=True), eos_ids=[2])
    want, _ = _generate(ref)
    monkeypatch.setattr(runner_mod, "MAX_GRAPHS", 1)
    eng = _engine(model, monkeypatch)
    got, _ = _generate(eng)
    assert got == want and eng.runner.captures == 1 and len(eng.runner.graphs) == 1
    assert torch.is_tensor(next(iter(eng.runner.graphs.values()))[1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="real CUDA graphs (the GPU kit's test tier)")
def test_real_graphs_across_an_rl_step_on_cuda():
    """On a GPU: real captures; after release_kv() the graphs are reused exactly when the pool's address
    holds (the figure `rollout/graph_captures` reports), and tokens never change either way."""
    model = tiny_native("llama", vocab=61)[0].to("cuda", torch.bfloat16)
    eng = Engine(model, EngineConfig(kv_cache_tokens=512, block_size=4, max_batch_size=8), eos_ids=[2])
    assert eng.execution.graphs
    first, _ = _generate(eng, 0)
    captures, ptr = eng.runner.captures, eng.cache.kv.data_ptr()
    eng.release_kv()
    again, _ = _generate(eng, 0)
    assert again == first
    moved = eng.cache.kv.data_ptr() != ptr
    assert eng.runner.captures == (2 * captures if moved else captures)
