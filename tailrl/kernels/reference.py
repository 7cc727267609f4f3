"""Pure-torch references of every kernel in tailrl/kernels, written for clarity, not speed.

Place in the flow: the oracles of tests/kernels (each kernel is compared with its `*_ref` under the Triton
interpreter) and a readable statement of what each kernel computes. Same signatures as the kernels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def store_kv_ref(k: torch.Tensor, v: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                 slot_mapping: torch.Tensor) -> None:
    """k, v: (N, Hkv, D) -> k_pool/v_pool (num_slots, Hkv, D) rows slot_mapping[i] (skipped where < 0)."""
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    k_pool[slots] = k[keep]
    v_pool[slots] = v[keep]


def paged_attention_ref(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, block_tables: torch.Tensor,
                        starts: torch.Tensor, q_lens: torch.Tensor, block_size: int, scale: float,
                        sliding_window: int = 0, out: torch.Tensor | None = None) -> torch.Tensor:
    """q: (B, T, H, D); pools: (num_slots, Hkv, D) -> (B, T, H, D): for each real query at p = start + t,
    softmax(q k^T * scale) v in fp32 over the keys at positions max(0, p - W + 1) .. p; zeros elsewhere."""
    B, T, H, D = q.shape
    G = H // k_pool.shape[1]
    res = torch.zeros(B, T, H, D, dtype=q.dtype, device=q.device)
    for b in range(B):
        start, n = int(starts[b]), int(q_lens[b])
        key_pos = torch.arange(start + n, device=q.device)  # the row's whole context, gathered densely
        slots = block_tables[b, key_pos // block_size].long() * block_size + key_pos % block_size
        k = k_pool[slots].float().repeat_interleave(G, dim=1)  # (L, H, D): query head h reads h // G
        v = v_pool[slots].float().repeat_interleave(G, dim=1)
        q_pos = start + torch.arange(n, device=q.device)  # (n,)
        visible = key_pos[None, :] <= q_pos[:, None]  # (n, L) causal
        if sliding_window > 0:
            visible &= key_pos[None, :] > q_pos[:, None] - sliding_window
        scores = torch.einsum("thd,lhd->htl", q[b, :n].float(), k) * scale
        w = scores.masked_fill(~visible, float("-inf")).softmax(-1)  # (H, n, L)
        res[b, :n] = torch.einsum("htl,lhd->thd", w, v).to(q.dtype)
    if out is not None:
        return out.copy_(res)
    return res


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float,
                 residual: torch.Tensor | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """x: (..., D) -> weight * rmsnorm(x) as tailrl.model.layers.RMSNorm (fp32 statistics, x's dtype);
    with residual: h = x + residual, returns (rms_norm(h), h)."""
    h = x if residual is None else x + residual
    y = weight.to(x.dtype) * F.rms_norm(h.float(), (h.shape[-1],), eps=eps).to(x.dtype)
    return y if residual is None else (y, h)


def rotary_cache_ref(inv_freq: torch.Tensor, max_positions: int, dtype: torch.dtype) -> torch.Tensor:
    """(max_positions, D): the cos and sin halves of Rotary.cos_sin for positions 0 .. max_positions - 1."""
    freqs = torch.arange(max_positions, device=inv_freq.device).float().unsqueeze(-1) * inv_freq  # (P, D/2)
    emb = torch.cat([freqs, freqs], dim=-1)  # (P, D) as Rotary.cos_sin builds it
    half = inv_freq.shape[0]
    return torch.cat([emb.cos()[:, :half], emb.sin()[:, :half]], dim=-1).to(dtype)


def apply_rotary_ref(q: torch.Tensor, k: torch.Tensor, cache: torch.Tensor,
                     positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q: (N, Hq, D), k: (N, Hk, D), cache: (max_pos, D), positions: (N,) -> rotated (q, k), rotate-half."""
    half = cache.shape[1] // 2
    rows = cache[positions.long()].to(q.dtype)  # (N, D)
    cos = torch.cat([rows[:, :half], rows[:, :half]], dim=-1).unsqueeze(1)  # (N, 1, D)
    sin = torch.cat([rows[:, half:], rows[:, half:]], dim=-1).unsqueeze(1)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    return rotate(q), rotate(k)


def silu_mul_ref(x: torch.Tensor) -> torch.Tensor:
    """x: (..., 2I) = [gate | up] -> (..., I) silu(gate) * up, in fp32, rounded once to x.dtype."""
    gate, up = x.float().chunk(2, dim=-1)
    return (F.silu(gate) * up).to(x.dtype)


def matmul_invariant_ref(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x: (M, K), weight: (N, K) -> (M, N) = x @ weight.T (+ bias) in fp32, rounded once to x.dtype."""
    y = x.float() @ weight.float().T
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


def log_softmax_invariant_ref(x: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """x: (N, V) -> (N, V) fp32 log_softmax(x.float() / temperature) (elementwise IEEE division)."""
    z = x.float() / torch.full_like(x, temperature, dtype=torch.float32)
    return z.log_softmax(-1)


def token_logprobs_invariant_ref(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits: (N, V), targets: (N,) -> (N,) fp32 log_softmax(logits.float() / temperature)[n, targets[n]]."""
    lp = log_softmax_invariant_ref(logits, temperature)
    return lp.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)
