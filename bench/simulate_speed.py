#!/usr/bin/env python3
"""`maintain simulate` before and after event-driven replays, on the same inputs: stepping the engine on
every job end (as before) against skipping the steps nothing can have changed, one process against
`--jobs` processes.  The JSON figures of both must be equal (printed: equal / DIFFERENT); the times
and the engine's step counts are printed side by side.  Prints; asserts nothing.

    python bench/simulate_speed.py [--case default failures week] [--jobs N] [--tile K]

Cases (the issue's): the default 150-node replay; 300 nodes with failures and 25 gate seeds; 12,500
nodes for one simulated week (`maintain simulate --hours 168`: every replay stops a week after the
rollout's start).  The week is run event-driven only: stepping on every job end there would take one
engine step (about half a second at 12,500 nodes) per job end, so the bench prints how many job ends
the old way would step on and that count times the measured cost of a step, marked as an estimate.
`--tile K` replays K copies of the history side by side (job ids suffixed), so that 12,500 nodes carry
about the load the history put on the fleet it came from (150 nodes: K = 83); without it the history's
jobs fill a small part of the fleet.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from slurm_gpufleet.common.datafiles import HELIOS_SACCT as TRACE  # noqa: E402
from slurm_gpufleet.common.datafiles import open_text  # noqa: E402
from slurm_gpufleet.maintain.pool import default_jobs  # noqa: E402
from slurm_gpufleet.maintain.sacct import read_sacct  # noqa: E402
from slurm_gpufleet.policy import default_policy  # noqa: E402
from slurm_gpufleet.simulators import rollout as sim_module  # noqa: E402
from slurm_gpufleet.simulators.failures import DELTA_SOFT_RATE, Rates  # noqa: E402
from slurm_gpufleet.simulators.trials import gate_trials  # noqa: E402

CASES = {
    "default": {"nodes": 150, "rollout_at_h": 240.0, "budget": "10%", "rates": None, "seeds": 0},
    "failures": {"nodes": 300, "rollout_at_h": 260.0, "budget": "10%", "upgrade_minutes": 20,
                 "rates": Rates(6.5, DELTA_SOFT_RATE, 3.0), "seeds": 25},
    "week": {"nodes": 12_500, "rollout_at_h": 240.0, "budget": "10%", "rates": None, "seeds": 0, "hours": 168.0,
             "strategies": ("gpufleet",), "event_driven_only": True},
}


def tiled(trace, copies: int):
    """`copies` copies of the history's jobs, each copy's ids suffixed: the same load `copies` times over."""
    if copies <= 1:
        return trace
    jobs = [replace(j, job_id=f"{j.job_id}.{k}") for k in range(copies) for j in trace.jobs]
    return replace(trace, jobs=sorted(jobs, key=lambda j: j.submit))


def run(trace, case: dict, event_driven: bool, jobs: int) -> tuple[dict, float, int]:
    """(the figures, wall seconds, engine steps)"""
    steps = {"n": 0}
    original = sim_module.GpufleetController.step

    def counted(self, sim):
        steps["n"] += 1
        return original(self, sim)

    sim_module.GpufleetController.event_driven = event_driven
    sim_module.GpufleetController.step = counted
    policy = default_policy()
    policy = replace(policy, maintain=replace(policy.maintain, upgrade_minutes=case.get("upgrade_minutes", 20)))
    t = time.perf_counter()
    try:
        result = sim_module.simulate(trace, nodes=case["nodes"], gpus_per_node=8,
                                     strategies=case.get("strategies", ("gpufleet",)),
                                     rollout_at_h=case["rollout_at_h"], max_unavailable=case["budget"],
                                     policy=policy, assumption="runtime-ceil-hour", rates=case["rates"],
                                     jobs=jobs, hours=case.get("hours"))
        running, sim_policy = result.pop("_running"), result.pop("_policy")
        result.pop("_results")
        if case["seeds"]:
            gate = gate_trials(running, case["nodes"], 8, sim_policy, case["rates"], case["seeds"],
                               case["rollout_at_h"] * 3600, jobs=jobs)
            gate.pop("cpu_s_per_seed")  # a measure of the run, not a figure of the rollout
            result["gate"] = gate
    finally:
        sim_module.GpufleetController.step = original
        sim_module.GpufleetController.event_driven = True
    return result, time.perf_counter() - t, steps["n"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", nargs="+", choices=sorted(CASES), default=["default", "failures"])
    ap.add_argument("--jobs", type=int, default=default_jobs())
    ap.add_argument("--tile", type=int, default=1, metavar="K", help="the week case: K copies of the history")
    args = ap.parse_args()
    with open_text(TRACE) as fh:
        trace = read_sacct(fh)
    print(f"{'case':>9} | {'every job end':>14} {'steps':>6} | {'event-driven':>12} {'steps':>6} "
          f"{'x' + str(args.jobs) + ' jobs':>9} | {'speed-up':>8} | figures")
    for name in args.case:
        case = CASES[name]
        if case.get("event_driven_only"):
            week_trace = tiled(trace, args.tile)
            new, new_s, new_steps = run(week_trace, case, event_driven=True, jobs=1)
            g = new["strategies"]["gpufleet"]
            cut = (case["rollout_at_h"] + case["hours"]) * 3600
            ends = sum(1 for j in week_trace.jobs
                       if case["rollout_at_h"] * 3600 <= j.submit + j.run_s <= cut)  # at least: waits move ends later
            per_step = new_s / max(1, new_steps)
            print(f"{name:>9} | {'not run':>14} {'~' + str(ends):>6} | {new_s:>10.1f} s {new_steps:>6} {'':>9} | "
                  f"{'':>8} | {case['nodes']} nodes x {len(week_trace.jobs)} jobs ({args.tile} cop"
                  f"{'y' if args.tile == 1 else 'ies'} of the history), {case['hours']:g} h: "
                  f"{g['nodes_upgraded']} upgraded, done {g['done']}; every job end: ~{ends} steps x "
                  f"{per_step:.2f} s = ~{ends * per_step / 60:.0f} min (estimate)", flush=True)
            continue
        old, old_s, old_steps = run(trace, case, event_driven=False, jobs=1)
        new, new_s, new_steps = run(trace, case, event_driven=True, jobs=1)
        _, par_s, _ = run(trace, case, event_driven=True, jobs=args.jobs) if case["seeds"] else (None, new_s, 0)
        same = json.dumps(old, sort_keys=True) == json.dumps(new, sort_keys=True)
        print(f"{name:>9} | {old_s:>12.1f} s {old_steps:>6} | {new_s:>10.1f} s {new_steps:>6} {par_s:>7.1f} s | "
              f"{old_s / min(new_s, par_s):>7.1f}x | {'equal' if same else 'DIFFERENT'}", flush=True)


if __name__ == "__main__":
    main()
