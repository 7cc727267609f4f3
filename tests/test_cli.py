"""The `tailrl` command: generate contract and one-line errors with exit code 2."""

import json
import os
import subprocess
import sys

import pytest

from tailrl.cli import main
from tests.helpers import make_model_dir


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("m") / "tiny")


def _prompts(tmp_path, lines):
    p = tmp_path / "prompts.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_generate_contract(model_dir, tmp_path, capsys):
    prompts = _prompts(tmp_path, ['{"prompt": "Hello"}', '{"messages": [{"role": "user", "content": "2+3?"}]}',
                                  "this is not json", '{"prompt": ""}', '{"prompt": "' + "x" * 600 + '"}'])
    out, png = tmp_path / "out.jsonl", tmp_path / "tl.png"
    rc = main(["generate", "--model", str(model_dir), "--prompts", str(prompts), "--n", "3", "--max-new-tokens", "12",
               "--temperature", "0.9", "--top-p", "0.95", "--seed", "4", "--out", str(out), "--timeline", str(png)])
    assert rc == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 15
    assert {k for k in rows[0]} >= {"prompt_index", "sample_index", "token_ids", "text", "finish_reason", "num_tokens"}
    by = {(r["prompt_index"], r["sample_index"]): r for r in rows}
    assert all(by[(i, k)]["finish_reason"] in ("stop", "length") for i in (0, 1) for k in range(3))
    assert all(by[(i, 0)]["finish_reason"] == "error" for i in (2, 3, 4))
    assert "line 3" in by[(2, 0)]["error"] and "empty" in by[(3, 0)]["error"] and "context" in by[(4, 0)]["error"]
    assert by[(0, 0)]["num_tokens"] == len(by[(0, 0)]["token_ids"]) > 0
    head = png.read_bytes()[:24]  # a PNG whose IHDR holds the figure's size: 8 x 3.5 inches at 120 dpi
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    assert (int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")) == (960, 420)
    err = capsys.readouterr().err
    assert "straggler rate" in err and "tail efficiency" in err and "tokens/s" in err
    # same seed, same tokens
    out2 = tmp_path / "out2.jsonl"
    main(["generate", "--model", str(model_dir), "--prompts", str(prompts), "--n", "3", "--max-new-tokens", "12",
          "--temperature", "0.9", "--top-p", "0.95", "--seed", "4", "--out", str(out2)])
    assert out2.read_text() == out.read_text()


def _run_cli(*args):
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    return subprocess.run([sys.executable, "-m", "tailrl.cli", *args], capture_output=True, text=True, env=env)


@pytest.mark.slow
def test_missing_folder_is_one_line(tmp_path):
    r = _run_cli("generate", "--model", str(tmp_path / "nope"), "--prompts", "x.jsonl")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "model folder not found" in r.stderr


def test_bad_inputs_exit_2(model_dir, tmp_path, capsys):
    prompts = _prompts(tmp_path, ['{"prompt": "hi"}'])
    unsupported = tmp_path / "gpt2"
    unsupported.mkdir()
    (unsupported / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}))
    noweights = tmp_path / "noweights"
    noweights.mkdir()
    (noweights / "config.json").write_text((model_dir / "config.json").read_text())
    cases = {
        str(unsupported): "unsupported architecture GPT2LMHeadModel",
        str(noweights): "no weight files",
    }
    for path, msg in cases.items():
        assert main(["generate", "--model", path, "--prompts", str(prompts)]) == 2
        assert msg in capsys.readouterr().err
    assert main(["generate", "--model", str(model_dir), "--prompts", str(tmp_path / "missing.jsonl")]) == 2
    assert "prompts file not found" in capsys.readouterr().err
    assert main(["generate", "--model", str(model_dir), "--prompts", str(prompts), "--engine", "max_batch=3"]) == 2
    assert "unknown config key 'max_batch'" in capsys.readouterr().err


@pytest.mark.slow
def test_debug_shows_traceback(tmp_path):
    r = _run_cli("--debug", "generate", "--model", str(tmp_path / "nope"), "--prompts", "x.jsonl")
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_generate_with_speculation_and_bad_spec(model_dir, tmp_path, capsys):
    prompts = _prompts(tmp_path, ['{"prompt": "abcabcabc"}'])
    out = tmp_path / "o.jsonl"
    assert main(["generate", "--model", str(model_dir), "--prompts", str(prompts), "--n", "2", "--max-new-tokens", "12",
                 "--spec", "auto", "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 2
    assert main(["generate", "--model", str(model_dir), "--prompts", str(prompts), "--spec", "magic"]) == 2
    assert "unknown engine.spec.method 'magic'; valid: none, draft, ngram, history, auto, draft:PATH" in \
        capsys.readouterr().err


def test_bench_sagc_bad_candidates_is_one_line(capsys):
    assert main(["bench", "sagc", "--batch", "128", "--candidates", "3", "8"]) == 2
    assert "--candidates must be group sizes >= 2 dividing --batch 128" in capsys.readouterr().err
    assert main(["bench", "sagc", "--start-g", "32"]) == 2
    assert "--start-g 32 is not one of --candidates" in capsys.readouterr().err


@pytest.mark.slow
def test_decoupled_generate_and_tgs_profile(model_dir, tmp_path, capsys):
    """`tailrl profile spec` writes a profile the engine reads; decoupled generation through the CLI gives
    the same completions as plain decoding (the model drafting for itself)."""
    prompts = _prompts(tmp_path, ['{"prompt": "abcabcabc"}', '{"prompt": "hello"}'])
    prof = tmp_path / "tgs.json"
    assert main(["profile", "spec", "--model", str(model_dir), "--draft", str(model_dir), "--threads", "1",
                 "--batches", "1", "4", "--windows", "1", "2", "--reps", "1", "--out", str(prof)]) == 0
    assert {"1"} <= set(json.loads(prof.read_text())["verifies"])
    outs = {}
    for name, extra in (("plain", []), ("decoupled", ["--spec", f"draft:{model_dir}", "--engine", "spec.mode=decoupled",
                                                      "--engine", f"spec.decoupled.profile={prof}", "--engine", "spec.gate=false"])):
        out = tmp_path / f"{name}.jsonl"
        assert main(["generate", "--model", str(model_dir), "--prompts", str(prompts), "--n", "2",
                     "--max-new-tokens", "12", "--out", str(out)] + extra) == 0
        outs[name] = [json.loads(line)["token_ids"] for line in out.read_text().splitlines()]
    assert outs["decoupled"] == outs["plain"]


def test_bench_spec_modes_and_e2e_bad_arguments_are_one_line(capsys):
    assert main(["bench", "spec", "--mode", "decoupled", "--threads", "1"]) == 2
    assert "--threads >= 2 (one drafts)" in capsys.readouterr().err
    assert main(["bench", "e2e", "--steps", "0"]) == 2
    assert "need --steps >= 1" in capsys.readouterr().err


def test_profile_draft_and_bench_spec_tail_bad_arguments_are_one_line(capsys, tiny_model_dir, tmp_path):
    assert main(["bench", "spec", "--workloads", "tail", "--epochs", "1"]) == 2
    assert "--epochs >= 2" in capsys.readouterr().err
    prompts = tmp_path / "q.jsonl"
    prompts.write_text('{"question": "1+1?"}\n')
    assert main(["profile", "draft", "--model", str(tiny_model_dir), "--prompts", str(prompts), "--samples", "0"]) == 2
    assert "--samples" in capsys.readouterr().err
    assert main(["profile", "draft", "--model", str(tiny_model_dir), "--prompts", str(prompts), "--layers", "7"]) == 2
    assert "the model has layers 0..1" in capsys.readouterr().err


def test_output_to_a_file_is_line_buffered(monkeypatch):
    """Progress lines reach a log file as they come (`nohup tailrl bench ... > log`), not at exit."""
    import io

    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", out)
    assert not out.line_buffering
    assert main(["config", "show"]) == 0
    assert out.line_buffering
