"""Run report and the SAGC bench's per-run summary (pure)."""

import pytest

from tailrl.bench.sagc import summarize
from tailrl.train.report import write_report


def _row(step, G, rate, reward, prompts, **extra):
    return {"step": step, "sagc/group_size": G, "rollout/straggler_rate": rate, "reward/mean": reward,
            "data/prompts": prompts, "timing_s/cumulative": float(step), "timing_s/gen": 0.5,
            "rollout/tail_efficiency": 0.5, "response_length/mean": 10.0 + step} | extra


def test_summary_weights_groups_and_takes_the_tail_of_the_budget():
    rows = [{"step": 0, "eval/accuracy": 0.3}, _row(1, 16, 1.0, 0.0, 8), _row(2, 4, 0.0, 1.0, 32),
            {"step": 2, "eval/accuracy": 0.5}]
    s = summarize(rows, prompt_budget=40, tail_frac=0.2)  # the last 20% of 40 prompts = step 2 only
    assert s["straggler_rate"] == pytest.approx(8 / 40)  # per group, not per step
    assert s["final_reward"] == 1.0 and s["steps"] == 2 and s["prompts"] == 40
    assert s["accuracy_start"] == 0.3 and s["accuracy_end"] == 0.5 and s["group_sizes"] == [16, 4]


def test_report_adds_sagc_panels(tmp_path):
    sagc = {"sagc/lambda": 0.5, "sagc/delta": 0.1, "sagc/p_hat/G=4": 0.1, "sagc/p_hat/G=8": 0.3}
    rows = [_row(i, 8, 0.2, 0.5, 16, **sagc) for i in range(1, 5)]
    path = write_report(tmp_path, rows, None, 1.25)
    assert path.is_file() and path.stat().st_size > 10_000
