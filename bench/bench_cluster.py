"""A mini-cluster of the host's Slurm for a benchmark (tests/slurm/minicluster.sh): 2 real nodes beside
`records` node records with no slurmd, under /var/lib, on ports of the benchmark's own; stopped by pid and
removed by `stop`."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "tests" / "slurm" / "minicluster.sh"


def start(name: str, records: int, ctld_port: int, hc_interval: int) -> tuple[Path, dict[str, str]] | None:
    """(the cluster's folder, the environment its commands need), or None (said on stderr) where it did not
    start."""
    base = Path(tempfile.mkdtemp(prefix=f"gpufleet-bench-{name}-", dir="/var/lib" if os.access("/var/lib", os.W_OK)
                                 else None))
    env = {**os.environ, "MINICLUSTER_DIR": str(base / "c"), "GPUFLEET_STATE_DIR": str(base / "c" / "gpus"),
           "HC_INTERVAL": str(hc_interval), "PYTHON": sys.executable, "CTLD_PORT": str(ctld_port),
           "SLURMD_PORT_BASE": str(ctld_port + 84), "RECORD_NODES": str(records)}
    up = subprocess.run(["bash", str(SCRIPT), "up", "2"], capture_output=True, text=True, env=env, timeout=900)
    if up.returncode:
        print(f"{name}: the mini-cluster did not start: {up.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        stop(base, env)
        return None
    values = dict(line.split("=", 1) for line in up.stdout.splitlines() if "=" in line)
    env["SLURM_CONF"] = values["SLURM_CONF"]
    env["GPUFLEET_STATE_DIR"] = values["GPUFLEET_STATE_DIR"]
    return base, env


def stop(base: Path, env: dict[str, str]) -> None:
    subprocess.run(["bash", str(SCRIPT), "down"], env=env, capture_output=True, timeout=120)
    subprocess.run(["rm", "-rf", str(base)])
