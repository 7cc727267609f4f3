"""The LM head in its three modes, chosen in one place (`lm_head_output`, called by CausalLM.forward):

    logits           lm_head(h) -> (B, K, V)                                    (the engine; targets=None)
    token logprobs   log softmax(lm_head(h) / T)[target] from whole logits      (tp > 1, or chunk_rows=0)
    chunked          the same, the head and log-softmax `chunk_rows` rows at a time (the trainer's default)

and strict mode's logprobs through the batch-invariant kernels (model/strict.py) whatever chunk_rows is.
Targets given as `Targets(ids, entropy=True)` also return each position's entropy of softmax(logits / T)
(the update's `actor/entropy` and entropy bonus): in the chunked mode from the same chunks, never (N, V).

The chunked mode is the training forward's last step without (N, V) logits: forward keeps only the
per-row logsumexp, backward recomputes each chunk's logits (one extra LM-head matmul, the Liger-kernel
trade), so memory is O(chunk_rows x V) whatever N is, where whole logits would keep an (S, C, V) fp32 tensor
for backward (3.2 GB at 64 x 256 tokens, V = 49,152) and build two more of the same size in backward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.autograd.function import once_differentiable

from tailrl.model import strict


@dataclass(frozen=True)
class Targets:
    """What the head computes at the gathered positions: the logprobs of `ids` (B, K) and, with entropy, the
    entropy (B, K) of each position's distribution too."""

    ids: torch.Tensor
    entropy: bool = False


def lm_head_output(lm_head, h: torch.Tensor, targets: torch.Tensor | Targets | None, temperature: float = 1.0,
                   chunk_rows: int = 1024, strict_mode: bool = False):
    """h: (B, K, hidden) final-norm hidden states; lm_head: the model's ParallelLMHead. -> logits (B, K, V)
    when targets is None, else the logprobs (B, K) of targets (B, K) under softmax(logits / temperature);
    with Targets(ids, entropy=True) the pair (logprobs, entropy), both (B, K)."""
    if targets is None:
        return lm_head(h)
    want_entropy = isinstance(targets, Targets) and targets.entropy
    ids = targets.ids if isinstance(targets, Targets) else targets
    if strict_mode or lm_head.tp.size > 1 or chunk_rows <= 0:
        # strict: the engine's logprob, the invariant head then one row per program; TP: the plain head (its
        # vocabulary gather is the collective); chunk_rows=0: whole logits, as before chunking
        logits = lm_head(h)
        lp = strict.token_logprobs(logits, ids, temperature) if strict_mode else \
            token_logprobs(logits, ids, temperature)
        return (lp, token_entropy(logits, temperature)) if want_entropy else lp
    w = lm_head.tied.weight if lm_head.tied is not None else lm_head.weight  # (V, hidden), tied or not
    return chunked_token_logprobs(h, w, ids, temperature, chunk_rows=chunk_rows, entropy=want_entropy)  # (B, K)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """logits: (S, T, V) predicting targets (S, T) -> (S, T) log softmax(logits / T)[target].
    Computed row-chunk by row-chunk in fp32 to bound the (S, T, V) fp32 temporary."""
    out = []
    for lg, tg in zip(logits.split(4), targets.split(4)):
        lp = (lg.float() / temperature).log_softmax(-1)
        out.append(lp.gather(-1, tg.unsqueeze(-1)).squeeze(-1))
    return torch.cat(out)


def token_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """logits: (S, T, V) -> (S, T) entropy -sum p log p of softmax(logits / T), in fp32 row-chunk by row-chunk
    (differentiable: autograd through the whole-logits path)."""
    out = []
    for lg in logits.split(4):
        lp = (lg.float() / temperature).log_softmax(-1)
        out.append(-(lp.exp() * lp).sum(-1))
    return torch.cat(out)


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype F.linear would run in: autocast's when it is on for t's device, else t's own."""
    dev = t.device.type
    return torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else t.dtype


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Softmax precision: fp32, as token_logprobs' .float(); fp64 inputs stay fp64 (exact-maths tests)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


class _ChunkedHead:
    """The LM head in the matmul dtype (w: (V, Hd), b: (V,) or None, cast once) and one (c, V) logits
    buffer in the softmax dtype (+ one in the matmul dtype when they differ, + one more for the entropy),
    reused by every chunk: a fresh 100+ MB tensor per chunk is a fresh mmap on a CPU, i.e. page faults each
    time."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, rows: int, dtype: torch.dtype,
                 entropy: bool = False):
        self.w = weight.to(dtype)
        self.b = bias.to(dtype) if bias is not None else None
        vocab, device = weight.shape[0], weight.device
        self.acc = torch.empty(rows, vocab, dtype=_acc_dtype(dtype), device=device)
        self.low = torch.empty(rows, vocab, dtype=dtype, device=device) if dtype != self.acc.dtype else None
        self.aux = torch.empty_like(self.acc) if entropy else None  # softmax numerators beside (x - max)

    def logits(self, h: torch.Tensor, temperature: float) -> torch.Tensor:
        """h: (c, Hd) in the matmul dtype -> (c, V) logits / temperature in the softmax dtype, a view of the
        buffer (overwritable in place). The same ops and rounding as F.linear(h, w, b).float() / T: the
        matmul in the input dtype, as the LM head does, then fp32."""
        c = h.shape[0]
        w, b = self.w, self.b
        mm = self.acc[:c] if self.low is None else self.low[:c]
        if b is None:
            torch.mm(h, w.t(), out=mm)
        else:
            torch.addmm(b, h, w.t(), out=mm)  # what F.linear runs with a bias
        out = mm if self.low is None else self.acc[:c].copy_(mm)
        if temperature != 1.0:
            out.div_(temperature)
        return out

    def low_precision(self, x: torch.Tensor) -> torch.Tensor:
        """(c, V) softmax-dtype -> the matmul dtype, into the second buffer (x itself when they agree)."""
        return x if self.low is None else self.low[: x.shape[0]].copy_(x)


class _ChunkedTokenLogprob(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk_rows, with_entropy):
        """hidden: (N, Hd), weight: (V, Hd), bias: (V,) or None, targets: (N,) int64 -> (N,) fp32 logprobs and
        (N,) fp32 entropies ((0,) without with_entropy)."""
        dtype = _compute_dtype(hidden)
        N = hidden.shape[0]
        acc = _acc_dtype(dtype)
        out = torch.empty(N, dtype=acc, device=hidden.device)
        lse = torch.empty(N, dtype=acc, device=hidden.device)  # the only per-row state kept
        ent = torch.empty(N if with_entropy else 0, dtype=acc, device=hidden.device)
        # Autocast off inside: the casts are explicit, so backward (run without autocast) repeats them.
        with torch.autocast(hidden.device.type, enabled=False):
            head = _ChunkedHead(weight, bias, min(chunk_rows, N), dtype, with_entropy)
            for s in range(0, N, chunk_rows):
                e = min(s + chunk_rows, N)
                logits = head.logits(hidden[s:e].to(dtype), temperature)  # (c, V)
                tgt = logits.gather(1, targets[s:e, None]).squeeze(1)  # (c,)
                m = logits.amax(1)  # (c,)
                # log_softmax's own order: (x_t - max) - log(sum exp(x - max)); exp in place, no 2nd (c, V).
                if with_entropy:  # H = log Z - sum_v e_v (x_v - max) / Z, e = exp(x - max), Z = sum e
                    x = logits.sub_(m[:, None])
                    ex = torch.exp(x, out=head.aux[: e - s])
                    z = ex.sum(1)
                    log_z = z.log()
                    ent[s:e] = log_z - ex.mul_(x).sum(1) / z
                else:
                    log_z = logits.sub_(m[:, None]).exp_().sum(1).log_()
                out[s:e] = (tgt - m) - log_z
                lse[s:e] = m + log_z
        ctx.save_for_backward(hidden, weight, bias, targets, lse, ent)
        ctx.dtype, ctx.temperature, ctx.chunk_rows = dtype, temperature, chunk_rows
        ctx.set_materialize_grads(False)  # an unused entropy output gets no gradient pass
        if not with_entropy:
            ctx.mark_non_differentiable(ent)
        return out, ent

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out, grad_ent):
        """grad_out, grad_ent: (N,) or None -> grads of hidden (N, Hd), weight (V, Hd), bias (V,). With
        z = logits / T, p = softmax(z): dlogp_target/dz = onehot - p and dH/dz = -p (log p + H); dL/dlogits is
        their sum weighted by the upstream gradients, / T, formed one chunk at a time from recomputed logits."""
        hidden, weight, bias, targets, lse, ent = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        dtype, T, rows = ctx.dtype, ctx.temperature, ctx.chunk_rows
        N = hidden.shape[0]
        acc = _acc_dtype(dtype)
        g = grad_out.to(acc) / T if grad_out is not None else torch.zeros(N, dtype=acc, device=hidden.device)
        ge = grad_ent.to(acc) / T if grad_ent is not None and ent.numel() else None  # (N,)
        gh = torch.empty(hidden.shape, dtype=hidden.dtype, device=hidden.device) if need_h else None
        # fp32 accumulators across chunks: summing bf16 partial products chunk by chunk would lose bits.
        gw = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_w else None
        gb = torch.zeros(bias.shape, dtype=acc, device=bias.device) if need_b else None
        with torch.autocast(hidden.device.type, enabled=False):
            head = _ChunkedHead(weight, bias, min(rows, N), dtype, ge is not None)
            for s in range(0, N, rows):
                e = min(s + rows, N)
                h = hidden[s:e].to(dtype)
                gc = g[s:e, None]  # (c, 1)
                if ge is None:
                    p = head.logits(h, T).sub_(lse[s:e, None]).exp_()  # (c, V) softmax
                    p.mul_(-gc).scatter_add_(1, targets[s:e, None], gc)  # (c, V) dL/dlogits, in place
                else:
                    logp = head.logits(h, T).sub_(lse[s:e, None])  # (c, V) log softmax
                    p = torch.exp(logp, out=head.aux[: e - s])
                    logp.add_(ent[s:e, None]).mul_(p).mul_(-ge[s:e, None])  # entropy's part, in place
                    p.mul_(-gc).scatter_add_(1, targets[s:e, None], gc).add_(logp)  # + the logprob's part
                if need_b:
                    gb += p.sum(0)
                p = head.low_precision(p)  # as the reference: the grad through .float() is cast back to bf16
                if need_h:
                    gh[s:e] = p @ head.w
                if need_w:
                    if dtype == acc:
                        gw.addmm_(p.t(), h)
                    else:
                        gw += (p.t() @ h).to(acc)
        gw = gw.to(weight.dtype) if need_w else None
        gb = gb.to(bias.dtype) if need_b else None
        return gh, gw, gb, None, None, None, None


def chunked_token_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                           temperature: float = 1.0, bias: torch.Tensor | None = None,
                           chunk_rows: int = 1024, entropy: bool = False):
    """hidden: (N, Hd) any float dtype (or (..., Hd)); weight: (V, Hd), the LM head in nn.Linear layout
    (may be the tied embedding); targets: (N,) (or (...)) int; bias: (V,) or None.
    Returns (N,) (or (...)) fp32 log_softmax((hidden @ weight.T + bias).float() / temperature)[target],
    i.e. `token_logprobs(F.linear(hidden, weight, bias), targets, temperature)`, differentiable in hidden,
    weight and bias, with peak memory O(chunk_rows x V) instead of O(N x V). (fp64 inputs keep fp64
    throughout and return fp64: for exact-maths tests.) Under autocast the head matmul runs in autocast's
    dtype, as F.linear's would; gradients come back in each input's own dtype. With entropy: the pair
    (logprobs, entropies), the second `token_entropy` of the same logits, both differentiable (one more
    (chunk_rows, V) buffer; the logprobs are the same bits either way)."""
    if hidden.shape[:-1] != targets.shape:
        raise ValueError(f"hidden {tuple(hidden.shape)} and targets {tuple(targets.shape)} disagree")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    out, ent = _ChunkedTokenLogprob.apply(hidden.reshape(-1, hidden.shape[-1]), weight, bias,
                                          targets.reshape(-1).long(), float(temperature), int(chunk_rows),
                                          bool(entropy))
    # a new tensor, not a view: a module returning a view makes FSDP2 warn (in-place ops would skip its hooks)
    out = out.reshape(targets.shape).clone() if out.shape != targets.shape else out
    if not entropy:
        return out
    return out, ent.reshape(targets.shape).clone() if ent.shape != targets.shape else ent
