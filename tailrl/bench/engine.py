"""`tailrl bench engine`: the rollout engine's decode step and the long-tailed workload, side by side in one run.

1. Decode step, per model shape (random weights of SmolLM2-135M / Qwen2.5-0.5B / Qwen2.5-1.5B shapes: speed
   does not depend on them; bf16 on CUDA, fp32 on a CPU) and batch B (1, 16, 64, 256) with every sequence
   at a fixed context: the median wall time of an engine step (everything the engine does per step:
   bookkeeping, forward, keyed sampling, the host copy); kernels, launches and host syncs per step
   (torch.profiler); the fraction of the HBM roofline on CUDA = (weight bytes + K/V bytes read per step) /
   peak bandwidth / step time.
2. Keyed sampling vs the LM head's matmul at B = 64 and a 49,152 vocabulary (the CPU target: sampling costs
   no more than the head), without and with top-k / top-p; the top-k / top-p cut alone, torch radix select vs
   the Triton kernel on CUDA (also at B = 256, V = 151,936).
3. The long-tailed workload (engine_tail.py): B = 64, lognormal forced lengths up to 1024, tailrl vs HF
   generate with its default cache and its static cache.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from tailrl import kernels
from tailrl.bench.common import write_outputs
from tailrl.bench.engine_tail import engine_config, hf_config, long_tail, sync
from tailrl.engine import Request, SamplingParams
from tailrl.engine.sampling import host_flags, keyed_sample_hashed
from tailrl.engine.sampling.blocked import _weights, nucleus_floor_torch
from tailrl.errors import UserError
from tailrl.model import ModelArgs, build_model, init_random, load
from tailrl.perf.hardware import GPUS, MODELS, ModelShape
from tailrl.speculative import build_engine

os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # the profiler's start/stop lines would interleave the table

# shape name -> (architecture, spec); the specs are the simulator's presets
SHAPES = {"smollm2-135m": "LlamaForCausalLM", "qwen2.5-0.5b": "Qwen2ForCausalLM", "qwen2.5-1.5b": "Qwen2ForCausalLM"}
# the long-tailed workload's CPU default: a static HF batch of 64 x 1024 steps of the 135M shape takes far
# too long on a CPU, so there a small Llama (hidden 256, 4 layers, vocab 2048) stands in
SMALL = ModelShape("small", 4, 256, 4, 2, 704, 2048)
TINY = ModelShape("tiny", 2, 64, 4, 2, 128, 512)  # for engine.exact=strict on a CPU, where the kernels are interpreted
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC", "cudaGraphLaunch")
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")


def model_of(shape: str | ModelShape, dtype: torch.dtype, device: str, max_pos: int, seed: int = 0):
    """The native decoder of a shape ("tiny", "small", a MODELS preset, or a ModelShape) with random
    N(0, 0.02) weights."""
    named = {"tiny": TINY, "small": SMALL, **MODELS}
    if isinstance(shape, str) and shape not in named:
        raise UserError(f"unknown model shape '{shape}'; valid: {', '.join(named)}")
    spec = shape if isinstance(shape, ModelShape) else named[shape]
    arch = SHAPES.get(spec.name) or ("Qwen2ForCausalLM" if spec.name.startswith("qwen") else "LlamaForCausalLM")
    args = ModelArgs.from_hf(hf_config(spec, arch, max_pos))
    return init_random(build_model(args, dtype, device), 0.02, seed).eval()


def _gpu_preset(device: str):
    if not device.startswith("cuda"):
        return None
    name = torch.cuda.get_device_name(device).lower()
    return next((g for k, g in GPUS.items() if k in name), None)


def decode_step(model, batch: int, context: int, steps: int, warmup: int, device: str, overrides: dict) -> dict:
    """Median engine-step seconds with `batch` sequences decoding at `context` tokens, and per-step counts."""
    block = 16
    max_len = context + warmup + steps + 8
    kv = batch * (-(-max_len // block) + 1) * block
    engine = build_engine(model, None, engine_config(overrides, {"max_batch_size": batch, "kv_cache_tokens": kv, "block_size": block,
                                                     "max_model_len": max_len, "max_prefill_tokens": max(8192, context)}))
    rng = random.Random(batch)
    vocab = model.args.vocab_size
    params = SamplingParams(temperature=1.0, max_new_tokens=warmup + steps + 4, ignore_eos=True, seed=1)
    for i in range(batch):
        engine.add(Request([rng.randrange(3, vocab) for _ in range(context)], uid=i, params=params))
    with torch.inference_mode():
        while engine.scheduler.waiting:  # prefill every sequence
            engine.step()
        times = []
        for i in range(warmup + steps):
            sync(device)
            t = time.perf_counter()
            engine.step()
            sync(device)
            if i >= warmup:
                times.append(time.perf_counter() - t)
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
        with profile(activities=acts) as prof:
            engine.step()
            sync(device)
    events = prof.events()
    names = [e.name for e in events]
    out = {"batch": batch, "context": context, "step_ms": statistics.median(times) * 1e3,
           "step_ms_all": [t * 1e3 for t in times], "attention": engine.execution.attention,
           "static": engine.execution.static, "cuda_graphs": engine.execution.graphs}
    if device.startswith("cuda"):
        out["kernels"] = sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
        out["launches"] = sum(n in LAUNCHES for n in names)
        out["syncs"] = sum(n in SYNCS for n in names)
    else:
        out["ops"] = sum(1 for e in events if e.name.startswith("aten::") and e.cpu_parent is None)
    return out


def roofline_fraction(spec: ModelShape, bytes_per_param: int, batch: int, context: int, step_ms: float, gpu) -> float:
    """(weights + K/V read per decode step) / HBM peak / step time."""
    s = ModelShape(**{**spec.__dict__, "bytes_per_param": bytes_per_param})
    read = s.weight_bytes + batch * context * s.kv_bytes_per_token
    return read / (gpu.hbm_tbps * 1e12) / (step_ms / 1e3)


def _median_ms(fn, device: str, reps: int) -> float:
    """Median wall ms of fn() over reps calls after one warm-up, synchronised on device."""
    fn()
    ts = []
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


def sampler_vs_head(device: str, dtype: torch.dtype, sampler: str, batch: int = 64, vocab: int = 49152,
                    hidden: int = 576, reps: int = 10) -> dict:
    """Median ms of the LM head's matmul (batch, hidden) x (hidden, vocab) and of keyed sampling its logits."""
    g = torch.Generator(device=device).manual_seed(0)
    h = torch.randn(batch, hidden, generator=g, device=device, dtype=dtype)
    w = torch.randn(vocab, hidden, generator=g, device=device, dtype=dtype) * 0.05
    hashes = torch.arange(batch, device=device, dtype=torch.int64) * 7919
    temp, top_k, top_p = (torch.ones(batch, device=device), torch.zeros(batch, dtype=torch.long, device=device),
                          torch.ones(batch, device=device))
    flags = host_flags([1.0] * batch, [0] * batch, [1.0] * batch)

    logits = torch.nn.functional.linear(h, w).float()
    head = _median_ms(lambda: torch.nn.functional.linear(h, w), device, reps)
    sample = _median_ms(lambda: keyed_sample_hashed(logits, hashes, temp, top_k, top_p, sampler, flags), device, reps)
    k50, p95 = torch.full_like(top_k, 50), torch.full_like(top_p, 0.95)
    cut_flags = host_flags([1.0] * batch, [50] * batch, [0.95] * batch)
    cut = _median_ms(lambda: keyed_sample_hashed(logits, hashes, temp, k50, p95, sampler, cut_flags), device, reps)
    return {"batch": batch, "vocab": vocab, "hidden": hidden, "sampler": sampler, "lm_head_ms": head,
            "sampling_ms": sample, "sampling_over_head": sample / head, "sampling_cut_ms": cut}


def cut_cost(device: str, batch: int, vocab: int, reps: int = 10) -> dict:
    """The samplers' top-k = 50 / top-p = 0.95 cut alone (the floor over LM-like weights): median ms of the torch
    radix select and, on CUDA with Triton, of the kernel (kernels/radix.py), and whether their floors agree."""
    g = torch.Generator(device=device).manual_seed(1)
    logits = torch.randn(batch, vocab, generator=g, device=device) * 3
    logits[:, : vocab // 50] += 6
    p = _weights(logits, torch.ones(batch, device=device))[0]
    k, tp = torch.full((batch,), 50, device=device), torch.full((batch,), 0.95, device=device)

    res = {"batch": batch, "vocab": vocab,
           "torch_ms": _median_ms(lambda: nucleus_floor_torch(p, k, tp, True, True), device, reps)}
    if p.is_cuda and kernels.HAS_TRITON:
        res["kernel_ms"] = _median_ms(lambda: kernels.nucleus_floor(p, k, tp, True, True), device, reps)
        res["equal"] = bool(torch.equal(kernels.nucleus_floor(p, k, tp, True, True),
                                        nucleus_floor_torch(p, k, tp, True, True)))
    return res


def run_engine_bench(out_dir: str, shapes: list[str], batches: list[int], context: int, steps: int, warmup: int,
                     device: str, dtype: str, tail: bool, tail_batch: int, tail_max_len: int, tail_median: float,
                     tail_shape: str, repeat: int, overrides: dict, progress=print, sampling_batch: int = 64,
                     samplers: list[str] | None = None, model_path: str | None = None) -> dict:
    """samplers: time each decode step (and the sampling vs the LM head) once per sampler, interleaved
    (the side-by-side tokens/s of engine.sampler values); None: the engine's sampler only. model_path: decode
    with this checkpoint's real weights (a folder or a known name) instead of the random-weight shapes (a
    real model's peaked logits are what the samplers' costs depend on; random weights give flat ones)."""
    dt = getattr(torch, dtype)
    runs = [(s, overrides | {"sampler": s}) for s in samplers] if samplers else [(None, overrides)]
    gpu = _gpu_preset(device)
    res: dict = {"device": device, "gpu": torch.cuda.get_device_name(device) if device.startswith("cuda") else None,
                 "dtype": dtype, "torch": torch.__version__, "steps": [], "overrides": overrides}
    for shape in [model_path] if model_path else shapes:
        if model_path:
            model = load(model_path, dtype=dt, device=device, tokenizer=False)[0]
        else:
            model = model_of(shape, dt, device, max_pos=context + warmup + steps + 64)
        for b in batches:
            for name, opts in runs:
                r = decode_step(model, b, context, steps, warmup, device, opts)
                r["shape"], r["sampler"] = shape, engine_config(opts, {}).sampler
                if gpu is not None and shape in MODELS:
                    r["hbm_roofline"] = roofline_fraction(MODELS[shape], dt.itemsize, b, context, r["step_ms"], gpu)
                res["steps"].append(r)
                progress(f"{shape} B={b}{f' {name}' if name else ''}: {r['step_ms']:.2f} ms/step")
        del model
    res["samplings"] = [sampler_vs_head(device, dt, engine_config(opts, {}).sampler, batch=sampling_batch)
                        for _, opts in runs]
    res["sampling"] = res["samplings"][0]
    for s in res["samplings"]:
        progress(f"sampling ({s['sampler']}) {s['sampling_ms']:.2f} ms vs LM head {s['lm_head_ms']:.2f} ms")
    cuts = [(sampling_batch, 49152)] + ([(256, 151936)] if device == "cuda" else [])
    res["cuts"] = [cut_cost(device, b, v) for b, v in cuts]
    for c in res["cuts"]:
        progress(f"top-k/top-p cut B={c['batch']} V={c['vocab']}: torch {c['torch_ms']:.2f} ms"
                 + (f", kernel {c['kernel_ms']:.2f} ms (floors equal: {c['equal']})" if "kernel_ms" in c else ""))
    if tail:
        spec = SMALL if tail_shape == "small" else MODELS[tail_shape]
        res["long_tail"] = long_tail(spec, SHAPES.get(tail_shape, "LlamaForCausalLM"), device, dt,
                                     tail_batch, tail_median, 1.0, tail_max_len, 1.0, repeat, 0, overrides, progress)
    write_outputs(Path(out_dir), summary(res), res)
    return res


def summary(res: dict) -> str:
    on = res["gpu"] or "CPU"
    lines = [f"# tailrl bench engine ({on}, {res['dtype']}, torch {res['torch']})", "",
             "| shape | B | context | sampler | ms / step | attention | static | graphs | kernels | launches | syncs | "
             "ops | HBM roofline |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["steps"]:
        roof = f"{r['hbm_roofline']:.0%}" if "hbm_roofline" in r else "-"
        lines.append(f"| {r['shape']} | {r['batch']} | {r['context']} | {r.get('sampler', '-')} | {r['step_ms']:.2f} | "
                     f"{r['attention']} | {r['static']} | {r['cuda_graphs']} | {r.get('kernels', '-')} | "
                     f"{r.get('launches', '-')} | {r.get('syncs', '-')} | {r.get('ops', '-')} | {roof} |")
    lines += sampler_ratios(res["steps"])
    for s in res.get("samplings", [res["sampling"]]):
        lines += ["", f"Keyed sampling ({s['sampler']}) at B = {s['batch']}, V = {s['vocab']}: {s['sampling_ms']:.2f} ms; "
                  f"the LM head's matmul ({s['hidden']} -> {s['vocab']}): {s['lm_head_ms']:.2f} ms "
                  f"(ratio {s['sampling_over_head']:.2f}); with top-k 50 / top-p 0.95: {s['sampling_cut_ms']:.2f} ms."]
    for c in res.get("cuts", []):
        kern = (f"; the Triton kernel {c['kernel_ms']:.2f} ms ({c['torch_ms'] / c['kernel_ms']:.1f}x), floors "
                f"{'equal' if c['equal'] else 'DIFFERENT'}") if "kernel_ms" in c else ""
        lines += ["", f"The top-k / top-p cut alone at B = {c['batch']}, V = {c['vocab']}: torch radix select "
                  f"{c['torch_ms']:.2f} ms{kern}."]
    if "long_tail" in res:
        t = res["long_tail"]
        best = t["best"]
        lines += ["", f"Long-tailed workload: B = {t['batch']}, lengths up to {t['max_len']} "
                  f"(max/median {t['len_max_over_median']:.1f}), fastest of {len(t['runs']['tailrl'])}:", "",
                  "| system | wall s | useful tokens / s |", "|---|---|---|"]
        for k in ("hf_dynamic_cache", "hf_static_cache", "tailrl"):
            lines.append(f"| {k} | {best[k]['wall_s']:.2f} | {t['useful_tokens_per_s'][k]:.0f} |")
        lines += ["", f"tailrl vs HF generate: {t['ratio_vs_hf_dynamic']:.2f}x (default cache), "
                  f"{t['ratio_vs_hf_static']:.2f}x (static cache)."]
    return "\n".join(lines)


def sampler_ratios(steps: list[dict]) -> list[str]:
    """With several samplers timed: decode tokens/s of each relative to the first, per (shape, B)."""
    names = list(dict.fromkeys(r.get("sampler") for r in steps))
    if len(names) < 2:
        return []
    by = {(r["shape"], r["batch"], r["sampler"]): r["step_ms"] for r in steps}
    base = names[0]
    lines = ["", f"Decode tokens/s relative to `{base}` (same shape, batch and context, interleaved):", "",
             "| shape | B | " + " | ".join(names[1:]) + " |", "|---|---|" + "---|" * (len(names) - 1)]
    for shape, b in dict.fromkeys((r["shape"], r["batch"]) for r in steps):
        cells = [f"{by[(shape, b, base)] / by[(shape, b, n)]:.3f}x" for n in names[1:]]
        lines.append(f"| {shape} | {b} | " + " | ".join(cells) + " |")
    return lines
