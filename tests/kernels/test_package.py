"""tailrl.kernels imports without Triton and names the setting that needed it."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

import tailrl.kernels
from tailrl.errors import UserError

MESSAGE = "engine.attention=triton: Triton is not installed (pip install triton, or the [gpu] extra)"


def test_import_without_triton(monkeypatch):
    """A fresh copy of the package, run with `import triton` failing, still imports and explains itself."""
    monkeypatch.setitem(sys.modules, "triton", None)  # `import triton` now raises ImportError
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    spec = importlib.util.spec_from_file_location("kernels_without_triton", Path(tailrl.kernels.__file__))
    k = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(k)
    assert not k.HAS_TRITON
    if not torch.cuda.is_available():  # the interpreter is selected before Triton is ever imported
        import os

        assert os.environ.get("TRITON_INTERPRET") == "1"
    with pytest.raises(UserError) as e:
        k.require_triton("engine.attention=triton")
    assert str(e.value) == MESSAGE
    with pytest.raises(UserError, match=r"^tailrl.kernels.paged_attention: Triton is not installed"):
        k.paged_attention  # noqa: B018


def test_require_triton_and_lazy_exports(monkeypatch):
    pytest.importorskip("triton")
    k = tailrl.kernels
    assert k.HAS_TRITON
    k.require_triton("engine.attention=triton")  # no error
    assert callable(k.paged_attention) and callable(k.token_logprobs_invariant)
    with pytest.raises(AttributeError):
        k.no_such_kernel  # noqa: B018
    monkeypatch.setattr(k, "HAS_TRITON", False)
    with pytest.raises(UserError) as e:
        k.require_triton("engine.attention=triton")
    assert str(e.value) == MESSAGE
