"""How the engine speculates: `engine.spec.mode` -> a speculator (the engine calls .decode(engine,
ready) for every decode step, .release(seq), .metrics(), .reset_counters(), .end_rollout()).

    coupled     drafters and the exact check in the engine's own process (spec/speculator.py)
    decoupled   a draft model in its own process on its own cores, pipelined (spec/decoupled.py);
                window and cores from the TGS model (Alg. 1) unless engine.spec.window is set
    auto        the TGS model picks: decoupled when its planned throughput beats coupled and plain
                decoding at the engine's batch size (max_batch_size), else coupled (whose own
                measured gates still switch speculation off where it does not pay)
"""

from __future__ import annotations

import os

from tailrl.errors import UserError


def draft_path(cfg) -> str:
    """The draft model of a config (method draft:PATH, or engine.spec.draft_model)."""
    if cfg.method.startswith("draft:"):
        return cfg.method.split(":", 1)[1]
    return cfg.draft_model if cfg.method in ("draft", "auto") else ""


def _resources(cfg) -> tuple[int, int]:
    """(G, g_draft): the cores speculation may use, and the drafter's share."""
    n = len(os.sched_getaffinity(0))
    gd = max(1, cfg.draft_cores)
    gv = cfg.verify_cores or max(1, n - gd)
    return gd + gv, gd


def _costs(engine, cfg, path: str):
    """(drafts, verifies, acceptance) from engine.spec.profile, or a short profile now. Decoupled needs
    the costs of its drafting and verifying cores; auto also those of all cores (coupled and plain)."""
    from tailrl.engine.spec.profile_tgs import load_tgs_profile, profile_tgs

    G, gd = _resources(cfg)
    if cfg.profile:
        prof = load_tgs_profile(cfg.profile)
    else:
        # the decoupled split's D and V come from its own runtime profile; kernels only for all G cores
        # (coupled and plain, which auto compares against)
        prof = profile_tgs(engine.model, path, [G] if cfg.mode == "auto" else [], batches=(1, 8, 32),
                           windows=(1, 2, 4), reps=2, block_size=engine.config.block_size, decoupled=(gd, G - gd))
    need = {"drafts": {gd, G}, "verifies": {G - gd, G}} if cfg.mode == "auto" else {"drafts": {gd}, "verifies": {G - gd}}
    missing = [f"{k} for {g} core(s)" for k, gs in need.items() for g in sorted(gs) if g not in prof[k]]
    if missing:
        raise UserError(f"the TGS profile {cfg.profile} has no {', '.join(missing)} (profiled: drafts "
                        f"{sorted(prof['drafts'])}, verifies {sorted(prof['verifies'])}); re-run `tailrl profile spec` "
                        f"with --threads {G} --draft-cores {gd} --verify-cores {G - gd}")
    p = cfg.acceptance or prof.get("acceptance") or cfg.alpha_prior
    return prof["drafts"], prof["verifies"], p


def _coupled(engine, cfg):
    from tailrl.engine.spec.speculator import Speculator

    return Speculator(engine, cfg)


def _decoupled(engine, cfg, plans=None):
    from tailrl.engine.spec.decoupled import DecoupledSpeculator
    from tailrl.engine.spec.tgs import Plan, plan_decoupled

    path = draft_path(cfg)
    if not path:
        raise UserError("decoupled speculation drafts with a draft model: set --spec draft:PATH "
                        "(engine.spec.method=draft:PATH) or engine.spec.draft_model")
    G, gd = _resources(cfg)
    B = engine.config.max_batch_size
    if plans is None and cfg.window > 0:
        plan, D, V, p = Plan("decoupled", gd, G - gd, cfg.window, B, 1, 0.0, 0.0), None, None, cfg.alpha_prior
    else:
        drafts, verifies, p = plans or _costs(engine, cfg, path)
        plan = plan_decoupled(B, G, [G - gd], {gd: drafts[gd]}, verifies, p, cfg.k_max)
        if plan is None:
            raise UserError(f"no decoupled plan with {gd} drafting and {G - gd} verifying core(s): the drafter may "
                            f"use at most as many cores as the verifier (SpecActor Alg. 1)")
        if cfg.window > 0:
            plan = Plan("decoupled", gd, G - gd, cfg.window, B, 1, 0.0, 0.0)
        D, V = drafts[gd], verifies[G - gd]
    return DecoupledSpeculator(engine, cfg, path, plan, D, V, p)


def _auto(engine, cfg):
    from tailrl.engine.spec.tgs import choose

    path = draft_path(cfg)
    if not path:
        return _coupled(engine, cfg)  # model-free drafters only: nothing to decouple
    G, gd = _resources(cfg)
    drafts, verifies, p = _costs(engine, cfg, path)
    best = choose(engine.config.max_batch_size, G, drafts, verifies, p, [G - gd], cfg.k_max)["best"]
    return _decoupled(engine, cfg, (drafts, verifies, p)) if best.mode == "decoupled" else _coupled(engine, cfg)


SPEC_MODES = {"coupled": _coupled, "decoupled": _decoupled, "auto": _auto}


def build_speculator(engine, cfg):
    if cfg.mode not in SPEC_MODES:
        raise UserError(f"unknown engine.spec.mode '{cfg.mode}'; valid: {', '.join(SPEC_MODES)}")
    return SPEC_MODES[cfg.mode](engine, cfg)
