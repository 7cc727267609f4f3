"""tailrl: synchronous, strictly on-policy RL post-training built to beat the long-tail rollout problem."""

__version__ = "0.1.0"
