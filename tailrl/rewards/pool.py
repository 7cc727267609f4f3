"""`RewardPool`: reward calls in worker processes, scored while the rest of the rollout still runs.

Place in the flow: engine.generate(on_finish=...) -> **pool.submit(group)** as each group's last rollout
finishes -> ... -> **pool.result(ticket)** after generation -> advantages. Only the groups that finish
last are still being scored when generation ends (the tail), instead of the whole batch.

Same contract as `Reward` (base.py, scoring.py): every call `fn(prompt, completion, **row)` scores a
number or 0, failures are counted and warned once per function. The processes are a `WorkerPool`
(procpool.py, shared with the tool executor): a call past `timeout_s` has its worker SIGKILLed (also when
stuck in C code) and counts as a timeout; a worker that dies during a call (segfault, os._exit) counts an
error for that call. Either way a fresh worker replaces it and the calls queued behind go to the next
free worker. Each worker runs pool_worker.py; calls are sent oldest submission first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tailrl.errors import UserError
from tailrl.rewards.procpool import Reply, WorkerPool
from tailrl.rewards.registry import REWARDS
from tailrl.rewards.scoring import RewardBatch, Scored, Scorer, Tally
from tailrl.rewards.settings import check_settings

__all__ = ["RewardPool"]


@dataclass(frozen=True)
class _Job:
    """One submission: n completions, and the pool's ticket of each call, tickets[f][i]."""

    n: int
    tickets: list[list[int]]


class RewardPool(Scorer):
    """Weighted reward functions scored by `workers` processes; see the module docstring."""

    def __init__(self, functions: Sequence[str], weights: Sequence[float] = (), timeout_s: float = 10.0,
                 workers: int = 2):
        functions, self.weights = check_settings(functions, weights, timeout_s)
        if workers < 1:
            raise UserError(f"a reward pool needs at least 1 worker, got {workers} (0 scores in-process)")
        self.timeout_s = float(timeout_s)  # <= 0: no limit, as for Reward
        self.workers = workers
        self._jobs: dict[int, _Job] = {}
        self._next_ticket = 0
        args = {"functions": list(functions), "imports": _imports(functions)}
        self._pool = WorkerPool("tailrl.rewards.pool_worker", args, workers, self.timeout_s, what="reward",
                                loading=f"the rewards {list(functions)}")
        self.names: list[str] = self._pool.info or []
        self._tally = Tally(self.names, self.weights, self.timeout_s)

    @property
    def restarts(self) -> int:
        """Workers replaced after a timeout or a death."""
        return self._pool.restarts

    def worker_pids(self) -> list[int]:
        """The worker processes started and not yet reaped."""
        return self._pool.pids()

    def submit(self, prompts: list[str], completions: list[str], rows: list[dict]) -> int:
        """Queue one call per (function, completion) behind everything submitted before; returns at once."""
        n = self._check_aligned(prompts, completions, rows)
        tickets = [[0] * n for _ in self.names]
        for i, (prompt, completion, row) in enumerate(zip(prompts, completions, rows)):
            for f in range(len(self.names)):
                tickets[f][i] = self._pool.submit((f, prompt, completion, row))
        ticket, self._next_ticket = self._next_ticket, self._next_ticket + 1
        self._jobs[ticket] = _Job(n, tickets)
        return ticket

    def result(self, ticket: int) -> RewardBatch:
        """Block until every call of `ticket` is scored; each ticket's result can be taken once."""
        job = self._jobs.pop(ticket, None)
        if job is None:
            raise KeyError(f"no pending reward submission {ticket} (unknown, or its result was taken)")
        grid = [[_scored(self._pool.wait(t)) for t in row] for row in job.tickets]
        return self._tally.batch(grid, job.n)

    def close(self) -> None:
        """Stop the workers (idle ones exit, busy ones are killed) and wait for them; never hangs."""
        self._pool.close()


def _scored(reply: Reply) -> Scored:
    if reply.timed_out:
        return Scored(timed_out=True)
    if reply.failure is not None:
        return Scored(failure=reply.failure)
    return reply.message


def _imports(functions: Sequence[str]) -> list[str]:
    """Modules a worker imports first, so a name the trainer's process registered at import (a plugin's
    `@register`) is registered there too; a name registered by the script being run cannot be."""
    modules = []
    for ref in functions:
        fn = REWARDS[ref.strip()] if ref.strip() in REWARDS else None
        if fn is None:
            continue  # module:function or file.py:function, or unknown: the worker resolves and reports it
        module = getattr(fn, "__module__", None) or ""
        if module == "__main__":
            raise UserError(f"reward '{ref}' is registered by the script being run, which reward workers "
                            "cannot import; define it in a module or file and name it module:function or "
                            "file.py:function (or set reward.workers=0)")
        if module and module not in modules:
            modules.append(module)
    return modules
