"""Which of the package's files can decide a benchmark run's tokens, and their digests: the static import
closure of generation's packages and the benchmark's own request / engine-setup modules.

A kept run (bench/run_cache.py) records these digests and is reused only while every file of the closure, as
the code now computes it, still has its recorded digest: a change to the engine, the model, the kernels,
speculation, the sampler, the config or the requests re-runs it; a change to the trainer, a command or the
results' write-up does not. The closure follows every `tailrl` import in those files, the ones inside
functions too (a drafter process, spec.mode=decoupled, imports from them modules the benchmark's own process
may never load); it does not follow a package's `__init__` that runs only because a submodule is imported
(tailrl's `__init__` files re-export, they do not change behaviour)."""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the tailrl package
# generation's packages, whole, and the benchmark modules that make the requests, the models and the engines
GENERATION_PACKAGES = ("engine", "model", "kernels", "speculative", "parallel")
BENCH_MODULES = ("bench/exactness_prompts.py", "bench/engine_tail.py")
# digested, their imports not followed: the benchmark's drivers, which import the trainer's forward and the
# write-up besides (neither touches a kept rollout); what they make rollouts with is imported from the above
LEAVES = ("bench/exactness.py", "bench/engine.py")


def _module_file(name: str) -> Path | None:
    """tailrl.a.b -> tailrl/a/b.py or tailrl/a/b/__init__.py (None: not a module of the package, e.g. a name
    imported from a module)."""
    p = ROOT.joinpath(*name.split(".")[1:])
    for f in (p / "__init__.py", p.with_suffix(".py")):
        if f.is_file():
            return f
    return None


def _imports(f: Path) -> set[str]:
    """Every tailrl module name `f` imports, anywhere in it (absolute or relative; `from m import x` names
    both m and m.x, since x may be a submodule)."""
    package = ["tailrl", *f.relative_to(ROOT).parent.parts]
    out: set[str] = set()
    for node in ast.walk(ast.parse(f.read_text(), str(f))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "tailrl"}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            if mod.split(".")[0] == "tailrl":
                out |= {mod} | {f"{mod}.{a.name}" for a in node.names}
    return out


def closure(inits: bool = False) -> list[Path]:
    """The files of GENERATION_PACKAGES, BENCH_MODULES and LEAVES and every package file the first two import,
    transitively. inits: also every package `__init__` an import runs on the way (what a process loads; the
    tests' oracle compares it with a fresh process's modules)."""
    todo = [f for pkg in GENERATION_PACKAGES for f in (ROOT / pkg).rglob("*.py")] + [ROOT / m for m in BENCH_MODULES]
    seen: set[Path] = {ROOT / m for m in LEAVES}
    if inits:  # the packages the starting files live in
        todo += [d / "__init__.py" for f in [*todo, *seen] for d in f.parents if d.is_relative_to(ROOT)]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        names = _imports(f)
        if inits:
            names |= {".".join(n.split(".")[:i]) for n in names for i in range(1, n.count(".") + 1)}
        todo += [m for m in map(_module_file, names) if m is not None and m not in seen]
    return sorted(seen)


def file_digest(path: Path) -> str:
    """16 hex digits of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


@functools.cache
def code_files() -> dict[str, str]:
    """{path in the package: digest} of the closure, as it is when first asked (a benchmark asks before it
    runs: the digests of the code that runs, even if a file is edited during an hours-long run)."""
    return {str(f.relative_to(ROOT)): file_digest(f) for f in closure()}


def same_code(recorded: dict[str, str]) -> bool:
    """Whether a run recorded with `recorded` was made by this code: every file of the closure has its digest
    there (files recorded beyond the closure are not the tokens' concern)."""
    return all(recorded.get(rel) == d for rel, d in code_files().items())
