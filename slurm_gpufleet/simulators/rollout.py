"""What-if rollouts on a real job history.

A discrete-event replay of the jobs on a simulated fleet, with a scheduler close to Slurm's: priority
FIFO by submit time plus backfill that respects time limits and maintenance reservations.  At a chosen
moment a rollout starts, run by the engine (`gpufleet`) or one of the hand-written baselines:

* `gpufleet`: the planner of `maintain plan` (same code: canary, waves, budget) places each wave's
  reservation when its nodes' running jobs end by their time limits; short jobs backfill until then;
  nodes waiting for their turn get a higher Weight, so new jobs land on upgraded nodes first;
* `reboot-asap`: a hand-written baseline, a rolling `scontrol reboot ASAP` within the same budget, nodes in
  name order (not the engine's `reboot-asap` strategy: maintain/strategy.py);
* `drain-all`: every node drained at once, upgraded when empty, all resumed at the end.

Each strategy runs on the same trace next to a baseline without maintenance; the difference in each
job's queue wait is the wait the rollout added.  No strategy kills jobs; the simulator checks it.
"""

from __future__ import annotations

import functools
import heapq
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..maintain.fleet import FleetNode, FleetState
from ..maintain.planner import make_plan
from ..maintain.pool import in_pool
from ..maintain.sacct import Trace, assume_limit
from ..maintain.states import NodeState
from ..maintain.strategy import SIMULATED
from ..policy import MaintainSettings, Policy
from ..slurm.domains import Domains, consecutive, mixed_domains, whole_in_service
from .failures import (
    REPAIR_REASON,
    Hazards,
    Rates,
    end_repairs,
    failure_now,
    hazard_step,
    next_failure_in,
    publish_summaries,
)
from .simslurm import SimExecutor, SimSlurm

# what `simulate --strategy` compares: the engine (gpufleet) and hand-written baselines
COMPARED = SIMULATED
INF = float("inf")
BACKFILL_DEPTH = 200  # like Slurm's bf_max_job_test: how deep into the queue backfill looks


@dataclass(eq=False)  # a job is itself, not its fields: the queue's remove compared every field of
class SimJob:         # thousands of waiting jobs (15 M comparisons in a 16-node replay of the history)
    id: str
    submit: float
    run: float
    limit: float
    nodes: int
    gpn: int                       # GPUs per node
    start: float | None = None
    placed: list[int] = field(default_factory=list)
    gen: int = 0                   # which run of the job (a requeue starts a new one)
    saved: float = 0.0             # seconds of its work kept in a checkpoint across requeues
    comment: str = ""
    signalled: float | None = None  # when it was asked to checkpoint (its run's progress kept then)
    requeues: int = 0              # times its node failed under it (failures.py)


@dataclass
class SimNode:
    name: str
    gpus: int
    free: int
    model: str = "NVIDIA H200"     # what its health check names its GPUs
    running: dict[str, float] = field(default_factory=dict)   # job id -> expected end (start + limit)
    reserved_from: float = INF     # a maintenance reservation (or a drain) starts then: no job may run past it
    out_since: float | None = None  # out of service for new jobs (drained / reservation active / upgrading)
    upgrading_until: float | None = None
    upgraded: bool = False
    weight: int = 1                # Slurm's node Weight: lower is preferred for new jobs
    # what the engine sees through SimSlurm
    drained: bool = False
    reason: str = ""
    boot: int = 0
    slurmd_start: float | None = None
    extra: str = ""
    reboot_requested: bool = False  # `scontrol reboot ASAP`: drained now, rebooted once empty
    reboot_next_state: str = "RESUME"  # nextstate=DOWN: back from its reboot DOWN, its reason kept
    reboot_at: float | None = None     # where SimSlurm.reboot_s > 0: its reboot ends then
    down: bool = False
    reason_time: float | None = None   # when its reason was set (the breaker and the rack escalation count by it)

    def out(self, now: float) -> bool:
        """Out of service for new jobs: drained, down, inside an active maintenance reservation, or taken."""
        return self.out_since is not None or self.drained or self.down or self.reserved_from <= now

    def __setattr__(self, key: str, value: Any) -> None:
        object.__setattr__(self, key, value)
        if key in ("free", "weight"):  # the simulator's placement index follows (Simulator.placed)
            index = self.__dict__.get("_index")
            if index is not None:
                index.node_changed(self, key)


@dataclass
class StrategyResult:
    makespan_h: float
    gpu_hours_lost: float
    jobs_killed: int
    wait_added_mean_h: float
    wait_added_p95_h: float
    peak_nodes_out: int
    node_drain_hours: float = 0.0      # node-hours out of service while the rollout ran
    # the most nodes out beyond the budget and the failures since the rollout last admitted a node
    over_budget: int = 0
    capacity: list[tuple[float, int]] = field(default_factory=list)     # (hours from rollout, GPUs in service)
    waves: list[dict[str, Any]] = field(default_factory=list)           # (gpufleet) wave timeline
    gating_jobs: list[dict[str, Any]] = field(default_factory=list)
    waits: dict[str, float] = field(default_factory=dict)
    work_lost_gpu_h: float = 0.0       # work jobs stopped early lost (since their last checkpoint)
    jobs_preempted: int = 0
    done_by_deadline: bool | None = None
    touched_in_time: int = 0           # stopped jobs that would have ended in time by themselves
    domains: int | None = None         # --domain-size: how many failure domains, and during the rollout
    mixed_driver_domains_max: int = 0  # the most domains whose nodes in service ran two drivers at once
    domains_in_service_min: int = 0    # the fewest domains with every node in service at once
    failures: dict[str, Any] | None = None  # --failure-rate: what the draws did (failures.py)
    stopped_at_h: float | None = None  # --hours: the replay stopped this long after the rollout's start
    nodes_upgraded: int = 0

    def metrics(self) -> dict[str, Any]:
        out = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in
               (("makespan_h", self.makespan_h), ("gpu_hours_lost", self.gpu_hours_lost),
                ("jobs_killed", self.jobs_killed), ("wait_added_mean_h", self.wait_added_mean_h),
                ("wait_added_p95_h", self.wait_added_p95_h), ("peak_nodes_out", self.peak_nodes_out),
                ("over_budget", self.over_budget),
                ("node_drain_hours", self.node_drain_hours),
                ("work_lost_gpu_h", self.work_lost_gpu_h), ("jobs_preempted", self.jobs_preempted))}
        if self.domains is not None:
            out.update(domains=self.domains, mixed_driver_domains_max=self.mixed_driver_domains_max,
                       domains_in_service_min=self.domains_in_service_min)
        if self.failures is not None:
            out["failures"] = self.failures
        if self.stopped_at_h is not None or self.makespan_h == INF:
            # a replay cut at a time, or one whose rollout waits for what never comes (an admin's approval
            # of a stage whose canary the evidence gate found worse): how far the rollout got
            done = self.makespan_h != INF
            out.update(makespan_h=round(self.makespan_h, 3) if done else None, done=done,
                       nodes_upgraded=self.nodes_upgraded)
            if self.stopped_at_h is not None:
                out["stopped_at_h"] = self.stopped_at_h
        if self.done_by_deadline is not None:
            out["done_by_deadline"] = self.done_by_deadline
            out["jobs_preempted_that_would_end_in_time"] = self.touched_in_time
        return out


class Simulator:
    checkpoint_every_s: float | None = None  # every job checkpoints this often (None: none does)
    in_time_by: float = INF                 # a stopped job that would have ended by then was touched in vain
    restart_s: float = 0.0                  # a requeued job's run starts with this long of no progress
    until: float = INF                      # the replay stops at this time, whatever is left
    watch: Callable[[Simulator], None] | None = None  # told how far the replay is, about once a second

    def __init__(self, jobs: list[SimJob], nodes: int, gpus_per_node: int):
        self.jobs = jobs
        self.nodes = [SimNode(f"node{i:05d}", gpus_per_node, gpus_per_node) for i in range(1, nodes + 1)]
        # what placement reads without a pass over every node (12,500 of them): the nodes partly in use,
        # and the lowest Weight any node has (None: to be read again); SimNode.__setattr__ keeps both
        self.partial: set[int] = set()
        self._weight_floor: int | None = None
        for i, n in enumerate(self.nodes):
            n.__dict__["_pos"], n.__dict__["_index"] = i, self
        self.by_id = {j.id: j for j in jobs}
        self.queue: list[SimJob] = []
        self.events: list[tuple[float, int, str, Any]] = []
        self.seq = 0
        self.now = 0.0
        self.lost_gpu_s = 0.0
        self.out_node_s = 0.0         # node-seconds out of service (drained, in a slot, upgrading)
        self.capacity: list[tuple[float, int]] = []
        self.peak_out = 0
        self.killed = 0
        self.lost_work_gpu_s = 0.0    # work jobs lost when they were stopped early (since their checkpoint)
        self.preempted = 0
        self.touched_in_time = 0      # stopped jobs that would have ended by `in_time_by`
        self.controller: Controller | None = None
        self.ended: list[tuple[str, str, list[str], float]] = []  # jobs ended badly: id, state, nodes, when
        self.domains: Domains | None = None
        self.mixed_max = 0
        self.whole_min: int | None = None
        self.hazards: Hazards | None = None   # failures drawn from `hazards_from` on (failures.py)
        self.hazards_from = 0.0
        self.jobs_failed = 0
        self.failed_work_gpu_s = 0.0          # work jobs lost to node failures (since their checkpoint)
        self.budget = nodes                   # the rollout's max_unavailable (set by its replay)
        self.over_budget = 0                  # _budget_check
        self._rollout_out: set[str] = set()
        self._last_admit = 0.0

    # -- events ----------------------------------------------------------------------------------
    def push(self, t: float, kind: str, payload: Any = None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, payload))

    def run(self, controller: Controller | None = None, rollout_at: float | None = None) -> None:
        self.controller = controller
        for job in self.jobs:
            self.push(job.submit, "submit", job)
        if controller is not None and rollout_at is not None:
            self.push(rollout_at, "rollout", None)
        if self.hazards is not None:
            self.push(self.hazards_from, "hazard", None)
        watch_at = time.monotonic() + 1.0
        while self.events:
            if self.watch is not None and time.monotonic() >= watch_at:
                self.watch(self)
                watch_at = time.monotonic() + 1.0
            t, _, kind, payload = heapq.heappop(self.events)
            if t == INF:
                break  # "never": what is left waits on something that does not come (an admin's approval)
            if t > self.until:
                self._advance(self.until)
                break
            self._advance(t)
            if kind == "submit":
                self.queue.append(payload)
                self._schedule(only=payload)
            elif kind == "end":
                job, gen = payload
                if gen != job.gen:
                    continue  # that run was stopped early
                freed = [self.nodes[i].name for i in job.placed]
                self._end(job)
                if self.controller:
                    self.controller.on_change(self, freed)
                self._schedule()
            elif kind == "rollout":
                self.controller.start(self)
                self._schedule()
            elif kind == "hazard" and self.hazards.exact:
                if failure_now(self, self.hazards):  # one node fails: its jobs end NODE_FAIL
                    if self.controller:
                        self.controller.on_change(self)
                    self.nodes_changed()
                    self._schedule()
                if self._work_left():
                    self.push(self.now + next_failure_in(self, self.hazards), "hazard", None)
            elif kind == "hazard":
                h = self.hazards
                if self._work_left():
                    failed, changed = hazard_step(self, h, h.step_s)
                    if failed and self.controller:
                        self.controller.on_change(self)
                else:  # nothing runs, nothing is due: the draws end with the work, the repairs now
                    end_repairs(self, h)
                    changed = True
                if changed:
                    self.nodes_changed()
                    self._schedule()
                if self._work_left():
                    self.push(self.now + h.step_s, "hazard", None)
            elif kind in ("tick", "upgraded", "slot", "step", "validation", "rebooted"):
                self.controller.on_tick(self, (kind, payload) if kind != "tick" else payload)
                self._schedule()
            if self.controller and self.controller.finished and not self.queue and not self._running():
                break

    def _running(self) -> bool:
        return any(n.running for n in self.nodes)

    def _work_left(self) -> bool:
        """A job runs or an event is due (a reservation never reached is pushed at infinity)."""
        return self._running() or any(t < INF for t, *_ in self.events)

    def _advance(self, t: float) -> None:
        dt = t - self.now
        if dt > 0 and self.controller is not None and self.controller.active:
            out = [n for n in self.nodes if n.out(self.now)]
            self.lost_gpu_s += dt * sum(n.free for n in out)
            self.out_node_s += dt * len(out)
            self.peak_out = max(self.peak_out, len(out))
            self._budget_check(out)
        self.now = max(self.now, t)

    def _budget_check(self, out: list[SimNode]) -> None:
        """The budget's promise, measured: nodes out of service pass it by no more than the failures that
        struck after the rollout last admitted a node (took one, or let a slot of its begin).
        `over_budget`: the most they passed it by beyond those failures (0 when it holds)."""
        failed = {n.name for n in out if n.reason == REPAIR_REASON}
        rollout = {n.name for n in out if n.name not in failed}
        if rollout - self._rollout_out:
            self._last_admit = self.now
        self._rollout_out = rollout
        h = self.hazards
        since = 0 if h is None else sum(1 for name in failed
                                        if h.repaired_at.get(name, 0.0) - h.rates.repair_h * 3600 >= self._last_admit)
        self.over_budget = max(self.over_budget, len(out) - self.budget - since)

    def record_capacity(self) -> None:
        in_service = sum(n.gpus for n in self.nodes if not n.out(self.now))
        if not self.capacity or self.capacity[-1][1] != in_service:
            self.capacity.append((self.now, in_service))
        if self.domains and self.controller is not None and self.controller.active:
            serving = {n.name for n in self.nodes if not n.out(self.now)}
            drivers = {n.name: "new" if n.upgraded else "old" for n in self.nodes}
            self.mixed_max = max(self.mixed_max, mixed_domains(self.domains, drivers, serving))
            whole = whole_in_service(self.domains, serving)
            self.whole_min = whole if self.whole_min is None else min(self.whole_min, whole)

    # -- scheduling ------------------------------------------------------------------------------
    def nodes_changed(self) -> None:
        self.record_capacity()

    def node_changed(self, node: SimNode, key: str) -> None:
        if key == "free":
            if 0 < node.free < node.gpus:
                self.partial.add(node.__dict__["_pos"])
            else:
                self.partial.discard(node.__dict__["_pos"])
        else:
            self._weight_floor = None

    def weight_floor(self) -> int:
        if self._weight_floor is None:
            self._weight_floor = min((n.weight for n in self.nodes), default=1)
        return self._weight_floor

    def _fits(self, node: SimNode, job: SimJob) -> bool:
        return (node.out_since is None and not node.drained and not node.down and node.free >= job.gpn
                and self.now + job.limit <= node.reserved_from)

    def _place(self, job: SimJob) -> list[int] | None:
        """Lowest Weight first (as Slurm's select plugin does), then best fit; ties to the first node.
        Exactly the pass over every node it replaces (`_place_by_scan`, the tests compare both), without
        that pass where it can stop early: the nodes partly in use are looked at first, then the empty
        ones in order until one has the lowest Weight any node has (none after it can do better)."""
        if job.gpn < 1:  # a job of no GPUs fits full nodes too, which the index does not hold
            return self._place_by_scan(job)
        nodes, floor = self.nodes, self.weight_floor()
        if job.nodes == 1:
            best: tuple[int, int, int] | None = None
            for i in self.partial:
                n = nodes[i]
                if self._fits(n, job) and (best is None or (n.weight, n.free, i) < best):
                    best = (n.weight, n.free, i)
            if best is None or best[0] > floor:  # an empty node of a lower Weight may still win
                for i, n in enumerate(nodes):
                    if n.free == n.gpus and self._fits(n, job):
                        if best is None or (n.weight, n.free, i) < best:
                            best = (n.weight, n.free, i)
                        if n.weight == floor:
                            break
            return None if best is None else [best[2]]
        picked: list[int] = []
        for i, n in enumerate(nodes):  # the first job.nodes empty nodes of the lowest Weight, if there are
            if n.weight == floor and n.free == n.gpus and self._fits(n, job):
                picked.append(i)
                if len(picked) == job.nodes:
                    return picked
        return self._place_by_scan(job)

    def _place_by_scan(self, job: SimJob) -> list[int] | None:
        """Every node looked at (the placement `_place` shortens)."""
        if job.nodes == 1:
            best: tuple[tuple[int, int], int] | None = None
            for i, n in enumerate(self.nodes):
                if self._fits(n, job):
                    key = (n.weight, n.free)
                    if best is None or key < best[0]:
                        best = (key, i)
            return None if best is None else [best[1]]
        picked = [i for i, n in enumerate(self.nodes) if n.free == n.gpus and self._fits(n, job)]
        picked.sort(key=lambda i: self.nodes[i].weight)
        return picked[: job.nodes] if len(picked) >= job.nodes else None

    def _start(self, job: SimJob, placed: list[int]) -> None:
        job.start = self.now
        job.placed = placed
        for i in placed:
            n = self.nodes[i]
            n.free -= job.gpn
            n.running[job.id] = self.now + job.limit
        self.queue.remove(job)
        self.push(self.now + self._restart(job) + job.run - job.saved, "end", (job, job.gen))

    def _restart(self, job: SimJob) -> float:
        """The part of this run of the job that makes no progress: a requeued run's restart."""
        return self.restart_s if job.gen > 0 else 0.0

    def progress(self, job: SimJob) -> float:
        """Seconds of the job's work done, kept or not, at this moment."""
        if job.start is None:
            return job.saved
        return job.saved + max(0.0, self.now - job.start - self._restart(job))

    def stop(self, job: SimJob, requeue: bool, failed: bool = False) -> None:
        """A running job stopped early (by the rollout, or `failed`: its node failed): it loses its work
        since its last checkpoint; requeued, it waits again in its place by submit time and resumes from
        that checkpoint."""
        if job.start is None:
            return
        elapsed = self.now - job.start
        done = max(0.0, elapsed - self._restart(job))  # its progress in this run
        kept = 0.0
        if job.signalled is not None:
            kept = max(0.0, job.signalled - job.start - self._restart(job))
        elif self.checkpoint_every_s:
            kept = math.floor(done / self.checkpoint_every_s) * self.checkpoint_every_s
        lost = (elapsed - kept) * job.gpn * len(job.placed)
        if failed:
            self.failed_work_gpu_s += lost
            self.jobs_failed += 1
        else:
            if job.start + job.run - job.saved <= self.in_time_by:
                self.touched_in_time += 1
            self.lost_work_gpu_s += lost
            self.preempted += 1
        for i in job.placed:
            n = self.nodes[i]
            n.free += job.gpn
            n.running.pop(job.id, None)
        job.saved += kept
        job.gen += 1
        job.start, job.placed, job.signalled = None, [], None
        if requeue:
            at = next((k for k, q in enumerate(self.queue) if q.submit > job.submit), len(self.queue))
            self.queue.insert(at, job)

    def _end(self, job: SimJob) -> None:
        for i in job.placed:
            n = self.nodes[i]
            if n.upgrading_until is not None or (self.controller and self.controller.upgrading(n.name)):
                self.killed += 1  # never expected: upgrades wait for empty nodes
            n.free += job.gpn
            n.running.pop(job.id, None)

    def _shadow(self, job: SimJob) -> float:
        """Earliest time the blocked head job could start, from running jobs' time limits (EASY backfill)."""
        times = []
        for n in self.nodes:
            if (n.out_since is not None and n.upgrading_until is None and n.reserved_from <= self.now) or n.drained:
                continue
            need = job.gpn if job.nodes == 1 else n.gpus
            if n.free >= need:
                t = self.now
            else:
                freed = n.free
                t = INF
                for end in sorted(n.running.values()):
                    freed += self._gpn_of(n, end)
                    if freed >= need:
                        t = end
                        break
            if t + job.limit <= n.reserved_from or n.upgraded:
                times.append(t)
        times.sort()
        k = job.nodes if job.nodes > 1 else 1
        return times[k - 1] if len(times) >= k else INF

    def _gpn_of(self, node: SimNode, end: float) -> int:
        for jid, e in node.running.items():
            if e == end:
                return self.by_id[jid].gpn
        return 0

    def _schedule(self, only: SimJob | None = None) -> None:
        if only is not None and self.queue and self.queue[0] is not only:
            # a new job behind a blocked queue: it may only backfill
            shadow = self._shadow(self.queue[0])
            if self.now + only.limit <= shadow:
                placed = self._place(only)
                if placed:
                    self._start(only, placed)
            return
        shadow: float | None = None
        for job in list(self.queue[:BACKFILL_DEPTH]):
            if shadow is not None and self.now + job.limit > shadow:
                continue
            placed = self._place(job)
            if placed:
                self._start(job, placed)
            elif shadow is None:
                shadow = self._shadow(job)


class Controller:
    """A rollout strategy driving the simulated nodes."""

    active = False
    finished = False
    started = False

    def __init__(self, budget: int, upgrade_s: float):
        self.budget = budget
        self.upgrade_s = upgrade_s
        self.started_at = 0.0
        self.done_at = 0.0
        self.waves: list[dict[str, Any]] = []
        self.gating: list[dict[str, Any]] = []

    def start(self, sim: Simulator) -> None:
        self.active = self.started = True
        self.started_at = sim.now

    def on_change(self, sim: Simulator, freed: list[str] | None = None) -> None:
        """A job ended (`freed`: its nodes) or a node failed (None)."""
        if self.started and not self.finished:
            self._upgrade_empty(sim)
            self.advance(sim)

    def on_tick(self, sim: Simulator, payload: Any) -> None:
        kind, node = payload
        if self.finished:
            return
        if kind == "upgraded":
            n = sim.nodes[node]
            n.upgrading_until = None
            n.upgraded = True
            self.release(sim, node)
        self._upgrade_empty(sim)
        self.advance(sim)

    def advance(self, sim: Simulator) -> None:
        """After any event once the rollout runs: the strategy takes its next nodes."""

    def stopped(self, sim: Simulator) -> None:
        """The replay reached its stop (`Simulator.until`) with this rollout still going."""

    def upgrading(self, name: str) -> bool:
        return False

    def release(self, sim: Simulator, i: int) -> None:
        n = sim.nodes[i]
        n.out_since = None
        n.reserved_from = INF
        n.weight = 1
        sim.record_capacity()

    def take(self, sim: Simulator, i: int, from_t: float) -> None:
        n = sim.nodes[i]
        n.reserved_from = from_t
        if from_t <= sim.now:
            n.out_since = sim.now
            sim.record_capacity()
        else:
            sim.push(from_t, "tick", ("reservation", i))

    def _upgrade_empty(self, sim: Simulator) -> None:
        for i, n in enumerate(sim.nodes):
            # like `maintain apply`: a node of the current wave is taken when its reservation starts, or
            # earlier if it already sits empty
            if (n.reserved_from <= sim.now or (n.reserved_from < INF and not n.running)) \
                    and n.out_since is None and not n.upgraded:
                n.out_since = sim.now
                sim.record_capacity()
            if n.out_since is not None and n.upgrading_until is None and not n.running and not n.upgraded:
                n.upgrading_until = sim.now + self.upgrade_s
                n.free = n.gpus
                sim.push(n.upgrading_until, "tick", ("upgraded", i))


# a running rollout's nodes it is through with: no job ending on them changes what it does next
SETTLED = frozenset({NodeState.DONE, NodeState.FAILED, NodeState.SKIPPED})


class GpufleetController(Controller):
    """`maintain apply` itself: the planner's plan, then the engine's steps against the simulated Slurm
    (SimSlurm) on the simulated clock.  No rollout decision is made here."""

    # False: step on every job end, as before event-driven replays (bench/simulate_speed.py compares both)
    event_driven = True

    def __init__(self, budget: int, upgrade_s: float, policy: Policy, target: str | None = "580.159.04",
                 deadline: float | None = None, kernel: str | None = None, firmware: dict[str, str] | None = None):
        super().__init__(budget, upgrade_s)
        self.policy = policy
        self.target = target
        self.kernel, self.firmware = kernel, firmware
        self.deadline = deadline
        self.same_time_steps = 0
        self.step_queued = False  # a "step" event is due at the current time
        self.settled: set[str] = set()
        self.steps = self.skipped_steps = 0
        self.state: str | None = None  # the rollout's final state (done, halted, aborted)

    def start(self, sim: Simulator) -> None:
        import tempfile
        from dataclasses import replace

        from ..maintain.reconcile import Engine
        from ..maintain.store import Store

        super().start(sim)
        fleet = FleetState(
            nodes={n.name: FleetNode(name=n.name, partitions=["gpu"], driver="570.172.08", cuda="12.8",
                                     gpus=f"{n.gpus}x{n.model}", firmware="96.00.A5.00.1A", verdict="ok")
                   for n in sim.nodes},
            jobs=SimSlurm(sim).running_jobs(), taken_at=sim.now)
        plan = make_plan(fleet, self.target, [n.name for n in sim.nodes], self.policy, now=sim.now, force=True,
                         deadline=self.deadline, domains=sim.domains, kernel=self.kernel, firmware=self.firmware)
        self.gating = plan.gating_jobs
        self.tmp = tempfile.TemporaryDirectory(prefix="gpufleet-sim-")
        template = f"{self.tmp.name}/upgrade.j2"
        with open(template, "w") as fh:
            fh.write(SimExecutor.TEMPLATE)
        policy = replace(self.policy, maintain=replace(self.policy.maintain, upgrade_template=template))
        self.store = Store(f"{self.tmp.name}/maintain.db")
        self.slurm = SimSlurm(sim)
        self.executor = SimExecutor(sim, self.upgrade_s)
        self.engine = Engine(self.store, self.slurm, policy, self.executor, clock=lambda: sim.now)
        self.plan = plan.to_dict()
        self.rid = plan.id
        self.store.create_rollout(self.plan, at=sim.now)
        self.step(sim)

    def upgrading(self, name: str) -> bool:
        return self.started and name in self.executor.active

    def stopped(self, sim: Simulator) -> None:
        if self.started and self.active:
            self._close()

    def _close(self) -> None:
        """The waves as far as they ran, read from the store; then the store and its files go."""
        self.waves = self._waves()
        self.store.close()
        self.tmp.cleanup()

    def on_change(self, sim: Simulator, freed: list[str] | None = None) -> None:
        if not self.started or self.finished or self.step_queued:
            return  # (a step queued for now comes after this change and sees it)
        if freed is not None and self.event_driven and self.policy.maintain.gate != "evidence" \
                and self.settled.issuperset(freed):
            # a job ended normally on nodes the running rollout is through with: nothing the engine reads
            # about the nodes it still has to move changed, so the step it would make is skipped, not
            # computed.  A failure always steps.  An evidence gate is judged at every step on the
            # node-hours and events accumulated by then (apply polls it every poll_s): with one, every
            # event steps, as before.
            self.skipped_steps += 1
            return
        self.step(sim)

    def on_tick(self, sim: Simulator, payload: Any) -> None:
        kind, data = payload
        if kind == "upgraded":
            self.executor.complete(*data)
        if self.finished:
            return
        if kind == "step":
            self.step_queued = False
            self.step(sim)
        else:
            # a slot that begins, a command or validation job that ends: at 12,500 nodes a wave's slots
            # begin, and its commands end, in the same second by the hundred.  One step after all of
            # them (apply's next poll sees them together), not one per node
            self._queue_step(sim)

    def _queue_step(self, sim: Simulator) -> None:
        """A step at this time, after the events already due now (the queue orders equal times by arrival)."""
        if not self.step_queued:
            self.step_queued = True
            sim.push(sim.now, "step", None)

    def step(self, sim: Simulator) -> None:
        from ..maintain import states as S

        state = self.engine.step(self.rid)
        self.steps += 1
        # the nodes this running rollout is through with (done, failed, skipped): job ends there can wait
        self.settled = {n for n, st in self.engine.states.items() if st in SETTLED} \
            if state == S.R_RUNNING else set()
        if state in (S.R_DONE, S.R_HALTED, S.R_ABORTED):
            self.state = str(state)
            self.finished, self.active = state == S.R_DONE or not self.engine.running(), False
            self.done_at = sim.now
            self._close()
            return
        last = self.engine.stats[-1]
        if last.moves or last.writes or last.reservations:  # what one step changed, the next reads: step now
            self.same_time_steps += 1
            if self.same_time_steps > 10_000:
                raise RuntimeError("the engine does not converge")
            self._queue_step(sim)
        else:
            self.same_time_steps = 0

    def _waves(self) -> list[dict[str, Any]]:
        """The plan's waves as they ran: when their nodes' slots began, first upgrade, last validation."""
        rows = {r["node"]: r for r in self.store.nodes(self.rid)}
        events: dict[str, dict[str, float]] = {}
        for e in self.store.db.query("select node, event, ts from audit where rollout = ? and node is not null",
                                     [self.rid]):
            events.setdefault(e["node"], {}).setdefault(e["event"], e["ts"])
        out = []
        for w in self.plan["waves"]:
            slots = [rows[n]["slot"] for n in w["nodes"] if rows.get(n) and rows[n]["slot"] is not None]
            starts = [events.get(n, {}).get("upgrading") for n in w["nodes"]]
            ends = [events.get(n, {}).get("done") for n in w["nodes"]]
            starts = [t for t in starts if t is not None]
            ends = [t for t in ends if t is not None]
            out.append({"wave": w["index"], "nodes": len(w["nodes"]),
                        "reserve_at": min(slots) if slots else None, "start": min(starts) if starts else None,
                        "end": max(ends) if len(ends) == len(w["nodes"]) else None})
        return out


class RebootAsapController(Controller):
    """`scontrol reboot ASAP` over a node list, at most `budget` at a time, in name order."""

    def start(self, sim: Simulator) -> None:
        super().start(sim)
        self.todo = sorted(range(len(sim.nodes)), key=lambda i: sim.nodes[i].name)
        self.advance(sim)

    def advance(self, sim: Simulator) -> None:
        busy = sum(1 for n in sim.nodes if n.out_since is not None and not n.upgraded)
        while self.todo and busy < self.budget:
            self.take(sim, self.todo.pop(0), sim.now)  # drains at once: no new jobs, running ones finish
            busy += 1
        if not self.todo and busy == 0:
            self.finished, self.active, self.done_at = True, False, sim.now



class WaitThenKillController(Controller):
    """What an upgrade controller's drain timeout does: a rolling drain within the budget, nodes in name
    order, waiting for their jobs; at the latest moment that still lets the nodes left be upgraded by the
    deadline, `budget` at a time, every job still on them is killed (and requeued)."""

    def __init__(self, budget: int, upgrade_s: float, deadline: float):
        super().__init__(budget, upgrade_s)
        self.deadline = deadline
        self.killed_at: float | None = None
        self.ticks: set[float] = set()

    def start(self, sim: Simulator) -> None:
        super().start(sim)
        self.todo = sorted(range(len(sim.nodes)), key=lambda i: sim.nodes[i].name)
        self.advance(sim)

    def advance(self, sim: Simulator) -> None:
        left = sum(1 for n in sim.nodes if not n.upgraded)
        kill_at = self.deadline - math.ceil(left / self.budget) * self.upgrade_s
        if self.killed_at is None and left and sim.now >= kill_at:
            self.killed_at = sim.now
            for n in sim.nodes:
                if not n.upgraded:
                    n.drained = True  # no new job may start on what is left
                    for jid in list(n.running):
                        sim.stop(sim.by_id[jid], requeue=True)
            sim.record_capacity()
        elif self.killed_at is None and left and kill_at not in self.ticks:
            self.ticks.add(kill_at)
            sim.push(kill_at, "tick", ("kill", None))
        busy = sum(1 for n in sim.nodes if n.out_since is not None and not n.upgraded)
        while self.todo and busy < self.budget:
            self.take(sim, self.todo.pop(0), sim.now)
            busy += 1
        self._upgrade_empty(sim)
        if not self.todo and busy == 0 and all(n.upgraded for n in sim.nodes):
            self.finished, self.active, self.done_at = True, False, sim.now

    def release(self, sim: Simulator, i: int) -> None:
        super().release(sim, i)
        sim.nodes[i].drained = False


class DrainAllController(Controller):
    """Drain every node, upgrade each when it empties, resume them all at the end."""

    def start(self, sim: Simulator) -> None:
        super().start(sim)
        for i in range(len(sim.nodes)):
            self.take(sim, i, sim.now)
        self._upgrade_empty(sim)

    def release(self, sim: Simulator, i: int) -> None:
        if all(n.upgraded for n in sim.nodes):
            for j in range(len(sim.nodes)):
                Controller.release(self, sim, j)
            self.finished, self.active, self.done_at = True, False, sim.now


def time_limits_label(trace: Trace, assumption: str) -> str:
    known, total = trace.limits_known, len(trace.jobs)
    if known == total and total:
        return "from the history"
    if known == 0:
        return f"assumed: {assumption}"
    return f"from the history for {known} of {total} jobs; assumed for the rest: {assumption}"


def sim_jobs(trace: Trace, gpus_per_node: int, assumption: str) -> tuple[list[SimJob], Counter]:
    jobs: list[SimJob] = []
    dropped: Counter = Counter()
    for j in trace.jobs:
        nodes = max(j.nodes, math.ceil(j.gpus / gpus_per_node))
        gpn = gpus_per_node if nodes > 1 else j.gpus
        if gpn > gpus_per_node:
            dropped["more GPUs per node than the fleet has"] += 1
            continue
        limit = j.time_limit_s if j.time_limit_s is not None else assume_limit(j.run_s, assumption)
        run = min(j.run_s, limit)  # Slurm ends a job at its limit
        jobs.append(SimJob(j.job_id, j.submit, max(run, 1.0), limit, nodes, gpn))
    return jobs, dropped


def budget_of(spec: int | str, nodes: int) -> int:
    """A rollout's budget over `nodes`: the planner's rule (amounts.count_of)."""
    from ..common.amounts import count_of

    return count_of(spec, nodes, round_up=True)


def simulate(trace: Trace, *, nodes: int, gpus_per_node: int, strategies: tuple[str, ...], rollout_at_h: float,
             max_unavailable: int | str, policy: Policy, assumption: str, upgrade_minutes: int | None = None,
             deadline_h: float | None = None, checkpoint_every_h: float | None = None,
             domain_size: int | None = None, target: str | None = "580.159.04", kernel: str | None = None,
             firmware: dict[str, str] | None = None, rates: Rates | None = None, seed: int = 0, jobs: int = 1,
             progress: Callable[[int, int, str], None] | None = None, hours: float | None = None) -> dict[str, Any]:
    """`target`, `kernel`, `firmware`: what the engine's plan rolls out (gpufleet; the baselines upgrade
    a node in `upgrade_minutes` whatever it is).  `rates`: node failures and soft events from the
    rollout's start on, the same draws (`seed`) in every run, the baseline's too (failures.py).  `jobs`: the
    strategies' replays in that many processes (pool.py); `progress` hears of each one finished.  `hours`:
    every replay (the baseline's too) stops that long after the rollout's start, whatever is left: a week
    of a large fleet without replaying the whole history after it."""
    from dataclasses import replace

    upgrade_s = 60.0 * (upgrade_minutes or policy.maintain.upgrade_minutes)
    budget = budget_of(max_unavailable, nodes)
    settings: MaintainSettings = replace(policy.maintain, max_unavailable=budget,
                                         upgrade_minutes=int(upgrade_s // 60))
    sim_policy = replace(policy, maintain=settings)
    # without failures an evidence gate has no events to judge and would only wait out its soak: the
    # replay then gates on validation (the gate's figures come from the --seeds trials, trials.py)
    replay_policy = sim_policy if rates else replace(policy, maintain=replace(settings, gate="validated"))
    base_jobs, dropped = sim_jobs(trace, gpus_per_node, assumption)
    rollout_at = rollout_at_h * 3600
    until = rollout_at + hours * 3600 if hours else INF

    def with_hazards(sim: Simulator) -> Simulator:
        sim = _with_hazards(sim, rates, seed, rollout_at)
        sim.until = until
        return sim

    every_s = checkpoint_every_h * 3600 if checkpoint_every_h else None
    if every_s:  # what each job says of itself in its Slurm comment (maintain/deadline.py)
        for j in base_jobs:
            j.comment = f"gpufleet:checkpoint_every={checkpoint_every_h:g}h"
    baseline = with_hazards(Simulator(_copy(base_jobs), nodes, gpus_per_node))
    # the baseline is what the replays are measured against (and the deadline's lower bound): without
    # them (--no-replay) it is not run
    replays = bool(strategies) or deadline_h is not None
    if replays:
        baseline.run()
    base_wait = waits(baseline.jobs, until) if replays else {}
    # the load as the rollout starts, as the history ran it (failures requeue jobs and move later starts);
    # for the trials alone, the history up to the rollout's start is all there is to run
    unfailed = baseline
    if rates or not replays:
        unfailed = Simulator(_copy(base_jobs), nodes, gpus_per_node)
        unfailed.until = until if replays else rollout_at
        unfailed.run()
    deadline = rollout_at + deadline_h * 3600 if deadline_h else None
    lower_bound = None
    if deadline is not None:
        # jobs running at the rollout that would still run when the last nodes must start: each loses at
        # least its work since its last checkpoint at the rollout, whatever is done
        lower_bound = sum(
            (rollout_at - j.start - (math.floor((rollout_at - j.start) / every_s) * every_s if every_s else 0.0))
            * j.gpn * j.nodes for j in baseline.jobs
            if j.start is not None and j.start <= rollout_at < j.start + j.run
            and j.start + j.run > deadline - upgrade_s) / 3600
    common = dict(base_jobs=base_jobs, nodes=nodes, gpus_per_node=gpus_per_node, budget=budget, upgrade_s=upgrade_s,
                  policy=replay_policy, target=target, deadline=deadline, kernel=kernel, firmware=firmware,
                  rates=rates, seed=seed, rollout_at=rollout_at, domain_size=domain_size, every_s=every_s,
                  base_wait=base_wait, until=until)
    if jobs <= 1 or len(strategies) <= 1:  # the replays run here: each says how far it is as it goes
        common["progress"] = progress
    # each strategy's replay is independent of the others: side by side in processes when `jobs` > 1
    results: dict[str, StrategyResult] = dict(zip(strategies, in_pool(
        [functools.partial(replay_strategy, name, **common) for name in strategies], jobs, progress,
        "strategy replays"), strict=True))
    extra: dict[str, Any] = {}
    if deadline is not None:
        extra["work_lost_lower_bound_gpu_h"] = round(lower_bound or 0.0, 3)
        extra["deadline_h"] = deadline_h
    if hours:
        extra["hours"] = hours
        extra["stopped"] = (f"every replay (the baseline's too) stopped {hours:g} h after the rollout's start; a job "
                            "still waiting then counts its wait until then in wait_added")
    return {
        **extra,
        "strategies": {k: r.metrics() for k, r in results.items()},
        "assumptions": {
            "time_limits": time_limits_label(trace, assumption),
            "fleet": f"{nodes} nodes x {gpus_per_node} GPUs", "rollout_at_h": rollout_at_h,
            "max_unavailable_nodes": budget, "upgrade_minutes": upgrade_s / 60,
            **({"domains": f"{domain_size} consecutive nodes each; mixed = nodes in service on two drivers",
                "whole_domain": settings.whole_domain,
                "max_unavailable_domains": settings.max_unavailable_domains} if domain_size else {}),
            "scheduler": f"priority FIFO by submit time + EASY backfill (depth {BACKFILL_DEPTH}) respecting "
                         "time limits and reservations; multi-node jobs take whole nodes",
            "wait_added": "per job: wait with the rollout - wait without it, jobs submitted from 7 days before "
                          "the rollout on",
            "jobs_used": len(base_jobs), "jobs_dropped": dict(dropped), "lines_skipped": dict(trace.skipped),
            **({"failures": {"failure_per_1000_node_days": rates.failure_rate, "soft_per_node_day": rates.soft_rate,
                             "driver_effect": rates.driver_effect, "repair_h": rates.repair_h, "seed": seed,
                             "from": "the rollout's start to the replay's end, in every run (the baseline's "
                                     "too); *_in_rollout: while the rollout ran",
                             "failed_jobs": "end NODE_FAIL and are requeued (Slurm's JobRequeue=1)",
                             "gate": replay_policy.maintain.gate}} if rates else {}),
        },
        "_results": results,
        # the load as the rollout starts (simulators/trials.py runs the engine on it under random failures)
        "_running": [j for j in unfailed.jobs if j.start is not None and j.start <= rollout_at < j.start + j.run],
        "_policy": sim_policy,
    }


def replay_strategy(name: str, *, base_jobs: list[SimJob], nodes: int, gpus_per_node: int, budget: int,
                    upgrade_s: float, policy: Policy, target: str | None, deadline: float | None,
                    kernel: str | None, firmware: dict[str, str] | None, rates: Rates | None, seed: int,
                    rollout_at: float, domain_size: int | None, every_s: float | None,
                    base_wait: dict[str, float], until: float = INF,
                    progress: Callable[[int, int, str], None] | None = None) -> StrategyResult:
    """One strategy's replay of the history from the rollout's start (a process of its own under --jobs)."""
    if name == "gpufleet":
        ctl: Controller = GpufleetController(budget, upgrade_s, policy, target, deadline=deadline,
                                             kernel=kernel, firmware=firmware)
    elif name == "wait-then-kill":
        if deadline is None:
            raise ValueError("the wait-then-kill strategy needs a deadline (--deadline)")
        ctl = WaitThenKillController(budget, upgrade_s, deadline)
    elif name == "reboot-asap":
        ctl = RebootAsapController(budget, upgrade_s)
    elif name == "drain-all":
        ctl = DrainAllController(budget, upgrade_s)
    else:
        raise ValueError(f"unknown strategy {name!r} (one of {', '.join(COMPARED)})")
    sim = _with_hazards(Simulator(_copy(base_jobs), nodes, gpus_per_node), rates, seed, rollout_at)
    sim.budget = budget
    if domain_size:
        sim.domains = consecutive([n.name for n in sim.nodes], domain_size)
    sim.checkpoint_every_s = every_s
    if deadline is not None:
        sim.in_time_by = deadline - upgrade_s
    sim.until = until
    if progress is not None:
        def watch(s: Simulator) -> None:
            if s.now < rollout_at:
                return
            # how far in simulated hours, or how many nodes are through (short of all: the history after
            # the rollout replays on, and a finished count would be said every second)
            if until < INF:
                span = max(1, round((until - rollout_at) / 3600))
                progress(min(span - 1, int((s.now - rollout_at) / 3600)), span, f"{name} replay, simulated hours")
            elif (through := sum(n.upgraded for n in s.nodes)) < nodes:
                progress(through, nodes, f"{name} replay, nodes upgraded")
        sim.watch = watch
    sim.run(ctl, rollout_at)
    if until != INF and not ctl.finished:
        ctl.stopped(sim)
    added = sorted(wait - base_wait[job] for job, wait in waits(sim.jobs, until).items()
                   if job in base_wait and sim.by_id[job].submit >= rollout_at - 7 * 86400)
    p95 = added[min(len(added) - 1, int(0.95 * len(added)))] if added else 0.0
    cap = [((t - rollout_at) / 3600, g) for t, g in sim.capacity]
    return StrategyResult(
        makespan_h=(ctl.done_at - ctl.started_at) / 3600 if ctl.finished else INF,
        gpu_hours_lost=sim.lost_gpu_s / 3600, jobs_killed=sim.killed,
        wait_added_mean_h=(sum(added) / len(added) / 3600) if added else 0.0, wait_added_p95_h=p95 / 3600,
        peak_nodes_out=sim.peak_out, over_budget=sim.over_budget, node_drain_hours=sim.out_node_s / 3600,
        capacity=cap,
        waves=[{**w, **{k: (None if w[k] is None else round((w[k] - rollout_at) / 3600, 3))
                        for k in ("reserve_at", "start", "end")}} for w in ctl.waves],
        gating_jobs=[{**g, "end_h": None if g["end"] is None else round((g["end"] - rollout_at) / 3600, 2)}
                     for g in ctl.gating],
        work_lost_gpu_h=sim.lost_work_gpu_s / 3600, jobs_preempted=sim.preempted,
        done_by_deadline=None if deadline is None else bool(ctl.finished and ctl.done_at <= deadline),
        touched_in_time=sim.touched_in_time,
        domains=len(sim.domains.members) if sim.domains else None, mixed_driver_domains_max=sim.mixed_max,
        domains_in_service_min=sim.whole_min if sim.whole_min is not None else 0,
        failures=None if sim.hazards is None else failure_figures(sim, ctl, name == "gpufleet"),
        stopped_at_h=None if until == INF else round((until - rollout_at) / 3600, 3),
        nodes_upgraded=sum(n.upgraded for n in sim.nodes))


def waits(jobs: list[SimJob], until: float = INF) -> dict[str, float]:
    """Each job's wait from submit to start.  In a replay cut at `until`, a job submitted by then that has
    not started counts its wait until then (censored: what it waited at least), so a strategy that holds
    jobs back past the stop is not measured on the jobs it let through alone."""
    if until == INF:
        return {j.id: j.start - j.submit for j in jobs if j.start is not None}
    return {j.id: min(j.start if j.start is not None else INF, until) - j.submit for j in jobs if j.submit <= until}


def _with_hazards(sim: Simulator, rates: Rates | None, seed: int, rollout_at: float) -> Simulator:
    """Failures and soft events from the rollout's start, the same draws (`seed`) in every run."""
    if rates:
        sim.hazards, sim.hazards_from = Hazards(rates, seed), rollout_at
        publish_summaries(sim.nodes, "570.172.08")  # the driver GpufleetController's plan starts from
    return sim


def failure_figures(sim: Simulator, ctl: Controller, engine: bool) -> dict[str, Any]:
    """What the draws did, from the rollout's start to the replay's end, and while the rollout ran."""
    h = sim.hazards
    end = ctl.done_at if ctl.finished else INF
    during = [t for t in h.failed_at if ctl.started_at <= t <= end]
    jobs_during = sum(1 for _, state, _, t in sim.ended if state == "NODE_FAIL" and ctl.started_at <= t <= end)
    return {"node_failures": h.node_failures, "jobs_failed": sim.jobs_failed,
            "work_lost_gpu_h": round(sim.failed_work_gpu_s / 3600, 3), "soft_events": h.soft_events,
            "node_failures_in_rollout": len(during), "jobs_failed_in_rollout": jobs_during,
            **({"rollout": getattr(ctl, "state", None)} if engine else {})}


def _copy(jobs: list[SimJob]) -> list[SimJob]:
    return [SimJob(j.id, j.submit, j.run, j.limit, j.nodes, j.gpn, comment=j.comment) for j in jobs]


class SimFleet:
    """The engine alone on an in-memory fleet: nodes, running jobs that end at their limits, upgrades that
    take `upgrade_s`, a clock moved by hand.  For benchmarks and tests of the engine at any fleet size
    (the job scheduler of `maintain simulate` is left out: no new jobs arrive)."""

    def __init__(self, nodes: int, gpus: int = 8, now: float = 1_800_000_000.0):
        self.sim = Simulator([], nodes, gpus)
        self.sim.now = now
        self.slurm = SimSlurm(self.sim)
        self.gpn: dict[str, int] = {}

    def add_job(self, job_id: str, node: int | list[int], gpus: int, end: float, *, start: float | None = None,
                comment: str = "") -> None:
        placed = [node] if isinstance(node, int) else list(node)
        start = self.sim.now if start is None else start
        self.sim.by_id[job_id] = SimJob(job_id, start, end - start, end - start, len(placed), gpus, start=start,
                                        placed=placed, comment=comment)
        for i in placed:
            n = self.sim.nodes[i]
            n.free -= gpus
            n.running[job_id] = end
        self.gpn[job_id] = gpus

    def fleet_state(self, driver: str = "570.172.08"):
        nodes = {n.name: FleetNode(name=n.name, partitions=["gpu"], driver=driver, gpus=f"{n.gpus}x{n.model}",
                                   firmware="96.00.A5.00.1A", verdict="ok", flags=["DRAIN"] if n.drained else [],
                                   reason=n.reason) for n in self.sim.nodes}
        return FleetState(nodes, self.slurm.running_jobs(), [], self.sim.now)

    def advance(self, to: float, executor: SimExecutor) -> None:
        """Move the clock: upgrades due complete, jobs due end."""
        events = self.sim.events
        while events and events[0][0] <= to:
            t, _, kind, payload = heapq.heappop(events)
            self.sim.now = max(self.sim.now, t)
            if kind == "upgraded":
                executor.complete(*payload)
        self.sim.now = to
        for n in self.sim.nodes:
            for jid, end in list(n.running.items()):
                if end <= to:
                    del n.running[jid]
                    n.free += self.gpn.get(jid, 0)
