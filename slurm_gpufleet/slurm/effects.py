"""Typed effects: every kind of Slurm write an actor asks for, as a value.

An actor decides, then hands its effects to `Actuator.apply`, which holds ownership, the drain breaker,
the reservation prefixes and batching (slurm/actuator.py).  Reasons are cleaned where an effect is made
(one line, no quotes, at most MAX_REASON: slurm/actions.one_line), so what an actor compares with what
Slurm shows later is what Slurm was given.

The remedy carrier (remedy/carrier.py) writes only through these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

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

    label: ClassVar[str] = "drain_nodes"
    nodes: tuple[NodeInfo, ...]
    reason: str
    fields: dict[str, str] | None = None


@dataclass(frozen=True, eq=False)
class FailProlog:
    """The prolog fails for the node (slurmd drains it and requeues the job; our reason replaces Slurm's
    after): nothing is written here, but it is a drain, so the mode and the breaker are asked as for one."""

    label: ClassVar[str] = "fail_prolog"
    nodes: tuple[NodeInfo, ...]


@dataclass(frozen=True, eq=False)
class SetReason(_Reasoned):
    """A new reason on the actor's own held nodes."""

    label: ClassVar[str] = "set_reason_nodes"
    nodes: tuple[NodeInfo, ...]
    reason: str
    fields: dict[str, str] | None = None


@dataclass(frozen=True, eq=False)
class Resume:
    label: ClassVar[str] = "resume_nodes"
    nodes: tuple[NodeInfo, ...]
    fields: dict[str, str] | None = None


@dataclass(frozen=True, eq=False)
class Reboot(_Reasoned):
    """`scontrol reboot ASAP`: drained at once, rebooted once empty, back `next_state` (RESUME or DOWN)."""

    label: ClassVar[str] = "reboot_asap_nodes"
    nodes: tuple[NodeInfo, ...]
    reason: str
    next_state: str = "RESUME"


@dataclass(frozen=True)
class Reserve:
    """A MAINT reservation of the actor's own prefix on the nodes, from `start` (None: now)."""

    label: ClassVar[str] = "create_reservation"
    name: str
    nodes: tuple[str, ...]
    start: float | None
    minutes: int


@dataclass(frozen=True)
class Release:
    """Delete a reservation of the actor's own prefix."""

    label: ClassVar[str] = "delete_reservation"
    name: str


@dataclass(frozen=True)
class Submit:
    """A job of ours on one node (`reservation`: in it; "": none), its output kept at `output`."""

    label: ClassVar[str] = "submit_job"
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
    label: ClassVar[str] = "cancel_jobs"
    job_ids: tuple[str, ...]


@dataclass(frozen=True)
class Publish:
    """The node's published summary and features (extra or comment, features), in one write."""

    label: ClassVar[str] = "set_fields"
    node: str
    fields: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Weight:
    label: ClassVar[str] = "set_weight_nodes"
    nodes: tuple[str, ...]
    weight: int


@dataclass(frozen=True)
class Reshape:
    """A reservation of the actor's own prefix now holds these nodes (the others leave it)."""

    label: ClassVar[str] = "update_reservation"
    name: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Postpone:
    """A reservation of the actor's own prefix, not yet begun, starts later."""

    label: ClassVar[str] = "postpone_reservation"
    name: str
    start: float


@dataclass(frozen=True)
class SubmitArray:
    """A job array of ours (`tasks` tasks), its output in `output`, run from `chdir`."""

    label: ClassVar[str] = "submit_array"
    name: str
    partition: str
    tasks: int
    command: str
    output: str
    chdir: str


@dataclass(frozen=True)
class JobComment:
    """The comment of a job a plan stops: its owner is told there first."""

    label: ClassVar[str] = "set_job_comment"
    job_id: str
    text: str


@dataclass(frozen=True)
class Signal:
    """A signal to a job a plan stops (to its batch step alone when `batch`): its checkpoint warning."""

    label: ClassVar[str] = "signal_job"
    job_id: str
    signal: str
    batch: bool


@dataclass(frozen=True)
class Requeue:
    """Jobs a plan stops that go back to the queue instead of ending."""

    label: ClassVar[str] = "requeue_jobs"
    job_ids: tuple[str, ...]


@dataclass(frozen=True)
class AdminComment:
    """A job's AdminComment (jobrecord.py: the record of what happened to its GPUs, merged): in slurmctld
    while the job lives, in slurmdbd's record once it has ended (`accounted`)."""

    label: ClassVar[str] = "set_admin_comment"
    job_id: str
    text: str
    accounted: bool = False
    field: str = "AdminComment"        # accounted: or SystemComment (beside jobstats)


@dataclass(frozen=True)
class Exclude:
    """A pending job's excluded nodes (ExcNodeList): it runs next elsewhere."""

    label: ClassVar[str] = "set_excluded_nodes"
    job_id: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class ReleaseJobs:
    label: ClassVar[str] = "release_jobs"
    job_ids: tuple[str, ...]


@dataclass(frozen=True)
class HoldJobs:
    label: ClassVar[str] = "hold_jobs"
    job_ids: tuple[str, ...]


Effect = (Drain | SetReason | Resume | Reboot | Reserve | Release | Reshape | Postpone | Submit | SubmitArray
          | JobComment | Signal | Requeue | Cancel | Publish | Weight | AdminComment | Exclude | ReleaseJobs | HoldJobs)
NODE_STATE = (Drain, SetReason, Resume, Reboot)   # judged by ownership, node by node
RESERVATIONS = (Reserve, Release, Reshape, Postpone)   # held to the actor's own prefix
