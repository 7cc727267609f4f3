import pytest

from tailrl.config import load_config
from tailrl.errors import UserError
from tailrl.sim.command import resolve_config
from tailrl.sim.config import SimConfig
from tailrl.sim.run import simulate, variants


def cfg(*overrides, path=None):
    return load_config(path, list(overrides), cls=SimConfig)


SMALL = ["workload.prompts=8", "workload.group_size=4", "workload.max_new_tokens=512", "workload.median=64",
         "workload.steps=2", "model=qwen2.5-0.5b", "cluster.num_gpus=2"]


def test_variants_apply_overrides_to_the_base():
    c = cfg(*SMALL, "compare={a: [], b: [cluster.tp=2, pat.enabled=true]}")
    (na, a), (nb, b) = variants(c)
    assert (na, nb) == ("a", "b") and a.cluster.tp == 1 and b.cluster.tp == 2 and b.pat.enabled
    assert b.workload.prompts == 8


def test_simulate_reports_phases_and_pods_shrinks_update():
    full = simulate(cfg(*SMALL)).summary()
    pods = simulate(cfg(*SMALL, "train.pods_m=2")).summary()
    assert full["timing_s/gen"] > 0 and full["timing_s/step"] > full["timing_s/gen"]
    assert pods["timing_s/update"] == pytest.approx(full["timing_s/update"] / 2)
    assert pods["timing_s/gen"] == full["timing_s/gen"]


def test_sagc_drives_group_size_from_simulated_stragglers():
    base = SMALL + ["workload.steps=40", "workload.sigma_within=0.4", "control.rollout_batch_size=32",
                    "control.candidates=[2,4,8,16]", "workload.group_size=8"]
    r = simulate(cfg(*base, "control.kind=sagc", "control.delta=0.1"))
    gs = {s.group_size for s in r.steps}
    assert gs <= {2, 4, 8, 16} and len(gs) > 1
    static = {g: simulate(cfg(*base, f"workload.group_size={g}", f"workload.prompts={32 // g}")).summary()
              ["rollout/straggler_rate"] for g in (2, 4, 8, 16)}
    assert static[2] < static[4] < static[8] < static[16]  # larger groups straggle more


def test_user_errors():
    with pytest.raises(UserError, match="cluster.tp"):
        simulate(cfg(*SMALL, "cluster.tp=3"))
    with pytest.raises(UserError, match="spec.mode"):
        simulate(cfg(*SMALL, "spec.mode=fast"))
    with pytest.raises(UserError, match="not modelled"):
        simulate(cfg(*SMALL, "spec.mode=decoupled", "pat.enabled=true"))
    with pytest.raises(UserError, match="unknown config key"):
        cfg("cluster.gpus=4")
    with pytest.raises(UserError, match="bundled"):
        resolve_config("no_such_config")


def test_pat_h100_calibration_holds():
    """PAT §5.3: LLaMA3.1-8B at 24K on 8 H100s, generation 134.3 s (TP2/DP4) -> 87.9 s (PAT)."""
    c = cfg("workload.steps=2", path=resolve_config("pat_h100_llama8b_24k"))
    out = {name: simulate(v, name).summary() for name, v in variants(c) if name in ("static TP2/DP4", "PAT")}
    assert out["static TP2/DP4"]["timing_s/gen"] == pytest.approx(134.3, rel=0.15)
    assert out["PAT"]["timing_s/gen"] == pytest.approx(87.9, rel=0.15)
    assert out["static TP2/DP4"]["perf/throughput"] == pytest.approx(2570.6, rel=0.15)
    assert out["PAT"]["perf/throughput"] == pytest.approx(3510.9, rel=0.15)


@pytest.mark.parametrize("name", ["pat_h100_llama8b_24k", "pat_h100_qwen14b_16k", "pat_a40_llama8b",
                                  "specactor_qwen32b_grpo", "sagc_qwen3b"])
def test_bundled_configs_load(name):
    c = cfg(path=resolve_config(name))
    assert len(variants(c)) >= 2


def test_trace_refill_rounds_belong_to_their_step(tmp_path):
    import json

    def rd(t_end, uid):
        return {"t_end": t_end, "requests": [[uid, i, 5, 20 + i, "stop", 0.0, t_end] for i in range(4)], "steps": []}

    f = tmp_path / "traces.jsonl"
    f.write_text(json.dumps({"step": 1, "rounds": [rd(0.5, 0), rd(0.25, 1)]}) + "\n"
                 + json.dumps({"step": 2, "rounds": [rd(0.4, 2)]}) + "\n")
    r = simulate(cfg(f"workload.trace={f}", "model=qwen2.5-0.5b"))
    assert len(r.steps) == 2 and len(r.steps[0].refills) == 1
    assert r.steps[0].measured_gen_s == pytest.approx(0.75)
    assert r.steps[0].gen_s == pytest.approx(r.steps[0].gen.gen_s + r.steps[0].refills[0].gen_s)


def test_placement_errors():
    with pytest.raises(UserError, match="whole nodes"):
        simulate(cfg(*SMALL, "cluster.num_gpus=12", "cluster.node_gpus=8"))
    with pytest.raises(UserError, match="draft_gpus"):
        simulate(cfg(*SMALL, "cluster.tp=2", "spec.mode=decoupled", "spec.draft_gpus=1"))
