"""The package's dependency rules, checked on its source so they stay true (ARCHITECTURE.md, "Layout").

- Dependencies point down: the engine knows nothing of speculation (tailrl/speculative builds on it),
  training, control, the demo, the simulator, the benchmarks or the CLI; the model nothing of algo/; parallel rollout does not run on the simulator; training does not reach into the
  CLI. Tail metrics live in tailrl/tail.py, which imports no tailrl module.
- Imports go at module top. An import inside a function is allowed only with a comment saying why that
  contains "lazy" (an optional dependency, a subprocess's start-up, the CLI keeping torch out of --help),
  on the import line or on the comment lines just above its block of imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tailrl"

FORBIDDEN = {
    "engine": {"speculative", "outputs", "train", "control", "demo", "sim", "bench", "commands", "parallel"},
    "speculative": {"outputs", "train", "control", "demo", "sim", "bench", "commands", "parallel"},
    "outputs": {"speculative", "train", "control", "demo", "sim", "bench", "commands", "parallel"},
    "parallel": {"sim", "train", "demo", "bench", "commands"},
    "train": {"commands", "bench", "demo", "sim"},
    "model": {"engine", "speculative", "algo", "train", "control", "demo", "sim", "bench", "commands", "parallel"},
    "kernels": {"engine", "train", "control", "demo", "sim", "bench", "commands", "parallel", "model"},
    "algo": {"engine", "train", "control", "demo", "sim", "bench", "commands", "parallel", "model"},
    "control": {"engine", "train", "demo", "sim", "bench", "commands", "parallel", "model"},
    "perf": {"engine", "train", "control", "demo", "sim", "bench", "commands", "parallel", "model"},
    "sim": {"train", "demo", "bench", "commands", "parallel"},
    "rewards": {"engine", "train", "demo", "sim", "bench", "commands", "parallel", "model", "tools"},
    "tools": {"engine", "speculative", "outputs", "train", "control", "demo", "sim", "bench", "commands", "parallel",
              "model", "kernels", "algo", "data"},
    "data": {"engine", "train", "demo", "sim", "bench", "commands", "parallel", "model"},
    "config": {"engine", "train", "control", "demo", "sim", "bench", "commands", "parallel", "model", "data"},
    "tail": {"*"},
}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        yield path, ".".join(rel.parts).removesuffix(".__init__")


def _imported(node: ast.AST, module: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:  # relative: resolve against the importing module's package
            base = module.split(".")[: -node.level]
            return [".".join(base + ([node.module] if node.module else []))]
        return [node.module or ""]
    return []


def _function_imports(tree: ast.AST):
    """Import statements inside function bodies (at any depth)."""
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    yield node


def test_dependencies_point_down():
    bad = []
    for path, module in _modules():
        parts = module.split(".")
        area = parts[1] if len(parts) > 1 else ""
        banned = FORBIDDEN.get(area, set())
        for node in ast.walk(ast.parse(path.read_text())):
            for name in _imported(node, module):
                if not name.startswith("tailrl."):
                    continue
                target = name.split(".")[1]
                if target != area and ("*" in banned or target in banned):
                    bad.append(f"{module} imports {name} (line {node.lineno})")
    assert not bad, "dependency rules broken:\n" + "\n".join(bad)


def test_function_level_imports_say_why():
    bad = []
    for path, module in _modules():
        lines = path.read_text().splitlines()
        for node in _function_imports(ast.parse(path.read_text())):
            i = node.lineno - 1
            if "lazy" in lines[i]:
                continue
            j = i - 1  # walk up over the import block and blank lines to the comment above it
            while j >= 0 and (lines[j].strip().startswith(("import ", "from ")) or not lines[j].strip()):
                j -= 1
            if j >= 0 and lines[j].strip().startswith("#") and "lazy" in lines[j]:
                continue
            bad.append(f"{module}:{node.lineno}: {lines[i].strip()}")
    assert not bad, (f"{len(bad)} imports inside functions without a '# lazy: why' comment (move them to the "
                     "module top, or say why they must wait):\n" + "\n".join(bad))


def test_the_rules_catch_what_they_should():
    """The checker itself: a banned edge and an unexplained function-level import are found."""
    src = "def f():\n    from tailrl.train import trainer\n"
    tree = ast.parse(src)
    assert [n.lineno for n in _function_imports(tree)] == [2]
    assert _imported(next(_function_imports(tree)), "tailrl.engine.x") == ["tailrl.train"]
    assert "train" in FORBIDDEN["engine"]


def _model_calls(tree: ast.AST) -> list[int]:
    """Lines calling a `model` attribute (`self.model(...)`, `engine.model(...)`): a forward of the model."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "model"]


def test_only_the_runner_runs_the_engines_model():
    """The engine's forwards (prefill, decode, verify, static and graph steps) all go through ModelRunner."""
    bad = []
    for path, module in _modules():
        if module.startswith(("tailrl.engine.", "tailrl.speculative.")) and module != "tailrl.engine.runner":
            bad += [f"{module}:{line}" for line in _model_calls(ast.parse(path.read_text()))]
    assert not bad, "the model's forward called outside engine/runner.py:\n" + "\n".join(bad)
    assert _model_calls(ast.parse("x = self.model(ids)\ny = model(ids)\n")) == [1]
