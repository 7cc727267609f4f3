"""Ahead-of-time compilation of every Triton kernel for sm_80 and sm_90 without a GPU (tailrl/kernels/aot.py):
the launch sites' real signatures, dtypes and constexprs at SmolLM2-135M and Qwen2.5-1.5B shapes, compiled by
Triton's compiler and its bundled ptxas in a subprocess (the interpreter off). The interpreter accepts code
the compiler rejects; this is where that shows."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

KERNELS = Path(__file__).resolve().parents[2] / "tailrl" / "kernels"


def _launched_kernels() -> set[str]:
    """Names of the @triton.jit functions the package launches (`name[grid](...)`)."""
    names = set()
    for path in KERNELS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and isinstance(node.func.value, ast.Name):
                names.add(node.func.value.id)
    return names


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("aot") / "rows.json"
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    res = subprocess.run([sys.executable, "-m", "tailrl.kernels.aot", "--json", str(out)], env=env,
                         capture_output=True, text=True, timeout=1200)
    assert out.is_file(), res.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_aot_every_kernel_compiles_for_sm80_and_sm90(rows):
    from tailrl.kernels.aot import SHARED_LIMIT

    assert {r["kernel"] for r in rows} == _launched_kernels()  # every launched kernel is covered
    assert {r["target"] for r in rows} == {"sm_80", "sm_90"}
    assert [r for r in rows if not r["ok"]] == []
    assert [r for r in rows if r["shared_bytes"] > SHARED_LIMIT[int(r["target"][3:])]] == []
    # bf16 (the CUDA default) and the dtype-free kernels (the sampler's cut): no register spills anywhere (tile
    # sizes and warps chosen for it; the same holds with Triton 3.6, the GPU image's version: docs/results.md)
    assert [(r["call"], r["target"], r["spill_bytes"]) for r in rows
            if r["spill_bytes"] and not r["call"].endswith(" float32")] == []


@pytest.mark.slow
def test_aot_sampler_cut_compiles_for_each_flag_pair(rows):
    cut = {(r["call"].split(" ", 2)[2], r["target"]) for r in rows if r["kernel"] == "_nucleus_floor_kernel"}
    assert cut == {(f, t) for f in ("k=True p=True", "k=True p=False", "k=False p=True") for t in ("sm_80", "sm_90")}


@pytest.mark.slow
def test_aot_split_context_attention_compiles_with_its_combine_kernel(rows):
    split = {(r["kernel"], r["target"]) for r in rows if r["call"].startswith("paged_attention split")}
    assert split == {(k, t) for k in ("_paged_attention_kernel", "_combine_kernel") for t in ("sm_80", "sm_90")}
