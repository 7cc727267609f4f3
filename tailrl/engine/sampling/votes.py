"""A sampler's draw from a small explicit distribution (token -> count), at the key the target samples that
position with: how the n-gram drafters (speculative/drafters) propose the token the target would most likely
draw there. Where the counts' distribution is close to the policy's, the draft *is* the policy's sample:

    inverse_cdf_vote   the token whose cumulative share (tokens in id order, as the target orders the
                       vocabulary) first passes the key's uniform (blocked, inverse_cdf)
    gumbel_vote        argmax of log(count) + the key's Gumbel noise of the token (gumbel): the same noise
                       the target's race adds, a shared-Gumbel coupling
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tailrl.engine.sampling.hashing import uniform_from_hash
from tailrl.kernels.gumbel_noise import gumbel_noise_py


def inverse_cdf_vote(counts: Mapping[int, int], h: int) -> int:
    """The token whose cumulative share, tokens in id order, first exceeds the key's uniform."""
    u = uniform_from_hash(h)
    total = sum(counts.values())
    acc = 0
    items = sorted(counts.items())
    for tok, c in items:
        acc += c
        if acc > u * total:
            return tok
    return items[-1][0]


def gumbel_vote(counts: Mapping[int, int], h: int) -> int:
    """argmax over the counted tokens of log(count) + the key's Gumbel noise (ties to the lower id)."""
    return max(sorted(counts), key=lambda t: math.log(counts[t]) + gumbel_noise_py(h, t))
