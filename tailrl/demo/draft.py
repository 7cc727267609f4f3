"""A draft model for speculative decoding of the demo policy: a smaller Llama with the same tokenizer,
distilled from the policy's own rollouts and cached as a plain Hugging Face folder.

It is the draft for `--spec draft:PATH` (engine.spec.method=draft / auto with engine.spec.draft_model) and
for the decoupled-speculation benchmarks. Distillation: the policy generates rollouts with tailrl's engine,
then the draft is trained to minimise KL(policy || draft) over the full next-token distributions at every
completion position (teacher logits computed on the fly).

The metric is *keyed acceptance*: the engine samples every token with randomness fixed by the key (seed,
uid, sample index, position), and the draft drafts with the same sampler and key, so a draft token is
accepted exactly when the draft's keyed sample equals the policy's. A low KL is only a proxy; the meta
records the fraction of held-out completion positions where the two keyed samples coincide.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from tailrl.data.demo_task import DemoTask
from tailrl.demo.run import DEMO_TASK, demo_policy
from tailrl.demo.warmstart import WarmStartParams, model_args
from tailrl.engine import Rollout
from tailrl.model import build_model, init_random, load, save_hf
from tailrl.model.loading import cache_dir
from tailrl.speculative.distill import rollouts
from tailrl.speculative.profiling.acceptance import keyed_acceptance, pack


@dataclass(frozen=True)
class DraftParams:
    hidden: int = 64
    layers: int = 1
    heads: int = 2
    kv_heads: int = 1
    intermediate: int = 192
    samples: int = 2048  # policy rollouts (train split) used as distillation data
    steps: int = 300
    batch: int = 32
    lr: float = 3e-3
    seed: int = 0
    temperature: float = 1.0
    max_new_tokens: int = 160  # as in the demo's rollouts
    eval_samples: int = 128  # held-out (test split) rollouts for the keyed acceptance

    def key(self, policy_dir: Path) -> str:
        blob = json.dumps({"spec": asdict(self), "policy": Path(policy_dir).name, "v": 1}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def policy_rollouts(model, tok, task: DemoTask, n: int, split: str, seed: int,
                    spec: DraftParams) -> list[Rollout]:
    """n rollouts (one per prompt, uid = row index, sampling seed `seed`) of the model on a task split."""
    prompts = [tok(r["prompt"])["input_ids"] for r in task.rows(n, split, seed=seed)]
    return rollouts(model, prompts, spec.temperature, spec.max_new_tokens, seed)


def kl_loss(teacher: torch.Tensor, student: torch.Tensor, mask: torch.Tensor,
            temperature: float) -> torch.Tensor:
    """teacher, student: (n, L, V) logits; mask (n, L). Mean over masked positions of KL(p_T || q_T)."""
    logp = (teacher.float() / temperature).log_softmax(-1)
    logq = (student.float() / temperature).log_softmax(-1)
    kl = (logp.exp() * (logp - logq)).sum(-1)  # (n, L)
    return (kl * mask).sum() / mask.sum().clamp(min=1)


@torch.no_grad()
def forward_seconds(model, batch: int = 64, repeats: int = 15) -> float:
    """Median seconds of a (batch, 1) forward (decode-sized; tiny models are overhead-bound)."""
    ids = torch.ones(batch, 1, dtype=torch.long)
    times = []
    for _ in range(repeats + 2):
        t = time.perf_counter()
        model(ids)
        times.append(time.perf_counter() - t)
    return statistics.median(times[2:])


def distill_draft(policy_dir: Path, cache: Path, task: DemoTask, spec: DraftParams, progress=None) -> Path:
    """Folder of the draft distilled from the policy at policy_dir (trained once per spec and policy,
    then cached)."""
    folder = Path(cache) / f"demo-draft-{spec.key(policy_dir)}"
    if (folder / "config.json").is_file() and (folder / "draft_meta.json").is_file():
        return folder
    t0 = time.perf_counter()
    policy, tok = load(policy_dir)
    policy.eval()
    train = policy_rollouts(policy, tok, task, spec.samples, "train", spec.seed, spec)
    held = policy_rollouts(policy, tok, task, spec.eval_samples, "test", spec.seed + 1, spec)
    gen_s = time.perf_counter() - t0
    eos = policy.args.eos_token_ids[0]
    arch = WarmStartParams(hidden=spec.hidden, layers=spec.layers, heads=spec.heads, kv_heads=spec.kv_heads,
                         intermediate=spec.intermediate)
    torch.manual_seed(spec.seed)
    draft = init_random(build_model(model_args(arch, policy.args.vocab_size, eos)), std=0.02, seed=spec.seed)
    opt = torch.optim.AdamW(draft.parameters(), lr=spec.lr, weight_decay=0.0, betas=(0.9, 0.98))
    rng = random.Random(spec.seed)
    t1, kls = time.perf_counter(), []
    draft.train()
    for step in range(1, spec.steps + 1):
        for g in opt.param_groups:
            g["lr"] = spec.lr * 0.5 * (1 + math.cos(math.pi * step / spec.steps))
        ids, mask = pack(rng.sample(train, min(spec.batch, len(train))), tok.pad_token_id)
        with torch.no_grad():
            teacher = policy(ids[:, :-1])  # (n, L-1, V)
        loss = kl_loss(teacher, draft(ids[:, :-1]), mask, spec.temperature)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        kls.append(loss.item())
        if progress:
            progress(step, spec.steps, kls[-1])
    draft.eval()
    tail = kls[-max(1, min(20, len(kls) // 5)):]
    n_params = [sum(p.numel() for p in m.parameters()) for m in (draft, policy)]
    meta = {
        "spec": asdict(spec), "policy": str(policy_dir),
        "train_rollouts": len(train), "heldout_rollouts": len(held),
        "kl_first": kls[0], "kl_final": sum(tail) / len(tail),
        "keyed_acceptance": keyed_acceptance(draft, held, spec.seed + 1, spec.temperature, tok.pad_token_id),
        "heldout_tokens": sum(len(r.token_ids) for r in held),
        "param_ratio": n_params[0] / n_params[1],
        "forward_time_ratio": forward_seconds(draft) / forward_seconds(policy),
        "generate_seconds": gen_s, "train_seconds": time.perf_counter() - t1,
    }
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_hf(draft, tmp, tokenizer=tok)
    (tmp / "draft_meta.json").write_text(json.dumps(meta, indent=1))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


# about a minute of 1-thread CPU (rollouts + distillation): many small steps beat few large ones
DEMO_DRAFT_SPEC = DraftParams(heads=4, kv_heads=2, steps=2400, batch=8)


def demo_draft(progress=None) -> Path:
    """Folder of the demo policy's draft (distilled once, then cached next to the policy)."""

    return distill_draft(demo_policy(), cache_dir() / "demo", DEMO_TASK, DEMO_DRAFT_SPEC, progress=progress)
