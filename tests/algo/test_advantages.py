"""RLOO and REINFORCE++ advantages vs veRL's core_algos definitions, transcribed as loops over token-level
tensors (the oracle), and hand-computed cases."""

import pytest
import torch

from tailrl.algo import ADVANTAGES

GROUP_SIZES = [4, 8, 1, 3, 16, 8]


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    groups = torch.tensor(sum(([k] * n for k, n in enumerate(GROUP_SIZES)), []))
    n = len(groups)
    scores = torch.randint(0, 2, (n,), generator=g).double() + torch.rand(n, generator=g, dtype=torch.float64) * 0.1
    lengths = torch.randint(1, 12, (n,), generator=g)
    return scores, groups, lengths


def token_level(scores, lengths):
    """veRL's token_level_rewards (the score on the last response token) and response_mask, (N, T)."""
    T = int(lengths.max())
    mask = (torch.arange(T) < lengths[:, None]).double()
    rewards = torch.zeros(len(scores), T, dtype=torch.float64)
    rewards[torch.arange(len(scores)), lengths - 1] = scores
    return rewards, mask


def masked_whiten(values, mask):
    """verl.utils.torch_functional.masked_whiten (masked_mean / unbiased masked_var, rsqrt(var + 1e-8))."""
    mean = (values * mask).sum() / (mask.sum() + 1e-8)
    var = (((values - mean) ** 2) * mask).sum() / (mask.sum() + 1e-8)
    var = var * mask.sum() / (mask.sum() - 1)
    return (values - mean) * torch.rsqrt(var + 1e-8)


def group_means(scores, groups):
    """veRL's id2mean: the group's mean, 0 for a group of one; and each item's group size."""
    by = {}
    for i, k in enumerate(groups.tolist()):
        by.setdefault(k, []).append(scores[i].item())
    mean = torch.tensor([0.0 if len(by[k]) == 1 else sum(by[k]) / len(by[k]) for k in groups.tolist()])
    size = torch.tensor([len(by[k]) for k in groups.tolist()], dtype=torch.float64)
    return mean.double(), size


def verl_rloo(rewards, mask, groups):
    """compute_rloo_outcome_advantage: (N, T) advantages."""
    scores = rewards.sum(-1)
    mean, n = group_means(scores, groups)
    out = scores.clone()
    for i in range(len(scores)):
        if n[i] > 1:
            out[i] = scores[i] * n[i] / (n[i] - 1) - mean[i] * n[i] / (n[i] - 1)
    return out[:, None] * mask


def verl_reinforce_pp(rewards, mask, gamma=1.0):
    """compute_reinforce_plus_plus_outcome_advantage: discounted returns, whitened over the batch's tokens."""
    returns = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0], dtype=rewards.dtype)
    for t in reversed(range(rewards.shape[1])):
        running = rewards[:, t] + gamma * running
        returns[:, t] = running
        running = running * mask[:, t]
    return masked_whiten(returns, mask) * mask


def verl_reinforce_pp_baseline(rewards, mask, groups):
    """compute_reinforce_plus_plus_baseline_outcome_advantage."""
    scores = rewards.sum(-1)
    mean, _ = group_means(scores, groups)
    tiled = (scores - mean)[:, None].expand_as(mask) * mask
    return masked_whiten(tiled, mask) * mask


@pytest.mark.parametrize("seed", [0, 1])
def test_rloo_matches_verl(seed):
    scores, groups, lengths = _batch(seed)
    rewards, mask = token_level(scores, lengths)
    want = verl_rloo(rewards, mask, groups)
    ours = ADVANTAGES["rloo"](scores, groups)
    assert ours.dtype == torch.float32
    torch.testing.assert_close((ours.double()[:, None] * mask), want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["reinforce_pp", "reinforce_pp_baseline"])
@pytest.mark.parametrize("seed", [0, 1])
def test_reinforce_pp_matches_verl(name, seed):
    scores, groups, lengths = _batch(seed)
    rewards, mask = token_level(scores, lengths)
    want = verl_reinforce_pp(rewards, mask) if name == "reinforce_pp" else \
        verl_reinforce_pp_baseline(rewards, mask, groups)
    ours = ADVANTAGES[name](scores, groups, lengths=lengths)
    torch.testing.assert_close(ours.double()[:, None] * mask, want, rtol=0, atol=1e-6)
    assert ((ours.double() * lengths).sum() / lengths.sum()).abs() < 1e-6  # token-weighted mean 0


def test_hand_cases():
    # RLOO: r minus the mean of the others; a group of one keeps r
    got = ADVANTAGES["rloo"](torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5]), torch.tensor([0, 0, 0, 0, 1]))
    torch.testing.assert_close(got, torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3, 0.5]))
    # REINFORCE++: scores 1 (3 tokens) and 0 (1 token): tokens [1, 1, 1, 0], mean 0.75, unbiased var
    # (3 x 0.0625 + 0.5625) / 3 = 0.25 -> advantages (1 - 0.75) / 0.5 and (0 - 0.75) / 0.5
    got = ADVANTAGES["reinforce_pp"](torch.tensor([1.0, 0.0]), torch.tensor([0, 1]), lengths=torch.tensor([3, 1]))
    torch.testing.assert_close(got, torch.tensor([0.5, -1.5]))
    # the baseline variant subtracts the group mean first: [0.5, -0.5, 1, -1], mean 0, unbiased var 2.5 / 3
    got = ADVANTAGES["reinforce_pp_baseline"](torch.tensor([1.0, 0.0, 5.0, 3.0]), torch.tensor([0, 0, 1, 1]),
                                              lengths=torch.tensor([1, 1, 1, 1]))
    torch.testing.assert_close(got, torch.tensor([0.5, -0.5, 1.0, -1.0]) / (2.5 / 3) ** 0.5)


def test_lengths_weigh_and_are_required():
    scores, groups = torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0, 0, 0])
    with pytest.raises(ValueError, match="lengths"):
        ADVANTAGES["reinforce_pp"](scores, groups)
    # a rollout with no tokens weighs nothing in the statistics
    a = ADVANTAGES["reinforce_pp"](scores, groups, lengths=torch.tensor([2, 2, 0]))
    b = ADVANTAGES["reinforce_pp"](scores[:2], groups[:2], lengths=torch.tensor([2, 2]))
    torch.testing.assert_close(a[:2], b)
    # the group-based estimators ignore lengths
    for name in ("grpo", "drgrpo", "rloo"):
        torch.testing.assert_close(ADVANTAGES[name](scores, groups, lengths=torch.tensor([5, 1, 1])),
                                   ADVANTAGES[name](scores, groups))
