"""The Slurm changes a reconcile step wants, batched: each distinct change is one call over a host list."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..hostlist import fold
from ..slurm.base import NodeInfo, SlurmError

JOB_CALLS = frozenset({"set_job_comment", "signal_job", "requeue_jobs", "cancel_jobs"})
# never left to a later step: a job that starts on a waiting node before its slot's MAINT reservation
# exists may run past the slot (days), and a deadline plan's job called a step late may cost the deadline.
# A rollout makes its slot reservations once (at most schedule.MAX_RESERVATIONS of them).
UNCAPPED = JOB_CALLS | {"create_reservation"}
NODE_STATE_CALLS = {"drain_nodes": "drain", "resume_nodes": "resume", "set_reason_nodes": "set_reason",
                    "reboot_asap_nodes": "reboot_asap"}


@dataclass
class Writes:
    """The Slurm changes a step wants, grouped so that each distinct change is one call over a host list.

    Every one of them is derived again at the next step from the nodes' states and what Slurm shows, so a
    step may make only the first `cap` of them (most urgent first) and leave the rest to the next."""

    drain: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))       # reason -> nodes
    reboot: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    reason: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    resume: set[str] = field(default_factory=set)
    update: dict[str, list[str]] = field(default_factory=dict)                         # reservation -> nodes
    delete: set[str] = field(default_factory=set)
    # begun slots given up (Slurm cannot move them): deleted, uncapped, in the step that remakes them later
    given_up: set[str] = field(default_factory=set)
    # begun slots that let their waiting nodes go, keeping the nodes already taken: uncapped, as given_up
    shrunk: dict[str, list[str]] = field(default_factory=dict)                         # reservation -> nodes
    create: dict[str, tuple[list[str], float, int]] = field(default_factory=dict)     # name -> nodes, start, minutes
    postpone: dict[str, float] = field(default_factory=dict)                          # reservation -> new start
    weight: dict[int, set[str]] = field(default_factory=lambda: defaultdict(set))
    comments: dict[str, str] = field(default_factory=dict)            # job id -> its new comment
    signals: dict[str, tuple[str, bool]] = field(default_factory=dict)  # job id -> (signal, batch shell only)
    requeue: set[str] = field(default_factory=set)
    cancel: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)

    def calls(self) -> list[tuple[str, tuple[Any, ...]]]:
        """(backend method, arguments), most urgent first: give capacity back, stop new jobs on nodes we
        take, then the rest."""
        out: list[tuple[str, tuple[Any, ...]]] = []
        if self.resume:  # capacity back first: a node done and one taken are never both out for long
            out.append(("resume_nodes", (sorted(self.resume),)))
        out += [("drain_nodes", (sorted(n), r)) for r, n in self.drain.items()]
        out += [("reboot_asap_nodes", (sorted(n), r, "RESUME")) for r, n in self.reboot.items()]
        out += [("update_reservation", (name, sorted(n))) for name, n in sorted(self.update.items())
                if name not in self.shrunk]
        out += [("update_reservation", (name, sorted(n))) for name, n in sorted(self.shrunk.items())
                if name not in self.given_up]
        # a slot about to begin for a domain that cannot go yet: before it holds nodes out of service
        out += [("postpone_reservation", (name, start)) for name, start in sorted(self.postpone.items())]
        out += [("delete_reservation", (name,)) for name in sorted(self.delete | self.given_up)]
        out += [("set_reason_nodes", (sorted(n), r)) for r, n in self.reason.items()]
        out += [("create_reservation", (name, sorted(n), start, minutes))
                for name, (n, start, minutes) in sorted(self.create.items(), key=lambda kv: kv[1][1])]
        out += [("set_weight_nodes", (sorted(n), w)) for w, n in self.weight.items()]
        # a deadline plan's jobs: the owner told first, then the checkpoint signal, then the stop
        out += [("set_job_comment", (job, text)) for job, text in sorted(self.comments.items())]
        out += [("signal_job", (job, sig, batch)) for job, (sig, batch) in sorted(self.signals.items())]
        if self.requeue:
            out.append(("requeue_jobs", (sorted(self.requeue),)))
        if self.cancel:
            out.append(("cancel_jobs", (sorted(self.cancel),)))
        return out

    def flush(self, slurm: Any, nodes: dict[str, NodeInfo] | None = None, cap: int | None = None) -> int:
        """Node state changes go through the actuator (ownership: only what a rollout may touch), with the
        nodes as this step's read showed them.  The cap bounds node changes and postponed slots; new
        reservations, nodes leaving reservations (and reservations deleted) and a deadline plan's few job
        calls always go (UNCAPPED and below)."""
        from ..slurm.actuator import Actuator
        from ..slurm.ownership import MAINTAIN

        self.made: list[tuple[str, str]] = []
        actuator = Actuator(slurm, MAINTAIN)
        calls = self.calls()
        def free(call: tuple[str, tuple[Any, ...]]) -> bool:
            # a node leaving a reservation of ours (or the reservation going with its last node) is capacity
            # given back, as a begun slot let go is: a
            # node done but still in a begun MAINT reservation is out of service and fills the budget,
            # so under the cap the window would wait on its own leftovers (one call per reservation, at
            # most schedule.MAX_RESERVATIONS)
            return call[0] in UNCAPPED or call[0] in ("update_reservation", "delete_reservation")

        uncapped = [c for c in calls if free(c)]
        for method, args in [c for c in calls if not free(c)][:cap] + uncapped:
            try:
                if method in NODE_STATE_CALLS:
                    if nodes is None:  # a caller without a read (cleanup): one bulk read, for ownership
                        nodes = {n.name: n for n in slurm.nodes()}
                    infos = [nodes[n] for n in args[0] if n in nodes]
                    done = getattr(actuator, NODE_STATE_CALLS[method])(infos, *args[1:])
                    self.errors += done.errors + [f"{n}: {why}" for n, why in done.left.items()]
                elif method in JOB_CALLS:
                    actuator.job(method, *args)
                elif method == "set_weight_nodes":
                    actuator.set_weight(*args)
                else:
                    actuator.reservation(method, *args)
            except SlurmError as exc:  # derived again next step; said in the audit log
                self.errors.append(f"{method}: {exc}")
            self.made.append((method, " ".join(fold(a) if isinstance(a, list) else str(a) for a in args)))
        return len(self.made)

    @property
    def reservation_calls_made(self) -> int:
        """Reservations made, changed or deleted: never capped (the cap counts the rest)."""
        return sum(1 for method, _ in getattr(self, "made", [])
                   if method in ("create_reservation", "update_reservation", "delete_reservation"))

    @property
    def reservations_made(self) -> int:
        return sum(1 for method, _ in getattr(self, "made", []) if method == "create_reservation")
