"""The rollout engine: one reconcile step that `apply`, `resume`, `abort`, `rollback` and `simulate` drive.

A step reads the fleet once (all nodes, the running jobs, the reservations: three Slurm reads whatever the
fleet's size), decides every node's next move through one small handler per state (the moves allowed are
declared in `states.TRANSITIONS`), writes the moves to the store in one transaction, then makes the Slurm
changes as batched calls: one call per distinct change over a host list.

How nodes are taken, a rolling window instead of batches:
* every node gets a maintenance slot when the rollout starts: the time its running jobs end by their
  limits, spread so that no more than the budget would be out at once.  The slots are MAINT reservations
  (grouped by start time), so new long jobs cannot land on nodes still waiting; backfill fills the gaps;
* a node is taken as soon as it sits empty and the window has room, so a slot moves earlier when jobs end
  before their limits; a node taken is drained (nothing runs there, nothing is killed) and upgraded;
* the waves of the plan are evidence gates: the canary must validate before anything else starts, and the
  window widens to the next wave's size only once as many nodes as all earlier waves hold have validated;
* failed nodes stay drained and count against the budget and `max_failures`; a budget filled by failures
  halts the rollout, never ends it as done.

Upgrades run in a bounded pool (`Executor`), each with its own timeout.  A node is back when it has
rebooted (boot time changed, or slurmd registered again after the command began) and responds; it is
validated from what its own health check published after that reboot (driver == target, verdict ok or
warn).  Every handler repeats its work idempotently from what Slurm shows, so a crash at any point
followed by `resume` converges.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from .. import summary
from ..hostlist import fold
from ..policy import Policy
from ..slurm.base import JobInfo, NodeInfo, Reservation, SlurmError
from ..slurm.ownership import MAINTAIN, may_drain, owns
from . import states as S
from .planner import RESERVATION_PREFIX
from .store import Store
from .upgrade import Result, UpgradeError, render, run

STEER = 1000  # Weight added to nodes waiting for their turn: Slurm prefers lower-weight nodes for new jobs
INF = float("inf")


# ----------------------------------------------------------------------------- adapters
class Executor(Protocol):
    """Runs upgrade commands, at most N at once; the simulator supplies one driven by its clock."""

    def start(self, node: str, script: str, timeout_s: float) -> None: ...

    def running(self) -> set[str]: ...

    def finished(self) -> dict[str, Result]: ...


class PoolExecutor:
    """A bounded thread pool, each command in its own process group with its own timeout."""

    def __init__(self, workers: int, run_dir: str | None = None):
        """run_dir: where each running command's process group is named (`<node>.pgid`)."""
        self.pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="gpufleet-upgrade")
        self.futures: dict[str, Future] = {}
        self.run_dir = run_dir

    def start(self, node: str, script: str, timeout_s: float) -> None:
        pid_file = os.path.join(self.run_dir, f"{node}.pgid") if self.run_dir else None
        self.futures[node] = self.pool.submit(run, script, timeout_s, pid_file)

    def running(self) -> set[str]:
        return set(self.futures)

    def finished(self) -> dict[str, Result]:
        done = {n: f for n, f in self.futures.items() if f.done()}
        for n in done:
            del self.futures[n]
        out = {}
        for n, f in done.items():
            try:
                out[n] = f.result()
            except Exception as exc:  # the command could not even start
                out[n] = Result(False, -1, f"{type(exc).__name__}: {exc}")
        return out

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True)


# ----------------------------------------------------------------------------- one read of the fleet
@dataclass
class World:
    now: float
    nodes: dict[str, NodeInfo]
    free_at: dict[str, float]               # node -> when its running jobs end by their limits (inf: no limit)
    reservations: dict[str, Reservation]
    # node -> (job id, state) of its newest validation job; read only while a node is in `testing`
    validation: dict[str, tuple[str, str]] = field(default_factory=dict)
    jobs: dict[str, JobInfo] = field(default_factory=dict)   # running jobs by id

    @property
    def ours(self) -> dict[str, Reservation]:
        return {k: r for k, r in self.reservations.items() if k.startswith(RESERVATION_PREFIX)}


def read_world(slurm: Any, now: float, validation_job: str | None = None,
               stops: dict[str, tuple[float, float | None]] | None = None) -> World:
    """Three reads whatever the fleet size, and a fourth (the validation jobs) while any run.  `stops`:
    job id -> (when a deadline plan stops it, the start of the run it stops); that run frees its nodes then."""
    nodes = {n.name: n for n in slurm.nodes()}
    free_at: dict[str, float] = {}
    jobs = {j.job_id: j for j in slurm.running_jobs()}
    for job in jobs.values():
        end = job.end_time if job.end_time is not None else INF
        if stops and job.job_id in stops and same_run(job, stops[job.job_id][1]):
            end = min(end, max(now, stops[job.job_id][0]))
        for n in job.nodes:
            free_at[n] = max(free_at.get(n, 0.0), end)
    world = World(now, nodes, free_at, {r.name: r for r in slurm.reservations()}, jobs=jobs)
    if validation_job:
        for job_id, state, comment in slurm.jobs_named(validation_job):
            node = comment.rsplit(" ", 1)[-1]
            if node not in world.validation or int(job_id) > int(world.validation[node][0]):
                world.validation[node] = (job_id, state)
    return world


def same_run(job: JobInfo, run_start: float | None) -> bool:
    """The run a plan named (a requeued job that started again is a new run, not ours to stop again)."""
    return run_start is None or job.start_time is None or abs(job.start_time - run_start) < 1.0


def validation_job_name(rid: str) -> str:
    return f"gpufleet-validate-{rid}"


# ----------------------------------------------------------------------------- batched writes
JOB_CALLS = frozenset({"set_job_comment", "signal_job", "requeue_jobs", "cancel_jobs"})


@dataclass
class Writes:
    """The Slurm changes a step wants, grouped so that each distinct change is one call over a host list.

    Every one of them is derived again at the next step from the nodes' states and what Slurm shows, so a
    step may make only the first `cap` of them (most urgent first) and leave the rest to the next."""

    drain: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))       # reason -> nodes
    reboot: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    reason: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    resume: set[str] = field(default_factory=set)
    update: dict[str, list[str]] = field(default_factory=dict)                         # reservation -> nodes
    delete: set[str] = field(default_factory=set)
    create: dict[str, tuple[list[str], float, int]] = field(default_factory=dict)     # name -> nodes, start, minutes
    weight: dict[int, set[str]] = field(default_factory=lambda: defaultdict(set))
    comments: dict[str, str] = field(default_factory=dict)            # job id -> its new comment
    signals: dict[str, tuple[str, bool]] = field(default_factory=dict)  # job id -> (signal, batch shell only)
    requeue: set[str] = field(default_factory=set)
    cancel: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)

    def calls(self) -> list[tuple[str, tuple[Any, ...]]]:
        """(backend method, arguments), most urgent first: give capacity back, stop new jobs on nodes we
        take, then the rest."""
        out: list[tuple[str, tuple[Any, ...]]] = []
        if self.resume:  # capacity back first: a node done and one taken are never both out for long
            out.append(("resume_nodes", (sorted(self.resume),)))
        out += [("drain_nodes", (sorted(n), r)) for r, n in self.drain.items()]
        out += [("reboot_asap_nodes", (sorted(n), r, "RESUME")) for r, n in self.reboot.items()]
        out += [("update_reservation", (name, sorted(n))) for name, n in sorted(self.update.items())]
        out += [("delete_reservation", (name,)) for name in sorted(self.delete)]
        out += [("set_reason_nodes", (sorted(n), r)) for r, n in self.reason.items()]
        out += [("create_reservation", (name, sorted(n), start, minutes))
                for name, (n, start, minutes) in sorted(self.create.items(), key=lambda kv: kv[1][1])]
        out += [("set_weight_nodes", (sorted(n), w)) for w, n in self.weight.items()]
        # a deadline plan's jobs: the owner told first, then the checkpoint signal, then the stop
        out += [("set_job_comment", (job, text)) for job, text in sorted(self.comments.items())]
        out += [("signal_job", (job, sig, batch)) for job, (sig, batch) in sorted(self.signals.items())]
        if self.requeue:
            out.append(("requeue_jobs", (sorted(self.requeue),)))
        if self.cancel:
            out.append(("cancel_jobs", (sorted(self.cancel),)))
        return out

    def flush(self, slurm: Any, cap: int | None = None) -> int:
        """The cap bounds node and reservation changes; a deadline plan's few job calls always go, or a
        job told, signalled or stopped a step late could cost the deadline."""
        self.made: list[tuple[str, str]] = []
        calls = self.calls()
        jobs = [c for c in calls if c[0] in JOB_CALLS]
        for method, args in [c for c in calls if c[0] not in JOB_CALLS][:cap] + jobs:
            try:
                getattr(slurm, method)(*args)
            except SlurmError as exc:  # derived again next step; said in the audit log
                self.errors.append(f"{method}: {exc}")
            self.made.append((method, " ".join(fold(a) if isinstance(a, list) else str(a) for a in args)))
        return len(self.made)


# ----------------------------------------------------------------------------- what a node published
def held_before(row: dict[str, Any]) -> bool:
    """Someone else had drained or downed the node when the rollout took it (upgrade_held_nodes)."""
    prior = json.loads(row["prior"] or "{}")
    return "DRAIN" in prior.get("flags", []) or prior.get("state") == "DOWN"


def rebooted(info: NodeInfo, boot_before: str | None, since: float) -> bool:
    """The node's boot time changed, or its slurmd registered again after `since`."""
    if info.boot_time and boot_before and info.boot_time != boot_before:
        return True
    # Slurm shows whole seconds: a registration in the second the command began counts
    return info.slurmd_start is not None and info.slurmd_start >= math.floor(since)


def responding(info: NodeInfo) -> bool:
    return not info.down and "NOT_RESPONDING" not in info.flags and not info.rebooting


# ----------------------------------------------------------------------------- slots
def slot_times(free_at: dict[str, float], canary: list[str], others: list[str], now: float, budget: int,
               stages: list[int], upgrade_s: float, bucket_s: float) -> dict[str, float]:
    """When each node is expected to go, as the engine will take it: the canary first, then the others
    soonest-free first, each stage of the plan's waves opening once every node before it is done, at most
    min(budget, stage size) at once.  Rounded up to `bucket_s` so that nodes share reservations; a node
    whose job has no time limit gets its slot when its turn comes (it empties when that job ends)."""
    import heapq

    def free(n: str) -> float:
        f = free_at.get(n, now)
        return now if f == INF else max(f, now)

    slots: dict[str, float] = {}
    gate = now
    for n in canary:
        slots[n] = free(n)
        gate = max(gate, slots[n] + upgrade_s)
    todo = sorted(others, key=free)
    i = 0
    for k, size in enumerate(stages or [len(todo)]):
        if i >= len(todo):
            break
        last = k == len(stages) - 1
        members = todo[i:] if last else todo[i:i + size]
        width = max(1, min(budget, size))
        places = [gate] * width
        end = gate
        for n in members:
            start = max(heapq.heappop(places), free(n))
            heapq.heappush(places, start + upgrade_s)
            slots[n] = start
            end = max(end, start + upgrade_s)
        i += len(members)
        gate = end
    return {n: math.ceil(t / bucket_s) * bucket_s for n, t in slots.items()}


# ----------------------------------------------------------------------------- the engine
@dataclass
class StepStats:
    reads: int
    writes: int
    cpu_s: float
    moves: int


class Engine:
    def __init__(self, store: Store, slurm: Any, policy: Policy, executor: Executor | None,
                 clock: Callable[[], float] = time.time,
                 on_event: Callable[[str, str | None, str, dict[str, int]], None] | None = None):
        self.store = store
        self.slurm = slurm
        self.policy = policy
        self.s = policy.maintain
        self.executor = executor
        self.clock = clock
        self.on_event = on_event or (lambda *a: None)
        self.stats: list[StepStats] = []

    def running(self) -> set[str]:
        return self.executor.running() if self.executor else set()

    def in_flight(self, rid: str) -> int:
        counts = self.store.counts(rid)
        return sum(counts.get(s, 0) for s in S.IN_FLIGHT) + len(self.running())

    # -- one step --------------------------------------------------------------------------------
    def step(self, rid: str) -> str:
        """Reconcile once; returns the rollout's state after the step."""
        t_cpu = time.process_time()
        r = self.store.rollout(rid)
        if r is None:
            raise KeyError(rid)
        if r["state"] in S.ROLLOUT_FINAL:
            return r["state"]
        rows = self.store.nodes(rid)
        testing = any(row["state"] == S.TESTING for row in rows)
        plan = json.loads(r["plan"])
        jobs = [j for j in self.store.preemptions(rid) if j["state"] not in S.JOB_FINAL] if plan.get("deadline") else []
        world = read_world(self.slurm, self.clock(), validation_job_name(rid) if testing else None,
                           {j["job"]: (j["stop"], j["run_start"]) for j in jobs})
        ctx = _Step(self, rid, r, plan, world, rows, self.executor.finished() if self.executor else {})
        ctx.run()
        if jobs and r["state"] == S.R_RUNNING:
            ctx.preempt(jobs)
        self.store.set_preemptions(rid, ctx.job_changes, world.now)
        self.store.apply(rid, ctx.changes, world.now, ctx.audits)
        writes = ctx.writes.flush(self.slurm, self.s.max_slurm_writes_per_step or None)
        self.store.apply(rid, [], world.now, [(None, f"slurm {method}", detail) for method, detail in ctx.writes.made]
                         + [(None, "slurm call failed (retried next step)", e) for e in ctx.writes.errors])
        writes += self.submit_validation(rid, ctx.submit, world.now)
        for node, script, timeout in ctx.launch:
            if self.executor is None:
                raise RuntimeError("an upgrade to start, and no executor to run it")
            self.executor.start(node, script, timeout)
        state = ctx.finish()
        if ctx.events:
            counts = self.store.counts(rid)
            for node, text in ctx.events:
                self.on_event(rid, node, text, counts)
        self.stats.append(StepStats(3 + testing, writes, time.process_time() - t_cpu, ctx.moves))
        return state

    def submit_validation(self, rid: str, submit: list[tuple[str, str, str]], now: float) -> int:
        """One sbatch per node (Slurm has no host-list form of "one job on each of these nodes"); the job
        id is stored at once, and a job submitted just before a crash is found again by its comment."""
        for node, reservation, partition in submit:
            minutes = -(-self.s.validation_job_timeout_s // 60)
            try:
                job_id = self.slurm.submit_job(validation_job_name(rid), node, reservation, partition,
                                               self.s.validation_job, minutes, f"gpufleet validation of {node}")
            except SlurmError as exc:
                self.store.audit(rid, node, "validation job not submitted (retried next step)", str(exc), now)
                continue
            self.store.apply(rid, [(node, None, "", {"job": job_id})], now,
                             [(node, "validation job submitted", f"job {job_id} in {reservation}")])
        return len(submit)

    # -- admin actions: one pass of moves, then the same cleanup as the end of a rollout ------------
    def abort(self, rid: str) -> str:
        world = read_world(self.slurm, self.clock())
        ctx = _Step(self, rid, self.store.rollout(rid), {}, world, self.store.nodes(rid), {})
        for row in ctx.rows:
            if row["state"] == S.PENDING:
                ctx.move(row, S.SKIPPED, "aborted before its upgrade")
            elif row["state"] == S.RESERVED:
                ctx.move(row, S.SKIPPED, "aborted before its upgrade")
            elif row["state"] in (S.UPGRADING, S.RETURNING, S.VALIDATING, S.TESTING, S.ROLLING_BACK):
                ctx.move(row, S.FAILED, "aborted mid-upgrade: check the node", error="aborted mid-upgrade")
        ctx.ensure_all()
        self.store.apply(rid, ctx.changes, world.now)
        ctx.writes.flush(self.slurm)
        self.final_cleanup(rid, world.now)
        self.store.set_rollout_state(rid, S.R_ABORTED, at=world.now)
        return S.R_ABORTED

    def start_rollback(self, rid: str) -> None:
        """Nodes not yet upgraded are given back; every node touched goes back to its previous driver."""
        world = read_world(self.slurm, self.clock())
        ctx = _Step(self, rid, self.store.rollout(rid), {}, world, self.store.nodes(rid), {})
        ctx.rolling_back = True
        for row in ctx.rows:
            if row["state"] in (S.PENDING, S.RESERVED):
                ctx.move(row, S.SKIPPED, "rolled back before its upgrade")
            elif row["state"] in (S.DONE, S.FAILED, S.UPGRADING, S.RETURNING, S.VALIDATING, S.TESTING):
                if not row["previous_driver"]:
                    if row["state"] not in S.FINAL:
                        ctx.move(row, S.FAILED, "no previous driver recorded", error="no previous driver recorded")
                    continue
                ctx.move(row, S.ROLLING_BACK, f"back to {row['previous_driver']}", started=None, error=None)
        ctx.ensure_all()
        self.store.apply(rid, ctx.changes, world.now)
        ctx.writes.flush(self.slurm)
        self.store.set_rollout_state(rid, S.R_ROLLING_BACK, at=world.now)

    def final_cleanup(self, rid: str, now: float, world: World | None = None) -> None:
        """The end (done, rolled back, aborted): no reservation of ours and no raised weight stays."""
        writes = Writes()
        reservations = world.reservations.values() if world else self.slurm.reservations()
        writes.delete.update(r.name for r in reservations if r.name.startswith(f"{RESERVATION_PREFIX}{rid}_"))
        rows = [row for row in self.store.nodes(rid) if row["weight"] is not None]
        for row in rows:
            writes.weight[row["weight"]].add(row["node"])
        writes.flush(self.slurm)
        self.store.apply(rid, [(row["node"], None, "", {"weight": None}) for row in rows], now)
        for error in writes.errors:
            self.store.audit(rid, None, "slurm call failed at cleanup", error, now)


class _Step:
    """The decisions of one step over one read of the fleet."""

    def __init__(self, engine: Engine, rid: str, rollout: dict[str, Any], plan: dict[str, Any], world: World,
                 rows: list[dict[str, Any]], results: dict[str, Result]):
        self.e = engine
        self.s = engine.s
        self.rid = rid
        self.rollout = rollout
        self.plan = plan
        self.world = world
        self.rows = rows
        self.results = results
        self.changes: list[tuple[str, str | None, str, dict[str, Any]]] = []
        self.moves = 0
        self.writes = Writes()
        self.launch: list[tuple[str, str, float]] = []
        self.submit: list[tuple[str, str, str]] = []  # validation jobs: node, reservation, partition
        self.events: list[tuple[str | None, str]] = []
        self.audits: list[tuple[str | None, str, str]] = []  # (node, event, detail) beside the moves
        self.state: dict[str, str] = {r["node"]: r["state"] for r in rows}
        self.job_changes: list[tuple[str, dict[str, Any], str]] = []
        self.rolling_back = rollout["state"] == S.R_ROLLING_BACK
        self.reason_prefix = f"{S.MAINT_REASON} {rid}"

    # -- primitives --------------------------------------------------------------------------------
    def move(self, row: dict[str, Any], new: str, detail: str = "", **fields: Any) -> None:
        old = self.state[row["node"]]
        if not S.legal(old, new):
            raise RuntimeError(f"illegal move {old} -> {new} for {row['node']}")
        self.state[row["node"]] = new
        row.update(fields, state=new, updated=self.world.now)
        self.changes.append((row["node"], new, detail, fields))
        self.moves += 1
        self.events.append((row["node"], f"{new}{': ' + detail if detail else ''}"))

    def note(self, row: dict[str, Any], **fields: Any) -> None:
        row.update(fields)
        self.changes.append((row["node"], None, "", fields))

    def info(self, row: dict[str, Any]) -> NodeInfo | None:
        return self.world.nodes.get(row["node"])

    def busy(self, node: str) -> bool:
        return node in self.world.free_at

    def ours(self, info: NodeInfo) -> bool:
        """Drained by a rollout (ours: only one runs at a time), not by an admin or the health check."""
        return info.drained and owns(info, MAINTAIN)

    def fail(self, row: dict[str, Any], why: str) -> None:
        self.move(row, S.FAILED, why, error=why)

    def differs_from_canary(self, node: str, seen: dict[str, Any]) -> str | None:
        """How this node's post-upgrade state differs from the first validated canary's, or None."""
        waves = self.plan.get("waves", [])
        canary = waves[0]["nodes"] if waves and waves[0]["kind"] == "canary" else []
        if node in canary:
            return None
        ref = next((json.loads(r["validated"]) for r in self.rows if r["node"] in canary and r.get("validated")), None)
        if not ref:
            return None
        diffs = [f"{label} {seen.get(key, 'unknown')} != canary's {ref[key]}"
                 for key, label in COMPARED.items() if key in ref and seen.get(key) != ref[key]]
        return "; ".join(diffs) or None

    # -- the step ----------------------------------------------------------------------------------
    def run(self) -> None:
        for row in self.rows:
            handler = HANDLERS.get(row["state"])
            if handler is not None:
                handler(self, row)
        if self.rollout["state"] == S.R_RUNNING:
            self.admit()
        if not self.rolling_back and self.plan.get("strategy", "reservation") == "reservation":
            self.slots()
        self.ensure_all()

    def finish(self) -> str:
        counts: dict[str, int] = defaultdict(int)
        for st in self.state.values():
            counts[st] += 1
        r = self.rollout["state"]
        failed = counts[S.FAILED]
        in_flight = sum(counts[s] for s in S.IN_FLIGHT) + len(self.e.running())
        if r == S.R_ROLLING_BACK:
            if in_flight == 0 and all(st in S.FINAL for st in self.state.values()) and not self.writes.calls():
                self.e.final_cleanup(self.rid, self.world.now, self.world)
                self.e.store.set_rollout_state(self.rid, S.R_ROLLED_BACK, at=self.world.now)
                return S.R_ROLLED_BACK
            return r
        if r == S.R_HALTED:
            return r
        pending = counts[S.PENDING]
        if failed > self.s.max_failures:
            return self.halt(f"{failed} node(s) failed (max_failures {self.s.max_failures})")
        if pending and failed >= self.plan["budget"]["max_unavailable"]:
            return self.halt(f"the budget of {self.plan['budget']['max_unavailable']} node(s) is filled by "
                             f"{failed} failed node(s); {pending} node(s) still pending")
        if in_flight == 0 and pending == 0 and not self.writes.calls():  # and Slurm shows every node given back
            self.e.final_cleanup(self.rid, self.world.now, self.world)
            self.e.store.set_rollout_state(self.rid, S.R_DONE, f"{counts[S.DONE]} done, {failed} failed",
                                           at=self.world.now)
            return S.R_DONE
        return r

    def halt(self, why: str) -> str:
        self.e.store.set_rollout_state(self.rid, S.R_HALTED, why, at=self.world.now)
        self.e.on_event(self.rid, None, f"HALTED: {why}", self.e.store.counts(self.rid))
        if self.s.auto_rollback:
            self.e.start_rollback(self.rid)
            return S.R_ROLLING_BACK
        return S.R_HALTED

    # -- what Slurm should show for each node, derived again every step -----------------------------
    def ensure_all(self) -> None:
        ours = {name: res for name, res in self.world.ours.items()
                if name.startswith(f"{RESERVATION_PREFIX}{self.rid}_")}
        member: dict[str, list[str]] = defaultdict(list)
        for name, res in ours.items():
            for n in res.nodes:
                member[n].append(name)
        leave: dict[str, set[str]] = defaultdict(set)
        for row in self.rows:
            info = self.info(row)
            if info is None:
                continue
            st = self.state[row["node"]]
            node = row["node"]
            if st == S.PENDING:
                if not self.rolling_back:
                    self.steer(row, info)
                continue
            if st == S.TESTING:  # out of the drain only once Slurm shows it held by a reservation of ours
                if self.holding(node) is None:
                    self.hold(info)
                elif self.ours(info):
                    self.writes.resume.add(node)
                continue
            if st in (S.RESERVED, S.UPGRADING, S.RETURNING, S.VALIDATING, S.ROLLING_BACK):
                if st == S.RESERVED and self.plan.get("strategy") == "reboot-asap":
                    self.reboot_asap(row, info)
                    continue
                verb = "rolling back to" if self.rolling_back else "upgrading to"
                driver = row["previous_driver"] if self.rolling_back else self.plan.get("target_driver")
                self.drain(info, f"{self.reason_prefix} {verb} {driver}")
                continue
            # final: failed nodes stay drained with our reason; the others are given back as found
            if st == S.FAILED:
                self.drain(info, f"{self.reason_prefix} failed: {row['error'] or 'see maintain status'}"[:120])
            elif row["prior"]:
                self.give_back(row, info)
            for name in member.get(node, []):
                leave[name].add(node)
            self.unsteer(row, info)
        for name, nodes in leave.items():
            keep = sorted(set(ours[name].nodes) - nodes)
            if keep:
                self.writes.update[name] = keep
            else:
                self.writes.delete.add(name)

    # -- a deadline plan's jobs: only those it named, each at its moment ------------------------------
    def preempt(self, jobs: list[dict[str, Any]]) -> None:
        now = self.world.now
        target = self.plan.get("target_driver")
        # a job stops only once each of its rollout nodes sits in a reservation of ours: else the requeued
        # job (or any other) could start again on the node it just left
        ours = {n for name, r in self.world.ours.items() if name.startswith(f"{RESERVATION_PREFIX}{self.rid}_")
                for n in r.nodes}
        rollout_nodes = set(self.state)
        deadline = time.strftime("%Y-%m-%dT%H:%M", time.localtime(self.plan["deadline"]["at"]))
        for j in jobs:
            job = self.world.jobs.get(j["job"])
            running = job is not None and same_run(job, j["run_start"])
            st = j["state"]
            if not running:
                done = st in (S.J_SIGNALLED, S.J_STOPPING)
                self.job_changes.append((j["job"], {"state": S.J_STOPPED if done else S.J_ENDED},
                                         "stopped" if done else "ended before its moment: nothing done"))
                continue
            # the owner reads it in the job's comment (squeue -o %k, scontrol show job); written again if a
            # crash lost the call
            when = time.strftime("%Y-%m-%dT%H:%M", time.localtime(j["at"]))
            what = {"checkpoint-requeue": f"SIG{j['signal']} to checkpoint at {when}, then requeued",
                    "requeue": f"requeued at {when}", "cancel": f"cancelled at {when}"}[j["action"]]
            note = f"gpufleet {self.rid}: {what} for driver {target} on all nodes by {deadline}"
            if f"gpufleet {self.rid}:" not in job.comment:
                self.writes.comments[j["job"]] = f"{job.comment} | {note}" if job.comment else note
            if st == S.J_PLANNED:
                self.job_changes.append((j["job"], {"state": S.J_TOLD}, note))
                st = S.J_TOLD
            if now < j["at"] or not all(n in ours for n in job.nodes if n in rollout_nodes):
                continue
            elif st == S.J_TOLD and j["action"] == "checkpoint-requeue":
                self.writes.signals[j["job"]] = (j["signal"], bool(j["batch"]))
                self.job_changes.append((j["job"], {"state": S.J_SIGNALLED, "since": now},
                                         f"SIG{j['signal']}; requeued after {j['grace']:g} s"))
            elif st == S.J_SIGNALLED and now < (j["since"] or now) + j["grace"]:
                continue
            else:  # told (requeue / cancel), signalled past its grace, or stopping and still there
                if st != S.J_STOPPING:
                    self.job_changes.append((j["job"], {"state": S.J_STOPPING, "since": now}, j["action"]))
                (self.writes.cancel if j["action"] == "cancel" else self.writes.requeue).add(j["job"])

    def drain(self, info: NodeInfo, reason: str) -> None:
        if info.drained and not self.ours(info):
            return  # someone else's drain (upgrade_held_nodes): keep their reason
        if not info.drained:
            self.writes.drain[reason].add(info.name)
        elif info.reason != reason:
            self.writes.reason[reason].add(info.name)

    def give_back(self, row: dict[str, Any], info: NodeInfo) -> None:
        """Resume only what we drained; a node that was drained before gets its own reason back."""
        if not self.ours(info):
            return
        prior = json.loads(row["prior"] or "{}")
        if held_before(row):
            if prior.get("reason"):
                self.writes.reason[prior["reason"]].add(info.name)
        else:
            self.writes.resume.add(info.name)

    def steer(self, row: dict[str, Any], info: NodeInfo) -> None:
        """Nodes waiting for their turn get a higher Weight, so new jobs land on upgraded nodes first."""
        if row["weight"] is None:
            if info.drained or info.down or info.rebooting:
                return  # someone else's node right now: not ours to change
            self.note(row, weight=info.weight or 1)
        if info.weight != row["weight"] + STEER:
            self.writes.weight[row["weight"] + STEER].add(info.name)

    def unsteer(self, row: dict[str, Any], info: NodeInfo) -> None:
        if row["weight"] is None:
            return
        if info.weight == row["weight"]:
            self.note(row, weight=None)  # restored, and Slurm shows it
        else:
            self.writes.weight[row["weight"]].add(info.name)

    def holding(self, node: str) -> str | None:
        """A reservation of this rollout that holds `node` now (begun, not ended)."""
        now = self.world.now
        return next((name for name, r in sorted(self.world.ours.items())
                     if name.startswith(f"{RESERVATION_PREFIX}{self.rid}_") and node in r.nodes
                     and (r.start is None or r.start <= now) and (r.end is None or r.end > now)), None)

    def hold(self, info: NodeInfo, minutes: int = 24 * 60) -> None:
        """Held in a reservation of ours from now (MAINT reservations may overlap the node's slot)."""
        if self.holding(info.name) is None:
            name = f"{RESERVATION_PREFIX}{self.rid}_h{int(self.world.now)}"
            nodes, start, minutes = self.writes.create.get(name, ([], self.world.now, minutes))
            self.writes.create[name] = (nodes + [info.name], start, minutes)

    def reboot_asap(self, row: dict[str, Any], info: NodeInfo) -> None:
        """reboot-asap: held in a reservation from now, emptied by `scontrol reboot ASAP`."""
        if not any(info.name in r.nodes for r in self.world.ours.values()):
            self.hold(info)
        if not info.rebooting and not rebooted(info, row["boot"], row["started"] or 0):
            self.writes.reboot[f"{self.reason_prefix} emptying for {self.plan['target_driver']}"].add(info.name)

    # -- slots: every waiting node's maintenance slot, a MAINT reservation -----------------------------
    def slots(self) -> None:
        pending = [r for r in self.rows if self.state[r["node"]] == S.PENDING]
        if not pending:
            return
        if any(r["slot"] is None for r in pending):
            waves = self.plan["waves"]
            canary = waves[0]["nodes"] if waves and waves[0]["kind"] == "canary" else []
            need = {r["node"] for r in pending if r["slot"] is None}
            upgrade_s = 60.0 * self.s.upgrade_minutes
            times = slot_times(self.world.free_at, [n for n in canary if n in need],
                               [r["node"] for r in pending if r["node"] in need and r["node"] not in canary],
                               self.world.now, self.plan["budget"]["max_unavailable"],
                               [len(w["nodes"]) for w in waves if w["kind"] != "canary"], upgrade_s, 1.0)
            # a few reservations whatever the fleet size: slots share one when they start close together
            span = max(times.values()) - self.world.now
            bucket = max(300.0, span / 24)
            for r in pending:
                if r["node"] in need:
                    self.note(r, slot=math.ceil(times[r["node"]] / bucket) * bucket)
        by_slot: dict[float, list[str]] = defaultdict(list)
        member = {n for res in self.world.ours.values() for n in res.nodes}
        for r in pending:
            by_slot[r["slot"]].append(r["node"])
        last = max(by_slot)
        ours = self.world.ours
        for slot, nodes in by_slot.items():
            name = f"{RESERVATION_PREFIX}{self.rid}_s{int(slot)}"
            if name not in ours:
                missing = [n for n in nodes if n not in member]
                if missing:
                    hours = (last - slot) / 3600 + 24
                    self.writes.create[name] = (missing, slot, int(hours * 60))

    # -- admission: the rolling window -------------------------------------------------------------
    def admit(self) -> None:
        budget = self.plan["budget"]
        counts: dict[str, int] = defaultdict(int)
        for st in self.state.values():
            counts[st] += 1
        failed = counts[S.FAILED]
        if failed > self.s.max_failures or failed >= budget["max_unavailable"]:
            return  # the rollout halts at the end of this step
        # out of service as Slurm shows it: nodes under way, nodes done but not yet given back, and nodes
        # idle in a slot that has begun
        now = self.world.now
        in_slot = {n for name, r in self.world.ours.items() if name.startswith(f"{RESERVATION_PREFIX}{self.rid}_")
                   and r.start is not None and r.start <= now for n in r.nodes}
        out = 0
        for n, st in self.state.items():
            info = self.world.nodes.get(n)
            if st in S.IN_FLIGHT or (st == S.PENDING and n in in_slot) or (
                    st in (S.DONE, S.SKIPPED) and info is not None and self.ours(info)):
                out += 1
        room = budget["max_unavailable"] - out - failed
        waves = self.plan["waves"]
        canary = set(waves[0]["nodes"]) if waves and waves[0]["kind"] == "canary" else set()
        planned = [r["node"] for r in self.rows if r["wave"] >= 0 and r["node"] not in canary]
        if any(self.state.get(n) not in S.FINAL for n in canary):
            pool = [n for n in canary if self.state.get(n) == S.PENDING]
            width = limit = len(canary)
            started = sum(1 for n in canary if self.state.get(n) != S.PENDING)
        else:
            sizes = [len(w["nodes"]) for w in waves if w["kind"] != "canary"]
            # failed nodes that max_failures tolerates count as settled, or the window would never widen
            settled = sum(1 for n in planned if self.state[n] in S.FINAL)
            cum, stage = 0, len(sizes) - 1
            for k, size in enumerate(sizes):
                if settled < cum + size:
                    stage = k
                    break
                cum += size
            width = sizes[stage] if sizes else 0
            limit = cum + width
            started = sum(1 for n in planned if self.state[n] != S.PENDING)
            pool = [n for n in planned if self.state[n] == S.PENDING]
        # the stage bounds our work under way; the budget bounds what Slurm shows out of service (a node
        # already idle in its slot is out either way, so taking it costs the budget nothing)
        under_way = sum(counts[s] for s in S.IN_FLIGHT)
        stage_room = min(width - under_way, limit - started)
        if stage_room <= 0 or not pool:
            return
        per_part = budget.get("per_partition", {})
        part_out: dict[str, int] = defaultdict(int)
        for n, st in self.state.items():
            if st in S.OUT_OF_SERVICE and n in self.world.nodes:
                for p in self.world.nodes[n].partitions:
                    part_out[p] += 1
        order = plan_order(self.plan)
        reboot_asap = self.plan.get("strategy") == "reboot-asap"

        # empty nodes first (they cost nothing to take), then the soonest free, then the plan's order
        # (less critical partitions first)
        def key(n: str) -> tuple:
            return (0 if reboot_asap or not self.busy(n) else 1, self.world.free_at.get(n, 0.0), order.get(n, 0))

        rows = {r["node"]: r for r in self.rows}
        for n in sorted(pool, key=lambda n: (n not in in_slot, *key(n))):
            if stage_room <= 0:
                break
            if not reboot_asap and self.busy(n):
                continue  # it is taken when it empties, at its slot at the latest
            if room <= 0 and n not in in_slot:
                continue
            info = self.world.nodes.get(n)
            parts = info.partitions if info else []
            if any(p in per_part and part_out[p] >= per_part[p] for p in parts):
                continue
            if self.take(rows[n]):
                stage_room -= 1
                if n not in in_slot:
                    room -= 1
                for p in parts:
                    part_out[p] += 1

    def take(self, row: dict[str, Any]) -> bool:
        """Record the node's state before we touch it; leave it alone if it is someone else's now."""
        info = self.info(row)
        if info is None:
            self.move(row, S.SKIPPED, "not in Slurm any more")
            return False
        others = {n: r.name for r in self.world.reservations.values() if not r.name.startswith(RESERVATION_PREFIX)
                  for n in r.nodes}
        prior = {"state": info.state, "flags": sorted(info.flags), "reason": info.reason,
                 "reason_user": info.reason_user, "reservation": others.get(row["node"]), "boot": info.boot_time}
        held = not may_drain(info, MAINTAIN) or row["node"] in others
        if held and not self.s.upgrade_held_nodes:
            self.move(row, S.SKIPPED, f"held by someone else: {info.reason or prior['reservation']}")
            return False
        self.move(row, S.RESERVED, "", prior=json.dumps(prior), boot=info.boot_time or "unknown",
                  started=self.world.now)
        on_reserved(self, row)
        return True


def plan_order(plan: dict[str, Any]) -> dict[str, int]:
    order: dict[str, int] = {}
    for w in plan.get("waves", []):
        for n in w["nodes"]:
            order.setdefault(n, len(order))
    return order


# ----------------------------------------------------------------------------- one handler per state
def on_reserved(ctx: _Step, row: dict[str, Any]) -> None:
    """Taken: wait until Slurm shows it drained (or, reboot-asap, rebooted) and empty."""
    info = ctx.info(row)
    if info is None:
        return ctx.fail(row, "not in Slurm any more")
    target = ctx.plan["target_driver"]
    if ctx.plan.get("strategy") == "reboot-asap":
        back = rebooted(info, row["boot"], row["started"] or 0)
        if back and responding(info) and not ctx.busy(row["node"]):
            ctx.move(row, S.UPGRADING, f"to {target} (rebooted empty)", started=None)
        elif back and info.down and ctx.world.now - (info.slurmd_start or ctx.world.now) > ctx.s.return_timeout_s:
            ctx.fail(row, f"down after its reboot: {info.reason or info.state}")
        return
    if info.drained and not ctx.busy(row["node"]):  # by us, or by an admin (upgrade_held_nodes)
        ctx.move(row, S.UPGRADING, f"to {target}", started=None)
        on_upgrading(ctx, row)


def _command(ctx: _Step, row: dict[str, Any], driver: str, action: str, next_state: str) -> None:
    """UPGRADING and ROLLING_BACK: once Slurm shows the node drained by us and empty, the site's command
    runs in the pool; its result moves the node on."""
    node = row["node"]
    info = ctx.info(row)
    result = ctx.results.pop(node, None)
    if result is not None:
        ctx.audits.append((node, f"{action} command rc={result.rc}", result.output))
        if not result.ok:  # its last line says why (e.g. `slurm-gpufleet reboot-check` before the reboot)
            last = next((line.strip() for line in reversed(result.output.splitlines()) if line.strip()), "")
            if not last:
                return ctx.fail(row, f"{action} command failed (rc {result.rc})")
            # the Slurm reason carries the why (`next boot kernel ... has no nvidia ... module`); the audit both
            return ctx.move(row, S.FAILED, f"{action} command failed (rc {result.rc}): {last[:200]}", error=last[:200])
        return ctx.move(row, next_state, "waiting for the reboot")
    if node in ctx.e.running() or info is None or not info.drained or ctx.busy(node):
        return  # running; or not drained yet; or a job slipped in before the drain (it finishes, never killed)
    values = {"node": node, "target_driver": driver, "previous_driver": row["previous_driver"], "action": action,
              "rollout": ctx.rid, "reservation": next((r for r, res in ctx.world.ours.items() if node in res.nodes), "")}
    try:
        script = render(ctx.s.upgrade_template, **values)
    except UpgradeError as exc:
        return ctx.fail(row, str(exc))
    ctx.note(row, started=ctx.world.now, boot=info.boot_time or "unknown")
    ctx.launch.append((node, script, float(ctx.s.upgrade_timeout_s)))
    ctx.events.append((node, f"{action} to {driver} started"))


def on_upgrading(ctx: _Step, row: dict[str, Any]) -> None:
    _command(ctx, row, ctx.plan["target_driver"], "upgrade", S.RETURNING)


def on_rolling_back(ctx: _Step, row: dict[str, Any]) -> None:
    _command(ctx, row, row["previous_driver"], "rollback", S.RETURNING)


def on_returning(ctx: _Step, row: dict[str, Any]) -> None:
    """Back means rebooted (boot time changed, or slurmd registered again since the command began) and
    responding; merely up is not enough."""
    info = ctx.info(row)
    since = row["updated"] or ctx.world.now
    back = info is not None and rebooted(info, row["boot"], row["started"] or 0)
    if back and responding(info):
        return ctx.move(row, S.VALIDATING, "rebooted; waiting for its health check")
    if ctx.world.now - since > ctx.s.return_timeout_s:
        if not back:
            return ctx.fail(row, f"never rebooted within {ctx.s.return_timeout_s} s of its upgrade")
        ctx.fail(row, f"did not come back within {ctx.s.return_timeout_s} s")


def on_validating(ctx: _Step, row: dict[str, Any]) -> None:
    """From what the node's own health check published after the reboot: never by entering the node."""
    info = ctx.info(row)
    driver = row["previous_driver"] if ctx.rolling_back else ctx.plan["target_driver"]
    data = summary.from_node(info) if info is not None else None
    checked = summary.published_at(data) if data else None
    if data is not None and checked is not None and checked >= math.floor(row["started"] or 0):
        if data.get("drv") != driver:
            return ctx.fail(row, f"validation failed: driver {data.get('drv') or 'unreadable'} != {driver}"
                                 + (f" ({data['f']})" if data.get("f") else ""))
        if data.get("v") not in ("ok", "warn"):
            return ctx.fail(row, f"validation failed: verdict {data.get('v')}"
                                 + (f": {data['f']}" if data.get("f") else ""))
        seen = {k: data[k] for k in COMPARED if data.get(k) is not None}
        if not ctx.rolling_back:
            differs = ctx.differs_from_canary(row["node"], seen)
            if differs:
                return ctx.fail(row, f"validation failed: {differs}")
        validated = json.dumps(seen, sort_keys=True)
        checked_text = f"driver {driver}, verdict {data.get('v')} at {data.get('t')}"
        if ctx.rolling_back:
            return ctx.move(row, S.ROLLED_BACK, checked_text, validated=validated)
        if ctx.s.validation_job and not held_before(row):  # a node someone else held goes back to them untested
            return ctx.move(row, S.TESTING, f"{checked_text}; validation job next", validated=validated, job=None)
        return ctx.move(row, S.DONE, checked_text, validated=validated)
    if ctx.world.now - (row["updated"] or ctx.world.now) > ctx.s.validate_timeout_s:
        ctx.fail(row, f"validation failed: no health check published within {ctx.s.validate_timeout_s} s "
                      "of the reboot")


def on_testing(ctx: _Step, row: dict[str, Any]) -> None:
    """The validation job, submitted once Slurm shows the node out of the drain and held by a reservation
    of ours; its end state decides."""
    node = row["node"]
    info = ctx.info(row)
    if info is None:
        return ctx.fail(row, "not in Slurm any more")
    seen = ctx.world.validation.get(node)
    if row["job"] is None and seen is not None:
        ctx.note(row, job=seen[0])  # submitted just before a crash: found again, not submitted twice
    if row["job"] is None:
        reservation = ctx.holding(node)
        if reservation and not info.drained and not ctx.busy(node):
            partition = info.partitions[0] if info.partitions else ""
            ctx.submit.append((node, reservation, partition))
    else:
        state = seen[1] if seen and seen[0] == row["job"] else None
        if state == "COMPLETED":
            return ctx.move(row, S.DONE, f"validation job {row['job']} completed")
        if state in JOB_ENDED_BADLY:
            return ctx.fail(row, f"validation job {row['job']} ended {state}")
        if state is None:
            return ctx.fail(row, f"validation job {row['job']} is gone from Slurm with no result")
    limit = ctx.s.validation_job_timeout_s + ctx.s.validate_timeout_s
    if ctx.world.now - (row["updated"] or ctx.world.now) > limit:
        ctx.fail(row, f"validation job did not finish within {limit} s")


# job states that are a failed validation (squeue's long names)
JOB_ENDED_BADLY = {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "PREEMPTED",
                   "DEADLINE", "REVOKED", "SPECIAL_EXIT"}

# What every upgraded node must share with the canary: the kernel it booted, the module flavour (open or
# proprietary), the GSP firmware, GB200's CDMM mode where the driver reports it
COMPARED = {"kern": "kernel", "modf": "module flavour", "gsp": "GSP firmware", "cdmm": "CDMM mode"}

HANDLERS: dict[str, Callable[[_Step, dict[str, Any]], None]] = {
    S.RESERVED: on_reserved,
    S.UPGRADING: on_upgrading,
    S.ROLLING_BACK: on_rolling_back,
    S.RETURNING: on_returning,
    S.VALIDATING: on_validating,
    S.TESTING: on_testing,
}
