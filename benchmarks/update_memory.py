"""Peak memory and time of the update's last step, LM head + chosen-token logprob, forward + backward:
today's path (F.linear -> (N, V) logits -> token_logprobs) vs chunked_token_logprobs. Each variant runs
in a fresh interpreter so its peak RSS (ru_maxrss) is its own.

    python benchmarks/update_memory.py --seqs 64 --completion 256 --hidden 576 --vocab 49152 --threads 2

prints one row per variant:

    variant             peak RSS MiB   over inputs MiB   wall s    cpu s    sys s   minor faults
    reference                    ...
    chunked c=1024               ...
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def run_variant(a: argparse.Namespace) -> dict:
    """In the child: build the inputs, warm up at a tiny size, then one timed forward + backward."""
    import torch
    import torch.nn.functional as F

    from tailrl.model.head import chunked_token_logprobs, token_logprobs

    torch.set_num_threads(a.threads)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    n = a.seqs * a.completion
    torch.manual_seed(0)
    h = torch.randn(n, a.hidden).to(dtype).requires_grad_()  # final-norm hidden at completion positions
    w = (torch.randn(a.vocab, a.hidden) * 0.02).to(dtype).requires_grad_()  # the LM head
    t = torch.randint(0, a.vocab, (n,))
    g = torch.randn(n)  # dL/dlogp from the policy loss
    c = a.completion
    if a.variant == "reference":
        def fn(h, w, t):  # today: (S, C, V) logits, then token_logprobs' fp32 log-softmax
            return token_logprobs(F.linear(h.view(-1, c, a.hidden), w), t.view(-1, c)).reshape(-1)
    else:
        def fn(h, w, t):
            return chunked_token_logprobs(h, w, t, chunk_rows=a.chunk_rows[0])
    fn(h[:c], w[:512], t[:c] % 512).backward(g[:c])  # warm-up (kernels, thread pool), not measured
    h.grad = w.grad = None
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    fn(h, w, t).backward(g)
    dt = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"peak": ru.ru_maxrss * 1024, "over": (ru.ru_maxrss - ru0.ru_maxrss) * 1024, "time": dt,
            "cpu": ru.ru_utime + ru.ru_stime - ru0.ru_utime - ru0.ru_stime, "sys": ru.ru_stime - ru0.ru_stime,
            "faults": ru.ru_minflt - ru0.ru_minflt}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqs", type=int, default=64)
    ap.add_argument("--completion", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=576)  # SmolLM2-135M's width
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--chunk-rows", type=int, nargs="+", default=[1024, 256])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--variant", help=argparse.SUPPRESS)  # set in the child process
    a = ap.parse_args()
    if a.variant:
        print(json.dumps(run_variant(a)))
        return
    n = a.seqs * a.completion
    print(f"LM head + logprob fwd+bwd: {a.seqs} x {a.completion} = {n} tokens, hidden {a.hidden}, "
          f"vocab {a.vocab}, {a.dtype}, {a.threads} threads; "
          f"one (N, V) fp32 tensor = {n * a.vocab * 4 / 2**20:,.0f} MiB")
    # cpu s (user + sys, all threads) is steadier than wall s on a shared machine; sys s: mostly page faults.
    print(f"{'variant':<18}{'peak RSS MiB':>14}{'over inputs MiB':>18}{'wall s':>9}{'cpu s':>9}{'sys s':>9}"
          f"{'minor faults':>15}")
    common = [f"--{k}={getattr(a, k)}" for k in ("seqs", "completion", "hidden", "vocab", "dtype", "threads")]
    variants = [("reference", None)] + [(f"chunked c={c}", c) for c in a.chunk_rows]
    for name, c in variants:
        cmd = [sys.executable, __file__, *common, f"--variant={'reference' if c is None else 'chunked'}",
               "--chunk-rows", str(c or 1)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"{name:<18}{r['peak'] / 2**20:>14,.0f}{r['over'] / 2**20:>18,.0f}{r['time']:>9.2f}"
              f"{r['cpu']:>9.2f}{r['sys']:>9.2f}{r['faults']:>15,}", flush=True)


if __name__ == "__main__":
    main()
