"""Data-parallel training under torchrun: which rank does what, and the few collectives the trainer needs.

    torchrun --nproc-per-node N -m tailrl train cfg.yaml                       one machine
    torchrun --nnodes M --nproc-per-node N --rdzv-backend c10d --rdzv-endpoint HOST:PORT -m tailrl train cfg.yaml

Every rank draws the same prompts (same sampler, same seed) and gives them the same uids; it generates and
scores only its share of the requests (`share`), then the step's groups are all-gathered, so every rank
holds every group and computes every global decision (SAGC's G, DAPO's refills, PODS, the loss
normalisers) from the same data: identical on all ranks by construction. Keyed sampling makes the union of
the ranks' rollouts token-identical to one process generating the whole batch, given the same weights and
logits: with engine.exact=strict exactly; with fast, up to batch-dependent reductions (each rank decodes a
different batch), and the FSDP gradient sum adds in another order than one process, so weights agree to
rounding and a near-tie may flip in a later step. Each rank then trains on
its share of the micro-batches (train/update.py); FSDP2 sums the gradients. Rank 0 logs and writes the
model; every rank writes its optimizer shard.

Backends: NCCL with one device per local rank on CUDA, gloo on CPUs (how the tests run two ranks).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        """The rank that logs, prints and writes the model."""
        return self.rank == 0

    def share(self, items: list) -> list:
        """This rank's part of a list every rank holds: items rank, rank + world, ..."""
        return items[self.rank::self.world] if self.enabled else items

    def gather(self, obj) -> list:
        """Every rank's `obj`, in rank order (a collective; picklable objects)."""
        if not self.enabled:
            return [obj]
        out: list = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sums of `values` over the ranks (a collective)."""
        if not self.enabled:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64)
        if dist.get_backend() == "nccl":
            t = t.cuda()
        dist.all_reduce(t)
        return t.tolist()

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()


SINGLE = DistContext()


def init_distributed(device: str, timeout_s: float = 7200.0) -> DistContext:
    """Join torchrun's process group when it launched more than one rank (WORLD_SIZE > 1); a single process
    otherwise. device: the resolved model.device; on CUDA each rank takes device local_rank. timeout_s: how
    long a collective may wait (train.dist_timeout_s: one rank's long rollout tail is waited for, not an
    error)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return SINGLE
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=timeout_s))
    return DistContext(dist.get_rank(), dist.get_world_size(), local)


@contextmanager
def leaving(ctx: DistContext):
    """Run the body, then end this process's part in the torchrun job it joined with init_distributed: a
    barrier (no rank leaves while another may still talk to it), then the process group destroyed, so gloo /
    NCCL tear down before the interpreter does (a group left to exit-time destructors can abort a rank that
    finished first: seen as SIGABRT on rank 1 of `tailrl eval` under load). When the body raises: nothing —
    the others may be inside a collective, where destroying an NCCL group can hang this rank instead of
    letting its error end the job. A no-op in a single process."""
    yield
    if ctx.enabled and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def rank_device(device: str, ctx: DistContext) -> str:
    """The device this rank computes on: cuda:LOCAL_RANK under torchrun on CUDA, else the given one."""
    return f"cuda:{ctx.local_rank}" if ctx.enabled and device.startswith("cuda") else device
