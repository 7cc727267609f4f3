"""`tailrl demo demo.task=tools` end to end on a tiny warm start: SFT with calculator calls, the single-turn
baseline, one multi-turn GRPO step with the tool, the run directory and its summary."""

import json

import pytest

from tailrl.demo.tools_data import ToolsMix
from tailrl.demo.tools_run import run_tools_demo
from tailrl.demo.warmstart import WarmStartParams

TINY = WarmStartParams(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, batch=16, steps=200, lr=5e-3)
SUMMARY_KEYS = ("accuracy_before", "accuracy_after", "single_turn_accuracy", "single_turn_accuracy_after",
                "turns_mean_first_step", "turns_mean_last_step", "tool_calls_per_rollout_first_step",
                "tool_calls_per_rollout_last_step", "eval_tool_calls_before", "eval_tool_calls_after", "tool_errors",
                "tool_timeouts", "steps", "wall_s", "warm_start")


@pytest.mark.slow  # trains a warm start, starts tool workers
def test_tools_demo_end_to_end_on_a_tiny_warm_start(tmp_path):
    run = tmp_path / "run"
    overrides = ["train.total_steps=1", "train.rollout_batch_size=16", "rollout.group_size=4", "train.eval_every=1",
                 "train.eval_prompts=16", "train.tensorboard=false", "rollout.max_new_tokens=96"]
    assert run_tools_demo(str(run), overrides, spec=TINY, mix=ToolsMix(p_tools=1.0, p_call=0.75),
                          cache_root=tmp_path / "cache") == 0
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "report.png", "data/train.jsonl", "data/test.jsonl"):
        assert (run / name).is_file(), name
    summary = json.loads((run / "summary.json").read_text())
    assert all(key in summary for key in SUMMARY_KEYS)
    assert summary["steps"] == 1 and summary["warm_start"]["sft_steps"] == TINY.steps
    assert summary["turns_mean_first_step"] > 1.0  # rollouts called the tool and continued after its answer
    assert summary["tool_calls_per_rollout_first_step"] > 0 and summary["eval_tool_calls_before"] > 0
    assert [p.name for p in (tmp_path / "cache").iterdir()][0].startswith("demo-tools-policy-")
    cfg = (run / "config.yaml").read_text()
    assert "- calculator" in cfg and "chat_template: true" in cfg
