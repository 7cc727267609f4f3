"""DAPO's soft overlong punishment (DAPO §3.4): a reward shaping term on the response length."""

from __future__ import annotations


def overlong_penalty(length: int, max_new_tokens: int, buffer: int, penalty: float) -> float:
    """DAPO soft overlong punishment: 0 up to max - buffer, then a linear ramp down to -penalty at max."""
    if buffer <= 0:
        return 0.0
    start = max_new_tokens - buffer
    if length <= start:
        return 0.0
    return -penalty * min(length - start, buffer) / buffer
