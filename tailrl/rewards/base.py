"""`Reward`: score a batch of completions with weighted reward functions, never crashing the step.

Place in the flow: engine.generate -> **Reward.score** (or `RewardPool`, pool.py, with reward.workers > 0)
-> advantages. Each call is `fn(prompt, completion, **row)` under a per-call timeout (timeout.py),
in this process. A call that raises, returns something that is not a finite number, or overruns
scores 0 and is counted in the batch (`errors`, `timeouts`), so one bad completion or a buggy user
reward costs a zero, not the run. The first error of each function is logged once as a warning, so a
reward that always fails is seen (scoring.py holds this contract for both scorers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tailrl.errors import UserError
from tailrl.rewards.pool import RewardPool
from tailrl.rewards.scoring import RewardBatch, Scorer, Tally, settle
from tailrl.rewards.settings import check_settings, load_functions
from tailrl.rewards.timeout import TimedCaller

if TYPE_CHECKING:  # the config is only read here, so a worker process need not import it
    from tailrl.config import RewardConfig

__all__ = ["Reward", "RewardBatch", "build_reward"]


class Reward(Scorer):
    """Weighted sum of reward functions called in this process, one call at a time.

    `submit` only stores the batch: it is scored when `result` is asked for, so a trainer that submits
    each group as it finishes spends the same time as scoring them all after generation.
    """

    def __init__(self, functions: Sequence[str], weights: Sequence[float] = (), timeout_s: float = 10.0):
        functions, self.weights = check_settings(functions, weights, timeout_s)
        loaded = load_functions(functions)
        self.names = [f.name for f in loaded]
        self.functions = [f.fn for f in loaded]
        self._loaded = loaded
        self._caller = TimedCaller(timeout_s)
        self._tally = Tally(self.names, self.weights, timeout_s)
        self._pending: dict[int, tuple[list[str], list[str], list[dict]]] = {}
        self._next_ticket = 0

    def submit(self, prompts: list[str], completions: list[str], rows: list[dict]) -> int:
        self._check_aligned(prompts, completions, rows)
        ticket, self._next_ticket = self._next_ticket, self._next_ticket + 1
        self._pending[ticket] = (list(prompts), list(completions), list(rows))
        return ticket

    def result(self, ticket: int) -> RewardBatch:
        prompts, completions, rows = self._pending.pop(ticket)
        items = list(zip(prompts, completions, rows))
        call = self._caller.call
        grid = [[settle(call(f.fn, (p, c), f.keep(row))) for p, c, row in items] for f in self._loaded]
        return self._tally.batch(grid, len(completions))

    def close(self) -> None:
        self._caller.close()


def build_reward(cfg: RewardConfig) -> Scorer:
    """`RewardPool` (worker processes, streaming) when cfg.workers > 0, else the in-process `Reward`."""
    if cfg.workers < 0:
        raise UserError(f"reward.workers must be 0 (in-process) or a number of processes, got {cfg.workers}")
    if cfg.workers > 0:
        return RewardPool(cfg.functions, cfg.weights, cfg.timeout_s, workers=cfg.workers)
    return Reward(cfg.functions, cfg.weights, cfg.timeout_s)
