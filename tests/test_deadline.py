"""Deadline rollouts (issue #13, part 2): which jobs stop early, how and when, and `apply` doing exactly that
on the simulated Slurm (the engine's own code; the simulator supplies the jobs and the clock)."""

from __future__ import annotations

import json

import pytest
from support import REPO, run_cli
from test_engine import drive, rollout

from slurm_gpufleet.maintain import states as S
from slurm_gpufleet.maintain.deadline import DeadlineError, checkpointing, parse_deadline, plan_deadline
from slurm_gpufleet.simulators.rollout import SimFleet
from slurm_gpufleet.slurm.base import JobInfo, SlurmError

T0 = 1_800_000_000.0
H = 3600.0
TARGET = "580.159.04"


def job(jid, nodes, start_h, end_h, gpus=8, comment="", requeue=None):
    return JobInfo(jid, nodes, None if end_h is None else T0 + end_h * H, "gpu", start_time=T0 + start_h * H,
                   gpus_per_node=gpus, comment=comment, requeue=requeue)


def by_id(plan):
    return {j.job_id: j for j in plan.jobs}


# -- what a job says of itself ----------------------------------------------------------------------
def test_checkpoint_conventions_in_the_comment():
    c = checkpointing("train run 7 gpufleet:signal=B:USR1@30")
    assert (c.signal, c.batch, c.grace_s) == ("USR1", True, 30.0)
    assert c.since_checkpoint(T0, T0 + 10 * H) == 0.0  # it checkpoints on the signal
    c = checkpointing("gpufleet:checkpoint_every=1h")
    assert c.every_s == H and c.since_checkpoint(T0, T0 + 5.25 * H) == pytest.approx(0.25 * H)
    c = checkpointing("gpufleet:checkpoint_at=1800018000")
    assert c.since_checkpoint(T0, T0 + 6 * H) == pytest.approx(H)
    assert checkpointing("gpufleet:signal=SIGTERM").grace_s == 60.0  # sbatch's default sig_time
    assert checkpointing("just a comment") == checkpointing("")
    assert checkpointing("").since_checkpoint(T0, T0 + 3 * H) == 3 * H  # nothing known: all elapsed time


def test_deadline_text():
    assert parse_deadline("72h", T0) == T0 + 72 * H
    assert parse_deadline("3d", T0) == T0 + 72 * H
    with pytest.raises(DeadlineError, match="duration"):
        parse_deadline("next friday", T0)
    with pytest.raises(DeadlineError, match="past"):
        parse_deadline("2020-01-01T00:00", T0)
    # a deadline whose date cannot be written (year 11409972 was exit 70), or a replay of millennia
    for far in ("99999999999h", "1" * 5000, "9999-12-31T00:00"):
        with pytest.raises(DeadlineError, match="more than 3,650 days"):
            parse_deadline(far, T0)
    from slurm_gpufleet.maintain.deadline import parse_simulated_deadline

    with pytest.raises(DeadlineError, match="more than 3,650 days"):
        parse_simulated_deadline("99999999999h")


# -- the choice ------------------------------------------------------------------------------------
def test_jobs_that_end_in_time_wait_and_the_cheapest_ones_stop():
    nodes = [f"n{i}" for i in range(1, 5)]
    jobs = [job("short", ["n1"], -2, 5),          # ends long before the deadline
            job("long-old", ["n2"], -100, 300),   # 100 h of work held now
            job("long-new", ["n3"], -1, 300),     # 1 h of work held now
            job("edge", ["n4"], -10, 23.5)]       # ends just before its slot at the very end
    p = plan_deadline(jobs, nodes, now=T0, deadline=T0 + 24 * H, budget=2, upgrade_s=0.5 * H)
    j = by_id(p)
    assert j["short"].action == "wait" and j["edge"].action == "wait"
    assert j["long-old"].action == "requeue" and j["long-new"].action == "requeue"
    # without a checkpoint the loss grows while it runs: stopped at the start
    assert j["long-new"].at == T0 and j["long-new"].gpu_h_at_risk == pytest.approx(8.0)
    assert j["long-old"].gpu_h_at_risk == pytest.approx(800.0)
    assert set(p.stop_at) == {"long-old", "long-new"}


def test_budget_forces_the_cheapest_of_the_late_ones():
    # three nodes end by their limits 30 min before the deadline; one at a time, 1 h each: only one can
    # wait, the two others must stop and the ones holding least work are chosen
    nodes = ["a", "b", "c"]
    jobs = [job("ja", ["a"], -50, 23.5), job("jb", ["b"], -5, 23.5), job("jc", ["c"], -1, 23.5)]
    p = plan_deadline(jobs, nodes, now=T0, deadline=T0 + 24 * H, budget=1, upgrade_s=0.5 * H)
    j = by_id(p)
    assert j["ja"].action == "wait"
    assert {j["jb"].action, j["jc"].action} == {"requeue"}


def test_a_short_job_beside_a_stopped_one_still_waits():
    p = plan_deadline([job("long", ["n1"], -20, 500, gpus=4), job("short", ["n1"], -1, 3, gpus=4)], ["n1"],
                      now=T0, deadline=T0 + 24 * H, budget=1, upgrade_s=0.5 * H)
    assert by_id(p)["short"].action == "wait" and by_id(p)["long"].action == "requeue"


def test_a_job_that_checkpoints_is_asked_at_the_last_moment_and_one_that_cannot_requeue_is_cancelled():
    jobs = [job("ckpt", ["n1"], -30, 400, comment="gpufleet:signal=B:USR1@30", requeue=True),
            job("norq", ["n2"], -30, 400, requeue=False),
            job("hourly", ["n3"], -30, 400, comment="gpufleet:checkpoint_every=1h")]
    p = plan_deadline(jobs, ["n1", "n2", "n3"], now=T0, deadline=T0 + 24 * H, budget=3, upgrade_s=0.5 * H)
    j = by_id(p)
    assert j["ckpt"].action == "checkpoint-requeue" and j["ckpt"].at == j["ckpt"].slot - 30
    assert j["ckpt"].slot == T0 + 23.5 * H and j["ckpt"].gpu_h_at_risk == 0.0
    assert j["norq"].action == "cancel" and j["norq"].at == T0
    assert j["hourly"].action == "requeue" and j["hourly"].at == j["hourly"].slot  # its loss does not grow


def test_stop_latest_waits_to_the_last_moment():
    p = plan_deadline([job("long", ["n1"], -30, 400)], ["n1"], now=T0, deadline=T0 + 24 * H, budget=1,
                      upgrade_s=0.5 * H, stop="latest")
    assert by_id(p)["long"].at == T0 + 23.5 * H


def test_a_deadline_the_budget_cannot_keep_is_refused_in_one_line():
    with pytest.raises(DeadlineError, match="later than the deadline"):
        plan_deadline([], [f"n{i}" for i in range(10)], now=T0, deadline=T0 + 2 * H, budget=2, upgrade_s=H)


# -- apply ---------------------------------------------------------------------------------------------
def deadline_rollout(tmp_path, fleet: SimFleet, hours: float, config: str = ""):
    base = '[maintain]\nwaves = [1, "100%"]\nmax_unavailable = 2\nmax_unavailable_per_partition = "100%"\n'
    return rollout(tmp_path, fleet, config, base=base, deadline=fleet.sim.now + hours * H)


def test_apply_stops_only_the_named_jobs_at_their_moment_and_is_done_by_the_deadline(tmp_path):
    fleet = SimFleet(6, now=T0)
    fleet.add_job("old", 0, 8, T0 + 400 * H, start=T0 - 80 * H)                       # must stop: requeued
    fleet.add_job("ckpt", 1, 8, T0 + 400 * H, start=T0 - 10 * H, comment="gpufleet:signal=B:USR1@30")
    fleet.add_job("short", 2, 8, T0 + 2 * H, start=T0 - 1 * H)                         # waits
    fleet.add_job("late", 3, 4, T0 + 20 * H, start=T0 - 1 * H)                         # waits: ends in time
    engine, store, plan, executor = deadline_rollout(tmp_path, fleet, 24)
    named = {j["job_id"]: j["action"] for j in plan["deadline"]["jobs"]}
    assert named == {"old": "requeue", "ckpt": "checkpoint-requeue", "short": "wait", "late": "wait"}
    # a job the plan did not name, started on a rollout node after planning, is never stopped by it
    fleet.add_job("unnamed", 4, 2, T0 + 3 * H)
    assert drive(fleet, engine, plan, executor) == S.R_DONE
    assert fleet.sim.now <= T0 + 24 * H
    assert store.counts(plan["id"]) == {S.DONE: 6}
    jobs = {r["job"]: r for r in store.preemptions(plan["id"])}
    assert set(jobs) == {"old", "ckpt"}  # only what the plan stops is tracked, and nothing else is touched
    assert {r["state"] for r in jobs.values()} == {S.J_STOPPED}
    assert fleet.sim.preempted == 2
    # the owners were told in the job's comment before anything happened
    assert "requeued at" in fleet.sim.by_id["old"].comment and TARGET in fleet.sim.by_id["old"].comment
    assert fleet.sim.by_id["ckpt"].comment.startswith("gpufleet:signal=B:USR1@30 | gpufleet ")
    # the checkpointing job got its signal at its slot minus its grace, then lost nothing
    audit = [(e["event"], e["ts"]) for e in store.db.query(
        "select event, ts from audit where rollout = ? and event like 'job %' order by ts", [plan["id"]])]
    signalled = next(ts for ev, ts in audit if ev == "job ckpt signalled")
    stopped = next(ts for ev, ts in audit if ev == "job ckpt stopping")
    assert stopped - signalled >= 30
    # the old job stops at the start, once its node's reservation exists (one 5-minute step later), so
    # that the requeued job cannot start again on the node it left
    old_stop = next(ts for ev, ts in audit if ev == "job old stopping")
    assert old_stop - T0 <= 300
    # it loses its elapsed work; the checkpointing job only its minutes between the signal and its requeue
    # (one 5-minute step here; its 30 s grace on a real cluster)
    old_lost = (old_stop - (T0 - 80 * H)) * 8
    assert old_lost <= fleet.sim.lost_work_gpu_s <= old_lost + (stopped - signalled) * 8


def test_a_requeue_lost_in_a_crash_is_made_again_and_a_restarted_run_is_left_alone(tmp_path):
    fleet = SimFleet(2, now=T0)
    fleet.add_job("old", 0, 8, T0 + 400 * H, start=T0 - 5 * H)
    engine, store, plan, executor = deadline_rollout(tmp_path, fleet, 12)
    slurm = fleet.slurm
    dropped = []
    real = slurm.requeue_jobs
    slurm.requeue_jobs = lambda ids: dropped.append(ids)  # the call lost: apply died right after storing it
    engine.step(plan["id"])
    engine.step(plan["id"])
    assert dropped and {r["state"] for r in store.preemptions(plan["id"])} == {S.J_STOPPING}
    slurm.requeue_jobs = real
    engine.step(plan["id"])  # still the same run on its node: requeued again
    assert fleet.sim.preempted == 1
    # the job starts again (a new run): the plan never stops it a second time
    fleet.add_job("old", 1, 8, T0 + 500 * H, start=T0 + 60)
    fleet.sim.now += 120
    engine.step(plan["id"])
    assert fleet.sim.preempted == 1
    assert {r["state"] for r in store.preemptions(plan["id"])} == {S.J_STOPPED}


def test_plan_json_names_the_jobs(tmp_path):
    fleet = SimFleet(2, now=T0)
    fleet.add_job("old", 0, 8, T0 + 400 * H, start=T0 - 5 * H)
    _, _, plan, _ = deadline_rollout(tmp_path, fleet, 12)
    (j,) = plan["deadline"]["jobs"]
    assert {"job_id", "nodes", "gpus", "action", "at", "gpu_h_at_risk", "why", "slot"} <= set(j)
    assert j["gpu_h_at_risk"] == pytest.approx(40.0) and plan["deadline"]["gpu_h_at_risk"] == pytest.approx(40.0)
    json.dumps(plan)


def test_a_job_stops_only_once_its_node_is_reserved(tmp_path):
    # a slurmctld that makes one reservation a step and refuses the others (busy): the reservations come
    # one at a time; a job stopped before its node is reserved would be requeued straight back onto it
    fleet = SimFleet(4, now=T0)
    for i in range(4):
        fleet.add_job(f"j{i}", i, 8, T0 + 400 * H, start=T0 - 10 * H)
    engine, store, plan, executor = deadline_rollout(tmp_path, fleet, 12)
    create, made = fleet.slurm.create_reservation, []

    def one_a_step(*args):
        if made:
            raise SlurmError("Resource temporarily unavailable")
        made.append(args)
        create(*args)

    fleet.slurm.create_reservation = one_a_step
    reserved_at: dict[str, float] = {}
    for _ in range(12):
        made.clear()
        engine.step(plan["id"])
        for r in fleet.slurm.reservations_.values():
            for n in r.nodes:
                reserved_at.setdefault(n, fleet.sim.now)
        fleet.advance(fleet.sim.now + 60, executor)
    stops = {e["event"].split()[1]: e["ts"] for e in store.db.query(
        "select event, ts from audit where rollout = ? and event like 'job % stopping'", [plan["id"]])}
    assert len(stops) == 4
    for i in range(4):
        node = f"node{i + 1:05d}"
        assert stops[f"j{i}"] >= reserved_at[node]
    assert len(set(stops.values())) > 1  # the reservations really came over several steps


def test_cli_plan_with_a_deadline_names_the_jobs_and_bad_deadlines_are_one_line(tmp_path):
    fleet = json.loads((REPO / "etc" / "sample-fleet.json").read_text())
    t = fleet["taken_at"]
    fleet["jobs"][0].update(end_time=t + 400 * H, start_time=t - 50 * H, gpus_per_node=8)
    fleet["jobs"][1].update(end_time=t + 400 * H, start_time=t - 5 * H, gpus_per_node=8, requeue=False)
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(fleet))
    base = ("maintain", "plan", "--target-driver", "580.159.04", "--nodes", "gpu[001-032]", "--fleet", str(path))
    r = run_cli(*base, "--deadline", "48h", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)["deadline"]
    assert d["at"] == t + 48 * H
    jobs = {j["job_id"]: j for j in d["jobs"]}
    assert (jobs["1000"]["action"], jobs["1000"]["at"], jobs["1000"]["gpu_h_at_risk"]) == ("requeue", t, 400.0)
    assert jobs["1001"]["action"] == "cancel"  # said beforehand: it cannot be requeued
    text = run_cli(*base, "--deadline", "48h").stdout.decode()
    assert "job 1001" in text and "cancel" in text and "stopped early" in text
    for bad in ("soon", "2001-01-01", "10m"):
        r = run_cli(*base, "--deadline", bad)
        assert r.returncode == 2 and r.stderr.count(b"\n") == 1 and b"Traceback" not in r.stderr, (bad, r.stderr)


# -- the plan's slots keep the deadline ----------------------------------------------------------------
def _stage_plan(ends_h: list[float], deadline_h: float):
    """Nodes with one job each ending at `ends_h`, 2 at a time, 1 h each, the canary alone first."""
    from slurm_gpufleet.maintain.planner import make_plan
    from slurm_gpufleet.policy import parse_policy

    fleet = SimFleet(len(ends_h), now=T0)
    for i, end in enumerate(ends_h):
        fleet.add_job(f"j{i}", i, 8, T0 + end * H, start=T0 - 10 * H)
    policy = parse_policy('[maintain]\nwaves = [1, "100%"]\nmax_unavailable = 2\n'
                          'max_unavailable_per_partition = "100%"\nupgrade_minutes = 60\n')
    return make_plan(fleet.fleet_state(), TARGET, [n.name for n in fleet.sim.nodes], policy, now=T0, force=True,
                     deadline=T0 + deadline_h * H)


def test_the_slots_keep_the_deadline_when_the_canary_goes_alone():
    # by rounds of 2, six nodes need 3 h and every job could wait; the canary going alone makes the slots
    # end at 4.5 h (the plan used to promise 4.2 h and show it): the latest-ending job is stopped instead
    plan = _stage_plan([0.5, 1, 1.5, 2, 2.5, 3], 4.2)
    assert max(end for _, end in plan.slots.values()) <= T0 + 4.2 * H
    jobs = {j["job_id"]: j for j in plan.deadline["jobs"]}
    assert {k: j["action"] for k, j in jobs.items()} == {"j0": "wait", "j1": "wait", "j2": "wait", "j3": "wait",
                                                         "j4": "wait", "j5": "requeue"}
    assert plan.deadline["at"] == T0 + 4.2 * H
    # each job's slot is the one its node is given: what `maintain plan` shows is what apply reserves
    assert all(j["slot"] == plan.slots[j["nodes"][0]][0] for j in jobs.values())
    assert all(j["end"] <= j["slot"] for j in jobs.values() if j["action"] == "wait")


def test_a_deadline_only_the_rounds_could_keep_is_refused_in_one_line():
    # 3 rounds of 2 fit in 3.05 h; with the canary alone the slots need 4 h whatever is stopped
    with pytest.raises(DeadlineError, match=r"end \d+ (s|min) after the deadline") as exc:
        _stage_plan([400] * 6, 3.05)
    assert "\n" not in str(exc.value)
