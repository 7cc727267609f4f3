"""The entropy from the chunked LM head (chunked_token_logprobs(..., entropy=True), Targets(ids, entropy=True))
vs -sum p log p of whole logits: values and gradients of both outputs, in every mode of the head."""

import pytest
import torch
import torch.nn.functional as F

from tailrl.model.head import Targets, chunked_token_logprobs, token_entropy, token_logprobs
from tests.helpers import tiny_native

N, HD, V = 50, 32, 300


def make(dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, HD, generator=g).to(dtype).requires_grad_()
    w = (torch.randn(V, HD, generator=g) * 0.2).to(dtype).requires_grad_()
    b = (torch.randn(V, generator=g) * 0.1).to(dtype).requires_grad_()
    t = torch.randint(0, V, (N,), generator=g)
    g_lp, g_ent = torch.randn(N, generator=g).to(dtype), torch.randn(N, generator=g).to(dtype)
    return h, w, b, t, g_lp, g_ent


def brute_entropy(logits, T):
    """-sum_v p_v log p_v of softmax(logits / T), written out."""
    p = torch.softmax(logits / T, -1)
    return -(p * torch.log(p)).sum(-1)


@pytest.mark.parametrize("T", [1.0, 0.7])
@pytest.mark.parametrize("chunk_rows", [1, 7, N])
def test_values_and_gradients_fp64(chunk_rows, T):
    h, w, b, t, g_lp, g_ent = make(torch.float64)
    ref_lp = F.linear(h, w, b).div(T).log_softmax(-1).gather(1, t[:, None])[:, 0]
    ref_ent = brute_entropy(F.linear(h, w, b), T)
    ref_g = torch.autograd.grad((ref_lp * g_lp).sum() + (ref_ent * g_ent).sum(), [h, w, b])
    lp, ent = chunked_token_logprobs(h, w, t, T, b, chunk_rows, entropy=True)
    got_g = torch.autograd.grad((lp * g_lp).sum() + (ent * g_ent).sum(), [h, w, b])
    torch.testing.assert_close(lp, ref_lp, rtol=0, atol=1e-12)
    torch.testing.assert_close(ent, ref_ent, rtol=0, atol=1e-12)
    for a, r in zip(got_g, ref_g):
        torch.testing.assert_close(a, r, rtol=0, atol=1e-12)


def test_unused_entropy_leaves_the_logprob_path_as_it_was():
    """Asking for the entropy changes neither the logprob bits nor, when the entropy is not in the loss, the
    gradients."""
    h, w, b, t, g_lp, _ = make()
    plain = chunked_token_logprobs(h, w, t, 0.7, b, 16)
    plain_g = torch.autograd.grad((plain * g_lp).sum(), [h, w, b])
    lp, _ = chunked_token_logprobs(h, w, t, 0.7, b, 16, entropy=True)
    lp_g = torch.autograd.grad((lp * g_lp).sum(), [h, w, b])
    assert torch.equal(lp, plain)
    for a, r in zip(lp_g, plain_g):
        assert torch.equal(a, r)


def test_fp32_and_autocast_against_whole_logits():
    h, w, b, t, g_lp, g_ent = make()
    ref_ent = token_entropy(F.linear(h, w, b)[None], 0.7)[0]
    ref_g = torch.autograd.grad((ref_ent * g_ent).sum(), [h, w, b])
    _, ent = chunked_token_logprobs(h, w, t, 0.7, b, 7, entropy=True)
    got_g = torch.autograd.grad((ent * g_ent).sum(), [h, w, b])
    torch.testing.assert_close(ent, ref_ent, rtol=1e-5, atol=1e-5)
    for a, r in zip(got_g, ref_g):
        torch.testing.assert_close(a, r, rtol=1e-5, atol=1e-5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = token_entropy(F.linear(h, w, b)[None], 0.7)[0]
        _, ent = chunked_token_logprobs(h, w, t, 0.7, b, 7, entropy=True)
    assert ent.dtype == torch.float32
    torch.testing.assert_close(ent, ref, rtol=1e-3, atol=1e-3)  # the same bf16 logits, fp32 softmax


@pytest.mark.parametrize("chunk_rows", [5, 0])  # chunked, and whole logits (the path TP and chunk_rows=0 take)
def test_model_forward_with_targets(chunk_rows):
    """CausalLM.forward(targets=Targets(ids, entropy=True)) -> (logprobs, entropies) equal to the model's own
    logits' log-softmax and entropy at those positions."""
    model = tiny_native("qwen2", vocab=97, tied=True)[0]
    ids = torch.randint(3, 97, (3, 12), generator=torch.Generator().manual_seed(1))
    idx = torch.arange(4, 11).expand(3, 7)
    tgt = ids.gather(1, idx + 1)
    with torch.no_grad():
        lp, ent = model(ids, logits_index=idx, targets=Targets(tgt, entropy=True), temperature=0.7,
                        chunk_rows=chunk_rows)
        logits = model(ids, logits_index=idx)  # (3, 7, V)
        plain = model(ids, logits_index=idx, targets=Targets(tgt), temperature=0.7, chunk_rows=chunk_rows)
    torch.testing.assert_close(lp, token_logprobs(logits, tgt, 0.7), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ent, brute_entropy(logits.float(), 0.7), rtol=1e-5, atol=1e-5)
    assert torch.equal(plain, lp)  # Targets without entropy: the logprobs alone
