"""The one way anything of ours writes to Slurm: node states (drain, reason, resume, reboot), the nodes'
published facts, weights, reservations and job calls.

Every actor (the health check, prolog and epilog, the NVML-timeout watchdog, `fleet stragglers --drain`,
a rollout) calls this with the nodes as its one read of Slurm showed them.  It applies

* ownership (slurm/ownership.py): a node is drained only when it is free or the actor's own; a reason is
  changed and a node resumed only when the actor drained it; someone else's node is left, and said so;
* the fleet-wide drain breaker (slurm/breaker.py) to every drain an actor makes because of a fault (the
  health check's, the hooks', the watchdog's, the stragglers'): the fleet is read once, only when a drain
  is about to happen, and a batch is admitted node by node until the threshold, the rest blocked.  A
  rollout's drains are planned: its budget bounds them and its failures halt it (maintain/schedule.py).

* the breaker to a health check's reboots too: `scontrol reboot ASAP` takes a node out of service
  as surely as a drain, and a fleet-wide fault would otherwise reboot the fleet;
* reservations by name: an actor changes and deletes only the reservations of its own prefix
  (ownership.RESERVATION_PREFIXES), so a rollout never touches a lemon hold or a site's reservation;
* the node group's `mode` (`modes`: one mode, or a node's mode by its name), the one place it is applied:
  an observe node's state is never changed (no drain, reason, resume, reboot, reservation, job of ours or
  requeue: its summary and the jobs' records are still written, so what would be done is seen), a
  quarantine node is never rebooted.  Whatever an actor decided, the write it is not permitted does not
  happen: a node is left (`Applied.left`: "observe mode: would drain"), any other write raises
  `NotPermitted`.

A node's published summary and features, a node's weight and job calls carry no ownership (they are the
node's own facts, or a rollout's own jobs), but they go through here too: one place writes to Slurm.
Every other module holds a backend read-only (`slurm.get_backend` hands out `base.ReadOnly`); the actuator
alone takes the writer behind it (`base.writer_of` refuses any other caller), and tests/test_actuator_only.py
watches the programs Slurm runs write only from here.  What to write arrives as typed effects
(slurm/effects.py) through `apply`, or through the typed call that carries each of them.

Writes are batched: one Slurm call per distinct change over a host list.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from . import effects as E
from .base import NodeInfo, ReservationMissing, SlurmError, writer_of
from .ownership import ACTORS, MAINTAIN, RESERVATION_PREFIXES, left_alone, may_drain, owner, owns
from .reasons import same

log = logging.getLogger("slurm-gpufleet")

# actors whose drains are a judgement about a fault: the breaker guards them
UNPLANNED = frozenset({"health", "straggler"})

MODES = ("observe", "quarantine", "full")
# what each mode refuses, by the typed call's name; a mode not named here (a typo that reached this far)
# is taken as observe: an unknown mode never widens what may be written
_REFUSED = {
    "quarantine": frozenset({"reboot"}),
    "full": frozenset(),
}
# the writes that change no node's state, allowed in every mode: the node's published summary and features,
# a job's record and comment
RECORDS = frozenset({"publish", "set admin comment", "set job comment"})


class NotPermitted(SlurmError):
    """A write the node group's mode does not permit (observe: any change of state; quarantine: a reboot)."""


def permits(mode: str, verb: str) -> bool:
    """Whether a node in `mode` may have `verb` done to it (the one mode rule)."""
    if verb in RECORDS:
        return True
    refused = _REFUSED.get(mode)
    return refused is not None and verb not in refused


@dataclass
class Applied:
    """What one call did: nodes changed, nodes left alone (and why), the breaker's why if it blocked any."""

    done: list[str] = field(default_factory=list)
    reason_set: list[str] = field(default_factory=list)
    left: dict[str, str] = field(default_factory=dict)
    blocked: list[str] = field(default_factory=list)
    breaker: str | None = None
    errors: list[str] = field(default_factory=list)


# what make_actuator hands the constructor: an Actuator made any other way is refused at run time, and
# tests/test_actuator_only.py refuses any other module's use of this name
_MINT = object()


def make_actuator(backend, actor: str, settings=None, *, fleet: list[NodeInfo] | None = None,
                  clock=time.time, modes: str | Callable[[str], str] = "full") -> Actuator:
    """The one way to obtain write power: an actuator for an actor ownership declares (ownership.ACTORS).
    Each program calls it once (tests/test_actuator_only.py lists where); a narrower view for one call
    (another fleet read, each member's mode) is `Actuator.seeing`, the same writer."""
    if actor not in ACTORS:
        raise ValueError(f"{actor!r} is no actor ownership declares ({', '.join(ACTORS)})")
    return Actuator(backend, actor, settings, fleet=fleet, clock=clock, modes=modes, mint=_MINT)


class Actuator:
    def __init__(self, backend, actor: str, settings=None, *, fleet: list[NodeInfo] | None = None,
                 clock=time.time, modes: str | Callable[[str], str] = "full", mint: object = None):
        """settings: the [slurm] settings (breaker threshold, window, file); an unplanned actor without them
        is a programming error, never a silently unguarded drain.
        fleet: a fleet read the caller already holds (the breaker then reads none).
        modes: the node group's mode of the one node the actor acts for (the hooks), or a node's mode by
        its name (policy.Policy.mode_of: actors over many nodes); a write about a job or a reservation by
        name follows the one node's mode, and is not judged where the actor has many (its own jobs and
        reservations exist only where their node's mode let them be made)."""
        if mint is not _MINT:
            raise PermissionError("an Actuator is made by slurm.actuator.make_actuator alone")
        if actor in UNPLANNED and settings is None:
            raise TypeError(f"the {actor} actor needs the [slurm] settings: its drains go through the breaker")
        self.backend = backend             # its reads (the breaker's fleet)
        self.__writer = writer_of(backend)   # its writes: held here and nowhere else
        self.actor = actor
        self.settings = settings
        self.fleet = fleet
        self.clock = clock
        self.modes = modes

    def seeing(self, fleet: list[NodeInfo] | None = None,
               modes: str | Callable[[str], str] | None = None) -> Actuator:
        """The same actuator (its actor, settings, clock and writer) with a fleet read the caller holds (the
        breaker reads none) or each node's own mode: a rack's members are judged each by its own group."""
        view = copy.copy(self)
        if fleet is not None:
            view.fleet = fleet
        if modes is not None:
            view.modes = modes
        return view

    # -- the mode rule ----------------------------------------------------------------------------
    def mode(self, node: str | None) -> str:
        """The mode a write about `node` is held to (None: a write about a job or a reservation by name)."""
        if isinstance(self.modes, str):
            return self.modes
        return self.modes(node) if node is not None else "full"

    def _permitted(self, nodes: list[NodeInfo], verb: str, out: Applied) -> list[NodeInfo]:
        """The nodes whose mode permits `verb`; the others are left, and said so."""
        kept = []
        for info in nodes:
            mode = self.mode(info.name)
            if permits(mode, verb):
                kept.append(info)
            else:
                out.left[info.name] = f"{mode} mode: would {verb}"
                log.warning("%s: %s mode: would %s (not done)", info.name, mode, verb)
        return kept

    def _may(self, verb: str, node: str | None = None) -> None:
        """A write that is not a node's state (a job, a reservation): refused where the mode does not permit it."""
        mode = self.mode(node)
        if not permits(mode, verb):
            log.warning("%s%s mode: would %s (not done)", f"{node}: " if node else "", mode, verb)
            raise NotPermitted(f"{mode} mode: would {verb}")

    # -- typed effects (slurm/effects.py) ----------------------------------------------------------
    def apply(self, *effects) -> list:
        """Carry out each effect, in order, with ownership, the breaker and the reservation prefixes as the
        calls below hold them.  Returns per effect what its call returns: an Applied for a node-state
        change, a job id for a Submit or SubmitArray, None for the rest."""
        out: list = []
        for e in effects:
            carry = _CARRIERS.get(type(e))
            if carry is None:
                raise TypeError(f"not an effect: {e!r}")
            out.append(carry(self, e))
        return out

    # -- node state -------------------------------------------------------------------------------
    def drain(self, nodes: list[NodeInfo], reason: str, fields: dict[str, str] | None = None) -> Applied:
        """`fields` (comment / extra) go in the same Slurm call: a drain run publishes with its drain."""
        return self.drain_each([(info, reason) for info in nodes], fields)

    def drain_each(self, pairs: list[tuple[NodeInfo, str]], fields: dict[str, str] | None = None) -> Applied:
        """Each node with its own reason; judged by the breaker as one batch, in order."""
        out = Applied()
        allowed = {i.name for i in self._permitted([i for i, _ in pairs], "drain", out)}
        fresh = self._relabel_ours([(i, r) for i, r in pairs if i.name in allowed], fields, out)
        if fresh and self.actor in UNPLANNED:
            from . import breaker

            # judged and drained under one lock: the next node's count sees this drain in Slurm
            with breaker.counting_lock(self.settings.breaker_path):
                passed = {i.name for i in self._breaker([i for i, _ in fresh], out)}
                self._drains([(i, r) for i, r in fresh if i.name in passed], fields, out)
        else:
            self._drains(fresh, fields, out)
        return out

    def _relabel_ours(self, pairs: list[tuple[NodeInfo, str]], fields: dict[str, str] | None,
                      out: Applied) -> list[tuple[NodeInfo, str]]:
        """Ownership: nodes someone else holds are left (and said so), our own drains get the new reason;
        returns the free nodes, still to drain."""
        fresh: list[tuple[NodeInfo, str]] = []
        relabel: dict[str, list[str]] = {}
        for info, reason in pairs:
            if not may_drain(info, self.actor):
                out.left[info.name] = left_alone(info)
            elif info.drained:
                if not same(info.reason, reason):
                    relabel.setdefault(reason, []).append(info.name)  # our own drain: only the reason changes
            else:
                fresh.append((info, reason))
        for reason, names in relabel.items():
            if self._call(out, self.__writer.set_reason_nodes, names, reason, *([fields] if fields else [])):
                out.reason_set += names
        return fresh

    def _drains(self, pairs: list[tuple[NodeInfo, str]], fields: dict[str, str] | None, out: Applied) -> None:
        by_reason: dict[str, list[str]] = {}
        for info, reason in pairs:
            by_reason.setdefault(reason, []).append(info.name)
        for reason, names in by_reason.items():
            if self._call(out, self.__writer.drain_nodes, names, reason, *([fields] if fields else [])):
                out.done += names

    def drain_domain(self, domain: str, nodes: list[NodeInfo], reason: str, domains: int) -> Applied:
        """A whole failure domain drained as one decision (rack escalation): the breaker counts its nodes
        among the fleet's, and the domain among `domains`; members someone else holds are left, ours get the
        domain's reason, free ones are drained, in one write per change."""
        from . import breaker

        out = Applied()
        nodes = self._permitted(list(nodes), "drain", out)
        if not nodes:
            return out
        s = self.settings
        with breaker.counting_lock(s.breaker_path):
            record = breaker.state(s.breaker_path)
            if record is None:
                try:
                    fleet = list(self.fleet) if self.fleet is not None else self.backend.nodes()
                except SlurmError as exc:
                    log.warning("breaker: cannot read the fleet, not judged: %s", exc)
                    fleet = []
                trip = breaker.would_trip_domain(fleet, domain, domains, s.breaker_threshold, s.breaker_window_s,
                                                 now=self.clock(), members=[i.name for i in nodes]) if fleet else None
                if trip is not None:
                    why = trip.text(s.breaker_window_s)
                    try:
                        breaker.open_(s.breaker_path, domain, why)
                    except OSError as exc:
                        log.error("breaker: cannot record the open state in %s: %s", s.breaker_path, exc)
                    record = breaker.state(s.breaker_path) or {"why": why}
                    log.critical("ALERT gpufleet drain breaker OPEN: %s; no node is drained until "
                                 "`slurm-gpufleet breaker reset`", record.get("why", why))
            if record is not None:
                out.breaker = str(record.get("why", "open"))
                out.blocked = [i.name for i in nodes]
                return out
            # judged above for all of them: the free members drain without a count of their own
            self._drains(self._relabel_ours([(i, reason) for i in nodes], None, out), None, out)
        return out

    def fail_prolog(self, nodes: list[NodeInfo]) -> Applied:
        """A failed prolog drains its node (slurmd does): the mode and the breaker asked as for a drain.
        Returns the nodes whose prolog may fail in `done`, the rest in `left` or `blocked`."""
        out = Applied()
        nodes = self._permitted(list(nodes), "drain", out)
        judged = self.judge(nodes)
        out.breaker, out.blocked = judged.breaker, judged.blocked
        out.done += [i.name for i in nodes if i.name not in judged.blocked]
        return out

    def judge(self, nodes: list[NodeInfo]) -> Applied:
        """The breaker's answer for draining these nodes, without draining them (a failed prolog: Slurm
        itself drains the node for it)."""
        out = Applied()
        if nodes and self.actor in UNPLANNED:
            from . import breaker

            with breaker.counting_lock(self.settings.breaker_path):
                self._breaker(list(nodes), out)
        return out

    def set_reason(self, nodes: list[NodeInfo], reason: str, fields: dict[str, str] | None = None) -> Applied:
        return self._owned(nodes, self.__writer.set_reason_nodes, reason, *([fields] if fields else []),
                           skip=lambda i: same(i.reason, reason), verb="set reason")

    def resume(self, nodes: list[NodeInfo], fields: dict[str, str] | None = None) -> Applied:
        return self._owned(nodes, self.__writer.resume_nodes, *([fields] if fields else []), verb="resume")

    def reboot_asap(self, nodes: list[NodeInfo], reason: str, next_state: str = "RESUME") -> Applied:
        """`scontrol reboot ASAP`: Slurm drains the node and reboots it once it is empty.  An unplanned
        actor's reboots are counted by the breaker as drains are."""
        out = Applied()
        nodes = self._permitted(list(nodes), "reboot", out)
        free = [i for i in nodes if may_drain(i, self.actor) or (i.drained and owns(i, self.actor))]
        taken = {i.name for i in free}
        out.left.update({i.name: left_alone(i) for i in nodes if i.name not in taken})
        if free and self.actor in UNPLANNED:
            from . import breaker

            with breaker.counting_lock(self.settings.breaker_path):
                self._reboots(self._breaker(free, out), reason, next_state, out)
        else:
            self._reboots(free, reason, next_state, out)
        return out

    def _reboots(self, nodes: list[NodeInfo], reason: str, next_state: str, out: Applied) -> None:
        names = [i.name for i in nodes]
        if names and self._call(out, self.__writer.reboot_asap_nodes, names, reason, next_state):
            out.done = names

    # -- the rest of what we write ----------------------------------------------------------------
    def publish(self, node: str, fields: dict[str, str]) -> None:
        """The node's published summary and features (Extra or Comment, AvailableFeatures, ActiveFeatures),
        in one write.  A drain, reason or resume carries them in its own write instead (`fields`)."""
        if fields:
            self.__writer.set_fields(node, fields)

    def set_weight(self, names: list[str], weight: int) -> None:
        for name in names:
            self._may("set weight", name)
        self.__writer.set_weight_nodes(names, weight)

    def create_reservation(self, name: str, nodes: list[str], start: float | None, minutes: int) -> None:
        self._ours(name, "create")
        for node in nodes:
            self._may("reserve", node)
        self.__writer.create_reservation(name, nodes, start, minutes)

    def update_reservation(self, name: str, nodes: list[str]) -> None:
        self._ours(name, "update")
        for node in nodes:
            self._may("reserve", node)
        self.__writer.update_reservation(name, nodes)

    def postpone_reservation(self, name: str, start: float) -> None:
        self._ours(name, "postpone")
        self._may("reserve")
        self.__writer.postpone_reservation(name, start)

    def delete_reservation(self, name: str) -> None:
        """Deleted; one already gone is what was asked for, no error."""
        self._ours(name, "delete")
        self._may("release reservation")
        try:
            self.__writer.delete_reservation(name)
        except ReservationMissing:
            log.info("reservation %s already gone", name)

    def _ours(self, name: str, verb: str) -> None:
        """An actor changes only the reservations of its own prefix."""
        prefix = RESERVATION_PREFIXES.get(self.actor)
        if prefix is None or not name.startswith(prefix):
            mine = "* or ".join(prefix) if isinstance(prefix, tuple) else prefix or "its"
            raise SlurmError(f"{self.actor} may not {verb} reservation {name} (not {mine}*)")

    # jobs: a rollout's own (validation, upgrade arrays) and the jobs a deadline plan stops; no ownership
    def submit_job(self, name: str, node: str, reservation: str, partition: str, command: str, minutes: int,
                   comment: str, output: str = "/dev/null") -> str:
        self._may("submit a job", node)
        return self.__writer.submit_job(name, node, reservation, partition, command, minutes, comment, output)

    def submit_array(self, name: str, partition: str, tasks: int, command: str, output: str, chdir: str) -> str:
        self._may("submit a job array")
        return self.__writer.submit_array(name, partition, tasks, command, output, chdir)

    def set_job_comment(self, job_id: str, text: str) -> None:
        self.__writer.set_job_comment(job_id, text)

    def signal_job(self, job_id: str, signal: str, batch: bool) -> None:
        self._may("signal a job")
        self.__writer.signal_job(job_id, signal, batch)

    def requeue_jobs(self, job_ids: list[str]) -> None:
        self._may("requeue")
        self.__writer.requeue_jobs(job_ids)

    def cancel_jobs(self, job_ids: list[str]) -> None:
        self._may("cancel a job")
        self.__writer.cancel_jobs(job_ids)

    # a job's own record and its requeue away from the node that failed it (no ownership: the job's)
    def set_admin_comment(self, job_id: str, text: str, accounted: bool = False, field: str = "AdminComment") -> None:
        if accounted:
            self.__writer.set_accounted_admin_comment(job_id, text, field)
        else:
            self.__writer.set_admin_comment(job_id, text)

    def set_excluded_nodes(self, job_id: str, nodes: list[str]) -> None:
        self._may("requeue")
        self.__writer.set_excluded_nodes(job_id, nodes)

    def release_jobs(self, job_ids: list[str]) -> None:
        self._may("requeue")
        self.__writer.release_jobs(job_ids)

    def hold_jobs(self, job_ids: list[str]) -> None:
        self._may("requeue")
        self.__writer.hold_jobs(job_ids)

    def holds(self, info: NodeInfo) -> bool:
        """Whether this actor may change the node's reason or resume it: its own drain (the health actor
        also Slurm's drain for a hook of ours that failed)."""
        return owns(info, self.actor) or (self.actor == "health" and owner(info) == "hook")

    def _owned(self, nodes: list[NodeInfo], write, *args, skip=None, verb: str) -> Applied:
        out = Applied()
        mine = []
        for info in self._permitted(list(nodes), verb, out):
            if not self.holds(info):
                out.left[info.name] = left_alone(info)
            elif skip is None or not skip(info):
                mine.append(info.name)
        if mine and self._call(out, write, mine, *args):
            out.done = mine
        return out

    def _call(self, out: Applied, write, *args) -> bool:
        try:
            write(*args)
            return True
        except SlurmError as exc:
            out.errors.append(f"{write.__name__}: {exc}")
            if self.actor != MAINTAIN:  # a rollout derives its writes again next step; the others say so now
                raise
            return False

    # -- the breaker ------------------------------------------------------------------------------
    def _breaker(self, fresh: list[NodeInfo], out: Applied) -> list[NodeInfo]:
        """The nodes of this batch the breaker lets through, in order; the rest are blocked and the
        breaker opens (it stays open until `slurm-gpufleet breaker reset`).  The caller holds the
        counting lock."""
        from . import breaker

        s = self.settings
        path = s.breaker_path
        record = breaker.state(path)
        if record is not None:
            out.breaker = str(record.get("why", "open"))
            out.blocked = [i.name for i in fresh]
            return []
        try:
            fleet = list(self.fleet) if self.fleet is not None else self.backend.nodes()
        except SlurmError as exc:  # cannot count: drain as before (a blind breaker must not hide faults)
            log.warning("breaker: cannot read the fleet, not judged: %s", exc)
            return fresh
        now = self.clock()
        passed: list[NodeInfo] = []
        for i, info in enumerate(fresh):
            trip = breaker.would_trip(fleet, info.name, s.breaker_threshold, s.breaker_window_s, now=now)
            if trip is not None:
                why = trip.text(s.breaker_window_s)
                try:
                    breaker.open_(path, info.name, why)
                except OSError as exc:
                    log.error("breaker: cannot record the open state in %s: %s", path, exc)
                record = breaker.state(path) or {"why": why}
                out.breaker = str(record.get("why", why))
                out.blocked = [n.name for n in fresh[i:]]
                log.critical("ALERT gpufleet drain breaker OPEN: %s; no node is drained until "
                             "`slurm-gpufleet breaker reset`", out.breaker)
                break
            passed.append(info)
            # counted at once: the next node of this batch sees this one drained
            fleet = [replace(n, flags=n.flags | {"DRAIN"}, reason=reason_of(self.actor), reason_time=now)
                     if n.name == info.name else n for n in fleet]
        return passed


# each effect's carrier: the typed call above that holds its rule
_CARRIERS = {
    E.Drain: lambda a, e: a.drain_each([(info, e.reason) for info in e.nodes], e.fields),
    E.SetReason: lambda a, e: a.set_reason(list(e.nodes), e.reason, e.fields),
    E.FailProlog: lambda a, e: a.fail_prolog(list(e.nodes)),
    E.Resume: lambda a, e: a.resume(list(e.nodes), e.fields),
    E.Reboot: lambda a, e: a.reboot_asap(list(e.nodes), e.reason, e.next_state),
    E.Reserve: lambda a, e: a.create_reservation(e.name, list(e.nodes), e.start, e.minutes),
    E.Release: lambda a, e: a.delete_reservation(e.name),
    E.Reshape: lambda a, e: a.update_reservation(e.name, list(e.nodes)),
    E.Postpone: lambda a, e: a.postpone_reservation(e.name, e.start),
    E.Submit: lambda a, e: a.submit_job(e.name, e.node, e.reservation, e.partition, e.command, e.minutes, e.comment,
                                       e.output),
    E.SubmitArray: lambda a, e: a.submit_array(e.name, e.partition, e.tasks, e.command, e.output, e.chdir),
    E.JobComment: lambda a, e: a.set_job_comment(e.job_id, e.text),
    E.Signal: lambda a, e: a.signal_job(e.job_id, e.signal, e.batch),
    E.Requeue: lambda a, e: a.requeue_jobs(list(e.job_ids)),
    E.Cancel: lambda a, e: a.cancel_jobs(list(e.job_ids)),
    E.Publish: lambda a, e: a.publish(e.node, e.fields),
    E.Weight: lambda a, e: a.set_weight(list(e.nodes), e.weight),
    E.AdminComment: lambda a, e: a.set_admin_comment(e.job_id, e.text, e.accounted, e.field),
    E.Exclude: lambda a, e: a.set_excluded_nodes(e.job_id, list(e.nodes)),
    E.ReleaseJobs: lambda a, e: a.release_jobs(list(e.job_ids)),
    E.HoldJobs: lambda a, e: a.hold_jobs(list(e.job_ids)),
}


def reason_of(actor: str) -> str:
    """A stand-in reason of the actor's, for counting a drain not yet in Slurm."""
    from .reasons import PERFORMANCE, ours

    return ours(PERFORMANCE if actor == "straggler" else "pending")
