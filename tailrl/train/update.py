"""One policy update over a TrainBatch: micro-batched forward/backward, explicit loss aggregation,
gradient clipping, a finite-loss guard, one optimizer step per epoch.

The loss per token is algo/losses.py's `policy_loss`: a POLICY_LOSSES surrogate (vanilla | gspo) weighted by
the ROLLOUT_CORRECTIONS weight (pi_old / pi_engine from the engine's logprobs, when algo.rollout_correction is
set), plus beta x a KL_ESTIMATORS estimate (unless the KL went into the reward: `kl_reward_penalty`, called
before the advantages), minus the entropy bonus. The forward also returns each token's entropy from the chunked
LM head (never (S, C, V) logits): `actor/entropy` every step.

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

from tailrl.algo.kl import KL_ESTIMATORS, sequence_kl
from tailrl.algo.logprobs import completion_logprobs, completion_positions
from tailrl.algo.losses import AGGREGATIONS, AggNorm, policy_loss
from tailrl.algo.policy_losses import POLICY_LOSSES
from tailrl.algo.rollout_correction import ROLLOUT_CORRECTIONS
from tailrl.model.head import Targets
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
    policy_loss: str = "vanilla"  # POLICY_LOSSES
    kl_estimator: str = "k3"  # KL_ESTIMATORS
    kl_in_reward: bool = False  # the KL is in the advantages (kl_reward_penalty), not in the loss
    entropy_coef: float = 0.0
    rollout_correction: str = "none"  # ROLLOUT_CORRECTIONS, or none
    rollout_is_cap: float = 2.0

    @classmethod
    def from_config(cls, cfg) -> UpdateParams:
        """From a validated Config (train.recipe.validate: the algorithm's preset filled in)."""
        a, r, t = cfg.algo, cfg.rollout, cfg.train
        return cls(loss_agg=a.loss_agg, eps_low=a.eps_low, eps_high=a.eps_high, kl_coef=a.kl_coef,
                   max_completion_len=r.max_new_tokens, micro_batch_size=t.micro_batch_size,
                   temperature=r.temperature if r.temperature > 0 else 1.0, max_grad_norm=t.max_grad_norm,
                   micro_batch_tokens=t.micro_batch_tokens, chunk_rows=t.logprob_chunk_rows,
                   policy_loss=a.policy_loss, kl_estimator=a.kl_estimator, kl_in_reward=bool(a.kl_in_reward),
                   entropy_coef=a.entropy_coef, rollout_correction=a.rollout_correction,
                   rollout_is_cap=a.rollout_is_cap)


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


def kl_reward_penalty(batch: TrainBatch, params: UpdateParams, ctx: DistContext = SINGLE) -> torch.Tensor:
    """(S,) float64 on the CPU: kl_coef x each completion's summed KL estimate between the pre-update policy
    (batch.old_logp) and the reference (batch.ref_logp), to subtract from the scores before the advantages when
    the KL is in the reward; zeros otherwise. Under torchrun each rank fills its rows of the plan (as
    batch_logprobs) and the sum over ranks is the whole batch's, the same on every rank."""
    if not (params.kl_in_reward and params.kl_coef):
        return torch.zeros(batch.size, dtype=torch.float64)
    if batch.old_logp is None or batch.ref_logp is None:
        raise ValueError("the KL in the reward needs batch.old_logp and batch.ref_logp (batch_logprobs)")
    pen = torch.zeros(batch.size, dtype=torch.float64, device=batch.completion_mask.device)  # rows index it there
    for rows, mb, weight in my_micro_batches(batch, params.micro_batch_size, params.micro_batch_tokens, ctx):
        if weight:  # a padding pass repeats rows another rank owns
            pen[rows] = params.kl_coef * sequence_kl(mb.old_logp, mb.ref_logp, mb.completion_mask, params.kl_estimator)
    return torch.tensor(ctx.sum(pen.tolist()), dtype=torch.float64) if ctx.enabled else pen.cpu()


def _forward(model, mb: TrainBatch, params: UpdateParams) -> tuple[torch.Tensor, torch.Tensor]:
    """(S_mb, C) logprobs and entropies of the micro-batch's completion tokens, from one pass of the LM head."""
    idx, targets = completion_positions(mb.input_ids, mb.prompt_lens, mb.max_completion)
    return model(mb.input_ids, logits_index=idx, targets=Targets(targets, entropy=True),
                 temperature=params.temperature, chunk_rows=params.chunk_rows)


def update_step(model, optimizer, batch: TrainBatch, params: UpdateParams, ctx: DistContext = SINGLE,
                autocast=contextlib.nullcontext) -> dict[str, float]:
    """Accumulate the batch loss over micro-batches, clip, step. Returns actor/* metrics (whole batch), and
    rollout/is_* with a rollout correction."""
    model.train()
    norm = AggNorm.of(batch.completion_mask, params.max_completion_len)
    # variants resolved once per step, not per micro-batch
    agg = AGGREGATIONS.get(params.loss_agg)
    surrogate = POLICY_LOSSES.get(params.policy_loss)
    kl = KL_ESTIMATORS.get(params.kl_estimator)
    kl_coef = 0.0 if params.kl_in_reward else params.kl_coef
    correct = ROLLOUT_CORRECTIONS.get(params.rollout_correction) if params.rollout_correction != "none" else None
    if correct is not None and batch.rollout_logp is None:
        raise ValueError(f"algo.rollout_correction={params.rollout_correction} needs the engine's logprobs "
                         "(batch.rollout_logp) in every epoch")
    names = ("loss", "pg_loss", "kl", "clipfrac", "ratio", "entropy", "lp_diff", "is_w", "is_cap")
    # accumulated on the device in float64 (the same additions as Python floats) and read once after the
    # loop: no host sync per micro-batch
    sums = lp_diff_max = None
    tokens = max(norm.num_tokens, 1)
    optimizer.zero_grad(set_to_none=True)
    passes = my_micro_batches(batch, params.micro_batch_size, params.micro_batch_tokens, ctx)
    for _, mb, weight in passes:
        with autocast():
            logp, entropy = _forward(model, mb, params)
        logp, entropy = logp.float(), entropy.float()
        old = mb.old_logp if mb.old_logp is not None else logp.detach()
        m = mb.completion_mask.to(logp.dtype)
        is_w = capped = None
        if correct is not None:  # pi_old / pi_engine of the sampled tokens, the same in every epoch
            is_w, capped = correct(old - mb.rollout_logp, m, params.rollout_is_cap)
        out = policy_loss(logp, old, mb.advantages, params.eps_low, params.eps_high, mb.ref_logp, kl_coef, mask=m,
                          surrogate=surrogate, kl=kl, is_weight=is_w, entropy=entropy,
                          entropy_coef=params.entropy_coef)
        loss = agg(out["loss"], m, norm)
        if not ctx.enabled and not torch.isfinite(loss):  # under torchrun the global gradient norm decides
            optimizer.zero_grad(set_to_none=True)
            raise TrainingDiverged(f"non-finite loss ({loss.item()})")
        (loss * weight).backward()
        if not weight:
            continue
        zero = logp.new_zeros((), dtype=torch.float64)
        per = {"loss": loss.detach().double(), "pg_loss": agg(out["pg_loss"].detach(), m, norm).double()}
        for key, per_token in (("kl", out["kl"]), ("clipfrac", out["clipped"].float()), ("ratio", out["ratio"]),
                               ("entropy", entropy)):
            per[key] = (per_token.detach() * m).sum().double() / tokens
        if mb.rollout_logp is not None:  # the engine's logprobs vs this forward's (0 in strict mode)
            diff = (logp.detach() - mb.rollout_logp).abs() * m
            per["lp_diff"] = diff.sum().double() / tokens
            top = diff.max().double()
            lp_diff_max = top if lp_diff_max is None else torch.maximum(lp_diff_max, top)
        if is_w is not None:
            per["is_w"] = (is_w * m).sum().double() / tokens
            per["is_cap"] = capped.sum().double() / tokens
        step = torch.stack([per.get(k, zero) for k in names])
        sums = step if sums is None else sums + step
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), params.max_grad_norm)
    grad_norm = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)
    if not math.isfinite(grad_norm):
        optimizer.zero_grad(set_to_none=True)
        raise TrainingDiverged(f"non-finite gradient norm ({grad_norm})")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    local = sums.tolist() if sums is not None else [0.0] * len(names)
    lp_diff_max = float(lp_diff_max) if lp_diff_max is not None else 0.0
    totals = dict(zip(names, ctx.sum(local)))  # every rank's share of the batch
    out = {"actor/loss": totals["loss"], "actor/pg_loss": totals["pg_loss"], "actor/kl": totals["kl"],
           "actor/clipfrac": totals["clipfrac"], "actor/ratio_mean": totals["ratio"], "actor/entropy": totals["entropy"],
           "actor/grad_norm": grad_norm}
    if batch.rollout_logp is not None:
        out["rollout/logprob_diff_mean"] = totals["lp_diff"]
        out["rollout/logprob_diff_max"] = max(ctx.gather(lp_diff_max))
    if correct is not None:
        out["rollout/is_weight_mean"] = totals["is_w"]
        out["rollout/is_clipped_frac"] = totals["is_cap"]
    return out
