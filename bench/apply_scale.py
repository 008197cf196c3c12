#!/usr/bin/env python3
"""The rollout engine (`maintain apply`'s, unchanged) over an in-memory fleet: Slurm calls, CPU and memory
per reconcile step.  The fleet is the simulator's Slurm (SimSlurm): N nodes x 8 GPUs and M running jobs
with limits spread over 8 h; each step advances the clock 10 minutes, ends the jobs due, completes the
upgrades due.  Prints; asserts nothing.  Target (issue #10): at 12,500 nodes and 50,000 jobs at most 5
Slurm calls per step and under 1 s CPU per step.

    python bench/apply_scale.py --nodes 12500 --jobs 50000 [--steps 60] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurm_gpufleet.maintain.planner import make_plan  # noqa: E402
from slurm_gpufleet.maintain.reconcile import Engine  # noqa: E402
from slurm_gpufleet.maintain.store import Store  # noqa: E402
from slurm_gpufleet.policy import parse_policy  # noqa: E402
from slurm_gpufleet.simulators.rollout import SimFleet  # noqa: E402
from slurm_gpufleet.simulators.simslurm import SimExecutor

POLICY = parse_policy("""
[maintain]
waves = [1, "2%", "10%", "25%", "100%"]
max_unavailable = "10%"
max_unavailable_per_partition = "100%"
upgrade_minutes = 20
""")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=12500)
    ap.add_argument("--jobs", type=int, default=50000)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = random.Random(1)
    t0 = 1_800_000_000.0
    fleet = SimFleet(args.nodes, 8, t0)
    for j in range(args.jobs):  # 2 GPUs each, up to 4 per node
        node = j % args.nodes
        if fleet.sim.nodes[node].free >= 2:
            fleet.add_job(str(j), node, 2, t0 + rng.uniform(600, 8 * 3600))
    sim = fleet.sim
    plan = make_plan(fleet.fleet_state(), "580.159.04", [n.name for n in sim.nodes], POLICY, now=t0, force=True).to_dict()
    with tempfile.TemporaryDirectory() as tmp:
        template = f"{tmp}/upgrade.j2"
        Path(template).write_text(SimExecutor.TEMPLATE)
        policy = replace(POLICY, maintain=replace(POLICY.maintain, upgrade_template=template))
        store = Store(f"{tmp}/maintain.db")
        store.create_rollout(plan, at=t0)
        slurm = fleet.slurm
        executor = SimExecutor(sim, 20 * 60)
        engine = Engine(store, slurm, policy, executor, clock=lambda: sim.now)
        per_step = []
        state = ""
        wall = time.perf_counter()
        for _ in range(args.steps):
            before = dict(slurm.calls)
            state = engine.step(plan["id"])
            stats = engine.stats[-1]
            # a rollout's slot reservations are made once, all in its first steps, never capped
            # (writes.UNCAPPED): counted apart from the capped writes of every step
            per_step.append({"reads": slurm.calls["read"] - before.get("read", 0),
                             "writes": slurm.calls["write"] - before.get("write", 0) - stats.reservations,
                             "reservations": stats.reservations, "cpu_s": stats.cpu_s, "moves": stats.moves})
            if state in ("done", "halted"):
                break
            fleet.advance(sim.now + 600, executor)
        wall = time.perf_counter() - wall
        counts = store.counts(plan["id"])
    out = {"nodes": args.nodes, "jobs": args.jobs, "steps": len(per_step),
           "slurm_reads_per_step": max(s["reads"] for s in per_step),
           "slurm_writes_per_step": max(s["writes"] for s in per_step),
           "reservations_made": sum(s["reservations"] for s in per_step),
           "reservations_steps": sum(1 for s in per_step if s["reservations"]),
           "slurm_calls_per_step_mean": round(sum(s["reads"] + s["writes"] + s["reservations"] for s in per_step)
                                              / len(per_step), 2),
           "cpu_s_per_step": round(max(s["cpu_s"] for s in per_step), 3),
           "cpu_s_worst_step": 1 + max(range(len(per_step)), key=lambda i: per_step[i]["cpu_s"]),
           "cpu_s_per_step_mean": round(sum(s["cpu_s"] for s in per_step) / len(per_step), 3),
           "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
           "moves": sum(s["moves"] for s in per_step), "state": state, "node_states": counts,
           "wall_s": round(wall, 1)}
    if args.json:
        print(json.dumps(out))
        return
    for k, v in out.items():
        print(f"{k:<26} {v}")
    print(f"target: <= 5 Slurm calls per step: {'met' if out['slurm_reads_per_step'] + out['slurm_writes_per_step'] <= 5 else 'NOT met'} "
          f"(reads {out['slurm_reads_per_step']} + writes {out['slurm_writes_per_step']} at the worst step, besides "
          f"{out['reservations_made']} slot reservations made in {out['reservations_steps']} step(s)); "
          f"< 1 s CPU per step: {'met' if out['cpu_s_per_step'] < 1 else 'NOT met'}")


if __name__ == "__main__":
    main()
