"""engine.exact=canonical: the CPU forward with stock kernels called so that every row's result does not
depend on what else is in the batch — rollouts bitwise identical alone or batched, with speculation or
preemption, at stock-kernel speed less a per-query loop (docs/results.md: "#34 ... canonical").

Where the CPU fast path depends on the batch (measured on a 2-core AVX-512 machine, torch 2.13 / MKL):
- a linear's row depends on the row count M: oneDNN/MKL pick their kernels by M, and for M in
  {1, 2, 3, 5, 6, 7, 9, 10, 11} a row comes out different from the same row in a batch of 64, while every M
  in {4, 8} and >= 12 gives it bitwise. `linear` pads the rows (zeros) up to the next consistent count,
  found once per (in, out, bias, dtype, threads) by `consistent_rows` on this machine;
- scaled_dot_product_attention's row depends on the batch, on the padded context length and, for several
  queries of one row, on their number (its CPU kernel splits the work by those sizes). `attention` calls
  it once per query over exactly that query's keys (shape (1, H, 1, n)), the same call whichever forward
  (prefill, decode, verify, recompute) computes that position.
RMSNorm, rotary, SiLU, the log-softmax and the keyed samplers are row-wise already (checked in the tests).
Not for CUDA (engine.exact=strict is the GPU's batch-invariant mode); the trainer's forward is unchanged.
"""

from __future__ import annotations

import contextlib
import functools

import torch
import torch.nn.functional as F

from tailrl.errors import UserError

_active = False  # set around the engine's forwards (engine/runner.py), never the trainer's

CHECK_ROWS = 32  # every row count up to this is checked; above, SPOT_ROWS are, and the rest taken as consistent
SPOT_ROWS = (48, 100, 256)  # (cpu2: every count from 12 to 512 checked consistent)


@functools.cache
def consistent_rows(k: int, n: int, bias: bool, dtype: torch.dtype, threads: int) -> tuple[int, ...]:
    """The row counts m <= CHECK_ROWS whose linear gives a row, at any position, bitwise what that row gets in
    a batch of 64 (in features k, out features n, with or without a bias). Raises UserError when a spot check
    above CHECK_ROWS fails: this machine's BLAS would make larger batches depend on their size too."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(n, k, generator=g).to(dtype)
    b = torch.randn(w.shape[0], generator=g).to(dtype) if bias else None
    v = torch.randn(k, generator=g).to(dtype)
    big = torch.randn(64, k, generator=g).to(dtype)
    big[0] = v
    ref = F.linear(big, w, b)[0]

    def same(m: int, positions) -> bool:
        for p in sorted(positions):
            x = torch.randn(m, k, generator=g).to(dtype)
            x[p] = v
            if not torch.equal(F.linear(x, w, b)[p], ref):
                return False
        return True

    bad = [m for m in SPOT_ROWS if not same(m, {m // 2})]
    if bad:
        raise UserError(f"engine.exact=canonical: on this machine a linear ({k} -> {n}) gives a row a different "
                        f"result in batches of {bad} rows than in one of 64, so larger batches would depend on "
                        "their size; use engine.exact=fast or strict here")
    return tuple(m for m in range(1, CHECK_ROWS + 1) if same(m, {0, m // 2, m - 1}))


def padded_rows(m: int, k: int, n: int, bias: bool, dtype: torch.dtype) -> int:
    """The smallest consistent row count >= m (m itself above CHECK_ROWS)."""
    if m > CHECK_ROWS:
        return m
    good = consistent_rows(k, n, bias, dtype, torch.get_num_threads())
    return next((c for c in good if c >= m), CHECK_ROWS + 1)


@contextlib.contextmanager
def active(on: bool = True):
    """Forwards inside run canonically (on) or as stock (off); the engine's runner wraps its model calls, so
    engines of both modes may share one model and the trainer's forward is never affected."""
    global _active
    before, _active = _active, on
    try:
        yield
    finally:
        _active = before


def is_active() -> bool:
    return _active


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, weight, bias) (x: (..., in) -> (..., out)); inside active(): with the rows padded to a
    consistent count."""
    if not _active:
        return F.linear(x, weight, bias)
    k = x.shape[-1]
    rows = x.reshape(-1, k)
    m = rows.shape[0]
    t = padded_rows(m, k, weight.shape[0], bias is not None, x.dtype)
    if t == m:
        return F.linear(x, weight, bias)
    y = F.linear(torch.cat([rows, rows.new_zeros(t - m, k)]), weight, bias)[:m]
    return y.reshape(*x.shape[:-1], weight.shape[0])


def query_keys(meta) -> list[tuple[int, int, slice | torch.Tensor]]:
    """(row b, query t, its keys in the row's context: a slice when contiguous, else indices) for every real
    query of an AttnMetadata (engine/metadata.py), computed once per forward and kept on the metadata."""
    if meta.query_keys is not None:
        return meta.query_keys
    mask = meta.mask[:, 0].cpu()  # (B, T, L)
    T, L = mask.shape[1:]
    first = mask.int().argmax(-1)  # (B, T) first allowed key
    last = L - 1 - mask.flip(-1).int().argmax(-1)  # (B, T) last allowed key
    chain = (last - first + 1 == mask.sum(-1)).tolist()  # every key between them allowed (not a tree row)
    first, last = first.tolist(), last.tolist()
    out = []
    for flat in meta.write_rows.cpu().tolist():
        b, t = divmod(flat, T)
        keys = (slice(first[b][t], last[b][t] + 1) if chain[b][t]
                else mask[b, t].nonzero().flatten().to(meta.mask.device))
        out.append((b, t, keys))
    meta.query_keys = out
    return out


def attention(q: torch.Tensor, k_ctx: torch.Tensor, v_ctx: torch.Tensor, meta) -> torch.Tensor:
    """q: (B, H, T, D); k_ctx, v_ctx: (B, Hkv, L, D) each row's gathered context. Returns (B, H, T, D): each
    real query attends to exactly its keys, one SDPA call per query; padding queries are zeros."""
    o = q.new_zeros(q.shape)
    for b, t, keys in query_keys(meta):  # contiguous copies: the same tensors whichever forward this is
        o[b, :, t] = F.scaled_dot_product_attention(
            q[b:b + 1, :, t:t + 1].contiguous(), k_ctx[b:b + 1, :, keys].contiguous(),
            v_ctx[b:b + 1, :, keys].contiguous(), enable_gqa=True)[0, :, 0]
    return o
