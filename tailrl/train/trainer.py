"""The synchronous on-policy trainer. One step:

    G = controller.choose(); P = B // G
    groups = rollout worker (engine on the policy itself, rewards) -> shaping (overlong, PODS, DAPO refills)
    A = ADVANTAGES[algo.advantage](scores, groups)
    update(policy, kept) x ppo_epochs  (micro-batched; loss aggregation explicit)
    controller.observe(lengths); log; checkpoint

SIGTERM, SIGINT and SIGUSR1 stop the run at a step boundary with a checkpoint (train/stop.py): fit() returns
with `stopped` set and `tailrl train` exits 75.

The Trainer subclasses nothing; its parts (controller, engine, reward, sampler) are built here and could be
injected by a caller.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import save_file

from tailrl.algo import ADVANTAGES
from tailrl.config import Config, dump_config, load_config, to_dict
from tailrl.control import build_controller
from tailrl.data.datasets import encode_example, load_dataset
from tailrl.data.sampler import PromptSampler
from tailrl.engine import SamplingParams
from tailrl.errors import UserError
from tailrl.model import load
from tailrl.model.loading import (
    args_to_hf_config,
    clone_model,
    iter_safetensors,
    resolve_device,
    resolve_dtype,
)
from tailrl.model.weights import hf_state_dict, load_weights
from tailrl.rewards import build_reward
from tailrl.speculative import build_engine
from tailrl.tools import ToolTurns
from tailrl.train.batch import make_train_batch
from tailrl.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from tailrl.train.distributed import init_distributed, rank_device
from tailrl.train.episodes import Episodes
from tailrl.train.evaluate import evaluate
from tailrl.train.metrics import MetricsLogger
from tailrl.train.policy import Policy, setup_lora
from tailrl.train.recipe import validate
from tailrl.train.rollout import RolloutWorker, update_time_saved
from tailrl.train.shaping import PodsSelect, Shaper
from tailrl.train.step_metrics import rollout_metrics
from tailrl.train.stop import StepAbandoned, StopSignals
from tailrl.train.tools import build_executor, tool_metrics
from tailrl.train.update import TrainingDiverged, UpdateParams, batch_logprobs, kl_reward_penalty, update_step


class Trainer:
    def __init__(self, cfg: Config, run_dir: str | Path, resume: bool = False):
        self.cfg = cfg = validate(cfg)
        self.run_dir = Path(run_dir)
        self.logger = self.engine = self.reward = None  # close() releases whatever was started
        # multi-turn tools: loaded and checked before the model (a bad tools file is one line, exit 2)
        self.tools = build_executor(cfg.rollout)
        try:
            self._build(cfg, resume)
        except BaseException:
            self.close()
            raise

    def _build(self, cfg: Config, resume: bool) -> None:
        device = resolve_device(cfg.model.device)
        # one process, or this rank of a torchrun job
        self.ctx = ctx = init_distributed(device, cfg.train.dist_timeout_s)
        torch.manual_seed(cfg.train.seed)
        here = rank_device(device, ctx)
        # loaded in fp32: the masters; the engine gets its own copy in model.dtype (train/policy.py). Under
        # torchrun on CUDA loaded on the CPU: fully_shard moves each rank's shard to its GPU
        model, self.tokenizer = load(cfg.model.path, dtype="float32",
                                     device="cpu" if ctx.enabled and here.startswith("cuda") else here)
        dtype = str(resolve_dtype(cfg.model.dtype, here)).removeprefix("torch.")  # model.dtype=auto resolved here
        self.hf_config = args_to_hf_config(model.args) | {"torch_dtype": dtype}
        # model.lora: the base frozen in model.dtype with fp32 adapters, its weights the merged ones (train/policy.py)
        setup_lora(model, cfg.model.lora, resolve_dtype(dtype), cfg.train.seed, cfg.model.path)
        self.reference = None
        if cfg.algo.kl_coef > 0:  # the initial policy, frozen (a full replica in model.dtype on every rank)
            self.reference = clone_model(model, resolve_dtype(dtype), here).eval().requires_grad_(False)
        self.policy = Policy(model, dtype, ctx, cfg.train.activation_checkpointing,
                             strict=cfg.engine.exact == "strict", device=here)
        self.dataset = load_dataset(cfg.data)
        self.sampler = PromptSampler(self.dataset, seed=cfg.data.seed, shuffle=cfg.data.shuffle)
        self.reward = build_reward(cfg.reward)
        self.stop = StopSignals(cfg.train.stop_grace_s, announce=ctx.main)  # fit() installs its signal handlers
        self.stopped: str | None = None  # what stopped fit() early (a signal's name), None when it ran to the end
        r_g = cfg.rollout.group_size
        c = cfg.control
        self.controller = build_controller(c.kind, group_size=r_g, candidates=c.candidates, tau=cfg.rollout.straggler_tau,
                                           delta=c.delta, eta=c.eta, gamma=c.gamma, lambda_max=c.lambda_max, seed=c.seed)
        r = cfg.rollout
        chat = cfg.data.chat_template
        schemas = self.tools.schemas if self.tools else None  # the chat template's tools=

        def render(ex) -> list[int]:
            return encode_example(ex, self.tokenizer, chat, schemas)

        self.episodes = None  # rollout.environment: an instance per rollout, reset before its prompt is encoded
        if self.tools is not None and self.tools.environment is not None:
            self.episodes = Episodes(self.tools, render)
        turns = ToolTurns(self.tools, self.tokenizer, r.tool_parser, r.max_turns,
                          sessions=self.episodes.session_of if self.episodes else None) if self.tools else None
        self.engine = build_engine(self.policy.rollout, self.tokenizer, cfg.engine, tau=r.straggler_tau, turns=turns)
        self.params = SamplingParams(temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
                                     max_new_tokens=r.max_new_tokens, seed=r.seed, stop=r.stop, ignore_eos=r.ignore_eos)
        self._encoded: dict[int, list[int]] = {}

        def encode(ex):
            if ex.uid not in self._encoded:
                self._encoded[ex.uid] = render(ex)
            return self._encoded[ex.uid]

        self.eval_examples = []
        if cfg.train.eval_every and cfg.data.eval_source:
            held = load_dataset(cfg.data, cfg.data.eval_source, held_out=True)
            self.eval_examples = held.examples[: cfg.train.eval_prompts]
        self._encode = encode
        self.worker = RolloutWorker(self.engine, self.tokenizer, self.sampler, self.reward, encode, self.params, ctx,
                                    guard=self.stop, episodes=self.episodes)
        self.shaper = Shaper.from_config(cfg.algo, r.max_new_tokens, r.seed)
        t = cfg.train
        self.optimizer = self.policy.make_optimizer(t.lr, tuple(t.adam_betas), t.weight_decay)  # LoRA: adapters
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / t.warmup_steps) if t.warmup_steps > 0 else 1.0)
        self.release_kv = t.release_kv_during_update if t.release_kv_during_update is not None else \
            device.startswith("cuda")
        self.update_params = UpdateParams.from_config(cfg)
        self.step_idx = 0
        self.last_checkpoint: Path | None = None
        self._cost = {"update": 0.0, "eval": 0.0, "save": 0.0}  # last seconds of each: a stop's reserve
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if resume:
            ckpt = latest_checkpoint(self.run_dir)
            if ckpt is not None:
                self._restore(ckpt)
        if ctx.main:
            dump_config(cfg, self.run_dir / "config.yaml")
            # rows past the checkpoint were made by steps that run again (all of them without a checkpoint)
            since = None if not resume else self.step_idx if self.last_checkpoint else -1
            self.logger = MetricsLogger(self.run_dir, t.tensorboard, t.wandb, t.wandb_project, to_dict(cfg),
                                        resume_step=since, rollouts=t.save_rollouts)

    def close(self) -> None:
        """Release what the trainer started: the metrics files, the reward pool's worker processes, the
        engine's (a decoupled drafter's process). Idempotent; fit() calls it at the end."""
        if self.logger is not None:
            self.logger.close()
            self.logger = None
        if self.engine is not None:
            self.engine.close()
        if self.reward is not None:
            self.reward.close()
        if self.tools is not None:
            self.tools.close()

    @property
    def model(self):
        """The trained module (fp32 masters; FSDP2-sharded under torchrun)."""
        return self.policy.train

    # -- state -----------------------------------------------------------------------------------
    def _state(self) -> dict:
        return {"step": self.step_idx, "draws": self.worker.draws, "sampler": self.sampler.state_dict(),
                "controller": self.controller.state_dict(), "scheduler": self.scheduler.state_dict()}

    def _load_state(self, state: dict) -> None:
        self.step_idx = state["step"]
        self.worker.draws = state["draws"]
        self.sampler.load_state_dict(state["sampler"])
        self.controller.load_state_dict(state["controller"])
        self.scheduler.load_state_dict(state["scheduler"])

    def _restore(self, ckpt: Path) -> None:
        self._load_state(load_checkpoint(ckpt, self.policy, self.optimizer, self.ctx))
        self.last_checkpoint = ckpt
        if self.reference is not None:  # the reference is the initial policy, saved beside the run
            ref = self.run_dir / "reference.safetensors"
            load_weights(self.reference, iter_safetensors([ref]))

    def save(self) -> Path:
        """A checkpoint at step_idx (a collective under torchrun); once per step."""
        if self.last_checkpoint is not None and self.last_checkpoint.name == f"step-{self.step_idx:06d}":
            return self.last_checkpoint  # written already (a stop right after a save_every checkpoint)
        t0 = time.perf_counter()
        self.last_checkpoint = save_checkpoint(self.run_dir, self.step_idx, self.policy, self.optimizer, self.tokenizer,
                                               self._state(), self.hf_config, self.ctx, self.cfg.train.keep_checkpoints)
        self._cost["save"] = time.perf_counter() - t0
        return self.last_checkpoint

    # -- one step --------------------------------------------------------------------------------
    def step(self) -> dict[str, float]:
        cfg, t0 = self.cfg, time.perf_counter()
        G = self.controller.choose()
        B = cfg.train.rollout_batch_size
        if B % G:
            raise UserError(f"group size {G} does not divide train.rollout_batch_size {B}")
        with out_of_memory("the rollout", "engine.gpu_memory_utilization, engine.max_batch_size or "
                           "rollout.max_new_tokens", self.last_checkpoint):
            phase = self.worker.step(B // G, G, self.shaper, cfg.algo.max_refill_rounds)
        self.last_phase = phase  # kept for reports (timeline, length histogram)
        t_gen = sum(tr.t_end for tr in phase.traces)
        metrics = self._rollout_metrics(phase, G)
        metrics |= self.controller.metrics()
        metrics |= self.shaper.metrics(phase.groups)
        self.policy.reset_peak_memory()  # perf/max_memory_allocated_gb: the update's peak
        t1 = time.perf_counter()
        if self.release_kv:  # rollout K/V and training activations need not fit at once
            self.engine.release_kv()
        if phase.groups:
            with out_of_memory("the update", "train.micro_batch_tokens or train.micro_batch_size, or set "
                               "train.activation_checkpointing=true", self.last_checkpoint):
                metrics |= self._update(phase.groups)
        self.policy.sync_rollout()  # the engine's weights follow the masters (in place)
        metrics["timing_s/update"] = time.perf_counter() - t1
        metrics |= self.policy.memory_metrics(self.optimizer)  # perf/*: optimizer state, the update's memory
        if self.shaper.step_of(PodsSelect) is not None:
            metrics["pods/update_time_saved_s"] = update_time_saved(metrics["timing_s/update"], metrics["pods/kept_token_frac"])
        self.controller.observe([g.lengths for g in phase.generated])
        self.scheduler.step()
        self.step_idx += 1
        metrics |= {"timing_s/gen": t_gen, "timing_s/reward": phase.reward_s, "timing_s/step": time.perf_counter() - t0,
                    "actor/lr": self.optimizer.param_groups[0]["lr"]}
        return metrics

    def _update(self, groups) -> dict[str, float]:
        scores = torch.tensor([s for g in groups for s in g.scores])
        ids = torch.tensor([i for i, g in enumerate(groups) for _ in g.rollouts])
        dev = self.policy.rollout.embed_tokens.weight.device  # the masters' device (sharded or not)
        batch = make_train_batch([r.prompt_ids for g in groups for r in g.rollouts],  # an episode's own prompt
                                 [r.token_ids for g in groups for r in g.rollouts], torch.zeros(len(scores)),
                                 pad_id=self.tokenizer.pad_token_id or 0, device=dev,
                                 rollout_logprobs=[r.logprobs for g in groups for r in g.rollouts],
                                 token_masks=[r.token_mask for g in groups for r in g.rollouts])
        mb = (self.update_params.micro_batch_size, self.update_params.temperature, self.update_params.micro_batch_tokens)
        par = {"ctx": self.ctx, "autocast": self.policy.autocast}
        if self.reference is not None:
            batch.ref_logp = batch_logprobs(self.reference, batch, *mb, **par, chunk_rows=self.update_params.chunk_rows)
        if self.cfg.algo.ppo_epochs > 1 or self.update_params.kl_in_reward and self.reference is not None:
            batch.old_logp = batch_logprobs(self.model, batch, *mb, **par, chunk_rows=self.update_params.chunk_rows)
        # the advantages: of the scores less beta x KL when the KL is in the reward
        penalty = kl_reward_penalty(batch, self.update_params, self.ctx)
        adv = ADVANTAGES[self.cfg.algo.advantage](scores - penalty, ids, lengths=batch.completion_mask.sum(-1).cpu())
        batch.advantages = adv.to(dev)
        out: dict[str, float] = {}
        mismatch: dict[str, float] = {}
        for epoch in range(self.cfg.algo.ppo_epochs):
            out = update_step(self.model, self.optimizer, batch, self.update_params, **par)
            if epoch == 0:  # the engine's logprobs vs the trainer's, before any update of this step: measured once
                mismatch = {k: v for k, v in out.items() if k.startswith("rollout/logprob_diff")}
        out |= mismatch
        out["actor/advantage_abs_mean"] = adv.abs().mean().item()
        return out

    def _rollout_metrics(self, phase, G: int) -> dict[str, float]:
        m = {"rollout/group_size": float(G), "data/prompts": float(len(phase.generated)),
             "data/epoch": float(self.sampler.epoch), "data/skipped_rows": float(self.dataset.skipped)}
        m |= rollout_metrics(phase, getattr(self.reward, "names", None), self.cfg.rollout.straggler_tau)
        if self.tools is not None:  # multi-turn: turns, tool calls, time parked on tools
            m |= tool_metrics(self.tools, [r for g in phase.generated for r in g.rollouts], phase.traces, self.ctx)
        return m

    def evaluate(self) -> dict[str, float]:
        """Accuracy on the held-out prompts (one sample each at the rollout temperature); under torchrun each
        rank scores a shard (a collective: every rank calls it)."""
        t0 = time.perf_counter()
        out = evaluate(self.engine, self.tokenizer, self.eval_examples, self._encode, self.reward, 1,
                       replace(self.params, seed=self.params.seed + 7919), ctx=self.ctx, episodes=self.episodes)
        if self.tools is not None:  # the held-out rollouts' tool calls: eval/*, not the next step's tools/*
            calls = self.ctx.sum([self.tools.metrics()["tools/calls"]])[0]
            out["eval/tool_calls_mean"] = calls / max(out.get("eval/prompts", 0.0), 1.0)
        self._cost["eval"] = time.perf_counter() - t0
        return out

    # -- loop ------------------------------------------------------------------------------------
    def fit(self, on_step=None, stop_signals: bool = True) -> list[dict]:
        """Run to train.total_steps (or the time / prompt budget); checkpoint per train.save_every and at the end.
        stop_signals: SIGTERM / SIGINT / SIGUSR1 end the run at a step boundary with a checkpoint (`stopped`
        names the signal); a second Ctrl-C raises KeyboardInterrupt at once."""
        main = self.ctx.main
        if main and self.reference is not None and not (self.run_dir / "reference.safetensors").is_file():
            save_file({k: v.contiguous().cpu() for k, v in hf_state_dict(self.reference).items()},
                      str(self.run_dir / "reference.safetensors"))
        history: list[dict] = []
        try:
            with self.stop if stop_signals else contextlib.nullcontext():
                self._loop(history, on_step)
        finally:
            self.close()
        if main:
            (self.run_dir / "final.json").write_text(json.dumps({"step": self.step_idx, "stopped": self.stopped,
                                                                 "checkpoint": str(self.last_checkpoint)}))
        return history

    def _loop(self, history: list[dict], on_step) -> None:
        t, main = self.cfg.train, self.ctx.main
        if self.eval_examples and self.step_idx == 0:
            metrics = self.evaluate()
            if main:
                self.logger.log(0, metrics)
        spent = 0.0

        def budget_spent() -> bool:
            return bool((t.time_budget_s and spent >= t.time_budget_s)
                        or (t.prompt_budget and self.worker.draws >= t.prompt_budget))

        while self.step_idx < t.total_steps and not budget_spent() and not self.stopped:
            boundary = copy.deepcopy(self._state()), torch.get_rng_state()
            due = self.eval_examples and (self.step_idx + 1) % t.eval_every == 0
            self.stop.reserve_s = self._cost["update"] + self._cost["save"] + (self._cost["eval"] if due else 0.0)
            try:
                metrics = self.step()
            except StepAbandoned as e:  # on every rank (the rollout's gather): back to the step's start
                self._load_state(boundary[0])
                torch.set_rng_state(boundary[1])
                self.stopped = str(e)
                break
            except TrainingDiverged as e:
                kept = f"; last good checkpoint kept: {self.last_checkpoint}" if self.last_checkpoint else ""
                raise UserError(f"training diverged at step {self.step_idx + 1}: {e}{kept}") from e
            self._cost["update"] = metrics["timing_s/update"]
            # one collective for two decisions every rank must share: the time budget (the slowest rank) and a stop
            parts = self.ctx.gather((metrics["timing_s/step"], self.stop.signal))
            spent += max(p[0] for p in parts)
            self.stopped = next((p[1] for p in parts if p[1]), None)
            metrics["timing_s/cumulative"] = spent
            last = self.step_idx == t.total_steps or budget_spent()
            if self.eval_examples and (self.step_idx % t.eval_every == 0 or last):
                metrics |= self.evaluate()
            if main:
                self.logger.log(self.step_idx, metrics)
                self.logger.log_traces(self.step_idx, self.last_phase.traces)
                self.logger.log_rollouts(self.step_idx, self.last_phase.generated, self.last_phase.groups)
            history.append(metrics)
            if on_step:
                on_step(self.step_idx, metrics)
            if (t.save_every and self.step_idx % t.save_every == 0) or last or self.stopped:
                self.save()
        if self.stopped and self.step_idx:  # an abandoned step: the boundary it started from (once)
            self.save()


def run_dir_for(cfg: Config) -> Path:
    """out_dir / run_name; without a run name the start time, or under torchrun the rendezvous id (every rank,
    on every node, must name the same folder)."""
    name = cfg.train.run_name
    if not name and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        name = os.environ.get("TORCHELASTIC_RUN_ID", "none")
        if name == "none":
            raise UserError("under torchrun set train.run_name (or --run-dir): every rank must write one run folder")
    return Path(cfg.train.out_dir) / (name or time.strftime("%Y%m%d-%H%M%S"))


def resume_config(run_dir: str | Path, overrides: list[str]) -> Config:
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise UserError(f"cannot resume: no config.yaml in {run_dir}")
    return load_config(path, overrides)


__all__ = ["Trainer", "resume_config", "run_dir_for"]


@contextlib.contextmanager
def out_of_memory(where: str, lower: str, last_checkpoint: Path | None):
    """A CUDA OOM in `where` as one line naming the settings to lower; the last checkpoint is kept."""
    try:
        yield
    except torch.cuda.OutOfMemoryError as e:
        kept = f"; last checkpoint kept: {last_checkpoint}" if last_checkpoint else ""
        raise UserError(f"CUDA out of memory in {where}: lower {lower}{kept}") from e

