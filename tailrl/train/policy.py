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

With model.lora (`setup_lora`, model/lora.py) the module's weights are the merged W + s B A in model.dtype, frozen;
the fp32 adapters A and B are the only trained parameters (AdamW), merged again after every optimizer step (a
hook on the optimizer). One process runs the engine on that very module (nothing to copy, bitwise the trainer's
weights), in model.dtype and without autocast; under torchrun the engine's copy is refreshed from the merged
weights only. Checkpoints hold the adapter in PEFT's format (train/checkpoint.py).
"""

from __future__ import annotations

import contextlib
import os
import resource
import warnings
from dataclasses import replace

import torch
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor

from tailrl.config.sections import LoraConfig
from tailrl.model.loading import clone_model, resolve_dtype
from tailrl.model.lora import (
    LoraSpec,
    adapter_parameters,
    attach,
    is_lora,
    merge,
    merged_weight_names,
    place_bases,
)
from tailrl.model.peft_format import check_base, load_adapter_state, read_adapter
from tailrl.train.distributed import DistContext


def setup_lora(model, cfg: LoraConfig, dtype: torch.dtype, seed: int, base_model: str) -> bool:
    """model.lora: attach adapters to the loaded model in place (the base cast to `dtype` and frozen, A and B fp32,
    A's init seeded by `seed`), from the config or continuing the PEFT adapter at cfg.path (its r, alpha and
    modules; checked against the model), then merge. False (nothing done) while r = 0 and no path."""
    if not cfg.r and not cfg.path:
        return False
    if cfg.path:
        spec, tensors = read_adapter(cfg.path)
        check_base(spec, tensors, model, f"model.lora.path {cfg.path}")  # the shapes decide: UserError
        if spec.base_model and _stem(spec.base_model) != _stem(base_model):  # a name is no proof (a local copy)
            warnings.warn(f"model.lora.path {cfg.path} names base {spec.base_model!r}, model.path is {base_model!r}",
                          stacklevel=2)
        attach(model, replace(spec, base_model=base_model), dtype, seed)
        load_adapter_state(model, tensors, f"model.lora.path {cfg.path}")
    else:
        attach(model, LoraSpec(r=cfg.r, alpha=cfg.alpha, targets=cfg.target_modules, init=cfg.init,
                               base_model=base_model), dtype, seed)
        merge(model)
    return True


def _stem(name: str) -> str:
    """'HuggingFaceTB/SmolLM2-135M-Instruct/' -> 'smollm2-135m-instruct'."""
    return name.rstrip("/").rsplit("/", 1)[-1].lower()


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
        self.lora = is_lora(model)  # setup_lora: the weights merged in model.dtype, adapters the only masters
        device = torch.device(device or next(model.parameters()).device)
        self.device_type = device.type
        train = model if self.lora else model.float()
        if not ctx.enabled:
            train = train.to(device)
        separate = (self.compute_dtype != torch.float32 and not self.lora) or ctx.enabled
        self.rollout = clone_model(train, self.compute_dtype, device).eval() if separate else train
        self._rollout_params = dict(self.rollout.named_parameters())
        # what sync_rollout copies: every weight, or with LoRA the merged ones (the rest is frozen)
        self._synced = set(merged_weight_names(train) if self.lora else self._rollout_params)
        self.train = train
        train.checkpointing = activation_checkpointing
        if strict:  # bf16 compute on the masters by explicit casts: the engine's exact op sequence
            cast = self.compute_dtype != torch.float32 and not self.lora  # LoRA: the module is in model.dtype
            train.set_strict(True, self.compute_dtype if cast else None)
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
        if self.lora:
            place_bases(train)  # each base W beside its merged weight (this rank's shard under FSDP2)

    @property
    def shared(self) -> bool:
        """The engine runs the trained module itself (one fp32 process)."""
        return self.rollout is self.train

    def autocast(self):
        """The training forward's precision context: autocast to model.dtype (one process or torchrun);
        none in fp32 or strict."""
        if self.compute_dtype == torch.float32 or self.strict or self.lora:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.compute_dtype)

    @torch.no_grad()
    def sync_rollout(self) -> None:
        """Copy the masters into the engine's module, parameter by parameter, in place (a collective under
        FSDP2: every rank gathers every parameter, in the same order)."""
        if self.shared:
            return
        for name, p in self.train.named_parameters():
            if name not in self._synced:
                continue
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

    def trainable(self) -> list[torch.nn.Parameter]:
        """The optimizer's parameters: every master, or with LoRA every adapter A and B."""
        return adapter_parameters(self.train) if self.lora else list(self.train.parameters())

    def make_optimizer(self, lr: float, betas: tuple[float, ...], weight_decay: float) -> torch.optim.Optimizer:
        """AdamW over the trainable parameters; with LoRA every step is followed by the merge W' = W + s B A, in
        place (so every later forward of the update, the engine's and a checkpoint's see the new weights)."""
        opt = torch.optim.AdamW(self.trainable(), lr=lr, betas=tuple(betas), weight_decay=weight_decay)
        if self.lora:
            opt.register_step_post_hook(lambda *_: merge(self.train))
        return opt

    def reset_peak_memory(self) -> None:
        """Start the update's peak memory (CUDA) afresh."""
        if self.device_type == "cuda":
            torch.cuda.reset_peak_memory_stats()

    def memory_metrics(self, optimizer) -> dict[str, float]:
        """perf/optimizer_state_gb (this rank's AdamW moments), perf/trainable_params, and the update's memory:
        perf/max_memory_allocated_gb on CUDA (the peak since reset_peak_memory), else perf/rss_gb (the process's
        resident memory now) and perf/max_rss_gb (its peak so far)."""
        def local(t):
            return t.to_local() if isinstance(t, DTensor) else t

        state = sum(local(t).numel() * t.element_size() for s in optimizer.state.values() for t in s.values()
                    if isinstance(t, torch.Tensor) and t.dim() > 0)
        trainable = sum(p.numel() for p in self.trainable())  # the model's (global under FSDP2)
        out = {"perf/optimizer_state_gb": state / 2 ** 30, "perf/trainable_params": float(trainable)}
        if self.device_type == "cuda":
            out["perf/max_memory_allocated_gb"] = torch.cuda.max_memory_allocated() / 2 ** 30
        else:
            if os.path.exists("/proc/self/statm"):  # Linux
                with open("/proc/self/statm") as f:
                    out["perf/rss_gb"] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 30
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # KiB on Linux
            out["perf/max_rss_gb"] = max(peak, out.get("perf/rss_gb", 0.0))  # the two count pages differently
        return out
