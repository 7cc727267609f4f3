"""`tailrl simulate`: the what-if cluster simulator (tailrl/sim) from a config and overrides."""

from __future__ import annotations


def add(sub) -> None:
    p = sub.add_parser("simulate", help="what-if simulator: synchronous RL steps on a cluster over length traces")
    p.set_defaults(run=run)
    p.add_argument("config", nargs="?", help="YAML config, or a bundled one (pat_h100_llama8b_24k, ...)")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. cluster.num_gpus=16 pat.enabled=true")
    p.add_argument("--out", default="runs/simulate", help="folder for summary.md, steps.json, timeline.png, breakdown.png")


def run(a) -> int:
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    from tailrl.sim.command import run_simulate

    config, overrides = a.config, list(a.overrides)
    if config and "=" in config:  # overrides only, no config file
        config, overrides = None, [config, *overrides]
    md, _ = run_simulate(config, overrides, a.out)
    print(md)
    print(f"report: {a.out}/summary.md, plots: {a.out}/timeline.png, {a.out}/breakdown.png")
    return 0
