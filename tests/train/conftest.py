import json

import pytest

from tests.helpers import make_model_dir


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
