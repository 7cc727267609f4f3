"""Ahead-of-time compilation of every Triton kernel for GPU targets, without a GPU: what a GPU session would
compile first, checked on any machine (and in CI) with Triton's compiler and its bundled ptxas.

Each kernel is compiled as its launch site calls it: the public wrappers (paged_attention, rms_norm, ...)
run on CPU tensors of real model shapes while launches are captured instead of run, and each captured
launch (its arguments' dtypes, its constexprs, num_warps / num_stages / enable_fp_fusion) is compiled for
every target. ptxas -v then reports registers, spills and shared memory per binary.

    python -m tailrl.kernels.aot [--targets 80 90] [--json out.json]     (TRITON_INTERPRET must be 0)

Shapes: SmolLM2-135M (hidden 576, 9 heads / 3 KV heads of 64, MLP 1,536, vocab 49,152) and Qwen2.5-1.5B
(hidden 1,536, 12 / 2 heads of 128, MLP 8,960, vocab 151,936), decode (one token per row) and prefill, in
bf16 and fp32, plus GQA groups 1 and 8.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.runtime.jit import KernelInterface

from tailrl import kernels

OPTIONS = ("num_warps", "num_stages", "enable_fp_fusion")
_PTR = {torch.float32: "*fp32", torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.int32: "*i32",
        torch.int64: "*i64", torch.int8: "*i8", torch.uint8: "*u8", torch.bool: "*i1"}


@contextlib.contextmanager
def captured():
    """Within: `kernel[grid](*args, **kw)` records (kernel, args, kw) in the yielded list instead of running."""
    launches: list = []
    original = KernelInterface.__getitem__
    KernelInterface.__getitem__ = lambda self, grid: lambda *a, **kw: launches.append((self, a, kw))
    try:
        yield launches
    finally:
        KernelInterface.__getitem__ = original


def signature(fn, args: tuple, kw: dict) -> tuple[dict, dict, dict]:
    """(signature, constexprs, options) of one captured launch of a JITFunction."""
    sig, const = {}, {}
    for i, p in enumerate(fn.params):
        v = args[i] if i < len(args) else kw[p.name]
        if p.is_constexpr:
            sig[p.name], const[p.name] = "constexpr", v
        elif isinstance(v, torch.Tensor):
            sig[p.name] = _PTR[v.dtype]
        elif isinstance(v, bool):
            sig[p.name] = "i1"
        elif isinstance(v, int):
            sig[p.name] = "i32" if -2 ** 31 <= v < 2 ** 31 else "i64"
        elif isinstance(v, float):
            sig[p.name] = "fp32"
        else:
            raise TypeError(f"{fn.__name__}: argument {p.name} of type {type(v).__name__}")
    return sig, const, {k: kw[k] for k in OPTIONS if k in kw}


def _shapes():
    """(label, thunk) per wrapper call of a real shape; each thunk calls the wrapper on CPU tensors."""
    z = torch.zeros
    out = []
    for dt in (torch.bfloat16, torch.float32):
        d = str(dt).removeprefix("torch.")
        for hidden, heads, kv, hd, inter, vocab in ((576, 9, 3, 64, 1536, 49152), (1536, 12, 2, 128, 8960, 151936)):
            for T in (1, 64):  # decode, prefill
                B = 4
                out.append((f"paged_attention D={hd} G={heads // kv} T={T} {d}", lambda B=B, T=T, h=heads, kv=kv, hd=hd, dt=dt:
                            kernels.paged_attention(z(B, T, h, hd, dtype=dt), z(256, kv, hd, dtype=dt), z(256, kv, hd, dtype=dt),
                                                    z(B, 8, dtype=torch.int32), z(B, dtype=torch.int32),
                                                    torch.full((B,), T, dtype=torch.int32), 16, hd ** -0.5)))
            # the long tail: one request split over its context's chunks (+ the combine kernel)
            out.append((f"paged_attention split D={hd} G={heads // kv} T=1 {d}", lambda h=heads, kv=kv, hd=hd, dt=dt:
                        kernels.paged_attention(z(1, 1, h, hd, dtype=dt), z(2048, kv, hd, dtype=dt),
                                                z(2048, kv, hd, dtype=dt), z(1, 128, dtype=torch.int32),
                                                z(1, dtype=torch.int32), torch.ones(1, dtype=torch.int32), 16,
                                                hd ** -0.5, split=True)))
            out.append((f"store_kv D={hd} {d}", lambda kv=kv, hd=hd, dt=dt: kernels.store_kv(
                z(4, kv, hd, dtype=dt), z(4, kv, hd, dtype=dt), z(64, kv, hd, dtype=dt), z(64, kv, hd, dtype=dt),
                torch.arange(4))))
            out.append((f"rms_norm+res H={hidden} {d}", lambda hidden=hidden, dt=dt: kernels.rms_norm(
                z(4, hidden, dtype=dt), z(hidden, dtype=dt), 1e-5, residual=z(4, hidden, dtype=dt))))
            out.append((f"rms_norm H={hidden} {d}", lambda hidden=hidden, dt=dt: kernels.rms_norm(
                z(4, hidden, dtype=dt), z(hidden, dtype=dt), 1e-5)))
            out.append((f"rotary D={hd} {d}", lambda h=heads, kv=kv, hd=hd, dt=dt: kernels.apply_rotary(
                z(4, h, hd, dtype=dt), z(4, kv, hd, dtype=dt), z(128, hd, dtype=dt), torch.arange(4))))
            out.append((f"silu_mul I={inter} {d}", lambda inter=inter, dt=dt: kernels.silu_mul(z(4, 2 * inter, dtype=dt))))
            for M in (1, 64):
                out.append((f"matmul M={M} K={hidden} N={inter} {d}", lambda M=M, hidden=hidden, inter=inter, dt=dt:
                            kernels.matmul_invariant(z(M, hidden, dtype=dt), z(inter, hidden, dtype=dt))))
            # decode's down projection split over K (+ the reduce kernel)
            out.append((f"matmul split M=1 K={inter} N={hidden} {d}", lambda hidden=hidden, inter=inter, dt=dt:
                        kernels.matmul_invariant(z(1, inter, dtype=dt), z(hidden, inter, dtype=dt), split=True)))
            out.append((f"token_logprobs V={vocab} {d}", lambda vocab=vocab, dt=dt: kernels.token_logprobs_invariant(
                z(4, vocab, dtype=dt), torch.zeros(4, dtype=torch.long), 1.0)))
            out.append((f"log_softmax V={vocab} {d}", lambda vocab=vocab, dt=dt: kernels.log_softmax_invariant(
                z(4, vocab, dtype=dt))))
            out.append((f"gumbel_argmax V={vocab} {d}", lambda vocab=vocab, dt=dt: kernels.gumbel_argmax(
                z(4, vocab, dtype=dt), torch.zeros(4, dtype=torch.long), torch.ones(4), torch.full((4,), float("-inf")))))
        out.append((f"paged_attention D=128 G=1 T=1 {d}", lambda dt=dt: kernels.paged_attention(
            z(4, 1, 4, 128, dtype=dt), z(256, 4, 128, dtype=dt), z(256, 4, 128, dtype=dt), z(4, 8, dtype=torch.int32),
            z(4, dtype=torch.int32), torch.ones(4, dtype=torch.int32), 16, 128 ** -0.5)))
        out.append((f"paged_attention D=128 G=8 T=1 {d}", lambda dt=dt: kernels.paged_attention(
            z(4, 1, 16, 128, dtype=dt), z(256, 2, 128, dtype=dt), z(256, 2, 128, dtype=dt), z(4, 8, dtype=torch.int32),
            z(4, dtype=torch.int32), torch.ones(4, dtype=torch.int32), 16, 128 ** -0.5)))
    # the samplers' top-k / top-p cut: fp32 weights whatever the model's dtype; one binary per flag pair
    for vocab in (49152, 151936):
        for need_k, need_p in ((True, True), (True, False), (False, True)):
            out.append((f"nucleus_floor V={vocab} k={need_k} p={need_p}", lambda vocab=vocab, k=need_k, p=need_p:
                        kernels.nucleus_floor(z(4, vocab), torch.zeros(4, dtype=torch.long), torch.ones(4), k, p)))
    return out


def _ptxas_stats(ptx: str, arch: int) -> dict:
    """Registers, spill bytes and static shared memory of a PTX module by Triton's bundled ptxas -v."""
    # lazy: the NVIDIA backend only where a kernel is compiled for it
    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        arch_name = f"sm_{arch}a" if arch == 90 else f"sm_{arch}"
        res = subprocess.run([get_ptxas(arch).path, "-v", f"--gpu-name={arch_name}", src, "-o",
                              os.path.join(tmp, "k.cubin")], capture_output=True, text=True)
    log = res.stdout + res.stderr
    regs = [int(x) for x in re.findall(r"Used (\d+) registers", log)]
    spills = [int(a) + int(b) for a, b in re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)]
    return {"registers": max(regs, default=0), "spill_bytes": max(spills, default=0)}


def compile_all(targets=(80, 90)) -> list[dict]:
    """Compile every captured launch for every target. One row per (call, kernel, target): ok / error,
    registers, spill bytes, shared memory bytes."""
    rows, seen = [], {}
    for label, call in _shapes():
        with captured() as launches:
            call()
        for fn, args, kw in launches:
            sig, const, opts = signature(fn, args, kw)
            for arch in targets:
                key = (fn.__name__, json.dumps(sig, sort_keys=True), json.dumps(const, sort_keys=True, default=str),
                       json.dumps(opts, sort_keys=True), arch)
                if key in seen:
                    continue
                row = {"call": label, "kernel": fn.__name__, "target": f"sm_{arch}", "triton": triton.__version__}
                try:
                    k = triton.compile(triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=const),
                                       target=GPUTarget("cuda", arch, 32), options=opts)
                    row |= {"ok": True, "shared_bytes": int(k.metadata.shared), **_ptxas_stats(k.asm["ptx"], arch)}
                except Exception as e:  # noqa: BLE001 - reported per row, the test fails on any
                    row |= {"ok": False, "error": f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}"}
                seen[key] = row
                rows.append(row)
    return rows


SHARED_LIMIT = {80: 163 * 1024, 90: 227 * 1024}  # bytes of shared memory a block may use


def problems(rows: list[dict]) -> list[str]:
    """Compile errors, register spills (allowed only in an fp32 model's binaries: fp32 attention's tiles), shared
    memory beyond the target's limit."""
    bad = []
    for r in rows:
        arch = int(r["target"][3:])
        if not r["ok"]:
            bad.append(f"{r['call']} / {r['kernel']} / {r['target']}: {r['error']}")
        elif r["spill_bytes"] and not r["call"].endswith(" float32"):
            bad.append(f"{r['call']} / {r['kernel']} / {r['target']}: {r['spill_bytes']} bytes of register spills")
        elif r["shared_bytes"] > SHARED_LIMIT[arch]:
            bad.append(f"{r['call']} / {r['kernel']} / {r['target']}: {r['shared_bytes']} bytes of shared memory")
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="compile every Triton kernel for GPU targets without a GPU")
    ap.add_argument("--targets", type=int, nargs="+", default=[80, 90])
    ap.add_argument("--json", default=None, help="write the rows here")
    a = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        print("TRITON_INTERPRET=1 selects the interpreter: run with TRITON_INTERPRET=0", file=sys.stderr)
        return 2
    rows = compile_all(tuple(a.targets))
    print("| call | kernel | target | registers | spills (B) | shared (B) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        cells = (r["registers"], r["spill_bytes"], r["shared_bytes"]) if r["ok"] else ("error", r["error"], "")
        print(f"| {r['call']} | {r['kernel']} | {r['target']} | " + " | ".join(map(str, cells)) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    bad = problems(rows)
    for b in bad:
        print("PROBLEM", b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
