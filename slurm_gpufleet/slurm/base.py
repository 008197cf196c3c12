"""What the rest of slurm-gpufleet needs from Slurm, and nothing more."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


class SlurmError(RuntimeError):
    """A Slurm command or call failed; the message is one line."""


@dataclass
class NodeInfo:
    name: str
    state: str                       # base state, upper case: IDLE, ALLOCATED, MIXED, DOWN, ...
    flags: set[str] = field(default_factory=set)  # DRAIN, REBOOT_REQUESTED, REBOOT_ISSUED, MAINTENANCE, ...
    reason: str = ""                 # without Slurm's " [user@time]" suffix
    reason_user: str | None = None
    comment: str = ""
    extra: str = ""
    boot_time: str | None = None
    gres: str = ""

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def down(self) -> bool:
        return self.state == "DOWN"

    @property
    def rebooting(self) -> bool:
        return bool(self.flags & {"REBOOT_REQUESTED", "REBOOT_ISSUED"}) or self.state == "REBOOT"

    @property
    def idle(self) -> bool:
        return self.state == "IDLE"


class SlurmBackend(Protocol):
    name: str

    def node(self, name: str) -> NodeInfo: ...

    def drain(self, name: str, reason: str) -> None: ...

    def resume(self, name: str) -> None: ...

    def set_reason(self, name: str, reason: str) -> None: ...

    def reboot_asap(self, name: str, reason: str, next_state: str = "RESUME") -> None: ...

    def set_field(self, name: str, field: str, value: str) -> None:
        """field: 'comment' or 'extra'."""
        ...
