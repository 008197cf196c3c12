"""Processes: GPU processes or memory in use when the node should be idle (between jobs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...readers.jobgpus import slurm_id as slurm_number
from ..findings import Finding
from ._util import num, readable_gpus

if TYPE_CHECKING:
    from . import Context

NAME = "processes"
ORDER = 130


def check(ctx: Context) -> list[Finding]:
    if not ctx.policy.expect_idle and not ctx.idle_gpus:
        return []
    out: list[Finding] = []
    for g in readable_gpus(ctx.snapshot):
        # Slurm's GPU numbers follow gres.conf File=/dev/nvidiaN: the minor number where we know it
        slurm_id = slurm_number(g)
        if not ctx.policy.expect_idle and slurm_id not in ctx.idle_gpus:
            continue
        procs = g.processes or []
        if procs:
            pids = ", ".join(f"{p.pid}{'(' + p.name.rsplit('/', 1)[-1] + ')' if p.name else ''}" for p in procs[:5])
            out.append(Finding(NAME, "drain", "drain", g.index, f"{len(procs)} leftover GPU process(es)",
                               f"processes still on the GPU: {pids}{' ...' if len(procs) > 5 else ''}"))
            continue
        used = num(g.memory_used_mib)
        if used is not None and used > ctx.policy.idle_memory_mib:
            out.append(Finding(NAME, "warn", "watch", g.index, f"{used} MiB in use with no process",
                               f"above {ctx.policy.idle_memory_mib} MiB on an idle GPU (leaked memory or a zombie context)"))
    return out
