"""Attention over either the plain causal window (training, oracle tests) or the paged KV cache (rollout).

The cache is one tensor per model, `kv_cache: (2, num_layers, num_slots, kv_heads, head_dim)`, indexed by
flat *slots*. The engine decides which slots a request owns; the model only follows explicit metadata:

- `AttnMetadata` (engine.attention=torch, the oracle): write new keys/values to `write_slots`, read the
  keys of `context_slots`, apply `mask`. Enough for prefill, decode, multi-token speculative verification
  (a token tree is just a mask) and rollback (the engine forgets slots; nothing here changes).
- `PagedMetadata` (engine.attention=triton): block tables, per-row start and new-token count, slot of
  every new token; the Triton store-KV and paged-attention kernels read the pools directly (no dense
  gather, no mask). Prefill, decode, recompute after preemption and speculative verify all take the one
  kernel, so a position's K/V and logits are the same whichever forward computed them. Shapes are fixed
  by the batch bucket, so a decode step over it can be captured as a CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tailrl import kernels
from tailrl.model import canonical, strict
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
    query_keys:    engine.exact=canonical: each real query's keys (model/canonical.py), filled by the first layer
    """

    write_rows: torch.Tensor
    write_slots: torch.Tensor
    context_slots: torch.Tensor
    mask: torch.Tensor
    query_keys: list | None = None


@dataclass
class PagedMetadata:
    """Metadata of a paged forward over a padded (B, T) block of new tokens (the Triton kernels' view).

    block_tables:  (B, max_blocks) int32 block ids per row (position p lives in slot
                   block_tables[b, p // block_size] * block_size + p % block_size)
    starts:        (B,) int32 tokens already cached per row (the first new token's position)
    q_lens:        (B,) int32 real new tokens per row (0: a padding row)
    slot_mapping:  (B * T,) int64 cache slot of every new token, -1 for padding
    block_size:    tokens per block
    """

    block_tables: torch.Tensor
    starts: torch.Tensor
    q_lens: torch.Tensor
    slot_mapping: torch.Tensor
    block_size: int


def sliding_causal_mask(T: int, window: int, device) -> torch.Tensor:
    """(T, T) bool mask: causal and at most `window` keys back (Mistral's sliding window)."""
    i = torch.arange(T, device=device)
    d = i[:, None] - i[None, :]
    return (d >= 0) & (d < window)


class Attention(nn.Module):
    strict = False  # engine.exact=strict: the kernels' path in training too (model/strict.py)

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
        attn: AttnMetadata | PagedMetadata | None = None,
        kv: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """x: (B, T, hidden) -> (B, T, hidden). kv: this layer's (k_pool, v_pool), each (slots, n_kv, D).
        With PagedMetadata, or in strict mode, cos is the rotary table (max_positions, D) and sin the
        positions (B, T) (the kernels' path)."""
        if isinstance(attn, PagedMetadata) or self.strict:
            return self._paged(x, cos, sin, attn, kv)
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
            if canonical.is_active():  # engine.exact=canonical: one query at a time (model/canonical.py)
                o = canonical.attention(q, k_ctx, v_ctx, attn)
            else:
                o = F.scaled_dot_product_attention(q, k_ctx, v_ctx, attn_mask=attn.mask, enable_gqa=True)
        o = o.transpose(1, 2).reshape(B, T, self.n_heads * hd)
        return self.o_proj(o)

    def _paged(self, x: torch.Tensor, table: torch.Tensor, positions: torch.Tensor, attn: PagedMetadata | None,
               kv: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        """The kernels' path: x (B, T, hidden), table (max_positions, D) [cos | sin], positions (B, T). attn is
        None for a strict training forward (whole causal sequences, no cache)."""
        B, T, _ = x.shape
        hd = self.head_dim
        ops = strict if self.strict else kernels  # strict: the same kernels, with a backward
        q, k, v = self.qkv_proj(x).split([self.n_heads * hd, self.n_kv * hd, self.n_kv * hd], dim=-1)
        q = q.reshape(B * T, self.n_heads, hd)
        k = k.reshape(B * T, self.n_kv, hd)
        v = v.reshape(B * T, self.n_kv, hd)
        if self.q_norm is not None:
            q = ops.rms_norm(q, self.q_norm.weight, self.q_norm.eps)
            k = ops.rms_norm(k, self.k_norm.weight, self.k_norm.eps)
        q, k = ops.apply_rotary(q, k, table, positions.reshape(-1))
        if attn is None:
            o = strict.causal_attention(q.view(B, T, self.n_heads, hd), k.view(B, T, self.n_kv, hd),
                                        v.reshape(B, T, self.n_kv, hd), self.sliding_window or 0)
            return self.o_proj(o.reshape(B, T, self.n_heads * hd))
        k_pool, v_pool = kv
        kernels.store_kv(k, v, k_pool, v_pool, attn.slot_mapping)
        # one kernel for every forward (no SDPA shortcut for prefills: a recompute after preemption must
        # give the K/V the decode steps gave)
        o = kernels.paged_attention(q.view(B, T, self.n_heads, hd), k_pool, v_pool, attn.block_tables, attn.starts,
                                    attn.q_lens, attn.block_size, hd ** -0.5, self.sliding_window or 0)  # (B,T,H,D)
        return self.o_proj(o.reshape(B, T, self.n_heads * hd))

