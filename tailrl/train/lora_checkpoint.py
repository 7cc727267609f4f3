"""A LoRA run's checkpoint as the policy its engine ran: the base of the run's model.path with the checkpoint's
adapter attached and merged, W + (alpha / r) B A in the run's dtype, bit for bit the weights the engine
decoded with. `tailrl export --merge` saves it; `tailrl eval --model RUN_DIR` evaluates it directly."""

from __future__ import annotations

import json
from pathlib import Path

from tailrl.config import load_config
from tailrl.model import load
from tailrl.model.loading import resolve_dtype
from tailrl.model.lora import attach
from tailrl.model.peft_format import check_base, load_adapter_state, read_adapter


def is_lora_checkpoint(ckpt: Path) -> bool:
    """A LoRA run's checkpoint holds adapter/ (a full fine-tune's holds the merged HF folder, model/)."""
    return (Path(ckpt) / "adapter").is_dir()


def merged_policy(run_dir: Path, ckpt: Path):
    """(model on the CPU with its adapter merged, tokenizer, the base's HF config) of a LoRA checkpoint of the
    run in run_dir (its config.yaml names the base)."""
    cfg = load_config(Path(run_dir) / "config.yaml")
    hf_config = json.loads((Path(ckpt) / "base_config.json").read_text())
    spec, tensors = read_adapter(Path(ckpt) / "adapter")
    model, tok = load(cfg.model.path, dtype="float32", device="cpu")  # as the trainer loads it, then cast
    where = f"the adapter of {ckpt}"
    check_base(spec, tensors, model, where)
    attach(model, spec, resolve_dtype(hf_config.get("torch_dtype", "float32")))
    load_adapter_state(model, tensors, where)  # merged as the trainer merges: the engine's weights, bit for bit
    return model, tok, hf_config
