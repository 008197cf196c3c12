"""The evidence gate in the engine: canary against control over the same hours, on the simulated fleet."""

from __future__ import annotations

import json
import math
import random

import pytest
from test_engine import drive, rollout

from slurm_gpufleet.maintain import states as S
from slurm_gpufleet.maintain.reconcile import Engine
from slurm_gpufleet.maintain.store import Store
from slurm_gpufleet.simulators.failures import poisson
from slurm_gpufleet.simulators.rollout import SimFleet

GATED = ('[maintain]\nwaves = [4, 8, "100%"]\nmax_unavailable = 4\nmax_unavailable_per_partition = "100%"\n'
         'canary_per_combo = 0\ngate = "evidence"\ngate_signals = ["xid_soft", "job_fail"]\n'
         'gate_min_soak_s = 3600\ngate_max_soak_s = 86400\npoll_s = 600\n')


def publish_old(fleet):
    for n in fleet.sim.nodes:
        n.extra = json.dumps({"gpufleet": 1, "v": "ok", "drv": "570.172.08", "gpus": "8xNVIDIA H200",
                              "t": "2020-01-01T00:00:00Z"})


def soft_events(fleet, rng, rate_per_node_h, effect, dt, key="xs"):
    """Soft Xids (or another published counter) on every node in service, `effect` times as many on
    upgraded ones."""
    for n in fleet.sim.nodes:
        if n.out(fleet.sim.now) or not n.extra:
            continue
        data = json.loads(n.extra)
        k = poisson(rng, rate_per_node_h * dt / 3600 * (effect if n.upgraded else 1.0))
        if k:
            data[key] = data.get(key, 0) + k
            n.extra = json.dumps(data)


def drive_gated(tmp_path, effect, seed=1, crash_every=None, steps=400, prepare=None, key="xs", base=GATED):
    fleet = SimFleet(40)
    publish_old(fleet)
    engine, store, plan, executor = rollout(tmp_path, fleet, base=base)
    if prepare:
        prepare(fleet, store, plan)
    rng = random.Random(seed)
    state = ""
    for i in range(steps):
        state = engine.step(plan["id"])
        if state in S.ROLLOUT_FINAL or (state == S.R_HALTED and engine.in_flight(plan["id"]) == 0):
            break
        if crash_every and i % crash_every == crash_every - 1:  # kill -9 and `maintain resume`
            executor.active.clear()
            engine = Engine(Store(str(tmp_path / "maintain.db")), fleet.slurm, engine.policy, executor,
                            clock=lambda: fleet.sim.now)
        soft_events(fleet, rng, 0.5, effect, 600, key)
        fleet.advance(fleet.sim.now + 600, executor)
    return fleet, store, plan, state


def test_a_bad_driver_halts_after_the_first_wave_naming_the_signal(tmp_path):
    fleet, store, plan, state = drive_gated(tmp_path, effect=4.0)
    assert state == S.R_HALTED
    assert store.counts(plan["id"]).get(S.DONE, 0) == 4  # the first wave only
    why = store.db.execute("select detail from audit where event = 'rollout halted'").fetchone()[0]
    assert why.startswith("evidence gate: xid_soft: canary "), why
    gate = store.gate(plan["id"])
    assert gate["decision"] == "worse" and gate["ev"]["xid_soft"]["canary_events"] > 0


def test_a_driver_that_remaps_hbm_rows_halts_on_row_remap(tmp_path):
    # rows remapped are kept across boots: only their growth since the node joined its cohort counts
    base = GATED.replace('gate_signals = ["xid_soft", "job_fail"]', 'gate_signals = ["row_remap", "job_fail"]')
    fleet, store, plan, state = drive_gated(tmp_path, effect=4.0, key="rr", base=base)
    assert state == S.R_HALTED
    why = store.db.execute("select detail from audit where event = 'rollout halted'").fetchone()[0]
    assert why.startswith("evidence gate: row_remap: canary "), why
    (tmp_path / "good").mkdir()
    fleet, store, plan, state = drive_gated(tmp_path / "good", effect=1.0, key="rr", base=base)
    assert state == S.R_DONE


def test_a_good_driver_passes_every_gate_after_its_soak(tmp_path):
    fleet, store, plan, state = drive_gated(tmp_path, effect=1.0)
    assert state == S.R_DONE and store.counts(plan["id"]) == {S.DONE: 40}
    passed = [d for (d,) in store.db.execute("select detail from audit where event = 'gate passed'")]
    # ten waves of the budget's 4: a soak where the nodes upgraded doubled (before waves 2, 3, 5 and 9:
    # 4, 8, 16, 32 upgraded), none between
    soaked = [int(d.split(":")[0].split()[1]) for d in passed if "no soak" not in d]
    assert len(passed) == len(plan["waves"]) - 1 and soaked == [1, 2, 4, 8], passed
    assert all("ruled out on xid_soft" in d for d in passed if "no soak" not in d), passed
    opened = dict(store.db.execute("select detail, ts from audit where event = 'gate open'").fetchall())
    passed_at = [t for (t,) in store.db.execute("select ts from audit where event = 'gate passed' order by ts")]
    assert min(passed_at) - min(opened.values()) >= 3600  # never before gate_min_soak_s


def test_a_crash_mid_soak_keeps_the_evidence(tmp_path):
    fleet, store, plan, state = drive_gated(tmp_path, effect=4.0, crash_every=3)
    assert state == S.R_HALTED and store.counts(plan["id"]).get(S.DONE, 0) == 4
    assert store.gate(plan["id"])["decision"] == "worse"


def test_no_decision_at_the_soak_s_bound_goes_on_when_the_canary_is_not_worse(tmp_path):
    fleet = SimFleet(12)
    publish_old(fleet)
    config = GATED.replace("gate_max_soak_s = 86400", "gate_max_soak_h = 2")
    engine, store, plan, executor = rollout(tmp_path, fleet, base=config)
    for _ in range(60):  # no events at all: nothing can be ruled out, and nothing is worse
        if engine.step(plan["id"]) == S.R_DONE:
            break
        fleet.advance(fleet.sim.now + 600, executor)
    assert store.counts(plan["id"]) == {S.DONE: 12}
    passed = [d for (d,) in store.db.execute("select detail from audit where event = 'gate passed'")]
    assert "not worse at confidence 0.95 after the soak's bound (2 h)" in passed[0], passed
    assert all("not worse at confidence 0.95" in d for d in passed[:2]), passed  # 12 nodes: 4, then 8 upgraded
    assert all("no soak" in d for d in passed[2:]), passed
    assert not store.db.execute("select 1 from audit where event = 'gate waiting'").fetchall()


def _worse_canary(fleet, store, plan, per_step=1):
    """Soft Xids on the upgraded nodes only: worse than the control at 0.95, short of the halt line."""
    for n in fleet.sim.nodes:
        if n.upgraded and not n.out(fleet.sim.now):
            data = json.loads(n.extra)
            data["xs"] = data.get("xs", 0) + per_step
            n.extra = json.dumps(data)


def test_a_canary_worse_at_confidence_waits_for_approval_holding_nothing(tmp_path):
    """At the soak's bound a canary worse than the control at gate_confidence, but short of the sequential
    test's halt line, waits for `maintain approve`: every waiting node stays in service (no slot of the
    rollout holds it), `maintain status` says what it waits for, since when, and that it holds 0 nodes."""
    from slurm_gpufleet.cli.output import status_text
    from slurm_gpufleet.maintain.status import rollout_status

    fleet = SimFleet(12)
    publish_old(fleet)
    config = GATED.replace("gate_max_soak_s = 86400", "gate_max_soak_h = 2").replace(
        'gate_signals = ["xid_soft", "job_fail"]', 'gate_signals = ["xid_soft"]')
    engine, store, plan, executor = rollout(tmp_path, fleet, base=config)
    sprinkled = 0
    for _ in range(40):
        engine.step(plan["id"])
        gate = store.gate(plan["id"])
        ev = gate["ev"].get("xid_soft", {}) if gate else {}
        if store.counts(plan["id"]).get(S.DONE) == 4 and sprinkled < 1 and ev.get("canary_node_hours", 0) > 0:
            _worse_canary(fleet, store, plan)  # 4 canary events, 0 on the control: p = (1/3)^4 < 0.05
            sprinkled += 1
        fleet.advance(fleet.sim.now + 600, executor)
    gate = store.gate(plan["id"])
    assert gate["decision"] == "open" and gate["ev"]["xid_soft"]["canary_events"] == 4, gate
    assert store.counts(plan["id"]) == {S.DONE: 4, S.PENDING: 8}
    waiting = store.db.execute("select detail from audit where event = 'gate waiting'").fetchall()
    assert len(waiting) == 1 and "worse at confidence 0.95 on xid_soft" in waiting[0][0], waiting
    # nothing beyond what already ran is held: no reservation of the rollout, every node in service
    assert not [r for r in fleet.slurm.reservations_ if r.startswith(f"gpufleet_{plan['id']}_s")]
    assert not any(n.out(fleet.sim.now) for n in fleet.sim.nodes)
    status = rollout_status(store, engine.s)
    assert status["waiting"]["holds"] == 0 and status["waiting"]["in_progress"] == 0
    assert "maintain approve" in status["waiting"]["for"] and status["waiting"]["since"] <= fleet.sim.now
    assert any(line.startswith("  waiting for `maintain approve` of stage 1") and "holding 0 node(s)" in line
               for line in status_text(status))
    gate["approved"][str(gate["boundary"])] = "root: the Xid 31s are a known firmware quirk"
    store.set_gate(plan["id"], gate, fleet.sim.now)
    for _ in range(5):
        engine.step(plan["id"])
        fleet.advance(fleet.sim.now + 600, executor)
    assert store.counts(plan["id"]).get(S.PENDING, 0) < 8
    assert "approved by root" in store.db.execute("select detail from audit where event = 'gate passed'").fetchone()[0]
    assert rollout_status(store, engine.s)["waiting"] is None


def test_the_soak_is_the_canary_s_exposure_for_the_events_the_test_needs():
    """E0 = ln((1 - a) / a) / (r ln r - r + 1) expected base events (12.37 at r = 2, 0.95 over 6 signals);
    the soak is the time the canary takes to expect them on its densest signal (soft Xids, 0.18 per
    node-day: data/base_rates.toml), between gate_min_soak_s and gate_max_soak_s: a big canary soaks little."""
    from slurm_gpufleet.maintain.evidence import expected_events_needed, exposure_s
    from slurm_gpufleet.maintain.schedule import stage_soak_s
    from slurm_gpufleet.policy import parse_policy

    assert round(expected_events_needed(2.0, 0.95, 6), 2) == 12.37
    six = ("xid_soft", "xid_hard", "ecc", "verdict", "job_fail", "row_remap")
    assert exposure_s(six, 2.0, 0.95, 100) == pytest.approx(12.3717 / (100 * 0.18) * 86400, rel=1e-4)
    assert exposure_s(("job_fail",), 2.0, 0.95, 100) is None  # no published base rate: no exposure rule
    assert exposure_s(six, 2.0, 0.95, 0) is None
    s = parse_policy('[maintain]\ngate = "evidence"\n').maintain
    soaks = [stage_soak_s(s, n) for n in (1, 30, 100, 300, 3000)]
    assert soaks[0] == s.gate_max_soak_s and soaks[-1] == s.gate_min_soak_s
    assert soaks == sorted(soaks, reverse=True) and s.gate_min_soak_s < soaks[2] < s.gate_max_soak_s
    assert stage_soak_s(parse_policy("[maintain]\n").maintain, 10) == 0.0  # no evidence gate, no soak


QUIET = GATED.replace('waves = [4, 8, "100%"]', 'waves = [30, "100%"]').replace(
    "gate_max_soak_s = 86400", "gate_max_soak_s = 604800").replace("max_unavailable = 4", "max_unavailable = 30")


def test_a_quiet_fleet_passes_once_the_canary_was_exposed_as_long_as_the_plan_said(tmp_path):
    """No event anywhere (an idle, healthy fleet): the test alone can never rule "worse" out, so before,
    every stage waited gate_max_soak_s.  Now the stage goes once the 30-node canary has been in service for
    the exposure the test needs (E0 = 9.5 events over 2 signals, at 0.18 soft Xids per node-day: 42.2 h),
    without approval, and at the soak the plan showed.  A canary leaning worse (one soft Xid, none in the
    control) is not let through by exposure."""
    fleet = SimFleet(40)
    publish_old(fleet)
    engine, store, plan, executor = rollout(tmp_path, fleet, base=QUIET)
    assert [len(w["nodes"]) for w in plan["waves"]] == [30, 10]
    (_, soak) = plan["assumptions"]["gate_stage_soak_s"]  # none before the first wave
    assert soak == plan["assumptions"]["gate_soak_s"] and 42 * 3600 < soak < 43 * 3600
    state = drive(fleet, engine, plan, executor, dt=600.0, max_steps=600)
    assert state == S.R_DONE, state
    opened = store.db.execute("select ts, detail from audit where event = 'gate open'").fetchone()
    passed = store.db.execute("select ts, detail from audit where event = 'gate passed'").fetchone()
    assert "no signal worse or leaning worse" in passed[1] and "30 canary node(s)" in passed[1], passed
    assert soak <= passed[0] - opened[0] <= soak + 600 + 1, (passed[0] - opened[0], soak)  # one poll late at most
    assert not store.db.execute("select 1 from audit where event = 'gate waiting'").fetchall()

    (tmp_path / "leaning").mkdir()
    fleet = SimFleet(40)
    publish_old(fleet)
    engine, store, plan, executor = rollout(tmp_path / "leaning", fleet, base=QUIET)
    bumped = []

    def one_soft_xid_on_the_canary(_before):
        done = [n for n in fleet.sim.nodes if n.upgraded and not n.out(fleet.sim.now)]
        gate = store.gate(plan["id"]) or {}
        if not bumped and len(done) == 30 and any(v[0] == "canary" for v in gate.get("last", {}).values()):
            data = json.loads(done[0].extra)
            data["xs"] = data.get("xs", 0) + 1
            done[0].extra = json.dumps(data)
            bumped.append(done[0].name)

    drive(fleet, engine, plan, executor, dt=600.0, max_steps=int(50 * 3600 / 600), on_step=one_soft_xid_on_the_canary)
    assert bumped
    assert store.gate(plan["id"])["ev"]["xid_soft"]["llr"] > 0
    assert not store.db.execute("select 1 from audit where event = 'gate passed'").fetchall()
    assert store.counts(plan["id"]).get(S.PENDING) == 10


@pytest.mark.slow  # whole replays / 12,500 nodes: the slow tier (make test, CI)
def test_simulate_seeds_reports_the_gate_and_bad_input_is_refused(tmp_path):
    from support import run_cli
    from test_simulate import EXCERPT

    config = tmp_path / "gate.toml"
    config.write_text('[maintain]\ncanary_per_combo = 0\nwaves = ["10%", "100%"]\ngate = "evidence"\n'
                      'gate_min_soak_s = 7200\ngate_max_soak_s = 86400\n')
    r = run_cli("maintain", "simulate", "--sacct", EXCERPT, "--nodes", "40", "--strategy", "gpufleet",
                "--rollout-at", "30", "--max-unavailable", "10%", "--config", str(config), "--seeds", "3",
                "--failure-rate", "6.5", "--soft-rate", "3", "--driver-effect", "4", "--json")
    assert r.returncode == 0, r.stderr
    gate = json.loads(r.stdout)["gate"]
    assert gate["seeds"] == 3 and gate["halted"] == 1.0 and gate["upgraded_at_halt"]["p90"] <= 0.1
    assert gate["rates"] == {"failure_per_1000_node_days": 6.5, "soft_per_node_day": 3.0, "driver_effect": 4.0,
                             "repair_h": 4.0}
    r = run_cli("maintain", "simulate", "--sacct", EXCERPT, "--nodes", "40", "--driver-effect", "3")
    assert r.returncode == 2 and b"give --failure-rate R or --soft-rate S" in r.stderr
    for bad, key in (('gate_signals = ["xid"]', "gate_signals"), ("gate_worse_ratio = 1", "gate_worse_ratio"),
                     ("gate_min_soak_s = 0", "gate_min_soak_s")):
        config.write_text(f"[maintain]\n{bad}\n")
        r = run_cli("maintain", "simulate", "--sacct", EXCERPT, "--nodes", "4", "--config", str(config))
        err = r.stderr.decode().strip()
        assert r.returncode == 2 and f":2: {key} " in err and len(err.splitlines()) == 1, err


def first_wave_alone(history_h):
    """The first wave's nodes are the fleet's only B200s: no control peers of their model.  The store holds
    `history_h` node-hours of B200 record on the old driver at 0.5 soft Xids per node-hour."""
    def prepare(fleet, store, plan):
        first = {row["node"] for row in store.nodes(plan["id"]) if row["wave"] == 0}
        assert len(first) == 4
        for n in fleet.sim.nodes:
            if n.name in first:
                n.model = "NVIDIA B200"
                n.extra = n.extra.replace("8xNVIDIA H200", "8xNVIDIA B200")
        if history_h:
            store.set_gate("earlier", {}, 0.0, recorded=[("8xNVIDIA B200", "570.172.08", "xid_soft",
                                                         int(0.5 * history_h), float(history_h))])
    return prepare


def test_a_model_without_control_peers_is_judged_against_the_fleets_record_and_says_so(tmp_path):
    fleet, store, plan, state = drive_gated(tmp_path, effect=4.0, prepare=first_wave_alone(2000))
    assert state == S.R_HALTED and store.counts(plan["id"]).get(S.DONE, 0) == 4
    why = store.db.execute("select detail from audit where event = 'rollout halted'").fetchone()[0]
    assert "the fleet's recorded rate" in why, why
    said = [d for (d,) in store.db.execute("select detail from audit where event = 'gate history'")]
    assert said and said[0].startswith("8xNVIDIA B200: no control peers") and "2000.0 node-h" in said[0], said
    gate = store.gate(plan["id"])
    assert gate["strata"]["8xNVIDIA B200"]["basis"] == "history"
    assert gate["ev"]["xid_soft"]["history_events"] == gate["ev"]["xid_soft"]["canary_events"] > 0
    # the H200s waiting meanwhile were the old driver's record: it grew
    assert store.event_rates()["8xNVIDIA H200"]["xid_soft"][1] > 0
    from support import run_cli

    config = tmp_path / "status.toml"
    config.write_text(f'[maintain]\ndb = "{tmp_path / "maintain.db"}"\ngate = "evidence"\n')
    r = run_cli("maintain", "status", "--config", str(config))
    assert r.returncode == 0, r.stderr
    assert b"8xNVIDIA B200: 4 canary node(s), no control peers: judged against the fleet's record (2000 node-h)" \
        in r.stdout, r.stdout
    r = run_cli("maintain", "status", "--config", str(config), "--json")
    assert json.loads(r.stdout)["gate"]["models"]["8xNVIDIA B200"]["basis"] == "history"


def test_against_the_record_a_good_driver_passes_and_without_a_record_nothing_is_judged(tmp_path):
    for sub in ("good", "none"):
        (tmp_path / sub).mkdir()
    fleet, store, plan, state = drive_gated(tmp_path / "good", effect=1.0, prepare=first_wave_alone(2000))
    assert state == S.R_DONE
    passed = store.db.execute("select detail from audit where event = 'gate passed'").fetchone()[0]
    assert "ruled out on xid_soft" in passed, passed
    fleet, store, plan, state = drive_gated(tmp_path / "none", effect=4.0, prepare=first_wave_alone(0), steps=60)
    assert state == S.R_RUNNING and store.counts(plan["id"]).get(S.DONE, 0) == 4  # held, never halted
    said = store.db.execute("select detail from audit where event = 'gate history'").fetchone()[0]
    assert "not judged" in said and store.gate(plan["id"])["strata"]["8xNVIDIA B200"]["basis"] == "none"


HARD = GATED.replace('gate_signals = ["xid_soft", "job_fail"]', 'gate_signals = ["xid_hard", "verdict", "job_fail"]')


def test_a_driver_whose_failures_drain_their_node_is_halted(tmp_path):
    # the hard Xid and the drain verdict are published in the write that drains the node, and its jobs end
    # NODE_FAIL: the gate counts them for the node that left its cohort (before, all of it counted 0)
    from slurm_gpufleet.simulators.failures import Hazards, Rates, hazard_step

    fleet = SimFleet(40)
    publish_old(fleet)
    engine, store, plan, executor = rollout(tmp_path, fleet, base=HARD)
    # the old driver fails about once in 200 node-days, the new one 2,000 times as often
    hazards = Hazards(Rates(failure_rate=5.0, soft_rate=0.0, driver_effect=2000.0, repair_h=1.0), seed=3,
                      step_s=600)
    state = ""
    for _ in range(600):
        state = engine.step(plan["id"])
        if state in S.ROLLOUT_FINAL or (state == S.R_HALTED and engine.in_flight(plan["id"]) == 0):
            break
        hazard_step(fleet.sim, hazards, 600)
        fleet.advance(fleet.sim.now + 600, executor)
    assert state == S.R_HALTED, (state, store.counts(plan["id"]))
    why = store.db.execute("select detail from audit where event = 'rollout halted'").fetchone()[0]
    assert why.startswith("evidence gate: "), why
    gate = store.gate(plan["id"])
    assert sum(gate["ev"][sig]["canary_events"] for sig in ("xid_hard", "verdict", "job_fail")) > 0
    assert store.counts(plan["id"]).get(S.DONE, 0) <= 8


def test_the_soak_comes_only_where_the_window_widens():
    """The gate soaks before the first stage after the canary, before each wave larger than the one
    before, and where the nodes upgraded have doubled since the last soak; waves the budget cut to one
    size follow one another without a soak between, in the plan's slots as in the engine's gate (one
    rule: schedule.widening)."""
    from slurm_gpufleet.maintain.schedule import slot_times, widening

    four = ["c1", "c2", "c3", "c4"]
    assert widening(four, [["a"], ["b", "d"], ["e", "f"]]) == {1, 2}  # 5 then 7 upgraded: under 2 x 4
    assert widening(["c"], [["a"], ["b", "d"], ["e", "f"], ["g"]]) == {1, 2, 3}  # 4 upgraded before e, f
    assert widening([], [["x"] * 4] * 10) == {1, 2, 4, 8}  # 4, 8, 16, 32 upgraded
    t0 = 1_800_000_000.0
    stages = [["a"], ["b", "d"], ["e", "f"]]
    slots = slot_times({}, four, stages, t0, width=2, upgrade_s=600, soak_s=3600, soaked=widening(four, stages))
    assert {n: t - t0 for n, t in slots.items()} == {**dict.fromkeys(four, 0), "a": 4200, "b": 8400, "d": 8400,
                                                     "e": 9000, "f": 9000}


def test_the_plan_shows_each_stage_s_soak_and_the_test_s_two_boundaries(tmp_path):
    from slurm_gpufleet.maintain import report
    from slurm_gpufleet.maintain.plan import Plan

    fleet = SimFleet(60)  # waves 1 (canary), 1, 2, 6, then the budget's 6 at a time
    engine, store, plan, executor = rollout(tmp_path, fleet, base='[maintain]\nmax_unavailable = 6\n'
                                                                  'gate = "evidence"\ngate_margin = 0.25\n')
    b = plan["assumptions"]["gate_boundaries"]
    alpha = 0.05 / 6  # the confidence split over the six signals
    assert b["halt_llr"] == -b["not_worse_llr"] == round(math.log((1 - alpha) / alpha), 3)
    assert b["not_worse_ratio"] == 1.25 and b["max_soak_s"] == 36 * 3600
    # soaks where the wave widens (1, 2, 6) and where the nodes upgraded doubled (2, 4, 10, 22, 46)
    soaks = plan["assumptions"]["gate_stage_soak_s"]
    assert [k + 1 for k, t in enumerate(soaks) if t] == [1, 2, 3, 4, 6, 10]
    assert soaks[:5] == [36 * 3600] * 4 + [None] and 35 * 3600 < soaks[9] < 36 * 3600  # 46 nodes expose sooner
    text = report.text(Plan.from_dict(plan))
    assert "halts at log likelihood ratio >= 4.779 (the canary 2x the control's rate), opens at <= -4.779 " \
           "(at most 1.25x)" in text
    assert "soak before stage 1: 36h00m, 2: 36h00m, 3: 36h00m, 4: 36h00m, 6: 36h00m, 10: 35h51m; stages 5, 7-9, " \
           "11-12: none (no wider than the one before, the nodes upgraded not yet doubled)" in text


def test_the_plan_s_html_says_the_same_of_the_gate(tmp_path):
    from slurm_gpufleet.maintain import report
    from slurm_gpufleet.maintain.plan import Plan

    fleet = SimFleet(60)
    engine, store, plan, executor = rollout(tmp_path, fleet, base='[maintain]\nmax_unavailable = 6\ngate = "evidence"\n')
    page = report.html(Plan.from_dict(plan))
    assert "Evidence gate, per signal: halts at log likelihood ratio &gt;= 4.779" in page
    assert "Soak before stage 1: 36h00m, 2: 36h00m, 3: 36h00m, 4: 36h00m, 6: 36h00m, 10: 35h51m; stages 5, " \
           "7-9, 11-12: none (no wider than the one before, the nodes upgraded not yet doubled)." in page
