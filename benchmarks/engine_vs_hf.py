"""Side-by-side benchmark: tailrl's rollout engine vs Hugging Face `generate`, long-tailed lengths.

One run, one model, one set of prompts, two systems:

* **HF (synchronous static batch)** -- `model.generate` on the left-padded batch of all B prompts with
  `max_new_tokens = max(lengths)` and EOS disabled (`eos_token_id=None` in the generation config, so no
  row stops early; the output length is checked). A static batch runs until its *longest* member
  finishes: every one of the B rows is decoded for max(lengths) steps and the tokens past each
  request's own length are thrown away. That is exactly what a synchronous rollout built on HF
  `generate` does (TRL-style GRPO/PPO rollouts), so its wall time is the baseline.
* **tailrl** -- `Engine.generate` on the same prompts, one `Request` per prompt (n=1, uid = index),
  each with its forced length via `Request.max_new_tokens=[length]` and `ignore_eos=True`. Continuous
  batching drops a sequence the moment it reaches its length, so the batch shrinks as the tail runs.

Both produce exactly `lengths[i]` useful tokens for request i, so "useful tokens/s" =
sum(lengths) / wall is comparable; the ratio printed is HF wall / tailrl wall (> 1: tailrl faster).

Lengths: lognormal with median `--median` and shape `--sigma`, rounded and clipped to [`--min-len`,
`--max-len`], with the largest one forced to `--max-len` (one straggler of the full budget), seeded.
Prompts: random token ids (3..vocab-1) of length 16..48, seeded. The model is a random-init
LlamaForCausalLM (transformers) copied into tailrl's native decoder with `load_weights`, so both run
the same weights (`--size small`: hidden 256, 4 layers, vocab 2048, the default on CPU, where a
static batch of 64 x 1024 steps of the 135M shape would take far too long; `--size smollm`: the
SmolLM2-135M shape, 30 layers, vocab 49152, tied embeddings, the default on CUDA). The random weights give near-uniform
next-token distributions, which does not matter here: lengths are forced.

Sampling: by default both sample at temperature 1.0 with no top-k/top-p (HF: do_sample=True, top_k=0,
top_p=1.0; tailrl: its keyed inverse-CDF sampler). `--temperature 0` makes both greedy. The tokens
themselves differ between the two systems (different RNGs); only the amount of work is the same.

Warm-up: a tiny generate on both systems before timing. On CUDA the first full run also pays
one-off per-shape costs (tailrl's batch and context length change every step), so use `--repeat 2`
for steady-state numbers; the fastest run of each system is reported and all walls go to the JSON. Wall time is perf_counter around the call,
with `torch.cuda.synchronize()` before the clock stops on CUDA.

    python benchmarks/engine_vs_hf.py                                 # defaults (B=64, median 64, max 1024)
    python benchmarks/engine_vs_hf.py --size smollm --threads 2 --json out/bench.json
    python benchmarks/engine_vs_hf.py --device cuda --dtype bfloat16 --size smollm
    python benchmarks/engine_vs_hf.py --skip-hf --profile cprofile     # where tailrl spends its time

`--profile cprofile|torch` runs tailrl once more (after the timed runs, so timings are unaffected)
under cProfile or torch.profiler and prints the top entries by self time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from tailrl.config import EngineConfig
from tailrl.engine import Engine, Request, SamplingParams
from tailrl.engine.telemetry import len_max_over_median
from tailrl.model import ModelArgs, build_model, load_weights

SIZES = {
    "small": dict(vocab_size=2048, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False),
    "smollm": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                   num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True),
}
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2


# -- workload -------------------------------------------------------------------------------------
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


# -- models ---------------------------------------------------------------------------------------
def hf_config_dict(size: str, max_pos: int) -> dict:
    cfg = dict(SIZES[size])
    cfg.update(architectures=["LlamaForCausalLM"], model_type="llama", max_position_embeddings=max_pos,
               rms_norm_eps=1e-5, rope_theta=10000.0 if size == "small" else 100000.0, hidden_act="silu",
               bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID, initializer_range=0.02)
    return cfg


def build_models(size: str, max_pos: int, dtype: torch.dtype, device: str, seed: int):
    """(hf, native): a random-init transformers Llama and tailrl's decoder with the same weights."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = hf_config_dict(size, max_pos)
    conf = LlamaConfig(**{k: v for k, v in cfg.items() if k != "model_type"})
    torch.manual_seed(seed)
    hf = AutoModelForCausalLM.from_config(conf, attn_implementation="sdpa", dtype=torch.float32)
    hf = hf.to(device=device, dtype=dtype).eval()
    # forced lengths: no EOS stopping in HF (the output length is checked after generate)
    hf.generation_config.eos_token_id = None
    hf.generation_config.pad_token_id = PAD_ID
    args = ModelArgs.from_hf(conf.to_dict())
    native = build_model(args, dtype, device)
    load_weights(native, hf.state_dict().items())
    return hf, native.eval()


# -- the two systems ------------------------------------------------------------------------------
def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def left_pad(prompts: list[list[int]], device: str) -> tuple[torch.Tensor, torch.Tensor]:
    P = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), P), PAD_ID, dtype=torch.long)
    mask = torch.zeros((len(prompts), P), dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, P - len(p):] = torch.tensor(p)
        mask[b, P - len(p):] = 1
    return ids.to(device), mask.to(device)


def run_hf(hf, prompts: list[list[int]], new_tokens: int, temperature: float, device: str, seed: int) -> dict:
    ids, mask = left_pad(prompts, device)
    kw = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else dict(do_sample=False)
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
    return {"wall_s": wall, "generated_tokens": int(out.shape[0] * generated), "steps": generated,
            "mean_step_ms": wall / generated * 1e3}


def make_requests(prompts, lengths, temperature: float, seed: int) -> list[Request]:
    return [Request(list(p), uid=i, n=1,
                    params=SamplingParams(temperature=temperature, max_new_tokens=n, ignore_eos=True, seed=seed),
                    max_new_tokens=[n])
            for i, (p, n) in enumerate(zip(prompts, lengths))]


def run_tailrl(engine: Engine, prompts, lengths, temperature: float, device: str, seed: int):
    requests = make_requests(prompts, lengths, temperature, seed)
    sync(device)
    t0 = time.perf_counter()
    rollouts, trace = engine.generate(requests)
    sync(device)
    wall = time.perf_counter() - t0
    bad = [(r.uid, r.num_tokens, r.finish_reason, r.error) for r in rollouts
           if r.finish_reason != "length" or r.num_tokens != lengths[r.uid]]
    if bad or len(rollouts) != len(lengths):
        raise RuntimeError(f"tailrl rollouts do not match the forced lengths: {bad[:5]} ({len(rollouts)} rollouts)")
    return {"wall_s": wall, "generated_tokens": sum(r.num_tokens for r in rollouts), "steps": len(trace.steps)}, trace


def trace_details(trace, lengths: list[int], batch: int) -> dict:
    """Straggler/tail facts from the trace, for the report and for optimising per-step overheads."""
    decode = [s for s in trace.steps if s.kind == "decode"]
    prefill = [s for s in trace.steps if s.kind == "prefill"]

    def step_ms(pred) -> float | None:
        ts = [(s.t1 - s.t0) * 1e3 for s in decode if pred(s.batch)]
        return statistics.median(ts) if ts else None

    small = max(1, batch // 8)
    t_small = sum(s.t1 - s.t0 for s in decode if s.batch <= small)
    steps_time = sum(s.t1 - s.t0 for s in trace.steps)
    b1 = trace.b1_step_time()
    return {
        "decode_steps": len(decode),
        "prefill_steps": len(prefill),
        "prefill_s": sum(s.t1 - s.t0 for s in prefill),
        "decode_s": sum(s.t1 - s.t0 for s in decode),
        "outside_forward_steps_s": trace.t_end - steps_time,  # scheduling/bookkeeping between steps
        "mean_active_batch": statistics.mean(s.batch for s in decode) if decode else 0.0,
        f"decode_steps_at_batch<={small}": sum(1 for s in decode if s.batch <= small),
        f"time_at_batch<={small}_s": t_small,
        "median_step_ms_batch1": step_ms(lambda b: b == 1),
        f"median_step_ms_batch>={batch // 2}": step_ms(lambda b: b >= batch // 2),
        "b1_step_ms": b1 * 1e3 if b1 else None,
        "ideal_longest_at_b1_s": max(lengths) * b1 if b1 else None,  # tail_efficiency's numerator
        "batch_len_max_over_median": len_max_over_median(lengths),
    }


# -- profiling ------------------------------------------------------------------------------------
def profile_tailrl(kind: str, engine: Engine, prompts, lengths, temperature, device, seed, top: int) -> str:
    if kind == "cprofile":
        import cProfile
        import io
        import pstats

        pr = cProfile.Profile()
        pr.enable()
        run_tailrl(engine, prompts, lengths, temperature, device, seed)
        pr.disable()
        buf = io.StringIO()
        st = pstats.Stats(pr, stream=buf)
        buf.write(f"== cProfile of tailrl generate: top {top} by self time (tottime) ==\n")
        st.sort_stats("tottime").print_stats(top)
        buf.write(f"== cProfile of tailrl generate: top {top} by cumulative time ==\n")
        st.sort_stats("cumulative").print_stats(top)
        return buf.getvalue()
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=acts) as prof:
        run_tailrl(engine, prompts, lengths, temperature, device, seed)
    key = "self_cuda_time_total" if device.startswith("cuda") else "self_cpu_time_total"
    return (f"== torch.profiler of tailrl generate: top {top} ops by {key} ==\n"
            + prof.key_averages().table(sort_by=key, row_limit=top))


# -- main -----------------------------------------------------------------------------------------
def fmt(x, nd=2) -> str:
    if x is None:
        return "-"
    return f"{x:.{nd}f}" if isinstance(x, float) else str(x)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=64, help="requests B (default 64)")
    ap.add_argument("--median", type=float, default=64, help="median forced length (default 64)")
    ap.add_argument("--sigma", type=float, default=1.0, help="lognormal shape of the lengths (default 1.0)")
    ap.add_argument("--min-len", type=int, default=8)
    ap.add_argument("--max-len", type=int, default=1024, help="length budget; the longest request gets it")
    ap.add_argument("--prompt-len", type=int, nargs=2, default=[16, 48], metavar=("LO", "HI"))
    ap.add_argument("--size", choices=sorted(SIZES), default=None,
                    help="model shape (default: small on cpu, smollm on cuda)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu | cuda")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default=None,
                    help="default: float32 on cpu, bfloat16 on cuda")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: os.cpu_count())")
    ap.add_argument("--temperature", type=float, default=1.0, help="both systems; 0 = greedy for both")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kv-cache-tokens", type=int, default=0, help="tailrl KV capacity (default: enough for all)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="timed runs per system; the fastest is reported (default 1)")
    ap.add_argument("--skip-hf", action="store_true", help="time tailrl only (e.g. with --profile)")
    ap.add_argument("--profile", choices=["cprofile", "torch"], default=None,
                    help="after the timed runs, profile one more tailrl run and print the top entries")
    ap.add_argument("--profile-top", type=int, default=15)
    ap.add_argument("--json", default=None, metavar="OUT", help="write the results as JSON here")
    a = ap.parse_args(argv)

    device = a.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("--device cuda but torch.cuda.is_available() is False")
    a.size = a.size or ("smollm" if device.startswith("cuda") else "small")
    dtype_name = a.dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    threads = a.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)

    lengths = make_lengths(a.batch, a.median, a.sigma, a.min_len, a.max_len, a.seed)
    vocab = SIZES[a.size]["vocab_size"]
    prompts = make_prompts(a.batch, vocab, a.prompt_len[0], a.prompt_len[1], a.seed)
    max_pos = max(2048, 1 << math.ceil(math.log2(max(a.prompt_len) + a.max_len + 1)))

    t_build = time.perf_counter()
    hf, native = build_models(a.size, max_pos, dtype, device, a.seed)
    n_params = sum(p.numel() for p in native.parameters())
    block = 16
    need = sum(block * -(-(len(p) + n + 1) // block) for p, n in zip(prompts, lengths))
    kv_tokens = a.kv_cache_tokens or need + 4 * block * 4  # room for all + warm-up/calibration slack
    engine = Engine(native, EngineConfig(kv_cache_tokens=kv_tokens, block_size=block, max_batch_size=a.batch),
                    eos_ids=[EOS_ID])
    t_build = time.perf_counter() - t_build

    useful = sum(lengths)
    print(f"model: {a.size} random-init Llama, {n_params / 1e6:.1f}M params, {dtype_name} on {device} "
          f"({threads} threads); torch {torch.__version__}; built in {t_build:.1f}s")
    print(f"workload: B={a.batch}, prompts {min(map(len, prompts))}..{max(map(len, prompts))} tokens, "
          f"lengths lognormal(median {a.median:g}, sigma {a.sigma:g}) clipped to [{a.min_len}, {a.max_len}]: "
          f"min {min(lengths)}, median {statistics.median(lengths):g}, mean {statistics.mean(lengths):.1f}, "
          f"max {max(lengths)}, sum {useful}; temperature {a.temperature:g}; tailrl KV {kv_tokens} tokens")
    sys.stdout.flush()

    # warm-up: a tiny generate on both
    wp, wl = prompts[:2], [4, 4]
    run_tailrl(engine, wp, wl, a.temperature, device, a.seed + 99)
    if not a.skip_hf:
        run_hf(hf, wp, 4, a.temperature, device, a.seed)

    # each system runs --repeat times; the table reports the fastest (later runs have every shape warm)
    results: dict[str, dict] = {}
    if not a.skip_hf:
        walls = []
        for i in range(a.repeat):
            print(f"running HF generate (static batch of {a.batch}, {max(lengths)} steps) [{i + 1}/{a.repeat}] ...",
                  flush=True)
            r = run_hf(hf, prompts, max(lengths), a.temperature, device, a.seed)
            walls.append(r["wall_s"])
            print(f"  HF done in {r['wall_s']:.1f}s", flush=True)
            if r["wall_s"] <= min(walls):
                results["hf_generate"] = r
        results["hf_generate"]["walls_s"] = walls
    walls = []
    for i in range(a.repeat):
        print(f"running tailrl Engine.generate [{i + 1}/{a.repeat}] ...", flush=True)
        r, tr = run_tailrl(engine, prompts, lengths, a.temperature, device, a.seed)
        walls.append(r["wall_s"])
        print(f"  tailrl done in {r['wall_s']:.1f}s", flush=True)
        if r["wall_s"] <= min(walls):
            results["tailrl"], trace = r, tr
    results["tailrl"]["walls_s"] = walls
    for r in results.values():
        r["useful_tokens"] = useful
        r["useful_tokens_per_s"] = useful / r["wall_s"]

    print()
    if a.repeat > 1:
        print(f"(fastest of {a.repeat} timed runs per system)")
    print(f"{'system':<14}{'wall s':>10}{'generated tok':>15}{'useful tok':>12}{'useful tok/s':>14}{'forwards':>10}")
    for name, r in results.items():
        print(f"{name:<14}{r['wall_s']:>10.2f}{r['generated_tokens']:>15}{r['useful_tokens']:>12}"
              f"{r['useful_tokens_per_s']:>14.1f}{r['steps']:>10}")
    ratio = results["hf_generate"]["wall_s"] / results["tailrl"]["wall_s"] if "hf_generate" in results else None
    if ratio is not None:
        print(f"\nwall-clock ratio HF / tailrl = {ratio:.2f}x  (HF wastes "
              f"{1 - useful / results['hf_generate']['generated_tokens']:.0%} of its generated tokens; "
              f"HF mean step {results['hf_generate']['mean_step_ms']:.1f} ms at batch {a.batch})")

    summary = trace.summary()
    details = trace_details(trace, lengths, a.batch)
    print("\ntailrl trace.summary():")
    for k, v in summary.items():
        print(f"  {k:<32}{fmt(v, 4)}")
    print("tailrl tail / straggler details (n=1 per prompt, so the per-group straggler_rate and "
          "len_max_over_median above are 0; batch_len_max_over_median is over all B):")
    for k, v in details.items():
        print(f"  {k:<32}{fmt(v, 3)}")

    prof_text = None
    if a.profile:
        print(flush=True)
        prof_text = profile_tailrl(a.profile, engine, prompts, lengths, a.temperature, device, a.seed, a.profile_top)
        print(prof_text)

    out = {
        "config": {**vars(a), "device": device, "dtype": dtype_name, "threads": threads, "kv_cache_tokens": kv_tokens,
                   "params": n_params, "torch": torch.__version__, "platform": platform.platform()},
        "lengths": lengths,
        "prompt_lengths": [len(p) for p in prompts],
        "results": results,
        "ratio_hf_over_tailrl": ratio,
        "tailrl_summary": summary,
        "tailrl_details": details,
        "profile": prof_text,
    }
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(out, indent=2))
        print(f"\nwrote {a.json}")
    return out


if __name__ == "__main__":
    main()
