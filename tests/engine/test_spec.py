"""Speculative rollout: token identity with speculation off for every drafter (the exactness
contract), tree verification, rollback, draft-model cache consistency, windows vs brute force."""

import itertools
import random

import pytest

from tailrl.config import CoupledSpecConfig, EngineConfig, SpecConfig
from tailrl.engine import Request, SamplingParams
from tailrl.speculative import build_engine
from tailrl.speculative.drafters.ngram_index import NgramIndex
from tailrl.speculative.tree import accept_path, build_tree
from tailrl.speculative.window import expected_tokens, plan_windows
from tests.helpers import tiny_native

PROMPTS = [[5, 6, 7, 5, 6, 7, 5, 6], [9, 10, 11, 12, 13, 14, 15, 16], [30], [40, 41, 42, 40, 41, 42]]


@pytest.fixture(scope="module")
def model():
    return tiny_native("llama", vocab=61)[0]


def _run(model, spec: SpecConfig | None = None, temperature=1.0, n=4, max_new=40, **kw):
    cfg = EngineConfig(**({"kv_cache_tokens": 4096, "block_size": 4, "spec": spec or SpecConfig()} | kw))
    engine = build_engine(model, None, cfg, eos_ids=[2])
    if cfg.spec.method != "none":  # a fixed cost model (fixed cost >> per token): plans do not depend on timing
        engine.strategy.cost.coefficients = lambda near=None: (1.0, 0.001)
        engine.strategy.measured_slower = lambda batch: False
    params = SamplingParams(temperature=temperature, max_new_tokens=max_new, seed=5)
    outs, trace = engine.generate([Request(p, uid=10 + i, n=n, params=params) for i, p in enumerate(PROMPTS)])
    return {(o.uid, o.sample_index): (o.token_ids, o.finish_reason) for o in outs}, outs, trace, engine


@pytest.mark.parametrize("method", ["ngram", "history", "auto"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_token_identity_spec_on_off(model, method, temperature):
    base, base_outs, _, _ = _run(model, temperature=temperature)
    spec, outs, trace, _ = _run(model, SpecConfig(method=method, coupled=CoupledSpecConfig(bon_spare=50.0)), temperature=temperature)
    assert spec == base
    if method == "auto":  # two drafters and a generous spare budget: Best-of-N token trees were verified
        assert trace.spec["spec/bon_requests"] > 0
    for a, b in zip(sorted(base_outs, key=lambda o: (o.uid, o.sample_index)),
                    sorted(outs, key=lambda o: (o.uid, o.sample_index))):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_speculation_actually_accepts_on_repetitive_text(model):
    """Greedy decoding of a tiny random model loops; n-gram drafts must then be accepted."""
    _, _, trace, _ = _run(model, SpecConfig(method="ngram"), temperature=0.0, max_new=60)
    assert trace.spec["spec/acceptance_rate"] > 0.3
    assert trace.spec["spec/mean_accepted_len"] > 0.5


def test_draft_model_identity_and_cache_consistency(model, tmp_path):
    from tailrl.model.loading import save_hf

    draft_dir = tmp_path / "draft"
    save_hf(tiny_native("llama", vocab=61, layers=1, seed=1)[0], draft_dir)
    base, _, _, _ = _run(model)
    spec, _, trace, engine = _run(model, SpecConfig(method=f"draft:{draft_dir}"))
    assert spec == base
    drafter = engine.strategy.drafters["draft"]
    assert drafter._ctx == {} and drafter.cache.num_free == drafter.cache.num_blocks  # all released
    # one drafter: its own acceptance is the whole run's (same accepted / proposed counts)
    assert trace.spec["spec/acceptance/draft"] == pytest.approx(trace.spec["spec/acceptance_rate"])
    assert trace.spec["spec/acceptance_rate"] > 0.0


def test_self_draft_accepts_everything(model, tmp_path):
    """The policy as its own draft model: keyed drafts equal the target's samples, so every draft is accepted."""
    from tailrl.model.loading import save_hf

    same = tmp_path / "same"
    save_hf(model, same)
    _, _, trace, _ = _run(model, SpecConfig(method=f"draft:{same}", k_max=4), n=2)
    assert trace.spec["spec/acceptance_rate"] > 0.99


def test_identity_under_preemption_and_small_batches(model):
    base, _, _, _ = _run(model)
    spec, _, trace, _ = _run(model, SpecConfig(method="auto", coupled=CoupledSpecConfig(bon_spare=50.0)), kv_cache_tokens=96)
    assert trace.preemptions > 0
    assert spec == base
    small, _, _, _ = _run(model, SpecConfig(method="auto", coupled=CoupledSpecConfig(bon_spare=50.0)), max_batch_size=3)
    assert small == base


def test_tree_longest_exact_path_wins():
    tree = build_tree(7, [[1, 2, 3], [1, 4], [5]])
    assert tree.tokens == [7, 1, 2, 3, 4, 5] and tree.parents == [-1, 0, 1, 2, 1, 0]
    # samples per node: root -> 1, node1 -> 4 (so the branch [1, 4] wins), node4 -> 9 (bonus)
    samples = [1, 4, 0, 0, 9, 0]
    path, emitted = accept_path(tree, samples)
    assert path == [1, 4] and emitted == [1, 4, 9]
    path, emitted = accept_path(tree, [8, 0, 0, 0, 0, 0])  # first draft token rejected: the sample is emitted
    assert path == [] and emitted == [8]
    m = tree.mask()
    assert m[4].tolist() == [True, True, False, False, True, False]


def test_ngram_index_majority_and_growth():
    idx = NgramIndex(2, 3)
    a, b, c = [1, 2, 3, 4], [1, 2, 3, 5], [9, 1, 2, 3, 5, 6]
    for s in (a, b, c):
        idx.add(s)
    idx.refresh()
    assert idx.propose([7, 2, 3], 3) == [5, 6]  # two sources say 5 after [2, 3]; only c continues
    a.extend([8, 8])
    idx.refresh()
    assert idx.propose([3, 4], 2) == [8, 8]


def _brute_windows(alphas, caps, c0, c1, dc, base):
    best = -1.0
    for ks in itertools.product(*[range(k + 1) for k in caps]):
        S = sum(expected_tokens(a, k) for a, k in zip(alphas, ks))
        T = c0 + c1 * base + sum((c1 + d) * k for d, k in zip(dc, ks))
        best = max(best, S / T)
    return best


@pytest.mark.parametrize("seed", range(20))
def test_windows_match_brute_force(seed):
    rng = random.Random(seed)
    B = rng.randint(1, 3)
    alphas = [rng.random() for _ in range(B)]
    caps = [rng.randint(0, 4) for _ in range(B)]
    c0, c1 = rng.uniform(0.1, 2), rng.uniform(0.01, 1)
    dc = [rng.uniform(0, 0.2) for _ in range(B)]
    ks = plan_windows(alphas, caps, c0, c1, dc, B)
    S = sum(expected_tokens(a, k) for a, k in zip(alphas, ks))
    T = c0 + c1 * B + sum((c1 + d) * k for d, k in zip(dc, ks))
    assert S / T == pytest.approx(_brute_windows(alphas, caps, c0, c1, dc, B), rel=1e-9)


def test_large_batch_turns_speculation_off():
    # per-token cost dominates (c0 small): no draft pays unless acceptance is ~1
    assert plan_windows([0.6] * 256, [8] * 256, 0.001, 0.001, [0.0] * 256) == [0] * 256
    # batch 1, fixed cost dominates: long windows
    assert plan_windows([0.8], [8], 0.02, 0.0001, [0.0])[0] >= 6


def test_ladder_profile_roundtrip_and_shape(model, tmp_path):
    from tailrl.speculative.coupled.ladder import Ladder, simulate
    from tailrl.speculative.profiling.ladder import profile_ladder

    # plain decoding in the simulator: one forward per token of the longest request, batch shrinking
    t_fwd = {1: {1: 1.0, 4: 2.0}}
    assert simulate(0.0, 0, [1, 2, 3, 3], t_fwd, 0.0, random.Random(0)) == pytest.approx(2.0 + (1 + 2 / 3) + (1 + 1 / 3))  # b = 4, 3, 2
    engine = build_engine(model, None, EngineConfig(kv_cache_tokens=4096, block_size=4, spec=SpecConfig(method="auto", k_max=3)))
    ladder = profile_ladder(engine, batches=(1, 4), k_max=3, n_requests=8, progress=lambda *_: None)
    for name in ("history", "ngram"):
        assert ladder.speedup(name, 0.95) > ladder.speedup(name, 0.1) >= 0.99  # k = 0 is always allowed
    ladder.save(tmp_path / "l.json")
    again = Ladder.load(tmp_path / "l.json")
    assert again.table == ladder.table and again.best({"ngram": 0.9, "history": 0.1}) == "ngram"


def test_measured_throughput_gate():
    from tailrl.speculative.cost import ThroughputGate

    sp = ThroughputGate(remeasure_after=3)
    assert sp.slower(64)  # no plain baseline yet: measure one first
    sp.record("plain", 64, 64, 0.010)  # 6400 tokens/s
    assert not sp.slower(64)  # no speculative measurement: the models decide
    sp.record("spec", 70, 90, 0.020)  # 4500 tokens/s, same bucket (64..127)
    assert sp.slower(64) and sp.slower(100)
    sp.record("plain", 8, 8, 0.004)
    assert not sp.slower(8)  # another bucket
    sp.record("spec", 64, 400, 0.020)
    assert not sp.slower(64)
    sp.record("spec", 64, 10, 0.5)
    assert sp.slower(64)
    for _ in range(3):  # the verdict expires after `remeasure_after` plain steps in the bucket
        sp.record("plain", 64, 64, 0.010)
    assert not sp.slower(64)


def test_tree_node_sees_the_window_of_its_sequence_position():
    """Sliding window with a token tree: two nodes at the same depth attend the same context keys as
    plain decoding at that position would (the window counts from start + depth, not from the slot)."""
    import torch

    from tailrl.engine.runner import build_metadata

    start, window = 10, 8
    # tree: chain [1, 2] and a sibling [3]: nodes (slot order) = root, d1, d2, e1 with depths 0, 1, 2, 1
    depth = [0, 1, 2, 1]
    tm = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 1]], dtype=torch.bool)
    meta, pos = build_metadata([[0, 1]], [start], [4], 16, "cpu", window, [tm], [depth])
    mask = meta.mask[0, 0]  # (T, L)
    assert pos[0].tolist() == [10, 11, 12, 11]
    assert torch.equal(mask[3, :start], mask[1, :start])  # same depth, same context window
    plain = [(start + 1 - k) < window for k in range(start)]
    assert mask[3, :start].tolist() == plain


def test_first_speculative_step_waits_for_a_small_batch(model):
    """Until the speculative path's own overhead is measured, a large batch decodes plainly (a wrong first
    guess there costs ~0.35 ms a sequence); once a small batch has speculated, large ones may too."""
    cfg = EngineConfig(kv_cache_tokens=8192, block_size=4, spec=SpecConfig(method="ngram"))
    engine = build_engine(model, None, cfg, eos_ids=[2])
    sp = engine.strategy
    sp.cost.coefficients = sp.plain_step.coefficients = lambda near=None: (1.0, 0.001)  # fixed models: drafting pays
    sp.measured_slower = lambda batch: False
    params = SamplingParams(temperature=0.0, max_new_tokens=12, seed=5, ignore_eos=True)

    def kinds(n):
        _, trace = engine.generate([Request(p, uid=10 + i, n=n, params=params) for i, p in enumerate(PROMPTS)])
        return {s.kind for s in trace.steps}

    assert "verify" not in kinds(8)  # B = 32 > explore_batch: nothing measured yet
    assert "verify" in kinds(1)  # B = 4: speculates, and measures its overhead
    assert "verify" in kinds(8)  # now priced from the measurement
