"""`tailrl simulate` configuration: frozen sections, loaded like the training config (YAML + dotted
overrides; unknown keys name the valid ones). `compare` names variants of the base config, each a
list of dotted overrides; the first variant is the baseline of the speed-up table."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ClusterConfig:
    gpu: str = "h100"  # h100 | h200 | a40 (tailrl.sim.hardware.GPUS)
    num_gpus: int = 8
    node_gpus: int = 0  # GPUs per node (0: the GPU preset's, capped at num_gpus); TP stays inside a node
    tp: int = 1  # rollout TP degree (DP = num_gpus / tp)


@dataclass(frozen=True)
class LatencyConfig:
    profile: str = ""  # JSON from `tailrl profile engine` (measured); empty: analytic roofline
    # roofline efficiencies; unset: the GPU preset's calibrated values (tailrl.sim.latency.CALIBRATED)
    hbm_eff: float | None = None  # fraction of HBM peak reached by weight / KV reads
    mfu: float | None = None  # fraction of tensor peak reached by forward matmuls
    link_eff: float | None = None  # fraction of link bandwidth reached by all-reduce / KV migration
    ar_base_us: float | None = None  # all-reduce latency per call (TP > 1)
    ar_hop_us: float | None = None  # extra all-reduce latency per ring hop
    step_ms: float | None = None  # fixed cost per forward (scheduling, sampling, launches)


@dataclass(frozen=True)
class WorkloadConfig:
    trace: str = ""  # a tailrl run folder or traces.jsonl to replay; empty: synthetic lengths
    steps: int = 3  # synthetic: RL steps (rounds) to simulate
    prompts: int = 128  # synthetic: prompts per step (P)
    group_size: int = 1  # synthetic: responses per prompt (G); with control.kind sagc, the starting G
    prompt_len: int = 256
    max_len: int = 8192  # response cap (max_new_tokens)
    median: float = 1024.0  # lognormal median of response length (unless tail is given)
    sigma: float = 0.8  # lognormal sigma of log length (prompt + sample effects)
    sigma_within: float = 0.3  # spread of log length among one prompt's samples (SAGC's stragglers)
    tail: tuple[float, ...] = ()  # [l1, p1, l2, p2]: P(L > l1) = p1, P(L > l2) = p2 (fixes median, sigma)
    mean_len: float = 0.0  # > 0: rescale to this mean response length (capped), shape kept
    force_max: bool = False  # one response per step reaches max_len (PAT measures such steps)


@dataclass(frozen=True)
class EngineSimConfig:
    max_batch_size: int = 256  # per replica
    max_prefill_tokens: int = 16384
    chunk: int = 32  # decode steps simulated per event at most


@dataclass(frozen=True)
class PatSimConfig:
    enabled: bool = False
    tp_options: tuple[int, ...] = (1, 2, 4, 8)
    interval_s: float = 2.0  # controller period
    kv: str = "auto"  # auto | migrate | recompute
    group_init_s: float = 1.0  # first use of a TP degree (communicator creation); pooled afterwards
    recapture_s: float = 0.7  # CUDA graph recapture after a switch (PAT §5.4: 0.73 s)


@dataclass(frozen=True)
class SpecSimConfig:
    mode: str = "none"  # none | coupled | decoupled
    draft_model: str = "qwen2.5-0.5b"  # a preset / config.json, or "ngram" (no draft cost)
    draft_gpus: int = 1  # decoupled: GPUs per replica given to its drafter
    acceptance: float = 0.6  # mean per-token acceptance of the drafter
    acceptance_kappa: float = 20.0  # Beta concentration of per-request acceptance
    w_max: int = 8
    best_of_n: int = 1  # > 1: freed replicas draft extra paths for the remaining requests


@dataclass(frozen=True)
class TrainSimConfig:
    """Non-generation time of a step: prepare (old/ref log-probs: forwards over every response) and
    update (forward + backward over the trained responses), both at `mfu` of the cluster's peak."""

    mfu: float = 0.35
    prepare_passes: int = 2  # forward passes over the generated tokens (old policy, reference)
    fixed_s: float = 0.0  # per step: weight sync, resharding, rewards, ...
    pods_m: int = 0  # > 0: train on m of each group's responses (PODS), update cost scales with m / G


@dataclass(frozen=True)
class ControlSimConfig:
    kind: str = "static"  # static | sagc (the trainer's controllers, fed simulated lengths)
    candidates: tuple[int, ...] = (4, 8, 16)
    rollout_batch: int = 0  # B = P * G kept fixed (0: prompts * group_size)
    delta: float = 0.1
    tau: float = 1.25


@dataclass(frozen=True)
class SimConfig:
    model: str = "llama3.1-8b"  # preset (tailrl.sim.hardware.MODELS) or an HF config.json folder
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    latency: LatencyConfig = field(default_factory=LatencyConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    engine: EngineSimConfig = field(default_factory=EngineSimConfig)
    pat: PatSimConfig = field(default_factory=PatSimConfig)
    spec: SpecSimConfig = field(default_factory=SpecSimConfig)
    train: TrainSimConfig = field(default_factory=TrainSimConfig)
    control: ControlSimConfig = field(default_factory=ControlSimConfig)
    compare: dict = field(default_factory=dict)  # variant name -> list of dotted overrides
    seed: int = 0
