#!/usr/bin/env python3
"""Deadline rollouts on the bundled Helios trace (issue #13): 100 nodes x 8 GPUs, rollout at 200 h, 10%
budget, deadlines of 24, 72 and 168 h, without checkpoints and with every job checkpointing hourly.
gpufleet (`maintain plan --deadline` carried out by the engine of `maintain apply`) beside wait-then-kill
(an upgrade controller's drain timeout), and the lower bound: the work the jobs that must end early hold
at the rollout.  Prints the README's table; asserts nothing.

    python bench/deadline_helios.py [--nodes 100] [--rollout-at 200] [--deadlines 24 72 168]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from slurm_gpufleet.common.datafiles import HELIOS_SACCT as TRACE  # noqa: E402
from slurm_gpufleet.common.datafiles import open_text  # noqa: E402
from slurm_gpufleet.maintain.sacct import read_sacct  # noqa: E402
from slurm_gpufleet.policy import load_policy  # noqa: E402
from slurm_gpufleet.simulators.rollout import simulate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--rollout-at", type=float, default=200.0)
    ap.add_argument("--budget", default="10%")
    ap.add_argument("--deadlines", type=float, nargs="+", default=[24.0, 72.0, 168.0])
    args = ap.parse_args()
    with open_text(TRACE) as fh:
        trace = read_sacct(fh)
    policy = load_policy(None)
    print(f"{args.nodes} nodes x 8 GPUs, rollout at {args.rollout_at:g} h, budget {args.budget}, "
          f"{policy.maintain.upgrade_minutes} min per node")
    print("| deadline | checkpoints | lower bound GPU-h | gpufleet GPU-h lost | jobs stopped | done by deadline "
          "| wait-then-kill GPU-h lost | jobs killed | gpufleet / wait-then-kill | stopped jobs that would have "
          "ended in time (gpufleet / wait-then-kill) | s |")
    print("|---:|---|---:|---:|---:|---|---:|---:|---:|---|---:|")
    for hours in args.deadlines:
        for every in (None, 1.0):
            t = time.perf_counter()
            out = simulate(trace, nodes=args.nodes, gpus_per_node=8, strategies=("gpufleet", "wait-then-kill"),
                           rollout_at_h=args.rollout_at, max_unavailable=args.budget, policy=policy,
                           assumption="runtime-ceil-hour", deadline_h=hours, checkpoint_every_h=every)
            g, w = out["strategies"]["gpufleet"], out["strategies"]["wait-then-kill"]
            ratio = g["work_lost_gpu_h"] / w["work_lost_gpu_h"] if w["work_lost_gpu_h"] else float("nan")
            done = f"{'yes' if g['done_by_deadline'] else 'NO'} / {'yes' if w['done_by_deadline'] else 'NO'}"
            print(f"| {hours:g} h | {'hourly' if every else 'none'} | {out['work_lost_lower_bound_gpu_h']:,.1f} | "
                  f"{g['work_lost_gpu_h']:,.1f} | {g['jobs_preempted']} | {done} | {w['work_lost_gpu_h']:,.1f} | "
                  f"{w['jobs_preempted']} | {ratio:.3f} | {g['jobs_preempted_that_would_end_in_time']} / "
                  f"{w['jobs_preempted_that_would_end_in_time']} | {time.perf_counter() - t:.1f} |")


if __name__ == "__main__":
    main()
