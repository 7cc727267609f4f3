"""Stopping on a signal in one process (train/stop.py): SIGTERM, SIGINT and SIGUSR1 during a step's rollout or
update finish the step and checkpoint it, and --resume ends bitwise equal to an uninterrupted run; a rollout
past train.stop_grace_s is abandoned and the run rolls back to the step's start; a second Ctrl-C stops at once.
Nothing is logged twice (metrics.jsonl, TensorBoard)."""

import json
import os
import signal
import time

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tailrl.config import load_config
from tailrl.train.checkpoint import latest_checkpoint
from tailrl.train.metrics import read_metrics
from tailrl.train.stop import StepAbandoned, StopSignals
from tailrl.train.trainer import Trainer
from tests.train import stopping


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return stopping.write_arith(tmp_path_factory.mktemp("data") / "train.jsonl")


@pytest.fixture(scope="module")
def reference(tiny_model_dir, data, tmp_path_factory):
    """The final weights of the uninterrupted run."""
    run = tmp_path_factory.mktemp("reference") / "run"
    Trainer(load_config(None, stopping.stop_overrides(tiny_model_dir, data)), run).fit()
    return stopping.final_weights(run)


def _steps(run) -> list[int]:
    return [r["step"] for r in read_metrics(run)]


def _resume_to_the_end(cfg, run, reference) -> None:
    resumed = Trainer(cfg, run, resume=True)
    resumed.fit()
    assert resumed.stopped is None and resumed.step_idx == stopping.STEPS
    assert stopping.same_weights(stopping.final_weights(run), reference)
    assert _steps(run) == list(range(1, stopping.STEPS + 1))  # no row twice, none missing


def test_stop_signals_handlers_deadline_and_shield():
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGALRM)}
    with StopSignals(grace_s=0.2, announce=False) as stop:
        with stop.rollout():  # no stop requested: the window is inert
            pass
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGUSR1)  # a repeated stop (torchrun's forwarded copy) changes nothing
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.signal == "SIGTERM"
        t0 = time.monotonic()
        with pytest.raises(StepAbandoned, match="SIGTERM"):
            with stop.rollout():
                time.sleep(5)  # the deadline's SIGALRM cuts it
        assert time.monotonic() - t0 < 2
        with pytest.raises(StepAbandoned):  # past the deadline: at once
            with stop.rollout():
                pytest.fail("a rollout started past the deadline")
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)  # after a first stop, Ctrl-C stops at once
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_deadline_inside_a_shield_raises_when_it_ends():
    stop = StopSignals(grace_s=0.0, announce=False)  # not entered: no handlers, a stop asked from code
    done = []
    with pytest.raises(StepAbandoned, match="test"):
        with stop.rollout(), stop.shield():
            stop.request("test")  # the deadline (grace 0) passes inside the shield
            done.append("hand-over finished")
    assert done == ["hand-over finished"]


@pytest.mark.parametrize("sig,phase", [("SIGTERM", "update"), ("SIGINT", "rollout"), ("SIGUSR1", "rollout")])
def test_a_signal_finishes_the_step_checkpoints_it_and_resume_is_exact(tiny_model_dir, data, reference, tmp_path,
                                                                        sig, phase):
    run = tmp_path / "run"
    cfg = load_config(None, stopping.stop_overrides(tiny_model_dir, data, **{"train.tensorboard": "true"}))
    trainer = Trainer(cfg, run)
    undo = stopping.signal_during(trainer, phase, [getattr(signal, sig)])
    try:
        history = trainer.fit()
    finally:
        undo()
    assert trainer.stopped == sig and trainer.step_idx == 2 and len(history) == 2
    assert latest_checkpoint(run).name == "step-000002"  # save_every=100: the stop wrote it
    assert json.loads((run / "final.json").read_text())["stopped"] == sig
    assert _steps(run) == [1, 2]
    _resume_to_the_end(cfg, run, reference)
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("reward/mean")] == [1, 2, 3]  # TensorBoard continues from the step


def test_a_rollout_past_the_grace_is_abandoned_and_rolled_back(tiny_model_dir, data, reference, tmp_path):
    run = tmp_path / "run"
    cfg = load_config(None, stopping.stop_overrides(tiny_model_dir, data, **{"train.stop_grace_s": 0}))
    trainer = Trainer(cfg, run)
    stopping.signal_during(trainer, "rollout", [signal.SIGTERM])
    trainer.fit()
    assert trainer.stopped == "SIGTERM" and trainer.step_idx == 1
    state = json.loads((latest_checkpoint(run) / "state.json").read_text())
    assert latest_checkpoint(run).name == "step-000001" and state["step"] == 1
    assert state["draws"] == 2  # step 2's prompts were drawn, then given back
    assert _steps(run) == [1]
    _resume_to_the_end(cfg, run, reference)


def test_a_second_ctrl_c_stops_at_once_and_keeps_what_was_written(tiny_model_dir, data, reference, tmp_path):
    run = tmp_path / "run"
    cfg = load_config(None, stopping.stop_overrides(tiny_model_dir, data, **{"train.save_every": 1}))
    trainer = Trainer(cfg, run)
    stopping.signal_during(trainer, "rollout", [signal.SIGINT, signal.SIGINT])
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()
    assert latest_checkpoint(run).name == "step-000001" and _steps(run) == [1]
    assert not list((run / "checkpoints").glob("*.tmp"))
    _resume_to_the_end(cfg, run, reference)
