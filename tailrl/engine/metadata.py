"""Attention metadata, built in one place for every forward of the engine's model (engine/runner.py): from
host-side block tables and positions for a dynamic forward, or as views of a static step's device buffers.

Backends (engine.attention): `torch` takes `AttnMetadata` (a dense gather of each row's context and a
mask: the oracle), `triton` takes `PagedMetadata` for the paged kernels. Token-tree rows (Best-of-N
verification) always take the dense path: the paged kernel is causal only.
"""

from __future__ import annotations

import torch

from tailrl.model.attention import AttnMetadata, PagedMetadata


def build_metadata(tables: list[list[int]], starts: list[int], lengths: list[int], block_size: int,
                   device, sliding_window: int | None = None, tree_mask: list | None = None,
                   tree_depth: list | None = None) -> tuple[AttnMetadata, torch.Tensor]:
    """Attention metadata for B rows, row b writing `lengths[b]` new tokens at slots starts[b]...

    tables: block table per row; tree_mask: optional per-row (n, n) bool tensor replacing the causal
    pattern among that row's new tokens (token trees for speculative verification); tree_depth:
    optional per-row list of n position offsets (a tree node's rotary position is start + its depth,
    while its K/V still goes to its own slot start + index).
    Returns (metadata, rotary positions (B, T) int64)."""
    B = len(starts)
    T = max(lengths)
    start = torch.tensor(starts, dtype=torch.long)
    n_new = torch.tensor(lengths, dtype=torch.long)
    ctx_len = start + n_new  # (B,)
    L = int(ctx_len.max())
    nb = max(len(t) for t in tables)
    bt = torch.tensor([t + [0] * (nb - len(t)) for t in tables], dtype=torch.long)  # (B, nb)
    key_pos = torch.arange(L)  # (L,)
    key_valid = key_pos.unsqueeze(0) < ctx_len.unsqueeze(1)  # (B, L)
    blk = (key_pos // block_size).clamp(max=nb - 1).unsqueeze(0).expand(B, L)
    ctx_slots = bt.gather(1, blk) * block_size + key_pos % block_size  # (B, L)
    ctx_slots = torch.where(key_valid, ctx_slots, torch.zeros_like(ctx_slots))
    t_idx = torch.arange(T)  # (T,)
    slot_pos = start.unsqueeze(1) + t_idx.unsqueeze(0)  # (B, T) where each new token's K/V is written
    positions = slot_pos.clone()  # (B, T) the token's position in its sequence (rotary, window)
    if tree_depth is not None:
        for b, d in enumerate(tree_depth):
            if d is not None:
                positions[b, : len(d)] = starts[b] + torch.tensor(d, dtype=torch.long)
    q_valid = t_idx.unsqueeze(0) < n_new.unsqueeze(1)  # (B, T)
    causal = key_pos.view(1, 1, L) <= slot_pos.unsqueeze(-1)  # (B, T, L); tree rows: replaced below
    mask = causal & key_valid.unsqueeze(1)
    if sliding_window is not None:  # from the sequence position, so a tree node sees what plain decoding would
        mask &= (positions.unsqueeze(-1) - key_pos.view(1, 1, L)) < sliding_window
    if tree_mask is not None:
        for b, tm in enumerate(tree_mask):
            if tm is not None:
                n, s = lengths[b], starts[b]
                mask[b, :n, s:s + n] = tm
    # padding queries attend to key 0 only, so softmax never sees an all-masked row
    mask = torch.where(q_valid.unsqueeze(-1), mask, key_pos.view(1, 1, L) == 0)
    flat_rows = (torch.arange(B).unsqueeze(1) * T + t_idx.unsqueeze(0))[q_valid]  # (N,)
    write_slots = ctx_slots.gather(1, slot_pos.clamp(max=L - 1))[q_valid]  # (N,)
    positions = torch.where(q_valid, positions, torch.zeros_like(positions))
    meta = AttnMetadata(
        write_rows=flat_rows.to(device),
        write_slots=write_slots.to(device),
        context_slots=ctx_slots.to(device),
        mask=mask.unsqueeze(1).to(device),
    )
    return meta, positions.to(device)


def build_paged_metadata(tables: list[list[int]], starts: list[int], lengths: list[int], block_size: int,
                         device) -> tuple[PagedMetadata, torch.Tensor]:
    """PagedMetadata for B rows, row b writing `lengths[b]` new tokens at positions starts[b]...
    Returns (metadata, rotary positions (B, T) int64; 0 on padding)."""
    T = max(lengths)
    nb = max(1, max(len(t) for t in tables))
    bt = torch.tensor([t + [0] * (nb - len(t)) for t in tables], dtype=torch.int64)  # (B, nb)
    start = torch.tensor(starts, dtype=torch.int64)
    n_new = torch.tensor(lengths, dtype=torch.int64)
    t_idx = torch.arange(T)
    pos = start.unsqueeze(1) + t_idx.unsqueeze(0)  # (B, T)
    valid = t_idx.unsqueeze(0) < n_new.unsqueeze(1)
    slot = bt.gather(1, (pos // block_size).clamp(max=nb - 1)) * block_size + pos % block_size
    meta = PagedMetadata(block_tables=bt.to(torch.int32).to(device), starts=start.to(torch.int32).to(device),
                         q_lens=n_new.to(torch.int32).to(device),
                         slot_mapping=torch.where(valid, slot, -1).reshape(-1).to(device), block_size=block_size)
    return meta, torch.where(valid, pos, 0).to(device)


def static_paged_metadata(block_tables: torch.Tensor, ints: torch.Tensor, block_size: int) -> PagedMetadata:
    """PagedMetadata from a static decode step's device buffers (engine/static_step.py): block_tables
    (nb, max_blocks) int32; ints (nb, INTS) int64 with start, q_len and slot in columns 2, 3, 4. Each column
    is made dense once per step here, not by every layer's kernel wrapper."""
    return PagedMetadata(block_tables=block_tables, starts=ints[:, 2].to(torch.int32), q_lens=ints[:, 3].to(torch.int32),
                         slot_mapping=ints[:, 4].contiguous(), block_size=block_size)
