"""The `gumbel` keyed sampler (the default): token = argmax over the kept tokens of logit / T + g(key, token),
with g the keyed Gumbel noise of kernels/gumbel_noise.py (a pure function of (seed, uid, sample, position,
token id)).

Why Gumbel-max: an inverse-CDF sampler (blocked, inverse_cdf) flips a token whenever its uniform falls
within the logits' error of any of the V CDF boundaries, so on a real model's long flat tail a 1e-5
difference between two forwards (batch size, speculation) changes a few percent of sequences; a Gumbel race
flips only when the two best perturbed scores are within the logits' error of each other.

Three implementations of one race, the same tokens bitwise:
- sample_gumbel_race: the oracle (tests): noise for every token, argmax.
- sample_gumbel_fast: noise only for the groups and tokens that can still win (CPU: data-dependent
  shapes, host syncs); the sampler on the CPU.
- the Triton kernel (kernels/gumbel.py): one pass per row with the same pruning in a fixed grid; the
  sampler on CUDA (graph-capturable).
All keep exactly the tokens `blocked` keeps under top-k / top-p (its _nucleus_floor over its weights) and
return blocked's logprob (log softmax(logits / T) at the token, from the same weights and integer mass), so
the two samplers differ only in which token the randomness picks. Drafters sampling with the same sampler
(the draft model) draw with the same keyed noise: a shared-Gumbel coupling.
"""

from __future__ import annotations

import torch

from tailrl import kernels
from tailrl.engine.sampling.blocked import _block_masses, _nucleus_floor, _weights, block_size, finish
from tailrl.engine.sampling.processing import Flags, read_flags
from tailrl.kernels.gumbel_noise import GROUP, LOG2_GROUP, group_noise, gumbel_noise, row_keys, token_gumbel


def _prepare(logits, temperature, top_k, top_p, flags):
    """Shared by the samplers: blocked's weights, its uncut integer mass (for the logprob) and its keep
    floor. -> (p (B, V) f32, m (B, 1), t (B, 1), total (B,) int64, floor (B,) int32 or None, flags)."""
    flags = flags if flags is not None else read_flags(temperature, top_k, top_p)
    need_k, need_p, _ = flags
    p, m, t = _weights(logits, temperature)
    total = _block_masses(p, block_size(p.shape[-1])).sum(-1)
    floor = _nucleus_floor(p, top_k, top_p, need_k, need_p) if (need_k or need_p) else None
    return p, m, t, total, floor, flags


def sample_gumbel_race(logits: torch.Tensor, h: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                       top_p: torch.Tensor, flags: Flags | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The oracle: scores x + g for all (B, V) tokens (float64), non-kept tokens -inf, first argmax."""
    p, m, t, total, floor, flags = _prepare(logits, temperature, top_k, top_p, flags)
    B, V = logits.shape
    x = logits.float() / t  # (B, V) float32, as tailrl's _scaled
    tok = torch.arange(V, device=logits.device).expand(B, V)
    score = x.double() + gumbel_noise(row_keys(h), tok)
    if floor is not None:
        score.masked_fill_(p.view(torch.int32) < floor.unsqueeze(-1), float("-inf"))
    return finish(logits, score.argmax(-1), temperature, m, t, total, flags[2])


def _group_max(logits: torch.Tensor) -> torch.Tensor:
    """(B, V) -> (B, ceil(V / GROUP)) largest logit of each group (the last one partial), no copy of the
    logits."""
    B, V = logits.shape
    full = V // GROUP
    parts = [logits[:, :full * GROUP].reshape(B, full, GROUP).amax(-1)] if full else []
    if V % GROUP:
        parts.append(logits[:, full * GROUP:].amax(-1, keepdim=True))
    return torch.cat(parts, -1) if len(parts) > 1 else parts[0]


def row_argmax(rows: torch.Tensor, score: torch.Tensor, tokens: torch.Tensor, B: int) -> torch.Tensor:
    """Candidates (rows (C,), score (C,) float64, tokens (C,) int64) -> (B,) int64: per row the token of
    the largest score, the lowest id among equal scores (torch.argmax's rule). Max and min are exact in any
    order."""
    best = torch.full((B,), float("-inf"), dtype=score.dtype, device=score.device)
    best = best.scatter_reduce(0, rows, score, "amax")
    big = torch.iinfo(torch.int64).max
    cand = torch.where(score == best[rows], tokens, big)
    return torch.full((B,), big, dtype=torch.int64, device=score.device).scatter_reduce(0, rows, cand, "amin")


PRUNE_MARGIN = 1e-6  # >> the error of noise computed with torch.log (~1e-14): pruning with approximations
# widened by it keeps a superset of the exact candidates


def sample_gumbel_fast(logits: torch.Tensor, h: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                       top_p: torch.Tensor, flags: Flags | None = None,
                       stats: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """sample_gumbel_race's tokens and logprobs, with per-token noise only where a token can win.

    1. Group maxima of the logits (one pass, no copy); the row's first largest logit from them, and s* =
       the best of its score and of every group leader's (the token holding its group's largest noise M_b,
       one per group; kept ones only), noise with torch.log, - PRUNE_MARGIN: a lower bound of the winning
       score (the largest logit is always kept). The leaders make the bound tight when the logits are flat
       (a random-weight model, a high temperature): the winner is then nearly always a leader, and with the
       top logit's score alone almost every token would stay a candidate.
    2. A token t of group b can win only if x_t + M_b >= s* (every noise of group b is <= M_b): with M_b
       from torch.log and the bound widened by margins, one comparison of the logits against a per-group
       limit (one pass, a bool (B, V)) finds a superset of those tokens, typically a few hundredths of the
       vocabulary of a real model.
    3. Those tokens that are kept (top-k / top-p) get the exact noise (det_log); per-row argmax by scatter
       amax / amin (lowest id on ties, as argmax).
    Exactness: the approximations only widen the candidate set; the winner is decided by det_log noise and
    the race's own x = logit / T, as in the race. Full-vocabulary passes: blocked's weights and integer mass
    (for the logprob; plus its cut with top-k / top-p), one group max and one comparison. Step 2-3 shapes
    are data-dependent (host syncs): CPU / eager only; on CUDA the Triton kernel (kernels/gumbel.py) prunes
    inside a fixed grid. stats (optional dict) accumulates the tokens given noise ("hashed") and B V."""
    p, m, t, total, floor, flags = _prepare(logits, temperature, top_k, top_p, flags)
    B, V = logits.shape
    dev = logits.device
    h32, hg, hj = row_keys(h)
    arow = torch.arange(B, device=dev)
    ar_g = torch.arange(GROUP, device=dev)
    graw = _group_max(logits)  # (B, nb)
    nb = graw.shape[-1]
    # the first largest logit: its group is the first with the row max, then the first max inside it
    g0 = graw.argmax(-1)
    t0 = (g0.unsqueeze(-1) * GROUP + ar_g).clamp_(max=V - 1)
    top = t0.gather(-1, logits.gather(-1, t0).argmax(-1, keepdim=True)).squeeze(-1)  # clamped dups are later
    ts = t.squeeze(-1)
    approx = gumbel_noise((h32, hg, hj), top.unsqueeze(-1), torch.log).squeeze(-1)
    s_star = (logits[arow, top].float() / ts).double() + approx - PRUNE_MARGIN  # <= the top's exact score
    m_approx, _, slot = group_noise(hg.unsqueeze(-1), hj.unsqueeze(-1), torch.arange(nb, device=dev), torch.log)
    s_star = torch.maximum(s_star, _leader_bound(logits, p, floor, ts, m_approx, slot))
    # x + M_b >= s*  <=>  x >= s* - M_b, in logit units (x = fl32(l / T), T > 0), widened for the rounding of
    # l / T, of M_b (torch.log) and of the limit's own cast to float32
    lim = (s_star.unsqueeze(-1) - m_approx - PRUNE_MARGIN) * ts.double().unsqueeze(-1)  # (B, nb)
    lim = (lim - lim.abs() * 1e-6 - PRUNE_MARGIN).float()
    if flags[2]:
        lim = torch.where((temperature > 0).unsqueeze(-1), lim, float("inf"))  # greedy rows: argmax below
    full = V // GROUP
    rows, tk = [], []
    if full:
        b, g, j = (logits[:, :full * GROUP].reshape(B, full, GROUP) >= lim[:, :full, None]).nonzero(as_tuple=True)
        rows.append(b)
        tk.append(g * GROUP + j)
    if V % GROUP:
        b, j = (logits[:, full * GROUP:] >= lim[:, full:]).nonzero(as_tuple=True)
        rows.append(b)
        tk.append(full * GROUP + j)
    rows, tk = (torch.cat(x) if len(x) > 1 else x[0] for x in (rows, tk))  # (N,) tokens that can still win
    if floor is not None:
        kept = p.view(torch.int32)[rows, tk] >= floor[rows]
        rows, tk = rows[kept], tk[kept]
    x = logits[rows, tk].float() / ts[rows]  # the race's elementwise x
    m_b, eg, j = group_noise(hg[rows], hj[rows], tk >> LOG2_GROUP)  # exact
    score = x.double() + token_gumbel(h32[rows], tk, m_b, eg, j)
    tokens = row_argmax(rows, score, tk, B)
    tokens = torch.where(tokens < V, tokens, top)  # rows without candidates: greedy rows only
    if stats is not None:
        stats["hashed"] = stats.get("hashed", 0) + int(tk.numel()) + B
        stats["tokens"] = stats.get("tokens", 0) + B * V
    return finish(logits, tokens, temperature, m, t, total, flags[2])


def _leader_bound(logits: torch.Tensor, p: torch.Tensor, floor: torch.Tensor | None, ts: torch.Tensor,
                  m_approx: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
    """(B,) float64: the best score of the kept group leaders (token b * GROUP + J_b holds its group's largest
    noise M_b; a leader past V is virtual) - PRUNE_MARGIN, -inf where none is kept. With M_b from torch.log
    it is below the leaders' exact best score, hence below the winner's."""
    B, V = logits.shape
    nb = m_approx.shape[-1]
    ids = torch.arange(nb, device=logits.device) * GROUP + slot  # (B, nb)
    real = ids < V
    ids = ids.clamp(max=V - 1)
    score = (logits.gather(1, ids).float() / ts.unsqueeze(-1)).double() + m_approx
    if floor is not None:
        real &= p.view(torch.int32).gather(1, ids) >= floor.unsqueeze(-1)
    return torch.where(real, score, float("-inf")).amax(-1) - PRUNE_MARGIN


def keep_threshold_from(logits: torch.Tensor, p: torch.Tensor, floor: torch.Tensor | None) -> torch.Tensor:
    """(B,) float32: the smallest logit blocked's cut keeps (p bits >= floor), -inf where nothing is cut."""
    if floor is None:
        return torch.full((logits.shape[0],), float("-inf"), device=logits.device)
    kept = p.view(torch.int32) >= floor.unsqueeze(-1)
    thr = torch.where(kept, logits.float(), float("inf")).amin(-1)
    return torch.where(floor > 0, thr, float("-inf"))


def sample_gumbel_kernel(logits: torch.Tensor, h: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                         top_p: torch.Tensor, flags: Flags | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The race's (tokens, logprobs): tokens from the Triton kernel, the cut and the logprob from blocked's
    weights and integer mass (torch, capturable)."""
    p, m, t, total, floor, flags = _prepare(logits, temperature, top_k, top_p, flags)
    tokens = kernels.gumbel_argmax(logits, h, temperature, keep_threshold_from(logits, p, floor))
    return finish(logits, tokens, temperature, m, t, total, False)


def keyed_gumbel(logits: torch.Tensor, h: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                 top_p: torch.Tensor, flags: Flags) -> tuple[torch.Tensor, torch.Tensor]:
    """The SAMPLERS entry: the kernel on CUDA (with Triton), the pruned race elsewhere."""
    if logits.is_cuda and kernels.HAS_TRITON:
        return sample_gumbel_kernel(logits, h, temperature, top_k, top_p, flags)
    return sample_gumbel_fast(logits, h, temperature, top_k, top_p, flags)
