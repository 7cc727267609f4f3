"""Rollout correction (TIS / MIS, token and sequence level) vs hand-computed weights and vs TRL's
vllm_importance_sampling_mode and veRL's compute_rollout_correction_weights, transcribed (the oracles)."""

import math

import pytest
import torch

from tailrl.algo import ROLLOUT_CORRECTIONS
from tailrl.algo.rollout_correction import correction_choices

LN = math.log


def test_choices():
    assert correction_choices() == ("none", "token_tis", "seq_tis", "token_mis", "seq_mis")


def test_hand_case():
    # row 0: token ratios 0.5, 3 (+ padding); row 1: 1.5 on three tokens (a product of 3.375); cap C = 2
    log_ratio = torch.tensor([[LN(0.5), LN(3.0), 7.0], [LN(1.5), LN(1.5), LN(1.5)]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    want = {
        "token_tis": ([[0.5, 2.0, 0.0], [1.5, 1.5, 1.5]], [[0, 1, 0], [0, 0, 0]]),
        "token_mis": ([[0.5, 0.0, 0.0], [1.5, 1.5, 1.5]], [[0, 1, 0], [0, 0, 0]]),
        "seq_tis": ([[1.5, 1.5, 0.0], [2.0, 2.0, 2.0]], [[0, 0, 0], [1, 1, 1]]),
        "seq_mis": ([[1.5, 1.5, 0.0], [0.0, 0.0, 0.0]], [[0, 0, 0], [1, 1, 1]]),
    }
    for name, (w, capped) in want.items():
        got_w, got_c = ROLLOUT_CORRECTIONS[name](log_ratio, mask, 2.0)
        torch.testing.assert_close(got_w, torch.tensor(w, dtype=torch.float64), rtol=0, atol=1e-12)
        assert got_c.tolist() == [[bool(x) for x in r] for r in capped], name


def trl_weights(old, sampling, mask, mode, cap):
    """TRL GRPOTrainer (vllm_importance_sampling_correction): the ratio per token or per sequence, then
    clamp(max=cap) for *_truncate or masked_fill(ratio > cap, 0) for *_mask; broadcast to (S, T)."""
    diff = (old - sampling) * mask
    ratio = torch.exp(diff.sum(-1, keepdim=True) if mode.startswith("sequence") else diff)
    ratio = ratio.clamp(max=cap) if mode.endswith("truncate") else ratio.masked_fill(ratio > cap, 0.0)
    return ratio.expand_as(old) * mask


def verl_weights(old, rollout, mask, level, cap):
    """veRL compute_rollout_correction_weights (no batch normalisation): exp of the clamped log ratio (per
    token, or the masked sum per sequence), times the mask, truncated at the threshold."""
    log_ratio = old - rollout
    if level == "token":
        w = torch.exp(log_ratio.clamp(-20, 20))
    else:
        w = torch.exp((log_ratio * mask).sum(-1, keepdim=True).clamp(-20, 20)).expand_as(log_ratio)
    return (w * mask).clamp(max=cap)


@pytest.mark.parametrize("name,trl_mode", [("token_tis", "token_truncate"), ("seq_tis", "sequence_truncate"),
                                           ("token_mis", "token_mask"), ("seq_mis", "sequence_mask")])
def test_matches_trl_and_verl(name, trl_mode):
    g = torch.Generator().manual_seed(0)
    S, T = 16, 7
    old = torch.randn(S, T, generator=g, dtype=torch.float64) * 0.5 - 1.5
    rollout = old + torch.randn(S, T, generator=g, dtype=torch.float64) * 0.4  # ratios on both sides of the cap
    mask = (torch.rand(S, T, generator=g) > 0.25).double()
    mask[:, 0] = 1
    cap = 1.6
    w, capped = ROLLOUT_CORRECTIONS[name](old - rollout, mask, cap)
    torch.testing.assert_close(w, trl_weights(old, rollout, mask, trl_mode, cap), rtol=1e-12, atol=1e-12)
    if name.endswith("tis"):
        level = "token" if name.startswith("token") else "sequence"
        torch.testing.assert_close(w, verl_weights(old, rollout, mask, level, cap), rtol=1e-12, atol=1e-12)
    assert 0 < int(capped.sum()) < int(mask.sum())  # the case has weights on both sides of the cap
    assert not (capped & ~mask.bool()).any()


def test_weights_carry_no_gradient_and_extremes_are_bounded():
    old = torch.tensor([[0.0, -50.0]], requires_grad=True)
    rollout = torch.tensor([[-50.0, 0.0]])
    mask = torch.ones(1, 2)
    w, capped = ROLLOUT_CORRECTIONS["token_tis"](old - rollout, mask, 5.0)
    assert not w.requires_grad
    torch.testing.assert_close(w, torch.tensor([[5.0, math.exp(-20.0)]]))  # exp(+-50) clamped to exp(+-20) first
    assert capped.tolist() == [[True, False]]
