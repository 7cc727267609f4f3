"""The native decoder: one Llama-family implementation for rollout (cached) and training (autograd).

    logits = model(input_ids)                                   # (B, T) -> (B, T, V), plain causal
    logits = model(ids, positions, attn=meta, kv_cache=cache)   # cached path driven by the engine

With PagedMetadata (engine.attention=triton) every layer runs the Triton kernels: the residual stream is
carried beside the hidden state so each RMSNorm is fused with the residual add (vLLM's layout), rotary
reads a cached cos/sin table, the MLP's SiLU*mul is one kernel. Inference only (no autograd through it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from tailrl import kernels
from tailrl.model import strict
from tailrl.model.args import ModelArgs
from tailrl.model.attention import Attention, AttnMetadata, PagedMetadata
from tailrl.model.head import lm_head_output
from tailrl.model.layers import (
    NO_TP,
    ColumnParallelLinear,
    ParallelLMHead,
    RMSNorm,
    Rotary,
    RowParallelLinear,
    TPContext,
    VocabParallelEmbedding,
)


class MLP(nn.Module):
    def __init__(self, args: ModelArgs, tp: TPContext = NO_TP):
        super().__init__()
        self.gate_up_proj = ColumnParallelLinear(
            args.hidden_size, [args.intermediate_size, args.intermediate_size], args.mlp_bias, tp
        )
        self.down_proj = RowParallelLinear(args.intermediate_size, args.hidden_size, args.mlp_bias, tp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)  # (..., I/tp) each
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs, tp: TPContext = NO_TP):
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.self_attn = Attention(args, tp)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.mlp = MLP(args, tp)

    def forward(self, h, cos, sin, attn=None, kv=None):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, attn, kv)
        return h + self.mlp(self.post_attention_layernorm(h))

    def forward_fused(self, h: torch.Tensor, residual: torch.Tensor | None, table: torch.Tensor,
                      positions: torch.Tensor, attn: PagedMetadata, kv) -> tuple[torch.Tensor, torch.Tensor]:
        """The kernels' path: (h, residual) (B, T, hidden) each -> this layer's (output, residual); the sum
        output + residual is the residual stream forward() returns. Strict: the same kernels, differentiable."""
        ops = strict if self.self_attn.strict else kernels
        n1, n2 = self.input_layernorm, self.post_attention_layernorm
        if residual is None:
            x, residual = ops.rms_norm(h, n1.weight, n1.eps), h
        else:
            x, residual = ops.rms_norm(h, n1.weight, n1.eps, residual=residual)
        a = self.self_attn(x, table, positions, attn, kv)
        x, residual = ops.rms_norm(a, n2.weight, n2.eps, residual=residual)
        return self.mlp.down_proj(ops.silu_mul(self.mlp.gate_up_proj(x))), residual


class CausalLM(nn.Module):
    """Llama / Qwen2 / Qwen3 / Mistral decoder with an LM head."""

    def __init__(self, args: ModelArgs, tp: TPContext = NO_TP):
        super().__init__()
        self.args = args
        self.tp = tp
        self.embed_tokens = VocabParallelEmbedding(args.vocab_size, args.hidden_size, tp)
        self.layers = nn.ModuleList(DecoderLayer(args, tp) for _ in range(args.num_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.rotary = Rotary(args.head_dim, args.rope_theta, args.rope_scaling)
        self.max_positions = args.max_position_embeddings  # rotary table rows (an engine may raise it)
        tied = self.embed_tokens if args.tie_word_embeddings else None
        self.lm_head = ParallelLMHead(args.vocab_size, args.hidden_size, tp, tied=tied)
        self.checkpointing = False  # train.activation_checkpointing: recompute each layer in backward
        self.strict = False  # engine.exact=strict (set_strict)
        self.compute_dtype: torch.dtype | None = None  # strict training on fp32 masters: the engine's dtype

    def set_strict(self, on: bool, compute_dtype: torch.dtype | None = None) -> None:
        """engine.exact=strict: every reduction of the forward through the batch-invariant kernels, in a strict
        training forward too (model/strict.py); compute_dtype: cast to it after the embedding (the engine's)."""
        self.strict, self.compute_dtype = on, compute_dtype
        for m in self.modules():
            if hasattr(type(m), "strict") and m is not self:
                m.strict = on

    @property
    def kv_shape_per_token(self) -> tuple[int, int]:
        """(kv heads on this rank, head_dim): the per-slot shape of the KV cache."""
        return self.args.num_kv_heads // self.tp.size, self.args.head_dim

    def new_kv_cache(self, num_slots: int, dtype=None, device=None) -> torch.Tensor:
        """(2, num_layers, num_slots, kv_heads, head_dim) zeros: the paged KV pool the engine manages."""
        p = self.embed_tokens.weight
        h, d = self.kv_shape_per_token
        return torch.zeros(2, self.args.num_layers, num_slots, h, d, dtype=dtype or p.dtype, device=device or p.device)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor | None = None,
        attn: AttnMetadata | None = None,
        kv_cache: torch.Tensor | None = None,
        logits_index: torch.Tensor | None = None,
        targets: torch.Tensor | None = None,
        temperature: float = 1.0,
        chunk_rows: int = 1024,
    ) -> torch.Tensor:
        """input_ids: (B, T); positions: (B, T) (default 0..T-1); logits_index: (B, K) positions of T
        whose logits are wanted (default all). Returns logits (B, T or K, V); with targets (B, T or K),
        the logprobs (B, T or K) of those tokens under softmax(logits / temperature) instead: in strict mode
        by the invariant kernels (whatever chunk_rows), else from the LM head run `chunk_rows` rows at a
        time (no (B, K, V) logits kept for backward; 0: the whole (B, K, V) logits, as before chunking)."""
        B, T = input_ids.shape
        if positions is None:
            positions = torch.arange(T, device=input_ids.device).expand(B, T)
        h = self.embed_tokens(input_ids)  # (B, T, hidden)
        if isinstance(attn, PagedMetadata) or self.strict:
            if self.compute_dtype is not None:
                h = h.to(self.compute_dtype)
            table = self.rotary.table(self.max_positions, h.dtype, h.device)  # (P, D)
            residual = None
            for i, layer in enumerate(self.layers):
                kv = (kv_cache[0, i], kv_cache[1, i]) if kv_cache is not None else None
                h, residual = layer.forward_fused(h, residual, table, positions, attn, kv)
            ops = strict if self.strict else kernels
            h, _ = ops.rms_norm(h, self.norm.weight, self.norm.eps, residual=residual)
        else:
            cos, sin = self.rotary.cos_sin(positions, h.dtype)
            recompute = self.checkpointing and self.training and torch.is_grad_enabled()
            for i, layer in enumerate(self.layers):
                kv = (kv_cache[0, i], kv_cache[1, i]) if attn is not None else None
                h = checkpoint(layer, h, cos, sin, use_reentrant=False) if recompute else layer(h, cos, sin, attn, kv)
            h = self.norm(h)
        if logits_index is not None:
            h = h.gather(1, logits_index.unsqueeze(-1).expand(-1, -1, h.shape[-1]))  # (B, K, hidden)
        return lm_head_output(self.lm_head, h, targets, temperature, chunk_rows, self.strict)
