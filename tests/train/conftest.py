import json
from pathlib import Path

import pytest

from tests.helpers import make_model_dir

TOY_REWARD = f"{Path(__file__).parent / 'toy_reward.py'}:digit_reward"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("policy") / "tiny", "llama")


@pytest.fixture
def arith_data(tmp_path):
    """Tiny arithmetic rows with GSM8K-style answers."""
    path = tmp_path / "train.jsonl"
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(1, 5) for b in range(1, 5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def base_overrides(model_dir, data, run_dir, **extra):
    o = {
        "model.path": str(model_dir), "data.source": str(data), "data.chat_template": "false",
        "reward.functions": f"[{TOY_REWARD}]", "rollout.group_size": 4, "rollout.max_new_tokens": 8,
        "rollout.temperature": 1.0, "train.rollout_batch_size": 8, "train.micro_batch_size": 3,
        "train.total_steps": 2, "train.lr": 1e-3, "train.tensorboard": "true", "engine.kv_cache_tokens": 2048,
        "engine.block_size": 4,
    }
    o.update(extra)
    return [f"{k}={v}" for k, v in o.items()]
