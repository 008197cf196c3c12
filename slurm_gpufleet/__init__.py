"""slurm-gpufleet: GPU health checks for Slurm nodes and staged driver upgrades.

Library first: `from slurm_gpufleet import read_report_file, evaluate` judges a saved report; the
`slurm-gpufleet` command is a thin layer on top.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .findings import Finding, verdict  # noqa: E402
from .pipeline import Report, Source, evaluate, gather  # noqa: E402
from .policy import NodePolicy, Policy, PolicyError, load_policy  # noqa: E402
from .readers import ReportError, read_report, read_report_file  # noqa: E402
from .snapshot import UNSUPPORTED, Gpu, NodeSnapshot  # noqa: E402

__all__ = ["UNSUPPORTED", "Finding", "Gpu", "NodePolicy", "NodeSnapshot", "Policy", "PolicyError", "Report",
           "ReportError", "Source", "evaluate", "gather", "load_policy", "read_report", "read_report_file",
           "verdict"]
