"""What the health check, the prolog and the epilog share: the config and its trust, logging, the one
read of the node, the watchdog, and `act`: record the run, decide, carry it out through the actuator,
publish the summary.

A broken config never acts: it is logged and the program exits 0 (a typo must not drain a fleet).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import watchdog
from ..policy import Policy, PolicyError, SlurmSettings, config_path, default_policy, load_policy
from ..summary import encode as encode_summary
from ..summary import live_digests, published_at
from ..summary import parse as parse_summary

if TYPE_CHECKING:
    from ..findings import Finding
    from ..pipeline import Report
    from ..slurm.base import NodeInfo
    from ..snapshot import NodeSnapshot

# The checks, readers and Slurm layer are imported inside the functions that use them: slurmd starts a
# health check every interval whether the last one ended or not, and a run that only finds the previous
# one still going (the run lock) must cost a config parse, not the whole engine.

log = logging.getLogger("slurm-gpufleet")
TIMEOUT_REASON = "gpufleet: NVML timeout"
_STARTED = time.monotonic()  # the hook's start, near enough: the health check's 60 s are counted from here
SLURMD_HEALTH_CHECK_S = 60.0  # slurmd kills a health check after this (22.05, 24.11, 26.05)


def setup_logging(hook: str, node: str, job: str | None = None) -> None:
    tag = f"slurm-gpufleet-{hook}[{os.getpid()}]: node={node}" + (f" job={job}" if job else "") + " "
    handlers: list[logging.Handler] = []
    if os.path.exists("/dev/log"):
        from logging.handlers import SysLogHandler  # socket and pickle with it: only where syslog is

        try:
            h = SysLogHandler(address="/dev/log", facility=SysLogHandler.LOG_DAEMON)
            h.setFormatter(logging.Formatter(tag + "%(message)s"))
            handlers.append(h)
        except OSError:
            pass
    err = logging.StreamHandler(sys.stderr)  # slurmd keeps a hook's stderr in its log
    err.setFormatter(logging.Formatter(tag + "%(levelname)s %(message)s"))
    handlers.append(err)
    log.handlers[:] = handlers
    log.setLevel(logging.INFO)
    log.propagate = False


@dataclass
class Setup:
    """What a hook runs with: its node, the policy and the Slurm settings."""

    node: str
    policy: Policy
    settings: SlurmSettings
    refused: str | None = None     # the config's first untrusted path: run on the packaged defaults


def _setup(hook: str, config: str | None, node: str | None, job: str | None = None) -> Setup | None:
    node = node or os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    setup_logging(hook, node, job)
    path, required = config_path(config)
    from ..trust import problem, refusals

    path = path if (required or (path and os.path.exists(path))) else None
    # judged before a byte of it is parsed: a file others could write never reaches the parser
    first = problem(path) if path else None
    try:
        policy = default_policy() if first else load_policy(path)
    except PolicyError as exc:
        log.error("config error, no action taken: %s", exc)
        return None
    refused = [first] if first else refusals(policy, own_judged=path is not None)
    if refused:
        # a config someone else could have written must not choose what root runs: the packaged defaults
        # run instead, and the node says so (`fleet` lists it); jobs are not failed for it
        for r in refused:
            log.critical("ALERT gpufleet config refused, running on the packaged defaults: %s", r.line())
        policy = default_policy()
        for r in refusals(policy):
            log.critical("ALERT gpufleet default path refused too: %s", r.line())
    global _ERROR_LOG
    _ERROR_LOG = os.path.join(policy.slurm.state_dir, ERROR_LOG_NAME)
    return Setup(node, policy, policy.slurm, refused[0].where if refused else None)


# slurmd discards what a health check prints, so an internal error is also kept on the node, one line each
ERROR_LOG_NAME = "internal-errors.log"
_ERROR_LOG: str | None = None


def _keep_error(line: str) -> None:
    if not _ERROR_LOG:
        return
    try:
        os.makedirs(os.path.dirname(_ERROR_LOG), mode=0o700, exist_ok=True)
        fd = os.open(_ERROR_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as fh:
            fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}")
    except OSError:
        pass


# ---------------------------------------------------------------- reading the node
def read_node(settings: SlurmSettings, node: str, level: str = "quick", host: bool = True) -> NodeSnapshot:
    """The node's one read (pipeline.gather): its GPUs through live NVML (`deep` adds the measurements),
    its kernel log, and (`host`) its kernels and modules.  What cannot be read is logged, never allowed
    to hide the GPUs' own state.  The prolog skips the host: it judges only what a job would meet now."""
    from ..pipeline import Source, gather

    snap = gather(Source(level=level, kernel_log=settings.kernel_log, host=node,
                         host_root=settings.host_root.replace("%n", node) if host else None, strict=False))
    for what in snap.unread:
        log.warning("%s", what)
    return snap


def _backend(settings: SlurmSettings, timeout: float = 10.0):
    from ..slurm import get_backend

    return get_backend(settings.backend, settings.scontrol, timeout, cache_dir=settings.state_dir)


def _start_watchdog(setup: Setup, code: int, on_timeout) -> object:
    """A hard limit on reading GPU state: on expiry `on_timeout` runs (drain, or hand the reason over)
    and the process exits with `code`, whatever the stuck call is doing."""
    return watchdog.start(setup.settings.read_timeout_s, f"reading GPU state of {setup.node}", code,
                          before_exit=on_timeout)


def _drain_if_free(settings: SlurmSettings, node: str, reason: str) -> None:
    """The watchdog's and an unreadable node's drain: through the actuator (ownership, the breaker)."""
    from ..slurm.actuator import Actuator
    from ..slurm.ownership import HEALTH

    try:
        backend = _backend(settings, timeout=5)
        done = Actuator(backend, HEALTH, settings).drain([backend.node(node)], reason)
        if done.blocked:
            sys.stderr.write(f"slurm-gpufleet: {node} not drained: the drain breaker is open\n")
    except Exception as exc:  # the watchdog must exit whatever happens here
        sys.stderr.write(f"slurm-gpufleet: could not drain {node}: {exc}\n")


# ---------------------------------------------------------------- acting
def act(setup: Setup, report: Report, hook: str, job: str | None = None,
        extra_findings: list[Finding] | None = None, info: NodeInfo | None = None, backend=None) -> str:
    """Record the run, decide, carry it out through the actuator, publish the summary.  Returns the action.

    Slurm calls: the node's state (one read, unless the caller has it), the fleet only when a drain is
    about to happen (the breaker counts it), and one write that carries both the change and the summary;
    a quiet run writes only when its summary changed."""
    from ..findings import verdict
    from ..history import History, db_path
    from ..slurm import SlurmError
    from ..slurm.actions import one_line
    from ..slurm.actuator import Actuator
    from ..slurm.ownership import HEALTH, rack_of_reason
    from ..snapshot import known

    findings = report.findings + (extra_findings or [])
    final = verdict(findings)
    node = setup.node
    settings = setup.settings
    history = KeptHistory(History, db_path(settings.state_dir, node))
    s = report.snapshot
    history.record_run(node, hook, final, findings, job_id=job, duration_s=report.duration_s,
                       driver=known(s.driver_version), gpus=len(s.gpus), performance=s.performance,
                       models={g.index: known(g.name) for g in s.gpus})
    try:
        backend = backend or _backend(settings)
        info = info or backend.node(node)  # the health check read it already: one slurmctld call, not two
    except SlurmError as exc:
        log.error("cannot read node state from Slurm: %s", exc)
        history.record_action(node, hook, "none", "", f"slurm unreachable: {exc}", False, str(exc))
        return "error"
    ladder = _ladder(setup)
    actuator = Actuator(backend, HEALTH, settings)
    _settle_remedies(history, info, findings)
    if hook == "healthcheck" and ladder.mode != "observe":
        info = _follow_validation(setup, history, actuator, backend, info, final) or info
    action = _decide(setup, ladder, history, info, report, final, findings)
    remedy_lock = None
    if action.kind in ("reset", "reboot") and ladder.mode == "full":
        # one remedy of a node at a time: the epilog and the health check can run together, and both saw
        # the same history (CI, 26.05: two resets for one fault).  Under the lock the history is read again;
        # it is held until this run's remedy is carried out and recorded.
        remedy_lock = _remedy_lock(settings.state_dir, node)
        action = _decide(setup, ladder, history, info, report, final, findings) if remedy_lock is not None else \
            type(action)("none", why="another run of ours is remedying this node")
    if action.kind == "reset" and ladder.mode == "full":
        # the cheapest rung: reset the idle GPUs, read them again, and decide on what the reset left
        after = _reset(setup, history, actuator, info, action, report, hook)
        if isinstance(after, str):
            action = type(action)("none", why=after)
        else:
            reset_fault = action.finding
            report, info = after
            findings = report.findings + (extra_findings or [])
            final = verdict(findings)
            s = report.snapshot
            action = _decide(setup, ladder, history, info, report, final, findings)
            if final in ("ok", "warn") and settings.validation_command and action.kind == "none":
                # fixed: back to work only through a validation run (returning.py)
                from ..returning import VALIDATE_PREFIX
                from ..slurm.actions import make_reason

                action = type(action)("set_reason", reason=one_line(
                    f"{VALIDATE_PREFIX}reset: {make_reason(reset_fault)[len('gpufleet: '):]}"),
                    why="the reset fixed it: a validation run before it returns")
    if action.kind == "validate" and not settings.validation_command:  # turned off since it was asked
        action = type(action)("resume", why=f"{action.why.split(':')[0]}; validation_command is \"\"")
    if action.kind == "validate" and ladder.mode != "observe":
        action = _start_validation(setup, history, actuator, info, hook) or action
    observed = None
    if ladder.mode == "observe" and action.kind != "none":
        # staged enablement: what would be done is decided, logged and published; nothing is touched
        observed = action
        history.record_action(node, hook, "observe", action.reason, f"would {action.kind}: {action.why}", True)
        action = type(action)("none", why=f"observe mode: would {action.kind} ({action.reason or action.why})")
    data = encode_summary(report, final) if settings.publish != "none" else None
    if data is not None and observed is not None:
        data["obs"] = f"{observed.kind}: {observed.reason or observed.why}"[:100]
    if data is not None:
        cases = _published_cases(history, info, settings)
        if cases:
            data["case"] = cases
    if data is not None and setup.refused:
        data["cfg"] = "refused"
    shown = _shown(info, settings.publish) if data is not None else None  # what Slurm has now, read once
    if data is not None and isinstance(shown, dict) and "is" in shown:
        # the in-job samplers' digests, each kept until its job's end (the epilog drops its own job's)
        kept = {j: d for j, d in live_digests(shown["is"], time.time()).items()
                if not (hook == "epilog" and j == str(job))}
        if kept:
            data["is"] = kept
    news = _news(info, settings.publish, data, shown) if data is not None else None
    # what changed about the node rides in the same write as the action: one update, not three
    fields = _feature_fields(info, settings.feature_prefix, known(s.driver_version), known(s.cuda_driver_version)) \
        if settings.feature_prefix and hook != "prolog" else {}
    if news:
        fields[settings.publish] = news
    blocked = None
    ok, error, published = True, None, False
    try:
        if action.kind == "drain":
            done = actuator.drain([info], action.reason, fields or None)
            published = bool(done.done or done.reason_set)
            if done.blocked:
                blocked = done.breaker
                history.record_action(node, hook, "breaker", action.reason, blocked, True)
                action = type(action)("none", why=f"not drained, breaker open: {blocked}")
        elif action.kind == "set_reason":
            published = bool(actuator.set_reason([info], action.reason, fields or None).done)
        elif action.kind == "resume" and rack_of_reason(info.reason) is not None:
            from ..slurm.escalation import resume_domain

            said = resume_domain(backend, settings, setup.policy.domains, info)
            # the summary and features are this node's alone: they go out below, in a write of their own
            action = type(action)("resume" if said.startswith("rack ") and " resumed: " in said else "none", why=said)
        elif action.kind == "resume":
            published = bool(actuator.resume([info], fields or None).done)
        elif action.kind == "reboot":
            if settings.validation_command:
                # back to work only through a validation run (returning.py): the node comes back DOWN with
                # this reason (Slurm adds ": reboot issued : reboot complete"), not resumed by Slurm
                from ..returning import VALIDATE_PREFIX

                action.reason = one_line(f"{VALIDATE_PREFIX}reboot: {action.reason[len('gpufleet: '):]}")
                done = actuator.reboot_asap([info], action.reason, next_state="DOWN")
            else:
                done = actuator.reboot_asap([info], action.reason)
            if done.blocked:
                blocked = done.breaker
                history.record_action(node, hook, "breaker", action.reason, blocked, True)
                action = type(action)("none", why=f"not rebooted, breaker open: {blocked}")
            elif done.done:
                history.record_reboot(node, action.fault or "", info.boot_time)
                _record_remedy(history, node, action, info.boot_time)
        if action.rung == "repair" and action.kind in ("drain", "set_reason") and not blocked:
            _record_remedy(history, node, action, info.boot_time)
    except SlurmError as exc:
        ok, error = False, str(exc)
    if ok and action.kind in ("drain", "set_reason") and published and _rack_fault(findings):
        from ..slurm.escalation import escalate

        said = escalate(backend, settings, setup.policy.domains, node)
        if said:
            history.record_action(node, hook, "rack", "", said, True)
    if action.kind != "none" or not ok:
        history.record_action(node, hook, action.kind, action.reason, action.why, ok, error)
        (log.info if ok else log.error)("%s %s%s: %s%s", hook, action.kind,
                                        f" '{action.reason}'" if action.reason else "", action.why,
                                        f" FAILED: {error}" if error else "")
    else:
        log.info("%s verdict %s: %s", hook, final, action.why)
    # published even with no GPU readable: a rollout validates from it, and "driver unreachable" is news
    if not published:
        if blocked and data is not None:
            data["f"] = f"breaker open: {data.get('f', '')}"[:80]
            data["brk"] = 1
            news = _news(info, settings.publish, data, shown)
            # replaces the summary without the breaker, or drops it when Slurm already shows this one:
            # left in, it would flip the node's summary back and forth on every run
            if news:
                fields[settings.publish] = news
            else:
                fields.pop(settings.publish, None)
        if fields:
            try:
                actuator.publish(info.name, fields)
            except SlurmError as exc:
                log.warning("could not publish the GPU summary and features: %s", exc)
    if remedy_lock is not None and remedy_lock >= 0:
        os.close(remedy_lock)  # the remedy and what it left are recorded: the next run sees them
    if hook == "healthcheck":
        history.prune()
    history.close()
    return action.kind if ok else "error"


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


def _ladder(setup: Setup):
    from ..slurm.actions import Ladder

    st = setup.settings
    return Ladder(st.reboots_before_drain, st.max_attempts, st.attempt_window_s, setup.policy.for_node(setup.node).mode)


def _decide(setup: Setup, ladder, history, info, report: Report, final: str, findings: list[Finding]):
    from ..remediation import gpus_idle, reset_targets
    from ..slurm.actions import decide, worst
    from ..snapshot import known

    s = report.snapshot
    f = worst(findings, "reboot")
    idle = f is not None and gpus_idle(s, reset_targets(s, f, setup.policy.models))
    return decide(info, final, findings, history.node_history(setup.node, attempt_window_s=ladder.attempt_window_s),
                  setup.settings.clean_runs_to_resume, host=s.host_facts, driver=known(s.driver_version),
                  ladder=ladder, gpus_idle=idle)


def _record_remedy(history, node: str, action, boot: str | None, outcome: str = "pending", detail: str = "") -> None:
    from ..remediation import class_of

    if action.finding is not None:
        history.record_remedy(node, class_of(action.finding), action.fault or "", action.rung, boot, outcome, detail)


def _settle_remedies(history, info: NodeInfo, findings: list[Finding]) -> None:
    """The outcome of what the ladder tried, as this run sees it: a reboot whose fault is gone succeeded,
    one whose fault is still there after the boot changed did not; a node drained for repair that is
    back in service (an admin resumed it) closes its case."""
    from ..slurm.actions import fault_key

    present = {fault_key(f) for f in findings if f.severity in ("reboot", "drain")}
    for row in history.pending_remedies(info.name) or []:
        if row["rung"] == "repair":
            if not (info.drained or info.down or info.rebooting):
                history.settle_remedy(row["id"], "succeeded", "back in service after repair")
                history.close_case(info.name, row["class"])
        elif row["fault"] not in present:
            history.settle_remedy(row["id"], "succeeded", "the fault is gone")
        elif row["rung"] == "reboot" and info.boot_time and row["boot"] != info.boot_time:
            history.settle_remedy(row["id"], "permanent", "still there after the reboot")


def _reset(setup: Setup, history, actuator, info: NodeInfo, action, report: Report, hook: str):
    """Drain the node (no job may land during the reset), run the site's reset command on the idle GPUs,
    mark the reset in the kernel log, read the GPUs again.  Returns (report, what Slurm now shows) or,
    where nothing was reset, why."""
    from dataclasses import replace

    from ..findings import verdict
    from ..pipeline import evaluate
    from ..readers import ReportError
    from ..remediation import mark_reset, reset_targets, run_reset
    from ..slurm.actions import fault_key
    from ..snapshot import known

    settings, node = setup.settings, setup.node
    gpus = reset_targets(report.snapshot, action.finding, setup.policy.models)
    timeout = settings.reset_timeout_s
    if hook == "healthcheck":  # the reset and the read after it must fit in what slurmd leaves this run
        left = SLURMD_HEALTH_CHECK_S - 5 - (time.monotonic() - _STARTED) - settings.read_timeout_s
        if left < min(5.0, timeout):
            return f"not reset in this run: {max(left, 0):.0f} s left of slurmd's {SLURMD_HEALTH_CHECK_S:.0f} s"
        timeout = min(timeout, left)
    if not info.drained:
        done = actuator.drain([info], action.reason)
        if done.blocked:
            history.record_action(node, hook, "breaker", action.reason, done.breaker, True)
            return f"not reset, breaker open: {done.breaker}"
        info = replace(info, flags=info.flags | {"DRAIN"}, reason=action.reason)
    result = run_reset(settings.reset_command, node, gpus, timeout)
    gpu_list = ",".join(map(str, gpus))
    history.record_action(node, hook, "reset", action.reason, f"gpus {gpu_list} in {result.seconds:.1f} s: {result.detail}",
                          result.ok, None if result.ok else result.detail)
    (log.info if result.ok else log.error)("%s reset gpus %s: %s", hook, gpu_list, result.detail or "done")
    if not result.ok:  # the rung did not complete: the next decision climbs to a reboot
        _record_remedy(history, node, action, info.boot_time, "transient", result.detail)
        return report, info
    by_index = {g.index: g for g in report.snapshot.gpus}
    unmarked = mark_reset(settings.kernel_log, node,
                          [known(by_index[i].pci_bus_id) or "" for i in gpus if i in by_index and known(by_index[i].pci_bus_id)])
    if unmarked:
        log.warning("the reset is not in the kernel log (%s): its Xids still count until the next boot", unmarked)
    _start_watchdog(setup, 1, None)
    try:
        snap = read_node(settings, node, "quick")
    except (ReportError, OSError) as exc:
        _record_remedy(history, node, action, info.boot_time, "permanent", f"no readable GPU state after the reset: {exc}")
        return report, info
    finally:
        watchdog.cancel()
    after = evaluate(snap, setup.policy, host=node, expect_idle=True)
    still = action.fault in {fault_key(f) for f in after.findings}
    _record_remedy(history, node, action, info.boot_time, "permanent" if still else "succeeded",
                   "the fault is still there after the reset" if still else "the fault is gone after the reset")
    history.record_run(node, hook, verdict(after.findings), after.findings, duration_s=after.duration_s,
                       driver=known(snap.driver_version), gpus=len(snap.gpus))
    return after, info


def _start_validation(setup: Setup, history, actuator, info: NodeInfo, hook: str, attempt: int = 1):
    """The node runs clean after a reset or a repair: its own maintenance reservation, the node resumed
    into it (no user job can land), the validation job submitted there.  Returns the action done, or
    None where it could not start (said in the log; the next run tries again)."""
    from ..returning import JOB_NAME, VALIDATE_PREFIX, reservation_name
    from ..slurm import SlurmError

    settings, node = setup.settings, setup.node
    # Slurm appends to a reboot's reason what it did (": reboot issued : reboot complete")
    cause = info.reason[len(VALIDATE_PREFIX):].split(" : reboot ")[0] if info.reason else "repair"
    name = reservation_name(node)
    minutes = settings.validation_timeout_minutes * (settings.validation_retries + 1) + 10
    try:
        if attempt == 1:
            try:
                actuator.reservation("create_reservation", name, [node], None, minutes)
            except SlurmError as exc:
                # one left by a run that stopped half-way (made, not yet used): used as it is; if there is
                # none, the submission below says so
                log.warning("validation reservation %s not made (%s): using the one there, if any", name, exc)
            actuator.resume([info])
        job = actuator.job("submit_job", JOB_NAME, node, name, settings.validation_partition,
                           settings.validation_command, settings.validation_timeout_minutes,
                           f"gpufleet validation of {node} after {cause}"[:200])
    except SlurmError as exc:
        log.error("validation of %s not started: %s", node, exc)
        history.record_action(node, hook, "validate", "", f"not started: {exc}", False, str(exc))
        return None
    history.start_validation(node, cause, attempt, job)
    history.record_action(node, hook, "validate", name, f"attempt {attempt}: job {job} in {name}", True)
    from ..slurm.actions import Action

    return Action("none", why=f"validation job {job} (attempt {attempt}) in reservation {name}")


def _follow_validation(setup: Setup, history, actuator, backend, info: NodeInfo, final: str):
    """An open validation (the node's history says so; no Slurm call otherwise): read its job, then pass,
    retry or fail it.  Returns what Slurm shows of the node where this changed it."""
    import time as _time
    from dataclasses import replace

    from ..returning import JOB_NAME, judge, reservation_name
    from ..slurm import SlurmError
    from ..slurm.actions import one_line
    from ..slurm.ownership import PREFIX

    opened = history.open_validation(info.name)
    if opened is None:
        return None
    settings, node, name = setup.settings, setup.node, reservation_name(setup.node)
    try:
        shown = {job: (state, comment) for job, state, comment in backend.jobs_named(JOB_NAME)}
    except SlurmError as exc:
        log.warning("validation job %s of %s not read: %s", opened.job, node, exc)
        return None
    state, comment = shown.get(opened.job, (None, ""))
    verdict_now = judge(state, opened.attempt, settings.validation_retries, _time.time() - opened.since,
                        settings.validation_timeout_minutes * 60)
    if final not in ("ok", "warn") and verdict_now == "wait":
        verdict_now = "failed"  # the fault is back: the decision below takes the node out again
    if verdict_now == "wait":
        return None
    if verdict_now == "retry":
        log.warning("validation job %s of %s ended %s: submitted again", opened.job, node, state or "unseen")
        _start_validation(setup, history, actuator, info, "healthcheck", opened.attempt + 1)
        return None
    try:
        if state not in ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", None) and verdict_now == "failed":
            actuator.job("cancel_jobs", [opened.job])
        actuator.reservation("delete_reservation", name)
    except SlurmError as exc:
        log.warning("validation reservation %s not deleted: %s", name, exc)
    if verdict_now == "passed":
        history.end_validation(node, "passed", f"job {opened.job}")
        history.record_action(node, "healthcheck", "validated", "", f"job {opened.job} passed after {opened.cause}", True)
        log.info("validation job %s of %s passed: back in service", opened.job, node)
        return None
    detail = one_line(comment or state or "no result")
    history.end_validation(node, "failed", detail)
    if final not in ("ok", "warn"):
        return None
    reason = one_line(f"{PREFIX} repair validation failed {opened.attempt}x after {opened.cause}: {detail}")
    try:
        done = actuator.drain([info], reason)
    except SlurmError as exc:
        log.error("%s not drained after its failed validation: %s", node, exc)
        return None
    history.record_action(node, "healthcheck", "drain", reason, f"validation job {opened.job} {state}", True)
    return replace(info, flags=info.flags | {"DRAIN"}, reason=reason) if done.done else None


def _published_cases(history, info: NodeInfo, settings: SlurmSettings) -> list[list]:
    """The node's open cases as the summary carries them (`fleet cases` reads them fleet-wide in one read):
    [class, attempts, first, last (epoch s), status], status `repair` (drained for it), `running` (the
    ladder is on it) or `watch` (remedied, still within the window)."""
    from ..remediation import is_repair
    from ..slurm.ownership import PREFIX

    out = []
    for c in history.cases(info.name, settings.attempt_window_s) or []:
        status = "repair" if (info.drained and is_repair(info.reason, PREFIX) and c["outcome"] == "pending") \
            else "running" if c["running"] else "watch"
        out.append([c["class"], c["attempts"], int(c["first"]), int(c["last"]), status])
    return out


def _rack_fault(findings: list[Finding]) -> bool:
    """The node's worst finding is one a rack can cause (fabric, NVLink): its drain may be the rack's."""
    from ..slurm.actions import worst
    from ..slurm.escalation import RACK_CHECKS

    f = worst(findings)
    return f is not None and f.severity == "drain" and f.check in RACK_CHECKS


class KeptHistory:
    """The node's history, or its absence: a full disk, a read-only or broken database must not stop a
    drain.  Every call that fails is logged once and answers what an empty history would (no clean runs:
    nothing is resumed; no reboots recorded)."""

    def __init__(self, cls, path: str):
        self.path = path
        self.failed = False
        import sqlite3

        self._errors = (sqlite3.Error, OSError)  # what a full, read-only or broken disk raises
        try:
            self._h = cls(path)
        except self._errors as exc:
            self._h = None
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if not self.failed:
            log.error("history %s unavailable, acting without it: %s: %s", self.path, type(exc).__name__, exc)
        self.failed = True

    def __getattr__(self, name: str):
        from ..slurm.actions import NodeHistory

        empty = {"node_history": NodeHistory(), "record_run": 0}

        def call(*args, **kwargs):
            if self._h is None:
                return empty.get(name)
            try:
                return getattr(self._h, name)(*args, **kwargs)
            except self._errors as exc:
                self._fail(exc)
                return empty.get(name)
        return call


def driver_features(prefix: str, driver: str | None, cuda: str | None) -> list[str]:
    """gpufleet_drv580, gpufleet_drv580.159.04, gpufleet_cuda13.0: what a job can --constraint on."""
    out = []
    if driver:
        out += [f"{prefix}drv{driver.split('.')[0]}", f"{prefix}drv{driver}"]
    if cuda:
        out.append(f"{prefix}cuda{cuda}")
    return out


def _feature_fields(info, prefix: str, driver: str | None, cuda: str | None) -> dict[str, str]:
    """Our features, when they changed; every feature without our prefix stays as the site set it."""
    want = driver_features(prefix, driver, cuda)
    if not want:
        return {}  # nothing readable: keep what the node had rather than pretend it has no driver
    if sorted(f for f in info.features if f.startswith(prefix)) == sorted(want) and \
            sorted(f for f in info.active_features if f.startswith(prefix)) == sorted(want):
        return {}
    available = [f for f in info.features if not f.startswith(prefix)] + want
    active = [f for f in info.active_features if not f.startswith(prefix)] + want
    return {"availablefeatures": ",".join(available), "activefeatures": ",".join(active)}


def _older_than_slurmd(old: dict, info) -> bool:
    """Published before this slurmd started: the first check after a restart or a reboot always
    publishes, even unchanged (an upgrade repeated after a crash installs the same driver again, and a
    rollout validates only from a summary newer than its command)."""
    if info.slurmd_start is None:
        return False
    published = published_at(old)
    return published is None or published < info.slurmd_start


_OTHERS = object()  # the field holds someone else's text


def _shown(info, field: str) -> dict | object | None:
    """The field's summary as Slurm shows it: ours parsed, None when empty, _OTHERS for foreign text."""
    current = info.extra if field == "extra" else info.comment
    if not current:
        return None
    old = parse_summary(current)
    return _OTHERS if old is None else old


_UNREAD = object()


def _news(info, field: str, data: dict, shown=_UNREAD) -> str | None:
    """The summary to write, or None: someone else's text is never overwritten, and an unchanged
    summary is written only once per slurmd start.  `shown`: what _shown read already, if it did."""
    if shown is _UNREAD:
        shown = _shown(info, field)
    if shown is _OTHERS:
        return None
    if shown is not None:
        same = {k: v for k, v in shown.items() if k != "t"} == {k: v for k, v in data.items() if k != "t"}
        if same and not _older_than_slurmd(shown, info):
            return None
    return json.dumps(data, separators=(",", ":"))



def _guarded(hook: str, fn, *args) -> int:
    """A bug in slurm-gpufleet must never fail a prolog or drain a node: one log line, exit 0."""
    try:
        return fn(*args)
    except SystemExit:
        raise
    except Exception as exc:
        if os.environ.get("SLURM_GPUFLEET_DEBUG"):
            raise
        line = f"slurm-gpufleet-{hook}: internal error, no action taken: {type(exc).__name__}: {exc}\n"
        sys.stderr.write(line)
        _keep_error(line)
        return 0


