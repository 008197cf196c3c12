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

from . import watchdog
from .engine import Report, evaluate
from .findings import RANK, Finding, verdict
from .policy import Policy, PolicyError, SlurmSettings, config_path, load_policy
from .readers import ReportError
from .slurm.base import NodeInfo
from .snapshot import NodeSnapshot, known
from .summary import parse as parse_summary
from .summary import published_at, stamp

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


def _setup(hook: str, config: str | None, node: str | None, job: str | None = None) -> Setup | None:
    node = node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    setup_logging(hook, node, job)
    path, required = config_path(config)
    try:
        policy = load_policy(path if (required or (path and os.path.exists(path))) else None)
    except PolicyError as exc:
        log.error("config error, no action taken: %s", exc)
        return None
    global _ERROR_LOG
    _ERROR_LOG = os.path.join(policy.slurm.state_dir, ERROR_LOG_NAME)
    return Setup(node, policy, policy.slurm)


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
def read_node(settings: SlurmSettings, node: str, level: str = "quick") -> NodeSnapshot:
    """The node's GPUs through live NVML (`deep` adds the measurements) and, when it can be read, its
    kernel log."""
    from .engine import Source, gather
    from .readers.kernel_log import read_kernel_log_file

    snap = gather(Source(level=level))
    snap.host = node
    kernel = settings.kernel_log
    if kernel and os.path.isdir(kernel):
        kernel = os.path.join(kernel, f"{node}.kmsg")
        kernel = kernel if os.path.exists(kernel) else None
    if kernel:
        try:
            snap.xid_events, snap.boots_seen = read_kernel_log_file(kernel)
        except OSError as exc:  # a missing log must not hide the GPUs' own state
            log.warning("kernel log %s unreadable: %s", kernel, exc)
    return snap


def _host_facts(settings: SlurmSettings):
    from .readers.host import read_host

    try:
        return read_host(settings.host_root)
    except OSError as exc:  # what cannot be read is not judged
        log.warning("host facts under %s unreadable: %s", settings.host_root, exc)
        return None


def _start_watchdog(setup: Setup, code: int, on_timeout) -> object:
    """A hard limit on reading GPU state: on expiry `on_timeout` runs (drain, or hand the reason over)
    and the process exits with `code`, whatever the stuck call is doing."""
    return watchdog.start(setup.settings.read_timeout_s, f"reading GPU state of {setup.node}", code,
                          before_exit=on_timeout)


def _drain_if_free(settings: SlurmSettings, node: str, reason: str) -> None:
    from .slurm.commands import CommandBackend
    from .slurm.ownership import HEALTH, may_drain

    backend = CommandBackend(settings.scontrol, timeout=5)
    try:
        info = backend.node(node)
        if not may_drain(info, HEALTH):
            return  # a rollout's, a straggler drain, an admin's: their reason stays
        if info.drained:
            backend.drain(node, reason)  # our own drain: only the reason changes
        elif breaker_drain(settings, backend, node, reason):
            sys.stderr.write(f"slurm-gpufleet: {node} not drained: the drain breaker is open\n")
    except Exception as exc:  # the watchdog must exit whatever happens here
        sys.stderr.write(f"slurm-gpufleet: could not drain {node}: {exc}\n")


# ---------------------------------------------------------------- acting
def act(setup: Setup, report: Report, hook: str, job: str | None = None,
        extra_findings: list[Finding] | None = None, info: NodeInfo | None = None, backend=None) -> str:
    """Record the run, decide, carry it out through Slurm, publish the summary.  Returns the action."""
    from .history import History, db_path
    from .slurm import SlurmError, get_backend
    from .slurm.actions import decide

    findings = report.findings + (extra_findings or [])
    final = verdict(findings)
    node = setup.node
    history = KeptHistory(History, db_path(setup.settings.state_dir, node))
    s = report.snapshot
    history.record_run(node, hook, final, findings, job_id=job, duration_s=report.duration_s,
                       driver=known(s.driver_version), gpus=len(s.gpus), performance=s.performance,
                       models={g.index: known(g.name) for g in s.gpus})
    try:
        backend = backend or get_backend(setup.settings.backend, setup.settings.scontrol)
        info = info or backend.node(node)  # the health check read it already: one slurmctld call, not two
    except SlurmError as exc:
        log.error("cannot read node state from Slurm: %s", exc)
        history.record_action(node, hook, "none", "", f"slurm unreachable: {exc}", False, str(exc))
        return "error"
    action = decide(info, final, findings, history.node_history(node),
                    setup.settings.clean_runs_to_resume, setup.settings.reboots_before_drain)
    blocked = None
    ok, error = True, None
    try:
        if action.kind == "drain":
            blocked = breaker_drain(setup.settings, backend, node, action.reason)
            if blocked:
                history.record_action(node, hook, "breaker", action.reason, blocked, True)
                action = type(action)("none", why=f"not drained, breaker open: {blocked}")
        elif action.kind == "set_reason":
            backend.set_reason(node, action.reason)
        elif action.kind == "resume":
            backend.resume(node)
        elif action.kind == "reboot":
            # look before rebooting: a reboot into a kernel without a module for this driver loses the GPUs
            from .checks.kernel import reboot_problem
            from .slurm.actions import one_line

            problem = reboot_problem(s.host_facts or _host_facts(setup.settings), known(s.driver_version))
            if problem:
                reason = one_line(f"gpufleet: {problem}")
                action = type(action)("drain", reason=reason, why=f"not rebooted ({action.reason}): {problem}")
                blocked = breaker_drain(setup.settings, backend, node, reason)
            else:
                backend.reboot_asap(node, action.reason)
                history.record_reboot(node, action.fault or "", info.boot_time)
    except SlurmError as exc:
        ok, error = False, str(exc)
    if action.kind != "none" or not ok:
        history.record_action(node, hook, action.kind, action.reason, action.why, ok, error)
        (log.info if ok else log.error)("%s %s%s: %s%s", hook, action.kind,
                                        f" '{action.reason}'" if action.reason else "", action.why,
                                        f" FAILED: {error}" if error else "")
    else:
        log.info("%s verdict %s: %s", hook, final, action.why)
    if setup.settings.feature_prefix and hook != "prolog":
        _features(backend, info, setup.settings.feature_prefix, known(s.driver_version), known(s.cuda_driver_version))
    # published even with no GPU readable: a rollout validates from it, and "driver unreachable" is news
    if setup.settings.publish != "none":
        data = summary(report, final)
        if blocked:
            data["f"] = f"breaker open: {data.get('f', '')}"[:80]
            data["brk"] = 1
        _publish(backend, info, setup.settings.publish, data)
    if hook == "healthcheck":
        history.prune()
    history.close()
    return action.kind if ok else "error"


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


def breaker_drain(settings: SlurmSettings, backend, node: str, reason: str) -> str | None:
    """Drain the node unless the fleet-wide breaker stops it; returns why it stopped it, or None."""
    from .slurm import breaker

    with breaker.counting_lock(settings.breaker_path):
        blocked = breaker_blocks(settings, backend, node)
        if not blocked:
            backend.drain(node, reason)
    return blocked


def breaker_blocks(settings: SlurmSettings, backend, node: str) -> str | None:
    """Why the fleet-wide breaker stops this drain, or None.  Costs one fleet read, on drains only."""
    from .slurm import SlurmError, breaker

    path = settings.breaker_path
    record = breaker.state(path)
    if record is None:
        try:
            fleet = backend.nodes()
        except SlurmError as exc:  # cannot count: drain as before (a blind breaker must not hide faults)
            log.warning("breaker: cannot read the fleet, not judged: %s", exc)
            return None
        trip = breaker.would_trip(fleet, node, settings.breaker_threshold, settings.breaker_window_s)
        if trip is None:
            return None
        why = trip.text(settings.breaker_window_s)
        try:
            breaker.open_(path, node, why)
        except OSError as exc:
            log.error("breaker: cannot record the open state in %s: %s", path, exc)
        record = breaker.state(path) or {"why": why}
        log.critical("ALERT gpufleet drain breaker OPEN: %s; no node is drained until "
                     "`slurm-gpufleet breaker reset`", why)
    return str(record.get("why", "open"))


def summary(report: Report, final: str) -> dict:
    s = report.snapshot
    names = sorted({known(g.name) or "?" for g in s.gpus})
    vbios = sorted({known(g.vbios) for g in s.gpus if known(g.vbios)})
    data = {"gpufleet": 1, "v": final, "drv": known(s.driver_version), "cuda": known(s.cuda_driver_version),
            "gpus": f"{len(s.gpus)}x{'/'.join(names)}", "fw": ",".join(vbios),
            "t": stamp(), "boot": _boot_id()}
    # what a rollout compares against its canary after each upgrade
    gsp = sorted({known(g.gsp_firmware) for g in s.gpus if known(g.gsp_firmware)})
    if gsp:
        data["gsp"] = ",".join(gsp)
    host = s.host_facts
    if host is not None and host.running is not None:
        data["kern"] = host.running.release
        if host.running.module is not None and host.running.module.flavour:
            data["modf"] = host.running.module.flavour
    if host is not None and host.cdmm is not None:
        data["cdmm"] = host.cdmm
    worst = [f for f in report.findings if RANK[f.severity] >= RANK["reboot"]]
    if worst:  # why, for a rollout's validation and for `fleet`
        data["f"] = max(worst, key=lambda f: RANK[f.severity]).message[:80]
    bw = [p.mem_bw_gbps for p in s.performance if p.mem_bw_gbps]
    if bw:  # the slowest GPU is what stalls a synchronous job: the fleet's straggler view reads this
        data["bw"] = round(min(bw))
        data["bwgpu"] = min((p for p in s.performance if p.mem_bw_gbps), key=lambda p: p.mem_bw_gbps).gpu
    return data


def driver_features(prefix: str, driver: str | None, cuda: str | None) -> list[str]:
    """gpufleet_drv580, gpufleet_drv580.159.04, gpufleet_cuda13.0: what a job can --constraint on."""
    out = []
    if driver:
        out += [f"{prefix}drv{driver.split('.')[0]}", f"{prefix}drv{driver}"]
    if cuda:
        out.append(f"{prefix}cuda{cuda}")
    return out


def _features(backend, info, prefix: str, driver: str | None, cuda: str | None) -> None:
    """Keep our features current; every feature without our prefix stays as the site set it."""
    from .slurm import SlurmError

    want = driver_features(prefix, driver, cuda)
    if not want:
        return  # nothing readable: keep what the node had rather than pretend it has no driver
    if sorted(f for f in info.features if f.startswith(prefix)) == sorted(want) and \
            sorted(f for f in info.active_features if f.startswith(prefix)) == sorted(want):
        return
    available = [f for f in info.features if not f.startswith(prefix)] + want
    active = [f for f in info.active_features if not f.startswith(prefix)] + want
    try:
        backend.set_features(info.name, available, active)
    except SlurmError as exc:
        log.warning("could not set the driver features: %s", exc)


def _boot_id() -> str:
    """Changes at every boot: a summary from before a reboot is never taken for one from after it."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()[:8]
    except OSError:
        return ""


def _older_than_slurmd(old: dict, info) -> bool:
    """Published before this slurmd started: the first check after a restart or a reboot always
    publishes, even unchanged (an upgrade repeated after a crash installs the same driver again, and a
    rollout validates only from a summary newer than its command)."""
    if info.slurmd_start is None:
        return False
    published = published_at(old)
    return published is None or published < info.slurmd_start


def _publish(backend, info, field: str, data: dict) -> None:
    from .slurm import SlurmError

    current = info.extra if field == "extra" else info.comment
    if current:
        old = parse_summary(current)
        if old is None:
            return  # someone else's text: never overwrite it
        same = {k: v for k, v in old.items() if k != "t"} == {k: v for k, v in data.items() if k != "t"}
        if same and not _older_than_slurmd(old, info):
            return  # nothing new since this slurmd started: no write
    try:
        backend.set_field(info.name, field, json.dumps(data, separators=(",", ":")))
    except SlurmError as exc:
        log.warning("could not publish the GPU summary: %s", exc)


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
    args = ap.parse_args(argv)
    setup = _setup("healthcheck", args.config, args.node)
    if setup is None:
        return 0 if not args.nhc else 2
    _start_watchdog(setup, 1, None if args.nhc else lambda: _drain_if_free(setup.settings, setup.node, TIMEOUT_REASON))
    try:
        snap = read_node(setup.settings, setup.node, args.level)
        snap.host_facts = _host_facts(setup.settings)
    except (ReportError, OSError) as exc:
        log.error("no readable GPU state: %s", exc)
        if args.nhc:
            print(f"gpufleet: no readable GPU state: {exc}"[:200])
            return 1
        _drain_if_free(setup.settings, setup.node, "gpufleet: inventory node no readable GPU state")
        return 1
    finally:
        watchdog.cancel()
    from .slurm import SlurmError, get_backend

    backend = node_info = None
    if not args.nhc:
        try:
            backend = get_backend(setup.settings.backend, setup.settings.scontrol)
            node_info = backend.node(setup.node)
        except SlurmError as exc:
            log.error("cannot read node state from Slurm: %s", exc)
    # an idle node should have no GPU processes; a busy one is judged on everything else
    idle = bool(node_info and node_info.idle)
    report = evaluate(snap, setup.policy, host=setup.node, expect_idle=idle or None)
    if args.nhc:
        from .slurm.actions import make_reason, worst

        if report.verdict in ("reboot", "drain"):
            print(make_reason(worst(report.findings)))
            return 1
        return 0
    act(setup, report, "healthcheck", info=node_info, backend=backend)
    return 0


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
    # slurmd drains the node for the failed prolog; the helper then puts our reason on it
    _start_watchdog(setup, 1, lambda: _prolog_timeout(setup))
    try:
        snap = read_node(setup.settings, setup.node, "quick")
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
    if job:
        _write_window(setup.settings, setup.node, job, snap, gpus)
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
    """A failed prolog drains the node: the breaker is asked first (failure path only)."""
    from .slurm import get_backend

    try:
        blocked = breaker_blocks(setup.settings, get_backend(setup.settings.backend, setup.settings.scontrol),
                                 setup.node)
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
    from .slurm import SlurmError, get_backend
    from .slurm.ownership import HEALTH, SLURM_HOOK_REASONS, owner_of_reason

    if not os.access(setup.settings.scontrol, os.X_OK):
        log.error("%s not found: cannot put the reason on the node", setup.settings.scontrol)
        return 0
    backend = get_backend(setup.settings.backend, setup.settings.scontrol)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            info = backend.node(node)
            if info.drained and info.reason in SLURM_HOOK_REASONS:
                backend.set_reason(node, reason)
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
    extra = job_findings(snap, job, gpus, window)
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
