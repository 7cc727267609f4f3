"""KL estimators k1 / k2 / k3 / abs vs veRL's kl_penalty formulas (hand values and gradients), the KL as a
reward penalty, and where the KL goes in the composed loss."""

import math

import pytest
import torch

from tailrl.algo import KL_ESTIMATORS, policy_loss
from tailrl.algo.kl import sequence_kl


def test_registry_names():
    assert list(KL_ESTIMATORS) == ["k1", "k2", "k3", "abs"]


def test_hand_values():
    logp = torch.tensor([math.log(0.5), math.log(0.2)], dtype=torch.float64)
    ref = torch.tensor([math.log(0.25), math.log(0.4)], dtype=torch.float64)
    d = [math.log(2.0), math.log(0.5)]  # logp - ref
    want = {"k1": d, "k2": [0.5 * x * x for x in d], "k3": [math.exp(-x) + x - 1 for x in d],
            "abs": [abs(x) for x in d]}
    for name, values in want.items():
        torch.testing.assert_close(KL_ESTIMATORS[name](logp, ref), torch.tensor(values, dtype=torch.float64),
                                   rtol=0, atol=1e-12)
    # k3 at ratio 1/2: 0.5 + ln 2 - 1 = 0.19315, at ratio 2: 2 - ln 2 - 1 = 0.30685
    torch.testing.assert_close(KL_ESTIMATORS["k3"](logp, ref), torch.tensor([0.5 + math.log(2) - 1,
                                                                             2 - math.log(2) - 1],
                                                                            dtype=torch.float64))


def test_k3_clamps_as_verl():
    logp = torch.tensor([0.0, 0.0, -30.0], dtype=torch.float64)
    ref = torch.tensor([-30.0, -3.0, 0.0], dtype=torch.float64)
    # ref - logp = -30 -> clamped to -20: exp(-20) + 20 - 1 -> clamped to 10; -3: e^-3 + 2; +30 -> e^20 ... -> 10
    torch.testing.assert_close(KL_ESTIMATORS["k3"](logp, ref),
                               torch.tensor([10.0, math.exp(-3) + 2, 10.0], dtype=torch.float64))


@pytest.mark.parametrize("name,grad", [
    ("k1", lambda d: torch.ones_like(d)),
    ("k2", lambda d: d),
    ("k3", lambda d: 1 - torch.exp(-d)),
    ("abs", lambda d: torch.sign(d)),
])
def test_kl_in_the_loss_gradient(name, grad):
    """loss = pg + beta * k(logp, ref): its gradient in logp is pg's plus beta * dk/dlogp (d = logp - ref)."""
    g = torch.Generator().manual_seed(0)
    S, T, beta = 3, 5, 0.3
    logp = (torch.randn(S, T, generator=g, dtype=torch.float64) * 0.3 - 1).requires_grad_()
    ref = logp.detach() + torch.randn(S, T, generator=g, dtype=torch.float64) * 0.2
    adv = torch.randn(S, generator=g, dtype=torch.float64)
    out = policy_loss(logp, logp.detach(), adv, 0.2, 0.2, ref, beta, kl=KL_ESTIMATORS[name])
    out["loss"].sum().backward()
    d = logp.detach() - ref
    want = -adv[:, None].expand(S, T) + beta * grad(d)  # ratio 1: d(-ratio * A)/dlogp = -A
    torch.testing.assert_close(logp.grad, want, rtol=0, atol=1e-12)
    torch.testing.assert_close(out["kl"], KL_ESTIMATORS[name](logp.detach(), ref))


def test_kl_logged_but_not_in_the_loss_when_coef_is_zero():
    logp = torch.tensor([[-1.0, -2.0]])
    ref = torch.tensor([[-1.5, -1.0]])
    out = policy_loss(logp, logp, torch.tensor([1.0]), 0.2, 0.2, ref, 0.0)
    torch.testing.assert_close(out["loss"], out["pg_loss"])
    torch.testing.assert_close(out["kl"], KL_ESTIMATORS["k3"](logp, ref))


def test_sequence_kl_sums_real_tokens():
    logp = torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -0.5, -0.5]])
    ref = torch.tensor([[-1.5, -1.0, 0.0], [-0.5, -1.0, -2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    torch.testing.assert_close(sequence_kl(logp, ref, mask, "k1"), torch.tensor([0.5 - 1.0, 0.0 + 0.5 + 1.5],
                                                                                dtype=torch.float64))
    torch.testing.assert_close(sequence_kl(logp, ref, mask, "k2"),
                               torch.tensor([0.125 + 0.5, 0.125 + 1.125], dtype=torch.float64))
