"""Tensor-parallel rollout and PAT's online TP/DP reconfiguration (paper 004).

    dist.py     process launch (gloo, CPU models) and the lazily built, reused group pool
    layout.py   a TP x DP layout: which ranks form which TP group
    shard.py    sharded models from full weights; layer-by-layer resharding (all-gather + slice)
    rollout.py  one rollout over a layout, switching mid-generation when the controller says so (KV
                migration or recompute of the unfinished requests)
    profile.py  `tailrl profile tp`: decode / prefill latency per TP degree, bandwidth
    controller.py  PAT's switch rule on a real rollout (the simulator's PatPolicy + measured profile)
    generate.py / torchrun.py  `tailrl generate --tp/--dp/--switch`, and the same under torchrun

The layers themselves (column / row-parallel linears, vocab-parallel embedding and head, with their
collectives in `forward`) live in tailrl/model/layers.py; the predictor and the switch rule are
tailrl/perf's (latency.py `Profiled`, pat.py `PatPolicy`, shared with the simulator), fed measured profiles.
"""
