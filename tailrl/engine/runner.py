"""The model runner: the one place the engine's model runs (nano-vllm's ModelRunner). Two paths, one
forward function:

    forward(rows)   a dynamic eager forward: prefill (start 0, whole prompt), speculative verify
                    ([last, d1..dk], token trees), recompute after preemption — attention metadata from the
                    block tables (engine/metadata.py), logits at the asked rows
    decode(seqs)    one plain decode step with keyed sampling: on static per-bucket buffers
                    (engine/static_step.py) replayed as a CUDA graph on CUDA, or run eagerly (the CPU and
                    engine.static_decode=false), else the dynamic forward + sample; one host copy

Execution only: which rows run and what is done with the tokens is the scheduler's and the engine's
business.

Graphs are captured lazily into one shared memory pool, keyed by (bucket: padded batch size, sampling flags
(top-k on, top-p on, greedy rows present), strict mode's distinct temperatures): a handful per bucket in
practice, at most MAX_GRAPHS in all — a step whose key would exceed it runs the same static step eagerly.
A graph holds the addresses of the KV pool, the static buffers and the weights (updated in place by the
trainer): the graphs survive release_kv() and are reused across RL steps whenever the pool comes back at
the same address, and are forgotten (captured again on use) when it does not. `captures` counts them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tailrl.engine.kv_cache import PagedKVCache
from tailrl.engine.metadata import build_metadata, build_paged_metadata, static_paged_metadata
from tailrl.engine.sampling.hashing import position_hash
from tailrl.engine.sampling.keyed import KeyedSampler
from tailrl.engine.sampling.rows import invariant_logprobs, pack, sample_rows, seq_flags, to_host, unpack
from tailrl.engine.sequence import Sequence
from tailrl.engine.static_step import Buffers, StaticBuffers
from tailrl.model import canonical

MAX_GRAPHS = 64  # captured graphs at most (each holds its bucket's activations in the shared pool)


@dataclass(frozen=True)
class DecodeSetup:
    """How decode steps run (resolved by the engine, engine/execution.py)."""

    sampler: KeyedSampler  # the SAMPLERS entry of engine.sampler
    strict: bool = False  # logprobs from the invariant kernels (model/strict.py)
    static: bool = False  # decode steps on static buffers
    graphs: bool = False  # ... captured as CUDA graphs
    max_batch_size: int = 256
    max_model_len: int = 2048
    canonical: bool = False  # engine.exact=canonical: every forward under model/canonical.active()


class ModelRunner:
    def __init__(self, model, cache: PagedKVCache, attention: str = "torch", decode: DecodeSetup | None = None):
        self.model = model
        self.cache = cache
        self.attention = attention  # torch | triton (resolved by the engine)
        self.device = next(model.parameters()).device
        self.setup = decode  # None: forwards only (a draft model's runner)
        self.static = (StaticBuffers(decode.max_batch_size, cache.blocks_for(decode.max_model_len),
                                     cache.block_size, cache.kv.device)
                       if decode is not None and decode.static else None)
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.pool = None  # the graphs' shared memory pool
        self.graph_kv_ptr: int | None = None  # the KV pool's address the graphs were captured with
        self.captures = 0  # graphs captured so far (telemetry: engine/graph_captures)

    def _run_model(self, ids: torch.Tensor, positions: torch.Tensor, meta, index: torch.Tensor) -> torch.Tensor:
        """The model's forward over the paged cache: ids / positions (B, T), logits at index (B, R) as float."""
        with canonical.active(self.setup is not None and self.setup.canonical):
            return self.model(ids, positions, attn=meta, kv_cache=self.cache.kv, logits_index=index).float()

    # -- dynamic forwards ---------------------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, seq_ids: list[int], starts: list[int], tokens: list[list[int]],
                tree_mask: list | None = None, tree_depth: list | None = None,
                logits_rows: list[list[int]] | None = None) -> torch.Tensor:
        """Run rows; K/V of the new tokens are written to their slots (blocks must be ensured).
        Returns float logits (B, V) at each row's last new token, or (B, R, V) at the given token
        indices per row when logits_rows (padded by repeating the last)."""
        lengths = [len(t) for t in tokens]
        T = max(lengths)
        ids = torch.tensor([t + [0] * (T - len(t)) for t in tokens], dtype=torch.long)  # (B, T)
        tables = [self.cache.tables[s] for s in seq_ids]
        if self.attention == "triton" and tree_mask is None:
            meta, positions = build_paged_metadata(tables, starts, lengths, self.cache.block_size, self.device)
        else:
            meta, positions = build_metadata(tables, starts, lengths, self.cache.block_size, self.device,
                                             self.model.args.sliding_window, tree_mask, tree_depth)
        if logits_rows is None:
            rows = [[n - 1] for n in lengths]  # each row's last new token
        else:
            R = max(len(r) for r in logits_rows)
            rows = [r + [r[-1]] * (R - len(r)) for r in logits_rows]
        index = torch.tensor(rows).to(self.device)  # (B, R)
        logits = self._run_model(ids.to(self.device), positions, meta, index)
        return logits[:, 0] if logits_rows is None else logits

    # -- decode steps -------------------------------------------------------------------------------
    def decode(self, ready: list[Sequence]) -> tuple[list[int], list[float]]:
        """One decode step of `ready` (blocks ensured; each row's pending tokens processed): keyed samples
        (tokens, logprobs) as host lists, in one device-to-host copy."""
        setup = self.setup
        if self.static is not None and self.static.fits(ready):
            bufs = self.static.stage(ready, self.cache.tables)
            flags = seq_flags(ready)
            # strict logprobs are computed per distinct temperature: part of what a graph captures
            temps = tuple(sorted({s.request.params.temperature for s in ready})) if setup.strict else ()
            if self.graphs and self.cache.kv.data_ptr() != self.graph_kv_ptr:
                self.reset_graphs()  # the pool came back elsewhere: every graph points at the old one
            key = (bufs.nb, flags, temps)
            if setup.graphs and (key in self.graphs or len(self.graphs) < MAX_GRAPHS):
                graph, out = self._graph(bufs, key)
                graph.replay()
            else:
                out = self._static_step(bufs, flags, temps)
            return unpack(out[: len(ready)].cpu())  # the one device-to-host copy (waits for the forward)
        logits = self.forward([s.seq_id for s in ready], [s.num_cached for s in ready],
                              [s.tokens[s.num_cached:] for s in ready])
        return to_host(*sample_rows(ready, logits, None, setup.sampler, setup.strict))

    @torch.inference_mode()
    def _static_step(self, bufs: Buffers, flags: tuple[bool, bool, bool], temps: tuple[float, ...]) -> torch.Tensor:
        """The device side of a static step (what a graph captures): forward + keyed sampling -> (nb, 2)
        float64 (pack)."""
        ints, floats = bufs.dev_ints, bufs.dev_floats
        meta = static_paged_metadata(bufs.dev_tables, ints, self.cache.block_size)
        positions = ints[:, 1:2].contiguous()  # dense once per step (each layer's rotary reads it)
        logits = self._run_model(ints[:, 0:1], positions, meta, bufs.index)[:, 0]  # (nb, V)
        tokens, logps = self.setup.sampler(logits, position_hash(ints[:, 5], ints[:, 6]), floats[:, 0], ints[:, 7],
                                           floats[:, 1], flags)
        if temps:  # strict: the trainer's logprobs
            logps = invariant_logprobs(logits, tokens, floats[:, 0], set(temps))
        return pack(tokens, logps)

    def _graph(self, bufs: Buffers, key: tuple):
        """The graph of key (bucket, sampling flags, strict temperatures), captured on first use; (graph, out)."""
        if key not in self.graphs:
            _, flags, temps = key
            self.graphs[key] = self._capture(lambda: self._static_step(bufs, flags, temps))
            self.graph_kv_ptr = self.cache.kv.data_ptr()
            self.captures += 1
        return self.graphs[key]

    def _capture(self, step) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        """Two warm-up runs of step on a side stream (Triton compiles, the allocator settles), then its
        capture into the shared pool. The warm-ups use this step's own rows, so the K/V they write is what
        the replay writes again."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = step()
        self.pool = graph.pool()
        return graph, out

    def reset_graphs(self) -> None:
        """Forget the captured graphs (the KV pool moved); they are captured again on next use."""
        self.graphs.clear()
        self.pool = None
        self.graph_kv_ptr = None
