"""slurm-gpufleet: GPU health checks for Slurm nodes and staged driver upgrades.

Library first: `from slurm_gpufleet import read_report_file, evaluate` judges a saved report; the
`slurm-gpufleet` command is a thin layer on top.

The names below are imported on first use (PEP 562): slurmd starts the health check every interval on
every node, and importing `slurm_gpufleet.hooks` must not load every check before the run knows it has
work to do (a run that gives way to the previous one stops after the config and its lock).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .common.version import __version__  # noqa: F401  (the package's version, as tools ask for it)

# The domains, lowest first: a module may import its own domain and those before it, never one after
# (tests/test_layout.py holds it; each folder's docstring says what it owns).
DOMAINS = ("common", "catalogs", "policy", "readers", "judging", "slurm", "remedy", "records", "slowgpus",
           "maintain", "simulators", "hooks", "cli")

_PUBLIC = {
    # check a node
    "Finding": "judging.findings", "verdict": "judging.findings",
    "Report": "judging.pipeline", "Source": "judging.pipeline", "evaluate": "judging.pipeline", "gather": "judging.pipeline",
    "NodePolicy": "policy", "Policy": "policy", "PolicyError": "policy", "load_policy": "policy",
    "ReportError": "readers.report", "read_report": "readers.report", "read_report_file": "readers.report",
    "UNSUPPORTED": "readers.snapshot", "Gpu": "readers.snapshot", "NodeSnapshot": "readers.snapshot",
    # read a fleet, plan and run a rollout
    "FleetState": "maintain.fleet", "make_plan": "maintain.planner", "Plan": "maintain.plan",
    "Engine": "maintain.reconcile", "Runner": "maintain.runner", "Store": "maintain.store",
    # simulate
    "read_sacct": "maintain.sacct", "simulate": "simulators.rollout", "SimFleet": "simulators.rollout",
    "SimExecutor": "simulators.simslurm", "fleet_faults": "simulators.faultsim",
    # act on Slurm
    "get_backend": "slurm", "Actuator": "slurm.actuator",
}
__all__ = ["UNSUPPORTED", "Actuator", "Engine", "Finding", "FleetState", "Gpu", "NodePolicy", "NodeSnapshot", "Plan",
           "Policy", "PolicyError", "Report", "ReportError", "Runner", "SimExecutor", "SimFleet", "Source", "Store",
           "evaluate", "fleet_faults", "gather", "get_backend", "load_policy", "make_plan", "read_report",
           "read_report_file", "read_sacct", "simulate", "verdict"]

if TYPE_CHECKING:
    from .judging.findings import Finding, verdict
    from .judging.pipeline import Report, Source, evaluate, gather
    from .maintain.fleet import FleetState
    from .maintain.plan import Plan
    from .maintain.planner import make_plan
    from .maintain.reconcile import Engine
    from .maintain.runner import Runner
    from .maintain.sacct import read_sacct
    from .maintain.store import Store
    from .policy import NodePolicy, Policy, PolicyError, load_policy
    from .readers.report import ReportError, read_report, read_report_file
    from .readers.snapshot import UNSUPPORTED, Gpu, NodeSnapshot
    from .simulators.faultsim import fleet_faults
    from .simulators.rollout import SimFleet, simulate
    from .simulators.simslurm import SimExecutor
    from .slurm import get_backend
    from .slurm.actuator import Actuator


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'slurm_gpufleet' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])
