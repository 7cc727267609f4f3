"""Loading HF folders: single/sharded safetensors, .bin via transformers, saving back, errors."""

import json

import pytest
import torch

from tailrl.errors import UserError
from tailrl.model import hf_state_dict, load, save_hf
from tests.helpers import make_hf_model, make_model_dir, tiny_hf_config


def _logits(model, ids):
    with torch.no_grad():
        return model(ids)


def test_load_folder_matches_oracle(tmp_path):
    folder = make_model_dir(tmp_path / "m", "qwen3")
    model, tok = load(folder)
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    ids = torch.tensor([tok("hello there")["input_ids"]])
    assert (_logits(model, ids) - hf(ids).logits).abs().max() <= 1e-4


def test_sharded_and_bin_and_roundtrip(tmp_path):
    cfg = tiny_hf_config("llama", vocab=120)
    hf = make_hf_model(cfg)
    ids = torch.randint(0, 120, (1, 10))
    ref = hf(ids).logits.detach()
    hf.save_pretrained(str(tmp_path / "sharded"), max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    m, _ = load(tmp_path / "sharded", tokenizer=False)
    assert (_logits(m, ids) - ref).abs().max() <= 1e-4
    hf.save_pretrained(str(tmp_path / "bin"), safe_serialization=False)
    if any((tmp_path / "bin").glob("*.bin")):
        m2, _ = load(tmp_path / "bin", tokenizer=False)
        assert (_logits(m2, ids) - ref).abs().max() <= 1e-4
    save_hf(m, tmp_path / "resaved")
    m3, _ = load(tmp_path / "resaved", tokenizer=False)
    assert (_logits(m3, ids) - ref).abs().max() <= 1e-4
    sd = hf_state_dict(m)
    assert set(sd) == set(hf.state_dict()) - {"lm_head.weight"} | ({"lm_head.weight"} if not cfg["tie_word_embeddings"] else set())


def test_errors(tmp_path):
    with pytest.raises(UserError, match="model folder not found"):
        load(tmp_path / "none")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no config.json"):
        load(tmp_path / "empty")
    folder = make_model_dir(tmp_path / "m")
    (folder / "model.safetensors").unlink()
    with pytest.raises(UserError, match="no weight files"):
        load(folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["architectures"] = ["FalconForCausalLM"]
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UserError, match="unsupported architecture FalconForCausalLM"):
        load(folder)


def test_bf16_load(tmp_path):
    folder = make_model_dir(tmp_path / "m", "mistral")
    model, _ = load(folder, dtype="bfloat16", tokenizer=False)
    assert next(model.parameters()).dtype == torch.bfloat16
    with pytest.raises(UserError, match="unknown dtype"):
        load(folder, dtype="int3")
