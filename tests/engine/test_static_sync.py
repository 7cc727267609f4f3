"""The static decode step (what a CUDA graph captures) has no host sync and no data-dependent op, checked
on the CPU: one step of the device side (ModelRunner._static_step, with the keyed Gumbel sampler's CUDA
path: the Triton kernel) under a TorchDispatchMode that fails on such ops and counts the rest. Triton
launches (under the interpreter here) count as one op each; what the interpreter does inside is not the
step's."""

from __future__ import annotations

import collections
from dataclasses import replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from triton.runtime.jit import KernelInterface

from tailrl.config import EngineConfig
from tailrl.engine import Request, SamplingParams
from tailrl.engine.sampling.gumbel import sample_gumbel_kernel
from tailrl.engine.sampling.rows import seq_flags
from tailrl.speculative import build_engine
from tests.helpers import tiny_native

pytest.importorskip("triton")
aten = torch.ops.aten
SYNCING = {aten._local_scalar_dense.default, aten.item.default, aten.nonzero.default, aten.masked_select.default,
           aten.is_nonzero.default, aten.equal.default, aten._unique2.default, aten.unique_dim.default}


class StepOps(TorchDispatchMode):
    """Counts the aten ops of what runs under it; a syncing / data-dependent op is an error."""

    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in SYNCING:
            raise AssertionError(f"{func}: a host sync or data-dependent shape in the captured step")
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


def _step_ops(layers: int) -> collections.Counter:
    model = tiny_native("llama", vocab=97, layers=layers)[0]
    eng = build_engine(model, None, EngineConfig(kv_cache_tokens=512, block_size=4, max_batch_size=4,
                                                 attention="triton", static_decode=True), eos_ids=[2])
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=1, ignore_eos=True)
    eng.add(Request([5, 6, 7], uid=0, n=3, params=params))
    eng.step()  # the prefill
    ready, _ = eng.scheduler.prepare_decode()
    bufs = eng.runner.static.stage(ready, eng.cache.tables)
    # the sampler as on CUDA (the kernel); on a CPU the engine takes the pruned race, which syncs
    eng.runner.setup = replace(eng.runner.setup, sampler=replace(eng.sampler, sample=sample_gumbel_kernel))
    mode = StepOps()
    original = KernelInterface.__getitem__

    def launch(self, grid):
        def run(*args, **kw):
            mode.ops[f"triton {getattr(self, '__name__', type(self).__name__)}"] += 1
            with _disable_current_modes():
                return original(self, grid)(*args, **kw)
        return run

    KernelInterface.__getitem__ = launch
    try:
        with torch.inference_mode(), mode:
            eng.runner._static_step(bufs, seq_flags(ready), ())
    finally:
        KernelInterface.__getitem__ = original
    return mode.ops


def test_the_static_step_has_no_host_sync_and_few_ops_per_layer():
    two, four = _step_ops(2), _step_ops(4)
    per_layer = (sum(four.values()) - sum(two.values())) / 2
    print(f"\nstatic decode step: {sum(two.values())} ops with 2 layers, {sum(four.values())} with 4: "
          f"{per_layer:g} per layer; per layer: " + ", ".join(f"{k} {(four[k] - two[k]) // 2}"
                                                           for k in sorted(four) if four[k] != two[k]))
    assert per_layer <= 37  # a decode layer: projections, fused kernels, views (docs/results.md has the list)
    copies = [k for k in four if ("contiguous" in k or "copy" in k) and four[k] != two[k]]
    assert copies == []  # the step's strided columns are made dense once, not by every layer
    assert sum(v for k, v in four.items() if k.startswith("triton")) > 4 * 4  # the layers run the kernels
