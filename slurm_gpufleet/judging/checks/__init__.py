"""Checks: pure functions from a snapshot plus policy to findings, one health domain per module.

A module in this package is a check by being here (LBNL NHC's rule): it has NAME, ORDER (where its
findings appear in a report; a module without one reports last) and `check(ctx) -> list[Finding]`.  It
reads only `ctx`, never a device, a file or the clock, so the same code judges live NVML, a saved report
or an injected fault.  Modules whose name starts with an underscore are helpers, not checks.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from ...catalogs import GpuModel
from ...policy import NodePolicy
from ...readers.snapshot import NodeSnapshot
from ..findings import Finding


@dataclass
class Context:
    """What a check reads besides the snapshot: the node's policy, models and the day."""

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

def _discover() -> dict[str, CheckFn]:
    # the package's own .py files, listed (pkgutil costs each health check its import: importlib.util and
    # importlib's abstract classes)
    names = sorted({f[:-3] for d in __path__ for f in os.listdir(d) if f.endswith(".py") and not f.startswith("_")})
    modules = [importlib.import_module(f"{__name__}.{name}") for name in names]
    found = sorted((m for m in modules if hasattr(m, "NAME") and hasattr(m, "check")),
                   key=lambda m: (getattr(m, "ORDER", 10_000), m.NAME))
    return {m.NAME: m.check for m in found}


# the order findings are reported in: what the node is, then what is wrong with it
CHECKS: dict[str, CheckFn] = _discover()


def run_checks(ctx: Context, only: list[str] | None = None) -> list[Finding]:
    findings: list[Finding] = []
    for name, fn in CHECKS.items():
        if only and name not in only:
            continue
        findings.extend(fn(ctx))
    return findings
