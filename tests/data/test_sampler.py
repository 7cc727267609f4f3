"""PromptSampler: determinism, epoch reshuffles, exact resume from a JSON round-tripped state."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailrl.data.datasets import Example, PromptDataset
from tailrl.data.sampler import PromptSampler
from tailrl.errors import UserError


def make_ds(n: int) -> PromptDataset:
    exs = [Example(i, f"p{i}", ({"role": "user", "content": f"p{i}"},), str(i), {"answer": str(i)}) for i in range(n)]
    return PromptDataset(exs, 0, "mem")


def uids(examples) -> list[int]:
    return [e.uid for e in examples]


def test_epochs_cover_dataset_and_reshuffle():
    s = PromptSampler(make_ds(10), seed=1)
    e0, e1 = uids(s.next(10)), uids(s.next(10))
    assert sorted(e0) == sorted(e1) == list(range(10))
    assert e0 != e1  # seed + epoch gives each epoch its own order
    assert s.state_dict()["epoch"] == 1


def test_deterministic_and_seed_dependent():
    a, b, c = (PromptSampler(make_ds(20), seed=s) for s in (0, 0, 1))
    seq = [uids(a.next(7)) for _ in range(5)]
    assert seq == [uids(b.next(7)) for _ in range(5)]
    assert seq != [uids(c.next(7)) for _ in range(5)]


def test_no_shuffle_wraps_in_order():
    s = PromptSampler(make_ds(3), shuffle=False)
    assert uids(s.next(7)) == [0, 1, 2, 0, 1, 2, 0]
    assert s.next(0) == []


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 12), sizes=st.lists(st.integers(0, 30), min_size=1, max_size=8),
       cut=st.integers(0, 8), seed=st.integers(0, 2**31), shuffle=st.booleans())
def test_exact_resume(size, sizes, cut, seed, shuffle):
    """Interrupt after `cut` requests, save, restore into a fresh sampler: same sequence as uninterrupted."""
    ds = make_ds(size)
    ref = PromptSampler(ds, seed=seed, shuffle=shuffle)
    expected = [uids(ref.next(n)) for n in sizes]
    first = PromptSampler(ds, seed=seed, shuffle=shuffle)
    got = [uids(first.next(n)) for n in sizes[:cut]]
    state = json.loads(json.dumps(first.state_dict()))
    resumed = PromptSampler(ds, seed=12345, shuffle=not shuffle)  # the state's seed/shuffle win
    resumed.load_state_dict(state)
    got += [uids(resumed.next(n)) for n in sizes[cut:]]
    assert got == expected


def test_resume_mid_epoch_example():
    s = PromptSampler(make_ds(8), seed=5)
    s.next(3)
    state = s.state_dict()
    assert state["position"] == 3 and state["epoch"] == 0
    rest = uids(s.next(13))
    t = PromptSampler(make_ds(8), seed=5)
    t.load_state_dict(state)
    assert uids(t.next(13)) == rest


def test_resume_rejects_other_dataset_and_empty():
    s = PromptSampler(make_ds(4))
    with pytest.raises(UserError, match="dataset of 5 rows; this one has 4"):
        s.load_state_dict({"epoch": 0, "position": 0, "seed": 0, "shuffle": True, "size": 5})
    with pytest.raises(ValueError):
        PromptSampler(make_ds(0))
    with pytest.raises(ValueError):
        s.next(-1)
