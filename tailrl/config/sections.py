"""The run configuration's sections: frozen dataclasses, one per subsystem, every key with a default and a
help string (`tailrl config show [SECTION]` prints them). Each subsystem reads only its own section; the
model never sees a config object beyond ModelConfig.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tailrl.config.fields import Section, opt
from tailrl.errors import UserError
from tailrl.tail import DEFAULT_TAU

# the linear layers LoRA may target, as PEFT users name them (tailrl.model.lora.LINEAR_NAMES)
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "all-linear")


@dataclass(frozen=True)
class LoraConfig(Section):
    """LoRA (tailrl/model/lora.py): the base frozen in model.dtype, adapters A, B in fp32 trained by AdamW; the
    engine and the trainer both run the merged weights W + (alpha / r) B A, merged again in place after every
    optimizer step, so rollout logprobs stay the trainer's. Checkpoints and `tailrl export` write PEFT adapters."""

    key = "model.lora"

    r: int = opt(0, "adapter rank (0: off, full fine-tuning; on as well when path is set)")
    alpha: float = opt(8.0, "scale numerator: the update is (alpha / r) B A (PEFT's lora_alpha, default 8)")
    dropout: float = opt(0.0, "must be 0: the engine decodes without dropout, so a dropout in the training forward "
                         "would make the trainer's logprobs differ from the rollout's")
    target_modules: tuple[str, ...] = opt(("q_proj", "v_proj"), "linear layers given adapters in every decoder "
                                          "layer, PEFT's names: q_proj | k_proj | v_proj | o_proj | gate_proj | "
                                          "up_proj | down_proj | all-linear (default: PEFT's for Llama / Qwen / "
                                          "Mistral)")
    init: str = opt("kaiming", "A's init: kaiming (PEFT's default, init_lora_weights=true: kaiming-uniform, a = "
                    "sqrt(5)) | gaussian (normal(0, 1/r)); B starts at zero either way", choices=("kaiming", "gaussian"))
    path: str = opt("", "a PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors) to continue "
                    "from; its r, lora_alpha and modules replace r, alpha and target_modules")

    def __post_init__(self):
        super().__post_init__()
        if self.r < 0:
            raise UserError(f"model.lora.r must be >= 0 (0: off), got {self.r}")
        if self.dropout != 0:
            raise UserError(f"model.lora.dropout must be 0, got {self.dropout}: the engine decodes without dropout, "
                            "so a training forward with it would no longer compute the rollout's logprobs")
        if not self.alpha > 0:
            raise UserError(f"model.lora.alpha must be > 0, got {self.alpha}")
        bad = [n for n in self.target_modules if n not in LORA_TARGETS] or ([] if self.target_modules else ["(none)"])
        if bad:  # a list of names, so checked here rather than as a choice key
            raise UserError(f"unknown model.lora.target_modules '{bad[0]}'; valid: {', '.join(LORA_TARGETS)}")


@dataclass(frozen=True)
class ModelConfig(Section):
    key = "model"

    path: str = opt("", "local Hugging Face folder, a .gguf file, or a known name (smollm2-135m-instruct)")
    dtype: str = opt("auto", "auto (bfloat16 on CUDA, float32 on the CPU) | float32 | bfloat16 | float16; with "
                     "bfloat16 training keeps fp32 master weights", choices=("auto", "float32", "bfloat16", "float16"))
    device: str = opt("auto", "auto (CUDA when available, else CPU) | cpu | cuda | cuda:N")
    lora: LoraConfig = opt(factory=LoraConfig, help="LoRA adapters (off while lora.r = 0 and no lora.path)")


@dataclass(frozen=True)
class CoupledSpecConfig(Section):
    """Coupled speculation: drafters run in the engine's process, one exact verify forward per step."""

    key = "engine.spec.coupled"

    ngram_min: int = opt(2, "n-gram drafters (ngram, history): shortest suffix matched")
    ngram_max: int = opt(6, "n-gram drafters: longest suffix matched")
    history_per_prompt: int = opt(32, "history drafter: earlier rollouts of a prompt kept as draft sources")
    best_of_n: bool = opt(True, "give the lowest-acceptance requests every drafter's proposal (a token tree) once "
                          "the batch has shrunk (torch attention only: trees verify on the dense path; off in "
                          "exact=strict)")
    bon_spare: float = opt(0.5, "Best-of-N only while the verify forward stays within (1 + bon_spare) x its "
                           "fixed cost")
    ladder: str = opt("", "draft-ladder JSON from `tailrl profile ladder` (empty: analytic, from the online "
                      "forward-cost model)")


@dataclass(frozen=True)
class DecoupledSpecConfig(Section):
    """Decoupled speculation (SpecActor §4.1): a draft model in its own process drafts ahead of the verifier."""

    key = "engine.spec.decoupled"

    window: int = opt(0, "draft window w (0: planned by the TGS model from `profile`, SpecActor Alg. 1)")
    draft_cores: int = opt(1, "cores (threads) of the drafter process")
    verify_cores: int = opt(0, "cores of the verifier (0: the rest of this process's cores)")
    draft_device: str = opt("", "the drafter's device (empty: the policy's)")
    profile: str = opt("", "TGS profile JSON from `tailrl profile spec` (empty: a short profile at start)")
    acceptance: float = opt(0.0, "per-token acceptance the plan assumes (0: the profile's, else alpha_prior)")
    reconfigure_every: int = opt(16, "rounds between re-plans (the batch window, and Alg. 2 per request)")


@dataclass(frozen=True)
class SpecConfig(Section):
    """Speculative rollout (tailrl/speculative). Verification is exact: a kept token is the keyed sample of the
    target's logits (identical tokens given the same logits; engine.exact=strict makes the logits bitwise equal)."""

    key = "engine.spec"

    method: str = opt("none", "none, a drafter, or auto (history + ngram [+ draft when draft_model is set]); "
                      "draft:PATH is short for method=draft, draft_model=PATH",
                      choices="tailrl.speculative.drafters:spec_methods")
    draft_model: str = opt("", "draft model folder (same tokenizer as the policy) for method draft / auto")
    mode: str = opt("coupled", "coupled | decoupled (draft model in its own process) | auto (the TGS model "
                    "picks at the engine's batch size)", choices="tailrl.speculative.modes:SPEC_MODES")
    k_max: int = opt(8, "longest draft window per request")
    alpha_prior: float = opt(0.5, "per-token acceptance assumed before any observation")
    gate: bool = opt(True, "fall back to plain decode steps where speculation is predicted or measured slower "
                     "(false: always speculate, a benchmark baseline)")
    draft_kv_tokens: int = opt(65536, "KV capacity of the draft model, in tokens")
    coupled: CoupledSpecConfig = opt(factory=CoupledSpecConfig, help="coupled mode's settings")
    decoupled: DecoupledSpecConfig = opt(factory=DecoupledSpecConfig, help="decoupled mode's settings")

    def __post_init__(self):
        # draft:PATH is parsed here, once: everything downstream sees method=draft and draft_model
        if self.method.startswith("draft:"):
            object.__setattr__(self, "draft_model", self.method.split(":", 1)[1])
            object.__setattr__(self, "method", "draft")
        super().__post_init__()


@dataclass(frozen=True)
class EngineConfig(Section):
    key = "engine"

    max_batch_size: int = opt(256, "most sequences decoded together")
    kv_cache_tokens: int = opt(262144, "KV capacity in tokens; beyond it requests are preempted (recomputed later)")
    block_size: int = opt(16, "tokens per KV block")
    max_model_len: int = opt(0, "context limit, prompt + completion (0: the model's max positions)")
    max_prefill_tokens: int = opt(8192, "tokens per prefill forward (admission budget)")
    sampler: str = opt("gumbel", "keyed sampler (tailrl/engine/sampling): gumbel (keyed Gumbel-max race: robust to "
                       "small logit differences between forwards) | blocked (inverse CDF in fp32 by blocks) | "
                       "inverse_cdf (float64 over the vocabulary)",
                       choices="tailrl.engine.sampling.keyed:SAMPLERS")
    exact: str = opt("fast", "fast (stock kernels: tokens may depend on batch composition where float reductions "
                     "do) | strict (batch-invariant kernels on every reduction of the token path, in the engine "
                     "and the trainer's logprob forward: rollout logprobs equal the trainer's bitwise; on a CPU "
                     "they run under the Triton interpreter) | canonical (CPU only: stock kernels called so that "
                     "no row depends on the batch — rollouts bitwise identical alone, batched, speculative or "
                     "preempted, at a per-query attention loop's cost; the trainer's forward as in fast)",
                     choices=("fast", "strict", "canonical"))
    attention: str = opt("auto", "auto (triton on CUDA when Triton is installed, else torch) | torch (dense gather "
                         "+ SDPA, the oracle) | triton (paged kernels, fused norm / rotary / SiLU*mul)",
                         choices=("auto", "torch", "triton"))
    static_decode: bool | None = opt(None, "decode steps on static per-bucket buffers with keyed sampling inside "
                                     "(needs attention=triton; unset: on with cuda_graphs)")
    cuda_graphs: bool | None = opt(None, "capture each bucket's static decode step as a CUDA graph and replay it "
                                   "(unset: on with CUDA and attention=triton)")
    gpu_memory_utilization: float = opt(0.9, "on CUDA, the share of the device's memory the KV pool may bring "
                                        "the process up to (the pool is sized from free memory, capped by "
                                        "kv_cache_tokens)")
    spec: SpecConfig = opt(factory=SpecConfig, help="speculative rollout")


@dataclass(frozen=True)
class RolloutConfig(Section):
    key = "rollout"

    group_size: int = opt(8, "samples per prompt (G); the first G of a SAGC run")
    max_new_tokens: int = opt(256, "completion budget per sample")
    temperature: float = opt(1.0, "sampling temperature (0: greedy)")
    top_p: float = opt(1.0, "nucleus sampling mass (1: off)")
    top_k: int = opt(0, "top-k sampling (0: off)")
    seed: int = opt(0, "sampling seed: every token is keyed by (seed, prompt uid, sample index, position)")
    stop: tuple[str, ...] = opt((), "stop strings (EOS ids always stop unless ignore_eos)")
    ignore_eos: bool = opt(False, "keep generating past EOS (up to max_new_tokens)")
    straggler_tau: float = opt(DEFAULT_TAU, "straggler event: a group's longest response > tau x its median "
                               "(SAGC's definition)")
    tools: tuple[str, ...] = opt((), "multi-turn tool use: tools the model may call — built-in names (calculator | "
                                 "python) or file.py:function / module:function (typed, with a docstring: "
                                 "TRL's tools contract); their schemas go to the chat template")
    environment: str = opt("", "file.py:Class or module:Class: one instance per rollout (TRL's environment_factory: "
                           "reset(**row) text appended to the prompt, public methods are tools, get_reward() "
                           "added to the score as reward component `env`)")
    tool_parser: str = opt("hermes", "how tool calls are written in the model's turns",
                           choices="tailrl.tools.parsers:TOOL_PARSERS")
    max_turns: int = opt(4, "tool observations a rollout receives at most (the turn after the last finishes it)")
    tool_workers: int = opt(2, "processes running tool calls while decoding continues")
    tool_timeout_s: float = opt(10.0, "per tool call; a timeout is an error observation the model reads, counted")


@dataclass(frozen=True)
class DataConfig(Section):
    key = "data"

    source: str = opt("", ".jsonl / .json / .parquet file, a local HF `datasets` folder, or reasoning_gym:<task>")
    format: str = opt("auto", "the file format, or a known dataset's reader (auto: from the source)",
                      choices="tailrl.data.datasets:FORMATS")
    prompt_field: str = opt("prompt", "field holding the question text (format-specific readers know theirs)")
    messages_field: str = opt("messages", "field holding chat turns, used instead of prompt_field when present")
    answer_field: str = opt("answer", "ground truth handed to rewards as `answer`")
    prompt_template: str = opt("{prompt}", "user turn text; {prompt} is the question")
    system_prompt: str = opt("", "optional system turn")
    chat_template: bool = opt(True, "apply the tokenizer's chat template (false: plain text)")
    on_bad_row: str = opt("skip", "skip (and count) | fail", choices=("skip", "fail"))
    limit: int = opt(0, "keep the first N rows (0: all)")
    reasoning_gym_size: int = opt(1000, "rows generated for a reasoning_gym:<task> source")
    reasoning_gym_args: dict = opt(factory=dict, help="the reasoning-gym task's own options (e.g. max_terms: 2)")
    seed: int = opt(0, "shuffling / generation seed")
    shuffle: bool = opt(True, "shuffle the prompts each epoch")
    eval_source: str = opt("", "held-out set for `tailrl eval` and periodic evaluation (same fields and format; "
                           "a reasoning_gym:<task> is generated from another seed than the training rows)")


@dataclass(frozen=True)
class RewardConfig(Section):
    key = "reward"

    functions: tuple[str, ...] = opt(("math",), "registry names (math | gsm8k | boxed | format | think_format | "
                                     "demo_arith) or module:function / file.py:function")
    weights: tuple[float, ...] = opt((), "one weight per function (default 1.0 each)")
    timeout_s: float = opt(10.0, "per call; a timeout scores 0 and is counted")
    workers: int = opt(0, "reward processes scoring each group as it finishes (0: in-process, one call at a time)")


@dataclass(frozen=True)
class DownsampleConfig(Section):
    """PODS: generate n rollouts per prompt, train on m of them (tailrl.algo.downsample.DOWNSAMPLE)."""

    key = "algo.downsample"

    rule: str = opt("none", "which m of the n rollouts are trained (none: all)",
                    choices="tailrl.algo.downsample:rule_choices")
    n: int = opt(0, "rollouts generated per prompt; 0 = the group size G (must equal G when set)")
    m: int = opt(0, "rollouts trained per prompt; 0 = n / ratio")
    ratio: float = opt(0.0, "n / m when m is 0 (e.g. 4: train on a quarter); follows G under SAGC")


@dataclass(frozen=True)
class AlgoConfig(Section):
    """`name` picks a preset (ALGORITHM_PRESETS); any field left unset (None) takes the preset's value."""

    key = "algo"

    name: str = opt("grpo", "the preset filling the fields left unset: grpo | drgrpo | dapo | gspo (sequence-level "
                    "ratio and clip) | rloo (leave-one-out baseline, KL in the reward) | reinforce_pp (REINFORCE++: "
                    "batch-whitened returns, KL in the reward)", choices="tailrl.config.sections:ALGORITHM_PRESETS")
    advantage: str | None = opt(None, "advantage estimator (tailrl.algo.ADVANTAGES; reinforce_pp_baseline: "
                                "REINFORCE++ with the group mean subtracted first)",
                                choices="tailrl.algo.advantages:ADVANTAGES")
    policy_loss: str | None = opt(None, "policy-gradient surrogate (tailrl.algo.POLICY_LOSSES): vanilla (a ratio per "
                                  "token, PPO / GRPO clip) | gspo (one length-normalised ratio per sequence, clipped "
                                  "as a whole; equal to vanilla's gradient while the policy has not moved since the "
                                  "rollout, i.e. in the first of ppo_epochs)",
                                  choices="tailrl.algo.policy_losses:POLICY_LOSSES")
    loss_agg: str | None = opt(None, "loss aggregation over tokens and sequences (tailrl.algo.losses.AGGREGATIONS)",
                               choices="tailrl.algo.losses:AGGREGATIONS")
    eps_low: float | None = opt(None, "clip range below 1 (GSPO: 3e-4)")
    eps_high: float | None = opt(None, "clip range above 1 (DAPO clip-higher: 0.28; GSPO: 4e-4)")
    kl_coef: float = opt(0.0, "beta of the KL to a frozen reference (0: no reference model)")
    kl_estimator: str | None = opt(None, "per-token KL estimate (tailrl.algo.KL_ESTIMATORS): k1 = logp - ref | k2 = "
                                   "(logp - ref)^2 / 2 | k3 = exp(ref - logp) - (ref - logp) - 1 | abs = |logp - ref|",
                                   choices="tailrl.algo.kl:KL_ESTIMATORS")
    kl_in_reward: bool | None = opt(None, "true: subtract beta x the completion's summed KL from its reward before "
                                    "the advantage (veRL use_kl_in_reward); false: add beta x KL to each token's "
                                    "loss (veRL use_kl_loss, TRL beta)")
    entropy_coef: float = opt(0.0, "entropy bonus: coef x each token's entropy is subtracted from its loss "
                              "(actor/entropy is logged every step either way)")
    rollout_correction: str = opt("none", "reweight each token's policy gradient by pi_trainer / pi_engine of the "
                                  "sampled tokens (the train / inference gap): token_tis | seq_tis (truncated at "
                                  "rollout_is_cap) | token_mis | seq_mis (weights above the cap masked to 0); "
                                  "logs rollout/is_weight_mean and rollout/is_clipped_frac",
                                  choices="tailrl.algo.rollout_correction:correction_choices")
    rollout_is_cap: float = opt(2.0, "the cap C of rollout_correction (> 0)")
    ppo_epochs: int = opt(1, "update epochs per rollout batch (ratio vs the training forward's old logprobs)")
    dynamic_sampling: bool | None = opt(None, "DAPO: drop groups whose rewards have zero std and refill with new "
                                        "prompts")
    max_refill_rounds: int = opt(3, "cap on DAPO refill generations per step")
    overlong_buffer: int | None = opt(None, "DAPO soft overlong penalty over the last N tokens of the budget "
                                      "(0: off; -1: a quarter of max_new_tokens)")
    overlong_penalty: float = opt(1.0, "penalty at the budget (a linear ramp over the buffer)")
    downsample: DownsampleConfig = opt(factory=DownsampleConfig, help="PODS down-sampling")

    def __post_init__(self):
        super().__post_init__()
        if not self.rollout_is_cap > 0:
            raise UserError(f"algo.rollout_is_cap must be > 0, got {self.rollout_is_cap}")


_TOKEN_CLIP = dict(policy_loss="vanilla", eps_low=0.2, eps_high=0.2, dynamic_sampling=False, overlong_buffer=0)
_KL_IN_LOSS = dict(kl_estimator="k3", kl_in_reward=False)
_KL_IN_REWARD = dict(kl_estimator="k1", kl_in_reward=True)  # veRL's rloo / reinforce++ recipes (kl_penalty=kl)

ALGORITHM_PRESETS: dict[str, dict] = {
    "grpo": dict(advantage="grpo", loss_agg="seq-mean-token-mean", **_TOKEN_CLIP, **_KL_IN_LOSS),
    "drgrpo": dict(advantage="drgrpo", loss_agg="seq-mean-token-sum-norm", **_TOKEN_CLIP, **_KL_IN_LOSS),
    "dapo": dict(advantage="grpo", policy_loss="vanilla", loss_agg="token-mean", eps_low=0.2, eps_high=0.28,
                 dynamic_sampling=True, overlong_buffer=-1, **_KL_IN_LOSS),  # -1: a quarter of max_new_tokens
    # GSPO §5.1 clip range; veRL's GSPO recipe aggregates seq-mean-token-mean
    "gspo": dict(advantage="grpo", policy_loss="gspo", loss_agg="seq-mean-token-mean", eps_low=3e-4, eps_high=4e-4,
                 dynamic_sampling=False, overlong_buffer=0, **_KL_IN_LOSS),
    "rloo": dict(advantage="rloo", loss_agg="token-mean", **_TOKEN_CLIP, **_KL_IN_REWARD),
    "reinforce_pp": dict(advantage="reinforce_pp", loss_agg="token-mean", **_TOKEN_CLIP, **_KL_IN_REWARD),
}


@dataclass(frozen=True)
class TrainConfig(Section):
    key = "train"

    total_steps: int = opt(10, "training steps")
    time_budget_s: float = opt(0.0, "also stop once the steps' own time (evaluations excluded) exceeds this (0: off)")
    prompt_budget: int = opt(0, "also stop once this many prompts have been drawn (SAGC's fixed budget; 0: off)")
    rollout_batch_size: int = opt(64, "B rollouts per step = P prompts x G samples (G from the controller)")
    micro_batch_size: int = opt(8, "sequences per training forward/backward (at most)")
    micro_batch_tokens: int = opt(0, "padded tokens per training forward/backward (0: off): rows sorted by length "
                                  "and packed so rows x longest row <= this (veRL's use_dynamic_bsz)")
    logprob_chunk_rows: int = opt(1024, "completion tokens whose LM head + log-softmax run at a time in the "
                                  "training forward, recomputed in backward (0: all at once, keeping (S, C, V) "
                                  "logits; engine.exact=strict uses its invariant kernels either way)")
    activation_checkpointing: bool = opt(False, "recompute each decoder layer in backward instead of keeping its "
                                         "activations (less memory, one more forward)")
    release_kv_during_update: bool | None = opt(None, "free the engine's KV pool during the update and allocate it "
                                                "again for the next rollout (unset: on with CUDA)")
    dist_timeout_s: float = opt(7200.0, "torchrun: seconds a collective may wait for the other ranks (a rank "
                                "with a long rollout tail is waited for; a hung rank fails the job after this)")
    stop_grace_s: float = opt(25.0, "after SIGTERM / SIGINT / SIGUSR1 the step finishes and is checkpointed; a "
                              "rollout that would keep it past this many seconds (less the last step's update, "
                              "evaluation and save time) is abandoned and the run rolls back to the step's start "
                              "(torchrun and SLURM kill 30 s after their SIGTERM: keep it below that)")
    lr: float = opt(1e-6, "AdamW learning rate")
    weight_decay: float = opt(0.0, "AdamW weight decay")
    adam_betas: tuple[float, ...] = opt((0.9, 0.999), "AdamW betas")
    warmup_steps: int = opt(0, "linear learning-rate warm-up steps")
    max_grad_norm: float = opt(1.0, "gradient clipping norm")
    seed: int = opt(0, "torch seed (initialisation of anything random outside sampling)")
    out_dir: str = opt("runs", "parent folder of run directories")
    run_name: str = opt("", "run directory name (default: the start time)")
    save_every: int = opt(0, "checkpoint every N steps (0: only at the end)")
    keep_checkpoints: int = opt(2, "checkpoints kept (older ones are deleted)")
    eval_every: int = opt(0, "evaluate on data.eval_source every N steps (0: off)")
    eval_prompts: int = opt(64, "held-out prompts per evaluation")
    tensorboard: bool = opt(True, "write TensorBoard event files to <run>/tensorboard")
    save_rollouts: bool = opt(False, "write every rollout (token ids, text, reward, trained or not) to "
                              "<run>/rollouts.jsonl")
    wandb: bool = opt(False, "log to Weights & Biases (needs wandb installed)")
    wandb_project: str = opt("tailrl", "Weights & Biases project")


@dataclass(frozen=True)
class ControlConfig(Section):
    """Group-size controller (tailrl.control). SAGC settings are ignored by the static controller."""

    key = "control"

    kind: str = opt("static", "static (G fixed) | sagc (chosen online)", choices="tailrl.control.base:CONTROLLERS")
    candidates: tuple[int, ...] = opt((4, 8, 16), "SAGC: group sizes it may choose (each must divide B)")
    delta: float = opt(0.1, "SAGC: target straggler rate")
    eta: float = opt(0.5, "SAGC: dual ascent step size")
    gamma: float = opt(0.98, "SAGC: forgetting factor of the discounted Beta posteriors")
    lambda_max: float = opt(10.0, "SAGC: dual variable cap")
    seed: int = opt(0, "SAGC: Thompson sampling seed")


@dataclass(frozen=True)
class Config(Section):
    model: ModelConfig = opt(factory=ModelConfig, help="the policy checkpoint, dtype and device")
    engine: EngineConfig = opt(factory=EngineConfig, help="the rollout engine")
    rollout: RolloutConfig = opt(factory=RolloutConfig, help="sampling")
    data: DataConfig = opt(factory=DataConfig, help="the prompt dataset")
    reward: RewardConfig = opt(factory=RewardConfig, help="verifiable rewards")
    algo: AlgoConfig = opt(factory=AlgoConfig, help="GRPO / Dr.GRPO / DAPO / GSPO / RLOO / REINFORCE++, PODS")
    train: TrainConfig = opt(factory=TrainConfig, help="optimisation, budgets, checkpoints, logging")
    control: ControlConfig = opt(factory=ControlConfig, help="group-size controller (static | SAGC)")

    # keys that moved when the speculation settings were grouped: a user's old key gets the new name
    moved_keys: ClassVar[dict] = (
        {f"engine.spec.{k}": f"engine.spec.coupled.{k}"
         for k in ("ngram_min", "ngram_max", "history_per_prompt", "best_of_n", "bon_spare", "ladder")}
        | {f"engine.spec.{k}": f"engine.spec.decoupled.{k}"
           for k in ("window", "draft_cores", "verify_cores", "draft_device", "profile", "acceptance",
                     "reconfigure_every")})
