"""What slurmd runs: the health check, the prolog and the epilog.

Each reads the node's GPUs under a hard time limit, judges them with the same checks as
`slurm-gpufleet check`, and acts through Slurm (slurm/actions.py decides, a backend carries it out).
Imports stay light: sqlite-utils only once there is something to record, never click or jinja2, and
the prolog's success path makes no slurmctld round-trip and opens no database.

A broken config never acts: it is logged and the program exits 0 (a typo must not drain a fleet).
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import watchdog
from .policy import Policy, PolicyError, SlurmSettings, config_path, default_policy, load_policy
from .summary import encode as encode_summary
from .summary import parse as parse_summary
from .summary import published_at

if TYPE_CHECKING:
    from .findings import Finding
    from .pipeline import Report
    from .slurm.base import NodeInfo
    from .snapshot import NodeSnapshot

# The checks, readers and Slurm layer are imported inside the functions that use them: slurmd starts a
# health check every interval whether the last one ended or not, and a run that only finds the previous
# one still going (the run lock) must cost a config parse, not the whole engine.

log = logging.getLogger("slurm-gpufleet")
TIMEOUT_REASON = "gpufleet: NVML timeout"


def setup_logging(hook: str, node: str, job: str | None = None) -> None:
    tag = f"slurm-gpufleet-{hook}[{os.getpid()}]: node={node}" + (f" job={job}" if job else "") + " "
    handlers: list[logging.Handler] = []
    if os.path.exists("/dev/log"):
        try:
            h = logging.handlers.SysLogHandler(address="/dev/log", facility=logging.handlers.SysLogHandler.LOG_DAEMON)
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
    node: str
    policy: Policy
    settings: SlurmSettings
    refused: str | None = None     # the config's first untrusted path: run on the packaged defaults


def _setup(hook: str, config: str | None, node: str | None, job: str | None = None) -> Setup | None:
    node = node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    setup_logging(hook, node, job)
    path, required = config_path(config)
    try:
        policy = load_policy(path if (required or (path and os.path.exists(path))) else None)
    except PolicyError as exc:
        log.error("config error, no action taken: %s", exc)
        return None
    from .trust import refusals

    refused = refusals(policy)
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
    from .pipeline import Source, gather

    snap = gather(Source(level=level, kernel_log=settings.kernel_log, host=node,
                         host_root=settings.host_root.replace("%n", node) if host else None, strict=False))
    for what in snap.unread:
        log.warning("%s", what)
    return snap


def _backend(settings: SlurmSettings, timeout: float = 10.0):
    from .slurm import get_backend

    return get_backend(settings.backend, settings.scontrol, timeout, cache_dir=settings.state_dir)


def _start_watchdog(setup: Setup, code: int, on_timeout) -> object:
    """A hard limit on reading GPU state: on expiry `on_timeout` runs (drain, or hand the reason over)
    and the process exits with `code`, whatever the stuck call is doing."""
    return watchdog.start(setup.settings.read_timeout_s, f"reading GPU state of {setup.node}", code,
                          before_exit=on_timeout)


def _drain_if_free(settings: SlurmSettings, node: str, reason: str) -> None:
    """The watchdog's and an unreadable node's drain: through the actuator (ownership, the breaker)."""
    from .slurm.actuator import Actuator
    from .slurm.ownership import HEALTH

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
    from .findings import verdict
    from .history import History, db_path
    from .slurm import SlurmError
    from .slurm.actions import decide
    from .slurm.actuator import Actuator
    from .slurm.ownership import HEALTH, rack_of_reason
    from .snapshot import known

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
    action = decide(info, final, findings, history.node_history(node), settings.clean_runs_to_resume,
                    settings.reboots_before_drain, host=s.host_facts, driver=known(s.driver_version))
    data = encode_summary(report, final) if settings.publish != "none" else None
    if data is not None and setup.refused:
        data["cfg"] = "refused"
    shown = _shown(info, settings.publish) if data is not None else None  # what Slurm has now, read once
    if data is not None and hook != "epilog" and isinstance(shown, dict) and "is" in shown:
        data["is"] = shown["is"]  # the in-job sampler's digest, kept until the job's end
    news = _news(info, settings.publish, data, shown) if data is not None else None
    # what changed about the node rides in the same write as the action: one update, not three
    fields = _feature_fields(info, settings.feature_prefix, known(s.driver_version), known(s.cuda_driver_version)) \
        if settings.feature_prefix and hook != "prolog" else {}
    if news:
        fields[settings.publish] = news
    actuator = Actuator(backend, HEALTH, settings)
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
            from .slurm.escalation import resume_domain

            said = resume_domain(backend, settings, setup.policy.domains, info)
            # the summary and features are this node's alone: they go out below, in a write of their own
            action = type(action)("resume" if said.startswith("rack ") and " resumed: " in said else "none", why=said)
        elif action.kind == "resume":
            published = bool(actuator.resume([info], fields or None).done)
        elif action.kind == "reboot":
            done = actuator.reboot_asap([info], action.reason)
            if done.blocked:
                blocked = done.breaker
                history.record_action(node, hook, "breaker", action.reason, blocked, True)
                action = type(action)("none", why=f"not rebooted, breaker open: {blocked}")
            elif done.done:
                history.record_reboot(node, action.fault or "", info.boot_time)
    except SlurmError as exc:
        ok, error = False, str(exc)
    if ok and action.kind in ("drain", "set_reason") and published and _rack_fault(findings):
        from .slurm.escalation import escalate

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
    if hook == "healthcheck":
        history.prune()
    history.close()
    return action.kind if ok else "error"


def _rack_fault(findings: list[Finding]) -> bool:
    """The node's worst finding is one a rack can cause (fabric, NVLink): its drain may be the rack's."""
    from .slurm.actions import worst
    from .slurm.escalation import RACK_CHECKS

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
        from .slurm.actions import NodeHistory

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


# ---------------------------------------------------------------- entry points
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


def healthcheck_main(argv: list[str] | None = None) -> int:
    return _guarded("healthcheck", _healthcheck, argv)


def sampler_main(argv: list[str]) -> int:
    """The in-job sampler the prolog starts (sampler.py): JOB NODE."""
    return _guarded("sampler", _sampler, argv)


def _sampler(argv: list[str]) -> int:
    from . import sampler

    job, node = argv[0], argv[1]
    setup = _setup("sampler", None, node, job)
    if setup is None:
        return 0
    import pynvml

    return sampler.loop(setup.settings, _backend(setup.settings), pynvml, job, node)


def prolog_main(argv: list[str] | None = None) -> int:
    return _guarded("prolog", _prolog, argv)


def epilog_main(argv: list[str] | None = None) -> int:
    return _guarded("epilog", _epilog, argv)


def _healthcheck(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="slurm-gpufleet-healthcheck",
                                 description="Slurm HealthCheckProgram: check this node's GPUs and act.")
    ap.add_argument("--config")
    ap.add_argument("--node")
    ap.add_argument("--level", choices=["quick", "full", "deep"], default="quick",
                    help="deep: also measure each GPU (memory bandwidth, GEMM, host-to-device)")
    ap.add_argument("--nhc", action="store_true",
                    help="judge only (no Slurm action): print the reason and exit 1 when the node is unfit (NHC)")
    ap.add_argument("--confirm", action="store_true",
                    help="a lemon's deep check (lemon.py), run as its job: judge only; when a finding shows the "
                         "node slow, print it, make it the job's comment and exit 1")
    args = ap.parse_args(argv)
    judge_only = args.nhc or args.confirm
    setup = _setup("healthcheck", args.config, args.node)
    if setup is None:
        return 0 if not judge_only else 2
    if not judge_only and not _one_run_at_a_time(setup):
        log.warning("the previous health check of %s still runs after %g s: this run is skipped",
                    setup.node, setup.settings.read_timeout_s)
        return 0
    from .pipeline import evaluate
    from .readers import ReportError

    _start_watchdog(setup, 1, None if judge_only else lambda: _drain_if_free(setup.settings, setup.node, TIMEOUT_REASON))
    try:
        snap = read_node(setup.settings, setup.node, args.level)
    except (ReportError, OSError) as exc:
        log.error("no readable GPU state: %s", exc)
        if args.confirm:
            return _confirm(setup, f"no readable GPU state: {exc}")
        if args.nhc:
            print(f"gpufleet: no readable GPU state: {exc}"[:200])
            return 1
        _drain_if_free(setup.settings, setup.node, "gpufleet: inventory node no readable GPU state")
        return 1
    finally:
        watchdog.cancel()
    from .slurm import SlurmError

    backend = node_info = None
    if not judge_only:
        try:
            backend = _backend(setup.settings)
            node_info = backend.node(setup.node)
        except SlurmError as exc:
            log.error("cannot read node state from Slurm: %s", exc)
    # an idle node should have no GPU processes; a busy one is judged on everything else
    idle = bool(node_info and node_info.idle)
    report = evaluate(snap, setup.policy, host=setup.node, expect_idle=idle or None)
    if args.confirm:
        from .lemon import confirming

        found = confirming(report.findings)
        return _confirm(setup, f"{found.check} gpu{found.gpu}: {found.message}" if found.gpu is not None
                        else f"{found.check}: {found.message}") if found else 0
    if args.nhc:
        from .slurm.actions import make_reason, worst

        if report.verdict in ("reboot", "drain"):
            print(make_reason(worst(report.findings)))
            return 1
        return 0
    act(setup, report, "healthcheck", info=node_info, backend=backend)
    return 0


_RUN_LOCK: int | None = None  # held until this process exits (the watchdog's os._exit included)


def _one_run_at_a_time(setup: Setup) -> bool:
    """At most one acting health check per node: slurmd starts a run every HealthCheckInterval whether
    the last one ended or not (22.05 and 24.11 never kill it), so on a loaded node runs pile up, each
    slower than the last.  A run waits for the previous one for up to `read_timeout_s` (itself bounded by
    the watchdog), then gives way.  A lock that cannot be made never stops the check."""
    import fcntl

    global _RUN_LOCK
    try:
        os.makedirs(setup.settings.state_dir, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(setup.settings.state_dir, f"healthcheck-{setup.node}.lock"),
                     os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        log.warning("no run lock (%s): running anyway", exc)
        return True
    deadline = time.monotonic() + setup.settings.read_timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _RUN_LOCK = fd
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return False
            time.sleep(0.1)
        except OSError as exc:
            log.warning("run lock failed (%s): running anyway", exc)
            return True


def _confirm(setup, finding: str) -> int:
    """The lemon check found the node slow: say so where `fleet lemons` reads it, the job's comment."""
    from .lemon import CONFIRMED_PREFIX
    from .slurm.actions import JOB_COMMENT_MAX

    print(finding)
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        from .slurm import SlurmError

        try:
            from .slurm.actuator import Actuator
            from .slurm.ownership import STRAGGLER

            Actuator(_backend(setup.settings), STRAGGLER, setup.settings).job(
                "set_job_comment", job, f"{CONFIRMED_PREFIX} {finding}"[:JOB_COMMENT_MAX])
        except SlurmError as exc:
            log.error("cannot set job %s's comment: %s", job, exc)
    return 1


def _job_nodes() -> int:
    """How many nodes the job has, from the prolog's environment."""
    raw = os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES")
    if raw and raw.isdecimal():
        return int(raw)
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST") or ""
    if not nodelist:
        return 1
    from .slurm.commands import expand_hostlist

    return len(expand_hostlist(nodelist))


def _job_gpus() -> frozenset[int] | None:
    raw = os.environ.get("SLURM_JOB_GPUS") or os.environ.get("CUDA_VISIBLE_DEVICES") or ""
    ids = {int(x) for x in raw.split(",") if x.strip().isdecimal()}
    return frozenset(ids) if ids else None


def _window_path(settings: SlurmSettings, node: str, job: str) -> str:
    return os.path.join(settings.state_dir, "jobs", f"{node}.{job}.json")


def _prolog(argv: list[str] | None = None) -> int:
    job = os.environ.get("SLURM_JOB_ID")
    setup = _setup("prolog", None, None, job)
    if setup is None:
        return 0  # our config problem must not stop jobs
    from .findings import verdict
    from .pipeline import evaluate
    from .readers import ReportError
    from .snapshot import known

    # slurmd drains the node for the failed prolog; the helper then puts our reason on it
    _start_watchdog(setup, 1, lambda: _prolog_timeout(setup))
    try:
        snap = read_node(setup.settings, setup.node, "quick", host=False)
    except (ReportError, OSError) as exc:
        watchdog.cancel()
        reason = "gpufleet: inventory node no readable GPU state"
        if _breaker_open_for_prolog(setup, reason):
            return 0
        print(f"{reason}: {exc}"[:200])
        _async_reason(setup, reason)
        return 1
    watchdog.cancel()
    gpus = _job_gpus()
    report = evaluate(snap, setup.policy, host=setup.node, idle_gpus=gpus)
    from .imex import job_findings as imex_findings

    # IMEX is the job's to judge (imex.py): only a job that uses it, never an idle node
    report.findings += imex_findings(os.environ, setup.settings)
    report.verdict = verdict(report.findings)
    if job:
        _write_window(setup.settings, setup.node, job, snap, gpus)
        if report.verdict not in ("reboot", "drain") and _job_nodes() >= 2:
            from . import sampler

            try:  # the straggler view of a multi-node job (instep.py); a failure must not stop the job
                sampler.start(setup.settings.state_dir, job, setup.node)
            except OSError as exc:
                log.warning("in-job sampler not started: %s", exc)
    if report.verdict in ("reboot", "drain"):
        from .slurm.actions import make_reason, worst

        reason = make_reason(worst(report.findings))
        from .history import History, db_path

        history = KeptHistory(History, db_path(setup.settings.state_dir, setup.node))
        history.record_run(setup.node, "prolog", report.verdict, report.findings, job_id=job,
                           duration_s=report.duration_s, driver=known(snap.driver_version), gpus=len(snap.gpus))
        history.close()
        if _breaker_open_for_prolog(setup, reason):
            return 0
        log.error("prolog failed, job %s will be requeued: %s", job, reason)
        print(reason)  # slurmd logs it: "prolog failed: rc:1 output:<this>"
        _async_reason(setup, reason)
        return 1
    return 0


def _breaker_open_for_prolog(setup: Setup, reason: str) -> bool:
    """A failed prolog drains the node (Slurm does, for our exit code): the breaker is asked first, by
    the actuator (failure path only)."""
    from .slurm.actuator import Actuator
    from .slurm.ownership import HEALTH

    try:
        backend = _backend(setup.settings)
        blocked = Actuator(backend, HEALTH, setup.settings).judge([backend.node(setup.node)]).breaker
    except Exception as exc:  # the breaker must never turn a fault into an internal error
        log.warning("breaker not judged: %s", exc)
        return False
    if blocked:
        log.error("prolog: %s, but the drain breaker is open (%s): the job runs, the node is not drained",
                  reason, blocked)
    return bool(blocked)


def _prolog_timeout(setup: Setup) -> None:
    print(TIMEOUT_REASON, flush=True)  # the watchdog ends the process with os._exit: no flush at exit
    _async_reason(setup, TIMEOUT_REASON)


def _async_reason(setup: Setup, reason: str) -> None:
    """Slurm's own reason for a failed prolog is just "Prolog error".  A detached helper waits for
    slurmctld to drain the node, then puts our detailed reason in its place (prolog exit is not delayed)."""
    code = ("import sys; from slurm_gpufleet.hooks import replace_hook_reason; "
            "sys.exit(replace_hook_reason(sys.argv[1], sys.argv[2], sys.argv[3] or None))")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + (":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
    try:
        subprocess.Popen([sys.executable, "-c", code, setup.node, reason, setup.policy.path or ""],
                         start_new_session=True, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError as exc:
        log.warning("could not start the reason update: %s", exc)


def replace_hook_reason(node: str, reason: str, config: str | None, wait_s: float = 20.0) -> int:
    setup = _setup("prolog", config, node)
    if setup is None:
        return 0
    from .slurm import SlurmError
    from .slurm.actuator import Actuator
    from .slurm.ownership import HEALTH, SLURM_HOOK_REASONS, owner_of_reason

    if not os.access(setup.settings.scontrol, os.X_OK):
        log.error("%s not found: cannot put the reason on the node", setup.settings.scontrol)
        return 0
    backend = _backend(setup.settings)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            info = backend.node(node)
            if info.drained and info.reason in SLURM_HOOK_REASONS:
                Actuator(backend, HEALTH, setup.settings).set_reason([info], reason)
                log.info("replaced '%s' with '%s'", info.reason, reason)
                from .history import History, db_path

                history = KeptHistory(History, db_path(setup.settings.state_dir, node))
                history.record_action(node, "prolog", "set_reason", reason, f"was '{info.reason}'", True)
                history.close()
                return 0
            if info.drained and info.reason and owner_of_reason(info.reason) != HEALTH:
                return 0  # someone else's reason (an admin's, a rollout's): never replaced
        except SlurmError as exc:
            log.warning("waiting for the prolog drain: %s", exc)
        time.sleep(0.5)
    return 0


def _write_window(settings: SlurmSettings, node: str, job: str, snap: NodeSnapshot,
                  gpus: frozenset[int] | None) -> None:
    """Start of the job's window and its GPUs' error counters, for the epilog (a small file, no database)."""
    counters = {}
    for g in snap.gpus:
        sid = g.minor_number if isinstance(g.minor_number, int) else g.index
        if gpus is None or sid in gpus:
            counters[str(sid)] = _counters(g)
    path = _window_path(settings, node, job)
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = f"{path}.tmp"
        with open(tmp, "w") as fh:
            json.dump({"start": time.time(), "gpus": sorted(gpus) if gpus else None, "counters": counters}, fh)
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("could not write the job window: %s", exc)


def _counters(g) -> dict[str, int | None]:
    from .snapshot import known

    def n(v):
        v = known(v)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    return {"dram_uncorrected": n(g.ecc.volatile_dram_uncorrected), "sram_uncorrected": n(g.ecc.volatile_sram_uncorrected),
            "dram_corrected": n(g.ecc.volatile_dram_corrected), "remap_uncorrectable": n(g.remapped_rows.uncorrectable),
            "remap_correctable": n(g.remapped_rows.correctable), "retired_dbe": n(g.retired_pages.double_bit)}


def _epilog(argv: list[str] | None = None) -> int:
    job = os.environ.get("SLURM_JOB_ID")
    setup = _setup("epilog", None, None, job)
    if setup is None:
        return 0
    if job:
        from . import sampler

        sampler.stop(setup.settings.state_dir, job, setup.node)  # never outlives the job
    from .findings import verdict
    from .pipeline import evaluate
    from .readers import ReportError

    _start_watchdog(setup, 1, lambda: _drain_if_free(setup.settings, setup.node, TIMEOUT_REASON))
    try:
        snap = read_node(setup.settings, setup.node, "quick")
    except (ReportError, OSError) as exc:
        watchdog.cancel()
        log.error("no readable GPU state: %s", exc)
        _drain_if_free(setup.settings, setup.node, "gpufleet: inventory node no readable GPU state")
        return 0
    watchdog.cancel()
    window = {}
    if job:
        try:
            with open(_window_path(setup.settings, setup.node, job)) as fh:
                window = json.load(fh)
        except (OSError, json.JSONDecodeError):
            window = {}
    gpus = _job_gpus() or (frozenset(window["gpus"]) if window.get("gpus") else None)
    report = evaluate(snap, setup.policy, host=setup.node, idle_gpus=gpus)
    from .imex import job_findings as imex_findings

    extra = job_findings(snap, job, gpus, window) + imex_findings(os.environ, setup.settings)
    for f in extra:
        log.warning("job %s: %s gpu %s: %s", job, f.check, f.gpu, f.detail or f.message)
    result = act(setup, report, "epilog", job=job, extra_findings=extra)
    if job:
        try:
            os.unlink(_window_path(setup.settings, setup.node, job))
        except OSError:
            pass
    # when Slurm cannot be told, let it drain the node itself ("Epilog error") rather than pass a bad node
    return 1 if result == "error" and verdict(report.findings + extra) in ("reboot", "drain") else 0


def job_findings(snap: NodeSnapshot, job: str | None, gpus: frozenset[int] | None, window: dict) -> list[Finding]:
    """Xids and new memory errors inside the job's time window, attributed to the job and its GPUs.

    Severity "ok": these record what happened to the job; what the node needs is the normal checks' call.
    """
    from .catalog import xid_info
    from .findings import Finding
    from .readers.kernel_log import boot_epoch, event_epoch

    out: list[Finding] = []
    start = window.get("start")
    now = time.time()
    btime = boot_epoch()
    for e in snap.xid_events:
        at = event_epoch(e, btime)
        if start is None or at is None or not (start - 1 <= at <= now + 1):
            continue
        g = snap.gpu_by_pci(e.pci)
        sid = None if g is None else (g.minor_number if isinstance(g.minor_number, int) else g.index)
        if gpus is not None and sid is not None and sid not in gpus:
            continue
        info = xid_info(e.xid)
        out.append(Finding("job", "ok", "none", sid, f"Xid {e.xid} during job {job}",
                           f"{info.name if info else 'unknown Xid'} on PCI {e.pci} at line {e.line}, "
                           f"inside job {job}'s window", xid=e.xid, extra={"job_id": job}))
    for sid, before in (window.get("counters") or {}).items():
        g = next((x for x in snap.gpus if str(x.minor_number if isinstance(x.minor_number, int) else x.index) == sid),
                 None)
        if g is None:
            continue
        after = _counters(g)
        grown = {k: after[k] - v for k, v in before.items()
                 if isinstance(v, int) and isinstance(after.get(k), int) and after[k] > v}
        if grown:
            out.append(Finding("job", "ok", "none", int(sid), f"memory errors during job {job}",
                               ", ".join(f"{k} +{d}" for k, d in grown.items()), extra={"job_id": job}))
    return out
