"""engine.spec.mode -> a speculative DecodeStrategy (engine/strategy.py), by the SPEC_MODES registry
(build.py builds the engine with it; method none is PlainDecode there):

    coupled       drafters and the exact check in the engine's own process (coupled/speculator.py)
    decoupled     a draft model in its own process on its own cores, pipelined (decoupled/speculator.py);
                  window and cores from the TGS model (Alg. 1) unless engine.spec.decoupled.window is set
    auto          the TGS model picks: decoupled when its planned throughput beats coupled and plain
                  decoding at the engine's batch size (max_batch_size), else coupled (whose own
                  measured gates still switch speculation off where it does not pay)
"""

from __future__ import annotations

from typing import Protocol

from tailrl.engine.strategy import DecodeStrategy
from tailrl.errors import UserError
from tailrl.registry import Registry
from tailrl.speculative.coupled.speculator import Speculator
from tailrl.speculative.decoupled.speculator import DecoupledSpeculator, fixed_plan, spec_cores
from tailrl.speculative.decoupled.tgs import choose, load_tgs_profile, plan_decoupled
from tailrl.speculative.profiling.tgs import profile_tgs


class ModeFactory(Protocol):
    def __call__(self, engine, cfg) -> DecodeStrategy: ...


SPEC_MODES: Registry[ModeFactory] = Registry("engine.spec.mode")


def _costs(engine, cfg):
    """(drafts, verifies, acceptance) from engine.spec.decoupled.profile, or a short profile now. Decoupled
    needs the costs of its drafting and verifying cores; auto also those of all cores (coupled and plain)."""
    G, gd = spec_cores(cfg)
    dc = cfg.decoupled
    if dc.profile:
        prof = load_tgs_profile(dc.profile)
    else:
        # the decoupled split's D and V come from its own runtime profile; kernels only for all G cores
        # (coupled and plain, which auto compares against)
        prof = profile_tgs(engine.model, cfg.draft_model, [G] if cfg.mode == "auto" else [], batches=(1, 8, 32),
                           windows=(1, 2, 4), reps=2, block_size=engine.config.block_size, decoupled=(gd, G - gd))
    need = {"drafts": {gd, G}, "verifies": {G - gd, G}} if cfg.mode == "auto" else {"drafts": {gd}, "verifies": {G - gd}}
    missing = [f"{k} for {g} core(s)" for k, gs in need.items() for g in sorted(gs) if g not in prof[k]]
    if missing:
        raise UserError(f"the TGS profile {dc.profile} has no {', '.join(missing)} (profiled: drafts "
                        f"{sorted(prof['drafts'])}, verifies {sorted(prof['verifies'])}); re-run `tailrl profile spec` "
                        f"with --threads {G} --draft-cores {gd} --verify-cores {G - gd}")
    p = dc.acceptance or prof.get("acceptance") or cfg.alpha_prior
    return prof["drafts"], prof["verifies"], p


@SPEC_MODES.register("coupled")
def _coupled(engine, cfg) -> DecodeStrategy:
    return Speculator(engine, cfg)


@SPEC_MODES.register("decoupled")
def _decoupled(engine, cfg, plans=None) -> DecodeStrategy:
    if not cfg.draft_model:
        raise UserError("decoupled speculation drafts with a draft model: set --spec draft:PATH "
                        "(engine.spec.method=draft:PATH) or engine.spec.draft_model")
    G, gd = spec_cores(cfg)
    B = engine.config.max_batch_size
    w = cfg.decoupled.window
    fixed = fixed_plan(cfg, B)
    if plans is None and w > 0:
        return DecoupledSpeculator(engine, cfg, fixed, None, None, cfg.alpha_prior)
    drafts, verifies, p = plans or _costs(engine, cfg)
    plan = plan_decoupled(B, G, [G - gd], {gd: drafts[gd]}, verifies, p, cfg.k_max)
    if plan is None:
        raise UserError(f"no decoupled plan with {gd} drafting and {G - gd} verifying core(s): the drafter may "
                        f"use at most as many cores as the verifier (SpecActor Alg. 1)")
    return DecoupledSpeculator(engine, cfg, fixed if w > 0 else plan, drafts[gd], verifies[G - gd], p)


@SPEC_MODES.register("auto")
def _auto(engine, cfg) -> DecodeStrategy:
    if not cfg.draft_model:
        return _coupled(engine, cfg)  # model-free drafters only: nothing to decouple
    G, gd = spec_cores(cfg)
    drafts, verifies, p = _costs(engine, cfg)
    best = choose(engine.config.max_batch_size, G, drafts, verifies, p, [G - gd], cfg.k_max)["best"]
    return _decoupled(engine, cfg, (drafts, verifies, p)) if best.mode == "decoupled" else _coupled(engine, cfg)
