"""Static-buffer decode steps: the engine's plain decode step on fixed per-bucket buffers, keyed sampling
included, so on CUDA the whole step is one CUDA graph replay (nano-vllm's decode loop, plus our sampler).

    host:   pick bucket nb >= B; write every row's token, position, slot, key prefix and sampling
            parameters into two pinned host buffers (one int64, one float32), the block tables compactly
            (nb, W int32, W the longest table of the step) into a third; padding rows get q_len 0 and slot
            -1 (no K/V write, zero attention output, their sample is ignored)
    device: three non-blocking copies in (the tables' W columns spread into the static (nb, max_blocks)
            table on the device); embed -> layers (paged kernels, fused ops) -> LM head ->
            keyed sampling -> (tokens, logprobs) as one (nb, 2) float64 buffer; one copy out

Graphs are captured lazily per (bucket, sampling flags), sharing one memory pool; the KV pool, the
rotary table and the buffers keep their addresses for the engine's life. On a CPU the same code runs
eagerly (how it is tested: token-identical to the dynamic path). A row whose pending tokens are not
exactly one (a just-adopted sequence) makes the engine take the dynamic step instead.
"""

from __future__ import annotations

import numpy as np
import torch

from tailrl.engine.keyed import keyed_sample_hashed, position_hash
from tailrl.engine.sampling import invariant_logprobs, pack, seq_flags, unpack
from tailrl.engine.sequence import Sequence
from tailrl.model.attention import PagedMetadata

INTS = 8  # int columns: token, position, start, q_len, slot, key prefix, sample pos, top_k


def buckets(max_batch_size: int) -> list[int]:
    """Batch sizes with a buffer (and a graph): powers of two up to max_batch_size, and max_batch_size."""
    out = [1]
    while out[-1] < max_batch_size:
        out.append(min(2 * out[-1], max_batch_size))
    return out


class _Buffers:
    """One bucket's buffers: host staging (pinned on CUDA) and their device twins, plus the output."""

    def __init__(self, nb: int, max_blocks: int, device: torch.device):
        pin = device.type == "cuda"
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


class StaticStep:
    def __init__(self, engine, graphs: bool):
        self.engine = engine
        self.graphs_on = graphs
        cache = engine.cache
        self.device = cache.kv.device
        self.block_size = cache.block_size
        self.max_blocks = cache.blocks_for(engine.max_model_len)
        self.buckets = buckets(engine.config.max_batch_size)
        self.bufs: dict[int, _Buffers] = {}
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.pool = None  # the graphs' shared memory pool

    def reset(self) -> None:
        """Forget the captured graphs (the KV pool moved); they are captured again on next use."""
        self.graphs.clear()
        self.pool = None

    def fits(self, ready: list[Sequence]) -> bool:
        """Every row decodes exactly one pending token (else the engine takes the dynamic step)."""
        return all(s.pending == 1 for s in ready)

    def step(self, ready: list[Sequence]) -> tuple[list[int], list[float]]:
        """One decode step of `ready` (blocks ensured): (tokens, logprobs), one host sync."""
        B = len(ready)
        nb = next(b for b in self.buckets if b >= B)
        bufs = self.bufs.get(nb) or self.bufs.setdefault(nb, _Buffers(nb, self.max_blocks, self.device))
        width = self._fill(bufs, ready)
        flags = seq_flags(ready)
        # strict logprobs are computed per distinct temperature: part of what a graph captures
        temps = tuple(sorted({s.request.params.temperature for s in ready})) if self.engine.execution.strict else ()
        bufs.dev_ints.copy_(bufs.host_ints, non_blocking=True)
        bufs.dev_floats.copy_(bufs.host_floats, non_blocking=True)
        n = nb * width  # the used columns only: (nb, width) in, spread into (nb, max_blocks) on the device
        bufs.dev_stage[:n].copy_(bufs.host_tables[:n], non_blocking=True)
        bufs.dev_tables[:, :width].copy_(bufs.dev_stage[:n].view(nb, width))
        if self.graphs_on:
            graph, out = self._graph(nb, bufs, flags, temps)
            graph.replay()
        else:
            out = self._run(bufs, flags, temps)
        return unpack(out[:B].cpu())  # the one device-to-host copy of the step (waits for the forward)

    def _fill(self, bufs: _Buffers, ready: list[Sequence]) -> int:
        """Host side: the rows of this step (padding rows reset), written through numpy views. Returns the
        tables' width W (the longest block table; columns past a row's own length are never read)."""
        bs, tables = self.block_size, self.engine.cache.tables
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

    @torch.inference_mode()
    def _run(self, bufs: _Buffers, flags: tuple[bool, bool, bool], temps: tuple[float, ...]) -> torch.Tensor:
        """The device side (what a graph captures): forward + keyed sampling -> (nb, 2) float64."""
        ints, floats = bufs.dev_ints, bufs.dev_floats
        meta = PagedMetadata(block_tables=bufs.dev_tables, starts=ints[:, 2].to(torch.int32),
                             q_lens=ints[:, 3].to(torch.int32), slot_mapping=ints[:, 4], block_size=self.block_size)
        logits = self.engine.model(ints[:, 0:1], ints[:, 1:2], attn=meta, kv_cache=self.engine.cache.kv,
                                   logits_index=bufs.index)[:, 0].float()  # (nb, V)
        tokens, logps = keyed_sample_hashed(logits, position_hash(ints[:, 5], ints[:, 6]), floats[:, 0], ints[:, 7],
                                            floats[:, 1], self.engine.config.sampler, flags)
        if temps:  # strict: the trainer's logprobs
            logps = invariant_logprobs(logits, tokens, floats[:, 0], set(temps))
        return pack(tokens, logps)

    def _graph(self, nb: int, bufs: _Buffers, flags, temps) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        """The bucket's graph for these sampling flags, captured on first use: two warm-up runs on a side
        stream (Triton compiles, the allocator settles), then capture into the shared pool. The warm-ups
        use this step's own rows, so the K/V they write is what the replay writes again."""
        key = (nb, flags, temps)
        if key not in self.graphs:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    self._run(bufs, flags, temps)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                out = self._run(bufs, flags, temps)
            self.pool = graph.pool()
            self.graphs[key] = (graph, out)
        return self.graphs[key]
