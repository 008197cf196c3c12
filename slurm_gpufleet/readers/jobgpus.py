"""A job's GPUs on a node: the one identity rule the prolog, the epilog, the processes check and the in-job
sampler share.  Slurm names a job's GPUs (SLURM_JOB_GPUS in the prolog's and epilog's environment) by
their device file, /dev/nvidiaN: the GPU's minor number, which NVML reports for each of its handles and
which is not its NVML index where the two orders differ (PCI order against enumeration order).  So a job's
GPUs are found by minor number, never taken as indices."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# NVIDIA's character devices: major 195; a GPU's minor below 254 (254 is nvidia-modeset, 255 nvidiactl)
NVIDIA_MAJOR = 195
MODESET_MINOR = 254
CTL_MINOR = 255


def slurm_id(gpu: Any) -> int:
    """The number Slurm gives this GPU (snapshot.Gpu): its minor number where known, else its index."""
    minor = getattr(gpu, "minor_number", None)
    return minor if isinstance(minor, int) and not isinstance(minor, bool) else gpu.index


def _numbers(text: str | None) -> list[int] | None:
    words = [w.strip() for w in (text or "").split(",") if w.strip()]
    return [int(w) for w in words] if words and all(w.isdecimal() for w in words) else None


def openable_gpu_minors(dev_root: str = "/dev") -> frozenset[int] | None:
    """The GPUs (minor numbers) whose device file this process may open: Slurm's ConstrainDevices denies a
    job the others in its device cgroup, on v1 (where the job's `devices.list` still reads `a *:* rwm`: the
    denials are exceptions the file does not show) and on v2 (an eBPF program, no file at all) alike, and
    either refuses the open (EPERM).  Any other answer (opened, no such device behind the file) is the
    cgroup letting it through.  None where nothing is refused (no constraint) or no GPU file is here.
    Opening a GPU's file wakes its driver where persistence mode is off: called only where Slurm named no
    GPUs."""
    import errno
    import os
    import re

    try:
        names = os.listdir(dev_root)
    except OSError:
        return None
    minors = sorted(int(m.group(1)) for m in map(re.compile(r"^nvidia(\d{1,3})$").match, names)
                    if m and int(m.group(1)) < MODESET_MINOR)
    allowed = set()
    for minor in minors:
        try:
            fd = os.open(os.path.join(dev_root, f"nvidia{minor}"), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.close(fd)
        except OSError as exc:
            if exc.errno in (errno.EPERM, errno.EACCES):
                continue
        allowed.add(minor)
    return frozenset(allowed) if minors and len(allowed) < len(minors) else None


def job_gpu_ids(environ: Mapping[str, str], dev_root: str = "/dev") -> frozenset[int] | None:
    """The job's GPUs as Slurm names them (minor numbers), from what Slurm states first: SLURM_JOB_GPUS
    ("0,1,4": the device files gres.conf names; the prolog's, epilog's and job's environment), then
    SLURM_STEP_GPUS (a step's); where neither is set, the GPU files this process may open (the job's
    device cgroup, v1 or v2) and CUDA_VISIBLE_DEVICES where it holds numbers, which inside a device cgroup
    count the GPUs the job may open (the second of them is the second it may open) and outside one are
    minor numbers.  UUIDs and MIG names are not numbers: None, every GPU of the node."""
    for name in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS"):
        stated = _numbers(environ.get(name))
        if stated is not None:
            return frozenset(stated)
    allowed = openable_gpu_minors(dev_root)
    visible = _numbers(environ.get("CUDA_VISIBLE_DEVICES"))
    if visible is not None and allowed is not None:
        ordered = sorted(allowed)
        return frozenset(ordered[i] for i in visible if i < len(ordered))
    if visible is not None:
        return frozenset(visible)
    return allowed


def handles_of(nvml: Any, ids: frozenset[int] | None) -> list[tuple[int, Any]]:
    """(NVML index, handle) of each GPU whose minor number is one of `ids` (every GPU for None).  A GPU
    whose minor number cannot be read is matched by its index, the one guess left."""
    out = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        if ids is None:
            out.append((index, handle))
            continue
        try:
            minor = nvml.nvmlDeviceGetMinorNumber(handle)
        except Exception:
            minor = index
        if minor in ids:
            out.append((index, handle))
    return out


def slurmstepd_here(job: str | None = None, proc_root: str = "/proc") -> bool | None:
    """A slurmstepd runs on this node (of `job`, where given: its command line reads `slurmstepd:
    [JOB.step]`); None where /proc cannot be read."""
    import os

    try:
        pids = [p for p in os.listdir(proc_root) if p.isdecimal()]
    except OSError:
        return None
    mark = f"[{job}.".encode() if job is not None else b""
    for pid in pids:
        try:
            with open(os.path.join(proc_root, pid, "cmdline"), "rb") as fh:
                line = fh.read(200)
        except OSError:
            continue
        if line.startswith(b"slurmstepd") and mark in line:
            return True
    return False
