import dataclasses

import pytest

from tailrl.config import Config, EngineConfig, dump_config, load_config
from tailrl.errors import UserError


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


def test_defaults_are_frozen():
    cfg = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.engine.max_batch_size = 3  # type: ignore[misc]
    assert isinstance(cfg.engine, EngineConfig)
