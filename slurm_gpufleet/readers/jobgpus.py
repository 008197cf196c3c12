"""A job's GPUs on a node: the one identity rule the prolog, the epilog, the processes check and the in-job
sampler share.  Slurm names a job's GPUs (SLURM_JOB_GPUS in the prolog's and epilog's environment) by
their device file, /dev/nvidiaN: the GPU's minor number, which NVML reports for each of its handles and
which is not its NVML index where the two orders differ (PCI order against enumeration order).  So a job's
GPUs are found by minor number, never taken as indices."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# NVIDIA's character devices: major 195, a GPU's minor below 255 (255 is nvidiactl)
NVIDIA_MAJOR = 195
CTL_MINOR = 255


def slurm_id(gpu: Any) -> int:
    """The number Slurm gives this GPU (snapshot.Gpu): its minor number where known, else its index."""
    minor = getattr(gpu, "minor_number", None)
    return minor if isinstance(minor, int) and not isinstance(minor, bool) else gpu.index


def _numbers(text: str | None) -> list[int] | None:
    words = [w.strip() for w in (text or "").split(",") if w.strip()]
    return [int(w) for w in words] if words and all(w.isdecimal() for w in words) else None


def cgroup_gpu_minors(environ: Mapping[str, str], cgroup_root: str = "/sys/fs/cgroup",
                      proc_self: str = "/proc/self/cgroup") -> frozenset[int] | None:
    """The GPUs (minor numbers) the job's device cgroup lets it open, where Slurm's cgroup v1 device list is
    readable: the job's (`devices/slurm/uid_U/job_J/devices.list`), else this process's own.  None where no
    list constrains it (no cgroup, `a *:* rwm`, or cgroup v2, whose device rules are a BPF program)."""
    import os

    paths = []
    uid, job = environ.get("SLURM_JOB_UID"), environ.get("SLURM_JOB_ID")
    if uid and job and uid.isdecimal() and job.isdecimal():
        paths.append(os.path.join(cgroup_root, "devices", "slurm", f"uid_{uid}", f"job_{job}", "devices.list"))
    try:
        with open(proc_self, encoding="utf-8", errors="replace") as fh:
            for line in fh.read(65536).splitlines():
                parts = line.split(":", 2)
                if len(parts) == 3 and "devices" in parts[1].split(","):
                    paths.append(os.path.join(cgroup_root, "devices", parts[2].lstrip("/"), "devices.list"))
    except OSError:
        pass
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read(1 << 20)
        except OSError:
            continue
        minors = set()
        for line in text.splitlines():
            kind, _, rest = line.partition(" ")
            dev = rest.split(" ")[0]
            if kind == "a" or dev == "*:*":
                return None   # every device allowed: no constraint
            major, _, minor = dev.partition(":")
            if kind == "c" and major == str(NVIDIA_MAJOR) and minor.isdecimal() and int(minor) < CTL_MINOR:
                minors.add(int(minor))
        return frozenset(minors)
    return None


def job_gpu_ids(environ: Mapping[str, str], cgroup_root: str = "/sys/fs/cgroup",
                proc_self: str = "/proc/self/cgroup") -> frozenset[int] | None:
    """The job's GPUs as Slurm names them (minor numbers), from Slurm's own sources in order:
    SLURM_JOB_GPUS ("0,1,4": the device files gres.conf names); the job's device cgroup (v1's device
    list); CUDA_VISIBLE_DEVICES where it holds numbers, which inside a device cgroup count the GPUs the job
    may open (the second of them is the cgroup's second minor), and outside one are minor numbers.  UUIDs
    and MIG names are not numbers: None, every GPU of the node."""
    direct = _numbers(environ.get("SLURM_JOB_GPUS"))
    if direct is not None:
        return frozenset(direct)
    allowed = cgroup_gpu_minors(environ, cgroup_root, proc_self)
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
