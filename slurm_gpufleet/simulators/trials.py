"""How far a bad driver gets: `maintain simulate --seeds N` runs the engine (the real one, against the
simulated Slurm, as `simulate` does) on many random draws of node failures and soft events, with and
without the evidence gate, and reports how often it halted and how much of the fleet was upgraded then.

The fleet is the Helios load as it stands when the rollout starts: the jobs running then, each ending at
its time limit; no new jobs arrive (a trial costs seconds, not the full replay's minutes).  Failures and
soft events are drawn each step as failures.py says (a failed node's jobs end there, not requeued: no
new work arrives in a trial).
"""

from __future__ import annotations

import functools
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..maintain import states as S
from ..maintain.planner import make_plan
from ..policy import Policy
from .failures import Hazards, Rates, hazard_step, publish_summaries
from .simslurm import SimExecutor

OLD, NEW = "570.172.08", "580.159.04"


def trial(running: list[Any], nodes: int, gpus_per_node: int, policy: Policy, rates: Rates, seed: int,
          now: float, step_s: float = 3600.0, max_h: float = 2000.0) -> dict[str, Any]:
    """One rollout of every node under random failures.  `running`: SimJobs running at `now`."""
    cpu0 = time.process_time()
    from ..maintain.reconcile import Engine
    from ..maintain.store import Store
    from .rollout import SimFleet

    fleet = SimFleet(nodes, gpus_per_node, now=now)
    sim = fleet.sim
    for job in running:
        fleet.add_job(job.id, list(job.placed), job.gpn, job.start + job.limit, start=job.start)
    publish_summaries(sim.nodes, OLD)
    hazards = Hazards(rates, seed, step_s, requeue=False)
    with tempfile.TemporaryDirectory(prefix="gpufleet-trial-") as tmp:
        template = f"{tmp}/upgrade.j2"
        with open(template, "w") as fh:
            fh.write(SimExecutor.TEMPLATE)
        pol = replace(policy, maintain=replace(policy.maintain, upgrade_template=template, poll_s=step_s))
        plan = make_plan(fleet.fleet_state(OLD), NEW, [n.name for n in sim.nodes], pol, now=now, force=True)
        store = Store(f"{tmp}/maintain.db")
        store.create_rollout(plan.to_dict(), at=now)
        executor = SimExecutor(sim, 60.0 * pol.maintain.upgrade_minutes)
        engine = Engine(store, fleet.slurm, pol, executor, clock=lambda: sim.now)
        start, state, upgraded_at_halt = now, "", None
        while sim.now - start < max_h * 3600:
            state = engine.step(plan.id)
            if state == S.R_HALTED and upgraded_at_halt is None:
                upgraded_at_halt = sum(1 for n in sim.nodes if n.upgraded) / nodes
            if state in S.ROLLOUT_FINAL or (state == S.R_HALTED and engine.in_flight(plan.id) == 0):
                break
            hazard_step(sim, hazards, step_s)
            fleet.advance(sim.now + step_s, executor)
        waiting = store.rollout(plan.id).get("waiting")
        store.close()
    outcome = ("finished" if state == S.R_DONE else "halted" if state == S.R_HALTED
               else "waiting" if waiting else "unfinished")
    return {"state": str(state), "halted": state == S.R_HALTED, "outcome": outcome,
            "upgraded_at_halt": upgraded_at_halt, "makespan_h": (sim.now - start) / 3600,
            "cpu_s": time.process_time() - cpu0}


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile (the value at rank floor(q * n) of the sorted values); None for none.
    The one rule of the simulators' figures (maintain simulate's trials, simulate-faults' latencies)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def gate_trials(running: list[Any], nodes: int, gpus_per_node: int, policy: Policy, rates: Rates, seeds: int,
                now: float, step_s: float = 7200.0, ungated_seeds: int = 10, jobs: int = 1,
                progress: Callable[[int, int, str], None] | None = None,
                runner: Callable[..., list[Any]] | None = None) -> dict[str, Any]:
    """`seeds` trials with the policy's gate, and the first `ungated_seeds` of the same draws without it
    (the ungated makespan varies little from draw to draw: it is the load's); in `jobs` processes, or
    through `runner(calls, progress, what)` (a Slurm job array: pool.in_slurm_array)."""
    from ..maintain.pool import in_pool

    gated = policy if policy.maintain.gate == "evidence" else replace(policy, maintain=replace(policy.maintain, gate="evidence"))
    ungated = replace(policy, maintain=replace(policy.maintain, gate="validated"))
    calls = [functools.partial(trial, running, nodes, gpus_per_node, pol, rates, s, now, step_s)
             for pol, count in ((gated, seeds), (ungated, min(seeds, ungated_seeds))) for s in range(count)]
    runs = runner(calls, progress, "gate trials") if runner else in_pool(calls, jobs, progress, "gate trials")
    gated_runs, plain_runs = runs[:seeds], runs[seeds:]
    cpu = sum(r["cpu_s"] for r in gated_runs)
    halted = [r for r in gated_runs if r["halted"]]
    fractions = [r["upgraded_at_halt"] for r in halted if r["upgraded_at_halt"] is not None]
    done_g = [r["makespan_h"] for r in gated_runs if r["state"] == S.R_DONE]
    done_p = [r["makespan_h"] for r in plain_runs if r["state"] == S.R_DONE]
    # over all the gated runs: one that did not finish counts the hours it ran (at least that long)
    all_g = [r["makespan_h"] for r in gated_runs]
    ungated_p50 = percentile(done_p, 0.5)

    def share(outcome: str) -> float:
        return round(sum(1 for r in gated_runs if r.get("outcome") == outcome) / seeds, 4)

    def vs_ungated(values: list[float]) -> float | None:
        p50 = percentile(values, 0.5)
        return None if p50 is None or not ungated_p50 else round(p50 / ungated_p50, 3)

    return {"seeds": seeds, "halted": len(halted) / seeds,
            "outcomes": {k: share(k) for k in ("finished", "halted", "waiting", "unfinished")},
            "upgraded_at_halt": {"p50": percentile(fractions, 0.5), "p90": percentile(fractions, 0.9),
                                 "max": max(fractions, default=None),
                                 "shares": sorted(round(f, 4) for f in fractions)},
            "makespan_p50_vs_ungated": {"finished": vs_ungated(done_g), "all": vs_ungated(all_g)},
            "makespan_vs_ungated": None if not (done_g and done_p) else round(
                (sum(done_g) / len(done_g)) / (sum(done_p) / len(done_p)), 3),
            "halted_ungated": sum(1 for r in plain_runs if r["halted"]) / len(plain_runs),
            "makespan_h_p50": percentile(done_g, 0.5), "ungated_makespan_h_p50": ungated_p50,
            "cpu_s_per_seed": round(cpu / seeds, 3),
            "step_h": step_s / 3600, "rates": {"failure_per_1000_node_days": rates.failure_rate,
                                               "soft_per_node_day": rates.soft_rate,
                                               "driver_effect": rates.driver_effect, "repair_h": rates.repair_h}}
