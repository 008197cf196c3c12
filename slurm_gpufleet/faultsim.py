"""`slurm-gpufleet fleet simulate-faults`: what failures cost jobs, on the simulator core of
`maintain simulate` (maintain/simulate.py: its jobs, checkpoints, requeues and restarts; failures.py: its
failure draws).

Built so far: the one-job mode, the core checked against an analytic result.  One job of GPUS GPUs runs
for DAYS days; each of its nodes fails at exponential times of mean M hours (every class alike, nothing
to detect: strategy `none`, Slurm's NODE_FAIL alone); a failure ends the run, the job is requeued at once
on a spare and starts again after RESTART minutes from its last checkpoint.  The effective training time
ratio (ETTR) is the work kept over the time taken.  Daly (2006) gives its expectation for a job whose
failures have mean M_job = M / nodes, checkpoint interval t, checkpoint cost C (0 here) and restart R:

    E[T] = M_job e^{R/M_job} (e^{(t+C)/M_job} - 1) W / t,   ETTR = W / E[T]

(J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps", Future
Generation Computer Systems 22(3), 2006; bench/daly_check.py runs the grid).  Not built yet (issue 32): failure classes and their rates, detection, the ladder's remedies
and the strategies compared on a fleet.
"""

from __future__ import annotations

import math
from typing import Any

STRATEGIES_ONE_JOB = ("none",)


def daly_ettr(job_mtbf_s: float, checkpoint_s: float, restart_s: float, cost_s: float = 0.0) -> float:
    """Daly's expected ETTR (W / E[T]) for exponential failures of mean `job_mtbf_s`."""
    m = job_mtbf_s
    return checkpoint_s / (m * math.exp(restart_s / m) * (math.exp((checkpoint_s + cost_s) / m) - 1))


def one_job(gpus: int, node_mtbf_h: float, checkpoint_every_h: float, restart_min: float, days: float,
            seed: int = 0, gpus_per_node: int = 8) -> dict[str, Any]:
    """The one-job mode's figures (strategy `none`), and Daly's ETTR for the same inputs."""
    from .maintain.failures import Hazards, Rates
    from .maintain.simulate import SimJob, Simulator

    if gpus < 1 or node_mtbf_h <= 0 or checkpoint_every_h <= 0 or restart_min < 0 or days <= 0:
        raise ValueError("GPUS, the MTBF, the checkpoint interval and the days must be positive, the restart >= 0")
    nodes = math.ceil(gpus / gpus_per_node)
    horizon = days * 86400
    job = SimJob("1", 0.0, run=horizon * 10, limit=horizon * 10, nodes=nodes, gpn=min(gpus, gpus_per_node))
    sim = Simulator([job], nodes, gpus_per_node)
    sim.checkpoint_every_s = checkpoint_every_h * 3600
    sim.restart_s = restart_min * 60
    sim.until = horizon
    # failure_rate is per 1,000 node-days; a repair of 0 h: a spare takes the failed node's place at once
    sim.hazards = Hazards(Rates(1000 * 24 / node_mtbf_h, 0.0, repair_h=0.0), seed, exact=True, max_requeue=10**9)
    sim.hazards_from = 0.0
    sim.run()
    work = sim.progress(job)
    job_mtbf_s = node_mtbf_h * 3600 / nodes
    return {
        "strategies": {"none": {
            "ettr": round(work / horizon, 4),
            "failures": sim.hazards.node_failures,
            "work_h": round(work / 3600, 3), "wall_h": round(horizon / 3600, 3),
            "work_lost_gpu_h": round(sim.failed_work_gpu_s / 3600, 3)}},
        "daly_ettr": round(daly_ettr(job_mtbf_s, sim.checkpoint_every_s, sim.restart_s), 4),
        "assumptions": {"mode": "one job", "gpus": gpus, "nodes": nodes, "node_mtbf_h": node_mtbf_h,
                        "job_mtbf_h": round(job_mtbf_s / 3600, 4), "checkpoint_every_h": checkpoint_every_h,
                        "checkpoint_cost_s": 0, "restart_minutes": restart_min, "days": days, "seed": seed,
                        "failures": "exponential per node; the job requeued at once on a spare, restarting "
                                    "from its last checkpoint after the restart"},
    }
