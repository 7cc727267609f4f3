"""update_step with the policy-gradient variants on a tiny model: independent of the micro-batch plan,
`actor/entropy` equal to the model's own entropy, rollout correction's weights and metrics, the KL in the
reward, the entropy bonus, and the presets' UpdateParams."""

import copy
from dataclasses import replace

import pytest
import torch

from tailrl.algo import KL_ESTIMATORS, ROLLOUT_CORRECTIONS
from tailrl.algo.logprobs import completion_positions
from tailrl.config import load_config
from tailrl.train.batch import make_train_batch
from tailrl.train.recipe import validate
from tailrl.train.update import UpdateParams, batch_logprobs, kl_reward_penalty, update_step
from tests.helpers import tiny_native

T = 0.8
BASE = UpdateParams(loss_agg="token-mean", eps_low=0.2, eps_high=0.2, kl_coef=0.0, max_completion_len=32,
                    micro_batch_size=10, temperature=T, max_grad_norm=1e9)


@pytest.fixture(scope="module")
def model():
    return tiny_native("llama")[0]


def _batch(model, seed=3, rollout_noise=0.3, old_noise=0.0):
    """10 rows of random prompts / completions (lengths 2..30); rollout_logp = the model's logprobs + noise,
    ref_logp = + noise; old_logp, when old_noise > 0, = + a per-sequence shift (ratios off 1)."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 60, (int(n),), generator=g).tolist() for n in torch.randint(2, 6, (10,), generator=g)]
    comps = [torch.randint(3, 60, (n,), generator=g).tolist() for n in [3, 4, 2, 30, 5, 3, 4, 25, 2, 6]]
    batch = make_train_batch(prompts, comps, torch.randn(10, generator=g))
    lp = batch_logprobs(model, batch, 10, T)
    noise = torch.randn(lp.shape, generator=g)
    batch.rollout_logp = lp + rollout_noise * noise
    batch.ref_logp = lp + 0.1 * torch.randn(lp.shape, generator=g)
    if old_noise:
        batch.old_logp = lp + old_noise * torch.randn(10, 1, generator=g)
    return batch


def _run(model, batch, params, lr=0.1):
    m = copy.deepcopy(model)
    metrics = update_step(m, torch.optim.SGD(m.parameters(), lr=lr), batch, params)
    return metrics, [p.detach().clone() for p in m.parameters()]


VARIANTS = {  # the params, and the spread of log(old / current) per sequence: both clip ranges act
    "gspo+seq_tis+entropy+k1": (dict(policy_loss="gspo", eps_low=3e-4, eps_high=4e-4, loss_agg="seq-mean-token-mean",
                                     rollout_correction="seq_tis", entropy_coef=0.01, kl_coef=0.05, kl_estimator="k1"),
                                1e-3),
    "vanilla+token_mis+k2": (dict(rollout_correction="token_mis", rollout_is_cap=1.5, kl_coef=0.05, kl_estimator="k2",
                                  loss_agg="seq-mean-token-sum-norm"), 0.3),
    "vanilla+token_tis+kl_in_reward": (dict(rollout_correction="token_tis", rollout_is_cap=1.5, kl_coef=0.05,
                                            kl_in_reward=True, entropy_coef=-0.01), 0.3),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_update_independent_of_micro_batch_plan(model, variant):
    fields, old_noise = VARIANTS[variant]
    batch = _batch(model, old_noise=old_noise)
    params = replace(BASE, **fields)
    runs = [_run(model, batch, replace(params, micro_batch_size=size, micro_batch_tokens=tokens))
            for size, tokens in ((10, 0), (3, 0), (4, 40), (1, 0))]
    m0, w0 = runs[0]
    assert m0["actor/clipfrac"] > 0 and m0["rollout/is_clipped_frac"] > 0  # clipping and capping both act
    for m, w in runs[1:]:
        for k in m0:
            assert m[k] == pytest.approx(m0[k], rel=1e-5, abs=1e-6), k
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(w, w0))


def test_entropy_metric_is_the_models_entropy(model):
    batch = _batch(model)
    metrics, _ = _run(model, batch, replace(BASE, micro_batch_size=3), lr=0.0)
    idx, _ = completion_positions(batch.input_ids, batch.prompt_lens, batch.max_completion)
    with torch.no_grad():
        p = torch.softmax(model(batch.input_ids, logits_index=idx) / T, -1)  # (S, C, V) whole logits
        ent = -(p * p.log()).sum(-1)
    m = batch.completion_mask
    assert metrics["actor/entropy"] == pytest.approx(((ent * m).sum() / m.sum()).item(), rel=1e-5)


@pytest.mark.parametrize("name", ["token_tis", "seq_tis", "token_mis", "seq_mis"])
def test_rollout_correction_weights_metrics_and_effect(model, name):
    batch = _batch(model)
    old = batch_logprobs(model, batch, 10, T)
    m = batch.completion_mask
    want_w, want_cap = ROLLOUT_CORRECTIONS[name](old - batch.rollout_logp, m, 1.5)
    params = replace(BASE, rollout_correction=name, rollout_is_cap=1.5, micro_batch_size=4)
    metrics, w = _run(model, batch, params)
    assert metrics["rollout/is_weight_mean"] == pytest.approx(((want_w * m).sum() / m.sum()).item(), rel=1e-4)
    assert metrics["rollout/is_clipped_frac"] == pytest.approx((want_cap.sum() / m.sum()).item(), rel=1e-5)
    assert 0 < metrics["rollout/is_clipped_frac"] < 1
    _, w_off = _run(model, batch, replace(params, rollout_correction="none"))
    assert not all(torch.allclose(a, b, atol=1e-6) for a, b in zip(w, w_off))  # the weights changed the step
    # the engine's logprobs equal to the trainer's (strict mode): every weight 1, the step uncorrected
    batch.rollout_logp = old.clone()
    metrics, w_same = _run(model, batch, params)
    assert metrics["rollout/is_weight_mean"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["rollout/is_clipped_frac"] == 0
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(w_same, w_off))
    batch.rollout_logp = None
    with pytest.raises(ValueError, match="engine's logprobs"):
        _run(model, batch, params)


def test_kl_in_reward_penalty_and_loss(model):
    batch = _batch(model)
    batch.old_logp = batch_logprobs(model, batch, 10, T)
    m = batch.completion_mask
    params = replace(BASE, kl_coef=0.05, kl_in_reward=True, kl_estimator="k1", micro_batch_size=3)
    pen = kl_reward_penalty(batch, params)
    want = 0.05 * (KL_ESTIMATORS["k1"](batch.old_logp.double(), batch.ref_logp.double()) * m).sum(-1)
    torch.testing.assert_close(pen, want, rtol=1e-12, atol=1e-12)
    assert torch.equal(kl_reward_penalty(batch, replace(params, kl_in_reward=False)), torch.zeros(10, dtype=torch.float64))
    # in the reward, not in the loss: the step is the kl_coef = 0 step, and actor/kl still reports the KL
    in_reward, w = _run(model, batch, params)
    none, w_none = _run(model, batch, replace(params, kl_coef=0.0))
    assert in_reward["actor/loss"] == pytest.approx(none["actor/loss"], rel=1e-6)
    assert all(torch.allclose(a, b, atol=1e-7) for a, b in zip(w, w_none))
    assert in_reward["actor/kl"] != 0.0
    in_loss, _ = _run(model, batch, replace(params, kl_in_reward=False))
    assert in_loss["actor/loss"] == pytest.approx(none["actor/loss"] + 0.05 * in_loss["actor/kl"], rel=1e-5)
    batch.old_logp = None
    with pytest.raises(ValueError, match="old_logp"):
        kl_reward_penalty(batch, params)


class _Rank:
    """Rank r of 2 for my_micro_batches, its sum local: the test adds the ranks' shares itself."""

    def __init__(self, rank: int):
        self.rank, self.world, self.enabled = rank, 2, True

    def share(self, items: list) -> list:
        return items[self.rank::2]

    def sum(self, values: list[float]) -> list[float]:
        return list(values)


def test_kl_reward_penalty_over_ranks_counts_each_row_once(model):
    """3 micro-batches over 2 ranks: rank 1 runs a padding pass of rank 0's rows, which must not count."""
    batch = _batch(model)
    batch.old_logp = batch_logprobs(model, batch, 10, T)
    params = replace(BASE, kl_coef=0.05, kl_in_reward=True, micro_batch_size=4)
    shares = [kl_reward_penalty(batch, params, _Rank(r)) for r in (0, 1)]
    assert (shares[0] != 0).sum() == 6 and (shares[1] != 0).sum() == 4  # rows 0-3, 8-9 | rows 4-7
    torch.testing.assert_close(shares[0] + shares[1], kl_reward_penalty(batch, params), rtol=1e-12, atol=1e-12)


def test_entropy_bonus_raises_entropy(model):
    batch = _batch(model)
    batch.advantages = torch.zeros(10)  # no policy gradient: only the bonus moves the weights
    params = replace(BASE, entropy_coef=1.0)
    m = copy.deepcopy(model)
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    before = update_step(m, opt, batch, params)["actor/entropy"]
    after = update_step(m, opt, batch, params)["actor/entropy"]
    assert after > before
    metrics, _ = _run(model, batch, replace(params, entropy_coef=0.0))
    assert metrics["actor/grad_norm"] == 0.0


@pytest.mark.parametrize("name,want", [
    ("grpo", dict(policy_loss="vanilla", loss_agg="seq-mean-token-mean", kl_estimator="k3", kl_in_reward=False)),
    ("gspo", dict(policy_loss="gspo", loss_agg="seq-mean-token-mean", eps_low=3e-4, eps_high=4e-4,
                  kl_in_reward=False)),
    ("rloo", dict(policy_loss="vanilla", loss_agg="token-mean", kl_estimator="k1", kl_in_reward=True)),
    ("reinforce_pp", dict(policy_loss="vanilla", loss_agg="token-mean", kl_estimator="k1", kl_in_reward=True)),
])
def test_presets_fill_update_params(name, want):
    cfg = validate(load_config(None, ["model.path=m", "data.source=d.jsonl", f"algo.name={name}",
                                      "algo.rollout_correction=seq_mis", "algo.entropy_coef=0.001"]))
    params = UpdateParams.from_config(cfg)
    for k, v in want.items():
        assert getattr(params, k) == v, k
    assert params.rollout_correction == "seq_mis" and params.entropy_coef == 0.001
    assert cfg.algo.advantage == {"gspo": "grpo"}.get(name, name)
    # a value the user sets wins over the preset's
    cfg = validate(load_config(None, ["model.path=m", "data.source=d.jsonl", f"algo.name={name}",
                                      "algo.kl_in_reward=false", "algo.kl_estimator=k2", "algo.policy_loss=gspo"]))
    assert (cfg.algo.kl_in_reward, cfg.algo.kl_estimator, cfg.algo.policy_loss) == (False, "k2", "gspo")
