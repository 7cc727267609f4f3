"""Checkpoints: everything needed to continue bit-for-bit.

    RUN/checkpoints/step-000012/
        model/           plain Hugging Face folder (config.json, model.safetensors, tokenizer files)
        optimizer.pt     optimizer state (loaded with weights_only=True)
        rng.pt           torch RNG state
        state.json       step, prompt cursor, controller state, counters
Written to a temporary folder and renamed, so a kill -9 never leaves a half checkpoint behind.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from tailrl.model.loading import iter_safetensors, save_hf
from tailrl.model.weights import load_weights


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step-{step:06d}"


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    root = Path(run_dir) / "checkpoints"
    done = sorted(p for p in root.glob("step-*") if (p / "state.json").is_file() and not p.name.endswith(".tmp"))
    return done[-1] if done else None


def save_checkpoint(run_dir: Path, step: int, model, optimizer, tokenizer, state: dict, hf_config: dict | None,
                    keep: int = 2) -> Path:
    final = checkpoint_dir(run_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_hf(model, tmp / "model", tokenizer=tokenizer, hf_config=hf_config)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save({"torch": torch.get_rng_state()}, tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps(state, indent=1))  # written last: marks completeness
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    done = sorted(p for p in (Path(run_dir) / "checkpoints").glob("step-*") if not p.name.endswith(".tmp"))
    for old in done[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: Path, model, optimizer) -> dict:
    """Restore weights, optimizer and RNG in place; returns the saved trainer state."""
    load_weights(model, iter_safetensors([path / "model" / "model.safetensors"]))
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    torch.set_rng_state(torch.load(path / "rng.pt", weights_only=True)["torch"])
    return json.loads((path / "state.json").read_text())
