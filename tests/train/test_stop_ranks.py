"""Stopping on a signal with 2 gloo ranks (spawned as torchrun would start them, the trainer joining their
group): SIGTERM and SIGINT during a step's rollout or update, sent to both ranks or to one only, stop both at
the same step boundary with a checkpoint (no rank hangs), a rollout past the grace is abandoned by both, and
every --resume ends bitwise equal to the uninterrupted 2-rank run. Evaluation runs sharded on both ranks with
one process's numbers."""

import json
import signal

import pytest

from tailrl.config import load_config
from tailrl.parallel.dist import spawn
from tailrl.train.metrics import read_metrics
from tailrl.train.trainer import Trainer
from tests.train import stopping

pytestmark = pytest.mark.slow  # starts processes

SCENARIOS = {  # name: (signal, phase, ranks it is sent to, train.stop_grace_s)
    "term-update-both": ("SIGTERM", "update", (0, 1), 25),
    "int-update-rank1": ("SIGINT", "update", (1,), 25),
    "term-rollout-rank1": ("SIGTERM", "rollout", (1,), 25),
    "int-rollout-both": ("SIGINT", "rollout", (0, 1), 25),
    "term-rollout-abandoned": ("SIGTERM", "rollout", (0,), 0),
}


def _overrides(model_dir, data) -> list[str]:
    return stopping.stop_overrides(model_dir, data, **{"data.eval_source": str(data), "train.eval_prompts": 5,
                                                       "train.eval_every": stopping.STEPS})


def _ranks(rank, world, model_dir, data, root) -> dict:
    """Every scenario on the same two processes (one start-up for all)."""
    cfg = load_config(None, _overrides(model_dir, data))
    Trainer(cfg, root / "reference").fit()
    out = {}
    for name, (sig, phase, ranks, grace) in SCENARIOS.items():
        cfg = load_config(None, _overrides(model_dir, data) + [f"train.stop_grace_s={grace}"])
        trainer = Trainer(cfg, root / name)
        undo = stopping.signal_during(trainer, phase, [getattr(signal, sig)]) if rank in ranks else (lambda: None)
        try:
            trainer.fit()
        finally:
            undo()
        resumed = Trainer(cfg, root / name, resume=True)
        start = resumed.step_idx
        resumed.fit()
        out[name] = {"stopped": trainer.stopped, "at": trainer.step_idx, "resumed_at": start,
                     "end": resumed.step_idx, "end_stopped": resumed.stopped}
    return out


def test_two_ranks_stop_together_and_resume_bitwise(tiny_model_dir, tmp_path):
    data = stopping.write_arith(tmp_path / "train.jsonl")
    outs = spawn(_ranks, 2, tiny_model_dir, data, tmp_path)
    reference = stopping.final_weights(tmp_path / "reference")
    for name, (sig, _, _, grace) in SCENARIOS.items():
        at = 1 if grace == 0 else 2  # abandoned: back to step 1; else step 2 finishes
        want = {"stopped": sig, "at": at, "resumed_at": at, "end": stopping.STEPS, "end_stopped": None}
        assert outs[0][name] == outs[1][name] == want, name
        run = tmp_path / name
        assert json.loads((run / "checkpoints" / f"step-{stopping.STEPS:06d}" / "state.json").read_text())["world"] == 2
        assert stopping.same_weights(stopping.final_weights(run), reference), name
        steps = [r["step"] for r in read_metrics(run)]
        assert steps == [0, *range(1, stopping.STEPS + 1)], name  # 0: the evaluation before the first step
    # the sharded evaluation (both ranks) against one process on the same initial policy
    rows = read_metrics(tmp_path / "reference")
    one = Trainer(load_config(None, _overrides(tiny_model_dir, data)), tmp_path / "one")
    try:
        alone = one.evaluate()
    finally:
        one.close()
    alone.pop("eval/timing_s")
    assert {k: rows[0][k] for k in alone} == alone and rows[0]["eval/prompts"] == 5
    assert "eval/accuracy" in rows[-1]
