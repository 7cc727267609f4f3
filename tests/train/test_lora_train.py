"""LoRA training runs on the tiny model (CPU): only the adapters move and the engine runs the merged weights
(brute force), the rollout-vs-trainer logprob gap is fast mode's (0 in strict mode), checkpoints are PEFT
adapters that resume exactly and that model.lora.path continues from, `tailrl export` writes the adapter or
the merged model, and bad input is one line with exit 2."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from tailrl.cli import main
from tailrl.config import load_config
from tailrl.model import load
from tailrl.model.lora import lora_linears, merged_copy
from tailrl.model.peft_format import CONFIG_FILE, WEIGHTS_FILE
from tailrl.train.trainer import Trainer
from tests.helpers import base_overrides, write_config

LORA = {"model.lora.r": 4, "model.lora.alpha": 8, "model.lora.target_modules": "all-linear", "train.lr": 1e-2,
        "train.tensorboard": "false"}


def _trainer(model_dir, data, run, resume=False, **extra):
    return Trainer(load_config(None, base_overrides(model_dir, data, run, **LORA | extra)), run, resume=resume)


def test_a_lora_run_trains_the_adapters_on_the_engines_weights(tiny_model_dir, arith_data, tmp_path):
    t = _trainer(tiny_model_dir, arith_data, tmp_path / "run", **{"train.total_steps": 2})
    base, _ = load(tiny_model_dir, device="cpu", tokenizer=False)
    assert t.policy.shared and t.engine.model is t.model  # one module: the engine decodes the trained weights
    hist = t.fit()
    merged = merged_copy(t.model)
    for name, p in t.model.named_parameters():
        if ".lora." in name:
            continue
        if name in merged:  # the merged weight W + s B A, moved; its base W did not
            assert torch.equal(p, merged[name]) and not torch.equal(p, base.get_parameter(name)), name
            assert torch.equal(t.model.get_submodule(name[:-7]).lora_base, base.get_parameter(name))
        else:  # embeddings, norms: frozen
            assert torch.equal(p, base.get_parameter(name)), name
    for m in hist:
        assert 0 <= m["rollout/logprob_diff_max"] < 1e-4  # fast mode's gap, as without LoRA
        assert m["perf/optimizer_state_gb"] * 2 ** 30 == 2 * 4 * m["perf/trainable_params"]  # AdamW: 2 fp32 moments
        assert m["perf/rss_gb"] > 0 and m["perf/max_rss_gb"] >= m["perf/rss_gb"]
    n_adapter = sum(a.numel() + b.numel() for _, m in lora_linears(t.model) for _, a, b in m.lora.pairs())
    assert hist[0]["perf/trainable_params"] == n_adapter
    ckpt = tmp_path / "run" / "checkpoints" / "step-000002"
    assert sorted(p.name for p in ckpt.iterdir()) == ["adapter", "base_config.json", "optimizer.pt", "rng-rank0.pt",
                                                      "state.json"]
    cfg = json.loads((ckpt / "adapter" / CONFIG_FILE).read_text())
    assert (cfg["r"], cfg["lora_alpha"], cfg["base_model_name_or_path"]) == (4, 8.0, str(tiny_model_dir))
    assert len(load_file(str(ckpt / "adapter" / WEIGHTS_FILE))) == 2 * 7 * 2  # A, B x 7 modules x 2 layers


@pytest.mark.slow  # > 5 s: two runs
def test_lora_keeps_far_less_optimizer_state(tiny_model_dir, arith_data, tmp_path):
    full = Trainer(load_config(None, base_overrides(tiny_model_dir, arith_data, tmp_path / "f", **{
        "train.total_steps": 1, "train.tensorboard": "false"})), tmp_path / "f").fit()[0]
    lora = _trainer(tiny_model_dir, arith_data, tmp_path / "l", **{"train.total_steps": 1}).fit()[0]
    ratio = lora["perf/optimizer_state_gb"] / full["perf/optimizer_state_gb"]
    assert ratio == lora["perf/trainable_params"] / full["perf/trainable_params"] and ratio < 0.3


def test_lora_checkpoints_resume_exactly(tiny_model_dir, arith_data, tmp_path):
    full = _trainer(tiny_model_dir, arith_data, tmp_path / "full", **{"train.total_steps": 2, "train.save_every": 1})
    full.fit()
    half = _trainer(tiny_model_dir, arith_data, tmp_path / "half", **{"train.total_steps": 1})
    half.fit()
    resumed = Trainer(load_config(tmp_path / "half" / "config.yaml", ["train.total_steps=2"]), tmp_path / "half",
                      resume=True)
    resumed.fit()
    for (n, a), (_, b) in zip(full.model.named_parameters(), resumed.model.named_parameters()):
        assert torch.equal(a, b), n  # adapters and merged weights, bit for bit
    sa, sb = full.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    assert all(torch.equal(sa[i]["exp_avg_sq"], sb[i]["exp_avg_sq"]) for i in sa)
    with pytest.raises(Exception, match="written with model.lora; resume it with it too"):
        Trainer(load_config(tmp_path / "half" / "config.yaml", ["model.lora.r=0"]), tmp_path / "half", resume=True)


@pytest.mark.slow  # > 5 s: two runs
def test_model_lora_path_continues_an_adapter(tiny_model_dir, arith_data, tmp_path):
    first = _trainer(tiny_model_dir, arith_data, tmp_path / "a", **{"train.total_steps": 1, "algo.kl_coef": 0.1})
    first.fit()
    adapter = tmp_path / "a" / "checkpoints" / "step-000001" / "adapter"
    # r and alpha come from the adapter: the config's are ignored
    second = _trainer(tiny_model_dir, arith_data, tmp_path / "b", **{"model.lora.path": str(adapter),
                                                                     "model.lora.r": 0, "algo.kl_coef": 0.1})
    for (n, a), (_, b) in zip(first.model.named_parameters(), second.model.named_parameters()):
        assert torch.equal(a, b), n  # the adapter and the same merged weights
    for n, p in second.reference.named_parameters():  # the reference is the initial policy: base + the adapter
        assert torch.equal(p, second.model.get_parameter(n)), n
    second.fit()


@pytest.mark.slow  # > 5 s: a run and three exports
def test_export_adapter_and_merged_model(tiny_model_dir, arith_data, tmp_path, capsys):
    t = _trainer(tiny_model_dir, arith_data, tmp_path / "run", **{"train.total_steps": 1})
    t.fit()
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "ad")]) == 0
    assert {p.name for p in (tmp_path / "ad").iterdir()} == {CONFIG_FILE, WEIGHTS_FILE}
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "merged"), "--merge", "--step", "1"]) == 0
    merged, tok = load(tmp_path / "merged", device="cpu")
    assert tok is not None
    for n, p in merged.named_parameters():  # the engine's weights, bit for bit
        assert torch.equal(p, t.model.get_parameter(n)), n
    from transformers import AutoModelForCausalLM  # the merged folder is a plain HF model

    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged")).eval()
    ids = torch.randint(3, 90, (2, 9))
    with torch.no_grad():
        assert (hf(ids).logits - merged(ids)).abs().max() < 1e-4
    # `tailrl eval --model RUN_DIR` evaluates the checkpoint's merged policy: what the exported folder gives
    cfg, outs = str(tmp_path / "run" / "config.yaml"), []
    for i, ref in enumerate((tmp_path / "run", tmp_path / "merged")):
        outs.append(tmp_path / f"eval{i}.json")
        assert main(["eval", cfg, "--model", str(ref), "--samples", "2", "--prompts", "3", "--out", str(outs[-1])]) == 0
    assert json.loads(outs[0].read_text()) | {"eval/timing_s": 0} == json.loads(outs[1].read_text()) | {"eval/timing_s": 0}
    capsys.readouterr()
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "x"), "--step", "7"]) == 2
    assert "has no complete checkpoint of step 7; steps: 1" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "ad")]) == 2
    assert "exists and is not an empty folder" in capsys.readouterr().err


def test_export_of_a_full_fine_tune_copies_its_model(tiny_model_dir, arith_data, tmp_path):
    Trainer(load_config(None, base_overrides(tiny_model_dir, arith_data, tmp_path / "f", **{
        "train.total_steps": 1, "train.tensorboard": "false"})), tmp_path / "f").fit()
    assert main(["export", str(tmp_path / "f"), "--out", str(tmp_path / "out"), "--merge"]) == 0
    assert (tmp_path / "out" / "model.safetensors").is_file() and (tmp_path / "out" / "config.json").is_file()


def test_bad_lora_input_is_one_line_exit_2(tiny_model_dir, arith_data, tmp_path, capsys):
    cfg = write_config(tmp_path / "c.yaml", base_overrides(tiny_model_dir, arith_data, tmp_path / "r"))
    for override, want in [("model.lora.target_modules=[q_proj,qkv]", "unknown model.lora.target_modules 'qkv'; "
                                                                       "valid: q_proj, k_proj"),
                           ("model.lora.r=-2", "model.lora.r must be >= 0"),
                           ("model.lora.dropout=0.05", "model.lora.dropout must be 0"),
                           (f"model.lora.path={tmp_path}", "is not a PEFT adapter folder")]:
        assert main(["train", str(cfg), override]) == 2
        err = capsys.readouterr().err
        assert want in err and len(err.strip().splitlines()) == 1, err


def test_bf16_lora_shares_one_module_in_the_model_dtype(tiny_model_dir, arith_data, tmp_path):
    t = _trainer(tiny_model_dir, arith_data, tmp_path / "r", **{"model.dtype": "bfloat16", "train.total_steps": 1})
    assert t.policy.shared and t.engine.model is t.model
    frozen = {p.dtype for n, p in t.model.named_parameters() if ".lora." not in n}
    adapters = {p.dtype for n, p in t.model.named_parameters() if ".lora." in n}
    assert frozen == {torch.bfloat16} and adapters == {torch.float32}
    (m,) = t.fit()
    assert m["rollout/logprob_diff_max"] < 0.1  # bf16 logprobs, engine vs trainer (fast mode)
    merged = merged_copy(t.model)
    assert all(torch.equal(t.model.get_parameter(n), w) for n, w in merged.items())


def test_lora_with_speculation_sagc_pods_checkpointing_and_the_chunked_head(tiny_model_dir, arith_data, tmp_path):
    """The other features only see the merged module: a run with all of them trains the adapters, with fast
    mode's gap between the engine's logprobs and the trainer's."""
    t = _trainer(tiny_model_dir, arith_data, tmp_path / "r", **{
        "train.total_steps": 2, "engine.spec.method": "ngram", "control.kind": "sagc", "control.candidates": "[4,8]",
        "algo.downsample.rule": "max_variance", "algo.downsample.ratio": 2, "train.activation_checkpointing": "true",
        "train.logprob_chunk_rows": 5})
    hist = t.fit()
    assert all(m["rollout/logprob_diff_max"] < 1e-4 and "pods/m" in m for m in hist)
    assert any(torch.count_nonzero(b) for _, m in lora_linears(t.model) for _, _, b in m.lora.pairs())
    merged = merged_copy(t.model)
    assert all(torch.equal(t.engine.model.get_parameter(n), w) for n, w in merged.items())


@pytest.mark.slow
def test_a_strict_lora_step_has_no_mismatch(tiny_model_dir, arith_data, tmp_path):
    """engine.exact=strict (Triton interpreter on a CPU): the engine's logprobs equal the trainer's bitwise."""
    t = _trainer(tiny_model_dir, arith_data, tmp_path / "r", **{
        "engine.exact": "strict", "train.total_steps": 2, "rollout.max_new_tokens": 4, "algo.ppo_epochs": 2})
    hist = t.fit()
    assert all(m["rollout/logprob_diff_max"] == 0.0 and m["rollout/logprob_diff_mean"] == 0.0 for m in hist)
    assert any(torch.count_nonzero(b) for _, m in lora_linears(t.model) for _, _, b in m.lora.pairs())  # it trained
