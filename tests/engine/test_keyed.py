"""Keyed sampling: distribution correctness (statistical, fixed seed) and key determinism."""

import pytest
import torch

from tailrl.engine.request import Request, SamplingParams
from tailrl.engine.sampling import (
    SAMPLERS,
    hash_keys,
    key_hash,
    keyed_sample,
    mix32,
    position_hash,
    prefix_hash,
    process_logits,
    uniform_from_hash,
)
from tailrl.engine.sampling.rows import sample_hashes, sample_keys
from tailrl.engine.sequence import Sequence
from tests.helpers import key_rows


def _tv(samples, probs):
    hist = torch.bincount(samples, minlength=probs.numel()).double() / samples.numel()
    return 0.5 * (hist - probs.double()).abs().sum().item()


@pytest.mark.parametrize("method", list(SAMPLERS))
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_histogram_matches_softmax(method, temperature):
    torch.manual_seed(0)
    V, N = 50, 40000
    logits = torch.randn(V) * 2
    samples, _ = keyed_sample(logits.expand(N, V), key_rows(N), torch.full((N,), temperature),
                              torch.zeros(N, dtype=torch.long), torch.ones(N), method)
    probs = (logits / temperature).softmax(-1)
    # expected TV of an N-sample empirical histogram over V=50 is ~ sqrt(V / (2 pi N)) ~ 0.014
    assert _tv(samples, probs) < 0.03


@pytest.mark.parametrize("method", list(SAMPLERS))
def test_top_k_top_p_match_truncated_softmax(method):
    torch.manual_seed(1)
    V, N = 40, 30000
    logits = torch.randn(V) * 2
    k, p = 10, 0.8
    samples, _ = keyed_sample(logits.expand(N, V), key_rows(N), torch.ones(N), torch.full((N,), k),
                              torch.full((N,), p), method)
    # brute-force oracle: top-k then smallest nucleus with mass >= p (keep the token crossing p)
    probs = logits.softmax(-1)
    order = probs.argsort(descending=True)[:k]
    pk = probs[order] / probs[order].sum()
    keep = (pk.cumsum(0) - pk) <= p
    ref = torch.zeros(V)
    ref[order[keep]] = pk[keep] / pk[keep].sum()
    assert set(samples.unique().tolist()) <= set(order[keep].tolist())
    assert _tv(samples, ref) < 0.03


def test_greedy_and_logprobs():
    logits = torch.randn(4, 30)
    tok, lp = keyed_sample(logits, key_rows(4), torch.zeros(4), torch.zeros(4, dtype=torch.long), torch.ones(4))
    assert torch.equal(tok, logits.argmax(-1))
    assert torch.allclose(lp, logits.log_softmax(-1).gather(-1, tok[:, None])[:, 0])


def test_keys_are_deterministic_and_distinct():
    k = key_rows(1000)
    h1 = key_hash(k[:, 0], k[:, 1], k[:, 2], k[:, 3])
    h2 = key_hash(k[:, 0], k[:, 1], k[:, 2], k[:, 3])
    assert torch.equal(h1, h2) and h1.unique().numel() == 1000
    u = uniform_from_hash(h1)
    assert (u > 0).all() and (u < 1).all() and abs(u.mean().item() - 0.5) < 0.05
    # a single row sampled alone equals the same row inside a batch
    logits = torch.randn(8, 30)
    args = (torch.ones(8), torch.zeros(8, dtype=torch.long), torch.ones(8))
    full, _ = keyed_sample(logits, key_rows(8), *args)
    one, _ = keyed_sample(logits[3:4], key_rows(8)[3:4], *(a[3:4] for a in args))
    assert full[3] == one[0]


def test_mix32_stays_32_bit():
    x = torch.tensor([0, 1, 0xFFFFFFFF, 123456789], dtype=torch.long)
    y = mix32(x)
    assert (y >= 0).all() and (y <= 0xFFFFFFFF).all()


def test_process_logits_filters():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    lp = process_logits(logits, torch.ones(1), torch.tensor([2]), torch.ones(1))
    assert torch.isinf(lp[0, 2:]).all() and torch.isfinite(lp[0, :2]).all()


def test_top_p_off_row_is_not_filtered_by_its_batch():
    """A row without top-p keeps its whole distribution even when another row of the batch uses top-p
    (the float cumsum of a 152k vocabulary passes 1.0 before its tail)."""

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 152_000, generator=g) * 3
    temp, top_k = torch.tensor([1.0, 1.0]), torch.tensor([0, 0])
    alone = process_logits(logits[:1], temp[:1], top_k[:1], torch.tensor([1.0]))
    batched = process_logits(logits, temp, top_k, torch.tensor([1.0, 0.5]))
    assert torch.isfinite(alone).all()
    assert torch.equal(torch.isfinite(batched[0]), torch.isfinite(alone[0]))
    assert torch.allclose(batched[0], alone[0])



def test_prefix_then_position_hash_equals_the_whole_key_hash():
    """The engine hashes (seed, uid, sample) once per sequence (Python ints) and the position per step;
    that must be the same number as hashing the whole key row, for any 64-bit parts."""

    g = torch.Generator().manual_seed(0)
    keys = torch.randint(-2**62, 2**62, (500, 4), generator=g)
    keys[:, 3] = keys[:, 3].abs() % 10_000  # positions
    keys[:5, 0] = torch.tensor([0, -1, 2**32, -2**40, 7])
    pre = [prefix_hash(int(s), int(u), int(k)) for s, u, k, _ in keys.tolist()]
    assert torch.equal(position_hash(torch.tensor(pre), keys[:, 3]), hash_keys(keys))
    assert torch.equal(prefix_hash(keys[:, 0], keys[:, 1], keys[:, 2]), torch.tensor(pre))


def test_engine_row_hashes_equal_hashed_sample_keys():

    seqs = [Sequence(i, Request([1, 2], uid=10**12 + i, params=SamplingParams(seed=-3 + i)), i % 3, 8, [1, 2] + [5] * i, 2)
            for i in range(7)]
    assert torch.equal(sample_hashes(seqs), hash_keys(sample_keys(seqs)))
    pos = [3, 0, 9, 1, 1, 4, 100]
    assert torch.equal(sample_hashes(seqs, pos), hash_keys(sample_keys(seqs, pos)))
