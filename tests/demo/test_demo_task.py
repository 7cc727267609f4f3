"""The embedded default: task, splits, checker, and the warm-start criteria on a reduced setting."""

import random
import statistics

import pytest
import torch

from tailrl.config import EngineConfig
from tailrl.data.demo_task import DemoTask, parse_answer
from tailrl.demo.warmstart import WarmStartParams, warm_start
from tailrl.engine import Request, SamplingParams
from tailrl.model import load
from tailrl.rewards import REWARDS
from tailrl.speculative import build_engine


def test_task_solutions_are_correct_and_splits_disjoint():
    task = DemoTask()
    rng = random.Random(0)
    for _ in range(200):
        prompt, ans = task.problem(rng)
        sol = task.solution(prompt, rng)
        assert parse_answer(sol) == str(ans) == str(task.evaluate(prompt))
        assert REWARDS["demo_arith"](prompt, sol, answer=str(ans)) == 1.0
        assert REWARDS["demo_arith"](prompt, sol + "0", answer=str(ans)) == 0.0
    train = {r["prompt"] for r in task.rows(3000, "train", seed=1)}
    test = {r["prompt"] for r in task.rows(200, "test", seed=2)}
    assert not train & test


def test_solution_lengths_have_a_tail_within_a_prompt():
    task = DemoTask(min_terms=4, max_terms=4)
    rng = random.Random(1)
    ratios = []
    for _ in range(100):
        prompt, _ = task.problem(rng)
        lens = [len(task.solution(prompt, rng)) for _ in range(16)]
        ratios.append(max(lens) / statistics.median(lens))
    assert sum(r > 1.25 for r in ratios) / len(ratios) >= 0.3


def test_whole_chain_reviews_make_stragglers_grow_with_group_size():
    """The demo's shape: no per-step re-checks, rare reviews; straggler rate ~ 1 - (1 - p)^G."""
    from tailrl.demo.run import DEMO_TASK

    rng = random.Random(2)

    def rate(G: int, n: int = 400) -> float:
        hits = 0
        for _ in range(n):
            prompt, ans = DEMO_TASK.problem(rng)
            sols = [DEMO_TASK.solution(prompt, rng) for _ in range(G)]
            assert all(parse_answer(s) == str(ans) for s in sols)
            lens = [len(s) for s in sols]
            hits += max(lens) / statistics.median(lens) > 1.25
        return hits / n

    r4, r16 = rate(4), rate(16)
    assert r16 >= 0.3 and r4 < r16 / 2


@pytest.mark.slow
def test_warm_start_reduced_setting_learns_format_and_has_long_tail(tmp_path):
    """Reduced setting (small SFT): the policy writes checkable answers, is right sometimes, and its
    group lengths are long-tailed at G = 16. The full criteria are measured by `tailrl demo`."""
    from tailrl.demo.run import DEMO_TASK

    task = DEMO_TASK
    spec = WarmStartParams(layers=2, hidden=96, heads=4, kv_heads=2, intermediate=256, batch=32, steps=250,
                         lr=4e-3)  # the default time budget: 250 fixed steps decide the result, not speed
    folder = warm_start(tmp_path, task, spec)
    assert warm_start(tmp_path, task, spec) == folder  # cached
    from transformers import AutoModelForCausalLM  # a plain HF checkpoint

    hf = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    model, tok = load(folder)
    ids = torch.tensor([tok("3+4-2=")["input_ids"]])
    with torch.no_grad():
        assert (model(ids) - hf(ids).logits).abs().max() < 1e-4
    rows = task.rows(40, "test", seed=0)
    engine = build_engine(model, tok, EngineConfig(kv_cache_tokens=32768))
    reqs = [Request(tok(r["prompt"])["input_ids"], uid=i, n=16, params=SamplingParams(max_new_tokens=120))
            for i, r in enumerate(rows)]
    outs, trace = engine.generate(reqs)
    texts = [tok.decode(o.token_ids, skip_special_tokens=True) for o in outs]
    answered = statistics.mean(parse_answer(t) is not None for t in texts)
    acc = statistics.mean(parse_answer(t) == rows[o.uid]["answer"] for t, o in zip(texts, outs))
    ratios = trace.len_max_over_median()
    assert answered > 0.8
    assert 0.05 < acc < 0.95
    assert sum(r > 1.25 for r in ratios) / len(ratios) >= 0.3
