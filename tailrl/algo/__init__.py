"""RL math as pure tensor functions: advantages, policy losses with explicit aggregation, KL estimators,
rollout correction, logprobs."""

from tailrl.algo.advantages import ADVANTAGES
from tailrl.algo.kl import KL_ESTIMATORS
from tailrl.algo.losses import AGGREGATIONS, AggNorm, aggregate, policy_loss
from tailrl.algo.policy_losses import POLICY_LOSSES
from tailrl.algo.rollout_correction import ROLLOUT_CORRECTIONS

__all__ = ["ADVANTAGES", "AGGREGATIONS", "KL_ESTIMATORS", "POLICY_LOSSES", "ROLLOUT_CORRECTIONS", "AggNorm",
           "aggregate", "policy_loss"]
