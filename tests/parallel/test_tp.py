"""TP=2 over gloo against TP=1: logits, resharding both ways, and hf_state_dict gathering."""

import pytest
import torch
import torch.distributed as dist

from tailrl.model import ModelArgs
from tailrl.model.layers import NO_TP, TPContext
from tailrl.model.loading import iter_safetensors, read_config
from tailrl.model.weights import hf_state_dict
from tailrl.parallel.dist import GroupPool, spawn
from tailrl.parallel.shard import reshard, sharded
from tests.helpers import make_model_dir

pytestmark = pytest.mark.slow  # every test here starts processes

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
    folder = make_model_dir(tmp_path / "m")  # a 103-token vocabulary: TP=2 pads the last rank
    args, tensors = _load(folder)
    ref = sharded(args, tensors, NO_TP)
    with torch.no_grad():
        want = ref(IDS)
    outs = spawn(_ranks, 2, folder)
    for tp2, tp1, tp2b, full, n in outs:
        assert (tp2 - want).abs().max() <= 1e-5
        assert (tp1 - want).abs().max() <= 1e-5
        assert (tp2b - want).abs().max() <= 1e-5
        assert full.keys() == dict(tensors).keys()
        assert all(torch.equal(full[k], dict(tensors)[k]) for k in full)
        assert n < sum(p.numel() for p in ref.parameters())  # each rank holds a shard


class _Rank:
    def __init__(self, rank, size):
        self.rank, self.size, self.group = rank, size, None


def test_vocab_padding_when_a_rank_holds_only_padding():
    from tailrl.model.layers import VocabParallelEmbedding, vocab_shard

    full = torch.arange(5 * 3, dtype=torch.float32).view(5, 3)
    rows = []
    for r in range(4):  # vocab 5 over 4 ranks: 2 rows each, the last rank starts past the end
        emb = VocabParallelEmbedding(5, 3, _Rank(r, 4))
        emb.weight_loader(emb.weight, full)
        rows.append(emb.weight.data)
    assert vocab_shard(5, _Rank(3, 4)) == (2, 6, 0)
    assert torch.equal(torch.cat(rows)[:5], full) and not torch.cat(rows)[5:].any()


def _user_mistake(rank, world):
    from tailrl.errors import UserError

    raise UserError(f"rank {rank}: bad input")


def test_a_user_error_inside_a_rank_stays_one_line():
    import pytest

    from tailrl.errors import UserError

    with pytest.raises(UserError, match="bad input"):
        spawn(_user_mistake, 2)
