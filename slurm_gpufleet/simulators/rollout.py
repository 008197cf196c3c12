"""What-if rollouts on a real job history.

A discrete-event replay of the jobs on a simulated fleet, with a scheduler close to Slurm's: priority
FIFO by submit time plus backfill that respects time limits and maintenance reservations.  At a chosen
moment a rollout starts, run by the engine (`gpufleet`) or one of the hand-written baselines:

* `gpufleet`: the planner of `maintain plan` (same code: canary, waves, budget) places each wave's
  reservation when its nodes' running jobs end by their time limits; short jobs backfill until then;
  nodes waiting for their turn get a higher Weight, so new jobs land on upgraded nodes first;
* `reboot-asap`: a hand-written baseline, a rolling `scontrol reboot ASAP` within the same budget, nodes in
  name order (not the engine's `reboot-asap` strategy: maintain/strategy.py);
* `drain-all`: every node drained at once, upgraded when empty, all resumed at the end.

Each strategy runs on the same trace next to a baseline without maintenance; the difference in each
job's queue wait is the wait the rollout added.  No strategy kills jobs; the simulator checks it.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

from ..maintain.fleet import FleetNode, FleetState
from ..maintain.pool import in_pool
from ..maintain.sacct import Trace, assume_limit
from ..maintain.strategy import SIMULATED
from ..policy import MaintainSettings, Policy
from ..slurm.domains import consecutive
from .failures import (
    Hazards,
    Rates,
    publish_summaries,
)
from .jobsim import BACKFILL_DEPTH, INF, Controller, SimJob, Simulator, StrategyResult
from .simslurm import SimExecutor, SimSlurm
from .strategies import DrainAllController, GpufleetController, RebootAsapController, WaitThenKillController

# what `simulate --strategy` compares: the engine (gpufleet) and hand-written baselines
COMPARED = SIMULATED
def time_limits_label(trace: Trace, assumption: str) -> str:
    known, total = trace.limits_known, len(trace.jobs)
    if known == total and total:
        return "from the history"
    if known == 0:
        return f"assumed: {assumption}"
    return f"from the history for {known} of {total} jobs; assumed for the rest: {assumption}"


def sim_jobs(trace: Trace, gpus_per_node: int, assumption: str) -> tuple[list[SimJob], Counter]:
    jobs: list[SimJob] = []
    dropped: Counter = Counter()
    for j in trace.jobs:
        nodes = max(j.nodes, math.ceil(j.gpus / gpus_per_node))
        gpn = gpus_per_node if nodes > 1 else j.gpus
        if gpn > gpus_per_node:
            dropped["more GPUs per node than the fleet has"] += 1
            continue
        limit = j.time_limit_s if j.time_limit_s is not None else assume_limit(j.run_s, assumption)
        run = min(j.run_s, limit)  # Slurm ends a job at its limit
        jobs.append(SimJob(j.job_id, j.submit, max(run, 1.0), limit, nodes, gpn))
    return jobs, dropped


def budget_of(spec: int | str, nodes: int) -> int:
    """A rollout's budget over `nodes`: the planner's rule (amounts.count_of)."""
    from ..common.amounts import count_of

    return count_of(spec, nodes, round_up=True)


def simulate(trace: Trace, *, nodes: int, gpus_per_node: int, strategies: tuple[str, ...], rollout_at_h: float,
             max_unavailable: int | str, policy: Policy, assumption: str, upgrade_minutes: int | None = None,
             deadline_h: float | None = None, checkpoint_every_h: float | None = None,
             domain_size: int | None = None, target: str | None = "580.159.04", kernel: str | None = None,
             firmware: dict[str, str] | None = None, rates: Rates | None = None, seed: int = 0, jobs: int = 1,
             progress: Callable[[int, int, str], None] | None = None, hours: float | None = None) -> dict[str, Any]:
    """`target`, `kernel`, `firmware`: what the engine's plan rolls out (gpufleet; the baselines upgrade
    a node in `upgrade_minutes` whatever it is).  `rates`: node failures and soft events from the
    rollout's start on, the same draws (`seed`) in every run, the baseline's too (failures.py).  `jobs`: the
    strategies' replays in that many processes (pool.py); `progress` hears of each one finished.  `hours`:
    every replay (the baseline's too) stops that long after the rollout's start, whatever is left: a week
    of a large fleet without replaying the whole history after it."""
    from dataclasses import replace

    upgrade_s = 60.0 * (upgrade_minutes or policy.maintain.upgrade_minutes)
    budget = budget_of(max_unavailable, nodes)
    settings: MaintainSettings = replace(policy.maintain, max_unavailable=budget,
                                         upgrade_minutes=int(upgrade_s // 60))
    sim_policy = replace(policy, maintain=settings)
    # without failures an evidence gate has no events to judge and would only wait out its soak: the
    # replay then gates on validation (the gate's figures come from the --seeds trials, trials.py)
    replay_policy = sim_policy if rates else replace(policy, maintain=replace(settings, gate="validated"))
    base_jobs, dropped = sim_jobs(trace, gpus_per_node, assumption)
    rollout_at = rollout_at_h * 3600
    until = rollout_at + hours * 3600 if hours else INF

    def with_hazards(sim: Simulator) -> Simulator:
        sim = _with_hazards(sim, rates, seed, rollout_at)
        sim.until = until
        return sim

    every_s = checkpoint_every_h * 3600 if checkpoint_every_h else None
    if every_s:  # what each job says of itself in its Slurm comment (maintain/deadline.py)
        for j in base_jobs:
            j.comment = f"gpufleet:checkpoint_every={checkpoint_every_h:g}h"
    baseline = with_hazards(Simulator(_copy(base_jobs), nodes, gpus_per_node))
    # the baseline is what the replays are measured against (and the deadline's lower bound): without
    # them (--no-replay) it is not run
    replays = bool(strategies) or deadline_h is not None
    if replays:
        baseline.run()
    base_wait = waits(baseline.jobs, until) if replays else {}
    # the load as the rollout starts, as the history ran it (failures requeue jobs and move later starts);
    # for the trials alone, the history up to the rollout's start is all there is to run
    unfailed = baseline
    if rates or not replays:
        unfailed = Simulator(_copy(base_jobs), nodes, gpus_per_node)
        unfailed.until = until if replays else rollout_at
        unfailed.run()
    deadline = rollout_at + deadline_h * 3600 if deadline_h else None
    lower_bound = _work_lost_lower_bound(baseline.jobs, rollout_at, deadline, upgrade_s, every_s) \
        if deadline is not None else None
    common = dict(base_jobs=base_jobs, nodes=nodes, gpus_per_node=gpus_per_node, budget=budget, upgrade_s=upgrade_s,
                  policy=replay_policy, target=target, deadline=deadline, kernel=kernel, firmware=firmware,
                  rates=rates, seed=seed, rollout_at=rollout_at, domain_size=domain_size, every_s=every_s,
                  base_wait=base_wait, until=until)
    if jobs <= 1 or len(strategies) <= 1:  # the replays run here: each says how far it is as it goes
        common["progress"] = progress
    # each strategy's replay is independent of the others: side by side in processes when `jobs` > 1
    results: dict[str, StrategyResult] = dict(zip(strategies, in_pool(
        [functools.partial(replay_strategy, name, **common) for name in strategies], jobs, progress,
        "strategy replays"), strict=True))
    extra: dict[str, Any] = {}
    if deadline is not None:
        extra["work_lost_lower_bound_gpu_h"] = round(lower_bound or 0.0, 3)
        extra["deadline_h"] = deadline_h
    if hours:
        extra["hours"] = hours
        extra["stopped"] = (f"every replay (the baseline's too) stopped {hours:g} h after the rollout's start; a job "
                            "still waiting then counts its wait until then in wait_added")
    return {
        **extra,
        "strategies": {k: r.metrics() for k, r in results.items()},
        "assumptions": _assumptions(trace, assumption, nodes, gpus_per_node, rollout_at_h, budget, upgrade_s,
                                    domain_size, settings, base_jobs, dropped, rates, seed, replay_policy),
        "_results": results,
        # the load as the rollout starts (simulators/trials.py runs the engine on it under random failures)
        "_running": [j for j in unfailed.jobs if j.start is not None and j.start <= rollout_at < j.start + j.run],
        "_policy": sim_policy,
    }


def _work_lost_lower_bound(jobs: list[SimJob], rollout_at: float, deadline: float, upgrade_s: float,
                           every_s: float | None) -> float:
    """GPU-hours a deadline costs whatever is done: each job running at the rollout that would still run
    when the last nodes must start loses at least its work since its last checkpoint at the rollout."""
    return sum(
        (rollout_at - j.start - (math.floor((rollout_at - j.start) / every_s) * every_s if every_s else 0.0))
        * j.gpn * j.nodes for j in jobs
        if j.start is not None and j.start <= rollout_at < j.start + j.run
        and j.start + j.run > deadline - upgrade_s) / 3600


def _assumptions(trace: Trace, assumption: str, nodes: int, gpus_per_node: int, rollout_at_h: float, budget: int,
                 upgrade_s: float, domain_size: int | None, settings: MaintainSettings, base_jobs: list[SimJob],
                 dropped, rates: Rates | None, seed: int, replay_policy: Policy) -> dict[str, Any]:
    """What a simulation assumed, as its output says it."""
    return {
        "time_limits": time_limits_label(trace, assumption),
        "fleet": f"{nodes} nodes x {gpus_per_node} GPUs", "rollout_at_h": rollout_at_h,
        "max_unavailable_nodes": budget, "upgrade_minutes": upgrade_s / 60,
        **({"domains": f"{domain_size} consecutive nodes each; mixed = nodes in service on two drivers",
            "whole_domain": settings.whole_domain,
            "max_unavailable_domains": settings.max_unavailable_domains} if domain_size else {}),
        "scheduler": f"priority FIFO by submit time + EASY backfill (depth {BACKFILL_DEPTH}) respecting "
                     "time limits and reservations; multi-node jobs take whole nodes",
        "wait_added": "per job: wait with the rollout - wait without it, jobs submitted from 7 days before "
                      "the rollout on",
        "jobs_used": len(base_jobs), "jobs_dropped": dict(dropped), "lines_skipped": dict(trace.skipped),
        **({"failures": {"failure_per_1000_node_days": rates.failure_rate, "soft_per_node_day": rates.soft_rate,
                         "driver_effect": rates.driver_effect, "repair_h": rates.repair_h, "seed": seed,
                         "from": "the rollout's start to the replay's end, in every run (the baseline's "
                                 "too); *_in_rollout: while the rollout ran",
                         "failed_jobs": "end NODE_FAIL and are requeued (Slurm's JobRequeue=1)",
                         "gate": replay_policy.maintain.gate}} if rates else {}),
    }


def replay_strategy(name: str, *, base_jobs: list[SimJob], nodes: int, gpus_per_node: int, budget: int,
                    upgrade_s: float, policy: Policy, target: str | None, deadline: float | None,
                    kernel: str | None, firmware: dict[str, str] | None, rates: Rates | None, seed: int,
                    rollout_at: float, domain_size: int | None, every_s: float | None,
                    base_wait: dict[str, float], until: float = INF,
                    progress: Callable[[int, int, str], None] | None = None) -> StrategyResult:
    """One strategy's replay of the history from the rollout's start (a process of its own under --jobs)."""
    if name == "gpufleet":
        ctl: Controller = GpufleetController(budget, upgrade_s, policy, target, deadline=deadline,
                                             kernel=kernel, firmware=firmware)
    elif name == "wait-then-kill":
        if deadline is None:
            raise ValueError("the wait-then-kill strategy needs a deadline (--deadline)")
        ctl = WaitThenKillController(budget, upgrade_s, deadline)
    elif name == "reboot-asap":
        ctl = RebootAsapController(budget, upgrade_s)
    elif name == "drain-all":
        ctl = DrainAllController(budget, upgrade_s)
    else:
        raise ValueError(f"unknown strategy {name!r} (one of {', '.join(COMPARED)})")
    sim = _with_hazards(Simulator(_copy(base_jobs), nodes, gpus_per_node), rates, seed, rollout_at)
    sim.budget = budget
    if domain_size:
        sim.domains = consecutive([n.name for n in sim.nodes], domain_size)
    sim.checkpoint_every_s = every_s
    if deadline is not None:
        sim.in_time_by = deadline - upgrade_s
    sim.until = until
    if progress is not None:
        def watch(s: Simulator) -> None:
            if s.now < rollout_at:
                return
            # how far in simulated hours, or how many nodes are through (short of all: the history after
            # the rollout replays on, and a finished count would be said every second)
            if until < INF:
                span = max(1, round((until - rollout_at) / 3600))
                progress(min(span - 1, int((s.now - rollout_at) / 3600)), span, f"{name} replay, simulated hours")
            elif (through := sum(n.upgraded for n in s.nodes)) < nodes:
                progress(through, nodes, f"{name} replay, nodes upgraded")
        sim.watch = watch
    sim.run(ctl, rollout_at)
    if until != INF and not ctl.finished:
        ctl.stopped(sim)
    added = sorted(wait - base_wait[job] for job, wait in waits(sim.jobs, until).items()
                   if job in base_wait and sim.by_id[job].submit >= rollout_at - 7 * 86400)
    p95 = added[min(len(added) - 1, int(0.95 * len(added)))] if added else 0.0
    cap = [((t - rollout_at) / 3600, g) for t, g in sim.capacity]
    return StrategyResult(
        makespan_h=(ctl.done_at - ctl.started_at) / 3600 if ctl.finished else INF,
        gpu_hours_lost=sim.lost_gpu_s / 3600, jobs_killed=sim.killed,
        wait_added_mean_h=(sum(added) / len(added) / 3600) if added else 0.0, wait_added_p95_h=p95 / 3600,
        peak_nodes_out=sim.peak_out, over_budget=sim.over_budget, node_drain_hours=sim.out_node_s / 3600,
        capacity=cap,
        waves=[{**w, **{k: (None if w[k] is None else round((w[k] - rollout_at) / 3600, 3))
                        for k in ("reserve_at", "start", "end")}} for w in ctl.waves],
        gating_jobs=[{**g, "end_h": None if g["end"] is None else round((g["end"] - rollout_at) / 3600, 2)}
                     for g in ctl.gating],
        work_lost_gpu_h=sim.lost_work_gpu_s / 3600, jobs_preempted=sim.preempted,
        done_by_deadline=None if deadline is None else bool(ctl.finished and ctl.done_at <= deadline),
        touched_in_time=sim.touched_in_time,
        domains=len(sim.domains.members) if sim.domains else None, mixed_driver_domains_max=sim.mixed_max,
        domains_in_service_min=sim.whole_min if sim.whole_min is not None else 0,
        failures=None if sim.hazards is None else failure_figures(sim, ctl, name == "gpufleet"),
        stopped_at_h=None if until == INF else round((until - rollout_at) / 3600, 3),
        nodes_upgraded=sum(n.upgraded for n in sim.nodes))


def waits(jobs: list[SimJob], until: float = INF) -> dict[str, float]:
    """Each job's wait from submit to start.  In a replay cut at `until`, a job submitted by then that has
    not started counts its wait until then (censored: what it waited at least), so a strategy that holds
    jobs back past the stop is not measured on the jobs it let through alone."""
    if until == INF:
        return {j.id: j.start - j.submit for j in jobs if j.start is not None}
    return {j.id: min(j.start if j.start is not None else INF, until) - j.submit for j in jobs if j.submit <= until}


def _with_hazards(sim: Simulator, rates: Rates | None, seed: int, rollout_at: float) -> Simulator:
    """Failures and soft events from the rollout's start, the same draws (`seed`) in every run."""
    if rates:
        sim.hazards, sim.hazards_from = Hazards(rates, seed), rollout_at
        publish_summaries(sim.nodes, "570.172.08")  # the driver GpufleetController's plan starts from
    return sim


def failure_figures(sim: Simulator, ctl: Controller, engine: bool) -> dict[str, Any]:
    """What the draws did, from the rollout's start to the replay's end, and while the rollout ran."""
    h = sim.hazards
    end = ctl.done_at if ctl.finished else INF
    during = [t for t in h.failed_at if ctl.started_at <= t <= end]
    jobs_during = sum(1 for _, state, _, t in sim.ended if state == "NODE_FAIL" and ctl.started_at <= t <= end)
    return {"node_failures": h.node_failures, "jobs_failed": sim.jobs_failed,
            "work_lost_gpu_h": round(sim.failed_work_gpu_s / 3600, 3), "soft_events": h.soft_events,
            "node_failures_in_rollout": len(during), "jobs_failed_in_rollout": jobs_during,
            **({"rollout": getattr(ctl, "state", None)} if engine else {})}


def _copy(jobs: list[SimJob]) -> list[SimJob]:
    return [SimJob(j.id, j.submit, j.run, j.limit, j.nodes, j.gpn, comment=j.comment) for j in jobs]


class SimFleet:
    """The engine alone on an in-memory fleet: nodes, running jobs that end at their limits, upgrades that
    take `upgrade_s`, a clock moved by hand.  For benchmarks and tests of the engine at any fleet size
    (the job scheduler of `maintain simulate` is left out: no new jobs arrive)."""

    def __init__(self, nodes: int, gpus: int = 8, now: float = 1_800_000_000.0):
        self.sim = Simulator([], nodes, gpus)
        self.sim.now = now
        self.slurm = SimSlurm(self.sim)
        self.gpn: dict[str, int] = {}

    def add_job(self, job_id: str, node: int | list[int], gpus: int, end: float, *, start: float | None = None,
                comment: str = "") -> None:
        placed = [node] if isinstance(node, int) else list(node)
        start = self.sim.now if start is None else start
        self.sim.by_id[job_id] = SimJob(job_id, start, end - start, end - start, len(placed), gpus, start=start,
                                        placed=placed, comment=comment)
        for i in placed:
            n = self.sim.nodes[i]
            n.free -= gpus
            n.running[job_id] = end
        self.gpn[job_id] = gpus

    def fleet_state(self, driver: str = "570.172.08"):
        nodes = {n.name: FleetNode(name=n.name, partitions=["gpu"], driver=driver, gpus=f"{n.gpus}x{n.model}",
                                   firmware="96.00.A5.00.1A", verdict="ok", flags=["DRAIN"] if n.drained else [],
                                   reason=n.reason) for n in self.sim.nodes}
        return FleetState(nodes, self.slurm.running_jobs(), [], self.sim.now)

    def advance(self, to: float, executor: SimExecutor) -> None:
        """Move the clock: upgrades due complete, jobs due end."""
        events = self.sim.events
        while events and events[0][0] <= to:
            t, _, kind, payload = heapq.heappop(events)
            self.sim.now = max(self.sim.now, t)
            if kind == "upgraded":
                executor.complete(*payload)
        self.sim.now = to
        for n in self.sim.nodes:
            for jid, end in list(n.running.items()):
                if end <= to:
                    del n.running[jid]
                    n.free += self.gpn.get(jid, 0)
