"""Lemons: a node the in-job detector (instep.py) flagged apart from its job in `lemon_jobs` distinct jobs.

A flag alone never drains: a node slow in one job may have met a bad input shard or a noisy neighbour on
the network, and a job slow everywhere flags none (ByteDance: one bad node is the main cause of only 1.7%
of straggling jobs).  A node flagged in several jobs is a suspect, and a suspect is checked, not judged:

    suspect   -> a maintenance reservation holds the node from new work (the running job goes on: the
                 reservation ignores jobs) and the deep check is submitted into it, so it starts the moment
                 the node frees
    checking  -> the check job ran: it exits 0 (nothing slow found: `cleared`) or 1 with the finding as its
                 job comment (`confirmed`: drained through the breaker, as the stragglers' own drains are)
    confirmed, cleared, unchecked: closed; only flags after the close count toward a new case

A check job that ended without a verdict (cancelled, timed out, the node failed) is submitted again up to
`ATTEMPTS` times, then the case closes `unchecked` and the reservation goes: a check that cannot run
must not hold a node for ever.

Pure: `decide_cases` takes what one step read (the scores, the open cases, the fleet, the reservations and the
check jobs) and returns what to write; `lemon_step.run_step` reads, records and writes (`fleet lemons`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..judging.findings import RANK, Finding
from ..slurm.base import NodeInfo, job_order
from ..slurm.ownership import FREE, LEMON_RESERVATION_PREFIX, owner
from ..slurm.reasons import PERFORMANCE, ours

JOB_NAME = "gpufleet-lemon-check"
CONFIRMED_PREFIX = "gpufleet confirmed:"  # what `slurm-gpufleet-healthcheck --confirm` puts in its job comment
ATTEMPTS = 2

# what shows a node slow: its clocks, heat, links and measured speed; any fault that takes a reboot or a
# drain confirms too (it is reason enough, and the health check would act on it anyway)
CONFIRMING_CHECKS = frozenset({"performance", "clocks", "thermal", "pcie", "nvlink"})

CHECKING, CONFIRMED, CLEARED, UNCHECKED = "checking", "confirmed", "cleared", "unchecked"
OPEN = frozenset({CHECKING})
# squeue's states of a job that has not ended
WAITING = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"})


@dataclass
class Case:
    node: str
    state: str
    jobs: list[str]                  # the jobs it was flagged in when the case opened
    opened: float
    check_job: str | None = None     # the deep check's job id, once submitted
    attempts: int = 0
    detail: str = ""
    closed: float | None = None

    @property
    def reservation(self) -> str:
        return reservation_name(self.node)


def confirming(findings: list[Finding]) -> Finding | None:
    """The worst finding that confirms a lemon, or None: the deep check found nothing slow."""
    hits = [f for f in findings if RANK[f.severity] >= RANK["reboot"]
            or (f.check in CONFIRMING_CHECKS and RANK[f.severity] >= RANK["warn"])]
    return max(hits, key=lambda f: RANK[f.severity]) if hits else None


def reservation_name(node: str) -> str:
    return f"{LEMON_RESERVATION_PREFIX}{node}"


def drain_reason(case: Case, finding: str) -> str:
    jobs = ",".join(case.jobs[:4]) + ("..." if len(case.jobs) > 4 else "")
    return ours(f"{PERFORMANCE} lemon: slow in jobs {jobs}; deep check: {finding}")


@dataclass
class Decisions:
    reserve: list[str] = field(default_factory=list)             # nodes to open a reservation on
    submit: list[str] = field(default_factory=list)              # nodes to submit the deep check for
    drain: list[tuple[str, str]] = field(default_factory=list)   # (node, reason)
    release: list[str] = field(default_factory=list)             # reservations to delete
    cancel: list[str] = field(default_factory=list)              # check jobs to cancel
    cases: dict[str, Case] = field(default_factory=dict)         # every case this step opened or moved
    notes: list[str] = field(default_factory=list)


def decide_cases(now: float, suspects: dict[str, list[str]], cases: dict[str, Case], nodes: dict[str, NodeInfo],
           reservations: set[str], check_jobs: dict[str, tuple[str, str]], lemon_jobs: int) -> Decisions:
    """suspects: node -> the distinct jobs it was flagged in since its last case closed; cases: the open
    ones; check_jobs: job id -> (state, comment) of the deep checks squeue still shows."""
    out = Decisions()
    for node, jobs in sorted(suspects.items()):
        if node in cases or len(jobs) < lemon_jobs:
            continue
        info = nodes.get(node)
        if info is None:
            out.notes.append(f"{node}: flagged in {len(jobs)} jobs but not in Slurm")
            continue
        if owner(info) != FREE:
            out.notes.append(f"{node}: flagged in {len(jobs)} jobs; {info.state} ({info.reason or 'no reason'}), "
                             "left alone")
            continue
        case = Case(node, CHECKING, sorted(jobs, key=job_order), now)
        out.cases[node] = case
        out.reserve.append(node)
        out.submit.append(node)
        out.notes.append(f"{node}: flagged in jobs {', '.join(case.jobs)}: reserved for the deep check")
    for node, case in sorted(cases.items()):
        if case.state not in OPEN:
            continue
        if case.reservation not in reservations and case.attempts > 0:
            # someone deleted our reservation: they took the node back; we do not fight them for it
            out.cases[node] = _close(case, UNCHECKED, now, "its reservation is gone: deleted by someone else, or it "
                                                          "ended before the node freed")
            out.cancel += [case.check_job] if case.check_job and case.check_job in check_jobs else []
            continue
        if case.reservation not in reservations:
            out.reserve.append(node)  # a step that crashed between recording the case and reserving
        if case.check_job is None:
            out.submit.append(node)
            continue
        state, comment = check_jobs.get(case.check_job, ("", ""))
        state = state.split()[0].upper() if state else ""
        if state in WAITING:
            continue
        if state == "COMPLETED":
            out.cases[node] = _close(case, CLEARED, now, f"deep check job {case.check_job}: nothing slow")
            out.release.append(case.reservation)
        elif state == "FAILED" and comment.startswith(CONFIRMED_PREFIX):
            finding = comment[len(CONFIRMED_PREFIX):].strip() or "failed"
            out.cases[node] = _close(case, CONFIRMED, now, finding)
            out.drain.append((node, drain_reason(case, finding)))
            out.release.append(case.reservation)
        elif case.attempts >= ATTEMPTS:
            ended = state or "gone from squeue"
            out.cases[node] = _close(case, UNCHECKED, now, f"deep check job {case.check_job} ended {ended}, "
                                                          f"{case.attempts} attempt(s)")
            out.release.append(case.reservation)
        else:
            out.submit.append(node)
            out.notes.append(f"{node}: deep check job {case.check_job} ended {state or 'unseen'}: submitted again")
    return out


def _close(case: Case, state: str, now: float, detail: str) -> Case:
    return Case(case.node, state, case.jobs, case.opened, case.check_job, case.attempts, detail, now)
