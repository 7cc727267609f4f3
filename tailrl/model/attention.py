"""Attention over either the plain causal window (training, oracle tests) or the paged KV cache (rollout).

The cache is one tensor per model, `kv_cache: (2, num_layers, num_slots, kv_heads, head_dim)`, indexed by
flat *slots*. The engine decides which slots a request owns; the model only follows `AttnMetadata`:
write new keys/values to `write_slots`, read the keys of `context_slots`, apply `mask`. That is enough
for prefill, decode, multi-token speculative verification (a token tree is just a mask) and rollback
(the engine forgets slots; nothing here changes).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tailrl.model.layers import (
    NO_TP,
    ColumnParallelLinear,
    RMSNorm,
    RowParallelLinear,
    TPContext,
    apply_rotary,
)


@dataclass
class AttnMetadata:
    """Explicit attention metadata for a cached forward over a padded (B, T) block of new tokens.

    write_rows:    (N,) int64  indices into the flattened (B*T) new tokens that are real (not padding)
    write_slots:   (N,) int64  cache slot receiving each of those tokens' K/V
    context_slots: (B, L) int64 cache slots of every key a row attends over, new tokens included
                   (padding entries may point anywhere valid; the mask hides them)
    mask:          (B, 1, T, L) bool, True where query t may attend key l; every row needs >= 1 True
    """

    write_rows: torch.Tensor
    write_slots: torch.Tensor
    context_slots: torch.Tensor
    mask: torch.Tensor


def sliding_causal_mask(T: int, window: int, device) -> torch.Tensor:
    """(T, T) bool mask: causal and at most `window` keys back (Mistral's sliding window)."""
    i = torch.arange(T, device=device)
    d = i[:, None] - i[None, :]
    return (d >= 0) & (d < window)


class Attention(nn.Module):
    def __init__(self, args, tp: TPContext = NO_TP):
        super().__init__()
        if args.num_heads % tp.size or args.num_kv_heads % tp.size:
            raise ValueError(f"heads {args.num_heads}/{args.num_kv_heads} not divisible by tp size {tp.size}")
        self.head_dim = args.head_dim
        self.n_heads = args.num_heads // tp.size
        self.n_kv = args.num_kv_heads // tp.size
        self.sliding_window = args.sliding_window
        hd = args.head_dim
        self.qkv_proj = ColumnParallelLinear(
            args.hidden_size, [args.num_heads * hd, args.num_kv_heads * hd, args.num_kv_heads * hd], args.qkv_bias, tp
        )
        self.o_proj = RowParallelLinear(args.num_heads * hd, args.hidden_size, args.o_bias, tp)
        self.q_norm = RMSNorm(hd, args.rms_norm_eps) if args.qk_norm else None
        self.k_norm = RMSNorm(hd, args.rms_norm_eps) if args.qk_norm else None

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        attn: AttnMetadata | None = None,
        kv: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """x: (B, T, hidden) -> (B, T, hidden). kv: this layer's (k_pool, v_pool), each (slots, n_kv, D)."""
        B, T, _ = x.shape
        hd = self.head_dim
        q, k, v = self.qkv_proj(x).split([self.n_heads * hd, self.n_kv * hd, self.n_kv * hd], dim=-1)
        q = q.view(B, T, self.n_heads, hd)
        k = k.view(B, T, self.n_kv, hd)
        v = v.view(B, T, self.n_kv, hd)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rotary(q.transpose(1, 2), cos, sin)  # (B, H, T, D)
        k = apply_rotary(k.transpose(1, 2), cos, sin)  # (B, Hkv, T, D)
        v = v.transpose(1, 2)  # (B, Hkv, T, D)

        if attn is None:  # plain causal window: training and oracle comparisons
            if self.sliding_window is not None and T > self.sliding_window:
                mask = sliding_causal_mask(T, self.sliding_window, x.device)
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
            else:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1, enable_gqa=True)
        else:
            k_pool, v_pool = kv
            # write this step's keys/values into their slots (padding rows skipped)
            k_new = k.transpose(1, 2).reshape(B * T, self.n_kv, hd)
            v_new = v.transpose(1, 2).reshape(B * T, self.n_kv, hd)
            k_pool.index_copy_(0, attn.write_slots, k_new.index_select(0, attn.write_rows))
            v_pool.index_copy_(0, attn.write_slots, v_new.index_select(0, attn.write_rows))
            L = attn.context_slots.shape[1]
            flat = attn.context_slots.reshape(-1)
            k_ctx = k_pool.index_select(0, flat).view(B, L, self.n_kv, hd).transpose(1, 2)  # (B, Hkv, L, D)
            v_ctx = v_pool.index_select(0, flat).view(B, L, self.n_kv, hd).transpose(1, 2)  # (B, Hkv, L, D)
            o = F.scaled_dot_product_attention(q, k_ctx, v_ctx, attn_mask=attn.mask, enable_gqa=True)
        o = o.transpose(1, 2).reshape(B, T, self.n_heads * hd)
        return self.o_proj(o)
