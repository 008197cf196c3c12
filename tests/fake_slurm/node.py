"""One node for a health check run outside Slurm: the recorded H200 state behind the fake pynvml, a
recording scontrol, a config naming both.  Shared by tests/test_slurm_calls.py and bench/check_speed.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO / "tests" / "slurm"))
import gpustate  # noqa: E402

FAKE_NVML = str(REPO / "tests" / "fake_pynvml" / "recorded")
RECORDER = Path(__file__).resolve().parent / "recording_scontrol.py"


def setup(tmp: Path) -> tuple[Path, Path, dict[str, str]]:
    """(the folder of the recording scontrol and its log, the GPU state folder, the hook's environment)"""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "scontrol"
    exe.write_text(f"#!{sys.executable} -SI\n" + RECORDER.read_text())
    exe.chmod(0o755)
    gpus = tmp / "gpus"
    gpus.mkdir()
    gpustate.write_atomic(gpustate.healthy_state(8, "n9"), str(gpus / "n9.json"))
    cfg = tmp / "gpufleet.toml"
    cfg.write_text(f'[slurm]\nscontrol = "{exe}"\nstate_dir = "{tmp}/state"\nhost_root = "{tmp}/root"\n')
    (tmp / "root").mkdir()
    env = {"SLURMD_NODENAME": "n9", "PYTHONPATH": f"{FAKE_NVML}:{REPO}", "GPUFLEET_FAKE_NVML_DIR": str(gpus),
           "SLURM_GPUFLEET_CONFIG": str(cfg), "PATH": f"{bin_dir}:/usr/bin:/bin"}
    return bin_dir, gpus, env


def fault(gpus: Path, gpu: int, name: str) -> None:
    gpustate.fault(str(gpus / "n9.json"), gpu, name)


def healthcheck(bin_dir: Path, env: dict[str, str]) -> tuple[list[list[str]], float, subprocess.CompletedProcess]:
    """One health-check run: the Slurm commands it started (argv each), its wall time, the process."""
    log = bin_dir / "calls.jsonl"
    log.unlink(missing_ok=True)
    t = time.perf_counter()
    r = subprocess.run([sys.executable, str(REPO / "healthcheck" / "slurm-gpufleet-healthcheck")], env=env,
                       capture_output=True, text=True, timeout=60)
    wall = time.perf_counter() - t
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return calls, wall, r
