"""Processes and process groups. `spawn(fn, world)` starts `world` ranks on this machine — the same
code runs under `torchrun`, where `init_from_env()` joins the launched group. The backend is gloo and
the models live on the CPU: the GPU path (NCCL, one device per rank) is not built yet.
`GroupPool` creates a TP group the first time a layout needs it and reuses it after
(PAT §4.3: communicators are created lazily and kept; every rank must ask for groups in the same
order, which holds because all ranks run the same control flow)."""

from __future__ import annotations

import os
import socket
import tempfile
import traceback
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tailrl.errors import UserError


def backend() -> str:
    return "gloo"  # CPU tensors only (see the module docstring)


def init_from_env() -> tuple[int, int]:
    """Join the group torchrun set up (RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT)."""
    if not dist.is_initialized():
        dist.init_process_group(backend())
    return dist.get_rank(), dist.get_world_size()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world: int, port: int, result_dir: str, fn: Callable, args: tuple) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // world))
    dist.init_process_group(backend(), rank=rank, world_size=world)
    try:
        out = fn(rank, world, *args)
        torch.save(out, os.path.join(result_dir, f"rank{rank}.pt"))
    except UserError as e:  # a mistake the user can fix: one line in the parent, not a traceback
        with open(os.path.join(result_dir, f"rank{rank}.usererr"), "w") as f:
            f.write(str(e))
        raise
    except BaseException:
        with open(os.path.join(result_dir, f"rank{rank}.err"), "w") as f:
            f.write(traceback.format_exc())
        raise
    finally:
        dist.destroy_process_group()


def spawn(fn: Callable, world: int, *args) -> list:
    """Run fn(rank, world, *args) on `world` local processes; returns each rank's return value.
    A failing rank's traceback is re-raised here."""
    with tempfile.TemporaryDirectory() as d:
        try:
            mp.spawn(_entry, args=(world, _free_port(), d, fn, args), nprocs=world, join=True)
        except Exception as e:  # mp reports the first failure; show the rank's own traceback
            user = [open(os.path.join(d, f)).read() for f in sorted(os.listdir(d)) if f.endswith(".usererr")]
            if user:
                raise UserError(user[0]) from None
            errs = [open(os.path.join(d, f)).read() for f in sorted(os.listdir(d)) if f.endswith(".err")]
            raise RuntimeError("a rank failed:\n" + (errs[0] if errs else str(e))) from None
        return [torch.load(os.path.join(d, f"rank{r}.pt"), weights_only=False) for r in range(world)]


class GroupPool:
    """TP process groups by member ranks, created on first use and reused; counts creations."""

    def __init__(self) -> None:
        self.groups: dict[tuple[int, ...], object] = {}
        self.created = 0

    def get(self, ranks: tuple[int, ...]):
        """The group of `ranks` (None for a single rank: no collective needed). Collective: every
        rank of the world must call this for every new group, in the same order."""
        if len(ranks) == 1:
            return None
        if ranks not in self.groups:
            self.groups[ranks] = dist.new_group(list(ranks))
            self.created += 1
        return self.groups[ranks]

    def layout_groups(self, layout) -> None:
        """Create (or reuse) every TP group of a layout, in a fixed order on all ranks."""
        for g in layout.tp_groups():
            self.get(g)
