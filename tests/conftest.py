import json
import os

import pytest
import torch

# Triton kernels run on CPU tensors under the interpreter; it is chosen when a kernel is defined, so this
# must be set before anything imports tailrl.kernels (tailrl.kernels sets it too when CUDA is absent).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from tests.helpers import make_model_dir  # noqa: E402  (after the interpreter choice above)


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(2)
    yield


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
