"""One policy update over a TrainBatch: micro-batched forward/backward, explicit loss aggregation,
gradient clipping, a finite-loss guard, one optimizer step per epoch.

Under torchrun every rank holds the whole batch (train/distributed.py) and cuts it into the same micro-batch
plan; rank r runs micro-batches r, r + world, ... and the normalisers are the whole batch's, so FSDP2's
summed gradients are one process's. Every rank runs the same number of forward/backward passes (FSDP2's
collectives must line up): a rank short of work runs its first micro-batch again with zero weight.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from tailrl.algo.logprobs import completion_logprobs
from tailrl.algo.losses import AGGREGATIONS, AggNorm, policy_loss
from tailrl.train.batch import TrainBatch
from tailrl.train.distributed import SINGLE, DistContext


class TrainingDiverged(RuntimeError):
    """Loss or gradient became NaN/inf; the optimizer step was not taken."""


@dataclass(frozen=True)
class UpdateParams:
    loss_agg: str
    eps_low: float
    eps_high: float
    kl_coef: float
    max_completion_len: int  # Dr.GRPO's constant (the generation budget)
    micro_batch_size: int
    temperature: float
    max_grad_norm: float
    micro_batch_tokens: int = 0  # > 0: token-budgeted, length-sorted micro-batches (TrainBatch.micro_batches)
    chunk_rows: int = 1024  # LM head + log-softmax rows at a time (0: the whole (S, C, V) logits)


def my_micro_batches(batch: TrainBatch, size: int, max_tokens: int, ctx: DistContext) -> list[tuple]:
    """This rank's (rows, sub-batch, weight) share of the batch's micro-batch plan: weight 1, or 0 for a
    padding pass that keeps the ranks' forward/backward counts equal."""
    plan = list(batch.micro_batches(size, max_tokens))
    if not ctx.enabled:
        return [(rows, mb, 1.0) for rows, mb in plan]
    mine = [(rows, mb, 1.0) for rows, mb in ctx.share(plan)]
    turns = -(-len(plan) // ctx.world)
    return mine + [(plan[0][0], plan[0][1], 0.0)] * (turns - len(mine))


@torch.no_grad()
def batch_logprobs(model, batch: TrainBatch, micro_batch_size: int, temperature: float,
                   micro_batch_tokens: int = 0, ctx: DistContext = SINGLE,
                   autocast=contextlib.nullcontext, chunk_rows: int = 1024) -> torch.Tensor:
    """(S, C) completion logprobs without grad (old policy / reference); under torchrun only this rank's
    rows of the plan are filled (the rows its update will use)."""
    out = torch.zeros_like(batch.completion_mask)
    for rows, mb, _ in my_micro_batches(batch, micro_batch_size, micro_batch_tokens, ctx):
        with autocast():
            lp = completion_logprobs(model, mb.input_ids, mb.prompt_lens, mb.max_completion, temperature, chunk_rows)
        out[rows, : mb.max_completion] = lp.to(out.dtype)
    return out


def update_step(model, optimizer, batch: TrainBatch, params: UpdateParams, ctx: DistContext = SINGLE,
                autocast=contextlib.nullcontext) -> dict[str, float]:
    """Accumulate the batch loss over micro-batches, clip, step. Returns actor/* metrics (whole batch)."""
    model.train()
    norm = AggNorm.of(batch.completion_mask, params.max_completion_len)
    agg = AGGREGATIONS.get(params.loss_agg)  # resolved once per step, not per micro-batch
    sums = {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "clipfrac": 0.0, "ratio": 0.0, "lp_diff": 0.0}
    lp_diff_max = 0.0
    tokens = max(norm.num_tokens, 1)
    optimizer.zero_grad(set_to_none=True)
    passes = my_micro_batches(batch, params.micro_batch_size, params.micro_batch_tokens, ctx)
    for _, mb, weight in passes:
        with autocast():
            logp = completion_logprobs(model, mb.input_ids, mb.prompt_lens, mb.max_completion, params.temperature,
                                       params.chunk_rows)
        logp = logp.float()
        old = mb.old_logp if mb.old_logp is not None else logp.detach()
        out = policy_loss(logp, old, mb.advantages, params.eps_low, params.eps_high, mb.ref_logp, params.kl_coef)
        m = mb.completion_mask.to(out["loss"].dtype)
        loss = agg(out["loss"], m, norm)
        if not ctx.enabled and not torch.isfinite(loss):  # under torchrun the global gradient norm decides
            optimizer.zero_grad(set_to_none=True)
            raise TrainingDiverged(f"non-finite loss ({loss.item()})")
        (loss * weight).backward()
        if weight and mb.rollout_logp is not None:  # the engine's logprobs vs this forward's (0 in strict mode)
            diff = (logp.detach() - mb.rollout_logp).abs() * m
            sums["lp_diff"] += diff.sum().item() / tokens
            lp_diff_max = max(lp_diff_max, diff.max().item())
        if weight:
            sums["loss"] += loss.item()
            sums["pg_loss"] += agg(out["pg_loss"].detach(), m, norm).item()
            sums["kl"] += (out["kl"].detach() * m).sum().item() / tokens
            sums["clipfrac"] += (out["clipped"].float() * m).sum().item() / tokens
            sums["ratio"] += (out["ratio"].detach() * m).sum().item() / tokens
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), params.max_grad_norm)
    grad_norm = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)
    if not math.isfinite(grad_norm):
        optimizer.zero_grad(set_to_none=True)
        raise TrainingDiverged(f"non-finite gradient norm ({grad_norm})")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    totals = dict(zip(sums, ctx.sum(list(sums.values()))))  # every rank's share of the batch
    out = {"actor/loss": totals["loss"], "actor/pg_loss": totals["pg_loss"], "actor/kl": totals["kl"],
           "actor/clipfrac": totals["clipfrac"], "actor/ratio_mean": totals["ratio"], "actor/grad_norm": grad_norm}
    if batch.rollout_logp is not None:
        out["rollout/logprob_diff_mean"] = totals["lp_diff"]
        out["rollout/logprob_diff_max"] = max(ctx.gather(lp_diff_max))
    return out
