#!/usr/bin/env python3
"""On a GPU node: run the performance measurement N times, print the spread of each measure, then make
the GPU slower on purpose (a competing kernel on the same GPU) and show that the check flags it while the
untouched runs pass.  Needs PyTorch or CuPy.  Prints figures; exit 0 when the slow run was flagged and
no untouched run was.

    python scripts/gpu_perf_spread.py [--gpu 0] [--runs 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurm_gpufleet import evaluate  # noqa: E402
from slurm_gpufleet.readers.nvml import NvmlReader  # noqa: E402
from slurm_gpufleet.readers.probe import available_library, measure  # noqa: E402


def competitor(gpu: int, stop: threading.Event) -> None:
    import torch

    dev = torch.device(f"cuda:{gpu}")
    a = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    while not stop.is_set():
        b.copy_(a)
    torch.cuda.synchronize(dev)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    lib = available_library()
    if lib is None:
        print("no GPU library (PyTorch, CuPy): nothing to measure")
        return 2
    snap = NvmlReader(level="quick").read()
    runs = [measure([args.gpu], lib)[0] for _ in range(args.runs)]
    for name in ("mem_bw_gbps", "gemm_tflops", "h2d_gbps"):
        vals = [getattr(r, name) for r in runs if getattr(r, name) is not None]
        if vals:
            spread = (max(vals) - min(vals)) / statistics.median(vals) * 100
            print(f"{name:<12} median {statistics.median(vals):8.1f}  min {min(vals):8.1f}  max {max(vals):8.1f}  "
                  f"spread {spread:.1f}%  ({len(vals)} runs, {runs[0].library})")
    print(f"duration per run: {statistics.median([r.duration_s for r in runs]):.2f} s")
    untouched_flagged = 0
    for r in runs:
        snap.performance = [r]
        untouched_flagged += any(f.check == "performance" and f.severity != "ok" for f in evaluate(snap).findings)
    stop = threading.Event()
    t = threading.Thread(target=competitor, args=(args.gpu, stop), daemon=True)
    t.start()
    slow = measure([args.gpu], lib)[0]
    stop.set()
    t.join()
    snap.performance = [slow]
    findings = [f for f in evaluate(snap).findings if f.check == "performance"]
    print(f"with a competing copy kernel: {slow.mem_bw_gbps} GB/s, GEMM {slow.gemm_tflops} TFLOP/s")
    for f in findings:
        print(f"  {f.line()}\n      {f.detail}")
    print(f"untouched runs flagged: {untouched_flagged} of {len(runs)}")
    return 0 if findings and findings[0].severity != "ok" and untouched_flagged == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
