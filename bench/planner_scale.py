#!/usr/bin/env python3
"""Planning time and peak memory for 1,000 / 5,000 / 12,500 nodes (8 GPUs each) with 4 running jobs per
node, with the growth ratio between sizes next to what n log n would give, and the same plan with a
72-hour deadline (maintain/deadline.py: which jobs stop early).  Prints; asserts nothing.
Targets (README): 12,500 nodes / 50,000 jobs under 2 s and 500 MB, growing no faster than n log n.

    python bench/planner_scale.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import math
import random
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurm_gpufleet.maintain.fleet import FleetNode, FleetState  # noqa: E402
from slurm_gpufleet.maintain.planner import make_plan  # noqa: E402
from slurm_gpufleet.policy import parse_policy  # noqa: E402
from slurm_gpufleet.slurm.base import JobInfo  # noqa: E402

POLICY = parse_policy("""
[maintain]
waves = [1, "2%", "10%", "25%", "100%"]
max_unavailable = "10%"
max_unavailable_per_partition = "10%"
less_critical_partitions = ["debug"]
critical_partitions = ["prod"]
""")


def fleet(n: int, jobs_per_node: int = 4, seed: int = 1) -> FleetState:
    rng = random.Random(seed)
    now = 1_800_000_000.0
    nodes = {}
    for i in range(n):
        name = f"gpu{i:05d}"
        part = "debug" if i % 50 == 0 else ("prod" if i % 3 == 0 else "batch")
        fw = "96.00.A5.00.1A" if i % 7 else "96.00.A5.00.01"
        model = "8xNVIDIA H200" if i % 5 else "8xNVIDIA H100 80GB HBM3"
        nodes[name] = FleetNode(name=name, partitions=[part, "all"], driver="570.172.08", gpus=model, firmware=fw,
                                verdict="ok", state="MIXED")
    jobs = [JobInfo(str(j), [f"gpu{(j // jobs_per_node) % n:05d}"], now + rng.expovariate(1 / 36000), "batch")
            for j in range(n * jobs_per_node)]
    return FleetState(nodes, jobs, [], now)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"{'nodes':>6} {'jobs':>6} {'plan s (median)':>15} {'peak MB (tracemalloc)':>22} {'waves':>5} "
          f"{'time x':>7} {'n log n x':>9} {'with --deadline 72h s':>21} {'jobs stopped':>12}")
    prev = None
    for n in (1_000, 5_000, 12_500):
        f = fleet(n)
        names = list(f.nodes)
        times = []
        for _ in range(args.repeat):
            gc.collect()
            t = time.perf_counter()
            plan = make_plan(f, "580.159.04", names, POLICY, now=f.taken_at)
            times.append(time.perf_counter() - t)
        gc.collect()
        tracemalloc.start()
        make_plan(f, "580.159.04", names, POLICY, now=f.taken_at)
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        med = statistics.median(times)
        t = time.perf_counter()
        timed = make_plan(f, "580.159.04", names, POLICY, now=f.taken_at, deadline=f.taken_at + 72 * 3600)
        with_deadline = time.perf_counter() - t
        stopped = sum(j["action"] != "wait" for j in timed.deadline["jobs"])
        ratio = f"{med / prev[1]:.2f}" if prev else "-"
        nlogn = f"{(n * math.log(n)) / (prev[0] * math.log(prev[0])):.2f}" if prev else "-"
        print(f"{n:>6} {len(f.jobs):>6} {med:>15.3f} {peak:>22.1f} {len(plan.waves):>5} {ratio:>7} {nlogn:>9} "
              f"{with_deadline:>21.3f} {stopped:>12}")
        prev = (n, med)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"process max RSS {rss:.0f} MB (fleets of all three sizes included)")


if __name__ == "__main__":
    main()
