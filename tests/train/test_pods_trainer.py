"""PODS in the trainer: m = n is plain GRPO bit for bit; m < n trains on the max-variance subset."""

import pytest
import torch

from tailrl.config import load_config
from tailrl.errors import UserError
from tailrl.train.trainer import Trainer
from tests.helpers import base_overrides


def _run(tmp_path, name, model_dir, data, **kw):
    over = base_overrides(model_dir, data, None, **{"train.tensorboard": "false", **kw})
    t = Trainer(load_config(None, over), tmp_path / name)
    return t, t.fit()


def test_m_equal_n_is_identical_to_plain_grpo(tiny_model_dir, arith_data, tmp_path):
    plain, h1 = _run(tmp_path, "plain", tiny_model_dir, arith_data)
    pods, h2 = _run(tmp_path, "pods", tiny_model_dir, arith_data, **{"algo.downsample.rule": "max_variance",
                                                                       "algo.downsample.m": 4})
    a, b = plain.model.state_dict(), pods.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert h2[0]["pods/m"] == 4 and h2[0]["pods/kept_token_frac"] == 1.0 and h2[0]["pods/update_time_saved_s"] == 0.0


def test_downsampled_run_trains_on_m(tiny_model_dir, arith_data, tmp_path):
    t, hist = _run(tmp_path, "pods2", tiny_model_dir, arith_data, **{
        "algo.downsample.rule": "max_variance", "algo.downsample.ratio": 2, "algo.name": "dapo"})
    assert all(h["pods/n"] == 4 and h["pods/m"] == 2 for h in hist)
    assert all(len(g.rollouts) == 2 for g in t.last_phase.groups)
    assert all(len(g.full.rollouts) == 4 for g in t.last_phase.groups)
    assert all(h["pods/var_kept_over_var_all"] >= 1.0 - 1e-9 for h in hist if h["pods/var_kept_over_var_all"] > 0)
    for h in hist:  # the update scaled to the tokens not trained on
        f = h["pods/kept_token_frac"]
        assert 0 < f < 1 and h["pods/update_time_saved_s"] == pytest.approx(h["timing_s/update"] * (1 - f) / f)


@pytest.mark.parametrize("kw,msg", [
    ({"algo.downsample.rule": "max_variance", "algo.downsample.m": 8}, "must be <= n"),
    ({"algo.downsample.rule": "max_variance", "algo.downsample.m": 1}, "needs m >= 2"),
    ({"algo.downsample.rule": "max_variance", "algo.downsample.n": 8, "algo.downsample.m": 2}, "must match the group size"),
    ({"algo.downsample.rule": "best", "algo.downsample.m": 2}, "unknown algo.downsample.rule"),
])
def test_bad_pods_config(tiny_model_dir, arith_data, tmp_path, kw, msg):
    with pytest.raises(UserError, match=msg):
        Trainer(load_config(None, base_overrides(tiny_model_dir, arith_data, None, **kw)), tmp_path / "x")


def test_sagc_in_trainer_with_pods_and_resume(tiny_model_dir, arith_data, tmp_path):
    """control.kind=sagc drives G; PODS follows it (m = G / ratio); resume restores the controller."""
    kw = {"control.kind": "sagc", "control.candidates": "[4, 8]", "rollout.group_size": 4,
          "algo.downsample.rule": "max_variance", "algo.downsample.ratio": 2, "train.total_steps": 4,
          "train.save_every": 1, "control.delta": 0.3}
    full, hist = _run(tmp_path, "full", tiny_model_dir, arith_data, **kw)
    assert all("sagc/lambda" in h and "sagc/p_hat/G=4" in h for h in hist)
    assert all(h["pods/m"] == h["rollout/group_size"] / 2 for h in hist)
    _run(tmp_path, "part", tiny_model_dir, arith_data, **{**kw, "train.total_steps": 2})
    over = base_overrides(tiny_model_dir, arith_data, None, **{"train.tensorboard": "false", **kw})
    resumed = Trainer(load_config(None, over), tmp_path / "part", resume=True)
    assert resumed.step_idx == 2
    hist2 = resumed.fit()
    assert [h["rollout/group_size"] for h in hist2] == [h["rollout/group_size"] for h in hist[2:]]
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_bad_sagc_config(tiny_model_dir, arith_data, tmp_path):
    with pytest.raises(UserError, match="must divide|dividing"):
        Trainer(load_config(None, base_overrides(tiny_model_dir, arith_data, None, **{
            "control.kind": "sagc", "control.candidates": "[3, 4]"})), tmp_path / "x")
    with pytest.raises(UserError, match="delta"):
        Trainer(load_config(None, base_overrides(tiny_model_dir, arith_data, None, **{
            "control.kind": "sagc", "control.candidates": "[4, 8]", "control.delta": 1.5})), tmp_path / "y")
