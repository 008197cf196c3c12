"""Checkpoint advice: the job's MTBF from the per-GPU failure rate, and the checkpoint interval that
minimises expected lost work (Young 1974; Daly 2006), with the uncertainty of a rate seen in history."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass
class Advice:
    job_gpus: int
    checkpoint_cost_s: float
    gpu_mtbf_h: float
    job_mtbf_h: float
    interval_s: float
    interval_young_s: float
    expected_lost_fraction: float
    mtbf_source: str
    failures_seen: int | None = None
    gpu_hours_seen: float | None = None
    job_mtbf_h_range: tuple[float, float] | None = None
    interval_s_range: tuple[float, float] | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def daly_interval(cost_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum; for cost >= 2 MTBF checkpointing cannot win and the interval is MTBF."""
    if cost_s >= 2 * mtbf_s:
        return mtbf_s
    r = cost_s / (2 * mtbf_s)
    return math.sqrt(2 * cost_s * mtbf_s) * (1 + math.sqrt(r) / 3 + r / 9) - cost_s


def lost_fraction(interval_s: float, cost_s: float, mtbf_s: float) -> float:
    """Expected share of wall time lost: checkpoint overhead plus half an interval redone per failure."""
    return cost_s / (interval_s + cost_s) + (interval_s + cost_s) / (2 * mtbf_s)


def poisson_interval(k: int) -> tuple[float, float]:
    """An approximate 90 % interval for a Poisson count k (Wilson-Hilferty), for the failure rate's range."""
    def quantile(kk: float, z: float) -> float:
        if kk <= 0:
            return 0.0
        return kk * (1 - 1 / (9 * kk) + z / (3 * math.sqrt(kk))) ** 3
    low = quantile(k, -1.645) if k > 0 else 0.0
    high = quantile(k + 1, 1.645)
    return low, high


def advise(job_gpus: int, cost_s: float, gpu_mtbf_h: float | None = None, failures: int | None = None,
           gpu_hours: float | None = None) -> Advice:
    if job_gpus < 1 or cost_s <= 0:
        raise ValueError("job GPUs must be >= 1 and the checkpoint cost > 0 s")
    source = "given per-GPU MTBF"
    mtbf_range = None
    if gpu_mtbf_h is None:
        if not failures or not gpu_hours:
            raise ValueError("no GPU failures in the history to estimate a failure rate from: give --gpu-mtbf-hours")
        gpu_mtbf_h = gpu_hours / failures
        source = f"history: {failures} GPU failure(s) in {gpu_hours:.0f} GPU-hours"
        low, high = poisson_interval(failures)
        mtbf_range = (gpu_hours / high / job_gpus, gpu_hours / max(low, 1e-9) / job_gpus)
    job_mtbf_s = gpu_mtbf_h * 3600 / job_gpus
    interval = daly_interval(cost_s, job_mtbf_s)
    advice = Advice(job_gpus, cost_s, gpu_mtbf_h, job_mtbf_s / 3600, interval, math.sqrt(2 * cost_s * job_mtbf_s),
                    lost_fraction(interval, cost_s, job_mtbf_s), source, failures, gpu_hours, mtbf_range)
    if mtbf_range:
        advice.interval_s_range = (daly_interval(cost_s, mtbf_range[0] * 3600), daly_interval(cost_s, mtbf_range[1] * 3600))
    return advice
