"""Engine execution options: the Triton attention backend against the torch oracle, static-buffer decode
steps against the dynamic path (token-identical), the growing CPU KV pool, and one-line errors.

On a CPU the Triton kernels run under the interpreter (seconds per forward of a tiny model), so the tests
that generate through them are in the slow tier; `TAILRL_TEST_DEVICE=cuda` runs them compiled.
"""

from __future__ import annotations

import pytest
import torch

import tailrl.engine.kv_cache as kv_cache
from tailrl import kernels
from tailrl.config import EngineConfig
from tailrl.engine import Engine, Request, SamplingParams
from tailrl.engine.static_step import StaticBuffers, buckets
from tailrl.errors import UserError
from tests.helpers import DEVICE, tiny_native


@pytest.fixture(scope="module")
def model():
    return tiny_native("llama", vocab=61)[0]


def _same_tokens(a, b) -> bool:
    """Token-identical; logprobs equal up to the last bits (a padded bucket runs the CPU's matmuls at another
    row count, which is not bitwise batch-invariant: strict mode's business)."""
    return [t for t, _ in a] == [t for t, _ in b] and all(
        x == pytest.approx(y, abs=1e-5) for (_, x), (_, y) in zip(a, b))


def _run(model, temperature: float, kv: int = 512, lengths=(3, 6, 11), **engine):
    eng = Engine(model, EngineConfig(kv_cache_tokens=kv, block_size=4, max_batch_size=8, **engine), eos_ids=[2])
    params = SamplingParams(temperature=temperature, max_new_tokens=max(lengths), seed=7, ignore_eos=True)
    # forced lengths: the batch of 6 shrinks through buckets 8 -> 4 -> 2 as samples finish
    reqs = [Request([5, 9, 11, 3], uid=0, n=3, params=params, max_new_tokens=list(lengths)),
            Request([7, 8], uid=1, n=3, params=params, max_new_tokens=list(lengths))]
    outs, trace = eng.generate(reqs)
    return [(o.token_ids, o.logprobs) for o in outs], trace, eng


def test_buckets_cover_every_batch_size():
    assert buckets(1) == [1] and buckets(8) == [1, 2, 4, 8] and buckets(48) == [1, 2, 4, 8, 16, 32, 48]


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_static_decode_is_token_identical_to_the_dynamic_path(model, temperature):
    dynamic, _, _ = _run(model, temperature, attention="triton", static_decode=False)
    static, trace, eng = _run(model, temperature, attention="triton", static_decode=True)
    assert _same_tokens(static, dynamic)
    assert eng.runner.static is not None and sorted(eng.runner.static.bufs) == [2, 4, 8]  # the batch crossed buckets


@pytest.mark.slow
def test_static_decode_under_preemption(model):
    """A pool of 6 blocks for 6 sequences of up to 15 tokens: sequences are preempted and re-prefilled."""
    ref, _, _ = _run(model, 1.0, attention="triton", static_decode=False)
    got, trace, _ = _run(model, 1.0, kv=24, attention="triton", static_decode=True)
    assert trace.preemptions > 0 and _same_tokens(got, ref)


@pytest.mark.slow
def test_triton_attention_matches_the_torch_oracle(model):
    ref, _, _ = _run(model, 0.0, attention="torch")
    got, _, _ = _run(model, 0.0, attention="triton", static_decode=False)
    assert [t for t, _ in got] == [t for t, _ in ref]  # greedy: no near-ties in this tiny model
    for (_, a), (_, b) in zip(got, ref):
        assert a == pytest.approx(b, abs=1e-4)


def test_the_cpu_pool_grows_with_need_and_tokens_do_not_change(model, monkeypatch):
    ref, _, big = _run(model, 1.0, kv=4096)
    monkeypatch.setattr(kv_cache, "GROW_FROM_TOKENS", 8)  # two blocks, then doubling
    got, _, eng = _run(model, 1.0, kv=4096)
    assert got == ref
    assert eng.cache.allocated_blocks < big.cache.allocated_blocks <= eng.cache.num_blocks == 1024
    assert eng.cache.allocated_blocks >= 16  # grew past its first 2 blocks
    assert eng.cache.num_free == eng.cache.num_blocks  # everything released at the end


def test_execution_errors_are_one_line(model, monkeypatch):
    def build(**kw):
        return Engine(model, EngineConfig(kv_cache_tokens=512, block_size=4, **kw))

    if DEVICE == "cpu":
        with pytest.raises(UserError, match="engine.cuda_graphs=true needs a CUDA device"):
            build(attention="triton", cuda_graphs=True)
    with pytest.raises(UserError, match="engine.static_decode=true needs engine.attention=triton"):
        build(attention="torch", static_decode=True)
    with pytest.raises(UserError, match=r"gpu_memory_utilization must be in \(0, 1\], got 1.5"):
        build(gpu_memory_utilization=1.5)
    with pytest.raises(UserError, match="unknown engine.attention 'flash'"):
        build(attention="flash")
    with pytest.raises(UserError, match="cannot hold one sequence of max_model_len = 600"):
        build(max_model_len=600)
    monkeypatch.setattr(kernels, "HAS_TRITON", False)
    with pytest.raises(UserError, match="engine.attention=triton: Triton is not installed"):
        build(attention="triton")
    # auto: triton on CUDA unless the model is fp32 (its attention tiles spill registers there)
    model_fp32 = next(build().model.parameters()).dtype == torch.float32
    assert build().execution.attention == ("triton" if DEVICE == "cuda" and not model_fp32 else "torch")


def test_defaults_on_a_cuda_device(monkeypatch):
    """The resolution itself (no CUDA needed: it only reads the device's type)."""
    import torch

    from tailrl.engine.execution import resolve_execution

    monkeypatch.setattr(kernels, "HAS_TRITON", True)
    cuda = torch.device("cuda", 0)
    ex = resolve_execution(EngineConfig(), cuda)
    assert (ex.attention, ex.static, ex.graphs, ex.grow_pool) == ("triton", True, True, False)
    ex = resolve_execution(EngineConfig(static_decode=False), cuda)  # eager dynamic steps, so no graphs
    assert (ex.static, ex.graphs) == (False, False)
    ex = resolve_execution(EngineConfig(), cuda, tp_size=2)  # a captured step would hold TP collectives
    assert (ex.static, ex.graphs) == (False, False)
    assert resolve_execution(EngineConfig(static_decode=True), cuda, tp_size=2).static
    assert resolve_execution(EngineConfig(attention="torch"), cuda).graphs is False
    # fp32 on CUDA: auto takes the dense path; asking for Triton still runs it, with a one-line warning
    assert resolve_execution(EngineConfig(), cuda, dtype=torch.float32).attention == "torch"
    with pytest.warns(UserWarning, match="spills registers"):
        assert resolve_execution(EngineConfig(attention="triton"), cuda, dtype=torch.float32).attention == "triton"


def test_one_line_errors_through_the_cli(tmp_path, capsys):
    from tailrl.cli import main
    from tests.helpers import make_model_dir

    model_dir = make_model_dir(tmp_path / "m")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "abc"}\n')
    argv = ["generate", "--model", str(model_dir), "--prompts", str(prompts), "--device", "cpu"]
    assert main(argv + ["--engine", "cuda_graphs=true", "--engine", "attention=triton"]) == 2
    assert "engine.cuda_graphs=true needs a CUDA device" in capsys.readouterr().err
    assert main(argv + ["--engine", "gpu_memory_utilization=0"]) == 2
    assert "gpu_memory_utilization must be in (0, 1]" in capsys.readouterr().err


def test_a_step_above_the_largest_bucket_is_a_clear_error():
    bufs = StaticBuffers(max_batch_size=4, max_blocks=2, block_size=4, device=torch.device("cpu"))
    with pytest.raises(ValueError, match=r"a decode step of 5 rows exceeds the largest static bucket \(4"):
        bufs.stage([object()] * 5, {})
