"""`slurm-gpufleet fleet simulate-faults`: what failures cost jobs, on the simulator core of
`maintain simulate` (simulators/rollout.py: its jobs, checkpoints, requeues and restarts; failures.py: its
failure draws).

Built so far: the one-job mode, the core checked against an analytic result.  One job of GPUS GPUs runs
for DAYS days; each of its nodes fails at exponential times of mean M hours (every class alike, nothing
to detect: strategy `none`, Slurm's NODE_FAIL alone); a failure ends the run, the job is requeued at once
on a spare and starts again after RESTART minutes from its last checkpoint.  The effective training time
ratio (ETTR) is the work kept over the time taken.  Daly (2006) gives its expectation for a job whose
failures have mean M_job = M / nodes, checkpoint interval t, checkpoint cost C (0 here) and restart R:

    E[T] = M_job e^{R/M_job} (e^{(t+C)/M_job} - 1) W / t,   ETTR = W / E[T]

(J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps", Future
Generation Computer Systems 22(3), 2006; bench/daly_check.py runs the grid).

The fleet mode (`fleet_faults`): the bundled Helios history (or `--sacct`) on a simulated fleet, with
failures drawn per class at the rates of data/failure_classes.toml (Llama 3's table; `--rates FILE` for
others), found by the mechanisms each strategy has, and handled as each strategy does; the gpufleet
strategies run the product's own remedy carrier (remedy/carrier.py), actuator and history on the
in-memory Slurm (simulators/simslurm.py): `_Lab`.
Strategies compared:

* `none`: Slurm's NODE_FAIL alone; a node whose GPU fails stays in service, and every job placed there
  crashes, until an admin finds it (`admin_hours`);
* `drain-on-any`: NHC-like, the periodic health check drains on any finding, warnings included (false
  drains on application Xids), and an admin reboots or repairs;
* `two-tier`: Meta's: checks every HealthCheckInterval and before and after each job, high severity
  drains and requeues at once, low severity (the classes' `severity`) drains and lets the running jobs
  end (a warning never drains); an admin reboots or repairs.  A low-severity fault degrades a node
  without ending its jobs, for every strategy: what differs is how soon new jobs stop landing there;
* `gpufleet`: the health check, prolog and epilog, and the ladder: reset, reboot, repair, capped per
  class, validation before return; a node drained for inspection gets an admin's repair after
  `admin_hours` + `repair_hours`, then `fleet repaired`.

Rack-correlated events (`--domain-size N`, `--switch-share S`; [domain] of the data file): a share of
the faults of the domain classes are switch-side and strike every node of their domain at once; only a
switch-tray swap fixes them.  The gpufleet strategy escalates as the product does: the carrier's own
rack escalation (remedy/escalation.escalate over the run's [[domain]]s) after a tray's drain, the domain
drained whole and its repair under way at once; the others find each tray, and an admin finds the switch.

The breaker is the actuator's (slurm/breaker.py), in front of the gpufleet strategy's drains, reboots
and escalations, with no gate of the simulator's own; tripped, it drains nothing until a person resets
it (`admin_hours`).

Not modelled: precursors (no class has a known share: all 0).
"""

from __future__ import annotations

import math
from typing import Any

from .faultmodel import (
    MECHANISMS,
    Fault,
    FaultModel,
    draw_faults,
)

STRATEGIES_ONE_JOB = ("none",)


def daly_ettr(job_mtbf_s: float, checkpoint_s: float, restart_s: float, cost_s: float = 0.0) -> float:
    """Daly's expected ETTR (W / E[T]) for exponential failures of mean `job_mtbf_s`."""
    m = job_mtbf_s
    return checkpoint_s / (m * math.exp(restart_s / m) * (math.exp((checkpoint_s + cost_s) / m) - 1))


def one_job(gpus: int, node_mtbf_h: float, checkpoint_every_h: float, restart_min: float, days: float,
            seed: int = 0, gpus_per_node: int = 8) -> dict[str, Any]:
    """The one-job mode's figures (strategy `none`), and Daly's ETTR for the same inputs."""
    from .failures import Hazards, Rates
    from .rollout import SimJob, Simulator

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


def _fault_run(strategy: str, model: FaultModel, jobs: list, nodes: int, gpus_per_node: int, horizon_s: float,
               faults: list[Fault], alarms: list[tuple[float, int]], *, hc_interval_s: float, checkpoint_every_h: float,
               restart_min: float, seed: int, big_jobs: frozenset[str], settings=None,
               domain_size: int = 0, watch=None) -> dict[str, Any]:
    """One strategy's replay: the same jobs, faults and false alarms as every other strategy."""
    import copy

    from ..remedy.decide import Ladder
    from .faultfigures import figures
    from .faultrun import FaultController, FaultSim, RunSetup

    times = model.times
    mech = MECHANISMS[strategy]
    switch_repair_s = (model.domain.switch_repair_hours if model.domain else 0.0) * 3600
    from ..policy import SlurmSettings

    # the product's ladder, its suspect rung included (gpufleet-no-suspect: without it)
    ladder = Ladder.of(settings or SlurmSettings(), suspect=strategy != "gpufleet-no-suspect")
    carried = strategy.startswith("gpufleet")   # the product's own carrier on the in-memory Slurm
    faults = [copy.copy(f) for f in faults]

    setup = RunSetup(strategy, mech, times, hc_interval_s, carried, ladder, settings, model, domain_size,
                     switch_repair_s)
    sim = FaultSim(jobs, nodes, gpus_per_node)
    sim.watch = watch
    ctl = FaultController(setup)
    sim.setup, sim.ctl = setup, ctl
    sim.checkpoint_every_s = checkpoint_every_h * 3600
    sim.restart_s = restart_min * 60
    sim.until = horizon_s
    for f in faults:
        sim.push(f.t, "tick", ("fault", f))
    for t, i in alarms:
        sim.push(t, "tick", ("alarm", i))
    sim.push(0.0, "rollout", None)
    sim.run(ctl, rollout_at=None)
    end = min(sim.now, horizon_s)
    for i, (since, cause) in list(ctl.out_since.items()):   # still out at the end
        ctl.out_by["remedies" if cause == "failures" else cause] += (end - since) * sim.nodes[i].gpus
    return figures(sim, ctl, faults, end, big_jobs)


def fleet_faults(trace, *, nodes: int, gpus_per_node: int, days: float | None, strategies: tuple[str, ...],
                 model: FaultModel, hc_interval_s: float, checkpoint_every_h: float, restart_min: float, seed: int,
                 lemon_share: float = 0.0, lemon_factor: float = 1.0, big_job_gpus: int = 0,
                 assumption: str = "runtime-ceil-hour", settings=None, seeds: int = 1, domain_size: int = 0,
                 switch_share: float | None = None, fault_log=None, progress=None,
                 big_job_hours: float = 24.0) -> dict[str, Any]:
    """The fleet mode: the trace's jobs on `nodes` nodes for `days`, the same faults for every strategy;
    with `seeds` > 1 every figure is the mean over seeds seed..seed+seeds-1 (faults drawn are summed).

    fault_log: a faultlog.FaultLog to replay instead of drawing failures: its nodes are the fleet's first
    (`nodes` adds nodes that never faulted), its span the horizon (`days` cuts it), and the history
    repeats to cover it.  progress(strategy, seed, now_s, horizon_s): told about once a second."""
    from .rollout import SimJob, sim_jobs

    jobs, dropped = sim_jobs(trace, gpus_per_node, assumption)
    span = max((j.submit + j.run for j in jobs), default=0.0)
    if fault_log is not None:
        nodes = max(nodes, len(fault_log.nodes))
        horizon = min(days * 86400, fault_log.span_s) if days else fault_log.span_s
        jobs = _repeated(jobs, span, horizon)
    else:
        horizon = days * 86400 if days else span
    jobs = [j for j in jobs if j.submit < horizon and j.nodes <= nodes]
    stream = _big_jobs(big_job_gpus, big_job_hours, gpus_per_node, nodes, horizon) if big_job_gpus else []
    jobs = stream + jobs
    big = frozenset(j.id for j in stream)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in strategies}
    by_class: dict[str, int] = {}
    alarms_drawn = rack_events = 0
    if domain_size and (model.domain is None or not model.domain.classes):
        raise ValueError("--domain-size: the rates file names no [domain] classes")
    for s in range(seed, seed + seeds):
        faults, alarms = draw_faults(model, nodes, horizon, s, lemon_share, lemon_factor, domain_size, switch_share)
        if fault_log is not None:   # the log's faults instead of the draws; the false alarms stay drawn
            faults = logged_faults(fault_log, model, horizon, s)
        alarms_drawn += len(alarms)
        for f in faults:
            by_class[f.cls.name] = by_class.get(f.cls.name, 0) + 1
        rack_events += len({(f.t, f.domain) for f in faults if f.domain is not None})
        for name in strategies:
            run_jobs = [SimJob(j.id, j.submit, j.run, j.limit, j.nodes, j.gpn) for j in jobs]
            runs[name].append(_fault_run(
                name, model, run_jobs, nodes, gpus_per_node, horizon, faults, alarms, hc_interval_s=hc_interval_s,
                checkpoint_every_h=checkpoint_every_h, restart_min=restart_min, seed=s, big_jobs=big,
                settings=settings, domain_size=domain_size,
                watch=(lambda sim, name=name, s=s: progress(name, s, sim.now, horizon)) if progress else None))
    series = {name: rs[0]["_series"] for name, rs in runs.items()}   # the first seed's, for --plot
    for rs in runs.values():
        for r in rs:
            r.pop("_series")
            r.pop("_moves")
            r.pop("_rungs")
    out: dict[str, Any] = {"strategies": {name: _mean(rs) for name, rs in runs.items()}, "_series": series}
    out["assumptions"] = _fleet_assumptions(model, nodes, gpus_per_node, horizon, jobs, dropped, seed, seeds, by_class,
                                            alarms_drawn, rack_events, hc_interval_s, checkpoint_every_h,
                                            restart_min, lemon_share, lemon_factor, big_job_gpus, big_job_hours,
                                            big, domain_size, switch_share, fault_log)
    return out


def _big_jobs(big_job_gpus: int, big_job_hours: float, gpus_per_node: int, nodes: int, horizon: float) -> list:
    """A stream of training jobs beside the history, for the figures of jobs of 1,024 GPUs or more: one
    submitted every big_job_hours, each running that long (a job waits while the one before runs)."""
    from .rollout import SimJob

    need = math.ceil(big_job_gpus / gpus_per_node)
    if need > nodes:
        raise ValueError(f"--big-job {big_job_gpus} needs {need} nodes of {gpus_per_node} GPUs; the fleet has {nodes}")
    period = big_job_hours * 3600
    return [SimJob(f"big-{k + 1}", k * period, run=period, limit=period * 1.5, nodes=need,
                   gpn=min(big_job_gpus, gpus_per_node)) for k in range(max(1, math.ceil(horizon / period)))]


def _fleet_assumptions(model: FaultModel, nodes: int, gpus_per_node: int, horizon: float, jobs: list, dropped,
                       seed: int, seeds: int, by_class: dict[str, int], alarms_drawn: int, rack_events: int,
                       hc_interval_s: float, checkpoint_every_h: float, restart_min: float, lemon_share: float,
                       lemon_factor: float, big_job_gpus: int, big_job_hours: float, big: frozenset[str],
                       domain_size: int, switch_share: float | None, fault_log) -> dict[str, Any]:
    """What a fleet run assumed, as its output says it."""
    out = {
        "mode": "fleet", "nodes": nodes, "gpus_per_node": gpus_per_node, "days": round(horizon / 86400, 2),
        "jobs": len(jobs), "jobs_dropped": dict(dropped), "seed": seed, "seeds": seeds, "rates": model.source,
        "faults_drawn": by_class, "false_alarms_drawn": alarms_drawn,
        "health_check_interval_s": hc_interval_s, "checkpoint_every_h": checkpoint_every_h,
        "restart_minutes": restart_min, "lemon_share": lemon_share, "lemon_factor": lemon_factor,
        "big_jobs": {"gpus": big_job_gpus, "hours": big_job_hours, "jobs": len(big),
                     "stream": "one submitted every `hours`, each running that long, beside the history"}
        if big_job_gpus else None,
        "times": dict(model.times),
        "domain_size": domain_size,
        "switch_share": (model.domain.switch_share if model.domain else 0.0) if switch_share is None else switch_share,
        "switch_events_drawn": rack_events,
        "not_modelled": "precursors (0 for every class: no source)"
                        + ("" if domain_size else ", rack-correlated events (--domain-size)"),
    }
    if fault_log is not None:
        out["fault_log"] = {
            "form": fault_log.form, "faults": len(fault_log.faults), "nodes_in_log": len(fault_log.nodes),
            "span_days": round(fault_log.span_s / 86400, 2),
            "replayed": "each logged fault leaves its node unusable from its start to its end, whatever the "
                        "strategy (nothing on the node fixes it sooner); the strategies differ in how soon jobs "
                        "stop landing there, the work jobs lose and the remedies they add; the history repeats "
                        "to cover the log's span"}
    return out


def _repeated(jobs: list, span: float, horizon: float) -> list:
    """The history again and again, each copy `span` later, until it covers the horizon."""
    from .rollout import SimJob

    if span <= 0 or horizon <= span:
        return jobs
    out = list(jobs)
    for k in range(1, math.ceil(horizon / span)):
        out += [SimJob(f"{j.id}#{k}", j.submit + k * span, j.run, j.limit, j.nodes, j.gpn) for j in jobs
                if j.submit + k * span < horizon]
    return out


def logged_faults(log, model: FaultModel, horizon_s: float, seed: int) -> list[Fault]:
    """A fault log's rows as the simulator's faults: the log's nodes are the fleet's first, in order; the
    class is what the rates file's keywords name; each lasts until its logged end."""
    import random

    from .faultlog import class_of

    by_name = {c.name: c for c in model.classes}
    index = {node: i for i, node in enumerate(log.nodes)}
    rng = random.Random(f"{seed} fault log")   # where in the health check's interval each falls
    return [Fault(f.start_s, index[f.node], by_name[class_of(f.text, model.classes)], "repair", rng.random(),
                  until=min(f.end_s, horizon_s))
            for f in log.faults if f.start_s < horizon_s]


def _mean(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every number the mean over the runs (None where no run has one); one run is itself."""
    if len(runs) == 1:
        return runs[0]
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        if isinstance(value, dict):
            out[key] = _mean([r[key] for r in runs])
        else:
            values = [r[key] for r in runs if isinstance(r[key], int | float)]
            out[key] = round(sum(values) / len(values), 4) if values else None
    return out
