"""TrainBatch: the kept rollouts as padded tensors for the update (prompt + completion, right-padded).

A multi-turn rollout's completion holds the model's tokens and the observations appended between its turns
(tool results, engine/turns.py): `completion_lens` counts every completion token (what the forward reads),
`completion_mask` only the model's (what the loss, the logprob metrics and the length terms use)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # (S, L) long: prompt + completion, right-padded
    prompt_lens: torch.Tensor  # (S,) long
    completion_mask: torch.Tensor  # (S, C) float: 1 on the model's completion tokens (0: padding, observations)
    advantages: torch.Tensor  # (S,) float
    max_completion: int  # C
    old_logp: torch.Tensor | None = None  # (S, C) from the training forward before the first update
    ref_logp: torch.Tensor | None = None  # (S, C) under the frozen reference
    rollout_logp: torch.Tensor | None = None  # (S, C) the engine's logprobs of the same tokens (0 off the mask)
    completion_lens: torch.Tensor | None = None  # (S,) long: completion tokens incl. observations (None: mask sum)

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def lengths(self) -> torch.Tensor:
        """(S,) long: each row's completion tokens, observations included."""
        return self.completion_lens if self.completion_lens is not None else self.completion_mask.sum(-1).long()

    def micro_batches(self, size: int, max_tokens: int = 0):
        """Yield (rows, sub-batch), each sub-batch trimmed to its own longest row. rows is a slice of `size`
        consecutive rows, or with max_tokens > 0 an index tensor of a length-sorted group (length_groups)."""
        comp = self.lengths
        lens = self.prompt_lens + comp
        if max_tokens > 0:
            groups = [torch.tensor(g, device=lens.device) for g in length_groups(lens.tolist(), size, max_tokens)]
        else:
            groups = [slice(s, min(s + size, self.size)) for s in range(0, self.size, size)]
        for rows in groups:
            L = int(lens[rows].max())
            C = int(comp[rows].max())
            yield rows, TrainBatch(
                self.input_ids[rows, :L], self.prompt_lens[rows], self.completion_mask[rows, :C], self.advantages[rows],
                C, None if self.old_logp is None else self.old_logp[rows, :C],
                None if self.ref_logp is None else self.ref_logp[rows, :C],
                None if self.rollout_logp is None else self.rollout_logp[rows, :C],
                None if self.completion_lens is None else self.completion_lens[rows],
            )


def length_groups(lengths: list[int], max_rows: int, max_tokens: int) -> list[list[int]]:
    """Row indices grouped for token-budgeted micro-batches: rows sorted by length (ties by index) and cut
    greedily so that each group has <= max_rows rows and rows x its longest row <= max_tokens (a row longer
    than the budget goes alone)."""
    groups: list[list[int]] = []
    cur: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (lengths[i], i)):
        if cur and (len(cur) >= max_rows or (len(cur) + 1) * lengths[i] > max_tokens):
            groups.append(cur)
            cur = []
        cur.append(i)
    if cur:
        groups.append(cur)
    return groups


def make_train_batch(prompts: list[list[int]], completions: list[list[int]], advantages: torch.Tensor,
                     pad_id: int = 0, device="cpu", rollout_logprobs: list[list[float]] | None = None,
                     token_masks: list[list[int] | None] | None = None) -> TrainBatch:
    """prompts/completions: token ids per kept rollout; advantages: (S,); rollout_logprobs: the engine's
    logprob of each completion token (for the engine-vs-trainer mismatch metric; NaN on observations);
    token_masks: per rollout 1 on the model's tokens, 0 on observation tokens (None: all the model's)."""
    S = len(prompts)
    C = max(1, max(len(c) for c in completions))
    L = max(len(p) + len(c) for p, c in zip(prompts, completions)) + 1  # +1: every row has a pad to predict into
    ids = torch.full((S, L), pad_id, dtype=torch.long)
    mask = torch.zeros(S, C)
    engine_lp = torch.zeros(S, C, dtype=torch.float32) if rollout_logprobs is not None else None
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c, dtype=torch.long)
        tm = token_masks[i] if token_masks is not None else None
        if tm is not None and len(tm) != len(c):
            raise ValueError(f"rollout {i}: token mask of {len(tm)} for {len(c)} completion tokens")
        mask[i, : len(c)] = 1.0 if tm is None else torch.tensor(tm, dtype=torch.float32)
        if engine_lp is not None and c:
            engine_lp[i, : len(c)] = torch.tensor(rollout_logprobs[i], dtype=torch.float32)
    if engine_lp is not None:  # observation tokens have no engine logprob (NaN): 0, off the mask
        engine_lp = torch.where(mask > 0, engine_lp, torch.zeros_like(engine_lp))
    lens = torch.tensor([len(c) for c in completions], device=device)
    return TrainBatch(ids.to(device), torch.tensor([len(p) for p in prompts], device=device), mask.to(device),
                      advantages.float().to(device), C,
                      rollout_logp=engine_lp.to(device) if engine_lp is not None else None, completion_lens=lens)
