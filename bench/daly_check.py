#!/usr/bin/env python3
"""The fault simulator's core against an analytic result (issue 32): `fleet simulate-faults --one-job`
over a grid of node MTBF M (2 h to 200 h), checkpoint interval t (10 min to 4 h) and restart R (5 to 20
min), one 8-GPU job (its MTBF is the node's), beside Daly's (2006) expected ETTR for the same inputs.
Prints the grid, both values and the error (the aim: within 0.02).  Prints; asserts nothing.

    python bench/daly_check.py [--days 400] [--seed 1] [--gpus 8]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=float, default=400.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gpus", type=int, default=8)
    args = ap.parse_args()
    print(f"{'M h':>6} {'t h':>6} {'R min':>6} | {'simulated':>9} {'Daly':>7} {'error':>7} | {'failures':>8}")
    worst, t0 = 0.0, time.perf_counter()
    for m in (2.0, 5.0, 20.0, 50.0, 200.0):
        for t in (1 / 6, 1.0, 4.0):
            for r in (5.0, 20.0):
                # the command other tools call, by its contract names
                out = subprocess.run(
                    [sys.executable, "-m", "slurm_gpufleet.cli", "fleet", "simulate-faults", "--one-job",
                     str(args.gpus), "--node-mtbf-hours", str(m), "--checkpoint-every", str(t), "--restart-minutes",
                     str(r), "--days", str(args.days), "--strategy", "none", "--seed", str(args.seed), "--json"],
                    capture_output=True, text=True, cwd=REPO, check=True).stdout
                d = json.loads(out)
                sim, daly = d["strategies"]["none"]["ettr"], d["daly_ettr"]
                worst = max(worst, abs(sim - daly))
                print(f"{m:>6g} {t:>6.3g} {r:>6g} | {sim:>9.4f} {daly:>7.4f} {sim - daly:>+7.4f} | "
                      f"{d['strategies']['none']['failures']:>8}", flush=True)
    print(f"largest error {worst:.4f} (aim: 0.02); {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
