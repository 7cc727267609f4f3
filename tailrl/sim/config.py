"""`tailrl simulate` configuration: frozen sections, loaded like the training config (YAML + dotted
overrides; unknown keys name the valid ones). `compare` names variants of the base config, each a
list of dotted overrides; the first variant is the baseline of the speed-up table. Concepts shared with
training carry the training config's names (max_new_tokens, rollout_batch_size, straggler_tau, k_max)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tailrl.config.fields import opt
from tailrl.tail import DEFAULT_TAU


@dataclass(frozen=True)
class ClusterConfig:
    gpu: str = opt("h100", "h100 | h200 | a40 (tailrl.perf.hardware.GPUS)")
    num_gpus: int = opt(8, "GPUs in the cluster")
    node_gpus: int = opt(0, "GPUs per node (0: the GPU preset's, capped at num_gpus); TP stays inside a node")
    tp: int = opt(1, "rollout TP degree (DP = num_gpus / tp)")


@dataclass(frozen=True)
class LatencyConfig:
    profile: str = opt("", "JSON from `tailrl profile engine` (measured); empty: analytic roofline")
    # roofline efficiencies; unset: the GPU preset's calibrated values (tailrl.perf.latency.CALIBRATED)
    hbm_eff: float | None = opt(None, "fraction of HBM peak reached by weight / KV reads")
    mfu: float | None = opt(None, "fraction of tensor peak reached by forward matmuls")
    link_eff: float | None = opt(None, "fraction of link bandwidth reached by all-reduce / KV migration")
    ar_base_us: float | None = opt(None, "all-reduce latency per call (TP > 1)")
    ar_hop_us: float | None = opt(None, "extra all-reduce latency per ring hop")
    step_ms: float | None = opt(None, "fixed cost per forward (scheduling, sampling, launches)")


@dataclass(frozen=True)
class WorkloadConfig:
    trace: str = opt("", "a tailrl run folder or traces.jsonl to replay; empty: synthetic lengths")
    steps: int = opt(3, "synthetic: RL steps (rounds) to simulate")
    prompts: int = opt(128, "synthetic: prompts per step (P)")
    group_size: int = opt(1, "synthetic: responses per prompt (G); with control.kind sagc, the starting G")
    prompt_len: int = opt(256, "synthetic: prompt tokens")
    max_new_tokens: int = opt(8192, "response cap")
    median: float = opt(1024.0, "lognormal median of response length (unless tail is given)")
    sigma: float = opt(0.8, "lognormal sigma of log length (prompt + sample effects)")
    sigma_within: float = opt(0.3, "spread of log length among one prompt's samples (SAGC's stragglers)")
    tail: tuple[float, ...] = opt((), "[l1, p1, l2, p2]: P(L > l1) = p1, P(L > l2) = p2 (fixes median, sigma)")
    mean_len: float = opt(0.0, "> 0: rescale to this mean response length (capped), shape kept")
    force_max: bool = opt(False, "one response per step reaches max_new_tokens (PAT measures such steps)")


@dataclass(frozen=True)
class EngineSimConfig:
    max_batch_size: int = opt(256, "per replica")
    max_prefill_tokens: int = opt(16384, "tokens per prefill forward")
    chunk: int = opt(32, "decode steps simulated per event at most")


@dataclass(frozen=True)
class PatSimConfig:
    enabled: bool = opt(False, "PAT: switch TP/DP during generation")
    tp_options: tuple[int, ...] = opt((1, 2, 4, 8), "TP degrees PAT may switch to")
    interval_s: float = opt(2.0, "controller period")
    kv: str = opt("auto", "auto | migrate | recompute")
    group_init_s: float = opt(1.0, "first use of a TP degree (communicator creation); pooled afterwards")
    recapture_s: float = opt(0.7, "CUDA graph recapture after a switch (PAT §5.4: 0.73 s)")


@dataclass(frozen=True)
class SpecSimConfig:
    mode: str = opt("none", "none | coupled | decoupled")
    draft_model: str = opt("qwen2.5-0.5b", "a preset / config.json, or \"ngram\" (no draft cost)")
    draft_gpus: int = opt(1, "decoupled: GPUs per replica given to its drafter")
    acceptance: float = opt(0.6, "mean per-token acceptance of the drafter")
    acceptance_kappa: float = opt(20.0, "Beta concentration of per-request acceptance")
    k_max: int = opt(8, "longest draft window")
    best_of_n: int = opt(1, "> 1: freed replicas draft extra paths for the remaining requests")


@dataclass(frozen=True)
class TrainSimConfig:
    """Non-generation time of a step: prepare (old/ref log-probs: forwards over every response) and
    update (forward + backward over the trained responses), both at `mfu` of the cluster's peak."""

    mfu: float = opt(0.35, "fraction of the cluster's peak the training forward/backward reaches")
    prepare_passes: int = opt(2, "forward passes over the generated tokens (old policy, reference)")
    fixed_s: float = opt(0.0, "per step: weight sync, resharding, rewards, ...")
    pods_m: int = opt(0, "> 0: train on m of each group's responses (PODS), update cost scales with m / G")


@dataclass(frozen=True)
class ControlSimConfig:
    kind: str = opt("static", "static | sagc (the trainer's controllers, fed simulated lengths)")
    candidates: tuple[int, ...] = opt((4, 8, 16), "SAGC: group sizes it may choose")
    rollout_batch_size: int = opt(0, "B = P * G kept fixed (0: prompts * group_size)")
    delta: float = opt(0.1, "SAGC: target straggler rate")
    straggler_tau: float = opt(DEFAULT_TAU, "straggler event: a group's longest response > tau x its median")


@dataclass(frozen=True)
class SimConfig:
    model: str = opt("llama3.1-8b", "preset (tailrl.perf.hardware.MODELS) or an HF config.json folder")
    cluster: ClusterConfig = opt(factory=ClusterConfig, help="the modelled cluster")
    latency: LatencyConfig = opt(factory=LatencyConfig, help="forward latency: roofline or a measured profile")
    workload: WorkloadConfig = opt(factory=WorkloadConfig, help="response lengths: synthetic or a replayed trace")
    engine: EngineSimConfig = opt(factory=EngineSimConfig, help="the simulated engine")
    pat: PatSimConfig = opt(factory=PatSimConfig, help="PAT: adaptive tensor parallelism")
    spec: SpecSimConfig = opt(factory=SpecSimConfig, help="speculative rollout")
    train: TrainSimConfig = opt(factory=TrainSimConfig, help="non-generation time of a step")
    control: ControlSimConfig = opt(factory=ControlSimConfig, help="group-size control")
    compare: dict = opt(factory=dict, help="variant name -> list of dotted overrides")
    seed: int = opt(0, "random seed of the synthetic workload")

    # keys renamed to the training config's names for the same concepts: a user's old key gets the new name
    moved_keys: ClassVar[dict] = {"workload.max_len": "workload.max_new_tokens", "control.tau": "control.straggler_tau",
                                  "control.rollout_batch": "control.rollout_batch_size", "spec.w_max": "spec.k_max"}
