import os

import pytest
import torch

# Triton kernels run on CPU tensors under the interpreter; it is chosen when a kernel is defined, so this
# must be set before anything imports tailrl.kernels (tailrl.kernels sets it too when CUDA is absent).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(2)
    yield
