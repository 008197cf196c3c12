"""The discrete-event job simulator under every what-if run: jobs and nodes, a scheduler close to
Slurm's (priority FIFO by submit time plus backfill that respects time limits and maintenance
reservations), and the Controller a strategy (or the fault simulator) plugs into it."""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..slurm.domains import Domains, mixed_domains, whole_in_service
from .failures import (
    REPAIR_REASON,
    Hazards,
    end_repairs,
    failure_now,
    hazard_step,
    next_failure_in,
)

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


