"""The rollout strategies `maintain simulate` compares: the engine itself (GpufleetController: the
planner's plan and `maintain apply`'s steps on the simulated Slurm) and the hand-written baselines (reboot
as soon as possible, wait then kill, drain all)."""

from __future__ import annotations

import math
from typing import Any

from ..maintain.fleet import FleetNode, FleetState
from ..maintain.planner import make_plan
from ..maintain.states import NodeState
from ..policy import Policy
from .jobsim import Controller, Simulator
from .simslurm import SimExecutor, SimSlurm

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


