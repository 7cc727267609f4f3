"""PEFT's format both ways, with PEFT itself as the oracle: an adapter tailrl saves, loaded by
peft.PeftModel.from_pretrained onto the Hugging Face base, gives tailrl's merged logits; an adapter PEFT made
(non-zero B) loads into tailrl with PEFT's logits. Bad adapters are one-line UserErrors."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from tailrl.config.sections import LoraConfig
from tailrl.errors import UserError
from tailrl.model.lora import LoraSpec, adapter_parameters, attach, lora_linears, merge
from tailrl.model.peft_format import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    adapter_state,
    check_base,
    load_adapter_state,
    peft_key,
    read_adapter,
    save_adapter,
)
from tailrl.train.policy import setup_lora
from tests.helpers import tiny_hf_config, tiny_native

peft = pytest.importorskip("peft")
IDS = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(0))


def _random_b(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, m in lora_linears(model):
            for b in m.lora.lora_B.values():
                b.copy_(torch.randn(b.shape, generator=g) * 0.05)
    merge(model)


@pytest.mark.parametrize("family,targets", [("llama_bias", ("all-linear",)), ("qwen2", ("q_proj", "v_proj")),
                                            ("qwen3", ("k_proj", "gate_proj", "down_proj"))])
def test_a_tailrl_adapter_loads_in_peft_with_the_same_logits(tmp_path, family, targets):
    native, hf = tiny_native(family)
    attach(native, LoraSpec(r=4, alpha=16.0, targets=targets, base_model="tiny"))
    _random_b(native)
    save_adapter(tmp_path / "ad", native.lora_spec, adapter_state(native))
    peft_model = peft.PeftModel.from_pretrained(hf, str(tmp_path / "ad")).eval()
    with torch.no_grad():
        want = peft_model(IDS).logits
        got = native(IDS)
    assert (got - want).abs().max() <= 1e-5
    wrapped = {n.split(".")[-1] for n, _ in peft_model.named_modules() if n.endswith("_proj") and
               hasattr(peft_model.get_submodule(n), "lora_A")}
    assert wrapped == set(native.lora_spec.targets)  # PEFT wrapped exactly the modules tailrl trained


@pytest.mark.parametrize("rslora", [False, True])
def test_a_peft_adapter_loads_in_tailrl_with_peft_logits(tmp_path, rslora):
    native, hf = tiny_native("llama_bias")
    cfg = peft.LoraConfig(r=4, lora_alpha=12, target_modules=["q_proj", "o_proj", "up_proj"], use_rslora=rslora,
                          init_lora_weights=False, task_type="CAUSAL_LM")  # False: B random, not zero
    peft_model = peft.get_peft_model(hf, cfg).eval()
    peft_model.save_pretrained(str(tmp_path / "ad"))
    with torch.no_grad():
        want = peft_model(IDS).logits
    assert setup_lora(native, LoraConfig(path=str(tmp_path / "ad")), torch.float32, 0, "tiny")
    assert native.lora_spec.targets == ("q_proj", "o_proj", "up_proj") and native.lora_spec.rslora == rslora
    assert torch.count_nonzero(lora_linears(native)[0][1].lora.lora_B["q_proj"]) > 0
    with torch.no_grad():
        assert (native(IDS) - want).abs().max() <= 1e-5
    # and back: what tailrl saves of it is what PEFT saved
    saved = load_file(str(tmp_path / "ad" / WEIGHTS_FILE))
    assert {k: torch.equal(v, saved[k]) for k, v in adapter_state(native).items()} == {k: True for k in saved}


def test_adapter_config_is_peft_readable(tmp_path):
    native = tiny_native("llama")[0]
    attach(native, LoraSpec(r=2, alpha=4.0, targets=("all-linear",), init="gaussian", base_model="org/tiny"))
    save_adapter(tmp_path, native.lora_spec, adapter_state(native))
    cfg = peft.LoraConfig.from_pretrained(str(tmp_path))
    assert (cfg.r, cfg.lora_alpha, cfg.init_lora_weights, cfg.base_model_name_or_path) == (2, 4.0, "gaussian", "org/tiny")
    assert set(cfg.target_modules) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert peft_key(3, "down_proj", "B") == "base_model.model.model.layers.3.mlp.down_proj.lora_B.weight"


def _adapter(tmp_path, **cfg_changes):
    native = tiny_native("llama")[0]
    attach(native, LoraSpec(r=4, alpha=8.0, targets=("q_proj", "v_proj")))
    folder = save_adapter(tmp_path / "ad", native.lora_spec, adapter_state(native))
    if cfg_changes:
        cfg = json.loads((folder / CONFIG_FILE).read_text()) | cfg_changes
        (folder / CONFIG_FILE).write_text(json.dumps(cfg))
    return folder


def test_an_adapter_for_another_base_is_one_line(tmp_path):
    folder = _adapter(tmp_path)
    wider = tiny_native("llama", hidden_size=32, head_dim=8)[0]
    with pytest.raises(UserError, match=r"does not match the base model: .*layers\.0\.self_attn\.q_proj\.lora_A"
                                        r"\.weight has shape \(4, 64\), the model expects \(4, 32\)"):
        setup_lora(wider, LoraConfig(path=str(folder)), torch.float32, 0, "tiny")
    deeper_adapter = tiny_native("llama", layers=3)[0]
    attach(deeper_adapter, LoraSpec(r=4, alpha=8.0, targets=("q_proj",)))
    spec = deeper_adapter.lora_spec
    with pytest.raises(UserError, match="layer 2 of 2"):
        check_base(spec, adapter_state(deeper_adapter), tiny_native("llama")[0], "ad")
    model = tiny_native("llama")[0]
    attach(model, LoraSpec(r=4, alpha=8.0, targets=("q_proj", "k_proj")))
    with pytest.raises(UserError, match="no base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight"):
        load_adapter_state(model, read_adapter(folder)[1])
    with pytest.warns(UserWarning, match="names base"):
        setup_lora(tiny_native("llama")[0], LoraConfig(path=str(_adapter(tmp_path / "named", base_model_name_or_path=
                                                                        "org/other"))), torch.float32, 0, "org/tiny")


@pytest.mark.parametrize("change,match", [({"use_dora": True}, "use_dora"), ({"peft_type": "IA3"}, "LORA only"),
                                          ({"bias": "all"}, "bias"), ({"rank_pattern": {"q_proj": 8}}, "rank_pattern"),
                                          ({"r": 8}, "r=8 but its tensors have rank")])
def test_unsupported_adapters_are_one_line(tmp_path, change, match):
    with pytest.raises(UserError, match=match):
        read_adapter(_adapter(tmp_path, **change))


def test_not_an_adapter_folder(tmp_path):
    with pytest.raises(UserError, match="is not a PEFT adapter folder"):
        read_adapter(tmp_path)
    folder = _adapter(tmp_path)
    tensors = load_file(str(folder / WEIGHTS_FILE))
    save_file(tensors | {"base_model.model.lm_head.lora_A.weight": torch.zeros(4, 64)}, str(folder / WEIGHTS_FILE))
    with pytest.raises(UserError, match="lm_head.lora_A.weight' is not a LoRA A/B of a decoder linear layer"):
        read_adapter(folder)


def test_hf_config_shapes_used_by_check_base():
    model = tiny_native("qwen3")[0]  # head_dim 16 != hidden / heads
    attach(model, LoraSpec(r=2, alpha=2.0, targets=("all-linear",)))
    check_base(model.lora_spec, adapter_state(model), model, "self")  # its own adapter always fits
    assert tiny_hf_config("qwen3")["head_dim"] == 16 and len(adapter_parameters(model)) == 28
