"""Exact resume: a run killed (kill -9) mid-training and resumed ends bitwise identical to an
uninterrupted run (CPU)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tailrl.config import load_config
from tailrl.model.loading import iter_safetensors
from tailrl.train.checkpoint import latest_checkpoint
from tailrl.train.metrics import read_metrics
from tailrl.train.trainer import Trainer
from tests.helpers import base_overrides, write_config


def _weights(run_dir):
    ckpt = latest_checkpoint(run_dir)
    return dict(iter_safetensors([ckpt / "model" / "model.safetensors"]))


def test_resume_between_steps_is_exact(tiny_model_dir, arith_data, tmp_path):
    over = base_overrides(tiny_model_dir, arith_data, None, **{"train.total_steps": 4, "train.save_every": 1,
                                                                "train.tensorboard": "false", "data.shuffle": "true"})
    Trainer(load_config(None, over), tmp_path / "full").fit()
    Trainer(load_config(None, over + ["train.total_steps=2"]), tmp_path / "part").fit()
    resumed = Trainer(load_config(None, over), tmp_path / "part", resume=True)
    assert resumed.step_idx == 2
    resumed.fit()
    a, b = _weights(tmp_path / "full"), _weights(tmp_path / "part")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [r["step"] for r in read_metrics(tmp_path / "part")] == [1, 2, 3, 4]
    # traces.jsonl follows the same resume rule (rows past the checkpoint dropped, then appended)
    traces = [json.loads(x) for x in (tmp_path / "part" / "traces.jsonl").read_text().splitlines()]
    assert [t["step"] for t in traces] == [1, 2, 3, 4] and all(t["rounds"][0]["requests"] for t in traces)


@pytest.mark.slow
def test_kill_9_during_training_then_resume_is_bitwise_identical(tiny_model_dir, arith_data, tmp_path):
    over = base_overrides(tiny_model_dir, arith_data, None, **{"train.total_steps": 5, "train.save_every": 1,
                                                                "train.tensorboard": "false",
                                                                "rollout.max_new_tokens": 24})
    cfg_file = write_config(tmp_path / "run.yaml", over)
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    cmd = [sys.executable, "-m", "tailrl.cli", "train", str(cfg_file)]
    subprocess.run(cmd + ["--run-dir", str(tmp_path / "full")], check=True, env=env, capture_output=True)
    proc = subprocess.Popen(cmd + ["--run-dir", str(tmp_path / "killed")], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not (tmp_path / "killed" / "checkpoints" / "step-000002").is_dir():
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # lands during step 3 (or while checkpointing it)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    done = latest_checkpoint(tmp_path / "killed")
    assert done is not None and int(done.name.split("-")[1]) < 5
    r = subprocess.run([sys.executable, "-m", "tailrl.cli", "train", "--resume", str(tmp_path / "killed")],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    a, b = _weights(tmp_path / "full"), _weights(tmp_path / "killed")
    assert all(torch.equal(a[k], b[k]) for k in a)
    steps = [row["step"] for row in read_metrics(tmp_path / "killed")]
    assert steps == [1, 2, 3, 4, 5]
