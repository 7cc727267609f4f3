"""LoRA adapters in PEFT's format, read and written without PEFT:

    ADAPTER/adapter_config.json         peft_type LORA, r, lora_alpha, target_modules, ... (PEFT's LoraConfig)
    ADAPTER/adapter_model.safetensors   base_model.model.model.layers.{i}.{self_attn|mlp}.{q_proj|...}.lora_A.weight
                                        (r, in) and .lora_B.weight (out, r), fp32

so `peft.PeftModel.from_pretrained(hf_base, ADAPTER)` loads what tailrl trains, and model.lora.path continues from
what PEFT made. Which modules an adapter covers is read from its tensors' names (PEFT writes target_modules as
short names, full module names or a regex); the shapes are checked against the model (a mismatch names the
tensor and both shapes). What tailrl cannot run exactly is refused in one line: DoRA, rank / alpha patterns,
trained biases or extra modules, adapters on some layers only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch.distributed.tensor import DTensor, distribute_tensor

from tailrl.errors import UserError
from tailrl.model.lora import NATIVE_PARTS, LoraSpec, lora_linears, merge

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
_KEY = re.compile(r"^base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.lora_(A|B)\.weight$")
_NATIVE_OF = {name: native for native, (_, names) in NATIVE_PARTS.items() for name in names}


def peft_key(layer: int, name: str, which: str) -> str:
    """(3, 'q_proj', 'A') -> 'base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight'."""
    parent = NATIVE_PARTS[_NATIVE_OF[name]][0]
    return f"base_model.model.model.layers.{layer}.{parent}.{name}.lora_{which}.weight"


def _named_adapters(model):
    """(layer index, HF name, A, B) of every adapter, in module order."""
    for mod_name, m in lora_linears(model):
        layer = int(mod_name.split(".")[1])  # 'layers.3.self_attn.qkv_proj'
        for name in m.lora.rows:
            yield layer, name, m.lora.lora_A[name], m.lora.lora_B[name]


@torch.no_grad()
def adapter_state(model, main: bool = True) -> dict[str, torch.Tensor]:
    """Every A and B under PEFT's names, full fp32 tensors on the CPU (a collective under FSDP2: every rank
    calls it; only `main` gets the tensors, the others {})."""
    out = {}
    for layer, name, a, b in _named_adapters(model):
        a, b = (t.full_tensor() if isinstance(t, DTensor) else t for t in (a, b))
        if main:
            out[peft_key(layer, name, "A")] = a.detach().float().cpu().contiguous()
            out[peft_key(layer, name, "B")] = b.detach().float().cpu().contiguous()
    return out


def adapter_config(spec: LoraSpec) -> dict:
    """PEFT's LoraConfig fields for this adapter (the ones PEFT >= 0.11 reads; the rest keep its defaults)."""
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": spec.base_model or None,
            "revision": None, "r": spec.r, "lora_alpha": spec.alpha, "lora_dropout": 0.0,
            "target_modules": list(spec.targets), "bias": "none", "fan_in_fan_out": False, "inference_mode": True,
            "init_lora_weights": True if spec.init == "kaiming" else "gaussian", "use_rslora": spec.rslora,
            "use_dora": False, "modules_to_save": None, "layers_to_transform": None, "layers_pattern": None,
            "rank_pattern": {}, "alpha_pattern": {}}


def save_adapter(folder: str | Path, spec: LoraSpec, tensors: dict[str, torch.Tensor]) -> Path:
    """Write a PEFT adapter folder from adapter_state's tensors."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / WEIGHTS_FILE), metadata={"format": "pt"})
    (folder / CONFIG_FILE).write_text(json.dumps(adapter_config(spec), indent=2))
    return folder


def read_adapter(folder: str | Path) -> tuple[LoraSpec, dict[str, torch.Tensor]]:
    """A PEFT LoRA adapter folder -> (its spec, its tensors); UserError for what is not one or not supported."""
    folder = Path(folder)
    cfg_file, weights = folder / CONFIG_FILE, folder / WEIGHTS_FILE
    if not cfg_file.is_file() or not weights.is_file():
        raise UserError(f"{folder} is not a PEFT adapter folder (expected {CONFIG_FILE} and {WEIGHTS_FILE})")
    try:
        cfg = json.loads(cfg_file.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{cfg_file} is not valid JSON: {e}") from e
    if cfg.get("peft_type", "LORA") != "LORA":
        raise UserError(f"{folder}: peft_type {cfg.get('peft_type')!r} is not supported (LORA only)")
    unsupported = [k for k, ok in (("use_dora", not cfg.get("use_dora")), ("rank_pattern", not cfg.get("rank_pattern")),
                                   ("alpha_pattern", not cfg.get("alpha_pattern")),
                                   ("modules_to_save", not cfg.get("modules_to_save")),
                                   ("bias", cfg.get("bias", "none") == "none"), ("lora_bias", not cfg.get("lora_bias")),
                                   ("fan_in_fan_out", not cfg.get("fan_in_fan_out"))) if not ok]
    if unsupported:
        raise UserError(f"{folder}: adapter setting {unsupported[0]}={cfg.get(unsupported[0])!r} is not supported")
    tensors = load_file(str(weights))
    covered: dict[str, set[int]] = {}
    ranks = set()
    for key, t in tensors.items():
        m = _KEY.match(key.replace(".default.", "."))
        if m is None or m.group(3) not in _NATIVE_OF or NATIVE_PARTS[_NATIVE_OF[m.group(3)]][0] != m.group(2):
            raise UserError(f"{folder}: adapter tensor {key!r} is not a LoRA A/B of a decoder linear layer")
        covered.setdefault(m.group(3), set()).add(int(m.group(1)))
        ranks.add(t.shape[0] if m.group(4) == "A" else t.shape[1])
    if not tensors:
        raise UserError(f"{folder}: {WEIGHTS_FILE} holds no tensors")
    layers = set().union(*covered.values())
    partial = [n for n, got in covered.items() if got != layers]
    if partial:
        raise UserError(f"{folder}: module {partial[0]} has adapters on some layers only (not supported)")
    r = int(cfg.get("r", 8))
    if ranks != {r}:
        raise UserError(f"{folder}: adapter_config.json says r={r} but its tensors have rank {sorted(ranks)}")
    init = cfg.get("init_lora_weights", True)
    spec = LoraSpec(r=r, alpha=float(cfg.get("lora_alpha", 8)), targets=tuple(n for n in _NATIVE_OF if n in covered),
                    init="gaussian" if init == "gaussian" else "kaiming", rslora=bool(cfg.get("use_rslora")),
                    base_model=cfg.get("base_model_name_or_path") or "")
    return spec, {k.replace(".default.", "."): v for k, v in tensors.items()}


@torch.no_grad()
def load_adapter_state(model, tensors: dict[str, torch.Tensor], where: str = "adapter") -> None:
    """Copy PEFT-named A / B tensors into the model's adapters (every one must be there, with its shape; under
    FSDP2 each rank keeps its shard), then merge. A mismatch is a UserError naming the tensor."""
    n_layers = len(model.layers)
    extra = [k for k in tensors if (m := _KEY.match(k)) and int(m.group(1)) >= n_layers]
    if extra:
        raise UserError(f"{where} does not match the base model: {extra[0]} but the model has {n_layers} layers")
    for layer, name, a, b in _named_adapters(model):
        for which, p in (("A", a), ("B", b)):
            key = peft_key(layer, name, which)
            if key not in tensors:
                raise UserError(f"{where} does not match the model's adapters: no {key}")
            t = tensors[key]
            if tuple(t.shape) != tuple(p.shape):
                raise UserError(f"{where} does not match the base model: {key} has shape {tuple(t.shape)}, the "
                                f"model's is {tuple(p.shape)}")
            full = t.to(dtype=p.dtype, device=p.to_local().device if isinstance(p, DTensor) else p.device)
            if isinstance(p, DTensor):
                p.to_local().copy_(distribute_tensor(full, p.device_mesh, p.placements, src_data_rank=None).to_local())
            else:
                p.copy_(full)
    merge(model)


def check_base(spec: LoraSpec, tensors: dict[str, torch.Tensor], model, where: str) -> None:
    """The adapter's shapes against the model before attaching: in (A's columns) and out (B's rows) of every
    module, and the layer count."""
    args = model.args
    q, kv = args.num_heads * args.head_dim, args.num_kv_heads * args.head_dim
    h, i = args.hidden_size, args.intermediate_size
    shapes = {"q_proj": (q, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, q), "gate_proj": (i, h),
              "up_proj": (i, h), "down_proj": (h, i)}
    for key, t in tensors.items():
        m = _KEY.match(key)
        layer, name, which = int(m.group(1)), m.group(3), m.group(4)
        out, inp = shapes[name]
        want = (spec.r, inp) if which == "A" else (out, spec.r)
        if layer >= args.num_layers or tuple(t.shape) != want:
            got = f"layer {layer} of {args.num_layers}" if layer >= args.num_layers else f"shape {tuple(t.shape)}"
            raise UserError(f"{where} does not match the base model: {key} has {got}, the model expects "
                            f"{want if layer < args.num_layers else f'{args.num_layers} layers'}")
