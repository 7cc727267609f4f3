"""The long-tailed workload of `tailrl bench engine`: tailrl's engine vs Hugging Face `generate`, one model,
one set of prompts, forced lengths.

* HF (a synchronous static batch): `model.generate` on the left-padded batch of all B prompts with
  max_new_tokens = max(lengths) and EOS disabled, so every row is decoded for the longest length and the
  tokens past each request's own length are thrown away: what a rollout built on HF generate does
  (TRL-style). Run twice: HF's default (dynamic) KV cache, and its static cache
  (`cache_implementation="static"`, the strongest HF baseline: fixed shapes, torch.compile-friendly).
* tailrl: `Engine.generate` on the same prompts, one Request per prompt with its forced length
  (`max_new_tokens=[length]`, ignore_eos): continuous batching drops a sequence the moment it is done.

Both produce exactly lengths[i] useful tokens for request i; the ratio is HF wall / tailrl wall. Lengths:
lognormal (median, sigma), clipped, the longest forced to the budget (one straggler). Prompts: random ids.
Both models hold the same random weights (a transformers Llama copied into the native decoder): lengths
are forced, so the weights do not matter.
"""

from __future__ import annotations

import copy
import math
import time

import numpy as np
import torch

from tailrl.config import EngineConfig, config_from_dict
from tailrl.config.loading import set_dotted
from tailrl.engine import Engine, Request, SamplingParams
from tailrl.model import ModelArgs, build_model, load_weights
from tailrl.perf.hardware import ModelShape
from tailrl.speculative import build_engine
from tailrl.tail import len_max_over_median

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2


def engine_config(overrides: dict, settings: dict) -> EngineConfig:
    """EngineConfig from the user's overrides (keys dotted or nested, as engine.* below the section), then
    this benchmark's settings for the run on top (they decide what is compared)."""
    tree: dict = {}
    for key, value in [*copy.deepcopy(overrides).items(), *settings.items()]:
        set_dotted(tree, key, value)
    return config_from_dict(tree, EngineConfig)


def make_lengths(batch: int, median: float, sigma: float, min_len: int, max_len: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(mean=math.log(median), sigma=sigma, size=batch)
    lengths = np.clip(np.rint(raw), min_len, max_len).astype(int)
    lengths[int(np.argmax(lengths))] = max_len  # the straggler: one request uses the whole budget
    return [int(x) for x in lengths]


def make_prompts(batch: int, vocab: int, lo: int, hi: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed + 1)
    lens = rng.integers(lo, hi + 1, size=batch)
    return [[int(t) for t in rng.integers(3, vocab, size=int(n))] for n in lens]


def hf_config(spec: ModelShape, arch: str, max_pos: int) -> dict:
    """A transformers config dict of a ModelShape's shape (Llama or Qwen2 family)."""
    return dict(architectures=[arch], model_type="qwen2" if arch.startswith("Qwen2") else "llama",
                vocab_size=spec.vocab, hidden_size=spec.hidden, intermediate_size=spec.intermediate,
                num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
                tie_word_embeddings=spec.tied_embeddings, max_position_embeddings=max_pos, rms_norm_eps=1e-5,
                rope_theta=100000.0, hidden_act="silu", bos_token_id=BOS_ID, eos_token_id=EOS_ID,
                pad_token_id=PAD_ID, initializer_range=0.02)


def build_pair(spec: ModelShape, arch: str, max_pos: int, dtype: torch.dtype, device: str, seed: int):
    """(hf, native): a random-init transformers model and tailrl's decoder with the same weights."""
    # lazy: transformers takes seconds to import; only the HF side of the benchmark needs it
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = hf_config(spec, arch, max_pos)
    conf = AutoConfig.for_model(cfg["model_type"], **{k: v for k, v in cfg.items() if k != "model_type"})
    torch.manual_seed(seed)
    hf = AutoModelForCausalLM.from_config(conf, attn_implementation="sdpa", dtype=torch.float32)
    hf = hf.to(device=device, dtype=dtype).eval()
    hf.generation_config.eos_token_id = None  # forced lengths: no row stops early (checked after generate)
    hf.generation_config.pad_token_id = PAD_ID
    native = build_model(ModelArgs.from_hf(conf.to_dict()), dtype, device)
    load_weights(native, hf.state_dict().items())
    return hf, native.eval()


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_hf(hf, prompts: list[list[int]], new_tokens: int, temperature: float, device: str, seed: int,
           static_cache: bool) -> dict:
    """One synchronous static batch through HF generate: the wall time and the tokens per row."""
    P = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), P), PAD_ID, dtype=torch.long)
    mask = torch.zeros((len(prompts), P), dtype=torch.long)
    for b, p in enumerate(prompts):  # left padding, as HF decoder-only generation wants
        ids[b, P - len(p):] = torch.tensor(p)
        mask[b, P - len(p):] = 1
    ids, mask = ids.to(device), mask.to(device)
    kw = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else dict(do_sample=False)
    if static_cache:
        kw["cache_implementation"] = "static"
    torch.manual_seed(seed)
    sync(device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                          eos_token_id=None, pad_token_id=PAD_ID, **kw)
    sync(device)
    wall = time.perf_counter() - t0
    generated = out.shape[1] - ids.shape[1]
    if generated != new_tokens:
        raise RuntimeError(f"HF generated {generated} tokens per row, expected {new_tokens} (EOS not disabled?)")
    return {"wall_s": wall, "steps": generated, "mean_step_ms": wall / generated * 1e3}


def run_tailrl(engine: Engine, prompts, lengths, temperature: float, device: str, seed: int) -> dict:
    requests = [Request(list(p), uid=i, n=1, max_new_tokens=[n],
                        params=SamplingParams(temperature=temperature, max_new_tokens=n, ignore_eos=True, seed=seed))
                for i, (p, n) in enumerate(zip(prompts, lengths))]
    sync(device)
    t0 = time.perf_counter()
    rollouts, trace = engine.generate(requests)
    sync(device)
    wall = time.perf_counter() - t0
    bad = [(r.uid, r.num_tokens, r.finish_reason, r.error) for r in rollouts
           if r.finish_reason != "length" or r.num_tokens != lengths[r.uid]]
    if bad or len(rollouts) != len(lengths):
        raise RuntimeError(f"tailrl rollouts do not match the forced lengths: {bad[:5]} ({len(rollouts)} rollouts)")
    decode = [s for s in trace.steps if s.kind == "decode"]
    return {"wall_s": wall, "steps": len(trace.steps), "decode_steps": len(decode),
            "mean_active_batch": float(np.mean([s.batch for s in decode])) if decode else 0.0,
            "tail_efficiency": trace.tail_efficiency()}


def long_tail(spec: ModelShape, arch: str, device: str, dtype: torch.dtype, batch: int, median: float, sigma: float,
              max_len: int, temperature: float, repeat: int, seed: int, engine_overrides: dict,
              progress=print) -> dict:
    """Side by side on one workload: HF default cache, HF static cache, tailrl (fastest of `repeat` each)."""
    lengths = make_lengths(batch, median, sigma, 8, max_len, seed)
    prompts = make_prompts(batch, spec.vocab, 16, 48, seed)
    max_pos = max(len(p) for p in prompts) + max_len + 16
    hf, native = build_pair(spec, arch, max_pos, dtype, device, seed)
    kv = sum(len(p) + n for p, n in zip(prompts, lengths)) + 16 * batch
    engine = build_engine(native, None, engine_config(engine_overrides, {"max_batch_size": batch, "kv_cache_tokens": kv,
                                                             "max_model_len": max_pos}), eos_ids=[EOS_ID])
    warm = prompts[:2]
    run_tailrl(engine, warm, [4, 4], temperature, device, seed)  # first-call costs stay out of the timings
    for static in (False, True):
        run_hf(hf, warm, 4, temperature, device, seed, static)
    runs = {"hf_dynamic_cache": [], "hf_static_cache": [], "tailrl": []}
    for _ in range(repeat):
        runs["tailrl"].append(run_tailrl(engine, prompts, lengths, temperature, device, seed))
        progress(f"  tailrl {runs['tailrl'][-1]['wall_s']:.2f}s")
        for static in (False, True):
            key = "hf_static_cache" if static else "hf_dynamic_cache"
            runs[key].append(run_hf(hf, prompts, max_len, temperature, device, seed, static))
            progress(f"  {key} {runs[key][-1]['wall_s']:.2f}s")
    best = {k: min(v, key=lambda r: r["wall_s"]) for k, v in runs.items()}
    useful = sum(lengths)
    return {"batch": batch, "lengths_sum": useful, "max_len": max_len, "len_max_over_median": len_max_over_median(lengths),
            "best": best, "runs": runs,
            "ratio_vs_hf_dynamic": best["hf_dynamic_cache"]["wall_s"] / best["tailrl"]["wall_s"],
            "ratio_vs_hf_static": best["hf_static_cache"]["wall_s"] / best["tailrl"]["wall_s"],
            "useful_tokens_per_s": {k: useful / v["wall_s"] for k, v in best.items()}}
