"""Paged KV cache bookkeeping: fixed-size blocks, per-sequence block tables, reference counts.

The tensor itself (`kv: (2, layers, num_blocks * block_size, kv_heads, head_dim)`) is owned here and
handed to the model as-is; a token at position p of a sequence lives in slot
`table[p // block_size] * block_size + p % block_size`.

- fork: siblings share the prompt's blocks (refcount); the first write into a shared block copies it
  (copy-on-write), so G samples of one prompt prefill once;
- truncate (rollback of rejected tokens): forget positions >= n and free whole blocks past them — O(1)
  per freed block, no tensor work;
- free: return a sequence's blocks; allocation failure is reported (the scheduler preempts), never raised.

Capacity is `num_blocks`. With `grow` (the CPU) the tensor starts small and doubles on demand up to it,
so a short job does not pay for a pool it never uses; block ids never change when it grows. Without
(CUDA: captured graphs hold the pool's address) the whole pool is allocated at once.
"""

from __future__ import annotations

import torch


class OutOfBlocks(Exception):
    """No free KV block; the scheduler answers by preempting a sequence (recompute later)."""


GROW_FROM_TOKENS = 4096  # a growing pool's first allocation


class PagedKVCache:
    def __init__(self, model, num_tokens: int, block_size: int, dtype=None, device=None, grow: bool = False):
        self.block_size = block_size
        self._model = model  # makes the larger pool when it grows
        self._grow_pool = grow
        self.tables: dict[int, list[int]] = {}  # seq id -> block ids
        self._allocate(num_tokens, dtype, device)

    def _allocate(self, num_tokens: int, dtype, device) -> None:
        """A fresh, empty pool of capacity num_tokens (growing: its first allocation only)."""
        self.num_blocks = max(1, num_tokens // self.block_size)  # capacity
        first = (min(self.num_blocks, -(-GROW_FROM_TOKENS // self.block_size)) if self._grow_pool
                 else self.num_blocks)
        self.kv = self._model.new_kv_cache(first * self.block_size, dtype=dtype, device=device)
        self.refcount = [0] * first
        self.free_blocks = list(range(first - 1, -1, -1))  # pop() gives low ids first

    # -- bookkeeping -------------------------------------------------------------------------
    @property
    def allocated_blocks(self) -> int:
        return len(self.refcount)

    @property
    def released(self) -> bool:
        """After release() and before restore(): no pool."""
        return self.kv.numel() == 0

    @property
    def num_free(self) -> int:
        if self.released:
            return 0
        return len(self.free_blocks) + self.num_blocks - self.allocated_blocks

    def blocks_for(self, n_tokens: int) -> int:
        return -(-n_tokens // self.block_size)

    def _alloc(self) -> int:
        if not self.free_blocks:
            if self.allocated_blocks >= self.num_blocks:
                raise OutOfBlocks
            self._grow()
        b = self.free_blocks.pop()
        self.refcount[b] = 1
        return b

    def _grow(self) -> None:
        """Double the allocated pool (up to capacity); existing blocks keep their ids and contents."""
        old = self.allocated_blocks
        new = min(self.num_blocks, 2 * old)
        kv = self._model.new_kv_cache(new * self.block_size, dtype=self.kv.dtype, device=self.kv.device)
        kv[:, :, : old * self.block_size].copy_(self.kv)
        self.kv = kv
        self.refcount += [0] * (new - old)
        self.free_blocks = list(range(new - 1, old - 1, -1)) + self.free_blocks

    def _release(self, b: int) -> None:
        self.refcount[b] -= 1
        if self.refcount[b] == 0:
            self.free_blocks.append(b)

    def table(self, seq: int) -> list[int]:
        return self.tables.setdefault(seq, [])

    def ensure(self, seq: int, start: int, n_new: int) -> None:
        """Make positions [start, start + n_new) of `seq` writable: allocate missing blocks and copy
        shared ones (copy-on-write). Raises OutOfBlocks with the table unchanged beyond what fit."""
        table = self.table(seq)
        need = self.blocks_for(start + n_new)
        first_written = start // self.block_size
        for j in range(first_written, min(len(table), need)):
            if self.refcount[table[j]] > 1:  # shared with a sibling: copy before writing
                new = self._alloc()
                self._copy_block(table[j], new)
                self._release(table[j])
                table[j] = new
        while len(table) < need:
            table.append(self._alloc())

    def writable(self, seq: int, start: int, n_new: int) -> bool:
        """Positions [start, start + n_new) already lie in blocks this sequence owns alone: ensure() would
        do nothing (the common decode step, checked without building anything)."""
        table = self.tables.get(seq)
        need = -(-(start + n_new) // self.block_size)
        if table is None or need > len(table):
            return False
        rc = self.refcount
        return all(rc[table[j]] == 1 for j in range(start // self.block_size, need))

    def can_ensure(self, seq: int, start: int, n_new: int) -> bool:
        table = self.tables.get(seq, [])
        need = self.blocks_for(start + n_new)
        shared = sum(1 for j in range(start // self.block_size, min(len(table), need)) if self.refcount[table[j]] > 1)
        return max(0, need - len(table)) + shared <= self.num_free

    def fork(self, parent: int, child: int, n_tokens: int) -> None:
        """child shares parent's first n_tokens (their blocks, by reference)."""
        blocks = self.table(parent)[: self.blocks_for(n_tokens)]
        for b in blocks:
            self.refcount[b] += 1
        self.tables[child] = list(blocks)

    def truncate(self, seq: int, n_tokens: int) -> None:
        """Rollback: keep only positions < n_tokens."""
        table = self.table(seq)
        keep = self.blocks_for(n_tokens)
        for b in table[keep:]:
            self._release(b)
        del table[keep:]

    def free(self, seq: int) -> None:
        for b in self.tables.pop(seq, []):
            self._release(b)

    # -- the pool's memory between rollouts -----------------------------------------------------
    def release(self) -> None:
        """Free the pool's memory (every sequence must be gone): the update can use it; restore() before
        use. Idempotent."""
        if self.tables:
            raise RuntimeError("release() with live sequences")
        if not self.released:
            self.kv = self.kv.new_empty(0)
            self.refcount, self.free_blocks = [], []

    def restore(self, num_tokens: int) -> None:
        """After release(): a fresh pool of capacity num_tokens (measured again by the caller: the update may
        have left less, or more, free memory). New memory: captured graphs must be captured again.
        A no-op when not released."""
        if self.released:
            self._allocate(num_tokens, self.kv.dtype, self.kv.device)

    # -- tensor work ---------------------------------------------------------------------------
    def _copy_block(self, src: int, dst: int) -> None:
        bs = self.block_size
        self.kv[:, :, dst * bs:(dst + 1) * bs].copy_(self.kv[:, :, src * bs:(src + 1) * bs])

    def slots(self, seq: int, start: int, end: int) -> list[int]:
        """Flat slots of positions [start, end) (blocks must exist)."""
        table, bs = self.tables[seq], self.block_size
        return [table[p // bs] * bs + p % bs for p in range(start, end)]

    def move(self, seq: int, src: list[int], dst: list[int]) -> None:
        """Copy the K/V of positions `src` to positions `dst` of one sequence (all read before any write,
        so the two may overlap): compacts a verified token-tree path into consecutive positions."""
        dev = self.kv.device
        s = torch.tensor([self.slots(seq, p, p + 1)[0] for p in src], dtype=torch.long, device=dev)
        d = torch.tensor([self.slots(seq, p, p + 1)[0] for p in dst], dtype=torch.long, device=dev)
        self.kv[:, :, d] = self.kv[:, :, s]

    def read(self, seq: int, n_tokens: int) -> torch.Tensor:
        """(2, layers, n_tokens, kv_heads, head_dim) copy of a sequence's valid KV (migration, tests)."""
        idx = torch.tensor(self.slots(seq, 0, n_tokens), dtype=torch.long, device=self.kv.device)
        return self.kv.index_select(2, idx)

    def write(self, seq: int, kv: torch.Tensor) -> None:
        """Allocate blocks for a sequence and store its KV (2, layers, n_tokens, kv_heads, head_dim):
        the inverse of read (KV migration between layouts)."""
        n = kv.shape[2]
        self.ensure(seq, 0, n)
        idx = torch.tensor(self.slots(seq, 0, n), dtype=torch.long, device=self.kv.device)
        self.kv.index_copy_(2, idx, kv.to(device=self.kv.device, dtype=self.kv.dtype))
