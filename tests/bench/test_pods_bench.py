"""The PODS benchmark's read-out: seed-mean curves and time to 0.99 x GRPO's peak (hand-computed cases)."""

import pytest

from tailrl.bench.pods import mean_curve, speedups, time_to_reach


def test_mean_curve_averages_per_step_over_the_steps_every_seed_has():
    a = [(0, 0.0, 0.3), (5, 10.0, 0.4), (10, 20.0, 0.5), (13, 26.0, 0.7)]  # budget ran out at step 13
    b = [(0, 0.0, 0.3), (5, 14.0, 0.6), (10, 24.0, 0.2), (15, 36.0, 0.9), (17, 40.0, 0.1)]
    assert mean_curve([a, b]) == [(0.0, 0.3), (12.0, pytest.approx(0.5)), (22.0, pytest.approx(0.35))]


def test_time_zero_counts_as_reached():
    assert time_to_reach([(0.0, 0.5), (3.0, 0.6)], 0.4) == 0.0


def test_seed_overrides_are_refused():
    from tailrl.bench.pods import run_pods_bench
    from tailrl.errors import UserError

    with pytest.raises(UserError, match="--seeds"):
        run_pods_bench("unused", 4, 4, 16, 1.0, False, ["rollout.seed=3"])


def test_speedups_against_the_base_peak():
    curves = {"grpo_m": [(0.0, 0.30), (10.0, 0.35), (40.0, 0.40), (60.0, 0.38)],
              "pods_max_variance": [(0.0, 0.30), (15.0, 0.397), (30.0, 0.41)],
              "pods_max_reward": [(0.0, 0.30), (30.0, 0.33)]}
    target, sp = speedups(curves)
    assert target == pytest.approx(0.396)
    assert sp["grpo_m"] == (40.0, 1.0)
    assert sp["pods_max_variance"] == (15.0, pytest.approx(40 / 15))
    assert sp["pods_max_reward"] == (None, None)
    assert time_to_reach(curves["grpo_m"], 0.5) is None
