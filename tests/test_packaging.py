"""The package as a site installs it (issue 48): the wheel built from the tree, installed into a fresh venv,
runs `check` and `maintain simulate` on the data it ships, from a directory that is not the clone."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support import REPO


@pytest.mark.slow  # a wheel build and a venv with the dependencies (PyPI, or pip's cache)
def test_the_wheel_installs_in_a_fresh_venv_and_runs_on_its_packaged_data(tmp_path):
    dist = tmp_path / "dist"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-2000:]
    assert "deprecat" not in build.stderr.lower(), build.stderr[-2000:]   # project.license is an SPDX string
    (wheel,) = dist.glob("slurm_gpufleet-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], capture_output=True, text=True,
                         timeout=900)
    assert pip.returncode == 0, pip.stderr[-2000:]
    exe = str(venv / "bin" / "slurm-gpufleet")
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import slurm_gpufleet, os; "
                           "print(os.path.dirname(slurm_gpufleet.__file__))"], capture_output=True, text=True,
                          cwd=tmp_path, check=True).stdout.strip()
    assert site.startswith(str(venv)), site
    capture = f"{site}/data/captures/h200-real/nvidia-smi-q.xml"
    r = subprocess.run([exe, "check", "--nvidia-smi-q", capture], capture_output=True, text=True, cwd=tmp_path,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("OK"), r.stdout + r.stderr
    r = subprocess.run([exe, "maintain", "simulate", "--nodes", "20", "--strategy", "gpufleet", "--json"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert r.returncode == 0 and '"gpufleet"' in r.stdout, r.stderr[-2000:]
