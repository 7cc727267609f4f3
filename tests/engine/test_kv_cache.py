"""PagedKVCache bookkeeping: writable() (the scheduler's decode fast path) says True exactly when ensure()
would change nothing; release() / restore() between rollouts."""

import random

import pytest
import torch

from tailrl.engine.kv_cache import OutOfBlocks, PagedKVCache


class _Model:
    def new_kv_cache(self, n, dtype=None, device=None):
        return torch.zeros(2, 1, n, 1, 2)


def _snapshot(c: PagedKVCache):
    return {k: list(v) for k, v in c.tables.items()}, list(c.refcount), list(c.free_blocks)


def test_writable_iff_ensure_is_a_no_op():
    rng = random.Random(0)
    c = PagedKVCache(_Model(), num_tokens=64 * 4, block_size=4)
    lengths = {}
    checked = 0
    for step in range(3000):
        op = rng.random()
        if op < 0.1 and len(lengths) < 12:  # new sequence, or a fork of an existing one
            sid = step
            if lengths and rng.random() < 0.5:
                parent = rng.choice(list(lengths))
                n = rng.randint(1, lengths[parent]) if lengths[parent] else 0
                c.fork(parent, sid, n)
                lengths[sid] = n
            else:
                lengths[sid] = 0
        elif op < 0.15 and lengths:
            sid = rng.choice(list(lengths))
            c.free(sid)
            del lengths[sid]
        elif op < 0.25 and lengths:  # rollback
            sid = rng.choice(list(lengths))
            lengths[sid] = rng.randint(0, lengths[sid])
            c.truncate(sid, lengths[sid])
        elif lengths:
            sid = rng.choice(list(lengths))
            n = rng.randint(1, 5)
            before = _snapshot(c)
            w = c.writable(sid, lengths[sid], n)
            try:
                c.ensure(sid, lengths[sid], n)
            except OutOfBlocks:
                assert not w
                continue
            assert w == (_snapshot(c) == before), (step, sid)
            checked += 1
            lengths[sid] += n
    assert checked > 1000


def test_release_and_restore_are_idempotent_and_take_a_new_capacity():
    for grow in (False, True):
        c = PagedKVCache(_Model(), num_tokens=64, block_size=4, grow=grow)
        c.ensure(1, 0, 10)
        with pytest.raises(RuntimeError, match="live sequences"):
            c.release()
        c.free(1)
        c.release()
        c.release()  # idempotent
        assert c.released and c.kv.numel() == 0 and c.num_free == 0
        c.restore(32)  # measured again by the engine: a smaller pool this time
        c.restore(1024)  # not released: nothing happens
        assert not c.released and c.num_blocks == 8 and c.num_free == 8
        c.ensure(2, 0, 32)
        with pytest.raises(OutOfBlocks):  # the restored pool's capacity is 8 blocks
            c.ensure(3, 0, 1)
