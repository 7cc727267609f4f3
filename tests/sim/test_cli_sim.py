"""`tailrl profile engine`, `tailrl generate --trace` and `tailrl simulate` end to end on a tiny model."""

import json

import pytest

from tailrl.cli import main
from tests.helpers import make_model_dir


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("m") / "tiny")


def test_profile_generate_trace_and_replay(model_dir, tmp_path, capsys):
    prof = tmp_path / "prof.json"
    assert main(["profile", "engine", "--model", str(model_dir), "--batches", "1", "4", "--contexts", "4", "12",
                 "--steps", "10", "--out", str(prof)]) == 0
    p = json.loads(prof.read_text())
    assert set(p["decode"]["1"]) == {"1", "4"} and p["prefill"]["1"]
    assert all(s > 0 for pts in p["decode"]["1"].values() for _, s in pts)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "Hello"}\n{"prompt": "2+3?"}\n')
    trace = tmp_path / "trace.jsonl"
    assert main(["generate", "--model", str(model_dir), "--prompts", str(prompts), "--n", "3", "--max-new-tokens", "16",
                 "--out", str(tmp_path / "o.jsonl"), "--trace", str(trace)]) == 0
    row = json.loads(trace.read_text())
    assert len(row["rounds"][0]["requests"]) == 6
    capsys.readouterr()
    out = tmp_path / "sim"
    assert main(["simulate", f"workload.trace={trace}", f"latency.profile={prof}", "--out", str(out)]) == 0
    steps = json.loads((out / "steps.json").read_text())["steps"]
    assert len(steps) == 1 and steps[0]["gen_s"] > 0 and steps[0]["measured_gen_s"] == row["rounds"][0]["t_end"]
    assert (out / "timeline.png").is_file() and (out / "breakdown.png").is_file()
    assert "| base |" in capsys.readouterr().out


def test_simulate_bundled_config_with_overrides(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["simulate", "pat_h100_llama8b_24k", "workload.steps=1", "workload.max_new_tokens=4096", "workload.mean_len=800",
                 "--out", str(out)]) == 0
    md = (out / "summary.md").read_text()
    assert "PAT" in md and "static TP8/DP1" in md and "gen speed-up" in md


def test_simulate_errors_are_one_line(tmp_path, capsys):
    assert main(["simulate", "nope.yaml", "--out", str(tmp_path)]) == 2
    assert main(["simulate", "cluster.tp=3", "--out", str(tmp_path)]) == 2
    assert main(["profile", "engine", "--model", "x", "--steps", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 3 and "Traceback" not in err
