"""`tailrl bench engine`'s pieces on a tiny model: the decode-step measurement and its counts, the roofline
arithmetic, sampling vs the LM head, and the long-tailed workload against HF generate (both caches)."""

import statistics

import pytest
import torch

from tailrl.bench.engine import cut_cost, decode_step, roofline_fraction, sampler_vs_head, summary
from tailrl.bench.engine_tail import long_tail, make_lengths
from tailrl.cli import main
from tailrl.perf.hardware import GPU, ModelShape
from tests.helpers import tiny_native


def test_decode_step_measures_and_counts():
    model = tiny_native("llama", vocab=97)[0]
    r = decode_step(model, batch=3, context=10, steps=2, warmup=1, device="cpu", overrides={})
    assert r["batch"] == 3 and len(r["step_ms_all"]) == 2 and r["ops"] > 10
    assert r["step_ms"] == pytest.approx(statistics.median(r["step_ms_all"]))  # the median of the timed steps
    assert r["attention"] == "torch" and not r["static"]
    nested = decode_step(model, batch=2, context=6, steps=1, warmup=1, device="cpu",
                         overrides={"spec": {"method": "ngram"}, "sampler": "inverse_cdf"})  # --engine spec.method=...
    assert nested["batch"] == 2 and nested["step_ms"] == pytest.approx(statistics.median(nested["step_ms_all"]))


def test_roofline_fraction_is_bytes_over_bandwidth_over_time():
    spec = ModelShape("m", layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=100)
    gpu = GPU("g", 1.0, hbm_tbps=1.0, hbm_gb=1.0, link_gbps=1.0)
    s2 = ModelShape(**{**spec.__dict__, "bytes_per_param": 2})
    read = s2.weight_bytes + 4 * 32 * s2.kv_bytes_per_token
    assert roofline_fraction(spec, 2, 4, 32, step_ms=1.0, gpu=gpu) == pytest.approx(read / 1e12 / 1e-3)


def test_sampling_vs_head_and_long_tail_vs_hf(tmp_path):
    s = sampler_vs_head("cpu", torch.float32, "blocked", batch=4, vocab=1000, hidden=32, reps=2)
    assert s["lm_head_ms"] > 0 and s["sampling_ms"] > 0 and s["sampling_cut_ms"] > 0
    cut = cut_cost("cpu", 3, 500, reps=2)
    assert cut["torch_ms"] > 0 and "kernel_ms" not in cut  # the kernel only where it runs: CUDA
    spec = ModelShape("tiny", layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=97)
    t = long_tail(spec, "LlamaForCausalLM", "cpu", torch.float32, batch=4, median=6, sigma=1.0,
                  max_len=16, temperature=1.0, repeat=1, seed=0, engine_overrides={}, progress=lambda *_: None)
    assert set(t["best"]) == {"hf_dynamic_cache", "hf_static_cache", "tailrl"} and t["ratio_vs_hf_static"] > 0
    assert max(make_lengths(4, 6, 1.0, 8, 16, 0)) == 16  # the straggler gets the whole budget
    md = summary({"gpu": None, "dtype": "float32", "torch": "x", "steps": [], "sampling": s, "long_tail": t,
                  "cuts": [cut, {**cut, "kernel_ms": cut["torch_ms"] / 4, "equal": True}]})
    assert "hf_static_cache" in md and "tailrl vs HF generate" in md
    assert "with top-k 50 / top-p 0.95" in md and "the Triton kernel" in md and "(4.0x), floors equal" in md


def test_bad_arguments_are_one_line(capsys):
    assert main(["bench", "engine", "--batches", "0"]) == 2
    assert "need batch sizes >= 1" in capsys.readouterr().err
    assert main(["bench", "engine", "--engine", "attention=flash", "--no-tail"]) == 2
    assert "unknown engine.attention 'flash'" in capsys.readouterr().err
    assert main(["bench", "rewards", "--batch", "10", "--group", "4"]) == 2
    assert "--batch a multiple of --group" in capsys.readouterr().err
    assert main(["bench", "exactness", "--engine", "exact=strict"]) == 2
    assert "use --exact and --batches" in capsys.readouterr().err
    assert main(["bench", "exactness", "--engine", "colour=red"]) == 2
    assert "colour" in capsys.readouterr().err
    assert main(["bench", "engine", "--engine", "max_batch_size=8", "--no-tail"]) == 2
    assert "--engine max_batch_size: set by the benchmark" in capsys.readouterr().err
    assert main(["bench", "exactness", "--shape", "huge", "--out-dir", "unused"]) == 2
    assert "unknown model shape 'huge'; valid: tiny, small, " in capsys.readouterr().err
    assert main(["bench", "exactness", "--tp", "1", "--out-dir", "unused"]) == 2
    assert "--tp >= 2 (--no-tp: no TP run)" in capsys.readouterr().err


def test_samplers_side_by_side(tmp_path):
    """--samplers: every decode step timed once per sampler, interleaved, and the tokens/s ratio table."""
    from tailrl.bench.engine import run_engine_bench

    res = run_engine_bench(str(tmp_path), ["tiny"], [1, 2], context=8, steps=1, warmup=0, device="cpu",
                           dtype="float32", tail=False, tail_batch=1, tail_max_len=8, tail_median=4.0,
                           tail_shape="small", repeat=1, overrides={}, progress=lambda *_: None, sampling_batch=2,
                           samplers=["blocked", "gumbel"])
    assert [(r["batch"], r["sampler"]) for r in res["steps"]] == [(1, "blocked"), (1, "gumbel"), (2, "blocked"),
                                                                   (2, "gumbel")]
    assert [s["sampler"] for s in res["samplings"]] == ["blocked", "gumbel"]
    md = (tmp_path / "summary.md").read_text()
    want = res["steps"][0]["step_ms"] / res["steps"][1]["step_ms"]
    assert "relative to `blocked`" in md and f"| tiny | 1 | {want:.3f}x |" in md
    assert main(["bench", "engine", "--samplers", "gumbel", "--engine", "sampler=blocked", "--no-tail"]) == 2
