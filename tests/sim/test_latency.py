import json

import pytest

from tailrl.errors import UserError
from tailrl.perf.hardware import GPU, MODELS, ModelShape, gpu, model_spec
from tailrl.perf.latency import CALIBRATED, EngineOverheads, Profiled, Roofline, interp

TOY = ModelShape("toy", layers=2, hidden=8, heads=2, kv_heads=1, intermediate=16, vocab=10)
TOY_GPU = GPU("toy", tflops=1e-6, hbm_tbps=1e-9, hbm_gb=1.0, link_gbps=1.0)


def test_model_presets_match_published_parameter_counts():
    assert MODELS["llama3.1-8b"].params == pytest.approx(8.03e9, rel=0.01)
    assert MODELS["qwen2.5-32b"].params == pytest.approx(32.8e9, rel=0.02)
    assert MODELS["qwen2.5-0.5b"].params == pytest.approx(0.49e9, rel=0.02)
    # LLaMA3.1-8B KV: 32 layers x 2 x 8 heads x 128 x 2 bytes
    assert MODELS["llama3.1-8b"].kv_bytes_per_token == 131072


def test_roofline_by_hand():
    eng = EngineOverheads(hbm_eff=1.0, mfu=1.0, link_eff=1.0, ar_base_us=10.0, ar_hop_us=1.0, step_ms=1.0)
    lat = Roofline(TOY_GPU, TOY, eng)
    m = TOY
    # tp=1, batch 1, 100 context tokens: memory-bound (bytes / 1 kB/s) vs FLOPs / 1 MFLOP/s
    bytes_ = m.weight_bytes + 100 * m.kv_bytes_per_token
    flops = m.flops_per_token(100)
    assert lat.decode(1, 1, 100) == pytest.approx(max(bytes_ / 1e3, flops / 1e6) + 1e-3)
    # all-reduce: latency + 2 (tp-1)/tp * bytes / bandwidth
    assert lat.allreduce(1, 1e6) == 0.0
    assert lat.allreduce(4, 1e6) == pytest.approx((10 + 1 * 6) * 1e-6 + 2 * 3 / 4 * 1e6 / 1e9)


def test_roofline_monotone_and_tp_trades_bandwidth_for_communication():
    lat = Roofline(TOY_GPU, MODELS["llama3.1-8b"], CALIBRATED["h100"])
    h100 = Roofline(gpu("h100"), MODELS["llama3.1-8b"], CALIBRATED["h100"])
    assert lat.decode(1, 8, 8000) > lat.decode(1, 8, 4000) > 0
    assert h100.decode(2, 64, 64 * 2000) > h100.decode(2, 8, 8 * 2000)
    assert h100.decode(8, 1, 4096) < h100.decode(2, 1, 4096)  # batch 1: more TP, fewer bytes per GPU
    assert h100.prefill(2, 4096) > h100.decode(2, 1, 4096)


def test_a40_calibration_reproduces_pat_decode_latencies():
    """PAT §3.1: LLaMA3.1-8B per-token latency on 8 A40s at global batch 1 / 128, TP2 / TP8."""
    lat = Roofline(gpu("a40"), MODELS["llama3.1-8b"], CALIBRATED["a40"])
    for tp, b, ms in ((2, 1, 15.37), (8, 1, 9.64), (2, 128, 24.41), (8, 128, 30.87)):
        per = max(b // (8 // tp), 1)
        assert lat.decode(tp, per, per * 2048) * 1e3 == pytest.approx(ms, rel=0.15)


def test_interp_exact_between_and_extrapolates():
    xs, ys = [0.0, 10.0, 20.0], [1.0, 2.0, 4.0]
    assert interp(xs, ys, 10.0) == 2.0
    assert interp(xs, ys, 15.0) == 3.0
    assert interp(xs, ys, 30.0) == 6.0
    assert interp(xs, ys, -10.0) == 0.0
    assert interp([5.0], [7.0], 100.0) == 7.0


def test_profiled_interpolates_between_batch_sizes():
    table = {"decode": {"1": {"1": [[0, 1.0], [100, 2.0]], "5": [[0, 3.0], [100, 6.0]]}},
             "prefill": {"1": [[0, 0.5], [100, 1.5]]}}
    p = Profiled(table)
    assert p.decode(1, 1, 50) == pytest.approx(1.5)
    assert p.decode(1, 5, 50) == pytest.approx(4.5)
    assert p.decode(1, 3, 50) == pytest.approx(3.0)  # halfway between the two curves
    assert p.prefill(1, 50) == pytest.approx(1.0)
    assert p.round_s(10) == 0.0 and Profiled({**table, "round": [0.01, 0.001]}).round_s(10) == pytest.approx(0.02)
    assert p.forward(1, 2, 6, 50) == pytest.approx(p.decode(1, 2, 50) + p.prefill(1, 4) - p.prefill(1, 0))
    with pytest.raises(UserError, match="TP=2"):
        p.decode(2, 1, 0)


def test_profiled_errors_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="malformed"):
        Profiled({"decode": 3})
    with pytest.raises(UserError, match="not found"):
        Profiled.load(tmp_path / "nope.json")
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"decode": {"1": {"1": [[0, 1.0]]}}, "prefill": {"1": [[0, 1.0]]}}))
    assert Profiled.load(f).decode(1, 7, 123) == 1.0


def test_model_spec_from_hf_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                                          num_key_value_heads=2, intermediate_size=128, vocab_size=97,
                                                          tie_word_embeddings=True)))
    m = model_spec(str(tmp_path))
    assert (m.layers, m.kv_heads, m.hd, m.tied_embeddings) == (2, 2, 16, True)
    with pytest.raises(UserError, match="presets"):
        model_spec("no-such-model")
