"""Run configuration: frozen dataclasses per section, loaded from YAML with dotted overrides.

    cfg = load_config("run.yaml", ["engine.max_batch_size=32", "rollout.temperature=0.7"])

Unknown keys and wrong types raise UserError naming the valid keys. Sections grow as subsystems land;
each subsystem reads only its own section (the model never sees a config object beyond ModelConfig).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tailrl.errors import UserError


@dataclass(frozen=True)
class ModelConfig:
    path: str = ""  # local HF folder, a .gguf file, or a known name (see tailrl.model.hub)
    dtype: str = "float32"  # float32 | bfloat16 | float16
    device: str = "cpu"


@dataclass(frozen=True)
class SpecConfig:
    """Speculative rollout (tailrl/engine/spec). Verification is exact: tokens never change."""

    method: str = "none"  # none | ngram | history | draft | auto (history + ngram [+ draft when draft_model is set])
    draft_model: str = ""  # draft model folder (same tokenizer) for method draft / auto
    k_max: int = 8  # longest draft window per request
    ngram_min: int = 2  # n-gram drafters: shortest suffix matched
    ngram_max: int = 6  # n-gram drafters: longest suffix matched
    history_per_prompt: int = 32  # history drafter: earlier rollouts kept per prompt
    alpha_prior: float = 0.5  # acceptance assumed before any observation
    best_of_n: bool = True  # extra drafters for the lowest-acceptance requests when the batch has shrunk
    bon_spare: float = 0.5  # BoN only while the verify forward stays within (1 + bon_spare) x its fixed cost
    ladder: str = ""  # draft-ladder JSON from `tailrl profile ladder` (default: analytic from the cost model)
    draft_kv_tokens: int = 65536  # KV capacity of the draft model
    mode: str = "coupled"  # coupled | decoupled (draft model in its own process, SpecActor §4.1) | auto (TGS model)
    window: int = 0  # decoupled draft window w (0: planned by the TGS model from `profile`, Alg. 1)
    draft_cores: int = 1  # decoupled: cores (threads) of the drafter process
    verify_cores: int = 0  # decoupled: cores of the verifier (0: the rest of this process's cores)
    draft_device: str = ""  # decoupled: the drafter's device (default: the policy's)
    profile: str = ""  # TGS profile JSON from `tailrl profile spec` (default: a short profile at start)
    acceptance: float = 0.0  # per-token acceptance the plan assumes (0: the profile's, else alpha_prior)
    gate: bool = True  # fall back to plain decode steps where speculation is predicted / measured slower
    # (false: always speculate — k_max windows coupled, the planned window decoupled; a benchmark baseline)
    reconfigure_every: int = 16  # decoupled: rounds between re-plans (the batch window, Alg. 2 per request)


@dataclass(frozen=True)
class EngineConfig:
    max_batch_size: int = 256  # most sequences decoded together
    kv_cache_tokens: int = 262144  # KV capacity in tokens; beyond it requests are preempted (recompute)
    block_size: int = 16  # tokens per KV block
    max_model_len: int = 0  # context limit (prompt + completion); 0 = the model's max positions
    max_prefill_tokens: int = 8192  # tokens per prefill forward (admission budget)
    sampler: str = "inverse_cdf"  # keyed sampler: inverse_cdf | gumbel (see engine/keyed.py)
    spec: SpecConfig = field(default_factory=SpecConfig)


@dataclass(frozen=True)
class RolloutConfig:
    group_size: int = 8  # samples per prompt (G)
    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    seed: int = 0
    stop: tuple[str, ...] = ()  # stop strings (EOS ids always stop unless ignore_eos)
    ignore_eos: bool = False
    straggler_tau: float = 1.25  # straggler event: group max length / median length > tau


@dataclass(frozen=True)
class DataConfig:
    source: str = ""  # .jsonl / .json / .parquet file, a local HF `datasets` folder, or reasoning_gym:<task>
    format: str = "auto"  # auto | jsonl | json | parquet | hf_disk | gsm8k | math500 | dapo_math | reasoning_gym
    prompt_field: str = "prompt"  # field holding the question text (format-specific readers know theirs)
    messages_field: str = "messages"  # field holding chat turns, used instead of prompt_field when present
    answer_field: str = "answer"  # ground truth handed to rewards as `answer`
    prompt_template: str = "{prompt}"  # user turn text; {prompt} is the question
    system_prompt: str = ""  # optional system turn
    chat_template: bool = True  # apply the tokenizer's chat template (else plain text)
    on_bad_row: str = "skip"  # skip (and count) | fail
    limit: int = 0  # keep the first N rows (0 = all)
    reasoning_gym_size: int = 1000  # rows generated for a reasoning_gym:<task> source
    reasoning_gym_args: dict = field(default_factory=dict)  # the task's own options (e.g. max_terms: 2)
    seed: int = 0  # shuffling / generation seed
    shuffle: bool = True
    eval_source: str = ""  # held-out set for `tailrl eval` and periodic eval (same fields/format)


@dataclass(frozen=True)
class RewardConfig:
    functions: tuple[str, ...] = ("math",)  # registry names (math | gsm8k | boxed | format | ...) or module:function
    weights: tuple[float, ...] = ()  # one per function (default 1.0 each)
    timeout_s: float = 10.0  # per call; a timeout scores 0 and is counted
    workers: int = 0  # reward processes scoring each group as it finishes (0: in-process threads, one call at a time)


@dataclass(frozen=True)
class DownsampleConfig:
    """PODS: generate n rollouts per prompt, train on m of them (tailrl.algo.downsample.DOWNSAMPLE)."""

    rule: str = "none"  # none | max_variance | max_reward | random
    n: int = 0  # rollouts generated per prompt; 0 = the group size G (must equal G when set)
    m: int = 0  # rollouts trained per prompt; 0 = n / ratio
    ratio: float = 0.0  # n / m when m is 0 (e.g. 4: train on a quarter); follows G under SAGC


@dataclass(frozen=True)
class AlgoConfig:
    """`name` picks a preset (ALGORITHM_PRESETS); any field left unset (None) takes the preset's value."""

    name: str = "grpo"  # grpo | drgrpo | dapo
    advantage: str | None = None  # grpo | drgrpo (tailrl.algo.ADVANTAGES)
    loss_agg: str | None = None  # token-mean | seq-mean-token-mean | seq-mean-token-sum-norm
    eps_low: float | None = None  # PPO clip range below 1
    eps_high: float | None = None  # above 1 (DAPO clip-higher: 0.28)
    kl_coef: float = 0.0  # beta of the k3 KL to a frozen reference (0 = no reference model)
    ppo_epochs: int = 1  # mu: update epochs per rollout batch (ratio vs old logprobs of the training forward)
    dynamic_sampling: bool | None = None  # DAPO: drop zero-reward-std groups and refill with new prompts
    max_refill_rounds: int = 3  # cap on DAPO refill generations per step
    overlong_buffer: int | None = None  # DAPO soft overlong penalty: last N tokens of the budget (0 = off)
    overlong_penalty: float = 1.0  # penalty at the budget (linear ramp over the buffer)
    downsample: DownsampleConfig = field(default_factory=DownsampleConfig)


ALGORITHM_PRESETS: dict[str, dict] = {
    "grpo": dict(advantage="grpo", loss_agg="seq-mean-token-mean", eps_low=0.2, eps_high=0.2,
                 dynamic_sampling=False, overlong_buffer=0),
    "drgrpo": dict(advantage="drgrpo", loss_agg="seq-mean-token-sum-norm", eps_low=0.2, eps_high=0.2,
                   dynamic_sampling=False, overlong_buffer=0),
    "dapo": dict(advantage="grpo", loss_agg="token-mean", eps_low=0.2, eps_high=0.28, dynamic_sampling=True,
                 overlong_buffer=-1),  # -1: a quarter of max_new_tokens
}


@dataclass(frozen=True)
class TrainConfig:
    total_steps: int = 10
    time_budget_s: float = 0.0  # also stop once the steps' own time (excluding evals) exceeds this (0 = off)
    prompt_budget: int = 0  # also stop once this many prompts have been drawn (SAGC's fixed prompt budget; 0 = off)
    rollout_batch_size: int = 64  # B rollouts per step = P prompts x G samples (G from the controller)
    micro_batch_size: int = 8  # sequences per training forward/backward (at most)
    # padded tokens per training forward/backward (0 = off): rows sorted by length and packed so that rows x
    # longest row <= this, as veRL's use_dynamic_bsz / ppo_max_token_len_per_gpu; a long tail then stops
    # padding the whole batch to its longest rollout
    micro_batch_tokens: int = 0
    lr: float = 1e-6
    weight_decay: float = 0.0
    adam_betas: tuple[float, ...] = (0.9, 0.999)
    warmup_steps: int = 0
    max_grad_norm: float = 1.0
    seed: int = 0
    out_dir: str = "runs"
    run_name: str = ""  # default: <time>
    save_every: int = 0  # checkpoint every N steps (0: only at the end)
    keep_checkpoints: int = 2
    eval_every: int = 0  # evaluate on data.eval_source every N steps (0: off)
    eval_prompts: int = 64
    tensorboard: bool = True
    wandb: bool = False
    wandb_project: str = "tailrl"


@dataclass(frozen=True)
class ControlConfig:
    """Group-size controller (tailrl.control). SAGC settings are ignored by the static controller."""

    kind: str = "static"  # static | sagc
    candidates: tuple[int, ...] = (4, 8, 16)  # SAGC: group sizes it may choose (each must divide B)
    delta: float = 0.1  # SAGC: target straggler rate
    eta: float = 0.5  # SAGC: dual ascent step size
    gamma: float = 0.98  # SAGC: forgetting factor of the discounted Beta posteriors
    lambda_max: float = 10.0  # SAGC: dual variable cap
    seed: int = 0  # SAGC: Thompson sampling seed


@dataclass(frozen=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    data: DataConfig = field(default_factory=DataConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    control: ControlConfig = field(default_factory=ControlConfig)


def _valid_keys(cls) -> str:
    return ", ".join(f.name for f in dataclasses.fields(cls))


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check/convert one YAML value against a dataclass field type."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise UserError(f"{where}: expected a mapping with keys {_valid_keys(tp)}, got {value!r}")
        return _build(tp, value, where)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], where)
    if origin is tuple:
        (inner, *_rest) = typing.get_args(tp)
        if isinstance(value, (str, int, float)):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise UserError(f"{where}: expected a list, got {value!r}")
        return tuple(_coerce(v, inner, f"{where}[]") for v in value)
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            raise UserError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise UserError(f"{where}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads "1e-6" (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise UserError(f"{where}: expected a string, got {value!r}")
        return str(value)
    return value


def _build(cls, data: dict, where: str = ""):
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            loc = f"{where}.{key}" if where else key
            raise UserError(f"unknown config key '{loc}'; valid keys{' in ' + where if where else ''}: {_valid_keys(cls)}")
    kwargs = {}
    for key, value in data.items():
        loc = f"{where}.{key}" if where else key
        kwargs[key] = _coerce(value, hints[key], loc)
    return cls(**kwargs)


def set_dotted(tree: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise UserError(f"override '{dotted}': '{p}' is not a section")
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """'a.b=3' -> ('a.b', 3); values are parsed as YAML scalars/lists."""
    if "=" not in text:
        raise UserError(f"override '{text}' must look like section.key=value")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def config_from_dict(data: dict, cls=Config):
    return _build(cls, data or {})


def load_config(path: str | Path | None = None, overrides: list[str] = (), cls=Config):
    """Load a YAML file (optional) and apply dotted overrides; returns a frozen config."""
    data: dict = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise UserError(f"config file not found: {p}")
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise UserError(f"config file {p} is not valid YAML: {str(e).splitlines()[0]}") from e
        if not isinstance(data, dict):
            raise UserError(f"config file {p} must be a mapping of sections")
    for ov in overrides:
        key, value = parse_override(ov)
        set_dotted(data, key, value)
    return config_from_dict(data, cls)


def with_overrides(cfg, overrides: list[str]):
    """A frozen config with dotted overrides applied (as on the command line)."""
    tree = to_dict(cfg)
    for ov in overrides:
        set_dotted(tree, *parse_override(ov))
    return config_from_dict(tree, type(cfg))


def to_dict(cfg) -> dict:
    def conv(x):
        if isinstance(x, tuple):
            return [conv(v) for v in x]
        return x

    return {k: (to_dict(v) if dataclasses.is_dataclass(v) else conv(v)) for k, v in dataclasses.asdict(cfg).items()}


def dump_config(cfg, path: str | Path) -> None:
    """Save the resolved config (what actually ran) as YAML."""
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
