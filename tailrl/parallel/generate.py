"""`tailrl generate --tp N --dp M`: spawn N x M ranks on this machine, generate over a TP x DP layout,
optionally switching layout mid-rollout (PAT's controller with a `tailrl profile tp` table, or a
forced switch), and write the completions like the single-process command."""

from __future__ import annotations

from dataclasses import dataclass

from tailrl.engine.telemetry import RequestRecord, RolloutTrace
from tailrl.errors import UserError
from tailrl.model import load
from tailrl.model.weights import full_tensors
from tailrl.parallel.controller import PatDecider
from tailrl.parallel.dist import spawn
from tailrl.parallel.layout import Layout, splits
from tailrl.parallel.rollout import forced, tp_generate


@dataclass(frozen=True)
class SwitchParams:
    """How the rollout may change layout: off, auto (the controller), or forced ('tp2@40:migrate')."""

    mode: str = "off"
    to_tp: int = 0
    at: int = 0
    path: str = "migrate"
    kv: str = "auto"  # auto mode: auto | migrate | recompute

    @classmethod
    def parse(cls, text: str, kv: str = "auto") -> SwitchParams:
        if text in ("off", "auto"):
            return cls(text, kv=kv)
        try:
            target, rest = text.split("@")
            at, path = (rest.split(":") + ["migrate"])[:2]
            if not target.startswith("tp") or path not in ("migrate", "recompute") or int(target[2:]) < 1 or int(at) < 1:
                raise ValueError
            return cls("forced", int(target[2:]), int(at), path)
        except ValueError:
            raise UserError(f"--switch must be off, auto, or tpN@STEP[:migrate|recompute] (e.g. tp2@40:recompute), "
                            f"got {text!r}") from None


def _rank_main(rank, world, model_path, requests, engine_cfg, tp, switch: SwitchParams, profile, interval, eos_ids,
               max_new_tokens):
    model, _ = load(model_path, tokenizer=False)  # full weights; each rank keeps only its shards
    args, tensors = model.args, list(full_tensors(model))
    del model
    decide = None
    if switch.mode == "auto":
        decide = PatDecider(profile, args, world, max_new_tokens, kv=switch.kv)
    elif switch.mode == "forced":
        decide = forced(switch.at, Layout(switch.to_tp, world), switch.path)
    return tp_generate(rank, world, args, tensors, requests, engine_cfg, Layout(tp, world), decide, interval, eos_ids)


def check_layout(args, tp: int, dp: int, switch: SwitchParams, profile: dict | None) -> None:
    """One-line errors for layouts the model or the switch cannot use."""
    world = tp * dp
    if tp < 1 or dp < 1:
        raise UserError(f"--tp and --dp must be >= 1, got {tp} and {dp}")
    tps = [tp] + ([switch.to_tp] if switch.mode == "forced" else [])
    tps += [int(t) for t in (profile or {}).get("decode", {})] if switch.mode == "auto" and profile else []
    if switch.mode == "auto" and not profile:
        raise UserError("--switch auto needs a latency profile: --tp-profile PATH (make one with `tailrl profile tp`)")
    if profile is not None:
        missing = [k for k in ("decode", "prefill", "bandwidth") if k not in profile]
        if missing:
            raise UserError(f"latency profile lacks {', '.join(missing)} (make one with `tailrl profile tp`)")
        tps = [t for t in tps if world % t == 0] if switch.mode == "auto" else tps  # the controller skips the rest
    for t in tps:
        if world % t or not splits(args, t):
            raise UserError(f"TP={t} must divide the world ({world}) and the model's heads "
                            f"({args.num_heads} query, {args.num_kv_heads} KV) and MLP width ({args.intermediate_size})")


def run_parallel_generate(model_path: str, requests: list, engine_cfg, tp: int, dp: int, switch: SwitchParams,
                          profile: dict | None, eos_ids, max_new_tokens: int, interval: int = 8):
    """Returns (TPResult of rank 0, RolloutTrace built from it)."""

    if engine_cfg.spec.method != "none":
        raise UserError("speculation and --tp/--dp cannot be combined yet (use one or the other)")
    res = spawn(_rank_main, tp * dp, model_path, requests, engine_cfg, tp, switch, profile, interval, tuple(eos_ids),
                max_new_tokens)[0]
    trace = RolloutTrace(steps=list(res.steps),  # StepTiming is a StepRecord with context and TP
                         requests=[RequestRecord(r.uid, r.sample_index, r.t_start, r.t_finish, r.num_tokens,
                                                 r.finish_reason, len(r.prompt_ids)) for r in res.rollouts],
                         t_end=res.rollout_s)
    return res, trace
