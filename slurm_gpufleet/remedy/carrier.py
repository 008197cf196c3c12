"""The one carrier of a node's remedies: what `decide` chose, carried out through the actuator.

Every entry point that judges a node runs it: the health check, the prolog and the epilog
(hooks/common.act) and the fault simulator (faultsim.py, on the in-memory Slurm).  A run is two calls:

* `step`: settle what the ladder tried before (did the reboot fix it?), follow an open validation, decide
  (for the prolog, a fault fails the job: `fail`, whose drain slurmd makes),
  and carry out the rungs that cannot wait for the summary: a GPU reset (drain, reset, mark it in the
  kernel log, read the GPUs again through the caller's `GpuReset.reread`, decide again on what it left)
  and the start of a validation run.  Observe mode stops here: what would be done is recorded, nothing is.
* `carry`: the node's write (drain, reason, resume, reboot), with the caller's fields (its published
  summary and features) in the same Slurm call; the remedy recorded; a rack escalation where the drain
  was the rack's fault.

Every move is held to remedy/table.py: one the table does not have raises `IllegalMove` before any
write.  The history (history.History) and the clock it keeps are the caller's: the hooks' is the node's
SQLite file and the wall clock, the simulator's its own file and simulated time.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..slurm import effects as E
from .decide import Action, Kind, Ladder, decide
from .table import (
    DRAINED,
    IN_SERVICE,
    REBOOTING,
    REPAIR,
    RESETTING,
    RETURNING,
    SUSPECT,
    VALIDATING,
    IllegalMove,
    RemedyState,
    legal,
    state_of,
    target_of,
)

if TYPE_CHECKING:
    from ..judging.findings import Finding
    from ..judging.pipeline import Report
    from ..slurm.base import NodeInfo
    from .ladder import ResetResult

from .validation import UNVERIFIED, VALIDATION_FAILED, ValidationRun

log = logging.getLogger("slurm-gpufleet")


@dataclass
class GpuReset:
    """How this caller resets GPUs and reads them again (the carrier's one edge to the node).

    run(gpus, timeout_s): the site's reset command (remedy/ladder.run_reset) or the simulator's;
    reread(): the GPUs read and judged again (expect_idle), raising ReportError/OSError when unreadable;
    mark(pci_ids): say in the kernel log that these GPUs were reset; why not, or None;
    time_left(): seconds this run may still give the reset and its read (a health check's share of
    slurmd's 60 s), or None for no bound."""

    run: Callable[[list[int], float], ResetResult]
    reread: Callable[[], Report]
    mark: Callable[[list[str]], str | None] = lambda pcis: None
    time_left: Callable[[], float | None] = lambda: None


@dataclass
class Step:
    """What `step` decided, and what `carry` writes."""

    action: Action
    report: Report
    info: NodeInfo
    findings: list[Finding]
    final: str
    before: RemedyState
    observed: Action | None = None     # observe mode: what full mode would have done
    after: RemedyState | None = None   # where this run's action takes the node (observe mode: where it is)


@dataclass
class Carried:
    action: Action
    ok: bool = True
    error: str | None = None
    published: bool = False            # the caller's fields went out with the write
    blocked: str | None = None         # the breaker's why, where it held the write back


@dataclass
class Carrier(ValidationRun):
    node: str
    policy: Any                        # policy.Policy: [slurm], the node group's mode, [[domain]], [models]
    history: Any                       # history.History (or hooks.common.KeptHistory around one)
    backend: Any                       # for reads: the validation job's state, the fleet for escalation
    actuator: Any                      # slurm.actuator.make_actuator(backend, HEALTH, settings): every write, as
                                       # typed effects (slurm/effects.py) through its `apply`
    ladder: Ladder
    gpu_reset: GpuReset | None = None
    moves: list[tuple[str, str, str]] = field(default_factory=list)   # (from, to, action): this run's moves
    _lock: int | None = None
    _rack: bool | None = None          # this run's answer of _rack_due

    @property
    def settings(self):
        return self.policy.slurm

    # -- a run's decision ---------------------------------------------------------------------------
    def step(self, hook: str, info: NodeInfo, report: Report, extra: list[Finding] | None = None) -> Step:
        from ..judging.findings import verdict

        findings = report.findings + (extra or [])
        final = verdict(findings)
        self.settle(info, findings)
        if hook == "healthcheck" and self.ladder.mode != "observe":
            info = self._follow_validation(info, final) or info
        before = self.where(info)
        action = self._decide(info, report, final, findings)
        if hook == "prolog" and final in ("reboot", "drain"):
            action = _fail_job(action, findings)
        if action.kind in ("reset", "reboot") and self.ladder.mode == "full":
            # one remedy of a node at a time: the epilog and the health check can run together, and both saw
            # the same history (CI, 26.05: two resets for one fault).  Under the lock the history is read
            # again; it is held until this run's remedy is carried out and recorded (`close`).
            self._lock = _remedy_lock(self.settings.state_dir, self.node)
            action = self._decide(info, report, final, findings) if self._lock is not None else \
                Action("none", why="another run of ours is remedying this node")
        if action.kind == "reset" and self.ladder.mode == "full":
            self._move(before, RESETTING, "reset")
            reset_fault = action.finding
            after = self._reset(info, action, report, hook)
            if isinstance(after, str):
                action = Action("none", why=after)
            else:
                report, info = after
                findings = report.findings + (extra or [])
                final = verdict(findings)
                action = self._decide(info, report, final, findings)
                if final in ("ok", "warn") and self.settings.validation_command and action.kind == "none":
                    # fixed: back to work only through a validation run (returning.py)
                    from ..slurm.actions import fault_words
                    from .returning import validate_reason

                    action = Action("set_reason", reason=validate_reason(f"reset: {fault_words(reset_fault)}"),
                        why="the reset fixed it: a validation run before it returns")
                before = RESETTING
        if action.kind == "validate" and not self.settings.validation_command:  # turned off since it was asked
            action = Action("resume", why=f"{action.why.split(':')[0]}; validation_command is \"\"")
        target = target_of(action.kind, action.reason, action.rung, before)
        if action.kind == "fail" and not legal(before, target):
            target = before   # held already (someone else's, rebooting, its rack's): slurmd's drain adds no state of ours
        if before == target == RESETTING:  # the reset is over: a node still held waits in its drain for the next rung
            target = DRAINED
        self._move(before, target, action.kind)
        if action.kind == "validate" and self.ladder.mode != "observe":
            action = self._start_validation(info, hook) or action
        observed = None
        if self.ladder.mode == "observe" and action.kind != "none":
            # staged enablement: what would be done is decided, logged and published; nothing is touched
            observed = action
            self.history.record_action(self.node, hook, "observe", action.reason, f"would {action.kind}: {action.why}",
                                       True)
            action = Action("none", why=f"observe mode: would {action.kind} ({action.reason or action.why})")
        after = before if observed is not None else target
        return Step(action, report, info, findings, final, before, observed, after)

    def where(self, info: NodeInfo) -> RemedyState:
        return state_of(info, validating=self.history.open_validation(self.node) is not None,
                        suspect=self.history.open_suspect(self.node) is not None)

    def _move(self, before: RemedyState, after: RemedyState, kind: str) -> None:
        if not legal(before, after):
            raise IllegalMove(f"{self.node}: {kind} moves {before} -> {after}, which remedy/table.py does not have")
        self.moves.append((str(before), str(after), kind))

    def _decide(self, info: NodeInfo, report: Report, final: str, findings: list[Finding]) -> Action:
        from ..readers.snapshot import known
        from ..slurm.actions import worst
        from .ladder import gpus_idle, reset_targets

        s = report.snapshot
        f = worst(findings, "reboot")
        idle = f is not None and gpus_idle(s, reset_targets(s, f, self.policy.models))
        return decide(info, final, findings,
                      self.history.node_history(self.node, attempt_window_s=self.ladder.attempt_window_s),
                      self.settings.clean_runs_to_resume, host=s.host_facts, driver=known(s.driver_version),
                      ladder=self.ladder, gpus_idle=idle, now=self.actuator.clock(),
                      rack_due=final == "reboot" and self._rack_due(info, f))

    def _rack_due(self, info: NodeInfo, f: Finding | None) -> bool:
        """A reset- or reboot-fixable rack-level finding: would the node's drain for it escalate its rack?
        Read once a run (the fleet, on this path alone)."""
        from ..slurm.actions import make_reason
        from .escalation import RACK_CHECKS, due_with

        if f is None or f.check not in RACK_CHECKS or info.drained or info.down or info.rebooting:
            return False
        if self._rack is None:
            self._rack = due_with(self.backend, self.policy.domains, self.settings, info, make_reason(f),
                                  self.actuator.clock())
        return self._rack

    # -- carrying it out ------------------------------------------------------------------------------
    def carry(self, step: Step, hook: str, fields: dict[str, str] | None = None) -> Carried:
        """The node's one write: the action, with `fields` riding in it, by its kind's handler (CARRY).
        Returns what was done."""
        from ..slurm import SlurmError

        action, info, node = step.action, step.info, self.node
        out = Carried(action)
        try:
            action = CARRY[action.kind](self, step, action, out, hook, fields)
            if action.rung in ("repair", "cool_off") and action.kind in (Kind.DRAIN, Kind.SET_REASON, Kind.FAIL) \
                    and not out.blocked:
                self._record_remedy(action, info.boot_time)
            if action.kind in (Kind.DRAIN, Kind.REBOOT) and step.before == SUSPECT and not out.blocked:
                # held out of service now by the drain: the suspect's reservation goes
                self._end_suspect("repair" if action.rung == "repair" else "ended")
        except SlurmError as exc:
            out.ok, out.error = False, str(exc)
        if out.ok and action.kind in (Kind.DRAIN, Kind.SET_REASON) and out.published and _rack_fault(step.findings):
            from .escalation import escalate

            said = escalate(self.actuator, self.policy.domains, node, modes=self.policy.mode_of)
            if said:
                self.history.record_action(node, hook, "rack", "", said, True)
        if action.kind != Kind.NONE or not out.ok:
            self.history.record_action(node, hook, action.kind, action.reason, action.why, out.ok, out.error)
            (log.info if out.ok else log.error)("%s %s%s: %s%s", hook, action.kind,
                                                f" '{action.reason}'" if action.reason else "", action.why,
                                                f" FAILED: {out.error}" if out.error else "")
        else:
            log.info("%s verdict %s: %s", hook, step.final, action.why)
        out.action = action
        return out

    # -- the handlers, one per kind (CARRY below): each makes its writes and returns the action as done ---
    def _blocked(self, out: Carried, hook: str, action: Action, done, why: str) -> Action:
        """A write the breaker held back: said in the history, and the action becomes none."""
        out.blocked = done.breaker
        self.history.record_action(self.node, hook, "breaker", action.reason, out.blocked, True)
        return Action(Kind.NONE, why=f"{why}: {out.blocked}")

    def _carry_drain(self, step: Step, action: Action, out: Carried, hook: str, fields) -> Action:
        if action.resume_after_s and _has_resume_after(self.backend):
            fields = {**(fields or {}), "resumeafter": str(action.resume_after_s)}
        (done,) = self.actuator.apply(E.Drain((step.info,), action.reason, fields or None))
        out.published = bool(done.done or done.reason_set)
        return self._blocked(out, hook, action, done, "not drained, breaker open") if done.blocked else action

    def _carry_set_reason(self, step: Step, action: Action, out: Carried, hook: str, fields) -> Action:
        out.published = bool(self.actuator.apply(E.SetReason((step.info,), action.reason, fields or None))[0].done)
        return action

    def _carry_fail(self, step: Step, action: Action, out: Carried, hook: str, fields) -> Action:
        # slurmd drains the node for the failed prolog; the breaker is asked first, as for our drains
        (done,) = self.actuator.apply(E.FailProlog((step.info,)))
        if done.breaker:
            return self._blocked(out, hook, action, done, "the job runs, the node is not drained: breaker open")
        return action

    def _carry_resume(self, step: Step, action: Action, out: Carried, hook: str, fields) -> Action:
        from ..slurm.ownership import rack_of_reason

        if rack_of_reason(step.info.reason) is None:
            out.published = bool(self.actuator.apply(E.Resume((step.info,), fields or None))[0].done)
            return action
        from .escalation import resume_domain

        said = resume_domain(self.actuator, self.policy.domains, step.info, modes=self.policy.mode_of)
        # the summary and features are this node's alone: they go out in a write of their own
        return Action(Kind.RESUME if said.startswith("rack ") and " resumed: " in said else Kind.NONE, why=said)

    def _carry_suspect(self, step: Step, action: Action, out: Carried, hook: str, fields) -> Action:
        from ..slurm import SlurmError
        from .ladder import class_of

        node = self.node
        try:
            self.actuator.apply(E.Reserve(suspect_reservation(node), (node,), None, SUSPECT_HOLD_MINUTES))
        except SlurmError:
            # one left by a run that stopped between the reservation and its record: held already
            # (a read on this path alone)
            if suspect_reservation(node) not in {r.name for r in self.backend.reservations()}:
                raise
            log.warning("suspect reservation %s already there: held as it is", suspect_reservation(node))
        self.history.start_suspect(node, class_of(action.finding), action.fault or "", action.reason)
        self._record_remedy(action, step.info.boot_time)
        return action

    def _carry_suspect_pass(self, step: Step, action: Action, out: Carried, hook: str, fields) -> Action:
        self.history.pass_suspect(self.node)
        return action

    def _carry_release(self, step: Step, action: Action, out: Carried, hook: str, fields) -> Action:
        self._end_suspect("released")
        return action

    def _carry_reboot(self, step: Step, action: Action, out: Carried, hook: str, fields) -> Action:
        from ..slurm.reasons import words_of
        from .returning import validate_reason

        info = step.info
        if self.settings.validation_command:
            # back to work only through a validation run (returning.py): the node comes back DOWN with
            # this reason (Slurm adds ": reboot issued : reboot complete"), not resumed by Slurm
            action.reason = validate_reason(f"reboot: {words_of(action.reason) or action.reason}")
            (done,) = self.actuator.apply(E.Reboot((info,), action.reason, "DOWN"))
        else:
            (done,) = self.actuator.apply(E.Reboot((info,), action.reason))
        if done.blocked:
            return self._blocked(out, hook, action, done, "not rebooted, breaker open")
        if done.done:
            self.history.record_reboot(self.node, action.fault or "", info.boot_time)
            self._record_remedy(action, info.boot_time)
        return action

    def _carry_nothing(self, step: Step, action: Action, out: Carried, hook: str, fields) -> Action:
        """A reset and a validation run were carried out in `step` (before the node's one write); none
        writes nothing."""
        return action

    def _end_suspect(self, state: str) -> None:
        """The suspect hold ends: its reservation deleted (one already gone is no error), its row closed."""
        from ..slurm import SlurmError

        try:
            self.actuator.apply(E.Release(suspect_reservation(self.node)))
        except SlurmError as exc:
            log.warning("suspect reservation %s not deleted: %s", suspect_reservation(self.node), exc)
        self.history.end_suspect(self.node, state)

    def close(self) -> None:
        """The remedy and what it left are recorded: the next run sees them."""
        if self._lock is not None and self._lock >= 0:
            os.close(self._lock)
        self._lock = None

    # -- the ladder's record ----------------------------------------------------------------------------
    def _record_remedy(self, action: Action, boot: str | None, outcome: str = "pending", detail: str = "") -> None:
        from .ladder import class_of

        if action.finding is not None:
            self.history.record_remedy(self.node, class_of(action.finding), action.fault or "", action.rung, boot,
                                       outcome, detail)

    def settle(self, info: NodeInfo, findings: list[Finding]) -> None:
        """The outcome of what the ladder tried, as this run sees it: a reboot whose fault is gone succeeded,
        one whose fault is still there after the boot changed did not; a node drained for repair that is
        back in service (an admin resumed it) closes its case."""
        from ..slurm.actions import fault_key

        history = self.history
        present = {fault_key(f) for f in findings if f.severity in ("reboot", "drain")}
        for row in history.pending_remedies(info.name) or []:
            if row["rung"] == "repair":
                if not (info.drained or info.down or info.rebooting):
                    history.settle_remedy(row["id"], "succeeded", "back in service after repair")
                    history.close_case(info.name, row["class"])
            elif row["fault"] not in present:
                history.settle_remedy(row["id"], "succeeded", "the fault is gone")
                if row["rung"] in ("reboot", "cool_off") and not (info.drained or info.down or info.rebooting):
                    # back in service with no write of ours (Slurm resumed it after the reboot): said, so that
                    # the incident's end is in the history (reliability.py)
                    history.record_action(info.name, "ladder", "returned", "", f"in service after {row['rung']}", True)
            elif row["rung"] == "reboot" and info.boot_time and row["boot"] != info.boot_time:
                history.settle_remedy(row["id"], "permanent", "still there after the reboot")

    def cases(self, info: NodeInfo, step: Step | None = None) -> list[list]:
        """The node's open cases as the summary carries them (`fleet cases` reads them fleet-wide in one
        read): [class, attempts, first, last (epoch s), status], status (remedy/ladder.CASE_STATUSES)
        `validation_failed` (drained for repair after its validation run failed), `repair` (drained for a
        repair: the cap, or what survived its reboots), `running` (the ladder is on it: a reset, a reboot,
        the validation run before it returns) or `watch` (remedied, still counted within the window).
        `step`: this run's, whose write the summary rides in: the cases as they stand after it."""
        from ..slurm.reasons import says
        from .ladder import class_of, is_repair

        cases = self.history.cases(info.name, self.settings.attempt_window_s) or []
        held = self._config_hold(info, step)
        if not cases:
            return [held] if held else []
        act = step.action if step is not None else None
        writes = act is not None and act.kind in ("drain", "set_reason")
        reason = act.reason if writes else info.reason
        where = step.after if step is not None else self.where(info)
        # this run's drain for repair, not yet in the history (the write records it)
        repairing = class_of(act.finding) if writes and act.rung == "repair" and act.finding is not None else None
        unverified = self.history.last_validation(self.node) == UNVERIFIED
        out = []
        for c in cases:
            pending = c["outcome"] == "pending" or c["class"] == repairing
            rung = "repair" if c["class"] == repairing else c["rung"]
            if where == REPAIR and says(reason, VALIDATION_FAILED):
                status = "validation_failed"
            elif where == IN_SERVICE and unverified:
                status = UNVERIFIED   # back in service, its validation's outcome not known
            elif where == SUSPECT:
                status = "suspect"   # held in its own reservation, re-checked
            elif where in (RETURNING, VALIDATING, RESETTING, REBOOTING):
                status = "running"   # on its way back: a reboot, or the validation run before it returns
            elif where in (DRAINED, REPAIR) and pending and (rung == "repair" or is_repair(reason)):
                status = "repair"
            else:
                status = "running" if c["running"] else "watch"
            out.append([c["class"], c["attempts"], int(c["first"]), int(c["last"]), status])
        if held and held[0] not in {c[0] for c in out}:
            out.append(held)
        return out

    def _config_hold(self, info: NodeInfo, step: Step | None) -> list | None:
        """A node drained for a finding that asks for a configuration fix (a driver off its pins, ECC off, a
        compute mode, Slurm's own view of the node): no rung of the ladder fixes it, so it is a case of its
        own, status `config`, from when the hold began until its checks run clean."""
        from ..slurm.actions import worst
        from .ladder import class_of

        if step is None or step.after != DRAINED:
            return None
        cause = worst([f for f in step.findings if f.severity == "drain"])
        if cause is None or cause.action != "fix_config":
            return None
        now = self.actuator.clock()
        since = int(info.reason_time or now) if step.before == DRAINED else int(now)
        return [class_of(cause), 0, since, since, "config"]

    # -- the reset rung ---------------------------------------------------------------------------------
    def _reset(self, info: NodeInfo, action: Action, report: Report, hook: str):
        """Drain the node (no job may land during the reset), run the reset on the idle GPUs, mark it in the
        kernel log, read the GPUs again.  Returns (report, what Slurm now shows) or, where nothing was
        reset, why."""
        from ..judging.findings import verdict
        from ..readers.report import ReportError
        from ..readers.snapshot import known
        from ..slurm.actions import fault_key
        from .ladder import reset_targets

        settings, node, history = self.settings, self.node, self.history
        if self.gpu_reset is None:
            return "no GPU reset in this caller"
        gpus = reset_targets(report.snapshot, action.finding, self.policy.models)
        timeout = settings.reset_timeout_s
        left = self.gpu_reset.time_left()
        if left is not None:  # the reset and the read after it must fit in what slurmd leaves this run
            if left < min(5.0, timeout):
                return f"not reset in this run: {max(left, 0):.0f} s left of slurmd's health-check time"
            timeout = min(timeout, left)
        if not info.drained:
            (done,) = self.actuator.apply(E.Drain((info,), action.reason))
            if done.blocked:
                history.record_action(node, hook, "breaker", action.reason, done.breaker, True)
                return f"not reset, breaker open: {done.breaker}"
            info = replace(info, flags=info.flags | {"DRAIN"}, reason=action.reason)
            if history.open_suspect(node) is not None:
                self._end_suspect("ended")
        result = self.gpu_reset.run(gpus, timeout)
        gpu_list = ",".join(map(str, gpus))
        history.record_action(node, hook, "reset", action.reason, f"gpus {gpu_list} in {result.seconds:.1f} s: "
                              f"{result.detail}", result.ok, None if result.ok else result.detail)
        (log.info if result.ok else log.error)("%s reset gpus %s: %s", hook, gpu_list, result.detail or "done")
        if not result.ok:  # the rung did not complete: the next decision climbs to a reboot
            self._record_remedy(action, info.boot_time, "transient", result.detail)
            return report, info
        by_index = {g.index: g for g in report.snapshot.gpus}
        unmarked = self.gpu_reset.mark([known(by_index[i].pci_bus_id) or "" for i in gpus
                                        if i in by_index and known(by_index[i].pci_bus_id)])
        if unmarked:
            log.warning("the reset is not in the kernel log (%s): its Xids still count until the next boot", unmarked)
        try:
            after = self.gpu_reset.reread()
        except (ReportError, OSError) as exc:
            self._record_remedy(action, info.boot_time, "permanent", f"no readable GPU state after the reset: {exc}")
            return report, info
        still = action.fault in {fault_key(f) for f in after.findings}
        self._record_remedy(action, info.boot_time, "permanent" if still else "succeeded",
                            "the fault is still there after the reset" if still else "the fault is gone after the reset")
        snap = after.snapshot
        history.record_run(node, hook, verdict(after.findings), after.findings, duration_s=after.duration_s,
                           driver=known(snap.driver_version), gpus=len(snap.gpus))
        return after, info



SUSPECT_HOLD_MINUTES = 7 * 24 * 60   # the suspect reservation's length: deleted when the hold ends


def suspect_reservation(node: str) -> str:
    from ..slurm.ownership import SUSPECT_RESERVATION_PREFIX

    return f"{SUSPECT_RESERVATION_PREFIX}{node}"


def _fail_job(action: Action, findings: list[Finding]) -> Action:
    """The prolog's form of the ladder's action: the job must not start on a faulty GPU, so the prolog fails
    (slurmd drains the node, requeues the job; hooks/prolog.py puts this reason in place of Slurm's).  The
    reason is the ladder's (a repair where the class's attempts are capped); a reset or a reboot waits for
    the node's drain, as on a busy node."""
    from ..slurm.actions import make_reason, worst

    f = worst(findings)
    reason = action.reason if action.kind in ("drain", "set_reason") else make_reason(f)
    why = f"the prolog fails: {action.why}" if action.kind != "none" else f"the prolog fails: {f.message}"
    return replace(action, kind="fail", reason=reason, why=why, finding=action.finding or f)


# `scontrol update ... state=drain resumeafter=S` (and the in-memory Slurm): Slurm 23.02 on
RESUME_AFTER_SINCE = (23, 2)


# kind -> its handler: every Kind has one (tests/test_remedy_table.py holds it)
CARRY = {
    Kind.DRAIN: Carrier._carry_drain, Kind.SET_REASON: Carrier._carry_set_reason, Kind.FAIL: Carrier._carry_fail,
    Kind.RESUME: Carrier._carry_resume, Kind.SUSPECT: Carrier._carry_suspect,
    Kind.SUSPECT_PASS: Carrier._carry_suspect_pass, Kind.RELEASE: Carrier._carry_release,
    Kind.REBOOT: Carrier._carry_reboot, Kind.RESET: Carrier._carry_nothing, Kind.VALIDATE: Carrier._carry_nothing,
    Kind.NONE: Carrier._carry_nothing,
}

def _has_resume_after(backend) -> bool:
    """Whether this Slurm resumes a drained node by itself (ResumeAfter); unknown is no: the health check's
    own resume after its clean runs is the exit then."""
    try:
        return tuple(backend.release()) >= RESUME_AFTER_SINCE
    except Exception:  # a backend that cannot say its release (a fake, a failed `--version`): no
        return False


def _rack_fault(findings: list[Finding]) -> bool:
    """The node's worst finding is one a rack can cause (fabric, NVLink), remedied or drained: its drain
    may be the rack's."""
    from ..slurm.actions import worst
    from .escalation import RACK_CHECKS

    f = worst(findings)
    return f is not None and f.severity in ("reboot", "drain") and f.check in RACK_CHECKS


def _remedy_lock(state_dir: str, node: str) -> int | None:
    """A non-blocking lock on the node's remedies, or None while another run holds it."""
    import fcntl

    try:
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(state_dir, f"remedy-{node}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        log.warning("no remedy lock (%s): going on without it", exc)
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except OSError:
        os.close(fd)
        return None


__all__ = ["Carried", "Carrier", "GpuReset", "IllegalMove", "Step"]
