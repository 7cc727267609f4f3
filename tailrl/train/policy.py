"""The policy as trained and as rolled out: fp32 master weights for the optimizer, a compute dtype for the
forward, and the module the engine runs.

    train     the optimizer's module, fp32 masters (an update of 1e-6 on a weight of 0.02 survives; in bf16
              it would be below half an ulp and vanish). Under torchrun each decoder layer and the root are
              FSDP2 `fully_shard`ed (fp32 all-gathers and fp32 gradient reduction). The training forward
              runs under autocast to model.dtype in one process and under torchrun alike, so N ranks
              compute what one process computes up to the order of fp32 sums (engine.exact=strict: no
              autocast, explicit casts to the engine's dtype, model/strict.py).
    rollout   the engine's module: the same object in one fp32 process on one device (nothing to copy), else
              its own full copy in the compute dtype, refreshed after every optimizer step by copying each
              parameter in place (no reallocation: the engine's captured CUDA graphs stay valid).

Checkpoints save the rollout module as the HF `model/` folder (the dtype the user asked for) and, when that
is not fp32, the fp32 masters beside it, so a resume continues from the exact weights.
"""

from __future__ import annotations

import contextlib

import torch
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor

from tailrl.model.loading import clone_model, resolve_dtype
from tailrl.train.distributed import DistContext


class Policy:
    def __init__(self, model, dtype: str, ctx: DistContext, activation_checkpointing: bool = False,
                 strict: bool = False, device: str | None = None):
        """model: the loaded checkpoint (any dtype, cast to fp32 for training); device: where this rank
        computes (default the model's). Under torchrun the model may be loaded on the CPU: fully_shard
        moves each rank's shards to `device`, so no rank ever holds the full fp32 model there. strict:
        engine.exact=strict, the trainer's forward through the engine's invariant kernels (model/strict.py)."""
        self.compute_dtype = resolve_dtype(dtype)
        self.ctx = ctx
        self.strict = strict
        device = torch.device(device or next(model.parameters()).device)
        self.device_type = device.type
        train = model.float()
        if not ctx.enabled:
            train = train.to(device)
        separate = self.compute_dtype != torch.float32 or ctx.enabled
        self.rollout = clone_model(train, self.compute_dtype, device).eval() if separate else train
        self._rollout_params = dict(self.rollout.named_parameters())
        self.train = train
        train.checkpointing = activation_checkpointing
        if strict:  # bf16 compute on the masters by explicit casts: the engine's exact op sequence
            train.set_strict(True, None if self.compute_dtype == torch.float32 else self.compute_dtype)
            self.rollout.set_strict(True)
        if ctx.enabled:  # fp32 parameters gathered, autocast computes (the one-process recipe)
            mp = MixedPrecisionPolicy(param_dtype=None, reduce_dtype=torch.float32)
            for layer in train.layers:
                fully_shard(layer, mp_policy=mp)
            fully_shard(train, mp_policy=mp)
            for m in train.modules():  # the loss is normalised over the global batch: ranks' gradients add up
                if isinstance(m, FSDPModule):
                    m.set_gradient_divide_factor(1.0)
                    m.set_force_sum_reduction_for_comms(True)  # a plain sum (gloo has no PREMUL_SUM)
            if device.type == "cuda":
                torch.cuda.empty_cache()  # the unsharded load's memory back, before the engine sizes its pool

    @property
    def shared(self) -> bool:
        """The engine runs the trained module itself (one fp32 process)."""
        return self.rollout is self.train

    def autocast(self):
        """The training forward's precision context: autocast to model.dtype (one process or torchrun);
        none in fp32 or strict."""
        if self.compute_dtype == torch.float32 or self.strict:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.compute_dtype)

    @torch.no_grad()
    def sync_rollout(self) -> None:
        """Copy the masters into the engine's module, parameter by parameter, in place (a collective under
        FSDP2: every rank gathers every parameter, in the same order)."""
        if self.shared:
            return
        for name, p in self.train.named_parameters():
            src = p.full_tensor() if isinstance(p, DTensor) else p
            self._rollout_params[name].copy_(src)

    @torch.no_grad()
    def masters(self) -> dict[str, torch.Tensor]:
        """The fp32 master weights under native names, full tensors on the CPU (a collective under FSDP2:
        every rank must call it; only rank 0, the one that writes them, gets them, the others {})."""
        out = {}
        for n, p in self.train.named_parameters():
            full = (p.full_tensor() if isinstance(p, DTensor) else p).detach()
            if self.ctx.main:
                out[n] = full.float().cpu()
        return out

    @torch.no_grad()
    def load_masters(self, tensors: dict[str, torch.Tensor]) -> None:
        """Restore master weights (native names, full tensors) into the trained module, then the engine's."""
        for name, p in self.train.named_parameters():
            full = tensors[name].to(device=p.device if not isinstance(p, DTensor) else p.to_local().device,
                                    dtype=p.dtype)
            p.copy_(distribute_tensor(full, p.device_mesh, p.placements) if isinstance(p, DTensor) else full)
        self.sync_rollout()
