"""Static-buffer decode steps, host side: the fixed per-bucket buffers a decode step runs on, so on CUDA
the whole step (forward + keyed sampling) is one CUDA graph replay (nano-vllm's decode loop, plus our
sampler). The device side, eager or captured, is the model runner's (engine/runner.py).

    host:   pick bucket nb >= B; write every row's token, position, slot, key prefix and sampling
            parameters into two pinned host buffers (one int64, one float32), the block tables compactly
            (nb, W int32, W the longest table of the step) into a third; padding rows get q_len 0 and slot
            -1 (no K/V write, zero attention output, their sample is ignored)
    device: three non-blocking copies in (the tables' W columns spread into the static (nb, max_blocks)
            table on the device); then the runner's forward + keyed sampling -> (tokens, logprobs) as one
            (nb, 2) float64 buffer; one copy out

The buffers keep their addresses for the engine's life (a captured graph reads them). On a CPU the same
code runs eagerly (how it is tested: token-identical to the dynamic path). A row whose pending tokens are
not exactly one (a just-adopted sequence) takes the dynamic step instead.
"""

from __future__ import annotations

import numpy as np
import torch

from tailrl.engine.sequence import Sequence

INTS = 8  # int columns: token, position, start, q_len, slot, key prefix, sample pos, top_k


def buckets(max_batch_size: int) -> list[int]:
    """Batch sizes with a buffer (and a graph): powers of two up to max_batch_size, and max_batch_size."""
    out = [1]
    while out[-1] < max_batch_size:
        out.append(min(2 * out[-1], max_batch_size))
    return out


class Buffers:
    """One bucket's buffers: host staging (pinned on CUDA) and their device twins, plus the output index."""

    def __init__(self, nb: int, max_blocks: int, device: torch.device):
        pin = device.type == "cuda"
        self.nb = nb
        self.host_ints = torch.zeros(nb, INTS, dtype=torch.int64, pin_memory=pin)
        self.host_floats = torch.ones(nb, 2, dtype=torch.float32, pin_memory=pin)  # temperature, top_p
        self.host_tables = torch.zeros(nb * max_blocks, dtype=torch.int32, pin_memory=pin)  # (nb, W) compact
        self.ints = self.host_ints.numpy()  # numpy views: row writes without a torch op each
        self.floats = self.host_floats.numpy()
        self.tables = self.host_tables.numpy()
        self.dev_ints = torch.zeros_like(self.host_ints, device=device)
        self.dev_floats = torch.ones_like(self.host_floats, device=device)
        self.dev_stage = torch.zeros_like(self.host_tables, device=device)
        self.dev_tables = torch.zeros(nb, max_blocks, dtype=torch.int32, device=device)  # what the kernels read
        self.index = torch.zeros(nb, 1, dtype=torch.int64, device=device)  # logits at each row's one token
        self.pad = np.zeros(INTS, dtype=np.int64)
        self.pad[4] = -1  # padding rows: q_len 0, slot -1 (no K/V write)


class StaticBuffers:
    """Every bucket's Buffers, made on first use, and the host side of a step: fill and copy in."""

    def __init__(self, max_batch_size: int, max_blocks: int, block_size: int, device: torch.device):
        self.buckets = buckets(max_batch_size)
        self.max_blocks = max_blocks
        self.block_size = block_size
        self.device = device
        self.bufs: dict[int, Buffers] = {}

    @staticmethod
    def fits(ready: list[Sequence]) -> bool:
        """Every row decodes exactly one pending token (else the dynamic step runs)."""
        return all(s.pending == 1 for s in ready)

    def stage(self, ready: list[Sequence], tables: dict[int, list[int]]) -> Buffers:
        """Fill the bucket of len(ready) rows (blocks ensured; tables: the cache's block tables) and start the
        copies to the device. Returns the bucket's buffers."""
        B = len(ready)
        if B > self.buckets[-1]:
            raise ValueError(f"a decode step of {B} rows exceeds the largest static bucket ({self.buckets[-1]}, "
                             "engine.max_batch_size)")
        nb = next(b for b in self.buckets if b >= B)
        bufs = self.bufs.get(nb) or self.bufs.setdefault(nb, Buffers(nb, self.max_blocks, self.device))
        width = self._fill(bufs, ready, tables)
        bufs.dev_ints.copy_(bufs.host_ints, non_blocking=True)
        bufs.dev_floats.copy_(bufs.host_floats, non_blocking=True)
        n = nb * width  # the used columns only: (nb, width) in, spread into (nb, max_blocks) on the device
        bufs.dev_stage[:n].copy_(bufs.host_tables[:n], non_blocking=True)
        bufs.dev_tables[:, :width].copy_(bufs.dev_stage[:n].view(nb, width))
        return bufs

    def _fill(self, bufs: Buffers, ready: list[Sequence], tables: dict[int, list[int]]) -> int:
        """Host side: the rows of this step (padding rows reset), written through numpy views. Returns the
        tables' width W (the longest block table; columns past a row's own length are never read)."""
        bs = self.block_size
        ints, floats = bufs.ints, bufs.floats
        ints[len(ready):] = bufs.pad
        floats[len(ready):] = 1.0
        row_tables = [tables[s.seq_id] for s in ready]
        width = max(len(t) for t in row_tables)
        compact = bufs.tables[: len(bufs.ints) * width].reshape(-1, width)
        rows = []
        for i, (s, table) in enumerate(zip(ready, row_tables)):
            p = s.num_cached  # the pending token's position
            compact[i, : len(table)] = table
            prm = s.request.params
            rows.append((s.tokens[-1], p, p, 1, table[p // bs] * bs + p % bs, s.key_prefix, s.num_generated,
                         prm.top_k))
            floats[i] = (prm.temperature, prm.top_p)
        ints[: len(ready)] = rows
        return width
