"""PAT's switch controller on synthetic profiles: decisions equal hand-computed ones."""

import pytest

from tailrl.model import ModelArgs
from tailrl.parallel.controller import PatDecider, model_bytes
from tailrl.parallel.layout import Layout
from tests.helpers import tiny_hf_config

ARGS = ModelArgs.from_hf(tiny_hf_config(vocab=98))


def profile(tp1_ms, tp2_ms, bandwidth=1e12):
    flat = lambda ms: {"1": [[0, ms / 1e3], [1e6, ms / 1e3]], "64": [[0, ms / 1e3], [1e6, ms / 1e3]]}  # noqa: E731
    return {"decode": {"1": flat(tp1_ms), "2": flat(tp2_ms)}, "prefill": {"1": [[0, 0.0], [1e6, 1.0]],
            "2": [[0, 0.0], [1e6, 1.0]]}, "bandwidth": bandwidth, "group_init_s": 0.0}


def test_layout_groups():
    assert Layout(2, 4).tp_groups() == [(0, 1), (2, 3)] and Layout(2, 4).dp == 2
    assert Layout(1, 2).group_of(1) == (1,) and Layout(2, 2).replica_of(1) == 0
    with pytest.raises(ValueError):
        Layout(3, 4)


def test_switches_when_the_merged_layout_is_predicted_faster():
    # DP2: each replica decodes one request for 100 more tokens at 10 ms -> 1.0 s.
    # TP2: one replica, both requests, 100 tokens at 6 ms -> 0.6 s + switch (weights: TP1 -> TP2 is a
    # local slice, 0 bytes; KV: 2 x 20 tokens at 1 TB/s ~ 0) -> switch.
    d = PatDecider(profile(10, 6), ARGS, world=2, max_new_tokens=100, min_gain=0.0)
    to, path, info = d(8, 0.1, Layout(1, 2), [[(20, 0)], [(20, 0)]])
    assert to == Layout(2, 2) and path == "recompute"  # nothing generated yet: no K/V to migrate
    assert info["predicted_stay_s"] == pytest.approx(1.0)
    assert info["predicted_switch_s"] == pytest.approx(0.6, abs=1e-3)


def test_hysteresis_and_staying():
    # TP2 at 9.5 ms saves 5%: taken with min_gain 0, refused with min_gain 0.1
    assert PatDecider(profile(10, 9.5), ARGS, 2, 100, min_gain=0.0)(8, 0.1, Layout(1, 2), [[(20, 0)], [(20, 0)]])
    assert PatDecider(profile(10, 9.5), ARGS, 2, 100, min_gain=0.1)(8, 0.1, Layout(1, 2), [[(20, 0)], [(20, 0)]]) is None
    # slower TP2: never switch
    assert PatDecider(profile(10, 12), ARGS, 2, 100, min_gain=0.0)(8, 0.1, Layout(1, 2), [[(20, 0)], [(20, 0)]]) is None
    # TP2 -> DP2: splitting 2 requests over 2 replicas at 10 ms beats one replica at 30 ms; weights must move:
    # W/1 - W/2 bytes at 1 GB/s
    w, _ = model_bytes(ARGS)
    d = PatDecider(profile(10, 30, bandwidth=1e9), ARGS, 2, 100, min_gain=0.0)
    to, path, info = d(8, 0.1, Layout(2, 2), [[(20, 5), (20, 5)]])
    assert to == Layout(1, 2)
    assert info["predicted_switch_s"] == pytest.approx(95 * 0.010 + (w - w / 2) / 1e9 + 2 * 20 * model_bytes(ARGS)[1] / 2 / 1e9,
                                                       rel=1e-6)


def test_kv_path_choice():
    # a costly link and free recompute -> recompute
    d = PatDecider(profile(10, 6, bandwidth=1.0), ARGS, 2, 100, min_gain=0.0)
    assert d(8, 0.1, Layout(1, 2), [[(20, 3)], [(20, 3)]])[1] == "recompute"
