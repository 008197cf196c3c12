"""Robust statistics for "is this GPU slower than its peers?": median and MAD, never a fixed global number."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

# MAD of a normal sample is 0.6745 sigma: this makes robust z comparable to a z-score
MAD_SCALE = 1.4826


def median(values: list[float]) -> float:
    return statistics.median(values)


def mad(values: list[float], center: float | None = None) -> float:
    c = median(values) if center is None else center
    return median([abs(v - c) for v in values])


def robust_z(value: float, center: float, spread: float) -> float:
    return (value - center) / (MAD_SCALE * spread) if spread > 0 else 0.0


@dataclass
class Outlier:
    key: str            # "node/gpu"
    model: str
    value: float
    median: float
    z: float
    drop_pct: float
    peers: int


def outliers(samples: list[tuple[str, str, float]], *, min_peers: int = 8, z_threshold: float = 4.0,
             min_drop_pct: float = 5.0, spread_floor_pct: float = 0.5) -> tuple[list[Outlier], dict[str, dict]]:
    """Samples (key, model, value; higher is better) judged against the same model's peers.

    A sample is slow when it is both `z_threshold` robust deviations and `min_drop_pct` below its model's
    median.  The spread has a floor (`spread_floor_pct` of the median) so that a fleet of nearly identical
    GPUs does not turn noise into outliers.  Models with fewer than `min_peers` samples are not judged.
    """
    by_model: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for key, model, value in samples:
        if value is not None and value == value:  # skip None and NaN
            by_model[model].append((key, float(value)))
    found: list[Outlier] = []
    summary: dict[str, dict] = {}
    for model, rows in by_model.items():
        values = [v for _, v in rows]
        if len(values) < min_peers:
            summary[model] = {"peers": len(values), "judged": False}
            continue
        center = median(values)
        spread = max(mad(values, center), center * spread_floor_pct / 100)
        summary[model] = {"peers": len(values), "judged": True, "median": center, "mad": mad(values, center)}
        for key, v in rows:
            z = robust_z(v, center, spread)
            drop = (center - v) / center * 100 if center else 0.0
            if z <= -z_threshold and drop >= min_drop_pct:
                found.append(Outlier(key, model, v, center, z, drop, len(values)))
    found.sort(key=lambda o: o.z)
    return found, summary


def binomial_upper_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), in log space (n may be thousands of events)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
             for i in range(k, n + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))
