#!/usr/bin/env python3
"""Why gpufleet's mean added wait can sit above reboot-asap's on some Helios loads (issue #18): the same
cases with the engine's maintenance slots on (as shipped) and off (the engine takes each node only when it
empties, no MAINT reservation ahead of it), side by side with the reboot-asap baseline.  Prints; asserts
nothing.

    python bench/wait_and_slots.py [--nodes 80] [--rollout-at 200 300]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from slurm_gpufleet.common.datafiles import HELIOS_SACCT, open_text  # noqa: E402
from slurm_gpufleet.maintain import strategy  # noqa: E402
from slurm_gpufleet.maintain.sacct import read_sacct  # noqa: E402
from slurm_gpufleet.policy import load_policy  # noqa: E402
from slurm_gpufleet.simulators.rollout import simulate  # noqa: E402


def run(trace, policy, nodes: int, at: float, slots: bool) -> dict:
    shipped = strategy.STRATEGIES["reservation"]
    strategy.STRATEGIES["reservation"] = replace(shipped, slots=slots)  # the experiment's one change
    try:
        return simulate(trace, nodes=nodes, gpus_per_node=8, strategies=("gpufleet", "reboot-asap"),
                        rollout_at_h=at, max_unavailable="10%", policy=policy, assumption="runtime-ceil-hour")
    finally:
        strategy.STRATEGIES["reservation"] = shipped


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[80])
    ap.add_argument("--rollout-at", type=float, nargs="+", default=[200.0, 300.0])
    args = ap.parse_args()
    with open_text(HELIOS_SACCT) as fh:
        trace = read_sacct(fh)
    policy = load_policy(str(REPO / "etc" / "gpufleet.toml"))
    print(f"{'nodes':>5} {'at h':>5} {'slots':>5} | {'makespan h':>10} {'GPU-h lost':>10} {'wait+ mean h':>12} "
          f"{'wait+ p95 h':>11} | {'rb-asap wait+ mean h':>20}")
    for nodes in args.nodes:
        for at in args.rollout_at:
            for slots in (True, False):
                out = run(trace, policy, nodes, at, slots)
                g, r = out["strategies"]["gpufleet"], out["strategies"]["reboot-asap"]
                print(f"{nodes:>5} {at:>5g} {'on' if slots else 'off':>5} | {g['makespan_h']:>10.1f} "
                      f"{g['gpu_hours_lost']:>10.1f} {g['wait_added_mean_h']:>12.3f} {g['wait_added_p95_h']:>11.3f} | "
                      f"{r['wait_added_mean_h']:>20.3f}")


if __name__ == "__main__":
    main()
