"""chunked_token_logprobs vs today's unchunked path, token_logprobs(F.linear(h, w, b), targets, T):
values and gradients, plus a peak-RSS check that the (N, V) logits are never materialised."""

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from tailrl.model.head import chunked_token_logprobs, token_logprobs

N, HD, V = 50, 32, 300


def make(dtype=torch.float32, bias=True, seed=0):
    """Logits of std ~1 (RMS-normed hidden, small head weights), as in a real LM head."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, HD, generator=g).to(dtype).requires_grad_()
    w = (torch.randn(V, HD, generator=g) * 0.2).to(dtype).requires_grad_()
    b = (torch.randn(V, generator=g) * 0.1).to(dtype).requires_grad_() if bias else None
    t = torch.randint(0, V, (N,), generator=g)
    gout = torch.randn(N, generator=g)  # an arbitrary upstream gradient (the loss's dL/dlogp)
    return h, w, b, t, gout


def value_and_grads(fn, h, w, b, t, gout):
    out = fn()
    params = [p for p in (h, w, b) if p is not None and p.requires_grad]
    return out, torch.autograd.grad(out, params, gout)


def reference(h, w, b, t, T):
    return token_logprobs(F.linear(h, w, b), t, T)


@pytest.mark.parametrize("T", [1.0, 0.7])
@pytest.mark.parametrize("chunk_rows", [1, 7, 16, N, 4096])  # 7, 16: do not divide N; N and 4096: one chunk
def test_matches_unchunked_fp32(chunk_rows, T):
    h, w, b, t, gout = make()
    ref, ref_g = value_and_grads(lambda: reference(h, w, b, t, T), h, w, b, t, gout)
    out, out_g = value_and_grads(lambda: chunked_token_logprobs(h, w, t, T, b, chunk_rows), h, w, b, t, gout)
    assert out.dtype == torch.float32 and out.shape == (N,)
    # fp32 matmuls of different shapes round differently: 1 ulp of |logp| ~ 10 is 1e-6, hence rtol too.
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    for a, r in zip(out_g, ref_g):
        torch.testing.assert_close(a, r, rtol=1e-6, atol=1e-6)


def test_float64_agrees_to_rounding():
    """In float64 (kept float64 throughout) both paths are the same maths to 1e-12: the hand-written
    backward is the exact gradient, not an approximation."""
    h, w, b, t, gout = make(torch.float64)
    def fp64_reference():
        return (F.linear(h, w, b) / 0.7).log_softmax(-1).gather(1, t[:, None])[:, 0]

    ref, ref_g = value_and_grads(fp64_reference, h, w, b, t, gout)
    out, out_g = value_and_grads(lambda: chunked_token_logprobs(h, w, t, 0.7, b, 7), h, w, b, t, gout)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    for a, r in zip(out_g, ref_g):
        assert a.dtype == torch.float64
        torch.testing.assert_close(a, r, rtol=0, atol=1e-12)


def test_leading_dims_no_bias():
    """(S, C, Hd) hidden and (S, C) targets, as completion_logprobs holds them."""
    h, w, _, t, gout = make(bias=False)
    h3, t2, g2 = h.view(5, 10, HD), t.view(5, 10), gout.view(5, 10)
    ref, ref_g = value_and_grads(lambda: token_logprobs(F.linear(h3, w), t2), h, w, None, t, g2)
    out, out_g = value_and_grads(lambda: chunked_token_logprobs(h3, w, t2, chunk_rows=8), h, w, None, t, g2)
    assert out.shape == (5, 10)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    for a, r in zip(out_g, ref_g):
        torch.testing.assert_close(a, r, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("trainable", ["hidden", "weight"])
def test_grad_on_one_input(trainable):
    h, w, b, t, gout = make()
    (w if trainable == "hidden" else h).requires_grad_(False)
    b.requires_grad_(False)
    x = h if trainable == "hidden" else w
    ref = torch.autograd.grad(reference(h, w, b, t, 0.7), x, gout)[0]
    out = torch.autograd.grad(chunked_token_logprobs(h, w, t, 0.7, b, 16), x, gout)[0]
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)


def test_no_grad_is_the_chunked_forward():
    h, w, b, t, _ = make()
    with torch.no_grad():
        out = chunked_token_logprobs(h, w, t, 0.7, b, 16)
        ref = reference(h, w, b, t, 0.7)
    assert not out.requires_grad
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)


def test_tied_weights_accumulate():
    """The LM head is the input embedding: its gradient is the sum of both uses."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (N,), generator=g)
    t = torch.randint(0, V, (N,), generator=g)
    proj = torch.randn(HD, HD, generator=g) / HD**0.5
    grads = []
    for fn in (lambda h, e: token_logprobs(F.linear(h, e), t, 0.7),
               lambda h, e: chunked_token_logprobs(h, e, t, 0.7, chunk_rows=16)):
        emb = torch.nn.Embedding(V, HD)
        with torch.no_grad():
            emb.weight.copy_(torch.randn(V, HD, generator=torch.Generator().manual_seed(2)) * 0.2)
        h = torch.tanh(emb(ids) @ proj)  # the "decoder": the same weight feeds the head's input too
        fn(h, emb.weight).sum().backward()
        grads.append(emb.weight.grad)
    assert grads[0][ids].abs().sum() > 0  # rows used as inputs got the embedding-side gradient as well
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-6, atol=1e-6)


def test_bf16_inputs():
    h, w, b, t, gout = make(torch.bfloat16)
    ref, ref_g = value_and_grads(lambda: reference(h, w, b, t, 0.7), h, w, b, t, gout)
    out, out_g = value_and_grads(lambda: chunked_token_logprobs(h, w, t, 0.7, b, 7), h, w, b, t, gout)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref, rtol=1e-3, atol=1e-3)  # same bf16 logits, fp32 softmax
    for a, r in zip(out_g, ref_g):
        assert a.dtype == torch.bfloat16
        # bf16 gradients: one rounding apart (the chunked path sums the weight/bias grads in fp32)
        torch.testing.assert_close(a, r, rtol=2e-2, atol=2e-2)


def test_autocast_matches_autocast_reference():
    """fp32 parameters under bf16 autocast: the head matmul runs in bf16 like F.linear's; grads are fp32."""
    h, w, b, t, gout = make()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref, ref_g = value_and_grads(lambda: reference(h, w, b, t, 0.7), h, w, b, t, gout)
        out, out_g = value_and_grads(lambda: chunked_token_logprobs(h, w, t, 0.7, b, 7), h, w, b, t, gout)
    torch.testing.assert_close(out, ref, rtol=1e-3, atol=1e-3)
    for a, r in zip(out_g, ref_g):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, r, rtol=2e-2, atol=2e-2)


def test_rejects_mismatched_targets():
    h, w, _, t, _ = make()
    with pytest.raises(ValueError):
        chunked_token_logprobs(h, w, t[:-1])


# A fresh interpreter per variant, so ru_maxrss (the OS's high-water mark) sees only that variant.
MEM_SCRIPT = r"""
import json, resource, sys
import torch, torch.nn.functional as F
from tailrl.model.head import chunked_token_logprobs
from tailrl.model.head import token_logprobs
variant, N, HD, V, C = sys.argv[1], *map(int, sys.argv[2:])
h = torch.randn(N, HD, requires_grad=True)
w = (torch.randn(V, HD) * 0.05).requires_grad_()
t, g = torch.randint(0, V, (N,)), torch.randn(N)
fn = (lambda h, w, t: token_logprobs(F.linear(h, w), t)) if variant == "ref" else \
     (lambda h, w, t: chunked_token_logprobs(h, w, t, chunk_rows=C))
fn(h[:4], w[:64], t[:4] % 64).sum().backward()  # warm-up: kernels and thread pools, not counted
h.grad = w.grad = None
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
fn(h, w, t).backward(g)
print(json.dumps((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024))  # KiB on Linux
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss is in KiB on Linux only")
def test_peak_memory_of_forward_backward():
    n, hd, v, c = 2048, 64, 49152, 64
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    procs = {k: subprocess.Popen([sys.executable, "-c", MEM_SCRIPT, k, str(n), str(hd), str(v), str(c)],
                                 cwd=root, stdout=subprocess.PIPE, text=True) for k in ("ref", "chunked")}
    peak = {}
    for k, p in procs.items():
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        peak[k] = json.loads(out.strip().splitlines()[-1])
    nv4 = n * v * 4  # one (N, V) fp32 tensor: 384 MiB here
    # the measurement does see the reference's logits (2.4-3.1 x nv4 seen, as the allocator reuses blocks)
    assert peak["ref"] >= 1.5 * nv4, peak
    assert peak["chunked"] <= 0.3 * nv4, peak  # never an (N, V) fp32 tensor (~0.15 x nv4: O(c x V) + grad_w)
    assert peak["ref"] - peak["chunked"] >= 1.2 * nv4, peak
