"""Speculative rollout with exact keyed verification (SpecActor, coupled form on one device).

Files: tree.py (token trees, accept rule), ngram_index.py, drafters.py (ngram, history), draft_model.py,
window.py (per-request windows), cost.py (forward-cost model), ladder.py (draft ladder),
speculator.py (planning and statistics), step.py (the verify forward in the engine).
"""
