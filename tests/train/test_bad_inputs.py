"""Trainer bad inputs: unknown keys, NaN loss (stop, keep the last good checkpoint), malformed rows."""

import torch

from tailrl.cli import main
from tailrl.config import load_config
from tailrl.model.loading import iter_safetensors
from tailrl.train import update as update_mod
from tailrl.train.trainer import Trainer
from tests.helpers import base_overrides, write_config


def test_unknown_key_one_line(tiny_model_dir, arith_data, tmp_path, capsys):
    cfg = write_config(tmp_path / "c.yaml", base_overrides(tiny_model_dir, arith_data, None))
    assert main(["train", str(cfg), "train.learning_rate=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown config key 'train.learning_rate'" in err and "lr" in err and "\n" not in err


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tiny_model_dir, arith_data, tmp_path, monkeypatch, capsys):
    over = base_overrides(tiny_model_dir, arith_data, None, **{"train.total_steps": 3, "train.save_every": 1,
                                                                "train.tensorboard": "false"})
    cfg = write_config(tmp_path / "c.yaml", over)
    real = update_mod.policy_loss
    calls = {"n": 0}

    def poisoned(*a, **k):
        calls["n"] += 1
        out = real(*a, **k)
        if calls["n"] > 3:  # step 1 runs 3 micro-batches cleanly; step 2 goes NaN
            out["loss"] = out["loss"] * float("nan")
        return out

    monkeypatch.setattr(update_mod, "policy_loss", poisoned)
    run = tmp_path / "run"
    assert main(["train", str(cfg), "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert "training diverged at step 2" in err and "step-000001" in err
    ckpts = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert ckpts == ["step-000001"]
    w = dict(iter_safetensors([run / "checkpoints" / "step-000001" / "model" / "model.safetensors"]))
    assert all(torch.isfinite(v).all() for v in w.values())


def test_malformed_rows_skipped_and_counted(tiny_model_dir, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "1+1=", "answer": "2"}\nnot json\n{"prompt": "2+2="}\n{"prompt": "3+3=", "answer": "6"}\n')
    over = base_overrides(tiny_model_dir, data, None, **{"train.total_steps": 1, "train.tensorboard": "false"})
    t = Trainer(load_config(None, over), tmp_path / "run")
    m = t.fit()[0]
    assert m["data/skipped_rows"] == 2.0
    fail = load_config(None, over + ["data.on_bad_row=fail"])
    import pytest

    from tailrl.errors import UserError

    with pytest.raises(UserError, match="line 2"):
        Trainer(fail, tmp_path / "run2")
