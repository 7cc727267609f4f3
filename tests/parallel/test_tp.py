"""TP=2 over gloo against TP=1: logits, resharding both ways, and hf_state_dict gathering."""

import torch
import torch.distributed as dist

from tailrl.model import ModelArgs
from tailrl.model.layers import NO_TP, TPContext
from tailrl.model.loading import iter_safetensors, read_config
from tailrl.model.weights import hf_state_dict
from tailrl.parallel.dist import GroupPool, spawn
from tailrl.parallel.shard import reshard, sharded
from tests.helpers import make_model_dir

IDS = torch.tensor([[5, 17, 33, 2, 90, 41, 7], [9, 9, 60, 1, 3, 88, 12]])


def _load(folder):
    return ModelArgs.from_hf(read_config(folder)), list(iter_safetensors(sorted(folder.glob("*.safetensors"))))


def _ranks(rank, world, folder):
    args, tensors = _load(folder)
    pool = GroupPool()
    tp = TPContext(pool.get((0, 1)))
    m2 = sharded(args, tensors, tp)
    with torch.no_grad():
        tp2 = m2(IDS)
        back = reshard(m2, NO_TP)  # TP2 -> TP1 (all-gather + slice)
        tp1 = back(IDS)
        again = reshard(back, tp)  # TP1 -> TP2 (local slice)
        tp2b = again(IDS)
        full = hf_state_dict(m2)  # gathered under HF names
    assert pool.get((0, 1)) is tp.group and pool.created == 1  # reused, not recreated
    dist.barrier()
    return tp2, tp1, tp2b, {k: v.clone() for k, v in full.items()}, sum(p.numel() for p in m2.parameters())


def test_tp2_logits_equal_tp1_and_reshard_round_trips(tmp_path):
    folder = make_model_dir(tmp_path / "m", vocab_pad=None) if False else make_model_dir(tmp_path / "m")
    args, tensors = _load(folder)
    ref = sharded(args, tensors, NO_TP)
    with torch.no_grad():
        want = ref(IDS)
    outs = spawn(_ranks, 2, folder)
    for tp2, tp1, tp2b, full, n in outs:
        assert (tp2 - want).abs().max() <= 1e-5
        assert (tp1 - want).abs().max() <= 1e-5
        assert (tp2b - want).abs().max() <= 1e-5
        assert full.keys() == dict(tensors).keys() - {"lm_head.weight"} or full.keys() == dict(tensors).keys()
        assert all(torch.equal(full[k], dict(tensors)[k]) for k in full)
        assert n < sum(p.numel() for p in ref.parameters())  # each rank holds a shard
