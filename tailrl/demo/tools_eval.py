"""The tools demo's single-turn baseline: a policy's held-out accuracy without tools, evaluated as the
trainer evaluates (same prompts, sampling parameters and seed, reward `demo_arith`) but with no tool listed
in the prompt and no tool to call — the prompt is then the single-turn demo's ("7+5-3+8="), which the warm
start learned to solve by the chain.

    single_turn_eval(policy, tok, cfg)["eval/accuracy"]   # vs the run's eval/accuracy with the calculator
"""

from __future__ import annotations

from dataclasses import replace

from tailrl.config import Config
from tailrl.data.datasets import encode_example, load_dataset
from tailrl.engine import SamplingParams
from tailrl.rewards import build_reward
from tailrl.speculative import build_engine
from tailrl.train.evaluate import evaluate

EVAL_SEED_OFFSET = 7919  # the trainer's evaluation samples with rollout.seed + this (Trainer.evaluate)


def single_turn_eval(model, tok, cfg: Config) -> dict[str, float]:
    """eval/* of `model` on the first train.eval_prompts held-out prompts, one sample each, without tools."""
    r = cfg.rollout
    params = SamplingParams(temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, max_new_tokens=r.max_new_tokens,
                            seed=r.seed + EVAL_SEED_OFFSET, stop=r.stop, ignore_eos=r.ignore_eos)
    examples = load_dataset(cfg.data, cfg.data.eval_source, held_out=True).examples[: cfg.train.eval_prompts]
    engine = build_engine(model, tok, cfg.engine, tau=r.straggler_tau)  # no turns: a call ends the rollout
    reward = build_reward(replace(cfg.reward, workers=0))  # in-process: demo_arith is a string compare
    try:
        return evaluate(engine, tok, examples, lambda ex: encode_example(ex, tok, cfg.data.chat_template, None),
                        reward, 1, params)
    finally:
        reward.close()
        engine.close()
