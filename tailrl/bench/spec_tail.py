"""The tail-heavy workload of `tailrl bench spec` on a real model: SmolLM2-135M-Instruct rolling out
chat-formatted GSM8K-style questions as RL does — G samples per question, several epochs over the same
questions (the policy fixed), so history exists from the second epoch on — and its distilled draft.

Questions: a JSONL file (`--prompts`, e.g. ../shared/data/gsm8k/test.jsonl) or generated word problems
(bench/exactness_prompts.py; no download). The draft is distilled once from the policy's rollouts of other
questions (`--draft-prompts`, e.g. GSM8K's train.jsonl, else other generated problems) and cached
(speculative/distill.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from tailrl.bench.common import warm_up
from tailrl.bench.exactness_prompts import chat_ids, read_questions, word_problems
from tailrl.config import DecoupledSpecConfig, EngineConfig, SpecConfig
from tailrl.engine import Request, SamplingParams
from tailrl.engine.telemetry import merge_spec, phase_rates
from tailrl.model import load
from tailrl.model.loading import cache_dir
from tailrl.speculative import build_engine
from tailrl.speculative.distill import DistillParams, distill_draft

SMOLLM2 = "smollm2-135m-instruct"
# two of the policy's 30 layers, its 8,192 most frequent tokens: ~10% of its batch-1 forward on the CPU
SMOLLM2_DRAFT = DistillParams(layers=(0, 1), vocab=8192, temperature=0.7, max_new_tokens=384, epochs=3)
DRAFT_PROMPTS, DRAFT_HELD = 256, 32


def questions(path: str | None, n: int, seed: int) -> list[str]:
    return read_questions(path, n) if path else word_problems(n, seed)


def smollm2_draft(model, tok, draft_prompts: str | None = None, params: DistillParams = SMOLLM2_DRAFT,
                  log=print) -> Path:
    """The cached draft folder of SmolLM2 (model, tok: load(SMOLLM2)), distilled on first use: ~30 minutes of
    this 2-core CPU (rollouts and the teacher pass ~20, cached apart from the training)."""
    qs = questions(draft_prompts, DRAFT_PROMPTS + DRAFT_HELD, seed=1000)
    ids = [chat_ids(tok, q) for q in qs]
    return distill_draft(model, tok, SMOLLM2, ids[:DRAFT_PROMPTS], ids[DRAFT_PROMPTS:], params,
                         cache_dir() / "smollm2", progress=_progress(log), log=log)


def _progress(log):
    def report(step: int, steps: int, loss: float) -> None:
        if step == 1 or step % 10 == 0 or step == steps:
            log(f"  distill step {step}/{steps}: KL {loss:.3f}")
    return report


def tail_workload(tok, prompts: str | None, n_prompts: int, group: int, max_new: int, temperature: float,
                  epochs: int) -> list[list[Request]]:
    """`epochs` batches of the same n_prompts questions x group samples, each epoch with its own sampling seed
    (an RL step's fresh rollouts of the same prompts)."""
    ids = [chat_ids(tok, q) for q in questions(prompts, n_prompts, seed=0)]
    batches = [[Request(p, uid=i, n=group, params=SamplingParams(temperature=temperature, max_new_tokens=max_new,
                                                                  seed=100 + e))
                for i, p in enumerate(ids)] for e in range(epochs)]
    return batches


def tail_configs(draft: str) -> dict[str, SpecConfig]:
    """The side-by-side configurations of the tail workload (names -> engine.spec)."""
    return {
        "off": SpecConfig(method="none"),
        "history+ngram": SpecConfig(method="auto"),
        "draft": SpecConfig(method="draft", draft_model=draft),
        "draft-decoupled": SpecConfig(method="draft", draft_model=draft, mode="decoupled",
                                      decoupled=DecoupledSpecConfig(window=4)),
        "all+BoN": SpecConfig(method="auto", draft_model=draft),
    }


def compare(model, tok, batches: list[list[Request]], configs: dict[str, SpecConfig], tail_batch: int = 4,
            log=print) -> dict:
    """Every batch (epoch) through every configuration's engine in turn (engines kept across epochs, as in
    training; the order rotates per epoch so machine drift hits all). Per configuration: rollout seconds, the
    per-phase figures (RolloutTrace.phases) summed over epochs after the first, and identity with the first
    configuration (the reference: speculation off)."""
    kv = 2 * sum(len(r.prompt_ids) + r.params.max_new_tokens for r in batches[0]) * batches[0][0].n
    engines = {n: build_engine(model, tok, EngineConfig(kv_cache_tokens=kv, spec=c)) for n, c in configs.items()}
    warm_up(engines.values(), batches[0])
    names = list(configs)
    res = {n: {"epochs_s": [], "phase": {}, "spec": [], "same": 0, "sequences": 0} for n in names}
    for ep, reqs in enumerate(batches):
        tokens = {}
        for n in names[ep % len(names):] + names[:ep % len(names)]:
            t = time.perf_counter()
            outs, trace = engines[n].generate(reqs)
            res[n]["epochs_s"].append(time.perf_counter() - t)
            tokens[n] = {(o.uid, o.sample_index): o.token_ids for o in outs}
            if ep > 0:  # history exists from the second epoch on
                _add_phases(res[n]["phase"], trace.phase_counts(tail_batch))
                res[n]["spec"].append(trace.spec)
            log(f"  epoch {ep} {n}: {res[n]['epochs_s'][-1]:.1f}s")
        ref = tokens[names[0]]
        for n in names:
            res[n]["sequences"] += len(ref)
            res[n]["same"] += sum(ref[k] == tokens[n].get(k) for k in ref)
    for e in engines.values():
        e.close()
    return {n: _summarise(r, res[names[0]]) for n, r in res.items()}


def _add_phases(acc: dict, counts: dict) -> None:
    """Sum a rollout's raw phase counts (RolloutTrace.phase_counts) into acc."""
    for p, d in counts.items():
        a = acc.setdefault(p, dict.fromkeys(d, 0.0))
        for k, v in d.items():
            a[k] += v


def _summarise(r: dict, ref: dict) -> dict:
    later = sum(r["epochs_s"][1:])
    out = {"epochs_s": r["epochs_s"], "rollout_s": later, "speedup": sum(ref["epochs_s"][1:]) / later if later else 0.0,
           "identity_rate": r["same"] / max(r["sequences"], 1), "sequences": r["sequences"],
           "spec": merge_spec(r["spec"]), "phases": {}}
    for p, a in r["phase"].items():
        if not a["seconds"]:
            continue
        ph, b = phase_rates(a), ref["phase"].get(p, {})
        ref_tps = b["tokens"] / b["seconds"] if b.get("seconds") else 0.0
        out["phases"][p] = {**ph, "speedup": ph["tokens_per_s"] / ref_tps if ref_tps else 0.0}
    return out


def run_tail_bench(out_dir: str, prompts: str | None, draft_prompts: str | None, n_prompts: int, group: int,
                   max_new: int, temperature: float, epochs: int, configs: list[str], threads: int) -> dict:
    """`tailrl bench spec --workloads tail`: the SmolLM2 tail workload, every configuration side by side."""
    torch.set_num_threads(threads)
    model, tok = load(SMOLLM2)
    draft = str(smollm2_draft(model, tok, draft_prompts))
    meta = json.loads((Path(draft) / "draft_meta.json").read_text())
    print(f"draft {draft}: keyed acceptance {meta['keyed_acceptance']:.3f} at T={meta['params']['temperature']}, "
          f"forward {meta['forward_time_ratio']:.3f}x the policy's", flush=True)
    batches = tail_workload(tok, prompts, n_prompts, group, max_new, temperature, epochs)
    every = tail_configs(draft)
    chosen = {n: every[n] for n in dict.fromkeys(["off", *configs])}
    print(f"tail: SmolLM2, {n_prompts} prompts x {group} samples, {max_new} tokens, T={temperature}, {epochs} epochs, "
          f"{threads} threads: {', '.join(chosen)}", flush=True)
    res = compare(model, tok, batches, chosen)
    for n, r in res.items():
        print(_row(n, r), flush=True)
    summary = {"workload": {"prompts": prompts or "generated", "n_prompts": n_prompts, "group": group,
                            "max_new": max_new, "temperature": temperature, "epochs": epochs, "threads": threads},
               "draft": {"folder": draft, **{k: meta[k] for k in ("keyed_acceptance", "keyed_acceptance_before",
                                                                  "forward_time_ratio", "vocab_coverage_heldout")}},
               "results": res}
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / "spec_tail.json").write_text(json.dumps(summary, indent=1))
    return summary


def _row(name: str, r: dict) -> str:
    ph = r["phases"]
    parts = [f"{name:>16}: {r['rollout_s']:.1f}s ({r['speedup']:.2f}x) identity {r['identity_rate']:.0%}"]
    for p in ("large", "tail"):
        if p in ph:
            d = ph[p]
            parts.append(f"{p} {d['tokens_per_s']:.1f} tok/s ({d['speedup']:.2f}x, {d['seconds']:.0f}s) "
                         f"acc {d['acceptance']:.2f} emit/verify {d['emitted_per_verify']:.2f}")
    return " | ".join(parts)
