"""A draft model's LM head over a subset of the vocabulary (FR-Spec's frequency-ranked drafting).

On a small real model the LM head dominates a draft's cost: SmolLM2's tied head is 49,152 x 576, ~10 ms of
a 2-layer draft's ~14 ms per token at batch 1 on the CPU. A draft only needs the tokens the policy actually
writes: the few thousand most frequent ones in its rollouts cover nearly all of them. A draft folder may
hold `draft_vocab.json` (token ids, most frequent first); `load_draft` then computes logits over those rows
only and scatters them into full-width rows at -inf elsewhere, so the keyed sampler, the token keys and the
exact check are the target's, unchanged: a token outside the subset is never drafted (its draw is left to
the verify step), which costs acceptance, never correctness.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from tailrl.errors import UserError
from tailrl.model import load

VOCAB_FILE = "draft_vocab.json"


class SubsetHead(nn.Module):
    """logits over `ids` (N,) of a V-token vocabulary: rows of the full head's weight, gathered once (a
    frozen copy). scatter=False gives the (..., N) logits themselves (distillation's training forward)."""

    def __init__(self, weight: torch.Tensor, ids: torch.Tensor, vocab: int, scatter: bool = True):
        super().__init__()
        self.register_buffer("weight", weight[ids].detach().clone())  # (N, hidden)
        self.register_buffer("ids", ids)  # (N,) long
        self.vocab, self.scatter = vocab, scatter

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """h: (..., hidden) -> (..., V) logits, -inf outside the subset (or (..., N) without scatter)."""
        part = torch.nn.functional.linear(h, self.weight)  # (..., N)
        if not self.scatter:
            return part
        out = part.new_full((*h.shape[:-1], self.vocab), float("-inf"))
        return out.index_copy_(-1, self.ids, part)


def restrict_vocab(model, ids: list[int]) -> None:
    """Replace the model's LM head by a SubsetHead over ids (in place; for drafting only)."""
    V = model.args.vocab_size
    bad = [i for i in ids if not 0 <= i < V]
    if bad or not ids:
        raise UserError(f"draft vocabulary: {len(ids)} ids, {len(bad)} outside [0, {V}) (e.g. {bad[:3]})")
    head = model.lm_head
    w = head.tied.weight if head.tied is not None else head.weight
    model.lm_head = SubsetHead(w, torch.tensor(sorted(set(ids)), dtype=torch.long, device=w.device), V)


def load_draft(path: str | Path, dtype: str | torch.dtype = "float32", device: str = "cpu"):
    """A draft model folder for drafting: the model (eval mode), with its head restricted to the folder's
    draft_vocab.json when there is one."""
    model, _ = load(str(path), dtype=dtype, device=device, tokenizer=False)
    vocab = Path(path) / VOCAB_FILE
    if vocab.is_file():
        restrict_vocab(model, json.loads(vocab.read_text()))
    return model.eval()
