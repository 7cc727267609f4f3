"""The `blocked` keyed sampler: the inverse CDF at one keyed uniform u, with no float64 over the
vocabulary: fp32 weights p = exp((logit - max) / T), fp32 block sums by a fixed pairwise tree of
elementwise adds, then a search over the block masses and one within the chosen block, both in exact
integer (fixed-point) arithmetic. Its top-k / top-p cut is a threshold on p found by an integer radix
select (histograms) instead of a sort of the vocabulary; ties at the cut are kept. Its tokens agree with
inverse_cdf's except where u falls within rounding of a token boundary, so couplings built on u carry
over.

Batch invariance holds by construction rather than by the behaviour of reduction kernels: every
full-vocabulary step is elementwise (IEEE, row by row), a max (exact in any order), a tree of elementwise
adds of fixed shape, or an integer sum / cumsum / index_add_ (exact in any order). Every shape is fixed by
(B, V), and nothing is read back to the host when the caller passes `flags`, so the eager path and a
captured CUDA graph compute the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from tailrl import kernels
from tailrl.engine.sampling.hashing import uniform_from_hash
from tailrl.engine.sampling.processing import Flags

BLOCK = 256  # most tokens per block (a power of two: block sums are pairwise trees)
FIX_BITS = 40  # block masses and top-p masses in units of 2**-40 of the largest token's weight (= 1)


def block_size(V: int) -> int:
    """Tokens per block for a vocabulary of V: the power of two at or above sqrt(V) (balancing the two
    levels), at most BLOCK. A function of V alone, so of no row or batch."""
    return min(BLOCK, 1 << max(0, math.ceil(math.log2(max(V, 1)) / 2)))


def _radix_widths(V: int) -> tuple[int, ...]:
    """Digit widths (summing to 30, a weight's bit pattern: p <= 1.0 < 2**30) of the radix select for a
    vocabulary of V: a pass's 3 * 2**d buckets per row stay within ~V, so small vocabularies do not pay for
    big histograms; 10 bits (3 passes) from V = 3072 up. A function of V alone."""
    d = max(4, min(10, (V // 3).bit_length() - 1))
    n = -(-30 // d)
    return tuple(30 // n + (i < 30 % n) for i in range(n))


def _tree_sum(x: torch.Tensor) -> torch.Tensor:
    """(..., w) -> (...), w a power of two: the sum over the last dim by a fixed pairwise tree of
    elementwise adds (x[:w/2] + x[w/2:], repeated). Each output is the same sequence of IEEE additions
    whatever the batch size, thread count or device — a reduction kernel's order may follow the shape."""
    w = x.shape[-1]
    while w > 1:
        w //= 2
        x = x[..., :w] + x[..., w:]
    return x[..., 0]


def block_sums(p: torch.Tensor, block: int) -> torch.Tensor:
    """p: (B, V) float32 -> (B, ceil(V / block)) float32 sums of consecutive blocks of `block` tokens (a
    power of two; the last block zero-padded), each a _tree_sum."""
    B, V = p.shape
    full = V // block
    parts = []
    if full:
        parts.append(_tree_sum(p[:, :full * block].reshape(B, full, block)))
    if V % block:  # the tail block: padded on its own so the (B, V) weights are not copied
        tail = torch.nn.functional.pad(p[:, full * block:], (0, block - V % block))
        parts.append(_tree_sum(tail.unsqueeze(1)))
    return torch.cat(parts, -1) if len(parts) > 1 else parts[0]


def _block_masses(p: torch.Tensor, block: int) -> torch.Tensor:
    """p: (B, V) float32 weights <= 1 -> (B, nb) int64 block masses in units of 2**-FIX_BITS. Scaling by a
    power of two is exact and truncation drops < 2**-40 per block; sums of these integers are exact in any
    order. With block sums <= 2**8 and nb < 2**14 the total stays below 2**62."""
    return (block_sums(p, block) * float(2 ** FIX_BITS)).long()


def _below(u: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """u: (B,) float64 in (0, 1); n: (B,) int64 > 0 -> (B,) int64 floor(u * n) in [0, n)."""
    return torch.minimum((u * n.double()).long(), n - 1)


def _sample_weights(p: torch.Tensor, u: torch.Tensor, block: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """p: (B, V) float32 weights in [0, 1], each row's largest = 1 (exp(logit - max)); u: (B,) float64
    uniforms. -> (tokens (B,) int64, total (B,) int64): the first token whose cumulative weight exceeds
    u * sum(p), and sum(p) in units of 2**-FIX_BITS (from the block masses).

    Level 1 picks the block whose cumulative integer mass passes t = floor(u * total) and keeps the
    remainder r in [0, q_j); level 2 maps r / q_j onto the chosen block's own integer weights (relative to
    the block's largest weight, 2**(63 - bits(block)) each so their sum fits int64) and searches it. A
    token whose weight is 0 (filtered, -inf, padding) adds nothing to either cumulative sum, so it can never
    be the first to pass its target. Integer cumsums are monotone, so "count of cumulative <= target" is
    the first index past it. block defaults to block_size(V)."""
    B, V = p.shape
    block = block or block_size(V)
    q = _block_masses(p, block)  # (B, nb)
    cq = q.cumsum(-1)
    total = cq[:, -1]
    t = _below(u, total)
    j = (cq <= t.unsqueeze(-1)).sum(-1).clamp_(max=q.shape[-1] - 1)  # (B,) the chosen block
    qj = q.gather(-1, j.unsqueeze(-1)).squeeze(-1)
    r = t - (cq.gather(-1, j.unsqueeze(-1)).squeeze(-1) - qj)  # (B,) in [0, q_j)
    idx = j.unsqueeze(-1) * block + torch.arange(block, device=p.device)  # (B, block) token ids
    w = p.gather(-1, idx.clamp(max=V - 1)).masked_fill(idx >= V, 0.0).double()
    top = w.amax(-1, keepdim=True)
    wq = (w / torch.where(top > 0, top, 1.0) * float(2 ** (63 - block.bit_length()))).long()
    cw = wq.cumsum(-1)
    u2 = (r.double() + 0.5) / qj.clamp(min=1).double()  # r's position within the block's mass, in (0, 1)
    i = (cw <= _below(u2, cw[:, -1].clamp(min=1)).unsqueeze(-1)).sum(-1)
    return (j * block + i).clamp_(max=V - 1), total


def _radix_select(bits: torch.Tensor, weight: torch.Tensor,
                  target: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """bits: (B, V) int32 keys in [0, 2**30); weight: (B, V) int64 (or int32 counts) >= 0, contiguous; target: the row
    totals (B,) int64 -> c (B,) int64. -> (B,) int64: the largest key v with sum(weight[bits >= v]) >= c,
    or 0 where none has (the row's total is below c).

    Most significant digit first: each pass histograms the next digit of every key with an integer
    index_add_ (exact in any order) and takes the largest digit whose mass from the top (plus the mass
    above the prefix, carried from earlier passes) reaches c. Keys outside the prefix chosen so far go to
    a second, ignored histogram, by their digit: keeping them spread over the buckets matters, as one
    shared bucket would serialise the adds on one address (CPU) or atomic (GPU)."""
    B, V = bits.shape
    dev = bits.device
    row = torch.arange(B, dtype=torch.int32, device=dev).unsqueeze(-1)
    # (B, V) buffers shared by the passes: fresh large tensors cost page faults on CPU
    t, outside = torch.empty_like(bits), torch.empty_like(bits)  # int32 0 / 1: adds without a cast
    flat_weight = weight.view(-1)
    prefix = torch.zeros(B, 1, dtype=torch.int64, device=dev)
    above = torch.zeros(B, 1, dtype=torch.int64, device=dev)
    widths = _radix_widths(V)
    shift, ok, chosen, c = sum(widths), None, None, None
    for d in widths:
        if chosen is not None:  # t holds the last pass's index: outside = not in the chosen prefix
            torch.ne(t, chosen, out=outside)
        shift -= d
        n = 1 << d
        base = row * n  # row r's buckets: [r n, (r + 1) n); keys outside the prefix: B n further on
        torch.bitwise_right_shift(bits, shift, out=t).bitwise_and_(n - 1).add_(base)  # & keeps NaN in range
        if chosen is not None:
            t.add_(outside, alpha=B * n)
        hist = torch.zeros(2 * B * n, dtype=weight.dtype, device=dev).index_add_(0, t.view(-1), flat_weight)
        hist = hist[:B * n].view(B, n)
        if c is None:
            c = target(hist.sum(-1)).unsqueeze(-1)
        mass = hist.flip(-1).cumsum(-1).flip(-1) + above  # [:, x] = weight of keys >= prefix . x
        digit = (mass >= c).sum(-1, keepdim=True) - 1  # mass falls with x
        if ok is None:  # where the first pass finds a digit, so does every later one (the prefix reaches c)
            ok = digit.squeeze(-1) >= 0
        digit = digit.clamp_(min=0)
        above = mass.gather(-1, digit) - hist.gather(-1, digit)  # keys above the new prefix
        prefix = (prefix << d) + digit
        chosen = digit.int() + base
    return torch.where(ok, prefix.squeeze(-1), 0)


def _nucleus_floor(p: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, need_k: bool,
                   need_p: bool) -> torch.Tensor:
    """The samplers' top-k / top-p floor (nucleus_floor_torch's definition): on CUDA the Triton kernel
    (kernels/radix.py: the same floors, reading p once per pass, no (B, V) temporaries, p left unchanged),
    elsewhere the torch radix select (the CPU's path and the kernel's test oracle)."""
    if p.is_cuda and kernels.HAS_TRITON:
        return kernels.nucleus_floor(p, top_k, top_p, need_k, need_p)
    return nucleus_floor_torch(p, top_k, top_p, need_k, need_p)


def nucleus_floor_torch(p: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, need_k: bool,
                        need_p: bool) -> torch.Tensor:
    """p: (B, V) float32 weights in [0, 1] (largest = 1); top_k: (B,) int (0 = off); top_p: (B,) float.
    -> (B,) int32 floor on p's bit pattern (p.view(int32), monotone in p >= 0): the tokens kept are those
    with bits >= floor (0 keeps all).

    top-k keeps every token at least as likely as the k-th (ties at the cut stay, as in HF's
    TopKLogitsWarper). top-p then keeps every token whose strictly-more-likely mass within the top-k set is
    <= top_p of that set's mass: the nucleus up to and including the token crossing top_p, ties included
    (so always the most likely token). Masses are integers (units of 2**-FIX_BITS), so the cut is exact and
    order-free; a row's floor depends on its own row and parameters only (0 where its top-k / top-p is
    off). p is scaled by 2**FIX_BITS and back in place (exact: a power of two, no overflow or underflow)
    to make the integer masses without a float32 temporary of the vocabulary's size."""
    bits = p.view(torch.int32)
    floor = torch.zeros(p.shape[0], dtype=torch.int64, device=p.device)
    if need_k:
        ones = torch.ones(bits.shape, dtype=torch.int32, device=p.device)  # counts: int32 (< V) histograms
        k = top_k.long()
        floor = torch.where(top_k > 0, _radix_select(bits, ones, lambda total: k), floor)
    if need_p:
        w = p.mul_(float(2 ** FIX_BITS)).long()  # (B, V) integer token masses
        p.mul_(float(2 ** -FIX_BITS))
        # the top-k set's mass (all of it where top-k is off: the radix's first histogram sums it for free)
        kept = torch.where(bits >= floor.unsqueeze(-1).int(), w, 0).sum(-1) if need_k else None
        share = top_p.double()

        def target(total: torch.Tensor) -> torch.Tensor:  # the least integer mass above top_p * kept
            return (share * (kept if kept is not None else total).double()).long() + 1

        floor = torch.where(top_p < 1, torch.maximum(floor, _radix_select(bits, w, target)), floor)
    return floor.int()


def _weights(logits: torch.Tensor, temperature: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """logits: (B, V) any float dtype; temperature: (B,). -> (p (B, V) float32 = exp((logit - max) / T) in
    [0, 1] with the max exactly 1, max (B, 1) float32, T (B, 1) float32 with greedy rows at 1). One (B, V)
    allocation: the subtraction's output is divided and exponentiated in place. exp, not the cheaper exp2:
    torch's CPU exp2 computes a vector body and a scalar tail differently, and which elements of a row fall
    in a tail depends on the batch and the thread split (test_weights_are_bitwise_batch_invariant)."""
    t = torch.where(temperature > 0, temperature, torch.ones_like(temperature)).float().unsqueeze(-1)
    m = logits.amax(-1, keepdim=True).float()
    p = torch.sub(logits, m)  # float32 for float32 / bf16 / fp16 logits (the (B, 1) max promotes)
    if p.dtype != torch.float32:
        p = p.float()
    return p.div_(t).exp_(), m, t


def sample_blocked(logp: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """logp: (B, V) processed log-probs (-inf where filtered); h: (B,) -> (B,) int64 tokens: the blocked
    inverse CDF of softmax(logp) at uniform_from_hash(h). keyed_sample_hashed(method="blocked") runs the
    same search on exp((logit - max) / T) directly, fused with its own top-k / top-p cut."""
    p = (logp - logp.amax(-1, keepdim=True)).exp()
    return _sample_weights(p, uniform_from_hash(h))[0]


def keyed_blocked(logits: torch.Tensor, h: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                   top_p: torch.Tensor, flags: Flags) -> tuple[torch.Tensor, torch.Tensor]:
    """keyed_sample_hashed for method "blocked": (tokens (B,) int64, logprobs (B,) float32).
    Full-vocabulary passes: max, the fused weights (sub, div, exp in place), the block-sum tree, and
    with top-k / top-p the radix passes, the cut and a second tree over the cut weights."""
    need_k, need_p, any_greedy = flags
    p, m, t = _weights(logits, temperature)
    if need_k or need_p:
        total = _block_masses(p, block_size(p.shape[-1])).sum(-1)  # the uncut mass, for the logprob
        floor = _nucleus_floor(p, top_k, top_p, need_k, need_p)
        p.masked_fill_(p.view(torch.int32) < floor.unsqueeze(-1), 0.0)  # rows with floor 0 are unchanged
        tokens, _ = _sample_weights(p, uniform_from_hash(h))
    else:
        tokens, total = _sample_weights(p, uniform_from_hash(h))
    return finish(logits, tokens, temperature, m, t, total, any_greedy)


def finish(logits: torch.Tensor, tokens: torch.Tensor, temperature: torch.Tensor, m: torch.Tensor, t: torch.Tensor,
           total: torch.Tensor, any_greedy: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy rows -> argmax of the logits; the logprob log softmax(logits / T) at each token (B,), from the
    max m (B, 1), T (B, 1) and the integer mass `total` (B,) of the weights already made:
    (l - max) / T - ln(sum exp((l - max) / T)), with the same elementwise ops as the weights. Shared by the
    samplers that build blocked's weights (blocked, gumbel), so their logprobs are one definition."""
    if any_greedy:
        tokens = torch.where(temperature <= 0, logits.argmax(-1), tokens)
    x = (logits.gather(-1, tokens.unsqueeze(-1)).float() - m).div_(t).squeeze(-1)
    log_z = torch.log(total.double()) - FIX_BITS * math.log(2.0)
    return tokens, (x.double() - log_z).float()
