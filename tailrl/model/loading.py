"""Load a Hugging Face checkpoint into the native decoder: `load(path) -> (model, tokenizer)`.

Native path: a local folder with config.json + safetensors (single file or sharded with an index).
Fallback: GGUF files and legacy .bin weights are read by transformers (safe loading: GGUF is
dequantised, .bin goes through torch.load with weights_only) and their tensors routed through the same
`load_weights`. Known names (e.g. "smollm2-135m-instruct") resolve through `tailrl.model.hub`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from tailrl.errors import UserError
from tailrl.model.args import ModelArgs
from tailrl.model.decoder import CausalLM
from tailrl.model.hub import resolve
from tailrl.model.weights import hf_state_dict, load_weights

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def resolve_dtype(dtype: str | torch.dtype, device: str | torch.device = "cpu") -> torch.dtype:
    """model.dtype -> a torch dtype; auto is bfloat16 on CUDA (the fast kernels' dtype), float32 elsewhere."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    if dtype not in DTYPES:
        raise UserError(f"unknown dtype '{dtype}'; valid: {', '.join(DTYPES)}")
    return DTYPES[dtype]


def resolve_device(device: str) -> str:
    """model.device -> a torch device string: auto is CUDA when available, else the CPU; asking for CUDA on a
    machine without it is the user's error (one line), not a torch assertion."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"model.device is '{device}' but this machine has no CUDA device (torch "
                        f"{torch.__version__}); use model.device=auto or cpu")
    if device.split(":")[0] not in ("cpu", "cuda", "mps", "xpu"):
        raise UserError(f"unknown model.device '{device}'; valid: auto, cpu, cuda, cuda:N")
    return device


def read_config(folder: Path) -> dict:
    cfg_file = folder / "config.json"
    if not cfg_file.is_file():
        raise UserError(f"no config.json in {folder} (expected a Hugging Face model folder)")
    try:
        return json.loads(cfg_file.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{cfg_file} is not valid JSON: {e}") from e


def _safetensor_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        files = [folder / s for s in shards]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise UserError(f"missing weight shard {missing[0]} listed in {index.name} in {folder}")
        return files
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    return sorted(folder.glob("*.safetensors"))


def iter_safetensors(files: list[Path]):
    for f in files:
        with safe_open(str(f), framework="pt") as st:
            for name in st.keys():
                yield name, st.get_tensor(name)


def _transformers_tensors(folder: Path, gguf_file: str | None):
    """Tensors of a checkpoint transformers can read but we do not parse ourselves (GGUF, .bin)."""
    # lazy: transformers takes seconds to import; only tokenizers and HF checkpoints need it
    from transformers import AutoModelForCausalLM

    kwargs = {"dtype": torch.float32}
    if gguf_file is not None:
        kwargs["gguf_file"] = gguf_file
    else:
        kwargs["use_safetensors"] = False  # legacy .bin: torch.load(weights_only=True) inside transformers
    hf = AutoModelForCausalLM.from_pretrained(str(folder), **kwargs)
    cfg = hf.config.to_dict()
    if not cfg.get("architectures"):  # configs derived from GGUF metadata carry no `architectures`
        cfg["architectures"] = [type(hf).__name__]
    return cfg, list(hf.state_dict().items())


def cache_dir() -> Path:
    return Path(os.environ.get("TAILRL_CACHE", Path.home() / ".cache" / "tailrl"))


def _converted_gguf(folder: Path, gguf_file: str) -> Path:
    """Dequantise a GGUF once through transformers and keep it as a plain HF folder in the cache."""
    src = folder / gguf_file
    out = cache_dir() / "converted" / f"{src.stem}-{src.stat().st_size}"
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    hf_cfg, tensors = _transformers_tensors(folder, gguf_file)
    model = build_model(ModelArgs.from_hf(hf_cfg), torch.float32)
    load_weights(model, tensors)
    tmp = out.with_name(out.name + ".tmp")
    tok = load_tokenizer(folder, gguf_file)
    hf_cfg = {k: v for k, v in hf_cfg.items() if k != "quantization_config"}
    hf_cfg["architectures"] = [model.args.architecture]
    save_hf(model, tmp, tokenizer=tok, hf_config=hf_cfg)
    tmp.replace(out) if not out.exists() else None
    return out


def hf_folder(ref: str | Path) -> Path:
    """A plain Hugging Face folder for a model reference (a known name or a GGUF is converted once and
    cached), for tools that need one (e.g. TRL in `tailrl bench e2e`)."""

    folder, gguf_file = resolve(str(ref), None)
    return _converted_gguf(folder, gguf_file) if gguf_file is not None else folder


def load_tokenizer(folder: str | Path, gguf_file: str | None = None):
    # lazy: transformers takes seconds to import; only tokenizers and HF checkpoints need it
    from transformers import AutoTokenizer

    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    return AutoTokenizer.from_pretrained(str(folder), **kwargs)


def build_model(args: ModelArgs, dtype=torch.float32, device="cpu") -> CausalLM:
    with torch.device(resolve_device(device)):
        model = CausalLM(args)
    return model.to(dtype=resolve_dtype(dtype))


@torch.no_grad()
def clone_model(model: CausalLM, dtype=None, device=None) -> CausalLM:
    """A new model with `model`'s weights (in `dtype`, default the same) on `device` (default the same).
    Unlike copy.deepcopy it keeps what the constructor attaches to parameters (the weight loaders)."""
    src = dict(model.named_parameters())
    p = next(iter(src.values()))
    new = build_model(model.args, dtype or p.dtype, str(device or p.device))
    for name, q in new.named_parameters():
        q.copy_(src[name])
    return new.train(model.training)


def load(path: str | Path, dtype: str | torch.dtype = "float32", device: str = "auto", gguf_file: str | None = None,
         tokenizer: bool = True):
    """Load a checkpoint as (native model in eval mode, HF tokenizer or None); device: auto | cpu | cuda[:N]."""
    device = resolve_device(device)
    folder, gguf_file = resolve(str(path), gguf_file)
    dt = resolve_dtype(dtype, device)
    if gguf_file is not None:
        folder, gguf_file = _converted_gguf(folder, gguf_file), None
    if not _safetensor_files(folder):
        ModelArgs.from_hf(read_config(folder))  # missing config / unsupported architecture first
        if not any(folder.glob("pytorch_model*.bin")):
            raise UserError(f"no weight files in {folder} (expected model.safetensors, sharded safetensors with "
                            "an index, pytorch_model.bin, or a .gguf file)")
        hf_cfg, tensors = _transformers_tensors(folder, None)
        args = ModelArgs.from_hf(hf_cfg)
    else:
        args = ModelArgs.from_hf(read_config(folder))
        tensors = iter_safetensors(_safetensor_files(folder))
    model = build_model(args, dt, device)
    load_weights(model, tensors)
    model.eval()
    tok = load_tokenizer(folder, gguf_file) if tokenizer else None
    return model, tok


def save_hf(model: CausalLM, folder: str | Path, tokenizer=None, hf_config: dict | None = None) -> Path:
    """Save as a plain Hugging Face folder (config.json + model.safetensors [+ tokenizer files])."""

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    sd = hf_state_dict(model)
    if model.args.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    save_file({k: v.contiguous().cpu() for k, v in sd.items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(hf_config or args_to_hf_config(model.args), indent=2))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))
    return folder


def args_to_hf_config(a: ModelArgs) -> dict:
    """A config.json transformers understands for these args."""
    model_type = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
                  "Qwen3ForCausalLM": "qwen3"}[a.architecture]
    cfg = {
        "architectures": [a.architecture], "model_type": model_type, "vocab_size": a.vocab_size,
        "hidden_size": a.hidden_size, "intermediate_size": a.intermediate_size, "num_hidden_layers": a.num_layers,
        "num_attention_heads": a.num_heads, "num_key_value_heads": a.num_kv_heads, "head_dim": a.head_dim,
        "rms_norm_eps": a.rms_norm_eps, "rope_theta": a.rope_theta, "max_position_embeddings": a.max_position_embeddings,
        "tie_word_embeddings": a.tie_word_embeddings, "attention_bias": a.qkv_bias if model_type != "qwen2" else False,
        "mlp_bias": a.mlp_bias, "hidden_act": "silu", "torch_dtype": "float32",
    }
    if a.rope_scaling:
        cfg["rope_scaling"] = dict(a.rope_scaling)
    if a.sliding_window:
        cfg["sliding_window"] = a.sliding_window
        cfg["use_sliding_window"] = True
    if a.bos_token_id is not None:
        cfg["bos_token_id"] = a.bos_token_id
    if a.eos_token_ids:
        cfg["eos_token_id"] = a.eos_token_ids[0] if len(a.eos_token_ids) == 1 else list(a.eos_token_ids)
    return cfg
