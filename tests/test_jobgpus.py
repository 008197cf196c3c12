"""A job's GPUs from Slurm's own sources, in one function (jobgpus.job_gpu_ids): SLURM_JOB_GPUS, the job's
device cgroup (v1's devices.list), then CUDA_VISIBLE_DEVICES, which inside a device cgroup counts the GPUs
the job may open rather than naming minor numbers.  Every caller (the prolog, the epilog, the sampler, the
processes check) goes through it and `slurm_id`, and nothing else spells the rule."""

from __future__ import annotations

import ast

from support import REPO

from slurm_gpufleet.readers.jobgpus import cgroup_gpu_minors, job_gpu_ids, slurm_id
from slurm_gpufleet.readers.snapshot import Gpu


def _cgroup(tmp_path, lines: list[str], uid="1000", job="77"):
    d = tmp_path / "cg" / "devices" / "slurm" / f"uid_{uid}" / f"job_{job}"
    d.mkdir(parents=True)
    (d / "devices.list").write_text("\n".join(lines) + "\n")
    return str(tmp_path / "cg"), {"SLURM_JOB_UID": uid, "SLURM_JOB_ID": job}


def test_cuda_visible_devices_inside_a_device_cgroup_counts_the_gpus_the_job_may_open(tmp_path):
    root, env = _cgroup(tmp_path, ["c 195:255 rw", "c 195:4 rw", "c 195:6 rw", "c 195:5 rw", "c 1:3 rwm",
                                   "c 508:0 rw"])
    none = str(tmp_path / "no-proc")
    assert cgroup_gpu_minors(env, root, none) == {4, 5, 6}          # nvidiactl (255) and others are not GPUs
    # CUDA_VISIBLE_DEVICES=0,2 in that job: its first and third GPUs, /dev/nvidia4 and /dev/nvidia6
    assert job_gpu_ids({**env, "CUDA_VISIBLE_DEVICES": "0,2"}, root, none) == {4, 6}
    assert job_gpu_ids(env, root, none) == {4, 5, 6}                 # the cgroup alone
    assert job_gpu_ids({**env, "SLURM_JOB_GPUS": "4,5,6", "CUDA_VISIBLE_DEVICES": "0"}, root, none) == {4, 5, 6}
    assert job_gpu_ids({**env, "CUDA_VISIBLE_DEVICES": "7"}, root, none) == set()   # no such GPU of the job's


def test_the_processs_own_device_cgroup_serves_where_the_job_is_not_named(tmp_path):
    d = tmp_path / "cg" / "devices" / "slurm" / "uid_0" / "job_9" / "step_batch"
    d.mkdir(parents=True)
    (d / "devices.list").write_text("c 195:2 rwm\nc 195:3 rwm\n")
    proc = tmp_path / "cgroup"
    proc.write_text("12:memory:/slurm/uid_0/job_9\n4:devices:/slurm/uid_0/job_9/step_batch\n")
    assert job_gpu_ids({"CUDA_VISIBLE_DEVICES": "1"}, str(tmp_path / "cg"), str(proc)) == {3}


def test_no_constraint_leaves_the_numbers_as_minor_numbers(tmp_path):
    root, env = _cgroup(tmp_path, ["a *:* rwm"])
    none = str(tmp_path / "no-proc")
    assert cgroup_gpu_minors(env, root, none) is None
    assert job_gpu_ids({**env, "CUDA_VISIBLE_DEVICES": "2,3"}, root, none) == {2, 3}
    assert job_gpu_ids({"CUDA_VISIBLE_DEVICES": "2,3"}, str(tmp_path / "v2"), none) == {2, 3}   # cgroup v2
    assert job_gpu_ids({"CUDA_VISIBLE_DEVICES": "MIG-1f2e"}, root, none) is None


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
