"""One strategy's replay of fleet faults (faultsim.fleet_faults runs one per strategy and seed): the job
simulator with faults (FaultSim), the events of the faults, detections, remedies and repairs
(FaultController), the product's own carrier on the in-memory Slurm for the gpufleet strategies (_Lab), and
the figures of the run."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .failures import MAX_BATCH_REQUEUE
from .faultmodel import CRASH_S, EPILOG_S, Fault, FaultModel
from .jobsim import Controller, Simulator


@dataclass(frozen=True)
class RunSetup:
    """What one strategy's replay is: the strategy and its mechanisms, the fault model and its times, the
    product's ladder and settings (the gpufleet strategies), the health check's interval and the domains."""

    strategy: str
    mech: tuple[str, ...]
    times: dict[str, float]
    hc_interval_s: float
    carried: bool            # the product's own carrier on the in-memory Slurm (the gpufleet strategies)
    ladder: Any
    settings: Any
    model: FaultModel
    domain_size: int
    switch_repair_s: float


class FaultSim(Simulator):
    """The job simulator with faults: a job placed on a failed GPU crashes, a prolog that sees the fault
    fails; what each job ran and waited is kept for the figures."""

    setup: RunSetup
    ctl: FaultController

    def __init__(self, *a):
        super().__init__(*a)
        self.first_start: dict[str, float] = {}
        self.done_at: dict[str, float] = {}
        self.active_fault: dict[int, Fault] = {}    # node -> its fault, until it is back in service
        self.restarts_gpu_s = 0.0
        self.black_hole_crashes = 0
        self.lost_jobs = 0
        self.ran_s: dict[str, float] = {}           # job -> seconds it ran (its waits are the rest)

    def stop(self, job, requeue, failed=False):
        if job.start is not None:
            self.ran_s[job.id] = self.ran_s.get(job.id, 0.0) + self.now - job.start
        super().stop(job, requeue, failed)

    def _start(self, job, placed):
        for i in placed:
            f = self.active_fault.get(i)
            if f and f.detected_at is None and "prolog" in self.setup.mech and "prolog" in f.cls.seen_by \
                    and f.cls.effect == "gpu":
                self.ctl.detect(self, f, "prolog")  # the prolog fails: the job waits for other nodes
                return
        self.first_start.setdefault(job.id, self.now)
        if job.gen > 0:
            self.restarts_gpu_s += self.restart_s * job.gpn * len(placed)
        super()._start(job, placed)
        if any(i in self.active_fault and self.active_fault[i].cls.effect in ("gpu", "link")
               and self.active_fault[i].cls.severity != "low" for i in placed):
            self.push(self.now + CRASH_S, "tick", ("crash", (job, job.gen)))

    def _end(self, job):
        if job.start is not None:
            self.ran_s[job.id] = self.ran_s.get(job.id, 0.0) + self.now - job.start
        super()._end(job)
        self.done_at[job.id] = self.now


class FaultController(Controller):
    # the rollout's measures, taken at every event over every node (Simulator._advance), are not this
    # simulator's: it keeps its own (out_by, out_since, peak_out) where a node changes
    active = False

    def __init__(self, run: RunSetup):
        super().__init__(0, 0.0)
        self.setup = run
        self.out_by: dict[str, float] = {"failures": 0.0, "remedies": 0.0, "false_drains": 0.0}
        self.out_since: dict[int, tuple[float, str]] = {}
        self.resolved = {"reset": 0, "reboot": 0, "repair": 0, "suspect": 0, "rack": 0}
        self.rack_fix_at: dict[int, float] = {}    # domain -> when its switch-tray swap is done
        self.breaker_trips = 0
        self.escalated: set[int] = set()            # domains drained whole by the rack escalation
        self.rack_escalations = 0
        self.repairing: set[int] = set()             # nodes whose admin repair is under way
        self.peak_out = 0                             # the most nodes out of service at once
        self.false_drains = 0
        self.ladder_log: list[tuple[int, str, str, str]] = []   # (node, class, from, to): the carrier's moves
        self.next_check: dict[int, float] = {}       # node -> its next health check, while under remedy
        self.fault_boot: dict[int, int] = {}          # node -> its boot when its fault struck
        self.breaker_open = False
        self.lab = None

    def start(self, sim):
        self.started = True
        if self.setup.carried:
            self.lab = _Lab(sim, self.setup.settings, self.setup.model, self.setup.ladder, self.setup.strategy, self.setup.domain_size)

    def on_tick(self, sim, payload):
        kind, data = payload
        getattr(self, "_" + kind)(sim, data)

    def on_change(self, sim, freed=None):
        """No rollout here: a job's end changes nothing of ours (a reboot asked for ends at its own
        event, `rebooted`)."""

    def _slot(self, sim, name):
        """A reservation's start: the validation reservations start when made."""

    # -- what happens --------------------------------------------------------------------------
    def _fault(self, sim, f: Fault):
        n = sim.nodes[f.node]
        if f.node in sim.active_fault or (n.drained and f.until is None):
            return  # a node out of service, or already failed: nothing runs there to fail
        f.hit = True   # a logged fault strikes a node out of service too: it is unusable until its end
        if f.until is not None:
            sim.push(f.until, "tick", ("expire", f))
        if f.cls.severity != "low":   # a low-severity fault (Meta's low tier) degrades; its jobs go on
            self._crash_jobs(sim, f.node)
        if f.cls.effect == "job":
            return
        sim.active_fault[f.node] = f
        self.fault_boot[f.node] = n.boot
        if f.cls.effect == "node":  # slurmd is gone: Slurm's NODE_FAIL, whatever the strategy
            self.detect(sim, f, "slurm")
            return
        visible = f.cls.effect == "gpu"
        if visible and "healthcheck" in self.setup.mech and "healthcheck" in f.cls.seen_by:
            sim.push(sim.now + f.phase * self.setup.hc_interval_s, "tick", ("detect", (f, "healthcheck")))
        sim.push(sim.now + self.setup.times["admin_hours"] * 3600, "tick", ("detect", (f, "admin")))

    def _crash_jobs(self, sim, i: int) -> bool:
        crashed = False
        for job_id in list(sim.nodes[i].running):
            job = sim.by_id[job_id]
            job.requeues += 1
            requeue = job.requeues <= MAX_BATCH_REQUEUE
            sim.stop(job, requeue, failed=True)
            if not requeue:  # held by Slurm after MaxBatchRequeue requeues: it ends here, unfinished
                sim.lost_jobs += 1
                sim.done_at[job.id] = sim.now
            crashed = True
        return crashed

    def _crash(self, sim, data):
        job, gen = data
        if job.gen != gen or job.start is None:
            return
        bad = [i for i in job.placed if i in sim.active_fault]
        if not bad:
            return
        sim.black_hole_crashes += 1
        for i in bad:
            self._crash_jobs(sim, i)
            f = sim.active_fault.get(i)
            if f and f.detected_at is None and "epilog" in self.setup.mech and "epilog" in f.cls.seen_by and f.cls.effect == "gpu":
                sim.push(sim.now + EPILOG_S, "tick", ("detect", (f, "epilog")))

    def _detect(self, sim, data):
        f, how = data
        self.detect(sim, f, how)

    def detect(self, sim, f: Fault, how: str) -> None:
        if f.detected_at is not None or sim.active_fault.get(f.node) is not f:
            return
        f.detected_at, f.how = sim.now, how
        if self.setup.strategy.startswith("gpufleet") and how not in ("slurm", "admin"):
            if f.domain is not None and f.domain in self.escalated:
                return   # held by its rack's escalation: nothing more to drain
            if f.cls.severity != "low":
                self._crash_jobs(sim, f.node)   # the GPU's fault ends its jobs, whatever drains the node
            self._check(sim, f.node, how)   # the carrier: its ladder, its breaker, its rack escalation
            return
        self._take(sim, f.node, "failures")
        if f.cls.severity != "low":
            # a high-severity drain: its jobs are requeued at once; a low-severity one lets them end
            self._crash_jobs(sim, f.node)
        # an admin looks, reboots where a reboot can help, else sends it for repair
        wait = self.setup.times["admin_hours"] * 3600 if how != "admin" else 0.0
        if f.level == "rack":  # the admin finds the switch tray: one swap for the whole domain
            self._rack_repair(sim, f.domain, sim.now + wait)
        elif f.level in ("reset", "reboot"):
            self._after(sim, f, wait + self.setup.times["reboot_minutes"] * 60, "reboot")
        else:
            self._after(sim, f, self._repair_in(sim, f, wait), "repair")

    def _repair_in(self, sim, f: Fault, wait: float) -> float:
        """How long a repair takes from now, an admin looking after `wait`: `repair_hours`, or for a logged
        fault until its logged end (and no sooner than the admin looks)."""
        if f.until is not None:
            return max(wait, f.until - sim.now)
        return wait + self.setup.times["repair_hours"] * 3600

    def _expire(self, sim, f: Fault) -> None:
        """A logged fault's end: the node is usable again.  The gpufleet strategies' next check finds it
        clean (or the admin's repair, under way, ends now); the others' repair was set for this end."""
        if not self.setup.carried or sim.active_fault.get(f.node) is not f or f.how in ("slurm", "admin"):
            return   # (one Slurm or an admin took out: their repair, set for this end, brings it back)
        from ..remedy.table import SUSPECT

        # gone while the node was held as a suspect: the hold's re-checks return it
        self._fixed(sim, f, "suspect" if self.lab.where(sim.nodes[f.node]) == SUSPECT else "repair")
        if f.node not in self.repairing:
            self._next(sim, f.node)

    # -- rack-correlated events (--domain-size) ----------------------------------------------------
    def _escalated(self, sim, i: int) -> None:
        """The carrier's rack escalation drained node i's domain whole (its members hold the rack's
        reason in the in-memory Slurm): their jobs end, the switch-tray swap is under way."""
        from ..remedy.table import RACK

        dom = sim.active_fault[i].domain if i in sim.active_fault else None
        if dom is None or dom in self.escalated or self.lab.where(sim.nodes[i]) != RACK:
            return
        self.escalated.add(dom)
        self.rack_escalations += 1
        for j in self._domain_nodes(sim, dom):
            self._crash_jobs(sim, j)
            self._sync(sim, j)
        self._rack_repair(sim, dom, sim.now + self.setup.times["admin_hours"] * 3600)

    def _domain_nodes(self, sim, dom: int) -> range:
        return range(dom * self.setup.domain_size, min(len(sim.nodes), (dom + 1) * self.setup.domain_size))

    def _rack_repair(self, sim, dom: int, admin_at: float) -> None:
        """The switch-tray swap, once per domain: done `switch_repair_hours` after an admin looks."""
        if dom in self.rack_fix_at:
            return
        done = admin_at + self.setup.switch_repair_s
        self.rack_fix_at[dom] = done
        sim.push(done, "tick", ("rack_fixed", dom))

    def _rack_fixed(self, sim, dom: int) -> None:
        self.rack_fix_at.pop(dom, None)
        self.escalated.discard(dom)
        for j in self._domain_nodes(sim, dom):
            g = sim.active_fault.get(j)
            if g is not None and g.domain == dom:
                self._back(sim, g, "rack")
            elif g is None:
                self._return(sim, j)   # drained whole by the escalation, its own GPUs fine

    # -- the gpufleet strategies: the product's carrier on the in-memory Slurm ---------------------
    def _check(self, sim, i: int, hook: str = "healthcheck") -> None:
        """One run of the node's check (health check, prolog or epilog): what the node shows now,
        judged, decided and self.setup.carried out by remedy/carrier.py through the actuator."""
        n = sim.nodes[i]
        f = sim.active_fault.get(i)
        if f is not None and f.domain is not None and f.domain in self.escalated:
            return  # held by its rack's escalation: its repair is the rack's
        lab = self.lab
        info = lab.slurm.node(n.name)   # a reboot that is due ends at this read
        if f is not None and n.boot != self.fault_boot.get(i, n.boot) and f.level in ("reset", "reboot"):
            self._fixed(sim, f, "reboot")  # the reboot cleared it
            f = None
        moves = lab.run(n, hook, info, f, lambda: self._reread(sim, i))
        self.ladder_log += [(i, f.cls.name if f else "", a, b) for a, b, _ in moves]
        if lab.blocked:
            self._tripped(sim)
        self._escalated(sim, i)
        self._sync(sim, i)
        self._next(sim, i)

    def _reread(self, sim, i: int):
        """The GPUs read again after the reset: a fault a reset fixes is gone."""
        f = sim.active_fault.get(i)
        if f is not None and f.level == "reset":
            self._fixed(sim, f, "reset")
            f = None
        return self.lab.report(sim.nodes[i], f)

    def _fixed(self, sim, f: Fault, how: str) -> None:
        f.resolved_by = how
        self.resolved[how] += 1
        sim.active_fault.pop(f.node, None)

    def _next(self, sim, i: int) -> None:
        """The node's next check while it is under remedy (time is skipped where nothing changes):
        every health-check interval; a node drained for repair waits for the admin's repair."""
        from ..remedy import table as T

        n = sim.nodes[i]
        where = self.lab.where(n)
        f = sim.active_fault.get(i)
        if where == T.OTHERS:
            return  # someone else's (Slurm's NODE_FAIL, an admin's): the admin's path has it
        if where == T.REPAIR or (where == T.DRAINED and f is not None and (f.cls.finding[1] == "drain" or any(
                r["rung"] == "repair" for r in self.lab.history.pending_remedies(n.name)))):
            # drained for repair, or for a finding no rung remedies: an admin looks, then repairs
            if i not in self.repairing:
                self.repairing.add(i)
                sim.push(sim.now + (self._repair_in(sim, f, self.setup.times["admin_hours"] * 3600) if f is not None else
                                    (self.setup.times["admin_hours"] + self.setup.times["repair_hours"]) * 3600), "tick", ("repaired", i))
            return
        if where in (T.IN_SERVICE, T.OTHERS) and i not in sim.active_fault:
            return
        at = sim.now + self.setup.hc_interval_s
        if self.next_check.get(i, math.inf) > sim.now:
            if i in self.next_check and self.next_check[i] <= at:
                return
        self.next_check[i] = at
        sim.push(at, "tick", ("check_due", i))

    def _check_due(self, sim, i: int) -> None:
        if self.next_check.get(i) == sim.now:
            del self.next_check[i]
            self._check(sim, i)

    def _repaired(self, sim, i: int) -> None:
        """The admin's repair is done: the fault is gone, and `fleet repaired` sends the node back
        through its validation run."""
        self.repairing.discard(i)
        f = sim.active_fault.get(i)
        if f is not None:
            self._fixed(sim, f, "repair")
        self.lab.repaired(sim.nodes[i])
        self._sync(sim, i)
        self._next(sim, i)

    def _rebooted(self, sim, name: str) -> None:
        self._check(sim, self.lab.position[name])

    def _validation(self, sim, job_id: str) -> None:
        self._check(sim, self.lab.position[self.lab.slurm.jobs_[job_id][1]])

    def _tripped(self, sim) -> None:
        """The actuator's breaker held a drain back: open until a person resets it, within admin_hours."""
        if not self.breaker_open:
            self.breaker_open = True
            self.breaker_trips += 1
            sim.push(sim.now + self.setup.times["admin_hours"] * 3600, "tick", ("breaker_reset", None))

    def _breaker_reset(self, sim, _) -> None:
        from ..slurm import breaker

        breaker.reset(self.lab.settings.breaker_path)
        self.breaker_open = False
        for i in list(sim.active_fault):
            self._next(sim, i)

    def _sync(self, sim, i: int) -> None:
        """Out of service as the in-memory Slurm shows it: drained, down, rebooting or in its own
        validation reservation."""
        n = sim.nodes[i]
        if n.out(sim.now) and i not in self.out_since:
            self.out_since[i] = (sim.now, "failures")
            self.peak_out = max(self.peak_out, len(self.out_since))
        elif not n.out(sim.now) and i in self.out_since:
            since, cause = self.out_since.pop(i)
            self.out_by["remedies" if cause == "failures" else cause] += (sim.now - since) * n.gpus

    def _after(self, sim, f: Fault, delay: float, how: str) -> None:
        sim.push(sim.now + delay, "tick", ("back", (f, how)))

    def _back(self, sim, f: Fault | tuple, how: str | None = None):
        if isinstance(f, tuple):
            f, how = f
        f.resolved_by = how
        self.resolved[how] += 1
        sim.active_fault.pop(f.node, None)
        self._return(sim, f.node)

    def _alarm(self, sim, i: int):
        n = sim.nodes[i]
        if self.setup.strategy != "drain-on-any" or n.drained or i in sim.active_fault:
            return  # a warning: a severity-aware check publishes it and drains nothing
        self.false_drains += 1
        self._take(sim, i, "false_drains", kill=False)
        sim.push(sim.now + self.setup.times["false_drain_hours"] * 3600, "tick", ("release", i))

    def _release(self, sim, i: int):
        if i not in sim.active_fault:
            self._return(sim, i)

    def _take(self, sim, i: int, cause: str, kill: bool = True) -> None:
        n = sim.nodes[i]
        if self.setup.carried:   # slurmd gone, or an admin's find: Slurm's own DOWN, not ours
            n.down, n.reason, n.reason_time = True, "Not responding", sim.now
            sim.nodes_changed()
            self._sync(sim, i)
            return
        if not n.drained:
            n.drained = True
            self.out_since[i] = (sim.now, cause)
            self.peak_out = max(self.peak_out, len(self.out_since))
            sim.nodes_changed()

    def _return(self, sim, i: int) -> None:
        n = sim.nodes[i]
        if self.setup.carried:
            info = self.lab.slurm.node(n.name)
            if info.down and not info.drained:  # Slurm's own DOWN: the admin's repair brings it back
                n.down, n.reason, n.reason_time = False, "", None
                sim.nodes_changed()
            else:  # the rack back whole: its members resumed, ours to resume
                self.lab.actuator.resume([info])
            self._sync(sim, i)
            # its next health check finds it clean: its episode ends there, so the reboots of this fault
            # do not count against the next one (time is skipped only where nothing is recorded)
            at = sim.now + self.setup.hc_interval_s
            self.next_check[i] = at
            sim.push(at, "tick", ("check_due", i))
            return
        if n.drained:
            since, cause = self.out_since.pop(i, (sim.now, "failures"))
            self.out_by["remedies" if cause == "failures" else cause] += (sim.now - since) * n.gpus
            n.drained = False
            sim.nodes_changed()


class _Lab:
    """What the gpufleet strategies run on: the in-memory Slurm (simulators/simslurm.py) over the simulated
    nodes, the product's actuator (ownership, the breaker) on it, one history file for the fleet on the
    simulated clock, and the carrier (remedy/carrier.py) run as the hooks run it.  The node's GPUs are
    what its fault shows: the fault's finding, or nothing once fixed; a reset takes no simulated time of
    its own (the node waits in its drain for the next check)."""

    def __init__(self, sim, settings, model: FaultModel, ladder, strategy: str, domain_size: int = 0):
        import dataclasses
        import os
        import tempfile

        from ..policy import DomainSpec, Policy, SlurmSettings
        from ..records.history import History
        from ..slurm.actuator import make_actuator
        from ..slurm.ownership import HEALTH
        from .simslurm import SimSlurm

        self.sim = sim
        self.dir = tempfile.TemporaryDirectory(prefix="gpufleet-faultsim-")
        base = settings or SlurmSettings()
        # the site's settings, their files kept in a directory of the run's own
        self.settings = dataclasses.replace(base, state_dir=self.dir.name,
                                            breaker_file=os.path.join(self.dir.name, "breaker.json"))
        # the domains of --domain-size as a site's [[domain]]s: the carrier's rack escalation reads them
        names = [n.name for n in sim.nodes]
        self.policy = Policy(slurm=self.settings, domains=tuple(
            DomainSpec(f"rack{d}", tuple(names[d * domain_size:(d + 1) * domain_size]))
            for d in range(math.ceil(len(names) / domain_size)))) if domain_size else Policy(slurm=self.settings)
        self.ladder = ladder
        self.slurm = SimSlurm(sim, validation_s=model.times["validation_minutes"] * 60)
        self.slurm.reboot_s = model.times["reboot_minutes"] * 60
        self.history = History(os.path.join(self.dir.name, "fleet.db"), clock=lambda: sim.now)
        self.history.conn.execute("PRAGMA synchronous = OFF")  # a scratch file: no fsync per row
        # the fleet's nodes in one file (a node's own file holds one): each node's rows found by its name
        for table in ("runs", "actions", "reboots", "remedies", "case_closes", "validations", "suspects"):
            self.history.conn.execute(f"create index if not exists [sim_{table}_node] on [{table}] (node)")
        self.actuator = make_actuator(self.slurm, HEALTH, self.settings, clock=lambda: sim.now, modes=ladder.mode)
        self.position = {n.name: i for i, n in enumerate(sim.nodes)}
        self.blocked = False
        # the ladder without its reset rung: the same finding under the reboot-first action
        self.action_of = (lambda a: "reboot_node" if a == "reset_gpu" else a) \
            if strategy == "gpufleet-reboot-first" else (lambda a: a)

    def finding(self, f: Fault):
        from ..judging.findings import Finding

        check, severity, action = f.cls.finding
        return Finding(check, severity, self.action_of(action), 0, f.cls.what)

    def report(self, node, f: Fault | None):
        from ..judging.findings import verdict
        from ..judging.pipeline import Report
        from ..readers.snapshot import Gpu, NodeSnapshot, Process

        findings = [self.finding(f)] if f is not None and f.cls.effect == "gpu" else []
        busy = [Process(0, "job")] if node.running else []
        snap = NodeSnapshot(host=node.name, gpus=[Gpu(k, processes=list(busy)) for k in range(node.gpus)],
                            source="simulated")
        return Report(verdict(findings), findings, snap)

    def run(self, node, hook: str, info, f: Fault | None, reread) -> list[tuple[str, str, str]]:
        """The hooks' act without the summary: record the run, step, carry; the carrier's moves."""
        from ..remedy.carrier import Carrier, GpuReset
        from ..remedy.ladder import ResetResult

        report = self.report(node, f)
        self.history.record_run(node.name, hook, report.verdict, report.findings)
        carrier = Carrier(node.name, self.policy, self.history, self.slurm, self.actuator, self.ladder, GpuReset(
            run=lambda gpus, timeout: ResetResult(True, "reset (simulated)", 0.0), reread=reread))
        try:
            done = carrier.carry(carrier.step(hook, info, report), hook)
        finally:
            carrier.close()
        if done.action.kind == "fail":
            # the failed prolog: slurmd drains the node ("Prolog error"), and the prolog's helper puts the
            # carrier's reason in its place through the actuator (hooks/prolog.replace_hook_reason)
            shown = self.slurm.node(node.name)
            if not (shown.drained or shown.down or shown.rebooting):
                from ..remedy.escalation import reason_after_prolog

                self.slurm.prolog_failed(node.name)
                reason_after_prolog(self.actuator, self.policy.domains, self.slurm.node(node.name),
                                    done.action.reason, modes=self.ladder.mode)
        from ..slurm import breaker

        # held back by the breaker: this node's write, or its rack's escalation after it
        self.blocked = bool(done.blocked) or breaker.state(self.settings.breaker_path) is not None
        return carrier.moves

    def where(self, node):
        from ..remedy.table import state_of

        return state_of(self.slurm.node(node.name), validating=self.history.open_validation(node.name) is not None,
                        suspect=self.history.open_suspect(node.name) is not None)

    def repaired(self, node) -> None:
        """`fleet repaired` (the product's remedy.handback): a validation run before the node returns."""
        from ..remedy.handback import hand_back

        hand_back(self.actuator, [self.slurm.node(node.name)])
