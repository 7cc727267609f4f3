"""Tiny random models and tokenizers for tests (no network, no ../shared)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

# Run the model/engine oracle tests on a GPU with TAILRL_TEST_DEVICE=cuda (CPU by default).
DEVICE = os.environ.get("TAILRL_TEST_DEVICE", "cpu")

FAMILIES = {
    "llama": dict(architectures=["LlamaForCausalLM"], model_type="llama"),
    "llama3_rope": dict(architectures=["LlamaForCausalLM"], model_type="llama",
                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    "llama_bias": dict(architectures=["LlamaForCausalLM"], model_type="llama", attention_bias=True, mlp_bias=True),
    "qwen2": dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2"),
    "qwen3": dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=16),
    "mistral": dict(architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=None),
}


def tiny_hf_config(family: str = "llama", tied: bool = False, vocab: int = 97, layers: int = 2, **kw) -> dict:
    cfg = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-6,
               rope_theta=10000.0, tie_word_embeddings=tied, hidden_act="silu", bos_token_id=1, eos_token_id=2,
               torch_dtype="float32")
    cfg.update(FAMILIES[family])
    cfg.update(kw)
    return cfg


def make_hf_model(cfg: dict, seed: int = 0):
    """A random-init transformers model (the oracle) for a config dict."""
    from transformers import AutoConfig, AutoModelForCausalLM

    conf = AutoConfig.for_model(cfg["model_type"], **{k: v for k, v in cfg.items() if k != "model_type"})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(conf, attn_implementation="eager", dtype=torch.float32)
    with torch.no_grad():  # HF zero-inits some biases; make them matter
        for n, p in model.named_parameters():
            if n.endswith("bias") or "norm" in n:
                p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def save_hf_folder(model, folder: Path) -> Path:
    model.save_pretrained(str(folder), safe_serialization=True)
    return folder


def tiny_native(family: str = "llama", tied: bool = False, seed: int = 0, **kw):
    """A native model with the same weights as the HF oracle: (native, hf)."""
    from tailrl.model import ModelArgs, build_model, load_weights

    cfg = tiny_hf_config(family, tied, **kw)
    hf = make_hf_model(cfg, seed)
    native = build_model(ModelArgs.from_hf(cfg), device=DEVICE)
    load_weights(native, hf.state_dict().items())
    return native.eval(), hf.to(DEVICE)


def write_json(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj))
    return path


CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def make_char_tokenizer():
    """A character-level HF fast tokenizer (printable ASCII + specials) with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]
    chars = [chr(c) for c in range(32, 127)] + ["\n"]
    vocab = {t: i for i, t in enumerate(specials + chars)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="?"))
    tk.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                  additional_special_tokens=specials[3:])
    tok.chat_template = CHAT_TEMPLATE
    return tok


def make_model_dir(folder: Path, family: str = "llama", seed: int = 0, **kw) -> Path:
    """A complete tiny HF model folder (config, safetensors, tokenizer) with a real vocabulary."""
    tok = make_char_tokenizer()
    cfg = tiny_hf_config(family, vocab=len(tok), **kw)
    cfg["eos_token_id"], cfg["bos_token_id"] = tok.eos_token_id, tok.bos_token_id
    model = make_hf_model(cfg, seed)
    model.save_pretrained(str(folder), safe_serialization=True)
    tok.save_pretrained(str(folder))
    return folder
