"""ModelArgs: the architecture facts the native decoder needs, read from a Hugging Face config.json.

One decoder covers the Llama family; the differences are flags here, not subclasses:
Llama (optional llama3 rope scaling), Qwen2 (q/k/v bias), Qwen3 (q/k RMSNorm), Mistral (sliding window).
"""

from __future__ import annotations

from dataclasses import dataclass

from tailrl.errors import UserError

# architecture name in config.json -> family defaults that config.json may not spell out
ARCHITECTURES: dict[str, dict] = {
    "LlamaForCausalLM": {"qkv_bias": None, "qk_norm": False},
    "MistralForCausalLM": {"qkv_bias": None, "qk_norm": False},
    "Qwen2ForCausalLM": {"qkv_bias": True, "qk_norm": False},
    "Qwen3ForCausalLM": {"qkv_bias": None, "qk_norm": True},
}


@dataclass(frozen=True)
class ModelArgs:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None  # e.g. {"rope_type": "llama3", "factor": 8.0, ...}
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool  # bias on q/k/v projections (Qwen2; Llama's attention_bias)
    o_bias: bool  # bias on the output projection (Llama's attention_bias)
    mlp_bias: bool
    qk_norm: bool  # per-head RMSNorm on q and k before rope (Qwen3)
    sliding_window: int | None  # Mistral / Qwen2 with use_sliding_window
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    @classmethod
    def from_hf(cls, cfg: dict) -> ModelArgs:
        archs = cfg.get("architectures") or []
        arch = next((a for a in archs if a in ARCHITECTURES), None)
        if arch is None:
            got = ", ".join(archs) or f"model_type={cfg.get('model_type')!r}"
            raise UserError(f"unsupported architecture {got}; supported: {', '.join(ARCHITECTURES)}")
        fam = ARCHITECTURES[arch]
        heads = cfg["num_attention_heads"]
        hidden = cfg["hidden_size"]
        head_dim = cfg.get("head_dim") or hidden // heads
        attention_bias = bool(cfg.get("attention_bias", False))
        qkv_bias = fam["qkv_bias"] if fam["qkv_bias"] is not None else attention_bias
        # transformers >= 5 moved rope_theta / rope_scaling into `rope_parameters`
        rope = dict(cfg.get("rope_parameters") or {})
        scaling = cfg.get("rope_scaling") or None
        if scaling is None and rope.get("rope_type", "default") != "default":
            scaling = rope
        if scaling is not None:
            rtype = scaling.get("rope_type", scaling.get("type", "default"))
            if rtype == "default":
                scaling = None
            elif rtype != "llama3":
                raise UserError(f"unsupported rope scaling {rtype!r}; supported: llama3")
        theta = cfg.get("rope_theta", rope.get("rope_theta", 10000.0))
        sliding = cfg.get("sliding_window")
        if arch == "Qwen2ForCausalLM" and not cfg.get("use_sliding_window", False):
            sliding = None
        if arch in ("LlamaForCausalLM", "Qwen3ForCausalLM") and not cfg.get("use_sliding_window", False):
            sliding = None
        eos = cfg.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else ((eos,) if eos is not None else ())
        return cls(
            architecture=arch,
            vocab_size=cfg["vocab_size"],
            hidden_size=hidden,
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=head_dim,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            rope_theta=float(theta),
            rope_scaling=scaling,
            max_position_embeddings=cfg.get("max_position_embeddings", 4096),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=qkv_bias,
            o_bias=attention_bias and arch != "Qwen2ForCausalLM",
            mlp_bias=bool(cfg.get("mlp_bias", False)),
            qk_norm=fam["qk_norm"],
            sliding_window=sliding,
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=eos_ids,
        )
