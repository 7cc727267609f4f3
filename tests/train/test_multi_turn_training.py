"""Multi-turn rollouts in training: observation tokens are out of the loss, the logprob metrics and the
length terms (a hand-built example against a manual loss), and a trainer step with tool turns."""

import math
from pathlib import Path

import pytest
import torch

from tailrl.algo.logprobs import completion_logprobs
from tailrl.config import load_config
from tailrl.engine import Rollout
from tailrl.train.batch import make_train_batch
from tailrl.train.groups import reward_text
from tailrl.train.trainer import Trainer
from tailrl.train.update import UpdateParams, update_step
from tests.helpers import base_overrides, make_char_tokenizer, tiny_native

PROMPT = [5, 6, 7]
TURN1, OBS, TURN2 = [8, 9], [10, 11, 12], [13, 14]
MASK = [1] * len(TURN1) + [0] * len(OBS) + [1] * len(TURN2)


class Recorder(torch.optim.SGD):
    """SGD with lr 0 that keeps the gradients it was stepped with."""

    def __init__(self, params):
        super().__init__(params, lr=0.0)
        self.grads = None

    def step(self, closure=None):
        self.grads = [p.grad.detach().clone() for g in self.param_groups for p in g["params"]]
        return super().step(closure)


def test_observation_tokens_are_out_of_the_loss_against_a_manual_loss():
    model, _ = tiny_native("llama")
    comp = TURN1 + OBS + TURN2
    engine_lp = [-1.0, -2.0] + [math.nan] * len(OBS) + [-1.5, -0.5]
    batch = make_train_batch([PROMPT, [4, 5]], [comp, [7, 8, 9]], torch.tensor([1.5, -0.5]),
                             rollout_logprobs=[engine_lp, [-1.0, -1.0, -1.0]], token_masks=[MASK, None])
    assert batch.completion_mask[0].tolist() == [float(m) for m in MASK]
    assert batch.lengths.tolist() == [7, 3]  # observations count in the row's length, not in the mask
    assert not torch.isnan(batch.rollout_logp).any() and batch.rollout_logp[0, 2:5].eq(0).all()
    params = UpdateParams(loss_agg="token-mean", eps_low=0.2, eps_high=0.2, kl_coef=0.0, max_completion_len=8,
                          micro_batch_size=4, temperature=1.0, max_grad_norm=1e9)
    opt = Recorder(model.parameters())
    out = update_step(model, opt, batch, params)
    assert math.isfinite(out["rollout/logprob_diff_max"])
    # the oracle: at ratio 1 the clipped surrogate's gradient is -A x grad logp, token-mean over model tokens
    model.zero_grad()
    lp = completion_logprobs(model, batch.input_ids, batch.prompt_lens, 7)
    m = batch.completion_mask
    loss = -(lp * m * batch.advantages[:, None]).sum() / m.sum()
    loss.backward()
    for p, g in zip(model.parameters(), opt.grads):
        assert torch.allclose(p.grad, g, atol=1e-6, rtol=1e-5)
    assert out["actor/loss"] == pytest.approx(-(m * batch.advantages[:, None]).sum().item() / 7, abs=1e-6)


def test_rollout_text_for_rewards_and_model_token_count():
    tok = make_char_tokenizer()
    ids = [tok.convert_tokens_to_ids(c) for c in "call"] + [tok.convert_tokens_to_ids(c) for c in "=7"] + \
        [tok.convert_tokens_to_ids(c) for c in "it is 7"]
    mask = [1] * 4 + [0] * 2 + [1] * 7
    r = Rollout(0, 0, [1], ids, [0.0] * len(ids), "stop", token_mask=mask, turns=1)
    assert reward_text(tok, r) == "it is 7" and r.num_model_tokens == 11 and r.num_tokens == 13
    single = Rollout(0, 0, [1], ids[:4], [0.0] * 4, "stop")
    assert reward_text(tok, single) == "call" and single.num_model_tokens == 4


class OneObservation:
    """The engine's Turns for the test: the first stop of every rollout is answered with a fixed observation."""

    def __init__(self, tok):
        self.obs = tok.encode(" [obs] ", add_special_tokens=False)
        self.waiting = []

    def end_turn(self, seq) -> bool:
        if seq.turns >= 1:
            return False
        self.waiting.append(seq)
        return True

    def ready(self, timeout: float):
        out, self.waiting = [(s, self.obs) for s in self.waiting], []
        return out


@pytest.mark.slow  # starts the tool workers
def test_trainer_step_with_tool_turns(tiny_model_dir, arith_data, tmp_path):
    run = tmp_path / "run"
    cfg = load_config(None, base_overrides(tiny_model_dir, arith_data, run, **{
        "rollout.tools": "[calculator]", "rollout.tool_workers": 1, "rollout.max_new_tokens": 24,
        "rollout.stop": "[a, e, i, o, u, '1', '2', '3', '4', '5']", "train.total_steps": 1,
        "train.tensorboard": "false"}))
    t = Trainer(cfg, run)
    try:
        pids = t.tools.worker_pids()
        assert pids
        t.engine.turns = OneObservation(t.tokenizer)  # deterministic turns (a random model calls no tool)
        metrics = t.step()
    finally:
        t.close()
    rollouts = [r for g in t.last_phase.generated for r in g.rollouts]
    multi = [r for r in rollouts if r.turns]
    assert multi and metrics["rollout/turns_mean"] == pytest.approx(1 + len(multi) / len(rollouts))
    assert metrics["rollout/turns_max"] == 2.0 and 0.0 <= metrics["rollout/parked_frac"] < 1.0
    for key in ("tools/calls_mean", "tools/errors", "tools/timeouts", "tools/latency_s"):
        assert key in metrics
    for r in multi:
        obs_at = r.token_mask.index(0)
        assert all(math.isnan(x) for x in r.logprobs[obs_at: obs_at + 7]) and r.token_mask.count(0) <= 7
    assert math.isfinite(metrics["actor/loss"]) and math.isfinite(metrics["rollout/logprob_diff_max"])
    assert metrics["rollout/logprob_diff_max"] < 1e-3  # model tokens only: the engine's and trainer's agree
    texts = [x for g in t.last_phase.generated for x in g.texts]
    assert all("[obs]" not in x for x in texts)  # rewards read the final turn


@pytest.mark.slow  # starts the tool workers
def test_environment_episodes_reset_the_prompt_and_add_their_reward(tiny_model_dir, tmp_path):
    """TRL's IncrementEnv: reset's text is appended to each rollout's prompt, get_reward() is added to the
    score under the class's name (counter 0 == target 0: 1.0; target 3: 0.0), every episode is closed."""
    import json

    data = tmp_path / "env.jsonl"
    rows = [{"prompt": f"{a}+1=", "answer": str(a + 1), "target": 0 if a % 2 else 3} for a in range(8)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = f"{Path(__file__).parents[1] / 'tools' / 'sample_tools.py'}:IncrementEnv"
    run = tmp_path / "run"
    cfg = load_config(None, base_overrides(tiny_model_dir, data, run, **{
        "rollout.environment": env, "rollout.tool_workers": 2, "train.total_steps": 1, "train.tensorboard": "false",
        "data.shuffle": "false", "train.eval_every": 1, "train.eval_prompts": 4, "data.eval_source": str(data)}))
    t = Trainer(cfg, run)
    try:
        metrics = t.step()
        ev = t.evaluate()
        assert t.episodes.open_sessions == {}
    finally:
        t.close()
    for g in t.last_phase.generated:
        target = g.example.row["target"]
        assert g.components["IncrementEnv"] == [1.0 if target == 0 else 0.0] * len(g.rollouts)
        for r in g.rollouts:
            assert f"Increment the counter by {target}." in t.tokenizer.decode(r.prompt_ids)
    assert metrics["reward/IncrementEnv/mean"] == pytest.approx(0.5) and ev["eval/reward_mean"] >= 0.0


def test_a_bad_tool_is_one_line_before_the_model_loads(arith_data, tmp_path):
    """The model path does not exist either: the tool's error comes first (nothing was loaded)."""
    from tailrl.errors import UserError

    bad = tmp_path / "tools.py"
    bad.write_text("def search(query: str) -> str:\n    return query\n")  # no docstring
    for tools, match in ((f"[{tmp_path / 'missing.py'}:fn]", "missing.py"), (f"[{bad}:search]", "docstring"),
                         ("[no_such_tool]", "no_such_tool")):
        cfg = load_config(None, base_overrides(tmp_path / "no-model", arith_data, tmp_path / "run",
                                               **{"rollout.tools": tools}))
        with pytest.raises(UserError, match=match) as e:
            Trainer(cfg, tmp_path / "run")
        assert "\n" not in str(e.value)
