"""Rewards: verifiable scores for completions (the `rewards(rollouts) -> scores` step of Trainer.step).

    reward = build_reward(cfg.reward)            # names from REWARDS, module:function, or file.py:function
    batch = reward.score(prompts, completions, rows)   # RewardBatch: scores, components, errors, timeouts

Built-ins: math (math-verify), gsm8k, boxed, format, think_format, demo_arith. Add one with `@register("name")`.
"""

from tailrl.rewards import demo as _demo  # noqa: F401  (registers the demo task's checker)
from tailrl.rewards import format as _format  # noqa: F401  (registers format rewards)
from tailrl.rewards import math as _math  # noqa: F401  (registers math rewards)
from tailrl.rewards.base import Reward, RewardBatch, build_reward
from tailrl.rewards.registry import REWARDS, RewardFn, register

__all__ = ["REWARDS", "Reward", "RewardBatch", "RewardFn", "build_reward", "register"]
