"""The simulator's Slurm: the backend interface over the simulated nodes, plus an upgrade executor on the
simulated clock.  It holds no rollout logic: the engine that runs `maintain apply` drives it.

What it models is what the engine depends on: a drain stops new jobs and lets running ones finish; a
MAINT reservation keeps jobs that would run past its start off its nodes; Weight steers new jobs; an
upgrade takes `upgrade_s`, after which the node's slurmd registers again and its health check publishes
the new driver.  Every call is counted, so a benchmark can print Slurm calls per step.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..catalogs.bundle import PUBLISHED
from ..judging.summary import stamp
from ..maintain.upgrade import CommandResult
from ..slurm.actions import one_line
from ..slurm.base import JobInfo, NodeInfo, Reservation

INF = float("inf")


@dataclass
class SimReservation:
    nodes: set[str]
    start: float
    end: float


@dataclass
class SimSlurm:
    sim: Any                                   # the Simulator: .now, .nodes (SimNode), .by_id
    calls: Counter = field(default_factory=Counter)
    reservations_: dict[str, SimReservation] = field(default_factory=dict)
    # validation jobs: each runs `validation_s` on its node and ends COMPLETED, or FAILED on a node in
    # `validation_fails`
    validation_s: float = 300.0
    validation_fails: set[str] = field(default_factory=set)
    jobs_: dict[str, tuple[str, str, float, str]] = field(default_factory=dict)  # id -> name, node, end, comment
    blocks: dict[str, list[str]] = field(default_factory=dict)   # topology/block: name -> nodes
    # how long a reboot takes once the node is empty (0: at the next read, as the rollout replays model it)
    reboot_s: float = 0.0
    node_fields: dict[str, dict[str, str]] = field(default_factory=dict)   # node -> comment, features
    resume_at: dict[str, float] = field(default_factory=dict)   # node -> when its ResumeAfter resumes it
    release_: tuple[int, int] = (24, 11)   # the release it behaves as: ResumeAfter (23.02 on)

    def __post_init__(self) -> None:
        self.index = {n.name: n for n in self.sim.nodes}
        # node -> (what its NodeInfo was made from, the NodeInfo): a node that did not change since the last
        # read is given the same NodeInfo (no reader changes one), which at 12,500 nodes saves most of a
        # read's cost
        self._infos: dict[str, tuple[tuple[Any, ...], NodeInfo]] = {}

    def release(self) -> tuple[int, int]:
        return self.release_

    # -- reads: one call each, whatever the fleet size --------------------------------------------
    def nodes(self) -> list[NodeInfo]:
        self.calls["read"] += 1
        self._reboot_the_empty()
        return [self._info(n) for n in self.sim.nodes]

    def _info(self, n) -> NodeInfo:
        now = self.sim.now
        given = self.node_fields.get(n.name, {})
        key = (n.drained, n.reboot_requested, n.reserved_from <= now, n.free, n.gpus, n.reason, n.extra,
               n.boot, n.weight, n.slurmd_start, n.down, n.reason_time, tuple(given.items()))
        known = self._infos.get(n.name)
        if known is not None and known[0] == key:
            return known[1]
        flags = set()
        if n.drained:
            flags.add("DRAIN")
        if n.reboot_requested:
            flags.add("REBOOT_REQUESTED")
        if n.reserved_from <= now:
            flags |= {"MAINTENANCE", "RESERVED"}
        state = "DOWN" if n.down else "IDLE" if n.free == n.gpus else ("ALLOCATED" if n.free == 0 else "MIXED")
        info = NodeInfo(name=n.name, state=state, flags=flags, reason=n.reason, extra=n.extra,
                        boot_time=str(n.boot), partitions=["gpu"], weight=n.weight, slurmd_start=n.slurmd_start,
                        reason_time=n.reason_time, comment=given.get("comment", ""),
                        features=[f for f in given.get("availablefeatures", "").split(",") if f],
                        active_features=[f for f in given.get("activefeatures", "").split(",") if f])
        self._infos[n.name] = (key, info)
        return info

    def ended_jobs(self) -> list[tuple[str, str, list[str]]]:
        """Jobs that ended NODE_FAIL in the last MinJobAge (300 s), as squeue shows them."""
        self.calls["read"] += 1
        now = self.sim.now
        return [(jid, state, nodes) for jid, state, nodes, at in self.sim.ended
                if now - at <= 300]

    def topology(self) -> str:
        """The simulated blocks (`blocks`: name -> nodes), as `scontrol show topology` prints them."""
        from ..common.hostlist import fold

        self.calls["read"] += 1
        return "".join(f"BlockName={name} BlockIndex={i} Nodes={fold(nodes)} BlockSize={len(nodes)}\n"
                       for i, (name, nodes) in enumerate(self.blocks.items()))

    def running_jobs(self) -> list[JobInfo]:
        self.calls["read"] += 1
        jobs: dict[str, list[str]] = {}
        ends: dict[str, float] = {}
        for n in self.sim.nodes:
            for jid, end in n.running.items():
                jobs.setdefault(jid, []).append(n.name)
                ends[jid] = end
        out = []
        for jid, names in jobs.items():
            job = self.sim.by_id.get(jid)
            out.append(JobInfo(jid, names, ends[jid], "gpu", start_time=job.start if job else None,
                               gpus_per_node=job.gpn if job else 0, comment=job.comment if job else "",
                               requeue=True))
        return out

    def requeue_flags(self) -> dict[str, bool]:
        return {j.job_id: True for j in self.running_jobs()}

    # -- a deadline plan's jobs ------------------------------------------------------------------
    def set_job_comment(self, job_id: str, comment: str) -> None:
        self.calls["write"] += 1
        self.sim.by_id[job_id].comment = comment

    def signal_job(self, job_id: str, signal: str, batch: bool) -> None:
        self.calls["write"] += 1
        job = self.sim.by_id[job_id]
        if "gpufleet:signal=" in job.comment:  # a job that checkpoints on the signal
            job.signalled = self.sim.now

    def requeue_jobs(self, job_ids: list[str]) -> None:
        self.calls["write"] += 1
        for jid in job_ids:
            self.sim.stop(self.sim.by_id[jid], requeue=True)
        self.sim.nodes_changed()

    def cancel_jobs(self, job_ids: list[str]) -> None:
        self.calls["write"] += 1
        for jid in job_ids:
            self.sim.stop(self.sim.by_id[jid], requeue=False)
        self.sim.nodes_changed()

    def reservations(self) -> list[Reservation]:
        self.calls["read"] += 1
        return [Reservation(name, sorted(r.nodes), r.start, r.end, {"MAINT", "IGNORE_JOBS"},
                            "ACTIVE" if r.start <= self.sim.now else "INACTIVE")
                for name, r in self.reservations_.items()]

    def node(self, name: str) -> NodeInfo:
        """One node, as `scontrol show node NAME` reads it: one call, without the fleet's."""
        self.calls["read"] += 1
        self._reboot_the_empty()
        return self._info(self.index[name])

    # -- writes: one call over a host list --------------------------------------------------------
    def _each(self, names: list[str]):
        self.calls["write"] += 1
        for name in names:
            yield self.index[name]

    # reasons are cleaned as the real backends clean them (slurm/actions.one_line): what the engine reads
    # back is what Slurm would show, so a reason that could never settle there cannot settle here either
    def prolog_failed(self, name: str) -> None:
        """What slurmd does when a job's prolog fails on the node: drains it, Slurm's own reason."""
        from ..slurm.ownership import SLURM_HOOK_REASONS

        for n in self._each([name]):
            n.drained, n.reason, n.reason_time = True, SLURM_HOOK_REASONS[0], self.sim.now
        self.sim.nodes_changed()

    def drain_nodes(self, names: list[str], reason: str, fields: dict[str, str] | None = None) -> None:
        for n in self._each(names):
            n.drained, n.reason, n.reason_time = True, one_line(reason), self.sim.now
            self._fields(n, fields)
        self.sim.nodes_changed()

    def resume_nodes(self, names: list[str], fields: dict[str, str] | None = None) -> None:
        for n in self._each(names):
            n.drained, n.down, n.reason, n.reason_time = False, False, "", None
            self._fields(n, fields)
        self.sim.nodes_changed()

    def set_reason_nodes(self, names: list[str], reason: str, fields: dict[str, str] | None = None) -> None:
        for n in self._each(names):
            n.reason, n.reason_time = one_line(reason), self.sim.now
            self._fields(n, fields)

    def set_fields(self, name: str, fields: dict[str, str]) -> None:
        """The node's published summary (extra or comment) and features, in one write."""
        for n in self._each([name]):
            self._fields(n, fields)

    def _fields(self, n, fields: dict[str, str] | None) -> None:
        for key, value in (fields or {}).items():
            if key == "extra":
                n.extra = value
            elif key == "resumeafter":   # as slurmctld: the drain ends by itself then (_resume_after)
                self.resume_at[n.name] = self.sim.now + float(value)
            else:  # comment, availablefeatures, activefeatures: kept as given, shown by the next read
                self.node_fields.setdefault(n.name, {})[key] = value

    def set_weight_nodes(self, names: list[str], weight: int) -> None:
        for n in self._each(names):
            n.weight = weight

    def reboot_asap_nodes(self, names: list[str], reason: str, next_state: str = "RESUME") -> None:
        """As Slurm does: drained at once (no new job lands), rebooted once it is empty, then resumed; with
        nextstate=DOWN it comes back DOWN, its reason kept, for whoever asked to return it."""
        for n in self._each(names):
            n.drained, n.reason, n.reboot_requested = True, one_line(reason), True
            n.reason_time, n.reboot_next_state = self.sim.now, next_state
        if self.reboot_s > 0:
            self._reboot_the_empty()  # an empty node's reboot starts now
        self.sim.nodes_changed()

    def _resume_after(self) -> None:
        """Slurm's ResumeAfter: a node drained with it is resumed once its time has come (unless it was
        resumed, or drained again without it, before)."""
        now = self.sim.now
        for name, at in list(self.resume_at.items()):
            if at <= now:
                del self.resume_at[name]
                n = self.index[name]
                if n.drained:
                    n.drained, n.reason, n.reason_time = False, "", None
                    self.sim.nodes_changed()

    def _reboot_the_empty(self) -> None:
        self._resume_after()
        now = self.sim.now
        for n in self.sim.nodes:
            if n.reboot_requested and n.free == n.gpus:
                if self.reboot_s > 0:
                    if n.reboot_at is None:  # its reboot starts: the simulator is woken when it ends
                        n.reboot_at = now + self.reboot_s
                        self.sim.push(n.reboot_at, "rebooted", n.name)
                    if now < n.reboot_at:
                        continue
                n.boot += 1
                n.slurmd_start = now
                n.reboot_requested, n.reboot_at = False, None
                if n.reboot_next_state == "DOWN":
                    # as slurmctld words it (22.05-26.05): the reason kept, what it did appended
                    n.drained, n.down = False, True
                    n.reason = f"{n.reason} : reboot issued : reboot complete"
                else:
                    n.drained, n.reason, n.reason_time = False, "", None

    def create_reservation(self, name: str, nodes: list[str], start: float | None, minutes: int) -> None:
        self.calls["write"] += 1
        start = self.sim.now if start is None else max(start, self.sim.now)
        self.reservations_[name] = SimReservation(set(nodes), start, start + 60 * minutes)
        self._reserve(nodes)

    def update_reservation(self, name: str, nodes: list[str]) -> None:
        self.calls["write"] += 1
        r = self._reservation(name)
        gone = r.nodes - set(nodes)
        r.nodes = set(nodes)
        self._reserve(list(gone | r.nodes))

    def postpone_reservation(self, name: str, start: float) -> None:
        self.calls["write"] += 1
        r = self._reservation(name)
        if r.start <= self.sim.now:
            from ..slurm.base import SlurmError

            # as slurmctld answers (22.05): a begun reservation's start cannot move
            raise SlurmError(f"scontrol update reservationname={name}: Reservation already started")
        r.end, r.start = r.end + (start - r.start), start
        self._reserve(list(r.nodes))

    def delete_reservation(self, name: str) -> None:
        self.calls["write"] += 1
        r = self._reservation(name)
        del self.reservations_[name]
        self._reserve(list(r.nodes))

    def _reservation(self, name: str):
        """The reservation a write names; one that is not there raises what the real backends raise."""
        r = self.reservations_.get(name)
        if r is None:
            from ..slurm.base import ReservationMissing

            raise ReservationMissing(f"reservation {name} is not there: scontrol: Requested reservation is invalid")
        return r

    def submit_job(self, name: str, node: str, reservation: str, partition: str, command: str, minutes: int,
                   comment: str, output: str = "/dev/null") -> str:
        self.calls["write"] += 1
        r = self.reservations_.get(reservation)
        if r is None or node not in r.nodes or r.start > self.sim.now:
            from ..slurm.base import SlurmError

            raise SlurmError(f"sbatch: Requested reservation {reservation} is invalid for {node}")
        job_id = str(9_000_000 + len(self.jobs_))
        end = self.sim.now + self.validation_s
        self.jobs_[job_id] = (name, node, end, comment)
        self.sim.push(end, "validation", job_id)
        return job_id

    def job_state(self, job_id: str) -> str | None:
        self.calls["read"] += 1
        if job_id not in self.jobs_:
            return None  # the jobs this Slurm submitted are the ones it can tell of
        return "RUNNING" if self.sim.now < self.jobs_[job_id][2] else "COMPLETED"

    def jobs_named(self, name: str) -> list[tuple[str, str, str]]:
        self.calls["read"] += 1
        out = []
        for job_id, (jname, node, end, comment) in self.jobs_.items():
            if jname == name:
                state = "RUNNING" if self.sim.now < end else ("FAILED" if node in self.validation_fails else "COMPLETED")
                out.append((job_id, state, comment))
        return out

    def _reserve(self, names: list[str]) -> None:
        for name in names:
            n = self.index[name]
            n.reserved_from = min((r.start for r in self.reservations_.values() if name in r.nodes), default=INF)
            if n.reserved_from > self.sim.now:
                self.sim.push(n.reserved_from, "slot", name)
        self.sim.nodes_changed()


class SimExecutor:
    """Upgrade commands on the simulated clock.  The simulated site's template renders to
    `NODE DRIVER ACTION`; when the command ends the node's slurmd registers again and its health check
    publishes that driver (what a real node does after the reboot that loads the new module)."""

    TEMPLATE = ("{{ node }} {{ target_driver }} {{ action }}{% if target_kernel %} kern={{ target_kernel }}{% endif %}"
                "{% for c, v in target_firmware.items() %} {{ c }}={{ v }}{% endfor %}\n")

    def __init__(self, sim: Any, upgrade_s: float, *, ok: bool | set[str] = True, reboots: bool = True,
                 publishes: str | None = "target", fields: Any = None, output: str = ""):
        """ok: the command's exit status (or the nodes whose command succeeds); reboots: the node comes back
        rebooted (or merely up); publishes: "target" (the driver installed), another version (a bad
        install), or None (no check); output: what a failed command printed last."""
        self.sim = sim
        self.upgrade_s = upgrade_s
        self.ok, self.reboots, self.publishes = ok, reboots, publishes
        self.output = output
        self.fields = fields  # node -> extra summary keys (kern, modf, gsp) its health check publishes
        self.active: dict[str, float] = {}
        self.done: dict[str, CommandResult] = {}
        self.index = {x.name: x for x in sim.nodes}

    def start(self, node: str, script: str, timeout_s: float) -> None:
        name, driver, _, *rest = shlex.split(script)
        self.active[name] = self.sim.now + self.upgrade_s
        # the rest of the bundle, as the health check publishes it after the reboot
        installed = {PUBLISHED.get(k, k): v for k, _, v in (part.partition("=") for part in rest)}
        self.sim.push(self.active[name], "upgraded", (name, driver, installed))

    def complete(self, name: str, driver: str, installed: dict[str, str] | None = None) -> None:
        n = self.index[name]
        if self.active.pop(name, None) is None:
            return  # a command lost with a crashed `apply`: its process ended with it
        if self.reboots:
            n.boot += 1
            n.slurmd_start = self.sim.now
        if self.publishes is not None:
            drv = driver if self.publishes == "target" else self.publishes
            summary = {"gpufleet": 1, "v": "ok", "drv": drv, "gpus": f"{n.gpus}x{n.model}",
                       "t": stamp(self.sim.now), **(installed if self.publishes == "target" else {}),
                       **(self.fields(name) if self.fields else {})}
            n.extra = json.dumps(summary, separators=(",", ":"))
        n.upgraded = True
        ok = name in self.ok if isinstance(self.ok, set) else self.ok
        self.done[name] = CommandResult(ok, 0 if ok else 1, "" if ok else self.output)

    def running(self) -> set[str]:
        return set(self.active)

    def finished(self) -> dict[str, CommandResult]:
        out, self.done = self.done, {}
        return out
