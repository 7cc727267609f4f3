"""Building blocks of the decoder: RMSNorm, rotary embedding, and tensor-parallel-ready linears.

The linears follow the Megatron/nano-vllm split so tensor parallelism lives *inside* the layers:
a column-parallel linear holds a slice of the output features, a row-parallel linear a slice of the
input features and all-reduces its partial output. With `tp_size == 1` (the default) every collective
is skipped. Each parameter carries a `weight_loader(param, full_tensor, shard_id)` that slices the
full Hugging Face tensor for this rank, so checkpoint loading and weight sync share one path.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from tailrl.model import canonical, strict


class TPContext:
    """Which tensor-parallel group a layer belongs to. rank 0 of size 1 means no parallelism."""

    def __init__(self, group=None):
        self.group = group
        self.size = dist.get_world_size(group) if group is not None else 1
        self.rank = dist.get_rank(group) if group is not None else 0


NO_TP = TPContext()


def gather_cat(t: torch.Tensor, tp: TPContext, dim: int) -> torch.Tensor:
    """Every TP rank's shard of t concatenated along dim (collective over the TP group; identity at
    size 1)."""
    if tp.size == 1:
        return t
    parts = [torch.empty_like(t) for _ in range(tp.size)]
    dist.all_gather(parts, t.contiguous(), group=tp.group)  # collective: shards -> full tensor
    return torch.cat(parts, dim=dim)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., dim) -> (..., dim); statistics in fp32 as in transformers."""
        h = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)  # one fused kernel where available
        return self.weight * h.to(x.dtype)


def rope_inv_freq(head_dim: int, theta: float, scaling: dict | None) -> torch.Tensor:
    """(head_dim/2,) inverse frequencies, with llama3 scaling of the low frequencies when asked."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if scaling is None:
        return inv
    factor = scaling["factor"]
    lo, hi = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
    old_len = scaling["original_max_position_embeddings"]
    lo_wave, hi_wave = old_len / lo, old_len / hi
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > lo_wave, inv / factor, inv)
    smooth = (old_len / wavelen - lo) / (hi - lo)
    mid = (1 - smooth) * scaled / factor + smooth * scaled
    is_mid = (wavelen >= hi_wave) & (wavelen <= lo_wave)
    return torch.where(is_mid, mid, scaled)


class Rotary(nn.Module):
    """Rotary position embedding (rotate-half convention, as Hugging Face Llama)."""

    def __init__(self, head_dim: int, theta: float, scaling: dict | None):
        super().__init__()
        # kept out of the module's buffers so model.to(bfloat16) never rounds the frequencies
        self.inv_freq = rope_inv_freq(head_dim, theta, scaling)
        self._tables: dict[tuple, torch.Tensor] = {}

    def table(self, max_positions: int, dtype: torch.dtype, device) -> torch.Tensor:
        """(max_positions, head_dim) [cos | sin] halves of every position, built once per dtype and device
        (the fused rotary kernel's cache: a decode step reads it instead of computing cos and sin)."""
        key = (max_positions, dtype, str(device))
        if key not in self._tables:
            from tailrl.kernels import rotary_cache  # lazy: Triton's kernels only on the engine's Triton path

            self._tables[key] = rotary_cache(self.inv_freq.to(device), max_positions, dtype)
        return self._tables[key]

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions: (B, T) int -> cos, sin: (B, 1, T, head_dim) in `dtype`."""
        if self.inv_freq.device != positions.device:
            self.inv_freq = self.inv_freq.to(positions.device)
        freqs = positions.float().unsqueeze(-1) * self.inv_freq  # (B, T, D/2)
        emb = torch.cat([freqs, freqs], dim=-1)  # (B, T, D)
        return emb.cos().to(dtype).unsqueeze(1), emb.sin().to(dtype).unsqueeze(1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, H, T, D); cos/sin: (B, 1, T, D) -> (B, H, T, D)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class ColumnParallelLinear(nn.Module):
    """y = x W^T (+b) with W split by output rows across TP ranks; the output stays sharded.

    `parts` lists the full output sizes of the fused projections (e.g. [q, k, v] or [gate, up]);
    each part is sharded separately so a rank holds [q_r, k_r, v_r].
    """

    strict = False  # engine.exact=strict: the batch-invariant matmul (model/strict.py)

    def __init__(self, in_features: int, parts: list[int], bias: bool, tp: TPContext = NO_TP):
        super().__init__()
        for p in parts:
            if p % tp.size:
                raise ValueError(f"output size {p} not divisible by tp size {tp.size}")
        self.tp = tp
        self.parts = [p // tp.size for p in parts]
        out = sum(self.parts)
        self.weight = nn.Parameter(torch.empty(out, in_features))
        self.bias = nn.Parameter(torch.zeros(out)) if bias else None
        self.weight.weight_loader = self.weight_loader
        if bias:
            self.bias.weight_loader = self.weight_loader

    def weight_loader(self, param: nn.Parameter, full: torch.Tensor, shard_id: int = 0) -> None:
        """Copy this rank's rows of part `shard_id` of the full (unsharded) tensor into `param`."""
        n = self.parts[shard_id]
        start = sum(self.parts[:shard_id])
        rows = full.narrow(0, self.tp.rank * n, n)
        param.data.narrow(0, start, n).copy_(rows)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.strict:
            return strict.linear(x, self.weight, self.bias)
        return canonical.linear(x, self.weight, self.bias)  # (..., out/tp); F.linear but in a canonical engine


class RowParallelLinear(nn.Module):
    """y = x W^T (+b) with W split by input columns; partial outputs are all-reduced across TP ranks."""

    strict = False  # engine.exact=strict: the batch-invariant matmul (model/strict.py)

    def __init__(self, in_features: int, out_features: int, bias: bool, tp: TPContext = NO_TP):
        super().__init__()
        if in_features % tp.size:
            raise ValueError(f"input size {in_features} not divisible by tp size {tp.size}")
        self.tp = tp
        self.in_shard = in_features // tp.size
        self.weight = nn.Parameter(torch.empty(out_features, self.in_shard))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        self.weight.weight_loader = self.weight_loader
        if bias:
            self.bias.weight_loader = self._bias_loader

    def weight_loader(self, param: nn.Parameter, full: torch.Tensor, shard_id: int = 0) -> None:
        param.data.copy_(full.narrow(1, self.tp.rank * self.in_shard, self.in_shard))

    def _bias_loader(self, param: nn.Parameter, full: torch.Tensor, shard_id: int = 0) -> None:
        param.data.copy_(full)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = (strict if self.strict else canonical).linear(x, self.weight)  # (..., out) partial sum
        if self.tp.size > 1:
            dist.all_reduce(y, group=self.tp.group)  # collective: sum partial products
        if self.bias is not None:
            y = y + self.bias  # added once, after the reduction
        return y


def vocab_shard(vocab: int, tp: TPContext) -> tuple[int, int, int]:
    """(rows per rank, this rank's first row, rows of it that exist): the vocabulary is split in
    ceil(vocab / tp) rows per rank, the last rank padded with zero rows when tp does not divide it."""
    shard = -(-vocab // tp.size)
    start = tp.rank * shard
    return shard, start, max(0, min(shard, vocab - start))


def _load_vocab_rows(param: nn.Parameter, full: torch.Tensor, start: int, valid: int) -> None:
    param.data.zero_()
    if valid:  # a last rank may hold padding rows only
        param.data.narrow(0, 0, valid).copy_(full.narrow(0, start, valid))


class VocabParallelEmbedding(nn.Module):
    """Embedding with the vocabulary split across TP ranks; rows outside this rank's slice give 0,
    and an all-reduce assembles the full embedding."""

    def __init__(self, vocab: int, dim: int, tp: TPContext = NO_TP):
        super().__init__()
        self.tp = tp
        self.vocab = vocab
        self.shard, self.start, self.valid = vocab_shard(vocab, tp)
        self.weight = nn.Parameter(torch.empty(self.shard, dim))
        self.weight.weight_loader = self.weight_loader

    def weight_loader(self, param: nn.Parameter, full: torch.Tensor, shard_id: int = 0) -> None:
        _load_vocab_rows(param, full, self.start, self.valid)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: (B, T) -> (B, T, dim)."""
        if self.tp.size == 1:
            return F.embedding(ids, self.weight)
        local = ids - self.start
        inside = (local >= 0) & (local < self.valid)
        y = F.embedding(local.clamp(0, self.shard - 1), self.weight) * inside.unsqueeze(-1)
        dist.all_reduce(y, group=self.tp.group)  # collective: each token's row lives on one rank
        return y


class ParallelLMHead(nn.Module):
    """Logits over a vocabulary split across TP ranks, all-gathered to full width."""

    strict = False  # engine.exact=strict: the batch-invariant matmul (model/strict.py)

    def __init__(self, vocab: int, dim: int, tp: TPContext = NO_TP, tied: VocabParallelEmbedding | None = None):
        super().__init__()
        self.tp = tp
        self.tied = tied
        self.vocab = vocab
        self.shard, self.start, self.valid = vocab_shard(vocab, tp)
        if tied is None:
            self.weight = nn.Parameter(torch.empty(self.shard, dim))
            self.weight.weight_loader = self.weight_loader

    def weight_loader(self, param: nn.Parameter, full: torch.Tensor, shard_id: int = 0) -> None:
        _load_vocab_rows(param, full, self.start, self.valid)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """h: (..., dim) -> logits (..., vocab)."""
        w = self.tied.weight if self.tied is not None else self.weight
        local = (strict if self.strict else canonical).linear(h, w)  # (..., vocab / tp)
        logits = gather_cat(local, self.tp, -1)  # -> (..., padded vocab)
        if self.shard * self.tp.size != self.vocab:
            logits = logits[..., : self.vocab]  # drop the last rank's padding rows
        return logits
