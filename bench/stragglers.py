#!/usr/bin/env python3
"""Straggler detection quality on synthetic fleets of 1,000 GPUs built from the real H200 spread.

Each GPU's measured memory bandwidth = the H200 reference x unit-to-unit variation x run-to-run noise.
Run-to-run noise is resampled from the real H200's own repeated measurements
(slurm_gpufleet/data/captures/h200-real/perf_probe.json, copy256MBx10: 4055-4146 GB/s); unit-to-unit variation is
an assumption (normal, sd --unit-sd, default 1 %).  Slow GPUs are made 10 % or 20 % slower.
Prints recall and false-alarm rate; asserts nothing.

    python bench/stragglers.py [--fleets 200] [--unit-sd 0.01] [--slow-share 0.01]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from slurm_gpufleet.common.datafiles import H200_REAL  # noqa: E402
from slurm_gpufleet.common.stats import outliers  # noqa: E402

PROBE = H200_REAL / "perf_probe.json"
from slurm_gpufleet.policy import SlurmSettings  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fleets", type=int, default=200)
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--unit-sd", type=float, default=0.01)
    ap.add_argument("--slow-share", type=float, default=0.01)
    args = ap.parse_args()
    samples = json.loads(PROBE.read_text())["copy256MBx10"]["GBps"]
    ref = statistics.median(samples)
    run_noise = [s / ref for s in samples]  # relative run-to-run variation, real
    s = SlurmSettings()
    rng = random.Random(42)

    def fleet(slow_factor: float | None) -> tuple[list[tuple[str, str, float]], set[str]]:
        rows, slow = [], set()
        for i in range(args.gpus):
            value = ref * rng.gauss(1.0, args.unit_sd) * rng.choice(run_noise)
            key = f"n{i // 8:04d}/gpu{i % 8}"
            if slow_factor is not None and rng.random() < args.slow_share:
                value *= slow_factor
                slow.add(key)
            rows.append((key, "NVIDIA H200", value))
        return rows, slow

    print(f"{args.fleets} fleets of {args.gpus} H200 GPUs; run-to-run noise from the real H200 "
          f"(sd {statistics.pstdev(run_noise) * 100:.2f}%), unit sd {args.unit_sd * 100:.1f}% (assumed); "
          f"thresholds: robust z <= -{s.straggler_z}, >= {s.straggler_min_drop_pct}% below the median")
    flagged = total = 0
    for _ in range(args.fleets):
        rows, _ = fleet(None)
        found, _ = outliers(rows, min_peers=s.straggler_min_peers, z_threshold=s.straggler_z,
                            min_drop_pct=s.straggler_min_drop_pct)
        flagged += len(found)
        total += len(rows)
    print(f"healthy fleets: {flagged} of {total} GPUs flagged, false-alarm rate {flagged / total:.2e} per GPU, "
          f"{flagged / args.fleets:.3f} per fleet")
    for factor in (0.9, 0.8):
        hit = slow_total = false = 0
        for _ in range(args.fleets):
            rows, slow = fleet(factor)
            found, _ = outliers(rows, min_peers=s.straggler_min_peers, z_threshold=s.straggler_z,
                                min_drop_pct=s.straggler_min_drop_pct)
            keys = {o.key for o in found}
            hit += len(keys & slow)
            slow_total += len(slow)
            false += len(keys - slow)
        print(f"{int(round((1 - factor) * 100))}% slow GPUs ({args.slow_share * 100:g}% of the fleet): recall "
              f"{hit / max(slow_total, 1):.3f} ({hit}/{slow_total}), false alarms {false} in {args.fleets} fleets")


if __name__ == "__main__":
    main()
