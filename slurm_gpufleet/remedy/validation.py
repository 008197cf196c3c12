"""Validation before return, carried out: the node that ran clean after a reset or a repair goes into its
own maintenance reservation, resumed there (no user job can land), and its validation job is submitted;
the job's outcome then returns the node, or drains it for repair.  The carrier's part (remedy/carrier.py
mixes it in); the rule of when a node returns is remedy/returning.py's."""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from typing import TYPE_CHECKING

from ..slurm import effects as E
from .decide import Action
from .table import IN_SERVICE, REPAIR, VALIDATING

if TYPE_CHECKING:
    from ..slurm.base import NodeInfo

log = logging.getLogger("slurm-gpufleet")

UNVERIFIED = "unverified"   # a validation whose job's outcome could not be read: its state, and its case's status
VALIDATION_FAILED = "repair validation failed"   # a reason's first words: a repair reason (remedy/ladder.is_repair)
VALIDATION_COMMENT = "gpufleet validation of"   # the validation job's comment, as submitted


def validation_output(state_dir: str, job: str) -> str:
    """Where a validation job's output is kept, on its node (`%j`: Slurm's job id, for sbatch)."""
    return os.path.join(state_dir, f"validation-{job}.out")


class ValidationRun:
    """The carrier's validation steps (Carrier mixes this in: it holds the actuator, history and settings)."""

    def _start_validation(self, info: NodeInfo, hook: str, attempt: int = 1, cause: str | None = None) -> Action | None:
        """The node runs clean after a reset or a repair: its own maintenance reservation, the node resumed
        into it (no user job can land), the validation job submitted there.  Returns the action done, or
        None where it could not start (said in the log; the next run tries again)."""
        from ..slurm import SlurmError
        from .returning import JOB_NAME, cause_of, reservation_name, wrapped

        settings, node, history = self.settings, self.node, self.history
        # Slurm appends to a reboot's reason what it did (": reboot issued : reboot complete"); a retry keeps
        # the first attempt's cause (the node is in service in its reservation then, with no reason)
        if cause is None:
            cause = cause_of(info.reason)
        name = reservation_name(node)
        minutes = settings.validation_timeout_minutes * (settings.validation_retries + 1) + 10
        try:
            if attempt == 1:
                try:
                    self.actuator.apply(E.Reserve(name, (node,), None, minutes))
                except SlurmError as exc:
                    # one left by a run that stopped half-way (made, not yet used): used as it is; if there
                    # is none, the submission below says so
                    log.warning("validation reservation %s not made (%s): using the one there, if any", name, exc)
                self.actuator.apply(E.Resume((info,)))
            (job,) = self.actuator.apply(E.Submit(JOB_NAME, node, name, settings.validation_partition,
                                                  wrapped(settings.validation_command),
                                                  settings.validation_timeout_minutes,
                                                  f"{VALIDATION_COMMENT} {node} after {cause}"[:200],
                                                  validation_output(settings.state_dir, "%j")))
        except SlurmError as exc:
            log.error("validation of %s not started: %s", node, exc)
            history.record_action(node, hook, "validate", "", f"not started: {exc}", False, str(exc))
            return None
        history.start_validation(node, cause, attempt, job)
        history.record_action(node, hook, "validate", name, f"attempt {attempt}: job {job} in {name}", True)
        return Action("none", why=f"validation job {job} (attempt {attempt}) in reservation {name}")

    def _follow_validation(self, info: NodeInfo, final: str) -> NodeInfo | None:
        """An open validation (the node's history says so; no Slurm call otherwise): read its job, then pass,
        retry or fail it.  Returns what Slurm shows of the node where this changed it."""
        from ..slurm import SlurmError
        from ..slurm.actions import one_line
        from ..slurm.reasons import ours
        from .returning import DEPENDENCY_EXIT, FAILED, JOB_NAME, ending_of, judge, reservation_name

        history, node, settings = self.history, self.node, self.settings
        opened = history.open_validation(info.name)
        if opened is None:
            return None
        name = reservation_name(node)
        try:
            shown = {job: (state, comment) for job, state, comment in self.backend.jobs_named(JOB_NAME)}
        except SlurmError as exc:
            log.warning("validation job %s of %s not read: %s", opened.job, node, exc)
            return None
        state, comment = shown.get(opened.job, (None, ""))
        code, last = None, ""
        if state is None or state in FAILED:
            # its output on this node: how it ended where Slurm forgot the job (MinJobAge), and whether its
            # own tools could not run (DEPENDENCY_EXIT)
            code, last = ending_of(validation_output(settings.state_dir, opened.job))
            if state is None and code is not None:
                state = "COMPLETED" if code == 0 else "FAILED"
        verdict_now = judge(state, opened.attempt, settings.validation_retries, self.actuator.clock() - opened.since,
                            settings.validation_timeout_minutes * 60, code)
        if final not in ("ok", "warn") and verdict_now == "wait":
            verdict_now = "failed"  # the fault is back: the decision below takes the node out again
        if verdict_now == "wait":
            return None
        if verdict_now == "retry":
            log.warning("validation job %s of %s ended %s: submitted again", opened.job, node, state or "unseen")
            self._move(VALIDATING, VALIDATING, "validate")
            self._start_validation(info, "healthcheck", opened.attempt + 1, cause=opened.cause)
            return None
        try:
            if state not in ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", None) and verdict_now == "failed":
                self.actuator.apply(E.Cancel((opened.job,)))
            self.actuator.apply(E.Release(name))
        except SlurmError as exc:
            log.warning("validation reservation %s not deleted: %s", name, exc)
        if verdict_now == "unverified":
            # not known how it ended: never a failed node; back in service (its checks ran clean before the
            # job), said as such in the history and in `fleet cases`
            self._move(VALIDATING, IN_SERVICE, "validated")
            detail = (f"job {opened.job} could not judge the GPUs (exit {DEPENDENCY_EXIT}): {last}"[:200]
                      if code == DEPENDENCY_EXIT else
                      f"job {opened.job} gone from Slurm, its output on the node says no exit: outcome not known")
            history.end_validation(node, UNVERIFIED, detail)
            history.record_action(node, "healthcheck", "validated", "", f"unverified: {detail}", True)
            log.warning("validation of %s unverified: %s", node, detail)
            return None
        if verdict_now == "passed":
            self._move(VALIDATING, IN_SERVICE, "validated")
            history.end_validation(node, "passed", f"job {opened.job}")
            history.record_action(node, "healthcheck", "validated", "", f"job {opened.job} passed after {opened.cause}",
                                  True)
            log.info("validation job %s of %s passed: back in service", opened.job, node)
            return None
        # the job's comment, where the validation command set one (ours, from the submission, says nothing)
        said = "" if comment.startswith(VALIDATION_COMMENT) else one_line(comment)
        detail = f"job {opened.job} {state or 'gone'}" + (f": {said}" if said else "")
        history.end_validation(node, "failed", f"{detail}; output {validation_output(settings.state_dir, opened.job)}")
        if final not in ("ok", "warn"):
            return None
        # names the remedy it followed (the cause's first word: reset, reboot, repair) and its job, whose
        # output the node keeps (validation_output)
        remedy = opened.cause.split(":")[0].strip() or "repair"
        reason = ours(f"{VALIDATION_FAILED} {opened.attempt}x after {remedy}: {detail}")
        self._move(VALIDATING, REPAIR, "drain")
        try:
            (done,) = self.actuator.apply(E.Drain((info,), reason))
        except SlurmError as exc:
            log.error("%s not drained after its failed validation: %s", node, exc)
            return None
        history.record_action(node, "healthcheck", "drain", reason, f"validation job {opened.job} {state}", True)
        return replace(info, flags=info.flags | {"DRAIN"}, reason=reason) if done.done else None
