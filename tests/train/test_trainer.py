"""End-to-end trainer runs on a tiny random model (CPU)."""

import json

import pytest
import torch

from tailrl.config import load_config
from tailrl.errors import UserError
from tailrl.train.metrics import read_metrics
from tailrl.train.trainer import Trainer
from tests.helpers import base_overrides

REQUIRED = ["timing_s/gen", "timing_s/update", "response_length/mean", "response_length/max", "reward/mean",
            "frac_reward_zero_std", "actor/pg_loss", "actor/kl", "actor/clipfrac", "actor/grad_norm",
            "rollout/len_max_over_median", "rollout/straggler_rate", "rollout/tail_efficiency"]


def test_two_step_run_writes_everything(tiny_model_dir, arith_data, tmp_path):
    run = tmp_path / "run"
    cfg = load_config(None, base_overrides(tiny_model_dir, arith_data, run))
    trainer = Trainer(cfg, run)
    w0 = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    hist = trainer.fit()
    assert len(hist) == 2 and trainer.step_idx == 2
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [1, 2]
    for key in REQUIRED:
        assert key in rows[0], key
    assert any(not torch.equal(w0[k], v) for k, v in trainer.model.state_dict().items())  # weights moved
    assert (run / "config.yaml").is_file() and list((run / "tensorboard").glob("events.*"))
    ckpt = run / "checkpoints" / "step-000002"
    assert (ckpt / "model" / "model.safetensors").is_file() and json.loads((ckpt / "state.json").read_text())["step"] == 2
    from transformers import AutoModelForCausalLM  # the checkpoint is a plain HF folder

    AutoModelForCausalLM.from_pretrained(str(ckpt / "model"))


@pytest.mark.parametrize("algo", ["drgrpo", "dapo"])
def test_other_algorithms_and_kl_and_epochs(tiny_model_dir, arith_data, tmp_path, algo):
    run = tmp_path / algo
    cfg = load_config(None, base_overrides(tiny_model_dir, arith_data, run, **{
        "algo.name": algo, "algo.kl_coef": 0.05, "algo.ppo_epochs": 2, "train.tensorboard": "false"}))
    t = Trainer(cfg, run)
    hist = t.fit()
    assert len(hist) == 2
    # metrics are the last epoch's: after one update of the step the policy has moved off the reference
    assert all(h["actor/kl"] > 1e-7 for h in hist)
    # the advantage estimator in use: Dr.GRPO centres rewards without dividing by the group std, DAPO uses GRPO's
    groups = [torch.tensor(g.scores, dtype=torch.float64) for g in t.last_phase.groups]
    centred = [s - s.mean() for s in groups]
    want = [c if algo == "drgrpo" else c / (s.std() + 1e-6) for c, s in zip(centred, groups)]
    assert hist[1]["actor/advantage_abs_mean"] == pytest.approx(torch.cat(want).abs().mean().item(), rel=1e-5)
    if algo == "dapo":
        assert t.cfg.algo.loss_agg == "token-mean" and t.cfg.algo.eps_high == 0.28 and t.cfg.algo.dynamic_sampling


def test_bad_config_errors(tiny_model_dir, arith_data, tmp_path):
    with pytest.raises(UserError, match="must divide"):
        Trainer(load_config(None, base_overrides(tiny_model_dir, arith_data, tmp_path, **{"rollout.group_size": 3})),
                tmp_path / "r")
    with pytest.raises(UserError, match="unknown algo.name"):
        Trainer(load_config(None, base_overrides(tiny_model_dir, arith_data, tmp_path, **{"algo.name": "ppo"})),
                tmp_path / "r")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(UserError):
        Trainer(load_config(None, base_overrides(tiny_model_dir, empty, tmp_path)), tmp_path / "r")
    missing = tmp_path / "missing.jsonl"
    missing.write_text('{"question": "1+1"}\n')
    with pytest.raises(UserError, match="no usable rows"):
        Trainer(load_config(None, base_overrides(tiny_model_dir, missing, tmp_path)), tmp_path / "r")


@pytest.mark.slow
def test_reward_pool_trains_like_in_process_scoring(tiny_model_dir, arith_data, tmp_path):
    """reward.workers=2 scores each group in worker processes as it finishes: the same run, metric for metric."""
    def fit(workers):
        cfg = load_config(None, base_overrides(tiny_model_dir, arith_data, tmp_path / f"w{workers}", **{
            "reward.workers": workers, "train.tensorboard": "false"}))
        return Trainer(cfg, tmp_path / f"w{workers}").fit()

    a, b = fit(0), fit(2)
    for ra, rb in zip(a, b):
        for k in ("reward/mean", "actor/loss", "response_length/mean", "actor/grad_norm"):
            assert ra[k] == rb[k], k
