"""The figures of one strategy's fault replay (faultrun): GPU-hours lost by cause, job ETTR, time from a
fault to its drain, what resolved each fault, and the fleet's reliability as `fleet report` counts it from
the run's own history."""

from __future__ import annotations

from typing import Any

from .faultmodel import Fault


def figures(sim, ctl, faults: list[Fault], end: float, big_jobs: frozenset[str]) -> dict[str, Any]:
    from .trials import percentile

    w = _Work(sim, end)
    kept, ettr = w.kept, w.ettr
    started = [j.id for j in sim.jobs if j.submit < end]   # every job submitted (those still waiting too)
    # for --plot: GPUs in service, and the ETTR of the jobs ended by each day (hours on both axes)
    capacity = [(0.0, sum(n.gpus for n in sim.nodes))] + [(t / 3600, g) for t, g in sim.capacity]
    ettr_by_day = _ettr_by_day(sim, w, started, end)
    found = [f for f in faults if f.detected_at is not None]
    latency_min = [(f.detected_at - f.t) / 60 for f in found if f.cls.effect == "gpu"]
    resolved = sum(ctl.resolved.values())
    fleet_gpu_s = sum(n.gpus for n in sim.nodes) * end
    node_h_out = sum(ctl.out_by.values()) / 3600 / sim.nodes[0].gpus
    big = [sim.by_id[j] for j in started if j in big_jobs]
    return {
        "ettr": ettr(started),
        "ettr_1024": ettr([j for j in started if j in big_jobs]),
        "jobs_1024": len(big),
        # how long the jobs of 1,024 GPUs or more waited, from submit: for nodes enough in service
        "waiting_1024_h": round(max(0.0, sum(sim.done_at.get(j.id, end) - j.submit - sim.ran_s.get(j.id, 0.0)
                                    - (end - j.start if j.start is not None and j.id not in sim.done_at else 0.0)
                                    for j in big)) / 3600, 1) if big else None,
        "goodput": round(sum(kept(sim.by_id[j]) * sim.by_id[j].gpn * sim.by_id[j].nodes for j in started)
                         / fleet_gpu_s, 4) if fleet_gpu_s else None,
        "availability": round(1 - node_h_out * 3600 / (len(sim.nodes) * end), 4) if end else None,
        "peak_nodes_out": ctl.peak_out,
        "gpu_hours_lost": {
            "failures": round((sim.failed_work_gpu_s + sim.restarts_gpu_s) / 3600, 1),
            "remedies": round(ctl.out_by["remedies"] / 3600, 1),
            "false_drains": round(ctl.out_by["false_drains"] / 3600, 1)},
        "node_hours_out": round(node_h_out, 1),
        "fault_to_drain_min": {"p50": _round(percentile(latency_min, 0.5)), "p90": _round(percentile(latency_min, 0.9)),
                               "gpu_faults_found": len(latency_min)},
        "resolved": {k: round(v / resolved, 3) if resolved else 0.0 for k, v in ctl.resolved.items()},
        "faults": sum(f.hit for f in faults),
        "jobs_failed": sim.jobs_failed, "black_hole_crashes": sim.black_hole_crashes, "jobs_lost": sim.lost_jobs,
        "false_drains": ctl.false_drains, "rack_escalations": ctl.rack_escalations,
        "breaker_trips": ctl.breaker_trips,
        # the figures `fleet report` gives of a real fleet, from the carrier's own history (reliability.py)
        "reliability": _reliability(ctl.lab, sim, end),
        "_series": {"capacity": capacity, "ettr": ettr_by_day},
        "_moves": list(ctl.ladder_log),   # the carrier's moves (node, class, from, to), in order
        # the ladder's rungs as the nodes' history recorded them, in order (node, rung)
        "_rungs": [(r["node"], r["rung"]) for r in ctl.lab.history._query(
            "select node, rung from remedies order by id", [])] if ctl.lab is not None else [],
    }


class _Work:
    """The jobs' work by the end of a run: what each kept, and the ETTR of a set of jobs."""

    def __init__(self, sim, end: float):
        self.sim, self.end = sim, end

    def unfinished(self, job) -> bool:
        """Held after MaxBatchRequeue: its user still waits for the rest of its work."""
        return job.id in self.sim.done_at and job.start is None and job.saved < job.run

    def kept(self, job) -> float:
        """The job's work done by the end (seconds of its run, kept or still running)."""
        if self.unfinished(job):
            return job.saved
        if job.id in self.sim.done_at:
            return job.run
        return min(job.run, job.saved + (max(0.0, self.end - job.start - self.sim._restart(job)) if job.start is not None
                                         else 0.0))

    def ettr(self, ids) -> float | None:
        """Work done over the time from submit to the end (or the job's end): the queue wait, and the wait
        after each failure for nodes to run again on, count.  Every job counts, finished or not: one held
        unfinished after MaxBatchRequeue is counted as one still waiting at the end is (nobody releases it
        in the simulation), its kept work over its time from submit to the end."""
        work = elapsed = 0.0
        for jid in ids:
            job = self.sim.by_id[jid]
            stop = self.end if self.unfinished(job) else self.sim.done_at.get(jid, self.end)
            if stop <= job.submit:
                continue
            g = job.gpn * job.nodes
            work += self.kept(job) * g
            elapsed += (stop - job.submit) * g
        return round(work / elapsed, 4) if elapsed else None


def _ettr_by_day(sim, w: _Work, started: list[str], end: float) -> list[tuple[float, float]]:
    """For --plot: the ETTR of the jobs ended by each day, added as they end (one held unfinished has not
    ended: it waits to the end, as ettr() counts it)."""
    ettr_by_day = []
    ended = sorted((sim.done_at[j], j) for j in started if j in sim.done_at and not w.unfinished(sim.by_id[j]))
    work = elapsed = 0.0
    k = 0
    for day in range(1, int(end // 86400) + 1):   # the jobs ended by each day, added as they end
        while k < len(ended) and ended[k][0] <= day * 86400:
            job = sim.by_id[ended[k][1]]
            if ended[k][0] > job.submit:
                work += w.kept(job) * job.gpn * job.nodes
                elapsed += (ended[k][0] - job.submit) * job.gpn * job.nodes
            k += 1
        if elapsed:
            ettr_by_day.append((day * 24.0, round(work / elapsed, 4)))
    return ettr_by_day


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


_NO_RELIABILITY = dict.fromkeys(("incidents_per_node_day", "mtbi_hours", "ttr_automatic_p50_h", "ttr_automatic_p90_h",
                                 "ttr_manual_p50_h", "ttr_manual_p90_h", "false_hold_share"))


def _reliability(lab, sim, end: float) -> dict[str, Any]:
    """A strategy that runs the product's carrier: its history's reliability figures; the others keep no
    history of their own (every figure None)."""
    if lab is None:
        return dict(_NO_RELIABILITY)
    from ..records.reliability import of_history

    return of_history(lab.history, [n.name for n in sim.nodes], 0.0, end)
