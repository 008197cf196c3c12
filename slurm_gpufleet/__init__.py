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

__version__ = "0.1.0"

_PUBLIC = {
    "Finding": "findings", "verdict": "findings",
    "Report": "pipeline", "Source": "pipeline", "evaluate": "pipeline", "gather": "pipeline",
    "NodePolicy": "policy", "Policy": "policy", "PolicyError": "policy", "load_policy": "policy",
    "ReportError": "readers", "read_report": "readers", "read_report_file": "readers",
    "UNSUPPORTED": "snapshot", "Gpu": "snapshot", "NodeSnapshot": "snapshot",
}
__all__ = ["UNSUPPORTED", "Finding", "Gpu", "NodePolicy", "NodeSnapshot", "Policy", "PolicyError", "Report",
           "ReportError", "Source", "evaluate", "gather", "load_policy", "read_report", "read_report_file",
           "verdict"]

if TYPE_CHECKING:
    from .findings import Finding, verdict
    from .pipeline import Report, Source, evaluate, gather
    from .policy import NodePolicy, Policy, PolicyError, load_policy
    from .readers import ReportError, read_report, read_report_file
    from .snapshot import UNSUPPORTED, Gpu, NodeSnapshot


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'slurm_gpufleet' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])
