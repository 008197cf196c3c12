"""What a check says: findings, their severities, and the node's verdict."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Severity(StrEnum):
    """A finding's severity and a node's verdict (its worst finding), in order.  "ok" findings are notes
    that change nothing.  The values are what reports, JSON and the published summary carry."""

    OK = "ok"
    WARN = "warn"
    REBOOT = "reboot"
    DRAIN = "drain"


SEVERITIES = tuple(s.value for s in Severity)
RANK = {name: i for i, name in enumerate(SEVERITIES)}

# What an admin (or the Slurm layer) should do; several actions share a severity.
ACTIONS = {
    "none": "nothing to do",
    "ignore": "informational; nothing to do",
    "watch": "keep an eye on it",
    "fabric_manager": "check or restart nvidia-fabricmanager",
    "follow_recovery_action": "follow the GPU recovery action NVML reports",
    "restart_app": "the job should be restarted; the node is fine",
    "fix_config": "configuration differs from the node group's policy",
    "reset_gpu": "reset the GPU: reboot the node between jobs",
    "reboot_node": "reboot the node",
    "reload_driver": "reload the driver: reboot the node",
    "drain": "take the node out of service until an admin looks at it",
    "cool_off": "hold the node a while, then return it (heat, a transient); repair if it keeps coming back",
    "inspect_hardware": "hardware inspection / RMA candidate",
    "wait": "Slurm shows the node coming back: judged on a later run, never returned before",
}


@dataclass
class Finding:
    """What one check found on a node, its severity and the action it asks for."""

    check: str
    severity: str
    action: str
    gpu: int | None
    message: str
    detail: str = ""
    xid: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.severity not in RANK:
            raise ValueError(f"unknown severity {self.severity!r}")
        if self.action not in ACTIONS:
            raise ValueError(f"unknown action {self.action!r}")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.xid is None:
            data.pop("xid")
        if not self.extra:
            data.pop("extra")
        return data

    def line(self) -> str:
        where = f"gpu {self.gpu}" if self.gpu is not None else "node"
        return f"{self.severity:<6} {self.check:<14} {where:<7} {self.message}"


def verdict(findings: list[Finding]) -> Severity:
    worst = 0
    for f in findings:
        worst = max(worst, RANK[f.severity])
    return Severity(SEVERITIES[worst])


