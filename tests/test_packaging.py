"""The package as a site installs it (issue 48): the wheel built from the tree, installed into a fresh venv,
runs `check` and `maintain simulate` on the data it ships, from a directory that is not the clone; and the
sdist builds a wheel with the same files, so a release's source archive is complete."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile

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


@pytest.mark.slow  # a venv with setuptools>=77 (PyPI, or pip's cache) and two builds
def test_the_sdist_builds_a_wheel_with_the_same_files_as_the_tree(tmp_path):
    # the build writes its egg-info beside the sources: a copy keeps the clone clean. CI's copy has no .git,
    # so the tree is the checkout less what .gitignore names
    ignored = [line.strip().rstrip("/") for line in (REPO / ".gitignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    tree = tmp_path / "tree"
    shutil.copytree(REPO, tree, ignore=shutil.ignore_patterns(".git", *ignored), symlinks=True)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "setuptools>=77"], capture_output=True,
                         text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-2000:]
    dist = tmp_path / "dist"
    sdist = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; from setuptools import build_meta; "
                            "print(build_meta.build_sdist(sys.argv[1]))", str(dist)],
                           cwd=tree, capture_output=True, text=True, timeout=600)
    assert sdist.returncode == 0, sdist.stderr[-2000:]
    archive = dist / sdist.stdout.strip().splitlines()[-1]
    with tarfile.open(archive) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for wanted in ("pyproject.toml", "README.md", "slurm_gpufleet/data/gpu_models.toml",
                   "slurm_gpufleet/data/captures/h200-real/nvidia-smi-q.xml", "slurm_gpufleet/templates"):
        assert any(n == wanted or n.startswith(wanted + "/") for n in names), wanted

    def wheel_files(source, out):
        build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                                str(source)], capture_output=True, text=True, timeout=600)
        assert build.returncode == 0, build.stderr[-2000:]
        (wheel,) = out.glob("slurm_gpufleet-*.whl")
        with zipfile.ZipFile(wheel) as zf:
            return {n for n in zf.namelist() if ".dist-info/" not in n}

    from_sdist = wheel_files(archive, tmp_path / "from-sdist")
    from_tree = wheel_files(tree, tmp_path / "from-tree")
    assert from_sdist == from_tree, sorted(from_sdist ^ from_tree)[:20]
    assert "slurm_gpufleet/data/sxid_catalog.toml" in from_sdist
