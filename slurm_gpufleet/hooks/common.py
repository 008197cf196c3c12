"""What the health check, the prolog and the epilog share: the config and its trust, logging, the one
read of the node, the watchdog, and `act`: record the run, decide, carry it out through the actuator,
publish the summary.

A config that does not load is never a silent stop: the programs run on the last config that loaded (a
copy in the state directory), or in observe mode on the packaged defaults, and the node says so in its
published summary (`err`), which `fleet` lists.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..common import watchdog
from ..judging.summary import encode as encode_summary
from ..judging.summary import keep_published, live_digests, published_at, write_private
from ..policy import Policy, PolicyError, SlurmSettings, config_path, default_policy, load_policy
from ..slurm.reasons import ours
from .goodconfig import (
    keep_good_config,
    last_good_policy,
)
from .published import (
    _OTHERS,
    _feature_fields,
    _news,
    _shown,
    heartbeat,
)

if TYPE_CHECKING:
    from ..judging.findings import Finding
    from ..judging.pipeline import Report
    from ..readers.snapshot import NodeSnapshot
    from ..slurm.base import NodeInfo

# The checks, readers and Slurm layer are imported inside the functions that use them: slurmd starts a
# health check every interval whether the last one ended or not, and a run that only finds the previous
# one still going (the run lock) must cost a config parse, not the whole engine.

log = logging.getLogger("slurm-gpufleet")
TIMEOUT_REASON = ours("NVML timeout")
INVENTORY_REASON = ours("inventory node no readable GPU state")
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
    config_error: str | None = None  # the config did not load (FILE:LINE: why): run on the last that did


def _setup(hook: str, config: str | None, node: str | None, job: str | None = None) -> Setup | None:
    node = node or os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    setup_logging(hook, node, job)
    path, required = config_path(config)
    from ..policy.trust import problem, refusals

    path = path if (required or (path and os.path.exists(path))) else None
    # judged before a byte of it is parsed: a file others could write never reaches the parser
    first = problem(path) if path else None
    config_error = None
    try:
        policy = default_policy() if first else load_policy(path)
    except PolicyError as exc:
        # never a silent stop: the node runs on the last config that loaded, or in observe mode on the
        # packaged defaults, and says so in its summary ("err") for `fleet` to list
        config_error = str(exc)
        policy, on = last_good_policy(path, config_error)
        log.critical("ALERT gpufleet config error, running on %s: %s", on, exc)
    refused = [first] if first else refusals(policy, own_judged=path is not None)
    if refused:
        # a config someone else could have written must not choose what root runs: the packaged defaults
        # run instead, and the node says so (`fleet` lists it); jobs are not failed for it
        for r in refused:
            log.critical("ALERT gpufleet config refused, running on the packaged defaults: %s", r.line())
        policy = default_policy()
        for r in refusals(policy):
            log.critical("ALERT gpufleet default path refused too: %s", r.line())
    elif path and config_error is None:
        keep_good_config(path, policy.slurm.state_dir)
    global _ERROR_LOG
    _ERROR_LOG = os.path.join(policy.slurm.state_dir, ERROR_LOG_NAME)
    return Setup(node, policy, policy.slurm, refused[0].where if refused else None, config_error)


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
def read_node(setup: Setup, level: str = "quick", host: bool = True) -> NodeSnapshot:
    """The node's one read (pipeline.gather): its GPUs through live NVML (`deep` adds the measurements),
    its kernel log, and (`host`) its kernels and modules.  What cannot be read is logged, never allowed
    to hide the GPUs' own state.  The prolog skips the host: it judges only what a job would meet now."""
    from ..judging.pipeline import Source, gather

    settings, node = setup.settings, setup.node
    pol = setup.policy.for_node(node)
    root = settings.host_root.replace("%n", node)
    ib_sysfs = settings.ib_sysfs or os.path.join(root, "sys/class/infiniband")
    # a configured folder that is not there is the config's fault, not the ports': said, never a drain (the
    # default one missing is a driver that did not load: judged)
    mistyped = bool(settings.ib_sysfs) and host and not os.path.isdir(settings.ib_sysfs)
    snap = gather(Source(level=level, kernel_log=settings.kernel_log, host=node,
                         host_root=root if host else None, strict=False,
                         ib_sysfs=ib_sysfs if host and not mistyped else None,
                         ib_memory=os.path.join(settings.state_dir, f"ib-counters-{node}.json"),
                         models=setup.policy.models, systemctl=settings.systemctl or None,
                         probe_memory=(os.path.join(settings.state_dir, f"fabric-manager-{node}.json"),
                                       pol.fabric_manager_probe_s, pol.fabric_manager_flap_window_s)))
    if mistyped:
        snap.unread.append(f"[slurm] ib_sysfs {settings.ib_sysfs}: no such folder: InfiniBand not judged")
    for what in snap.unread:
        log.warning("%s", what)
    forget_repaired(setup, snap, repaired_at(settings.state_dir, node))
    return snap


def _kept_repair(state_dir: str, node: str) -> dict:
    try:
        with open(_repaired_path(state_dir, node), encoding="utf-8") as fh:
            kept = json.load(fh)
    except (OSError, ValueError):
        return {}
    return kept if isinstance(kept, dict) else {}


# ---------------------------------------------------------------- a repaired node's past
def _repaired_path(state_dir: str, node: str) -> str:
    return os.path.join(state_dir, f"repaired-{node}.json")


def repaired_at(state_dir: str, node: str) -> float | None:
    """When the node was last repaired (kept on the node across restarts and reboots), or None."""
    at = _kept_repair(state_dir, node).get("at")
    return float(at) if isinstance(at, int | float) and at == at else None


def repaired_counters(state_dir: str, node: str) -> dict[str, dict[str, int]]:
    """The GPUs' lifetime counters kept at the node's last repair (checks/memory.lifetime_counters)."""
    counters = _kept_repair(state_dir, node).get("counters")
    if not isinstance(counters, dict):
        return {}
    return {k: {n: v for n, v in c.items() if isinstance(v, int)} for k, c in counters.items() if isinstance(c, dict)}


def note_repair(setup: Setup, info, now: float | None = None, snap=None) -> float | None:
    """The node repaired, as Slurm shows it: `validate after repair` (an admin's `fleet repaired`: the
    reason's time is the repair), or back in service while its published summary still holds a case drained
    for repair (an admin's bare resume: the time of that summary, the last check that saw it held).  Kept on the node, so that what was logged before it never
    counts again (`forget_repaired`), nor its GPUs' lifetime counters as `snap` reads them now.  Returns the
    repair time newly kept, or None."""
    from ..judging.summary import from_node
    from ..remedy.returning import cause_of, is_validate

    if info is None:
        return None
    at = None
    if is_validate(info.reason) and cause_of(info.reason) == "repair" and info.reason_time:
        at = info.reason_time
    elif not (info.drained or info.down or info.rebooting):
        shown = from_node(info) or {}
        cases = shown.get("case") or []
        if any(isinstance(c, list) and len(c) == 5 and c[4] in ("repair", "validation_failed") for c in cases):
            # the last check that still saw it held for repair: what was logged after it may be new
            at = published_at(shown) or (time.time() if now is None else now)
    if at is None:
        return None
    kept = repaired_at(setup.settings.state_dir, setup.node)
    if kept is not None and kept >= at:
        return None
    path = _repaired_path(setup.settings.state_dir, setup.node)
    try:
        from ..judging.checks.memory import counter_key, lifetime_counters

        counters = {counter_key(g): lifetime_counters(g) for g in (snap.gpus if snap is not None else []) if not g.lost}
        write_private(path, json.dumps({"at": at, "reason": info.reason[:200], "counters": counters}).encode())
    except OSError as exc:
        log.warning("the repair of %s not kept: %s", setup.node, exc)
    log.info("repaired at %s (%s): what the kernel log holds from before no longer counts",
             time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(at)), info.reason or "resumed by an admin")
    return at


def forget_repaired(setup: Setup, snap, at: float | None) -> None:
    """Drop the node's kernel-log events from before its repair (readers/kernel_log.drop_before), and give
    the checks its GPUs' counters as the repair left them."""
    if at is None:
        return
    snap.repaired_counters = repaired_counters(setup.settings.state_dir, setup.node)
    from ..readers.kernel_log import drop_before

    dropped = drop_before(snap, at)
    if dropped:
        log.info("%d kernel-log event(s) from before the repair at %s not counted", dropped,
                 time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(at)))


def warn_unmatched_groups(setup: Setup) -> None:
    """Log a [[group]] whose host list matches no node of slurm.conf (a typo that applies its settings
    nowhere), once per change of the config or slurm.conf: a file read, nothing asked of slurmctld."""
    policy = setup.policy
    if not policy.groups or not policy.path:
        return
    conf = os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    try:
        seen = ":".join(str(os.stat(p).st_mtime_ns) for p in (policy.path, conf))
    except OSError:
        return
    marker = os.path.join(setup.settings.state_dir, "groups-checked")
    try:
        with open(marker, encoding="utf-8") as fh:
            if fh.read() == seen:
                return
    except OSError:
        pass
    for name, nodes in policy.unmatched_groups_in_slurm_conf(conf) or []:
        log.warning("group %s (nodes = \"%s\") matches no node of %s: its settings apply nowhere (a typo in its "
                    "host list?)", name, nodes, conf)
    try:
        from ..common.safefile import write_file

        write_file(marker, seen, mode=0o600, make_dirs=True)
    except OSError:
        pass


def _backend(settings: SlurmSettings, timeout: float = 10.0):
    from ..slurm import get_backend

    return get_backend(settings.backend, settings.scontrol, timeout, cache_dir=settings.state_dir)


def _start_watchdog(setup: Setup, code: int, on_timeout) -> object:
    """A hard limit on reading GPU state: on expiry `on_timeout` runs (drain, or hand the reason over)
    and the process exits with `code`, whatever the stuck call is doing."""
    return watchdog.start(setup.settings.read_timeout_s, f"reading GPU state of {setup.node}", code,
                          before_exit=on_timeout)


def actuator_for(setup: Setup, backend, actor: str | None = None, **kwargs):
    """The actuator of a program that acts for its node: every write held to ownership, the breaker and the
    node group's mode (observe writes no change of state; quarantine never reboots)."""
    from ..slurm.actuator import make_actuator
    from ..slurm.ownership import HEALTH

    return make_actuator(backend, actor or HEALTH, setup.settings, modes=setup.policy.mode_of(setup.node), **kwargs)


def _drain_if_free(setup: Setup, reason: str) -> None:
    """The watchdog's and an unreadable node's drain: through the actuator (ownership, the breaker, the
    node group's mode)."""
    node = setup.node
    try:
        backend = _backend(setup.settings, timeout=5)
        done = actuator_for(setup, backend).drain([backend.node(node)], reason)
        if done.blocked:
            sys.stderr.write(f"slurm-gpufleet: {node} not drained: the drain breaker is open\n")
        elif node in done.left:
            sys.stderr.write(f"slurm-gpufleet: {node} not drained: {done.left[node]}\n")
    except Exception as exc:  # the watchdog must exit whatever happens here
        sys.stderr.write(f"slurm-gpufleet: could not drain {node}: {exc}\n")


# ---------------------------------------------------------------- acting
def act(setup: Setup, report: Report, hook: str, job: str | None = None,
        extra_findings: list[Finding] | None = None, info: NodeInfo | None = None, backend=None,
        after=None) -> str:
    """Read -> judge -> carry -> publish: record the run, let the remedy carrier decide and carry it out
    through the actuator (remedy/carrier.py), publish the summary.  Returns the action.  `after(setup,
    backend, history, step, carried)`: what the caller does once the step is carried (hooks/away.py: the
    jobs a held node sent back to the queue), with the run's history still open.

    Slurm calls: the node's state (one read, unless the caller has it), the fleet only when a drain is
    about to happen (the breaker counts it), and one write that carries both the change and the summary;
    a quiet run writes only when its summary changed."""
    from ..judging.findings import verdict
    from ..readers.snapshot import known
    from ..records.history import History, db_path
    from ..slurm import SlurmError

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
    carrier = carrier_for(setup, history, backend, actuator_for(setup, backend), hook)
    try:
        step = carrier.step(hook, info, report, extra_findings)
        report, info, s = step.report, step.info, step.report.snapshot
        data, shown = _summary(setup, carrier, step, history, hook, job)
        beat = heartbeat(settings)
        news = _news(info, settings.publish, data, shown, beat) if data is not None else None
        # what changed about the node rides in the same write as the action: one update, not three
        fields = _feature_fields(info, settings.feature_prefix, known(s.driver_version),
                                 known(s.cuda_driver_version)) if settings.feature_prefix and hook != "prolog" else {}
        if news:
            fields[settings.publish] = news
        done = carrier.carry(step, hook, fields)
        # published even with no GPU readable: a rollout validates from it, and "driver unreachable" is news
        if not done.published:
            data = _publish_apart(carrier, info, settings, data, shown, beat, fields, done)
        # what Slurm shows now, for the node's samplers to write beside without reading it (sampler.publish)
        keep_published(settings.state_dir, node, settings.publish,
                       data if data is not None and shown is not _OTHERS and settings.publish != "none" else None)
        _keep_view(setup, info, step, done, data, history)
        if after is not None:
            after(setup, backend, history, step, done)
    finally:
        carrier.close()
    if hook == "healthcheck":
        history.prune()
    history.close()
    return done.action.kind if done.ok else "error"


def _summary(setup: Setup, carrier, step, history, hook: str, job: str | None) -> tuple[dict | None, object]:
    """The summary this run publishes (None: publishing is off), and what Slurm shows now (read once):
    the verdict and findings, what observe mode would do, the open cases, the tool's own faults, the
    NVLink domain, the suspect and lemon marks, and the in-job samplers' digests still live."""
    node, settings = setup.node, setup.settings
    report, info, s = step.report, step.info, step.report.snapshot
    data = encode_summary(report, step.final) if settings.publish != "none" else None
    if data is not None and step.observed is not None:
        data["obs"] = f"{step.observed.kind}: {step.observed.reason or step.observed.why}"[:100]
    if data is not None:
        cases = carrier.cases(info, step)
        if cases:
            data["case"] = cases
    if data is not None and setup.refused:
        data["cfg"] = "refused"
    # the tool's own faults, not the GPUs': what the node cannot be checked or remembered with
    deps = ([f"config: {setup.config_error}"] if setup.config_error else []) + \
        ([history.error] if history.failed and history.error else []) + \
        ([f"dcgm: {s.dcgm.error}"] if s.dcgm is not None and s.dcgm.error else [])
    if data is not None and deps:
        data["err"] = "; ".join(deps)[:160]
    shown = _shown(info, settings.publish) if data is not None else None  # what Slurm has now, read once
    if data is not None:
        _last_domain(node, data, shown, history, not [g for g in s.gpus if not g.lost])
    if data is not None:
        from ..remedy.table import SUSPECT

        data["suspect"] = int((step.after or step.before) == SUSPECT)
        lemon = shown.get("lemon") if isinstance(shown, dict) else None
        if isinstance(lemon, int) and not isinstance(lemon, bool) and lemon >= 0:
            data["lemon"] = lemon   # `fleet lemons` writes it: carried as Slurm shows it
    if data is not None and isinstance(shown, dict) and "is" in shown:
        # the in-job samplers' digests, each kept until its job's end (the epilog drops its own job's)
        kept = {j: d for j, d in live_digests(shown["is"], time.time()).items()
                if not (hook == "epilog" and j == str(job))}
        if kept:
            data["is"] = kept
    return data, shown


def _publish_apart(carrier, info: NodeInfo, settings: SlurmSettings, data: dict | None, shown, beat: float,
                   fields: dict[str, str], done) -> dict | None:
    """The summary and features where the action's write did not carry them (no action, or one the breaker
    held back: then the summary says so).  Returns the summary as Slurm shows it now (None: it does not)."""
    from ..slurm import SlurmError

    if done.blocked and data is not None:
        data["f"] = f"breaker open: {data.get('f', '')}"[:80]
        data["brk"] = 1
        news = _news(info, settings.publish, data, shown, beat)
        # replaces the summary without the breaker, or drops it when Slurm already shows this one:
        # left in, it would flip the node's summary back and forth on every run
        if news:
            fields[settings.publish] = news
        else:
            fields.pop(settings.publish, None)
    if fields:
        try:
            from ..slurm.effects import Publish

            carrier.actuator.apply(Publish(info.name, fields))
        except SlurmError as exc:
            log.warning("could not publish the GPU summary and features: %s", exc)
            data = None  # Slurm does not show it: nothing to keep
    return data


def _last_domain(node: str, data: dict, shown, history, none_readable: bool) -> None:
    """GPUs in a fabric of which none joined it (a tray whose registrations all failed), or no GPU readable at
    all: the node keeps the NVLink domain it last published, or, where its published summary is gone, the
    one its history last saw, marked `fdl`, and still counts for its rack (remedy/escalation.py).  GPUs that
    have no fabric (another board now) publish none.  A domain registered this run is remembered."""
    if isinstance(data.get("cuid"), str) and isinstance(data.get("clq"), int):
        history.remember_domain(node, data["clq"], data["cuid"])
        return
    if "cuid" in data or not ("fab" in data or none_readable):
        return
    if isinstance(shown, dict) and isinstance(shown.get("cuid"), str) and isinstance(shown.get("clq"), int):
        data["clq"], data["cuid"], data["fdl"] = shown["clq"], shown["cuid"], 1
        return
    kept = history.last_domain(node)
    if kept is not None:
        data["clq"], data["cuid"], data["fdl"] = kept[0], kept[1], 1


def _keep_view(setup: Setup, info: NodeInfo, step, done, data: dict | None, history) -> None:
    """What this run saw of the node in Slurm, for the quiet runs after it (hooks/quiet.py): kept only where
    the node is plainly in service, nothing was done, and nothing of ours is open on it."""
    from . import quiet

    in_service = (done.ok and done.action.kind == "none" and not done.blocked and step.observed is None
                  and step.final in ("ok", "warn") and not (info.drained or info.down or info.rebooting)
                  and not info.reason and history.open_validation(setup.node) is None
                  and history.open_suspect(setup.node) is None and not (data or {}).get("case"))
    quiet.keep(setup.settings.state_dir, setup.node, step.final, data, in_service, setup.policy.path)


def carrier_for(setup: Setup, history, backend, actuator, hook: str):
    """The remedy carrier of this node, with the node's own GPU reset: the site's reset command, the
    kernel log's mark, a read of the GPUs under the watchdog, within what slurmd leaves a health check."""
    from ..remedy.carrier import Carrier, GpuReset
    from ..remedy.decide import Ladder
    from ..remedy.ladder import mark_reset, run_reset

    settings, node = setup.settings, setup.node

    def reread():
        from ..judging.pipeline import evaluate

        _start_watchdog(setup, 1, None)
        try:
            snap = read_node(setup, "quick")
        finally:
            watchdog.cancel()
        return evaluate(snap, setup.policy, host=node, expect_idle=True)

    def time_left() -> float | None:
        if hook != "healthcheck":
            return None
        return SLURMD_HEALTH_CHECK_S - 5 - (time.monotonic() - _STARTED) - settings.read_timeout_s

    reset = GpuReset(run=lambda gpus, timeout: run_reset(settings.reset_command, node, gpus, timeout),
                     reread=reread, mark=lambda pcis: mark_reset(settings.kernel_log, node, pcis), time_left=time_left)
    ladder = Ladder.of(settings, setup.policy.for_node(node).mode)
    return Carrier(node, setup.policy, history, backend, actuator, ladder, reset)


class KeptHistory:
    """The node's history, or its absence: a full disk, a read-only or broken database must not stop a
    drain.  Every call that fails is logged once and answers what an empty history would (no clean runs:
    nothing is resumed; no reboots recorded)."""

    def __init__(self, cls, path: str):
        self.path = path
        self.failed = False
        self.error: str | None = None   # what failed, for the node's summary (`err`)
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
            self.error = f"history {self.path}: {exc}"
        self.failed = True

    def __getattr__(self, name: str):
        from ..remedy.decide import NodeHistory

        empty = {"node_history": NodeHistory(), "record_run": 0, "jobs_left_behind": []}

        def call(*args, **kwargs):
            if self._h is None:
                return empty.get(name)
            try:
                return getattr(self._h, name)(*args, **kwargs)
            except self._errors as exc:
                self._fail(exc)
                return empty.get(name)
        return call



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


