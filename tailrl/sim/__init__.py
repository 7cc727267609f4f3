"""Cluster-scale what-if simulator over length traces (`tailrl simulate`): synchronous RL steps under
static or SAGC group sizes, PAT's TP/DP switching, speculation (coupled, decoupled, Best-of-N) and
PODS, priced by a roofline (GPU presets) or by a measured profile of tailrl's engine. Pure Python.

    workload.py  rounds: traces, synthetic  events.py   discrete-event loop
    generation.py one round on the cluster  spec.py     speculation's cost model
    run.py       steps from a SimConfig      report.py   table + plots

The engine profile it can price with is tailrl/parallel/latency_profile.py.

GPU / model presets, the roofline and profiled latency predictors and PAT's policy are tailrl/perf/
(shared with the live PAT controller in tailrl/parallel).
"""

from tailrl.sim.config import SimConfig
from tailrl.sim.run import SimResult, simulate, variants

__all__ = ["SimConfig", "SimResult", "simulate", "variants"]
