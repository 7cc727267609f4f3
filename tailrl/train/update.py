"""One policy update over a TrainBatch: micro-batched forward/backward, explicit loss aggregation,
gradient clipping, a finite-loss guard, one optimizer step per epoch."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tailrl.algo.logprobs import completion_logprobs
from tailrl.algo.losses import AggNorm, aggregate, policy_loss
from tailrl.train.batch import TrainBatch


class TrainingDiverged(RuntimeError):
    """Loss or gradient became NaN/inf; the optimizer step was not taken."""


@dataclass(frozen=True)
class UpdateSpec:
    loss_agg: str
    eps_low: float
    eps_high: float
    kl_coef: float
    max_completion_len: int  # Dr.GRPO's constant (the generation budget)
    micro_batch_size: int
    temperature: float
    max_grad_norm: float
    micro_batch_tokens: int = 0  # > 0: token-budgeted, length-sorted micro-batches (TrainBatch.micro_batches)


@torch.no_grad()
def batch_logprobs(model, batch: TrainBatch, micro_batch_size: int, temperature: float,
                   micro_batch_tokens: int = 0) -> torch.Tensor:
    """(S, C) completion logprobs without grad (old policy / reference)."""
    out = torch.zeros_like(batch.completion_mask)
    for sl, mb in batch.micro_batches(micro_batch_size, micro_batch_tokens):
        out[sl, : mb.max_completion] = completion_logprobs(model, mb.input_ids, mb.prompt_lens, mb.max_completion,
                                                           temperature)
    return out


def update_step(model, optimizer, batch: TrainBatch, spec: UpdateSpec) -> dict[str, float]:
    """Accumulate the batch loss over micro-batches, clip, step. Returns actor/* metrics."""
    model.train()
    norm = AggNorm.of(batch.completion_mask, spec.max_completion_len)
    sums = {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "clipfrac": 0.0, "ratio": 0.0}
    tokens = max(norm.num_tokens, 1)
    optimizer.zero_grad(set_to_none=True)
    for _, mb in batch.micro_batches(spec.micro_batch_size, spec.micro_batch_tokens):
        logp = completion_logprobs(model, mb.input_ids, mb.prompt_lens, mb.max_completion, spec.temperature)
        old = mb.old_logp if mb.old_logp is not None else logp.detach()
        out = policy_loss(logp, old, mb.advantages, spec.eps_low, spec.eps_high, mb.ref_logp, spec.kl_coef)
        m = mb.completion_mask
        loss = aggregate(out["loss"], m, spec.loss_agg, norm)
        if not torch.isfinite(loss):
            optimizer.zero_grad(set_to_none=True)
            raise TrainingDiverged(f"non-finite loss ({loss.item()})")
        loss.backward()
        sums["loss"] += loss.item()
        sums["pg_loss"] += aggregate(out["pg_loss"].detach(), m, spec.loss_agg, norm).item()
        sums["kl"] += (out["kl"].detach() * m).sum().item() / tokens
        sums["clipfrac"] += (out["clipped"].float() * m).sum().item() / tokens
        sums["ratio"] += (out["ratio"].detach() * m).sum().item() / tokens
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), spec.max_grad_norm).item()
    if not math.isfinite(grad_norm):
        optimizer.zero_grad(set_to_none=True)
        raise TrainingDiverged(f"non-finite gradient norm ({grad_norm})")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    return {"actor/loss": sums["loss"], "actor/pg_loss": sums["pg_loss"], "actor/kl": sums["kl"],
            "actor/clipfrac": sums["clipfrac"], "actor/ratio_mean": sums["ratio"], "actor/grad_norm": grad_norm}
