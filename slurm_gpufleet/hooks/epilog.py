"""The epilog: the in-job sampler stopped, the node judged after the job, what happened to the job's GPUs
during it (Xids, new memory errors) recorded against the job."""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING

from ..common import watchdog
from ..readers.jobgpus import slurm_id
from .common import (
    INVENTORY_REASON,
    TIMEOUT_REASON,
    _drain_if_free,
    _setup,
    _start_watchdog,
    act,
    log,
    read_node,
)
from .jobs import _counters, _job_gpus, _window_path, fabric_words

if TYPE_CHECKING:
    from ..judging.findings import Finding
    from ..readers.snapshot import NodeSnapshot


def run(argv: list[str] | None = None) -> int:
    from ..slowgpus import sampler

    job = os.environ.get("SLURM_JOB_ID")
    node = os.environ.get("SLURMD_NODENAME")
    if job and node:
        sampler.stop_job(job, node)  # never outlives the job, whatever the config says (read next)
    setup = _setup("epilog", None, None, job)
    if setup is None:
        return 0
    if job:
        sampler.stop(setup.settings.state_dir, job, setup.node)  # and its pid file
        if setup.settings.instep_share_dir:
            sampler.drop_shared(setup.settings.instep_share_dir, job, setup.node)
    from ..judging.findings import verdict
    from ..judging.pipeline import evaluate
    from ..readers.report import ReportError

    # slurmd drains a node whose epilog fails: in observe mode the epilog never fails, whatever it met
    observe = setup.policy.mode_of(setup.node) == "observe"
    _start_watchdog(setup, 0 if observe else 1, lambda: _drain_if_free(setup, TIMEOUT_REASON))
    try:
        snap = read_node(setup, "quick")
    except (ReportError, OSError) as exc:
        watchdog.cancel()
        log.error("no readable GPU state: %s", exc)
        _drain_if_free(setup, INVENTORY_REASON)
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
    from ..judging.imex import job_imex

    imex_words, imex_found = job_imex(os.environ, setup.settings)
    extra = job_findings(snap, job, gpus, window) + imex_found + imex_change(window, imex_words, job)
    for f in extra:
        log.warning("job %s: %s gpu %s: %s", job, f.check, f.gpu, f.detail or f.message)
    from .away import after_step

    result = act(setup, report, "epilog", job=job, extra_findings=extra,
                 after=lambda *a: after_step(*a, hook="epilog", job=job))
    if job and result != "error":
        _record(setup, job, extra, report, result)
    if job:
        try:
            os.unlink(_window_path(setup.settings, setup.node, job))
        except OSError:
            pass
    # when Slurm cannot be told, let it drain the node itself ("Epilog error") rather than pass a bad node
    return 1 if result == "error" and not observe and verdict(report.findings + extra) in ("reboot", "drain") else 0


def _record(setup, job: str, extra: list, report, result: str) -> None:
    """What happened to the job's GPUs here, in the job's own record (jobrecord.py): nothing is written when
    there is nothing to say, so a quiet job costs slurmctld nothing."""
    from ..judging.findings import verdict
    from ..records import jobrecord
    from ..slurm import SlurmError
    from ..slurm.actions import make_reason, worst
    from .common import _backend, actuator_for
    from .jobs import record_part

    findings = report.findings + extra
    action = f"{result}: {make_reason(worst(findings))}" if verdict(findings) in ("reboot", "drain") else None
    from ..slowgpus.sampler import throttle_shares

    part = jobrecord.node_part(extra, action, throttle_shares(setup.settings.state_dir, job, setup.node))
    if not part:
        return
    try:
        backend = _backend(setup.settings)
        if not record_part(backend, actuator_for(setup, backend), job, setup.node, part,
                           field=setup.settings.job_record_field):
            log.warning("job %s: its record was not kept (the job is gone, or its nodes' writes kept crossing)", job)
    except SlurmError as exc:
        log.warning("job %s: its record not written: %s", job, exc)


def job_findings(snap: NodeSnapshot, job: str | None, gpus: frozenset[int] | None, window: dict) -> list[Finding]:
    """Xids and new memory errors inside the job's time window, attributed to the job and its GPUs.

    Severity "ok": these record what happened to the job; what the node needs is the normal checks' call.
    """
    from ..catalogs import xid_info
    from ..judging.findings import Finding
    from ..readers.kernel_log import boot_epoch, event_epoch

    out: list[Finding] = []
    start = window.get("start")
    now = time.time()
    btime = boot_epoch()
    for e in snap.xid_events:
        at = event_epoch(e, btime)
        if start is None or at is None or not (start - 1 <= at <= now + 1):
            continue
        g = snap.gpu_by_pci(e.pci)
        sid = None if g is None else slurm_id(g)
        if gpus is not None and sid is not None and sid not in gpus:
            continue
        info = xid_info(e.xid)
        out.append(Finding("job", "ok", "none", sid, f"Xid {e.xid} during job {job}",
                           f"{info.name if info else 'unknown Xid'} on PCI {e.pci} at line {e.line}, "
                           f"inside job {job}'s window", xid=e.xid, extra={"job_id": job}))
    for e in snap.sxid_events:  # the NVSwitch's own faults: the job's, as every GPU of the board uses them
        at = event_epoch(e, btime)
        if start is None or at is None or not (start - 1 <= at <= now + 1):
            continue
        out.append(Finding("sxid_job", "ok", "none", None, f"SXid {e.sxid} during job {job}",
                           f"nvswitch{e.switch if e.switch is not None else '?'} at line {e.line}: {e.message[:120]}",
                           xid=e.sxid, extra={"job_id": job}))
    for sid, before in (window.get("counters") or {}).items():
        g = next((x for x in snap.gpus if str(slurm_id(x)) == sid), None)
        if g is None:
            continue
        after = _counters(g)
        grown = {k: after[k] - v for k, v in before.items()
                 if isinstance(v, int) and isinstance(after.get(k), int) and after[k] > v}
        if grown:
            out.append(Finding("job", "ok", "none", int(sid), f"memory errors during job {job}",
                               ", ".join(f"{k} +{d}" for k, d in grown.items()), extra={"job_id": job}))
    for sid, before in (window.get("fabric") or {}).items():
        g = next((x for x in snap.gpus if str(slurm_id(x)) == sid), None)
        after = fabric_words(g) if g is not None else None
        if after != before:
            out.append(Finding("job_fabric", "ok", "none", int(sid), f"fabric {before} -> {after or 'not read'}",
                               f"the GPU's NVLink fabric changed during job {job}", extra={"job_id": job}))
    return out


def imex_change(window: dict, now: str | None, job: str | None) -> list[Finding]:
    """The IMEX state the prolog saw beside the one now, where the job uses IMEX and it changed."""
    from ..judging.findings import Finding

    before = window.get("imex")
    if before is None or now is None or now == before:
        return []
    return [Finding("job_imex", "ok", "none", None, f"IMEX {before} -> {now}", f"IMEX changed during job {job}",
                    extra={"job_id": job})]
