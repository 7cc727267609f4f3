"""Where a demo training step's time goes, at the two places the long tail costs: the engine's decode
step (median ms per decode forward + sampling + bookkeeping, forced lengths, batch sizes 1 / 64 / 256)
and the update over one step's 64 kept rollouts, with fixed micro-batches (every row padded to the
batch's longest rollout) and with token-budgeted, length-sorted ones (train.micro_batch_tokens).

    python benchmarks/step_costs.py [--tokens 0 256 1024]

Run it on two commits (git worktree) to compare code versions on one machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace


def decode_ms(engine, batch: int, new_tokens: int = 40, repeats: int = 3) -> float:
    from tailrl.engine import Request, SamplingParams

    p = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True, seed=1)
    best = []
    for _ in range(repeats + 1):  # the first run warms allocations up
        _, tr = engine.generate([Request([1, 5, 6, 7, 8, 9, 10, 11], uid=i, params=p) for i in range(batch)])
        best.append(statistics.median(s.t1 - s.t0 for s in tr.steps if s.kind == "decode") * 1000)
    return min(best[1:])


def update_s(trainer, phases, tokens: int) -> float:
    if hasattr(trainer.spec, "micro_batch_tokens"):
        trainer.spec = replace(trainer.spec, micro_batch_tokens=tokens)
    elif tokens:
        return float("nan")  # a version without token-budgeted micro-batches
    for gs in phases[:2]:
        trainer._update(gs)  # warm-up
    t = time.perf_counter()
    for gs in phases:
        trainer._update(gs)
    return (time.perf_counter() - t) / len(phases)


def main() -> None:
    import shutil
    import tempfile
    from pathlib import Path

    import torch

    from tailrl.bench.common import demo_policy
    from tailrl.config import EngineConfig
    from tailrl.demo.run import DEMO_TASK, demo_config, write_splits
    from tailrl.engine import Engine
    from tailrl.model import load
    from tailrl.train.trainer import Trainer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[0, 1024])
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model_dir = demo_policy()
    model, _ = load(model_dir)
    engine = Engine(model, EngineConfig(kv_cache_tokens=65536))
    print("decode step, median ms:", {b: round(decode_ms(engine, b), 2) for b in (1, 64, 256)})

    run = Path(tempfile.mkdtemp()) / "run"
    try:
        write_splits(run, DEMO_TASK)
        tr = Trainer(demo_config(model_dir, run, ["rollout.group_size=4", "train.rollout_batch_size=64",
                                                  "train.tensorboard=false", "train.save_every=0"]), run)
        phases = [tr.worker.step(16, 4, False, 0).groups for _ in range(8)]
        longest = [max(max(g.lengths) for g in gs) for gs in phases]
        mean = statistics.mean(n for gs in phases for g in gs for n in g.lengths)
        print(f"update of 64 rollouts (mean {mean:.1f} tokens, longest per step {longest}), s:",
              {t: round(update_s(tr, phases, t), 4) for t in a.tokens})
    finally:
        shutil.rmtree(run.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
