"""Hugging Face parameter names <-> the native decoder's (fused) parameters.

`load_weights(model, named_tensors)` is the single path for checkpoint loading and weight sync: each
HF tensor is routed to its native parameter and sliced by that parameter's `weight_loader` (which
knows the tensor-parallel rank). `hf_state_dict(model)` is the inverse, for saving HF checkpoints.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import torch
from torch import nn

from tailrl.errors import UserError
from tailrl.model.layers import gather_cat

# HF sub-module name -> (native fused name, shard id)
_FUSED = {
    "self_attn.q_proj": ("self_attn.qkv_proj", 0),
    "self_attn.k_proj": ("self_attn.qkv_proj", 1),
    "self_attn.v_proj": ("self_attn.qkv_proj", 2),
    "mlp.gate_proj": ("mlp.gate_up_proj", 0),
    "mlp.up_proj": ("mlp.gate_up_proj", 1),
}
_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)\.(weight|bias)$")


def hf_to_native(name: str) -> tuple[str, int]:
    """'model.layers.3.self_attn.k_proj.weight' -> ('layers.3.self_attn.qkv_proj.weight', 1)."""
    m = _LAYER.match(name)
    if m:
        idx, mod, kind = m.groups()
        if mod in _FUSED:
            fused, shard = _FUSED[mod]
            return f"layers.{idx}.{fused}.{kind}", shard
        return f"layers.{idx}.{mod}.{kind}", 0
    if name.startswith("model."):
        return name[len("model."):], 0
    return name, 0


def load_weights(model: nn.Module, named_tensors: Iterable[tuple[str, torch.Tensor]], strict: bool = True) -> None:
    """Copy HF-named tensors into the model (casting dtype/device); every parameter must be covered."""
    params = dict(model.named_parameters())
    seen: set[tuple[str, int]] = set()
    tied = getattr(model.args, "tie_word_embeddings", False)
    for name, tensor in named_tensors:
        if "rotary_emb" in name:
            continue
        target, shard = hf_to_native(name)
        if target == "lm_head.weight" and tied:
            continue
        if target not in params:
            if strict:
                raise UserError(f"checkpoint tensor '{name}' has no place in {model.args.architecture}")
            continue
        p = params[target]
        loader = getattr(p, "weight_loader", None)
        with torch.no_grad():
            t = tensor.to(device=p.device, dtype=p.dtype)
            if loader is not None:
                loader(p, t, shard)
            else:
                p.data.copy_(t)
        seen.add((target, shard))
    if strict:
        missing = []
        for n in params:
            parts = getattr(_owner(model, n), "parts", None)  # fused column-parallel: one shard per part
            for shard in range(len(parts) if parts else 1):
                if (n, shard) not in seen:
                    missing.append(f"{n}[part {shard}]" if parts else n)
        if missing:
            raise UserError(f"checkpoint is missing {len(missing)} tensors, e.g. {missing[0]}")


def _owner(model: nn.Module, param_name: str) -> nn.Module:
    return model.get_submodule(param_name.rsplit(".", 1)[0])


def full_tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The model's weights under Hugging Face names, unfused and unsharded, one tensor at a time (so a
    consumer such as resharding holds at most one full tensor). With TP > 1 this is a collective: every
    rank of the model's TP group must iterate it, in the same order."""
    inverse: dict[str, list[str]] = {}
    for hf_mod, (fused, shard) in _FUSED.items():
        inverse.setdefault(fused, [None] * 3)[shard] = hf_mod
    tp = model.tp
    for name, p in model.named_parameters():
        if ".lora." in name:  # LoRA adapters (model/lora.py): no HF weight; the merged weight beside them is
            continue
        t = p.detach()
        mod, kind = name.rsplit(".", 1)
        owner = _owner(model, name)
        if name.startswith("layers."):
            _, idx, sub = mod.split(".", 2)
            if sub in inverse:  # column-parallel, fused: each part sharded on its own rows
                for part, hf_mod in zip(t.split(owner.parts, dim=0), inverse[sub]):
                    yield f"model.layers.{idx}.{hf_mod}.{kind}", gather_cat(part, tp, 0)
                continue
            if kind == "weight" and hasattr(owner, "in_shard"):  # row-parallel: input columns sharded
                t = gather_cat(t, tp, 1)
            yield f"model.{name}", t
        elif hasattr(owner, "vocab"):  # vocab-parallel rows, the last rank padded
            full = gather_cat(t, tp, 0)[: owner.vocab]
            yield (name if name.startswith("lm_head.") else f"model.{name}"), full
        else:
            yield f"model.{name}", t


def hf_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights under Hugging Face names (unfused; gathered when tensor-parallel)."""
    return {k: v.contiguous() for k, v in full_tensors(model)}


@torch.no_grad()
def init_random(model: nn.Module, std: float = 0.02, seed: int = 0) -> nn.Module:
    """Random init (normal(0, std) matrices, ones for norms, zeros for biases), reproducible by seed."""
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.fill_(1.0)
        elif name.endswith(".bias"):
            p.zero_()
        else:
            p.copy_(torch.randn(p.shape, generator=g) * std)
    return model
