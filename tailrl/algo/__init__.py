"""RL math as pure tensor functions: advantages, policy losses with explicit aggregation, logprobs."""

from tailrl.algo.advantages import ADVANTAGES
from tailrl.algo.losses import AGGREGATIONS, AggNorm, aggregate, policy_loss

__all__ = ["ADVANTAGES", "AGGREGATIONS", "AggNorm", "aggregate", "policy_loss"]
