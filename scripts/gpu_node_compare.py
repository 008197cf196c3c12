#!/usr/bin/env python3
"""On a GPU node: live NVML and `nvidia-smi -q -x` of the same node must agree field by field.

Prints every field both sources report, the differences, and the wall time of
`slurm-gpufleet check` beside `nvidia-smi -q`.  Without a GPU, `--nvml-replay PROBE --xml FILE`
runs the same comparison on a recorded NVML session and a saved report (that is what CI runs).
Exit 0 when the snapshots agree, 1 when a field differs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurm_gpufleet import evaluate  # noqa: E402
from slurm_gpufleet.readers.compare import diff_snapshots  # noqa: E402
from slurm_gpufleet.readers.nvml import NvmlReader  # noqa: E402
from slurm_gpufleet.readers.report import read_report  # noqa: E402


def wall(cmd: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=False)
        times.append(time.perf_counter() - t)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nvml-replay", metavar="PROBE.json", help="recorded NVML session instead of live NVML")
    ap.add_argument("--xml", metavar="FILE", help="saved nvidia-smi -q -x instead of running nvidia-smi")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    if args.xml:
        xml_text = Path(args.xml).read_text()
    else:
        xml_text = subprocess.run(["nvidia-smi", "-q", "-x"], capture_output=True, text=True, check=True).stdout
    smi = read_report(xml_text, source="nvidia-smi -q -x")

    nvml = None
    if args.nvml_replay:
        from slurm_gpufleet.readers.nvml_replay import NvmlReplay

        nvml = NvmlReplay.from_file(args.nvml_replay)
    t = time.perf_counter()
    live = NvmlReader(nvml=nvml, level="full").read()
    read_s = time.perf_counter() - t
    diffs, compared = diff_snapshots(live, smi)
    moving, _ = diff_snapshots(live, smi, include_moving=True)
    moving = [d for d in moving if d not in diffs]
    report = evaluate(live)

    result = {
        "gpus": len(live.gpus), "driver": live.driver_version, "fields_compared": compared,
        "differences": [{"field": k, "nvml": str(a), "nvidia_smi": str(b)} for k, a, b in diffs],
        "moving_readings_that_differ": [{"field": k, "nvml": str(a), "nvidia_smi": str(b)} for k, a, b in moving],
        "nvml_full_read_s": round(read_s, 4), "verdict": report.verdict,
        "findings": [f.line() for f in report.findings],
    }
    if not args.nvml_replay and shutil.which("nvidia-smi"):
        exe = [sys.executable, "-m", "slurm_gpufleet.cli", "check"]
        env_cmd = ["env", f"PYTHONPATH={Path(__file__).resolve().parent.parent}"]
        result["wall_s"] = {
            "nvidia-smi -q": wall(["nvidia-smi", "-q"], args.runs),
            "nvidia-smi -q -x": wall(["nvidia-smi", "-q", "-x"], args.runs),
            "slurm-gpufleet check (quick)": wall([*env_cmd, *exe], args.runs),
            "slurm-gpufleet check --level full": wall([*env_cmd, *exe, "--level", "full"], args.runs),
        }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{result['gpus']} GPU(s), driver {result['driver']}: {compared} fields compared, "
              f"{len(diffs)} differ; full NVML read {read_s * 1000:.1f} ms; verdict {report.verdict}")
        for d in result["differences"]:
            print(f"  DIFF {d['field']}: nvml={d['nvml']} nvidia-smi={d['nvidia_smi']}")
        for d in result["moving_readings_that_differ"]:
            print(f"  (moving) {d['field']}: nvml={d['nvml']} nvidia-smi={d['nvidia_smi']}")
        for name, times in result.get("wall_s", {}).items():
            print(f"  {name:<36} min {min(times):.3f} s  max {max(times):.3f} s  ({len(times)} runs)")
        for line in result["findings"]:
            print("  " + line)
    return 0 if not diffs else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
