"""The rollout engine on an in-memory fleet (the simulator's Slurm, a clock moved by hand): each protection
of issue #10 has a test that fails when it is taken out."""

from __future__ import annotations

import io
import json
import os
import socket
from dataclasses import replace

import pytest

from slurm_gpufleet.maintain import states as S
from slurm_gpufleet.maintain.planner import make_plan
from slurm_gpufleet.maintain.reconcile import Engine
from slurm_gpufleet.maintain.schedule import slot_times
from slurm_gpufleet.maintain.store import Store
from slurm_gpufleet.maintain.writes import Writes
from slurm_gpufleet.policy import parse_policy
from slurm_gpufleet.simulators.rollout import SimFleet
from slurm_gpufleet.simulators.simslurm import SimExecutor

T0 = 1_800_000_000.0
TARGET = "580.159.04"


MAINTAIN = '[maintain]\nwaves = [1, 2, "100%"]\nmax_unavailable = 4\nmax_unavailable_per_partition = "100%"\n'


def rollout(tmp_path, fleet: SimFleet, config: str = "", *, base: str = MAINTAIN, deadline: float | None = None,
            strategy: str = "reservation", **executor_opts):
    policy = parse_policy(base + "upgrade_minutes = 20\n" + config)
    template = tmp_path / "upgrade.j2"
    template.write_text(SimExecutor.TEMPLATE)
    policy = replace(policy, maintain=replace(policy.maintain, upgrade_template=str(template)))
    plan = make_plan(fleet.fleet_state(), TARGET, [n.name for n in fleet.sim.nodes], policy, now=fleet.sim.now,
                     force=True, deadline=deadline, strategy=strategy).to_dict()
    store = Store(str(tmp_path / "maintain.db"))
    store.create_rollout(plan, at=fleet.sim.now)
    executor = SimExecutor(fleet.sim, 20 * 60, **executor_opts)
    engine = Engine(store, fleet.slurm, policy, executor, clock=lambda: fleet.sim.now)
    return engine, store, plan, executor


def drive(fleet, engine, plan, executor, dt=300.0, max_steps=2000, on_step=None):
    state = ""
    for _ in range(max_steps):
        before = dict(fleet.slurm.calls)
        state = engine.step(plan["id"])
        if on_step:
            on_step(before)
        if state in S.ROLLOUT_FINAL or (state == S.R_HALTED and engine.in_flight(plan["id"]) == 0):
            return state
        fleet.advance(fleet.sim.now + dt, executor)
    return state


def drive_crashing(tmp_path, fleet, engine, plan, executor, on_step=lambda: None) -> str:
    """A new engine after every step, as after kill -9 and `maintain resume`: commands under way are lost
    with the process and run again."""
    state = ""
    for _ in range(500):
        state = engine.step(plan["id"])
        on_step()
        if state == S.R_DONE:
            break
        executor.active.clear()  # the crash: commands in flight die with `apply`
        engine = Engine(Store(str(tmp_path / "maintain.db")), fleet.slurm, engine.policy, executor,
                        clock=lambda: fleet.sim.now)
        engine.step(plan["id"])
        on_step()
        fleet.advance(fleet.sim.now + 1500, executor)
    return state


def done_at(store, rid) -> dict[str, float]:
    return {r["node"]: r["ts"] for r in store.db.query(
        "select node, ts from audit where rollout = ? and event = 'done'", [rid])}


def test_whole_rollout_three_reads_capped_writes_everything_given_back(tmp_path, monkeypatch):
    fleet = SimFleet(40)
    for i in range(40):
        fleet.add_job(f"j{i}", i, 4, T0 + 600 * (i % 7 + 1))
    # polled as it is driven (every 300 s): a slot the budget has no room for is moved before it begins
    engine, store, plan, executor = rollout(tmp_path, fleet, "poll_s = 300\n")
    per_step = []
    created: list[str] = []
    create = fleet.slurm.create_reservation
    fleet.slurm.create_reservation = lambda name, *args: (created.append(name), create(name, *args))
    # uncapped: nodes leaving reservations and reservations deleted (capacity given back), with creations
    uncapped: list[str] = []
    flush = Writes.flush

    def flushed(self, *a, **k):
        made = flush(self, *a, **k)
        uncapped.extend(m for m, _ in self.made if m in ("update_reservation", "delete_reservation"))
        return made

    monkeypatch.setattr(Writes, "flush", flushed)

    def count(before):
        per_step.append((fleet.slurm.calls["read"] - before.get("read", 0),
                         fleet.slurm.calls["write"] - before.get("write", 0) - len(created) - len(uncapped)))
        created.clear()
        uncapped.clear()

    engine.step(plan["id"])  # the first step makes every slot's reservation at once (never capped)
    slots = {n["slot_start"] for n in plan["nodes"]}
    assert len(created) == len(slots) and all(f"_s{int(t)}" in " ".join(created) for t in slots)
    created.clear()
    assert drive(fleet, engine, plan, executor, on_step=count) == S.R_DONE
    assert store.counts(plan["id"]) == {S.DONE: 40}
    assert {r for r, _ in per_step} == {3}  # one read of nodes, jobs, reservations per step
    assert max(w for _, w in per_step) <= 2  # max_slurm_writes_per_step, reservations made and left aside
    # given back as found: nothing drained, no reservation, every weight back to 1, all on the target
    assert not any(n.drained for n in fleet.sim.nodes)
    assert fleet.slurm.reservations_ == {}
    assert {n.weight for n in fleet.sim.nodes} == {1}
    assert all(json.loads(n.extra)["drv"] == TARGET for n in fleet.sim.nodes)
    assert fleet.sim.killed == 0


def test_a_slow_node_does_not_hold_the_rest_and_its_slot_is_reserved(tmp_path):
    fleet = SimFleet(20)
    fleet.add_job("long", 5, 8, T0 + 100 * 3600)  # node00006: busy for 100 h
    engine, store, plan, executor = rollout(tmp_path, fleet)
    for _ in range(5):  # two Slurm writes a step (max_slurm_writes_per_step), soonest slots first
        engine.step(plan["id"])
    # its maintenance slot is a MAINT reservation from when its job ends: no new long job can land there
    slot = [r for r in fleet.slurm.reservations_.values() if "node00006" in r.nodes]
    assert slot and slot[0].start <= T0 + 100 * 3600 + 300
    assert drive(fleet, engine, plan, executor) == S.R_DONE
    finished = done_at(store, plan["id"])
    others = [t for n, t in finished.items() if n != "node00006"]
    # 19 nodes, at most 4 at once, 20 minutes each plus 5-minute steps: hours, not after the 100-hour job
    assert max(others) - T0 < 6 * 3600
    assert finished["node00006"] >= T0 + 100 * 3600


def test_waves_are_gates_canary_first_then_the_window_widens(tmp_path):
    fleet = SimFleet(12)
    engine, store, plan, executor = rollout(tmp_path, fleet)
    assert drive(fleet, engine, plan, executor) == S.R_DONE
    starts = {r["node"]: r["ts"] for r in store.db.query(
        "select node, min(ts) as ts from audit where event = 'reserved' group by node")}
    finished = done_at(store, plan["id"])
    canary = plan["waves"][0]["nodes"][0]
    assert all(t >= finished[canary] for n, t in starts.items() if n != canary)
    # waves [1, 2, rest]: after the canary 1 node, then 2 more once it is done, then up to the budget (4)
    order = sorted(starts.values())
    assert len([t for t in order if t == order[1]]) == 1
    peak = max(sum(1 for n in starts if starts[n] <= t < finished[n]) for t in starts.values())
    assert peak == 4


def test_failures_that_fill_the_budget_halt_never_done(tmp_path):
    fleet = SimFleet(10)
    engine, store, plan, executor = rollout(tmp_path, fleet, "max_failures = 10\n", ok=False)
    state = drive(fleet, engine, plan, executor)
    counts = store.counts(plan["id"])
    assert state == S.R_HALTED and counts[S.PENDING] > 0 and counts[S.FAILED] == 4
    assert "filled by 4 failed node(s)" in store.log(plan["id"], 200)[0]["detail"] or any(
        "filled by" in e["detail"] for e in store.log(plan["id"], 200))
    for _ in range(3):  # a halted rollout still writes its last reasons, two writes a step
        engine.step(plan["id"])
    failed = [n for n in fleet.sim.nodes if n.drained]
    assert len(failed) == 4 and all("failed: upgrade command failed" in n.reason for n in failed)


def test_a_node_that_never_reboots_fails_with_that_reason(tmp_path):
    fleet = SimFleet(3)
    engine, store, plan, executor = rollout(tmp_path, fleet, "return_timeout_s = 600\n", reboots=False)
    assert drive(fleet, engine, plan, executor) == S.R_HALTED
    canary = plan["waves"][0]["nodes"][0]
    row = store.node(plan["id"], canary)
    assert row["state"] == S.FAILED and row["error"].startswith("never rebooted within 600 s")


@pytest.mark.parametrize("publishes,error", [(None, "no health check published within"),
                                             ("575.57.08", "driver 575.57.08 != 580.159.04")])
def test_validation_needs_a_fresh_check_with_the_target(tmp_path, publishes, error):
    fleet = SimFleet(3)
    for n in fleet.sim.nodes:  # a summary from before the upgrade, already naming the target
        n.extra = '{"gpufleet":1,"v":"ok","drv":"580.159.04","t":"2020-01-01T00:00:00Z"}'
    engine, store, plan, executor = rollout(tmp_path, fleet, "validate_timeout_s = 600\n", publishes=publishes)
    assert drive(fleet, engine, plan, executor) == S.R_HALTED
    row = store.node(plan["id"], plan["waves"][0]["nodes"][0])
    assert row["state"] == S.FAILED and error in row["error"]


def test_a_crash_at_every_step_still_converges(tmp_path):
    """A new engine and executor each step, as after kill -9 and `maintain resume`: commands under way are
    lost with the process and run again."""
    fleet = SimFleet(12)
    for i in range(12):
        fleet.add_job(f"j{i}", i, 8, T0 + 900 * (i % 3 + 1))
    engine, store, plan, executor = rollout(tmp_path, fleet)
    state = drive_crashing(tmp_path, fleet, engine, plan, executor)
    assert state == S.R_DONE and store.counts(plan["id"]) == {S.DONE: 12}
    assert fleet.slurm.reservations_ == {} and not any(n.drained for n in fleet.sim.nodes)


def test_only_declared_transitions_each_direction_its_own_table():
    assert S.legal(S.PENDING, S.RESERVED) and S.legal(S.VALIDATING, S.DONE)
    assert not S.legal(S.PENDING, S.DONE) and not S.legal(S.DONE, S.PENDING)
    for direction, table in S.TRANSITIONS.items():
        assert set(table) == set(S.NODE_STATES), direction
    back = S.Direction.ROLLBACK
    # a node on its way back ends rolled back or failed, never done; a forward rollout never rolls back
    assert S.legal(S.VALIDATING, S.ROLLED_BACK, back) and not S.legal(S.VALIDATING, S.DONE, back)
    assert not S.legal(S.VALIDATING, S.ROLLED_BACK) and not S.legal(S.UPGRADING, S.ROLLING_BACK)
    # a node done and in service waits for the rollback's window (the budget), then goes back
    assert S.legal(S.DONE, S.BACK_PENDING, S.Direction.TURN_BACK) and not S.legal(S.DONE, S.ROLLING_BACK, back)
    assert S.legal(S.BACK_PENDING, S.ROLLING_BACK, back) and not S.legal(S.DONE, S.ROLLING_BACK, S.Direction.TURN_BACK)
    assert not S.legal(S.PENDING, S.RESERVED, S.Direction.ABORT)


def test_slots_follow_free_times_window_and_gates():
    free = {"a": T0, "b": T0 + 3600, "c": T0, "d": T0, "e": T0 + 10 * 3600, "f": T0}
    slots = slot_times(free, ["a"], [["c"], ["b", "d", "e", "f"]], T0, width=2, upgrade_s=600)
    assert slots["a"] == T0                       # canary now
    assert slots["c"] == T0 + 600                 # after the canary validated; stage 1 is one node
    assert slots["d"] == slots["f"] == T0 + 1200  # stage 2 opens when c is done, two at once
    assert slots["b"] == T0 + 3600 and slots["e"] == T0 + 10 * 3600  # when their jobs end
    # an evidence gate's soak before every stage but the first; slots are whole minutes
    soaked = slot_times(free, ["a"], [["c"], ["d"]], T0 + 1, width=2, upgrade_s=590, soak_s=3600)
    assert soaked == {"a": T0 + 60, "c": T0 + 60 + 600 + 3600, "d": T0 + 60 + 2 * (600 + 3600)}
    # a domain goes as one, when its last member is free; the width counts domains
    slots = slot_times(free, [], [["b", "c", "d", "f"]], T0, width=1, upgrade_s=600,
                       unit_of={"b": "r1", "c": "r1", "d": "r2", "f": "r2"})
    assert slots["d"] == slots["f"] == T0 and slots["b"] == slots["c"] == T0 + 3600


def test_one_driver_per_rollout_and_overlapping_plans_are_refused(tmp_path):
    from slurm_gpufleet.common.progress import Progress
    from slurm_gpufleet.maintain.runner import RolloutError, Runner

    fleet = SimFleet(6)
    engine, store, plan, executor = rollout(tmp_path, fleet)
    refusals = []

    def between_steps(_seconds):
        if not refusals:  # while this apply runs: the same plan again, and a plan over the same nodes
            second = Runner(Store(str(tmp_path / "maintain.db")), fleet.slurm, engine.policy, Progress(io.StringIO()),
                            executor=executor, clock=lambda: fleet.sim.now)
            for p in (plan, {**plan, "id": "other123"}):
                with pytest.raises(RolloutError) as exc:
                    second.apply(p)
                refusals.append(str(exc.value))
        fleet.advance(fleet.sim.now + 300, executor)

    runner = Runner(store, fleet.slurm, engine.policy, Progress(io.StringIO()), sleep=between_steps,
                    executor=executor, clock=lambda: fleet.sim.now)
    assert runner.apply(plan) == S.R_DONE
    me = f"{socket.gethostname()}:{os.getpid()}#"
    assert refusals[0].startswith(f"rollout {plan['id']} is being applied by {me}")
    assert refusals[1].startswith("nodes node[00001-00006] are held by rollout") and me in refusals[1]
    assert store.rollout(plan["id"])["holder"] is None  # released at the end


def test_a_dead_holder_does_not_block_resume(tmp_path):
    fleet = SimFleet(2)
    engine, store, plan, executor = rollout(tmp_path, fleet)
    store.acquire(plan["id"], f"{socket.gethostname()}:999999999", fleet.sim.now, 60)  # a killed apply
    assert store.acquire(plan["id"], "me:1", fleet.sim.now, 60) is None


def test_apply_rides_out_a_slurm_outage(tmp_path):
    """slurmctld away for a few steps (a restart, a failover): apply waits and goes on; too long ends it."""
    from slurm_gpufleet.common.progress import Progress
    from slurm_gpufleet.maintain.runner import Runner
    from slurm_gpufleet.slurm.base import SlurmError

    fleet = SimFleet(4)
    engine, store, plan, executor = rollout(tmp_path, fleet, "slurm_outage_s = 3600\n")
    real_nodes = fleet.slurm.nodes
    outage = {"left": 0, "seen": 0}

    def nodes():
        if outage["left"]:
            outage["left"] -= 1
            outage["seen"] += 1
            raise SlurmError("scontrol show nodes: Unable to contact slurm controller (connect failure)")
        return real_nodes()

    fleet.slurm.nodes = nodes
    steps = {"n": 0}

    def between(_seconds):
        steps["n"] += 1
        if steps["n"] == 3:
            outage["left"] = 4
        fleet.advance(fleet.sim.now + 300, executor)

    runner = Runner(store, fleet.slurm, engine.policy, Progress(io.StringIO()), sleep=between, executor=executor,
                    clock=lambda: fleet.sim.now)
    assert runner.apply(plan) == S.R_DONE and outage["seen"] == 4
    retried = [e for e in store.log(plan["id"], 500) if e["event"] == "slurm unreachable, retrying"]
    assert len(retried) == 4 and "Unable to contact" in retried[0]["detail"]


def test_a_node_that_comes_back_unlike_the_canary_fails_with_the_difference(tmp_path):
    fleet = SimFleet(4)
    odd = "node00003"

    def fields(name):  # node00003 booted another kernel with the proprietary module
        return {"kern": "6.1.0-31-amd64" if name == odd else "6.1.0-28-amd64",
                "modf": "proprietary" if name == odd else "open", "gsp": "580.159.04"}

    engine, store, plan, executor = rollout(tmp_path, fleet, "max_failures = 1\n", fields=fields)
    assert plan["waves"][0]["nodes"] != [odd]
    drive(fleet, engine, plan, executor)
    row = store.node(plan["id"], odd)
    assert row["state"] == S.FAILED
    assert row["error"] == ("validation failed: kernel 6.1.0-31-amd64 != canary's 6.1.0-28-amd64; "
                            "module flavour proprietary != canary's open")
    assert json.loads(store.node(plan["id"], plan["waves"][0]["nodes"][0])["validated"])["kern"] == "6.1.0-28-amd64"


def test_validation_job_runs_undrained_inside_the_reservation_and_gates_release(tmp_path):
    fleet = SimFleet(8)
    fleet.slurm.validation_fails = {"node00005"}
    engine, store, plan, executor = rollout(tmp_path, fleet, 'validation_job = "/usr/sbin/deep-check"\n'
                                                             'max_failures = 1\n')
    seen = []  # every step, each node whose validation job is out: (node, drained?, held by a begun reservation?)

    def watch(before):
        for row in store.nodes(plan["id"]):
            if row["state"] == S.TESTING and row["job"]:
                n = fleet.slurm.index[row["node"]]
                seen.append((row["node"], n.drained, n.reserved_from <= fleet.sim.now))

    assert drive(fleet, engine, plan, executor, on_step=watch) == S.R_DONE
    rows = {r["node"]: r for r in store.nodes(plan["id"])}
    assert rows["node00005"]["state"] == S.FAILED
    assert rows["node00005"]["error"] == f"validation job {rows['node00005']['job']} ended FAILED"
    assert {n for n, r in rows.items() if r["state"] == S.DONE} == set(rows) - {"node00005"}
    # the job ran on a node out of the drain, in a reservation that had begun: only it could start there
    assert {n for n, _, _ in seen} == set(rows) and all(not d and held for _, d, held in seen)
    assert sorted(node for _, node, _, _ in fleet.slurm.jobs_.values()) == sorted(rows)  # one job a node
    assert fleet.slurm.index["node00005"].drained and not fleet.slurm.index["node00001"].drained
    assert fleet.slurm.reservations_ == {}


def test_a_validation_job_submitted_just_before_a_crash_is_found_not_resubmitted(tmp_path):
    fleet = SimFleet(3)
    engine, store, plan, executor = rollout(tmp_path, fleet, 'validation_job = "/usr/sbin/deep-check"\n')
    for _ in range(200):
        engine.step(plan["id"])
        testing = [r for r in store.nodes(plan["id"]) if r["state"] == S.TESTING and r["job"]]
        if testing:
            break
        fleet.advance(fleet.sim.now + 60, executor)
    node, job = testing[0]["node"], testing[0]["job"]
    # the crash: sbatch returned, the job id never reached the store (written as the file holds it after
    # the crash, through a connection of its own: the store reads it as it reads another process's write)
    import sqlite3

    with sqlite3.connect(store.path) as conn:
        conn.execute("update nodes set job = null where node = ?", [node])
    assert store.nodes(plan["id"])[[r["node"] for r in store.nodes(plan["id"])].index(node)]["job"] is None
    engine.step(plan["id"])
    assert store.node(plan["id"], node)["job"] == job
    assert [j for j, (_, n, _, _) in fleet.slurm.jobs_.items() if n == node] == [job]
    assert drive(fleet, engine, plan, executor) == S.R_DONE


def test_a_node_leaves_the_drain_for_its_validation_job_only_once_a_reservation_holds_it(tmp_path):
    fleet = SimFleet(2)
    engine, store, plan, executor = rollout(tmp_path, fleet, 'validation_job = "/usr/sbin/deep-check"\n'
                                                             "max_slurm_writes_per_step = 1\n")
    exposed = []  # (node) out of the drain while no reservation of ours held it: any job could land there
    state = ""
    for _ in range(400):
        rows = store.nodes(plan["id"])
        if any(r["state"] == S.VALIDATING for r in rows):
            for name in list(fleet.slurm.reservations_):  # someone deletes our reservations meanwhile
                fleet.slurm.delete_reservation(name)
        state = engine.step(plan["id"])
        for row in store.nodes(plan["id"]):
            n = fleet.slurm.index[row["node"]]
            if row["state"] == S.TESTING and not n.drained and n.reserved_from > fleet.sim.now:
                exposed.append(row["node"])
        if state in S.ROLLOUT_FINAL:
            break
        fleet.advance(fleet.sim.now + 60, executor)
    assert state == S.R_DONE and store.counts(plan["id"]) == {S.DONE: 2}
    assert exposed == []


def _unread_module(fleet, odd: str, engine, plan, store, reads_after: int | None):
    """The rollout with max_failures 0, `odd` publishing no module flavour after its reboot (its module not
    loaded at the first check); its health check publishes the flavour `reads_after` steps into its
    validation (None: never)."""
    from slurm_gpufleet.judging.summary import stamp

    seen = {"steps": 0}

    def on_step(_before):
        row = store.node(plan["id"], odd)
        n = fleet.slurm.index[odd]
        if row["state"] != S.VALIDATING or reads_after is None:
            return
        seen["steps"] += 1
        if seen["steps"] == reads_after:
            data = json.loads(n.extra)
            n.extra = json.dumps({**data, "modf": "open", "t": stamp(fleet.sim.now)}, separators=(",", ":"))
    return on_step, seen


@pytest.mark.parametrize("reads_after", [1, 2, 3])
def test_a_value_not_read_yet_after_the_reboot_is_read_again_never_a_mismatch(tmp_path, reads_after):
    fleet = SimFleet(4)
    odd = "node00003"

    def fields(name):  # the canary read its module flavour; node00003's first summary has none yet
        return {"kern": "6.1.0-28-amd64", "gsp": "580.159.04", **({} if name == odd else {"modf": "open"})}

    engine, store, plan, executor = rollout(tmp_path, fleet, "", fields=fields)
    assert plan["waves"][0]["nodes"] != [odd]
    on_step, seen = _unread_module(fleet, odd, engine, plan, store, reads_after)
    assert drive(fleet, engine, plan, executor, dt=60, on_step=on_step) == S.R_DONE
    row = store.node(plan["id"], odd)
    assert row["state"] == S.DONE and row["error"] is None and seen["steps"] >= reads_after
    assert json.loads(row["validated"]) == {"gsp": "580.159.04", "kern": "6.1.0-28-amd64", "modf": "open"}


def test_a_value_that_stays_unread_returns_the_node_unverified_and_says_so(tmp_path):
    from slurm_gpufleet.cli.output import status_text
    from slurm_gpufleet.maintain.status import rollout_status

    fleet = SimFleet(4)
    odd = "node00003"

    def fields(name):
        return {"kern": "6.1.0-28-amd64", **({} if name == odd else {"modf": "open"})}

    engine, store, plan, executor = rollout(tmp_path, fleet, "validate_timeout_s = 900\n", fields=fields)
    on_step, seen = _unread_module(fleet, odd, engine, plan, store, None)
    assert drive(fleet, engine, plan, executor, dt=60, on_step=on_step) == S.R_DONE, "no halt for an unread value"
    row = store.node(plan["id"], odd)
    assert row["state"] == S.DONE and row["error"] is None
    assert json.loads(row["validated"])["unverified"] == ["module flavour"]
    # it waited for the value within the bound before returning the node unverified
    events = [e for e in store.log(plan["id"], 500) if e["node"] == odd]
    done = next(e for e in events if e["event"] == "done")
    assert "unverified: module flavour not read" in done["detail"]
    status = rollout_status(store, engine.policy.maintain)
    by_node = {n["node"]: n for n in status["nodes"]}
    assert by_node[odd]["unverified"] == ["module flavour"] and by_node["node00001"]["unverified"] == []
    assert any("unverified" in line and odd in line for line in status_text(status))


def test_a_node_whose_cdmm_mode_differs_from_the_canarys_fails(tmp_path):
    fleet = SimFleet(3)
    odd = "node00003"

    def fields(name):  # GB200: the canary came back in CDMM (driver-managed memory), node00003 as NUMA nodes
        return {"kern": "6.1.0-28-amd64", "cdmm": "numa" if name == odd else "driver"}

    engine, store, plan, executor = rollout(tmp_path, fleet, "max_failures = 1\n", fields=fields)
    drive(fleet, engine, plan, executor)
    assert store.node(plan["id"], odd)["error"] == "validation failed: CDMM mode numa != canary's driver"


# ----------------------------------------------------------------------------- every engine path in memory
def _run_until(fleet, engine, plan, executor, done, dt=300.0, max_steps=500):
    for _ in range(max_steps):
        engine.step(plan["id"])
        if done():
            return
        fleet.advance(fleet.sim.now + dt, executor)
    raise AssertionError("never reached")


def test_rollback_takes_every_touched_node_back_and_gives_the_rest_back_untouched(tmp_path):
    fleet = SimFleet(10)
    engine, store, plan, executor = rollout(tmp_path, fleet)
    previous = plan["previous_drivers"]["node00001"]
    _run_until(fleet, engine, plan, executor, lambda: store.counts(plan["id"]).get(S.DONE, 0) >= 3)
    # taken but not yet upgraded (reserved) is given back untouched; anything further goes back
    touched = {r["node"] for r in store.nodes(plan["id"]) if r["state"] not in (S.PENDING, S.RESERVED)}
    engine.start_rollback(plan["id"])
    assert store.rollout(plan["id"])["state"] == S.R_ROLLING_BACK
    state = drive(fleet, engine, plan, executor)
    assert state == S.R_ROLLED_BACK
    rows = {r["node"]: r for r in store.nodes(plan["id"])}
    assert {n for n, r in rows.items() if r["state"] == S.ROLLED_BACK} == touched
    assert all(r["state"] == S.SKIPPED for n, r in rows.items() if n not in touched)
    for n in fleet.sim.nodes:  # every rolled-back node published its previous driver again
        if n.name in touched:
            assert json.loads(n.extra)["drv"] == previous
    assert fleet.slurm.reservations_ == {} and not any(n.drained for n in fleet.sim.nodes)
    assert all(n.weight == 1 for n in fleet.sim.nodes)
    # the way back has its own table: no node of a rollback was ever moved to done after the turn
    turned = store.db.execute("select min(ts) from audit where rollout = ? and event = 'rolling_back'",
                              [plan["id"]]).fetchone()[0]
    assert store.db.execute("select count(*) from audit where rollout = ? and event = 'done' and ts > ?",
                            [plan["id"], turned]).fetchone()[0] == 0


def test_abort_ends_every_node_where_it_is(tmp_path):
    fleet = SimFleet(10)
    engine, store, plan, executor = rollout(tmp_path, fleet)
    _run_until(fleet, engine, plan, executor,
               lambda: any(r["state"] == S.UPGRADING for r in store.nodes(plan["id"]))
               and store.counts(plan["id"]).get(S.DONE, 0) >= 1)
    before = {r["node"]: r["state"] for r in store.nodes(plan["id"])}
    assert engine.abort(plan["id"]) == S.R_ABORTED
    after = {r["node"]: r for r in store.nodes(plan["id"])}
    for node, old in before.items():
        new = after[node]["state"]
        if old in (S.PENDING, S.RESERVED):
            assert new == S.SKIPPED
        elif old in S.FINAL:
            assert new == old
        else:
            assert new == S.FAILED and after[node]["error"] == "aborted mid-upgrade"
    drained = {n.name for n in fleet.sim.nodes if n.drained}
    assert drained == {n for n, r in after.items() if r["state"] == S.FAILED}  # checked by a person
    assert fleet.slurm.reservations_ == {}
    assert engine.step(plan["id"]) == S.R_ABORTED  # final: a later step does nothing


def test_reboot_asap_empties_busy_nodes_by_reboot_and_kills_nothing(tmp_path):
    fleet = SimFleet(6)
    for i in range(6):
        fleet.add_job(f"j{i}", i, 8, T0 + 3600 * (1 + i % 2))
    engine, store, plan, executor = rollout(tmp_path, fleet, strategy="reboot-asap")
    engine.step(plan["id"])
    asked = [n for n in fleet.sim.nodes if n.reboot_requested]
    assert asked and all(n.running for n in asked)  # asked while busy; nothing killed
    assert all(n.drained for n in asked)  # Slurm's ASAP drain: no new job lands there
    assert drive(fleet, engine, plan, executor) == S.R_DONE
    assert store.counts(plan["id"]) == {S.DONE: 6}
    # each node was rebooted empty (once for the emptying, once by its upgrade), never before its job ended
    assert all(n.boot == 2 for n in fleet.sim.nodes)
    assert not any(n.drained or n.reboot_requested for n in fleet.sim.nodes)
    assert fleet.slurm.reservations_ == {}
    # the whole rollout used no slot reservations: the strategy object says reboot-asap has none
    assert not any("_s" in e["detail"] for e in store.log(plan["id"], 500) if e["event"] == "slurm create_reservation")


def test_auto_rollback_turns_back_in_the_same_step_with_the_same_read(tmp_path):
    fleet = SimFleet(6)
    engine, store, plan, executor = rollout(tmp_path, fleet, "max_failures = 0\nauto_rollback = true\n",
                                            publishes="999.99.99")
    reads = []
    state = ""
    for _ in range(200):
        before = fleet.slurm.calls["read"]
        state = engine.step(plan["id"])
        reads.append((fleet.slurm.calls["read"] - before, engine.stats[-1].reads, state))
        if state != S.R_RUNNING:
            break
        fleet.advance(fleet.sim.now + 300, executor)
    assert state == S.R_ROLLING_BACK
    real, counted, _ = reads[-1]
    assert real == counted == 3  # the halt and the turn back read the fleet once, and the step says so
    assert all(r == c for r, c, _ in reads)
    executor.publishes = "target"  # the previous driver comes back as it was
    assert drive(fleet, engine, plan, executor) == S.R_ROLLED_BACK
    assert store.node(plan["id"], plan["waves"][0]["nodes"][0])["state"] == S.ROLLED_BACK


def test_plan_slots_are_the_engines_first_reservations(tmp_path):
    fleet = SimFleet(8)
    for i in range(8):
        fleet.add_job(f"j{i}", i, 8, T0 + 3600 * (2 + i))
    engine, store, plan, executor = rollout(tmp_path, fleet)
    nodes = {n["node"]: n for n in plan["nodes"]}
    assert set(nodes) == {n.name for n in fleet.sim.nodes}
    for n in nodes.values():
        assert n["slot_end"] - n["slot_start"] == 20 * 60 and n["slot_start"] >= T0
    assert nodes["node00003"]["decided_by"] == {"job_id": "j2", "end": T0 + 4 * 3600}
    engine.step(plan["id"])
    made = fleet.slurm.reservations_
    assert made
    for name, r in made.items():  # each reservation starts at the slot the plan showed for its nodes
        assert {nodes[n]["slot_start"] for n in r.nodes} == {r.start}, name
    # waves are drawn from the same slots
    for w in plan["waves"]:
        assert w["start"] == min(nodes[n]["slot_start"] for n in w["nodes"])


def test_a_registration_seen_when_the_command_began_is_not_its_reboot():
    """Found on real Slurm: reboot-asap emptied a node, its slurmd registered, and its upgrade began in
    that same second; the whole-second rule took that registration (and the summary published then) for
    the upgrade's reboot, and the node failed validation with its old driver."""
    from slurm_gpufleet.maintain.units import rebooted
    from slurm_gpufleet.slurm.base import NodeInfo

    row = {"boot": "2026-12-01T07:00:00", "started": 1000.6, "registered": 1000.0}
    same = NodeInfo("n1", "IDLE", boot_time="2026-12-01T07:00:00", slurmd_start=1000.0)
    assert not rebooted(same, row)
    again = NodeInfo("n1", "IDLE", boot_time="2026-12-01T07:00:00", slurmd_start=1003.0)
    assert rebooted(again, row)
    booted = NodeInfo("n1", "IDLE", boot_time="2026-12-01T09:00:00", slurmd_start=1000.0)
    assert rebooted(booted, row)
    # a row from before the registration was kept: a registration in the command's second still counts
    assert rebooted(same, {**row, "registered": None})


def test_a_boot_time_a_second_off_is_not_a_reboot():
    """Found on the real node image: Slurm's BootTime is now - uptime at each registration, so a slurmd
    restarted just before the node was taken showed a boot one second off the one recorded; taken for the
    reboot, it let the validation read the summary published before the real one, with the old driver."""
    from slurm_gpufleet.maintain.units import rebooted
    from slurm_gpufleet.slurm.base import NodeInfo

    row = {"boot": "2026-12-01T07:40:41", "started": 1000.6, "registered": 1000.0}
    jitter = NodeInfo("n1", "IDLE", boot_time="2026-12-01T07:40:40", slurmd_start=1000.0)
    assert not rebooted(jitter, row)
    assert rebooted(NodeInfo("n1", "IDLE", boot_time="2026-12-01T17:23:40", slurmd_start=1000.0), row)
    # a row a store kept before boots were one form (epoch digits) against the ISO one of today
    import datetime as dt

    epoch = str(int(dt.datetime.fromisoformat("2026-12-01T07:40:41").timestamp()))
    assert not rebooted(jitter, {**row, "boot": epoch})
    assert rebooted(NodeInfo("n1", "IDLE", boot_time="2026-12-01T09:00:00", slurmd_start=1000.0), {**row, "boot": epoch})


def test_a_failure_reason_with_a_quote_and_over_120_characters_settles(tmp_path):
    # the in-memory Slurm cleans reasons as the real backend does: before, such a node was rewritten every
    # step and a 3-node rollout was still running after 200 steps
    fleet = SimFleet(3)
    said = ("E: Sub-process /usr/bin/dpkg returned an error code (1): 'nvidia-kernel-dkms' failed to build "
            "against 6.1.0-31-amd64, see /var/lib/dkms/nvidia-current/580.159.04/build/make.log for the \"why\"")
    canary_first = {n.name for n in fleet.sim.nodes}
    engine, store, plan, executor = rollout(tmp_path, fleet, "max_failures = 2\n", output=said)
    canary = plan["waves"][0]["nodes"][0]
    executor.ok = canary_first - {plan["waves"][-1]["nodes"][-1]}  # the last node's command fails
    state = drive(fleet, engine, plan, executor, max_steps=200)
    assert state in S.ROLLOUT_FINAL, state
    failed = next(n for n in fleet.sim.nodes if n.drained)
    assert failed.reason.startswith("maintain") and "'" not in failed.reason and '"' not in failed.reason
    assert len(failed.reason) <= 120 and canary != failed.name
    # once failed, the node's reason is written once: the steps after it write nothing more
    steps_after = engine.step(plan["id"]), fleet.slurm.calls["write"]
    engine.step(plan["id"])
    assert fleet.slurm.calls["write"] == steps_after[1]


def test_abort_while_slurm_is_away_is_recorded_and_carried_out_when_it_answers(tmp_path):
    from slurm_gpufleet.common.progress import Progress
    from slurm_gpufleet.maintain.runner import Runner
    from slurm_gpufleet.slurm.base import SlurmError

    fleet = SimFleet(4)
    engine, store, plan, executor = rollout(tmp_path, fleet, "slurm_outage_s = 0\n")
    real_nodes = fleet.slurm.nodes

    def away():
        raise SlurmError("scontrol show nodes: Unable to contact slurm controller (connect failure)")

    fleet.slurm.nodes = away
    said = io.StringIO()
    runner = Runner(store, fleet.slurm, engine.policy, Progress(said), sleep=lambda _s: None, executor=executor,
                    clock=lambda: fleet.sim.now)
    with pytest.raises(SlurmError, match="the abort is recorded"):
        runner.abort(plan["id"])
    assert store.rollout(plan["id"])["state"] == S.R_RUNNING and store.abort_requested(plan["id"])
    assert "abort of" in said.getvalue() and "recorded" in said.getvalue()
    # Slurm is back: a resume carries the abort out (never resumes the rollout instead)
    fleet.slurm.nodes = real_nodes
    assert runner.resume(plan["id"]) == S.R_ABORTED
    assert store.rollout(plan["id"])["state"] == S.R_ABORTED
    assert fleet.slurm.reservations_ == {} and not any(n.drained for n in fleet.sim.nodes)


def test_a_quiet_apply_says_what_it_waits_for(tmp_path):
    from slurm_gpufleet.common.progress import Progress
    from slurm_gpufleet.maintain.runner import Runner

    fleet = SimFleet(3)
    fleet.add_job("long", 0, 8, T0 + 3 * 3600)
    fleet.add_job("long2", 1, 8, T0 + 3 * 3600)
    fleet.add_job("long3", 2, 8, T0 + 3 * 3600)
    engine, store, plan, executor = rollout(tmp_path, fleet, "progress_s = 0\n")
    said = io.StringIO()

    def between(_seconds):
        fleet.advance(fleet.sim.now + 600, executor)

    runner = Runner(store, fleet.slurm, engine.policy, Progress(said), sleep=between, executor=executor,
                    clock=lambda: fleet.sim.now)
    assert runner.apply(plan) == S.R_DONE
    lines = [line for line in said.getvalue().splitlines() if "waiting for" in line]
    assert lines and "slot at" in lines[0] and lines[0].split(" ", 1)[1].startswith(f"{plan['id']}: 0/3 done")
    assert any(" upgrading" in line or " returning" in line or " validating" in line for line in lines), lines


def test_apply_takes_each_wave_s_own_nodes_at_the_plan_s_slots(tmp_path):
    """The plan is what apply does: each node is taken in the stage its wave says (an empty node of a later
    wave waits its turn), and the canary and the first wave at their planned slots, to the minute."""
    fleet = SimFleet(12)
    # the first nodes in name order are busy a while; later ones are empty (apply used to take those first)
    for i, hours in enumerate([0.5, 1.5, 3.0, 0.25]):
        fleet.add_job(f"j{i}", i, 8, T0 + hours * 3600)
    engine, store, plan, executor = rollout(tmp_path, fleet)
    stage_of = {n["node"]: n["stage"] for n in plan["nodes"]}
    slot = {n["node"]: n["slot_start"] for n in plan["nodes"]}
    assert [n["node"] for n in plan["nodes"]] == sorted(slot, key=lambda n: (slot[n], n))  # in slot order
    assert drive(fleet, engine, plan, executor, dt=60.0) == S.R_DONE
    taken = {r["node"]: r["ts"] for r in store.db.query(
        "select node, min(ts) as ts from audit where event = 'reserved' group by node")}
    finished = done_at(store, plan["id"])
    by_stage: dict[int, list[str]] = {}
    for n, k in stage_of.items():
        by_stage.setdefault(k, []).append(n)
    for k in sorted(by_stage)[1:]:  # no node of a stage is taken before every node of the one before is done
        assert min(taken[n] for n in by_stage[k]) >= max(finished[n] for n in by_stage[k - 1])
    for n in by_stage[0] + by_stage[1]:
        assert abs(taken[n] - slot[n]) <= 60, (n, taken[n] - slot[n])


def test_a_rollback_drains_no_more_nodes_at_once_than_the_budget(tmp_path):
    """Every node upgraded goes back, but a rollback of a whole fleet is paced by the same budget as the
    rollout: done nodes wait in service (back_pending) for the window (the budget invariant is checked
    after every step: conftest.rollout_budget_invariant)."""
    fleet = SimFleet(12)
    engine, store, plan, executor = rollout(tmp_path, fleet, base=MAINTAIN.replace("max_unavailable = 4",
                                                                                   "max_unavailable = 2"))
    assert drive(fleet, engine, plan, executor) == S.R_DONE
    engine.start_rollback(plan["id"])
    assert store.counts(plan["id"]) == {S.BACK_PENDING: 12}
    assert not any(n.drained for n in fleet.sim.nodes)  # nothing is taken before the window has room
    most = 0
    state = ""
    for _ in range(400):
        state = engine.step(plan["id"])
        most = max(most, sum(1 for n in fleet.sim.nodes if n.drained))
        if state == S.R_ROLLED_BACK:
            break
        fleet.advance(fleet.sim.now + 300, executor)
    assert state == S.R_ROLLED_BACK and store.counts(plan["id"]) == {S.ROLLED_BACK: 12}
    assert most == 2
    assert {json.loads(n.extra)["drv"] for n in fleet.sim.nodes} == {"570.172.08"}


def test_nodes_out_for_another_reason_fill_the_budget_and_the_rollout_starts_nothing(tmp_path):
    """An admin's drain (or the health check's, or a repair) of the rollout's own nodes counts against its
    budget: while two such nodes fill a budget of 2, nothing is taken; once one is back, one at a time."""
    fleet = SimFleet(8)
    engine, store, plan, executor = rollout(tmp_path, fleet, base=MAINTAIN.replace("max_unavailable = 4",
                                                                                   "max_unavailable = 2"))
    order = [n for w in plan["waves"] for n in w["nodes"]]
    fleet.slurm.drain_nodes(order[-2:], "admin: cable swap")  # the last two of the plan, waiting their turn
    for _ in range(6):
        engine.step(plan["id"])
        fleet.advance(fleet.sim.now + 300, executor)
    assert store.counts(plan["id"]) == {S.PENDING: 8}
    assert sum(1 for n in fleet.sim.nodes if n.out(fleet.sim.now)) == 2  # the admin's two, nothing of ours
    fleet.slurm.resume_nodes(order[-1:])
    most = 0
    for _ in range(200):
        state = engine.step(plan["id"])
        most = max(most, sum(1 for n in fleet.sim.nodes if n.out(fleet.sim.now)))
        if state == S.R_DONE:
            break
        fleet.advance(fleet.sim.now + 300, executor)
    assert state == S.R_DONE and most == 2  # the admin's node and one of ours, never more
    rows = {r["node"]: r["state"] for r in store.nodes(plan["id"])}
    assert rows[order[-2]] == S.SKIPPED and rows[order[-1]] == S.DONE  # someone else's node is left alone


def test_a_halted_rollout_holds_nothing_but_its_failed_nodes(tmp_path):
    """Halted (the canary failed validation), the rollout waits for an admin: no slot of a waiting node
    stays (their MAINT reservations would begin and hold nodes idle until someone comes), and
    `maintain status` says what it waits for, since when, and that it holds only the failed node."""
    from slurm_gpufleet.cli.output import status_text
    from slurm_gpufleet.maintain.status import rollout_status

    fleet = SimFleet(8)
    for i in range(1, 8):
        fleet.add_job(f"j{i}", i, 8, T0 + 3600 * i)  # busy nodes: their slots lie ahead
    engine, store, plan, executor = rollout(tmp_path, fleet, publishes="999.99.99")
    assert drive(fleet, engine, plan, executor) == S.R_HALTED
    assert store.counts(plan["id"]) == {S.FAILED: 1, S.PENDING: 7}
    assert not [r for r in fleet.slurm.reservations_ if r.startswith(f"gpufleet_{plan['id']}_")]
    status = rollout_status(store, engine.s)
    assert status["waiting"]["holds"] == 1 and status["waiting"]["in_progress"] == 0, status["waiting"]
    assert status["waiting"]["for"].startswith("an admin: halted")
    assert any("holding 1 node(s)" in line for line in status_text(status))
    # the last events in words, never the Slurm call's name
    events = status_text(status)[status_text(status).index("  last events:") + 1:]
    assert events and not [line for line in events if " slurm " in line], events
    assert any("reservation made" in line or "reservation deleted" in line for line in events), events
    fleet.advance(fleet.sim.now + 8 * 3600, executor)  # hours later: nothing of the rollout began meanwhile
    assert sum(1 for n in fleet.sim.nodes if n.out(fleet.sim.now)) == 1


def test_a_warning_that_names_the_target_fails_validation_and_any_other_is_named(tmp_path):
    """Issue 48: after its upgrade a node's health check warns "next boot kernel ... has nvidia OLD, not
    TARGET" (the module was not built for the kernel that boots next): the node fails validation.  A
    warning about something else lets the node finish, the warning named in its row."""
    fleet = SimFleet(4)
    names = [n.name for n in fleet.sim.nodes]

    def fields(node):
        if node == names[1]:
            return {"v": "warn", "w": f"next boot kernel 6.1.0-31-amd64 has nvidia 580.95.05, not {TARGET}"}
        if node == names[2]:
            return {"v": "warn", "w": "gpu0 PCIe x8 of x16"}
        return {}

    engine, store, plan, executor = rollout(tmp_path, fleet, "max_failures = 5\n", fields=fields)
    drive(fleet, engine, plan, executor)
    rows = {r["node"]: r for r in store.nodes(plan["id"])}
    assert rows[names[1]]["state"] == S.FAILED
    assert rows[names[1]]["error"].startswith(f"validation failed: a warning names the target {TARGET}")
    assert rows[names[2]]["state"] == S.DONE
    assert any("gpu0 PCIe x8 of x16" in (e["detail"] or "") for e in store.log(plan["id"], 500) if e["node"] == names[2])


def test_apply_obeys_the_max_failures_its_plan_shows_not_a_config_changed_since(tmp_path):
    """Issue 48: the plan says "halt after 1 failure" (max_failures 0); the config says 10 by the time it
    runs.  The rollout halts at its first failure, as the plan said, and says max_failures 0."""
    fleet = SimFleet(6)
    engine, store, plan, executor = rollout(tmp_path, fleet, "max_failures = 0\n", ok={fleet.sim.nodes[1].name})
    assert plan["budget"]["max_failures"] == 0
    engine.s = replace(engine.s, max_failures=10)   # the config now
    assert drive(fleet, engine, plan, executor) == S.R_HALTED
    assert any("(max_failures 0)" in (e["detail"] or "") for e in store.log(plan["id"], 200))


def test_the_nodes_of_a_multi_node_job_share_a_slot_that_fills_the_partitions_budget_and_still_go(tmp_path):
    """A 2-node job's nodes get one slot; with the per-partition budget at 2, the two nodes idle in their begun
    slot were counted against the partition as if already taken, and blocked their own admission: the
    rollout stayed `running` forever after the job ended."""
    fleet = SimFleet(8)
    fleet.add_job("wide", [0, 1], 8, T0 + 3 * 3600)
    engine, store, plan, executor = rollout(tmp_path, fleet, base='[maintain]\nmax_unavailable = 2\n'
                                            'max_unavailable_per_partition = "25%"\n')
    assert drive(fleet, engine, plan, executor, max_steps=200) == S.R_DONE
    assert fleet.sim.now - T0 >= 3 * 3600   # the job's nodes went after it ended, not before


def test_a_node_slurm_shows_coming_back_is_waited_for_within_the_validations_time(tmp_path):
    """Issue 63: right after its reboot, Slurm shows the node NOT_RESPONDING until slurmd registers; the
    node's health check publishes `cb` (coming back).  That is not yet an answer: the validation waits, and
    the node is done once a later check publishes it registered; one still coming back past
    `validate_timeout_s` fails, said so."""
    from slurm_gpufleet.judging.summary import stamp

    fleet = SimFleet(4)
    late, stuck = "node00002", "node00003"

    def fields(name):
        return {"v": "warn", "w": "slurm coming back: slurmd not registered yet", "cb": 1} \
            if name in (late, stuck) else {}

    engine, store, plan, executor = rollout(tmp_path, fleet, "max_failures = 5\nvalidate_timeout_s = 900\n",
                                            fields=fields)
    seen = {"steps": 0}

    def on_step(_before):   # two steps into its validation, the late node's check sees it registered
        if store.node(plan["id"], late)["state"] != S.VALIDATING:
            return
        seen["steps"] += 1
        if seen["steps"] == 2:
            n = fleet.slurm.index[late]
            data = {k: v for k, v in json.loads(n.extra).items() if k not in ("cb", "w")}
            n.extra = json.dumps({**data, "v": "ok", "t": stamp(fleet.sim.now)}, separators=(",", ":"))

    drive(fleet, engine, plan, executor, dt=60, on_step=on_step)
    rows = {r["node"]: r for r in store.nodes(plan["id"])}
    assert rows[late]["state"] == S.DONE and seen["steps"] >= 2, rows[late]
    assert rows[stuck]["state"] == S.FAILED
    assert rows[stuck]["error"].startswith("validation failed: Slurm still shows it coming back")
