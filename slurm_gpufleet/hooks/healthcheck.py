"""The health check slurmd runs every HealthCheckInterval: one run at a time per node, then read, judge, act."""

from __future__ import annotations

import os
import time

from ..common import watchdog
from .common import (
    INVENTORY_REASON,
    TIMEOUT_REASON,
    Setup,
    _backend,
    _drain_if_free,
    _setup,
    _start_watchdog,
    act,
    forget_repaired,
    log,
    note_repair,
    read_node,
    warn_unmatched_groups,
)


def run(argv: list[str] | None = None) -> int:
    args = _arguments().parse_args(argv)
    judge_only = args.nhc or args.confirm
    setup = _setup("healthcheck", args.config, args.node)
    if setup is None:
        return 0 if not judge_only else 2
    if not judge_only and not _one_run_at_a_time(setup):
        log.warning("the previous health check of %s still runs after %g s: this run is skipped",
                    setup.node, setup.settings.read_timeout_s)
        return 0
    if not judge_only:
        warn_unmatched_groups(setup)
    from ..judging.pipeline import evaluate
    from ..readers.report import ReportError

    # observe mode (staged enablement) touches nothing, not even for a hung or unreadable GPU
    acts = not judge_only and setup.policy.for_node(setup.node).mode != "observe"
    _start_watchdog(setup, 1, lambda: _drain_if_free(setup, TIMEOUT_REASON) if acts else None)
    try:
        snap = read_node(setup, args.level)
    except (ReportError, OSError) as exc:
        return _unreadable(setup, args, acts, exc)
    finally:
        watchdog.cancel()
    dcgm_level = setup.settings.dcgm_diag_level if args.dcgm_level is None else args.dcgm_level
    if args.level == "deep" and dcgm_level:
        # DCGM's diagnostic has its own limit (minutes at levels 3 and 4), outside the read's watchdog
        snap.dcgm = _dcgm(setup, snap, dcgm_level)
        if snap.dcgm.error:
            log.warning("dcgm could not judge the GPUs: %s", snap.dcgm.error)
    from ..slurm import SlurmError

    quiet, early, running = _quiet(setup, snap) if acts else (False, None, None)
    if quiet:
        return 0
    backend = node_info = None
    if not judge_only:
        try:
            backend = _backend(setup.settings)
            node_info = backend.node(setup.node)
        except SlurmError as exc:
            log.error("cannot read node state from Slurm: %s", exc)
    if node_info is not None:
        from ..slurm.base import view_of

        snap.slurm = view_of(node_info)   # a held node returns only as Slurm registered it (checks/slurm_view.py)
        if snap.slurm.held:
            early = None
    # an admin's `fleet repaired` seen for the first time: what was logged before it no longer counts, from
    # this very run (judged with it, the node would be drained again for the fault just repaired)
    repaired = note_repair(setup, node_info, snap=snap) if node_info is not None else None
    if repaired is not None:
        forget_repaired(setup, snap, repaired)
        early = None
    # an idle node should have no GPU processes; a busy one is judged on everything else
    idle = bool(node_info and node_info.idle)
    # judged already for the quiet test, with the node's own idea of idle: used again where Slurm agrees
    report = early if early is not None and (not running) == idle else \
        evaluate(snap, setup.policy, host=setup.node, expect_idle=idle or None)
    if snap.slurm is not None and snap.slurm.held and report.verdict in ("ok", "warn") and backend is not None:
        # a held node that would return: Slurm's view of it beside its group's, read only now
        _read_return_view(setup, backend, snap.slurm)
        report = evaluate(snap, setup.policy, host=setup.node, expect_idle=idle or None)
    if args.confirm:
        from ..slowgpus.lemon import confirming

        found = confirming(report.findings)
        return _confirm(setup, f"{found.check} gpu{found.gpu}: {found.message}" if found.gpu is not None
                        else f"{found.check}: {found.message}") if found else 0
    if args.nhc:
        return _nhc_verdict(setup, snap, report)
    from .away import after_step

    act(setup, report, "healthcheck", info=node_info, backend=backend,
        after=lambda *a: after_step(*a, hook="healthcheck", job=None))
    return 0


def _arguments():
    """The health check's command line."""
    import argparse

    ap = argparse.ArgumentParser(prog="slurm-gpufleet-healthcheck",
                                 description="Slurm HealthCheckProgram: check this node's GPUs and act.")
    ap.add_argument("--config")
    ap.add_argument("--node")
    ap.add_argument("--level", choices=["quick", "full", "deep"], default="quick",
                    help="deep: also measure each GPU (memory bandwidth, GEMM, host-to-device)")
    ap.add_argument("--dcgm-level", type=int, choices=range(5), metavar="N",
                    help="with --level deep: run DCGM's diagnostic at this level (dcgmi diag -r N -j; 0: none), "
                         "in place of the config's dcgm_diag_level")
    ap.add_argument("--nhc", action="store_true",
                    help="judge only (no Slurm action): print the reason and exit 1 when the node is unfit (NHC)")
    ap.add_argument("--confirm", action="store_true",
                    help="a lemon's deep check (lemon.py), run as its job: judge only; when a finding shows the "
                         "node slow, print it, make it the job's comment and exit 1")
    return ap


def _unreadable(setup: Setup, args, acts: bool, exc: Exception) -> int:
    """No readable GPU state: a lemon's check fails its job, NHC drains with its own words, the health
    check drains the node where it acts."""
    log.error("no readable GPU state: %s", exc)
    if args.confirm:
        return _confirm(setup, f"no readable GPU state: {exc}")
    if args.nhc:
        from ..slurm.reasons import one_line

        print(one_line(f"inventory node no readable GPU state: {exc}"))  # NHC's drain: no mark of ours
        return 1
    if acts:
        _drain_if_free(setup, INVENTORY_REASON)
    return 1


def _dcgm(setup: Setup, snap, level: int):
    """DCGM's diagnostic of the node; a run that judged some of its GPUs verifies those alone (DCGM's
    shortfall, unverified: never a pass of the rest)."""
    from ..readers.dcgm import run_diag, uncovered

    s = setup.settings
    diag = run_diag(s.dcgmi, level, s.dcgm_timeout_s)
    missed = uncovered(diag, [g.index for g in snap.gpus if not g.lost])
    if missed and diag.error is None:
        diag.error = f"the run judged none of GPU(s) {', '.join(map(str, missed))}: unverified"
    return diag


def _nhc_verdict(setup: Setup, snap, report) -> int:
    """--nhc: judge only; print the reason and exit 1 when the node is unfit."""
    from ..slurm.actions import fault_words, one_line, worst

    if report.verdict in ("reboot", "drain"):
        # NHC drains with these words in a reason of its own: the drain is NHC's, so no mark of ours
        print(one_line(fault_words(worst(report.findings))))
        return 1
    if snap.dcgm is not None and snap.dcgm.error:   # DCGM's own fault: a validation unverified, not failed
        from ..remedy.returning import DEPENDENCY_EXIT

        print(one_line(f"dcgm: {snap.dcgm.error}"))
        return DEPENDENCY_EXIT
    if setup.config_error:  # judged on the last config that loaded: NHC logs this, never fails the node
        print(one_line(f"config error: {setup.config_error}"))
        return 2
    return 0


def _read_return_view(setup: Setup, backend, view) -> None:
    """What a held node's return is judged by beyond its own registration (checks/slurm_view.py): the
    slurmd version most nodes of its group in service run (one read of the fleet, made only here: a held
    node that runs clean) and the features slurm.conf gives it (a file read)."""
    import collections

    from ..policy import slurm_conf_features
    from ..slurm import SlurmError

    mine = setup.policy.for_node(setup.node).groups
    try:
        peers = [n.slurmd_version for n in backend.nodes() if n.name != setup.node and n.slurmd_version
                 and not (n.drained or n.down or n.rebooting) and setup.policy.for_node(n.name).groups == mine]
    except SlurmError as exc:
        log.warning("the fleet not read for %s's return: %s", setup.node, exc)
        peers = []
    if peers:
        view.peers_version = collections.Counter(peers).most_common(1)[0][0]
    conf = os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    view.configured_features = slurm_conf_features(conf, setup.node)


def _quiet(setup: Setup, snap):
    """A quiet run (hooks/quiet.py): the node in service as the last Slurm read saw it, this run's verdict
    and summary the same: the run is recorded, slurmctld is asked nothing.  Returns (quiet, the report it
    judged or None, whether a job runs here): a run that is not quiet reads Slurm and acts."""
    from . import quiet

    s = setup.settings
    if s.publish == "none":
        return False, None, None
    view = quiet.fresh_view(s.state_dir, setup.node, quiet.read_every(s), setup.policy.path)
    if view is None:
        return False, None, None
    running = quiet.job_running_here()
    if running is None:
        return False, None, None
    from ..judging.pipeline import evaluate
    from .common import encode_summary

    report = evaluate(snap, setup.policy, host=setup.node, expect_idle=(not running) or None)
    if report.verdict != view["verdict"] or quiet.comparable(encode_summary(report, report.verdict)) != view["summary"]:
        return False, report, running
    from ..readers.snapshot import known
    from ..records.history import History, db_path
    from .common import KeptHistory

    history = KeptHistory(History, db_path(s.state_dir, setup.node))
    try:
        history.record_run(setup.node, "healthcheck", report.verdict, report.findings, duration_s=report.duration_s,
                           driver=known(snap.driver_version), gpus=len(snap.gpus), performance=snap.performance,
                           models={g.index: known(g.name) for g in snap.gpus})
        history.prune()
    finally:
        history.close()
    if (history.failed or bool(setup.config_error)) != bool(view.get("err")):
        return False, report, running  # the tool's own fault came or went: said in the summary, which reads
    log.info("healthcheck verdict %s: quiet (as Slurm last showed it, %.0f s ago): slurmctld not asked",
             report.verdict, time.time() - view["read_at"])
    return True, report, running


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
    from ..slowgpus.lemon import CONFIRMED_PREFIX
    from ..slurm.actions import JOB_COMMENT_MAX

    print(finding)
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        from ..slurm import SlurmError

        try:
            from ..slurm.ownership import STRAGGLER
            from .common import actuator_for

            actuator_for(setup, _backend(setup.settings), STRAGGLER).set_job_comment(
                job, f"{CONFIRMED_PREFIX} {finding}"[:JOB_COMMENT_MAX])
        except SlurmError as exc:
            log.error("cannot set job %s's comment: %s", job, exc)
    return 1
