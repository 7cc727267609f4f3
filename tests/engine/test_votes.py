"""The samplers' draws from a small explicit distribution (engine/sampling/votes.py), which the n-gram
drafters use to propose what the target would draw: against the target's own samplers on the same
distribution (log counts as logits) at the same keys."""

import math
from collections import Counter

import torch

from tailrl.engine.sampling import SAMPLERS, host_flags, uniform_from_hash
from tailrl.engine.sampling.votes import gumbel_vote, inverse_cdf_vote
from tailrl.kernels.gumbel_noise import gumbel_noise, gumbel_noise_py, row_keys


def _keys(n: int) -> torch.Tensor:
    return (torch.arange(n, dtype=torch.int64) * 2654435761 + 12345) & 0xFFFFFFFF


def test_python_uniform_and_noise_match_the_tensor_ones():
    h = _keys(300)
    assert [uniform_from_hash(int(x)) for x in h] == uniform_from_hash(h).tolist()
    tokens = torch.tensor([[0, 1, 63, 64, 65, 200, 4095, 49151]])
    for x in h[:40]:
        ref = gumbel_noise(row_keys(x.view(1)), tokens)[0].tolist()
        got = [gumbel_noise_py(int(x), int(t)) for t in tokens[0]]
        assert max(abs(a - b) for a, b in zip(got, ref)) < 1e-12


def test_votes_draw_what_the_target_samples_from_the_same_distribution():
    """counts {token: c} as the target's logits log(c) (-inf elsewhere): at each key the vote is the target's
    own keyed sample, for the Gumbel race and for the inverse CDF."""
    counts = Counter({3: 5, 7: 1, 64: 2, 130: 9, 131: 1})
    V, N = 200, 400
    logits = torch.full((N, V), float("-inf"))
    for t, c in counts.items():
        logits[:, t] = math.log(c)
    h = _keys(N)
    args = (torch.ones(N), torch.zeros(N, dtype=torch.long), torch.ones(N), host_flags([1.0], [0], [1.0]))
    for name, vote in (("gumbel", gumbel_vote), ("inverse_cdf", inverse_cdf_vote)):
        assert SAMPLERS.get(name).vote is vote
        tokens = SAMPLERS.get(name)(logits, h, *args)[0].tolist()
        assert tokens == [vote(counts, int(x)) for x in h], name
        assert set(tokens) == set(counts)  # every counted token is drawn at some key
