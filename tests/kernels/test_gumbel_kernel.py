"""The keyed Gumbel race as a Triton kernel (kernels/gumbel.py), run under TRITON_INTERPRET=1: bitwise the
tokens and logprobs of the torch race (the oracle)."""

import pytest
import torch

from tailrl.engine.sampling.gumbel import sample_gumbel_kernel, sample_gumbel_race
from tests.helpers import key_hashes, lm_like_logits, sampling_params

pytest.importorskip("triton")


@pytest.mark.parametrize("V,B,dtype", [(300, 24, torch.float32), (2048 + 3, 12, torch.float32),
                                       (2048, 12, torch.bfloat16),
                                       pytest.param(49152, 4, torch.float32, marks=pytest.mark.slow)])
def test_triton_equals_race(V, B, dtype):
    gen = torch.Generator().manual_seed(V + B)
    logits = lm_like_logits(B, V, gen).to(dtype)
    temp, top_k, top_p = sampling_params(B, 1.0, gen, top=True)
    temp[::3] = 0.7
    temp[1] = 0.0
    if V == 300:
        logits[2, :] = 0.0  # ties
        logits[4, 50:] = float("-inf")
        temp[5] = 1.3
    h = key_hashes(B, gen)
    race = sample_gumbel_race(logits, h, temp, top_k, top_p)
    tri = sample_gumbel_kernel(logits, h, temp, top_k, top_p)
    assert torch.equal(race[0], tri[0]) and torch.equal(race[1], tri[1])
