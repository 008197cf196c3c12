"""A job's GPUs from Slurm's own sources, in one function (jobgpus.job_gpu_ids): SLURM_JOB_GPUS, then
SLURM_STEP_GPUS, then the GPU files the job's device cgroup lets it open (v1 and v2 alike), and
CUDA_VISIBLE_DEVICES, which inside a device cgroup counts the GPUs the job may open rather than naming minor
numbers.  Every caller (the prolog, the epilog, the sampler, the
processes check) goes through it and `slurm_id`, and nothing else spells the rule."""

from __future__ import annotations

import ast
import json
import os
import stat

import pytest
from support import REPO

from slurm_gpufleet.readers.jobgpus import job_gpu_ids, openable_gpu_minors, slurm_id
from slurm_gpufleet.readers.snapshot import Gpu


def _devices(tmp_path, minors=(0, 1, 2, 3, 254, 255)):
    """A /dev with NVIDIA's character files (major 195) where root may make them, else plain files."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for m in minors:
        name = {254: "nvidia-modeset", 255: "nvidiactl"}.get(m, f"nvidia{m}")
        try:
            os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(195, m))
        except PermissionError:
            (dev / name).write_text("")
    return dev


def test_what_slurm_states_comes_first_the_job_s_then_the_step_s(tmp_path):
    dev = str(_devices(tmp_path))
    assert job_gpu_ids({"SLURM_JOB_GPUS": "4,5,6", "CUDA_VISIBLE_DEVICES": "0"}, dev) == {4, 5, 6}
    assert job_gpu_ids({"SLURM_STEP_GPUS": "2,3", "CUDA_VISIBLE_DEVICES": "0"}, dev) == {2, 3}
    assert job_gpu_ids({"SLURM_JOB_GPUS": "1", "SLURM_STEP_GPUS": "2"}, dev) == {1}


def test_no_constraint_leaves_the_numbers_as_minor_numbers_and_modeset_is_no_gpu(tmp_path):
    dev = str(_devices(tmp_path))
    assert openable_gpu_minors(dev) is None             # every GPU file opens: no device cgroup
    assert job_gpu_ids({"CUDA_VISIBLE_DEVICES": "2,3"}, dev) == {2, 3}
    assert job_gpu_ids({"CUDA_VISIBLE_DEVICES": "MIG-1f2e"}, dev) is None
    assert job_gpu_ids({}, str(tmp_path / "nodev")) is None


_PROBE = ("import json, sys; from slurm_gpufleet.readers.jobgpus import job_gpu_ids, openable_gpu_minors; "
          "d = sys.argv[1]; print(json.dumps([sorted(openable_gpu_minors(d) or []), "
          "sorted(job_gpu_ids({'CUDA_VISIBLE_DEVICES': '1'}, d) or []), sorted(job_gpu_ids({}, d) or [])]))")


def test_a_device_cgroup_that_denies_gpus_is_read_by_opening_them_on_a_real_kernel(tmp_path):
    """Slurm's ConstrainDevices on cgroup v1 writes the GPUs a job was not given to devices.deny; the job's
    devices.list still reads `a *:* rwm`, so no list tells them.  Inside the cgroup, a denied GPU's file
    cannot be opened (EPERM): that is read, here in a real v1 devices cgroup of this kernel with GPUs 1 and
    3 denied.  cgroup v2 denies with an eBPF program that the same open meets."""
    import subprocess
    import sys

    root = "/sys/fs/cgroup/devices"
    if os.geteuid() != 0 or not os.path.isfile(f"{root}/devices.deny"):
        pytest.skip("needs root and a cgroup v1 devices hierarchy at /sys/fs/cgroup/devices "
                    f"(uid {os.geteuid()}; {'present' if os.path.isdir(root) else 'absent'}): on cgroup v2 "
                    "the eBPF device program needs a cgroup of its own made by systemd or slurmstepd")
    dev = _devices(tmp_path)
    if not stat.S_ISCHR(os.stat(dev / "nvidia1").st_mode):
        pytest.skip("mknod refused here: no character device files to open")
    cg = f"{root}/gpufleet-test-{os.getpid()}"
    try:
        os.mkdir(cg)
    except OSError as exc:
        pytest.skip(f"cannot make a devices cgroup here: {exc}")
    try:
        for denied in ("c 195:1 rwm", "c 195:3 rwm"):
            with open(f"{cg}/devices.deny", "w") as fh:
                fh.write(denied)
        assert open(f"{cg}/devices.list").read().split() == ["a", "*:*", "rwm"]   # the trap the list sets
        r = subprocess.run(["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$0" -c "$1" "$2"', sys.executable,
                           _PROBE, str(dev)], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert r.returncode == 0, r.stderr
        # it may open GPUs 0 and 2; CUDA_VISIBLE_DEVICES=1 inside it is the second of those
        assert json.loads(r.stdout) == [[0, 2], [2], [0, 2]]
    finally:
        os.rmdir(cg)


def test_slurm_s_number_for_a_gpu_is_its_minor_where_known():
    assert slurm_id(Gpu(index=0, minor_number=7)) == 7
    assert slurm_id(Gpu(index=2)) == 2
    assert slurm_id(Gpu(index=3, minor_number=True)) == 3


def test_nothing_else_spells_the_minor_number_rule():
    spelled = []
    for path in (REPO / "slurm_gpufleet").rglob("*.py"):
        if path.name == "jobgpus.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.IfExp) and "minor_number" in ast.dump(node.test):
                spelled.append(f"{path.relative_to(REPO)}:{node.lineno}")
            if isinstance(node, ast.Constant) and node.value in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES") \
                    and path.name not in ("jobgpus.py",):
                spelled.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value}")
    assert spelled == [], spelled
