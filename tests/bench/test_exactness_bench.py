"""`tailrl bench exactness`: the identity / first-divergence arithmetic on hand-written cases, and a tiny run
(the tests' tiny Llama shape, random weights) that fills every part of the result and its summary."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tailrl.bench.exactness import engine_config, make_requests, run_exactness_bench, tp_unsupported
from tailrl.bench.exactness_stats import (
    compare_runs,
    first_divergence,
    histogram,
    summary,
    token_deltas,
    wilson,
)
from tailrl.model import ModelArgs
from tailrl.perf.hardware import ModelShape
from tests.helpers import tiny_hf_config

TINY = replace(ModelShape.of(ModelArgs.from_hf(tiny_hf_config())), name="tiny")


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([], []) is None
    assert first_divergence([1, 2, 3], [9, 2, 3]) == 0
    assert first_divergence([1, 2, 3], [1, 2, 4]) == 2
    assert first_divergence([1, 2, 3], [1, 2]) == 2  # stopped early: differs where the shorter ends
    assert first_divergence([1], [1, 5]) == 1


def test_wilson_interval_by_hand():
    # 250 / 256 at 95%: p = 0.9766, centre (p + z^2 / 2n) / (1 + z^2 / n), half-width by the Wilson formula
    lo, hi = wilson(250, 256)
    assert (round(lo, 4), round(hi, 4)) == (0.9498, 0.9892)
    assert wilson(32, 32)[1] == 1.0 and round(wilson(32, 32)[0], 4) == 0.8928  # 32/32 is not yet >= 99%
    assert wilson(0, 0) == (0.0, 1.0) and wilson(0, 10)[0] == 0.0


def test_histogram_bins_positions():
    h = histogram([0, 3, 4, 15, 99], length=16, bins=4)
    assert h == {"edges": [0, 4, 8, 12, 16], "counts": [2, 1, 0, 2]}  # 99 is past the end: last bin
    assert histogram([0, 9], length=10, bins=4)["edges"] == [0, 3, 6, 9, 10]


def test_compare_runs_by_hand():
    ref_t = [[1, 2, 3, 4], [5, 6, 7, 8], [1, 1, 1, 1], [2, 2, 2, 2]]
    ref_l = [[-1.0, -2.0, -3.0, -4.0], [-1.0] * 4, [-0.5] * 4, [-0.25] * 4]
    tok = [[1, 2, 3, 4], [5, 6, 0, 0], [1, 1, 1, 1], [9, 2, 2, 2]]
    lps = [[-1.0, -2.0, -3.0, -4.0], [-1.0] * 4, [-0.5, -0.5, -0.5, -0.625], [-0.25] * 4]
    c = compare_runs(ref_t, ref_l, tok, lps, length=4)
    assert c["sequences"] == 4 and c["identical"] == 2 and c["identity_rate"] == 0.5
    d = c["first_divergence"]
    assert (d["count"], d["min"], d["median"], d["max"]) == (2, 0, 1.0, 2)
    assert d["histogram"]["counts"][0] == 1 and sum(d["histogram"]["counts"]) == 2
    assert d["at"] == [[1, 2], [3, 0]]  # [row, first differing position]
    keyed = compare_runs(ref_t, ref_l, tok, lps, length=4, keys=["a", "b", "c", "d"])
    assert keyed["first_divergence"]["at"] == [["b", 2], ["d", 0]]
    assert c["max_abs_dlogprob"] == 0.125  # over identical rows only: row 1's equal logprobs do not count
    assert c["logprobs_bitwise"] == 0.5  # row 0 bitwise, row 2 not
    assert c["logprob_tokens_equal"] == 7 / 8
    same = compare_runs(ref_t, ref_l, ref_t, ref_l, length=4)
    assert same["identity_rate"] == 1.0 and same["first_divergence"] == {"count": 0}
    assert same["max_abs_dlogprob"] == 0.0 and same["logprobs_bitwise"] == 1.0
    with pytest.raises(ValueError, match="different sizes"):
        compare_runs(ref_t, ref_l, tok[:2], lps[:2], length=4)


def test_token_deltas_by_hand():
    t = token_deltas([[-1.0, -2.0], [-3.0]], [[-1.0, -2.5], [-2.0]])
    assert t == {"tokens": 3, "max": 1.0, "mean": 0.5, "equal": pytest.approx(1 / 3)}
    assert token_deltas([], [])["tokens"] == 0


def test_requests_and_engine_config():
    reqs = make_requests(sequences=10, new_tokens=5, vocab=97, seed=0, group=4)
    assert [r.n for r in reqs] == [4, 4, 2] and len({r.uid for r in reqs}) == 3
    assert all(r.params.ignore_eos and r.params.max_new_tokens == 5 and r.params.temperature == 1.0 for r in reqs)
    cfg = engine_config({"attention": "torch", "spec": {"k_max": 3}}, {"max_batch_size": 7, "spec.method": "ngram"})
    assert (cfg.max_batch_size, cfg.attention, cfg.spec.k_max, cfg.spec.method) == (7, "torch", 3, "ngram")


def test_tiny_run_fills_every_comparison(tmp_path):
    res = run_exactness_bench(tmp_path, sequences=8, new_tokens=12, shape=TINY, batches=(1, 4), spec_methods=("auto",),
                              tp=0, progress=lambda *_: None)
    rows = {(c["run"], c["vs"]): c for c in res["comparisons"]}
    assert set(rows) == {("batch 4", "alone (B=1)"), ("spec cold, B=4", "alone (B=1)"),
                         ("spec cold, B=4", "batch 4"), ("spec warm, B=4", "alone (B=1)"),
                         ("spec warm, B=4", "batch 4"), ("cuda graphs", "eager"), ("TP", "TP1")}
    assert "not_measured" in rows[("cuda graphs", "eager")] and "not_measured" in rows[("TP", "TP1")]
    for c in res["comparisons"]:
        if "not_measured" not in c:
            assert c["sequences"] == 8 and c["identity_rate"] == c["identical"] / 8
            assert c["first_divergence"]["count"] == 8 - c["identical"] and c["max_abs_dlogprob"] < 1e-3
    runs = res["runs"]
    assert runs["spec cold, B=4"]["verify_steps"] > 0
    assert runs["spec warm, B=4"]["tokens_per_verify_row"] > 1  # replayed drafts: multi-token verify rows
    for t in res["trainer"]:
        assert t["tokens"] > 0 and 0.0 <= t["max"] < 1e-3  # fp32 on a CPU: rounding, not a different model
    assert res["trainer"][0]["tokens"] == 8 * 12
    md = (tmp_path / "summary.md").read_text()
    assert "| batch 4 | alone (B=1) |" in md and "not measured: no CUDA device" in md
    assert json.loads((tmp_path / "result.json").read_text())["settings"]["shape"] == "tiny"


def test_summary_shows_divergences():
    c = compare_runs([[1, 2, 3, 4]], [[-1.0] * 4], [[1, 2, 9, 9]], [[-1.0] * 4], length=4)
    res = {"settings": dict(exact="strict", shape="small", device="cuda", dtype="bfloat16", sequences=1, prompts=1,
                            group=8, new_tokens=4, sampler="blocked", seed=0), "torch": "x",
           "comparisons": [{"run": "batch 16", "vs": "alone (B=1)", **c}], "trainer": [], "runs": {}, "notes": []}
    md = summary(res)
    assert "| batch 16 | alone (B=1) | 0.00% (0/1; 95% CI 0.0%–79.3%) | 1 at 2 / 2 / 2 (2–2: 1) | 0 | — / — |" in md


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3])
def test_tiny_run_over_tp_ranks(tmp_path, world):
    """TP2, and TP3 on a model with SmolLM2's head counts (9 query, 3 KV: no TP2 split)."""
    shape = TINY if world == 2 else replace(TINY, heads=9, kv_heads=3, hidden=72, intermediate=96)
    res = run_exactness_bench(tmp_path, sequences=4, new_tokens=6, shape=shape, batches=(1, 4), spec_methods=(),
                              tp=world, progress=lambda *_: None)
    tp = [c for c in res["comparisons"] if c["run"].startswith(f"TP{world}")]
    assert [c["vs"] for c in tp] == ["batch 4", "alone (B=1)"]
    assert all(c["sequences"] == 4 and c["identity_rate"] == c["identical"] / 4 for c in tp)
    assert all(c["first_divergence"]["count"] == 4 - c["identical"] for c in tp)


def test_tp_that_does_not_split_names_one_that_does():
    smollm2 = ModelArgs.from_hf(tiny_hf_config(hidden_size=576, num_attention_heads=9, num_key_value_heads=3,
                                               intermediate_size=1536))
    assert tp_unsupported(smollm2, 3) is None
    why = tp_unsupported(smollm2, 2)
    assert "9 query, 3 KV" in why and "--tp 3" in why


def test_a_second_invocation_continues_from_the_kept_runs(tmp_path, monkeypatch):
    """Every finished run is kept: the same command again loads them (no engine is built) and gives the same
    comparisons; a run cut short (here: the speculative one raising) is the only one run again."""
    import tailrl.bench.exactness as ex

    kw = dict(sequences=4, new_tokens=8, shape=TINY, batches=(1, 2), spec_methods=("ngram",), tp=0,
              progress=lambda *_: None)
    real_build = ex.build_engine

    def failing(model, draft, cfg):
        if cfg.spec.method != "none":
            raise KeyboardInterrupt  # the session ends during the speculative run
        return real_build(model, draft, cfg)

    monkeypatch.setattr(ex, "build_engine", failing)
    with pytest.raises(KeyboardInterrupt):
        run_exactness_bench(tmp_path, **kw)
    built = []
    monkeypatch.setattr(ex, "build_engine", lambda m, d, cfg: built.append(cfg.spec.method) or real_build(m, d, cfg))
    first = run_exactness_bench(tmp_path, **kw)
    assert built == ["ngram"]  # batch 1 and batch 2 were kept
    assert {r: v.get("cached_from_commit", "-") != "-" for r, v in first["runs"].items()} == {
        "alone (B=1)": True, "batch 2": True, "spec ngram, B=2": False}
    built.clear()
    again = run_exactness_bench(tmp_path, **kw)
    assert built == [] and again["comparisons"] == first["comparisons"]
    assert "kept from an earlier invocation" in (tmp_path / "summary.md").read_text()
    built.clear()
    run_exactness_bench(tmp_path, **kw, resume=False)
    assert built == ["none", "none", "ngram"]
    other = run_exactness_bench(tmp_path, **{**kw, "seed": 1})  # other settings: other runs
    assert built == ["none", "none", "ngram"] * 2 and other["settings"]["seed"] == 1


def test_a_long_run_reports_its_progress():
    """A line per finished sequence here (every_s=0; 60 s in the bench): done / total, tokens, time left."""
    import torch

    from tailrl.bench.engine import model_of
    from tailrl.bench.exactness import timed_generate
    from tailrl.speculative import build_engine

    model = model_of(TINY, torch.float32, "cpu", 64, 0)
    requests = make_requests(6, 5, model.args.vocab_size, seed=0, group=3)
    engine = build_engine(model, None, engine_config({}, {"max_batch_size": 1}))
    lines: list[str] = []
    outs, info = timed_generate(engine, requests, 5, "cpu", report=lines.append, every_s=0.0)
    engine.close()
    assert len(outs) == 6 and info["tokens"] == 30
    assert len(lines) == 5 and lines[0].startswith("  1/6 sequences, 5 tokens, ") and "min left" in lines[-1]
    assert lines[-1].startswith("  5/6 sequences, 25 tokens")


def test_a_kept_run_of_other_code_is_run_again(tmp_path):
    """A kept run records the digest of every file of the code that could have made it; one changed file (here
    the engine's, as recorded) and it is run again."""
    kw = dict(sequences=2, new_tokens=4, shape=TINY, batches=(2,), spec_methods=(), tp=0, progress=lambda *_: None)
    first = run_exactness_bench(tmp_path, **kw)
    assert all("cached_from_commit" not in r for r in first["runs"].values())
    assert all("cached_from_commit" in r for r in run_exactness_bench(tmp_path, **kw)["runs"].values())
    for kept in tmp_path.glob("runs-*/*.json"):
        d = json.loads(kept.read_text())
        if "files" in d:
            assert "engine/engine.py" in d["files"] and "bench/exactness.py" in d["files"]
            d["files"]["engine/engine.py"] = "0" * 16
            kept.write_text(json.dumps(d))
    again = run_exactness_bench(tmp_path, **kw)
    assert all("cached_from_commit" not in r for r in again["runs"].values())


def test_the_code_a_kept_run_records_is_generation_s_import_closure():
    from tailrl.bench.code_digest import GENERATION_PACKAGES, code_files, same_code

    files = code_files()
    assert {rel.split("/")[0] for rel in files} >= set(GENERATION_PACKAGES) | {"bench", "config", "errors.py"}
    assert {"speculative/decoupled/worker.py", "rewards/procpool_child.py",  # what a drafter process imports
            "bench/exactness.py", "bench/exactness_prompts.py", "engine/sampling/gumbel.py"} <= set(files)
    assert not {"train/trainer.py", "commands/training.py", "bench/common.py"} & set(files)  # not the tokens'
    assert same_code(files) and same_code({**files, "train/trainer.py": "anything"})
    assert not same_code({**files, "engine/engine.py": "0" * 16})
    assert not same_code({k: v for k, v in files.items() if k != "model/decoder.py"}) and not same_code({})


@pytest.mark.slow
def test_the_static_closure_holds_every_module_generation_loads(tmp_path):
    """Oracle: a fresh process imports every module of the generation packages and the benchmark's request
    modules; each tailrl file it loads is in the static closure with the package __init__s on the way (the
    kept runs' closure leaves those out: they only re-export)."""
    import subprocess
    import sys

    from tailrl.bench.code_digest import BENCH_MODULES, GENERATION_PACKAGES, ROOT, closure, code_files

    script = f"""
import importlib, json, pkgutil, sys
import tailrl
for pkg in {list(GENERATION_PACKAGES)!r}:
    p = importlib.import_module("tailrl." + pkg)
    for m in pkgutil.walk_packages(p.__path__, p.__name__ + "."):
        importlib.import_module(m.name)
for rel in {list(BENCH_MODULES)!r}:
    importlib.import_module("tailrl." + rel.removesuffix(".py").replace("/", "."))
print(json.dumps(sorted(m.__file__ for n, m in sys.modules.items()
                        if (n == "tailrl" or n.startswith("tailrl.")) and getattr(m, "__file__", None))))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         cwd=ROOT.parent)
    assert out.returncode == 0, out.stderr[-3000:]
    loaded = {str(Path(f).resolve().relative_to(ROOT)) for f in json.loads(out.stdout)}
    with_inits = {str(f.relative_to(ROOT)) for f in closure(inits=True)}
    assert set(code_files()) <= with_inits and len(loaded) > 50
    outside = loaded - with_inits
    assert not outside, f"loaded by generation, missed by the static closure: {sorted(outside)}"


def test_preemption_run_preempts_with_more_requests_than_the_batch(tmp_path):
    """The KV pool is a quarter of what the running batch needs, not of every request's need (32 requests at
    B = 4: a quarter of all of them holds the whole batch and nothing would be preempted)."""
    res = run_exactness_bench(tmp_path, sequences=32, new_tokens=24, shape=TINY, batches=(4,), spec_methods=(),
                              tp=0, preempt=True, progress=lambda *_: None)
    assert res["runs"]["preemption, B=4"]["preemptions"] > 0
    row = next(c for c in res["comparisons"] if c["run"] == "preemption, B=4")
    assert row["vs"] == "alone (B=1)" and row["sequences"] == 32
