"""Shared by the stop tests (test_stop*.py): a tiny run's overrides, signals sent from inside a step's
rollout or update, and the weights a run ends with."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import torch

from tailrl.model.loading import iter_safetensors
from tailrl.train import trainer as trainer_module
from tailrl.train.checkpoint import latest_checkpoint
from tests.helpers import base_overrides

STEPS = 3


def write_arith(path: Path) -> Path:
    """Tiny arithmetic rows with GSM8K-style answers (conftest's arith_data, for module-scoped runs)."""
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(1, 5) for b in range(1, 5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def stop_overrides(model_dir, data, **extra) -> list[str]:
    """STEPS steps of the tiny policy, no checkpoint before the end unless a stop writes one."""
    return base_overrides(model_dir, data, None, **({"train.total_steps": STEPS, "train.save_every": 100,
                                                     "train.tensorboard": "false", "data.shuffle": "true"} | extra))


def signal_during(trainer, phase: str, signals: list[int], step: int = 2) -> Callable[[], None]:
    """Send `signals` to this process once, during step `step`: in its rollout (at the engine's second step)
    or in its update (before the optimizer step). Patches this trainer's engine, or the trainer module's
    update_step: returns the undo."""
    sent = [False]

    def fire() -> None:
        if trainer.step_idx == step - 1 and not sent[0]:
            sent[0] = True
            for s in signals:
                os.kill(os.getpid(), s)

    if phase == "rollout":
        real_step, calls = trainer.engine.step, [0]

        def engine_step():
            calls[0] += trainer.step_idx == step - 1
            if calls[0] == 2:
                fire()
            return real_step()

        trainer.engine.step = engine_step  # generate() calls self.step(): the instance's attribute wins
        return lambda: None
    real_update = trainer_module.update_step

    def update_step(*args, **kwargs):
        fire()
        return real_update(*args, **kwargs)

    trainer_module.update_step = update_step
    return lambda: setattr(trainer_module, "update_step", real_update)


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    ckpt = latest_checkpoint(run)
    return dict(iter_safetensors([ckpt / "model" / "model.safetensors"]))


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
