"""A GRPO update of a real model, full fine-tuning vs LoRA, side by side: optimizer state, trainable parameters,
the update's wall and CPU time (forward + backward + AdamW step, + the merge for LoRA) and peak RSS. Each variant runs in
its own child process (its ru_maxrss is its own), alternating full / LoRA / full / LoRA so a busy machine
slows both alike. The batch is the same for both (random completions of a fixed length, random advantages);
the rollout is not timed: with LoRA the engine runs the same module with the same weights' shapes and kernels.

    python benchmarks/lora_step.py --model smollm2-135m-instruct --seqs 16 --completion 96 --r 16 --threads 2

prints one row per child and a summary (medians over the timed updates of each variant).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time


def run_variant(a: argparse.Namespace) -> dict:
    """In the child: load, build the variant's policy and optimizer, one warm-up update, then the timed ones."""
    import torch

    from tailrl.config.sections import LoraConfig
    from tailrl.model import load
    from tailrl.train.batch import make_train_batch
    from tailrl.train.distributed import SINGLE
    from tailrl.train.policy import Policy, setup_lora
    from tailrl.train.update import UpdateParams, update_step

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model, _ = load(a.model, dtype="float32", device="cpu", tokenizer=False)
    if a.variant == "lora":
        setup_lora(model, LoraConfig(r=a.r, alpha=a.alpha, target_modules=tuple(a.targets)), torch.float32, 0, a.model)
    policy = Policy(model, "float32", SINGLE)
    opt = policy.make_optimizer(a.lr, (0.9, 0.999), 0.0)
    g = torch.Generator().manual_seed(1)
    V = model.args.vocab_size
    prompts = [torch.randint(0, V, (a.prompt,), generator=g).tolist() for _ in range(a.seqs)]
    completions = [torch.randint(0, V, (a.completion,), generator=g).tolist() for _ in range(a.seqs)]
    batch = make_train_batch(prompts, completions, torch.zeros(a.seqs))
    batch.advantages = torch.randn(a.seqs, generator=g)
    params = UpdateParams(loss_agg="seq-mean-token-mean", eps_low=0.2, eps_high=0.2, kl_coef=0.0,
                          max_completion_len=a.completion, micro_batch_size=a.micro, temperature=1.0, max_grad_norm=1.0)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    times, cpu = [], []
    for i in range(a.reps + 1):  # the first: warm-up (allocations, AdamW state), not counted
        t0, c0 = time.perf_counter(), time.process_time()
        update_step(policy.train, opt, batch, params)
        if i:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)  # every thread's CPU seconds: less sensitive to a busy machine
    mem = policy.memory_metrics(opt)
    return {"variant": a.variant, "times": times, "cpu": cpu, "optimizer_state_bytes": mem["perf/optimizer_state_gb"] * 2 ** 30,
            "trainable": mem["perf/trainable_params"], "params": sum(p.numel() for p in model.parameters()),
            "rss_before_update": rss0, "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--seqs", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=48)
    ap.add_argument("--completion", type=int, default=96)
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32.0)
    ap.add_argument("--targets", nargs="+", default=["all-linear"])
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--reps", type=int, default=2, help="timed updates per child (after one warm-up)")
    ap.add_argument("--rounds", type=int, default=2, help="children per variant, alternating")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--variant", choices=["full", "lora"], help=argparse.SUPPRESS)  # set in the children
    a = ap.parse_args()
    if a.variant:
        print(json.dumps(run_variant(a)))
        return
    rows = []
    for _ in range(a.rounds):
        for variant in ("full", "lora"):
            out = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--variant", variant], capture_output=True,
                                 text=True, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"{variant:5s} update s {' '.join(f'{t:.2f}' for t in row['times'])}  CPU s "
                  f"{' '.join(f'{t:.2f}' for t in row['cpu'])}  optimizer state "
                  f"{row['optimizer_state_bytes'] / 2 ** 20:.1f} MiB  trainable {row['trainable']:.0f}  peak RSS "
                  f"{row['peak_rss'] / 2 ** 30:.2f} GiB (before the update {row['rss_before_update'] / 2 ** 30:.2f})",
                  flush=True)
    by = {v: [r for r in rows if r["variant"] == v] for v in ("full", "lora")}
    med = {v: statistics.median(t for r in rs for t in r["times"]) for v, rs in by.items()}
    cpu = {v: statistics.median(t for r in rs for t in r["cpu"]) for v, rs in by.items()}
    state = {v: rs[0]["optimizer_state_bytes"] for v, rs in by.items()}
    peak = {v: max(r["peak_rss"] for r in rs) for v, rs in by.items()}
    print(f"optimizer state: LoRA / full = {state['lora'] / state['full']:.4f} ({state['lora'] / 2 ** 20:.1f} MiB / "
          f"{state['full'] / 2 ** 20:.1f} MiB); trainable {by['lora'][0]['trainable']:.0f} of "
          f"{by['full'][0]['params']:.0f} parameters")
    print(f"update (median of {sum(len(r['times']) for r in by['full'])} each): full {med['full']:.2f} s, LoRA "
          f"{med['lora']:.2f} s, LoRA / full = {med['lora'] / med['full']:.3f}; CPU s: full {cpu['full']:.1f}, LoRA "
          f"{cpu['lora']:.1f}, LoRA / full = {cpu['lora'] / cpu['full']:.3f}")
    print(f"peak RSS: full {peak['full'] / 2 ** 30:.2f} GiB, LoRA {peak['lora'] / 2 ** 30:.2f} GiB")


if __name__ == "__main__":
    main()
