"""Least-squares fits shared by the cost models (speculation's online forward cost, the TGS profile, the
engine's latency profile): pure Python, no tensors."""

from __future__ import annotations


def fit_affine(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (c0, c1) of t = c0 + c1 * n over (n, t) points; c0, c1 clamped >= 0 (c1 > 0)."""
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    c1 = sum((p[0] - mx) * (p[1] - my) for p in points) / sxx if sxx > 0 else 0.0
    c1 = max(c1, 1e-9)
    return max(my - c1 * mx, 0.0), c1
