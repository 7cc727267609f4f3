"""Run report and the SAGC bench's per-run summary (pure)."""

import pytest

from tailrl.bench.sagc import summarize
from tailrl.train.report import report_figure, write_report


def _row(step, G, rate, reward, prompts, **extra):
    return {"step": step, "rollout/group_size": G, "rollout/straggler_rate": rate, "reward/mean": reward,
            "data/prompts": prompts, "timing_s/cumulative": float(step), "timing_s/gen": 0.5,
            "rollout/tail_efficiency": 0.5, "response_length/mean": 10.0 + step} | extra


def test_summary_weights_groups_and_takes_the_tail_of_the_budget():
    rows = [{"step": 0, "eval/accuracy": 0.3}, _row(1, 16, 1.0, 0.0, 8), _row(2, 4, 0.0, 1.0, 32),
            {"step": 2, "eval/accuracy": 0.5}]
    s = summarize(rows, prompt_budget=40, tail_frac=0.2)  # the last 20% of 40 prompts = step 2 only
    assert s["straggler_rate"] == pytest.approx(8 / 40)  # per group, not per step
    assert s["final_reward"] == 1.0 and s["steps"] == 2 and s["prompts"] == 40
    assert s["accuracy_start"] == 0.3 and s["accuracy_end"] == 0.5 and s["group_sizes"] == [16, 4]


def _panel(fig, ylabel: str):
    return next(a for a in fig.axes if a.get_ylabel() == ylabel)


def test_report_adds_sagc_panels(tmp_path):
    rows = [_row(i, g, 0.2, 0.5, 16, **{"sagc/lambda": lam, "sagc/delta": 0.1, "sagc/p_hat/G=4": 0.1 * i,
                                         "sagc/p_hat/G=8": 0.2})
            for i, (g, lam) in enumerate([(8, 0.0), (8, 0.4), (4, 0.9), (4, 0.6)], start=1)]
    fig = report_figure(rows, None, 1.25)
    g_line = _panel(fig, "group size G").get_lines()[0]
    assert list(g_line.get_xdata()) == [1, 2, 3, 4] and list(g_line.get_ydata()) == [8, 8, 4, 4]
    assert list(_panel(fig, "λ").get_lines()[0].get_ydata()) == [0.0, 0.4, 0.9, 0.6]
    risk = _panel(fig, "posterior mean P(straggler)")
    by_label = {ln.get_label(): list(ln.get_ydata()) for ln in risk.get_lines()}
    assert by_label["G=4"] == pytest.approx([0.1, 0.2, 0.3, 0.4]) and by_label["G=8"] == [0.2] * 4
    assert list(by_label["target δ"]) == [0.1, 0.1]  # the constraint line
    plain = report_figure([_row(i, 8, 0.2, 0.5, 16) for i in range(1, 5)], None, 1.25)
    assert len(plain.axes) == 4 and not any(a.get_ylabel() == "group size G" for a in plain.axes)
    path = write_report(tmp_path, rows, None, 1.25)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
