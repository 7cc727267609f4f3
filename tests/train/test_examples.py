"""The shipped example configs run as a user would run them (a subprocess of the CLI), on the CPU."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import GSM8K, write_jsonl

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gsm8k_example_trains_one_step_on_a_cpu(tiny_model_dir, tmp_path):
    data = write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K * 8)
    r = subprocess.run([sys.executable, "-m", "tailrl.cli", "train", str(ROOT / "examples" / "gsm8k.yaml"),
                        f"model.path={tiny_model_dir}", f"data.source={data}", "train.total_steps=1",
                        f"train.out_dir={tmp_path / 'runs'}"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    run = tmp_path / "runs" / "gsm8k"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 1 and (run / "checkpoints" / "step-000001" / "model" / "config.json").is_file()
    assert "model:\n  path:" in (run / "config.yaml").read_text() and "device: auto" in (run / "config.yaml").read_text()


@pytest.mark.slow
def test_gsm8k_python_tool_example_trains_one_step_on_a_cpu(tiny_model_dir, tmp_path):
    """The multi-turn example loads, starts its sandboxed python workers, trains a step and closes them."""
    data = write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K * 8)
    r = subprocess.run([sys.executable, "-m", "tailrl.cli", "train", str(ROOT / "examples" / "gsm8k_python_tool.yaml"),
                        f"model.path={tiny_model_dir}", f"data.source={data}", "train.total_steps=1",
                        "train.rollout_batch_size=16", "rollout.max_new_tokens=32", "train.eval_every=0",
                        f"train.out_dir={tmp_path / 'runs'}"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "runs" / "gsm8k-python-tool" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 1 and rows[-1]["rollout/turns_mean"] >= 1.0 and "tools/calls_mean" in rows[-1]
