"""What is made of an engine's output, above the engine core: completion rows (`tailrl generate`'s JSONL,
completions.py) and the rollout timeline picture (timeline.py)."""
