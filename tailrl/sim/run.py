"""Simulate RL steps from a SimConfig: build the latency model, the rounds (replayed or synthetic, or
drawn step by step under a group-size controller), run each round's generation, add the prepare and
update phases. Thin: the math lives in latency / generation / spec / pat / workload."""

from __future__ import annotations

import dataclasses
import random
import statistics
from dataclasses import dataclass, field

from tailrl.config import config_from_dict, parse_override, set_dotted, to_dict
from tailrl.control import build_controller
from tailrl.errors import UserError
from tailrl.perf.hardware import gpu as gpu_preset
from tailrl.perf.hardware import model_spec
from tailrl.perf.latency import CALIBRATED, EngineOverheads, Profiled, Roofline
from tailrl.perf.pat import PatPolicy
from tailrl.sim.config import SimConfig
from tailrl.sim.generation import GenerationSim, GenResult
from tailrl.sim.spec import ITERATION, SpecModel
from tailrl.sim.workload import Round, length_model, load_trace_rounds, synthetic_rounds
from tailrl.tail import straggler_rate


@dataclass
class StepResult:
    gen: GenResult
    prepare_s: float
    update_s: float
    fixed_s: float
    tokens: int
    group_size: int
    straggler_rate: float
    measured_gen_s: float | None = None
    refills: list[GenResult] = field(default_factory=list)  # further generation rounds of the step (refills)

    @property
    def gen_s(self) -> float:
        return self.gen.gen_s + sum(r.gen_s for r in self.refills)

    @property
    def step_s(self) -> float:
        return self.gen_s + self.prepare_s + self.update_s + self.fixed_s


@dataclass
class SimResult:
    name: str
    steps: list[StepResult] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        s = self.steps
        mean = lambda f: statistics.mean(f(x) for x in s) if s else 0.0  # noqa: E731
        out = {"timing_s/gen": mean(lambda x: x.gen_s), "timing_s/prepare": mean(lambda x: x.prepare_s),
               "timing_s/update": mean(lambda x: x.update_s + x.fixed_s), "timing_s/step": mean(lambda x: x.step_s),
               "perf/throughput": sum(x.tokens for x in s) / max(sum(x.step_s for x in s), 1e-12),
               "rollout/bubble_frac": mean(lambda x: x.gen.bubble_frac),
               "rollout/straggler_rate": mean(lambda x: x.straggler_rate),
               "rollout/group_size": mean(lambda x: x.group_size),
               "tp/switch_events": mean(lambda x: len(x.gen.switches)),
               "tp/switch_seconds": mean(lambda x: sum(sw["weights_s"] + sw["kv_s"] + sw["groups_s"] + sw["recapture_s"]
                                                       for sw in x.gen.switches))}
        if any(x.gen.spec_windows for x in s):
            out["spec/window_mean"] = statistics.mean(w for x in s for w in x.gen.spec_windows)
            out["spec/accept_rate"] = mean(lambda x: x.gen.accept_rate)
            out["spec/tail_accept_rate"] = mean(lambda x: x.gen.tail_accept_rate)
        measured = [(x.gen_s, x.measured_gen_s) for x in s if x.measured_gen_s]
        if measured:
            out["sim/measured_gen_s"] = statistics.mean(m for _, m in measured)
            out["sim/gen_error"] = sum(p for p, _ in measured) / sum(m for _, m in measured) - 1.0
        return out


def latency_model(cfg: SimConfig):
    if cfg.latency.profile:
        return Profiled.load(cfg.latency.profile)
    return Roofline(gpu_preset(cfg.cluster.gpu), model_spec(cfg.model), overheads(cfg))


def overheads(cfg: SimConfig) -> EngineOverheads:
    """The GPU preset's calibrated engine constants, with any latency.* the config sets."""
    base = CALIBRATED.get(cfg.cluster.gpu, EngineOverheads())
    given = {f.name: getattr(cfg.latency, f.name) for f in dataclasses.fields(EngineOverheads)
             if getattr(cfg.latency, f.name) is not None}
    return dataclasses.replace(base, **given)


def _node_gpus(cfg: SimConfig) -> int:
    c = cfg.cluster
    return min(c.node_gpus or gpu_preset(c.gpu).node_gpus, c.num_gpus)


def validate(cfg: SimConfig) -> None:
    c, n = cfg.cluster, _node_gpus(cfg)
    if c.num_gpus < 1 or c.tp < 1 or n % c.tp:
        raise UserError(f"cluster.tp={c.tp} must divide the GPUs per node ({n})")
    if c.num_gpus % n:
        raise UserError(f"cluster.num_gpus={c.num_gpus} must be whole nodes of {n} GPUs")
    if cfg.spec.mode == "decoupled" and c.tp + cfg.spec.draft_gpus > c.num_gpus:
        raise UserError(f"a decoupled replica needs tp + spec.draft_gpus = {c.tp + cfg.spec.draft_gpus} GPUs; "
                        f"the cluster has {c.num_gpus}")
    if cfg.spec.mode not in ("none", *ITERATION):
        raise UserError(f"spec.mode must be one of none, {', '.join(ITERATION)}; got '{cfg.spec.mode}'")
    if cfg.spec.mode == "decoupled" and cfg.pat.enabled:
        raise UserError("pat.enabled with spec.mode=decoupled is not modelled (drafter GPUs sit outside the TP groups)")
    if cfg.pat.kv not in ("auto", "migrate", "recompute"):
        raise UserError(f"pat.kv must be auto, migrate or recompute; got '{cfg.pat.kv}'")
    if not 0 <= cfg.spec.acceptance < 1:
        raise UserError(f"spec.acceptance must be in [0, 1), got {cfg.spec.acceptance}")


def _generation(cfg: SimConfig, lat, rnd: Round, seed: int, pat_pools: list[set]) -> GenResult:
    c, n = cfg.cluster, _node_gpus(cfg)
    spec = None
    if cfg.spec.mode != "none":
        draft = None if cfg.spec.draft_model == "ngram" else Roofline(gpu_preset(c.gpu), model_spec(cfg.spec.draft_model),
                                                                      overheads(cfg))
        draft_tp = cfg.spec.draft_gpus if cfg.spec.mode == "decoupled" else 1  # coupled: a replicated small drafter
        spec = SpecModel(cfg.spec.mode, lat, draft, cfg.spec.k_max, max(draft_tp, 1))
    pats = None
    if cfg.pat.enabled:
        nodes = max(c.num_gpus // n, 1)
        while len(pat_pools) < nodes:
            pat_pools.append({c.tp})
        pats = [PatPolicy.for_hardware(lat, model_spec(cfg.model), gpu_preset(c.gpu), overheads(cfg).link_eff,
                                       node_gpus=n, tp_options=cfg.pat.tp_options, max_len=cfg.workload.max_new_tokens,
                                       kv=cfg.pat.kv, group_init_s=cfg.pat.group_init_s,
                                       recapture_s=cfg.pat.recapture_s, pool=pat_pools[i])
                for i in range(nodes)]
    e = cfg.engine
    sim = GenerationSim(rnd.requests, lat, c.tp, c.num_gpus, n, e.max_batch_size, e.max_prefill_tokens, e.chunk, spec,
                        cfg.spec.draft_gpus if cfg.spec.mode == "decoupled" else 0, cfg.spec.acceptance,
                        cfg.spec.acceptance_kappa, cfg.spec.best_of_n, pats, cfg.pat.interval_s, seed)
    return sim.run()


def _train_phases(cfg: SimConfig, rnd: Round, group_size: int) -> tuple[float, float, int]:
    if cfg.latency.profile:  # a measured engine profile prices generation only (no GPU preset, no model preset)
        return 0.0, 0.0, sum(r.out_len for r in rnd.requests)
    g, m = gpu_preset(cfg.cluster.gpu), model_spec(cfg.model)
    tokens = sum(r.prompt_len + r.out_len for r in rnd.requests)
    flops = cfg.cluster.num_gpus * g.tflops * 1e12 * cfg.train.mfu
    prepare = cfg.train.prepare_passes * 2 * m.params * tokens / flops
    share = min(cfg.train.pods_m, group_size) / group_size if cfg.train.pods_m else 1.0
    update = 6 * m.params * tokens * share / flops
    return prepare, update, sum(r.out_len for r in rnd.requests)


def simulate(cfg: SimConfig, name: str = "base") -> SimResult:
    validate(cfg)
    lat = latency_model(cfg)
    result, pools = SimResult(name), []
    if cfg.workload.trace:
        rounds = _trace_steps(cfg.workload.trace)
    else:
        rounds = (([rnd], G) for rnd, G in _controlled_rounds(cfg))
    for i, (rnds, G) in enumerate(rounds):
        gens = [_generation(cfg, lat, rnd, cfg.seed + i, pools) for rnd in rnds]
        union = Round([q for rnd in rnds for q in rnd.requests])
        prepare, update, tokens = _train_phases(cfg, union, G)
        measured = sum(r.measured_s for r in rnds) if all(r.measured_s for r in rnds) else None
        result.steps.append(StepResult(gens[0], prepare, update, cfg.train.fixed_s, tokens, G,
                                       straggler_rate(union.groups(), cfg.control.straggler_tau), measured, gens[1:]))
    return result


def _trace_steps(path: str):
    """A run's rounds grouped by training step (a step's refill rounds belong to it), with G."""
    steps: dict = {}
    for rd in load_trace_rounds(path):
        steps.setdefault(rd.meta.get("step"), []).append(rd)
    for rnds in steps.values():
        yield rnds, max((len(g) for rd in rnds for g in rd.groups()), default=1)


def _controlled_rounds(cfg: SimConfig):
    """Synthetic rounds; under SAGC the controller picks G each step (P = B / G) and observes the
    simulated groups, exactly as the trainer drives it."""

    w, c = cfg.workload, cfg.control
    if c.kind == "static":
        for rnd in synthetic_rounds(w, cfg.seed):
            yield rnd, w.group_size
        return
    B = c.rollout_batch_size or w.prompts * w.group_size
    ctl = build_controller("sagc", group_size=w.group_size, candidates=c.candidates, tau=c.straggler_tau, delta=c.delta,
                           seed=cfg.seed)
    lm, rng = length_model(w), random.Random(cfg.seed)
    for step in range(w.steps):
        G = ctl.choose()
        if B % G:
            raise UserError(f"group size {G} does not divide control.rollout_batch_size {B}")
        rnd = lm.round(B // G, G, rng, step * B, w.force_max)
        yield rnd, G
        ctl.observe(rnd.groups())


def variants(cfg: SimConfig) -> list[tuple[str, SimConfig]]:
    """The base config alone, or one config per `compare` entry (overrides applied to the base)."""
    if not cfg.compare:
        return [("base", cfg)]
    out, base = [], to_dict(cfg)
    base.pop("compare")
    for name, overrides in cfg.compare.items():
        tree = to_dict(config_from_dict(base, SimConfig))
        if isinstance(overrides, str):
            overrides = [overrides]
        for ov in overrides or []:
            set_dotted(tree, *parse_override(ov))
        out.append((str(name), config_from_dict(tree, SimConfig)))
    return out
