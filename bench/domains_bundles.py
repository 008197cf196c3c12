#!/usr/bin/env python3
"""Issue #19's figures: rollouts over failure domains (NVLink racks) and bundles, on the Helios trace.

1. Whole domains (`whole_domain = true`, `max_unavailable_domains = 1`), 10% node budget, 20 min per node,
   domains of 18 and of 8 consecutive nodes, at 144 nodes and at 288: makespan against drain-all's,
   GPU-hours lost against the upgrade time itself (nodes x GPUs x 20 min), mixed-driver domains, and the
   node-level rollout (no domains) beside it.
2. One bundle (driver + kernel + vbios) against three rollouts one after the other (driver, then kernel,
   then vbios), same fleet: node-drain-hours of each.

Prints; asserts nothing.  python bench/domains_bundles.py [--nodes 144 288]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from slurm_gpufleet.common.datafiles import HELIOS_SACCT, open_text  # noqa: E402
from slurm_gpufleet.maintain.sacct import read_sacct  # noqa: E402
from slurm_gpufleet.policy import parse_policy  # noqa: E402
from slurm_gpufleet.simulators.rollout import simulate  # noqa: E402

UPGRADE_MIN = 20


def run(trace, nodes, policy, at=240.0, strategies=("gpufleet", "drain-all"), **kw):
    return simulate(trace, nodes=nodes, gpus_per_node=8, strategies=strategies, rollout_at_h=at,
                    max_unavailable="10%", policy=policy, assumption="runtime-ceil-hour",
                    upgrade_minutes=UPGRADE_MIN, **kw)


def domains(trace, nodes_list, at=240.0):
    whole = parse_policy("[maintain]\nwhole_domain = true\nmax_unavailable_domains = 1\n")
    plain = parse_policy("")
    print(f"1. whole domains, max_unavailable_domains 1, 10% node budget, 20 min per node, Helios at +{at:g} h")
    print(f"{'nodes':>5} {'domain':>6} {'rollout':<14} {'makespan h':>10} {'x drain-all':>11} {'GPU-h lost':>10} "
          f"{'x upgrade':>9} {'peak out':>8} {'mixed max':>9} {'whole min':>9}")
    for nodes in nodes_list:
        upgrade_gpu_h = nodes * 8 * UPGRADE_MIN / 60
        for size in (18, 8):
            res = run(trace, nodes, whole, at=at, domain_size=size)["strategies"]
            node_level = run(trace, nodes, plain, at=at, domain_size=size, strategies=("gpufleet",))["strategies"]
            drain_all = res["drain-all"]["makespan_h"]
            for label, m in (("whole-domain", res["gpufleet"]), ("node-level", node_level["gpufleet"]),
                             ("drain-all", res["drain-all"])):
                print(f"{nodes:>5} {size:>6} {label:<14} {m['makespan_h']:>10.2f} {m['makespan_h'] / drain_all:>11.3f} "
                      f"{m['gpu_hours_lost']:>10.1f} {m['gpu_hours_lost'] / upgrade_gpu_h:>9.2f} "
                      f"{m['peak_nodes_out']:>8} {m['mixed_driver_domains_max']:>9} {m['domains_in_service_min']:>9}")


def bundles(trace, nodes):
    policy = parse_policy("")
    print(f"\n2. one bundle against three rollouts in turn, {nodes} nodes, 10% budget, 20 min per node")
    parts = {"driver": {"target": "580.159.04"}, "kernel": {"target": None, "kernel": "6.1.0-31-amd64"},
             "vbios": {"target": None, "firmware": {"vbios": "96.00.AF.00.01"}}}
    at, total, single = 240.0, 0.0, {}
    for name, kw in parts.items():  # each rollout starts when the one before ended
        m = run(trace, nodes, policy, at=at, strategies=("gpufleet",), **kw)["strategies"]["gpufleet"]
        single[name] = m
        total += m["node_drain_hours"]
        print(f"  {name + ' alone':<22} from +{at:>6.1f} h: node-drain-hours {m['node_drain_hours']:>8.1f}, "
              f"makespan {m['makespan_h']:.2f} h")
        at += m["makespan_h"]
    b = run(trace, nodes, policy, strategies=("gpufleet",), target="580.159.04", kernel="6.1.0-31-amd64",
            firmware={"vbios": "96.00.AF.00.01"})["strategies"]["gpufleet"]
    print(f"  {'three in turn':<22}             node-drain-hours {total:>8.1f}")
    print(f"  {'bundle, one drain':<22} from +{240.0:>6.1f} h: node-drain-hours {b['node_drain_hours']:>8.1f}, "
          f"makespan {b['makespan_h']:.2f} h; x driver-only {b['node_drain_hours'] / single['driver']['node_drain_hours']:.3f}, "
          f"x three in turn {b['node_drain_hours'] / total:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[144, 288])
    ap.add_argument("--rollout-at", type=float, default=240.0, help="hours from the first submission")
    ap.add_argument("--parts", nargs="+", choices=("domains", "bundles"), default=["domains", "bundles"])
    args = ap.parse_args()
    with open_text(str(HELIOS_SACCT)) as fh:
        trace = read_sacct(fh)
    if "domains" in args.parts:
        domains(trace, args.nodes, args.rollout_at)
    if "bundles" in args.parts:
        bundles(trace, args.nodes[0])


if __name__ == "__main__":
    main()
