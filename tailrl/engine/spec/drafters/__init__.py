"""Drafters for speculative rollout (the protocol and registry in base.py; importing this package registers
the built-ins: ngram and history in lookup.py, the draft model in draft_model.py)."""

from tailrl.engine.spec.drafters import draft_model, lookup
from tailrl.engine.spec.drafters.base import DRAFTERS, Drafter, drafter_names

__all__ = ["DRAFTERS", "Drafter", "draft_model", "drafter_names", "lookup"]
