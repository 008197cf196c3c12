"""One step of the lemon record: what `slurm-gpufleet fleet lemons` runs, as a library call.

It takes the flags the in-job detector raised over one read of the fleet, records them (LemonStore),
reads Slurm only while a case is open or about to be (the lemon reservations, the check jobs), lets the
pure `lemon.decide_cases` say what to do, and does it: reservations made and deleted, deep checks submitted,
confirmed nodes drained through the actuator (the breaker guards it), stale check jobs cancelled.  A
write that fails is named in `errors` and the rest goes on; what a step leaves, the next one decides
again from the stored cases and what Slurm shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..slurm.base import NodeInfo
from . import lemon as L
from .instep import Flag
from .lemon_store import LemonStore


@dataclass
class LemonStep:
    flags: list[Flag]
    new_flags: int
    scores: dict[str, int]                 # node -> distinct jobs it was flagged in
    cases: dict[str, L.Case]               # every case this step saw, as it leaves them
    reserved: list[str] = field(default_factory=list)
    submitted: dict[str, str] = field(default_factory=dict)   # node -> check job id
    drained: list[str] = field(default_factory=list)
    breaker_blocked: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def run_step(backend: Any, settings: Any, store: LemonStore, nodes: list[NodeInfo], flags: list[Flag], now: float,
             dry_run: bool = False, modes: Any = "full") -> LemonStep:
    """Raises SlurmError when the reservations or the check jobs cannot be read (nothing written then).
    modes: each node's group mode (policy.Policy.mode_of): an observe node is neither held nor drained."""
    from ..slurm import SlurmError
    from ..slurm import effects as E
    from ..slurm.actuator import make_actuator
    from ..slurm.ownership import STRAGGLER

    added: list[Flag] = []
    new_flags = 0 if dry_run else store.record_flags(flags, now, added)
    suspects = store.suspects()
    if dry_run:  # what recording would add
        for f in flags:
            if f.job not in suspects.setdefault(f.node, []):
                suspects[f.node].append(f.job)
    cases = store.open_cases()
    reservations: set[str] = set()
    check_jobs: dict[str, tuple[str, str]] = {}
    if cases or any(len(j) >= settings.lemon_jobs for j in suspects.values()):
        reservations = {r.name for r in backend.reservations() if r.name.startswith(L.LEMON_RESERVATION_PREFIX)}
    if any(c.check_job for c in cases.values()):
        check_jobs = {job_id: (state, comment) for job_id, state, comment in backend.jobs_named(L.JOB_NAME)}
    infos = {n.name: n for n in nodes}
    d = L.decide_cases(now, suspects, cases, infos, reservations, check_jobs, settings.lemon_jobs)
    moved = {**cases, **d.cases}
    step = LemonStep(flags, new_flags, {node: len(j) for node, j in suspects.items()}, moved, reserved=d.reserve,
                     released=d.release, notes=d.notes)
    if dry_run:
        return step
    errors = step.errors
    actuator = make_actuator(backend, STRAGGLER, settings, fleet=nodes, modes=modes)
    for node in d.reserve:
        try:
            actuator.apply(E.Reserve(L.reservation_name(node), (node,), None, int(settings.lemon_hold_hours * 60)))
        except SlurmError as exc:
            errors.append(f"{node}: reservation not made: {exc}")
            d.submit = [n for n in d.submit if n != node]
    for node in d.submit:
        case = moved[node]
        try:
            (job_id,) = actuator.apply(E.Submit(L.JOB_NAME, node, case.reservation, settings.lemon_partition,
                                                settings.lemon_check, settings.lemon_check_minutes,
                                                f"gpufleet lemon check of {node}"))
        except SlurmError as exc:
            errors.append(f"{node}: deep check not submitted: {exc}")
            continue
        moved[node] = d.cases[node] = L.Case(case.node, case.state, case.jobs, case.opened, job_id,
                                             case.attempts + 1, f"deep check job {job_id} in {case.reservation}")
        step.submitted[node] = job_id
    if d.drain:
        _drain_confirmed(actuator, d, step, infos, moved, errors)
    step.released = d.release
    for name in d.release:
        try:
            actuator.apply(E.Release(name))
        except SlurmError as exc:
            errors.append(f"{name}: not deleted: {exc}")
    if d.cancel:
        try:
            actuator.apply(E.Cancel(tuple(d.cancel)))
        except SlurmError as exc:
            errors.append(f"cancel {','.join(d.cancel)}: {exc}")
    _record_flags(backend, actuator, added, errors)
    store.save(list(d.cases.values()))
    _publish_scores(actuator, settings, nodes, step.scores, errors)
    return step


def _drain_confirmed(actuator, d, step: LemonStep, infos: dict[str, NodeInfo], moved: dict, errors: list[str]) -> None:
    """The lemons their deep check confirmed, drained; one the breaker or an error left stays held in its
    reservation and checked again (its reservation is not released)."""
    from ..slurm import SlurmError

    try:
        done = actuator.drain_each(
            [(infos[node], reason) for node, reason in d.drain])
    except SlurmError as exc:
        errors.append(f"drain: {exc}")
        done = None
    if done is not None:
        step.drained, step.breaker_blocked = done.done, done.blocked
        for node, why in done.left.items():
            d.notes.append(f"{node}: {why}")
    unfinished = {node for node, _ in d.drain} - set(step.drained) - set(done.left if done else ())
    for node in unfinished:  # confirmed, not drained (breaker, error): it stays held and checked again
        case = moved[node]
        d.cases[node] = moved[node] = L.Case(node, L.CHECKING, case.jobs, case.opened, case.check_job,
                                             case.attempts, f"confirmed, not drained: {case.detail}")
        d.release = [r for r in d.release if r != case.reservation]


def _publish_scores(actuator, settings: Any, nodes: list[NodeInfo], scores: dict[str, int], errors: list[str]) -> None:
    """Each node's lemon score into its summary, where it changed (summary.lemon_news): a job asks for
    `--extra "lemon<2"`.  Written on the node's summary as this step read it: a health check's write in
    between is overwritten, and written again at its next news or heartbeat."""
    from ..judging.summary import lemon_news
    from ..slurm import SlurmError
    from ..slurm import effects as E

    if settings.publish == "none":
        return
    for node, text in lemon_news(nodes, scores, settings.publish):
        try:
            actuator.apply(E.Publish(node, {settings.publish: text}))
        except SlurmError as exc:
            errors.append(f"{node}: lemon score not published: {exc}")


def _record_flags(backend: Any, actuator: Any, flags: list[Flag], errors: list[str]) -> None:
    """Each new flag into its job's record (jobrecord.py), while the job runs: one read of the job when a
    flag of it first appears, a write only for a flag its record lacks."""
    from ..records import jobrecord
    from ..slurm import SlurmError
    from ..slurm import effects as E

    by_job: dict[str, list[Flag]] = {}
    for f in flags:
        by_job.setdefault(f.job, []).append(f)
    for job, found in by_job.items():
        try:
            fields = backend.job_fields(job)
            if fields is None or (fields.get("JobState") or "").split()[0] != "RUNNING":
                continue
            admin = "" if fields.get("AdminComment", "(null)") == "(null)" else fields.get("AdminComment", "")
            changed = admin
            for f in found:
                changed = jobrecord.with_flag(changed, f.node, f.gpu, f.signature, f.t_first) or changed
            if changed != admin:
                actuator.apply(E.AdminComment(job, changed))
        except SlurmError as exc:
            errors.append(f"job {job}: its record not written: {exc}")
