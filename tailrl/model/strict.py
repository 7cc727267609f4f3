"""Strict exactness (engine.exact=strict): every reduction on the token path runs a batch-invariant Triton
kernel (tailrl/kernels), in the engine and in the trainer's logprob forward alike, so a token's logits —
and therefore the keyed sample and its logprob — do not depend on what else is in the batch, on decode vs
prefill vs speculative verify, or on whether the step is a CUDA graph; and the rollout's logprobs equal the
trainer's bitwise.

    linear             matmul_invariant: fixed tiles, K reduced in order, no split-K
    RMSNorm (+ add)    one row per program
    rotary, SiLU*mul   elementwise kernels
    attention          the paged kernel (keys tiled by absolute position); the trainer's causal forward writes
                       its K/V into a scratch pool and calls the same kernel
    logprob            token_logprobs_invariant (one row per program)

The kernels have no backward: each op is `_KernelForward` — the kernel's output forward, the gradient of
the op's torch reference (kernels/reference.py) backward. The trainer's gradient is then the reference
op's at the kernel's point (its float rounding differs in the last bits; its logprobs do not). On a CPU
the kernels run under the Triton interpreter: strict is then for tests and small experiments.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tailrl import kernels
from tailrl.kernels import reference


class _KernelForward(torch.autograd.Function):
    """out = kernel(*args); d out / d args = that of reference(*args). Non-tensor args pass through."""

    @staticmethod
    def forward(ctx, kernel, ref, *args):
        ctx.ref = ref
        ctx.args = args  # tensors among them are inputs of the graph; kept for the reference's recompute
        with torch.no_grad():
            return kernel(*args)

    @staticmethod
    def backward(ctx, *grads):
        args = [a.detach().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in ctx.args]
        wanted = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        with torch.enable_grad():
            out = ctx.ref(*args)
        outs = out if isinstance(out, tuple) else (out,)
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
        got = iter(torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True)
                   if pairs else [None] * len(wanted))
        return (None, None, *[next(got) if isinstance(a, torch.Tensor) and a.requires_grad else None for a in args])


def _apply(kernel, ref, *args):
    """The kernel, through autograd only when a gradient is wanted (the engine runs under inference_mode)."""
    if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        return _KernelForward.apply(kernel, ref, *args)
    return kernel(*args)


def _linear_kernel(x, w, b):
    return kernels.matmul_invariant(x.reshape(-1, x.shape[-1]), w, b).view(*x.shape[:-1], w.shape[0])


def _linear_ref(x, w, b):
    return reference.matmul_invariant_ref(x.reshape(-1, x.shape[-1]), w, b).view(*x.shape[:-1], w.shape[0])


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x: (..., K), weight: (N, K) -> (..., N) in x's dtype (weights cast to it: bf16 compute on fp32 masters)."""
    w = weight.to(x.dtype)
    b = bias.to(x.dtype) if bias is not None else None
    return _apply(_linear_kernel, _linear_ref, x, w, b)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None):
    """As kernels.rms_norm: x (..., D) -> normed, or with residual -> (normed(x + residual), x + residual)."""
    return _apply(kernels.rms_norm, reference.rms_norm_ref, x, weight.to(x.dtype), eps, residual)


def apply_rotary(q: torch.Tensor, k: torch.Tensor, table: torch.Tensor, positions: torch.Tensor):
    """As kernels.apply_rotary: q (N, Hq, D), k (N, Hk, D), table (P, D), positions (N,) -> (q, k) rotated."""
    return _apply(kernels.apply_rotary, reference.apply_rotary_ref, q, k, table, positions)


def silu_mul(x: torch.Tensor) -> torch.Tensor:
    """(..., 2I) [gate | up] -> (..., I)."""
    return _apply(kernels.silu_mul, reference.silu_mul_ref, x)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits (..., V), targets (...) -> (...) fp32 log_softmax(logits / T)[target], one row per program.
    The kernel always gets fp32 logits (bf16 ones are cast, exactly): the engine hands it fp32 and the
    trainer the model dtype, and a kernel compiled for another dtype reduces a row in another layout (so in
    another order) at a real vocabulary size: the two logprobs would differ."""
    shape = targets.shape
    lp = _apply(kernels.token_logprobs_invariant, reference.token_logprobs_invariant_ref,
                logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), float(temperature))
    return lp.view(shape)


def _causal_kernel(q, k, v, window: int):
    """q (B, T, H, D), k / v (B, T, Hkv, D): k and v themselves as the pool, in pages of one token (row b's
    block table is b * T .. b * T + T - 1), then the engine's paged kernel: its key tiles follow absolute
    positions whatever the page size, so the same tiles in the same order as a decode step's."""
    B, T, Hkv, D = k.shape
    tables = torch.arange(B * T, device=q.device, dtype=torch.int32).view(B, T)
    zeros = torch.zeros(B, dtype=torch.int32, device=q.device)
    lens = torch.full((B,), T, dtype=torch.int32, device=q.device)
    return kernels.paged_attention(q.contiguous(), k.contiguous().view(-1, Hkv, D), v.contiguous().view(-1, Hkv, D),
                                   tables, zeros, lens, 1, D ** -0.5, window)


def _causal_ref(q, k, v, window: int):
    qt, kt, vt = (x.transpose(1, 2).float() for x in (q, k, v))
    T = q.shape[1]
    i = torch.arange(T, device=q.device)
    mask = (i[:, None] >= i[None, :]) & ((i[:, None] - i[None, :] < window) if window else True)
    o = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=True)
    return o.transpose(1, 2).to(q.dtype)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int = 0) -> torch.Tensor:
    """Causal attention of whole sequences (the trainer's forward): q (B, T, H, D), k / v (B, T, Hkv, D) ->
    (B, T, H, D), through the engine's paged kernel so a position's output equals its decode step's."""
    return _apply(_causal_kernel, _causal_ref, q, k, v, window)
