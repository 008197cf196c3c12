#!/usr/bin/env python3
"""What the fabric domain costs a health check, on the recorded 4-GPU GB200 tray and 8-GPU GB300 board
sessions (slurm_gpufleet/data/captures/gb-sessions): the whole read + every check, beside the same without
the fabric domain, the fabric check alone, and the reader's fabric calls alone.  Prints a table (median
of --repeat runs, ms); asserts nothing (the target, at most 5 ms added, is read off the table).

    python bench/fabric_cost.py [--repeat N]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from slurm_gpufleet import evaluate  # noqa: E402
from slurm_gpufleet.common.datafiles import GB_SESSIONS  # noqa: E402
from slurm_gpufleet.judging.checks import CHECKS  # noqa: E402
from slurm_gpufleet.readers.nvml import NvmlReader  # noqa: E402
from slurm_gpufleet.readers.nvml_replay import NvmlReplay  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_speed import median_ms  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    faults = tomllib.loads((GB_SESSIONS / "fabric_faults.toml").read_text())
    others = [name for name in CHECKS if name != "fabric"]
    print(f"{'session':<28} {'GPUs':>4} {'read+all':>9} {'read+no fabric':>15} {'added':>7} "
          f"{'fabric check':>13} {'fabric reads':>13}")
    for kind in ("gb200-tray", "gb300-board"):
        healthy = json.loads((GB_SESSIONS / f"{kind}.json").read_text())
        faulty = copy.deepcopy(healthy)
        faulty["devices"][1]["fabric"]["value"].update(faults["route_unhealthy"]["fabric"])
        for label, probe in ((f"{kind} healthy", healthy), (f"{kind} route unhealthy", faulty)):
            gpus = len(probe["devices"])
            snap = NvmlReader(nvml=NvmlReplay(probe)).read()
            whole = median_ms(lambda p=probe: evaluate(NvmlReader(nvml=NvmlReplay(p)).read()), args.repeat)
            without = median_ms(lambda p=probe: evaluate(NvmlReader(nvml=NvmlReplay(p)).read(), only=others),
                                args.repeat)
            check = median_ms(lambda s=snap: evaluate(s, only=["fabric"]), args.repeat)
            reader = NvmlReader(nvml=NvmlReplay(probe))
            reads = median_ms(lambda r=reader, n=gpus: [r._fabric(r._nvml, h) for h in range(n)], args.repeat)
            print(f"{label:<28} {gpus:>4} {whole:>9.2f} {without:>15.2f} {whole - without:>7.2f} "
                  f"{check:>13.3f} {reads:>13.3f}")
    print("(ms, median; 'added' = read+all minus read+no fabric: the fabric check's cost, the reads of the "
          "fabric struct are in both columns and listed apart)")


if __name__ == "__main__":
    main()
