"""Node failures and soft events, drawn at random the same way wherever a rollout is simulated: the
`--seeds` trials (trials.py) and the full replay (`maintain simulate --failure-rate R`, simulate.py).

Per node in service and per step of `step_s`, from a Poisson law:
* hard failures at `failure_rate` per 1,000 node-days: the node's jobs end NODE_FAIL (requeued where
  `requeue`, as Slurm does a batch job with JobRequeue=1, its default, at most MAX_BATCH_REQUEUE times:
  then Slurm holds it, and here it ends) and the node is drained for `repair_h` by "someone else" (a
  rollout skips a waiting node it finds so, as on a real fleet);
* soft events at `soft_rate` per node-day: they raise the `xs` counter the node's health check publishes
  (soft Xids), harmless to jobs;
both `driver_effect` times as often on upgraded nodes.  A node out of service (drained, reserved,
upgrading) draws nothing: no job runs there to fail.

`exact` hazards (the fault simulator's one-job mode, checked against Daly's formula) draw no steps: the
time to the next hard failure anywhere in service is exponential, with the fleet's summed rate
(`next_failure_in`), and the node that fails is drawn in proportion to its rate (`failure_now`); a repair
of 0 h puts the node back at once (a spare takes its place).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from typing import Any

from ..catalogs import base_rates

# NCSA Delta's Xid 31 rate (data/base_rates.toml, xid_soft): the soft rate when only a failure rate is given
DELTA_SOFT_RATE = base_rates()["xid_soft"]
REPAIR_REASON = "repair: node failure"
MAX_BATCH_REQUEUE = 5  # slurm.conf MaxBatchRequeue's default: a job requeued more often is held


@dataclass
class Rates:
    failure_rate: float          # hard node failures per 1,000 node-days
    soft_rate: float             # soft events per node-day
    driver_effect: float = 1.0   # both, times this on upgraded nodes
    repair_h: float = 4.0


def rates_of(failure_rate: float | None, soft_rate: float | None, driver_effect: float = 1.0,
             seeds: int | None = None) -> Rates | None:
    """`maintain simulate`'s failure options as rates: a soft rate defaults to NCSA Delta's with a failure
    rate and to none without; --seeds alone draws from zero rates (the gate trials' own).  None: no
    failures asked for.  ValueError: a driver effect with nothing to multiply."""
    if driver_effect != 1.0 and not failure_rate and not soft_rate:
        raise ValueError("--driver-effect multiplies the failure and soft rates: give --failure-rate R or "
                         "--soft-rate S")
    if failure_rate is None and soft_rate is None and not seeds:
        return None
    return Rates(failure_rate or 0.0,
                 soft_rate if soft_rate is not None else (DELTA_SOFT_RATE if failure_rate else 0.0), driver_effect)


def poisson(rng: random.Random, mean: float) -> int:
    if mean <= 0:
        return 0
    if mean > 30:  # normal approximation: exact enough, and no long loop
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    k, p, limit = 0, 1.0, math.exp(-mean)
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


@dataclass
class Hazards:
    """One run's draws and what they did."""
    rates: Rates
    seed: int = 0
    step_s: float = 3600.0
    requeue: bool = True
    exact: bool = False        # exponential times between failures instead of steps (soft events: none)
    max_requeue: int = MAX_BATCH_REQUEUE  # a job requeued more often ends (Slurm holds it)
    repaired_at: dict[str, float] = field(default_factory=dict)   # node -> when its repair ends
    failed_at: list[float] = field(default_factory=list)          # when each node failure came
    soft_events: int = 0

    @property
    def node_failures(self) -> int:
        return len(self.failed_at)
    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)


def publish_summaries(nodes: list[Any], driver: str) -> None:
    """Each node's health-check summary on `driver`, as the evidence gate reads the nodes not yet upgraded
    (the soft events count up in it)."""
    for n in nodes:
        n.extra = json.dumps({"gpufleet": 1, "v": "ok", "drv": driver, "gpus": f"{n.gpus}x{n.model}",
                              "t": "2020-01-01T00:00:00Z"}, separators=(",", ":"))


def hazard_step(sim: Any, h: Hazards, dt: float) -> tuple[bool, bool]:
    """One step of `dt` seconds on the simulated fleet (`sim`: the Simulator): repairs due end, then each
    node in service draws.  (a node failed: its jobs ended; a node left or came back into service)."""
    per_s = 1 / 86400
    failed = repaired = False
    for n in sim.nodes:
        if n.name in h.repaired_at and sim.now >= h.repaired_at[n.name]:
            del h.repaired_at[n.name]
            if n.reason == REPAIR_REASON:
                repair_done(n)
                repaired = True
        if n.drained or n.out(sim.now):
            continue
        k = h.rates.driver_effect if n.upgraded else 1.0
        if poisson(h.rng, h.rates.failure_rate / 1000 * per_s * dt * k):
            fail_node(sim, n, h)
            failed = True
            continue
        soft = poisson(h.rng, h.rates.soft_rate * per_s * dt * k)
        if soft and n.extra:
            data = json.loads(n.extra)
            data["xs"] = data.get("xs", 0) + soft
            n.extra = json.dumps(data, separators=(",", ":"))
            h.soft_events += soft
    return failed, failed or repaired


def _rates_per_s(sim: Any, h: Hazards) -> list[tuple[Any, float]]:
    per_node = h.rates.failure_rate / 1000 / 86400
    return [(n, per_node * (h.rates.driver_effect if n.upgraded else 1.0)) for n in sim.nodes
            if not n.drained and not n.out(sim.now)]


def _running_sum(rated: list[tuple[Any, float]]):
    total = 0.0
    for n, r in rated:
        total += r
        yield n, total


def next_failure_in(sim: Any, h: Hazards) -> float:
    """Seconds to the next hard failure among the nodes in service (exact hazards)."""
    total = sum(r for _, r in _rates_per_s(sim, h))
    return h.rng.expovariate(total) if total > 0 else math.inf


def failure_now(sim: Any, h: Hazards) -> bool:
    """Exact hazards: repairs due end, then one node in service fails, drawn by its rate."""
    for n in sim.nodes:
        if n.name in h.repaired_at and sim.now >= h.repaired_at[n.name]:
            del h.repaired_at[n.name]
            if n.reason == REPAIR_REASON:
                repair_done(n)
    rated = _rates_per_s(sim, h)
    total = sum(r for _, r in rated)
    if total <= 0:
        return False
    pick = h.rng.random() * total
    n = next((n for n, r in _running_sum(rated) if pick < r), rated[-1][0])
    fail_node(sim, n, h)
    if h.rates.repair_h <= 0:
        del h.repaired_at[n.name]
        repair_done(n)
    return True


def end_repairs(sim: Any, h: Hazards) -> None:
    """Every repair in progress ends now (a replay with no work left: its queue may wait for these nodes)."""
    for n in sim.nodes:
        if n.name in h.repaired_at and n.reason == REPAIR_REASON:
            repair_done(n)
    h.repaired_at.clear()


def repair_done(n: Any) -> None:
    """Back in service after its repair: its health check's next run publishes a clean verdict."""
    n.drained, n.reason = False, ""
    if n.extra:
        data = json.loads(n.extra)
        data["v"] = "ok"
        n.extra = json.dumps(data, separators=(",", ":"))


def fail_node(sim: Any, n: Any, h: Hazards) -> None:
    for job_id in list(n.running):
        job = sim.by_id[job_id]
        names = [sim.nodes[i].name for i in sorted(job.placed)]
        job.requeues += 1
        sim.stop(job, h.requeue and job.requeues <= h.max_requeue, failed=True)
        sim.ended.append((job_id, "NODE_FAIL", names, sim.now))
    n.drained, n.reason = True, REPAIR_REASON
    if n.extra:  # what a real node's health check publishes in the write that drains it: a hard Xid, its verdict
        data = json.loads(n.extra)
        data["xh"] = data.get("xh", 0) + 1
        data["v"] = "drain"
        n.extra = json.dumps(data, separators=(",", ":"))
    h.repaired_at[n.name] = sim.now + h.rates.repair_h * 3600
    h.failed_at.append(sim.now)
