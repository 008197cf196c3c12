"""Checks: pure functions from a snapshot plus policy to findings, one health domain per module.

Each module has NAME and `check(ctx) -> list[Finding]`; it reads only `ctx`, never a device, a file or
the clock, so the same code judges live NVML, a saved report or an injected fault.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from ..catalog import GpuModel
from ..findings import Finding
from ..policy import NodePolicy
from ..snapshot import NodeSnapshot
from . import (
    clocks,
    compatibility,
    driver,
    firmware,
    inventory,
    kernel,
    memory,
    modes,
    nvlink,
    pcie,
    performance,
    processes,
    recovery,
    thermal,
    unknown,
    xid,
)


@dataclass
class Context:
    snapshot: NodeSnapshot
    policy: NodePolicy = field(default_factory=NodePolicy)
    models: tuple[GpuModel, ...] = ()
    # the node's previous snapshot, for counters whose growth matters (PCIe replays, NVLink errors)
    previous: NodeSnapshot | None = None
    today: dt.date = field(default_factory=dt.date.today)
    # GPUs (index or minor number) that must be idle now: a job's GPUs in the prolog and epilog
    idle_gpus: frozenset[int] | None = None
    # fleet medians per GPU model, e.g. {"NVIDIA H200": {"mem_bw_gbps": 4120.0}}, when the caller has them
    perf_baseline: dict[str, dict[str, float]] | None = None


CheckFn = Callable[[Context], list[Finding]]

# Order is the order findings are reported in: what the node is, then what is wrong with it.
CHECKS: dict[str, CheckFn] = {
    m.NAME: m.check
    for m in (inventory, driver, compatibility, firmware, kernel, memory, xid, thermal, clocks, pcie, nvlink,
              modes, processes, recovery, unknown, performance)
}


def run_checks(ctx: Context, only: list[str] | None = None) -> list[Finding]:
    findings: list[Finding] = []
    for name, fn in CHECKS.items():
        if only and name not in only:
            continue
        findings.extend(fn(ctx))
    return findings
