#!/usr/bin/env python3
"""The full Helios trace (15,000 jobs) through `maintain simulate`: wall time, the three strategies side
by side, and whether gpufleet meets its targets against reboot-asap at the same budget (at most half the
GPU-hours lost, finished no later).  Prints; asserts nothing.

    python bench/simulate_helios.py [--nodes 150] [--budget 10%] [--rollout-at 240 120 360]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from slurm_gpufleet.datafiles import HELIOS_SACCT as TRACE  # noqa: E402
from slurm_gpufleet.datafiles import open_text  # noqa: E402
from slurm_gpufleet.maintain.sacct import read_sacct  # noqa: E402
from slurm_gpufleet.maintain.simulate import simulate  # noqa: E402
from slurm_gpufleet.policy import load_policy  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=150)
    ap.add_argument("--budget", default="10%")
    ap.add_argument("--rollout-at", type=float, nargs="+", default=[120.0, 240.0, 360.0])
    args = ap.parse_args()
    t = time.perf_counter()
    with open_text(TRACE) as fh:
        trace = read_sacct(fh)
    print(f"read {trace.lines} lines, {len(trace.jobs)} GPU jobs in {time.perf_counter() - t:.2f} s")
    policy = load_policy(str(REPO / "etc" / "gpufleet.toml"))
    budget = int(args.budget) if args.budget.isdigit() else args.budget
    for at in args.rollout_at:
        t = time.perf_counter()
        out = simulate(trace, nodes=args.nodes, gpus_per_node=8, strategies=("gpufleet", "reboot-asap", "drain-all"),
                       rollout_at_h=at, max_unavailable=budget, policy=policy, assumption="runtime-ceil-hour")
        wall = time.perf_counter() - t
        s = out["strategies"]
        print(f"\nrollout at {at:g} h, {args.nodes} nodes x 8 GPUs, budget {out['assumptions']['max_unavailable_nodes']} "
              f"nodes; simulation wall time {wall:.1f} s (baseline + 3 strategies)")
        print(f"  {'strategy':<12} {'makespan h':>10} {'GPU-h lost':>11} {'killed':>6} {'wait+ mean h':>12} "
              f"{'wait+ p95 h':>11} {'peak out':>8}")
        for name, m in s.items():
            print(f"  {name:<12} {m['makespan_h']:>10.1f} {m['gpu_hours_lost']:>11.1f} {m['jobs_killed']:>6} "
                  f"{m['wait_added_mean_h']:>12.3f} {m['wait_added_p95_h']:>11.3f} {m['peak_nodes_out']:>8}")
        g, r = s["gpufleet"], s["reboot-asap"]
        ratio = g["gpu_hours_lost"] / r["gpu_hours_lost"] if r["gpu_hours_lost"] else float("nan")
        print(f"  gpufleet/reboot-asap GPU-hours lost: {ratio:.2f} (target <= 0.5: {'met' if ratio <= 0.5 else 'NOT met'}); "
              f"makespan {g['makespan_h']:.1f} vs {r['makespan_h']:.1f} h "
              f"({'met' if g['makespan_h'] <= r['makespan_h'] else 'NOT met'})")


if __name__ == "__main__":
    main()
