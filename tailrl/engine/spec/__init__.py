"""Speculative rollout with exact keyed verification (SpecActor §3-4).

Files: tree.py (token trees, accept rule), ngram_index.py, drafters.py (ngram, history), draft_model.py,
window.py (per-request windows), cost.py (forward-cost model), ladder.py (draft ladder),
speculator.py + step.py (coupled: planning, statistics, the verify forward in the engine),
modes.py (engine.spec.mode -> speculator), decoupled.py + draft_worker.py + stream.py (decoupled: the
verifier side, the drafter process, the draft stream both sides reconcile), tgs.py (the TGS model,
Alg. 1 and 2), profile_tgs.py (`tailrl profile spec`), profile.py (`tailrl profile ladder`).
"""
