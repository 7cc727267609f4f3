"""Performance models shared by the live system and the simulator: GPU and model presets (hardware.py),
forward-latency predictors — analytic roofline or a measured profile — (latency.py), and PAT's switch
policy (pat.py). `tailrl.parallel` feeds them measured profiles on a real rollout; `tailrl.sim` replays
workloads through them. Pure Python: no torch, no process groups."""
