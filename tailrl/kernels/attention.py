"""Paged attention: write new K/V into their cache slots, then attend over the paged cache in one kernel.

Place in the flow: replaces the dense path of tailrl/model/attention.py (index_copy_ into the pools, gather
of every context slot, SDPA with a (B, 1, T, L) mask). The engine calls `store_kv` with the new tokens'
slots, then `paged_attention` with block tables: decode (T = 1), prefill over a cached prefix, and
speculative verify all take this one kernel, so they agree bitwise (see below).

Batch invariance: a query's output depends only on its q vector and the keys/values at positions <= its
own. Keys are tiled by absolute position (tile i = positions [i*BLOCK_N, (i+1)*BLOCK_N), gathered through
the block table key by key) and grouped in chunks of CHUNK positions; within a chunk the tiles are
visited in increasing order from a fresh softmax state, and the chunks' states (max, sum, output) are
folded in chunk order. Query rows are cut in tiles of a fixed BLOCK_M; no size depends on B or T. Tiles
(and chunks) a row cannot see leave its state untouched (scores of -inf: rescale by exactly 1, add exactly
0), so sharing a tile with other rows, or with other tokens of the same row, changes nothing.

The long tail (split-context, flash-decoding): one request at 32K context is B x Hkv = 2 programs on a
GPU of 132 SMs. When a decode or verify step's grid is that small, each (row, KV head, chunk) gets its own
program, which writes its chunk's state; `_combine_kernel` folds them in chunk order with the same
`_fold`. A chunk state folded into the empty state keeps its bits, so split and unsplit give the same
result bit for bit (both binaries are compiled without FMA contraction), and decode = prefill = verify
holds whichever path each takes.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from tailrl.kernels.numerics import INTERPRET, dot_f32, from_f32, next_pow2, sm_count

# positions never reach this, so "no window" is a window that reaches before position 0
_NO_WINDOW = 1 << 30
# key positions per context chunk: fixed in absolute positions (never from B, T or the GPU), so the chunks a
# row's softmax is folded over are the same however the work is spread
CHUNK = 256


def attention_blocks(head_dim: int, group: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) for a head size and GQA group (H // Hkv), never from B or T.

    BLOCK_M rows are (token, head-in-group) pairs: at least 32 (a tl.dot needs >= 16, and 32 keeps a
    prefill tile several tokens wide) and at least the group, so a decode step is one tile per KV head.
    BLOCK_N keys per step: 64, halved from head_dim 128 up so the K / V tiles and the two fp32 accumulators
    fit the registers of 8 warps (no spills on sm_80 / sm_90 with Triton 3.6 and 3.9: the AOT test).
    """
    return max(32, next_pow2(group)), (64 if head_dim < 128 else 32)


@triton.jit
def _store_kv_kernel(
    k_ptr, v_ptr, k_pool_ptr, v_pool_ptr, slot_ptr,
    k_sn, k_sh, v_sn, v_sh, pool_sn, pool_sh, H, D,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """One program per new token: copy its K and V (H, D) rows into slot `slot_ptr[i]` (skip if < 0)."""
    i = tl.program_id(0).to(tl.int64)
    # a (1, 1) block, not a scalar: the interpreter turns `bool block & bool scalar` into int32
    slot = tl.load(slot_ptr + i + tl.zeros([1, 1], tl.int64)).to(tl.int64)
    h = tl.arange(0, BLOCK_H)[:, None]
    d = tl.arange(0, BLOCK_D)[None, :]
    mask = (h < H) & (d < D) & (slot >= 0)
    dst = tl.maximum(slot, 0) * pool_sn + h * pool_sh + d  # clamped: a skipped row computes no address
    k = tl.load(k_ptr + i * k_sn + h * k_sh + d, mask=mask)
    v = tl.load(v_ptr + i * v_sn + h * v_sh + d, mask=mask)
    tl.store(k_pool_ptr + dst, k, mask=mask)
    tl.store(v_pool_ptr + dst, v, mask=mask)


def store_kv(k: torch.Tensor, v: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Write new keys/values into the paged pools, K and V in one launch.

    k, v: (N, Hkv, D) (rows may be strided, D contiguous); k_pool, v_pool: (num_slots, Hkv, D) contiguous,
    same dtype; slot_mapping: (N,) int32/int64, entries < 0 are skipped (padding rows)."""
    N, H, D = k.shape
    if v.shape != k.shape or k_pool.shape != v_pool.shape or k_pool.shape[1:] != (H, D):
        raise ValueError(f"store_kv: k {tuple(k.shape)}, v {tuple(v.shape)}, pools {tuple(k_pool.shape)}")
    if k.dtype != k_pool.dtype or v.dtype != v_pool.dtype or slot_mapping.shape != (N,):
        raise ValueError("store_kv: k/v must match the pools' dtype and slot_mapping must be (N,)")
    if not (k_pool.is_contiguous() and v_pool.is_contiguous()):
        raise ValueError("store_kv: the pools must be contiguous")
    if N == 0:
        return
    slot_mapping = slot_mapping.contiguous()  # the kernel indexes it as a dense (N,) array
    if k.stride(2) != 1:
        k = k.contiguous()
    if v.stride(2) != 1:
        v = v.contiguous()
    _store_kv_kernel[(N,)](
        k, v, k_pool, v_pool, slot_mapping,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1), k_pool.stride(0), k_pool.stride(1), H, D,
        BLOCK_H=next_pow2(H), BLOCK_D=next_pow2(D),
    )


@triton.jit
def _tile_keys(start, q_len, tile, window, G: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               CHUNK_TILES: tl.constexpr):
    """The key tiles [lo, hi] that any row of query tile `tile` can see (hi < lo: none), and the chunks
    [lo_chunk, hi_chunk] they fall in."""
    t_first = (tile * BLOCK_M) // G
    t_last = tl.minimum((tile * BLOCK_M + BLOCK_M - 1) // G, q_len - 1)
    lo = tl.maximum(start + t_first - window + 1, 0) // BLOCK_N
    hi = tl.where(t_first < q_len, (start + t_last) // BLOCK_N, lo - 1)  # no real row: no keys
    lo_chunk = lo // CHUNK_TILES
    hi_chunk = tl.where(hi >= lo, hi // CHUNK_TILES, lo_chunk - 1)
    return lo, hi, lo_chunk, hi_chunk


@triton.jit
def _fold(M, L, ACC, m, s, acc):
    """Fold one chunk's softmax state (max m, sum s, output acc) into the running (M, L, ACC), rows (BLOCK_M,). Exactly
    neutral for a chunk a row cannot see (m = -inf); from the empty state it returns the chunk's own bits."""
    M_new = tl.maximum(M, m)
    M_safe = tl.where(M_new == float("-inf"), 0.0, M_new)
    a = tl.where(M == M_new, 1.0, tl.exp2(M - M_safe))
    b = tl.where(m == M_new, 1.0, tl.exp2(m - M_safe))
    return M_new, L * a + s * b, ACC * a[:, None] + acc * b[:, None]


@triton.jit
def _rows(kvh, tile, q_len, G: tl.constexpr, BLOCK_M: tl.constexpr):
    """Rows r of a query tile: (token t = r // G, head kv*G + r % G), and which are real."""
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    t = rows // G
    return t, kvh * G + rows % G, t < q_len


@triton.jit
def _store_out(out_ptr, b, t, head, row_ok, d, d_ok, o_sb, o_st, o_sh, T, ACC, L, EMULATE: tl.constexpr):
    o = ACC / tl.where(L > 0.0, L, 1.0)[:, None]
    o = tl.where(row_ok[:, None], o, 0.0)  # padding queries give zeros
    o_mask = (t < T)[:, None] & d_ok[None, :]
    tl.store(out_ptr + b * o_sb + t[:, None] * o_st + head[:, None] * o_sh + d[None, :],
             from_f32(o, out_ptr.dtype.element_ty, EMULATE), mask=o_mask)


# never specialize what changes with B or T (a decode with T = 1 would otherwise get its own binary); `split`
# is a runtime flag too: the split and unsplit paths are one binary, so their shared code cannot differ
@triton.jit(do_not_specialize=["q_sb", "q_st", "o_sb", "o_st", "table_sb", "T", "n_chunks", "split"])
def _paged_attention_kernel(
    q_ptr, k_pool_ptr, v_pool_ptr, out_ptr, tables_ptr, starts_ptr, q_lens_ptr, part_ml_ptr, part_acc_ptr,
    q_sb, q_st, q_sh, o_sb, o_st, o_sh, pool_sn, pool_sh, table_sb,
    qk_scale, window, T, D, n_chunks, split,
    G: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, CHUNK_TILES: tl.constexpr, EMULATE: tl.constexpr,
):
    """Program (b, kv head, row tile) — or with `split`, (b, kv head, chunk) over the one row tile, writing
    that chunk's state for _combine_kernel. Rows r of the tile are (token r // G, head kv*G + r % G)."""
    b = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1)
    pid = tl.program_id(2)
    tile = tl.where(split != 0, 0, pid)
    start = tl.load(starts_ptr + b)
    q_len = tl.load(q_lens_ptr + b)
    t, head, row_ok = _rows(kvh, tile, q_len, G, BLOCK_M)
    pos = start + t  # (BLOCK_M,) each query's absolute position
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    q = tl.load(q_ptr + b * q_sb + t[:, None] * q_st + head[:, None] * q_sh + d[None, :],
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    dtype = q.dtype
    lo_tile, hi_tile, lo_chunk, hi_chunk = _tile_keys(start, q_len, tile, window, G, BLOCK_M, BLOCK_N, CHUNK_TILES)
    if split != 0:  # this program's one chunk, if the tile sees it
        lo_chunk, hi_chunk = tl.maximum(lo_chunk, pid), tl.minimum(hi_chunk, pid)
    ctx = start + q_len

    M = tl.full([BLOCK_M], float("-inf"), tl.float32)
    L = tl.zeros([BLOCK_M], tl.float32)
    ACC = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    kv_head = kvh.to(tl.int64) * pool_sh
    # the context in chunks of CHUNK_TILES key tiles (absolute positions), each from a fresh softmax state,
    # folded in chunk order: the same result whether one program folds them all or _combine_kernel does
    for c in range(lo_chunk, hi_chunk + 1):
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        for i in range(tl.maximum(lo_tile, c * CHUNK_TILES), tl.minimum(hi_tile, c * CHUNK_TILES + CHUNK_TILES - 1) + 1):
            n = i * BLOCK_N + tl.arange(0, BLOCK_N)  # absolute key positions of this tile
            n_ok = n < ctx
            blk = tl.load(tables_ptr + b * table_sb + n // BLOCK_SIZE, mask=n_ok, other=0)
            slot = blk.to(tl.int64) * BLOCK_SIZE + n % BLOCK_SIZE
            kv_off = slot[:, None] * pool_sn + kv_head + d[None, :]
            kv_mask = n_ok[:, None] & d_ok[None, :]
            k = tl.load(k_pool_ptr + kv_off, mask=kv_mask, other=0.0)
            v = tl.load(v_pool_ptr + kv_off, mask=kv_mask, other=0.0)
            s = dot_f32(q, tl.trans(k), EMULATE) * qk_scale  # (BLOCK_M, BLOCK_N), in log2 units
            visible = (n[None, :] <= pos[:, None]) & (n[None, :] > pos[:, None] - window) & row_ok[:, None]
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            # a row that has seen no key yet keeps m = -inf; subtracting 0 instead avoids -inf - -inf = nan
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            # exactly 1 and exactly 0 where nothing changes, without trusting exp2's last bit: a tile a row
            # cannot see leaves its state bitwise untouched
            alpha = tl.where(m_new == m_i, 1.0, tl.exp2(m_i - m_safe))
            p = tl.where(visible, tl.exp2(s - m_safe[:, None]), 0.0)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + dot_f32(from_f32(p, dtype, EMULATE), v, EMULATE)  # P in V's dtype
            m_i = m_new
        M, L, ACC = _fold(M, L, ACC, m_i, l_i, acc)

    if split != 0:
        if (lo_chunk <= hi_chunk) & (lo_chunk == pid):  # the chunk's state (== its own bits, see _fold)
            r = tl.arange(0, BLOCK_M)
            base = ((b * tl.num_programs(1) + kvh) * n_chunks + pid) * BLOCK_M + r
            tl.store(part_ml_ptr + 2 * base, M, mask=row_ok)
            tl.store(part_ml_ptr + 2 * base + 1, L, mask=row_ok)
            tl.store(part_acc_ptr + base[:, None] * BLOCK_D + d[None, :], ACC, mask=row_ok[:, None])
    else:
        _store_out(out_ptr, b, t, head, row_ok, d, d_ok, o_sb, o_st, o_sh, T, ACC, L, EMULATE)


@triton.jit(do_not_specialize=["o_sb", "o_st", "T", "n_chunks"])
def _combine_kernel(
    out_ptr, starts_ptr, q_lens_ptr, part_ml_ptr, part_acc_ptr, o_sb, o_st, o_sh, window, T, D, n_chunks,
    G: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    CHUNK_TILES: tl.constexpr, EMULATE: tl.constexpr,
):
    """Program (b, kv head): fold the chunk states of the split path in chunk order, as the unsplit path does."""
    b = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1)
    start = tl.load(starts_ptr + b)
    q_len = tl.load(q_lens_ptr + b)
    t, head, row_ok = _rows(kvh, 0, q_len, G, BLOCK_M)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    _, _, lo_chunk, hi_chunk = _tile_keys(start, q_len, 0, window, G, BLOCK_M, BLOCK_N, CHUNK_TILES)
    M = tl.full([BLOCK_M], float("-inf"), tl.float32)
    L = tl.zeros([BLOCK_M], tl.float32)
    ACC = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    r = tl.arange(0, BLOCK_M)
    for c in range(lo_chunk, hi_chunk + 1):
        base = ((b * tl.num_programs(1) + kvh) * n_chunks + c) * BLOCK_M + r
        m = tl.load(part_ml_ptr + 2 * base, mask=row_ok, other=float("-inf"))
        s = tl.load(part_ml_ptr + 2 * base + 1, mask=row_ok, other=0.0)
        acc = tl.load(part_acc_ptr + base[:, None] * BLOCK_D + d[None, :], mask=row_ok[:, None], other=0.0)
        M, L, ACC = _fold(M, L, ACC, m, s, acc)
    _store_out(out_ptr, b, t, head, row_ok, d, d_ok, o_sb, o_st, o_sh, T, ACC, L, EMULATE)


def paged_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, block_tables: torch.Tensor,
                    starts: torch.Tensor, q_lens: torch.Tensor, block_size: int, scale: float,
                    sliding_window: int = 0, out: torch.Tensor | None = None, split: bool | None = None) -> torch.Tensor:
    """Causal attention of B rows of new queries over their paged context.

    q: (B, T, H, D) fp32/bf16/fp16, D contiguous; k_pool, v_pool: (num_slots, Hkv, D) contiguous, q's dtype,
    H % Hkv == 0 (query head h reads KV head h // (H // Hkv)); block_tables: (B, max_blocks) int32;
    starts: (B,) int32 keys cached before this forward; q_lens: (B,) int32 real new tokens (0 = padding row).
    Query t < q_lens[b] sits at p = starts[b] + t and sees positions max(0, p - W + 1) .. p (W =
    sliding_window, 0 = unlimited); its own K/V must already be in the pools (store_kv first).
    split: spread each row's context over programs, one per chunk (flash-decoding), for a grid too small to
    fill the GPU; None decides from B x Hkv against the SM count (only when T x G fits one row tile: decode
    and verify). Either way the result is bitwise the same (see the module docstring).
    Returns out: (B, T, H, D) in q's dtype, zeros for t >= q_lens[b]."""
    B, T, H, D = q.shape
    num_slots, Hkv, Dk = k_pool.shape
    if H % Hkv or Dk != D or v_pool.shape != k_pool.shape:
        raise ValueError(f"paged_attention: q {tuple(q.shape)} vs pools {tuple(k_pool.shape)}")
    if k_pool.dtype != q.dtype or v_pool.dtype != q.dtype:
        raise ValueError(f"paged_attention: q is {q.dtype}, pools are {k_pool.dtype}/{v_pool.dtype}")
    if not (k_pool.is_contiguous() and v_pool.is_contiguous()):
        raise ValueError("paged_attention: the pools must be contiguous")
    if starts.shape != (B,) or q_lens.shape != (B,) or block_tables.dim() != 2 or block_tables.shape[0] != B:
        raise ValueError("paged_attention: block_tables (B, max_blocks), starts (B,), q_lens (B,)")
    if q.stride(3) != 1:
        q = q.contiguous()
    # one binary for every call: int32 metadata, the table's last dim contiguous
    block_tables, starts, q_lens = (x.to(torch.int32).contiguous() for x in (block_tables, starts, q_lens))
    if out is None:
        out = torch.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or out.stride(3) != 1:
        raise ValueError("paged_attention: out must be like q, D contiguous")
    if B == 0 or T == 0:
        return out
    G = H // Hkv
    block_m, block_n = attention_blocks(D, G)
    block_d = max(16, next_pow2(D))
    chunk_tiles = CHUNK // block_n
    row_tiles = triton.cdiv(T * G, block_m)
    # the table's width bounds every row's context: the chunk count is known without reading the device
    n_chunks = triton.cdiv(block_tables.shape[1] * block_size, CHUNK)
    if split is None:
        split = row_tiles == 1 and n_chunks > 1 and B * Hkv < sm_count(q.device)
    elif split and row_tiles != 1:
        raise ValueError(f"paged_attention: split needs T x G <= {block_m} (got {T} x {G})")
    if split:
        part_ml = torch.empty(B, Hkv, n_chunks, block_m, 2, dtype=torch.float32, device=q.device)
        part_acc = torch.empty(B, Hkv, n_chunks, block_m, block_d, dtype=torch.float32, device=q.device)
    else:
        part_ml = part_acc = out  # not read
    window = sliding_window if sliding_window > 0 else _NO_WINDOW
    common = dict(G=G, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, CHUNK_TILES=chunk_tiles, EMULATE=INTERPRET)
    # no FMA contraction: the fold's products and sums are the same IEEE operations in both kernels
    kw = {} if INTERPRET else {"enable_fp_fusion": False}
    _paged_attention_kernel[(B, Hkv, n_chunks if split else row_tiles)](
        q, k_pool, v_pool, out, block_tables, starts, q_lens, part_ml, part_acc,
        q.stride(0), q.stride(1), q.stride(2), out.stride(0), out.stride(1), out.stride(2),
        k_pool.stride(0), k_pool.stride(1), block_tables.stride(0),
        scale * math.log2(math.e), window, T, D, n_chunks, int(split),
        BLOCK_SIZE=block_size, **common, num_warps=8, num_stages=2, **kw,
    )
    if split:
        _combine_kernel[(B, Hkv)](out, starts, q_lens, part_ml, part_acc, out.stride(0), out.stride(1), out.stride(2),
                                  window, T, D, n_chunks, **common, num_warps=4, **kw)
    return out
