"""Token-budgeted micro-batches (train.micro_batch_tokens): the grouping rule against brute-force checks,
and the update against fixed micro-batches (same loss, logprobs and weights up to float summation order)."""

import copy
import random

import torch

from tailrl.train.batch import length_groups, make_train_batch
from tailrl.train.update import UpdateParams, batch_logprobs, update_step
from tests.helpers import tiny_native


def test_length_groups_partition_sorted_and_within_budget():
    rng = random.Random(0)
    for _ in range(300):
        lens = [rng.randint(1, 40) for _ in range(rng.randint(1, 30))]
        rows, tokens = rng.randint(1, 10), rng.randint(1, 200)
        groups = length_groups(lens, rows, tokens)
        flat = [i for g in groups for i in g]
        assert flat == sorted(range(len(lens)), key=lambda i: (lens[i], i))  # a partition, in length order
        for k, g in enumerate(groups):
            assert len(g) <= rows
            assert len(g) == 1 or len(g) * max(lens[i] for i in g) <= tokens
            if k + 1 < len(groups):  # greedy: the next row did not fit
                nxt = groups[k + 1][0]
                assert len(g) == rows or (len(g) + 1) * lens[nxt] > tokens


def test_hand_case():
    assert length_groups([5, 30, 6, 5, 7], 8, 20) == [[0, 3, 2], [4], [1]]  # 3 x 6 <= 20 < 4 x 7
    assert length_groups([5, 30, 6, 5, 7], 2, 100) == [[0, 3], [2, 4], [1]]
    assert length_groups([5, 30, 6, 5, 7], 8, 64) == [[0, 3, 2, 4], [1]]


def _batch():
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, 60, (int(n),), generator=g).tolist() for n in torch.randint(2, 6, (10,), generator=g)]
    comps = [torch.randint(3, 60, (n,), generator=g).tolist() for n in [3, 4, 2, 30, 5, 3, 4, 25, 2, 6]]
    return make_train_batch(prompts, comps, torch.randn(10, generator=g))


def test_update_with_token_budget_equals_fixed_micro_batches():
    model, _ = tiny_native("llama")
    batch = _batch()
    base = dict(loss_agg="token-mean", eps_low=0.2, eps_high=0.2, kl_coef=0.0, max_completion_len=32,
                micro_batch_size=4, temperature=0.8, max_grad_norm=1.0)
    out = {}
    for tokens in (0, 40):
        m = copy.deepcopy(model)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        lp = batch_logprobs(m, batch, 4, 0.8, tokens)
        metrics = update_step(m, opt, batch, UpdateParams(**base, micro_batch_tokens=tokens))
        out[tokens] = (lp, metrics, [p.detach().clone() for p in m.parameters()])
    lp0, m0, w0 = out[0]
    lp1, m1, w1 = out[40]
    mask = batch.completion_mask.bool()
    assert torch.allclose(lp0[mask], lp1[mask], atol=1e-5)
    for k in ("actor/loss", "actor/pg_loss", "actor/grad_norm"):
        assert abs(m0[k] - m1[k]) <= 1e-5 * max(1.0, abs(m0[k])), k
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(w0, w1))
