"""Training under torchrun on CPUs (gloo), as a user launches it: two ranks against one process with the same
global batch (token-identical rollouts through SAGC, DAPO refills and PODS; equal final weights), and two
"nodes" over loopback killed mid-run and resumed (the same final weights as an uninterrupted run)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import base_overrides, ends, jsonl_rows, run_cli, write_config

pytestmark = pytest.mark.slow  # every test here starts processes

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def _config(tmp_path: Path, model_dir, data, **extra) -> Path:
    """A YAML config from the tests' training overrides: SAGC over G in {4, 8}, DAPO (overlong penalty, zero-
    variance filter with refills) and PODS (train on half of each group), every rollout saved."""
    over = {"train.save_rollouts": "true", "train.tensorboard": "false", "train.rollout_batch_size": 16,
            "control.kind": "sagc", "control.candidates": "[4,8]", "algo.name": "dapo",
            "algo.downsample.rule": "max_variance", "algo.downsample.ratio": 2, "rollout.max_new_tokens": 12,
            "train.out_dir": str(tmp_path / "runs")} | extra
    return write_config(tmp_path / "cfg.yaml", base_overrides(model_dir, data, None, **over))


def _weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / f"step-{step:06d}" / "model" / "model.safetensors"))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_two_ranks_train_like_one_process(tiny_model_dir, arith_data, tmp_path, dtype):
    """bfloat16: the one-process recipe under torchrun too (fp32 all-gathers, autocast), so the ranks' masters
    differ from one process's by fp32 summation order only (bf16 all-gathered parameters and a plain bf16
    forward gave 3 of 52 rollouts different and masters 4e-3 apart)."""
    cfg = _config(tmp_path, tiny_model_dir, arith_data, **{"train.total_steps": 3, "model.dtype": dtype})
    one = run_cli([sys.executable, "-m", "tailrl", "train", str(cfg), "train.run_name=one"], tmp_path)
    assert one.returncode == 0, ends(one.stderr)
    two = run_cli(TORCHRUN + ["--standalone", "--nproc-per-node", "2", "-m", "tailrl", "train", str(cfg),
                           "train.run_name=two"], tmp_path)
    assert two.returncode == 0, ends(two.stderr)
    a, b = tmp_path / "runs" / "one", tmp_path / "runs" / "two"

    def key(r):
        return r["step"], r["uid"], r["sample_index"]

    ra, rb = sorted(jsonl_rows(a / "rollouts.jsonl"), key=key), sorted(jsonl_rows(b / "rollouts.jsonl"), key=key)
    assert len(ra) == len(rb) > 40 and ra == rb  # tokens, texts, rewards, which were trained: identical
    ma, mb = jsonl_rows(a / "metrics.jsonl"), jsonl_rows(b / "metrics.jsonl")
    for k in ("rollout/group_size", "dapo/refill_rounds", "pods/m", "reward/mean", "actor/loss",
              "rollout/straggler_rate", "rollout/len_max_over_median", "response_length/mean"):
        assert [r[k] for r in ma] == [r[k] for r in mb], k
    # the run exercises every global decision: SAGC moved G, DAPO refilled, PODS kept m of G
    assert {r["rollout/group_size"] for r in ma} == {4.0, 8.0} and any(r["dapo/refill_rounds"] for r in ma)
    if dtype == "float32":
        wa, wb = _weights(a, 3), _weights(b, 3)
    else:  # the fp32 masters beside the bf16 model folder
        ckpt = Path("checkpoints") / "step-000003" / "masters.safetensors"
        wa, wb = load_file(str(a / ckpt)), load_file(str(b / ckpt))
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) <= 1e-5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_nodes(tmp_path: Path, args: list[str], tag: str) -> list[subprocess.Popen]:
    """Two torchrun agents, one rank each, meeting over loopback (c10d rendezvous): two "nodes". Their output
    goes to files (a pipe nobody reads would fill and block them)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    port = _free_port()
    cmd = TORCHRUN + ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                      f"127.0.0.1:{port}", "--rdzv-id", f"job{port}", "-m", "tailrl", "train", *args]
    return [subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, start_new_session=True,
                             stderr=open(tmp_path / f"{tag}-node{n}.log", "w")) for n in range(2)]


def _log(tmp_path: Path, tag: str) -> str:
    return "".join((tmp_path / f"{tag}-node{n}.log").read_text()[-1500:] for n in range(2))


def test_two_nodes_killed_mid_run_resume_to_the_same_weights(tiny_model_dir, arith_data, tmp_path):
    cfg = _config(tmp_path, tiny_model_dir, arith_data, **{"train.total_steps": 4, "train.save_every": 1})
    ref = run_cli(TORCHRUN + ["--standalone", "--nproc-per-node", "2", "-m", "tailrl", "train", str(cfg),
                           "train.run_name=ref"], tmp_path)
    assert ref.returncode == 0, ends(ref.stderr)
    run = tmp_path / "runs" / "killed"
    agents = _two_nodes(tmp_path, [str(cfg), "train.run_name=killed"], "first")
    deadline = time.time() + 300
    while time.time() < deadline and not (run / "checkpoints" / "step-000002").is_dir():
        time.sleep(0.2)
    assert (run / "checkpoints" / "step-000002").is_dir(), _log(tmp_path, "first")
    ranks = subprocess.run(["pgrep", "-f", "-n", "tailrl train .*train.run_name=killed"], capture_output=True,
                           text=True).stdout.split()
    os.kill(int(ranks[0]), signal.SIGKILL)  # one rank dies mid-run; its peer and both agents stop
    for a in agents:
        a.wait(timeout=120)
    assert any(a.returncode != 0 for a in agents)
    done = [p.name for p in (run / "checkpoints").glob("step-*") if not p.name.endswith(".tmp")]
    assert "step-000004" not in done
    agents = _two_nodes(tmp_path, ["--resume", str(run)], "resumed")
    for a in agents:
        a.wait(timeout=300)
        assert a.returncode == 0, _log(tmp_path, "resumed")
    wa, wb = _weights(tmp_path / "runs" / "ref", 4), _weights(run, 4)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)  # resume is exact
