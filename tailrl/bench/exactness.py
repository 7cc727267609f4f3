"""`tailrl bench exactness`: how often the engine's tokens really are independent of how they were computed
(issue "Strict exactness on GPU", item 1: measure first), for one engine.exact mode.

The contract (ARCHITECTURE.md, Exactness) makes every token a function of its logits row and its key, so a
rollout should not depend on batch composition, speculation, CUDA graphs or the TP layout; float reductions
whose order depends on the row count can still move a logit and flip a near-tie. On one set of requests
(random prompts x G samples, forced lengths, temperature 1, a random-weight model of a real shape):

    reference     every request alone (engine.max_batch_size=1)
    batch B       all requests submitted at once, max_batch_size=B (16, 64, 256)
    speculation   engine.spec.method=auto (history + ngram drafters), gate off, at the largest B: a cold
                  rollout (random-weight outputs give the drafters almost nothing: verify forwards of
                  mostly 1-token windows and Best-of-N trees of rejected drafts), then a warm one on the
                  same engine, where the history drafter replays the first rollout of each sample and long
                  drafts are verified and accepted
    graphs        engine.cuda_graphs true vs false at the largest B (CUDA only)
    TP            2 ranks over gloo (tailrl.parallel.tp_generate, CPU fp32) vs one process, largest B

Each is compared with the reference (and with its own plain twin) by exactness_stats.compare_runs; the
largest batch's rollout logprobs are also compared with the trainer's forward of the same tokens
(make_train_batch + train.update.batch_logprobs). Writes summary.md and result.json.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from tailrl.bench.common import write_outputs
from tailrl.bench.engine import model_of
from tailrl.bench.engine_tail import engine_config, make_prompts, sync
from tailrl.bench.exactness_stats import compare_runs, summary, token_deltas
from tailrl.config import EngineConfig, TrainConfig
from tailrl.engine import Engine, Request, Rollout, SamplingParams
from tailrl.model import build_model, load_weights
from tailrl.model.weights import full_tensors
from tailrl.parallel.dist import spawn
from tailrl.parallel.layout import Layout
from tailrl.parallel.rollout import tp_generate
from tailrl.perf.hardware import ModelShape
from tailrl.speculative import build_engine
from tailrl.train.batch import make_train_batch
from tailrl.train.update import batch_logprobs

GROUP = 8  # samples per prompt (a GRPO group): siblings share the prompt's prefill
PROMPT_LEN = (16, 48)  # random prompt lengths, inclusive
SPEC = {"spec.method": "auto", "spec.gate": False}  # gate off: speculate at every step, even where it costs
TP_WORLD = 2
def make_requests(sequences: int, new_tokens: int, vocab: int, seed: int, group: int = GROUP) -> list[Request]:
    """ceil(sequences / group) random prompts with `group` samples each (the last one the remainder), every
    sample forced to exactly new_tokens tokens at temperature 1."""
    prompts = make_prompts(-(-sequences // group), vocab, *PROMPT_LEN, seed)
    params = SamplingParams(temperature=1.0, max_new_tokens=new_tokens, ignore_eos=True, seed=seed)
    return [Request(list(p), uid=i, n=min(group, sequences - i * group), params=params) for i, p in enumerate(prompts)]


def timed_generate(engine: Engine, requests: list[Request], new_tokens: int, device: str) -> tuple[list, dict]:
    """One rollout of `requests`: (rollouts sorted by (uid, sample index), cost and speculation counts)."""
    sync(device)
    t0 = time.perf_counter()
    rollouts, trace = engine.generate(requests)
    sync(device)
    wall = time.perf_counter() - t0
    bad = [(r.uid, r.sample_index, r.num_tokens, r.finish_reason, r.error) for r in rollouts
           if r.finish_reason != "length" or r.num_tokens != new_tokens]
    if bad:
        raise RuntimeError(f"rollouts do not have the forced length {new_tokens}: {bad[:5]}")
    info = {"max_batch_size": engine.config.max_batch_size, "wall_s": wall, "forwards": len(trace.steps)}
    if engine.config.spec.method != "none":
        verify = [s for s in trace.steps if s.kind == "verify"]
        info |= {"verify_steps": len(verify),
                 "tokens_per_verify_row": sum(s.tokens for s in verify) / max(1, sum(s.batch for s in verify)),
                 "acceptance": trace.spec.get("spec/acceptance_rate"), "spec": dict(trace.spec)}
    return rollouts, info


def _tp_rank(rank: int, world: int, args, tensors: list, requests: list, cfg: EngineConfig) -> list | None:
    """One rank of the TP run (a spawned process): every rank gets all rollouts; rank 0 hands them back."""
    res = tp_generate(rank, world, args, tensors, requests, cfg, Layout(world, world))
    return res.rollouts if rank == 0 else None


def tp_unsupported(args) -> str | None:
    """Why the model cannot be split over TP_WORLD ranks, or None."""
    if args.num_heads % TP_WORLD or args.num_kv_heads % TP_WORLD or args.intermediate_size % TP_WORLD:
        return (f"TP{TP_WORLD} needs heads ({args.num_heads} query, {args.num_kv_heads} KV) and MLP width "
                f"({args.intermediate_size}) divisible by {TP_WORLD}")
    return None


def trainer_logprobs(model, rollouts: list[Rollout]) -> list[list[float]]:
    """The trainer's no-grad logprob forward of each rollout's tokens (temperature 1, the default
    micro-batches and LM-head chunking), one list per rollout."""
    device = str(next(model.parameters()).device)
    batch = make_train_batch([r.prompt_ids for r in rollouts], [r.token_ids for r in rollouts],
                             torch.zeros(len(rollouts)), device=device)
    tc = TrainConfig()
    lp = batch_logprobs(model, batch, tc.micro_batch_size, 1.0, chunk_rows=tc.logprob_chunk_rows)
    return [row[: r.num_tokens] for row, r in zip(lp.double().cpu().tolist(), rollouts)]


def _rows(rollouts: list[Rollout]) -> tuple[list, list, list]:
    return ([(r.uid, r.sample_index) for r in rollouts], [r.token_ids for r in rollouts],
            [r.logprobs for r in rollouts])


def run_exactness_bench(out_dir: str | Path, sequences: int = 1000, new_tokens: int = 256,
                        shape: str | ModelShape = "small", device: str | None = None, dtype: str | None = None,
                        exact: str = "fast", batches=(1, 16, 64, 256), spec: bool = True, tp: bool = True,
                        engine_overrides: dict | None = None, seed: int = 0, progress=print) -> dict:
    """Token identity of the same requests across batch sizes, speculation, CUDA graphs and TP layouts for
    engine.exact=`exact`, and rollout vs trainer logprobs (module docstring). Returns the result dict
    (also written to out_dir/result.json, with out_dir/summary.md)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device.startswith("cuda")
    dt = getattr(torch, dtype or ("bfloat16" if cuda else "float32"))
    overrides = dict(engine_overrides or {})
    model = model_of(shape, dt, device, PROMPT_LEN[1] + new_tokens + 64, seed)
    requests = make_requests(sequences, new_tokens, model.args.vocab_size, seed)
    big = max(batches)
    plain = {"spec.method": "none"}  # every run but the speculative ones decodes plainly, whatever the overrides
    runs, outs, comparisons, notes = {}, {}, [], []
    t_start = time.perf_counter()

    def build(b: int, settings: dict, on=model) -> Engine:
        return build_engine(on, None, engine_config(overrides, {"max_batch_size": b, "exact": exact, **settings}))

    def run(name: str, engine: Engine, close: bool = True) -> None:
        outs[name], runs[name] = timed_generate(engine, requests, new_tokens, device)
        if close:
            engine.close()
        progress(f"{name}: {runs[name]['wall_s']:.1f} s ({time.perf_counter() - t_start:.0f} s so far)")

    def compare(name: str, vs: str) -> None:
        (ka, ta, la), (kb, tb, lb) = _rows(outs[vs]), _rows(outs[name])
        if ka != kb:
            raise RuntimeError(f"{name} and {vs} returned different request samples")
        comparisons.append({"run": name, "vs": vs, **compare_runs(ta, la, tb, lb, new_tokens, [list(k) for k in ka])})

    def name_of(b: int) -> str:
        return "alone (B=1)" if b == 1 else f"batch {b}"

    with torch.inference_mode():
        for b in sorted({1, *batches}):
            run(name_of(b), build(b, plain))
            if b > 1:
                compare(name_of(b), name_of(1))
    ref, twin = name_of(1), name_of(big)
    if spec:
        engine = build(big, SPEC)
        cold, warm = f"spec cold, B={big}", f"spec warm, B={big}"
        with torch.inference_mode():
            run(cold, engine, close=False)
            run(warm, engine)  # the history drafter now holds the cold rollout of every prompt
        for name in (cold, warm):
            compare(name, ref)
            if twin != ref:
                compare(name, twin)
        notes.append(f"Speculation: engine.spec.method=auto (history + ngram drafters, coupled), "
                     f"engine.spec.gate=false (every decode step is a verify forward), max_batch_size={big}; "
                     "'warm' is a second rollout on the same engine, whose history drafter proposes the "
                     "first rollout's continuation of each sample (long drafts, verified and accepted).")
    if cuda and overrides.get("attention", "auto") != "torch":
        with torch.inference_mode():
            for name, graphs in ((f"cuda graphs, B={big}", True), (f"eager, B={big}", False)):
                run(name, build(big, {**plain, "cuda_graphs": graphs}))
                compare(name, ref)
        compare(f"cuda graphs, B={big}", f"eager, B={big}")
    else:
        why = "no CUDA device" if not cuda else "engine.attention=torch has no graphs"
        comparisons.append({"run": "cuda graphs", "vs": "eager", "not_measured": why})
    why = tp_unsupported(model.args) if tp else "tp=False"
    if why is None:
        tensors = [(n, t.detach().to("cpu", torch.float32).clone()) for n, t in full_tensors(model)]
        tp1 = twin
        if cuda or dt != torch.float32:  # the TP path runs on the CPU in fp32: its TP1 twin must too
            tp1 = f"one process (CPU fp32), B={big}"
            cpu = build_model(model.args, torch.float32, "cpu")
            load_weights(cpu, tensors)
            with torch.inference_mode():
                run(tp1, build(big, plain, on=cpu.eval()))
        name = f"TP{TP_WORLD} (gloo, CPU fp32), B={big}"
        cfg = engine_config(overrides, {"max_batch_size": big, "exact": exact, **plain})
        t0 = time.perf_counter()
        outs[name] = spawn(_tp_rank, TP_WORLD, model.args, tensors, requests, cfg)[0]
        runs[name] = {"max_batch_size": big, "wall_s": time.perf_counter() - t0}
        progress(f"{name}: {runs[name]['wall_s']:.1f} s ({time.perf_counter() - t_start:.0f} s so far)")
        compare(name, tp1)
        if tp1 != ref:
            compare(name, ref)
        notes.append(f"TP: {TP_WORLD} spawned ranks (tailrl.parallel.tp_generate, layout TP{TP_WORLD}/DP1, gloo), "
                     "each with cores / ranks torch threads; compared with one process at the same batch.")
    else:
        comparisons.append({"run": f"TP{TP_WORLD}", "vs": "TP1", "not_measured": why})
    # the trainer's forward of the largest batch's tokens (what training would see), and of the reference's
    # tokens where they are the same sequences
    t0 = time.perf_counter()
    trained = trainer_logprobs(model, outs[twin])
    trainer = [{"run": f"engine {twin} vs trainer", **token_deltas([r.logprobs for r in outs[twin]], trained)}]
    if twin != ref:
        same = [i for i, (a, b) in enumerate(zip(outs[ref], outs[twin])) if a.token_ids == b.token_ids]
        trainer.append({"run": f"engine {ref} vs trainer ({len(same)} identical sequences)",
                        **token_deltas([outs[ref][i].logprobs for i in same], [trained[i] for i in same])})
    progress(f"trainer forward: {time.perf_counter() - t0:.1f} s")
    cfg = engine_config(overrides, {"exact": exact})
    notes.append(f"Model: random N(0, 0.02) weights of the '{shape if isinstance(shape, str) else shape.name}' "
                 f"shape ({model.args.num_layers} layers, hidden {model.args.hidden_size}, vocab "
                 f"{model.args.vocab_size}); engine.attention={cfg.attention}, engine overrides {overrides or 'none'}; "
                 f"{time.perf_counter() - t_start:.0f} s in all.")
    res = {"settings": {"exact": exact, "shape": shape if isinstance(shape, str) else shape.name, "device": device,
                        "dtype": str(dt).removeprefix("torch."), "sequences": sequences, "new_tokens": new_tokens,
                        "prompts": len(requests), "group": GROUP, "batches": sorted({1, *batches}), "spec": spec,
                        "tp": tp, "sampler": cfg.sampler, "seed": seed, "engine_overrides": overrides},
           "torch": torch.__version__, "gpu": torch.cuda.get_device_name(device) if cuda else None,
           "comparisons": comparisons, "trainer": trainer, "runs": runs, "notes": notes}
    write_outputs(Path(out_dir), summary(res), res)
    return res
