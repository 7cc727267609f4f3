"""GSPO vs the paper's sequence-level objective differentiated by autograd (the oracle) and veRL's
token-level formulation; the composed loss (rollout-correction weight, KL, entropy bonus) vs its formula;
micro-batch independence of every variant's aggregated loss and gradient."""

import math

import pytest
import torch

from tailrl.algo import POLICY_LOSSES, AggNorm, aggregate, policy_loss

EPS_LOW, EPS_HIGH = 3e-4, 4e-4


def _case(seed=0, S=6, T=9):
    g = torch.Generator().manual_seed(seed)
    logp = torch.randn(S, T, generator=g, dtype=torch.float64) * 0.3 - 1.0
    # per-sequence mean log-ratios spread around 0 by a few 1e-4: some inside the tiny GSPO range, some out
    old = logp - torch.randn(S, 1, generator=g, dtype=torch.float64) * 6e-4 \
        + torch.randn(S, T, generator=g, dtype=torch.float64) * 1e-4
    adv = torch.randn(S, generator=g, dtype=torch.float64)
    mask = (torch.rand(S, T, generator=g) > 0.3).double()
    mask[:, 0] = 1
    return logp, old, adv, mask


def gspo_oracle(logp, old, adv, mask, eps_low, eps_high):
    """GSPO (arXiv 2507.18071, eq. 5-7) per sequence: J_i = min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i),
    s_i = (pi(y_i) / pi_old(y_i))^(1/|y_i|); loss = -mean_i J_i, differentiated through s_i by autograd."""
    losses, clipped = [], []
    for i in range(logp.shape[0]):
        m = mask[i].bool()
        s = torch.exp((logp[i][m] - old[i][m]).sum() / m.sum())
        c = torch.clamp(s, 1 - eps_low, 1 + eps_high)
        losses.append(-torch.min(s * adv[i], c * adv[i]))
        clipped.append(bool((s > 1 + eps_high and adv[i] > 0) or (s < 1 - eps_low and adv[i] < 0)))
    return sum(losses) / len(losses), clipped


def test_gspo_matches_the_sequence_objective():
    logp, old, adv, mask = _case()
    a = logp.clone().requires_grad_()
    b = logp.clone().requires_grad_()
    want, want_clipped = gspo_oracle(a, old, adv, mask, EPS_LOW, EPS_HIGH)
    want.backward()
    out = POLICY_LOSSES["gspo"](b, old, adv, mask, EPS_LOW, EPS_HIGH)
    ours = aggregate(out["pg_loss"], mask, "seq-mean-token-mean", AggNorm.of(mask, mask.shape[1]))
    ours.backward()
    assert abs(ours.item() - want.item()) <= 1e-12
    torch.testing.assert_close(b.grad, a.grad, rtol=0, atol=1e-12)
    assert any(want_clipped) and not all(want_clipped)  # the case exercises both branches
    assert [bool(c[m.bool()].all()) for c, m in zip(out["clipped"], mask)] == want_clipped
    # the ratio is one value per sequence on its tokens
    for r, m in zip(out["ratio"], mask):
        assert torch.allclose(r[m.bool()], r[0].expand(int(m.sum())), rtol=0, atol=1e-15)


def test_gspo_as_verl_token_level():
    """veRL compute_policy_loss_gspo: s_t = sg[s] * pi_t / sg[pi_t], log clamped at 10, max(-A s_t, -A clip(s_t))."""
    logp, old, adv, mask = _case(1)
    lp = logp.clone().requires_grad_()
    seq = ((lp - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    log_s = torch.clamp(lp - lp.detach() + seq.detach()[:, None], max=10.0)
    s = torch.exp(log_s)
    a = adv[:, None]
    want = torch.maximum(-a * s, -a * torch.clamp(s, 1 - EPS_LOW, 1 + EPS_HIGH))
    out = POLICY_LOSSES["gspo"](lp, old, adv, mask, EPS_LOW, EPS_HIGH)
    torch.testing.assert_close(out["pg_loss"], want, rtol=0, atol=0)
    torch.testing.assert_close(out["clipped"], torch.gt(-a * torch.clamp(s, 1 - EPS_LOW, 1 + EPS_HIGH), -a * s))


def test_gspo_equals_vanilla_on_policy():
    """With old = logp (the first epoch), both ratios are 1: the same loss and gradient."""
    logp, _, adv, mask = _case(2)
    grads = []
    for name in ("vanilla", "gspo"):
        lp = logp.clone().requires_grad_()
        out = POLICY_LOSSES[name](lp, lp.detach(), adv, mask, 0.2, 0.2)
        aggregate(out["pg_loss"], mask, "token-mean", AggNorm.of(mask, 9)).backward()
        grads.append(lp.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=1e-15)


def test_composed_loss_formula():
    """loss = w * pg + beta * k3 - c * H per token; pg_loss carries the weight, kl and entropy do not."""
    logp, old, adv, mask = _case(3)
    g = torch.Generator().manual_seed(9)
    ref = logp + torch.randn(logp.shape, generator=g, dtype=torch.float64) * 0.1
    w = torch.rand(logp.shape, generator=g, dtype=torch.float64) * 2
    ent = torch.rand(logp.shape, generator=g, dtype=torch.float64) * 3
    out = policy_loss(logp, old, adv, 0.2, 0.28, ref, 0.05, mask=mask, is_weight=w, entropy=ent, entropy_coef=0.01)
    base = POLICY_LOSSES["vanilla"](logp, old, adv, mask, 0.2, 0.28)["pg_loss"]
    d = ref - logp
    torch.testing.assert_close(out["pg_loss"], w * base)
    torch.testing.assert_close(out["loss"], w * base + 0.05 * (torch.exp(d) - d - 1) - 0.01 * ent)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("surrogate", ["vanilla", "gspo"])
def test_every_variant_independent_of_micro_batch_split(mode, surrogate):
    """Loss and gradient of the whole batch = the sum of micro-batch shares, with IS weights, KL and entropy."""
    S, T = 12, 9
    logp, old, adv, mask = _case(4, S, T)
    g = torch.Generator().manual_seed(5)
    ref = logp + torch.randn(S, T, generator=g, dtype=torch.float64) * 0.1
    w = torch.rand(S, T, generator=g, dtype=torch.float64) * 2
    ent_base = torch.rand(S, T, generator=g, dtype=torch.float64)
    norm = AggNorm.of(mask, T)

    def run(splits):
        lp = logp.clone().requires_grad_()
        ent = (ent_base * lp.exp()).sum(-1, keepdim=True).expand(S, T)  # an entropy that depends on logp
        total = 0.0
        for rows in torch.arange(S).split(splits):
            out = policy_loss(lp[rows], old[rows], adv[rows], 0.2, 0.28, ref[rows], 0.04, mask=mask[rows],
                              surrogate=POLICY_LOSSES[surrogate], is_weight=w[rows], entropy=ent[rows],
                              entropy_coef=0.01)
            total = total + aggregate(out["loss"], mask[rows], mode, norm)
        total.backward()
        return total.item(), lp.grad

    whole, whole_g = run([S])
    for splits in ([1] * S, [5, 7], [3, 3, 6]):
        part, part_g = run(splits)
        assert math.isclose(part, whole, rel_tol=0, abs_tol=1e-12)
        torch.testing.assert_close(part_g, whole_g, rtol=0, atol=1e-12)
