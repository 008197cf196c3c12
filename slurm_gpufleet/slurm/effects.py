"""Typed effects: every kind of Slurm write an actor asks for, as a value.

An actor decides, then hands its effects to `Actuator.apply`, which holds ownership, the drain breaker,
the reservation prefixes and batching (slurm/actuator.py).  Reasons are cleaned where an effect is made
(one line, no quotes, at most MAX_REASON: slurm/actions.one_line), so what an actor compares with what
Slurm shows later is what Slurm was given.

The remedy carrier (remedy/carrier.py) writes only through these.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .actions import one_line
from .base import NodeInfo


class _Reasoned:
    """An effect whose `reason` is cleaned where it is made."""

    reason: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", one_line(self.reason))


@dataclass(frozen=True, eq=False)
class Drain(_Reasoned):
    """Drain the nodes with this reason (`fields`: the node's published summary and features, in the same
    write).  Nodes someone else holds are left; the actor's own get the new reason."""

    nodes: tuple[NodeInfo, ...]
    reason: str
    fields: dict[str, str] | None = None


@dataclass(frozen=True, eq=False)
class SetReason(_Reasoned):
    """A new reason on the actor's own held nodes."""

    nodes: tuple[NodeInfo, ...]
    reason: str
    fields: dict[str, str] | None = None


@dataclass(frozen=True, eq=False)
class Resume:
    nodes: tuple[NodeInfo, ...]
    fields: dict[str, str] | None = None


@dataclass(frozen=True, eq=False)
class Reboot(_Reasoned):
    """`scontrol reboot ASAP`: drained at once, rebooted once empty, back `next_state` (RESUME or DOWN)."""

    nodes: tuple[NodeInfo, ...]
    reason: str
    next_state: str = "RESUME"


@dataclass(frozen=True)
class Reserve:
    """A MAINT reservation of the actor's own prefix on the nodes, from `start` (None: now)."""

    name: str
    nodes: tuple[str, ...]
    start: float | None
    minutes: int


@dataclass(frozen=True)
class Release:
    """Delete a reservation of the actor's own prefix."""

    name: str


@dataclass(frozen=True)
class Submit:
    """A job of ours on one node (`reservation`: in it; "": none), its output kept at `output`."""

    name: str
    node: str
    reservation: str
    partition: str
    command: str
    minutes: int
    comment: str
    output: str = "/dev/null"


@dataclass(frozen=True)
class Cancel:
    job_ids: tuple[str, ...]


@dataclass(frozen=True)
class Publish:
    """The node's published summary and features (extra or comment, features), in one write."""

    node: str
    fields: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Weight:
    nodes: tuple[str, ...]
    weight: int


Effect = Drain | SetReason | Resume | Reboot | Reserve | Release | Submit | Cancel | Publish | Weight
