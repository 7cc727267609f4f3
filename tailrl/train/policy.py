"""The policy as trained and as rolled out: fp32 master weights for the optimizer, a compute dtype for the
forward, and the module the engine runs.

    train     the optimizer's module, fp32 masters (an update of 1e-6 on a weight of 0.02 survives; in bf16
              it would be below half an ulp and vanish). Under torchrun each decoder layer and the root are
              FSDP2 `fully_shard`ed, with bf16 compute / fp32 gradient reduction when model.dtype=bfloat16;
              in one process the training forward runs under bf16 autocast instead.
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
    def __init__(self, model, dtype: str, ctx: DistContext, activation_checkpointing: bool = False):
        """model: the loaded checkpoint (any dtype; kept on its device, cast to fp32 for training)."""
        self.compute_dtype = resolve_dtype(dtype)
        self.ctx = ctx
        self.device_type = next(model.parameters()).device.type
        train = model.float()
        separate = self.compute_dtype != torch.float32 or ctx.enabled
        self.rollout = clone_model(train, self.compute_dtype).eval() if separate else train
        self._rollout_params = dict(self.rollout.named_parameters())
        self.train = train
        train.checkpointing = activation_checkpointing
        if ctx.enabled:
            mp = MixedPrecisionPolicy(param_dtype=self.compute_dtype, reduce_dtype=torch.float32)
            for layer in train.layers:
                fully_shard(layer, mp_policy=mp)
            fully_shard(train, mp_policy=mp)
            for m in train.modules():  # the loss is normalised over the global batch: ranks' gradients add up
                if isinstance(m, FSDPModule):
                    m.set_gradient_divide_factor(1.0)
                    m.set_force_sum_reduction_for_comms(True)  # a plain sum (gloo has no PREMUL_SUM)

    @property
    def shared(self) -> bool:
        """The engine runs the trained module itself (one fp32 process)."""
        return self.rollout is self.train

    def autocast(self):
        """The training forward's precision context: bf16 autocast in one process with model.dtype=bfloat16
        (FSDP2 casts by itself under torchrun)."""
        if self.compute_dtype == torch.float32 or self.ctx.enabled:
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
        """The fp32 master weights under native names, full tensors (a collective under FSDP2)."""
        return {n: (p.full_tensor() if isinstance(p, DTensor) else p).detach().float().cpu()
                for n, p in self.train.named_parameters()}

    @torch.no_grad()
    def load_masters(self, tensors: dict[str, torch.Tensor]) -> None:
        """Restore master weights (native names, full tensors) into the trained module, then the engine's."""
        for name, p in self.train.named_parameters():
            full = tensors[name].to(device=p.device if not isinstance(p, DTensor) else p.to_local().device,
                                    dtype=p.dtype)
            p.copy_(distribute_tensor(full, p.device_mesh, p.placements) if isinstance(p, DTensor) else full)
        self.sync_rollout()
