"""LoRA under torchrun on CPUs (gloo): the adapters are FSDP2-sharded like every parameter of their layer, the
merge all-gathers them and writes each rank's rows of the merged weights, the engine's copy is refreshed from
the merged weights. Two ranks train like one process with the same global batch (token-identical rollouts,
adapters within 1e-5), and a two-rank run resumed from its checkpoint (adapter + sharded optimizer state) ends
bitwise equal to the uninterrupted one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import base_overrides, ends, jsonl_rows, run_cli, write_config

pytestmark = pytest.mark.slow  # every test here starts processes

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


def _config(tmp_path: Path, model_dir, data, **extra) -> Path:
    over = {"train.save_rollouts": "true", "train.tensorboard": "false", "train.rollout_batch_size": 16,
            "rollout.max_new_tokens": 10, "model.lora.r": 4, "model.lora.target_modules": "all-linear",
            "model.lora.alpha": 16, "train.lr": 1e-2, "train.out_dir": str(tmp_path / "runs")} | extra
    return write_config(tmp_path / "cfg.yaml", base_overrides(model_dir, data, None, **over))


def _adapter(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / f"step-{step:06d}" / "adapter" / "adapter_model.safetensors"))


def test_two_ranks_train_lora_like_one_process_and_resume_exactly(tiny_model_dir, arith_data, tmp_path):
    cfg = _config(tmp_path, tiny_model_dir, arith_data, **{"train.total_steps": 3, "train.save_every": 1})
    one = run_cli([sys.executable, "-m", "tailrl", "train", str(cfg), "train.run_name=one"], tmp_path)
    assert one.returncode == 0, ends(one.stderr)
    two = run_cli(TORCHRUN + ["-m", "tailrl", "train", str(cfg), "train.run_name=two"], tmp_path)
    assert two.returncode == 0, ends(two.stderr)
    a, b = tmp_path / "runs" / "one", tmp_path / "runs" / "two"

    def key(r):
        return r["step"], r["uid"], r["sample_index"]

    ra, rb = sorted(jsonl_rows(a / "rollouts.jsonl"), key=key), sorted(jsonl_rows(b / "rollouts.jsonl"), key=key)
    assert len(ra) == len(rb) == 48 and ra == rb  # the merged weights drive the same tokens on every rank
    wa, wb = _adapter(a, 3), _adapter(b, 3)
    assert set(wa) == set(wb) and max((wa[k] - wb[k]).abs().max().item() for k in wa) <= 1e-5
    assert any(torch.count_nonzero(v) for k, v in wa.items() if "lora_B" in k)  # the adapters trained
    ma = jsonl_rows(b / "metrics.jsonl")
    assert all(m["rollout/logprob_diff_max"] < 1e-4 for m in ma)
    # the two-rank run stopped after step 2 (its checkpoint kept) and resumed: bitwise the uninterrupted run
    cut = tmp_path / "runs" / "cut"
    for step in (1, 2):
        src = b / "checkpoints" / f"step-{step:06d}"
        if src.is_dir():
            (cut / "checkpoints").mkdir(parents=True, exist_ok=True)
            subprocess.run(["cp", "-r", str(src), str(cut / "checkpoints")], check=True)
    (cut / "config.yaml").write_text((b / "config.yaml").read_text())
    resumed = run_cli(TORCHRUN + ["-m", "tailrl", "train", "--resume", str(cut)], tmp_path)
    assert resumed.returncode == 0, ends(resumed.stderr)
    wc = _adapter(cut, 3)
    assert all(torch.equal(wb[k], wc[k]) for k in wb)
