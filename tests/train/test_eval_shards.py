"""Evaluation split across ranks (train/evaluate.py): each rank scores a shard of the prompts and the gathered
numbers are one process's, in the trainer and in `tailrl eval` under torchrun."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tailrl.config import load_config
from tailrl.data.datasets import encode_example, load_dataset
from tailrl.engine import SamplingParams
from tailrl.model import load
from tailrl.rewards import build_reward
from tailrl.speculative import build_engine
from tailrl.train.distributed import DistContext
from tailrl.train.evaluate import eval_metrics, evaluate, score_shard
from tests.helpers import base_overrides, ends, write_config

ROOT = Path(__file__).resolve().parents[2]


def test_shards_scored_apart_give_one_process_numbers(tiny_model_dir, arith_data):
    cfg = load_config(None, base_overrides(tiny_model_dir, arith_data, None))
    model, tok = load(str(tiny_model_dir), dtype="float32", device="cpu")
    engine, reward = build_engine(model, tok, cfg.engine), build_reward(cfg.reward)
    examples = load_dataset(cfg.data).examples[:7]  # 7 prompts: rank 0 scores 4, rank 1 scores 3

    def encode(ex):
        return encode_example(ex, tok, False)

    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=3)
    try:
        one = evaluate(engine, tok, examples, encode, reward, 4, params, ks=(1, 2, 4))
        shards = [score_shard(engine, tok, examples, encode, reward, 4, params, DistContext(rank=r, world=2))[0]
                  for r in (0, 1)]
    finally:
        reward.close()
        engine.close()
    assert sorted({s.uid for s in shards[0]}) == [0, 2, 4, 6] and sorted({s.uid for s in shards[1]}) == [1, 3, 5]
    gathered = eval_metrics(shards[1] + shards[0], len(examples), 4, (1, 2, 4))  # any order: sorted inside
    assert gathered == {k: v for k, v in one.items() if k != "eval/timing_s"}
    assert 0 < one["eval/response_length_mean"] and {"eval/pass@1", "eval/pass@2", "eval/pass@4"} <= set(one)


@pytest.mark.slow
def test_eval_under_torchrun_equals_one_process(tiny_model_dir, arith_data, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", base_overrides(tiny_model_dir, arith_data, None))
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    args = ["eval", str(cfg), "--samples", "4", "--prompts", "9"]
    one = subprocess.run([sys.executable, "-m", "tailrl", *args, "--out", str(tmp_path / "one.json")], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-2000:]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "-m", "tailrl", *args, "--out", str(tmp_path / "two.json")], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, ends(two.stderr)
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("one", "two"))
    a.pop("eval/timing_s"), b.pop("eval/timing_s")
    assert a == b and a["eval/prompts"] == 9
    assert two.stdout.count("eval/accuracy") == 1  # rank 0 speaks for the job
