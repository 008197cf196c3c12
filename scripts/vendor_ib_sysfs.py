#!/usr/bin/env python3
"""Vendor real /sys/class/infiniband trees into slurm_gpufleet/data/captures/public/infiniband/ (run from the
repository root), from two public repositories' test data, both Apache-2.0:

* `h100-gpud/`: an H100 node's eight 400 Gb/s NDR InfiniBand ports (mlx5_0, 1, 4-9) and its Ethernet bond
  (mlx5_bond_0), from leptonai/gpud components/accelerator/nvidia/infiniband/class/testdata/
  sys-class-infiniband-h100.0 (a folder you extract from a snapshot of that repository: GPUD_DIR);
* `procfs/`: hfi1_0 (Omni-Path, EDR), mlx4_0 (two QDR ports) and mlx5_0 (1X EDR), from
  prometheus/procfs testdata/fixtures.ttar (TTAR).

    python scripts/vendor_ib_sysfs.py GPUD_DIR TTAR

Re-running on the same inputs gives the same files.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "slurm_gpufleet" / "data" / "captures" / "public" / "infiniband"


def from_ttar(ttar: Path, prefix: str, dest: Path) -> int:
    """The files of a ttar archive under `prefix`, written below `dest`."""
    lines = ttar.read_text().split("\n")
    written, i = 0, 0
    while i < len(lines):
        if lines[i].startswith("Path: ") and i + 1 < len(lines) and lines[i + 1].startswith("Lines: "):
            path, count = lines[i][6:], int(lines[i + 1][7:])
            body = lines[i + 2:i + 2 + count]
            i += 2 + count
            if path.startswith(prefix):
                target = dest / path[len(prefix):]
                target.parent.mkdir(parents=True, exist_ok=True)
                text = "\n".join(body)
                target.write_text(text.removesuffix("EOF") if text.endswith("EOF") else text + "\n")
                written += 1
            continue
        i += 1
    return written


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    gpud, ttar = Path(sys.argv[1]), Path(sys.argv[2])
    h100 = OUT / "h100-gpud"
    shutil.rmtree(h100, ignore_errors=True)
    shutil.copytree(gpud, h100)
    procfs = OUT / "procfs"
    shutil.rmtree(procfs, ignore_errors=True)
    n = from_ttar(ttar, "fixtures/sys/class/infiniband/", procfs)
    print(f"{sum(1 for p in h100.rglob('*') if p.is_file())} files to {h100.relative_to(ROOT)}, "
          f"{n} to {procfs.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
