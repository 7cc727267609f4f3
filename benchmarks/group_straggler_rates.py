"""Straggler rate of the warm-started demo policy per group size at a fixed batch B (SAGC groundwork):
for each G, P = B / G held-out prompts x G samples, the fraction of groups with max/median > tau,
the mean len_max_over_median, rollout time and tail efficiency.

    python benchmarks/group_straggler_rates.py --batch 256
"""

from __future__ import annotations

import argparse
import statistics

import torch

from tailrl.config import EngineConfig
from tailrl.demo.run import DEMO_SPEC, DEMO_TASK
from tailrl.demo.warmstart import warm_start
from tailrl.engine import Request, SamplingParams
from tailrl.model import load
from tailrl.model.loading import cache_dir
from tailrl.speculative import build_engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--groups", type=int, nargs="+", default=[2, 4, 8, 16])
    ap.add_argument("--tau", type=float, default=1.25)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model, tok = load(warm_start(cache_dir() / "demo", DEMO_TASK, DEMO_SPEC))
    engine = build_engine(model, tok, EngineConfig(kv_cache_tokens=65536), tau=a.tau)
    rows = DEMO_TASK.rows(a.batch, "test", seed=0)
    print(f"{'G':>3} {'P':>4} {'straggler':>9} {'ratio':>6} {'rollout s':>9} {'tail eff':>8}")
    for G in a.groups:
        P = a.batch // G
        reqs = [Request(tok(r["prompt"])["input_ids"], uid=i, n=G, params=SamplingParams(max_new_tokens=160))
                for i, r in enumerate(rows[:P])]
        _, tr = engine.generate(reqs)
        ratios = tr.len_max_over_median()
        print(f"{G:>3} {P:>4} {tr.straggler_rate():>9.3f} {statistics.mean(ratios):>6.2f} {tr.t_end:>9.2f} "
              f"{tr.tail_efficiency():>8.2f}")


if __name__ == "__main__":
    main()
