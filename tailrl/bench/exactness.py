"""`tailrl bench exactness`: how often the engine's tokens really are independent of how they were computed
for one engine.exact mode and one sampler (engine.sampler).

The contract (ARCHITECTURE.md, Exactness) makes every token a function of its logits row and its key, so a
rollout should not depend on batch composition, speculation, CUDA graphs or the TP layout; float reductions
whose order depends on the row count can still move a logit and flip a near-tie. On one set of requests:
random prompts x G samples with forced lengths on a random-weight model of a real shape (`shape`), or
(`model`: a known name or a local folder) a real model's chat-formatted GSM8K-style questions x G samples
at `temperature`, stopping at EOS (bench/exactness_prompts.py):

    reference     every request alone (engine.max_batch_size=1)
    batch B       all requests submitted at once, max_batch_size=B (16, 64, 256)
    speculation   per method of `spec_methods`, gate off (every decode step verifies), at the largest B:
                  auto (history + ngram), ngram, history, draft (a draft model: the policy's first
                  `draft_layers` layers and its head, same tokenizer), bon (auto + the draft with Best-of-N
                  trees), decoupled (the draft in its own process, window 3). History-fed methods run a cold
                  rollout, then a warm one on the same engine, where the history drafter replays the first
                  rollout of each sample (long drafts verified and accepted)
    preemption    the largest B with a KV pool of a quarter of what its running batch needs (`preempt`):
                  sequences are preempted and recomputed
    graphs        engine.cuda_graphs true vs false at the largest B (CUDA only)
    TP            `tp` ranks (default 2; 0: none) over gloo (tailrl.parallel.tp_generate, CPU fp32) vs one
                  process, largest B

Each is compared with the reference (and with its own plain twin) by exactness_stats.compare_runs; the
largest batch's rollout logprobs are also compared with the trainer's forward of the same tokens
(make_train_batch + train.update.batch_logprobs). Writes summary.md and result.json.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from tailrl.bench.common import write_outputs
from tailrl.bench.engine import model_of
from tailrl.bench.engine_tail import engine_config, make_prompts, sync
from tailrl.bench.exactness_prompts import chat_requests, read_questions, word_problems
from tailrl.bench.exactness_stats import compare_runs, summary, token_deltas
from tailrl.bench.run_cache import RunCache
from tailrl.config import EngineConfig, TrainConfig
from tailrl.engine import Engine, Request, Rollout, SamplingParams
from tailrl.errors import UserError
from tailrl.model import build_model, load, load_weights, save_hf
from tailrl.model.weights import full_tensors
from tailrl.parallel.dist import spawn
from tailrl.parallel.layout import Layout, splits
from tailrl.parallel.rollout import tp_generate
from tailrl.perf.hardware import ModelShape
from tailrl.speculative import build_engine
from tailrl.train.batch import make_train_batch
from tailrl.train.update import batch_logprobs

GROUP = 8  # samples per prompt (a GRPO group): siblings share the prompt's prefill
PROMPT_LEN = (16, 48)  # random prompt lengths, inclusive
# per speculation method: engine settings (gate off: speculate at every step, even where it costs) and whether
# it is fed by history (a cold rollout, then a warm one on the same engine); {draft}: the draft model's folder
SPEC_METHODS = {
    "auto": ({"spec.method": "auto"}, True),
    "ngram": ({"spec.method": "ngram"}, False),
    "history": ({"spec.method": "history"}, True),
    "draft": ({"spec.method": "draft", "spec.draft_model": "{draft}"}, False),
    "bon": ({"spec.method": "auto", "spec.draft_model": "{draft}", "spec.coupled.best_of_n": True,
             "spec.coupled.bon_spare": 50.0}, True),
    "decoupled": ({"spec.method": "draft", "spec.draft_model": "{draft}", "spec.mode": "decoupled",
                   "spec.decoupled.window": 3}, False),
}


def make_requests(sequences: int, new_tokens: int, vocab: int, seed: int, group: int = GROUP) -> list[Request]:
    """ceil(sequences / group) random prompts with `group` samples each (the last one the remainder), every
    sample forced to exactly new_tokens tokens at temperature 1."""
    prompts = make_prompts(-(-sequences // group), vocab, *PROMPT_LEN, seed)
    params = SamplingParams(temperature=1.0, max_new_tokens=new_tokens, ignore_eos=True, seed=seed)
    return [Request(list(p), uid=i, n=min(group, sequences - i * group), params=params) for i, p in enumerate(prompts)]


def timed_generate(engine: Engine, requests: list[Request], new_tokens: int | None, device: str,
                   report=None, every_s: float = 60.0) -> tuple[list, dict]:
    """One rollout of `requests`: (rollouts sorted by (uid, sample index), cost and speculation counts).
    new_tokens: the forced length every rollout must have (None: real lengths, EOS stops). report: called
    with a line (sequences done, tokens, elapsed, a linear estimate of the rest) at most every `every_s`."""
    total = sum(r.n for r in requests)
    done, last = [0, 0], [time.perf_counter()]

    def finished(r: Rollout) -> None:
        done[0] += 1
        done[1] += r.num_tokens
        now = time.perf_counter()
        if report is not None and now - last[0] >= every_s and done[0] < total:
            last[0] = now
            el = now - t0
            report(f"  {done[0]}/{total} sequences, {done[1]} tokens, {el / 60:.1f} min, "
                   f"~{el * (total - done[0]) / done[0] / 60:.0f} min left")

    sync(device)
    t0 = time.perf_counter()
    rollouts, trace = engine.generate(requests, on_finish=finished)
    sync(device)
    wall = time.perf_counter() - t0
    bad = [(r.uid, r.sample_index, r.num_tokens, r.finish_reason, r.error) for r in rollouts
           if r.error or (new_tokens is not None and (r.finish_reason != "length" or r.num_tokens != new_tokens))]
    if bad:
        raise RuntimeError(f"rollouts failed or do not have the forced length {new_tokens}: {bad[:5]}")
    info = {"max_batch_size": engine.config.max_batch_size, "wall_s": wall, "forwards": len(trace.steps),
            "tokens": sum(r.num_tokens for r in rollouts), "preemptions": trace.preemptions}
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


def tp_unsupported(args, world: int) -> str | None:
    """Why the model cannot be split over `world` TP ranks, or None."""
    if not splits(args, world):
        fits = [t for t in range(2, args.num_kv_heads + 1) if splits(args, t)]
        return (f"TP{world} needs heads ({args.num_heads} query, {args.num_kv_heads} KV) and MLP width "
                f"({args.intermediate_size}) divisible by {world}"
                + (f" (this model splits over {' / '.join(map(str, fits))} ranks: --tp {fits[0]})" if fits else ""))
    return None


def trainer_logprobs(model, rollouts: list[Rollout], temperature: float = 1.0) -> list[list[float]]:
    """The trainer's no-grad logprob forward of each rollout's tokens (at the rollouts' temperature, the
    default micro-batches and LM-head chunking), one list per rollout."""
    device = str(next(model.parameters()).device)
    batch = make_train_batch([r.prompt_ids for r in rollouts], [r.token_ids for r in rollouts],
                             torch.zeros(len(rollouts)), device=device)
    tc = TrainConfig()
    lp = batch_logprobs(model, batch, tc.micro_batch_size, temperature, chunk_rows=tc.logprob_chunk_rows)
    return [row[: r.num_tokens] for row, r in zip(lp.double().cpu().tolist(), rollouts)]


def _rows(rollouts: list[Rollout]) -> tuple[list, list, list]:
    return ([(r.uid, r.sample_index) for r in rollouts], [r.token_ids for r in rollouts],
            [r.logprobs for r in rollouts])


def layer_draft(model, layers: int, folder: str | Path) -> Path:
    """A draft model for speculation made from the policy itself: its first `layers` decoder layers, final
    norm and head (same tokenizer, a fraction of the cost), saved as a Hugging Face folder."""
    if not 0 < layers < model.args.num_layers:
        raise UserError(f"--draft-layers must be in [1, {model.args.num_layers - 1}], got {layers}")
    p = next(model.parameters())
    draft = build_model(replace(model.args, num_layers=layers), p.dtype, str(p.device))
    load_weights(draft, [(n, t) for n, t in full_tensors(model)
                         if not n.startswith("model.layers.") or int(n.split(".")[2]) < layers])
    return save_hf(draft.eval(), folder)


def _spec_settings(method: str, draft: Path | None) -> dict:
    settings, _ = SPEC_METHODS[method]
    return {"spec.gate": False, **{k: str(draft) if v == "{draft}" else v for k, v in settings.items()}}


def run_exactness_bench(out_dir: str | Path, sequences: int = 1000, new_tokens: int = 256,
                        shape: str | ModelShape = "small", device: str | None = None, dtype: str | None = None,
                        exact: str = "fast", batches=(1, 16, 64, 256), spec_methods=("auto",), tp: int = 2,
                        engine_overrides: dict | None = None, seed: int = 0, progress=print, model: str | None = None,
                        prompts: str | None = None, temperature: float = 1.0, preempt: bool = False,
                        draft_layers: int = 4, resume: bool = True) -> dict:
    """Token identity of the same requests across batch sizes, speculation, preemption, CUDA graphs and TP
    layouts for engine.exact=`exact`, and rollout vs trainer logprobs (module docstring). Returns the result
    dict (also written to out_dir/result.json, with out_dir/summary.md). Every finished run is kept under
    out_dir/runs-<digest of the settings>/ (bench/run_cache.py); with `resume`, runs found there are loaded,
    not run again (False: every run is run and the kept ones replaced)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device.startswith("cuda")
    dt = getattr(torch, dtype or ("bfloat16" if cuda else "float32"))
    overrides = dict(engine_overrides or {})
    unknown = [m for m in spec_methods if m not in SPEC_METHODS]
    if unknown:
        raise UserError(f"unknown speculation method(s) {', '.join(unknown)}; valid: {', '.join(SPEC_METHODS)}")
    if model is not None:  # a real model: chat-formatted questions, real lengths
        policy, tok = load(model, dtype=dt, device=device)
        n_q = -(-sequences // GROUP)
        questions = read_questions(prompts, n_q) if prompts else word_problems(n_q, seed)
        requests = chat_requests(tok, questions, sequences, GROUP, new_tokens, temperature, seed)
        forced = None
    else:
        policy = model_of(shape, dt, device, PROMPT_LEN[1] + new_tokens + 64, seed)
        requests = make_requests(sequences, new_tokens, policy.args.vocab_size, seed)
        forced = new_tokens
    cache = RunCache(out_dir, {"model": model, "shape": shape if isinstance(shape, str) else shape.name,
                               "prompts": prompts, "sequences": sequences, "new_tokens": new_tokens, "seed": seed,
                               "temperature": temperature, "exact": exact, "device": device, "dtype": str(dt),
                               "overrides": overrides, "draft_layers": draft_layers, "group": GROUP,
                               "threads": torch.get_num_threads(), "torch": torch.__version__})
    tmp = tempfile.TemporaryDirectory()
    draft = (layer_draft(policy, draft_layers, Path(tmp.name) / "draft")
             if {"draft", "bon", "decoupled"} & set(spec_methods) else None)
    big = max(batches)
    plain = {"spec.method": "none"}  # every run but the speculative ones decodes plainly, whatever the overrides
    runs, outs, comparisons, notes = {}, {}, [], []
    t_start = time.perf_counter()

    def build(b: int, settings: dict, on=policy) -> Engine:
        return build_engine(on, None, engine_config(overrides, {"max_batch_size": b, "exact": exact, **settings}))

    def run(names: list[str], make) -> None:
        """Rollouts of every name in turn on one engine from make() (a history-fed method: cold, then warm), or
        all of them from the cache when every one is there."""
        kept = [cache.get(n) if resume else None for n in names]
        if all(kept):
            for name, (outs[name], runs[name]) in zip(names, kept):
                progress(f"{name}: kept from an earlier run ({cache.dir})")
            return
        engine = make()
        for name in names:
            outs[name], runs[name] = timed_generate(engine, requests, forced, device,
                                                    report=lambda line, name=name: progress(f"{name}:{line}"))
            cache.put(name, outs[name], runs[name])
            progress(f"{name}: {runs[name]['wall_s']:.1f} s ({time.perf_counter() - t_start:.0f} s so far)")
        engine.close()

    def compare(name: str, vs: str) -> None:
        (ka, ta, la), (kb, tb, lb) = _rows(outs[vs]), _rows(outs[name])
        if ka != kb:
            raise RuntimeError(f"{name} and {vs} returned different request samples")
        comparisons.append({"run": name, "vs": vs, **compare_runs(ta, la, tb, lb, new_tokens, [list(k) for k in ka])})
        # kept as they come: a long run cut short still has what it measured
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "partial.json").write_text(json.dumps({"comparisons": comparisons, "runs": runs}, indent=1))

    def name_of(b: int) -> str:
        return "alone (B=1)" if b == 1 else f"batch {b}"

    with torch.inference_mode():
        for b in sorted({1, *batches}):
            run([name_of(b)], lambda b=b: build(b, plain))
            if b > 1:
                compare(name_of(b), name_of(1))
    ref, twin = name_of(1), name_of(big)
    for method in spec_methods:
        label = "spec" if tuple(spec_methods) == ("auto",) else f"spec {method}"
        names = [f"{label} cold, B={big}", f"{label} warm, B={big}"] if SPEC_METHODS[method][1] else [f"{label}, B={big}"]
        with torch.inference_mode():  # warm: the same engine, whose history drafter holds the cold rollout
            run(names, lambda method=method: build(big, _spec_settings(method, draft)))
        for name in names:
            compare(name, ref)
            if twin != ref:
                compare(name, twin)
    if spec_methods:
        notes.append(f"Speculation ({', '.join(spec_methods)}): engine.spec.gate=false (every decode step is a "
                     f"verify forward), max_batch_size={big}; 'warm' is a second rollout on the same engine, whose "
                     "history drafter proposes the first rollout's continuation of each sample."
                     + (f" The draft model is the policy's first {draft_layers} layers with its head." if draft else ""))
    if preempt:
        # what the `big` sequences running at once need (not all requests: with more requests than the batch,
        # a quarter of their total can hold the whole running batch and nothing is preempted)
        need = sum(sorted((len(r.prompt_ids) + new_tokens for r in requests for _ in range(r.n)), reverse=True)[:big])
        kv = max(new_tokens + 64, need // 4)
        name = f"preemption, B={big}"
        with torch.inference_mode():
            run([name], lambda: build(big, {**plain, "kv_cache_tokens": kv}))
        compare(name, ref)
        notes.append(f"Preemption: max_batch_size={big} with a KV pool of {kv} tokens (a quarter of the "
                     f"{need} the {big} longest requests need at once): {runs[name]['preemptions']} preemptions.")
    if cuda and overrides.get("attention", "auto") != "torch":
        with torch.inference_mode():
            for name, graphs in ((f"cuda graphs, B={big}", True), (f"eager, B={big}", False)):
                run([name], lambda graphs=graphs: build(big, {**plain, "cuda_graphs": graphs}))
                compare(name, ref)
        compare(f"cuda graphs, B={big}", f"eager, B={big}")
    else:
        why = "no CUDA device" if not cuda else "engine.attention=torch has no graphs"
        comparisons.append({"run": "cuda graphs", "vs": "eager", "not_measured": why})
    why = tp_unsupported(policy.args, tp) if tp > 1 else "no TP run (--no-tp)"
    if why is None:
        tensors = [(n, t.detach().to("cpu", torch.float32).clone()) for n, t in full_tensors(policy)]
        tp1 = twin
        if cuda or dt != torch.float32:  # the TP path runs on the CPU in fp32: its TP1 twin must too
            tp1 = f"one process (CPU fp32), B={big}"
            cpu = build_model(policy.args, torch.float32, "cpu")
            load_weights(cpu, tensors)
            with torch.inference_mode():
                run([tp1], lambda: build(big, plain, on=cpu.eval()))
        name = f"TP{tp} (gloo, CPU fp32), B={big}"
        cfg = engine_config(overrides, {"max_batch_size": big, "exact": exact, **plain})
        kept = cache.get(name) if resume else None
        if kept:
            outs[name], runs[name] = kept
        else:
            t0 = time.perf_counter()
            outs[name] = spawn(_tp_rank, tp, policy.args, tensors, requests, cfg)[0]
            runs[name] = {"max_batch_size": big, "wall_s": time.perf_counter() - t0}
            cache.put(name, outs[name], runs[name])
        progress(f"{name}: {runs[name]['wall_s']:.1f} s ({time.perf_counter() - t_start:.0f} s so far)")
        compare(name, tp1)
        if tp1 != ref:
            compare(name, ref)
        notes.append(f"TP: {tp} spawned ranks (tailrl.parallel.tp_generate, layout TP{tp}/DP1, gloo), "
                     "each with cores / ranks torch threads; compared with one process at the same batch.")
    else:
        comparisons.append({"run": f"TP{tp}" if tp > 1 else "TP", "vs": "TP1", "not_measured": why})
    # the trainer's forward of the largest batch's tokens (what training would see), and of the reference's
    # tokens where they are the same sequences
    t0 = time.perf_counter()
    trained = trainer_logprobs(policy, outs[twin], temperature)
    trainer = [{"run": f"engine {twin} vs trainer", **token_deltas([r.logprobs for r in outs[twin]], trained)}]
    if twin != ref:
        same = [i for i, (a, b) in enumerate(zip(outs[ref], outs[twin])) if a.token_ids == b.token_ids]
        trainer.append({"run": f"engine {ref} vs trainer ({len(same)} identical sequences)",
                        **token_deltas([outs[ref][i].logprobs for i in same], [trained[i] for i in same])})
    progress(f"trainer forward: {time.perf_counter() - t0:.1f} s")
    cfg = engine_config(overrides, {"exact": exact})
    what = (f"{model} (real weights), {len(requests)} chat-formatted "
            f"{'questions of ' + str(prompts) if prompts else 'generated GSM8K-style word problems'} x {GROUP} "
            f"samples at temperature {temperature}, up to {new_tokens} tokens (EOS stops; "
            f"{runs[ref]['tokens']} tokens in the reference)" if model is not None else
            f"random N(0, 0.02) weights of the '{shape if isinstance(shape, str) else shape.name}' shape")
    kept = {n: r["cached_from_commit"] for n, r in runs.items() if "cached_from_commit" in r}
    if kept:
        notes.append(f"Runs kept from an earlier invocation of the same command ({cache.dir}; the commit each ran "
                     f"at): " + "; ".join(f"{n} ({c or 'unknown'})" for n, c in kept.items()) + f". This one: "
                     f"{cache.commit or 'unknown'}.")
    notes.append(f"Model: {what} ({policy.args.num_layers} layers, hidden {policy.args.hidden_size}, vocab "
                 f"{policy.args.vocab_size}); engine.attention={cfg.attention}, engine.sampler={cfg.sampler}, engine "
                 f"overrides {overrides or 'none'}; {time.perf_counter() - t_start:.0f} s in all.")
    tmp.cleanup()
    res = {"settings": {"exact": exact, "shape": model or (shape if isinstance(shape, str) else shape.name),
                        "temperature": temperature, "device": device, "real_model": model is not None,
                        "dtype": str(dt).removeprefix("torch."), "sequences": sequences, "new_tokens": new_tokens,
                        "prompts": len(requests), "group": GROUP, "batches": sorted({1, *batches}),
                        "spec": list(spec_methods), "preempt": preempt,
                        "tp": tp, "sampler": cfg.sampler, "seed": seed, "engine_overrides": overrides},
           "torch": torch.__version__, "gpu": torch.cuda.get_device_name(device) if cuda else None,
           "comparisons": comparisons, "trainer": trainer, "runs": runs, "notes": notes}
    write_outputs(Path(out_dir), summary(res), res)
    return res
