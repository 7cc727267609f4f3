"""Per-token logprobs of given completion tokens under a model (the training forward); the LM head's modes
themselves are model/head.py (train/update.py asks the head for the entropy beside them)."""

from __future__ import annotations

import torch


def completion_positions(input_ids: torch.Tensor, prompt_lens: torch.Tensor,
                         max_completion: int) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids: (S, L) right-padded prompt+completion; prompt_lens: (S,). Returns (idx, targets), both
    (S, max_completion): the positions predicting each completion token and those tokens (past a row's end:
    clamped positions, garbage targets to mask)."""
    L = input_ids.shape[1]
    idx = prompt_lens.unsqueeze(1) - 1 + torch.arange(max_completion, device=input_ids.device)  # predicting positions
    idx = idx.clamp(max=L - 2)  # (S, C)
    return idx, input_ids.gather(1, idx + 1)


def completion_logprobs(model, input_ids: torch.Tensor, prompt_lens: torch.Tensor, max_completion: int,
                        temperature: float = 1.0, chunk_rows: int = 1024) -> torch.Tensor:
    """input_ids: (S, L) right-padded prompt+completion; prompt_lens: (S,); chunk_rows: LM-head rows at a time
    (0: all (S, C, V) logits at once, as before chunking).
    Returns (S, max_completion) logprobs of completion tokens (garbage past each row's end: mask it)."""
    idx, targets = completion_positions(input_ids, prompt_lens, max_completion)
    # the LM head on completion positions only: chunk by chunk (no (S, C, V) logits), whole, or strict's kernels
    return model(input_ids, logits_index=idx, targets=targets, temperature=temperature, chunk_rows=chunk_rows)
