"""Helpers for the tests: where the vendored real captures are, how to run the CLI."""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

from slurm_gpufleet.datafiles import H200_REAL as H200
from slurm_gpufleet.datafiles import PUBLIC

REPO = Path(__file__).resolve().parent.parent

if not (H200 / "nvidia-smi-q.xml").is_file():  # fail loudly: these tests are the proof that real captures parse
    raise RuntimeError(f"real GPU captures not found at {H200}; the vendored data folder is incomplete")


def public_index() -> list[dict[str, str]]:
    with open(PUBLIC / "nvidia-smi" / "INDEX.tsv", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))


def kernel_log_lines() -> list[dict[str, str]]:
    with open(PUBLIC / "kernel_log_lines.tsv", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60, stdin: bytes | None = None,
            cwd: str | Path = REPO):
    import subprocess

    full_env = {**os.environ, **(env or {})}
    full_env.pop("SLURM_GPUFLEET_CONFIG", None) if env is None or "SLURM_GPUFLEET_CONFIG" not in env else None
    return subprocess.run([sys.executable, "-m", "slurm_gpufleet.cli", *args], capture_output=True,
                          timeout=timeout, env=full_env, input=stdin, cwd=cwd)
