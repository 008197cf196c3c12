"""What the rest of slurm-gpufleet needs from Slurm, and nothing more."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Any, Protocol


class SlurmError(RuntimeError):
    """A Slurm command or call failed; the message is one line."""


class ReservationMissing(SlurmError):
    """The reservation a write names is not there (deleted already, or never made).  The backends raise it
    from Slurm's own answer, so that no caller reads an error's words."""


def job_order(job_id: str) -> tuple[int, ...]:
    """Slurm's order of job ids, for sorting: by number (99 before 100; as text "100" < "99"), an array's
    task ("7_12") or a heterogeneous job's component ("7+1") after its job and by its own number."""
    return tuple(int(part) for part in re.findall(r"\d+", job_id))


REASON_FLAGS = frozenset({"DRAIN", "FAIL", "REBOOT_REQUESTED", "REBOOT_ISSUED"})


@dataclass
class NodeInfo:
    """One node as Slurm shows it."""

    name: str
    state: str                       # base state, upper case: IDLE, ALLOCATED, MIXED, DOWN, ...
    flags: set[str] = field(default_factory=set)  # DRAIN, REBOOT_REQUESTED, REBOOT_ISSUED, MAINTENANCE, ...
    reason: str = ""                 # without Slurm's " [user@time]" suffix
    reason_user: str | None = None
    reason_time: float | None = None  # when the reason was set (epoch s), from Slurm's "[user@time]"
    comment: str = ""
    extra: str = ""
    boot_time: str | None = None
    gres: str = ""
    partitions: list[str] = field(default_factory=list)
    features: list[str] = field(default_factory=list)          # AvailableFeatures
    active_features: list[str] = field(default_factory=list)   # ActiveFeatures
    weight: int | None = None        # scheduling weight: Slurm prefers lower-weight nodes
    slurmd_start: float | None = None  # when this node's slurmd last registered (epoch s): a restart moves it
    last_busy: float | None = None   # when a job last ran on it (Slurm's LastBusyTime, epoch s): idle sweeps
    slurmd_version: str | None = None  # the slurmd that registered it (Slurm's Version)

    def __post_init__(self) -> None:
        # A reason means something only while the node is drained, down, failing or rebooting.  Slurm
        # 22.05 clears it at a resume, 24.11 keeps the old text on the resumed node: one reading for every
        # release (and the in-memory Slurm), so that no reader takes a stale reason for a live one.
        if not (self.flags & REASON_FLAGS or self.state in ("DOWN", "REBOOT")):
            self.reason, self.reason_user, self.reason_time = "", None, None

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


_GRES_GPU = re.compile(r"(?:^|,)gpu(?::[^:,()]+)?:(\d+)")


def view_of(info: NodeInfo):
    """The snapshot's SlurmView of a node as Slurm shows it: its GPUs summed over every `gpu` entry of its
    Gres ("gpu:h200:4,gpu:1g.18gb:14(S:0)"); None where its Gres names no GPU at all (a site that does not
    schedule GPUs as GRES: unknown, never judged)."""
    from ..readers.snapshot import SlurmView

    gres = "" if info.gres in ("(null)", "None") else info.gres
    counts = [int(m.group(1)) for m in _GRES_GPU.finditer(gres)]
    return SlurmView(state=info.state, flags=sorted(info.flags), gres=gres, gpus=sum(counts) if counts else None,
                     held=info.drained or info.down or info.rebooting, version=info.slurmd_version,
                     features=list(info.features))


@dataclass
class JobInfo:
    """One job as Slurm shows it."""

    job_id: str
    nodes: list[str]
    end_time: float | None      # epoch seconds; None when the job has no time limit
    partition: str = ""
    start_time: float | None = None
    gpus_per_node: int = 0
    comment: str = ""           # the owner's: where a job says how it checkpoints (maintain/deadline.py)
    requeue: bool | None = None  # read only for a deadline plan (None: not read)


@dataclass
class Reservation:
    """One reservation as Slurm shows it."""

    name: str
    nodes: list[str]
    start: float | None
    end: float | None
    flags: set[str]
    state: str


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

    def set_features(self, name: str, available: list[str], active: list[str]) -> None: ...

    def nodes(self) -> list[NodeInfo]: ...

    def running_jobs(self) -> list[JobInfo]: ...

    def reservations(self) -> list[Reservation]: ...

    def create_reservation(self, name: str, nodes: list[str], start: float | None, minutes: int) -> None: ...

    def delete_reservation(self, name: str) -> None: ...

    def update_reservation(self, name: str, nodes: list[str]) -> None: ...

    def postpone_reservation(self, name: str, start: float) -> None: ...

    # Batched writes: one Slurm call over a host list, whatever the number of nodes (`maintain` at scale).
    def drain_nodes(self, names: list[str], reason: str) -> None: ...

    def resume_nodes(self, names: list[str]) -> None: ...

    def set_reason_nodes(self, names: list[str], reason: str) -> None: ...

    def set_weight_nodes(self, names: list[str], weight: int) -> None: ...

    def reboot_asap_nodes(self, names: list[str], reason: str, next_state: str = "RESUME") -> None: ...


# Every write a backend makes.  Only slurm/actuator.py calls them: the backends are handed out read-only
# (`ReadOnly`), and the actuator alone takes the writer behind one (`writer_of`).
WRITES = frozenset({"drain", "resume", "set_reason", "reboot_asap", "set_field", "set_fields", "set_features",
                    "drain_nodes", "resume_nodes", "set_reason_nodes", "reboot_asap_nodes", "set_weight_nodes",
                    "create_reservation", "update_reservation", "postpone_reservation", "delete_reservation",
                    "set_job_comment", "signal_job", "requeue_jobs", "cancel_jobs", "submit_job", "submit_array",
                    "set_admin_comment", "set_accounted_admin_comment", "set_excluded_nodes", "release_jobs",
                    "hold_jobs"})
ACTUATOR = "slurm_gpufleet.slurm.actuator"


class ReadOnly:
    """A backend as every module of the product holds it (`slurm.get_backend`): its reads and its facts
    (name, release); a write is an AttributeError.  The actuator takes the writer behind it."""

    __slots__ = ("_ReadOnly__backend",)

    def __init__(self, backend: Any) -> None:
        object.__setattr__(self, "_ReadOnly__backend", backend)

    def __getattr__(self, name: str) -> Any:
        if name in WRITES:
            raise AttributeError(f"{name} is a Slurm write: only the actuator writes (slurm/actuator.py)")
        return getattr(self.__backend, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a read-only Slurm backend cannot be changed ({name})")

    def __repr__(self) -> str:
        return f"ReadOnly({self.__backend!r})"


def writer_of(backend: Any) -> Any:
    """The writer behind a read-only backend, for the actuator alone (any other caller is refused).  An
    object that is not a ReadOnly (the in-memory Slurm a simulator owns, a test's recorder) is its own
    writer.  A wrapper that counts reads (maintain/world.CountedReads) names what it wraps `__wrapped__`."""
    caller = sys._getframe(1).f_globals.get("__name__")
    if caller != ACTUATOR:
        raise PermissionError(f"{caller} asked for a Slurm writer: only {ACTUATOR} writes to Slurm")
    while True:
        if isinstance(backend, ReadOnly):
            backend = backend._ReadOnly__backend
        elif "__wrapped__" in getattr(backend, "__dict__", {}):
            backend = backend.__dict__["__wrapped__"]
        else:
            return backend
