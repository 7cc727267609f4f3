"""PODS rules vs brute force over all subsets (hypothesis), with ties and binary rewards."""

import itertools
import statistics

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tailrl.algo.downsample import DOWNSAMPLE, max_variance, max_variance_binary


def _var(vals):
    return statistics.pvariance(vals) if len(vals) > 1 else 0.0


def brute_max_var(rewards, m):
    return max(_var([rewards[i] for i in s]) for s in itertools.combinations(range(len(rewards)), m))


rewards_st = st.lists(st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(-3, 3, allow_nan=False, width=32)),
                      min_size=2, max_size=12)


@settings(max_examples=250, deadline=None)
@given(rewards=rewards_st, data=st.data())
def test_max_variance_equals_brute_force(rewards, data):
    m = data.draw(st.integers(2, len(rewards)))
    idx = max_variance(torch.tensor(rewards, dtype=torch.float64), m)
    assert idx.numel() == m and len(set(idx.tolist())) == m and idx.tolist() == sorted(idx.tolist())
    got = _var([rewards[i] for i in idx.tolist()])
    assert abs(got - brute_max_var(rewards, m)) <= 1e-9 * max(1.0, abs(got))


@settings(max_examples=150, deadline=None)
@given(bits=st.lists(st.integers(0, 1), min_size=2, max_size=12), data=st.data())
def test_binary_shortcut_is_optimal(bits, data):
    m = data.draw(st.integers(2, len(bits)))
    r = [float(b) for b in bits]
    got = _var([r[i] for i in max_variance_binary(torch.tensor(r), m).tolist()])
    assert abs(got - brute_max_var(r, m)) <= 1e-12


def test_deterministic_tie_breaking_and_other_rules():
    r = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    assert torch.equal(max_variance(r, 4), max_variance(r.clone(), 4))
    assert max_variance(r, 4).tolist() == [1, 2, 3, 4]  # lowest by index first, highest by index last
    assert DOWNSAMPLE["max_reward"](torch.tensor([0.2, 0.9, 0.9, 0.1]), 2, 0).tolist() == [1, 2]
    a = DOWNSAMPLE["random"](torch.zeros(16), 4, 7)
    assert torch.equal(a, DOWNSAMPLE["random"](torch.zeros(16), 4, 7)) and a.numel() == 4
    assert max_variance(torch.ones(5), 3).numel() == 3
    assert max_variance(r, 6).tolist() == list(range(6))
