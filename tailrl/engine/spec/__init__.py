"""Speculative rollout with exact keyed verification (SpecActor §3-4): decode strategies for the engine.

    modes.py       engine.spec (method, mode) -> the engine's DecodeStrategy
    tree.py        token trees and the accept rule (longest path equal to the target's keyed samples)
    cost.py        online forward-cost model, measured throughput gate;  window.py  per-request windows
    drafters/      the Drafter protocol and registry: ngram, history (lookup.py), draft model
    coupled/       drafting and the verify forward in the engine's process (speculator.py, verify.py),
                   the draft ladder (ladder.py)
    decoupled/     a drafter process drafting ahead of the verifier (speculator.py, worker.py), the draft
                   stream both sides reconcile (stream.py), the TGS model, Alg. 1 and 2 (tgs.py)
    profiling/     offline profiles: `tailrl profile ladder` (ladder.py), `tailrl profile spec` (tgs.py),
                   keyed acceptance of a draft model (acceptance.py)
"""
