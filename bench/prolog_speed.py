#!/usr/bin/env python3
"""Wall time of the prolog's success path on an 8-GPU node (the real H200 NVML capture replayed through a
pynvml-compatible module, so the live NVML reader runs),
beside a bare `python3 -c pass` run the same way.  Live on a GPU node, pass --live to read NVML and
to time `nvidia-smi -q` side by side.  Prints figures; asserts nothing.

    python bench/prolog_speed.py [--runs 20] [--live]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "slurm"))


def timed(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        r = subprocess.run(argv, env=env, capture_output=True)
        out.append(time.perf_counter() - t)
        if r.returncode != 0:
            raise SystemExit(f"{argv[-1]} failed: {r.stdout.decode()} {r.stderr.decode()}")
    return out


def show(name: str, times: list[float], base: float) -> None:
    med = statistics.median(times)
    print(f"{name:<44} median {med * 1000:7.1f} ms  min {min(times) * 1000:7.1f}  max {max(times) * 1000:7.1f}"
          f"  ({med / base:.2f}x python -c pass)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--live", action="store_true", help="read live NVML (a GPU node) instead of the simulated file")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gpufleet-bench-"))
    try:
        cfg = tmp / "gpufleet.toml"
        lines = ["[slurm]", f'state_dir = "{tmp}/state"']
        if not args.live:
            import gpustate

            (tmp / "gpus").mkdir()
            gpustate.write_atomic(gpustate.healthy_state(8, "bench"), str(tmp / "gpus" / "bench.json"))
            lines += [f'kernel_log = "{tmp}/gpus"']
        cfg.write_text("\n".join(lines) + "\n")
        env = {"SLURMD_NODENAME": "bench", "SLURM_JOB_ID": "1", "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7",
               "SLURM_GPUFLEET_CONFIG": str(cfg)}
        if not args.live:  # the recorded-NVML pynvml answers for the node, as on the mini-cluster
            env |= {"PYTHONPATH": f"{REPO / 'tests' / 'fake_pynvml' / 'recorded'}:{REPO}",
                    "GPUFLEET_FAKE_NVML_DIR": str(tmp / "gpus")}
        base = timed([sys.executable, "-c", "pass"], env, args.runs)
        b = statistics.median(base)
        show("python -c pass", base, b)
        show(f"slurm-gpufleet-prolog, 8 GPUs ({'live NVML' if args.live else 'recorded NVML, H200 x8'})",
             timed([sys.executable, str(REPO / "prolog_epilog" / "slurm-gpufleet-prolog")], env, args.runs), b)
        if shutil.which("nvidia-smi"):
            show("nvidia-smi -q", timed(["nvidia-smi", "-q"], dict(os.environ), args.runs), b)
        else:
            print("nvidia-smi -q                                not on this machine (a real H200 node: 0.10-0.11 s, "
                  "slurm_gpufleet/data/captures/h200-real/README.md)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
