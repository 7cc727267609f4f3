"""The event-driven round against a slow oracle: a Python loop, one forward at a time."""

import math

import pytest

from tailrl.perf.hardware import MODELS, gpu
from tailrl.perf.pat import PatPolicy, decode_time, spread
from tailrl.sim.generation import GenerationSim
from tailrl.sim.spec import SpecModel
from tailrl.sim.workload import Req


class Linear:
    """decode = a + b * batch + c * context; prefill = p * tokens; per TP degree a scale."""

    def __init__(self, a=1e-3, b=1e-4, c=1e-6, p=1e-5, scale=None):
        self.a, self.b, self.c, self.p = a, b, c, p
        self.scale = scale or {}

    def decode(self, tp, batch, ctx):
        return (self.a + self.b * batch + self.c * ctx) * self.scale.get(tp, 1.0)

    def prefill(self, tp, tokens, batch=1):
        return self.p * tokens * self.scale.get(tp, 1.0)

    def forward(self, tp, batch, new_tokens, ctx):
        return self.decode(tp, batch, ctx) + self.p * (new_tokens - batch)

    def round_s(self, sequences):
        return 0.0


def oracle(reqs, lat, max_batch):
    """One replica, tailrl's engine policy step by step: admit (prefill once per prompt) when slots
    allow, else one decode step over every running request."""
    t, waiting, running = 0.0, list(reqs), []
    done = {}
    while waiting or running:
        if waiting and len(running) < max_batch:
            adm = waiting[: max_batch - len(running)]
            waiting = waiting[len(adm):]
            t += lat.prefill(1, sum(r.prompt_len for r in {r.uid: r for r in adm}.values()), len(adm))
            for r in adm:
                done[id(r)] = 1
            running += adm
        else:
            ctx = sum(r.prompt_len + done[id(r)] for r in running)
            t += lat.decode(1, len(running), ctx)
            for r in running:
                done[id(r)] += 1
        running = [r for r in running if done[id(r)] < r.out_len]
    return t


REQS = [Req(u, i, 5 + u, n) for u, i, n in [(0, 0, 3), (0, 1, 17), (1, 0, 40), (1, 1, 9), (2, 0, 1), (3, 0, 25)]]


@pytest.mark.parametrize("max_batch", [2, 3, 16])
def test_round_matches_step_by_step_oracle(max_batch):
    lat = Linear()
    want = oracle(REQS, lat, max_batch)
    one = GenerationSim(REQS, lat, 1, 1, 1, max_batch=max_batch, chunk=1).run()
    many = GenerationSim(REQS, lat, 1, 1, 1, max_batch=max_batch, chunk=32).run()
    assert one.gen_s == pytest.approx(want, rel=1e-9)
    assert many.gen_s == pytest.approx(want, rel=1e-9)  # chunks priced at the mid context: exact when linear
    assert all(not math.isnan(f) for f in many.finish)
    assert one.bubble_frac == pytest.approx(0.0)


def test_data_parallel_replicas_and_bubble():
    lat = Linear()
    reqs = [Req(0, 0, 4, 50), Req(1, 0, 4, 5)]
    res = GenerationSim(reqs, lat, 1, 2, 2, chunk=7).run()  # two replicas, one request each
    assert res.gen_s == pytest.approx(oracle(reqs[:1], lat, 8))
    short = oracle(reqs[1:], lat, 8)
    assert res.bubble_frac == pytest.approx(1 - (res.gen_s + short) / (2 * res.gen_s))


def test_decode_time_is_the_oracle_without_prefill():
    lat = Linear()
    reqs = [(10.0, 7), (3.0, 30), (50.0, 1)]

    def loop():
        t, live = 0.0, [[c, r] for c, r in reqs]
        while live:
            t += lat.decode(1, len(live), sum(c for c, _ in live))
            for x in live:
                x[0] += 1
                x[1] -= 1
            live = [x for x in live if x[1] > 0]
        return t

    assert decode_time(lat, 1, reqs, chunk=4) == pytest.approx(loop())


def test_spread_balances_remaining_work():
    parts = spread([(0, 10), (0, 9), (0, 2), (0, 1)], 2)
    assert sorted(sum(r for _, r in p) for p in parts) == [11, 11]


def test_speculation_rates_and_costs():
    lat = Linear()
    coupled = SpecModel("coupled", lat, lat, 4)
    decoupled = SpecModel("decoupled", lat, lat, 4)
    d, v = 3 * lat.decode(1, 2, 100), lat.forward(1, 2, 2 * 4, 100)
    assert coupled.iteration(1, 2, 100, 3) == pytest.approx(d + v)
    assert decoupled.iteration(1, 2, 100, 3) == pytest.approx(max(d, v))
    assert coupled.plan(1, 2, 100, [0.0, 0.0])[0] == 0  # nothing is ever accepted: plain decoding
    # no draft cost and free verification tokens: the longest window wins when acceptance is high
    free = SpecModel("coupled", Linear(p=0.0), None, 4)
    assert free.plan(1, 2, 100, [0.9, 0.9])[0] == 4
    reqs = [Req(0, 0, 4, 200)]
    base = GenerationSim(reqs, lat, 1, 1, 1).run()
    fast = GenerationSim(reqs, Linear(p=0.0), 1, 1, 1, spec=free, acceptance=0.9, acceptance_kappa=1e4).run()
    assert fast.gen_s < base.gen_s / 2  # ~4.1 tokens per iteration at alpha 0.9, window 4
    assert fast.accept_rate == pytest.approx((0.9 + 0.81 + 0.729 + 0.6561) / 4, rel=0.02)  # (tau - 1) / w


def test_pat_switches_when_the_tail_pays_and_conserves_requests():
    # TP4 is 3x faster per step but only one replica: worth it once the batch is the tail
    lat = Linear(a=1e-2, b=1e-3, c=0.0, p=1e-5, scale={1: 1.0, 4: 1 / 3})
    m, g = MODELS["llama3.1-8b"], gpu("h100")
    reqs = [Req(i, 0, 8, 2000 if i == 0 else 20) for i in range(8)]
    pol = [PatPolicy.for_hardware(lat, m, g, 0.7, node_gpus=4, tp_options=(1, 4), max_len=2000, group_init_s=0.0,
                                  recapture_s=0.01, pool={1})]
    static = GenerationSim(reqs, lat, 1, 4, 4).run()
    pat = GenerationSim(reqs, lat, 1, 4, 4, pat=pol, pat_interval=0.05).run()
    assert len(pat.switches) == 1 and pat.switches[0]["to"] == 4
    assert pat.gen_s < static.gen_s
    assert all(not math.isnan(f) for f in pat.finish) and len(pat.finish) == 8
    # when the bigger TP degree is slower, the controller never switches
    slow = Linear(a=1e-2, b=1e-3, c=0.0, scale={1: 1.0, 4: 2.0})
    pol = [PatPolicy.for_hardware(slow, m, g, 0.7, node_gpus=4, tp_options=(1, 4), max_len=2000, pool={1})]
    assert GenerationSim(reqs, slow, 1, 4, 4, pat=pol, pat_interval=0.05).run().switches == []


def test_switch_cost_picks_the_cheaper_kv_path():
    m, g = MODELS["llama3.1-8b"], gpu("h100")
    cheap_prefill = Linear(p=1e-12)
    pol = PatPolicy.for_hardware(cheap_prefill, m, g, 0.7, node_gpus=8, tp_options=(2, 8), max_len=4096, pool={2})
    assert pol.switch_cost(2, 8, [4000] * 4).kv_path == "recompute"
    pricey_prefill = Linear(p=1.0)
    pol = PatPolicy.for_hardware(pricey_prefill, m, g, 0.7, node_gpus=8, tp_options=(2, 8), max_len=4096, pool={2, 8})
    cost = pol.switch_cost(2, 8, [4000] * 4)
    assert cost.kv_path == "migrate" and cost.groups_s == 0.0
    assert cost.kv_s == pytest.approx(16000 * m.kv_bytes_per_token / 2 / (g.link_gbps * 1e9 * 0.7))
    assert cost.weights_s == pytest.approx(m.weight_bytes * 0.5 / (g.link_gbps * 1e9 * 0.7))


def _invariants(res, reqs):
    assert len(res.finish) == len(reqs) and all(not math.isnan(f) and f <= res.gen_s for f in res.finish)
    assert 0.0 <= res.bubble_frac <= 1.0  # busy GPU-seconds never exceed the cluster's


@pytest.mark.parametrize("prefill_s", [1e-5, 1e-3])
def test_pat_with_prefills_in_flight_at_ticks(prefill_s):
    """A tick landing during a long prefill neither stops the controller nor strands the prefilling
    replica (its requests move with the others)."""
    lat = Linear(a=1e-2, b=1e-3, c=0.0, p=prefill_s, scale={1: 1.0, 2: 0.4})
    m, g = MODELS["llama3.1-8b"], gpu("h100")
    reqs = [Req(i, 0, 400, 3000 if i < 2 else 30) for i in range(12)]
    pol = [PatPolicy.for_hardware(lat, m, g, 0.7, node_gpus=2, tp_options=(1, 2), max_len=3000, group_init_s=0.0,
                                  recapture_s=0.0, pool={1})]
    res = GenerationSim(reqs, lat, 1, 2, 2, max_batch=4, pat=pol, pat_interval=0.05).run()
    assert len(res.switches) == 1
    _invariants(res, reqs)


def test_switch_respects_max_batch_and_multi_node_pat():
    lat = Linear(a=1e-2, b=1e-3, c=0.0, scale={1: 1.0, 2: 0.3})
    m, g = MODELS["llama3.1-8b"], gpu("h100")
    reqs = [Req(i, 0, 4, 400) for i in range(16)]
    pols = [PatPolicy.for_hardware(lat, m, g, 0.7, node_gpus=2, tp_options=(1, 2), max_len=400, group_init_s=0.0,
                                   recapture_s=0.0, pool={1}) for _ in range(2)]
    sim = GenerationSim(reqs, lat, 1, 4, 2, max_batch=3, pat=pols, pat_interval=0.02)
    res = sim.run()
    assert {sw["node"] for sw in res.switches} == {0, 1}  # each node switches on its own
    assert max(b for _, _, _, b in res.timeline) <= 3
    _invariants(res, reqs)


def test_replicas_get_balanced_contiguous_shards():
    lat = Linear()
    sim = GenerationSim([Req(i, 0, 4, 10) for i in range(12)], lat, 1, 8, 8)
    assert sorted(len(r.waiting) for r in sim.replicas) == [1, 1, 1, 1, 2, 2, 2, 2]
    with pytest.raises(ValueError):
        GenerationSim([Req(0, 0, 4, 10)], lat, 8, 8, 8, draft_gpus=1)
