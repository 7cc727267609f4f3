"""TrainBatch: the kept rollouts as padded tensors for the update (prompt + completion, right-padded)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # (S, L) long: prompt + completion, right-padded
    prompt_lens: torch.Tensor  # (S,) long
    completion_mask: torch.Tensor  # (S, C) float: 1 on real completion tokens
    advantages: torch.Tensor  # (S,) float
    max_completion: int  # C
    old_logp: torch.Tensor | None = None  # (S, C) from the training forward before the first update
    ref_logp: torch.Tensor | None = None  # (S, C) under the frozen reference

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])

    def micro_batches(self, size: int):
        """Yield (slice, sub-batch) with each sub-batch trimmed to its own longest row."""
        for start in range(0, self.size, size):
            sl = slice(start, min(start + size, self.size))
            lens = self.prompt_lens[sl] + self.completion_mask[sl].sum(-1).long()
            L = int(lens.max())
            C = int(self.completion_mask[sl].sum(-1).max())
            yield sl, TrainBatch(
                self.input_ids[sl, :L], self.prompt_lens[sl], self.completion_mask[sl, :C], self.advantages[sl], C,
                None if self.old_logp is None else self.old_logp[sl, :C],
                None if self.ref_logp is None else self.ref_logp[sl, :C],
            )


def make_train_batch(prompts: list[list[int]], completions: list[list[int]], advantages: torch.Tensor,
                     pad_id: int = 0, device="cpu") -> TrainBatch:
    """prompts/completions: token ids per kept rollout; advantages: (S,)."""
    S = len(prompts)
    C = max(1, max(len(c) for c in completions))
    L = max(len(p) + len(c) for p, c in zip(prompts, completions)) + 1  # +1: every row has a pad to predict into
    ids = torch.full((S, L), pad_id, dtype=torch.long)
    mask = torch.zeros(S, C)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c, dtype=torch.long)
        mask[i, : len(c)] = 1.0
    return TrainBatch(ids.to(device), torch.tensor([len(p) for p in prompts], device=device), mask.to(device),
                      advantages.float().to(device), C)
