"""Stopping `tailrl train` from outside, as a cluster does: SIGTERM to one process (exit 75, a checkpoint at the
last step although train.save_every=100, --resume bitwise equal to the uninterrupted run), Ctrl-C twice (exit
130, what was written stays), and examples/slurm_train.sh under stand-in srun / scontrol / torchrun commands:
SIGUSR1 to the batch script stops 2 gloo ranks at a step boundary, the job requeues itself, and the requeued
script resumes to the uninterrupted 2-rank run's weights."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tailrl.config import load_config
from tailrl.train.checkpoint import latest_checkpoint
from tailrl.train.metrics import read_metrics
from tailrl.train.trainer import Trainer
from tests.helpers import ends, write_config
from tests.train.stopping import final_weights, same_weights, stop_overrides

pytestmark = pytest.mark.slow  # starts processes

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def _steps(run: Path) -> list[int]:
    return [r["step"] for r in read_metrics(run)]


def _wait_for_row(run: Path, step: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if (run / "metrics.jsonl").is_file() and step in _steps(run):
            return
        time.sleep(0.05)
    raise AssertionError(f"no metrics row for step {step} (exit code {proc.poll()})")


def _train_until_row(over: list[str], tmp_path: Path, step: int) -> tuple[subprocess.Popen, Path, Path]:
    """`tailrl train` in a subprocess, returned once its metrics row for `step` is written: (process, run, log)."""
    run, log = tmp_path / "run", tmp_path / "run.log"
    cfg = write_config(tmp_path / "run.yaml", over)
    proc = subprocess.Popen([sys.executable, "-m", "tailrl", "train", str(cfg), "--run-dir", str(run)], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    _wait_for_row(run, step, proc)
    return proc, run, log


def test_sigterm_checkpoints_the_last_step_and_resume_is_bitwise(tiny_model_dir, arith_data, tmp_path):
    over = stop_overrides(tiny_model_dir, arith_data, **{"train.total_steps": 5})
    Trainer(load_config(None, over), tmp_path / "full").fit()
    proc, run, log = _train_until_row(over, tmp_path, 3)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 75, log.read_text()[-2000:]
    log = log.read_text()
    done = int(latest_checkpoint(run).name.split("-")[1])
    assert 3 <= done <= 5 and _steps(run) == list(range(1, done + 1))  # the step it was in finished, then saved
    assert f"stopped by SIGTERM at step {done}: checkpoint {latest_checkpoint(run)}; continue with: tailrl train " \
           f"--resume {run}" in log
    r = subprocess.run([sys.executable, "-m", "tailrl", "train", "--resume", str(run)], env=ENV, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert same_weights(final_weights(run), final_weights(tmp_path / "full"))
    assert _steps(run) == [1, 2, 3, 4, 5]


def test_ctrl_c_twice_exits_130_and_keeps_what_was_written(tiny_model_dir, arith_data, tmp_path):
    # long steps (256 forced tokens): the second Ctrl-C lands well inside the step the first one let finish
    over = stop_overrides(tiny_model_dir, arith_data, **{"train.total_steps": 50, "train.save_every": 1,
                                                         "rollout.max_new_tokens": 256, "rollout.ignore_eos": "true"})
    proc, run, log = _train_until_row(over, tmp_path, 2)
    proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + 60  # the second only once the first was handled (two at once count as one)
    while "stopping after this step" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130, log.read_text()[-2000:]
    assert "interrupted" in log.read_text()
    done = int(latest_checkpoint(run).name.split("-")[1])
    rows = _steps(run)
    assert done >= 2 and rows == list(range(1, len(rows) + 1)) and len(rows) >= done


def _fake_slurm(bin_dir: Path, log: Path) -> None:
    """srun runs its command here; scontrol names this host and records a requeue; torchrun is torch's."""
    bin_dir.mkdir()
    scripts = {"srun": 'exec "$@"',
               "scontrol": f'case "$1" in show) echo 127.0.0.1 ;; requeue) echo "$2" >> "{log}" ;; esac',
               "torchrun": f'exec "{sys.executable}" -m torch.distributed.run "$@"'}
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_slurm_script_requeues_on_usr1_and_the_requeued_job_resumes_bitwise(tiny_model_dir, arith_data, tmp_path):
    over = stop_overrides(tiny_model_dir, arith_data, **{"train.total_steps": 4})
    cfg = write_config(tmp_path / "run.yaml", over)
    env = ENV | {"OMP_NUM_THREADS": "1"}
    ref = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "-m", "tailrl", "train", str(cfg), "--run-dir", str(tmp_path / "ref")], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert ref.returncode == 0, ends(ref.stderr)
    _fake_slurm(tmp_path / "bin", tmp_path / "requeued")
    run = tmp_path / "runs" / "4242"
    env |= {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242", "SLURM_NNODES": "1",
            "SLURM_JOB_NODELIST": "node1", "SLURM_GPUS_ON_NODE": "2", "PORT": str(_free_port()), "STOP_GRACE": "25",
            "RUN_DIR": str(run)}
    script = [str(ROOT / "examples" / "slurm_train.sh"), str(cfg)]
    job = subprocess.Popen(["bash", *script], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                           stderr=open(tmp_path / "job.log", "w"))
    _wait_for_row(run, 1, job)
    job.send_signal(signal.SIGUSR1)  # what --signal=B:USR1@300 sends before the time limit
    job.wait(timeout=300)
    log = (tmp_path / "job.log").read_text()
    assert (tmp_path / "requeued").read_text().split() == ["4242"], log[-3000:]
    assert "SIGUSR1 (time limit near)" in log and "stopped by SIGTERM" in log, log[-3000:]
    done = int(latest_checkpoint(run).name.split("-")[1])
    assert 1 <= done <= 4 and _steps(run) == list(range(1, done + 1))
    env["PORT"] = str(_free_port())
    again = subprocess.run(["bash", *script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, ends(again.stderr)
    assert f"resumed at step {done}" in again.stderr
    assert same_weights(final_weights(run), final_weights(tmp_path / "ref"))
    assert _steps(run) == [1, 2, 3, 4] and (tmp_path / "requeued").read_text().split() == ["4242"]
