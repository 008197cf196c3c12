"""The rollout reconciler: one step that `apply`, `resume`, `abort`, `rollback` and `simulate` drive.

A step reads the fleet once (world.py: nodes, running jobs, reservations, and the validation jobs while a
node is in `testing`; every read counted), lets one unit per node state decide each node's next move and
the Slurm state it wants (units.py), admits waiting nodes by the rolling window and reserves their slots
(schedule.py), records the moves in one transaction, then makes the Slurm changes as batched calls through
the actuator (writes.py, slurm/actuator.py) and starts the site's commands in a bounded pool
(executor.py).  Every unit repeats its work idempotently from what Slurm shows, so a crash at any point
followed by `resume` converges.

Upgrades run each with its own timeout.  A node is back when it has rebooted (boot time changed, or slurmd
registered again after the command began) and responds; it is validated from what its own health check
published after that reboot (driver == target, verdict ok or warn).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..policy import Policy
from ..slurm import effects as E
from ..slurm.actuator import make_actuator
from ..slurm.base import SlurmError
from ..slurm.domains import FROM_SLURM
from ..slurm.ownership import MAINTAIN, ROLLOUT_RESERVATION_PREFIX
from ..slurm.reasons import same
from . import states as S
from .executor import Executor
from .gate import step as gate_step
from .plan import Plan
from .preempt import preempt
from .schedule import (
    PUSH_LOOKAHEAD_S,
    admit,
    admit_back,
    boundary,
    firmly_out,
    held,
    max_failures,
    plan_slots,
    postpone_slots,
    slot_reservations,
    soak_of,
)
from .store import Store
from .strategy import strategy as strategy_named
from .units import UNITS, Leave, Outcome, Pending, StepView, Unit, move
from .world import CountedReads, World, read_world, validation_job_name
from .writes import Writes

BACK_SOON = frozenset({S.UPGRADING, S.ROLLING_BACK, S.RETURNING, S.VALIDATING})
MAX_SETTLE = len(S.NODE_STATES)  # a node moves at most this often in one step (the table has no cycle)
# states whose unit may move a node on its own (the others move only by the window, or an admin's action)
ADVANCING = frozenset(s for s, u in UNITS.items() if type(u).advance is not Unit.advance)


@dataclass
class StepStats:
    reads: int
    writes: int            # the capped ones (max_slurm_writes_per_step)
    cpu_s: float
    moves: int
    reservations: int = 0  # new reservations (never capped: writes.UNCAPPED)


LATE_PLAN_S = 120.0  # a plan applied later than this after its first slot is scheduled again from now


class _Moves:
    """What one pass decided, for the store: moves and notes per node, audits, events, commands, jobs."""

    def __init__(self) -> None:
        self.changes: list[tuple[str, str | None, str, dict[str, Any]]] = []
        self.audits: list[tuple[str | None, str, str]] = []
        self.events: list[tuple[str | None, str]] = []
        self.launch: list[tuple[str, str, float]] = []
        self.submit: list[tuple[str, str, str]] = []
        self.count = 0


class Engine:
    def __init__(self, store: Store, slurm: Any, policy: Policy, executor: Executor | None,
                 clock: Callable[[], float] = time.time,
                 on_event: Callable[[str, str | None, str, dict[str, int]], None] | None = None):
        self.store = store
        self.slurm = slurm
        self.actuator = make_actuator(slurm, MAINTAIN)   # the engine's one write power
        self.policy = policy
        self.s = policy.maintain
        self.executor = executor
        self.clock = clock
        self.on_event = on_event or (lambda *a: None)
        self.stats: list[StepStats] = []
        # node -> its state as the last step left it (a caller that steps the engine reads this, not the
        # store's 12,500 rows again)
        self.states: dict[str, str] = {}
        self._plans: dict[str, Plan] = {}

    def plan(self, rid: str, rollout: dict[str, Any]) -> Plan:
        """The rollout's plan, parsed once per engine (a plan never changes once applied)."""
        if rid not in self._plans:
            self._plans[rid] = Plan.from_dict(json.loads(rollout["plan"]))
        return self._plans[rid]

    def running(self) -> set[str]:
        return self.executor.running() if self.executor else set()

    def in_flight(self, rid: str) -> int:
        counts = self.store.counts(rid)
        return sum(counts.get(s, 0) for s in S.IN_FLIGHT) + len(self.running())

    def _view(self, rid: str, rollout: dict[str, Any], world: World, direction: S.Direction,
              results: dict | None = None, rows: list[dict[str, Any]] | None = None) -> StepView:
        plan = self.plan(rid, rollout)
        return StepView(rid, plan, self.s, world, self.store.nodes(rid) if rows is None else rows, direction,
                        strategy_named(plan.strategy), results or {}, self.running())

    # -- moves ------------------------------------------------------------------------------------
    def _apply(self, v: StepView, row: dict[str, Any], out: Outcome, m: _Moves) -> bool:
        """Keep what a unit decided; True when the node moved."""
        node = row["node"]
        m.audits += [(node, event, detail) for event, detail in out.audit]
        if out.note:
            row.update(out.note)
            m.changes.append((node, None, "", out.note))
        if out.launch:
            m.launch.append((node, *out.launch))
        if out.submit:
            m.submit.append((node, *out.submit))
        if out.event:
            m.events.append((node, out.event))
        if out.move is None:
            return False
        old = v.state[node]
        if not S.legal(old, out.move, v.direction):
            raise RuntimeError(f"illegal move {old} -> {out.move} for {node} ({v.direction})")
        if old in (S.UPGRADING, S.ROLLING_BACK):
            v.results.pop(node, None)  # its command's result is used
        v.state[node] = out.move
        row.update(out.fields, state=out.move, updated=v.world.now)
        m.changes.append((node, out.move, out.detail, out.fields))
        m.count += 1
        m.events.append((node, f"{out.move}{': ' + out.detail if out.detail else ''}"))
        return True

    def _settle(self, v: StepView, row: dict[str, Any], m: _Moves) -> None:
        """The node's unit looks at this step's read; after a move, its new state's unit looks again."""
        for _ in range(MAX_SETTLE):
            out = UNITS[v.state[row["node"]]].advance(v, row)
            if out is None or not self._apply(v, row, out, m):
                return
        raise RuntimeError(f"{row['node']} did not settle in one step")

    def _turn(self, v: StepView, m: _Moves, moves: dict[str, tuple[S.NodeState, str, dict[str, Any]]]) -> None:
        """An admin's abort or rollback: one move per node, by that direction's table."""
        for row in v.rows:
            if row["state"] in moves:
                state, detail, fields = moves[row["state"]]
                self._apply(v, row, Outcome(state, detail, dict(fields)), m)

    # -- what Slurm should show --------------------------------------------------------------------
    def _effects(self, v: StepView, m: _Moves) -> Writes:
        writes = Writes()
        leave: dict[str, set[str]] = defaultdict(set)
        member: dict[str, list[str]] = defaultdict(list)
        for name, res in v.mine.items():
            for n in res.nodes:
                member[n].append(name)
        for row in v.rows:
            info = v.info(row)
            if info is None:
                continue
            unit = UNITS[v.state[row["node"]]]
            notes = unit.notes(v, row, info)
            if notes:  # what the row keeps of this read: the store's, not Slurm's
                row.update(notes)
                m.changes.append((row["node"], None, "", notes))
            for effect in unit.effects(v, row, info):
                if isinstance(effect, Leave):
                    for name in member.get(info.name, []):
                        leave[name].add(info.name)
                else:
                    self._fold(v, info, effect, writes)
        for name, nodes in leave.items():
            keep = sorted(set(v.mine[name].nodes) - nodes)
            if keep:
                writes.update[name] = keep
            else:
                writes.delete.add(name)
        if v.strategy.slots and v.direction == S.Direction.FORWARD:
            self._slots(v, writes, m)
        return writes

    def _fold(self, v: StepView, info, effect, writes: Writes) -> None:
        """A unit's typed effect (slurm/effects.py) into the step's batched writes: one call per distinct
        change over a host list, made by `Writes.effects` in order of urgency under the step's cap."""
        fold = _FOLDS.get(type(effect))
        if fold is None:
            raise TypeError(f"not an effect a rollout unit makes: {effect!r}")
        fold(v, info, effect, writes)

    def _slots(self, v: StepView, writes: Writes, m: _Moves) -> None:
        """Every waiting node's maintenance slot, a MAINT reservation: the plan's slot, as `maintain plan`
        showed it; a plan applied after its slots began is scheduled again from now, by the same function."""
        pending = [r for r in v.rows if v.state[r["node"]] == S.PENDING]
        if not pending:
            return
        if v.waiting is not None:
            self._release_slots(v, pending, writes, m)
            return
        need = [r for r in pending if r["slot"] is None]
        soak = soak_of(self.s, sum(1 for st in v.state.values() if st == S.DONE))
        if need:
            planned = {n: v.plan.slots[n][0] for n in (r["node"] for r in need) if n in v.plan.slots}
            # a plan applied a minute or two after it was made keeps its slots (the first begins now)
            if len(planned) < len(need) or min(planned.values()) < v.world.now - LATE_PLAN_S:
                # the nodes out now fill the budget's places until they are back (an upgrade's time, at
                # a guess: a slot that still finds no room then is moved before it begins)
                upgrade_s = 60.0 * self.s.upgrade_minutes
                firm = firmly_out(v, *held(v))
                planned, _ = plan_slots(v.plan, v.world.free_at, v.world.now, upgrade_s, soak,
                                        {r["node"] for r in need}, [v.world.now + upgrade_s] * len(firm))
            for r in need:
                r["slot"] = planned[r["node"]]
                m.changes.append((r["node"], None, "", {"slot": r["slot"]}))
        # a slot due while its stage or its domain cannot go yet (the one before overran) starts later, at
        # the slot the same function gives it from a node's upgrade time on; looked at a few minutes ahead,
        # so a waiting slot costs a write every few minutes, not every step
        ahead = max(PUSH_LOOKAHEAD_S, 2 * self.s.poll_s)
        for name, start in postpone_slots(v, ahead, max(2 * ahead, 60.0 * self.s.upgrade_minutes),
                                          60.0 * self.s.upgrade_minutes, soak, self.s.poll_s).items():
            res = v.mine[name]
            if res.start is not None and res.start <= v.world.now:
                # begun: Slurm refuses to move it ("Reservation already started").  A slot whose stage has
                # not opened, whose domain cannot go, or that the budget has no room for lets its waiting
                # nodes go (given up whole, or shrunk to the nodes already taken), and they get a later
                # slot in the same step: never left holding idle nodes out of service
                waiting = self._let_go(v, name, writes)
                for r in pending:
                    if r["node"] in waiting:
                        r["slot"] = start
                        m.changes.append((r["node"], None, "", {"slot": start}))
                # the later slot is made at once: no gap in which a long job lands on its nodes
                _reserve(writes, slot_reservations({n: start for n in waiting}, set(), v.rid,
                                                   ROLLOUT_RESERVATION_PREFIX,
                                                   {*v.world.ours, *writes.create}, remade=True))
            else:
                writes.postpone[name] = start
        member = {n for res in v.world.ours.values() for n in res.nodes}
        _reserve(writes, slot_reservations({r["node"]: r["slot"] for r in pending}, member, v.rid,
                                           ROLLOUT_RESERVATION_PREFIX, v.world.ours))

    def _release_slots(self, v: StepView, pending: list[dict[str, Any]], writes: Writes, m: _Moves) -> None:
        """While the rollout waits for an admin (halted; the gate found the canary worse), nothing more
        begins: every slot of waiting nodes goes (begun or not), and the nodes are in service until it
        runs on; then their slots are scheduled again from that moment (the `slot` kept is cleared)."""
        prefix = f"{ROLLOUT_RESERVATION_PREFIX}{v.rid}_s"
        for name in v.mine:
            if name.startswith(prefix):
                self._let_go(v, name, writes)
        for r in pending:
            if r["slot"] is not None:
                r["slot"] = None
                m.changes.append((r["node"], None, "", {"slot": None}))

    @staticmethod
    def _let_go(v: StepView, name: str, writes: Writes) -> list[str]:
        """A slot reservation of ours lets its waiting nodes go: deleted when nothing else is in it, else
        shrunk to the nodes already taken (less those leaving it this step).  Returns the nodes let go."""
        nodes = v.mine[name].nodes
        waiting = [n for n in nodes if v.state.get(n) == S.PENDING]
        if not waiting:
            return []
        keep = [n for n in nodes if n not in waiting and n in writes.update.pop(name, nodes)]
        if keep:
            writes.shrunk[name] = keep
        else:
            writes.given_up.add(name)
        return waiting

    def _say_waiting(self, rid: str, r: dict[str, Any], v: StepView) -> None:
        """What `maintain status` shows the rollout waiting for an admin for: since when, and how many
        nodes it still holds once this step's writes are made (only nodes already under way: its slots
        of waiting nodes are given up).  Written when it changes."""
        if v.waiting is None:
            record = None
        else:
            ours, _ = held(v)
            holds = [n for n in ours if v.state.get(n) != S.PENDING]
            record = {"for": v.waiting[0], "since": v.waiting[1], "holds": len(holds),
                      "in_progress": sum(1 for st in v.state.values() if st in S.IN_FLIGHT)}
        if record != (json.loads(r["waiting"]) if r.get("waiting") else None):
            self.store.set_waiting(rid, record)

    def _failure_halt(self, v: StepView, state: str) -> str | None:
        """Why a running rollout halts for its failed nodes (too many, or a budget they fill), or None."""
        if state != S.R_RUNNING:
            return None
        counts: dict[str, int] = defaultdict(int)
        for st in v.state.values():
            counts[st] += 1
        failed, pending = counts[S.FAILED], counts[S.PENDING]
        budget = v.plan.budget.max_unavailable
        tolerated = max_failures(v.plan, self.s)
        if failed > tolerated:
            return f"{failed} node(s) failed (max_failures {tolerated})"
        if pending and failed >= budget:
            return (f"the budget of {budget} node(s) is filled by {failed} failed node(s); "
                    f"{pending} node(s) still pending")
        return None

    # -- one step --------------------------------------------------------------------------------
    def step(self, rid: str) -> str:
        """Reconcile once; returns the rollout's state after the step."""
        t_cpu = time.process_time()
        r = self.store.rollout(rid)
        if r is None:
            raise KeyError(rid)
        if r["state"] in S.ROLLOUT_FINAL:
            return r["state"]
        plan = self.plan(rid, r)
        slurm = CountedReads(self.slurm)
        rows = self.store.nodes(rid)
        testing = any(row["state"] == S.TESTING for row in rows)
        jobs = [j for j in self.store.preemptions(rid) if j["state"] not in S.JOB_FINAL] if plan.deadline else []
        # the blocks only while a node may come back this step (it must be back in its block): one read more
        blocks = plan.domains_from == FROM_SLURM and any(row["state"] in BACK_SOON for row in rows)
        gated = self.s.gate == "evidence" and r["state"] == S.R_RUNNING
        world = read_world(slurm, self.clock(), validation_job_name(rid) if testing else None,
                           {j["job"]: (j["stop"], j["run_start"]) for j in jobs}, blocks=blocks, ended=gated)
        v = self._view(rid, r, world, S.direction_of(r["state"]),
                       self.executor.finished() if self.executor else {}, rows)
        m = _Moves()
        for row in v.rows:
            if row["state"] in ADVANCING:
                self._settle(v, row, m)
        halt = None
        if gated:  # after the moves: a node validated in this step joins the canary cohort
            outcome = gate_step(v, self.store.gate(rid), self.s, boundary(v), world.ended,
                                self.store.event_rates(plan.target_driver))
            self.store.set_gate(rid, outcome.state, world.now, outcome.audits, outcome.recorded)
            m.events += [(None, f"{event}: {detail}") for event, detail in outcome.audits]
            v.gate_allowed, halt = outcome.allowed, outcome.halt
        if r["state"] == S.R_RUNNING and halt is None:
            self._admit(v, m)
        if r["state"] == S.R_ROLLING_BACK:
            self._admit_back(v, m)
        halt = halt or self._failure_halt(v, r["state"])
        if halt or r["state"] == S.R_HALTED:
            v.waiting = (f"an admin: halted{' (' + halt + ')' if halt else ''}; `maintain rollback`, `abort` "
                         "or `resume`", world.now if halt else (r["updated"] or world.now))
        elif gated and outcome.waiting is not None:
            v.waiting = outcome.waiting
        writes = self._effects(v, m)
        self._say_waiting(rid, r, v)
        job_changes = preempt(v, jobs, writes) if jobs and r["state"] == S.R_RUNNING else []
        self.store.set_preemptions(rid, job_changes, world.now)
        self.store.apply(rid, m.changes, world.now, m.audits)
        made = self._flush(rid, writes, world, self.s.max_slurm_writes_per_step or None)
        made += self.submit_validation(rid, m.submit, world.now)
        for node, script, timeout in m.launch:
            if self.executor is None:
                raise RuntimeError("an upgrade to start, and no executor to run it")
            self.executor.start(node, script, timeout)
        state = self._halt(v, halt) if halt else self._finish(v, writes, r["state"], m)
        self.states = v.state
        if m.events:
            counts = self.store.counts(rid)
            for node, text in m.events:
                self.on_event(rid, node, text, counts)
        made -= writes.reservation_calls_made  # the capped writes: reservations made, left or deleted go uncapped
        self.stats.append(StepStats(slurm.reads, made, time.process_time() - t_cpu, m.count, writes.reservations_made))
        return state

    def _flush(self, rid: str, writes: Writes, world: World, cap: int | None = None) -> int:
        made = writes.flush(self.actuator, cap)
        # the reservations this step deleted are gone from its read too: a turn back in the same step
        # (auto_rollback) reads the same world, and must not delete them again
        for effect in writes.carried:
            if isinstance(effect, E.Release):
                world.reservations.pop(effect.name, None)
        self.store.apply(rid, [], world.now, [(None, f"slurm {method}", detail) for method, detail in writes.made]
                         + [(None, "slurm call failed (retried next step)", e) for e in writes.errors])
        return made

    def _admit(self, v: StepView, m: _Moves) -> None:
        """The window takes waiting nodes (schedule.admit): each reserved, and settled at once where it can."""
        pending = Pending()
        by_node = {row["node"]: row for row in v.rows}

        def take(node: str) -> bool:
            row = by_node[node]
            if not self._apply(v, row, pending.take(v, row), m) or row["state"] != S.RESERVED:
                return False
            self._settle(v, row, m)
            return True

        def skip(node: str, why: str) -> None:
            self._apply(v, by_node[node], move(S.SKIPPED, why), m)

        admit(v, take, skip)

    def _admit_back(self, v: StepView, m: _Moves) -> None:
        """A rollback's window takes upgraded nodes back (schedule.admit_back)."""
        back = {row["node"]: row for row in v.rows}

        def take_back(node: str) -> bool:
            row = back[node]
            if not self._apply(v, row, Outcome(S.ROLLING_BACK, f"back to {v.bundle(row).label()}",
                                               {"started": None, "error": None}), m):
                return False
            self._settle(v, row, m)
            return True

        admit_back(v, take_back)

    def submit_validation(self, rid: str, submit: list[tuple[str, str, str]], now: float) -> int:
        """One sbatch per node (Slurm has no host-list form of "one job on each of these nodes"); the job
        id is stored at once, and a job submitted just before a crash is found again by its comment."""
        for node, reservation, partition in submit:
            minutes = -(-self.s.validation_job_timeout_s // 60)
            try:
                job_id = self.actuator.apply(E.Submit(
                    validation_job_name(rid), node, reservation, partition, self.s.validation_job, minutes,
                    f"gpufleet validation of {node}"))[0]
            except SlurmError as exc:
                self.store.audit(rid, node, "validation job not submitted (retried next step)", str(exc), now)
                continue
            self.store.apply(rid, [(node, None, "", {"job": job_id})], now,
                             [(node, "validation job submitted", f"job {job_id} in {reservation}")])
        return len(submit)

    def _finish(self, v: StepView, writes: Writes, state: str, m: _Moves) -> str:
        counts: dict[str, int] = defaultdict(int)
        for st in v.state.values():
            counts[st] += 1
        failed = counts[S.FAILED]
        in_flight = sum(counts[s] for s in S.IN_FLIGHT) + len(self.running())
        settled = in_flight == 0 and not writes  # and Slurm shows every node given back
        if state == S.R_ROLLING_BACK:
            if settled and all(st in S.FINAL for st in v.state.values()):
                self.final_cleanup(v.rid, v.world.now, v.world)
                self.store.set_rollout_state(v.rid, S.R_ROLLED_BACK, at=v.world.now)
                return S.R_ROLLED_BACK
            return state
        if state == S.R_HALTED:
            return state
        pending = counts[S.PENDING]
        if settled and pending == 0:
            self.final_cleanup(v.rid, v.world.now, v.world)
            self.store.set_rollout_state(v.rid, S.R_DONE, f"{counts[S.DONE]} done, {failed} failed", at=v.world.now)
            return S.R_DONE
        return state

    def _halt(self, v: StepView, why: str) -> str:
        self.store.set_rollout_state(v.rid, S.R_HALTED, why, at=v.world.now)
        self.on_event(v.rid, None, f"HALTED: {why}", self.store.counts(v.rid))
        if self.s.auto_rollback:
            self._start_rollback(v.rid, v.world)  # this step's read: no second one
            return S.R_ROLLING_BACK
        return S.R_HALTED

    # -- admin actions: one pass of moves by their direction's table, then the effects ---------------
    def abort(self, rid: str) -> str:
        slurm = CountedReads(self.slurm)
        world = read_world(slurm, self.clock())
        v = self._view(rid, self.store.rollout(rid), world, S.Direction.ABORT)
        m = _Moves()
        skip = (S.SKIPPED, "aborted before its upgrade", {})
        stop = (S.FAILED, "aborted mid-upgrade: check the node", {"error": "aborted mid-upgrade"})
        self._turn(v, m, {S.PENDING: skip, S.RESERVED: skip,
                          S.BACK_PENDING: (S.DONE, "aborted before its rollback: stays on the target", {}),
                          **{s: stop for s in (S.UPGRADING, S.RETURNING, S.VALIDATING, S.TESTING, S.ROLLING_BACK)}})
        writes = self._effects(v, m)
        self.store.apply(rid, m.changes, world.now)
        self._flush(rid, writes, world)
        self.final_cleanup(rid, world.now)  # read again: the writes above changed the reservations
        self.store.set_rollout_state(rid, S.R_ABORTED, at=world.now)
        return S.R_ABORTED

    def start_rollback(self, rid: str) -> None:
        self._start_rollback(rid, read_world(CountedReads(self.slurm), self.clock()))

    def _start_rollback(self, rid: str, world: World) -> None:
        """Nodes not yet upgraded are given back; every node touched goes back to its previous driver."""
        v = self._view(rid, self.store.rollout(rid), world, S.Direction.TURN_BACK)
        m = _Moves()
        for row in v.rows:
            st = row["state"]
            if st in (S.PENDING, S.RESERVED):
                self._apply(v, row, Outcome(S.SKIPPED, "rolled back before its upgrade"), m)
            elif st in (S.DONE, S.FAILED, S.UPGRADING, S.RETURNING, S.VALIDATING, S.TESTING):
                # (a done node, in service, waits for the rollback's window: admit_back)
                back = v.bundle(row)
                unknown = [part for part in ("driver", *v.plan.target_for(row["node"]).parts())
                           if part not in back.parts()]
                if unknown:  # what it ran before is not known: nothing to return it to
                    if st not in S.FINAL:
                        why = f"no previous {' or '.join(dict.fromkeys(unknown))} recorded"
                        self._apply(v, row, Outcome(S.FAILED, why, {"error": why}), m)
                    continue
                if st == S.DONE:
                    self._apply(v, row, Outcome(S.BACK_PENDING, f"waits for the rollback's window, then back to "
                                                                f"{back.label()}"), m)
                    continue
                self._apply(v, row, Outcome(S.ROLLING_BACK, f"back to {back.label()}",
                                            {"started": None, "error": None}), m)
        writes = self._effects(v, m)
        self.store.apply(rid, m.changes, world.now)
        self._flush(rid, writes, world)
        self.store.set_rollout_state(rid, S.R_ROLLING_BACK, at=world.now)

    def final_cleanup(self, rid: str, now: float, world: World | None = None) -> None:
        """The end (done, rolled back, aborted): no reservation of ours and no raised weight stays."""
        writes = Writes()
        reservations = world.reservations.values() if world else self.slurm.reservations()
        writes.delete.update(r.name for r in reservations if r.name.startswith(f"{ROLLOUT_RESERVATION_PREFIX}{rid}_"))
        rows = [row for row in self.store.nodes(rid) if row["weight"] is not None]
        for row in rows:
            writes.add(E.Weight((row["node"],), row["weight"]))
        writes.flush(self.actuator)
        self.store.apply(rid, [(row["node"], None, "", {"weight": None}) for row in rows], now)
        for error in writes.errors:
            self.store.audit(rid, None, "slurm call failed at cleanup", error, now)


def _fold_drain(v: StepView, info, effect, writes: Writes) -> None:
    if info.drained and not v.ours(info):
        return  # someone else's drain (upgrade_held_nodes): keep their reason
    if not info.drained:
        writes.add(E.Drain((info,), effect.reason))
    elif not same(info.reason, effect.reason):
        writes.add(E.SetReason((info,), effect.reason))


def _fold_reserve(v: StepView, info, effect, writes: Writes) -> None:
    if v.holding(info.name) is None:  # a node already in a reservation of ours is held
        writes.add(E.Reserve(effect.name, (info.name,), effect.start, effect.minutes))


def _reserve(writes: Writes, slots: dict[str, tuple[list[str], float, int]]) -> None:
    """The slot reservations the schedule made (name -> nodes, start, minutes), as the effects that make them."""
    for name, (nodes, start, minutes) in slots.items():
        writes.add(E.Reserve(name, tuple(nodes), start, minutes))


# how each effect a unit makes joins the step's writes
_FOLDS = {
    E.Drain: _fold_drain,
    E.SetReason: lambda v, info, e, writes: writes.add(E.SetReason((info,), e.reason)),
    E.Resume: lambda v, info, e, writes: writes.add(E.Resume((info,))),
    E.Reboot: lambda v, info, e, writes: writes.add(E.Reboot((info,), e.reason, "RESUME")),
    E.Weight: lambda v, info, e, writes: writes.add(E.Weight((info.name,), e.weight)),
    E.Reserve: _fold_reserve,
}
