"""The parts of `tailrl bench gpu` (bench/gpu.py runs them): what each measures, its time budget on an H100,
and the commands it runs — full size on a GPU, or tiny on the CPU with --dry-run (the same commands and
files, so the harvest cannot rot between GPU sessions).

Every command is another `tailrl bench ...` (or pytest) in a child process: a part that hangs or crashes
is cut at its budget and the next one still runs. Budgets add up to 25 minutes; the order is the issue's
(tests first: a kernel that is wrong makes every later figure moot).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from tailrl.model.hub import find_known

# the test files whose oracles honour TAILRL_TEST_DEVICE (tests/helpers.py): model parity with HF, kernels
# against torch references, engine identity, static vs dynamic, graph vs eager, strict invariance
CUDA_TESTS = ("tests/kernels", "tests/model/test_parity.py", "tests/engine/test_engine.py",
              "tests/engine/test_execution.py", "tests/engine/test_static_sync.py", "tests/engine/test_graph_reuse.py")
DRY_TESTS = ("tests/kernels/test_package.py",)  # the tier's plumbing (pytest, JUnit, the summary), in seconds


@dataclass(frozen=True)
class Run:
    """One command of a part. argv: arguments after `python -m` ("tailrl bench ..." or "pytest ...");
    out: its folder under the part's (where the bench writes result.json / summary.md)."""
    label: str
    argv: tuple[str, ...]
    env: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Part:
    name: str
    budget_s: float      # on an H100; a dry run gets the same budget (it needs seconds)
    what: str            # one line for the summary
    runs: tuple[Run, ...]
    note: str = ""       # why a run was left out (a missing package or weights), for the summary


def _have(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def _have_smollm2() -> bool:
    return find_known("smollm2-135m-instruct") is not None


def _bench(name: str, *args: str, env: dict | None = None, label: str | None = None) -> Run:
    return Run(label or name, ("tailrl", "bench", name, *args), env or {})


def _tests(dry: bool) -> Part:
    files = DRY_TESTS if dry else CUDA_TESTS
    marks = ("-m", "not slow") if dry else ("-m", "")
    what = ("the CUDA test tier: kernels vs torch, HF parity, engine identity, static vs dynamic, graph vs eager, "
            "strict invariance (TAILRL_TEST_DEVICE=cuda)")
    if not Path("tests/helpers.py").is_file():
        return Part("tests", 210, what, (), "no tests/ folder here: run from the repository's root")
    return Part("tests", 210, what,
                (Run("pytest", ("pytest", *files, *marks, "-q", "-p", "no:cacheprovider", "--junitxml", "{out}/junit.xml"),
                     {"TAILRL_TEST_DEVICE": "cpu" if dry else "cuda"}),))


def _engine(dry: bool) -> list[Part]:
    if dry:
        tiny = ("--device", "cpu", "--shapes", "tiny", "--context", "16", "--steps", "1", "--warmup", "0",
                "--sampling-batch", "2")
        return [Part("engine", 270, "decode ms/step per shape and batch (graphs), kernels and syncs per step, HBM "
                     "roofline; the long-tailed workload vs HF generate",
                     (_bench("engine", *tiny, "--batches", "1", "2", "--tail-batch", "2", "--tail-max-len", "8",
                             "--tail-median", "4", "--tail-shape", "small",
                             "--out-dir", "{out}"),)),
                Part("engine-eager", 90, "the same decode steps without CUDA graphs (graph vs eager)",
                     (_bench("engine", *tiny, "--batches", "1", "--no-tail", "--out-dir", "{out}"),)),
                Part("long-tail", 120, "one request of the Qwen2.5-1.5B shape at 4K and 32K context (the tail's "
                     "step: split-context attention's case)",
                     (_bench("engine", *tiny, "--batches", "1", "--no-tail", "--out-dir", "{out}", label="4k"),))]
    return [Part("engine", 270, "decode ms/step per shape (SmolLM2-135M, Qwen2.5-0.5B, 1.5B) and B = 1/16/64/256 "
                 "in bf16 with CUDA graphs, kernels and syncs per step, HBM roofline; the long-tailed workload vs "
                 "HF generate", (_bench("engine", "--dtype", "bfloat16", "--out-dir", "{out}"),)),
            Part("engine-eager", 90, "the same decode steps without CUDA graphs (graph vs eager)",
                 (_bench("engine", "--dtype", "bfloat16", "--engine", "cuda_graphs=false", "--shapes", "smollm2-135m",
                         "qwen2.5-1.5b", "--batches", "1", "64", "--no-tail", "--out-dir", "{out}"),)),
            Part("long-tail", 120, "one request of the Qwen2.5-1.5B shape at 4K and 32K context (the tail's step; "
                 "targets <= 1.1 ms and <= 1.5 ms on an H100)",
                 tuple(_bench("engine", "--dtype", "bfloat16", "--shapes", "qwen2.5-1.5b", "--batches", "1",
                              "--context", str(c), "--steps", "50", "--no-tail", "--out-dir", "{out}", label=f"{c // 1024}k")
                       for c in (4096, 32768)))]


def _exactness(dry: bool) -> Part:
    what = "fast vs strict in bf16: identity alone vs batched and with speculation, rollout vs trainer logprob gap, strict's cost"
    if dry:
        tiny = ("--shape", "tiny", "--sequences", "8", "--batches", "4", "--no-tp", "--no-spec", "--device", "cpu")
        # strict runs its kernels under the Triton interpreter on a CPU: 2 tokens show the plumbing
        return Part("exactness", 150, what, tuple(_bench("exactness", "--exact", m, *tiny, "--new-tokens", n,
                                                         "--out-dir", "{out}", label=m)
                                                  for m, n in (("fast", "6"), ("strict", "2"))))
    runs = [_bench("exactness", "--exact", m, "--shape", "qwen2.5-0.5b", "--dtype", "bfloat16", "--sequences", "256",
                   "--batches", "16", "64", "256", "--no-tp", "--spec-methods", "ngram", "--out-dir", "{out}", label=m)
            for m in ("fast", "strict")]
    note = ""
    if _have_smollm2():
        runs.append(_bench("exactness", "--model", "smollm2-135m-instruct", "--sequences", "128", "--batches", "4", "64",
                           "--spec-methods", "auto", "draft", "--no-tp", "--out-dir", "{out}", label="smollm2"))
    else:
        note = "SmolLM2 weights not installed (sh .gpu-kit/install.sh): the real-model identity run left out"
    return Part("exactness", 150, what, tuple(runs), note)


def _e2e(dry: bool) -> Part:
    what = "TRL's GRPOTrainer vs tailrl (off / SAGC + PODS + speculation), time per step and peak memory; one step of a Qwen2.5-1.5B shape at G = 16, B = 256, 1,024 new tokens"
    trl = _have("trl", "datasets")
    note = "" if trl else "trl / datasets not installed (sh .gpu-kit/install.sh): the TRL side left out"
    systems = ["trl", "off", "full"] if trl else ["off", "full"]
    if dry:
        dry_systems = [x for x in systems if x != "full"]  # full = off here: big-step has no accelerations to add
        return Part("e2e", 300, what, (_bench("e2e", "--task", "big-step-dry", "--systems", *dry_systems, "--steps", "1",
                                              "--eval-every", "1", "--out-dir", "{out}", label="big-step"),), note)
    runs = [_bench("e2e", "--task", "big-step", "--systems", "off", "--steps", "1", "--eval-every", "1",
                   "--out-dir", "{out}", label="big-step"),
            _bench("e2e", "--task", "wide", "--systems", *systems, "--steps", "5", "--out-dir", "{out}", label="wide")]
    if _have_smollm2():
        runs.insert(0, _bench("e2e", "--task", "smollm2", "--systems", *systems, "--steps", "10", "--eval-every", "5",
                              "--out-dir", "{out}", label="smollm2"))
    else:
        note = "; ".join(filter(None, [note, "SmolLM2 weights not installed: the real-model e2e left out"]))
    return Part("e2e", 300, what, tuple(runs), note)


def _seeds(dry: bool) -> list[Part]:
    if dry:
        spec = (_bench("spec", "--mode", "coupled", "--batches", "16", "--max-new", "6", "--out-dir", "{out}"),)
        pods = (_bench("pods", "rollout.max_new_tokens=8", "train.eval_prompts=4", "--m", "2", "--ratio", "2",
                       "--prompts", "1", "--budget-s", "2", "--no-rules", "--out-dir", "{out}"),)
        sagc = (_bench("sagc", "rollout.max_new_tokens=8", "train.eval_prompts=4", "--batch", "16", "--prompt-budget",
                       "8", "--candidates", "4", "8", "--out-dir", "{out}"),)
    else:
        spec = (_bench("spec", "--mode", "coupled", "decoupled", "--batches", "64", "256", "--out-dir", "{out}",
                       label="modes"),
                _bench("spec", "--workloads", "demo", "large", *(["smollm2"] if _have_smollm2() else []),
                       "--out-dir", "{out}", label="workloads"))
        pods = (_bench("pods", "--budget-s", "45", "--no-rules", "--out-dir", "{out}"),)
        sagc = (_bench("sagc", "--prompt-budget", "480", "--out-dir", "{out}"),)
    return [Part("spec", 120, "speculation off / coupled / decoupled, tail-heavy, side by side", spec),
            Part("pods", 120, "GRPO (m per prompt) vs GRPO-PODS (n = 4m generated) where the update dominates", pods),
            Part("sagc", 120, "static G vs SAGC at the same prompt budget", sagc)]


def parts(dry: bool) -> list[Part]:
    """Every part, in the order they run."""
    return [_tests(dry), *_engine(dry), _exactness(dry), _e2e(dry), *_seeds(dry)]


PART_NAMES = ("tests", "engine", "engine-eager", "long-tail", "exactness", "e2e", "spec", "pods", "sagc")
