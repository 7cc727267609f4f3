"""LoRA on the native decoder, with one set of weights for rollout and training:

    W' = W + s B A        s = alpha / r (alpha / sqrt(r) with rsLoRA); A (r, in), B (out, r)

A targeted linear keeps its `weight` parameter, which holds the merged W' (model.dtype, frozen). The engine
decodes with it and the trainer's forward multiplies by the very same tensor through the very same op, so the
rollout's logprobs are the trainer's (bitwise with engine.exact=strict). The linear gains a child `lora`
holding the adapters in fp32, one pair per Hugging Face module it fuses (qkv_proj: q_proj, k_proj, v_proj;
gate_up_proj: gate_proj, up_proj), and keeps the frozen base W beside it as a plain attribute (not a parameter:
no optimizer state, never saved as the model, not in the HF names of `weights.full_tensors`).

The training forward's backward (`LoraMatmul`) gives x its gradient through W' and A, B theirs without forming
the (out, in) weight gradient a full fine-tune computes:

    dx = g W'          dB_j = s g_j^T (x A_j^T)          dA_j = s (g_j B_j)^T x        (g_j: part j's rows of g)

After every optimizer step `merge` writes W + s B A into W' in place (the engine's captured CUDA graphs stay
valid). Under FSDP2 the adapters are sharded like every parameter of their layer (so are their optimizer
states); `merge` all-gathers A and B (r x (in + out) each) and adds this rank's rows of s B A to its shard of W.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

from tailrl.errors import UserError
from tailrl.model import strict
from tailrl.model.layers import ColumnParallelLinear, RowParallelLinear

# a decoder layer's native linear -> (its parent in HF names, the Hugging Face modules it holds in row order)
NATIVE_PARTS = {
    "self_attn.qkv_proj": ("self_attn", ("q_proj", "k_proj", "v_proj")),
    "self_attn.o_proj": ("self_attn", ("o_proj",)),
    "mlp.gate_up_proj": ("mlp", ("gate_proj", "up_proj")),
    "mlp.down_proj": ("mlp", ("down_proj",)),
}
LINEAR_NAMES = tuple(n for _, names in NATIVE_PARTS.values() for n in names)  # PEFT's target_modules names
INITS = ("kaiming", "gaussian")


@dataclass(frozen=True)
class LoraSpec:
    """What an adapter is: rank, scale numerator, the HF modules it targets (in every layer), its init."""

    r: int
    alpha: float
    targets: tuple[str, ...]  # LINEAR_NAMES entries
    init: str = "kaiming"  # PEFT init_lora_weights=True (kaiming-uniform A, zero B) | gaussian (normal(0, 1/r) A)
    rslora: bool = False  # s = alpha / sqrt(r) (PEFT use_rslora)
    base_model: str = ""  # the base's name or folder, written to adapter_config.json

    @property
    def scale(self) -> float:
        return self.alpha / (math.sqrt(self.r) if self.rslora else self.r)


def resolve_targets(names) -> tuple[str, ...]:
    """PEFT target_modules (short names, or 'all-linear') -> LINEAR_NAMES entries in model order; unknown names
    are a UserError listing the model's linear names."""
    names = (names,) if isinstance(names, str) else tuple(names)
    if "all-linear" in names:
        return LINEAR_NAMES
    bad = [n for n in names if n not in LINEAR_NAMES]
    if bad or not names:
        raise UserError(f"unknown LoRA target module {bad[0] if bad else '(none)'!r}; the model's linear layers: "
                        f"{', '.join(LINEAR_NAMES)} (or all-linear)")
    return tuple(n for n in LINEAR_NAMES if n in names)


class Adapters(nn.Module):
    """One native linear's adapters: lora_A[name] (r, in) and lora_B[name] (rows, r) in fp32 per HF module, the
    rows of W' each one changes (`rows[name]` = (start, count)) and the scale s."""

    def __init__(self, rows: dict[str, tuple[int, int]], in_features: int, r: int, scale: float, device=None):
        super().__init__()
        self.rows, self.scale = rows, scale
        self.lora_A = nn.ParameterDict({n: nn.Parameter(torch.empty(r, in_features, device=device)) for n in rows})
        self.lora_B = nn.ParameterDict({n: nn.Parameter(torch.zeros(n_rows, r, device=device))
                                        for n, (_, n_rows) in rows.items()})

    def pairs(self) -> list[tuple[tuple[int, int], torch.Tensor, torch.Tensor]]:
        """[((start, count), A, B)] in row order."""
        return [(self.rows[n], self.lora_A[n], self.lora_B[n]) for n in self.rows]

    @torch.no_grad()
    def delta(self, out_features: int) -> torch.Tensor:
        """(out, in) fp32 s B A, zero in the rows of modules without an adapter (a collective under FSDP2: the
        sharded A and B are all-gathered)."""
        a0 = next(iter(self.lora_A.values()))
        d = torch.zeros(out_features, a0.shape[1], dtype=torch.float32, device=_local(a0).device)
        for (start, n), a, b in self.pairs():
            a, b = _full(a), _full(b)
            d[start:start + n] = self.scale * (b @ a)  # (n, r) @ (r, in)
        return d


class LoraMatmul(torch.autograd.Function):
    """y = linear(x, W', bias) exactly as the layer computes it (F.linear, or the strict kernel); backward: dx
    through W', dA and dB of every part from g's rows (no (out, in) weight gradient). x (..., in), W' (out, in);
    ab = A_0, B_0, A_1, B_1, ... with A_j (r, in), B_j (n_j, r) acting on rows[j] = (start_j, n_j) of W'."""

    @staticmethod
    def forward(ctx, x, weight, bias, strict_mode: bool, scale: float, rows: tuple, *ab):
        ctx.save_for_backward(x, weight, *ab)
        ctx.scale, ctx.rows = scale, rows
        return strict.linear(x, weight, bias) if strict_mode else F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, g):
        x, w, *ab = ctx.saved_tensors
        with torch.autocast(g.device.type, enabled=False):  # the adapters' gradients in fp32
            gx = (g @ w.to(g.dtype)).to(x.dtype) if ctx.needs_input_grad[0] else None  # (..., in)
            xf = x.reshape(-1, x.shape[-1]).float()  # (N, in)
            gf = g.reshape(-1, g.shape[-1]).float()  # (N, out)
            grads = []
            for (start, n), a, b in zip(ctx.rows, ab[0::2], ab[1::2]):
                gj = gf[:, start:start + n]  # (N, n)
                grads += [ctx.scale * (gj @ b).T @ xf, ctx.scale * gj.T @ (xf @ a.T)]  # dA (r, in), dB (n, r)
        return gx, None, None, None, None, None, *grads


def _lora_matmul(layer, x: torch.Tensor, bias) -> torch.Tensor | None:
    """The layer's matmul through LoraMatmul when an adapter wants a gradient, else None (the plain path: the
    engine under inference_mode, logprobs under no_grad)."""
    pairs = layer.lora.pairs()
    if not (torch.is_grad_enabled() and pairs[0][1].requires_grad):
        return None
    ab = [t for _, a, b in pairs for t in (a, b)]
    return LoraMatmul.apply(x, layer.weight, bias, layer.strict, layer.lora.scale, tuple(r for r, _, _ in pairs), *ab)


class LoraColumnParallelLinear(ColumnParallelLinear):
    """A ColumnParallelLinear whose weight is the merged W' and whose training matmul is LoraMatmul."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = _lora_matmul(self, x, self.bias)
        return super().forward(x) if y is None else y


class LoraRowParallelLinear(RowParallelLinear):
    """A RowParallelLinear (tp 1 while training) whose weight is the merged W'; the bias added after the matmul,
    as the layer does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = _lora_matmul(self, x, None)
        if y is None:
            return super().forward(x)
        return y + self.bias if self.bias is not None else y


_LORA_CLASS = {ColumnParallelLinear: LoraColumnParallelLinear, RowParallelLinear: LoraRowParallelLinear}


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


def _rows_of(linear, names: tuple[str, ...], wanted: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    sizes = linear.parts if isinstance(linear, ColumnParallelLinear) else [linear.weight.shape[0]]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return {n: (s, c) for n, s, c in zip(names, starts, sizes) if n in wanted}


@torch.no_grad()
def attach(model: nn.Module, spec: LoraSpec, dtype: torch.dtype | None = None, seed: int = 0) -> None:
    """Make `model` (a CausalLM, tp 1) a LoRA model in place: every parameter frozen (cast to `dtype` when given:
    the base in model.dtype), each targeted linear's class swapped for its Lora* subclass (its parameters, weight
    loaders and TP context kept; only the training matmul changes) with fp32 adapters (A initialised by
    spec.init from a generator seeded by `seed`, B zeros, so W' = W) and its base W kept beside it."""
    if model.tp.size != 1:
        raise ValueError("LoRA adapters are attached to the trained module (tp 1)")
    if spec.r < 1:
        raise UserError(f"LoRA rank r must be >= 1, got {spec.r}")
    if spec.init not in INITS:
        raise UserError(f"unknown LoRA init {spec.init!r}; valid: {', '.join(INITS)}")
    targets = resolve_targets(spec.targets)
    if dtype is not None:
        model.to(dtype)
    model.requires_grad_(False)
    g = torch.Generator().manual_seed(seed)
    for layer in model.layers:
        for native, (_, names) in NATIVE_PARTS.items():
            wanted = tuple(n for n in names if n in targets)
            if not wanted:
                continue
            linear = layer.get_submodule(native)
            w = linear.weight
            linear.__class__ = _LORA_CLASS[type(linear)]
            linear.lora = Adapters(_rows_of(linear, names, wanted), w.shape[1], spec.r, spec.scale, device=w.device)
            for a in linear.lora.lora_A.values():
                init = torch.empty(a.shape)
                if spec.init == "gaussian":
                    nn.init.normal_(init, std=1 / spec.r, generator=g)
                else:
                    nn.init.kaiming_uniform_(init, a=math.sqrt(5), generator=g)
                a.copy_(init)
            linear.lora_base = w.detach().clone()  # (out, in) model.dtype, frozen
    model.lora_spec = replace(spec, targets=targets)  # the names as PEFT writes them (all-linear expanded)


def lora_linears(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name, linear) of every linear carrying adapters, in module order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, (LoraColumnParallelLinear, LoraRowParallelLinear))]


def is_lora(model: nn.Module) -> bool:
    return getattr(model, "lora_spec", None) is not None


def adapter_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The trainable parameters of a LoRA model: every A and B."""
    return [p for _, m in lora_linears(model) for p in m.lora.parameters()]


def merged_weight_names(model: nn.Module) -> list[str]:
    """Parameter names of the merged weights (those `merge` rewrites)."""
    return [f"{n}.weight" for n, _ in lora_linears(model)]


@torch.no_grad()
def place_bases(model: nn.Module) -> None:
    """Put each base W where its merged weight lives: the same device, and under FSDP2 the same shard (the
    rows of this rank). Called once after the model is moved or fully_shard-ed."""
    for _, m in lora_linears(model):
        w = m.weight
        if isinstance(w, DTensor):
            if m.lora_base.shape != _local(w).shape or m.lora_base.device != _local(w).device:
                full = m.lora_base.to(_local(w).device)
                m.lora_base = distribute_tensor(full, w.device_mesh, w.placements, src_data_rank=None).to_local()
        else:
            m.lora_base = m.lora_base.to(w.device)


@torch.no_grad()
def merge(model: nn.Module) -> None:
    """W' = W + s B A for every adapted linear, written in place into its weight (fp32 sum, rounded once to the
    weight's dtype); under FSDP2 a collective (A and B gathered), each rank writing its shard."""
    for _, m in lora_linears(model):
        w = m.weight
        delta = m.lora.delta(w.shape[0])  # (out, in) fp32, full
        if isinstance(w, DTensor):
            delta = distribute_tensor(delta, w.device_mesh, w.placements, src_data_rank=None).to_local()
        _local(w).copy_(m.lora_base.float() + delta)


@torch.no_grad()
def merged_copy(model: nn.Module) -> dict[str, torch.Tensor]:
    """Brute force, for tests: every adapted linear's W + s B A computed from scratch, by parameter name."""
    out = {}
    for n, m in lora_linears(model):
        w = m.lora_base.float().clone()
        for (start, rows), a, b in m.lora.pairs():
            w[start:start + rows] += m.lora.scale * (b.float() @ a.float())
        out[f"{n}.weight"] = w.to(m.weight.dtype)
    return out
