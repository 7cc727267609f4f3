"""Least-squares fits shared by the cost models (speculation's online forward cost, the TGS profile, the
engine's latency profile): pure Python, no tensors."""

from __future__ import annotations


def fit_affine(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (c0, c1) of t = c0 + c1 * n over (n, t) points; c0, c1 clamped >= 0 (c1 > 0)."""
    sums = [0.0] * 5
    for n, t in points:
        add_point(sums, n, t)
    return affine_from_sums(sums)


def add_point(sums: list[float], n: float, t: float, weight: float = 1.0) -> None:
    """Add (n, t) with a weight to the running sums [w, w n, w t, w n^2, w n t] (negative: remove it)."""
    for i, v in enumerate((1.0, n, t, n * n, n * t)):
        sums[i] += weight * v


def one_size(sums: list[float]) -> bool:
    """Whether the points behind sums [w, w n, w t, w n^2, w n t] all have (about) the same n."""
    w, sn, _, snn, _ = sums
    mx = sn / w
    return snn / w - mx * mx <= 1e-12 * max(mx * mx, 1.0)


def affine_from_sums(sums: list[float]) -> tuple[float, float]:
    """(c0, c1) of the weighted least-squares line from sums [w, w n, w t, w n^2, w n t]; c0, c1 clamped >= 0
    (c1 > 0). All weight on one size: c1 = 1e-9 and c0 the mean time."""
    w, sn, st, snn, snt = sums
    mx, my = sn / w, st / w
    c1 = 0.0 if one_size(sums) else (snt / w - mx * my) / (snn / w - mx * mx)
    c1 = max(c1, 1e-9)
    return max(my - c1 * mx, 0.0), c1
