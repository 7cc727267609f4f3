import dataclasses
import re

import pytest
import torch

from tailrl.cli import main
from tailrl.config import Config, EngineConfig, dump_config, load_config
from tailrl.config.fields import choices_of
from tailrl.errors import UserError
from tailrl.model.loading import resolve_device
from tailrl.sim.config import SimConfig


def test_yaml_and_dotted_overrides(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("engine:\n  max_batch_size: 32\nrollout:\n  temperature: 0.7\n")
    cfg = load_config(f, ["rollout.group_size=16", "rollout.stop=['</s>', '\\n\\n']", "model.dtype=bfloat16"])
    assert cfg.engine.max_batch_size == 32 and cfg.rollout.temperature == 0.7
    assert cfg.rollout.group_size == 16 and cfg.rollout.stop == ("</s>", "\\n\\n") and cfg.model.dtype == "bfloat16"
    out = tmp_path / "resolved.yaml"
    dump_config(cfg, out)
    assert load_config(out) == cfg


def test_unknown_key_names_valid_keys():
    with pytest.raises(UserError, match="unknown config key 'engine.max_batch'.*max_batch_size"):
        load_config(None, ["engine.max_batch=3"])
    with pytest.raises(UserError, match="unknown config key 'trainer'"):
        load_config(None, ["trainer.lr=3"])


def test_wrong_types():
    with pytest.raises(UserError, match="engine.max_batch_size: expected an integer"):
        load_config(None, ["engine.max_batch_size=abc"])
    with pytest.raises(UserError, match="expected true/false"):
        load_config(None, ["rollout.ignore_eos=3"])
    assert load_config(None, ["rollout.temperature=7e-1"]).rollout.temperature == 0.7  # YAML reads 7e-1 as str
    with pytest.raises(UserError, match="expected a number"):
        load_config(None, ["rollout.temperature=hot"])
    with pytest.raises(UserError, match="section.key=value"):
        load_config(None, ["oops"])


def test_a_yaml_boolean_word_is_text_for_a_string_key(tmp_path):
    """`train.run_name=off` names the run "off" (YAML 1.1 reads off / on / yes / no as booleans); a boolean key
    still gets the boolean; in a YAML file an unquoted off for a string key says to quote it."""
    cfg = load_config(None, ["train.run_name=off", "rollout.ignore_eos=yes", "engine.spec.gate=off"])
    assert cfg.train.run_name == "off" and cfg.rollout.ignore_eos is True and cfg.engine.spec.gate is False
    assert load_config(None, ["train.run_name=On"]).train.run_name == "On"
    f = tmp_path / "run.yaml"
    f.write_text("train:\n  run_name: off\n")
    with pytest.raises(UserError, match="train.run_name: expected a string, got False .*quote it"):
        load_config(f)
    f.write_text("train:\n  run_name: 'off'\n")
    assert load_config(f).train.run_name == "off"
    # an untyped mapping gets the boolean (what YAML read), and nothing of the wrapper outlives loading
    import pickle

    cfg = load_config(None, ["data.reasoning_gym_args.shuffle=false", "train.run_name=no"])
    assert cfg.data.reasoning_gym_args == {"shuffle": False} and type(cfg.train.run_name) is str
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    dump_config(cfg, tmp_path / "resolved.yaml")
    assert load_config(tmp_path / "resolved.yaml") == cfg


def test_defaults_are_frozen():
    cfg = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.engine.max_batch_size = 3  # type: ignore[misc]
    assert isinstance(cfg.engine, EngineConfig)


def _leaf_fields(cls, prefix=""):
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            yield from _leaf_fields(type(default), f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", f


@pytest.mark.parametrize("cls", [Config, SimConfig])
def test_every_key_has_a_default_and_help(cls):
    leaves = dict(_leaf_fields(cls))
    assert len(leaves) > 40
    missing = [k for k, f in leaves.items() if not f.metadata.get("help")]
    assert not missing, f"keys without help: {missing}"
    cls()  # every key has a default


def test_config_show_prints_every_section_with_help(capsys):
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    for section in ("[model]", "[engine]", "[engine.spec.coupled]", "[engine.spec.decoupled]", "[rollout]", "[data]",
                    "[reward]", "[algo]", "[algo.downsample]", "[train]", "[control]"):
        assert section in out
    for key, f in _leaf_fields(Config):
        line = next(ln for ln in out.splitlines() if ln.split()[:1] == [key])
        assert f.metadata["help"] in line
    assert main(["config", "show", "rollout"]) == 0
    rollout = capsys.readouterr().out
    assert "rollout.group_size" in rollout and "samples per prompt (G)" in rollout and "[train]" not in rollout


def test_config_show_fills_in_a_preset(capsys):
    assert main(["config", "show", "algo", "algo.name=dapo"]) == 0
    out = capsys.readouterr().out
    assert "'token-mean'" in out and "0.28" in out  # DAPO's loss aggregation and clip-higher
    assert main(["config", "show", "nope"]) == 2
    assert "unknown config section 'nope'" in capsys.readouterr().err


def test_moved_speculation_keys_name_their_new_place():
    with pytest.raises(UserError, match="'engine.spec.window' moved to 'engine.spec.decoupled.window'"):
        load_config(None, ["engine.spec.window=4"])
    with pytest.raises(UserError, match="'spec.ngram_max' moved to 'engine.spec.coupled.ngram_max'"):
        load_config(None, ["spec.ngram_max=4"], cls=EngineConfig)
    with pytest.raises(UserError, match="'control.tau' moved to 'control.straggler_tau'"):  # the simulator's rename
        load_config(None, ["control.tau=1.5"], cls=SimConfig)
    with pytest.raises(UserError, match="unknown config key 'control.tau'"):  # not a training key, never was
        load_config(None, ["control.tau=1.5"])
    spec = load_config(None, ["engine.spec.method=draft:/m", "engine.spec.decoupled.window=3"]).engine.spec
    assert (spec.method, spec.draft_model, spec.decoupled.window) == ("draft", "/m", 3)  # draft:PATH parsed once
    with pytest.raises(UserError, match="unknown engine.spec.method 'magic'"):
        load_config(None, ["engine.spec.method=magic"])


def test_device_auto_and_a_missing_cuda_is_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert Config().model.device == "auto" and resolve_device("auto") == "cpu"
    with pytest.raises(UserError, match="model.device is 'cuda' but this machine has no CUDA device"):
        resolve_device("cuda")
    with pytest.raises(UserError, match="unknown model.device 'tpu'"):
        resolve_device("tpu")


def _choice_keys(cls=Config, prefix=""):
    """(dotted key, field) of every key with choices in a config class tree."""
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.default_factory):  # a nested section
            yield from _choice_keys(f.default_factory, f"{prefix}{f.name}.")
        elif f.metadata.get("choices") is not None:
            yield f"{prefix}{f.name}", f


def test_every_choice_key_refuses_an_unknown_name_with_the_valid_ones():
    keys = dict(_choice_keys())
    assert {"engine.attention", "engine.exact", "engine.sampler", "engine.spec.method", "engine.spec.mode",
            "model.dtype", "data.format", "data.on_bad_row", "algo.name", "algo.advantage", "algo.loss_agg",
            "algo.downsample.rule", "control.kind"} <= set(keys)
    for key, f in keys.items():
        names = choices_of(f)
        assert f.default is None or f.default in names, key  # defaults are valid (the check skips them)
        for name in names:
            if name != "draft:PATH":
                load_config(None, [f"{key}={name}"])  # every listed name loads
        with pytest.raises(UserError, match=rf"^unknown {key} 'nope'; valid: {re.escape(', '.join(names))}$"):
            load_config(None, [f"{key}=nope"])


def test_config_show_lists_registry_choices(capsys):
    assert main(["config", "show", "algo"]) == 0
    out = capsys.readouterr().out
    assert "[choices: grpo | drgrpo | rloo | reinforce_pp | reinforce_pp_baseline]" in out  # the registry's names
    assert main(["config", "show", "engine.attention=foo"]) == 2
    assert "unknown engine.attention 'foo'; valid: auto, torch, triton" in capsys.readouterr().err


def test_train_refuses_a_bad_choice_before_the_model_loads(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: {path: /does/not/exist}\ndata: {source: /does/not/exist.jsonl}\n")
    for key, bad, valid in (("engine.attention", "foo", "auto, torch, triton"), ("algo.loss_agg", "sum", "token-mean"),
                            ("control.kind", "pid", "sagc, static")):
        assert main(["train", str(cfg), f"{key}={bad}"]) == 2
        err = capsys.readouterr().err
        assert f"unknown {key} '{bad}'; valid: {valid}" in err and "exist" not in err
