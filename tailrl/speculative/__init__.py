"""Speculative rollout with exact keyed verification (SpecActor §3-4): decode strategies for the engine.

    build.py       build_engine: an Engine with the DecodeStrategy of its engine.spec (the engine itself
                   imports nothing from here)
    modes.py       engine.spec.mode -> the strategy's factory (SPEC_MODES), with the TGS model's plan
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

from tailrl.speculative.build import build_engine, build_strategy, eos_ids_of

__all__ = ["build_engine", "build_strategy", "eos_ids_of"]
