"""Keyed acceptance of a draft model on the target's rollouts, measured exactly and offline.

The engine samples every token with randomness fixed by the key (seed, uid, sample index, position; the
default sampler's Gumbel noise per token) and a draft model drafts with the same sampler and key (the same
noise), so a draft token is accepted exactly when the draft's keyed sample equals the target's token. Teacher-forcing the draft over the rollouts gives
that per-token acceptance p in one forward per chunk — the p of SpecActor's TGS model (`tailrl profile
spec`) and the demo draft's quality metric (demo/draft.py).
"""

from __future__ import annotations

import torch

from tailrl.config import EngineConfig
from tailrl.engine.request import Rollout
from tailrl.engine.sampling import keyed_sample


def pack(rollouts: list[Rollout], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids (n, L) prompt + completion right-padded, mask (n, L-1) float: 1 where logits[:, t] predict a
    completion token, i.e. t in [P-1, P+C-2])."""
    seqs = [r.prompt_ids + r.token_ids for r in rollouts]
    L = max(map(len, seqs))
    ids = torch.tensor([s + [pad] * (L - len(s)) for s in seqs])
    mask = torch.zeros(len(seqs), L - 1)
    for i, r in enumerate(rollouts):
        mask[i, len(r.prompt_ids) - 1:len(r.prompt_ids) - 1 + len(r.token_ids)] = 1.0
    return ids, mask


@torch.no_grad()
def keyed_acceptance(model, rollouts: list[Rollout], seed: int, temperature: float, pad: int,
                     chunk: int = 64, sampler: str = EngineConfig().sampler) -> float:
    """Fraction of completion positions where the model's keyed sample (keys (seed, uid, sample index,
    position), as engine/sampling/rows.py makes them; the engine's sampler) equals the token the rollout holds;
    `seed` is the sampling seed the rollouts were generated with."""
    hits = total = 0
    for c in range(0, len(rollouts), chunk):
        part = rollouts[c:c + chunk]
        ids, mask = pack(part, pad)
        sel = mask.bool()
        x = model(ids[:, :-1])[sel]  # (N, V): the completion positions, rollout by rollout
        want = ids[:, 1:][sel]
        keys = [[seed, r.uid, r.sample_index, j] for r in part for j in range(len(r.token_ids))]
        n = x.shape[0]
        toks, _ = keyed_sample(x, torch.tensor(keys, dtype=torch.long), torch.full((n,), float(temperature)),
                               torch.zeros(n, dtype=torch.long), torch.ones(n), sampler)
        hits += int((toks == want).sum())
        total += n
    return hits / max(total, 1)
