"""Distil a draft model for a real policy from its own rollouts: the first layers of the policy, its tied
embedding, and an LM head over the policy's most frequent tokens (drafters/vocab_head.py).

    rollouts   the policy samples chat-formatted prompts with tailrl's engine (keyed, temperature T)
    teacher    one teacher-forced forward per chunk keeps the top-k logits at every completion position
    vocab      the `vocab` most frequent completion tokens (EOS always in): the draft's head rows
    draft      a CausalLM with the policy's layers `layers` (copied), norm and embedding (frozen); its layers
               and final norm are trained to minimise KL(teacher_T || draft_T) over the head's tokens
    meta       keyed acceptance on held-out prompts' rollouts (a second seed), the share of held-out tokens
               inside the vocabulary, and the cost of a batch-1 decode forward against the policy's

The metric is keyed acceptance (profiling/acceptance.py): the share of positions where the draft's keyed
sample equals the policy's token, which is what a verify accepts. The folder is a plain Hugging Face model
(+ draft_vocab.json, draft_meta.json), cached under a key of the parameters, the policy and the prompts.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
import statistics
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from tailrl.config import EngineConfig
from tailrl.engine import Engine, Request, Rollout, SamplingParams
from tailrl.engine.kv_cache import PagedKVCache
from tailrl.engine.runner import ModelRunner
from tailrl.model import build_model, save_hf
from tailrl.speculative.drafters.vocab_head import VOCAB_FILE, SubsetHead, restrict_vocab
from tailrl.speculative.profiling.acceptance import keyed_acceptance, pack


@dataclass(frozen=True)
class DistillParams:
    layers: tuple[int, ...] = (0, 1)  # the policy's layers the draft starts from
    vocab: int = 8192  # tokens in the draft's head (0: the whole vocabulary)
    temperature: float = 0.7  # of the rollouts and of the KL
    max_new_tokens: int = 384
    top_k: int = 64  # teacher logits kept per position
    epochs: int = 3
    batch: int = 8  # rollouts per training step
    lr: float = 1e-3
    train_head: bool = True  # train the head's rows (an untied head) as well as the layers
    seed: int = 0

    def key(self, policy: str, prompts: list[str]) -> str:
        return _digest(asdict(self), policy, prompts)

    def data_key(self, policy: str, prompts: list[str]) -> str:
        """What the rollouts and the teacher's top-k depend on (they are cached apart from the training)."""
        return _digest({k: getattr(self, k) for k in ("temperature", "max_new_tokens", "top_k", "seed")}, policy,
                       prompts)


def _digest(params: dict, policy: str, prompts: list[str]) -> str:
    """12 hex digits naming a cache entry of these parameters, policy and prompts."""
    blob = json.dumps({"p": params, "policy": policy, "prompts": prompts, "v": 1}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def rollouts(model, prompts: list[list[int]], temperature: float, max_new_tokens: int, seed: int) -> list[Rollout]:
    """One keyed rollout per prompt (uid = index), the non-empty ones (distillation data, also the demo
    draft's)."""
    sp = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    reqs = [Request(p, uid=i, n=1, params=sp) for i, p in enumerate(prompts)]
    kv = sum(len(p) for p in prompts) + len(prompts) * (max_new_tokens + 16)
    outs, _ = Engine(model, EngineConfig(kv_cache_tokens=kv)).generate(reqs)
    return [o for o in outs if o.finish_reason != "error" and o.token_ids]


@torch.no_grad()
def teacher_topk(policy, outs: list[Rollout], k: int, temperature: float, pad: int, chunk: int = 4):
    """Per rollout, the teacher's top-k (logits / T) values (C, k) and token ids (C, k) at its completion
    positions (C = its completion length)."""
    res = []
    for c in range(0, len(outs), chunk):
        part = outs[c:c + chunk]
        ids, mask = pack(part, pad)
        logits = policy(ids[:, :-1]).float() / temperature  # (n, L-1, V)
        for i in range(len(part)):
            rows = logits[i][mask[i].bool()]  # (C, V)
            v, j = rows.topk(k, dim=-1)
            res.append((v, j))
    return res


def frequent_vocab(outs: list[Rollout], size: int, always: tuple[int, ...]) -> list[int]:
    """The `size` most frequent completion tokens (ties by id), `always` included."""
    counts = Counter(t for r in outs for t in r.token_ids)
    ranked = [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    keep = list(dict.fromkeys(list(always) + ranked))
    return sorted(keep[:size])


def draft_from_policy(policy, layers: tuple[int, ...], untied: bool = False):
    """A CausalLM with the policy's embedding, final norm and head and the given layers (copies; the layers
    and norm trainable, the embedding and head frozen). untied: the head a copy of its own (to be trained)."""
    p = next(policy.parameters())
    tied = policy.args.tie_word_embeddings and not untied
    draft = build_model(replace(policy.args, num_layers=len(layers), tie_word_embeddings=tied), p.dtype, str(p.device))
    with torch.no_grad():
        draft.embed_tokens.weight.copy_(policy.embed_tokens.weight)
        draft.norm.weight.copy_(policy.norm.weight)
        for j, i in enumerate(layers):
            draft.layers[j].load_state_dict(policy.layers[i].state_dict())
        if not tied:
            src = policy.lm_head
            draft.lm_head.weight.copy_(src.tied.weight if src.tied is not None else src.weight)
    draft.embed_tokens.weight.requires_grad_(False)
    if not tied:
        draft.lm_head.weight.requires_grad_(False)
    return draft


def kl_topk(student: torch.Tensor, values: torch.Tensor, ids: torch.Tensor, slot: torch.Tensor,
            temperature: float) -> torch.Tensor:
    """student: (N, S) logits over the head's S tokens; values / ids: (N, k) teacher top-k (logits / T) and
    token ids; slot: (V,) head column of each token or -1. Mean KL(teacher || student) at temperature T, the
    teacher's top-k renormalised over the tokens the head has."""
    col = slot[ids]  # (N, k)
    inside = col >= 0
    p = values.masked_fill(~inside, float("-inf")).softmax(-1)  # (N, k)
    logq = (student.float() / temperature).log_softmax(-1).gather(1, col.clamp(min=0))  # (N, k)
    kl = (p * (p.clamp(min=1e-30).log() - logq)).masked_fill(~inside, 0.0).sum(-1)
    return kl[inside.any(-1)].mean()


def train_draft(draft, outs: list[Rollout], teacher, vocab: list[int], params: DistillParams, pad: int,
                progress=None) -> list[float]:
    """Train the draft's layers and final norm (and with params.train_head its head's rows) on the teacher's
    top-k; returns the loss per step."""
    full_head = draft.lm_head
    w = full_head.tied.weight if full_head.tied is not None else full_head.weight
    ids_t = torch.tensor(vocab, dtype=torch.long)
    sub = SubsetHead(w, ids_t, len(vocab), scatter=False)  # (.., S) logits while training
    if params.train_head:
        sub.weight = torch.nn.Parameter(sub.weight)  # (S, hidden): the buffer becomes trainable
    draft.lm_head = sub
    slot = torch.full((draft.args.vocab_size,), -1, dtype=torch.long)
    slot[ids_t] = torch.arange(len(vocab))
    trainable = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=params.lr, weight_decay=0.0, betas=(0.9, 0.98))
    rng = random.Random(params.seed)
    order = list(range(len(outs)))
    per_epoch = math.ceil(len(outs) / params.batch)
    steps = params.epochs * per_epoch
    losses = []
    draft.train()
    for step in range(steps):
        b = step % per_epoch
        if b == 0:
            rng.shuffle(order)
        idx = order[b * params.batch:(b + 1) * params.batch]
        ids, mask = pack([outs[i] for i in idx], pad)
        student = draft(ids[:, :-1])[mask.bool()]  # (N, S): completion positions, rollout by rollout
        values = torch.cat([teacher[i][0] for i in idx])
        tids = torch.cat([teacher[i][1] for i in idx])
        for g in opt.param_groups:
            g["lr"] = params.lr * 0.5 * (1 + math.cos(math.pi * step / steps))
        loss = kl_topk(student, values, tids, slot, params.temperature)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        losses.append(loss.item())
        if progress:
            progress(step + 1, steps, losses[-1])
    draft.eval()
    draft.lm_head = full_head
    if params.train_head:
        with torch.no_grad():
            full_head.weight[ids_t] = sub.weight.detach()  # an untied head (draft_from_policy(untied=True))
    return losses


@torch.no_grad()
def decode_forward_s(model, ctx: int = 512, reps: int = 9) -> float:
    """Median seconds of one batch-1 decode forward at context ctx over the paged cache (the tail's step)."""
    cache = PagedKVCache(model, ctx + 64, 16)
    runner = ModelRunner(model, cache)
    cache.ensure(0, 0, ctx)
    runner.forward([0], [0], [[5] * ctx])
    times = []
    for _ in range(reps):
        cache.ensure(0, ctx, 1)
        t = time.perf_counter()
        runner.forward([0], [ctx], [[7]])
        times.append(time.perf_counter() - t)
        cache.truncate(0, ctx)
    return statistics.median(times)


def distill_data(policy, name: str, train: list[list[int]], held: list[list[int]], params: DistillParams,
                 cache: Path, pad: int, log=print) -> dict:
    """The rollouts of train and held prompts and the teacher's top-k on the train ones, cached (an hour of a
    2-core CPU for SmolLM2's 256 prompts: worth keeping while the training is tuned)."""
    path = Path(cache) / f"data-{params.data_key(name, [str(p) for p in train + held])}.pt"
    if path.is_file():
        d = torch.load(path)
        d["train"] = [Rollout(**r) for r in d["train"]]
        d["held"] = [Rollout(**r) for r in d["held"]]
        return d
    t0 = time.perf_counter()
    policy.eval()
    log(f"distillation data: {len(train)} + {len(held)} rollouts of {name} at T={params.temperature}, "
        f"{params.max_new_tokens} tokens max, then the teacher's top-{params.top_k}")
    outs = rollouts(policy, train, params.temperature, params.max_new_tokens, params.seed)
    held_outs = rollouts(policy, held, params.temperature, params.max_new_tokens, params.seed + 1)
    gen_s = time.perf_counter() - t0
    teacher = teacher_topk(policy, outs, params.top_k, params.temperature, pad)
    d = {"train": outs, "held": held_outs, "teacher": teacher, "generate_seconds": gen_s,
         "teacher_seconds": time.perf_counter() - t0 - gen_s}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({**d, "train": [asdict(r) for r in outs], "held": [asdict(r) for r in held_outs]}, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").rename(path)
    return d


def distill_draft(policy, tok, name: str, train: list[list[int]], held: list[list[int]], params: DistillParams,
                  cache: Path, progress=None, log=print) -> Path:
    """The draft folder for `policy` (called `name` in the cache key) distilled from its rollouts of the
    `train` prompts (token ids), evaluated on `held`; built once per key, then read from `cache`."""
    folder = Path(cache) / f"draft-{params.key(name, [str(p) for p in train + held])}"
    if (folder / "config.json").is_file() and (folder / "draft_meta.json").is_file():
        return folder
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    data = distill_data(policy, name, train, held, params, cache, pad, log)
    outs, held_outs, teacher = data["train"], data["held"], data["teacher"]
    eos = tuple(policy.args.eos_token_ids)
    vocab = frequent_vocab(outs, params.vocab, eos) if params.vocab else list(range(policy.args.vocab_size))
    t1 = time.perf_counter()
    draft = draft_from_policy(policy, params.layers, untied=params.train_head)
    losses = train_draft(draft, outs, teacher, vocab, params, pad, progress)
    train_s = time.perf_counter() - t1
    held_tokens = [t for r in held_outs for t in r.token_ids]
    vs = set(vocab)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_hf(draft, tmp, tokenizer=tok)
    (tmp / VOCAB_FILE).write_text(json.dumps(vocab))
    restrict_vocab(draft, vocab)
    before = draft_from_policy(policy, params.layers)
    restrict_vocab(before, vocab)
    tail = losses[-max(1, len(losses) // 10):]
    meta = {
        "params": asdict(params), "policy": name, "train_rollouts": len(outs), "heldout_rollouts": len(held_outs),
        "train_tokens": sum(len(r.token_ids) for r in outs), "heldout_tokens": len(held_tokens),
        "kl_first": losses[0], "kl_final": sum(tail) / len(tail),
        "vocab_coverage_heldout": sum(t in vs for t in held_tokens) / max(len(held_tokens), 1),
        "keyed_acceptance": keyed_acceptance(draft, held_outs, params.seed + 1, params.temperature, pad),
        "keyed_acceptance_before": keyed_acceptance(before.eval(), held_outs, params.seed + 1, params.temperature, pad),
        "forward_time_ratio": decode_forward_s(draft) / decode_forward_s(policy),
        "generate_seconds": data["generate_seconds"], "teacher_seconds": data["teacher_seconds"],
        "train_seconds": train_s,
    }
    (tmp / "draft_meta.json").write_text(json.dumps(meta, indent=1))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    log(f"draft: keyed acceptance {meta['keyed_acceptance']:.3f} (before training "
        f"{meta['keyed_acceptance_before']:.3f}), forward {meta['forward_time_ratio']:.3f}x the policy's, "
        f"held-out tokens in its vocabulary {meta['vocab_coverage_heldout']:.1%} -> {folder}")
    return folder
