"""Finishing a rollout by a deadline with the least work lost.  Pure: jobs, nodes, a budget, a clock in;
the jobs at risk and what to do with each out.

Every node needs `upgrade_s` out of service, at most `budget` nodes at a time, all by the deadline D.  Read
backwards from D, the k-th group of `budget` nodes (the latest-freeing ones) must start by D - (k+1) x
upgrade_s.  A node whose jobs, by their time limits, end later than that cannot wait: one of the jobs
holding its group must stop early.  Which one is chosen by the work it would lose (weighted Moore-Hodgson:
walk the nodes latest-freeing first, and whenever the group no longer fits, give up the kept node that is
cheapest to stop).  The nodes given up take the places before the kept ones; on them the jobs that end in
time wait and the others stop: a job without a checkpoint at the start (the work it loses only grows while
it runs), a job that checkpoints at the last moment its node's place allows.

The work a stopped job loses is its time since its last checkpoint, times its GPUs.  A job says how it
checkpoints in its Slurm comment (docs/rollouts.md, "Deadline rollouts"):

    gpufleet:signal=B:USR1@30       it checkpoints on that signal (its sbatch --signal), then may be requeued
    gpufleet:checkpoint_every=1h    it writes a checkpoint that often
    gpufleet:checkpoint_at=ISO|EPOCH  its last checkpoint

Without any of them, its whole elapsed time is lost.
"""

from __future__ import annotations

import datetime as dt
import heapq
import math
import re
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from ..slurm.base import JobInfo, job_order

ACTIONS = ("wait", "checkpoint-requeue", "requeue", "cancel")
INF = float("inf")
_TOKEN = re.compile(r"gpufleet:(signal|checkpoint_every|checkpoint_at)=(\S+)")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")


class DeadlineError(ValueError):
    """A deadline that cannot be read or kept; one line."""


@dataclass(frozen=True)
class Checkpointing:
    signal: str | None = None      # e.g. "USR1"
    batch: bool = False            # "B:": the batch shell gets the signal, not the steps
    grace_s: float = 0.0           # the time the job asked for between the signal and its end
    every_s: float | None = None
    at: float | None = None

    def since_checkpoint(self, start: float, at: float) -> float:
        """Seconds of work lost if the job stops at `at` (after a signal checkpoint: none)."""
        elapsed = max(0.0, at - start)
        if self.signal:
            return 0.0
        lost = elapsed
        if self.every_s:
            lost = min(lost, elapsed % self.every_s)
        if self.at is not None and self.at >= start:
            lost = min(lost, max(0.0, at - self.at))
        return lost


def duration_s(text: str) -> float | None:
    m = _DURATION.match(text.strip().lower())
    if not m:
        return None
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def checkpointing(comment: str) -> Checkpointing:
    values = dict(_TOKEN.findall(comment or ""))
    signal, batch, grace = None, False, 0.0
    if "signal" in values:  # sbatch's own syntax: [{R|B}:]<sig>[@sig_time]
        spec = values["signal"]
        if spec[:2] in ("B:", "R:"):
            batch, spec = spec[0] == "B", spec[2:]
        name, _, secs = spec.partition("@")
        signal = name.upper().removeprefix("SIG") or None
        grace = float(secs) if secs.isdigit() else 60.0  # sbatch's default sig_time
    every = duration_s(values["checkpoint_every"]) if "checkpoint_every" in values else None
    at = None
    if "checkpoint_at" in values:
        text = values["checkpoint_at"]
        try:
            at = float(text) if re.fullmatch(r"\d+(\.\d+)?", text) else dt.datetime.fromisoformat(text).timestamp()
        except ValueError:
            at = None
    return Checkpointing(signal, batch, grace, every or None, at)


MAX_DEADLINE_S = 3650 * 86400   # ten years: any rollout's deadline, and dates that can still be written


def deadline_seconds(text: str) -> float | None:
    """The one grammar of a deadline as a duration, for `maintain plan` and `maintain simulate` alike:
    '72h', '3d', '90m', '3600s'; a bare number is hours ('72' is 72 h, as simulate always took it)."""
    t = text.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", t):
        return float(t) * 3600
    return duration_s(t)


def parse_simulated_deadline(text: str) -> float:
    """`maintain simulate --deadline`: hours after the replayed rollout starts (a replay has no date)."""
    rel = deadline_seconds(text)
    if rel is None:
        raise DeadlineError(f"deadline {text!r}: give a duration (72h, 3d, 90m; a bare number is hours); "
                            "a replay has no calendar date")
    if rel <= 0:
        raise DeadlineError(f"deadline {text!r} is not after the rollout's start")
    if rel > MAX_DEADLINE_S:
        raise DeadlineError(f"deadline {text!r} is more than {MAX_DEADLINE_S // 86400:,} days after the start")
    return rel / 3600



def parse_deadline(text: str, now: float) -> float:
    """'72h', '3d', '90m' (a bare number is hours) from now, or a local date/time ('2026-12-04T18:00',
    '2026-12-04')."""
    rel = deadline_seconds(text)
    if rel is not None:
        if rel <= 0:
            raise DeadlineError(f"deadline {text!r} is not in the future")
        if rel > MAX_DEADLINE_S:   # its dates could not be written (year 11409972), and no rollout is that long
            raise DeadlineError(f"deadline {text!r} is more than {MAX_DEADLINE_S // 86400:,} days away")
        return now + rel
    try:
        at = dt.datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise DeadlineError(f"deadline {text!r}: give a duration (72h, 3d, 90m; a bare number is hours) or a "
                            "date (2026-12-04T18:00)") from None
    if at <= now:
        raise DeadlineError(f"deadline {text} is in the past")
    if at - now > MAX_DEADLINE_S:
        raise DeadlineError(f"deadline {text!r} is more than {MAX_DEADLINE_S // 86400:,} days away")
    return at


@dataclass
class JobAtRisk:
    job_id: str
    nodes: list[str]
    gpus: int
    start: float | None
    end: float | None              # by its time limit (None: no limit)
    slot: float                    # when its nodes must be empty
    action: str                    # one of ACTIONS
    at: float                      # when the action begins (for checkpoint-requeue: the signal)
    gpu_h_at_risk: float           # what it would lose if it stopped at `at`
    why: str
    signal: str | None = None
    batch: bool = False
    grace_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "gpu_h_at_risk": round(self.gpu_h_at_risk, 3)}


@dataclass
class DeadlinePlan:
    deadline: float
    jobs: list[JobAtRisk]          # every running job on a rollout node that cannot wait, and the waiting ones
    stop_at: dict[str, float]      # job id -> when the plan ends it (for the rollout's slots)
    gpu_h_at_risk: float

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.deadline, "jobs": [j.to_dict() for j in self.jobs],
                "gpu_h_at_risk": round(self.gpu_h_at_risk, 3)}


def plan_deadline(jobs: list[JobInfo], nodes: list[str], *, now: float, deadline: float, budget: int,
                  upgrade_s: float, gpus_per_node: int = 8, stop: str = "earliest") -> DeadlinePlan:
    """Which running jobs on `nodes` stop early, how and when, so that every node is upgraded by
    `deadline` with at most `budget` out at a time.  Raises DeadlineError when no choice keeps it.

    stop="earliest": a job without a checkpoint stops at the start (its loss only grows while it runs);
    stop="latest": at the last moment its node's slot allows (for sites whose time limits are loose, where
    many jobs end long before their limit).  A job that checkpoints is always asked at the last moment."""
    if stop not in ("earliest", "latest"):
        raise DeadlineError(f"stop {stop!r}: earliest or latest")
    budget = max(1, budget)
    rounds_needed = math.ceil(len(nodes) / budget)
    if now + rounds_needed * upgrade_s > deadline:
        raise DeadlineError(f"{len(nodes)} node(s), {budget} at a time, {upgrade_s / 60:g} min each, need until "
                            f"{iso_minute(now + rounds_needed * upgrade_s)}: later than the deadline {iso_minute(deadline)}")
    names = set(nodes)
    on: dict[str, list[JobInfo]] = defaultdict(list)
    mine = [j for j in jobs if names.intersection(j.nodes)]
    for j in mine:
        for n in j.nodes:
            if n in names:
                on[n].append(j)

    def end(j: JobInfo) -> float:
        return INF if j.end_time is None else j.end_time

    def gpus(j: JobInfo) -> int:
        return (j.gpus_per_node or gpus_per_node) * len(j.nodes)

    def cost(j: JobInfo, at: float) -> float:
        return gpus(j) * checkpointing(j.comment).since_checkpoint(j.start_time or now, at) / 3600

    def free(n: str) -> float:
        return max([now] + [end(j) for j in on[n]])

    def latest(q: int) -> float:  # the latest start of the node q-th from the end
        return deadline - (q // budget + 1) * upgrade_s

    # walk latest-freeing first; whenever the node just added cannot wait, give up the cheapest kept one
    kept: list[tuple[float, str]] = []
    given_up: list[str] = []
    # what giving a node up costs: its jobs that could not wait even in the earliest place
    floor = latest(len(nodes) - 1)
    for n in sorted(nodes, key=lambda n: (-free(n), n)):
        f = free(n)
        heapq.heappush(kept, (sum(cost(j, now) for j in on[n] if end(j) > floor), n))
        while kept and f > latest(len(kept) - 1):
            _, victim = heapq.heappop(kept)
            given_up.append(victim)
            if victim == n:
                break
    kept_nodes = sorted((n for _, n in kept), key=lambda n: (-free(n), n))
    slot: dict[str, float] = {n: latest(q) for q, n in enumerate(kept_nodes)}
    # the nodes given up take the places before the kept ones: the jobs there that end in time wait, the
    # others stop; the node whose waiting jobs end last gets the latest place
    q0 = len(kept_nodes)
    line = latest(q0)

    def waits(n: str) -> float:
        return max([now] + [end(j) for j in on[n] if end(j) <= line])

    for i, n in enumerate(sorted(given_up, key=lambda n: (-waits(n), n))):
        slot[n] = max(now, latest(q0 + i))

    out: list[JobAtRisk] = []
    stop_at: dict[str, float] = {}
    for j in sorted(mine, key=lambda j: job_order(j.job_id)):
        must_by = min(slot[n] for n in j.nodes if n in names)
        ck = checkpointing(j.comment)
        if end(j) <= must_by:
            out.append(JobAtRisk(j.job_id, j.nodes, gpus(j), j.start_time, j.end_time, must_by, "wait", end(j), 0.0,
                                 "ends by its time limit before its nodes' slot"))
            continue
        action, at, when, why = _how_it_stops(j, ck, must_by, now, stop)
        stop_at[j.job_id] = when
        out.append(JobAtRisk(j.job_id, j.nodes, gpus(j), j.start_time, j.end_time, must_by, action, at,
                             cost(j, when), why, ck.signal, ck.batch, ck.grace_s))
    return DeadlinePlan(deadline, out, stop_at, sum(j.gpu_h_at_risk for j in out))



def _how_it_stops(j: JobInfo, ck, must_by: float, now: float, stop: str) -> tuple[str, float, float, str]:
    """(action, when it is asked, when its nodes are free, why) for a job that would hold its nodes past
    their slot: a checkpoint signal where it can take one and be requeued, else a requeue or a cancel, at
    the start or at the last moment (`stop`, or a job whose checkpoints are known)."""
    requeue = j.requeue is not False
    if ck.signal and requeue:
        return ("checkpoint-requeue", max(now, must_by - ck.grace_s), must_by,
                f"checkpoints on SIG{ck.signal}, {ck.grace_s:g} s, then requeued")
    late = stop == "latest" or bool(ck.every_s or ck.at)
    at = max(now, must_by) if late else now
    why = ("requeued" if requeue else "cannot be requeued: cancelled") + \
        (f", checkpoints every {ck.every_s / 3600:g} h" if ck.every_s else
         ", last checkpoint known" if ck.at else ", no checkpoint known: all its elapsed time is lost")
    return "requeue" if requeue else "cancel", at, at, why

def iso_minute(t: float) -> str:
    return dt.datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M")
