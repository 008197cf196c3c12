#!/usr/bin/env python3
"""Issue #20's figures: how far a bad driver gets with the evidence gate, on the Helios load.

300 nodes x 8 GPUs, the load at +240 h, 10% node budget, waves 5% / 10% / 25% / 100% with no single-node
canary, gate = "evidence" (signals xid_soft, xid_hard, job_fail; min soak 6 h, max 72 h, then wait),
hard failures 6.5 per 1,000 node-days (Meta RSC-1), soft events 0.18 per node-day (NCSA Delta's Xid 31
rate), repair 4 h, steps of 2 h.  Per driver effect: the share of seeds that halted, the share of nodes
upgraded when they did (p50, p90), makespan against the ungated rollout (10 seeds), CPU per seed.
Prints; asserts nothing.

    python bench/gate_trials.py [--seeds 100] [--effects 3 1 1.5]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from slurm_gpufleet.datafiles import HELIOS_SACCT, open_text  # noqa: E402
from slurm_gpufleet.maintain.failures import DELTA_SOFT_RATE, Rates  # noqa: E402
from slurm_gpufleet.maintain.sacct import read_sacct  # noqa: E402
from slurm_gpufleet.maintain.simulate import Simulator, budget_of, sim_jobs  # noqa: E402
from slurm_gpufleet.maintain.trials import gate_trials  # noqa: E402
from slurm_gpufleet.policy import parse_policy  # noqa: E402

CONFIG = """[maintain]
canary_per_combo = 0
waves = ["5%", "10%", "25%", "100%"]
upgrade_minutes = 20
gate = "evidence"
gate_signals = ["xid_soft", "xid_hard", "job_fail"]
gate_min_soak_s = 21600
gate_max_soak_s = 259200
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--nodes", type=int, default=300)
    ap.add_argument("--effects", type=float, nargs="+", default=[3.0, 1.0, 1.5])
    args = ap.parse_args()
    with open_text(str(HELIOS_SACCT)) as fh:
        trace = read_sacct(fh)
    jobs, _ = sim_jobs(trace, 8, "runtime-ceil-hour")
    baseline = Simulator(jobs, args.nodes, 8)
    baseline.run()
    at = 240 * 3600.0
    running = [j for j in baseline.jobs if j.start is not None and j.start <= at < j.start + j.run]
    policy = parse_policy(CONFIG)
    policy = replace(policy, maintain=replace(policy.maintain, max_unavailable=budget_of("10%", args.nodes)))
    print(f"{args.nodes} nodes, {len(running)} jobs running at +240 h, {args.seeds} seeds per case, "
          f"failures 6.5/1,000 node-days, soft {DELTA_SOFT_RATE}/node-day")
    print(f"{'effect':>6} {'halted':>7} {'upgraded at halt p50':>21} {'p90':>6} {'makespan x ungated':>19} "
          f"{'gated makespan h p50':>21} {'CPU s/seed':>10} {'wall s':>7}")
    for effect in args.effects:
        t = time.monotonic()
        g = gate_trials(running, args.nodes, 8, policy, Rates(6.5, DELTA_SOFT_RATE, effect), args.seeds, at)
        u = g["upgraded_at_halt"]

        def pct(x):
            return "-" if x is None else f"{x:.1%}"

        print(f"{effect:>6g} {g['halted']:>7.0%} {pct(u['p50']):>21} {pct(u['p90']):>6} "
              f"{str(g['makespan_vs_ungated']):>19} {str(g['makespan_h_p50']):>21} {g['cpu_s_per_seed']:>10} "
              f"{time.monotonic() - t:>7.0f}")


if __name__ == "__main__":
    main()
