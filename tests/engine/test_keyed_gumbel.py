"""The `gumbel` keyed sampler (engine/sampling/gumbel.py) and its noise (kernels/gumbel_noise.py): the hash
against its uint32 reference, the noise's law and bitwise invariance, the pruned race against the full
race (the oracle) on many shapes and edge cases, the distribution against softmax, batch invariance."""

import math

import pytest
import torch

from tailrl.engine.sampling.blocked import _nucleus_floor, _weights
from tailrl.engine.sampling.gumbel import (
    keep_threshold_from,
    row_argmax,
    sample_gumbel_fast,
    sample_gumbel_race,
)
from tailrl.kernels.gumbel_noise import (
    GROUP,
    det_log,
    group_noise,
    gumbel_noise,
    hash32,
    hash32_ref,
    row_keys,
    token_noise_ref,
    token_noise_u32,
)
from tests.helpers import key_hashes, lm_like_logits, sampling_params

NEG = float("-inf")


# -- hash and noise --------------------------------------------------------------------------------

def test_hash_matches_python_reference():
    h = torch.tensor([0, 1, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1, 0xDEADBEEF], dtype=torch.int64)
    V = 1000  # not a multiple of the vector width: scalar tails too
    got = token_noise_u32(h, V)
    ref = torch.tensor([[token_noise_ref(int(a), t) for t in range(V)] for a in h])
    assert torch.equal(got, ref)
    x = torch.randint(-2 ** 31, 2 ** 31, (777,), dtype=torch.int64)
    assert torch.equal(hash32(x.to(torch.int32)).long() & 0xFFFFFFFF,
                       torch.tensor([hash32_ref(int(v)) for v in x]))


def test_hash_avalanche():
    """Flipping one input bit flips each output bit with probability ~1/2."""
    x = torch.randint(-2 ** 31, 2 ** 31, (20000,), dtype=torch.int64).to(torch.int32)
    base = hash32(x.clone())
    for bit in (0, 7, 16, 31):
        d = base ^ hash32(x ^ torch.tensor(1 << bit if bit < 31 else -2 ** 31, dtype=torch.int32))
        rate = torch.stack([((d >> k) & 1).float().mean() for k in range(32)])
        assert (rate - 0.5).abs().max() < 0.03, (bit, rate)


def test_det_log_accuracy():
    y = torch.cat([torch.rand(100000, dtype=torch.float64) * 30 + 1e-12,
                   torch.tensor([1.0, 2.0, 0.5, math.sqrt(2), 1 - 2 ** -33, 2.3e-10, 22.18], dtype=torch.float64)])
    assert (det_log(y) - torch.log(y)).abs().max() < 4e-15


def test_noise_is_gumbel():
    """Noise of many tokens: mean ~ Euler-Mascheroni, var ~ pi^2 / 6, P(g <= 0) ~ 1/e, and groups' slots."""
    B, V = 64, 4096
    g = gumbel_noise(row_keys(key_hashes(B, torch.Generator().manual_seed(0))), torch.arange(V).expand(B, V))
    assert abs(g.mean().item() - 0.5772) < 0.01
    assert abs(g.var().item() - math.pi ** 2 / 6) < 0.03
    assert abs((g <= 0).double().mean().item() - math.exp(-1)) < 0.003
    # per token position (slot within the group) the law is the same
    slot_mean = g.view(B, -1, GROUP).mean((0, 1))
    assert (slot_mean - 0.5772).abs().max() < 0.08


def test_noise_bitwise_batch_and_thread_invariant():
    """A row's noise is bitwise the same alone, at any place in batches, with any token subset and on 1 or 2
    threads (elementwise integer and IEEE basic ops only)."""
    gen = torch.Generator().manual_seed(3)
    V = 4096 + 77
    h = key_hashes(70, gen)
    ref = gumbel_noise(row_keys(h[:1]), torch.arange(V).unsqueeze(0))
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            for B in (2, 7, 33, 70):
                at = B // 2
                hb = h[:B].roll(at, 0)
                got = gumbel_noise(row_keys(hb), torch.arange(V).expand(B, V))
                assert torch.equal(got[at:at + 1], ref), (n, B)
            sub = torch.tensor([[5, 3, V - 1, 64, 4096]])
            assert torch.equal(gumbel_noise(row_keys(h[:1]), sub), ref[:, sub[0]])
    finally:
        torch.set_num_threads(threads)


def test_group_noise_bounds_tokens():
    """Every token's noise is <= its group's M_b, and exactly one slot per group equals it (almost surely)."""
    B, V = 16, 64 * 50
    keys = row_keys(key_hashes(B, torch.Generator().manual_seed(4)))
    g = gumbel_noise(keys, torch.arange(V).expand(B, V)).view(B, -1, GROUP)
    m = group_noise(keys[1].unsqueeze(-1), keys[2].unsqueeze(-1), torch.arange(V // GROUP))[0]
    assert torch.equal(g.amax(-1), m)
    assert ((g == m.unsqueeze(-1)).sum(-1) == 1).all()


# -- fast == race ------------------------------------------------------------------------------------

@pytest.mark.parametrize("V", [300, 2048, pytest.param(49152, marks=pytest.mark.slow)])
@pytest.mark.parametrize("T", [0.0, 0.7, 1.0, 1.3])
@pytest.mark.parametrize("top", [False, True])
def test_fast_equals_race(V, T, top):
    gen = torch.Generator().manual_seed(V + int(T * 10) + top)
    B = 16 if V == 49152 else 48
    logits = lm_like_logits(B, V, gen)
    temp, top_k, top_p = sampling_params(B, T, gen, top)
    temp[3] = 0.0  # a greedy row in every batch
    h = key_hashes(B, gen)
    race = sample_gumbel_race(logits, h, temp, top_k, top_p)
    fast = sample_gumbel_fast(logits, h, temp, top_k, top_p)
    assert torch.equal(race[0], fast[0]) and torch.equal(race[1], fast[1])
    assert torch.equal(race[0][3], logits[3].argmax())


def test_fast_equals_race_edge_cases():
    gen = torch.Generator().manual_seed(7)
    B, V = 12, 1000
    logits = lm_like_logits(B, V, gen)
    logits[0, 100:] = NEG  # -inf tail
    logits[1, :] = NEG
    logits[1, 999] = 0.0  # a single finite token, in the last (partial) group
    logits[2, ::3] = NEG
    logits[3, :] = 0.0  # all tied: the noise decides
    logits[4, 10] = logits[4, 500] = logits[4].max() + 50  # far ahead, tied at the top
    logits[5] = logits[5] * 40  # very peaked
    logits[6] = logits[6] * 1e-3  # nearly flat
    temp = torch.tensor([1.0, 1.0, 0.7, 1.3, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.05, 20.0])
    logits[7, 3] = logits[7, 9] = logits[7].max() + 1  # greedy tie: the lower id
    top_k = torch.tensor([0, 0, 3, 0, 1, 0, 2, 0, 5, 0, 0, 0])
    top_p = torch.tensor([1.0, 0.9, 1.0, 0.5, 1.0, 0.1, 1.0, 1.0, 1.0, 1e-6, 1.0, 0.99])
    h = key_hashes(B, gen)
    race = sample_gumbel_race(logits, h, temp, top_k, top_p)
    fast = sample_gumbel_fast(logits, h, temp, top_k, top_p)
    assert torch.equal(race[0], fast[0]) and torch.equal(race[1], fast[1])
    assert race[0][1] == 999 and race[0][0] < 100 and race[0][2] % 3 != 0
    assert race[0][4] in (10, 500) and race[0][7] == 3


def test_row_argmax_ties_take_lowest_id():
    rows = torch.tensor([0, 0, 0, 1, 1, 2])
    score = torch.tensor([1.0, 2.0, 2.0, NEG, NEG, 0.5], dtype=torch.float64)
    tok = torch.tensor([9, 7, 4, 6, 2, 3])
    assert row_argmax(rows, score, tok, 3).tolist() == [4, 2, 3]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fast_equals_race_half(dtype):
    gen = torch.Generator().manual_seed(8)
    B, V = 32, 2048 + 5
    logits = lm_like_logits(B, V, gen).to(dtype)  # bf16: many exact ties
    temp, top_k, top_p = sampling_params(B, 1.0, gen, top=True)
    temp[::5] = 0.7
    temp[1] = 0.0
    h = key_hashes(B, gen)
    race = sample_gumbel_race(logits, h, temp, top_k, top_p)
    fast = sample_gumbel_fast(logits, h, temp, top_k, top_p)
    assert torch.equal(race[0], fast[0]) and torch.equal(race[1], fast[1])


def test_logprob_is_blocked_logprob():
    """The logprob is blocked's definition: log softmax(logits / T) at the token (before the cut)."""
    gen = torch.Generator().manual_seed(9)
    B, V = 16, 3000
    logits = lm_like_logits(B, V, gen)
    temp, top_k, top_p = sampling_params(B, 0.8, gen, top=True)
    tok, lp = sample_gumbel_fast(logits, key_hashes(B, gen), temp, top_k, top_p)
    ref = (logits.double() / temp.double().unsqueeze(-1)).log_softmax(-1).gather(-1, tok.unsqueeze(-1)).squeeze(-1)
    assert (lp.double() - ref).abs().max() < 1e-5


def test_kept_set_is_blocked_cut():
    """With top-k / top-p the token is always in blocked's kept set, and the threshold form (logit >= thr)
    is the same set as blocked's weight-bit floor (the weights are monotone in the logit)."""
    gen = torch.Generator().manual_seed(10)
    B, V = 40, 5000
    logits = lm_like_logits(B, V, gen)
    temp, top_k, top_p = sampling_params(B, 0.9, gen, top=True)
    p, *_ = _weights(logits, temp)
    floor = _nucleus_floor(p, top_k, top_p, True, True)
    kept = p.view(torch.int32) >= floor.unsqueeze(-1)
    thr = keep_threshold_from(logits, p, floor)
    assert torch.equal(kept, logits >= thr.unsqueeze(-1))
    for s in range(5):
        tok, _ = sample_gumbel_fast(logits, key_hashes(B, torch.Generator().manual_seed(s)), temp, top_k, top_p)
        assert kept.gather(-1, tok.unsqueeze(-1)).all()


def test_batch_invariance():
    """A row's token and logprob are bitwise the same alone and inside a batch of 64 (at any place), with any
    neighbours' parameters, on 1 and 2 threads."""
    gen = torch.Generator().manual_seed(11)
    B, V = 64, 49152
    logits = lm_like_logits(B, V, gen)
    temp, top_k, top_p = sampling_params(B, 1.0, gen, top=True)
    temp[::4] = 0.7
    h = key_hashes(B, gen)
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            batch = sample_gumbel_fast(logits, h, temp, top_k, top_p)
            for i in (0, 1, 2, 31, 63):
                sl = slice(i, i + 1)
                alone = sample_gumbel_fast(logits[sl], h[sl], temp[sl], top_k[sl], top_p[sl])
                race = sample_gumbel_race(logits[sl], h[sl], temp[sl], top_k[sl], top_p[sl])
                assert torch.equal(alone[0], batch[0][sl]) and torch.equal(alone[1], batch[1][sl]), (n, i)
                assert torch.equal(race[0], alone[0]) and torch.equal(race[1], alone[1]), (n, i)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_distribution_matches_softmax():
    """For a small vocabulary, the frequency of each token over many keys matches softmax(logits / T) after
    the cut (chi-square against its 99.99% quantile, roughly)."""
    gen = torch.Generator().manual_seed(12)
    V, N = 200, 40000  # groups of 64: spans 4 groups, the last partial
    row = torch.randn(V, generator=gen) * 2
    for T, k, p in ((1.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 20, 1.0), (1.0, 0, 0.8)):
        logits = row.expand(N, V)
        temp, top_k, top_p = torch.full((N,), T), torch.full((N,), k), torch.full((N,), p)
        tok, _ = sample_gumbel_fast(logits, torch.arange(N) * 7919 + 1, temp, top_k, top_p)
        probs = (logits[0] / T).softmax(-1).double()
        p1, *_ = _weights(logits[:1], temp[:1])
        thr = keep_threshold_from(logits[:1], p1, _nucleus_floor(p1, top_k[:1], top_p[:1], k > 0, p < 1))
        probs = torch.where(logits[0] >= thr, probs, 0.0)
        probs /= probs.sum()
        counts = torch.bincount(tok, minlength=V).double()
        exp = probs * N
        keep = exp > 5
        assert counts[~(probs > 0)].sum() == 0
        chi2 = (((counts - exp) ** 2 / exp)[keep]).sum().item()
        dof = int(keep.sum()) - 1
        assert chi2 < dof + 4.5 * math.sqrt(2 * dof) + 10, (T, k, p, chi2, dof)


@pytest.mark.parametrize("std", [0.05, 1.2, 4.0])
def test_flat_logits_hash_few_tokens(std):
    """The group leaders' bound: with flat logits (a random-weight model) the winner is nearly always a
    group leader, so only a few groups' tokens get per-token noise (with the top logit's score as the only
    bound, ~30% of the vocabulary did at std 1.2). Same tokens as the race."""
    gen = torch.Generator().manual_seed(11)
    B, V = 16, 8192
    logits = torch.randn(B, V, generator=gen) * std
    temp, top_k, top_p = torch.ones(B), torch.zeros(B, dtype=torch.long), torch.ones(B)
    h = key_hashes(B, gen)
    stats: dict = {}
    fast = sample_gumbel_fast(logits, h, temp, top_k, top_p, stats=stats)
    assert torch.equal(fast[0], sample_gumbel_race(logits, h, temp, top_k, top_p)[0])
    assert stats["hashed"] / stats["tokens"] < 0.02
