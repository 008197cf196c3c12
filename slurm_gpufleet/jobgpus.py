"""A job's GPUs on a node: the one identity rule the prolog, the epilog, the processes check and the in-job
sampler share.  Slurm names a job's GPUs (SLURM_JOB_GPUS in the prolog's and epilog's environment) by
their device file, /dev/nvidiaN: the GPU's minor number, which NVML reports for each of its handles and
which is not its NVML index where the two orders differ (PCI order against enumeration order).  So a job's
GPUs are found by minor number, never taken as indices."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def job_gpu_ids(environ: Mapping[str, str]) -> frozenset[int] | None:
    """The job's GPUs as Slurm names them (minor numbers): SLURM_JOB_GPUS ("0,1,4"), else
    CUDA_VISIBLE_DEVICES where it holds numbers (not UUIDs or MIG names); None: every GPU of the node."""
    for key in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        text = (environ.get(key) or "").strip()
        if not text:
            continue
        words = [w.strip() for w in text.split(",") if w.strip()]
        if words and all(w.isdecimal() for w in words):
            return frozenset(int(w) for w in words)
    return None


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
