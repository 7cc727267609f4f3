"""Checkpoints: everything needed to continue bit-for-bit.

    RUN/checkpoints/step-000012/
        model/              plain Hugging Face folder in the run's dtype (config.json, model.safetensors, tokenizer)
        masters.safetensors the fp32 master weights, when the run's dtype is not fp32
        optimizer.pt        optimizer state (one process), or optimizer/ its shards (torch.distributed.checkpoint,
                            one file per rank under torchrun: resume with the same world size)
        rng-rank<R>.pt      each rank's torch RNG state
        state.json          step, prompt cursor, controller state, counters
    with model.lora, instead of model/ and masters.safetensors:
        adapter/            the PEFT adapter (adapter_config.json + adapter_model.safetensors, fp32 A and B): the
                            base is model.path; a resume merges it again into the same weights, bit for bit
        base_config.json    the HF config.json of the merged model (its dtype), for `tailrl export --merge`
Written to a temporary folder and renamed by rank 0 once every rank is done, so a kill -9 never leaves a half
checkpoint behind.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file, save_file
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

from tailrl.errors import UserError
from tailrl.model.loading import iter_safetensors, save_hf
from tailrl.model.peft_format import adapter_state, load_adapter_state, read_adapter, save_adapter
from tailrl.model.weights import load_weights
from tailrl.train.distributed import DistContext
from tailrl.train.policy import Policy


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step-{step:06d}"


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    root = Path(run_dir) / "checkpoints"
    done = sorted(p for p in root.glob("step-*") if (p / "state.json").is_file() and not p.name.endswith(".tmp"))
    return done[-1] if done else None


def save_checkpoint(run_dir: Path, step: int, policy: Policy, optimizer, tokenizer, state: dict,
                    hf_config: dict | None, ctx: DistContext, keep: int = 2) -> Path:
    """A collective under torchrun: every rank writes its shards, rank 0 the rest."""
    final = checkpoint_dir(run_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    if ctx.main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    ctx.barrier()
    masters = policy.masters() if policy.compute_dtype != torch.float32 and not policy.lora else None  # gathered
    adapter = adapter_state(policy.train, ctx.main) if policy.lora else None  # collective: gathered
    if ctx.main and policy.lora:
        save_adapter(tmp / "adapter", policy.train.lora_spec, adapter)
        (tmp / "base_config.json").write_text(json.dumps(hf_config or {}, indent=2))
    elif ctx.main:
        save_hf(policy.rollout, tmp / "model", tokenizer=tokenizer, hf_config=hf_config)
        if masters is not None:
            save_file({k: v.contiguous() for k, v in masters.items()}, str(tmp / "masters.safetensors"))
    if ctx.enabled:
        dcp.save({"optimizer": get_optimizer_state_dict(policy.train, optimizer)}, checkpoint_id=str(tmp / "optimizer"))
    else:
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save({"torch": torch.get_rng_state()}, tmp / f"rng-rank{ctx.rank}.pt")
    ctx.barrier()
    if ctx.main:
        (tmp / "state.json").write_text(json.dumps(state | {"world": ctx.world}, indent=1))  # last: complete
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        done = sorted(p for p in (Path(run_dir) / "checkpoints").glob("step-*") if not p.name.endswith(".tmp"))
        for old in done[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
    ctx.barrier()
    return final


def load_checkpoint(path: Path, policy: Policy, optimizer, ctx: DistContext) -> dict:
    """Restore weights, optimizer and RNG in place; returns the saved trainer state."""
    state = json.loads((path / "state.json").read_text())
    saved_world = state.get("world", 1)
    if saved_world != ctx.world:
        raise UserError(f"checkpoint {path} was written by {saved_world} rank(s); resume it with the same world "
                        f"size (got {ctx.world})")
    if policy.lora != (path / "adapter").is_dir():
        raise UserError(f"checkpoint {path} was written {'with' if not policy.lora else 'without'} model.lora; "
                        f"resume it {'with' if not policy.lora else 'without'} it too")
    if policy.lora:  # the adapter, merged into the base again (the same bits as before the save)
        load_adapter_state(policy.train, read_adapter(path / "adapter")[1], f"checkpoint {path}")
        policy.sync_rollout()
    elif (path / "masters.safetensors").is_file():
        policy.load_masters(load_file(str(path / "masters.safetensors")))
    elif policy.shared:
        load_weights(policy.train, iter_safetensors([path / "model" / "model.safetensors"]))
    else:  # an fp32 copy for the engine: the HF folder holds the masters exactly
        load_weights(policy.rollout, iter_safetensors([path / "model" / "model.safetensors"]))
        policy.load_masters({n: p.detach() for n, p in policy.rollout.named_parameters()})
    if ctx.enabled:
        sd = {"optimizer": get_optimizer_state_dict(policy.train, optimizer)}
        dcp.load(sd, checkpoint_id=str(path / "optimizer"))
        set_optimizer_state_dict(policy.train, optimizer, sd["optimizer"])
    else:
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    rng = path / f"rng-rank{ctx.rank}.pt"
    rng = rng if rng.is_file() else path / "rng.pt"  # checkpoints from before the per-rank files
    torch.set_rng_state(torch.load(rng, weights_only=True)["torch"])
    return state
