"""How the engine executes on its device: engine.attention / static_decode / cuda_graphs /
gpu_memory_utilization resolved against the model's device, with one-line errors for combinations that
cannot run, and the KV pool's size.

    auto on CUDA (Triton installed): triton attention, static decode steps, CUDA graphs, pool from memory
                                     (an fp32 model: torch attention — fp32 Triton attention tiles spill
                                     registers; engine.attention=triton still runs them, with a warning)
    auto on CPU:                     torch attention, dynamic steps, a pool that grows with need
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist

from tailrl import kernels
from tailrl.config import EngineConfig
from tailrl.errors import UserError


@dataclass(frozen=True)
class Execution:
    strict: bool  # engine.exact=strict: batch-invariant kernels on the whole token path (model/strict.py)
    canonical: bool  # engine.exact=canonical: stock CPU kernels called batch-free (model/canonical.py)
    attention: str  # torch | triton
    static: bool  # decode steps on static buffers (engine/static_step.py)
    graphs: bool  # ... captured as CUDA graphs
    grow_pool: bool  # the KV pool grows with need (CPU) instead of being allocated whole


def resolve_execution(cfg: EngineConfig, device: torch.device, tp_size: int = 1,
                      dtype: torch.dtype = torch.bfloat16) -> Execution:
    """tp_size > 1: CUDA graphs stay off by default (a captured step would hold the TP collectives).
    The names themselves (engine.attention, engine.exact, engine.sampler) were checked when the config was
    made (config/fields.py choices); here only combinations that cannot run on this device fail."""
    cuda = device.type == "cuda"
    strict = cfg.exact == "strict"
    canonical = cfg.exact == "canonical"
    attention = cfg.attention
    if canonical:  # the torch path's gathered context, attended one query at a time
        if cuda:
            raise UserError("engine.exact=canonical is the CPU's batch-free mode; on CUDA use engine.exact=strict "
                            "(batch-invariant kernels)")
        if attention == "triton":
            raise UserError("engine.exact=canonical needs engine.attention=torch (or auto)")
        attention = "torch"
    if strict:  # every reduction through the invariant kernels, the paged attention kernel included
        if attention == "torch":
            raise UserError("engine.exact=strict needs engine.attention=triton (or auto): the batch-invariant "
                            "paged attention kernel")
        kernels.require_triton("engine.exact=strict")
        attention = "triton"
    elif attention == "auto":
        attention = "triton" if cuda and kernels.HAS_TRITON and dtype != torch.float32 else "torch"
    elif attention == "triton":
        kernels.require_triton("engine.attention=triton")
    if cuda and attention == "triton" and dtype == torch.float32:
        warnings.warn("fp32 Triton attention on CUDA spills registers (slow; docs/results.md, the AOT table): "
                      "model.dtype=auto or bfloat16 runs the fast path", stacklevel=2)
    graphs = cfg.cuda_graphs
    if graphs and not cuda:
        raise UserError(f"engine.cuda_graphs=true needs a CUDA device (the model is on {device.type}); "
                        "leave it unset or false")
    if graphs and attention != "triton":
        raise UserError("engine.cuda_graphs=true needs engine.attention=triton (the graph replays the paged "
                        "kernels over static block tables)")
    if graphs is None:
        graphs = cuda and attention == "triton" and cfg.static_decode is not False and tp_size == 1
    static = cfg.static_decode if cfg.static_decode is not None else graphs
    if static and attention != "triton":
        raise UserError("engine.static_decode=true needs engine.attention=triton")
    if graphs and not static:
        raise UserError("engine.cuda_graphs=true captures static decode steps: leave engine.static_decode unset")
    if not 0 < cfg.gpu_memory_utilization <= 1:
        raise UserError(f"engine.gpu_memory_utilization must be in (0, 1], got {cfg.gpu_memory_utilization}")
    return Execution(strict, canonical, attention, bool(static), bool(graphs), grow_pool=not cuda)


def kv_pool_tokens(cfg: EngineConfig, model, device: torch.device, max_model_len: int, tp_group=None) -> int:
    """Tokens the KV pool holds: engine.kv_cache_tokens, on CUDA capped by what fits in free memory up to
    gpu_memory_utilization of the device (under TP the least any rank of tp_group fits: every rank must
    hold the same blocks). One sequence of max_model_len must fit when that length was set
    (engine.max_model_len) or the pool was sized from memory."""
    tokens = cfg.kv_cache_tokens
    where = f"engine.kv_cache_tokens ({tokens})"
    if device.type == "cuda":
        torch.cuda.empty_cache()  # memory PyTorch caches but does not use is free for the pool
        free, total = torch.cuda.mem_get_info(device)
        budget = free - (1.0 - cfg.gpu_memory_utilization) * total
        p = next(model.parameters())
        heads, head_dim = model.kv_shape_per_token
        per_token = 2 * model.args.num_layers * heads * head_dim * p.element_size()
        fit = max(0, int(budget // per_token))
        if tp_group is not None:  # collective: the smallest fit over the TP ranks
            t = torch.tensor([fit], dtype=torch.long, device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MIN, group=tp_group)
            fit = int(t.item())
        if fit < tokens:
            tokens = fit
            where = (f"the KV pool that fits in engine.gpu_memory_utilization={cfg.gpu_memory_utilization} "
                     f"({tokens} tokens, {free / 2**30:.1f} GiB free)")
    blocks = tokens // cfg.block_size
    if (cfg.max_model_len or device.type == "cuda") and blocks * cfg.block_size < max_model_len:
        raise UserError(f"{where} cannot hold one sequence of max_model_len = {max_model_len} tokens; raise it or "
                        "lower engine.max_model_len")
    return tokens
