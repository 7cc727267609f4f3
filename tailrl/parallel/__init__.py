"""Tensor-parallel rollout and PAT's online TP/DP reconfiguration (paper 004).

    dist.py     process launch (gloo on CPU, NCCL on GPUs) and the lazily built, reused group pool
    layout.py   a TP x DP layout: which ranks form which TP group
    shard.py    sharded models from full weights; layer-by-layer resharding (all-gather + slice)
    kv.py       moving unfinished requests between layouts: KV migration or recompute
    rollout.py  one rollout over a layout, switching mid-generation when the controller says so
    profile.py  `tailrl profile tp`: decode / prefill latency per TP degree, bandwidth

The layers themselves (column / row-parallel linears, vocab-parallel embedding and head, with their
collectives in `forward`) live in tailrl/model/layers.py; the predictor and the switch rule are the
simulator's (tailrl/sim/latency.py `Profiled`, tailrl/sim/pat.py `PatPolicy`), fed measured profiles.
"""
