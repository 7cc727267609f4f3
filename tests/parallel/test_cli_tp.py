"""`tailrl profile tp` and `tailrl generate --tp/--dp/--switch` end to end (2 gloo ranks)."""

import json

import pytest

from tailrl.cli import main
from tests.helpers import ends, make_model_dir

pytestmark = pytest.mark.slow  # every test here starts processes


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("m") / "tiny")


def _gen(model_dir, tmp_path, name, *extra):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "Hello"}\n{"prompt": "2+3?"}\n{"prompt": ""}\n')
    out = tmp_path / f"{name}.jsonl"
    assert main(["generate", "--model", str(model_dir), "--prompts", str(prompts), "--n", "3", "--max-new-tokens", "24",
                 "--ignore-eos", "--seed", "5", "--out", str(out), *extra]) == 0
    return [json.loads(x) for x in out.read_text().splitlines()]


def test_profile_then_generate_over_layouts_is_identical(model_dir, tmp_path, capsys):
    prof = tmp_path / "prof.json"
    assert main(["profile", "tp", "--model", str(model_dir), "--world", "2", "--batches", "1", "4", "--contexts", "8",
                 "--steps", "10", "--out", str(prof)]) == 0
    p = json.loads(prof.read_text())
    assert set(p["decode"]) == {"1", "2"} and p["bandwidth"] > 0 and p["prefill"]["2"]
    single = _gen(model_dir, tmp_path, "single")
    assert [r["finish_reason"] for r in single].count("error") == 3  # the empty prompt
    for name, extra in [("dp2", ["--dp", "2"]), ("tp2", ["--tp", "2"]),
                        ("forced", ["--dp", "2", "--switch", "tp2@4:recompute"]),
                        ("auto", ["--dp", "2", "--switch", "auto", "--tp-profile", str(prof)])]:
        rows = _gen(model_dir, tmp_path, name, *extra)
        assert [(r["prompt_index"], r["sample_index"], r["token_ids"]) for r in rows] == \
            [(r["prompt_index"], r["sample_index"], r["token_ids"]) for r in single], name
    assert "TP1/DP2 -> TP2/DP1" in capsys.readouterr().err


def test_layout_errors_are_one_line(model_dir, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "Hi"}\n')
    base = ["generate", "--model", str(model_dir), "--prompts", str(prompts)]
    assert main(base + ["--tp", "3"]) == 2
    assert main(base + ["--dp", "2", "--switch", "auto"]) == 2
    assert main(base + ["--dp", "2", "--switch", "sideways"]) == 2
    assert main(["profile", "tp", "--model", str(model_dir), "--world", "2", "--tps", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 4 and "Traceback" not in err


def test_torchrun_launch_matches_single_process(model_dir, tmp_path):
    import os
    import subprocess
    import sys

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "Hello"}\n{"prompt": "2+3?"}\n')
    common = ["--model", str(model_dir), "--prompts", str(prompts), "--max-new-tokens", "20", "--ignore-eos"]
    single = tmp_path / "single.jsonl"
    assert main(["generate", *common, "--n", "2", "--out", str(single)]) == 0
    out = tmp_path / "tr.jsonl"
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    # --standalone: a free rendezvous port (the default 29500 can be taken: a rank then aborts)
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
                        "tailrl.parallel.torchrun", *common, "--samples", "2", "--switch", "tp2@3:recompute",
                        "--out", str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, ends(r.stderr)
    assert "TP1/DP2 -> TP2/DP1" in r.stderr
    key = lambda rows: [(x["prompt_index"], x["sample_index"], x["token_ids"]) for x in rows]  # noqa: E731
    load = lambda p: [json.loads(x) for x in p.read_text().splitlines()]  # noqa: E731
    assert key(load(out)) == key(load(single))
