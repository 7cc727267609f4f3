"""The `blocked` keyed sampler (two-level fp32 / integer inverse CDF, radix-select top-k / top-p):
distribution against its weights, agreement with inverse_cdf, bitwise batch invariance, no host read-back."""

import pytest
import torch

from tailrl.engine.sampling import hash_keys, host_flags, keyed, keyed_sample, keyed_sample_hashed
from tailrl.engine.sampling.blocked import (
    _nucleus_floor,
    _radix_select,
    _sample_weights,
    _weights,
    block_sums,
    sample_blocked,
)
from tests.helpers import key_rows


def _chi2_ok(samples, probs, n):
    """Pearson chi-square of samples against probs (bins with expected count < 5 pooled) below the 5-sigma
    point of its distribution (dof + 5 sqrt(2 dof)); deterministic for a fixed seed."""
    obs = torch.bincount(samples, minlength=probs.numel()).double()
    exp = probs.double() * n
    small = exp < 5
    obs = torch.cat([obs[~small], obs[small].sum().view(1)])
    exp = torch.cat([exp[~small], exp[small].sum().view(1)])
    keep = exp > 0
    chi2 = ((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum().item()
    dof = int(keep.sum()) - 1
    return chi2 < dof + 5 * (2 * dof) ** 0.5, (chi2, dof)


def _params(n, g, temps=(1.0, 0.7, 1.5, 0.0), ks=(0, 0, 20), ps=(1.0, 1.0, 0.9, 0.5)):
    """Random per-row (temperature, top_k, top_p) drawn from the given choices."""
    pick = lambda xs: torch.tensor(xs)[torch.randint(len(xs), (n,), generator=g)]  # noqa: E731
    return pick(temps).float(), pick(ks).long(), pick(ps).float()


@pytest.mark.parametrize("V,block,support", [(50, 8, 50), (1100, 256, 48)])
def test_blocked_core_matches_its_weights_with_a_tail_block(V, block, support):
    """The two-level search itself: blocks of 8 over V = 50 (6 blocks, a tail of 2) and of 256 over
    V = 1100 (4 blocks, a tail of 76; `support` random tokens weighted, spread over all of them).
    Chi-square against the weights it is given; zero weights (filtered, -inf) are never drawn."""

    g = torch.Generator().manual_seed(0)
    N = 60000 if V < 100 else 20000
    w = torch.zeros(V)
    on = torch.randperm(V, generator=g)[:support]
    w[on] = (torch.randn(support, generator=g) * 1.5).exp()
    zero = on[:3]
    w[zero] = 0.0  # filtered tokens
    w[V - 1] = 0.5 * w.max()  # the tail block carries mass
    w = w / w.max()
    u = torch.rand(N, generator=g, dtype=torch.float64)
    tok, _ = _sample_weights(w.expand(N, V).contiguous(), u, block=block)
    ok, stat = _chi2_ok(tok, w / w.sum(), N)
    assert ok, stat
    assert (w[tok] > 0).all()


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_blocked_chi_square_over_blocks_and_tail(temperature):
    """keyed_sample(method="blocked") at V = 600 (blocks of 32: 18 and a tail of 24), heavy tokens in the
    first, a middle and the tail block: chi-square against softmax(logits / T)."""
    g = torch.Generator().manual_seed(1)
    V, N = 600, 60000
    logits = torch.randn(V, generator=g) * 1.5
    logits[[5, 300, 590]] += 4.0  # heavy tokens in each block
    tok, _ = keyed_sample(logits.expand(N, V), key_rows(N, seed=11), torch.full((N,), temperature),
                          torch.zeros(N, dtype=torch.long), torch.ones(N), "blocked")
    ok, stat = _chi2_ok(tok, (logits / temperature).softmax(-1), N)
    assert ok, stat


def test_blocked_sampler_on_log_probs():
    """sample_blocked (the same search on given log-probs) is a correct sampler of softmax(logp), filtered
    tokens included."""
    g = torch.Generator().manual_seed(2)
    V, N = 300, 40000
    logp = (torch.randn(V, generator=g) * 2).log_softmax(-1)
    logp[::7] = float("-inf")

    tok = sample_blocked(logp.expand(N, V), hash_keys(key_rows(N, seed=5)))
    ok, stat = _chi2_ok(tok, logp.softmax(-1), N)
    assert ok, stat
    assert (tok % 7 != 0).all()


def test_blocked_agrees_with_inverse_cdf_token_for_token():
    """Both invert the CDF at the same keyed uniform: they differ only where u falls within rounding of a
    token boundary (coupled speculation relies on that uniform); logprobs agree to fp32 accuracy."""
    g = torch.Generator().manual_seed(3)
    N, V = 2000, 5000
    logits = torch.randn(N, V, generator=g) * 3
    args = (torch.ones(N), torch.zeros(N, dtype=torch.long), torch.ones(N))
    a, la = keyed_sample(logits, key_rows(N), *args, "inverse_cdf")
    b, lb = keyed_sample(logits, key_rows(N), *args, "blocked")
    assert (a == b).float().mean() > 0.999
    assert torch.allclose(la, lb, atol=2e-5)


def test_blocked_logprob_is_the_unfiltered_tempered_log_softmax():
    g = torch.Generator().manual_seed(4)
    B, V = 64, 3000
    logits = torch.randn(B, V, generator=g) * 4
    temp, top_k, top_p = _params(B, g)
    for x in (logits, logits.bfloat16()):
        tok, lp = keyed_sample(x, key_rows(B), temp, top_k, top_p, "blocked")
        t = torch.where(temp > 0, temp, 1.0).double()
        ref = (x.double() / t[:, None]).log_softmax(-1).gather(-1, tok[:, None])[:, 0]
        assert lp.dtype == torch.float32 and tok.dtype == torch.int64
        assert torch.allclose(lp.double(), ref, atol=2e-6), (lp.double() - ref).abs().max()


def test_blocked_is_batch_invariant():
    """Each probe row's token and logprob are bitwise those of the row sampled alone (a batch of 1), inside
    batches of 7 and 64 with random other rows, probes at random places (other rows with and without
    temperature 0, top-k, top-p), with flags from the host, read from the tensors or all on, and on 1 or 2
    threads. V = 49,152 + 77 leaves a partial tail block."""

    g = torch.Generator().manual_seed(5)
    V, P = 49152 + 77, 6
    probe = torch.randn(P, V, generator=g) * 3
    probe[1, ::3] = float("-inf")  # a row with masked tokens
    pt = torch.tensor([1.0, 0.8, 0.0, 1.0, 1.3, 1.0])
    pk = torch.tensor([0, 0, 0, 30, 0, 0])
    pp = torch.tensor([1.0, 1.0, 1.0, 0.9, 0.7, 1.0])
    ph = hash_keys(key_rows(P, seed=9))
    alone = [keyed_sample_hashed(probe[i:i + 1], ph[i:i + 1], pt[i:i + 1], pk[i:i + 1], pp[i:i + 1], "blocked")
             for i in range(P)]
    threads = torch.get_num_threads()
    try:
        for n_threads, B in ((threads, 7), (threads, 64), (1, 64), (2, 7)):
            torch.set_num_threads(n_threads)
            logits = torch.randn(B, V, generator=g) * 3
            h = hash_keys(torch.randint(0, 2**40, (B, 4), generator=g))
            t, k, p = _params(B, g)
            at = torch.randperm(B, generator=g)[:P]
            logits[at], h[at], t[at], k[at], p[at] = probe, ph, pt, pk, pp
            for flags in (None, host_flags(t.tolist(), k.tolist(), p.tolist()), (True, True, True)):
                tok, lp = keyed_sample_hashed(logits, h, t, k, p, "blocked", flags)
                for i in range(P):
                    assert torch.equal(tok[at[i]].view(1), alone[i][0]), (B, i, flags)
                    assert torch.equal(lp[at[i]].view(1), alone[i][1]), (B, i, flags)
    finally:
        torch.set_num_threads(threads)


def test_blocked_edge_cases():
    """One-hot rows, -inf logits, greedy rows, top_k = 1, a tiny top_p and top_k >= V; V not a multiple of
    the block."""
    V = 1000 + 3
    N = 500
    args = (torch.ones(N), torch.zeros(N, dtype=torch.long), torch.ones(N))
    # a one-hot distribution: a single finite logit, or one far above the rest
    for fill, at in ((float("-inf"), 999), (0.0, 1002)):
        logits = torch.full((N, V), fill)
        logits[:, at] = 60.0 if fill == 0.0 else 1.0
        tok, lp = keyed_sample(logits, key_rows(N), *args, "blocked")
        assert (tok == at).all() and (lp.abs() < 1e-6).all()
    # -inf logits are never drawn
    g = torch.Generator().manual_seed(6)
    logits = torch.randn(N, V, generator=g)
    logits[torch.rand(N, V, generator=g) < 0.5] = float("-inf")
    tok, lp = keyed_sample(logits, key_rows(N), *args, "blocked")
    assert torch.isfinite(logits.gather(-1, tok[:, None])).all() and torch.isfinite(lp).all()
    # temperature 0 is argmax (the first of tied maxima), with the logprob of softmax(logits)
    logits = torch.randn(N, V, generator=g).round()
    tok, lp = keyed_sample(logits, key_rows(N), torch.zeros(N), *args[1:], "blocked")
    assert torch.equal(tok, logits.argmax(-1))
    assert torch.allclose(lp, logits.log_softmax(-1).gather(-1, tok[:, None])[:, 0], atol=1e-5)
    # top_k = 1 and a tiny top_p keep only the most likely token; top_k >= V keeps all
    logits = torch.randn(N, V, generator=g) * 2
    k1, _ = keyed_sample(logits, key_rows(N), args[0], torch.ones(N, dtype=torch.long), args[2], "blocked")
    p0, _ = keyed_sample(logits, key_rows(N), args[0], args[1], torch.full((N,), 1e-6), "blocked")
    assert torch.equal(k1, logits.argmax(-1)) and torch.equal(p0, logits.argmax(-1))
    full, _ = keyed_sample(logits, key_rows(N), args[0], torch.full((N,), V + 5), args[2], "blocked")
    plain, _ = keyed_sample(logits, key_rows(N), *args, "blocked")
    assert torch.equal(full, plain)


def test_radix_select_matches_brute_force():
    """The largest key v with sum(weight[keys >= v]) >= c (0 where the row total is below c), on keys with
    many ties and keys spanning the full 30 bits."""

    g = torch.Generator().manual_seed(7)
    B, V = 40, 300
    bits = torch.randint(0, 2**30, (B, V), generator=g, dtype=torch.int32)
    bits[: B // 2] = bits[: B // 2] % 37 + 2**29  # ties, sharing the high digits
    w = torch.randint(0, 2**20, (B, V), generator=g) * (torch.rand(B, V, generator=g) < 0.8)
    c = (torch.rand(B, generator=g, dtype=torch.float64) * 1.1 * w.sum(-1)).long() + 1
    got = _radix_select(bits, w, lambda total: c)
    for b in range(B):
        want = 0
        for v in sorted(set(bits[b].tolist()), reverse=True):
            if w[b][bits[b] >= v].sum() >= c[b]:
                want = v
                break
        assert got[b].item() == want, b


def test_nucleus_cut_matches_an_oracle_with_ties():
    """top-k keeps every token at least as likely as the k-th; top-p the tokens whose strictly-more-likely
    mass (within the top-k set) is <= top_p of the set's mass — whole groups of tied tokens."""

    g = torch.Generator().manual_seed(8)
    B, V = 24, 400
    logits = (torch.randn(B, V, generator=g) * 2).round(decimals=1)  # many exact ties
    temp = torch.ones(B)
    top_k = torch.tensor([0, 5, 50] * 8)
    top_p = torch.tensor([1.0, 0.9, 0.5, 0.99] * 6)
    p, _, _ = _weights(logits, temp)
    keep = p.view(torch.int32) >= _nucleus_floor(p.clone(), top_k, top_p, True, True).unsqueeze(-1)
    for b in range(B):
        pb = p[b].double()
        ref = torch.ones(V, dtype=torch.bool)
        if top_k[b] > 0:
            ref &= pb >= pb.sort(descending=True).values[top_k[b] - 1]
        if top_p[b] < 1:
            mass = pb[ref].sum()
            above = torch.stack([pb[ref & (pb > x)].sum() for x in pb])
            ref &= above <= top_p[b].double() * mass
        assert torch.equal(keep[b], ref), b


def test_blocked_top_k_top_p_mixed_rows_are_independent_at_qwen_vocab():
    """At Qwen's 151,936 tokens a row without top-p keeps its whole distribution while another row uses
    top-p and top-k (cf. test_top_p_off_row_is_not_filtered_by_its_batch)."""
    g = torch.Generator().manual_seed(9)
    V = 151_936
    logits = torch.randn(3, V, generator=g) * 3
    keys = key_rows(3)
    t, k, p = torch.ones(3), torch.tensor([0, 40, 0]), torch.tensor([1.0, 0.5, 0.8])
    tok, lp = keyed_sample(logits, keys, t, k, p, "blocked")
    one, one_lp = keyed_sample(logits[:1], keys[:1], t[:1], k[:1], p[:1], "blocked")
    assert torch.equal(tok[:1], one) and torch.equal(lp[:1], one_lp)


def test_blocked_with_flags_reads_nothing_back(monkeypatch):
    """With host-side flags the blocked path never synchronises (CUDA-graph capturable): no tensor is
    read back as a Python value."""

    g = torch.Generator().manual_seed(10)
    B, V = 16, 2000
    logits = torch.randn(B, V, generator=g)
    t, k, p = _params(B, g)
    h = hash_keys(key_rows(B))
    want = keyed_sample_hashed(logits, h, t, k, p, "blocked")

    def boom(*_a, **_k):
        raise AssertionError("host read-back")

    monkeypatch.setattr(keyed, "read_flags", boom)
    for name in ("item", "tolist", "__bool__", "__int__", "__float__"):
        monkeypatch.setattr(torch.Tensor, name, boom)
    got = keyed_sample_hashed(logits, h, t, k, p, "blocked", (True, True, True))
    monkeypatch.undo()
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_block_sums_are_bitwise_batch_invariant():
    """The fp32 block-sum tree of a row is bitwise the same alone and at any place in batches of 2..70
    rows, on 1 and 2 threads (elementwise adds of fixed shape, by construction)."""

    g = torch.Generator().manual_seed(11)
    V = 49152 + 77
    rows = (torch.randn(70, V, generator=g) * 3).exp()
    ref = block_sums(rows[:1], 256)
    threads = torch.get_num_threads()
    try:
        for n_threads in (1, 2):
            torch.set_num_threads(n_threads)
            for B in range(2, 71, 3):
                x = rows[:B].roll(B // 2, 0)  # the probe row at B // 2
                assert torch.equal(block_sums(x, 256)[B // 2:B // 2 + 1], ref), (n_threads, B)
    finally:
        torch.set_num_threads(threads)


def test_weights_are_bitwise_batch_invariant():
    """The fp32 weights of a row (sub, scale, exponential over the vocabulary) are bitwise the same alone
    and at any place in batches of 2..70 rows, on 1 and 2 threads. Catches a CPU kernel whose vector body
    and scalar tail differ (torch's exp2 does; exp does not): where a row's elements fall in the tail
    depends on the batch and the thread split."""

    g = torch.Generator().manual_seed(12)
    V = 49152 + 77
    rows = torch.randn(70, V, generator=g) * 8
    temp = torch.rand(70, generator=g) + 0.3
    ref = _weights(rows[:1], temp[:1])[0]
    threads = torch.get_num_threads()
    try:
        for n_threads in (1, 2):
            torch.set_num_threads(n_threads)
            for B in range(2, 71):
                at = B // 2
                x, t = rows[:B].roll(at, 0), temp[:B].roll(at, 0)
                assert torch.equal(_weights(x, t)[0][at:at + 1], ref), (n_threads, B)
    finally:
        torch.set_num_threads(threads)

