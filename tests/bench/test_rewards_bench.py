"""The streaming-rewards benchmark: its math workload, and a small run end to end (fast `boxed` reward)."""

import json
import random

import pytest

from tailrl.bench.rewards import Workload, final_answer_text, run_rewards_bench
from tailrl.rewards.math import math_reward

pytestmark = pytest.mark.slow  # every test here starts processes


def test_most_answers_are_wrong_and_none_of_the_wrong_ones_is_an_integer():
    rng = random.Random(0)
    answers = [final_answer_text(rng, "72", 0.85) for _ in range(400)]
    wrong = [a for a in answers if a != "72"]
    assert 0.75 < len(wrong) / len(answers) < 0.95
    assert not any(a.strip().lstrip("-").isdigit() for a in wrong)  # so math-verify, not the integer path, decides


def test_workload_ground_truth_matches_its_correct_answers():
    work = Workload(batch=16, group=4, max_new=8, median=4, wrong=0.0, seed=3)
    for question, gold, correct in work.rows:
        assert math_reward(question, rf"so \boxed{{{correct}}}", answer=gold) == 1.0
    requests = work.requests()
    assert len(requests) == 4 and all(len(r.max_new_tokens) == 4 and max(r.max_new_tokens) <= 8 for r in requests)


def test_small_run_scores_the_same_both_ways(tmp_path):
    result = run_rewards_bench(tmp_path, batch=16, workers=1, group=4, max_new_tokens=16, median_tokens=6,
                               functions=("boxed",))
    assert result["batch"] == 16 and result["scores_match"]
    assert 0.0 <= result["tail_s"] <= result["end_to_end_s_streaming"]  # the tail is part of the streaming run
    assert result["tail_fraction"] == pytest.approx(result["tail_s"] / result["score_s_sequential"])
    assert json.loads((tmp_path / "result.json").read_text())["tail_fraction"] == result["tail_fraction"]
    assert "tail / sequential scoring" in (tmp_path / "summary.md").read_text()
