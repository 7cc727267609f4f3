"""Drafters for speculative rollout (the protocol and registry in base.py; importing this package registers
the built-ins: ngram and history in lookup.py, the draft model in draft_model.py)."""

from tailrl.speculative.drafters import draft_model, lookup
from tailrl.speculative.drafters.base import DRAFTERS, Drafter, drafter_names


def spec_methods() -> tuple[str, ...]:
    """The valid engine.spec.method names: none, every registered drafter, auto, and draft:PATH (parsed into
    method=draft before the check; listed so the message shows it)."""
    return ("none", *DRAFTERS, "auto", "draft:PATH")


__all__ = ["DRAFTERS", "Drafter", "draft_model", "drafter_names", "lookup", "spec_methods"]
