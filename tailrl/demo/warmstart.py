"""Warm-start the demo policy: a tiny Llama trained by a short SFT on the demo task's solutions
(with their rare whole-chain reviews), saved as a plain Hugging Face folder and cached.

The SFT is deliberately short: the policy learns the format and the review habit but still makes
arithmetic slips, so RL has accuracy to win and the group lengths have a real tail.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from tailrl.data.demo_task import DemoTask
from tailrl.demo.tokenizer import demo_tokenizer
from tailrl.model import ModelArgs, build_model, init_random, save_hf


@dataclass(frozen=True)
class WarmStartParams:
    hidden: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 384
    steps: int = 600
    batch: int = 64
    lr: float = 3e-3
    seed: int = 0
    time_budget_s: float = 600.0  # safety stop on a very slow machine (the result then depends on speed)

    def key(self, task: DemoTask) -> str:
        blob = json.dumps({"spec": asdict(self), "task": asdict(task), "v": 1}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def model_args(spec: WarmStartParams, vocab: int, eos: int) -> ModelArgs:
    return ModelArgs(architecture="LlamaForCausalLM", vocab_size=vocab, hidden_size=spec.hidden,
                     intermediate_size=spec.intermediate, num_layers=spec.layers, num_heads=spec.heads,
                     num_kv_heads=spec.kv_heads, head_dim=spec.hidden // spec.heads, rms_norm_eps=1e-5,
                     rope_theta=10000.0, rope_scaling=None, max_position_embeddings=512, tie_word_embeddings=True,
                     qkv_bias=False, o_bias=False, mlp_bias=False, qk_norm=False, sliding_window=None,
                     bos_token_id=1, eos_token_ids=(eos,))


def sft_batch(task: DemoTask, tok, rng: random.Random, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids (n, L), loss mask (n, L)) for prompt + solution + EOS; loss on completion tokens only."""
    seqs, masks = [], []
    for row in task.rows(n, "train", seed=rng.randrange(2**31), with_solution=True):
        p = tok(row["prompt"])["input_ids"]
        c = tok(row["solution"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        seqs.append(p + c)
        masks.append([0] * len(p) + [1] * len(c))
    L = max(map(len, seqs))
    ids = torch.tensor([s + [tok.pad_token_id] * (L - len(s)) for s in seqs])
    mask = torch.tensor([m + [0] * (L - len(m)) for m in masks], dtype=torch.float32)
    return ids, mask


def chunk_loss(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Summed next-token cross-entropy of ids (n, L) over the tokens where mask (n, L) is 1."""
    logits = model(ids[:, :-1])  # (n, L-1, V)
    return (F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none") * mask[:, 1:]).sum()


def train_sft(task: DemoTask, spec: WarmStartParams, tok, progress=None, batches=None) -> tuple[torch.nn.Module, dict]:
    """batches(rng) -> one step's rows as [(ids (k, L), loss mask (k, L)), ...] chunks, the loss averaged over
    all their tokens (default: one chunk, `sft_batch` of spec.batch rows)."""
    torch.manual_seed(spec.seed)
    model = init_random(build_model(model_args(spec, len(tok), tok.eos_token_id)), std=0.02, seed=spec.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.0, betas=(0.9, 0.98))
    rng = random.Random(spec.seed)
    t0, losses, step = time.perf_counter(), [], 0
    model.train()
    for step in range(1, spec.steps + 1):
        lr = spec.lr * 0.5 * (1 + math.cos(math.pi * step / spec.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        chunks = batches(rng) if batches else [sft_batch(task, tok, rng, spec.batch)]
        loss = sum(chunk_loss(model, ids, mask) for ids, mask in chunks) / sum(mask.sum() for _, mask in chunks)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if progress:
            progress(step, spec.steps, loss.item())
        if time.perf_counter() - t0 > spec.time_budget_s:
            break
    model.eval()
    return model, {"sft_steps": step, "sft_seconds": time.perf_counter() - t0, "sft_final_loss": sum(losses[-20:]) / len(losses[-20:])}


def warm_start(cache_root: Path, task: DemoTask | None = None, spec: WarmStartParams | None = None,
               progress=None) -> Path:
    """Folder of the warm-started policy (trained once per task/spec, then cached)."""
    task, spec = task or DemoTask(), spec or WarmStartParams()

    folder = Path(cache_root) / f"demo-policy-{spec.key(task)}"
    if is_cached(folder):
        return folder
    tok = demo_tokenizer()
    model, info = train_sft(task, spec, tok, progress)
    return save_cached(folder, model, tok, {"task": asdict(task), "spec": asdict(spec), **info})


def is_cached(folder: Path) -> bool:
    return (folder / "model.safetensors").is_file() and (folder / "warmstart.json").is_file()


def save_cached(folder: Path, model: torch.nn.Module, tok, info: dict) -> Path:
    """Save a warm-started policy (HF folder + warmstart.json) as `folder`: written to a temporary folder and
    renamed, so an interrupted save leaves no folder that is_cached accepts."""
    tmp = folder.with_name(folder.name + ".tmp")
    save_hf(model, tmp, tokenizer=tok)
    (tmp / "warmstart.json").write_text(json.dumps(info, indent=1))
    if folder.exists():
        shutil.rmtree(folder)
    tmp.rename(folder)
    return folder
