"""Advantages and losses vs slow loop oracles written from veRL's and TRL's definitions."""

import math

import pytest
import torch

from tailrl.algo import ADVANTAGES, AggNorm, aggregate, policy_loss
from tailrl.algo.logprobs import completion_logprobs


def verl_grpo_oracle(scores, groups, eps=1e-6, norm_by_std=True):
    """veRL compute_grpo_outcome_advantage, transcribed as a Python loop over groups."""
    by = {}
    for i, g in enumerate(groups.tolist()):
        by.setdefault(g, []).append(float(scores[i]))
    out = []
    for i, g in enumerate(groups.tolist()):
        vals = torch.tensor(by[g], dtype=torch.float64)
        if len(vals) == 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = vals.mean().item(), vals.std().item()
        out.append((float(scores[i]) - mean) / (std + eps) if norm_by_std else float(scores[i]) - mean)
    return torch.tensor(out)


def test_advantages_match_verl_definition():
    g = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 2, (40,), generator=g).float() + torch.rand(40, generator=g) * 0.1
    groups = torch.tensor(sum(([k] * n for k, n in enumerate([4, 8, 1, 3, 16, 8])), []))
    scores = scores[: len(groups)]
    assert torch.allclose(ADVANTAGES["grpo"](scores, groups), verl_grpo_oracle(scores, groups).float(), atol=1e-6)
    assert torch.allclose(ADVANTAGES["drgrpo"](scores, groups),
                          verl_grpo_oracle(scores, groups, norm_by_std=False).float(), atol=1e-6)
    same = torch.ones(8)
    assert torch.equal(ADVANTAGES["grpo"](same, torch.zeros(8, dtype=torch.long)), torch.zeros(8))


def trl_loss_oracle(logp, old, adv, mask, eps_low, eps_high, beta, ref, loss_type, max_len):
    """TRL GRPOTrainer._compute_loss, token by token in Python."""
    S, T = logp.shape
    per_tok = [[None] * T for _ in range(S)]
    for s in range(S):
        for t in range(T):
            c1 = torch.exp(logp[s, t] - old[s, t])
            c2 = torch.clamp(c1, 1 - eps_low, 1 + eps_high)
            loss = -torch.min(c1 * adv[s], c2 * adv[s])
            if beta:
                d = ref[s, t] - logp[s, t]
                loss = loss + beta * (torch.exp(d) - d - 1)
            per_tok[s][t] = loss * mask[s, t]
    if loss_type == "grpo":
        return sum(sum(per_tok[s]) / max(mask[s].sum(), 1) for s in range(S)) / S
    if loss_type == "dapo":
        return sum(sum(r) for r in per_tok) / mask.sum()
    if loss_type == "dr_grpo":
        return sum(sum(r) for r in per_tok) / (S * max_len)
    raise ValueError(loss_type)


MODES = {"grpo": "seq-mean-token-mean", "dapo": "token-mean", "dr_grpo": "seq-mean-token-sum-norm"}


@pytest.mark.parametrize("loss_type", list(MODES))
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_loss_and_grad_match_trl_formulas(loss_type, beta):
    g = torch.Generator().manual_seed(1)
    S, T = 5, 7
    base = torch.randn(S, T, generator=g, dtype=torch.float64) * 0.3 - 1.0
    old = base + torch.randn(S, T, generator=g, dtype=torch.float64) * 0.3  # ratios far from 1: clipping active
    ref = base + torch.randn(S, T, generator=g, dtype=torch.float64) * 0.1
    adv = torch.randn(S, generator=g, dtype=torch.float64)
    mask = (torch.rand(S, T, generator=g) > 0.3).double()
    mask[:, 0] = 1
    lp1 = base.clone().requires_grad_(True)
    lp2 = base.clone().requires_grad_(True)
    ref_loss = trl_loss_oracle(lp1, old, adv, mask, 0.2, 0.28, beta, ref, loss_type, max_len=T)
    ref_loss.backward()
    out = policy_loss(lp2, old, adv, 0.2, 0.28, ref_logp=ref, kl_coef=beta)
    ours = aggregate(out["loss"], mask, MODES[loss_type], AggNorm.of(mask, T))
    ours.backward()
    assert abs(ours.item() - ref_loss.item()) <= 1e-6
    assert (lp1.grad - lp2.grad).abs().max().item() <= 1e-6
    assert out["clipped"].any()


@pytest.mark.parametrize("mode", list(MODES.values()))
def test_aggregation_independent_of_micro_batch_split(mode):
    g = torch.Generator().manual_seed(2)
    S, T = 12, 9
    loss = torch.randn(S, T, generator=g, dtype=torch.float64)
    mask = (torch.rand(S, T, generator=g) > 0.4).double()
    norm = AggNorm.of(mask, T)
    whole = aggregate(loss, mask, mode, norm)
    for splits in ([1] * 12, [5, 7], [3, 3, 6]):
        parts = sum(aggregate(lo, m, mode, norm) for lo, m in zip(loss.split(splits), mask.split(splits)))
        assert math.isclose(parts.item(), whole.item(), rel_tol=0, abs_tol=1e-12)


def test_completion_logprobs_vs_loop():
    from tests.helpers import tiny_native

    model, _ = tiny_native("llama")
    prompts = [[5, 6, 7], [8, 9]]
    comps = [[10, 11, 12, 13], [14, 15]]
    L = max(len(p) + len(c) for p, c in zip(prompts, comps))
    ids = torch.zeros(2, L, dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompts, comps)):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
    with torch.no_grad():
        fast = completion_logprobs(model, ids, torch.tensor([3, 2]), 4, temperature=0.7)
        for i, (p, c) in enumerate(zip(prompts, comps)):
            full = torch.tensor([p + c])
            lp = (model(full)[0] / 0.7).log_softmax(-1)
            ref = [lp[len(p) - 1 + t, c[t]].item() for t in range(len(c))]
            assert torch.allclose(fast[i, : len(c)], torch.tensor(ref), atol=1e-5)
