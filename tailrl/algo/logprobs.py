"""Per-token logprobs of given completion tokens under a model (the training forward); the LM head's modes
themselves are model/head.py."""

from __future__ import annotations

import torch


def completion_logprobs(model, input_ids: torch.Tensor, prompt_lens: torch.Tensor, max_completion: int,
                        temperature: float = 1.0, chunk_rows: int = 1024) -> torch.Tensor:
    """input_ids: (S, L) right-padded prompt+completion; prompt_lens: (S,); chunk_rows: LM-head rows at a time
    (0: all (S, C, V) logits at once, as before chunking).
    Returns (S, max_completion) logprobs of completion tokens (garbage past each row's end: mask it)."""
    S, L = input_ids.shape
    idx = prompt_lens.unsqueeze(1) - 1 + torch.arange(max_completion, device=input_ids.device)  # predicting positions
    idx = idx.clamp(max=L - 2)  # (S, C)
    targets = input_ids.gather(1, idx + 1)  # (S, C)
    # the LM head on completion positions only: chunk by chunk (no (S, C, V) logits), whole, or strict's kernels
    return model(input_ids, logits_index=idx, targets=targets, temperature=temperature, chunk_rows=chunk_rows)
