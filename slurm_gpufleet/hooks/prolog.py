"""The prolog: the job's GPUs judged before it starts; a fault fails the prolog, so Slurm requeues the job and
drains the node, and our reason replaces Slurm's.  The success path makes no slurmctld round-trip and
opens no database."""

from __future__ import annotations

import os
import time

from ..common import watchdog
from .away import detach, pause
from .common import (
    INVENTORY_REASON,
    TIMEOUT_REASON,
    KeptHistory,
    Setup,
    _backend,
    _setup,
    _start_watchdog,
    log,
    read_node,
)
from .jobs import _job_gpus, _job_nodes, _write_window


def run(argv: list[str] | None = None) -> int:
    job = os.environ.get("SLURM_JOB_ID")
    setup = _setup("prolog", None, None, job)
    if setup is None:
        return 0  # our config problem must not stop jobs
    from ..judging.findings import verdict
    from ..judging.pipeline import evaluate
    from ..readers.report import ReportError
    from ..readers.snapshot import known

    # slurmd drains the node for the failed prolog; the helper then puts our reason on it
    observe = setup.policy.for_node(setup.node).mode == "observe"  # staged enablement: never fail a job
    _start_watchdog(setup, 0 if observe else 1, None if observe else lambda: _prolog_timeout(setup))
    try:
        snap = read_node(setup, "quick", host=False)
    except (ReportError, OSError) as exc:
        watchdog.cancel()
        reason = INVENTORY_REASON
        if observe:
            log.warning("observe mode: the prolog would fail: %s: %s", reason, exc)
            return 0
        if _breaker_open_for_prolog(setup, reason):
            return 0
        from . import quiet

        quiet.forget(setup.settings.state_dir, setup.node)  # the node leaves service: the next check reads Slurm
        print(f"{reason}: {exc}"[:200])
        _async_reason(setup, reason, job)
        return 1
    watchdog.cancel()
    gpus = _job_gpus()
    report = evaluate(snap, setup.policy, host=setup.node, idle_gpus=gpus)
    from ..judging.imex import job_imex

    # IMEX is the job's to judge (imex.py): only a job that uses it, never an idle node
    imex_words, imex_found = job_imex(os.environ, setup.settings)
    report.findings += imex_found
    report.verdict = verdict(report.findings)
    if job:
        _write_window(setup.settings, setup.node, job, snap, gpus, imex_words)
        if report.verdict not in ("reboot", "drain") and _job_nodes() >= 2:
            from ..slowgpus import sampler

            try:  # the straggler view of a multi-node job (instep.py); a failure must not stop the job
                sampler.start(setup.settings.state_dir, job, setup.node)
            except OSError as exc:
                log.warning("in-job sampler not started: %s", exc)
    if report.verdict in ("reboot", "drain"):
        from ..records.history import History, db_path

        history = KeptHistory(History, db_path(setup.settings.state_dir, setup.node))
        history.record_run(setup.node, "prolog", report.verdict, report.findings, job_id=job,
                           duration_s=report.duration_s, driver=known(snap.driver_version), gpus=len(snap.gpus))
        try:
            reason = _carried(setup, history, report, observe)
        finally:
            history.close()
        if reason is None:
            return 0   # observe mode (what would be done is logged and in the history), or the breaker is open
        log.error("prolog failed, job %s will be requeued: %s", job, reason)
        print(reason)  # slurmd logs it: "prolog failed: rc:1 output:<this>"
        _async_reason(setup, reason, job)
        return 1
    return 0


def _carried(setup: Setup, history, report, observe: bool) -> str | None:
    """The prolog's decision, by the remedy carrier (remedy/carrier.py): the reason the prolog fails with,
    or None where the job runs (observe mode, the breaker open).  Slurm unreadable: the job still must not
    start on a faulty GPU, so it fails with the finding's own reason (the breaker cannot be asked)."""
    from ..slurm import SlurmError
    from ..slurm.actions import make_reason, worst
    from .common import actuator_for, carrier_for

    try:
        backend = _backend(setup.settings)
        info = backend.node(setup.node)
    except SlurmError as exc:
        reason = make_reason(worst(report.findings))
        if observe:
            log.warning("observe mode: the prolog would fail: %s", reason)
            return None
        log.warning("node state not read (%s): the prolog fails on its finding alone", exc)
        return reason
    carrier = carrier_for(setup, history, backend, actuator_for(setup, backend), "prolog")
    try:
        done = carrier.carry(carrier.step("prolog", info, report), "prolog")
    finally:
        carrier.close()
    return done.action.reason if done.action.kind == "fail" else None


def _breaker_open_for_prolog(setup: Setup, reason: str) -> bool:
    """A failed prolog drains the node (Slurm does, for our exit code): the breaker is asked first, by
    the actuator (failure path only)."""
    from .common import actuator_for

    try:
        backend = _backend(setup.settings)
        blocked = actuator_for(setup, backend).judge([backend.node(setup.node)]).breaker
    except Exception as exc:  # the breaker must never turn a fault into an internal error
        log.warning("breaker not judged: %s", exc)
        return False
    if blocked:
        log.error("prolog: %s, but the drain breaker is open (%s): the job runs, the node is not drained",
                  reason, blocked)
    return bool(blocked)


def _prolog_timeout(setup: Setup) -> None:
    print(TIMEOUT_REASON, flush=True)  # the watchdog ends the process with os._exit: no flush at exit
    _async_reason(setup, TIMEOUT_REASON, os.environ.get("SLURM_JOB_ID"))


def _async_reason(setup: Setup, reason: str, job: str | None = None) -> None:
    """Slurm's own reason for a failed prolog is just "Prolog error".  A detached helper waits for
    slurmctld to drain the node, then puts our detailed reason in its place, and sends the job Slurm
    requeued to run elsewhere (prolog exit is not delayed)."""
    detach("import sys; from slurm_gpufleet.hooks.prolog import replace_hook_reason; "
           "sys.exit(replace_hook_reason(sys.argv[1], sys.argv[2], sys.argv[3] or None, job=sys.argv[4] or None))",
           [setup.node, reason, setup.policy.path or "", job or ""], "the reason update")


# the helper's wait for slurmctld's drain (then away.REQUEUE_WAIT_S for its requeue): each within seconds on
# a quiet controller and far later on a loaded one; the helper is detached, so it can wait
DRAIN_WAIT_S = 60.0


def replace_hook_reason(node: str, reason: str, config: str | None, wait_s: float = DRAIN_WAIT_S,
                        job: str | None = None) -> int:
    setup = _setup("prolog", config, node)
    if setup is None:
        return 0
    from ..remedy.escalation import reason_after_prolog
    from ..slurm import SlurmError
    from ..slurm.ownership import HEALTH, SLURM_HOOK_REASONS, owner_of_reason
    from .common import actuator_for

    if not os.access(setup.settings.scontrol, os.X_OK):
        log.error("%s not found: cannot put the reason on the node", setup.settings.scontrol)
        return 0
    backend = _backend(setup.settings)
    started = time.monotonic()
    while time.monotonic() < started + wait_s:
        try:
            info = backend.node(node)
            if info.drained and info.reason in SLURM_HOOK_REASONS:
                said = reason_after_prolog(actuator_for(setup, backend), setup.policy.domains, info, reason,
                                           modes=setup.policy.mode_of)
                log.info("replaced '%s' with '%s'", info.reason, reason)
                from ..records.history import History, db_path

                history = KeptHistory(History, db_path(setup.settings.state_dir, node))
                history.record_action(node, "prolog", "set_reason", reason, f"was '{info.reason}'", True)
                if said:
                    history.record_action(node, "prolog", "rack", "", said, True)
                if job:
                    from .away import REQUEUE_WAIT_S, requeue_away

                    said = requeue_away(backend, setup, job, node, reason, time.monotonic() + REQUEUE_WAIT_S)
                    if said:
                        history.record_action(node, "prolog", "requeue", reason, said, True)
                history.close()
                return 0
            if info.drained and info.reason and owner_of_reason(info.reason) != HEALTH:
                return 0  # someone else's reason (an admin's, a rollout's): never replaced
        except SlurmError as exc:
            log.warning("waiting for the prolog drain: %s", exc)
        pause(started)
    return 0
