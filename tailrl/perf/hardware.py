"""What the simulator runs on: GPU and interconnect presets, and the served model's shape.

Numbers are vendor datasheet peaks (dense bf16 tensor FLOPs, HBM bandwidth, NVLink/PCIe bandwidth per
direction). How much of a peak an engine reaches is not a hardware fact; it lives in
`latency.EngineOverheads`, calibrated once against published measurements (docs/results.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tailrl.errors import UserError


@dataclass(frozen=True)
class GPU:
    name: str
    tflops: float  # dense bf16 tensor TFLOP/s
    hbm_tbps: float  # HBM bandwidth, TB/s
    hbm_gb: float  # memory, GB
    link_gbps: float  # intra-node GPU<->GPU bandwidth per direction, GB/s (NVLink, or PCIe without it)
    node_gpus: int = 8  # GPUs per node (TP stays inside a node)


GPUS: dict[str, GPU] = {
    # H100 SXM5: 989 TFLOP/s dense bf16, HBM3 3.35 TB/s, NVLink 4 at 900 GB/s both directions.
    "h100": GPU("h100", 989.0, 3.35, 80.0, 450.0),
    # H200 SXM: the H100 die with HBM3e 4.8 TB/s, 141 GB.
    "h200": GPU("h200", 989.0, 4.8, 141.0, 450.0),
    # A40: 149.7 TFLOP/s dense bf16, GDDR6 696 GB/s, 48 GB, PCIe Gen4 x16 (no NVSwitch).
    "a40": GPU("a40", 149.7, 0.696, 48.0, 32.0),
}


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's shape; enough for bytes and FLOPs per token."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    head_dim: int = 0  # 0: hidden // heads
    tied_embeddings: bool = False
    bytes_per_param: int = 2  # bf16

    @classmethod
    def of(cls, args, bytes_per_param: int = 2) -> ModelShape:
        """The shape of a native model's ModelArgs."""
        return cls(args.architecture, args.num_layers, args.hidden_size, args.num_heads, args.num_kv_heads,
                   args.intermediate_size, args.vocab_size, args.head_dim, args.tie_word_embeddings, bytes_per_param)

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def params(self) -> float:
        """Parameter count (norms ignored)."""
        attn = self.hidden * self.hd * (self.heads * 2 + self.kv_heads * 2)
        mlp = 3 * self.hidden * self.intermediate
        emb = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * (attn + mlp) + emb

    @property
    def weight_bytes(self) -> float:
        """Bytes read per decode forward: every weight but the embedding table (only rows are gathered)."""
        return (self.params - self.vocab * self.hidden * (0 if self.tied_embeddings else 1)) * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        return 2 * self.layers * self.kv_heads * self.hd * self.bytes_per_param

    def flops_per_token(self, context: float = 0.0) -> float:
        """Forward FLOPs for one token attending to `context` earlier tokens (2 * params + attention)."""
        return 2 * self.params + 4 * self.layers * self.heads * self.hd * context


MODELS: dict[str, ModelShape] = {
    "smollm2-135m": ModelShape("smollm2-135m", 30, 576, 9, 3, 1536, 49152, tied_embeddings=True),
    "llama3.1-8b": ModelShape("llama3.1-8b", 32, 4096, 32, 8, 14336, 128256),
    "llama3.1-70b": ModelShape("llama3.1-70b", 80, 8192, 64, 8, 28672, 128256),
    "qwen2.5-0.5b": ModelShape("qwen2.5-0.5b", 24, 896, 14, 2, 4864, 151936, tied_embeddings=True),
    "qwen2.5-1.5b": ModelShape("qwen2.5-1.5b", 28, 1536, 12, 2, 8960, 151936, tied_embeddings=True),
    "qwen2.5-3b": ModelShape("qwen2.5-3b", 36, 2048, 16, 2, 11008, 151936, tied_embeddings=True),
    "qwen2.5-7b": ModelShape("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064),
    "qwen2.5-14b": ModelShape("qwen2.5-14b", 48, 5120, 40, 8, 13824, 152064),
    "qwen2.5-32b": ModelShape("qwen2.5-32b", 64, 5120, 40, 8, 27648, 152064),
    "qwen3-14b": ModelShape("qwen3-14b", 40, 5120, 40, 8, 17408, 151936, head_dim=128),
}


def gpu(name: str) -> GPU:
    if name not in GPUS:
        raise UserError(f"unknown GPU '{name}'; presets: {', '.join(GPUS)}")
    return GPUS[name]


def model_spec(name: str) -> ModelShape:
    """A preset name, or a Hugging Face config.json (file or folder)."""
    if name in MODELS:
        return MODELS[name]
    p = Path(name)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise UserError(f"unknown model '{name}'; presets: {', '.join(MODELS)}, or a folder with config.json")
    c = json.loads(p.read_text())
    try:
        return ModelShape(p.parent.name or name, c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"],
                         c.get("num_key_value_heads", c["num_attention_heads"]), c["intermediate_size"],
                         c["vocab_size"], c.get("head_dim") or 0, bool(c.get("tie_word_embeddings", False)))
    except KeyError as e:
        raise UserError(f"{p}: config.json lacks {e.args[0]}") from None
