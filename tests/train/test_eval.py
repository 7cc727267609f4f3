"""`tailrl eval`: pass@k and mean length on a dataset, from a model folder or a run directory."""

import json

from tailrl.cli import main
from tailrl.train.evaluate import pass_at_k
from tests.helpers import base_overrides, write_config


def test_pass_at_k_estimator():
    assert pass_at_k(4, 0, 1) == 0.0 and pass_at_k(4, 4, 2) == 1.0
    assert abs(pass_at_k(4, 1, 1) - 0.25) < 1e-12 and abs(pass_at_k(4, 1, 2) - 0.5) < 1e-12


def test_eval_cli_on_model_and_run_dir(tiny_model_dir, arith_data, tmp_path, capsys):
    cfg = write_config(tmp_path / "c.yaml", base_overrides(tiny_model_dir, arith_data, None, **{
        "train.total_steps": 1, "train.tensorboard": "false"}))
    out = tmp_path / "eval.json"
    assert main(["eval", str(cfg), "--samples", "4", "--prompts", "5", "--out", str(out)]) == 0
    m = json.loads(out.read_text())
    assert m["eval/prompts"] == 5 and m["eval/samples"] == 4
    assert {"eval/pass@1", "eval/pass@2", "eval/pass@4", "eval/response_length_mean"} <= set(m)
    assert 0 <= m["eval/pass@1"] <= m["eval/pass@2"] <= m["eval/pass@4"] <= 1
    run = tmp_path / "run"
    assert main(["train", str(cfg), "--run-dir", str(run)]) == 0
    assert main(["eval", str(cfg), "--model", str(run), "--prompts", "3"]) == 0
    assert "eval/accuracy" in capsys.readouterr().out
