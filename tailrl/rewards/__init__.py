"""Rewards: verifiable scores for completions (the `rewards(rollouts) -> scores` step of Trainer.step).

    reward = build_reward(cfg.reward)            # names from REWARDS, module:function, or file.py:function
    batch = reward.score(prompts, completions, rows)   # RewardBatch: scores, components, errors, timeouts
    ticket = reward.submit(prompts, completions, rows); batch = reward.result(ticket)   # streaming form

`build_reward` gives the in-process `Reward` (reward.workers = 0) or a `RewardPool` of worker processes
that scores each submission while the caller goes on (pool.py); both are `Scorer`s. Close it when done.

Built-ins: math (math-verify), gsm8k, boxed, format, think_format, demo_arith. Add one with `@register("name")`.
"""

from tailrl.rewards import demo as _demo  # noqa: F401  (registers the demo task's checker)
from tailrl.rewards import format as _format  # noqa: F401  (registers format rewards)
from tailrl.rewards import math as _math  # noqa: F401  (registers math rewards)
from tailrl.rewards.base import Reward, RewardBatch, build_reward
from tailrl.rewards.pool import RewardPool
from tailrl.rewards.registry import REWARDS, RewardFn, register
from tailrl.rewards.scoring import Scorer

__all__ = ["REWARDS", "Reward", "RewardBatch", "RewardFn", "RewardPool", "Scorer", "build_reward", "register"]
