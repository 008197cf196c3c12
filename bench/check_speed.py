#!/usr/bin/env python3
"""Check time per GPU for the replay readers (read + all checks), against a bare parse of the same
input run side by side.  Prints a table; asserts nothing (targets live in the README, not in tests).

    python bench/check_speed.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from slurm_gpufleet import evaluate  # noqa: E402
from slurm_gpufleet.datafiles import CAPTURES as SHARED  # noqa: E402
from slurm_gpufleet.readers import read_report  # noqa: E402
from slurm_gpufleet.readers.nvml import NvmlReader  # noqa: E402
from slurm_gpufleet.readers.nvml_replay import NvmlReplay  # noqa: E402


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    h200_xml = (SHARED / "h200-real/nvidia-smi-q.xml").read_text()
    h200_txt = (SHARED / "h200-real/nvidia-smi-q.txt").read_text()
    h100x8 = (SHARED / "public/nvidia-smi/healthy_h100x8_2.txt").read_text()
    k80x4 = (SHARED / "public/nvidia-smi/ecc_dbe_aggregate_retired_k80x4_1.xml").read_text()
    snap_json = read_report(h200_xml).to_json()
    probe = json.loads((SHARED / "h200-real/nvml_probe.json").read_text())

    cases = [
        ("nvidia-smi -q -x, H200", 1, lambda: evaluate(read_report(h200_xml)), lambda: ET.fromstring(h200_xml)),
        ("nvidia-smi -q -x, K80 x4", 4, lambda: evaluate(read_report(k80x4)), lambda: ET.fromstring(k80x4)),
        ("nvidia-smi -q, H200", 1, lambda: evaluate(read_report(h200_txt)),
         lambda: [ln.split(":", 1) for ln in h200_txt.splitlines()]),
        ("nvidia-smi -q, H100 x8", 8, lambda: evaluate(read_report(h100x8)),
         lambda: [ln.split(":", 1) for ln in h100x8.splitlines()]),
        ("snapshot JSON, H200", 1, lambda: evaluate(read_report(snap_json)), lambda: json.loads(snap_json)),
        ("NVML replay (full), H200", 1, lambda: evaluate(NvmlReader(nvml=NvmlReplay(probe), level="full").read()),
         lambda: NvmlReplay(probe).nvmlDeviceGetName(0)),
    ]
    print(f"{'input':<28} {'GPUs':>4} {'check ms':>9} {'ms/GPU':>8} {'bare parse ms':>14} {'ratio':>6}")
    for name, gpus, fn, baseline in cases:
        fn()  # warm caches (data files, regexes)
        ours = median_ms(fn, args.repeat)
        base = median_ms(baseline, args.repeat)
        print(f"{name:<28} {gpus:>4} {ours:>9.2f} {ours / gpus:>8.2f} {base:>14.2f} {ours / base:>6.1f}x")
    print(f"(median of {args.repeat} runs; 'bare parse' is ElementTree / line split / json.loads of the same input;"
          " NVML replay's baseline is one replayed call)")


if __name__ == "__main__":
    main()
